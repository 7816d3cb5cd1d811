//! Live samples: the light CSV queries that readers polling every few seconds use instead of
//! the full `-q -x` snapshot, and a generic reader for `--query-gpu` CSV with a header.
//!
//! The sample query asks for exactly [`SAMPLE_FIELDS`] with `--format=csv,noheader,nounits`;
//! the compute processes come from `--query-compute-apps=gpu_uuid --format=csv,noheader`.
//! The last four fields are the clock event (throttle) reasons that make a GPU degraded while
//! they last, in their `clocks_throttle_reasons.*` spelling: every driver branch that has them
//! accepts it (R535 renamed them `clocks_event_reasons.*` and keeps the old names as aliases,
//! as its `--help-query-gpu` says). A driver that refuses one of them is asked
//! [`SampleQuery::WithoutClockReasons`] instead, and the samples carry no clock reasons.
//! The sample falls back to the full snapshot ([`SampleParse::FallBack`]) when the driver
//! refuses another field it predates (`memory.reserved` before R510), or when a line has the
//! wrong number of columns. A GPU in MIG mode is sampled from its CSV row like any other (the real
//! R590 MIG captures print the whole GPU's row); only its MIG devices' memory is in `-q -x`
//! alone, and [`attach_mig_memory`] adds it from a `-q -x` document the caller already has.
//! `nvidia-smi` does not quote CSV values; cells are split on `,` and trimmed.

use std::collections::BTreeMap;
use std::fmt;

use bcd_protocol::GpuUuid;
use thiserror::Error;

use super::xml::{ClockEvents, QueryXml, XmlMigDevice};
use super::{list::quote, text, value};

/// The fields of a sample, in the order [`parse_samples`] reads them: the readings, then
/// [`CLOCK_REASON_FIELDS`].
pub const SAMPLE_FIELDS: &str = "uuid,memory.total,memory.used,memory.reserved,memory.free,utilization.gpu,utilization.memory,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,pstate,mig.mode.current,clocks_throttle_reasons.hw_slowdown,clocks_throttle_reasons.hw_thermal_slowdown,clocks_throttle_reasons.hw_power_brake_slowdown,clocks_throttle_reasons.sw_thermal_slowdown";

/// The sample's fields without the clock reasons, for a driver that refuses one of them.
pub(crate) const SAMPLE_FIELDS_WITHOUT_CLOCK_REASONS: &str = "uuid,memory.total,memory.used,memory.reserved,memory.free,utilization.gpu,utilization.memory,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,pstate,mig.mode.current";

/// The clock event reasons a sample reads, in their order at the end of [`SAMPLE_FIELDS`].
pub const CLOCK_REASON_FIELDS: [&str; 4] = [
    "clocks_throttle_reasons.hw_slowdown",
    "clocks_throttle_reasons.hw_thermal_slowdown",
    "clocks_throttle_reasons.hw_power_brake_slowdown",
    "clocks_throttle_reasons.sw_thermal_slowdown",
];

/// How many columns a sample line has: one per field of [`SAMPLE_FIELDS`].
pub(crate) const SAMPLE_COLUMNS: usize = 18;

/// How many columns a line of [`SampleQuery::WithoutClockReasons`] has.
pub(crate) const SAMPLE_COLUMNS_WITHOUT_CLOCK_REASONS: usize = 14;

/// Which sample query to ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum SampleQuery {
    /// [`SAMPLE_FIELDS`].
    #[default]
    Full,
    /// [`SAMPLE_FIELDS_WITHOUT_CLOCK_REASONS`]: the driver refused a clock reason.
    WithoutClockReasons,
}

impl SampleQuery {
    /// The `--query-gpu=` argument.
    pub(crate) fn query_gpu(self) -> String {
        match self {
            SampleQuery::Full => format!("--query-gpu={SAMPLE_FIELDS}"),
            SampleQuery::WithoutClockReasons => {
                format!("--query-gpu={SAMPLE_FIELDS_WITHOUT_CLOCK_REASONS}")
            }
        }
    }

    /// The query to ask instead after the driver refused `field`: the one without the clock
    /// reasons when `field` is one of them and this query asks for them; `None` otherwise
    /// (the samples must come from `-q -x` then).
    pub(crate) fn without(self, field: &str) -> Option<SampleQuery> {
        let clock = CLOCK_REASON_FIELDS
            .iter()
            .any(|f| f.eq_ignore_ascii_case(field));
        (clock && self == SampleQuery::Full).then_some(SampleQuery::WithoutClockReasons)
    }
}

