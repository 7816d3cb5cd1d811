//! The full snapshot: `-q -x` (required), then the optional queries, concurrently, so a
//! snapshot takes about as long as its slowest query; and the light samples, which fall back
//! to the snapshot where the CSV cannot stand in for it.

use std::time::{Duration, Instant};

use super::compute_cap::{parse_compute_cap, ComputeCap};
use super::list::{parse_list, ListedGpu};
use super::mig::{parse_profiles, MigProfile};
use super::nvlink::{parse_remote, parse_status, NvLinkGpu, NvLinkRemotes};
use super::probe::{parse_probe, Probe};
use super::runner::{RunError, Runner, SNAPSHOT_TIMEOUT};
use super::samples::{
    attach_compute_counts, count_compute_apps, parse_samples, refused_field, FallBackReason,
    GpuSample, SampleParse, SampleQuery,
};
use super::topo::{parse_topo, TopoRow};
use super::xml::{parse_query_xml, QueryXml, XmlError};

/// The arguments of each query, in one place.
pub(crate) mod query {
    /// The required query.
    pub(crate) const QUERY_XML: &[&str] = &["-q", "-x"];
    /// GPUs and MIG devices with their UUIDs.
    pub(crate) const LIST: &[&str] = &["-L"];
    /// CUDA compute capability.
    pub(crate) const COMPUTE_CAP: &[&str] =
        &["--query-gpu=uuid,compute_cap", "--format=csv,noheader"];
    /// The topology matrix.
    pub(crate) const TOPO: &[&str] = &["topo", "-m"];
    /// NVLink states.
    pub(crate) const NVLINK_STATUS: &[&str] = &["nvlink", "-s"];
    /// NVLink far ends.
    pub(crate) const NVLINK_REMOTE: &[&str] = &["nvlink", "-R"];
    /// MIG GPU instance profiles.
    pub(crate) const MIG_PROFILES: &[&str] = &["mig", "-lgip"];
    /// Compute processes, one line each.
    pub(crate) const COMPUTE_APPS: &[&str] =
        &["--query-compute-apps=gpu_uuid", "--format=csv,noheader"];
    /// Driver version, one line per GPU.
    pub(crate) const PROBE: &[&str] = &["--query-gpu=driver_version", "--format=csv,noheader"];
}

/// Why the snapshot failed. Only the required `-q -x` query can fail it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SnapshotError {
    /// `nvidia-smi -q -x` did not answer.
    #[error(transparent)]
    Run(#[from] RunError),
    /// Its answer does not parse.
    #[error(transparent)]
    Parse(#[from] XmlError),
}

impl SnapshotError {
    /// Whether the host simply has no NVIDIA driver (no `nvidia-smi`).
    pub fn is_no_driver(&self) -> bool {
        matches!(self, SnapshotError::Run(RunError::NoDriver))
    }
}

/// How one query went, for metrics and doctor.
#[derive(Debug, Clone)]
pub struct QueryRecord {
    /// Its arguments.
    pub query: String,
    /// How long it took.
    pub elapsed: Duration,
    /// `None` when it answered and parsed; else why not, in words.
    pub error: Option<String>,
}

/// Everything one snapshot read. Optional parts a query did not give are empty.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// `-q -x`.
    pub xml: QueryXml,
    /// `-L`.
    pub listed: Vec<ListedGpu>,
    /// Compute capability per UUID.
    pub compute_caps: Vec<ComputeCap>,
    /// `topo -m`, with more than one GPU.
    pub topology: Vec<TopoRow>,
    /// `nvlink -s`.
    pub nvlink_status: Vec<NvLinkGpu>,
    /// `nvlink -R`.
    pub nvlink_remotes: Vec<NvLinkRemotes>,
    /// `mig -lgip`, when a GPU has MIG enabled.
    pub mig_profiles: Vec<MigProfile>,
    /// Each query run, with how it went.
    pub queries: Vec<QueryRecord>,
}

