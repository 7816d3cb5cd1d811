//! The API server side of the driver: the client (a kubeconfig file, or the pod's service
//! account, chosen explicitly), the ResourceClaim reader, and the one work loop that keeps
//! the node's pool of ResourceSlices as [`super::slices::plan`] says.
//!
//! The loop: find the Node (its uid for the owner reference), ask the server's version and,
//! with a dry run, which newer slice fields it keeps ([`super::server`]), then for ever:
//! compute the devices offered now, list the driver's slices of this node, write what the
//! plan says (a write whose answer lacks a field sent gives that field up and is written
//! again at once), and wait for a change of the node's devices, an event on those slices
//! (the kubelet deletes them when it starts and 30 s after the plugin vanishes; someone may
//! change them) or [`RESYNC_EVERY`]. A write refused with 409, 5xx, a timeout or no answer is tried again
//! after a backoff doubling from [`BACKOFF_FIRST`] to [`BACKOFF_CAP`]; a slice refused with
//! 422 is not written again until the desired slices change, and is said in `status`. The API
//! server being away never stops the node: `status` says so, and the loop catches up when
//! it answers again.

use std::collections::BTreeMap;

use bcd_protocol::GpuUuid;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1 as resource;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions, WatchParams};
use tokio_stream::StreamExt;

use super::claims::{ClaimReader, ReadError, ResourceClaim};
use super::client::{unauthorized, ApiClient};
use super::devices;
use super::prepare::all_devices;
use super::server::ServerVersion;
use super::slices::{self, Dropped, NodeRef, Plan, ResourceSlice};
use super::{DraConfig, DraState, DRIVER};
use crate::source::DeviceSource;

/// The first wait after a failed write.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between tries: a server back within it is caught up within 30 s.
pub const BACKOFF_CAP: Duration = Duration::from_secs(10);
/// How often the pool is compared with the server even when nothing signalled a change.
pub const RESYNC_EVERY: Duration = Duration::from_secs(30);
/// How long one API call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a watch of the slices lasts before it is made anew.
pub const WATCH_SECONDS: u32 = 290;

/// Reads ResourceClaims from the API server.
#[derive(Clone)]
pub struct ApiClaims {
    client: ApiClient,
}

impl std::fmt::Debug for ApiClaims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClaims").finish_non_exhaustive()
    }
}

impl ApiClaims {
    /// The reader on `client`.
    pub fn new(client: ApiClient) -> Self {
        Self { client }
    }

    /// `call` on the client now; after a 401, once more on the credentials read again when
    /// they changed.
    async fn twice<T, F>(&self, call: impl Fn(kube::Client) -> F) -> Result<T, kube::Error>
    where
        F: std::future::Future<Output = Result<T, kube::Error>>,
    {
        match call(self.client.client()).await {
            Err(e) if unauthorized(&e) && matches!(self.client.renew().await, Ok(true)) => {
                call(self.client.client()).await
            }
            other => other,
        }
    }
}

impl ClaimReader for ApiClaims {
    async fn get(&self, namespace: &str, name: &str) -> Result<ResourceClaim, ReadError> {
        let failed = |why: String| ReadError::Failed {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            why,
        };
        let answer = self
            .twice(|c| async move {
                Api::<resource::ResourceClaim>::namespaced(c, namespace)
                    .get(name)
                    .await
            })
            .await;
        match answer {
            Ok(claim) => serde_json::to_value(claim)
                .and_then(serde_json::from_value)
                .map_err(|e| failed(e.to_string())),
            Err(kube::Error::Api(s)) if names_missing(&s, "resourceclaims", name) => {
                Err(ReadError::NotFound {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                })
            }
            Err(e) => Err(failed(sentence(&e))),
        }
    }

    async fn node_exists(&self, name: &str) -> Result<bool, String> {
        let answer = self
            .twice(|c| async move { Api::<Node>::all(c).get(name).await })
            .await;
        match answer {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if names_missing(&s, "nodes", name) => Ok(false),
            Err(e) => Err(sentence(&e)),
        }
    }
}

