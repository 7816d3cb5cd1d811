//! The API's HTTP edges, answered by handlers on a node state built here (no task runs, no
//! socket is bound): the error shape, 404 and 405, and `status.problems`.

use std::path::Path;

use serde_json::Value;

use super::handle;
use crate::node::http::Request;
use crate::node::shared::Node;

/// Two GPUs of the demo host.
const GPU0: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";
const GPU1: &str = "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a";

fn node(dir: &Path) -> Node {
    crate::node::shared::test_node(dir)
}

fn request(method: &str, path: &str) -> Request {
    Request {
        method: method.to_owned(),
        path: path.to_owned(),
        query: String::new(),
        body: Vec::new(),
    }
}

// The vfio and vm paths answered 404 to a wrong method where the others answered 405, and
// errors carried "error" instead of "message".
#[tokio::test]
async fn a_wrong_method_on_every_known_path_is_405_with_code_and_message() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    for (method, path) in [
        ("POST", "/v1/status"),
        ("DELETE", "/v1/inventory"),
        ("PUT", "/v1/conditions"),
        ("GET", "/v1/inventory/refresh"),
        ("GET", "/v1/diag"),
        ("GET", "/v1/gpus/reset"),
        ("PUT", "/v1/holds"),
        ("GET", "/v1/holds/job1"),
        ("GET", "/v1/vfio/bind"),
        ("DELETE", "/v1/vfio/release"),
        ("GET", "/v1/vm/start"),
        ("GET", "/v1/vm/restore"),
        ("PUT", "/v1/vm/destroy"),
    ] {
        let (status, body) = handle(&node, &request(method, path)).await;
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status, 405, "{method} {path}: {v}");
        assert_eq!(v["code"], "method-not-allowed", "{method} {path}");
        assert!(
            v["message"].as_str().is_some_and(|m| m.contains(path)),
            "{v}"
        );
    }
    let (status, body) = handle(&node, &request("GET", "/v1/vfio")).await;
    assert_eq!(status, 404);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["code"], "not-found");
}

// An unreachable helper was never in status.problems.
#[tokio::test]
async fn status_names_the_unreachable_helper_and_no_collection_yet() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    let (status, body) = handle(&node, &request("GET", "/v1/status")).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["collections"], 0);
    let problems = v["problems"].to_string();
    assert!(
        problems.contains("the root helper cannot be reached"),
        "{problems}"
    );
    assert!(!problems.contains("data folder"), "{problems}");
}

// What broke: concurrent diag requests each collected in turn; on the wedged host three
// answered after 59, 89 and 119 s. They share the collection in flight now.
#[tokio::test]
async fn concurrent_diags_share_one_collection() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    let mut diag = request("POST", "/v1/diag");
    diag.body = b"{}".to_vec();
    let (a, b, c) = tokio::join!(
        handle(&node, &diag),
        handle(&node, &diag),
        handle(&node, &diag)
    );
    for (status, body) in [a, b, c] {
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status, 200, "{v}");
        assert!(v["checks"].as_array().is_some_and(|c| !c.is_empty()), "{v}");
    }
    assert_eq!(
        node.collections(),
        1,
        "three concurrent diags ran more than one collection"
    );
    // A diag after them collects again: it was not in flight with anything.
    handle(&node, &diag).await;
    assert_eq!(node.collections(), 2);
}

