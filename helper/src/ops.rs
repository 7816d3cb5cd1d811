//! The privileged operations: `nvidia-smi` persistence, reset and MIG steps (mode, destroy
//! and create instances), vfio-pci bind and release through sysfs, libvirt
//! start/restore/destroy with persistence around them, and `nvidia-ctk cdi generate` into the
//! one spec file root configured.
//!
//! Every operation first takes the lock of each device it touches (see [`DeviceLocks`]), so
//! two operations on one GPU never overlap while operations on different GPUs run at once.
//! GPUs are named by PCI address only (the protocol allows nothing else for operations that
//! change state), so one GPU has exactly one lock. A PCI function's lock is also a lock file
//! ([`crate::lockfile`]) that every child of the operation inherits, so a device stays locked
//! while anything the operation started runs, even past this helper's death: a function whose
//! file another process holds is refused `Busy` at once. A function with a sysfs write still
//! pending in the kernel is refused `Busy` by every operation, whatever its lock says.
//!
//! A vfio bind or release reserves every sysfs write it may need ([`BIND_WRITES`],
//! [`RELEASE_WRITES`], rollback included) after its checks and before it changes anything
//! (persistence mode included), so it either has a writer for each step or is refused
//! `Busy` with the function exactly as it was.

use std::collections::HashMap;
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bcd_protocol::{
    DomainName, HelperError, Operation, Outcome, PciAddress, PersistenceNote, SaveFile,
};
use tokio::sync::OwnedMutexGuard;

use crate::child::{self, ChildError, Command};
use crate::libvirt::Libvirt;
use crate::lockfile::{LockDir, LockFile};
use crate::sysfs::{NotDone, Sysfs, Writes, FUNCTION_SHARE, NVIDIA_DRIVER, VFIO_DRIVER};

/// How long an operation waits for a device another operation holds before answering `Busy`
/// (the default of `--lock-wait`). Waiting (rather than answering `Busy` at once) lets the
/// agent queue work on one GPU without retry loops; the bound keeps a wedged operation from
/// piling up callers forever.
pub const DEVICE_LOCK_WAIT: Duration = Duration::from_secs(30);
/// Bound on the small sysfs writes (`driver_override`, `drivers_probe`).
pub const SYSFS_WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for the kernel to show the new driver after a probe.
pub const PROBE_SETTLE: Duration = Duration::from_secs(2);
/// How long, after `virsh destroy`, to wait for libvirt to give a GPU back to `nvidia`.
pub const DESTROY_SETTLE: Duration = Duration::from_secs(5);
/// The sysfs writes a bind may need: `driver_override`, the unbind, the probe, and when the
/// kernel does not bind vfio-pci, clearing `driver_override` and probing back (a failed unbind
/// needs only the clearing, which fits in the same count).
pub const BIND_WRITES: usize = 5;
/// The sysfs writes a release may need: the unbind, clearing `driver_override`, the probe.
pub const RELEASE_WRITES: usize = 3;
const _: () = assert!(BIND_WRITES <= FUNCTION_SHARE && RELEASE_WRITES <= FUNCTION_SHARE);
/// Lock entries kept before idle ones are dropped (peers choose GPU UUIDs freely).
const MAX_IDLE_LOCKS: usize = 1024;

/// What one operation locks. Domains and save files sort before functions, and every
/// operation that takes both takes them in that order, so lock waits cannot form a cycle.
/// A function's lock file is taken right after its in-process lock and never waited for (a
/// holder outside this process is refused after [`crate::lockfile::HELD_ELSEWHERE_GRACE`]),
/// so it adds no wait to the order.
///
/// Every GPU is a PCI function here: the protocol names GPUs by address for every operation
/// that changes them, and domain names can never be a domain's id or UUID (which `virsh`
/// would also accept), so each device and each domain has one key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceKey {
    /// A libvirt domain.
    Domain(String),
    /// A save image.
    SaveFile(PathBuf),
    /// A PCI function (a GPU, or another function of its slot).
    Pci(PciAddress),
}

impl fmt::Display for DeviceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceKey::Domain(d) => write!(f, "domain {d}"),
            DeviceKey::SaveFile(p) => write!(f, "save image {}", p.display()),
            DeviceKey::Pci(p) => write!(f, "{p}"),
        }
    }
}

