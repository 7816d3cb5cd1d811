//! The frames that cross the socket, the operations and the typed answers.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::types::{named, DomainName, MigProfileIds, PciAddress, SaveFile};

/// The protocol version this crate speaks. A helper answers another version with
/// [`HelperError::Unsupported`].
pub const PROTOCOL_VERSION: u32 = 3;

/// What the agent sends. The first frame of a connection must be `Hello`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientFrame {
    /// Opens the conversation with the agent's protocol version.
    Hello {
        /// The agent's [`PROTOCOL_VERSION`].
        version: u32,
    },
    /// One operation to run.
    Request(Request),
}

/// An operation with the id its answer will echo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Chosen by the agent; echoed in the [`Response`].
    pub id: u64,
    /// What to do.
    pub op: Operation,
}

/// The privileged operations. Every argument is a validated type; each field decodes through
/// [`named`], so a refused argument is reported with its field's name.
///
/// Operations that change a GPU's state name it by PCI address only: the helper's per-device
/// locks are keyed by PCI function, and a GPU reachable under two names (UUID and address)
/// would have two locks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Operation {
    /// Answers with the helper's version; touches nothing.
    Ping,
    /// `nvidia-smi -i <gpu> -pm 0|1`.
    SetPersistence {
        /// The GPU's PCI function.
        #[serde(deserialize_with = "named::gpu")]
        gpu: PciAddress,
        /// Persistence on or off.
        enabled: bool,
    },
    /// `nvidia-smi --gpu-reset -i <gpu>`.
    ResetGpu {
        /// The GPU's PCI function.
        #[serde(deserialize_with = "named::gpu")]
        gpu: PciAddress,
    },
    /// Moves an NVIDIA PCI function to `vfio-pci`.
    VfioBind {
        /// The function.
        #[serde(deserialize_with = "named::device")]
        device: PciAddress,
    },
    /// Gives a function on `vfio-pci` back to the kernel's choice of driver.
    VfioRelease {
        /// The function.
        #[serde(deserialize_with = "named::device")]
        device: PciAddress,
    },
    /// Persistence off for the domain's NVIDIA hostdevs, then `virsh start`.
    LibvirtStart {
        /// The domain.
        #[serde(deserialize_with = "named::domain")]
        domain: DomainName,
    },
    /// Persistence off for the image's NVIDIA hostdevs, then `virsh restore`.
    LibvirtRestore {
        /// The save image, under the helper's save folder.
        #[serde(deserialize_with = "named::file")]
        file: SaveFile,
    },
    /// `virsh destroy`, then persistence on for the domain's GPUs back on `nvidia`.
    LibvirtDestroy {
        /// The domain.
        #[serde(deserialize_with = "named::domain")]
        domain: DomainName,
    },
    /// The NVIDIA GPUs among a domain's PCI hostdevs, touching nothing: the agent asks before
    /// a start, so that its policy (a held GPU never goes to a VM) runs first.
    LibvirtDomainGpus {
        /// The domain.
        #[serde(deserialize_with = "named::domain")]
        domain: DomainName,
    },
    /// The same for a save image, before a restore.
    LibvirtImageGpus {
        /// The save image, under the helper's save folder.
        #[serde(deserialize_with = "named::file")]
        file: SaveFile,
    },
    /// `nvidia-smi -i <gpu> -mig 0|1`: MIG mode on or off (pending until a reset where the
    /// driver says so).
    SetMigMode {
        /// The GPU's PCI function.
        #[serde(deserialize_with = "named::gpu")]
        gpu: PciAddress,
        /// MIG mode on or off.
        enabled: bool,
    },
    /// `nvidia-smi mig -i <gpu> -dci`, then `-dgi`: every compute instance, then every GPU
    /// instance of the GPU; "none found" is no failure.
    DestroyMigInstances {
        /// The GPU's PCI function.
        #[serde(deserialize_with = "named::gpu")]
        gpu: PciAddress,
    },
    /// `nvidia-smi mig -i <gpu> -cgi <ids> -C`: GPU instances in the order given, each with
    /// its default compute instance.
    CreateMigInstances {
        /// The GPU's PCI function.
        #[serde(deserialize_with = "named::gpu")]
        gpu: PciAddress,
        /// The GPU instance profile ids.
        #[serde(deserialize_with = "named::profiles")]
        profiles: MigProfileIds,
    },
    /// `nvidia-ctk cdi generate` into the spec file the helper was configured with
    /// (`bcd-helper --nvidia-cdi-spec`); the agent names no path.
    RefreshNvidiaCdiSpec,
}

