//! `bcd`: the operator's command line and the node service.

use std::process::ExitCode;

use bcd::cli::{CdiCommand, Cli, Command, HelperCommand};
use bcd::commands::{self, service as svc};

fn main() -> ExitCode {
    let cli = Cli::try_parse_checked(std::env::args_os()).unwrap_or_else(|e| e.exit());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("BCD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(false)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bcd: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async {
        match &cli.command {
            Command::Hardware { labels: false, .. } => {
                commands::hardware::hardware(&cli.global).await
            }
            Command::Hardware {
                labels: true,
                gpu_slots,
            } => commands::labels::labels(&cli.global, *gpu_slots).await,
            Command::Helper {
                command: HelperCommand::Ping,
            } => commands::helper::ping(&cli.global).await,
            Command::Doctor => commands::doctor::doctor(&cli.global).await,
            Command::Cdi(CdiCommand::Render {
                hold,
                devices,
                kubernetes,
            }) => commands::cdi::render(&cli.global, hold, devices, *kubernetes).await,
            Command::Gpu(cmd) => svc::gpu(&cli.global, cmd).await,
            Command::Hold(cmd) => svc::hold(&cli.global, cmd).await,
            Command::Vfio(cmd) => svc::vfio(&cli.global, cmd).await,
            Command::Vm(cmd) => svc::vm(&cli.global, cmd).await,
            Command::Node {
                metrics_listen,
                otlp_endpoint,
                sample_interval,
                api_group,
                gpu_slots,
                metrics_compat,
                device_plugin_dir,
                pod_resources_socket,
                kubernetes_release_grace,
                runtime_dir,
                nfd_features_dir,
                dra,
                kubelet_dir,
                cdi_runtime_dir,
                kubeconfig,
                node_name,
            } => {
                let dra = if *dra {
                    let Some(node_name) = node_name.clone().or_else(bcd::dra::host_node_name)
                    else {
                        eprintln!("bcd node: the host's name cannot be read; give --node-name");
                        return ExitCode::from(2);
                    };
                    Some(svc::DraFlags {
                        config: bcd::dra::DraConfig {
                            kubelet_dir: kubelet_dir.clone(),
                            cdi_runtime_dir: cdi_runtime_dir.clone(),
                            node_name,
                            host: cli.global.host(),
                        },
                        kubeconfig: kubeconfig.clone(),
                    })
                } else {
                    None
                };
                let flags = svc::NodeFlags {
                    runtime_dir: runtime_dir.clone(),
                    metrics_listen: *metrics_listen,
                    otlp_endpoint: otlp_endpoint.clone(),
                    sample_interval: *sample_interval,
                    api_group: api_group.clone(),
                    gpu_slots: *gpu_slots,
                    metrics_compat: metrics_compat.map(Into::into),
                    kubelet: device_plugin_dir
                        .as_ref()
                        .map(|dir| bcd::kubelet::KubeletConfig {
                            plugin_dir: dir.clone(),
                            pod_resources_socket: pod_resources_socket.clone(),
                            release_grace: std::time::Duration::from_secs(
                                *kubernetes_release_grace,
                            ),
                        }),
                    nfd_features_dir: nfd_features_dir.clone(),
                    dra,
                };
                svc::node(&cli.global, flags).await
            }
            Command::Status => commands::status::status(&cli.global).await,
            Command::Diag { gpu, expected_gpus } => {
                commands::diag::diag(&cli.global, gpu, *expected_gpus).await
            }
        }
    })
}
