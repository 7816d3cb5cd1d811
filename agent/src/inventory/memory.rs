//! The memory of GPUs passed through to VMs (`<data-dir>/gpus-seen.json`).
//!
//! A GPU bound to `vfio-pci` is invisible to the NVIDIA driver, so neither procfs nor
//! `nvidia-smi` lists it while a VM holds it. After every enriched collection the node service
//! records each GPU by its PCI address; GPUs not listed now are kept, since they may be in a VM
//! right now. A collection then reports a remembered GPU found on `vfio-pci`
//! ([`passed_through`]), after the driver's GPUs, with what stays true while a VM has it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bcd_protocol::{GpuUuid, PciAddress};
use serde::{Deserialize, Serialize};

use crate::inventory::document::Gpu;
use crate::state::{self, StateError, PRIVATE_MODE};
use crate::sys::host::Host;

/// The file's name in the data folder.
pub const FILE_NAME: &str = "gpus-seen.json";
/// The format version written; a file of another version is set aside, not misread.
const FORMAT_VERSION: u32 = 1;

/// What bcd remembers of a GPU: only what stays true while a VM holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeenGpu {
    pub uuid: GpuUuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_mib: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vbios: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board_part_number: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct SeenFile {
    version: u32,
    /// By PCI address in the kernel's form.
    #[serde(deserialize_with = "nameable_gpus")]
    gpus: BTreeMap<PciAddress, SeenGpu>,
}

/// The remembered GPUs, without an entry whose address or UUID names nothing (an earlier bcd
/// kept whatever UUID the driver printed, `GPU-????...` for a GPU it could not initialise):
/// such an entry could not be named to `vfio-pci` or a VM, and one of them must not cost the
/// file every other GPU. It is logged and left out; the next write drops it.
fn nameable_gpus<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<PciAddress, SeenGpu>, D::Error> {
    let raw: BTreeMap<String, serde_json::Value> = BTreeMap::deserialize(d)?;
    Ok(raw
        .into_iter()
        .filter_map(|(address, gpu)| {
            let parsed = address
                .parse::<PciAddress>()
                .map_err(|e| e.to_string())
                .and_then(|a| {
                    serde_json::from_value::<SeenGpu>(gpu)
                        .map(|g| (a, g))
                        .map_err(|e| e.to_string())
                });
            parsed
                .inspect_err(|e| {
                    tracing::warn!(
                        "{FILE_NAME}: the GPU remembered at {address:?} is left out: {e}"
                    );
                })
                .ok()
        })
        .collect())
}

impl state::Versioned for SeenFile {
    fn version(&self) -> u32 {
        self.version
    }
}

/// The passthrough memory in one data folder.
#[derive(Debug, Clone)]
pub struct GpuMemory {
    path: PathBuf,
}

impl GpuMemory {
    /// The memory kept in `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            path: data_dir.join(FILE_NAME),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What is remembered, by PCI address; empty before the first write.
    ///
    /// # Errors
    /// [`StateError::SetAside`] when the file does not parse (it was renamed, nothing lost),
    /// [`StateError::Io`] or [`StateError::Symlink`] when it cannot be read.
    pub fn load(&self) -> Result<BTreeMap<PciAddress, SeenGpu>, StateError> {
        let parsed: Option<SeenFile> = state::load_versioned(&self.path, FORMAT_VERSION)?;
        Ok(parsed.map(|f| f.gpus).unwrap_or_default())
    }

