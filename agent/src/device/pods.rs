//! Who has a device in Kubernetes: one container, as the kubelet's PodResources API names
//! it, and the devices given to it. The kubelet side hands these to the node; the node's
//! metrics and OTLP export label each device with its pod.

use super::id::DeviceId;

/// One container a device was allocated to, as the kubelet's PodResources API names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodRef {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The container's name.
    pub container: String,
}

/// The devices given to one container: what the Kubernetes hook takes (one record per
/// container, so its names are kept once, not once per device).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodAllocation {
    /// The devices (GPUs, MIG devices, slots).
    pub devices: Vec<DeviceId>,
    /// Who has them.
    pub pod: PodRef,
}
