//! `bcd status`: one line per GPU with its health state and, where it is not healthy, the
//! reasons and the action for each.
//!
//! A running `bcd node` is asked first (`GET /v1/status` on its API socket: it holds the latest
//! inventory, conditions and samples, and costs the driver nothing more); only where none
//! answers does `bcd status` read the GPUs itself. Then the sample and the inventory (which
//! holds the ECC and row-remap counters and, through its `-q -x`, the driver's own readings)
//! are read concurrently, both within [`STATUS_WAIT`], and `-q -x` runs once: where the CSV
//! sample would fall back to it, and for the MIG devices' memory, the inventory's document
//! serves.
//! When `nvidia-smi` gives nothing in time, the GPUs the driver lists in procfs are printed
//! with the state `unknown` and the reason: a silent `nvidia-smi` is never healthy.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use bcd_protocol::GpuUuid;
use serde::{Deserialize, Serialize};

use super::faults::{no_record, read_boot_id, read_record};
use super::verdict::{judge, Evidence, HealthState, Reason};
use super::xid::XidPolicy;
use crate::inventory::collect::collect;
use crate::inventory::document::Inventory;
use crate::inventory::{merge::merge, procfs};
use crate::smi::runner::{RunError, Runner};
use crate::smi::samples::{attach_mig_memory, GpuSample};
use crate::smi::snapshot::{csv_samples, samples_from_xml, SnapshotError};
use crate::smi::xml::DriverHealth;
use crate::sys::host::Host;

/// The longest `bcd status` waits for the sample and the inventory.
pub(crate) const STATUS_WAIT: Duration = Duration::from_secs(10);

/// One GPU's line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuStatus {
    /// The inventory's index; absent when the inventory was not read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// The GPU's UUID.
    pub uuid: GpuUuid,
    /// The model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The PCI bus id, in NVML's form as the inventory writes it; absent when the inventory
    /// does not know it (or was not read, or an older node answered).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::inventory::document::nvml_bus_id"
    )]
    pub bus_id: Option<bcd_protocol::PciAddress>,
    /// Busy %.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utilization_gpu_pct: Option<u32>,
    /// Memory used, MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_used_mib: Option<u64>,
    /// Memory size, MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_total_mib: Option<u64>,
    /// °C.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature_c: Option<i32>,
    /// W.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_draw_w: Option<f64>,
    /// W.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_limit_w: Option<f64>,
    /// Compute processes (graphics processes are no workload); absent without a sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_processes: Option<u32>,
    /// The scheduling answer: `true` for healthy and degraded GPUs.
    pub healthy: bool,
    /// The state: `healthy`, `degraded`, `unhealthy` or `unknown`.
    pub health: HealthState,
    /// Why it is not healthy, each with the operator's action.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<Reason>,
    /// Passed through to a VM (the passthrough memory lists it): the host can neither sample
    /// nor judge it, so its state is `unknown` and it weighs on no exit status.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub passed_through: bool,
    /// Only a reboot will bring it back (`bcd node --remediate`): it is never reset again
    /// this boot.
    #[serde(default)]
    pub reboot_required: bool,
    /// What the recovery loop does for it now (`bcd node --remediate` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<RemediationView>,
}

/// One GPU's remediation as status shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RemediationView {
    /// `healthy`, `settling`, `waiting`, `backoff`, `resetting`, `reboot-required` or
    /// `operator` (no reset is known to help).
    pub state: String,
    /// What it waits for (`hold job-7 (operator)`), while it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// Resets tried this boot.
    pub resets_used: u32,
    /// Whether only a reboot will do.
    #[serde(default)]
    pub reboot_required: bool,
    /// Why a reboot is required, or why a person must look.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// `bcd status`'s result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusReport {
    /// One per GPU, in the inventory's index order when known.
    pub gpus: Vec<GpuStatus>,
    /// What could not be read, in words (the health is then incomplete), and each GPU the
    /// driver or `nvidia-smi` lists that the inventory leaves out.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Why `nvidia-smi` gave no sample, when it did not (`bcd status` then exits 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvidia_smi_error: Option<String>,
}

/// Why there is no status to print.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StatusError {
    /// No NVIDIA driver on this host.
    #[error("{}", RunError::NoDriver)]
    NoDriver,
    /// The sample failed and the driver lists no GPU either.
    #[error("cannot sample the GPUs: {0}")]
    Samples(SnapshotError),
    /// The sample took too long and the driver lists no GPU either.
    #[error("nvidia-smi did not give a sample within {0}s: a GPU may be wedged (Xid 79 or 119)")]
    Timeout(u64),
}

/// The driver's readings per GPU UUID from a `-q -x` document.
pub(crate) fn driver_readings(xml: &crate::smi::xml::QueryXml) -> BTreeMap<GpuUuid, DriverHealth> {
    xml.gpus
        .iter()
        .filter_map(|g| {
            let uuid = g.uuid.as_deref()?.parse().ok()?;
            Some((uuid, g.driver_health.clone()))
        })
        .collect()
}

