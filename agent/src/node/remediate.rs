//! The recovery loop of `bcd node --remediate`: every [`PASS`], each GPU's verdict is read
//! as a remedy ([`crate::health::verdict::remedy`]), what uses the GPU is named, and
//! [`crate::recovery::decide`] says what to do; at most one reset runs at a time on the node
//! (so GPUs that share an NVSwitch fabric are never reset at once), through the same claimed
//! reset as `bcd gpu reset`. A GPU waiting for its work never blocks the others.
//!
//! Each remediation and each try is written to `remediations.json` before the reset runs, so
//! a restart neither repeats a reset nor loses the count. A recovered GPU with an applied MIG
//! layout gets its instances back through the layout's apply. Reboot-required GPUs are named
//! in status, the metrics and the labels, and written to `--reboot-required-file` (a file
//! this node removes only when it made it). bcd never reboots the node and never releases a
//! hold.

use std::collections::BTreeMap;
use std::time::Duration;

use bcd_protocol::GpuUuid;

use super::shared::Node;
use crate::device::hold::HoldOwner;
use crate::device::id::DeviceId;
use crate::device::policy::Busy;
use crate::health::status::RemediationView;
use crate::health::verdict::{remedy, Remedy};
use crate::recovery::{backoff, decide, Decision, Record, RemediateConfig};

/// How often the loop looks at the GPUs.
pub const PASS: Duration = Duration::from_secs(1);

/// What uses `uuid` now, in words (`hold job-7 (operator)`, `VM`, `2 compute process(es)`,
/// `a step of the node's`, `a pending MIG mode change`); `None` when nothing does.
async fn what_uses(node: &Node, uuid: &GpuUuid) -> Option<String> {
    let id = DeviceId::from(uuid);
    if node.claimed().contains(&id) {
        return Some("a step of the node's (a reset, a vfio step, a MIG change)".to_owned());
    }
    let holds = node.holds_now().await;
    let topology = node.topology().await;
    if let Some(busy) = topology.busy(&id, &holds) {
        return Some(match busy {
            Busy::Held { hold, .. } | Busy::PendingRelease { hold, .. } => {
                let owner = holds
                    .iter()
                    .find(|h| h.id == hold)
                    .and_then(|h| h.owner)
                    .map_or("", |owner| match owner {
                        HoldOwner::Operator => " (operator)",
                        HoldOwner::DevicePlugin => " (Kubernetes device plugin)",
                        HoldOwner::Dra => " (DRA claim)",
                    });
                format!("hold {hold}{owner}")
            }
            other => other.to_string(),
        });
    }
    let inventory = node.inventory().await;
    let gpu = inventory.gpu.gpus.iter().find(|g| &g.uuid == uuid)?;
    if let Some(m) = &gpu.mig {
        if m.pending_mode.is_some() && m.pending_mode != m.mode {
            return Some("a pending MIG mode change".to_owned());
        }
    }
    let samples = node.samples_now().await;
    match samples
        .iter()
        .find(|s| &s.uuid == uuid)
        .map(|s| s.compute_processes)
    {
        Some(Some(0)) => None,
        Some(Some(n)) => Some(format!("{n} compute process(es)")),
        // No count (the query failed or no sample yet): no proof that nothing runs there.
        _ => Some("its compute processes, which cannot be read yet".to_owned()),
    }
}

/// Runs the loop until the node stops.
pub async fn run(node: &Node, config: RemediateConfig) {
    let data = node.config().data_dir.clone();
    let boot = node.boot_id();
    let mut record = match Record::load(&data, &boot) {
        Ok(r) => r,
        Err(e) => {
            node.problem(format!(
                "the remediation record cannot be read ({e}); the recovery loop starts a new one"
            ));
            Record {
                boot_id: boot.clone(),
                ..Record::default()
            }
        }
    };
    // A remediation a stop cut off: its reset, if it ran, was counted before it ran.
    for (uuid, s) in record.gpus.clone() {
        if s.open.is_some() {
            record.step(
                &uuid,
                crate::state::unix_now(),
                "bcd node restarted during the remediation; its count is kept".to_owned(),
            );
        }
    }
    loop {
        pass(node, &config, &mut record).await;
        tokio::time::sleep(PASS).await;
    }
}

