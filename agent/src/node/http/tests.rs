//! The HTTP layer over in-memory streams: what the head check refuses, what hyper is handed,
//! and that no bytes at all get an answer other than a handler's or a JSON error.

use super::*;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The handler of these tests: echoes what it was given as JSON.
async fn echo(request: Request) -> Reply {
    Reply::json(
        200,
        serde_json::json!({
            "method": request.method,
            "path": request.path,
            "query": request.query,
            "body": request.body.len(),
        })
        .to_string()
        .into_bytes(),
    )
}

/// Splits a raw answer into its status and body.
fn parse_answer(answer: &[u8]) -> Option<(u16, Vec<u8>)> {
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&answer[..split]).ok()?;
    // hyper answers an HTTP/1.0 request in HTTP/1.0.
    let line = head
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| head.strip_prefix("HTTP/1.0 "))?;
    let code = line.get(..3)?.parse().ok()?;
    Some((code, answer[split + 4..].to_vec()))
}

/// Sends `bytes`, half-closes, and reads the whole answer of [`serve_connection`] with
/// [`echo`].
async fn raw(bytes: &[u8]) -> Vec<u8> {
    let (mut client, server) = tokio::io::duplex(256 * 1024);
    let serving = tokio::spawn(serve_connection(server, echo));
    client.write_all(bytes).await.unwrap();
    client.shutdown().await.unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    serving.await.unwrap();
    answer
}

/// The status and the JSON body of the answer to `bytes`.
async fn answer(bytes: &[u8]) -> (u16, Value) {
    let answer = raw(bytes).await;
    let (status, body) = parse_answer(&answer)
        .unwrap_or_else(|| panic!("not an HTTP answer: {:?}", String::from_utf8_lossy(&answer)));
    let body = serde_json::from_slice(&body).unwrap_or_else(|e| {
        panic!(
            "{status}: not JSON ({e}): {:?}",
            String::from_utf8_lossy(&body)
        )
    });
    (status, body)
}

#[tokio::test]
async fn a_request_round_trips_through_hyper_on_both_sides() {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let serve = tokio::spawn(serve_connection(server, |request: Request| async move {
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/v1/holds");
        assert_eq!(request.query, "x=1");
        assert_eq!(request.body, b"{\"id\":\"a\"}");
        Reply::json(201, b"{}".to_vec())
    }));
    let resp = exchange(client, "POST", "/v1/holds?x=1", Some(b"{\"id\":\"a\"}"))
        .await
        .unwrap();
    assert_eq!(resp.status, 201);
    assert_eq!(resp.body, b"{}");
    serve.await.unwrap();
}

#[test]
fn oversized_and_malformed_heads_are_refused() {
    let big = format!(
        "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
        MAX_BODY + 1
    );
    assert!(matches!(
        check_head(big.as_bytes()),
        Err(HttpError::BodyTooLarge { .. })
    ));
    let long_head = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD));
    assert!(matches!(
        check_head(long_head.as_bytes()),
        Err(HttpError::HeadTooLarge)
    ));
    let many = format!(
        "GET / HTTP/1.1\r\n{}\r\n",
        "X: 1\r\n".repeat(MAX_HEADERS + 1)
    );
    assert!(matches!(
        check_head(many.as_bytes()),
        Err(HttpError::HeadTooLarge)
    ));
    assert!(matches!(
        check_head(b"GARBAGE\r\n\r\n"),
        Err(HttpError::Bad(_))
    ));
    assert!(matches!(
        check_head(b"GET http://x/ HTTP/1.1\r\n\r\n"),
        Err(HttpError::Bad(_))
    ));
    let chunked = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert!(matches!(
        check_head(chunked.as_bytes()),
        Err(HttpError::Bad(_))
    ));
    assert!(matches!(
        check_head(b"GET / HTTP/1.1\r\nHost: x\r\n"),
        Ok(None)
    ));
    assert_eq!(
        check_head(b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}").unwrap(),
        Some(Head {
            len: 38,
            declared: 2
        })
    );
}

// A second Content-Length was accepted (the last one won): how a request is smuggled past a
// proxy that believed the first. hyper alone keeps one of two equal lengths, so the head
// check must see it first.
#[tokio::test]
async fn a_duplicate_content_length_is_refused() {
    let twice = b"POST /v1/holds HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\n{}";
    let err = check_head(twice).unwrap_err();
    assert_eq!(err.status(), 400);
    assert!(err.to_string().contains("more than once"), "{err}");
    let (status, body) = answer(twice).await;
    assert_eq!(status, 400);
    assert_eq!(body["code"], "bad-request");
}

// A body declared at 1 MiB was accepted and read into a buffer of its declared size: a
// declared body over the bound is refused on its head, before a byte of it is read.
#[tokio::test]
async fn a_declared_body_over_the_bound_is_refused_without_reading_it() {
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let serving = tokio::spawn(serve_connection(server, echo));
    client
        .write_all(b"POST /v1/holds HTTP/1.1\r\nContent-Length: 1048576\r\n\r\n")
        .await
        .unwrap();
    // No body is sent and the client stays: the refusal must not wait for it.
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(2), client.read_to_end(&mut answer))
        .await
        .expect("the refusal came without the body")
        .unwrap();
    serving.await.unwrap();
    let (status, body) = parse_answer(&answer).unwrap();
    assert_eq!(status, 413);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["code"], "body-too-large");
}

