//! The repository's demo hosts for tests: where they are, a copy a test may edit, the folders
//! and sockets of one `bcd node` under test, the root helper's arguments for such a sandbox, and
//! a runner for `bcd` commands against a host. The binaries' paths come from the caller
//! (`env!("CARGO_BIN_EXE_bcd")` exists only in the crate's own tests).

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

/// The names of every demo host (each folder of `testdata/hosts` with a `bin/nvidia-smi`),
/// sorted.
pub fn demo_hosts() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(hosts_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("bin/nvidia-smi").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
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

/// A `bcd` command against a demo host (by name, or any host folder) with a data folder of
/// its own, so nothing a command stores outlives the test.
#[derive(Debug)]
pub struct Bcd {
    command: Command,
    _data: Option<tempfile::TempDir>,
}

impl Bcd {
    /// `bcd --host testdata/hosts/<host> --data-dir <fresh folder>`, `bin` the binary.
    pub fn on(bin: impl AsRef<OsStr>, host: &str) -> Self {
        Self::on_path(bin, &hosts_dir().join(host))
    }

    /// The same on a host folder anywhere (a copy a test edits).
    pub fn on_path(bin: impl AsRef<OsStr>, host: &Path) -> Self {
        let data = tempfile::tempdir().unwrap();
        let mut command = Command::new(bin);
        command
            .arg("--host")
            .arg(host)
            .arg("--data-dir")
            .arg(data.path());
        Self {
            command,
            _data: Some(data),
        }
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command.args(args);
        self
    }

    /// Runs it to the end.
    pub fn output(mut self) -> Ran {
        let out: Output = self.command.output().unwrap();
        Ran {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// What a finished `bcd` command said.
#[derive(Debug, Clone)]
pub struct Ran {
    /// The exit status (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Standard output, lossily decoded.
    pub stdout: String,
    /// Standard error, lossily decoded.
    pub stderr: String,
}