/// One GPU's usage at one moment. Every reading is `None` when the driver gave no value.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSample {
    /// The GPU's UUID.
    pub uuid: GpuUuid,
    /// Framebuffer size, MiB.
    pub memory_total_mib: Option<u64>,
    /// Framebuffer in use, MiB.
    pub memory_used_mib: Option<u64>,
    /// Framebuffer the driver reserves, MiB.
    pub memory_reserved_mib: Option<u64>,
    /// Framebuffer free, MiB.
    pub memory_free_mib: Option<u64>,
    /// Busy percentage of the last sample period.
    pub utilization_gpu_pct: Option<u32>,
    /// Memory-controller busy percentage.
    pub utilization_memory_pct: Option<u32>,
    /// Core temperature, °C.
    pub temperature_c: Option<i32>,
    /// Power draw, W.
    pub power_draw_w: Option<f64>,
    /// Power limit, W.
    pub power_limit_w: Option<f64>,
    /// SM clock, MHz.
    pub clocks_sm_mhz: Option<u32>,
    /// Memory clock, MHz.
    pub clocks_mem_mhz: Option<u32>,
    /// Performance state (`P0`).
    pub pstate: Option<String>,
    /// Whether MIG mode is on; `None` for GPUs without MIG.
    pub mig_mode: Option<bool>,
    /// The clock event reasons that slow the GPU down now; all `None` where the driver gave
    /// none (the query without them, or `[N/A]`).
    pub clock_events: ClockEvents,
    /// A GPU in MIG mode: its MIG devices with their memory, from the latest `-q -x` read
    /// ([`attach_mig_memory`]); empty until one was read.
    pub mig_devices: Vec<XmlMigDevice>,
    /// Compute processes on the GPU, filled by [`attach_compute_counts`]; `None` until then,
    /// and where `--query-compute-apps` failed.
    pub compute_processes: Option<u32>,
}

/// Why the light sample cannot stand in for the full snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FallBackReason {
    /// A line has the wrong number of columns.
    WrongColumns {
        /// 1-based line number.
        line: usize,
        /// Columns found.
        found: usize,
        /// Columns expected.
        expected: usize,
    },
    /// The driver refused a field it predates.
    FieldRefused {
        /// The field, as the driver named it.
        field: String,
    },
}

impl fmt::Display for FallBackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FallBackReason::WrongColumns {
                line,
                found,
                expected,
            } => write!(
                f,
                "the sample query's line {line} has {found} columns, not {expected}"
            ),
            FallBackReason::FieldRefused { field } => write!(
                f,
                "the driver refuses the field {field:?}, which it predates"
            ),
        }
    }
}

/// What a sample query's answer means.
#[derive(Debug, Clone, PartialEq)]
pub enum SampleParse {
    /// One sample per GPU, in output order.
    Samples(Vec<GpuSample>),
    /// Read the full `-q -x` snapshot instead.
    FallBack(FallBackReason),
}

/// A sample line with a value that should be a number and is not.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SamplesError {
    /// A field that holds something other than a reading or a "no value" spelling.
    #[error("nvidia-smi --query-gpu (samples), line {line}: {field} is {text:?}, not a number")]
    BadValue {
        /// 1-based line number.
        line: usize,
        /// The field's name in [`SAMPLE_FIELDS`].
        field: &'static str,
        /// The cell as printed.
        text: String,
    },
    /// The UUID column is empty or not a GPU UUID.
    #[error("nvidia-smi --query-gpu (samples), line {line}: {text:?} is not a GPU UUID")]
    Uuid {
        /// 1-based line number.
        line: usize,
        /// The cell as printed.
        text: String,
    },
}

/// Finds the field a driver refused: it prints `Field "memory.reserved" is not a valid field
/// to query.` (and exits non-zero) for a field newer than itself. Returns the field's name.
pub fn refused_field(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let at = lower.find("is not a valid field to query")?;
    let before = &text[..at];
    let field = before
        .rsplit_once("Field")
        .or_else(|| before.rsplit_once("field"))
        .map_or(before, |(_, f)| f)
        .trim()
        .trim_matches(|c| c == '"' || c == '\'')
        .trim();
    Some(quote(field))
}

