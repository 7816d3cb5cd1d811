//! What each device plugin offers, computed without I/O: the resources, their devices with
//! `Healthy`/`Unhealthy` and NUMA node, the preferred allocation, and the CDI names an
//! allocation answers with.
//!
//! The health rule a plugin streams: a device is `Healthy` when its GPU takes work
//! ([`crate::kubelet::gpus_taking_work`], bcd's healthy rule), is not passed through to a VM,
//! and no hold other than a Kubernetes binding of exactly this device has it or a device that
//! conflicts with it ([`crate::device::policy::conflict`]). So a GPU that a hold, a VM or another
//! resource's allocation has is never allocatable, and a GPU whose reset left it healthy is
//! `Healthy` again.

use std::collections::{BTreeMap, BTreeSet};

use bcd_protocol::GpuUuid;

use crate::cdi::vendor::{find_device, DeviceCatalog, VendorSpec};
use crate::cdi::{render::HOLD_KIND, Hold, HoldOwner};
use crate::device::id::{DeviceId, MigUuid, SlotIndex};
use crate::device::policy::{conflict, Placed, Topology};
use crate::inventory::document::Inventory;

/// The domain of bcd's extended resources.
pub(crate) const DOMAIN: &str = "bcd.dev";
/// Whole GPUs not in MIG mode.
pub(crate) const GPU_RESOURCE: &str = "bcd.dev/gpu";
/// Slots, when the node offers them.
pub(crate) const SLOT_RESOURCE: &str = "bcd.dev/gpu-slot";
/// The prefix of one resource per MIG profile, `bcd.dev/mig-1g.10gb`.
pub(crate) const MIG_RESOURCE_PREFIX: &str = "bcd.dev/mig-";
/// The device plugin API's health words.
pub(crate) const HEALTHY: &str = "Healthy";
/// See [`HEALTHY`].
pub(crate) const UNHEALTHY: &str = "Unhealthy";

/// An extended resource name bcd serves: `bcd.dev/gpu`, `bcd.dev/gpu-slot` or
/// `bcd.dev/mig-<profile>` with a profile of `[a-z0-9.]` (what `nvidia-smi` names them).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Resource(String);

/// Why a name is not one of bcd's resources.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a bcd resource (bcd.dev/gpu, bcd.dev/gpu-slot or bcd.dev/mig-<profile>)")]
pub(crate) struct ResourceError(String);

impl std::str::FromStr for Resource {
    type Err = ResourceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = s == GPU_RESOURCE
            || s == SLOT_RESOURCE
            || s.strip_prefix(MIG_RESOURCE_PREFIX).is_some_and(|p| {
                !p.is_empty()
                    && p.len() <= 32
                    && p.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.')
            });
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(ResourceError(s.to_owned()))
        }
    }
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Resource {
    /// The resource name.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The plugin's socket file name in the plugin directory: `bcd-gpu.sock`,
    /// `bcd-gpu-slot.sock`, `bcd-mig-1g.10gb.sock`.
    pub(crate) fn socket_name(&self) -> String {
        let short = self.0.strip_prefix("bcd.dev/").unwrap_or(&self.0);
        format!("bcd-{short}.sock")
    }

    /// The resource of a MIG profile (`1g.10gb`), when the profile makes a valid name.
    pub(crate) fn of_mig_profile(profile: &str) -> Option<Self> {
        format!("{MIG_RESOURCE_PREFIX}{}", profile.to_ascii_lowercase())
            .parse()
            .ok()
    }
}

/// One device as a plugin streams it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Offered {
    /// bcd's device id (GPU UUID, MIG device UUID, slot id).
    pub id: DeviceId,
    /// The GPU it is on.
    pub gpu: DeviceId,
    /// Whether it may be allocated now.
    pub healthy: bool,
    /// The GPU's NUMA node, when the inventory knows it.
    pub numa: Option<u32>,
}

