//! Closed-loop recovery (`bcd node --remediate`): what to do next for each GPU, as a pure
//! decision from its remedy (the verdict read by [`crate::health::verdict::remedy`], the one
//! rule of what a reset fixes), what uses it, its budget and the clock ([`decide`]); and the
//! record of every remediation, kept per boot in the data folder (`remediations.json`), so a
//! restart neither repeats a reset that was done nor forgets how many were used.
//!
//! The node's task (`crate::node::remediate`) carries the decisions out: one reset at a time,
//! through the same claimed reset as `bcd gpu reset`; what it shows is kept in [`Recovery`].
//!
//! Rules:
//! - a GPU is reset only when every reason that makes it unhealthy is one a reset clears, the
//!   verdict has stood for `--remediate-after`, nothing uses it (no hold of any owner, no DRA
//!   claim, no VM, no compute process, no step, no pending MIG mode change) and its backoff
//!   has passed; never while anything uses it: the loop waits and says what for;
//! - a failed or refused reset, or one after which the GPU is still unhealthy, is tried again
//!   after a backoff that starts at `--remediate-backoff` and doubles;
//! - a GPU whose remedy is a reboot, or whose `--remediate-max-resets` resets (per boot, never
//!   replenished) are used up, is reboot-required: never reset again this boot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bcd_protocol::GpuUuid;
use serde::{Deserialize, Serialize};

use crate::health::status::RemediationView;
use crate::health::verdict::Remedy;
use crate::state::{self, StateError};

/// The record's file in the data folder.
pub const FILE: &str = "remediations.json";
const VERSION: u32 = 1;
/// Remediations kept in the record (older ones are dropped).
pub const MAX_HISTORY: usize = 200;

/// `bcd node --remediate*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// How long a reset-worthy verdict stands before the loop acts, in seconds.
    pub after_s: u64,
    /// Resets per GPU per boot.
    pub max_resets: u32,
    /// The first wait after a failed try, in seconds; it doubles.
    pub backoff_s: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            after_s: 30,
            max_resets: 3,
            backoff_s: 60,
        }
    }
}

/// One GPU's standing this boot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standing {
    /// Resets tried this boot (recorded before each one runs).
    pub resets_used: u32,
    /// Unix seconds before which no reset is tried (the backoff).
    #[serde(default)]
    pub next_try_at: u64,
    /// Unix seconds since when its reset-worthy verdict stands; `None` while it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// Why a reboot is required, once it is: never reset again this boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_required: Option<String>,
    /// The remediation under way (its index in the history), while one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open: Option<u64>,
}

/// One step of a remediation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Unix seconds.
    pub at: u64,
    /// What happened, in words.
    pub what: String,
}

/// One remediation: a GPU from its reset-worthy verdict to its result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remediation {
    /// Its number, from 1, for the whole record.
    pub id: u64,
    pub gpu: GpuUuid,
    /// The boot it happened in.
    pub boot_id: String,
    /// Why, in the verdict's words.
    pub reason: String,
    /// Unix seconds of the verdict that started it.
    pub started_at: u64,
    pub steps: Vec<StepRecord>,
    /// `recovered`, `failed` (a try failed; more may follow) or `reboot-required`; `None`
    /// while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<u64>,
}

/// The record: this boot's standings and the remediations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub version: u32,
    /// The boot the standings are for; another boot starts a new budget.
    pub boot_id: String,
    pub gpus: BTreeMap<GpuUuid, Standing>,
    pub history: Vec<Remediation>,
    /// Whether this node wrote `--reboot-required-file` (it removes only a file it made).
    #[serde(default)]
    pub wrote_reboot_file: bool,
}

impl state::Versioned for Record {
    fn version(&self) -> u32 {
        self.version
    }
}

impl Record {
    /// The record of `data_dir` for boot `boot_id`: the standings are dropped when they are of
    /// another boot (the history is kept).
    ///
    /// # Errors
    /// A record that cannot be read (set aside when it does not parse).
    pub fn load(data_dir: &Path, boot_id: &str) -> Result<Self, StateError> {
        let mut r =
            state::load_versioned::<Record>(&data_dir.join(FILE), VERSION)?.unwrap_or_default();
        if r.boot_id != boot_id {
            r.gpus.clear();
            r.boot_id = boot_id.to_owned();
        }
        r.version = VERSION;
        Ok(r)
    }

