//! `packaging/demo`: the throwaway node and helper on a copy of a demo host, as a newcomer runs
//! it. It must get ready, let a vfio-pci round trip and an XID complete against the copy (the
//! fake kernel playing the kernel's side of driver binding), and leave nothing behind on
//! Ctrl-C.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::processes::repo;

// What broke: no quick start ran a node with its helper on a demo host (the helper's defaults
// act on the real /sys), and the demo host's sysfs had no kernel behind it, so vfio bind
// waited 30 s and failed.
#[test]
fn the_demo_runs_a_node_and_helper_on_a_copy_that_binds_and_goes_away_on_ctrl_c() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_bcd"));
    let dir = bin.parent().unwrap().to_path_buf();
    for name in ["bcd-helper", "bcd-fake-kernel"] {
        if bcd_testkit::built(&dir.join(name)).is_none() {
            return;
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut demo = Command::new(repo().join("packaging/demo"))
        .env("BCD_DEMO_BIN", &dir)
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(demo.stdout.take().unwrap());
    let mut said = String::new();
    let mut socket = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        said.push_str(&line);
        if let Some(rest) = line.trim().strip_prefix("export BCD_API_SOCKET=") {
            socket = rest.split_whitespace().next().map(PathBuf::from);
        }
        if line.starts_with("demo: ready") {
            break;
        }
    }
    let socket = socket.unwrap_or_else(|| panic!("the demo said no socket: {said}"));
    let bcd = |args: &[&str]| {
        Command::new(&bin)
            .env("BCD_API_SOCKET", &socket)
            .args(args)
            .output()
            .unwrap()
    };
    let started = Instant::now();
    let bind = bcd(&["vfio", "bind", "0000:18:00.0"]);
    assert!(bind.status.success(), "{bind:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the fake kernel let go at once"
    );
    let release = bcd(&["vfio", "release", "0000:18:00.0"]);
    assert!(release.status.success(), "{release:?}");
    let work = socket.parent().unwrap().to_path_buf();
    assert!(
        work.starts_with(tmp.path()),
        "everything is in the demo's folder"
    );
    std::fs::OpenOptions::new()
        .append(true)
        .open(work.join("hosts/hgx-h100/root/dev/kmsg"))
        .and_then(|mut f| {
            std::io::Write::write_all(
                &mut f,
                b"4,9001,9000000000,-;NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=x, An uncorrectable double bit error.\n",
            )
        })
        .unwrap();
    let mut unhealthy = false;
    for _ in 0..50 {
        let status = bcd(&["status"]);
        if String::from_utf8_lossy(&status.stdout).contains("UNHEALTHY") {
            unhealthy = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(unhealthy, "the XID reached the node's status");
    // Ctrl-C: the demo stops both and removes its folder.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(demo.id()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = demo.wait().unwrap();
    assert!(!work.exists(), "{} is left after Ctrl-C", work.display());
    assert_ne!(status.code(), Some(0), "interrupted");
}
