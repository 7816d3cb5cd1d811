//! NVIDIA dcgm-exporter's series (`bcd node --metrics-compat`): one table, [`DCGM_FIELDS`],
//! from each dcgm-exporter name to the bcd reading that fills it (a sample's, the last XID, or
//! an inventory counter), in dcgm-exporter's units and with its labels, and the renderer that
//! walks it. What bcd cannot provide, and why, docs/node-service.md lists.

use std::collections::BTreeMap;

use crate::inventory::document::Gpu;
use crate::prometheus::{Exposition, Family, Kind};
use crate::smi::samples::GpuSample;

use super::{owned, MetricsCompat, MetricsView};

/// Where the value of a dcgm-exporter series comes from.
#[derive(Debug, Clone, Copy)]
pub enum Source {
    /// A reading of the GPU's latest sample, in dcgm-exporter's unit.
    Sample(fn(&GpuSample) -> Option<f64>),
    /// The XID seen last this boot (0: none), per GPU and per MIG device, as dcgm-exporter
    /// repeats it for each GPU instance.
    LastXid,
    /// A counter or flag of the GPU's inventory (`-q -x`).
    Inventory(fn(&Gpu) -> Option<f64>),
}

/// One dcgm-exporter series bcd fills: its name, Prometheus type, help (dcgm-exporter's) and
/// where its value comes from.
#[derive(Debug)]
pub struct DcgmField {
    /// `DCGM_FI_DEV_...`.
    pub name: &'static str,
    /// As dcgm-exporter types it (its counters do not end in `_total`).
    pub kind: Kind,
    /// dcgm-exporter's help text, unit included.
    pub help: &'static str,
    /// The bcd reading.
    pub source: Source,
}

/// Every dcgm-exporter series bcd serves, in the order they are rendered, in dcgm-exporter's
/// units (MiB, %, C, W, MHz).
pub const DCGM_FIELDS: &[DcgmField] = &[
    DcgmField {
        name: "DCGM_FI_DEV_SM_CLOCK",
        kind: Kind::Gauge,
        help: "SM clock frequency (in MHz).",
        source: Source::Sample(|s| s.clocks_sm_mhz.map(f64::from)),
    },
    DcgmField {
        name: "DCGM_FI_DEV_MEM_CLOCK",
        kind: Kind::Gauge,
        help: "Memory clock frequency (in MHz).",
        source: Source::Sample(|s| s.clocks_mem_mhz.map(f64::from)),
    },
    DcgmField {
        name: "DCGM_FI_DEV_GPU_TEMP",
        kind: Kind::Gauge,
        help: "GPU temperature (in C).",
        source: Source::Sample(|s| s.temperature_c.map(f64::from)),
    },
    DcgmField {
        name: "DCGM_FI_DEV_POWER_USAGE",
        kind: Kind::Gauge,
        help: "Power draw (in W).",
        source: Source::Sample(|s| s.power_draw_w),
    },
    DcgmField {
        name: "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        kind: Kind::Gauge,
        help: "Power management limit (in W).",
        source: Source::Sample(|s| s.power_limit_w),
    },
    DcgmField {
        name: "DCGM_FI_DEV_GPU_UTIL",
        kind: Kind::Gauge,
        help: "GPU utilization (in %).",
        source: Source::Sample(|s| s.utilization_gpu_pct.map(f64::from)),
    },
    DcgmField {
        name: "DCGM_FI_DEV_MEM_COPY_UTIL",
        kind: Kind::Gauge,
        help: "Memory utilization (in %).",
        source: Source::Sample(|s| s.utilization_memory_pct.map(f64::from)),
    },
    DcgmField {
        name: "DCGM_FI_DEV_FB_FREE",
        kind: Kind::Gauge,
        help: "Framebuffer memory free (in MiB).",
        source: Source::Sample(|s| s.memory_free_mib.map(|m| m as f64)),
    },
    DcgmField {
        name: "DCGM_FI_DEV_FB_USED",
        kind: Kind::Gauge,
        help: "Framebuffer memory used (in MiB).",
        source: Source::Sample(|s| s.memory_used_mib.map(|m| m as f64)),
    },
    DcgmField {
        name: "DCGM_FI_DEV_FB_RESERVED",
        kind: Kind::Gauge,
        help: "Framebuffer memory reserved (in MiB).",
        source: Source::Sample(|s| s.memory_reserved_mib.map(|m| m as f64)),
    },
    DcgmField {
        name: "DCGM_FI_DEV_FB_TOTAL",
        kind: Kind::Gauge,
        help: "Framebuffer memory total (in MiB).",
        source: Source::Sample(|s| s.memory_total_mib.map(|m| m as f64)),
    },
    DcgmField {
        name: "DCGM_FI_DEV_XID_ERRORS",
        kind: Kind::Gauge,
        help: "Value of the last XID error encountered.",
        source: Source::LastXid,
    },
    DcgmField {
        name: "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        kind: Kind::Counter,
        help: "Number of remapped rows for uncorrectable errors",
        source: Source::Inventory(|g| g.row_remap.as_ref()?.uncorrectable.map(|v| v as f64)),
    },
    DcgmField {
        name: "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        kind: Kind::Counter,
        help: "Number of remapped rows for correctable errors",
        source: Source::Inventory(|g| g.row_remap.as_ref()?.correctable.map(|v| v as f64)),
    },
    DcgmField {
        name: "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        kind: Kind::Gauge,
        help: "Whether remapping of rows has failed",
        source: Source::Inventory(|g| {
            g.row_remap
                .as_ref()?
                .failure
                .map(|b| f64::from(u8::from(b)))
        }),
    },
    DcgmField {
        name: "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        kind: Kind::Counter,
        help: "Total number of single-bit volatile ECC errors.",
        source: Source::Inventory(|g| {
            g.ecc
                .as_ref()?
                .volatile
                .as_ref()?
                .correctable
                .map(|v| v as f64)
        }),
    },
    DcgmField {
        name: "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        kind: Kind::Counter,
        help: "Total number of double-bit volatile ECC errors.",
        source: Source::Inventory(|g| {
            g.ecc
                .as_ref()?
                .volatile
                .as_ref()?
                .uncorrectable
                .map(|v| v as f64)
        }),
    },
    DcgmField {
        name: "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        kind: Kind::Counter,
        help: "Total number of single-bit persistent ECC errors.",
        source: Source::Inventory(|g| {
            g.ecc
                .as_ref()?
                .aggregate
                .as_ref()?
                .correctable
                .map(|v| v as f64)
        }),
    },
    DcgmField {
        name: "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        kind: Kind::Counter,
        help: "Total number of double-bit persistent ECC errors.",
        source: Source::Inventory(|g| {
            g.ecc
                .as_ref()?
                .aggregate
                .as_ref()?
                .uncorrectable
                .map(|v| v as f64)
        }),
    },
];

