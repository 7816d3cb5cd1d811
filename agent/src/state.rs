//! The agent's state files: written atomically with a fixed mode, and never silently replaced
//! when they cannot be read.
//!
//! A write goes to a temporary file in the same folder, is synced, renamed over the target,
//! and the folder is synced, so a crash leaves either the old or the new file, never a torn
//! one. A file that does not parse is renamed aside (`<name>.unreadable-<unix time>`), so what
//! it held is kept for the operator and the next write does not destroy it.
//!
//! A state file is opened without following a link and without blocking (`O_NOFOLLOW |
//! O_NONBLOCK`), then checked with `fstat`: a FIFO, a device, a socket or a link where a
//! state file belongs is refused with a sentence naming it, never waited on, never read, and
//! never replaced by a write.
//!
//! [`ReservedWriter`] keeps what one file's writes need open (its folder, and the next
//! unnamed temporary file), so that file can still be written when the process has no file
//! descriptor left: the faults file must record an XID while everything else is starved.

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Mode of the agent's private state files (`gpus-seen.json`, `faults.json`, `holds.json`).
pub const PRIVATE_MODE: u32 = 0o600;
/// Mode of files other programs read (the CDI specs).
pub const PUBLIC_MODE: u32 = 0o644;

/// Why a state file could not be read or written. `Display` names the file.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file is there but does not parse; it was set aside.
    #[error(
        "{path} does not parse ({reason}); it was kept as {kept_as} and a new one will be started"
    )]
    SetAside {
        /// The file.
        path: PathBuf,
        /// Why it does not parse.
        reason: String,
        /// Where it is now.
        kept_as: PathBuf,
    },
    /// The file is a symbolic link, which bcd never follows for its own state.
    #[error("{path} is a symbolic link; bcd does not follow links for its state files: remove it")]
    Symlink {
        /// The file.
        path: PathBuf,
    },
    /// Something other than a regular file is where a state file belongs.
    #[error("{path} is {kind}, not a regular file; bcd neither reads nor replaces it: remove it")]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What is there: "a FIFO", "a character device", ...
        kind: &'static str,
    },
}

/// What a file type is, in the words of [`StateError::NotAFile`]; `None` for a regular file.
fn odd_kind(file_type: fs::FileType) -> Option<&'static str> {
    if file_type.is_file() {
        None
    } else if file_type.is_symlink() {
        Some("a symbolic link")
    } else if file_type.is_fifo() {
        Some("a FIFO")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else if file_type.is_socket() {
        Some("a socket")
    } else if file_type.is_dir() {
        Some("a folder")
    } else {
        Some("not a regular file")
    }
}

/// Refuses to write over anything at `path` but a regular file (or nothing).
fn check_target(path: &Path) -> Result<(), StateError> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error(path)(e)),
        Ok(meta) if meta.file_type().is_symlink() => Err(StateError::Symlink {
            path: path.to_path_buf(),
        }),
        Ok(meta) => match odd_kind(meta.file_type()) {
            None => Ok(()),
            Some(kind) => Err(StateError::NotAFile {
                path: path.to_path_buf(),
                kind,
            }),
        },
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `bytes` to `path` atomically with `mode`.
///
/// # Errors
/// [`StateError::Io`] naming the file or folder that failed; the old file is then intact.
/// [`StateError::Symlink`] or [`StateError::NotAFile`] when something other than a regular
/// file is at `path`: it is left as it is.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), StateError> {
    check_target(path)?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (mut file, tmp) = create_temp(dir, &name, mode)?;
    let result = (|| {
        // The umask may have narrowed the mode; the file's mode is a promise, so set it.
        file.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(io_error(&tmp))?;
        file.write_all(bytes).map_err(io_error(&tmp))?;
        file.sync_all().map_err(io_error(&tmp))?;
        fs::rename(&tmp, path).map_err(io_error(path))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_error(dir))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// The temporary file [`write_atomic`] writes `name` through: `.<name>.tmp-<pid>-<n>`, `n`
/// a number no one can guess ahead (the clock's nanoseconds and a count of this process).
fn temp_name(name: &str, pid: u32) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    format!(".{name}{TEMP_MARK}{pid}-{n}{nanos:09}")
}

