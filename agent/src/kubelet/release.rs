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
use super::KubeState;
use super::{grpc, names, KubeletConfig};
use crate::cdi::{DeviceId, Hold, HoldOwner};
use crate::device::{PodAllocation, PodRef};
use crate::source::DeviceSource;

/// How often PodResources is read while a Kubernetes hold exists.
pub const POLL_EVERY: Duration = Duration::from_secs(1);

/// What PodResources `List` said of bcd's devices.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Listed {
    /// Every known device of bcd's resources that a container has, also one whose names are
    /// malformed: a release never hinges on a name.
    pub in_use: BTreeSet<DeviceId>,
    /// One record per container with known devices and valid names, for the labels.
    pub containers: Vec<PodAllocation>,
    /// Containers with known devices whose names are not valid Kubernetes names (see
    /// [`super::names`]): their devices count as in use, their names are not kept.
    pub dropped: u64,
}

/// PodResources `List`, read from `socket`: see [`read_list`].
///
/// # Errors
/// The sentence: the socket could not be reached or `List` failed.
pub async fn allocations(
    socket: &std::path::Path,
    known: impl Fn(&DeviceId) -> bool,
) -> Result<Listed, String> {
    let channel = grpc::dial(socket).await.map_err(|e| e.to_string())?;
    let mut client = PodResourcesListerClient::new(channel);
    let list = client
        .list(ListPodResourcesRequest {})
        .await
        .map_err(|s| format!("PodResources List failed: {}", s.message()))?
        .into_inner();
    Ok(read_list(&list, known))
}

