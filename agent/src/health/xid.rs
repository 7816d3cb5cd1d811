//! What an XID means: the one catalog bcd keeps, with NVIDIA's immediate action for each
//! number and the health effect that follows from it, and the node's overrides.
//!
//! The entries follow NVIDIA's XID catalog ("Analyzing Xid Errors with the Xid Catalog", its
//! resolution buckets `RESTART_APP`, `RESET_GPU`, `RESTART_BM`, `IGNORE`, ...), its GPU memory
//! error management guide (contained and uncontained errors, row remapping) and its list of
//! older XIDs. The health effect is derived from the action, never listed separately:
//!
//! | NVIDIA's action | [`Remedy`] | the GPU |
//! | --- | --- | --- |
//! | restart the application | [`Remedy::RestartApp`] | degraded: still schedulable |
//! | watch (a rate, not an event) | [`Remedy::Watch`] | degraded |
//! | nothing (informational) | [`Remedy::None`] | unaffected |
//! | reset the GPU | [`Remedy::ResetGpu`] | unhealthy until a reset |
//! | reboot the node | [`Remedy::RebootNode`] | unhealthy until a reboot |
//!
//! An XID the catalog does not know is unhealthy until a reset: the safe default. Which
//! conditions a reset ends is decided in one place, [`super::Condition::cleared_by_reset_of`],
//! from the remedy above.

use std::collections::BTreeSet;

use serde::Serialize;

/// What part of the GPU an XID is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum XidClass {
    /// The application's own fault (a bad address, an engine exception): the GPU is fine.
    Application,
    /// Device memory (ECC, row remapping, page retirement).
    Memory,
    /// NVLink, NVSwitch and C2C links.
    Interconnect,
    /// The PCIe bus: the GPU fell off it or stopped answering.
    Bus,
    /// The GPU's micro-controllers and GSP firmware.
    Firmware,
    /// Nothing to act on by itself (the counters or another reading say the rest).
    Informational,
    /// Not in the catalog.
    Unknown,
}

impl XidClass {
    /// The class's name, as the API and metrics spell it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            XidClass::Application => "application",
            XidClass::Memory => "memory",
            XidClass::Interconnect => "interconnect",
            XidClass::Bus => "bus",
            XidClass::Firmware => "firmware",
            XidClass::Informational => "informational",
            XidClass::Unknown => "unknown",
        }
    }
}

/// NVIDIA's immediate action for an XID, and so its health effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Remedy {
    /// Nothing to do.
    None,
    /// Keep an eye on the GPU (a rate went up); it may take work.
    Watch,
    /// Restart the application; the GPU may take work.
    RestartApp,
    /// Reset the GPU before it takes work again.
    ResetGpu,
    /// Reboot the node before the GPU takes work again.
    RebootNode,
}

/// The health effect of a remedy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Effect {
    /// No effect on the verdict.
    None,
    /// The GPU is degraded: it may take work, watch it.
    Degraded,
    /// The GPU may take no new work.
    Unhealthy,
}

impl Remedy {
    /// What the remedy does to the verdict.
    pub(crate) fn effect(self) -> Effect {
        match self {
            Remedy::None => Effect::None,
            Remedy::Watch | Remedy::RestartApp => Effect::Degraded,
            Remedy::ResetGpu | Remedy::RebootNode => Effect::Unhealthy,
        }
    }

    /// The operator's action for a GPU, as a sentence.
    pub(crate) fn action(self, uuid: &str) -> String {
        match self {
            Remedy::None => "nothing to do".to_owned(),
            Remedy::Watch => format!(
                "watch the GPU: it may take work; if the rate keeps rising, reset it: bcd gpu reset {uuid}"
            ),
            Remedy::RestartApp => "restart the application; the GPU is fine".to_owned(),
            Remedy::ResetGpu => format!("reset the GPU: bcd gpu reset {uuid}"),
            Remedy::RebootNode => "reboot the node".to_owned(),
        }
    }
}

/// One catalog entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XidInfo {
    /// The XID number.
    pub number: u32,
    /// What it means, in NVIDIA's words (shortened).
    pub meaning: &'static str,
    /// What it is about.
    pub class: XidClass,
    /// NVIDIA's immediate action.
    pub remedy: Remedy,
}

const fn entry(number: u32, meaning: &'static str, class: XidClass, remedy: Remedy) -> XidInfo {
    XidInfo {
        number,
        meaning,
        class,
        remedy,
    }
}

use Remedy as R;
use XidClass as C;

