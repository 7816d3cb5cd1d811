//! The XID watcher: reads `<host-root>/dev/kmsg` for the life of the node service, from the
//! oldest record on, skipping those `faults.json` says were handled (the first start of a
//! boot takes every record); turns each XID of a GPU the inventory lists into an `Xid<N>`
//! condition (written to `faults.json` with the record's number, and published once written),
//! and asks for an inventory collection, debounced.
//!
//! The records come from [`crate::sys::kmsg::KmsgReader`] (the character device, or a fake
//! host's regular file; records overwritten before they were read are counted by the next
//! record's sequence number), what each means from [`super::kmsg`], and every line the kernel
//! log makes bcd write goes through [`super::log_limit`].

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bcd_protocol::{GpuUuid, PciAddress};
use tokio::sync::{mpsc, watch};

use super::faults::Health;
use super::kmsg::{parse_event_record, Event, SXid, Xid};
use super::log_limit::{KmsgLogLimit, LogKey};
use super::xid::RECOVERY_ACTION_CHANGED;
use super::{ConditionDevice, ConditionKind};
use crate::inventory::document::{Gpu, Inventory};
use crate::sys::host::Host;
use crate::sys::kmsg::{KmsgReader, Polled};

/// How long the watcher waits before opening the kernel log again after its reader failed.
pub const RESTART_DELAY: Duration = Duration::from_secs(1);
/// How long the watcher waits for the first inventory before it reads the kernel log.
pub const FIRST_INVENTORY_WAIT: Duration = Duration::from_secs(60);

/// What the watcher has done, for metrics and tests.
#[derive(Debug, Default)]
pub struct WatcherStats {
    /// Records read.
    pub records: AtomicU64,
    /// XIDs of GPUs the inventory lists.
    pub xids: AtomicU64,
    /// XIDs on a bus the inventory does not list.
    pub unknown_bus: AtomicU64,
    /// Records overwritten before they were read.
    pub skipped: AtomicU64,
    /// Times the reader was opened again after failing.
    pub restarts: AtomicU64,
    /// Why the kernel log cannot be read now, in a sentence; `None` while it is read.
    pub failure: std::sync::Mutex<Option<String>>,
    /// Records the kernel log overwrote while bcd was not reading it (down, restarting), in
    /// a sentence for `status`; `None` when none was lost.
    pub overwritten: std::sync::Mutex<Option<String>>,
}

impl WatcherStats {
    fn set_failure(&self, sentence: Option<String>) {
        if let Ok(mut f) = self.failure.lock() {
            *f = sentence;
        }
    }

    /// Why the kernel log cannot be read now, if it cannot.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    /// What the kernel log overwrote while bcd was not reading it, if anything.
    pub fn overwritten(&self) -> Option<String> {
        self.overwritten.lock().ok().and_then(|f| f.clone())
    }
}

/// The key of a GPU's XIDs.
fn xid_key(uuid: &GpuUuid) -> LogKey {
    ("XIDs", uuid.to_string())
}

type Opener = Box<dyn Fn() -> io::Result<KmsgReader> + Send + Sync>;

/// The XID watcher. Build it, then spawn [`XidWatcher::run`].
pub struct XidWatcher {
    path: PathBuf,
    /// The host's `/proc/uptime`, to date records.
    uptime: PathBuf,
    open: Opener,
    inventory: watch::Receiver<Inventory>,
    health: Health,
    collect: mpsc::Sender<bool>,
    stats: Arc<WatcherStats>,
    last_sequence: Option<u64>,
    lost: bool,
    log: KmsgLogLimit,
    /// The last record handled before this reader was opened: records up to it are skipped.
    resume: Option<u64>,
    /// Whether a record after `resume` was read since the reader was opened.
    resumed: bool,
}

