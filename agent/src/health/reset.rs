//! `gpu.reset`'s policy, ready for the node service: which GPUs may be reset, the resets
//! themselves through the [`Helper`] (its `ResetGpu`), a collection
//! afterwards, and the health verdict that drops a GPU's XID conditions when it came back
//! healthy.
//!
//! The whole command is refused before anything is reset when any listed GPU is unknown or
//! busy, as [`crate::device::policy`] decides: a hold on it, on one of its MIG devices or slots, a
//! pending Kubernetes release of it, or passthrough to a VM. UUIDs are compared in their normal form, whatever case they were
//! given in. A reset that fails does not stop the others; its GPU keeps its conditions.

use std::future::Future;

use bcd_protocol::{GpuUuid, PciAddress};
use serde::{Deserialize, Serialize};

use super::faults::Health;
use crate::cdi::{DeviceId, Hold};
use crate::device::policy::Topology;
use crate::helper_client::Helper;
use crate::inventory::document::Inventory;

/// Why the command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResetError {
    /// A listed GPU (or part of it) is in use; nothing was reset.
    #[error("gpu-busy: GPU {uuid} is in use ({holder}); nothing was reset")]
    Busy {
        /// The GPU asked for.
        uuid: GpuUuid,
        /// What holds it, in words.
        holder: String,
    },
    /// A listed UUID is not in the inventory; nothing was reset.
    #[error("unknown GPU {uuid}: the inventory does not list it; nothing was reset")]
    UnknownGpu {
        /// The UUID asked for.
        uuid: GpuUuid,
    },
    /// A listed GPU has no PCI address in the inventory (the helper resets by address).
    #[error("GPU {uuid} has no PCI address in the inventory, so bcd-helper cannot reset it; nothing was reset")]
    NoAddress {
        /// The UUID asked for.
        uuid: GpuUuid,
    },
    /// No GPU was named.
    #[error("gpu.reset needs at least one GPU UUID")]
    NoGpu,
}

/// How one GPU came out of the reset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuResetOutcome {
    /// The GPU.
    pub uuid: GpuUuid,
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

