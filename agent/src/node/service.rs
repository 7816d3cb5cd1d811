//! The node service's start-up and its long-running tasks (its state is in
//! [`crate::node::shared`]): the collection scheduler, the XID
//! watcher, the helper watch (which settles the passthrough journal when the helper returns),
//! the sampler, the OTLP exporter, the API socket, the metrics listener and the
//! kubelet device plugins (with `--device-plugin-dir`), all in
//! one `JoinSet` under one stop signal. The serving loop waits for SIGTERM/SIGINT, for a task
//! that ends on its own (the node then stops with an error, to be started again whole), and
//! pings systemd's watchdog, each ping only after the state locks were taken in time.

use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{mpsc, watch, RwLock};
use tokio::task::JoinSet;

use crate::health::watcher::XidWatcher;
use crate::helper_client::SocketHelper;
use crate::inventory::scheduler::Trigger;
use crate::node::instance::{self, FileIdentity};
use crate::node::otlp;
use crate::node::{api, http, listen, notify};
use crate::runtime::helper_watch;
use crate::smi::sampler::{Mode, Sampler, Timing};

pub use crate::node::metrics::SamplingState;
use crate::node::shared::MIN_SAMPLE_INTERVAL;
pub use crate::node::shared::{Node, NodeConfig};

/// Scrapes the metrics listener serves at once (a scrape is one request every few seconds).
pub const METRICS_CONNECTIONS: usize = 16;
/// The metrics' media type.
const METRICS_TYPE: &str = "text/plain; version=0.0.4";
/// How long a shutdown waits for requests in flight.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

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

/// A task started on the node beside its own once its state is open: a consumer of the
/// node's devices (the kubelet device plugins), wired by the start-up above the node so that
/// the node knows no consumer.
pub struct NodeTask {
    /// Its name in the log.
    pub name: &'static str,
    /// Starts it on the node; it runs until the node stops.
    pub start: Box<dyn FnOnce(Arc<Node>) -> BoxedTask + Send>,
}

/// A started [`NodeTask`].
pub type BoxedTask = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

