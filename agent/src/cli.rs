//! The operator's command line: global options and subcommands, as docs/ lists them.

use std::path::PathBuf;

use bcd_protocol::GpuUuid;
use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::inventory::select::{GpuSelector, NoSuchGpu};
use crate::sys::host::Host;

/// bcd manages the NVIDIA GPUs of this node: inventory, health, CDI specs and passthrough.
///
/// Parsed with [`Cli::try_parse_checked`], which also refuses what clap's attributes cannot
/// express; the derived parsers leave [`Global::xid_policy`] empty.
#[derive(Debug, Parser)]
#[command(name = "bcd", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand takes, listed under their own heading in each `--help`.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the
    /// nvidia-smi to run (for demos and tests).
    #[arg(long, global = true, value_name = "DIR", conflicts_with_all = ["host_root", "nvidia_smi"])]
    pub host: Option<PathBuf>,
    /// The root under which /proc, /sys and /dev are read.
    #[arg(
        long,
        global = true,
        env = "BCD_HOST_ROOT",
        value_name = "DIR",
        default_value = "/"
    )]
    pub host_root: PathBuf,
    /// The nvidia-smi to run (a bare name is looked up on PATH).
    #[arg(
        long,
        global = true,
        env = "BCD_NVIDIA_SMI",
        value_name = "PATH",
        default_value = "nvidia-smi"
    )]
    pub nvidia_smi: PathBuf,
    /// Where the agent keeps its state files.
    #[arg(
        long,
        global = true,
        env = "BCD_DATA_DIR",
        value_name = "DIR",
        default_value = "/var/lib/bcd"
    )]
    pub data_dir: PathBuf,
    /// Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi).
    #[arg(
        long,
        global = true,
        env = "BCD_CDI_DIR",
        value_name = "DIR",
        default_value = "/etc/cdi"
    )]
    pub cdi_dir: PathBuf,
    /// The root helper's socket.
    #[arg(
        long,
        global = true,
        env = "BCD_HELPER_SOCKET",
        value_name = "PATH",
        default_value = "/run/bcd-helper/helper.sock"
    )]
    pub helper_socket: PathBuf,
    /// The node service's API socket.
    #[arg(
        long,
        global = true,
        env = "BCD_API_SOCKET",
        value_name = "PATH",
        default_value = "/run/bcd/bcd.sock"
    )]
    pub api_socket: PathBuf,
    /// The MIG layout file (mig-parted's format), read by bcd mig plan and by bcd node at
    /// each apply (default /etc/bcd/mig-config.yaml).
    #[arg(long, global = true, env = "BCD_MIG_CONFIG", value_name = "FILE")]
    pub mig_config: Option<PathBuf>,
    /// Machine-readable output where the command has it.
    #[arg(long, global = true)]
    pub json: bool,
    /// Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or
    /// `never`.
    #[arg(long, global = true, value_name = "WHEN", default_value = "auto")]
    pub color: crate::term::colour::ColourChoice,
    /// How log lines are written to stderr: `text`, or `json` (one object per line, for the
    /// journal's and log shippers' sake). Which lines: BCD_LOG (e.g. `debug`,
    /// `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands.
    #[arg(
        long,
        global = true,
        env = "BCD_LOG_FORMAT",
        value_name = "FORMAT",
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// XIDs that never affect a GPU's health, overriding NVIDIA's catalog (e.g. 13,31).
    #[arg(
        long,
        global = true,
        env = "BCD_XID_IGNORE",
        value_name = "XIDS",
        default_value = ""
    )]
    pub xid_ignore: crate::health::xid::XidList,
    /// XIDs that make a GPU unhealthy until a reset, overriding NVIDIA's catalog (e.g. 43).
    #[arg(
        long,
        global = true,
        env = "BCD_XID_UNHEALTHY",
        value_name = "XIDS",
        default_value = ""
    )]
    pub xid_unhealthy: crate::health::xid::XidList,
    /// The policy `--xid-ignore` and `--xid-unhealthy` make, set by [`Cli::try_parse_checked`].
    #[arg(skip)]
    xid_policy: crate::health::xid::XidPolicy,
}

