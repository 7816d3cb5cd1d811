//! `<data-dir>/faults.json`: the XID conditions of this boot, and the sequence number of the
//! last kernel log record whose effect the file holds, so a restart of bcd in the same boot
//! reports them again and reads the kernel log on from there.
//!
//! The file holds the boot id (`/proc/sys/kernel/random/boot_id`) it was written in. The first
//! start in another boot finds a different id and drops the conditions (rewriting the file);
//! readers that only look ([`read_with_history`], for `bcd status` and `bcd diag`) never write.
//! Before dropping them it keeps that boot's hardware XIDs (those whose remedy is a reset or a
//! reboot, see [`super::xid`]) in a bounded history of [`HISTORY_BOOTS`] boots: the same
//! hardware XID on the same GPU in two consecutive boots means the GPU needs inspection.
//! The file is private (0600) and written atomically; a torn file is set aside, never replaced
//! silently (see [`crate::state`]).
//!
//! Writes are coalesced and published as a group commit: the first change after a quiet
//! [`WRITE_INTERVAL`] is written at once, later ones at most once per interval (every XID is
//! counted in memory at once, the file catches up within the interval, and at once on shutdown
//! through [`Health::flush`]). A change is published (to the API, the metrics, the device
//! plugins) only once it is in the file, so nothing shown is lost by a kill -9; a change whose
//! write failed is published at once. An XID storm of hundreds a second then costs a few
//! writes a second, not one rewrite and fsync of the whole file per record.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bcd_protocol::GpuUuid;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::xid::XidPolicy;
use super::{Condition, ConditionDevice, ConditionKind};
use crate::state::{self, StateError, PRIVATE_MODE};
use crate::sys::host::Host;

/// The file's name in the data folder (and in the runtime folder, for its fallback).
pub const FAULTS_FILE: &str = "faults.json";
/// The runtime folder `bcd node` keeps the fallback record in: bcd.service's
/// `RuntimeDirectory` (tmpfs, kept across service restarts, gone with the boot).
pub const DEFAULT_RUNTIME_DIR: &str = "/run/bcd";
/// How often a write that keeps failing is logged at most.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);
/// Where the kernel gives this boot's id.
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// Why the faults could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum FaultsError {
    /// The boot id could not be read.
    #[error("cannot read this boot's id from {path}: {source}; XID conditions cannot be kept across restarts")]
    BootId {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The state file could not be read or written.
    #[error("XID conditions: {0}")]
    State(#[from] StateError),
}

/// The shortest time between two writes of the file during a burst of changes. A change is
/// published only once written, so this is also how long a burst's later XIDs may wait to be
/// shown (and the GPU withdrawn): short enough for that, long enough that a storm costs a few
/// writes a second, not one per record.
pub const WRITE_INTERVAL: Duration = Duration::from_millis(250);

/// How many earlier boots' hardware XIDs are kept.
pub const HISTORY_BOOTS: usize = 8;

/// The hardware XIDs one earlier boot saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PastBoot {
    /// That boot's id.
    pub boot_id: String,
    /// `(GPU, XID number)`, one per pair (a GPU an earlier bcd stored under a UUID that names
    /// no GPU is kept as written, and matches none).
    pub xids: Vec<(ConditionDevice, u32)>,
}

impl PastBoot {
    /// Whether that boot saw XID `number` on `uuid`.
    pub fn has(&self, uuid: &GpuUuid, number: u32) -> bool {
        self.xids
            .iter()
            .any(|(d, n)| d.gpu() == Some(uuid) && *n == number)
    }

    /// The hardware XIDs among `conditions`, judged by the catalog (overrides are the
    /// node's present opinion, not history's).
    fn of(boot_id: &str, conditions: &[Condition]) -> Self {
        let policy = super::xid::XidPolicy::default();
        let mut xids: Vec<(ConditionDevice, u32)> = conditions
            .iter()
            .filter(|c| c.device_id.gpu().is_some())
            .filter_map(|c| Some((c.device_id.clone(), c.kind.xid()?)))
            .filter(|(_, n)| policy.judge(*n).is_hardware())
            .collect();
        xids.sort();
        xids.dedup();
        Self {
            boot_id: boot_id.to_owned(),
            xids,
        }
    }
}

/// The file's contents.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Document {
    boot_id: String,
    #[serde(default)]
    conditions: Vec<Condition>,
    /// Earlier boots, oldest first.
    #[serde(default)]
    history: Vec<PastBoot>,
    /// The last kernel log record whose effect this file holds: a start in the same boot
    /// reads the kernel log from its beginning and skips the records up to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kmsg_sequence: Option<u64>,
    /// Written by a bcd that reads the kernel log from its start. A document of this boot
    /// without it was written by an older bcd, which read from the log's end: the records
    /// before are in it already, so the next read starts at the end (else they would count
    /// twice).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    kmsg_replay: bool,
}

/// Appends a finished boot to `history`, keeping the last [`HISTORY_BOOTS`]; a boot without
/// hardware XIDs is kept too (it breaks a run of consecutive boots).
fn push_history(history: &mut Vec<PastBoot>, boot: PastBoot) {
    history.push(boot);
    let excess = history.len().saturating_sub(HISTORY_BOOTS);
    history.drain(..excess);
}

/// Reads this boot's id from `host`, trimmed.
///
/// # Errors
/// [`FaultsError::BootId`] when the file cannot be read.
pub fn read_boot_id(host: &Host) -> Result<String, FaultsError> {
    let path = host.path(BOOT_ID_PATH);
    std::fs::read_to_string(&path)
        .map(|s| s.trim().to_owned())
        .map_err(|source| FaultsError::BootId { path, source })
}

fn parse(bytes: &[u8]) -> Result<Document, String> {
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
}