/// Runs one optional query and parses it; a failure of either is recorded and gives `None`.
async fn optional<T, E: std::fmt::Display>(
    runner: &Runner,
    args: &[&str],
    parse: impl FnOnce(&[u8]) -> Result<T, E>,
) -> (Option<T>, QueryRecord) {
    let started = Instant::now();
    let result = match runner.run(args).await {
        Ok(answer) => parse(&answer.stdout).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let record = QueryRecord {
        query: args.join(" "),
        elapsed: started.elapsed(),
        error: result.as_ref().err().cloned(),
    };
    (result.ok(), record)
}

/// Records how a query went and keeps its value, or the empty value when it failed.
fn keep<T: Default>(
    queries: &mut Vec<QueryRecord>,
    (value, record): (Option<T>, QueryRecord),
) -> T {
    queries.push(record);
    value.unwrap_or_default()
}

/// Takes a full snapshot within [`SNAPSHOT_TIMEOUT`].
///
/// # Errors
/// Only when `-q -x` fails or does not parse; optional queries that fail leave their parts empty
/// (their errors are in [`Snapshot::queries`]).
pub async fn snapshot(runner: &Runner) -> Result<Snapshot, SnapshotError> {
    snapshot_within(runner, SNAPSHOT_TIMEOUT).await
}

/// A runner whose bound ends at `deadline` at the latest (and never later than its own).
fn bounded_by(runner: &Runner, deadline: Instant) -> Runner {
    let left = deadline.saturating_duration_since(Instant::now());
    runner.clone().with_timeout(runner.timeout().min(left))
}

/// [`snapshot`] within `budget`: every query, `nvlink -R` after `nvlink -s` included, is
/// bounded by what is left of it when it starts, so the whole snapshot ends within `budget`
/// (each query killed with its process group at the end).
///
/// # Errors
/// As [`snapshot`].
pub async fn snapshot_within(runner: &Runner, budget: Duration) -> Result<Snapshot, SnapshotError> {
    let started = Instant::now();
    let deadline = started + budget;
    let answer = bounded_by(runner, deadline).run(query::QUERY_XML).await?;
    let xml = parse_query_xml(&answer.stdout)?;
    let mut snap = Snapshot {
        queries: vec![QueryRecord {
            query: query::QUERY_XML.join(" "),
            elapsed: answer.elapsed,
            error: None,
        }],
        ..Snapshot::default()
    };
    let multi_gpu = xml.gpus.len() > 1;
    let any_mig = xml.gpus.iter().any(|g| g.mig_mode_current == Some(true));
    // The optional queries share what is left of the snapshot's budget; each also has its
    // own bound. `nvlink -R` runs after `nvlink -s`, so it gets what is left then.
    let runner = bounded_by(runner, deadline);
    let nvlink = async {
        let status = optional(&runner, query::NVLINK_STATUS, parse_status).await;
        // Without any link there is no far end to ask about.
        let has_links = status
            .0
            .as_ref()
            .is_some_and(|gpus| gpus.iter().any(|g| !g.links.is_empty()));
        let remote = if has_links {
            let runner = bounded_by(&runner, deadline);
            Some(optional(&runner, query::NVLINK_REMOTE, parse_remote).await)
        } else {
            None
        };
        (status, remote)
    };
    let topo = async {
        if multi_gpu {
            Some(optional(&runner, query::TOPO, parse_topo).await)
        } else {
            None
        }
    };
    let mig = async {
        if any_mig {
            Some(optional(&runner, query::MIG_PROFILES, parse_profiles).await)
        } else {
            None
        }
    };
    let (listed, caps, topo, (status, remote), mig) = tokio::join!(
        optional(&runner, query::LIST, parse_list),
        optional(&runner, query::COMPUTE_CAP, parse_compute_cap),
        topo,
        nvlink,
        mig
    );
    snap.xml = xml;
    snap.listed = keep(&mut snap.queries, listed);
    snap.compute_caps = keep(&mut snap.queries, caps);
    snap.topology = topo.map(|t| keep(&mut snap.queries, t)).unwrap_or_default();
    snap.nvlink_status = keep(&mut snap.queries, status);
    snap.nvlink_remotes = remote
        .map(|r| keep(&mut snap.queries, r))
        .unwrap_or_default();
    snap.mig_profiles = mig.map(|m| keep(&mut snap.queries, m)).unwrap_or_default();
    Ok(snap)
}

/// Where a set of samples came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SampleSource {
    /// The light CSV queries.
    Csv,
    /// The full snapshot, and why the CSV could not stand in for it.
    Snapshot(String),
}

/// Samples every GPU: the light CSV query plus the compute processes, falling back to the full
/// snapshot where the CSV cannot stand in for it (a refused field, wrong columns). GPUs in
/// MIG mode come from their CSV rows without their MIG devices' memory: a caller that wants it
/// attaches it from a `-q -x` it reads anyway ([`super::samples::attach_mig_memory`]). Never
/// falls back when there is no driver.
///
/// # Errors
/// [`SnapshotError::Run`] with [`RunError::NoDriver`] without `nvidia-smi`; otherwise the
/// snapshot's errors when it had to fall back and the snapshot failed.
pub async fn samples(runner: &Runner) -> Result<(Vec<GpuSample>, SampleSource), SnapshotError> {
    match csv_samples(runner).await? {
        Ok(samples) => Ok((samples, SampleSource::Csv)),
        Err(reason) => {
            let answer = runner.run(query::QUERY_XML).await?;
            let xml = parse_query_xml(&answer.stdout)?;
            Ok((samples_from_xml(&xml), SampleSource::Snapshot(reason)))
        }
    }
}

