//! The operator's command line: global options and subcommands, as DESIGN.md lists them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::host::Host;

/// bcd manages the NVIDIA GPUs of this node: inventory, health, CDI specs and passthrough.
#[derive(Debug, Parser)]
#[command(name = "bcd", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand takes.
#[derive(Debug, Clone, Args)]
pub struct Global {
    /// A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the
    /// nvidia-smi to run (for demos and tests).
    #[arg(long, global = true, value_name = "DIR", conflicts_with_all = ["host_root", "nvidia_smi"])]
    pub host: Option<PathBuf>,
    /// The root under which /proc, /sys and /dev are read.
    #[arg(long, global = true, value_name = "DIR", default_value = "/")]
    pub host_root: PathBuf,
    /// The nvidia-smi to run (a bare name is looked up on PATH).
    #[arg(long, global = true, value_name = "PATH", default_value = "nvidia-smi")]
    pub nvidia_smi: PathBuf,
    /// Where the agent keeps its state files.
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        default_value = "/var/lib/bcd"
    )]
    pub data_dir: PathBuf,
    /// Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi).
    #[arg(long, global = true, value_name = "DIR", default_value = "/etc/cdi")]
    pub cdi_dir: PathBuf,
    /// The root helper's socket.
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        default_value = "/run/bcd/helper.sock"
    )]
    pub helper_socket: PathBuf,
    /// The node service's API socket.
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        default_value = "/run/bcd/bcd.sock"
    )]
    pub api_socket: PathBuf,
    /// Machine-readable output where the command has it.
    #[arg(long, global = true)]
    pub json: bool,
}

impl Global {
    /// The host the options name.
    pub fn host(&self) -> Host {
        match &self.host {
            Some(dir) => Host::fake(dir),
            None => Host::new(&self.host_root, &self.nvidia_smi),
        }
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Collect the inventory once (without the passthrough memory) and print it.
    Hardware,
    /// One line per GPU from a live sample (waits at most 10 s), with UNHEALTHY where the
    /// healthy rule fails.
    Status,
    /// diag.nvml: collect again and check the GPUs; exit 1 unless every check passed.
    Diag {
        /// Check only this GPU (UUID); repeatable.
        #[arg(long = "gpu", value_name = "UUID")]
        gpu: Vec<String>,
        /// Fail gpu.count when fewer GPUs are visible.
        #[arg(long, value_name = "N")]
        expected_gpus: Option<usize>,
    },
}
