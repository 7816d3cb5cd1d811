//! The node labels as a Node Feature Discovery feature file: `<dir>/bcd` in the format NFD's
//! `local` source reads from `/etc/kubernetes/node-feature-discovery/features.d/` — a
//! `# +expiry-time=<RFC 3339>` directive, which applies to every line after it, then one
//! `name=value` line per label.
//!
//! [`keep`] writes the file atomically (a dot-named temporary file in the same folder, which
//! NFD skips; fsync; rename; fsync of the folder) when a label changes, and at least every
//! [`REFRESH_EVERY`] with the expiry [`EXPIRY_AHEAD`] ahead: a running node's labels never
//! expire, a stopped node's age out within the hour. The file is never removed, so a restart
//! leaves the last labels in place until the new ones are written. [`render`] and [`parse`]
//! are pure; [`FeatureFile`] does the I/O.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use super::Labels;
use crate::state::{self, StateError};
use bcd_protocol::time::{parse_rfc3339, rfc3339_seconds};

/// The feature file's name in the folder: NFD reads every file whose name does not start
/// with a dot.
pub const FILE_NAME: &str = "bcd";
/// The longest write interval: a file this old is written again with a new expiry.
pub(crate) const REFRESH_EVERY: Duration = Duration::from_secs(20 * 60);
/// How far ahead of each write its expiry lies.
pub const EXPIRY_AHEAD: Duration = Duration::from_secs(60 * 60);
/// How soon a failed write is tried again.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(60);
/// The largest feature file NFD reads.
pub(crate) const NFD_MAX_FILE: usize = 64 * 1024;
/// The directive before the labels.
const EXPIRY_DIRECTIVE: &str = "# +expiry-time=";
/// The file's mode: NFD (root) reads it; nothing in it is secret.
const MODE: u32 = state::PUBLIC_MODE;

/// The feature file's text: a comment naming its writer, the expiry directive, then the
/// labels in name order.
pub fn render(labels: &Labels, expiry: SystemTime) -> String {
    format!(
        "# GPU labels kept by bcd node (GPU Feature Discovery {} names); rewritten at least every {} minutes\n{EXPIRY_DIRECTIVE}{}\n{}",
        super::GFD_RELEASE,
        REFRESH_EVERY.as_secs() / 60,
        rfc3339_seconds(expiry),
        labels.lines()
    )
}

/// One label of a feature file, as NFD reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureLine {
    /// The name before `=`.
    pub name: String,
    /// The value after the first `=` (`true` for a line without one).
    pub value: String,
    /// The expiry directive in force for it, if any.
    pub expires: Option<SystemTime>,
}

/// Why a feature file does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// NFD skips the whole file when an expiry directive does not parse.
    #[error("line {line}: the expiry directive {text:?} is not an RFC 3339 time")]
    Expiry {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// NFD reads no file larger than this.
    #[error("the file has {0} bytes, more than the {NFD_MAX_FILE} Node Feature Discovery reads")]
    TooLarge(usize),
}

/// Reads a feature file as NFD's `local` source does: empty lines and `#` comments skipped;
/// `# +expiry-time=<time>` in force for the lines after it (until the next one);
/// `# +no-label` and `# +no-feature` for the next line only (that line is no label);
/// `name=value`, or a bare `name` meaning `true`.
///
/// # Errors
/// [`ParseError`] for an expiry directive that does not parse, or a file NFD would not read.
pub fn parse(text: &str) -> Result<Vec<FeatureLine>, ParseError> {
    if text.len() > NFD_MAX_FILE {
        return Err(ParseError::TooLarge(text.len()));
    }
    let mut out = Vec::new();
    let mut expires = None;
    let mut skip_next = false;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(directive) = line.strip_prefix('#') {
            let directive = directive.trim_start();
            if let Some(time) = directive.strip_prefix("+expiry-time=") {
                expires = Some(
                    parse_rfc3339(time.trim()).ok_or_else(|| ParseError::Expiry {
                        line: n + 1,
                        text: line.to_owned(),
                    })?,
                );
            } else if directive == "+no-label" || directive == "+no-feature" {
                skip_next = true;
            }
            continue;
        }
        if std::mem::take(&mut skip_next) {
            continue;
        }
        let (name, value) = line.split_once('=').unwrap_or((line, "true"));
        out.push(FeatureLine {
            name: name.to_owned(),
            value: value.to_owned(),
            expires,
        });
    }
    Ok(out)
}

/// The labels of a feature file that have not expired at `now` (and are valid labels).
///
/// # Errors
/// As [`parse`].
pub(crate) fn unexpired(text: &str, now: SystemTime) -> Result<Labels, ParseError> {
    let mut labels = Labels::default();
    for line in parse(text)? {
        if line.expires.is_none_or(|t| t > now) {
            let _ = labels.insert(line.name, line.value);
        }
    }
    Ok(labels)
}

