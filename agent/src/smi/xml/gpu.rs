//! What the parser gives: the document's versions and, per `<gpu>`, its identity, memory,
//! ECC, row remapping, MIG devices, power, clocks, fabric, processes and the driver's own
//! health readings.

use serde::{Deserialize, Serialize};

/// What `nvidia-smi -q -x` says about the node's driver and GPUs.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct QueryXml {
    /// The kernel driver's version: `kmd_version` when present, else `driver_version`, with any
    /// `[Deprecated; ...]` note removed.
    pub driver_version: Option<String>,
    /// The CUDA driver API version: `cuda_umd_version` when present, else `cuda_version`.
    pub cuda_version: Option<String>,
    /// The number of GPUs the driver has attached. It may exceed `gpus.len()` when the query
    /// was limited to some GPUs (`nvidia-smi -q -x -i N`).
    pub attached_gpus: Option<u32>,
    /// One entry per `<gpu>` element, in document order (not necessarily minor-number order).
    pub gpus: Vec<XmlGpu>,
}

/// One `<gpu>` element.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct XmlGpu {
    /// The `id` attribute of `<gpu>` as written (a PCI bus id, in the driver's own form).
    pub id: Option<String>,
    pub product_name: Option<String>,
    /// `product_architecture` as written (`Ampere`, `Hopper`, ...), R470 and later.
    pub architecture: Option<String>,
    pub uuid: Option<String>,
    /// The board serial; `None` when the board answers `0` or a run of zeros, as GeForce and
    /// most workstation boards (and masked captures) do, so that no two GPUs share a serial.
    pub serial: Option<String>,
    pub vbios_version: Option<String>,
    pub board_part_number: Option<String>,
    pub minor_number: Option<u32>,
    /// The GPU's PCI function. Taken from `<pci><pci_bus_id>`, else from the `id` attribute;
    /// `None` when neither reads as a PCI address.
    pub pci_bus_id: Option<bcd_protocol::PciAddress>,
    /// Framebuffer memory, `fb_memory_usage`.
    pub memory_total_mib: Option<u64>,
    pub memory_used_mib: Option<u64>,
    /// Memory the driver reserves for itself (R510 and later).
    pub memory_reserved_mib: Option<u64>,
    /// `None` where the driver model has no persistence mode (Windows WDDM says `N/A`).
    pub persistence_mode: Option<bool>,
    pub compute_mode: Option<ComputeMode>,
    pub ecc_mode_current: Option<bool>,
    pub ecc_mode_pending: Option<bool>,
    pub ecc: EccCounts,
    /// `None` when the GPU has no row remapper (the element is absent or says `N/A`) or when
    /// every one of its readings is absent.
    pub row_remap: Option<RowRemap>,
    /// Power draw in watts: `instant_power_draw`, else `power_draw`, else
    /// `average_power_draw`, from `gpu_power_readings` (R535 and later) or `power_readings`.
    pub power_draw_w: Option<f64>,
    /// Power limit in watts: `current_power_limit`, else `enforced_power_limit`, else
    /// `power_limit`.
    pub power_limit_w: Option<f64>,
    pub utilization_gpu_pct: Option<u32>,
    pub utilization_memory_pct: Option<u32>,
    pub temperature_c: Option<i32>,
    pub clocks_sm_mhz: Option<u32>,
    pub clocks_mem_mhz: Option<u32>,
    /// `performance_state` as written (`P0` ... `P12`).
    pub pstate: Option<String>,
    pub mig_mode_current: Option<bool>,
    pub mig_mode_pending: Option<bool>,
    /// The MIG devices, in document order; empty when MIG is off (`<mig_devices>None`).
    pub mig_devices: Vec<XmlMigDevice>,
    /// `None` unless the GPU belongs to an NVLink fabric cluster with a non-zero UUID.
    pub fabric: Option<Fabric>,
    /// Processes using the GPU, graphics ones included; see
    /// [`XmlGpu::compute_process_count`].
    pub processes: Vec<XmlProcess>,
    /// What the driver itself says about the GPU's health.
    pub driver_health: DriverHealth,
}

/// The driver's own health readings of one GPU: its recovery action, its reset status, the
/// NVLink fabric's state and health, and the clock event (throttle) reasons. Each is `None`
/// where the driver does not report it (older branches, `N/A`, the recovery action `None`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct DriverHealth {
    /// `gpu_recovery_action` (R570 and later) as written: `Reset`, `Reboot`, `Drain P2P`,
    /// `Drain and Reset`, ...; `None` when it says `None` (no action needed).
    pub recovery_action: Option<String>,
    /// `gpu_reset_status/reset_required` (before R570's recovery action).
    pub reset_required: Option<bool>,
    /// `gpu_reset_status/drain_and_reset_recommended`.
    pub drain_and_reset_recommended: Option<bool>,
    /// `fabric/state`: `Not Started`, `In Progress`, `Completed`.
    pub fabric_state: Option<String>,
    /// `fabric/status`: `Success` or the fabric manager's error.
    pub fabric_status: Option<String>,
    /// `fabric/health/summary` (R580 and later).
    pub fabric_summary: Option<String>,
    /// `fabric/health/bandwidth`: `Full`, `Degraded`, ...
    pub fabric_bandwidth: Option<String>,
    /// `fabric/health/route_unhealthy`.
    pub fabric_route_unhealthy: Option<bool>,
    /// `fabric/health/route_recovery_in_progress`.
    pub fabric_route_recovery_in_progress: Option<bool>,
    /// `clocks_event_reasons` (R535 and later) or `clocks_throttle_reasons` (before).
    pub clock_events: ClockEvents,
}

