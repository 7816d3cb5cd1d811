//! `bcd remediations`: the recovery loop's record, through the node service.

use std::process::ExitCode;

use super::service::{ask_service, show};
use crate::cli::Global;
use crate::node::schema::Remediations;

/// `bcd remediations`: exit 0, or 1 when a GPU needs a reboot.
pub async fn remediations(global: &Global) -> ExitCode {
    match ask_service::<Remediations>(global, "GET", "/v1/remediations", None::<&()>).await {
        Ok((answer, value)) => {
            show(global, &value, &render(&answer));
            if answer.gpus.values().any(|g| g.reboot_required) {
                ExitCode::from(super::output::PROBLEM)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(code) => code,
    }
}

/// The record as an operator reads it: one row per remediation, its steps below it, then the
/// GPUs that wait or need a reboot.
pub fn render(r: &Remediations) -> String {
    use crate::term::table::{Cell, Table};
    let mut out = String::new();
    if !r.enabled {
        out.push_str("the recovery loop is off (bcd node --remediate)\n");
    }
    if r.remediations.is_empty() {
        out.push_str("no remediations\n");
    } else {
        let mut table = Table::new(&["ID", "GPU", "STARTED", "RESULT", "REASON"]);
        for m in &r.remediations {
            table.row(
                [
                    m.id.to_string(),
                    m.gpu.to_string(),
                    crate::utc::format_utc(m.started_at),
                    m.result.clone().unwrap_or_else(|| "running".to_owned()),
                    m.reason.clone(),
                ]
                .into_iter()
                .map(Cell::plain)
                .collect(),
                m.steps
                    .iter()
                    .map(|s| format!("{}: {}", crate::utc::format_utc(s.at), s.what))
                    .collect(),
            );
        }
        out.push_str(&table.render(false));
    }
    for (uuid, g) in &r.gpus {
        if g.reboot_required {
            out.push_str(&format!(
                "GPU {uuid}: reboot required ({})\n",
                g.why.as_deref().unwrap_or("")
            ));
        } else if let Some(w) = &g.waiting_for {
            out.push_str(&format!("GPU {uuid}: waiting for {w}\n"));
        }
    }
    out
}