impl std::fmt::Debug for NodeTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTask")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Runs the node service on `config`, its own tasks and `extra`, until SIGTERM or SIGINT.
///
/// # Errors
/// [`NodeError`] when another node runs on the data folder, or the API socket or the metrics
/// address cannot be bound; all three are checked before any state is read or written, so a
/// refused start has changed nothing but its data folder's lock file.
pub async fn run(config: NodeConfig, extra: Vec<NodeTask>) -> Result<(), NodeError> {
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
    // Everything else that can refuse the start, before any state is read, made or rebuilt
    // (a second node on another data folder but the same CDI folder must not rebuild the
    // first's holds and then fail on its socket): the metrics address first, which leaves
    // nothing behind when the API socket then fails.
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|source| NodeError::Metrics { addr, source })?,
        ),
        None => None,
    };
    let (api_listener, api_identity) = bind_api(&config)?;
    // Hold specs go there; a hold whose spec cannot be written is refused, so a missing
    // folder is made (the package makes /etc/cdi, group-writable for bcd) or said at once.
    if let Err(e) = std::fs::create_dir_all(&config.cdi_dir) {
        problems.push(format!(
            "the CDI folder {} cannot be made: {e}; holds are refused until it exists",
            config.cdi_dir.display()
        ));
    }
    let opened = Node::open(
        config.clone(),
        Arc::new(SocketHelper::new(config.helper_socket.clone())),
    );
    let node = Arc::new(opened.node);
    let scheduler = opened.scheduler;
    // XIDs: the watcher asks for collections; the scheduler debounces them.
    // XID 154 (the driver's recovery action changed) is collected at once.
    let (xid_tx, xid_rx) = mpsc::channel::<bool>(64);
    let watcher = XidWatcher::new(
        &config.host,
        opened.inventory,
        node.health().clone(),
        xid_tx,
    )
    .with_stats(node.watcher_stats());
    for p in problems {
        node.problem(p);
    }

    // A bind or release cut off by a crash is settled before anything else moves a GPU. What
    // stays open is named in status while it is open, and the helper watch settles it when
    // the helper answers again.
    match node.passthrough().reconcile().await {
        Ok(report) => {
            for sentence in &report.sentences {
                tracing::warn!("passthrough journal: {sentence}");
            }
        }
        Err(e) => node.problem(format!("passthrough journal: {e}")),
    }

    // The hold specs are the containers' record: written from holds.json before anything
    // waits on nvidia-smi (a wedged host's first collection takes its full timeout).
    node.converge_holds().await;

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Tasks {
        set: JoinSet::new(),
        stop: stop_rx,
    };
    let first_rx = spawn_collections(&mut tasks, &node, scheduler);
    spawn_watchers(&mut tasks, &node, watcher, xid_rx);
    spawn_samples(&mut tasks, &node);

    spawn_nvidia_cdi(&mut tasks, &node);
    if let Some(remediate) = config.remediate.clone() {
        let loop_node = node.clone();
        tasks.spawn("the recovery loop", async move {
            crate::node::remediate::run(&loop_node, remediate).await;
        });
    }

    let in_flight = Arc::new(RwLock::new(()));
    spawn_api(&mut tasks, &node, api_listener, in_flight.clone());
    if let Some(listener) = metrics_listener {
        spawn_metrics(&mut tasks, &node, listener);
    }

    // Ready once the first inventory is in, so a client's first status has GPUs.
    let stopped_early = tokio::select! {
        _ = tokio::time::timeout(crate::smi::runner::SNAPSHOT_TIMEOUT, first_rx) => false,
        () = signals.recv() => true,
    };
    // The layout asked for at start, before the device plugins and the DRA driver offer
    // anything (mig-parted's systemd mode); refused or failed, the node serves on.
    if let (false, Some(layout)) = (stopped_early, config.mig_layout.as_deref()) {
        match crate::node::mig_step::apply(&node, layout).await {
            Ok(record) if record.state == crate::mig::LayoutState::Success => {
                tracing::info!("MIG layout {layout} applied at start");
            }
            Ok(record) => {
                tracing::error!(
                    "{}",
                    record
                        .problem()
                        .unwrap_or_else(|| format!("MIG layout {layout} failed at start"))
                );
            }
            Err(e) => {
                let sentence = format!("MIG layout {layout} was not applied at start: {e}");
                node.problem(sentence);
                refused_at_start(&node, layout, &e);
            }
        }
    }
    let consumers: Vec<&'static str> = extra.iter().map(|t| t.name).collect();
    for task in extra {
        tasks.spawn(task.name, (task.start)(node.clone()));
    }
    let outcome = if stopped_early {
        Ok(())
    } else {
        notify::notify("READY=1\nSTATUS=serving");
        let gpus = node.inventory().await.gpu.gpus.len();
        tracing::info!("{}", serving_line(&config, gpus, &consumers));
        work_loop(&node, &mut tasks, &mut signals).await
    };

    notify::notify("STOPPING=1");
    let _ = stop_tx.send(true);
    // Every state file is written atomically; waiting for the requests in flight lets the
    // ones that change state finish and answer.
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, in_flight.write()).await;
    tasks.set.shutdown().await;
    if let Err(e) = node.health().flush() {
        tracing::error!("{e}");
    }
    if let Some(mine) = api_identity {
        instance::remove_if_mine(&config.api_socket, mine);
    }
    tracing::info!("bcd node: stopped");
    outcome
}

/// Records a start-up layout refused before anything ran as `failed` (the GPUs as found,
/// none withdrawn), so status, the labels and `bcd mig status` say it.
fn refused_at_start(node: &Node, layout: &str, e: &crate::mig::MigError) {
    let now = crate::state::unix_now();
    let record = crate::mig::LayoutRecord {
        version: 1,
        layout: layout.to_owned(),
        state: crate::mig::LayoutState::Failed,
        started_at: now,
        finished_at: Some(now),
        duration_ms: Some(0),
        gpus: Vec::new(),
        failed_step: Some("the check before anything ran, at start".to_owned()),
        message: Some(e.to_string()),
        withdrawn: Vec::new(),
    };
    crate::node::mig_step::record_refusal(node, record);
}

