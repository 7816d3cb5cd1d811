//! The PCI part of sysfs, as the helper touches it: it reads `vendor`, `class` and the `driver`
//! link, and writes `driver_override`, `unbind` and `drivers_probe`. Nothing else.
//!
//! Every write runs on a thread of its own under a bound: a real unbind blocks in the kernel
//! until the driver lets go, and must not block the helper. A write cannot be cancelled once
//! the kernel has it, so it is never abandoned: its function is marked pending until the
//! kernel returns ([`Sysfs::pending`]; every operation on that function answers `Busy` until
//! then), a write whose deadline passed before its thread could start is skipped (never
//! performed late), and a write that returns after its operation was answered is logged and
//! audited as what it did.
//!
//! An operation writes only through [`Writes`], reserved with [`Sysfs::reserve`] before its
//! first write and covering every write it may need, its rollback's included: it either has a
//! writer for each step or is refused touching nothing (a bind that wrote `driver_override`
//! and then found no writer to clear it left the function on its way to vfio-pci). A function
//! with a write still in the kernel gets no reservation, so it holds at most
//! [`FUNCTION_SHARE`] writes, and the bound on all writes at once is that share times the
//! functions a VM may be given at start-up (at least [`MIN_FUNCTIONS`]): functions whose
//! driver does not let go use up only their own shares, never a healthy function's.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bcd_protocol::{HelperError, PciAddress};

/// NVIDIA's PCI vendor id, as sysfs prints it.
pub const NVIDIA_VENDOR: &str = "0x10de";
/// The display classes a GPU may have: VGA-compatible and 3D controllers.
pub const GPU_CLASSES: [&str; 2] = ["0x0300", "0x0302"];
/// An HD audio function (a GPU's HDMI/DP audio sits at another function of its slot).
pub const AUDIO_CLASS: &str = "0x0403";
/// Most writes one operation on one function reserves (a bind's: `driver_override`, the
/// unbind, the probe, and its rollback's clearing of `driver_override` and probe back).
pub const FUNCTION_SHARE: usize = 5;
/// The fewest functions the bound on writes is sized for, whatever the tree had at start-up
/// (a function hot-plugged later, a host read before its GPUs appeared).
pub const MIN_FUNCTIONS: usize = 8;
/// The driver a passed-through function sits on.
pub const VFIO_DRIVER: &str = "vfio-pci";
/// NVIDIA's kernel driver.
pub const NVIDIA_DRIVER: &str = "nvidia";
/// How often the `driver` link is looked at while waiting for it to change.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Called with a sentence when a write returns after its operation was answered.
pub type LateWrite = Arc<dyn Fn(&PciAddress, String) + Send + Sync>;

/// The PCI tree under a sysfs root.
#[derive(Clone)]
pub struct Sysfs {
    root: PathBuf,
    bound: Arc<Mutex<Bound>>,
    late: Option<LateWrite>,
}

impl std::fmt::Debug for Sysfs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sysfs").field("root", &self.root).finish()
    }
}

/// The kernel-write bound, shared by every operation.
#[derive(Debug, Default)]
struct Bound {
    /// Most writes reserved or in the kernel at once.
    cap: usize,
    /// Writes reserved and not yet started, plus writes whose thread has not ended.
    held: usize,
    /// Writes still in the kernel, by function: what each is ("an unbind").
    pending: HashMap<PciAddress, Vec<&'static str>>,
}

/// Why an operation got no writes. `Display` is the operator's sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// An earlier write to the function has not returned from the kernel.
    #[error(
        "{what} of {device} is still pending in the kernel (its driver has not let go), so \
         nothing was done to {device}: do not retry until it finishes"
    )]
    Stuck {
        /// The function.
        device: PciAddress,
        /// The write the kernel holds ("an unbind").
        what: &'static str,
    },
    /// Every write of the bound is reserved or in the kernel (more functions than at start-up).
    #[error(
        "{device}: all {cap} sysfs writes bcd-helper allows at once are reserved or still in \
         the kernel ({stuck} functions have writes the kernel holds; the bound was sized at \
         start-up for the GPUs then on the bus); nothing was done to {device}: retry when they \
         finish, or restart bcd-helper to size it for a GPU added since"
    )]
    Full {
        /// The function.
        device: PciAddress,
        /// The bound.
        cap: usize,
        /// Functions with a write still in the kernel.
        stuck: usize,
    },
}