// The router is a function of the method and path alone (what the fuzz target drives): every
// route it picks is a path the 405 rule knows, and trailing slashes do not change it.
#[test]
fn the_router_agrees_with_the_known_paths() {
    use super::{is_known_path, route, Route};
    assert_eq!(route("GET", "/v1/status/").ok(), Some(Route::Status));
    assert_eq!(
        route("DELETE", "/v1/holds/job1").ok(),
        Some(Route::ReleaseHold("job1"))
    );
    assert_eq!(route("POST", "/v1/vm/start").ok(), Some(Route::VmStart));
    for path in [
        "/v1/status",
        "/v1/inventory",
        "/v1/conditions",
        "/v1/inventory/refresh",
        "/v1/diag",
        "/v1/gpus/reset",
        "/v1/holds",
        "/v1/holds/x",
        "/v1/vfio/bind",
        "/v1/vfio/release",
        "/v1/vm/start",
        "/v1/vm/restore",
        "/v1/vm/destroy",
    ] {
        assert!(is_known_path(path), "{path}");
        let served = ["GET", "POST", "DELETE"]
            .iter()
            .filter(|m| route(m, path).is_ok())
            .count();
        assert!(served >= 1, "{path} is served by no method");
        assert_eq!(route("PATCH", path).unwrap_err().kind().0, 405, "{path}");
    }
    assert_eq!(route("GET", "/v2/status").unwrap_err().kind().0, 404);
}

// What broke: /v1/status and /v1/conditions were built with json! and read back by the CLI
// key by key; both sides use the schema's types now, and the keys stay the documented ones.
#[tokio::test]
async fn status_and_conditions_answer_the_schemas_types() {
    use crate::health::{ConditionDevice, ConditionKind};
    use crate::node::schema::{ConditionList, NodeStatus};
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    node.collect_now().await;
    let uuid: bcd_protocol::GpuUuid = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b".parse().unwrap();
    node.health()
        .raise(
            &ConditionKind::Xid(79),
            ConditionDevice::Gpu(uuid.clone()),
            "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
        )
        .unwrap();
    let (status, body) = handle(&node, &request("GET", "/v1/status")).await;
    assert_eq!(status, 200);
    let typed: NodeStatus = serde_json::from_slice(&body).unwrap();
    assert_eq!(typed.collections, 1);
    assert_eq!(typed.capabilities, ["nvml"]);
    assert_eq!(typed.conditions[0].condition.kind, ConditionKind::Xid(79));
    assert_eq!(typed.conditions[0].class, "bus");
    let gpu = typed.gpus.iter().find(|g| g.uuid == uuid).unwrap();
    assert!(!gpu.healthy);
    let keys: Vec<String> = serde_json::from_slice::<Value>(&body)
        .unwrap()
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    for key in [
        "capabilities",
        "inventory_hash",
        "inventory_age_s",
        "collections",
        "nvidia_smi_error",
        "gpus",
        "conditions",
        "sampling",
        "problems",
        "kubernetes",
    ] {
        assert!(keys.iter().any(|k| k == key), "{key} missing from {keys:?}");
    }
    let (status, body) = handle(&node, &request("GET", "/v1/conditions")).await;
    assert_eq!(status, 200);
    let list: ConditionList = serde_json::from_slice(&body).unwrap();
    assert_eq!(list.conditions, typed.conditions);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["conditions"][0]["kind"], "Xid79", "the stored spelling");
    assert_eq!(v["conditions"][0]["device_id"], uuid.as_str());
}

// What broke: a reset named in upper case was answered "unknown GPU". The request's UUIDs are
// typed now: an upper-case one names the same GPU, and a malformed one is refused as such.
#[tokio::test]
async fn a_reset_request_names_gpus_in_either_case_and_refuses_a_malformed_one() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    node.collect_now().await;
    let gpu = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";
    let post = |path: &str, body: Value| Request {
        body: body.to_string().into_bytes(),
        ..request("POST", path)
    };
    let (status, body) = handle(
        &node,
        &post(
            "/v1/holds",
            serde_json::json!({"id": "job", "devices": [gpu]}),
        ),
    )
    .await;
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let upper = format!("GPU-{}", gpu["GPU-".len()..].to_ascii_uppercase());
    let (status, body) = handle(
        &node,
        &post("/v1/gpus/reset", serde_json::json!({ "gpus": [upper] })),
    )
    .await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, v["code"].as_str()), (409, Some("gpu-busy")), "{v}");
    let (status, body) = handle(
        &node,
        &post("/v1/gpus/reset", serde_json::json!({ "gpus": ["GPU-a"] })),
    )
    .await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["code"], "invalid-argument");
    assert!(
        v["message"].as_str().unwrap().contains("invalid GPU UUID"),
        "{v}"
    );
}

