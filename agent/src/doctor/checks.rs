//! Doctor's checks as pure functions from what was read to a [`Check`]; what they judge is
//! read by [`super::gather`] and the collector. Each function documents when it gives which
//! status; a check that has nothing to say returns `None` and prints no line.

use std::io;

use super::gather::{KmsgDenied, KmsgNode};
use super::helper::PingError;
use super::{Check, Status};
use crate::health::verdict::{HealthState, Verdict};
use crate::inventory::collect::Collection;
use crate::inventory::document::Gpu;
use crate::smi::hint::hint_or_default;
use crate::smi::probe::Probe;
use crate::smi::runner::RunError;
use crate::smi::snapshot::{ProbeFailure, SnapshotError};
use crate::smi::xml::XmlGpu;
use crate::sys::pci::PciFunction;
use crate::sys::systemd::UnitState;

/// The checks' names, as printed.
pub mod name {
    /// `nvidia-smi` answers the probe.
    pub const NVML: &str = "nvml";
    /// The inventory collected and hashed.
    pub const HARDWARE: &str = "hardware";
    /// One per GPU of the inventory: its verdict.
    pub const GPU: &str = "gpu";
    /// A GPU whose MIG mode changes at its next reset.
    pub const MIG_MODE: &str = "mig-mode";
    /// The snapshot failed.
    pub const GPUS: &str = "gpus";
    /// WSL 2's paravirtual GPU.
    pub const GPU_HOST: &str = "gpu-host";
    /// `nouveau` loaded.
    pub const NOUVEAU: &str = "nouveau";
    /// GPUs on the PCI bus against GPUs `nvidia-smi` lists.
    pub const GPU_BUS: &str = "gpu-bus";
    /// Persistence mode.
    pub const PERSISTENCE: &str = "persistence";
    /// NVSwitches and `nvidia-fabricmanager`.
    pub const FABRIC_MANAGER: &str = "fabric-manager";
    /// The node's overrides of NVIDIA's XID catalog (`--xid-ignore`, `--xid-unhealthy`).
    pub(crate) const XID_POLICY: &str = "xid-policy";
    /// The kernel module's version against `nvidia-smi`'s.
    pub const DRIVER_VERSION: &str = "driver-version";
    /// `/dev/kmsg` readable (XIDs).
    pub const KMSG: &str = "kmsg";
    /// This boot's XID record (`faults.json`) could not be read.
    pub(crate) const XID_RECORD: &str = "xid-record";
    /// The helper answers `Ping`.
    pub const HELPER: &str = "helper";
    /// GPUs, and a helper to do their privileged steps.
    pub const GPU_BINDING: &str = "gpu-binding";
    /// Another owner of the MIG layout (mig-parted's `nvidia-mig-manager`).
    pub const MIG_LAYOUTS: &str = "mig-layouts";
    /// What keeps NVIDIA's CDI spec current: `nvidia-ctk`, and no second writer.
    pub const NVIDIA_CDI: &str = "nvidia-cdi";
}

/// A failure's text without a trailing full stop, so a hint can follow it.
fn clause(text: &str) -> String {
    text.trim().trim_end_matches('.').to_owned()
}

/// What to install on a host without an NVIDIA driver: bcd installs no driver itself.
const INSTALL_DRIVER: &str = "install the NVIDIA driver (on Debian the nvidia-driver package, from non-free; elsewhere NVIDIA's packages for the GPUs' driver branch)";

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `nvml`: `ok` when the probe answered (driver version and GPU count), `warn` without
/// `nvidia-smi`, `fail` for any other failure, with the hint for its text.
pub(crate) fn nvml(probe: &Result<Probe, ProbeFailure>) -> Check {
    match probe {
        Ok(p) => Check::new(
            Status::Ok,
            name::NVML,
            format!(
                "driver {}, {}",
                p.driver_version,
                plural(p.gpu_count, "GPU", "GPUs")
            ),
        ),
        Err(ProbeFailure::Run(RunError::NoDriver)) => Check::new(
            Status::Warn,
            name::NVML,
            format!("nvidia-smi not found, so this host has no NVIDIA driver: {INSTALL_DRIVER} if this node should serve GPUs"),
        ),
        Err(e) => {
            let text = e.to_string();
            Check::new(
                Status::Fail,
                name::NVML,
                format!("{}; {}", clause(&text), hint_or_default(&text)),
            )
        }
    }
}

/// `hardware`, once the collector ran (it never fails; what it could not read is left out):
/// how many GPUs the inventory lists and its hash; `ok`, or `warn` naming each GPU the driver
/// or `nvidia-smi` reports that the inventory leaves out (a UUID that names no GPU), since
/// bcd then neither judges nor hands it out.
pub fn hardware(collection: &Collection) -> Check {
    let inv = &collection.inventory;
    let source = if collection.snapshot.is_some() {
        ""
    } else {
        " (from procfs and sysfs only: nvidia-smi did not answer)"
    };
    let mut message = format!(
        "{} in the inventory, hashed {}{source}",
        plural(inv.gpu.gpus.len(), "GPU", "GPUs"),
        short_hash(&inv.hash)
    );
    if collection.left_out.is_empty() {
        return Check::new(Status::Ok, name::HARDWARE, message);
    }
    for sentence in &collection.left_out {
        message.push_str("; but ");
        message.push_str(sentence);
    }
    Check::new(Status::Warn, name::HARDWARE, message)
}

/// `sha256:` and the first 16 hex digits: enough to compare two nodes by eye.
fn short_hash(hash: &str) -> String {
    let end = hash
        .char_indices()
        .nth("sha256:".len() + 16)
        .map_or(hash.len(), |(i, _)| i);
    format!("{}…", &hash[..end])
}

