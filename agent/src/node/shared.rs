//! The node's shared state: what `bcd node` was told, the latest collection and samples, the
//! conditions, the holds, who has each device (for the metrics' attribution labels), and what
//! is degraded now. The API's handlers and the service's tasks share one [`Node`]; it imports
//! neither of them. Its fields are private to this module and its children: `collection`
//! (collecting and what the latest collection says), `holds` (the hold store and its specs)
//! and `problems` (what status lists as degraded) are `impl Node` blocks of their own.
//!
//! Lock order, where two are held at once: `collecting`, then `holds`, then `latest`; the
//! `std` mutexes (`sampling`, `problems`, `vendor_problems`, `grantless`, `left_out`, `vms`, `pods`) are
//! held for a copy only, never across an `.await`; `vms_file` is taken before `vms` and held
//! for the write of `vm-gpus.json`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{watch, RwLock};

use crate::cdi::{
    self, converge, DeviceCatalog, DeviceId, Hold, HoldError, HoldId, HoldOwner, Holds,
};
use crate::device::policy::{Busy, ClaimKind, ClaimSet, Placed, Topology};
use crate::device::PodAllocation;
use crate::health::faults::Health;
use crate::health::verdict::{judge, Evidence, Verdict};
use crate::health::watcher::WatcherStats;
use crate::health::Condition;
use crate::helper_client::Helper;
use crate::inventory::collect::collect;
use crate::inventory::collect::Collection;
use crate::inventory::document::{Gpu, GpuSection, Inventory};
use crate::inventory::memory::GpuMemory;
use crate::inventory::scheduler::{Scheduler, SchedulerHandle};
use crate::node::attribution::Attribution;
use crate::node::listen;
use crate::node::metrics::{self, SamplingState};
use crate::node::otlp::OtlpEndpoint;
use crate::runtime::helper_watch::HelperSeen;
use crate::runtime::Passthrough;
use crate::smi::list::ListedGpu;
use crate::smi::samples::GpuSample;
use crate::smi::snapshot::QueryRecord;
use crate::source::{Changes, DeviceSource, Report};
use crate::sys::host::Host;
use bcd_protocol::{GpuUuid, PciAddress};

mod collection;
mod holds;
mod problems;

/// GPUs claimed by [`Node::claim`] for a step; free again when this is dropped (also when the
/// step failed, or its request was dropped halfway).
#[derive(Debug)]
pub(crate) struct Claim {
    claims: ClaimSet,
    gpus: Vec<DeviceId>,
    devices_changed: Arc<watch::Sender<u64>>,
}

impl Claim {
    /// Leaves `gpu` claimed after this guard drops: a GPU a failed MIG apply withdraws until
    /// an apply succeeds ([`Node::unclaim`] ends it).
    pub(crate) fn leave(&mut self, gpu: &DeviceId) {
        self.gpus.retain(|g| g != gpu);
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        // Also from a poisoned lock: a claim that stayed would keep its GPUs busy for good.
        let mut claimed = self
            .claims
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for gpu in &self.gpus {
            claimed.remove(gpu);
        }
        drop(claimed);
        touch(&self.devices_changed);
    }
}

/// Why [`Node::apply_hold`] did not apply a hold. `Display` is the operator's sentence.
#[derive(Debug, thiserror::Error)]
pub enum ApplyHoldError {
    /// The store could not be read at start.
    #[error("holds.json could not be read when bcd node started; see bcd status")]
    Unavailable,
    /// The store refused the hold or could not save it (nothing changed).
    #[error(transparent)]
    Hold(#[from] HoldError),
    /// The hold's spec could not be written, so the hold was put back as it was.
    #[error("hold {id} was not applied: {source}")]
    Spec {
        id: HoldId,
        source: cdi::ConvergeError,
    },
}

/// How long [`Node::claim_now`] tries the holds lock (blocking its thread) before it answers
/// that the holds are changing.
pub(crate) const CLAIM_NOW_PATIENCE: Duration = Duration::from_millis(100);

/// The shortest sample interval: `nvidia-smi` costs driver time on every GPU.
pub(crate) const MIN_SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

/// What `bcd node` was told.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The host to manage.
    pub host: Host,
    /// The state folder.
    pub data_dir: PathBuf,
    /// The folder on tmpfs that lasts the boot, for what the state folder cannot take.
    pub runtime_dir: PathBuf,
    /// Where hold specs are written.
    pub cdi_dir: PathBuf,
    /// The root helper's socket.
    pub helper_socket: PathBuf,
    /// The API socket.
    pub api_socket: PathBuf,
    /// The group given the API socket (mode 0660), when it exists.
    pub api_group: Option<String>,
    /// Where to serve Prometheus metrics; off when `None`.
    pub metrics_listen: Option<SocketAddr>,
    /// How often to sample the GPUs (at least [`MIN_SAMPLE_INTERVAL`]).
    pub sample_interval: Duration,
    /// Where to send the samples over OTLP/HTTP (every sample interval); off when `None`.
    pub otlp_endpoint: Option<OtlpEndpoint>,
    /// How many slots (`GPU-<uuid>::<n>`) each GPU offers; 0: none.
    pub gpu_slots: u32,
    /// The node's overrides of the XID catalog.
    pub xid_policy: crate::health::xid::XidPolicy,
    /// Which other exporter's metric names to serve beside bcd's (`--metrics-compat`).
    pub metrics_compat: Option<metrics::MetricsCompat>,
    /// The MIG layout file (`--mig-config`), read at each apply.
    pub mig_config: PathBuf,
    /// The layout applied at start (`--mig-layout`), before any device is offered.
    pub mig_layout: Option<String>,
    /// NVIDIA's CDI spec the helper regenerates when the driver or the GPUs change
    /// (`--nvidia-cdi-spec`); off when `None`.
    pub nvidia_cdi_spec: Option<PathBuf>,
    /// The recovery loop (`--remediate`); off when `None`.
    pub remediate: Option<crate::recovery::RemediateConfig>,
}

