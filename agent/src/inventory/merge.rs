//! The merge of the two layers, by UUID: procfs/sysfs first, then what `nvidia-smi` said.
//!
//! - The section's driver, CUDA driver and NVML versions come from the snapshot when it has
//!   them.
//! - A GPU both layers know takes every field from `nvidia-smi`, keeps the collector's index,
//!   and keeps the collector's NUMA node and architecture where `nvidia-smi` gave none.
//! - A GPU only `nvidia-smi` knows (WSL 2's paravirtual GPU) is appended with the next index.
//! - Without a snapshot the section keeps what procfs showed, with no CUDA driver version.

use std::collections::{BTreeMap, HashMap};

use crate::inventory::arch::guess_architecture;
use crate::inventory::document::{
    Ecc, EccCounts, Fabric, Gpu, GpuSection, Mig, MigDevice, MigProfile, NvLink, RowRemap,
};
use crate::inventory::procfs::ProcInventory;
use crate::smi::nvlink::Remote;
use crate::smi::snapshot::Snapshot;
use crate::smi::value;
use crate::smi::xml::{ComputeMode, XmlGpu};

/// Merges the procfs layer with a snapshot, when there is one.
pub fn merge(base: &ProcInventory, snapshot: Option<&Snapshot>) -> GpuSection {
    let mut section = GpuSection {
        driver_version: base.driver_version.clone(),
        ..GpuSection::default()
    };
    section.gpus = base
        .gpus
        .iter()
        .filter_map(|p| {
            Some(Gpu {
                index: p.index,
                uuid: p.uuid.clone()?,
                name: p.model.clone(),
                architecture: p.architecture.map(str::to_owned),
                bus_id: Some(p.address.nvml_bus_id()),
                numa_node: p.numa_node,
                vbios: p.vbios.clone(),
                ..Gpu::default()
            })
        })
        .collect();
    let Some(snap) = snapshot else { return section };
    if let Some(v) = &snap.xml.driver_version {
        section.driver_version = Some(v.clone());
    }
    if let Some(v) = &snap.xml.cuda_version {
        section.cuda_driver_version = Some(v.clone());
    }
    let mut next_index = section.gpus.iter().map(|g| g.index + 1).max().unwrap_or(0);
    for gpu in gpus_from_snapshot(snap) {
        match section.gpus.iter_mut().find(|g| g.uuid == gpu.uuid) {
            Some(known) => {
                let index = known.index;
                let numa_node = gpu.numa_node.or(known.numa_node);
                let architecture = gpu.architecture.clone().or(known.architecture.take());
                *known = Gpu {
                    index,
                    numa_node,
                    architecture,
                    ..gpu
                };
            }
            None => {
                section.gpus.push(Gpu {
                    index: next_index,
                    ..gpu
                });
                next_index += 1;
            }
        }
    }
    section
}

