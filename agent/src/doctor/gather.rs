//! What doctor reads of the host before it judges: whether `/dev/kmsg` opens for this user
//! (and its node's mode and group when it does not), `kernel.dmesg_restrict`, and whether the
//! GPU is WSL 2's paravirtual one. The judges in [`super::checks`] take what these return and
//! do no I/O of their own.

use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

use crate::sys::host::Host;

/// WSL 2's paravirtual GPU: `/dev/dxg` without `/dev/nvidiactl`.
pub fn is_paravirtual_gpu(host: &Host) -> bool {
    host.path("/dev/dxg").exists() && !host.path("/dev/nvidiactl").exists()
}

/// Opens the host's `/dev/kmsg` for reading, as the XID watcher would, and closes it.
///
/// # Errors
/// The open's error: `EPERM` is the kernel refusing the log (`dmesg_restrict`), `EACCES` the
/// device node's mode, `ENOENT` no node.
pub fn open_kmsg(host: &Host) -> io::Result<KmsgNode> {
    let path = host.path("/dev/kmsg");
    let node = match std::fs::metadata(&path) {
        Ok(m) => KmsgNode {
            mode: m.mode() & 0o7777,
            gid: m.gid(),
        },
        Err(e) => return Err(e),
    };
    // Non-blocking, so the open can never wait; nothing is read.
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .map(|_| node)
        .map_err(|e| KmsgDenied::attach(e, node))
}

/// The device node's mode and group, for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KmsgNode {
    /// Permission bits.
    pub mode: u32,
    /// Owning group.
    pub gid: u32,
}

/// An open error that carries the node it was refused on.
#[derive(Debug)]
pub struct KmsgDenied {
    /// The node.
    pub node: KmsgNode,
    /// The open's error.
    pub source: io::Error,
}

impl std::fmt::Display for KmsgDenied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.source.fmt(f)
    }
}

impl std::error::Error for KmsgDenied {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl KmsgDenied {
    /// `source` carrying the node it was refused on.
    pub(super) fn attach(source: io::Error, node: KmsgNode) -> io::Error {
        io::Error::new(source.kind(), KmsgDenied { node, source })
    }

    /// The node and the OS error number of an error [`open_kmsg`] returned.
    pub fn parts(e: &io::Error) -> (Option<KmsgNode>, Option<i32>) {
        match e.get_ref().and_then(|i| i.downcast_ref::<KmsgDenied>()) {
            Some(d) => (Some(d.node), d.source.raw_os_error()),
            None => (None, e.raw_os_error()),
        }
    }
}

/// The host's `kernel.dmesg_restrict`, when readable.
pub fn dmesg_restrict(host: &Host) -> Option<bool> {
    std::fs::read_to_string(host.path("/proc/sys/kernel/dmesg_restrict"))
        .ok()
        .and_then(|t| t.trim().parse::<u8>().ok())
        .map(|v| v != 0)
}
