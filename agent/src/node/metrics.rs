//! The node's metrics in the Prometheus text format (version 0.0.4): per-GPU samples and
//! health from the latest sample and inventory, and the inventory's age and the last
//! `nvidia-smi` calls. Units are in the names; counters end in `_total`; every GPU series
//! carries a `uuid` label, and the attribution labels of whoever has the GPU
//! ([`crate::node::attribution`]); `bcd_device_owner` has one series per device (GPU, MIG
//! device, slot) somebody has.
//!
//! With [`MetricsCompat`] (`bcd node --metrics-compat dcgm`) the same readings are also
//! rendered under NVIDIA dcgm-exporter's names, units and labels ([`DCGM_FIELDS`]), so its
//! dashboards and alert rules work unchanged; MIG devices get dcgm-exporter's `GPU_I_ID` and
//! `GPU_I_PROFILE`. Fields that need DCGM's profiling (`DCGM_FI_PROF_*`) are not provided.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use bcd_protocol::GpuUuid;

use crate::inventory::document::{Gpu, Inventory};
use crate::node::attribution::{Attribution, Labels};
use crate::smi::samples::GpuSample;
use crate::smi::snapshot::QueryRecord;

/// Bytes in a MiB.
const MIB: f64 = 1024.0 * 1024.0;

/// How the sampler runs now, for `status` and the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
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

/// Which other exporter's names the metrics also carry (`bcd node --metrics-compat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MetricsCompat {
    /// dcgm-exporter's names and labels, the host's name as `hostname` (dcgm-exporter since
    /// it renamed the label in 2026).
    Dcgm,
    /// The same, the host's name as `Hostname` (dcgm-exporter before the rename, which
    /// dashboard 12239 and most alert rules written until then expect).
    DcgmLegacy,
}

impl MetricsCompat {
    /// The host name's label.
    pub fn hostname_label(self) -> &'static str {
        match self {
            MetricsCompat::Dcgm => "hostname",
            MetricsCompat::DcgmLegacy => "Hostname",
        }
    }
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
    pub healthy: BTreeMap<GpuUuid, bool>,
    /// Per GPU UUID: the health state.
    pub states: BTreeMap<GpuUuid, crate::health::verdict::HealthState>,
    /// `(uuid, xid, class, times seen this boot)`.
    pub xid_totals: Vec<(GpuUuid, u32, &'static str, u64)>,
    /// Per GPU UUID: the XID numbers raised this boot.
    pub xids: BTreeMap<GpuUuid, Vec<u32>>,
    /// Per GPU UUID: the XID seen last this boot (dcgm-exporter's `DCGM_FI_DEV_XID_ERRORS`).
    pub last_xid: BTreeMap<GpuUuid, u32>,
    /// The last run of each `nvidia-smi` query.
    pub queries: &'a [QueryRecord],
    /// How sampling runs.
    pub sampling: Option<&'a SamplingState>,
    /// Who has each device.
    pub attribution: Attribution,
    /// Which other exporter's names to render too.
    pub compat: Option<MetricsCompat>,
    /// The host's name (dcgm-exporter's `hostname` label).
    pub host_name: Option<&'a str>,
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

    /// A sample of a device's series: its own labels, then who has the device.
    fn owned(&mut self, name: &str, labels: &[(&str, &str)], who: &Labels, value: f64) {
        let mut all = labels.to_vec();
        all.extend(who.pairs().iter().map(|(k, v)| (*k, v.as_str())));
        self.sample(name, &all, value);
    }
}

/// A label value in the text format: backslash, double quote and line feed escaped, the
/// only three characters the format gives a meaning inside a quoted value.
pub fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Reads one value of a GPU from its sample.
type Reading = fn(&GpuSample) -> Option<f64>;

