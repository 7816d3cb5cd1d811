//! The vocabulary of the node's devices, shared by every part that hands them out: the
//! devices and hold ids ([`id`]), a hold and its owner ([`hold`]), the one rule of who may
//! hold what ([`policy`]), and who has a device in Kubernetes ([`pods`]). The one way a
//! consumer of the node's devices reaches the node is [`crate::source::DeviceSource`], a floor
//! above this one and the CDI specs.
//!
//! The hold store, `holds.json` ([`store`]), is here too, beside the holds it keeps.
//!
//! This module imports nothing from `cdi/`, `node/`, `kubelet/`, `dra/`, `doctor/` or the
//! command line: the CDI specs (`cdi`) and the node build on it.

pub(crate) mod hold;
pub(crate) mod id;
pub(crate) mod pods;
pub mod policy;
pub mod store;

pub use hold::{DraClaim, Hold, HoldOwner, PoolDevice, Share};
pub use id::{DeviceId, HoldId, IdError, MigUuid};
pub use pods::{PodAllocation, PodRef};
