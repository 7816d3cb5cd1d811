//! The node's metrics in the Prometheus text format (version 0.0.4): per-GPU samples and
//! health from the latest sample and inventory, and the inventory's age and the last
//! `nvidia-smi` calls. Units are in the names; counters end in `_total`; every GPU series
//! carries a `uuid` label.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use crate::inventory::document::Inventory;
use crate::smi::samples::GpuSample;
use crate::smi::snapshot::QueryRecord;

/// Bytes in a MiB.
const MIB: f64 = 1024.0 * 1024.0;

/// How the sampler runs now, for `status` and the metrics.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SamplingState {
    /// `true` while one long-lived `nvidia-smi -lms` child feeds the samples.
    pub loop_mode: bool,
    /// Why samples are one-shot queries instead, when they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub one_shot_because: Option<String>,
    /// Loop-mode sessions started again after a child died or stalled.
    pub restarts: u64,
    /// With a GPU in MIG mode: where its MIG devices' memory comes from (`-q -x` every
    /// minute), how old the last read is, or why it is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig_memory: Option<String>,
    /// `-q -x` reads of the MIG devices' memory.
    pub mig_memory_reads: u64,
}

/// What one scrape shows.
#[derive(Debug, Default)]
pub struct MetricsView<'a> {
    /// The latest inventory.
    pub inventory: Option<&'a Inventory>,
    /// How long ago it was collected.
    pub inventory_age: Option<Duration>,
    /// The latest samples.
    pub samples: &'a [GpuSample],
    /// Per GPU UUID: the scheduling answer (healthy or degraded).
    pub healthy: BTreeMap<String, bool>,
    /// Per GPU UUID: the health state.
    pub states: BTreeMap<String, crate::health::verdict::HealthState>,
    /// `(uuid, xid, class, times seen this boot)`.
    pub xid_totals: Vec<(String, u32, &'static str, u64)>,
    /// Per GPU UUID: the XID numbers raised this boot.
    pub xids: BTreeMap<String, Vec<u32>>,
    /// The last run of each `nvidia-smi` query.
    pub queries: &'a [QueryRecord],
    /// How sampling runs.
    pub sampling: Option<&'a SamplingState>,
}

struct Family<'w> {
    out: &'w mut String,
}

