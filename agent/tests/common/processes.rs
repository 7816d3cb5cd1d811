//! Test helpers shared by the tests that start `bcd node` and its peers: the repository's
//! root, the demo host's GPU UUIDs, children killed when a test ends, free loopback ports,
//! bounded waits, and copies of the fake hosts a test may edit.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The repository's root (where `testdata/` is).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The 8 GPUs of `testdata/hosts/hgx-h100`; GPU 3 is in MIG mode.
pub const H100: [&str; 8] = [
    "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b",
    "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a",
    "GPU-30e15e2f-5971-0b16-04be-39a46d1071ce",
    "GPU-b9036d74-bff6-b565-c003-dc53279ae2bd",
    "GPU-123a1421-1172-b334-14d9-b65b34232574",
    "GPU-de2e2aa2-202d-33bc-abdc-234d0197d1b8",
    "GPU-8032961a-3b38-ab58-6c00-1b9ef125ea99",
    "GPU-70823a7e-f12c-9777-a04d-fa2e9a8cf5b8",
];

/// GPU 3's MIG devices: `Device 0` (GI 1) and `Device 1` (GI 2).
pub const H100_MIG: [&str; 2] = [
    "MIG-65db3e42-f991-a575-c20e-8350d31e437c",
    "MIG-0c50056c-bc70-320a-5ed7-3d189e36173c",
];

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

/// The root helper's arguments for a sandbox in `dir` on the fake host copy `host`: this
/// uid allowed, no Landlock (the fake sysfs is not the kernel's), its audit log and staging
/// folder in `dir`, the host's `nvidia-smi` and sysfs. The caller adds how it listens.
pub fn helper_args(dir: &Path, host: &Path) -> Vec<String> {
    vec![
        "--allow-uid".into(),
        nix::unistd::getuid().as_raw().to_string(),
        "--no-sandbox".into(),
        "--audit-log".into(),
        dir.join("audit.log").display().to_string(),
        "--nvidia-smi".into(),
        host.join("bin/nvidia-smi").display().to_string(),
        "--sysfs-root".into(),
        host.join("root/sys").display().to_string(),
        "--staging-dir".into(),
        dir.join("staging").display().to_string(),
        // Never the host's /var/lib/bcd-helper/locks.
        "--lock-dir".into(),
        dir.join("locks").display().to_string(),
    ]
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
