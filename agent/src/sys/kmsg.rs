//! Reading the kernel log's records: `<host-root>/dev/kmsg`, opened non-blocking and polled.
//! A read gives one record on the real character device, `EAGAIN` when there is none, and
//! `EPIPE` when records were overwritten before they were read. A fake host's `dev/kmsg` is a
//! regular file a test appends to; there one read returns many records, split on newlines.
//! When there is nothing to read, [`KmsgReader::wait`] waits on the character device for the
//! kernel's next record (epoll, through the runtime: an idle node does not wake up), and
//! sleeps [`POLL_INTERVAL`] on a regular file, which epoll cannot wait on. What a record
//! means is `health::kmsg`'s business.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// How long the watcher sleeps when a kernel log it cannot wait on (a regular file) has
/// nothing new.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// The longest kernel log record (the kernel's `CONSOLE_EXT_LOG_MAX`).
const MAX_RECORD: usize = 8192;
/// How much one read of a regular file takes.
const FILE_CHUNK: usize = 64 * 1024;

/// What one poll of the kernel log gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Polled {
    /// Whole records, in order (without the trailing newline).
    Records(Vec<Vec<u8>>),
    /// Nothing new yet.
    Idle,
    /// Records were overwritten before they were read (`EPIPE`); reading goes on.
    Lost,
}

/// A reader of kernel log records, from the oldest or from the end of the log on.
pub struct KmsgReader {
    source: Box<dyn Read + Send>,
    /// The character device returns one record per read; a regular file many lines.
    one_record_per_read: bool,
    /// The character device (a second descriptor of the same open file), registered with the
    /// runtime so an idle reader waits for the next record; `None` where it cannot be waited
    /// on (a regular file, no runtime) and is polled instead.
    readiness: Option<AsyncFd<File>>,
    buf: Vec<u8>,
    pending: Vec<u8>,
}

impl std::fmt::Debug for KmsgReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KmsgReader")
            .field("one_record_per_read", &self.one_record_per_read)
            .field("pending", &self.pending.len())
            .field("waits", &self.readiness.is_some())
            .finish_non_exhaustive()
    }
}

impl KmsgReader {
    /// Opens `path` non-blocking and seeks to its end (`SEEK_END`: on `/dev/kmsg` the next
    /// record to come, on a regular file its current end).
    ///
    /// # Errors
    /// The open, `fstat` or seek error.
    pub fn open(path: &Path) -> io::Result<Self> {
        Self::open_at(path, SeekFrom::End(0))
    }

    /// Opens `path` non-blocking at its beginning: on `/dev/kmsg` the oldest record the ring
    /// buffer still holds, on a regular file its first line.
    ///
    /// # Errors
    /// The open or `fstat` error.
    pub fn open_from_start(path: &Path) -> io::Result<Self> {
        Self::open_at(path, SeekFrom::Start(0))
    }

    fn open_at(path: &Path, at: SeekFrom) -> io::Result<Self> {
        let mut file: File = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)?;
        let char_device = file.metadata()?.file_type().is_char_device();
        // A fresh open of /dev/kmsg is at its oldest record already; only the end is sought.
        if at != SeekFrom::Start(0) {
            file.seek(at)?;
        }
        // A duplicate shares the open file, so its readiness is this reader's position's.
        let readiness = if char_device && tokio::runtime::Handle::try_current().is_ok() {
            file.try_clone()
                .ok()
                // SAFETY: a `File` owns the descriptor it reports, and nothing replaces or
                // closes it while the `AsyncFd` holds it.
                .and_then(|dup| {
                    unsafe { AsyncFd::register_with_interest(dup, Interest::READABLE) }.ok()
                })
        } else {
            None
        };
        let mut reader = Self::from_source(Box::new(file), char_device);
        reader.readiness = readiness;
        Ok(reader)
    }

    /// Waits until the log may have something new, after [`Polled::Idle`]: until the character
    /// device is readable, or [`POLL_INTERVAL`] where it cannot be waited on.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is read here.
    pub async fn wait(&mut self) {
        match &self.readiness {
            // Cleared before the next read, not after: a record arriving in between sets it
            // again, so none is missed.
            Some(fd) => match fd.readable().await {
                Ok(mut ready) => ready.clear_ready(),
                Err(_) => tokio::time::sleep(POLL_INTERVAL).await,
            },
            None => tokio::time::sleep(POLL_INTERVAL).await,
        }
    }

    /// A reader over any source: `one_record_per_read` as the character device behaves, else
    /// as a regular file.
    pub fn from_source(source: Box<dyn Read + Send>, one_record_per_read: bool) -> Self {
        Self {
            source,
            one_record_per_read,
            readiness: None,
            buf: vec![
                0;
                if one_record_per_read {
                    MAX_RECORD
                } else {
                    FILE_CHUNK
                }
            ],
            pending: Vec::new(),
        }
    }

    /// Reads what is there now, without blocking.
    ///
    /// # Errors
    /// Any read error but `EAGAIN`, `EINTR` and `EPIPE`.
    pub fn poll(&mut self) -> io::Result<Polled> {
        let n = loop {
            match self.source.read(&mut self.buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Polled::Idle),
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => return Ok(Polled::Lost),
                Err(e) => return Err(e),
            }
        };
        if self.one_record_per_read {
            if n == 0 {
                return Ok(Polled::Idle);
            }
            let record = self.buf[..n].strip_suffix(b"\n").unwrap_or(&self.buf[..n]);
            return Ok(Polled::Records(vec![record.to_vec()]));
        }
        if n > 0 {
            self.pending.extend_from_slice(&self.buf[..n]);
        }
        let records = self.split_pending(n == 0);
        Ok(if records.is_empty() {
            Polled::Idle
        } else {
            Polled::Records(records)
        })
    }

    /// Takes the whole records out of a regular file's buffer. A record ends at a newline
    /// followed by a line that is not a continuation (does not start with a space); at the end
    /// of the file (`at_end`), a buffer ending in a newline is whole as written so far.
    fn split_pending(&mut self, at_end: bool) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while let Some(nl) = self.pending[i..].iter().position(|&b| b == b'\n') {
            let end = i + nl;
            match self.pending.get(end + 1) {
                Some(b' ') => {}
                Some(_) => {
                    out.push(self.pending[start..end].to_vec());
                    start = end + 1;
                }
                None if at_end => {
                    out.push(self.pending[start..end].to_vec());
                    start = end + 1;
                }
                None => break,
            }
            i = end + 1;
        }
        self.pending.drain(..start);
        out.retain(|r| !r.is_empty());
        out
    }
}