    /// Writes the record atomically.
    ///
    /// # Errors
    /// The write's failure.
    pub fn save(&self, data_dir: &Path) -> Result<(), StateError> {
        let bytes = serde_json::to_vec_pretty(self).unwrap_or_default();
        state::write_atomic(&data_dir.join(FILE), &bytes, state::PRIVATE_MODE)
    }

    /// The remediation `id`.
    pub fn remediation(&mut self, id: u64) -> Option<&mut Remediation> {
        self.history.iter_mut().find(|r| r.id == id)
    }

    /// Opens a remediation of `gpu` for `reason` and answers its id.
    pub fn open(&mut self, gpu: &GpuUuid, reason: &str, since: u64) -> u64 {
        let id = self.history.last().map_or(1, |r| r.id + 1);
        self.history.push(Remediation {
            id,
            gpu: gpu.clone(),
            boot_id: self.boot_id.clone(),
            reason: reason.to_owned(),
            started_at: since,
            steps: Vec::new(),
            result: None,
            finished_at: None,
        });
        if self.history.len() > MAX_HISTORY {
            let drop = self.history.len() - MAX_HISTORY;
            self.history.drain(..drop);
        }
        self.gpus.entry(gpu.clone()).or_default().open = Some(id);
        id
    }

    /// Adds a step to `gpu`'s open remediation.
    pub fn step(&mut self, gpu: &GpuUuid, at: u64, what: String) {
        let open = self.gpus.get(gpu).and_then(|s| s.open);
        if let Some(r) = open.and_then(|id| self.remediation(id)) {
            r.steps.push(StepRecord { at, what });
        }
    }

    /// Ends `gpu`'s open remediation with `result`.
    pub fn close(&mut self, gpu: &GpuUuid, at: u64, result: &str) {
        let open = self.gpus.get_mut(gpu).and_then(|s| s.open.take());
        if let Some(r) = open.and_then(|id| self.remediation(id)) {
            r.result = Some(result.to_owned());
            r.finished_at = Some(at);
        }
    }
}

/// `--remediate*` and `--reboot-required-file`, as the node was started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemediateConfig {
    pub settings: Settings,
    /// Written while a GPU is reboot-required (for kured's `--reboot-sentinel`).
    pub reboot_required_file: Option<PathBuf>,
}

/// What the loop shows (status, metrics, labels, the DRA slice, `/v1/remediations`): each
/// GPU's remediation now, the counts, the record as last written. The node keeps it; the
/// loop (`crate::node::remediate`) fills it.
#[derive(Debug, Default)]
pub struct Recovery {
    view: Mutex<BTreeMap<GpuUuid, RemediationView>>,
    totals: Mutex<Totals>,
    record: Mutex<Option<Record>>,
}

#[derive(Debug, Default, Clone)]
struct Totals {
    recovered: u64,
    failed: u64,
    reboot_required: u64,
    /// Seconds from the verdict to the recovery, of the last one.
    last_recovery_s: Option<u64>,
}

