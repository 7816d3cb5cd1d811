//! One inventory collection: procfs and sysfs, then `nvidia-smi`, merged and hashed; with the
//! passthrough memory when the caller keeps one (the node service does, `bcd hardware` and
//! `bcd doctor` do not).

use crate::inventory::document::Inventory;
use crate::inventory::memory::{passed_through, GpuMemory};
use crate::inventory::merge::{left_out, merge};
use crate::inventory::procfs;
use crate::smi::runner::Runner;
use crate::smi::snapshot::{query, snapshot, QueryRecord, Snapshot, SnapshotError};
use crate::state::StateError;
use crate::sys::host::Host;

/// What a collection found, and what went wrong on the way without stopping it.
#[derive(Debug)]
pub struct Collection {
    /// The merged, hashed inventory.
    pub inventory: Inventory,
    /// The snapshot it was enriched with, when `nvidia-smi` answered.
    pub snapshot: Option<Snapshot>,
    /// Why there is no snapshot.
    pub snapshot_error: Option<SnapshotError>,
    /// Every `nvidia-smi` query the collection ran and how it went, a `-q -x` that failed
    /// included (so a wedged `nvidia-smi` shows in the metrics).
    pub queries: Vec<QueryRecord>,
    /// Why the passthrough memory could not be read or written (the collection went on).
    pub memory_error: Option<StateError>,
    /// GPUs `nvidia-smi` reported that the inventory leaves out, one sentence each (a UUID
    /// that names no GPU).
    pub left_out: Vec<String>,
}

/// Collects the inventory of `host`.
pub async fn collect(host: &Host, memory: Option<&GpuMemory>) -> Collection {
    collect_with(host, memory, &Runner::new(host.nvidia_smi())).await
}

/// Collects the inventory of `host`, running `nvidia-smi` through `runner` (doctor bounds its
/// queries with its own timeout; `runner` should run `host.nvidia_smi()`).
pub async fn collect_with(host: &Host, memory: Option<&GpuMemory>, runner: &Runner) -> Collection {
    let base = procfs::collect(host);
    let started = std::time::Instant::now();
    let (snap, snapshot_error) = match snapshot(runner).await {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(e)),
    };
    let queries = match (&snap, &snapshot_error) {
        (Some(s), _) => s.queries.clone(),
        // No driver at all is no failed query: nothing ran.
        (None, Some(e)) if e.is_no_driver() => Vec::new(),
        (None, e) => vec![QueryRecord {
            query: query::QUERY_XML.join(" "),
            elapsed: started.elapsed(),
            error: e.as_ref().map(ToString::to_string),
        }],
    };
    let mut section = merge(&base, snap.as_ref());
    let left_out = left_out(&base, snap.as_ref());
    let mut memory_error = None;
    if let Some(memory) = memory {
        if snap.is_some() {
            if let Err(e) = memory.remember(&section.gpus) {
                tracing::error!("passthrough memory: {e}");
                memory_error = Some(e);
            }
        }
        match memory.load() {
            Ok(seen) => {
                let extra = passed_through(host, &seen, &section.gpus);
                section.gpus.extend(extra);
            }
            Err(e) => {
                tracing::error!("passthrough memory: {e}");
                memory_error.get_or_insert(e);
            }
        }
    }
    Collection {
        inventory: Inventory::new(section),
        snapshot: snap,
        snapshot_error,
        queries,
        memory_error,
        left_out,
    }
}