/// How many names [`create_temp`] tries before it gives up.
const TEMP_TRIES: u32 = 8;

/// Creates a new temporary file for `name` in `dir`, never opening anything already there
/// (`O_EXCL`), never following a link (`O_NOFOLLOW`), never waiting on a FIFO or a device
/// (`O_NONBLOCK`, cleared once the file is ours): the file and its path.
fn create_temp(dir: &Path, name: &str, mode: u32) -> Result<(File, PathBuf), StateError> {
    create_temp_named(dir, mode, || temp_name(name, std::process::id()))
}

/// [`create_temp`] with the names `names` gives, tried in turn.
fn create_temp_named(
    dir: &Path,
    mode: u32,
    mut names: impl FnMut() -> String,
) -> Result<(File, PathBuf), StateError> {
    let mut last = None;
    for _ in 0..TEMP_TRIES {
        let tmp = dir.join(names());
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&tmp)
        {
            Ok(file) => {
                // A regular file of its own: blocking writes from now on.
                use nix::fcntl::{fcntl, FcntlArg, OFlag};
                let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
                if let Ok(flags) = fcntl(fd, FcntlArg::F_GETFL) {
                    let flags = OFlag::from_bits_truncate(flags) - OFlag::O_NONBLOCK;
                    let _ = fcntl(fd, FcntlArg::F_SETFL(flags));
                }
                return Ok((file, tmp));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some((e, tmp)),
            Err(e) => return Err(io_error(&tmp)(e)),
        }
    }
    let (e, tmp) = last.expect("TEMP_TRIES is not zero");
    Err(io_error(&tmp)(e))
}

const TEMP_MARK: &str = ".tmp-";

/// The file a temporary file of [`write_atomic`] was for, when `name` is one.
pub fn temp_target(name: &str) -> Option<&str> {
    let (target, pid) = name.strip_prefix('.')?.rsplit_once(TEMP_MARK)?;
    let ours = |b: u8| b.is_ascii_digit() || b == b'-';
    (!target.is_empty()
        && pid.bytes().next().is_some_and(|b| b.is_ascii_digit())
        && pid.bytes().all(ours))
    .then_some(target)
}

/// Removes from `dir` the temporary files a crash left behind: those of bcd's own naming
/// (`.<name>.tmp-<pid>`) for a `<name>` that `ours` accepts. Nothing else is touched, links
/// and folders included. Run at start, before anything writes. Returns what was removed.
pub fn remove_crash_temps(dir: &Path, ours: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !temp_target(name).is_some_and(&ours) {
            continue;
        }
        let path = entry.path();
        let regular = fs::symlink_metadata(&path).is_ok_and(|m| m.is_file());
        if regular && fs::remove_file(&path).is_ok() {
            removed.push(path);
        }
    }
    removed.sort();
    removed
}

/// Reads a state file: `Ok(None)` when it does not exist yet.
///
/// It is opened with `O_NOFOLLOW | O_NONBLOCK` and checked with `fstat` before a byte is
/// read, so a FIFO (whose open and read would wait for a writer) or a device never holds up
/// the caller.
///
/// # Errors
/// [`StateError::Symlink`] for a link, [`StateError::NotAFile`] for anything else that is not
/// a regular file, [`StateError::Io`] when it cannot be read.
pub fn read(path: &Path) -> Result<Option<Vec<u8>>, StateError> {
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path);
    let mut file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(StateError::Symlink {
                path: path.to_path_buf(),
            })
        }
        // A FIFO without a writer, a device that refuses: say what is there.
        Err(e) => {
            return Err(
                match fs::symlink_metadata(path)
                    .ok()
                    .and_then(|m| odd_kind(m.file_type()))
                {
                    Some(kind) => StateError::NotAFile {
                        path: path.to_path_buf(),
                        kind,
                    },
                    None => io_error(path)(e),
                },
            )
        }
    };
    let meta = file.metadata().map_err(io_error(path))?;
    if let Some(kind) = odd_kind(meta.file_type()) {
        return Err(StateError::NotAFile {
            path: path.to_path_buf(),
            kind,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0).min(1 << 20));
    file.read_to_end(&mut bytes).map_err(io_error(path))?;
    Ok(Some(bytes))
}

