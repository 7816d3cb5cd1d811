//! `bcd diag`: `diag.nvml` on a fresh collection: a running `bcd node`'s (which shares it with
//! any diag already in flight), or read directly when no node answers.

use std::process::ExitCode;

use bcd_protocol::GpuUuid;

use super::output::{ask_node, print, print_json, saying_what_it_waits_for};
use crate::cli::Global;
use crate::health::diag::{
    diag_nvml, link_widths, render as render_diag, DiagReport, DiagRequest, NvmlState,
};
use crate::health::faults::{read_boot_id, read_this_boot};
use crate::inventory::collect::collect;

/// How long `bcd diag` waits for a running node's answer: its collection's own bound (60 s
/// for a snapshot) and a margin.
const NODE_DIAG_WAIT: std::time::Duration = std::time::Duration::from_secs(75);

/// Asks a running `bcd node` to run `diag.nvml` (`POST /v1/diag`); `None` when none answers,
/// so the caller reads the GPUs itself.
async fn diag_from_node(
    global: &Global,
    gpu_uuids: &[GpuUuid],
    expected_gpus: Option<usize>,
) -> Option<DiagReport> {
    let body = crate::node::schema::DiagRequest {
        gpus: gpu_uuids.to_vec(),
        expected_gpus,
    };
    ask_node(
        &global.api_socket,
        "POST",
        "/v1/diag",
        Some(&body),
        NODE_DIAG_WAIT,
    )
    .await
}

/// `bcd diag`: asks a running `bcd node` first (no `nvidia-smi` of its own then), else
/// collects, runs `diag.nvml`; exit 0 only when every check passed.
pub async fn diag(
    global: &Global,
    gpu_uuids: &[GpuUuid],
    expected_gpus: Option<usize>,
) -> ExitCode {
    if let Some(report) = diag_from_node(global, gpu_uuids, expected_gpus).await {
        return show(global, &report);
    }
    let host = global.host();
    let collection = saying_what_it_waits_for(global.json, collect(&host, None)).await;
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
    show(global, &report)
}

/// Prints the report; exit 0 only when every check passed.
fn show(global: &Global, report: &DiagReport) -> ExitCode {
    if global.json {
        if !print_json(report, "the result") {
            return ExitCode::from(1);
        }
    } else {
        print(&render_diag(report));
    }
    if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
