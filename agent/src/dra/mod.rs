//! Kubernetes Dynamic Resource Allocation: bcd's GPUs, MIG devices and slots as the devices
//! of the DRA driver `gpu.bcd.dev`.
//!
//! - What the driver offers and how it names and describes each device ([`devices`]), and
//!   the node's ResourceSlices with the writes that bring the API server's to them
//!   ([`slices`]): pure functions, tested as tables.
//! - The kubelet side ([`plugin`]): the registration socket in `<kubelet>/plugins_registry/`
//!   and, on `<kubelet>/plugins/gpu.bcd.dev/dra.sock`, the DRA plugin API (`v1` and
//!   `v1beta1`) and the device health stream (`v1alpha1`).
//! - The API server ([`controller`]): the client, the ResourceClaim reader, and the work loop
//!   that keeps the pool's slices as the node's devices are.
//! - Claims ([`prepare`]): a prepared claim is one Kubernetes hold made through the policy,
//!   with its own CDI spec in the CDI runtime folder, written before the answer; the
//!   ResourceClaims are read through [`claims::ClaimReader`]. A claim the kubelet never
//!   unprepared is released once the API server has said for a grace that it is gone,
//!   replaced or allocated elsewhere ([`stale`]).
//!
//! Which newer slice fields the API server keeps (taints, consumable capacity) is learnt from
//! its version and from what it returns ([`server`]).
//!
//! It reaches the node through [`crate::source::DeviceSource`] alone (tested against a fake
//! source), keeps its own counters and problems in [`DraState`] (shown in the node's status
//! and metrics as a [`crate::source::Report`]), never runs a privileged step and changes
//! nothing but holds and its claims' CDI specs.

pub mod claims;
pub mod client;
pub mod controller;
pub mod devices;
#[cfg(test)]
mod fake_api;
pub mod plugin;
pub mod prepare;
pub mod server;
pub mod slices;
pub mod stale;

use std::path::PathBuf;
use std::sync::Mutex;

/// The driver's name: the ResourceSlices' `spec.driver`, the kubelet plugin's name.
pub const DRIVER: &str = "gpu.bcd.dev";
/// The kubelet's root folder, where its plugin folders are.
pub const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet";
/// Where the claims' CDI specs go: a folder that does not outlive a reboot, as a prepared
/// claim does not.
pub const DEFAULT_CDI_RUNTIME_DIR: &str = "/var/run/cdi";

/// The generated gRPC code of the kubelet's DRA APIs (`agent/proto/`).
pub mod proto {
    /// The DRA plugin API, `v1`.
    #[allow(missing_docs, clippy::all, missing_debug_implementations)]
    pub mod v1 {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
    }
    /// The DRA plugin API, `v1beta1`.
    #[allow(missing_docs, clippy::all, missing_debug_implementations)]
    pub mod v1beta1 {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1beta1");
    }
    /// Plugin registration.
    #[allow(missing_docs, clippy::all, missing_debug_implementations)]
    pub mod registration {
        tonic::include_proto!("pluginregistration");
    }
    /// The DRA device health API, `v1alpha1`.
    #[allow(missing_docs, clippy::all, missing_debug_implementations)]
    pub mod health {
        tonic::include_proto!("v1alpha1");
    }
}

/// What `bcd node --dra` was told.
#[derive(Debug, Clone)]
pub struct DraConfig {
    /// The kubelet's root folder ([`DEFAULT_KUBELET_DIR`]).
    pub kubelet_dir: PathBuf,
    /// Where the claims' specs go ([`DEFAULT_CDI_RUNTIME_DIR`]).
    pub cdi_runtime_dir: PathBuf,
    /// The node's name: the pool's name.
    pub node_name: String,
    /// The host whose procfs gives the GPUs' device minors.
    pub host: crate::sys::host::Host,
    /// How often held claims are checked against the API server, and the grace before a
    /// stale one is released ([`stale::STALE_PASS`]).
    pub stale_pass: std::time::Duration,
}

impl DraConfig {
    /// The folder of the DRA socket: `<kubelet>/plugins/gpu.bcd.dev`.
    pub fn plugin_dir(&self) -> PathBuf {
        self.kubelet_dir.join("plugins").join(DRIVER)
    }

