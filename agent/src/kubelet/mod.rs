//! Kubernetes: bcd's GPUs, MIG devices and slots as kubelet device plugins (API `v1beta1`,
//! gRPC over Unix sockets), enabled by `bcd node --device-plugin-dir DIR`.
//!
//! - One plugin per resource ([`devices::Resource`]): `bcd.dev/gpu`, `bcd.dev/mig-<profile>`,
//!   `bcd.dev/gpu-slot`. Each serves `DIR/bcd-<resource>.sock` before it registers with
//!   `DIR/kubelet.sock`, and serves and registers again when the kubelet restarts (the
//!   kubelet removes the plugin sockets and makes `kubelet.sock` anew) ([`plugin`]).
//! - `ListAndWatch` streams [`devices::offer`]'s verdicts at every change of the conditions
//!   (an XID, a healthy reset), the holds or the inventory.
//! - `Allocate` makes a Kubernetes hold per container through [`crate::device::policy`], writes its
//!   spec before it answers, and answers CDI device names ([`allocate`]).
//! - Releases come from the kubelet's PodResources API ([`release`]).
//!
//! It reaches the node through [`crate::source::DeviceSource`] alone (tested against a fake
//! source), keeps its own counters and problem in [`KubeState`] (shown in the node's status
//! and metrics as a [`crate::source::Report`]), never runs a privileged step and changes
//! nothing but holds.

pub(crate) mod allocate;
pub mod devices;
pub(crate) mod grpc;
pub(crate) mod names;
pub(crate) mod plugin;
pub(crate) mod release;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use crate::source::DeviceSource;

/// The generated gRPC code of the kubelet's APIs (`agent/proto/`).
pub(crate) mod proto {
    /// The device plugin API, `v1beta1`.
    #[allow(missing_docs, clippy::all, missing_debug_implementations)]
    pub(crate) mod deviceplugin {
        tonic::include_proto!("v1beta1");
    }
    /// The PodResources API, `v1`.
    #[allow(missing_docs, clippy::all, missing_debug_implementations)]
    pub(crate) mod podresources {
        tonic::include_proto!("v1");
    }
}

/// The device plugin API version bcd speaks.
pub(crate) const API_VERSION: &str = "v1beta1";
/// The kubelet's registration socket, in the plugin directory.
pub(crate) const KUBELET_SOCKET: &str = "kubelet.sock";
/// Where the kubelet serves the PodResources API.
pub(crate) const DEFAULT_POD_RESOURCES_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
/// How long a Kubernetes hold whose devices no pod has is kept before it is released: long
/// enough for a container just allocated to appear in PodResources.
pub(crate) const DEFAULT_RELEASE_GRACE: Duration = Duration::from_secs(30);

/// What `bcd node` was told about Kubernetes.
#[derive(Debug, Clone)]
pub(crate) struct KubeletConfig {
    /// The kubelet's device plugin directory (`/var/lib/kubelet/device-plugins`).
    pub plugin_dir: PathBuf,
    /// The kubelet's PodResources socket.
    pub pod_resources_socket: PathBuf,
    /// See [`DEFAULT_RELEASE_GRACE`].
    pub release_grace: Duration,
}

/// Counters per resource, for the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ResourceCounters {
    /// Containers allocated.
    pub allocations: u64,
    /// Kubernetes holds released.
    pub releases: u64,
    /// Devices turned `Healthy`.
    pub to_healthy: u64,
    /// Devices turned `Unhealthy`.
    pub to_unhealthy: u64,
}

/// The Kubernetes side's own state: the counters and what is degraded, shown in the node's
/// status and metrics through [`crate::source::Report`].
#[derive(Debug)]
pub(crate) struct KubeState {
    counters: Mutex<BTreeMap<String, ResourceCounters>>,
    problem: Mutex<Option<String>>,
    /// Why the plugins are not registered, while they wait for the kubelet.
    unregistered: Mutex<Option<String>>,
    /// PodResources containers whose names were not Kubernetes names, and when that was
    /// last logged.
    dropped: Mutex<(u64, Option<std::time::Instant>)>,
}

impl Default for KubeState {
    fn default() -> Self {
        Self {
            counters: Mutex::new(BTreeMap::new()),
            problem: Mutex::new(None),
            unregistered: Mutex::new(None),
            dropped: Mutex::new((0, None)),
        }
    }
}

