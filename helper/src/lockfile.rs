//! Per-device lock files that outlive the helper. Every operation on a PCI function takes an
//! exclusive `flock` on `<lock folder>/<address>.lock` right after that function's in-process
//! lock ([`crate::ops::DeviceLocks`]), and hands the descriptor to every child it runs
//! ([`crate::child::run_holding`]). The kernel keeps a `flock` while any descriptor of it is
//! open, so the lock lives exactly as long as the operation and the processes it started: a
//! killed helper's `nvidia-smi` that runs on (a GPU reset inside the driver ignores SIGKILL)
//! keeps it, and a restarted helper refuses that device, saying so, until it ends.
//!
//! The folder (`--lock-dir`, default [`DEFAULT_LOCK_DIR`], under systemd's `StateDirectory`:
//! a `RuntimeDirectory` would be removed with the socket's folder) is opened at start-up, before
//! the sandbox: made 0700 if missing (its parent must exist), and refused unless it is a folder,
//! not a link, owned by root (the helper's euid) with no access for group or others. A helper
//! whose folder is refused answers `Ping` but refuses every operation on a device, naming the
//! folder: it never acts on a device without its lock file.
//!
//! Lock files are opened read-only (`flock` needs no write access), created 0600, never
//! through a link, and never removed: removing a lock file another process holds, or is about
//! to lock, would let two holders lock two different files of one name.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bcd_protocol::{HelperError, PciAddress};

/// Where the lock files are unless `--lock-dir` says otherwise.
pub const DEFAULT_LOCK_DIR: &str = "/var/lib/bcd-helper/locks";
/// The lock folder's mode when the helper makes it.
pub const LOCK_DIR_MODE: u32 = 0o700;
/// A lock file's mode.
pub const LOCK_FILE_MODE: u32 = 0o600;
/// How long a lock file found held is tried again before the refusal: a child another
/// operation is starting at that moment holds a copy of every descriptor of the helper until
/// its `exec` closes them.
pub const HELD_ELSEWHERE_GRACE: Duration = Duration::from_millis(100);
/// The pause between those tries.
const RETRY_PAUSE: Duration = Duration::from_millis(10);

/// Why an operation could not have a device's lock file. `Display` is the operator's sentence.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds it: one an earlier operation started, under this helper or one
    /// before it.
    #[error(
        "{device}: an earlier operation on it may still be running: a process it started (under \
         this bcd-helper or one before it) still holds {file}, and a GPU reset inside the driver \
         ignores SIGKILL; nothing is done to {device} until that process ends (`fuser -v {file}` \
         names it), then retry"
    )]
    StillRunning {
        /// The device.
        device: PciAddress,
        /// Its lock file.
        file: String,
    },
    /// The file could not be opened or locked.
    #[error(
        "{device}: its lock file {file} cannot be used ({reason}); no operation runs on \
         {device} without it"
    )]
    File {
        /// The device.
        device: PciAddress,
        /// Its lock file.
        file: String,
        /// Why.
        reason: String,
    },
    /// The folder was refused at start-up.
    #[error(
        "{device}: no operation runs on a device without its lock file, and the lock folder \
         {dir} cannot be used: {reason} (fix it, or give another with --lock-dir, and restart \
         bcd-helper)"
    )]
    Folder {
        /// The device.
        device: PciAddress,
        /// The folder.
        dir: String,
        /// Why, as found at start-up.
        reason: String,
    },
}

impl From<LockError> for HelperError {
    fn from(e: LockError) -> Self {
        match e {
            LockError::StillRunning { .. } => HelperError::Busy {
                what: e.to_string(),
            },
            LockError::File { .. } | LockError::Folder { .. } => HelperError::Failed {
                exit_code: None,
                message: e.to_string(),
            },
        }
    }
}

/// The lock folder, opened at start-up (or why it could not be).
#[derive(Debug)]
pub struct LockDir {
    path: PathBuf,
    dir: Result<OwnedFd, String>,
}

/// One device's lock, held while this value or a descriptor a child inherited from it is open.
#[derive(Debug)]
pub struct LockFile {
    file: File,
}

impl AsFd for LockFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl LockDir {
    /// Opens (making it, 0700, when missing) and checks the folder; a refusal is logged, kept
    /// and named by every lock asked for, never fatal.
    pub fn open(path: &Path) -> Self {
        let dir = open_dir(path);
        if let Err(why) = &dir {
            tracing::error!(
                "the lock folder {} cannot be used: {why}; every operation on a device is refused",
                path.display()
            );
        }
        Self {
            path: path.to_path_buf(),
            dir,
        }
    }

    /// Why no operation on a device can run, when the folder was refused at start-up: the
    /// sentence `Ping` carries, so that an operator learns it before the first reset does.
    pub fn unusable(&self) -> Option<String> {
        self.dir.as_ref().err().map(|reason| {
            format!(
                "no operation on a device runs: the lock folder {} cannot be used: {reason} (fix \
                 it, or give another with --lock-dir, and restart bcd-helper)",
                self.path.display()
            )
        })
    }

