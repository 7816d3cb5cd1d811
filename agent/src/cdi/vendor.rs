//! NVIDIA's own CDI specs: finding them (every spec of kind `nvidia.com/gpu`, JSON or YAML, in
//! the CDI folder and then `/var/run/cdi`, never bcd's own `bcd-*` files), and finding in one
//! the device that stands for a held GPU or MIG device.
//!
//! The toolkit names devices by UUID (`GPU-…`, `MIG-…`), by index (`0`, `0:1`), by type and
//! index (`gpu0`, `mig0:1`), or only `all` (WSL, where `/dev/dxg` serves every GPU). A spec
//! that names any UUID is matched by UUID only: its index names may be stale, and a stale
//! index could hand over another GPU's device node.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::inventory::document::Inventory;
use crate::smi::list::ListedGpu;

use super::spec::{parse_spec, Device, Format, Spec, SpecError, MAX_SPEC_BYTES};
use super::HOLD_SPEC_PREFIX;
use crate::device::id::DeviceId;

/// The kind of NVIDIA's GPU specs.
pub(crate) const VENDOR_KIND: &str = "nvidia.com/gpu";
/// Where the toolkit's `nvidia-cdi-refresh` writes its spec; read after the CDI folder.
pub(crate) const DYNAMIC_CDI_DIR: &str = "/var/run/cdi";

/// A vendor spec and the file it came from.
#[derive(Debug, Clone)]
pub struct VendorSpec {
    pub path: PathBuf,
    pub spec: Spec,
}

/// A vendor spec file that could not be read. `Display` is the operator's sentence.
#[derive(Debug, thiserror::Error)]
pub enum VendorError {
    #[error("cannot read the CDI folder {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the CDI spec {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the CDI spec {path} {source}; bcd skips it")]
    Spec { path: PathBuf, source: SpecError },
}

/// What [`read_vendor_specs`] found.
#[derive(Debug, Default)]
pub struct VendorSpecs {
    /// NVIDIA's GPU specs, in reading order: folder by folder, by file name in each.
    pub specs: Vec<VendorSpec>,
    /// Files that looked like specs but could not be read; each was skipped.
    pub problems: Vec<VendorError>,
}

/// Reads every spec of kind [`VENDOR_KIND`] in `dirs`, in order. A missing folder is no
/// problem (most hosts have no `/var/run/cdi`); an unreadable or malformed file is reported
/// in `problems` and skipped, never fatal. Files over [`MAX_SPEC_BYTES`] are not read past
/// the limit.
pub fn read_vendor_specs(dirs: &[PathBuf]) -> VendorSpecs {
    let mut out = VendorSpecs::default();
    for dir in dirs {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                out.problems.push(VendorError::Dir {
                    path: dir.clone(),
                    source,
                });
                continue;
            }
        };
        let mut files: Vec<(String, Format)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !n.starts_with(HOLD_SPEC_PREFIX) && !n.starts_with('.'))
            .filter_map(|n| Format::of_file_name(&n).map(|f| (n, f)))
            .collect();
        files.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, format) in files {
            let path = dir.join(&name);
            let bytes = match read_bounded(&path) {
                Ok(Some(b)) => b,
                Ok(None) => continue,
                Err(source) => {
                    out.problems.push(VendorError::Read { path, source });
                    continue;
                }
            };
            match parse_spec(&bytes, format) {
                Ok(spec) if spec.kind == VENDOR_KIND => out.specs.push(VendorSpec { path, spec }),
                Ok(_) => {}
                Err(source) => out.problems.push(VendorError::Spec { path, source }),
            }
        }
    }
    out
}