/// Reads one sample line's cells into a [`GpuSample`].
fn sample(line: usize, cols: &[&str]) -> Result<GpuSample, SamplesError> {
    let names: Vec<&'static str> = SAMPLE_FIELDS.split(',').collect();
    let bad = |i: usize| SamplesError::BadValue {
        line,
        field: names.get(i).copied().unwrap_or("?"),
        text: quote(cols[i]),
    };
    // A present cell that does not parse is an error; an absent one is `None`.
    let unsigned = |i: usize| -> Result<Option<u64>, SamplesError> {
        match value::present(cols[i]) {
            None => Ok(None),
            Some(_) => value::unsigned(cols[i]).map(Some).ok_or_else(|| bad(i)),
        }
    };
    let small = |i: usize| -> Result<Option<u32>, SamplesError> {
        unsigned(i)?
            .map(|n| u32::try_from(n).map_err(|_| bad(i)))
            .transpose()
    };
    let float = |i: usize| -> Result<Option<f64>, SamplesError> {
        match value::present(cols[i]) {
            None => Ok(None),
            Some(_) => value::number(cols[i]).map(Some).ok_or_else(|| bad(i)),
        }
    };
    let temperature = match value::present(cols[7]) {
        None => None,
        Some(_) => Some(
            value::integer(cols[7])
                .and_then(|t| i32::try_from(t).ok())
                .ok_or_else(|| bad(7))?,
        ),
    };
    let uuid = cols[0].parse::<GpuUuid>().map_err(|_| SamplesError::Uuid {
        line,
        text: quote(cols[0]),
    })?;
    Ok(GpuSample {
        uuid,
        memory_total_mib: unsigned(1)?,
        memory_used_mib: unsigned(2)?,
        memory_reserved_mib: unsigned(3)?,
        memory_free_mib: unsigned(4)?,
        utilization_gpu_pct: small(5)?,
        utilization_memory_pct: small(6)?,
        temperature_c: temperature,
        power_draw_w: float(8)?,
        power_limit_w: float(9)?,
        clocks_sm_mhz: small(10)?,
        clocks_mem_mhz: small(11)?,
        pstate: value::present(cols[12]).map(str::to_owned),
        mig_mode: value::flag(cols[13]),
        clock_events: clock_events(cols.get(14..).unwrap_or_default()),
        compute_processes: None,
        mig_devices: Vec::new(),
    })
}

/// The clock reasons of a line's last cells (in [`CLOCK_REASON_FIELDS`]' order): `Active`
/// or `Not Active`; anything else reads as no reading.
fn clock_events(cells: &[&str]) -> ClockEvents {
    let at = |i: usize| cells.get(i).and_then(|c| value::truth(c));
    ClockEvents {
        hw_slowdown: at(0),
        hw_thermal_slowdown: at(1),
        hw_power_brake_slowdown: at(2),
        sw_thermal_slowdown: at(3),
    }
}

/// Parses the answer to the [`SAMPLE_FIELDS`] query (`csv,noheader,nounits`), or to
/// [`SampleQuery::WithoutClockReasons`]: a line has the columns of one or the other.
///
/// Guarantees: `Samples` holds one sample per non-blank line, in output order (GPUs in MIG
/// mode included, without their MIG devices); otherwise the first reason to fall back is
/// returned. Empty output is an empty
/// `Samples`.
///
/// # Errors
///
/// [`SamplesError`] when a line has the right columns but a reading that is neither a number
/// nor a "no value" spelling, or no GPU UUID. A line whose UUID starts with `GPU-` but names
/// no GPU (`GPU-????...` from a driver that could not initialise it, or a masked one) is
/// skipped, so the other GPUs are still sampled; the inventory leaves that GPU out and says so.
pub fn parse_samples(bytes: &[u8]) -> Result<SampleParse, SamplesError> {
    let text = text::decode(bytes);
    if let Some(field) = refused_field(&text) {
        return Ok(SampleParse::FallBack(FallBackReason::FieldRefused {
            field,
        }));
    }
    let mut samples = Vec::new();
    for (line, raw) in text::numbered_lines(&text) {
        if raw.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = raw.split(',').map(str::trim).collect();
        if cols.len() != SAMPLE_COLUMNS && cols.len() != SAMPLE_COLUMNS_WITHOUT_CLOCK_REASONS {
            return Ok(SampleParse::FallBack(FallBackReason::WrongColumns {
                line,
                found: cols.len(),
                expected: SAMPLE_COLUMNS,
            }));
        }
        if cols[0].starts_with("GPU-") && cols[0].parse::<GpuUuid>().is_err() {
            continue;
        }
        samples.push(sample(line, &cols)?);
    }
    Ok(SampleParse::Samples(samples))
}