/// One dcgm-exporter series bcd can fill from `nvidia-smi`: its name, Prometheus type, help
/// (dcgm-exporter's), and the reading in dcgm-exporter's unit.
#[derive(Debug)]
pub struct DcgmField {
    /// `DCGM_FI_DEV_...`.
    pub name: &'static str,
    /// `gauge` or `counter`, as dcgm-exporter types it.
    pub kind: &'static str,
    /// dcgm-exporter's help text, unit included.
    pub help: &'static str,
    read: Reading,
}

/// The dcgm-exporter series filled from each sample, in dcgm-exporter's units (MiB, %, C,
/// W, MHz). `DCGM_FI_DEV_XID_ERRORS`, the remapped rows and the ECC counts come from the
/// kernel log and the inventory instead (see [`render`]).
pub const DCGM_FIELDS: &[DcgmField] = &[
    DcgmField {
        name: "DCGM_FI_DEV_SM_CLOCK",
        kind: "gauge",
        help: "SM clock frequency (in MHz).",
        read: |s| s.clocks_sm_mhz.map(f64::from),
    },
    DcgmField {
        name: "DCGM_FI_DEV_MEM_CLOCK",
        kind: "gauge",
        help: "Memory clock frequency (in MHz).",
        read: |s| s.clocks_mem_mhz.map(f64::from),
    },
    DcgmField {
        name: "DCGM_FI_DEV_GPU_TEMP",
        kind: "gauge",
        help: "GPU temperature (in C).",
        read: |s| s.temperature_c.map(f64::from),
    },
    DcgmField {
        name: "DCGM_FI_DEV_POWER_USAGE",
        kind: "gauge",
        help: "Power draw (in W).",
        read: |s| s.power_draw_w,
    },
    DcgmField {
        name: "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        kind: "gauge",
        help: "Power management limit (in W).",
        read: |s| s.power_limit_w,
    },
    DcgmField {
        name: "DCGM_FI_DEV_GPU_UTIL",
        kind: "gauge",
        help: "GPU utilization (in %).",
        read: |s| s.utilization_gpu_pct.map(f64::from),
    },
    DcgmField {
        name: "DCGM_FI_DEV_MEM_COPY_UTIL",
        kind: "gauge",
        help: "Memory utilization (in %).",
        read: |s| s.utilization_memory_pct.map(f64::from),
    },
    DcgmField {
        name: "DCGM_FI_DEV_FB_FREE",
        kind: "gauge",
        help: "Framebuffer memory free (in MiB).",
        read: |s| s.memory_free_mib.map(|m| m as f64),
    },
    DcgmField {
        name: "DCGM_FI_DEV_FB_USED",
        kind: "gauge",
        help: "Framebuffer memory used (in MiB).",
        read: |s| s.memory_used_mib.map(|m| m as f64),
    },
    DcgmField {
        name: "DCGM_FI_DEV_FB_RESERVED",
        kind: "gauge",
        help: "Framebuffer memory reserved (in MiB).",
        read: |s| s.memory_reserved_mib.map(|m| m as f64),
    },
    DcgmField {
        name: "DCGM_FI_DEV_FB_TOTAL",
        kind: "gauge",
        help: "Framebuffer memory total (in MiB).",
        read: |s| s.memory_total_mib.map(|m| m as f64),
    },
];

/// dcgm-exporter's default counters bcd does not provide, and why; listed in the README.
pub const DCGM_NOT_PROVIDED: &[(&str, &str)] = &[
    ("DCGM_FI_DEV_MEMORY_TEMP", "bcd does not read temperature.memory"),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "bcd does not read total_energy_consumption",
    ),
    (
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT, DCGM_FI_DEV_PCIE_RX_THROUGHPUT, DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "bcd does not read the PCIe counters",
    ),
    (
        "DCGM_FI_DEV_ENC_UTIL, DCGM_FI_DEV_DEC_UTIL",
        "bcd does not read the encoder and decoder",
    ),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "bcd reads NVLink states, not traffic",
    ),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "no vGPU support"),
    (
        "DCGM_FI_PROF_* (GR_ENGINE_ACTIVE, PIPE_TENSOR_ACTIVE, DRAM_ACTIVE, PCIE_TX_BYTES, PCIE_RX_BYTES, ...)",
        "they need DCGM's profiling module; nvidia-smi has no such reading",
    ),
];

