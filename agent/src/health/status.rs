//! `bcd status`: one line per GPU from a live sample, with `UNHEALTHY` and the reasons where
//! the healthy rule fails.
//!
//! The sample and the inventory (which holds the ECC and row-remap counters the rule needs)
//! are read concurrently, both within [`STATUS_WAIT`]. Without the sample there is nothing to
//! print; without the inventory the lines are printed with their health unknown.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::faults::{read_boot_id, read_this_boot};
use super::{unhealthy_reasons, Condition};
use crate::host::Host;
use crate::inventory::collect::collect;
use crate::inventory::document::Inventory;
use crate::smi::runner::{RunError, Runner};
use crate::smi::samples::GpuSample;
use crate::smi::snapshot::{samples, SnapshotError};

/// The longest `bcd status` waits for the sample and the inventory.
pub const STATUS_WAIT: Duration = Duration::from_secs(10);

/// One GPU's line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuStatus {
    /// The inventory's index; absent when the inventory was not read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// The GPU's UUID.
    pub uuid: String,
    /// The model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
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
    /// Compute processes (graphics processes are no workload).
    pub compute_processes: u32,
    /// The healthy rule's verdict; absent when the inventory could not be read in time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healthy: Option<bool>,
    /// Why it is unhealthy.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

/// `bcd status`'s result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusReport {
    /// One per sampled GPU, in the inventory's index order when known.
    pub gpus: Vec<GpuStatus>,
    /// What could not be read, in words (the health is then incomplete).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Why there is no status to print.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StatusError {
    /// No NVIDIA driver on this host.
    #[error("{}", RunError::NoDriver)]
    NoDriver,
    /// The sample failed.
    #[error("cannot sample the GPUs: {0}")]
    Samples(SnapshotError),
    /// The sample took longer than [`STATUS_WAIT`].
    #[error("nvidia-smi did not give a sample within {}s: a GPU may be wedged (Xid 79 or 119)", STATUS_WAIT.as_secs())]
    Timeout,
}

/// Joins samples with the inventory (by UUID) and the conditions into status lines.
pub fn gpu_statuses(
    samples: &[GpuSample],
    inventory: Option<&Inventory>,
    conditions: &[Condition],
) -> Vec<GpuStatus> {
    let mut out: Vec<GpuStatus> = samples
        .iter()
        .map(|s| {
            let gpu = inventory.and_then(|inv| inv.gpu.gpus.iter().find(|g| g.uuid == s.uuid));
            let reasons = gpu.map(|g| unhealthy_reasons(g, conditions));
            GpuStatus {
                index: gpu.map(|g| g.index),
                uuid: s.uuid.clone(),
                name: gpu.and_then(|g| g.name.clone()),
                utilization_gpu_pct: s.utilization_gpu_pct,
                memory_used_mib: s.memory_used_mib,
                memory_total_mib: s.memory_total_mib,
                temperature_c: s.temperature_c,
                power_draw_w: s.power_draw_w,
                power_limit_w: s.power_limit_w,
                compute_processes: s.compute_processes,
                healthy: reasons.as_ref().map(Vec::is_empty),
                reasons: reasons.unwrap_or_default(),
            }
        })
        .collect();
    out.sort_by_key(|g| g.index.unwrap_or(u32::MAX));
    out
}

