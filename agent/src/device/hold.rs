//! Who has a device: one hold (its id, its devices, who made it) and the owners a hold may
//! have. The store that keeps holds is `cdi::holds`; what may be held together is
//! [`super::policy`]'s decision.

use std::collections::BTreeMap;

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
