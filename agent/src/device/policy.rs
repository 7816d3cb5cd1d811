//! The allocation policy: the one place that says who owns a device, which devices conflict,
//! and whether a GPU is busy. Holds, `gpu.reset`, `vfio bind` and `vm start`/`restore` all
//! ask it; none of them decides on its own.
//!
//! The device model:
//!
//! | device | id | stands for |
//! | --- | --- | --- |
//! | whole GPU | `GPU-<uuid>` | every engine and all memory of one GPU |
//! | MIG device | `MIG-<uuid>` (R450: `MIG-GPU-<uuid>/<gi>/<ci>`) | one GPU instance of a GPU in MIG mode |
//! | slot | `GPU-<uuid>::<n>` | a time-sliced share of one GPU; `bcd node --gpu-slots N` gives each GPU slots `0` to `N-1` |
//!
//! Conflicts: a whole GPU conflicts with each of its MIG devices and slots; a slot conflicts
//! with its whole GPU and that GPU's MIG devices, not with another slot of it (time-slicing
//! is sharing by design); two MIG devices of one GPU do not conflict (each is its own
//! partition, reached through its own `nvidia-caps` nodes). A device conflicts with itself.
//!
//! The invariant every hold store keeps: no two holds hold conflicting devices, so a GPU's
//! device node is in two holds' specs only when both hold slots of it or distinct MIG
//! devices of it. A store that breaks it is refused when it is loaded, naming both holds.
//!
//! Busy: a GPU is busy when any of its devices is held, it is passed through to a VM, or a
//! Kubernetes release of it is pending: a Kubernetes hold whose devices no pod has any more
//! (the kubelet's PodResources API says so) is kept until its grace period is over and its
//! GPUs show no compute process, and until then the reason is that pending release.
//!
//! Claims: a step the node runs on a GPU for seconds (a reset, a vfio bind, a VM start) claims
//! it, under the holds lock, when its busy check passes; the claim is never a hold and never
//! in `holds.json`, but until it goes the GPU is busy for every other hold, allocation and
//! step ([`Busy::Claimed`], [`PolicyError::Claimed`]).
//!
//! This module is pure: it reads the inventory, the holds and the claims it is handed, never
//! a file.

use bcd_protocol::PciAddress;

use super::hold::Hold;
use super::id::{DeviceId, HoldId};
use crate::inventory::document::Inventory;

/// Why a device may not be held, or a hold store is refused. `Display` is the operator's
/// sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The inventory does not list the device (or the GPU of a slot).
    #[error("unknown device {0}: the inventory does not list it")]
    UnknownDevice(DeviceId),
    /// A slot number the node does not offer.
    #[error(
        "{device}: this node offers {slots} slot(s) per GPU (bcd node --gpu-slots), numbered from 0"
    )]
    NoSuchSlot { device: DeviceId, slots: u32 },
    /// A slot of a GPU in MIG mode: its work runs in MIG devices only.
    #[error("{device}: GPU {gpu} is in MIG mode; hold one of its MIG devices instead of a slot")]
    SlotInMigMode { device: DeviceId, gpu: DeviceId },
    /// The device's GPU is on `vfio-pci`.
    #[error("{0} is passed through to a VM; release it first (bcd vfio release)")]
    PassedThrough(DeviceId),
    /// A step of the node's runs on the device's GPU now.
    #[error("{device} is on GPU {gpu}, on which {} runs now; try again when it is done", kind.words())]
    Claimed {
        device: DeviceId,
        gpu: DeviceId,
        kind: ClaimKind,
    },
    /// Another hold has a device that conflicts with this one.
    #[error("{device} is already held by hold {holder} ({held}); release that hold first")]
    Conflict {
        device: DeviceId,
        holder: HoldId,
        held: String,
    },
    /// A hold store gives one GPU to two holds (boxed: five ids would make every policy
    /// result large).
    #[error(transparent)]
    Invariant(Box<Breach>),
}

/// The invariant broken: two holds have conflicting devices of one GPU.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "two holds have GPU {gpu}: hold {first} has {first_device} and hold {second} has {second_device}; bcd refuses this holds.json and deletes nothing: remove one of them from it and restart bcd node"
)]
pub struct Breach {
    pub gpu: DeviceId,
    pub first: HoldId,
    pub first_device: DeviceId,
    pub second: HoldId,
    pub second_device: DeviceId,
}