impl Recovery {
    /// Each GPU's remediation now (empty without `--remediate`).
    pub fn view(&self) -> BTreeMap<GpuUuid, RemediationView> {
        self.view.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// The record as last written (`None` before the loop's first pass).
    pub fn record(&self) -> Option<Record> {
        self.record.lock().ok().and_then(|r| r.clone())
    }

    /// Replaces each GPU's remediation; answers whether anything changed.
    pub fn set_view(&self, view: BTreeMap<GpuUuid, RemediationView>) -> bool {
        self.view.lock().is_ok_and(|mut v| {
            let changed = *v != view;
            *v = view;
            changed
        })
    }

    /// Keeps the record as last written.
    pub fn set_record(&self, record: &Record) {
        if let Ok(mut r) = self.record.lock() {
            *r = Some(record.clone());
        }
    }

    /// Counts a remediation ended with `result` (`recovered` with the seconds from its
    /// verdict, `failed`, `reboot-required`).
    pub fn count(&self, result: &str, seconds: Option<u64>) {
        if let Ok(mut t) = self.totals.lock() {
            match result {
                "recovered" => {
                    t.recovered += 1;
                    t.last_recovery_s = seconds;
                }
                "failed" => t.failed += 1,
                _ => t.reboot_required += 1,
            }
        }
    }

    /// The loop's metrics, in Prometheus' text format.
    pub fn metrics_text(&self) -> String {
        let view = self.view();
        if view.is_empty() {
            return String::new();
        }
        let t = self.totals.lock().map(|t| t.clone()).unwrap_or_default();
        let mut out = String::from(
            "# HELP bcd_gpu_reboot_required Whether only a reboot will bring the GPU back (bcd node --remediate).\n# TYPE bcd_gpu_reboot_required gauge\n",
        );
        for (uuid, v) in &view {
            out.push_str(&format!(
                "bcd_gpu_reboot_required{{uuid=\"{uuid}\"}} {}\n",
                u8::from(v.reboot_required)
            ));
        }
        out.push_str("# HELP bcd_remediations_total Remediations ended, by result.\n# TYPE bcd_remediations_total counter\n");
        for (result, n) in [
            ("recovered", t.recovered),
            ("failed", t.failed),
            ("reboot-required", t.reboot_required),
        ] {
            out.push_str(&format!(
                "bcd_remediations_total{{result=\"{result}\"}} {n}\n"
            ));
        }
        if let Some(s) = t.last_recovery_s {
            out.push_str("# HELP bcd_remediation_last_recovery_seconds Seconds from the verdict to the GPU offered again, of the last recovery.\n# TYPE bcd_remediation_last_recovery_seconds gauge\n");
            out.push_str(&format!("bcd_remediation_last_recovery_seconds {s}\n"));
        }
        out
    }
}

/// What the loop does next for one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to remedy.
    Healthy,
    /// A reset would do, once the verdict has stood long enough (Unix seconds).
    Settling { until: u64 },
    /// A reset would do, once what uses the GPU is gone.
    Wait { for_what: String },
    /// A reset would do, after the backoff (Unix seconds).
    Backoff { until: u64 },
    /// Reset it now.
    Reset,
    /// Only a reboot will do; why.
    RebootRequired { why: String },
    /// No reset is known to help: a person must look; why.
    Operator { why: String },
}

impl Decision {
    /// The state word status shows: `healthy`, `settling`, `waiting`, `backoff`, `resetting`,
    /// `reboot-required`, `operator`.
    pub fn word(&self) -> &'static str {
        match self {
            Decision::Healthy => "healthy",
            Decision::Settling { .. } => "settling",
            Decision::Wait { .. } => "waiting",
            Decision::Backoff { .. } => "backoff",
            Decision::Reset => "resetting",
            Decision::RebootRequired { .. } => "reboot-required",
            Decision::Operator { .. } => "operator",
        }
    }
}

/// What the loop does for a GPU whose verdict asks for `remedy`, with `busy` what uses it now
/// (`None`: nothing), its `standing` this boot, at Unix second `now`. Pure.
pub fn decide(
    remedy: &Remedy,
    busy: Option<&str>,
    standing: &Standing,
    settings: &Settings,
    now: u64,
) -> Decision {
    if let Some(why) = &standing.reboot_required {
        return Decision::RebootRequired { why: why.clone() };
    }
    match remedy {
        Remedy::None => Decision::Healthy,
        Remedy::Reboot(why) => Decision::RebootRequired {
            why: format!("its remedy is a reboot ({why})"),
        },
        Remedy::Operator(why) => Decision::Operator { why: why.clone() },
        Remedy::Reset => {
            if standing.resets_used >= settings.max_resets {
                return Decision::RebootRequired {
                    why: format!(
                        "its {} reset(s) this boot did not recover it (--remediate-max-resets)",
                        standing.resets_used
                    ),
                };
            }
            let since = standing.since.unwrap_or(now);
            if now < since + settings.after_s {
                return Decision::Settling {
                    until: since + settings.after_s,
                };
            }
            if now < standing.next_try_at {
                return Decision::Backoff {
                    until: standing.next_try_at,
                };
            }
            match busy {
                Some(what) => Decision::Wait {
                    for_what: what.to_owned(),
                },
                None => Decision::Reset,
            }
        }
    }
}

