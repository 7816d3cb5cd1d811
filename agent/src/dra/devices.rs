//! The node's devices as the DRA driver names and describes them in its ResourceSlices, and
//! which of them it offers now. Pure: the inventory, the GPUs' device minors, the holds and
//! the verdicts come in; nothing is read here.
//!
//! Names (DNS labels, stable across restarts of bcd and of the host while the hardware and
//! the MIG layout stay):
//!
//! | device | name | attributes beside the common ones |
//! | --- | --- | --- |
//! | whole GPU not in MIG mode | `gpu-<minor>` | `type=gpu`, `uuid` |
//! | MIG device | `gpu-<minor>-mig-<gi>-<ci>` (GPU instance and compute instance ids) | `type=mig`, `uuid`, `parentUUID`, `profile` |
//! | slot `n` of a GPU (`bcd node --gpu-slots`) | `gpu-<minor>-slot-<n>` | `type=slot`, `parentUUID`, `slot` |
//!
//! `<minor>` is the GPU's device minor (`/dev/nvidia<minor>`), as NVIDIA's own DRA driver
//! names GPUs. A GPU without one (WSL's paravirtual GPU has no `/proc/driver/nvidia`) is named
//! by its UUID instead: `gpu-<uuid without GPU->`, as stable and still a DNS label.
//!
//! The common attributes, in the `gpu.bcd.dev` domain with NVIDIA's keys so that CEL
//! selectors written for `gpu.nvidia.com` port by changing the domain: `productName`,
//! `architecture` (bcd's lower-case name), `driverVersion`, `cudaDriverVersion` and
//! `cudaComputeCapability` (semantic versions as the API server checks them: no leading
//! zeros, three parts), `resource.kubernetes.io/pciBusID` (the kernel's form,
//! `0000:18:00.0`). Capacity `memory` in bytes (a slot shows its GPU's, shared with the
//! GPU's other slots).
//!
//! A GPU configured for slots is offered as its slots *instead of* the whole GPU (never
//! both: without shared counters the scheduler would hand the GPU out twice); a GPU in MIG
//! mode offers its MIG devices and no slots.

use std::collections::{BTreeMap, BTreeSet};

use bcd_protocol::GpuUuid;

use crate::device::id::{DeviceId, SlotIndex, MAX_SLOTS};
use crate::device::policy::{conflict, Placed, Topology};
use crate::device::{Hold, HoldOwner};
use crate::inventory::document::Inventory;

/// The most attributes and capacities one device may have in a ResourceSlice.
pub const MAX_ATTRIBUTES_AND_CAPACITIES: usize = 32;
/// The longest string or version attribute value the API server takes.
pub const MAX_ATTRIBUTE_VALUE_LEN: usize = 64;
/// The standard attribute of a device's PCI address.
pub const PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";

/// One attribute value, as `resource.k8s.io/v1` types them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Attribute {
    /// `{"string": ...}`.
    String(String),
    /// `{"version": ...}`: a semantic version.
    Version(String),
    /// `{"int": ...}`.
    Int(i64),
}

/// One device of the driver: its name in the pool, the bcd device it stands for, and how it
/// is described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraDevice {
    /// A DNS label, unique in the pool.
    pub name: String,
    /// The device a claim of it holds.
    pub id: DeviceId,
    /// The GPU it is on.
    pub gpu: GpuUuid,
    /// Attribute name (unqualified: the driver's domain) to value.
    pub attributes: BTreeMap<String, Attribute>,
    /// Capacity name to value in its unit (`memory`: bytes).
    pub capacity: BTreeMap<String, u64>,
}