/// `gpu`, one per GPU of the inventory (passed-through ones aside): its UUID, name, busy %,
/// temperature, power draw of its limit, memory used of its total (what `nvidia-smi -q -x`
/// said, where it answered), then its verdict ([`crate::health::verdict::judge`], as `bcd
/// status` and `bcd diag` read it): `ok` healthy, `warn` degraded, `fail` unhealthy or
/// unknown, with each reason and its action.
pub fn gpu(g: &Gpu, xml: Option<&XmlGpu>, verdict: &Verdict) -> Check {
    let name = xml
        .and_then(|x| x.product_name.clone())
        .or_else(|| g.name.clone())
        .unwrap_or_else(|| "unknown model".into());
    use crate::term::units;
    let mut parts = vec![units::gpu(Some(g.index), &g.uuid), name];
    if let Some(x) = xml {
        if let Some(busy) = x.utilization_gpu_pct {
            parts.push(format!("busy {}", units::percent(busy)));
        }
        if let Some(t) = x.temperature_c {
            parts.push(units::temperature(t));
        }
        if let Some(p) = units::power_of(x.power_draw_w, x.power_limit_w) {
            parts.push(p);
        }
    }
    match (xml.and_then(|x| x.memory_used_mib), g.memory_total_mib) {
        (Some(u), Some(t)) => parts.push(format!(
            "{} used",
            units::memory_of(Some(u), Some(t)).unwrap_or_default()
        )),
        (None, Some(t)) => parts.push(units::memory(t)),
        _ => {}
    }
    let mut message = parts.join(", ");
    let status = match verdict.health {
        HealthState::Healthy => Status::Ok,
        HealthState::Degraded => Status::Warn,
        HealthState::Unhealthy | HealthState::Unknown => Status::Fail,
    };
    if !verdict.reasons.is_empty() {
        message.push_str(&format!(
            "; {}: {}",
            verdict.health.name(),
            verdict
                .reasons
                .iter()
                .map(|r| format!("{} -> {}", r.message, r.action))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    Check::new(status, name::GPU, message)
}

/// `mig-mode`, one per GPU whose MIG mode changes at its next reset: `warn`, since the GPU
/// keeps its present mode (and its devices) until then. No line for the others.
pub(crate) fn mig_mode(gpus: &[XmlGpu]) -> Vec<Check> {
    gpus.iter()
        .filter_map(|g| {
            let (now, next) = (g.mig_mode_current?, g.mig_mode_pending?);
            (now != next).then(|| {
                let id = g
                    .uuid
                    .clone()
                    .or_else(|| g.pci_bus_id.as_ref().map(crate::term::units::bus_id))
                    .unwrap_or_else(|| "a GPU without UUID".into());
                Check::new(
                    Status::Warn,
                    name::MIG_MODE,
                    format!(
                        "MIG mode of {id} turns {} at the next GPU reset: drain it and reset it (bcd gpu reset {id}) or reboot",
                        if next { "on" } else { "off" }
                    ),
                )
            })
        })
        .collect()
}

/// `gpus`: `fail` when the snapshot (`nvidia-smi -q -x`) failed, with the hint for its text.
/// No line when it answered, or when there is no `nvidia-smi` at all (`nvml` warns then).
pub(crate) fn gpus(error: Option<&SnapshotError>) -> Option<Check> {
    let e = error.filter(|e| !e.is_no_driver())?;
    let text = e.to_string();
    Some(Check::new(
        Status::Fail,
        name::GPUS,
        format!(
            "the GPU snapshot failed: {}; {}",
            clause(&text),
            hint_or_default(&text)
        ),
    ))
}

/// `gpu-host`, only under WSL 2: `warn` with what works there and what does not.
pub(crate) fn gpu_host() -> Check {
    Check::new(
        Status::Warn,
        name::GPU_HOST,
        "WSL 2's paravirtual GPU (/dev/dxg without /dev/nvidiactl): CUDA containers work (CDI: nvidia-ctk cdi generate --mode=wsl), but there is no VFIO passthrough, gpu.reset, MIG or DCGM here, so the host checks are skipped",
    )
}

/// `nouveau`: `fail` when `/proc/modules` lists it, `warn` when `/proc/modules` cannot be
/// read, else `ok`.
pub(crate) fn nouveau(modules: Result<&str, &io::Error>) -> Check {
    match modules {
        Ok(text) if text.lines().any(|l| l.split_whitespace().next() == Some("nouveau")) => {
            Check::new(
                Status::Fail,
                name::NOUVEAU,
                "the nouveau module is loaded and keeps the NVIDIA driver off the GPUs: blacklist it (blacklist nouveau and options nouveau modeset=0 in /etc/modprobe.d), rebuild the initramfs (update-initramfs -u) and reboot",
            )
        }
        Ok(_) => Check::new(Status::Ok, name::NOUVEAU, "the nouveau module is not loaded"),
        Err(e) => Check::new(
            Status::Warn,
            name::NOUVEAU,
            format!("cannot read /proc/modules ({e}), so whether nouveau is loaded is unknown: run lsmod | grep nouveau"),
        ),
    }
}

/// What `nvidia-smi` made of the GPUs, for `gpu-bus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SmiView {
    /// The snapshot answered, listing this many GPUs.
    Answered(usize),
    /// There is no `nvidia-smi`.
    NoDriver,
    /// It failed (the `gpus` check says how).
    Failed,
}

impl SmiView {
    /// The view a collection gives.
    pub(crate) fn of(collection: &Collection) -> Self {
        match (&collection.snapshot, &collection.snapshot_error) {
            (Some(s), _) => SmiView::Answered(s.xml.gpus.len()),
            (None, Some(e)) if e.is_no_driver() => SmiView::NoDriver,
            (None, _) => SmiView::Failed,
        }
    }
}

/// `gpu-bus`: the NVIDIA display functions in `/sys/bus/pci/devices` against the GPUs
/// `nvidia-smi` lists.
///
/// - `fail`: more GPUs bound to `nvidia` than `nvidia-smi` lists (one fell off the bus or did
///   not initialize).
/// - `warn`: GPUs on the bus but no NVIDIA driver answers, or GPUs with no driver bound (or
///   bound to another driver than `nvidia` and `vfio-pci`).
/// - `ok`: how many GPUs, how many on `nvidia`, how many on `vfio-pci`; also when the bus has
///   no NVIDIA GPU.
pub(crate) fn gpu_bus(pci: &[PciFunction], smi: SmiView) -> Check {
    let gpus: Vec<&PciFunction> = pci.iter().filter(|f| f.is_nvidia_gpu()).collect();
    let on = |d: &str| {
        gpus.iter()
            .filter(|f| f.driver.as_deref() == Some(d))
            .count()
    };
    let (nvidia, vfio) = (on("nvidia"), on("vfio-pci"));
    let unbound = gpus.iter().filter(|f| f.driver.is_none()).count();
    let elsewhere = gpus.len() - nvidia - vfio - unbound;
    if gpus.is_empty() {
        return Check::new(Status::Ok, name::GPU_BUS, "no NVIDIA GPU on the PCI bus");
    }
    let on_bus = format!(
        "{} on the PCI bus",
        plural(gpus.len(), "NVIDIA GPU", "NVIDIA GPUs")
    );
    if let SmiView::Answered(listed) = smi {
        if nvidia > listed {
            return Check::new(
                Status::Fail,
                name::GPU_BUS,
                format!(
                    "{} bound to nvidia but nvidia-smi lists {listed}: a GPU fell off the bus or did not initialize; look in dmesg for Xid 79 or RmInitAdapter failed, then reset the GPU or reboot",
                    plural(nvidia, "GPU is", "GPUs are")
                ),
            );
        }
    }
    if nvidia > 0 && matches!(smi, SmiView::Answered(_)) && unbound + elsewhere == 0 {
        let vfio_note = if vfio > 0 {
            format!(", {vfio} on vfio-pci (passthrough)")
        } else {
            String::new()
        };
        return Check::new(
            Status::Ok,
            name::GPU_BUS,
            format!("{on_bus}: {nvidia} on nvidia{vfio_note}"),
        );
    }
    if nvidia == 0 && unbound + elsewhere == 0 {
        // Every GPU is on vfio-pci: a passthrough-only host needs no driver answering.
        return Check::new(
            Status::Ok,
            name::GPU_BUS,
            format!("{on_bus}: {vfio} on vfio-pci (passthrough)"),
        );
    }
    let mut found = Vec::new();
    if nvidia > 0 {
        found.push(format!("{nvidia} on nvidia"));
    }
    if vfio > 0 {
        found.push(format!("{vfio} on vfio-pci"));
    }
    if unbound > 0 {
        found.push(format!("{unbound} with no driver bound"));
    }
    if elsewhere > 0 {
        found.push(format!("{elsewhere} on another driver"));
    }
    let found = found.join(", ");
    let todo = match smi {
        SmiView::NoDriver => format!("no NVIDIA driver answers: {INSTALL_DRIVER}, and reboot"),
        SmiView::Failed => {
            "nvidia-smi does not answer: fix what the gpus check says, then run doctor again"
                .to_owned()
        }
        SmiView::Answered(_) => {
            "some GPUs have no usable driver: check dmesg for why nvidia did not bind them (nouveau, a driver_override) and rebind or reboot".to_owned()
        }
    };
    Check::new(
        Status::Warn,
        name::GPU_BUS,
        format!("{on_bus} ({found}) but {todo}"),
    )
}

/// GPUs on this node for `gpu-binding`: the more of the PCI bus's and `nvidia-smi`'s count.
pub(crate) fn gpu_count(pci: &[PciFunction], smi: SmiView) -> usize {
    let on_bus = pci.iter().filter(|f| f.is_nvidia_gpu()).count();
    match smi {
        SmiView::Answered(n) => n.max(on_bus),
        _ => on_bus,
    }
}

/// `persistence`: `warn` naming the GPUs whose persistence mode is off, `ok` when every GPU
/// that reports it has it on; no line when none reports it (WSL says `N/A`).
pub(crate) fn persistence(gpus: &[XmlGpu]) -> Option<Check> {
    let reported: Vec<&XmlGpu> = gpus
        .iter()
        .filter(|g| g.persistence_mode.is_some())
        .collect();
    if reported.is_empty() {
        return None;
    }
    let off: Vec<String> = reported
        .iter()
        .filter(|g| g.persistence_mode == Some(false))
        .map(|g| {
            g.uuid
                .clone()
                .or_else(|| g.pci_bus_id.as_ref().map(crate::term::units::bus_id))
                .unwrap_or_else(|| "a GPU without UUID".into())
        })
        .collect();
    Some(if off.is_empty() {
        Check::new(
            Status::Ok,
            name::PERSISTENCE,
            match reported.len() {
                1 => "persistence mode is on for the GPU".to_owned(),
                n => format!("persistence mode is on for all {n} GPUs"),
            },
        )
    } else {
        Check::new(
            Status::Warn,
            name::PERSISTENCE,
            format!(
                "persistence mode is off on {}, so every first CUDA call re-initializes the GPU: run nvidia-persistenced (systemctl enable --now nvidia-persistenced)",
                off.join(", ")
            ),
        )
    })
}

/// mig-parted's unit, which applies layouts on its own.
pub const MIG_MANAGER_UNIT: &str = "nvidia-mig-manager.service";
/// The container toolkit's unit that regenerates NVIDIA's CDI spec on its own.
pub const CDI_REFRESH_UNIT: &str = "nvidia-cdi-refresh.service";

/// `mig-layouts`, on a host with a MIG-capable GPU: `fail` while mig-parted's
/// `nvidia-mig-manager` is active (two owners of one layout), `ok` when it is not; nothing
/// when systemd could not be asked.
pub(crate) fn mig_layouts(state: &UnitState) -> Option<Check> {
    let UnitState::Is(s) = state else {
        return None;
    };
    Some(
        if crate::sys::systemd::FABRIC_MANAGER_RUNNING.contains(&s.as_str()) {
            Check::new(
            Status::Fail,
            name::MIG_LAYOUTS,
            format!("{MIG_MANAGER_UNIT} is {s}: mig-parted and bcd would both own the MIG layout; stop it (systemctl disable --now {MIG_MANAGER_UNIT}) and apply layouts with bcd mig apply"),
        )
        } else {
            Check::new(
                Status::Ok,
                name::MIG_LAYOUTS,
                format!("no other owner of the MIG layout ({MIG_MANAGER_UNIT} is {s})"),
            )
        },
    )
}

/// `nvidia-cdi`, on a host with a MIG-capable GPU (where a layout change needs NVIDIA's spec
/// regenerated): `warn` without `nvidia-ctk` beside `nvidia-smi`, `warn` while the toolkit's
/// own `nvidia-cdi-refresh` is active (a second writer of the spec bcd node
/// --nvidia-cdi-spec keeps), else `ok`.
pub(crate) fn nvidia_cdi(ctk: Option<&std::path::Path>, refresh: &UnitState) -> Check {
    let Some(ctk) = ctk else {
        return Check::new(
            Status::Warn,
            name::NVIDIA_CDI,
            "nvidia-ctk is not installed beside nvidia-smi: NVIDIA's CDI spec cannot be regenerated after a MIG layout change, so holds of new MIG devices grant nothing (install nvidia-container-toolkit; bcd node --nvidia-cdi-spec keeps the spec current)",
        );
    };
    if let UnitState::Is(s) = refresh {
        if crate::sys::systemd::FABRIC_MANAGER_RUNNING.contains(&s.as_str()) {
            return Check::new(
                Status::Warn,
                name::NVIDIA_CDI,
                format!("{CDI_REFRESH_UNIT} is {s}: it and bcd node --nvidia-cdi-spec would both write NVIDIA's CDI spec; keep one (systemctl disable --now nvidia-cdi-refresh.path {CDI_REFRESH_UNIT})"),
            );
        }
    }
    Check::new(
        Status::Ok,
        name::NVIDIA_CDI,
        format!(
            "{} can regenerate NVIDIA's CDI spec (bcd node --nvidia-cdi-spec)",
            ctk.display()
        ),
    )
}

/// `fabric-manager`, only with NVSwitches on the bus: `ok` when `nvidia-fabricmanager` is
/// active (or reloading), `warn` while it is still starting or when systemd could not be
/// asked, `fail` in any other state (without it CUDA fails on every GPU).
pub(crate) fn fabric_manager(switches: usize, state: &UnitState) -> Check {
    let on_bus = format!(
        "{} on the PCI bus",
        plural(switches, "NVSwitch", "NVSwitches")
    );
    let unit = "nvidia-fabricmanager";
    match state {
        UnitState::Is(s) if matches!(s.as_str(), "active" | "reloading" | "refreshing") => {
            Check::new(
                Status::Ok,
                name::FABRIC_MANAGER,
                format!("{on_bus} and {unit} is {s}"),
            )
        }
        UnitState::Is(s) if s == "activating" => Check::new(
            Status::Warn,
            name::FABRIC_MANAGER,
            format!("{on_bus} and {unit} is still starting: run doctor again in a minute, and see journalctl -u {unit} if it stays so"),
        ),
        UnitState::Is(s) => Check::new(
            Status::Fail,
            name::FABRIC_MANAGER,
            format!("{on_bus} but {unit} is {s}, and without it CUDA fails on every GPU: install it for this driver branch and start it (systemctl enable --now {unit})"),
        ),
        UnitState::Unknown(why) => Check::new(
            Status::Warn,
            name::FABRIC_MANAGER,
            format!("{on_bus} but whether {unit} runs could not be told ({}); without it CUDA fails on every GPU: check systemctl status {unit}", clause(why)),
        ),
    }
}

/// `driver-version`: `fail` when the loaded kernel module (`/proc/driver/nvidia/version`) and
/// `nvidia-smi` report different versions, `ok` when they agree; no line unless both are known.
pub(crate) fn driver_version(module: Option<&str>, smi: Option<&str>) -> Option<Check> {
    let (module, smi) = (module?, smi?);
    Some(if module == smi {
        Check::new(
            Status::Ok,
            name::DRIVER_VERSION,
            format!("the kernel module and nvidia-smi both report {module}"),
        )
    } else {
        Check::new(
            Status::Fail,
            name::DRIVER_VERSION,
            format!("the loaded kernel module is {module} (/proc/driver/nvidia/version) but nvidia-smi reports {smi}: the driver was upgraded without reloading the module; reboot, or unload and reload the nvidia modules"),
        )
    })
}

fn group_name(gid: u32) -> String {
    nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))
        .ok()
        .flatten()
        .map_or_else(|| format!("gid {gid}"), |g| g.name)
}

