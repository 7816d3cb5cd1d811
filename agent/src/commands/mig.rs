//! `bcd mig plan|apply|status`: MIG layouts. `plan` reads the host itself (no node needed);
//! `apply` and `status` go through the node service, which applies through its helper.

use std::process::ExitCode;

use super::output::{code, fail, print, with_progress, FAILED, PROBLEM};
use super::service::{ask_service, show};
use crate::cli::{Global, MigCommand};
use crate::mig::plan::{GpuPlan, Plan};
use crate::mig::{LayoutRecord, LayoutState, MigError};
use crate::node::schema::{MigRequest, MigStatus};
use crate::smi::runner::Runner;

/// `bcd mig ...`.
pub async fn mig(global: &Global, cmd: &MigCommand) -> ExitCode {
    match cmd {
        MigCommand::Plan { layout } => plan(global, layout).await,
        MigCommand::Apply { layout } => apply(global, layout).await,
        MigCommand::Status => status(global).await,
    }
}

/// Plans `layout` against the host as nvidia-smi shows it now.
async fn plan(global: &Global, layout: &str) -> ExitCode {
    let path = crate::mig::config_path(global.mig_config.as_deref());
    let file = match crate::mig::config::read(&path) {
        Ok(f) => f,
        Err(e) => return refused(global, &e.into()),
    };
    let host = global.host();
    let collection = crate::inventory::collect::collect(&host, None).await;
    if let Some(e) = &collection.snapshot_error {
        let what = if e.is_no_driver() {
            code::NO_DRIVER
        } else {
            code::NVIDIA_SMI_FAILED
        };
        return fail(
            global.json,
            what,
            &format!("the host's GPUs cannot be read: {e}"),
        );
    }
    let runner = Runner::new(host.nvidia_smi());
    let placements = crate::mig::placements(&runner, &collection.inventory).await;
    let kept = crate::mig::load_profiles(&global.data_dir);
    let gpus = crate::mig::gpus_now(&host, &collection.inventory, &placements, &kept);
    match crate::mig::plan::plan(&file, layout, &gpus) {
        Ok(plan) => {
            if global.json {
                if !super::output::print_json(&plan, "the plan") {
                    return ExitCode::from(FAILED);
                }
            } else {
                print(&render_plan(&plan));
            }
            if plan.matches() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(PROBLEM)
            }
        }
        Err(e) => refused(global, &e),
    }
}

fn refused(global: &Global, e: &MigError) -> ExitCode {
    fail(global.json, e.code(), &e.to_string())
}

/// The plan as an operator reads it: one block per GPU, its steps indented.
pub fn render_plan(plan: &Plan) -> String {
    let mut out = format!(
        "layout {} ({}): {}\n",
        plan.layout,
        plan.file.display(),
        if plan.matches() {
            "the host matches it"
        } else {
            "steps are needed"
        }
    );
    if plan.gpus.is_empty() {
        out.push_str("  it names no GPU of this host\n");
    }
    for g in &plan.gpus {
        out.push_str(&gpu_lines(g));
    }
    out.push_str("GPU indices are nvidia-smi's now; bcd mig apply acts by bus id.\n");
    out
}

fn described(on: bool, instances: &[String]) -> String {
    if !on {
        return "MIG off".to_owned();
    }
    if instances.is_empty() {
        "MIG on, no instances".to_owned()
    } else {
        format!("MIG on: {}", instances.join(", "))
    }
}

fn gpu_lines(g: &GpuPlan) -> String {
    let wanted: Vec<String> = g
        .wanted
        .instances
        .iter()
        .flat_map(|(n, c)| std::iter::repeat_n(n.clone(), *c as usize))
        .collect();
    let pending = if g.gpu.mig_pending == g.gpu.mig_enabled {
        ""
    } else if g.gpu.mig_pending {
        " (MIG on pending a reset)"
    } else {
        " (MIG off pending a reset)"
    };
    let mut out = format!(
        "GPU {} {} {} ({})\n  now:    {}{pending}\n  wanted: {}\n",
        g.gpu.index,
        g.gpu.address,
        g.gpu.uuid,
        g.gpu.model,
        described(g.gpu.mig_enabled, &g.gpu.instances),
        described(g.wanted.mig_enabled, &wanted)
    );
    if g.steps.is_empty() {
        out.push_str("  steps:  none, it matches\n");
    } else {
        for (n, s) in g.steps.iter().enumerate() {
            let head = if n == 0 { "  steps:  " } else { "          " };
            out.push_str(&format!("{head}{}. {s}\n", n + 1));
        }
        if g.checked_after_mode_change {
            out.push_str("          its profiles are checked once MIG mode is on (never seen on before); a refusal turns it back off\n");
        }
    }
    out
}

/// The record as an operator reads it.
pub fn render_record(r: &LayoutRecord) -> String {
    let mut out = format!(
        "layout {}: {}{}\n",
        r.layout,
        r.state.word(),
        r.duration_ms
            .map(|ms| format!(" in {:.1} s", ms as f64 / 1000.0))
            .unwrap_or_default()
    );
    for g in &r.gpus {
        out.push_str(&format!(
            "GPU {} {} {}: {}\n",
            g.index, g.bus_id, g.uuid, g.result
        ));
        for s in &g.steps {
            out.push_str(&format!("  done: {s}\n"));
        }
        if let Some(e) = &g.error {
            out.push_str(&format!("  error: {e}\n"));
        }
    }
    if let Some(step) = &r.failed_step {
        out.push_str(&format!("failed at {step}\n"));
    }
    if !r.withdrawn.is_empty() {
        out.push_str(&format!(
            "withdrawn until an apply succeeds: {}\n",
            r.withdrawn
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    out
}

async fn apply(global: &Global, layout: &str) -> ExitCode {
    let request = MigRequest {
        layout: layout.to_owned(),
    };
    let what = format!("applying MIG layout {layout} through bcd node and its helper");
    let asked = with_progress(
        global.json,
        &what,
        ask_service::<LayoutRecord>(global, "POST", "/v1/mig", Some(&request)),
    )
    .await;
    match asked {
        Ok((record, value)) => {
            show(global, &value, &render_record(&record));
            if record.state == LayoutState::Success {
                ExitCode::SUCCESS
            } else {
                if !global.json {
                    eprintln!(
                        "bcd: {}",
                        record
                            .problem()
                            .unwrap_or_else(|| "the apply failed".into())
                    );
                }
                ExitCode::from(FAILED)
            }
        }
        Err(code) => code,
    }
}

async fn status(global: &Global) -> ExitCode {
    match ask_service::<MigStatus>(global, "GET", "/v1/mig", None::<&()>).await {
        Ok((answer, value)) => {
            let text = match &answer.record {
                Some(r) => render_record(r),
                None => format!(
                    "no MIG layout applied by this node yet (layout file {})\n",
                    answer.config
                ),
            };
            show(global, &value, &text);
            match answer.record.map(|r| r.state) {
                Some(LayoutState::Failed) => ExitCode::from(PROBLEM),
                _ => ExitCode::SUCCESS,
            }
        }
        Err(code) => code,
    }
}
