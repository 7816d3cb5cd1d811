//! The one table of what the parser keeps: each element path below `<nvidia_smi_log>` and
//! what its text fills (or, for `<gpu>`, `<mig_device>` and `<process_info>`, the record it
//! opens). A field is declared here and nowhere else.
//!
//! Paths are matched in full from the root: an element that is not in the table at its place
//! is skipped with everything below it, so an unknown wrapper never lends its children a
//! meaning. A path segment `a|b` names one element that drivers spell two ways (R535 renamed
//! `power_readings` and the throttle reasons; R570 writes the fabric's ids in camelCase).

use std::sync::OnceLock;

use super::draft::{DocDraft, GpuDraft};
use super::read::{compute_mode, flag, owned, owned_version, signed_i32, truth, unsigned_u32};
use super::read::{is_zero_placeholder, present_address};
use super::{XmlMigDevice, XmlProcess};
use crate::smi::value::{number, unsigned};

/// What an element's text fills.
#[derive(Clone, Copy)]
pub(super) enum Slot {
    /// A field of the document (the driver's versions).
    Doc(fn(&mut DocDraft, &str)),
    /// A field of the `<gpu>` being read.
    Gpu(fn(&mut GpuDraft, &str)),
    /// A field of that GPU's latest `<mig_device>`.
    Mig(fn(&mut XmlMigDevice, &str)),
    /// A field of that GPU's latest `<process_info>`.
    Process(fn(&mut XmlProcess, &str)),
    /// Not a field: the element opens a record.
    Open(Record),
}

/// The elements that open a record when they start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Record {
    /// `<gpu id="...">`: a GPU, finished at its end tag.
    Gpu,
    /// `<mig_device>`: a MIG device of the GPU being read.
    MigDevice,
    /// `<process_info>`: a process of the GPU being read.
    Process,
}

use Slot::{Doc, Gpu, Mig, Open, Process};

