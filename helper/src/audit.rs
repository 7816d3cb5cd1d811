//! The audit trail: one JSON line per request, appended to the audit log and sent to the
//! journal through `tracing`; refused connections and frames are aggregated.
//!
//! An operation that changes something (every one but `Ping` and the read-only
//! `libvirt.gpus`) gets two lines, as sudo logs a command before running it: one with the
//! outcome `started` before anything is done (see [`Audit::started`]), and one with its
//! outcome when it ends. An operation the helper died in (killed, or a crash) still has its
//! `started` line; a `started` line with no later line for the same operation, arguments and
//! peer pid is one.
//!
//! A root helper that cannot write its audit log must not act: an operation whose `started`
//! line cannot be appended is refused with `Failed` and never runs, and while the log is known
//! to be unwritable every operation but `Ping` is refused (see [`Audit::health`]). The journal
//! still gets every line.
//!
//! It must not be floodable: a refusal (a denied peer, a busy answer, a bad frame) is written
//! in full the first time in an [`AGGREGATE_WINDOW`] for its uid and kind, and counted after
//! that ("412 denied connections from uid 65534 in the last 10s"). Once the file has reached
//! its size bound, refusal lines are dropped (and counted, in the journal and in the next line
//! written) while operation lines are still appended, so a flood can never take the space
//! real requests need. The file is opened without following links or blocking, and refused
//! unless it is a regular file owned by root with one link; it is made 0600.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use bcd_protocol::time::rfc3339;

/// The audit log's file mode.
pub const AUDIT_LOG_MODE: u32 = 0o600;
/// How long refusals of one kind from one uid are counted before a summary line.
pub const AGGREGATE_WINDOW: Duration = Duration::from_secs(10);
/// The audit log's default size bound, past which refusal lines are dropped (and counted).
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// Who asked.
#[derive(Debug, Clone, Default)]
pub struct Peer {
    /// The peer's pid as the kernel reported it (for the record only: never used to decide).
    pub pid: i32,
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
    /// `/proc/<pid>/exe`, best effort.
    pub exe: Option<String>,
}

/// How a request ended, as the audit line says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Done.
    Ok,
    /// Peer not allowed.
    Denied,
    /// Argument or frame refused.
    Invalid,
    /// Busy.
    Busy,
    /// A bound expired.
    Timeout,
    /// The step failed.
    Failed,
    /// Not offered.
    Unsupported,
    /// Accepted and about to run: the line written before an operation acts.
    Started,
}

impl Verdict {
    /// The word in the audit line.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Denied => "denied",
            Verdict::Invalid => "invalid",
            Verdict::Busy => "busy",
            Verdict::Timeout => "timeout",
            Verdict::Failed => "failed",
            Verdict::Unsupported => "unsupported",
            Verdict::Started => "started",
        }
    }

    /// The verdict that matches a helper error.
    pub fn of(err: &bcd_protocol::HelperError) -> Self {
        use bcd_protocol::HelperError as E;
        match err {
            E::Denied => Verdict::Denied,
            E::Invalid { .. } => Verdict::Invalid,
            E::Busy { .. } => Verdict::Busy,
            E::Timeout { .. } => Verdict::Timeout,
            E::Failed { .. } => Verdict::Failed,
            E::Unsupported => Verdict::Unsupported,
        }
    }
}

/// One audit record.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    /// Who.
    pub peer: &'a Peer,
    /// The audit name: `vfio.bind`, `connect`, `hello`, `frame`, ...
    pub operation: &'a str,
    /// The arguments, as strings.
    pub arguments: &'a [(&'static str, String)],
    /// How it ended.
    pub verdict: Verdict,
    /// The error's sentence, when not ok.
    pub message: Option<String>,
    /// How long it took.
    pub duration: Duration,
}