/// How often dropped PodResources names are logged at most.
const DROPPED_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl KubeState {
    /// Changes the counters of `resource`.
    pub(crate) fn count(&self, resource: &str, f: impl FnOnce(&mut ResourceCounters)) {
        if let Ok(mut c) = self.counters.lock() {
            f(c.entry(resource.to_owned()).or_default());
        }
    }

    /// Every resource's counters.
    pub(crate) fn counters(&self) -> BTreeMap<String, ResourceCounters> {
        self.counters.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Sets or clears what is degraded on the Kubernetes side (shown in `status`).
    pub(crate) fn set_problem(&self, sentence: Option<String>) {
        if let Ok(mut p) = self.problem.lock() {
            if let Some(s) = &sentence {
                if p.as_ref() != Some(s) {
                    tracing::warn!("{s}");
                }
            }
            *p = sentence;
        }
    }

    /// Counts `n` PodResources containers whose names were not Kubernetes names (logged at
    /// most once a minute).
    pub(crate) fn dropped_names(&self, n: u64) {
        if let Ok(mut d) = self.dropped.lock() {
            d.0 = d.0.saturating_add(n);
            if d.1.is_none_or(|at| at.elapsed() >= DROPPED_LOG_EVERY) {
                tracing::warn!(
                    "the kubelet's PodResources answer named {n} container(s) with names that are not Kubernetes names; their devices count as in use, their names are not kept ({} so far)",
                    d.0
                );
                d.1 = Some(std::time::Instant::now());
            }
        }
    }

    /// How many PodResources containers were dropped for their names.
    pub(crate) fn dropped_total(&self) -> u64 {
        self.dropped.lock().map(|d| d.0).unwrap_or(0)
    }

    /// Sets or clears why the plugins are not registered with the kubelet (shown in
    /// `status` beside the PodResources problem; logged once by the plugin that finds it).
    pub(crate) fn set_unregistered(&self, sentence: Option<String>) {
        if let Ok(mut u) = self.unregistered.lock() {
            *u = sentence;
        }
    }

    /// What is degraded on the Kubernetes side now: the PodResources reader's problem and
    /// why the plugins are not registered, in one sentence.
    pub(crate) fn problem(&self) -> Option<String> {
        let parts: Vec<String> = [&self.problem, &self.unregistered]
            .into_iter()
            .filter_map(|p| p.lock().ok().and_then(|p| p.clone()))
            .collect();
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// The counters in Prometheus' text format ([`crate::prometheus`]: the resource label's
    /// value escaped); nothing before the first allocation or dropped name.
    pub(crate) fn metrics_text(&self) -> String {
        use crate::prometheus::{Exposition, Kind};
        let counters = self.counters();
        let mut text = Exposition::default();
        let dropped = self.dropped_total();
        if dropped > 0 {
            text.family(
                "bcd_kubernetes_podresources_dropped_total",
                Kind::Counter,
                "PodResources containers whose names were not Kubernetes names (their devices still count as in use).",
            )
            .sample([], dropped as f64);
        }
        let mut per_resource = |name, help, value: fn(&ResourceCounters) -> u64| {
            let mut family = text.family(name, Kind::Counter, help);
            for (resource, c) in &counters {
                family.sample([("resource", resource.as_str())], value(c) as f64);
            }
        };
        per_resource(
            "bcd_kubernetes_allocations_total",
            "Containers the kubelet allocated devices to, per resource.",
            |c| c.allocations,
        );
        per_resource(
            "bcd_kubernetes_releases_total",
            "Kubernetes holds released after no pod had their devices, per resource.",
            |c| c.releases,
        );
        let mut family = text.family(
            "bcd_kubernetes_health_transitions_total",
            Kind::Counter,
            "Devices whose health changed on the ListAndWatch stream, per resource and new health.",
        );
        for (resource, c) in &counters {
            for (health, n) in [("Healthy", c.to_healthy), ("Unhealthy", c.to_unhealthy)] {
                family.sample(
                    [("resource", resource.as_str()), ("health", health)],
                    n as f64,
                );
            }
        }
        text.into_text()
    }
}

impl crate::source::Report for KubeState {
    fn problem(&self) -> Option<String> {
        KubeState::problem(self)
    }

    fn metrics_text(&self) -> String {
        KubeState::metrics_text(self)
    }
}

/// Per GPU UUID, whether the GPU takes work: the one verdict the plugins stream (healthy or
/// degraded, [`crate::health::verdict::Verdict::healthy`]).
pub(crate) async fn gpus_taking_work<S: DeviceSource>(
    node: &S,
) -> BTreeMap<bcd_protocol::GpuUuid, bool> {
    node.verdicts()
        .await
        .into_iter()
        .map(|(uuid, v)| (uuid, v.healthy()))
        .collect()
}

/// The devices of the node as the plugins offer them now.
pub(crate) async fn offer_now<S: DeviceSource>(node: &S) -> devices::Offer {
    let inventory = node.inventory().await;
    let holds = node.holds_now().await;
    let mut verdict = gpus_taking_work(node).await;
    // A GPU a step of the node's has claimed (a reset, a vfio step) takes no work meanwhile.
    for gpu in node.claimed() {
        if let crate::device::DeviceId::Gpu(uuid) = gpu {
            verdict.insert(uuid, false);
        }
    }
    devices::offer(&inventory, node.gpu_slots(), &holds, &verdict)
}

/// `bcd status`'s lines about Kubernetes, from the hold store in `data_dir`: one per
/// Kubernetes hold with its devices, and whether its release is pending.
pub(crate) fn status_lines(data_dir: &std::path::Path) -> String {
    let Ok(holds) = crate::cdi::Holds::load(data_dir) else {
        return String::new();
    };
    let mut out = String::new();
    for hold in holds.list().filter(|h| h.kubernetes) {
        let devices: Vec<String> = hold.devices.iter().map(|d| d.to_string()).collect();
        out.push_str(&format!("kubernetes {} {}", hold.id, devices.join(",")));
        if let Some(since) = hold.unassigned_since {
            out.push_str(&format!(
                " (release pending: no pod has its devices since {})",
                crate::utc::format_utc(since)
            ));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counters_are_rendered_per_resource() {
        let state = KubeState::default();
        assert_eq!(
            state.metrics_text(),
            "",
            "nothing before the first allocation"
        );
        state.count("bcd.dev/gpu", |c| c.allocations += 2);
        state.count("bcd.dev/gpu", |c| c.to_unhealthy += 1);
        let text = state.metrics_text();
        assert!(
            text.contains("bcd_kubernetes_allocations_total{resource=\"bcd.dev/gpu\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("bcd_kubernetes_health_transitions_total{resource=\"bcd.dev/gpu\",health=\"Unhealthy\"} 1\n"), "{text}");
        assert!(text.contains("# TYPE bcd_kubernetes_releases_total counter\n"));
    }

    // The counters wrote the resource into its label unescaped, safe only while every caller
    // passed a validated resource name: a `"` or a line feed in one broke the scrape.
    #[test]
    fn a_resource_with_a_quote_or_a_newline_stays_inside_its_label_value() {
        let state = KubeState::default();
        state.count("bcd.dev/mig-\"x\"} 1\nbcd_gpus 99\\", |c| {
            c.allocations += 1
        });
        let text = state.metrics_text();
        assert!(
            text.contains(
                "bcd_kubernetes_allocations_total{resource=\"bcd.dev/mig-\\\"x\\\"} 1\\nbcd_gpus 99\\\\\"} 1\n"
            ),
            "{text}"
        );
        assert!(!text.contains("\nbcd_gpus 99"), "{text}");
    }

    #[test]
    fn status_lines_name_kubernetes_holds_and_pending_releases() {
        let dir = tempfile::tempdir().unwrap();
        let mut holds = crate::cdi::Holds::load(dir.path()).unwrap();
        let t = crate::device::policy::Topology::default();
        let dev: crate::cdi::DeviceId = "GPU-11111111-1111-1111-1111-111111111111".parse().unwrap();
        let placed = vec![crate::device::policy::Placed {
            device: dev.clone(),
            gpu: Some(dev),
        }];
        let id: crate::cdi::HoldId = "k8s-a".parse().unwrap();
        holds
            .apply(id.clone(), placed, crate::cdi::HoldOwner::DevicePlugin, &t)
            .unwrap();
        assert_eq!(
            status_lines(dir.path()),
            "kubernetes k8s-a GPU-11111111-1111-1111-1111-111111111111\n"
        );
        assert!(holds.mark_unassigned(&id, Some(42)).unwrap());
        assert!(
            !holds.mark_unassigned(&id, Some(42)).unwrap(),
            "no change, no write"
        );
        // What broke: the time read "since 42, Unix time"; it is a date an operator reads.
        assert!(
            status_lines(dir.path()).contains(
                "(release pending: no pod has its devices since 1970-01-01 00:00:42 UTC)"
            ),
            "{}",
            status_lines(dir.path())
        );
    }
}

#[cfg(test)]
mod served;

#[cfg(test)]
pub(crate) mod fake_source;
