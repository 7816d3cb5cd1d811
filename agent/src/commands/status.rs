//! `bcd status`: a running `bcd node`'s view of the GPUs, or the GPUs read directly.

use std::process::ExitCode;

use super::output::{
    ask_node, code, fail, print, print_json, saying_what_it_waits_for, FAILED, PROBLEM,
};
use crate::cli::{no_such_gpu, Global, StatusArgs, StatusFormat};
use crate::health::status::{
    render as render_status, render_csv, status_within, StatusError, StatusReport, STATUS_WAIT,
};
use crate::inventory::select::{pick, GpuNames, GpuSelector, NoSuchGpu};
use crate::node::schema::NodeStatus;
use crate::term::colour::wanted_here;

/// Asks a running `bcd node` for its status (within [`STATUS_WAIT`]); `None` when none
/// answers, or when it has no inventory yet (it is starting), so the caller reads itself.
pub(crate) async fn status_from_node(socket: &std::path::Path) -> Option<StatusReport> {
    let answer: NodeStatus =
        ask_node::<(), _>(socket, "GET", "/v1/status", None, STATUS_WAIT).await?;
    if answer.collections == 0 {
        return None;
    }
    let mut notes = answer.problems;
    if let Some(why) = answer.sampling.mig_memory {
        notes.push(why);
    }
    notes.push(format!(
        "from bcd node at {} (inventory {}s old)",
        socket.display(),
        answer.inventory_age_s.unwrap_or(0)
    ));
    Some(StatusReport {
        gpus: answer.gpus,
        notes,
        nvidia_smi_error: answer.nvidia_smi_error,
    })
}

/// The exit status of a status report: 3 without a sample (`nvidia-smi` failed or timed
/// out), 1 when a GPU the host has (not one passed through to a VM) is unhealthy or unknown,
/// else 0 (degraded GPUs take work).
pub fn report_status(report: &StatusReport) -> u8 {
    if report.nvidia_smi_error.is_some() {
        FAILED
    } else if report.gpus.iter().any(|g| !g.passed_through && !g.healthy) {
        PROBLEM
    } else {
        0
    }
}

/// Keeps the GPUs `ids` name (all when it is empty).
///
/// # Errors
/// [`NoSuchGpu`] when an id names no GPU of the report.
pub fn select(report: &mut StatusReport, ids: &[GpuSelector]) -> Result<(), NoSuchGpu> {
    let keep = pick(
        report.gpus.iter().map(|g| GpuNames {
            index: g.index,
            uuid: &g.uuid,
            bus_id: g.bus_id,
        }),
        ids,
    )?;
    let mut i = 0;
    report.gpus.retain(|_| {
        i += 1;
        keep.contains(&(i - 1))
    });
    Ok(())
}

/// `bcd status`: exit status as [`report_status`] says (of the GPUs `-i` picks), 3 when
/// there is nothing to print (no driver, no sample and no GPU listed), 2 when an `-i` names no
/// GPU. A running `bcd node` is asked first; without one, `bcd status` reads the GPUs itself.
pub async fn status(global: &Global, args: &StatusArgs) -> ExitCode {
    let json = global.json || args.format == StatusFormat::Json;
    let host = global.host();
    let report = match status_from_node(&global.api_socket).await {
        Some(report) => Ok(report),
        None => {
            saying_what_it_waits_for(
                json,
                status_within(&host, &global.data_dir, &global.xid_policy(), STATUS_WAIT),
            )
            .await
        }
    };
    let mut report = match report {
        Ok(report) => report,
        Err(e) => {
            let code = if matches!(e, StatusError::NoDriver) {
                code::NO_DRIVER
            } else {
                code::NVIDIA_SMI_FAILED
            };
            return fail(json, code, &e.to_string());
        }
    };
    if let Err(e) = select(&mut report, &args.id) {
        no_such_gpu(&e, json).exit();
    }
    let printed = match (json, args.format) {
        (true, _) => print_json(&report, "the result"),
        (false, StatusFormat::Csv) => {
            print(&render_csv(&report));
            true
        }
        (false, _) => {
            print(&render_status(&report, wanted_here(global.color)));
            // Which devices Kubernetes has, from the hold store.
            print(&crate::kubelet::status_lines(&global.data_dir));
            true
        }
    };
    if printed {
        ExitCode::from(report_status(&report))
    } else {
        ExitCode::from(FAILED)
    }
}
