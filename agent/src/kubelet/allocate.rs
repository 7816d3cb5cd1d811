//! `Allocate`: a Kubernetes hold per container, made through the allocation policy, its
//! spec written before the answer, and the CDI device names the container gets.
//!
//! The hold's id is `k8s-` and a hash of the sorted device ids, so the kubelet asking again
//! for the same devices (after its own restart) finds the same hold. The kubelet hands a
//! device out again only once the pod that had it is gone: an older Kubernetes hold of one
//! of the devices asked for is released first. A device any other hold has is refused.

use sha2::{Digest, Sha256};

use crate::cdi::{self, DeviceId, HoldError, HoldId};
use crate::node::shared::Node;
use crate::policy::PolicyError;

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
}

/// The id of the Kubernetes hold of `devices`.
pub fn hold_id(devices: &[DeviceId]) -> HoldId {
    let mut sorted: Vec<&str> = devices.iter().map(DeviceId::as_str).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let digest = Sha256::digest(sorted.join(",").as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    // `k8s-` and 16 hex digits is a valid hold id by construction.
    format!("k8s-{hex}")
        .parse()
        .expect("k8s-<hex> is a valid hold id")
}

/// Allocates `asked` (device ids of `resource`, as the kubelet sent them) to one container:
/// returns the hold and the CDI device names, one per device.
///
/// # Errors
/// [`AllocateError`]: a device not offered by this plugin, a policy refusal (held by a
/// non-Kubernetes hold, passed through, ...), or the hold or its spec not saved.
pub async fn allocate(
    node: &Node,
    resource: &Resource,
    offered: &[DeviceId],
    asked: &[String],
) -> Result<(HoldId, Vec<String>), AllocateError> {
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
    let id = hold_id(&devices);
    let topology = node.topology().await;
    let placed = devices
        .iter()
        .map(|d| topology.place(d))
        .collect::<Result<Vec<_>, _>>()?;
    node.with_holds(|holds| -> Result<(), AllocateError> {
        let stale: Vec<HoldId> = holds
            .list()
            .filter(|h| h.kubernetes && h.id != id && h.devices.iter().any(|d| devices.contains(d)))
            .map(|h| h.id.clone())
            .collect();
        for old in stale {
            tracing::info!(
                "Kubernetes hold {old} is released: the kubelet allocated its devices again"
            );
            holds.release(&old)?;
        }
        holds.apply(id.clone(), placed, true, &topology)?;
        Ok(())
    })
    .await
    .ok_or(AllocateError::HoldsUnavailable)??;
    node.converge_holds().await;
    let spec = node.config().cdi_dir.join(id.spec_file_name());
    if !spec.exists() {
        // The kubelet fails the pod on this answer: a hold left behind would keep the
        // devices from the next pod until the release pass noticed.
        if let Some(Err(e)) = node.with_holds(|holds| holds.release(&id)).await {
            tracing::error!("{e}");
        }
        node.converge_holds().await;
        return Err(AllocateError::Spec(spec.display().to_string()));
    }
    let vendor = cdi::read_vendor_specs(&cdi::vendor_dirs(
        &node.config().cdi_dir,
        &node.config().host,
    ));
    let catalog = node.device_catalog().await;
    let names = devices
        .iter()
        .map(|d| cdi_name(d, &vendor.specs, &catalog))
        .collect();
    node.kubernetes()
        .count(resource.as_str(), |c| c.allocations += 1);
    Ok((id, names))
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
}