/// `kmsg`: `ok` when `/dev/kmsg` opens for reading; otherwise `warn`, since XIDs (a GPU
/// falling off the bus, double-bit ECC) would be missed, naming what fixes it:
///
/// - `EPERM`: the kernel refuses its log to users without `CAP_SYSLOG` when
///   `kernel.dmesg_restrict` is 1 (Debian's default), whatever the node's mode; the fix is
///   `CAP_SYSLOG` for bcd, or `dmesg_restrict=0`.
/// - `EACCES`: the node's mode; the fix is its group.
/// - no node (a container without `/dev/kmsg`).
///
/// The check speaks for the user running doctor: run it as the `bcd` user to see what the
/// service sees (root always passes).
pub fn kmsg(opened: io::Result<KmsgNode>, restrict: Option<bool>) -> Check {
    let missed = "XIDs from the NVIDIA driver would be missed";
    let e = match opened {
        Ok(_) => {
            return Check::new(
                Status::Ok,
                name::KMSG,
                format!(
                "the kernel log /dev/kmsg is readable by this user (uid {}), so XIDs will be seen",
                nix::unistd::geteuid()
            ),
            )
        }
        Err(e) => e,
    };
    let (node, errno) = KmsgDenied::parts(&e);
    let message = match (errno, e.kind()) {
        (Some(libc::EPERM), _) => {
            let setting = match restrict {
                Some(true) => "kernel.dmesg_restrict is 1",
                Some(false) => "a security module refuses it",
                None => "kernel.dmesg_restrict is probably 1",
            };
            format!("the kernel refuses /dev/kmsg to this user ({setting}), so {missed}: give bcd CAP_SYSLOG (AmbientCapabilities=CAP_SYSLOG and CapabilityBoundingSet=CAP_SYSLOG in bcd.service) or set the sysctl kernel.dmesg_restrict=0")
        }
        (Some(libc::EACCES), _) | (_, io::ErrorKind::PermissionDenied) => {
            let (mode, group) = node.map_or_else(
                || ("unknown".to_owned(), "its group".to_owned()),
                |n| (format!("{:04o}", n.mode), group_name(n.gid)),
            );
            format!("/dev/kmsg (mode {mode}, group {group}) is not readable by this user, so {missed}: add bcd to the group {group} (SupplementaryGroups={group} in bcd.service) or give it CAP_SYSLOG")
        }
        (_, io::ErrorKind::NotFound) => format!(
            "there is no /dev/kmsg, so {missed}: run bcd where the kernel log is available (a container needs /dev/kmsg passed in)"
        ),
        _ => format!("/dev/kmsg cannot be opened ({e}), so {missed}: check its mode and kernel.dmesg_restrict, and give bcd CAP_SYSLOG"),
    };
    Check::new(Status::Warn, name::KMSG, message)
}