/// The latest collection.
#[derive(Debug, Clone)]
pub(crate) struct Latest {
    /// The inventory.
    pub inventory: Inventory,
    /// When it was collected.
    pub at: Instant,
    /// How each `nvidia-smi` query went.
    pub queries: Vec<QueryRecord>,
    /// `nvidia-smi -L`, for MIG device numbers in index-named CDI specs.
    pub listed: Vec<ListedGpu>,
    /// Why `nvidia-smi` did not answer, when it did not.
    pub snapshot_error: Option<String>,
    /// The driver's own health readings per GPU UUID; `None` when `-q -x` gave none.
    pub driver: Option<BTreeMap<GpuUuid, crate::smi::xml::DriverHealth>>,
    /// NVSwitches on the bus while `nvidia-fabricmanager` is not active (their count).
    pub fabric_manager_down: Option<usize>,
    /// The PCIe link widths sysfs gave at the collection, per GPU UUID.
    pub links: BTreeMap<GpuUuid, crate::health::pcie::LinkWidth>,
    /// While `nvidia-smi` is silent: the GPUs of the last inventory it answered for that this
    /// one does not list (procfs may have dropped them), still judged (`unknown`).
    pub kept: Vec<Gpu>,
    /// The volatile correctable ECC error rates, carried from collection to collection.
    pub correctable: crate::health::verdict::CorrectableRates,
}

/// Everything the API and the tasks share. Its fields are private: each reader and writer goes
/// through a method, so the lock order above is kept in this file alone.
#[derive(Debug)]
pub struct Node {
    /// The configuration.
    config: NodeConfig,
    /// The latest collection, published to the XID watcher too.
    latest: RwLock<Option<Latest>>,
    inventory_tx: watch::Sender<Inventory>,
    /// The GPUs' conditions, kept per boot.
    health: Health,
    /// The holds; `None` when `holds.json` could not be read (nothing is converged then, so
    /// no spec of a lost hold is removed).
    holds: tokio::sync::Mutex<Option<Holds>>,
    /// The latest samples.
    samples: RwLock<Vec<GpuSample>>,
    /// How sampling goes: loop mode or one-shot (and why), and how often it restarted.
    sampling: Mutex<SamplingState>,
    /// Asks for collections.
    scheduler: SchedulerHandle,
    /// The passthrough memory.
    memory: GpuMemory,
    /// What did not start as it should, in sentences (also logged).
    problems: Mutex<Vec<String>>,
    /// How many collections ran.
    collections: std::sync::atomic::AtomicU64,
    /// GPUs to VMs and back, through the helper.
    passthrough: Passthrough,
    /// The root helper, shared with the passthrough runtimes.
    helper: Arc<dyn Helper>,
    /// Bumped when the holds, the inventory or the claims change: the device consumers
    /// (device plugins, DRA) compute their offer again.
    devices_changed: Arc<watch::Sender<u64>>,
    /// What the device consumers show in status and metrics.
    reports: Mutex<Vec<Arc<dyn Report>>>,
    /// The GPUs the node's steps (a reset, a vfio step) have claimed; the hold store shares it.
    claims: ClaimSet,
    /// Held while a collection runs: the scheduler, diag and reset all collect, and two
    /// collections must never run at once.
    collecting: tokio::sync::Mutex<()>,
    /// The API socket's accept loop.
    api_listener: Arc<listen::ListenerStats>,
    /// The metrics listener's accept loop.
    metrics_listener: Arc<listen::ListenerStats>,
    /// The XID watcher's counters and its failure, when the kernel log cannot be read.
    watcher: Arc<WatcherStats>,
    /// The vendor CDI specs that could not be read at the last convergence.
    vendor_problems: Mutex<Vec<String>>,
    /// The operator holds that give a container no GPU, as the last convergence found them.
    grantless: Mutex<Vec<String>>,
    /// The latest collection's GPUs left out of the inventory (replaced by each collection).
    left_out: Mutex<Vec<String>>,
    /// GPUs given to libvirt domains through this node, by PCI address: domain name.
    vms: Mutex<BTreeMap<PciAddress, String>>,
    /// Held while `vm-gpus.json` is written (taken before `vms`, so writes keep the order of
    /// the changes while `vms` is held for a copy only); it guards this boot's id.
    vms_file: Mutex<String>,
    /// The Kubernetes allocations, as the PodResources reader last handed them.
    pods: Mutex<Vec<PodAllocation>>,
    /// The host's name, for dcgm-exporter's `hostname` label.
    host_name: Option<String>,
    /// The MIG layout applied last, and the lock of the one apply at a time.
    layouts: crate::mig::Layouts,
    /// NVIDIA's CDI spec: its stamp and the last regeneration's outcome.
    nvidia_cdi: crate::cdi::nvidia::Refresher,
    /// The recovery loop's view (empty without `--remediate`).
    recovery: crate::recovery::Recovery,
}

impl Node {
    /// A node's state before any task runs: no collection yet, no samples; the VM labels are
    /// read from `vm-gpus.json` of boot `boot_id` (a failure to read it is its one problem).
    /// Returns it with the receiver of each collection's inventory (for the XID watcher) and
    /// the collection scheduler (for its task). Built by [`Node::open`] alone.
    pub(super) fn assemble(
        config: NodeConfig,
        health: Health,
        holds: Option<Holds>,
        helper: Arc<dyn Helper>,
        boot_id: &str,
    ) -> (Self, watch::Receiver<Inventory>, Scheduler) {
        let (scheduler_handle, scheduler) = Scheduler::new();
        let (inventory, inventory_rx) = watch::channel(Inventory::new(GpuSection::default()));
        let node = Self::with_parts(
            config,
            health,
            holds,
            (inventory, scheduler_handle),
            helper,
            boot_id,
        );
        (node, inventory_rx, scheduler)
    }

    fn with_parts(
        config: NodeConfig,
        health: Health,
        holds: Option<Holds>,
        (inventory, scheduler): (watch::Sender<Inventory>, SchedulerHandle),
        helper: Arc<dyn Helper>,
        boot_id: &str,
    ) -> Self {
        let watcher = Arc::new(WatcherStats::default());
        let host_name = crate::node::otlp::Resource::of_host(&config.host).host_name;
        let (vms, vms_problem) = match crate::node::vms::load(&config.data_dir, boot_id) {
            Ok(vms) => (vms, None),
            Err(e) => {
                let sentence = format!("the GPUs given to VMs (their metrics' vm label): {e}");
                tracing::error!("{sentence}");
                (BTreeMap::new(), Some(sentence))
            }
        };
        let claims = ClaimSet::default();
        Self {
            memory: GpuMemory::new(&config.data_dir),
            passthrough: Passthrough::new(config.host.clone(), &config.data_dir, helper.clone())
                .with_scheduler(scheduler.clone()),
            helper,
            config,
            devices_changed: Arc::new(watch::channel(0).0),
            reports: Mutex::new(Vec::new()),
            claims: claims.clone(),
            latest: RwLock::new(None),
            inventory_tx: inventory,
            health,
            holds: tokio::sync::Mutex::new(holds.map(|h| h.with_claims(claims.clone()))),
            samples: RwLock::new(Vec::new()),
            sampling: Mutex::new(SamplingState::default()),
            scheduler,
            problems: Mutex::new(vms_problem.into_iter().collect()),
            collections: std::sync::atomic::AtomicU64::new(0),
            collecting: tokio::sync::Mutex::new(()),
            api_listener: Arc::default(),
            metrics_listener: Arc::default(),
            watcher,
            vendor_problems: Mutex::new(Vec::new()),
            grantless: Mutex::new(Vec::new()),
            left_out: Mutex::new(Vec::new()),
            vms: Mutex::new(vms),
            vms_file: Mutex::new(boot_id.to_owned()),
            pods: Mutex::new(Vec::new()),
            host_name,
            layouts: crate::mig::Layouts::default(),
            nvidia_cdi: crate::cdi::nvidia::Refresher::default(),
            recovery: crate::recovery::Recovery::default(),
        }
    }