// With the CDI folder unwritable (full, in the report), POST /v1/holds answered 201 with a
// spec path although the spec could not be written: the hold was acknowledged and only
// appeared at some later change. Now the hold is refused, naming the file, and not applied; a
// replaced hold keeps its earlier devices.
#[tokio::test]
async fn a_hold_whose_spec_cannot_be_written_is_refused_and_not_applied() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    node.collect_now().await;
    let gpus = [GPU0, GPU1];
    let cdi = dir.path().join("cdi");
    let post = |devices: &[&str]| Request {
        body: serde_json::json!({"id": "job", "devices": devices})
            .to_string()
            .into_bytes(),
        ..request("POST", "/v1/holds")
    };
    // A file where the folder belongs: no spec can be written there.
    std::fs::remove_dir(&cdi).unwrap();
    std::fs::write(&cdi, "").unwrap();
    let (status, body) = handle(&node, &post(&gpus[..1])).await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, v["code"].as_str()), (500, Some("state")), "{v}");
    let message = v["message"].as_str().unwrap();
    assert!(
        message.starts_with("hold job was not applied: cannot write the CDI spec of hold job: "),
        "{message}"
    );
    assert!(message.contains(&cdi.display().to_string()), "{message}");
    assert_eq!(held(&node).await, serde_json::json!([]));
    // Not held (it may be listed as released, until a spec of it is known to be gone).
    let stored: Value = std::fs::read(dir.path().join("data/holds.json"))
        .map(|b| serde_json::from_slice(&b).unwrap())
        .unwrap_or_default();
    let stored_ids: Vec<&Value> = stored["holds"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| &h["id"])
        .collect();
    assert!(!stored_ids.contains(&&Value::from("job")), "{stored}");

    std::fs::remove_file(&cdi).unwrap();
    std::fs::create_dir(&cdi).unwrap();
    let (status, _) = handle(&node, &post(&gpus[..1])).await;
    assert_eq!(status, 201);
    let spec = cdi.join("bcd-job.json");
    let written = std::fs::read_to_string(&spec).unwrap();
    assert!(written.contains(gpus[0]) && !written.contains(gpus[1]));

    // Replacing it while no spec can be written keeps the earlier devices, in the store and
    // in the spec.
    std::fs::rename(&cdi, dir.path().join("cdi.kept")).unwrap();
    std::fs::write(&cdi, "").unwrap();
    let (status, _) = handle(&node, &post(&gpus)).await;
    assert_eq!(status, 500);
    let holds = held(&node).await;
    assert_eq!(holds[0]["devices"], serde_json::json!([gpus[0]]), "{holds}");
    let kept = std::fs::read_to_string(dir.path().join("cdi.kept/bcd-job.json")).unwrap();
    assert_eq!(kept, written);
}

// A full disk was answered 500 `state`; it is 507 `insufficient-storage`, naming the file.
#[test]
fn a_full_disk_is_insufficient_storage() {
    let full = crate::state::StateError::Io {
        path: "/var/lib/bcd/holds.json".into(),
        source: std::io::Error::from_raw_os_error(libc::ENOSPC),
    };
    let (status, body) = super::ApiError::state(&full, full.to_string()).answer();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status, v["code"].as_str()),
        (507, Some("insufficient-storage"))
    );
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("/var/lib/bcd/holds.json: "),
        "{v}"
    );
    let denied = crate::state::StateError::Io {
        path: "/var/lib/bcd/holds.json".into(),
        source: std::io::Error::from_raw_os_error(libc::EACCES),
    };
    assert_eq!(super::ApiError::state(&denied, String::new()).kind().0, 500);
}

/// The holds `GET /v1/holds` lists.
async fn held(node: &Node) -> Value {
    let (_, body) = handle(node, &request("GET", "/v1/holds")).await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    v["holds"].clone()
}

/// A `POST /v1/holds` of `body`.
fn post_hold(body: Value) -> Request {
    Request {
        body: body.to_string().into_bytes(),
        ..request("POST", "/v1/holds")
    }
}