/// The conditions `faults.json` holds for `boot_id`, without writing anything (none when the
/// file is absent or from another boot), and the earlier boots' history as the next start
/// would keep it (when the file is from another boot, that boot is the last of the history).
///
/// # Errors
/// [`FaultsError::State`] when the file is a link, unreadable or does not parse (it is left
/// where it is: readers never set files aside).
pub fn read_with_history(data_dir: &Path, boot_id: &str) -> Result<Record, FaultsError> {
    read_record(data_dir, boot_id).map(Option::unwrap_or_default)
}

/// This boot's conditions alone: the tests' shorthand for [`read_with_history`].
#[cfg(test)]
pub(crate) fn read_this_boot(
    data_dir: &Path,
    boot_id: &str,
) -> Result<Vec<Condition>, FaultsError> {
    read_with_history(data_dir, boot_id).map(|(c, _)| c)
}

/// This boot's conditions and the earlier boots' history, as a record holds them.
pub type Record = (Vec<Condition>, Vec<PastBoot>);

/// [`read_with_history`], telling an absent file apart: `None` when there is no
/// `faults.json` in `data_dir` to read (see [`no_record`] for what a reader says then).
///
/// # Errors
/// As [`read_with_history`].
pub fn read_record(data_dir: &Path, boot_id: &str) -> Result<Option<Record>, FaultsError> {
    let path = data_dir.join(FAULTS_FILE);
    let Some(bytes) = state::read(&path)? else {
        return Ok(None);
    };
    let doc = parse(&bytes).map_err(|reason| {
        FaultsError::State(StateError::Io {
            path: path.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, reason),
        })
    })?;
    Ok(Some(if doc.boot_id == boot_id {
        (doc.conditions, doc.history)
    } else {
        let mut history = doc.history;
        push_history(&mut history, PastBoot::of(&doc.boot_id, &doc.conditions));
        (Vec::new(), history)
    }))
}

/// What a reader without a node says when `data_dir` holds no `faults.json`: that there is no
/// XID record (not that there were no XIDs), and where one would be. `folder_exists` tells
/// whether `data_dir` itself is there.
pub fn no_record(data_dir: &Path, folder_exists: bool) -> String {
    let file = data_dir.join(FAULTS_FILE);
    if folder_exists {
        format!(
            "no XID record: there is no {} (bcd node writes it at the first XID it sees; without a running bcd node no XID is watched)",
            file.display()
        )
    } else {
        format!(
            "no XID record: {} does not exist, so no bcd node kept one there (only bcd node watches the kernel log for XIDs; give --data-dir its folder)",
            data_dir.display()
        )
    }
}

/// The faults file of one boot, owned by the node service.
#[derive(Debug)]
pub struct FaultStore {
    path: PathBuf,
    boot_id: String,
    conditions: Vec<Condition>,
    /// What a write needs, held open so an XID is recorded while the process has no file
    /// descriptor left; `None` where it could not be held (each write then opens its own).
    writer: Option<state::ReservedWriter>,
    history: Vec<PastBoot>,
    /// Changes not written yet.
    dirty: bool,
    /// When the file was last written.
    last_write: Option<Instant>,
    /// Writes and bytes written, for the metrics and the storm's figures.
    writes: u64,
    bytes_written: u64,
    /// Where the conditions go while the file cannot be written (see [`FaultStore::with_fallback`]).
    fallback: Option<PathBuf>,
    /// Why the file cannot be written now, and the failed writes since it last could.
    failure: Option<(String, u64)>,
    /// When a failure was last logged.
    failure_logged: Option<Instant>,
    /// The last kernel log record handled (written with the next write, with the conditions
    /// it may have changed).
    kmsg_sequence: Option<u64>,
    /// This boot's file was written by an older bcd (see [`Document`]): the kernel log's
    /// backlog is taken as handled.
    kmsg_at_end: bool,
}

impl FaultStore {
    /// Opens `<data_dir>/faults.json` for `boot_id`: the same boot's conditions are kept;
    /// another boot's are dropped and the file rewritten at once.
    ///
    /// # Errors
    /// [`FaultsError::State`]: a torn file has been set aside (the store then starts empty and
    /// the error says where the old file went), or the file cannot be read or rewritten.
    pub fn open(data_dir: &Path, boot_id: &str) -> Result<Self, FaultsError> {
        let path = data_dir.join(FAULTS_FILE);
        let loaded = state::load(&path, parse)?;
        let mut store = Self {
            writer: reserve(&path),
            path,
            boot_id: boot_id.to_owned(),
            conditions: Vec::new(),
            history: Vec::new(),
            dirty: false,
            last_write: None,
            writes: 0,
            bytes_written: 0,
            fallback: None,
            failure: None,
            failure_logged: None,
            kmsg_sequence: None,
            kmsg_at_end: false,
        };
        match loaded {
            Some(doc) if doc.boot_id == boot_id => {
                store.conditions = doc.conditions;
                store.history = doc.history;
                store.kmsg_sequence = doc.kmsg_sequence;
                store.kmsg_at_end = !doc.kmsg_replay;
            }
            Some(doc) => {
                tracing::info!(
                    "dropping {} XID condition(s) of an earlier boot ({}), keeping its hardware XIDs as history",
                    doc.conditions.len(),
                    doc.boot_id
                );
                store.history = doc.history;
                push_history(
                    &mut store.history,
                    PastBoot::of(&doc.boot_id, &doc.conditions),
                );
                store.save()?;
            }
            None => {}
        }
        Ok(store)
    }

    /// A store with no conditions that has not read its file: for a node whose file cannot
    /// be read (the error is reported); its first change tries to write the file again.
    pub fn empty(data_dir: &Path, boot_id: &str) -> Self {
        let path = data_dir.join(FAULTS_FILE);
        Self {
            writer: reserve(&path),
            path,
            boot_id: boot_id.to_owned(),
            conditions: Vec::new(),
            history: Vec::new(),
            dirty: false,
            last_write: None,
            writes: 0,
            bytes_written: 0,
            fallback: None,
            failure: None,
            failure_logged: None,
            kmsg_sequence: None,
            kmsg_at_end: false,
        }
    }

