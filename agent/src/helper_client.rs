//! The agent's side of the helper protocol: connect to `bcd-helper`'s socket, say `Hello`, and
//! run one operation at a time with a per-call bound.
//!
//! [`Helper`] is the one seam through which the agent reaches the helper: typed methods, one
//! per operation. [`SocketHelper`] is the real helper over its socket (one [`HelperClient`]
//! connection per operation); [`fake::RecordingHelper`] records what it was asked, for tests.
//!
//! Every failure is a [`ClientError`] whose `Display` is the sentence an operator reads; the
//! helper's own typed errors pass through unchanged.

pub mod fake;

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use bcd_protocol::frame::{read_frame, write_frame, FrameError};
use bcd_protocol::{
    ClientFrame, DomainName, HelloAnswer, HelperError, MigProfileIds, Operation, OperationKind,
    Outcome, PciAddress, PersistenceNote, Request, SaveFile, ServerFrame, PROTOCOL_VERSION,
};
use tokio::net::UnixStream;

/// How long a connect that finds the helper's backlog full (`EAGAIN`, e.g. while other
/// peers flood it) is retried before it counts as failed.
pub(crate) const CONNECT_RETRY_FOR: Duration = Duration::from_secs(2);
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
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Slack added to the helper's own bounds for socket round trips and scheduling.
pub(crate) const MARGIN: Duration = Duration::from_secs(5);
/// The helper's bound on one `nvidia-smi` call (its default `--nvidia-smi-timeout`).
pub(crate) const HELPER_NVIDIA_SMI_TIMEOUT: Duration = Duration::from_secs(30);
/// The helper's bound on one `nvidia-ctk cdi generate`.
pub(crate) const HELPER_NVIDIA_CTK_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the helper waits for a device another operation holds before answering `Busy`.
pub(crate) const HELPER_DEVICE_WAIT: Duration = Duration::from_secs(30);
/// The helper's default unbind timeout.
pub(crate) const HELPER_UNBIND_TIMEOUT: Duration = Duration::from_secs(30);
/// The helper's default bound on one `virsh` call.
pub(crate) const HELPER_VIRSH_TIMEOUT: Duration = Duration::from_secs(60);

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
pub(crate) struct HelperClient {
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
    pub(crate) async fn connect(path: &Path, timeout: Duration) -> Result<Self, ClientError> {
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
    pub(crate) fn hello(&self) -> &HelloAnswer {
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

/// A boxed future, so that [`Helper`] stays object-safe.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a `Ping` tells: the handshake's facts and the helper's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pong {
    /// The helper's protocol version, from its `Hello`.
    pub protocol_version: u32,
    /// The helper's package version.
    pub helper_version: String,
    /// How the helper is confined, in its words.
    pub sandbox: String,
    /// What this helper offers, from its `Hello`.
    pub operations: Vec<OperationKind>,
}

impl Pong {
    /// Why the helper runs no operation on a device (its `Hello` offers none of them: it
    /// serves only `Ping`, or cannot lock devices), in its own words; `None` when it offers
    /// them. Asked of the whole set rather than of one kind, so that a kind a newer bcd adds
    /// and an older helper lacks is not read as a broken helper.
    pub fn no_device_operations(&self) -> Option<&str> {
        (!self.operations.iter().any(|k| k.acts_on_devices())).then_some(self.sandbox.as_str())
    }
}

/// A function moved between drivers by `vfio.bind` or `vfio.release`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VfioMove {
    /// The function.
    pub device: PciAddress,
    /// Its driver before (`None`: no driver).
    pub driver_before: Option<String>,
    /// Its driver after (`None`: no driver).
    pub driver_after: Option<String>,
    /// What happened to its persistence mode on the way.
    pub persistence: PersistenceNote,
}

/// What a libvirt start, restore or destroy did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibvirtRun {
    /// The NVIDIA functions among the domain's hostdevs.
    pub gpus: Vec<PciAddress>,
    /// What happened to their persistence mode.
    pub persistence: Vec<(PciAddress, PersistenceNote)>,
    /// The domain (for a restore: the one its save image names).
    pub domain: Option<DomainName>,
}

/// The root helper's operations, typed. An implementation supplies [`Helper::socket`],
/// [`Helper::ping`] and the transport [`Helper::run`]; callers use the typed methods, which
/// turn an answer of the wrong kind into [`ClientError::Protocol`] in one place.
pub trait Helper: Send + Sync + fmt::Debug {
    /// Where the helper is reached (its socket), for messages.
    fn socket(&self) -> &Path;

    /// Says `Hello` and `Ping`: the helper's version, protocol and operations.
    fn ping(&self) -> BoxFuture<'_, Result<Pong, ClientError>>;

    /// Runs one operation to its answer: the transport under the typed methods.
    fn run(&self, op: Operation) -> BoxFuture<'_, Result<Outcome, ClientError>>;