/// Whether `s` is a DNS label (RFC 1123): 1 to 63 of `a-z`, `0-9`, `-`, starting and ending
/// with a letter or digit.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// `v` as a semantic version the API server accepts: numeric parts without leading zeros,
/// padded to three (`535.104.05` → `535.104.5`, `9.0` → `9.0.0`); `None` for anything that is
/// not one to three dot-separated numbers.
pub fn semver(v: &str) -> Option<String> {
    let parts: Vec<&str> = v.trim().split('.').collect();
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    let mut numbers: Vec<u64> = Vec::with_capacity(3);
    for p in parts {
        if p.is_empty() || p.len() > 18 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        numbers.push(p.parse().ok()?);
    }
    numbers.resize(3, 0);
    Some(format!("{}.{}.{}", numbers[0], numbers[1], numbers[2]))
}

/// The prefix a GPU's device names start with: `gpu-<minor>`, or `gpu-<uuid body>` without a
/// minor.
pub fn gpu_name(uuid: &GpuUuid, minor: Option<u32>) -> String {
    match minor {
        Some(m) => format!("gpu-{m}"),
        None => format!(
            "gpu-{}",
            uuid.as_str()
                .trim_start_matches("GPU-")
                .to_ascii_lowercase()
        ),
    }
}

fn text(value: Option<&str>) -> Option<Attribute> {
    value
        .filter(|v| !v.is_empty() && v.len() <= MAX_ATTRIBUTE_VALUE_LEN)
        .map(|v| Attribute::String(v.to_owned()))
}

fn version(value: Option<&str>) -> Option<Attribute> {
    value.and_then(semver).map(Attribute::Version)
}

/// Every device the driver would publish for `inventory`, in name order, with `slots` slots
/// per GPU not in MIG mode (0: whole GPUs). `minors` maps a GPU to its device minor.
pub fn devices(
    inventory: &Inventory,
    minors: &BTreeMap<GpuUuid, u32>,
    slots: u32,
) -> Vec<DraDevice> {
    let section = &inventory.gpu;
    let mut out = Vec::new();
    for gpu in &section.gpus {
        let base = gpu_name(&gpu.uuid, minors.get(&gpu.uuid).copied());
        let mut common: BTreeMap<String, Attribute> = [
            ("productName", text(gpu.name.as_deref())),
            ("architecture", text(gpu.architecture.as_deref())),
            ("driverVersion", version(section.driver_version.as_deref())),
            (
                "cudaDriverVersion",
                version(section.cuda_driver_version.as_deref()),
            ),
            (
                "cudaComputeCapability",
                version(gpu.compute_capability.as_deref()),
            ),
            (
                PCI_BUS_ID,
                gpu.address().map(|a| Attribute::String(a.to_string())),
            ),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_owned(), v?)))
        .collect();
        let memory = |mib: Option<u64>| -> BTreeMap<String, u64> {
            mib.map(|m| ("memory".to_owned(), m.saturating_mul(1024 * 1024)))
                .into_iter()
                .collect()
        };
        let mig_mode = gpu.mig.as_ref().and_then(|m| m.mode).unwrap_or(false);
        let whole = DeviceId::from(&gpu.uuid);
        if mig_mode {
            for mig in gpu.mig.iter().flat_map(|m| &m.devices) {
                let (Some(uuid), Some(gi), Some(ci)) = (&mig.uuid, mig.gi, mig.ci) else {
                    continue;
                };
                let mut attributes = common.clone();
                attributes.insert("type".into(), Attribute::String("mig".into()));
                attributes.insert("uuid".into(), Attribute::String(uuid.to_string()));
                attributes.insert(
                    "parentUUID".into(),
                    Attribute::String(gpu.uuid.as_str().into()),
                );
                if let Some(p) = text(mig.profile.as_deref()) {
                    attributes.insert("profile".into(), p);
                }
                out.push(DraDevice {
                    name: format!("{base}-mig-{gi}-{ci}"),
                    id: uuid.device().clone(),
                    gpu: gpu.uuid.clone(),
                    attributes,
                    capacity: memory(mig.memory_total_mib),
                });
            }
        } else if slots > 0 {
            for n in 0..slots.min(MAX_SLOTS) {
                let Some(index) = SlotIndex::new(n) else {
                    continue;
                };
                let id = DeviceId::Slot {
                    gpu: gpu.uuid.clone(),
                    index,
                };
                let mut attributes = common.clone();
                attributes.insert("type".into(), Attribute::String("slot".into()));
                attributes.insert(
                    "parentUUID".into(),
                    Attribute::String(gpu.uuid.as_str().into()),
                );
                attributes.insert("slot".into(), Attribute::Int(i64::from(n)));
                out.push(DraDevice {
                    name: format!("{base}-slot-{n}"),
                    id,
                    gpu: gpu.uuid.clone(),
                    attributes,
                    capacity: memory(gpu.memory_total_mib),
                });
            }
        } else {
            common.insert("type".into(), Attribute::String("gpu".into()));
            common.insert("uuid".into(), Attribute::String(gpu.uuid.as_str().into()));
            out.push(DraDevice {
                name: base,
                id: whole,
                gpu: gpu.uuid.clone(),
                attributes: common,
                capacity: memory(gpu.memory_total_mib),
            });
        }
    }
    out.retain(|d| {
        is_dns_label(&d.name)
            && d.attributes.len() + d.capacity.len() <= MAX_ATTRIBUTES_AND_CAPACITIES
    });
    out.sort_by(|a, b| a.name.cmp(&b.name));
    let mut seen = BTreeSet::new();
    out.retain(|d| seen.insert(d.name.clone()));
    out
}

