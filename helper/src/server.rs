//! The socket side: a bounded accept, each peer's credentials checked before a byte is read
//! (refused peers answered and closed by the accept loop itself, holding nothing), a slot from
//! the connection [`Budget`] for allowed peers, the `Hello` handshake, and one request at a
//! time per connection.
//!
//! It must never spawn a task or keep a descriptor for a refused peer, never write more than
//! one audit line per window for one uid's refusals (see [`crate::audit`]), and never start an
//! operation on a connection that was told to give way or after shutdown began.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bcd_protocol::frame::{encode, read_frame, write_frame, FrameError};
use bcd_protocol::{
    ClientFrame, HelloAnswer, HelperError, Operation, OperationKind, Request, Response,
    ServerFrame, PROTOCOL_VERSION,
};
use nix::sys::socket::{getsockopt, sockopt};
use tokio::io::AsyncReadExt;
use tokio::net::{UnixListener, UnixStream};

use crate::audit::{Audit, Peer, Record, Verdict};
use crate::budget::{Budget, Slot};
use crate::ops::{audit_arguments, changes_host, Ops};

/// How long a connection may sit quiet between requests. Longer than a frame's bound (an agent
/// may keep its connection for a while) but bounded; an idle connection also gives way at once
/// when an allowed peer needs its slot.
pub const IDLE_BETWEEN_REQUESTS: Duration = Duration::from_secs(60);
/// Bound on sending one answer: a peer that does not read is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the idle-exit clock and the audit's windows are looked at.
const TICK: Duration = Duration::from_millis(250);
/// How long the accept loop pauses when the process is out of descriptors.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Most supplementary groups read from `SO_PEERGROUPS` (the kernel's `NGROUPS_MAX`).
const MAX_PEER_GROUPS: usize = 65_536;

/// Who may connect.
#[derive(Debug, Clone, Default)]
pub struct Allow {
    /// Uids allowed besides root.
    pub uids: Vec<u32>,
    /// Groups allowed: a peer whose primary or any supplementary group is one of these.
    pub gids: Vec<u32>,
}

impl Allow {
    /// Root, a listed uid, or a peer in a listed group (primary or supplementary: the same
    /// membership the socket's group mode admits). The pid is never looked at: it can be
    /// reused, and a process can pass its socket to another.
    pub fn permits(&self, uid: u32, gid: u32, groups: &[u32]) -> bool {
        uid == 0
            || self.uids.contains(&uid)
            || self.gids.contains(&gid)
            || groups.iter().any(|g| self.gids.contains(g))
    }
}

/// The operations a helper offers: only `Ping` when it serves only `Ping`, none that acts on a
/// device when it cannot lock devices, `cdi.nvidia` only when root gave it a spec file, else
/// every one. What it leaves out it refuses anyway; saying so in `Hello` lets `bcd helper
/// ping` and doctor tell before the first reset does.
fn offered(ping_only: bool, no_device_locks: bool, nvidia_cdi: bool) -> Vec<OperationKind> {
    OperationKind::ALL
        .into_iter()
        .filter(|k| !ping_only || *k == OperationKind::Ping)
        .filter(|k| !no_device_locks || !k.acts_on_devices())
        .filter(|k| nvidia_cdi || *k != OperationKind::NvidiaCdiSpec)
        .collect()
}

/// What every connection shares.
#[derive(Debug)]
pub struct Shared {
    /// The operations.
    pub ops: Ops,
    /// The audit trail.
    pub audit: Arc<Audit>,
    /// Who may connect.
    pub allow: Allow,
    /// The connection slots.
    pub budget: Arc<Budget>,
    /// Bound on one frame.
    pub frame_timeout: Duration,
    /// Why only `Ping` is served (the sandbox could not confine the helper), when so.
    pub ping_only: Option<String>,
    /// What `Hello` says this helper offers: see [`offered`].
    offered: Vec<OperationKind>,
    in_flight: AtomicUsize,
    shutting_down: AtomicBool,
    last_activity: Mutex<Instant>,
}

impl Shared {
    /// The shared state of a fresh server.
    pub fn new(
        ops: Ops,
        audit: Arc<Audit>,
        allow: Allow,
        budget: Budget,
        frame_timeout: Duration,
        ping_only: Option<String>,
    ) -> Self {
        let offered = offered(
            ping_only.is_some(),
            ops.locks.unusable().is_some(),
            ops.nvidia_cdi.is_some(),
        );
        Self {
            ops,
            audit,
            allow,
            budget: Arc::new(budget),
            frame_timeout,
            ping_only,
            offered,
            in_flight: AtomicUsize::new(0),
            shutting_down: AtomicBool::new(false),
            last_activity: Mutex::new(Instant::now()),
        }
    }

