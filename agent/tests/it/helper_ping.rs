//! `bcd helper ping` against a real `bcd-helper` started by the test, and against nothing.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `bcd-helper` beside `bcd` in the target folder (built by `cargo test --workspace`).
fn helper_binary() -> Option<PathBuf> {
    bcd_testkit::built(&PathBuf::from(env!("CARGO_BIN_EXE_bcd")).with_file_name("bcd-helper"))
}

/// `helper` listening on `socket` for this uid, unconfined, with `locks` as its lock folder
/// (never the host's), once the socket is there (at most 10 s).
fn listening(
    helper: &std::path::Path,
    socket: &std::path::Path,
    locks: &std::path::Path,
) -> std::process::Child {
    let child = Command::new(helper)
        .arg("--listen")
        .arg(socket)
        .arg("--no-sandbox")
        .arg("--lock-dir")
        .arg(locks)
        .arg("--allow-uid")
        .arg(nix::unistd::getuid().as_raw().to_string())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !socket.exists() && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn ping_prints_the_helpers_version_and_operations() {
    let Some(helper) = helper_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("helper.sock");
    let mut child = listening(&helper, &socket, &dir.path().join("locks"));
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

// What broke: with the helper's lock folder unusable, `bcd helper ping` listed every operation
// and exited 0, and doctor's helper line passed; the first reset was where the operator found
// out.
#[test]
fn a_helper_whose_lock_folder_is_unusable_fails_ping_and_doctor() {
    let Some(helper) = helper_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("helper.sock");
    // A file where the lock folder should be.
    let locks = dir.path().join("locks");
    std::fs::write(&locks, "").unwrap();
    let mut child = listening(&helper, &socket, &locks);
    let bcd = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_bcd"))
            .arg("--helper-socket")
            .arg(&socket)
            .args(args)
            .output()
            .unwrap()
    };
    let text = bcd(&["helper", "ping"]);
    let json = bcd(&["helper", "ping", "--json"]);
    let doctor = bcd(&[
        "--host",
        &bcd_testkit::hosts_dir()
            .join("hgx-h100")
            .display()
            .to_string(),
        "doctor",
        "--json",
    ]);
    child.kill().unwrap();
    child.wait().unwrap();

    assert_eq!(text.status.code(), Some(1), "a problem found: {text:?}");
    let said = String::from_utf8_lossy(&text.stdout);
    assert!(
        said.contains("bcd-helper cannot run operations on devices")
            && said.contains(&format!(
                "the lock folder {} cannot be used",
                locks.display()
            )),
        "{said}"
    );
    assert!(
        said.lines()
            .next()
            .unwrap()
            .ends_with("(protocol 3): ping, libvirt.gpus"),
        "gpu.reset is not offered: {said}"
    );
    assert_eq!(json.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["device_operations"], false, "{doc}");
    assert_eq!(
        doc["operations"],
        serde_json::json!(["ping", "libvirt.gpus"])
    );

    let report: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let check = |name: &str| {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no {name} line: {report}"))
            .clone()
    };
    let line = check("helper");
    assert_eq!(line["status"], "fail", "{line}");
    assert!(
        line["message"]
            .as_str()
            .unwrap()
            .contains("cannot run operations on devices"),
        "{line}"
    );
    assert_eq!(check("gpu-binding")["status"], "warn");
    assert_eq!(doctor.status.code(), Some(1), "{doctor:?}");
}
