//! Whether `bcd-helper` answers: doctor's `helper` and `gpu-binding` checks.
//!
//! Doctor asks the [`Helper`] for its version and nothing else: [`ping`] sends `Ping`,
//! bounded as a whole, and words each failure for doctor.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bcd_protocol::HelperError;

use super::Status;
use crate::helper_client::{ClientError, Helper};

/// The bound on a whole ping: connect, greeting and answer. Socket activation starts the
/// helper on the first connection, which takes well under a second on a healthy host.
pub const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// Why the helper did not answer `Ping`. `Display` is the sentence an operator reads.
#[derive(Debug, thiserror::Error)]
pub enum PingError {
    /// No socket at the path.
    #[error("bcd-helper's socket {} does not exist, so no privileged step can run: install bcd-helper and enable its socket (systemctl enable --now bcd-helper.socket)", path.display())]
    NoSocket {
        /// The socket's path.
        path: PathBuf,
    },
    /// A socket file, but nothing listens on it.
    #[error("nothing listens on bcd-helper's socket {} ({source}): start it (systemctl enable --now bcd-helper.socket)", path.display())]
    NotListening {
        /// The socket's path.
        path: PathBuf,
        /// The connect error.
        source: io::Error,
    },
    /// This user may not open the socket.
    #[error("this user may not open bcd-helper's socket {} (root:bcd, mode 0660): run bcd as the bcd user or add this user to the group bcd", path.display())]
    PermissionDenied {
        /// The socket's path.
        path: PathBuf,
    },
    /// Connecting failed otherwise.
    #[error("cannot connect to bcd-helper's socket {} ({source}): check systemctl status bcd-helper.socket", path.display())]
    Connect {
        /// The socket's path.
        path: PathBuf,
        /// The connect error.
        source: io::Error,
    },
    /// No answer within the bound.
    #[error("bcd-helper at {} did not answer within {after:?}: see journalctl -u bcd-helper", path.display())]
    Timeout {
        /// The socket's path.
        path: PathBuf,
        /// The bound.
        after: Duration,
    },
    /// The helper refused, in its own words.
    #[error("{0}")]
    Helper(HelperError),
    /// The helper answers but offers no operation on a device (it cannot lock devices, or it
    /// serves only `Ping`): every reset, persistence change and passthrough step is refused.
    #[error("bcd-helper {version} answers at {} but cannot run operations on devices, so gpu.reset, persistence changes and VFIO passthrough are refused; its Ping says: {why}", path.display())]
    NoDeviceOperations {
        /// The socket's path.
        path: PathBuf,
        /// The helper's package version.
        version: String,
        /// Why, in the helper's words.
        why: String,
    },
    /// Frames that are not the protocol's answers.
    #[error("bcd-helper at {} answered outside the protocol ({what}): install matching versions of bcd and bcd-helper", path.display())]
    Protocol {
        /// The socket's path.
        path: PathBuf,
        /// What was wrong.
        what: String,
    },
}

impl PingError {
    /// `warn` when no helper is there at all (a node may run without one, losing only the
    /// privileged steps); `fail` when one is there but broken.
    pub fn status(&self) -> Status {
        match self {
            PingError::NoSocket { .. } | PingError::NotListening { .. } => Status::Warn,
            _ => Status::Fail,
        }
    }

    fn connect(path: &Path, source: io::Error) -> Self {
        let path = path.to_path_buf();
        match source.kind() {
            io::ErrorKind::NotFound => PingError::NoSocket { path },
            io::ErrorKind::ConnectionRefused => PingError::NotListening { path, source },
            io::ErrorKind::PermissionDenied => PingError::PermissionDenied { path },
            _ => PingError::Connect { path, source },
        }
    }

    fn client(path: &Path, e: ClientError, after: Duration) -> Self {
        match e {
            ClientError::Connect { kind, reason, .. } => {
                Self::connect(path, io::Error::new(kind, reason))
            }
            ClientError::Helper(e) => PingError::Helper(e),
            ClientError::Timeout { .. } => PingError::Timeout {
                path: path.to_path_buf(),
                after,
            },
            ClientError::Protocol { what, .. } => PingError::Protocol {
                path: path.to_path_buf(),
                what,
            },
        }
    }
}

/// The helper's package version, or why there is none, within `bound` for the whole
/// exchange: each frame has a bound of its own, but a helper that trickles bytes must not
/// stretch doctor past it.
///
/// # Errors
/// [`PingError`], worded for doctor.
pub async fn ping(helper: &dyn Helper, bound: Duration) -> Result<String, PingError> {
    let path = helper.socket();
    match tokio::time::timeout(bound, helper.ping()).await {
        Ok(Ok(pong)) => match pong.no_device_operations() {
            None => Ok(pong.helper_version),
            Some(why) => Err(PingError::NoDeviceOperations {
                path: path.to_path_buf(),
                version: pong.helper_version.clone(),
                why: why.to_owned(),
            }),
        },
        Ok(Err(e)) => Err(PingError::client(path, e, bound)),
        Err(_) => Err(PingError::Timeout {
            path: path.to_path_buf(),
            after: bound,
        }),
    }
}
