//! The plugins' servers and their registration, and the task that computes what they offer.
//!
//! Each resource's plugin: binds `DIR/bcd-<resource>.sock` (a stale socket file is
//! replaced), serves the device plugin API on it, then registers with `DIR/kubelet.sock`.
//! It then watches both files every [`WATCH_EVERY`]: when `kubelet.sock` is made anew (the
//! kubelet restarted) or its own socket is gone (the kubelet removes them on restart), it
//! serves again and registers again, so a restarted kubelet has every plugin back well
//! within 2 s.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::devices::{self, Offer, Offered, Resource};
use super::proto::deviceplugin as pb;
use super::proto::deviceplugin::device_plugin_server::{DevicePlugin, DevicePluginServer};
use super::proto::deviceplugin::registration_client::RegistrationClient;
use super::KubeState;
use super::{grpc, KubeletConfig, API_VERSION, KUBELET_SOCKET};
use crate::cdi::DeviceId;
use crate::plugin_socket::{bind, identity, incoming, SocketFile};
use crate::source::DeviceSource;

/// How often a plugin looks at `kubelet.sock` and its own socket.
pub const WATCH_EVERY: Duration = Duration::from_millis(250);
/// How long a registration may take (the kubelet dials back before it answers).
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a plugin waits after a failed registration before it tries again.
pub const REGISTER_RETRY: Duration = Duration::from_secs(1);
/// How often the offer is computed again even when nothing signalled a change (the
/// inventory's passthrough memory, samples).
pub const RECOMPUTE_EVERY: Duration = Duration::from_secs(5);

/// One resource's device plugin service, on the node's devices `S`.
pub struct Plugin<S> {
    resource: Resource,
    node: Arc<S>,
    kube: Arc<KubeState>,
    offer: watch::Receiver<Offer>,
}

impl<S> Clone for Plugin<S> {
    fn clone(&self) -> Self {
        Self {
            resource: self.resource.clone(),
            node: self.node.clone(),
            kube: self.kube.clone(),
            offer: self.offer.clone(),
        }
    }
}

impl<S> std::fmt::Debug for Plugin<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

impl<S: DeviceSource> Plugin<S> {
    /// The plugin of `resource`, offering what `offer` says.
    pub fn new(
        resource: Resource,
        node: Arc<S>,
        kube: Arc<KubeState>,
        offer: watch::Receiver<Offer>,
    ) -> Self {
        Self {
            resource,
            node,
            kube,
            offer,
        }
    }

    fn devices(&self) -> Vec<Offered> {
        self.offer
            .borrow()
            .get(&self.resource)
            .cloned()
            .unwrap_or_default()
    }
}

fn to_wire(devices: &[Offered]) -> pb::ListAndWatchResponse {
    pb::ListAndWatchResponse {
        devices: devices
            .iter()
            .map(|d| pb::Device {
                id: d.id.to_string(),
                health: if d.healthy {
                    devices::HEALTHY
                } else {
                    devices::UNHEALTHY
                }
                .to_owned(),
                topology: d.numa.map(|n| pb::TopologyInfo {
                    nodes: vec![pb::NumaNode { id: i64::from(n) }],
                }),
            })
            .collect(),
    }
}