/// The GPUs of the last inventory `nvidia-smi` answered for (`last`) that a collection it was
/// silent for (`now`) does not list: a wedged GPU may vanish from procfs too, and a GPU that
/// nothing answers for stays listed (`unknown`) rather than disappearing. Passed-through GPUs
/// are left out: the passthrough memory lists them whatever `nvidia-smi` says.
pub(crate) fn kept_gpus<'a>(
    last: impl IntoIterator<Item = &'a crate::inventory::document::Gpu>,
    now: &[crate::inventory::document::Gpu],
) -> Vec<crate::inventory::document::Gpu> {
    let mut kept: Vec<crate::inventory::document::Gpu> = Vec::new();
    for g in last {
        let listed = now.iter().chain(&kept).any(|n| n.uuid == g.uuid);
        if !g.passed_through && !listed {
            kept.push(g.clone());
        }
    }
    kept
}

/// Joins the inventory's GPUs with their samples (by UUID) and judges each; a sampled GPU the
/// inventory does not list is `unknown`. A GPU passed through to a VM has its line, marked
/// so, without a sample or a verdict: the host cannot see it.
pub fn gpu_statuses(
    samples: &[GpuSample],
    inventory: Option<&Inventory>,
    evidence: &Evidence<'_>,
) -> Vec<GpuStatus> {
    let sample_of = |uuid: &GpuUuid| samples.iter().find(|s| &s.uuid == uuid);
    let mut out = Vec::new();
    let gpus = inventory.map_or(&[][..], |inv| inv.gpu.gpus.as_slice());
    for gpu in gpus {
        if gpu.passed_through {
            // The verdict every reader gives it (`unknown`), without a sample.
            let v = judge(gpu, evidence);
            let mut line = line(gpu.uuid.clone(), None, v.health, v.reasons);
            line.index = Some(gpu.index);
            line.name.clone_from(&gpu.name);
            line.bus_id = gpu.bus_id;
            line.passed_through = true;
            out.push(line);
            continue;
        }
        let v = judge(gpu, evidence);
        let mut line = line(gpu.uuid.clone(), sample_of(&gpu.uuid), v.health, v.reasons);
        line.index = Some(gpu.index);
        line.name.clone_from(&gpu.name);
        line.bus_id = gpu.bus_id;
        out.push(line);
    }
    for s in samples {
        if !gpus.iter().any(|g| g.uuid == s.uuid) {
            let reason = Reason {
                kind: crate::health::verdict::ReasonKind::NotInInventory,
                message: "the inventory does not list this GPU (it was not collected in time)"
                    .into(),
                action: "run bcd status again; if it stays unknown, run bcd doctor".into(),
                state: HealthState::Unknown,
            };
            out.push(line(
                s.uuid.clone(),
                Some(s),
                HealthState::Unknown,
                vec![reason],
            ));
        }
    }
    out.sort_by_key(|g| g.index.unwrap_or(u32::MAX));
    out
}

fn line(
    uuid: GpuUuid,
    s: Option<&GpuSample>,
    health: HealthState,
    reasons: Vec<Reason>,
) -> GpuStatus {
    GpuStatus {
        index: None,
        uuid,
        name: None,
        bus_id: None,
        utilization_gpu_pct: s.and_then(|s| s.utilization_gpu_pct),
        memory_used_mib: s.and_then(|s| s.memory_used_mib),
        memory_total_mib: s.and_then(|s| s.memory_total_mib),
        temperature_c: s.and_then(|s| s.temperature_c),
        power_draw_w: s.and_then(|s| s.power_draw_w),
        power_limit_w: s.and_then(|s| s.power_limit_w),
        compute_processes: s.and_then(|s| s.compute_processes),
        healthy: health.schedulable(),
        health,
        reasons,
        passed_through: false,
        reboot_required: false,
        remediation: None,
    }
}

/// [`status_within`] with [`STATUS_WAIT`] and the catalog as it is.
///
/// # Errors
/// As [`status_within`].
pub async fn status(host: &Host, data_dir: &Path) -> Result<StatusReport, StatusError> {
    status_within(host, data_dir, &XidPolicy::default(), STATUS_WAIT).await
}