/// A GPU's identity in dcgm-exporter's labels, from the inventory.
#[derive(Debug)]
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
}

/// dcgm-exporter's labels for one scrape: each GPU's identity from the inventory, and the
/// host's name and driver version.
#[derive(Debug)]
pub(super) struct DcgmLabels<'v> {
    identities: BTreeMap<&'v str, DcgmIdentity>,
    host: Vec<(&'static str, &'v str)>,
}

impl<'v> DcgmLabels<'v> {
    /// The labels of `view`'s inventory and host, with `compat`'s spelling of the host label.
    pub(super) fn new(compat: MetricsCompat, view: &MetricsView<'v>) -> Self {
        let gpus = view.inventory.iter().flat_map(|inv| &inv.gpu.gpus);
        let identities = gpus
            .map(|g| (g.uuid.as_str(), DcgmIdentity::of(g)))
            .collect();
        let mut host = Vec::new();
        if let Some(name) = view.host_name {
            host.push((compat.hostname_label(), name));
        }
        if let Some(v) = view.inventory.and_then(|i| i.gpu.driver_version.as_deref()) {
            host.push(("DCGM_FI_DRIVER_VERSION", v));
        }
        Self { identities, host }
    }

    /// A GPU's labels: `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, then `extra` (a MIG
    /// device's `GPU_I_PROFILE` and `GPU_I_ID`), then the host and the driver's version; `None`
    /// for a GPU the inventory does not list (yet).
    pub(super) fn gpu<'l>(
        &'l self,
        uuid: &str,
        extra: &[(&'l str, &'l str)],
    ) -> Option<Vec<(&'l str, &'l str)>> {
        let id = self.identities.get(uuid)?;
        let mut l = vec![("gpu", id.gpu.as_str()), ("UUID", id.uuid.as_str())];
        if let Some(b) = &id.pci_bus_id {
            l.push(("pci_bus_id", b));
        }
        l.push(("device", &id.device));
        if let Some(m) = &id.model {
            l.push(("modelName", m));
        }
        l.extend_from_slice(extra);
        l.extend_from_slice(&self.host);
        Some(l)
    }
}

/// Renders every field of [`DCGM_FIELDS`] that has a value: per GPU the inventory lists (a
/// GPU it does not list yet, with no index and no model, has none), each with who has it.
pub(super) fn render(text: &mut Exposition, view: &MetricsView<'_>, labels: &DcgmLabels<'_>) {
    for field in DCGM_FIELDS {
        let mut family = text.family(field.name, field.kind, field.help);
        match field.source {
            Source::Sample(read) => {
                for s in view.samples {
                    let uuid = s.uuid.as_str();
                    if let (Some(l), Some(v)) = (labels.gpu(uuid, &[]), read(s)) {
                        owned(&mut family, l, &view.attribution.gpu(&s.uuid), v);
                    }
                }
            }
            Source::LastXid => last_xids(&mut family, view, labels),
            Source::Inventory(read) => {
                for g in view.inventory.iter().flat_map(|inv| &inv.gpu.gpus) {
                    let uuid = g.uuid.as_str();
                    if let (Some(l), Some(v)) = (labels.gpu(uuid, &[]), read(g)) {
                        owned(&mut family, l, &view.attribution.gpu(&g.uuid), v);
                    }
                }
            }
        }
    }
}

/// `DCGM_FI_DEV_XID_ERRORS`: each GPU's last XID, repeated for each of its MIG devices with
/// the device's instance and owner.
fn last_xids(family: &mut Family<'_>, view: &MetricsView<'_>, labels: &DcgmLabels<'_>) {
    for g in view.inventory.iter().flat_map(|inv| &inv.gpu.gpus) {
        let uuid = g.uuid.as_str();
        let Some(gpu_labels) = labels.gpu(uuid, &[]) else {
            continue;
        };
        let last = f64::from(view.last_xid.get(&g.uuid).copied().unwrap_or(0));
        owned(family, gpu_labels, &view.attribution.gpu(&g.uuid), last);
        for m in g.mig.iter().flat_map(|m| &m.devices) {
            let (Some(profile), Some(gi)) = (&m.profile, m.gi) else {
                continue;
            };
            let gi = gi.to_string();
            let instance = [
                ("GPU_I_PROFILE", profile.as_str()),
                ("GPU_I_ID", gi.as_str()),
            ];
            let Some(l) = labels.gpu(uuid, &instance) else {
                continue;
            };
            let owner = m
                .uuid
                .as_ref()
                .map(|d| view.attribution.device(d.device()))
                .unwrap_or_default();
            owned(family, l, &owner, last);
        }
    }
}