/// A GPU's identity in dcgm-exporter's labels, from the inventory.
struct DcgmIdentity {
    gpu: String,
    uuid: String,
    pci_bus_id: Option<String>,
    device: String,
    model: Option<String>,
}

impl DcgmIdentity {
    fn of(g: &Gpu) -> Self {
        Self {
            gpu: g.index.to_string(),
            uuid: g.uuid.to_string(),
            pci_bus_id: g.bus_id.map(|a| a.nvml_bus_id()),
            // dcgm-exporter names the device node after the GPU's index.
            device: format!("nvidia{}", g.index),
            model: g.name.clone(),
        }
    }

    /// `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, then `extra` (a MIG device's
    /// `GPU_I_PROFILE` and `GPU_I_ID`), then the host and the driver's version.
    fn labels<'l>(
        &'l self,
        extra: &[(&'l str, &'l str)],
        host: &'l [(&'l str, &'l str)],
    ) -> Vec<(&'l str, &'l str)> {
        let mut l = vec![("gpu", self.gpu.as_str()), ("UUID", self.uuid.as_str())];
        if let Some(b) = &self.pci_bus_id {
            l.push(("pci_bus_id", b));
        }
        l.push(("device", &self.device));
        if let Some(m) = &self.model {
            l.push(("modelName", m));
        }
        l.extend_from_slice(extra);
        l.extend_from_slice(host);
        l
    }
}