/// The catalog, by number.
pub(crate) const CATALOG: &[XidInfo] = &[
    entry(
        8,
        "GPU stopped processing (channel idle timeout)",
        C::Application,
        R::RestartApp,
    ),
    entry(
        13,
        "graphics engine exception",
        C::Application,
        R::RestartApp,
    ),
    entry(31, "GPU memory page fault", C::Application, R::RestartApp),
    entry(
        32,
        "invalid or corrupted push buffer stream",
        C::Application,
        R::RestartApp,
    ),
    entry(38, "driver firmware error", C::Firmware, R::ResetGpu),
    entry(43, "GPU stopped processing", C::Application, R::RestartApp),
    entry(
        45,
        "preemptive cleanup, due to previous errors",
        C::Application,
        R::RestartApp,
    ),
    entry(
        46,
        "GPU stopped processing (engine timeout)",
        C::Firmware,
        R::ResetGpu,
    ),
    entry(48, "double-bit ECC error", C::Memory, R::ResetGpu),
    entry(
        61,
        "internal micro-controller breakpoint",
        C::Firmware,
        R::ResetGpu,
    ),
    entry(
        62,
        "internal micro-controller halt",
        C::Firmware,
        R::ResetGpu,
    ),
    entry(
        63,
        "ECC page retirement or row remapping recorded",
        C::Informational,
        R::None,
    ),
    entry(
        64,
        "ECC page retirement or row remapping recording failure",
        C::Memory,
        R::ResetGpu,
    ),
    entry(
        68,
        "video decoder (NVDEC) exception",
        C::Application,
        R::RestartApp,
    ),
    entry(
        69,
        "graphics engine class error",
        C::Application,
        R::RestartApp,
    ),
    entry(74, "NVLink error", C::Interconnect, R::ResetGpu),
    entry(79, "GPU has fallen off the bus", C::Bus, R::RebootNode),
    entry(92, "high single-bit ECC error rate", C::Memory, R::Watch),
    entry(94, "contained memory error", C::Memory, R::RestartApp),
    entry(95, "uncontained memory error", C::Memory, R::ResetGpu),
    entry(109, "context switch timeout", C::Firmware, R::ResetGpu),
    entry(119, "GSP RPC timeout", C::Firmware, R::ResetGpu),
    entry(120, "GSP error", C::Firmware, R::ResetGpu),
    entry(121, "C2C link corrected error", C::Informational, R::None),
    entry(140, "unrecovered ECC error", C::Memory, R::ResetGpu),
    entry(
        149,
        "NVLink network (NETIR) fatal error",
        C::Interconnect,
        R::ResetGpu,
    ),
    entry(
        154,
        "the driver's GPU recovery action changed",
        C::Informational,
        R::None,
    ),
];

/// The catalog's entry for `number`.
pub(crate) fn lookup(number: u32) -> Option<&'static XidInfo> {
    CATALOG.iter().find(|e| e.number == number)
}

/// The XID whose arrival means the driver's recovery action changed: bcd collects at once.
pub(crate) const RECOVERY_ACTION_CHANGED: u32 = 154;

/// A list of XID numbers as an operator writes it: `13,31,43`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XidList(pub BTreeSet<u32>);

/// Why an XID list does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an XID number: give numbers separated by commas, such as 13,31,43")]
pub struct XidListError(String);

impl std::str::FromStr for XidList {
    type Err = XidListError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut out = BTreeSet::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let n: u32 = part
                .parse()
                .ok()
                .filter(|n| *n > 0 && *n < 100_000)
                .ok_or_else(|| XidListError(part.to_owned()))?;
            out.insert(n);
        }
        Ok(Self(out))
    }
}

/// The node's overrides of the catalog: XIDs to ignore, XIDs that make the GPU unhealthy.
/// Built by [`XidPolicy::new`] only, so no XID is both ignored and made unhealthy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XidPolicy {
    /// `--xid-ignore`: these XIDs never affect the verdict.
    ignore: BTreeSet<u32>,
    /// `--xid-unhealthy`: these XIDs make the GPU unhealthy until a reset.
    unhealthy: BTreeSet<u32>,
}

/// Why the node's XID overrides do not stand together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XidPolicyError {
    /// XIDs given to both `--xid-ignore` and `--xid-unhealthy`.
    #[error("{} given to both --xid-ignore and --xid-unhealthy: give {} to one of them", both_subject(.0), if .0.len() == 1 { "it" } else { "each" })]
    Both(Vec<u32>),
}

fn both_subject(xids: &[u32]) -> String {
    let list = xids
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    if xids.len() == 1 {
        format!("XID {list} is")
    } else {
        format!("XIDs {list} are")
    }
}

/// How one XID is judged on this node: the catalog's entry, or the override.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Judged {
    /// The number.
    pub number: u32,
    /// What it means (`unknown XID` when the catalog does not know it).
    pub meaning: &'static str,
    /// Its class.
    pub class: XidClass,
    /// The remedy after the node's overrides.
    pub remedy: Remedy,
    /// Whether an override decided the remedy.
    pub overridden: bool,
}

impl XidPolicy {
    /// The overrides `--xid-ignore` and `--xid-unhealthy` give.
    ///
    /// # Errors
    /// [`XidPolicyError::Both`] when an XID is in both sets: ignored and unhealthy cannot both
    /// hold, and neither flag silently wins.
    pub fn new(ignore: BTreeSet<u32>, unhealthy: BTreeSet<u32>) -> Result<Self, XidPolicyError> {
        let both: Vec<u32> = ignore.intersection(&unhealthy).copied().collect();
        if both.is_empty() {
            Ok(Self { ignore, unhealthy })
        } else {
            Err(XidPolicyError::Both(both))
        }
    }

