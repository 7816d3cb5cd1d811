//! The node's metrics in the Prometheus text format (version 0.0.4, written with
//! [`crate::prometheus`]): per-GPU samples and health from the latest sample and inventory, and
//! the inventory's age and the last `nvidia-smi` calls. Units are in the names; counters end in
//! `_total`; every GPU series carries a `uuid` label, and the attribution labels of whoever has
//! the GPU ([`crate::node::attribution`]); `bcd_device_owner` has one series per device (GPU,
//! MIG device, slot) somebody has.
//!
//! With [`MetricsCompat`] (`bcd node --metrics-compat dcgm`) the same readings are also
//! rendered under NVIDIA dcgm-exporter's names, units and labels ([`dcgm::DCGM_FIELDS`], in
//! [`dcgm`]), so its dashboards and alert rules work unchanged; MIG devices get dcgm-exporter's
//! `GPU_I_ID` and `GPU_I_PROFILE`. Fields that need DCGM's profiling (`DCGM_FI_PROF_*`) are not
//! provided.

pub(crate) mod dcgm;

use std::collections::BTreeMap;
use std::time::Duration;

use bcd_protocol::GpuUuid;

use crate::device::DeviceId;
use crate::health::verdict::HealthState;
use crate::inventory::document::{Gpu, Inventory, RowRemap};
use crate::node::attribution::{Attribution, Labels};
use crate::prometheus::{Exposition, Family, Kind};
use crate::smi::samples::GpuSample;
use crate::smi::snapshot::QueryRecord;
use crate::smi::xml::XmlMigDevice;

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
    /// Seconds between samples (`--sample-interval`); 0 before the first sample, and in an
    /// older node's answer.
    pub interval_s: u64,
}

/// Which other exporter's names the metrics also carry (`bcd node --metrics-compat`, whose
/// spellings `dcgm` and `dcgm-legacy` the command line maps to these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    pub states: BTreeMap<GpuUuid, HealthState>,
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

/// Renders every metric family; a family without values is left out, except
/// `bcd_xid_total`, which is always there.
pub fn render(view: &MetricsView<'_>) -> String {
    let mut text = Exposition::default();
    let dcgm = view
        .compat
        .map(|compat| dcgm::DcgmLabels::new(compat, view));
    gpu_readings(&mut text, view);
    health_states(&mut text, view, dcgm.as_ref());
    xid_totals(&mut text, view);
    healthy(&mut text, view);
    xid_conditions(&mut text, view);
    device_owners(&mut text, view);
    if let Some(inventory) = view.inventory {
        let gpus = &inventory.gpu.gpus;
        error_counters(&mut text, view, gpus);
        row_remap_flags(&mut text, view, gpus);
        text.family("bcd_gpus", Kind::Gauge, "GPUs in the inventory.")
            .sample([], gpus.len() as f64);
    }
    if let Some(age) = view.inventory_age {
        text.family(
            "bcd_inventory_age_seconds",
            Kind::Gauge,
            "Seconds since the inventory was last collected.",
        )
        .sample([], age.as_secs_f64());
    }
    mig_memory(&mut text, view);
    if let Some(sampling) = view.sampling {
        sampler(&mut text, sampling);
    }
    nvidia_smi_queries(&mut text, view.queries);
    if let Some(dcgm) = &dcgm {
        dcgm::render(&mut text, view, dcgm);
    }
    text.into_text()
}

/// A sample of a device's series: its own labels, then who has the device.
fn owned<'l>(
    family: &mut Family<'_>,
    labels: impl IntoIterator<Item = (&'l str, &'l str)>,
    who: &'l Labels,
    value: f64,
) {
    let who = who.pairs().iter().map(|(k, v)| (*k, v.as_str()));
    family.sample(labels.into_iter().chain(who), value);
}

/// 1 for `true`, 0 for `false`.
fn flag(on: bool) -> f64 {
    f64::from(u8::from(on))
}

/// The table of per-GPU readings ([`super::readings::READINGS`]): one gauge per reading, a
/// sample per GPU that has it.
fn gpu_readings(text: &mut Exposition, view: &MetricsView<'_>) {
    for reading in super::readings::READINGS {
        let Some((name, help)) = reading.prometheus else {
            continue;
        };
        let mut family = text.family(name, Kind::Gauge, help);
        for sample in view.samples {
            if let Some(v) = (reading.read)(sample) {
                let uuid = sample.uuid.as_str();
                owned(
                    &mut family,
                    [("uuid", uuid)],
                    &view.attribution.gpu(&sample.uuid),
                    v,
                );
            }
        }
    }
}