    /// Keeps the conditions in `<runtime_dir>/faults.json` whenever the data folder's file
    /// cannot be written (a full or read-only disk), and takes back what an earlier process
    /// of this boot kept there: that record is the newer whole document (it is removed at every
    /// successful write of the data folder's file), so its conditions replace the file's and
    /// are written to the data folder at once; the fallback goes once that write succeeds. The runtime folder is tmpfs that lasts the boot, like the
    /// conditions themselves, and is not on the full disk.
    pub fn with_fallback(mut self, runtime_dir: &Path) -> Self {
        let fallback = runtime_dir.join(FAULTS_FILE);
        match state::load(&fallback, parse) {
            Ok(Some(doc)) if doc.boot_id == self.boot_id => {
                // The fallback is written only after the data folder's file failed and goes
                // once that file is written again: it is the newer whole document (a reset's
                // clearing included), so it replaces this boot's conditions.
                tracing::warn!(
                    "{}: took back the XID conditions kept there while {} could not be written",
                    fallback.display(),
                    self.path.display()
                );
                self.conditions = doc.conditions;
                self.kmsg_sequence = doc.kmsg_sequence.max(self.kmsg_sequence);
                self.dirty = true;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("the fallback record of XID conditions: {e}"),
        }
        self.fallback = Some(fallback);
        if self.dirty {
            // An error is reported by the save itself; the fallback keeps the conditions.
            let _ = self.save();
        } else {
            self.remove_fallback();
        }
        self
    }

    /// The last kernel log record handled, as this store knows it (see [`Document`]).
    pub fn kmsg_sequence(&self) -> Option<u64> {
        self.kmsg_sequence
    }

    /// Whether an older bcd wrote this boot's file, so the kernel log's backlog is handled.
    pub fn kmsg_at_end(&self) -> bool {
        self.kmsg_at_end
    }

    /// Notes that kernel log record `sequence` was handled and changed nothing: it is
    /// written with the next write.
    pub fn note_sequence(&mut self, sequence: u64) {
        self.kmsg_sequence = Some(sequence).max(self.kmsg_sequence);
    }

    /// Why the file cannot be written now, when it cannot: the sentence for `status`.
    pub fn save_failure(&self) -> Option<String> {
        self.failure.as_ref().map(|(why, failed)| {
            let kept = match &self.fallback {
                Some(f) => format!("they are kept in {} until it can", f.display()),
                None => "they are kept in memory only".to_owned(),
            };
            format!("XID conditions cannot be saved ({why}; {failed} failed write(s)): {kept}, and the GPUs stay out of work")
        })
    }

    fn remove_fallback(&self) {
        if let Some(f) = &self.fallback {
            match std::fs::remove_file(f) {
                Ok(()) => tracing::info!(
                    "{} is written again; removed {}",
                    self.path.display(),
                    f.display()
                ),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!("cannot remove {}: {e}", f.display()),
            }
        }
    }

    /// Earlier boots' hardware XIDs, oldest first.
    pub fn history(&self) -> &[PastBoot] {
        &self.history
    }

    /// This boot's conditions.
    pub fn conditions(&self) -> &[Condition] {
        &self.conditions
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Raises `kind` for `device_id` and writes the file at once.
    ///
    /// # Errors
    /// [`FaultsError::State`] when the write failed; the condition is kept in memory anyway.
    pub fn raise(
        &mut self,
        kind: &ConditionKind,
        device_id: ConditionDevice,
        message: &str,
    ) -> Result<bool, FaultsError> {
        let changed = self.raise_coalesced(kind, device_id, message)?;
        self.flush()?;
        Ok(changed)
    }

    /// Raises `kind` for `device_id`; writes the file at once when it was not written in the
    /// last [`WRITE_INTERVAL`], else leaves the change for [`FaultStore::flush`] (the node
    /// flushes within the interval, see [`Health::write_pending`]).
    ///
    /// # Errors
    /// [`FaultsError::State`] when the write failed; the condition is kept in memory anyway.
    pub fn raise_coalesced(
        &mut self,
        kind: &ConditionKind,
        device_id: ConditionDevice,
        message: &str,
    ) -> Result<bool, FaultsError> {
        self.raise_at(kind, device_id, message, crate::state::unix_now(), None)
    }

    /// As [`FaultStore::raise_coalesced`], for the kernel log record `sequence` logged at
    /// `at` (Unix seconds): the condition and the record's number are written together.
    ///
    /// # Errors
    /// As [`FaultStore::raise_coalesced`].
    pub fn raise_at(
        &mut self,
        kind: &ConditionKind,
        device_id: ConditionDevice,
        message: &str,
        at: u64,
        sequence: Option<u64>,
    ) -> Result<bool, FaultsError> {
        if sequence.is_some() {
            self.kmsg_sequence = sequence.max(self.kmsg_sequence);
        }
        let changed = super::raise(&mut self.conditions, kind, device_id, message, at);
        if changed {
            self.dirty = true;
            if self.write_due(Instant::now()).is_none() {
                self.save()?;
            }
        }
        Ok(changed)
    }

    /// Drops the conditions a reset of `uuid` ends ([`Condition::cleared_by_reset_of`] under
    /// `policy`) last seen at or before `since` (Unix seconds: when the reset began) and writes
    /// the file; one seen again after it, during the reset or the collection after it, stays,
    /// and so does what only a reboot clears. Returns how many were dropped.
    ///
    /// # Errors
    /// [`FaultsError::State`] when the write failed; memory is cleared anyway.
    pub fn clear_after_reset(
        &mut self,
        uuid: &GpuUuid,
        since: u64,
        policy: &XidPolicy,
    ) -> Result<usize, FaultsError> {
        let before = self.conditions.len();
        self.conditions
            .retain(|c| !(c.cleared_by_reset_of(uuid, policy) && c.last_seen <= since));
        let dropped = before - self.conditions.len();
        if dropped > 0 {
            self.save()?;
        }
        Ok(dropped)
    }

    /// `None` when a write may happen now; else when the next one may.
    fn write_due(&self, now: Instant) -> Option<Instant> {
        let next = self.last_write? + WRITE_INTERVAL;
        (next > now).then_some(next)
    }

    /// Whether changes wait to be written, and when they may be.
    pub fn pending_write(&self) -> Option<Instant> {
        self.dirty
            .then(|| self.write_due(Instant::now()).unwrap_or_else(Instant::now))
    }

    /// Writes the changes not written yet, if any.
    ///
    /// # Errors
    /// [`FaultsError::State`] when the write failed (the changes stay pending).
    pub fn flush(&mut self) -> Result<(), FaultsError> {
        if self.dirty {
            self.save()?;
        }
        Ok(())
    }

    /// How many times the file was written, and how many bytes in all.
    pub fn written(&self) -> (u64, u64) {
        (self.writes, self.bytes_written)
    }

    fn save(&mut self) -> Result<(), FaultsError> {
        let doc = Document {
            boot_id: self.boot_id.clone(),
            conditions: self.conditions.clone(),
            history: self.history.clone(),
            kmsg_sequence: self.kmsg_sequence,
            kmsg_replay: true,
        };
        // Plain data always encodes.
        let bytes = serde_json::to_vec_pretty(&doc).unwrap_or_default();
        // Counted as tried: a failing write is retried at the next change or flush, not at once.
        self.last_write = Some(Instant::now());
        let written = match &mut self.writer {
            Some(writer) => writer.write(&bytes),
            None => state::write_atomic(&self.path, &bytes, PRIVATE_MODE),
        };
        if let Err(e) = written {
            let mut why = e.to_string();
            if let Some(f) = &self.fallback {
                if let Some(parent) = f.parent() {
                    let _ = std::fs::create_dir_all(parent);
                }
                if let Err(fe) = state::write_atomic(f, &bytes, PRIVATE_MODE) {
                    why.push_str(&format!("; nor can the fallback {}: {fe}", f.display()));
                }
            }
            // Retried by the writer within the interval, whatever the change was (a reset's
            // clearing too).
            self.dirty = true;
            let failed = self.failure.as_ref().map_or(0, |(_, n)| *n) + 1;
            self.failure = Some((why, failed));
            let due = self
                .failure_logged
                .is_none_or(|at| at.elapsed() >= FAILURE_LOG_EVERY);
            if due {
                if let Some(sentence) = self.save_failure() {
                    tracing::error!("{sentence}");
                }
                self.failure_logged = Some(Instant::now());
            }
            return Err(e.into());
        }
        // The fallback (of this process's failure, or an earlier one's) is superseded.
        self.failure = None;
        self.failure_logged = None;
        self.remove_fallback();
        self.dirty = false;
        self.writes += 1;
        self.bytes_written += bytes.len() as u64;
        Ok(())
    }
}

impl Drop for FaultStore {
    /// What a burst left pending is written when the store goes (the node's shutdown).
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::error!("{e}");
        }
    }
}

