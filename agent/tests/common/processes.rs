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

/// The folders and sockets of one `bcd node` under test: a recording copy of a fake host,
/// a CDI folder holding NVIDIA's spec for the 8-GPU demo host, and the data folder and the
/// two sockets' paths (nothing created there yet).
pub struct NodeSandbox {
    /// The copy of the fake host; `answers/record` lists each `nvidia-smi` run.
    pub host: PathBuf,
    /// The CDI folder, with `nvidia.json`.
    pub cdi: PathBuf,
    /// The node's data folder.
    pub data: PathBuf,
    /// The helper's socket.
    pub helper_sock: PathBuf,
    /// The node's API socket.
    pub api_sock: PathBuf,
}

impl NodeSandbox {
    /// A sandbox in `dir` on the fake host `name` (its NVIDIA spec is the demo host's).
    pub fn new(dir: &Path, name: &str) -> Self {
        let host = copy_host(dir, name);
        std::fs::write(host.join("answers/record"), "").unwrap();
        let cdi = dir.join("cdi");
        std::fs::create_dir_all(&cdi).unwrap();
        std::fs::copy(
            repo().join("testdata/cdi/hgx-h100-uuid.json"),
            cdi.join("nvidia.json"),
        )
        .unwrap();
        Self {
            host,
            cdi,
            data: dir.join("data"),
            helper_sock: dir.join("helper.sock"),
            api_sock: dir.join("bcd.sock"),
        }
    }
}
