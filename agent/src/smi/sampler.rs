//! Sampling without a process per sample: `nvidia-smi`'s own loop mode (`-lms <ms>`) run as
//! two long-lived children, one for the GPUs' readings and one for the compute processes,
//! whose lines are assembled into one sample per GPU per interval and published on a
//! [`tokio::sync::watch`] channel.
//!
//! - **Batches.** The GPU child prints one line per GPU each interval. A batch is complete when
//!   it holds as many GPUs as the last batch that a repeated UUID closed, or when a UUID repeats
//!   (the next interval has begun), so a change in the GPU count costs one interval's delay.
//! - **Compute processes.** In loop mode `--query-compute-apps` prints nothing at all for an
//!   interval without processes, so its intervals cannot be delimited by content. The rule is
//!   by time: lines closer together than [`BURST_GAP`] are one interval's burst, a new burst
//!   replaces the counts, and counts older than [`APPS_STALE_INTERVALS`] intervals read as zero.
//!   The counts attached to a batch can therefore trail its readings by up to one interval.
//! - **Restarts.** A child that exits, or a GPU child silent for [`STALL_INTERVALS`] intervals,
//!   is killed with its process group and both children are started again after a back-off
//!   that doubles from [`BACKOFF_START`] to [`BACKOFF_MAX`] and starts over once a batch came.
//! - **MIG devices.** A GPU in MIG mode is sampled from its CSV row like the others; its MIG
//!   devices' memory is in `-q -x` alone (`-d`, which restricts `-q` to sections, is documented
//!   as not working with `-x`), so a one-shot `-q -x` reads it every
//!   [`MIG_MEMORY_INTERVAL`] (in a task of its own: sampling never waits for it), and each
//!   batch carries the latest read. That is one `nvidia-smi` start per 120 samples at 5 s
//!   (the inventory's own cadence) instead of a full `-q -x` every sample;
//!   [`Sampled::mig_memory`] says how it goes.
//! - **Clock reasons.** A driver that refuses one of the clock event reasons the sample asks
//!   for is asked again at once without them ([`SampleQuery::WithoutClockReasons`]), still in
//!   loop mode; the throttling verdict then comes from `-q -x` alone.
//! - **Fall back.** Where loop mode is refused (the very first children exit non-zero before a
//!   single GPU line) or cannot stand in for the snapshot (a refused field, a line with the
//!   wrong columns: the seed's rules), the sampler says so through `tracing` and runs the
//!   one-shot [`samples`] every interval for the rest of its life.
//! - **No orphans.** Each child runs in its own process group, killed with `SIGKILL` when its
//!   session ends and when the [`Sampler`] is dropped. Should the agent itself be killed with
//!   `SIGKILL`, the child's next write hits a closed pipe and `nvidia-smi` ends with `SIGPIPE`.

use crate::smi::runner::spawn_in_group;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::runner::{RunError, Runner};
use super::samples::{
    attach_compute_counts, attach_mig_memory, count_compute_apps, needs_mig_memory, parse_samples,
    refused_field, FallBackReason, GpuSample, SampleParse, SampleQuery,
};
use super::snapshot::{query, samples, SampleSource};
use super::xml::{parse_query_xml, QueryXml};

/// A GPU child silent for this many intervals is stalled: killed and started again.
pub(crate) const STALL_INTERVALS: u32 = 3;
/// The first wait before starting crashed or stalled children again.
pub(crate) const BACKOFF_START: Duration = Duration::from_secs(1);
/// The longest wait between restarts.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// Compute-process lines closer together than this belong to one interval's burst.
pub(crate) const BURST_GAP: Duration = Duration::from_millis(50);
/// Compute-process counts older than this many intervals mean "no processes".
pub(crate) const APPS_STALE_INTERVALS: f64 = 1.5;
/// How often the MIG devices' memory is read (`-q -x`) while a GPU is in MIG mode: the
/// inventory's own schedule, so a MIG host costs the driver no more full `-q -x` walks than
/// any other host (a MIG device's used memory is up to this old).
pub(crate) const MIG_MEMORY_INTERVAL: Duration = crate::inventory::scheduler::INVENTORY_INTERVAL;
/// Longest line kept from a child; a sample line is about 150 bytes.
const MAX_LINE: u64 = 4096;
/// Most bytes of a refusing child's standard error kept for the log.
const MAX_STDERR: u64 = 2048;
/// How long a child that closed its output gets to exit and say why.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// How the latest samples were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// From the long-lived `-lms` children.
    Loop,
    /// From one-shot queries, and why loop mode is not used.
    OneShot(String),
}