impl Cli {
    /// Parses `args` (the program name first) as clap does, then checks what spans two flags:
    /// an XID given to both `--xid-ignore` and `--xid-unhealthy` is refused, for every
    /// subcommand alike.
    ///
    /// # Errors
    /// A [`UsageError`] (exit status 2): clap's own, or the XID conflict in words.
    pub fn try_parse_checked<I, T>(args: I) -> Result<Self, UsageError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let clap = |error| UsageError { error, json: false };
        let matches = command().try_get_matches_from(args).map_err(clap)?;
        let mut cli = <Self as clap::FromArgMatches>::from_arg_matches(&matches).map_err(clap)?;
        cli.global.xid_policy = crate::health::xid::XidPolicy::new(
            cli.global.xid_ignore.0.clone(),
            cli.global.xid_unhealthy.0.clone(),
        )
        .map_err(|e| UsageError {
            error: Self::command().error(clap::error::ErrorKind::ArgumentConflict, e),
            json: cli.global.json,
        })?;
        Ok(cli)
    }
}

/// A usage error (exit status 2), and whether `--json` was known to be asked for when it was
/// found: clap's own parse errors come before any option is known (`json` false); one bcd
/// finds in the parsed options (an XID in both XID lists) knows.
#[derive(Debug)]
pub struct UsageError {
    /// The error, as clap prints it.
    pub error: clap::Error,
    /// `--json` was given and parsed.
    pub json: bool,
}

/// The error document's code of a usage error.
pub const USAGE_CODE: &str = "usage";

impl UsageError {
    /// The error document of it (`{"schema_version", "error": {"code": "usage", "message"}}`):
    /// what stdout carries under `--json`. `None` when `--json` was not known.
    pub fn document(&self) -> Option<String> {
        if !self.json {
            return None;
        }
        // clap's text is "error: <what>\n\nUsage: ...": the first line's words are the sentence.
        let text = self.error.to_string();
        let first = text.lines().next().unwrap_or_default();
        let message = first.strip_prefix("error: ").unwrap_or(first);
        serde_json::to_string_pretty(&crate::document::ErrorDocument::new(USAGE_CODE, message)).ok()
    }

    /// Prints the error document on stdout when `--json` was known, clap's text on stderr, and
    /// exits with status 2.
    pub fn exit(self) -> ! {
        if let Some(doc) = self.document() {
            println!("{doc}");
        }
        self.error.exit()
    }
}

/// The usage error of an `-i` that names no GPU of this node (exit status 2, the error
/// document with code `usage` under `--json`).
/// `subcommand` names the command whose usage line the error shows.
pub fn no_such_gpu(e: &NoSuchGpu, json: bool, subcommand: &str) -> UsageError {
    usage_error(subcommand, clap::error::ErrorKind::InvalidValue, e, json)
}

/// A usage error bcd finds in `bcd <subcommand>`'s parsed options, with that command's usage
/// line.
pub fn usage_error(
    subcommand: &str,
    kind: clap::error::ErrorKind,
    message: impl std::fmt::Display,
    json: bool,
) -> UsageError {
    let mut cli = command();
    let error = match cli.find_subcommand_mut(subcommand) {
        Some(sub) => sub
            .clone()
            .bin_name(format!("bcd {subcommand}"))
            .error(kind, message),
        None => cli.error(kind, message),
    };
    UsageError { error, json }
}

