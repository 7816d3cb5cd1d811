//! The kubelet side against a fake [`DeviceSource`]: two GPUs whose verdicts, claims and
//! holds the test sets, no node, no `nvidia-smi`. What the plugins offer and what `Allocate`
//! does follow the source alone. The DRA driver's tests use the same fake.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use tokio::sync::watch;

use super::allocate::{allocate_all, AllocateError};
use super::devices::Resource;
use super::KubeState;
use crate::cdi::vendor::VendorSpecs;
use crate::cdi::{self, Before, DeviceCatalog, DeviceId, Hold, HoldId, Holds};
use crate::device::policy::Topology;
use crate::device::PodAllocation;
use crate::health::verdict::{HealthState, Reason, Verdict};
use crate::inventory::document::{Gpu, GpuSection, Inventory};
use crate::smi::samples::GpuSample;
use crate::source::{Changes, DeviceSource};
use bcd_protocol::GpuUuid;

pub(crate) const GPU0: &str = "GPU-11111111-1111-1111-1111-111111111111";
pub(crate) const GPU1: &str = "GPU-22222222-2222-2222-2222-222222222222";

/// Two GPUs, a hold store in a temporary folder, and what the test says of them.
pub(crate) struct FakeSource {
    inventory: Mutex<Inventory>,
    holds: tokio::sync::Mutex<Holds>,
    verdicts: Mutex<BTreeMap<GpuUuid, Verdict>>,
    pub(crate) claimed: Mutex<Vec<DeviceId>>,
    /// The GPUs the test says need a reboot.
    pub(crate) reboot: Mutex<Vec<GpuUuid>>,
    cdi_dir: PathBuf,
    pods: Mutex<Vec<PodAllocation>>,
    devices: watch::Sender<u64>,
    conditions: watch::Sender<Vec<crate::health::Condition>>,
    slots: u32,
    _dir: tempfile::TempDir,
}

pub(crate) fn healthy() -> Verdict {
    Verdict {
        health: HealthState::Healthy,
        reasons: Vec::new(),
    }
}

pub(crate) fn unhealthy() -> Verdict {
    Verdict {
        health: HealthState::Unhealthy,
        reasons: vec![Reason {
            kind: "Xid79".into(),
            message: "XID 79: the GPU fell off the bus".into(),
            action: "reset the GPU".into(),
            state: HealthState::Unhealthy,
        }],
    }
}

impl FakeSource {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let gpus = [GPU0, GPU1]
            .iter()
            .enumerate()
            .map(|(i, u)| Gpu::new(u32::try_from(i).unwrap(), u.parse().unwrap()))
            .collect();
        let cdi_dir = dir.path().join("cdi");
        std::fs::create_dir_all(&cdi_dir).unwrap();
        Self {
            inventory: Mutex::new(Inventory::new(GpuSection {
                gpus,
                ..GpuSection::default()
            })),
            holds: tokio::sync::Mutex::new(Holds::load(dir.path()).unwrap()),
            verdicts: Mutex::new(
                [GPU0, GPU1]
                    .iter()
                    .map(|u| (u.parse().unwrap(), healthy()))
                    .collect(),
            ),
            claimed: Mutex::new(Vec::new()),
            reboot: Mutex::new(Vec::new()),
            cdi_dir,
            pods: Mutex::new(Vec::new()),
            devices: watch::channel(0).0,
            conditions: watch::channel(Vec::new()).0,
            slots: 0,
            _dir: dir,
        }
    }

    /// The same with `slots` slots a GPU (`bcd node --gpu-slots`).
    pub(crate) fn with_slots(slots: u32) -> Self {
        Self {
            slots,
            ..Self::new()
        }
    }

    /// Changes the inventory the node shows (a collection that failed, a new MIG layout).
    pub(crate) fn reshape(&self, f: impl FnOnce(&mut Inventory)) {
        f(&mut self.inventory.lock().unwrap());
        self.touch();
    }

    pub(crate) fn judge(&self, gpu: &str, verdict: Verdict) {
        self.verdicts
            .lock()
            .unwrap()
            .insert(gpu.parse().unwrap(), verdict);
    }
}

impl DeviceSource for FakeSource {
    fn reboot_required(&self) -> Vec<GpuUuid> {
        self.reboot.lock().unwrap().clone()
    }

    async fn inventory(&self) -> Inventory {
        self.inventory.lock().unwrap().clone()
    }

    async fn holds_now(&self) -> Vec<Hold> {
        self.holds.lock().await.list().cloned().collect()
    }

    async fn topology(&self) -> Topology {
        Topology::from_inventory(&self.inventory.lock().unwrap(), self.slots)
    }

    async fn verdicts(&self) -> BTreeMap<GpuUuid, Verdict> {
        self.verdicts.lock().unwrap().clone()
    }

    async fn samples_now(&self) -> Vec<GpuSample> {
        Vec::new()
    }

    fn claimed(&self) -> Vec<DeviceId> {
        self.claimed.lock().unwrap().clone()
    }

    fn gpu_slots(&self) -> u32 {
        self.slots
    }

    async fn cdi_context(&self) -> (VendorSpecs, DeviceCatalog) {
        (
            VendorSpecs::default(),
            DeviceCatalog::from_inventory(&self.inventory.lock().unwrap()),
        )
    }

