//! Releases: the device plugin API has no release call, so every [`POLL_EVERY`] the
//! kubelet's PodResources `List` says which of bcd's devices pods still have. A Kubernetes
//! hold none of whose devices a pod has is marked unassigned (its release is now pending:
//! `gpu.reset` refuses its GPUs); once its grace period is over and its GPUs show no compute
//! process it is released and its spec removed. A hold whose devices show up again is
//! assigned again. While PodResources cannot be read nothing is released (an unreachable
//! kubelet is not a pod gone), and `status` says so.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::devices::DOMAIN;
use super::proto::podresources::{
    pod_resources_lister_client::PodResourcesListerClient, ListPodResourcesRequest,
};
use super::{grpc, KubeletConfig};
use crate::cdi::{DeviceId, Hold};
use crate::node::attribution::{PodAllocation, PodRef};
use crate::node::shared::Node;

/// How often PodResources is read while a Kubernetes hold exists.
pub const POLL_EVERY: Duration = Duration::from_secs(1);

/// The devices of bcd's resources that pods have now, with the container that has each,
/// from PodResources `List`.
///
/// # Errors
/// The sentence: the socket could not be reached or `List` failed.
pub async fn allocations(socket: &std::path::Path) -> Result<Vec<PodAllocation>, String> {
    let channel = grpc::dial(socket).await.map_err(|e| e.to_string())?;
    let mut client = PodResourcesListerClient::new(channel);
    let list = client
        .list(ListPodResourcesRequest {})
        .await
        .map_err(|s| format!("PodResources List failed: {}", s.message()))?
        .into_inner();
    let prefix = format!("{DOMAIN}/");
    let mut out = Vec::new();
    for p in &list.pod_resources {
        for c in &p.containers {
            let ids = c
                .devices
                .iter()
                .filter(|d| d.resource_name.starts_with(&prefix))
                .flat_map(|d| &d.device_ids)
                .filter_map(|id| id.parse::<DeviceId>().ok());
            for device in ids {
                out.push(PodAllocation {
                    device,
                    pod: PodRef {
                        namespace: p.namespace.clone(),
                        pod: p.name.clone(),
                        container: c.name.clone(),
                    },
                });
            }
        }
    }
    Ok(out)
}

/// The resource a hold's first device belongs to, for the counters.
fn resource_of(
    hold: &Hold,
    inventory: &crate::inventory::document::Inventory,
    slots: u32,
) -> String {
    let offer = super::devices::offer(inventory, slots, &[], &Default::default());
    hold.devices
        .first()
        .and_then(|d| {
            offer
                .iter()
                .find(|(_, devices)| devices.iter().any(|o| &o.id == d))
                .map(|(r, _)| r.to_string())
        })
        .unwrap_or_else(|| super::devices::GPU_RESOURCE.to_owned())
}

/// What one pass did to one Kubernetes hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Settled {
    /// The store changed (a mark set or cleared, or the hold released).
    changed: bool,
    /// No pod has its devices since this pass: its release is pending from now.
    pending: bool,
    /// Released, this many seconds without a pod.
    released_after: Option<u64>,
}

/// Marks, unmarks or releases `hold` in `store`: in use clears the mark; unused marks it
/// pending; pending for `grace` seconds with no process on its GPUs releases it. `hold` is
/// the pass's copy from before PodResources was read: when the store's hold is no longer
/// that one (released, or made anew by an Allocate meanwhile), nothing is done, so a hold
/// made during the pass is never released on the old one's clock. A store error is logged
/// and changes nothing.
fn settle(
    store: &mut crate::cdi::Holds,
    hold: &Hold,
    in_use: bool,
    processes: bool,
    now: u64,
    grace: u64,
) -> Settled {
    let logged = |r: Result<bool, crate::cdi::HoldError>| {
        r.unwrap_or_else(|e| {
            tracing::error!("{e}");
            false
        })
    };
    let mut step = Settled::default();
    if store.get(&hold.id) != Some(hold) {
        return step;
    }
    if in_use {
        step.changed = logged(store.mark_unassigned(&hold.id, None));
        return step;
    }
    let since = hold.unassigned_since.unwrap_or(now);
    if hold.unassigned_since.is_none() {
        step.pending = true;
        step.changed = logged(store.mark_unassigned(&hold.id, Some(since)));
    }
    let after = now.saturating_sub(since);
    if after >= grace && !processes {
        match store.release(&hold.id) {
            Ok(_) => {
                step.released_after = Some(after);
                step.changed = true;
            }
            Err(e) => tracing::error!("{e}"),
        }
    }
    step
}