    /// The DRA socket: `<kubelet>/plugins/gpu.bcd.dev/dra.sock`.
    pub fn dra_socket(&self) -> PathBuf {
        self.plugin_dir().join("dra.sock")
    }

    /// The registration folder: `<kubelet>/plugins_registry`.
    pub fn registry_dir(&self) -> PathBuf {
        self.kubelet_dir.join("plugins_registry")
    }

    /// The registration socket: `<kubelet>/plugins_registry/gpu.bcd.dev-reg.sock`.
    pub fn registration_socket(&self) -> PathBuf {
        self.registry_dir().join(format!("{DRIVER}-reg.sock"))
    }
}

/// The driver's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Claims prepared (again, too).
    pub prepared: u64,
    /// Claims refused.
    pub refused: u64,
    /// Claims unprepared.
    pub unprepared: u64,
    /// ResourceSlice writes (creates, updates, deletions).
    pub slice_writes: u64,
}

/// The driver's own state: counters, whether the kubelet registered it, what is degraded.
#[derive(Debug, Default)]
pub struct DraState {
    counters: Mutex<Counters>,
    /// What the kubelet last said of the registration: `Ok` or its error.
    registration: Mutex<Option<Result<(), String>>>,
    /// What is degraded on the driver's side (sockets).
    problem: Mutex<Option<String>>,
    /// What is degraded on the API server's side (the slices, the Node).
    api_problem: Mutex<Option<String>>,
    /// The held claims the stale pass could not check.
    stale_problem: Mutex<Option<String>>,
    /// What the API server keeps of the slices' newer fields, as far as bcd knows.
    features: Mutex<devices::Features>,
}

impl DraState {
    /// Changes the counters.
    pub fn count(&self, f: impl FnOnce(&mut Counters)) {
        if let Ok(mut c) = self.counters.lock() {
            f(&mut c);
        }
    }

    /// The counters now.
    pub fn counters(&self) -> Counters {
        self.counters.lock().map(|c| *c).unwrap_or_default()
    }

    /// Records what the kubelet said of the registration.
    pub fn registered(&self, outcome: Result<(), String>) {
        if let Ok(mut r) = self.registration.lock() {
            *r = Some(outcome);
        }
    }

    /// What the kubelet last said of the registration; `None` before it said anything.
    pub fn registration(&self) -> Option<Result<(), String>> {
        self.registration.lock().ok().and_then(|r| r.clone())
    }

    /// What the slices use now: taints, shared devices ([`server`]).
    pub fn features(&self) -> devices::Features {
        self.features.lock().map(|f| *f).unwrap_or_default()
    }

    /// Sets what the slices use.
    pub fn set_features(&self, features: devices::Features) {
        if let Ok(mut f) = self.features.lock() {
            *f = features;
        }
    }

    /// Sets or clears what is degraded on the kubelet's side (logged as [`set`] says).
    pub fn set_problem(&self, sentence: Option<String>) {
        set(&self.problem, sentence);
    }

    /// Sets or clears what is degraded on the API server's side: one WARN when it starts,
    /// one INFO when it ends (a sentence that changes meanwhile is only shown in `status`).
    pub fn set_api_problem(&self, sentence: Option<String>) {
        set(&self.api_problem, sentence);
    }

    /// What is degraded on the API server's side now.
    pub fn api_problem(&self) -> Option<String> {
        self.api_problem.lock().ok().and_then(|p| p.clone())
    }

    /// Sets or clears what the stale claims' pass could not check or release (logged as
    /// [`set`] says).
    pub fn set_stale_problem(&self, sentence: Option<String>) {
        set(&self.stale_problem, sentence);
    }
}

/// Sets or clears `slot`: one WARN when a problem starts, one INFO when it ends; a sentence
/// that changes meanwhile (an error's words) is only shown in `status` (and at debug).
fn set(slot: &Mutex<Option<String>>, sentence: Option<String>) {
    if let Ok(mut p) = slot.lock() {
        match (p.as_ref(), sentence.as_ref()) {
            (None, Some(now)) => tracing::warn!("{now}"),
            (Some(was), None) => tracing::info!("resolved: {was}"),
            (Some(was), Some(now)) if was != now => tracing::debug!("{now}"),
            _ => {}
        }
        *p = sentence;
    }
}