    /// Judges `number`: an override first, then the catalog, then the safe default (reset).
    pub(crate) fn judge(&self, number: u32) -> Judged {
        let known = lookup(number);
        let (meaning, class, catalog_remedy) = known.map_or(
            (
                "an XID not in bcd's catalog",
                XidClass::Unknown,
                Remedy::ResetGpu,
            ),
            |e| (e.meaning, e.class, e.remedy),
        );
        let (remedy, overridden) = if self.ignore.contains(&number) {
            (Remedy::None, true)
        } else if self.unhealthy.contains(&number) {
            (catalog_remedy.max(Remedy::ResetGpu), true)
        } else {
            (catalog_remedy, false)
        };
        Judged {
            number,
            meaning,
            class,
            remedy,
            overridden,
        }
    }

    /// Whether the node changes anything about the catalog.
    pub(crate) fn is_default(&self) -> bool {
        self.ignore.is_empty() && self.unhealthy.is_empty()
    }

    /// The overrides in words, for `bcd doctor`.
    pub(crate) fn describe(&self) -> String {
        if self.is_default() {
            return "NVIDIA's XID catalog as it is (no --xid-ignore or --xid-unhealthy)".to_owned();
        }
        let list = |set: &BTreeSet<u32>| {
            set.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut parts = Vec::new();
        if !self.ignore.is_empty() {
            parts.push(format!("ignored: {}", list(&self.ignore)));
        }
        if !self.unhealthy.is_empty() {
            parts.push(format!("unhealthy until reset: {}", list(&self.unhealthy)));
        }
        format!("XID overrides: {}", parts.join("; "))
    }
}

impl Judged {
    /// Whether a repeat of this XID on the next boot means the GPU needs inspection: a
    /// hardware class whose remedy is a reset or a reboot.
    pub(crate) fn is_hardware(&self) -> bool {
        matches!(
            self.class,
            XidClass::Memory
                | XidClass::Interconnect
                | XidClass::Bus
                | XidClass::Firmware
                | XidClass::Unknown
        ) && self.remedy.effect() == Effect::Unhealthy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_is_sorted_and_has_one_entry_per_number() {
        for pair in CATALOG.windows(2) {
            assert!(pair[0].number < pair[1].number, "{pair:?}");
        }
    }

    #[test]
    fn application_xids_keep_the_gpu_schedulable_and_hardware_ones_do_not() {
        let p = XidPolicy::default();
        for n in [13, 31, 43, 45, 68, 94] {
            assert_eq!(p.judge(n).remedy.effect(), Effect::Degraded, "Xid {n}");
            assert_eq!(
                p.judge(n).remedy.action("GPU-x"),
                "restart the application; the GPU is fine"
            );
        }
        for n in [46, 48, 62, 64, 95, 109, 119, 120] {
            assert_eq!(p.judge(n).remedy, Remedy::ResetGpu, "Xid {n}");
            assert_eq!(
                p.judge(n).remedy.action("GPU-x"),
                "reset the GPU: bcd gpu reset GPU-x"
            );
        }
        assert_eq!(p.judge(79).remedy, Remedy::RebootNode);
        assert_eq!(p.judge(79).class, XidClass::Bus);
        assert_eq!(p.judge(63).remedy.effect(), Effect::None);
        assert_eq!(p.judge(92).remedy.effect(), Effect::Degraded);
    }

    #[test]
    fn an_unknown_xid_is_unhealthy_by_default() {
        let j = XidPolicy::default().judge(999);
        assert_eq!(
            (j.class, j.remedy.effect()),
            (XidClass::Unknown, Effect::Unhealthy)
        );
        assert!(j.is_hardware());
    }

    #[test]
    fn overrides_ignore_and_escalate() {
        let p = XidPolicy::new(
            "13,31".parse::<XidList>().unwrap().0,
            "43".parse::<XidList>().unwrap().0,
        )
        .unwrap();
        assert_eq!(p.judge(13).remedy.effect(), Effect::None);
        assert!(p.judge(13).overridden);
        assert_eq!(p.judge(43).remedy, Remedy::ResetGpu);
        assert_eq!(p.judge(79).remedy, Remedy::RebootNode, "untouched");
        assert_eq!(
            p.describe(),
            "XID overrides: ignored: 13,31; unhealthy until reset: 43"
        );
        assert!("13,x"
            .parse::<XidList>()
            .unwrap_err()
            .to_string()
            .contains("\"x\""));
        assert!("0".parse::<XidList>().is_err());
    }

    #[test]
    fn an_xid_both_ignored_and_unhealthy_is_refused() {
        assert_eq!(
            XidPolicy::new([13, 31].into(), [13].into())
                .unwrap_err()
                .to_string(),
            "XID 13 is given to both --xid-ignore and --xid-unhealthy: give it to one of them"
        );
        assert_eq!(
            XidPolicy::new([13, 31].into(), [31, 13, 43].into())
                .unwrap_err()
                .to_string(),
            "XIDs 13,31 are given to both --xid-ignore and --xid-unhealthy: give each to one of them"
        );
    }
}