/// Why a device is not offered now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotOffered {
    /// Its GPU's verdict says it takes no work (or there is none).
    NotSchedulable,
    /// A step of the node's (a reset, a vfio step) runs on its GPU.
    Claimed,
    /// Its GPU is on `vfio-pci`.
    PassedThrough,
    /// Another owner's hold (an operator, a VM's GPU, a device plugin, another claim's
    /// device on the same GPU) conflicts with it.
    Held,
}

/// Whether `device` is offered now, and why not. A device a DRA claim holds itself is always
/// offered: the scheduler knows it is allocated from the claim, and dropping it would make
/// the claim's allocation dangle.
pub fn offered(
    device: &DraDevice,
    topology: &Topology,
    holds: &[Hold],
    takes_work: &BTreeMap<GpuUuid, bool>,
    claimed: &[DeviceId],
) -> Result<(), NotOffered> {
    let claims_it = holds
        .iter()
        .any(|h| h.owner() == HoldOwner::Dra && h.devices.contains(&device.id));
    if claims_it {
        return Ok(());
    }
    let gpu = DeviceId::from(&device.gpu);
    if topology.gpu(&gpu).is_some_and(|g| g.passed_through) {
        return Err(NotOffered::PassedThrough);
    }
    if claimed.contains(&gpu) {
        return Err(NotOffered::Claimed);
    }
    if !takes_work.get(&device.gpu).copied().unwrap_or(false) {
        return Err(NotOffered::NotSchedulable);
    }
    let me = Placed {
        device: device.id.clone(),
        gpu: Some(gpu),
    };
    let held = holds.iter().any(|h| {
        topology
            .placed(h)
            .iter()
            .any(|theirs| conflict(&me, theirs))
    });
    if held {
        return Err(NotOffered::Held);
    }
    Ok(())
}

