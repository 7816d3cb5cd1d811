//! What a consumer of the node's devices may ask of the node: what there is and how it is
//! held and judged now, a signal when any of that changes, changing Kubernetes holds under
//! the one policy, what the release pass reads (the holds, the samples' process counts), and
//! where to hand the pods' allocations. The kubelet device plugins are its first user and a
//! DRA driver the second; each keeps its own state (counters, problems) and shows it in the
//! node's status and metrics through [`Report`].
//!
//! The node implements [`DeviceSource`]; tests implement it with a fake. It sits above the
//! device vocabulary and the CDI specs (a consumer renders specs from what it gives) and
//! below the node and its consumers.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;

use tokio::sync::watch;

use crate::cdi::vendor::VendorSpecs;
use crate::cdi::DeviceCatalog;
use crate::device::policy::Topology;
use crate::device::store::{Before, Holds};
use crate::device::{DeviceId, Hold, HoldId, PodAllocation};
use crate::health::verdict::Verdict;
use crate::health::Condition;
use crate::inventory::document::Inventory;
use crate::smi::samples::GpuSample;
use bcd_protocol::GpuUuid;

/// The node's devices as a consumer sees them. Every method answers from the node's latest
/// state; none runs `nvidia-smi` or a privileged step. Futures are `Send`, so a consumer's
/// tasks may be spawned.
pub trait DeviceSource: Send + Sync + 'static {
    /// The latest inventory (empty before the first collection).
    fn inventory(&self) -> impl Future<Output = Inventory> + Send;

    /// Every hold now (none while `holds.json` cannot be read).
    fn holds_now(&self) -> impl Future<Output = Vec<Hold>> + Send;

    /// The policy's view of the GPUs, from the latest inventory.
    fn topology(&self) -> impl Future<Output = Topology> + Send;

    /// Per GPU UUID, the verdict now; a GPU `nvidia-smi` is silent about is absent.
    fn verdicts(&self) -> impl Future<Output = BTreeMap<GpuUuid, Verdict>> + Send;

    /// The latest samples (the release pass reads their process counts).
    fn samples_now(&self) -> impl Future<Output = Vec<GpuSample>> + Send;

    /// The GPUs a step of the node's (a reset, a vfio step) has claimed now: they take no
    /// work meanwhile.
    fn claimed(&self) -> Vec<DeviceId>;

    /// How many slots each GPU offers (0: none).
    fn gpu_slots(&self) -> u32;

    /// The GPUs that need a reboot (the recovery loop found a reboot remedy or spent their
    /// resets); empty without `bcd node --remediate`.
    fn reboot_required(&self) -> Vec<GpuUuid> {
        Vec::new()
    }

    /// The MIG layout the node applied last and its state (`pending`, `success`,
    /// `failed`); `None` when none was.
    fn mig_layout(&self) -> Option<(String, &'static str)> {
        None
    }

    /// NVIDIA's CDI specs as they are now, and the device catalog of the latest collection:
    /// what a hold's CDI names are made from.
    fn cdi_context(&self) -> impl Future<Output = (VendorSpecs, DeviceCatalog)> + Send;

    /// Runs `change` on the hold store under its lock; `None` when the store could not be
    /// read at start. `change` must not wait.
    fn with_holds<T: Send>(
        &self,
        change: impl FnOnce(&mut Holds) -> T + Send,
    ) -> impl Future<Output = Option<T>> + Send;

    /// Changes the holds with `change` (recording each change in the journal it is handed)
    /// and writes the specs of the holds `written` names, under one holds lock: `Ok` only once
    /// each such spec is on disk; on any failure every recorded change is undone.
    ///
    /// # Errors
    /// `unavailable` when the store could not be read at start; `change`'s error; `missing`
    /// with the first spec that was not written.
    fn change_holds_durably<T: Send, E: Send>(
        &self,
        change: impl FnOnce(&mut Holds, &mut Vec<Before>) -> Result<T, E> + Send,
        written: impl FnOnce(&T) -> Vec<HoldId> + Send,
        missing: impl FnOnce(PathBuf) -> E + Send,
        unavailable: E,
    ) -> impl Future<Output = Result<T, E>> + Send;

    /// Writes every hold's spec and removes those of released holds.
    fn converge_holds(&self) -> impl Future<Output = ()> + Send;

    /// Hands the node every Kubernetes allocation read (the whole list each time).
    fn set_pod_allocations(&self, allocations: Vec<PodAllocation>);

    /// Records a problem an operator should see in `status` (logged once).
    fn problem(&self, sentence: String);

    /// A signal for every change a consumer's offer depends on.
    fn changes(&self) -> Changes;

    /// Says that something a consumer's offer depends on changed outside the node's own paths
    /// (the consumer changed holds itself).
    fn touch(&self);
}

/// What a consumer waits on: the GPUs' conditions (an XID, a healthy reset) and the node's
/// device signal (holds, inventory, claims).
#[derive(Debug)]
pub struct Changes {
    conditions: watch::Receiver<Vec<Condition>>,
    devices: watch::Receiver<u64>,
}

impl Changes {
    /// The two signals.
    pub fn new(conditions: watch::Receiver<Vec<Condition>>, devices: watch::Receiver<u64>) -> Self {
        Self {
            conditions,
            devices,
        }
    }

    /// Waits for the next change of either; `false` once the node is gone.
    pub async fn changed(&mut self) -> bool {
        tokio::select! {
            r = self.conditions.changed() => r.is_ok(),
            r = self.devices.changed() => r.is_ok(),
        }
    }
}

/// What a consumer shows in the node's `status` and metrics.
pub trait Report: Send + Sync + std::fmt::Debug {
    /// What is degraded on the consumer's side now, in one sentence.
    fn problem(&self) -> Option<String>;

    /// The consumer's series in Prometheus' text format (may be empty).
    fn metrics_text(&self) -> String;
}