/// Counts compute processes per GPU UUID from `--query-compute-apps=gpu_uuid
/// --format=csv,noheader` (one line per process).
///
/// Guarantees: never fails. Only lines whose first cell is a `GPU-` or `MIG-` UUID count, so a
/// header, `No running processes found` or an error message counts nothing.
pub fn count_compute_apps(bytes: &[u8]) -> BTreeMap<String, u32> {
    let text = text::decode(bytes);
    let mut counts = BTreeMap::new();
    for (_, raw) in text::numbered_lines(&text) {
        let first = raw.split(',').next().unwrap_or_default().trim();
        if (first.starts_with("GPU-") || first.starts_with("MIG-"))
            && !first.contains(char::is_whitespace)
        {
            let n = counts.entry(first.to_owned()).or_insert(0u32);
            *n = n.saturating_add(1);
        }
    }
    counts
}

/// Sets each sample's `compute_processes` from `counts` (0 for a GPU with no entry).
pub fn attach_compute_counts(samples: &mut [GpuSample], counts: &BTreeMap<String, u32>) {
    for sample in samples {
        // The keys are spelled as nvidia-smi printed them; compare their normal forms.
        let n = counts
            .iter()
            .filter(|(uuid, _)| uuid.parse::<GpuUuid>().is_ok_and(|u| u == sample.uuid))
            .map(|(_, n)| *n)
            .fold(0u32, u32::saturating_add);
        sample.compute_processes = Some(n);
    }
}

/// Whether a GPU among `samples` is in MIG mode, whose MIG devices' memory needs `-q -x`.
pub(crate) fn needs_mig_memory(samples: &[GpuSample]) -> bool {
    samples.iter().any(|s| s.mig_mode == Some(true))
}

/// Gives each sampled GPU in MIG mode the MIG devices `xml` lists for its UUID (a GPU `xml`
/// does not list keeps what it had).
pub(crate) fn attach_mig_memory(samples: &mut [GpuSample], xml: &QueryXml) {
    for s in samples.iter_mut().filter(|s| s.mig_mode == Some(true)) {
        let same = |raw: &Option<String>| {
            raw.as_deref()
                .is_some_and(|r| r.parse::<GpuUuid>().is_ok_and(|u| u == s.uuid))
        };
        if let Some(g) = xml.gpus.iter().find(|g| same(&g.uuid)) {
            s.mig_devices.clone_from(&g.mig_devices);
        }
    }
}

/// Why a `--query-gpu` CSV with a header could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CsvError {
    /// No header line.
    #[error("nvidia-smi --query-gpu (csv): the answer is empty, with no header line")]
    NoHeader,
    /// A row with a different number of cells than the header.
    #[error(
        "nvidia-smi --query-gpu (csv), line {line}: {found} columns, the header has {expected}"
    )]
    Columns {
        /// 1-based line number.
        line: usize,
        /// Columns found.
        found: usize,
        /// Columns in the header.
        expected: usize,
    },
}

/// Strips a header cell's unit suffix: `memory.total [MiB]` is `memory.total`.
fn field_name(cell: &str) -> &str {
    let cell = cell.trim();
    match cell.rfind(" [") {
        Some(at) if cell.ends_with(']') => cell[..at].trim(),
        _ => cell,
    }
}

