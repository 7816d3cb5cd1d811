//! `diag.nvml`: the checks the seed lists, and one per other reason of the verdict, over a fresh
//! inventory; and `bcd diag`'s rendering.
//!
//! Every per-GPU check reads the GPU's verdict ([`super::verdict::judge`], the one rule `bcd
//! status`, `bcd doctor` and the node use): a GPU fails diag exactly when its verdict is
//! `unhealthy` or `unknown`, and a `degraded` one passes with `"severity": "warn"` on the
//! checks that carry its reasons. The seed's checks (`ecc.uncorrectable`, `row-remap.pending`,
//! `row-remap.failure`, `pcie.link`, `xid.recent`, `recovery-action`) are always listed; a
//! reason none of them covers (the fabric, the fabric manager, throttling, ...) is a check of
//! its own, listed only when there is one.
//!
//! [`diag_with_verdicts`] is pure: the caller collects, judges and reads sysfs ([`link_widths`])
//! and the faults file; [`diag_host`] does all of that for `bcd diag` without a node.
//! `nvml.init` failing stops everything else, as there is nothing to check then.

use std::collections::BTreeMap;
use std::path::Path;

use bcd_protocol::GpuUuid;
use serde::{Deserialize, Serialize};

use super::verdict::{self, judge, kind, Evidence, HealthState, Reason, Verdict};
use super::xid::XidPolicy;
use super::{xid_conditions, Condition};
use crate::inventory::document::{Gpu, Inventory};
use crate::smi::runner::Runner;
#[cfg(test)]
use crate::smi::xml::DriverHealth;
use crate::sys::host::Host;

pub(crate) use super::pcie::{link_widths, LinkWidth};

/// The checks' names: the seed's, then those for the verdict's other reasons.
pub(crate) mod check {
    /// `nvidia-smi` answered ([`super::nvidia_smi_answered`]).
    pub(crate) const NVML_INIT: &str = "nvml.init";
    /// At least the expected number of GPUs is visible.
    pub(crate) const GPU_COUNT: &str = "gpu.count";
    /// A GPU asked for is visible.
    pub(crate) const GPU_PRESENT: &str = "gpu.present";
    /// No uncorrectable volatile ECC errors.
    pub(crate) const ECC_UNCORRECTABLE: &str = "ecc.uncorrectable";
    /// No row remap waits for a reset.
    pub(crate) const ROW_REMAP_PENDING: &str = "row-remap.pending";
    /// Row remapping has not failed.
    pub(crate) const ROW_REMAP_FAILURE: &str = "row-remap.failure";
    /// The negotiated PCIe link width is the maximum.
    pub(crate) const PCIE_LINK: &str = "pcie.link";
    /// No XID this boot that changes the GPU's health.
    pub(crate) const XID_RECENT: &str = "xid.recent";
    /// The driver asks for no recovery action (`gpu_recovery_action`, `gpu_reset_status`).
    pub(crate) const RECOVERY_ACTION: &str = "recovery-action";
    /// The NVLink fabric (`-q -x`'s `<fabric>`): only when it has a reason.
    pub(crate) const FABRIC: &str = "fabric";
    /// NVSwitches without a fabric manager: only when there are.
    pub const FABRIC_MANAGER: &str = "fabric-manager";
    /// Clocks slowed down by hardware, heat or a power brake: only while they are.
    pub(crate) const THROTTLING: &str = "throttling";
    /// Correctable ECC errors at a high rate (the node's collections): only when they come.
    pub(crate) const ECC_CORRECTABLE_RATE: &str = "ecc.correctable-rate";
    /// A fatal SXid on an NVSwitch the GPU's NVLinks reach: only when there was one.
    pub(crate) const NVSWITCH: &str = "nvswitch";
    /// `nvidia-smi` reports the GPU the driver lists: only when it does not.
    pub(crate) const NVIDIA_SMI: &str = "nvidia-smi";

    /// The seed's per-GPU checks, listed for every GPU in this order.
    pub(crate) const SEED: [&str; 6] = [
        ECC_UNCORRECTABLE,
        ROW_REMAP_PENDING,
        ROW_REMAP_FAILURE,
        PCIE_LINK,
        XID_RECENT,
        RECOVERY_ACTION,
    ];
}

/// `nvml.init`'s message when `nvidia-smi` did not answer.
pub(crate) const NVML_NO_ANSWER: &str =
    "the NVIDIA driver's management interface (nvidia-smi) did not answer";
/// `nvml.init`'s message when there is no GPU section at all (no driver).
pub(crate) const NVML_NOT_AVAILABLE: &str = "NVML is not available on this node";
/// `nvml.init`'s CUDA version where `nvidia-smi` answered without one.
pub(crate) const NO_CUDA_VERSION: &str = "unknown (nvidia-smi reports it from driver R410 on)";
/// `gpu.present`'s message for a GPU the inventory does not list.
pub(crate) const NOT_VISIBLE: &str = "not visible to NVML";

