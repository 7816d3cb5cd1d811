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
