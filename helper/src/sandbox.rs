//! The helper's sandbox: after its socket is bound, the helper keeps only the capabilities its
//! operations need, sets `no_new_privs`, and confines its file access with Landlock to what
//! those operations touch. Both carry over to every program it runs (`nvidia-smi`, `virsh`).
//!
//! **Landlock ABI pinned: [`PINNED_ABI`] = V5** (Linux 6.10), the first with
//! `LANDLOCK_ACCESS_FS_IOCTL_DEV`; handled with best effort, so an older kernel enforces the
//! subset it knows ("partial") and a kernel without Landlock runs unconfined ("none: ...", a
//! warning, never an error). Everything in `AccessFs::from_all(V5)` is handled (denied unless
//! a rule below allows it); network and scoping rules are not used: `virsh` talks to libvirt
//! over a Unix socket, which V4's TCP rules do not cover, and pathname Unix sockets are only
//! handled from ABI V9.
//!
//! What is allowed, line by line ([`SYSTEM_RULES`] plus the caller's [`SandboxPaths`]):
//!
//! | path | allowed | why |
//! | --- | --- | --- |
//! | `SandboxPaths::exec` and their interpreters | execute, read | `nvidia-smi` and `virsh` themselves, and the dynamic loader each names (`PT_INTERP`; for a `#!` script, its interpreter and that one's loader): the kernel opens those for execution, nothing else is ever executed |
//! | `/usr/lib`, `/lib`, `/usr/lib64`, `/lib64` | read | the libraries those programs load (`libnvidia-ml`, `libvirt`, libc): mapping a library executable is not an execution Landlock checks |
//! | `/etc/ld.so.cache` | read | the loader's index of libraries |
//! | `/etc/nsswitch.conf`, `/etc/passwd`, `/etc/group` | read | the C library's user lookups (`virsh` looks up its home folder) |
//! | `/etc/localtime` | read | time stamps in messages |
//! | `/etc/libvirt` | read | `virsh`'s client configuration (`libvirt.conf`: URI aliases) |
//! | `/proc` | read | `/proc/self` for the programs run, `/proc/driver/nvidia` for `nvidia-smi` |
//! | `/sys` | read | `nvidia-smi` reads PCI, NUMA and module attributes across sysfs |
//! | `/dev/null` | read, write | the standard input of every child |
//! | `SandboxPaths::write_files` | write (and truncate) those files only | each NVIDIA GPU's (and GPU audio function's) `driver_override`, the `bind`/`unbind` of the drivers they move between, `drivers_probe`: no other device's sysfs file |
//! | `SandboxPaths::read_write` | read, write, create, remove (no execute, no device ioctls) | the root-only folder save images are copied to |
//! | `SandboxPaths::lock_dirs` | read and create files (no write, no remove) | the per-device lock files, opened read-only to `flock` them (see [`crate::lockfile`]) |
//! | `SandboxPaths::read` | read | e.g. the save folder (checked, never written) |
//! | `SandboxPaths::devices` | read, write, device ioctls | `/dev/nvidia*` (and `/dev/dxg` on WSL 2 when the CDI spec is configured): `nvidia-smi` breaks without ioctls on them (V5+) |
//! | with `--nvidia-cdi-spec FILE`: `--nvidia-ctk`, FILE's folder, [`NVIDIA_CTK_READS`] | execute; read and write; read | `nvidia-ctk cdi generate` writes the spec in its folder (a temporary file renamed into place) and reads the driver's files it lists |
//!
//! Everything else is denied: no other file can be read, written or executed by the helper or
//! the programs it runs. Paths that do not exist are skipped (logged at debug). There is no
//! rule for the audit log's folder (the log is opened before the sandbox, and appending to an
//! open file needs none, so no child can truncate or remove it) nor for `/run/libvirt`
//! (connecting to a Unix socket is not a file access Landlock V5 governs).
//!
//! Where the kernel cannot enforce any of it, the helper answers only `Ping` unless root
//! started it with `--allow-unconfined` (see [`ping_only`]).
//!
//! This module must never widen access after [`enforce`], never be called before the socket
//! is bound (binding creates the socket file, which the rules do not allow), and never be
//! called once a second thread runs: capabilities, `no_new_privs` and Landlock bind the calling
//! thread and the threads and processes it starts afterwards, not threads already running (the
//! kernel's all-threads flag needs ABI V8). So: bind the socket, call [`enforce`], then start
//! the async runtime.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use caps::{CapSet, Capability, CapsHashSet};
use landlock::{
    Access, AccessFs, BitFlags, CompatLevel, Compatible, LandlockStatus, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, ABI,
};

