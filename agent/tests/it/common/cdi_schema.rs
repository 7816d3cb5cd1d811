//! A small JSON-schema checker for the CDI schema in `../shared/fixtures/cdi-schema/`: the
//! keywords that schema uses (`$ref` within and across its two files, `type`, `properties`,
//! `required`, `items`, `patternProperties`, `minimum`, `maximum`), which is all a written
//! spec must satisfy. Unknown keywords are ignored, as a validator does. No crate needed.

use std::path::PathBuf;

use serde_json::Value;

/// The CDI schema's two files, when `../shared` is next to the checkout.
pub struct CdiSchema {
    schema: Value,
    defs: Value,
}

impl CdiSchema {
    /// Loads the schema; `None` (a recorded skip, also under CI) when `../shared` is absent.
    pub fn load() -> Option<Self> {
        let dir =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/cdi-schema");
        let read = |name: &str| -> Option<Value> {
            let bytes = std::fs::read(dir.join(name)).ok()?;
            serde_json::from_slice(&bytes).ok()
        };
        match (read("schema.json"), read("defs.json")) {
            (Some(schema), Some(defs)) => Some(Self { schema, defs }),
            _ => {
                bcd_testkit::skip(
                    "the CDI schema (../shared/fixtures/cdi-schema) is not beside this checkout",
                );
                None
            }
        }
    }

    /// Every violation of the schema by `doc`, as `path: what` lines; empty when it is valid.
    pub fn violations(&self, doc: &Value) -> Vec<String> {
        let mut out = Vec::new();
        self.check(&self.schema, false, doc, "$", &mut out);
        out
    }

    /// `in_defs`: whether `#/...` references resolve in defs.json (the file `node` is from).
    fn check(&self, node: &Value, in_defs: bool, doc: &Value, at: &str, out: &mut Vec<String>) {
        if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
            let (file, pointer) = reference.split_once('#').unwrap_or((reference, ""));
            let target_in_defs = file == "defs.json" || (file.is_empty() && in_defs);
            let root = if target_in_defs {
                &self.defs
            } else {
                &self.schema
            };
            match root.pointer(pointer) {
                Some(target) => self.check(target, target_in_defs, doc, at, out),
                None => out.push(format!("{at}: unresolvable $ref {reference}")),
            }
            return;
        }
        if let Some(ty) = node.get("type").and_then(Value::as_str) {
            let ok = match ty {
                "object" => doc.is_object(),
                "array" => doc.is_array(),
                "string" => doc.is_string(),
                "integer" => doc.is_i64() || doc.is_u64(),
                "boolean" => doc.is_boolean(),
                "number" => doc.is_number(),
                _ => true,
            };
            if !ok {
                out.push(format!("{at}: not {ty}: {doc}"));
                return;
            }
        }
        if let Some(n) = doc.as_f64() {
            if let Some(min) = node.get("minimum").and_then(Value::as_f64) {
                if n < min {
                    out.push(format!("{at}: {n} < {min}"));
                }
            }
            if let Some(max) = node.get("maximum").and_then(Value::as_f64) {
                if n > max {
                    out.push(format!("{at}: {n} > {max}"));
                }
            }
        }
        if let Some(obj) = doc.as_object() {
            for name in node
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !obj.contains_key(name) {
                    out.push(format!("{at}: missing {name}"));
                }
            }
            let props = node.get("properties").and_then(Value::as_object);
            for (key, value) in obj {
                if let Some(sub) = props.and_then(|p| p.get(key)) {
                    self.check(sub, in_defs, value, &format!("{at}.{key}"), out);
                }
                // The schema's only pattern is ".{1,}": any non-empty key.
                if let Some(patterns) = node.get("patternProperties").and_then(Value::as_object) {
                    for sub in patterns.values() {
                        if !key.is_empty() {
                            self.check(sub, in_defs, value, &format!("{at}.{key}"), out);
                        }
                    }
                }
            }
        }
        if let (Some(items), Some(list)) = (node.get("items"), doc.as_array()) {
            for (i, item) in list.iter().enumerate() {
                self.check(items, in_defs, item, &format!("{at}[{i}]"), out);
            }
        }
    }
}
