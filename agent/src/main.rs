//! `bcd`: the operator's command line and the node service.

use std::process::ExitCode;

use bcd::cli::{CdiCommand, Cli, Command, HelperCommand, LogFormat};
use bcd::commands::{self, service as svc};

fn main() -> ExitCode {
    let cli = Cli::try_parse_checked(std::env::args_os()).unwrap_or_else(|e| e.exit());
    // bcd node says what it serves at info; a one-shot command only what went wrong.
    let default_level = if matches!(cli.command, Command::Node { .. }) {
        "warn,bcd=info"
    } else {
        "warn"
    };
    let asked = std::env::var("BCD_LOG").ok();
    let mut filter = tracing_subscriber::EnvFilter::try_from_env("BCD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // kube's client logs every failed call at ERROR (every few seconds while the API server is
    // away); the DRA driver says what fails itself, once, in one sentence. Named in BCD_LOG, it
    // is logged as asked.
    if !asked.is_some_and(|a| a.contains("kube")) {
        if let Ok(quiet) = "kube_client=off".parse() {
            filter = filter.add_directive(quiet);
        }
    }
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_ansi(false);
    match cli.global.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return commands::output::fail(
                cli.global.json,
                commands::output::code::INTERNAL,
                &format!("cannot start the async runtime: {e}"),
            );
        }
    };
    runtime.block_on(async {
        match &cli.command {
            Command::Hardware {
                labels: false, id, ..
            } => commands::hardware::hardware(&cli.global, id).await,
            Command::Hardware {
                labels: true,
                gpu_slots,
                ..
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
            Command::Mig(cmd) => commands::mig::mig(&cli.global, cmd).await,
            Command::Remediations => commands::remediations::remediations(&cli.global).await,
            Command::Node(args) => svc::node(&cli.global, args).await,
            Command::Status(args) => commands::status::status(&cli.global, args).await,
            Command::GenerateDocs { dir } => commands::docs::generate(dir),
            Command::Diag {
                gpu,
                id,
                expected_gpus,
            } => commands::diag::diag(&cli.global, gpu, id, *expected_gpus).await,
        }
    })
}