/// The Landlock ABI whose access rights are handled (see the module's documentation).
pub const PINNED_ABI: ABI = ABI::V5;

/// The capabilities the helper keeps, each with the operation that needs it. All others are
/// removed from the effective, permitted, inheritable and bounding sets, and the ambient set is
/// cleared; since the bounding set and `no_new_privs` limit what an `exec` can grant, the
/// programs the helper runs (as root) get these and no more.
///
/// Not kept, and why none is needed: writing sysfs `driver_override`, `unbind`, `bind` and
/// `drivers_probe` (root-owned files: root writes them as their owner), connecting to libvirt's
/// socket (root-owned; libvirt checks the peer's uid), killing a child's process group (same
/// uid), creating `/dev/nvidia*` (`CAP_MKNOD`: the driver's packaging creates them at boot).
pub const KEPT_CAPABILITIES: &[(Capability, &str)] = &[
    (
        Capability::CAP_SYS_ADMIN,
        "nvidia-smi -pm and --gpu-reset: NVML refuses them without it; reading a GPU's full PCI config space",
    ),
    (
        Capability::CAP_DAC_OVERRIDE,
        "opening files root does not own: save images and folders owned by libvirt's users, device nodes with group-only modes",
    ),
];

/// What a rule allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allow {
    /// Execute and read (programs, libraries).
    Exec,
    /// Read files and list folders.
    Read,
    /// Read, write, truncate, create and remove files and folders; no execute, no ioctls.
    ReadWrite,
    /// Read and write device nodes, and their ioctls (V5+).
    Device,
    /// Write (and truncate, as `>` does) one file.
    WriteFile,
    /// Read and create files in a folder; nothing written, nothing removed.
    LockFiles,
}

impl Allow {
    /// The Landlock access rights for this rule under `abi`.
    pub fn access(self, abi: ABI) -> BitFlags<AccessFs> {
        let wanted = match self {
            Allow::Exec => AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir,
            Allow::Read => AccessFs::ReadFile | AccessFs::ReadDir,
            Allow::ReadWrite => {
                AccessFs::ReadFile
                    | AccessFs::ReadDir
                    | AccessFs::WriteFile
                    | AccessFs::Truncate
                    | AccessFs::MakeReg
                    | AccessFs::MakeDir
                    | AccessFs::RemoveFile
                    | AccessFs::RemoveDir
            }
            Allow::Device => {
                AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::ReadDir | AccessFs::IoctlDev
            }
            Allow::WriteFile => AccessFs::WriteFile | AccessFs::Truncate,
            Allow::LockFiles => AccessFs::ReadFile | AccessFs::MakeReg,
        };
        wanted & AccessFs::from_all(abi)
    }
}

/// The rules every helper needs whatever its configuration: the loader and libraries of the
/// programs it runs, the few system files they read, and `/dev/null`.
pub const SYSTEM_RULES: &[(&str, Allow)] = &[
    ("/usr/lib", Allow::Read),
    ("/lib", Allow::Read),
    ("/usr/lib64", Allow::Read),
    ("/lib64", Allow::Read),
    ("/etc/ld.so.cache", Allow::Read),
    ("/etc/nsswitch.conf", Allow::Read),
    ("/etc/passwd", Allow::Read),
    ("/etc/group", Allow::Read),
    ("/etc/localtime", Allow::Read),
    ("/etc/libvirt", Allow::Read),
    ("/proc", Allow::Read),
    ("/sys", Allow::Read),
    ("/dev/null", Allow::ReadWrite),
];

/// What `nvidia-ctk cdi generate` reads besides the system rules, allowed (read only) when the
/// helper is configured to generate NVIDIA's CDI spec: the driver's binaries and ICD files it
/// lists, its own configuration, the persistence daemon's and fabric manager's sockets it
/// names in the spec, the firmware folder (under `/lib` already on most hosts).
pub const NVIDIA_CTK_READS: &[&str] = &[
    "/usr/bin",
    "/usr/share",
    "/usr/local/lib",
    "/etc/vulkan",
    "/etc/OpenCL",
    "/etc/nvidia-container-runtime",
    "/run/nvidia-persistenced",
    "/run/nvidia-fabricmanager",
    "/lib/firmware",
];