/// Samples `host`'s GPUs and collects its inventory concurrently, both within
/// [`STATUS_WAIT`], and reads this boot's conditions from `<data_dir>/faults.json`.
///
/// # Errors
/// [`StatusError`] when there is no sample: no driver, a failed sample, or none in time.
pub async fn status(host: &Host, data_dir: &Path) -> Result<StatusReport, StatusError> {
    let runner = Runner::new(host.nvidia_smi());
    let deadline = tokio::time::Instant::now() + STATUS_WAIT;
    let (sampled, collected) = tokio::join!(
        tokio::time::timeout_at(deadline, samples(&runner)),
        tokio::time::timeout_at(deadline, collect(host, None)),
    );
    let (samples, _source) = match sampled {
        Err(_) => return Err(StatusError::Timeout),
        Ok(Err(e)) if e.is_no_driver() => return Err(StatusError::NoDriver),
        Ok(Err(e)) => return Err(StatusError::Samples(e)),
        Ok(Ok(s)) => s,
    };
    let mut notes = Vec::new();
    let inventory = match collected {
        Err(_) => {
            notes.push(format!(
                "the inventory was not collected within {}s: health unknown",
                STATUS_WAIT.as_secs()
            ));
            None
        }
        Ok(c) => {
            if let Some(e) = &c.snapshot_error {
                notes.push(format!(
                    "the inventory has no ECC or row-remap counters: {e}"
                ));
            }
            Some(c.inventory)
        }
    };
    let conditions = match read_boot_id(host).and_then(|b| read_this_boot(data_dir, &b)) {
        Ok(c) => c,
        Err(e) => {
            notes.push(format!("XIDs unknown: {e}"));
            Vec::new()
        }
    };
    Ok(StatusReport {
        gpus: gpu_statuses(&samples, inventory.as_ref(), &conditions),
        notes,
    })
}

fn or_dash<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// The lines `bcd status` prints; what `nvidia-smi` said (names, notes) has its control
/// characters escaped.
pub fn render(report: &StatusReport) -> String {
    let shown = |s: &str| crate::smi::escape_control(s).into_owned();
    let mut out = String::new();
    for g in &report.gpus {
        let mut line = format!(
            "GPU {}  {}  {} busy  {}/{} MiB  {}°C  {}/{} W  {} process(es)",
            or_dash(g.index),
            shown(g.name.as_deref().unwrap_or(&g.uuid)),
            or_dash(g.utilization_gpu_pct.map(|p| format!("{p}%"))),
            or_dash(g.memory_used_mib),
            or_dash(g.memory_total_mib),
            or_dash(g.temperature_c),
            or_dash(g.power_draw_w.map(|w| format!("{w:.0}"))),
            or_dash(g.power_limit_w.map(|w| format!("{w:.0}"))),
            g.compute_processes,
        );
        if g.healthy == Some(false) {
            line.push_str(&format!("  UNHEALTHY ({})", shown(&g.reasons.join("; "))));
        }
        out.push_str(&line);
        out.push('\n');
    }
    for note in &report.notes {
        out.push_str(&format!("note: {}\n", shown(note)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts")
    }

    #[tokio::test]
    async fn hgx_h100_prints_every_gpu_and_marks_the_one_with_an_xid() {
        let host = Host::fake(hosts().join("hgx-h100"));
        let data = tempfile::tempdir().unwrap();
        let boot = read_boot_id(&host).unwrap();
        let mut store = super::super::faults::FaultStore::open(data.path(), &boot).unwrap();
        store
            .raise(
                "Xid79",
                "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b",
                "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
            )
            .unwrap();
        let report = status(&host, data.path()).await.unwrap();
        assert_eq!(report.gpus.len(), 8, "{report:?}");
        let text = render(&report);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("GPU 0  NVIDIA H100 80GB HBM3"),
            "{text}"
        );
        assert!(lines[0].ends_with("UNHEALTHY (Xid79 this boot)"), "{text}");
        assert_eq!(text.matches("UNHEALTHY").count(), 1, "{text}");
        assert!(report.gpus.iter().all(|g| g.healthy.is_some()));
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["gpus"][0]["healthy"], false);
        assert_eq!(json["gpus"][1]["healthy"], true);
    }

    // A GPU name or a note with nvidia-smi's raw ESC bytes reached the terminal.
    #[tokio::test]
    async fn control_bytes_in_names_and_notes_are_escaped() {
        let host = Host::fake(hosts().join("hgx-h100"));
        let data = tempfile::tempdir().unwrap();
        let mut report = status(&host, data.path()).await.unwrap();
        report.gpus[0].name = Some("H100\u{1b}[2J".into());
        report.notes.push("smi said \u{1b}]0;x\u{7}".into());
        let text = render(&report);
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
