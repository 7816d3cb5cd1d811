//! GPU health: XIDs from the kernel log, the conditions they raise (kept per boot in
//! `faults.json`), what each XID means ([`xid`], the catalog), the one verdict every reader
//! uses ([`verdict`]: healthy, degraded, unhealthy or unknown, each reason with its action),
//! `diag.nvml`, `bcd status` and the policy half of `gpu.reset`.
//!
//! Conditions only ever come from the faults store, which drops those of earlier boots (keeping
//! their hardware XIDs as history), so "this boot" holds by construction.

pub mod diag;
pub mod faults;
pub mod kmsg;
pub mod reset;
pub mod status;
pub mod verdict;
pub mod watcher;
pub mod xid;

use serde::{Deserialize, Serialize};

use crate::inventory::document::Gpu;

/// The prefix of an XID condition's kind; the number follows (`Xid79`).
pub const XID_KIND_PREFIX: &str = "Xid";

/// The kind of the condition an XID raises: `Xid<N>`.
pub fn xid_kind(number: u32) -> String {
    format!("{XID_KIND_PREFIX}{number}")
}

/// Whether `kind` is an XID condition's kind (`Xid` and digits).
pub fn is_xid_kind(kind: &str) -> bool {
    xid_number(kind).is_some()
}

/// The number of an XID condition's kind (`Xid79` is 79).
pub fn xid_number(kind: &str) -> Option<u32> {
    kind.strip_prefix(XID_KIND_PREFIX)
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse().ok())
}

/// The prefix of an NVSwitch SXid condition's kind (`SXid20034`); its device is the switch's
/// PCI address.
pub const SXID_KIND_PREFIX: &str = "SXid";

/// A device condition, as the node service reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    /// `Xid79`, ...
    pub kind: String,
    /// Whether the condition holds now.
    pub status: bool,
    /// The GPU's UUID.
    pub device_id: String,
    /// The driver's text of the latest occurrence.
    pub message: String,
    /// When it was first seen, seconds since the Unix epoch.
    pub first_seen: u64,
    /// When it was last seen, seconds since the Unix epoch.
    pub last_seen: u64,
    /// How many times it was seen this boot.
    #[serde(default)]
    pub count: u64,
}

impl Condition {
    /// Whether this is a live XID condition of `uuid`.
    pub fn is_xid_of(&self, uuid: &str) -> bool {
        self.status && self.device_id == uuid && is_xid_kind(&self.kind)
    }
}

/// Raises `kind` for `device_id` in `conditions`: a new condition, or the existing one with
/// its `last_seen` and message updated (one condition per kind and GPU). Returns whether
/// anything changed.
pub fn raise(
    conditions: &mut Vec<Condition>,
    kind: &str,
    device_id: &str,
    message: &str,
    now: u64,
) -> bool {
    if let Some(c) = conditions
        .iter_mut()
        .find(|c| c.kind == kind && c.device_id == device_id)
    {
        let changed = true;
        c.count = c.count.max(1) + 1;
        c.status = true;
        c.message = message.to_owned();
        c.last_seen = now;
        return changed;
    }
    conditions.push(Condition {
        kind: kind.to_owned(),
        status: true,
        device_id: device_id.to_owned(),
        message: message.to_owned(),
        first_seen: now,
        last_seen: now,
        count: 1,
    });
    true
}

/// Why the hardware counters say `gpu` may not take work, in words; empty when they do not.
/// XIDs are not looked at (a reset clears them, not these).
pub fn hardware_problems(gpu: &Gpu) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(rr) = &gpu.row_remap {
        if rr.failure == Some(true) {
            out.push("row remapping failed: the GPU needs replacing".to_owned());
        }
        if rr.pending == Some(true) {
            out.push("a row remap waits for a GPU reset".to_owned());
        }
    }
    if let Some(n) = uncorrectable_volatile(gpu) {
        out.push(format!(
            "{n} uncorrectable volatile ECC error(s) since the driver loaded"
        ));
    }
    out
}

/// The count of uncorrectable volatile ECC errors, when above zero.
pub fn uncorrectable_volatile(gpu: &Gpu) -> Option<u64> {
    gpu.ecc
        .as_ref()
        .and_then(|e| e.volatile.as_ref())
        .and_then(|v| v.uncorrectable)
        .filter(|&n| n > 0)
}

/// The XID conditions of `gpu` (live, this boot), in the order given.
pub fn xid_conditions<'a>(gpu: &Gpu, conditions: &'a [Condition]) -> Vec<&'a Condition> {
    conditions
        .iter()
        .filter(|c| c.is_xid_of(&gpu.uuid))
        .collect()
}

/// A condition's class and action, from the XID catalog (and the node's overrides) for XIDs,
/// from the switch's severity for NVSwitch SXids.
pub fn describe(c: &Condition, policy: &xid::XidPolicy) -> (&'static str, String) {
    if let Some(n) = xid_number(&c.kind) {
        let j = policy.judge(n);
        return (j.class.name(), j.remedy.action(&c.device_id));
    }
    if c.kind.starts_with(SXID_KIND_PREFIX) {
        let fatal = kmsg::parse_sxid(&c.message).is_none_or(|s| s.fatal);
        return (xid::XidClass::Interconnect.name(), kmsg::sxid_action(fatal));
    }
    if c.kind == kmsg::FELL_OFF_THE_BUS {
        return (
            xid::XidClass::Bus.name(),
            xid::Remedy::RebootNode.action(&c.device_id),
        );
    }
    (xid::XidClass::Unknown.name(), "see the message".to_owned())
}

