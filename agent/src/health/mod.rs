//! GPU health: XIDs from the kernel log, the conditions they raise (kept per boot in
//! `faults.json`), what each XID means ([`xid`], the catalog), the one verdict every reader
//! uses ([`verdict`]: healthy, degraded, unhealthy or unknown, each reason with its action),
//! the PCIe link widths it judges ([`pcie`]), `diag.nvml`, `bcd status` and the policy half of
//! `gpu.reset`.
//!
//! Conditions only ever come from the faults store, which drops those of earlier boots (keeping
//! their hardware XIDs as history), so "this boot" holds by construction.

pub mod diag;
pub(crate) mod faults;
pub mod kmsg;
pub(crate) mod log_limit;
pub(crate) mod pcie;
pub(crate) mod reset;
pub mod status;
pub mod verdict;
pub(crate) mod watcher;
pub mod xid;

use bcd_protocol::{GpuUuid, PciAddress};
use serde::{Deserialize, Serialize};

use crate::inventory::document::Gpu;

/// What a condition says happened, spelled in `faults.json`, `/v1/conditions` and the logs as
/// `Xid79`, `SXid20034` or `FellOffTheBus`. A kind this version does not know (from a newer
/// bcd's file) is kept as it was written, so nothing stored is lost.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConditionKind {
    /// XID `n` on a GPU.
    Xid(u32),
    /// SXid `n` on an NVSwitch.
    SXid(u32),
    /// The GPU fell off the bus (the driver's "GPU has fallen off the bus", with no XID).
    FellOffTheBus,
    /// Any other spelling, kept verbatim.
    Other(String),
}

impl ConditionKind {
    const XID: &'static str = "Xid";
    const SXID: &'static str = "SXid";
    const FELL_OFF_THE_BUS: &'static str = "FellOffTheBus";

    /// The XID's number, for an XID condition.
    pub fn xid(&self) -> Option<u32> {
        match self {
            Self::Xid(n) => Some(*n),
            _ => None,
        }
    }

    /// Reads a kind as written; never fails (an unknown spelling is [`ConditionKind::Other`]).
    pub fn parse(s: &str) -> Self {
        // Digits in the normal form only ("Xid079" would not write back the same).
        let number = |digits: &str| {
            (!digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && (digits == "0" || !digits.starts_with('0')))
            .then(|| digits.parse().ok())
            .flatten()
        };
        if let Some(n) = s.strip_prefix(Self::XID).and_then(number) {
            Self::Xid(n)
        } else if let Some(n) = s.strip_prefix(Self::SXID).and_then(number) {
            Self::SXid(n)
        } else if s == Self::FELL_OFF_THE_BUS {
            Self::FellOffTheBus
        } else {
            Self::Other(s.to_owned())
        }
    }
}

impl std::fmt::Display for ConditionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Xid(n) => write!(f, "{}{n}", Self::XID),
            Self::SXid(n) => write!(f, "{}{n}", Self::SXID),
            Self::FellOffTheBus => f.write_str(Self::FELL_OFF_THE_BUS),
            Self::Other(s) => f.write_str(s),
        }
    }
}

impl Serialize for ConditionKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ConditionKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(Self::parse(&s))
    }
}

/// The device a condition is about: a GPU by UUID, or an NVSwitch by PCI address (written in
/// NVML's form, `00000000:05:00.0`). A device an earlier bcd stored that is neither (it kept
/// whatever UUID the driver printed, `GPU-????...` included) is kept as written, so nothing
/// stored is lost; it matches no GPU.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConditionDevice {
    /// A GPU.
    Gpu(GpuUuid),
    /// An NVSwitch, by its PCI function.
    Switch(PciAddress),
    /// Any other spelling, kept verbatim.
    Other(String),
}

impl ConditionDevice {
    /// The GPU's UUID, for a GPU's condition.
    pub fn gpu(&self) -> Option<&GpuUuid> {
        match self {
            Self::Gpu(u) => Some(u),
            Self::Switch(_) | Self::Other(_) => None,
        }
    }

    /// Reads a device as written; never fails (see [`ConditionDevice::Other`]).
    pub fn parse(s: &str) -> Self {
        if let Ok(u) = s.parse::<GpuUuid>() {
            return Self::Gpu(u);
        }
        crate::smi::value::pci_address(s).map_or_else(|| Self::Other(s.to_owned()), Self::Switch)
    }
}