    async fn with_holds<T: Send>(&self, change: impl FnOnce(&mut Holds) -> T + Send) -> Option<T> {
        Some(change(&mut *self.holds.lock().await))
    }

    async fn change_holds_durably<T: Send, E: Send>(
        &self,
        change: impl FnOnce(&mut Holds, &mut Vec<Before>) -> Result<T, E> + Send,
        written: impl FnOnce(&T) -> Vec<HoldId> + Send,
        _missing: impl FnOnce(PathBuf) -> E + Send,
        _unavailable: E,
    ) -> Result<T, E> {
        let mut holds = self.holds.lock().await;
        let mut journal = Vec::new();
        let done = change(&mut holds, &mut journal)?;
        if !written(&done).is_empty() {
            cdi::converge(
                &mut holds,
                &[],
                &DeviceCatalog::from_inventory(&self.inventory.lock().unwrap()),
                &self.cdi_dir,
            );
        }
        Ok(done)
    }

    async fn converge_holds(&self) {}

    fn set_pod_allocations(&self, allocations: Vec<PodAllocation>) {
        *self.pods.lock().unwrap() = allocations;
    }

    fn problem(&self, sentence: String) {
        panic!("no problem expected: {sentence}");
    }

    fn changes(&self) -> Changes {
        Changes::new(self.conditions.subscribe(), self.devices.subscribe())
    }

    fn touch(&self) {
        self.devices.send_modify(|n| *n += 1);
    }
}

fn whole_gpus() -> Resource {
    "bcd.dev/gpu".parse().unwrap()
}

fn health_of(offer: &super::devices::Offer) -> Vec<(String, bool)> {
    offer[&whole_gpus()]
        .iter()
        .map(|d| (d.id.to_string(), d.healthy))
        .collect()
}

#[tokio::test]
async fn the_offer_follows_the_sources_verdicts_and_claims() {
    let source = FakeSource::new();
    let offer = super::offer_now(&source).await;
    assert_eq!(
        health_of(&offer),
        [(GPU0.to_owned(), true), (GPU1.to_owned(), true)]
    );
    source.judge(GPU0, unhealthy());
    source.claimed.lock().unwrap().push(GPU1.parse().unwrap());
    let offer = super::offer_now(&source).await;
    assert_eq!(
        health_of(&offer),
        [(GPU0.to_owned(), false), (GPU1.to_owned(), false)]
    );
    source.claimed.lock().unwrap().clear();
    source.judge(GPU0, healthy());
    assert_eq!(
        health_of(&super::offer_now(&source).await),
        [(GPU0.to_owned(), true), (GPU1.to_owned(), true)]
    );
}

#[tokio::test]
async fn allocate_on_the_source_refuses_an_unhealthy_gpu_and_holds_a_healthy_one() {
    let source = FakeSource::new();
    let kube = KubeState::default();
    let offered: Vec<DeviceId> = [GPU0, GPU1].iter().map(|u| u.parse().unwrap()).collect();
    source.judge(GPU1, unhealthy());
    let refused = allocate_all(
        &source,
        &kube,
        &whole_gpus(),
        &offered,
        &[vec![GPU1.to_owned()]],
    )
    .await
    .unwrap_err();
    assert!(
        matches!(refused, AllocateError::Unhealthy { .. }),
        "{refused}"
    );
    assert!(source.holds_now().await.is_empty(), "nothing was held");
    let answer = allocate_all(
        &source,
        &kube,
        &whole_gpus(),
        &offered,
        &[vec![GPU0.to_owned()]],
    )
    .await
    .unwrap();
    assert_eq!(answer[0].1, [format!("bcd.dev/gpu={GPU0}")]);
    let holds = source.holds_now().await;
    assert_eq!(holds.len(), 1);
    assert!(holds[0].kubernetes);
    assert!(source.cdi_dir.join(answer[0].0.spec_file_name()).exists());
    assert_eq!(kube.counters()["bcd.dev/gpu"].allocations, 1);
}

#[tokio::test]
async fn the_change_signal_wakes_on_a_touch() {
    let source = FakeSource::new();
    let mut changes = source.changes();
    source.touch();
    assert!(
        tokio::time::timeout(std::time::Duration::from_secs(5), changes.changed())
            .await
            .unwrap()
    );
}

// What broke: `--device-plugin-dir` pointing where no kubelet is (a stopped kubelet, a wrong
// folder) registered nothing and said nothing. The plugins say so, in the log and in status,
// until the kubelet's socket appears.
#[tokio::test]
async fn plugins_without_a_kubelet_say_so_in_status() {
    let source = std::sync::Arc::new(FakeSource::new());
    let kube = std::sync::Arc::new(KubeState::default());
    let dir = tempfile::tempdir().unwrap();
    let config = super::KubeletConfig {
        plugin_dir: dir.path().join("device-plugins"),
        pod_resources_socket: dir.path().join("pod-resources.sock"),
        release_grace: std::time::Duration::from_secs(30),
    };
    let running = tokio::spawn(super::plugin::run(source, kube.clone(), config));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let said = loop {
        if let Some(p) = kube.problem().filter(|p| p.contains("not registered")) {
            break p;
        }
        assert!(std::time::Instant::now() < deadline, "{:?}", kube.problem());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    running.abort();
    assert!(said.contains("kubelet.sock"), "{said}");
    assert!(said.contains("--device-plugin-dir"), "{said}");
}