/// How much a passed check asks for attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The GPU is degraded: it may take work, watch it.
    Warn,
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    /// Its name, from [`check`].
    pub check: String,
    /// The GPU's UUID; absent for node-wide checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuUuid>,
    /// The GPU's index in the inventory, where it lists the GPU (absent for node-wide checks,
    /// a GPU not visible, and in an older node's answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_index: Option<u32>,
    /// Whether it passed.
    pub passed: bool,
    /// `warn` on a passed check that carries a degraded GPU's reason; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<Severity>,
    /// What it found, in words; for a reason of the verdict, `kind: message -> action`.
    pub message: String,
}

/// The whole result: `passed` only when every check passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiagReport {
    /// Every check of every GPU passed.
    pub passed: bool,
    /// The checks, node-wide first, then per GPU in index order.
    pub checks: Vec<Check>,
}

/// What `diag.nvml` was asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiagRequest {
    /// Only these GPUs; all the inventory lists when empty.
    pub gpu_uuids: Vec<GpuUuid>,
    /// Fail `gpu.count` when fewer GPUs are visible.
    pub expected_gpu_count: Option<usize>,
}

/// What the inventory collection said about NVML.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NvmlState<'a> {
    /// No GPU section: no driver at all.
    Unavailable,
    /// The inventory; whether `nvidia-smi` answered for it is [`nvidia_smi_answered`].
    Collected(&'a Inventory),
}

/// Whether `nvidia-smi` answered the collection: there is a driver and the snapshot did not
/// fail (`snapshot_error` is its error). `nvml.init` passes exactly then. A CUDA version
/// cannot tell: drivers before R410 answer `-q -x` without one.
pub(crate) fn nvidia_smi_answered(nvml: NvmlState<'_>, snapshot_error: Option<&str>) -> bool {
    matches!(nvml, NvmlState::Collected(_)) && snapshot_error.is_none()
}

/// What [`diag_with_verdicts`] judges.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DiagInput<'a> {
    /// What the collection said about NVML.
    pub nvml: NvmlState<'a>,
    /// Why the snapshot failed, when it did: `nvml.init` then fails with it.
    pub nvml_detail: Option<&'a str>,
    /// The PCIe link widths per GPU UUID, for `pcie.link`'s message (the verdict judges them).
    pub links: &'a BTreeMap<GpuUuid, LinkWidth>,
    /// The verdict of each GPU of the inventory; a GPU without one is `unknown`.
    pub verdicts: &'a BTreeMap<GpuUuid, Verdict>,
    /// This boot's conditions, for `xid.recent`'s message on XIDs that change nothing; or why
    /// there is no record of them, which `xid.recent` says instead of "no XIDs".
    pub conditions: Result<&'a [Condition], &'a str>,
}

fn node_check(name: &str, passed: bool, message: String) -> Check {
    Check {
        check: name.to_owned(),
        gpu: None,
        gpu_index: None,
        passed,
        severity: None,
        message,
    }
}

fn gpu_check(name: &str, gpu: &GpuUuid, passed: bool, message: String) -> Check {
    Check {
        check: name.to_owned(),
        gpu: Some(gpu.clone()),
        gpu_index: None,
        passed,
        severity: None,
        message,
    }
}

/// Runs the checks on the driver's readings and this boot's conditions alone: the verdict
/// they give (the XID catalog as it is, no fabric manager state, no samples) stands for each
/// GPU's. A caller that holds the whole verdict uses [`diag_with_verdicts`].
///
/// `links` maps a GPU's UUID to its link width; a GPU without an entry (no sysfs, as on WSL)
/// passes `pcie.link`. `conditions` must be this boot's. `nvml_detail` is the snapshot's
/// error, when it failed: `nvml.init` fails with it. `driver` holds the driver's own
/// readings per GPU UUID (from the same `-q -x`); empty, it stands for no readings at all.
/// The tests' shorthand: every caller outside them holds the whole verdict.
#[cfg(test)]
pub(crate) fn diag_nvml(
    nvml: NvmlState<'_>,
    nvml_detail: Option<&str>,
    links: &BTreeMap<GpuUuid, LinkWidth>,
    driver: &BTreeMap<GpuUuid, DriverHealth>,
    conditions: &[Condition],
    request: &DiagRequest,
) -> DiagReport {
    let board = match nvml {
        NvmlState::Collected(inv) => inv.gpu.gpus.as_slice(),
        NvmlState::Unavailable => &[],
    };
    let evidence = Evidence::new(conditions)
        .with_board(board)
        .with_driver((!driver.is_empty()).then_some(driver), None)
        .with_links(links);
    let verdicts = board
        .iter()
        .map(|g| (g.uuid.clone(), judge(g, &evidence)))
        .collect();
    diag_with_verdicts(
        &DiagInput {
            nvml,
            nvml_detail,
            links,
            verdicts: &verdicts,
            conditions: Ok(conditions),
        },
        request,
    )
}

