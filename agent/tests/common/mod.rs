//! Test rig for the passthrough runtimes: a fake PCI sysfs tree with IOMMU groups whose kernel
//! side is played by a thread, the real `bcd-helper` started on a socket in a temporary folder,
//! and fake `nvidia-smi` and `virsh` wrappers that append each call to one record file, so the
//! order of persistence calls, kernel steps and `virsh` runs can be read in one place.
//!
//! The fake kernel follows the helper's own test kernel (`helper/tests/common`), written again
//! here because integration tests of one crate cannot share another's, with two additions:
//! IOMMU groups, and functions whose probe never completes (a kernel cut off mid-bind).

#![allow(dead_code)] // each test file uses a different part

use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the fake kernel looks at the files.
const KERNEL_POLL: Duration = Duration::from_millis(10);
/// How long a started helper may take to listen.
const HELPER_START: Duration = Duration::from_secs(10);

/// The `bcd-helper` binary built beside `bcd`, or `None` after skipping (a failure under
/// `CI`) when it has not been built: `cargo test --workspace` builds it.
pub fn helper_binary() -> Option<PathBuf> {
    bcd_testkit::built(&PathBuf::from(env!("CARGO_BIN_EXE_bcd")).with_file_name("bcd-helper"))
}

/// Appends one line to the record file.
pub fn record(path: &Path, line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

/// The record file's lines.
pub fn recorded(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
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

/// Waits for a Unix socket at `path` to be listening, read from `/proc/net/unix` so that
/// waiting opens no connection (a stale socket file may be there from a killed helper).
pub fn wait_listening(path: &Path, bound: Duration) {
    const ACCEPTING: &str = "00010000";
    let start = Instant::now();
    let want = path.display().to_string();
    loop {
        let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
        let listening = table.lines().any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() >= 8 && cols[3] == ACCEPTING && cols[7] == want
        });
        if listening {
            return;
        }
        assert!(start.elapsed() < bound, "{want} is not listening");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A fake PCI sysfs tree (`<root>/bus/pci`, `<root>/kernel/iommu_groups`) with a thread
/// playing the kernel: a write to a driver's `unbind` removes the function's `driver` link
/// (unless the function is `stuck`), and a write to `drivers_probe` links a driverless
/// function to its `driver_override`, or to its default driver when the override is empty
/// (unless the function is in `no_probe`). Each kernel step is appended to `record`.
pub struct FakeSysfs {
    pub root: PathBuf,
    defaults: Arc<Mutex<HashMap<String, String>>>,
    /// Functions whose driver never lets go.
    pub stuck: Arc<Mutex<HashSet<String>>>,
    /// Functions whose probe the kernel never completes.
    pub no_probe: Arc<Mutex<HashSet<String>>>,
    record: PathBuf,
    stop: Arc<AtomicBool>,
    kernel: Option<JoinHandle<()>>,
}

/// The drivers the fake tree has.
const DRIVERS: [&str; 6] = [
    "nvidia",
    "vfio-pci",
    "snd_hda_intel",
    "ixgbe",
    "xhci_hcd",
    "pcieport",
];

impl FakeSysfs {
    /// An empty tree under `root` (the `sys` folder of a fake host), recording to `record`.
    pub fn new(root: &Path, record: &Path) -> Self {
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
            record: record.to_path_buf(),
            stop: Arc::default(),
            kernel: None,
        }
    }

    /// Adds a function on `driver` (also where a probe without override sends it; `None`: a
    /// function on no driver) in IOMMU group `group`.
    pub fn add_function(
        &self,
        addr: &str,
        vendor: &str,
        class: &str,
        driver: Option<&str>,
        group: u32,
    ) {
        let dev = self.device(addr);
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("vendor"), format!("{vendor}\n")).unwrap();
        std::fs::write(dev.join("class"), format!("{class}\n")).unwrap();
        std::fs::write(dev.join("driver_override"), "").unwrap();
        if let Some(d) = driver {
            link_driver(&dev, d);
            self.defaults
                .lock()
                .unwrap()
                .insert(addr.to_owned(), d.to_owned());
        }
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
                kernel_step(&pci, &defaults, &stuck, &no_probe, &record);
                std::thread::sleep(KERNEL_POLL);
            }
        }));
    }
}

impl Drop for FakeSysfs {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(k) = self.kernel.take() {
            let _ = k.join();
        }
    }
}

fn link_driver(dev: &Path, driver: &str) {
    std::os::unix::fs::symlink(format!("../../drivers/{driver}"), dev.join("driver")).unwrap();
}

/// Takes (reads and empties) a file's content.
fn take(path: &Path) -> String {
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
    record: &Path,
) {
    // The tree may already be gone while the test tears down.
    let Ok(drivers) = std::fs::read_dir(pci.join("drivers")) else {
        return;
    };
    for driver in drivers.flatten() {
        let addr = take(&driver.path().join("unbind"));
        if !addr.is_empty() && !stuck.lock().unwrap().contains(&addr) {
            let _ = std::fs::remove_file(pci.join("devices").join(&addr).join("driver"));
            let name = driver.file_name().to_string_lossy().into_owned();
            self::record(record, &format!("kernel: unbind {addr} from {name}"));
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
        self::record(record, &format!("kernel: probe {addr} -> {t}"));
    }
}