// Hold ids mixed owners: the API replaced a live Kubernetes hold's devices (turning
// `kubernetes` off), released a hold a pod still had, and let any client make `kubernetes:
// true` holds or take a `k8s-` id. Ids `k8s-` and `dra-` are reserved now, a hold is changed
// only by its owner, and releasing a Kubernetes hold a pod has is refused naming the pod.
#[tokio::test]
async fn kubernetes_hold_ids_are_reserved_and_a_live_kubernetes_hold_is_not_the_apis() {
    use crate::cdi::HoldOwner;
    use crate::device::{PodAllocation, PodRef};
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    node.collect_now().await;
    let gpus = [GPU0, GPU1];
    let answer = |(status, body): (u16, Vec<u8>)| {
        let v: Value = serde_json::from_slice(&body).unwrap();
        (status, v)
    };
    for (id, kubernetes) in [("k8s-mine", false), ("dra-mine", false), ("job", true)] {
        let (status, v) = answer(
            handle(
                &node,
                &post_hold(
                    serde_json::json!({"id": id, "devices": [gpus[1]], "kubernetes": kubernetes}),
                ),
            )
            .await,
        );
        assert_eq!(
            (status, v["code"].as_str()),
            (403, Some("reserved")),
            "{id}: {v}"
        );
    }
    assert_eq!(held(&node).await, serde_json::json!([]));

    // A device plugin's hold, which a pod has.
    let topology = node.topology().await;
    let k8s: crate::cdi::HoldId = "k8s-0123456789abcdef".parse().unwrap();
    let placed = vec![topology.place(&gpus[0].parse().unwrap()).unwrap()];
    node.apply_hold(k8s.clone(), placed, HoldOwner::DevicePlugin, &topology)
        .await
        .unwrap();
    node.set_pod_allocations(vec![PodAllocation {
        devices: vec![gpus[0].parse().unwrap()],
        pod: PodRef {
            namespace: "ml".into(),
            pod: "trainer-0".into(),
            container: "cuda".into(),
        },
    }]);
    let (status, v) = answer(
        handle(
            &node,
            &post_hold(serde_json::json!({"id": k8s.as_str(), "devices": [gpus[1]]})),
        )
        .await,
    );
    assert_eq!((status, v["code"].as_str()), (403, Some("reserved")), "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("made by the kubelet's device plugins"),
        "{v}"
    );
    let holds = held(&node).await;
    assert_eq!(
        holds[0]["devices"],
        serde_json::json!([gpus[0]]),
        "unchanged: {holds}"
    );
    assert_eq!(holds[0]["kubernetes"], true);
    assert_eq!(holds[0]["owner"], "device-plugin");

    let delete = |query: &str| Request {
        query: query.to_owned(),
        ..request("DELETE", &format!("/v1/holds/{k8s}"))
    };
    let (status, v) = answer(handle(&node, &delete("")).await);
    assert_eq!(
        (status, v["code"].as_str()),
        (409, Some("hold-in-use")),
        "{v}"
    );
    let message = v["message"].as_str().unwrap();
    assert!(
        message.contains("pod ml/trainer-0 (container cuda)"),
        "{message}"
    );
    assert!(message.contains("bcd hold release --force"), "{message}");
    assert_eq!(held(&node).await.as_array().unwrap().len(), 1);
    let (status, v) = answer(handle(&node, &delete("force=1")).await);
    assert_eq!(status, 200, "{v}");
    assert_eq!(held(&node).await, serde_json::json!([]));
}