/// `xid-record`, only when this boot's `faults.json` cannot be read: `warn`, since the `gpu`
/// lines then judge without the XIDs it holds.
pub(crate) fn xid_record(e: &crate::health::faults::FaultsError) -> Check {
    Check::new(
        Status::Warn,
        name::XID_RECORD,
        format!("{e}: the gpu lines judge without this boot's XIDs"),
    )
}

/// `helper`: `ok` with the helper's version when it answered `Ping`; otherwise the error's
/// sentence, `warn` when nothing listens (no helper installed or started), `fail` when
/// something answered wrongly or not in time.
pub(crate) fn helper(location: &str, ping: &Result<String, PingError>) -> Check {
    match ping {
        Ok(version) => Check::new(
            Status::Ok,
            name::HELPER,
            format!("bcd-helper {version} answers at {location}"),
        ),
        Err(e) => Check::new(e.status(), name::HELPER, e.to_string()),
    }
}

/// `gpu-binding`, only with GPUs: `warn` when the helper did not answer or cannot act on
/// devices (bcd runs as the unprivileged `bcd` user, so the privileged steps would fail), `ok`
/// when it answered able to.
pub(crate) fn gpu_binding(gpus: usize, ping: &Result<String, PingError>) -> Option<Check> {
    if gpus == 0 {
        return None;
    }
    let gpus = plural(gpus, "GPU", "GPUs");
    Some(match ping {
        Ok(_) => Check::new(
            Status::Ok,
            name::GPU_BINDING,
            format!("{gpus}, and bcd-helper answers for their privileged steps"),
        ),
        Err(PingError::NoDeviceOperations { .. }) => Check::new(
            Status::Warn,
            name::GPU_BINDING,
            format!("{gpus}, but bcd-helper cannot run operations on devices (the helper line says why): gpu.reset, persistence changes and VFIO passthrough will fail until it can"),
        ),
        Err(_) => Check::new(
            Status::Warn,
            name::GPU_BINDING,
            format!("{gpus}, but bcd runs as an unprivileged user and bcd-helper does not answer: gpu.reset, persistence changes and VFIO passthrough will fail until bcd-helper.socket is active (systemctl enable --now bcd-helper.socket)"),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smi::xml::RowRemap;

    fn function(addr: &str, class: u32, driver: Option<&str>) -> PciFunction {
        PciFunction {
            address: addr.parse().unwrap(),
            vendor: Some(crate::sys::pci::NVIDIA_VENDOR),
            class: Some(class),
            driver: driver.map(str::to_owned),
            numa_node: None,
        }
    }

    fn healthy() -> XmlGpu {
        XmlGpu {
            uuid: Some("GPU-00000000-0000-0000-0000-000000000001".into()),
            product_name: Some("NVIDIA H100 80GB HBM3".into()),
            utilization_gpu_pct: Some(12),
            temperature_c: Some(41),
            power_draw_w: Some(71.4),
            power_limit_w: Some(700.0),
            memory_used_mib: Some(1),
            memory_total_mib: Some(81559),
            persistence_mode: Some(true),
            mig_mode_current: Some(false),
            mig_mode_pending: Some(false),
            row_remap: Some(RowRemap {
                pending: Some(false),
                failure: Some(false),
                ..RowRemap::default()
            }),
            ..XmlGpu::default()
        }
    }

    #[test]
    fn nvml_each_status() {
        let ok = nvml(&Ok(Probe {
            driver_version: "570.133.20".into(),
            gpu_count: 8,
        }));
        assert_eq!(
            (ok.status, ok.message.as_str()),
            (Status::Ok, "driver 570.133.20, 8 GPUs")
        );
        let warn = nvml(&Err(ProbeFailure::Run(RunError::NoDriver)));
        assert_eq!(warn.status, Status::Warn);
        assert!(warn.message.contains(INSTALL_DRIVER), "{}", warn.message);
        let fail = nvml(&Err(ProbeFailure::Run(RunError::Failed {
            query: "--query-gpu=driver_version --format=csv,noheader".into(),
            exit_code: Some(18),
            message: "Failed to initialize NVML: Driver/library version mismatch".into(),
        })));
        assert_eq!(fail.status, Status::Fail);
        assert!(
            fail.message.contains("reload the nvidia modules"),
            "{}",
            fail.message
        );
        let unknown = nvml(&Err(ProbeFailure::Parse("garbage".into())));
        assert!(
            unknown.message.ends_with(crate::smi::hint::NO_HINT),
            "{}",
            unknown.message
        );
    }

    fn verdict(health: HealthState, reasons: &[(&str, &str)]) -> Verdict {
        Verdict {
            health,
            reasons: reasons
                .iter()
                .map(|(message, action)| crate::health::verdict::Reason {
                    kind: "Test".into(),
                    message: (*message).into(),
                    action: (*action).into(),
                    state: health,
                })
                .collect(),
        }
    }

    // What broke: doctor judged each GPU by rules of its own (a pending row remap only
    // warned, a driver asking for a reset or a fabric manager that is down passed): its line
    // is the verdict now, with each reason and its action.
    #[test]
    fn the_gpu_line_is_the_verdict() {
        let x = healthy();
        let g = Gpu {
            memory_total_mib: Some(81559),
            ..Gpu::new(0, x.uuid.as_deref().unwrap().parse().unwrap())
        };
        let ok = gpu(&g, Some(&x), &verdict(HealthState::Healthy, &[]));
        assert_eq!(ok.status, Status::Ok);
        assert_eq!(
            ok.message,
            "GPU 0 (GPU-00000000-0000-0000-0000-000000000001), NVIDIA H100 80GB HBM3, busy 12 %, 41 °C, 71 W / 700 W, 1 MiB / 81559 MiB used"
        );
        let c = gpu(
            &g,
            Some(&x),
            &verdict(
                HealthState::Degraded,
                &[("clocks slowed down", "check the cooling")],
            ),
        );
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.message
                .ends_with("MiB used; degraded: clocks slowed down -> check the cooling"),
            "{}",
            c.message
        );
        let two = [("a", "do a"), ("b", "do b")];
        let c = gpu(&g, Some(&x), &verdict(HealthState::Unhealthy, &two));
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.message.ends_with("; unhealthy: a -> do a; b -> do b"),
            "{}",
            c.message
        );
        // Nothing answered for it: unknown fails, from what the inventory knows.
        let c = gpu(
            &g,
            None,
            &verdict(HealthState::Unknown, &[("silent", "check it")]),
        );
        assert_eq!(c.status, Status::Fail);
        assert_eq!(
            c.message,
            "GPU 0 (GPU-00000000-0000-0000-0000-000000000001), unknown model, 81559 MiB; unknown: silent -> check it"
        );
    }

    #[test]
    fn a_pending_mig_mode_change_warns_on_its_own_line() {
        assert!(mig_mode(&[healthy()]).is_empty());
        let mut mig = healthy();
        mig.mig_mode_pending = Some(true);
        let c = mig_mode(&[mig]);
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].status, c[0].name.as_str()),
            (Status::Warn, name::MIG_MODE)
        );
        assert!(
            c[0].message.starts_with(
                "MIG mode of GPU-00000000-0000-0000-0000-000000000001 turns on at the next GPU reset"
            ),
            "{}",
            c[0].message
        );
    }

    #[test]
    fn gpus_carries_each_hint() {
        let failed = |message: &str| {
            SnapshotError::Run(RunError::Failed {
                query: "-q -x".into(),
                exit_code: Some(9),
                message: message.into(),
            })
        };
        let cases = [
            ("Failed to initialize NVML: Driver/library version mismatch", "unload and reload the nvidia modules"),
            ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.", "modprobe nvidia"),
            ("No devices were found", "lspci -d 10de:"),
            ("Unable to determine the device handle: Unknown Error", crate::smi::hint::NO_HINT),
        ];
        for (text, hint) in cases {
            let c = gpus(Some(&failed(text))).unwrap();
            assert_eq!(c.status, Status::Fail);
            assert!(c.message.contains(hint), "{text}: {}", c.message);
            assert!(!c.message.contains(".;"), "{}", c.message);
        }
        let hung = SnapshotError::Run(RunError::Timeout {
            query: "-q -x".into(),
            after: std::time::Duration::from_secs(30),
        });
        assert!(gpus(Some(&hung)).unwrap().message.contains("Xid 79 or 119"));
        assert_eq!(gpus(Some(&SnapshotError::Run(RunError::NoDriver))), None);
        assert_eq!(gpus(None), None);
    }

    // What broke: doctor told a host without a driver to "install it (the nvidia-driver
    // unit)", a unit bcd does not have; it names what to install instead.
    #[test]
    fn a_host_without_a_driver_is_told_what_to_install_not_a_unit() {
        let nvml = nvml(&Err(ProbeFailure::Run(RunError::NoDriver)));
        let bus = gpu_bus(
            &[function("0000:18:00.0", 0x030200, None)],
            SmiView::NoDriver,
        );
        for c in [nvml, bus] {
            assert!(!c.message.contains("unit"), "{}", c.message);
            assert!(
                c.message.contains(
                    "install the NVIDIA driver (on Debian the nvidia-driver package, from non-free"
                ),
                "{}",
                c.message
            );
        }
    }

    #[test]
    fn nouveau_each_status() {
        assert_eq!(
            nouveau(Ok("nouveau 3096576 0 - Live 0x0\n")).status,
            Status::Fail
        );
        assert_eq!(
            nouveau(Ok("nouveau_x 1 0 - Live 0x0\nnvidia 1 0 - Live\n")).status,
            Status::Ok
        );
        let e = io::Error::from(io::ErrorKind::PermissionDenied);
        assert_eq!(nouveau(Err(&e)).status, Status::Warn);
    }

    #[test]
    fn gpu_bus_each_status() {
        let two_nvidia = [
            function("0000:18:00.0", 0x030200, Some("nvidia")),
            function("0000:2a:00.0", 0x030200, Some("nvidia")),
        ];
        let c = gpu_bus(&two_nvidia, SmiView::Answered(2));
        assert_eq!(
            (c.status, c.message.as_str()),
            (Status::Ok, "2 NVIDIA GPUs on the PCI bus: 2 on nvidia")
        );
        let c = gpu_bus(&two_nvidia, SmiView::Answered(1));
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.message.starts_with(
                "2 GPUs are bound to nvidia but nvidia-smi lists 1: a GPU fell off the bus"
            ),
            "{}",
            c.message
        );
        let c = gpu_bus(&two_nvidia, SmiView::NoDriver);
        assert_eq!(c.status, Status::Warn);
        assert!(c.message.contains(INSTALL_DRIVER), "{}", c.message);
        let c = gpu_bus(&two_nvidia, SmiView::Failed);
        assert_eq!(c.status, Status::Warn);
        assert!(c.message.contains("gpus check"), "{}", c.message);

        let mixed = [
            function("0000:4a:00.0", 0x030200, Some("nvidia")),
            function("0000:61:00.0", 0x030200, Some("vfio-pci")),
            function("0000:61:00.1", 0x040300, Some("vfio-pci")),
        ];
        let c = gpu_bus(&mixed, SmiView::Answered(1));
        assert_eq!(
            c.message,
            "2 NVIDIA GPUs on the PCI bus: 1 on nvidia, 1 on vfio-pci (passthrough)"
        );
        let c = gpu_bus(&mixed[1..], SmiView::NoDriver);
        assert_eq!(
            (c.status, c.message.as_str()),
            (
                Status::Ok,
                "1 NVIDIA GPU on the PCI bus: 1 on vfio-pci (passthrough)"
            )
        );

        let unbound = [
            function("0000:18:00.0", 0x030200, Some("nvidia")),
            function("0000:41:00.0", 0x030000, None),
            function("0000:c1:00.0", 0x030200, Some("nouveau")),
        ];
        let c = gpu_bus(&unbound, SmiView::Answered(1));
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.message
                .contains("1 with no driver bound, 1 on another driver"),
            "{}",
            c.message
        );

        let c = gpu_bus(
            &[function("0000:05:00.0", 0x068000, None)],
            SmiView::NoDriver,
        );
        assert_eq!(
            (c.status, c.message.as_str()),
            (Status::Ok, "no NVIDIA GPU on the PCI bus")
        );
        assert_eq!(gpu_count(&two_nvidia, SmiView::Answered(3)), 3);
        assert_eq!(gpu_count(&two_nvidia, SmiView::Failed), 2);
    }

    #[test]
    fn persistence_each_status() {
        let mut off = healthy();
        off.persistence_mode = Some(false);
        let c = persistence(&[healthy(), off]).unwrap();
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.message.contains(
                "off on GPU-00000000-0000-0000-0000-000000000001, so every first CUDA call"
            ),
            "{}",
            c.message
        );
        let c = persistence(&[healthy(), healthy()]).unwrap();
        assert_eq!(
            (c.status, c.message.as_str()),
            (Status::Ok, "persistence mode is on for all 2 GPUs")
        );
        assert_eq!(persistence(&[XmlGpu::default()]), None);
    }

    #[test]
    // What broke: mig-parted's own unit and bcd could both apply layouts on one host, and a
    // host without nvidia-ctk kept a stale NVIDIA spec after a layout change, unsaid.
    fn mig_layouts_and_nvidia_cdi_say_the_second_owner_and_the_missing_tool() {
        let is = |s: &str| UnitState::Is(s.into());
        let c = mig_layouts(&is("active")).unwrap();
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.message.contains("nvidia-mig-manager.service is active"),
            "{}",
            c.message
        );
        assert_eq!(mig_layouts(&is("inactive")).unwrap().status, Status::Ok);
        assert!(mig_layouts(&UnitState::Unknown("no systemd".into())).is_none());
        let ctk = std::path::Path::new("/usr/bin/nvidia-ctk");
        assert_eq!(nvidia_cdi(Some(ctk), &is("inactive")).status, Status::Ok);
        let c = nvidia_cdi(None, &is("inactive"));
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.message.starts_with("nvidia-ctk is not installed"),
            "{}",
            c.message
        );
        let c = nvidia_cdi(Some(ctk), &is("active"));
        assert_eq!(c.status, Status::Warn);
        assert!(c.message.contains("would both write"), "{}", c.message);
    }

    #[test]
    fn fabric_manager_each_status() {
        let is = |s: &str| UnitState::Is(s.into());
        assert_eq!(fabric_manager(4, &is("active")).status, Status::Ok);
        assert_eq!(fabric_manager(4, &is("activating")).status, Status::Warn);
        for s in ["inactive", "failed", "unknown", "deactivating"] {
            let c = fabric_manager(4, &is(s));
            assert_eq!(c.status, Status::Fail, "{s}");
            assert!(c
                .message
                .contains("systemctl enable --now nvidia-fabricmanager"));
        }
        let c = fabric_manager(1, &UnitState::Unknown("systemctl not found.".into()));
        assert_eq!(c.status, Status::Warn);
        assert!(c.message.starts_with("1 NVSwitch on the PCI bus but whether nvidia-fabricmanager runs could not be told (systemctl not found)"), "{}", c.message);
        let pci = [
            function("0000:05:00.0", 0x068000, None),
            function("0000:18:00.0", 0x030200, Some("nvidia")),
        ];
        assert_eq!(pci.iter().filter(|f| f.is_nvswitch()).count(), 1);
        // The line fails exactly when the verdict takes the GPUs out for it.
        let states = [
            "active",
            "reloading",
            "refreshing",
            "activating",
            "inactive",
            "failed",
        ];
        for s in states
            .map(is)
            .into_iter()
            .chain([UnitState::Unknown("x".into())])
        {
            assert_eq!(
                fabric_manager(4, &s).status == Status::Fail,
                crate::sys::systemd::FabricManager {
                    switches: 4,
                    state: Some(s.clone()),
                }
                .down()
                .is_some(),
                "{s:?}"
            );
        }
    }

    #[test]
    fn driver_version_each_status() {
        assert_eq!(
            driver_version(Some("570.133.20"), Some("570.133.20"))
                .unwrap()
                .status,
            Status::Ok
        );
        let c = driver_version(Some("570.133.20"), Some("570.172.08")).unwrap();
        assert_eq!(c.status, Status::Fail);
        assert!(c.message.contains("kernel module is 570.133.20"));
        assert_eq!(driver_version(None, Some("1")), None);
        assert_eq!(driver_version(Some("1"), None), None);
    }

    #[test]
    fn kmsg_names_the_fix_for_each_refusal() {
        let node = KmsgNode {
            mode: 0o640,
            gid: 0,
        };
        let ok = kmsg(Ok(node), Some(true));
        assert_eq!(ok.status, Status::Ok);
        let eperm = KmsgDenied::attach(io::Error::from_raw_os_error(libc::EPERM), node);
        let c = kmsg(Err(eperm), Some(true));
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.message.contains("kernel.dmesg_restrict is 1") && c.message.contains("CAP_SYSLOG"),
            "{}",
            c.message
        );
        let eacces = KmsgDenied::attach(io::Error::from_raw_os_error(libc::EACCES), node);
        let c = kmsg(Err(eacces), None);
        assert!(
            c.message.contains("mode 0640, group ") && c.message.contains("SupplementaryGroups="),
            "{}",
            c.message
        );
        let c = kmsg(Err(io::Error::from_raw_os_error(libc::ENOENT)), None);
        assert!(
            c.message.starts_with("there is no /dev/kmsg"),
            "{}",
            c.message
        );
        assert!(c
            .message
            .contains("XIDs from the NVIDIA driver would be missed"));
    }

    #[test]
    fn gpu_binding_each_status() {
        let none = || {
            Err(PingError::NoSocket {
                path: "/run/bcd-helper/helper.sock".into(),
            })
        };
        assert_eq!(gpu_binding(0, &none()), None);
        assert_eq!(
            gpu_binding(2, &Ok("0.1.0".into())).unwrap().status,
            Status::Ok
        );
        let c = gpu_binding(1, &none()).unwrap();
        assert_eq!(c.status, Status::Warn);
        assert!(c
            .message
            .starts_with("1 GPU, but bcd runs as an unprivileged user"));
        let locked_out = Err(PingError::NoDeviceOperations {
            path: "/run/bcd-helper/helper.sock".into(),
            version: "0.1.0".into(),
            why: "no operation on a device runs: the lock folder ...".into(),
        });
        let c = gpu_binding(1, &locked_out).unwrap();
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.message.contains("cannot run operations on devices"),
            "{}",
            c.message
        );
        assert_eq!(
            helper("/run/bcd-helper/helper.sock", &locked_out).status,
            Status::Fail
        );
    }

    #[test]
    fn short_hashes() {
        assert_eq!(
            short_hash("sha256:0123456789abcdef0123"),
            "sha256:0123456789abcdef…"
        );
        assert_eq!(short_hash("x"), "x…");
    }
}