/// Keeps NVIDIA's CDI spec current after each collection (with `--nvidia-cdi-spec`).
fn spawn_nvidia_cdi(tasks: &mut Tasks, node: &Arc<Node>) {
    if node.config().nvidia_cdi_spec.is_none() {
        return;
    }
    let node = node.clone();
    let mut changes = node.inventory_changes();
    tasks.spawn("NVIDIA's CDI spec", async move {
        loop {
            crate::node::nvidia_cdi::refresh_if_changed(&node).await;
            if changes.changed().await.is_err() {
                return;
            }
        }
    });
}

/// The one line `bcd node` logs (at info) when it serves: its version, the API socket, the
/// GPUs of the first inventory, the metrics address, the helper's socket and the consumers it
/// started (the kubelet device plugins, the labels' file).
pub fn serving_line(config: &NodeConfig, gpus: usize, consumers: &[&str]) -> String {
    let mut line = format!(
        "bcd node {}: serving the API on {}; {gpus} GPU(s)",
        env!("CARGO_PKG_VERSION"),
        config.api_socket.display()
    );
    if let Some(addr) = config.metrics_listen {
        line.push_str(&format!("; metrics on http://{addr}/metrics"));
    }
    if let Some(otlp) = &config.otlp_endpoint {
        line.push_str(&format!("; OTLP to {otlp}"));
    }
    line.push_str(&format!("; helper at {}", config.helper_socket.display()));
    if !consumers.is_empty() {
        line.push_str(&format!("; with {}", consumers.join(", ")));
    }
    line
}

/// The collection scheduler's task; the receiver hears once the first collection is in.
fn spawn_collections(
    tasks: &mut Tasks,
    node: &Arc<Node>,
    scheduler: crate::inventory::scheduler::Scheduler,
) -> tokio::sync::oneshot::Receiver<()> {
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

    first_rx
}

/// The kernel log's tasks: the XID watcher, its collection requests and the faults writer,
/// and the helper watch.
fn spawn_watchers(
    tasks: &mut Tasks,
    node: &Arc<Node>,
    watcher: XidWatcher,
    mut xid_rx: mpsc::Receiver<bool>,
) {
    let health = node.health().clone();
    tasks.spawn("the XID watcher", watcher.run());
    let watched = node.clone();
    tasks.spawn("the helper watch", async move {
        watched
            .passthrough()
            .watch_helper(helper_watch::PING_WHILE_OPEN, helper_watch::PING_IDLE)
            .await;
    });
    // An XID burst's later records reach faults.json within a second, not one write each.
    tasks.spawn("the faults writer", health.clone().write_pending());
    let requests = node.clone();
    tasks.spawn("the XID collection requests", async move {
        while let Some(urgent) = xid_rx.recv().await {
            requests.request_collection(if urgent {
                Trigger::Refresh
            } else {
                Trigger::Xid
            });
        }
    });
}

/// The sampler's task and, with `--otlp-endpoint`, the OTLP exporter's.
fn spawn_samples(tasks: &mut Tasks, node: &Arc<Node>) {
    let sampled = node.clone();
    let interval = node.config().sample_interval.max(MIN_SAMPLE_INTERVAL);
    tasks.spawn("the sampler", async move {
        // One long-lived nvidia-smi in loop mode, not a process per sample; the sampler falls
        // back to one-shot queries by itself where loop mode is refused.
        let sampler = Sampler::spawn(sampled.config().host.nvidia_smi(), Timing::new(interval));
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
                    mig_memory: latest.mig_memory.clone(),
                    mig_memory_reads: sampler
                        .stats()
                        .mig_reads
                        .load(std::sync::atomic::Ordering::Relaxed),
                    interval_s: interval.as_secs(),
                };
                sampled.set_sampling(state);
                sampled.set_samples(latest.samples).await;
            }
        }
    });

    if let Some(endpoint) = node.config().otlp_endpoint.clone() {
        let exported = node.clone();
        let read = move || {
            let node = exported.clone();
            async move {
                (
                    node.samples_now().await,
                    node.healthy_map().await,
                    node.attribution().await,
                )
            }
        };
        tasks.spawn(
            "the OTLP exporter",
            otlp::export_loop(
                otlp::Resource::of_host(&node.config().host),
                read,
                endpoint,
                interval,
            ),
        );
    }
}

