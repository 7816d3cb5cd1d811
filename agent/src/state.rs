//! The agent's state files: written atomically with a fixed mode, and never silently replaced
//! when they cannot be read.
//!
//! A write goes to a temporary file in the same folder, is synced, renamed over the target,
//! and the folder is synced, so a crash leaves either the old or the new file, never a torn
//! one. A file that does not parse is renamed aside (`<name>.unreadable-<unix time>`), so what
//! it held is kept for the operator and the next write does not destroy it.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
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
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), StateError> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(temp_name(&name, std::process::id()));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(io_error(&tmp))?;
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

/// The temporary file [`write_atomic`] writes `name` through: `.<name>.tmp-<pid>`.
fn temp_name(name: &str, pid: u32) -> String {
    format!(".{name}{TEMP_MARK}{pid}")
}

const TEMP_MARK: &str = ".tmp-";

/// The file a temporary file of [`write_atomic`] was for, when `name` is one.
pub fn temp_target(name: &str) -> Option<&str> {
    let (target, pid) = name.strip_prefix('.')?.rsplit_once(TEMP_MARK)?;
    (!target.is_empty() && !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
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
/// # Errors
/// [`StateError::Symlink`] for a link, [`StateError::Io`] when it cannot be read.
pub fn read(path: &Path) -> Result<Option<Vec<u8>>, StateError> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path)(e)),
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(StateError::Symlink {
                path: path.to_path_buf(),
            })
        }
        Ok(_) => {}
    }
    fs::read(path).map(Some).map_err(io_error(path))
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

/// Renames `path` to a new, unused name beside it and returns that name.
///
/// # Errors
/// [`StateError::Io`] when the rename fails.
pub fn set_aside(path: &Path) -> Result<PathBuf, StateError> {
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
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
