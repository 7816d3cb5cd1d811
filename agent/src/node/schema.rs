//! The API's request and answer bodies as types, written by the handlers and read by the
//! CLI's client ([`crate::node::client::call_as`]), so neither side spells a key by hand.
//! `gpu.reset`'s answer is [`ResetReport`], the type the reset itself returns.

use bcd_protocol::GpuUuid;
use serde::{Deserialize, Serialize};

pub use crate::health::reset::ResetReport;
use crate::health::status::GpuStatus;
use crate::health::Condition;
use crate::node::metrics::SamplingState;

/// Every refusal's body, the HTTP layer's own included: `{"code": "<kind>", "message":
/// "<sentence>"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The kind, for programs: `invalid-argument`, `gpu-busy`, `method-not-allowed`, ...
    pub code: String,
    /// The sentence, for the operator.
    pub message: String,
}

/// `GET /v1/status`. A key the answer lacks (a node of another version) reads as empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeStatus {
    /// `nvml` when `nvidia-smi` answered the last collection (a CUDA driver version).
    pub capabilities: Vec<String>,
    /// The inventory's hash.
    pub inventory_hash: String,
    /// Seconds since the last collection; `null` before the first.
    pub inventory_age_s: Option<u64>,
    /// Collections since the node started; 0 while it starts.
    pub collections: u64,
    /// Why `nvidia-smi` did not answer the last collection, when it did not.
    pub nvidia_smi_error: Option<String>,
    /// One line per GPU, with its verdict.
    pub gpus: Vec<GpuStatus>,
    /// This boot's conditions.
    pub conditions: Vec<DescribedCondition>,
    /// How the sampler runs.
    pub sampling: SamplingState,
    /// Every degraded input, in sentences.
    pub problems: Vec<String>,
    /// Which devices Kubernetes has.
    pub kubernetes: KubernetesHolds,
    /// Every hold (operator, device plugin, DRA), as `GET /v1/holds` lists them.
    pub holds: Vec<HoldView>,
    /// The MIG layout the node applied last, its state and each GPU's steps (`null`: none).
    pub mig_layout: Option<crate::mig::LayoutRecord>,
}

/// A condition with its `class` and `action` from the XID catalog (and the node's
/// overrides).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescribedCondition {
    /// The condition.
    #[serde(flatten)]
    pub condition: Condition,
    /// `hardware`, `application`, `interconnect`, ...
    pub class: String,
    /// What the operator does about it, as a sentence.
    pub action: String,
}

/// `GET /v1/conditions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConditionList {
    /// This boot's conditions.
    pub conditions: Vec<DescribedCondition>,
}

/// The Kubernetes holds, in `/v1/status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesHolds {
    /// Each Kubernetes hold.
    pub holds: Vec<KubernetesHold>,
}

/// One Kubernetes hold, and whether its release is pending.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesHold {
    /// The hold's id.
    pub hold: String,
    /// Its devices.
    pub devices: Vec<String>,
    /// Since when (Unix seconds) no pod has its devices; `null` while one has.
    pub release_pending_since: Option<u64>,
}

/// `POST /v1/inventory/refresh` (202).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefreshAnswer {
    /// A collection was asked for.
    pub requested: bool,
}

/// A hold, as `POST /v1/holds`, `DELETE /v1/holds/<id>` and `GET /v1/holds` answer it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldView {
    /// The hold's id.
    pub id: String,
    /// Its devices, as given.
    pub devices: Vec<String>,
    /// Whether a Kubernetes binding made it.
    #[serde(default)]
    pub kubernetes: bool,
    /// Who made it: `operator`, `device-plugin` or `dra` (absent in an older node's answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<crate::cdi::HoldOwner>,
    /// The spec file the node wrote for it (in the answer to an apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    /// When the hold was made (Unix seconds); absent for a hold made before bcd kept it, and
    /// in an older node's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<u64>,
}

impl From<&crate::cdi::Hold> for HoldView {
    fn from(hold: &crate::cdi::Hold) -> Self {
        Self {
            id: hold.id.as_str().to_owned(),
            devices: hold.devices.iter().map(|d| d.to_string()).collect(),
            kubernetes: hold.kubernetes,
            owner: Some(hold.owner()),
            spec: None,
            created_at: hold.created_at,
        }
    }
}

/// `GET /v1/holds`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldList {
    /// Every hold.
    pub holds: Vec<HoldView>,
}

/// What a passthrough step (`/v1/vfio/...`, `/v1/vm/...`) did, in a sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// The sentence.
    pub summary: String,
}

/// `POST /v1/holds`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldRequest {
    /// The hold's id.
    pub id: String,
    /// The devices to hold.
    pub devices: Vec<String>,
    /// Whether a Kubernetes binding asks: refused, since only the device plugins (and DRA
    /// claims) make Kubernetes holds; kept so that such a request is refused by name.
    #[serde(default)]
    pub kubernetes: bool,
}

/// `POST /v1/diag`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiagRequest {
    /// Only these GPUs; every GPU when empty.
    #[serde(default)]
    pub gpus: Vec<GpuUuid>,
    /// How many GPUs the node should have.
    #[serde(default)]
    pub expected_gpus: Option<usize>,
}

/// `POST /v1/gpus/reset`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetRequest {
    /// The GPUs.
    pub gpus: Vec<GpuUuid>,
}

/// `GET /v1/remediations`: the recovery loop's record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remediations {
    /// Whether the node runs the loop (`bcd node --remediate`).
    pub enabled: bool,
    /// The boot the standings are for.
    #[serde(default)]
    pub boot_id: String,
    /// Each GPU's remediation now.
    #[serde(default)]
    pub gpus: std::collections::BTreeMap<GpuUuid, crate::health::status::RemediationView>,
    /// Every remediation kept, oldest first: GPU, reason, steps with times, result.
    #[serde(default)]
    pub remediations: Vec<crate::recovery::Remediation>,
}

/// `POST /v1/mig`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigRequest {
    /// The layout's name in the node's layout file (`--mig-config`).
    pub layout: String,
}

/// `GET /v1/mig`: the node's layout file and the layout applied last (`null`: none yet).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigStatus {
    /// The layout file the node reads at each apply.
    pub config: String,
    /// The layout applied last, its state and each GPU's steps.
    pub record: Option<crate::mig::LayoutRecord>,
}

/// `POST /v1/vfio/bind|release` (`device`), `/v1/vm/start|destroy` (`domain`),
/// `/v1/vm/restore` (`file`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassthroughRequest {
    /// A PCI address or GPU UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// A libvirt domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// A libvirt save file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    // The CLI read answers by string keys with `unwrap_or("?")`: a renamed key printed "?".
    // Both sides now use these types, and a body without a required key is refused.
    #[test]
    fn answers_round_trip_and_a_missing_key_is_an_error() {
        let hold = HoldView {
            id: "job1".into(),
            devices: vec!["GPU-00000061-0000-0000-0000-000000000000".into()],
            kubernetes: false,
            owner: Some(crate::cdi::HoldOwner::Operator),
            spec: None,
            created_at: Some(1_700_000_000),
        };
        let text = serde_json::to_string(&hold).unwrap();
        assert_eq!(serde_json::from_str::<HoldView>(&text).unwrap(), hold);
        assert!(serde_json::from_str::<HoldView>(r#"{"devices": []}"#).is_err());
        let request = PassthroughRequest {
            domain: Some("vm1".into()),
            ..PassthroughRequest::default()
        };
        assert_eq!(
            serde_json::to_string(&request).unwrap(),
            r#"{"domain":"vm1"}"#
        );
    }
}