/// Holds the faults file's writer open, or logs why it cannot (its writes then open files).
fn reserve(path: &Path) -> Option<state::ReservedWriter> {
    state::ReservedWriter::open(path, PRIVATE_MODE)
        .inspect_err(|e| tracing::warn!("{}", reserve_failure(e)))
        .ok()
}

/// Why the faults file's writer could not be held open, in the operator's words: a read-only
/// or full data folder is said as such (it was once reported as running out of file
/// descriptors); only a lack of descriptors is said to be one.
fn reserve_failure(e: &StateError) -> String {
    let errno = match e {
        StateError::Io { source, .. } => source.raw_os_error(),
        _ => None,
    };
    match errno {
        Some(libc::EMFILE | libc::ENFILE) => {
            format!("{e}: XIDs cannot be recorded while the process is out of file descriptors")
        }
        Some(libc::EROFS) => format!(
            "{e}: the data folder is read-only, so XIDs are kept only in the runtime folder's fallback until it is writable"
        ),
        Some(libc::ENOSPC | libc::EDQUOT) => format!(
            "{e}: the data folder's disk is full, so XIDs are kept only in the runtime folder's fallback until it has room"
        ),
        _ => format!("{e}: faults.json's writer cannot be held open; each write of XIDs opens its file"),
    }
}

/// The faults store shared by the XID watcher, `gpu.reset` and the node service's readers:
/// every change is written to the file and published at once on a `watch` channel. Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct Health {
    store: Arc<Mutex<FaultStore>>,
    published: Arc<watch::Sender<Vec<Condition>>>,
    /// Woken when a change is left for a later write.
    pending: Arc<tokio::sync::Notify>,
}

