//! The parser for `nvidia-smi -q -x`, the one query whose answer bcd requires.
//!
//! [`parse_query_xml`] turns the XML document into [`QueryXml`]: the driver's versions and,
//! for each `<gpu>` element in document order, the identity, memory, ECC, row remapping, MIG,
//! power, clock, fabric and process facts the inventory and the samples need. Every value
//! `nvidia-smi` reports as "no value" (see [`super::value`]) is `None`, never a placeholder.
//!
//! The document is untrusted input. It is read as a stream of events, without building a tree:
//! the declared DTD is never loaded, no entity other than XML's five predefined ones and
//! numeric character references is expanded, nesting is bounded, and no input makes the parser
//! panic. Elements it does not know are skipped wherever they appear, so a newer driver's
//! additions cost nothing.

use std::borrow::Cow;

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;
use serde::Serialize;

use super::value;

/// Deepest element nesting accepted; real documents nest at most seven levels.
const MAX_DEPTH: usize = 128;

/// Longest element name quoted back in an error message.
const MAX_QUOTED_NAME: usize = 64;

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
    /// The PCI bus id in NVML's form, `00000000:18:00.0`: eight upper-case hex digits of
    /// domain. Taken from `<pci><pci_bus_id>`, else from the `id` attribute; `None` when
    /// neither reads as a PCI address.
    pub pci_bus_id: Option<String>,
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

/// A GPU's compute mode, in the inventory's spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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

/// Why a `nvidia-smi -q -x` document could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XmlError {
    /// The bytes are not XML, or break its rules (mismatched tags, bad attributes, text that
    /// is not UTF-8, an entity reference other than XML's predefined ones).
    #[error("nvidia-smi -q -x output is not well-formed XML at byte {position}: {reason}")]
    Malformed { position: u64, reason: String },
    /// The document holds no element at all.
    #[error("nvidia-smi -q -x output has no <nvidia_smi_log> root")]
    NoRoot,
    /// The document's first element is not `nvidia_smi_log`.
    #[error(
        "nvidia-smi -q -x output has no <nvidia_smi_log> root: its first element is <{found}>"
    )]
    WrongRoot { found: String },
    /// The document stops before its root element is closed.
    #[error("nvidia-smi -q -x output ends before </nvidia_smi_log>: it was cut short")]
    Truncated,
    /// Elements nest deeper than any `nvidia-smi` document does.
    #[error(
        "nvidia-smi -q -x output nests elements more than {MAX_DEPTH} deep at byte {position}"
    )]
    TooDeep { position: u64 },
}

/// Parses the output of `nvidia-smi -q -x`.
///
/// Pure: no I/O, no logging. Never panics, whatever the bytes; time and memory grow linearly
/// with the input. The DTD is not loaded and only XML's predefined entities are expanded.
///
/// # Errors
///
/// [`XmlError`] when the bytes are not well-formed XML up to the end of the
/// `<nvidia_smi_log>` root, when that root is missing, or when the document is cut short.
/// A root with no `<gpu>` element is not an error: it reads as an empty list. Anything after
/// the root's end tag is not read.
pub fn parse_query_xml(bytes: &[u8]) -> Result<QueryXml, XmlError> {
    let mut reader = Reader::from_reader(bytes);
    let config = reader.config_mut();
    config.trim_text(true);
    config.check_end_names = true;
    config.expand_empty_elements = false;

    let mut doc = Document::default();
    let mut path: Vec<Tag> = Vec::with_capacity(16);
    loop {
        let event = reader.read_event().map_err(|e| XmlError::Malformed {
            position: reader.error_position(),
            reason: e.to_string(),
        })?;
        match event {
            Event::Start(start) => {
                doc.open(&mut path, &start, reader.buffer_position())?;
            }
            Event::Empty(start) => {
                doc.open(&mut path, &start, reader.buffer_position())?;
                doc.close(&mut path);
                if path.is_empty() {
                    break;
                }
            }
            Event::End(_) => {
                doc.close(&mut path);
                if path.is_empty() {
                    break;
                }
            }
            Event::Text(text) => {
                if let Some(field) = field_at(&path) {
                    let text = text.unescape().map_err(|e| XmlError::Malformed {
                        position: reader.buffer_position(),
                        reason: e.to_string(),
                    })?;
                    doc.set(field, &text);
                }
            }
            Event::CData(data) => {
                if let Some(field) = field_at(&path) {
                    let text = data.decode().map_err(|e| XmlError::Malformed {
                        position: reader.buffer_position(),
                        reason: e.to_string(),
                    })?;
                    doc.set(field, &text);
                }
            }
            Event::Eof => {
                return Err(if doc.root_seen {
                    XmlError::Truncated
                } else {
                    XmlError::NoRoot
                });
            }
            // The DTD (external or internal) is never read, so no entity it declares exists.
            Event::Decl(_) | Event::PI(_) | Event::DocType(_) | Event::Comment(_) => {}
        }
    }
    Ok(doc.finish())
}

/// Reads a PCI address such as `0000:18:00.0`, `00000000:18:00.0` or `18:00.0` and writes it
/// in NVML's form, `00000000:18:00.0` (eight upper-case hex digits of domain).
///
/// Returns `None` unless the text is a PCI address.
pub fn widen_bus_id(raw: &str) -> Option<String> {
    let raw = raw.trim();
    let mut parts = raw.rsplitn(3, ':');
    let dev_fn = parts.next()?;
    let bus = parts.next()?;
    let domain = parts.next().unwrap_or("0");
    let (dev, func) = dev_fn.split_once('.')?;
    let domain = hex(domain, 8)?;
    let bus = hex(bus, 2)?;
    let dev = hex(dev, 2).filter(|d| *d < 0x20)?;
    let func = hex(func, 1).filter(|f| *f < 8)?;
    Some(format!("{domain:08X}:{bus:02X}:{dev:02X}.{func:X}"))
}

/// Parses 1 to `max_digits` hex digits, nothing else.
fn hex(text: &str, max_digits: usize) -> Option<u32> {
    if text.is_empty() || text.len() > max_digits || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(text, 16).ok()
}

