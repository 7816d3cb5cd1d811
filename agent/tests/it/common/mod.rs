//! What several of the agent's integration tests share: the CDI schema checker, the demo
//! host's GPUs and the node sandbox (`processes`, most of it `bcd_testkit`'s), and the rig for
//! the passthrough runtimes: the real `bcd-helper` started on a socket in a temporary folder,
//! and fake `nvidia-smi` and `virsh` wrappers that append each call to one record file (the
//! fake PCI kernel, `bcd_testkit::FakePciKernel`, appends its steps there too), so the order
//! of persistence calls, kernel steps and `virsh` runs can be read in one place.

pub mod cdi_schema;
pub mod processes;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bcd_testkit::wait_listening;

/// How long a started helper may take to listen.
const HELPER_START: Duration = Duration::from_secs(10);

/// The `bcd-helper` binary built beside `bcd`, or `None` after skipping (a failure under
/// `CI`) when it has not been built: `cargo test --workspace` builds it.
pub fn helper_binary() -> Option<PathBuf> {
    bcd_testkit::built(&PathBuf::from(env!("CARGO_BIN_EXE_bcd")).with_file_name("bcd-helper"))
}

/// Writes an executable `/bin/sh` script. The helper clears its children's environment, so
/// everything a script needs (the record file's path) is baked into its text.
pub fn script(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_path_buf()
}

/// A fake `nvidia-smi` that records `nvidia-smi ARGS` and succeeds.
pub fn recording_nvidia_smi(dir: &Path, record: &Path) -> PathBuf {
    script(
        &dir.join("nvidia-smi"),
        &format!(
            "#!/bin/sh\necho \"nvidia-smi $*\" >> '{}'\nexit 0\n",
            record.display()
        ),
    )
}

/// A `virsh` wrapper that records `virsh ARGS` and runs the real one.
pub fn recording_virsh(dir: &Path, record: &Path, real: &Path) -> PathBuf {
    script(
        &dir.join("virsh"),
        &format!(
            "#!/bin/sh\necho \"virsh $*\" >> '{}'\nexec '{}' \"$@\"\n",
            record.display(),
            real.display()
        ),
    )
}

/// A running `bcd-helper`, killed on drop.
pub struct Helper {
    pub child: Child,
    pub sock: PathBuf,
}

impl Helper {
    /// Starts `binary` with `--listen SOCK --no-sandbox --allow-uid <this uid>` and `extra`.
    pub fn start(binary: &Path, sock: &Path, audit: &Path, extra: &[&str]) -> Self {
        let uid = nix::unistd::getuid().as_raw().to_string();
        let child = Command::new(binary)
            .arg("--listen")
            .arg(sock)
            .arg("--audit-log")
            .arg(audit)
            .args(["--no-sandbox", "--allow-uid", &uid])
            // Save images are copied next to the audit log, never into the host's folder.
            .arg("--staging-dir")
            .arg(audit.with_file_name("staging"))
            // Never the host's /var/lib/bcd-helper/locks.
            .arg("--lock-dir")
            .arg(audit.with_file_name("locks"))
            .args(extra)
            .env("BCD_HELPER_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        wait_listening(sock, HELPER_START);
        Self {
            child,
            sock: sock.to_path_buf(),
        }
    }

    /// Kills it at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.kill();
    }
}