/// One published set of samples.
#[derive(Debug, Clone)]
pub struct Sampled {
    /// One sample per GPU, in `nvidia-smi`'s order.
    pub samples: Vec<GpuSample>,
    /// How they were read.
    pub mode: Mode,
    /// When the batch was complete.
    pub at: SystemTime,
    /// With a GPU in MIG mode: where its MIG devices' memory comes from, and how old it is
    /// or why it is unknown.
    pub mig_memory: Option<String>,
}

/// Counters for tests, metrics and the README's figures.
#[derive(Debug, Default)]
pub struct SamplerStats {
    /// Loop-mode children started (two per session).
    pub children_started: AtomicU64,
    /// Sessions started again after a child died or stalled.
    pub restarts: AtomicU64,
    /// Batches published from loop mode.
    pub batches: AtomicU64,
    /// One-shot samples taken.
    pub one_shots: AtomicU64,
    /// `-q -x` reads of the MIG devices' memory.
    pub mig_reads: AtomicU64,
}

/// Timing of a sampler; production uses [`Timing::new`], tests shorten the back-off.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// The sample interval, passed to `-lms`.
    pub interval: Duration,
    /// The first back-off.
    pub backoff_start: Duration,
    /// The longest back-off.
    pub backoff_max: Duration,
    /// How often the MIG devices' memory is read.
    pub mig_memory_every: Duration,
}

impl Timing {
    /// The standard back-off around `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            backoff_start: BACKOFF_START,
            backoff_max: BACKOFF_MAX,
            mig_memory_every: MIG_MEMORY_INTERVAL,
        }
    }
}

/// A running sampler. Dropping it stops the task and kills its children's process groups.
#[derive(Debug)]
pub struct Sampler {
    rx: watch::Receiver<Option<Sampled>>,
    stats: Arc<SamplerStats>,
    task: JoinHandle<()>,
    mig: SharedMig,
}

impl Sampler {
    /// Starts sampling with `program` (a path, or a bare name looked up on `PATH`) every
    /// `timing.interval`. Must be called inside a Tokio runtime.
    pub fn spawn(program: impl Into<PathBuf>, timing: Timing) -> Self {
        let (tx, rx) = watch::channel(None);
        let stats = Arc::new(SamplerStats::default());
        let mig = SharedMig::default();
        let task = tokio::spawn(run(program.into(), timing, tx, stats.clone(), mig.clone()));
        Self {
            rx,
            stats,
            task,
            mig,
        }
    }

    /// A receiver that sees each new set of samples (`None` before the first).
    pub fn subscribe(&self) -> watch::Receiver<Option<Sampled>> {
        self.rx.clone()
    }

    /// The counters.
    pub fn stats(&self) -> &SamplerStats {
        &self.stats
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        // Dropping the task's future drops its children's guards, which kill their groups.
        self.task.abort();
        if let Some(read) = lock(&self.mig).task.take() {
            read.abort();
        }
    }
}

/// The latest read of the MIG devices' memory, shared by the sampling loop and its reads.
#[derive(Debug, Default)]
struct MigMemory {
    xml: Option<QueryXml>,
    read_at: Option<Instant>,
    error: Option<String>,
    task: Option<JoinHandle<()>>,
}

type SharedMig = Arc<std::sync::Mutex<MigMemory>>;