/// `bcd_gpu_health_state`: four series per GPU, 1 for its state. With dcgm-exporter's names
/// on they also carry its identity labels, so an alert joins them to `DCGM_FI_*` series on
/// `gpu` or `UUID`.
fn health_states(
    text: &mut Exposition,
    view: &MetricsView<'_>,
    dcgm: Option<&dcgm::DcgmLabels<'_>>,
) {
    let mut family = text.family(
        "bcd_gpu_health_state",
        Kind::Gauge,
        "1 for the GPU's health state (healthy, degraded, unhealthy, unknown), 0 for the others.",
    );
    for (gpu, now) in &view.states {
        let uuid = gpu.as_str();
        let mut labels = vec![("uuid", uuid)];
        if let Some(identity) = dcgm.and_then(|d| d.gpu(uuid, &[])) {
            labels.extend(identity);
        }
        let owner = view.attribution.gpu(gpu);
        for state in HealthState::ALL {
            let labels = labels.iter().copied().chain([("state", state.name())]);
            owned(&mut family, labels, &owner, flag(state == *now));
        }
    }
}

/// `bcd_xid_total`, there from the first scrape on so that an alert on its rate works.
fn xid_totals(text: &mut Exposition, view: &MetricsView<'_>) {
    let mut family = text.family_always(
        "bcd_xid_total",
        Kind::Counter,
        "XIDs the GPU logged this boot, by number and the catalog's class.",
    );
    for (gpu, xid, class, n) in &view.xid_totals {
        let uuid = gpu.as_str();
        let xid = xid.to_string();
        let labels = [("uuid", uuid), ("xid", xid.as_str()), ("class", class)];
        owned(&mut family, labels, &view.attribution.gpu(gpu), *n as f64);
    }
}

/// `bcd_gpu_healthy`, the scheduling answer.
fn healthy(text: &mut Exposition, view: &MetricsView<'_>) {
    let mut family = text.family(
        "bcd_gpu_healthy",
        Kind::Gauge,
        "1 when the GPU may take work (healthy or degraded); 0 when unhealthy or unknown (nvidia-smi silent).",
    );
    for (gpu, ok) in &view.healthy {
        owned(
            &mut family,
            [("uuid", gpu.as_str())],
            &view.attribution.gpu(gpu),
            flag(*ok),
        );
    }
}

/// `bcd_gpu_xid_condition`: one series per XID a GPU raised this boot.
fn xid_conditions(text: &mut Exposition, view: &MetricsView<'_>) {
    let mut family = text.family(
        "bcd_gpu_xid_condition",
        Kind::Gauge,
        "1 for each XID the GPU raised this boot.",
    );
    for (gpu, xids) in &view.xids {
        let uuid = gpu.as_str();
        for xid in xids {
            let xid = xid.to_string();
            let labels = [("uuid", uuid), ("xid", xid.as_str())];
            owned(&mut family, labels, &view.attribution.gpu(gpu), 1.0);
        }
    }
}

/// `bcd_device_owner`: one series per device somebody has, with its own labels only.
fn device_owners(text: &mut Exposition, view: &MetricsView<'_>) {
    let mut family = text.family(
        "bcd_device_owner",
        Kind::Gauge,
        "1 for each device (GPU, MIG device, slot) somebody has, labelled with who.",
    );
    for (device, gpu, labels) in view.attribution.claimed() {
        let (gpu, device) = (gpu.map(DeviceId::to_string), device.to_string());
        let uuid = gpu.as_deref().map(|gpu| ("uuid", gpu));
        let ids = uuid.into_iter().chain([("device_id", device.as_str())]);
        owned(&mut family, ids, &labels, 1.0);
    }
}

/// One GPU's counts of an inventory counter: correctable, then uncorrectable (its `type`
/// label).
type ErrorCounts = fn(&Gpu) -> [Option<u64>; 2];

