//! `gpu.reset`'s policy, ready for the node service: which GPUs may be reset, the resets
//! themselves through the [`Helper`] (its `ResetGpu`), a collection afterwards, the conditions
//! a reset ends dropped ([`crate::health::Condition::cleared_by_reset_of`], the one rule of
//! what a reset clears), and the verdict after it, from the node's own judge.
//!
//! The whole command is refused before anything is reset when any listed GPU is unknown or
//! busy, as [`crate::device::policy`] decides: a hold on it, on one of its MIG devices or slots, a
//! pending Kubernetes release of it, or passthrough to a VM. UUIDs are compared in their normal form, whatever case they were
//! given in. A reset that fails does not stop the others; its GPU keeps its conditions.

use std::collections::BTreeMap;
use std::future::Future;

use bcd_protocol::{GpuUuid, PciAddress};
use serde::{Deserialize, Serialize};

use super::faults::Health;
use super::verdict::{HealthState, Verdict};
use super::xid::XidPolicy;
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
    /// The reset succeeded and the verdict after it lets the GPU take work (healthy or
    /// degraded): the scheduling answer `/v1/status` gives for it now.
    pub healthy: bool,
    /// The verdict's state after the reset (`None` from a node before this field, or for a
    /// GPU the collection after the reset no longer lists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthState>,
    /// The verdict's reasons after the reset, each `message -> action`, and why the reset
    /// failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// Conditions the reset ended (those last seen before it began that a reset may clear).
    pub conditions_cleared: usize,
}

/// The result of a `gpu.reset` that was not refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetReport {
    /// One per GPU, in the order asked.
    pub gpus: Vec<GpuResetOutcome>,
}