impl std::fmt::Debug for XidWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XidWatcher")
            .field("path", &self.path)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl XidWatcher {
    /// A watcher of `host`'s `/dev/kmsg`, matching XIDs against the latest inventory, raising
    /// conditions in `health` and sending a collection request to `collect` for each XID (a
    /// full channel means one is already waiting, which is enough).
    pub fn new(
        host: &Host,
        inventory: watch::Receiver<Inventory>,
        health: Health,
        collect: mpsc::Sender<bool>,
    ) -> Self {
        let path = host.path("/dev/kmsg");
        let open_path = path.clone();
        Self {
            uptime: host.path("/proc/uptime"),
            path,
            // From the oldest record: what was logged while the node was down, or before its
            // first start of the boot, is read too (see `read_until_failure`).
            open: Box::new(move || KmsgReader::open_from_start(&open_path)),
            inventory,
            health,
            collect,
            stats: Arc::default(),
            last_sequence: None,
            lost: false,
            log: KmsgLogLimit::default(),
            resume: None,
            resumed: false,
        }
    }

    /// Replaces how the kernel log is opened (tests hand in failing or `EPIPE` sources).
    #[cfg(test)]
    pub fn with_opener(
        mut self,
        open: impl Fn() -> io::Result<KmsgReader> + Send + Sync + 'static,
    ) -> Self {
        self.open = Box::new(open);
        self
    }

    /// Keeps its counters in `stats` (the node's, which status and the metrics read).
    pub fn with_stats(mut self, stats: Arc<WatcherStats>) -> Self {
        self.stats = stats;
        self
    }

    /// The watcher's counters, shared (the node hands its own in with [`Self::with_stats`]).
    #[cfg(test)]
    pub fn stats(&self) -> Arc<WatcherStats> {
        Arc::clone(&self.stats)
    }

    /// Watches for ever: a reader that fails is opened again after [`RESTART_DELAY`] (from the
    /// oldest record again, skipping those handled), and each restart is logged.
    ///
    /// # Cancel safety
    /// Dropping the future stops the watcher; nothing is left half-written (each condition is
    /// written atomically before it is published).
    pub async fn run(mut self) {
        // The backlog names GPUs by bus: read before the first collection, every XID of it
        // would be an unknown bus, marked handled and never recorded. So the first open waits
        // for an inventory (at most FIRST_INVENTORY_WAIT: a host whose collection lists no GPU
        // has nothing to match anyway).
        if self.inventory.borrow().gpu.gpus.is_empty() {
            let _ = tokio::time::timeout(FIRST_INVENTORY_WAIT, self.inventory.changed()).await;
        }
        // An older bcd's file of this boot: it read the log from its end, so what is there now
        // is in the file already (or predates it): the first open is at the log's end.
        let mut at_end = self.health.kmsg_at_end();
        let mut first = true;
        loop {
            if !first {
                self.stats.restarts.fetch_add(1, Ordering::Relaxed);
            }
            first = false;
            let opened = if std::mem::take(&mut at_end) {
                KmsgReader::open(&self.path)
            } else {
                (self.open)()
            };
            match opened {
                Ok(reader) => {
                    let e = self.read_until_failure(reader).await;
                    self.report(format!(
                        "reading XIDs from {} failed: {e}; XIDs are not seen while it fails",
                        self.path.display()
                    ));
                }
                Err(e) => self.report(format!(
                    "cannot open {} to watch for XIDs: {e}; XIDs are not seen while it fails",
                    self.path.display()
                )),
            }
            tokio::time::sleep(RESTART_DELAY).await;
        }
    }

    /// Logs a failure once (not every retry) and keeps it for `status`.
    fn report(&self, sentence: String) {
        if self.stats.failure().as_deref() != Some(sentence.as_str()) {
            tracing::warn!(
                "{sentence} (trying again every {}s)",
                RESTART_DELAY.as_secs()
            );
        }
        self.stats.set_failure(Some(sentence));
    }

    /// Reads from where the reader is. The records up to the last one handled (by this
    /// process, or by an earlier one of this boot as `faults.json` says) are skipped; the
    /// first one after a gap says how many were overwritten meanwhile.
    async fn read_until_failure(&mut self, mut reader: KmsgReader) -> io::Error {
        self.resume = self.last_sequence.max(self.health.kmsg_sequence());
        self.resumed = false;
        self.last_sequence = None;
        self.lost = false;
        loop {
            let polled = reader.poll();
            if polled.is_ok() && self.stats.failure().is_some() {
                tracing::info!("reading XIDs from {} again", self.path.display());
                self.stats.set_failure(None);
            }
            match polled {
                Ok(Polled::Records(records)) => {
                    for record in &records {
                        self.handle(record);
                    }
                    // A burst must not starve the runtime's other tasks.
                    tokio::task::yield_now().await;
                }
                Ok(Polled::Idle) => {
                    for line in self.log.ended(std::time::Instant::now(), None) {
                        tracing::warn!("{line}");
                    }
                    match self.log.next_end() {
                        // A window's summary is due even if no record comes.
                        Some(at) => {
                            tokio::select! {
                                () = reader.wait() => {}
                                () = tokio::time::sleep_until(at.into()) => {}
                            }
                        }
                        None => reader.wait().await,
                    }
                }
                Ok(Polled::Lost) => self.lost = true,
                Err(e) => return e,
            }
        }
    }

    fn handle(&mut self, bytes: &[u8]) {
        self.stats.records.fetch_add(1, Ordering::Relaxed);
        let (record, event) = match parse_event_record(bytes) {
            Ok(parsed) => parsed,
            Err(e) => {
                tracing::debug!("kernel log: {e}");
                return;
            }
        };
        if let Some(resume) = self.resume {
            if record.sequence <= resume {
                // Handled before (this process or an earlier one of the boot).
                self.last_sequence = Some(record.sequence);
                return;
            }
            if !self.resumed {
                let overwritten = record.sequence.saturating_sub(resume + 1);
                if overwritten > 0 {
                    self.stats.skipped.fetch_add(overwritten, Ordering::Relaxed);
                    let sentence = format!(
                        "the kernel log overwrote {overwritten} record(s) while bcd was not reading it (records {} to {}); XIDs among them are lost",
                        resume + 1,
                        record.sequence - 1
                    );
                    tracing::warn!("{sentence}");
                    if let Ok(mut o) = self.stats.overwritten.lock() {
                        *o = Some(sentence);
                    }
                }
            }
        }
        self.resumed = true;
        if self.lost {
            self.lost = false;
            let skipped = self
                .last_sequence
                .map_or(0, |last| record.sequence.saturating_sub(last + 1));
            self.stats.skipped.fetch_add(skipped, Ordering::Relaxed);
            tracing::warn!(
                "the kernel log overwrote {skipped} record(s) before bcd read them; XIDs among them are lost"
            );
        }
        self.last_sequence = Some(record.sequence);
        let at = self.wall_time(record.timestamp_us);
        let seq = record.sequence;
        match event {
            Some(Event::Xid(xid)) => self.raise(&xid, seq, at),
            Some(Event::SXid(sxid)) => self.raise_sxid(&sxid, seq, at),
            Some(Event::FellOffTheBus { address, text }) => {
                self.raise_fell_off(&address, &text, seq, at);
            }
            None => self.health.note_sequence(seq),
        }
    }

    /// The wall time (Unix seconds) of a record logged `timestamp_us` after boot, from the
    /// host's `/proc/uptime`; now when the uptime cannot be read or the record is not older.
    fn wall_time(&self, timestamp_us: u64) -> u64 {
        let now = crate::state::unix_now();
        let uptime_us = std::fs::read_to_string(&self.uptime)
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
            .map(|s| (s * 1e6) as u64);
        match uptime_us {
            Some(up) if up > timestamp_us => now.saturating_sub((up - timestamp_us) / 1_000_000),
            _ => now,
        }
    }

    /// Logs `line` about `key` through the rate limit.
    fn warn(&mut self, key: LogKey, line: String) {
        for line in self.log.record(key, line, std::time::Instant::now()) {
            tracing::warn!("{line}");
        }
    }

    /// An SXid is the switch's condition: its device is the switch's PCI address.
    fn raise_sxid(&mut self, sxid: &SXid, seq: u64, at: u64) {
        self.stats.xids.fetch_add(1, Ordering::Relaxed);
        let line = format!(
            "SXid {} ({}) on NVSwitch {}: {}",
            sxid.number,
            if sxid.fatal { "fatal" } else { "non-fatal" },
            sxid.address,
            crate::smi::escape_line(&sxid.text)
        );
        self.warn(("SXids", sxid.address.to_string()), line);
        if let Err(e) = self.health.raise_record(
            &ConditionKind::SXid(sxid.number),
            ConditionDevice::Switch(sxid.address),
            &sxid.text,
            seq,
            at,
        ) {
            tracing::debug!("{e}"); // logged by the store, at most once a minute
        }
    }

    fn raise_fell_off(&mut self, address: &PciAddress, text: &str, seq: u64, at: u64) {
        let uuid = {
            let inventory = self.inventory.borrow();
            gpu_at(&inventory, address).map(|g| g.uuid.clone())
        };
        let shown = crate::smi::escape_line(text);
        let Some(uuid) = uuid else {
            self.stats.unknown_bus.fetch_add(1, Ordering::Relaxed);
            let line = format!("a GPU the inventory does not list fell off the bus: {shown}");
            self.warn(("fallen-off-the-bus records", address.to_string()), line);
            return;
        };
        let line = format!("GPU {uuid} fell off the bus: {shown}");
        self.warn(("fallen-off-the-bus records", uuid.to_string()), line);
        if let Err(e) =
            self.health
                .raise_record(&ConditionKind::FellOffTheBus, uuid.into(), text, seq, at)
        {
            tracing::debug!("{e}"); // logged by the store, at most once a minute
        }
        let _ = self.collect.try_send(false);
    }

    fn raise(&mut self, xid: &Xid, seq: u64, at: u64) {
        let uuid = {
            let inventory = self.inventory.borrow();
            gpu_at(&inventory, &xid.address).map(|g| g.uuid.clone())
        };
        let Some(uuid) = uuid else {
            self.stats.unknown_bus.fetch_add(1, Ordering::Relaxed);
            let line = format!(
                "Xid {} on {}, a bus the inventory does not list: {}",
                xid.number,
                xid.bus_id(),
                crate::smi::escape_line(&xid.text)
            );
            self.warn(("XIDs", xid.bus_id().to_string()), line);
            return;
        };
        self.stats.xids.fetch_add(1, Ordering::Relaxed);
        let line = format!(
            "Xid {} on GPU {uuid}: {}",
            xid.number,
            crate::smi::escape_line(&xid.text)
        );
        self.warn(xid_key(&uuid), line);
        if let Err(e) = self.health.raise_record(
            &ConditionKind::Xid(xid.number),
            uuid.into(),
            &xid.text,
            seq,
            at,
        ) {
            tracing::debug!("{e}"); // logged by the store, at most once a minute
        }
        // Full: a request is already waiting, and one collection serves both. XID 154 says the
        // driver's recovery action changed: read it at once.
        let _ = self.collect.try_send(xid.number == RECOVERY_ACTION_CHANGED);
    }
}

