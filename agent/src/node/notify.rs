//! systemd's notification protocol (`sd_notify`): readiness, watchdog pings and status lines
//! sent as datagrams to `$NOTIFY_SOCKET`. Without that variable (not under systemd) every call
//! does nothing.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Sends one notification; errors are ignored, since systemd may simply not be listening.
pub fn notify(message: &str) {
    if let Some(path) = std::env::var_os("NOTIFY_SOCKET") {
        send(&path.to_string_lossy(), message);
    }
}

/// Sends `message` to the notification socket `path` (`@name` for an abstract socket).
pub fn send(path: &str, message: &str) {
    let Ok(socket) = UnixDatagram::unbound() else {
        return;
    };
    let bytes = message.as_bytes();
    if let Some(abstract_name) = path.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        if let Ok(addr) =
            std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
        {
            let _ = socket.send_to_addr(bytes, &addr);
        }
    } else {
        let _ = socket.send_to(bytes, path);
    }
}

/// Half the watchdog interval systemd asked for (`$WATCHDOG_USEC`), when it asked for this
/// process (`$WATCHDOG_PID` absent or ours).
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok()? != std::process::id() {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_reach_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let server = UnixDatagram::bind(&path).unwrap();
        send(&path.to_string_lossy(), "READY=1");
        let mut buf = [0u8; 64];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }
}