// A body shorter than its Content-Length was read as a short read error without a sentence;
// it is a bad request in JSON.
#[tokio::test]
async fn a_body_shorter_than_declared_is_a_bad_request() {
    let (status, body) = answer(b"POST /v1/holds HTTP/1.1\r\nContent-Length: 10\r\n\r\n{}").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "bad-request");
    assert!(
        body["message"].as_str().unwrap().contains("ended"),
        "{body}"
    );
}

#[tokio::test]
async fn a_request_that_half_closes_still_gets_its_answer() {
    let (status, body) =
        answer(b"POST /v1/x?y=1 HTTP/1.1\r\nHost: bcd\r\nContent-Length: 3\r\n\r\nabc").await;
    assert_eq!(status, 200);
    assert_eq!(body["path"], "/v1/x");
    assert_eq!(body["query"], "y=1");
    assert_eq!(body["body"], 3);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_head_is_answered_408_in_json() {
    let (mut client, server) = tokio::io::duplex(1024);
    let serving = tokio::spawn(serve_connection(server, echo));
    client
        .write_all(b"GET /v1/status HTTP/1.1\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    serving.await.unwrap();
    let (status, body) = parse_answer(&answer).unwrap();
    assert_eq!(status, 408);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["code"], "request-timeout");
}

#[tokio::test(start_paused = true)]
async fn a_stalled_body_is_answered_408_in_json() {
    let (mut client, server) = tokio::io::duplex(1024);
    let serving = tokio::spawn(serve_connection(server, echo));
    client
        .write_all(b"POST /v1/holds HTTP/1.1\r\nContent-Length: 10\r\n\r\n{")
        .await
        .unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    serving.await.unwrap();
    let (status, _) = parse_answer(&answer).unwrap();
    assert_eq!(status, 408);
}

// A client that asks and never reads kept its connection, and its file descriptor, for as
// long as it liked: the connection is dropped once the answer has waited RESPONSE_DEADLINE.
#[tokio::test(start_paused = true)]
async fn a_client_that_does_not_take_its_answer_is_dropped_after_the_deadline() {
    // Smaller than the answer, which then cannot be written whole.
    let (mut client, server) = tokio::io::duplex(1024);
    let serving = tokio::spawn(serve_connection(server, |_| async {
        Reply::json(200, vec![b' '; 1 << 20])
    }));
    client
        .write_all(b"GET /v1/inventory HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    tokio::time::timeout(RESPONSE_DEADLINE + Duration::from_secs(1), serving)
        .await
        .expect("the connection was dropped")
        .unwrap();
}

#[tokio::test]
async fn the_client_cuts_an_answer_at_its_bound_and_refuses_a_non_http_one() {
    let (client, mut server) = tokio::io::duplex(64 * 1024);
    let peer = tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        let _ = server.read(&mut buf).await;
        server
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
            .await
            .unwrap();
        server.write_all(&[b'a'; 100]).await.unwrap();
        server
    });
    let resp = exchange_with(client, "POST", "h", "/", JSON, None, 10)
        .await
        .unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, [b'a'; 10]);
    drop(peer.await.unwrap());

    let (client, mut server) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        let _ = server.read(&mut buf).await;
        let _ = server.write_all(b"SSH-2.0 200 hello\r\n\r\n").await;
    });
    let err = exchange(client, "GET", "/", None).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    assert!(err.to_string().contains("status line"), "{err}");
}

proptest::proptest! {
    /// No bytes make the decoding path (the head check, then hyper) panic, hang, answer
    /// anything but the handler's answer or a JSON error, or hand the handler a body over
    /// [`MAX_BODY`]: what hyper would answer with an empty body never reaches it.
    #[test]
    fn no_bytes_get_an_answer_other_than_the_handlers_or_a_json_error(
        head in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
        length in proptest::option::of(0u64..200_000),
        twice in proptest::prelude::any::<bool>(),
    ) {
        let mut bytes = b"POST /v1/holds HTTP/1.1\r\n".to_vec();
        if let Some(n) = length {
            bytes.extend(format!("Content-Length: {n}\r\n").as_bytes());
            if twice {
                bytes.extend(format!("Content-Length: {n}\r\n").as_bytes());
            }
        }
        bytes.extend(&head);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        for input in [&head[..], &bytes[..]] {
            let answer = rt.block_on(raw(input));
            let parsed = parse_answer(&answer);
            proptest::prop_assert!(parsed.is_some(), "no HTTP answer: {:?}", String::from_utf8_lossy(&answer));
            let (status, body) = parsed.unwrap_or_default();
            let body: Value = serde_json::from_slice(&body).unwrap_or_default();
            if status == 200 {
                let len = body["body"].as_u64().unwrap_or(u64::MAX);
                proptest::prop_assert!(len <= MAX_BODY as u64, "{body}");
            } else {
                proptest::prop_assert!(
                    body["code"].is_string() && body["message"].is_string(),
                    "{status} {:?}", String::from_utf8_lossy(&answer)
                );
            }
        }
    }
}

// Found by the http_request fuzz target: an HTTP/1.0 request is answered in HTTP/1.0 by
// hyper (the hand-written layer always wrote HTTP/1.1); the answer is still the router's or
// a JSON error.
#[tokio::test]
async fn an_http_1_0_request_is_answered_in_http_1_0() {
    let answer = raw(b"DLEETE /vq/holds/x HTTP/1.0\r\n\r\n").await;
    assert!(
        answer.starts_with(b"HTTP/1.0 200"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    let (status, body) = parse_answer(&answer).unwrap();
    assert_eq!(status, 200);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["method"], "DLEETE");
}
