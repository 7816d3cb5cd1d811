//! The node service's state and its long-running tasks: the collection scheduler, the XID
//! watcher, the sampler, the API socket and the metrics listener.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{mpsc, watch, RwLock};

use crate::cdi::{self, converge, DeviceCatalog, Holds};
use crate::health::faults::{read_boot_id, FaultStore, Health};
use crate::health::verdict::{judge, Evidence, Verdict};
use crate::health::watcher::XidWatcher;
use crate::health::Condition;
use crate::host::Host;
use crate::inventory::collect::collect;
use crate::inventory::document::{GpuSection, Inventory};
use crate::inventory::memory::GpuMemory;
use crate::inventory::scheduler::{Scheduler, SchedulerHandle, Trigger};
use crate::node::otlp::{self, OtlpEndpoint};
use crate::node::{api, http, metrics, notify};
use crate::policy::Topology;
use crate::runtime::{Passthrough, SocketHelper};
use crate::smi::list::ListedGpu;
use crate::smi::sampler::{Mode, Sampler, Timing};
use crate::smi::samples::GpuSample;
use crate::smi::snapshot::QueryRecord;
use crate::state::remove_crash_temps;

/// The shortest sample interval: `nvidia-smi` costs driver time on every GPU.
pub const MIN_SAMPLE_INTERVAL: Duration = Duration::from_secs(5);
/// How long a shutdown waits for requests in flight.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// What `bcd node` was told.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The host to manage.
    pub host: Host,
    /// The state folder.
    pub data_dir: PathBuf,
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
}

/// The latest collection.
#[derive(Debug, Clone)]
pub struct Latest {
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
    pub driver: Option<BTreeMap<String, crate::smi::xml::DriverHealth>>,
    /// NVSwitches on the bus while `nvidia-fabricmanager` is not active (their count).
    pub fabric_manager_down: Option<usize>,
}

/// How the sampler runs now, for `status` and the metrics.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SamplingState {
    /// `true` while one long-lived `nvidia-smi -lms` child feeds the samples.
    pub loop_mode: bool,
    /// Why samples are one-shot queries instead, when they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub one_shot_because: Option<String>,
    /// Loop-mode sessions started again after a child died or stalled.
    pub restarts: u64,
}

/// Everything the API and the tasks share.
#[derive(Debug)]
pub struct Node {
    /// The configuration.
    pub config: NodeConfig,
    /// The latest collection, published to the XID watcher too.
    pub latest: RwLock<Option<Latest>>,
    inventory_tx: watch::Sender<Inventory>,
    /// The GPUs' conditions, kept per boot.
    pub health: Health,
    /// The holds; `None` when `holds.json` could not be read (nothing is converged then, so
    /// no spec of a lost hold is removed).
    pub holds: tokio::sync::Mutex<Option<Holds>>,
    /// The latest samples.
    pub samples: RwLock<Vec<GpuSample>>,
    /// How sampling goes: loop mode or one-shot (and why), and how often it restarted.
    pub sampling: Mutex<SamplingState>,
    /// Asks for collections.
    pub scheduler: SchedulerHandle,
    /// The passthrough memory.
    pub memory: GpuMemory,
    /// What did not start as it should, in sentences (also logged).
    pub problems: Mutex<Vec<String>>,
    /// How many collections ran.
    pub collections: std::sync::atomic::AtomicU64,
    /// GPUs to VMs and back, through the helper.
    pub passthrough: Passthrough,
    /// Held while a collection runs: the scheduler, diag and reset all collect, and two
    /// collections must never run at once.
    collecting: tokio::sync::Mutex<()>,
}

impl Node {
    /// Records a start-up or runtime problem an operator should see in `status`.
    pub fn problem(&self, sentence: String) {
        tracing::error!("{sentence}");
        if let Ok(mut p) = self.problems.lock() {
            if !p.contains(&sentence) {
                p.push(sentence);
            }
        }
    }

    /// The latest inventory (empty before the first collection).
    pub async fn inventory(&self) -> Inventory {
        self.latest.read().await.as_ref().map_or_else(
            || Inventory::new(GpuSection::default()),
            |l| l.inventory.clone(),
        )
    }