    /// `nvidia-smi -i <gpu> -pm 0|1`.
    fn set_persistence(
        &self,
        gpu: PciAddress,
        enabled: bool,
    ) -> BoxFuture<'_, Result<(), ClientError>> {
        Box::pin(async move {
            match self.run(Operation::SetPersistence { gpu, enabled }).await? {
                Outcome::Persistence { .. } => Ok(()),
                other => Err(unexpected(self.socket(), "a persistence request", &other)),
            }
        })
    }

    /// `nvidia-smi --gpu-reset -i <gpu>`.
    fn reset_gpu(&self, gpu: PciAddress) -> BoxFuture<'_, Result<(), ClientError>> {
        Box::pin(async move {
            match self.run(Operation::ResetGpu { gpu }).await? {
                Outcome::Reset { .. } => Ok(()),
                other => Err(unexpected(self.socket(), "a reset", &other)),
            }
        })
    }

    /// Moves an NVIDIA function to `vfio-pci`.
    fn vfio_bind(&self, device: PciAddress) -> BoxFuture<'_, Result<VfioMove, ClientError>> {
        Box::pin(async move { vfio_move(self, Operation::VfioBind { device }).await })
    }

    /// Gives a function on `vfio-pci` back to the kernel's choice of driver.
    fn vfio_release(&self, device: PciAddress) -> BoxFuture<'_, Result<VfioMove, ClientError>> {
        Box::pin(async move { vfio_move(self, Operation::VfioRelease { device }).await })
    }

    /// Persistence off for the domain's NVIDIA hostdevs, then `virsh start`.
    fn libvirt_start(&self, domain: DomainName) -> BoxFuture<'_, Result<LibvirtRun, ClientError>> {
        Box::pin(async move { libvirt_run(self, Operation::LibvirtStart { domain }).await })
    }

    /// Persistence off for the image's NVIDIA hostdevs, then `virsh restore`.
    fn libvirt_restore(&self, file: SaveFile) -> BoxFuture<'_, Result<LibvirtRun, ClientError>> {
        Box::pin(async move { libvirt_run(self, Operation::LibvirtRestore { file }).await })
    }

    /// `virsh destroy`, then persistence on for the domain's GPUs back on `nvidia`.
    fn libvirt_destroy(
        &self,
        domain: DomainName,
    ) -> BoxFuture<'_, Result<LibvirtRun, ClientError>> {
        Box::pin(async move { libvirt_run(self, Operation::LibvirtDestroy { domain }).await })
    }

    /// The NVIDIA GPUs among a domain's hostdevs, touching nothing.
    fn domain_gpus(
        &self,
        domain: DomainName,
    ) -> BoxFuture<'_, Result<Vec<PciAddress>, ClientError>> {
        Box::pin(async move {
            let op = Operation::LibvirtDomainGpus { domain };
            Ok(libvirt_run(self, op).await?.gpus)
        })
    }

    /// The NVIDIA GPUs among a save image's hostdevs, touching nothing.
    fn image_gpus(&self, file: SaveFile) -> BoxFuture<'_, Result<Vec<PciAddress>, ClientError>> {
        Box::pin(async move {
            let op = Operation::LibvirtImageGpus { file };
            Ok(libvirt_run(self, op).await?.gpus)
        })
    }

    /// `nvidia-smi -i <gpu> -mig 0|1`; answers what `nvidia-smi` said.
    fn set_mig_mode(
        &self,
        gpu: PciAddress,
        enabled: bool,
    ) -> BoxFuture<'_, Result<String, ClientError>> {
        Box::pin(async move { mig_step(self, Operation::SetMigMode { gpu, enabled }).await })
    }

    /// Every compute instance, then every GPU instance of the GPU destroyed.
    fn destroy_mig_instances(&self, gpu: PciAddress) -> BoxFuture<'_, Result<String, ClientError>> {
        Box::pin(async move { mig_step(self, Operation::DestroyMigInstances { gpu }).await })
    }

    /// GPU instances of these profiles created in this order, each with its default compute
    /// instance.
    fn create_mig_instances(
        &self,
        gpu: PciAddress,
        profiles: MigProfileIds,
    ) -> BoxFuture<'_, Result<String, ClientError>> {
        Box::pin(
            async move { mig_step(self, Operation::CreateMigInstances { gpu, profiles }).await },
        )
    }

    /// NVIDIA's CDI spec generated into the helper's configured file; answers that file.
    fn refresh_nvidia_cdi_spec(&self) -> BoxFuture<'_, Result<String, ClientError>> {
        Box::pin(async move {
            match self.run(Operation::RefreshNvidiaCdiSpec).await? {
                Outcome::NvidiaCdiSpec { file } => Ok(file),
                other => Err(unexpected(self.socket(), "a CDI spec request", &other)),
            }
        })
    }
}

/// Runs a MIG step and answers what `nvidia-smi` said.
async fn mig_step<H: Helper + ?Sized>(helper: &H, op: Operation) -> Result<String, ClientError> {
    match helper.run(op).await? {
        Outcome::Mig { said, .. } => Ok(said),
        other => Err(unexpected(helper.socket(), "a MIG step", &other)),
    }
}