/// The clock event reasons that mean the GPU is slowed down by hardware, heat or a power
/// brake (`Active` is `true`). Software power capping and idling are normal and not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct ClockEvents {
    pub hw_slowdown: Option<bool>,
    pub hw_thermal_slowdown: Option<bool>,
    pub sw_thermal_slowdown: Option<bool>,
    pub hw_power_brake_slowdown: Option<bool>,
}

impl ClockEvents {
    /// Whether the driver gave any of the readings.
    pub fn any_reading(&self) -> bool {
        [
            self.hw_slowdown,
            self.hw_thermal_slowdown,
            self.sw_thermal_slowdown,
            self.hw_power_brake_slowdown,
        ]
        .iter()
        .any(Option::is_some)
    }

    /// The names of the active reasons, in a fixed order.
    pub fn active(&self) -> Vec<&'static str> {
        [
            ("hw_slowdown", self.hw_slowdown),
            ("hw_thermal_slowdown", self.hw_thermal_slowdown),
            ("sw_thermal_slowdown", self.sw_thermal_slowdown),
            ("hw_power_brake_slowdown", self.hw_power_brake_slowdown),
        ]
        .into_iter()
        .filter(|(_, on)| *on == Some(true))
        .map(|(name, _)| name)
        .collect()
    }
}

impl XmlGpu {
    /// The number of compute processes: entries whose type contains `C` (`C`, `C+G`, and
    /// `M+C` for MPS clients). A desktop compositor (`G`) is no workload.
    pub fn compute_process_count(&self) -> usize {
        self.processes
            .iter()
            .filter(|p| p.process_type.as_deref().is_some_and(|t| t.contains('C')))
            .count()
    }
}

/// A GPU's compute mode; it serialises in the inventory's spelling (`default`,
/// `exclusive-process`, `prohibited`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ComputeMode {
    Default,
    /// `Exclusive_Process`, and also the long-removed `Exclusive_Thread`: both let one
    /// context at a time use the GPU, which is what the inventory's consumers care about.
    ExclusiveProcess,
    Prohibited,
}

/// ECC error counters since the last driver load (`volatile`) and over the GPU's life
/// (`aggregate`).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct EccCounts {
    pub volatile: Counts,
    pub aggregate: Counts,
}

/// Corrected and uncorrected error counts, each `None` when the driver reports no counter.
///
/// Kepler to Volta report `single_bit`/`double_bit` totals; later GPUs report SRAM and DRAM
/// counters, the SRAM uncorrectable one split into parity and SEC-DED from R570 on. Each
/// layout is summed once: a per-location breakdown is never added to its total.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Counts {
    pub correctable: Option<u64>,
    pub uncorrectable: Option<u64>,
}

/// The row remapper's state (Ampere and later).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct RowRemap {
    /// Rows remapped after correctable errors.
    pub correctable: Option<u64>,
    /// Rows remapped after uncorrectable errors.
    pub uncorrectable: Option<u64>,
    /// A remapping waits for the GPU's next reset.
    pub pending: Option<bool>,
    /// A remapping failed: the GPU should be serviced.
    pub failure: Option<bool>,
}

/// One `<mig_device>` of a GPU in MIG mode.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct XmlMigDevice {
    /// The MIG device's index, which `nvidia-smi -L` calls its device number.
    pub index: Option<u32>,
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
    pub multiprocessor_count: Option<u32>,
    pub memory_total_mib: Option<u64>,
    pub memory_used_mib: Option<u64>,
}

/// The NVLink fabric a GPU belongs to (R550 and later).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Fabric {
    /// Never all zeros: a zero UUID means the GPU is in no cluster, and then there is no
    /// `Fabric` at all.
    pub cluster_uuid: String,
    pub clique_id: Option<u32>,
}

/// One `<process_info>` entry.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct XmlProcess {
    pub pid: Option<u32>,
    /// `C`, `G`, `C+G`, `M`, `M+C`, as written.
    pub process_type: Option<String>,
    /// `None` when the driver does not say (Windows often leaves it empty).
    pub name: Option<String>,
    pub used_memory_mib: Option<u64>,
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
}
