//! The PCIe link widths sysfs gives for each GPU: a link trained below its maximum width is a
//! degraded GPU in the verdict ([`super::verdict`]) and in diag's `pcie.link`.
//!
//! Width only: an idle GPU lowers its link *speed* on purpose, never its width.

use std::collections::BTreeMap;

use bcd_protocol::GpuUuid;

use crate::inventory::document::Inventory;
use crate::sys::host::Host;

pub use crate::sys::pci::LinkWidth;

/// Reads each GPU's `current_link_width` and `max_link_width` from `host`'s sysfs; GPUs
/// without both files (WSL, passthrough without sysfs) are left out.
pub fn link_widths(host: &Host, inventory: &Inventory) -> BTreeMap<GpuUuid, LinkWidth> {
    inventory
        .gpu
        .gpus
        .iter()
        .filter_map(|gpu| {
            let width = crate::sys::pci::link_width(host, &gpu.address()?)?;
            Some((gpu.uuid.clone(), width))
        })
        .collect()
}
