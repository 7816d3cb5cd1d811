//! The node service's state and its long-running tasks: the collection scheduler, the XID
//! watcher, the sampler, the OTLP exporter, the API socket and the metrics listener, all in
//! one `JoinSet` under one stop signal. The serving loop waits for SIGTERM/SIGINT, for a task
//! that ends on its own (the node then stops with an error, to be started again whole), and
//! pings systemd's watchdog, each ping only after the state locks were taken in time.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{mpsc, watch, RwLock};
use tokio::task::JoinSet;

use crate::cdi::{self, converge, DeviceCatalog, Holds};
use crate::health::faults::{read_boot_id, FaultStore, Health};
use crate::health::watcher::{WatcherStats, XidWatcher};
use crate::health::{gpu_healthy, Condition};
use crate::host::Host;
use crate::inventory::collect::collect;
use crate::inventory::document::{GpuSection, Inventory};
use crate::inventory::memory::GpuMemory;
use crate::inventory::scheduler::{Scheduler, SchedulerHandle, Trigger};
use crate::node::instance::{self, FileIdentity};
use crate::node::otlp::{self, OtlpEndpoint};
use crate::node::{api, http, listen, metrics, notify};
use crate::runtime::{Passthrough, SocketHelper};
use crate::smi::list::ListedGpu;
use crate::smi::sampler::{Mode, Sampler, Timing};
use crate::smi::samples::GpuSample;
use crate::smi::snapshot::QueryRecord;

/// The shortest sample interval: `nvidia-smi` costs driver time on every GPU.
pub const MIN_SAMPLE_INTERVAL: Duration = Duration::from_secs(5);
/// Scrapes the metrics listener serves at once (a scrape is one request every few seconds).
pub const METRICS_CONNECTIONS: usize = 16;
/// The metrics' media type.
const METRICS_TYPE: &str = "text/plain; version=0.0.4";
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
    /// The API socket's accept loop.
    pub api_listener: Arc<listen::ListenerStats>,
    /// The metrics listener's accept loop.
    pub metrics_listener: Arc<listen::ListenerStats>,
    /// The XID watcher's counters and its failure, when the kernel log cannot be read.
    pub watcher: Arc<WatcherStats>,
    /// The vendor CDI specs that could not be read at the last convergence.
    vendor_problems: Mutex<Vec<String>>,
}

impl Node {
    /// A node's state before any task runs: no collection yet, no samples, no problems.
    /// `inventory` publishes each collection (the XID watcher holds its receiver); `watcher`
    /// is the XID watcher's counters; `scheduler` is where collections are asked for.
    pub fn new(
        config: NodeConfig,
        health: Health,
        holds: Option<Holds>,
        inventory: watch::Sender<Inventory>,
        watcher: Arc<WatcherStats>,
        scheduler: SchedulerHandle,
    ) -> Self {
        Self {
            memory: GpuMemory::new(&config.data_dir),
            passthrough: Passthrough::new(
                config.host.clone(),
                &config.data_dir,
                Arc::new(SocketHelper::new(config.helper_socket.clone())),
            )
            .with_scheduler(scheduler.clone()),
            config,
            latest: RwLock::new(None),
            inventory_tx: inventory,
            health,
            holds: tokio::sync::Mutex::new(holds),
            samples: RwLock::new(Vec::new()),
            sampling: Mutex::new(SamplingState::default()),
            scheduler,
            problems: Mutex::new(Vec::new()),
            collections: std::sync::atomic::AtomicU64::new(0),
            collecting: tokio::sync::Mutex::new(()),
            api_listener: Arc::default(),
            metrics_listener: Arc::default(),
            watcher,
            vendor_problems: Mutex::new(Vec::new()),
        }
    }

    /// Records a start-up or runtime problem an operator should see in `status`.
    pub fn problem(&self, sentence: String) {
        tracing::error!("{sentence}");
        if let Ok(mut p) = self.problems.lock() {
            if !p.contains(&sentence) {
                p.push(sentence);
            }
        }
    }

