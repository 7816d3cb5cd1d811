//! The devices converger: makes the CDI folder's `bcd-*.json` specs match the hold store.
//! Run at start (writing only the specs that are missing, before any collection), after each
//! hold change and after each collection. It writes the specs of the store's holds and
//! removes only the specs of holds the store saw released: a `bcd-<id>.json` of a hold the
//! store does not know is reported and left alone (it may be the only record of a running
//! job's hold). It touches nothing but `bcd-<hold id>.json` files.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::state::{self, StateError, PUBLIC_MODE};

use super::holds::hold_of_file_name;
use super::render::{record_claim, render, HoldRequest, COMMON_RUNTIMES_CDI_VERSION};
use super::vendor::{DeviceCatalog, VendorSpec};
use crate::device::id::{DeviceId, HoldId};
use crate::device::store::{HoldError, Holds};

/// A spec the converger could not write or remove. `Display` is the operator's sentence.
#[derive(Debug, thiserror::Error)]
pub enum ConvergeError {
    #[error("cannot write the CDI spec of hold {hold}: {source}")]
    Write { hold: HoldId, source: StateError },
    #[error("cannot remove the CDI spec {path} of a released hold: {source}")]
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
    #[error("cannot record that released holds' specs are gone: {0}")]
    Store(HoldError),
}

/// What one convergence did.
#[derive(Debug, Default)]
pub struct Convergence {
    /// Specs written because they were missing or differed.
    pub written: Vec<PathBuf>,
    /// Specs already as they should be (left untouched, so their mtime tells when they last
    /// changed).
    pub unchanged: Vec<PathBuf>,
    /// Specs of released holds removed.
    pub removed: Vec<PathBuf>,
    /// `bcd-<id>.json` specs of holds the store neither has nor released: left alone.
    pub strangers: Vec<PathBuf>,
    /// Per hold, held devices NVIDIA's spec does not name.
    pub unnamed: Vec<(HoldId, Vec<DeviceId>)>,
    /// What failed; the rest was still done.
    pub errors: Vec<ConvergeError>,
}

/// Which specs a pass writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Every hold's, where it differs.
    Full,
    /// Only those that are missing: at start, before the first collection, an index-named
    /// vendor spec cannot be matched yet, and a good spec must not be replaced by a worse one.
    Missing,
}

/// Writes every hold's spec into `cdi_dir` (0644, atomically, only when its content
/// changes), removes the specs of holds released since, and reports the specs of holds it
/// does not know. Files whose name is not `bcd-<valid hold id>.json` are never touched. A
/// store that is read-only ([`Holds::frozen`]) is not converged at all. Logs, with
/// `tracing::warn!`, "NVIDIA's CDI spec does not name held devices" for each hold that has
/// some, and once per process when a vendor field forces a `cdiVersion` above what common
/// runtimes read.
pub fn converge(
    holds: &mut Holds,
    vendor: &[VendorSpec],
    catalog: &DeviceCatalog,
    cdi_dir: &Path,
) -> Convergence {
    pass(holds, vendor, catalog, cdi_dir, Pass::Full)
}

/// As [`converge`], but writes only the specs that are missing: the start-up pass, run
/// before any collection.
pub fn write_missing(
    holds: &mut Holds,
    vendor: &[VendorSpec],
    catalog: &DeviceCatalog,
    cdi_dir: &Path,
) -> Convergence {
    pass(holds, vendor, catalog, cdi_dir, Pass::Missing)
}