// A prepared DRA claim's hold could be released through the API (with --force, or as soon
// as no pod showed in PodResources, where a claim's devices never show): its GPU was then
// handed out while the claim's pod ran. The API refuses it, naming the claim.
#[tokio::test]
async fn the_api_refuses_to_release_a_prepared_dra_claims_hold_even_with_force() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    node.collect_now().await;
    let id = crate::node::shared::hold_for_test_claim(&node, GPU0, "trainer-gpu").await;
    for query in ["", "force=1"] {
        let delete = Request {
            query: query.to_owned(),
            ..request("DELETE", &format!("/v1/holds/{id}"))
        };
        let (status, body) = handle(&node, &delete).await;
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (status, v["code"].as_str()),
            (409, Some("hold-in-use")),
            "{v}"
        );
        assert!(
            v["message"]
                .as_str()
                .unwrap()
                .contains("DRA claim ml/trainer-gpu (uid 3f0c2f7e)'s, prepared by the kubelet"),
            "{v}"
        );
    }
    assert_eq!(held(&node).await.as_array().unwrap().len(), 1);
}

// An operator's hold stored under a k8s- id by an older bcd (before the ids were reserved)
// is kept and stays the operator's: the operator may still change and release it.
#[tokio::test]
async fn an_operator_hold_stored_under_a_reserved_id_stays_the_operators() {
    let dir = tempfile::tempdir().unwrap();
    let gpu = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::write(
        dir.path().join("data/holds.json"),
        format!("{{\"holds\": [{{\"id\": \"k8s-legacy\", \"devices\": [\"{gpu}\"]}}]}}"),
    )
    .unwrap();
    let node = node(dir.path());
    node.collect_now().await;
    assert_eq!(held(&node).await[0]["owner"], "operator");
    let other = "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a";
    let (status, body) = handle(
        &node,
        &post_hold(serde_json::json!({"id": "k8s-legacy", "devices": [other]})),
    )
    .await;
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let (status, _) = handle(&node, &request("DELETE", "/v1/holds/k8s-legacy")).await;
    assert_eq!(status, 200);
}

// The handlers run on a node state built here with the recording helper in place of the
// socket's: a reset asked through the API is one `ResetGpu` of that GPU's PCI function, and a
// reset of a GPU an operator holds reaches the helper not at all.
#[tokio::test]
async fn a_reset_through_the_api_asks_the_helper_for_that_gpu_alone() {
    use crate::helper_client::fake::RecordingHelper;
    use bcd_protocol::Operation;
    let dir = tempfile::tempdir().unwrap();
    let helper = std::sync::Arc::new(RecordingHelper::new());
    let node = crate::node::shared::test_node(dir.path()).with_helper(helper.clone());
    node.collect_now().await;
    let address = node.inventory().await.gpu.gpus[1].bus_id.unwrap();
    let mut reset = request("POST", "/v1/gpus/reset");
    reset.body = serde_json::to_vec(&serde_json::json!({ "gpus": [GPU1] })).unwrap();
    let (status, body) = handle(&node, &reset).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let resets: Vec<Operation> = helper
        .calls()
        .into_iter()
        .filter(|op| matches!(op, Operation::ResetGpu { .. }))
        .collect();
    assert_eq!(resets, [Operation::ResetGpu { gpu: address }]);

    let mut hold = request("POST", "/v1/holds");
    hold.body = serde_json::to_vec(&serde_json::json!({ "id": "job", "devices": [GPU0] })).unwrap();
    assert_eq!(handle(&node, &hold).await.0, 201);
    let mut busy = request("POST", "/v1/gpus/reset");
    busy.body = serde_json::to_vec(&serde_json::json!({ "gpus": [GPU0] })).unwrap();
    let (status, body) = handle(&node, &busy).await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, v["code"].as_str()), (409, Some("gpu-busy")), "{v}");
    assert_eq!(
        helper
            .calls()
            .iter()
            .filter(|op| matches!(op, Operation::ResetGpu { .. }))
            .count(),
        1,
        "the held GPU's reset never reached the helper"
    );
}

