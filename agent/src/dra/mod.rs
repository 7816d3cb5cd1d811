//! Kubernetes Dynamic Resource Allocation: bcd's GPUs, MIG devices and slots as the devices
//! of the DRA driver `gpu.bcd.dev`.
//!
//! - What the driver offers and how it names and describes each device ([`devices`]), and
//!   the node's ResourceSlices with the writes that bring the API server's to them
//!   ([`slices`]): pure functions, tested as tables.
//!
//! It reaches the node through [`crate::device::DeviceSource`] alone, never runs a privileged
//! step and changes nothing but holds and its claims' CDI specs.

pub mod devices;
pub mod slices;

/// The driver's name: the ResourceSlices' `spec.driver`, the kubelet plugin's name.
pub const DRIVER: &str = "gpu.bcd.dev";