/// Resets `uuids`: refuses the whole command when any is unknown or busy, else resets each
/// through `helper` (by PCI address, the key of the helper's per-device lock), collects again with `recollect`, and marks each healthy unless the new
/// inventory shows uncorrectable volatile ECC errors or a pending or failed row remap; a
/// healthy GPU's XID conditions are dropped from `health` (faults.json rewritten).
///
/// # Errors
/// [`ResetError`] when the command is refused; nothing was reset then. A failed reset or a
/// failed write of faults.json is reported in the outcome or logged, not as an error, since
/// other GPUs may have been reset already.
pub async fn reset_gpus<F, Fut>(
    uuids: &[GpuUuid],
    inventory: &Inventory,
    holds: &[Hold],
    helper: &dyn Helper,
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
    let topology = Topology::from_inventory(inventory, 0);
    let mut targets = Vec::with_capacity(uuids.len());
    for uuid in uuids {
        let unknown = || ResetError::UnknownGpu { uuid: uuid.clone() };
        let id: DeviceId = uuid.as_str().parse().map_err(|_| unknown())?;
        let gpu = inventory
            .gpu
            .gpus
            .iter()
            .find(|g| &g.uuid == uuid)
            .ok_or_else(unknown)?;
        let address: PciAddress = gpu
            .address()
            .ok_or_else(|| ResetError::NoAddress { uuid: uuid.clone() })?;
        targets.push((gpu, (uuid, address), id));
    }
    for (gpu, _, id) in &targets {
        if let Some(busy) = topology.busy(id, holds) {
            return Err(ResetError::Busy {
                uuid: gpu.uuid.clone(),
                holder: busy.to_string(),
            });
        }
    }
    // XIDs last seen after this second are news about the reset, not the history it clears
    // (conditions keep whole seconds).
    let started = crate::state::unix_now();
    let mut errors = Vec::with_capacity(targets.len());
    for (_, (typed, address), _) in &targets {
        let result = helper
            .reset_gpu(*address)
            .await
            .err()
            .map(|e| e.to_string());
        if let Some(e) = &result {
            tracing::error!("gpu.reset of {typed}: {e}");
        }
        errors.push(result);
    }
    let after = recollect().await;
    let mut outcomes = Vec::with_capacity(targets.len());
    for ((gpu, _, _), error) in targets.iter().zip(errors) {
        let mut reasons = Vec::new();
        if let Some(e) = &error {
            reasons.push(format!("the reset failed: {e}"));
        }
        match after.gpu.gpus.iter().find(|g| g.uuid == gpu.uuid) {
            Some(now) => reasons.extend(
                super::verdict::counter_reasons(now)
                    .into_iter()
                    .map(|r| r.message),
            ),
            None => reasons.push("the inventory no longer lists it after the reset".to_owned()),
        }
        reasons.extend(
            health
                .conditions()
                .iter()
                .filter(|c| c.is_xid_of(&gpu.uuid) && c.last_seen > started)
                .map(|c| {
                    format!(
                        "{} seen again since the reset began: {}",
                        c.kind,
                        crate::smi::escape_control(&c.message)
                    )
                }),
        );
        let healthy = reasons.is_empty();
        let mut conditions_cleared = 0;
        if healthy {
            conditions_cleared = health.clear_gpu(&gpu.uuid, started).unwrap_or_else(|e| {
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
    use crate::health::ConditionKind;
    use crate::helper_client::fake::{succeeded, RecordingHelper};
    use crate::helper_client::ClientError;
    use crate::inventory::document::{Ecc, EccCounts, Gpu, GpuSection, Mig, MigDevice, RowRemap};
    use bcd_protocol::{HelperError, Operation};

    const A: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";
    const B: &str = "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a";
    const C: &str = "GPU-b9036d74-bff6-b565-c003-dc53279ae2bd";
    const MIG: &str = "MIG-7f3e2b1a-0c4d-5e6f-8a9b-0c1d2e3f4a5b";

    /// The PCI address [`inventory`] gives GPU `i`.
    fn address(i: u8) -> PciAddress {
        format!("0000:{:02x}:00.0", 0x18 + i).parse().unwrap()
    }

    /// Records every reset; fails the GPUs at `fail`.
    fn recording(fail: Vec<PciAddress>) -> RecordingHelper {
        RecordingHelper::answering(move |op| match op {
            Operation::ResetGpu { gpu } if fail.contains(gpu) => {
                Err(ClientError::Helper(HelperError::Failed {
                    exit_code: Some(3),
                    message: "In use by another client".into(),
                }))
            }
            other => Ok(succeeded(other)),
        })
    }

    fn inventory() -> Inventory {
        let gpu = |i: u32, uuid: &str| Gpu {
            bus_id: Some(format!("00000000:{:02x}:00.0", 0x18 + i).parse().unwrap()),
            ecc: Some(Ecc {
                volatile: Some(EccCounts {
                    correctable: Some(0),
                    uncorrectable: Some(0),
                }),
                ..Ecc::default()
            }),
            row_remap: Some(RowRemap::default()),
            ..Gpu::new(i, uuid.parse().unwrap())
        };
        let mut c = gpu(2, C);
        c.mig = Some(Mig {
            mode: Some(true),
            devices: vec![MigDevice {
                uuid: Some(MIG.parse().unwrap()),
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
            h.raise(
                &ConditionKind::Xid(79),
                uuid.parse().unwrap(),
                "NVRM: Xid ...",
            )
            .unwrap();
        }
        // Raised within a second, the last two wait for the burst's write: written now.
        h.flush().unwrap();
        h
    }

    fn hold(id: &str, device: &str) -> Hold {
        Hold {
            id: id.parse().unwrap(),
            devices: vec![device.parse().unwrap()],
            kubernetes: false,
            owner: None,
            gpus: Default::default(),
            unassigned_since: None,
            claim: None,
        }
    }

    // What broke: gpu.reset could not refuse a GPU for a pending Kubernetes release: a
    // release was never recorded, so nothing said why the GPU was still in use.
    #[tokio::test]
    async fn a_pending_kubernetes_release_refuses_the_reset() {
        let mut k = hold("k8s-a", A);
        k.kubernetes = true;
        k.unassigned_since = Some(1_700_000_000);
        let err = refused(&[A], &inventory(), &[k]).await;
        assert!(matches!(err, ResetError::Busy { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("a pending Kubernetes release: hold k8s-a"),
            "{err}"
        );
    }

    async fn refused(uuids: &[&str], inv: &Inventory, holds: &[Hold]) -> ResetError {
        let dir = tempfile::tempdir().unwrap();
        let h = health(dir.path());
        let r = recording(Vec::new());
        let uuids: Vec<GpuUuid> = uuids.iter().map(|s| s.parse().unwrap()).collect();
        let err = reset_gpus(&uuids, inv, holds, &r, || async { unreachable!() }, &h)
            .await
            .unwrap_err();
        assert!(r.calls().is_empty(), "nothing may be reset");
        assert_eq!(h.conditions().len(), 3);
        err
    }

    #[tokio::test]
    async fn a_held_gpu_refuses_the_whole_command() {
        let err = refused(&[A, B], &inventory(), &[hold("h-42", B)]).await;
        assert!(matches!(err, ResetError::Busy { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            format!("gpu-busy: GPU {B} is in use (held by h-42); nothing was reset")
        );
    }

    #[tokio::test]
    async fn a_held_mig_instance_or_slot_makes_its_gpu_busy() {
        let err = refused(&[C], &inventory(), &[hold("h-1", MIG)]).await;
        assert!(
            matches!(&err, ResetError::Busy { uuid, holder } if uuid == C && holder.contains(MIG)),
            "{err}"
        );
        let err = refused(&[A], &inventory(), &[hold("s", &format!("{A}::1"))]).await;
        assert!(
            err.to_string().contains(&format!("slot {A}::1 held by s")),
            "{err}"
        );
    }

    // What broke: a reset named in upper case was answered "unknown GPU", not refused as busy.
    #[tokio::test]
    async fn a_reset_named_in_upper_case_is_refused_as_busy() {
        let upper = B.replacen("GPU-", "", 1).to_ascii_uppercase();
        let asked = format!("GPU-{upper}");
        let err = refused(&[&asked], &inventory(), &[hold("h-42", B)]).await;
        assert!(matches!(err, ResetError::Busy { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_passed_through_gpu_is_busy() {
        let mut inv = inventory();
        inv.gpu.gpus[1].passed_through = true;
        let err = refused(&[B], &inv, &[]).await;
        assert!(err.to_string().contains("passed through to a VM"), "{err}");
    }

    #[tokio::test]
    async fn an_unknown_gpu_is_refused() {
        let err = refused(
            &[A, "GPU-00000000-0000-0000-0000-000000000000"],
            &inventory(),
            &[],
        )
        .await;
        assert!(matches!(err, ResetError::UnknownGpu { .. }), "{err}");
        assert!(err.to_string().starts_with("unknown GPU GPU-0000"));
    }

    #[tokio::test]
    async fn resets_clear_xids_only_for_gpus_that_came_back_healthy() {
        let dir = tempfile::tempdir().unwrap();
        let h = health(dir.path());
        let r = recording(vec![address(2)]);
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
        let uuids: Vec<GpuUuid> = [A, B, C].iter().map(|s| s.parse().unwrap()).collect();
        let report = reset_gpus(&uuids, &inventory(), &[], &r, || async { after }, &h)
            .await
            .unwrap();
        let reset: Vec<Operation> = (0..3)
            .map(|i| Operation::ResetGpu { gpu: address(i) })
            .collect();
        assert_eq!(r.calls(), reset);
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
            .map(|c| c.device_id.to_string())
            .collect();
        assert_eq!(left, [B, C]);
    }

    // What broke: a healthy reset dropped every XID condition of the GPU, those the GPU raised
    // during the reset and the collection after it included: a fresh fault was erased.
    #[tokio::test]
    async fn an_xid_raised_during_the_reset_survives_it_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let h = health(dir.path());
        let r = recording(Vec::new());
        let uuids: Vec<GpuUuid> = vec![A.parse().unwrap()];
        let recollect = || async {
            // The collection after the reset takes its time; the GPU faults meanwhile.
            tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
            h.raise(
                &ConditionKind::Xid(119),
                A.parse().unwrap(),
                "NVRM: Xid (PCI:0000:18:00): 119, Timeout waiting for GSP",
            )
            .unwrap();
            inventory()
        };
        let report = reset_gpus(&uuids, &inventory(), &[], &r, recollect, &h)
            .await
            .unwrap();
        let a = &report.gpus[0];
        assert!(!a.healthy);
        assert_eq!(a.conditions_cleared, 0);
        assert!(
            a.reasons[0].starts_with("Xid119 seen again since the reset began: NVRM: Xid"),
            "{:?}",
            a.reasons
        );
        let kinds: Vec<String> = h
            .conditions()
            .iter()
            .filter(|c| c.device_id.to_string() == A)
            .map(|c| c.kind.to_string())
            .collect();
        assert_eq!(kinds, ["Xid79", "Xid119"], "nothing of A was dropped");
    }
}
