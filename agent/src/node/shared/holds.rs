//! The holds as the node keeps them: the store under its lock, every change written with its
//! specs before it is acknowledged (undone when a spec cannot be written), and the policy's
//! view of the GPUs.

use super::*;

impl Node {
    /// Every hold as it is now (none while `holds.json` cannot be read), for the policy.
    pub async fn holds_now(&self) -> Vec<crate::cdi::Hold> {
        self.holds
            .lock()
            .await
            .as_ref()
            .map(|h| h.list().cloned().collect())
            .unwrap_or_default()
    }

    /// The policy's view of the GPUs, from the latest inventory.
    pub async fn topology(&self) -> crate::device::policy::Topology {
        crate::device::policy::Topology::from_inventory(
            &self.inventory().await,
            self.config.gpu_slots,
        )
    }

    /// Writes every hold's spec and removes those of released holds; before the first
    /// collection, writes only the specs that are missing.
    pub async fn converge_holds(&self) {
        let vendor = self.read_vendor_specs();
        let mut holds = self.holds.lock().await;
        let Some(holds) = holds.as_mut() else { return };
        self.converge_locked(holds, &vendor).await;
    }

    /// Applies the hold `id` (create or replace) and writes its CDI spec under one holds lock:
    /// `Ok` only once both are on disk. When the spec cannot be written the hold is put back
    /// as it was (absent, or its earlier devices), so nothing is acknowledged that a runtime
    /// cannot read.
    ///
    /// # Errors
    /// [`ApplyHoldError`]: the store unavailable, the hold refused or not saved, or its spec
    /// not written (naming the file and the system's words).
    pub async fn apply_hold(
        &self,
        id: HoldId,
        placed: Vec<Placed>,
        owner: HoldOwner,
        topology: &Topology,
    ) -> Result<Hold, ApplyHoldError> {
        let vendor = self.read_vendor_specs();
        let mut holds = self.holds.lock().await;
        let holds = holds.as_mut().ok_or(ApplyHoldError::Unavailable)?;
        let before = holds.before(&id);
        let hold = holds.apply(id.clone(), placed, owner, topology)?.clone();
        let done = self.converge_locked(holds, &vendor).await;
        let failed = done
            .errors
            .into_iter()
            .find(|e| matches!(e, cdi::ConvergeError::Write { hold, .. } if *hold == id));
        let Some(failed) = failed else {
            return Ok(hold);
        };
        if let Err(e) = holds.restore(before) {
            tracing::error!(
                "hold {id}: its spec could not be written and the change not undone: {e}"
            );
        }
        // A spec of the earlier devices may be due again; others' specs are unaffected.
        self.converge_locked(holds, &vendor).await;
        Err(ApplyHoldError::Spec { id, source: failed })
    }

    /// Changes the holds with `change` (which records each change in the journal it is handed,
    /// see [`Holds::before`]) and writes the specs of the holds `written` names, all under one
    /// holds lock: `Ok` only once every such spec is on disk. When `change` fails, or a spec
    /// cannot be written, every recorded change is undone, newest first, and the specs
    /// converged again.
    ///
    /// # Errors
    /// `unavailable` when the store could not be read at start; `change`'s error; `missing`
    /// with the first spec that was not written.
    pub async fn change_holds_durably<T, E>(
        &self,
        change: impl FnOnce(&mut Holds, &mut Vec<cdi::Before>) -> Result<T, E>,
        written: impl FnOnce(&T) -> Vec<HoldId>,
        missing: impl FnOnce(PathBuf) -> E,
        unavailable: E,
    ) -> Result<T, E> {
        let vendor = self.read_vendor_specs();
        let mut holds = self.holds.lock().await;
        let Some(holds) = holds.as_mut() else {
            return Err(unavailable);
        };
        let mut journal = Vec::new();
        let undo = |holds: &mut Holds, journal: Vec<cdi::Before>| {
            for before in journal.into_iter().rev() {
                if let Err(e) = holds.restore(before) {
                    tracing::error!("a refused hold change could not be undone in holds.json: {e}");
                }
            }
        };
        let done = match change(holds, &mut journal) {
            Ok(done) => done,
            Err(e) => {
                undo(holds, journal);
                return Err(e);
            }
        };
        let specs: Vec<PathBuf> = written(&done)
            .iter()
            .map(|id| self.config.cdi_dir.join(id.spec_file_name()))
            .collect();
        if specs.is_empty() {
            return Ok(done);
        }
        self.converge_locked(holds, &vendor).await;
        if let Some(spec) = specs.into_iter().find(|s| !s.exists()) {
            undo(holds, journal);
            self.converge_locked(holds, &vendor).await;
            return Err(missing(spec));
        }
        Ok(done)
    }

    /// NVIDIA's specs, their problems reported (in status, and logged once each) even while
    /// the holds cannot be read.
    pub(super) fn read_vendor_specs(&self) -> cdi::vendor::VendorSpecs {
        let vendor =
            cdi::read_vendor_specs(&cdi::vendor_dirs(&self.config.cdi_dir, &self.config.host));
        let sentences: Vec<String> = vendor.problems.iter().map(ToString::to_string).collect();
        if let Ok(mut kept) = self.vendor_problems.lock() {
            for problem in sentences.iter().filter(|p| !kept.contains(p)) {
                tracing::warn!("{problem}");
            }
            *kept = sentences;
        }
        vendor
    }

    /// [`Node::converge_holds`] on a store already locked.
    pub(super) async fn converge_locked(
        &self,
        holds: &mut Holds,
        vendor: &cdi::vendor::VendorSpecs,
    ) -> cdi::Convergence {
        let collected = self.latest.read().await.is_some();
        let catalog = self.device_catalog().await;
        if collected {
            // Holds rebuilt from their specs learn which GPU each MIG device is on.
            match holds.record_gpus(&self.topology().await) {
                Ok(0) => {}
                Ok(n) => tracing::info!("holds.json: recorded the GPU of {n} MIG device(s)"),
                Err(e) => self.problem(format!("holds.json: {e}")),
            }
        }
        let result = if collected {
            converge(holds, &vendor.specs, &catalog, &self.config.cdi_dir)
        } else {
            cdi::write_missing(holds, &vendor.specs, &catalog, &self.config.cdi_dir)
        };
        for e in &result.errors {
            self.problem(format!("CDI specs: {e}"));
        }
        self.note_grantless(holds, vendor, &result);
        // Holds or the inventory changed: the device consumers' offers are computed again.
        self.touch_devices();
        result
    }
}