/// The devices of bcd's resources that containers have, kept only where `known` says the
/// device is one of bcd's (offered, or in a Kubernetes hold): an answer naming 200,000 ids or
/// 1 MiB names costs what the node's own devices cost.
pub fn read_list(
    list: &super::proto::podresources::ListPodResourcesResponse,
    known: impl Fn(&DeviceId) -> bool,
) -> Listed {
    let prefix = format!("{DOMAIN}/");
    let mut out = Listed::default();
    for p in &list.pod_resources {
        for c in &p.containers {
            let mut devices: Vec<DeviceId> = Vec::new();
            let ids = c
                .devices
                .iter()
                .filter(|d| d.resource_name.starts_with(&prefix))
                .flat_map(|d| &d.device_ids)
                .filter_map(|id| id.parse::<DeviceId>().ok())
                .filter(|d| known(d));
            for device in ids {
                if !devices.contains(&device) {
                    devices.push(device);
                }
            }
            if devices.is_empty() {
                continue;
            }
            out.in_use.extend(devices.iter().cloned());
            let named = names::is_label(&p.namespace)
                && names::is_subdomain(&p.name)
                && names::is_label(&c.name);
            if !named {
                out.dropped += 1;
                continue;
            }
            out.containers.push(PodAllocation {
                devices,
                pod: PodRef {
                    namespace: p.namespace.clone(),
                    pod: p.name.clone(),
                    container: c.name.clone(),
                },
            });
        }
    }
    out
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
pub async fn pass<S: DeviceSource>(node: &S, kube: &KubeState, config: &KubeletConfig) {
    // A DRA claim's hold is never released here: its devices are not in the pods'
    // ContainerDevices, and only NodeUnprepareResources (or the DRA driver's stale claims'
    // pass, `dra::stale`) ends it.
    let kubernetes: Vec<Hold> = node
        .holds_now()
        .await
        .into_iter()
        .filter(|h| h.kubernetes && h.owner() != HoldOwner::Dra)
        .collect();
    if kubernetes.is_empty() {
        kube.set_problem(None);
        // No Kubernetes hold: no pod has one of bcd's devices, and no series names one.
        node.set_pod_allocations(Vec::new());
        return;
    }
    // bcd's devices: those offered now, and those of its Kubernetes holds (a GPU gone from
    // the inventory may still be a pod's).
    let offered: BTreeSet<DeviceId> = super::offer_now(node)
        .await
        .into_values()
        .flatten()
        .map(|o| o.id)
        .chain(kubernetes.iter().flat_map(|h| h.devices.iter().cloned()))
        .collect();
    let known = |d: &DeviceId| offered.contains(d);
    let assigned: BTreeSet<DeviceId> = match allocations(&config.pod_resources_socket, known).await
    {
        Ok(listed) => {
            kube.set_problem(None);
            if listed.dropped > 0 {
                kube.dropped_names(listed.dropped);
            }
            // The metrics' namespace/pod/container labels (see node::attribution).
            node.set_pod_allocations(listed.containers);
            listed.in_use
        }
        Err(e) => {
            kube.set_problem(Some(format!(
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
    let topology =
        crate::device::policy::Topology::from_inventory(&inventory, crate::device::id::MAX_SLOTS);
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
            kube.count(&resource_of(&hold, &inventory, node.gpu_slots()), |c| {
                c.releases += 1
            });
        }
    }
    if changed {
        node.converge_holds().await;
    }
}

/// Runs [`pass`] every [`POLL_EVERY`] for ever.
pub async fn run<S: DeviceSource>(node: Arc<S>, kube: Arc<KubeState>, config: KubeletConfig) {
    let mut every = tokio::time::interval(POLL_EVERY);
    loop {
        every.tick().await;
        pass(node.as_ref(), &kube, &config).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cdi::Holds;
    use crate::device::policy::{Placed, Topology};
    use crate::kubelet::proto::podresources as pr;

    const GPU: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";

    fn store_with_a_kubernetes_hold(dir: &std::path::Path) -> (Holds, Hold) {
        let mut store = Holds::load(dir).unwrap();
        let device: DeviceId = GPU.parse().unwrap();
        let placed = vec![Placed {
            gpu: device.gpu(),
            device,
        }];
        let hold = store
            .apply(
                "k8s-a".parse().unwrap(),
                placed,
                crate::cdi::HoldOwner::DevicePlugin,
                &Topology::default(),
            )
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
            .apply(
                hold.id.clone(),
                placed,
                crate::cdi::HoldOwner::DevicePlugin,
                &Topology::default(),
            )
            .unwrap();
        assert_eq!(
            settle(&mut store, &pass_copy, false, false, 500, 30),
            Settled::default()
        );
        assert_eq!(store.get(&hold.id).unwrap().unassigned_since, None);
    }

    fn container(name: &str, ids: &[&str]) -> pr::ContainerResources {
        pr::ContainerResources {
            name: name.into(),
            devices: vec![pr::ContainerDevices {
                resource_name: "bcd.dev/gpu".into(),
                device_ids: ids.iter().map(|s| (*s).to_owned()).collect(),
                topology: None,
            }],
            cpu_ids: vec![],
        }
    }

    fn pod(
        namespace: &str,
        name: &str,
        containers: Vec<pr::ContainerResources>,
    ) -> pr::PodResources {
        pr::PodResources {
            name: name.into(),
            namespace: namespace.into(),
            containers,
        }
    }

    // 1 MiB pod, namespace and container names gave a 135 MB /metrics and a 282 MB peak RSS,
    // and every id in an answer was kept, one record per device. Now only bcd's devices are
    // kept, one record per container, and a container whose names are not Kubernetes names
    // keeps its devices in use but not its names.
    #[test]
    fn podresources_keeps_only_bcds_devices_and_kubernetes_names_once_per_container() {
        const GPU0: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";
        const GPU1: &str = "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a";
        const STRANGER: &str = "GPU-00000000-0000-0000-0000-000000000000";
        let huge = "a".repeat(1 << 20);
        let many: Vec<String> = (0..200_000)
            .map(|n| format!("GPU-{n:08x}-0000-0000-0000-000000000000"))
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let list = pr::ListPodResourcesResponse {
            pod_resources: vec![
                pod(
                    "ml",
                    "trainer-0",
                    vec![container("cuda", &[GPU0, STRANGER, GPU0])],
                ),
                pod("ml", &huge, vec![container("cuda", &[GPU1])]),
                pod("other", "flood", vec![container("c", &many)]),
            ],
        };
        let known = |d: &DeviceId| [GPU0, GPU1].iter().any(|g| d.to_string() == *g);
        let listed = read_list(&list, known);
        let in_use: BTreeSet<String> = listed.in_use.iter().map(DeviceId::to_string).collect();
        assert_eq!(in_use, BTreeSet::from([GPU0.to_owned(), GPU1.to_owned()]));
        assert_eq!(listed.dropped, 1, "the pod with a 1 MiB name");
        assert_eq!(listed.containers.len(), 1, "{:?}", listed.containers);
        let kept = &listed.containers[0];
        assert_eq!(
            (
                kept.pod.namespace.as_str(),
                kept.pod.pod.as_str(),
                kept.pod.container.as_str()
            ),
            ("ml", "trainer-0", "cuda")
        );
        let devices: Vec<String> = kept.devices.iter().map(DeviceId::to_string).collect();
        assert_eq!(devices, [GPU0], "each device once");
    }
}