/// The devices of `all` offered now (see [`offered`]), in their order.
pub fn offer(
    all: &[DraDevice],
    topology: &Topology,
    holds: &[Hold],
    takes_work: &BTreeMap<GpuUuid, bool>,
    claimed: &[DeviceId],
) -> Vec<DraDevice> {
    all.iter()
        .filter(|d| offered(d, topology, holds, takes_work, claimed).is_ok())
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::document::{Gpu, GpuSection, Mig, MigDevice};

    const G0: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";
    const G1: &str = "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a";
    const M1: &str = "MIG-65db3e42-f991-a575-c20e-8350d31e437c";

    fn uuid(s: &str) -> GpuUuid {
        s.parse().unwrap()
    }

    /// GPU 0 whole (minor 0, at 0000:18:00.0), GPU 1 in MIG mode with one MIG device (minor 3).
    fn inventory() -> Inventory {
        let mut g0 = Gpu::new(0, uuid(G0));
        g0.name = Some("NVIDIA H100 80GB HBM3".into());
        g0.architecture = Some("hopper".into());
        g0.compute_capability = Some("9.0".into());
        g0.memory_total_mib = Some(81559);
        g0.bus_id = Some("00000000:18:00.0".parse().unwrap());
        let mut g1 = Gpu::new(1, uuid(G1));
        g1.mig = Some(Mig {
            mode: Some(true),
            devices: vec![MigDevice {
                uuid: Some(M1.parse().unwrap()),
                profile: Some("3g.40gb".into()),
                gi: Some(2),
                ci: Some(0),
                memory_total_mib: Some(40192),
            }],
            ..Mig::default()
        });
        let mut inv = Inventory::new(GpuSection {
            gpus: vec![g0, g1],
            ..GpuSection::default()
        });
        inv.gpu.driver_version = Some("535.104.05".into());
        inv.gpu.cuda_driver_version = Some("12.2".into());
        inv
    }

    fn minors() -> BTreeMap<GpuUuid, u32> {
        [(uuid(G0), 0), (uuid(G1), 3)].into_iter().collect()
    }

    fn names(devices: &[DraDevice]) -> Vec<&str> {
        devices.iter().map(|d| d.name.as_str()).collect()
    }

    #[test]
    fn versions_are_semantic_without_leading_zeros() {
        for (given, want) in [
            ("535.104.05", Some("535.104.5")),
            ("570.133.20", Some("570.133.20")),
            ("9.0", Some("9.0.0")),
            ("12", Some("12.0.0")),
            ("010.0", Some("10.0.0")),
            ("", None),
            ("1.2.3.4", None),
            ("v1.2", None),
            ("1..2", None),
            ("N/A", None),
        ] {
            assert_eq!(semver(given).as_deref(), want, "{given:?}");
        }
    }

    #[test]
    fn whole_gpus_and_mig_devices_are_named_by_minor_and_instance_ids() {
        let all = devices(&inventory(), &minors(), 0);
        assert_eq!(names(&all), ["gpu-0", "gpu-3-mig-2-0"]);
        let gpu = &all[0];
        let s = |v: &str| Attribute::String(v.into());
        assert_eq!(gpu.attributes["type"], s("gpu"));
        assert_eq!(gpu.attributes["uuid"], s(G0));
        assert_eq!(gpu.attributes["productName"], s("NVIDIA H100 80GB HBM3"));
        assert_eq!(
            gpu.attributes["driverVersion"],
            Attribute::Version("535.104.5".into())
        );
        assert_eq!(
            gpu.attributes["cudaComputeCapability"],
            Attribute::Version("9.0.0".into())
        );
        assert_eq!(
            gpu.attributes[PCI_BUS_ID],
            s("0000:18:00.0"),
            "the kernel's form"
        );
        assert_eq!(gpu.capacity["memory"], 81559 * 1024 * 1024);
        let mig = &all[1];
        assert_eq!(mig.id.to_string(), M1);
        assert_eq!(mig.attributes["type"], s("mig"));
        assert_eq!(mig.attributes["parentUUID"], s(G1));
        assert_eq!(mig.attributes["profile"], s("3g.40gb"));
        assert_eq!(mig.capacity["memory"], 40192 * 1024 * 1024);
        assert!(!all[1].attributes.contains_key("uuid") || mig.attributes["uuid"] == s(M1));
    }

    #[test]
    fn a_gpu_with_slots_is_offered_as_its_slots_instead_of_whole_and_a_mig_gpu_offers_none() {
        let all = devices(&inventory(), &minors(), 2);
        assert_eq!(
            names(&all),
            ["gpu-0-slot-0", "gpu-0-slot-1", "gpu-3-mig-2-0"]
        );
        assert_eq!(all[1].id.to_string(), format!("{G0}::1"));
        assert_eq!(all[1].attributes["type"], Attribute::String("slot".into()));
        assert_eq!(
            all[1].attributes["parentUUID"],
            Attribute::String(G0.into())
        );
        assert!(!all[1].attributes.contains_key("uuid"));
    }

    // WSL's paravirtual GPU has no /proc/driver/nvidia and so no minor: it is named by its
    // UUID, still a DNS label, the same at every start.
    #[test]
    fn a_gpu_without_a_minor_is_named_by_its_uuid() {
        let all = devices(&inventory(), &BTreeMap::new(), 1);
        assert_eq!(
            names(&all),
            [
                "gpu-a4303385-f265-4ffc-ad1b-b0bef156d59a-mig-2-0",
                "gpu-ff1dacfa-2e1a-0504-a88b-76a3118ee48b-slot-0"
            ]
        );
        assert!(all.iter().all(|d| is_dns_label(&d.name)));
        assert_eq!(all, devices(&inventory(), &BTreeMap::new(), 1), "stable");
    }

    #[test]
    fn dns_labels() {
        for ok in ["gpu-0", "a", &"a".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }

    fn hold(id: &str, devices: &[&str]) -> Hold {
        Hold {
            id: id.parse().unwrap(),
            devices: devices.iter().map(|d| d.parse().unwrap()).collect(),
            kubernetes: id.starts_with("dra-") || id.starts_with("k8s-"),
            owner: None,
            gpus: Default::default(),
            unassigned_since: None,
            claim: None,
        }
    }

    #[test]
    fn the_offer_drops_what_another_owner_has_or_what_takes_no_work_but_never_a_claims_own() {
        let inv = inventory();
        let all = devices(&inv, &minors(), 2);
        let t = Topology::from_inventory(&inv, 2);
        let healthy: BTreeMap<GpuUuid, bool> =
            [(uuid(G0), true), (uuid(G1), true)].into_iter().collect();
        let slot0 = format!("{G0}::0");
        let offered_names =
            |holds: &[Hold], takes: &BTreeMap<GpuUuid, bool>, claimed: &[DeviceId]| {
                offer(&all, &t, holds, takes, claimed)
                    .into_iter()
                    .map(|d| d.name)
                    .collect::<Vec<_>>()
            };
        assert_eq!(offered_names(&[], &healthy, &[]).len(), 3);
        // An operator holds slot 0: it goes; slot 1 stays (slots share).
        assert_eq!(
            offered_names(&[hold("job", &[&slot0])], &healthy, &[]),
            ["gpu-0-slot-1", "gpu-3-mig-2-0"]
        );
        // A DRA claim holds slot 0: it stays (allocated from the claim), and so does slot 1.
        assert_eq!(
            offered_names(&[hold("dra-u", &[&slot0])], &healthy, &[]).len(),
            3
        );
        // GPU 0 goes unhealthy: its slots go, except the one a claim has.
        let sick: BTreeMap<GpuUuid, bool> =
            [(uuid(G0), false), (uuid(G1), true)].into_iter().collect();
        assert_eq!(offered_names(&[], &sick, &[]), ["gpu-3-mig-2-0"]);
        assert_eq!(
            offered_names(&[hold("dra-u", &[&slot0])], &sick, &[]),
            ["gpu-0-slot-0", "gpu-3-mig-2-0"]
        );
        // A reset claims GPU 1: its MIG device goes.
        assert_eq!(
            offered_names(&[], &healthy, &[G1.parse().unwrap()]),
            ["gpu-0-slot-0", "gpu-0-slot-1"]
        );
        // The whole GPU held by the device plugins: every slot of it goes.
        assert_eq!(
            offered_names(&[hold("k8s-a", &[G0])], &healthy, &[]),
            ["gpu-3-mig-2-0"]
        );
    }
}
