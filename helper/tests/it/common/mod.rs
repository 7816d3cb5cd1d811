//! Test helpers: start the real `bcd-helper` binary on a socket in a temporary folder, talk to
//! it with a raw client over a std `UnixStream`, install fake programs from `testdata/helper`
//! (the fake PCI kernel and the waits are `bcd_testkit`'s).

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bcd_protocol::frame::{decode_frame, encode, HEADER_LEN};
use bcd_protocol::{
    ClientFrame, HelperError, Operation, Outcome, Request, ServerFrame, PROTOCOL_VERSION,
};
use bcd_testkit::wait_listening;
pub use bcd_testkit::FakePciKernel;

/// The helper under test.
pub const HELPER: &str = env!("CARGO_BIN_EXE_bcd-helper");

/// A running helper with its own temporary folder, killed on drop.
pub struct Helper {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub sock: PathBuf,
    pub audit: PathBuf,
}

impl Helper {
    /// Starts a helper with `--listen`, `--audit-log` and `--no-sandbox` in a fresh folder.
    pub fn start(extra: &[&str]) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), extra)
    }

    /// As [`Helper::start`], in a folder the test has already filled (fake programs, sysfs).
    /// Without `--sysfs-root` in `extra`, the helper gets a fake PCI tree with the GPUs of
    /// [`fake_gpus`]; without `--staging-dir` or `--lock-dir`, a staging folder and a lock
    /// folder of its own (`locks`).
    pub fn start_in(dir: tempfile::TempDir, extra: &[&str]) -> Self {
        Self::start_with(dir, extra, |_| {})
    }

    /// As [`Helper::start_in`], letting `configure` change the command first (limits, a
    /// `pre_exec`).
    pub fn start_with(
        dir: tempfile::TempDir,
        extra: &[&str],
        configure: impl FnOnce(&mut Command),
    ) -> Self {
        let sock = dir.path().join("helper.sock");
        let audit = dir.path().join("audit.log");
        let mut defaults: Vec<String> = Vec::new();
        if !extra.contains(&"--sysfs-root") {
            defaults.push("--sysfs-root".into());
            defaults.push(fake_gpus(dir.path()).display().to_string());
        }
        if !extra.contains(&"--lock-dir") {
            defaults.push("--lock-dir".into());
            defaults.push(dir.path().join("locks").display().to_string());
        }
        if !extra.contains(&"--staging-dir") {
            defaults.push("--staging-dir".into());
            defaults.push(dir.path().join("staging").display().to_string());
        }
        let sandbox = if extra.contains(&"--sandbox") {
            None
        } else {
            Some("--no-sandbox")
        };
        let mut cmd = Command::new(HELPER);
        cmd.arg("--listen")
            .arg(&sock)
            .arg("--audit-log")
            .arg(&audit)
            .args(sandbox)
            .args(defaults)
            .args(extra.iter().filter(|a| **a != "--sandbox"))
            .env("BCD_HELPER_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        configure(&mut cmd);
        let child = cmd.spawn().unwrap();
        let h = Self {
            child,
            dir,
            sock,
            audit,
        };
        wait_listening(&h.sock, Duration::from_secs(10));
        h
    }

    /// A connected raw client (no `Hello` yet).
    pub fn connect(&self) -> RawClient {
        RawClient::connect(&self.sock)
    }

    /// A connected client past `Hello`.
    pub fn client(&self) -> RawClient {
        let mut c = self.connect();
        c.hello();
        c
    }

    /// The audit log's lines.
    pub fn audit_lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// A path in the helper's folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Kills the helper with SIGKILL (no drop, no drain, no bound runs) and reaps it.
    pub fn kill_9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a process runs (a zombie, or a pid that is gone, does not).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z ") && !s.contains(") X "))
        .unwrap_or(false)
}

/// Waits up to `bound` for a process to stop running; whether it did.
pub fn wait_gone(pid: i32, bound: Duration) -> bool {
    let start = Instant::now();
    while alive(pid) {
        if start.elapsed() > bound {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Waits up to `bound` for `path` to hold at least `n` lines, and returns them.
pub fn wait_lines(path: &Path, n: usize, bound: Duration) -> Vec<String> {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= n && text.ends_with('\n') {
            return lines;
        }
        assert!(
            start.elapsed() < bound,
            "{} did not get {n} lines: {text:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fake PCI tree under `<dir>/gpus-sys` with NVIDIA GPUs at `0000:10:00.0` to
/// `0000:1f:00.0` on `nvidia` (no kernel thread: for operations that only check a GPU is one).
pub fn fake_gpus(dir: &Path) -> PathBuf {
    let root = dir.join("gpus-sys");
    let sysfs = FakePciKernel::new(&root);
    for bus in 0x10..=0x1f {
        sysfs.add_function(
            &format!("0000:{bus:02x}:00.0"),
            "0x10de",
            "0x030200",
            Some("nvidia"),
        );
    }
    root
}

/// Copies `testdata/helper/<template>` to `<dir>/<name>`, baking in `dir` for `@DIR@`.
pub fn fake_program(dir: &Path, template: &str, name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/helper")
        .join(template);
    let text = std::fs::read_to_string(&src).unwrap();
    let out = dir.join(name);
    std::fs::write(&out, text.replace("@DIR@", &dir.display().to_string())).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).unwrap();
    out
}

/// A client that speaks raw frames over a std socket.
pub struct RawClient {
    pub stream: UnixStream,
}

impl RawClient {
    /// Connects, with a 20 s read bound so a broken helper fails the test instead of hanging.
    pub fn connect(sock: &Path) -> Self {
        let stream = UnixStream::connect(sock).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Self { stream }
    }

    /// Sends one frame.
    pub fn send(&mut self, frame: &ClientFrame) {
        self.send_raw(&encode(frame).unwrap());
    }

    /// Sends bytes as they are; errors (the helper may have closed) are ignored.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes);
    }

    /// The next frame, or `None` when the helper closed the connection.
    pub fn recv(&mut self) -> Option<ServerFrame> {
        let mut header = [0u8; HEADER_LEN];
        self.stream.read_exact(&mut header).ok()?;
        let len = u32::from_be_bytes(header) as usize;
        let mut bytes = header.to_vec();
        bytes.resize(HEADER_LEN + len, 0);
        self.stream.read_exact(&mut bytes[HEADER_LEN..]).ok()?;
        Some(decode_frame(&bytes).expect("the helper sent a frame that does not decode"))
    }

    /// Whether the helper has closed the connection (reads EOF or a reset).
    pub fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.stream.read(&mut b), Ok(0) | Err(_))
    }

    /// Says `Hello` and checks the answer.
    pub fn hello(&mut self) {
        self.send(&ClientFrame::Hello {
            version: PROTOCOL_VERSION,
        });
        match self.recv() {
            Some(ServerFrame::Hello(Ok(a))) => assert_eq!(a.version, PROTOCOL_VERSION),
            other => panic!("unexpected answer to Hello: {other:?}"),
        }
    }

    /// Runs one request and checks the echoed id.
    pub fn request(&mut self, id: u64, op: Operation) -> Result<Outcome, HelperError> {
        self.send(&ClientFrame::Request(Request { id, op }));
        match self.recv() {
            Some(ServerFrame::Response(r)) => {
                assert_eq!(r.id, id);
                r.result
            }
            other => panic!("unexpected answer to request {id}: {other:?}"),
        }
    }
}
