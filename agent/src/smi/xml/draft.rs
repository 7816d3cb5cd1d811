//! What a record is read into before it is finished: the document-level fields, a `<gpu>`
//! with the readings resolved only at its end (ECC sums, power fallbacks, the fabric), and
//! the ECC counters of one block. The table ([`super::table`]) says which element fills which
//! field; the walker ([`super::document`]) finishes a draft when its element ends. Neither
//! is imported here.

use super::read::{is_zero_placeholder, present_address};
use super::{Counts, EccCounts, Fabric, RowRemap, XmlGpu};

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
