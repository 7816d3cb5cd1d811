//! Holds and their CDI specs, built from NVIDIA's own spec.
//!
//! A hold reserves GPUs, MIG devices or slots (kept by [`crate::device::store`], with
//! [`crate::device::policy`] deciding what may be held together; the specs are its second
//! record, [`holds`]); for each hold bcd writes `<cdi>/bcd-<hold>.json` (kind
//! `bcd.dev/gpu`, one device per held device named by its id, and one named after the hold
//! for all of them), so `bcd.dev/gpu=<uuid>` is all a container needs. With the NVIDIA
//! Container Toolkit in CDI mode `NVIDIA_VISIBLE_DEVICES` alone grants nothing, so each held
//! device carries the edits of the device that stands for it in NVIDIA's spec ([`vendor`]):
//! its device nodes, never another GPU's. [`render`] builds a spec without I/O; [`converge`]
//! writes them all and removes those of released holds.
//!
//! This module never runs a privileged step and never writes a file other than
//! `bcd-<hold>.json` (the store writes `holds.json`); [`nvidia`] asks the helper to
//! regenerate NVIDIA's own spec, whose file only the helper writes.

pub(crate) mod converge;
pub(crate) mod holds;
pub mod nvidia;
pub(crate) mod render;
pub mod spec;
pub mod vendor;

pub(crate) use crate::device::id::IdError;
pub use crate::device::id::{DeviceId, HoldId};
pub use crate::device::store::Holds;
pub(crate) use crate::device::store::{Before, HoldError};
pub use crate::device::{Hold, HoldOwner};
pub use converge::converge;
pub(crate) use converge::{write_missing, ConvergeError, Convergence};
pub use holds::open_holds;
pub use render::{render, HoldRequest, Rendered};
pub use vendor::{read_vendor_specs, DeviceCatalog, VendorSpec};

pub(crate) use crate::device::id::HOLD_SPEC_PREFIX;

/// The folders vendor specs are read from, in order: the CDI folder, then the toolkit's
/// `/var/run/cdi` under the host's root.
pub(crate) fn vendor_dirs(
    cdi_dir: &std::path::Path,
    host: &crate::sys::host::Host,
) -> Vec<std::path::PathBuf> {
    vec![cdi_dir.to_path_buf(), host.path(vendor::DYNAMIC_CDI_DIR)]
}
