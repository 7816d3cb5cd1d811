//! Opening a node's state, once: the data folder (made when missing), the boot id (read once,
//! for `faults.json` and `vm-gpus.json`), `faults.json` with its fallback in the runtime
//! folder, the temporary files a crash left, and `holds.json`. Each part that cannot be used
//! is a problem `status` shows, never a failure: a node runs on what it has.

use std::sync::Arc;

use tokio::sync::watch;

use super::shared::{Node, NodeConfig};
use crate::cdi::{self, Holds};
use crate::health::faults::{read_boot_id, FaultStore, Health};
use crate::helper_client::Helper;
use crate::inventory::document::Inventory;
use crate::inventory::scheduler::Scheduler;
use crate::state::remove_crash_temps;

/// A node's state, opened: the node, and the ends its tasks take.
#[derive(Debug)]
pub struct Opened {
    /// The node (no collection yet, no task running).
    pub node: Node,
    /// Each collection's inventory, for the XID watcher.
    pub inventory: watch::Receiver<Inventory>,
    /// The collection scheduler, for its task.
    pub scheduler: Scheduler,
}

impl Node {
    /// Opens the node's state on `config` with `helper` (the root helper's socket in
    /// production, a recording fake in tests). Every problem found is already recorded in
    /// the node's problems (and logged once).
    pub fn open(config: NodeConfig, helper: Arc<dyn Helper>) -> Opened {
        let mut problems = Vec::new();
        let (boot_id, health, holds) = open_state(&config, &mut problems);
        let (mut node, inventory, scheduler) =
            Node::assemble(config, health, Some(holds), helper, &boot_id);
        node.restore_layout();
        for p in problems {
            node.problem(p);
        }
        Opened {
            node,
            inventory,
            scheduler,
        }
    }
}

/// Opens the state a node keeps, reporting (not failing on) what is unusable: the boot id
/// (`unknown` when unreadable), the faults and the holds.
fn open_state(config: &NodeConfig, problems: &mut Vec<String>) -> (String, Health, Holds) {
    if let Err(e) = std::fs::create_dir_all(&config.data_dir) {
        problems.push(format!(
            "the data folder {} cannot be created ({e}): state will not be kept; check --data-dir and its owner",
            config.data_dir.display()
        ));
    }
    let boot_id = read_boot_id(&config.host).unwrap_or_else(|e| {
        problems.push(format!("{e}; XID conditions are kept without a boot id"));
        String::from("unknown")
    });
    let store = match FaultStore::open(&config.data_dir, &boot_id) {
        Ok(store) => store,
        Err(e) => {
            problems.push(format!("{e}"));
            // A torn file was set aside; the retry starts from empty.
            FaultStore::open(&config.data_dir, &boot_id)
                .unwrap_or_else(|_| FaultStore::empty(&config.data_dir, &boot_id))
        }
    }
    // What an earlier process of this boot could not write to the data folder.
    .with_fallback(&config.runtime_dir);
    for temp in remove_crash_temps(&config.data_dir, is_state_file)
        .into_iter()
        .chain(remove_crash_temps(&config.cdi_dir, |n| {
            cdi::holds::hold_of_file_name(n).is_some()
        }))
    {
        tracing::warn!(
            "removed {}, left by a write a crash cut off",
            temp.display()
        );
    }
    let opened = cdi::open_holds(&config.data_dir, &config.cdi_dir);
    problems.extend(opened.notes);
    (boot_id, Health::new(store), opened.holds)
}

/// Whether `name` is one of the state files of the data folder.
fn is_state_file(name: &str) -> bool {
    [
        cdi::holds::HOLDS_FILE,
        crate::health::faults::FAULTS_FILE,
        crate::inventory::memory::FILE_NAME,
        crate::runtime::journal::FILE_NAME,
        crate::node::vms::VM_GPUS_FILE,
    ]
    .contains(&name)
}
