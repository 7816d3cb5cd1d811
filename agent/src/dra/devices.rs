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
//! | a GPU's slots as shares (consumable capacity) | `gpu-<minor>-shared` | `type=slot`, `parentUUID`; capacity `slots` |
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
//! A GPU configured for slots is offered *instead of* the whole GPU (never both: without
//! shared counters the scheduler would hand the GPU out twice), in one of two forms
//! ([`Features::shares`]): where the API server keeps consumable capacity (Kubernetes 1.36
//! and later), as one device `gpu-<minor>-shared` with `allowMultipleAllocations` and a
//! capacity `slots` of which each allocation (each `shareID`) consumes exactly one: bcd gives
//! the share a free slot of the GPU when the claim is prepared. It has no `memory` capacity:
//! every capacity of such a device is consumable, and a claim that does not ask for memory
//! would take all of it. Elsewhere, as its slot devices `gpu-<minor>-slot-<n>`. A GPU in MIG
//! mode offers its MIG devices and no slots.
//!
//! What is not offered now ([`offer`]) is left out of the slice, or, where the API server
//! keeps device taints ([`Features::taints`]), kept with one `NoSchedule` taint whose key says
//! why and whose value names the reason ([`NotOffered::taint`]).

use std::collections::{BTreeMap, BTreeSet};

use bcd_protocol::GpuUuid;

use crate::device::id::{DeviceId, SlotIndex, MAX_SLOTS};
use crate::device::policy::{conflict, Placed, Topology};
use crate::device::{Hold, HoldOwner};
use crate::inventory::document::Inventory;

use super::DRIVER;

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
    /// For a GPU's shared device, how many slots its allocations may take now (its
    /// capacity `slots`); `None` for every other device.
    pub shares: Option<u32>,
    /// A device a prepared claim holds that the node's inventory does not show now
    /// (`nvidia-smi -q -x` failed, the MIG layout or `--gpu-slots` changed): kept for its
    /// claim, never offered, reported unhealthy ([`kept_for_claims`]).
    pub missing: bool,
}

impl DraDevice {
    /// Whether it is a GPU's shared device (`gpu-<minor>-shared`).
    pub fn is_shared(&self) -> bool {
        self.shares.is_some()
    }

    /// Whether it is one slot of a GPU (`gpu-<minor>-slot-<n>`).
    pub fn is_slot(&self) -> bool {
        matches!(self.id, DeviceId::Slot { .. })
    }
}

/// What the API server is known to keep, so what the slices may use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Features {
    /// Device taints: a device not offered stays in the slice, tainted.
    pub taints: bool,
    /// Consumable capacity: a GPU's slots are one shared device.
    pub shares: bool,
}

/// A device as published: the device (a shared one with the slots it has now), and its
/// taint when it is not offered but kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offered {
    /// The device.
    pub device: DraDevice,
    /// Why it is not offered, as a `NoSchedule` taint.
    pub taint: Option<Taint>,
}

/// A device taint bcd sets (its effect is always `NoSchedule`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    /// `gpu.bcd.dev/<why>`.
    pub key: String,
    /// The reason, as a label value.
    pub value: String,
}

/// The effect of every taint bcd sets: no new allocation, running pods stay.
pub const TAINT_EFFECT: &str = "NoSchedule";

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