/// What each command's exit status means, as its `--help` ends: docs/exit-status-and-json.md
/// in the command's own terms. Every command: 2 is a usage error.
pub fn exit_statuses(command: &str) -> &'static str {
    match command {
        "hardware" => "0 the inventory (or the labels) printed; 3 nvidia-smi failed or timed out (what procfs and sysfs show is printed all the same), or no driver for the NVIDIA GPUs on the PCI bus",
        "status" => "0 every GPU healthy or degraded; 1 a GPU unhealthy or unknown; 3 no sample (no driver, nvidia-smi failed or timed out)",
        "doctor" => "0 no check failed (warnings pass); 1 a check failed; 3 the report could not be printed",
        "diag" => "0 every check passed (warnings pass); 1 a check failed; 3 the report could not be printed",
        "reset" => "0 every GPU reset and, by its verdict after the reset, healthy or degraded; 1 a GPU reset but still unhealthy or unknown; 3 a reset failed or was refused, or the node could not be reached",
        "ping" => "0 the helper answered, able to run every operation; 1 it answered but cannot run operations on devices (its lock folder is unusable, or it serves only Ping); 3 it did not answer",
        "render" => "0 the spec printed",
        "node" => "0 stopped by SIGTERM or SIGINT; 3 it could not start or had to stop",
        _ => "0 done; 3 refused by the node service, or it could not be reached",
    }
}

/// bcd's whole command line as clap builds it, each `--help` ending with its exit statuses:
/// what the parser, the man pages and the shell completions are made from.
pub fn command() -> clap::Command {
    with_exit_statuses(Cli::command())
}

/// `command` and its subcommands, each `--help` ending with its exit statuses.
fn with_exit_statuses(command: clap::Command) -> clap::Command {
    let name = command.get_name().to_owned();
    let has_subcommands = command.get_subcommands().next().is_some();
    let command = command.mut_subcommands(with_exit_statuses);
    if has_subcommands {
        return command.after_help(
            "Exit status: 0 all well; 1 bcd did its job and found a problem (a GPU not healthy, a \
             check failed); 3 bcd could not do its job (nvidia-smi failed, a reset failed, the \
             node service could not be reached or refused); 2 usage. With --json, stdout is one \
             JSON document, {\"error\": {\"code\", \"message\"}} on failure.",
        );
    }
    command.after_help(format!(
        "Exit status: {}; 2 usage. With --json, stdout is one JSON document, {{\"error\": {{\"code\", \"message\"}}}} on failure.",
        exit_statuses(&name)
    ))
}

/// The shortest `--sample-interval`, in seconds: [`crate::node::shared::MIN_SAMPLE_INTERVAL`].
pub(crate) const MIN_SAMPLE_INTERVAL_S: u64 = crate::node::shared::MIN_SAMPLE_INTERVAL.as_secs();

/// Why a `--sample-interval` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SampleIntervalError {
    /// Not a whole number of seconds.
    #[error("give whole seconds, {MIN_SAMPLE_INTERVAL_S} or more")]
    NotSeconds,
    /// Below the minimum.
    #[error("the sample interval is at least {MIN_SAMPLE_INTERVAL_S} s (nvidia-smi costs driver time on every GPU)")]
    BelowMinimum,
}

/// Reads `--sample-interval`: whole seconds, at least [`MIN_SAMPLE_INTERVAL_S`].
///
/// # Errors
/// A [`SampleIntervalError`] that names the minimum.
pub(crate) fn parse_sample_interval(text: &str) -> Result<u64, SampleIntervalError> {
    let seconds: u64 = text
        .trim()
        .parse()
        .map_err(|_| SampleIntervalError::NotSeconds)?;
    if seconds < MIN_SAMPLE_INTERVAL_S {
        return Err(SampleIntervalError::BelowMinimum);
    }
    Ok(seconds)
}

impl Global {
    /// The host the options name.
    pub(crate) fn host(&self) -> Host {
        match &self.host {
            Some(dir) => Host::fake(dir),
            None => Host::new(&self.host_root, &self.nvidia_smi),
        }
    }

    /// The node's XID overrides (`--xid-ignore`, `--xid-unhealthy`), as
    /// [`Cli::try_parse_checked`] checked them.
    pub(crate) fn xid_policy(&self) -> crate::health::xid::XidPolicy {
        self.xid_policy.clone()
    }
}

