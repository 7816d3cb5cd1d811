//! Feeds arbitrary bytes to the API's request decoding and router, the way a connection to
//! the API socket would: `check_head` must return, never panic, and bound what it accepts;
//! `serve_connection` (the head check, then hyper) must answer every input with the router's
//! parse (`ApiRequest::parse`: route, body, query) or a JSON error `{"code", "message"}`, never with hyper's empty-bodied refusals,
//! and never hand the router a body over `MAX_BODY`.

#![no_main]

use std::sync::OnceLock;

use bcd::node::api::ApiRequest;
use bcd::node::http::{check_head, serve_connection, Reply, Request, MAX_BODY, MAX_HEAD};
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// The parse with no node behind it: the request it made, or its refusal.
async fn routed(request: Request) -> Reply {
    match ApiRequest::parse(&request) {
        Ok(asked) => Reply::json(
            200,
            serde_json::json!({ "route": format!("{asked:?}"), "body": request.body.len() })
                .to_string()
                .into_bytes(),
        ),
        Err(e) => {
            let (status, body) = e.answer();
            Reply::json(status, body)
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(head)) = check_head(data) {
        assert!(head.len <= data.len() && head.len <= MAX_HEAD);
        assert!(head.declared <= MAX_BODY as u64);
    }
    let answer = runtime().block_on(async {
        let (mut client, server) = tokio::io::duplex(256 * 1024);
        let serving = tokio::spawn(serve_connection(server, routed));
        let _ = client.write_all(data).await;
        let _ = client.shutdown().await;
        let mut answer = Vec::new();
        let _ = client.read_to_end(&mut answer).await;
        serving.await.expect("serve_connection panicked");
        answer
    });
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer");
    let head = std::str::from_utf8(&answer[..split]).expect("a UTF-8 head");
    let status: u16 = head
        // hyper answers an HTTP/1.0 request in HTTP/1.0.
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| head.strip_prefix("HTTP/1.0 "))
        .and_then(|h| h.get(..3))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let body: serde_json::Value =
        serde_json::from_slice(&answer[split + 4..]).expect("a JSON body");
    if status == 200 {
        assert!(body["body"].as_u64().is_some_and(|n| n <= MAX_BODY as u64));
    } else {
        assert!(
            body["code"].is_string() && body["message"].is_string(),
            "{body}"
        );
    }
});