    /// The lock file of `device`, locked exclusively; tried again for [`HELD_ELSEWHERE_GRACE`]
    /// while another process holds it.
    ///
    /// # Errors
    /// [`LockError::StillRunning`] when another process holds it past the grace,
    /// [`LockError::File`] when it cannot be opened or locked, [`LockError::Folder`] when the
    /// folder was refused at start-up.
    pub async fn lock(&self, device: &PciAddress) -> Result<LockFile, LockError> {
        let name = format!("{}.lock", device.sysfs_name());
        let file_path = self.path.join(&name);
        let shown = file_path.display().to_string();
        let dir = self.dir.as_ref().map_err(|reason| LockError::Folder {
            device: *device,
            dir: self.path.display().to_string(),
            reason: reason.clone(),
        })?;
        let fail = |reason: String| LockError::File {
            device: *device,
            file: shown.clone(),
            reason,
        };
        let file = open_lock_file(dir, &name).map_err(|e| fail(e.to_string()))?;
        let deadline = Instant::now() + HELD_ELSEWHERE_GRACE;
        loop {
            // SAFETY: flock on a descriptor this function owns; it touches no memory.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(LockFile { file });
            }
            let err = std::io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EWOULDBLOCK) if Instant::now() < deadline => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Some(libc::EWOULDBLOCK) => {
                    return Err(LockError::StillRunning {
                        device: *device,
                        file: shown,
                    })
                }
                Some(libc::EINTR) => {}
                _ => return Err(fail(format!("flock: {err}"))),
            }
        }
    }
}

/// Opens the folder (making it when missing) and checks it on the descriptor.
fn open_dir(path: &Path) -> Result<OwnedFd, String> {
    match std::fs::DirBuilder::new().mode(LOCK_DIR_MODE).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("it cannot be made: {e}")),
    }
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => {
                "it is not a folder (a link or a file is there)".to_owned()
            }
            _ => format!("it cannot be opened: {e}"),
        })?;
    let meta = dir
        .metadata()
        .map_err(|e| format!("it cannot be examined: {e}"))?;
    let euid = nix::unistd::geteuid().as_raw();
    if meta.uid() != euid || meta.mode() & 0o077 != 0 {
        return Err(format!(
            "it must be a folder owned by root with mode 0700 (it has owner {} and mode {:o}), \
             or another user could hold or replace the lock files",
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    Ok(OwnedFd::from(dir))
}

/// Opens (creating, 0600) `name` in `dir`, read-only, close-on-exec, never through a link, and
/// checks it is a regular file.
fn open_lock_file(dir: &OwnedFd, name: &str) -> std::io::Result<File> {
    let c_name = CString::new(name).map_err(std::io::Error::other)?;
    // SAFETY: openat with a valid folder descriptor and a NUL-terminated name that lives
    // across the call; the returned descriptor is owned below.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c_name.as_ptr(),
            libc::O_RDONLY | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
            LOCK_FILE_MODE,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and nothing else owns it.
    let file = unsafe { File::from_raw_fd(fd) };
    if !file.metadata()?.file_type().is_file() {
        return Err(std::io::Error::other("it is not a regular file"));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu() -> PciAddress {
        "0000:18:00.0".parse().unwrap()
    }

    // Guards the folder check: a folder others can write would let them hold or replace the
    // lock files; the refusal is named by every lock asked for.
    #[tokio::test]
    async fn a_lock_folder_others_can_write_is_refused_and_named() {
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("locks");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        let locks = LockDir::open(&dir);
        assert!(locks.dir.is_err());
        let err = locks.lock(&gpu()).await.unwrap_err();
        assert!(matches!(err, LockError::Folder { .. }), "{err}");
        let sentence = err.to_string();
        assert!(
            sentence.contains(&dir.display().to_string()) && sentence.contains("0700"),
            "{sentence}"
        );
    }

    // Guards the lock itself: a second holder of one device's file is refused, naming the
    // device and the file, and served once the first lets go.
    #[tokio::test]
    async fn a_held_lock_file_refuses_a_second_holder_until_it_is_closed() {
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("locks");
        let locks = LockDir::open(&dir);
        assert!(locks.dir.is_ok());
        let first = locks.lock(&gpu()).await.unwrap();
        let err = locks.lock(&gpu()).await.unwrap_err();
        assert!(matches!(err, LockError::StillRunning { .. }), "{err}");
        let sentence = err.to_string();
        assert!(
            sentence.contains("0000:18:00.0: an earlier operation on it may still be running")
                && sentence.contains(&dir.join("0000:18:00.0.lock").display().to_string()),
            "{sentence}"
        );
        let other: PciAddress = "0000:19:00.0".parse().unwrap();
        assert!(locks.lock(&other).await.is_ok());
        drop(first);
        assert!(locks.lock(&gpu()).await.is_ok());
    }

    // Guards the link rule: a lock file replaced by a link is refused, never followed.
    #[tokio::test]
    async fn a_lock_file_that_is_a_link_is_refused() {
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("locks");
        let locks = LockDir::open(&dir);
        let target = top.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, dir.join("0000:18:00.0.lock")).unwrap();
        let err = locks.lock(&gpu()).await.unwrap_err();
        assert!(matches!(err, LockError::File { .. }), "{err}");
        assert!(!target.exists(), "the link was followed");
    }
}
