//! The socket side: accepting connections under a cap, checking each peer's credentials before
//! reading a byte, the `Hello` handshake, and one request at a time per connection.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bcd_protocol::frame::{read_frame, write_frame, FrameError};
use bcd_protocol::{
    ClientFrame, HelloAnswer, HelperError, Operation, OperationKind, Request, Response,
    ServerFrame, PROTOCOL_VERSION,
};
use nix::sys::socket::{getsockopt, sockopt};
use tokio::io::AsyncReadExt;
use tokio::net::{UnixListener, UnixStream};

use crate::audit::{Audit, Peer, Record, Verdict};
use crate::ops::{audit_arguments, Ops};

/// How long a connection may sit quiet between requests. Longer than a frame's bound (an agent
/// may keep its connection for a while) but bounded, so idle connections cannot hold the cap.
pub const IDLE_BETWEEN_REQUESTS: Duration = Duration::from_secs(60);
/// Bound on sending one answer: a peer that does not read is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the idle-exit clock is looked at.
const IDLE_CHECK: Duration = Duration::from_millis(250);

/// Who may connect.
#[derive(Debug, Clone, Default)]
pub struct Allow {
    /// Uids allowed besides root.
    pub uids: Vec<u32>,
    /// Primary gids allowed.
    pub gids: Vec<u32>,
}

impl Allow {
    /// Root, a listed uid, or a listed primary gid. The pid is never looked at: it can be
    /// reused, and a process can pass its socket to another.
    pub fn permits(&self, uid: u32, gid: u32) -> bool {
        uid == 0 || self.uids.contains(&uid) || self.gids.contains(&gid)
    }
}

/// What every connection shares.
#[derive(Debug)]
pub struct Shared {
    /// The operations.
    pub ops: Ops,
    /// The audit trail.
    pub audit: Audit,
    /// Who may connect.
    pub allow: Allow,
    /// Connections served at once.
    pub max_connections: usize,
    /// Bound on one frame.
    pub frame_timeout: Duration,
    active: AtomicUsize,
    in_flight: AtomicUsize,
    last_activity: Mutex<Instant>,
}

impl Shared {
    /// The shared state of a fresh server.
    pub fn new(
        ops: Ops,
        audit: Audit,
        allow: Allow,
        max_connections: usize,
        frame_timeout: Duration,
    ) -> Self {
        Self {
            ops,
            audit,
            allow,
            max_connections,
            frame_timeout,
            active: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            last_activity: Mutex::new(Instant::now()),
        }
    }

    /// Waits, at most `bound`, for operations still running: stopping in the middle of a bind
    /// could leave a function with an override and no driver.
    pub async fn drain(&self, bound: Duration) {
        let deadline = Instant::now() + bound;
        while self.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let left = self.in_flight.load(Ordering::SeqCst);
        if left > 0 {
            tracing::error!(
                "exiting with {left} operations still running after {}s",
                bound.as_secs()
            );
        }
    }

    fn touch(&self) {
        *self.last_activity.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn quiet_for(&self) -> Duration {
        self.last_activity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }
}

/// Counts an operation while it runs.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts a connection while it lives.
struct Slot(Arc<Shared>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
        self.0.touch();
    }
}

/// Serves until `idle_exit` passes with no connection (when given) or a signal arrives.
pub async fn serve(listener: UnixListener, shared: Arc<Shared>, idle_exit: Option<Duration>) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let mut tick = tokio::time::interval(IDLE_CHECK);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    shared.touch();
                    let n = shared.active.fetch_add(1, Ordering::SeqCst);
                    let slot = Slot(shared.clone());
                    let s = shared.clone();
                    tokio::spawn(async move {
                        let _slot = slot;
                        handle(stream, s, n).await;
                    });
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = tick.tick() => {
                if let Some(idle) = idle_exit {
                    if shared.active.load(Ordering::SeqCst) == 0 && shared.quiet_for() >= idle {
                        tracing::info!("no connection for {}s: exiting until the socket activates me again", idle.as_secs());
                        return;
                    }
                }
            },
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {
                tracing::info!("SIGTERM: exiting");
                return;
            },
            _ = tokio::signal::ctrl_c() => {
                tracing::info!("SIGINT: exiting");
                return;
            }
        }
    }
}

fn peer_of(stream: &UnixStream) -> Option<Peer> {
    let cred = getsockopt(&stream.as_fd(), sockopt::PeerCredentials).ok()?;
    // Under Landlock another process's exe link cannot be read (ptrace-like access); its
    // command name still can, and the audit line says which it is.
    let exe = std::fs::read_link(format!("/proc/{}/exe", cred.pid()))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
        .or_else(|| {
            std::fs::read_to_string(format!("/proc/{}/comm", cred.pid()))
                .ok()
                .map(|comm| format!("comm:{}", comm.trim()))
        });
    Some(Peer {
        pid: cred.pid(),
        uid: cred.uid(),
        gid: cred.gid(),
        exe,
    })
}

async fn send(stream: &mut UnixStream, frame: &ServerFrame) -> bool {
    matches!(
        tokio::time::timeout(WRITE_TIMEOUT, write_frame(stream, frame)).await,
        Ok(Ok(()))
    )
}