/// One pass: reads PodResources and marks, unmarks or releases the Kubernetes holds.
pub async fn pass(node: &Node, config: &KubeletConfig) {
    let kubernetes: Vec<Hold> = node
        .holds_now()
        .await
        .into_iter()
        .filter(|h| h.kubernetes)
        .collect();
    if kubernetes.is_empty() {
        node.kubernetes().set_problem(None);
        // No Kubernetes hold: no pod has one of bcd's devices, and no series names one.
        node.set_pod_allocations(Vec::new());
        return;
    }
    let assigned: BTreeSet<DeviceId> = match allocations(&config.pod_resources_socket).await {
        Ok(a) => {
            node.kubernetes().set_problem(None);
            let devices = a.iter().map(|p| p.device.clone()).collect();
            // The metrics' namespace/pod/container labels (see node::attribution).
            node.set_pod_allocations(a);
            devices
        }
        Err(e) => {
            node.kubernetes().set_problem(Some(format!(
                "the kubelet's PodResources API cannot be read ({e}): no Kubernetes hold is released until it can"
            )));
            return;
        }
    };
    let busy_gpus: BTreeSet<bcd_protocol::GpuUuid> = node
        .samples_now()
        .await
        .iter()
        // A GPU whose process count could not be read counts as busy: a release waits for
        // proof that nothing runs there.
        .filter(|s| s.compute_processes != Some(0))
        .map(|s| s.uuid.clone())
        .collect();
    let inventory = node.inventory().await;
    let topology = crate::policy::Topology::from_inventory(&inventory, crate::cdi::ids::MAX_SLOTS);
    let now = crate::state::unix_now();
    let mut changed = false;
    for hold in kubernetes {
        let in_use = hold.devices.iter().any(|d| assigned.contains(d));
        let processes = topology
            .placed(&hold)
            .iter()
            .filter_map(|p| p.gpu.as_ref())
            .any(|g| busy_gpus.iter().any(|b| DeviceId::from(b) == *g));
        let grace = config.release_grace.as_secs();
        let Some(step) = node
            .with_holds(|store| settle(store, &hold, in_use, processes, now, grace))
            .await
        else {
            return;
        };
        changed |= step.changed;
        if step.pending {
            tracing::info!(
                "Kubernetes hold {}: no pod has its devices; its release is pending",
                hold.id
            );
        }
        if let Some(after) = step.released_after {
            tracing::info!(
                "Kubernetes hold {} released: no pod has had its devices for {after}s",
                hold.id
            );
            node.kubernetes().count(
                &resource_of(&hold, &inventory, node.config().gpu_slots),
                |c| c.releases += 1,
            );
        }
    }
    if changed {
        node.converge_holds().await;
        node.kubernetes().touch();
    }
}

/// Runs [`pass`] every [`POLL_EVERY`] for ever.
pub async fn run(node: Arc<Node>, config: KubeletConfig) {
    let mut every = tokio::time::interval(POLL_EVERY);
    loop {
        every.tick().await;
        pass(&node, &config).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cdi::Holds;
    use crate::policy::{Placed, Topology};

    const GPU: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";

    fn store_with_a_kubernetes_hold(dir: &std::path::Path) -> (Holds, Hold) {
        let mut store = Holds::load(dir).unwrap();
        let device: DeviceId = GPU.parse().unwrap();
        let placed = vec![Placed {
            gpu: device.gpu(),
            device,
        }];
        let hold = store
            .apply("k8s-a".parse().unwrap(), placed, true, &Topology::default())
            .unwrap()
            .clone();
        (store, hold)
    }

    // The release rule, one step at a time: unused marks the hold pending (said before any
    // release), the grace with no process releases it, a process or a pod keeps it.
    #[test]
    fn a_kubernetes_hold_is_marked_then_released_after_the_grace_without_processes() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, hold) = store_with_a_kubernetes_hold(dir.path());
        let first = settle(&mut store, &hold, false, false, 100, 30);
        assert_eq!(
            first,
            Settled {
                changed: true,
                pending: true,
                released_after: None
            }
        );
        let marked = store.get(&hold.id).unwrap().clone();
        assert_eq!(marked.unassigned_since, Some(100));
        let busy = settle(&mut store, &marked, false, true, 200, 30);
        assert_eq!(busy, Settled::default(), "a process on its GPU keeps it");
        // A clock stepped back releases nothing early and does not wrap.
        assert_eq!(
            settle(&mut store, &marked, false, false, 50, 30),
            Settled::default()
        );
        let gone = settle(&mut store, &marked, false, false, 130, 30);
        assert_eq!(gone.released_after, Some(30));
        assert!(store.get(&hold.id).is_none());
        // A pod has its devices again: the mark goes.
        let other = dir.path().join("b");
        std::fs::create_dir_all(&other).unwrap();
        let (mut store, hold) = store_with_a_kubernetes_hold(&other);
        settle(&mut store, &hold, false, false, 100, 30);
        let marked = store.get(&hold.id).unwrap().clone();
        let back = settle(&mut store, &marked, true, false, 200, 30);
        assert!(back.changed && back.released_after.is_none(), "{back:?}");
        assert_eq!(store.get(&hold.id).unwrap().unassigned_since, None);
    }

    // What broke: the pass decided on its copy from before PodResources was read; a hold the
    // kubelet made anew under the same id meanwhile (its clock reset) was released on the old
    // hold's clock, its spec removed under the new pod.
    #[test]
    fn a_hold_changed_during_the_pass_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, hold) = store_with_a_kubernetes_hold(dir.path());
        settle(&mut store, &hold, false, false, 100, 30);
        let pass_copy = store.get(&hold.id).unwrap().clone();
        // An Allocate of the same devices during the pass: the hold is made anew.
        let device: DeviceId = GPU.parse().unwrap();
        let placed = vec![Placed {
            gpu: device.gpu(),
            device,
        }];
        store
            .apply(hold.id.clone(), placed, true, &Topology::default())
            .unwrap();
        assert_eq!(
            settle(&mut store, &pass_copy, false, false, 500, 30),
            Settled::default()
        );
        assert_eq!(store.get(&hold.id).unwrap().unassigned_since, None);
    }
}