/// One device's lock and how many operations wait for it. tokio's mutex serves waiters in
/// the order they came.
#[derive(Debug, Default)]
struct Entry {
    mutex: Arc<tokio::sync::Mutex<()>>,
    /// Operations that hold or wait for the lock.
    users: AtomicUsize,
}

/// One async mutex per device, created on first use, and each PCI function's lock file.
#[derive(Debug)]
pub struct DeviceLocks {
    map: Mutex<HashMap<DeviceKey, Arc<Entry>>>,
    files: LockDir,
}

/// Counts an operation among a lock's users while it holds or waits for it.
struct Using(Arc<Entry>);

impl Drop for Using {
    fn drop(&mut self) {
        self.0.users.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One held device lock: the in-process mutex and, for a PCI function, its lock file.
struct HeldOne {
    _guard: OwnedMutexGuard<()>,
    _using: Using,
    file: Option<LockFile>,
}

/// Held device locks; dropping it frees them (a lock file stays locked while a child that
/// inherited it runs).
pub struct Held(Vec<HeldOne>);

impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Held({} locks)", self.0.len())
    }
}

impl Held {
    /// The lock files held, for the children of the operation to inherit.
    pub fn files(&self) -> Vec<BorrowedFd<'_>> {
        self.0
            .iter()
            .filter_map(|h| h.file.as_ref().map(AsFd::as_fd))
            .collect()
    }
}

impl DeviceLocks {
    /// Why no operation on a device can run (the lock folder's refusal), when so.
    pub fn unusable(&self) -> Option<String> {
        self.files.unusable()
    }

    /// No lock taken yet; PCI functions' lock files in `files`.
    pub fn new(files: LockDir) -> Self {
        Self {
            map: Mutex::default(),
            files,
        }
    }

    /// Takes every key's lock, in order, waiting at most `wait` in all, and each PCI
    /// function's lock file right after its lock.
    ///
    /// # Errors
    /// `Busy` naming the device still held when the wait ran out, and how many operations
    /// were ahead of this one in its queue; the lock file's refusal
    /// ([`crate::lockfile::LockError`]: `Busy` when another process holds it, `Failed` when
    /// it cannot be used). Locks taken before the refusal are freed.
    pub async fn acquire(
        &self,
        mut keys: Vec<DeviceKey>,
        wait: Duration,
    ) -> Result<Held, HelperError> {
        keys.sort();
        keys.dedup();
        let deadline = Instant::now() + wait;
        let mut held = Vec::with_capacity(keys.len());
        for key in keys {
            let entry = {
                let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
                if map.len() > MAX_IDLE_LOCKS {
                    map.retain(|_, e| e.users.load(Ordering::SeqCst) > 0);
                }
                map.entry(key.clone()).or_default().clone()
            };
            // Those ahead: the holder and the waiters that came before this one.
            let ahead = entry.users.fetch_add(1, Ordering::SeqCst);
            let using = Using(entry.clone());
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, entry.mutex.clone().lock_owned()).await {
                Ok(guard) => {
                    let file = match &key {
                        DeviceKey::Pci(addr) => Some(self.files.lock(addr).await?),
                        DeviceKey::Domain(_) | DeviceKey::SaveFile(_) => None,
                    };
                    held.push(HeldOne {
                        _guard: guard,
                        _using: using,
                        file,
                    });
                }
                Err(_) => {
                    let queued = ahead.saturating_sub(1);
                    return Err(HelperError::Busy {
                        what: format!(
                            "{key} is in use by another operation{}; this one waited {}s for it",
                            match queued {
                                0 => String::new(),
                                1 => " and 1 more was queued ahead of this one".to_owned(),
                                n => format!(" and {n} more were queued ahead of this one"),
                            },
                            wait.as_secs()
                        ),
                    });
                }
            }
        }
        Ok(Held(held))
    }
}

/// The operations and what they need from the host.
#[derive(Debug)]
pub struct Ops {
    /// The `nvidia-smi` to run.
    pub nvidia_smi: PathBuf,
    /// The bound on one `nvidia-smi` call.
    pub smi_timeout: Duration,
    /// How long a driver may take to let go of a function.
    pub unbind_timeout: Duration,
    /// The PCI tree.
    pub sysfs: Sysfs,
    /// libvirt.
    pub libvirt: Libvirt,
    /// The per-device locks.
    pub locks: DeviceLocks,
    /// How long an operation waits for a device's lock.
    pub lock_wait: Duration,
    /// Whether the sandbox confines the programs run (an exec refused then means the program
    /// was replaced since start-up).
    pub confined: bool,
    /// Set when this helper can no longer run a program it needs and must be replaced by a
    /// fresh one (systemd starts it again on the next connection).
    pub restart_needed: Arc<AtomicBool>,
    /// How the helper is confined, in words, for `Ping`'s answer.
    pub sandbox: String,
    /// NVIDIA's CDI spec generator, and where its spec goes (`None`: not configured).
    pub nvidia_cdi: Option<NvidiaCdi>,
}

