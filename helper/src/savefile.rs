//! Save images by descriptor: a save file the agent names is opened once, without following
//! any link, checked on the opened descriptor, and copied into a folder only root can write,
//! and only that copy is given to `virsh`. Both `virsh` runs of a restore (reading its XML,
//! then restoring) therefore see exactly the content that was checked, whoever owns the save
//! folder (libvirt's QEMU driver chowns it to the QEMU user, so it is not root's alone).
//!
//! What is accepted, the way sudo checks its sudoers file:
//! - every folder from `/` down to the save folder: a real folder (no link), owned by root or
//!   an allowed owner, not writable by group or others unless it is root's and sticky (`/tmp`);
//! - the file, opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` from the save
//!   folder's descriptor: a regular file, one link, owned by root or an allowed owner, not
//!   writable by group or others.
//!
//! This module must never hand `virsh` a path an unprivileged user can change, and never
//! leave a copy behind: a [`Staged`] copy is removed when it is dropped.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bcd_protocol::{HelperError, SaveFile};

/// The mode bits that make a file or folder writable by someone other than its owner.
const WRITABLE_BY_OTHERS: u32 = 0o022;
/// The sticky bit.
const STICKY: u32 = 0o1000;

/// Where save files come from and where their copies go.
#[derive(Debug, Clone)]
pub struct SavePolicy {
    /// The folder save images must lie in.
    pub save_dir: PathBuf,
    /// The root-only folder the copies are made in.
    pub staging_dir: PathBuf,
    /// Owners besides root a save file and its folders may have (the QEMU user).
    pub owners: Vec<u32>,
}

/// A checked copy of a save image; removed when dropped.
#[derive(Debug)]
pub struct Staged {
    path: PathBuf,
}

impl Staged {
    /// The copy's path, for `virsh`.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

static NEXT: AtomicU64 = AtomicU64::new(0);

impl SavePolicy {
    fn owner_ok(&self, uid: u32) -> bool {
        uid == 0 || self.owners.contains(&uid)
    }

    /// Opens, checks and copies `file`.
    ///
    /// # Errors
    /// [`HelperError::Invalid`] naming the file (or folder) and the rule it breaks;
    /// [`HelperError::Failed`] when the copy cannot be made.
    pub fn stage(&self, file: &SaveFile) -> Result<Staged, HelperError> {
        let path = file.path();
        let refuse = |why: String| HelperError::Invalid {
            what: format!(
                "{} {why}; only regular files under {} can be restored",
                path.display(),
                self.save_dir.display()
            ),
        };
        if !file.is_under(&self.save_dir) {
            return Err(refuse("is not in the save folder".to_owned()));
        }
        self.check_folders()?;
        let dir = open_dir(&self.save_dir).map_err(|e| {
            refuse(format!(
                "cannot be reached: the save folder cannot be opened ({e})"
            ))
        })?;
        let relative = path
            .strip_prefix(&self.save_dir)
            .map_err(|_| refuse("is not in the save folder".to_owned()))?;
        let fd = openat2_beneath(&dir, relative).map_err(|e| {
            refuse(match e.raw_os_error() {
                Some(libc::ELOOP) | Some(libc::EXDEV) => {
                    "is or lies behind a symbolic link".to_owned()
                }
                Some(libc::ENOENT) => "does not exist".to_owned(),
                Some(libc::ENXIO) => "is a device, pipe or socket, not a regular file".to_owned(),
                _ => format!("cannot be opened without following links ({e})"),
            })
        })?;
        let mut source = File::from(fd);
        let meta = source
            .metadata()
            .map_err(|e| refuse(format!("cannot be examined ({e})")))?;
        if !meta.file_type().is_file() {
            return Err(refuse("is not a regular file".to_owned()));
        }
        if meta.nlink() != 1 {
            return Err(refuse(format!(
                "has {} hard links (another name for it could be changed)",
                meta.nlink()
            )));
        }
        if !self.owner_ok(meta.uid()) {
            return Err(refuse(format!(
                "is owned by uid {}, not root or the QEMU user",
                meta.uid()
            )));
        }
        if meta.mode() & WRITABLE_BY_OTHERS != 0 {
            return Err(refuse(format!(
                "is writable by its group or others (mode {:o})",
                meta.mode() & 0o7777
            )));
        }
        let name = format!(
            "restore-{}-{}.save",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let copy = self.staging_dir.join(name);
        let failed = |why: String| HelperError::Failed {
            exit_code: None,
            message: format!(
                "{} could not be copied to {} before restoring it: {why}",
                path.display(),
                self.staging_dir.display()
            ),
        };
        let mut target = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&copy)
            .map_err(|e| failed(e.to_string()))?;
        let staged = Staged { path: copy };
        // copy_file_range where the kernel offers it (a reflink on btrfs and XFS).
        std::io::copy(&mut source, &mut target).map_err(|e| failed(e.to_string()))?;
        target.sync_all().map_err(|e| failed(e.to_string()))?;
        Ok(staged)
    }