/// Resets `uuids`: refuses the whole command when any is unknown or busy, else resets each
/// through `helper` (by PCI address, the key of the helper's per-device lock), collects again
/// with `recollect`, drops from `health` the conditions each GPU whose reset succeeded had
/// that a reset ends under `policy` (faults.json rewritten), and answers each GPU's verdict as
/// `judge` gives it then: the node's verdicts, the ones `/v1/status` shows.
///
/// # Errors
/// [`ResetError`] when the command is refused; nothing was reset then. A failed reset or a
/// failed write of faults.json is reported in the outcome or logged, not as an error, since
/// other GPUs may have been reset already.
#[allow(clippy::too_many_arguments)]
pub async fn reset_gpus<F, Fut, J, JFut>(
    uuids: &[GpuUuid],
    inventory: &Inventory,
    holds: &[Hold],
    helper: &dyn Helper,
    recollect: F,
    health: &Health,
    policy: &XidPolicy,
    judge: J,
) -> Result<ResetReport, ResetError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Inventory>,
    J: FnOnce() -> JFut,
    JFut: Future<Output = BTreeMap<GpuUuid, Verdict>>,
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
    // The collection first: the verdict after it reads the counters the reset cleared.
    recollect().await;
    let mut cleared = Vec::with_capacity(targets.len());
    for ((gpu, _, _), error) in targets.iter().zip(&errors) {
        cleared.push(if error.is_some() {
            0
        } else {
            health
                .clear_after_reset(&gpu.uuid, started, policy)
                .unwrap_or_else(|e| {
                    tracing::error!("{e}");
                    0
                })
        });
    }
    let verdicts = judge().await;
    let conditions = health.conditions();
    let mut outcomes = Vec::with_capacity(targets.len());
    for (((gpu, _, _), error), conditions_cleared) in targets.iter().zip(errors).zip(cleared) {
        let mut reasons = Vec::new();
        if let Some(e) = &error {
            reasons.push(format!("the reset failed: {e}"));
        }
        let verdict = verdicts.get(&gpu.uuid);
        match verdict {
            Some(v) => reasons.extend(v.reasons.iter().map(|r| {
                // A condition raised again during the reset or the collection says so.
                let again = conditions.iter().any(|c| {
                    c.device_id.gpu() == Some(&gpu.uuid)
                        && c.last_seen > started
                        && r.kind == super::verdict::ReasonKind::Condition(c.kind.clone())
                });
                let prefix = if again {
                    format!("{} seen again since the reset began: ", r.kind)
                } else {
                    String::new()
                };
                format!("{prefix}{} -> {}", r.message, r.action)
            })),
            None => reasons.push("the inventory no longer lists it after the reset".to_owned()),
        }
        outcomes.push(GpuResetOutcome {
            uuid: gpu.uuid.clone(),
            healthy: error.is_none() && verdict.is_some_and(Verdict::healthy),
            health: verdict.map(|v| v.health),
            error,
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
    use crate::health::verdict::{judge, Evidence};
    use crate::health::{Condition, ConditionDevice, ConditionKind};
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

    /// A store with `xid` raised on each of A, B and C.
    fn health_with(dir: &std::path::Path, xid: u32) -> Health {
        let h = Health::new(FaultStore::open(dir, "boot").unwrap());
        for uuid in [A, B, C] {
            h.raise(
                &ConditionKind::Xid(xid),
                uuid.parse().unwrap(),
                "NVRM: Xid ...",
            )
            .unwrap();
        }
        // Raised within a second, the last two wait for the burst's write: written now.
        h.flush().unwrap();
        h
    }

    /// Xid 48 (double-bit ECC error, a reset XID) on A, B and C.
    fn health(dir: &std::path::Path) -> Health {
        health_with(dir, 48)
    }

    /// The node's judge in small: the verdicts of `after`'s GPUs from `h`'s conditions as
    /// they are when it is asked (after the reset's clearing).
    fn verdicts_of<'a>(
        h: &'a Health,
        after: &'a Inventory,
    ) -> impl FnOnce() -> std::future::Ready<BTreeMap<GpuUuid, Verdict>> + 'a {
        move || {
            let conditions = h.conditions();
            let ev = Evidence::new(&conditions).with_board(&after.gpu.gpus);
            std::future::ready(
                after
                    .gpu
                    .gpus
                    .iter()
                    .map(|g| (g.uuid.clone(), judge(g, &ev)))
                    .collect(),
            )
        }
    }

    fn hold(id: &str, device: &str) -> Hold {
        Hold {
            id: id.parse().unwrap(),
            devices: vec![device.parse().unwrap()],
            kubernetes: false,
            owner: None,
            gpus: Default::default(),
            unassigned_since: None,
            created_at: None,
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
        let err = reset_gpus(
            &uuids,
            inv,
            holds,
            &r,
            || async { unreachable!() },
            &h,
            &XidPolicy::default(),
            verdicts_of(&h, inv),
        )
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
    async fn a_reset_clears_the_reset_xids_of_the_gpus_it_reset_and_answers_their_verdict() {
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
        let report = reset_gpus(
            &uuids,
            &inventory(),
            &[],
            &r,
            || async { after.clone() },
            &h,
            &XidPolicy::default(),
            verdicts_of(&h, &after),
        )
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
        // B's reset ran (its Xid 48 is answered) but its counters still say reset it; C's
        // reset failed, so it keeps its XID.
        assert_eq!(verdict, [(true, 1), (false, 1), (false, 0)]);
        assert_eq!(
            report.gpus[1].reasons,
            [format!("1 uncorrectable volatile ECC error(s) since the driver loaded -> reset the GPU: bcd gpu reset {B}")]
        );
        assert_eq!(report.gpus[1].health, Some(HealthState::Unhealthy));
        assert!(report.gpus[2].error.is_some());
        assert!(report.gpus[2].reasons[0].starts_with("the reset failed: "));
        let left: Vec<String> = read_this_boot(dir.path(), "boot")
            .unwrap()
            .into_iter()
            .map(|c| c.device_id.to_string())
            .collect();
        assert_eq!(left, [C]);
    }

    // What broke: after a fatal SXid, gpu.reset of a GPU its switch reaches answered "reset,
    // healthy" while status said NvSwitchFatal, and a reset cleared an Xid 79 whose action is
    // "reboot the node".
    #[tokio::test]
    async fn a_reset_answers_the_verdict_after_it_and_clears_nothing_only_a_reboot_clears() {
        let dir = tempfile::tempdir().unwrap();
        let h = Health::new(FaultStore::open(dir.path(), "boot").unwrap());
        h.raise(&ConditionKind::Xid(79), B.parse().unwrap(), "NVRM: Xid 79")
            .unwrap();
        h.raise(
            &ConditionKind::FellOffTheBus,
            C.parse().unwrap(),
            "NVRM: GPU has fallen off the bus",
        )
        .unwrap();
        h.flush().unwrap();
        // A fatal SXid on the NVSwitch A's NVLink reaches.
        let sxid = Condition {
            kind: ConditionKind::SXid(20034),
            status: true,
            device_id: ConditionDevice::Switch("0000:05:00.0".parse().unwrap()),
            message:
                "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up"
                    .into(),
            first_seen: 1,
            last_seen: 1,
            count: 1,
        };
        let mut after = inventory();
        after.gpu.gpus[0].nvlinks = vec![crate::inventory::document::NvLink {
            link: 0,
            state: "active".into(),
            remote: Some("nvswitch:00000000:05:00.0".to_owned().into()),
        }];
        let judge_now = || {
            let mut conditions = h.conditions();
            conditions.push(sxid.clone());
            let ev = Evidence::new(&conditions).with_board(&after.gpu.gpus);
            let verdicts: BTreeMap<GpuUuid, Verdict> = after
                .gpu
                .gpus
                .iter()
                .map(|g| (g.uuid.clone(), judge(g, &ev)))
                .collect();
            std::future::ready(verdicts)
        };
        let r = recording(Vec::new());
        let uuids: Vec<GpuUuid> = [A, B, C].iter().map(|s| s.parse().unwrap()).collect();
        let report = reset_gpus(
            &uuids,
            &inventory(),
            &[],
            &r,
            || async { after.clone() },
            &h,
            &XidPolicy::default(),
            judge_now,
        )
        .await
        .unwrap();
        for g in &report.gpus {
            assert!(g.error.is_none(), "{g:?}");
            assert!(!g.healthy, "{g:?}");
            assert_eq!(g.health, Some(HealthState::Unhealthy), "{g:?}");
            assert_eq!(g.conditions_cleared, 0, "{g:?}");
        }
        assert!(
            report.gpus[0].reasons[0].starts_with("fatal SXid 20034 on NVSwitch 0000:05:00.0"),
            "{:?}",
            report.gpus[0].reasons
        );
        assert!(
            report.gpus[1].reasons[0].starts_with("Xid 79 (GPU has fallen off the bus")
                && report.gpus[1].reasons[0].ends_with("-> reboot the node"),
            "{:?}",
            report.gpus[1].reasons
        );
        assert!(
            report.gpus[2].reasons[0].ends_with("-> reboot the node"),
            "{:?}",
            report.gpus[2].reasons
        );
        let kept: Vec<String> = h.conditions().iter().map(|c| c.kind.to_string()).collect();
        assert_eq!(
            kept,
            ["Xid79", "FellOffTheBus"],
            "only a reboot clears them"
        );
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
        let after = inventory();
        let report = reset_gpus(
            &uuids,
            &inventory(),
            &[],
            &r,
            recollect,
            &h,
            &XidPolicy::default(),
            verdicts_of(&h, &after),
        )
        .await
        .unwrap();
        let a = &report.gpus[0];
        assert!(!a.healthy);
        assert_eq!(a.conditions_cleared, 1, "the Xid 48 from before the reset");
        assert!(
            a.reasons[0]
                .starts_with("Xid119 seen again since the reset began: Xid 119 (GSP RPC timeout"),
            "{:?}",
            a.reasons
        );
        let kinds: Vec<String> = h
            .conditions()
            .iter()
            .filter(|c| c.device_id.to_string() == A)
            .map(|c| c.kind.to_string())
            .collect();
        assert_eq!(kinds, ["Xid119"], "the XID raised during the reset stays");
    }
}