/// Writes one state file atomically, holding open what a write needs: the file's folder (for
/// its `fsync`) and the next write's temporary file, unnamed (`O_TMPFILE`) until the write
/// links it in. A write therefore opens nothing, and can land while the process has no file
/// descriptor left; the next temporary file is made right after the old one is closed.
#[derive(Debug)]
pub struct ReservedWriter {
    path: PathBuf,
    dir: File,
    mode: u32,
    spare: Option<File>,
}

impl ReservedWriter {
    /// Holds `path`'s folder and a first temporary file open.
    ///
    /// # Errors
    /// [`StateError::Io`] when the folder cannot be opened or has no room for an unnamed
    /// file (a file system without `O_TMPFILE`); callers then write with [`write_atomic`].
    pub fn open(path: &Path, mode: u32) -> Result<Self, StateError> {
        let dir_path = parent(path);
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(dir_path)
            .map_err(io_error(dir_path))?;
        let spare = unnamed(dir_path, mode).map_err(io_error(dir_path))?;
        Ok(Self {
            path: path.to_path_buf(),
            dir,
            mode,
            spare: Some(spare),
        })
    }

    /// Writes `bytes` as [`write_atomic`] does, into the held temporary file.
    ///
    /// # Errors
    /// As [`write_atomic`]; the old file is then intact.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        check_target(&self.path)?;
        let dir_path = parent(&self.path).to_path_buf();
        let mut file = match self.spare.take() {
            Some(file) => file,
            None => unnamed(&dir_path, self.mode).map_err(io_error(&dir_path))?,
        };
        let tmp = temp_path(&self.path);
        let mut no_proc = false;
        let result = (|| {
            file.set_permissions(fs::Permissions::from_mode(self.mode))
                .map_err(io_error(&tmp))?;
            file.write_all(bytes).map_err(io_error(&tmp))?;
            file.sync_all().map_err(io_error(&tmp))?;
            // Linking an unnamed file in through /proc resolves a path: no descriptor.
            let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
            nix::unistd::linkat(
                None,
                Path::new(&proc_path),
                None,
                tmp.as_path(),
                nix::fcntl::AtFlags::AT_SYMLINK_FOLLOW,
            )
            .map_err(|e| {
                if e == nix::errno::Errno::ENOENT {
                    no_proc = true;
                }
                io_error(&tmp)(std::io::Error::from(e))
            })?;
            fs::rename(&tmp, &self.path).map_err(io_error(&self.path))?;
            self.dir.sync_all().map_err(io_error(&dir_path))
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        // The written file's descriptor is freed first, so the next spare can take it.
        drop(file);
        self.spare = unnamed(&dir_path, self.mode).ok();
        if no_proc {
            // No /proc to link the unnamed file through: write as everyone else does.
            return write_atomic(&self.path, bytes, self.mode);
        }
        result
    }
}

fn parent(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The temporary path a held file's write goes through, of [`temp_name`]'s form.
fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    parent(path).join(temp_name(&name, std::process::id()))
}

/// An unnamed file in `dir` (`O_TMPFILE`), gone unless it is linked in.
fn unnamed(dir: &Path, mode: u32) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .mode(mode)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
}