// What broke: after a fatal SXid, a reset answered "healthy" for a GPU /v1/status showed
// unhealthy (NvSwitchFatal), and the same reset cleared an Xid 79 whose action is a reboot.
#[tokio::test]
async fn a_reset_answers_the_verdict_status_shows_after_it() {
    use crate::health::{ConditionDevice, ConditionKind};
    use crate::helper_client::fake::RecordingHelper;
    let dir = tempfile::tempdir().unwrap();
    let helper = std::sync::Arc::new(RecordingHelper::new());
    let node = crate::node::shared::test_node(dir.path()).with_helper(helper.clone());
    node.collect_now().await;
    let health = node.health();
    health
        .raise(
            &ConditionKind::Xid(79),
            GPU1.parse::<bcd_protocol::GpuUuid>().unwrap().into(),
            "NVRM: Xid (PCI:0000:2a:00): 79, pid=1, name=x, GPU has fallen off the bus.",
        )
        .unwrap();
    let reset = |gpu: &str| {
        let mut r = request("POST", "/v1/gpus/reset");
        r.body = serde_json::to_vec(&serde_json::json!({ "gpus": [gpu] })).unwrap();
        r
    };
    let status_of = |v: &Value, gpu: &str| {
        v["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["uuid"] == gpu)
            .unwrap()
            .clone()
    };
    let (status, body) = handle(&node, &reset(GPU1)).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let answer: Value = serde_json::from_slice(&body).unwrap();
    let g = &answer["gpus"][0];
    assert_eq!(
        (g["healthy"].as_bool(), g["health"].as_str()),
        (Some(false), Some("unhealthy")),
        "{g}"
    );
    assert_eq!(g["conditions_cleared"], 0, "{g}");
    assert!(
        g["reasons"][0]
            .as_str()
            .unwrap()
            .ends_with("-> reboot the node"),
        "{g}"
    );
    let (_, body) = handle(&node, &request("GET", "/v1/status")).await;
    let now = status_of(&serde_json::from_slice(&body).unwrap(), GPU1);
    assert_eq!(
        (now["healthy"].as_bool(), now["health"].as_str()),
        (Some(false), Some("unhealthy")),
        "{now}"
    );

    // A fatal SXid on the NVSwitch every GPU's NVLinks reach.
    health
        .raise(
            &ConditionKind::SXid(20034),
            ConditionDevice::Switch("0000:05:00.0".parse().unwrap()),
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
        )
        .unwrap();
    // Raised within a second of the first, it waits for the burst's write: written now.
    health.flush().unwrap();
    let (status, body) = handle(&node, &reset(GPU0)).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let answer: Value = serde_json::from_slice(&body).unwrap();
    let g = &answer["gpus"][0];
    assert_eq!(g["healthy"], false, "{g}");
    assert!(
        g["reasons"][0]
            .as_str()
            .unwrap()
            .starts_with("fatal SXid 20034 on NVSwitch"),
        "{g}"
    );
    let (_, body) = handle(&node, &request("GET", "/v1/status")).await;
    let now = status_of(&serde_json::from_slice(&body).unwrap(), GPU0);
    assert_eq!(now["healthy"], false, "{now}");
    assert_eq!(now["health"], g["health"], "{now}");
}

// Everything refusable without the node is refused by the parse, each with its status and
// code from the one table; nothing reaches a handler.
#[test]
fn requests_are_parsed_and_refused_before_any_handler() {
    use super::{ApiError, ApiRequest};
    let with = |method: &str, path: &str, body: &str| Request {
        method: method.to_owned(),
        path: path.to_owned(),
        query: String::new(),
        body: body.as_bytes().to_vec(),
    };
    let kind = |r: Request| ApiRequest::parse(&r).map_err(|e: ApiError| e.kind());
    assert_eq!(
        kind(with("POST", "/v1/holds", r#"{"id": "Job", "devices": []}"#)),
        Err((400, "invalid-argument"))
    );
    assert_eq!(
        kind(with(
            "POST",
            "/v1/holds",
            &format!(r#"{{"id": "job", "devices": ["{GPU0}"], "kubernetes": true}}"#)
        )),
        Err((403, "reserved"))
    );
    assert_eq!(
        kind(with("POST", "/v1/vm/start", "{}")),
        Err((400, "invalid-argument"))
    );
    assert_eq!(
        kind(with(
            "POST",
            "/v1/vfio/release",
            r#"{"device": "0000:18:00.0"}"#
        )),
        Ok(ApiRequest::VfioRelease("0000:18:00.0".parse().unwrap()))
    );
    assert_eq!(
        kind(with("DELETE", "/v1/holds/job", "")),
        Ok(ApiRequest::ReleaseHold {
            id: "job".parse().unwrap(),
            force: false
        })
    );
    assert_eq!(
        kind(with("GET", "/v1/nothing", "")),
        Err((404, "not-found"))
    );
    assert_eq!(
        kind(with("GET", "/v1/holds/job", "")),
        Err((405, "method-not-allowed"))
    );
}

// What broke: with no NVIDIA CDI spec, `hold apply` succeeded and advised
// `--device bcd.dev/gpu=<uuid>`, whose device carried only BCD_HOLD while the common edits said
// NVIDIA_VISIBLE_DEVICES=void: the container got no GPU and nothing reached the log or
// `status.problems`. Status says which holds grant nothing, and goes quiet once a spec is there.
#[tokio::test]
async fn a_hold_without_nvidias_spec_is_said_to_grant_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    node.collect_now().await;
    let mut hold = request("POST", "/v1/holds");
    hold.body = serde_json::to_vec(&serde_json::json!({ "id": "job", "devices": [GPU0] })).unwrap();
    assert_eq!(handle(&node, &hold).await.0, 201);
    let problems = node.problems_now();
    assert!(
        problems.iter().any(|p| p.contains("no NVIDIA CDI spec")
            && p.contains("hold(s) job give a container no GPU")),
        "{problems:?}"
    );
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/cdi/hgx-h100-uuid.json"),
        node.config().cdi_dir.join("nvidia.json"),
    )
    .unwrap();
    node.converge_holds().await;
    let problems = node.problems_now();
    assert!(
        !problems
            .iter()
            .any(|p| p.contains("give a container no GPU")),
        "{problems:?}"
    );
}

// What broke: during the first collection (30 s and more on a wedged host) the API answered an
// empty inventory with no word that a collection was running.
#[tokio::test]
async fn status_says_the_first_collection_is_running_until_it_is_in() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    let problems = |node: &Node| node.problems_now();
    assert!(
        problems(&node)
            .iter()
            .any(|p| p.starts_with("the first collection is running")),
        "{:?}",
        problems(&node)
    );
    node.collect_now().await;
    assert!(
        !problems(&node)
            .iter()
            .any(|p| p.starts_with("the first collection is running")),
        "{:?}",
        problems(&node)
    );
}

// What broke: a DRA hold rebuilt without its claim's record (holds.json lost, a spec written
// before claims were recorded) could never be released: unprepare aside, DELETE answered 409
// with --force too. It is refused without --force, saying why, and released with it.
#[tokio::test]
async fn a_dra_hold_that_lost_its_claims_record_is_released_only_with_force() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::write(
        dir.path().join("data/holds.json"),
        format!(
            r#"{{"holds": [{{"id": "dra-3f0c2f7e", "devices": ["{GPU0}"], "kubernetes": true, "owner": "dra"}}]}}"#
        ),
    )
    .unwrap();
    let answer = |(status, body): (u16, Vec<u8>)| {
        let v: Value = serde_json::from_slice(&body).unwrap();
        (status, v)
    };
    let node = node(dir.path());
    node.collect_now().await;
    let delete = |query: &str| Request {
        query: query.to_owned(),
        ..request("DELETE", "/v1/holds/dra-3f0c2f7e")
    };
    let (status, v) = answer(handle(&node, &delete("")).await);
    assert_eq!(
        (status, v["code"].as_str()),
        (409, Some("hold-in-use")),
        "{v}"
    );
    let message = v["message"].as_str().unwrap();
    assert!(
        message.contains("whose record was lost")
            && message.contains("claim's uid 3f0c2f7e")
            && message.contains("bcd hold release --force dra-3f0c2f7e"),
        "{message}"
    );
    let (status, v) = answer(handle(&node, &delete("force=1")).await);
    assert_eq!(status, 200, "{v}");
    assert_eq!(held(&node).await, serde_json::json!([]));
}