/// Whether the API server's answer `status` says that the object `name` of `kind` (the
/// resource's plural, `resourceclaims`) does not exist: a `Status` with reason `NotFound`
/// whose details name that object. Any other 404 (a proxy's page, a resource the server does
/// not serve) says nothing of the object, so a claim is never taken for gone on it. Pure.
pub fn names_missing(status: &kube::core::Status, kind: &str, name: &str) -> bool {
    status.code == 404
        && status.reason == "NotFound"
        && status
            .details
            .as_ref()
            .is_some_and(|d| d.kind == kind && d.name == name)
}

/// The most of a server's message a problem sentence carries.
pub const MAX_MESSAGE: usize = 300;

/// A kube error in a few words: the server's message where it gave one, cut to
/// [`MAX_MESSAGE`] bytes (a proxy's HTML page is not a sentence).
fn sentence(e: &kube::Error) -> String {
    let text = match e {
        kube::Error::Api(s) => format!("HTTP {}: {}", s.code, s.message),
        other => other.to_string(),
    };
    cut(&text, MAX_MESSAGE)
}

fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// What one sync came to.
#[derive(Debug, PartialEq, Eq)]
enum Synced {
    /// The server has the pool as desired.
    Done,
    /// The server refused the content (422): not tried again until it changes.
    Rejected(String),
    /// Worth trying again after a backoff.
    Retry(String),
    /// Written, but the server dropped fields of a feature gate that is off: written again
    /// at once without them.
    Dropped(Dropped),
}

/// The doubling wait between tries, capped at [`BACKOFF_CAP`].
#[derive(Debug)]
struct Backoff(Duration);

impl Backoff {
    fn new() -> Self {
        Self(BACKOFF_FIRST)
    }

    fn next(&mut self) -> Duration {
        let now = self.0;
        self.0 = (self.0 * 2).min(BACKOFF_CAP);
        now
    }
}

/// What a verdict says for the offer: `None` when its GPU takes work, else its worst
/// reason's kind (`Xid79`, `NvidiaSmiSilent`), or its state without one.
pub fn why_not(verdict: &crate::health::verdict::Verdict) -> Option<String> {
    if verdict.healthy() {
        return None;
    }
    Some(
        verdict
            .reasons
            .first()
            .map_or_else(|| format!("{:?}", verdict.health), |r| r.kind.to_string()),
    )
}

/// The device lists of the pool's slices, as the node offers its devices now with
/// `features`.
pub async fn desired_now<S: DeviceSource>(
    node: &S,
    config: &DraConfig,
    features: devices::Features,
) -> Vec<Vec<slices::Device>> {
    let all = all_devices(node, config).await;
    let topology = node.topology().await;
    let holds = node.holds_now().await;
    let mut verdicts: BTreeMap<GpuUuid, Option<String>> = node
        .verdicts()
        .await
        .into_iter()
        .map(|(uuid, v)| (uuid, why_not(&v)))
        .collect();
    // A GPU only a reboot brings back says so in its taint's value.
    for uuid in node.reboot_required() {
        verdicts.insert(uuid, Some("reboot-required".to_owned()));
    }
    let claimed = node.claimed();
    let now = devices::Situation {
        topology: &topology,
        holds: &holds,
        verdicts: &verdicts,
        claimed: &claimed,
        pool: &config.node_name,
    };
    slices::desired(&devices::offer(&all, &now, features), features)
}

fn selector(config: &DraConfig) -> String {
    format!("spec.driver={DRIVER},spec.nodeName={}", config.node_name)
}

async fn timed<T>(
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, Synced> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(kube::Error::Api(s))) if s.code == 422 => {
            Err(Synced::Rejected(format!("HTTP 422: {}", s.message)))
        }
        Ok(Err(e)) => Err(Synced::Retry(sentence(&e))),
        Err(_) => Err(Synced::Retry(format!(
            "no answer within {}s",
            CALL_TIMEOUT.as_secs()
        ))),
    }
}