/// Reads a `--query-gpu=... --format=csv` answer (with its header) into one map per GPU:
/// field name (unit suffix removed) to value (through [`value::present`], units kept).
///
/// Guarantees: one map per non-blank row after the header, each with every header field.
///
/// # Errors
///
/// [`CsvError`] for an empty answer or a row whose cell count differs from the header's.
pub fn parse_query_gpu_csv(
    bytes: &[u8],
) -> Result<Vec<BTreeMap<String, Option<String>>>, CsvError> {
    let text = text::decode(bytes);
    let mut lines = text::numbered_lines(&text).filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or(CsvError::NoHeader)?;
    let names: Vec<&str> = header.split(',').map(field_name).collect();
    let mut rows = Vec::new();
    for (line, raw) in lines {
        let cells: Vec<&str> = raw.split(',').collect();
        if cells.len() != names.len() {
            return Err(CsvError::Columns {
                line,
                found: cells.len(),
                expected: names.len(),
            });
        }
        rows.push(
            names
                .iter()
                .zip(cells)
                .map(|(name, cell)| ((*name).to_owned(), value::present(cell).map(str::to_owned)))
                .collect(),
        );
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/smi/csv/");
        std::fs::read(format!("{path}{name}")).expect("fixture")
    }

    fn samples(bytes: &[u8]) -> Vec<GpuSample> {
        match parse_samples(bytes).unwrap() {
            SampleParse::Samples(s) => s,
            other => panic!("expected samples, got {other:?}"),
        }
    }

    #[test]
    fn fields_and_columns_agree() {
        assert_eq!(SAMPLE_FIELDS.split(',').count(), SAMPLE_COLUMNS);
    }

    #[test]
    fn h100_pair_reads_every_field() {
        let got = samples(&fixture("samples-2x-h100.csv"));
        assert_eq!(got.len(), 2);
        let s = &got[0];
        assert_eq!(s.uuid, "GPU-6513270e-269e-0d37-f2a7-4de452e6b438");
        assert_eq!(s.memory_total_mib, Some(81559));
        assert_eq!(s.memory_used_mib, Some(40321));
        assert_eq!(s.memory_reserved_mib, Some(552));
        assert_eq!(s.memory_free_mib, Some(40686));
        assert_eq!(s.utilization_gpu_pct, Some(97));
        assert_eq!(s.utilization_memory_pct, Some(61));
        assert_eq!(s.temperature_c, Some(63));
        assert_eq!(s.power_draw_w, Some(612.37));
        assert_eq!(s.power_limit_w, Some(700.0));
        assert_eq!(s.clocks_sm_mhz, Some(1980));
        assert_eq!(s.clocks_mem_mhz, Some(2619));
        assert_eq!(s.pstate.as_deref(), Some("P0"));
        assert_eq!(s.mig_mode, Some(false));
        // The second GPU is idle, with a deprecated power reading.
        assert_eq!(got[1].power_draw_w, None);
        assert_eq!(got[1].utilization_gpu_pct, Some(0));
    }

    // What broke: one GPU in MIG mode made every sample of the host a full -q -x.
    #[test]
    fn a_mig_gpu_is_sampled_from_its_csv_row() {
        let got = samples(&fixture("samples-h100-and-mig-a100.csv"));
        let mig = got
            .iter()
            .find(|s| s.uuid == "GPU-3e2d5a1c-7b44-8f0e-2c19-a6b5d4e3f201")
            .unwrap();
        assert_eq!(mig.mig_mode, Some(true));
        assert!(mig.memory_total_mib.is_some());
        assert!(needs_mig_memory(&got));
    }

    #[test]
    fn refused_field_falls_back_and_is_named() {
        let text = "Field \"memory.reserved\" is not a valid field to query.\n";
        assert_eq!(refused_field(text).as_deref(), Some("memory.reserved"));
        assert_eq!(
            parse_samples(text.as_bytes()).unwrap(),
            SampleParse::FallBack(FallBackReason::FieldRefused {
                field: "memory.reserved".into()
            })
        );
        assert_eq!(refused_field("all good"), None);
    }

    // What broke: the sample read no clock reason, so throttling waited for the next -q -x.
    #[test]
    fn a_sample_reads_its_clock_reasons_in_either_spelling_of_the_answer() {
        let line = "GPU-0000000a-0000-0000-0000-000000000000, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, P0, Disabled, Active, Not Active, [N/A], Active\n";
        let got = samples(line.as_bytes());
        assert_eq!(
            got[0].clock_events,
            ClockEvents {
                hw_slowdown: Some(true),
                hw_thermal_slowdown: Some(false),
                hw_power_brake_slowdown: None,
                sw_thermal_slowdown: Some(true),
            }
        );
        assert_eq!(
            got[0].clock_events.active(),
            ["hw_slowdown", "sw_thermal_slowdown"]
        );
        // The query without them reads as no reading at all.
        let short = "GPU-0000000a-0000-0000-0000-000000000000, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, P0, Disabled\n";
        assert!(!samples(short.as_bytes())[0].clock_events.any_reading());
        assert_eq!(
            SampleQuery::Full.without("clocks_throttle_reasons.hw_power_brake_slowdown"),
            Some(SampleQuery::WithoutClockReasons)
        );
        assert_eq!(SampleQuery::Full.without("memory.reserved"), None);
        assert_eq!(
            SampleQuery::WithoutClockReasons.without("clocks_throttle_reasons.hw_slowdown"),
            None
        );
        assert_eq!(
            SAMPLE_FIELDS_WITHOUT_CLOCK_REASONS.split(',').count(),
            SAMPLE_COLUMNS_WITHOUT_CLOCK_REASONS
        );
        assert!(SAMPLE_FIELDS.ends_with(&CLOCK_REASON_FIELDS.join(",")));
    }

    #[test]
    fn short_lines_fall_back() {
        let got = parse_samples(b"GPU-0000000a-0000-0000-0000-000000000000, 1, 2\n").unwrap();
        assert_eq!(
            got,
            SampleParse::FallBack(FallBackReason::WrongColumns {
                line: 1,
                found: 3,
                expected: 18
            })
        );
        assert_eq!(
            FallBackReason::WrongColumns {
                line: 1,
                found: 3,
                expected: 18
            }
            .to_string(),
            "the sample query's line 1 has 3 columns, not 18"
        );
    }

    // What changed: a row's UUID only had to start with GPU-, so a cut-short or masked one
    // became a GPU of its own that matched no inventory entry; it is skipped now, and the
    // other GPUs' rows still read.
    #[test]
    fn a_row_whose_uuid_names_no_gpu_is_skipped() {
        let rows = "GPU-????????-????-????-????-????????????, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, P0, Disabled\n\
                    GPU-0000000a-0000-0000-0000-000000000000, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, P0, Disabled\n";
        let got = samples(rows.as_bytes());
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].uuid, "GPU-0000000a-0000-0000-0000-000000000000");
        let err = parse_samples(b"No devices were found, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, P0, x\n")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "nvidia-smi --query-gpu (samples), line 1: \"No devices were found\" is not a GPU UUID"
        );
    }

    #[test]
    fn garbage_reading_is_an_error() {
        let err = parse_samples(b"GPU-0000000a-0000-0000-0000-000000000000, lots, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, P0, Disabled\n")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "nvidia-smi --query-gpu (samples), line 1: memory.total is \"lots\", not a number"
        );
    }

    #[test]
    fn compute_apps_are_counted_and_attached() {
        let counts = count_compute_apps(&fixture("compute-apps.csv"));
        assert_eq!(
            counts.get("GPU-6513270e-269e-0d37-f2a7-4de452e6b438"),
            Some(&3)
        );
        assert_eq!(
            counts.get("GPU-a1c2b3d4-e5f6-a7b8-c9d0-e1f2a3b4c5d6"),
            Some(&1)
        );
        assert_eq!(counts.len(), 2);
        assert!(count_compute_apps(b"No running processes found\n").is_empty());
        assert!(count_compute_apps(b"").is_empty());
        let mut got = samples(&fixture("samples-2x-h100.csv"));
        attach_compute_counts(&mut got, &counts);
        assert_eq!(got[0].compute_processes, Some(3));
        assert_eq!(got[1].compute_processes, Some(1));
        attach_compute_counts(&mut got, &BTreeMap::new());
        assert_eq!(
            got[0].compute_processes,
            Some(0),
            "no entry means no process"
        );
    }

    #[test]
    fn query_gpu_csv_strips_units_and_no_values() {
        let rows = parse_query_gpu_csv(
            b"name, uuid, memory.total [MiB], power.draw [W], fan.speed [%]\r\nNVIDIA H100 80GB HBM3, GPU-1, 81559 MiB, [N/A], [Not Supported]\r\n",
        )
        .unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0]["memory.total"].as_deref(), Some("81559 MiB"));
        assert_eq!(rows[0]["power.draw"], None);
        assert_eq!(rows[0]["fan.speed"], None);
        assert_eq!(rows[0]["name"].as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(parse_query_gpu_csv(b"\n"), Err(CsvError::NoHeader));
        assert_eq!(
            parse_query_gpu_csv(b"a, b\n1\n"),
            Err(CsvError::Columns {
                line: 2,
                found: 1,
                expected: 2
            })
        );
    }
}
