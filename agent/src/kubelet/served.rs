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
use super::{KubeState, KubeletConfig};
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

/// A collected node on the demo host and the Kubernetes side's own state, shown in the
/// node's status and metrics as `bcd node` wires it.
async fn collected(dir: &std::path::Path) -> (Arc<Node>, Arc<KubeState>) {
    let node = Arc::new(test_node(dir));
    node.collect_now().await;
    let kube = Arc::new(KubeState::default());
    node.add_report(kube.clone());
    (node, kube)
}

fn plugin(
    node: &Arc<Node>,
    kube: &Arc<KubeState>,
    resource: &str,
    offer: watch::Receiver<super::devices::Offer>,
) -> Plugin<Node> {
    Plugin::new(
        resource.parse::<Resource>().unwrap(),
        node.clone(),
        kube.clone(),
        offer,
    )
}

async fn allocate(p: &Plugin<Node>, ids: &[&str]) -> Result<pb::AllocateResponse, tonic::Status> {
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
    let (node, kube) = collected(dir.path()).await;
    let (_tx, rx) = watch::channel(super::offer_now(node.as_ref()).await);
    let gpus = plugin(&node, &kube, "bcd.dev/gpu", rx);
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
                crate::cdi::HoldOwner::Operator,
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
    assert_eq!(kube.counters()["bcd.dev/gpu"].allocations, 1);
}

// What broke: a Kubernetes hold stayed for ever once its pod was gone (the device plugin
// API has no release), or would have gone the moment PodResources could not be read.
#[tokio::test]
async fn a_hold_no_pod_has_is_pending_then_released_and_an_unreadable_kubelet_releases_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (node, kube) = collected(dir.path()).await;
    std::fs::create_dir_all(&node.config().cdi_dir).unwrap();
    let (_tx, rx) = watch::channel(super::offer_now(node.as_ref()).await);
    // GPU 1: the demo host shows no compute process on it.
    allocate(&plugin(&node, &kube, "bcd.dev/gpu", rx), &[GPU1])
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
    super::release::pass(node.as_ref(), &kube, &config).await;
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
    super::release::pass(node.as_ref(), &kube, &config).await;
    assert_eq!(state(&node).await, Some(None), "a pod has it");
    assert!(kube.problem().is_none());

    pods.0.lock().unwrap().clear();
    super::release::pass(node.as_ref(), &kube, &config).await;
    assert!(matches!(state(&node).await, Some(Some(_))), "pending");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    super::release::pass(node.as_ref(), &kube, &config).await;
    assert_eq!(state(&node).await, None, "released after the grace period");
    assert!(!node.config().cdi_dir.join(hold.spec_file_name()).exists());
    assert_eq!(kube.counters()["bcd.dev/gpu"].releases, 1);
}

// A GPU the stream had just reported Unhealthy (Xid 79) was allocated: Allocate trusted the
// offer it was built with. It asks for the verdict again and refuses with its reason.
#[tokio::test]
async fn allocate_refuses_a_gpu_whose_verdict_turned_since_the_offer() {
    use crate::health::{ConditionDevice, ConditionKind};
    let dir = tempfile::tempdir().unwrap();
    let (node, kube) = collected(dir.path()).await;
    // The offer as the stream last sent it: both GPUs healthy.
    let (_tx, rx) = watch::channel(super::offer_now(node.as_ref()).await);
    let gpus = plugin(&node, &kube, "bcd.dev/gpu", rx);
    node.health()
        .raise(
            &ConditionKind::Xid(79),
            ConditionDevice::Gpu(GPU0.parse().unwrap()),
            "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
        )
        .unwrap();
    let err = allocate(&gpus, &[GPU0]).await.unwrap_err();
    let message = err.message();
    assert!(
        message.starts_with(&format!("{GPU0} is on GPU {GPU0}, which is unhealthy: ")),
        "{message}"
    );
    assert!(message.contains("UnexpectedAdmissionError"), "{message}");
    assert!(node.holds_now().await.is_empty(), "nothing was held");
    allocate(&gpus, &[GPU1])
        .await
        .expect("the other GPU is healthy");
}

