//! One node per data folder, and a socket removed only by the node that made it.
//!
//! Two nodes on one data folder undo each other: the stale one removes a fresh hold's spec,
//! and stopping it removes the live node's socket. A node therefore takes an exclusive
//! `flock` on `<data>/.lock` before it reads any state, writes its pid into the file, and
//! keeps the lock for its life (the kernel drops it when the process ends, however it ends,
//! so a killed node never leaves a stale lock). A second node is refused with the holder's
//! pid. The API socket's device and inode are noted when it is bound, and shutdown removes
//! the path only while it is still that socket.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// The lock file's name in the data folder.
pub const LOCK_FILE: &str = ".lock";
/// How long a refused node waits for the holder to have written its pid.
const PID_WAIT: Duration = Duration::from_millis(500);

/// Why this node may not run on its data folder.
#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    /// Another process holds the lock.
    #[error("another bcd node (pid {}) already runs on the data folder {}: it holds {}; stop it first (systemctl stop bcd), or give this one its own --data-dir", holder.map_or_else(|| "unknown".to_owned(), |p| p.to_string()), data_dir.display(), path.display())]
    Held {
        /// The data folder.
        data_dir: PathBuf,
        /// The lock file.
        path: PathBuf,
        /// The holder's pid, as it wrote it.
        holder: Option<u32>,
    },
    /// The lock file cannot be opened or locked.
    #[error("cannot lock {path}: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

/// The held lock; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub struct InstanceLock {
    _lock: Flock<File>,
}

/// Takes `<data_dir>/.lock` without waiting and writes this process's pid into it.
///
/// # Errors
/// [`InstanceError::Held`] naming the holder's pid when another process has it,
/// [`InstanceError::Io`] when the file cannot be opened (the data folder is unusable).
pub fn lock(data_dir: &Path) -> Result<InstanceLock, InstanceError> {
    let path = data_dir.join(LOCK_FILE);
    let io = |source| InstanceError::Io {
        path: path.clone(),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(crate::state::PRIVATE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .map_err(io)?;
    if !file.metadata().map_err(io)?.is_file() {
        return Err(io(std::io::Error::other("it is not a regular file")));
    }
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            let written = lock
                .set_len(0)
                .and_then(|()| lock.seek(SeekFrom::Start(0)).map(|_| ()))
                .and_then(|()| lock.write_all(format!("{}\n", std::process::id()).as_bytes()));
            written.map_err(io)?;
            Ok(InstanceLock { _lock: lock })
        }
        Err((mut file, Errno::EWOULDBLOCK)) => Err(InstanceError::Held {
            data_dir: data_dir.to_path_buf(),
            holder: holder_pid(&mut file),
            path,
        }),
        Err((_, e)) => Err(io(std::io::Error::from(e))),
    }
}

/// The pid the holder wrote, waiting briefly for a holder that has just taken the lock.
fn holder_pid(file: &mut File) -> Option<u32> {
    let started = std::time::Instant::now();
    loop {
        let mut text = String::new();
        let read = file
            .seek(SeekFrom::Start(0))
            .and_then(|_| file.read_to_string(&mut text));
        if let Some(pid) = read.ok().and_then(|_| text.trim().parse().ok()) {
            return Some(pid);
        }
        if started.elapsed() > PID_WAIT {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Which file a path was when it was noted: its device and inode, and its change time
/// (a file system may give a removed file's inode number to the next file made at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileIdentity {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
}

impl FileIdentity {
    /// The identity of what is at `path` now (not following a link).
    ///
    /// # Errors
    /// The `lstat` error.
    pub fn of(path: &Path) -> std::io::Result<Self> {
        let meta = std::fs::symlink_metadata(path)?;
        Ok(Self {
            dev: meta.dev(),
            ino: meta.ino(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        })
    }
}

/// Removes `path` only while it is still the file noted as `mine`; returns whether it did.
pub fn remove_if_mine(path: &Path, mine: FileIdentity) -> bool {
    match FileIdentity::of(path) {
        Ok(now) if now == mine => std::fs::remove_file(path).is_ok(),
        Ok(_) => {
            tracing::warn!(
                "{} is no longer the socket this node created; it is left in place",
                path.display()
            );
            false
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A second node on the same data folder started silently; it is refused, naming the pid.
    #[test]
    fn a_second_lock_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let _held = lock(dir.path()).unwrap();
        let err = lock(dir.path()).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("(pid {})", std::process::id())),
            "{err}"
        );
        drop(_held);
        assert!(lock(dir.path()).is_ok(), "a released lock can be taken");
    }

    #[test]
    fn a_socket_replaced_by_another_is_not_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bcd.sock");
        let first = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let mine = FileIdentity::of(&path).unwrap();
        drop(first);
        std::fs::remove_file(&path).unwrap();
        let _other = std::os::unix::net::UnixListener::bind(&path).unwrap();
        assert!(!remove_if_mine(&path, mine));
        assert!(path.exists());
    }
}
