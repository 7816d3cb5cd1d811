//! The sockets a kubelet plugin serves, for both of bcd's plugins (the device plugins in
//! [`crate::kubelet`], the DRA driver in [`crate::dra`]): bound with mode 0600 replacing only
//! a stale socket, their peers checked before a byte is read (root, the kubelet, or bcd's own
//! uid), removed when their server stops unless the file is another one by then.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_stream::wrappers::UnixListenerStream;

/// A file's identity: a socket made anew has another inode.
pub(crate) fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// The mode of a plugin's socket, set explicitly (never the umask's): its one client is the
/// kubelet, which runs as root; [`incoming`] checks each peer as well.
pub const SOCKET_MODE: u32 = 0o600;

/// Binds the plugin's socket, replacing a stale socket file (never anything else), with mode
/// [`SOCKET_MODE`].
pub(crate) fn bind(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) {
            std::fs::remove_file(path)?;
        } else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "something other than a socket is there",
            ));
        }
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))?;
    Ok(listener)
}

/// The connections of `listener` whose peer is root (the kubelet) or bcd's own uid; any other
/// peer is dropped before a byte is read, and logged (once per uid and minute).
pub(crate) fn incoming(
    listener: tokio::net::UnixListener,
    resource: &str,
) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::UnixStream>> {
    use tokio_stream::StreamExt;
    let resource = resource.to_owned();
    let own = nix::unistd::geteuid().as_raw();
    let mut said: Option<(u32, std::time::Instant)> = None;
    UnixListenerStream::new(listener).filter(move |conn| {
        let Ok(stream) = conn else { return true };
        let uid = stream.peer_cred().map(|c| c.uid()).ok();
        if matches!(uid, Some(u) if u == 0 || u == own) {
            return true;
        }
        let uid = uid.unwrap_or(u32::MAX);
        let quiet = said.is_some_and(|(u, at)| u == uid && at.elapsed() < Duration::from_secs(60));
        if !quiet {
            tracing::warn!(
                "{resource}: refused a connection from uid {uid}: only the kubelet (root) may use a kubelet plugin's socket"
            );
            said = Some((uid, std::time::Instant::now()));
        }
        false
    })
}

/// Removes the plugin's socket file when its server stops (the node stops or serves anew),
/// unless the file is another one by then.
pub(crate) struct SocketFile {
    pub(crate) path: PathBuf,
    pub(crate) identity: Option<(u64, u64)>,
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if self.identity.is_some() && identity(&self.path) == self.identity {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
