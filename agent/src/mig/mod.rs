//! MIG layouts: a named layout from a mig-parted-format file ([`config`]) planned against the
//! host ([`plan`], pure) and applied by the node as one guarded step through the helper
//! (the node's `mig_step`). This module owns the layout's record (`mig-layout.json` in the data folder:
//! the layout applied, its state `pending`, `success` or `failed`, and each GPU's steps) and
//! the profiles each GPU model offers (`mig-profiles.json`: `-lgip` answers only while MIG
//! mode is on, so each model's last answer is kept).
//!
//! The apply itself is a node step (`crate::node::mig_step`): this module never reaches the
//! node.
//!
//! Reading the host for a plan ([`gpus_now`]) takes the inventory, each GPU's PCI device id
//! from sysfs, `mig -lgipp`'s placements where a GPU has MIG on, and the kept profiles.

pub mod config;
pub mod plan;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bcd_protocol::{GpuUuid, PciAddress};
use serde::{Deserialize, Serialize};

use crate::inventory::document::Inventory;
use crate::smi::mig::ProfilePlacements;
use crate::state::{self, StateError};
use crate::sys::host::Host;
use plan::{GpuNow, Offer, OfferedProfile};

/// The layout record's file in the data folder.
pub const LAYOUT_FILE: &str = "mig-layout.json";
/// The kept profiles' file in the data folder.
pub const PROFILES_FILE: &str = "mig-profiles.json";
/// The layout record's format version.
pub const LAYOUT_VERSION: u32 = 1;
const PROFILES_VERSION: u32 = 1;

/// Why a layout was not planned or applied. `Display` is the operator's sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigError {
    /// The file is unreadable, malformed, or lacks the layout.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// The layout does not fit the host; nothing ran (boxed: its sentences' parts make it
    /// large).
    #[error(transparent)]
    Plan(Box<plan::PlanError>),
    /// The host cannot be read (no inventory from nvidia-smi).
    #[error("the host's GPUs cannot be read: {0}")]
    Host(String),
    /// A GPU to change is in use; nothing ran.
    #[error("gpu-busy: GPU {index} ({uuid}) is in use ({why}); no GPU was touched")]
    Busy {
        index: u32,
        uuid: GpuUuid,
        why: String,
    },
    /// Another apply runs now.
    #[error("a MIG layout is being applied now; try again when it is done (bcd mig status)")]
    Running,
    /// The node has no helper operation for it.
    #[error("bcd-helper does not offer the MIG operations: install matching versions of bcd and bcd-helper")]
    Unsupported,
}

impl MigError {
    /// The error document's code: `gpu-busy` for a busy GPU, `mig-refused` for a layout that
    /// cannot be used, `mig-running`, `host-unreadable`.
    pub fn code(&self) -> &'static str {
        match self {
            MigError::Busy { .. } => "gpu-busy",
            MigError::Config(_) | MigError::Plan(_) => "mig-refused",
            MigError::Running => "mig-running",
            MigError::Host(_) => "host-unreadable",
            MigError::Unsupported => "helper-unsupported",
        }
    }
}

impl From<plan::PlanError> for MigError {
    fn from(e: plan::PlanError) -> Self {
        Self::Plan(Box::new(e))
    }
}

impl From<Box<plan::PlanError>> for MigError {
    fn from(e: Box<plan::PlanError>) -> Self {
        Self::Plan(e)
    }
}

/// Where an applied layout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LayoutState {
    /// Being applied.
    Pending,
    /// Applied: the GPUs match it.
    Success,
    /// A step failed; the GPU it failed on has no instances and stays withdrawn.
    Failed,
}

impl LayoutState {
    /// The word, as mig-manager's `nvidia.com/mig.config.state` label spells it.
    pub fn word(self) -> &'static str {
        match self {
            LayoutState::Pending => "pending",
            LayoutState::Success => "success",
            LayoutState::Failed => "failed",
        }
    }
}

