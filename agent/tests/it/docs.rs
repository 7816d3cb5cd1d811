//! The man pages and shell completions the package installs: `bcd`'s are what its clap
//! definitions make (`bcd generate-docs`), `bcd-helper`'s page names every flag its `--help`
//! lists, and bash loads the completion.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn packaging() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging")
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&path).unwrap(),
            )
        })
        .collect()
}

// What broke: bcd had no man pages and no shell completions.
#[test]
fn the_packaged_man_pages_and_completions_are_what_the_command_line_makes() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("generate-docs")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    for sub in ["man", "completions"] {
        let made = files(&dir.path().join(sub));
        let mut packaged = files(&packaging().join(sub));
        packaged.remove("bcd-helper.8");
        assert_eq!(
            made.keys().collect::<Vec<_>>(),
            packaged.keys().collect::<Vec<_>>(),
            "packaging/{sub} is stale: run cargo run -p bcd -- generate-docs packaging"
        );
        for (name, text) in &made {
            assert!(
                packaged[name] == *text,
                "packaging/{sub}/{name} is stale: run cargo run -p bcd -- generate-docs packaging"
            );
        }
    }
    let man = files(&packaging().join("man"));
    assert!(man.contains_key("bcd-status.1") && man.contains_key("bcd-node.1"));
    // What broke: bcd.1 named a bcd-helper(1) page that does not exist.
    let top = String::from_utf8_lossy(&man["bcd.1"]);
    assert!(
        !top.contains("bcd\\-helper(1)") && top.contains("bcd\\-helper\\-ping(1)"),
        "bcd.1 names the pages there are"
    );
    let status = String::from_utf8_lossy(&man["bcd-status.1"]);
    assert!(
        status.contains("Exit status: 0"),
        "the exit statuses are in the page"
    );
}

// What broke: bcd-helper, which has no clap, had no page, and a hand-written one can fall
// behind its flags.
#[test]
fn the_helpers_man_page_names_every_flag_its_help_lists() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_bcd")).with_file_name("bcd-helper");
    let Some(helper) = bcd_testkit::built(&bin) else {
        return;
    };
    let out = Command::new(helper).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let flags: Vec<&str> = help
        .split_whitespace()
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.trim_end_matches([',', '.', ')', ';']))
        .collect();
    assert!(flags.len() >= 25, "{flags:?}");
    let page = std::fs::read_to_string(packaging().join("man/bcd-helper.8")).unwrap();
    for flag in flags {
        let roff = flag.replace('-', "\\-");
        assert!(
            page.contains(&format!(".BI {roff} ")) || page.contains(&format!(".B {roff}\n")),
            "bcd-helper.8 does not describe {flag}"
        );
    }
    assert!(page.contains("BCD_HELPER_LOG"));
}

#[test]
fn bash_loads_the_completion_and_completes_the_subcommands() {
    let script = format!(
        "source {}; COMP_WORDS=(bcd sta); COMP_CWORD=1; COMP_LINE='bcd sta'; COMP_POINT=7; _bcd bcd sta bcd; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        packaging().join("completions/bcd.bash").display()
    );
    let out = Command::new("bash").args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let words = String::from_utf8_lossy(&out.stdout);
    assert!(words.lines().any(|w| w == "status"), "{words}");
}

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// GitHub's anchor of a heading: lower case, punctuation dropped (`-` and `_` kept), spaces
/// as `-`.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            code = !code;
        } else if !code && line.starts_with('#') {
            out.push(anchor_of(line.trim_start_matches('#')));
        }
    }
    out
}

/// The relative links of a Markdown file (outside code blocks): (target path, anchor).
fn links(text: &str) -> Vec<(String, Option<String>)> {
    let mut prose = String::new();
    let mut code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            code = !code;
        } else if !code {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    link.captures_iter(&prose)
        .map(|c| c[1].to_owned())
        .filter(|t| !t.starts_with("http://") && !t.starts_with("https://"))
        .map(|t| match t.split_once('#') {
            Some((path, a)) => (path.to_owned(), Some(a.to_owned())),
            None => (t, None),
        })
        .collect()
}

/// The front page and every page of the manual.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

// What broke: the README was the whole manual (1,762 lines) with no page structure. The
// manual is in docs/: every relative link and #anchor resolves, every page is reachable from
// the index, and the front page stays short.
#[test]
fn every_link_of_the_manual_resolves_and_every_page_is_reachable_from_the_index() {
    let mut broken = Vec::new();
    let mut reached: std::collections::BTreeSet<PathBuf> = std::collections::BTreeSet::new();
    let index = std::fs::canonicalize(repo().join("docs/README.md")).unwrap();
    let mut todo = vec![index.clone()];
    let mut graph: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
    for page in pages() {
        let page = std::fs::canonicalize(&page).unwrap();
        let text = std::fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap().to_path_buf();
        for (target, anchor) in links(&text) {
            let file = if target.is_empty() {
                page.clone()
            } else {
                match std::fs::canonicalize(dir.join(&target)) {
                    Ok(f) => f,
                    Err(_) => {
                        broken.push(format!("{}: {target} does not exist", page.display()));
                        continue;
                    }
                }
            };
            if let Some(a) = anchor.filter(|a| !a.is_empty()) {
                let there = std::fs::read_to_string(&file).unwrap_or_default();
                if !anchors(&there).contains(&a) {
                    broken.push(format!(
                        "{}: #{a} is no heading of {target}",
                        page.display()
                    ));
                }
            }
            if file.extension().is_some_and(|e| e == "md") {
                graph.entry(page.clone()).or_default().push(file);
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    while let Some(page) = todo.pop() {
        if reached.insert(page.clone()) {
            todo.extend(graph.get(&page).cloned().unwrap_or_default());
        }
    }
    let unreached: Vec<String> = pages()
        .into_iter()
        .map(|p| std::fs::canonicalize(p).unwrap())
        .filter(|p| !reached.contains(p))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        unreached.is_empty(),
        "pages the index does not reach: {unreached:?}"
    );
    let front = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(front.lines().count() <= 250, "the front page is long");
    assert!(front.contains("./run-tests") && front.contains("cargo run --release -p bcd"));
}
