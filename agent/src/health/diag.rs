//! `diag.nvml`: the checks the seed lists, run over a fresh inventory, the PCIe link widths in
//! sysfs, the driver's own recovery readings and this boot's XID conditions; and `bcd diag`'s
//! rendering.
//!
//! [`diag_nvml`] is pure: the caller collects, reads sysfs ([`link_widths`]) and the faults
//! file. `nvml.init` failing stops everything else, as there is nothing to check then.

use std::collections::BTreeMap;

use bcd_protocol::GpuUuid;
use serde::Serialize;

use super::{uncorrectable_volatile, xid_conditions, Condition};
use crate::host::Host;
use crate::inventory::document::{Gpu, Inventory};
use crate::smi::xml::DriverHealth;

/// The checks' names, as the seed spells them.
pub mod check {
    /// `nvidia-smi` answered (the inventory has a CUDA driver version).
    pub const NVML_INIT: &str = "nvml.init";
    /// At least the expected number of GPUs is visible.
    pub const GPU_COUNT: &str = "gpu.count";
    /// A GPU asked for is visible.
    pub const GPU_PRESENT: &str = "gpu.present";
    /// No uncorrectable volatile ECC errors.
    pub const ECC_UNCORRECTABLE: &str = "ecc.uncorrectable";
    /// No row remap waits for a reset.
    pub const ROW_REMAP_PENDING: &str = "row-remap.pending";
    /// Row remapping has not failed.
    pub const ROW_REMAP_FAILURE: &str = "row-remap.failure";
    /// The negotiated PCIe link width is the maximum.
    pub const PCIE_LINK: &str = "pcie.link";
    /// No XID this boot.
    pub const XID_RECENT: &str = "xid.recent";
    /// The driver asks for no recovery action (`gpu_recovery_action`, `gpu_reset_status`).
    pub const RECOVERY_ACTION: &str = "recovery-action";
}

/// `nvml.init`'s message when `nvidia-smi` did not answer.
pub const NVML_NO_ANSWER: &str =
    "the NVIDIA driver's management interface (nvidia-smi) did not answer";
/// `nvml.init`'s message when there is no GPU section at all (no driver).
pub const NVML_NOT_AVAILABLE: &str = "NVML is not available on this node";
/// `gpu.present`'s message for a GPU the inventory does not list.
pub const NOT_VISIBLE: &str = "not visible to NVML";

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Check {
    /// Its name, from [`check`].
    pub check: String,
    /// The GPU's UUID; absent for node-wide checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuUuid>,
    /// Whether it passed.
    pub passed: bool,
    /// What it found, in words.
    pub message: String,
}

/// The whole result: `passed` only when every check passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
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

/// A PCIe link's negotiated and maximum width, from sysfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkWidth {
    /// `current_link_width`.
    pub current: u32,
    /// `max_link_width`.
    pub max: u32,
}

/// What the inventory collection said about NVML.
#[derive(Debug, Clone, Copy)]
pub enum NvmlState<'a> {
    /// No GPU section: no driver at all.
    Unavailable,
    /// The inventory, which tells by its CUDA driver version whether `nvidia-smi` answered.
    Collected(&'a Inventory),
}

fn node_check(name: &str, passed: bool, message: String) -> Check {
    Check {
        check: name.to_owned(),
        gpu: None,
        passed,
        message,
    }
}

fn gpu_check(name: &str, gpu: &GpuUuid, passed: bool, message: String) -> Check {
    Check {
        check: name.to_owned(),
        gpu: Some(gpu.clone()),
        passed,
        message,
    }
}