/// Reads and parses a state file. A file that does not parse is renamed aside and reported
/// as [`StateError::SetAside`]; the caller then starts from empty, having lost nothing.
///
/// # Errors
/// As [`read`], and [`StateError::SetAside`].
pub fn load<T>(
    path: &Path,
    parse: impl FnOnce(&[u8]) -> Result<T, String>,
) -> Result<Option<T>, StateError> {
    let Some(bytes) = read(path)? else {
        return Ok(None);
    };
    match parse(&bytes) {
        Ok(value) => Ok(Some(value)),
        Err(reason) => {
            let kept_as = set_aside(path)?;
            Err(StateError::SetAside {
                path: path.to_path_buf(),
                reason,
                kept_as,
            })
        }
    }
}

/// A state file's JSON document that carries its format version.
pub trait Versioned: serde::de::DeserializeOwned {
    /// The version the document says it is.
    fn version(&self) -> u32;
}

/// [`load`] for a JSON document of format `expected`: a document of another version is set
/// aside like any other that does not parse (a newer bcd's file is kept, never misread).
///
/// # Errors
/// As [`load`].
pub fn load_versioned<T: Versioned>(path: &Path, expected: u32) -> Result<Option<T>, StateError> {
    load(path, |bytes| {
        let doc: T = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if doc.version() != expected {
            return Err(format!(
                "format version {} is not {expected}",
                doc.version()
            ));
        }
        Ok(doc)
    })
}

