//! The subcommands that go through the node service (`gpu reset`, `hold ...`) and `bcd node`
//! itself. Each prints what the service did, or its refusal as a sentence.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::output::print;
use crate::cli::{Global, GpuCommand, HoldCommand, VfioCommand, VmCommand};
use crate::node::client::{call, decode};
use crate::node::otlp::OtlpEndpoint;
use crate::node::schema::{
    HoldList, HoldRequest, HoldView, PassthroughRequest, ResetReport, ResetRequest, Summary,
};
use crate::node::service::{run, NodeConfig};

/// Prints the answer as JSON (with `--json`, as the service wrote it) or, read as `T`,
/// through `render`; a refusal or an answer of another shape as a sentence.
async fn through_service<T: DeserializeOwned>(
    global: &Global,
    method: &str,
    path: &str,
    body: Option<&impl Serialize>,
    render: impl FnOnce(&T) -> String,
) -> ExitCode {
    let body = body.map(|b| serde_json::to_value(b).unwrap_or(Value::Null));
    let answer = call(&global.api_socket, method, path, body.as_ref())
        .await
        .and_then(|value| {
            if global.json {
                Ok(format!("{value}\n"))
            } else {
                decode::<T>(&global.api_socket, value).map(|t| render(&t))
            }
        });
    match answer {
        Ok(text) => {
            print(&text);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bcd: {e}");
            ExitCode::from(1)
        }
    }
}

/// `bcd gpu reset UUID...`.
pub async fn gpu(global: &Global, cmd: &GpuCommand) -> ExitCode {
    let GpuCommand::Reset { gpus } = cmd;
    let mut failed = false;
    let request = ResetRequest { gpus: gpus.clone() };
    let code = through_service(
        global,
        "POST",
        "/v1/gpus/reset",
        Some(&request),
        |report: &ResetReport| {
            let mut out = String::new();
            for g in &report.gpus {
                let uuid = &g.uuid;
                if let Some(e) = &g.error {
                    failed = true;
                    out.push_str(&format!("{uuid}: reset failed: {e}\n"));
                } else if g.healthy {
                    out.push_str(&format!(
                        "{uuid}: reset, healthy ({} XID condition(s) cleared)\n",
                        g.conditions_cleared
                    ));
                } else {
                    failed = true;
                    out.push_str(&format!(
                        "{uuid}: reset, still UNHEALTHY ({})\n",
                        g.reasons.join("; ")
                    ));
                }
            }
            out
        },
    )
    .await;
    if failed {
        ExitCode::from(1)
    } else {
        code
    }
}

fn render_hold(hold: &HoldView) -> String {
    let k8s = if hold.kubernetes {
        " (Kubernetes binding)"
    } else {
        ""
    };
    format!("{}: {}{k8s}\n", hold.id, hold.devices.join(", "))
}

/// `bcd hold apply|release|list`.
pub async fn hold(global: &Global, cmd: &HoldCommand) -> ExitCode {
    match cmd {
        HoldCommand::Apply { id, devices } => {
            let request = HoldRequest {
                id: id.clone(),
                devices: devices.clone(),
                kubernetes: false,
            };
            through_service(
                global,
                "POST",
                "/v1/holds",
                Some(&request),
                |v: &HoldView| {
                    // The node's own path: the client's --cdi-dir need not be the node's.
                    let spec = v.spec.as_deref().unwrap_or("(the node did not say)");
                    format!(
                        "held {}; containers use --device bcd.dev/gpu=<uuid>, or bcd.dev/gpu={id} for all of them (spec {spec})\n",
                        render_hold(v).trim_end()
                    )
                },
            )
            .await
        }
        HoldCommand::Release { id, force } => {
            let force = if *force { "?force=1" } else { "" };
            through_service(
                global,
                "DELETE",
                &format!("/v1/holds/{id}{force}"),
                None::<&()>,
                |v: &HoldView| format!("released {}", render_hold(v)),
            )
            .await
        }
        HoldCommand::List => {
            through_service(global, "GET", "/v1/holds", None::<&()>, |v: &HoldList| {
                if v.holds.is_empty() {
                    "no holds\n".to_owned()
                } else {
                    v.holds.iter().map(render_hold).collect()
                }
            })
            .await
        }
    }
}

fn summary(v: &Summary) -> String {
    format!("{}\n", v.summary)
}

/// `bcd vfio bind|release`.
pub async fn vfio(global: &Global, cmd: &VfioCommand) -> ExitCode {
    let (path, device) = match cmd {
        VfioCommand::Bind { device } => ("/v1/vfio/bind", device),
        VfioCommand::Release { device } => ("/v1/vfio/release", device),
    };
    let request = PassthroughRequest {
        device: Some(device.clone()),
        ..PassthroughRequest::default()
    };
    through_service(global, "POST", path, Some(&request), summary).await
}