/// Runs the checks: `nvml.init`, `gpu.count` and `gpu.present` from the inventory, then for
/// each GPU asked for the seed's checks and a check for each other reason of its verdict.
pub(crate) fn diag_with_verdicts(input: &DiagInput<'_>, request: &DiagRequest) -> DiagReport {
    let detail = |base: &str| match input.nvml_detail {
        Some(d) => format!("{base}: {d}"),
        None => base.to_owned(),
    };
    let inventory = match input.nvml {
        NvmlState::Unavailable => {
            return finish(vec![node_check(
                check::NVML_INIT,
                false,
                detail(NVML_NOT_AVAILABLE),
            )])
        }
        NvmlState::Collected(_) if !nvidia_smi_answered(input.nvml, input.nvml_detail) => {
            return finish(vec![node_check(
                check::NVML_INIT,
                false,
                detail(NVML_NO_ANSWER),
            )])
        }
        NvmlState::Collected(inv) => inv,
    };
    let section = &inventory.gpu;
    // A GPU passed through to a VM is in the inventory but not visible to NVML.
    let visible: Vec<&Gpu> = section.gpus.iter().filter(|g| !g.passed_through).collect();
    let mut checks = vec![node_check(
        check::NVML_INIT,
        true,
        format!(
            "driver {}, CUDA {}",
            section.driver_version.as_deref().unwrap_or("unknown"),
            section
                .cuda_driver_version
                .as_deref()
                .unwrap_or(NO_CUDA_VERSION)
        ),
    )];
    if let Some(expected) = request.expected_gpu_count {
        checks.push(node_check(
            check::GPU_COUNT,
            visible.len() >= expected,
            format!("{} GPU(s) visible, {expected} expected", visible.len()),
        ));
    }
    let selected: Vec<&Gpu> = if request.gpu_uuids.is_empty() {
        visible.clone()
    } else {
        let mut selected = Vec::new();
        for uuid in &request.gpu_uuids {
            match visible.iter().find(|g| g.uuid == *uuid) {
                Some(g) => {
                    checks.push(Check {
                        gpu_index: Some(g.index),
                        ..gpu_check(check::GPU_PRESENT, uuid, true, format!("GPU {}", g.index))
                    });
                    selected.push(*g);
                }
                None => {
                    let why = if section.gpus.iter().any(|g| g.uuid == *uuid) {
                        format!("{NOT_VISIBLE} (passed through to a VM)")
                    } else {
                        NOT_VISIBLE.to_owned()
                    };
                    checks.push(gpu_check(check::GPU_PRESENT, uuid, false, why));
                }
            }
        }
        selected
    };
    for gpu in selected {
        let unjudged;
        let verdict = match input.verdicts.get(&gpu.uuid) {
            Some(v) => v,
            None => {
                unjudged = not_judged(gpu);
                &unjudged
            }
        };
        checks.extend(gpu_checks(gpu, verdict, input));
    }
    finish(checks)
}

/// The verdict of a GPU the caller judged nothing for: never healthy.
fn not_judged(gpu: &Gpu) -> Verdict {
    Verdict {
        health: HealthState::Unknown,
        reasons: vec![Reason {
            kind: kind::NOT_REPORTED.to_owned(),
            message: "bcd has no verdict for this GPU".into(),
            action: format!("run bcd diag --gpu {} again", gpu.uuid),
            state: HealthState::Unknown,
        }],
    }
}

fn finish(checks: Vec<Check>) -> DiagReport {
    DiagReport {
        passed: checks.iter().all(|c| c.passed),
        checks,
    }
}

/// The check that carries a reason of the verdict: a seed check where one covers it, else
/// the check named for the reason's kind.
fn check_of(r: &Reason) -> &'static str {
    match r.kind {
        kind::ECC => check::ECC_UNCORRECTABLE,
        kind::ROW_REMAP if r.message == verdict::ROW_REMAP_FAILED => check::ROW_REMAP_FAILURE,
        kind::ROW_REMAP => check::ROW_REMAP_PENDING,
        kind::PCIE_LINK => check::PCIE_LINK,
        kind::RECOVERY_ACTION => check::RECOVERY_ACTION,
        kind::FABRIC => check::FABRIC,
        kind::FABRIC_MANAGER => check::FABRIC_MANAGER,
        kind::THROTTLED => check::THROTTLING,
        kind::ECC_CORRECTABLE_RATE => check::ECC_CORRECTABLE_RATE,
        kind::SWITCH_FATAL => check::NVSWITCH,
        kind::NVIDIA_SMI_SILENT | kind::NOT_REPORTED => check::NVIDIA_SMI,
        // The kernel log's conditions: `Xid<N>`, `FellOffTheBus`.
        _ => check::XID_RECENT,
    }
}