fn to_ours(s: resource::ResourceSlice) -> Result<ResourceSlice, Synced> {
    serde_json::to_value(s)
        .and_then(serde_json::from_value)
        .map_err(|e| Synced::Retry(format!("a ResourceSlice of the server does not read: {e}")))
}

fn to_theirs(s: &ResourceSlice) -> Result<resource::ResourceSlice, Synced> {
    serde_json::to_value(s)
        .and_then(serde_json::from_value)
        .map_err(|e| Synced::Rejected(format!("bcd's ResourceSlice does not convert: {e}")))
}

/// Lists the pool's slices: them, and the list's resourceVersion.
async fn list(
    api: &Api<resource::ResourceSlice>,
    config: &DraConfig,
) -> Result<(Vec<ResourceSlice>, String), Synced> {
    let listed = timed(api.list(&ListParams::default().fields(&selector(config)))).await?;
    let version = listed.metadata.resource_version.clone().unwrap_or_default();
    let slices = listed
        .items
        .into_iter()
        .map(to_ours)
        .collect::<Result<Vec<_>, _>>()?;
    Ok((slices, version))
}

/// Writes `plan`: creates and updates first (consumers see the new generation complete),
/// then deletions with their preconditions (a slice already gone is no error). Says what
/// the server dropped of what was written.
async fn carry_out(api: &Api<resource::ResourceSlice>, plan: Plan) -> Result<Dropped, Synced> {
    let post = PostParams::default();
    let mut dropped = Dropped::default();
    let mut saw = |sent: &ResourceSlice, back: resource::ResourceSlice| {
        if let Ok(back) = to_ours(back) {
            let d = slices::dropped(sent, &back);
            dropped.taints |= d.taints;
            dropped.shares |= d.shares;
        }
    };
    for s in &plan.create {
        let back = timed(api.create(&post, &to_theirs(s)?)).await?;
        saw(s, back);
    }
    for s in &plan.update {
        let name = s.metadata.name.clone().unwrap_or_default();
        let back = timed(api.replace(&name, &post, &to_theirs(s)?)).await?;
        saw(s, back);
    }
    for d in &plan.delete {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: d.uid.clone(),
                resource_version: d.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match tokio::time::timeout(CALL_TIMEOUT, api.delete(&d.name, &params)).await {
            Ok(Ok(_)) => {}
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => {}
            Ok(Err(e)) => return Err(Synced::Retry(sentence(&e))),
            Err(_) => return Err(Synced::Retry("a deletion had no answer".into())),
        }
    }
    Ok(dropped)
}

/// The server's version, or `None` when it does not say (within [`CALL_TIMEOUT`]).
async fn server_version(client: &kube::Client) -> Option<ServerVersion> {
    let info = tokio::time::timeout(CALL_TIMEOUT, client.apiserver_version())
        .await
        .ok()?
        .ok()?;
    ServerVersion::parse(&info.major, &info.minor)
}

/// How many times the dry run is tried before bcd gives up on the newer fields.
pub const DRY_RUN_TRIES: u32 = 4;

/// `features` less what the server drops of a dry run of [`slices::probe`]: a server whose
/// gates are off says so before any real write, so nothing not offered ever looks free in
/// between. A dry run not answered is tried again ([`DRY_RUN_TRIES`] in all, with the loop's
/// backoff); a server that refuses it, or never answers, gets no newer field for the run (a
/// real write of them would not be checked first).
async fn dry_run(
    api: &Api<resource::ResourceSlice>,
    owner: &NodeRef,
    features: devices::Features,
    server: Option<ServerVersion>,
) -> devices::Features {
    let probe = slices::probe(owner, features);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let Ok(theirs) = to_theirs(&probe) else {
        return devices::Features::default();
    };
    let mut backoff = Backoff::new();
    let mut why = String::new();
    for _ in 0..DRY_RUN_TRIES {
        match timed(api.create(&dry, &theirs)).await {
            Ok(back) => {
                let Ok(back) = to_ours(back) else {
                    break;
                };
                let dropped = slices::dropped(&probe, &back);
                if dropped.is_empty() {
                    return features;
                }
                let left = features.without(dropped);
                tracing::warn!("{}", dropped_line(dropped, server, left));
                return left;
            }
            Err(Synced::Rejected(said)) => {
                why = said;
                break;
            }
            Err(Synced::Retry(said)) => {
                why = said;
                tokio::time::sleep(backoff.next()).await;
            }
            Err(Synced::Done | Synced::Dropped(_)) => break,
        }
    }
    let none = devices::Features::default();
    tracing::warn!(
        "the API server did not answer a dry run of a ResourceSlice ({why}); {}",
        features_line(server, none)
    );
    none
}