/// `bcd helper ...`.
#[derive(Debug, Subcommand)]
pub enum HelperCommand {
    /// Ask bcd-helper for its version and the operations it offers.
    Ping,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
// Parsed once per process: boxing `bcd node`'s options would only complicate clap's derive.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Talk to the root helper directly.
    Helper {
        #[command(subcommand)]
        command: HelperCommand,
    },
    /// Collect the inventory once (without the passthrough memory) and print it.
    Hardware {
        /// Show only these GPUs: an index, a UUID or a bus id; repeatable or comma-separated.
        #[arg(
            short = 'i',
            long = "id",
            value_name = "GPU",
            value_delimiter = ',',
            conflicts_with = "labels"
        )]
        id: Vec<GpuSelector>,
        /// Print the node labels instead (GPU Feature Discovery's names and bcd.dev/ health,
        /// as bcd node --nfd-features-dir keeps them), writing nothing.
        #[arg(long)]
        labels: bool,
        /// The slots per GPU the labels count (bcd node --gpu-slots).
        #[arg(long, value_name = "N", default_value_t = 0, requires = "labels",
              value_parser = clap::value_parser!(u32).range(0..=i64::from(crate::device::id::MAX_SLOTS)))]
        gpu_slots: u32,
    },
    /// Check this host before trusting it with GPU work: one line per check (ok, warn or
    /// fail, its name, its message); exit status 1 when any check fails.
    Doctor,
    /// CDI specs of holds.
    #[command(subcommand)]
    Cdi(CdiCommand),
    /// GPU operations, through the node service.
    #[command(subcommand)]
    Gpu(GpuCommand),
    /// Holds and their CDI specs, through the node service.
    #[command(subcommand)]
    Hold(HoldCommand),
    /// GPUs to vfio-pci and back, through the node service.
    #[command(subcommand)]
    Vfio(VfioCommand),
    /// libvirt domains with GPUs, through the node service.
    #[command(subcommand)]
    Vm(VmCommand),
    /// The recovery loop's remediations (bcd node --remediate), through the node service: a
    /// table of each GPU's reason, steps and result.
    Remediations,
    /// MIG layouts from a mig-parted-format file (--mig-config).
    #[command(subcommand)]
    Mig(MigCommand),
    /// The long-running node service.
    Node(NodeArgs),
    /// A table of the GPUs from a live sample (waits at most 10 s), each with its state
    /// (HEALTHY, DEGRADED, UNHEALTHY or UNKNOWN) and the reasons below it.
    Status(StatusArgs),
    /// Write bcd's man pages (`DIR/man/*.1`) and shell completions (`DIR/completions/`: bash,
    /// zsh, fish) from this command line; the packaged ones are made so.
    #[command(hide = true)]
    GenerateDocs {
        /// The folder to write under.
        dir: PathBuf,
    },
    /// diag.nvml: collect again and check the GPUs; exit 1 unless every check passed.
    Diag {
        /// Check only this GPU (UUID); repeatable.
        #[arg(long = "gpu", value_name = "UUID")]
        gpu: Vec<GpuUuid>,
        /// Check only these GPUs: an index, a UUID or a bus id; repeatable or comma-separated.
        #[arg(short = 'i', long = "id", value_name = "GPU", value_delimiter = ',')]
        id: Vec<GpuSelector>,
        /// Fail gpu.count when fewer GPUs are visible.
        #[arg(long, value_name = "N")]
        expected_gpus: Option<usize>,
    },
}

/// `bcd status`'s options.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// The output's shape: `table` (for a person), `csv` (one GPU a row, numbers without
    /// units) or `json` (as --json).
    #[arg(long, value_name = "FORMAT", default_value = "table")]
    pub format: StatusFormat,
    /// Show only these GPUs: an index, a UUID or a bus id; repeatable or comma-separated.
    #[arg(short = 'i', long = "id", value_name = "GPU", value_delimiter = ',')]
    pub id: Vec<GpuSelector>,
    /// Keep the table on screen, redrawn at every change a running node reports and once per
    /// its sample interval, until Ctrl-C (without a node, read again every 5 s).
    #[arg(short = 'w', long)]
    pub watch: bool,
}

