//! The client against the plain-HTTP stand-in of [`super::super::fake_api`].

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::*;
use crate::dra::claims::{ClaimReader, ReadError};
use crate::dra::controller::ApiClaims;
use crate::dra::fake_api::{FakeApi, Reply};

/// A client of `api` with the token `t`, and the folder its kubeconfig is in.
async fn client_of(api: &FakeApi) -> (ApiClient, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kubeconfig");
    std::fs::write(&file, api.kubeconfig("token: t")).unwrap();
    (ApiClient::connect(Some(&file)).await.unwrap(), dir)
}

/// A claim `ml/a` as the API server has it.
fn a_claim() -> serde_json::Value {
    serde_json::json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "a", "namespace": "ml", "uid": "u-1"},
        "spec": {"devices": {"requests": []}}})
}

/// A server that answers the claim to `Bearer <token>` of `accepted`, else 401.
async fn guarded(accepted: Arc<Mutex<String>>) -> FakeApi {
    FakeApi::start(move |asked| {
        let want = format!("Bearer {}", accepted.lock().unwrap());
        if asked.authorization.as_deref() == Some(want.as_str()) {
            Reply::json(200, &a_claim())
        } else {
            Reply::unauthorized()
        }
    })
    .await
}

// What broke: a slice watch of 1 GiB without a newline took bcd's memory to 2 GiB (kube's
// line codec has no bound). The watch ends with the bound's sentence after about 4 MiB.
#[tokio::test]
async fn a_watch_line_past_the_bound_ends_the_watch_with_a_sentence_not_memory() {
    use k8s_openapi::api::resource::v1::ResourceSlice;
    use kube::api::{Api, WatchParams};
    use tokio_stream::StreamExt;
    let api = FakeApi::start(|asked| {
        if asked.target.contains("watch=") {
            Reply::Endless {
                status: 200,
                chunk: vec![b'a'; 64 << 10],
                limit: 1 << 30,
            }
        } else {
            Reply::json(404, &serde_json::json!({}))
        }
    })
    .await;
    let (client, _dir) = client_of(&api).await;
    let slices: Api<ResourceSlice> = Api::all(client.client());
    let events = slices.watch(&WatchParams::default(), "0").await.unwrap();
    let mut events = Box::pin(events);
    let first = tokio::time::timeout(Duration::from_secs(20), events.next())
        .await
        .expect("the watch ended within 20 s");
    let e = first.unwrap().unwrap_err();
    assert!(
        format!("{e}").contains("longer than 4 MiB without a line end")
            || std::error::Error::source(&e).is_some_and(|s| s.to_string().contains("4 MiB")),
        "{e:?}"
    );
    drop(events);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let written = api.written.load(Ordering::Relaxed);
    assert!(
        written < 64 << 20,
        "the server got to write {written} bytes"
    );
}