    /// Checks every folder from `/` down to the save folder.
    fn check_folders(&self) -> Result<(), HelperError> {
        let mut at = PathBuf::from("/");
        let mut chain = vec![at.clone()];
        for part in self.save_dir.components().skip(1) {
            at.push(part);
            chain.push(at.clone());
        }
        for folder in chain {
            let refuse = |why: String| HelperError::Invalid {
                what: format!(
                    "the save folder {} cannot be trusted: {} {why}",
                    self.save_dir.display(),
                    folder.display()
                ),
            };
            let meta = std::fs::symlink_metadata(&folder)
                .map_err(|e| refuse(format!("cannot be examined ({e})")))?;
            if !meta.file_type().is_dir() {
                return Err(refuse("is not a folder (a symbolic link?)".to_owned()));
            }
            if !self.owner_ok(meta.uid()) {
                return Err(refuse(format!(
                    "is owned by uid {}, not root or the QEMU user",
                    meta.uid()
                )));
            }
            let mode = meta.mode();
            let sticky_root = mode & STICKY != 0 && meta.uid() == 0;
            if mode & WRITABLE_BY_OTHERS != 0 && !sticky_root {
                return Err(refuse(format!(
                    "is writable by its group or others (mode {:o})",
                    mode & 0o7777
                )));
            }
        }
        Ok(())
    }

    /// Makes (or checks) the staging folder: a folder owned by root, mode 0700. Called at
    /// start-up, before the sandbox.
    ///
    /// # Errors
    /// A sentence naming the folder.
    pub fn prepare_staging(&self) -> Result<(), String> {
        let dir = &self.staging_dir;
        match std::fs::symlink_metadata(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
            Err(e) => return Err(format!("cannot examine {}: {e}", dir.display())),
            Ok(_) => {}
        }
        let meta = std::fs::symlink_metadata(dir)
            .map_err(|e| format!("cannot examine {}: {e}", dir.display()))?;
        let euid = nix::unistd::geteuid().as_raw();
        if !meta.file_type().is_dir() || meta.uid() != euid || meta.mode() & 0o077 != 0 {
            return Err(format!(
                "{} must be a folder owned by root with mode 0700 (it has owner {} and mode {:o})",
                dir.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ));
        }
        // Copies a crash left behind.
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with("restore-") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(())
    }
}

fn open_dir(path: &Path) -> std::io::Result<OwnedFd> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    Ok(OwnedFd::from(f))
}

/// `openat2(dir, relative, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, RESOLVE_BENEATH |
/// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`: no link anywhere on the way, nothing outside
/// `dir`, and a FIFO opened without waiting for a writer.
fn openat2_beneath(dir: &OwnedFd, relative: &Path) -> std::io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(relative.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: open_how is plain data; zeroed is its documented "no options" state.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: the path is a valid C string, `how` lives across the call and its size is given.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            name.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn policy(dir: &Path) -> SavePolicy {
        let save = dir.join("save");
        let staging = dir.join("staging");
        std::fs::create_dir(&save).unwrap();
        std::fs::set_permissions(&save, std::fs::Permissions::from_mode(0o755)).unwrap();
        let p = SavePolicy {
            save_dir: save,
            staging_dir: staging,
            owners: vec![nix::unistd::geteuid().as_raw()],
        };
        p.prepare_staging().unwrap();
        p
    }

    #[test]
    fn a_checked_file_is_copied_and_links_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = policy(dir.path());
        let image = p.save_dir.join("vm.save");
        std::fs::write(&image, "image").unwrap();
        std::fs::set_permissions(&image, std::fs::Permissions::from_mode(0o600)).unwrap();
        let file: SaveFile = image.to_str().unwrap().parse().unwrap();
        let staged = p.stage(&file).unwrap();
        assert_eq!(std::fs::read_to_string(staged.path()).unwrap(), "image");
        let copy = staged.path().to_path_buf();
        drop(staged);
        assert!(!copy.exists(), "the copy is removed when dropped");

        std::os::unix::fs::symlink("/etc/hostname", p.save_dir.join("link.save")).unwrap();
        let link: SaveFile = p
            .save_dir
            .join("link.save")
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let err = p.stage(&link).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");

        std::fs::hard_link(&image, p.save_dir.join("two.save")).unwrap();
        let err = p.stage(&file).unwrap_err().to_string();
        assert!(err.contains("2 hard links"), "{err}");
    }

    #[test]
    fn a_world_writable_folder_or_file_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let p = policy(dir.path());
        let image = p.save_dir.join("vm.save");
        std::fs::write(&image, "image").unwrap();
        std::fs::set_permissions(&image, std::fs::Permissions::from_mode(0o666)).unwrap();
        let file: SaveFile = image.to_str().unwrap().parse().unwrap();
        let err = p.stage(&file).unwrap_err().to_string();
        assert!(err.contains("writable by its group or others"), "{err}");
        std::fs::set_permissions(&image, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&p.save_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = p.stage(&file).unwrap_err().to_string();
        assert!(err.contains("cannot be trusted"), "{err}");
    }
}