/// `bcd status --format`'s shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum StatusFormat {
    /// A header row and aligned columns, the reasons below each GPU, the notes below.
    #[default]
    Table,
    /// A header row, one GPU a row, numbers without units.
    Csv,
    /// The JSON document, as --json.
    Json,
}

/// `bcd node`'s own options: the one place they are declared. `commands::service` turns
/// them, with the global options, into the node's configuration.
#[derive(Debug, Clone, Args)]
pub struct NodeArgs {
    /// Serve Prometheus metrics on this address (GET /metrics); off by default.
    #[arg(long, env = "BCD_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Send the GPU samples over OTLP/HTTP (protobuf) to this collector every sample
    /// interval, e.g. http://127.0.0.1:4318 (POST /v1/metrics); plain HTTP only.
    #[arg(long, env = "BCD_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<crate::node::otlp::OtlpEndpoint>,
    /// Seconds between GPU samples (at least 5).
    #[arg(long, env = "BCD_SAMPLE_INTERVAL", value_name = "SECONDS", default_value_t = MIN_SAMPLE_INTERVAL_S,
          value_parser = parse_sample_interval)]
    pub sample_interval: u64,
    /// The group given the API socket (mode 0660).
    #[arg(
        long,
        env = "BCD_API_GROUP",
        value_name = "GROUP",
        default_value = "bcd"
    )]
    pub api_group: String,
    /// Time-sliced slots each GPU offers to holds, as GPU-<uuid>::0 to ::N-1 (0: none;
    /// at most 64). Slots of one GPU may go to different holds; a slot never goes with
    /// its whole GPU or its MIG devices.
    #[arg(long, env = "BCD_GPU_SLOTS", value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(crate::device::id::MAX_SLOTS)))]
    pub gpu_slots: u32,
    /// Also serve the metrics under another exporter's names: `dcgm` (NVIDIA
    /// dcgm-exporter's DCGM_FI_* names, units and labels, host as `hostname`) or
    /// `dcgm-legacy` (the same with `Hostname`, as dcgm-exporter named it before 2026).
    #[arg(long, env = "BCD_METRICS_COMPAT", value_name = "SCHEME")]
    pub metrics_compat: Option<MetricsCompatScheme>,
    /// Reset, through the helper, each unhealthy GPU a reset fixes once nothing uses it (one
    /// at a time, within a budget per GPU per boot); say reboot-required where only a reboot
    /// will do. Off by default: without it nothing is ever reset by bcd on its own.
    #[arg(long, env = "BCD_REMEDIATE")]
    pub remediate: bool,
    /// Seconds a GPU's reset-worthy verdict must stand before the loop acts (a burst of XIDs
    /// is one remediation).
    #[arg(
        long,
        env = "BCD_REMEDIATE_AFTER",
        value_name = "SECONDS",
        default_value_t = 30
    )]
    pub remediate_after: u64,
    /// Resets per GPU per boot, never replenished; then the GPU is reboot-required.
    #[arg(
        long,
        env = "BCD_REMEDIATE_MAX_RESETS",
        value_name = "N",
        default_value_t = 3
    )]
    pub remediate_max_resets: u32,
    /// Seconds before a failed reset is tried again; doubles with each failure.
    #[arg(
        long,
        env = "BCD_REMEDIATE_BACKOFF",
        value_name = "SECONDS",
        default_value_t = 60
    )]
    pub remediate_backoff: u64,
    /// With --remediate: write this file while a GPU needs a reboot (one line per GPU), for a
    /// reboot orchestrator such as kured (--reboot-sentinel); removed once none does, if bcd
    /// made it. The package's choice: /run/bcd/reboot-required.
    #[arg(long, env = "BCD_REBOOT_REQUIRED_FILE", value_name = "PATH")]
    pub reboot_required_file: Option<std::path::PathBuf>,
    /// Apply this MIG layout of the layout file (--mig-config) at start, before the device
    /// plugins and the DRA driver offer anything; refused like bcd mig apply (the node then
    /// serves with the GPUs as found). Never applied again on its own.
    #[arg(long, env = "BCD_MIG_LAYOUT", value_name = "LAYOUT")]
    pub mig_layout: Option<String>,
    /// Keep NVIDIA's CDI spec current: bcd-helper regenerates it (nvidia-ctk cdi generate
    /// into its own --nvidia-cdi-spec, which must be this file) when the driver or the
    /// GPUs and MIG devices change; off when not given. E.g. /var/run/cdi/nvidia.yaml.
    #[arg(long, env = "BCD_NVIDIA_CDI_SPEC", value_name = "PATH")]
    pub nvidia_cdi_spec: Option<std::path::PathBuf>,
    /// Serve kubelet device plugins (bcd.dev/gpu, bcd.dev/mig-<profile>,
    /// bcd.dev/gpu-slot) in this folder, the kubelet's /var/lib/kubelet/device-plugins;
    /// off when not given.
    #[arg(long, env = "BCD_DEVICE_PLUGIN_DIR", value_name = "DIR")]
    pub device_plugin_dir: Option<std::path::PathBuf>,
    /// The kubelet's PodResources socket, read to learn which Kubernetes holds no pod has
    /// any more.
    #[arg(long, env = "BCD_POD_RESOURCES_SOCKET", value_name = "PATH", default_value = crate::kubelet::DEFAULT_POD_RESOURCES_SOCKET)]
    pub pod_resources_socket: std::path::PathBuf,
    /// Seconds a Kubernetes hold whose devices no pod has is kept before its release.
    #[arg(long, env = "BCD_KUBERNETES_RELEASE_GRACE", value_name = "SECONDS", default_value_t = crate::kubelet::DEFAULT_RELEASE_GRACE.as_secs())]
    pub kubernetes_release_grace: u64,
    /// A folder on tmpfs that lasts the boot (bcd.service's RuntimeDirectory, kept across
    /// restarts): XID conditions the data folder cannot take are kept here meanwhile.
    /// Default: the API socket's folder (/run/bcd).
    #[arg(long, env = "BCD_RUNTIME_DIR", value_name = "DIR")]
    pub runtime_dir: Option<std::path::PathBuf>,
    /// Keep the GPUs' node labels (GPU Feature Discovery's names, and bcd.dev/ health) in
    /// the file `bcd` of this Node Feature Discovery features folder, usually
    /// /etc/kubernetes/node-feature-discovery/features.d; off when not given.
    #[arg(long, env = "BCD_NFD_FEATURES_DIR", value_name = "DIR")]
    pub nfd_features_dir: Option<std::path::PathBuf>,
    /// Be the kubelet plugin of the DRA driver gpu.bcd.dev and publish the node's
    /// ResourceSlices (resource.k8s.io/v1); off when not given.
    #[arg(long, env = "BCD_DRA")]
    pub dra: bool,
    /// The kubelet's root folder, holding plugins_registry/ and plugins/ (with --dra).
    #[arg(long, env = "BCD_KUBELET_DIR", value_name = "DIR", default_value = crate::dra::DEFAULT_KUBELET_DIR)]
    pub kubelet_dir: std::path::PathBuf,
    /// Where prepared DRA claims' CDI specs go; a folder that does not outlive a reboot
    /// (with --dra).
    #[arg(long, env = "BCD_CDI_RUNTIME_DIR", value_name = "DIR", default_value = crate::dra::DEFAULT_CDI_RUNTIME_DIR)]
    pub cdi_runtime_dir: std::path::PathBuf,
    /// The API server's kubeconfig (its current context); without it, the pod's
    /// in-cluster service account (with --dra).
    #[arg(long, env = "BCD_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The node's name in Kubernetes, the pool's name (with --dra); default: the host's
    /// name in lower case, as the kubelet's.
    #[arg(long, env = "BCD_NODE_NAME", value_name = "NAME")]
    pub node_name: Option<String>,
}

