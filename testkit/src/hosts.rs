//! The repository's demo hosts for tests: where they are, a copy a test may edit, the folders
//! and sockets of one `bcd node` under test, and the root helper's arguments for such a
//! sandbox. The binaries' paths stay the caller's (`env!("CARGO_BIN_EXE_bcd")` exists only in
//! the crate's own tests).

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root (where `testdata/` is).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the test kit is a folder of the repository")
        .to_path_buf()
}

/// `testdata/hosts`, the demo hosts.
pub fn hosts_dir() -> PathBuf {
    repo().join("testdata/hosts")
}

/// A copy of `testdata/hosts/<name>` (with the replay script beside it, as each host's
/// `bin/nvidia-smi` expects) in `dir`; returns the copy's folder.
pub fn copy_host(dir: &Path, name: &str) -> PathBuf {
    let copy = dir.join(name);
    let copied = Command::new("cp")
        .arg("-a")
        .arg(hosts_dir().join(name))
        .arg(&copy)
        .status()
        .unwrap();
    assert!(copied.success(), "cp -a of the fake host {name} failed");
    std::fs::copy(
        hosts_dir().join("replay-nvidia-smi"),
        dir.join("replay-nvidia-smi"),
    )
    .unwrap();
    copy
}

/// This process's uid (the owner of `/proc/self`).
pub fn uid() -> u32 {
    std::fs::metadata("/proc/self").unwrap().uid()
}

/// The folders and sockets of one `bcd node` under test: a recording copy of a fake host,
/// a CDI folder holding NVIDIA's spec for the 8-GPU demo host, and the data folder and the
/// two sockets' paths (nothing created there yet).
#[derive(Debug)]
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
    /// The global options that point `bcd` at this sandbox: `--host`, `--data-dir`,
    /// `--cdi-dir`, `--helper-socket` and `--api-socket` (as text: a stand-in takes them as
    /// JSON).
    pub fn global_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for (flag, path) in [
            ("--host", &self.host),
            ("--data-dir", &self.data),
            ("--cdi-dir", &self.cdi),
            ("--helper-socket", &self.helper_sock),
            ("--api-socket", &self.api_sock),
        ] {
            args.push(flag.to_owned());
            args.push(path.display().to_string());
        }
        args
    }

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

/// The root helper's arguments for a sandbox in `dir` on the fake host copy `host`: this
/// uid allowed, no Landlock (the fake sysfs is not the kernel's), its audit log, staging and
/// lock folders in `dir` (never the host's), the host's `nvidia-smi` and sysfs. The caller
/// adds how it listens.
pub fn helper_args(dir: &Path, host: &Path) -> Vec<String> {
    vec![
        "--allow-uid".into(),
        uid().to_string(),
        "--no-sandbox".into(),
        "--audit-log".into(),
        dir.join("audit.log").display().to_string(),
        "--nvidia-smi".into(),
        host.join("bin/nvidia-smi").display().to_string(),
        "--sysfs-root".into(),
        host.join("root/sys").display().to_string(),
        "--staging-dir".into(),
        dir.join("staging").display().to_string(),
        "--lock-dir".into(),
        dir.join("locks").display().to_string(),
    ]
}
