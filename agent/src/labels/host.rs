//! What the labels read from a host: the two facts the inventory does not hold, and, for
//! `bcd hardware --labels`, one collection judged on its own. Nothing here writes.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use bcd_protocol::GpuUuid;

use super::{node_labels, HostFacts, LabelConfig, Labels};
use crate::health::faults::{read_boot_id, read_with_history};
use crate::health::verdict::{judge, Evidence, Verdict};
use crate::health::xid::XidPolicy;
use crate::inventory::collect::collect;
use crate::sys::host::Host;

/// Where the kernel shows the machine's DMI product name (world-readable).
pub const DMI_PRODUCT_NAME: &str = "/sys/class/dmi/id/product_name";

/// The most of the product name read: DMI strings are short, sysfs pages 4 KiB.
const MAX_PRODUCT_NAME: u64 = 4096;

impl HostFacts {
    /// Reads the DMI product name and the NVIDIA GPUs' PCI classes under `host`'s root. What
    /// cannot be read is left out (the labels say `unknown` then, as GFD does).
    pub fn read(host: &Host) -> Self {
        let machine = std::fs::File::open(host.path(DMI_PRODUCT_NAME))
            .and_then(|f| {
                let mut text = String::new();
                f.take(MAX_PRODUCT_NAME).read_to_string(&mut text)?;
                Ok(text)
            })
            .ok()
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty());
        let pci_classes = crate::sys::pci::functions(host)
            .into_iter()
            .filter(|f| f.is_nvidia_gpu())
            .filter_map(|f| Some((f.address, f.class?)))
            .collect();
        Self {
            machine,
            pci_classes,
        }
    }
}

/// One look at a host: its labels and what the look could not see.
#[derive(Debug, Clone)]
pub struct Look {
    /// The labels.
    pub labels: Labels,
    /// Why `nvidia-smi` did not answer, when it did not.
    pub nvidia_smi_error: Option<String>,
    /// Other things left out, in sentences (a GPU the inventory could not name, unreadable
    /// XID conditions).
    pub notes: Vec<String>,
}

/// The labels of `host` from one collection, as `bcd hardware --labels` prints them: the
/// verdicts judged on that collection (the driver's readings in its `-q -x`, the fabric
/// manager) and on this boot's XID conditions in `data_dir`'s `faults.json`, read and never
/// written, as `bcd status` judges when no node answers. A running node judges on more (the
/// samples, the error rates between collections), so its `bcd.dev/` labels may differ.
pub async fn look(host: &Host, data_dir: &Path, policy: &XidPolicy, config: &LabelConfig) -> Look {
    let collection = collect(host, None).await;
    let mut notes = collection.left_out.clone();
    let nvidia_smi_error = collection.snapshot_error.as_ref().map(ToString::to_string);
    let driver = collection
        .snapshot
        .as_ref()
        .map(|s| crate::health::status::driver_readings(&s.xml));
    let (conditions, history) =
        match read_boot_id(host).and_then(|b| read_with_history(data_dir, &b)) {
            Ok(c) => c,
            Err(e) => {
                notes.push(format!("XID conditions unknown: {e}"));
                (Vec::new(), Vec::new())
            }
        };
    let inventory = &collection.inventory;
    let links = crate::health::pcie::link_widths(host, inventory);
    let evidence = Evidence::new(&conditions)
        .with_board(&inventory.gpu.gpus)
        .with_history(&history)
        .with_policy(policy)
        .with_driver(driver.as_ref(), nvidia_smi_error.as_deref())
        .with_fabric_manager_down(crate::sys::systemd::fabric_manager(host).await.down())
        .with_links(&links);
    let verdicts: BTreeMap<GpuUuid, Verdict> = inventory
        .gpu
        .gpus
        .iter()
        .map(|g| (g.uuid.clone(), judge(g, &evidence)))
        .collect();
    Look {
        labels: node_labels(inventory, &verdicts, &HostFacts::read(host), config),
        nvidia_smi_error,
        notes,
    }
}