/// The elements the parser knows. Any other element is `Other`, and so is every element
/// below an `Other`: paths are matched in full from the root, so an unknown wrapper never
/// lends its children a meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag {
    Other,
    Log,
    DriverVersion,
    KmdVersion,
    CudaVersion,
    CudaUmdVersion,
    AttachedGpus,
    Gpu,
    ProductName,
    ProductArchitecture,
    PersistenceMode,
    Serial,
    Uuid,
    MinorNumber,
    VbiosVersion,
    BoardPartNumber,
    Pci,
    PciBusId,
    PerformanceState,
    ComputeMode,
    MigMode,
    CurrentMig,
    PendingMig,
    MigDevices,
    MigDevice,
    Index,
    GpuInstanceId,
    ComputeInstanceId,
    DeviceAttributes,
    Shared,
    MultiprocessorCount,
    FbMemoryUsage,
    Total,
    Used,
    Reserved,
    Utilization,
    GpuUtil,
    MemoryUtil,
    EccMode,
    CurrentEcc,
    PendingEcc,
    EccErrors,
    Volatile,
    Aggregate,
    SingleBit,
    DoubleBit,
    SramCorrectable,
    SramUncorrectable,
    SramUncorrectableParity,
    SramUncorrectableSecded,
    DramCorrectable,
    DramUncorrectable,
    RemappedRows,
    RemappedRowCorr,
    RemappedRowUnc,
    RemappedRowPending,
    RemappedRowFailure,
    Temperature,
    GpuTemp,
    PowerReadings,
    InstantPowerDraw,
    PowerDraw,
    AveragePowerDraw,
    CurrentPowerLimit,
    EnforcedPowerLimit,
    PowerLimit,
    Clocks,
    SmClock,
    MemClock,
    Fabric,
    ClusterUuid,
    CliqueId,
    State,
    Status,
    Health,
    Summary,
    Bandwidth,
    RouteUnhealthy,
    RouteRecoveryInProgress,
    GpuResetStatus,
    ResetRequired,
    DrainAndResetRecommended,
    GpuRecoveryAction,
    ClocksEventReasons,
    ReasonHwSlowdown,
    ReasonHwThermalSlowdown,
    ReasonSwThermalSlowdown,
    ReasonHwPowerBrakeSlowdown,
    Processes,
    ProcessInfo,
    Pid,
    Type,
    ProcessName,
    UsedMemory,
}

impl Tag {
    fn of(name: &[u8]) -> Tag {
        match name {
            b"nvidia_smi_log" => Tag::Log,
            b"driver_version" => Tag::DriverVersion,
            b"kmd_version" => Tag::KmdVersion,
            b"cuda_version" => Tag::CudaVersion,
            b"cuda_umd_version" => Tag::CudaUmdVersion,
            b"attached_gpus" => Tag::AttachedGpus,
            b"gpu" => Tag::Gpu,
            b"product_name" => Tag::ProductName,
            b"product_architecture" => Tag::ProductArchitecture,
            b"persistence_mode" => Tag::PersistenceMode,
            b"serial" => Tag::Serial,
            b"uuid" => Tag::Uuid,
            b"minor_number" => Tag::MinorNumber,
            b"vbios_version" => Tag::VbiosVersion,
            b"board_part_number" => Tag::BoardPartNumber,
            b"pci" => Tag::Pci,
            b"pci_bus_id" => Tag::PciBusId,
            b"performance_state" => Tag::PerformanceState,
            b"compute_mode" => Tag::ComputeMode,
            b"mig_mode" => Tag::MigMode,
            b"current_mig" => Tag::CurrentMig,
            b"pending_mig" => Tag::PendingMig,
            b"mig_devices" => Tag::MigDevices,
            b"mig_device" => Tag::MigDevice,
            b"index" => Tag::Index,
            b"gpu_instance_id" => Tag::GpuInstanceId,
            b"compute_instance_id" => Tag::ComputeInstanceId,
            b"device_attributes" => Tag::DeviceAttributes,
            b"shared" => Tag::Shared,
            b"multiprocessor_count" => Tag::MultiprocessorCount,
            b"fb_memory_usage" => Tag::FbMemoryUsage,
            b"total" => Tag::Total,
            b"used" => Tag::Used,
            b"reserved" => Tag::Reserved,
            b"utilization" => Tag::Utilization,
            b"gpu_util" => Tag::GpuUtil,
            b"memory_util" => Tag::MemoryUtil,
            b"ecc_mode" => Tag::EccMode,
            b"current_ecc" => Tag::CurrentEcc,
            b"pending_ecc" => Tag::PendingEcc,
            b"ecc_errors" => Tag::EccErrors,
            b"volatile" => Tag::Volatile,
            b"aggregate" => Tag::Aggregate,
            b"single_bit" => Tag::SingleBit,
            b"double_bit" => Tag::DoubleBit,
            b"sram_correctable" => Tag::SramCorrectable,
            b"sram_uncorrectable" => Tag::SramUncorrectable,
            b"sram_uncorrectable_parity" => Tag::SramUncorrectableParity,
            b"sram_uncorrectable_secded" => Tag::SramUncorrectableSecded,
            b"dram_correctable" => Tag::DramCorrectable,
            b"dram_uncorrectable" => Tag::DramUncorrectable,
            b"remapped_rows" => Tag::RemappedRows,
            b"remapped_row_corr" => Tag::RemappedRowCorr,
            b"remapped_row_unc" => Tag::RemappedRowUnc,
            b"remapped_row_pending" => Tag::RemappedRowPending,
            b"remapped_row_failure" => Tag::RemappedRowFailure,
            b"temperature" => Tag::Temperature,
            b"gpu_temp" => Tag::GpuTemp,
            // R535 renamed the block; both hold the same readings.
            b"gpu_power_readings" | b"power_readings" => Tag::PowerReadings,
            b"instant_power_draw" => Tag::InstantPowerDraw,
            b"power_draw" => Tag::PowerDraw,
            b"average_power_draw" => Tag::AveragePowerDraw,
            b"current_power_limit" => Tag::CurrentPowerLimit,
            b"enforced_power_limit" => Tag::EnforcedPowerLimit,
            b"power_limit" => Tag::PowerLimit,
            b"clocks" => Tag::Clocks,
            b"sm_clock" => Tag::SmClock,
            b"mem_clock" => Tag::MemClock,
            b"fabric" => Tag::Fabric,
            // R570 writes these in camelCase; accept the snake_case spelling too.
            b"clusterUuid" | b"cluster_uuid" => Tag::ClusterUuid,
            b"cliqueId" | b"clique_id" => Tag::CliqueId,
            b"state" => Tag::State,
            b"status" => Tag::Status,
            b"health" => Tag::Health,
            b"summary" => Tag::Summary,
            b"bandwidth" => Tag::Bandwidth,
            b"route_unhealthy" => Tag::RouteUnhealthy,
            b"route_recovery_in_progress" => Tag::RouteRecoveryInProgress,
            b"gpu_reset_status" => Tag::GpuResetStatus,
            b"reset_required" => Tag::ResetRequired,
            b"drain_and_reset_recommended" => Tag::DrainAndResetRecommended,
            b"gpu_recovery_action" => Tag::GpuRecoveryAction,
            // R535 renamed throttle reasons to clock event reasons; the readings are the same.
            b"clocks_event_reasons" | b"clocks_throttle_reasons" => Tag::ClocksEventReasons,
            b"clocks_event_reason_hw_slowdown" | b"clocks_throttle_reason_hw_slowdown" => {
                Tag::ReasonHwSlowdown
            }
            b"clocks_event_reason_hw_thermal_slowdown"
            | b"clocks_throttle_reason_hw_thermal_slowdown" => Tag::ReasonHwThermalSlowdown,
            b"clocks_event_reason_sw_thermal_slowdown"
            | b"clocks_throttle_reason_sw_thermal_slowdown" => Tag::ReasonSwThermalSlowdown,
            b"clocks_event_reason_hw_power_brake_slowdown"
            | b"clocks_throttle_reason_hw_power_brake_slowdown" => Tag::ReasonHwPowerBrakeSlowdown,
            b"processes" => Tag::Processes,
            b"process_info" => Tag::ProcessInfo,
            b"pid" => Tag::Pid,
            b"type" => Tag::Type,
            b"process_name" => Tag::ProcessName,
            b"used_memory" => Tag::UsedMemory,
            _ => Tag::Other,
        }
    }
}

