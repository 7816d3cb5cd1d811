//! The document being read: the `<gpu>` record open now, the ones finished, the driver's
//! versions, and what is resolved only when an element ends (ECC sums, power fallbacks, the
//! fabric). Which element fills what is [`super::table`]'s business.

use quick_xml::events::BytesStart;

use super::read::{is_zero_placeholder, present_address, quote_name};
use super::table::{NodeId, Record, Slot, Tree};
use super::{
    Counts, EccCounts, Fabric, QueryXml, RowRemap, XmlError, XmlGpu, XmlMigDevice, XmlProcess,
    MAX_DEPTH,
};
use crate::smi::value;

/// The document-level fields, as read.
#[derive(Debug, Default)]
pub(super) struct DocDraft {
    pub(super) driver_version: Option<String>,
    pub(super) kmd_version: Option<String>,
    pub(super) cuda_version: Option<String>,
    pub(super) cuda_umd_version: Option<String>,
    pub(super) attached_gpus: Option<u32>,
}

/// The ECC counters of one block, as read.
#[derive(Debug, Default)]
pub(super) struct EccRaw {
    pub(super) single_bit_total: Option<u64>,
    pub(super) double_bit_total: Option<u64>,
    pub(super) sram_correctable: Option<u64>,
    pub(super) sram_uncorrectable: Option<u64>,
    pub(super) sram_parity: Option<u64>,
    pub(super) sram_secded: Option<u64>,
    pub(super) dram_correctable: Option<u64>,
    pub(super) dram_uncorrectable: Option<u64>,
}

impl EccRaw {
    pub(super) fn counts(&self) -> Counts {
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
pub(super) struct GpuDraft {
    pub(super) gpu: XmlGpu,
    pub(super) volatile: EccRaw,
    pub(super) aggregate: EccRaw,
    pub(super) remap: RowRemap,
    pub(super) instant_power_draw: Option<f64>,
    pub(super) power_draw: Option<f64>,
    pub(super) average_power_draw: Option<f64>,
    pub(super) current_power_limit: Option<f64>,
    pub(super) enforced_power_limit: Option<f64>,
    pub(super) power_limit: Option<f64>,
    pub(super) cluster_uuid: Option<String>,
    pub(super) clique_id: Option<u32>,
}

impl GpuDraft {
    pub(super) fn finish(self) -> XmlGpu {
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
            gpu.pci_bus_id = gpu.id.as_deref().and_then(present_address);
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

/// The document read so far. Each open element is its table node, or `None` when the table
/// does not know it there (then nothing below it is read either).
pub(super) struct Document {
    tree: &'static Tree,
    pub(super) root_seen: bool,
    top: DocDraft,
    gpus: Vec<XmlGpu>,
    current: Option<GpuDraft>,
    path: Vec<Option<NodeId>>,
}

impl Default for Document {
    fn default() -> Self {
        Self {
            tree: Tree::get(),
            root_seen: false,
            top: DocDraft::default(),
            gpus: Vec::new(),
            current: None,
            path: Vec::with_capacity(16),
        }
    }
}

impl Document {
    /// Whether every element opened so far is closed again (the root's end ends the read).
    pub(super) fn at_end(&self) -> bool {
        self.path.is_empty()
    }

    /// What the text of the innermost open element fills, if anything.
    pub(super) fn text_slot(&self) -> Option<Slot> {
        let id = (*self.path.last()?)?;
        self.tree.node(id).slot
    }

    pub(super) fn open(&mut self, start: &BytesStart, at: u64) -> Result<(), XmlError> {
        let name = start.name();
        let tree = self.tree;
        let node = match self.path.last() {
            None => {
                if name.as_ref() != b"nvidia_smi_log" {
                    return Err(XmlError::WrongRoot {
                        found: quote_name(name.as_ref()),
                    });
                }
                self.root_seen = true;
                Some(Tree::ROOT)
            }
            Some(None) => None,
            Some(Some(parent)) => tree.child(*parent, name.as_ref()),
        };
        if self.path.len() >= MAX_DEPTH {
            return Err(XmlError::TooDeep { position: at });
        }
        self.path.push(node);
        let Some(Slot::Open(record)) = node.and_then(|id| tree.node(id).slot) else {
            return Ok(());
        };
        match record {
            Record::Gpu => {
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
            Record::MigDevice => {
                if let Some(draft) = &mut self.current {
                    draft.gpu.mig_devices.push(XmlMigDevice::default());
                }
            }
            Record::Process => {
                if let Some(draft) = &mut self.current {
                    draft.gpu.processes.push(XmlProcess::default());
                }
            }
        }
        Ok(())
    }

    pub(super) fn close(&mut self) {
        if let Some(Some(id)) = self.path.pop() {
            if matches!(self.tree.node(id).slot, Some(Slot::Open(Record::Gpu))) {
                if let Some(draft) = self.current.take() {
                    self.gpus.push(draft.finish());
                }
            }
        }
    }

    pub(super) fn set(&mut self, slot: Slot, text: &str) {
        let draft = self.current.as_mut();
        match slot {
            Slot::Doc(set) => set(&mut self.top, text),
            Slot::Gpu(set) => {
                if let Some(draft) = draft {
                    set(draft, text);
                }
            }
            Slot::Mig(set) => {
                if let Some(mig) = draft.and_then(|d| d.gpu.mig_devices.last_mut()) {
                    set(mig, text);
                }
            }
            Slot::Process(set) => {
                if let Some(process) = draft.and_then(|d| d.gpu.processes.last_mut()) {
                    set(process, text);
                }
            }
            Slot::Open(_) => {}
        }
    }

    pub(super) fn finish(self) -> QueryXml {
        QueryXml {
            driver_version: self.top.kmd_version.or(self.top.driver_version),
            cuda_version: self.top.cuda_umd_version.or(self.top.cuda_version),
            attached_gpus: self.top.attached_gpus,
            gpus: self.gpus,
        }
    }
}