/// `bcd mig ...`.
#[derive(Debug, Subcommand)]
pub enum MigCommand {
    /// Read the host (no node needed) and print, per GPU the layout names, what is there,
    /// what the layout wants and the steps; exit 0 when the host matches, 1 when steps are
    /// needed, 3 when the host cannot be read or the layout is refused.
    Plan {
        /// The layout's name in the file.
        layout: String,
    },
    /// Apply a layout through the node service and its helper: refused as a whole when a
    /// GPU to change is held, claimed by a pod, passed through, stepping or running
    /// processes; exit 0 when applied, 3 when refused or failed.
    Apply {
        /// The layout's name in the node's file.
        layout: String,
    },
    /// The layout the node applied last, its state and each GPU's steps.
    Status,
}

/// `bcd gpu ...`.
#[derive(Debug, Subcommand)]
pub enum GpuCommand {
    /// gpu.reset through the node service: refused as a whole when a GPU is held or passed
    /// through; each reset GPU is checked again afterwards.
    Reset {
        /// GPU UUIDs (GPU-...).
        #[arg(required = true)]
        gpus: Vec<GpuUuid>,
    },
}

/// `bcd hold ...`, through the node service.
#[derive(Debug, Subcommand)]
pub enum HoldCommand {
    /// Hold devices and write their CDI spec (bcd.dev/gpu=<uuid>).
    Apply {
        /// The hold's id (1 to 63 of a-z, 0-9, '_', '.', '-').
        id: String,
        /// GPU (GPU-...) or MIG device (MIG-...) UUIDs, or slots (GPU-...::N).
        #[arg(required = true)]
        devices: Vec<String>,
    },
    /// Release a hold and remove its CDI spec.
    Release {
        /// The hold's id.
        id: String,
        /// Release a Kubernetes hold although a pod still has its devices (the pod keeps
        /// running on devices bcd may then hand to someone else).
        #[arg(long)]
        force: bool,
    },
    /// List the holds.
    List,
}