// Plugin sockets took their mode from the umask (0777 under umask 000) and had no peer check:
// uid 65534 allocated a GPU. They are 0600 now, and a peer that is neither root (the kubelet)
// nor bcd's own uid is dropped before a byte is read.
#[tokio::test]
async fn a_plugin_socket_is_0600_and_refuses_a_peer_of_another_uid() {
    use std::os::unix::fs::PermissionsExt;
    use tokio::io::AsyncWriteExt;
    use tokio_stream::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bcd-gpu.sock");
    let listener = crate::plugin_socket::bind(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, crate::plugin_socket::SOCKET_MODE, "{mode:o}");
    assert_eq!(mode, 0o600);
    if !nix::unistd::geteuid().is_root() {
        bcd_testkit::skip("connecting as another uid needs root");
        return;
    }
    let Some(setpriv) = bcd_testkit::require(bcd_testkit::Peer::Setpriv) else {
        return;
    };
    // Open to everyone, so that only the peer check stands in the way; the folder too.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut incoming = Box::pin(crate::plugin_socket::incoming(listener, "bcd.dev/gpu"));
    tokio::spawn(async move {
        while let Some(Ok(mut stream)) = incoming.next().await {
            let _ = stream.write_all(b"served").await;
        }
    });
    let client = move |as_nobody: bool| {
        // Debian's essential perl (perl-base): nobody may run it, unlike a user's python.
        let script = "use IO::Socket::UNIX; my $s = IO::Socket::UNIX->new(Peer => $ARGV[0]) \
                      or die \"connect: $!\"; my $n = sysread($s, my $b, 16); print($n ? $b : 'closed')";
        let mut cmd = if as_nobody {
            let mut c = std::process::Command::new(&setpriv);
            c.args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "/usr/bin/perl",
            ]);
            c
        } else {
            std::process::Command::new("/usr/bin/perl")
        };
        let out = cmd.args(["-e", script]).arg(&path).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let (own, nobody) = tokio::task::spawn_blocking(move || (client(false), client(true)))
        .await
        .unwrap();
    assert_eq!(own, "served");
    assert_eq!(nobody, "closed");
}

// A refused multi-container Allocate was not all-or-nothing: containers 1..k-1 kept their
// new holds when container k was refused (their GPUs busy for the grace period), and a pending
// hold asked for again had its grace clock restarted. A refused request changes nothing now.
#[tokio::test]
async fn a_refused_multi_container_allocate_changes_no_hold() {
    use crate::cdi::HoldOwner;
    const GPU2: &str = "GPU-30e15e2f-5971-0b16-04be-39a46d1071ce";
    let dir = tempfile::tempdir().unwrap();
    let (node, kube) = collected(dir.path()).await;
    let (_tx, rx) = watch::channel(super::offer_now(node.as_ref()).await);
    let gpus = plugin(&node, &kube, "bcd.dev/gpu", rx);
    let topology = node.topology().await;
    let op: crate::cdi::HoldId = "op".parse().unwrap();
    let placed = vec![topology.place(&GPU1.parse().unwrap()).unwrap()];
    node.apply_hold(op, placed, HoldOwner::Operator, &topology)
        .await
        .unwrap();
    // A Kubernetes hold of GPU2 whose release is pending since 100.
    allocate(&gpus, &[GPU2]).await.unwrap();
    let pending = node
        .holds_now()
        .await
        .into_iter()
        .find(|h| h.owner() == HoldOwner::DevicePlugin)
        .unwrap();
    node.with_holds(|h| h.mark_unassigned(&pending.id, Some(100)).unwrap())
        .await
        .unwrap();
    let before = node.holds_now().await;
    let two = |first: &str| pb::AllocateRequest {
        container_requests: vec![
            pb::ContainerAllocateRequest {
                devices_ids: vec![first.to_owned()],
            },
            pb::ContainerAllocateRequest {
                devices_ids: vec![GPU1.to_owned()],
            },
        ],
    };
    for first in [GPU0, GPU2] {
        let err = gpus.allocate(Request::new(two(first))).await.unwrap_err();
        assert!(
            err.message().contains("op"),
            "the operator's hold is named: {}",
            err.message()
        );
        assert_eq!(
            node.holds_now().await,
            before,
            "after a refusal with {first} first"
        );
    }
    let specs: Vec<String> = std::fs::read_dir(&node.config().cdi_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("bcd-"))
        .collect();
    assert_eq!(
        specs.len(),
        2,
        "only op's and the pending hold's specs: {specs:?}"
    );
}

/// A helper whose resets take `delay`; every other operation succeeds at once.
#[derive(Debug)]
struct SlowReset {
    inner: crate::helper_client::fake::RecordingHelper,
    delay: Duration,
}

impl crate::helper_client::Helper for SlowReset {
    fn socket(&self) -> &std::path::Path {
        std::path::Path::new("/nonexistent/slow-helper.sock")
    }

    fn ping(
        &self,
    ) -> crate::helper_client::BoxFuture<
        '_,
        Result<crate::helper_client::Pong, crate::helper_client::ClientError>,
    > {
        self.inner.ping()
    }

