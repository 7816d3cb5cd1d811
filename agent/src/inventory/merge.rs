//! The merge of the two layers, by UUID: procfs/sysfs first, then what `nvidia-smi` said.
//!
//! - The section's driver, CUDA driver and NVML versions come from the snapshot when it has
//!   them.
//! - A GPU both layers know takes every field from `nvidia-smi`, keeps the collector's index,
//!   and keeps the collector's NUMA node and architecture where `nvidia-smi` gave none.
//! - A GPU only `nvidia-smi` knows (WSL 2's paravirtual GPU) is appended with the next index.
//! - Without a snapshot the section keeps what procfs showed, with no CUDA driver version.
//! - UUIDs are compared in their normal form ([`GpuUuid`]): `nvidia-smi`'s queries may spell
//!   one GPU's UUID in different cases. A GPU whose UUID is not `GPU-` and 8-4-4-4-12 hex
//!   digits cannot be named to anything, so it is left out, and [`left_out`] says so.

use std::collections::{BTreeMap, HashMap};

use bcd_protocol::{GpuUuid, PciAddress};

use crate::inventory::arch::guess_architecture;
use crate::inventory::document::{
    Ecc, EccCounts, Fabric, Gpu, GpuSection, Mig, MigDevice, MigProfile, NvLink, NvLinkRemote,
    RowRemap,
};
use crate::inventory::procfs::ProcInventory;
use crate::smi::nvlink::Remote;
use crate::smi::snapshot::Snapshot;
use crate::smi::xml::XmlGpu;

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
                name: p.model.clone(),
                architecture: p.architecture.map(str::to_owned),
                bus_id: Some(p.address),
                numa_node: p.numa_node,
                vbios: p.vbios.clone(),
                ..Gpu::new(p.index, uuid(p.uuid.as_deref()?)?)
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

/// A UUID as one of `nvidia-smi`'s queries printed it, in its normal form.
fn uuid(raw: &str) -> Option<GpuUuid> {
    raw.trim().parse().ok()
}

/// Why a GPU the driver or `nvidia-smi` shows is missing from [`merge`]'s section, one
/// sentence each: its UUID names no GPU (`GPU-????...` from a driver that could not
/// initialise it, or a masked or cut-short capture). A procfs GPU whose address `nvidia-smi`
/// reports under a good UUID is not missing.
pub(crate) fn left_out(base: &ProcInventory, snapshot: Option<&Snapshot>) -> Vec<String> {
    let unnamed = |raw: &str| uuid(raw).is_none();
    let reported: Vec<PciAddress> = snapshot
        .iter()
        .flat_map(|s| &s.xml.gpus)
        .filter(|x| x.uuid.as_deref().is_some_and(|u| !unnamed(u)))
        .filter_map(|x| x.pci_bus_id)
        .collect();
    let mut out: Vec<String> = base
        .gpus
        .iter()
        .filter(|p| !reported.contains(&p.address))
        .filter_map(|p| {
            let raw = p.uuid.as_deref()?;
            unnamed(raw).then(|| {
                format!(
                    "the driver lists a GPU at {} with UUID {:?}, which names no GPU (the driver \
                     may have failed to initialise it: dmesg | grep NVRM): it is left out of the \
                     inventory",
                    p.address,
                    crate::smi::escape_control(raw)
                )
            })
        })
        .collect();
    out.extend(snapshot.iter().flat_map(|s| &s.listed).flat_map(|g| {
        g.mig
            .iter()
            .filter(|m| m.uuid.parse::<crate::device::id::MigUuid>().is_err())
            .map(move |m| {
                format!(
                    "nvidia-smi -L listed MIG device {} of GPU {} with UUID {:?}, which is not \
                     a MIG UUID: the device is kept without a UUID, and cannot be held",
                    m.device,
                    g.index,
                    crate::smi::escape_control(&m.uuid)
                )
            })
    }));
    out.extend(snapshot.iter().flat_map(|s| &s.xml.gpus).filter_map(|x| {
        let raw = x.uuid.as_deref()?;
        unnamed(raw).then(|| {
            let at = x.pci_bus_id.map(|a| format!(" at {a}")).unwrap_or_default();
            format!(
                "nvidia-smi -q -x reported a GPU{at} with UUID {:?}, which is not GPU- and \
                 8-4-4-4-12 hex digits: it is left out of the inventory",
                crate::smi::escape_control(raw)
            )
        })
    }));
    out
}