/// The audit log (possibly none) and whether it can be written.
#[derive(Debug)]
pub struct Audit {
    path: Option<PathBuf>,
    max_bytes: u64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    file: Option<File>,
    /// Bytes in the file (from `fstat` at open, then what was appended).
    size: u64,
    /// Why the log cannot be written, when it cannot.
    broken: Option<String>,
    /// Refusal lines dropped past the size bound since the last line written.
    dropped: u64,
    /// Refusals counted in the current window, by (uid, operation, outcome).
    counted: BTreeMap<(u32, &'static str, &'static str), Counted>,
}

#[derive(Debug)]
struct Counted {
    since: Instant,
    /// Refusals after the first (which was written in full).
    more: u64,
}

impl Audit {
    /// Opens (creating with mode 0600, never following a link, never blocking) the audit log
    /// for appending, and checks it (see [`open_log`]). A failure is kept and reported by
    /// [`Audit::health`], not fatal: `Ping` still works and the journal says why the rest is
    /// refused.
    pub fn open(path: Option<&Path>, max_bytes: u64) -> Self {
        let mut state = State::default();
        if let Some(p) = path {
            match open_log(p) {
                Ok((f, size)) => {
                    state.file = Some(f);
                    state.size = size;
                }
                Err(e) => {
                    let why = format!("the audit log {} cannot be written: {e}", p.display());
                    tracing::error!("{why}");
                    state.broken = Some(why);
                }
            }
        }
        Self {
            path: path.map(Path::to_path_buf),
            max_bytes,
            state: Mutex::new(state),
        }
    }