    /// The recovery loop's view.
    pub(crate) fn recovery(&self) -> &crate::recovery::Recovery {
        &self.recovery
    }

    /// This boot's id, as read at start (`unknown` when unreadable).
    pub(crate) fn boot_id(&self) -> String {
        self.vms_file
            .lock()
            .map(|b| b.clone())
            .unwrap_or_else(|_| "unknown".to_owned())
    }

    /// Each collection's inventory, from now on.
    pub(crate) fn inventory_changes(&self) -> watch::Receiver<Inventory> {
        self.inventory_tx.subscribe()
    }

    /// The MIG layout state.
    pub(crate) fn layouts(&self) -> &crate::mig::Layouts {
        &self.layouts
    }

    /// NVIDIA's CDI spec's refresher.
    pub(crate) fn nvidia_cdi(&self) -> &crate::cdi::nvidia::Refresher {
        &self.nvidia_cdi
    }

    /// Reads the MIG layout record at start: a failed apply's GPUs stay withdrawn, and an
    /// apply a stop cut off is failed (its GPUs withdrawn) rather than trusted.
    pub(crate) fn restore_layout(&mut self) {
        let record = match crate::mig::load_record(&self.config.data_dir) {
            Ok(record) => record,
            Err(e) => {
                self.problem(format!("the MIG layout record: {e}"));
                None
            }
        };
        let record = record.map(|mut r| {
            if r.state == crate::mig::LayoutState::Pending {
                r.state = crate::mig::LayoutState::Failed;
                r.failed_step = Some("the apply, which bcd node's stop cut off".to_owned());
                r.message = Some("bcd node stopped while the layout was being applied".to_owned());
                for g in &r.gpus {
                    if g.result != "unchanged" && !r.withdrawn.contains(&g.uuid) {
                        r.withdrawn.push(g.uuid.clone());
                    }
                }
                if let Err(e) = crate::mig::save_record(&self.config.data_dir, &r) {
                    self.problem(format!("the MIG layout record cannot be written: {e}"));
                }
            }
            r
        });
        if let Some(r) = &record {
            let mut claimed = self.claims_now();
            for uuid in &r.withdrawn {
                claimed.insert(DeviceId::from(uuid), ClaimKind::MigLayout);
            }
        }
        self.layouts = crate::mig::Layouts::with(record);
    }

    /// The claims map, locked (also from a poisoned lock: a claim that stayed would keep its
    /// GPUs busy for good).
    fn claims_now(&self) -> std::sync::MutexGuard<'_, BTreeMap<DeviceId, ClaimKind>> {
        self.claims
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ends the claims of `kind` on `gpus` that outlived their guard (see [`Claim::leave`]).
    pub(crate) fn unclaim(&self, gpus: &[DeviceId], kind: ClaimKind) {
        let mut claimed = self.claims_now();
        let mut changed = false;
        for gpu in gpus {
            if claimed.get(gpu) == Some(&kind) {
                claimed.remove(gpu);
                changed = true;
            }
        }
        drop(claimed);
        if changed {
            self.touch_devices();
        }
    }

    /// [`Node::claim`], taking over the GPUs a claim of the same `kind` left withdrawn (a
    /// failed MIG apply's): the caller runs one step of that kind at a time.
    ///
    /// # Errors
    /// As [`Node::claim`].
    pub(crate) async fn claim_over(
        &self,
        gpus: &[DeviceId],
        kind: ClaimKind,
    ) -> Result<Claim, (DeviceId, Busy)> {
        let topology = self.topology().await;
        let holds = self.holds.lock().await;
        let taken: Vec<DeviceId> = {
            let mut claimed = self.claims_now();
            let taken: Vec<DeviceId> = gpus
                .iter()
                .filter(|gpu| claimed.get(*gpu) == Some(&kind))
                .cloned()
                .collect();
            for gpu in &taken {
                claimed.remove(gpu);
            }
            taken
        };
        self.claim_locked(holds.as_ref(), &topology, gpus, kind, false)
            .inspect_err(|_| {
                // Refused: what was withdrawn stays withdrawn.
                let mut claimed = self.claims_now();
                for gpu in &taken {
                    claimed.insert(gpu.clone(), kind);
                }
            })
    }

    /// The XID watcher's counters, for the watcher to keep.
    pub(crate) fn watcher_stats(&self) -> Arc<WatcherStats> {
        Arc::clone(&self.watcher)
    }

    /// The root helper.
    pub(crate) fn helper(&self) -> &dyn Helper {
        self.helper.as_ref()
    }

    /// What `bcd node` was told.
    pub(crate) fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The GPUs' conditions, kept per boot.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Adds what a device consumer (the device plugins, DRA) shows in status and metrics.
    pub(crate) fn add_report(&self, report: Arc<dyn Report>) {
        if let Ok(mut r) = self.reports.lock() {
            r.push(report);
        }
    }

