//! The subcommands that go through the node service (`gpu reset`, `hold ...`) and `bcd node`
//! itself. Each prints what the service did, or its refusal as a sentence.

use std::process::ExitCode;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::output::{fail_api, print, with_progress, FAILED, PROBLEM};
use crate::cli::{Global, GpuCommand, HoldCommand, NodeArgs, VfioCommand, VmCommand};
use crate::node::client::{call, decode};
use crate::node::schema::{
    HoldList, HoldRequest, HoldView, PassthroughRequest, ResetReport, ResetRequest, Summary,
};
use crate::node::service::{run, NodeConfig};

/// Asks the node service and decodes its answer as `T`; a refusal or an answer of another
/// shape is said ([`fail_api`], exit 3) and `Err` carries the exit status.
pub(crate) async fn ask_service<T: DeserializeOwned>(
    global: &Global,
    method: &str,
    path: &str,
    body: Option<&impl Serialize>,
) -> Result<(T, Value), ExitCode> {
    let body = body.map(|b| serde_json::to_value(b).unwrap_or(Value::Null));
    let answered = call(&global.api_socket, method, path, body.as_ref())
        .await
        .and_then(|value| Ok((decode::<T>(&global.api_socket, value.clone())?, value)));
    answered.map_err(|e| fail_api(global.json, &e))
}

/// Prints what the service answered: with `--json` the document as the service wrote it
/// (its `schema_version` included), otherwise `text`.
pub(crate) fn show(global: &Global, value: &Value, text: &str) {
    if global.json {
        print(&format!(
            "{}\n",
            serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
        ));
    } else {
        print(text);
    }
}