/// Every resource of the node and its devices, in id order.
pub(crate) type Offer = BTreeMap<Resource, Vec<Offered>>;

/// What the node offers Kubernetes now. `takes_work` is the healthy verdict per GPU UUID
/// (a GPU missing from it does not take work).
pub(crate) fn offer(
    inventory: &Inventory,
    slots_per_gpu: u32,
    holds: &[Hold],
    takes_work: &BTreeMap<GpuUuid, bool>,
) -> Offer {
    let topology = Topology::from_inventory(inventory, slots_per_gpu);
    let mut offer: Offer = BTreeMap::new();
    let placed_holds: Vec<(&Hold, Vec<Placed>)> =
        holds.iter().map(|h| (h, topology.placed(h))).collect();
    for gpu in &inventory.gpu.gpus {
        let uuid = DeviceId::from(&gpu.uuid);
        let Some(physical) = topology.gpu(&uuid) else {
            continue;
        };
        let gpu_ok =
            takes_work.get(&gpu.uuid).copied().unwrap_or(false) && !physical.passed_through;
        let free = |device: &DeviceId| {
            let me = Placed {
                device: device.clone(),
                gpu: Some(uuid.clone()),
            };
            !placed_holds.iter().any(|(hold, placed)| {
                placed.iter().any(|theirs| {
                    conflict(&me, theirs)
                        && !(hold.owner() == HoldOwner::DevicePlugin && &theirs.device == device)
                })
            })
        };
        let mut add = |resource: Resource, id: DeviceId| {
            let healthy = gpu_ok && free(&id);
            offer.entry(resource).or_default().push(Offered {
                id,
                gpu: uuid.clone(),
                healthy,
                numa: gpu.numa_node,
            });
        };
        if physical.mig_mode {
            for mig in gpu.mig.iter().flat_map(|m| &m.devices) {
                let (Some(id), Some(resource)) = (
                    mig.uuid.as_ref().map(DeviceId::from),
                    mig.profile.as_deref().and_then(Resource::of_mig_profile),
                ) else {
                    continue;
                };
                add(resource, id);
            }
        } else {
            add(Resource(GPU_RESOURCE.to_owned()), uuid.clone());
            for n in 0..slots_per_gpu.min(crate::device::id::MAX_SLOTS) {
                if let Some(index) = SlotIndex::new(n) {
                    let gpu = gpu.uuid.clone();
                    add(
                        Resource(SLOT_RESOURCE.to_owned()),
                        DeviceId::Slot { gpu, index },
                    );
                }
            }
        }
    }
    for devices in offer.values_mut() {
        devices.sort_by(|a, b| a.id.cmp(&b.id));
    }
    offer
}