/// How NVIDIA's CDI spec is generated: root's settings, never the peer's.
#[derive(Debug)]
pub struct NvidiaCdi {
    /// `--nvidia-ctk`.
    pub ctk: PathBuf,
    /// `--nvidia-cdi-spec`: the one file written.
    pub spec: PathBuf,
    /// The bound on one `nvidia-ctk` run.
    pub timeout: Duration,
    /// WSL 2 (`/dev/dxg`, no `/dev/nvidia*`): generated with `--mode=wsl`.
    pub wsl: bool,
    /// One generation at a time: two would race on the file.
    pub running: tokio::sync::Mutex<()>,
}

impl NvidiaCdi {
    /// The arguments of `nvidia-ctk`: a fixed set, the format from the file's extension.
    pub fn args(&self) -> Vec<String> {
        let format = match self.spec.extension().and_then(|e| e.to_str()) {
            Some("json") => "json",
            _ => "yaml",
        };
        let mut args = vec![
            "cdi".to_owned(),
            "generate".to_owned(),
            format!("--output={}", self.spec.display()),
            "--device-name-strategy=uuid".to_owned(),
            format!("--format={format}"),
        ];
        if self.wsl {
            args.push("--mode=wsl".to_owned());
        }
        args
    }
}

/// The most of what `nvidia-smi` printed that a MIG step's answer carries.
const MAX_SAID: usize = 2048;

/// `nvidia-smi`'s exit status for NVML's "not found": `-dci`/`-dgi` with nothing to destroy.
const NVML_NOT_FOUND: i32 = 6;

/// The arguments of an operation, as the audit line shows them.
pub fn audit_arguments(op: &Operation) -> Vec<(&'static str, String)> {
    match op {
        Operation::Ping => vec![],
        Operation::SetPersistence { gpu, enabled } => {
            vec![("gpu", gpu.to_string()), ("enabled", enabled.to_string())]
        }
        Operation::ResetGpu { gpu } => vec![("gpu", gpu.to_string())],
        Operation::VfioBind { device } | Operation::VfioRelease { device } => {
            vec![("device", device.to_string())]
        }
        Operation::LibvirtStart { domain }
        | Operation::LibvirtDestroy { domain }
        | Operation::LibvirtDomainGpus { domain } => vec![("domain", domain.to_string())],
        Operation::LibvirtRestore { file } | Operation::LibvirtImageGpus { file } => {
            vec![("file", file.to_string())]
        }
        Operation::SetMigMode { gpu, enabled } => {
            vec![("gpu", gpu.to_string()), ("enabled", enabled.to_string())]
        }
        Operation::DestroyMigInstances { gpu } => vec![("gpu", gpu.to_string())],
        Operation::CreateMigInstances { gpu, profiles } => {
            vec![("gpu", gpu.to_string()), ("profiles", profiles.joined())]
        }
        Operation::RefreshNvidiaCdiSpec => vec![],
    }
}

/// Whether an operation changes something on the host (a GPU's mode, a driver, a domain),
/// and so is audited before it runs as well as when it ends (see [`crate::audit`]): every
/// operation but `Ping` and the read-only queries of a domain's or save image's GPUs.
pub fn changes_host(op: &Operation) -> bool {
    !matches!(
        op,
        Operation::Ping | Operation::LibvirtDomainGpus { .. } | Operation::LibvirtImageGpus { .. }
    )
}