/// Which ECC counter block a value belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Volatile,
    Aggregate,
}

/// The ECC counters of one block as written, before they are summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EccPart {
    SingleBitTotal,
    DoubleBitTotal,
    SramCorrectable,
    SramUncorrectable,
    SramParity,
    SramSecded,
    DramCorrectable,
    DramUncorrectable,
}

/// A leaf whose text the parser keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    DriverVersion,
    KmdVersion,
    CudaVersion,
    CudaUmdVersion,
    AttachedGpus,
    ProductName,
    Architecture,
    PersistenceMode,
    Serial,
    Uuid,
    MinorNumber,
    VbiosVersion,
    BoardPartNumber,
    PciBusId,
    PerformanceState,
    ComputeMode,
    MigCurrent,
    MigPending,
    MemoryTotal,
    MemoryUsed,
    MemoryReserved,
    UtilGpu,
    UtilMemory,
    EccCurrent,
    EccPending,
    Ecc(Block, EccPart),
    RemapCorr,
    RemapUnc,
    RemapPending,
    RemapFailure,
    Temperature,
    InstantPowerDraw,
    PowerDraw,
    AveragePowerDraw,
    CurrentPowerLimit,
    EnforcedPowerLimit,
    PowerLimit,
    SmClock,
    MemClock,
    ClusterUuid,
    CliqueId,
    RecoveryAction,
    ResetRequired,
    DrainAndReset,
    FabricState,
    FabricStatus,
    FabricSummary,
    FabricBandwidth,
    FabricRouteUnhealthy,
    FabricRouteRecovery,
    ClockHwSlowdown,
    ClockHwThermal,
    ClockSwThermal,
    ClockPowerBrake,
    MigIndex,
    MigGpuInstance,
    MigComputeInstance,
    MigSmCount,
    MigMemoryTotal,
    MigMemoryUsed,
    ProcPid,
    ProcType,
    ProcName,
    ProcUsedMemory,
    ProcGpuInstance,
    ProcComputeInstance,
}