impl Operation {
    /// The operation's kind, as named in the audit log.
    pub fn kind(&self) -> OperationKind {
        match self {
            Operation::Ping => OperationKind::Ping,
            Operation::SetPersistence { .. } => OperationKind::Persistence,
            Operation::ResetGpu { .. } => OperationKind::GpuReset,
            Operation::VfioBind { .. } => OperationKind::VfioBind,
            Operation::VfioRelease { .. } => OperationKind::VfioRelease,
            Operation::LibvirtStart { .. } => OperationKind::LibvirtStart,
            Operation::LibvirtRestore { .. } => OperationKind::LibvirtRestore,
            Operation::LibvirtDestroy { .. } => OperationKind::LibvirtDestroy,
            Operation::LibvirtDomainGpus { .. } | Operation::LibvirtImageGpus { .. } => {
                OperationKind::LibvirtGpus
            }
            Operation::SetMigMode { .. } => OperationKind::MigMode,
            Operation::DestroyMigInstances { .. } => OperationKind::MigDestroy,
            Operation::CreateMigInstances { .. } => OperationKind::MigCreate,
            Operation::RefreshNvidiaCdiSpec => OperationKind::NvidiaCdiSpec,
        }
    }
}

/// The kinds of operation, for `Hello` answers and audit lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum OperationKind {
    /// `ping`
    Ping,
    /// `persistence`
    Persistence,
    /// `gpu.reset`
    GpuReset,
    /// `vfio.bind`
    VfioBind,
    /// `vfio.release`
    VfioRelease,
    /// `libvirt.start`
    LibvirtStart,
    /// `libvirt.restore`
    LibvirtRestore,
    /// `libvirt.destroy`
    LibvirtDestroy,
    /// `libvirt.gpus`
    LibvirtGpus,
    /// `mig.mode`
    MigMode,
    /// `mig.destroy`
    MigDestroy,
    /// `mig.create`
    MigCreate,
    /// `cdi.nvidia`
    NvidiaCdiSpec,
}

impl OperationKind {
    /// Every kind, in protocol order.
    pub const ALL: [OperationKind; 13] = [
        OperationKind::Ping,
        OperationKind::Persistence,
        OperationKind::GpuReset,
        OperationKind::VfioBind,
        OperationKind::VfioRelease,
        OperationKind::LibvirtStart,
        OperationKind::LibvirtRestore,
        OperationKind::LibvirtDestroy,
        OperationKind::LibvirtGpus,
        OperationKind::MigMode,
        OperationKind::MigDestroy,
        OperationKind::MigCreate,
        OperationKind::NvidiaCdiSpec,
    ];

    /// Whether the operation acts on PCI functions (a GPU, or the GPUs of a domain or save
    /// image), so that it runs only under each one's lock: what a helper that cannot lock
    /// devices leaves out of the operations it offers in its `Hello` answer. `Ping` and
    /// `libvirt.gpus` touch nothing; `cdi.nvidia` writes a file, not a device.
    pub fn acts_on_devices(self) -> bool {
        !matches!(
            self,
            OperationKind::Ping | OperationKind::LibvirtGpus | OperationKind::NvidiaCdiSpec
        )
    }

    /// The audit name: `persistence`, `gpu.reset`, `vfio.bind`, ...
    pub fn name(self) -> &'static str {
        match self {
            OperationKind::Ping => "ping",
            OperationKind::Persistence => "persistence",
            OperationKind::GpuReset => "gpu.reset",
            OperationKind::VfioBind => "vfio.bind",
            OperationKind::VfioRelease => "vfio.release",
            OperationKind::LibvirtStart => "libvirt.start",
            OperationKind::LibvirtRestore => "libvirt.restore",
            OperationKind::LibvirtDestroy => "libvirt.destroy",
            OperationKind::LibvirtGpus => "libvirt.gpus",
            OperationKind::MigMode => "mig.mode",
            OperationKind::MigDestroy => "mig.destroy",
            OperationKind::MigCreate => "mig.create",
            OperationKind::NvidiaCdiSpec => "cdi.nvidia",
        }
    }
}

impl fmt::Display for OperationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the helper sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ServerFrame {
    /// The answer to `Hello`.
    Hello(Result<HelloAnswer, HelperError>),
    /// The answer to a request.
    Response(Response),
    /// The connection is being closed for a reason that belongs to no request (a peer that is
    /// not allowed, a frame that does not decode, a stalled frame).
    Closing(HelperError),
}

/// The helper's side of the handshake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelloAnswer {
    /// The helper's [`PROTOCOL_VERSION`].
    pub version: u32,
    /// The helper's package version, for operators.
    pub helper_version: String,
    /// What this helper offers now: every kind, less those it would refuse whatever the
    /// arguments (all but `Ping` when it serves only `Ping`; those that
    /// [act on devices](OperationKind::acts_on_devices) when its lock folder is unusable).
    /// An agent reads a kind left out as "cannot be done here"; the `Pong`'s `sandbox` words
    /// say why.
    pub operations: Vec<OperationKind>,
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The request's id.
    pub id: u64,
    /// What happened.
    pub result: Result<Outcome, HelperError>,
}