fn pass(
    holds: &mut Holds,
    vendor: &[VendorSpec],
    catalog: &DeviceCatalog,
    cdi_dir: &Path,
    pass: Pass,
) -> Convergence {
    let mut out = Convergence::default();
    if holds.frozen().is_some() {
        return out;
    }
    for hold in holds.list() {
        let path = cdi_dir.join(hold.id.spec_file_name());
        if pass == Pass::Missing && fs::symlink_metadata(&path).is_ok() {
            out.unchanged.push(path);
            continue;
        }
        let mut rendered = render(
            HoldRequest {
                hold: &hold.id,
                devices: &hold.devices,
                kubernetes: hold.kubernetes,
            },
            vendor,
            catalog,
        );
        if let Some(claim) = &hold.claim {
            record_claim(&mut rendered.spec, &hold.id, claim);
        }
        if !rendered.unnamed.is_empty() {
            warn_unnamed(&hold.id, &rendered.unnamed, rendered.vendor.as_deref());
            out.unnamed
                .push((hold.id.clone(), rendered.unnamed.clone()));
        }
        if let Some(field) = rendered.version_forced_by {
            warn_version_once(&hold.id, &rendered.spec.cdi_version, field);
        }
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
    remove_released(holds, cdi_dir, &mut out);
    find_strangers(holds, cdi_dir, &mut out);
    out
}

/// Logs the devices a hold's spec lacks NVIDIA's edits for.
/// The sentence for held devices NVIDIA's spec (`vendor`, when one was read) does not name.
pub fn unnamed_sentence(hold: &HoldId, unnamed: &[DeviceId], vendor: Option<&Path>) -> String {
    let devices: Vec<String> = unnamed.iter().map(ToString::to_string).collect();
    let devices = devices.join(", ");
    match vendor {
        None => format!(
            "no NVIDIA CDI spec was found, so hold {hold}'s spec has no device nodes for \
             {devices}: a container given it gets no GPU; generate NVIDIA's spec (nvidia-ctk cdi \
             generate --output=/etc/cdi/nvidia.yaml)"
        ),
        Some(p) => format!(
            "NVIDIA's CDI spec {} does not name {devices} of hold {hold}: the hold's spec lacks \
             their device nodes until the toolkit regenerates it (nvidia-ctk cdi generate)",
            p.display()
        ),
    }
}

pub fn warn_unnamed(hold: &HoldId, unnamed: &[DeviceId], vendor: Option<&Path>) {
    let devices: Vec<String> = unnamed.iter().map(DeviceId::to_string).collect();
    tracing::warn!(
        hold = %hold,
        devices = %devices.join(","),
        vendor_spec = %vendor.map(|p| p.display().to_string()).unwrap_or_default(),
        "NVIDIA's CDI spec does not name held devices; the hold's spec lacks their device \
         nodes until the toolkit regenerates NVIDIA's spec"
    );
}

static VERSION_WARNED: AtomicBool = AtomicBool::new(false);

/// Logs, once per process, that a vendor field raised a hold spec's `cdiVersion` above what
/// common runtimes read.
fn warn_version_once(hold: &HoldId, version: &str, field: &str) {
    if VERSION_WARNED.swap(true, Ordering::Relaxed) {
        return;
    }
    tracing::warn!(
        hold = %hold,
        cdi_version = %version,
        field = %field,
        "NVIDIA's CDI spec uses {field}, so the hold's spec needs cdiVersion {version}; \
         runtimes that read only up to {COMMON_RUNTIMES_CDI_VERSION} (podman 4.3 of Debian 12, \
         containerd before 1.7.2) refuse it as \"unresolvable CDI devices\" (logged once)"
    );
}

fn remove_released(holds: &mut Holds, cdi_dir: &Path, out: &mut Convergence) {
    let mut gone = Vec::new();
    for id in holds.released() {
        if holds.get(id).is_some() {
            continue;
        }
        let path = cdi_dir.join(id.spec_file_name());
        match fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() => match fs::remove_file(&path) {
                Ok(()) => {
                    out.removed.push(path);
                    gone.push(id.clone());
                }
                Err(source) => out.errors.push(ConvergeError::Remove { path, source }),
            },
            Ok(_) => out.errors.push(ConvergeError::NotAFile { path }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => gone.push(id.clone()),
            Err(source) => out.errors.push(ConvergeError::Remove { path, source }),
        }
    }
    if let Err(e) = holds.forget_released(&gone) {
        out.errors.push(ConvergeError::Store(e));
    }
}

fn find_strangers(holds: &Holds, cdi_dir: &Path, out: &mut Convergence) {
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
    let mut strangers: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(hold_of_file_name)
                .is_some_and(|id| holds.get(&id).is_none() && !holds.released().any(|r| *r == id))
        })
        .map(|e| e.path())
        .collect();
    strangers.sort();
    for path in &strangers {
        tracing::warn!(
            spec = %path.display(),
            "a hold spec of a hold bcd does not have; it is left alone: remove it once no \
             container uses it"
        );
    }
    out.strangers = strangers;
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
