//! `bcd helper ping` against a real `bcd-helper` started by the test, and against nothing.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `bcd-helper` beside `bcd` in the target folder (built by `cargo test --workspace`).
fn helper_binary() -> Option<PathBuf> {
    bcd_testkit::built(&PathBuf::from(env!("CARGO_BIN_EXE_bcd")).with_file_name("bcd-helper"))
}

#[test]
fn ping_prints_the_helpers_version_and_operations() {
    let Some(helper) = helper_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("helper.sock");
    let mut child = Command::new(helper)
        .arg("--listen")
        .arg(&socket)
        .arg("--no-sandbox")
        // Never the host's /var/lib/bcd-helper/locks.
        .arg("--lock-dir")
        .arg(dir.path().join("locks"))
        .arg("--allow-uid")
        .arg(nix::unistd::getuid().as_raw().to_string())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !socket.exists() && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .args(["helper", "ping", "--json", "--helper-socket"])
        .arg(&socket)
        .output()
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["protocol_version"], bcd_protocol::PROTOCOL_VERSION);
    // --no-sandbox: the helper says it runs unconfined.
    assert!(
        doc["sandbox"].as_str().is_some_and(|s| s.contains("none")),
        "{doc}"
    );
    let ops: Vec<&str> = doc["operations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(
        ops.contains(&"vfio.bind") && ops.contains(&"gpu.reset"),
        "{ops:?}"
    );
}

#[test]
fn ping_without_a_helper_says_what_to_do() {
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .args([
            "helper",
            "ping",
            "--helper-socket",
            "/nonexistent/helper.sock",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "bcd could not do its job");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach bcd-helper at /nonexistent/helper.sock")
            && err.contains("systemctl enable --now bcd-helper.socket"),
        "{err}"
    );
}
