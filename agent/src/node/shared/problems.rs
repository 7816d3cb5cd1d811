//! What is degraded now, in sentences for `status`: the problems recorded (each logged once),
//! every degraded input, and the operator holds that give a container no GPU.

use super::*;

impl Node {
    /// Records a start-up or runtime problem an operator should see in `status`.
    /// The journal gets it once: a problem that recurs at every pass (a full disk under the
    /// CDI folder) was one ERROR line a second.
    pub fn problem(&self, sentence: String) {
        if let Ok(mut p) = self.problems.lock() {
            if p.contains(&sentence) {
                tracing::debug!("{sentence}");
            } else {
                tracing::error!("{sentence}");
                p.push(sentence);
            }
        }
    }

    /// Every degraded input now, in sentences, for `status`: what did not start as it should,
    /// then the kernel log, the helper (its last ping's failure, else its socket), each GPU
    /// with an open passthrough journal entry, the data folder, the vendor CDI specs,
    /// sampling and the listeners, each while it is degraded.
    pub fn problems_now(&self) -> Vec<String> {
        let mut all = self.problems.lock().map(|p| p.clone()).unwrap_or_default();
        if self.collections() == 0 {
            all.push(format!(
                "the first collection is running: the inventory is empty until nvidia-smi answers (it has up to {} s)",
                crate::smi::runner::SNAPSHOT_TIMEOUT.as_secs()
            ));
        }
        all.extend(self.watcher.failure());
        all.extend(self.watcher.overwritten());
        all.extend(self.health.save_failure());
        let helper = &self.config.helper_socket;
        let socket = std::fs::symlink_metadata(helper);
        match (self.passthrough.helper_seen(), socket) {
            (HelperSeen::Failing(why), _) => all.push(format!(
                "the root helper cannot be reached (its last ping: {why}): resets, persistence and passthrough cannot run"
            )),
            (_, Ok(m)) if std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => {}
            (_, Ok(_)) => all.push(format!(
                "the root helper's socket {} is not a socket: resets, persistence and passthrough cannot run",
                helper.display()
            )),
            (_, Err(e)) => all.push(format!(
                "the root helper cannot be reached at {} ({e}): resets, persistence and passthrough cannot run (systemctl start bcd-helper.socket)",
                helper.display()
            )),
        }
        all.extend(self.passthrough.unsettled());
        let data = &self.config.data_dir;
        let usable = match std::fs::metadata(data) {
            Ok(m) if m.is_dir() => nix::unistd::access(
                data.as_path(),
                nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
            )
            .map_err(|e| std::io::Error::from(e).to_string()),
            Ok(_) => Err("it is not a folder".to_owned()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(why) = usable {
            all.push(format!(
                "the data folder {} is unusable ({why}): holds, faults and the passthrough memory are not kept",
                data.display()
            ));
        }
        if let Ok(v) = self.vendor_problems.lock() {
            all.extend(v.iter().map(|p| format!("vendor CDI spec: {p}")));
        }
        if let Ok(v) = self.grantless.lock() {
            all.extend(v.iter().cloned());
        }
        if let Ok(v) = self.left_out.lock() {
            all.extend(v.iter().cloned());
        }
        if let Some(why) = self
            .sampling
            .lock()
            .ok()
            .and_then(|s| s.one_shot_because.clone())
        {
            all.push(format!(
                "sampling fell back to one-shot nvidia-smi queries: {why}"
            ));
        }
        for (name, stats) in [
            ("the API socket", &self.api_listener),
            ("the metrics listener", &self.metrics_listener),
        ] {
            if stats.starved.load(std::sync::atomic::Ordering::Relaxed) {
                all.push(format!(
                    "{name} cannot accept connections: the process is out of file descriptors"
                ));
            }
        }
        all.extend(self.reports().iter().filter_map(|r| r.problem()));
        all.extend(self.layouts().record().and_then(|r| r.problem()));
        all.extend(self.nvidia_cdi().problem());
        let mut seen = std::collections::BTreeSet::new();
        all.retain(|p| seen.insert(p.clone()));
        all
    }

    /// Says (in status, and in the log once) which operator holds give a container no GPU:
    /// all of them while there is no NVIDIA spec (a hold's spec then carries only
    /// `NVIDIA_VISIBLE_DEVICES=void` and its name), and each hold with devices NVIDIA's spec
    /// does not name. Replaced at each convergence, so it goes once NVIDIA's spec is there.
    pub(super) fn note_grantless(
        &self,
        holds: &Holds,
        vendor: &cdi::vendor::VendorSpecs,
        result: &cdi::Convergence,
    ) {
        let mut sentences = Vec::new();
        let operators: Vec<String> = holds
            .list()
            .filter(|h| !h.kubernetes)
            .map(|h| h.id.to_string())
            .collect();
        if vendor.specs.is_empty() && !operators.is_empty() {
            let dirs: Vec<String> = cdi::vendor_dirs(&self.config.cdi_dir, &self.config.host)
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            sentences.push(format!(
                "there is no NVIDIA CDI spec (kind nvidia.com/gpu) in {}: hold(s) {} give a container no GPU (their specs carry no device node); generate it: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",
                dirs.join(" or "),
                operators.join(", ")
            ));
        }
        for (hold, devices) in &result.unnamed {
            let devices: Vec<String> = devices.iter().map(DeviceId::to_string).collect();
            sentences.push(format!(
                "hold {hold}: NVIDIA's CDI spec does not name {}, so a container gets no device node for them; regenerate NVIDIA's spec (nvidia-ctk cdi generate)",
                devices.join(", ")
            ));
        }
        if let Ok(mut kept) = self.grantless.lock() {
            // The unnamed devices were logged by the convergence already.
            if let Some(first) = sentences.first().filter(|s| !kept.contains(s)) {
                if vendor.specs.is_empty() {
                    tracing::warn!("{first}");
                }
            }
            *kept = sentences;
        }
    }
}
