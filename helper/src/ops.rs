//! The privileged operations: `nvidia-smi` persistence and reset, vfio-pci bind and release
//! through sysfs, and libvirt start/restore/destroy with persistence around them.
//!
//! Every operation first takes the lock of each device it touches (see [`DeviceLocks`]), so
//! two operations on one GPU never overlap while operations on different GPUs run at once.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bcd_protocol::{
    DomainName, GpuRef, HelperError, Operation, Outcome, PciAddress, PersistenceNote, SaveFile,
};
use tokio::sync::OwnedMutexGuard;

use crate::child::{self, ChildError, Command};
use crate::libvirt::Libvirt;
use crate::sysfs::{Sysfs, NVIDIA_DRIVER, VFIO_DRIVER};

/// How long an operation waits for a device another operation holds before answering `Busy`.
/// Waiting (rather than answering `Busy` at once) lets the agent queue work on one GPU without
/// retry loops; the bound keeps a wedged operation from piling up callers forever.
pub const DEVICE_LOCK_WAIT: Duration = Duration::from_secs(30);
/// Bound on the small sysfs writes (`driver_override`, `drivers_probe`).
pub const SYSFS_WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for the kernel to show the new driver after a probe.
pub const PROBE_SETTLE: Duration = Duration::from_secs(2);
/// How long, after `virsh destroy`, to wait for libvirt to give a GPU back to `nvidia`.
pub const DESTROY_SETTLE: Duration = Duration::from_secs(5);
/// Lock entries kept before idle ones are dropped (peers choose GPU UUIDs freely).
const MAX_IDLE_LOCKS: usize = 1024;

/// What one operation locks. Domains and save files sort before functions, and every
/// operation that takes both takes them in that order, so lock waits cannot form a cycle.
///
/// A GPU named by UUID and the same GPU named by address are two keys: mapping one to the
/// other would take an `nvidia-smi` query per request. Callers that want one lock per GPU
/// must name each GPU one way (the agent should use its PCI address).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceKey {
    /// A libvirt domain.
    Domain(String),
    /// A save image.
    SaveFile(PathBuf),
    /// A GPU named by UUID.
    Uuid(String),
    /// A PCI function (a GPU named by address included).
    Pci(PciAddress),
}

impl fmt::Display for DeviceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceKey::Domain(d) => write!(f, "domain {d}"),
            DeviceKey::SaveFile(p) => write!(f, "save image {}", p.display()),
            DeviceKey::Uuid(u) => f.write_str(u),
            DeviceKey::Pci(p) => write!(f, "{p}"),
        }
    }
}

impl DeviceKey {
    fn of_gpu(gpu: &GpuRef) -> Self {
        match gpu {
            GpuRef::Uuid(u) => DeviceKey::Uuid(u.to_string()),
            GpuRef::Pci(p) => DeviceKey::Pci(*p),
        }
    }
}

/// One async mutex per device, created on first use.
#[derive(Debug, Default)]
pub struct DeviceLocks {
    map: Mutex<HashMap<DeviceKey, Arc<tokio::sync::Mutex<()>>>>,
}

