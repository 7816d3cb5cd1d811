//! `GET /v1/status?watch=true`: a control plane's view of the node without polling. The
//! answer is a stream of newline-delimited JSON, one `/v1/status` document per line: the
//! first at once, then a new one each time what the status says about the node changes (a
//! verdict or its reasons, the inventory's hash, the holds, the conditions, the problems), the
//! samples' readings aside, checked at every change the node signals and every
//! [`RECHECK_EVERY`]. The body ends when the client closes; it has no length
//! (`Connection: close`).
//!
//! Watchers have their own places ([`MAX_WATCHERS`]), apart from the API's connection slots: a
//! watch beyond them is answered 503 `too-many-watchers`. A line not taken within
//! [`WRITE_TIMEOUT`] drops its watcher, so a slow reader costs one buffer and one place, never
//! the node's time.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::node::schema::NodeStatus;
use crate::node::shared::Node;
use crate::source::DeviceSource;

/// Watchers served at once.
pub const MAX_WATCHERS: usize = 8;
/// How long one line may take to be written before its watcher is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the status is looked at when the node signals nothing (a verdict that changes
/// with the samples, a problem).
pub const RECHECK_EVERY: Duration = Duration::from_secs(5);

/// The watchers' places.
#[derive(Debug, Clone)]
pub struct Watchers(Arc<Semaphore>);

impl Default for Watchers {
    fn default() -> Self {
        Self(Arc::new(Semaphore::new(MAX_WATCHERS)))
    }
}

impl Watchers {
    /// A place, or `None` when all [`MAX_WATCHERS`] are taken.
    pub fn take(&self) -> Option<OwnedSemaphorePermit> {
        self.0.clone().try_acquire_owned().ok()
    }
}

/// Whether a request line asks for the watch: `GET /v1/status` with `watch=true` (or `1`) in
/// its query.
pub fn is_watch(method: &str, target: &str) -> bool {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    method == "GET"
        && path.trim_end_matches('/') == "/v1/status"
        && query
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1"))
}

/// What a new line is sent for: the document without the samples' readings, its age and its
/// collection count, which change all the time.
pub fn watched(status: &NodeStatus) -> String {
    let mut quiet = status.clone();
    quiet.inventory_age_s = None;
    quiet.collections = 0;
    for g in &mut quiet.gpus {
        g.utilization_gpu_pct = None;
        g.memory_used_mib = None;
        g.temperature_c = None;
        g.power_draw_w = None;
        g.compute_processes = None;
    }
    quiet.sampling = Default::default();
    serde_json::to_string(&quiet).unwrap_or_default()
}

/// Serves one watcher on `stream` while it holds `place` (`None`: refused with 503).
pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    node: &Node,
    stream: S,
    place: Option<OwnedSemaphorePermit>,
) {
    let (mut reader, mut writer) = tokio::io::split(stream);
    let Some(_place) = place else {
        let body = crate::node::http::error_body(
            "too-many-watchers",
            &format!(
                "{MAX_WATCHERS} status watchers are served already; close one, or poll GET /v1/status"
            ),
        );
        let mut answer = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        answer.extend_from_slice(&body);
        let _ = tokio::time::timeout(WRITE_TIMEOUT, async {
            writer.write_all(&answer).await?;
            writer.shutdown().await
        })
        .await;
        return;
    };
    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ncache-control: no-store\r\nconnection: close\r\n\r\n";
    if !write_within(&mut writer, head.as_bytes()).await {
        return;
    }
    let mut changes = node.changes();
    let mut last: Option<String> = None;
    let mut scratch = [0u8; 256];
    loop {
        let status = crate::node::api::status_document(node).await;
        let key = watched(&status);
        if last.as_ref() != Some(&key) {
            let mut line =
                serde_json::to_vec(&crate::document::versioned(&status)).unwrap_or_default();
            line.push(b'\n');
            if !write_within(&mut writer, &line).await {
                tracing::debug!("a status watcher did not take its line in time; it is dropped");
                return;
            }
            last = Some(key);
        }
        tokio::select! {
            alive = changes.changed() => if !alive { return },
            () = tokio::time::sleep(RECHECK_EVERY) => {}
            // The client closed (or sent what no watch reads): the watch ends.
            read = reader.read(&mut scratch) => if matches!(read, Ok(0) | Err(_)) { return },
        }
    }
}

/// Writes `bytes` within [`WRITE_TIMEOUT`]; `false` when it failed or took too long.
async fn write_within<W: AsyncWrite + Unpin>(writer: &mut W, bytes: &[u8]) -> bool {
    let written = tokio::time::timeout(WRITE_TIMEOUT, async {
        writer.write_all(bytes).await?;
        writer.flush().await
    })
    .await;
    matches!(written, Ok(Ok(())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_get_of_the_status_with_watch_true_is_a_watch() {
        assert!(is_watch("GET", "/v1/status?watch=true"));
        assert!(is_watch("GET", "/v1/status/?a=b&watch=1"));
        assert!(!is_watch("GET", "/v1/status"));
        assert!(!is_watch("GET", "/v1/status?watch=false"));
        assert!(!is_watch("POST", "/v1/status?watch=true"));
        assert!(!is_watch("GET", "/v1/holds?watch=true"));
    }

    #[test]
    fn readings_alone_send_no_new_line_but_a_verdict_does() {
        let mut a = NodeStatus {
            inventory_hash: "sha256:x".into(),
            ..NodeStatus::default()
        };
        let before = watched(&a);
        a.inventory_age_s = Some(9);
        a.collections = 4;
        assert_eq!(watched(&a), before);
        a.problems.push("the kernel log cannot be read".into());
        assert_ne!(watched(&a), before);
    }

    // A reader that takes nothing: the line's write gives up after WRITE_TIMEOUT.
    #[tokio::test(start_paused = true)]
    async fn a_reader_that_takes_nothing_is_dropped_after_the_write_timeout() {
        let (mut ours, _theirs) = tokio::io::duplex(64);
        let started = tokio::time::Instant::now();
        assert!(!write_within(&mut ours, &[b'x'; 4096]).await);
        assert_eq!(started.elapsed(), WRITE_TIMEOUT);
    }
}