/// Every GPU of a snapshot as an inventory record, with `index` in `nvidia-smi`'s numbering.
pub fn gpus_from_snapshot(snap: &Snapshot) -> Vec<Gpu> {
    // nvidia-smi's index for each UUID: from -L, else the order of -q -x (the same order).
    let mut index_of: HashMap<String, u32> = snap
        .listed
        .iter()
        .map(|l| (l.uuid.to_ascii_lowercase(), l.index))
        .collect();
    let uuid_at = |i: u32| -> Option<String> {
        snap.listed
            .iter()
            .find(|l| l.index == i)
            .map(|l| l.uuid.clone())
            .or_else(|| snap.xml.gpus.get(i as usize).and_then(|g| g.uuid.clone()))
    };
    let by_bus: HashMap<String, String> = snap
        .xml
        .gpus
        .iter()
        .filter_map(|g| Some((bus_id_of(g)?, g.uuid.clone()?)))
        .collect();
    let mut out = Vec::new();
    for (position, x) in snap.xml.gpus.iter().enumerate() {
        let Some(uuid) = x.uuid.clone() else { continue };
        let position = u32::try_from(position).unwrap_or(u32::MAX);
        let index = *index_of
            .entry(uuid.to_ascii_lowercase())
            .or_insert(position);
        let listed = snap
            .listed
            .iter()
            .find(|l| l.uuid.eq_ignore_ascii_case(&uuid));
        let compute_capability = snap
            .compute_caps
            .iter()
            .find(|c| c.uuid.eq_ignore_ascii_case(&uuid))
            .and_then(|c| c.compute_cap.clone());
        let nvlinks = nvlinks_of(snap, &uuid, &by_bus);
        let topology: BTreeMap<String, String> = snap
            .topology
            .iter()
            .find(|row| row.gpu == index)
            .map(|row| {
                row.peers
                    .iter()
                    .filter_map(|(peer, link)| Some((uuid_at(*peer)?, link.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let mig = mig_of(
            x,
            listed.map(|l| l.mig.as_slice()).unwrap_or_default(),
            snap,
            index,
        );
        let name = x.product_name.clone();
        let architecture = x
            .architecture
            .as_deref()
            .map(|a| a.trim().to_ascii_lowercase().replace(' ', "-"))
            .or_else(|| {
                name.as_deref()
                    .and_then(guess_architecture)
                    .map(str::to_owned)
            });
        out.push(Gpu {
            index,
            uuid,
            architecture,
            bus_id: bus_id_of(x),
            numa_node: None,
            serial: x.serial.clone(),
            vbios: x.vbios_version.clone(),
            board_part_number: x.board_part_number.clone(),
            compute_capability,
            memory_total_mib: x.memory_total_mib,
            persistence_mode: x.persistence_mode,
            compute_mode: x.compute_mode.map(|m| compute_mode_name(m).to_owned()),
            ecc: ecc_of(x),
            row_remap: x.row_remap.as_ref().map(|r| RowRemap {
                correctable: r.correctable,
                uncorrectable: r.uncorrectable,
                pending: r.pending,
                failure: r.failure,
            }),
            power_limit_w: x.power_limit_w,
            mig,
            fabric: x.fabric.as_ref().map(|f| Fabric {
                cluster_uuid: f.cluster_uuid.clone(),
                clique_id: f.clique_id,
            }),
            nvlinks,
            topology,
            passed_through: false,
            name,
        });
    }
    out
}

/// The document's spelling of a compute mode.
pub fn compute_mode_name(mode: ComputeMode) -> &'static str {
    match mode {
        ComputeMode::Default => "default",
        ComputeMode::ExclusiveProcess => "exclusive-process",
        ComputeMode::Prohibited => "prohibited",
    }
}

fn bus_id_of(x: &XmlGpu) -> Option<String> {
    x.pci_bus_id
        .as_deref()
        .or(x.id.as_deref())
        .and_then(value::bus_id)
}

fn ecc_of(x: &XmlGpu) -> Option<Ecc> {
    let counts = |c: &crate::smi::xml::Counts| {
        (c.correctable.is_some() || c.uncorrectable.is_some()).then_some(EccCounts {
            correctable: c.correctable,
            uncorrectable: c.uncorrectable,
        })
    };
    let ecc = Ecc {
        mode: x.ecc_mode_current,
        volatile: counts(&x.ecc.volatile),
        aggregate: counts(&x.ecc.aggregate),
    };
    (ecc != Ecc::default()).then_some(ecc)
}

fn nvlinks_of(snap: &Snapshot, uuid: &str, by_bus: &HashMap<String, String>) -> Vec<NvLink> {
    let Some(status) = snap
        .nvlink_status
        .iter()
        .find(|g| g.uuid.eq_ignore_ascii_case(uuid))
    else {
        return Vec::new();
    };
    let remotes = snap
        .nvlink_remotes
        .iter()
        .find(|g| g.uuid.eq_ignore_ascii_case(uuid));
    status
        .links
        .iter()
        .map(|l| {
            let remote = remotes
                .and_then(|r| r.links.iter().find(|rl| rl.link == l.link))
                .map(|rl| match &rl.remote {
                    // A far end that is not a GPU of this node is a switch port: NVLink joins
                    // GPUs to GPUs or to NVSwitches only.
                    Remote::Gpu { bus_id } => by_bus
                        .get(bus_id)
                        .cloned()
                        .unwrap_or_else(|| format!("nvswitch:{bus_id}")),
                    other => other.to_string(),
                });
            NvLink {
                link: l.link,
                state: l.state.as_str().to_owned(),
                remote,
            }
        })
        .collect()
}

fn mig_of(
    x: &XmlGpu,
    listed: &[crate::smi::list::ListedMig],
    snap: &Snapshot,
    index: u32,
) -> Option<Mig> {
    let devices: Vec<MigDevice> = x
        .mig_devices
        .iter()
        .map(|d| {
            let named = d.index.and_then(|i| listed.iter().find(|l| l.device == i));
            MigDevice {
                uuid: named.map(|l| l.uuid.clone()),
                profile: named.map(|l| l.profile.clone()),
                gi: d.gpu_instance_id,
                ci: d.compute_instance_id,
                memory_total_mib: d.memory_total_mib,
            }
        })
        .collect();
    let profiles: Vec<MigProfile> = snap
        .mig_profiles
        .iter()
        .filter(|p| p.gpu == index)
        .map(|p| MigProfile {
            name: p.name.clone(),
            id: p.id,
            instances_total: Some(p.instances_total),
            memory_gib: p.memory_gib,
            sm: p.sm,
        })
        .collect();
    let mig = Mig {
        mode: x.mig_mode_current,
        pending_mode: x.mig_mode_pending,
        devices,
        profiles,
    };
    (mig.mode.is_some() || mig.pending_mode.is_some() || !mig.devices.is_empty()).then_some(mig)
}