/// Samples `host`'s GPUs and collects its inventory concurrently, both within `wait`, reads
/// this boot's conditions from `<data_dir>/faults.json` (a note says so when there is none to
/// read), and judges every GPU.
///
/// # Errors
/// [`StatusError`] when there is nothing to print: no driver, or no sample and no GPU in
/// procfs either.
pub async fn status_within(
    host: &Host,
    data_dir: &Path,
    policy: &XidPolicy,
    wait: Duration,
) -> Result<StatusReport, StatusError> {
    let runner = Runner::new(host.nvidia_smi());
    let deadline = tokio::time::Instant::now() + wait;
    let (sampled, collected) = tokio::join!(
        tokio::time::timeout_at(deadline, csv_samples(&runner)),
        tokio::time::timeout_at(deadline, collect(host, None)),
    );
    let mut notes = Vec::new();
    // The inventory's -q -x, read anyway: the one document for the health fields, the MIG
    // devices' memory and, where the CSV cannot stand in, the samples themselves.
    let xml = collected
        .as_ref()
        .ok()
        .and_then(|c| c.snapshot.as_ref())
        .map(|s| &s.xml);
    let (samples, sample_error) = match sampled {
        Err(_) => (Vec::new(), Some(StatusError::Timeout(wait.as_secs()))),
        Ok(Err(e)) if e.is_no_driver() => return Err(StatusError::NoDriver),
        Ok(Err(e)) => (Vec::new(), Some(StatusError::Samples(e))),
        Ok(Ok(Ok(mut s))) => {
            if let Some(xml) = xml {
                attach_mig_memory(&mut s, xml);
            }
            (s, None)
        }
        Ok(Ok(Err(why))) => match (xml, collected.as_ref().ok()) {
            (Some(xml), _) => (samples_from_xml(xml), None),
            (None, Some(c)) => {
                let e = c.snapshot_error.clone().map_or_else(
                    || StatusError::Timeout(wait.as_secs()),
                    StatusError::Samples,
                );
                notes.push(format!("the sample needs nvidia-smi -q -x ({why})"));
                (Vec::new(), Some(e))
            }
            (None, None) => (Vec::new(), Some(StatusError::Timeout(wait.as_secs()))),
        },
    };
    let (inventory, driver, silent) = match collected {
        Err(_) => {
            // The driver's own list (procfs) answers at once; nvidia-smi did not.
            let section = merge(&procfs::collect(host), None);
            let why = format!("no answer within {}s", wait.as_secs());
            (Some(Inventory::new(section)), None, Some(why))
        }
        Ok(c) => {
            let silent = c.snapshot_error.as_ref().map(ToString::to_string);
            let driver = c.snapshot.as_ref().map(|s| driver_readings(&s.xml));
            // A GPU bcd leaves out has no line: its note is where it shows.
            notes.extend(c.left_out);
            let mut inventory = c.inventory;
            // The GPUs a VM has, from the passthrough memory (read, never written here).
            match crate::inventory::memory::GpuMemory::new(data_dir).load() {
                Ok(seen) => {
                    let mut section = inventory.gpu.clone();
                    let vm = crate::inventory::memory::passed_through(host, &seen, &section.gpus);
                    if !vm.is_empty() {
                        section.gpus.extend(vm);
                        inventory = Inventory::new(section);
                    }
                }
                Err(e) => notes.push(format!("the GPUs passed through to VMs are unknown: {e}")),
            }
            (Some(inventory), driver, silent)
        }
    };
    if let Some(e) = &sample_error {
        if inventory.as_ref().is_none_or(|i| i.gpu.gpus.is_empty()) {
            return Err(e.clone());
        }
    }
    let (conditions, history) = match read_boot_id(host).and_then(|b| read_record(data_dir, &b)) {
        Ok(Some(c)) => c,
        Ok(None) => {
            notes.push(no_record(data_dir, data_dir.is_dir()));
            (Vec::new(), Vec::new())
        }
        Err(e) => {
            notes.push(format!("XIDs unknown: {e}"));
            (Vec::new(), Vec::new())
        }
    };
    let fabric_manager_down = crate::sys::systemd::fabric_manager(host).await.down();
    let links = inventory
        .as_ref()
        .map(|i| super::pcie::link_widths(host, i))
        .unwrap_or_default();
    // One collection: no correctable rate between two.
    let evidence = Evidence::new(&conditions)
        .with_board(inventory.as_ref().map_or(&[][..], |i| &i.gpu.gpus))
        .with_history(&history)
        .with_policy(policy)
        .with_driver(driver.as_ref(), silent.as_deref())
        .with_fabric_manager_down(fabric_manager_down)
        .with_samples(&samples)
        .with_links(&links);
    Ok(StatusReport {
        gpus: gpu_statuses(&samples, inventory.as_ref(), &evidence),
        notes,
        nvidia_smi_error: sample_error.map(|e| e.to_string()),
    })
}

/// The columns of [`render`]'s table, in order.
pub const COLUMNS: [&str; 9] = [
    "GPU", "NAME", "BUS ID", "STATE", "UTIL", "MEMORY", "TEMP", "POWER", "PROCS",
];

/// How far a GPU's reasons are indented under its row.
const REASON_INDENT: &str = "    ";