/// The API socket's accept loop; each request holds `in_flight` for reading while it runs.
fn spawn_api(
    tasks: &mut Tasks,
    node: &Arc<Node>,
    api_listener: UnixListener,
    in_flight: Arc<RwLock<()>>,
) {
    let api_listener = Arc::new(api_listener);
    let api_node = node.clone();
    let api_in_flight = in_flight;
    let watchers = crate::node::watch::Watchers::default();
    tasks.spawn(
        "the API socket's accept loop",
        listen::serve(
            format!("the API socket {}", node.config().api_socket.display()),
            http::MAX_CONNECTIONS,
            node.api_listener_stats(),
            move || {
                let l = api_listener.clone();
                async move { l.accept().await.map(|(stream, _)| stream) }
            },
            move |stream: tokio::net::UnixStream| {
                // Refused once shutdown waits for the requests in flight.
                let guard = api_in_flight.clone().try_read_owned().ok()?;
                let node = api_node.clone();
                let watchers = watchers.clone();
                Some(async move { serve_api_connection(node, stream, guard, &watchers).await })
            },
        ),
    );
}

/// Serves one connection of the API socket: a status watch
/// ([`crate::node::watch::is_watch`]) goes to a task of its own, holding one of `watchers`'
/// places and not `in_flight` (shutdown does not wait for it); any other request is answered
/// while `in_flight` is held.
async fn serve_api_connection(
    node: std::sync::Arc<Node>,
    mut stream: tokio::net::UnixStream,
    in_flight: tokio::sync::OwnedRwLockReadGuard<()>,
    watchers: &crate::node::watch::Watchers,
) {
    let started = std::time::Instant::now();
    let Some(prefix) = crate::node::http::read_checked_head(&mut stream).await else {
        return;
    };
    if let Some((method, target)) = crate::node::http::request_line(&prefix) {
        if crate::node::watch::is_watch(&method, &target) {
            drop(in_flight);
            let place = watchers.take();
            tokio::spawn(async move { crate::node::watch::serve(&node, stream, place).await });
            return;
        }
    }
    crate::node::http::serve_read(stream, prefix, started, |request| {
        let node = node.clone();
        async move { api::reply(&node, &request).await }
    })
    .await;
}

/// The metrics listener's accept loop.
fn spawn_metrics(tasks: &mut Tasks, node: &Arc<Node>, listener: TcpListener) {
    let node = node.clone();
    let stats = node.metrics_listener_stats();
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
                Some(http::serve_connection(stream, move |request| {
                    let node = node.clone();
                    async move { metrics_reply(&node, &request).await }
                }))
            },
        ),
    );
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

/// The metrics listener's one route: `GET /metrics`; any other method on it 405, any other
/// path 404, both in JSON.
async fn metrics_reply(node: &Node, request: &http::Request) -> http::Reply {
    match (request.method.as_str(), request.path.as_str()) {
        ("GET", "/metrics") => http::Reply {
            status: 200,
            content_type: METRICS_TYPE,
            body: node.metrics_text().await.into_bytes(),
            allow: None,
        },
        (method, "/metrics") => http::Reply::error(
            405,
            "method-not-allowed",
            &format!("{method} is not allowed on /metrics; use GET"),
        )
        .with_allow(Some("GET")),
        (_, path) => http::Reply::error(
            404,
            "not-found",
            &format!("no such path: {path} (only GET /metrics is served here)"),
        ),
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
