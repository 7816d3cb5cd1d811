//! The API's HTTP edges, answered by handlers on a node state built here (no task runs, no
//! socket is bound): the error shape, 404 and 405, and `status.problems`.

use std::path::Path;

use serde_json::Value;

use super::handle;
use crate::node::http::Request;
use crate::node::shared::Node;

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
        node.collections.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "three concurrent diags ran more than one collection"
    );
    // A diag after them collects again: it was not in flight with anything.
    handle(&node, &diag).await;
    assert_eq!(
        node.collections.load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}