/// The log line that says which fields the server dropped, which gates are off, and what the
/// slices use from now on (`features`).
fn dropped_line(
    dropped: Dropped,
    version: Option<ServerVersion>,
    features: devices::Features,
) -> String {
    let (fields, gates) = match (dropped.taints, dropped.shares) {
        (true, true) => (
            "device taints and allowMultipleAllocations",
            "DRADeviceTaints and DRAConsumableCapacity feature gates are",
        ),
        (true, false) => ("device taints", "DRADeviceTaints feature gate is"),
        _ => (
            "allowMultipleAllocations",
            "DRAConsumableCapacity feature gate is",
        ),
    };
    format!(
        "the API server dropped {fields} from the node's ResourceSlices (its {gates} off); {}",
        features_line(version, features)
    )
}

/// The log line that says what the slices use on a server of `version`.
fn features_line(version: Option<ServerVersion>, f: devices::Features) -> String {
    let server = version.map_or_else(
        || "the API server did not say its version (taken as 1.34)".to_owned(),
        |v| format!("the API server is Kubernetes {v}"),
    );
    format!(
        "{server}: devices not offered are {}; GPU slots are {}",
        if f.taints {
            "tainted NoSchedule in the slice"
        } else {
            "left out of the slice"
        },
        if f.shares {
            "one shared device a GPU (consumable capacity)"
        } else {
            "slot devices"
        }
    )
}

/// A watch that ends sooner than this without delivering an event has failed: the loop
/// waits its backoff before it lists again (an empty watch or a lone ERROR event would
/// otherwise make it list and watch several times a second for ever). That backoff is the
/// watch's own, reset only by a watch that delivered an event or lasted this long after a
/// sync that wrote nothing (never by a list that worked, which resets the lists' and writes'
/// backoff); syncs that write one after another (the event is likely bcd's own write, and a
/// server that keeps something else makes every sync write) wait a backoff of their own.
pub const WATCH_MIN_LASTING: Duration = Duration::from_secs(10);

/// How one wait on the slices' watch ended.
#[derive(Debug, PartialEq, Eq)]
enum WatchEnd {
    /// An event came (bcd's own writes among them), or the watch lasted
    /// [`WATCH_MIN_LASTING`]: the server watches well.
    Good,
    /// The node's devices changed first: says nothing of the watch.
    Changed,
    /// The watch ended, or could not be opened, without an event within
    /// [`WATCH_MIN_LASTING`]: why.
    Failed(String),
}

/// What `status` says of a watch that keeps failing.
fn watch_problem(why: &str, wait: Duration) -> String {
    format!(
        "the watch of the node's ResourceSlices ends without an event ({why}); bcd lists them again every {}s meanwhile",
        wait.as_secs_f64().ceil()
    )
}