type Stream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl<S: DeviceSource> DevicePlugin for Plugin<S> {
    async fn get_device_plugin_options(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::DevicePluginOptions>, Status> {
        Ok(Response::new(options()))
    }

    type ListAndWatchStream = Stream;

    async fn list_and_watch(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let (tx, rx) = mpsc::channel(4);
        let mut offer = self.offer.clone();
        let resource = self.resource.clone();
        tokio::spawn(async move {
            let mut last: Option<Vec<Offered>> = None;
            loop {
                let now = offer
                    .borrow_and_update()
                    .get(&resource)
                    .cloned()
                    .unwrap_or_default();
                if last.as_ref() != Some(&now) {
                    if tx.send(Ok(to_wire(&now))).await.is_err() {
                        return;
                    }
                    last = Some(now);
                }
                tokio::select! {
                    changed = offer.changed() => if changed.is_err() { return },
                    () = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<pb::PreferredAllocationRequest>,
    ) -> Result<Response<pb::PreferredAllocationResponse>, Status> {
        let inventory = self.node.inventory().await;
        let all: Vec<DeviceId> = self.devices().into_iter().map(|d| d.id).collect();
        let offered: std::collections::BTreeSet<&DeviceId> = all.iter().collect();
        let parse = |ids: &[String]| offered_only(ids, &offered);
        let container_responses = request
            .into_inner()
            .container_requests
            .iter()
            .map(|c| {
                let size = usize::try_from(c.allocation_size)
                    .unwrap_or(0)
                    .min(all.len());
                let got = devices::preferred(
                    &inventory,
                    &parse(&c.available_device_i_ds),
                    &parse(&c.must_include_device_i_ds),
                    size,
                    &all,
                );
                pb::ContainerPreferredAllocationResponse {
                    device_i_ds: got.iter().map(|d| d.to_string()).collect(),
                }
            })
            .collect();
        Ok(Response::new(pb::PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<pb::AllocateRequest>,
    ) -> Result<Response<pb::AllocateResponse>, Status> {
        let offered: Vec<DeviceId> = self.devices().into_iter().map(|d| d.id).collect();
        let request = request.into_inner();
        if let Some(twice) = asked_twice(&request.container_requests) {
            let why = format!(
                "{twice} is asked for by two containers of one Allocate; a device goes to one container"
            );
            tracing::warn!("{}: Allocate refused: {why}", self.resource);
            return Err(Status::invalid_argument(why));
        }
        let asked: Vec<Vec<String>> = request
            .container_requests
            .into_iter()
            .map(|c| c.devices_ids)
            .collect();
        let allocated = super::allocate::allocate_all(
            self.node.as_ref(),
            &self.kube,
            &self.resource,
            &offered,
            &asked,
        )
        .await
        .map_err(|e| {
            tracing::warn!("{}: Allocate refused: {e}", self.resource);
            Status::failed_precondition(e.to_string())
        })?;
        let mut container_responses = Vec::with_capacity(allocated.len());
        for ((hold, names), ids) in allocated.into_iter().zip(&asked) {
            tracing::info!(
                "{}: allocated {} as Kubernetes hold {hold}",
                self.resource,
                ids.join(",")
            );
            container_responses.push(pb::ContainerAllocateResponse {
                cdi_devices: names
                    .into_iter()
                    .map(|name| pb::CdiDevice { name })
                    .collect(),
                ..pb::ContainerAllocateResponse::default()
            });
        }
        self.node.touch();
        Ok(Response::new(pb::AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<pb::PreStartContainerRequest>,
    ) -> Result<Response<pb::PreStartContainerResponse>, Status> {
        Ok(Response::new(pb::PreStartContainerResponse {}))
    }
}

fn options() -> pb::DevicePluginOptions {
    pb::DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}

/// Registers `resource` whose socket is `endpoint` with the kubelet at `kubelet`.
///
/// # Errors
/// The sentence: the kubelet could not be reached or refused.
pub async fn register(kubelet: &Path, endpoint: &str, resource: &Resource) -> Result<(), String> {
    let channel = grpc::dial(kubelet).await.map_err(|e| e.to_string())?;
    let mut client = RegistrationClient::new(channel);
    let request = pb::RegisterRequest {
        version: API_VERSION.to_owned(),
        endpoint: endpoint.to_owned(),
        resource_name: resource.as_str().to_owned(),
        options: Some(options()),
    };
    tokio::time::timeout(REGISTER_TIMEOUT, client.register(request))
        .await
        .map_err(|_| {
            format!(
                "the kubelet did not answer Register within {}s",
                REGISTER_TIMEOUT.as_secs()
            )
        })?
        .map_err(|s| format!("the kubelet refused the registration: {}", s.message()))?;
    Ok(())
}

/// Serves and registers one resource's plugin for ever, again after each kubelet restart.
async fn run_plugin<S: DeviceSource>(plugin: Plugin<S>, dir: PathBuf) {
    let name = plugin.resource.socket_name();
    let socket = dir.join(&name);
    let kubelet = dir.join(KUBELET_SOCKET);
    // Each failure is logged once, not at every retry.
    let mut said = String::new();
    let say = |said: &mut String, sentence: String| {
        if sentence != *said {
            tracing::warn!("{sentence}");
            *said = sentence;
        }
    };
    loop {
        let listener = match bind(&socket) {
            Ok(l) => l,
            Err(e) => {
                say(
                    &mut said,
                    format!(
                        "{}: cannot serve its socket {}: {e}",
                        plugin.resource,
                        socket.display()
                    ),
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let served = identity(&socket);
        let _remove = SocketFile {
            path: socket.clone(),
            identity: served,
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(DevicePluginServer::new(plugin.clone()))
                .serve_with_incoming_shutdown(
                    incoming(listener, plugin.resource.as_str()),
                    async {
                        let _ = stop_rx.await;
                    },
                ),
        );
        // Registered with the kubelet whose socket had this identity.
        let mut registered: Option<(u64, u64)> = None;
        loop {
            let now = identity(&kubelet);
            if identity(&socket) != served {
                break;
            }
            if registered.is_some() && now != registered {
                break;
            }
            if registered.is_none() && now.is_none() {
                // Nothing registers until the kubelet makes its socket: said once, and in
                // status, so a wrong --device-plugin-dir or a stopped kubelet is visible.
                let sentence = format!(
                    "the kubelet device plugins are not registered: there is no {} (is the kubelet running, and is --device-plugin-dir its device-plugins folder?)",
                    kubelet.display()
                );
                say(&mut said, format!("{}: {sentence}", plugin.resource));
                plugin.kube.set_unregistered(Some(sentence));
            }
            if registered.is_none() && now.is_some() {
                match register(&kubelet, &name, &plugin.resource).await {
                    Ok(()) => {
                        tracing::info!(
                            "{}: registered with the kubelet ({})",
                            plugin.resource,
                            kubelet.display()
                        );
                        registered = now;
                        said.clear();
                        plugin.kube.set_unregistered(None);
                    }
                    Err(e) => {
                        say(&mut said, format!("{}: {e}", plugin.resource));
                        // A kubelet that refuses is not asked four times a second.
                        tokio::time::sleep(REGISTER_RETRY).await;
                    }
                }
            }
            tokio::time::sleep(WATCH_EVERY).await;
        }
        let _ = stop_tx.send(());
        server.abort();
        tracing::info!(
            "{}: the kubelet restarted; serving and registering again",
            plugin.resource
        );
    }
}

/// The Kubernetes side of the node: computes the offer at every change, starts one plugin
/// per resource as resources appear, and runs the release loop. Runs until the node stops.
pub async fn run<S: DeviceSource>(node: Arc<S>, kube: Arc<KubeState>, config: KubeletConfig) {
    if let Err(e) = std::fs::create_dir_all(&config.plugin_dir) {
        node.problem(format!(
            "the device plugin folder {} cannot be created ({e}); Kubernetes gets no device",
            config.plugin_dir.display()
        ));
    }
    let (offer_tx, offer_rx) = watch::channel(Offer::new());
    let mut changes = node.changes();
    // A JoinSet aborts its tasks when dropped: the plugins stop with the node.
    let mut tasks = tokio::task::JoinSet::new();
    let mut plugins: BTreeSet<Resource> = BTreeSet::new();
    tasks.spawn(super::release::run(
        node.clone(),
        kube.clone(),
        config.clone(),
    ));
    let mut every = tokio::time::interval(RECOMPUTE_EVERY);
    loop {
        let offer = super::offer_now(node.as_ref()).await;
        count_transitions(&kube, &offer_tx.borrow(), &offer);
        for resource in offer.keys() {
            if plugins.insert(resource.clone()) {
                let plugin = Plugin::new(
                    resource.clone(),
                    node.clone(),
                    kube.clone(),
                    offer_rx.clone(),
                );
                tasks.spawn(run_plugin(plugin, config.plugin_dir.clone()));
            }
        }
        offer_tx.send_if_modified(|o| {
            if *o == offer {
                false
            } else {
                *o = offer;
                true
            }
        });
        tokio::select! {
            alive = changes.changed() => if !alive { break },
            _ = every.tick() => {}
        }
    }
    tasks.shutdown().await;
}

fn count_transitions(kube: &KubeState, before: &Offer, after: &Offer) {
    for (resource, devices) in after {
        for d in devices {
            let was = before
                .get(resource)
                .and_then(|b| b.iter().find(|x| x.id == d.id))
                .map(|x| x.healthy);
            if was.is_some_and(|w| w != d.healthy) {
                kube.count(resource.as_str(), |c| {
                    if d.healthy {
                        c.to_healthy += 1;
                    } else {
                        c.to_unhealthy += 1;
                    }
                });
            }
        }
    }
}

/// The devices of `ids` this plugin offers, each once, sorted: a preferred-allocation
/// request is bounded by the offer, not by what a (hostile) kubelet sends, so choosing among
/// them stays cheap.
fn offered_only(ids: &[String], offered: &std::collections::BTreeSet<&DeviceId>) -> Vec<DeviceId> {
    let mut known: Vec<DeviceId> = ids
        .iter()
        .filter_map(|s| s.parse().ok())
        .filter(|d| offered.contains(d))
        .collect();
    known.sort();
    known.dedup();
    known
}

/// A device two containers of one `Allocate` ask for, if any (by its normal form; an id that
/// does not parse is refused later, by the container that names it).
fn asked_twice(containers: &[pb::ContainerAllocateRequest]) -> Option<String> {
    let mut seen = std::collections::BTreeSet::new();
    for c in containers {
        let mine: std::collections::BTreeSet<DeviceId> = c
            .devices_ids
            .iter()
            .filter_map(|d| d.parse().ok())
            .collect();
        for d in mine {
            if !seen.insert(d.clone()) {
                return Some(d.to_string());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(ids: &[&str]) -> pb::ContainerAllocateRequest {
        pb::ContainerAllocateRequest {
            devices_ids: ids.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    // What broke: a preferred-allocation request of 100,000 ids (well formed, none offered,
    // or one offered id repeated) was chosen among as given: hours of a worker's time.
    #[test]
    fn a_preferred_allocation_request_is_bounded_by_the_offer() {
        let gpu: DeviceId = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b".parse().unwrap();
        let offered = std::collections::BTreeSet::from([&gpu]);
        let mut ids: Vec<String> = (0..100_000u32)
            .map(|i| format!("GPU-{i:08x}-0000-0000-0000-000000000000"))
            .collect();
        ids.extend(std::iter::repeat_n(gpu.to_string(), 1000));
        assert_eq!(offered_only(&ids, &offered), [gpu]);
    }

    // What broke: two containers of one Allocate asking for one device each got it, or the
    // second one's hold released the first's while its answer already named the device.
    #[test]
    fn a_device_two_containers_of_one_allocate_ask_for_is_named() {
        let a = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";
        let b = "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a";
        assert_eq!(
            asked_twice(&[container(&[a, b]), container(&[b])]),
            Some(b.to_owned())
        );
        assert_eq!(
            asked_twice(&[container(&[a]), container(&[&a.to_uppercase()])]),
            Some(a.to_owned()),
            "compared in their normal form"
        );
        assert_eq!(
            asked_twice(&[container(&[a, a]), container(&[b])]),
            None,
            "one container may repeat one"
        );
    }
}