/// The table `bcd status` prints: a header row, then one row per GPU (its index, model, bus
/// id, state word, utilisation, memory, temperature, power and compute processes, `-` where
/// a reading is missing), with each reason and its action on its own indented line below it;
/// then the notes, each on a line of its own. `colour` paints the state words. What
/// `nvidia-smi` said (names, messages, notes) has its control characters escaped.
pub fn render(report: &StatusReport, colour: bool) -> String {
    use crate::term::table::{Cell, Table};
    use crate::term::units::{self, or_missing, shown_or_missing, MISSING};
    let shown = |s: &str| crate::smi::escape_control(s).into_owned();
    let mut table = Table::new(&COLUMNS);
    for g in &report.gpus {
        let word = g.health.name().to_ascii_uppercase();
        let mut below: Vec<String> = Vec::new();
        if g.passed_through {
            below.push(format!(
                "{REASON_INDENT}passed through to a VM (the host cannot sample it)"
            ));
        } else if !sampled(g) {
            // A node's first seconds, or an nvidia-smi that gave nothing.
            below.push(format!("{REASON_INDENT}no sample yet"));
        }
        for r in &g.reasons {
            below.push(format!(
                "{REASON_INDENT}{}: {} -> {}",
                r.kind,
                shown(&r.message),
                r.action
            ));
        }
        table.row(
            vec![
                Cell::plain(shown_or_missing(g.index)),
                Cell::plain(shown(g.name.as_deref().unwrap_or(g.uuid.as_str()))),
                Cell::plain(or_missing(g.bus_id.as_ref(), units::bus_id)),
                Cell::painted(word, crate::term::colour::of_health(g.health)),
                Cell::plain(or_missing(g.utilization_gpu_pct, units::percent)),
                Cell::plain(
                    units::memory_of(g.memory_used_mib, g.memory_total_mib)
                        .unwrap_or_else(|| MISSING.into()),
                ),
                Cell::plain(or_missing(g.temperature_c, units::temperature)),
                Cell::plain(
                    units::power_of(g.power_draw_w, g.power_limit_w)
                        .unwrap_or_else(|| MISSING.into()),
                ),
                Cell::plain(shown_or_missing(g.compute_processes)),
            ],
            below,
        );
    }
    let mut out = table.render(colour);
    if let Some(e) = &report.nvidia_smi_error {
        out.push_str(&format!("note: {e}\n"));
    }
    for note in &report.notes {
        out.push_str(&format!("note: {}\n", shown(note)));
    }
    out
}

/// Whether `nvidia-smi` gave any reading of the GPU.
fn sampled(g: &GpuStatus) -> bool {
    g.utilization_gpu_pct.is_some()
        || g.memory_used_mib.is_some()
        || g.temperature_c.is_some()
        || g.power_draw_w.is_some()
}

/// The header of [`render_csv`]: the JSON's field names, units in the name, not the cells.
pub const CSV_HEADER: &str = "index,uuid,name,bus_id,health,utilization_gpu_pct,memory_used_mib,memory_total_mib,temperature_c,power_draw_w,power_limit_w,compute_processes";