    /// Collects now, publishes the result and converges the hold specs; returns it.
    pub async fn collect_now(&self) -> Inventory {
        let _one = self.collecting.lock().await;
        let collection = collect(&self.config.host, Some(&self.memory)).await;
        let listed = collection
            .snapshot
            .as_ref()
            .map(|s| s.listed.clone())
            .unwrap_or_default();
        let queries = collection.queries.clone();
        let driver = collection
            .snapshot
            .as_ref()
            .map(|s| crate::health::status::driver_readings(&s.xml));
        if let Some(e) = &collection.snapshot_error {
            if !e.is_no_driver() {
                tracing::warn!("nvidia-smi: {e}");
            }
        }
        if let Some(e) = &collection.memory_error {
            self.problem(format!("passthrough memory: {e}"));
        }
        let latest = Latest {
            inventory: collection.inventory.clone(),
            at: Instant::now(),
            queries,
            listed,
            snapshot_error: collection.snapshot_error.as_ref().map(ToString::to_string),
            driver,
            fabric_manager_down: crate::health::verdict::fabric_manager_down(&self.config.host)
                .await,
        };
        *self.latest.write().await = Some(latest);
        self.inventory_tx.send_replace(collection.inventory.clone());
        self.collections
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.converge_holds().await;
        collection.inventory
    }

    /// The policy's view of the GPUs, from the latest inventory.
    pub async fn topology(&self) -> Topology {
        Topology::from_inventory(&self.inventory().await, self.config.gpu_slots)
    }

    /// Writes every hold's spec and removes those of released holds; before the first
    /// collection, writes only the specs that are missing.
    pub async fn converge_holds(&self) {
        let mut holds = self.holds.lock().await;
        let Some(holds) = holds.as_mut() else { return };
        let collected = self.latest.read().await.is_some();
        let catalog = {
            let latest = self.latest.read().await;
            let mut catalog = DeviceCatalog::from_inventory(
                latest
                    .as_ref()
                    .map_or(&Inventory::new(GpuSection::default()), |l| &l.inventory),
            );
            if let Some(l) = latest.as_ref() {
                catalog.add_mig_numbers(&l.listed);
            }
            catalog
        };
        let vendor =
            cdi::read_vendor_specs(&cdi::vendor_dirs(&self.config.cdi_dir, &self.config.host));
        for problem in &vendor.problems {
            tracing::warn!("{problem}");
        }
        let result = if collected {
            converge(holds, &vendor.specs, &catalog, &self.config.cdi_dir)
        } else {
            cdi::write_missing(holds, &vendor.specs, &catalog, &self.config.cdi_dir)
        };
        for e in &result.errors {
            self.problem(format!("CDI specs: {e}"));
        }
    }

    /// Per GPU UUID, the verdict on the latest inventory, the driver's readings and this
    /// boot's conditions; a GPU `nvidia-smi` is silent about is `unknown`.
    pub async fn verdicts(&self) -> BTreeMap<String, Verdict> {
        let conditions = self.health.conditions();
        let history = self.health.history();
        let latest = self.latest.read().await;
        let Some(l) = latest.as_ref() else {
            return BTreeMap::new();
        };
        let evidence = self.evidence(l, &conditions, &history);
        l.inventory
            .gpu
            .gpus
            .iter()
            .map(|g| (g.uuid.clone(), judge(g, &evidence)))
            .collect()
    }

    fn evidence<'a>(
        &'a self,
        l: &'a Latest,
        conditions: &'a [Condition],
        history: &'a [crate::health::faults::PastBoot],
    ) -> Evidence<'a> {
        Evidence {
            conditions,
            history,
            policy: Some(&self.config.xid_policy),
            driver: l.driver.as_ref(),
            silent: l.snapshot_error.as_deref(),
            fabric_manager_down: l.fabric_manager_down,
        }
    }

    /// `/v1/status`'s lines: every GPU of the latest inventory with its sample and verdict.
    pub async fn gpu_statuses(&self) -> Vec<crate::health::status::GpuStatus> {
        let samples = self.samples.read().await.clone();
        let conditions = self.health.conditions();
        let history = self.health.history();
        let latest = self.latest.read().await;
        match latest.as_ref() {
            Some(l) => {
                let evidence = self.evidence(l, &conditions, &history);
                crate::health::status::gpu_statuses(&samples, Some(&l.inventory), &evidence)
            }
            None => crate::health::status::gpu_statuses(&samples, None, &Evidence::default()),
        }
    }

    /// Per GPU UUID, the scheduling answer (healthy or degraded).
    pub async fn healthy_map(&self) -> BTreeMap<String, bool> {
        self.verdicts()
            .await
            .into_iter()
            .map(|(uuid, v)| (uuid, v.healthy()))
            .collect()
    }

    /// The Prometheus text for a scrape.
    pub async fn metrics_text(&self) -> String {
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
        let xid_totals = conditions
            .iter()
            .filter_map(|c| {
                let n = crate::health::xid_number(&c.kind)?;
                let class = self.config.xid_policy.judge(n).class.name();
                Some((c.device_id.clone(), n, class, c.count.max(1)))
            })
            .collect();
        let mut xids: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for c in conditions
            .iter()
            .filter(|c| crate::health::is_xid_kind(&c.kind))
        {
            if let Ok(n) = c
                .kind
                .trim_start_matches(crate::health::XID_KIND_PREFIX)
                .parse()
            {
                xids.entry(c.device_id.clone()).or_default().push(n);
            }
        }
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
        };
        metrics::render(&view)
    }
}