/// Why the feature file could not be written or read. `Display` is the operator's sentence.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NfdError {
    /// The write failed; the file there (if any) is as it was.
    #[error("the node labels could not be written ({0}): Node Feature Discovery keeps the labels last written until they expire, and bcd node tries again every minute; check that the folder (--nfd-features-dir) exists and that user bcd may write it (see docs/labels.md)")]
    Write(StateError),
    /// The file there could not be read back.
    #[error("the node feature file {path} could not be read back: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// The feature file in one folder, and what was last written to it by this process.
#[derive(Debug)]
pub(crate) struct FeatureFile {
    dir: PathBuf,
    path: PathBuf,
    last: Option<(Labels, Instant)>,
}

impl FeatureFile {
    /// The file `dir/bcd`; nothing is touched yet.
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            path: dir.join(FILE_NAME),
            last: None,
        }
    }

    /// Whether `labels` need a write at `now`: nothing was written by this process yet, they
    /// differ from what was, or that is [`REFRESH_EVERY`] old.
    pub(crate) fn due(&self, labels: &Labels, now: Instant) -> bool {
        match &self.last {
            None => true,
            Some((written, at)) => written != labels || now >= *at + REFRESH_EVERY,
        }
    }

    /// When the last write needs refreshing; `None` before the first.
    pub(crate) fn next_refresh(&self) -> Option<Instant> {
        self.last.as_ref().map(|(_, at)| *at + REFRESH_EVERY)
    }

    /// Writes `labels` atomically, expiring [`EXPIRY_AHEAD`] after `wall` (the wall clock
    /// now); `now` is this write's time on the runtime's clock.
    ///
    /// # Errors
    /// [`NfdError::Write`]: the old file is intact, and the labels stay due.
    pub(crate) fn write(
        &mut self,
        labels: &Labels,
        wall: SystemTime,
        now: Instant,
    ) -> Result<(), NfdError> {
        let text = render(labels, wall + EXPIRY_AHEAD);
        state::write_atomic(&self.path, text.as_bytes(), MODE).map_err(NfdError::Write)?;
        self.last = Some((labels.clone(), now));
        Ok(())
    }

    /// The labels the file there now holds that have not expired at `wall`; `None` without a
    /// file. It is read without following a link, as the state files are.
    ///
    /// # Errors
    /// [`NfdError::Read`] when it cannot be read or does not parse.
    pub(crate) fn read_back(&self, wall: SystemTime) -> Result<Option<Labels>, NfdError> {
        let read_error = |reason: String| NfdError::Read {
            path: self.path.clone(),
            reason,
        };
        let Some(bytes) = state::read(&self.path).map_err(|e| read_error(e.to_string()))? else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(&bytes);
        unexpired(&text, wall)
            .map(Some)
            .map_err(|e| read_error(e.to_string()))
    }

    /// Removes the temporary files of writes a crash cut off (`.bcd.tmp-<pid>`); nothing
    /// else in the folder is touched. Returns what was removed.
    pub(crate) fn remove_crash_temps(&self) -> Vec<PathBuf> {
        state::remove_crash_temps(&self.dir, |name| name == FILE_NAME)
    }
}

/// Keeps `file`: writes the labels `labels` holds at once when they change, at least every
/// [`REFRESH_EVERY`], and every [`RETRY_AFTER`] while a write fails; `wall` is the clock the
/// expiry is written from. While `labels` holds `None` (there are none yet, or no longer)
/// nothing is written, so the file's last labels expire. `report` is handed each failed
/// write's sentence, and `None` once a write succeeds again (or none is due any more). Ends
/// when `labels`' sender is dropped; the file stays.
pub(crate) async fn keep(
    mut labels: watch::Receiver<Option<Labels>>,
    mut file: FeatureFile,
    wall: impl Fn() -> SystemTime,
    mut report: impl FnMut(Option<String>),
) {
    let mut failing = false;
    loop {
        let current = labels.borrow_and_update().clone();
        let wake = match current {
            None => {
                if std::mem::take(&mut failing) {
                    report(None);
                }
                None
            }
            Some(current) => {
                let now = Instant::now();
                if failing || file.due(&current, now) {
                    match file.write(&current, wall(), now) {
                        Ok(()) => {
                            if std::mem::take(&mut failing) {
                                report(None);
                            }
                        }
                        Err(e) => {
                            failing = true;
                            report(Some(e.to_string()));
                        }
                    }
                }
                if failing {
                    Some(Instant::now() + RETRY_AFTER)
                } else {
                    file.next_refresh()
                }
            }
        };
        tokio::select! {
            changed = labels.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = sleep_until(wake) => {}
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