/// One GPU as the policy sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhysicalGpu {
    pub uuid: DeviceId,
    pub address: Option<PciAddress>,
    pub mig_mode: bool,
    pub mig_devices: Vec<DeviceId>,
    pub passed_through: bool,
}

/// The node's GPUs, their MIG devices and how many slots each offers.
#[derive(Debug, Clone, Default)]
pub struct Topology {
    gpus: Vec<PhysicalGpu>,
    slots_per_gpu: u32,
}

/// A device and the GPU it is on (`None` when nothing tells: a `MIG-<uuid>` that is neither
/// in the inventory nor recorded with its hold).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub device: DeviceId,
    pub gpu: Option<DeviceId>,
}

/// A step the node runs on a whole GPU that no hold or allocation may meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClaimKind {
    /// `gpu.reset`, until the collection after it.
    Reset,
    /// A vfio-pci bind or release.
    Vfio,
    /// A VM start or restore.
    VmStart,
    /// A MIG layout being applied, and a GPU a failed apply left withdrawn until an apply
    /// succeeds.
    MigLayout,
}

impl ClaimKind {
    /// The step in words: "a reset", ...
    pub(crate) fn words(self) -> &'static str {
        match self {
            Self::Reset => "a reset",
            Self::Vfio => "a vfio-pci step",
            Self::VmStart => "a VM start",
            Self::MigLayout => "a MIG layout change",
        }
    }
}

/// The GPUs claimed now, and by what: shared by the node (which claims) and the hold store
/// (which refuses a hold on a claimed GPU). A claim is made under the holds lock; it may go at
/// any time (that only frees a GPU).
pub(crate) type ClaimSet =
    std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<DeviceId, ClaimKind>>>;

/// The claim on `gpu` in `claims`, if any.
pub(crate) fn claim_of(claims: &ClaimSet, gpu: &DeviceId) -> Option<ClaimKind> {
    claims
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(gpu)
        .copied()
}

/// What makes a GPU busy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Busy {
    /// A step of the node's runs on it now.
    Claimed(ClaimKind),
    /// The holds were being changed at the very moment a step that cannot wait asked.
    Changing,
    /// It is on `vfio-pci`, given to a VM.
    PassedThrough,
    /// A hold has it, one of its MIG devices or one of its slots.
    Held { hold: HoldId, device: DeviceId },
    /// A Kubernetes hold of it (or of part of it) that no pod has any more, not released yet.
    PendingRelease {
        hold: HoldId,
        device: DeviceId,
        /// Unix seconds since which no pod has its devices.
        since: u64,
    },
}

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Busy::Claimed(kind) => write!(f, "{} runs on it now", kind.words()),
            Busy::Changing => f.write_str("the holds were being changed at that moment; try again"),
            Busy::PassedThrough => f.write_str("passed through to a VM"),
            Busy::Held { hold, device } => match device {
                DeviceId::Gpu(_) => write!(f, "held by {hold}"),
                DeviceId::Mig(_) | DeviceId::LegacyMig { .. } => write!(f, "MIG device {device} held by {hold}"),
                DeviceId::Slot { .. } => write!(f, "slot {device} held by {hold}"),
            },
            Busy::PendingRelease {
                hold,
                device,
                since,
            } => write!(
                f,
                "a pending Kubernetes release: hold {hold} has {device}, which no pod has had since {}; it is released once its grace period is over and the GPU shows no compute process",
                crate::utc::format_utc(*since)
            ),
        }
    }
}

impl Topology {
    /// The inventory's GPUs, each offering `slots_per_gpu` slots.
    pub fn from_inventory(inventory: &Inventory, slots_per_gpu: u32) -> Self {
        let gpus = inventory
            .gpu
            .gpus
            .iter()
            .map(|g| PhysicalGpu {
                uuid: DeviceId::from(&g.uuid),
                address: g.address(),
                mig_mode: g.mig.as_ref().and_then(|m| m.mode).unwrap_or(false),
                // A MIG device without a UUID cannot be held; the inventory's collection
                // refused its malformed UUID when it parsed `nvidia-smi -L`, and said so.
                mig_devices: g
                    .mig
                    .iter()
                    .flat_map(|m| &m.devices)
                    .filter_map(|d| d.uuid.as_ref().map(DeviceId::from))
                    .collect(),
                passed_through: g.passed_through,
            })
            .collect();
        Self {
            gpus,
            slots_per_gpu: slots_per_gpu.min(crate::device::id::MAX_SLOTS),
        }
    }