impl From<Refused> for HelperError {
    fn from(e: Refused) -> Self {
        HelperError::Busy {
            what: e.to_string(),
        }
    }
}

/// The writes one operation reserved for one function: each [`Writes::write`] uses one, and
/// what is left goes back to the bound when this is dropped. A write still in the kernel then
/// keeps its place until the kernel returns.
#[derive(Debug)]
pub struct Writes {
    sysfs: Sysfs,
    addr: PciAddress,
    left: usize,
}

/// A write that did not complete within its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotDone {
    /// The deadline passed while the kernel had the write: it is still pending there.
    Pending,
    /// The deadline passed before the write started: it was not performed.
    Skipped,
    /// The operation had used every write it reserved: it was not performed.
    Unreserved,
}

impl Sysfs {
    /// The tree under `root` (`/sys` on a host, a temporary folder in tests), with the bound
    /// on writes sized for the functions a VM may be given there now (see the module doc).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let sysfs = Self {
            root: root.into(),
            bound: Arc::default(),
            late: None,
        };
        let functions = sysfs.passthrough_functions().len().max(MIN_FUNCTIONS);
        lock(&sysfs.bound).cap = functions * FUNCTION_SHARE;
        sysfs
    }

    /// Most writes reserved or in the kernel at once.
    pub fn write_cap(&self) -> usize {
        lock(&self.bound).cap
    }

    /// Reserves `count` writes (at most [`FUNCTION_SHARE`]) for one operation on `addr`, before
    /// its first write: enough for every step and its rollback.
    ///
    /// # Errors
    /// [`Refused::Stuck`] when a write to `addr` is still in the kernel, [`Refused::Full`] when
    /// the bound has not `count` writes left. Nothing is reserved then.
    pub fn reserve(&self, addr: &PciAddress, count: usize) -> Result<Writes, Refused> {
        debug_assert!(
            count <= FUNCTION_SHARE,
            "{count} writes exceed a function's share"
        );
        let mut bound = lock(&self.bound);
        if let Some(what) = bound.pending.get(addr).and_then(|w| w.first()) {
            return Err(Refused::Stuck {
                device: *addr,
                what,
            });
        }
        if bound.held + count > bound.cap {
            return Err(Refused::Full {
                device: *addr,
                cap: bound.cap,
                stuck: bound.pending.len(),
            });
        }
        bound.held += count;
        Ok(Writes {
            sysfs: self.clone(),
            addr: *addr,
            left: count,
        })
    }

    /// Calls `late` for every write that returns from the kernel after its operation stopped
    /// waiting for it (the helper audits those).
    pub fn on_late_write(mut self, late: LateWrite) -> Self {
        self.late = Some(late);
        self
    }

    /// What is still pending in the kernel for `addr` ("an unbind"), if anything. While
    /// something is, no operation may touch the function.
    pub fn pending(&self, addr: &PciAddress) -> Option<&'static str> {
        lock(&self.bound)
            .pending
            .get(addr)
            .and_then(|w| w.first().copied())
    }

    /// Whether any write is still in the kernel.
    pub fn any_pending(&self) -> bool {
        !lock(&self.bound).pending.is_empty()
    }

    /// The `Busy` answer for a function with a write still in the kernel.
    ///
    /// # Errors
    /// [`Refused::Stuck`] naming the function and the write.
    pub fn busy_if_pending(&self, addr: &PciAddress) -> Result<(), Refused> {
        match self.pending(addr) {
            Some(what) => Err(Refused::Stuck {
                device: *addr,
                what,
            }),
            None => Ok(()),
        }
    }

    /// `<root>/bus/pci/devices/<addr>`.
    pub fn device_dir(&self, addr: &PciAddress) -> PathBuf {
        self.root.join("bus/pci/devices").join(addr.sysfs_name())
    }

    /// `<root>/bus/pci/drivers`.
    pub fn drivers_dir(&self) -> PathBuf {
        self.root.join("bus/pci/drivers")
    }

    /// `<root>/bus/pci/drivers_probe`.
    pub fn probe_file(&self) -> PathBuf {
        self.root.join("bus/pci/drivers_probe")
    }

    /// Checks the function is one a VM may be given: an NVIDIA GPU (display class 0x0300 or
    /// 0x0302), or the audio function of a slot that has one. NVSwitch bridges (0x0680) and
    /// everything else are refused: unbinding an NVSwitch takes NVLink down for the whole board.
    ///
    /// # Errors
    /// `Invalid` naming the function and its class.
    pub fn check_passthrough(&self, addr: &PciAddress) -> Result<(), HelperError> {
        self.check_nvidia(addr)?;
        let class = self.attribute(addr, "class").unwrap_or_default();
        if self.is_nvidia_gpu(addr) {
            return Ok(());
        }
        if class.starts_with(AUDIO_CLASS) && self.slot_has_gpu(addr) {
            return Ok(());
        }
        Err(HelperError::Invalid {
            what: format!(
                "{addr} is an NVIDIA function of class {}, not a GPU (0x0300, 0x0302) or a GPU's \
                 audio function; bcd-helper moves only those to vfio-pci (an NVSwitch, 0x0680, \
                 would take NVLink down for the whole board)",
                if class.is_empty() { "unknown" } else { &class }
            ),
        })
    }

    /// Checks the function is an NVIDIA GPU, for persistence and resets.
    ///
    /// # Errors
    /// `Invalid` naming the function.
    pub fn check_gpu(&self, addr: &PciAddress) -> Result<(), HelperError> {
        self.check_nvidia(addr)?;
        if self.is_nvidia_gpu(addr) {
            Ok(())
        } else {
            Err(HelperError::Invalid {
                what: format!(
                    "{addr} is an NVIDIA function but not a GPU (class {})",
                    self.attribute(addr, "class")
                        .as_deref()
                        .unwrap_or("unknown")
                ),
            })
        }
    }

    /// Whether another function of `addr`'s slot is an NVIDIA GPU.
    fn slot_has_gpu(&self, addr: &PciAddress) -> bool {
        (0..8u8)
            .filter(|f| *f != addr.function())
            .filter_map(|f| addr.with_function(f))
            .any(|a| self.is_nvidia_gpu(&a))
    }

    /// The NVIDIA functions a VM may be given, as they are now: for the sandbox's rules.
    pub fn passthrough_functions(&self) -> Vec<PciAddress> {
        let mut found: Vec<PciAddress> = std::fs::read_dir(self.root.join("bus/pci/devices"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
            .filter(|a| self.check_passthrough(a).is_ok())
            .collect();
        found.sort();
        found
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

    /// Whether the function is an NVIDIA GPU: a VGA or 3D controller (not its audio
    /// function, not an NVSwitch bridge).
    pub fn is_nvidia_gpu(&self, addr: &PciAddress) -> bool {
        self.attribute(addr, "vendor").as_deref() == Some(NVIDIA_VENDOR)
            && self
                .attribute(addr, "class")
                .is_some_and(|c| GPU_CLASSES.iter().any(|g| c.starts_with(g)))
    }

    /// A small attribute file, trimmed and lower-cased.
    pub fn attribute(&self, addr: &PciAddress, name: &str) -> Option<String> {
        let text = read_small(&self.device_dir(addr).join(name))?;
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
}

impl Writes {
    /// The function these writes were reserved for (every write marks it pending).
    pub fn device(&self) -> PciAddress {
        self.addr
    }

    /// Writes `value` to a sysfs file of this function on a thread of its own, using one of the
    /// reserved writes, waiting at most until `deadline`. `what` names the write for messages
    /// ("an unbind").
    ///
    /// The function is marked pending from the moment the thread starts until the kernel
    /// returns, whether or not anyone still waits: see [`Sysfs::pending`].
    ///
    /// # Errors
    /// `Ok(Err(io))` when the write failed; `Err(NotDone)` when it did not complete in time
    /// (still pending in the kernel, or never started) or none of the reserved writes was left.
    ///
    /// # Cancel safety
    /// Dropping the future leaves a started write to its thread, which keeps its place in the
    /// bound and the function's pending mark until the kernel returns.
    pub async fn write(
        &mut self,
        what: &'static str,
        path: &Path,
        value: &str,
        deadline: Instant,
    ) -> Result<std::io::Result<()>, NotDone> {
        if self.left == 0 {
            return Err(NotDone::Unreserved);
        }
        // The reserved place moves to the write's thread, which gives it back when it ends.
        self.left -= 1;
        let addr = self.addr;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job = Job {
            addr,
            what,
            path: path.to_path_buf(),
            value: value.to_owned(),
            deadline,
            bound: self.sysfs.bound.clone(),
            late: self.sysfs.late.clone(),
        };
        // Marked before the thread exists, so no operation can slip in between.
        lock(&self.sysfs.bound)
            .pending
            .entry(addr)
            .or_default()
            .push(what);
        let spawned = std::thread::Builder::new()
            .name("sysfs-write".to_owned())
            .spawn(move || job.run(tx));
        if let Err(e) = spawned {
            finish(&self.sysfs.bound, &addr, what);
            return Ok(Err(e));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx).await {
            Ok(Ok(Some(result))) => Ok(result),
            Ok(Ok(None)) => Err(NotDone::Skipped),
            Ok(Err(_)) => Ok(Err(std::io::Error::other("the write's thread ended"))),
            Err(_) => Err(NotDone::Pending),
        }
    }
}

impl Drop for Writes {
    fn drop(&mut self) {
        let mut bound = lock(&self.sysfs.bound);
        bound.held = bound.held.saturating_sub(self.left);
    }
}

/// One write on its thread.
struct Job {
    addr: PciAddress,
    what: &'static str,
    path: PathBuf,
    value: String,
    deadline: Instant,
    bound: Arc<Mutex<Bound>>,
    late: Option<LateWrite>,
}

impl Job {
    /// Performs the write unless its deadline passed first (`None`), then unmarks the
    /// function, gives its place back to the bound and reports a late return.
    fn run(self, tx: tokio::sync::oneshot::Sender<Option<std::io::Result<()>>>) {
        let result = (Instant::now() < self.deadline).then(|| write_now(&self.path, &self.value));
        finish(&self.bound, &self.addr, self.what);
        let done = match &result {
            Some(Ok(())) => "succeeded".to_owned(),
            Some(Err(e)) => format!("failed ({e})"),
            None => "was skipped".to_owned(),
        };
        if tx.send(result).is_err() {
            // Nobody waits any more: the operation was answered without this write.
            let sentence = format!(
                "{} of {} ({}) returned from the kernel after its operation was answered and {done}",
                self.what,
                self.addr,
                self.path.display()
            );
            tracing::warn!("{sentence}");
            if let Some(late) = &self.late {
                late(&self.addr, sentence);
            }
        }
    }
}

/// A write's end: its function is unmarked and its place in the bound given back.
fn finish(bound: &Mutex<Bound>, addr: &PciAddress, what: &'static str) {
    let mut bound = lock(bound);
    bound.held = bound.held.saturating_sub(1);
    if let Some(list) = bound.pending.get_mut(addr) {
        if let Some(i) = list.iter().position(|w| *w == what) {
            list.remove(i);
        }
        if list.is_empty() {
            bound.pending.remove(addr);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reads a small attribute without blocking on a FIFO and without following a final link.
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read as _;
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let mut text = String::new();
    (&mut f).take(4096).read_to_string(&mut text).ok()?;
    Some(text)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(bus: u8) -> PciAddress {
        format!("0000:{bus:02x}:00.0").parse().unwrap()
    }

    /// A tree under `root` with `gpus` NVIDIA GPUs at buses 0x10 onwards.
    fn tree(root: &Path, gpus: u8) -> Sysfs {
        for bus in 0x10..0x10 + gpus {
            let dir = root.join("bus/pci/devices").join(addr(bus).sysfs_name());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("vendor"), "0x10de\n").unwrap();
            std::fs::write(dir.join("class"), "0x030200\n").unwrap();
        }
        std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
        Sysfs::new(root)
    }

    fn held(sysfs: &Sysfs) -> usize {
        lock(&sysfs.bound).held
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    // Guards the global cap: sized from the functions at start-up with a floor, and a refusal
    // when it is used up reserves nothing.
    #[test]
    fn the_cap_is_a_share_per_function_and_a_refusal_reserves_nothing() {
        let small = tempfile::tempdir().unwrap();
        let sysfs = tree(small.path(), 2);
        assert_eq!(sysfs.write_cap(), MIN_FUNCTIONS * FUNCTION_SHARE);
        let big = tempfile::tempdir().unwrap();
        assert_eq!(tree(big.path(), 12).write_cap(), 12 * FUNCTION_SHARE);

        let taken: Vec<Writes> = (0..MIN_FUNCTIONS as u8)
            .map(|i| sysfs.reserve(&addr(0x40 + i), FUNCTION_SHARE).unwrap())
            .collect();
        let err = sysfs.reserve(&addr(0x10), 1).unwrap_err();
        assert!(matches!(err, Refused::Full { .. }), "{err}");
        let sentence = err.to_string();
        assert!(
            sentence.starts_with("0000:10:00.0: all 40 sysfs writes")
                && sentence.contains("nothing was done to 0000:10:00.0"),
            "{sentence}"
        );
        assert_eq!(
            held(&sysfs),
            sysfs.write_cap(),
            "the refusal reserved nothing"
        );
        drop(taken);
        assert_eq!(held(&sysfs), 0, "unused writes go back at drop");
        assert!(sysfs.reserve(&addr(0x10), FUNCTION_SHARE).is_ok());
    }

    // Guards the per-function limit: a function whose write the kernel holds gets no new
    // reservation (naming it and the write), keeps its place in the bound until the kernel
    // returns, and never stops another function's reservation.
    #[tokio::test]
    async fn a_function_with_a_write_in_the_kernel_gets_no_reservation_and_others_do() {
        let dir = tempfile::tempdir().unwrap();
        let sysfs = tree(dir.path(), 2);
        let fifo = dir.path().join("unbind");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let stuck = addr(0x10);
        let mut writes = sysfs.reserve(&stuck, FUNCTION_SHARE).unwrap();
        let deadline = Instant::now() + Duration::from_millis(200);
        let done = writes.write("an unbind", &fifo, "x", deadline).await;
        assert_eq!(done.unwrap_err(), NotDone::Pending);
        drop(writes);
        assert_eq!(held(&sysfs), 1, "the write in the kernel keeps its place");

        let err = sysfs.reserve(&stuck, 1).unwrap_err();
        assert_eq!(
            err.to_string(),
            "an unbind of 0000:10:00.0 is still pending in the kernel (its driver has not let \
             go), so nothing was done to 0000:10:00.0: do not retry until it finishes"
        );
        let other = dir.path().join("driver_override");
        std::fs::write(&other, "").unwrap();
        let mut healthy = sysfs.reserve(&addr(0x11), FUNCTION_SHARE).unwrap();
        let wrote = healthy.write("a write", &other, "vfio-pci", soon()).await;
        assert!(matches!(wrote, Ok(Ok(()))), "{wrote:?}");
        drop(healthy);

        // The kernel lets go: the place and the function are free again.
        let reader = std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap());
        assert_eq!(reader.join().unwrap(), "x");
        let until = soon();
        while sysfs.pending(&stuck).is_some() {
            assert!(Instant::now() < until, "the write never returned");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(held(&sysfs), 0);
        assert!(sysfs.reserve(&stuck, FUNCTION_SHARE).is_ok());
    }

    // Guards the reservation's size: a write past it is not performed.
    #[tokio::test]
    async fn a_write_past_the_reservation_is_not_performed() {
        let dir = tempfile::tempdir().unwrap();
        let sysfs = tree(dir.path(), 1);
        let file = dir.path().join("driver_override");
        std::fs::write(&file, "").unwrap();
        let mut writes = sysfs.reserve(&addr(0x10), 1).unwrap();
        assert!(matches!(
            writes.write("a write", &file, "first", soon()).await,
            Ok(Ok(()))
        ));
        let second = writes.write("a write", &file, "second", soon()).await;
        assert_eq!(second.unwrap_err(), NotDone::Unreserved);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "first");
    }
}