    /// Whether the state locks the API and the tasks take can all be taken within `bound`:
    /// what the watchdog vouches for. The collection lock is not among them (a collection
    /// may rightly take a minute on a wedged GPU).
    pub async fn responsive(&self, bound: Duration) -> bool {
        tokio::time::timeout(bound, async {
            drop(self.latest.read().await);
            drop(self.samples.read().await);
            drop(self.holds.lock().await);
            let _ = self.health.conditions();
            let _ = self.sampling.lock().map(|s| s.loop_mode);
            let _ = self.problems.lock().map(|p| p.len());
        })
        .await
        .is_ok()
    }

    /// Every degraded input now, in sentences, for `status`: what did not start as it should,
    /// then the kernel log, the helper's socket, the data folder, the vendor CDI specs,
    /// sampling and the listeners, each while it is degraded.
    pub fn problems_now(&self) -> Vec<String> {
        let mut all = self.problems.lock().map(|p| p.clone()).unwrap_or_default();
        all.extend(self.watcher.failure());
        let helper = &self.config.helper_socket;
        match std::fs::symlink_metadata(helper) {
            Ok(m) if std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => {}
            Ok(_) => all.push(format!(
                "the root helper's socket {} is not a socket: resets, persistence and passthrough cannot run",
                helper.display()
            )),
            Err(e) => all.push(format!(
                "the root helper cannot be reached at {} ({e}): resets, persistence and passthrough cannot run (systemctl start bcd-helper.socket)",
                helper.display()
            )),
        }
        let data = &self.config.data_dir;
        let usable = match std::fs::metadata(data) {
            Ok(m) if m.is_dir() => nix::unistd::access(
                data.as_path(),
                nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
            )
            .map_err(|e| std::io::Error::from(e).to_string()),
            Ok(_) => Err("it is not a folder".to_owned()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(why) = usable {
            all.push(format!(
                "the data folder {} is unusable ({why}): holds, faults and the passthrough memory are not kept",
                data.display()
            ));
        }
        if let Ok(v) = self.vendor_problems.lock() {
            all.extend(v.iter().map(|p| format!("vendor CDI spec: {p}")));
        }
        if let Some(why) = self
            .sampling
            .lock()
            .ok()
            .and_then(|s| s.one_shot_because.clone())
        {
            all.push(format!(
                "sampling fell back to one-shot nvidia-smi queries: {why}"
            ));
        }
        for (name, stats) in [
            ("the API socket", &self.api_listener),
            ("the metrics listener", &self.metrics_listener),
        ] {
            if stats.starved.load(std::sync::atomic::Ordering::Relaxed) {
                all.push(format!(
                    "{name} cannot accept connections: the process is out of file descriptors"
                ));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        all.retain(|p| seen.insert(p.clone()));
        all
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
        let queries = collection
            .snapshot
            .as_ref()
            .map(|s| s.queries.clone())
            .unwrap_or_default();
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
        };
        *self.latest.write().await = Some(latest);
        self.inventory_tx.send_replace(collection.inventory.clone());
        self.collections
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.converge_holds().await;
        collection.inventory
    }

    /// Writes every hold's spec and removes those of released holds.
    pub async fn converge_holds(&self) {
        // Read (and reported in status) even while the holds cannot be.
        let vendor =
            cdi::read_vendor_specs(&cdi::vendor_dirs(&self.config.cdi_dir, &self.config.host));
        let sentences: Vec<String> = vendor.problems.iter().map(ToString::to_string).collect();
        if let Ok(mut kept) = self.vendor_problems.lock() {
            for problem in sentences.iter().filter(|p| !kept.contains(p)) {
                tracing::warn!("{problem}");
            }
            *kept = sentences;
        }
        let holds = self.holds.lock().await;
        let Some(holds) = holds.as_ref() else { return };
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
        let result = converge(holds, &vendor.specs, &catalog, &self.config.cdi_dir);
        for e in &result.errors {
            self.problem(format!("CDI specs: {e}"));
        }
    }

    /// Per GPU UUID, the healthy rule's verdict on the latest inventory.
    pub async fn healthy_map(&self) -> BTreeMap<String, bool> {
        let conditions = self.health.conditions();
        let latest = self.latest.read().await;
        latest
            .as_ref()
            .map(|l| {
                l.inventory
                    .gpu
                    .gpus
                    .iter()
                    .map(|g| (g.uuid.clone(), gpu_healthy(g, &conditions)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The Prometheus text for a scrape.
    pub async fn metrics_text(&self) -> String {
        let samples = self.samples.read().await.clone();
        let healthy = self.healthy_map().await;
        let conditions: Vec<Condition> = self.health.conditions();
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
    /// Another node runs on the same data folder.
    #[error("{0}")]
    AlreadyRunning(instance::InstanceError),
    /// One of the node's long-running tasks ended on its own.
    #[error("{task} ended on its own; bcd node stops so that it is started again whole")]
    TaskEnded {
        /// Which.
        task: String,
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
    let holds = match Holds::load(&config.data_dir) {
        Ok(h) => Some(h),
        Err(e) => {
            problems.push(format!(
                "{e}; holds are not changed and no hold spec is removed until it is fixed"
            ));
            None
        }
    };
    (Health::new(store), holds)
}

/// Binds the API socket: a stale socket file is replaced; a socket something listens on, and
/// anything that is not a socket, are not. Returns the listener and the identity of the
/// socket file it made, so shutdown removes only that.
fn bind_api(config: &NodeConfig) -> Result<(UnixListener, Option<FileIdentity>), NodeError> {
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
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    "another process listens on it (another bcd node?); stop it or give this one its own --api-socket",
                )));
            }
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
    // Noted last: the mode and owner changes above change the file's ctime.
    let identity = FileIdentity::of(path).ok();
    Ok((listener, identity))
}

/// Runs the node service until SIGTERM or SIGINT.
///
/// # Errors
/// [`NodeError`] when another node runs on the data folder, or the API socket or the metrics
/// address cannot be bound.
pub async fn run(config: NodeConfig) -> Result<(), NodeError> {
    let mut signals = Signals::install();
    let mut problems = Vec::new();
    // Before any state is read and before the socket is touched: a second node must change
    // nothing of the first's.
    let _ = std::fs::create_dir_all(&config.data_dir);
    let _instance = match instance::lock(&config.data_dir) {
        Ok(lock) => Some(lock),
        Err(e @ instance::InstanceError::Held { .. }) => return Err(NodeError::AlreadyRunning(e)),
        Err(e) => {
            problems.push(format!(
                "{e}: another node on the same data folder would not be noticed"
            ));
            None
        }
    };
    let (health, holds) = open_state(&config, &mut problems);
    let (api_listener, api_identity) = bind_api(&config)?;
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
    // XIDs: the watcher asks for collections; the scheduler debounces them.
    let (xid_tx, mut xid_rx) = mpsc::channel::<()>(64);
    let watcher = XidWatcher::new(&config.host, inventory_rx, health.clone(), xid_tx);
    let node = Arc::new(Node::new(
        config.clone(),
        health.clone(),
        holds,
        inventory_tx,
        watcher.stats(),
        scheduler_handle.clone(),
    ));
    for p in problems {
        node.problem(p);
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

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Tasks {
        set: JoinSet::new(),
        stop: stop_rx,
    };
    let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
    let collector = node.clone();
    let mut first_tx = Some(first_tx);
    tasks.spawn(
        "the collection scheduler",
        scheduler.run(move || {
            let node = collector.clone();
            let first = first_tx.take();
            async move {
                node.collect_now().await;
                if let Some(first) = first {
                    let _ = first.send(());
                }
            }
        }),
    );

    tasks.spawn("the XID watcher", watcher.run());
    let handle = scheduler_handle.clone();
    tasks.spawn("the XID collection requests", async move {
        while xid_rx.recv().await.is_some() {
            handle.request(Trigger::Xid);
        }
    });

    let sampled = node.clone();
    let interval = config.sample_interval.max(MIN_SAMPLE_INTERVAL);
    tasks.spawn("the sampler", async move {
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
        tasks.spawn(
            "the OTLP exporter",
            otlp::export_loop(node.clone(), endpoint, interval),
        );
    }

    let in_flight = Arc::new(RwLock::new(()));
    let api_listener = Arc::new(api_listener);
    let api_node = node.clone();
    let api_in_flight = in_flight.clone();
    tasks.spawn(
        "the API socket's accept loop",
        listen::serve(
            format!("the API socket {}", config.api_socket.display()),
            http::MAX_CONNECTIONS,
            node.api_listener.clone(),
            move || {
                let l = api_listener.clone();
                async move { l.accept().await.map(|(stream, _)| stream) }
            },
            move |stream: tokio::net::UnixStream| {
                // Refused once shutdown waits for the requests in flight.
                let guard = api_in_flight.clone().try_read_owned().ok()?;
                let node = api_node.clone();
                Some(async move {
                    let _guard = guard;
                    let (reader, writer) = stream.into_split();
                    let (status, body) = match http::read_request(reader).await {
                        Ok(request) => api::handle(&node, &request).await,
                        Err(e) => (e.status(), http::error_body(e.code(), &e.to_string())),
                    };
                    let _ = http::write_response(writer, status, "application/json", &body).await;
                })
            },
        ),
    );

    if let Some(listener) = metrics_listener {
        let node = node.clone();
        let stats = node.metrics_listener.clone();
        let listener = Arc::new(listener);
        tasks.spawn(
            "the metrics listener's accept loop",
            listen::serve(
                format!(
                    "the metrics listener {}",
                    listener
                        .local_addr()
                        .map_or_else(|_| "?".to_owned(), |a| a.to_string())
                ),
                METRICS_CONNECTIONS,
                stats,
                move || {
                    let l = listener.clone();
                    async move { l.accept().await.map(|(stream, _)| stream) }
                },
                move |stream: tokio::net::TcpStream| {
                    let node = node.clone();
                    Some(async move {
                        let (reader, writer) = stream.into_split();
                        let (status, kind, body) = match http::read_request(reader).await {
                            Ok(r) if r.path == "/metrics" && r.method == "GET" => {
                                (200, METRICS_TYPE, node.metrics_text().await.into_bytes())
                            }
                            Ok(r) if r.path == "/metrics" => (
                                405,
                                "application/json",
                                http::error_body(
                                    "method-not-allowed",
                                    &format!("{} is not allowed on /metrics; use GET", r.method),
                                ),
                            ),
                            Ok(r) => (
                                404,
                                "application/json",
                                http::error_body(
                                    "not-found",
                                    &format!(
                                        "no such path: {} (only GET /metrics is served here)",
                                        r.path
                                    ),
                                ),
                            ),
                            Err(e) => (
                                e.status(),
                                "application/json",
                                http::error_body(e.code(), &e.to_string()),
                            ),
                        };
                        let _ = http::write_response(writer, status, kind, &body).await;
                    })
                },
            ),
        );
    }

    // Ready once the first inventory is in, so a client's first status has GPUs.
    let stopped_early = tokio::select! {
        _ = tokio::time::timeout(crate::smi::runner::SNAPSHOT_TIMEOUT, first_rx) => false,
        () = signals.recv() => true,
    };
    let outcome = if stopped_early {
        Ok(())
    } else {
        notify::notify("READY=1\nSTATUS=serving");
        tracing::info!(
            "bcd node: serving the API on {}",
            config.api_socket.display()
        );
        work_loop(&node, &mut tasks, &mut signals).await
    };

    notify::notify("STOPPING=1");
    let _ = stop_tx.send(true);
    // Every state file is written atomically; waiting for the requests in flight lets the
    // ones that change state finish and answer.
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, in_flight.write()).await;
    tasks.set.shutdown().await;
    if let Some(mine) = api_identity {
        instance::remove_if_mine(&config.api_socket, mine);
    }
    tracing::info!("bcd node: stopped");
    outcome
}

/// The node's long-running tasks, each named, in one set under one stop signal.
struct Tasks {
    set: JoinSet<&'static str>,
    stop: watch::Receiver<bool>,
}

impl Tasks {
    /// Runs `work` until it ends or the stop signal is given; the set yields `name` then.
    fn spawn(&mut self, name: &'static str, work: impl Future<Output = ()> + Send + 'static) {
        let mut stop = self.stop.clone();
        self.set.spawn(async move {
            tokio::select! {
                () = work => {}
                _ = stop.wait_for(|stopped| *stopped) => {}
            }
            name
        });
    }
}

/// Serves until SIGTERM or SIGINT, pinging systemd's watchdog from here: each ping needs the
/// node's state locks to be taken within a quarter of the watchdog's interval, so a node
/// whose state is stuck stops pinging and is restarted. A task that ends on its own is a bug
/// that leaves the node half-working: the node stops with an error, and systemd restarts it.
async fn work_loop(node: &Node, tasks: &mut Tasks, signals: &mut Signals) -> Result<(), NodeError> {
    let every = notify::watchdog_interval();
    let mut watchdog = every.map(tokio::time::interval);
    let mut stuck = false;
    loop {
        tokio::select! {
            () = signals.recv() => return Ok(()),
            ended = tasks.set.join_next() => {
                let task = match ended {
                    Some(Ok(name)) => name.to_owned(),
                    Some(Err(e)) => format!("a task ({e})"),
                    None => return Ok(()),
                };
                return Err(NodeError::TaskEnded { task });
            }
            () = tick(watchdog.as_mut()) => {
                let bound = every.map_or(Duration::from_secs(5), |e| e / 4);
                if node.responsive(bound).await {
                    if std::mem::take(&mut stuck) {
                        tracing::warn!("bcd node: its state answers again; pinging the watchdog");
                    }
                    notify::notify("WATCHDOG=1");
                } else if !std::mem::replace(&mut stuck, true) {
                    tracing::error!(
                        "bcd node: its state locks were not free within {:.1}s; the watchdog is not pinged",
                        bound.as_secs_f64()
                    );
                }
            }
        }
    }
}

async fn tick(interval: Option<&mut tokio::time::Interval>) {
    match interval {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// SIGTERM and SIGINT, installed at the start so neither kills the node outright.
struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        Self {
            term: signal(SignalKind::terminate()).ok(),
            int: signal(SignalKind::interrupt()).ok(),
        }
    }

    /// The next SIGTERM or SIGINT; never, where no handler could be installed (the node can
    /// then only be killed).
    async fn recv(&mut self) {
        async fn one(s: Option<&mut tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = one(self.term.as_mut()) => {}
            () = one(self.int.as_mut()) => {}
        }
    }
}

/// A node on the demo host (`testdata/hosts/hgx-h100`) with its state in `dir` and no
/// helper, built without running anything: for the handlers' and the state's tests.
#[cfg(test)]
pub(crate) fn test_node(dir: &std::path::Path) -> Node {
    let host = Host::fake(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts/hgx-h100"),
    );
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let config = NodeConfig {
        host,
        data_dir: data.clone(),
        cdi_dir: dir.join("cdi"),
        helper_socket: dir.join("no-helper.sock"),
        api_socket: dir.join("bcd.sock"),
        api_group: None,
        metrics_listen: None,
        sample_interval: MIN_SAMPLE_INTERVAL,
        otlp_endpoint: None,
    };
    let health = Health::new(FaultStore::open(&data, "boot").unwrap());
    let (inventory, _) = watch::channel(Inventory::new(GpuSection::default()));
    let (scheduler, _) = Scheduler::new();
    Node::new(
        config,
        health,
        Some(Holds::load(&data).unwrap()),
        inventory,
        Arc::default(),
        scheduler,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
