//! The health verdict: one of four states per GPU, with the reasons and, for each reason, the
//! action an operator takes. Every reader (`bcd status`, `/v1/status`, the metrics, the
//! scheduling answer `healthy`) asks [`judge`].
//!
//! | state | means | schedulable |
//! | --- | --- | --- |
//! | `healthy` | nothing to report | yes |
//! | `degraded` | may take work, watch it: throttling, application XIDs, a degraded fabric, correctable ECC errors above [`CORRECTABLE_PER_HOUR`], a PCIe link below its width | yes |
//! | `unhealthy` | no new work until the action is taken | no |
//! | `unknown` | nothing answered (`nvidia-smi` silent or not reporting the GPU), or passed through to a VM (the host cannot see it) | no |
//!
//! `unhealthy` wins over `unknown` (an XID 79 says more than a silent `nvidia-smi`), which wins
//! over `degraded`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bcd_protocol::GpuUuid;
use serde::Serialize;

use super::faults::PastBoot;
use super::pcie::LinkWidth;
use super::xid::{Effect, Remedy as Remedy_, XidPolicy};
use super::{uncorrectable_volatile, Condition, ConditionKind};
use crate::inventory::document::{Gpu, NvLinkRemote};
use crate::smi::samples::GpuSample;
use crate::smi::xml::{ClockEvents, DriverHealth};

/// A GPU's health state.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    /// Nothing to report.
    Healthy,
    /// May take work; watch it.
    Degraded,
    /// Nothing answered: never reported as healthy.
    #[default]
    Unknown,
    /// No new work.
    Unhealthy,
}

impl HealthState {
    /// Every state, for the metrics' one-series-per-state family.
    pub(crate) const ALL: [HealthState; 4] = [
        HealthState::Healthy,
        HealthState::Degraded,
        HealthState::Unhealthy,
        HealthState::Unknown,
    ];

    /// The state's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            HealthState::Healthy => "healthy",
            HealthState::Degraded => "degraded",
            HealthState::Unhealthy => "unhealthy",
            HealthState::Unknown => "unknown",
        }
    }

    /// The scheduling answer: healthy and degraded GPUs may take work.
    pub(crate) fn schedulable(self) -> bool {
        matches!(self, HealthState::Healthy | HealthState::Degraded)
    }
}

/// What kind of problem a [`Reason`] is. `Display` (and the JSON documents) spell it as bcd
/// always has: `Xid79`, `FellOffTheBus` for a kernel log condition, `RecoveryAction`,
/// `Fabric`, `Throttled`, ... for the rest.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReasonKind {
    /// A condition of the kernel log: an XID, a GPU that fell off the bus.
    Condition(ConditionKind),
    /// `nvidia-smi -q -x` did not answer.
    NvidiaSmiSilent,
    /// `nvidia-smi` answered without this GPU.
    NotReported,
    /// The driver's `gpu_recovery_action` or `gpu_reset_status`.
    RecoveryAction,
    /// The NVLink fabric.
    Fabric,
    /// NVSwitches without a fabric manager.
    FabricManager,
    /// Clocks slowed by hardware, heat or a power brake.
    Throttled,
    /// Row remapping.
    RowRemap,
    /// Uncorrectable ECC errors.
    EccUncorrectable,
    /// Correctable ECC errors at a high rate.
    EccCorrectableRate,
    /// A fatal SXid on an NVSwitch this GPU's NVLinks reach.
    NvSwitchFatal,
    /// The PCIe link trained below its maximum width.
    PcieLink,
    /// A GPU sampled that the inventory does not list (yet).
    NotInInventory,
}

impl ReasonKind {
    /// The kinds that are not kernel log conditions, with their spellings.
    const NAMED: [(ReasonKind, &'static str); 12] = [
        (ReasonKind::NvidiaSmiSilent, "NvidiaSmiSilent"),
        (ReasonKind::NotReported, "NotReported"),
        (ReasonKind::RecoveryAction, "RecoveryAction"),
        (ReasonKind::Fabric, "Fabric"),
        (ReasonKind::FabricManager, "FabricManager"),
        (ReasonKind::Throttled, "Throttled"),
        (ReasonKind::RowRemap, "RowRemap"),
        (ReasonKind::EccUncorrectable, "EccUncorrectable"),
        (ReasonKind::EccCorrectableRate, "EccCorrectableRate"),
        (ReasonKind::NvSwitchFatal, "NvSwitchFatal"),
        (ReasonKind::PcieLink, "PcieLink"),
        (ReasonKind::NotInInventory, "NotInInventory"),
    ];

    /// Reads a kind as written; never fails (any other spelling is a condition's kind).
    pub fn parse(s: &str) -> Self {
        Self::NAMED.iter().find(|(_, name)| *name == s).map_or_else(
            || Self::Condition(ConditionKind::parse(s)),
            |(k, _)| k.clone(),
        )
    }
}

impl std::fmt::Display for ReasonKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Condition(c) => c.fmt(f),
            named => {
                let name = Self::NAMED
                    .iter()
                    .find(|(k, _)| k == named)
                    .map_or("", |(_, n)| n);
                f.write_str(name)
            }
        }
    }
}

/// [`ReasonKind::parse`].
impl From<&str> for ReasonKind {
    fn from(s: &str) -> Self {
        Self::parse(s)
    }
}