/// `bcd vfio ...`, through the node service and the helper.
#[derive(Debug, Subcommand)]
pub enum VfioCommand {
    /// Move a GPU (and the other NVIDIA functions of its IOMMU group) to vfio-pci.
    Bind {
        /// PCI address (0000:18:00.0) or GPU UUID.
        device: String,
    },
    /// Give a GPU on vfio-pci back to the kernel's driver.
    Release {
        /// PCI address.
        device: String,
    },
}

/// `bcd vm ...`, libvirt domains through the node service and the helper.
#[derive(Debug, Subcommand)]
pub enum VmCommand {
    /// Persistence off for the domain's GPUs, then virsh start.
    Start {
        /// The domain's name.
        name: String,
    },
    /// Persistence off for the image's GPUs, then virsh restore.
    Restore {
        /// The save image, under the helper's save folder.
        file: String,
    },
    /// virsh destroy, then persistence on for the GPUs back on nvidia.
    Destroy {
        /// The domain's name.
        name: String,
    },
}

/// `bcd cdi ...`.
#[derive(Debug, Subcommand)]
pub enum CdiCommand {
    /// Print the CDI spec a hold of these devices would get, writing nothing.
    Render {
        /// The hold's id (1 to 63 of a-z, 0-9, '_', '.', '-').
        hold: crate::cdi::HoldId,
        /// GPU (GPU-...) or MIG device (MIG-...) UUIDs, or slots (GPU-...::N).
        #[arg(required = true)]
        devices: Vec<crate::cdi::DeviceId>,
        /// A Kubernetes binding: the spec carries no NVIDIA edits.
        #[arg(long)]
        kubernetes: bool,
    },
}

/// `--log-format`'s formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One line of text per event.
    #[default]
    Text,
    /// One JSON object per event (`timestamp`, `level`, `target`, `fields.message`).
    Json,
}

