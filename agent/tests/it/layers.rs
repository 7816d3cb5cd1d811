//! The agent's layering, read from its sources: no import circle between files, and the floors
//! import only downwards. A reference is a `crate::…` or `super::…` path (grouped `{…}` ones
//! too) in a file's code outside its tests, mapped to the file that defines the longest prefix
//! of it. A `mod.rs` naming its own children by relative path is not a reference. Test-only
//! files (`#[cfg(test)] mod x;`) and `#[cfg(test)] mod x { … }` blocks are left out.
//!
//! The floors, from the bottom: `sys/` (imports nothing of bcd); `smi/`, `inventory/`,
//! `health/`, `cdi/` and the device vocabulary (never `doctor/`, `node/`, `kubelet/`, `dra/`,
//! `commands/` or the command line; the device vocabulary and its hold store never `cdi/`);
//! `node/` (never `kubelet/` or `dra/`); `dra/` (never `node/`, `doctor/`, `labels/`,
//! `commands/`, the command line or `kubelet/`), and `kubelet/` never `dra/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use regex::Regex;

/// Every `.rs` file under `agent/src`, by its path there, with its text.
fn sources() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    out
}

/// The module path of a file (`node/api.rs` → `[node, api]`, `cdi/mod.rs` → `[cdi]`).
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The file defining the longest prefix of `path`.
fn resolve(files: &BTreeMap<String, String>, path: &[String]) -> Option<String> {
    (1..=path.len()).rev().find_map(|n| {
        let prefix = path[..n].join("/");
        [format!("{prefix}.rs"), format!("{prefix}/mod.rs")]
            .into_iter()
            .find(|f| files.contains_key(f))
    })
}