async fn vfio_move<H: Helper + ?Sized>(helper: &H, op: Operation) -> Result<VfioMove, ClientError> {
    match helper.run(op).await? {
        Outcome::Vfio {
            device,
            driver_before,
            driver_after,
            persistence,
        } => Ok(VfioMove {
            device,
            driver_before,
            driver_after,
            persistence,
        }),
        other => Err(unexpected(helper.socket(), "a vfio request", &other)),
    }
}

async fn libvirt_run<H: Helper + ?Sized>(
    helper: &H,
    op: Operation,
) -> Result<LibvirtRun, ClientError> {
    let what = match op {
        Operation::LibvirtDomainGpus { .. } | Operation::LibvirtImageGpus { .. } => {
            "a libvirt.gpus request"
        }
        _ => "a libvirt request",
    };
    match helper.run(op).await? {
        Outcome::Libvirt {
            gpus,
            persistence,
            domain,
        } => Ok(LibvirtRun {
            gpus,
            persistence,
            domain,
        }),
        other => Err(unexpected(helper.socket(), what, &other)),
    }
}

/// The [`Pong`] of a `Hello` and the answer to `Ping`.
fn pong(socket: &Path, hello: &HelloAnswer, outcome: Outcome) -> Result<Pong, ClientError> {
    match outcome {
        Outcome::Pong {
            helper_version,
            sandbox,
        } => Ok(Pong {
            protocol_version: hello.version,
            helper_version,
            sandbox,
            operations: hello.operations.clone(),
        }),
        other => Err(unexpected(socket, "Ping", &other)),
    }
}

/// An answer of the wrong kind, as a connection-level error.
fn unexpected(socket: &Path, what: &str, outcome: &Outcome) -> ClientError {
    ClientError::Protocol {
        path: socket.to_path_buf(),
        what: format!("it answered {what} with {outcome:?}"),
    }
}

/// The real helper: one connection per operation (the helper is socket-activated and exits
/// when idle; a connection broken by one operation's timeout cannot spoil the next), each
/// bounded by [`suggested_timeout`].
#[derive(Debug, Clone)]
pub struct SocketHelper {
    path: PathBuf,
}

impl SocketHelper {
    /// The helper listening at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }
}

impl Helper for SocketHelper {
    fn socket(&self) -> &Path {
        &self.path
    }

    fn ping(&self) -> BoxFuture<'_, Result<Pong, ClientError>> {
        Box::pin(async move {
            let mut client = HelperClient::connect(&self.path, CONNECT_TIMEOUT).await?;
            let op = Operation::Ping;
            let bound = suggested_timeout(&op);
            let outcome = client.request(op, bound).await?;
            pong(&self.path, client.hello(), outcome)
        })
    }

    fn run(&self, op: Operation) -> BoxFuture<'_, Result<Outcome, ClientError>> {
        Box::pin(async move {
            let mut client = HelperClient::connect(&self.path, CONNECT_TIMEOUT).await?;
            let bound = suggested_timeout(&op);
            client.request(op, bound).await
        })
    }
}

/// A bound for one operation that covers the helper's own bounds with its defaults: the wait
/// for a busy device, then each child or sysfs step, plus [`MARGIN`].
pub(crate) fn suggested_timeout(op: &Operation) -> Duration {
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
        Operation::SetMigMode { .. } | Operation::CreateMigInstances { .. } => {
            HELPER_DEVICE_WAIT + smi + MARGIN
        }
        // `-dci`, then `-dgi`.
        Operation::DestroyMigInstances { .. } => HELPER_DEVICE_WAIT + smi * 2 + MARGIN,
        Operation::RefreshNvidiaCdiSpec => HELPER_NVIDIA_CTK_TIMEOUT + MARGIN,
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

    // During a flood the helper's backlog is full and a connect answers EAGAIN at once; an
    // agent that did not retry lost 8 % of its pings to a flood the helper itself survived.
    #[tokio::test]
    async fn a_connect_that_finds_the_backlog_full_is_retried() {
        use std::os::fd::{FromRawFd, IntoRawFd};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("helper.sock");
        // A listener with the smallest backlog, not accepting yet.
        let fd = nix::sys::socket::socket(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::Stream,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        nix::sys::socket::bind(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &nix::sys::socket::UnixAddr::new(&path).unwrap(),
        )
        .unwrap();
        nix::sys::socket::listen(&fd, nix::sys::socket::Backlog::new(0).unwrap()).unwrap();
        // SAFETY: the descriptor was just made, bound and put to listening; nothing else owns it.
        let listener = unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd.into_raw_fd()) };
        let mut filling = Vec::new();
        let full = loop {
            match UnixStream::connect(&path).await {
                Ok(s) => filling.push(s),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break true,
                Err(e) => panic!("{e}"),
            }
            if filling.len() > 64 {
                break false;
            }
        };
        assert!(full, "the backlog never filled");
        // The helper catches up after 300 ms.
        let accepting = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let mut accepted = Vec::new();
            for _ in 0..filling.len() + 1 {
                accepted.push(listener.accept().unwrap());
            }
            accepted.len()
        });
        let stream = connect_retrying(&path).await;
        assert!(stream.is_ok(), "{stream:?}");
        assert!(accepting.join().unwrap() > 0);
    }

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
