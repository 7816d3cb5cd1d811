//! `gpu.reset`'s policy, ready for the node service: which GPUs may be reset, the resets
//! themselves through a [`Resetter`] (the helper's `ResetGpu` in production), a collection
//! afterwards, and the health verdict that drops a GPU's XID conditions when it came back
//! healthy.
//!
//! The whole command is refused before anything is reset when any listed GPU is unknown or
//! busy: a hold on it, on one of its MIG instances or slots, a pending Kubernetes release, or
//! passthrough to a VM. A reset that fails does not stop the others; its GPU keeps its
//! conditions.

use std::future::Future;
use std::pin::Pin;

use bcd_protocol::GpuUuid;
use serde::{Deserialize, Serialize};

use super::faults::Health;
use super::hardware_problems;
use crate::inventory::document::{Gpu, Inventory};

/// A boxed future, as [`Resetter`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What resets one GPU: the helper client's `ResetGpu` in the node service, a recording fake
/// in tests.
pub trait Resetter: Send + Sync {
    /// Resets `gpu` (`nvidia-smi --gpu-reset -i <uuid>`); the error is the operator's sentence.
    fn reset_gpu<'a>(&'a self, gpu: &'a GpuUuid) -> BoxFuture<'a, Result<(), String>>;
}

/// Why the command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResetError {
    /// A listed GPU (or part of it) is in use; nothing was reset.
    #[error("gpu-busy: GPU {uuid} is in use ({holder}); nothing was reset")]
    Busy {
        /// The GPU asked for.
        uuid: String,
        /// What holds it, in words.
        holder: String,
    },
    /// A listed UUID is not in the inventory; nothing was reset.
    #[error("unknown GPU {uuid}: the inventory does not list it; nothing was reset")]
    UnknownGpu {
        /// The UUID asked for.
        uuid: String,
    },
    /// No GPU was named.
    #[error("gpu.reset needs at least one GPU UUID")]
    NoGpu,
}

impl ResetError {
    /// The error code the node service's API answers with.
    pub fn code(&self) -> &'static str {
        match self {
            ResetError::Busy { .. } => "gpu-busy",
            ResetError::UnknownGpu { .. } => "unknown-gpu",
            ResetError::NoGpu => "invalid-argument",
        }
    }
}

/// How one GPU came out of the reset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuResetOutcome {
    /// The GPU.
    pub uuid: String,
    /// Why the reset itself failed; `None` when it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Healthy after the reset: it succeeded, and the new collection shows no uncorrectable
    /// volatile ECC errors and no pending or failed row remap.
    pub healthy: bool,
    /// Why it is not healthy, in words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// XID conditions dropped because it came back healthy.
    pub conditions_cleared: usize,
}

/// The result of a `gpu.reset` that was not refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetReport {
    /// One per GPU, in the order asked.
    pub gpus: Vec<GpuResetOutcome>,
}

/// What holds `gpu` or one of its MIG instances, when anything does. `busy` answers for a GPU
/// UUID (holds on it or its slots, pending Kubernetes releases) and for a MIG device UUID.
fn holder(gpu: &Gpu, busy: &(dyn Fn(&str) -> Option<String> + Sync)) -> Option<String> {
    if gpu.passed_through {
        return Some("passed through to a VM".to_owned());
    }
    if let Some(h) = busy(&gpu.uuid) {
        return Some(h);
    }
    gpu.mig
        .iter()
        .flat_map(|m| &m.devices)
        .filter_map(|d| d.uuid.as_deref())
        .find_map(|mig| busy(mig).map(|h| format!("MIG instance {mig}: {h}")))
}