impl crate::source::Report for DraState {
    fn problem(&self) -> Option<String> {
        let mut parts: Vec<String> = Vec::new();
        for slot in [&self.problem, &self.api_problem, &self.stale_problem] {
            if let Some(p) = slot.lock().ok().and_then(|p| p.clone()) {
                parts.push(p);
            }
        }
        if let Some(Err(e)) = self.registration() {
            parts.push(format!(
                "the kubelet did not register the DRA driver {DRIVER}: {e}"
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    fn metrics_text(&self) -> String {
        use crate::prometheus::{Exposition, Kind};
        let c = self.counters();
        let mut text = Exposition::default();
        for (name, help, value) in [
            (
                "bcd_dra_claims_prepared_total",
                "DRA claims prepared (answered again after a kubelet restart, too).",
                c.prepared,
            ),
            (
                "bcd_dra_claims_refused_total",
                "DRA claims the driver refused to prepare.",
                c.refused,
            ),
            (
                "bcd_dra_claims_unprepared_total",
                "DRA claims unprepared.",
                c.unprepared,
            ),
            (
                "bcd_dra_resourceslice_writes_total",
                "ResourceSlice creates, updates and deletions bcd sent.",
                c.slice_writes,
            ),
        ] {
            text.family(name, Kind::Counter, help)
                .sample([], value as f64);
        }
        let registered = matches!(self.registration(), Some(Ok(())));
        text.family(
            "bcd_dra_registered",
            Kind::Gauge,
            "1 when the kubelet said it registered the DRA driver, else 0.",
        )
        .sample([], f64::from(u8::from(registered)));
        let f = self.features();
        {
            let mut family = text.family(
                "bcd_dra_slice_feature",
                Kind::Gauge,
                "1 for each newer ResourceSlice field the node's slices use now (taints, shares), else 0.",
            );
            for (feature, on) in [("taints", f.taints), ("shares", f.shares)] {
                family.sample([("feature", feature)], f64::from(u8::from(on)));
            }
        }
        text.into_text()
    }
}

/// How long the driver waits before it tries a kubeconfig or service account again.
pub const CONNECT_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// The driver on the node: makes the API server's client (trying again every
/// [`CONNECT_RETRY`] while it cannot, saying why in `status`), then serves the kubelet's
/// sockets, publishes the node's ResourceSlices and releases the claims the kubelet never
/// unprepared ([`stale`]), until the node stops.
pub async fn run<S: crate::source::DeviceSource>(
    node: std::sync::Arc<S>,
    state: std::sync::Arc<DraState>,
    config: DraConfig,
    kubeconfig: Option<PathBuf>,
) {
    // The claims' specs' temporary files a crash left (bcd's own naming only).
    let left = crate::state::remove_crash_temps(&config.cdi_runtime_dir, |name| {
        name.starts_with("k8s.gpu.bcd.dev-claim_")
    });
    if !left.is_empty() {
        tracing::info!(
            "removed {} temporary file(s) of claims' specs a crash left in {}",
            left.len(),
            config.cdi_runtime_dir.display()
        );
    }
    let client = loop {
        match client::ApiClient::connect(kubeconfig.as_deref()).await {
            Ok(c) => break c,
            Err(e) => {
                state.set_api_problem(Some(format!(
                    "{e}; the DRA driver {DRIVER} starts once it can"
                )));
                tokio::time::sleep(CONNECT_RETRY).await;
            }
        }
    };
    state.set_api_problem(None);
    let reader = std::sync::Arc::new(controller::ApiClaims::new(client.clone()));
    let driver = std::sync::Arc::new(prepare::Driver::new(
        node.clone(),
        reader,
        config.clone(),
        state.clone(),
    ));
    tokio::join!(
        client.clone().renew_every(client::RENEW_EVERY),
        plugin::run(driver.clone(), state.clone()),
        stale::run(driver),
        controller::publish(node, client, state, config),
    );
}

/// The host's name in lower case, as the kubelet names its node by default; `None` when the
/// kernel does not say.
pub fn host_node_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim().to_ascii_lowercase();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests;