/// One connection, from the credential check to its close.
async fn handle(mut stream: UnixStream, shared: Arc<Shared>, already_active: usize) {
    let started = Instant::now();
    // The credentials come from the kernel at connect time, before any byte is read.
    let Some(peer) = peer_of(&stream) else {
        tracing::warn!("a connection without readable peer credentials was closed");
        return;
    };
    let audit = |operation: &str, verdict: Verdict, message: Option<String>, started: Instant| {
        shared.audit.write(&Record {
            peer: &peer,
            operation,
            arguments: &[],
            verdict,
            message,
            duration: started.elapsed(),
        });
    };
    if !shared.allow.permits(peer.uid, peer.gid) {
        let err = HelperError::Denied;
        audit("connect", Verdict::Denied, Some(err.to_string()), started);
        send(&mut stream, &ServerFrame::Closing(err)).await;
        return;
    }
    if already_active >= shared.max_connections {
        let err = HelperError::Busy {
            what: format!("{} connections are already open", shared.max_connections),
        };
        audit("connect", Verdict::Busy, Some(err.to_string()), started);
        send(&mut stream, &ServerFrame::Closing(err)).await;
        return;
    }

    // The handshake.
    match read_frame::<_, ClientFrame>(&mut stream, shared.frame_timeout).await {
        Ok(ClientFrame::Hello { version }) if version == PROTOCOL_VERSION => {
            let answer = HelloAnswer {
                version: PROTOCOL_VERSION,
                helper_version: env!("CARGO_PKG_VERSION").to_owned(),
                operations: OperationKind::ALL.to_vec(),
            };
            if !send(&mut stream, &ServerFrame::Hello(Ok(answer))).await {
                return;
            }
        }
        Ok(ClientFrame::Hello { version }) => {
            audit(
                "hello",
                Verdict::Unsupported,
                Some(format!(
                    "protocol version {version}; this helper speaks {PROTOCOL_VERSION}"
                )),
                started,
            );
            send(
                &mut stream,
                &ServerFrame::Hello(Err(HelperError::Unsupported)),
            )
            .await;
            return;
        }
        Ok(ClientFrame::Request(_)) => {
            let err = HelperError::Invalid {
                what: "the first frame must be Hello".to_owned(),
            };
            audit("hello", Verdict::Invalid, Some(err.to_string()), started);
            send(&mut stream, &ServerFrame::Closing(err)).await;
            return;
        }
        Err(e) => {
            refuse_frame(&mut stream, &shared, &peer, e, started).await;
            return;
        }
    }

    loop {
        // Wait (long, bounded) for a request to start, then give its frame the short bound.
        let mut first = [0u8; 1];
        match tokio::time::timeout(IDLE_BETWEEN_REQUESTS, stream.read(&mut first)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(_)) => {}
            Err(_) => {
                let err = HelperError::Invalid {
                    what: format!(
                        "no request for {}s; connect again when there is work",
                        IDLE_BETWEEN_REQUESTS.as_secs()
                    ),
                };
                send(&mut stream, &ServerFrame::Closing(err)).await;
                return;
            }
        }
        let started = Instant::now();
        let frame = {
            let mut chained = (&first[..]).chain(&mut stream);
            read_frame::<_, ClientFrame>(&mut chained, shared.frame_timeout).await
        };
        let request = match frame {
            Ok(ClientFrame::Request(r)) => r,
            Ok(ClientFrame::Hello { .. }) => {
                let err = HelperError::Invalid {
                    what: "Hello was already answered on this connection".to_owned(),
                };
                audit("frame", Verdict::Invalid, Some(err.to_string()), started);
                send(&mut stream, &ServerFrame::Closing(err)).await;
                return;
            }
            Err(e) => {
                refuse_frame(&mut stream, &shared, &peer, e, started).await;
                return;
            }
        };
        shared.touch();
        let response = run_request(&shared, &peer, request, started).await;
        if !send(&mut stream, &ServerFrame::Response(response)).await {
            return;
        }
        shared.touch();
    }
}

/// Answers a frame that could not be read with `Closing(Invalid)` where the peer can still
/// hear it, and audits it. A clean close between frames is not an event.
async fn refuse_frame(
    stream: &mut UnixStream,
    shared: &Shared,
    peer: &Peer,
    e: FrameError,
    started: Instant,
) {
    if matches!(e, FrameError::Closed) {
        return;
    }
    let err = HelperError::Invalid {
        what: e.to_string(),
    };
    shared.audit.write(&Record {
        peer,
        operation: "frame",
        arguments: &[],
        verdict: Verdict::Invalid,
        message: Some(err.to_string()),
        duration: started.elapsed(),
    });
    if !matches!(e, FrameError::Io(_) | FrameError::Truncated) {
        send(stream, &ServerFrame::Closing(err)).await;
    }
}

async fn run_request(shared: &Shared, peer: &Peer, request: Request, started: Instant) -> Response {
    let Request { id, op } = request;
    let kind = op.kind();
    shared.in_flight.fetch_add(1, Ordering::SeqCst);
    let _in_flight = InFlight(&shared.in_flight);
    let result = match (&op, shared.audit.health()) {
        // A helper that cannot leave a trace does nothing privileged.
        (Operation::Ping, _) | (_, Ok(())) => shared.ops.run(&op).await,
        (_, Err(why)) => Err(HelperError::Failed {
            exit_code: None,
            message: why,
        }),
    };
    let (verdict, message) = match &result {
        Ok(_) => (Verdict::Ok, None),
        Err(e) => (Verdict::of(e), Some(e.to_string())),
    };
    shared.audit.write(&Record {
        peer,
        operation: kind.name(),
        arguments: &audit_arguments(&op),
        verdict,
        message,
        duration: started.elapsed(),
    });
    Response { id, result }
}
