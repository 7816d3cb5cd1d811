//! NVIDIA's own CDI spec kept current (`bcd node --nvidia-cdi-spec PATH`): what the host
//! image's `container-toolkit` unit does, regenerating the spec "whenever the driver version
//! or `nvidia-smi -L` changes", as a node task.
//!
//! The stamp is a hash of the driver version and of what `nvidia-smi -L` tells (every GPU's
//! and MIG device's UUID), taken from each collection's inventory; it is kept in the data
//! folder (`nvidia-cdi-stamp`). When it differs (at start, after a collection, after a MIG
//! layout is applied) the node asks the helper to regenerate (`nvidia-ctk cdi generate`: the
//! helper owns the file and the command line; the agent names neither), then converges the
//! holds' specs (the node's task, `crate::node::nvidia_cdi`, does it). A regeneration that fails (no `nvidia-ctk`, a MIG GPU with no instances,
//! on which `nvidia-ctk` exits 1) is one problem sentence in status and is not tried again
//! until the stamp changes: never a loop. While a MIG layout is being applied nothing is
//! regenerated; the apply's last collection does it.

use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::inventory::document::Inventory;

/// The stamp's file in the data folder.
pub const STAMP_FILE: &str = "nvidia-cdi-stamp";

/// The stamp of an inventory: `sha256:<hex>` of the driver version and the sorted GPU and
/// MIG device UUIDs; `None` while nvidia-smi gives no driver version or no GPU.
pub fn stamp(inventory: &Inventory) -> Option<String> {
    let driver = inventory.gpu.driver_version.as_deref()?;
    if inventory.gpu.gpus.is_empty() {
        return None;
    }
    let mut lines: Vec<String> = Vec::new();
    for g in inventory.gpu.gpus.iter().filter(|g| !g.passed_through) {
        lines.push(format!("GPU {}", g.uuid));
        for d in g.mig.iter().flat_map(|m| &m.devices) {
            if let Some(uuid) = &d.uuid {
                lines.push(format!("MIG {uuid}"));
            }
        }
    }
    lines.sort();
    let mut h = Sha256::new();
    h.update(driver.as_bytes());
    for l in &lines {
        h.update(b"\n");
        h.update(l.as_bytes());
    }
    let digest = h.finalize();
    Some(format!(
        "sha256:{}",
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    ))
}

/// The regeneration's state: the stamp last tried in this run and why it failed.
#[derive(Debug, Default)]
pub struct Refresher {
    /// What was tried; the node's task (`crate::node::nvidia_cdi`) keeps it.
    pub state: Mutex<Tried>,
}

/// The stamp last tried in this run, why it failed, and how many runs there were.
#[derive(Debug, Default)]
pub struct Tried {
    pub stamp: Option<String>,
    pub problem: Option<String>,
    pub runs: u64,
}

impl Refresher {
    /// Why NVIDIA's spec is not current, while it is not.
    pub fn problem(&self) -> Option<String> {
        self.state.lock().ok().and_then(|s| s.problem.clone())
    }

    /// How many regenerations were asked of the helper in this run.
    pub fn runs(&self) -> u64 {
        self.state.lock().map(|s| s.runs).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::document::{Gpu, GpuSection, Mig, MigDevice};

    fn inventory(migs: &[&str]) -> Inventory {
        let mut g = Gpu::new(
            0,
            "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b".parse().unwrap(),
        );
        g.mig = Some(Mig {
            mode: Some(true),
            pending_mode: Some(true),
            devices: migs
                .iter()
                .map(|m| MigDevice {
                    uuid: Some(m.parse().unwrap()),
                    ..MigDevice::default()
                })
                .collect(),
            profiles: Vec::new(),
        });
        Inventory::new(GpuSection {
            driver_version: Some("535.183.01".into()),
            gpus: vec![g],
            ..GpuSection::default()
        })
    }

    #[test]
    fn the_stamp_follows_the_mig_devices_and_the_driver() {
        let a = stamp(&inventory(&["MIG-58866115-6175-6822-e455-1694c2bc414b"])).unwrap();
        let b = stamp(&inventory(&["MIG-7b9f6338-4ccb-a7ef-c2e9-89a467917b6a"])).unwrap();
        assert_ne!(a, b);
        assert_eq!(
            a,
            stamp(&inventory(&["MIG-58866115-6175-6822-e455-1694c2bc414b"])).unwrap()
        );
        let mut other = inventory(&["MIG-58866115-6175-6822-e455-1694c2bc414b"]);
        other.gpu.driver_version = Some("550.54.15".into());
        assert_ne!(stamp(&other).unwrap(), a);
        other.gpu.driver_version = None;
        assert_eq!(stamp(&other), None);
    }
}