/// Reads a regular file (following a link, as CDI does), at most one byte past the limit so
/// that the parser reports the size. `None` for something that is not a regular file.
fn read_bounded(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let file = fs::File::open(path)?;
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    file.take(MAX_SPEC_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// What bcd knows of one device from the inventory, to find it in a spec that names devices
/// by index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogEntry {
    pub id: DeviceId,
    /// The GPU's index, or the index of the GPU the MIG device is on.
    pub gpu_index: u32,
    /// The MIG device number (`nvidia-smi -L`'s `Device N`), which index names use (`0:N`).
    /// The inventory document does not carry it, so [`DeviceCatalog::from_inventory`] leaves
    /// it `None` and [`DeviceCatalog::add_mig_numbers`] fills it from `-L`; without it such
    /// names are not matched: guessing it from the order of the instances could hand over
    /// another instance's device nodes.
    pub mig_index: Option<u32>,
    /// GPU instance and compute instance ids of a MIG device.
    pub gi_ci: Option<(u32, u32)>,
}

/// The inventory's GPUs and MIG devices, by UUID.
#[derive(Debug, Clone, Default)]
pub struct DeviceCatalog {
    pub entries: Vec<CatalogEntry>,
}

impl DeviceCatalog {
    /// Every GPU of the inventory, and every MIG device whose UUID parses.
    pub fn from_inventory(inv: &Inventory) -> Self {
        let mut entries = Vec::new();
        for gpu in &inv.gpu.gpus {
            entries.push(CatalogEntry {
                id: DeviceId::from(&gpu.uuid),
                gpu_index: gpu.index,
                mig_index: None,
                gi_ci: None,
            });
            for mig in gpu.mig.iter().flat_map(|m| &m.devices) {
                if let Some(id) = mig.uuid.as_ref().map(DeviceId::from) {
                    entries.push(CatalogEntry {
                        id,
                        gpu_index: gpu.index,
                        mig_index: None,
                        gi_ci: mig.gi.zip(mig.ci),
                    });
                }
            }
        }
        Self { entries }
    }

    /// Sets each MIG device's number from `nvidia-smi -L` (matched by UUID and GPU index).
    pub fn add_mig_numbers(&mut self, listed: &[ListedGpu]) {
        for gpu in listed {
            for mig in &gpu.mig {
                let Ok(id) = mig.uuid.parse::<DeviceId>() else {
                    continue;
                };
                if let Some(e) = self
                    .entries
                    .iter_mut()
                    .find(|e| e.id == id && e.gpu_index == gpu.index)
                {
                    e.mig_index = Some(mig.device);
                }
            }
        }
    }

    /// The entry of `id`.
    pub fn get(&self, id: &DeviceId) -> Option<&CatalogEntry> {
        self.entries.iter().find(|e| &e.id == id)
    }
}

/// The names a spec that does not name UUIDs may use for a device.
fn index_names(entry: &CatalogEntry) -> Vec<String> {
    let i = entry.gpu_index;
    match entry.id {
        DeviceId::Gpu(_) | DeviceId::Slot { .. } => vec![i.to_string(), format!("gpu{i}")],
        DeviceId::Mig(_) | DeviceId::LegacyMig { .. } => {
            let mut names = Vec::new();
            if let Some(j) = entry.mig_index {
                names.push(format!("{i}:{j}"));
                names.push(format!("mig{i}:{j}"));
            }
            // NVIDIA's DRA prototype names instances by GPU, GI and CI, which the inventory has.
            if let Some((gi, ci)) = entry.gi_ci {
                names.push(format!("mig-gpu{i}-gi{gi}-ci{ci}"));
            }
            names
        }
    }
}

/// Whether a spec names any device by UUID.
pub fn names_uuids(spec: &Spec) -> bool {
    spec.devices
        .iter()
        .any(|d| d.name.starts_with("GPU-") || d.name.starts_with("MIG-"))
}

/// Whether a device node is one GPU's own (`/dev/nvidia<N>`), not shared by all.
fn is_per_gpu_node(path: &str) -> bool {
    path.strip_prefix("/dev/nvidia")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The vendor device that stands for `id` in `spec` (for a slot: its GPU's), if the spec
/// names it:
/// - by UUID when the spec names any UUID;
/// - otherwise by index (`0`, `gpu0`, `0:1`, `mig0:1`, `mig-gpu0-gi1-ci0`), with the
///   inventory's index of the device;
/// - otherwise WSL's shape: a spec whose only device is `all` and whose `all` carries no
///   GPU's own `/dev/nvidia<N>` node stands for each GPU. (A management-mode `all` that holds
///   `/dev/nvidia0` does not: it would hand over every GPU.)
pub(crate) fn find_device<'s>(
    spec: &'s Spec,
    id: &DeviceId,
    catalog: &DeviceCatalog,
) -> Option<&'s Device> {
    // A slot stands for its GPU: a time-sliced share reaches the whole GPU's device node.
    let gpu_of_slot = matches!(id, DeviceId::Slot { .. })
        .then(|| id.gpu())
        .flatten();
    let id = gpu_of_slot.as_ref().unwrap_or(id);
    let by_name = |name: &str| spec.devices.iter().find(|d| d.name == name);
    if names_uuids(spec) {
        return by_name(&id.cdi_name()).or_else(|| by_name(&id.to_string()));
    }
    if let Some(entry) = catalog.get(id) {
        if let Some(found) = index_names(entry).iter().find_map(|n| by_name(n)) {
            return Some(found);
        }
    }
    match spec.devices.as_slice() {
        [only] if only.name == "all" && matches!(id, DeviceId::Gpu(_)) => {
            let per_gpu = only
                .container_edits
                .device_nodes
                .iter()
                .any(|n| is_per_gpu_node(&n.path));
            (!per_gpu).then_some(only)
        }
        _ => None,
    }
}