/// Seconds since the Unix epoch now (0 if the clock is before it): the one clock of the
/// state files' stamps, the conditions' times and the journal's entries.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Renames `path` to a new, unused name beside it and returns that name.
///
/// # Errors
/// [`StateError::Io`] when the rename fails.
pub fn set_aside(path: &Path) -> Result<PathBuf, StateError> {
    let stamp = unix_now();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut n = 0u32;
    loop {
        let suffix = if n == 0 {
            String::new()
        } else {
            format!(".{n}")
        };
        let candidate = path.with_file_name(format!("{name}.unreadable-{stamp}{suffix}"));
        if fs::symlink_metadata(&candidate).is_err() {
            fs::rename(path, &candidate).map_err(io_error(path))?;
            return Ok(candidate);
        }
        n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_atomic_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpus-seen.json");
        write_atomic(&path, b"{\"a\":1}", PRIVATE_MODE).unwrap();
        write_atomic(&path, b"{\"a\":2}", PRIVATE_MODE).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"{\"a\":2}");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let leftovers: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .collect();
        assert_eq!(leftovers.len(), 1, "no temporary file may remain");
    }

    #[test]
    fn an_unparsable_file_is_set_aside_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("holds.json");
        fs::write(&path, b"{torn").unwrap();
        let err = load(&path, |b| {
            serde_json::from_slice::<serde_json::Value>(b).map_err(|e| e.to_string())
        })
        .unwrap_err();
        let StateError::SetAside { kept_as, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(fs::read(kept_as).unwrap(), b"{torn");
        assert!(!path.exists());
        assert!(
            err.to_string().contains("holds.json does not parse"),
            "{err}"
        );
    }

    /// Runs `f` on a thread; fails the test if it has not returned within 5 s.
    fn within_5s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("it waited on the FIFO")
    }

    // A FIFO in place of holds.json, faults.json or gpus-seen.json hung the node at start:
    // the read waited for a writer that never came, with no log line.
    #[test]
    fn a_fifo_in_place_of_a_state_file_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("holds.json");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let shown = path.clone();
        let err = within_5s(move || read(&shown)).unwrap_err();
        assert!(
            matches!(err, StateError::NotAFile { kind: "a FIFO", .. }),
            "{err}"
        );
        assert!(err.to_string().contains("holds.json is a FIFO"), "{err}");
        let shown = path.clone();
        let err = within_5s(move || load(&shown, |_| Ok(()))).unwrap_err();
        assert!(matches!(err, StateError::NotAFile { .. }), "{err}");
        assert!(
            fs::symlink_metadata(&path).unwrap().file_type().is_fifo(),
            "the FIFO is neither set aside nor replaced"
        );
    }

    // A symlinked faults.json was reported, then replaced by a regular file on the first
    // XID: a write never replaces a link, a FIFO or a device.
    #[test]
    fn a_write_never_replaces_a_link_or_a_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        fs::write(&target, b"theirs").unwrap();
        let link = dir.path().join("faults.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let fifo = dir.path().join("holds.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(matches!(
            write_atomic(&link, b"{}", PRIVATE_MODE),
            Err(StateError::Symlink { .. })
        ));
        let mut writer = ReservedWriter::open(&link, PRIVATE_MODE).unwrap();
        assert!(matches!(
            writer.write(b"{}"),
            Err(StateError::Symlink { .. })
        ));
        assert!(matches!(
            write_atomic(&fifo, b"{}", PRIVATE_MODE),
            Err(StateError::NotAFile { .. })
        ));
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&target).unwrap(), b"theirs");
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 3, "no temporary file is left: {names:?}");
    }

    #[test]
    fn a_reserved_writer_writes_atomically_and_privately() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("faults.json");
        let mut writer = ReservedWriter::open(&path, PRIVATE_MODE).unwrap();
        writer.write(b"{\"a\":1}").unwrap();
        writer.write(b"{\"a\":2}").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"{\"a\":2}");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    // What broke: a FIFO at the predictable temporary name of a claim's spec made the write
    // wait for a reader for ever, and every DRA call waited behind it. Temporary names are
    // unguessable now, and nothing already there is ever opened.
    #[test]
    fn a_fifo_at_the_temporary_name_never_stalls_a_write() {
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join(".spec.json.tmp-1-1");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (done, wait) = std::sync::mpsc::channel();
        let at = dir.path().to_path_buf();
        std::thread::spawn(move || {
            let mut names = [".spec.json.tmp-1-1", ".spec.json.tmp-1-2"].into_iter();
            let made = create_temp_named(&at, 0o644, || names.next().unwrap().to_owned())
                .map(|(_, path)| path)
                .map_err(|e| e.to_string());
            let _ = done.send(made);
        });
        let made = wait
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("the temporary file was made within 5 s");
        assert_eq!(made, Ok(dir.path().join(".spec.json.tmp-1-2")));
        // The FIFO is left as it is (not ours to remove).
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
        // And a whole write never meets a name already there.
        let path = dir.path().join("spec.json");
        write_atomic(&path, b"{}", 0o644).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"{}");
    }

    #[test]
    fn only_bcds_own_crash_temps_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            ".holds.json.tmp-123",
            ".bcd-a.json.tmp-9",
            ".other.json.tmp-1",
            "holds.json.tmp-1",
            ".holds.json.tmp-x",
            "holds.json",
        ] {
            fs::write(dir.path().join(name), b"x").unwrap();
        }
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join(".faults.json.tmp-2")).unwrap();
        let removed = remove_crash_temps(dir.path(), |n| {
            ["holds.json", "faults.json", "bcd-a.json"].contains(&n)
        });
        let names: Vec<_> = removed
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, [".bcd-a.json.tmp-9", ".holds.json.tmp-123"]);
        assert!(dir.path().join(".other.json.tmp-1").exists());
        assert!(dir.path().join("holds.json").exists());
        assert!(fs::symlink_metadata(dir.path().join(".faults.json.tmp-2")).is_ok());
        assert_eq!(temp_target(&temp_name("holds.json", 7)), Some("holds.json"));
        assert_eq!(
            temp_target(".holds.json.tmp-7"),
            Some("holds.json"),
            "an older bcd's"
        );
        assert_ne!(temp_name("holds.json", 7), temp_name("holds.json", 7));
    }

    #[test]
    fn a_missing_file_is_none_and_a_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(&dir.path().join("none.json")).unwrap().is_none());
        let link = dir.path().join("faults.json");
        std::os::unix::fs::symlink("/etc/hostname", &link).unwrap();
        assert!(matches!(read(&link), Err(StateError::Symlink { .. })));
    }
}