/// Waits on the slices' `watch` (when one is open; `opened` says why not) for an event, a
/// change of the node's devices (`None` when the node stopped) or the resync.
async fn wait_on<S>(
    watch: Option<Result<S, String>>,
    changes: &mut crate::source::Changes,
) -> Option<WatchEnd>
where
    S: tokio_stream::Stream<
        Item = Result<kube::api::WatchEvent<resource::ResourceSlice>, kube::Error>,
    >,
{
    let started = tokio::time::Instant::now();
    let resync = tokio::time::sleep(RESYNC_EVERY);
    tokio::pin!(resync);
    let end = match watch {
        Some(Ok(events)) => {
            let mut events = Box::pin(events);
            tokio::select! {
                alive = changes.changed() => return alive.then_some(WatchEnd::Changed),
                event = events.next() => match event {
                    Some(Ok(kube::api::WatchEvent::Error(status))) => WatchEnd::Failed(format!(
                        "an ERROR event: HTTP {}: {}",
                        status.code,
                        cut(&status.message, MAX_MESSAGE)
                    )),
                    Some(Ok(_)) => {
                        // A burst of events (bcd's own writes among them) is one sync.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        return Some(WatchEnd::Good);
                    }
                    Some(Err(e)) => WatchEnd::Failed(sentence(&e)),
                    None => WatchEnd::Failed("the server ended it".to_owned()),
                },
                () = &mut resync => WatchEnd::Good,
            }
        }
        Some(Err(why)) => WatchEnd::Failed(why),
        None => tokio::select! {
            alive = changes.changed() => return alive.then_some(WatchEnd::Changed),
            () = &mut resync => WatchEnd::Good,
        },
    };
    Some(match end {
        WatchEnd::Failed(_) if started.elapsed() >= WATCH_MIN_LASTING => WatchEnd::Good,
        other => other,
    })
}