impl Family<'_> {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Renders every metric family; a family without values is left out.
pub fn render(view: &MetricsView<'_>) -> String {
    let mut out = String::new();
    let mut f = Family { out: &mut out };
    type Reading = fn(&GpuSample) -> Option<f64>;
    let gauges: [(&str, &str, Reading); 10] = [
        (
            "bcd_gpu_memory_total_bytes",
            "Framebuffer memory size.",
            |s| s.memory_total_mib.map(|m| m as f64 * MIB),
        ),
        (
            "bcd_gpu_memory_used_bytes",
            "Framebuffer memory in use.",
            |s| s.memory_used_mib.map(|m| m as f64 * MIB),
        ),
        (
            "bcd_gpu_utilization_ratio",
            "Share of the last sample period the GPU was busy (0 to 1).",
            |s| s.utilization_gpu_pct.map(|p| f64::from(p) / 100.0),
        ),
        (
            "bcd_gpu_memory_utilization_ratio",
            "Share of the last sample period the memory controller was busy (0 to 1).",
            |s| s.utilization_memory_pct.map(|p| f64::from(p) / 100.0),
        ),
        (
            "bcd_gpu_temperature_celsius",
            "GPU core temperature.",
            |s| s.temperature_c.map(f64::from),
        ),
        ("bcd_gpu_power_draw_watts", "Power draw.", |s| {
            s.power_draw_w
        }),
        ("bcd_gpu_power_limit_watts", "Power limit.", |s| {
            s.power_limit_w
        }),
        ("bcd_gpu_sm_clock_hertz", "SM clock.", |s| {
            s.clocks_sm_mhz.map(|m| f64::from(m) * 1e6)
        }),
        ("bcd_gpu_memory_clock_hertz", "Memory clock.", |s| {
            s.clocks_mem_mhz.map(|m| f64::from(m) * 1e6)
        }),
        (
            "bcd_gpu_compute_processes",
            "Compute processes on the GPU.",
            |s| s.compute_processes.map(f64::from),
        ),
    ];
    for (name, help, read) in gauges {
        let values: Vec<(&str, f64)> = view
            .samples
            .iter()
            .filter_map(|s| Some((s.uuid.as_str(), read(s)?)))
            .collect();
        if values.is_empty() {
            continue;
        }
        f.header(name, "gauge", help);
        for (uuid, v) in values {
            f.sample(name, &[("uuid", uuid)], v);
        }
    }
    if !view.states.is_empty() {
        f.header(
            "bcd_gpu_health_state",
            "gauge",
            "1 for the GPU's health state (healthy, degraded, unhealthy, unknown), 0 for the others.",
        );
        for (uuid, now) in &view.states {
            for state in crate::health::verdict::HealthState::ALL {
                f.sample(
                    "bcd_gpu_health_state",
                    &[("uuid", uuid), ("state", state.name())],
                    if state == *now { 1.0 } else { 0.0 },
                );
            }
        }
    }
    // Always there, so that an alert on its rate works from the first scrape on.
    f.header(
        "bcd_xid_total",
        "counter",
        "XIDs the GPU logged this boot, by number and the catalog's class.",
    );
    for (uuid, xid, class, n) in &view.xid_totals {
        f.sample(
            "bcd_xid_total",
            &[("uuid", uuid), ("xid", &xid.to_string()), ("class", class)],
            *n as f64,
        );
    }
    if !view.healthy.is_empty() {
        f.header("bcd_gpu_healthy", "gauge", "1 when the GPU may take work (healthy or degraded); 0 when unhealthy or unknown (nvidia-smi silent).");
        for (uuid, ok) in &view.healthy {
            f.sample(
                "bcd_gpu_healthy",
                &[("uuid", uuid)],
                if *ok { 1.0 } else { 0.0 },
            );
        }
    }
    if view.xids.values().any(|x| !x.is_empty()) {
        f.header(
            "bcd_gpu_xid_condition",
            "gauge",
            "1 for each XID the GPU raised this boot.",
        );
        for (uuid, xids) in &view.xids {
            for xid in xids {
                f.sample(
                    "bcd_gpu_xid_condition",
                    &[("uuid", uuid), ("xid", &xid.to_string())],
                    1.0,
                );
            }
        }
    }
    if let Some(inv) = view.inventory {
        let gpus = &inv.gpu.gpus;
        let mut ecc = Vec::new();
        let mut ecc_volatile = Vec::new();
        let mut remapped = Vec::new();
        let mut remap_flags = Vec::new();
        for g in gpus {
            if let Some(e) = &g.ecc {
                for (kind, v) in [
                    (
                        "correctable",
                        e.aggregate.as_ref().and_then(|c| c.correctable),
                    ),
                    (
                        "uncorrectable",
                        e.aggregate.as_ref().and_then(|c| c.uncorrectable),
                    ),
                ] {
                    if let Some(v) = v {
                        ecc.push((g.uuid.as_str(), kind, v));
                    }
                }
                for (kind, v) in [
                    (
                        "correctable",
                        e.volatile.as_ref().and_then(|c| c.correctable),
                    ),
                    (
                        "uncorrectable",
                        e.volatile.as_ref().and_then(|c| c.uncorrectable),
                    ),
                ] {
                    if let Some(v) = v {
                        ecc_volatile.push((g.uuid.as_str(), kind, v));
                    }
                }
            }
            if let Some(r) = &g.row_remap {
                for (kind, v) in [
                    ("correctable", r.correctable),
                    ("uncorrectable", r.uncorrectable),
                ] {
                    if let Some(v) = v {
                        remapped.push((g.uuid.as_str(), kind, v));
                    }
                }
                remap_flags.push((
                    g.uuid.as_str(),
                    r.pending.unwrap_or(false),
                    r.failure.unwrap_or(false),
                ));
            }
        }
        let counted =
            |f: &mut Family<'_>, name: &str, kind: &str, help: &str, rows: &[(&str, &str, u64)]| {
                if rows.is_empty() {
                    return;
                }
                f.header(name, kind, help);
                for (uuid, t, v) in rows {
                    f.sample(name, &[("uuid", uuid), ("type", t)], *v as f64);
                }
            };
        counted(
            &mut f,
            "bcd_gpu_ecc_errors_total",
            "counter",
            "ECC errors over the GPU's life (aggregate).",
            &ecc,
        );
        counted(
            &mut f,
            "bcd_gpu_ecc_volatile_errors",
            "gauge",
            "ECC errors since the driver loaded.",
            &ecc_volatile,
        );
        counted(
            &mut f,
            "bcd_gpu_remapped_rows_total",
            "counter",
            "Rows remapped, by the kind of error that caused it.",
            &remapped,
        );
        if !remap_flags.is_empty() {
            f.header(
                "bcd_gpu_row_remap_pending",
                "gauge",
                "1 when a row remap waits for a GPU reset.",
            );
            for (uuid, pending, _) in &remap_flags {
                f.sample(
                    "bcd_gpu_row_remap_pending",
                    &[("uuid", uuid)],
                    if *pending { 1.0 } else { 0.0 },
                );
            }
            f.header(
                "bcd_gpu_row_remap_failure",
                "gauge",
                "1 when row remapping failed: the GPU needs replacing.",
            );
            for (uuid, _, failed) in &remap_flags {
                f.sample(
                    "bcd_gpu_row_remap_failure",
                    &[("uuid", uuid)],
                    if *failed { 1.0 } else { 0.0 },
                );
            }
        }
        f.header("bcd_gpus", "gauge", "GPUs in the inventory.");
        f.sample("bcd_gpus", &[], gpus.len() as f64);
    }
    if let Some(age) = view.inventory_age {
        f.header(
            "bcd_inventory_age_seconds",
            "gauge",
            "Seconds since the inventory was last collected.",
        );
        f.sample("bcd_inventory_age_seconds", &[], age.as_secs_f64());
    }
    let mig: Vec<(&str, &crate::smi::xml::XmlMigDevice)> = view
        .samples
        .iter()
        .flat_map(|s| s.mig_devices.iter().map(move |m| (s.uuid.as_str(), m)))
        .collect();
    for (name, help, read) in [
        (
            "bcd_mig_memory_used_bytes",
            "A MIG device's framebuffer memory in use (read with nvidia-smi -q -x every minute).",
            (|m: &crate::smi::xml::XmlMigDevice| m.memory_used_mib) as fn(&_) -> Option<u64>,
        ),
        (
            "bcd_mig_memory_total_bytes",
            "A MIG device's framebuffer memory size.",
            |m: &crate::smi::xml::XmlMigDevice| m.memory_total_mib,
        ),
    ] {
        let values: Vec<_> = mig
            .iter()
            .filter_map(|(uuid, m)| Some((uuid, m, read(m)?)))
            .collect();
        if values.is_empty() {
            continue;
        }
        f.header(name, "gauge", help);
        for (uuid, m, v) in values {
            let gi = m.gpu_instance_id.map(|n| n.to_string()).unwrap_or_default();
            let ci = m
                .compute_instance_id
                .map(|n| n.to_string())
                .unwrap_or_default();
            f.sample(
                name,
                &[
                    ("uuid", uuid),
                    ("gpu_instance", &gi),
                    ("compute_instance", &ci),
                ],
                v as f64 * MIB,
            );
        }
    }
    if let Some(sampling) = view.sampling {
        f.header("bcd_sampler_loop_mode", "gauge", "1 while one long-lived nvidia-smi -lms child feeds the samples, 0 on one-shot queries.");
        f.sample(
            "bcd_sampler_loop_mode",
            &[],
            if sampling.loop_mode { 1.0 } else { 0.0 },
        );
        f.header(
            "bcd_sampler_restarts_total",
            "counter",
            "Loop-mode sampling sessions started again after a child died or stalled.",
        );
        f.sample("bcd_sampler_restarts_total", &[], sampling.restarts as f64);
        f.header(
            "bcd_sampler_mig_memory_reads_total",
            "counter",
            "nvidia-smi -q -x runs that read the MIG devices' memory (one a minute while a GPU is in MIG mode).",
        );
        f.sample(
            "bcd_sampler_mig_memory_reads_total",
            &[],
            sampling.mig_memory_reads as f64,
        );
    }
    if !view.queries.is_empty() {
        f.header(
            "bcd_nvidia_smi_duration_seconds",
            "gauge",
            "How long the last run of each nvidia-smi query took.",
        );
        for q in view.queries {
            f.sample(
                "bcd_nvidia_smi_duration_seconds",
                &[("query", &q.query)],
                q.elapsed.as_secs_f64(),
            );
        }
        f.header(
            "bcd_nvidia_smi_success",
            "gauge",
            "1 when the last run of each nvidia-smi query answered and parsed.",
        );
        for q in view.queries {
            f.sample(
                "bcd_nvidia_smi_success",
                &[("query", &q.query)],
                if q.error.is_none() { 1.0 } else { 0.0 },
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(uuid: &str) -> GpuSample {
        GpuSample {
            uuid: uuid.into(),
            memory_total_mib: Some(81559),
            memory_used_mib: Some(1024),
            memory_reserved_mib: None,
            memory_free_mib: None,
            utilization_gpu_pct: Some(97),
            utilization_memory_pct: None,
            temperature_c: Some(58),
            power_draw_w: Some(412.5),
            power_limit_w: Some(700.0),
            clocks_sm_mhz: Some(1980),
            clocks_mem_mhz: None,
            pstate: None,
            mig_mode: None,
            compute_processes: Some(2),
            mig_devices: Vec::new(),
        }
    }

    #[test]
    fn samples_render_with_units_and_labels() {
        let samples = [sample("GPU-a")];
        let mut view = MetricsView {
            samples: &samples,
            ..MetricsView::default()
        };
        view.healthy.insert("GPU-a".into(), false);
        view.xids.insert("GPU-a".into(), vec![79]);
        let text = render(&view);
        assert!(text.contains("# TYPE bcd_gpu_memory_total_bytes gauge\nbcd_gpu_memory_total_bytes{uuid=\"GPU-a\"} 85520809984\n"), "{text}");
        assert!(text.contains("bcd_gpu_utilization_ratio{uuid=\"GPU-a\"} 0.97\n"));
        assert!(text.contains("bcd_gpu_power_draw_watts{uuid=\"GPU-a\"} 412.5\n"));
        assert!(text.contains("bcd_gpu_sm_clock_hertz{uuid=\"GPU-a\"} 1980000000\n"));
        assert!(text.contains("bcd_gpu_healthy{uuid=\"GPU-a\"} 0\n"));
        assert!(text.contains("bcd_gpu_xid_condition{uuid=\"GPU-a\",xid=\"79\"} 1\n"));
        assert!(
            !text.contains("bcd_gpu_memory_clock_hertz"),
            "a family without values is left out"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