/// `bcd status --format csv`: [`CSV_HEADER`], then one GPU a row, numbers without units, an
/// empty cell where a reading is missing; a cell with a comma, a quote or a line break is
/// quoted (RFC 4180). Reasons and notes are left to the table and the JSON.
pub fn render_csv(report: &StatusReport) -> String {
    let cell = |v: Option<String>| v.map(|v| csv_field(&v)).unwrap_or_default();
    let mut out = format!("{CSV_HEADER}\n");
    for g in &report.gpus {
        let row = [
            cell(g.index.map(|i| i.to_string())),
            cell(Some(g.uuid.to_string())),
            cell(
                g.name
                    .as_deref()
                    .map(|n| crate::smi::escape_control(n).into_owned()),
            ),
            cell(g.bus_id.as_ref().map(crate::term::units::bus_id)),
            cell(Some(g.health.name().to_owned())),
            cell(g.utilization_gpu_pct.map(|v| v.to_string())),
            cell(g.memory_used_mib.map(|v| v.to_string())),
            cell(g.memory_total_mib.map(|v| v.to_string())),
            cell(g.temperature_c.map(|v| v.to_string())),
            cell(g.power_draw_w.map(|v| format!("{v:.0}"))),
            cell(g.power_limit_w.map(|v| format!("{v:.0}"))),
            cell(g.compute_processes.map(|v| v.to_string())),
        ];
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

/// One CSV field, quoted when it must be.
fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_owned()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::health::ConditionKind;

    fn hosts() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts")
    }

    /// A copy of `testdata/hosts/<name>` in `dir`, with the replay script beside it as the
    /// host's `bin/nvidia-smi` expects; returns the copy's folder.
    pub(crate) fn copy_host(dir: &Path, name: &str) -> std::path::PathBuf {
        let copy = dir.join(name);
        let copied = std::process::Command::new("cp")
            .arg("-a")
            .arg(hosts().join(name))
            .arg(&copy)
            .status()
            .unwrap();
        assert!(copied.success(), "cp -a of the fake host {name} failed");
        std::fs::copy(
            hosts().join("replay-nvidia-smi"),
            dir.join("replay-nvidia-smi"),
        )
        .unwrap();
        copy
    }

    // What broke: a node's first seconds (no sample yet) printed `- busy -/- MiB -°C -/- W`
    // with nothing to say why.
    #[test]
    fn a_gpu_without_a_sample_says_so_under_its_row() {
        let report = StatusReport {
            gpus: vec![line(
                "GPU-8f4c6a52-1b2e-4d3a-9c7f-0123456789ab".parse().unwrap(),
                None,
                HealthState::Healthy,
                Vec::new(),
            )],
            notes: Vec::new(),
            nvidia_smi_error: None,
        };
        let text = render(&report, false);
        assert_eq!(
            text,
            "GPU  NAME                                      BUS ID  STATE    UTIL  MEMORY  TEMP  POWER  PROCS\n\
             -    GPU-8f4c6a52-1b2e-4d3a-9c7f-0123456789ab  -       HEALTHY  -     -       -     -      -\n    \
             no sample yet\n"
        );
    }

    // What broke: `bcd status` wrote `58°C 611/700 W 45123/81559 MiB` in free-form lines with
    // no header, and no bus id; the state word moved with the name's length.
    #[tokio::test]
    async fn status_is_a_table_with_a_header_and_aligned_columns() {
        let host = Host::fake(hosts().join("hgx-h100"));
        let data = tempfile::tempdir().unwrap();
        let report = status(&host, data.path()).await.unwrap();
        let text = render(&report, false);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("GPU  NAME "), "{text}");
        let state = lines[0].find("STATE").unwrap();
        let memory = lines[0].find("MEMORY").unwrap();
        for row in &lines[1..=8] {
            assert!(row[state..].starts_with("HEALTHY "), "{text}");
            assert!(row[memory..].contains(" MiB / 81559 MiB"), "{text}");
        }
        assert!(
            lines[1].starts_with("0    NVIDIA H100 80GB HBM3  0000:18:00.0  HEALTHY"),
            "{text}"
        );
        assert!(
            lines[1].contains(" °C ") && lines[1].contains(" W / 700 W "),
            "{text}"
        );
        // A colour only where asked, and on the state word alone.
        let painted = render(&report, true);
        assert_eq!(
            painted.matches("\x1b[32mHEALTHY\x1b[0m").count(),
            8,
            "{painted}"
        );
        assert_eq!(painted.matches('\x1b').count(), 16, "{painted}");
        assert!(!text.contains('\x1b'));
        // The JSON names the bus id as the inventory does.
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["gpus"][0]["bus_id"], "00000000:18:00.0");
    }

    // CSV: a header, one GPU a row, numbers without units.
    #[tokio::test]
    async fn csv_is_one_gpu_a_row_without_units() {
        let host = Host::fake(hosts().join("hgx-h100"));
        let data = tempfile::tempdir().unwrap();
        let mut report = status(&host, data.path()).await.unwrap();
        report.gpus[1].name = Some("A, \"quoted\" name".into());
        let text = render_csv(&report);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 9, "{text}");
        assert_eq!(lines[0], CSV_HEADER);
        let cells: Vec<&str> = lines[1].split(',').collect();
        assert_eq!(cells.len(), 12, "{text}");
        assert_eq!(
            cells[0..5],
            [
                "0",
                "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b",
                "NVIDIA H100 80GB HBM3",
                "0000:18:00.0",
                "healthy"
            ]
        );
        assert_eq!(cells[7], "81559");
        assert!(
            cells
                .iter()
                .all(|c| !c.contains(' ') || c.contains("NVIDIA")),
            "{text}"
        );
        assert!(lines[2].contains(",\"A, \"\"quoted\"\" name\","), "{text}");
    }

    // What broke: throttling came only from the -q -x document of the last collection (minutes
    // old), never from the live sample: a GPU slowed down by a power brake read healthy.
    #[tokio::test]
    async fn a_throttling_sample_makes_the_gpu_degraded_while_it_lasts() {
        let dir = tempfile::tempdir().unwrap();
        let copy = copy_host(dir.path(), "hgx-h100");
        let answers = copy.join("answers/samples.out");
        let text = std::fs::read_to_string(&answers).unwrap();
        let first = text.lines().next().unwrap();
        let braked = first.replace(
            "Not Active, Not Active, Not Active, Not Active",
            "Not Active, Not Active, Active, Not Active",
        );
        std::fs::write(&answers, text.replacen(first, &braked, 1)).unwrap();
        let host = Host::fake(&copy);
        let data = tempfile::tempdir().unwrap();
        let report = status(&host, data.path()).await.unwrap();
        let g = &report.gpus[0];
        assert_eq!(
            (g.health, g.healthy),
            (HealthState::Degraded, true),
            "{g:?}"
        );
        assert_eq!(g.reasons.len(), 1, "{g:?}");
        assert_eq!(g.reasons[0].kind, "Throttled");
        assert_eq!(
            g.reasons[0].message,
            "clocks slowed down: hw_power_brake_slowdown"
        );
        assert_eq!(
            g.reasons[0].action,
            "check the GPU's cooling and power supply: it may take work but runs slower while this lasts"
        );
        assert_eq!(report.gpus[1].health, HealthState::Healthy);
        // Once the sample says it is over, the GPU is healthy again: the -q -x says nothing.
        std::fs::write(&answers, text).unwrap();
        let report = status(&host, data.path()).await.unwrap();
        assert_eq!(report.gpus[0].health, HealthState::Healthy, "{report:?}");
    }

    // What broke: a driver that refuses a clock reason field would have sent every sample to
    // the full -q -x; it is asked the sample query without them instead.
    #[tokio::test]
    async fn a_driver_refusing_a_clock_reason_is_sampled_without_them() {
        let dir = tempfile::tempdir().unwrap();
        let copy = copy_host(dir.path(), "hgx-h100");
        let answers = copy.join("answers");
        let full = std::fs::read_to_string(answers.join("samples.out")).unwrap();
        let short: String = full
            .lines()
            .map(|l| {
                let cells: Vec<&str> = l.split(", ").collect();
                format!("{}\n", cells[..14].join(", "))
            })
            .collect();
        std::fs::write(answers.join("samples-without-clock-reasons.out"), short).unwrap();
        std::fs::write(
            answers.join("samples.out"),
            "Field \"clocks_throttle_reasons.hw_power_brake_slowdown\" is not a valid field to query.\n",
        )
        .unwrap();
        std::fs::write(answers.join("samples.exit"), "2\n").unwrap();
        let runner = Runner::new(Host::fake(&copy).nvidia_smi());
        let samples = csv_samples(&runner)
            .await
            .unwrap()
            .expect("the CSV without the clock reasons stands in");
        assert_eq!(samples.len(), 8);
        assert_eq!(samples[0].memory_total_mib, Some(81559));
        assert!(!samples[0].clock_events.any_reading());
    }

    #[tokio::test]
    async fn hgx_h100_prints_every_gpu_and_marks_the_one_with_an_xid() {
        let host = Host::fake(hosts().join("hgx-h100"));
        let data = tempfile::tempdir().unwrap();
        let boot = read_boot_id(&host).unwrap();
        let mut store = super::super::faults::FaultStore::open(data.path(), &boot).unwrap();
        store
            .raise(
                &ConditionKind::Xid(79),
                "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b".parse().unwrap(),
                "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
            )
            .unwrap();
        let report = status(&host, data.path()).await.unwrap();
        assert_eq!(report.gpus.len(), 8, "{report:?}");
        let text = render(&report, false);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].starts_with("0    NVIDIA H100 80GB HBM3"), "{text}");
        assert!(lines[1].contains("  UNHEALTHY  "), "{text}");
        assert_eq!(
            lines[2],
            "    Xid79: Xid 79 (GPU has fallen off the bus, class bus) 1 time(s) this boot: NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus. -> reboot the node"
        );
        assert_eq!(text.matches("UNHEALTHY").count(), 1, "{text}");
        assert_eq!(text.matches("  HEALTHY").count(), 7, "{text}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["gpus"][0]["healthy"], false);
        assert_eq!(json["gpus"][0]["health"], "unhealthy");
        assert_eq!(json["gpus"][0]["reasons"][0]["kind"], "Xid79");
        assert_eq!(json["gpus"][0]["reasons"][0]["action"], "reboot the node");
        assert_eq!(json["gpus"][1]["healthy"], true);
        assert_eq!(json["gpus"][1]["health"], "healthy");
    }

    // What broke: every XID made its GPU unhealthy until a reset, so an application's
    // graphics engine exception drained a healthy GPU.
    #[tokio::test]
    async fn an_application_xid_leaves_the_gpu_schedulable_with_a_restart_action() {
        let host = Host::fake(hosts().join("hgx-h100"));
        let data = tempfile::tempdir().unwrap();
        let boot = read_boot_id(&host).unwrap();
        let mut store = super::super::faults::FaultStore::open(data.path(), &boot).unwrap();
        let gpu1 = "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a";
        store
            .raise(
                &ConditionKind::Xid(13),
                gpu1.parse().unwrap(),
                "NVRM: Xid (PCI:0000:2a:00): 13, Graphics Exception",
            )
            .unwrap();
        store
            .raise(
                &ConditionKind::Xid(31),
                gpu1.parse().unwrap(),
                "NVRM: Xid (PCI:0000:2a:00): 31, MMU Fault",
            )
            .unwrap();
        let report = status(&host, data.path()).await.unwrap();
        let g = &report.gpus[1];
        assert_eq!((g.health, g.healthy), (HealthState::Degraded, true));
        assert_eq!(g.reasons.len(), 2);
        for r in &g.reasons {
            assert_eq!(r.action, "restart the application; the GPU is fine");
        }
        // The node's override makes Xid 13 ignored and Xid 31 unhealthy.
        let policy = XidPolicy::new([13].into(), [31].into()).unwrap();
        let report = status_within(&host, data.path(), &policy, STATUS_WAIT)
            .await
            .unwrap();
        let g = &report.gpus[1];
        assert_eq!(g.health, HealthState::Unhealthy);
        assert_eq!(g.reasons.len(), 1);
        assert_eq!(
            g.reasons[0].action,
            format!("reset the GPU: bcd gpu reset {gpu1}")
        );
    }

    // What broke: the driver's own verdict (gpu_recovery_action, gpu_reset_status), the
    // fabric's state and health and the clock event reasons were read by no one.
    #[tokio::test]
    async fn the_drivers_recovery_action_fabric_and_throttling_decide_the_state() {
        let host = Host::fake(hosts().join("hgx-faults"));
        let data = tempfile::tempdir().unwrap();
        let report = status(&host, data.path()).await.unwrap();
        let got: Vec<(u32, HealthState, Vec<&str>)> = report
            .gpus
            .iter()
            .map(|g| {
                (
                    g.index.unwrap(),
                    g.health,
                    g.reasons.iter().map(|r| r.action.as_str()).collect(),
                )
            })
            .collect();
        let u = |i: usize| report.gpus[i].uuid.clone();
        let reset = |i| format!("reset the GPU: bcd gpu reset {}", u(i));
        let drain = format!(
            "drain the GPU, then reset it: stop its jobs, then bcd gpu reset {}",
            u(7)
        );
        let route = format!("reset the GPU: bcd gpu reset {}; if the route stays unhealthy, check its NVLinks (nvidia-smi nvlink -s)", u(2));
        use HealthState::{Degraded, Healthy, Unhealthy};
        assert_eq!(
            got,
            vec![
                (0, Unhealthy, vec![reset(0).as_str()]),
                (1, Unhealthy, vec!["reboot the node"]),
                (2, Unhealthy, vec![route.as_str(), "watch the GPU: it may take work at less NVLink bandwidth; check its NVLinks (nvidia-smi nvlink -s)"]),
                (3, Healthy, vec![]),
                (4, Degraded, vec!["check the GPU's cooling and power supply: it may take work but runs slower while this lasts"]),
                (5, Unhealthy, vec![reset(5).as_str()]),
                (6, Unhealthy, vec!["start the fabric manager (systemctl enable --now nvidia-fabricmanager) and wait for the fabric to complete; if it stays, read nvidia-fabricmanager's log"]),
                (7, Unhealthy, vec![drain.as_str()]),
            ]
        );
        assert_eq!(
            report.gpus[4].reasons[0].message,
            "clocks slowed down: hw_thermal_slowdown"
        );
        assert_eq!(
            report.gpus[1].reasons[0].message,
            "the driver's recovery action is \"Reboot\""
        );
        assert!(report.gpus[4].healthy && !report.gpus[0].healthy);
    }

    // What broke: NVSwitches on the bus without a fabric manager left every GPU healthy,
    // although CUDA fails on all of them.
    #[tokio::test]
    async fn nvswitches_without_a_fabric_manager_make_every_gpu_unhealthy() {
        let host = Host::fake(hosts().join("hgx-no-fabric-manager"));
        let data = tempfile::tempdir().unwrap();
        let report = status(&host, data.path()).await.unwrap();
        assert_eq!(report.gpus.len(), 8);
        for g in &report.gpus {
            assert_eq!(g.health, HealthState::Unhealthy, "{g:?}");
            assert_eq!(
                g.reasons[0].action,
                "start the fabric manager: systemctl enable --now nvidia-fabricmanager"
            );
        }
        // The same board with the fabric manager running is healthy.
        let report = status(&Host::fake(hosts().join("hgx-h100")), data.path())
            .await
            .unwrap();
        assert!(report.gpus.iter().all(|g| g.health == HealthState::Healthy));
    }

    // What broke: with nvidia-smi wedged, bcd status printed nothing but a timeout; the GPUs
    // the driver lists must stay listed, unknown, with the action.
    #[tokio::test]
    async fn a_wedged_nvidia_smi_lists_the_drivers_gpus_as_unknown() {
        let host = Host::fake(hosts().join("wedged"));
        let data = tempfile::tempdir().unwrap();
        let report = status_within(
            &host,
            data.path(),
            &XidPolicy::default(),
            Duration::from_secs(1),
        )
        .await
        .unwrap();
        assert_eq!(report.gpus.len(), 1, "{report:?}");
        let g = &report.gpus[0];
        assert_eq!(g.uuid, "GPU-940af793-c02c-d660-3221-9bbb6e5e0bfa");
        assert_eq!((g.health, g.healthy), (HealthState::Unknown, false));
        assert_eq!(g.reasons[0].kind, "NvidiaSmiSilent");
        assert!(
            g.reasons[0]
                .action
                .starts_with("check the GPU: nvidia-smi hangs when a GPU is wedged"),
            "{g:?}"
        );
        assert!(report.nvidia_smi_error.is_some());
        let text = render(&report, false);
        assert!(
            text.lines().nth(1).unwrap().contains("  UNKNOWN  "),
            "{text}"
        );
    }

    // What broke: for "Driver/library version mismatch" and "couldn't communicate with the
    // NVIDIA driver" bcd status said to reset the GPU or reboot, where bcd hardware and bcd
    // doctor said to reload the modules (or load them): one hint table gives both now.
    #[tokio::test]
    async fn a_broken_driver_gets_the_hint_doctor_gives_not_a_reset() {
        for (said, code, hint) in [
            (
                "Failed to initialize NVML: Driver/library version mismatch",
                18,
                "unload and reload the nvidia modules",
            ),
            (
                "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.",
                9,
                "run modprobe nvidia",
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let copy = copy_host(dir.path(), "passthrough");
            for key in ["q-x", "samples", "probe"] {
                let _ = std::fs::remove_file(copy.join(format!("answers/{key}.out")));
                std::fs::write(copy.join(format!("answers/{key}.out")), format!("{said}\n")).unwrap();
                std::fs::write(copy.join(format!("answers/{key}.exit")), format!("{code}\n")).unwrap();
            }
            let data = tempfile::tempdir().unwrap();
            let report = status(&Host::fake(&copy), data.path()).await.unwrap();
            assert_eq!(report.gpus.len(), 1, "{report:?}");
            let r = &report.gpus[0].reasons[0];
            assert_eq!((report.gpus[0].health, r.kind.to_string().as_str()), (HealthState::Unknown, "NvidiaSmiSilent"));
            assert!(r.action.contains(hint), "{said}: {}", r.action);
            assert!(!r.action.contains("reboot the node"), "{}", r.action);
        }
    }

    /// A copy of r470-old whose driver names GPU 1 with a UUID that names no GPU, as a driver
    /// that failed to initialise it does.
    fn host_with_an_unnamed_gpu(dir: &Path) -> std::path::PathBuf {
        let copy = copy_host(dir, "r470-old");
        for file in [
            "answers/q-x.out",
            "answers/L.out",
            "answers/samples.out",
            "root/proc/driver/nvidia/gpus/0000:d8:00.0/information",
        ] {
            let path = copy.join(file);
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let text = text.replace(
                "GPU-770a8583-ddab-d174-2973-722164bb8d69",
                "GPU-????????-????-????-????-????????????",
            );
            std::fs::write(&path, text).unwrap();
        }
        copy
    }

    // What broke: a GPU the driver lists under a UUID that names no GPU was left out of the
    // inventory, and bcd status said nothing of it (only bcd hardware did, on stderr).
    #[tokio::test]
    async fn a_gpu_left_out_of_the_inventory_is_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(host_with_an_unnamed_gpu(dir.path()));
        let data = tempfile::tempdir().unwrap();
        let report = status(&host, data.path()).await.unwrap();
        assert_eq!(report.gpus.len(), 1, "{report:?}");
        let text = render(&report, false);
        assert!(
            text.contains("note: the driver lists a GPU at 0000:d8:00.0 with UUID \"GPU-????????-????-????-????-????????????\", which names no GPU"),
            "{text}"
        );
        assert!(text.contains("it is left out of the inventory"), "{text}");
    }

    // A GPU name or a note with nvidia-smi's raw ESC bytes reached the terminal.
    #[tokio::test]
    async fn control_bytes_in_names_and_notes_are_escaped() {
        let host = Host::fake(hosts().join("hgx-h100"));
        let data = tempfile::tempdir().unwrap();
        let mut report = status(&host, data.path()).await.unwrap();
        report.gpus[0].name = Some("H100\u{1b}[2J".into());
        report.notes.push("smi said \u{1b}]0;x\u{7}".into());
        let text = render(&report, false);
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text:?}"
        );
        assert!(text.contains("H100\\x1b[2J"), "{text}");
    }

    #[tokio::test]
    async fn no_driver_is_the_no_driver_sentence() {
        let host = Host::fake(hosts().join("no-driver"));
        let data = tempfile::tempdir().unwrap();
        let err = status(&host, data.path()).await.unwrap_err();
        assert!(matches!(err, StatusError::NoDriver));
        assert_eq!(
            err.to_string(),
            "nvml: nvidia-smi not found (no NVIDIA driver on this host)"
        );
    }
}