/// The GPU of `inventory` at `address` (function and domain compared, not the spelling).
pub fn gpu_at<'a>(inventory: &'a Inventory, address: &PciAddress) -> Option<&'a Gpu> {
    inventory
        .gpu
        .gpus
        .iter()
        .find(|g| g.address().is_some_and(|a| a == *address))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::io::Read;
    use std::path::Path;

    use crate::test_log::logged;

    // 5,000 SXid records gave 10,000 log lines (the XID path: 1), and a `\x0a` in a record
    // forged a line each time: kmsg text was decoded and logged raw, without the limiter.
    // Every kmsg-derived line goes through the limiter now, escaped to one line.
    #[test]
    fn an_sxid_or_fallen_off_storm_logs_one_escaped_line_per_device() {
        let mut s = setup();
        let lines = logged(|| {
            for n in 0..5000u64 {
                let record = format!(
                    "4,{},1,-;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up\\x0aNVRM: Xid (PCI:0000:18:00): 79, forged {n}\n",
                    10 + n
                );
                s.watcher.handle(record.as_bytes());
                let record = format!(
                    "4,{},1,-;NVRM: GPU 0000:2a:00.0: GPU has fallen off the bus.\\x0aforged {n}\n",
                    10_000 + n
                );
                s.watcher.handle(record.as_bytes());
            }
        });
        let ours: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains("SXid") || l.contains("fell off") || l.contains("forged"))
            .collect();
        assert_eq!(ours.len(), 2, "{ours:#?}");
        assert!(
            ours.iter().all(|l| l.contains("\\x0a")),
            "the line feed stays escaped: {ours:#?}"
        );
        assert!(
            !lines
                .iter()
                .any(|l| l.starts_with("NVRM") || l.starts_with("forged")),
            "a forged line: {lines:#?}"
        );
        // The switch's condition and the GPU's are both kept, whatever was logged.
        s.health.flush().unwrap();
        let kinds: Vec<String> = s
            .health
            .conditions()
            .iter()
            .map(|c| c.kind.to_string())
            .collect();
        assert_eq!(kinds.len(), 2, "{kinds:?}");
    }

    use crate::health::faults::FaultStore;
    use crate::health::Condition;
    use crate::inventory::document::GpuSection;
    use std::io::Write;
    use std::time::Instant;

    const GPUS: &[(&str, &str)] = &[
        (
            "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b",
            "00000000:18:00.0",
        ),
        (
            "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a",
            "00000000:2A:00.0",
        ),
        (
            "GPU-30e15e2f-5971-0b16-04be-39a46d1071ce",
            "00000000:3A:00.0",
        ),
        (
            "GPU-70823a7e-f12c-9777-a04d-fa2e9a8cf5b8",
            "00000000:DB:00.0",
        ),
    ];

    fn inventory() -> Inventory {
        let gpus = GPUS
            .iter()
            .enumerate()
            .map(|(i, (uuid, bus))| Gpu {
                bus_id: Some(bus.parse().unwrap()),
                ..Gpu::new(i as u32, (*uuid).parse().unwrap())
            })
            .collect();
        Inventory::new(GpuSection {
            gpus,
            ..GpuSection::default()
        })
    }

    fn fixture() -> Vec<u8> {
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/kmsg/xids.txt"
        ))
        .unwrap()
    }

    struct Setup {
        _dir: tempfile::TempDir,
        kmsg: PathBuf,
        health: Health,
        watcher: XidWatcher,
        /// What the watcher asks the scheduler for: `true` for an urgent collection.
        requests: mpsc::Receiver<bool>,
        _inventory: watch::Sender<Inventory>,
    }

    /// A fake host whose `dev/kmsg` already holds an XID from before the watcher started.
    fn setup() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let kmsg = dir.path().join("root/dev/kmsg");
        std::fs::create_dir_all(kmsg.parent().unwrap()).unwrap();
        std::fs::write(
            &kmsg,
            "4,1,1,-;NVRM: Xid (PCI:0000:2a:00): 31, logged before bcd started\n",
        )
        .unwrap();
        let host = Host::new(dir.path().join("root"), "nvidia-smi");
        let health = Health::new(FaultStore::open(dir.path(), "boot").unwrap());
        let (inv_tx, inv_rx) = watch::channel(inventory());
        let (tx, requests) = mpsc::channel(64);
        let watcher = XidWatcher::new(&host, inv_rx, health.clone(), tx);
        Setup {
            _dir: dir,
            kmsg,
            health,
            watcher,
            requests,
            _inventory: inv_tx,
        }
    }

    fn append(path: &Path, bytes: &[u8]) {
        let mut f = OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(bytes).unwrap();
    }

    /// Waits (real time) until `health` holds `n` conditions, at most `limit`.
    async fn wait_for(health: &Health, n: usize, limit: Duration) -> Vec<Condition> {
        let mut rx = health.subscribe();
        let deadline = Instant::now() + limit;
        loop {
            let now = rx.borrow_and_update().clone();
            if now.len() >= n || Instant::now() > deadline {
                return now;
            }
            let _ = tokio::time::timeout(Duration::from_millis(50), rx.changed()).await;
        }
    }

    /// A host root under `dir` whose `dev/kmsg` holds `records`, and an empty data folder:
    /// (root, data folder, kmsg file).
    fn kmsg_tree(dir: &Path, records: &str) -> (PathBuf, PathBuf, PathBuf) {
        let root = dir.join("root");
        let data = dir.join("data");
        std::fs::create_dir_all(root.join("dev")).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        let kmsg = root.join("dev/kmsg");
        std::fs::write(&kmsg, records).unwrap();
        (root, data, kmsg)
    }

    /// A watcher of `root/dev/kmsg` on a store of `data` for `boot`, its writer running.
    fn node_watcher(
        root: &Path,
        data: &Path,
        boot: &str,
    ) -> (
        Health,
        XidWatcher,
        watch::Sender<Inventory>,
        mpsc::Receiver<bool>,
    ) {
        let host = Host::new(root.to_path_buf(), "nvidia-smi");
        let health = Health::new(FaultStore::open(data, boot).unwrap());
        let (inv_tx, inv_rx) = watch::channel(inventory());
        let (tx, rx) = mpsc::channel(64);
        let watcher = XidWatcher::new(&host, inv_rx, health.clone(), tx);
        (health, watcher, inv_tx, rx)
    }

    /// Runs `watcher` until `health` shows `n` conditions (at most 3 s), then stops it.
    async fn watch_until(health: &Health, watcher: XidWatcher, n: usize) -> Vec<Condition> {
        let writer = tokio::spawn(health.clone().write_pending());
        let task = tokio::spawn(watcher.run());
        let seen = wait_for(health, n, Duration::from_secs(3)).await;
        // Let a record after the last condition be handled too.
        tokio::time::sleep(Duration::from_millis(300)).await;
        task.abort();
        writer.abort();
        seen
    }

    fn counts(conditions: &[Condition]) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = conditions
            .iter()
            .map(|c| (c.kind.to_string(), c.count))
            .collect();
        out.sort();
        out
    }

    // The watcher read /dev/kmsg from its end, so an XID logged while the node was down
    // (a restart, a stop, its first moments) was never recorded (3 of 3). It reads from the
    // oldest record now, skips those faults.json says were handled, says how many the ring
    // buffer overwrote meanwhile, and takes every record at the first start of a boot.
    #[tokio::test]
    async fn xids_logged_while_the_node_was_down_are_recorded_at_its_next_start() {
        let dir = tempfile::tempdir().unwrap();
        // Logged before the node's first start of the boot.
        let (root, data, kmsg) = kmsg_tree(
            dir.path(),
            "6,1,1,-;Linux version 6.1\n4,2,2,-;NVRM: Xid (PCI:0000:18:00): 13, first\n",
        );
        let (health, watcher, _inv, _rx) = node_watcher(&root, &data, "boot-1");
        let seen = watch_until(&health, watcher, 1).await;
        assert_eq!(
            counts(&seen),
            [("Xid13".to_owned(), 1)],
            "the first start takes every record"
        );
        drop(health);

        // While it is down: an XID and another record.
        append(
            &kmsg,
            b"4,3,3,-;NVRM: Xid (PCI:0000:2a:00): 48, while down\n6,4,4,-;usb 1-1: new device\n",
        );
        let (health, watcher, _inv, _rx) = node_watcher(&root, &data, "boot-1");
        let seen = watch_until(&health, watcher, 2).await;
        assert_eq!(
            counts(&seen),
            [("Xid13".to_owned(), 1), ("Xid48".to_owned(), 1)],
            "the XID logged while down is recorded, the one before is not counted again"
        );
        // Killed between reading a record and writing it: the first XID of a burst is written
        // at once, the next waits for the burst's write, and the process dies before it (no
        // Drop, no flush).
        let (h, mut w, _inv, _rx) = node_watcher(&root, &data, "boot-1");
        append(
            &kmsg,
            b"4,5,5,-;NVRM: Xid (PCI:0000:3a:00): 13, written\n4,6,6,-;NVRM: Xid (PCI:0000:2a:00): 31, cut off\n",
        );
        w.handle(b"4,5,5,-;NVRM: Xid (PCI:0000:3a:00): 13, written");
        w.handle(b"4,6,6,-;NVRM: Xid (PCI:0000:2a:00): 31, cut off");
        assert_eq!(h.kmsg_sequence(), Some(6));
        std::mem::forget(w);
        std::mem::forget(h);
        drop(health);
        let (on_disk, _) = super::super::faults::read_with_history(&data, "boot-1").unwrap();
        assert_eq!(
            on_disk.len(),
            3,
            "the cut-off XID never reached the file: {on_disk:?}"
        );
        let (health, watcher, _inv, _rx) = node_watcher(&root, &data, "boot-1");
        let seen = watch_until(&health, watcher, 4).await;
        assert_eq!(
            counts(&seen),
            [
                ("Xid13".to_owned(), 1),
                ("Xid13".to_owned(), 1),
                ("Xid31".to_owned(), 1),
                ("Xid48".to_owned(), 1)
            ],
            "the record whose write was cut off is read again, the written one not: {seen:?}"
        );
        drop(health);

        // Records overwritten while down: the ring buffer starts at 9 now.
        std::fs::write(
            &kmsg,
            "4,9,9,-;NVRM: Xid (PCI:0000:db:00): 63, after a gap\n",
        )
        .unwrap();
        let (health, watcher, _inv, _rx) = node_watcher(&root, &data, "boot-1");
        let stats = watcher.stats();
        let seen = watch_until(&health, watcher, 5).await;
        assert_eq!(seen.len(), 5, "{seen:?}");
        let said = stats.overwritten().expect("status names the gap");
        assert!(
            said.starts_with("the kernel log overwrote 2 record(s) while bcd was not reading it (records 7 to 8)"),
            "{said}"
        );
        drop(health);

        // A new boot takes every record, the stored number being another boot's.
        let (health, watcher, _inv, _rx) = node_watcher(&root, &data, "boot-2");
        let seen = watch_until(&health, watcher, 1).await;
        assert_eq!(counts(&seen), [("Xid63".to_owned(), 1)]);
    }

    // Read before the first collection, the backlog's XIDs were all unknown buses, marked
    // handled and never recorded. The watcher waits for the first inventory now.
    #[tokio::test]
    async fn the_backlog_is_read_once_the_first_inventory_names_its_gpus() {
        let dir = tempfile::tempdir().unwrap();
        let (root, data, _) = kmsg_tree(
            dir.path(),
            "4,7,7,-;NVRM: Xid (PCI:0000:18:00): 79, early\n",
        );
        let host = Host::new(root, "nvidia-smi");
        let health = Health::new(FaultStore::open(&data, "boot-1").unwrap());
        let (inv_tx, inv_rx) = watch::channel(Inventory::new(GpuSection::default()));
        let (tx, _rx) = mpsc::channel(64);
        let watcher = XidWatcher::new(&host, inv_rx, health.clone(), tx);
        let task = tokio::spawn(watcher.run());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            health.conditions().is_empty(),
            "nothing before the inventory"
        );
        assert_eq!(
            health.kmsg_sequence(),
            None,
            "no record taken as handled yet"
        );
        inv_tx.send(inventory()).unwrap();
        let seen = wait_for(&health, 1, Duration::from_secs(3)).await;
        task.abort();
        assert_eq!(counts(&seen), [("Xid79".to_owned(), 1)]);
    }

    // An upgrade within a boot: the older bcd's faults.json (no `kmsg_replay`) already holds
    // the backlog's XIDs it read; they are not counted again.
    #[tokio::test]
    async fn an_older_bcds_file_of_this_boot_keeps_the_backlog_from_counting_twice() {
        let dir = tempfile::tempdir().unwrap();
        let (root, data, kmsg) = kmsg_tree(
            dir.path(),
            "4,2,2,-;NVRM: Xid (PCI:0000:18:00): 13, seen by the older bcd\n",
        );
        std::fs::write(
            data.join(super::super::faults::FAULTS_FILE),
            format!(
                r#"{{"boot_id": "boot-1", "conditions": [{{"kind": "Xid13", "status": true, "device_id": "{}", "message": "m", "first_seen": 1, "last_seen": 1, "count": 1}}]}}"#,
                GPUS[0].0
            ),
        )
        .unwrap();
        let (health, watcher, _inv, _rx) = node_watcher(&root, &data, "boot-1");
        let task = tokio::spawn(watcher.run());
        tokio::time::sleep(Duration::from_millis(300)).await;
        append(
            &kmsg,
            b"4,3,3,-;NVRM: Xid (PCI:0000:2a:00): 48, after the upgrade\n",
        );
        let seen = wait_for(&health, 2, Duration::from_secs(3)).await;
        task.abort();
        assert_eq!(
            counts(&seen),
            [("Xid13".to_owned(), 1), ("Xid48".to_owned(), 1)]
        );
    }

    #[tokio::test]
    async fn xids_appended_after_start_raise_conditions_within_a_second() {
        let mut s = setup();
        let stats = s.watcher.stats();
        // The node's writer: a burst's conditions are published once written.
        let _writer = tokio::spawn(s.health.clone().write_pending());
        let task = tokio::spawn(s.watcher.run());
        tokio::time::sleep(Duration::from_millis(150)).await;
        let started = Instant::now();
        append(&s.kmsg, &fixture());
        // Five XIDs and the companion "fallen off the bus" line of the Xid 79.
        // With the XID logged before the node's first start of the boot (read now too).
        let conds = wait_for(&s.health, 7, Duration::from_secs(3)).await;
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        let mut seen: Vec<(String, String)> = conds
            .iter()
            .map(|c| (c.kind.to_string(), c.device_id.to_string()[..12].to_owned()))
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            [
                ("FellOffTheBus", "GPU-ff1dacfa"),
                ("Xid13", "GPU-30e15e2f"),
                ("Xid13", "GPU-70823a7e"),
                ("Xid31", "GPU-a4303385"),
                ("Xid48", "GPU-a4303385"),
                ("Xid63", "GPU-70823a7e"),
                ("Xid79", "GPU-ff1dacfa"),
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
        let x79 = conds
            .iter()
            .find(|c| c.kind == ConditionKind::Xid(79))
            .unwrap();
        assert!(x79.status);
        assert!(x79
            .message
            .starts_with("NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>'"));
        assert!(x79.first_seen > 0 && x79.first_seen == x79.last_seen);
        // The XID logged before start (Xid31 on 2A) was read too, the node's first start of
        // the boot taking every record; 99:00 was only logged.
        assert_eq!(stats.unknown_bus.load(Ordering::Relaxed), 1);
        assert_eq!(stats.xids.load(Ordering::Relaxed), 6);
        assert_eq!(stats.records.load(Ordering::Relaxed), 13);
        // The same XID again updates, never duplicates.
        append(
            &s.kmsg,
            b"4,3000,9,-;NVRM: Xid (PCI:0000:18:00.0): 79, pid=1, name=x, again\n",
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
        let conds = s.health.conditions();
        assert_eq!(conds.len(), 7);
        assert!(conds.iter().any(|c| c.message.ends_with("again")));
        // Requests were sent; the scheduler turns them into one collection.
        assert_eq!(s.requests.try_recv(), Ok(false));
        task.abort();
    }

    /// A source that replays reads: each item is one read's result.
    struct Script(std::collections::VecDeque<io::Result<Vec<u8>>>);

    impl Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.0.pop_front() {
                Some(Ok(bytes)) => {
                    buf[..bytes.len()].copy_from_slice(&bytes);
                    Ok(bytes.len())
                }
                Some(Err(e)) => Err(e),
                None => Err(io::ErrorKind::WouldBlock.into()),
            }
        }
    }

    #[tokio::test]
    async fn an_epipe_counts_the_skipped_records_and_reading_goes_on() {
        let s = setup();
        let script = || {
            Script(
                [
                    Ok(b"6,10,1,-;hello\n".to_vec()),
                    Err(io::Error::from_raw_os_error(libc::EPIPE)),
                    Ok(b"4,15,2,-;NVRM: Xid (PCI:0000:18:00): 79, after the gap\n".to_vec()),
                ]
                .into_iter()
                .collect(),
            )
        };
        let watcher = s
            .watcher
            .with_opener(move || Ok(KmsgReader::from_source(Box::new(script()), true)));
        let stats = watcher.stats();
        let task = tokio::spawn(watcher.run());
        let conds = wait_for(&s.health, 1, Duration::from_secs(2)).await;
        task.abort();
        assert_eq!(conds.len(), 1);
        assert_eq!(stats.skipped.load(Ordering::Relaxed), 4);
        assert_eq!(stats.restarts.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_failed_reader_is_restarted() {
        let s = setup();
        let opened = Arc::new(AtomicU64::new(0));
        let kmsg = s.kmsg.clone();
        let counter = Arc::clone(&opened);
        let watcher = s.watcher.with_opener(move || {
            if counter.fetch_add(1, Ordering::Relaxed) == 0 {
                let failing = Script([Err(io::Error::from_raw_os_error(libc::EIO))].into());
                Ok(KmsgReader::from_source(Box::new(failing), true))
            } else {
                KmsgReader::open(&kmsg)
            }
        });
        let stats = watcher.stats();
        let task = tokio::spawn(watcher.run());
        // Past the restart delay, the second reader is at the file's end.
        tokio::time::sleep(RESTART_DELAY + Duration::from_millis(300)).await;
        append(
            &s.kmsg,
            b"4,20,3,-;NVRM: Xid (PCI:0000:db:00): 79, after the restart\n",
        );
        let conds = wait_for(&s.health, 1, Duration::from_secs(2)).await;
        task.abort();
        assert_eq!(conds.len(), 1, "{conds:?}");
        assert_eq!(stats.restarts.load(Ordering::Relaxed), 1);
        assert_eq!(opened.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_regular_file_splits_into_records_with_their_continuations() {
        let text = b"6,1,1,-;a\n SUBSYSTEM=pci\n6,2,1,-;b\n6,3,1,-;c\n DEVICE=x";
        let mut reader =
            KmsgReader::from_source(Box::new(Script([Ok(text.to_vec())].into())), false);
        // The last record may still get continuation lines: it waits for its newline.
        let Polled::Records(r) = reader.poll().unwrap() else {
            panic!()
        };
        assert_eq!(
            r,
            [b"6,1,1,-;a\n SUBSYSTEM=pci".to_vec(), b"6,2,1,-;b".to_vec()]
        );
        assert_eq!(reader.poll().unwrap(), Polled::Idle);
    }

    // What broke: SXid lines and "fallen off the bus" lines without an XID raised nothing.
    #[tokio::test]
    async fn sxids_and_fallen_off_the_bus_lines_raise_conditions() {
        let mut s = setup();
        let _writer = tokio::spawn(s.health.clone().write_pending());
        let task = tokio::spawn(s.watcher.run());
        tokio::time::sleep(Duration::from_millis(150)).await;
        append(
            &s.kmsg,
            b"4,50,1,-;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 63 LTSSM Fault Up\n\
              4,51,1,-;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x1}\n\
              3,52,1,-;NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.\n\
              4,53,1,-;NVRM: Xid (PCI:0000:2a:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (Reset)\n",
        );
        let conds = wait_for(&s.health, 4, Duration::from_secs(3)).await;
        task.abort();
        let mut kinds: Vec<(String, String)> = conds
            .iter()
            // The setup's XID from before the start is read too; not this test's.
            .filter(|c| c.kind != ConditionKind::Xid(31))
            .map(|c| (c.kind.to_string(), c.device_id.to_string()))
            .collect();
        kinds.sort();
        assert_eq!(
            kinds,
            [
                ("FellOffTheBus".to_owned(), GPUS[0].0.to_owned()),
                ("SXid20034".to_owned(), "00000000:05:00.0".to_owned()),
                ("Xid154".to_owned(), GPUS[1].0.to_owned()),
            ]
        );
        let policy = crate::health::xid::XidPolicy::default();
        let sx = conds
            .iter()
            .find(|c| c.kind == ConditionKind::SXid(20034))
            .unwrap();
        let (class, action) = crate::health::describe(sx, &policy);
        assert_eq!(class, "interconnect");
        assert!(action.contains("reboot the node"), "{action}");
        assert_eq!(sx.count, 1, "the Data line is not another SXid");
        // What broke: XID 154 (the driver's recovery action changed) waited for the debounced
        // collection like any XID, so the new action was read seconds late: it asks urgently.
        let mut urgent = false;
        while let Ok(u) = s.requests.try_recv() {
            urgent |= u;
        }
        assert!(urgent, "XID 154 asked for an urgent collection");
    }
}