/// Every device the driver knows for `inventory`, in name order, with `slots` slots per GPU
/// not in MIG mode (0: whole GPUs): a GPU with slots has both its slot devices and its
/// shared device here, and [`publishable`] keeps one form. `minors` maps a GPU to its device
/// minor.
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
                    shares: None,
                    missing: false,
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
                    shares: None,
                    missing: false,
                });
            }
            let mut attributes = common.clone();
            attributes.insert("type".into(), Attribute::String("slot".into()));
            attributes.insert(
                "parentUUID".into(),
                Attribute::String(gpu.uuid.as_str().into()),
            );
            out.push(DraDevice {
                name: format!("{base}-shared"),
                id: whole,
                gpu: gpu.uuid.clone(),
                attributes,
                capacity: BTreeMap::new(),
                shares: Some(slots.min(MAX_SLOTS)),
                missing: false,
            });
        } else {
            common.insert("type".into(), Attribute::String("gpu".into()));
            common.insert("uuid".into(), Attribute::String(gpu.uuid.as_str().into()));
            out.push(DraDevice {
                name: base,
                id: whole,
                gpu: gpu.uuid.clone(),
                attributes: common,
                capacity: memory(gpu.memory_total_mib),
                shares: None,
                missing: false,
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

/// The devices that DRA claims' holds (`holds`) name and `all` lacks, each as its claim's
/// record names it, described by what the hold knows (its type, its uuid, its GPU), with
/// [`DraDevice::missing`] set: a claimed device is never left out of the slices or the health
/// stream because one collection failed. A hold without its claim's record names no device
/// of the pool and adds none, nor does a device recorded in another pool than `pool`. Pure.
pub fn kept_for_claims(all: &[DraDevice], holds: &[Hold], this_pool: &str) -> Vec<DraDevice> {
    let mut out: Vec<DraDevice> = Vec::new();
    for hold in holds.iter().filter(|h| h.owner() == HoldOwner::Dra) {
        let Some(claim) = &hold.claim else { continue };
        for (id, pool) in hold.devices.iter().zip(&claim.devices) {
            let shared = pool.share.is_some();
            if pool.pool != this_pool
                || all.iter().any(|d| d.name == pool.device)
                || out.iter().any(|d| d.name == pool.device)
                || !is_dns_label(&pool.device)
            {
                continue;
            }
            let Some(gpu) = hold.gpu_of(id).and_then(|g| g.gpu_uuid().cloned()) else {
                continue;
            };
            let mut attributes = BTreeMap::new();
            let kind = match id {
                _ if shared => "slot",
                DeviceId::Slot { .. } => "slot",
                DeviceId::Gpu(_) => "gpu",
                _ => "mig",
            };
            attributes.insert("type".to_owned(), Attribute::String(kind.to_owned()));
            match id {
                DeviceId::Gpu(uuid) if !shared => {
                    attributes.insert("uuid".into(), Attribute::String(uuid.as_str().into()));
                }
                DeviceId::Gpu(_) | DeviceId::Slot { .. } => {}
                other => {
                    attributes.insert("uuid".into(), Attribute::String(other.to_string()));
                }
            }
            if kind != "gpu" {
                attributes.insert("parentUUID".into(), Attribute::String(gpu.as_str().into()));
            }
            out.push(DraDevice {
                name: pool.device.clone(),
                id: if shared {
                    DeviceId::from(&gpu)
                } else {
                    id.clone()
                },
                gpu,
                attributes,
                capacity: BTreeMap::new(),
                shares: shared.then_some(1),
                missing: true,
            });
        }
    }
    out
}

/// The devices of `all` in the form the slices use: a GPU's slots as its slot devices, or,
/// with [`Features::shares`], as its shared device.
pub fn publishable(all: &[DraDevice], features: Features) -> Vec<DraDevice> {
    all.iter()
        .filter(|d| {
            if features.shares {
                !d.is_slot()
            } else {
                !d.is_shared()
            }
        })
        .cloned()
        .collect()
}

/// Why a device is not offered now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotOffered {
    /// Its GPU's verdict says it takes no work: the verdict's worst reason, or `NoSample`
    /// when there is no verdict yet.
    NotSchedulable(String),
    /// A step of the node's (a reset, a vfio step) runs on its GPU.
    Claimed,
    /// Its GPU is on `vfio-pci`.
    PassedThrough,
    /// Another owner's hold (an operator, a device plugin, another claim's device on the same
    /// GPU) conflicts with it.
    Held(HoldOwner),
    /// The node's inventory does not show it now (a claim keeps it).
    Missing,
}

/// `s` as a label value: at most 63 of `A-Z a-z 0-9 - _ .`, starting and ending with a letter
/// or digit (anything else becomes `-`).
fn label_value(s: &str) -> String {
    let mapped: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

impl NotOffered {
    /// The taint a kept device carries for it: `gpu.bcd.dev/unhealthy` (the verdict's
    /// reason, `Xid79`), `gpu.bcd.dev/node-step` (`reset-or-vfio`),
    /// `gpu.bcd.dev/passed-through` (`vfio-pci`) or `gpu.bcd.dev/held` (`operator`,
    /// `device-plugin`, `dra-claim`).
    pub fn taint(&self) -> Taint {
        let (why, value) = match self {
            Self::NotSchedulable(reason) => ("unhealthy", label_value(reason)),
            Self::Claimed => ("node-step", "reset-or-vfio".to_owned()),
            Self::PassedThrough => ("passed-through", "vfio-pci".to_owned()),
            Self::Missing => ("unhealthy", "NotInInventory".to_owned()),
            Self::Held(owner) => (
                "held",
                match owner {
                    HoldOwner::Operator => "operator",
                    HoldOwner::DevicePlugin => "device-plugin",
                    HoldOwner::Dra => "dra-claim",
                }
                .to_owned(),
            ),
        };
        Taint {
            key: format!("{DRIVER}/{why}"),
            value,
        }
    }
}

/// What the offer looks at: the node's topology, its holds, the GPUs' verdicts and the
/// node's steps.
#[derive(Debug, Clone, Copy)]
pub struct Situation<'a> {
    /// The node's GPUs and slots.
    pub topology: &'a Topology,
    /// Every hold.
    pub holds: &'a [Hold],
    /// Per GPU: `None` when it takes work, else the verdict's worst reason (a GPU absent
    /// has no verdict yet).
    pub verdicts: &'a BTreeMap<GpuUuid, Option<String>>,
    /// The GPUs a step of the node's runs on.
    pub claimed: &'a [DeviceId],
    /// The pool the slices publish (the node's name now): a claim's device recorded in
    /// another pool (the node was renamed) is not one of this pool's.
    pub pool: &'a str,
}

impl Situation<'_> {
    /// Why the GPU of `device` takes no work, if it does not.
    fn unschedulable(&self, device: &DraDevice) -> Option<NotOffered> {
        let gpu = DeviceId::from(&device.gpu);
        if self.topology.gpu(&gpu).is_some_and(|g| g.passed_through) {
            return Some(NotOffered::PassedThrough);
        }
        if self.claimed.contains(&gpu) {
            return Some(NotOffered::Claimed);
        }
        match self.verdicts.get(&device.gpu) {
            Some(None) => None,
            Some(Some(reason)) => Some(NotOffered::NotSchedulable(reason.clone())),
            None => Some(NotOffered::NotSchedulable("NoSample".into())),
        }
    }

    /// Whether a DRA claim's allocation names `device`: one of the claim's devices has its
    /// name (a share of a shared device, too). A claim's hold of the same bcd device under
    /// another name (a slot a share holds, met as a slot device after the server stopped
    /// keeping consumable capacity; the whole GPU claimed before `--gpu-slots`) is another
    /// device's, which the scheduler does not count against this one.
    ///
    /// A DRA hold without its claim's record (rebuilt from a spec that recorded none) names
    /// no claim: its devices are another owner's, never offered as free.
    fn claims(&self, device: &DraDevice) -> bool {
        self.holds
            .iter()
            .filter(|h| h.owner() == HoldOwner::Dra && h.claim.is_some())
            .any(|h| named(h, self.pool).any(|(_, name)| name == Some(device.name.as_str())))
    }
}

/// Each device of a DRA hold with the device name its claim's record gives it in `pool`
/// (`None` for a hold without a record, or a device recorded in another pool).
fn named<'h>(h: &'h Hold, pool: &'h str) -> impl Iterator<Item = (&'h DeviceId, Option<&'h str>)> {
    let names = h
        .claim
        .iter()
        .flat_map(|c| &c.devices)
        .map(move |p| (p.pool == pool).then_some(p.device.as_str()));
    h.devices.iter().zip(names.chain(std::iter::repeat(None)))
}