/// Compares the spelling.
impl PartialEq<&str> for ReasonKind {
    fn eq(&self, other: &&str) -> bool {
        *self == Self::parse(other)
    }
}

impl Serialize for ReasonKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ReasonKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Ok(Self::parse(&s))
    }
}

/// One reason a GPU is not healthy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Reason {
    /// What kind of problem.
    pub kind: ReasonKind,
    /// What was found, in words.
    pub message: String,
    /// What the operator does, as a sentence.
    pub action: String,
    /// The state this reason alone puts the GPU in.
    #[serde(skip)]
    pub state: HealthState,
}

/// A GPU's state and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// The worst state of the reasons; `healthy` without any.
    pub health: HealthState,
    /// Why, worst first.
    pub reasons: Vec<Reason>,
}

impl Verdict {
    /// The scheduling answer.
    pub(crate) fn healthy(&self) -> bool {
        self.health.schedulable()
    }

    fn of(mut reasons: Vec<Reason>) -> Self {
        reasons.sort_by_key(|r| std::cmp::Reverse(r.state));
        Self {
            health: reasons
                .iter()
                .map(|r| r.state)
                .max()
                .unwrap_or(HealthState::Healthy),
            reasons,
        }
    }
}

/// What the judge knows besides the inventory's counters. Built only by [`Evidence::new`]
/// and its `with_*` steps; what is not given is absent (no history, no driver readings, no
/// samples, no rates, no link widths, the fabric manager not known to be down).
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// This boot's conditions.
    conditions: &'a [Condition],
    /// Earlier boots' hardware XIDs, oldest first.
    history: &'a [PastBoot],
    /// The node's XID overrides.
    policy: Option<&'a XidPolicy>,
    /// The driver's readings per GPU UUID from the latest `-q -x`; `None` when it gave none.
    driver: Option<&'a BTreeMap<GpuUuid, DriverHealth>>,
    /// Why `nvidia-smi -q -x` gave nothing, when it did not answer.
    silent: Option<&'a str>,
    /// NVSwitches on the bus while the fabric manager is not active (their count).
    fabric_manager_down: Option<usize>,
    /// The latest samples: their clock event reasons, where they have them, are newer than
    /// the `-q -x` document's and win over them.
    samples: &'a [GpuSample],
    /// The volatile correctable ECC error rates between collections; `None` where no two
    /// collections were compared (`bcd status`).
    correctable: Option<&'a CorrectableRates>,
    /// Every GPU of the inventory: which NVSwitch a GPU's NVLinks reach is known only by
    /// looking at them all (see [`switch_fault`]).
    board: &'a [Gpu],
    /// The PCIe link widths sysfs gives, per GPU UUID; `None` where they were not read.
    links: Option<&'a BTreeMap<GpuUuid, LinkWidth>>,
}

impl<'a> Evidence<'a> {
    /// This boot's `conditions`, and nothing else yet.
    pub fn new(conditions: &'a [Condition]) -> Self {
        Self {
            conditions,
            history: &[],
            policy: None,
            driver: None,
            silent: None,
            fabric_manager_down: None,
            samples: &[],
            correctable: None,
            board: &[],
            links: None,
        }
    }

    /// Every GPU of the inventory (see [`switch_fault`]).
    pub(crate) fn with_board(self, board: &'a [Gpu]) -> Self {
        Self { board, ..self }
    }

    /// Earlier boots' hardware XIDs, oldest first.
    pub(crate) fn with_history(self, history: &'a [PastBoot]) -> Self {
        Self { history, ..self }
    }

    /// The node's XID overrides.
    pub(crate) fn with_policy(self, policy: &'a XidPolicy) -> Self {
        Self {
            policy: Some(policy),
            ..self
        }
    }

    /// The driver's readings per GPU UUID from the latest `-q -x` (`None`: it gave none), and
    /// why `nvidia-smi -q -x` gave nothing when it did not answer.
    pub(crate) fn with_driver(
        self,
        driver: Option<&'a BTreeMap<GpuUuid, DriverHealth>>,
        silent: Option<&'a str>,
    ) -> Self {
        Self {
            driver,
            silent,
            ..self
        }
    }

    /// How many NVSwitches are on the bus while the fabric manager is not active, if it is not.
    pub(crate) fn with_fabric_manager_down(self, fabric_manager_down: Option<usize>) -> Self {
        Self {
            fabric_manager_down,
            ..self
        }
    }

    /// The latest samples.
    pub(crate) fn with_samples(self, samples: &'a [GpuSample]) -> Self {
        Self { samples, ..self }
    }

    /// The correctable ECC error rates between two collections.
    pub(crate) fn with_correctable(self, correctable: &'a CorrectableRates) -> Self {
        Self {
            correctable: Some(correctable),
            ..self
        }
    }

    /// The PCIe link widths sysfs gives, per GPU UUID.
    pub(crate) fn with_links(self, links: &'a BTreeMap<GpuUuid, LinkWidth>) -> Self {
        Self {
            links: Some(links),
            ..self
        }
    }
}

/// Volatile correctable ECC errors per hour above which a GPU is degraded. Correctable errors
/// are fixed by the hardware and cost nothing by themselves, but a steady stream of them is
/// how memory that will fail shows first; 100 an hour is well above the odd error a healthy
/// HBM stack corrects and well below what a failing one does.
pub(crate) const CORRECTABLE_PER_HOUR: f64 = 100.0;