impl From<GpuUuid> for ConditionDevice {
    fn from(u: GpuUuid) -> Self {
        Self::Gpu(u)
    }
}

impl std::fmt::Display for ConditionDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Gpu(u) => u.fmt(f),
            Self::Switch(a) => f.write_str(&a.nvml_bus_id()),
            Self::Other(s) => f.write_str(s),
        }
    }
}

impl std::str::FromStr for ConditionDevice {
    type Err = std::convert::Infallible;

    /// [`ConditionDevice::parse`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self::parse(s))
    }
}

impl Serialize for ConditionDevice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ConditionDevice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self::parse(&String::deserialize(d)?))
    }
}

/// A device condition, as the node service reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    /// `Xid79`, ...
    pub kind: ConditionKind,
    /// Whether the condition holds now.
    pub status: bool,
    /// The GPU's UUID, or the switch's PCI address.
    pub device_id: ConditionDevice,
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
    pub(crate) fn is_xid_of(&self, uuid: &GpuUuid) -> bool {
        self.status && self.device_id.gpu() == Some(uuid) && self.kind.xid().is_some()
    }

    /// Whether a reset of GPU `uuid` ends this condition: the one rule of what `gpu.reset`
    /// may clear, and so of what only a reboot clears. A reset ends the GPU's live XID
    /// conditions whose remedy on this node (`policy`: NVIDIA's catalog and the node's
    /// overrides) is no more than a reset. Everything else stays until the next boot drops it
    /// (`faults.json` is per boot): an XID whose remedy is a reboot (79), a GPU that fell off
    /// the bus, an NVSwitch's SXid (resetting a GPU does not reset the switch) and a kind
    /// this version does not know.
    pub(crate) fn cleared_by_reset_of(&self, uuid: &GpuUuid, policy: &xid::XidPolicy) -> bool {
        self.is_xid_of(uuid)
            && self
                .kind
                .xid()
                .is_some_and(|n| policy.judge(n).remedy != xid::Remedy::RebootNode)
    }
}

/// Raises `kind` for `device_id` in `conditions`: a new condition, or the existing one with
/// its `last_seen` and message updated (one condition per kind and GPU). Returns whether
/// anything changed.
pub(crate) fn raise(
    conditions: &mut Vec<Condition>,
    kind: &ConditionKind,
    device_id: ConditionDevice,
    message: &str,
    now: u64,
) -> bool {
    if let Some(c) = conditions
        .iter_mut()
        .find(|c| &c.kind == kind && c.device_id == device_id)
    {
        let changed = true;
        c.count = c.count.max(1) + 1;
        c.status = true;
        c.message = message.to_owned();
        c.last_seen = now;
        return changed;
    }
    conditions.push(Condition {
        kind: kind.clone(),
        status: true,
        device_id,
        message: message.to_owned(),
        first_seen: now,
        last_seen: now,
        count: 1,
    });
    true
}

/// The count of uncorrectable volatile ECC errors, when above zero.
pub(crate) fn uncorrectable_volatile(gpu: &Gpu) -> Option<u64> {
    gpu.ecc
        .as_ref()
        .and_then(|e| e.volatile.as_ref())
        .and_then(|v| v.uncorrectable)
        .filter(|&n| n > 0)
}

/// The XID conditions of `gpu` (live, this boot), in the order given.
pub(crate) fn xid_conditions<'a>(gpu: &Gpu, conditions: &'a [Condition]) -> Vec<&'a Condition> {
    conditions
        .iter()
        .filter(|c| c.is_xid_of(&gpu.uuid))
        .collect()
}

