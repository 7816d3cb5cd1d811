//! Who has a device: one hold (its id, its devices, who made it) and the owners a hold may
//! have. The store that keeps holds is [`super::store`]; what may be held together is
//! [`super::policy`]'s decision.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::id::{DeviceId, HoldId};

/// Who made a hold, and so who may change or release it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HoldOwner {
    /// An operator, through `bcd hold` or the API.
    Operator,
    /// The kubelet, through a device plugin's `Allocate` (ids `k8s-...`).
    DevicePlugin,
    /// A DRA claim (ids `dra-...`).
    Dra,
}

impl HoldOwner {
    /// Whether its holds are Kubernetes bindings (their specs carry no vendor edits; the
    /// release pass reads PodResources for them).
    pub fn is_kubernetes(self) -> bool {
        self != Self::Operator
    }

    /// The prefix of the ids this owner's holds get, which no other owner may take.
    pub fn id_prefix(self) -> Option<&'static str> {
        match self {
            Self::Operator => None,
            Self::DevicePlugin => Some("k8s-"),
            Self::Dra => Some("dra-"),
        }
    }

    /// The owner in words: "an operator", "the device plugins", "a DRA claim".
    pub fn words(self) -> &'static str {
        match self {
            Self::Operator => "an operator",
            Self::DevicePlugin => "the kubelet's device plugins",
            Self::Dra => "a DRA claim",
        }
    }
}

/// One hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub id: HoldId,
    /// Distinct, in the order they were asked for.
    pub devices: Vec<DeviceId>,
    /// A Kubernetes binding: its spec carries no vendor edits. Kept in the file beside
    /// `owner` (an older bcd reads only this); the truth is [`Hold::owner`].
    #[serde(default)]
    pub kubernetes: bool,
    /// Who made it. A file of an older bcd, and a hold rebuilt from its spec, have none: a
    /// Kubernetes binding is the owner its id is reserved for (the device plugins' when none
    /// is), any other hold the operator's, whatever its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<HoldOwner>,
    /// The GPU of each `MIG-<uuid>` device, as the inventory said when the hold was made,
    /// so that the policy's invariant can be checked before any collection.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpus: BTreeMap<DeviceId, DeviceId>,
    /// A Kubernetes binding whose devices no pod has any more (the kubelet's PodResources
    /// said so), since this time (Unix seconds): its release is pending, and
    /// [`crate::device::policy`] counts its GPUs busy for that reason until it is released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unassigned_since: Option<u64>,
    /// When the hold was made (Unix seconds); kept when it is applied again. `None` for a
    /// hold of an older bcd's file and for one rebuilt from its spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<u64>,
    /// The DRA claim the hold was prepared for (a [`HoldOwner::Dra`] hold made by this bcd;
    /// `None` for every other hold, and for a DRA hold of a file that lost it). Kept in a
    /// field of its own beside `owner`, so a bcd that reads only `owner` still reads the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<DraClaim>,
}

/// The DRA claim a Kubernetes hold was prepared for, as the kubelet named it and the
/// ResourceClaim allocated it: what `NodeUnprepareResources` finds it by (the claim object
/// may be gone by then) and what `status` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DraClaim {
    /// The claim's `metadata.uid`.
    pub uid: String,
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// The allocated devices, as the ResourceSlice named them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<PoolDevice>,
    /// The claim's transient CDI spec, removed when the claim is unprepared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PathBuf>,
}

/// One device of a ResourceSlice pool: `<pool>/<device>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PoolDevice {
    /// The pool (bcd's is the node's name).
    pub pool: String,
    /// The device's name in the pool (`gpu-0`, ...).
    pub device: String,
    /// The claim's requests it was allocated for (base names, without a subrequest).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<String>,
    /// For a share of a GPU's shared device: the share and the slot bcd gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<Share>,
}

/// One allocation of a shared device and the GPU slot it has.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Share {
    /// The allocation's `shareID`, as the scheduler set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The slot of the GPU the share holds.
    pub slot: u32,
}

impl PoolDevice {
    /// The name of its device in the claim's CDI spec, after the claim's uid: the device's
    /// name, and for a share the slot's number too (`gpu-0-shared-1`), as one claim may hold
    /// several shares of one device.
    pub fn cdi_name(&self) -> String {
        match &self.share {
            Some(share) => format!("{}-{}", self.device, share.slot),
            None => self.device.clone(),
        }
    }
}

impl std::fmt::Display for PoolDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.pool, self.device)
    }
}

impl Hold {
    /// Who made it (see the field's note for a file of an older bcd).
    pub fn owner(&self) -> HoldOwner {
        self.owner.unwrap_or(if self.kubernetes {
            self.id.reserved_for().unwrap_or(HoldOwner::DevicePlugin)
        } else {
            HoldOwner::Operator
        })
    }

    /// The GPU `device` is on, as its id or this hold's record says.
    pub fn gpu_of(&self, device: &DeviceId) -> Option<DeviceId> {
        device.gpu().or_else(|| self.gpus.get(device).cloned())
    }
}

impl HoldId {
    /// The owner that makes holds with ids of this form: `k8s-` ids are the device plugins',
    /// `dra-` ids DRA claims'; `None` for every other id (the operator's to choose).
    pub fn reserved_for(&self) -> Option<HoldOwner> {
        [HoldOwner::DevicePlugin, HoldOwner::Dra]
            .into_iter()
            .find(|o| o.id_prefix().is_some_and(|p| self.as_str().starts_with(p)))
    }
}
