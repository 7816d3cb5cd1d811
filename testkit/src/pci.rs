//! A fake PCI kernel: a sysfs tree (`<root>/bus/pci`, `<root>/kernel/iommu_groups`) with a
//! thread playing the kernel's side of driver binding, for the helper's tests (which write the
//! files) and the agent's passthrough tests (which drive the helper). One implementation, so
//! both crates test against the same kernel.
//!
//! The kernel, every 10 ms: a write of an address to a driver's `unbind` removes the
//! function's `driver` link (unless the function is in [`FakePciKernel::stuck`]); a write to
//! `drivers_probe` links a driverless function to its `driver_override`, or to its default
//! driver when the override is empty (unless the function is in [`FakePciKernel::no_probe`]).
//! A FIFO in place of a file is left alone: it stands for a kernel that does not let go, and
//! the test holding its other end decides when it does. Each step is appended to the record
//! file when one is given.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::process::append_line;

/// How often the fake kernel looks at the files.
const KERNEL_POLL: Duration = Duration::from_millis(10);

/// The drivers the fake tree has.
const DRIVERS: [&str; 6] = [
    "nvidia",
    "vfio-pci",
    "snd_hda_intel",
    "ixgbe",
    "xhci_hcd",
    "pcieport",
];

/// The tree and its kernel thread; dropping it stops the thread (the tree stays).
#[derive(Debug)]
pub struct FakePciKernel {
    /// The `sys` folder the tree is in.
    pub root: PathBuf,
    defaults: Arc<Mutex<HashMap<String, String>>>,
    /// Functions whose driver never lets go.
    pub stuck: Arc<Mutex<HashSet<String>>>,
    /// Functions whose probe the kernel never completes (a kernel cut off mid-bind).
    pub no_probe: Arc<Mutex<HashSet<String>>>,
    record: Option<PathBuf>,
    stop: Arc<AtomicBool>,
    kernel: Option<JoinHandle<()>>,
}

impl FakePciKernel {
    /// An empty tree under `root` (the `sys` folder of a fake host) with the drivers above and
    /// `drivers_probe`; the kernel is not running yet ([`Self::start_kernel`]).
    pub fn new(root: &Path) -> Self {
        let pci = root.join("bus/pci");
        for d in DRIVERS {
            let dir = pci.join("drivers").join(d);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("unbind"), "").unwrap();
            std::fs::write(dir.join("bind"), "").unwrap();
        }
        std::fs::create_dir_all(pci.join("devices")).unwrap();
        std::fs::create_dir_all(root.join("kernel/iommu_groups")).unwrap();
        std::fs::write(pci.join("drivers_probe"), "").unwrap();
        Self {
            root: root.to_path_buf(),
            defaults: Arc::default(),
            stuck: Arc::default(),
            no_probe: Arc::default(),
            record: None,
            stop: Arc::default(),
            kernel: None,
        }
    }

    /// The same, appending each kernel step (`kernel: unbind A from D`, `kernel: probe A -> D`)
    /// to `record`.
    pub fn recording(root: &Path, record: &Path) -> Self {
        let mut kernel = Self::new(root);
        kernel.record = Some(record.to_path_buf());
        kernel
    }

    /// Adds a function on `driver` (also where a probe without override sends it; `None`: a
    /// function on no driver), in no IOMMU group.
    pub fn add_function(&self, addr: &str, vendor: &str, class: &str, driver: Option<&str>) {
        let dev = self.device(addr);
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("vendor"), format!("{vendor}\n")).unwrap();
        std::fs::write(dev.join("class"), format!("{class}\n")).unwrap();
        std::fs::write(dev.join("driver_override"), "").unwrap();
        if let Some(d) = driver {
            link_driver(&dev, d);
            self.set_default(addr, d);
        }
    }

    /// Adds a function as [`Self::add_function`] does, in IOMMU group `group`.
    pub fn add_function_in_group(
        &self,
        addr: &str,
        vendor: &str,
        class: &str,
        driver: Option<&str>,
        group: u32,
    ) {
        self.add_function(addr, vendor, class, driver);
        let dev = self.device(addr);
        let members = self
            .root
            .join(format!("kernel/iommu_groups/{group}/devices"));
        std::fs::create_dir_all(&members).unwrap();
        std::os::unix::fs::symlink(
            format!("../../../../bus/pci/devices/{addr}"),
            members.join(addr),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            format!("../../../../kernel/iommu_groups/{group}"),
            dev.join("iommu_group"),
        )
        .unwrap();
    }

    /// Sets the driver a probe without override gives the function.
    pub fn set_default(&self, addr: &str, driver: &str) {
        self.defaults
            .lock()
            .unwrap()
            .insert(addr.to_owned(), driver.to_owned());
    }

    /// Puts the function on no driver with this override, as a crash between unbind and
    /// probe leaves it.
    pub fn strand(&self, addr: &str, driver_override: &str) {
        let dev = self.device(addr);
        let _ = std::fs::remove_file(dev.join("driver"));
        std::fs::write(dev.join("driver_override"), driver_override).unwrap();
    }

    /// `<root>/bus/pci/devices/<addr>`.
    pub fn device(&self, addr: &str) -> PathBuf {
        self.root.join("bus/pci/devices").join(addr)
    }

    /// The function's driver now.
    pub fn driver(&self, addr: &str) -> Option<String> {
        std::fs::read_link(self.device(addr).join("driver"))
            .ok()
            .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
    }

    /// `driver_override` as it is now.
    pub fn driver_override(&self, addr: &str) -> String {
        std::fs::read_to_string(self.device(addr).join("driver_override")).unwrap()
    }

    /// Starts the kernel thread.
    pub fn start_kernel(&mut self) {
        let pci = self.root.join("bus/pci");
        let defaults = self.defaults.clone();
        let stuck = self.stuck.clone();
        let no_probe = self.no_probe.clone();
        let record = self.record.clone();
        let stop = self.stop.clone();
        self.kernel = Some(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                kernel_step(&pci, &defaults, &stuck, &no_probe, record.as_deref());
                std::thread::sleep(KERNEL_POLL);
            }
        }));
    }
}

