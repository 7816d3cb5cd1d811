//! `Allocate`: a Kubernetes hold per container, made through the allocation policy, its
//! spec written before the answer, and the CDI device names the container gets.
//!
//! The hold's id is `k8s-` and a hash of the sorted device ids, so the kubelet asking again
//! for the same devices (after its own restart) finds the same hold. A device a live
//! Kubernetes hold has stays in it (the kubelet reuses an init container's devices for the
//! pod's app containers); the kubelet hands a device out again to another pod only once the
//! pod that had it is gone, so a pending Kubernetes hold of a device asked for is released,
//! after the new hold is known to be allowed. A device any other hold has is refused.

use sha2::{Digest, Sha256};

use super::KubeState;
use crate::cdi::{self, Before, DeviceId, HoldError, HoldId, HoldOwner};
use crate::device::policy::PolicyError;
use crate::source::DeviceSource;

use super::devices::{cdi_name, Resource};

/// Why a container's devices were not allocated. `Display` is the sentence the kubelet logs.
#[derive(Debug, thiserror::Error)]
pub enum AllocateError {
    /// The kubelet asked for no device.
    #[error("the container request names no device")]
    NoDevice,
    /// A device id that is not one of bcd's.
    #[error("{device:?} is not a device of {resource} on this node")]
    NotOffered {
        /// What was asked.
        device: String,
        /// The plugin asked.
        resource: Resource,
    },
    /// The policy refused it.
    #[error("{0}")]
    Policy(#[from] PolicyError),
    /// The hold could not be made or saved.
    #[error("{0}")]
    Hold(#[from] HoldError),
    /// holds.json could not be read when the node started.
    #[error("holds.json could not be read when bcd node started; see bcd status")]
    HoldsUnavailable,
    /// The spec was not written (the hold is undone).
    #[error("the hold spec {0} could not be written; see bcd status")]
    Spec(String),
    /// The device's GPU may not take work now (the stream may not have said so yet).
    #[error("{device} is on GPU {gpu}, which is {state}: {reason}; the pod fails with UnexpectedAdmissionError and is not retried: {action}")]
    Unhealthy {
        device: DeviceId,
        gpu: bcd_protocol::GpuUuid,
        state: &'static str,
        reason: String,
        action: String,
    },
}

/// Places `devices` (distinct, each offered) in `holds` for one container; returns the hold
/// the container's devices are in and whether it was made now. Each change is recorded in
/// `journal` before it is made, so the caller can undo the whole request.
///
/// - A device a live Kubernetes hold has (a pod had its devices at the last release pass) is
///   one the kubelet reuses within a pod: an init container's device goes on to an app
///   container. It stays in that hold, whose spec already names it.
/// - The other devices make a new Kubernetes hold. A pending one (no pod had its devices at
///   the last pass) that has one of them is released, since the kubelet hands its devices out
///   again, but only once the new hold is known to be allowed: a refused Allocate changes
///   nothing.
///
/// # Errors
/// [`AllocateError::Policy`] when a device is held by another hold (or passed through), and
/// [`AllocateError::Hold`] when the store cannot be saved.
fn place(
    holds: &mut cdi::Holds,
    devices: &[DeviceId],
    topology: &crate::device::policy::Topology,
    journal: &mut Vec<Before>,
) -> Result<(HoldId, bool), AllocateError> {
    let live = |d: &DeviceId| {
        holds
            .list()
            .find(|h| {
                h.owner() == HoldOwner::DevicePlugin
                    && h.unassigned_since.is_none()
                    && h.devices.contains(d)
            })
            .map(|h| h.id.clone())
    };
    let reused: Option<HoldId> = devices.iter().find_map(live);
    let fresh: Vec<DeviceId> = devices
        .iter()
        .filter(|d| live(d).is_none())
        .cloned()
        .collect();
    if fresh.is_empty() {
        // Every device is in a live hold: the first names them.
        return reused.map(|id| (id, false)).ok_or(AllocateError::NoDevice);
    }
    let id = free_hold_id(holds, hold_id(&fresh));
    let placed = fresh
        .iter()
        .map(|d| topology.place(d))
        .collect::<Result<Vec<_>, _>>()?;
    let stale: Vec<HoldId> = holds
        .list()
        .filter(|h| {
            h.owner() == HoldOwner::DevicePlugin
                && h.unassigned_since.is_some()
                && h.id != id
                && h.devices.iter().any(|d| fresh.contains(d))
        })
        .map(|h| h.id.clone())
        .collect();
    crate::device::policy::check_free(
        &id,
        &placed,
        holds.list().filter(|h| !stale.contains(&h.id)),
        topology,
    )?;
    for old in stale {
        tracing::info!(
            "Kubernetes hold {old} is released: the kubelet allocated its devices again"
        );
        journal.push(holds.before(&old));
        holds.release(&old)?;
    }
    journal.push(holds.before(&id));
    holds.apply(id.clone(), placed, HoldOwner::DevicePlugin, topology)?;
    Ok((id, true))
}

/// `base`, or when another owner's hold has that id (an operator's, stored by an older bcd
/// before `k8s-` ids were reserved), the first of `base-1`, `base-2`, ... that is free or the
/// device plugins' own: Allocate never replaces or changes a hold it did not make.
fn free_hold_id(holds: &cdi::Holds, base: HoldId) -> HoldId {
    let ours = |id: &HoldId| {
        holds
            .get(id)
            .is_none_or(|h| h.owner() == HoldOwner::DevicePlugin)
    };
    if ours(&base) {
        return base;
    }
    (1..)
        .filter_map(|n| format!("{base}-{n}").parse::<HoldId>().ok())
        .find(|id| ours(id))
        .expect("a store holds finitely many ids")
}

/// The id of the Kubernetes hold of `devices`.
pub fn hold_id(devices: &[DeviceId]) -> HoldId {
    let mut sorted: Vec<String> = devices.iter().map(DeviceId::to_string).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let digest = Sha256::digest(sorted.join(",").as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    // `k8s-` and 16 hex digits is a valid hold id by construction.
    format!("k8s-{hex}")
        .parse()
        .expect("k8s-<hex> is a valid hold id")
}

/// The distinct devices of one container's request, each offered by this plugin.
fn devices_of(
    resource: &Resource,
    offered: &[DeviceId],
    asked: &[String],
) -> Result<Vec<DeviceId>, AllocateError> {
    let mut devices: Vec<DeviceId> = Vec::with_capacity(asked.len());
    for raw in asked {
        let device = raw
            .parse::<DeviceId>()
            .ok()
            .filter(|d| offered.contains(d))
            .ok_or_else(|| AllocateError::NotOffered {
                device: raw.clone(),
                resource: resource.clone(),
            })?;
        if !devices.contains(&device) {
            devices.push(device);
        }
    }
    if devices.is_empty() {
        return Err(AllocateError::NoDevice);
    }
    Ok(devices)
}

/// Allocates every container of one `Allocate` (device ids of `resource`, as the kubelet
/// sent them), all or none: every container is checked first (offered, healthy now), then
/// each container's devices are placed (one Kubernetes hold per container, see [`place`])
/// and the specs written, and a refusal of any container undoes every change the request
/// made (a pending hold keeps its grace clock). Returns, per container, its hold and the CDI
/// device names, one per device.
///
/// # Errors
/// [`AllocateError`]: a device not offered by this plugin, a GPU not schedulable now, a
/// policy refusal (held by a non-Kubernetes hold, passed through, ...), or a hold or its spec
/// not saved.
pub async fn allocate_all<S: DeviceSource>(
    node: &S,
    kube: &KubeState,
    resource: &Resource,
    offered: &[DeviceId],
    containers: &[Vec<String>],
) -> Result<Vec<(HoldId, Vec<String>)>, AllocateError> {
    let requests = containers
        .iter()
        .map(|asked| devices_of(resource, offered, asked))
        .collect::<Result<Vec<_>, _>>()?;
    let topology = node.topology().await;
    // The verdict again, now: the stream's last word may be older than an XID.
    let verdicts = node.verdicts().await;
    for device in requests.iter().flatten() {
        let Some(gpu) = topology.gpu_of(device).and_then(|g| g.gpu_uuid().cloned()) else {
            continue;
        };
        let verdict = verdicts.iter().find(|(uuid, _)| **uuid == gpu);
        let schedulable = verdict.is_some_and(|(_, v)| v.healthy());
        if !schedulable {
            let reason = verdict.and_then(|(_, v)| v.reasons.first());
            return Err(AllocateError::Unhealthy {
                device: device.clone(),
                gpu,
                state: verdict.map_or("unknown", |(_, v)| v.health.name()),
                reason: reason.map_or_else(
                    || "nvidia-smi has not reported it".to_owned(),
                    |r| r.message.clone(),
                ),
                action: reason.map_or_else(|| "see bcd status".to_owned(), |r| r.action.clone()),
            });
        }
    }
    // One holds lock for the placing, the specs and an undo: nothing else changes the holds
    // between them (a release pass, another Allocate).
    let placed = node
        .change_holds_durably(
            |holds, journal| {
                requests
                    .iter()
                    .map(|devices| place(holds, devices, &topology, journal))
                    .collect::<Result<Vec<_>, _>>()
            },
            |placed| {
                placed
                    .iter()
                    .filter(|(_, fresh)| *fresh)
                    .map(|(id, _)| id.clone())
                    .collect()
            },
            // The kubelet fails the pod on this answer: a hold left behind would keep the
            // devices from the next pod until the release pass noticed.
            |spec| AllocateError::Spec(spec.display().to_string()),
            AllocateError::HoldsUnavailable,
        )
        .await?;
    let (vendor, catalog) = node.cdi_context().await;
    let answers = placed
        .into_iter()
        .zip(&requests)
        .map(|((id, _), devices)| {
            let names = devices
                .iter()
                .map(|d| cdi_name(d, &vendor.specs, &catalog))
                .collect();
            (id, names)
        })
        .collect::<Vec<_>>();
    kube.count(resource.as_str(), |c| c.allocations += answers.len() as u64);
    Ok(answers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hold_id_depends_on_the_set_of_devices_only() {
        let a: DeviceId = "GPU-11111111-1111-1111-1111-111111111111".parse().unwrap();
        let b: DeviceId = "GPU-22222222-2222-2222-2222-222222222222".parse().unwrap();
        assert_eq!(
            hold_id(&[a.clone(), b.clone()]),
            hold_id(&[b.clone(), a.clone()])
        );
        assert_ne!(hold_id(std::slice::from_ref(&a)), hold_id(&[b]));
        assert!(hold_id(&[a]).as_str().starts_with("k8s-"));
    }

    use crate::cdi::Holds;
    use crate::device::policy::tests::{dev, topology, GPU0, GPU3, MIG_A, MIG_B};

    /// A store with the Kubernetes hold `k8s-init` of both MIG devices of GPU 3, pending
    /// release since `pending` when given.
    fn store(dir: &std::path::Path, pending: Option<u64>) -> (Holds, HoldId) {
        let t = topology(0);
        let mut holds = Holds::load(dir).unwrap();
        let id: HoldId = "k8s-init".parse().unwrap();
        let placed = [MIG_A, MIG_B].map(|d| t.place(&dev(d)).unwrap()).to_vec();
        holds
            .apply(id.clone(), placed, HoldOwner::DevicePlugin, &t)
            .unwrap();
        if pending.is_some() {
            holds.mark_unassigned(&id, pending).unwrap();
        }
        (holds, id)
    }

    // What broke: an app container given one of its init container's devices (the kubelet
    // reuses them within a pod) released the init container's hold, and its spec, before the
    // init container ran; the other device was left in no hold.
    #[test]
    fn a_device_a_live_kubernetes_hold_has_stays_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let (mut holds, init) = store(dir.path(), None);
        let (id, made) = place(&mut holds, &[dev(MIG_A)], &topology(0), &mut Vec::new()).unwrap();
        assert_eq!((id, made), (init.clone(), false));
        assert_eq!(holds.list().count(), 1);
        assert_eq!(holds.get(&init).unwrap().devices, [dev(MIG_A), dev(MIG_B)]);
    }

    // An operator hold whose id was the predictable k8s-<sha256 of the devices> was silently
    // replaced by Allocate, and its GPU then went to a third hold. Allocate now never changes
    // a hold it did not make: it takes the next free id, and the operator's hold stays.
    #[test]
    fn allocate_never_replaces_an_operator_hold_with_its_predictable_id() {
        let dir = tempfile::tempdir().unwrap();
        let t = topology(0);
        let predictable = hold_id(&[dev(GPU0)]);
        // As an older bcd stored it: an operator's hold (no owner, not Kubernetes).
        std::fs::write(
            dir.path().join(crate::cdi::holds::HOLDS_FILE),
            format!(
                "{{\"holds\": [{{\"id\": \"{predictable}\", \"devices\": [\"{MIG_A}\"], \"gpus\": {{\"{MIG_A}\": \"{GPU3}\"}}}}]}}"
            ),
        )
        .unwrap();
        let mut holds = Holds::load(dir.path()).unwrap();
        assert_eq!(
            holds.get(&predictable).unwrap().owner(),
            HoldOwner::Operator
        );
        let (id, fresh) = place(&mut holds, &[dev(GPU0)], &t, &mut Vec::new()).unwrap();
        assert!(fresh);
        assert_eq!(id.as_str(), format!("{predictable}-1"));
        let operator = holds.get(&predictable).unwrap();
        assert_eq!(
            operator.devices,
            [dev(MIG_A)],
            "the operator's hold is unchanged"
        );
        assert_eq!(operator.owner(), HoldOwner::Operator);
        assert_eq!(holds.get(&id).unwrap().owner(), HoldOwner::DevicePlugin);
        // Asked again for the same device, the kubelet finds the same hold.
        assert_eq!(
            place(&mut holds, &[dev(GPU0)], &t, &mut Vec::new()).unwrap(),
            (id, false)
        );
    }

    // What broke: a device a DRA claim held counted as a live device-plugin hold (the rule
    // read `kubernetes` alone), so Allocate answered it from the claim's hold.
    #[test]
    fn allocate_refuses_a_device_a_dra_claim_holds() {
        let dir = tempfile::tempdir().unwrap();
        let t = topology(0);
        let mut holds = Holds::load(dir.path()).unwrap();
        let claim = crate::device::DraClaim {
            uid: "u-1".into(),
            namespace: "ml".into(),
            name: "c".into(),
            devices: Vec::new(),
            spec: None,
        };
        holds
            .apply_claim(
                "dra-u-1".parse().unwrap(),
                vec![t.place(&dev(GPU0)).unwrap()],
                claim,
                &t,
            )
            .unwrap();
        let err = place(&mut holds, &[dev(GPU0)], &t, &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("dra-u-1"), "{err}");
        assert_eq!(holds.list().count(), 1);
    }

    #[test]
    fn a_pending_kubernetes_hold_gives_way_to_a_new_pod() {
        let dir = tempfile::tempdir().unwrap();
        let (mut holds, init) = store(dir.path(), Some(10));
        let (id, made) = place(&mut holds, &[dev(MIG_A)], &topology(0), &mut Vec::new()).unwrap();
        assert!(made);
        assert_eq!(id, hold_id(&[dev(MIG_A)]));
        assert!(holds.get(&init).is_none(), "the pending hold is released");
        assert_eq!(holds.get(&id).unwrap().devices, [dev(MIG_A)]);
    }

    // What broke: the pending hold was released before the new one was checked, so a refused
    // Allocate still took the old hold (and its spec) away.
    #[test]
    fn a_refused_allocate_releases_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (mut holds, init) = store(dir.path(), Some(10));
        let t = topology(0);
        holds
            .apply(
                "job".parse().unwrap(),
                vec![t.place(&dev(GPU0)).unwrap()],
                HoldOwner::Operator,
                &t,
            )
            .unwrap();
        let err = place(&mut holds, &[dev(MIG_A), dev(GPU0)], &t, &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("job"), "{err}");
        assert!(
            holds.get(&init).is_some(),
            "the pending hold is still there"
        );
        assert_eq!(holds.list().count(), 2);
    }
}
