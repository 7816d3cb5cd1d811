//! The per-GPU sample readings both exporters publish, in one table: the Prometheus text
//! (`metrics.rs`) and the OTLP export (`otlp.rs`) read their names, descriptions, units and
//! values from [`READINGS`], so a reading added here is exported both ways.

use crate::smi::samples::GpuSample;

/// How the OTLP export carries a reading's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A whole number (bytes, °C, Hz, a count).
    Int,
    /// A fraction or watts.
    Double,
}

/// One reading of a sample, in SI units (bytes, hertz, a 0–1 ratio, watts, °C).
#[derive(Debug)]
pub struct Reading {
    /// The Prometheus name and help text; `None` where only OTLP exports it.
    pub prometheus: Option<(&'static str, &'static str)>,
    /// The OTLP name and description.
    pub otlp: (&'static str, &'static str),
    /// The OTLP unit (UCUM).
    pub unit: &'static str,
    /// How OTLP carries it.
    pub kind: Kind,
    /// The value, when the sample has it.
    pub read: fn(&GpuSample) -> Option<f64>,
}

const MIB: f64 = 1024.0 * 1024.0;
const MHZ: f64 = 1e6;

fn bytes(mib: Option<u64>) -> Option<f64> {
    mib.map(|m| m as f64 * MIB)
}

fn ratio(pct: Option<u32>) -> Option<f64> {
    pct.map(|p| f64::from(p) / 100.0)
}

fn hz(mhz: Option<u32>) -> Option<f64> {
    mhz.map(|m| f64::from(m) * MHZ)
}

/// The readings, in the order both exporters publish them.
pub const READINGS: &[Reading] = &[
    Reading {
        prometheus: Some(("bcd_gpu_memory_total_bytes", "Framebuffer memory size.")),
        otlp: ("bcd.gpu.memory.total", "Framebuffer size"),
        unit: "By",
        kind: Kind::Int,
        read: |s| bytes(s.memory_total_mib),
    },
    Reading {
        prometheus: Some(("bcd_gpu_memory_used_bytes", "Framebuffer memory in use.")),
        otlp: ("bcd.gpu.memory.used", "Framebuffer in use"),
        unit: "By",
        kind: Kind::Int,
        read: |s| bytes(s.memory_used_mib),
    },
    Reading {
        prometheus: None,
        otlp: ("bcd.gpu.memory.reserved", "Framebuffer the driver reserves"),
        unit: "By",
        kind: Kind::Int,
        read: |s| bytes(s.memory_reserved_mib),
    },
    Reading {
        prometheus: None,
        otlp: ("bcd.gpu.memory.free", "Framebuffer free"),
        unit: "By",
        kind: Kind::Int,
        read: |s| bytes(s.memory_free_mib),
    },
    Reading {
        prometheus: Some((
            "bcd_gpu_utilization_ratio",
            "Share of the last sample period the GPU was busy (0 to 1).",
        )),
        otlp: (
            "bcd.gpu.utilization",
            "Fraction of the last sample period the GPU was busy",
        ),
        unit: "1",
        kind: Kind::Double,
        read: |s| ratio(s.utilization_gpu_pct),
    },
    Reading {
        prometheus: Some((
            "bcd_gpu_memory_utilization_ratio",
            "Share of the last sample period the memory controller was busy (0 to 1).",
        )),
        otlp: (
            "bcd.gpu.memory.utilization",
            "Fraction of the last sample period the memory controller was busy",
        ),
        unit: "1",
        kind: Kind::Double,
        read: |s| ratio(s.utilization_memory_pct),
    },
    Reading {
        prometheus: Some(("bcd_gpu_temperature_celsius", "GPU core temperature.")),
        otlp: ("bcd.gpu.temperature", "Core temperature"),
        unit: "Cel",
        kind: Kind::Int,
        read: |s| s.temperature_c.map(f64::from),
    },
    Reading {
        prometheus: Some(("bcd_gpu_power_draw_watts", "Power draw.")),
        otlp: ("bcd.gpu.power.draw", "Power draw"),
        unit: "W",
        kind: Kind::Double,
        read: |s| s.power_draw_w,
    },
    Reading {
        prometheus: Some(("bcd_gpu_power_limit_watts", "Power limit.")),
        otlp: ("bcd.gpu.power.limit", "Power limit"),
        unit: "W",
        kind: Kind::Double,
        read: |s| s.power_limit_w,
    },
    Reading {
        prometheus: Some(("bcd_gpu_sm_clock_hertz", "SM clock.")),
        otlp: ("bcd.gpu.clock.sm", "SM clock"),
        unit: "Hz",
        kind: Kind::Int,
        read: |s| hz(s.clocks_sm_mhz),
    },
    Reading {
        prometheus: Some(("bcd_gpu_memory_clock_hertz", "Memory clock.")),
        otlp: ("bcd.gpu.clock.memory", "Memory clock"),
        unit: "Hz",
        kind: Kind::Int,
        read: |s| hz(s.clocks_mem_mhz),
    },
    Reading {
        prometheus: Some(("bcd_gpu_compute_processes", "Compute processes on the GPU.")),
        otlp: ("bcd.gpu.processes", "Compute processes on the GPU"),
        unit: "{process}",
        kind: Kind::Int,
        read: |s| s.compute_processes.map(f64::from),
    },
];