/// Runs the checks.
///
/// `links` maps a GPU's UUID to its link width; a GPU without an entry (no sysfs, as on WSL)
/// passes `pcie.link`. `conditions` must be this boot's. `nvml_detail` is appended to the
/// `nvml.init` failure (the snapshot's error) when given. `driver` holds the driver's own
/// readings per GPU UUID (from the same `-q -x`) for `recovery-action`.
pub fn diag_nvml(
    nvml: NvmlState<'_>,
    nvml_detail: Option<&str>,
    links: &BTreeMap<GpuUuid, LinkWidth>,
    driver: &BTreeMap<GpuUuid, DriverHealth>,
    conditions: &[Condition],
    request: &DiagRequest,
) -> DiagReport {
    let detail = |base: &str| match nvml_detail {
        Some(d) => format!("{base}: {d}"),
        None => base.to_owned(),
    };
    let inventory = match nvml {
        NvmlState::Unavailable => {
            return finish(vec![node_check(
                check::NVML_INIT,
                false,
                detail(NVML_NOT_AVAILABLE),
            )])
        }
        NvmlState::Collected(inv) if inv.gpu.cuda_driver_version.is_none() => {
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
            section.cuda_driver_version.as_deref().unwrap_or("unknown")
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
                    checks.push(gpu_check(
                        check::GPU_PRESENT,
                        uuid,
                        true,
                        format!("GPU {}", g.index),
                    ));
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
        checks.extend(gpu_checks(gpu, links.get(&gpu.uuid), conditions));
        checks.push(recovery_check(&gpu.uuid, driver.get(&gpu.uuid)));
    }
    finish(checks)
}

fn finish(checks: Vec<Check>) -> DiagReport {
    DiagReport {
        passed: checks.iter().all(|c| c.passed),
        checks,
    }
}

/// `recovery-action`: fails when the driver asks for a reset, a drain or a reboot.
fn recovery_check(uuid: &GpuUuid, driver: Option<&DriverHealth>) -> Check {
    let Some(d) = driver else {
        return gpu_check(
            check::RECOVERY_ACTION,
            uuid,
            true,
            "nvidia-smi gave no driver readings for this GPU (not checked)".into(),
        );
    };
    if let Some((message, action)) = d
        .recovery_action
        .as_deref()
        .and_then(|v| super::verdict::recovery_action(v, uuid.as_str()))
    {
        return gpu_check(
            check::RECOVERY_ACTION,
            uuid,
            false,
            format!("{message}: {action}"),
        );
    }
    if d.drain_and_reset_recommended == Some(true) || d.reset_required == Some(true) {
        return gpu_check(
            check::RECOVERY_ACTION,
            uuid,
            false,
            format!("the driver's gpu_reset_status asks for a reset: bcd gpu reset {uuid}"),
        );
    }
    gpu_check(
        check::RECOVERY_ACTION,
        uuid,
        true,
        "the driver asks for no recovery action".into(),
    )
}

fn gpu_checks(gpu: &Gpu, link: Option<&LinkWidth>, conditions: &[Condition]) -> Vec<Check> {
    let u = &gpu.uuid;
    let mut out = Vec::new();
    out.push(match uncorrectable_volatile(gpu) {
        Some(n) => gpu_check(
            check::ECC_UNCORRECTABLE,
            u,
            false,
            format!("{n} uncorrectable volatile ECC error(s) since the driver loaded"),
        ),
        None if gpu.ecc.as_ref().and_then(|e| e.volatile.as_ref()).is_some() => gpu_check(
            check::ECC_UNCORRECTABLE,
            u,
            true,
            "no uncorrectable volatile ECC errors".into(),
        ),
        None => gpu_check(
            check::ECC_UNCORRECTABLE,
            u,
            true,
            "the GPU reports no ECC counters".into(),
        ),
    });
    let rr = gpu.row_remap.as_ref();
    let pending = rr.and_then(|r| r.pending) == Some(true);
    out.push(gpu_check(
        check::ROW_REMAP_PENDING,
        u,
        !pending,
        if pending {
            "a row remap waits for a GPU reset".into()
        } else if rr.is_some() {
            "no row remap pending".into()
        } else {
            "the GPU reports no row remapping".into()
        },
    ));
    let failed = rr.and_then(|r| r.failure) == Some(true);
    out.push(gpu_check(
        check::ROW_REMAP_FAILURE,
        u,
        !failed,
        if failed {
            "row remapping failed: the GPU needs replacing".into()
        } else if rr.is_some() {
            "row remapping has not failed".into()
        } else {
            "the GPU reports no row remapping".into()
        },
    ));
    out.push(match link {
        Some(l) if l.current < l.max => gpu_check(
            check::PCIE_LINK,
            u,
            false,
            format!(
                "the PCIe link runs at x{} of x{}: check the riser, slot and seating",
                l.current, l.max
            ),
        ),
        Some(l) => gpu_check(
            check::PCIE_LINK,
            u,
            true,
            format!("x{} of x{}", l.current, l.max),
        ),
        None => gpu_check(
            check::PCIE_LINK,
            u,
            true,
            "no PCIe link width in sysfs (not checked)".into(),
        ),
    });
    let xids = xid_conditions(gpu, conditions);
    out.push(if xids.is_empty() {
        gpu_check(check::XID_RECENT, u, true, "no XIDs this boot".into())
    } else {
        gpu_check(
            check::XID_RECENT,
            u,
            false,
            xids.iter()
                .map(|c| format!("{}: {}", c.kind, c.message))
                .collect::<Vec<_>>()
                .join("; "),
        )
    });
    out
}

/// Reads each GPU's `current_link_width` and `max_link_width` from `host`'s sysfs; GPUs
/// without both files (WSL, passthrough without sysfs) are left out.
pub fn link_widths(host: &Host, inventory: &Inventory) -> BTreeMap<GpuUuid, LinkWidth> {
    let read = |dir: &std::path::Path, name: &str| -> Option<u32> {
        std::fs::read_to_string(dir.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let mut out = BTreeMap::new();
    for gpu in &inventory.gpu.gpus {
        let Some(address) = gpu.address() else {
            continue;
        };
        let dir = host.path(format!("/sys/bus/pci/devices/{}", address.sysfs_name()));
        if let (Some(current), Some(max)) = (
            read(&dir, "current_link_width"),
            read(&dir, "max_link_width"),
        ) {
            out.insert(gpu.uuid.clone(), LinkWidth { current, max });
        }
    }
    out
}

/// The report as `bcd diag` prints it: one line per check, `ok`/`FAIL`, the check, the GPU
/// (`-` for node-wide checks) and the message; then a summary line.
pub fn render(report: &DiagReport) -> String {
    let mut out = String::new();
    for c in &report.checks {
        out.push_str(&format!(
            "{:<4} {:<18} {} {}\n",
            if c.passed { "ok" } else { "FAIL" },
            c.check,
            c.gpu.as_ref().map_or("-", GpuUuid::as_str),
            c.message
        ));
    }
    let failed = report.checks.iter().filter(|c| !c.passed).count();
    if failed == 0 {
        out.push_str("diag.nvml passed\n");
    } else {
        out.push_str(&format!("diag.nvml failed: {failed} check(s) failed\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
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
            msg.starts_with("Xid79: NVRM") && msg.contains("; Xid13: "),
            "{msg}"
        );
    }

    #[test]
    fn a_narrowed_link_fails_and_a_missing_one_passes() {
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
        assert_eq!(failed(&r), [(check::PCIE_LINK.into(), Some(A.into()))]);
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