/// One look at every GPU, and at most one reset.
async fn pass(node: &Node, config: &RemediateConfig, record: &mut Record) {
    let now = crate::state::unix_now();
    let policy = &node.config().xid_policy;
    let verdicts = node.verdicts().await;
    let mut view = BTreeMap::new();
    let mut to_reset: Option<(GpuUuid, String)> = None;
    let mut changed = false;
    for (uuid, verdict) in &verdicts {
        let remedy = remedy(verdict, policy);
        let reason = verdict
            .reasons
            .first()
            .map(|r| format!("{}: {}", r.kind, r.message))
            .unwrap_or_default();
        let before = record.gpus.entry(uuid.clone()).or_default().clone();
        match (&remedy, before.since) {
            (Remedy::Reset, None) => {
                record.gpus.entry(uuid.clone()).or_default().since = Some(now);
                changed = true;
            }
            (Remedy::None, Some(_)) => {
                record.gpus.entry(uuid.clone()).or_default().since = None;
                if before.open.is_some() && before.reboot_required.is_none() {
                    record.step(uuid, now, "healthy again without a reset by bcd".to_owned());
                    record.close(uuid, now, "recovered");
                }
                changed = true;
            }
            _ => {}
        }
        let standing = record.gpus.get(uuid).cloned().unwrap_or_default();
        let busy = if remedy == Remedy::Reset {
            what_uses(node, uuid).await
        } else {
            None
        };
        let decision = decide(&remedy, busy.as_deref(), &standing, &config.settings, now);
        match &decision {
            Decision::Reset if to_reset.is_none() => {
                to_reset = Some((uuid.clone(), reason.clone()));
            }
            Decision::RebootRequired { why } if standing.reboot_required.is_none() => {
                tracing::error!(
                    "GPU {uuid}: a reboot is required: {why}; bcd resets it no more this boot"
                );
                if standing.open.is_none() {
                    record.open(uuid, &reason, standing.since.unwrap_or(now));
                }
                record.step(uuid, now, format!("reboot required: {why}"));
                record.close(uuid, now, "reboot-required");
                if let Some(s) = record.gpus.get_mut(uuid) {
                    s.reboot_required = Some(why.clone());
                }
                node.recovery().count("reboot-required", None);
                changed = true;
            }
            Decision::Wait { for_what } => {
                let s = record.gpus.entry(uuid.clone()).or_default();
                if s.open.is_none() {
                    record.open(uuid, &reason, standing.since.unwrap_or(now));
                    tracing::warn!("GPU {uuid}: a reset would clear it; waiting for {for_what}");
                    record.step(uuid, now, format!("waiting for {for_what}"));
                    changed = true;
                }
            }
            _ => {}
        }
        let standing = record.gpus.get(uuid).cloned().unwrap_or_default();
        view.insert(
            uuid.clone(),
            RemediationView {
                state: decision.word().to_owned(),
                waiting_for: match &decision {
                    Decision::Wait { for_what } => Some(for_what.clone()),
                    _ => None,
                },
                resets_used: standing.resets_used,
                reboot_required: standing.reboot_required.is_some(),
                why: match &decision {
                    Decision::RebootRequired { why } | Decision::Operator { why } => {
                        Some(why.clone())
                    }
                    _ => None,
                },
            },
        );
    }
    publish(node, view, record);
    if let Some((uuid, reason)) = to_reset {
        reset_one(node, config, record, &uuid, &reason).await;
        changed = true;
    }
    if changed {
        save(node, record);
    }
    reboot_file(node, config, record);
}

fn publish(node: &Node, view: BTreeMap<GpuUuid, RemediationView>, record: &Record) {
    let changed = node.recovery().set_view(view);
    node.recovery().set_record(record);
    if changed {
        node.touch_devices();
    }
}

fn save(node: &Node, record: &Record) {
    if let Err(e) = record.save(&node.config().data_dir) {
        node.problem(format!("the remediation record cannot be written: {e}"));
    }
    node.recovery().set_record(record);
}