impl Ops {
    /// Runs one operation to its answer.
    ///
    /// # Errors
    /// The operation's typed error.
    pub async fn run(&self, op: &Operation) -> Result<Outcome, HelperError> {
        match op {
            Operation::Ping => Ok(Outcome::Pong {
                helper_version: env!("CARGO_PKG_VERSION").to_owned(),
                sandbox: self.sandbox.clone(),
            }),
            Operation::SetPersistence { gpu, enabled } => {
                let held = self.lock(vec![DeviceKey::Pci(*gpu)]).await?;
                self.sysfs.check_gpu(gpu)?;
                let mode = if *enabled { "1" } else { "0" };
                self.smi(&held, &["-i", &gpu.nvml_bus_id(), "-pm", mode])
                    .await?;
                Ok(Outcome::Persistence {
                    gpu: *gpu,
                    enabled: *enabled,
                })
            }
            Operation::ResetGpu { gpu } => {
                let held = self.lock(vec![DeviceKey::Pci(*gpu)]).await?;
                self.sysfs.check_gpu(gpu)?;
                self.smi(&held, &["--gpu-reset", "-i", &gpu.nvml_bus_id()])
                    .await?;
                Ok(Outcome::Reset { gpu: *gpu })
            }
            Operation::VfioBind { device } => {
                let held = self.lock(vec![DeviceKey::Pci(*device)]).await?;
                self.vfio_bind(&held, device).await
            }
            Operation::VfioRelease { device } => {
                let held = self.lock(vec![DeviceKey::Pci(*device)]).await?;
                self.vfio_release(&held, device).await
            }
            Operation::LibvirtStart { domain } => self.libvirt_start(domain).await,
            Operation::LibvirtRestore { file } => self.libvirt_restore(file).await,
            Operation::LibvirtDestroy { domain } => self.libvirt_destroy(domain).await,
            Operation::LibvirtDomainGpus { domain } => Ok(Outcome::Libvirt {
                gpus: self.gpus_of(self.libvirt.domain_hostdevs(domain).await?),
                persistence: Vec::new(),
                domain: Some(domain.clone()),
            }),
            Operation::LibvirtImageGpus { file } => {
                let image = self.libvirt.saves.stage(file)?;
                let (hostdevs, domain) = self.libvirt.save_image_devices(&image).await?;
                Ok(Outcome::Libvirt {
                    gpus: self.gpus_of(hostdevs),
                    persistence: Vec::new(),
                    domain,
                })
            }
            Operation::SetMigMode { gpu, enabled } => {
                let held = self.lock(vec![DeviceKey::Pci(*gpu)]).await?;
                self.sysfs.check_gpu(gpu)?;
                let mode = if *enabled { "1" } else { "0" };
                let out = self
                    .smi_output(&held, &["-i", &gpu.nvml_bus_id(), "-mig", mode])
                    .await?;
                Ok(Outcome::Mig {
                    gpu: *gpu,
                    said: said(&out),
                })
            }
            Operation::DestroyMigInstances { gpu } => {
                let held = self.lock(vec![DeviceKey::Pci(*gpu)]).await?;
                self.sysfs.check_gpu(gpu)?;
                let bus = gpu.nvml_bus_id();
                let mut words = Vec::new();
                // Compute instances first: a GPU instance that still has one cannot go.
                for flag in ["-dci", "-dgi"] {
                    match self.smi_output(&held, &["mig", "-i", &bus, flag]).await {
                        Ok(out) => words.push(said(&out)),
                        Err(HelperError::Failed {
                            exit_code: Some(NVML_NOT_FOUND),
                            message,
                        }) => words.push(message),
                        Err(e) => return Err(e),
                    }
                }
                Ok(Outcome::Mig {
                    gpu: *gpu,
                    said: bounded(words.join("\n")),
                })
            }
            Operation::CreateMigInstances { gpu, profiles } => {
                let held = self.lock(vec![DeviceKey::Pci(*gpu)]).await?;
                self.sysfs.check_gpu(gpu)?;
                let ids = profiles.joined();
                let out = self
                    .smi_output(
                        &held,
                        &["mig", "-i", &gpu.nvml_bus_id(), "-cgi", &ids, "-C"],
                    )
                    .await?;
                Ok(Outcome::Mig {
                    gpu: *gpu,
                    said: said(&out),
                })
            }
            Operation::RefreshNvidiaCdiSpec => self.nvidia_cdi_spec().await,
        }
    }

