//! What every JSON document bcd prints or serves begins with: `schema_version`, the number a
//! program checks before it trusts the keys. A key is only ever added within one version; a
//! key removed or changing meaning raises it. Files bcd keeps (`holds.json`, ...) have their
//! own formats and are not documents in this sense, and neither is a CDI spec, which is CDI's.

use serde::Serialize;

/// The schema version of every document bcd prints (`--json`) or its API answers.
pub const SCHEMA_VERSION: u32 = 1;

/// A document with its `schema_version` first and then its own keys, as printed and served.
/// `T` must serialise as a JSON object (a struct or a map): its keys are merged in.
#[derive(Debug, Serialize)]
pub struct Versioned<'a, T: ?Sized> {
    schema_version: u32,
    #[serde(flatten)]
    document: &'a T,
}

/// `document` with [`SCHEMA_VERSION`].
pub fn versioned<T: ?Sized>(document: &T) -> Versioned<'_, T> {
    Versioned {
        schema_version: SCHEMA_VERSION,
        document,
    }
}

/// The document of a command that could not do its job: `{"schema_version", "error": {"code",
/// "message"}}`, printed on stdout with `--json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorDocument<'a> {
    schema_version: u32,
    error: ErrorFields<'a>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct ErrorFields<'a> {
    code: &'a str,
    message: &'a str,
}

impl<'a> ErrorDocument<'a> {
    /// The error document for `code` (a kind, for programs: `nvidia-smi-failed`,
    /// `node-unreachable`, the API's own codes, ...) and `message` (the sentence).
    pub fn new(code: &'a str, message: &'a str) -> Self {
        Self {
            schema_version: SCHEMA_VERSION,
            error: ErrorFields { code, message },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Doc {
        b: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        a: Option<u32>,
    }

    // What broke: no document said which version of its keys it carries, so a program could
    // not tell a changed meaning from an old node.
    #[test]
    fn a_document_carries_its_schema_version_first_and_keeps_its_own_order() {
        let text = serde_json::to_string(&versioned(&Doc { b: 2, a: None })).unwrap();
        assert_eq!(text, r#"{"schema_version":1,"b":2}"#);
        let map: std::collections::BTreeMap<&str, u32> = [("z", 1), ("y", 2)].into();
        let text = serde_json::to_string(&versioned(&map)).unwrap();
        assert_eq!(text, r#"{"schema_version":1,"y":2,"z":1}"#);
    }

    #[test]
    fn an_error_document_names_its_code_and_sentence() {
        let text = serde_json::to_string(&ErrorDocument::new("node-unreachable", "no")).unwrap();
        assert_eq!(
            text,
            r#"{"schema_version":1,"error":{"code":"node-unreachable","message":"no"}}"#
        );
    }
}