/// How one GPU came out of an apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRecord {
    /// nvidia-smi's index when the apply began.
    pub index: u32,
    pub uuid: GpuUuid,
    pub bus_id: PciAddress,
    /// `unchanged` (it already matched), `changed`, `failed`, `not-reached` (an earlier GPU
    /// failed first; this one was not touched).
    pub result: String,
    /// The steps that ran, in words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<String>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The last layout applied, as kept in [`LAYOUT_FILE`] and answered by `GET /v1/mig`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutRecord {
    pub version: u32,
    /// The layout's name.
    pub layout: String,
    pub state: LayoutState,
    /// Unix seconds.
    pub started_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<u64>,
    /// How long the apply took, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The GPUs the layout names.
    pub gpus: Vec<GpuRecord>,
    /// The step that failed, in words, and on which GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_step: Option<String>,
    /// What `nvidia-smi` or the helper said of the failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// GPUs withdrawn from use until an apply succeeds (the GPU a step failed on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withdrawn: Vec<GpuUuid>,
}

impl state::Versioned for LayoutRecord {
    fn version(&self) -> u32 {
        self.version
    }
}

impl LayoutRecord {
    /// The one sentence `bcd status` and the problems list say of a failed layout.
    pub fn problem(&self) -> Option<String> {
        (self.state == LayoutState::Failed).then(|| {
            format!(
                "MIG layout {} failed{}: {}; the GPU(s) stay withdrawn until an apply succeeds (bcd mig apply)",
                self.layout,
                self.failed_step
                    .as_deref()
                    .map(|s| format!(" at {s}"))
                    .unwrap_or_default(),
                self.message.as_deref().unwrap_or("see bcd mig status")
            )
        })
    }
}

/// Reads the layout record of `data_dir`; `None` when no layout was ever applied.
///
/// # Errors
/// A record that cannot be read (set aside when it does not parse).
pub fn load_record(data_dir: &Path) -> Result<Option<LayoutRecord>, StateError> {
    state::load_versioned(&data_dir.join(LAYOUT_FILE), LAYOUT_VERSION)
}

/// Writes the layout record atomically.
///
/// # Errors
/// The write's failure.
pub fn save_record(data_dir: &Path, record: &LayoutRecord) -> Result<(), StateError> {
    let bytes = serde_json::to_vec_pretty(record).unwrap_or_default();
    state::write_atomic(&data_dir.join(LAYOUT_FILE), &bytes, state::PRIVATE_MODE)
}

/// The profiles each GPU model offers, as last seen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptProfiles {
    pub version: u32,
    /// By product name.
    pub models: BTreeMap<String, Offer>,
}

impl state::Versioned for KeptProfiles {
    fn version(&self) -> u32 {
        self.version
    }
}

/// Reads the kept profiles; empty when there are none or they cannot be read (a plan then
/// checks after the mode change).
pub fn load_profiles(data_dir: &Path) -> KeptProfiles {
    match state::load_versioned::<KeptProfiles>(&data_dir.join(PROFILES_FILE), PROFILES_VERSION) {
        Ok(Some(kept)) => kept,
        Ok(None) => KeptProfiles::default(),
        Err(e) => {
            tracing::warn!("{e}");
            KeptProfiles::default()
        }
    }
}

/// Keeps what `gpus` offer now (those whose own `-lgip` answered) for their models.
///
/// # Errors
/// The write's failure.
pub fn keep_profiles(data_dir: &Path, gpus: &[GpuNow]) -> Result<(), StateError> {
    let mut kept = load_profiles(data_dir);
    let before = kept.models.clone();
    for gpu in gpus.iter().filter(|g| g.mig_enabled) {
        if let Some(offer) = &gpu.offer {
            if !offer.profiles.is_empty() {
                kept.models.insert(gpu.model.clone(), offer.clone());
            }
        }
    }
    if kept.models == before {
        return Ok(());
    }
    kept.version = PROFILES_VERSION;
    let bytes = serde_json::to_vec_pretty(&kept).unwrap_or_default();
    state::write_atomic(&data_dir.join(PROFILES_FILE), &bytes, state::PRIVATE_MODE)
}

/// The PCI device id as `device-filter` spells it (`0x20B210DE`: device, then vendor), from
/// sysfs.
fn device_id(host: &Host, address: &PciAddress) -> Option<u32> {
    let dir = host.path(format!("/sys/bus/pci/devices/{address}"));
    let read = |name: &str| -> Option<u32> {
        let text = std::fs::read_to_string(dir.join(name)).ok()?;
        u32::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok()
    };
    Some((read("device")? << 16) | read("vendor")?)
}