/// The files that are tests only, and the files below them.
fn test_files(files: &BTreeMap<String, String>) -> BTreeSet<String> {
    let declared =
        Regex::new(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;").unwrap();
    let mut out = BTreeSet::new();
    for (file, text) in files {
        let dir = module_of(file).join("/");
        for m in declared.captures_iter(text) {
            for candidate in [
                format!("{dir}/{}.rs", &m[1]),
                format!("{dir}/{}/mod.rs", &m[1]),
            ] {
                let candidate = candidate.trim_start_matches('/').to_owned();
                if files.contains_key(&candidate) {
                    out.insert(candidate);
                }
            }
        }
    }
    let below: Vec<String> = files
        .keys()
        .filter(|f| {
            out.iter()
                .any(|t| f.starts_with(&format!("{}/", t.trim_end_matches(".rs"))))
        })
        .cloned()
        .collect();
    out.extend(below);
    out
}

/// Per file (tests left out), the other files it references.
fn references() -> BTreeMap<String, BTreeSet<String>> {
    let files = sources();
    let tests = test_files(&files);
    let test_block = Regex::new(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{").unwrap();
    let comment = Regex::new(r"//[^\n]*").unwrap();
    let absolute = Regex::new(r"\bcrate((?:::\w+)+)").unwrap();
    let relative = Regex::new(r"\b((?:super::)+)((?:\w+::)*\w+)").unwrap();
    let grouped = Regex::new(r"\b(crate|(?:super::)*super)::\{([^{}]*)\}").unwrap();
    let mut out = BTreeMap::new();
    for (file, text) in &files {
        if tests.contains(file) || file == "main.rs" {
            continue;
        }
        let code = comment
            .replace_all(&without_test_blocks(&test_block, text), "")
            .into_owned();
        let here = module_of(file);
        let up = |n: usize| here[..here.len().saturating_sub(n)].to_vec();
        let mut paths: Vec<Vec<String>> = Vec::new();
        for m in absolute.captures_iter(&code) {
            paths.push(m[1].split("::").skip(1).map(str::to_owned).collect());
        }
        for m in relative.captures_iter(&code) {
            let mut p = up(m[1].matches("super").count());
            p.extend(m[2].split("::").map(str::to_owned));
            paths.push(p);
        }
        for m in grouped.captures_iter(&code) {
            let base = if &m[1] == "crate" {
                Vec::new()
            } else {
                up(m[1].matches("super").count())
            };
            for item in m[2].split(',').map(str::trim).filter(|i| !i.is_empty()) {
                let mut p = base.clone();
                p.extend(
                    item.split(" as ")
                        .next()
                        .unwrap()
                        .split("::")
                        .map(str::to_owned),
                );
                paths.push(p);
            }
        }
        let targets: BTreeSet<String> = paths
            .iter()
            .filter_map(|p| resolve(&files, p))
            .filter(|t| t != file)
            .collect();
        out.insert(file.clone(), targets);
    }
    out
}

/// `text` without its `#[cfg(test)] mod x { … }` blocks: each ends at the next line that is
/// a lone `}` at the start of a line, where rustfmt puts the brace closing a top-level module.
fn without_test_blocks(block: &Regex, text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(m) = block.find(rest) {
        out.push_str(&rest[..m.start()]);
        let after = &rest[m.end()..];
        rest = after.find("\n}\n").map_or("", |at| &after[at + 3..]);
    }
    out.push_str(rest);
    out
}

fn under(file: &str, place: &str) -> bool {
    file == place || file.starts_with(&format!("{}/", place.trim_end_matches(".rs")))
}

#[test]
fn no_import_circle_between_files() {
    let refs = references();
    assert!(
        refs.len() > 100,
        "the sources were not found: {}",
        refs.len()
    );
    // Depth-first, colouring: a reference to a file on the current path is a circle.
    fn visit(
        file: &str,
        refs: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
        circles: &mut Vec<String>,
    ) {
        state.insert(file.to_owned(), 1);
        path.push(file.to_owned());
        for next in refs.get(file).into_iter().flatten() {
            match state.get(next) {
                Some(1) => {
                    let at = path.iter().position(|p| p == next).unwrap();
                    circles.push(format!("{} -> {next}", path[at..].join(" -> ")));
                }
                Some(_) => {}
                None if refs.contains_key(next) => visit(next, refs, state, path, circles),
                None => {}
            }
        }
        path.pop();
        state.insert(file.to_owned(), 2);
    }
    let (mut state, mut circles) = (BTreeMap::new(), Vec::new());
    for file in refs.keys() {
        if !state.contains_key(file) {
            visit(file, &refs, &mut state, &mut Vec::new(), &mut circles);
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_floors_import_only_downwards() {
    let below_the_node = [
        "sys",
        "smi",
        "inventory",
        "health",
        "cdi",
        "device/policy.rs",
        "device/id.rs",
        "device/hold.rs",
    ];
    let above = [
        "doctor", "node", "kubelet", "dra", "commands", "cli.rs", "labels",
    ];
    let mut wrong = Vec::new();
    for (file, targets) in references() {
        for t in &targets {
            let bad = (under(&file, "sys") && !under(t, "sys"))
                || (below_the_node.iter().any(|b| under(&file, b))
                    && above.iter().any(|a| under(t, a)))
                // The device vocabulary, the hold store with it, is the renderer's floor
                // (what broke: device/source.rs imported the store and the catalog from cdi/).
                || (under(&file, "device") && under(t, "cdi"))
                // Neither kubelet plugin borrows from the other (what broke: dra/plugin.rs
                // took its sockets from kubelet/plugin.rs); what both use is beside them.
                || (under(&file, "dra") && under(t, "kubelet"))
                || (under(&file, "kubelet") && under(t, "dra"))
                || (under(&file, "node") && (under(t, "kubelet") || under(t, "dra")))
                // The DRA driver reaches the node through DeviceSource alone.
                || (under(&file, "dra")
                    && ["node", "commands", "cli.rs", "doctor", "labels"]
                        .iter()
                        .any(|a| under(t, a)));
            if bad {
                wrong.push(format!("{file} -> {t}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "references against the floors:\n{}",
        wrong.join("\n")
    );
}
