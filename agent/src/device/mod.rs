//! The vocabulary of the node's devices, shared by every part that hands them out: the
//! devices and hold ids ([`id`]), a hold and its owner ([`hold`]), the one rule of who may
//! hold what ([`policy`]), who has a device in Kubernetes ([`pods`]), and the one way a
//! consumer of the node's devices (the kubelet device plugins, a DRA driver) reaches the
//! node ([`source::DeviceSource`]).
//!
//! This module imports nothing from `node/`, `kubelet/`, `doctor/` or the command line, and
//! the policy nothing from `cdi/`: the hold store (`cdi::holds`) and the node build on it.

pub(crate) mod hold;
pub(crate) mod id;
pub(crate) mod pods;
pub mod policy;
pub(crate) mod source;

pub use hold::{DraClaim, Hold, HoldOwner, PoolDevice, Share};
pub use id::{DeviceId, HoldId, IdError, MigUuid};
pub use pods::{PodAllocation, PodRef};
pub use source::{Changes, DeviceSource, Report};
