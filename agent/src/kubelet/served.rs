//! The plugin service and the release pass on a node state built in the test (the demo
//! host, collected), with a PodResources server of tonic's on a temporary socket: the gRPC
//! side tested without the Python stand-in.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tonic::Request;

use super::devices::Resource;
use super::plugin::Plugin;
use super::proto::deviceplugin as pb;
use super::proto::deviceplugin::device_plugin_server::DevicePlugin;
use super::proto::podresources as pr;
use super::proto::podresources::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use super::KubeletConfig;
use crate::node::shared::{test_node, Node};

const GPU0: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";
const GPU1: &str = "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a";

/// One pod's devices: the resource and its device ids.
type PodDevices = (String, Vec<String>);

/// A PodResources server whose pods the test sets.
#[derive(Clone, Default)]
struct Pods(Arc<Mutex<Vec<PodDevices>>>);

#[tonic::async_trait]
impl PodResourcesLister for Pods {
    async fn list(
        &self,
        _: Request<pr::ListPodResourcesRequest>,
    ) -> Result<tonic::Response<pr::ListPodResourcesResponse>, tonic::Status> {
        let pods = self.0.lock().unwrap().clone();
        Ok(tonic::Response::new(pr::ListPodResourcesResponse {
            pod_resources: pods
                .into_iter()
                .map(|(resource, ids)| pr::PodResources {
                    name: "p".into(),
                    namespace: "default".into(),
                    containers: vec![pr::ContainerResources {
                        name: "c".into(),
                        devices: vec![pr::ContainerDevices {
                            resource_name: resource,
                            device_ids: ids,
                            topology: None,
                        }],
                        cpu_ids: vec![],
                    }],
                })
                .collect(),
        }))
    }
}

async fn collected(dir: &std::path::Path) -> Arc<Node> {
    let node = Arc::new(test_node(dir));
    node.collect_now().await;
    node
}

fn plugin(
    node: &Arc<Node>,
    resource: &str,
    offer: watch::Receiver<super::devices::Offer>,
) -> Plugin {
    Plugin::new(resource.parse::<Resource>().unwrap(), node.clone(), offer)
}

async fn allocate(p: &Plugin, ids: &[&str]) -> Result<pb::AllocateResponse, tonic::Status> {
    p.allocate(Request::new(pb::AllocateRequest {
        container_requests: vec![pb::ContainerAllocateRequest {
            devices_ids: ids.iter().map(|s| (*s).to_owned()).collect(),
        }],
    }))
    .await
    .map(tonic::Response::into_inner)
}

// What broke (the incumbent's rule): a GPU that a bcd hold has was handed to Kubernetes too.
#[tokio::test]
async fn allocate_makes_a_kubernetes_hold_and_refuses_a_held_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let node = collected(dir.path()).await;
    let (_tx, rx) = watch::channel(super::offer_now(&node).await);
    let gpus = plugin(&node, "bcd.dev/gpu", rx);
    // What broke: a spec that could not be written left its hold behind after the refusal.
    std::fs::remove_dir(&node.config().cdi_dir).unwrap();
    let err = allocate(&gpus, &[GPU0]).await.unwrap_err();
    assert!(
        err.message().contains("could not be written"),
        "{}",
        err.message()
    );
    assert!(node.holds_now().await.is_empty());
    std::fs::create_dir_all(&node.config().cdi_dir).unwrap();
    let answer = allocate(&gpus, &[GPU0]).await.unwrap();
    // No NVIDIA spec in this CDI folder: bcd's own name.
    assert_eq!(
        answer.container_responses[0].cdi_devices[0].name,
        format!("bcd.dev/gpu={GPU0}")
    );
    let hold = super::allocate::hold_id(&[GPU0.parse().unwrap()]);
    assert!(node.config().cdi_dir.join(hold.spec_file_name()).exists());
    let t = node.topology().await;
    node.with_holds(|holds| {
        assert!(holds.get(&hold).unwrap().kubernetes);
        holds
            .apply(
                "job".parse().unwrap(),
                vec![t.place(&GPU1.parse().unwrap()).unwrap()],
                false,
                &t,
            )
            .unwrap();
    })
    .await
    .unwrap();
    let refused = allocate(&gpus, &[GPU1]).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused.message().contains("held by hold job"),
        "{}",
        refused.message()
    );
    let unknown = allocate(&gpus, &["MIG-65db3e42-f991-a575-c20e-8350d31e437c"])
        .await
        .unwrap_err();
    assert!(
        unknown.message().contains("is not a device of bcd.dev/gpu"),
        "{}",
        unknown.message()
    );
    assert_eq!(node.kubernetes().counters()["bcd.dev/gpu"].allocations, 1);
}

// What broke: a Kubernetes hold stayed for ever once its pod was gone (the device plugin
// API has no release), or would have gone the moment PodResources could not be read.
#[tokio::test]
async fn a_hold_no_pod_has_is_pending_then_released_and_an_unreadable_kubelet_releases_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let node = collected(dir.path()).await;
    std::fs::create_dir_all(&node.config().cdi_dir).unwrap();
    let (_tx, rx) = watch::channel(super::offer_now(&node).await);
    // GPU 1: the demo host shows no compute process on it.
    allocate(&plugin(&node, "bcd.dev/gpu", rx), &[GPU1])
        .await
        .unwrap();
    let hold = super::allocate::hold_id(&[GPU1.parse().unwrap()]);
    let socket = dir.path().join("pod-resources.sock");
    let config = KubeletConfig {
        plugin_dir: dir.path().join("plugins"),
        pod_resources_socket: socket.clone(),
        release_grace: Duration::from_secs(1),
    };
    let state = |node: &Arc<Node>| {
        let node = node.clone();
        let hold = hold.clone();
        async move {
            node.with_holds(|h| h.get(&hold).map(|h| h.unassigned_since))
                .await
                .unwrap()
        }
    };
    // No kubelet: nothing changes, and status says why.
    super::release::pass(&node, &config).await;
    assert_eq!(state(&node).await, Some(None));
    assert!(node
        .problems_now()
        .iter()
        .any(|p| p.contains("PodResources API cannot be read")));

    let pods = Pods::default();
    pods.0
        .lock()
        .unwrap()
        .push(("bcd.dev/gpu".into(), vec![GPU1.into()]));
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(PodResourcesListerServer::new(pods.clone()))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
    super::release::pass(&node, &config).await;
    assert_eq!(state(&node).await, Some(None), "a pod has it");
    assert!(node.kubernetes().problem().is_none());

    pods.0.lock().unwrap().clear();
    super::release::pass(&node, &config).await;
    assert!(matches!(state(&node).await, Some(Some(_))), "pending");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    super::release::pass(&node, &config).await;
    assert_eq!(state(&node).await, None, "released after the grace period");
    assert!(!node.config().cdi_dir.join(hold.spec_file_name()).exists());
    assert_eq!(node.kubernetes().counters()["bcd.dev/gpu"].releases, 1);
}
