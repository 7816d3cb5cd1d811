//! The PCIe link widths sysfs gives for each GPU: a link trained below its maximum width is a
//! degraded GPU in the verdict ([`super::verdict`]) and in diag's `pcie.link`.
//!
//! Width only: an idle GPU lowers its link *speed* on purpose, never its width.

use std::collections::BTreeMap;

use bcd_protocol::GpuUuid;

use crate::host::Host;
use crate::inventory::document::Inventory;

/// A PCIe link's negotiated and maximum width, from sysfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkWidth {
    /// `current_link_width`.
    pub current: u32,
    /// `max_link_width`.
    pub max: u32,
}

impl LinkWidth {
    /// Whether the link trained below its maximum width.
    pub fn narrowed(self) -> bool {
        self.current < self.max
    }
}

/// Reads each GPU's `current_link_width` and `max_link_width` from `host`'s sysfs; GPUs
/// without both files (WSL, passthrough without sysfs) are left out.
pub fn link_widths(host: &Host, inventory: &Inventory) -> BTreeMap<GpuUuid, LinkWidth> {
    let read = |dir: &std::path::Path, name: &str| -> Option<u32> {
        std::fs::read_to_string(dir.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let mut out = BTreeMap::new();
    for gpu in &inventory.gpu.gpus {
        let Some(address) = gpu.address() else {
            continue;
        };
        let dir = host.path(format!("/sys/bus/pci/devices/{}", address.sysfs_name()));
        if let (Some(current), Some(max)) = (
            read(&dir, "current_link_width"),
            read(&dir, "max_link_width"),
        ) {
            out.insert(gpu.uuid.clone(), LinkWidth { current, max });
        }
    }
    out
}
