//! The subcommands that go through the node service (`gpu reset`, `hold ...`) and `bcd node`
//! itself. Each prints what the service did, or its refusal as a sentence.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Value};

use crate::cli::{Global, GpuCommand, HoldCommand, VfioCommand, VmCommand};
use crate::node::client::call;
use crate::node::otlp::OtlpEndpoint;
use crate::node::service::{run, NodeConfig};

fn print(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// Prints the answer as JSON (with `--json`) or through `render`; a refusal as a sentence.
async fn through_service(
    global: &Global,
    method: &str,
    path: &str,
    body: Option<Value>,
    render: impl FnOnce(&Value) -> String,
) -> ExitCode {
    match call(&global.api_socket, method, path, body.as_ref()).await {
        Ok(value) => {
            if global.json {
                print(&format!("{value}\n"));
            } else {
                print(&render(&value));
            }
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
    let code = through_service(
        global,
        "POST",
        "/v1/gpus/reset",
        Some(json!({ "gpus": gpus })),
        |v| {
            let mut out = String::new();
            for g in v["gpus"].as_array().into_iter().flatten() {
                let uuid = g["uuid"].as_str().unwrap_or("?");
                if let Some(e) = g["error"].as_str() {
                    failed = true;
                    out.push_str(&format!("{uuid}: reset failed: {e}\n"));
                } else if g["healthy"].as_bool() == Some(true) {
                    let cleared = g["conditions_cleared"].as_u64().unwrap_or(0);
                    out.push_str(&format!(
                        "{uuid}: reset, healthy ({cleared} XID condition(s) cleared)\n"
                    ));
                } else {
                    failed = true;
                    let reasons: Vec<&str> = g["reasons"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    out.push_str(&format!(
                        "{uuid}: reset, still UNHEALTHY ({})\n",
                        reasons.join("; ")
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

fn render_hold(v: &Value) -> String {
    let devices: Vec<&str> = v["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let k8s = if v["kubernetes"].as_bool() == Some(true) {
        " (Kubernetes binding)"
    } else {
        ""
    };
    format!(
        "{}: {}{k8s}\n",
        v["id"].as_str().unwrap_or("?"),
        devices.join(", ")
    )
}

/// `bcd hold apply|release|list`.
pub async fn hold(global: &Global, cmd: &HoldCommand) -> ExitCode {
    match cmd {
        HoldCommand::Apply {
            id,
            devices,
            kubernetes,
        } => {
            let body = json!({ "id": id, "devices": devices, "kubernetes": kubernetes });
            through_service(global, "POST", "/v1/holds", Some(body), |v| {
                // The node's own path: the client's --cdi-dir need not be the node's.
                let spec = v["spec"].as_str().unwrap_or("(the node did not say)");
                format!(
                    "held {}; containers use --device bcd.dev/gpu=<uuid>, or bcd.dev/gpu={id} for all of them (spec {spec})\n",
                    render_hold(v).trim_end()
                )
            })
            .await
        }
        HoldCommand::Release { id } => {
            through_service(global, "DELETE", &format!("/v1/holds/{id}"), None, |v| {
                format!("released {}", render_hold(v))
            })
            .await
        }
        HoldCommand::List => {
            through_service(global, "GET", "/v1/holds", None, |v| {
                let holds = v["holds"].as_array().cloned().unwrap_or_default();
                if holds.is_empty() {
                    "no holds\n".to_owned()
                } else {
                    holds.iter().map(render_hold).collect()
                }
            })
            .await
        }
    }
}

fn summary(v: &Value) -> String {
    format!("{}\n", v["summary"].as_str().unwrap_or_default())
}

/// `bcd vfio bind|release`.
pub async fn vfio(global: &Global, cmd: &VfioCommand) -> ExitCode {
    let (path, device) = match cmd {
        VfioCommand::Bind { device } => ("/v1/vfio/bind", device),
        VfioCommand::Release { device } => ("/v1/vfio/release", device),
    };
    through_service(
        global,
        "POST",
        path,
        Some(json!({ "device": device })),
        summary,
    )
    .await
}

/// `bcd vm start|restore|destroy`.
pub async fn vm(global: &Global, cmd: &VmCommand) -> ExitCode {
    let (path, body) = match cmd {
        VmCommand::Start { name } => ("/v1/vm/start", json!({ "domain": name })),
        VmCommand::Restore { file } => ("/v1/vm/restore", json!({ "file": file })),
        VmCommand::Destroy { name } => ("/v1/vm/destroy", json!({ "domain": name })),
    };
    through_service(global, "POST", path, Some(body), summary).await
}

/// `bcd node`.
pub async fn node(
    global: &Global,
    metrics_listen: Option<SocketAddr>,
    otlp_endpoint: Option<OtlpEndpoint>,
    sample_interval: u64,
    api_group: &str,
    gpu_slots: u32,
) -> ExitCode {
    let config = NodeConfig {
        host: global.host(),
        data_dir: global.data_dir.clone(),
        cdi_dir: global.cdi_dir.clone(),
        helper_socket: global.helper_socket.clone(),
        api_socket: global.api_socket.clone(),
        api_group: Some(api_group.to_owned()),
        metrics_listen,
        sample_interval: Duration::from_secs(sample_interval),
        otlp_endpoint,
        gpu_slots,
        xid_policy: global.xid_policy(),
    };
    match run(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bcd node: {e}");
            ExitCode::from(1)
        }
    }
}
