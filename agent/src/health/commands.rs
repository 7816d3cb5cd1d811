//! `bcd status` and `bcd diag`: what they print and their exit statuses.

use std::io::Write;
use std::process::ExitCode;

use super::diag::{diag_nvml, link_widths, render as render_diag, DiagRequest, NvmlState};
use super::faults::{read_boot_id, read_this_boot};
use super::status::{render as render_status, status_within, StatusReport, STATUS_WAIT};
use crate::cli::Global;
use crate::inventory::collect::collect;

/// Writes to stdout; a closed pipe ends quietly.
fn print(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

fn print_json<T: serde::Serialize>(value: &T) -> bool {
    match serde_json::to_string_pretty(value) {
        Ok(json) => {
            print(&format!("{json}\n"));
            true
        }
        Err(e) => {
            eprintln!("bcd: cannot encode the result: {e}");
            false
        }
    }
}

/// Asks a running `bcd node` for its status (within [`STATUS_WAIT`]); `None` when none
/// answers, or when it has no inventory yet (it is starting), so the caller reads itself.
pub async fn status_from_node(socket: &std::path::Path) -> Option<StatusReport> {
    let asked = tokio::time::timeout(
        STATUS_WAIT,
        crate::node::client::call(socket, "GET", "/v1/status", None),
    )
    .await;
    let answer = match asked {
        Ok(Ok(answer)) => answer,
        // Nothing listens: the ordinary case without a node; said only when it answered badly.
        Ok(Err(crate::node::client::ApiError::Connect { .. })) => return None,
        Ok(Err(e)) => {
            eprintln!("bcd: {e}; reading the GPUs directly");
            return None;
        }
        Err(_) => {
            eprintln!(
                "bcd: the bcd node service at {} did not answer within {}s; reading the GPUs directly",
                socket.display(),
                STATUS_WAIT.as_secs()
            );
            return None;
        }
    };
    if answer["collections"].as_u64().unwrap_or(0) == 0 {
        return None;
    }
    let gpus = serde_json::from_value(answer["gpus"].clone())
        .inspect_err(|e| {
            eprintln!("bcd: the bcd node service's status is not what bcd expects ({e}); reading the GPUs directly");
        })
        .ok()?;
    let mut notes: Vec<String> = answer["problems"]
        .as_array()
        .map(|p| {
            p.iter()
                .filter_map(|p| p.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if let Some(why) = answer["sampling"]["mig_memory"].as_str() {
        notes.push(why.to_owned());
    }
    notes.push(format!(
        "from bcd node at {} (inventory {}s old)",
        socket.display(),
        answer["inventory_age_s"].as_u64().unwrap_or(0)
    ));
    Some(StatusReport {
        gpus,
        notes,
        nvidia_smi_error: answer["nvidia_smi_error"].as_str().map(str::to_owned),
    })
}

/// `bcd status`: exit 0 with a sample, 1 without (no driver, failure, timeout). A running
/// `bcd node` is asked first; without one, `bcd status` reads the GPUs itself.
pub async fn status_command(global: &Global) -> ExitCode {
    let host = global.host();
    let report = match status_from_node(&global.api_socket).await {
        Some(report) => Ok(report),
        None => status_within(&host, &global.data_dir, &global.xid_policy(), STATUS_WAIT).await,
    };
    match report {
        Ok(report) => {
            let printed = if global.json {
                print_json(&report)
            } else {
                print(&render_status(&report));
                true
            };
            // A GPU nvidia-smi could not sample is no success, whatever got printed.
            if printed && report.nvidia_smi_error.is_none() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("bcd: {e}");
            ExitCode::from(1)
        }
    }
}

/// `bcd diag`: collects again, runs `diag.nvml`, exit 0 only when every check passed.
pub async fn diag_command(
    global: &Global,
    gpu_uuids: &[String],
    expected_gpus: Option<usize>,
) -> ExitCode {
    let host = global.host();
    let collection = collect(&host, None).await;
    let conditions = match read_boot_id(&host).and_then(|b| read_this_boot(&global.data_dir, &b)) {
        Ok(c) => c,
        Err(e) => {
            // Diag still runs: xid.recent then shows only what it can know.
            eprintln!("bcd: {e}; xid.recent cannot see earlier XIDs");
            Vec::new()
        }
    };
    let error = collection.snapshot_error.as_ref();
    let nvml = match error {
        Some(e) if e.is_no_driver() => NvmlState::Unavailable,
        _ => NvmlState::Collected(&collection.inventory),
    };
    let detail = error.filter(|e| !e.is_no_driver()).map(ToString::to_string);
    let request = DiagRequest {
        gpu_uuids: gpu_uuids.to_vec(),
        expected_gpu_count: expected_gpus,
    };
    let links = link_widths(&host, &collection.inventory);
    let driver = collection
        .snapshot
        .as_ref()
        .map(|s| super::status::driver_readings(&s.xml))
        .unwrap_or_default();
    let report = diag_nvml(
        nvml,
        detail.as_deref(),
        &links,
        &driver,
        &conditions,
        &request,
    );
    if global.json {
        if !print_json(&report) {
            return ExitCode::from(1);
        }
    } else {
        print(&render_diag(&report));
    }
    if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