    /// `nvidia-ctk cdi generate` into the configured file, one at a time.
    async fn nvidia_cdi_spec(&self) -> Result<Outcome, HelperError> {
        let Some(cdi) = &self.nvidia_cdi else {
            return Err(HelperError::Invalid {
                what: "this helper writes no NVIDIA CDI spec (root starts it without --nvidia-cdi-spec)".to_owned(),
            });
        };
        let _one = cdi.running.lock().await;
        let args = cdi.args();
        let words: Vec<&str> = args.iter().map(String::as_str).collect();
        let cmd = Command::new(&cdi.ctk, &words, cdi.timeout);
        // No device lock: it writes a file and only reads the GPUs.
        self.answered(child::run_holding(&cmd, &[]).await)?;
        Ok(Outcome::NvidiaCdiSpec {
            file: cdi.spec.display().to_string(),
        })
    }

    /// A child's end as the operation's: its output when it succeeded, else the typed error
    /// (its status and last words, the bound that expired, why it would not start).
    fn answered(
        &self,
        result: Result<child::Output, ChildError>,
    ) -> Result<child::Output, HelperError> {
        match result {
            Ok(out) if out.success() => Ok(out),
            Ok(out) => Err(HelperError::Failed {
                exit_code: out.exit_code,
                message: out.failure_message(),
            }),
            Err(ChildError::Timeout { after, .. }) => Err(HelperError::Timeout {
                after_s: after.as_secs(),
            }),
            Err(ChildError::Spawn { program, source }) => Err(HelperError::Failed {
                exit_code: None,
                message: self.spawn_failure(&program, &source),
            }),
        }
    }

    /// Takes the devices' locks, then refuses any function with a write still pending in the
    /// kernel (checked under the lock, so no operation can start one meanwhile).
    async fn lock(&self, keys: Vec<DeviceKey>) -> Result<Held, HelperError> {
        let held = self.locks.acquire(keys.clone(), self.lock_wait).await?;
        for key in &keys {
            if let DeviceKey::Pci(addr) = key {
                self.sysfs.busy_if_pending(addr)?;
            }
        }
        Ok(held)
    }

    /// Runs `nvidia-smi` with these arguments under its bound, holding the operation's lock
    /// files.
    async fn smi(&self, held: &Held, args: &[&str]) -> Result<(), HelperError> {
        self.smi_output(held, args).await.map(|_| ())
    }

    /// [`Ops::smi`], answering what the child left.
    async fn smi_output(&self, held: &Held, args: &[&str]) -> Result<child::Output, HelperError> {
        let cmd = Command::new(&self.nvidia_smi, args, self.smi_timeout);
        let result = child::run_holding(&cmd, &held.files()).await;
        if let Ok(out) = &result {
            tracing::debug!(
                "{} exited with {:?} after {} ms",
                cmd.display(),
                out.exit_code,
                out.elapsed.as_millis()
            );
        }
        self.answered(result)
    }

    /// The sentence for a program that would not start. Under the sandbox, `EACCES` means the
    /// program is not the file the rules were made for (an upgrade replaced it): this helper
    /// then asks to be replaced by a fresh one.
    pub fn spawn_failure(&self, program: &str, source: &std::io::Error) -> String {
        spawn_failure(self.confined, &self.restart_needed, program, source)
    }

    /// Best-effort persistence mode for a function, by NVML's bus id: never fails the caller.
    async fn persistence(&self, held: &Held, addr: &PciAddress, enabled: bool) -> PersistenceNote {
        let mode = if enabled { "1" } else { "0" };
        match self
            .smi(held, &["-i", &addr.nvml_bus_id(), "-pm", mode])
            .await
        {
            Ok(()) => PersistenceNote::Set { enabled },
            Err(e) => {
                tracing::warn!("persistence mode for {addr}: {e}");
                PersistenceNote::Failed {
                    enabled,
                    message: e.to_string(),
                }
            }
        }
    }