// An answer past the bound (a claim of 5 MiB) is a failed read with the sentence.
#[tokio::test]
async fn an_answer_past_the_bound_is_a_failed_read_naming_the_bound() {
    let api = FakeApi::start(|_| Reply::Full(200, vec![b' '; 5 << 20])).await;
    let (client, _dir) = client_of(&api).await;
    let claims = ApiClaims::new(client);
    match claims.get("ml", "a").await {
        Err(ReadError::Failed { why, .. }) => {
            assert!(why.contains("longer than 4 MiB"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_watchs_bound_is_per_line_and_an_answers_on_the_whole() {
    let mut watch = Bounded::new((), true);
    assert_eq!(watch.count(&vec![b'a'; MAX_READ]), Ok(()));
    assert_eq!(watch.count(b"\n"), Ok(()), "a line of exactly the bound");
    for _ in 0..8 {
        assert_eq!(watch.count(&vec![b'b'; MAX_READ / 2]), Ok(()));
        assert_eq!(watch.count(b"\n"), Ok(()));
    }
    let mut split = vec![b'c'; MAX_READ - 1];
    split.extend_from_slice(b"\nxy");
    assert_eq!(watch.count(&split), Ok(()));
    assert_eq!(
        watch.count(&vec![b'd'; MAX_READ - 1]),
        Err(TooLong::Line),
        "2 bytes carried over"
    );
    let mut whole = Bounded::new((), false);
    assert_eq!(whole.count(&vec![b'\n'; MAX_READ]), Ok(()));
    assert_eq!(whole.count(b"\n"), Err(TooLong::Answer));
}

// What broke: the kubeconfig's inline token rewritten with a new one was never used (401
// until a restart). A 401 reads the kubeconfig again; the call is made once more.
#[tokio::test]
async fn a_renewed_inline_token_is_used_after_a_401() {
    let accepted = Arc::new(Mutex::new("new".to_owned()));
    let api = guarded(accepted.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kubeconfig");
    std::fs::write(&file, api.kubeconfig("token: old")).unwrap();
    let claims = ApiClaims::new(ApiClient::connect(Some(&file)).await.unwrap());
    assert!(matches!(
        claims.get("ml", "a").await,
        Err(ReadError::Failed { why, .. }) if why.contains("401")
    ));
    std::fs::write(&file, api.kubeconfig("token: new")).unwrap();
    let claim = claims.get("ml", "a").await.unwrap();
    assert_eq!(claim.metadata.uid, "u-1");
    let last = api.asked.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last.authorization.as_deref(), Some("Bearer new"));
}

// What broke: a tokenFile ending in a newline (as `kubectl create token ... > file` writes
// it) never worked, and a rotated token file was read only by kube's own schedule. The token
// is trimmed (the file is left as it is) and read again every renewal.
#[tokio::test]
async fn a_token_file_is_trimmed_and_read_again_periodically() {
    let accepted = Arc::new(Mutex::new("first".to_owned()));
    let api = guarded(accepted.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "first\n").unwrap();
    let file = dir.path().join("kubeconfig");
    std::fs::write(
        &file,
        api.kubeconfig(&format!("tokenFile: {}", token.display())),
    )
    .unwrap();
    let client = ApiClient::connect(Some(&file)).await.unwrap();
    let claims = ApiClaims::new(client.clone());
    claims.get("ml", "a").await.unwrap();
    assert_eq!(std::fs::read_to_string(&token).unwrap(), "first\n");
    let renewal = tokio::spawn(client.clone().renew_every(Duration::from_millis(50)));
    std::fs::write(&token, "second\n").unwrap();
    *accepted.lock().unwrap() = "second".to_owned();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = api.count("resourceclaims");
    claims.get("ml", "a").await.unwrap();
    assert_eq!(
        api.count("resourceclaims"),
        refused + 1,
        "the new token was used at the first try"
    );
    renewal.abort();
}

// What broke (a review): a watch answered with an error status was bounded by line, but kube
// reads an error's body whole, so an endless body of short lines grew without a bound.
#[tokio::test]
async fn a_watchs_error_answer_is_bounded_whole() {
    use k8s_openapi::api::resource::v1::ResourceSlice;
    use kube::api::{Api, WatchParams};
    let api = FakeApi::start(|_| Reply::Endless {
        status: 500,
        chunk: vec![b'\n'; 64 << 10],
        limit: 1 << 30,
    })
    .await;
    let (client, _dir) = client_of(&api).await;
    let slices: Api<ResourceSlice> = Api::all(client.client());
    let opened = tokio::time::timeout(
        Duration::from_secs(20),
        slices.watch(&WatchParams::default(), "0"),
    )
    .await
    .expect("the watch's error was read within 20 s");
    let e = opened.err().expect("an error");
    let text = format!("{e} {:?}", std::error::Error::source(&e));
    assert!(text.contains("longer than 4 MiB"), "{text}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let written = api.written.load(Ordering::Relaxed);
    assert!(
        written < 64 << 20,
        "the server got to write {written} bytes"
    );
}