    /// `Err(sentence)` while the audit log cannot be written.
    pub fn health(&self) -> Result<(), String> {
        match lock(&self.state).broken.as_ref() {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    /// Writes one operation's record to the journal and appends it to the log. A failed append
    /// marks the log broken (see [`Audit::health`]); a later successful one clears it.
    pub fn write(&self, record: &Record<'_>) {
        let line = render(record, SystemTime::now());
        if matches!(record.verdict, Verdict::Ok | Verdict::Started) {
            tracing::info!(target: "bcd_helper::audit", "{line}");
        } else {
            tracing::warn!(target: "bcd_helper::audit", "{line}");
        }
        let _ = self.append(line, false);
    }

    /// Writes the line of an operation about to run (its verdict is [`Verdict::Started`]) to
    /// the journal and the log, and says whether the log has it: the operation may run only
    /// on `Ok`. Without a configured log the journal's copy is the record, and this is `Ok`.
    ///
    /// # Errors
    /// The sentence saying the audit log cannot be written (naming it and why), when the
    /// append failed or the log was refused at start; the log is then marked broken.
    pub fn started(&self, record: &Record<'_>) -> Result<(), String> {
        let record = Record {
            verdict: Verdict::Started,
            ..record.clone()
        };
        let line = render(&record, SystemTime::now());
        tracing::info!(target: "bcd_helper::audit", "{line}");
        self.append(line, false)
    }

    /// Records a refusal that belongs to no operation (a denied or busy connection, a frame
    /// refused): in full the first time in a window for its uid, operation and outcome, counted
    /// after that; [`Audit::flush`] writes the counts.
    pub fn refusal(&self, operation: &'static str, record: &Record<'_>) {
        // No allocation on this path: it runs once per refused connection.
        let key = (record.peer.uid, operation, record.verdict.word());
        {
            let mut state = lock(&self.state);
            if let Some(c) = state.counted.get_mut(&key) {
                c.more += 1;
                return;
            }
            state.counted.insert(
                key,
                Counted {
                    since: Instant::now(),
                    more: 0,
                },
            );
        }
        let line = render(record, SystemTime::now());
        tracing::warn!(target: "bcd_helper::audit", "{line}");
        let _ = self.append(line, true);
    }

    /// Ends the windows older than [`AGGREGATE_WINDOW`], writing one summary line for each
    /// that counted refusals after its first. Called from the accept loop's clock.
    pub fn flush(&self) {
        self.flush_older_than(AGGREGATE_WINDOW);
    }

    fn flush_older_than(&self, window: Duration) {
        let ended: Vec<((u32, &'static str, &'static str), Counted)> = {
            let mut state = lock(&self.state);
            let keys: Vec<_> = state
                .counted
                .iter()
                .filter(|(_, c)| c.since.elapsed() >= window)
                .map(|(k, _)| *k)
                .collect();
            keys.into_iter()
                .filter_map(|k| state.counted.remove(&k).map(|c| (k, c)))
                .collect()
        };
        for ((uid, operation, outcome), c) in ended {
            if c.more == 0 {
                continue;
            }
            let line = render_summary(uid, operation, outcome, c.more, c.since.elapsed());
            tracing::warn!(target: "bcd_helper::audit", "{line}");
            let _ = self.append(line, true);
        }
    }

    /// Appends one line. A refusal line past the size bound is dropped and counted (and is
    /// `Ok`); the count rides on the next line that is written. `Err` is the sentence for a
    /// log that does not have the line.
    fn append(&self, mut line: String, refusal: bool) -> Result<(), String> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut state = lock(&self.state);
        if refusal && state.size >= self.max_bytes {
            state.dropped += 1;
            if state.dropped.is_power_of_two() {
                tracing::warn!(
                    "the audit log {} has reached its bound of {} bytes: {} refusal lines dropped so far (operations are still written)",
                    path.display(),
                    self.max_bytes,
                    state.dropped
                );
            }
            return Ok(());
        }
        if state.dropped > 0 && line.ends_with('}') {
            line.pop();
            let _ = write!(line, ",\"dropped_refusal_lines\":{}}}", state.dropped);
        }
        line.push('\n');
        // A log refused at start stays refused, with the reason found then.
        let Some(f) = state.file.as_mut() else {
            return Err(state
                .broken
                .clone()
                .unwrap_or_else(|| format!("the audit log {} cannot be written", path.display())));
        };
        let result = f.write_all(line.as_bytes());
        match result {
            Ok(()) => {
                state.size += line.len() as u64;
                state.dropped = 0;
                state.broken = None;
                Ok(())
            }
            Err(e) => {
                let why = format!("the audit log {} cannot be written: {e}", path.display());
                tracing::error!("{why}");
                state.broken = Some(why.clone());
                Err(why)
            }
        }
    }
}

/// Renders a window's count of refusals as one JSON line (without the newline).
fn render_summary(uid: u32, operation: &str, outcome: &str, more: u64, over: Duration) -> String {
    let mut s = String::with_capacity(192);
    s.push_str("{\"time\":");
    json_string(&mut s, &rfc3339(SystemTime::now()));
    let _ = write!(s, ",\"peer\":{{\"uid\":{uid}}},\"operation\":");
    json_string(&mut s, operation);
    s.push_str(",\"outcome\":");
    json_string(&mut s, outcome);
    let noun = match (operation, outcome) {
        ("connect", "denied") => "denied connections",
        ("connect", "busy") => "connections answered busy",
        _ => "refused frames",
    };
    let _ = write!(s, ",\"count\":{more},\"message\":");
    json_string(
        &mut s,
        &format!(
            "{more} more {noun} from uid {uid} in the last {}s",
            over.as_secs().max(1)
        ),
    );
    s.push('}');
    s
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding it cannot leave a half-written state worth refusing over.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Why an audit log that opened is refused.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error(
        "it is not a regular file (a FIFO, device or socket would block or mislead the audit)"
    )]
    NotRegular,
    #[error("it is owned by uid {0}, not root: someone else could rewrite the audit trail")]
    NotRoot(u32),
    #[error("it has {0} hard links: another name could be made to point at it")]
    Links(u64),
}