/// Every element the parser knows, by path below `<nvidia_smi_log>`. One line per field.
#[rustfmt::skip]
const TABLE: &[(&str, Slot)] = &[
    ("driver_version", Doc(|d, t| d.driver_version = owned_version(t))),
    ("kmd_version", Doc(|d, t| d.kmd_version = owned_version(t))),
    ("cuda_version", Doc(|d, t| d.cuda_version = owned_version(t))),
    ("cuda_umd_version", Doc(|d, t| d.cuda_umd_version = owned_version(t))),
    ("attached_gpus", Doc(|d, t| d.attached_gpus = unsigned_u32(t))),
    ("gpu", Open(Record::Gpu)),
    // Identity.
    ("gpu/product_name", Gpu(|g, t| g.gpu.product_name = owned(t))),
    ("gpu/product_architecture", Gpu(|g, t| g.gpu.architecture = owned(t))),
    ("gpu/persistence_mode", Gpu(|g, t| g.gpu.persistence_mode = flag(t))),
    ("gpu/serial", Gpu(|g, t| g.gpu.serial = owned(t).filter(|s| !is_zero_placeholder(s)))),
    ("gpu/uuid", Gpu(|g, t| g.gpu.uuid = owned(t))),
    ("gpu/minor_number", Gpu(|g, t| g.gpu.minor_number = unsigned_u32(t))),
    ("gpu/vbios_version", Gpu(|g, t| g.gpu.vbios_version = owned(t))),
    ("gpu/board_part_number", Gpu(|g, t| g.gpu.board_part_number = owned(t))),
    ("gpu/pci/pci_bus_id", Gpu(|g, t| g.gpu.pci_bus_id = present_address(t))),
    ("gpu/performance_state", Gpu(|g, t| g.gpu.pstate = owned(t))),
    ("gpu/compute_mode", Gpu(|g, t| g.gpu.compute_mode = compute_mode(t))),
    // MIG.
    ("gpu/mig_mode/current_mig", Gpu(|g, t| g.gpu.mig_mode_current = flag(t))),
    ("gpu/mig_mode/pending_mig", Gpu(|g, t| g.gpu.mig_mode_pending = flag(t))),
    ("gpu/mig_devices/mig_device", Open(Record::MigDevice)),
    ("gpu/mig_devices/mig_device/index", Mig(|m, t| m.index = unsigned_u32(t))),
    ("gpu/mig_devices/mig_device/gpu_instance_id", Mig(|m, t| m.gpu_instance_id = unsigned_u32(t))),
    ("gpu/mig_devices/mig_device/compute_instance_id", Mig(|m, t| m.compute_instance_id = unsigned_u32(t))),
    ("gpu/mig_devices/mig_device/device_attributes/shared/multiprocessor_count", Mig(|m, t| m.multiprocessor_count = unsigned_u32(t))),
    ("gpu/mig_devices/mig_device/fb_memory_usage/total", Mig(|m, t| m.memory_total_mib = unsigned(t))),
    ("gpu/mig_devices/mig_device/fb_memory_usage/used", Mig(|m, t| m.memory_used_mib = unsigned(t))),
    // Memory and use.
    ("gpu/fb_memory_usage/total", Gpu(|g, t| g.gpu.memory_total_mib = unsigned(t))),
    ("gpu/fb_memory_usage/used", Gpu(|g, t| g.gpu.memory_used_mib = unsigned(t))),
    ("gpu/fb_memory_usage/reserved", Gpu(|g, t| g.gpu.memory_reserved_mib = unsigned(t))),
    ("gpu/utilization/gpu_util", Gpu(|g, t| g.gpu.utilization_gpu_pct = unsigned_u32(t))),
    ("gpu/utilization/memory_util", Gpu(|g, t| g.gpu.utilization_memory_pct = unsigned_u32(t))),
    ("gpu/temperature/gpu_temp", Gpu(|g, t| g.gpu.temperature_c = signed_i32(t))),
    ("gpu/clocks/sm_clock", Gpu(|g, t| g.gpu.clocks_sm_mhz = unsigned_u32(t))),
    ("gpu/clocks/mem_clock", Gpu(|g, t| g.gpu.clocks_mem_mhz = unsigned_u32(t))),
    // ECC: each layout's counters as written, summed when the GPU ends.
    ("gpu/ecc_mode/current_ecc", Gpu(|g, t| g.gpu.ecc_mode_current = flag(t))),
    ("gpu/ecc_mode/pending_ecc", Gpu(|g, t| g.gpu.ecc_mode_pending = flag(t))),
    ("gpu/ecc_errors/volatile/single_bit/total", Gpu(|g, t| g.volatile.single_bit_total = unsigned(t))),
    ("gpu/ecc_errors/volatile/double_bit/total", Gpu(|g, t| g.volatile.double_bit_total = unsigned(t))),
    ("gpu/ecc_errors/volatile/sram_correctable", Gpu(|g, t| g.volatile.sram_correctable = unsigned(t))),
    ("gpu/ecc_errors/volatile/sram_uncorrectable", Gpu(|g, t| g.volatile.sram_uncorrectable = unsigned(t))),
    ("gpu/ecc_errors/volatile/sram_uncorrectable_parity", Gpu(|g, t| g.volatile.sram_parity = unsigned(t))),
    ("gpu/ecc_errors/volatile/sram_uncorrectable_secded", Gpu(|g, t| g.volatile.sram_secded = unsigned(t))),
    ("gpu/ecc_errors/volatile/dram_correctable", Gpu(|g, t| g.volatile.dram_correctable = unsigned(t))),
    ("gpu/ecc_errors/volatile/dram_uncorrectable", Gpu(|g, t| g.volatile.dram_uncorrectable = unsigned(t))),
    ("gpu/ecc_errors/aggregate/single_bit/total", Gpu(|g, t| g.aggregate.single_bit_total = unsigned(t))),
    ("gpu/ecc_errors/aggregate/double_bit/total", Gpu(|g, t| g.aggregate.double_bit_total = unsigned(t))),
    ("gpu/ecc_errors/aggregate/sram_correctable", Gpu(|g, t| g.aggregate.sram_correctable = unsigned(t))),
    ("gpu/ecc_errors/aggregate/sram_uncorrectable", Gpu(|g, t| g.aggregate.sram_uncorrectable = unsigned(t))),
    ("gpu/ecc_errors/aggregate/sram_uncorrectable_parity", Gpu(|g, t| g.aggregate.sram_parity = unsigned(t))),
    ("gpu/ecc_errors/aggregate/sram_uncorrectable_secded", Gpu(|g, t| g.aggregate.sram_secded = unsigned(t))),
    ("gpu/ecc_errors/aggregate/dram_correctable", Gpu(|g, t| g.aggregate.dram_correctable = unsigned(t))),
    ("gpu/ecc_errors/aggregate/dram_uncorrectable", Gpu(|g, t| g.aggregate.dram_uncorrectable = unsigned(t))),
    ("gpu/remapped_rows/remapped_row_corr", Gpu(|g, t| g.remap.correctable = unsigned(t))),
    ("gpu/remapped_rows/remapped_row_unc", Gpu(|g, t| g.remap.uncorrectable = unsigned(t))),
    ("gpu/remapped_rows/remapped_row_pending", Gpu(|g, t| g.remap.pending = flag(t))),
    ("gpu/remapped_rows/remapped_row_failure", Gpu(|g, t| g.remap.failure = flag(t))),
    // Power: the first of each list present wins when the GPU ends.
    ("gpu/gpu_power_readings|power_readings/instant_power_draw", Gpu(|g, t| g.instant_power_draw = number(t))),
    ("gpu/gpu_power_readings|power_readings/power_draw", Gpu(|g, t| g.power_draw = number(t))),
    ("gpu/gpu_power_readings|power_readings/average_power_draw", Gpu(|g, t| g.average_power_draw = number(t))),
    ("gpu/gpu_power_readings|power_readings/current_power_limit", Gpu(|g, t| g.current_power_limit = number(t))),
    ("gpu/gpu_power_readings|power_readings/enforced_power_limit", Gpu(|g, t| g.enforced_power_limit = number(t))),
    ("gpu/gpu_power_readings|power_readings/power_limit", Gpu(|g, t| g.power_limit = number(t))),
    // The NVLink fabric and the driver's own health readings.
    ("gpu/fabric/clusterUuid|cluster_uuid", Gpu(|g, t| g.cluster_uuid = owned(t))),
    ("gpu/fabric/cliqueId|clique_id", Gpu(|g, t| g.clique_id = unsigned_u32(t))),
    ("gpu/fabric/state", Gpu(|g, t| g.gpu.driver_health.fabric_state = owned(t))),
    ("gpu/fabric/status", Gpu(|g, t| g.gpu.driver_health.fabric_status = owned(t))),
    ("gpu/fabric/health/summary", Gpu(|g, t| g.gpu.driver_health.fabric_summary = owned(t))),
    ("gpu/fabric/health/bandwidth", Gpu(|g, t| g.gpu.driver_health.fabric_bandwidth = owned(t))),
    ("gpu/fabric/health/route_unhealthy", Gpu(|g, t| g.gpu.driver_health.fabric_route_unhealthy = truth(t))),
    ("gpu/fabric/health/route_recovery_in_progress", Gpu(|g, t| g.gpu.driver_health.fabric_route_recovery_in_progress = truth(t))),
    ("gpu/gpu_recovery_action", Gpu(|g, t| g.gpu.driver_health.recovery_action = owned(t))),
    ("gpu/gpu_reset_status/reset_required", Gpu(|g, t| g.gpu.driver_health.reset_required = truth(t))),
    ("gpu/gpu_reset_status/drain_and_reset_recommended", Gpu(|g, t| g.gpu.driver_health.drain_and_reset_recommended = truth(t))),
    ("gpu/clocks_event_reasons|clocks_throttle_reasons/clocks_event_reason_hw_slowdown|clocks_throttle_reason_hw_slowdown", Gpu(|g, t| g.gpu.driver_health.clock_events.hw_slowdown = truth(t))),
    ("gpu/clocks_event_reasons|clocks_throttle_reasons/clocks_event_reason_hw_thermal_slowdown|clocks_throttle_reason_hw_thermal_slowdown", Gpu(|g, t| g.gpu.driver_health.clock_events.hw_thermal_slowdown = truth(t))),
    ("gpu/clocks_event_reasons|clocks_throttle_reasons/clocks_event_reason_sw_thermal_slowdown|clocks_throttle_reason_sw_thermal_slowdown", Gpu(|g, t| g.gpu.driver_health.clock_events.sw_thermal_slowdown = truth(t))),
    ("gpu/clocks_event_reasons|clocks_throttle_reasons/clocks_event_reason_hw_power_brake_slowdown|clocks_throttle_reason_hw_power_brake_slowdown", Gpu(|g, t| g.gpu.driver_health.clock_events.hw_power_brake_slowdown = truth(t))),
    // Processes.
    ("gpu/processes/process_info", Open(Record::Process)),
    ("gpu/processes/process_info/pid", Process(|p, t| p.pid = unsigned_u32(t))),
    ("gpu/processes/process_info/type", Process(|p, t| p.process_type = owned(t))),
    ("gpu/processes/process_info/process_name", Process(|p, t| p.name = owned(t))),
    ("gpu/processes/process_info/used_memory", Process(|p, t| p.used_memory_mib = unsigned(t))),
    ("gpu/processes/process_info/gpu_instance_id", Process(|p, t| p.gpu_instance_id = unsigned_u32(t))),
    ("gpu/processes/process_info/compute_instance_id", Process(|p, t| p.compute_instance_id = unsigned_u32(t))),
];