/// A check made of reasons: failed when one of them keeps the GPU from work, `warn` when it
/// passes with a degraded reason.
fn from_reasons(name: &str, uuid: &GpuUuid, reasons: &[&Reason]) -> Check {
    let passed = reasons.iter().all(|r| r.state.schedulable());
    let degraded = reasons.iter().any(|r| r.state == HealthState::Degraded);
    Check {
        severity: (passed && degraded).then_some(Severity::Warn),
        ..gpu_check(
            name,
            uuid,
            passed,
            reasons
                .iter()
                .map(|r| format!("{}: {} -> {}", r.kind, r.message, r.action))
                .collect::<Vec<_>>()
                .join("; "),
        )
    }
}

fn gpu_checks(gpu: &Gpu, verdict: &Verdict, input: &DiagInput<'_>) -> Vec<Check> {
    let u = &gpu.uuid;
    let mut out: Vec<Check> = check::SEED
        .iter()
        .map(|&name| {
            let reasons: Vec<&Reason> = verdict
                .reasons
                .iter()
                .filter(|r| check_of(r) == name)
                .collect();
            if reasons.is_empty() {
                gpu_check(name, u, true, clean(name, gpu, input))
            } else {
                from_reasons(name, u, &reasons)
            }
        })
        .collect();
    let mut others: Vec<&'static str> = Vec::new();
    for r in &verdict.reasons {
        let name = check_of(r);
        if !check::SEED.contains(&name) && !others.contains(&name) {
            others.push(name);
        }
    }
    for name in others {
        let reasons: Vec<&Reason> = verdict
            .reasons
            .iter()
            .filter(|r| check_of(r) == name)
            .collect();
        out.push(from_reasons(name, u, &reasons));
    }
    for c in &mut out {
        c.gpu_index = Some(gpu.index);
    }
    out
}

/// A seed check's message when the verdict has no reason for it.
fn clean(name: &str, gpu: &Gpu, input: &DiagInput<'_>) -> String {
    let rr = gpu.row_remap.as_ref();
    match name {
        check::ECC_UNCORRECTABLE => {
            if gpu.ecc.as_ref().and_then(|e| e.volatile.as_ref()).is_some() {
                "no uncorrectable volatile ECC errors".into()
            } else {
                "the GPU reports no ECC counters".into()
            }
        }
        check::ROW_REMAP_PENDING if rr.is_some() => "no row remap pending".into(),
        check::ROW_REMAP_FAILURE if rr.is_some() => "row remapping has not failed".into(),
        check::ROW_REMAP_PENDING | check::ROW_REMAP_FAILURE => {
            "the GPU reports no row remapping".into()
        }
        check::PCIE_LINK => match input.links.get(&gpu.uuid) {
            Some(l) => format!("x{} of x{}", l.current, l.max),
            None => "no PCIe link width in sysfs (not checked)".into(),
        },
        check::XID_RECENT => match input.conditions {
            Err(why) => why.to_owned(),
            Ok(conditions) => {
                let xids = xid_conditions(gpu, conditions);
                if xids.is_empty() {
                    "no XIDs this boot".into()
                } else {
                    format!(
                        "only XIDs that change nothing by themselves this boot: {}",
                        xids.iter()
                            .map(|c| format!("{}: {}", c.kind, c.message))
                            .collect::<Vec<_>>()
                            .join("; ")
                    )
                }
            }
        },
        _ => "the driver asks for no recovery action".into(),
    }
}

/// `bcd diag` without a node: collects `host` through `runner`, reads its PCIe link widths,
/// this boot's conditions from `<data_dir>/faults.json` (`xid.recent` says when there is none
/// to read, and where it would be) and whether its NVSwitches have a fabric manager, judges
/// every GPU with `policy`, and runs the checks.
pub async fn diag_host(
    host: &Host,
    runner: &Runner,
    data_dir: &Path,
    policy: &XidPolicy,
    request: &DiagRequest,
) -> DiagReport {
    use super::faults::{no_record, read_boot_id, read_record};
    let collection = crate::inventory::collect::collect_with(host, None, runner).await;
    let inventory = &collection.inventory;
    let (conditions, history, unread) =
        match read_boot_id(host).and_then(|b| read_record(data_dir, &b)) {
            Ok(Some((c, h))) => (c, h, None),
            Ok(None) => (
                Vec::new(),
                Vec::new(),
                Some(no_record(data_dir, data_dir.is_dir())),
            ),
            Err(e) => (
                Vec::new(),
                Vec::new(),
                Some(format!("XIDs unknown, not checked: {e}")),
            ),
        };
    let error = collection.snapshot_error.as_ref();
    let nvml = match error {
        Some(e) if e.is_no_driver() => NvmlState::Unavailable,
        _ => NvmlState::Collected(inventory),
    };
    let detail = error.filter(|e| !e.is_no_driver()).map(ToString::to_string);
    let links = link_widths(host, inventory);
    let driver = collection
        .snapshot
        .as_ref()
        .map(|s| super::status::driver_readings(&s.xml));
    let fabric_manager_down = crate::sys::systemd::fabric_manager(host).await.down();
    let evidence = Evidence::new(&conditions)
        .with_board(&inventory.gpu.gpus)
        .with_history(&history)
        .with_policy(policy)
        .with_driver(driver.as_ref(), detail.as_deref())
        .with_fabric_manager_down(fabric_manager_down)
        .with_links(&links);
    let verdicts = inventory
        .gpu
        .gpus
        .iter()
        .map(|g| (g.uuid.clone(), judge(g, &evidence)))
        .collect();
    diag_with_verdicts(
        &DiagInput {
            nvml,
            nvml_detail: detail.as_deref(),
            links: &links,
            verdicts: &verdicts,
            conditions: unread.as_deref().map_or(Ok(&conditions), Err),
        },
        request,
    )
}