/// The shortest span a correctable error rate is measured over, so that two collections a
/// second apart (an XID, a refresh) never turn one error into thousands an hour. Growth within
/// a shorter span counts only once it exceeds what the threshold allows over this span.
pub(crate) const CORRECTABLE_RATE_WINDOW: Duration = Duration::from_secs(10 * 60);

/// The volatile correctable ECC counters' growth between collections, per GPU UUID.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CorrectableRates {
    /// The counter and when it was read, at the start of the span being measured.
    baselines: BTreeMap<GpuUuid, (u64, Instant)>,
    /// Errors per hour over the last span measured.
    rates: BTreeMap<GpuUuid, f64>,
}

impl CorrectableRates {
    /// Takes in the counters of a collection made at `at`. A counter that went down (a driver
    /// reload or a GPU reset clears the volatile counters) starts a new span, and a GPU without
    /// a counter is forgotten.
    pub(crate) fn observe(&mut self, gpus: &[Gpu], at: Instant) {
        let window_h = CORRECTABLE_RATE_WINDOW.as_secs_f64() / 3600.0;
        let mut seen = Vec::new();
        for g in gpus {
            let Some(count) = g
                .ecc
                .as_ref()
                .and_then(|e| e.volatile.as_ref())
                .and_then(|v| v.correctable)
            else {
                continue;
            };
            seen.push(g.uuid.clone());
            let Some(&(base, since)) = self.baselines.get(&g.uuid) else {
                self.baselines.insert(g.uuid.clone(), (count, at));
                continue;
            };
            if count < base {
                self.baselines.insert(g.uuid.clone(), (count, at));
                self.rates.remove(&g.uuid);
                continue;
            }
            #[allow(clippy::cast_precision_loss)]
            let growth = (count - base) as f64;
            let span = at.saturating_duration_since(since);
            if span >= CORRECTABLE_RATE_WINDOW {
                self.rates
                    .insert(g.uuid.clone(), growth / (span.as_secs_f64() / 3600.0));
                self.baselines.insert(g.uuid.clone(), (count, at));
            } else if growth > CORRECTABLE_PER_HOUR * window_h {
                // More than the whole window allows already: the rate over the window can only
                // be higher than this lower bound.
                self.rates.insert(g.uuid.clone(), growth / window_h);
            }
        }
        self.baselines.retain(|uuid, _| seen.contains(uuid));
        self.rates.retain(|uuid, _| seen.contains(uuid));
    }

    /// The GPU's correctable errors per hour over the last span measured.
    pub(crate) fn per_hour(&self, uuid: &GpuUuid) -> Option<f64> {
        self.rates.get(uuid).copied()
    }
}

/// The action for a GPU whose correctable errors come fast.
pub(crate) const CORRECTABLE_ACTION: &str = "watch the GPU: its memory corrects errors at a high rate, which often comes before uncorrectable ones; drain it at the next chance and run the vendor's memory diagnostics (dcgmi diag -r 3)";

fn reason(state: HealthState, kind: ReasonKind, message: String, action: String) -> Reason {
    Reason {
        kind,
        message,
        action,
        state,
    }
}

/// The reason kinds that are not kernel log conditions, by the names callers match on.
pub(crate) mod kind {
    use super::ReasonKind;
    /// `nvidia-smi -q -x` did not answer.
    pub(crate) const NVIDIA_SMI_SILENT: ReasonKind = ReasonKind::NvidiaSmiSilent;
    /// `nvidia-smi` answered without this GPU.
    pub(crate) const NOT_REPORTED: ReasonKind = ReasonKind::NotReported;
    /// The driver's `gpu_recovery_action` or `gpu_reset_status`.
    pub(crate) const RECOVERY_ACTION: ReasonKind = ReasonKind::RecoveryAction;
    /// The NVLink fabric.
    pub(crate) const FABRIC: ReasonKind = ReasonKind::Fabric;
    /// NVSwitches without a fabric manager.
    pub const FABRIC_MANAGER: ReasonKind = ReasonKind::FabricManager;
    /// Clocks slowed by hardware, heat or a power brake.
    pub(crate) const THROTTLED: ReasonKind = ReasonKind::Throttled;
    /// Row remapping.
    pub(crate) const ROW_REMAP: ReasonKind = ReasonKind::RowRemap;
    /// Uncorrectable ECC errors.
    pub(crate) const ECC: ReasonKind = ReasonKind::EccUncorrectable;
    /// Correctable ECC errors at a high rate.
    pub(crate) const ECC_CORRECTABLE_RATE: ReasonKind = ReasonKind::EccCorrectableRate;
    /// A fatal SXid on an NVSwitch this GPU's NVLinks reach.
    pub(crate) const SWITCH_FATAL: ReasonKind = ReasonKind::NvSwitchFatal;
    /// The PCIe link trained below its maximum width.
    pub(crate) const PCIE_LINK: ReasonKind = ReasonKind::PcieLink;
}

/// What a GPU needs before it takes work again, as the recovery loop reads a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remedy {
    /// Nothing: it may take work (healthy or degraded).
    None,
    /// A reset clears every reason that makes it unhealthy.
    Reset,
    /// Only a reboot will do; the reason, in words.
    Reboot(String),
    /// A person must look: a reason no reset is known to clear (the fabric, row remapping, a
    /// silent `nvidia-smi`, a kind bcd does not know); the reason, in words.
    Operator(String),
}