impl Drop for FakePciKernel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(k) = self.kernel.take() {
            let _ = k.join();
        }
    }
}

/// Links `dev` (`<sys>/bus/pci/devices/<addr>`, a folder or, as in the demo hosts, a link to
/// one under `<sys>/devices`) to `driver` as the kernel does: relative to where the function's
/// folder really is, so the link resolves from either.
fn link_driver(dev: &Path, driver: &str) {
    let sys = dev
        .ancestors()
        .nth(4)
        .and_then(|s| std::fs::canonicalize(s).ok());
    let real = std::fs::canonicalize(dev).ok();
    let depth = match (sys, real) {
        (Some(sys), Some(real)) => real
            .strip_prefix(&sys)
            .map_or(3, |rel| rel.components().count()),
        _ => 3,
    };
    let target = format!("{}bus/pci/drivers/{driver}", "../".repeat(depth));
    std::os::unix::fs::symlink(target, dev.join("driver")).unwrap();
}

/// Takes (reads and empties) a regular file's content; anything else reads as empty.
fn take(path: &Path) -> String {
    if !std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file()) {
        return String::new();
    }
    let text = std::fs::read_to_string(path).unwrap_or_default();
    if !text.is_empty() {
        let _ = std::fs::write(path, "");
    }
    text.trim().to_owned()
}

fn kernel_step(
    pci: &Path,
    defaults: &Mutex<HashMap<String, String>>,
    stuck: &Mutex<HashSet<String>>,
    no_probe: &Mutex<HashSet<String>>,
    record: Option<&Path>,
) {
    let note = |line: String| {
        if let Some(r) = record {
            append_line(r, &line);
        }
    };
    // The tree may already be gone while the test tears down.
    let Ok(drivers) = std::fs::read_dir(pci.join("drivers")) else {
        return;
    };
    for driver in drivers.flatten() {
        let addr = take(&driver.path().join("unbind"));
        if !addr.is_empty() && !stuck.lock().unwrap().contains(&addr) {
            let _ = std::fs::remove_file(pci.join("devices").join(&addr).join("driver"));
            let name = driver.file_name().to_string_lossy().into_owned();
            note(format!("kernel: unbind {addr} from {name}"));
        }
    }
    let addr = take(&pci.join("drivers_probe"));
    if addr.is_empty() || no_probe.lock().unwrap().contains(&addr) {
        return;
    }
    let dev = pci.join("devices").join(&addr);
    if std::fs::symlink_metadata(dev.join("driver")).is_ok() {
        return;
    }
    let over = std::fs::read_to_string(dev.join("driver_override")).unwrap_or_default();
    let target = match over.trim() {
        "" => defaults.lock().unwrap().get(&addr).cloned(),
        o => Some(o.to_owned()),
    };
    if let Some(t) = target {
        link_driver(&dev, &t);
        note(format!("kernel: probe {addr} -> {t}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_unbinds_and_probes_to_the_override_and_records_it() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("record");
        let mut k = FakePciKernel::recording(&dir.path().join("sys"), &record);
        k.add_function_in_group("0000:18:00.0", "0x10de", "0x030200", Some("nvidia"), 7);
        k.start_kernel();
        let pci = dir.path().join("sys/bus/pci");
        std::fs::write(pci.join("drivers/nvidia/unbind"), "0000:18:00.0").unwrap();
        crate::wait_for("the unbind", Duration::from_secs(5), || {
            k.driver("0000:18:00.0").is_none()
        });
        std::fs::write(k.device("0000:18:00.0").join("driver_override"), "vfio-pci").unwrap();
        std::fs::write(pci.join("drivers_probe"), "0000:18:00.0").unwrap();
        crate::wait_for("the probe", Duration::from_secs(5), || {
            k.driver("0000:18:00.0").as_deref() == Some("vfio-pci")
        });
        assert!(dir
            .path()
            .join("sys/kernel/iommu_groups/7/devices/0000:18:00.0")
            .exists());
        drop(k);
        assert_eq!(
            std::fs::read_to_string(&record).unwrap(),
            "kernel: unbind 0000:18:00.0 from nvidia\nkernel: probe 0000:18:00.0 -> vfio-pci\n"
        );
    }

    #[test]
    fn a_stuck_function_keeps_its_driver() {
        let dir = tempfile::tempdir().unwrap();
        let mut k = FakePciKernel::new(dir.path());
        k.add_function("0000:18:00.0", "0x10de", "0x030200", Some("nvidia"));
        k.stuck.lock().unwrap().insert("0000:18:00.0".into());
        k.start_kernel();
        let unbind = dir.path().join("bus/pci/drivers/nvidia/unbind");
        std::fs::write(&unbind, "0000:18:00.0").unwrap();
        crate::wait_for("the kernel to read unbind", Duration::from_secs(5), || {
            std::fs::read_to_string(&unbind).unwrap().is_empty()
        });
        assert_eq!(k.driver("0000:18:00.0").as_deref(), Some("nvidia"));
    }
}