/// What a successful operation did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    /// The answer to `Ping`.
    Pong {
        /// The helper's package version.
        helper_version: String,
        /// How the helper is confined, in words ("landlock full; capabilities [...]"), or why
        /// it serves only `Ping`; followed by why it runs no operation on a device, when its
        /// lock folder is unusable.
        sandbox: String,
    },
    /// Persistence mode was set.
    Persistence {
        /// The GPU.
        gpu: PciAddress,
        /// Its persistence mode now.
        enabled: bool,
    },
    /// The GPU was reset.
    Reset {
        /// The GPU.
        gpu: PciAddress,
    },
    /// A function moved between drivers.
    Vfio {
        /// The function.
        #[serde(deserialize_with = "named::device")]
        device: PciAddress,
        /// Its driver before (`None`: no driver).
        driver_before: Option<String>,
        /// Its driver after (`None`: no driver).
        driver_after: Option<String>,
        /// What happened to persistence mode on the way.
        persistence: PersistenceNote,
    },
    /// A libvirt operation ran.
    Libvirt {
        /// The NVIDIA functions among the domain's hostdevs.
        gpus: Vec<PciAddress>,
        /// What happened to their persistence mode.
        persistence: Vec<(PciAddress, PersistenceNote)>,
        /// The domain: the one named, or for a save image the `<name>` its XML gives (`None`
        /// when that is not a name bcd accepts).
        domain: Option<DomainName>,
    },
    /// A MIG step ran on a GPU.
    Mig {
        /// The GPU.
        gpu: PciAddress,
        /// What `nvidia-smi` printed (its last lines, bounded), for the log.
        said: String,
    },
    /// NVIDIA's CDI spec was written.
    NvidiaCdiSpec {
        /// The file written (the helper's setting).
        file: String,
    },
}

/// Persistence calls are best effort: their failures travel in the answer, never fail it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PersistenceNote {
    /// Not attempted (not an NVIDIA GPU, or not on `nvidia`).
    NotTouched,
    /// Set as wanted.
    Set {
        /// The mode now.
        enabled: bool,
    },
    /// The call failed; the operation went on.
    Failed {
        /// The mode that was wanted.
        enabled: bool,
        /// Why, in `nvidia-smi`'s words or the helper's.
        message: String,
    },
}

impl fmt::Display for PersistenceNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = |on: &bool| if *on { "on" } else { "off" };
        match self {
            PersistenceNote::NotTouched => f.write_str("persistence mode untouched"),
            PersistenceNote::Set { enabled } => write!(f, "persistence mode {}", word(enabled)),
            PersistenceNote::Failed { enabled, message } => {
                write!(
                    f,
                    "persistence mode could not be turned {} ({message})",
                    word(enabled)
                )
            }
        }
    }
}

/// Why the helper did not do what was asked. `Display` is the sentence an operator reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum HelperError {
    /// The peer's uid and gids are not allowed.
    #[error("bcd-helper refused the connection: this user is not allowed to use it (run bcd as the bcd user, or add it with --allow-uid/--allow-group)")]
    Denied,
    /// An argument or a frame was refused.
    #[error("bcd-helper refused the request: {what}")]
    Invalid {
        /// What was refused and why.
        what: String,
    },
    /// Another operation holds the device, or too many requests are in flight.
    #[error("bcd-helper is busy: {what}; try again when it is done")]
    Busy {
        /// What it is busy with.
        what: String,
    },
    /// A child process or the kernel did not answer in time.
    #[error("bcd-helper gave up after {after_s}s: the command did not finish (a GPU may be wedged; see dmesg for Xid 79 or 119)")]
    Timeout {
        /// The bound that expired, in seconds.
        after_s: u64,
    },
    /// The operation failed.
    #[error("{}", failed_sentence(*.exit_code, .message))]
    Failed {
        /// The child's exit status, when a child failed.
        exit_code: Option<i32>,
        /// What went wrong: the child's last words, or the helper's.
        message: String,
    },
    /// The protocol version or operation is not offered by this helper.
    #[error("bcd-helper does not speak this protocol version or offer this operation: install matching versions of bcd and bcd-helper")]
    Unsupported,
}

fn failed_sentence(exit_code: Option<i32>, message: &str) -> String {
    match exit_code {
        Some(code) => format!("the privileged step failed (exit status {code}): {message}"),
        None => format!("the privileged step failed: {message}"),
    }
}