/// The one rule of what a reset fixes, applied to a verdict: [`Remedy::Reset`] only when every
/// reason that makes the GPU unhealthy is one a reset clears (an XID whose remedy in the
/// catalog, with the node's overrides, is a reset; the driver's recovery action `Reset`,
/// `Drain And Reset`, or a reset it says is required); any reason whose remedy is a reboot
/// (Xid 79, the driver's `Reboot`, a GPU that fell off the bus) makes it [`Remedy::Reboot`];
/// any other unhealthy reason, or an `unknown` verdict, [`Remedy::Operator`].
pub fn remedy(verdict: &Verdict, policy: &XidPolicy) -> Remedy {
    if verdict.healthy() {
        return Remedy::None;
    }
    if verdict.health == HealthState::Unknown {
        return Remedy::Operator("nothing answered for the GPU".to_owned());
    }
    let mut operator = None;
    for r in verdict
        .reasons
        .iter()
        .filter(|r| r.state == HealthState::Unhealthy)
    {
        let said = format!("{}: {}", r.kind, r.message);
        match reason_remedy(r, policy) {
            Some(true) => {}
            Some(false) => return Remedy::Reboot(said),
            None => {
                operator.get_or_insert(said);
            }
        }
    }
    operator.map_or(Remedy::Reset, Remedy::Operator)
}