/// Why the service could not start at all.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The API socket could not be created.
    #[error("cannot listen on the API socket {path}: {source}")]
    ApiSocket {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The metrics address could not be bound.
    #[error("cannot serve metrics on {addr}: {source}")]
    Metrics {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Opens the state a node keeps, reporting (not failing on) what is unusable.
fn open_state(config: &NodeConfig, problems: &mut Vec<String>) -> (Health, Option<Holds>) {
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
    };
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
    let opened = Holds::open(&config.data_dir, &config.cdi_dir);
    problems.extend(opened.notes);
    let holds = Some(opened.holds);
    (Health::new(store), holds)
}

/// Whether `name` is one of the state files of the data folder.
fn is_state_file(name: &str) -> bool {
    [
        cdi::holds::HOLDS_FILE,
        crate::health::faults::FAULTS_FILE,
        crate::inventory::memory::FILE_NAME,
        crate::runtime::journal::FILE_NAME,
    ]
    .contains(&name)
}

/// Binds the API socket: a stale socket file is replaced, anything else at the path is not.
fn bind_api(config: &NodeConfig) -> Result<UnixListener, NodeError> {
    let path = &config.api_socket;
    let err = |source| NodeError::ApiSocket {
        path: path.clone(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()) => {
            std::fs::remove_file(path).map_err(err)?;
        }
        Ok(_) => {
            return Err(err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "something other than a socket is there; remove it",
            )))
        }
        Err(_) => {}
    }
    let listener = UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(err)?;
    if let Some(group) = &config.api_group {
        if let Ok(Some(g)) = nix::unistd::Group::from_name(group) {
            if let Err(e) = nix::unistd::chown(path.as_path(), None, Some(g.gid)) {
                tracing::warn!("cannot give the API socket to group {group}: {e}");
            }
        }
    }
    Ok(listener)
}