/// What the helper itself touches, from its configuration.
#[derive(Debug, Clone, Default)]
pub struct SandboxPaths {
    /// Programs the helper runs: the configured `nvidia-smi` and `virsh`. Their interpreters
    /// are added by [`enforce`] (see [`interpreters`]).
    pub exec: Vec<PathBuf>,
    /// Single files the helper writes: sysfs attributes (see [`sysfs_write_files`]). A rule
    /// is made on the file the path resolves to, which is what Landlock checks.
    pub write_files: Vec<PathBuf>,
    /// Folders the helper writes in: the save images' staging folder.
    pub read_write: Vec<PathBuf>,
    /// Folders of lock files the helper opens (creating them) but never writes: `--lock-dir`.
    pub lock_dirs: Vec<PathBuf>,
    /// Trees the helper only reads, e.g. the save folder.
    pub read: Vec<PathBuf>,
    /// Device nodes (or folders of them) opened with ioctls: `/dev/nvidia*`, see
    /// [`nvidia_device_nodes`].
    pub devices: Vec<PathBuf>,
}

/// What [`enforce`] achieved, for the helper's start-up log line.
#[derive(Debug, Default)]
pub struct SandboxReport {
    /// `"full"`, `"partial"` (an older kernel enforced what it knows of [`PINNED_ABI`]) or
    /// `"none: <reason>"`.
    pub landlock: String,
    /// The effective capabilities left, by name (`CAP_SYS_ADMIN`, ...), sorted.
    pub capabilities: Vec<String>,
    /// What did not go as intended, one sentence each (also logged as warnings).
    pub warnings: Vec<String>,
}

/// The `nvidia*` entries of the device folder `dev` (`/dev`): `nvidiactl`, `nvidia0`...,
/// `nvidia-uvm`, the `nvidia-caps` folder. Sorted; empty when there are none.
pub fn nvidia_device_nodes(dev: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dev)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("nvidia"))
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

static ENFORCED: AtomicBool = AtomicBool::new(false);

/// Drops capabilities to [`KEPT_CAPABILITIES`], sets `no_new_privs`, and applies Landlock with
/// [`SYSTEM_RULES`] and `paths`. Irreversible for this process.
///
/// Call it once, after the socket is bound and before serving, while the process has a single
/// thread (before the async runtime starts): it binds the calling thread and whatever it starts
/// afterwards. A second call changes nothing and says so. Failures never stop the helper: each
/// is logged as a warning and recorded in the report, so the operator sees how confined the
/// helper runs.
pub fn enforce(paths: &SandboxPaths) -> SandboxReport {
    let mut report = SandboxReport::default();
    if ENFORCED.swap(true, Ordering::SeqCst) {
        report.landlock =
            "none: enforce was already called in this process; the first call's rules stand"
                .to_owned();
        report.capabilities = effective_capabilities();
        warn(&mut report, "sandbox::enforce was called twice".to_owned());
        return report;
    }
    let threads = thread_count();
    if threads > 1 {
        warn(
            &mut report,
            format!(
                "the sandbox was applied with {threads} threads running: only the calling thread and what it starts later are confined"
            ),
        );
    }
    drop_capabilities(&mut report);
    // Set here too, not only by the Landlock ruleset, so it holds on kernels without Landlock.
    if let Err(e) = nix::sys::prctl::set_no_new_privs() {
        warn(&mut report, format!("could not set no_new_privs: {e}"));
    }
    report.landlock = match apply_landlock(paths) {
        Ok(landlock) => landlock,
        Err(reason) => {
            let landlock = format!("none: {reason}");
            warn(
                &mut report,
                format!("Landlock is not confining bcd-helper: {reason}"),
            );
            landlock
        }
    };
    report.capabilities = effective_capabilities();
    tracing::info!(
        landlock = %report.landlock,
        capabilities = ?report.capabilities,
        "sandbox applied"
    );
    report
}

fn warn(report: &mut SandboxReport, sentence: String) {
    tracing::warn!("{sentence}");
    report.warnings.push(sentence);
}

fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(1)
}

fn kept() -> CapsHashSet {
    KEPT_CAPABILITIES.iter().map(|(c, _)| *c).collect()
}