/// The field the text at `path` fills, if the parser keeps it.
fn field_at(path: &[Tag]) -> Option<Field> {
    use Tag as T;
    let [T::Log, rest @ ..] = path else {
        return None;
    };
    let field = match rest {
        [T::DriverVersion] => Field::DriverVersion,
        [T::KmdVersion] => Field::KmdVersion,
        [T::CudaVersion] => Field::CudaVersion,
        [T::CudaUmdVersion] => Field::CudaUmdVersion,
        [T::AttachedGpus] => Field::AttachedGpus,
        [T::Gpu, gpu @ ..] => match gpu {
            [T::ProductName] => Field::ProductName,
            [T::ProductArchitecture] => Field::Architecture,
            [T::PersistenceMode] => Field::PersistenceMode,
            [T::Serial] => Field::Serial,
            [T::Uuid] => Field::Uuid,
            [T::MinorNumber] => Field::MinorNumber,
            [T::VbiosVersion] => Field::VbiosVersion,
            [T::BoardPartNumber] => Field::BoardPartNumber,
            [T::PerformanceState] => Field::PerformanceState,
            [T::ComputeMode] => Field::ComputeMode,
            [T::Pci, T::PciBusId] => Field::PciBusId,
            [T::MigMode, T::CurrentMig] => Field::MigCurrent,
            [T::MigMode, T::PendingMig] => Field::MigPending,
            [T::FbMemoryUsage, T::Total] => Field::MemoryTotal,
            [T::FbMemoryUsage, T::Used] => Field::MemoryUsed,
            [T::FbMemoryUsage, T::Reserved] => Field::MemoryReserved,
            [T::Utilization, T::GpuUtil] => Field::UtilGpu,
            [T::Utilization, T::MemoryUtil] => Field::UtilMemory,
            [T::EccMode, T::CurrentEcc] => Field::EccCurrent,
            [T::EccMode, T::PendingEcc] => Field::EccPending,
            [T::EccErrors, block, counter @ ..] => {
                let block = match block {
                    T::Volatile => Block::Volatile,
                    T::Aggregate => Block::Aggregate,
                    _ => return None,
                };
                let part = match counter {
                    [T::SingleBit, T::Total] => EccPart::SingleBitTotal,
                    [T::DoubleBit, T::Total] => EccPart::DoubleBitTotal,
                    [T::SramCorrectable] => EccPart::SramCorrectable,
                    [T::SramUncorrectable] => EccPart::SramUncorrectable,
                    [T::SramUncorrectableParity] => EccPart::SramParity,
                    [T::SramUncorrectableSecded] => EccPart::SramSecded,
                    [T::DramCorrectable] => EccPart::DramCorrectable,
                    [T::DramUncorrectable] => EccPart::DramUncorrectable,
                    _ => return None,
                };
                Field::Ecc(block, part)
            }
            [T::RemappedRows, T::RemappedRowCorr] => Field::RemapCorr,
            [T::RemappedRows, T::RemappedRowUnc] => Field::RemapUnc,
            [T::RemappedRows, T::RemappedRowPending] => Field::RemapPending,
            [T::RemappedRows, T::RemappedRowFailure] => Field::RemapFailure,
            [T::Temperature, T::GpuTemp] => Field::Temperature,
            [T::PowerReadings, T::InstantPowerDraw] => Field::InstantPowerDraw,
            [T::PowerReadings, T::PowerDraw] => Field::PowerDraw,
            [T::PowerReadings, T::AveragePowerDraw] => Field::AveragePowerDraw,
            [T::PowerReadings, T::CurrentPowerLimit] => Field::CurrentPowerLimit,
            [T::PowerReadings, T::EnforcedPowerLimit] => Field::EnforcedPowerLimit,
            [T::PowerReadings, T::PowerLimit] => Field::PowerLimit,
            [T::Clocks, T::SmClock] => Field::SmClock,
            [T::Clocks, T::MemClock] => Field::MemClock,
            [T::Fabric, T::ClusterUuid] => Field::ClusterUuid,
            [T::Fabric, T::CliqueId] => Field::CliqueId,
            [T::Fabric, T::State] => Field::FabricState,
            [T::Fabric, T::Status] => Field::FabricStatus,
            [T::Fabric, T::Health, T::Summary] => Field::FabricSummary,
            [T::Fabric, T::Health, T::Bandwidth] => Field::FabricBandwidth,
            [T::Fabric, T::Health, T::RouteUnhealthy] => Field::FabricRouteUnhealthy,
            [T::Fabric, T::Health, T::RouteRecoveryInProgress] => Field::FabricRouteRecovery,
            [T::GpuRecoveryAction] => Field::RecoveryAction,
            [T::GpuResetStatus, T::ResetRequired] => Field::ResetRequired,
            [T::GpuResetStatus, T::DrainAndResetRecommended] => Field::DrainAndReset,
            [T::ClocksEventReasons, reason] => match reason {
                T::ReasonHwSlowdown => Field::ClockHwSlowdown,
                T::ReasonHwThermalSlowdown => Field::ClockHwThermal,
                T::ReasonSwThermalSlowdown => Field::ClockSwThermal,
                T::ReasonHwPowerBrakeSlowdown => Field::ClockPowerBrake,
                _ => return None,
            },
            [T::MigDevices, T::MigDevice, mig @ ..] => match mig {
                [T::Index] => Field::MigIndex,
                [T::GpuInstanceId] => Field::MigGpuInstance,
                [T::ComputeInstanceId] => Field::MigComputeInstance,
                [T::DeviceAttributes, T::Shared, T::MultiprocessorCount] => Field::MigSmCount,
                [T::FbMemoryUsage, T::Total] => Field::MigMemoryTotal,
                [T::FbMemoryUsage, T::Used] => Field::MigMemoryUsed,
                _ => return None,
            },
            [T::Processes, T::ProcessInfo, proc] => match proc {
                T::Pid => Field::ProcPid,
                T::Type => Field::ProcType,
                T::ProcessName => Field::ProcName,
                T::UsedMemory => Field::ProcUsedMemory,
                T::GpuInstanceId => Field::ProcGpuInstance,
                T::ComputeInstanceId => Field::ProcComputeInstance,
                _ => return None,
            },
            _ => return None,
        },
        _ => return None,
    };
    Some(field)
}

/// The ECC counters of one block, as read.
#[derive(Debug, Default)]
struct EccRaw {
    single_bit_total: Option<u64>,
    double_bit_total: Option<u64>,
    sram_correctable: Option<u64>,
    sram_uncorrectable: Option<u64>,
    sram_parity: Option<u64>,
    sram_secded: Option<u64>,
    dram_correctable: Option<u64>,
    dram_uncorrectable: Option<u64>,
}

impl EccRaw {
    fn slot(&mut self, part: EccPart) -> &mut Option<u64> {
        match part {
            EccPart::SingleBitTotal => &mut self.single_bit_total,
            EccPart::DoubleBitTotal => &mut self.double_bit_total,
            EccPart::SramCorrectable => &mut self.sram_correctable,
            EccPart::SramUncorrectable => &mut self.sram_uncorrectable,
            EccPart::SramParity => &mut self.sram_parity,
            EccPart::SramSecded => &mut self.sram_secded,
            EccPart::DramCorrectable => &mut self.dram_correctable,
            EccPart::DramUncorrectable => &mut self.dram_uncorrectable,
        }
    }

    fn counts(&self) -> Counts {
        // R570 splits the SRAM uncorrectable count into parity and SEC-DED; when the split is
        // there it is the count, and a total beside it would count the same errors twice.
        let sram_uncorrectable = if self.sram_parity.is_some() || self.sram_secded.is_some() {
            sum(&[self.sram_parity, self.sram_secded])
        } else {
            self.sram_uncorrectable
        };
        Counts {
            correctable: sum(&[
                self.single_bit_total,
                self.sram_correctable,
                self.dram_correctable,
            ]),
            uncorrectable: sum(&[
                self.double_bit_total,
                sram_uncorrectable,
                self.dram_uncorrectable,
            ]),
        }
    }
}

/// The sum of the counters present, or `None` when none is.
fn sum(parts: &[Option<u64>]) -> Option<u64> {
    parts.iter().flatten().fold(None, |acc: Option<u64>, n| {
        Some(acc.unwrap_or(0).saturating_add(*n))
    })
}

/// A `<gpu>` being read: the fields, plus the readings that are only resolved at its end.
#[derive(Debug, Default)]
struct GpuDraft {
    gpu: XmlGpu,
    volatile: EccRaw,
    aggregate: EccRaw,
    remap: RowRemap,
    instant_power_draw: Option<f64>,
    power_draw: Option<f64>,
    average_power_draw: Option<f64>,
    current_power_limit: Option<f64>,
    enforced_power_limit: Option<f64>,
    power_limit: Option<f64>,
    cluster_uuid: Option<String>,
    clique_id: Option<u32>,
}

impl GpuDraft {
    fn finish(self) -> XmlGpu {
        let GpuDraft {
            mut gpu,
            volatile,
            aggregate,
            remap,
            ..
        } = self;
        gpu.ecc = EccCounts {
            volatile: volatile.counts(),
            aggregate: aggregate.counts(),
        };
        if remap != RowRemap::default() {
            gpu.row_remap = Some(remap);
        }
        gpu.power_draw_w = self
            .instant_power_draw
            .or(self.power_draw)
            .or(self.average_power_draw);
        gpu.power_limit_w = self
            .current_power_limit
            .or(self.enforced_power_limit)
            .or(self.power_limit);
        if gpu.pci_bus_id.is_none() {
            gpu.pci_bus_id = gpu.id.as_deref().and_then(widen_bus_id);
        }
        gpu.fabric = self
            .cluster_uuid
            .filter(|uuid| !is_zero_placeholder(uuid))
            .map(|cluster_uuid| Fabric {
                cluster_uuid,
                clique_id: self.clique_id,
            });
        gpu
    }
}