    /// Writes a value to a small sysfs attribute of the reserved function under
    /// [`SYSFS_WRITE_TIMEOUT`].
    async fn write_attr(
        &self,
        writes: &mut Writes,
        what: &'static str,
        path: &std::path::Path,
        value: &str,
    ) -> Result<(), String> {
        match writes
            .write(what, path, value, Instant::now() + SYSFS_WRITE_TIMEOUT)
            .await
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("writing {} failed: {e}", path.display())),
            Err(why) => Err(not_done(&path.display().to_string(), why)),
        }
    }

    /// Asks the kernel to bind the reserved function to a driver (its override, else its own).
    async fn probe(&self, writes: &mut Writes) -> Result<(), String> {
        let addr = writes.device();
        self.write_attr(
            writes,
            "a probe",
            &self.sysfs.probe_file(),
            &addr.sysfs_name(),
        )
        .await
    }

    /// Unbinds the reserved function from its driver and waits, up to the unbind timeout in all,
    /// for the `driver` link to go. `Err` carries the reason when it did not.
    async fn unbind(&self, writes: &mut Writes) -> Result<(), UnbindFailure> {
        let addr = &writes.device();
        let deadline = Instant::now() + self.unbind_timeout;
        let unbind = self.sysfs.device_dir(addr).join("driver/unbind");
        match writes
            .write("an unbind", &unbind, &addr.sysfs_name(), deadline)
            .await
        {
            Ok(Ok(())) => {}
            // The link went between our reading it and this write: nothing to unbind.
            Ok(Err(_)) if self.sysfs.driver(addr).is_none() => return Ok(()),
            Ok(Err(e)) => {
                return Err(UnbindFailure::Write(format!(
                    "writing {} failed: {e}",
                    unbind.display()
                )))
            }
            Err(NotDone::Pending) => return Err(UnbindFailure::StillInKernel),
            Err(why @ (NotDone::Skipped | NotDone::Unreserved)) => {
                return Err(UnbindFailure::Write(not_done(
                    &unbind.display().to_string(),
                    why,
                )))
            }
        }
        match self
            .sysfs
            .wait_driver(addr, deadline, |d| d.is_none())
            .await
        {
            (_, true) => Ok(()),
            (_, false) => Err(UnbindFailure::Held),
        }
    }

    fn not_let_go(&self) -> String {
        format!(
            "its driver has not let go after {}s: something still has the device open \
             (nvidia-persistenced, a process on the GPU)",
            self.unbind_timeout.as_secs()
        )
    }

    async fn vfio_bind(&self, held: &Held, addr: &PciAddress) -> Result<Outcome, HelperError> {
        self.sysfs.check_passthrough(addr)?;
        let before = self.sysfs.driver(addr);
        if before.as_deref() == Some(VFIO_DRIVER) {
            return Ok(Outcome::Vfio {
                device: *addr,
                driver_after: before.clone(),
                driver_before: before,
                persistence: PersistenceNote::NotTouched,
            });
        }
        // Every write this bind may need, before anything changes: refused, it touched nothing.
        let mut writes = self.sysfs.reserve(addr, BIND_WRITES)?;
        // nvidia-persistenced holds the GPU open and the driver's unbind waits for it.
        let persistence = if before.as_deref() == Some(NVIDIA_DRIVER) {
            self.persistence(held, addr, false).await
        } else {
            PersistenceNote::NotTouched
        };
        let dir = self.sysfs.device_dir(addr);
        let failed = |message: String| HelperError::Failed {
            exit_code: None,
            message,
        };
        let over = dir.join("driver_override");
        self.write_attr(&mut writes, "a driver_override write", &over, VFIO_DRIVER)
            .await
            .map_err(failed)?;
        if before.is_some() {
            if let Err(why) = self.unbind(&mut writes).await {
                // Never strand a GPU: with the override cleared, the function stays (or, once
                // probed, goes back) with its own driver.
                let cleared = self
                    .write_attr(&mut writes, "a driver_override write", &over, "\n")
                    .await;
                let still_in_kernel = matches!(why, UnbindFailure::StillInKernel);
                // While the unbind is pending the GPU must not be touched (nvidia-smi would
                // wait on the same driver), so persistence is left as it is then.
                let restored =
                    if matches!(persistence, PersistenceNote::Set { .. }) && !still_in_kernel {
                        format!("; {}", self.persistence(held, addr, true).await)
                    } else {
                        String::new()
                    };
                let reason = match why {
                    UnbindFailure::Held | UnbindFailure::StillInKernel => self.not_let_go(),
                    UnbindFailure::Write(w) => w,
                };
                let override_note = match (cleared, still_in_kernel) {
                    (Ok(()), false) => {
                        "driver_override was cleared, so it stays with its driver".to_owned()
                    }
                    (Ok(()), true) => format!(
                        "the unbind is still pending in the kernel: when the driver lets go, {addr} \
                         will have no driver (driver_override was cleared; probe it with \
                         `echo {} > /sys/bus/pci/drivers_probe` to give it back), and until then \
                         every operation on it is refused",
                        addr.sysfs_name()
                    ),
                    (Err(e), _) => format!("and driver_override could not be cleared ({e})"),
                };
                return Err(failed(format!("{reason}; {override_note}{restored}")));
            }
        }
        self.probe(&mut writes).await.map_err(failed)?;
        let deadline = Instant::now() + PROBE_SETTLE;
        let (after, bound) = self
            .sysfs
            .wait_driver(addr, deadline, |d| d == Some(VFIO_DRIVER))
            .await;
        if !bound {
            // Give it back to the kernel's choice rather than leave it driverless.
            let _ = self
                .write_attr(&mut writes, "a driver_override write", &over, "\n")
                .await;
            let _ = self.probe(&mut writes).await;
            return Err(failed(format!(
                "the kernel did not bind {addr} to vfio-pci (its driver is {}; is the vfio-pci \
                 module loaded?); driver_override was cleared and the function probed again",
                after.as_deref().unwrap_or("none")
            )));
        }
        Ok(Outcome::Vfio {
            device: *addr,
            driver_before: before,
            driver_after: after,
            persistence,
        })
    }

    async fn vfio_release(&self, held: &Held, addr: &PciAddress) -> Result<Outcome, HelperError> {
        self.sysfs.check_passthrough(addr)?;
        let before = self.sysfs.driver(addr);
        if before.as_deref() != Some(VFIO_DRIVER) {
            return Err(HelperError::Invalid {
                what: format!(
                    "{addr} is not on vfio-pci (its driver is {})",
                    before.as_deref().unwrap_or("none")
                ),
            });
        }
        let failed = |message: String| HelperError::Failed {
            exit_code: None,
            message,
        };
        let mut writes = self.sysfs.reserve(addr, RELEASE_WRITES)?;
        if let Err(why) = self.unbind(&mut writes).await {
            return Err(failed(match why {
                UnbindFailure::Held => format!(
                    "vfio-pci has not let go after {}s: a VM or process still has the device open",
                    self.unbind_timeout.as_secs()
                ),
                UnbindFailure::StillInKernel => format!(
                    "vfio-pci has not let go after {}s: a VM or process still has the device open; \
                     the unbind is still pending in the kernel, and when it finishes {addr} will \
                     have no driver (driver_override still says vfio-pci); every operation on it \
                     is refused until then",
                    self.unbind_timeout.as_secs()
                ),
                UnbindFailure::Write(w) => w,
            }));
        }
        let dir = self.sysfs.device_dir(addr);
        self.write_attr(
            &mut writes,
            "a driver_override write",
            &dir.join("driver_override"),
            "\n",
        )
        .await
        .map_err(failed)?;
        self.probe(&mut writes).await.map_err(failed)?;
        let (after, _) = self
            .sysfs
            .wait_driver(addr, Instant::now() + PROBE_SETTLE, |d| d.is_some())
            .await;
        let persistence = if after.as_deref() == Some(NVIDIA_DRIVER) {
            self.persistence(held, addr, true).await
        } else {
            PersistenceNote::NotTouched
        };
        Ok(Outcome::Vfio {
            device: *addr,
            driver_before: before,
            driver_after: after,
            persistence,
        })
    }

    /// The NVIDIA GPUs among a domain's hostdevs.
    fn gpus_of(&self, hostdevs: Vec<PciAddress>) -> Vec<PciAddress> {
        let mut gpus: Vec<PciAddress> = hostdevs
            .into_iter()
            .filter(|a| self.sysfs.is_nvidia_gpu(a))
            .collect();
        gpus.sort();
        gpus.dedup();
        gpus
    }

    async fn persistence_all(
        &self,
        held: &Held,
        gpus: &[PciAddress],
        enabled: bool,
    ) -> Vec<(PciAddress, PersistenceNote)> {
        let mut notes = Vec::with_capacity(gpus.len());
        for gpu in gpus {
            notes.push((*gpu, self.persistence(held, gpu, enabled).await));
        }
        notes
    }

    async fn libvirt_start(&self, domain: &DomainName) -> Result<Outcome, HelperError> {
        let _domain = self
            .lock(vec![DeviceKey::Domain(domain.to_string())])
            .await?;
        let gpus = self.gpus_of(self.libvirt.domain_hostdevs(domain).await?);
        let held = self
            .lock(gpus.iter().copied().map(DeviceKey::Pci).collect())
            .await?;
        let persistence = self.persistence_all(&held, &gpus, false).await;
        self.libvirt.start(domain, &held.files()).await?;
        Ok(Outcome::Libvirt {
            gpus,
            persistence,
            domain: Some(domain.clone()),
        })
    }

    async fn libvirt_restore(&self, file: &SaveFile) -> Result<Outcome, HelperError> {
        let _file = self
            .lock(vec![DeviceKey::SaveFile(file.path().to_path_buf())])
            .await?;
        // One checked copy for both virsh runs: the GPUs read are the GPUs restored.
        let image = self.libvirt.saves.stage(file)?;
        let (hostdevs, domain) = self.libvirt.save_image_devices(&image).await?;
        let gpus = self.gpus_of(hostdevs);
        let held = self
            .lock(gpus.iter().copied().map(DeviceKey::Pci).collect())
            .await?;
        let persistence = self.persistence_all(&held, &gpus, false).await;
        self.libvirt.restore(&image, &held.files()).await?;
        Ok(Outcome::Libvirt {
            gpus,
            persistence,
            domain,
        })
    }

    async fn libvirt_destroy(&self, domain: &DomainName) -> Result<Outcome, HelperError> {
        let _domain = self
            .lock(vec![DeviceKey::Domain(domain.to_string())])
            .await?;
        let gpus = self.gpus_of(self.libvirt.domain_hostdevs(domain).await?);
        let held = self
            .lock(gpus.iter().copied().map(DeviceKey::Pci).collect())
            .await?;
        self.libvirt.destroy(domain, &held.files()).await?;
        // libvirt gives managed hostdevs back on its own schedule; wait a little for each.
        let deadline = Instant::now() + DESTROY_SETTLE;
        let mut persistence = Vec::with_capacity(gpus.len());
        for gpu in &gpus {
            let (_, back) = self
                .sysfs
                .wait_driver(gpu, deadline, |d| d == Some(NVIDIA_DRIVER))
                .await;
            let note = if back {
                self.persistence(&held, gpu, true).await
            } else {
                PersistenceNote::NotTouched
            };
            persistence.push((*gpu, note));
        }
        Ok(Outcome::Libvirt {
            gpus,
            persistence,
            domain: Some(domain.clone()),
        })
    }
}