/// Removes every capability but [`KEPT_CAPABILITIES`] from every set. Bounding set first
/// (dropping needs `CAP_SETPCAP`, itself dropped last with the effective set).
fn drop_capabilities(report: &mut SandboxReport) {
    let kept_indices: Vec<u8> = KEPT_CAPABILITIES.iter().map(|(c, _)| c.index()).collect();
    // By number rather than by the `caps` crate's list, so capabilities newer than that crate
    // go too; the kernel answers EINVAL past its last one.
    for index in 0..64u8 {
        if kept_indices.contains(&index) {
            continue;
        }
        // SAFETY: PR_CAPBSET_DROP takes an integer and touches no memory of ours.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(index), 0, 0, 0) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            warn(
                report,
                format!("could not drop capability {index} from the bounding set: {err}"),
            );
            break;
        }
    }
    let steps: [(&str, Result<(), caps::errors::CapsError>); 4] = [
        ("ambient", caps::clear(None, CapSet::Ambient)),
        ("inheritable", caps::clear(None, CapSet::Inheritable)),
        (
            "effective",
            caps::read(None, CapSet::Effective)
                .and_then(|e| caps::set(None, CapSet::Effective, &(&e & &kept()))),
        ),
        (
            "permitted",
            caps::read(None, CapSet::Permitted)
                .and_then(|p| caps::set(None, CapSet::Permitted, &(&p & &kept()))),
        ),
    ];
    for (set, result) in steps {
        if let Err(e) = result {
            warn(
                report,
                format!("could not reduce the {set} capabilities: {e}"),
            );
        }
    }
}

fn effective_capabilities() -> Vec<String> {
    let mut names: Vec<String> = caps::read(None, CapSet::Effective)
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.to_string())
        .collect();
    names.sort();
    names
}

/// Builds and applies the ruleset; `Ok` is the report's word, `Err` the reason for "none".
fn apply_landlock(paths: &SandboxPaths) -> Result<String, String> {
    let abi = PINNED_ABI;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.create())
        .map_err(|e| format!("the ruleset could not be created ({e})"))?;
    let system = SYSTEM_RULES.iter().map(|(p, a)| (PathBuf::from(p), *a));
    let mut exec = paths.exec.clone();
    exec.extend(interpreters(&paths.exec));
    let configured = [
        (&exec, Allow::Exec),
        (&paths.write_files, Allow::WriteFile),
        (&paths.read_write, Allow::ReadWrite),
        (&paths.lock_dirs, Allow::LockFiles),
        (&paths.read, Allow::Read),
        (&paths.devices, Allow::Device),
    ]
    .into_iter()
    .flat_map(|(list, allow)| list.iter().map(move |p| (p.clone(), allow)));
    for (path, allow) in system.chain(configured) {
        let fd = match PathFd::new(&path) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::debug!(path = %path.display(), "no Landlock rule for a path that cannot be opened: {e}");
                continue;
            }
        };
        let mut access = allow.access(abi);
        // A rule on a file may only carry file rights; asking for more would turn "full"
        // into "partial" for nothing.
        if !std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
            access &= AccessFs::from_file(abi);
        }
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| format!("the rule for {} was refused ({e})", path.display()))?;
    }
    let status = ruleset
        .no_new_privs(true)
        .restrict_self()
        .map_err(|e| format!("the ruleset could not be applied ({e})"))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok("full".to_owned()),
        RulesetStatus::PartiallyEnforced => Ok("partial".to_owned()),
        RulesetStatus::NotEnforced => Err(match status.landlock {
            LandlockStatus::NotEnabled => {
                "this kernel has Landlock but it is not enabled (add landlock to its lsm= boot parameter)".to_owned()
            }
            LandlockStatus::NotImplemented => "this kernel was built without Landlock".to_owned(),
            LandlockStatus::Available { .. } => "the kernel enforced none of the rules".to_owned(),
        }),
    }
}

/// Whether to serve only `Ping`: when Landlock confines nothing (`report.landlock` starts with
/// "none") and root did not pass `--allow-unconfined`, the sentence every other operation is
/// refused with.
pub fn ping_only(report: &SandboxReport, allow_unconfined: bool) -> Option<String> {
    let reason = report.landlock.strip_prefix("none: ")?;
    if allow_unconfined {
        return None;
    }
    Some(format!(
        "bcd-helper is not confined by Landlock ({reason}), so it serves only Ping; enable \
         Landlock in the kernel, or start bcd-helper with --allow-unconfined to run privileged \
         steps unconfined"
    ))
}