    /// The GPU whose UUID is `uuid` (any case: ids are normalised when parsed).
    pub fn gpu(&self, uuid: &DeviceId) -> Option<&PhysicalGpu> {
        self.gpus.iter().find(|g| &g.uuid == uuid)
    }

    /// The GPU at a PCI address.
    pub(crate) fn gpu_at(&self, address: &PciAddress) -> Option<&PhysicalGpu> {
        self.gpus
            .iter()
            .find(|g| g.address.as_ref() == Some(address))
    }

    /// The GPU `device` is on: from its id where the id says, else from the inventory.
    pub(crate) fn gpu_of(&self, device: &DeviceId) -> Option<DeviceId> {
        device.gpu().or_else(|| {
            self.gpus
                .iter()
                .find(|g| g.mig_devices.contains(device))
                .map(|g| g.uuid.clone())
        })
    }

    /// Whether `device` may be held at all, and on which GPU it is.
    ///
    /// # Errors
    /// [`PolicyError::UnknownDevice`], [`PolicyError::NoSuchSlot`],
    /// [`PolicyError::SlotInMigMode`], [`PolicyError::PassedThrough`].
    pub fn place(&self, device: &DeviceId) -> Result<Placed, PolicyError> {
        let gpu = self
            .gpu_of(device)
            .and_then(|uuid| self.gpu(&uuid))
            .filter(|g| {
                !matches!(device, DeviceId::Mig(_) | DeviceId::LegacyMig { .. })
                    || g.mig_devices.contains(device)
            })
            .ok_or_else(|| PolicyError::UnknownDevice(device.clone()))?;
        if let DeviceId::Slot { index, .. } = device {
            if index.get() >= self.slots_per_gpu {
                return Err(PolicyError::NoSuchSlot {
                    device: device.clone(),
                    slots: self.slots_per_gpu,
                });
            }
            if gpu.mig_mode {
                return Err(PolicyError::SlotInMigMode {
                    device: device.clone(),
                    gpu: gpu.uuid.clone(),
                });
            }
        }
        if gpu.passed_through {
            return Err(PolicyError::PassedThrough(device.clone()));
        }
        Ok(Placed {
            device: device.clone(),
            gpu: Some(gpu.uuid.clone()),
        })
    }

    /// The devices of `hold`, each with its GPU: the one recorded with the hold, else what
    /// the id or the inventory says.
    pub(crate) fn placed(&self, hold: &Hold) -> Vec<Placed> {
        hold.devices
            .iter()
            .map(|d| Placed {
                device: d.clone(),
                gpu: hold.gpu_of(d).or_else(|| self.gpu_of(d)),
            })
            .collect()
    }

    /// Whether `gpu` is busy, and why: passed through, a hold has it or part of it, or that
    /// hold is a Kubernetes binding whose release is pending.
    pub(crate) fn busy<'h>(
        &self,
        gpu: &DeviceId,
        holds: impl IntoIterator<Item = &'h Hold>,
    ) -> Option<Busy> {
        if self.gpu(gpu).is_some_and(|g| g.passed_through) {
            return Some(Busy::PassedThrough);
        }
        let whole = Placed {
            device: gpu.clone(),
            gpu: Some(gpu.clone()),
        };
        holds.into_iter().find_map(|hold| {
            self.placed(hold)
                .into_iter()
                .find(|p| conflict(&whole, p))
                .map(
                    |p| match hold.unassigned_since.filter(|_| hold.kubernetes) {
                        Some(since) => Busy::PendingRelease {
                            hold: hold.id.clone(),
                            device: p.device,
                            since,
                        },
                        None => Busy::Held {
                            hold: hold.id.clone(),
                            device: p.device,
                        },
                    },
                )
        })
    }
}

/// Whether two devices may not be held by two different holds.
pub(crate) fn conflict(a: &Placed, b: &Placed) -> bool {
    if a.device == b.device {
        return true;
    }
    let (Some(ga), Some(gb)) = (&a.gpu, &b.gpu) else {
        return false;
    };
    if ga != gb {
        return false;
    }
    let mig = |d: &DeviceId| matches!(d, DeviceId::Mig(_) | DeviceId::LegacyMig { .. });
    let slot = |d: &DeviceId| matches!(d, DeviceId::Slot { .. });
    !((slot(&a.device) && slot(&b.device)) || (mig(&a.device) && mig(&b.device)))
}

