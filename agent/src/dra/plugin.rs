//! The kubelet side of the driver: its sockets, their services and their lifetime.
//!
//! - `<kubelet>/plugins/gpu.bcd.dev/dra.sock` serves the DRA plugin API under `v1` and
//!   `v1beta1` (one implementation, [`super::prepare::Driver`]) and the device health stream
//!   `v1alpha1.DRAResourceHealth`.
//! - `<kubelet>/plugins_registry/gpu.bcd.dev-reg.sock` serves `pluginregistration.Registration`:
//!   creating it is the registration, so it is created only once `dra.sock` listens. A
//!   restarted kubelet finds it again; bcd creates it anew only when it (or its folder) is
//!   removed, and serves both anew when `dra.sock` is removed. Both sockets are 0600, and
//!   only root (the kubelet) and bcd's own uid may connect.
//! - The health stream sends every device of the driver on each change of the verdicts, the
//!   holds or the inventory, and again every [`HEALTH_RESEND`] (well inside the
//!   [`HEALTH_TIMEOUT`] it announces): healthy and degraded GPUs' devices are `HEALTHY`,
//!   unhealthy ones `UNHEALTHY` with the verdict's reasons as the message, and a GPU nothing
//!   answered for `UNKNOWN`.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::claims::ClaimReader;
use super::prepare::{all_devices, ClaimRef, Driver, PreparedDevice};
use super::proto::health as hpb;
use super::proto::registration as rpb;
use super::proto::{v1, v1beta1};
use super::{DraConfig, DraState, DRIVER};
use crate::health::verdict::HealthState;
use crate::plugin_socket::{bind, identity, incoming, SocketFile};
use crate::source::DeviceSource;

/// How often the sockets are looked at.
pub const WATCH_EVERY: Duration = Duration::from_millis(250);
/// How long the kubelet keeps a device's health before it counts as unknown.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the whole device list is sent even when nothing changed.
pub const HEALTH_RESEND: Duration = Duration::from_secs(20);
/// The longest health message the kubelet takes.
pub const MAX_HEALTH_MESSAGE: usize = 1024;
/// The services the plugin offers, in the order the kubelet should prefer them.
pub const SUPPORTED_VERSIONS: [&str; 3] = [
    "v1.DRAPlugin",
    "v1beta1.DRAPlugin",
    "v1alpha1.DRAResourceHealth",
];
/// The registration's plugin type.
pub const PLUGIN_TYPE: &str = "DRAPlugin";

/// The DRA plugin services on the driver.
pub struct Service<S, R> {
    driver: Arc<Driver<S, R>>,
}

impl<S, R> Clone for Service<S, R> {
    fn clone(&self) -> Self {
        Self {
            driver: self.driver.clone(),
        }
    }
}

impl<S, R> std::fmt::Debug for Service<S, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service").finish_non_exhaustive()
    }
}

impl<S: DeviceSource, R: ClaimReader> Service<S, R> {
    /// The services of `driver`.
    pub fn new(driver: Arc<Driver<S, R>>) -> Self {
        Self { driver }
    }
}

fn claims_v1(claims: Vec<v1::Claim>) -> Vec<ClaimRef> {
    claims
        .into_iter()
        .map(|c| ClaimRef {
            namespace: c.namespace,
            uid: c.uid,
            name: c.name,
        })
        .collect()
}

fn device_v1(d: PreparedDevice) -> v1::Device {
    v1::Device {
        request_names: d.requests,
        pool_name: d.pool,
        device_name: d.device,
        cdi_device_ids: d.cdi_ids,
        share_id: d.share_id,
    }
}

