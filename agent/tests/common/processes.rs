//! Test helpers shared by the tests that start `bcd node` and its peers: the repository's
//! root, children killed when a test ends, free loopback ports, bounded waits, and copies of
//! the fake hosts a test may edit.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The repository's root (where `testdata/` is).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Kills a child when dropped, so a failing test leaves no process behind.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback address nothing listens on now.
pub fn free_port() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().to_string()
}

/// Polls `ready` every 50 ms; fails the test naming `what` past `bound`.
pub fn wait_for(what: &str, bound: Duration, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(
            started.elapsed() < bound,
            "{what} did not happen within {bound:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A copy of `testdata/hosts/<name>` (with the replay script beside it, as each host's
/// `bin/nvidia-smi` expects) in `dir`; returns the copy's folder.
pub fn copy_host(dir: &Path, name: &str) -> PathBuf {
    let copy = dir.join(name);
    let copied = Command::new("cp")
        .arg("-a")
        .arg(repo().join("testdata/hosts").join(name))
        .arg(&copy)
        .status()
        .unwrap();
    assert!(copied.success(), "cp -a of the fake host {name} failed");
    std::fs::copy(
        repo().join("testdata/hosts/replay-nvidia-smi"),
        dir.join("replay-nvidia-smi"),
    )
    .unwrap();
    copy
}