/// The document read so far.
#[derive(Debug, Default)]
struct Document {
    root_seen: bool,
    driver_version: Option<String>,
    kmd_version: Option<String>,
    cuda_version: Option<String>,
    cuda_umd_version: Option<String>,
    attached_gpus: Option<u32>,
    gpus: Vec<XmlGpu>,
    current: Option<GpuDraft>,
}

impl Document {
    fn open(&mut self, path: &mut Vec<Tag>, start: &BytesStart, at: u64) -> Result<(), XmlError> {
        let name = start.name();
        let tag = match path.last() {
            None => {
                if name.as_ref() != b"nvidia_smi_log" {
                    return Err(XmlError::WrongRoot {
                        found: quote_name(name.as_ref()),
                    });
                }
                self.root_seen = true;
                Tag::Log
            }
            Some(Tag::Other) => Tag::Other,
            Some(_) => Tag::of(name.as_ref()),
        };
        if path.len() >= MAX_DEPTH {
            return Err(XmlError::TooDeep { position: at });
        }
        path.push(tag);
        match path.as_slice() {
            [Tag::Log, Tag::Gpu] => {
                let id = start
                    .try_get_attribute("id")
                    .map_err(|e| XmlError::Malformed {
                        position: at,
                        reason: e.to_string(),
                    })?
                    .map(|attr| attr.unescape_value())
                    .transpose()
                    .map_err(|e| XmlError::Malformed {
                        position: at,
                        reason: e.to_string(),
                    })?;
                let mut draft = GpuDraft::default();
                draft.gpu.id = id.as_deref().and_then(value::present).map(str::to_owned);
                self.current = Some(draft);
            }
            [Tag::Log, Tag::Gpu, Tag::MigDevices, Tag::MigDevice] => {
                if let Some(draft) = &mut self.current {
                    draft.gpu.mig_devices.push(XmlMigDevice::default());
                }
            }
            [Tag::Log, Tag::Gpu, Tag::Processes, Tag::ProcessInfo] => {
                if let Some(draft) = &mut self.current {
                    draft.gpu.processes.push(XmlProcess::default());
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn close(&mut self, path: &mut Vec<Tag>) {
        if let [Tag::Log, Tag::Gpu] = path.as_slice() {
            if let Some(draft) = self.current.take() {
                self.gpus.push(draft.finish());
            }
        }
        path.pop();
    }

    fn set(&mut self, field: Field, text: &str) {
        match field {
            Field::DriverVersion => self.driver_version = owned_version(text),
            Field::KmdVersion => self.kmd_version = owned_version(text),
            Field::CudaVersion => self.cuda_version = owned_version(text),
            Field::CudaUmdVersion => self.cuda_umd_version = owned_version(text),
            Field::AttachedGpus => self.attached_gpus = unsigned_u32(text),
            _ => {
                if let Some(draft) = &mut self.current {
                    draft.set(field, text);
                }
            }
        }
    }

    fn finish(self) -> QueryXml {
        QueryXml {
            driver_version: self.kmd_version.or(self.driver_version),
            cuda_version: self.cuda_umd_version.or(self.cuda_version),
            attached_gpus: self.attached_gpus,
            gpus: self.gpus,
        }
    }
}

impl GpuDraft {
    fn set(&mut self, field: Field, text: &str) {
        let gpu = &mut self.gpu;
        match field {
            Field::ProductName => gpu.product_name = owned(text),
            Field::Architecture => gpu.architecture = owned(text),
            Field::PersistenceMode => gpu.persistence_mode = flag(text),
            Field::Serial => gpu.serial = owned(text).filter(|s| !is_zero_placeholder(s)),
            Field::Uuid => gpu.uuid = owned(text),
            Field::MinorNumber => gpu.minor_number = unsigned_u32(text),
            Field::VbiosVersion => gpu.vbios_version = owned(text),
            Field::BoardPartNumber => gpu.board_part_number = owned(text),
            Field::PciBusId => gpu.pci_bus_id = value::present(text).and_then(widen_bus_id),
            Field::PerformanceState => gpu.pstate = owned(text),
            Field::ComputeMode => gpu.compute_mode = compute_mode(text),
            Field::MigCurrent => gpu.mig_mode_current = flag(text),
            Field::MigPending => gpu.mig_mode_pending = flag(text),
            Field::MemoryTotal => gpu.memory_total_mib = value::unsigned(text),
            Field::MemoryUsed => gpu.memory_used_mib = value::unsigned(text),
            Field::MemoryReserved => gpu.memory_reserved_mib = value::unsigned(text),
            Field::UtilGpu => gpu.utilization_gpu_pct = unsigned_u32(text),
            Field::UtilMemory => gpu.utilization_memory_pct = unsigned_u32(text),
            Field::EccCurrent => gpu.ecc_mode_current = flag(text),
            Field::EccPending => gpu.ecc_mode_pending = flag(text),
            Field::Ecc(block, part) => {
                let raw = match block {
                    Block::Volatile => &mut self.volatile,
                    Block::Aggregate => &mut self.aggregate,
                };
                *raw.slot(part) = value::unsigned(text);
            }
            Field::RemapCorr => self.remap.correctable = value::unsigned(text),
            Field::RemapUnc => self.remap.uncorrectable = value::unsigned(text),
            Field::RemapPending => self.remap.pending = flag(text),
            Field::RemapFailure => self.remap.failure = flag(text),
            Field::Temperature => gpu.temperature_c = signed_i32(text),
            Field::InstantPowerDraw => self.instant_power_draw = value::number(text),
            Field::PowerDraw => self.power_draw = value::number(text),
            Field::AveragePowerDraw => self.average_power_draw = value::number(text),
            Field::CurrentPowerLimit => self.current_power_limit = value::number(text),
            Field::EnforcedPowerLimit => self.enforced_power_limit = value::number(text),
            Field::PowerLimit => self.power_limit = value::number(text),
            Field::SmClock => gpu.clocks_sm_mhz = unsigned_u32(text),
            Field::MemClock => gpu.clocks_mem_mhz = unsigned_u32(text),
            Field::ClusterUuid => self.cluster_uuid = owned(text),
            Field::CliqueId => self.clique_id = unsigned_u32(text),
            Field::RecoveryAction => gpu.driver_health.recovery_action = owned(text),
            Field::ResetRequired => gpu.driver_health.reset_required = truth(text),
            Field::DrainAndReset => gpu.driver_health.drain_and_reset_recommended = truth(text),
            Field::FabricState => gpu.driver_health.fabric_state = owned(text),
            Field::FabricStatus => gpu.driver_health.fabric_status = owned(text),
            Field::FabricSummary => gpu.driver_health.fabric_summary = owned(text),
            Field::FabricBandwidth => gpu.driver_health.fabric_bandwidth = owned(text),
            Field::FabricRouteUnhealthy => {
                gpu.driver_health.fabric_route_unhealthy = truth(text);
            }
            Field::FabricRouteRecovery => {
                gpu.driver_health.fabric_route_recovery_in_progress = truth(text);
            }
            Field::ClockHwSlowdown => gpu.driver_health.clock_events.hw_slowdown = truth(text),
            Field::ClockHwThermal => {
                gpu.driver_health.clock_events.hw_thermal_slowdown = truth(text);
            }
            Field::ClockSwThermal => {
                gpu.driver_health.clock_events.sw_thermal_slowdown = truth(text);
            }
            Field::ClockPowerBrake => {
                gpu.driver_health.clock_events.hw_power_brake_slowdown = truth(text);
            }
            Field::MigIndex
            | Field::MigGpuInstance
            | Field::MigComputeInstance
            | Field::MigSmCount
            | Field::MigMemoryTotal
            | Field::MigMemoryUsed => {
                if let Some(mig) = gpu.mig_devices.last_mut() {
                    set_mig(mig, field, text);
                }
            }
            Field::ProcPid
            | Field::ProcType
            | Field::ProcName
            | Field::ProcUsedMemory
            | Field::ProcGpuInstance
            | Field::ProcComputeInstance => {
                if let Some(process) = gpu.processes.last_mut() {
                    set_process(process, field, text);
                }
            }
            Field::DriverVersion
            | Field::KmdVersion
            | Field::CudaVersion
            | Field::CudaUmdVersion
            | Field::AttachedGpus => {}
        }
    }
}

fn set_mig(mig: &mut XmlMigDevice, field: Field, text: &str) {
    match field {
        Field::MigIndex => mig.index = unsigned_u32(text),
        Field::MigGpuInstance => mig.gpu_instance_id = unsigned_u32(text),
        Field::MigComputeInstance => mig.compute_instance_id = unsigned_u32(text),
        Field::MigSmCount => mig.multiprocessor_count = unsigned_u32(text),
        Field::MigMemoryTotal => mig.memory_total_mib = value::unsigned(text),
        Field::MigMemoryUsed => mig.memory_used_mib = value::unsigned(text),
        _ => {}
    }
}

fn set_process(process: &mut XmlProcess, field: Field, text: &str) {
    match field {
        Field::ProcPid => process.pid = unsigned_u32(text),
        Field::ProcType => process.process_type = owned(text),
        Field::ProcName => process.name = owned(text),
        Field::ProcUsedMemory => process.used_memory_mib = value::unsigned(text),
        Field::ProcGpuInstance => process.gpu_instance_id = unsigned_u32(text),
        Field::ProcComputeInstance => process.compute_instance_id = unsigned_u32(text),
        _ => {}
    }
}

fn owned(text: &str) -> Option<String> {
    value::present(text).map(str::to_owned)
}

fn owned_version(text: &str) -> Option<String> {
    value::version(text).map(str::to_owned)
}

fn unsigned_u32(text: &str) -> Option<u32> {
    value::unsigned(text).and_then(|n| u32::try_from(n).ok())
}

/// A whole number that may be negative, such as `-7 C`.
fn signed_i32(text: &str) -> Option<i32> {
    let n = value::number(text)?;
    if n.fract() != 0.0 || n < f64::from(i32::MIN) || n > f64::from(i32::MAX) {
        return None;
    }
    // In range and whole, so the conversion is exact.
    #[allow(clippy::cast_possible_truncation)]
    Some(n as i32)
}

/// `Enabled`/`Disabled` (modes) and `Yes`/`No` (row remapper states).
fn flag(text: &str) -> Option<bool> {
    let text = value::present(text)?;
    if text.eq_ignore_ascii_case("enabled") || text.eq_ignore_ascii_case("yes") {
        Some(true)
    } else if text.eq_ignore_ascii_case("disabled") || text.eq_ignore_ascii_case("no") {
        Some(false)
    } else {
        None
    }
}

/// `Yes`/`No`, `True`/`False` and `Active`/`Not Active` (health and clock event readings).
fn truth(text: &str) -> Option<bool> {
    value::truth(text)
}

fn compute_mode(text: &str) -> Option<ComputeMode> {
    let text = value::present(text)?;
    let is = |spelling: &str| {
        text.len() == spelling.len()
            && text
                .bytes()
                .zip(spelling.bytes())
                .all(|(a, b)| a.eq_ignore_ascii_case(&b) || (a == b' ' && b == b'_'))
    };
    if is("default") {
        Some(ComputeMode::Default)
    } else if is("exclusive_process") || is("exclusive_thread") {
        Some(ComputeMode::ExclusiveProcess)
    } else if is("prohibited") {
        Some(ComputeMode::Prohibited)
    } else {
        None
    }
}

/// A serial or UUID made only of zeros (and dashes): a placeholder, not an identity.
fn is_zero_placeholder(text: &str) -> bool {
    text.bytes().any(|b| b == b'0') && text.bytes().all(|b| b == b'0' || b == b'-')
}

/// The element name for an error message, shortened and made printable.
fn quote_name(name: &[u8]) -> String {
    let name = String::from_utf8_lossy(name);
    let name: Cow<'_, str> = if name.chars().count() > MAX_QUOTED_NAME {
        Cow::Owned(
            name.chars()
                .take(MAX_QUOTED_NAME)
                .chain("...".chars())
                .collect(),
        )
    } else {
        name
    };
    name.escape_debug().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads one of the hand-written documents of `testdata/smi/qx/`.
    macro_rules! fixture {
        ($name:literal) => {
            include_bytes!(concat!("../../../testdata/smi/qx/", $name)).as_slice()
        };
    }

    fn parse(bytes: &[u8]) -> QueryXml {
        parse_query_xml(bytes).expect("fixture parses")
    }

    #[test]
    fn h100_r570_reads_new_names_instant_power_split_ecc_and_fabric() {
        let doc = parse(fixture!("h100-r570-fabric.xml"));
        assert_eq!(doc.driver_version.as_deref(), Some("570.124.06-kmd"));
        assert_eq!(doc.cuda_version.as_deref(), Some("12.8.1"));
        assert_eq!(doc.attached_gpus, Some(1));
        let gpu = &doc.gpus[0];
        assert_eq!(gpu.id.as_deref(), Some("00000000:18:00.0"));
        assert_eq!(gpu.pci_bus_id.as_deref(), Some("00000000:18:00.0"));
        assert_eq!(gpu.architecture.as_deref(), Some("Hopper"));
        assert_eq!(gpu.serial.as_deref(), Some("1650123456789"));
        assert_eq!(gpu.minor_number, Some(3));
        assert_eq!(gpu.board_part_number.as_deref(), Some("692-2G520-0200-000"));
        assert_eq!(gpu.memory_total_mib, Some(81559));
        assert_eq!(gpu.memory_used_mib, Some(4));
        assert_eq!(gpu.memory_reserved_mib, Some(551));
        assert_eq!(gpu.persistence_mode, Some(true));
        assert_eq!(gpu.compute_mode, Some(ComputeMode::ExclusiveProcess));
        assert_eq!(gpu.ecc_mode_current, Some(true));
        assert_eq!(gpu.ecc_mode_pending, Some(true));
        // Instant draw wins over the average; the module and memory blocks are not the GPU's.
        assert_eq!(gpu.power_draw_w, Some(121.53));
        assert_eq!(gpu.power_limit_w, Some(700.0));
        assert_eq!(gpu.utilization_gpu_pct, Some(87));
        assert_eq!(gpu.utilization_memory_pct, Some(41));
        assert_eq!(gpu.temperature_c, Some(35));
        assert_eq!(gpu.clocks_sm_mhz, Some(1980));
        assert_eq!(gpu.clocks_mem_mhz, Some(2619));
        assert_eq!(gpu.pstate.as_deref(), Some("P0"));
        assert_eq!(gpu.mig_mode_current, Some(false));
        assert_eq!(gpu.mig_devices, []);
        assert_eq!(
            gpu.ecc.volatile,
            Counts {
                correctable: Some(12),
                uncorrectable: Some(5),
            }
        );
        // Parity 3 + SEC-DED 5 + DRAM 1: the sram_uncorrectable total (8) and the per-source
        // breakdown (6 + 2) count the same errors and are not added again.
        assert_eq!(
            gpu.ecc.aggregate,
            Counts {
                correctable: Some(120),
                uncorrectable: Some(9),
            }
        );
        assert_eq!(
            gpu.row_remap,
            Some(RowRemap {
                correctable: Some(2),
                uncorrectable: Some(1),
                pending: Some(true),
                failure: Some(false),
            })
        );
        assert_eq!(
            gpu.fabric,
            Some(Fabric {
                cluster_uuid: "a1b2c3d4-0000-4000-8000-00000000beef".into(),
                clique_id: Some(32766),
            })
        );
        assert_eq!(gpu.processes.len(), 3);
        assert_eq!(gpu.compute_process_count(), 2, "C and M+C, not G");
        assert_eq!(
            gpu.processes[0],
            XmlProcess {
                pid: Some(4242),
                process_type: Some("C".into()),
                name: Some("python3".into()),
                used_memory_mib: Some(40960),
                gpu_instance_id: None,
                compute_instance_id: None,
            }
        );
    }

    #[test]
    fn r616_deprecations_read_as_absent() {
        let doc = parse(fixture!("r616-deprecated.xml"));
        assert_eq!(doc.driver_version.as_deref(), Some("616.56"));
        assert_eq!(doc.cuda_version.as_deref(), Some("13.4"));
        let gpu = &doc.gpus[0];
        assert_eq!(gpu.serial, None, "a serial of 0 is no serial");
        assert_eq!(gpu.persistence_mode, None);
        assert_eq!(gpu.minor_number, None);
        assert_eq!(gpu.board_part_number, None);
        assert_eq!(gpu.pstate, None);
        assert_eq!(gpu.memory_total_mib, Some(32607));
        assert_eq!(gpu.memory_reserved_mib, None);
        assert_eq!(gpu.utilization_memory_pct, None);
        assert_eq!(gpu.ecc_mode_current, None);
        assert_eq!(gpu.ecc, EccCounts::default());
        assert_eq!(gpu.row_remap, None);
        assert_eq!(gpu.power_draw_w, None);
        assert_eq!(
            gpu.power_limit_w,
            Some(575.0),
            "enforced limit is the fallback"
        );
        assert_eq!(gpu.clocks_sm_mhz, None);
        assert_eq!(gpu.clocks_mem_mhz, Some(14001));
        assert_eq!(gpu.mig_mode_current, None);
        assert_eq!(gpu.fabric, None);
        assert_eq!(gpu.compute_process_count(), 0, "Xwayland is graphics");
    }

    #[test]
    fn a100_in_mig_mode_keeps_its_own_memory_apart_from_the_mig_devices() {
        let doc = parse(fixture!("a100-mig.xml"));
        let gpu = &doc.gpus[0];
        assert_eq!(gpu.mig_mode_current, Some(true));
        assert_eq!(gpu.mig_mode_pending, Some(false));
        assert_eq!(gpu.memory_total_mib, Some(40960));
        assert_eq!(
            gpu.mig_devices,
            [
                XmlMigDevice {
                    index: Some(0),
                    gpu_instance_id: Some(1),
                    compute_instance_id: Some(0),
                    multiprocessor_count: Some(42),
                    memory_total_mib: Some(19968),
                    memory_used_mib: Some(19),
                },
                XmlMigDevice {
                    index: Some(1),
                    gpu_instance_id: Some(2),
                    compute_instance_id: Some(0),
                    multiprocessor_count: None,
                    memory_total_mib: Some(9856),
                    memory_used_mib: Some(7),
                },
            ]
        );
        // A MIG device's own ECC count is not the GPU's.
        assert_eq!(gpu.ecc.volatile.uncorrectable, Some(0));
        assert_eq!(gpu.ecc.aggregate.uncorrectable, Some(2));
        assert_eq!(gpu.ecc.aggregate.correctable, Some(7));
        assert_eq!(gpu.power_draw_w, Some(55.12));
        assert_eq!(
            gpu.power_limit_w,
            Some(350.0),
            "enforced before the plain limit"
        );
        assert_eq!(gpu.fabric, None, "a zero cluster UUID is no fabric");
        assert_eq!(gpu.processes[0].gpu_instance_id, Some(1));
        assert_eq!(gpu.processes[0].compute_instance_id, Some(0));
    }

    #[test]
    fn crlf_without_declaration_and_odd_shapes() {
        let doc = parse(fixture!("crlf-no-declaration.xml"));
        assert_eq!(doc.driver_version.as_deref(), Some("535.54.03"));
        assert_eq!(doc.attached_gpus, Some(2));
        assert_eq!(
            doc.gpus.len(),
            2,
            "a <gpu> inside an unknown element is not a GPU"
        );
        let first = &doc.gpus[0];
        assert_eq!(first.product_name.as_deref(), Some("Graphics Device"));
        assert_eq!(first.serial, None, "all zeros is no serial");
        assert_eq!(first.pci_bus_id.as_deref(), Some("00000000:3B:00.0"));
        assert_eq!(first.id.as_deref(), Some("0000:3b:00.0"));
        assert_eq!(
            first.memory_total_mib,
            Some(24576),
            "unknown wrappers lend no meaning"
        );
        assert_eq!(first.compute_mode, Some(ComputeMode::ExclusiveProcess));
        assert_eq!(first.processes, []);
        assert_eq!(first.mig_devices, []);
        let second = &doc.gpus[1];
        assert_eq!(second.product_name.as_deref(), Some("Tesla & Co A"));
        assert_eq!(second.compute_mode, Some(ComputeMode::Prohibited));
        assert_eq!(second.processes, []);
    }

    #[test]
    fn declared_entities_are_never_expanded() {
        match parse_query_xml(fixture!("hostile-entity.xml")) {
            Err(XmlError::Malformed { reason, .. }) => {
                assert!(reason.contains("xxe"), "{reason}");
            }
            Ok(doc) => {
                let gpu = &doc.gpus[0];
                for text in [&gpu.product_name, &gpu.uuid].into_iter().flatten() {
                    assert!(!text.contains("root:"), "file content leaked: {text}");
                    assert!(!text.contains("lollol"), "entity expanded: {text}");
                }
            }
            Err(other) => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn an_unknown_entity_in_a_skipped_element_costs_nothing() {
        let doc = parse(
            b"<nvidia_smi_log><gpu id=\"0000:01:00.0\"><note>&nope;</note>\
              <uuid>GPU-1</uuid></gpu></nvidia_smi_log>",
        );
        assert_eq!(doc.gpus[0].uuid.as_deref(), Some("GPU-1"));
    }

    #[test]
    fn a_root_without_gpus_is_an_empty_list() {
        let doc = parse(b"<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n</nvidia_smi_log>\n");
        assert_eq!(doc, QueryXml::default());
        assert_eq!(parse(b"<nvidia_smi_log/>"), QueryXml::default());
    }

    #[test]
    fn errors_name_what_is_wrong() {
        assert_eq!(parse_query_xml(b""), Err(XmlError::NoRoot));
        assert_eq!(
            parse_query_xml(b"<?xml version=\"1.0\" ?>\n<!-- nothing -->"),
            Err(XmlError::NoRoot)
        );
        assert_eq!(
            parse_query_xml(b"<html><body/></html>"),
            Err(XmlError::WrongRoot {
                found: "html".into()
            })
        );
        assert_eq!(
            parse_query_xml(b"<nvidia_smi_log><gpu id=\"x\"><uuid>GPU-1</uuid>"),
            Err(XmlError::Truncated)
        );
        let mismatched = parse_query_xml(b"<nvidia_smi_log><gpu></uuid></nvidia_smi_log>");
        assert!(
            matches!(mismatched, Err(XmlError::Malformed { position: 21, .. })),
            "{mismatched:?}"
        );
        assert_eq!(
            XmlError::NoRoot.to_string(),
            "nvidia-smi -q -x output has no <nvidia_smi_log> root"
        );
        let message = mismatched.unwrap_err().to_string();
        assert!(
            message.starts_with("nvidia-smi -q -x output is not well-formed XML at byte 21: "),
            "{message}"
        );
    }

    #[test]
    fn nesting_is_bounded() {
        let mut doc = b"<nvidia_smi_log>".to_vec();
        for _ in 0..MAX_DEPTH {
            doc.extend_from_slice(b"<a>");
        }
        assert!(matches!(
            parse_query_xml(&doc),
            Err(XmlError::TooDeep { .. })
        ));
    }

    #[test]
    fn the_gpu_id_stands_in_for_a_missing_pci_block() {
        let doc = parse(b"<nvidia_smi_log><gpu id=\"0000:65:00.0\"/></nvidia_smi_log>");
        assert_eq!(doc.gpus.len(), 1);
        assert_eq!(doc.gpus[0].pci_bus_id.as_deref(), Some("00000000:65:00.0"));
    }

    #[test]
    fn bus_ids_widen_to_nvml_form() {
        assert_eq!(
            widen_bus_id("0000:00:03.0").as_deref(),
            Some("00000000:00:03.0")
        );
        assert_eq!(
            widen_bus_id("00000000:18:00.0").as_deref(),
            Some("00000000:18:00.0")
        );
        assert_eq!(
            widen_bus_id("00001580:00:00.0").as_deref(),
            Some("00001580:00:00.0")
        );
        assert_eq!(
            widen_bus_id(" 0000:af:1f.7 ").as_deref(),
            Some("00000000:AF:1F.7")
        );
        assert_eq!(widen_bus_id("3b:00.0").as_deref(), Some("00000000:3B:00.0"));
        for bad in [
            "",
            "N/A",
            "0000:18:00",
            "000000000:18:00.0",
            "0:18:20.0",
            "0:18:00.8",
        ] {
            assert_eq!(widen_bus_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn compute_modes_and_flags_read_every_spelling() {
        assert_eq!(compute_mode("Default"), Some(ComputeMode::Default));
        assert_eq!(
            compute_mode("Exclusive Process"),
            Some(ComputeMode::ExclusiveProcess)
        );
        assert_eq!(compute_mode("N/A"), None);
        assert_eq!(compute_mode("Shared"), None);
        assert_eq!(flag("Enabled"), Some(true));
        assert_eq!(flag("No"), Some(false));
        assert_eq!(flag("[N/A]"), None);
    }

    #[test]
    fn ecc_sums_saturate_instead_of_overflowing() {
        let raw = EccRaw {
            sram_correctable: Some(u64::MAX),
            dram_correctable: Some(1),
            ..EccRaw::default()
        };
        assert_eq!(raw.counts().correctable, Some(u64::MAX));
        assert_eq!(raw.counts().uncorrectable, None);
    }
}