/// Held device locks; dropping it frees them.
#[derive(Debug)]
pub struct Held(#[allow(dead_code)] Vec<OwnedMutexGuard<()>>);

impl DeviceLocks {
    /// Takes every key's lock, in order, waiting at most `wait` in all.
    ///
    /// # Errors
    /// `Busy` naming the device still held when the wait ran out.
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
            let mutex = {
                let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
                if map.len() > MAX_IDLE_LOCKS {
                    map.retain(|_, m| Arc::strong_count(m) > 1);
                }
                map.entry(key.clone()).or_default().clone()
            };
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, mutex.lock_owned()).await {
                Ok(guard) => held.push(guard),
                Err(_) => {
                    return Err(HelperError::Busy {
                        what: format!(
                            "another operation on {key} has held it for more than {}s",
                            wait.as_secs()
                        ),
                    })
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
}

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
    }
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
            }),
            Operation::SetPersistence { gpu, enabled } => {
                let _held = self.lock(vec![DeviceKey::of_gpu(gpu)]).await?;
                let mode = if *enabled { "1" } else { "0" };
                self.smi(&["-i", &gpu.nvidia_smi_id(), "-pm", mode]).await?;
                Ok(Outcome::Persistence {
                    gpu: gpu.clone(),
                    enabled: *enabled,
                })
            }
            Operation::ResetGpu { gpu } => {
                let _held = self.lock(vec![DeviceKey::of_gpu(gpu)]).await?;
                self.smi(&["--gpu-reset", "-i", &gpu.nvidia_smi_id()])
                    .await?;
                Ok(Outcome::Reset { gpu: gpu.clone() })
            }
            Operation::VfioBind { device } => {
                let _held = self.lock(vec![DeviceKey::Pci(*device)]).await?;
                self.vfio_bind(device).await
            }
            Operation::VfioRelease { device } => {
                let _held = self.lock(vec![DeviceKey::Pci(*device)]).await?;
                self.vfio_release(device).await
            }
            Operation::LibvirtStart { domain } => self.libvirt_start(domain).await,
            Operation::LibvirtRestore { file } => self.libvirt_restore(file).await,
            Operation::LibvirtDestroy { domain } => self.libvirt_destroy(domain).await,
            Operation::LibvirtDomainGpus { domain } => Ok(Outcome::Libvirt {
                gpus: self.gpus_of(self.libvirt.domain_hostdevs(domain).await?),
                persistence: Vec::new(),
            }),
            Operation::LibvirtImageGpus { file } => Ok(Outcome::Libvirt {
                gpus: self.gpus_of(self.libvirt.save_image_hostdevs(file).await?),
                persistence: Vec::new(),
            }),
        }
    }

    async fn lock(&self, keys: Vec<DeviceKey>) -> Result<Held, HelperError> {
        self.locks.acquire(keys, DEVICE_LOCK_WAIT).await
    }

    /// Runs `nvidia-smi` with these arguments under its bound.
    async fn smi(&self, args: &[&str]) -> Result<(), HelperError> {
        let cmd = Command::new(&self.nvidia_smi, args, self.smi_timeout);
        let result = child::run(&cmd).await;
        if let Ok(out) = &result {
            tracing::debug!(
                "{} exited with {:?} after {} ms",
                cmd.display(),
                out.exit_code,
                out.elapsed.as_millis()
            );
        }
        match result {
            Ok(out) if out.success() => Ok(()),
            Ok(out) => Err(HelperError::Failed {
                exit_code: out.exit_code,
                message: out.failure_message(),
            }),
            Err(ChildError::Timeout { after, .. }) => Err(HelperError::Timeout {
                after_s: after.as_secs(),
            }),
            Err(ChildError::Spawn { program, source }) => Err(HelperError::Failed {
                exit_code: None,
                message: if source.kind() == std::io::ErrorKind::NotFound {
                    format!("{program} was not found (is the NVIDIA driver installed? see --nvidia-smi)")
                } else {
                    format!("could not run {program}: {source}")
                },
            }),
        }
    }

    /// Best-effort persistence mode for a function, by NVML's bus id: never fails the caller.
    async fn persistence(&self, addr: &PciAddress, enabled: bool) -> PersistenceNote {
        let mode = if enabled { "1" } else { "0" };
        match self.smi(&["-i", &addr.nvml_bus_id(), "-pm", mode]).await {
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

    /// Writes a value to a small sysfs attribute under [`SYSFS_WRITE_TIMEOUT`].
    async fn write_attr(&self, path: &std::path::Path, value: &str) -> Result<(), String> {
        match self
            .sysfs
            .write(path, value, Instant::now() + SYSFS_WRITE_TIMEOUT)
            .await
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("writing {} failed: {e}", path.display())),
            Err(_) => Err(format!(
                "writing {} did not finish within {}s",
                path.display(),
                SYSFS_WRITE_TIMEOUT.as_secs()
            )),
        }
    }

    /// Unbinds the function from its driver and waits, up to the unbind timeout in all, for the
    /// `driver` link to go. `Err` carries the reason when it did not.
    async fn unbind(&self, addr: &PciAddress) -> Result<(), UnbindFailure> {
        let deadline = Instant::now() + self.unbind_timeout;
        let unbind = self.sysfs.device_dir(addr).join("driver/unbind");
        match self
            .sysfs
            .write(&unbind, &addr.sysfs_name(), deadline)
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
            Err(_) => return Err(UnbindFailure::Held),
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

    async fn vfio_bind(&self, addr: &PciAddress) -> Result<Outcome, HelperError> {
        self.sysfs.check_nvidia(addr)?;
        let before = self.sysfs.driver(addr);
        if before.as_deref() == Some(VFIO_DRIVER) {
            return Ok(Outcome::Vfio {
                device: *addr,
                driver_after: before.clone(),
                driver_before: before,
                persistence: PersistenceNote::NotTouched,
            });
        }
        // nvidia-persistenced holds the GPU open and the driver's unbind waits for it.
        let persistence = if before.as_deref() == Some(NVIDIA_DRIVER) {
            self.persistence(addr, false).await
        } else {
            PersistenceNote::NotTouched
        };
        let dir = self.sysfs.device_dir(addr);
        let failed = |message: String| HelperError::Failed {
            exit_code: None,
            message,
        };
        self.write_attr(&dir.join("driver_override"), VFIO_DRIVER)
            .await
            .map_err(failed)?;
        if before.is_some() {
            if let Err(why) = self.unbind(addr).await {
                // Never strand a GPU: with the override cleared, the function stays (or, once
                // probed, goes back) with its own driver.
                let cleared = self.write_attr(&dir.join("driver_override"), "\n").await;
                let restored = if matches!(persistence, PersistenceNote::Set { .. }) {
                    format!("; {}", self.persistence(addr, true).await)
                } else {
                    String::new()
                };
                let reason = match why {
                    UnbindFailure::Held => self.not_let_go(),
                    UnbindFailure::Write(w) => w,
                };
                let override_note = match cleared {
                    Ok(()) => "driver_override was cleared, so it stays with its driver".to_owned(),
                    Err(e) => format!("and driver_override could not be cleared ({e})"),
                };
                return Err(failed(format!("{reason}; {override_note}{restored}")));
            }
        }
        self.write_attr(&self.sysfs.probe_file(), &addr.sysfs_name())
            .await
            .map_err(failed)?;
        let deadline = Instant::now() + PROBE_SETTLE;
        let (after, bound) = self
            .sysfs
            .wait_driver(addr, deadline, |d| d == Some(VFIO_DRIVER))
            .await;
        if !bound {
            // Give it back to the kernel's choice rather than leave it driverless.
            let _ = self.write_attr(&dir.join("driver_override"), "\n").await;
            let _ = self
                .write_attr(&self.sysfs.probe_file(), &addr.sysfs_name())
                .await;
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

    async fn vfio_release(&self, addr: &PciAddress) -> Result<Outcome, HelperError> {
        self.sysfs.check_nvidia(addr)?;
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
        if let Err(why) = self.unbind(addr).await {
            return Err(failed(match why {
                UnbindFailure::Held => format!(
                    "vfio-pci has not let go after {}s: a VM or process still has the device open",
                    self.unbind_timeout.as_secs()
                ),
                UnbindFailure::Write(w) => w,
            }));
        }
        let dir = self.sysfs.device_dir(addr);
        self.write_attr(&dir.join("driver_override"), "\n")
            .await
            .map_err(failed)?;
        self.write_attr(&self.sysfs.probe_file(), &addr.sysfs_name())
            .await
            .map_err(failed)?;
        let (after, _) = self
            .sysfs
            .wait_driver(addr, Instant::now() + PROBE_SETTLE, |d| d.is_some())
            .await;
        let persistence = if after.as_deref() == Some(NVIDIA_DRIVER) {
            self.persistence(addr, true).await
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
        gpus: &[PciAddress],
        enabled: bool,
    ) -> Vec<(PciAddress, PersistenceNote)> {
        let mut notes = Vec::with_capacity(gpus.len());
        for gpu in gpus {
            notes.push((*gpu, self.persistence(gpu, enabled).await));
        }
        notes
    }

    async fn libvirt_start(&self, domain: &DomainName) -> Result<Outcome, HelperError> {
        let _domain = self
            .lock(vec![DeviceKey::Domain(domain.to_string())])
            .await?;
        let gpus = self.gpus_of(self.libvirt.domain_hostdevs(domain).await?);
        let _gpus = self
            .lock(gpus.iter().copied().map(DeviceKey::Pci).collect())
            .await?;
        let persistence = self.persistence_all(&gpus, false).await;
        self.libvirt.start(domain).await?;
        Ok(Outcome::Libvirt { gpus, persistence })
    }

    async fn libvirt_restore(&self, file: &SaveFile) -> Result<Outcome, HelperError> {
        let _file = self
            .lock(vec![DeviceKey::SaveFile(file.path().to_path_buf())])
            .await?;
        let gpus = self.gpus_of(self.libvirt.save_image_hostdevs(file).await?);
        let _gpus = self
            .lock(gpus.iter().copied().map(DeviceKey::Pci).collect())
            .await?;
        let persistence = self.persistence_all(&gpus, false).await;
        self.libvirt.restore(file).await?;
        Ok(Outcome::Libvirt { gpus, persistence })
    }

    async fn libvirt_destroy(&self, domain: &DomainName) -> Result<Outcome, HelperError> {
        let _domain = self
            .lock(vec![DeviceKey::Domain(domain.to_string())])
            .await?;
        let gpus = self.gpus_of(self.libvirt.domain_hostdevs(domain).await?);
        let _gpus = self
            .lock(gpus.iter().copied().map(DeviceKey::Pci).collect())
            .await?;
        self.libvirt.destroy(domain).await?;
        // libvirt gives managed hostdevs back on its own schedule; wait a little for each.
        let deadline = Instant::now() + DESTROY_SETTLE;
        let mut persistence = Vec::with_capacity(gpus.len());
        for gpu in &gpus {
            let (_, back) = self
                .sysfs
                .wait_driver(gpu, deadline, |d| d == Some(NVIDIA_DRIVER))
                .await;
            let note = if back {
                self.persistence(gpu, true).await
            } else {
                PersistenceNote::NotTouched
            };
            persistence.push((*gpu, note));
        }
        Ok(Outcome::Libvirt { gpus, persistence })
    }
}

/// Why an unbind did not complete.
enum UnbindFailure {
    /// The driver kept the function past the unbind timeout.
    Held,
    /// The write itself failed.
    Write(String),
}
