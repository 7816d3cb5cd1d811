//! Settings the Debian way: every global option bcd node uses also comes from a `BCD_…`
//! variable (what `/etc/default/bcd` sets for the unit), a flag winning over its variable.

use std::path::Path;
use std::process::Command;

fn bcd() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bcd"));
    for (key, _) in std::env::vars() {
        if key.starts_with("BCD_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

// What broke: bcd read its settings from flags only, so the unit could not take them from
// /etc/default/bcd.
#[test]
fn the_global_options_come_from_bcd_variables_and_a_flag_wins() {
    let host = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts/hgx-h100");
    let data = tempfile::tempdir().unwrap();
    let out = bcd()
        .arg("--host")
        .arg(&host)
        .args(["diag"])
        .env("BCD_DATA_DIR", data.path().join("from-env"))
        .env("BCD_API_SOCKET", data.path().join("none.sock"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("{}", data.path().join("from-env").display())),
        "{text}"
    );
    let out = bcd()
        .arg("--host")
        .arg(&host)
        .arg("--data-dir")
        .arg(data.path().join("from-flag"))
        .args(["diag"])
        .env("BCD_DATA_DIR", data.path().join("from-env"))
        .env("BCD_API_SOCKET", data.path().join("none.sock"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("from-flag") && !text.contains("from-env"),
        "{text}"
    );
    // The XID overrides too, checked as the flags are.
    let out = bcd()
        .arg("--host")
        .arg(&host)
        .arg("status")
        .env("BCD_XID_IGNORE", "13")
        .env("BCD_XID_UNHEALTHY", "13")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("XID 13 is given to both --xid-ignore and --xid-unhealthy"));
}

#[test]
fn the_example_defaults_file_names_only_variables_bcd_node_reads() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/default/bcd"),
    )
    .unwrap();
    let help = bcd().args(["node", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let mut named = 0;
    for line in text.lines() {
        let Some(setting) = line.strip_prefix('#').and_then(|l| l.split_once('=')) else {
            continue;
        };
        let var = setting.0;
        if !var.starts_with("BCD_") || var.contains(' ') {
            continue;
        }
        named += 1;
        if var == "BCD_LOG" {
            continue;
        }
        assert!(
            help.contains(&format!("env: {var}=")),
            "packaging/default/bcd sets {var}, which bcd node --help does not name"
        );
    }
    assert!(named >= 10, "{named}");
}