/// `--metrics-compat`'s schemes, as the command line spells them (`dcgm`, `dcgm-legacy`);
/// each is one [`crate::node::metrics::MetricsCompat`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MetricsCompatScheme {
    /// dcgm-exporter's names and labels, the host's name as `hostname` (dcgm-exporter since
    /// it renamed the label in 2026).
    Dcgm,
    /// The same, the host's name as `Hostname` (dcgm-exporter before the rename, which
    /// dashboard 12239 and most alert rules written until then expect).
    DcgmLegacy,
}

impl From<MetricsCompatScheme> for crate::node::metrics::MetricsCompat {
    fn from(scheme: MetricsCompatScheme) -> Self {
        match scheme {
            MetricsCompatScheme::Dcgm => Self::Dcgm,
            MetricsCompatScheme::DcgmLegacy => Self::DcgmLegacy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_checked(std::iter::once("bcd").chain(args.iter().copied()))
            .map_err(|u| u.error)
    }

    // What broke: no command's --help said what its exit status means, and 3 (could not do
    // its job) did not exist.
    #[test]
    fn every_commands_help_ends_with_its_exit_statuses() {
        for args in [
            &["status"][..],
            &["hardware"],
            &["doctor"],
            &["diag"],
            &["gpu", "reset"],
            &["hold", "apply"],
            &["vm", "start"],
            &["helper", "ping"],
            &["node"],
            &[],
        ] {
            let mut all = args.to_vec();
            all.push("--help");
            let e = parse(&all).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
            let help = e.to_string();
            assert!(
                help.contains("Exit status: 0 ") && help.contains("; 2 usage"),
                "{args:?}: {help}"
            );
        }
        let help = parse(&["status", "--help"]).unwrap_err().to_string();
        assert!(
            help.contains("1 a GPU unhealthy or unknown; 3 no sample"),
            "{help}"
        );
    }

    // What broke: bcd node --help listed the global options among the node's own.
    #[test]
    fn a_subcommands_help_lists_its_own_options_before_the_global_ones() {
        let help = parse(&["node", "--help"]).unwrap_err().to_string();
        let global = help
            .find("Global options:")
            .expect("a heading of their own");
        let own = help.find("--metrics-listen").unwrap();
        let data_dir = help.find("--data-dir").unwrap();
        assert!(own < global && global < data_dir, "{help}");
    }

    #[test]
    fn a_sample_interval_below_the_minimum_is_refused_not_raised() {
        for low in ["0", "4"] {
            let e = parse(&["node", "--sample-interval", low]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{low}");
            assert!(e.to_string().contains("at least 5 s"), "{low}: {e}");
        }
        let Command::Node(args) = parse(&["node", "--sample-interval", "5"]).unwrap().command
        else {
            panic!("not node");
        };
        assert_eq!(args.sample_interval, 5);
        let Command::Node(args) = parse(&["node"]).unwrap().command else {
            panic!("not node");
        };
        assert_eq!(args.sample_interval, MIN_SAMPLE_INTERVAL_S);
    }

    #[test]
    fn an_xid_both_ignored_and_unhealthy_is_a_usage_error_for_every_command() {
        for command in [
            &["status"][..],
            &["doctor"],
            &["diag"],
            &["hardware"],
            &["hardware", "--labels"],
            &["node"],
            &["hold", "list"],
        ] {
            let mut args = command.to_vec();
            args.extend(["--xid-ignore", "13,31", "--xid-unhealthy", "13"]);
            let e = parse(&args).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ArgumentConflict,
                "{command:?}"
            );
            assert_eq!(e.exit_code(), 2);
            let text = e.to_string();
            assert!(
                text.contains("XID 13 is given to both --xid-ignore and --xid-unhealthy"),
                "{command:?}: {text}"
            );
        }
        let cli = parse(&["status", "--xid-ignore", "13", "--xid-unhealthy", "43"]).unwrap();
        assert_eq!(
            cli.global.xid_policy().describe(),
            "XID overrides: ignored: 13; unhealthy until reset: 43"
        );
    }
}