/// The sentence for a small write to `path` that did not complete under
/// [`SYSFS_WRITE_TIMEOUT`].
/// What a child printed on standard output, trimmed and bounded, for a MIG step's answer.
fn said(out: &child::Output) -> String {
    bounded(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// At most [`MAX_SAID`] bytes of `text`: its end, where `nvidia-smi` says how it went.
fn bounded(text: String) -> String {
    if text.len() <= MAX_SAID {
        return text;
    }
    let mut start = text.len() - MAX_SAID;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

fn not_done(path: &str, why: NotDone) -> String {
    match why {
        NotDone::Pending => format!(
            "writing {path} did not finish within {}s and is still pending in the kernel",
            SYSFS_WRITE_TIMEOUT.as_secs()
        ),
        NotDone::Skipped => format!(
            "{path} was not written: its deadline passed before its thread could start (the \
             host is overloaded)"
        ),
        // Only a miscounted reservation gets here: BIND_WRITES and RELEASE_WRITES cover every
        // path through the operation.
        NotDone::Unreserved => {
            format!("{path} was not written: the operation had used every sysfs write it reserved")
        }
    }
}

/// Why an unbind did not complete.
enum UnbindFailure {
    /// The driver kept the function past the unbind timeout (the write returned).
    Held,
    /// The unbind write itself is still blocked in the kernel.
    StillInKernel,
    /// The write itself failed.
    Write(String),
}

/// The sentence for a program that would not start; see [`Ops::spawn_failure`].
pub fn spawn_failure(
    confined: bool,
    restart_needed: &AtomicBool,
    program: &str,
    source: &std::io::Error,
) -> String {
    match source.kind() {
        std::io::ErrorKind::NotFound => {
            format!("{program} was not found (is it installed? see bcd-helper --help)")
        }
        std::io::ErrorKind::PermissionDenied if confined => {
            restart_needed.store(true, Ordering::SeqCst);
            let sentence = format!(
                "{program} can no longer be run under the sandbox bcd-helper set up at start \
                     (it was replaced, for example by a driver or libvirt upgrade); bcd-helper \
                     exits so that systemd starts a fresh one: retry in a moment"
            );
            tracing::error!("{sentence}");
            sentence
        }
        _ => format!("could not run {program}: {source}"),
    }
}