/// The CSV half of [`samples`]: the samples, or why they must come from `-q -x` instead (for
/// a caller that reads `-q -x` anyway and derives them from that one document). A driver that
/// refuses a clock reason is asked the query without them ([`SampleQuery::without`]).
///
/// # Errors
/// The CSV query's run errors ([`RunError::NoDriver`] included), but a refused field.
pub(crate) async fn csv_samples(
    runner: &Runner,
) -> Result<Result<Vec<GpuSample>, String>, SnapshotError> {
    let format = "--format=csv,noheader,nounits";
    let mut asked = SampleQuery::Full;
    loop {
        let fields = asked.query_gpu();
        let csv = runner.run(&[fields.as_str(), format]).await;
        let refused = match &csv {
            Err(RunError::Failed { message, .. }) => refused_field(message),
            Ok(answer) => refused_field(&super::text::decode(&answer.stdout)),
            Err(_) => None,
        };
        if let Some(next) = refused.as_deref().and_then(|f| asked.without(f)) {
            asked = next;
            continue;
        }
        return Ok(Err(match csv {
            Err(RunError::NoDriver) => return Err(RunError::NoDriver.into()),
            Err(RunError::Failed { .. }) if refused.is_some() => FallBackReason::FieldRefused {
                field: refused.unwrap_or_default(),
            }
            .to_string(),
            Err(e) => return Err(e.into()),
            Ok(answer) => match parse_samples(&answer.stdout) {
                Ok(SampleParse::Samples(mut samples)) => {
                    attach_apps(runner, &mut samples).await;
                    return Ok(Ok(samples));
                }
                Ok(SampleParse::FallBack(reason)) => reason.to_string(),
                Err(e) => e.to_string(),
            },
        }));
    }
}

/// Attaches the compute-process counts; a failing `--query-compute-apps` leaves every count
/// unknown (`None`) rather than failing the samples: the count is optional to the rest.
pub(crate) async fn attach_apps(runner: &Runner, samples: &mut [GpuSample]) {
    match runner.run(query::COMPUTE_APPS).await {
        Ok(apps) => attach_compute_counts(samples, &count_compute_apps(&apps.stdout)),
        Err(e) => {
            tracing::debug!("sample: compute processes unknown: {e}");
            for s in samples {
                s.compute_processes = None;
            }
        }
    }
}

/// Samples as the full `-q -x` answer gives them; a process counts when its type contains `C`.
pub fn samples_from_xml(xml: &QueryXml) -> Vec<GpuSample> {
    xml.gpus
        .iter()
        .filter_map(|g| {
            Some(GpuSample {
                uuid: g.uuid.as_deref()?.parse().ok()?,
                memory_total_mib: g.memory_total_mib,
                memory_used_mib: g.memory_used_mib,
                memory_reserved_mib: g.memory_reserved_mib,
                memory_free_mib: g
                    .memory_total_mib
                    .zip(g.memory_used_mib)
                    .map(|(t, u)| t.saturating_sub(u)),
                utilization_gpu_pct: g.utilization_gpu_pct,
                utilization_memory_pct: g.utilization_memory_pct,
                temperature_c: g.temperature_c,
                power_draw_w: g.power_draw_w,
                power_limit_w: g.power_limit_w,
                clocks_sm_mhz: g.clocks_sm_mhz,
                clocks_mem_mhz: g.clocks_mem_mhz,
                pstate: g.pstate.clone(),
                mig_mode: g.mig_mode_current,
                clock_events: g.driver_health.clock_events,
                mig_devices: g.mig_devices.clone(),
                compute_processes: Some(
                    u32::try_from(g.compute_process_count()).unwrap_or(u32::MAX),
                ),
            })
        })
        .collect()
}

/// `Probe`: the driver's version and how many GPUs it sees, from the lightest query there is.
///
/// # Errors
/// The runner's errors, and a parse failure as [`RunError::Failed`]-like text.
pub async fn probe(runner: &Runner) -> Result<Probe, ProbeFailure> {
    let answer = runner.run(query::PROBE).await?;
    parse_probe(&answer.stdout).map_err(|e| ProbeFailure::Parse(e.to_string()))
}

/// Why `Probe` failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProbeFailure {
    /// `nvidia-smi` did not answer.
    #[error(transparent)]
    Run(#[from] RunError),
    /// It answered something else than driver versions.
    #[error("nvidia-smi --query-gpu=driver_version answered something unexpected: {0}")]
    Parse(String),
}
