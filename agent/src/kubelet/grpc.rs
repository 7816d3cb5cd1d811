//! gRPC over Unix sockets, as the kubelet speaks it: a client channel dialled to a socket
//! path (`:authority` `localhost`, as the kubelet's own clients send), and a server on a
//! bound listener.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

/// How long dialling a socket may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a socket could not be dialled.
#[derive(Debug, thiserror::Error)]
#[error("cannot reach {}: {source}", path.display())]
pub struct DialError {
    /// The socket.
    pub path: PathBuf,
    /// Why.
    pub source: tonic::transport::Error,
}

/// A channel to the gRPC server on the Unix socket `path`, dialled now.
///
/// # Errors
/// [`DialError`] when nothing listens there within [`CONNECT_TIMEOUT`].
pub async fn dial(path: &Path) -> Result<Channel, DialError> {
    let socket = path.to_path_buf();
    // The URI is not dialled (the connector is); it gives the `:authority`.
    let endpoint = Endpoint::from_static("http://localhost")
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(Duration::from_secs(30));
    endpoint
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|source| DialError {
            path: path.to_path_buf(),
            source,
        })
}