#[tonic::async_trait]
impl<S: DeviceSource, R: ClaimReader> v1::dra_plugin_server::DraPlugin for Service<S, R> {
    async fn node_prepare_resources(
        &self,
        request: Request<v1::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1::NodePrepareResourcesResponse>, Status> {
        let claims = claims_v1(request.into_inner().claims);
        let answers = self.driver.prepare(claims).await;
        Ok(Response::new(v1::NodePrepareResourcesResponse {
            claims: answers
                .into_iter()
                .map(|(uid, a)| {
                    let one = match a {
                        Ok(devices) => v1::NodePrepareResourceResponse {
                            devices: devices.into_iter().map(device_v1).collect(),
                            error: String::new(),
                        },
                        Err(e) => v1::NodePrepareResourceResponse {
                            devices: Vec::new(),
                            error: e.to_string(),
                        },
                    };
                    (uid, one)
                })
                .collect(),
        }))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<v1::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1::NodeUnprepareResourcesResponse>, Status> {
        let claims = claims_v1(request.into_inner().claims);
        let answers = self.driver.unprepare(claims).await;
        Ok(Response::new(v1::NodeUnprepareResourcesResponse {
            claims: answers
                .into_iter()
                .map(|(uid, a)| {
                    let error = a.err().map(|e| e.to_string()).unwrap_or_default();
                    (uid, v1::NodeUnprepareResourceResponse { error })
                })
                .collect(),
        }))
    }
}

impl From<v1beta1::Claim> for v1::Claim {
    fn from(c: v1beta1::Claim) -> Self {
        Self {
            namespace: c.namespace,
            uid: c.uid,
            name: c.name,
        }
    }
}

/// `v1beta1`: the same calls, translated to and from `v1` (the messages differ only in
/// `Device.share_id`, which `v1beta1` lacks).
#[tonic::async_trait]
impl<S: DeviceSource, R: ClaimReader> v1beta1::dra_plugin_server::DraPlugin for Service<S, R> {
    async fn node_prepare_resources(
        &self,
        request: Request<v1beta1::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1beta1::NodePrepareResourcesResponse>, Status> {
        let claims = request
            .into_inner()
            .claims
            .into_iter()
            .map(v1::Claim::from)
            .collect();
        let answer = v1::dra_plugin_server::DraPlugin::node_prepare_resources(
            self,
            Request::new(v1::NodePrepareResourcesRequest { claims }),
        )
        .await?
        .into_inner();
        Ok(Response::new(v1beta1::NodePrepareResourcesResponse {
            claims: answer
                .claims
                .into_iter()
                .map(|(uid, a)| {
                    let devices = a
                        .devices
                        .into_iter()
                        .map(|d| v1beta1::Device {
                            request_names: d.request_names,
                            pool_name: d.pool_name,
                            device_name: d.device_name,
                            cdi_device_ids: d.cdi_device_ids,
                        })
                        .collect();
                    (
                        uid,
                        v1beta1::NodePrepareResourceResponse {
                            devices,
                            error: a.error,
                        },
                    )
                })
                .collect(),
        }))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<v1beta1::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1beta1::NodeUnprepareResourcesResponse>, Status> {
        let claims = request
            .into_inner()
            .claims
            .into_iter()
            .map(v1::Claim::from)
            .collect();
        let answer = v1::dra_plugin_server::DraPlugin::node_unprepare_resources(
            self,
            Request::new(v1::NodeUnprepareResourcesRequest { claims }),
        )
        .await?
        .into_inner();
        Ok(Response::new(v1beta1::NodeUnprepareResourcesResponse {
            claims: answer
                .claims
                .into_iter()
                .map(|(uid, a)| {
                    (
                        uid,
                        v1beta1::NodeUnprepareResourceResponse { error: a.error },
                    )
                })
                .collect(),
        }))
    }
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// Every device of the driver in the form the slices use (`features`), with its health now
/// (`last_updated_time` is the caller's).
pub async fn health_now<S: DeviceSource>(
    node: &S,
    config: &DraConfig,
    features: super::devices::Features,
) -> Vec<hpb::DeviceHealth> {
    let verdicts = node.verdicts().await;
    super::devices::publishable(&all_devices(node, config).await, features)
        .into_iter()
        .map(|d| {
            let (health, message) = match verdicts.get(&d.gpu) {
                _ if d.missing => (
                    hpb::HealthStatus::Unhealthy,
                    "the node's inventory does not show this device now (nvidia-smi -q -x failed, or the GPU's MIG layout or bcd's --gpu-slots changed); its claim keeps it".to_owned(),
                ),
                Some(v) if v.healthy() => (hpb::HealthStatus::Healthy, String::new()),
                Some(v) if v.health == HealthState::Unhealthy => {
                    let why: Vec<String> = v
                        .reasons
                        .iter()
                        .map(|r| format!("{} ({})", r.message, r.action))
                        .collect();
                    (hpb::HealthStatus::Unhealthy, why.join("; "))
                }
                _ => (
                    hpb::HealthStatus::Unknown,
                    "nvidia-smi has not answered for its GPU".to_owned(),
                ),
            };
            hpb::DeviceHealth {
                device: Some(hpb::DeviceIdentifier {
                    pool_name: config.node_name.clone(),
                    device_name: d.name,
                }),
                health: health as i32,
                last_updated_time: 0,
                health_check_timeout_seconds: i64::try_from(HEALTH_TIMEOUT.as_secs())
                    .unwrap_or(i64::MAX),
                message: cut(&message, MAX_HEALTH_MESSAGE),
            }
        })
        .collect()
}

type HealthStream = Pin<
    Box<dyn tokio_stream::Stream<Item = Result<hpb::NodeWatchResourcesResponse, Status>> + Send>,
>;

#[tonic::async_trait]
impl<S: DeviceSource, R: ClaimReader> hpb::dra_resource_health_server::DraResourceHealth
    for Service<S, R>
{
    type NodeWatchResourcesStream = HealthStream;

    async fn node_watch_resources(
        &self,
        _: Request<hpb::NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        let (tx, rx) = mpsc::channel(4);
        let node = self.driver.node().clone();
        let config = self.driver.config().clone();
        let state = self.driver.state().clone();
        tokio::spawn(async move {
            let mut changes = node.changes();
            let mut last: Option<Vec<hpb::DeviceHealth>> = None;
            let mut sent_at = tokio::time::Instant::now();
            loop {
                let now = health_now(node.as_ref(), &config, state.features()).await;
                let due = sent_at.elapsed() >= HEALTH_RESEND;
                if last.as_ref() != Some(&now) || due {
                    let stamp = i64::try_from(crate::state::unix_now()).unwrap_or(i64::MAX);
                    let devices = now
                        .iter()
                        .cloned()
                        .map(|mut d| {
                            d.last_updated_time = stamp;
                            d
                        })
                        .collect();
                    let message = hpb::NodeWatchResourcesResponse { devices };
                    if tx.send(Ok(message)).await.is_err() {
                        return;
                    }
                    last = Some(now);
                    sent_at = tokio::time::Instant::now();
                }
                tokio::select! {
                    alive = changes.changed() => if !alive { return },
                    () = tokio::time::sleep(HEALTH_RESEND.saturating_sub(sent_at.elapsed())) => {}
                    () = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// The registration service: what the kubelet reads of the plugin, and where its answer goes.
#[derive(Debug, Clone)]
pub struct Registrar {
    endpoint: String,
    state: Arc<DraState>,
}

#[tonic::async_trait]
impl rpb::registration_server::Registration for Registrar {
    async fn get_info(
        &self,
        _: Request<rpb::InfoRequest>,
    ) -> Result<Response<rpb::PluginInfo>, Status> {
        Ok(Response::new(rpb::PluginInfo {
            r#type: PLUGIN_TYPE.to_owned(),
            name: DRIVER.to_owned(),
            endpoint: self.endpoint.clone(),
            supported_versions: SUPPORTED_VERSIONS.iter().map(|s| (*s).to_owned()).collect(),
        }))
    }

    async fn notify_registration_status(
        &self,
        request: Request<rpb::RegistrationStatus>,
    ) -> Result<Response<rpb::RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        if status.plugin_registered {
            tracing::info!("the kubelet registered the DRA driver {DRIVER}");
            self.state.registered(Ok(()));
        } else {
            let why = cut(&status.error, MAX_HEALTH_MESSAGE);
            tracing::warn!("the kubelet did not register the DRA driver {DRIVER}: {why}");
            self.state.registered(Err(why));
        }
        Ok(Response::new(rpb::RegistrationStatusResponse {}))
    }
}

/// A socket served until the returned guard is dropped, and the guard that removes its file.
struct Served {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _file: SocketFile,
    identity: Option<(u64, u64)>,
    path: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Served {
    /// Whether the file served is still there (not removed or replaced).
    fn still_there(&self) -> bool {
        identity(&self.path) == self.identity
    }
}

/// Binds `path` (its folder made first) and serves `router` on it.
fn serve(path: &Path, router: tonic::transport::server::Router) -> std::io::Result<Served> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let listener = bind(path)?;
    let served = identity(path);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(
        router.serve_with_incoming_shutdown(incoming(listener, DRIVER), async {
            let _ = stopped.await;
        }),
    );
    Ok(Served {
        stop: Some(stop),
        _file: SocketFile {
            path: path.to_path_buf(),
            identity: served,
        },
        identity: served,
        path: path.to_path_buf(),
    })
}

fn dra_router<S: DeviceSource, R: ClaimReader>(
    service: &Service<S, R>,
) -> tonic::transport::server::Router {
    tonic::transport::Server::builder()
        .add_service(v1::dra_plugin_server::DraPluginServer::new(service.clone()))
        .add_service(v1beta1::dra_plugin_server::DraPluginServer::new(
            service.clone(),
        ))
        .add_service(hpb::dra_resource_health_server::DraResourceHealthServer::new(service.clone()))
}

fn registration_router(registrar: &Registrar) -> tonic::transport::server::Router {
    tonic::transport::Server::builder().add_service(
        rpb::registration_server::RegistrationServer::new(registrar.clone()),
    )
}

/// Serves the driver's sockets for ever: `dra.sock` first, then the registration socket;
/// the registration socket anew when it (or its folder) is removed, both anew when
/// `dra.sock` is removed. Runs until the node stops (its task is aborted).
pub async fn run<S: DeviceSource, R: ClaimReader>(driver: Arc<Driver<S, R>>, state: Arc<DraState>) {
    let config = driver.config().clone();
    let service = Service::new(driver);
    let dra_socket = config.dra_socket();
    let endpoint = std::path::absolute(&dra_socket)
        .unwrap_or_else(|_| dra_socket.clone())
        .to_string_lossy()
        .into_owned();
    let registrar = Registrar {
        endpoint,
        state: state.clone(),
    };
    let reg_socket = config.registration_socket();
    loop {
        let dra = match serve(&dra_socket, dra_router(&service)) {
            Ok(s) => s,
            Err(e) => {
                state.set_problem(Some(format!(
                    "the DRA driver cannot serve its socket {}: {e}",
                    dra_socket.display()
                )));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut reg: Option<Served> = None;
        while dra.still_there() {
            if !reg.as_ref().is_some_and(Served::still_there) {
                // Dropping the old one first stops it; its file is gone already.
                reg = None;
                match serve(&reg_socket, registration_router(&registrar)) {
                    Ok(s) => {
                        tracing::info!(
                            "DRA driver {DRIVER}: serving {} and registering through {}",
                            dra_socket.display(),
                            reg_socket.display()
                        );
                        state.set_problem(None);
                        reg = Some(s);
                    }
                    Err(e) => state.set_problem(Some(format!(
                        "the DRA driver cannot create its registration socket {}: {e}; the kubelet does not know it",
                        reg_socket.display()
                    ))),
                }
            }
            tokio::time::sleep(WATCH_EVERY).await;
        }
        tracing::info!(
            "DRA driver {DRIVER}: {} was removed; serving and registering again",
            dra_socket.display()
        );
    }
}