/// The inventory's error counters: name, type, help, and one GPU's counts.
const ERROR_COUNTS: [(&str, Kind, &str, ErrorCounts); 3] = [
    (
        "bcd_gpu_ecc_errors_total",
        Kind::Counter,
        "ECC errors over the GPU's life (aggregate).",
        |g| {
            let c = g.ecc.as_ref().and_then(|e| e.aggregate.as_ref());
            [
                c.and_then(|c| c.correctable),
                c.and_then(|c| c.uncorrectable),
            ]
        },
    ),
    (
        "bcd_gpu_ecc_volatile_errors",
        Kind::Gauge,
        "ECC errors since the driver loaded.",
        |g| {
            let c = g.ecc.as_ref().and_then(|e| e.volatile.as_ref());
            [
                c.and_then(|c| c.correctable),
                c.and_then(|c| c.uncorrectable),
            ]
        },
    ),
    (
        "bcd_gpu_remapped_rows_total",
        Kind::Counter,
        "Rows remapped, by the kind of error that caused it.",
        |g| {
            let r = g.row_remap.as_ref();
            [
                r.and_then(|r| r.correctable),
                r.and_then(|r| r.uncorrectable),
            ]
        },
    ),
];

/// The inventory's ECC and remapped-row counters, by `type`.
fn error_counters(text: &mut Exposition, view: &MetricsView<'_>, gpus: &[Gpu]) {
    for (name, kind, help, counts) in ERROR_COUNTS {
        let mut family = text.family(name, kind, help);
        for g in gpus {
            let uuid = g.uuid.as_str();
            let kinds = ["correctable", "uncorrectable"].into_iter().zip(counts(g));
            for (t, n) in kinds.filter_map(|(t, n)| Some((t, n?))) {
                let who = view.attribution.gpu(&g.uuid);
                owned(&mut family, [("uuid", uuid), ("type", t)], &who, n as f64);
            }
        }
    }
}

/// The row remapper's two flags, per GPU that has a row remapper.
fn row_remap_flags(text: &mut Exposition, view: &MetricsView<'_>, gpus: &[Gpu]) {
    type RemapFlag = fn(&RowRemap) -> Option<bool>;
    let flags: [(&str, &str, RemapFlag); 2] = [
        (
            "bcd_gpu_row_remap_pending",
            "1 when a row remap waits for a GPU reset.",
            |r| r.pending,
        ),
        (
            "bcd_gpu_row_remap_failure",
            "1 when row remapping failed: the GPU needs replacing.",
            |r| r.failure,
        ),
    ];
    for (name, help, read) in flags {
        let mut family = text.family(name, Kind::Gauge, help);
        for g in gpus {
            if let Some(remap) = &g.row_remap {
                let uuid = g.uuid.as_str();
                let on = read(remap).unwrap_or(false);
                owned(
                    &mut family,
                    [("uuid", uuid)],
                    &view.attribution.gpu(&g.uuid),
                    flag(on),
                );
            }
        }
    }
}

/// `bcd_mig_memory_used_bytes` and `_total_bytes` per MIG device of the samples, labelled
/// with the parent GPU's `uuid` (as dcgm-exporter's MIG series are, so joins on it keep
/// working) and the MIG device's own `mig_uuid` from the inventory (empty when the inventory
/// names no MIG device with that GPU instance and compute instance).
fn mig_memory(text: &mut Exposition, view: &MetricsView<'_>) {
    type MigReading = fn(&XmlMigDevice) -> Option<u64>;
    let used_help = format!(
        "A MIG device's framebuffer memory in use (read with nvidia-smi -q -x every {} s).",
        crate::smi::sampler::MIG_MEMORY_INTERVAL.as_secs()
    );
    let readings: [(&str, &str, MigReading); 2] = [
        ("bcd_mig_memory_used_bytes", used_help.as_str(), |m| {
            m.memory_used_mib
        }),
        (
            "bcd_mig_memory_total_bytes",
            "A MIG device's framebuffer memory size.",
            |m| m.memory_total_mib,
        ),
    ];
    let mut mig_uuids: BTreeMap<(&str, Option<u32>, Option<u32>), String> = BTreeMap::new();
    for gpu in view
        .inventory
        .map(|i| i.gpu.gpus.as_slice())
        .unwrap_or_default()
    {
        for d in gpu.mig.iter().flat_map(|m| &m.devices) {
            if let Some(mig_uuid) = &d.uuid {
                mig_uuids.insert((gpu.uuid.as_str(), d.gi, d.ci), mig_uuid.to_string());
            }
        }
    }
    for (name, help, read) in readings {
        let mut family = text.family(name, Kind::Gauge, help);
        for sample in view.samples {
            for m in &sample.mig_devices {
                let Some(mib) = read(m) else { continue };
                let id = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_default();
                let (gi, ci) = (id(m.gpu_instance_id), id(m.compute_instance_id));
                let mig_uuid = mig_uuids
                    .get(&(
                        sample.uuid.as_str(),
                        m.gpu_instance_id,
                        m.compute_instance_id,
                    ))
                    .map(String::as_str)
                    .unwrap_or_default();
                let labels = [
                    ("uuid", sample.uuid.as_str()),
                    ("mig_uuid", mig_uuid),
                    ("gpu_instance", gi.as_str()),
                    ("compute_instance", ci.as_str()),
                ];
                family.sample(labels, mib as f64 * MIB);
            }
        }
    }
}