/// The sysfs files the operations write, as they are at start-up: `driver_override` of each
/// function a VM may be given, `bind` and `unbind` of `nvidia`, `vfio-pci` and every driver
/// those functions are on now, and `drivers_probe`. Missing files are skipped by [`enforce`].
pub fn sysfs_write_files(sysfs: &crate::sysfs::Sysfs) -> Vec<PathBuf> {
    use crate::sysfs::{NVIDIA_DRIVER, VFIO_DRIVER};
    let functions = sysfs.passthrough_functions();
    let mut drivers: Vec<String> = vec![NVIDIA_DRIVER.to_owned(), VFIO_DRIVER.to_owned()];
    drivers.extend(functions.iter().filter_map(|a| sysfs.driver(a)));
    drivers.sort();
    drivers.dedup();
    let mut files: Vec<PathBuf> = functions
        .iter()
        .map(|a| sysfs.device_dir(a).join("driver_override"))
        .collect();
    for d in &drivers {
        let dir = sysfs.drivers_dir().join(d);
        files.push(dir.join("bind"));
        files.push(dir.join("unbind"));
    }
    files.push(sysfs.probe_file());
    files
}

/// The programs the kernel opens for execution on the way to running `programs`: each ELF
/// program's `PT_INTERP` (the dynamic loader), and for a `#!` script its interpreter and that
/// one's loader.
pub fn interpreters(programs: &[PathBuf]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for program in programs {
        let Ok(head) = read_head(program) else {
            continue;
        };
        if let Some(script) = shebang(&head) {
            if let Ok(h) = read_head(&script) {
                found.extend(elf_interpreter(&h));
            }
            found.push(script);
        } else {
            found.extend(elf_interpreter(&head));
        }
    }
    found.sort();
    found.dedup();
    found
}

/// What the operator is told when `program` (the nvidia-smi or virsh to run) is a `#!` script:
/// under Landlock only it, its interpreter and their loaders may be run, so a script that runs
/// other programs (a demo host's replaying nvidia-smi) fails with "Permission denied". `None`
/// for an ELF program or a file that cannot be read.
pub fn script_warning(program: &Path) -> Option<String> {
    let interpreter = shebang(&read_head(program).ok()?)?;
    Some(format!(
        "{} is a script ({}): under Landlock only it and its interpreter may run, so a script \
         that runs other programs (a demo host's replaying nvidia-smi) fails with \
         \"Permission denied\"; for a demo host, start bcd-helper with --no-sandbox",
        program.display(),
        interpreter.display()
    ))
}

/// The first 4 KiB of a file (ELF program headers of real programs sit well inside them).
fn read_head(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut head = Vec::with_capacity(4096);
    std::fs::File::open(path)?
        .take(4096)
        .read_to_end(&mut head)?;
    Ok(head)
}

/// `#!/bin/sh -e` → `/bin/sh`.
fn shebang(head: &[u8]) -> Option<PathBuf> {
    let rest = head.strip_prefix(b"#!")?;
    let line = rest.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim();
    let interpreter = line.split_whitespace().next()?;
    interpreter
        .starts_with('/')
        .then(|| PathBuf::from(interpreter))
}

/// The `PT_INTERP` path of a 64-bit little-endian ELF file, if it has one.
fn elf_interpreter(head: &[u8]) -> Option<PathBuf> {
    const PT_INTERP: u32 = 3;
    if head.get(..4)? != b"\x7fELF" || *head.get(4)? != 2 || *head.get(5)? != 1 {
        return None;
    }
    let u16_at = |o: usize| head.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        head.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        head.get(o..o + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    for i in 0..phnum {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(ph)? != PT_INTERP {
            continue;
        }
        let offset = usize::try_from(u64_at(ph + 8)?).ok()?;
        let size = usize::try_from(u64_at(ph + 32)?).ok()?;
        let bytes = head.get(offset..offset.checked_add(size)?)?;
        let path = bytes.split(|b| *b == 0).next()?;
        return Some(PathBuf::from(std::str::from_utf8(path).ok()?));
    }
    None
}

#[cfg(test)]
mod tests;