impl Health {
    /// Shares `store`, publishing its current conditions.
    pub fn new(store: FaultStore) -> Self {
        let (tx, _) = watch::channel(store.conditions().to_vec());
        Self {
            store: Arc::new(Mutex::new(store)),
            published: Arc::new(tx),
            pending: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// A receiver that sees every change of the conditions.
    pub fn subscribe(&self) -> watch::Receiver<Vec<Condition>> {
        self.published.subscribe()
    }

    /// The conditions now.
    pub fn conditions(&self) -> Vec<Condition> {
        self.published.borrow().clone()
    }

    /// Earlier boots' hardware XIDs, oldest first (fixed for the life of the process).
    pub fn history(&self) -> Vec<PastBoot> {
        self.store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .history()
            .to_vec()
    }

    /// Writes what waits to be written now (at shutdown, and for [`Health::write_pending`]),
    /// then publishes it.
    ///
    /// # Errors
    /// The write's error; what waited is published anyway (readers must not miss a condition
    /// the file could not take).
    pub fn flush(&self) -> Result<(), FaultsError> {
        let mut store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        let result = store.flush();
        let now = store.conditions().to_vec();
        drop(store);
        self.publish(now);
        result
    }

    fn publish(&self, now: Vec<Condition>) {
        self.published.send_if_modified(|current| {
            if *current == now {
                false
            } else {
                *current = now;
                true
            }
        });
    }

    /// Why the file cannot be written now, when it cannot (see [`FaultStore::save_failure`]).
    pub fn save_failure(&self) -> Option<String> {
        self.store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .save_failure()
    }

    /// How many times the file was written, and how many bytes in all.
    pub fn written(&self) -> (u64, u64) {
        self.store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .written()
    }

    /// Writes the changes a burst left pending, each within [`WRITE_INTERVAL`] of the
    /// change; sleeps while there are none. Runs for ever (spawn it with the node's tasks).
    ///
    /// # Cancel safety
    /// Cancel safe: what is pending stays pending for [`Health::flush`].
    pub async fn write_pending(self) {
        loop {
            let due = self
                .store
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pending_write();
            match due {
                Some(at) => {
                    tokio::time::sleep_until(at.into()).await;
                    // A failure is logged by the store itself, at most once a minute.
                    if self.flush().is_err() {
                        tokio::time::sleep(WRITE_INTERVAL).await;
                    }
                }
                None => self.pending.notified().await,
            }
        }
    }

    /// Raises a condition and writes the file (at once, or within [`WRITE_INTERVAL`] during a
    /// burst), publishing it once it is written; see [`FaultStore::raise`] and
    /// [`Health::change`].
    ///
    /// # Errors
    /// The write's error; the condition is published anyway (readers must see it now).
    pub fn raise(
        &self,
        kind: &ConditionKind,
        device_id: ConditionDevice,
        message: &str,
    ) -> Result<(), FaultsError> {
        self.change(|s| s.raise_coalesced(kind, device_id, message).map(|_| ()))
    }

    /// [`Health::raise`] for the kernel log record `sequence`, logged at `at` (Unix seconds).
    ///
    /// # Errors
    /// As [`Health::raise`].
    pub fn raise_record(
        &self,
        kind: &ConditionKind,
        device_id: ConditionDevice,
        message: &str,
        sequence: u64,
        at: u64,
    ) -> Result<(), FaultsError> {
        self.change(|s| {
            s.raise_at(kind, device_id, message, at, Some(sequence))
                .map(|_| ())
        })
    }

    /// Notes a kernel log record that changed nothing (see [`FaultStore::note_sequence`]).
    pub fn note_sequence(&self, sequence: u64) {
        self.store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .note_sequence(sequence);
    }

    /// Whether an older bcd wrote this boot's file (see [`FaultStore::kmsg_at_end`]).
    pub fn kmsg_at_end(&self) -> bool {
        self.store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .kmsg_at_end()
    }

    /// The last kernel log record this boot's store knows was handled.
    pub fn kmsg_sequence(&self) -> Option<u64> {
        self.store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .kmsg_sequence()
    }

    /// Drops the conditions a reset of `uuid` that began at `since` ended, writes the file and
    /// publishes; see [`FaultStore::clear_after_reset`].
    ///
    /// # Errors
    /// The write's error; memory and readers are cleared anyway.
    pub fn clear_after_reset(
        &self,
        uuid: &GpuUuid,
        since: u64,
        policy: &XidPolicy,
    ) -> Result<usize, FaultsError> {
        self.change(|s| s.clear_after_reset(uuid, since, policy))
    }

    /// Applies `f` and publishes the conditions once they are on disk (group commit): a change
    /// written at once is published at once; one left for the burst's next write is published
    /// by that write ([`Health::write_pending`], within [`WRITE_INTERVAL`]), so nothing the API,
    /// the metrics or the device plugins show can be lost by a kill -9. A change whose write
    /// failed is published at once: the GPU is kept from work although the file lags, and the
    /// failure is the caller's to report.
    fn change<T>(
        &self,
        f: impl FnOnce(&mut FaultStore) -> Result<T, FaultsError>,
    ) -> Result<T, FaultsError> {
        // A panic while holding the lock cannot leave the conditions half-written: each change
        // is one push, one field update or one retain.
        let mut store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        let result = f(&mut store);
        let deferred = store.dirty && result.is_ok();
        let now = (!deferred).then(|| store.conditions().to_vec());
        drop(store);
        match now {
            Some(now) => self.publish(now),
            None => self.pending.notify_one(),
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const GPU_A: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";
    const GPU_B: &str = "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a";

    fn uuid(u: &str) -> GpuUuid {
        u.parse().unwrap()
    }

    fn dev(u: &str) -> ConditionDevice {
        ConditionDevice::Gpu(uuid(u))
    }

    /// A fake host whose boot id file the test rewrites to simulate a reboot.
    fn host_with_boot(dir: &Path, boot_id: &str) -> Host {
        let file = dir.join("root/proc/sys/kernel/random/boot_id");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, format!("{boot_id}\n")).unwrap();
        Host::new(dir.join("root"), "nvidia-smi")
    }

    // XIDs raised while faults.json could not be written lived only in memory: a clean
    // restart dropped them (Xid 79, 48, 119 gone, the GPUs healthy again) and status never
    // said that XIDs were not saved. They are kept in the runtime folder's fallback record
    // meanwhile, said in status, and taken back by the next start of the boot.
    #[tokio::test]
    async fn xids_the_data_folder_cannot_take_survive_a_restart_through_the_runtime_folder() {
        let dir = tempfile::tempdir().unwrap();
        let (data, run) = (dir.path().join("data"), dir.path().join("run"));
        std::fs::create_dir_all(&data).unwrap();
        let health = Health::new(
            FaultStore::open(&data, "boot-1")
                .unwrap()
                .with_fallback(&run),
        );
        assert_eq!(health.save_failure(), None);
        // The data folder goes away under the node: no file can be made in it.
        std::fs::remove_dir_all(&data).unwrap();
        for (xid, gpu) in [(79, GPU_A), (48, GPU_B), (119, GPU_A)] {
            // The first is written at once (and fails); the others wait for the burst's write.
            let _ = health.raise(&ConditionKind::Xid(xid), dev(gpu), "NVRM: Xid");
        }
        assert!(
            health.flush().is_err(),
            "the data folder cannot take the write"
        );
        assert_eq!(health.conditions().len(), 3, "shown although not saved");
        let problem = health.save_failure().expect("status says so");
        assert!(
            problem.starts_with("XID conditions cannot be saved ("),
            "{problem}"
        );
        assert!(
            problem.contains(&run.join(FAULTS_FILE).display().to_string()),
            "{problem}"
        );
        drop(health);

        // A clean restart in the same boot, the data folder back (empty).
        std::fs::create_dir_all(&data).unwrap();
        let store = FaultStore::open(&data, "boot-1")
            .unwrap()
            .with_fallback(&run);
        let kinds: Vec<String> = store
            .conditions()
            .iter()
            .map(|c| c.kind.to_string())
            .collect();
        assert_eq!(kinds, ["Xid79", "Xid48", "Xid119"]);
        assert_eq!(store.save_failure(), None);
        assert_eq!(
            read_this_boot(&data, "boot-1").unwrap().len(),
            3,
            "written back at once"
        );
        assert!(
            !run.join(FAULTS_FILE).exists(),
            "the fallback goes once the file has it all"
        );
        // Another boot's fallback is not this boot's.
        drop(store);
        std::fs::create_dir_all(&run).unwrap();
        std::fs::copy(data.join(FAULTS_FILE), run.join(FAULTS_FILE)).unwrap();
        std::fs::remove_file(data.join(FAULTS_FILE)).unwrap();
        let next = FaultStore::open(&data, "boot-2")
            .unwrap()
            .with_fallback(&run);
        assert!(next.conditions().is_empty());
    }

    // A reset's clearing whose write failed was never retried (only a raise left the store
    // due), and a restart then brought the cleared XIDs back from the file.
    #[test]
    fn a_clearing_whose_write_failed_is_written_when_the_disk_takes_it() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let mut store = FaultStore::open(&data, "boot-1")
            .unwrap()
            .with_fallback(&dir.path().join("run"));
        store
            .raise(&ConditionKind::Xid(48), dev(GPU_A), "x")
            .unwrap();
        let gpu: GpuUuid = GPU_A.parse().unwrap();
        let moved = dir.path().join("data.away");
        std::fs::rename(&data, &moved).unwrap();
        std::fs::write(&data, "").unwrap();
        assert!(store
            .clear_after_reset(&gpu, crate::state::unix_now(), &XidPolicy::default())
            .is_err());
        assert!(store.pending_write().is_some(), "the clearing stays due");
        std::fs::remove_file(&data).unwrap();
        std::fs::rename(&moved, &data).unwrap();
        store.flush().unwrap();
        assert!(
            read_this_boot(&data, "boot-1").unwrap().is_empty(),
            "the clearing is written"
        );
    }

    // A read-only data folder was reported as the process running out of file descriptors.
    #[test]
    fn a_read_only_or_full_data_folder_is_said_as_such() {
        let failed = |errno| StateError::Io {
            path: "/var/lib/bcd/.faults.json.tmp".into(),
            source: std::io::Error::from_raw_os_error(errno),
        };
        let ro = reserve_failure(&failed(libc::EROFS));
        assert!(ro.contains("the data folder is read-only"), "{ro}");
        assert!(!ro.contains("file descriptors"), "{ro}");
        assert!(reserve_failure(&failed(libc::ENOSPC)).contains("disk is full"));
        assert!(reserve_failure(&failed(libc::EMFILE)).contains("out of file descriptors"));
    }

    // kill -9 lost 24-29 % of the conditions /v1/conditions had shown (all younger than the
    // write coalescing): a change was published before it was written. Whatever is published
    // now is in the file, through a burst on several GPUs and its catch-up write.
    #[tokio::test]
    async fn every_condition_shown_is_already_in_faults_json() {
        let dir = tempfile::tempdir().unwrap();
        let health = Health::new(FaultStore::open(dir.path(), "boot-1").unwrap());
        let writer = tokio::spawn(health.clone().write_pending());
        let on_disk = || read_this_boot(dir.path(), "boot-1").unwrap();
        let shown_is_written = |shown: &[Condition]| {
            let written = on_disk();
            for c in shown {
                let w = written
                    .iter()
                    .find(|w| w.kind == c.kind && w.device_id == c.device_id);
                assert!(
                    w.is_some_and(|w| w.count >= c.count),
                    "shown but not written: {c:?}\nwritten: {written:?}"
                );
            }
        };
        for i in 0..300u32 {
            let gpu = [GPU_A, GPU_B][i as usize % 2];
            health
                .raise(&ConditionKind::Xid(13 + i % 3), dev(gpu), "NVRM: Xid 13")
                .unwrap();
            shown_is_written(&health.conditions());
            if i % 50 == 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        tokio::time::sleep(WRITE_INTERVAL * 2).await;
        writer.abort();
        let shown = health.conditions();
        assert_eq!(
            shown.len(),
            6,
            "every condition is shown once written: {shown:?}"
        );
        assert_eq!(shown.iter().map(|c| c.count).sum::<u64>(), 300);
        shown_is_written(&shown);
    }

    // What broke: each XID rewrote and fsynced all of faults.json; 200 XIDs/s on one GPU
    // wrote 189 MB in 23 s. A burst is written at once, then at most once per interval.
    #[tokio::test]
    async fn an_xid_storm_writes_faults_json_once_per_interval_and_keeps_every_record() {
        let dir = tempfile::tempdir().unwrap();
        let health = Health::new(FaultStore::open(dir.path(), "boot-1").unwrap());
        let file = dir.path().join(FAULTS_FILE);
        health
            .raise(
                &ConditionKind::Xid(13),
                dev(GPU_A),
                "NVRM: Xid (PCI:0000:18:00): 13, first",
            )
            .unwrap();
        // The first XID of a burst reaches the file at once.
        assert_eq!(read_this_boot(dir.path(), "boot-1").unwrap()[0].count, 1);
        let (_, one_write) = health.written();
        for i in 1..1000 {
            health
                .raise(
                    &ConditionKind::Xid(13),
                    dev(GPU_A),
                    &format!("NVRM: Xid (PCI:0000:18:00): 13, n={i}"),
                )
                .unwrap();
        }
        // Every record is counted; what is published is what is on disk (the first)...
        assert_eq!(health.conditions()[0].count, 1);
        let (writes, bytes) = health.written();
        assert_eq!(writes, 1, "the burst rewrote the file {writes} times");
        eprintln!("1,000 XIDs in one burst: {writes} write(s), {bytes} bytes (one write: {one_write} bytes)");
        // ...and the file catches up within the interval.
        let writer = tokio::spawn(health.clone().write_pending());
        tokio::time::sleep(WRITE_INTERVAL + Duration::from_millis(300)).await;
        writer.abort();
        assert_eq!(read_this_boot(dir.path(), "boot-1").unwrap()[0].count, 1000);
        assert_eq!(health.written().0, 2);
        // ...and is published with that write.
        assert_eq!(health.conditions()[0].count, 1000);
        // A change at shutdown is written by the flush.
        health
            .raise(&ConditionKind::Xid(31), dev(GPU_B), "NVRM: Xid 31")
            .unwrap();
        health.flush().unwrap();
        assert_eq!(read_this_boot(dir.path(), "boot-1").unwrap().len(), 2);
        assert!(file.exists());
    }

    #[test]
    fn a_restart_in_the_same_boot_keeps_conditions_and_another_boot_drops_them() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let host = host_with_boot(dir.path(), "boot-1");
        let boot = read_boot_id(&host).unwrap();
        assert_eq!(boot, "boot-1");

        let mut store = FaultStore::open(&data, &boot).unwrap();
        store
            .raise(
                &ConditionKind::Xid(79),
                dev(GPU_A),
                "NVRM: Xid (PCI:0000:18:00): 79, ...",
            )
            .unwrap();
        store
            .raise(
                &ConditionKind::Xid(13),
                dev(GPU_B),
                "NVRM: Xid (PCI:0000:2a:00): 13, ...",
            )
            .unwrap();
        let file = data.join(FAULTS_FILE);
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );

        // Restart, same boot.
        let again = FaultStore::open(&data, &read_boot_id(&host).unwrap()).unwrap();
        assert_eq!(again.conditions().len(), 2);
        assert_eq!(read_this_boot(&data, "boot-1").unwrap().len(), 2);

        // Reboot: a reader sees nothing and writes nothing; the service's start drops them.
        let host = host_with_boot(dir.path(), "boot-2");
        let boot = read_boot_id(&host).unwrap();
        assert!(read_this_boot(&data, &boot).unwrap().is_empty());
        assert!(std::fs::read_to_string(&file).unwrap().contains("boot-1"));
        let fresh = FaultStore::open(&data, &boot).unwrap();
        assert!(fresh.conditions().is_empty());
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains("boot-2") && !text.contains("Xid79"), "{text}");
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    // What broke: a reboot forgot every XID, so a GPU with the same double-bit ECC error on
    // every boot came back healthy each time.
    #[test]
    fn the_same_hardware_xid_on_two_consecutive_boots_escalates_to_inspection() {
        use crate::health::verdict::{judge, Evidence, HealthState, INSPECT_ACTION};
        use crate::inventory::document::Gpu;
        let dir = tempfile::tempdir().unwrap();
        let mut store = FaultStore::open(dir.path(), "boot-1").unwrap();
        store
            .raise(
                &ConditionKind::Xid(48),
                dev(GPU_A),
                "NVRM: Xid (PCI:0000:18:00): 48, DBE",
            )
            .unwrap();
        store
            .raise(
                &ConditionKind::Xid(13),
                dev(GPU_A),
                "NVRM: Xid (PCI:0000:18:00): 13, app",
            )
            .unwrap();
        drop(store);
        let store = FaultStore::open(dir.path(), "boot-2").unwrap();
        assert_eq!(
            store.history(),
            [PastBoot {
                boot_id: "boot-1".into(),
                xids: vec![(dev(GPU_A), 48)]
            }],
            "application XIDs are not history"
        );
        let (_, read) = read_with_history(dir.path(), "boot-2").unwrap();
        assert_eq!(read, store.history());
        let mut store = store;
        store
            .raise(
                &ConditionKind::Xid(48),
                dev(GPU_A),
                "NVRM: Xid (PCI:0000:18:00): 48, again",
            )
            .unwrap();
        let gpu = Gpu::new(0, uuid(GPU_A));
        let v = judge(
            &gpu,
            &Evidence::new(store.conditions()).with_history(store.history()),
        );
        assert_eq!(v.health, HealthState::Unhealthy);
        assert_eq!(v.reasons[0].action, INSPECT_ACTION);
        // Another GPU with the same XID, or the same GPU with another, is not a repeat.
        let other = Gpu::new(1, uuid(GPU_B));
        let mut c = store.conditions().to_vec();
        c[0].device_id = dev(GPU_B);
        let v = judge(&other, &Evidence::new(&c).with_history(store.history()));
        assert_eq!(
            v.reasons[0].action,
            format!("reset the GPU: bcd gpu reset {GPU_B}")
        );
        // The history is bounded.
        drop(store);
        for b in 3..20 {
            FaultStore::open(dir.path(), &format!("boot-{b}")).unwrap();
        }
        let store = FaultStore::open(dir.path(), "boot-20").unwrap();
        assert_eq!(store.history().len(), HISTORY_BOOTS);
        assert_eq!(store.history().last().unwrap().boot_id, "boot-19");
    }

    // What broke: a reset dropped every XID of its GPU, an Xid 79 whose remedy is a reboot
    // included, so the GPU read healthy although only a reboot brings it back.
    #[test]
    fn a_reset_clears_only_its_gpus_reset_xids_and_never_a_reboots() {
        let dir = tempfile::tempdir().unwrap();
        let health = Health::new(FaultStore::open(dir.path(), "b").unwrap());
        let mut rx = health.subscribe();
        health
            .raise(&ConditionKind::Xid(79), dev(GPU_A), "a")
            .unwrap();
        assert!(rx.has_changed().unwrap());
        assert_eq!(rx.borrow_and_update().len(), 1);
        health
            .raise(&ConditionKind::Xid(48), dev(GPU_B), "b")
            .unwrap();
        health
            .raise(&ConditionKind::Xid(13), dev(GPU_A), "c")
            .unwrap();
        health
            .raise(&ConditionKind::Xid(119), dev(GPU_A), "d")
            .unwrap();
        health
            .raise(&ConditionKind::FellOffTheBus, dev(GPU_A), "e")
            .unwrap();
        health.flush().unwrap();
        let after = crate::state::unix_now();
        let policy = XidPolicy::default();
        assert_eq!(
            health
                .clear_after_reset(&uuid(GPU_A), after, &policy)
                .unwrap(),
            2,
            "Xid 13 and Xid 119"
        );
        assert_eq!(
            health
                .clear_after_reset(&uuid(GPU_A), after, &policy)
                .unwrap(),
            0
        );
        let left = read_this_boot(dir.path(), "b").unwrap();
        let kept: Vec<(String, String)> = left
            .iter()
            .map(|c| (c.kind.to_string(), c.device_id.to_string()))
            .collect();
        assert_eq!(
            kept,
            [
                ("Xid79".to_owned(), GPU_A.to_owned()),
                ("Xid48".to_owned(), GPU_B.to_owned()),
                ("FellOffTheBus".to_owned(), GPU_A.to_owned()),
            ]
        );
        assert_eq!(health.conditions(), left);
        // An override that ignores 79 leaves nothing for a reboot to clear.
        let ignore_79 = XidPolicy::new([79].into(), Default::default()).unwrap();
        assert_eq!(
            health
                .clear_after_reset(&uuid(GPU_A), after, &ignore_79)
                .unwrap(),
            1
        );
    }

    // What changed: kinds and devices were strings; typed, a file an earlier bcd wrote must
    // read back and write out the same (an unknown kind kept as written).
    #[test]
    fn a_stored_faults_file_reads_back_and_writes_out_unchanged() {
        let stored = serde_json::json!({
            "boot_id": "b",
            "conditions": [
                {"kind": "Xid79", "status": true, "device_id": GPU_A, "message": "m",
                 "first_seen": 1, "last_seen": 2, "count": 2},
                {"kind": "SXid20034", "status": true, "device_id": "00000000:05:00.0",
                 "message": "s", "first_seen": 1, "last_seen": 1, "count": 1},
                {"kind": "FellOffTheBus", "status": true, "device_id": GPU_B, "message": "f",
                 "first_seen": 3, "last_seen": 3, "count": 1},
                {"kind": "MemoryPressure", "status": false, "device_id": GPU_B, "message": "x",
                 "first_seen": 4, "last_seen": 4, "count": 1}
            ],
            "history": [{"boot_id": "a", "xids": [[GPU_A, 48]]}]
        });
        let doc: Document = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(doc.conditions[0].kind, ConditionKind::Xid(79));
        assert_eq!(
            doc.conditions[1].device_id,
            ConditionDevice::Switch("0000:05:00.0".parse().unwrap())
        );
        assert_eq!(doc.conditions[2].kind, ConditionKind::FellOffTheBus);
        assert_eq!(
            doc.conditions[3].kind,
            ConditionKind::Other("MemoryPressure".into())
        );
        assert_eq!(serde_json::to_value(&doc).unwrap(), stored);
        // What an earlier bcd stored for a GPU the driver could not name (it kept whatever
        // UUID the driver printed) is kept as written, and matches no GPU.
        let mut masked = stored;
        let unnamed = "GPU-????????-????-????-????-????????????";
        masked["conditions"][0]["device_id"] = unnamed.into();
        masked["history"][0]["xids"][0][0] = unnamed.into();
        let doc: Document = serde_json::from_value(masked.clone()).unwrap();
        assert_eq!(doc.conditions[0].device_id.gpu(), None);
        assert!(!doc.history[0].has(&uuid(GPU_A), 48));
        assert_eq!(serde_json::to_value(&doc).unwrap(), masked);
    }

    #[test]
    fn a_torn_file_is_set_aside_and_a_reader_reports_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(FAULTS_FILE);
        std::fs::write(&file, b"{\"boot_id\": \"b\", \"condi").unwrap();
        assert!(read_this_boot(dir.path(), "b").is_err());
        assert!(file.exists(), "a reader leaves the file alone");
        let err = FaultStore::open(dir.path(), "b").unwrap_err();
        assert!(err.to_string().contains("does not parse"), "{err}");
        assert!(!file.exists());
        let store = FaultStore::open(dir.path(), "b").unwrap();
        assert!(store.conditions().is_empty());
    }
}