/// Whether `device` is offered now, and why not. A device a DRA claim holds itself is
/// offered whatever other owners do: the scheduler knows it is allocated from the claim, and
/// dropping it would make the claim's allocation dangle (its GPU's health still counts, for
/// the taint). A shared device is offered while its GPU has a slot no other owner holds.
pub fn offered(device: &DraDevice, now: &Situation<'_>) -> Result<(), NotOffered> {
    if device.missing {
        return Err(NotOffered::Missing);
    }
    if let Some(why) = now.unschedulable(device) {
        return Err(why);
    }
    if now.claims(device) {
        return Ok(());
    }
    let gpu = DeviceId::from(&device.gpu);
    let me = Placed {
        device: device.id.clone(),
        gpu: Some(gpu.clone()),
    };
    for h in now.holds {
        for theirs in now.topology.placed(h) {
            let shared_slot = device.is_shared() && matches!(theirs.device, DeviceId::Slot { .. });
            if !shared_slot && conflict(&me, &theirs) {
                return Err(NotOffered::Held(h.owner()));
            }
        }
    }
    if device.is_shared() && free_shares(device, now) == 0 {
        let owner = now
            .holds
            .iter()
            .find(|h| {
                h.devices
                    .iter()
                    .any(|d| matches!(d, DeviceId::Slot { gpu, .. } if gpu == &device.gpu))
            })
            .map_or(HoldOwner::Operator, Hold::owner);
        return Err(NotOffered::Held(owner));
    }
    Ok(())
}

