//! The node's collections: one at a time (the scheduler, diag, a reset and a passthrough step
//! all collect), each published to the XID watcher and the device consumers, and what the
//! latest one says (its inventory, its age and error, the driver's readings, the CDI catalog).

use super::*;

impl Node {
    /// The latest collection's age in seconds and why `nvidia-smi` did not answer it; both
    /// `None` before the first collection.
    pub async fn latest_age_and_error(&self) -> (Option<u64>, Option<String>) {
        let latest = self.latest.read().await;
        (
            latest.as_ref().map(|l| l.at.elapsed().as_secs()),
            latest.as_ref().and_then(|l| l.snapshot_error.clone()),
        )
    }

    /// Why `nvidia-smi` did not answer the latest collection, and the driver's own readings
    /// per GPU from its `-q -x` (empty without one), for `diag.nvml`.
    pub async fn latest_driver_readings(
        &self,
    ) -> (
        Option<String>,
        BTreeMap<GpuUuid, crate::smi::xml::DriverHealth>,
    ) {
        let latest = self.latest.read().await;
        (
            latest.as_ref().and_then(|l| l.snapshot_error.clone()),
            latest
                .as_ref()
                .and_then(|l| l.driver.clone())
                .unwrap_or_default(),
        )
    }

    /// The device catalog of the latest collection (GPUs and MIG devices, with `-L`'s MIG
    /// numbers), for the CDI names of NVIDIA's spec; empty before the first collection.
    pub async fn device_catalog(&self) -> DeviceCatalog {
        let latest = self.latest.read().await;
        let mut catalog = DeviceCatalog::from_inventory(
            latest
                .as_ref()
                .map_or(&Inventory::new(GpuSection::default()), |l| &l.inventory),
        );
        if let Some(l) = latest.as_ref() {
            catalog.add_mig_numbers(&l.listed);
        }
        catalog
    }

    /// The latest inventory (empty before the first collection).
    pub async fn inventory(&self) -> Inventory {
        self.latest.read().await.as_ref().map_or_else(
            || Inventory::new(GpuSection::default()),
            |l| l.inventory.clone(),
        )
    }

    /// Collects now, publishes the result and converges the hold specs; returns it.
    pub async fn collect_now(&self) -> Inventory {
        let one = self.collecting.lock().await;
        self.collect_holding(one).await
    }

    /// Collects while `_one` (the `collecting` lock) is held.
    pub(super) async fn collect_holding(&self, _one: tokio::sync::MutexGuard<'_, ()>) -> Inventory {
        let collection = collect(&self.config.host, Some(&self.memory)).await;
        self.publish(collection).await
    }

    /// Publishes `collection` as the latest (keeping the GPUs of the last answered inventory
    /// while `nvidia-smi` is silent) and converges the hold specs; returns its inventory.
    pub(super) async fn publish(&self, collection: Collection) -> Inventory {
        let listed = collection
            .snapshot
            .as_ref()
            .map(|s| s.listed.clone())
            .unwrap_or_default();
        let queries = collection.queries.clone();
        let driver = collection
            .snapshot
            .as_ref()
            .map(|s| crate::health::status::driver_readings(&s.xml));
        if let Some(e) = &collection.snapshot_error {
            if !e.is_no_driver() {
                tracing::warn!("nvidia-smi: {e}");
            }
        }
        if let Some(e) = &collection.memory_error {
            self.problem(format!("passthrough memory: {e}"));
        }
        if let Ok(mut kept) = self.left_out.lock() {
            for sentence in collection.left_out.iter().filter(|s| !kept.contains(s)) {
                tracing::warn!("{sentence}");
            }
            kept.clone_from(&collection.left_out);
        }
        let (kept, mut correctable) = {
            let last = self.latest.read().await;
            let kept = match (&collection.snapshot_error, last.as_ref()) {
                (Some(e), Some(last)) if !e.is_no_driver() => crate::health::status::kept_gpus(
                    last.inventory.gpu.gpus.iter().chain(&last.kept),
                    &collection.inventory.gpu.gpus,
                ),
                _ => Vec::new(),
            };
            (
                kept,
                last.as_ref()
                    .map(|l| l.correctable.clone())
                    .unwrap_or_default(),
            )
        };
        // The counters come from -q -x: a collection without it leaves the rates as they are.
        if collection.snapshot.is_some() {
            correctable.observe(&collection.inventory.gpu.gpus, Instant::now());
        }
        let latest = Latest {
            kept,
            correctable,
            inventory: collection.inventory.clone(),
            at: Instant::now(),
            queries,
            listed,
            snapshot_error: collection.snapshot_error.as_ref().map(ToString::to_string),
            driver,
            fabric_manager_down: crate::sys::systemd::fabric_manager(&self.config.host)
                .await
                .down(),
            links: crate::health::pcie::link_widths(&self.config.host, &collection.inventory),
        };
        *self.latest.write().await = Some(latest);
        self.inventory_tx.send_replace(collection.inventory.clone());
        self.collections
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        self.converge_holds().await;
        collection.inventory
    }

    /// A collection at least as new as this call: the one in flight when it is made (its
    /// callers share it: concurrent `diag` requests on a wedged host wait for one
    /// collection, not one each in turn), else a new one.
    pub async fn collect_shared(&self) -> Inventory {
        let seen = self.collections.load(std::sync::atomic::Ordering::Acquire);
        let one = self.collecting.lock().await;
        // A collection ended while this one waited for the lock: it was in flight when this
        // call was made, or started after it.
        if self.collections.load(std::sync::atomic::Ordering::Acquire) != seen {
            drop(one);
            return self.inventory().await;
        }
        self.collect_holding(one).await
    }
}