/// Resets `uuid`: the try counted and written first, then the claimed reset, then the
/// verdict; a recovered GPU with an applied MIG layout gets its instances back.
async fn reset_one(
    node: &Node,
    config: &RemediateConfig,
    record: &mut Record,
    uuid: &GpuUuid,
    reason: &str,
) {
    let now = crate::state::unix_now();
    let since = record.gpus.get(uuid).and_then(|s| s.since).unwrap_or(now);
    if record.gpus.get(uuid).is_none_or(|s| s.open.is_none()) {
        record.open(uuid, reason, since);
    }
    let tries = {
        let s = record.gpus.entry(uuid.clone()).or_default();
        s.resets_used += 1;
        s.next_try_at = now + backoff(&config.settings, s.resets_used);
        s.resets_used
    };
    record.step(
        uuid,
        now,
        format!("reset {tries} of {}", config.settings.max_resets),
    );
    // Counted before it runs: a restart never repeats it unknowingly.
    save(node, record);
    tracing::warn!("GPU {uuid}: {reason}; resetting it (try {tries})");
    let outcome = super::api::reset(node, std::slice::from_ref(uuid)).await;
    let at = crate::state::unix_now();
    let failed = match outcome {
        Ok(report) => match report.gpus.first() {
            Some(g) if g.healthy => None,
            Some(g) => Some(match &g.error {
                Some(e) => format!("the reset failed: {e}"),
                None => format!("still unhealthy after the reset: {}", g.reasons.join("; ")),
            }),
            None => Some("the reset answered nothing for the GPU".to_owned()),
        },
        Err(super::api::ApiError::GpuBusy(why)) => {
            // Something took the GPU between the look and the claim: not a try.
            if let Some(s) = record.gpus.get_mut(uuid) {
                s.resets_used = s.resets_used.saturating_sub(1);
                s.next_try_at = 0;
            }
            record.step(uuid, at, format!("not reset, the GPU was taken: {why}"));
            return;
        }
        Err(e) => Some(format!("the reset was refused: {e}")),
    };
    match failed {
        None => {
            record.step(uuid, at, "reset; the GPU is healthy again".to_owned());
            if let Some(layout) = layout_of(node, uuid) {
                match super::mig_step::apply(node, &layout).await {
                    Ok(r) if r.state == crate::mig::LayoutState::Success => {
                        record.step(uuid, at, format!("MIG layout {layout} applied again"));
                    }
                    Ok(r) => record.step(
                        uuid,
                        at,
                        format!(
                            "MIG layout {layout} could not be applied again: {}",
                            r.message.unwrap_or_default()
                        ),
                    ),
                    Err(e) => record.step(
                        uuid,
                        at,
                        format!("MIG layout {layout} could not be applied again: {e}"),
                    ),
                }
            }
            tracing::info!(
                "GPU {uuid}: recovered by a reset, {} s after its verdict",
                at.saturating_sub(since)
            );
            record.close(uuid, at, "recovered");
            // The backoff stays: a GPU that keeps raising XIDs is reset no faster than it.
            if let Some(s) = record.gpus.get_mut(uuid) {
                s.since = None;
            }
            node.recovery()
                .count("recovered", Some(at.saturating_sub(since)));
        }
        Some(why) => {
            tracing::error!("GPU {uuid}: {why}");
            record.step(uuid, at, why);
            node.recovery().count("failed", None);
        }
    }
}

/// The layout applied last, when it succeeded and names `uuid`.
fn layout_of(node: &Node, uuid: &GpuUuid) -> Option<String> {
    let r = node.layouts().record()?;
    (r.state == crate::mig::LayoutState::Success && r.gpus.iter().any(|g| &g.uuid == uuid))
        .then_some(r.layout)
}

/// Writes `--reboot-required-file` while a GPU needs a reboot; removes it, when this node
/// made it, once none does.
fn reboot_file(node: &Node, config: &RemediateConfig, record: &mut Record) {
    let Some(path) = &config.reboot_required_file else {
        return;
    };
    let required: Vec<String> = record
        .gpus
        .iter()
        .filter_map(|(u, s)| Some(format!("GPU {u}: {}\n", s.reboot_required.as_ref()?)))
        .collect();
    if required.is_empty() {
        if record.wrote_reboot_file {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    node.problem(format!("{} cannot be removed: {e}", path.display()));
                    return;
                }
            }
            record.wrote_reboot_file = false;
            save(node, record);
        }
        return;
    }
    let text = required.concat();
    if std::fs::read_to_string(path).ok().as_deref() == Some(text.as_str()) {
        return;
    }
    if !record.wrote_reboot_file && path.exists() {
        // Someone else's file: it already asks for a reboot; bcd neither rewrites nor owns it.
        return;
    }
    match crate::state::write_atomic(path, text.as_bytes(), crate::state::PUBLIC_MODE) {
        Ok(()) => {
            if !record.wrote_reboot_file {
                record.wrote_reboot_file = true;
                save(node, record);
            }
        }
        Err(e) => node.problem(format!("the reboot-required file cannot be written: {e}")),
    }
}
