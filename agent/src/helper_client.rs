//! The agent's side of the helper protocol: connect to `bcd-helper`'s socket, say `Hello`, and
//! run one operation at a time with a per-call bound.
//!
//! Every failure is a [`ClientError`] whose `Display` is the sentence an operator reads; the
//! helper's own typed errors pass through unchanged.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bcd_protocol::frame::{read_frame, write_frame, FrameError};
use bcd_protocol::{
    ClientFrame, HelloAnswer, HelperError, Operation, Outcome, Request, ServerFrame,
    PROTOCOL_VERSION,
};
use tokio::net::UnixStream;

/// How long a connect that finds the helper's backlog full (`EAGAIN`, e.g. while other
/// peers flood it) is retried before it counts as failed.
pub const CONNECT_RETRY_FOR: Duration = Duration::from_secs(2);
/// The first pause between those retries; it doubles up to 100 ms.
const CONNECT_RETRY_FIRST: Duration = Duration::from_millis(5);

/// Connects to `path`, retrying for [`CONNECT_RETRY_FOR`] while the listener's backlog is
/// full: a Unix socket answers `EAGAIN` then, not a wait.
async fn connect_retrying(path: &Path) -> std::io::Result<UnixStream> {
    let deadline = tokio::time::Instant::now() + CONNECT_RETRY_FOR;
    let mut pause = CONNECT_RETRY_FIRST;
    loop {
        match UnixStream::connect(path).await {
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    && tokio::time::Instant::now() + pause < deadline =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// The helper's socket in production.
pub const DEFAULT_SOCKET: &str = "/run/bcd-helper/helper.sock";
/// Bound on connecting and the `Hello` exchange.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Slack added to the helper's own bounds for socket round trips and scheduling.
pub const MARGIN: Duration = Duration::from_secs(5);
/// The helper's bound on one `nvidia-smi` call (its default `--nvidia-smi-timeout`).
pub const HELPER_NVIDIA_SMI_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the helper waits for a device another operation holds before answering `Busy`.
pub const HELPER_DEVICE_WAIT: Duration = Duration::from_secs(30);
/// The helper's default unbind timeout.
pub const HELPER_UNBIND_TIMEOUT: Duration = Duration::from_secs(30);
/// The helper's default bound on one `virsh` call.
pub const HELPER_VIRSH_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a call to the helper did not give an answer. `Display` is the operator's sentence.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be reached.
    #[error("cannot reach bcd-helper at {path}: {reason} (is bcd-helper.socket enabled? systemctl enable --now bcd-helper.socket)")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why, in words.
        reason: String,
        /// The system's kind of error, for callers that tell "no helper" from "broken helper".
        kind: std::io::ErrorKind,
    },
    /// The helper answered with a typed error.
    #[error(transparent)]
    Helper(#[from] HelperError),
    /// No answer within the bound.
    #[error(
        "bcd-helper at {path} did not answer within {after_s}s (see journalctl -u bcd-helper)"
    )]
    Timeout {
        /// The socket.
        path: PathBuf,
        /// The bound.
        after_s: u64,
    },
    /// The helper went away or sent something out of turn.
    #[error(
        "bcd-helper at {path} broke off the conversation: {what} (see journalctl -u bcd-helper)"
    )]
    Protocol {
        /// The socket.
        path: PathBuf,
        /// What happened.
        what: String,
    },
}

/// One connection to the helper, past the handshake.
#[derive(Debug)]
pub struct HelperClient {
    stream: UnixStream,
    path: PathBuf,
    next_id: u64,
    hello: HelloAnswer,
}

impl HelperClient {
    /// Connects and says `Hello`, all within `timeout`.
    ///
    /// # Errors
    /// [`ClientError::Connect`] when the socket cannot be reached, [`ClientError::Helper`] when
    /// the helper refuses (not allowed, another protocol version), [`ClientError::Timeout`].
    pub async fn connect(path: &Path, timeout: Duration) -> Result<Self, ClientError> {
        let after_s = timeout.as_secs().max(1);
        let timed_out = || ClientError::Timeout {
            path: path.to_path_buf(),
            after_s,
        };
        let work = async {
            let mut stream = connect_retrying(path)
                .await
                .map_err(|e| ClientError::Connect {
                    path: path.to_path_buf(),
                    reason: connect_reason(&e),
                    kind: e.kind(),
                })?;
            write_frame(
                &mut stream,
                &ClientFrame::Hello {
                    version: PROTOCOL_VERSION,
                },
            )
            .await
            .map_err(|e| protocol(path, &e))?;
            match read_frame::<_, ServerFrame>(&mut stream, timeout).await {
                Ok(ServerFrame::Hello(Ok(hello))) => Ok(Self {
                    stream,
                    path: path.to_path_buf(),
                    next_id: 1,
                    hello,
                }),
                Ok(ServerFrame::Hello(Err(e)) | ServerFrame::Closing(e)) => Err(e.into()),
                Ok(ServerFrame::Response(_)) => Err(ClientError::Protocol {
                    path: path.to_path_buf(),
                    what: "it answered Hello with a response".to_owned(),
                }),
                Err(FrameError::Stalled(_)) => Err(timed_out()),
                Err(e) => Err(protocol(path, &e)),
            }
        };
        tokio::time::timeout(timeout, work)
            .await
            .unwrap_or_else(|_| Err(timed_out()))
    }

