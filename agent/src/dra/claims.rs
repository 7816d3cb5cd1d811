//! The ResourceClaims the kubelet asks the driver to prepare, as much of each as preparing
//! needs (`metadata` and `status.allocation.devices`), and the one way the driver reads them:
//! [`ClaimReader`], implemented on the API server by the controller's client and in tests by
//! a fake.

use std::future::Future;

use serde::{Deserialize, Serialize};

/// A ResourceClaim (`resource.k8s.io/v1`), the fields preparing reads. Fields it does not
/// know are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceClaim {
    /// The claim's identity.
    pub metadata: ClaimMeta,
    /// What the scheduler allocated.
    #[serde(default)]
    pub status: ClaimStatus,
}

/// `metadata`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimMeta {
    /// The claim's uid: a claim deleted and made anew under the same name has another.
    #[serde(default)]
    pub uid: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its namespace.
    #[serde(default)]
    pub namespace: String,
}

/// `status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimStatus {
    /// Absent until the scheduler allocated the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<Allocation>,
}

/// `status.allocation`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// The devices.
    #[serde(default)]
    pub devices: AllocatedDevices,
}

/// `status.allocation.devices`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocatedDevices {
    /// One per allocated device, of every driver.
    #[serde(default)]
    pub results: Vec<AllocationResult>,
    /// Configuration for the drivers, from the claim or its DeviceClasses.
    #[serde(default)]
    pub config: Vec<AllocationConfig>,
}

/// One allocated device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocationResult {
    /// The request (`request` or `request/subrequest`).
    #[serde(default)]
    pub request: String,
    /// The driver.
    #[serde(default)]
    pub driver: String,
    /// The pool.
    #[serde(default)]
    pub pool: String,
    /// The device's name in the pool.
    #[serde(default)]
    pub device: String,
    /// Admin access: the device is given without being allocated exclusively.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_access: Option<bool>,
    /// The allocation's share of a device allocated several times (consumable capacity).
    #[serde(default, rename = "shareID", skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
    /// What the allocation consumes of the device's capacities (quantities).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub consumed_capacity: std::collections::BTreeMap<String, String>,
}

impl AllocationResult {
    /// The request's base name (a subrequest's request).
    pub fn base_request(&self) -> &str {
        self.request.split('/').next().unwrap_or_default()
    }
}

/// One configuration entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationConfig {
    /// `FromClass` or `FromClaim`.
    #[serde(default)]
    pub source: String,
    /// The requests it applies to (none: all).
    #[serde(default)]
    pub requests: Vec<String>,
    /// A driver's own configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opaque: Option<OpaqueConfig>,
}

/// `opaque`: the driver it is for, and its parameters (not read).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpaqueConfig {
    /// The driver.
    #[serde(default)]
    pub driver: String,
}

/// Why a claim could not be read. `Display` is the sentence the kubelet reports for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The API server has no such claim.
    #[error("the API server has no ResourceClaim {namespace}/{name}")]
    NotFound {
        /// The namespace asked for.
        namespace: String,
        /// The name asked for.
        name: String,
    },
    /// The API server could not be asked, or answered something else.
    #[error("the ResourceClaim {namespace}/{name} cannot be read from the API server: {why}")]
    Failed {
        /// The namespace asked for.
        namespace: String,
        /// The name asked for.
        name: String,
        /// What went wrong.
        why: String,
    },
}

/// Reads ResourceClaims from the API server.
pub trait ClaimReader: Send + Sync + 'static {
    /// The claim `namespace/name` as the API server has it now.
    ///
    /// # Errors
    /// [`ReadError`]: no such claim, or the server could not be asked.
    fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<ResourceClaim, ReadError>> + Send;

    /// Whether the API server has the Node `name` (the node whose pool the driver publishes):
    /// `Ok(false)` only when the server said it has no such Node. A reader that cannot tell
    /// (a fake of claims alone) says `Ok(true)`.
    ///
    /// # Errors
    /// Why the server could not be asked, as a few words.
    fn node_exists(&self, name: &str) -> impl Future<Output = Result<bool, String>> + Send {
        let _ = name;
        async { Ok(true) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_reads_from_the_api_servers_json_ignoring_what_it_does_not_know() {
        let json = serde_json::json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ml", "uid": "u-1", "resourceVersion": "7"},
            "spec": {"devices": {"requests": [{"name": "gpu"}]}},
            "status": {"allocation": {"devices": {
                "results": [{"request": "gpu/h100", "driver": "gpu.bcd.dev", "pool": "node-a",
                             "device": "gpu-0", "tolerations": []}],
                "config": [{"source": "FromClass", "requests": ["gpu"],
                            "opaque": {"driver": "gpu.bcd.dev", "parameters": {"a": 1}}}]},
                "nodeSelector": {}}}
        });
        let claim: ResourceClaim = serde_json::from_value(json).unwrap();
        assert_eq!(claim.metadata.uid, "u-1");
        let devices = &claim.status.allocation.as_ref().unwrap().devices;
        assert_eq!(devices.results[0].base_request(), "gpu");
        assert_eq!(devices.results[0].admin_access, None);
        assert_eq!(
            devices.config[0].opaque.as_ref().unwrap().driver,
            "gpu.bcd.dev"
        );
    }
}
