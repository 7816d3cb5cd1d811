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
    report_of(answer, socket)
}

/// A node's status document as `bcd status` shows it; `None` while the node has no
/// inventory yet.
fn report_of(answer: NodeStatus, socket: &std::path::Path) -> Option<StatusReport> {
    if answer.collections == 0 {
        return None;
    }
    let mut notes = answer.problems;
    if let Some(why) = answer.sampling.mig_memory {
        notes.push(why);
    }
    // Below the GPU table: what the recovery loop does (bcd node --remediate).
    for g in &answer.gpus {
        let Some(r) = &g.remediation else { continue };
        let gpu = g
            .index
            .map_or_else(|| g.uuid.to_string(), |i| format!("GPU {i} ({})", g.uuid));
        if r.reboot_required {
            notes.push(format!(
                "{gpu}: reboot required: {}",
                r.why
                    .as_deref()
                    .unwrap_or("only a reboot will bring it back")
            ));
        } else if let Some(w) = &r.waiting_for {
            notes.push(format!("{gpu}: a reset would clear it; waiting for {w}"));
        }
    }
    // Below the GPU table: the MIG layout (a failed one is among the problems already).
    if let Some(r) = answer
        .mig_layout
        .filter(|r| r.state != crate::mig::LayoutState::Failed)
    {
        notes.push(format!(
            "MIG layout {}: {}{}",
            r.layout,
            r.state.word(),
            r.finished_at
                .map(|t| format!(" ({})", crate::utc::format_utc(t)))
                .unwrap_or_default()
        ));
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
    if args.watch {
        if json || args.format != StatusFormat::Table {
            crate::cli::usage_error(
                "status",
                clap::error::ErrorKind::ArgumentConflict,
                "--watch draws the table: it takes no --json or --format csv|json",
                json,
            )
            .exit();
        }
        return watch(global, args).await;
    }
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
        no_such_gpu(&e, json, "status").exit();
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

/// How often `--watch` redraws when nothing changes, where the node does not say its sample
/// interval (and without a node): the shortest sample interval.
pub const WATCH_REDRAW: std::time::Duration = crate::node::shared::MIN_SAMPLE_INTERVAL;

/// The redraw period for a node that samples every `interval_s` seconds (0: it does not say).
pub fn redraw_every(interval_s: u64) -> std::time::Duration {
    if interval_s == 0 {
        WATCH_REDRAW
    } else {
        std::time::Duration::from_secs(interval_s).max(WATCH_REDRAW)
    }
}

/// One screen of `--watch`: on a terminal (`terminal`) the screen cleared first, through a
/// pipe a blank line between two; then a title saying what it follows and how to stop, and
/// the table.
pub fn watch_frame(
    report: &StatusReport,
    every: std::time::Duration,
    colour: bool,
    terminal: bool,
    first: bool,
) -> String {
    let lead = match (terminal, first) {
        (true, _) => "\x1b[H\x1b[2J",
        (false, true) => "",
        (false, false) => "\n",
    };
    format!(
        "{lead}bcd status --watch: redrawn at every change and every {}s; Ctrl-C ends it\n{}",
        every.as_secs(),
        render_status(report, colour)
    )
}

/// `bcd status --watch`: redraws the table at every change a running node's status watch
/// reports and once per the node's sample interval (a new sample; [`redraw_every`]), until
/// Ctrl-C (exit 0). Without a node, it reads the GPUs itself every [`WATCH_REDRAW`]. Exit 3
/// when the node ends the watch.
async fn watch(global: &Global, args: &StatusArgs) -> ExitCode {
    use std::io::IsTerminal;
    let socket = &global.api_socket;
    let terminal = std::io::stdout().is_terminal();
    let colour = wanted_here(global.color);
    let mut lines = match crate::node::client::watch_status(socket).await {
        Ok(lines) => Some(lines),
        Err(crate::node::client::ApiError::Connect { .. }) => None,
        Err(e) => return super::output::fail_api(false, &e),
    };
    // A node's watch sends its first document at once; without one, the first read is now.
    let start = tokio::time::Instant::now();
    let mut tick = tokio::time::interval_at(
        if lines.is_some() {
            start + WATCH_REDRAW
        } else {
            start
        },
        WATCH_REDRAW,
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut every = WATCH_REDRAW;
    let mut first = true;
    let mut draw = |report: Option<StatusReport>, every: std::time::Duration| {
        let Some(mut report) = report else { return };
        if let Err(e) = select(&mut report, &args.id) {
            no_such_gpu(&e, false, "status").exit();
        }
        print(&watch_frame(&report, every, colour, terminal, first));
        first = false;
    };
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return ExitCode::SUCCESS,
            line = next_line(lines.as_mut()) => match line {
                Some(text) => match serde_json::from_str::<NodeStatus>(&text) {
                    Ok(answer) => {
                        let now = redraw_every(answer.sampling.interval_s);
                        if now != every {
                            every = now;
                            tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                        }
                        draw(report_of(answer, socket), every);
                    }
                    Err(e) => eprintln!("bcd: a line of the status watch is not a status ({e})"),
                },
                None => {
                    eprintln!("bcd: the bcd node service at {} ended the status watch", socket.display());
                    return ExitCode::from(FAILED);
                }
            },
            _ = tick.tick() => {
                let report = if lines.is_some() {
                    status_from_node(socket).await
                } else {
                    let host = global.host();
                    status_within(&host, &global.data_dir, &global.xid_policy(), STATUS_WAIT)
                        .await
                        .ok()
                };
                draw(report, every);
            }
        }
    }
}

/// The next line of the watch; never, without one; `None` when it ended or failed.
async fn next_line(lines: Option<&mut crate::node::client::StatusLines>) -> Option<String> {
    match lines {
        Some(lines) => lines.next_line().await.ok().flatten(),
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // On a terminal each frame replaces the last; through a pipe frames follow each other,
    // a blank line between, with no control bytes.
    #[test]
    fn a_watch_frame_clears_the_screen_only_on_a_terminal() {
        let report = StatusReport {
            gpus: Vec::new(),
            notes: vec!["n".into()],
            nvidia_smi_error: None,
        };
        let every = WATCH_REDRAW;
        let on_tty = watch_frame(&report, every, false, true, false);
        assert!(
            on_tty.starts_with("\x1b[H\x1b[2Jbcd status --watch: "),
            "{on_tty:?}"
        );
        let first = watch_frame(&report, redraw_every(0), false, false, true);
        assert!(first.starts_with("bcd status --watch: redrawn at every change and every 5s"));
        assert!(
            first.contains("\nGPU  NAME") && first.ends_with("note: n\n"),
            "{first:?}"
        );
        let next = watch_frame(&report, every, false, false, false);
        assert_eq!(next, format!("\n{first}"));
        // A node that samples every 30 s is redrawn every 30 s; none samples below 5 s.
        assert_eq!(redraw_every(30), std::time::Duration::from_secs(30));
        assert_eq!(redraw_every(2), WATCH_REDRAW);
        assert!(watch_frame(&report, redraw_every(30), false, false, true).contains("every 30s"));
    }
}