/// A condition's class and action, from the XID catalog (and the node's overrides) for XIDs,
/// from the switch's severity for NVSwitch SXids.
pub(crate) fn describe(c: &Condition, policy: &xid::XidPolicy) -> (&'static str, String) {
    let device = c.device_id.to_string();
    match &c.kind {
        ConditionKind::Xid(n) => {
            let j = policy.judge(*n);
            (j.class.name(), j.remedy.action(&device))
        }
        ConditionKind::SXid(_) => {
            let fatal = kmsg::parse_sxid(&c.message).is_none_or(|s| s.fatal);
            (xid::XidClass::Interconnect.name(), kmsg::sxid_action(fatal))
        }
        ConditionKind::FellOffTheBus => (
            xid::XidClass::Bus.name(),
            xid::Remedy::RebootNode.action(&device),
        ),
        ConditionKind::Other(_) => (xid::XidClass::Unknown.name(), "see the message".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scheduling answer from the counters and this boot's conditions alone.
    fn gpu_healthy(gpu: &Gpu, conditions: &[Condition]) -> bool {
        verdict::judge(gpu, &verdict::Evidence::new(conditions)).healthy()
    }
    use crate::inventory::document::{Ecc, EccCounts, RowRemap};

    const UUID: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";
    const OTHER: &str = "GPU-00000000-0000-0000-0000-0000000000ff";

    fn healthy_gpu() -> Gpu {
        Gpu {
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
            ..Gpu::new(0, UUID.parse().unwrap())
        }
    }

    fn unhealthy_reasons(gpu: &Gpu, conditions: &[Condition]) -> Vec<String> {
        let v = verdict::judge(gpu, &verdict::Evidence::new(conditions));
        v.reasons.into_iter().map(|r| r.message).collect()
    }

    fn xid(kind: &str, device: &str) -> Condition {
        let mut v = Vec::new();
        let kind = ConditionKind::parse(kind);
        raise(
            &mut v,
            &kind,
            ConditionDevice::parse(device),
            "NVRM: Xid ...",
            1,
        );
        v.remove(0)
    }

    #[test]
    fn a_clean_gpu_is_healthy_even_with_aggregate_errors_and_correctables() {
        assert!(gpu_healthy(&healthy_gpu(), &[]));
        assert!(
            gpu_healthy(&Gpu::new(0, UUID.parse().unwrap()), &[]),
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
        let conds = [xid("Xid79", UUID), xid("Xid13", UUID), xid("Xid48", OTHER)];
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
        assert!(gpu_healthy(&g, &[cleared, not_xid, xid("Xid48", OTHER)]));
    }

    #[test]
    fn raising_twice_keeps_one_condition_per_kind_and_gpu() {
        let mut v = Vec::new();
        let gpu = || ConditionDevice::Gpu(UUID.parse().unwrap());
        assert!(raise(&mut v, &ConditionKind::Xid(79), gpu(), "first", 10));
        assert!(raise(&mut v, &ConditionKind::Xid(79), gpu(), "second", 20));
        assert!(raise(&mut v, &ConditionKind::Xid(13), gpu(), "other", 20));
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
        assert!(
            raise(&mut v, &ConditionKind::Xid(13), gpu(), "other", 20),
            "counted"
        );
        assert_eq!(v[1].count, 2);
    }

    #[test]
    fn condition_kinds_read_back_as_written() {
        for (text, kind) in [
            ("Xid79", ConditionKind::Xid(79)),
            ("Xid0", ConditionKind::Xid(0)),
            ("SXid20034", ConditionKind::SXid(20034)),
            ("FellOffTheBus", ConditionKind::FellOffTheBus),
            ("Xid", ConditionKind::Other("Xid".into())),
            ("XidX", ConditionKind::Other("XidX".into())),
            ("Xid079", ConditionKind::Other("Xid079".into())),
            (
                "MemoryPressure",
                ConditionKind::Other("MemoryPressure".into()),
            ),
        ] {
            assert_eq!(ConditionKind::parse(text), kind, "{text}");
            assert_eq!(kind.to_string(), text, "a kind writes back as it was read");
        }
        assert_eq!(ConditionKind::Xid(79).xid(), Some(79));
        assert_eq!(ConditionKind::SXid(20034).xid(), None);
    }

    #[test]
    fn devices_are_a_gpu_a_switch_or_kept_as_written() {
        let gpu = ConditionDevice::parse(&UUID.to_uppercase());
        assert_eq!(gpu.to_string(), UUID, "a GPU is named in its normal form");
        assert_eq!(gpu.gpu().map(GpuUuid::as_str), Some(UUID));
        let switch = ConditionDevice::parse("0000:05:00.0");
        assert_eq!(switch.to_string(), "00000000:05:00.0");
        let masked = ConditionDevice::parse("GPU-????????-????-????-????-????????????");
        assert_eq!(
            masked.to_string(),
            "GPU-????????-????-????-????-????????????"
        );
        assert_eq!(masked.gpu(), None, "it matches no GPU");
    }
}