/// Every GPU of a snapshot as an inventory record, with `index` in `nvidia-smi`'s numbering.
pub fn gpus_from_snapshot(snap: &Snapshot) -> Vec<Gpu> {
    // nvidia-smi's index for each UUID: from -L, else the order of -q -x (the same order).
    let mut index_of: HashMap<GpuUuid, u32> = snap
        .listed
        .iter()
        .filter_map(|l| Some((uuid(&l.uuid)?, l.index)))
        .collect();
    let uuid_at = |i: u32| -> Option<GpuUuid> {
        snap.listed
            .iter()
            .find(|l| l.index == i)
            .and_then(|l| uuid(&l.uuid))
            .or_else(|| {
                snap.xml
                    .gpus
                    .get(i as usize)
                    .and_then(|g| uuid(g.uuid.as_deref()?))
            })
    };
    let by_bus: HashMap<PciAddress, GpuUuid> = snap
        .xml
        .gpus
        .iter()
        .filter_map(|g| Some((g.pci_bus_id?, uuid(g.uuid.as_deref()?)?)))
        .collect();
    let mut out = Vec::new();
    for (position, x) in snap.xml.gpus.iter().enumerate() {
        let Some(uuid) = x.uuid.as_deref().and_then(uuid) else {
            continue;
        };
        let position = u32::try_from(position).unwrap_or(u32::MAX);
        let index = *index_of.entry(uuid.clone()).or_insert(position);
        let same = |raw: &str| self::uuid(raw).as_ref() == Some(&uuid);
        let listed = snap.listed.iter().find(|l| same(&l.uuid));
        let compute_capability = snap
            .compute_caps
            .iter()
            .find(|c| same(&c.uuid))
            .and_then(|c| c.compute_cap.clone());
        let nvlinks = nvlinks_of(snap, &uuid, &by_bus);
        let topology: BTreeMap<GpuUuid, String> = snap
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
            bus_id: x.pci_bus_id,
            numa_node: None,
            serial: x.serial.clone(),
            vbios: x.vbios_version.clone(),
            board_part_number: x.board_part_number.clone(),
            compute_capability,
            memory_total_mib: x.memory_total_mib,
            persistence_mode: x.persistence_mode,
            compute_mode: x.compute_mode,
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

fn nvlinks_of(
    snap: &Snapshot,
    uuid: &GpuUuid,
    by_bus: &HashMap<PciAddress, GpuUuid>,
) -> Vec<NvLink> {
    let same = |raw: &str| self::uuid(raw).as_ref() == Some(uuid);
    let Some(status) = snap.nvlink_status.iter().find(|g| same(&g.uuid)) else {
        return Vec::new();
    };
    let remotes = snap.nvlink_remotes.iter().find(|g| same(&g.uuid));
    status
        .links
        .iter()
        .map(|l| {
            let remote = remotes
                .and_then(|r| r.links.iter().find(|rl| rl.link == l.link))
                .map(|rl| match &rl.remote {
                    // A far end that is not a GPU of this node is a switch port: NVLink joins
                    // GPUs to GPUs or to NVSwitches only.
                    Remote::Gpu { bus_id } => by_bus.get(bus_id).map_or_else(
                        || NvLinkRemote::NvSwitch(bus_id.nvml_bus_id()),
                        |uuid| NvLinkRemote::Gpu(uuid.clone()),
                    ),
                    Remote::NvSwitch { id } => NvLinkRemote::NvSwitch(id.clone()),
                    Remote::Other(text) => NvLinkRemote::Unknown(text.clone()),
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
                uuid: named.and_then(|l| l.uuid.parse().ok()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smi::{compute_cap::parse_compute_cap, list::parse_list, xml::parse_query_xml};

    const UUID: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";

    /// A one-GPU snapshot whose `-q -x` prints `xml_uuid` and whose `-L` and compute
    /// capability queries print `listed_uuid`.
    fn snapshot(xml_uuid: &str, listed_uuid: &str) -> Snapshot {
        let xml = format!(
            "<nvidia_smi_log><gpu id=\"00000000:18:00.0\"><uuid>{xml_uuid}</uuid>\
             <product_name>NVIDIA H100 80GB HBM3</product_name></gpu></nvidia_smi_log>"
        );
        Snapshot {
            xml: parse_query_xml(xml.as_bytes()).unwrap(),
            listed: parse_list(
                format!("GPU 3: NVIDIA H100 80GB HBM3 (UUID: {listed_uuid})\n").as_bytes(),
            )
            .unwrap(),
            compute_caps: parse_compute_cap(format!("{listed_uuid}, 9.0\n").as_bytes()).unwrap(),
            topology: Vec::new(),
            nvlink_status: Vec::new(),
            nvlink_remotes: Vec::new(),
            mig_profiles: Vec::new(),
            queries: Vec::new(),
        }
    }

    // What broke: UUIDs were strings, compared without regard to case in some places and
    // exactly in others; one GPU spelled two ways by two queries is one GPU.
    #[test]
    fn a_gpu_spelled_in_two_cases_by_two_queries_is_one_gpu() {
        let snap = snapshot(UUID, &UUID.to_uppercase());
        let gpus = gpus_from_snapshot(&snap);
        assert_eq!(gpus.len(), 1);
        let g = &gpus[0];
        assert_eq!(g.uuid, UUID, "the normal form, lower case");
        assert_eq!(g.index, 3, "-L's index, found through the other spelling");
        assert_eq!(g.compute_capability.as_deref(), Some("9.0"));
        assert_eq!(g.address(), Some("0000:18:00.0".parse().unwrap()));
        assert!(left_out(&ProcInventory::default(), Some(&snap)).is_empty());
    }

    #[test]
    fn a_gpu_whose_uuid_names_no_gpu_is_left_out_and_said_so() {
        let masked = "GPU-XXX9-b02c-1c4ca42113c8";
        let snap = snapshot(masked, masked);
        assert!(gpus_from_snapshot(&snap).is_empty());
        assert_eq!(
            left_out(&ProcInventory::default(), Some(&snap)),
            ["nvidia-smi -q -x reported a GPU at 0000:18:00.0 with UUID \"GPU-XXX9-b02c-1c4ca42113c8\", \
              which is not GPU- and 8-4-4-4-12 hex digits: it is left out of the inventory"]
        );
    }

    // What broke: a MIG device whose UUID -L printed malformed was kept in the inventory as a
    // string, and the policy then silently dropped it (no hold could take it, nothing said
    // why). The UUID is typed now: the device stays without one, and the collection says so.
    #[test]
    fn a_mig_device_whose_uuid_is_malformed_is_kept_without_it_and_said_so() {
        let xml = format!(
            "<nvidia_smi_log><gpu id=\"00000000:18:00.0\"><uuid>{UUID}</uuid>\
             <mig_mode><current_mig>Enabled</current_mig></mig_mode>\
             <mig_devices><mig_device><index>0</index><gpu_instance_id>1</gpu_instance_id>\
             <compute_instance_id>0</compute_instance_id></mig_device></mig_devices></gpu>\
             </nvidia_smi_log>"
        );
        let listed = format!(
            "GPU 0: NVIDIA A100-SXM4-40GB (UUID: {UUID})\n  MIG 3g.20gb     Device  0: (UUID: MIG-XXXX-not-a-uuid)\n"
        );
        let snap = Snapshot {
            xml: parse_query_xml(xml.as_bytes()).unwrap(),
            listed: parse_list(listed.as_bytes()).unwrap(),
            ..snapshot(UUID, UUID)
        };
        let gpus = gpus_from_snapshot(&snap);
        let devices = &gpus[0].mig.as_ref().unwrap().devices;
        assert_eq!(devices.len(), 1);
        assert_eq!(devices[0].uuid, None);
        assert_eq!(devices[0].profile.as_deref(), Some("3g.20gb"));
        let said = left_out(&ProcInventory::default(), Some(&snap));
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains("\"MIG-XXXX-not-a-uuid\", which is not a MIG UUID"),
            "{said:?}"
        );
    }

    // What broke: a GPU the driver could not initialise (procfs says GPU-????...) vanished
    // from the inventory without a word once UUIDs were typed; it is said now, by address.
    #[test]
    fn a_gpu_the_driver_cannot_name_is_said_by_address() {
        let masked = "GPU-????????-????-????-????-????????????";
        let base = ProcInventory {
            driver_version: Some("570.86.15".into()),
            gpus: vec![crate::inventory::procfs::ProcGpu {
                index: 0,
                uuid: Some(masked.into()),
                model: Some("NVIDIA H100 80GB HBM3".into()),
                vbios: None,
                address: "0000:18:00.0".parse().unwrap(),
                minor: Some(0),
                numa_node: None,
                architecture: None,
            }],
        };
        assert!(merge(&base, None).gpus.is_empty());
        assert_eq!(
            left_out(&base, None),
            ["the driver lists a GPU at 0000:18:00.0 with UUID \"GPU-????????-????-????-????-????????????\", \
              which names no GPU (the driver may have failed to initialise it: dmesg | grep NVRM): \
              it is left out of the inventory"]
        );
        // nvidia-smi naming the same function under a good UUID is the GPU itself.
        let snap = snapshot(UUID, UUID);
        assert_eq!(merge(&base, Some(&snap)).gpus.len(), 1);
        assert!(left_out(&base, Some(&snap)).is_empty());
    }
}