/// Renders every metric family; a family without values is left out.
pub fn render(view: &MetricsView<'_>) -> String {
    let mut out = String::new();
    let mut f = Family { out: &mut out };
    let who = |uuid: &str| view.attribution.gpu(uuid);
    let gauges = super::readings::READINGS
        .iter()
        .filter_map(|r| r.prometheus.map(|(name, help)| (name, help, r.read)));
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
            f.owned(name, &[("uuid", uuid)], &who(uuid), v);
        }
    }
    // With dcgm-exporter's names on, the health series also carries its identity labels, so
    // an alert joins it to DCGM_FI_* series on `gpu` or `UUID`.
    let identities: BTreeMap<&str, DcgmIdentity> = view
        .inventory
        .iter()
        .flat_map(|inv| &inv.gpu.gpus)
        .map(|g| (g.uuid.as_str(), DcgmIdentity::of(g)))
        .collect();
    let host: Vec<(&str, &str)> = view
        .compat
        .map(|c| {
            let mut h = Vec::new();
            if let Some(name) = view.host_name {
                h.push((c.hostname_label(), name));
            }
            if let Some(v) = view.inventory.and_then(|i| i.gpu.driver_version.as_deref()) {
                h.push(("DCGM_FI_DRIVER_VERSION", v));
            }
            h
        })
        .unwrap_or_default();
    if !view.states.is_empty() {
        f.header(
            "bcd_gpu_health_state",
            "gauge",
            "1 for the GPU's health state (healthy, degraded, unhealthy, unknown), 0 for the others.",
        );
        for (uuid, now) in &view.states {
            let uuid = uuid.as_str();
            let mut labels = vec![("uuid", uuid)];
            if view.compat.is_some() {
                if let Some(id) = identities.get(uuid) {
                    labels = id.labels(&[], &host);
                    labels.insert(0, ("uuid", uuid));
                }
            }
            let owner = who(uuid);
            for state in crate::health::verdict::HealthState::ALL {
                let mut l = labels.clone();
                l.push(("state", state.name()));
                f.owned(
                    "bcd_gpu_health_state",
                    &l,
                    &owner,
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
        let uuid = uuid.as_str();
        f.owned(
            "bcd_xid_total",
            &[("uuid", uuid), ("xid", &xid.to_string()), ("class", class)],
            &who(uuid),
            *n as f64,
        );
    }
    if !view.healthy.is_empty() {
        f.header("bcd_gpu_healthy", "gauge", "1 when the GPU may take work (healthy or degraded); 0 when unhealthy or unknown (nvidia-smi silent).");
        for (uuid, ok) in &view.healthy {
            let uuid = uuid.as_str();
            f.owned(
                "bcd_gpu_healthy",
                &[("uuid", uuid)],
                &who(uuid),
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
            let uuid = uuid.as_str();
            for xid in xids {
                f.owned(
                    "bcd_gpu_xid_condition",
                    &[("uuid", uuid), ("xid", &xid.to_string())],
                    &who(uuid),
                    1.0,
                );
            }
        }
    }
    let claimed: Vec<_> = view.attribution.claimed().collect();
    if !claimed.is_empty() {
        f.header(
            "bcd_device_owner",
            "gauge",
            "1 for each device (GPU, MIG device, slot) somebody has, labelled with who.",
        );
        for (device, gpu, labels) in &claimed {
            let mut l = Vec::new();
            if let Some(gpu) = gpu {
                l.push(("uuid", gpu.as_str()));
            }
            l.push(("device_id", device.as_str()));
            f.owned("bcd_device_owner", &l, labels, 1.0);
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
                    f.owned(name, &[("uuid", uuid), ("type", t)], &who(uuid), *v as f64);
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
                f.owned(
                    "bcd_gpu_row_remap_pending",
                    &[("uuid", uuid)],
                    &who(uuid),
                    if *pending { 1.0 } else { 0.0 },
                );
            }
            f.header(
                "bcd_gpu_row_remap_failure",
                "gauge",
                "1 when row remapping failed: the GPU needs replacing.",
            );
            for (uuid, _, failed) in &remap_flags {
                f.owned(
                    "bcd_gpu_row_remap_failure",
                    &[("uuid", uuid)],
                    &who(uuid),
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
    if view.compat.is_some() {
        render_dcgm(&mut f, view, &identities, &host);
    }
    out
}

/// dcgm-exporter's series: those of [`DCGM_FIELDS`] per GPU with a sample, then the last
/// XID per GPU and per MIG device (as dcgm-exporter repeats it for each GPU instance), the
/// remapped rows and the ECC counts. A GPU the inventory does not list yet (no index, no
/// model) has none.
fn render_dcgm(
    f: &mut Family<'_>,
    view: &MetricsView<'_>,
    identities: &BTreeMap<&str, DcgmIdentity>,
    host: &[(&str, &str)],
) {
    let who = |uuid: &str| view.attribution.gpu(uuid);
    for field in DCGM_FIELDS {
        let values: Vec<(&DcgmIdentity, f64)> = view
            .samples
            .iter()
            .filter_map(|s| Some((identities.get(s.uuid.as_str())?, (field.read)(s)?)))
            .collect();
        if values.is_empty() {
            continue;
        }
        f.header(field.name, field.kind, field.help);
        for (id, v) in values {
            f.owned(field.name, &id.labels(&[], host), &who(&id.uuid), v);
        }
    }
    let Some(inv) = view.inventory else { return };
    if !inv.gpu.gpus.is_empty() {
        let name = "DCGM_FI_DEV_XID_ERRORS";
        f.header(name, "gauge", "Value of the last XID error encountered.");
        for g in &inv.gpu.gpus {
            let Some(id) = identities.get(g.uuid.as_str()) else {
                continue;
            };
            let last = view.last_xid.get(&g.uuid).copied().unwrap_or(0);
            f.owned(
                name,
                &id.labels(&[], host),
                &who(g.uuid.as_str()),
                f64::from(last),
            );
            for m in g.mig.iter().flat_map(|m| &m.devices) {
                let (Some(profile), Some(gi)) = (&m.profile, m.gi) else {
                    continue;
                };
                let gi = gi.to_string();
                let owner = m
                    .uuid
                    .as_deref()
                    .and_then(|u| u.parse().ok())
                    .map(|d| view.attribution.device(&d))
                    .unwrap_or_default();
                f.owned(
                    name,
                    &id.labels(&[("GPU_I_PROFILE", profile), ("GPU_I_ID", &gi)], host),
                    &owner,
                    f64::from(last),
                );
            }
        }
    }
    type Count = fn(&Gpu) -> Option<f64>;
    let counts: [(&str, &str, &str, Count); 7] = [
        (
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "counter",
            "Number of remapped rows for uncorrectable errors",
            |g| g.row_remap.as_ref()?.uncorrectable.map(|v| v as f64),
        ),
        (
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
            "counter",
            "Number of remapped rows for correctable errors",
            |g| g.row_remap.as_ref()?.correctable.map(|v| v as f64),
        ),
        (
            "DCGM_FI_DEV_ROW_REMAP_FAILURE",
            "gauge",
            "Whether remapping of rows has failed",
            |g| {
                g.row_remap
                    .as_ref()?
                    .failure
                    .map(|b| f64::from(u8::from(b)))
            },
        ),
        (
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            "counter",
            "Total number of single-bit volatile ECC errors.",
            |g| {
                g.ecc
                    .as_ref()?
                    .volatile
                    .as_ref()?
                    .correctable
                    .map(|v| v as f64)
            },
        ),
        (
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "counter",
            "Total number of double-bit volatile ECC errors.",
            |g| {
                g.ecc
                    .as_ref()?
                    .volatile
                    .as_ref()?
                    .uncorrectable
                    .map(|v| v as f64)
            },
        ),
        (
            "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
            "counter",
            "Total number of single-bit persistent ECC errors.",
            |g| {
                g.ecc
                    .as_ref()?
                    .aggregate
                    .as_ref()?
                    .correctable
                    .map(|v| v as f64)
            },
        ),
        (
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
            "counter",
            "Total number of double-bit persistent ECC errors.",
            |g| {
                g.ecc
                    .as_ref()?
                    .aggregate
                    .as_ref()?
                    .uncorrectable
                    .map(|v| v as f64)
            },
        ),
    ];
    for (name, kind, help, read) in counts {
        let values: Vec<(&DcgmIdentity, f64)> = inv
            .gpu
            .gpus
            .iter()
            .filter_map(|g| Some((identities.get(g.uuid.as_str())?, read(g)?)))
            .collect();
        if values.is_empty() {
            continue;
        }
        f.header(name, kind, help);
        for (id, v) in values {
            f.owned(name, &id.labels(&[], host), &who(&id.uuid), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(uuid: &str) -> GpuSample {
        GpuSample {
            uuid: uuid.parse().unwrap(),
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
            clock_events: Default::default(),
            compute_processes: Some(2),
            mig_devices: Vec::new(),
        }
    }

    #[test]
    fn samples_render_with_units_and_labels() {
        let samples = [sample("GPU-00000061-0000-0000-0000-000000000000")];
        let mut view = MetricsView {
            samples: &samples,
            ..MetricsView::default()
        };
        view.healthy.insert(
            "GPU-00000061-0000-0000-0000-000000000000".parse().unwrap(),
            false,
        );
        view.xids.insert(
            "GPU-00000061-0000-0000-0000-000000000000".parse().unwrap(),
            vec![79],
        );
        let text = render(&view);
        assert!(text.contains("# TYPE bcd_gpu_memory_total_bytes gauge\nbcd_gpu_memory_total_bytes{uuid=\"GPU-00000061-0000-0000-0000-000000000000\"} 85520809984\n"), "{text}");
        assert!(text.contains(
            "bcd_gpu_utilization_ratio{uuid=\"GPU-00000061-0000-0000-0000-000000000000\"} 0.97\n"
        ));
        assert!(text.contains(
            "bcd_gpu_power_draw_watts{uuid=\"GPU-00000061-0000-0000-0000-000000000000\"} 412.5\n"
        ));
        assert!(text.contains("bcd_gpu_sm_clock_hertz{uuid=\"GPU-00000061-0000-0000-0000-000000000000\"} 1980000000\n"));
        assert!(
            text.contains("bcd_gpu_healthy{uuid=\"GPU-00000061-0000-0000-0000-000000000000\"} 0\n")
        );
        assert!(text.contains("bcd_gpu_xid_condition{uuid=\"GPU-00000061-0000-0000-0000-000000000000\",xid=\"79\"} 1\n"));
        assert!(
            !text.contains("bcd_gpu_memory_clock_hertz"),
            "a family without values is left out"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    // A VM or pod name is not bcd's to restrict: a hostile one must stay inside its quoted
    // label value (no early close, no new line, no injected label or sample).
    #[test]
    fn a_hostile_vm_or_pod_name_stays_inside_its_label_value() {
        use crate::device::{PodAllocation, PodRef};
        let hostile = "x\"} 1\nbcd_gpus 99\n# \\";
        assert_eq!(escape(hostile), "x\\\"} 1\\nbcd_gpus 99\\n# \\\\");
        assert_eq!(escape("plain-é"), "plain-é", "only the three are escaped");
        let samples = [sample("GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b")];
        let mut view = MetricsView {
            samples: &samples,
            ..MetricsView::default()
        };
        view.attribution.add_pod(
            &PodAllocation {
                devices: vec![crate::cdi::DeviceId::from(&samples[0].uuid)],
                pod: PodRef {
                    namespace: "ns".into(),
                    pod: hostile.into(),
                    container: "c\\".into(),
                },
            },
            &crate::device::policy::Topology::default(),
        );
        let text = render(&view);
        let line = text
            .lines()
            .find(|l| l.starts_with("bcd_gpu_temperature_celsius{"))
            .unwrap();
        assert_eq!(
            line,
            format!(
                "bcd_gpu_temperature_celsius{{uuid=\"{}\",namespace=\"ns\",pod=\"{}\",container=\"c\\\\\"}} 58",
                samples[0].uuid,
                escape(hostile)
            )
        );
        assert!(!text.contains("\nbcd_gpus 99"), "{text}");
    }

    fn inventory() -> Inventory {
        use crate::inventory::document::{GpuSection, Mig, MigDevice};
        Inventory::new(GpuSection {
            driver_version: Some("550.54.15".into()),
            gpus: vec![Gpu {
                index: 3,
                name: Some("NVIDIA H100 80GB HBM3".into()),
                bus_id: Some("00000000:9A:00.0".parse().unwrap()),
                mig: Some(Mig {
                    mode: Some(true),
                    devices: vec![MigDevice {
                        uuid: Some("MIG-65db3e42-f991-a575-c20e-8350d31e437c".into()),
                        profile: Some("4g.40gb".into()),
                        gi: Some(1),
                        ci: Some(0),
                        memory_total_mib: Some(40192),
                    }],
                    ..Mig::default()
                }),
                ..Gpu::new(
                    0,
                    "GPU-b9036d74-bff6-b565-c003-dc53279ae2bd".parse().unwrap(),
                )
            }],
            ..GpuSection::default()
        })
    }

    #[test]
    fn dcgm_names_carry_dcgm_exporters_units_and_labels_and_mig_devices_their_instance() {
        let inv = inventory();
        let samples = [sample("GPU-b9036d74-bff6-b565-c003-dc53279ae2bd")];
        let mut view = MetricsView {
            samples: &samples,
            inventory: Some(&inv),
            compat: Some(MetricsCompat::Dcgm),
            host_name: Some("node-7"),
            ..MetricsView::default()
        };
        view.last_xid.insert(samples[0].uuid.clone(), 79);
        view.states.insert(
            samples[0].uuid.clone(),
            crate::health::verdict::HealthState::Healthy,
        );
        let id = "gpu=\"3\",UUID=\"GPU-b9036d74-bff6-b565-c003-dc53279ae2bd\",pci_bus_id=\"00000000:9A:00.0\",device=\"nvidia3\",modelName=\"NVIDIA H100 80GB HBM3\"";
        let host = "hostname=\"node-7\",DCGM_FI_DRIVER_VERSION=\"550.54.15\"";
        let text = render(&view);
        for (name, value) in [
            ("DCGM_FI_DEV_GPU_TEMP", "58"),
            ("DCGM_FI_DEV_POWER_USAGE", "412.5"),
            ("DCGM_FI_DEV_SM_CLOCK", "1980"),
            ("DCGM_FI_DEV_GPU_UTIL", "97"),
            ("DCGM_FI_DEV_FB_USED", "1024"),
            ("DCGM_FI_DEV_FB_TOTAL", "81559"),
            ("DCGM_FI_DEV_XID_ERRORS", "79"),
        ] {
            let want = format!("{name}{{{id},{host}}} {value}\n");
            assert!(text.contains(&want), "{want} not in\n{text}");
        }
        assert!(text.contains("# TYPE DCGM_FI_DEV_FB_USED gauge\n"));
        assert!(text.contains(&format!(
            "DCGM_FI_DEV_XID_ERRORS{{{id},GPU_I_PROFILE=\"4g.40gb\",GPU_I_ID=\"1\",{host}}} 79\n"
        )));
        assert!(text.contains(&format!(
            "bcd_gpu_health_state{{uuid=\"GPU-b9036d74-bff6-b565-c003-dc53279ae2bd\",{id},{host},state=\"healthy\"}} 1\n"
        )));
        assert!(
            !text.contains("DCGM_FI_PROF_"),
            "profiling fields are not provided"
        );
        // Absent without the option; the legacy scheme spells the host label as before.
        view.compat = None;
        assert!(!render(&view).contains("DCGM_FI_"));
        view.compat = Some(MetricsCompat::DcgmLegacy);
        assert!(render(&view).contains("Hostname=\"node-7\""));
    }

    #[test]
    fn a_held_mig_device_labels_its_instance_and_its_gpu_and_no_one_else() {
        use crate::device::Hold;
        let inv = inventory();
        let samples = [
            sample("GPU-b9036d74-bff6-b565-c003-dc53279ae2bd"),
            sample("GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b"),
        ];
        let mut view = MetricsView {
            samples: &samples,
            inventory: Some(&inv),
            compat: Some(MetricsCompat::Dcgm),
            ..MetricsView::default()
        };
        let topology = crate::device::policy::Topology::from_inventory(&inv, 0);
        view.attribution.add_holds(
            &[Hold {
                id: "infer-2".parse().unwrap(),
                devices: vec!["MIG-65db3e42-f991-a575-c20e-8350d31e437c".parse().unwrap()],
                kubernetes: false,
                owner: None,
                gpus: BTreeMap::new(),
                unassigned_since: None,
            }],
            &topology,
        );
        let text = render(&view);
        assert!(
            text.contains(
                "GPU_I_ID=\"1\",DCGM_FI_DRIVER_VERSION=\"550.54.15\",hold=\"infer-2\"} 0\n"
            ),
            "{text}"
        );
        assert!(text.contains(
            "bcd_gpu_temperature_celsius{uuid=\"GPU-b9036d74-bff6-b565-c003-dc53279ae2bd\",hold=\"infer-2\"} 58\n"
        ));
        assert!(text.contains(
            "bcd_gpu_temperature_celsius{uuid=\"GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b\"} 58\n"
        ));
        assert!(text.contains(
            "bcd_device_owner{uuid=\"GPU-b9036d74-bff6-b565-c003-dc53279ae2bd\",device_id=\"MIG-65db3e42-f991-a575-c20e-8350d31e437c\",hold=\"infer-2\"} 1\n"
        ));
    }
}