/// Opens the log for appending without following a link and without blocking (so a FIFO in
/// its place fails or is refused, never waited on), then checks the opened file with `fstat`:
/// a regular file, owned by root (the helper's euid), with one link; a wider mode is narrowed
/// to 0600. Returns the file and its size.
fn open_log(path: &Path) -> std::io::Result<(File, u64)> {
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(AUDIT_LOG_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    let refuse = |r: Refused| std::io::Error::other(r.to_string());
    if !meta.file_type().is_file() {
        return Err(refuse(Refused::NotRegular));
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(refuse(Refused::NotRoot(meta.uid())));
    }
    if meta.nlink() != 1 {
        return Err(refuse(Refused::Links(meta.nlink())));
    }
    if meta.mode() & 0o7777 != AUDIT_LOG_MODE {
        tracing::warn!(
            "the audit log {} had mode {:o}; it is now {AUDIT_LOG_MODE:o}",
            path.display(),
            meta.mode() & 0o7777
        );
        file.set_permissions(std::fs::Permissions::from_mode(AUDIT_LOG_MODE))?;
    }
    Ok((file, meta.len()))
}

/// Renders one record as a JSON line (without the newline).
pub fn render(r: &Record<'_>, now: SystemTime) -> String {
    let mut s = String::with_capacity(256);
    s.push_str("{\"time\":");
    json_string(&mut s, &rfc3339(now));
    let _ = write!(
        s,
        ",\"peer\":{{\"pid\":{},\"uid\":{},\"gid\":{},\"exe\":",
        r.peer.pid, r.peer.uid, r.peer.gid
    );
    match &r.peer.exe {
        Some(exe) => json_string(&mut s, exe),
        None => s.push_str("null"),
    }
    s.push_str("},\"operation\":");
    json_string(&mut s, r.operation);
    s.push_str(",\"arguments\":{");
    for (i, (k, v)) in r.arguments.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        json_string(&mut s, k);
        s.push(':');
        json_string(&mut s, v);
    }
    s.push_str("},\"outcome\":");
    json_string(&mut s, r.verdict.word());
    if let Some(m) = &r.message {
        s.push_str(",\"message\":");
        json_string(&mut s, m);
    }
    let _ = write!(s, ",\"duration_ms\":{}}}", r.duration.as_millis());
    s
}

/// Appends `v` as a JSON string: `"` and `\` escaped, every control character as `\u00XX`.
pub fn json_string(out: &mut String, v: &str) {
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            // U+2028/2029 are valid JSON but break some line-oriented readers.
            c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn strings_are_escaped() {
        let mut s = String::new();
        json_string(&mut s, "a\"b\\c\n\u{1}\u{7f}é");
        assert_eq!(s, "\"a\\\"b\\\\c\\u000a\\u0001\\u007fé\"");
    }

    // Guards append's early return: a log refused at start has no file, and `started` must
    // say so (naming it) rather than let the operation run.
    #[test]
    fn a_started_line_for_a_log_refused_at_start_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no-such-folder/audit.log");
        let audit = Audit::open(Some(&path), DEFAULT_MAX_BYTES);
        let peer = Peer::default();
        let record = Record {
            peer: &peer,
            operation: "gpu.reset",
            arguments: &[],
            verdict: Verdict::Started,
            message: None,
            duration: Duration::ZERO,
        };
        let why = audit.started(&record).unwrap_err();
        assert!(why.contains(&path.display().to_string()), "{why}");
        assert!(Audit::open(None, DEFAULT_MAX_BYTES)
            .started(&record)
            .is_ok());
    }

    #[test]
    fn a_line_has_every_field() {
        let peer = Peer {
            pid: 12,
            uid: 990,
            gid: 991,
            exe: Some("/usr/bin/bcd".into()),
        };
        let line = render(
            &Record {
                peer: &peer,
                operation: "vfio.bind",
                arguments: &[("device", "0000:18:00.0".into())],
                verdict: Verdict::Failed,
                message: Some("x".into()),
                duration: Duration::from_millis(7),
            },
            UNIX_EPOCH,
        );
        assert_eq!(
            line,
            "{\"time\":\"1970-01-01T00:00:00.000Z\",\"peer\":{\"pid\":12,\"uid\":990,\"gid\":991,\
             \"exe\":\"/usr/bin/bcd\"},\"operation\":\"vfio.bind\",\"arguments\":{\"device\":\
             \"0000:18:00.0\"},\"outcome\":\"failed\",\"message\":\"x\",\"duration_ms\":7}"
        );
    }
}
