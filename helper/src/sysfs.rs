//! The PCI part of sysfs, as the helper touches it: it reads `vendor`, `class` and the `driver`
//! link, and writes `driver_override`, `unbind` and `drivers_probe`. Nothing else.
//!
//! Every write runs on a blocking thread under a bound: a real unbind blocks in the kernel
//! until the driver lets go, and must not block the helper. A write still blocked in the
//! kernel when its bound expires is left to finish in its thread (it cannot be cancelled);
//! the operation answers without waiting for it.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bcd_protocol::{HelperError, PciAddress};

/// NVIDIA's PCI vendor id, as sysfs prints it.
pub const NVIDIA_VENDOR: &str = "0x10de";
/// The prefix of a display controller's class (`0x0300xx` VGA, `0x0302xx` 3D).
pub const DISPLAY_CLASS_PREFIX: &str = "0x03";
/// The driver a passed-through function sits on.
pub const VFIO_DRIVER: &str = "vfio-pci";
/// NVIDIA's kernel driver.
pub const NVIDIA_DRIVER: &str = "nvidia";
/// How often the `driver` link is looked at while waiting for it to change.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The PCI tree under a sysfs root.
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    /// The tree under `root` (`/sys` on a host, a temporary folder in tests).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// `<root>/bus/pci/devices/<addr>`.
    pub fn device_dir(&self, addr: &PciAddress) -> PathBuf {
        self.root.join("bus/pci/devices").join(addr.sysfs_name())
    }

    /// `<root>/bus/pci/drivers_probe`.
    pub fn probe_file(&self) -> PathBuf {
        self.root.join("bus/pci/drivers_probe")
    }

    /// Checks the function exists and is NVIDIA's.
    ///
    /// # Errors
    /// `Invalid` naming the function when it is absent or another vendor's.
    pub fn check_nvidia(&self, addr: &PciAddress) -> Result<(), HelperError> {
        let dir = self.device_dir(addr);
        let is_dir = std::fs::metadata(&dir).map(|m| m.is_dir()).unwrap_or(false);
        if !is_dir {
            return Err(HelperError::Invalid {
                what: format!("{addr} is not a PCI function on this host"),
            });
        }
        let vendor = self
            .attribute(addr, "vendor")
            .ok_or_else(|| HelperError::Invalid {
                what: format!("{addr} has no readable vendor id"),
            })?;
        if vendor != NVIDIA_VENDOR {
            return Err(HelperError::Invalid {
                what: format!("{addr} is not an NVIDIA function (vendor {vendor})"),
            });
        }
        Ok(())
    }

    /// Whether the function is an NVIDIA display controller (a GPU, not its audio function).
    pub fn is_nvidia_gpu(&self, addr: &PciAddress) -> bool {
        self.attribute(addr, "vendor").as_deref() == Some(NVIDIA_VENDOR)
            && self
                .attribute(addr, "class")
                .is_some_and(|c| c.starts_with(DISPLAY_CLASS_PREFIX))
    }

    /// A small attribute file, trimmed and lower-cased.
    pub fn attribute(&self, addr: &PciAddress, name: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.device_dir(addr).join(name)).ok()?;
        Some(text.trim().to_ascii_lowercase())
    }

    /// The function's driver: the `driver` link's file name, `None` without one.
    pub fn driver(&self, addr: &PciAddress) -> Option<String> {
        let target = std::fs::read_link(self.device_dir(addr).join("driver")).ok()?;
        target.file_name().map(|n| n.to_string_lossy().into_owned())
    }

    /// Polls until the driver satisfies `done` or `deadline` passes; returns the last reading.
    pub async fn wait_driver(
        &self,
        addr: &PciAddress,
        deadline: Instant,
        done: impl Fn(Option<&str>) -> bool,
    ) -> (Option<String>, bool) {
        loop {
            let now = self.driver(addr);
            if done(now.as_deref()) {
                return (now, true);
            }
            if Instant::now() >= deadline {
                return (now, false);
            }
            tokio::time::sleep(POLL_INTERVAL.min(deadline - Instant::now())).await;
        }
    }

    /// Writes `value` to a sysfs file on a blocking thread, waiting at most until `deadline`.
    ///
    /// # Errors
    /// `Ok(Err(io))` when the write failed, `Err(Expired)` when the deadline passed first (the
    /// write is then left to finish in its thread).
    pub async fn write(
        &self,
        path: &Path,
        value: &str,
        deadline: Instant,
    ) -> Result<std::io::Result<()>, Expired> {
        let path = path.to_path_buf();
        let value = value.to_owned();
        let job = tokio::task::spawn_blocking(move || write_now(&path, &value));
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, job).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(join)) => Ok(Err(std::io::Error::other(join.to_string()))),
            Err(_) => Err(Expired),
        }
    }
}

/// A bounded sysfs write whose bound passed.
#[derive(Debug, Clone, Copy)]
pub struct Expired;

fn write_now(path: &Path, value: &str) -> std::io::Result<()> {
    // Never create, never follow a link in the last component: these are kernel attributes.
    // O_TRUNC as a shell's `>` does: the kernel ignores it, a fake tree needs it.
    let mut f = OpenOptions::new()
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    // One write call: a sysfs attribute takes its value in one write.
    f.write_all(value.as_bytes())
}