/// The slots of a shared device's GPU that nothing but its own shares holds: its capacity
/// `slots` (the scheduler counts the shares against it; an operator's, a device plugin's or a
/// slot device's claim it does not know of, so they are taken off).
fn free_shares(device: &DraDevice, now: &Situation<'_>) -> u32 {
    let total = device.shares.unwrap_or(0);
    let on_gpu = |d: &DeviceId| matches!(d, DeviceId::Slot { gpu, .. } if gpu == &device.gpu);
    let others: BTreeSet<&DeviceId> = now
        .holds
        .iter()
        .flat_map(|h| {
            let dra = h.owner() == HoldOwner::Dra;
            named(h, now.pool).filter_map(move |(d, name)| {
                let a_share = dra && name == Some(device.name.as_str());
                (!a_share).then_some(d)
            })
        })
        .filter(|d| on_gpu(d))
        .collect();
    total.saturating_sub(u32::try_from(others.len()).unwrap_or(u32::MAX))
}

/// The slots of a shared device's GPU its own shares hold: the capacity that leaves the
/// scheduler nothing to hand out.
fn shares_in_use(device: &DraDevice, now: &Situation<'_>) -> u32 {
    let n = now
        .holds
        .iter()
        .filter(|h| h.owner() == HoldOwner::Dra)
        .flat_map(|h| named(h, now.pool))
        .filter(|(_, name)| *name == Some(device.name.as_str()))
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The devices of `all` in the form the slices use (see [`publishable`]), and any other a
/// claim's allocation names (a slot device claimed before the server kept consumable
/// capacity), as the slices show them now: those offered (see [`offered`]), a shared one with
/// its free slots; those not offered left out, or, with [`Features::taints`], kept with their
/// taint. A device a claim's allocation names stays, tainted when its GPU takes no work, is
/// under a step or passed through and the server keeps taints; without taints a shared one
/// stays with no share left to hand out. In their order.
pub fn offer(all: &[DraDevice], now: &Situation<'_>, features: Features) -> Vec<Offered> {
    let form = publishable(all, features);
    all.iter()
        // A shared device only where the server keeps it: elsewhere it would be stored
        // without allowMultipleAllocations and never match what was sent.
        .filter(|d| form.contains(d) || (now.claims(d) && (features.shares || !d.is_shared())))
        .cloned()
        .filter_map(|mut device| {
            let verdict = offered(&device, now);
            if device.is_shared() {
                // The capacity's policy needs at least one slot, even on a tainted device.
                device.shares = Some(free_shares(&device, now).max(1));
            }
            match verdict {
                Ok(()) => Some(Offered {
                    device,
                    taint: None,
                }),
                Err(why) if features.taints => Some(Offered {
                    device,
                    taint: Some(why.taint()),
                }),
                Err(_) if now.claims(&device) => {
                    if device.is_shared() {
                        // Kept for the claims' sake, full: no new share on this GPU.
                        device.shares = Some(shares_in_use(&device, now).max(1));
                    }
                    Some(Offered {
                        device,
                        taint: None,
                    })
                }
                Err(_) => None,
            }
        })
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
            [
                "gpu-0-shared",
                "gpu-0-slot-0",
                "gpu-0-slot-1",
                "gpu-3-mig-2-0"
            ]
        );
        assert_eq!(all[2].id.to_string(), format!("{G0}::1"));
        assert_eq!(all[2].attributes["type"], Attribute::String("slot".into()));
        assert_eq!(
            all[2].attributes["parentUUID"],
            Attribute::String(G0.into())
        );
        assert!(!all[2].attributes.contains_key("uuid"));
        // The shared device stands for the GPU's slots as shares: type slot, no memory.
        let shared = &all[0];
        assert_eq!(
            (shared.shares, shared.id.to_string()),
            (Some(2), G0.to_owned())
        );
        assert_eq!(shared.attributes["type"], Attribute::String("slot".into()));
        assert!(shared.capacity.is_empty());
        // Either form, never both, and never the whole GPU.
        assert_eq!(
            names(&publishable(&all, Features::default())),
            ["gpu-0-slot-0", "gpu-0-slot-1", "gpu-3-mig-2-0"]
        );
        assert_eq!(
            names(&publishable(
                &all,
                Features {
                    taints: false,
                    shares: true
                }
            )),
            ["gpu-0-shared", "gpu-3-mig-2-0"]
        );
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
                "gpu-ff1dacfa-2e1a-0504-a88b-76a3118ee48b-shared",
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
            created_at: None,
            claim: None,
        }
    }

    /// The test inventory's devices with two slots a GPU, and its topology.
    fn two_slots() -> (Vec<DraDevice>, Topology) {
        let inv = inventory();
        (
            devices(&inv, &minors(), 2),
            Topology::from_inventory(&inv, 2),
        )
    }

    /// A DRA claim's hold of `devices`, each (bcd device, the pool device its allocation
    /// names).
    fn claim_hold(id: &str, devices: &[(&str, &str)]) -> Hold {
        let mut h = hold(id, &devices.iter().map(|(d, _)| *d).collect::<Vec<_>>());
        h.claim = Some(crate::device::DraClaim {
            uid: id.trim_start_matches("dra-").into(),
            namespace: "ml".into(),
            name: "c".into(),
            devices: devices
                .iter()
                .map(|(_, name)| crate::device::PoolDevice {
                    pool: "node-a".into(),
                    device: (*name).into(),
                    ..Default::default()
                })
                .collect(),
            spec: None,
        });
        h
    }

    fn verdicts(sick: &[&str]) -> BTreeMap<GpuUuid, Option<String>> {
        [G0, G1]
            .into_iter()
            .map(|g| (uuid(g), sick.contains(&g).then(|| "Xid79".to_owned())))
            .collect()
    }

    /// A device as the slices show it: name, taint (key, value), shares.
    type Shown = (String, Option<(String, String)>, Option<u32>);

    /// What the slices show.
    fn shown(
        all: &[DraDevice],
        t: &Topology,
        holds: &[Hold],
        verdicts: &BTreeMap<GpuUuid, Option<String>>,
        claimed: &[DeviceId],
        features: Features,
    ) -> Vec<Shown> {
        let now = Situation {
            topology: t,
            holds,
            verdicts,
            claimed,
            pool: "node-a",
        };
        offer(all, &now, features)
            .into_iter()
            .map(|o| {
                (
                    o.device.name,
                    o.taint.map(|t| (t.key, t.value)),
                    o.device.shares,
                )
            })
            .collect()
    }

    fn names_of(shown: &[Shown]) -> Vec<&str> {
        shown.iter().map(|(n, _, _)| n.as_str()).collect()
    }

    #[test]
    fn the_offer_drops_what_another_owner_has_or_what_takes_no_work_but_never_a_claims_own() {
        let (all, t) = two_slots();
        let healthy = verdicts(&[]);
        let slot0 = format!("{G0}::0");
        let plain = Features::default();
        let offered_names =
            |holds: &[Hold], v: &BTreeMap<GpuUuid, Option<String>>, claimed: &[DeviceId]| {
                names_of(&shown(&all, &t, holds, v, claimed, plain))
                    .into_iter()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            };
        assert_eq!(
            offered_names(&[], &healthy, &[]),
            ["gpu-0-slot-0", "gpu-0-slot-1", "gpu-3-mig-2-0"],
            "slot devices without shares, never the shared device"
        );
        // An operator holds slot 0: it goes; slot 1 stays (slots share).
        assert_eq!(
            offered_names(&[hold("job", &[&slot0])], &healthy, &[]),
            ["gpu-0-slot-1", "gpu-3-mig-2-0"]
        );
        // A DRA claim holds slot 0: it stays (allocated from the claim), and so does slot 1.
        assert_eq!(
            offered_names(
                &[claim_hold("dra-u", &[(&slot0, "gpu-0-slot-0")])],
                &healthy,
                &[]
            )
            .len(),
            3
        );
        // GPU 0 goes unhealthy: its slots go, except the one a claim has.
        let sick = verdicts(&[G0]);
        assert_eq!(offered_names(&[], &sick, &[]), ["gpu-3-mig-2-0"]);
        assert_eq!(
            offered_names(
                &[claim_hold("dra-u", &[(&slot0, "gpu-0-slot-0")])],
                &sick,
                &[]
            ),
            ["gpu-0-slot-0", "gpu-3-mig-2-0"]
        );
        // No verdict yet: nothing of that GPU is offered.
        let unknown: BTreeMap<GpuUuid, Option<String>> = [(uuid(G1), None)].into_iter().collect();
        assert_eq!(offered_names(&[], &unknown, &[]), ["gpu-3-mig-2-0"]);
        // A reset claims GPU 1: its MIG device goes.
        assert_eq!(
            offered_names(&[], &healthy, &[G1.parse().unwrap()]),
            ["gpu-0-slot-0", "gpu-0-slot-1"]
        );
        // What broke: a DRA hold rebuilt without its claim's record was offered as the
        // claim's own, untainted, after the claim was deleted. It names no claim: its slot is
        // held, not offered (slot 1 stays, slots share).
        assert_eq!(
            offered_names(&[hold("dra-u", &[&slot0])], &healthy, &[]),
            ["gpu-0-slot-1", "gpu-3-mig-2-0"]
        );
        // The whole GPU held by the device plugins: every slot of it goes.
        assert_eq!(
            offered_names(&[hold("k8s-a", &[G0])], &healthy, &[]),
            ["gpu-3-mig-2-0"]
        );
    }

    // What broke (a review): after a rename, a claim's device recorded in the old pool was
    // taken for the new pool's device of the same name and offered free; the scheduler then
    // handed it to claims that prepare refused for ever. It is held, tainted, in the new pool.
    #[test]
    fn a_claims_device_recorded_in_another_pool_is_held_not_offered() {
        let (all, t) = two_slots();
        let slot0 = format!("{G0}::0");
        let mut old = claim_hold("dra-u", &[(&slot0, "gpu-0-slot-0")]);
        old.claim.as_mut().unwrap().devices[0].pool = "node-old".into();
        let taints = Features {
            taints: true,
            shares: false,
        };
        let got = shown(&all, &t, &[old], &verdicts(&[]), &[], taints);
        assert_eq!(
            got[0],
            (
                "gpu-0-slot-0".to_owned(),
                Some(("gpu.bcd.dev/held".to_owned(), "dra-claim".to_owned())),
                None
            )
        );
    }

    // Where the server keeps taints, nothing is dropped: what is not offered stays, with a
    // NoSchedule taint whose key says why and whose value names the reason.
    #[test]
    fn with_taints_a_device_not_offered_stays_tainted_with_its_reason() {
        let (all, t) = two_slots();
        let taints = Features {
            taints: true,
            shares: false,
        };
        let slot0 = format!("{G0}::0");
        let key = |k: &str, v: &str| Some((format!("gpu.bcd.dev/{k}"), v.to_owned()));
        let tainted =
            |holds: &[Hold], v: &BTreeMap<GpuUuid, Option<String>>, claimed: &[DeviceId]| {
                shown(&all, &t, holds, v, claimed, taints)
            };
        let got = tainted(&[hold("job", &[&slot0])], &verdicts(&[G1]), &[]);
        assert_eq!(
            got,
            [
                ("gpu-0-slot-0".to_owned(), key("held", "operator"), None),
                ("gpu-0-slot-1".to_owned(), None, None),
                ("gpu-3-mig-2-0".to_owned(), key("unhealthy", "Xid79"), None),
            ]
        );
        // A claim's own device on a GPU gone bad is tainted too (never dropped).
        let got = tainted(
            &[claim_hold("dra-u", &[(&slot0, "gpu-0-slot-0")])],
            &verdicts(&[G0]),
            &[],
        );
        assert_eq!(
            got[0],
            ("gpu-0-slot-0".to_owned(), key("unhealthy", "Xid79"), None)
        );
        // A DRA hold that lost its claim's record keeps its device tainted, never free.
        let got = tainted(&[hold("dra-u", &[&slot0])], &verdicts(&[]), &[]);
        assert_eq!(
            got[0],
            ("gpu-0-slot-0".to_owned(), key("held", "dra-claim"), None)
        );
        // A step of the node's, a GPU on vfio-pci, no verdict yet.
        let got = tainted(&[], &BTreeMap::new(), &[G1.parse().unwrap()]);
        assert_eq!(got[2].1, key("node-step", "reset-or-vfio"));
        assert_eq!(got[0].1, key("unhealthy", "NoSample"));
        let got = tainted(&[hold("k8s-a", &[G0])], &verdicts(&[]), &[]);
        assert_eq!(got[0].1, key("held", "device-plugin"));
        assert_eq!(label_value("Xid 79: bad!"), "Xid-79--bad");
        assert_eq!(label_value(&"a".repeat(80)).len(), 63);
    }

    // With consumable capacity a GPU's slots are one shared device: offered while a slot is
    // free of other owners, its capacity the slots they leave, kept while a claim has a share.
    #[test]
    fn with_shares_a_gpus_slots_are_one_device_whose_capacity_is_what_other_owners_leave() {
        let (all, t) = two_slots();
        let shares = Features {
            taints: false,
            shares: true,
        };
        let healthy = verdicts(&[]);
        let (slot0, slot1) = (format!("{G0}::0"), format!("{G0}::1"));
        let got = shown(&all, &t, &[], &healthy, &[], shares);
        assert_eq!(names_of(&got), ["gpu-0-shared", "gpu-3-mig-2-0"]);
        assert_eq!(got[0].2, Some(2));
        // An operator holds one slot: one share left.
        let got = shown(&all, &t, &[hold("job", &[&slot0])], &healthy, &[], shares);
        assert_eq!(got[0], ("gpu-0-shared".to_owned(), None, Some(1)));
        // A claim's share does not lower the capacity (the scheduler counts it); a claim of
        // the slot device (before shares) does, as the scheduler does not know of it.
        let share = claim_hold("dra-u", &[(&slot0, "gpu-0-shared")]);
        let got = shown(
            &all,
            &t,
            std::slice::from_ref(&share),
            &healthy,
            &[],
            shares,
        );
        assert_eq!(got[0], ("gpu-0-shared".to_owned(), None, Some(2)));
        let slot_device = claim_hold("dra-v", &[(&slot0, "gpu-0-slot-0")]);
        let got = shown(&all, &t, &[slot_device], &healthy, &[], shares);
        assert_eq!(got[0], ("gpu-0-shared".to_owned(), None, Some(1)));
        // Back to slot devices (the server stopped keeping consumable capacity): a slot a
        // share holds is another claim's device, not offered.
        let got = shown(
            &all,
            &t,
            std::slice::from_ref(&share),
            &healthy,
            &[],
            Features::default(),
        );
        assert_eq!(names_of(&got), ["gpu-0-slot-1", "gpu-3-mig-2-0"]);
        // Both slots held by operators: not offered; the whole GPU held: not offered.
        let both = [hold("job", &[&slot0]), hold("job2", &[&slot1])];
        assert_eq!(
            names_of(&shown(&all, &t, &both, &healthy, &[], shares)),
            ["gpu-3-mig-2-0"]
        );
        let whole = [hold("k8s-a", &[G0])];
        assert_eq!(
            names_of(&shown(&all, &t, &whole, &healthy, &[], shares)),
            ["gpu-3-mig-2-0"]
        );
        // A claim of the whole GPU (made before --gpu-slots) is another device's: the shared
        // device is not offered beside it.
        let whole_claim = claim_hold("dra-w", &[(G0, "gpu-0")]);
        let got = shown(&all, &t, &[whole_claim], &healthy, &[], shares);
        assert_eq!(names_of(&got), ["gpu-3-mig-2-0"]);
        // A slot device a claim has (made before shares) stays beside the shared device.
        let slot_device = claim_hold("dra-v", &[(&slot1, "gpu-0-slot-1")]);
        let got = shown(&all, &t, &[slot_device], &healthy, &[], shares);
        assert_eq!(
            got,
            [
                ("gpu-0-shared".to_owned(), None, Some(1)),
                ("gpu-0-slot-1".to_owned(), None, None),
                ("gpu-3-mig-2-0".to_owned(), None, None),
            ]
        );
        // A claim's share keeps it on a sick GPU: without taints, full, so no new share is
        // handed out where prepare would refuse it.
        let got = shown(
            &all,
            &t,
            &[claim_hold("dra-u", &[(&slot1, "gpu-0-shared")])],
            &verdicts(&[G0]),
            &[],
            shares,
        );
        assert_eq!(names_of(&got), ["gpu-0-shared", "gpu-3-mig-2-0"]);
        assert_eq!(got[0].2, Some(1), "its capacity is the one share in use");
    }
}
