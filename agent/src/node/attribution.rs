//! Who has each device, as the labels every per-GPU, per-MIG and per-slot series carries:
//! `hold` (a bcd hold), `vm` (a libvirt domain the GPU was given to), and `namespace`, `pod`,
//! `container` (a Kubernetes allocation). A device nobody has gets none of them.
//!
//! One [`Attribution`] is built for each scrape and each OTLP export from what the node knows
//! then: the hold store, the domains started through this node, and the Kubernetes
//! allocations. Those come in through three doors, one per source:
//!
//! - [`Attribution::add_holds`]: every device of every hold (the store's invariant means a
//!   device has at most one hold);
//! - [`Attribution::add_vm`]: a GPU given to a domain;
//! - [`Attribution::add_pod`]: **the Kubernetes hook.** The device plugins' PodResources
//!   reader hands the node its allocations with [`crate::node::shared::Node::set_pod_allocations`]
//!   (the whole list each time it reads PodResources, so a released pod's labels go with its
//!   next read); the node adds each one here.
//!
//! A series about a whole GPU carries the labels of whoever has the whole GPU; when the GPU
//! is shared instead (its slots or MIG devices held apart), each label lists every distinct
//! value among its parts, sorted and joined with `,` (`hold="a,b"`), so the GPU stays one
//! series while saying everyone whose work is on it. Per-MIG and per-slot series carry their
//! own device's labels only.
//!
//! This module is pure: it is handed the holds and the topology, and reads no file.

use std::collections::{BTreeMap, BTreeSet};

use bcd_protocol::GpuUuid;

use crate::device::id::DeviceId;
use crate::device::policy::Topology;
use crate::device::Hold;
use crate::device::{PodAllocation, PodRef};

/// The label names, in the order series carry them.
pub const HOLD: &str = "hold";
/// The libvirt domain's name.
pub const VM: &str = "vm";
/// A Kubernetes pod's namespace.
pub const NAMESPACE: &str = "namespace";
/// A Kubernetes pod's name.
pub const POD: &str = "pod";
/// A Kubernetes container's name.
pub const CONTAINER: &str = "container";

/// The label names, in order.
pub const LABELS: [&str; 5] = [HOLD, VM, NAMESPACE, POD, CONTAINER];

/// The OTLP attribute for each label of [`LABELS`], in the same order: OpenTelemetry's
/// semantic conventions for Kubernetes, and bcd's own names for the rest.
pub const OTLP_ATTRIBUTES: [&str; 5] = [
    "bcd.hold",
    "bcd.vm",
    "k8s.namespace.name",
    "k8s.pod.name",
    "k8s.container.name",
];

/// Who has one device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Claim {
    /// The GPU the device is on, when known (a `MIG-<uuid>` not in the inventory: `None`).
    gpu: Option<DeviceId>,
    hold: Option<String>,
    vm: Option<String>,
    pod: Option<PodRef>,
}

impl Claim {
    /// The values in [`LABELS`] order.
    fn values(&self) -> [Option<&str>; 5] {
        [
            self.hold.as_deref(),
            self.vm.as_deref(),
            self.pod.as_ref().map(|p| p.namespace.as_str()),
            self.pod.as_ref().map(|p| p.pod.as_str()),
            self.pod.as_ref().map(|p| p.container.as_str()),
        ]
    }
}

/// A device's attribution labels: `(name, value)` in [`LABELS`] order, only those with a
/// value. Values are raw; the text format's escaping is the renderer's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(Vec<(&'static str, String)>);

impl Labels {
    /// The pairs, in [`LABELS`] order.
    pub fn pairs(&self) -> &[(&'static str, String)] {
        &self.0
    }

    /// The same values under their OTLP attribute names.
    pub fn otlp(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.0.iter().map(|(name, value)| {
            let at = LABELS.iter().position(|l| l == name).unwrap_or(0);
            (OTLP_ATTRIBUTES[at], value.as_str())
        })
    }

    fn from_claims<'c>(claims: impl IntoIterator<Item = &'c Claim>) -> Self {
        let mut sets: [BTreeSet<&str>; 5] = Default::default();
        for claim in claims {
            for (set, value) in sets.iter_mut().zip(claim.values()) {
                set.extend(value);
            }
        }
        Self(
            LABELS
                .iter()
                .zip(sets)
                .filter(|(_, set)| !set.is_empty())
                .map(|(name, set)| (*name, set.into_iter().collect::<Vec<_>>().join(",")))
                .collect(),
        )
    }
}

/// Who has each device of the node, for one scrape or export.
#[derive(Debug, Clone, Default)]
pub struct Attribution {
    claims: BTreeMap<DeviceId, Claim>,
}

impl Attribution {
    /// Nobody has anything.
    pub fn new() -> Self {
        Self::default()
    }

    fn claim(&mut self, device: &DeviceId, gpu: Option<DeviceId>) -> &mut Claim {
        let claim = self.claims.entry(device.clone()).or_default();
        if claim.gpu.is_none() {
            claim.gpu = gpu;
        }
        claim
    }