/// How the sampler runs: loop mode, its restarts, the MIG memory reads.
fn sampler(text: &mut Exposition, sampling: &SamplingState) {
    text.family(
        "bcd_sampler_loop_mode",
        Kind::Gauge,
        "1 while one long-lived nvidia-smi -lms child feeds the samples, 0 on one-shot queries.",
    )
    .sample([], flag(sampling.loop_mode));
    text.family(
        "bcd_sampler_restarts_total",
        Kind::Counter,
        "Loop-mode sampling sessions started again after a child died or stalled.",
    )
    .sample([], sampling.restarts as f64);
    text.family(
        "bcd_sampler_mig_memory_reads_total",
        Kind::Counter,
        "nvidia-smi -q -x runs that read the MIG devices' memory (one a minute while a GPU is in MIG mode).",
    )
    .sample([], sampling.mig_memory_reads as f64);
}

/// The last run of each `nvidia-smi` query of the collection: how long, and whether it answered.
fn nvidia_smi_queries(text: &mut Exposition, queries: &[QueryRecord]) {
    let mut family = text.family(
        "bcd_nvidia_smi_duration_seconds",
        Kind::Gauge,
        "How long the last run of each nvidia-smi query took.",
    );
    for q in queries {
        family.sample([("query", q.query.as_str())], q.elapsed.as_secs_f64());
    }
    let mut family = text.family(
        "bcd_nvidia_smi_success",
        Kind::Gauge,
        "1 when the last run of each nvidia-smi query answered and parsed.",
    );
    for q in queries {
        family.sample([("query", q.query.as_str())], flag(q.error.is_none()));
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

    // A VM or pod name is not bcd's to restrict: a hostile one must stay inside its quoted
    // label value (no early close, no new line, no injected label or sample).
    #[test]
    fn a_hostile_vm_or_pod_name_stays_inside_its_label_value() {
        use crate::device::{PodAllocation, PodRef};
        let hostile = "x\"} 1\nbcd_gpus 99\n# \\";
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
                samples[0].uuid, "x\\\"} 1\\nbcd_gpus 99\\n# \\\\"
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
                        uuid: Some("MIG-65db3e42-f991-a575-c20e-8350d31e437c".parse().unwrap()),
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

    // What broke: bcd_mig_memory_* carried only the parent GPU's uuid, so two MIG devices of
    // one GPU were told apart by instance ids alone, and the help said "every minute" for a
    // reading taken every 600 s. The MIG device's own UUID is a label now, the parent's kept.
    #[test]
    fn mig_memory_series_name_the_mig_device_and_the_real_interval() {
        use crate::smi::xml::XmlMigDevice;
        let inv = inventory();
        let mut s = sample("GPU-b9036d74-bff6-b565-c003-dc53279ae2bd");
        s.mig_devices = vec![XmlMigDevice {
            gpu_instance_id: Some(1),
            compute_instance_id: Some(0),
            memory_used_mib: Some(100),
            memory_total_mib: Some(40192),
            ..XmlMigDevice::default()
        }];
        let samples = [s];
        let view = MetricsView {
            samples: &samples,
            inventory: Some(&inv),
            ..MetricsView::default()
        };
        let text = render(&view);
        assert!(
            text.contains("bcd_mig_memory_used_bytes{uuid=\"GPU-b9036d74-bff6-b565-c003-dc53279ae2bd\",mig_uuid=\"MIG-65db3e42-f991-a575-c20e-8350d31e437c\",gpu_instance=\"1\",compute_instance=\"0\"} 104857600\n"),
            "{text}"
        );
        assert!(text.contains("every 600 s"), "{text}");
        assert!(!text.contains("every minute"), "{text}");
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
                created_at: None,
                claim: None,
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