/// Runs the node service until SIGTERM or SIGINT.
///
/// # Errors
/// [`NodeError`] when the API socket or the metrics address cannot be bound.
pub async fn run(config: NodeConfig) -> Result<(), NodeError> {
    let mut problems = Vec::new();
    let (health, holds) = open_state(&config, &mut problems);
    let api_listener = bind_api(&config)?;
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|source| NodeError::Metrics { addr, source })?,
        ),
        None => None,
    };
    let (scheduler_handle, scheduler) = Scheduler::new();
    let (inventory_tx, inventory_rx) = watch::channel(Inventory::new(GpuSection::default()));
    let node = Arc::new(Node {
        memory: GpuMemory::new(&config.data_dir),
        config: config.clone(),
        latest: RwLock::new(None),
        inventory_tx,
        health: health.clone(),
        holds: tokio::sync::Mutex::new(holds),
        samples: RwLock::new(Vec::new()),
        sampling: Mutex::new(SamplingState::default()),
        scheduler: scheduler_handle.clone(),
        problems: Mutex::new(Vec::new()),
        collections: std::sync::atomic::AtomicU64::new(0),
        passthrough: Passthrough::new(
            config.host.clone(),
            &config.data_dir,
            Arc::new(SocketHelper::new(config.helper_socket.clone())),
        )
        .with_scheduler(scheduler_handle.clone()),
        collecting: tokio::sync::Mutex::new(()),
    });
    for p in problems {
        node.problem(p);
    }
    if !config.host.path("/dev/kmsg").exists() {
        node.problem(format!(
            "{} does not exist: XIDs will not be seen",
            config.host.path("/dev/kmsg").display()
        ));
    }

    // A bind or release cut off by a crash is settled before anything else moves a GPU.
    match node.passthrough.reconcile().await {
        Ok(report) => {
            for sentence in &report.sentences {
                tracing::warn!("passthrough journal: {sentence}");
            }
            if !report.settled {
                node.problem(format!(
                    "the passthrough journal still holds steps that could not be settled ({}); they are retried at the next start",
                    report.sentences.join(" ")
                ));
            }
        }
        Err(e) => node.problem(format!("passthrough journal: {e}")),
    }

    // The hold specs are the containers' record: written from holds.json before anything
    // waits on nvidia-smi (a wedged host's first collection takes its full timeout).
    node.converge_holds().await;

    let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
    let collector = node.clone();
    let mut first_tx = Some(first_tx);
    tokio::spawn(scheduler.run(move || {
        let node = collector.clone();
        let first = first_tx.take();
        async move {
            node.collect_now().await;
            if let Some(first) = first {
                let _ = first.send(());
            }
        }
    }));

    // XIDs: the watcher asks for collections; the scheduler debounces them.
    // XID 154 (the driver's recovery action changed) is collected at once.
    let (xid_tx, mut xid_rx) = mpsc::channel::<bool>(64);
    tokio::spawn(XidWatcher::new(&config.host, inventory_rx, health, xid_tx).run());
    let handle = scheduler_handle.clone();
    tokio::spawn(async move {
        while let Some(urgent) = xid_rx.recv().await {
            handle.request(if urgent {
                Trigger::Refresh
            } else {
                Trigger::Xid
            });
        }
    });

    let sampled = node.clone();
    let interval = config.sample_interval.max(MIN_SAMPLE_INTERVAL);
    tokio::spawn(async move {
        // One long-lived nvidia-smi in loop mode, not a process per sample; the sampler falls
        // back to one-shot queries by itself where loop mode is refused.
        let sampler = Sampler::spawn(sampled.config.host.nvidia_smi(), Timing::new(interval));
        let mut rx = sampler.subscribe();
        while rx.changed().await.is_ok() {
            let latest = rx.borrow_and_update().clone();
            if let Some(latest) = latest {
                let state = SamplingState {
                    loop_mode: matches!(latest.mode, Mode::Loop),
                    one_shot_because: match &latest.mode {
                        Mode::Loop => None,
                        Mode::OneShot(why) => Some(why.to_string()),
                    },
                    restarts: sampler
                        .stats()
                        .restarts
                        .load(std::sync::atomic::Ordering::Relaxed),
                };
                if let Ok(mut s) = sampled.sampling.lock() {
                    *s = state;
                }
                *sampled.samples.write().await = latest.samples;
            }
        }
    });

    if let Some(endpoint) = config.otlp_endpoint.clone() {
        tokio::spawn(otlp::export_loop(node.clone(), endpoint, interval));
    }

    let in_flight = Arc::new(RwLock::new(()));
    let api_node = node.clone();
    let api_in_flight = in_flight.clone();
    let api = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = api_listener.accept().await else {
                continue;
            };
            let node = api_node.clone();
            let guard = api_in_flight.clone().read_owned().await;
            tokio::spawn(async move {
                let _guard = guard;
                let (reader, writer) = stream.into_split();
                match http::read_request(reader).await {
                    Ok(request) => {
                        let (status, body) = api::handle(&node, &request).await;
                        let _ =
                            http::write_response(writer, status, "application/json", &body).await;
                    }
                    Err(e) => {
                        let body = serde_json::json!({ "error": e.to_string() }).to_string();
                        let _ = http::write_response(
                            writer,
                            e.status(),
                            "application/json",
                            body.as_bytes(),
                        )
                        .await;
                    }
                }
            });
        }
    });

    if let Some(listener) = metrics_listener {
        let node = node.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let node = node.clone();
                tokio::spawn(async move {
                    let (reader, writer) = stream.into_split();
                    let (status, body) = match http::read_request(reader).await {
                        Ok(r) if r.method == "GET" && r.path == "/metrics" => {
                            (200, node.metrics_text().await)
                        }
                        Ok(_) => (404, "only GET /metrics is served here\n".to_owned()),
                        Err(e) => (e.status(), format!("{e}\n")),
                    };
                    let _ = http::write_response(
                        writer,
                        status,
                        "text/plain; version=0.0.4",
                        body.as_bytes(),
                    )
                    .await;
                });
            }
        });
    }

    // Ready once the first inventory is in, so a client's first status has GPUs.
    let _ = tokio::time::timeout(crate::smi::runner::SNAPSHOT_TIMEOUT, first_rx).await;
    notify::notify("READY=1\nSTATUS=serving");
    tracing::info!(
        "bcd node: serving the API on {}",
        config.api_socket.display()
    );
    if let Some(every) = notify::watchdog_interval() {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                notify::notify("WATCHDOG=1");
            }
        });
    }

    wait_for_stop().await;
    notify::notify("STOPPING=1");
    api.abort();
    // Every state file is written atomically; waiting for the requests in flight lets the
    // ones that change state finish and answer.
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, in_flight.write()).await;
    let _ = std::fs::remove_file(&config.api_socket);
    tracing::info!("bcd node: stopped");
    Ok(())
}

async fn wait_for_stop() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers the service can only be killed; run until then.
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