    /// What the helper said in its `Hello`.
    pub fn hello(&self) -> &HelloAnswer {
        &self.hello
    }

    /// Runs one operation, waiting at most `timeout` for its answer (see
    /// [`suggested_timeout`]). After a timeout or protocol error the connection is no longer
    /// usable: connect again.
    ///
    /// # Errors
    /// [`ClientError::Helper`] with the helper's typed error, [`ClientError::Timeout`],
    /// [`ClientError::Protocol`].
    pub async fn request(
        &mut self,
        op: Operation,
        timeout: Duration,
    ) -> Result<Outcome, ClientError> {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let path = self.path.clone();
        let stream = &mut self.stream;
        let work = async {
            write_frame(stream, &ClientFrame::Request(Request { id, op }))
                .await
                .map_err(|e| protocol(&path, &e))?;
            match read_frame::<_, ServerFrame>(stream, timeout).await {
                Ok(ServerFrame::Response(r)) if r.id == id => Ok(r.result?),
                Ok(ServerFrame::Response(r)) => Err(ClientError::Protocol {
                    path: path.clone(),
                    what: format!("it answered request {} while {id} was asked", r.id),
                }),
                Ok(ServerFrame::Closing(e)) => Err(e.into()),
                Ok(ServerFrame::Hello(_)) => Err(ClientError::Protocol {
                    path: path.clone(),
                    what: "it sent a second Hello".to_owned(),
                }),
                Err(FrameError::Stalled(_)) => Err(ClientError::Timeout {
                    path: path.clone(),
                    after_s: timeout.as_secs().max(1),
                }),
                Err(e) => Err(protocol(&path, &e)),
            }
        };
        tokio::time::timeout(timeout, work)
            .await
            .unwrap_or_else(|_| {
                Err(ClientError::Timeout {
                    path: self.path.clone(),
                    after_s: timeout.as_secs().max(1),
                })
            })
    }
}

/// A bound for one operation that covers the helper's own bounds with its defaults: the wait
/// for a busy device, then each child or sysfs step, plus [`MARGIN`].
pub fn suggested_timeout(op: &Operation) -> Duration {
    let smi = HELPER_NVIDIA_SMI_TIMEOUT;
    match op {
        Operation::Ping => CONNECT_TIMEOUT,
        Operation::SetPersistence { .. } | Operation::ResetGpu { .. } => {
            HELPER_DEVICE_WAIT + smi + MARGIN
        }
        // Persistence off (or on), the unbind, and the probe settling.
        Operation::VfioBind { .. } | Operation::VfioRelease { .. } => {
            HELPER_DEVICE_WAIT + smi * 2 + HELPER_UNBIND_TIMEOUT + MARGIN * 2
        }
        // Reading the XML, persistence for a few GPUs, then the start, restore or destroy.
        // Reading the XML only.
        Operation::LibvirtDomainGpus { .. } | Operation::LibvirtImageGpus { .. } => {
            HELPER_VIRSH_TIMEOUT + MARGIN
        }
        Operation::LibvirtStart { .. }
        | Operation::LibvirtRestore { .. }
        | Operation::LibvirtDestroy { .. } => {
            HELPER_DEVICE_WAIT * 2 + HELPER_VIRSH_TIMEOUT * 2 + smi * 4 + MARGIN
        }
    }
}

fn protocol(path: &Path, e: &FrameError) -> ClientError {
    ClientError::Protocol {
        path: path.to_path_buf(),
        what: e.to_string(),
    }
}

fn connect_reason(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::NotFound => "no socket there".to_owned(),
        K::ConnectionRefused => "connection refused".to_owned(),
        K::PermissionDenied => "permission denied (is this user in the bcd group?)".to_owned(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_socket_is_an_operator_sentence() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("helper.sock");
        let err = HelperClient::connect(&path, Duration::from_secs(1))
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("cannot reach bcd-helper at "), "{text}");
        assert!(
            text.contains("systemctl enable --now bcd-helper.socket"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn hello_ping_and_the_echoed_id() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("helper.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        // A stand-in helper: answers Hello, then a Pong with the right id, then a wrong id.
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let t = Duration::from_secs(5);
            let _: ClientFrame = read_frame(&mut s, t).await.unwrap();
            let hello = HelloAnswer {
                version: PROTOCOL_VERSION,
                helper_version: "test".into(),
                operations: vec![],
            };
            write_frame(&mut s, &ServerFrame::Hello(Ok(hello)))
                .await
                .unwrap();
            for bump in [0, 1] {
                let ClientFrame::Request(r) = read_frame(&mut s, t).await.unwrap() else {
                    panic!("not a request")
                };
                let answer = bcd_protocol::Response {
                    id: r.id + bump,
                    result: Ok(Outcome::Pong {
                        helper_version: "test".into(),
                        sandbox: "landlock full".into(),
                    }),
                };
                write_frame(&mut s, &ServerFrame::Response(answer))
                    .await
                    .unwrap();
            }
        });
        let mut c = HelperClient::connect(&path, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(c.hello().helper_version, "test");
        let pong = c
            .request(Operation::Ping, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(matches!(pong, Outcome::Pong { .. }));
        let err = c
            .request(Operation::Ping, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(matches!(err, ClientError::Protocol { .. }), "{err}");
        server.await.unwrap();
    }
}
