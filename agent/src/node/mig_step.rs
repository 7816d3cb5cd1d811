//! Applying a MIG layout ([`crate::mig`]): one node step, all or nothing before it acts.
//!
//! 1. The file is read and the layout planned against a fresh collection; a refusal (the file,
//!    the layout, a profile, the fit) ends it before anything runs.
//! 2. The GPUs to change are claimed in one decision under the holds lock, as a reset claims
//!    them: a live hold of any owner on a GPU, its MIG devices or slots (DRA claims are
//!    holds), passthrough to a VM or another step of the node refuses the whole apply
//!    (`gpu-busy`), and no hold can slip in afterwards. Compute processes (a fresh
//!    `--query-compute-apps`, with their pids) refuse it the same way. While claimed, the
//!    device plugins stream the GPUs Unhealthy and the DRA slice taints them `node-step`.
//! 3. Per GPU, through the helper: destroy its instances, set MIG mode (resetting the GPU
//!    when the driver leaves the change pending), check the profiles when they were not
//!    known before the mode change, create the instances largest first, collect again and
//!    verify. GPUs already as wanted are left alone.
//! 4. A failure leaves that GPU with no instances and no pending mode change, withdrawn
//!    (claimed) until an apply succeeds; GPUs after it are not touched; the record's state
//!    is `failed` with the step and `nvidia-smi`'s sentence.

use std::collections::BTreeMap;
use std::time::Instant;

use bcd_protocol::{GpuUuid, MigProfileIds, PciAddress};

use super::shared::Node;
use crate::device::id::DeviceId;
use crate::device::policy::ClaimKind;
use crate::mig::plan::{self, GpuPlan, Plan, Step};
use crate::mig::{GpuRecord, LayoutRecord, LayoutState, MigError};
use crate::smi::runner::Runner;

/// The query that names the compute processes of each GPU.
const PROCESSES: &[&str] = &["--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader"];

/// What makes a refused mode change or reset likely: the unbind timeout's words.
const LIKELY_HOLDERS: &str = "something still has the GPU open (nvidia-persistenced, DCGM or another monitoring agent, a process on the GPU)";

/// Plans layout `name` against the host as the node sees it after a fresh collection.
///
/// # Errors
/// As [`plan::plan`], and [`MigError::Host`] when nvidia-smi gives no GPU.
pub async fn plan_on_node(node: &Node, name: &str) -> Result<Plan, MigError> {
    let file = crate::mig::config::read(&node.config().mig_config)?;
    let inventory = node.collect_now().await;
    if inventory.gpu.gpus.is_empty() {
        return Err(MigError::Host(
            "nvidia-smi lists no GPU (see bcd status)".to_owned(),
        ));
    }
    let host = &node.config().host;
    let runner = Runner::new(host.nvidia_smi());
    let placements = crate::mig::placements(&runner, &inventory).await;
    let kept = crate::mig::load_profiles(&node.config().data_dir);
    let gpus = crate::mig::gpus_now(host, &inventory, &placements, &kept);
    if let Err(e) = crate::mig::keep_profiles(&node.config().data_dir, &gpus) {
        tracing::warn!("{e}");
    }
    plan::plan(&file, name, &gpus)
}

/// The compute processes per GPU UUID; `Err` with why when they cannot be read.
async fn processes(runner: &Runner) -> Result<BTreeMap<String, Vec<String>>, String> {
    let answer = runner.run(PROCESSES).await.map_err(|e| e.to_string())?;
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&answer.stdout).lines() {
        let Some((uuid, pid)) = line.split_once(',') else {
            continue;
        };
        if let Ok(uuid) = uuid.trim().parse::<GpuUuid>() {
            out.entry(uuid.as_str().to_owned())
                .or_default()
                .push(pid.trim().to_owned());
        }
    }
    Ok(out)
}

