//! `bcd diag`: `diag.nvml` on a fresh collection, read directly.

use std::process::ExitCode;

use super::output::{print, print_json};
use crate::cli::Global;
use crate::health::diag::{diag_nvml, link_widths, render as render_diag, DiagRequest, NvmlState};
use crate::health::faults::{read_boot_id, read_this_boot};
use crate::inventory::collect::collect;

/// `bcd diag`: collects again, runs `diag.nvml`, exit 0 only when every check passed.
pub async fn diag(global: &Global, gpu_uuids: &[String], expected_gpus: Option<usize>) -> ExitCode {
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
        .map(|s| crate::health::status::driver_readings(&s.xml))
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
        if !print_json(&report, "the result") {
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