    /// Records every GPU of a collection that has a bus id, keeping those not listed now.
    ///
    /// # Errors
    /// As [`GpuMemory::load`] (a set-aside file is reported after the new one is written, so
    /// the collection is still remembered), and [`StateError::Io`] when writing fails.
    pub fn remember(&self, gpus: &[Gpu]) -> Result<(), StateError> {
        let (mut known, set_aside) = match self.load() {
            Ok(known) => (known, None),
            Err(e @ StateError::SetAside { .. }) => (BTreeMap::new(), Some(e)),
            Err(e) => return Err(e),
        };
        for gpu in gpus.iter().filter(|g| !g.passed_through) {
            let Some(address) = gpu.address() else {
                continue;
            };
            known.insert(
                address,
                SeenGpu {
                    uuid: gpu.uuid.clone(),
                    name: gpu.name.clone(),
                    architecture: gpu.architecture.clone(),
                    memory_total_mib: gpu.memory_total_mib,
                    serial: gpu.serial.clone(),
                    vbios: gpu.vbios.clone(),
                    board_part_number: gpu.board_part_number.clone(),
                    compute_capability: gpu.compute_capability.clone(),
                },
            );
        }
        let mut bytes = serde_json::to_vec_pretty(&SeenFile {
            version: FORMAT_VERSION,
            gpus: known,
        })
        .map_err(|e| StateError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        bytes.push(b'\n');
        state::write_atomic(&self.path, &bytes, PRIVATE_MODE)?;
        set_aside.map_or(Ok(()), Err)
    }

    /// The PCI address of a GPU by UUID, through the memory (for the VFIO runtimes).
    ///
    /// # Errors
    /// As [`GpuMemory::load`].
    pub fn gpu_address(&self, uuid: &GpuUuid) -> Result<Option<PciAddress>, StateError> {
        Ok(self
            .load()?
            .into_iter()
            .find(|(_, g)| &g.uuid == uuid)
            .map(|(a, _)| a))
    }
}

/// The remembered GPUs now bound to `vfio-pci` and not listed by the driver, indexed after
/// `listed`. A function never seen on the driver is left out: there is no UUID to name it by.
pub(crate) fn passed_through(
    host: &Host,
    seen: &BTreeMap<PciAddress, SeenGpu>,
    listed: &[Gpu],
) -> Vec<Gpu> {
    let listed_addresses: Vec<PciAddress> = listed.iter().filter_map(Gpu::address).collect();
    let mut next = listed.iter().map(|g| g.index + 1).max().unwrap_or(0);
    crate::sys::pci::functions(host)
        .into_iter()
        .filter(|f| f.is_nvidia_gpu() && f.driver.as_deref() == Some("vfio-pci"))
        .filter(|f| !listed_addresses.contains(&f.address))
        .filter_map(|f| {
            let s = seen.get(&f.address)?;
            let gpu = Gpu {
                name: s.name.clone(),
                architecture: s.architecture.clone(),
                bus_id: Some(f.address),
                numa_node: f.numa_node,
                serial: s.serial.clone(),
                vbios: s.vbios.clone(),
                board_part_number: s.board_part_number.clone(),
                compute_capability: s.compute_capability.clone(),
                memory_total_mib: s.memory_total_mib,
                passed_through: true,
                ..Gpu::new(next, s.uuid.clone())
            };
            next += 1;
            Some(gpu)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const A: &str = "GPU-00000061-0000-0000-0000-000000000000";
    const B: &str = "GPU-00000062-0000-0000-0000-000000000000";

    fn gpu(uuid: &str, bus: &str) -> Gpu {
        Gpu {
            bus_id: Some(bus.parse().unwrap()),
            name: Some("NVIDIA L40S".into()),
            ..Gpu::new(0, uuid.parse().unwrap())
        }
    }

    // What an earlier bcd could store: a GPU under the UUID the driver printed while it could
    // not initialise the GPU. One such entry set the whole file aside once UUIDs were typed.
    #[test]
    fn a_remembered_gpu_whose_uuid_names_nothing_costs_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        let memory = GpuMemory::new(dir.path());
        std::fs::write(
            memory.path(),
            format!(
                r#"{{"version": 1, "gpus": {{
                    "0000:18:00.0": {{"uuid": "GPU-????????-????-????-????-????????????"}},
                    "0000:3b:00.0": {{"uuid": "{B}", "name": "NVIDIA L40S"}}
                }}}}"#
            ),
        )
        .unwrap();
        let known = memory.load().unwrap();
        assert_eq!(known.len(), 1, "{known:?}");
        assert_eq!(known[&"0000:3b:00.0".parse().unwrap()].uuid, B);
        assert!(memory.path().exists(), "the file is not set aside");
    }

    #[test]
    fn remembered_gpus_are_kept_when_not_listed() {
        let dir = tempfile::tempdir().unwrap();
        let memory = GpuMemory::new(dir.path());
        memory
            .remember(&[gpu(A, "00000000:18:00.0"), gpu(B, "00000000:3B:00.0")])
            .unwrap();
        memory.remember(&[gpu(A, "00000000:18:00.0")]).unwrap();
        let known = memory.load().unwrap();
        assert_eq!(known.len(), 2);
        assert_eq!(
            memory
                .gpu_address(&B.parse().unwrap())
                .unwrap()
                .unwrap()
                .to_string(),
            "0000:3b:00.0"
        );
        let mode = std::fs::metadata(memory.path())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn a_torn_memory_is_set_aside_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let memory = GpuMemory::new(dir.path());
        std::fs::write(memory.path(), b"{\"version\":1,\"gpus\":{").unwrap();
        let err = memory.remember(&[gpu(A, "00000000:18:00.0")]).unwrap_err();
        assert!(matches!(err, StateError::SetAside { .. }), "{err}");
        assert_eq!(
            memory.load().unwrap().len(),
            1,
            "the new collection is still remembered"
        );
        let kept = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains("unreadable"))
            .count();
        assert_eq!(kept, 1);
    }

    #[test]
    fn a_vfio_bound_gpu_is_reported_from_memory_only() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path().join("root"), "nvidia-smi");
        let function = |addr: &str, class: &str, driver: &str| {
            let path = host.path(format!("/sys/bus/pci/devices/{addr}"));
            std::fs::create_dir_all(&path).unwrap();
            std::fs::write(path.join("vendor"), "0x10de\n").unwrap();
            std::fs::write(path.join("class"), format!("{class}\n")).unwrap();
            std::fs::write(path.join("numa_node"), "1\n").unwrap();
            std::fs::create_dir_all(host.path(format!("/sys/bus/pci/drivers/{driver}"))).unwrap();
            std::os::unix::fs::symlink(
                format!("../../../bus/pci/drivers/{driver}"),
                path.join("driver"),
            )
            .unwrap();
        };
        function("0000:18:00.0", "0x030200", "nvidia");
        function("0000:3b:00.0", "0x030200", "vfio-pci");
        function("0000:3b:00.1", "0x040300", "vfio-pci");
        function("0000:5e:00.0", "0x030200", "vfio-pci");
        let memory = GpuMemory::new(dir.path());
        memory
            .remember(&[gpu(A, "00000000:18:00.0"), gpu(B, "00000000:3B:00.0")])
            .unwrap();
        let listed = vec![Gpu {
            index: 0,
            ..gpu(A, "00000000:18:00.0")
        }];
        let found = passed_through(&host, &memory.load().unwrap(), &listed);
        assert_eq!(
            found.len(),
            1,
            "the never-seen 5e:00.0 and the audio function are left out"
        );
        assert_eq!(found[0].uuid, B);
        assert_eq!(found[0].index, 1);
        assert!(found[0].passed_through);
        assert_eq!(found[0].numa_node, Some(1));
    }
}