    fn run(
        &self,
        op: bcd_protocol::Operation,
    ) -> crate::helper_client::BoxFuture<
        '_,
        Result<bcd_protocol::Outcome, crate::helper_client::ClientError>,
    > {
        Box::pin(async move {
            if matches!(op, bcd_protocol::Operation::ResetGpu { .. }) {
                tokio::time::sleep(self.delay).await;
            }
            self.inner.run(op).await
        })
    }
}

// A GPU was allocated while it was being reset: the reset checked "busy" on a snapshot and
// held no claim while nvidia-smi --gpu-reset and the collection after it ran. With a slow
// reset, an Allocate of that GPU and a hold of another GPU under reset both succeeded and the
// stream showed both Healthy. The reset now claims its GPUs under the holds lock until the
// collection after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_under_reset_is_neither_allocated_nor_held_and_streams_unhealthy() {
    use crate::node::api::handle;
    use crate::node::http::Request as HttpRequest;
    let dir = tempfile::tempdir().unwrap();
    let node = Arc::new(test_node(dir.path()).with_helper(Arc::new(SlowReset {
        inner: crate::helper_client::fake::RecordingHelper::new(),
        delay: Duration::from_millis(1500),
    })));
    node.collect_now().await;
    let kube = Arc::new(KubeState::default());
    let (_tx, rx) = watch::channel(super::offer_now(node.as_ref()).await);
    let gpus = plugin(&node, &kube, "bcd.dev/gpu", rx);
    let post = |path: &str, body: serde_json::Value| HttpRequest {
        method: "POST".into(),
        path: path.into(),
        query: String::new(),
        body: body.to_string().into_bytes(),
    };
    let resetting = node.clone();
    let reset_request = post(
        "/v1/gpus/reset",
        serde_json::json!({ "gpus": [GPU0, GPU1] }),
    );
    let reset = tokio::spawn(async move { handle(&resetting, &reset_request).await });
    let started = std::time::Instant::now();
    while node.claimed().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the reset claimed nothing"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let err = allocate(&gpus, &[GPU0]).await.unwrap_err();
    assert!(
        err.message().contains("a reset runs now"),
        "{}",
        err.message()
    );
    let (status, body) = handle(
        &node,
        &post(
            "/v1/holds",
            serde_json::json!({"id": "job", "devices": [GPU1]}),
        ),
    )
    .await;
    assert_eq!(status, 409, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("a reset runs now"));
    let offer = super::offer_now(node.as_ref()).await;
    let healthy = |id: &str| {
        offer["bcd.dev/gpu".parse::<Resource>().as_ref().unwrap()]
            .iter()
            .find(|o| o.id.to_string() == id)
            .unwrap()
            .healthy
    };
    assert!(
        !healthy(GPU0) && !healthy(GPU1),
        "streamed Unhealthy during the reset"
    );
    // A second reset of a GPU under reset is refused as busy.
    let (status, body) = handle(
        &node,
        &post("/v1/gpus/reset", serde_json::json!({ "gpus": [GPU1] })),
    )
    .await;
    assert_eq!(status, 409, "{}", String::from_utf8_lossy(&body));
    assert!(node.holds_now().await.is_empty());

    let (status, body) = reset.await.unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(
        node.claimed().is_empty(),
        "the claim goes after the collection"
    );
    allocate(&gpus, &[GPU0])
        .await
        .expect("free again after the reset");
}

// A DRA claim's devices are never in the pods' ContainerDevices: the release pass took its
// hold for a device-plugin hold no pod had, and released it while the pod ran.
#[tokio::test]
async fn the_release_pass_never_releases_a_dra_claims_hold() {
    let dir = tempfile::tempdir().unwrap();
    let (node, kube) = collected(dir.path()).await;
    std::fs::create_dir_all(&node.config().cdi_dir).unwrap();
    let id = crate::node::shared::hold_for_test_claim(&node, GPU1, "c").await;
    let socket = dir.path().join("pod-resources.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(PodResourcesListerServer::new(Pods::default()))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
    let config = KubeletConfig {
        plugin_dir: dir.path().join("plugins"),
        pod_resources_socket: socket,
        release_grace: Duration::from_secs(0),
    };
    for _ in 0..2 {
        super::release::pass(node.as_ref(), &kube, &config).await;
    }
    let kept = node
        .with_holds(|h| h.get(&id).map(|h| h.unassigned_since))
        .await
        .unwrap();
    assert_eq!(kept, Some(None), "kept, and never marked pending");
}