/// An element's place in the table's tree: its children by name, and what it does.
pub(super) struct Node {
    children: Vec<(&'static [u8], NodeId)>,
    /// What its text fills, or the record it opens.
    pub(super) slot: Option<Slot>,
}

/// A node of [`Tree`]; `ROOT` is `<nvidia_smi_log>`.
pub(super) type NodeId = u16;

/// The table as a tree of element names, built once.
pub(super) struct Tree {
    nodes: Vec<Node>,
}

impl Tree {
    /// `<nvidia_smi_log>`.
    pub(super) const ROOT: NodeId = 0;

    /// The tree of [`TABLE`].
    pub(super) fn get() -> &'static Tree {
        static TREE: OnceLock<Tree> = OnceLock::new();
        TREE.get_or_init(|| Tree::of(TABLE))
    }

    fn of(table: &[(&'static str, Slot)]) -> Tree {
        let mut tree = Tree {
            nodes: vec![Node {
                children: Vec::new(),
                slot: None,
            }],
        };
        for (path, slot) in table {
            let mut at = Self::ROOT;
            for segment in path.split('/') {
                let names: Vec<&'static [u8]> = segment.split('|').map(str::as_bytes).collect();
                // The children are sorted only once the tree is whole: look them over here.
                let known = tree.nodes[usize::from(at)]
                    .children
                    .iter()
                    .find(|(n, _)| *n == names[0])
                    .map(|(_, id)| *id);
                at = match known {
                    Some(child) => child,
                    None => {
                        let id = NodeId::try_from(tree.nodes.len())
                            .expect("the table has fewer than 65536 elements");
                        tree.nodes.push(Node {
                            children: Vec::new(),
                            slot: None,
                        });
                        let node = &mut tree.nodes[usize::from(at)];
                        node.children.extend(names.iter().map(|n| (*n, id)));
                        id
                    }
                };
            }
            tree.nodes[usize::from(at)].slot = Some(*slot);
        }
        // Sorted by length, then bytes: a lookup is a binary search whose steps mostly compare
        // lengths only (the `gpu` element has some forty children).
        for node in &mut tree.nodes {
            node.children.sort_by(|(a, _), (b, _)| by_length(a, b));
        }
        tree
    }

    /// The child of `parent` named `name`, if the table has one.
    pub(super) fn child(&self, parent: NodeId, name: &[u8]) -> Option<NodeId> {
        let children = &self.nodes[usize::from(parent)].children;
        children
            .binary_search_by(|(n, _)| by_length(n, name))
            .ok()
            .map(|at| children[at].1)
    }

    /// The node `id`.
    pub(super) fn node(&self, id: NodeId) -> &Node {
        &self.nodes[usize::from(id)]
    }
}

/// Orders names by length, then bytes.
fn by_length(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_is_declared_once_and_every_spelling_reaches_one_node() {
        let mut seen = std::collections::BTreeSet::new();
        for (path, _) in TABLE {
            assert!(seen.insert(*path), "{path} is declared twice");
        }
        let tree = Tree::get();
        let walk = |path: &[&str]| {
            path.iter()
                .try_fold(Tree::ROOT, |at, name| tree.child(at, name.as_bytes()))
        };
        // Every path of the table is found again through the sorted children.
        for (path, _) in TABLE {
            let first: Vec<&str> = path
                .split('/')
                .map(|s| s.split('|').next().unwrap_or(s))
                .collect();
            let last: Vec<&str> = path
                .split('/')
                .map(|s| s.rsplit('|').next().unwrap_or(s))
                .collect();
            assert!(walk(&first).is_some(), "{path}");
            assert_eq!(walk(&first), walk(&last), "{path}");
        }
        assert_eq!(
            walk(&["gpu", "power_readings", "power_draw"]),
            walk(&["gpu", "gpu_power_readings", "power_draw"])
        );
        assert!(walk(&["gpu", "fabric", "clusterUuid"]).is_some());
        assert_eq!(walk(&["gpu", "no_such_element"]), None);
        assert_eq!(walk(&["uuid"]), None, "a GPU's field is not the document's");
    }
}