/// Runs the pool's work loop for ever (until its task is aborted).
pub async fn publish<S: DeviceSource>(
    node: Arc<S>,
    client: ApiClient,
    state: Arc<DraState>,
    config: DraConfig,
) {
    let mut backoff = Backoff::new();
    let mut changes = node.changes();
    let owner = loop {
        let nodes: Api<Node> = Api::all(client.client());
        let why = match tokio::time::timeout(CALL_TIMEOUT, nodes.get(&config.node_name)).await {
            Ok(Ok(n)) => {
                break NodeRef {
                    name: config.node_name.clone(),
                    uid: n.metadata.uid.unwrap_or_default(),
                }
            }
            Ok(Err(kube::Error::Api(s))) if names_missing(&s, "nodes", &config.node_name) => {
                format!(
                    "the API server has no Node {}: is --node-name the kubelet's node name?",
                    config.node_name
                )
            }
            Ok(Err(e)) => format!(
                "the API server does not give the Node {}: {}",
                config.node_name,
                sentence(&e)
            ),
            Err(_) => format!(
                "the API server did not answer within {}s when asked for the Node {}",
                CALL_TIMEOUT.as_secs(),
                config.node_name
            ),
        };
        state.set_api_problem(Some(format!(
            "{why}; no ResourceSlice is published until it does"
        )));
        tokio::time::sleep(backoff.next()).await;
    };
    let api: Api<resource::ResourceSlice> = Api::all(client.client());
    let server = server_version(&client.client()).await;
    let mut features = devices::Features::for_server(server, node.gpu_slots());
    if features != devices::Features::default() {
        features = dry_run(&api, &owner, features, server).await;
    }
    state.set_features(features);
    // The health stream lists the devices in the form the slices use: it is told.
    node.touch();
    tracing::info!("{}", features_line(server, features));
    let mut rejected: Option<Vec<Vec<slices::Device>>> = None;
    // Why the watch keeps failing, while it does: said in `status` until a watch works.
    let mut watch_trouble: Option<String> = None;
    // Syncs in a row that wrote, and the wait between them once there are two.
    let mut writing = 0u32;
    let mut rewrite = Backoff::new();
    // The wait after a watch that failed: reset only by a watch that works, never by a list.
    let mut watch_backoff = Backoff::new();
    loop {
        // The client of the credentials now (renewed meanwhile, maybe).
        let api: Api<resource::ResourceSlice> = Api::all(client.client());
        let desired = desired_now(node.as_ref(), &config, features).await;
        let mut version = None;
        let mut wrote = false;
        let outcome = if rejected.as_ref() == Some(&desired) {
            None
        } else {
            Some(match list(&api, &config).await {
                Ok((existing, v)) => {
                    version = Some(v);
                    let plan = slices::plan(&owner, &existing, desired.clone());
                    let writes = plan.create.len() + plan.update.len() + plan.delete.len();
                    match carry_out(&api, plan).await {
                        Ok(dropped) => {
                            wrote = writes > 0;
                            if writes > 0 {
                                tracing::debug!(
                                    "ResourceSlices of {}: {writes} write(s)",
                                    owner.name
                                );
                                state.count(|c| c.slice_writes += writes as u64);
                            }
                            if dropped.is_empty() {
                                Synced::Done
                            } else {
                                Synced::Dropped(dropped)
                            }
                        }
                        Err(e) => e,
                    }
                }
                Err(e) => e,
            })
        };
        match outcome {
            None => {}
            Some(Synced::Done) => {
                // Lists and writes work: their backoff starts again (the watch's does not).
                backoff = Backoff::new();
                rejected = None;
                state.set_api_problem(watch_trouble.clone());
            }
            Some(Synced::Dropped(dropped)) if features.without(dropped) == features => {
                // Nothing left to give up: written again at once it would be dropped again.
                rejected = None;
                state.set_api_problem(watch_trouble.clone());
            }
            Some(Synced::Dropped(dropped)) => {
                features = features.without(dropped);
                state.set_features(features);
                node.touch();
                tracing::warn!("{}", dropped_line(dropped, server, features));
                continue;
            }
            Some(Synced::Rejected(why)) => {
                state.set_api_problem(Some(format!(
                    "the API server refused the node's ResourceSlices ({why}); they are not written again until the node's devices change"
                )));
                rejected = Some(desired);
            }
            Some(Synced::Retry(why)) => {
                state.set_api_problem(Some(format!(
                    "the node's ResourceSlices cannot be published now ({why}); bcd tries again, the node runs on"
                )));
                tokio::time::sleep(backoff.next()).await;
                continue;
            }
        }
        // Wait for a change of the node's devices, an event on the slices, or the resync.
        let watch = match version {
            Some(v) => {
                let params = WatchParams::default()
                    .fields(&selector(&config))
                    .timeout(WATCH_SECONDS);
                Some(
                    match tokio::time::timeout(CALL_TIMEOUT, api.watch(&params, &v)).await {
                        Ok(Ok(events)) => Ok(events),
                        Ok(Err(e)) => Err(format!("it cannot be opened: {}", sentence(&e))),
                        Err(_) => Err(format!(
                            "it was not opened within {}s",
                            CALL_TIMEOUT.as_secs()
                        )),
                    },
                )
            }
            None => None,
        };
        match wait_on(watch, &mut changes).await {
            None => return,
            // A change of the node's devices is a reason of its own to write.
            Some(WatchEnd::Changed) => writing = 0,
            // After a sync that wrote, the event is likely bcd's own write. One such sync is a
            // change; syncs that write one after another are a server that does not keep what
            // bcd writes: they wait a backoff of their own, so the loop never writes for ever
            // at the speed of its events.
            Some(WatchEnd::Good) if wrote => {
                writing += 1;
                if writing > 1 {
                    tokio::time::sleep(rewrite.next()).await;
                }
            }
            Some(WatchEnd::Good) => {
                watch_backoff = Backoff::new();
                writing = 0;
                rewrite = Backoff::new();
                if watch_trouble.take().is_some() && rejected.is_none() {
                    state.set_api_problem(None);
                }
            }
            Some(WatchEnd::Failed(why)) => {
                let wait = watch_backoff.next();
                let problem = watch_problem(&why, wait);
                state.set_api_problem(Some(problem.clone()));
                watch_trouble = Some(problem);
                tokio::time::sleep(wait).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // What broke: a proxy's 4 KiB HTML error page became the status problem, whole.
    #[test]
    fn a_servers_long_message_is_cut_in_the_problem_sentence() {
        let status = kube::core::Status {
            code: 400,
            message: format!("<html>{}</html>", "é".repeat(2000)),
            ..kube::core::Status::default()
        };
        let said = sentence(&kube::Error::Api(Box::new(status)));
        assert!(said.len() <= MAX_MESSAGE + 3, "{}", said.len());
        assert!(said.starts_with("HTTP 400: <html>"));
        assert!(said.ends_with("..."));
    }

    // What broke: a proxy's HTML 404, and the API server's own 404 for a resource it does not
    // serve, counted as "the claim is gone" and released two live claims.
    #[test]
    fn only_a_not_found_status_naming_the_claim_says_it_is_gone() {
        let status = |reason: &str, details: Option<(&str, &str)>| kube::core::Status {
            code: 404,
            reason: reason.into(),
            details: details.map(|(kind, name)| kube::core::response::StatusDetails {
                kind: kind.into(),
                name: name.into(),
                group: "resource.k8s.io".into(),
                uid: String::new(),
                causes: Vec::new(),
                retry_after_seconds: 0,
            }),
            ..kube::core::Status::default()
        };
        let gone = status("NotFound", Some(("resourceclaims", "a")));
        assert!(names_missing(&gone, "resourceclaims", "a"));
        for (case, s) in [
            ("a proxy's page (kube's reconstruction)", status("", None)),
            (
                "a resource the server does not serve",
                status("NotFound", None),
            ),
            (
                "another claim",
                status("NotFound", Some(("resourceclaims", "b"))),
            ),
            ("another kind", status("NotFound", Some(("nodes", "a")))),
        ] {
            assert!(!names_missing(&s, "resourceclaims", "a"), "{case}");
        }
        let mut not_404 = gone.clone();
        not_404.code = 410;
        assert!(!names_missing(&not_404, "resourceclaims", "a"));
    }

    #[test]
    fn the_backoff_doubles_and_stops_at_ten_seconds() {
        let mut b = Backoff::new();
        let waits: Vec<u128> = (0..10).map(|_| b.next().as_millis()).collect();
        assert_eq!(
            waits,
            [100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000, 10000]
        );
    }
}

#[cfg(test)]
mod loop_tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::dra::fake_api::{FakeApi, Reply};
    use crate::kubelet::fake_source::FakeSource;

    /// An API server that has the Node and no slice, keeps what is written, and answers
    /// every watch with `watch`.
    async fn server(watch: Reply) -> FakeApi {
        FakeApi::start(move |asked| {
            let t = asked.target.as_str();
            if t.starts_with("/api/v1/nodes/node-a") {
                Reply::json(
                    200,
                    &serde_json::json!({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": "node-a", "uid": "n-1"}}),
                )
            } else if t.contains("watch=") {
                watch.clone()
            } else if asked.method != "GET" {
                Reply::Echo
            } else if t.starts_with("/apis/resource.k8s.io/v1/resourceslices") {
                Reply::json(
                    200,
                    &serde_json::json!({"apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceSliceList", "metadata": {"resourceVersion": "5"},
                        "items": []}),
                )
            } else {
                Reply::json(404, &serde_json::json!({}))
            }
        })
        .await
    }

    /// `publish` against the server at `url` for `run`; the driver's state after it.
    async fn publish_for(url_config: String, run: Duration) -> Arc<DraState> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kubeconfig");
        std::fs::write(&file, url_config).unwrap();
        let client = ApiClient::connect(Some(&file)).await.unwrap();
        let state = Arc::new(DraState::default());
        let config = DraConfig {
            kubelet_dir: dir.path().join("kubelet"),
            cdi_runtime_dir: dir.path().join("run-cdi"),
            node_name: "node-a".into(),
            host: crate::sys::host::Host::fake(dir.path().join("host")),
            stale_pass: crate::dra::stale::STALE_PASS,
        };
        let task = tokio::spawn(publish(
            Arc::new(FakeSource::new()),
            client,
            state.clone(),
            config,
        ));
        tokio::time::sleep(run).await;
        task.abort();
        state
    }

    // What broke: an empty watch, or one ERROR event, made every node list and watch its
    // slices 7.4 times a second for ever (a successful list reset the backoff), and status
    // said nothing. The backoff is reset only by a watch that delivered an event or lasted.
    #[tokio::test]
    async fn a_watch_that_ends_at_once_backs_off_and_is_named_in_status() {
        let error_event = b"{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"code\":410,\"message\":\"too old resource version\",\"reason\":\"Expired\"}}\n";
        for (case, watch, said) in [
            (
                "an empty watch",
                Reply::Full(200, Vec::new()),
                "the server ended it",
            ),
            (
                "one ERROR event",
                Reply::Full(200, error_event.to_vec()),
                "an ERROR event: HTTP 410: too old resource version",
            ),
        ] {
            let api = server(watch).await;
            let state = publish_for(api.kubeconfig("token: t"), Duration::from_secs(3)).await;
            let lists = api
                .asked
                .lock()
                .unwrap()
                .iter()
                .filter(|a| {
                    a.method == "GET"
                        && a.target.contains("/resourceslices?")
                        && !a.target.contains("watch=")
                })
                .count();
            let watches = api.count("watch=");
            assert!(
                (2..=8).contains(&lists) && watches <= 8,
                "{case}: {lists} lists and {watches} watches in 3 s"
            );
            let problem = state.api_problem().unwrap_or_default();
            assert!(
                problem.contains("the watch of the node's ResourceSlices ends without an event")
                    && problem.contains(said),
                "{case}: {problem}"
            );
        }
    }

    // What broke (a review): a server that keeps something other than what bcd writes made
    // every sync write, and the write's own event reset the backoff: list and write at the
    // speed of the events for ever. After a sync that wrote, the loop waits the backoff.
    #[tokio::test]
    async fn a_server_that_never_keeps_the_slices_is_written_with_a_growing_wait() {
        let event = serde_json::json!({"type": "ADDED", "object": {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "node-a-gpu.bcd.dev-x", "resourceVersion": "6"},
            "spec": {"driver": "gpu.bcd.dev", "nodeName": "node-a",
                     "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1}}}});
        let api = server(Reply::Full(200, format!("{event}\n").into_bytes())).await;
        publish_for(api.kubeconfig("token: t"), Duration::from_secs(3)).await;
        let writes = api
            .asked
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.method == "POST" && !a.target.contains("dryRun"))
            .count();
        assert!((2..=8).contains(&writes), "{writes} writes in 3 s");
    }

    // What broke: a refused connection was said as "is --node-name the kubelet's node name?".
    #[tokio::test]
    async fn an_unreachable_server_is_said_as_it_is_not_as_a_wrong_node_name() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let api = server(Reply::Full(200, Vec::new())).await;
        let config = api
            .kubeconfig("token: t")
            .replace(&api.url, &format!("http://127.0.0.1:{port}"));
        let state = publish_for(config, Duration::from_millis(500)).await;
        let problem = state.api_problem().unwrap();
        assert!(
            problem.starts_with("the API server does not give the Node node-a:")
                && !problem.contains("--node-name"),
            "{problem}"
        );
    }

    // What broke: ERROR lines every 10 s for as long as the API server was away. One WARN
    // when the problem starts, one INFO when it ends; changes between are in status only.
    #[test]
    fn an_api_problem_is_logged_once_when_it_starts_and_once_when_it_ends() {
        let state = DraState::default();
        let lines = crate::test_log::logged(|| {
            for _ in 0..3 {
                state.set_api_problem(Some("away: connection refused".into()));
                state.set_api_problem(Some("away: no answer within 10s".into()));
            }
            state.set_api_problem(None);
            state.set_api_problem(None);
        });
        let at = |level: &str| lines.iter().filter(|l| l.contains(level)).count();
        assert_eq!(
            (at("WARN"), at("INFO"), at("ERROR")),
            (1, 1, 0),
            "{lines:#?}"
        );
    }
}