/// Applies layout `name` and answers its record (also kept in the data folder, shown in
/// status and the labels). A layout the host already matches is recorded `success` with
/// nothing run.
///
/// # Errors
/// [`MigError`] when the apply was refused before anything ran; a failure part way is a
/// record with state `failed`, not an error.
pub async fn apply(node: &Node, name: &str) -> Result<LayoutRecord, MigError> {
    let layouts = node.layouts();
    let Ok(_one) = layouts.running.try_lock() else {
        return Err(MigError::Running);
    };
    let started = Instant::now();
    let started_at = crate::state::unix_now();
    let plan = plan_on_node(node, name).await?;
    let mut record = LayoutRecord {
        version: crate::mig::LAYOUT_VERSION,
        layout: plan.layout.clone(),
        state: LayoutState::Pending,
        started_at,
        finished_at: None,
        duration_ms: None,
        gpus: plan
            .gpus
            .iter()
            .map(|g| GpuRecord {
                index: g.gpu.index,
                uuid: g.gpu.uuid.clone(),
                bus_id: g.gpu.address,
                result: if g.steps.is_empty() {
                    "unchanged".to_owned()
                } else {
                    "not-reached".to_owned()
                },
                steps: Vec::new(),
                error: None,
            })
            .collect(),
        failed_step: None,
        message: None,
        withdrawn: Vec::new(),
    };
    let changing: Vec<&GpuPlan> = plan.changing().collect();
    // Withdrawn by an earlier failed apply: this apply may take them over.
    let previous = layouts.record().map(|r| r.withdrawn).unwrap_or_default();
    if changing.is_empty() {
        return Ok(finish(node, record, started, &previous, &[]));
    }
    let devices: Vec<DeviceId> = changing
        .iter()
        .map(|g| DeviceId::from(&g.gpu.uuid))
        .collect();
    let mut claim = node
        .claim_over(&devices, ClaimKind::MigLayout)
        .await
        .map_err(|(gpu, busy)| busy_error(&plan, &gpu, busy.to_string()))?;
    let runner = Runner::new(node.config().host.nvidia_smi());
    let running = processes(&runner).await.map_err(|why| {
        let g = changing[0];
        MigError::Busy {
            index: g.gpu.index,
            uuid: g.gpu.uuid.clone(),
            why: format!("its compute processes cannot be read: {why}"),
        }
    })?;
    for g in &changing {
        if let Some(pids) = running.get(g.gpu.uuid.as_str()) {
            return Err(MigError::Busy {
                index: g.gpu.index,
                uuid: g.gpu.uuid.clone(),
                why: format!("compute processes run on it: pid {}", pids.join(", ")),
            });
        }
    }
    record_now(node, &record);
    tracing::info!(
        "MIG layout {}: changing {} GPU(s): {}",
        plan.layout,
        changing.len(),
        changing
            .iter()
            .map(|g| format!("GPU {} ({})", g.gpu.index, g.gpu.address))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut failed: Vec<GpuUuid> = Vec::new();
    for g in &changing {
        let at = record
            .gpus
            .iter()
            .position(|r| r.uuid == g.gpu.uuid)
            .unwrap_or(0);
        let mut done = Vec::new();
        let outcome = run_gpu(node, &plan, g, &mut done).await;
        record.gpus[at].steps = done;
        match outcome {
            Ok(()) => record.gpus[at].result = "changed".to_owned(),
            Err(failure) => {
                tracing::error!(
                    "MIG layout {}: GPU {} ({}): {} failed: {}",
                    plan.layout,
                    g.gpu.index,
                    g.gpu.address,
                    failure.step,
                    failure.message
                );
                record.gpus[at].result = "failed".to_owned();
                record.gpus[at].error = Some(failure.message.clone());
                record.failed_step = Some(format!(
                    "{} on GPU {} ({})",
                    failure.step, g.gpu.index, g.gpu.address
                ));
                record.message = Some(failure.message);
                failed.push(g.gpu.uuid.clone());
                break;
            }
        }
    }
    for uuid in &failed {
        claim.leave(&DeviceId::from(uuid));
    }
    let record = finish(node, record, started, &previous, &failed);
    drop(claim);
    node.touch_devices();
    Ok(record)
}

fn busy_error(plan: &Plan, gpu: &DeviceId, why: String) -> MigError {
    let g = plan
        .gpus
        .iter()
        .find(|g| DeviceId::from(&g.gpu.uuid) == *gpu);
    MigError::Busy {
        index: g.map_or(0, |g| g.gpu.index),
        uuid: g.map_or_else(
            || gpu.gpu_uuid().cloned().unwrap_or_else(placeholder_uuid),
            |g| g.gpu.uuid.clone(),
        ),
        why,
    }
}

fn placeholder_uuid() -> GpuUuid {
    // Never reached: every claimed device is a planned GPU's.
    "GPU-00000000-0000-0000-0000-000000000000"
        .parse()
        .unwrap_or_else(|_| unreachable!("a valid UUID"))
}

/// Records a layout refused before anything ran (at start), as it is.
pub fn record_refusal(node: &Node, record: LayoutRecord) {
    record_now(node, &record);
}

/// Writes the record and the node's view of it (labels, status).
fn record_now(node: &Node, record: &LayoutRecord) {
    if let Err(e) = crate::mig::save_record(&node.config().data_dir, record) {
        node.problem(format!("the MIG layout record cannot be written: {e}"));
    }
    node.layouts().set(record.clone());
    node.touch_devices();
}

/// Ends the record: the state, the times, the GPUs withdrawn (a success takes back those an
/// earlier failure withdrew), written and shown.
fn finish(
    node: &Node,
    mut record: LayoutRecord,
    started: Instant,
    previous: &[GpuUuid],
    failed: &[GpuUuid],
) -> LayoutRecord {
    record.finished_at = Some(crate::state::unix_now());
    record.duration_ms = Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
    if failed.is_empty() {
        record.state = LayoutState::Success;
        let freed: Vec<DeviceId> = previous.iter().map(DeviceId::from).collect();
        node.unclaim(&freed, ClaimKind::MigLayout);
    } else {
        record.state = LayoutState::Failed;
        // Still withdrawn: this failure's GPUs and an earlier one's this apply did not reach.
        let mut withdrawn: Vec<GpuUuid> = failed.to_vec();
        for uuid in previous {
            let reached = record
                .gpus
                .iter()
                .any(|g| &g.uuid == uuid && g.result == "changed");
            if reached {
                node.unclaim(&[DeviceId::from(uuid)], ClaimKind::MigLayout);
            } else if !withdrawn.contains(uuid) {
                withdrawn.push(uuid.clone());
            }
        }
        record.withdrawn = withdrawn;
    }
    tracing::info!(
        "MIG layout {}: {} in {} ms",
        record.layout,
        record.state.word(),
        record.duration_ms.unwrap_or(0)
    );
    record_now(node, &record);
    record
}

/// A step that failed, and what was said.
struct Failure {
    step: String,
    message: String,
}

/// The GPU's MIG mode and pending mode after a collection, and its instances.
async fn now_of(node: &Node, uuid: &GpuUuid) -> Option<(bool, bool, Vec<String>)> {
    let inventory = node.collect_now().await;
    let g = inventory.gpu.gpus.iter().find(|g| &g.uuid == uuid)?;
    let mig = g.mig.as_ref()?;
    let mode = mig.mode.unwrap_or(false);
    Some((
        mode,
        mig.pending_mode.unwrap_or(mode),
        mig.devices
            .iter()
            .filter_map(|d| d.profile.clone())
            .collect(),
    ))
}

/// Runs one GPU's steps; on a failure, cleans up (no instances, no pending mode change).
async fn run_gpu(
    node: &Node,
    plan: &Plan,
    g: &GpuPlan,
    done: &mut Vec<String>,
) -> Result<(), Failure> {
    let helper = node.helper();
    let address = g.gpu.address;
    let mut offer = g.gpu.offer.clone();
    for step in &g.steps {
        let words = step.to_string();
        let fail = |message: String| Failure {
            step: words.clone(),
            message,
        };
        match step {
            Step::Destroy => {
                helper
                    .destroy_mig_instances(address)
                    .await
                    .map_err(|e| fail(e.to_string()))?;
            }
            Step::MigMode(on) => {
                if let Err(message) = set_mode(node, g, *on).await {
                    return Err(fail(message));
                }
                if *on && g.checked_after_mode_change {
                    offer = match check_after_mode(node, plan, g).await {
                        Ok(offer) => Some(offer),
                        Err(message) => {
                            // The layout does not fit: MIG mode goes back off.
                            let _ = set_mode(node, g, false).await;
                            return Err(fail(message));
                        }
                    };
                }
            }
            Step::Create(names) => {
                let ids = match profile_ids(offer.as_ref(), names) {
                    Ok(ids) => ids,
                    Err(message) => return Err(fail(message)),
                };
                if let Err(e) = helper.create_mig_instances(address, ids).await {
                    clean_up(node, address).await;
                    return Err(fail(e.to_string()));
                }
            }
        }
        done.push(words);
    }
    // Verify: the mode and the instances the layout wants.
    let Some((mode, pending, instances)) = now_of(node, &g.gpu.uuid).await else {
        return Err(Failure {
            step: "the check after the apply".to_owned(),
            message: format!(
                "GPU {} ({}) is not in the inventory after the apply",
                g.gpu.index, g.gpu.uuid
            ),
        });
    };
    let mut has: BTreeMap<String, u32> = BTreeMap::new();
    for i in &instances {
        *has.entry(i.clone()).or_insert(0) += 1;
    }
    let wanted = if g.wanted.mig_enabled {
        g.wanted.instances.clone()
    } else {
        BTreeMap::new()
    };
    if mode != g.wanted.mig_enabled || pending != g.wanted.mig_enabled || has != wanted {
        if g.wanted.mig_enabled {
            clean_up(node, address).await;
        }
        return Err(Failure {
            step: "the check after the apply".to_owned(),
            message: format!(
                "GPU {} has MIG mode {} with [{}] after the apply, not what layout {} wants",
                g.gpu.index,
                if mode { "on" } else { "off" },
                instances.join(", "),
                plan.layout
            ),
        });
    }
    Ok(())
}

/// Destroys whatever instances a failed step left, so that no half layout is offered.
async fn clean_up(node: &Node, address: PciAddress) {
    if let Err(e) = node.helper().destroy_mig_instances(address).await {
        tracing::error!("MIG instances of {address} left after a failure cannot be destroyed: {e}");
    }
}

/// Sets MIG mode and makes it effective: a change the driver leaves pending is completed by a
/// reset; a change or reset refused is set back to the mode the GPU has, so that no later
/// reset applies it unasked.
async fn set_mode(node: &Node, g: &GpuPlan, on: bool) -> Result<(), String> {
    let helper = node.helper();
    let address = g.gpu.address;
    let word = if on { "on" } else { "off" };
    if let Err(e) = helper.set_mig_mode(address, on).await {
        let current = g.gpu.mig_enabled;
        let _ = helper.set_mig_mode(address, current).await;
        return Err(format!(
            "MIG mode {word} was refused: {e}; {LIKELY_HOLDERS}"
        ));
    }
    let Some((mode, pending, _)) = now_of(node, &g.gpu.uuid).await else {
        return Err("the GPU left the inventory after its MIG mode change".to_owned());
    };
    if mode == on {
        return Ok(());
    }
    if pending == on {
        tracing::info!("MIG mode {word} is pending on {address}: resetting the GPU to apply it");
        if let Err(e) = helper.reset_gpu(address).await {
            let _ = helper.set_mig_mode(address, mode).await;
            return Err(format!(
                "the reset that applies MIG mode {word} failed: {e}; {LIKELY_HOLDERS}; MIG mode was set back {}",
                if mode { "on" } else { "off" }
            ));
        }
        if let Some((after, _, _)) = now_of(node, &g.gpu.uuid).await {
            if after == on {
                return Ok(());
            }
        }
    }
    let _ = helper.set_mig_mode(address, mode).await;
    Err(format!(
        "MIG mode is still {} after turning it {word}; {LIKELY_HOLDERS}",
        if mode { "on" } else { "off" }
    ))
}

/// The GPU's profiles read right after MIG mode came on, kept for its model, and the layout
/// checked against them.
async fn check_after_mode(node: &Node, plan: &Plan, g: &GpuPlan) -> Result<plan::Offer, String> {
    let inventory = node.collect_now().await;
    let host = &node.config().host;
    let runner = Runner::new(host.nvidia_smi());
    let placements = crate::mig::placements(&runner, &inventory).await;
    let gpus = crate::mig::gpus_now(
        host,
        &inventory,
        &placements,
        &crate::mig::KeptProfiles::default(),
    );
    let Some(now) = gpus.into_iter().find(|x| x.uuid == g.gpu.uuid) else {
        return Err("the GPU left the inventory after its MIG mode change".to_owned());
    };
    if let Err(e) = crate::mig::keep_profiles(&node.config().data_dir, std::slice::from_ref(&now)) {
        tracing::warn!("{e}");
    }
    let Some(offer) = now.offer.clone() else {
        return Err(format!(
            "GPU {} lists no MIG profile (mig -lgip) with MIG mode on",
            g.gpu.index
        ));
    };
    let file = crate::mig::config::read(&plan.file).map_err(|e| e.to_string())?;
    plan::plan(&file, &plan.layout, std::slice::from_ref(&now)).map_err(|e| e.to_string())?;
    Ok(offer)
}

/// The `-cgi` ids of `names` on a GPU offering `offer`.
fn profile_ids(offer: Option<&plan::Offer>, names: &[String]) -> Result<MigProfileIds, String> {
    let Some(offer) = offer else {
        return Err("the GPU's MIG profiles are not known".to_owned());
    };
    let ids = names
        .iter()
        .map(|n| {
            offer
                .profiles
                .iter()
                .find(|p| &p.name == n)
                .and_then(|p| u8::try_from(p.id).ok())
                .ok_or_else(|| format!("the GPU does not offer profile {n}"))
        })
        .collect::<Result<Vec<u8>, String>>()?;
    MigProfileIds::try_from(ids).map_err(|e| e.to_string())
}