/// The GPUs as a plan sees them: the inventory's GPUs on the driver (not those passed
/// through), each with its PCI device id, MIG mode, instances and what it offers: its own
/// `-lgip` profiles with `placements`, else the kept answer for its model.
pub fn gpus_now(
    host: &Host,
    inventory: &Inventory,
    placements: &[ProfilePlacements],
    kept: &KeptProfiles,
) -> Vec<GpuNow> {
    let mut out = Vec::new();
    for g in inventory.gpu.gpus.iter().filter(|g| !g.passed_through) {
        let Some(address) = g.address() else {
            continue;
        };
        let model = g.name.clone().unwrap_or_else(|| "unknown".to_owned());
        let mig = g.mig.as_ref();
        let own: Vec<OfferedProfile> = mig
            .map(|m| {
                m.profiles
                    .iter()
                    .map(|p| {
                        let placed = placements
                            .iter()
                            .find(|pl| pl.gpu == g.index && pl.profile_id == p.id);
                        OfferedProfile {
                            name: p.name.clone(),
                            id: p.id,
                            total: p.instances_total.unwrap_or(0),
                            size: placed.map(|pl| pl.size),
                            starts: placed.map(|pl| pl.starts.clone()).unwrap_or_default(),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let offer = if own.is_empty() {
            kept.models.get(&model).cloned()
        } else {
            Some(Offer { profiles: own })
        };
        out.push(GpuNow {
            index: g.index,
            uuid: g.uuid.clone(),
            address,
            model,
            device_id: device_id(host, &address),
            mig_capable: mig.is_some_and(|m| m.mode.is_some()),
            mig_enabled: mig.and_then(|m| m.mode).unwrap_or(false),
            mig_pending: mig.and_then(|m| m.pending_mode.or(m.mode)).unwrap_or(false),
            instances: mig
                .map(|m| m.devices.iter().filter_map(|d| d.profile.clone()).collect())
                .unwrap_or_default(),
            offer,
        });
    }
    out.sort_by_key(|g| g.index);
    out
}

/// `mig -lgipp`'s placements; empty when no GPU has MIG on or it does not answer (the fit
/// check then counts instances only).
pub async fn placements(
    runner: &crate::smi::runner::Runner,
    inventory: &Inventory,
) -> Vec<ProfilePlacements> {
    let any_on = inventory
        .gpu
        .gpus
        .iter()
        .any(|g| g.mig.as_ref().and_then(|m| m.mode) == Some(true));
    if !any_on {
        return Vec::new();
    }
    match runner.run(&["mig", "-lgipp"]).await {
        Ok(answer) => crate::smi::mig::parse_placements(&answer.stdout).unwrap_or_else(|e| {
            tracing::warn!("{e}");
            Vec::new()
        }),
        Err(e) => {
            tracing::warn!("nvidia-smi mig -lgipp: {e}");
            Vec::new()
        }
    }
}

/// Where `bcd mig` and the node read layouts: `--mig-config`, else the default.
pub fn config_path(flag: Option<&Path>) -> PathBuf {
    flag.map_or_else(
        || PathBuf::from(config::DEFAULT_MIG_CONFIG),
        Path::to_path_buf,
    )
}

/// The node's layout state: one apply at a time, and the record last written.
#[derive(Debug, Default)]
pub struct Layouts {
    /// Held by the one apply that runs.
    pub running: tokio::sync::Mutex<()>,
    record: std::sync::Mutex<Option<LayoutRecord>>,
}

impl Layouts {
    /// The state with `record` (read at start).
    pub fn with(record: Option<LayoutRecord>) -> Self {
        Self {
            running: tokio::sync::Mutex::new(()),
            record: std::sync::Mutex::new(record),
        }
    }

    /// Whether an apply runs now.
    pub fn busy(&self) -> bool {
        self.running.try_lock().is_err()
    }

    /// The record last written.
    pub fn record(&self) -> Option<LayoutRecord> {
        self.record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Replaces the record last written.
    pub fn set(&self, record: LayoutRecord) {
        *self
            .record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(record);
    }
}
