//! The vocabulary of the node's devices shared by every part that hands them out: who has a
//! device in Kubernetes ([`pods`]), and the one way a consumer of the node's devices (the
//! kubelet device plugins, a DRA driver) reaches the node ([`source::DeviceSource`]).
//!
//! This module imports nothing from `node/`, `kubelet/`, `doctor/` or the command line: the
//! node implements [`source::DeviceSource`], the consumers are handed it.

pub mod pods;
pub mod source;

pub use pods::{PodAllocation, PodRef};
pub use source::{Changes, DeviceSource, Report};
