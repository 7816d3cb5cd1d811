//! `bcd diag`: `diag.nvml` on a fresh collection: a running `bcd node`'s (which shares it with
//! any diag already in flight), or read directly when no node answers.

use std::process::ExitCode;

use bcd_protocol::GpuUuid;

use super::output::{ask_node, print, print_json, saying_what_it_waits_for, FAILED, PROBLEM};
use crate::cli::{no_such_gpu, Global};
use crate::health::diag::{diag_host, render as render_diag, DiagReport, DiagRequest};
use crate::inventory::select::{pick, GpuNames, GpuSelector, NoSuchGpu};
use crate::smi::runner::Runner;

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
/// collects, judges every GPU and runs `diag.nvml`; exit 0 only when every check passed (a
/// degraded GPU's warnings pass).
pub async fn diag(
    global: &Global,
    gpu_uuids: &[GpuUuid],
    ids: &[GpuSelector],
    expected_gpus: Option<usize>,
) -> ExitCode {
    let mut gpu_uuids = gpu_uuids.to_vec();
    if !ids.is_empty() {
        match resolve(global, ids).await {
            Ok(uuids) => {
                for u in uuids {
                    if !gpu_uuids.contains(&u) {
                        gpu_uuids.push(u);
                    }
                }
            }
            Err(e) => no_such_gpu(&e, global.json, "diag").exit(),
        }
    }
    let gpu_uuids = &gpu_uuids[..];
    if let Some(report) = diag_from_node(global, gpu_uuids, expected_gpus).await {
        return show(global, &report);
    }
    let host = global.host();
    let request = DiagRequest {
        gpu_uuids: gpu_uuids.to_vec(),
        expected_gpu_count: expected_gpus,
    };
    let report = saying_what_it_waits_for(
        global.json,
        diag_host(
            &host,
            &Runner::new(host.nvidia_smi()),
            &global.data_dir,
            &global.xid_policy(),
            &request,
        ),
    )
    .await;
    show(global, &report)
}

/// The UUIDs of the GPUs `ids` name, by a running node's list of them, or without one the
/// driver's own list (procfs: no `nvidia-smi` run for it, and its index order is
/// `nvidia-smi`'s, the PCI bus order).
///
/// # Errors
/// [`NoSuchGpu`] when an id names none of them.
async fn resolve(global: &Global, ids: &[GpuSelector]) -> Result<Vec<GpuUuid>, NoSuchGpu> {
    let gpus: Vec<(Option<u32>, GpuUuid, Option<bcd_protocol::PciAddress>)> =
        match super::status::status_from_node(&global.api_socket).await {
            Some(report) => report
                .gpus
                .into_iter()
                .map(|g| (g.index, g.uuid, g.bus_id))
                .collect(),
            None => {
                let section = crate::inventory::merge::merge(
                    &crate::inventory::procfs::collect(&global.host()),
                    None,
                );
                section
                    .gpus
                    .into_iter()
                    .map(|g| (Some(g.index), g.uuid, g.bus_id))
                    .collect()
            }
        };
    let picked = pick(
        gpus.iter().map(|(index, uuid, bus_id)| GpuNames {
            index: *index,
            uuid,
            bus_id: *bus_id,
        }),
        ids,
    )?;
    Ok(picked.into_iter().map(|i| gpus[i].1.clone()).collect())
}

/// Prints the report; exit 0 only when every check passed.
fn show(global: &Global, report: &DiagReport) -> ExitCode {
    if global.json {
        if !print_json(report, "the result") {
            return ExitCode::from(FAILED);
        }
    } else {
        print(&render_diag(report));
    }
    if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(PROBLEM)
    }
}