fn lock(mig: &SharedMig) -> std::sync::MutexGuard<'_, MigMemory> {
    mig.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Gives a batch with GPUs in MIG mode their MIG devices from the latest read, starts a read
/// when one is due (none in flight, the last older than `every`), and says how it goes;
/// `None` for a batch without a GPU in MIG mode.
fn attach_mig(
    batch: &mut [GpuSample],
    program: &Path,
    every: Duration,
    mig: &SharedMig,
    stats: &Arc<SamplerStats>,
) -> Option<String> {
    if !needs_mig_memory(batch) {
        return None;
    }
    let mut m = lock(mig);
    let due = m.read_at.is_none_or(|t| t.elapsed() >= every);
    let idle = m.task.as_ref().is_none_or(JoinHandle::is_finished);
    if due && idle {
        let (runner, shared, stats) = (Runner::new(program), mig.clone(), stats.clone());
        m.task = Some(tokio::spawn(async move {
            stats.mig_reads.fetch_add(1, Ordering::Relaxed);
            let read = match runner.run(query::QUERY_XML).await {
                Ok(answer) => parse_query_xml(&answer.stdout).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let mut m = lock(&shared);
            m.read_at = Some(Instant::now());
            match read {
                Ok(xml) => {
                    m.xml = Some(xml);
                    m.error = None;
                }
                Err(e) => {
                    tracing::warn!("sampling: MIG devices' memory: {e}");
                    m.error = Some(e);
                }
            }
        }));
    }
    if let Some(xml) = &m.xml {
        attach_mig_memory(batch, xml);
    }
    Some(match (&m.error, m.read_at) {
        (Some(e), _) => format!("MIG devices' memory unknown: {e}"),
        (None, Some(at)) => format!(
            "MIG devices' memory from nvidia-smi -q -x every {}s, read {}s ago",
            every.as_secs(),
            at.elapsed().as_secs()
        ),
        (None, None) => "MIG devices' memory: the first nvidia-smi -q -x is running".to_owned(),
    })
}

/// A child in its own process group; the whole group is killed when this is dropped.
struct GroupChild {
    child: tokio::process::Child,
    group: Option<Pid>,
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        if let Some(group) = self.group {
            let _ = killpg(group, Signal::SIGKILL);
        }
        let _ = self.child.start_kill();
    }
}

/// A started loop child: its lines arrive on a channel, so waiting for them is cancel-safe.
struct LoopChild {
    guard: GroupChild,
    lines: mpsc::Receiver<String>,
}

impl LoopChild {
    fn spawn(program: &Path, args: &[&str], stats: &SamplerStats) -> Result<Self, RunError> {
        let (mut child, group) = spawn_in_group(program, args)?;
        stats.children_started.fetch_add(1, Ordering::Relaxed);
        let (tx, lines) = mpsc::channel(256);
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(forward_lines(stdout, tx));
        }
        Ok(Self {
            guard: GroupChild { child, group },
            lines,
        })
    }

    /// After its output closed: how it exited and what it said on standard error.
    async fn exit(&mut self) -> (Option<std::process::ExitStatus>, String) {
        let stderr = self.guard.child.stderr.take();
        let said = async {
            let mut text = Vec::new();
            if let Some(pipe) = stderr {
                let _ = pipe.take(MAX_STDERR).read_to_end(&mut text).await;
            }
            crate::smi::escape_control(String::from_utf8_lossy(&text).trim()).into_owned()
        };
        let waited = tokio::time::timeout(EXIT_GRACE, async {
            tokio::join!(self.guard.child.wait(), said)
        })
        .await;
        match waited {
            Ok((status, said)) => (status.ok(), said),
            Err(_) => (None, String::new()),
        }
    }
}

