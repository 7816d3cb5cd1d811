//! What each subcommand does and prints. Each returns the process's exit status.

pub mod cdi;
pub mod service;

use std::io::Write;
use std::process::ExitCode;

use crate::cli::Global;
use crate::inventory::collect::collect;
use crate::inventory::document::{Gpu, Inventory};

/// Writes to stdout; a closed pipe (`bcd hardware | head`) ends quietly.
fn print(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// `bcd hardware`.
pub async fn hardware(global: &Global) -> ExitCode {
    let host = global.host();
    let collection = collect(&host, None).await;
    if let Some(e) = &collection.snapshot_error {
        if e.is_no_driver() {
            eprintln!("bcd: {e}; showing what procfs and sysfs show");
        } else {
            let hint = crate::smi::hint::error_hint(&e.to_string())
                .map(|h| format!(" ({h})"))
                .unwrap_or_default();
            eprintln!(
                "bcd: nvidia-smi did not answer: {e}{hint}; showing what procfs and sysfs show"
            );
        }
    }
    if global.json {
        match serde_json::to_string_pretty(&collection.inventory) {
            Ok(json) => print(&format!("{json}\n")),
            Err(e) => {
                eprintln!("bcd: cannot encode the inventory: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        print(&render_inventory(&collection.inventory));
    }
    ExitCode::SUCCESS
}

/// `bcd helper ping`: the helper's version and operations, from its `Hello` and a `Ping`.
pub async fn helper_ping(global: &Global) -> ExitCode {
    use crate::helper_client::{Helper, SocketHelper};
    match SocketHelper::new(&global.helper_socket).ping().await {
        Ok(pong) => {
            let operations: Vec<&str> = pong.operations.iter().map(|o| o.name()).collect();
            if global.json {
                let doc = serde_json::json!({
                    "socket": global.helper_socket,
                    "helper_version": pong.helper_version,
                    "protocol_version": pong.protocol_version,
                    "operations": operations,
                    "sandbox": pong.sandbox,
                });
                print(&format!("{doc}\n"));
            } else {
                print(&format!(
                    "bcd-helper {} at {} (protocol {}): {}\nsandbox: {}\n",
                    pong.helper_version,
                    global.helper_socket.display(),
                    pong.protocol_version,
                    operations.join(", "),
                    pong.sandbox
                ));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bcd: {e}");
            ExitCode::from(1)
        }
    }
}

/// The inventory as an operator reads it: one header line, then one line per GPU.
pub fn render_inventory(inv: &Inventory) -> String {
    let s = &inv.gpu;
    let mut out = format!(
        "driver {}, CUDA {}, {} GPU(s), inventory {}\n",
        s.driver_version.as_deref().unwrap_or("unknown"),
        s.cuda_driver_version
            .as_deref()
            .unwrap_or("unknown (nvidia-smi did not answer)"),
        s.gpus.len(),
        inv.hash
    );
    if s.gpus.is_empty() {
        out.push_str("no NVIDIA GPU found on this host\n");
    }
    for g in &s.gpus {
        out.push_str(&render_gpu(g));
        out.push('\n');
    }
    out
}

fn render_gpu(g: &Gpu) -> String {
    let mut parts = vec![
        format!("GPU {}", g.index),
        g.name.clone().unwrap_or_else(|| "unknown model".into()),
        g.uuid.clone(),
    ];
    if let Some(bus) = &g.bus_id {
        parts.push(bus.clone());
    }
    if let Some(arch) = &g.architecture {
        parts.push(arch.clone());
    }
    if let Some(mib) = g.memory_total_mib {
        parts.push(format!("{mib} MiB"));
    }
    if let Some(cc) = &g.compute_capability {
        parts.push(format!("cc {cc}"));
    }
    if let Some(numa) = g.numa_node {
        parts.push(format!("NUMA {numa}"));
    }
    if let Some(mig) = &g.mig {
        if mig.mode == Some(true) {
            parts.push(format!("MIG on ({} instance(s))", mig.devices.len()));
        }
    }
    if !g.nvlinks.is_empty() {
        let active = g.nvlinks.iter().filter(|l| l.state == "active").count();
        parts.push(format!("{active}/{} NVLinks active", g.nvlinks.len()));
    }
    if g.passed_through {
        parts.push("passed through to a VM".into());
    }
    parts.join(", ")
}