/// What the GPU column of [`render`] says of a check every GPU gave alike.
pub const EVERY_GPU: &str = "every GPU";

/// The report as `bcd diag` prints it: one line per check, `ok`, `warn` (passed, with a
/// degraded GPU's reason) or `FAIL`, the check, the GPU (`GPU 0 (GPU-...)`; `-` for
/// node-wide checks) and the message with its control characters escaped; then a summary
/// line. A check that came out the same, in the same words, for every GPU (two or more) is
/// one line, its GPU [`EVERY_GPU`], where the first of them stood.
pub fn render(report: &DiagReport) -> String {
    let alike = |a: &Check, b: &Check| {
        a.check == b.check
            && a.passed == b.passed
            && a.severity == b.severity
            && a.message == b.message
    };
    let mut gpus: Vec<&GpuUuid> = Vec::new();
    for u in report.checks.iter().filter_map(|c| c.gpu.as_ref()) {
        if !gpus.contains(&u) {
            gpus.push(u);
        }
    }
    let every = |c: &Check| {
        gpus.len() > 1
            && gpus.iter().all(|&u| {
                report
                    .checks
                    .iter()
                    .any(|o| o.gpu.as_ref() == Some(u) && alike(o, c))
            })
    };
    let mut lines: Vec<(&Check, String)> = Vec::new();
    for c in &report.checks {
        let gpu = match &c.gpu {
            None => "-".to_owned(),
            Some(_) if every(c) => {
                if lines.iter().any(|(o, g)| g == EVERY_GPU && alike(o, c)) {
                    continue;
                }
                EVERY_GPU.to_owned()
            }
            Some(u) => crate::term::units::gpu(c.gpu_index, u),
        };
        lines.push((c, gpu));
    }
    let width = lines
        .iter()
        .map(|(_, g)| g.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (c, gpu) in &lines {
        let word = match (c.passed, c.severity) {
            (false, _) => "FAIL",
            (true, Some(Severity::Warn)) => "warn",
            (true, None) => "ok",
        };
        out.push_str(&format!(
            "{:<4} {:<18} {gpu:<width$} {}\n",
            word,
            c.check,
            crate::smi::escape_line(&c.message)
        ));
    }
    out.push_str(&summary(report));
    out.push('\n');
    out
}

/// The last line of [`render`]: how many GPUs were checked and how each came out (a GPU
/// fails with any of its checks, and passes with warnings when one of them warns), then the
/// node-wide checks that failed: `diag.nvml failed: 8 GPUs: 1 passed, 1 passed with
/// warnings, 6 failed`.
pub(crate) fn summary(report: &DiagReport) -> String {
    let mut gpus: Vec<(&GpuUuid, bool, bool)> = Vec::new();
    for c in &report.checks {
        let Some(uuid) = &c.gpu else { continue };
        let i = match gpus.iter().position(|(u, _, _)| *u == uuid) {
            Some(i) => i,
            None => {
                gpus.push((uuid, false, false));
                gpus.len() - 1
            }
        };
        gpus[i].1 |= !c.passed;
        gpus[i].2 |= c.severity.is_some();
    }
    let failed = gpus.iter().filter(|g| g.1).count();
    let warned = gpus.iter().filter(|g| !g.1 && g.2).count();
    let mut parts = Vec::new();
    if !gpus.is_empty() || report.passed {
        let mut tally = vec![format!("{} passed", gpus.len() - failed - warned)];
        if warned > 0 {
            tally.push(format!("{warned} passed with warnings"));
        }
        if failed > 0 {
            tally.push(format!("{failed} failed"));
        }
        parts.push(format!(
            "{} GPU{}: {}",
            gpus.len(),
            if gpus.len() == 1 { "" } else { "s" },
            tally.join(", ")
        ));
    }
    let node: Vec<&str> = report
        .checks
        .iter()
        .filter(|c| c.gpu.is_none() && !c.passed)
        .map(|c| c.check.as_str())
        .collect();
    if !node.is_empty() {
        parts.push(format!("{} failed", node.join(", ")));
    }
    format!(
        "diag.nvml {}: {}",
        if report.passed { "passed" } else { "failed" },
        parts.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::verdict::{HealthState, Reason};
    use crate::health::{raise, ConditionKind};
    use crate::inventory::document::{Ecc, EccCounts, GpuSection, RowRemap};

    const A: &str = "GPU-aaaaaaaa-0000-0000-0000-000000000000";
    const B: &str = "GPU-bbbbbbbb-0000-0000-0000-000000000000";
    /// A GPU the inventory does not list.
    const MISSING: &str = "GPU-dddddddd-0000-0000-0000-000000000000";

    fn inventory() -> Inventory {
        let gpu = |i: u32, uuid: &str| Gpu {
            ecc: Some(Ecc {
                volatile: Some(EccCounts {
                    correctable: Some(0),
                    uncorrectable: Some(0),
                }),
                ..Ecc::default()
            }),
            row_remap: Some(RowRemap {
                pending: Some(false),
                failure: Some(false),
                ..RowRemap::default()
            }),
            ..Gpu::new(i, uuid.parse().unwrap())
        };
        Inventory::new(GpuSection {
            driver_version: Some("570.133.20".into()),
            cuda_driver_version: Some("12.8".into()),
            gpus: vec![gpu(0, A), gpu(1, B)],
            ..GpuSection::default()
        })
    }

    fn run(inv: &Inventory, conds: &[Condition], req: &DiagRequest) -> DiagReport {
        diag_nvml(
            NvmlState::Collected(inv),
            None,
            &BTreeMap::new(),
            &BTreeMap::new(),
            conds,
            req,
        )
    }

    fn failed(r: &DiagReport) -> Vec<(String, Option<String>)> {
        r.checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| (c.check.clone(), c.gpu.as_ref().map(ToString::to_string)))
            .collect()
    }

    #[test]
    fn a_clean_node_passes_every_check() {
        let r = run(&inventory(), &[], &DiagRequest::default());
        assert!(r.passed, "{r:?}");
        assert_eq!(r.checks.len(), 1 + 2 * 6);
    }

    #[test]
    fn each_gpu_check_fails_on_its_own() {
        let mut inv = inventory();
        inv.gpu.gpus[0]
            .ecc
            .as_mut()
            .unwrap()
            .volatile
            .as_mut()
            .unwrap()
            .uncorrectable = Some(3);
        inv.gpu.gpus[1].row_remap.as_mut().unwrap().pending = Some(true);
        let r = run(&inv, &[], &DiagRequest::default());
        assert_eq!(
            failed(&r),
            [
                (check::ECC_UNCORRECTABLE.into(), Some(A.into())),
                (check::ROW_REMAP_PENDING.into(), Some(B.into()))
            ]
        );
        inv.gpu.gpus[1].row_remap.as_mut().unwrap().pending = Some(false);
        inv.gpu.gpus[1].row_remap.as_mut().unwrap().failure = Some(true);
        let r = run(&inv, &[], &DiagRequest::default());
        assert_eq!(
            failed(&r)[1],
            (check::ROW_REMAP_FAILURE.into(), Some(B.into()))
        );
    }

    #[test]
    fn xids_fail_xid_recent_and_are_listed() {
        let mut conds = Vec::new();
        raise(
            &mut conds,
            &ConditionKind::Xid(79),
            B.parse().unwrap(),
            "NVRM: Xid (PCI:0000:2a:00): 79, fell off",
            1,
        );
        raise(
            &mut conds,
            &ConditionKind::Xid(13),
            B.parse().unwrap(),
            "NVRM: Xid (PCI:0000:2a:00): 13, SM",
            1,
        );
        let r = run(&inventory(), &conds, &DiagRequest::default());
        assert_eq!(failed(&r), [(check::XID_RECENT.into(), Some(B.into()))]);
        let msg = &r.checks.iter().find(|c| !c.passed).unwrap().message;
        assert!(
            msg.starts_with("Xid79: Xid 79 (GPU has fallen off the bus")
                && msg.contains("-> reboot the node; Xid13: "),
            "{msg}"
        );
    }

    // What broke: diag failed a GPU for an application XID, which leaves it schedulable
    // (degraded) in bcd status: the check passes now, with a warning.
    #[test]
    fn a_degraded_gpu_passes_with_a_warning() {
        let mut conds = Vec::new();
        raise(
            &mut conds,
            &ConditionKind::Xid(13),
            A.parse().unwrap(),
            "NVRM: Xid (PCI:0000:18:00): 13, SM",
            1,
        );
        // An informational XID changes nothing: listed, no warning.
        raise(
            &mut conds,
            &ConditionKind::Xid(63),
            B.parse().unwrap(),
            "NVRM: Xid (PCI:0000:2a:00): 63, row remapping",
            1,
        );
        let r = run(&inventory(), &conds, &DiagRequest::default());
        assert!(r.passed, "{r:?}");
        let xid = |gpu: &str| {
            r.checks
                .iter()
                .find(|c| c.check == check::XID_RECENT && c.gpu.as_ref().unwrap() == gpu)
                .unwrap()
        };
        assert_eq!(xid(A).severity, Some(Severity::Warn));
        assert!(xid(A)
            .message
            .ends_with("-> restart the application; the GPU is fine"));
        assert_eq!(xid(B).severity, None);
        assert!(
            xid(B)
                .message
                .starts_with("only XIDs that change nothing by themselves this boot: Xid63: "),
            "{}",
            xid(B).message
        );
        let json = serde_json::to_value(&r).unwrap();
        let warned: Vec<_> = json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c.get("severity").is_some())
            .collect();
        assert_eq!(warned.len(), 1, "{json}");
        assert_eq!(warned[0]["severity"], "warn");
        assert_eq!(warned[0]["passed"], true);
        assert!(
            render(&r).contains(&format!("warn xid.recent         GPU 0 ({A}) Xid13: ")),
            "{}",
            render(&r)
        );
    }

    // What broke: diag named a GPU by its UUID alone, and printed a sentence that is the same
    // for every GPU (`no XID record: ...`) once per GPU.
    #[test]
    fn a_check_every_gpu_gave_alike_is_one_line_and_a_gpu_is_named_by_index() {
        let check = |gpu: Option<(&str, u32)>, name: &str, passed, message: &str| Check {
            check: name.into(),
            gpu: gpu.map(|(u, _)| u.parse().unwrap()),
            gpu_index: gpu.map(|(_, i)| i),
            passed,
            severity: None,
            message: message.into(),
        };
        let (a, b) = (Some((A, 0)), Some((B, 1)));
        let r = DiagReport {
            passed: false,
            checks: vec![
                check(None, "nvml.init", true, "driver 570"),
                check(a, "xid.recent", true, "no XID record: none"),
                check(a, "pcie.link", true, "x16 of x16"),
                check(b, "xid.recent", true, "no XID record: none"),
                check(b, "pcie.link", false, "x8 of x16"),
            ],
        };
        let text = render(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            format!("ok   nvml.init          -{:47} driver 570", "")
        );
        assert_eq!(
            lines[1],
            format!(
                "ok   xid.recent         every GPU{:39} no XID record: none",
                ""
            )
        );
        assert_eq!(
            lines[2],
            format!("ok   pcie.link          GPU 0 ({A}) x16 of x16")
        );
        assert_eq!(
            lines[3],
            format!("FAIL pcie.link          GPU 1 ({B}) x8 of x16")
        );
        assert_eq!(lines.len(), 5, "{text}");
    }

    // What broke: the verdict's reasons no seed check covers (the fabric, the fabric manager)
    // were not checked at all, so diag passed GPUs bcd status called unhealthy.
    #[test]
    fn a_reason_no_seed_check_covers_is_a_check_of_its_own() {
        let inv = inventory();
        let down = Verdict {
            health: HealthState::Unhealthy,
            reasons: vec![Reason {
                kind: kind::FABRIC_MANAGER,
                message: "4 NVSwitch(es) on the bus but nvidia-fabricmanager is not active".into(),
                action: "start the fabric manager".into(),
                state: HealthState::Unhealthy,
            }],
        };
        let verdicts = BTreeMap::from([(A.parse().unwrap(), down)]);
        let r = diag_with_verdicts(
            &DiagInput {
                nvml: NvmlState::Collected(&inv),
                nvml_detail: None,
                links: &BTreeMap::new(),
                verdicts: &verdicts,
                conditions: Ok(&[]),
            },
            &DiagRequest::default(),
        );
        // A's fabric manager, and B, whom the caller judged nothing for.
        assert_eq!(
            failed(&r),
            [
                (check::FABRIC_MANAGER.into(), Some(A.into())),
                (check::NVIDIA_SMI.into(), Some(B.into()))
            ]
        );
        assert_eq!(
            r.checks.len(),
            1 + 7 + 7,
            "six seed checks and one other per GPU"
        );
    }

    #[test]
    fn a_narrowed_link_warns_and_a_missing_one_passes() {
        let inv = inventory();
        let links = BTreeMap::from([(
            A.parse().unwrap(),
            LinkWidth {
                current: 8,
                max: 16,
            },
        )]);
        let r = diag_nvml(
            NvmlState::Collected(&inv),
            None,
            &links,
            &BTreeMap::new(),
            &[],
            &DiagRequest::default(),
        );
        assert!(r.passed, "{r:?}");
        let link = |gpu: &str| {
            r.checks
                .iter()
                .find(|c| c.check == check::PCIE_LINK && c.gpu.as_ref().unwrap() == gpu)
                .unwrap()
        };
        assert_eq!(link(A).severity, Some(Severity::Warn));
        assert!(
            link(A)
                .message
                .starts_with("PcieLink: the PCIe link runs at x8 of x16 -> check the riser"),
            "{}",
            link(A).message
        );
        assert_eq!(
            (link(B).severity, link(B).message.as_str()),
            (None, "no PCIe link width in sysfs (not checked)")
        );
    }

    #[test]
    fn nvml_init_stops_everything_else() {
        let mut inv = inventory();
        inv.gpu.cuda_driver_version = None;
        let r = diag_nvml(
            NvmlState::Collected(&inv),
            Some("nvidia-smi -q -x did not answer within 30s and was killed"),
            &BTreeMap::new(),
            &BTreeMap::new(),
            &[],
            &DiagRequest::default(),
        );
        assert!(!r.passed);
        assert_eq!(r.checks.len(), 1);
        assert!(r.checks[0].message.starts_with(NVML_NO_ANSWER));
        let r = diag_nvml(
            NvmlState::Unavailable,
            None,
            &BTreeMap::new(),
            &BTreeMap::new(),
            &[],
            &DiagRequest::default(),
        );
        assert_eq!(r.checks.len(), 1);
        assert_eq!(r.checks[0].message, NVML_NOT_AVAILABLE);
    }

    // What broke: a driver before R410 answers -q -x without a CUDA version, and nvml.init
    // failed it with "nvidia-smi did not answer" although it answered and its GPUs parsed.
    #[test]
    fn a_driver_before_r410_passes_nvml_init_without_a_cuda_version() {
        let mut inv = inventory();
        inv.gpu.cuda_driver_version = None;
        let r = run(&inv, &[], &DiagRequest::default());
        assert!(r.passed, "{r:?}");
        assert_eq!(
            r.checks[0].message,
            format!("driver 570.133.20, CUDA {NO_CUDA_VERSION}")
        );
        assert_eq!(r.checks.len(), 1 + 2 * 6);
        assert!(nvidia_smi_answered(NvmlState::Collected(&inv), None));
        assert!(!nvidia_smi_answered(
            NvmlState::Collected(&inv),
            Some("timed out")
        ));
        assert!(!nvidia_smi_answered(NvmlState::Unavailable, None));
    }

    // What broke: diag printed 56 lines for 8 GPUs and ended with "diag.nvml failed: 6
    // check(s) failed", counting checks, not GPUs; its last line counts the GPUs now.
    #[test]
    fn the_last_line_counts_the_gpus_by_how_they_came_out() {
        let mut inv = inventory();
        let r = run(&inv, &[], &DiagRequest::default());
        assert_eq!(summary(&r), "diag.nvml passed: 2 GPUs: 2 passed");
        assert!(render(&r).ends_with("diag.nvml passed: 2 GPUs: 2 passed\n"));
        inv.gpu.gpus[1].row_remap.as_mut().unwrap().pending = Some(true);
        inv.gpu.gpus[1].row_remap.as_mut().unwrap().failure = Some(true);
        let links = BTreeMap::from([(
            A.parse().unwrap(),
            LinkWidth {
                current: 8,
                max: 16,
            },
        )]);
        let request = DiagRequest {
            expected_gpu_count: Some(3),
            ..DiagRequest::default()
        };
        let r = diag_nvml(
            NvmlState::Collected(&inv),
            None,
            &links,
            &BTreeMap::new(),
            &[],
            &request,
        );
        assert_eq!(
            summary(&r),
            "diag.nvml failed: 2 GPUs: 0 passed, 1 passed with warnings, 1 failed; gpu.count failed"
        );
        let r = diag_nvml(
            NvmlState::Unavailable,
            None,
            &BTreeMap::new(),
            &BTreeMap::new(),
            &[],
            &DiagRequest::default(),
        );
        assert_eq!(summary(&r), "diag.nvml failed: nvml.init failed");
    }

    #[test]
    fn count_and_presence() {
        let inv = inventory();
        let req = DiagRequest {
            gpu_uuids: vec![B.parse().unwrap(), MISSING.parse().unwrap()],
            expected_gpu_count: Some(3),
        };
        let r = run(&inv, &[], &req);
        assert_eq!(
            failed(&r),
            [
                (check::GPU_COUNT.into(), None),
                (check::GPU_PRESENT.into(), Some(MISSING.into()))
            ]
        );
        // Only B's checks ran besides presence.
        assert!(r
            .checks
            .iter()
            .all(|c| c.gpu.as_ref().is_none_or(|g| g != A)));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["passed"], false);
        assert!(json["checks"][0].get("gpu").is_none(), "{json}");
        assert_eq!(json["checks"][3]["message"], NOT_VISIBLE);
    }

    #[test]
    fn a_passed_through_gpu_is_not_visible() {
        let mut inv = inventory();
        inv.gpu.gpus[1].passed_through = true;
        let req = DiagRequest {
            gpu_uuids: vec![B.parse().unwrap()],
            expected_gpu_count: Some(2),
        };
        let r = run(&inv, &[], &req);
        assert_eq!(
            failed(&r),
            [
                (check::GPU_COUNT.into(), None),
                (check::GPU_PRESENT.into(), Some(B.into()))
            ]
        );
        assert!(render(&r).contains("FAIL gpu.present"));
    }
}