/// Whether a reset clears `r` (`Some(true)`), only a reboot does (`Some(false)`), or neither is
/// known to (`None`).
fn reason_remedy(r: &Reason, policy: &XidPolicy) -> Option<bool> {
    match &r.kind {
        ReasonKind::Condition(ConditionKind::Xid(n)) => match policy.judge(*n).remedy {
            Remedy_::ResetGpu => Some(true),
            Remedy_::RebootNode => Some(false),
            _ => None,
        },
        ReasonKind::Condition(ConditionKind::FellOffTheBus) => Some(false),
        ReasonKind::RecoveryAction => {
            let m = r.message.to_ascii_lowercase();
            if m.contains("reset is required") || m.contains("drain and reset") {
                return Some(true);
            }
            let value = m.split('"').nth(1).unwrap_or("");
            match value {
                "reset"
                | "gpu reset"
                | "gpu_reset"
                | "drain and reset"
                | "drain_and_reset"
                | "drain p2p and reset" => Some(true),
                "reboot" | "node reboot" | "node_reboot" => Some(false),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The driver's recovery action in bcd's words: (message, action), `None` for no action.
/// NVML's values are matched in nvidia-smi's spellings without regard to case; any other
/// non-empty value needs attention.
pub(crate) fn recovery_action(value: &str, uuid: &str) -> Option<(String, String)> {
    let v = value.trim().to_ascii_lowercase();
    let action = match v.as_str() {
        "" | "none" => return None,
        "reset" | "gpu reset" | "gpu_reset" => format!("reset the GPU: bcd gpu reset {uuid}"),
        "reboot" | "node reboot" | "node_reboot" => "reboot the node".to_owned(),
        "drain p2p" | "drain_p2p" => "drain the GPU's peer-to-peer (NVLink) work: stop the jobs that use it across GPUs; the driver clears the action once they are gone".to_owned(),
        "drain and reset" | "drain_and_reset" | "drain p2p and reset" => {
            format!("drain the GPU, then reset it: stop its jobs, then bcd gpu reset {uuid}")
        }
        _ => format!("the GPU needs attention: look up the driver's recovery action {value:?} in NVIDIA's documentation of gpu_recovery_action before it takes work"),
    };
    Some((format!("the driver's recovery action is {value:?}"), action))
}

/// Judges `gpu`. A GPU passed through to a VM is `unknown`, without reasons: the host cannot
/// see it (no sample, no `-q -x`, no counters newer than the passthrough memory), and what a VM
/// has takes no work from the host.
pub(crate) fn judge(gpu: &Gpu, ev: &Evidence<'_>) -> Verdict {
    if gpu.passed_through {
        return Verdict {
            health: HealthState::Unknown,
            reasons: Vec::new(),
        };
    }
    let uuid = &gpu.uuid;
    let mut out = Vec::new();
    counters(gpu, &mut out);
    if let Some(rate) = ev
        .correctable
        .and_then(|r| r.per_hour(uuid))
        .filter(|&r| r > CORRECTABLE_PER_HOUR)
    {
        out.push(reason(
            HealthState::Degraded,
            kind::ECC_CORRECTABLE_RATE,
            format!("{rate:.0} correctable volatile ECC errors an hour (more than {CORRECTABLE_PER_HOUR:.0})"),
            CORRECTABLE_ACTION.into(),
        ));
    }
    xids(gpu, ev, &mut out);
    switch_fault(gpu, ev, &mut out);
    match (ev.silent, ev.driver) {
        (Some(why), _) => out.push(reason(
            HealthState::Unknown,
            kind::NVIDIA_SMI_SILENT,
            format!("nvidia-smi -q -x did not answer: {why}"),
            crate::smi::hint::gpu_action(why, uuid.as_str()),
        )),
        (None, Some(map)) => match map.get(uuid) {
            Some(d) => driver(d, uuid, &mut out),
            None => out.push(reason(
                HealthState::Unknown,
                kind::NOT_REPORTED,
                "the driver lists this GPU but nvidia-smi -q -x does not report it".into(),
                "check the GPU: it may have fallen off the bus (dmesg: Xid 79); reboot the node if it did".into(),
            )),
        },
        (None, None) => {}
    }
    throttling(uuid, ev, &mut out);
    if let Some(l) = ev.links.and_then(|m| m.get(uuid)).filter(|l| l.narrowed()) {
        out.push(reason(
            HealthState::Degraded,
            kind::PCIE_LINK,
            format!("the PCIe link runs at x{} of x{}", l.current, l.max),
            PCIE_LINK_ACTION.into(),
        ));
    }
    if let Some(n) = ev.fabric_manager_down {
        out.push(reason(
            HealthState::Unhealthy,
            kind::FABRIC_MANAGER,
            format!("{n} NVSwitch(es) on the bus but nvidia-fabricmanager is not active: CUDA fails on every GPU of the board"),
            "start the fabric manager: systemctl enable --now nvidia-fabricmanager".into(),
        ));
    }
    Verdict::of(out)
}

/// A fatal SXid stops its NVSwitch's NVLinks: until the next boot, every GPU whose NVLinks
/// reach that switch is unhealthy with the SXid's action. Which GPUs those are is known from
/// `nvlink -R` (a link whose far end is `nvswitch:<its bus id>`). Where no GPU's links name the
/// switch (no `nvlink -R` answer, or one whose switches do not match the SXid's address), every
/// GPU with an NVLink to any NVSwitch counts (a link whose far end is a switch, or, far ends
/// unknown, any NVLink at all): on HGX boards, every GPU. A non-fatal SXid changes nothing
/// here (the switch's condition says "watch").
fn switch_fault(gpu: &Gpu, ev: &Evidence<'_>, out: &mut Vec<Reason>) {
    let fatal = ev
        .conditions
        .iter()
        .filter(|c| c.status && matches!(c.kind, ConditionKind::SXid(_)))
        .filter_map(|c| {
            super::kmsg::parse_sxid(&c.message)
                .filter(|s| s.fatal)
                .map(|s| (c, s))
        });
    for (c, sxid) in fatal {
        let switch = NvLinkRemote::NvSwitch(sxid.address.nvml_bus_id());
        let names = |g: &Gpu| g.nvlinks.iter().any(|l| l.remote.as_ref() == Some(&switch));
        let reached = if ev.board.iter().any(names) {
            names(gpu)
        } else {
            let to_switch = gpu
                .nvlinks
                .iter()
                .any(|l| matches!(l.remote, Some(NvLinkRemote::NvSwitch(_))));
            let far_ends_unknown = gpu.nvlinks.iter().all(|l| l.remote.is_none());
            let any_nvlink =
                !gpu.nvlinks.is_empty() || gpu.topology.values().any(|t| t.starts_with("NV"));
            to_switch || (far_ends_unknown && any_nvlink)
        };
        if reached {
            out.push(reason(
                HealthState::Unhealthy,
                kind::SWITCH_FATAL,
                format!(
                    "fatal SXid {} on NVSwitch {}, which this GPU's NVLinks reach: {}",
                    sxid.number,
                    sxid.address,
                    crate::smi::escape_line(&c.message)
                ),
                super::kmsg::sxid_action(true),
            ));
        }
    }
}

/// The message of a [`kind::ROW_REMAP`] reason for failed row remapping.
pub(crate) const ROW_REMAP_FAILED: &str = "row remapping failed";
/// The message of a [`kind::ROW_REMAP`] reason for a remap that waits for a reset.
pub(crate) const ROW_REMAP_PENDING: &str = "a row remap waits for a GPU reset";

/// The reasons the GPU's own counters give (row remapping, uncorrectable volatile ECC errors).
/// The one place their sentences are written.
fn counters(gpu: &Gpu, out: &mut Vec<Reason>) {
    let uuid = &gpu.uuid;
    if let Some(rr) = &gpu.row_remap {
        if rr.failure == Some(true) {
            out.push(reason(
                HealthState::Unhealthy,
                kind::ROW_REMAP,
                ROW_REMAP_FAILED.into(),
                "replace the GPU: row remapping failed, which NVIDIA's RMA policy counts as a failed GPU".into(),
            ));
        }
        if rr.pending == Some(true) {
            out.push(reason(
                HealthState::Unhealthy,
                kind::ROW_REMAP,
                ROW_REMAP_PENDING.into(),
                format!("reset the GPU: bcd gpu reset {uuid}"),
            ));
        }
    }
    if let Some(n) = uncorrectable_volatile(gpu) {
        out.push(reason(
            HealthState::Unhealthy,
            kind::ECC,
            format!("{n} uncorrectable volatile ECC error(s) since the driver loaded"),
            format!("reset the GPU: bcd gpu reset {uuid}"),
        ));
    }
}

/// The action for a hardware XID that came back on the next boot.
pub(crate) const INSPECT_ACTION: &str =
    "the GPU needs inspection: the same hardware XID on the last two boots";

fn xids(gpu: &Gpu, ev: &Evidence<'_>, out: &mut Vec<Reason>) {
    let default = XidPolicy::default();
    let policy = ev.policy.unwrap_or(&default);
    let last_boot = ev.history.last();
    for c in ev.conditions.iter().filter(|c| {
        c.status && c.device_id.gpu() == Some(&gpu.uuid) && c.kind == ConditionKind::FellOffTheBus
    }) {
        out.push(reason(
            HealthState::Unhealthy,
            ReasonKind::Condition(c.kind.clone()),
            format!("the GPU fell off the bus: {}", c.message),
            super::xid::Remedy::RebootNode.action(gpu.uuid.as_str()),
        ));
    }
    for c in ev.conditions.iter().filter(|c| c.is_xid_of(&gpu.uuid)) {
        let Some(number) = c.kind.xid() else {
            continue;
        };
        let j = policy.judge(number);
        let state = match j.remedy.effect() {
            Effect::None => continue,
            Effect::Degraded => HealthState::Degraded,
            Effect::Unhealthy => HealthState::Unhealthy,
        };
        let repeated = j.is_hardware() && last_boot.is_some_and(|b| b.has(&gpu.uuid, number));
        let action = if repeated {
            INSPECT_ACTION.to_owned()
        } else {
            j.remedy.action(gpu.uuid.as_str())
        };
        let times = c.count.max(1);
        out.push(reason(
            state,
            ReasonKind::Condition(c.kind.clone()),
            format!(
                "Xid {number} ({}, class {}) {times} time(s) this boot{}: {}",
                j.meaning,
                j.class.name(),
                if repeated {
                    " and on the boot before"
                } else {
                    ""
                },
                c.message
            ),
            action,
        ));
    }
}

fn driver(d: &DriverHealth, uuid: &GpuUuid, out: &mut Vec<Reason>) {
    if let Some((message, action)) = d
        .recovery_action
        .as_deref()
        .and_then(|v| recovery_action(v, uuid.as_str()))
    {
        out.push(reason(
            HealthState::Unhealthy,
            kind::RECOVERY_ACTION,
            message,
            action,
        ));
    } else if d.drain_and_reset_recommended == Some(true) {
        out.push(reason(
            HealthState::Unhealthy,
            kind::RECOVERY_ACTION,
            "the driver recommends a drain and reset (gpu_reset_status)".into(),
            format!("drain the GPU, then reset it: stop its jobs, then bcd gpu reset {uuid}"),
        ));
    } else if d.reset_required == Some(true) {
        out.push(reason(
            HealthState::Unhealthy,
            kind::RECOVERY_ACTION,
            "the driver says a reset is required (gpu_reset_status)".into(),
            format!("reset the GPU: bcd gpu reset {uuid}"),
        ));
    }
    let fabric =
        |state, message: String, action: String| reason(state, kind::FABRIC, message, action);
    if let Some(s) = d
        .fabric_state
        .as_deref()
        .filter(|s| !s.eq_ignore_ascii_case("completed"))
    {
        out.push(fabric(
            HealthState::Unhealthy,
            format!("the NVLink fabric's state is {s:?}, not \"Completed\""),
            "start the fabric manager (systemctl enable --now nvidia-fabricmanager) and wait for the fabric to complete; if it stays, read nvidia-fabricmanager's log".into(),
        ));
    }
    if let Some(s) = d
        .fabric_status
        .as_deref()
        .filter(|s| !s.eq_ignore_ascii_case("success"))
    {
        out.push(fabric(
            HealthState::Unhealthy,
            format!("the NVLink fabric's status is {s:?}"),
            "read nvidia-fabricmanager's log, then reset the GPU or reboot the node as it says"
                .into(),
        ));
    }
    if d.fabric_route_unhealthy == Some(true) {
        out.push(fabric(
            HealthState::Unhealthy,
            "an NVLink fabric route is unhealthy".into(),
            format!("reset the GPU: bcd gpu reset {uuid}; if the route stays unhealthy, check its NVLinks (nvidia-smi nvlink -s)"),
        ));
    }
    if d.fabric_route_recovery_in_progress == Some(true) {
        out.push(fabric(
            HealthState::Degraded,
            "the fabric manager is recovering an NVLink route".into(),
            "wait: the GPU may take work while the route recovers".into(),
        ));
    }
    if let Some(b) = d
        .fabric_bandwidth
        .as_deref()
        .filter(|b| !b.eq_ignore_ascii_case("full"))
    {
        out.push(fabric(
            HealthState::Degraded,
            format!("the NVLink fabric's bandwidth is {b:?}, not \"Full\""),
            "watch the GPU: it may take work at less NVLink bandwidth; check its NVLinks (nvidia-smi nvlink -s)".into(),
        ));
    }
    if let Some(s) = d
        .fabric_summary
        .as_deref()
        .filter(|s| !s.eq_ignore_ascii_case("healthy"))
    {
        out.push(fabric(
            HealthState::Degraded,
            format!("the NVLink fabric's health summary is {s:?}"),
            "watch the GPU: check its NVLinks (nvidia-smi nvlink -s) and nvidia-fabricmanager's log".into(),
        ));
    }
}

/// The clocks slowed down by hardware, heat or a power brake: from the GPU's latest sample
/// where it has clock reasons (they last seconds, the `-q -x` document is minutes old), else
/// from the driver's `-q -x` readings.
fn throttling(uuid: &GpuUuid, ev: &Evidence<'_>, out: &mut Vec<Reason>) {
    let sampled = ev
        .samples
        .iter()
        .find(|s| &s.uuid == uuid)
        .map(|s| s.clock_events)
        .filter(ClockEvents::any_reading);
    let events = sampled.or_else(|| {
        ev.driver
            .filter(|_| ev.silent.is_none())
            .and_then(|m| m.get(uuid))
            .map(|d| d.clock_events)
    });
    let active = events.map(|e| e.active()).unwrap_or_default();
    if !active.is_empty() {
        out.push(reason(
            HealthState::Degraded,
            kind::THROTTLED,
            format!("clocks slowed down: {}", active.join(", ")),
            THROTTLED_ACTION.into(),
        ));
    }
}

/// The action for a GPU whose PCIe link trained below its width.
pub(crate) const PCIE_LINK_ACTION: &str = "check the riser, slot and seating at the next maintenance: the GPU may take work but moves data to and from the host more slowly";

/// The action for a GPU whose clocks are slowed down.
pub(crate) const THROTTLED_ACTION: &str =
    "check the GPU's cooling and power supply: it may take work but runs slower while this lasts";

#[cfg(test)]
mod tests {
    use super::*;

    // What broke: nothing said which unhealthy GPUs a reset fixes; the recovery loop may act
    // only where every unhealthy reason is one a reset clears.
    #[test]
    fn a_verdict_is_a_reset_only_when_every_unhealthy_reason_is_one_a_reset_clears() {
        let policy = XidPolicy::default();
        let r = |kind: ReasonKind, message: &str, state| {
            reason(state, kind, message.into(), String::new())
        };
        let v = |reasons: Vec<Reason>| Verdict::of(reasons);
        let xid = |n| ReasonKind::Condition(ConditionKind::Xid(n));
        let u = HealthState::Unhealthy;
        assert_eq!(remedy(&v(vec![]), &policy), Remedy::None);
        assert_eq!(remedy(&v(vec![r(xid(48), "x", u)]), &policy), Remedy::Reset);
        assert_eq!(
            remedy(
                &v(vec![
                    r(xid(48), "x", u),
                    r(kind::THROTTLED, "hot", HealthState::Degraded)
                ]),
                &policy
            ),
            Remedy::Reset,
            "a degraded reason does not keep a reset from happening"
        );
        assert!(matches!(
            remedy(&v(vec![r(xid(48), "x", u), r(xid(79), "y", u)]), &policy),
            Remedy::Reboot(_)
        ));
        assert!(matches!(
            remedy(
                &v(vec![r(xid(48), "x", u), r(kind::FABRIC, "f", u)]),
                &policy
            ),
            Remedy::Operator(_)
        ));
        let action = |value: &str| {
            let (m, _) = recovery_action(value, "GPU-x").unwrap();
            remedy(&v(vec![r(kind::RECOVERY_ACTION, &m, u)]), &policy)
        };
        assert_eq!(action("GPU Reset"), Remedy::Reset);
        assert_eq!(action("Drain And Reset"), Remedy::Reset);
        assert!(matches!(action("Node Reboot"), Remedy::Reboot(_)));
        assert!(matches!(action("Drain P2P"), Remedy::Operator(_)));
        let unknown = Verdict {
            health: HealthState::Unknown,
            reasons: vec![],
        };
        assert!(matches!(remedy(&unknown, &policy), Remedy::Operator(_)));
    }

    // The reason kind became an enum; its spelling in status, diag and the JSON documents is
    // the one the strings had, and every spelling reads back as the same kind.
    #[test]
    fn reason_kinds_keep_their_spelling_and_read_back() {
        for (kind, name) in ReasonKind::NAMED {
            assert_eq!(kind.to_string(), name);
            assert_eq!(ReasonKind::parse(name), kind);
        }
        let xid = ReasonKind::Condition(ConditionKind::Xid(79));
        assert_eq!(xid.to_string(), "Xid79");
        assert_eq!(ReasonKind::parse("Xid79"), xid);
        assert_eq!(
            serde_json::to_string(&kind::FABRIC_MANAGER).unwrap(),
            "\"FabricManager\""
        );
        let back: ReasonKind = serde_json::from_str("\"FellOffTheBus\"").unwrap();
        assert_eq!(back, ReasonKind::Condition(ConditionKind::FellOffTheBus));
    }
    use crate::inventory::document::{Ecc, EccCounts};

    const UUID: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";

    fn with_correctable(n: u64) -> Gpu {
        Gpu {
            ecc: Some(Ecc {
                mode: Some(true),
                volatile: Some(EccCounts {
                    correctable: Some(n),
                    uncorrectable: Some(0),
                }),
                aggregate: None,
            }),
            ..Gpu::new(0, UUID.parse().unwrap())
        }
    }

    /// A GPU with one active NVLink whose far end is `remote` (`None`: not known).
    fn linked(index: u32, uuid: &str, remote: Option<&str>) -> Gpu {
        Gpu {
            nvlinks: vec![crate::inventory::document::NvLink {
                link: 0,
                state: "active".into(),
                remote: remote.map(|r| NvLinkRemote::from(r.to_owned())),
            }],
            ..Gpu::new(index, uuid.parse().unwrap())
        }
    }

    fn sxid(severity: &str) -> Condition {
        Condition {
            kind: ConditionKind::SXid(20034),
            status: true,
            device_id: super::super::ConditionDevice::Switch("0000:05:00.0".parse().unwrap()),
            message: format!(
                "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, {severity}, Link 30 LTSSM Fault Up"
            ),
            first_seen: 1,
            last_seen: 1,
            count: 1,
        }
    }

    // A fatal NVSwitch SXid was recorded on the switch with "stop the jobs on this board's
    // GPUs, then reboot the node", yet every GPU stayed healthy and took new pods. The GPUs
    // whose NVLinks reach the switch are unhealthy now, every NVLinked GPU when no link names
    // it; a non-fatal SXid changes no GPU.
    #[test]
    fn a_fatal_sxid_makes_the_gpus_its_switch_reaches_unhealthy() {
        const OTHER: &str = "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a";
        let fatal = [sxid("Fatal")];
        // No nvlink -R: every GPU with an NVLink, and not one without.
        let board = [linked(0, UUID, None), Gpu::new(1, OTHER.parse().unwrap())];
        let ev = Evidence::new(&fatal).with_board(&board);
        let v = judge(&board[0], &ev);
        assert_eq!(v.health, HealthState::Unhealthy, "{v:?}");
        assert_eq!(v.reasons[0].kind, kind::SWITCH_FATAL);
        assert!(
            v.reasons[0]
                .message
                .contains("fatal SXid 20034 on NVSwitch 0000:05:00.0"),
            "{v:?}"
        );
        assert!(v.reasons[0]
            .action
            .starts_with("stop the jobs on this board's GPUs, then reboot"));
        assert_eq!(
            judge(&board[1], &ev).health,
            HealthState::Healthy,
            "no NVLink"
        );
        // Links naming switches: only the GPU whose link names this one.
        let board = [
            linked(0, UUID, Some("nvswitch:00000000:05:00.0")),
            linked(1, OTHER, Some("nvswitch:00000000:06:00.0")),
        ];
        let ev = ev.with_board(&board);
        assert_eq!(judge(&board[0], &ev).health, HealthState::Unhealthy);
        assert_eq!(judge(&board[1], &ev).health, HealthState::Healthy);
        // Links naming switches, none this one (an address spelt otherwise): every GPU
        // linked to a switch.
        let board = [
            linked(0, UUID, Some("nvswitch:00000000:07:00.0")),
            linked(1, OTHER, Some("nvswitch:00000000:06:00.0")),
        ];
        let ev = ev.with_board(&board);
        assert_eq!(judge(&board[0], &ev).health, HealthState::Unhealthy);
        assert_eq!(judge(&board[1], &ev).health, HealthState::Unhealthy);
        let watched = [sxid("Non-fatal")];
        let ev = Evidence::new(&watched).with_board(&board);
        assert_eq!(judge(&board[0], &ev).health, HealthState::Healthy);
    }

    fn judged(gpu: &Gpu, rates: &CorrectableRates) -> Verdict {
        judge(gpu, &Evidence::new(&[]).with_correctable(rates))
    }

    // What broke: correctable ECC errors were never judged, so a GPU correcting thousands an
    // hour (the first sign of failing memory) read healthy until one went uncorrectable.
    #[test]
    fn a_high_correctable_error_rate_makes_the_gpu_degraded() {
        let t0 = Instant::now();
        let mut rates = CorrectableRates::default();
        rates.observe(&[with_correctable(5)], t0);
        assert_eq!(
            rates.per_hour(&UUID.parse().unwrap()),
            None,
            "one reading is no rate"
        );
        // 60 more in an hour: below the threshold.
        let hour = Duration::from_secs(3600);
        rates.observe(&[with_correctable(65)], t0 + hour);
        assert_eq!(rates.per_hour(&UUID.parse().unwrap()), Some(60.0));
        assert_eq!(
            judged(&with_correctable(65), &rates).health,
            HealthState::Healthy
        );
        // 150 in the next half hour: 300 an hour.
        let now = with_correctable(215);
        rates.observe(std::slice::from_ref(&now), t0 + hour + hour / 2);
        assert_eq!(rates.per_hour(&UUID.parse().unwrap()), Some(300.0));
        let v = judged(&now, &rates);
        assert_eq!((v.health, v.healthy()), (HealthState::Degraded, true));
        assert_eq!(v.reasons[0].kind, "EccCorrectableRate");
        assert_eq!(
            v.reasons[0].message,
            "300 correctable volatile ECC errors an hour (more than 100)"
        );
        assert_eq!(v.reasons[0].action, CORRECTABLE_ACTION);
        // A reset clears the volatile counter: a new span starts, with no rate yet.
        rates.observe(&[with_correctable(0)], t0 + hour * 2);
        assert_eq!(rates.per_hour(&UUID.parse().unwrap()), None);
        assert_eq!(
            judged(&with_correctable(0), &rates).health,
            HealthState::Healthy
        );
    }

    // Two collections seconds apart (an XID, a refresh) must not turn one error into
    // thousands an hour; a burst beyond what the whole window allows counts at once.
    #[test]
    fn a_short_span_counts_only_a_burst_beyond_the_window() {
        let t0 = Instant::now();
        let mut rates = CorrectableRates::default();
        rates.observe(&[with_correctable(0)], t0);
        rates.observe(&[with_correctable(2)], t0 + Duration::from_secs(2));
        assert_eq!(rates.per_hour(&UUID.parse().unwrap()), None);
        rates.observe(&[with_correctable(50)], t0 + Duration::from_secs(60));
        // 50 errors are more than the 16.7 that 100 an hour allows in 10 minutes.
        assert_eq!(rates.per_hour(&UUID.parse().unwrap()), Some(300.0));
        // A GPU that no longer reports a counter is forgotten.
        rates.observe(
            &[Gpu::new(0, UUID.parse().unwrap())],
            t0 + Duration::from_secs(61),
        );
        assert_eq!(rates, CorrectableRates::default());
    }
}