    /// The device consumers' reports.
    fn reports(&self) -> Vec<Arc<dyn Report>> {
        self.reports.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Says that the holds, the inventory or the claims changed.
    pub(crate) fn touch_devices(&self) {
        touch(&self.devices_changed);
    }

    /// GPUs to VMs and back, through the helper.
    pub(crate) fn passthrough(&self) -> &Passthrough {
        &self.passthrough
    }

    /// Asks the scheduler for a collection.
    pub(crate) fn request_collection(&self, trigger: crate::inventory::scheduler::Trigger) {
        self.scheduler.request(trigger);
    }

    /// How many collections ran since the node started.
    pub(crate) fn collections(&self) -> u64 {
        self.collections.load(std::sync::atomic::Ordering::Acquire)
    }

    /// How sampling goes now.
    pub(crate) fn sampling(&self) -> SamplingState {
        self.sampling.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Says how sampling goes now (the sampler's task reports through this).
    pub(crate) fn set_sampling(&self, state: SamplingState) {
        if let Ok(mut s) = self.sampling.lock() {
            *s = state;
        }
    }

    /// The latest samples.
    pub(crate) async fn samples_now(&self) -> Vec<GpuSample> {
        self.samples.read().await.clone()
    }

    /// Replaces the latest samples.
    pub(crate) async fn set_samples(&self, samples: Vec<GpuSample>) {
        *self.samples.write().await = samples;
    }

    /// Runs `change` on the hold store under its lock; `None` when `holds.json` could not be
    /// read at start (nothing may change holds then). `change` must not wait: the lock is
    /// held throughout.
    pub(crate) async fn with_holds<T>(&self, change: impl FnOnce(&mut Holds) -> T) -> Option<T> {
        self.holds.lock().await.as_mut().map(change)
    }

    /// The API socket's accept loop's counters, for that loop to keep.
    pub(crate) fn api_listener_stats(&self) -> Arc<listen::ListenerStats> {
        Arc::clone(&self.api_listener)
    }

    /// The metrics listener's accept loop's counters, for that loop to keep.
    pub(crate) fn metrics_listener_stats(&self) -> Arc<listen::ListenerStats> {
        Arc::clone(&self.metrics_listener)
    }

    /// Whether the state locks the API and the tasks take can all be taken within `bound`:
    /// what the watchdog vouches for. The collection lock is not among them (a collection
    /// may rightly take a minute on a wedged GPU).
    pub(crate) async fn responsive(&self, bound: Duration) -> bool {
        tokio::time::timeout(bound, async {
            drop(self.latest.read().await);
            drop(self.samples.read().await);
            drop(self.holds.lock().await);
            let _ = self.health.conditions();
            let _ = self.sampling.lock().map(|s| s.loop_mode);
            let _ = self.problems.lock().map(|p| p.len());
            let _ = self.vms.lock().map(|v| v.len());
        })
        .await
        .is_ok()
    }

    /// Per GPU UUID, the verdict on the latest inventory, the driver's readings and this
    /// boot's conditions; a GPU `nvidia-smi` is silent about is `unknown`.
    pub(crate) async fn verdicts(&self) -> BTreeMap<GpuUuid, Verdict> {
        let conditions = self.health.conditions();
        let history = self.health.history();
        let samples = self.samples.read().await.clone();
        let latest = self.latest.read().await;
        let Some(l) = latest.as_ref() else {
            return BTreeMap::new();
        };
        let evidence = self.evidence(l, &conditions, &history, &samples);
        l.inventory
            .gpu
            .gpus
            .iter()
            .chain(&l.kept)
            .map(|g| (g.uuid.clone(), judge(g, &evidence)))
            .collect()
    }

    fn evidence<'a>(
        &'a self,
        l: &'a Latest,
        conditions: &'a [Condition],
        history: &'a [crate::health::faults::PastBoot],
        samples: &'a [GpuSample],
    ) -> Evidence<'a> {
        Evidence::new(conditions)
            .with_board(&l.inventory.gpu.gpus)
            .with_history(history)
            .with_policy(&self.config.xid_policy)
            .with_driver(l.driver.as_ref(), l.snapshot_error.as_deref())
            .with_fabric_manager_down(l.fabric_manager_down)
            .with_samples(samples)
            .with_correctable(&l.correctable)
            .with_links(&l.links)
    }

    /// `/v1/status`'s lines: every GPU of the latest inventory with its sample and verdict.
    pub async fn gpu_statuses(&self) -> Vec<crate::health::status::GpuStatus> {
        let samples = self.samples.read().await.clone();
        let conditions = self.health.conditions();
        let history = self.health.history();
        let latest = self.latest.read().await;
        match latest.as_ref() {
            Some(l) => {
                let evidence = self.evidence(l, &conditions, &history, &samples);
                let mut listed = l.inventory.clone();
                listed.gpu.gpus.extend(l.kept.iter().cloned());
                crate::health::status::gpu_statuses(&samples, Some(&listed), &evidence)
            }
            None => crate::health::status::gpu_statuses(&samples, None, &Evidence::new(&[])),
        }
    }

    /// Per GPU UUID, the scheduling answer (healthy or degraded).
    pub(crate) async fn healthy_map(&self) -> BTreeMap<GpuUuid, bool> {
        self.verdicts()
            .await
            .into_iter()
            .map(|(uuid, v)| (uuid, v.healthy()))
            .collect()
    }

    /// Who has each device now: the holds, the GPUs given to domains through this node, and
    /// the Kubernetes allocations last handed to [`Node::set_pod_allocations`].
    pub(crate) async fn attribution(&self) -> Attribution {
        let topology = self.topology().await;
        let mut attribution = Attribution::new();
        if let Some(holds) = self.holds.lock().await.as_ref() {
            attribution.add_holds(holds.list(), &topology);
        }
        for (address, domain) in self.vms.lock().map(|v| v.clone()).unwrap_or_default() {
            if let Some(gpu) = topology.gpu_at(&address) {
                attribution.add_vm(&gpu.uuid, &domain);
            }
        }
        for allocation in self.pods.lock().map(|p| p.clone()).unwrap_or_default() {
            attribution.add_pod(&allocation, &topology);
        }
        attribution
    }

    /// The Kubernetes hook: the device plugins' PodResources reader hands every allocation
    /// it read (the whole list each time, so a pod that is gone loses its labels at the
    /// next read). The metrics and the OTLP export label each device with its pod.
    pub(crate) fn set_pod_allocations(&self, allocations: Vec<PodAllocation>) {
        if let Ok(mut pods) = self.pods.lock() {
            *pods = allocations;
        }
    }

    /// Claims `gpus` for a step of `kind` (a reset, a vfio step) when none of them is busy, as
    /// one decision under the holds lock: until the returned [`Claim`] is dropped, no hold or
    /// allocation may take them, no other step may claim them, and the device plugins stream
    /// them `Unhealthy`. The lock is not held while the step runs.
    ///
    /// # Errors
    /// The first GPU that is busy, and why (another claim, a hold, a pending release,
    /// passthrough).
    pub(crate) async fn claim(
        &self,
        gpus: &[DeviceId],
        kind: ClaimKind,
    ) -> Result<Claim, (DeviceId, Busy)> {
        let topology = self.topology().await;
        let holds = self.holds.lock().await;
        self.claim_locked(holds.as_ref(), &topology, gpus, kind, false)
    }

    /// [`Node::claim`] of one GPU from code that cannot await (the passthrough runtime's
    /// lookup, called as it decides): the holds lock is tried for at most
    /// [`CLAIM_NOW_PATIENCE`], and a store still being changed then answers
    /// [`Busy::Changing`] (try again). A GPU passed through to a VM is
    /// claimed too (a VM start needs it there); whether it may move is the runtime's to say.
    ///
    /// # Errors
    /// As [`Node::claim`].
    pub(crate) fn claim_now(
        &self,
        gpu: &DeviceId,
        kind: ClaimKind,
        topology: &Topology,
    ) -> Result<Claim, Busy> {
        // The lock is held for milliseconds (a hold change, the converge after a collection):
        // tried a few times over at most CLAIM_NOW_PATIENCE before the answer is "try again".
        let started = Instant::now();
        let holds = loop {
            match self.holds.try_lock() {
                Ok(holds) => break holds,
                Err(_) if started.elapsed() < CLAIM_NOW_PATIENCE => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(_) => return Err(Busy::Changing),
            }
        };
        self.claim_locked(
            holds.as_ref(),
            topology,
            std::slice::from_ref(gpu),
            kind,
            true,
        )
        .map_err(|(_, busy)| busy)
    }

    /// The claim, decided while the caller holds the holds lock (`holds` is its store).
    fn claim_locked(
        &self,
        holds: Option<&Holds>,
        topology: &Topology,
        gpus: &[DeviceId],
        kind: ClaimKind,
        passed_through_ok: bool,
    ) -> Result<Claim, (DeviceId, Busy)> {
        let list: Vec<&Hold> = holds.map(|h| h.list().collect()).unwrap_or_default();
        {
            let mut claimed = self.claims_now();
            for gpu in gpus {
                if let Some(theirs) = claimed.get(gpu) {
                    return Err((gpu.clone(), Busy::Claimed(*theirs)));
                }
                match topology.busy(gpu, list.iter().copied()) {
                    None => {}
                    Some(Busy::PassedThrough) if passed_through_ok => {}
                    Some(busy) => return Err((gpu.clone(), busy)),
                }
            }
            for gpu in gpus {
                claimed.insert(gpu.clone(), kind);
            }
        }
        self.touch_devices();
        Ok(Claim {
            claims: self.claims.clone(),
            gpus: gpus.to_vec(),
            devices_changed: self.devices_changed.clone(),
        })
    }

    /// The node with `helper` in place of the socket's (tests hand in fakes).
    #[cfg(test)]
    pub(crate) fn with_helper(mut self, helper: Arc<dyn Helper>) -> Self {
        self.passthrough = Passthrough::new(
            self.config.host.clone(),
            &self.config.data_dir,
            helper.clone(),
        )
        .with_scheduler(self.scheduler.clone());
        self.helper = helper;
        self
    }

    /// The GPUs claimed now.
    pub(crate) fn claimed(&self) -> Vec<DeviceId> {
        self.claims
            .lock()
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The Kubernetes allocations last handed to [`Node::set_pod_allocations`].
    pub(crate) fn pods_now(&self) -> Vec<PodAllocation> {
        self.pods.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// Records what a passthrough step did to the VMs' GPUs: a domain started has its GPUs
    /// (the helper's reading of its XML); a domain destroyed, and a GPU released from
    /// vfio-pci, have none. `domain` is the domain of the step (for a restore, the one its
    /// save image names, from the helper's answer; `None` for vfio steps). A change is kept
    /// in `<data-dir>/vm-gpus.json` for the next start.
    pub(crate) fn record_passthrough(&self, report: &crate::runtime::Report, domain: Option<&str>) {
        use crate::runtime::Action;
        let Ok(boot_id) = self.vms_file.lock() else {
            return;
        };
        let Ok(mut vms) = self.vms.lock() else { return };
        let before = vms.clone();
        match (report.action, domain) {
            (Action::VmStart | Action::VmRestore, Some(domain)) => {
                for f in report.functions.iter().filter(|f| f.gpu) {
                    vms.insert(f.address, domain.to_owned());
                }
            }
            (Action::VmDestroy, Some(domain)) => vms.retain(|_, d| d != domain),
            (Action::VfioRelease, _) => {
                for f in &report.functions {
                    vms.remove(&f.address);
                }
            }
            _ => {}
        }
        let now = vms.clone();
        drop(vms);
        if now != before {
            if let Err(e) = crate::node::vms::save(&self.config.data_dir, &boot_id, &now) {
                tracing::error!(
                    "the GPUs given to VMs: {e}; their metrics' vm label is lost at the next start"
                );
            }
        }
    }

    /// The Prometheus text for a scrape.
    pub(crate) async fn metrics_text(&self) -> String {
        let samples = self.samples.read().await.clone();
        let verdicts = self.verdicts().await;
        let healthy = verdicts
            .iter()
            .map(|(u, v)| (u.clone(), v.healthy()))
            .collect();
        let states = verdicts
            .iter()
            .map(|(u, v)| (u.clone(), v.health))
            .collect();
        let conditions: Vec<Condition> = self.health.conditions();
        // Every XID condition of a GPU, with its number.
        let gpu_xids = || {
            conditions
                .iter()
                .filter_map(|c| Some((c, c.device_id.gpu()?.clone(), c.kind.xid()?)))
        };
        let xid_totals = gpu_xids()
            .map(|(c, uuid, n)| {
                let class = self.config.xid_policy.judge(n).class.name();
                (uuid, n, class, c.count.max(1))
            })
            .collect();
        let mut xids: BTreeMap<GpuUuid, Vec<u32>> = BTreeMap::new();
        let mut last_xid: BTreeMap<GpuUuid, (u64, u32)> = BTreeMap::new();
        for (c, uuid, n) in gpu_xids() {
            xids.entry(uuid.clone()).or_default().push(n);
            let seen = last_xid.entry(uuid).or_insert((c.last_seen, n));
            if c.last_seen >= seen.0 {
                *seen = (c.last_seen, n);
            }
        }
        let attribution = self.attribution().await;
        let latest = self.latest.read().await;
        let sampling = self.sampling.lock().map(|s| s.clone()).unwrap_or_default();
        let view = metrics::MetricsView {
            sampling: Some(&sampling),
            inventory: latest.as_ref().map(|l| &l.inventory),
            inventory_age: latest.as_ref().map(|l| l.at.elapsed()),
            samples: &samples,
            healthy,
            states,
            xid_totals,
            xids,
            queries: latest.as_ref().map_or(&[], |l| l.queries.as_slice()),
            last_xid: last_xid.into_iter().map(|(u, (_, n))| (u, n)).collect(),
            attribution,
            compat: self.config.metrics_compat,
            host_name: self.host_name.as_deref(),
        };
        let mut text = metrics::render(&view);
        text.push_str(&self.recovery.metrics_text());
        for report in self.reports() {
            text.push_str(&report.metrics_text());
        }
        text
    }
}

/// Bumps a device signal.
fn touch(signal: &watch::Sender<u64>) {
    signal.send_modify(|n| *n = n.wrapping_add(1));
}

/// The device consumers (device plugins, DRA) reach the node through this alone.
impl DeviceSource for Node {
    async fn inventory(&self) -> Inventory {
        Node::inventory(self).await
    }

    async fn holds_now(&self) -> Vec<Hold> {
        Node::holds_now(self).await
    }

    async fn topology(&self) -> crate::device::policy::Topology {
        Node::topology(self).await
    }

    async fn verdicts(&self) -> BTreeMap<GpuUuid, Verdict> {
        Node::verdicts(self).await
    }

    async fn samples_now(&self) -> Vec<GpuSample> {
        Node::samples_now(self).await
    }

    fn claimed(&self) -> Vec<DeviceId> {
        Node::claimed(self)
    }

    fn gpu_slots(&self) -> u32 {
        self.config.gpu_slots
    }

    fn reboot_required(&self) -> Vec<GpuUuid> {
        self.recovery
            .view()
            .into_iter()
            .filter(|(_, v)| v.reboot_required)
            .map(|(u, _)| u)
            .collect()
    }

    fn mig_layout(&self) -> Option<(String, &'static str)> {
        self.layouts
            .record()
            .map(|r| (r.layout.clone(), r.state.word()))
    }

    async fn cdi_context(&self) -> (cdi::vendor::VendorSpecs, DeviceCatalog) {
        let vendor =
            cdi::read_vendor_specs(&cdi::vendor_dirs(&self.config.cdi_dir, &self.config.host));
        (vendor, self.device_catalog().await)
    }

    async fn with_holds<T: Send>(&self, change: impl FnOnce(&mut Holds) -> T + Send) -> Option<T> {
        Node::with_holds(self, change).await
    }

    async fn change_holds_durably<T: Send, E: Send>(
        &self,
        change: impl FnOnce(&mut Holds, &mut Vec<cdi::Before>) -> Result<T, E> + Send,
        written: impl FnOnce(&T) -> Vec<HoldId> + Send,
        missing: impl FnOnce(PathBuf) -> E + Send,
        unavailable: E,
    ) -> Result<T, E> {
        Node::change_holds_durably(self, change, written, missing, unavailable).await
    }

    async fn converge_holds(&self) {
        Node::converge_holds(self).await;
    }

    fn set_pod_allocations(&self, allocations: Vec<PodAllocation>) {
        Node::set_pod_allocations(self, allocations);
    }

    fn problem(&self, sentence: String) {
        Node::problem(self, sentence);
    }

    fn changes(&self) -> Changes {
        Changes::new(self.health.subscribe(), self.devices_changed.subscribe())
    }

    fn touch(&self) {
        self.touch_devices();
    }
}

/// A node on the demo host (`testdata/hosts/hgx-h100`) with its state in `dir` and no
/// helper, built without running anything: for the handlers' and the state's tests.
#[cfg(test)]
pub(crate) fn test_node(dir: &std::path::Path) -> Node {
    let host = Host::fake(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts/hgx-h100"),
    );
    test_node_on(dir, host)
}

/// [`test_node`] on another host.
#[cfg(test)]
pub(crate) fn test_node_on(dir: &std::path::Path, host: Host) -> Node {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(dir.join("cdi")).unwrap();
    let config = NodeConfig {
        host,
        data_dir: data.clone(),
        runtime_dir: dir.join("run"),
        cdi_dir: dir.join("cdi"),
        helper_socket: dir.join("no-helper.sock"),
        api_socket: dir.join("bcd.sock"),
        api_group: None,
        metrics_listen: None,
        sample_interval: MIN_SAMPLE_INTERVAL,
        otlp_endpoint: None,
        gpu_slots: 0,
        xid_policy: crate::health::xid::XidPolicy::default(),
        metrics_compat: None,
        mig_config: dir.join("mig-config.yaml"),
        mig_layout: None,
        nvidia_cdi_spec: None,
        remediate: None,
    };
    let helper = Arc::new(crate::helper_client::SocketHelper::new(
        dir.join("no-helper.sock"),
    ));
    Node::open(config, helper).node
}

/// Holds `gpu` (a UUID of the inventory) for the prepared DRA claim `ml/<name>` (uid
/// `3f0c2f7e`), as `NodePrepareResources` would; returns the hold's id. The tests' shorthand.
#[cfg(test)]
pub(crate) async fn hold_for_test_claim(node: &Node, gpu: &str, name: &str) -> crate::cdi::HoldId {
    let topology = node.topology().await;
    let placed = vec![topology.place(&gpu.parse().unwrap()).unwrap()];
    let id: crate::cdi::HoldId = "dra-3f0c2f7e".parse().unwrap();
    let claim = crate::device::DraClaim {
        uid: "3f0c2f7e".into(),
        namespace: "ml".into(),
        name: name.into(),
        devices: Vec::new(),
        spec: None,
    };
    node.with_holds(|h| {
        h.apply_claim(id.clone(), placed, claim, &topology)
            .map(|_| ())
    })
    .await
    .unwrap()
    .unwrap();
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::verdict::HealthState;

    // A problem that recurred at every pass (a full disk under the CDI folder) logged one
    // ERROR line each time, a line a second; it is logged once, and listed once.
    #[test]
    fn a_recurring_problem_is_logged_once() {
        let dir = tempfile::tempdir().unwrap();
        let node = test_node(dir.path());
        let lines = crate::test_log::logged(|| {
            for _ in 0..100 {
                node.problem("CDI specs: /etc/cdi: No space left on device".into());
            }
        });
        let errors = lines.iter().filter(|l| l.contains("ERROR")).count();
        assert_eq!(errors, 1, "{lines:?}");
        assert_eq!(
            node.problems_now()
                .iter()
                .filter(|p| p.starts_with("CDI specs"))
                .count(),
            1
        );
    }

    // The watchdog was pinged from a timer of its own, whatever the state: a node whose
    // state lock is stuck is no longer vouched for.
    #[tokio::test]
    async fn a_stuck_state_lock_is_not_responsive() {
        let dir = tempfile::tempdir().unwrap();
        let node = test_node(dir.path());
        assert!(node.responsive(Duration::from_millis(200)).await);
        let stuck = node.holds.lock().await;
        assert!(!node.responsive(Duration::from_millis(200)).await);
        drop(stuck);
        let writer = node.latest.write().await;
        assert!(!node.responsive(Duration::from_millis(200)).await);
        drop(writer);
        assert!(node.responsive(Duration::from_millis(200)).await);
    }

    // What broke: a GPU passed through to a VM was `unknown` in /v1/status but
    // `bcd_gpu_healthy 1` and `state="healthy"` in /metrics, with no sample taken too.
    #[tokio::test]
    async fn a_passed_through_gpu_is_unknown_in_the_metrics_as_in_status() {
        const VM_GPU: &str = "GPU-0badc0de-0000-4000-8000-000000000061";
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts/passthrough"),
        );
        // The passthrough memory, as a collection that listed GPU 1 before the VM took it.
        let plain = crate::inventory::collect::collect(&host, None)
            .await
            .inventory;
        let mut remembered = plain.gpu.gpus[0].clone();
        remembered.uuid = VM_GPU.parse().unwrap();
        remembered.bus_id = Some("00000000:61:00.0".parse().unwrap());
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        crate::inventory::memory::GpuMemory::new(&data)
            .remember(&[plain.gpu.gpus[0].clone(), remembered])
            .unwrap();
        let node = test_node_on(dir.path(), host);
        node.collect_now().await;
        let line = node
            .gpu_statuses()
            .await
            .into_iter()
            .find(|g| g.uuid == VM_GPU)
            .unwrap();
        assert!(line.passed_through);
        assert_eq!((line.health, line.healthy), (HealthState::Unknown, false));
        let text = node.metrics_text().await;
        assert!(
            text.contains(&format!("bcd_gpu_healthy{{uuid=\"{VM_GPU}\"}} 0\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "bcd_gpu_health_state{{uuid=\"{VM_GPU}\",state=\"unknown\"}} 1\n"
            )),
            "{text}"
        );
        assert_eq!(
            node.verdicts().await[&VM_GPU.parse().unwrap()].health,
            HealthState::Unknown
        );
    }

    const GPU0: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";

    /// One collection of `node`'s host with `nvidia-smi` bounded to half a second (the
    /// node's own bound is a minute), published as the node's own collections are.
    async fn collect_quickly(node: &Node) -> Collection {
        let runner = crate::smi::runner::Runner::new(node.config.host.nvidia_smi())
            .with_timeout(Duration::from_millis(500));
        crate::inventory::collect::collect_with(&node.config.host, None, &runner).await
    }

    // What broke: the node never compared correctable ECC counters between collections, so
    // a GPU whose memory corrected hundreds of errors between two of them read healthy.
    #[tokio::test]
    async fn correctable_errors_growing_fast_between_collections_make_the_gpu_degraded() {
        let dir = tempfile::tempdir().unwrap();
        let copy = crate::health::status::tests::copy_host(dir.path(), "hgx-h100");
        let node = test_node_on(dir.path(), Host::fake(&copy));
        node.publish(collect_quickly(&node).await).await;
        assert_eq!(
            node.verdicts().await[&GPU0.parse::<GpuUuid>().unwrap()].health,
            HealthState::Healthy
        );
        // GPU 0 (the first <volatile> block) corrects 500 DRAM errors before the next one.
        let qx = copy.join("answers/q-x.out");
        let text = std::fs::read_to_string(&qx).unwrap();
        let at = text.find("<volatile>").unwrap();
        let (head, tail) = text.split_at(at);
        let tail = tail.replacen(
            "<dram_correctable>0</dram_correctable>",
            "<dram_correctable>500</dram_correctable>",
            1,
        );
        std::fs::write(&qx, format!("{head}{tail}")).unwrap();
        node.publish(collect_quickly(&node).await).await;
        let v = &node.verdicts().await[&GPU0.parse::<GpuUuid>().unwrap()];
        assert_eq!(
            (v.health, v.healthy()),
            (HealthState::Degraded, true),
            "{v:?}"
        );
        assert_eq!(v.reasons[0].kind, "EccCorrectableRate");
        assert_eq!(
            v.reasons[0].action,
            crate::health::verdict::CORRECTABLE_ACTION
        );
        let gpu1 = &node.verdicts().await[&"GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a"
            .parse::<GpuUuid>()
            .unwrap()];
        assert_eq!(gpu1.health, HealthState::Healthy);
    }

    // What broke: when nvidia-smi -q -x hung, the GPUs it had answered for vanished from
    // /v1/status and the metrics as soon as procfs stopped listing them.
    #[tokio::test]
    async fn a_silent_nvidia_smi_keeps_the_last_inventorys_gpus_as_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let copy = crate::health::status::tests::copy_host(dir.path(), "wedged");
        let answers = copy.join("answers");
        let hung = ["q-x", "samples", "compute-apps"];
        for key in hung {
            std::fs::remove_file(answers.join(format!("{key}.hang"))).unwrap();
            std::fs::copy(
                copy.join(format!("before-the-hang/{key}.out")),
                answers.join(format!("{key}.out")),
            )
            .unwrap();
        }
        let node = test_node_on(dir.path(), Host::fake(&copy));
        let uuid = "GPU-940af793-c02c-d660-3221-9bbb6e5e0bfa";
        let first = node.publish(collect_quickly(&node).await).await;
        assert_eq!(first.gpu.gpus.len(), 1);
        assert_eq!(
            node.verdicts().await[&uuid.parse::<GpuUuid>().unwrap()].health,
            HealthState::Healthy
        );
        // The GPU wedges: nvidia-smi hangs, and the driver drops it from procfs.
        for key in hung {
            std::fs::remove_file(answers.join(format!("{key}.out"))).unwrap();
            std::fs::write(answers.join(format!("{key}.hang")), "").unwrap();
        }
        std::fs::remove_dir_all(copy.join("root/proc/driver/nvidia/gpus/0000:81:00.0")).unwrap();
        let second = collect_quickly(&node).await;
        assert!(second.snapshot_error.is_some());
        assert!(
            second.inventory.gpu.gpus.is_empty(),
            "procfs lists no GPU now"
        );
        node.publish(second).await;
        let statuses = node.gpu_statuses().await;
        assert_eq!(statuses.len(), 1, "{statuses:?}");
        assert_eq!(statuses[0].uuid, uuid);
        assert_eq!(statuses[0].health, HealthState::Unknown);
        assert!(!statuses[0].healthy);
        assert_eq!(statuses[0].reasons[0].kind, "NvidiaSmiSilent");
        assert!(
            statuses[0].reasons[0]
                .message
                .starts_with("nvidia-smi -q -x did not answer: "),
            "{:?}",
            statuses[0].reasons[0]
        );
        let text = node.metrics_text().await;
        assert!(
            text.contains(&format!(
                "bcd_gpu_health_state{{uuid=\"{uuid}\",state=\"unknown\"}} 1"
            )),
            "{text}"
        );
        assert!(
            !text.contains(&format!("bcd_gpu_healthy{{uuid=\"{uuid}\"}} 1")),
            "{text}"
        );
        // A second silent collection keeps it still.
        node.publish(collect_quickly(&node).await).await;
        assert_eq!(
            node.verdicts().await[&uuid.parse::<GpuUuid>().unwrap()].health,
            HealthState::Unknown
        );
    }

    /// The `bcd_gpu_healthy` line of GPU 0 in a scrape.
    async fn healthy_line(node: &Node) -> String {
        let text = node.metrics_text().await;
        text.lines()
            .find(|l| l.starts_with(&format!("bcd_gpu_healthy{{uuid=\"{GPU0}\"")))
            .unwrap_or_else(|| panic!("no bcd_gpu_healthy for GPU 0 in\n{text}"))
            .to_owned()
    }

    // Nothing said who had a GPU: a hold's id shows on its GPU's series while it is held, and
    // is gone once it is released.
    #[tokio::test]
    async fn a_hold_labels_its_gpus_series_until_it_is_released() {
        let dir = tempfile::tempdir().unwrap();
        let node = test_node(dir.path());
        node.collect_now().await;
        assert_eq!(
            healthy_line(&node).await,
            format!("bcd_gpu_healthy{{uuid=\"{GPU0}\"}} 1")
        );
        let apply = crate::node::http::Request {
            method: "POST".into(),
            path: "/v1/holds".into(),
            query: String::new(),
            body: format!("{{\"id\": \"train-7\", \"devices\": [\"{GPU0}\"]}}").into_bytes(),
        };
        let (status, body) = crate::node::api::handle(&node, &apply).await;
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
        assert_eq!(
            healthy_line(&node).await,
            format!("bcd_gpu_healthy{{uuid=\"{GPU0}\",hold=\"train-7\"}} 1")
        );
        let release = crate::node::http::Request {
            method: "DELETE".into(),
            path: "/v1/holds/train-7".into(),
            query: String::new(),
            body: Vec::new(),
        };
        let (status, _) = crate::node::api::handle(&node, &release).await;
        assert_eq!(status, 200);
        assert_eq!(
            healthy_line(&node).await,
            format!("bcd_gpu_healthy{{uuid=\"{GPU0}\"}} 1")
        );
        assert!(!node.metrics_text().await.contains("train-7"));
    }

    // The Kubernetes hook, with a hand-made allocation: the pod's labels come with the list
    // that has it and go with the next list that does not.
    #[tokio::test]
    async fn a_pod_allocation_handed_to_the_hook_labels_its_gpu_until_the_next_list() {
        use crate::device::{PodAllocation, PodRef};
        let dir = tempfile::tempdir().unwrap();
        let node = test_node(dir.path());
        node.collect_now().await;
        node.set_pod_allocations(vec![PodAllocation {
            devices: vec![GPU0.parse().unwrap()],
            pod: PodRef {
                namespace: "ml".into(),
                pod: "trainer-0".into(),
                container: "cuda".into(),
            },
        }]);
        assert_eq!(
            healthy_line(&node).await,
            format!("bcd_gpu_healthy{{uuid=\"{GPU0}\",namespace=\"ml\",pod=\"trainer-0\",container=\"cuda\"}} 1")
        );
        node.set_pod_allocations(Vec::new());
        assert_eq!(
            healthy_line(&node).await,
            format!("bcd_gpu_healthy{{uuid=\"{GPU0}\"}} 1")
        );
    }

    // A GPU given to a domain says so (`vm`) until the domain is destroyed.
    #[tokio::test]
    async fn a_domain_started_labels_its_gpu_until_it_is_destroyed() {
        use crate::runtime::{Action, FunctionChange, Report};
        let dir = tempfile::tempdir().unwrap();
        let node = test_node(dir.path());
        let inventory = node.collect_now().await;
        let address: PciAddress = inventory.gpu.gpus[0].bus_id.unwrap();
        let report = |action| Report {
            action,
            subject: "domain win11".into(),
            functions: vec![FunctionChange {
                address,
                gpu: true,
                driver_before: Some("nvidia".into()),
                driver_after: Some("vfio-pci".into()),
                persistence: bcd_protocol::PersistenceNote::NotTouched,
            }],
            domain: Some("win11".into()),
        };
        node.record_passthrough(&report(Action::VmStart), Some("win11"));
        assert_eq!(
            healthy_line(&node).await,
            format!("bcd_gpu_healthy{{uuid=\"{GPU0}\",vm=\"win11\"}} 1")
        );
        node.record_passthrough(&report(Action::VmDestroy), Some("win11"));
        assert_eq!(
            healthy_line(&node).await,
            format!("bcd_gpu_healthy{{uuid=\"{GPU0}\"}} 1")
        );
        // A restore labels the GPUs with the domain its save image names (the helper's answer).
        node.record_passthrough(&report(Action::VmRestore), Some("win11"));
        assert_eq!(
            healthy_line(&node).await,
            format!("bcd_gpu_healthy{{uuid=\"{GPU0}\",vm=\"win11\"}} 1")
        );
        // What broke: the label lived in memory only, so a restarted node lost it while the
        // domain kept running. The next node on the same data folder still says it.
        drop(node);
        let node = test_node(dir.path());
        node.collect_now().await;
        assert_eq!(
            healthy_line(&node).await,
            format!("bcd_gpu_healthy{{uuid=\"{GPU0}\",vm=\"win11\"}} 1")
        );
    }
}