/// Resets `uuids`: refuses the whole command when any is unknown or busy, else resets each
/// through `resetter`, collects again with `recollect`, and marks each healthy unless the new
/// inventory shows uncorrectable volatile ECC errors or a pending or failed row remap; a
/// healthy GPU's XID conditions are dropped from `health` (faults.json rewritten).
///
/// # Errors
/// [`ResetError`] when the command is refused; nothing was reset then. A failed reset or a
/// failed write of faults.json is reported in the outcome or logged, not as an error, since
/// other GPUs may have been reset already.
pub async fn reset_gpus<F, Fut>(
    uuids: &[String],
    inventory: &Inventory,
    busy: &(dyn Fn(&str) -> Option<String> + Sync),
    resetter: &dyn Resetter,
    recollect: F,
    health: &Health,
) -> Result<ResetReport, ResetError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Inventory>,
{
    if uuids.is_empty() {
        return Err(ResetError::NoGpu);
    }
    let mut targets = Vec::with_capacity(uuids.len());
    for uuid in uuids {
        let gpu = inventory
            .gpu
            .gpus
            .iter()
            .find(|g| g.uuid == *uuid)
            .ok_or_else(|| ResetError::UnknownGpu { uuid: uuid.clone() })?;
        // The inventory's UUIDs came from the driver; one that is not a valid UUID cannot be
        // handed to the helper, so it is as unknown as a missing one.
        let typed: GpuUuid = uuid
            .parse()
            .map_err(|_| ResetError::UnknownGpu { uuid: uuid.clone() })?;
        targets.push((gpu, typed));
    }
    for (gpu, _) in &targets {
        if let Some(holder) = holder(gpu, busy) {
            return Err(ResetError::Busy {
                uuid: gpu.uuid.clone(),
                holder,
            });
        }
    }
    let mut errors = Vec::with_capacity(targets.len());
    for (_, typed) in &targets {
        let result = resetter.reset_gpu(typed).await.err();
        if let Some(e) = &result {
            tracing::error!("gpu.reset of {typed}: {e}");
        }
        errors.push(result);
    }
    let after = recollect().await;
    let mut outcomes = Vec::with_capacity(targets.len());
    for ((gpu, _), error) in targets.iter().zip(errors) {
        let mut reasons = Vec::new();
        if let Some(e) = &error {
            reasons.push(format!("the reset failed: {e}"));
        }
        match after.gpu.gpus.iter().find(|g| g.uuid == gpu.uuid) {
            Some(now) => reasons.extend(hardware_problems(now)),
            None => reasons.push("the inventory no longer lists it after the reset".to_owned()),
        }
        let healthy = reasons.is_empty();
        let mut conditions_cleared = 0;
        if healthy {
            conditions_cleared = health.clear_gpu(&gpu.uuid).unwrap_or_else(|e| {
                tracing::error!("{e}");
                0
            });
        }
        outcomes.push(GpuResetOutcome {
            uuid: gpu.uuid.clone(),
            error,
            healthy,
            reasons,
            conditions_cleared,
        });
    }
    Ok(ResetReport { gpus: outcomes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::faults::{read_this_boot, FaultStore};
    use crate::inventory::document::{Ecc, EccCounts, GpuSection, Mig, MigDevice, RowRemap};
    use std::sync::Mutex;

    const A: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";
    const B: &str = "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a";
    const C: &str = "GPU-b9036d74-bff6-b565-c003-dc53279ae2bd";
    const MIG: &str = "MIG-7f3e2b1a-0c4d-5e6f-8a9b-0c1d2e3f4a5b";

    /// Records every reset; fails the UUIDs in `fail`.
    #[derive(Default)]
    struct Recording {
        calls: Mutex<Vec<String>>,
        fail: Vec<String>,
    }

    impl Resetter for Recording {
        fn reset_gpu<'a>(&'a self, gpu: &'a GpuUuid) -> BoxFuture<'a, Result<(), String>> {
            Box::pin(async move {
                self.calls.lock().unwrap().push(gpu.to_string());
                if self.fail.contains(&gpu.to_string()) {
                    Err("nvidia-smi --gpu-reset failed: In use by another client".into())
                } else {
                    Ok(())
                }
            })
        }
    }

    fn inventory() -> Inventory {
        let gpu = |i: u32, uuid: &str| Gpu {
            index: i,
            uuid: uuid.into(),
            ecc: Some(Ecc {
                volatile: Some(EccCounts {
                    correctable: Some(0),
                    uncorrectable: Some(0),
                }),
                ..Ecc::default()
            }),
            row_remap: Some(RowRemap::default()),
            ..Gpu::default()
        };
        let mut c = gpu(2, C);
        c.mig = Some(Mig {
            mode: Some(true),
            devices: vec![MigDevice {
                uuid: Some(MIG.into()),
                ..MigDevice::default()
            }],
            ..Mig::default()
        });
        Inventory::new(GpuSection {
            cuda_driver_version: Some("12.8".into()),
            gpus: vec![gpu(0, A), gpu(1, B), c],
            ..GpuSection::default()
        })
    }

    fn health(dir: &std::path::Path) -> Health {
        let h = Health::new(FaultStore::open(dir, "boot").unwrap());
        for uuid in [A, B, C] {
            h.raise("Xid79", uuid, "NVRM: Xid ...").unwrap();
        }
        h
    }

    fn idle(_: &str) -> Option<String> {
        None
    }

    async fn refused(
        uuids: &[&str],
        inv: &Inventory,
        busy: &(dyn Fn(&str) -> Option<String> + Sync),
    ) -> ResetError {
        let dir = tempfile::tempdir().unwrap();
        let h = health(dir.path());
        let r = Recording::default();
        let uuids: Vec<String> = uuids.iter().map(|s| s.to_string()).collect();
        let err = reset_gpus(&uuids, inv, busy, &r, || async { unreachable!() }, &h)
            .await
            .unwrap_err();
        assert!(r.calls.lock().unwrap().is_empty(), "nothing may be reset");
        assert_eq!(h.conditions().len(), 3);
        err
    }

    #[tokio::test]
    async fn a_held_gpu_refuses_the_whole_command() {
        let busy = |u: &str| (u == B).then(|| "hold h-42 of reservation r-7".to_owned());
        let err = refused(&[A, B], &inventory(), &busy).await;
        assert_eq!(err.code(), "gpu-busy");
        assert_eq!(
            err.to_string(),
            format!(
                "gpu-busy: GPU {B} is in use (hold h-42 of reservation r-7); nothing was reset"
            )
        );
    }

    #[tokio::test]
    async fn a_held_mig_instance_or_a_pending_release_makes_its_gpu_busy() {
        let busy = |u: &str| (u == MIG).then(|| "hold h-1".to_owned());
        let err = refused(&[C], &inventory(), &busy).await;
        assert!(
            matches!(&err, ResetError::Busy { uuid, holder } if uuid == C && holder.contains(MIG)),
            "{err}"
        );
        let busy = |u: &str| (u == A).then(|| "a pending Kubernetes release".to_owned());
        let err = refused(&[A], &inventory(), &busy).await;
        assert!(err.to_string().contains("pending Kubernetes release"));
    }

    #[tokio::test]
    async fn a_passed_through_gpu_is_busy() {
        let mut inv = inventory();
        inv.gpu.gpus[1].passed_through = true;
        let err = refused(&[B], &inv, &idle).await;
        assert!(err.to_string().contains("passed through to a VM"), "{err}");
    }

    #[tokio::test]
    async fn an_unknown_gpu_is_refused() {
        let err = refused(
            &[A, "GPU-00000000-0000-0000-0000-000000000000"],
            &inventory(),
            &idle,
        )
        .await;
        assert_eq!(err.code(), "unknown-gpu");
        assert!(err.to_string().starts_with("unknown GPU GPU-0000"));
    }

    #[tokio::test]
    async fn resets_clear_xids_only_for_gpus_that_came_back_healthy() {
        let dir = tempfile::tempdir().unwrap();
        let h = health(dir.path());
        let r = Recording {
            fail: vec![C.into()],
            ..Recording::default()
        };
        let mut after = inventory();
        // B still shows uncorrectable ECC errors after its reset.
        after.gpu.gpus[1]
            .ecc
            .as_mut()
            .unwrap()
            .volatile
            .as_mut()
            .unwrap()
            .uncorrectable = Some(1);
        let uuids = vec![A.to_owned(), B.to_owned(), C.to_owned()];
        let report = reset_gpus(&uuids, &inventory(), &idle, &r, || async { after }, &h)
            .await
            .unwrap();
        assert_eq!(*r.calls.lock().unwrap(), [A, B, C]);
        let verdict: Vec<(bool, usize)> = report
            .gpus
            .iter()
            .map(|g| (g.healthy, g.conditions_cleared))
            .collect();
        assert_eq!(verdict, [(true, 1), (false, 0), (false, 0)]);
        assert_eq!(
            report.gpus[1].reasons,
            ["1 uncorrectable volatile ECC error(s) since the driver loaded"]
        );
        assert!(report.gpus[2].error.is_some());
        let left: Vec<String> = read_this_boot(dir.path(), "boot")
            .unwrap()
            .into_iter()
            .map(|c| c.device_id)
            .collect();
        assert_eq!(left, [B, C]);
    }
}
