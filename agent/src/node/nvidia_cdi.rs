//! NVIDIA's CDI spec kept current: the node's side of [`crate::cdi::nvidia`] (the stamp and
//! the refresher's state live there), asking the helper to regenerate when the stamp changes.

use super::shared::Node;
use crate::cdi::nvidia::{stamp, STAMP_FILE};

/// Regenerates NVIDIA's spec through the helper when the node's inventory has a new stamp;
/// does nothing without `--nvidia-cdi-spec`, while a MIG layout is being applied, or for a
/// stamp already tried in this run.
pub async fn refresh_if_changed(node: &Node) {
    let Some(spec) = node.config().nvidia_cdi_spec.clone() else {
        return;
    };
    if node.layouts().busy() {
        return;
    }
    let inventory = node.inventory().await;
    let Some(now) = stamp(&inventory) else {
        return;
    };
    let stamp_file = node.config().data_dir.join(STAMP_FILE);
    let refresher = node.nvidia_cdi();
    {
        let Ok(mut tried) = refresher.state.lock() else {
            return;
        };
        // Tried in this run (regenerated or failed): nothing to do until the stamp changes,
        // and the stamp file is read only then.
        if tried.stamp.as_deref() == Some(now.as_str()) {
            return;
        }
        tried.stamp = Some(now.clone());
        let kept = std::fs::read_to_string(&stamp_file).ok();
        if kept.as_deref().map(str::trim) == Some(now.as_str()) && spec.exists() {
            tried.problem = None;
            return;
        }
        tried.runs += 1;
    }
    tracing::info!(
        "the driver or the GPUs changed (stamp {now}): regenerating NVIDIA's CDI spec {} through bcd-helper",
        spec.display()
    );
    let result = node.helper().refresh_nvidia_cdi_spec().await;
    let problem = match result {
        Ok(file) => {
            if let Err(e) = crate::state::write_atomic(
                &stamp_file,
                format!("{now}\n").as_bytes(),
                crate::state::PRIVATE_MODE,
            ) {
                tracing::warn!("{e}");
            }
            tracing::info!("NVIDIA's CDI spec {file} regenerated");
            None
        }
        Err(e) => Some(format!(
            "NVIDIA's CDI spec {} could not be regenerated ({e}); the spec there stays as it was and holds of new devices grant nothing until it is; bcd tries again when the driver or the GPUs change (bcd doctor)",
            spec.display()
        )),
    };
    if let Some(p) = &problem {
        tracing::error!("{p}");
    }
    if let Ok(mut tried) = refresher.state.lock() {
        tried.problem = problem;
    }
    node.converge_holds().await;
}