    /// Every device of every hold: the hold's id, on the GPU the hold or `topology` places it.
    pub fn add_holds<'h>(
        &mut self,
        holds: impl IntoIterator<Item = &'h Hold>,
        topology: &Topology,
    ) {
        for hold in holds {
            for placed in topology.placed(hold) {
                self.claim(&placed.device, placed.gpu).hold = Some(hold.id.to_string());
            }
        }
    }

    /// A whole GPU given to the libvirt domain `domain`.
    pub fn add_vm(&mut self, gpu: &DeviceId, domain: &str) {
        self.claim(gpu, gpu.gpu()).vm = Some(domain.to_owned());
    }

    /// The Kubernetes hook: the devices are allocated to `pod`'s container; `topology` places
    /// a MIG device on its GPU. A later allocation of the same device replaces the earlier.
    pub fn add_pod(&mut self, allocation: &PodAllocation, topology: &Topology) {
        for device in &allocation.devices {
            let gpu = topology.gpu_of(device);
            self.claim(device, gpu).pod = Some(allocation.pod.clone());
        }
    }

    /// The labels of one device's own series (a MIG device's, a slot's): its own claim only.
    pub fn device(&self, device: &DeviceId) -> Labels {
        Labels::from_claims(self.claims.get(device))
    }

    /// The labels of a whole GPU's series: whoever has the whole GPU; when nobody does,
    /// every distinct value among its MIG devices' and slots' claims, joined.
    pub fn gpu(&self, uuid: &GpuUuid) -> Labels {
        let gpu = DeviceId::from(uuid);
        if let Some(whole) = self.claims.get(&gpu) {
            return Labels::from_claims([whole]);
        }
        Labels::from_claims(
            self.claims
                .iter()
                .filter(|(device, claim)| {
                    !matches!(device, DeviceId::Gpu(_)) && claim.gpu.as_ref() == Some(&gpu)
                })
                .map(|(_, claim)| claim),
        )
    }

    /// Every device somebody has, with its GPU (when known) and labels, in id order.
    pub fn claimed(&self) -> impl Iterator<Item = (&DeviceId, Option<&DeviceId>, Labels)> {
        self.claims
            .iter()
            .map(|(d, c)| (d, c.gpu.as_ref(), Labels::from_claims([c])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::policy::tests::{
        dev, hold, topology as with_slots, GPU0, GPU3, MIG_A, MIG_B,
    };

    fn topology() -> Topology {
        with_slots(4)
    }

    fn uuid(s: &str) -> GpuUuid {
        s.parse().unwrap()
    }

    /// The value of one label.
    fn value<'l>(labels: &'l Labels, name: &str) -> Option<&'l str> {
        labels
            .pairs()
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn a_device_nobody_has_has_no_labels() {
        let a = Attribution::new();
        assert!(a.gpu(&uuid(GPU0)).pairs().is_empty());
        assert!(a.device(&dev(MIG_A)).pairs().is_empty());
    }

    #[test]
    fn a_whole_gpu_hold_labels_the_gpu_and_no_other() {
        let t = topology();
        let mut a = Attribution::new();
        a.add_holds(&[hold("train-1", &[GPU0])], &t);
        assert_eq!(a.gpu(&uuid(GPU0)).pairs(), [(HOLD, "train-1".to_owned())]);
        assert!(a.gpu(&uuid(GPU3)).pairs().is_empty());
    }

    #[test]
    fn a_shared_gpu_lists_every_holder_of_its_parts_and_each_part_its_own() {
        let t = topology();
        let mut a = Attribution::new();
        let s0 = format!("{GPU0}::0");
        let s1 = format!("{GPU0}::1");
        a.add_holds(
            &[hold("b", &[&s1]), hold("a", &[&s0]), hold("m", &[MIG_B])],
            &t,
        );
        assert_eq!(value(&a.gpu(&uuid(GPU0)), HOLD), Some("a,b"));
        assert_eq!(value(&a.device(&dev(&s0)), HOLD), Some("a"));
        // The MIG device is placed on its GPU through the topology.
        assert_eq!(value(&a.gpu(&uuid(GPU3)), HOLD), Some("m"));
        assert_eq!(value(&a.device(&dev(MIG_B)), HOLD), Some("m"));
        assert!(a.device(&dev(MIG_A)).pairs().is_empty());
    }

    // The Kubernetes hook, tested with a hand-made allocation until the device plugins fill
    // it from PodResources.
    #[test]
    fn a_pod_allocation_labels_its_device_in_order_with_the_otlp_names() {
        let t = topology();
        let mut a = Attribution::new();
        a.add_pod(
            &PodAllocation {
                devices: vec![dev(MIG_A)],
                pod: PodRef {
                    namespace: "ml".into(),
                    pod: "trainer-0".into(),
                    container: "cuda".into(),
                },
            },
            &t,
        );
        a.add_vm(&dev(GPU0), "win11");
        let labels = a.gpu(&uuid(GPU3));
        let names: Vec<&str> = labels.pairs().iter().map(|(n, _)| *n).collect();
        assert_eq!(names, [NAMESPACE, POD, CONTAINER]);
        assert_eq!(value(&labels, POD), Some("trainer-0"));
        let otlp: Vec<(&str, &str)> = labels.otlp().collect();
        assert_eq!(
            otlp,
            [
                ("k8s.namespace.name", "ml"),
                ("k8s.pod.name", "trainer-0"),
                ("k8s.container.name", "cuda")
            ]
        );
        assert_eq!(a.gpu(&uuid(GPU0)).pairs(), [(VM, "win11".to_owned())]);
        assert_eq!(a.claimed().count(), 2);
    }
}
