//! The devices converger: makes the CDI folder's `bcd-*.json` specs match the hold store.
//! Run after each hold change and at start (a restart reconciles: missing specs are written,
//! orphans removed). It touches nothing but `bcd-<hold id>.json` files.

use std::fs;
use std::path::{Path, PathBuf};

use crate::state::{self, StateError, PUBLIC_MODE};

use super::holds::Holds;
use super::ids::{DeviceId, HoldId};
use super::render::{render, HoldRequest};
use super::vendor::{DeviceCatalog, VendorSpec};
use super::{HOLD_SPEC_PREFIX, HOLD_SPEC_SUFFIX};

/// A spec the converger could not write or remove. `Display` is the operator's sentence.
#[derive(Debug, thiserror::Error)]
pub enum ConvergeError {
    #[error("cannot write the CDI spec of hold {hold}: {source}")]
    Write { hold: HoldId, source: StateError },
    #[error("cannot remove the orphaned CDI spec {path}: {source}")]
    Remove {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot list the CDI folder {path}: {source}")]
    List {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a regular file; bcd leaves it alone: remove it")]
    NotAFile { path: PathBuf },
}

/// What one convergence did.
#[derive(Debug, Default)]
pub struct Convergence {
    /// Specs written because they were missing or differed.
    pub written: Vec<PathBuf>,
    /// Specs already as they should be (left untouched, so their mtime tells when they last
    /// changed).
    pub unchanged: Vec<PathBuf>,
    /// Orphaned specs removed: their hold is gone.
    pub removed: Vec<PathBuf>,
    /// Per hold, held devices NVIDIA's spec does not name.
    pub unnamed: Vec<(HoldId, Vec<DeviceId>)>,
    /// What failed; the rest was still done.
    pub errors: Vec<ConvergeError>,
}

/// Writes every hold's spec into `cdi_dir` (0644, atomically, only when its content
/// changes) and removes the `bcd-<id>.json` files of holds that no longer exist. Files whose
/// name is not `bcd-<valid hold id>.json` are never touched. Logs, with `tracing::warn!`,
/// "NVIDIA's CDI spec does not name held devices" for each hold that has some.
pub fn converge(
    holds: &Holds,
    vendor: &[VendorSpec],
    catalog: &DeviceCatalog,
    cdi_dir: &Path,
) -> Convergence {
    let mut out = Convergence::default();
    for hold in holds.list() {
        let rendered = render(
            HoldRequest {
                hold: &hold.id,
                devices: &hold.devices,
                kubernetes: hold.kubernetes,
            },
            vendor,
            catalog,
        );
        if !rendered.unnamed.is_empty() {
            warn_unnamed(&hold.id, &rendered.unnamed, rendered.vendor.as_deref());
            out.unnamed
                .push((hold.id.clone(), rendered.unnamed.clone()));
        }
        let path = cdi_dir.join(hold.id.spec_file_name());
        let bytes = rendered.to_json();
        if matches!(state::read(&path), Ok(Some(old)) if old == bytes) {
            out.unchanged.push(path);
            continue;
        }
        match state::write_atomic(&path, &bytes, PUBLIC_MODE) {
            Ok(()) => out.written.push(path),
            Err(source) => out.errors.push(ConvergeError::Write {
                hold: hold.id.clone(),
                source,
            }),
        }
    }
    remove_orphans(holds, cdi_dir, &mut out);
    out
}

/// Logs the devices a hold's spec lacks NVIDIA's edits for.
pub fn warn_unnamed(hold: &HoldId, unnamed: &[DeviceId], vendor: Option<&Path>) {
    let devices: Vec<&str> = unnamed.iter().map(DeviceId::as_str).collect();
    tracing::warn!(
        hold = %hold,
        devices = %devices.join(","),
        vendor_spec = %vendor.map(|p| p.display().to_string()).unwrap_or_default(),
        "NVIDIA's CDI spec does not name held devices; the hold's spec lacks their device \
         nodes until the toolkit regenerates NVIDIA's spec"
    );
}

/// The hold id a file name belongs to, when it is one of bcd's specs.
fn hold_of_file_name(name: &str) -> Option<HoldId> {
    name.strip_prefix(HOLD_SPEC_PREFIX)?
        .strip_suffix(HOLD_SPEC_SUFFIX)?
        .parse()
        .ok()
}

fn remove_orphans(holds: &Holds, cdi_dir: &Path, out: &mut Convergence) {
    let entries = match fs::read_dir(cdi_dir) {
        Ok(e) => e,
        Err(source) => {
            out.errors.push(ConvergeError::List {
                path: cdi_dir.to_path_buf(),
                source,
            });
            return;
        }
    };
    let mut orphans: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(hold_of_file_name)
                .is_some_and(|id| holds.get(&id).is_none())
        })
        .map(|e| e.path())
        .collect();
    orphans.sort();
    for path in orphans {
        match fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() => match fs::remove_file(&path) {
                Ok(()) => out.removed.push(path),
                Err(source) => out.errors.push(ConvergeError::Remove { path, source }),
            },
            Ok(_) => out.errors.push(ConvergeError::NotAFile { path }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => out.errors.push(ConvergeError::Remove { path, source }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bcd_hold_files_are_recognised() {
        assert_eq!(
            hold_of_file_name("bcd-job-1.json").map(|h| h.to_string()),
            Some("job-1".into())
        );
        for other in [
            "nvidia.json",
            "bcd-.json",
            "bcd-Job.json",
            "bcd-a.yaml",
            ".bcd-a.json.tmp-12",
            "bcd-a.json.unreadable-1",
        ] {
            assert!(hold_of_file_name(other).is_none(), "{other}");
        }
    }
}
