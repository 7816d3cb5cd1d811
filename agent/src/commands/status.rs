//! `bcd status`: a running `bcd node`'s view of the GPUs, or the GPUs read directly.

use std::process::ExitCode;

use super::output::{
    ask_node, code, fail, print, print_json, saying_what_it_waits_for, FAILED, PROBLEM,
};
use crate::cli::Global;
use crate::health::status::{
    render as render_status, status_within, StatusError, StatusReport, STATUS_WAIT,
};
use crate::node::schema::NodeStatus;

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

/// `bcd status`: exit status as [`report_status`] says, 3 when there is nothing to print (no
/// driver, no sample and no GPU listed). A running `bcd node` is asked first; without one,
/// `bcd status` reads the GPUs itself.
pub async fn status(global: &Global) -> ExitCode {
    let host = global.host();
    let report = match status_from_node(&global.api_socket).await {
        Some(report) => Ok(report),
        None => {
            saying_what_it_waits_for(
                global.json,
                status_within(&host, &global.data_dir, &global.xid_policy(), STATUS_WAIT),
            )
            .await
        }
    };
    let code = match report {
        Ok(report) => {
            let printed = if global.json {
                print_json(&report, "the result")
            } else {
                print(&render_status(&report));
                true
            };
            if printed {
                ExitCode::from(report_status(&report))
            } else {
                ExitCode::from(FAILED)
            }
        }
        Err(e) => {
            let code = if matches!(e, StatusError::NoDriver) {
                code::NO_DRIVER
            } else {
                code::NVIDIA_SMI_FAILED
            };
            return fail(global.json, code, &e.to_string());
        }
    };
    if !global.json {
        // Which devices Kubernetes has, from the hold store.
        print(&crate::kubelet::status_lines(&global.data_dir));
    }
    code
}