/// The wait after the `tries`-th failed try: `backoff_s`, doubling, at most a day.
pub fn backoff(settings: &Settings, tries: u32) -> u64 {
    let doubled = settings
        .backoff_s
        .saturating_mul(1u64 << tries.saturating_sub(1).min(20));
    doubled.min(24 * 3600)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_000_000;

    fn standing(resets: u32, since: Option<u64>, next: u64) -> Standing {
        Standing {
            resets_used: resets,
            next_try_at: next,
            since,
            ..Standing::default()
        }
    }

    #[test]
    fn a_reset_waits_for_the_verdict_to_stand_the_backoff_and_the_work() {
        let s = Settings::default();
        let d = |busy, st: &Standing| decide(&Remedy::Reset, busy, st, &s, NOW);
        assert_eq!(
            d(None, &standing(0, Some(NOW - 5), 0)),
            Decision::Settling { until: NOW + 25 }
        );
        assert_eq!(d(None, &standing(0, Some(NOW - 30), 0)), Decision::Reset);
        assert_eq!(
            d(
                Some("hold job-7 (operator)"),
                &standing(0, Some(NOW - 30), 0)
            ),
            Decision::Wait {
                for_what: "hold job-7 (operator)".into()
            }
        );
        assert_eq!(
            d(None, &standing(1, Some(NOW - 300), NOW + 60)),
            Decision::Backoff { until: NOW + 60 }
        );
    }

    #[test]
    fn a_reboot_remedy_and_a_spent_budget_are_reboot_required_for_good() {
        let s = Settings::default();
        let st = standing(3, Some(NOW - 300), 0);
        assert!(matches!(
            decide(&Remedy::Reset, None, &st, &s, NOW),
            Decision::RebootRequired { .. }
        ));
        assert!(matches!(
            decide(
                &Remedy::Reboot("Xid79".into()),
                None,
                &Standing::default(),
                &s,
                NOW
            ),
            Decision::RebootRequired { .. }
        ));
        // Once required, healthy-looking verdicts do not undo it this boot.
        let done = Standing {
            reboot_required: Some("x".into()),
            ..Standing::default()
        };
        assert!(matches!(
            decide(&Remedy::None, None, &done, &s, NOW),
            Decision::RebootRequired { .. }
        ));
        assert!(matches!(
            decide(
                &Remedy::Operator("Fabric".into()),
                None,
                &Standing::default(),
                &s,
                NOW
            ),
            Decision::Operator { .. }
        ));
    }

    #[test]
    fn the_backoff_doubles_and_is_bounded() {
        let s = Settings {
            backoff_s: 60,
            ..Settings::default()
        };
        assert_eq!([1, 2, 3, 4].map(|n| backoff(&s, n)), [60, 120, 240, 480]);
        assert_eq!(backoff(&s, 60), 24 * 3600);
    }

    #[test]
    fn the_record_keeps_the_history_and_starts_a_new_budget_each_boot() {
        let dir = tempfile::tempdir().unwrap();
        let gpu: GpuUuid = "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a".parse().unwrap();
        let mut r = Record::load(dir.path(), "boot-1").unwrap();
        let id = r.open(&gpu, "Xid48", NOW);
        r.gpus.get_mut(&gpu).unwrap().resets_used = 2;
        r.step(&gpu, NOW + 1, "reset".into());
        r.save(dir.path()).unwrap();
        let again = Record::load(dir.path(), "boot-1").unwrap();
        assert_eq!(again.gpus[&gpu].resets_used, 2, "a restart keeps the count");
        assert_eq!(again.history[0].id, id);
        let next = Record::load(dir.path(), "boot-2").unwrap();
        assert!(next.gpus.is_empty(), "a new boot, a new budget");
        assert_eq!(next.history.len(), 1);
    }
}