/// The first device of another hold that conflicts with one of `wanted`.
///
/// # Errors
/// [`PolicyError::Conflict`] naming the device asked for, the holder and what it holds.
pub(crate) fn check_free<'h>(
    id: &HoldId,
    wanted: &[Placed],
    others: impl IntoIterator<Item = &'h Hold>,
    topology: &Topology,
) -> Result<(), PolicyError> {
    for hold in others.into_iter().filter(|h| &h.id != id) {
        for theirs in topology.placed(hold) {
            if let Some(ours) = wanted.iter().find(|w| conflict(w, &theirs)) {
                let held = if theirs.device == ours.device {
                    "that device".to_owned()
                } else {
                    format!("{} on the same GPU", theirs.device)
                };
                return Err(PolicyError::Conflict {
                    device: ours.device.clone(),
                    holder: hold.id.clone(),
                    held,
                });
            }
        }
    }
    Ok(())
}

/// The invariant, checked on a whole store: no two holds hold conflicting devices.
///
/// # Errors
/// [`PolicyError::Invariant`] naming the GPU, both holds and their devices.
pub(crate) fn check_invariant(holds: &[Hold], topology: &Topology) -> Result<(), PolicyError> {
    let placed: Vec<(&HoldId, Vec<Placed>)> =
        holds.iter().map(|h| (&h.id, topology.placed(h))).collect();
    for (i, (first, ours)) in placed.iter().enumerate() {
        for (second, theirs) in &placed[i + 1..] {
            for a in ours {
                if let Some(b) = theirs.iter().find(|b| conflict(a, b)) {
                    return Err(PolicyError::Invariant(Box::new(Breach {
                        gpu: a.gpu.clone().unwrap_or_else(|| a.device.clone()),
                        first: (*first).clone(),
                        first_device: a.device.clone(),
                        second: (*second).clone(),
                        second_device: b.device.clone(),
                    })));
                }
            }
        }
    }
    Ok(())
}