/// `bcd vm start|restore|destroy`.
pub async fn vm(global: &Global, cmd: &VmCommand) -> ExitCode {
    let (path, request) = match cmd {
        VmCommand::Start { name } => (
            "/v1/vm/start",
            PassthroughRequest {
                domain: Some(name.clone()),
                ..PassthroughRequest::default()
            },
        ),
        VmCommand::Restore { file } => (
            "/v1/vm/restore",
            PassthroughRequest {
                file: Some(file.clone()),
                ..PassthroughRequest::default()
            },
        ),
        VmCommand::Destroy { name } => (
            "/v1/vm/destroy",
            PassthroughRequest {
                domain: Some(name.clone()),
                ..PassthroughRequest::default()
            },
        ),
    };
    through_service(global, "POST", path, Some(&request), summary).await
}

/// `bcd node`'s own flags, as the command line gave them.
#[derive(Debug, Clone)]
pub struct NodeFlags {
    /// See `bcd node --runtime-dir`.
    pub runtime_dir: Option<std::path::PathBuf>,
    /// `--metrics-listen`.
    pub metrics_listen: Option<SocketAddr>,
    /// `--otlp-endpoint`.
    pub otlp_endpoint: Option<OtlpEndpoint>,
    /// `--sample-interval`, in seconds.
    pub sample_interval: u64,
    /// `--api-group`.
    pub api_group: String,
    /// `--gpu-slots`.
    pub gpu_slots: u32,
    /// `--metrics-compat`.
    pub metrics_compat: Option<crate::node::metrics::MetricsCompat>,
    /// `--device-plugin-dir` and its companions; `None` without it.
    pub kubelet: Option<crate::kubelet::KubeletConfig>,
    /// `--nfd-features-dir`.
    pub nfd_features_dir: Option<std::path::PathBuf>,
    /// `--dra` and its companions; `None` without it.
    pub dra: Option<DraFlags>,
}

/// `bcd node --dra`'s flags.
#[derive(Debug, Clone)]
pub struct DraFlags {
    /// `--kubelet-dir`, `--cdi-runtime-dir`, `--node-name`.
    pub config: crate::dra::DraConfig,
    /// `--kubeconfig`.
    pub kubeconfig: Option<std::path::PathBuf>,
}

/// `bcd node`.
pub async fn node(global: &Global, flags: NodeFlags) -> ExitCode {
    let NodeFlags {
        runtime_dir,
        metrics_listen,
        otlp_endpoint,
        sample_interval,
        api_group,
        gpu_slots,
        metrics_compat,
        kubelet,
        nfd_features_dir,
        dra,
    } = flags;
    let config = NodeConfig {
        host: global.host(),
        data_dir: global.data_dir.clone(),
        // The API socket's folder is bcd.service's RuntimeDirectory (/run/bcd).
        runtime_dir: runtime_dir.unwrap_or_else(|| {
            global
                .api_socket
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(
                    || crate::health::faults::DEFAULT_RUNTIME_DIR.into(),
                    std::path::Path::to_path_buf,
                )
        }),
        cdi_dir: global.cdi_dir.clone(),
        helper_socket: global.helper_socket.clone(),
        api_socket: global.api_socket.clone(),
        api_group: Some(api_group),
        metrics_listen,
        sample_interval: Duration::from_secs(sample_interval),
        otlp_endpoint,
        gpu_slots,
        xid_policy: global.xid_policy(),
        metrics_compat,
    };
    match run(config, consumers(kubelet, nfd_features_dir, dra)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bcd node: {e}");
            ExitCode::from(1)
        }
    }
}

/// The consumers of the node's devices `bcd node` was asked for, each a task on the node that
/// reaches it through [`crate::device::DeviceSource`] alone: the kubelet device plugins (with
/// `--device-plugin-dir`) and the node labels' feature file (with `--nfd-features-dir`), their
/// state shown in the node's status and metrics, and the DRA driver (with `--dra`).
fn consumers(
    kubelet: Option<crate::kubelet::KubeletConfig>,
    nfd_features_dir: Option<std::path::PathBuf>,
    dra: Option<DraFlags>,
) -> Vec<crate::node::service::NodeTask> {
    let mut tasks = Vec::new();
    if let Some(DraFlags { config, kubeconfig }) = dra {
        tasks.push(crate::node::service::NodeTask {
            name: "the DRA driver gpu.bcd.dev",
            start: Box::new(move |node| {
                let state = std::sync::Arc::new(crate::dra::DraState::default());
                node.add_report(state.clone());
                Box::pin(crate::dra::run(node, state, config, kubeconfig))
            }),
        });
    }
    if let Some(config) = kubelet {
        tasks.push(crate::node::service::NodeTask {
            name: "the kubelet device plugins",
            start: Box::new(move |node| {
                let kube = std::sync::Arc::new(crate::kubelet::KubeState::default());
                node.add_report(kube.clone());
                Box::pin(crate::kubelet::plugin::run(node, kube, config))
            }),
        });
    }
    if let Some(dir) = nfd_features_dir {
        tasks.push(crate::node::service::NodeTask {
            name: "the node labels' feature file",
            start: Box::new(move |node| {
                let report = std::sync::Arc::new(crate::labels::publish::FileReport::default());
                node.add_report(report.clone());
                let host = node.config().host.clone();
                Box::pin(crate::labels::publish::keep_feature_file(
                    node, host, dir, report,
                ))
            }),
        });
    }
    tasks
}