/// How many NVLinks join two GPUs in `nvidia-smi topo -m`'s words (`NV18`: 18), 0 for
/// anything else (`SYS`, `PIX`, ...).
fn nvlinks(word: &str) -> u32 {
    word.strip_prefix("NV")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The devices a container of `size` devices should get, from `available`, with every
/// device of `must` included:
/// - whole GPUs and MIG devices: the set whose GPUs have the most NVLinks among them (the
///   topology matrix), then the fewest NUMA nodes, then the lowest ids;
/// - slots: spread over GPUs, the least used GPU first (used: slots of it not available).
///
/// Fewer than `size` are returned only when fewer are available.
pub(crate) fn preferred(
    inventory: &Inventory,
    available: &[DeviceId],
    must: &[DeviceId],
    size: usize,
    all_slots: &[DeviceId],
) -> Vec<DeviceId> {
    let mut chosen: Vec<DeviceId> = must
        .iter()
        .filter(|d| available.contains(d))
        .cloned()
        .collect();
    chosen.dedup();
    let rest: Vec<DeviceId> = {
        let mut r: Vec<DeviceId> = available
            .iter()
            .filter(|d| !chosen.contains(d))
            .cloned()
            .collect();
        r.sort();
        r.dedup();
        r
    };
    if chosen.len() >= size {
        chosen.truncate(size.max(must.len()));
        return chosen;
    }
    if rest.iter().all(|d| matches!(d, DeviceId::Slot { .. })) && !rest.is_empty() {
        return spread_slots(chosen, rest, size, all_slots);
    }
    let gpu_of = |d: &DeviceId| -> Option<&crate::inventory::document::Gpu> {
        let uuid = d.gpu().or_else(|| {
            inventory.gpu.gpus.iter().find_map(|g| {
                g.mig
                    .iter()
                    .flat_map(|m| &m.devices)
                    .any(|m| m.uuid.as_ref().map(MigUuid::device) == Some(d))
                    .then(|| DeviceId::from(&g.uuid))
            })
        })?;
        inventory
            .gpu
            .gpus
            .iter()
            .find(|g| DeviceId::from(&g.uuid) == uuid)
    };
    let links = |a: &DeviceId, b: &DeviceId| -> u32 {
        match (gpu_of(a), gpu_of(b)) {
            (Some(ga), Some(gb)) if ga.uuid != gb.uuid => {
                ga.topology.get(&gb.uuid).map_or(0, |w| nvlinks(w))
            }
            _ => 0,
        }
    };
    // Greedy: add the device that adds the most links to the chosen set, then the one on a
    // NUMA node already chosen, then the lowest id. Optimal on the 8-GPU HGX boards (every
    // pair is NV18) and close elsewhere; an exhaustive search is exponential in the size.
    while chosen.len() < size {
        let numas: BTreeSet<Option<u32>> = chosen
            .iter()
            .map(|d| gpu_of(d).and_then(|g| g.numa_node))
            .collect();
        let best = rest
            .iter()
            .filter(|d| !chosen.contains(d))
            .max_by(|a, b| {
                let score = |d: &DeviceId| {
                    let l: u32 = chosen.iter().map(|c| links(c, d)).sum();
                    let same_numa =
                        chosen.is_empty() || numas.contains(&gpu_of(d).and_then(|g| g.numa_node));
                    (l, same_numa)
                };
                score(a).cmp(&score(b)).then_with(|| b.cmp(a))
            })
            .cloned();
        match best {
            Some(d) => chosen.push(d),
            None => break,
        }
    }
    chosen
}

fn spread_slots(
    mut chosen: Vec<DeviceId>,
    rest: Vec<DeviceId>,
    size: usize,
    all_slots: &[DeviceId],
) -> Vec<DeviceId> {
    let mut used: BTreeMap<DeviceId, usize> = BTreeMap::new();
    for s in all_slots {
        if let Some(g) = s.gpu() {
            let entry = used.entry(g).or_default();
            if !rest.contains(s) {
                *entry += 1;
            }
        }
    }
    for c in &chosen {
        if let Some(g) = c.gpu() {
            *used.entry(g).or_default() += 1;
        }
    }
    let mut rest = rest;
    while chosen.len() < size && !rest.is_empty() {
        let pick = rest
            .iter()
            .enumerate()
            .min_by_key(|(_, d)| {
                (
                    d.gpu()
                        .map_or(usize::MAX, |g| used.get(&g).copied().unwrap_or(0)),
                    (*d).clone(),
                )
            })
            .map(|(i, _)| i);
        let Some(i) = pick else { break };
        let d = rest.remove(i);
        if let Some(g) = d.gpu() {
            *used.entry(g).or_default() += 1;
        }
        chosen.push(d);
    }
    chosen
}

/// The fully qualified CDI name a container gets for `device` of a Kubernetes binding:
/// NVIDIA's own (`nvidia.com/gpu=<name>`) where NVIDIA's spec names the device (a slot: its
/// GPU), otherwise bcd's (`bcd.dev/gpu=<id>`, from the binding's own spec).
pub fn cdi_name(device: &DeviceId, vendor: &[VendorSpec], catalog: &DeviceCatalog) -> String {
    vendor
        .iter()
        .find_map(|v| {
            find_device(&v.spec, device, catalog).map(|d| format!("{}={}", v.spec.kind, d.name))
        })
        .unwrap_or_else(|| format!("{HOLD_KIND}={}", device.cdi_name()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::document::{Gpu, GpuSection, Mig, MigDevice};

    const G0: &str = "GPU-11111111-1111-1111-1111-111111111111";
    const G1: &str = "GPU-22222222-2222-2222-2222-222222222222";
    const G2: &str = "GPU-33333333-3333-3333-3333-333333333333";
    const M1: &str = "MIG-44444444-4444-4444-4444-444444444444";

    fn dev(s: &str) -> DeviceId {
        s.parse().unwrap()
    }

    fn inventory() -> Inventory {
        let gpu = |i: u32, uuid: &str, numa: u32| Gpu {
            numa_node: Some(numa),
            ..Gpu::new(i, uuid.parse().unwrap())
        };
        let mut g0 = gpu(0, G0, 0);
        let mut g1 = gpu(1, G1, 1);
        let mut g2 = gpu(2, G2, 0);
        // G0-G1 joined by NVLink, G2 alone.
        g0.topology.insert(G1.parse().unwrap(), "NV18".into());
        g1.topology.insert(G0.parse().unwrap(), "NV18".into());
        g0.topology.insert(G2.parse().unwrap(), "SYS".into());
        g2.topology.insert(G0.parse().unwrap(), "SYS".into());
        let mut g3 = gpu(3, "GPU-55555555-5555-5555-5555-555555555555", 1);
        g3.mig = Some(Mig {
            mode: Some(true),
            devices: vec![MigDevice {
                uuid: Some(M1.parse().unwrap()),
                profile: Some("3g.40gb".into()),
                ..MigDevice::default()
            }],
            ..Mig::default()
        });
        Inventory::new(GpuSection {
            gpus: vec![g0, g1, g2, g3],
            ..GpuSection::default()
        })
    }

    fn all_healthy(inv: &Inventory) -> BTreeMap<GpuUuid, bool> {
        inv.gpu
            .gpus
            .iter()
            .map(|g| (g.uuid.clone(), true))
            .collect()
    }

    fn hold(id: &str, devices: &[&str], kubernetes: bool) -> Hold {
        Hold {
            id: id.parse().unwrap(),
            devices: devices.iter().map(|d| dev(d)).collect(),
            kubernetes,
            owner: None,
            gpus: Default::default(),
            unassigned_since: None,
            created_at: None,
            claim: None,
        }
    }

    fn health_of(offer: &Offer, resource: &str, id: &str) -> bool {
        offer[&resource.parse::<Resource>().unwrap()]
            .iter()
            .find(|d| d.id == dev(id))
            .unwrap()
            .healthy
    }

    #[test]
    fn resources_per_kind_and_mig_profile() {
        let inv = inventory();
        let offer = offer(&inv, 2, &[], &all_healthy(&inv));
        let names: Vec<&str> = offer.keys().map(Resource::as_str).collect();
        assert_eq!(
            names,
            ["bcd.dev/gpu", "bcd.dev/gpu-slot", "bcd.dev/mig-3g.40gb"]
        );
        assert_eq!(
            offer[&GPU_RESOURCE.parse().unwrap()].len(),
            3,
            "not the MIG-mode GPU"
        );
        assert_eq!(offer[&SLOT_RESOURCE.parse().unwrap()].len(), 6);
        let gpu1 = &offer[&GPU_RESOURCE.parse().unwrap()][1];
        assert_eq!((gpu1.numa, gpu1.healthy), (Some(1), true));
        assert_eq!(
            "bcd.dev/mig-3g.40gb"
                .parse::<Resource>()
                .unwrap()
                .socket_name(),
            "bcd-mig-3g.40gb.sock"
        );
        assert!("bcd.dev/mig-../x".parse::<Resource>().is_err());
        assert!("nvidia.com/gpu".parse::<Resource>().is_err());
    }

    // What broke (the incumbent's rule): a device that a non-Kubernetes hold had, or that
    // another resource's allocation shared a GPU with, was offered as allocatable.
    #[test]
    fn a_device_held_outside_kubernetes_or_sharing_a_held_gpu_is_unhealthy() {
        let inv = inventory();
        let slot = format!("{G1}::0");
        let holds = [hold("job", &[G0], false), hold("k8s-a", &[&slot], true)];
        let offer = offer(&inv, 2, &holds, &all_healthy(&inv));
        assert!(!health_of(&offer, GPU_RESOURCE, G0), "held by a bcd hold");
        assert!(!health_of(&offer, SLOT_RESOURCE, &format!("{G0}::1")));
        assert!(
            health_of(&offer, SLOT_RESOURCE, &slot),
            "its own allocation"
        );
        assert!(
            health_of(&offer, SLOT_RESOURCE, &format!("{G1}::1")),
            "slots share"
        );
        assert!(
            !health_of(&offer, GPU_RESOURCE, G1),
            "a slot of it is allocated"
        );
        assert!(health_of(&offer, GPU_RESOURCE, G2));
    }

    // A device a DRA claim had was offered to the device plugins as their own allocation
    // (the rule looked at `kubernetes` alone), so the kubelet could hand one GPU out twice.
    #[test]
    fn a_device_a_dra_claim_has_is_not_offered_to_the_device_plugins() {
        let inv = inventory();
        let claimed = hold("dra-3f0c", &[G0], true);
        assert_eq!(claimed.owner(), HoldOwner::Dra);
        let offer = offer(&inv, 2, &[claimed], &all_healthy(&inv));
        assert!(!health_of(&offer, GPU_RESOURCE, G0));
        assert!(!health_of(&offer, SLOT_RESOURCE, &format!("{G0}::0")));
        assert!(health_of(&offer, GPU_RESOURCE, G1));
    }

    #[test]
    fn an_unhealthy_or_passed_through_gpu_is_unhealthy_everywhere() {
        let mut inv = inventory();
        let mut verdict = all_healthy(&inv);
        verdict.insert(G2.parse().unwrap(), false);
        inv.gpu.gpus[0].passed_through = true;
        let offer = offer(&inv, 1, &[], &verdict);
        assert!(!health_of(&offer, GPU_RESOURCE, G2));
        assert!(!health_of(&offer, SLOT_RESOURCE, &format!("{G2}::0")));
        assert!(!health_of(&offer, GPU_RESOURCE, G0));
        assert!(health_of(&offer, GPU_RESOURCE, G1));
    }

    #[test]
    fn preferred_gpus_follow_nvlink_then_numa() {
        let inv = inventory();
        let all = [dev(G0), dev(G1), dev(G2)];
        assert_eq!(preferred(&inv, &all, &[], 2, &[]), [dev(G0), dev(G1)]);
        assert_eq!(
            preferred(&inv, &all, &[dev(G2)], 2, &[]),
            [dev(G2), dev(G0)]
        );
        assert_eq!(preferred(&inv, &all[1..], &[], 3, &[]).len(), 2);
    }

    #[test]
    fn preferred_slots_spread_least_used_first() {
        let inv = inventory();
        let slots: Vec<DeviceId> = [G0, G1]
            .iter()
            .flat_map(|g| (0..2).map(move |n| dev(&format!("{g}::{n}"))))
            .collect();
        // G0's slot 0 is in use: G1 is less used.
        let available: Vec<DeviceId> = slots[1..].to_vec();
        let got = preferred(&inv, &available, &[], 2, &slots);
        assert_eq!(got, [dev(&format!("{G1}::0")), dev(&format!("{G0}::1"))]);
    }
}