    /// Stops new work: requests that arrive from now on are answered `Busy` ("shutting
    /// down"), then waits, at most `bound`, for operations still running and for sysfs writes
    /// still in the kernel: stopping in the middle of a bind could leave a function with an
    /// override and no driver.
    pub async fn drain(&self, bound: Duration) {
        self.shutting_down.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + bound;
        let busy = || self.in_flight.load(Ordering::SeqCst) > 0 || self.ops.sysfs.any_pending();
        while busy() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let left = self.in_flight.load(Ordering::SeqCst);
        if left > 0 || self.ops.sysfs.any_pending() {
            tracing::error!(
                "exiting with {left} operations still running (or sysfs writes still in the kernel) after {}s",
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

/// Serves until `idle_exit` passes with no connection (when given), a signal arrives, or the
/// helper finds it must be replaced. Returns with shutdown begun (see [`Shared::drain`]).
pub async fn serve(listener: UnixListener, shared: Arc<Shared>, idle_exit: Option<Duration>) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let mut tick = tokio::time::interval(TICK);
    let mut out_of_fds = false;
    loop {
        // The permit before accept: while no allowed peer could get a slot, connections wait
        // in the kernel's backlog, not here as descriptors.
        let room = shared.budget.could_admit();
        tokio::select! {
            accepted = listener.accept(), if room => match accepted {
                Ok((stream, _)) => {
                    if out_of_fds {
                        tracing::info!("accepting connections again");
                        out_of_fds = false;
                    }
                    shared.touch();
                    admit(stream, &shared);
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning; say so once.
                    if !out_of_fds {
                        tracing::warn!("accept failed: {e}; pausing {}ms between tries until it works again", ACCEPT_BACKOFF.as_millis());
                        out_of_fds = true;
                    }
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            _ = shared.budget.changed(), if !room => {},
            _ = tick.tick() => {
                shared.audit.flush();
                if shared.ops.restart_needed.load(Ordering::SeqCst) {
                    tracing::error!("exiting so that systemd starts a fresh bcd-helper (a program it runs was replaced)");
                    shared.shutting_down.store(true, Ordering::SeqCst);
                    return;
                }
                if let Some(idle) = idle_exit {
                    if shared.budget.held() == 0
                        && !shared.ops.sysfs.any_pending()
                        && shared.quiet_for() >= idle
                    {
                        tracing::info!("no connection for {}s: exiting until the socket activates me again", idle.as_secs());
                        return;
                    }
                }
            },
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {
                tracing::info!("SIGTERM: finishing running operations, answering new ones busy, then exiting");
                shared.shutting_down.store(true, Ordering::SeqCst);
                return;
            },
            _ = tokio::signal::ctrl_c() => {
                tracing::info!("SIGINT: exiting");
                shared.shutting_down.store(true, Ordering::SeqCst);
                return;
            }
        }
    }
}

/// The kernel's record of who connected.
struct Credentials {
    pid: i32,
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
}

/// The peer's credentials; its supplementary groups only when `want_groups` (they matter only
/// when a group is allowed, and a refused flood should cost as few system calls as it can).
fn credentials(stream: &UnixStream, want_groups: bool) -> Option<Credentials> {
    let cred = getsockopt(&stream.as_fd(), sockopt::PeerCredentials).ok()?;
    Some(Credentials {
        pid: cred.pid(),
        uid: cred.uid(),
        gid: cred.gid(),
        groups: if want_groups {
            peer_groups(stream).unwrap_or_default()
        } else {
            Vec::new()
        },
    })
}

/// The peer's supplementary groups as the kernel recorded them at connect (`SO_PEERGROUPS`).
fn peer_groups(stream: &UnixStream) -> Option<Vec<u32>> {
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len =
            libc::socklen_t::try_from(groups.len() * std::mem::size_of::<libc::gid_t>()).ok()?;
        // SAFETY: the buffer holds `len` bytes and outlives the call; the kernel writes at
        // most `len` bytes and sets `len` to what it wrote (or needs, with ERANGE).
        let rc = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / std::mem::size_of::<libc::gid_t>();
        if rc == 0 {
            groups.truncate(n);
            return Some(groups);
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ERANGE) && n > groups.len() && n <= MAX_PEER_GROUPS {
            groups.resize(n, 0);
            continue;
        }
        return None;
    }
}

fn exe_of(pid: i32) -> Option<String> {
    // Under Landlock another process's exe link cannot be read (ptrace-like access); its
    // command name still can, and the audit line says which it is.
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
        .or_else(|| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .ok()
                .map(|comm| format!("comm:{}", comm.trim()))
        })
}

/// Sends one small frame without waiting: a refused peer gets its answer if its socket can
/// take it now (a fresh socket always can), and nothing is kept for it either way.
fn answer_and_close(stream: UnixStream, frame: &ServerFrame) {
    // The refusal every flood gets is encoded once.
    static DENIED: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let encoded;
    let bytes: &[u8] = match frame {
        ServerFrame::Closing(HelperError::Denied) => {
            DENIED.get_or_init(|| encode(frame).unwrap_or_default())
        }
        other => match encode(other) {
            Ok(b) => {
                encoded = b;
                &encoded
            }
            Err(_) => return,
        },
    };
    // SAFETY: the buffer is valid for its length; the descriptor is the stream's own and
    // stays open until the stream is dropped below.
    let _ = unsafe {
        libc::send(
            stream.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
}

/// Checks a new connection's peer and gives it a slot, or answers and closes it at once.
fn admit(stream: UnixStream, shared: &Arc<Shared>) {
    let Some(cred) = credentials(&stream, !shared.allow.gids.is_empty()) else {
        tracing::debug!("a connection without readable peer credentials was closed");
        return;
    };
    let refuse = |verdict: Verdict, err: HelperError, stream: UnixStream| {
        let peer = Peer {
            pid: cred.pid,
            uid: cred.uid,
            gid: cred.gid,
            exe: None,
        };
        shared.audit.refusal(
            "connect",
            &Record {
                peer: &peer,
                operation: "connect",
                arguments: &[],
                verdict,
                message: Some(err.to_string()),
                duration: Duration::ZERO,
            },
        );
        answer_and_close(stream, &ServerFrame::Closing(err));
    };
    if !shared.allow.permits(cred.uid, cred.gid, &cred.groups) {
        refuse(Verdict::Denied, HelperError::Denied, stream);
        return;
    }
    if shared.shutting_down.load(Ordering::SeqCst) {
        refuse(Verdict::Busy, shutting_down(), stream);
        return;
    }
    let slot = match shared.budget.admit(cred.uid) {
        Ok(slot) => slot,
        Err(full) => {
            refuse(Verdict::Busy, HelperError::Busy { what: full.0 }, stream);
            return;
        }
    };
    let peer = Peer {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
        exe: exe_of(cred.pid),
    };
    let shared = shared.clone();
    tokio::spawn(async move {
        let mut stream = stream;
        let evicted = tokio::select! {
            _ = slot.evicted() => true,
            _ = handle(&mut stream, &shared, &peer, &slot) => false,
        };
        if evicted {
            let err = HelperError::Busy {
                what: "this idle connection was closed to make room for another; connect again"
                    .to_owned(),
            };
            answer_and_close(stream, &ServerFrame::Closing(err));
        }
        drop(slot);
        shared.touch();
    });
}

fn shutting_down() -> HelperError {
    HelperError::Busy {
        what: "bcd-helper is shutting down (systemd starts a fresh one on the next connection)"
            .to_owned(),
    }
}

async fn send(stream: &mut UnixStream, frame: &ServerFrame) -> bool {
    matches!(
        tokio::time::timeout(WRITE_TIMEOUT, write_frame(stream, frame)).await,
        Ok(Ok(()))
    )
}

/// One connection, from the handshake to its close.
async fn handle(stream: &mut UnixStream, shared: &Shared, peer: &Peer, slot: &Slot) {
    let started = Instant::now();
    let refusal = |operation: &'static str, verdict: Verdict, message: String| {
        shared.audit.refusal(
            operation,
            &Record {
                peer,
                operation,
                arguments: &[],
                verdict,
                message: Some(message),
                duration: started.elapsed(),
            },
        );
    };

    // The handshake.
    match read_frame::<_, ClientFrame>(stream, shared.frame_timeout).await {
        Ok(ClientFrame::Hello { version }) if version == PROTOCOL_VERSION => {
            let answer = HelloAnswer {
                version: PROTOCOL_VERSION,
                helper_version: env!("CARGO_PKG_VERSION").to_owned(),
                operations: shared.offered.clone(),
            };
            if !send(stream, &ServerFrame::Hello(Ok(answer))).await {
                return;
            }
        }
        Ok(ClientFrame::Hello { version }) => {
            refusal(
                "hello",
                Verdict::Unsupported,
                format!("protocol version {version}; this helper speaks {PROTOCOL_VERSION}"),
            );
            send(stream, &ServerFrame::Hello(Err(HelperError::Unsupported))).await;
            return;
        }
        Ok(ClientFrame::Request(_)) => {
            let err = HelperError::Invalid {
                what: "the first frame must be Hello".to_owned(),
            };
            refusal("hello", Verdict::Invalid, err.to_string());
            send(stream, &ServerFrame::Closing(err)).await;
            return;
        }
        Err(e) => {
            refuse_frame(stream, shared, peer, e, started).await;
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
                send(stream, &ServerFrame::Closing(err)).await;
                return;
            }
        }
        let started = Instant::now();
        let frame = {
            let mut chained = (&first[..]).chain(&mut *stream);
            read_frame::<_, ClientFrame>(&mut chained, shared.frame_timeout).await
        };
        let request = match frame {
            Ok(ClientFrame::Request(r)) => r,
            Ok(ClientFrame::Hello { .. }) => {
                let err = HelperError::Invalid {
                    what: "Hello was already answered on this connection".to_owned(),
                };
                refusal("frame", Verdict::Invalid, err.to_string());
                send(stream, &ServerFrame::Closing(err)).await;
                return;
            }
            Err(e) => {
                refuse_frame(stream, shared, peer, e, started).await;
                return;
            }
        };
        // From here the connection no longer gives way: its operation runs to its answer.
        if !slot.begin_work() {
            return;
        }
        shared.touch();
        let response = if shared.shutting_down.load(Ordering::SeqCst) {
            let err = shutting_down();
            shared.audit.write(&Record {
                peer,
                operation: request.op.kind().name(),
                arguments: &audit_arguments(&request.op),
                verdict: Verdict::Busy,
                message: Some(err.to_string()),
                duration: started.elapsed(),
            });
            Response {
                id: request.id,
                result: Err(err),
            }
        } else {
            run_request(shared, peer, request, started).await
        };
        let sent = send(stream, &ServerFrame::Response(response)).await;
        slot.end_work();
        shared.touch();
        if !sent {
            return;
        }
    }
}

/// Answers a frame that could not be read with `Closing(Invalid)` where the peer can still
/// hear it, and audits it (aggregated). A clean close between frames is not an event.
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
    shared.audit.refusal(
        "frame",
        &Record {
            peer,
            operation: "frame",
            arguments: &[],
            verdict: Verdict::Invalid,
            message: Some(err.to_string()),
            duration: started.elapsed(),
        },
    );
    if !matches!(e, FrameError::Io(_) | FrameError::Truncated) {
        send(stream, &ServerFrame::Closing(err)).await;
    }
}

async fn run_request(shared: &Shared, peer: &Peer, request: Request, started: Instant) -> Response {
    let Request { id, op } = request;
    let kind = op.kind();
    shared.in_flight.fetch_add(1, Ordering::SeqCst);
    let _in_flight = InFlight(&shared.in_flight);
    let arguments = audit_arguments(&op);
    let refuse = |message: String| {
        Err(HelperError::Failed {
            exit_code: None,
            message,
        })
    };
    let result = if matches!(op, Operation::Ping) {
        shared.ops.run(&op).await
    } else if let Some(why) = &shared.ping_only {
        // A helper that runs unconfined does nothing privileged unless root said so.
        refuse(why.clone())
    } else if changes_host(&op) {
        // A helper that cannot leave a trace does nothing privileged; the trace comes first.
        let started_line = shared.audit.started(&Record {
            peer,
            operation: kind.name(),
            arguments: &arguments,
            verdict: Verdict::Started,
            message: None,
            duration: started.elapsed(),
        });
        match started_line {
            Ok(()) => shared.ops.run(&op).await,
            Err(why) => refuse(why),
        }
    } else {
        match shared.audit.health() {
            Ok(()) => shared.ops.run(&op).await,
            Err(why) => refuse(why),
        }
    };
    let (verdict, message) = match &result {
        Ok(_) => (Verdict::Ok, None),
        Err(e) => (Verdict::of(e), Some(e.to_string())),
    };
    shared.audit.write(&Record {
        peer,
        operation: kind.name(),
        arguments: &arguments,
        verdict,
        message,
        duration: started.elapsed(),
    });
    Response { id, result }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A helper that serves only Ping listed every operation in its Hello, as one whose lock
    // folder is unusable did: what it refuses whatever the arguments is left out.
    #[test]
    fn hello_offers_only_what_the_helper_can_run() {
        assert_eq!(offered(false, false, true), OperationKind::ALL.to_vec());
        assert_eq!(offered(true, false, true), [OperationKind::Ping]);
        assert_eq!(offered(true, true, true), [OperationKind::Ping]);
        assert_eq!(
            offered(false, true, true),
            [
                OperationKind::Ping,
                OperationKind::LibvirtGpus,
                OperationKind::NvidiaCdiSpec
            ]
        );
        // No spec file configured: no NVIDIA CDI spec offered.
        assert!(!offered(false, false, false).contains(&OperationKind::NvidiaCdiSpec));
    }
}