/// The policy's test fixtures, shared with the other modules' tests that place devices: GPU 0
/// whole (at `0000:18:00.0`) and GPU 3 in MIG mode with two MIG devices.
#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::inventory::document::{Gpu, GpuSection, Mig, MigDevice};

    pub(crate) const GPU3: &str = "GPU-b9036d74-bff6-b565-c003-dc53279ae2bd";
    pub(crate) const GPU0: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";
    pub(crate) const MIG_A: &str = "MIG-65db3e42-f991-a575-c20e-8350d31e437c";
    pub(crate) const MIG_B: &str = "MIG-0c50056c-bc70-320a-5ed7-3d189e36173c";

    pub(crate) fn dev(s: &str) -> DeviceId {
        s.parse().unwrap()
    }

    pub(crate) fn topology(slots: u32) -> Topology {
        let mig = Mig {
            mode: Some(true),
            devices: [MIG_A, MIG_B]
                .iter()
                .map(|u| MigDevice {
                    uuid: Some((*u).parse().unwrap()),
                    ..MigDevice::default()
                })
                .collect(),
            ..Mig::default()
        };
        let inv = Inventory::new(GpuSection {
            gpus: vec![
                Gpu {
                    bus_id: Some("00000000:18:00.0".parse().unwrap()),
                    ..Gpu::new(0, GPU0.parse().unwrap())
                },
                Gpu {
                    mig: Some(mig),
                    ..Gpu::new(3, GPU3.parse().unwrap())
                },
            ],
            ..GpuSection::default()
        });
        Topology::from_inventory(&inv, slots)
    }

    fn placed(t: &Topology, s: &str) -> Placed {
        Placed {
            device: dev(s),
            gpu: t.gpu_of(&dev(s)),
        }
    }

    pub(crate) fn hold(id: &str, devices: &[&str]) -> Hold {
        Hold {
            id: id.parse().unwrap(),
            devices: devices.iter().map(|d| dev(d)).collect(),
            kubernetes: false,
            owner: None,
            gpus: Default::default(),
            unassigned_since: None,
            created_at: None,
            claim: None,
        }
    }

    // What broke: a Kubernetes hold whose pod was gone made its GPU busy only as "held",
    // so gpu.reset could not say that a Kubernetes release was pending.
    #[test]
    fn a_pending_kubernetes_release_makes_its_gpu_busy_and_says_so() {
        let t = topology(2);
        let mut k = hold("k8s-1", &[&format!("{GPU0}::0")]);
        k.kubernetes = true;
        assert!(matches!(t.busy(&dev(GPU0), [&k]), Some(Busy::Held { .. })));
        k.unassigned_since = Some(1_700_000_000);
        let busy = t.busy(&dev(GPU0), [&k]).unwrap();
        assert!(matches!(
            busy,
            Busy::PendingRelease {
                since: 1_700_000_000,
                ..
            }
        ));
        assert!(
            busy.to_string()
                .starts_with("a pending Kubernetes release: hold k8s-1 has"),
            "{busy}"
        );
        // What broke: "since 1700000000 (Unix time)"; the date reads as one now.
        assert!(
            busy.to_string()
                .contains("which no pod has had since 2023-11-14 22:13:20 UTC;"),
            "{busy}"
        );
        // Only a Kubernetes binding's release can be pending.
        k.kubernetes = false;
        assert!(matches!(t.busy(&dev(GPU0), [&k]), Some(Busy::Held { .. })));
    }

    #[test]
    fn the_conflict_table() {
        let t = topology(4);
        let s0 = format!("{GPU0}::0");
        let s1 = format!("{GPU0}::1");
        let cases = [
            (GPU3, MIG_A, true),
            (MIG_A, MIG_B, false),
            (MIG_A, MIG_A, true),
            (GPU0, s0.as_str(), true),
            (s0.as_str(), s1.as_str(), false),
            (s0.as_str(), s0.as_str(), true),
            (GPU0, GPU3, false),
            (s0.as_str(), MIG_A, false),
        ];
        for (a, b, want) in cases {
            assert_eq!(conflict(&placed(&t, a), &placed(&t, b)), want, "{a} {b}");
            assert_eq!(conflict(&placed(&t, b), &placed(&t, a)), want, "{b} {a}");
        }
    }

    #[test]
    fn placing_checks_the_inventory_slots_and_mig_mode() {
        let t = topology(2);
        assert_eq!(t.place(&dev(MIG_A)).unwrap().gpu, Some(dev(GPU3)));
        assert!(t.place(&dev(&format!("{GPU0}::1"))).is_ok());
        assert_eq!(
            t.place(&dev(&format!("{GPU0}::2"))).unwrap_err().to_string(),
            format!("{GPU0}::2: this node offers 2 slot(s) per GPU (bcd node --gpu-slots), numbered from 0")
        );
        assert!(matches!(
            t.place(&dev(&format!("{GPU3}::0"))),
            Err(PolicyError::SlotInMigMode { .. })
        ));
        let unknown = "MIG-00000000-0000-0000-0000-000000000000";
        assert!(matches!(
            t.place(&dev(unknown)),
            Err(PolicyError::UnknownDevice(_))
        ));
        assert!(matches!(
            topology(0).place(&dev(&format!("{GPU0}::0"))),
            Err(PolicyError::NoSuchSlot { slots: 0, .. })
        ));
    }

    #[test]
    fn a_gpu_is_busy_through_any_of_its_devices() {
        let t = topology(2);
        let holds = [hold("a", &[MIG_B]), hold("b", &[&format!("{GPU0}::1")])];
        assert_eq!(
            t.busy(&dev(GPU3), &holds).unwrap().to_string(),
            format!("MIG device {MIG_B} held by a")
        );
        assert_eq!(
            t.busy(&dev(GPU0), &holds).unwrap().to_string(),
            format!("slot {GPU0}::1 held by b")
        );
        assert_eq!(t.busy(&dev(GPU0), &[]), None);
    }

    #[test]
    fn the_invariant_names_both_holds() {
        let t = Topology::default();
        let mut a = hold("a", &[GPU3]);
        let mut b = hold("b", &[MIG_A]);
        // Recorded with the hold, the MIG device's GPU is known without an inventory.
        b.gpus.insert(dev(MIG_A), dev(GPU3));
        let err = check_invariant(&[a.clone(), b.clone()], &t).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("two holds have GPU {GPU3}: hold a has {GPU3} and hold b has {MIG_A}; bcd refuses this holds.json and deletes nothing: remove one of them from it and restart bcd node")
        );
        a.devices = vec![dev(&format!("{GPU0}::0"))];
        b.devices = vec![dev(&format!("{GPU0}::1"))];
        assert!(check_invariant(&[a, b], &t).is_ok(), "slots share a GPU");
    }
}
