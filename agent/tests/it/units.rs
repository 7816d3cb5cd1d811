//! The packaged systemd units: `systemd-analyze verify` accepts them, and
//! `systemd-analyze security --offline=yes` rates `bcd.service` at most 2.0 and
//! `bcd-helper.service` at most 4.0.

use std::path::{Path, PathBuf};

fn units() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/systemd")
}

/// `systemd-analyze`, with a private `/run` (it writes `/run/systemd/systemd-units-load`).
fn analyze() -> Option<std::process::Command> {
    bcd_testkit::with_private_run(Path::new("systemd-analyze"))
}

/// The units with their `ExecStart=` binaries pointed at the ones this build made.
fn staged() -> Option<tempfile::TempDir> {
    bcd_testkit::require(bcd_testkit::Peer::SystemdAnalyze)?;
    // Checked here, so that each run below can expect it.
    analyze()?;
    let bcd = PathBuf::from(env!("CARGO_BIN_EXE_bcd"));
    let helper = bcd.with_file_name("bcd-helper");
    let helper = if helper.exists() { helper } else { bcd.clone() };
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(units()).unwrap() {
        let entry = entry.unwrap();
        let text = std::fs::read_to_string(entry.path()).unwrap();
        let text = text
            .replace("/usr/libexec/bcd/bcd-helper", &helper.to_string_lossy())
            .replace("/usr/bin/bcd ", &format!("{} ", bcd.display()));
        std::fs::write(dir.path().join(entry.file_name()), text).unwrap();
    }
    Some(dir)
}

#[test]
fn the_units_verify() {
    let Some(dir) = staged() else { return };
    let out = analyze()
        .expect("checked by staged()")
        .arg("verify")
        .args(
            ["bcd.service", "bcd-helper.service", "bcd-helper.socket"].map(|u| dir.path().join(u)),
        )
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {said}"
    );
}

fn exposure(dir: &Path, unit: &str) -> f64 {
    let out = analyze()
        .expect("checked by staged()")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(dir.join(unit))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no rating for {unit}: {text}"));
    let value = line
        .split(':')
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
        .unwrap();
    value.parse().unwrap()
}

#[test]
fn the_services_are_hardened() {
    let Some(dir) = staged() else { return };
    let agent = exposure(dir.path(), "bcd.service");
    let helper = exposure(dir.path(), "bcd-helper.service");
    eprintln!("systemd-analyze security: bcd.service {agent}, bcd-helper.service {helper}");
    assert!(agent <= 2.0, "bcd.service is rated {agent}, above 2.0");
    assert!(
        helper <= 4.0,
        "bcd-helper.service is rated {helper}, above 4.0"
    );
}

/// The value of `key=` in a unit's text (the last one, as systemd reads it).
fn setting(text: &str, key: &str) -> Option<String> {
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_owned)
}

// The helper's socket sat in /run/bcd, bcd.service's RuntimeDirectory (chowned to the
// unprivileged user); the save folder's ReadOnlyPaths had no "-" (no start without libvirt);
// TimeoutStopSec=45 was shorter than the 80 s drain; ProtectKernelTunables= and resource
// limits were missing.
#[test]
fn the_helpers_units_keep_its_socket_root_owned_and_its_limits() {
    let socket = std::fs::read_to_string(units().join("bcd-helper.socket")).unwrap();
    let service = std::fs::read_to_string(units().join("bcd-helper.service")).unwrap();
    let agent = std::fs::read_to_string(units().join("bcd.service")).unwrap();
    let listen = setting(&socket, "ListenStream").unwrap();
    assert_eq!(listen, bcd::helper_client::DEFAULT_SOCKET);
    let runtime = setting(&agent, "RuntimeDirectory").unwrap();
    assert!(
        !listen.starts_with(&format!("/run/{runtime}/")),
        "the helper's socket is inside bcd.service's RuntimeDirectory"
    );
    assert_eq!(setting(&socket, "SocketUser").as_deref(), Some("root"));
    let read_only = setting(&service, "ReadOnlyPaths").unwrap();
    assert!(
        read_only.split_whitespace().all(|p| p.starts_with('-')),
        "{read_only}"
    );
    let stop: u64 = setting(&service, "TimeoutStopSec")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        stop > 80,
        "TimeoutStopSec={stop} is not longer than the 80 s drain"
    );
    for key in [
        "ProtectKernelTunables",
        "LimitNOFILE",
        "TasksMax",
        "MemoryMax",
    ] {
        assert!(
            setting(&service, key).is_some(),
            "bcd-helper.service lacks {key}="
        );
    }
    let tmpfiles = std::fs::read_to_string(units().join("../tmpfiles.d/bcd.conf")).unwrap();
    assert!(
        tmpfiles.contains("d /run/bcd-helper 0755 root root"),
        "{tmpfiles}"
    );
}