/// Sends each line of `pipe` (bounded to [`MAX_LINE`]) until it closes or the receiver goes.
async fn forward_lines<R: AsyncRead + Unpin>(pipe: R, tx: mpsc::Sender<String>) {
    let mut reader = BufReader::new(pipe);
    let mut line = String::new();
    loop {
        line.clear();
        match (&mut reader).take(MAX_LINE).read_line(&mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = line.trim_end_matches(['\n', '\r']).to_owned();
                if tx.send(text).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Compute-process counts from the apps child's bursts.
#[derive(Debug, Default)]
struct AppsCounts {
    counts: BTreeMap<String, u32>,
    last_line: Option<Instant>,
}

impl AppsCounts {
    fn add(&mut self, line: &str, now: Instant) {
        let new_burst = self
            .last_line
            .is_none_or(|last| now.duration_since(last) > BURST_GAP);
        if new_burst {
            self.counts.clear();
        }
        self.last_line = Some(now);
        for (uuid, n) in count_compute_apps(line.as_bytes()) {
            *self.counts.entry(uuid).or_insert(0) += n;
        }
    }

    fn current(&self, now: Instant, interval: Duration) -> BTreeMap<String, u32> {
        let stale = interval.mul_f64(APPS_STALE_INTERVALS);
        match self.last_line {
            Some(last) if now.duration_since(last) <= stale => self.counts.clone(),
            _ => BTreeMap::new(),
        }
    }
}

/// How a loop-mode session ended.
#[derive(Debug)]
enum SessionEnd {
    /// Loop mode is refused or cannot stand in for the snapshot: fall back for good.
    FallBack(String),
    /// A child died or stalled: start again after the back-off.
    Restart(String),
    /// The driver refused a clock reason (named): start again at once with this query.
    Ask(SampleQuery, String),
}

/// Assembles GPU lines into batches.
#[derive(Debug, Default)]
struct Batcher {
    batch: Vec<GpuSample>,
    expected: Option<usize>,
}

impl Batcher {
    /// Adds one sample; returns a batch when one is complete.
    fn push(&mut self, sample: GpuSample) -> Option<Vec<GpuSample>> {
        let mut done = None;
        if self.batch.iter().any(|s| s.uuid == sample.uuid) {
            self.expected = Some(self.batch.len());
            done = Some(std::mem::take(&mut self.batch));
        }
        self.batch.push(sample);
        if done.is_none() && self.expected == Some(self.batch.len()) {
            done = Some(std::mem::take(&mut self.batch));
        }
        done
    }
}

/// The arguments of the two loop queries.
fn loop_args(interval: Duration, query: SampleQuery) -> (Vec<String>, Vec<String>) {
    let ms = interval.as_millis().max(1).to_string();
    let gpu = vec![
        query.query_gpu(),
        "--format=csv,noheader,nounits".to_owned(),
        "-lms".to_owned(),
        ms.clone(),
    ];
    let apps = vec![
        "--query-compute-apps=gpu_uuid".to_owned(),
        "--format=csv,noheader".to_owned(),
        "-lms".to_owned(),
        ms,
    ];
    (gpu, apps)
}

/// Why a child that closed its output ended, in words, and whether it was a refusal.
async fn ended(child: &mut LoopChild, what: &str) -> (bool, String) {
    let (status, said) = child.exit().await;
    let failed = status.is_some_and(|s| !s.success());
    let how = status.map_or_else(|| "did not exit".to_owned(), |s| s.to_string());
    let said = if said.is_empty() {
        String::new()
    } else {
        format!(": {said}")
    };
    (
        failed,
        format!("nvidia-smi {what} -lms ended ({how}){said}"),
    )
}

/// Runs both loop children until one ends or the GPU child stalls.
async fn session(
    program: &Path,
    timing: Timing,
    (first, query): (bool, SampleQuery),
    tx: &watch::Sender<Option<Sampled>>,
    stats: &Arc<SamplerStats>,
    mig: &SharedMig,
) -> (SessionEnd, bool) {
    let (gpu_args, apps_args) = loop_args(timing.interval, query);
    let gpu_args: Vec<&str> = gpu_args.iter().map(String::as_str).collect();
    let apps_args: Vec<&str> = apps_args.iter().map(String::as_str).collect();
    let spawned = LoopChild::spawn(program, &gpu_args, stats)
        .and_then(|gpu| LoopChild::spawn(program, &apps_args, stats).map(|apps| (gpu, apps)));
    let (mut gpu, mut apps) = match spawned {
        Ok(children) => children,
        Err(e @ RunError::NoDriver) => return (SessionEnd::FallBack(e.to_string()), false),
        Err(e) => return (SessionEnd::Restart(e.to_string()), false),
    };
    let stall = timing.interval * STALL_INTERVALS;
    let mut batcher = Batcher::default();
    let mut counts = AppsCounts::default();
    let mut got_line = false;
    let mut published = false;
    loop {
        tokio::select! {
            line = tokio::time::timeout(stall, gpu.lines.recv()) => match line {
                Err(_) => {
                    let why = format!(
                        "nvidia-smi --query-gpu -lms printed nothing for {}s",
                        stall.as_secs_f64()
                    );
                    return (SessionEnd::Restart(why), published);
                }
                Ok(None) => {
                    let (failed, why) = ended(&mut gpu, "--query-gpu").await;
                    let refused = first && !got_line && failed;
                    if let Some(field) = refused_field(&why) {
                        if let Some(next) = query.without(&field) {
                            return (SessionEnd::Ask(next, field), published);
                        }
                        return (SessionEnd::FallBack(format!("the driver refuses the field {field}")), published);
                    }
                    let end = if refused { SessionEnd::FallBack(why) } else { SessionEnd::Restart(why) };
                    return (end, published);
                }
                Ok(Some(line)) => {
                    if line.trim().is_empty() {
                        continue;
                    }
                    got_line = true;
                    match parse_samples(line.as_bytes()) {
                        Ok(SampleParse::Samples(parsed)) => {
                            for sample in parsed {
                                if let Some(mut batch) = batcher.push(sample) {
                                    attach_compute_counts(&mut batch, &counts.current(Instant::now(), timing.interval));
                                    let mig_memory = attach_mig(&mut batch, program, timing.mig_memory_every, mig, stats);
                                    tx.send_replace(Some(Sampled { samples: batch, mode: Mode::Loop, at: SystemTime::now(), mig_memory }));
                                    stats.batches.fetch_add(1, Ordering::Relaxed);
                                    published = true;
                                }
                            }
                        }
                        Ok(SampleParse::FallBack(FallBackReason::FieldRefused { field })) if query.without(&field).is_some() => {
                            let next = query.without(&field).unwrap_or(query);
                            return (SessionEnd::Ask(next, field), published);
                        }
                        Ok(SampleParse::FallBack(reason)) => {
                            return (SessionEnd::FallBack(reason.to_string()), published);
                        }
                        Err(e) => tracing::warn!("sample (loop mode): {e}"),
                    }
                }
            },
            line = apps.lines.recv() => match line {
                Some(line) => counts.add(&line, Instant::now()),
                None => {
                    let (failed, why) = ended(&mut apps, "--query-compute-apps").await;
                    let end = if first && !got_line && failed { SessionEnd::FallBack(why) } else { SessionEnd::Restart(why) };
                    return (end, published);
                }
            },
        }
    }
}

/// One-shot samples every interval, for good.
async fn one_shot(
    program: PathBuf,
    timing: Timing,
    why: String,
    tx: watch::Sender<Option<Sampled>>,
    stats: Arc<SamplerStats>,
    mig: SharedMig,
) {
    let interval = timing.interval;
    let runner = Runner::new(&program);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        stats.one_shots.fetch_add(1, Ordering::Relaxed);
        match samples(&runner).await {
            Ok((mut s, source)) => {
                let mig_memory = match source {
                    SampleSource::Csv => {
                        attach_mig(&mut s, &program, timing.mig_memory_every, &mig, &stats)
                    }
                    SampleSource::Snapshot(_) => None,
                };
                let mode = match source {
                    SampleSource::Csv => Mode::OneShot(why.clone()),
                    SampleSource::Snapshot(reason) => Mode::OneShot(format!("{why}; {reason}")),
                };
                tx.send_replace(Some(Sampled {
                    samples: s,
                    mode,
                    at: SystemTime::now(),
                    mig_memory,
                }));
            }
            Err(e) if e.is_no_driver() => {}
            Err(e) => tracing::warn!("sample: {e}"),
        }
    }
}

async fn run(
    program: PathBuf,
    timing: Timing,
    tx: watch::Sender<Option<Sampled>>,
    stats: Arc<SamplerStats>,
    mig: SharedMig,
) {
    let mut backoff = timing.backoff_start;
    let mut first = true;
    let mut query = SampleQuery::Full;
    loop {
        let (end, published) = session(&program, timing, (first, query), &tx, &stats, &mig).await;
        first = false;
        match end {
            SessionEnd::Ask(next, field) => {
                tracing::info!(
                    "sampling: the driver refuses the field {field}; sampling without the clock event reasons"
                );
                query = next;
                first = true;
            }
            SessionEnd::FallBack(why) => {
                tracing::info!(
                    "sampling: loop mode is not used ({why}); one-shot samples every {}s instead",
                    timing.interval.as_secs_f64()
                );
                return one_shot(program, timing, why, tx, stats, mig).await;
            }
            SessionEnd::Restart(why) => {
                if published {
                    backoff = timing.backoff_start;
                }
                tracing::warn!(
                    "sampling: {why}; starting it again in {}s",
                    backoff.as_secs_f64()
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(timing.backoff_max);
                stats.restarts.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(uuid: &str) -> GpuSample {
        let line = format!("{uuid}, 100, 1, 0, 99, 0, 0, 30, 10.0, 100.0, 200, 400, P8, [N/A], Not Active, Not Active, Not Active, Not Active");
        match parse_samples(line.as_bytes()).unwrap() {
            SampleParse::Samples(mut s) => s.remove(0),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_repeated_uuid_closes_a_batch_and_sets_the_count() {
        let mut b = Batcher::default();
        assert!(b
            .push(sample("GPU-00000061-0000-0000-0000-000000000000"))
            .is_none());
        assert!(b
            .push(sample("GPU-00000062-0000-0000-0000-000000000000"))
            .is_none());
        let first = b
            .push(sample("GPU-00000061-0000-0000-0000-000000000000"))
            .unwrap();
        assert_eq!(first.len(), 2);
        // The count is known now: the second batch is out as soon as it is whole.
        let second = b
            .push(sample("GPU-00000062-0000-0000-0000-000000000000"))
            .unwrap();
        assert_eq!(
            second.iter().map(|s| s.uuid.as_str()).collect::<Vec<_>>(),
            [
                "GPU-00000061-0000-0000-0000-000000000000",
                "GPU-00000062-0000-0000-0000-000000000000"
            ]
        );
    }

    #[test]
    fn compute_counts_are_per_burst_and_go_stale() {
        let mut c = AppsCounts::default();
        let t0 = Instant::now();
        let interval = Duration::from_secs(5);
        c.add("GPU-00000061-0000-0000-0000-000000000000", t0);
        c.add(
            "GPU-00000061-0000-0000-0000-000000000000",
            t0 + Duration::from_millis(1),
        );
        assert_eq!(
            c.current(t0, interval)
                .get("GPU-00000061-0000-0000-0000-000000000000"),
            Some(&2)
        );
        // The next interval's burst replaces the counts rather than adding to them.
        let t1 = t0 + interval;
        c.add("GPU-00000062-0000-0000-0000-000000000000", t1);
        let now = c.current(t1, interval);
        assert_eq!(now.get("GPU-00000061-0000-0000-0000-000000000000"), None);
        assert_eq!(
            now.get("GPU-00000062-0000-0000-0000-000000000000"),
            Some(&1)
        );
        // No burst for more than 1.5 intervals: no processes.
        assert!(c.current(t1 + interval * 2, interval).is_empty());
    }
}
