//! `<data-dir>/vm-gpus.json`: which libvirt domain each GPU this node passed through was given
//! to, so the metrics' `vm` label outlives a restart of the node (the domain keeps running, and
//! its GPUs stay on `vfio-pci`, while bcd is down).
//!
//! The file holds the boot id it was written in: no domain outlives a reboot, so a file of
//! another boot is read as empty (and replaced at the next change). Written atomically (0600)
//! on each change, read once at start; a file that does not parse, or of another format
//! version, is set aside like every state file ([`crate::state`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bcd_protocol::PciAddress;
use serde::{Deserialize, Serialize};

use crate::state::{self, StateError, Versioned, PRIVATE_MODE};

/// The file's name in the data folder.
pub const VM_GPUS_FILE: &str = "vm-gpus.json";

/// The file's format version.
const FORMAT_VERSION: u32 = 1;

/// The GPUs given to domains, by PCI address: the domain's name.
pub type VmGpus = BTreeMap<PciAddress, String>;

#[derive(Debug, Serialize, Deserialize)]
struct Document {
    version: u32,
    /// The boot the domains ran in.
    boot_id: String,
    gpus: VmGpus,
}

impl Versioned for Document {
    fn version(&self) -> u32 {
        self.version
    }
}

/// The file in `data_dir`.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(VM_GPUS_FILE)
}

/// What the file in `data_dir` says for boot `boot_id`; empty when it is absent or of
/// another boot.
///
/// # Errors
/// As [`state::load_versioned`]: a link, an unreadable file, or one set aside.
pub fn load(data_dir: &Path, boot_id: &str) -> Result<VmGpus, StateError> {
    Ok(
        state::load_versioned::<Document>(&path(data_dir), FORMAT_VERSION)?
            .filter(|d| d.boot_id == boot_id)
            .map(|d| d.gpus)
            .unwrap_or_default(),
    )
}

/// Writes `gpus`, given to domains in boot `boot_id`, to the file in `data_dir`.
///
/// # Errors
/// [`StateError::Io`] when the file cannot be written.
pub fn save(data_dir: &Path, boot_id: &str, gpus: &VmGpus) -> Result<(), StateError> {
    let file = path(data_dir);
    let mut bytes = serde_json::to_vec_pretty(&Document {
        version: FORMAT_VERSION,
        boot_id: boot_id.to_owned(),
        gpus: gpus.clone(),
    })
    .map_err(|e| StateError::Io {
        path: file.clone(),
        source: std::io::Error::other(e),
    })?;
    bytes.push(b'\n');
    state::write_atomic(&file, &bytes, PRIVATE_MODE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vm_gpus_read_back_in_their_boot_and_a_torn_file_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            load(dir.path(), "b1").unwrap().is_empty(),
            "no file is no GPU"
        );
        let gpus = VmGpus::from([("0000:3b:00.0".parse().unwrap(), "win11".to_owned())]);
        save(dir.path(), "b1", &gpus).unwrap();
        assert_eq!(load(dir.path(), "b1").unwrap(), gpus);
        let text = std::fs::read_to_string(path(dir.path())).unwrap();
        assert!(text.contains("\"0000:3b:00.0\": \"win11\""), "{text}");
        // After a reboot no domain runs: the labels are gone.
        assert!(load(dir.path(), "b2").unwrap().is_empty());
        std::fs::write(path(dir.path()), b"{\"version\": 1, \"gpus\": {\"0000:3b").unwrap();
        assert!(matches!(
            load(dir.path(), "b1"),
            Err(StateError::SetAside { .. })
        ));
    }
}