/// Asks the service, prints its answer through `render` (or as JSON), exit 0; a refusal
/// exits 3.
async fn through_service<T: DeserializeOwned>(
    global: &Global,
    method: &str,
    path: &str,
    body: Option<&impl Serialize>,
    render: impl FnOnce(&T) -> String,
) -> ExitCode {
    match ask_service::<T>(global, method, path, body).await {
        Ok((answer, value)) => {
            show(global, &value, &render(&answer));
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// [`through_service`] for a step the node carries out through the helper (a vfio-pci step, a
/// VM): while it runs, a terminal shows `what` and the time ([`with_progress`]), cleared
/// before the answer is printed.
async fn step_through_service<T: DeserializeOwned>(
    global: &Global,
    what: &str,
    path: &str,
    body: &impl Serialize,
    render: impl FnOnce(&T) -> String,
) -> ExitCode {
    let asked = with_progress(
        global.json,
        what,
        ask_service::<T>(global, "POST", path, Some(body)),
    )
    .await;
    match asked {
        Ok((answer, value)) => {
            show(global, &value, &render(&answer));
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// The lines `bcd gpu reset` prints for `report`, and its exit status: 3 when a reset
/// failed, 1 when every reset happened but a GPU is still not healthy (its verdict after the
/// reset, the one `bcd status` shows, lets it take no work), else 0 (healthy, or degraded:
/// it may take work, as in `bcd status`).
pub fn render_reset(report: &ResetReport) -> (String, u8) {
    use crate::health::verdict::HealthState;
    let mut out = String::new();
    let mut status = 0;
    for g in &report.gpus {
        let uuid = &g.uuid;
        let cleared = g.conditions_cleared;
        if let Some(e) = &g.error {
            status = FAILED;
            out.push_str(&format!("{uuid}: reset failed: {e}\n"));
        } else if g.healthy && g.health == Some(HealthState::Degraded) {
            out.push_str(&format!(
                "{uuid}: reset, degraded ({cleared} condition(s) cleared; {})\n",
                g.reasons.join("; ")
            ));
        } else if g.healthy {
            out.push_str(&format!(
                "{uuid}: reset, healthy ({cleared} condition(s) cleared)\n"
            ));
        } else {
            status = status.max(PROBLEM);
            let state = match g.health {
                Some(HealthState::Unknown) => "UNKNOWN",
                _ => "UNHEALTHY",
            };
            out.push_str(&format!(
                "{uuid}: reset, still {state} ({cleared} condition(s) cleared; {})\n",
                g.reasons.join("; ")
            ));
        }
    }
    (out, status)
}

/// `bcd gpu reset UUID...`: exit 0 when every GPU was reset and is healthy, 1 when one is
/// still not healthy, 3 when a reset failed or was refused (with `--json` too).
pub async fn gpu(global: &Global, cmd: &GpuCommand) -> ExitCode {
    let GpuCommand::Reset { gpus } = cmd;
    let request = ResetRequest { gpus: gpus.clone() };
    let what = format!(
        "resetting {} through bcd node and its helper",
        gpus.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let asked = with_progress(
        global.json,
        &what,
        ask_service::<ResetReport>(global, "POST", "/v1/gpus/reset", Some(&request)),
    )
    .await;
    match asked {
        Ok((report, value)) => {
            let (text, status) = render_reset(&report);
            show(global, &value, &text);
            ExitCode::from(status)
        }
        Err(code) => code,
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

/// `bcd hold list`'s table: each hold's id, owner, age at `now` (Unix seconds; `-` for a
/// hold made before bcd kept its time) and devices; `no holds` when there is none.
pub fn render_hold_list(holds: &[HoldView], now: u64) -> String {
    use crate::term::table::{Cell, Table};
    use crate::term::units;
    if holds.is_empty() {
        return "no holds\n".to_owned();
    }
    let mut table = Table::new(&["ID", "OWNER", "AGE", "DEVICES"]);
    for h in holds {
        let owner = h.owner.map_or(units::MISSING, owner_word);
        let age = units::or_missing(h.created_at, |t| {
            units::age(std::time::Duration::from_secs(now.saturating_sub(t)))
        });
        table.row(
            vec![
                Cell::plain(h.id.as_str()),
                Cell::plain(owner),
                Cell::plain(age),
                Cell::plain(h.devices.join(",")),
            ],
            Vec::new(),
        );
    }
    table.render(false)
}

/// An owner as the API and `holds.json` spell it.
fn owner_word(owner: crate::cdi::HoldOwner) -> &'static str {
    use crate::cdi::HoldOwner;
    match owner {
        HoldOwner::Operator => "operator",
        HoldOwner::DevicePlugin => "device-plugin",
        HoldOwner::Dra => "dra",
    }
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
                render_hold_list(&v.holds, crate::state::unix_now())
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
    let what = match cmd {
        VfioCommand::Bind { .. } => {
            format!("binding {device} to vfio-pci (its driver has 30 s to let go)")
        }
        VfioCommand::Release { .. } => format!("giving {device} back to its driver"),
    };
    step_through_service(global, &what, path, &request, summary).await
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
    let what = match cmd {
        VmCommand::Start { name } => format!("starting VM {name}"),
        VmCommand::Restore { file } => format!("restoring a VM from {file}"),
        VmCommand::Destroy { name } => format!("destroying VM {name}"),
    };
    step_through_service(global, &what, path, &request, summary).await
}

/// `bcd node`.
pub async fn node(global: &Global, args: &NodeArgs) -> ExitCode {
    let nfd_features_dir = args.nfd_features_dir.clone();
    let dra = match dra_config(global, args) {
        Ok(dra) => dra,
        Err(e) => {
            eprintln!("bcd node: {e}");
            return ExitCode::from(FAILED);
        }
    };
    match run(
        node_config(global, args),
        consumers(kubelet_config(args), nfd_features_dir, dra),
    )
    .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bcd node: {e}");
            ExitCode::from(FAILED)
        }
    }
}

/// The node's configuration: the global options and `bcd node`'s own, read once here.
fn node_config(global: &Global, args: &NodeArgs) -> NodeConfig {
    NodeConfig {
        host: global.host(),
        data_dir: global.data_dir.clone(),
        // The API socket's folder is bcd.service's RuntimeDirectory (/run/bcd).
        runtime_dir: args.runtime_dir.clone().unwrap_or_else(|| {
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
        api_group: Some(args.api_group.clone()),
        metrics_listen: args.metrics_listen,
        sample_interval: Duration::from_secs(args.sample_interval),
        otlp_endpoint: args.otlp_endpoint.clone(),
        gpu_slots: args.gpu_slots,
        xid_policy: global.xid_policy(),
        metrics_compat: args.metrics_compat.map(Into::into),
        mig_config: crate::mig::config_path(global.mig_config.as_deref()),
        mig_layout: args.mig_layout.clone(),
        nvidia_cdi_spec: args.nvidia_cdi_spec.clone(),
        // Without --remediate the other --remediate-* flags are ignored, not refused.
        remediate: args.remediate.then(|| crate::recovery::RemediateConfig {
            settings: crate::recovery::Settings {
                after_s: args.remediate_after,
                max_resets: args.remediate_max_resets,
                backoff_s: args.remediate_backoff,
            },
            reboot_required_file: args.reboot_required_file.clone(),
        }),
    }
}

/// The kubelet device plugins' configuration; `None` without `--device-plugin-dir`.
fn kubelet_config(args: &NodeArgs) -> Option<crate::kubelet::KubeletConfig> {
    let plugin_dir = args.device_plugin_dir.clone()?;
    Some(crate::kubelet::KubeletConfig {
        plugin_dir,
        pod_resources_socket: args.pod_resources_socket.clone(),
        release_grace: Duration::from_secs(args.kubernetes_release_grace),
    })
}

/// `bcd node --dra`'s configuration.
#[derive(Debug, Clone)]
pub struct DraFlags {
    /// `--kubelet-dir`, `--cdi-runtime-dir`, `--node-name`.
    pub config: crate::dra::DraConfig,
    /// `--kubeconfig`.
    pub kubeconfig: Option<std::path::PathBuf>,
}

/// Why `bcd node --dra` cannot start. `Display` is the operator's sentence.
#[derive(Debug, thiserror::Error)]
pub enum DraFlagsError {
    /// No `--node-name`, and the kernel gives no host name.
    #[error("the host's name cannot be read (/proc/sys/kernel/hostname); give --node-name, the kubelet's node name")]
    NoNodeName,
}

/// The DRA driver's configuration; `None` without `--dra`.
///
/// # Errors
/// [`DraFlagsError::NoNodeName`].
fn dra_config(global: &Global, args: &NodeArgs) -> Result<Option<DraFlags>, DraFlagsError> {
    if !args.dra {
        return Ok(None);
    }
    let node_name = args
        .node_name
        .clone()
        .or_else(crate::dra::host_node_name)
        .ok_or(DraFlagsError::NoNodeName)?;
    Ok(Some(DraFlags {
        config: crate::dra::DraConfig {
            kubelet_dir: args.kubelet_dir.clone(),
            cdi_runtime_dir: args.cdi_runtime_dir.clone(),
            node_name,
            host: global.host(),
            stale_pass: crate::dra::stale::STALE_PASS,
        },
        kubeconfig: args.kubeconfig.clone(),
    }))
}

/// The consumers of the node's devices `bcd node` was asked for, each a task on the node that
/// reaches it through [`crate::source::DeviceSource`] alone: the kubelet device plugins (with
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    // What broke: `bcd hold list` printed `id: devices` alone: not who made a hold, nor when.
    #[test]
    fn hold_list_shows_each_holds_owner_and_age() {
        use crate::cdi::HoldOwner;
        use crate::node::schema::HoldView;
        let view = |id: &str, owner, created_at| HoldView {
            id: id.into(),
            devices: vec!["GPU-11111111-1111-1111-1111-111111111111".into()],
            kubernetes: owner != Some(HoldOwner::Operator),
            owner,
            spec: None,
            created_at,
        };
        let now = 1_000_000;
        let text = super::render_hold_list(
            &[
                view("job1", Some(HoldOwner::Operator), Some(now - 12)),
                view("k8s-pod-a", Some(HoldOwner::DevicePlugin), Some(now - 200)),
                view("dra-claim", Some(HoldOwner::Dra), Some(now - 7300)),
                view("old", None, None),
            ],
            now,
        );
        assert_eq!(
            text,
            "ID         OWNER          AGE  DEVICES\n\
             job1       operator       12s  GPU-11111111-1111-1111-1111-111111111111\n\
             k8s-pod-a  device-plugin  3m   GPU-11111111-1111-1111-1111-111111111111\n\
             dra-claim  dra            2h   GPU-11111111-1111-1111-1111-111111111111\n\
             old        -              -    GPU-11111111-1111-1111-1111-111111111111\n"
        );
        assert_eq!(super::render_hold_list(&[], now), "no holds\n");
    }

    use super::{dra_config, kubelet_config, node_config};
    use crate::cli::{Cli, Command, NodeArgs};

    fn parse(args: &[&str]) -> (Cli, NodeArgs) {
        let cli = Cli::try_parse_checked(["bcd", "node"].iter().chain(args)).unwrap();
        let Command::Node(node) = &cli.command else {
            panic!("not node");
        };
        let node = node.clone();
        (cli, node)
    }

    #[test]
    fn the_node_options_reach_the_node_config_once() {
        let (cli, args) = parse(&[
            "--api-socket",
            "/run/x/api.sock",
            "--sample-interval",
            "7",
            "--gpu-slots",
            "4",
            "--metrics-compat",
            "dcgm",
        ]);
        let config = node_config(&cli.global, &args);
        assert_eq!(config.sample_interval, Duration::from_secs(7));
        assert_eq!(config.gpu_slots, 4);
        assert_eq!(config.api_group.as_deref(), Some("bcd"));
        assert_eq!(
            config.runtime_dir,
            PathBuf::from("/run/x"),
            "the socket's folder"
        );
        assert!(config.metrics_compat.is_some());
        let (cli, args) = parse(&["--runtime-dir", "/run/y"]);
        assert_eq!(
            node_config(&cli.global, &args).runtime_dir,
            PathBuf::from("/run/y")
        );
    }

    #[test]
    fn the_dra_driver_is_configured_only_with_dra_and_its_options_reach_it() {
        let (cli, args) = parse(&["--kubeconfig", "/etc/bcd/kubeconfig"]);
        assert!(dra_config(&cli.global, &args).unwrap().is_none());
        let (cli, args) = parse(&[
            "--dra",
            "--node-name",
            "node-a",
            "--kubelet-dir",
            "/k",
            "--kubeconfig",
            "/etc/bcd/kubeconfig",
        ]);
        let dra = dra_config(&cli.global, &args).unwrap().unwrap();
        assert_eq!(dra.config.node_name, "node-a");
        assert_eq!(
            dra.config.registration_socket(),
            PathBuf::from("/k/plugins_registry/gpu.bcd.dev-reg.sock")
        );
        assert_eq!(
            dra.config.dra_socket(),
            PathBuf::from("/k/plugins/gpu.bcd.dev/dra.sock")
        );
        assert_eq!(dra.config.cdi_runtime_dir, PathBuf::from("/var/run/cdi"));
        assert_eq!(dra.kubeconfig, Some(PathBuf::from("/etc/bcd/kubeconfig")));
    }

    #[test]
    fn the_kubelet_is_configured_only_with_a_device_plugin_dir() {
        let (_, args) = parse(&["--kubernetes-release-grace", "9"]);
        assert!(kubelet_config(&args).is_none());
        let (_, args) = parse(&[
            "--device-plugin-dir",
            "/dp",
            "--kubernetes-release-grace",
            "9",
        ]);
        let kubelet = kubelet_config(&args).unwrap();
        assert_eq!(kubelet.plugin_dir, PathBuf::from("/dp"));
        assert_eq!(kubelet.release_grace, Duration::from_secs(9));
        assert_eq!(
            kubelet.pod_resources_socket,
            PathBuf::from(crate::kubelet::DEFAULT_POD_RESOURCES_SOCKET)
        );
    }
}
