//! The hold specs as the second record of the holds: which hold a `bcd-<id>.json` is, and the
//! holds the specs of a CDI folder record, from which the store ([`crate::device::store`]) is
//! rebuilt when `holds.json` is lost.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::spec::{parse_spec, Format, MAX_SPEC_BYTES};
use crate::device::id::{DeviceId, HoldId};
use crate::device::id::{HOLD_SPEC_PREFIX, HOLD_SPEC_SUFFIX};
use crate::device::store::{Holds, Opened, Rebuilt};
use crate::device::{Hold, HoldOwner};

pub use crate::device::store::HOLDS_FILE;

/// Opens the hold store of `data_dir` ([`Holds::open`]), rebuilt from the hold specs in
/// `cdi_dir` when `holds.json` is missing or unreadable.
pub fn open_holds(data_dir: &Path, cdi_dir: &Path) -> Opened {
    Holds::open(data_dir, || {
        let (holds, problems) = rebuild_from_specs(cdi_dir);
        Rebuilt {
            holds,
            problems,
            from: format!("the hold specs in {}", cdi_dir.display()),
        }
    })
}

/// The hold id a file name belongs to, when it is one of bcd's specs (`bcd-<id>.json`).
pub fn hold_of_file_name(name: &str) -> Option<HoldId> {
    name.strip_prefix(HOLD_SPEC_PREFIX)?
        .strip_suffix(HOLD_SPEC_SUFFIX)?
        .parse()
        .ok()
}

/// The holds the `bcd-<id>.json` specs of `cdi_dir` record, and what could not be read.
/// A spec's devices are those its device names stand for (the device named after the hold
/// stands for the whole hold and is skipped); a spec without common edits is a Kubernetes
/// binding's (every other hold's spec sets `NVIDIA_VISIBLE_DEVICES=void` there). A DRA
/// claim's hold gets back the claim its spec records ([`super::render::record_claim`]); one
/// whose spec records none (written before bcd recorded claims) is a claim's by its id alone,
/// and stays held until the kubelet unprepares that uid or an operator forces its release.
pub fn rebuild_from_specs(cdi_dir: &Path) -> (Vec<Hold>, Vec<String>) {
    let mut holds = Vec::new();
    let mut problems = Vec::new();
    let Ok(entries) = fs::read_dir(cdi_dir) else {
        return (holds, problems);
    };
    let mut files: Vec<(HoldId, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| Some((hold_of_file_name(e.file_name().to_str()?)?, e.path())))
        .collect();
    files.sort();
    for (id, path) in files {
        let spec = match fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() && m.len() <= MAX_SPEC_BYTES as u64 => fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| parse_spec(&b, Format::Json).map_err(|e| e.to_string())),
            Ok(_) => Err("is not a regular file under the size limit".to_owned()),
            Err(e) => Err(e.to_string()),
        };
        let spec = match spec {
            Ok(s) => s,
            Err(e) => {
                problems.push(format!(
                    "the hold spec {} cannot be read ({e}); it is left as it is and its hold is not rebuilt",
                    path.display()
                ));
                continue;
            }
        };
        let mut devices: Vec<DeviceId> = Vec::new();
        for d in &spec.devices {
            if let Some(device) = DeviceId::from_cdi_name(&d.name) {
                if !devices.contains(&device) {
                    devices.push(device);
                }
            }
        }
        if devices.is_empty() {
            problems.push(format!(
                "the hold spec {} names no device; its hold is not rebuilt",
                path.display()
            ));
            continue;
        }
        let claim = super::render::recorded_claim(&spec, &id);
        holds.push(Hold {
            owner: claim.as_ref().map(|_| HoldOwner::Dra),
            id,
            devices,
            kubernetes: spec.container_edits.is_empty(),
            gpus: BTreeMap::new(),
            unassigned_since: None,
            created_at: None,
            claim,
        });
    }
    (holds, problems)
}