/// The scheduling answer from the counters and this boot's conditions alone (no driver
/// readings): see [`verdict::judge`] for the whole verdict.
pub fn gpu_healthy(gpu: &Gpu, conditions: &[Condition]) -> bool {
    verdict::judge(
        gpu,
        &verdict::Evidence {
            conditions,
            ..verdict::Evidence::default()
        },
    )
    .healthy()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::document::{Ecc, EccCounts, RowRemap};

    const UUID: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";

    fn healthy_gpu() -> Gpu {
        Gpu {
            uuid: UUID.into(),
            ecc: Some(Ecc {
                mode: Some(true),
                volatile: Some(EccCounts {
                    correctable: Some(12),
                    uncorrectable: Some(0),
                }),
                aggregate: Some(EccCounts {
                    correctable: Some(40),
                    uncorrectable: Some(3),
                }),
            }),
            row_remap: Some(RowRemap {
                pending: Some(false),
                failure: Some(false),
                ..RowRemap::default()
            }),
            ..Gpu::default()
        }
    }

    fn unhealthy_reasons(gpu: &Gpu, conditions: &[Condition]) -> Vec<String> {
        let v = verdict::judge(
            gpu,
            &verdict::Evidence {
                conditions,
                ..verdict::Evidence::default()
            },
        );
        v.reasons.into_iter().map(|r| r.message).collect()
    }

    fn xid(kind: &str, device: &str) -> Condition {
        let mut v = Vec::new();
        raise(&mut v, kind, device, "NVRM: Xid ...", 1);
        v.remove(0)
    }

    #[test]
    fn a_clean_gpu_is_healthy_even_with_aggregate_errors_and_correctables() {
        assert!(gpu_healthy(&healthy_gpu(), &[]));
        assert!(
            gpu_healthy(&Gpu::default(), &[]),
            "no counters is no evidence"
        );
    }

    #[test]
    fn a_pending_row_remap_is_unhealthy() {
        let mut g = healthy_gpu();
        g.row_remap.as_mut().unwrap().pending = Some(true);
        assert!(!gpu_healthy(&g, &[]));
        assert_eq!(
            unhealthy_reasons(&g, &[]),
            ["a row remap waits for a GPU reset"]
        );
    }

    #[test]
    fn a_failed_row_remap_is_unhealthy() {
        let mut g = healthy_gpu();
        g.row_remap.as_mut().unwrap().failure = Some(true);
        assert_eq!(unhealthy_reasons(&g, &[]), ["row remapping failed"]);
    }

    #[test]
    fn uncorrectable_volatile_ecc_is_unhealthy() {
        let mut g = healthy_gpu();
        g.ecc
            .as_mut()
            .unwrap()
            .volatile
            .as_mut()
            .unwrap()
            .uncorrectable = Some(2);
        assert_eq!(
            unhealthy_reasons(&g, &[]),
            ["2 uncorrectable volatile ECC error(s) since the driver loaded"]
        );
    }

    #[test]
    fn an_xid_of_this_gpu_is_unhealthy_and_others_are_not() {
        let g = healthy_gpu();
        let conds = [
            xid("Xid79", UUID),
            xid("Xid13", UUID),
            xid("Xid48", "GPU-other"),
        ];
        assert!(!gpu_healthy(&g, &conds));
        assert_eq!(
            unhealthy_reasons(&g, &conds),
            [
                "Xid 79 (GPU has fallen off the bus, class bus) 1 time(s) this boot: NVRM: Xid ...",
                "Xid 13 (graphics engine exception, class application) 1 time(s) this boot: NVRM: Xid ..."
            ]
        );
        let mut cleared = xid("Xid79", UUID);
        cleared.status = false;
        let not_xid = xid("MemoryPressure", UUID);
        assert!(gpu_healthy(
            &g,
            &[cleared, not_xid, xid("Xid48", "GPU-other")]
        ));
    }

    #[test]
    fn raising_twice_keeps_one_condition_per_kind_and_gpu() {
        let mut v = Vec::new();
        assert!(raise(&mut v, "Xid79", UUID, "first", 10));
        assert!(raise(&mut v, "Xid79", UUID, "second", 20));
        assert!(raise(&mut v, "Xid13", UUID, "other", 20));
        assert_eq!(v.len(), 2);
        assert_eq!(
            (
                v[0].first_seen,
                v[0].last_seen,
                v[0].message.as_str(),
                v[0].count
            ),
            (10, 20, "second", 2)
        );
        assert!(raise(&mut v, "Xid13", UUID, "other", 20), "counted");
        assert_eq!(v[1].count, 2);
    }

    #[test]
    fn xid_kinds() {
        assert_eq!(xid_kind(79), "Xid79");
        assert!(is_xid_kind("Xid79"));
        assert!(!is_xid_kind("Xid"));
        assert!(!is_xid_kind("XidX"));
        assert!(!is_xid_kind("SXid20034"));
    }
}
