//! `bcd-helper`: bcd's root helper. It runs only the privileged steps bcd needs
//! (`nvidia-smi -pm`, `nvidia-smi --gpu-reset`, vfio-pci bind/release through sysfs, `virsh
//! start/restore/destroy` with persistence mode around them) for peers whose kernel-reported
//! credentials it allows, with arguments the protocol has already validated, and audits each
//! (an operation that changes something: a line before it acts and one when it ends).
//!
//! It must never: run a shell; take a path, a program or a command line from its peer; decide
//! by a peer's pid; parse more than a domain's `<hostdev>` addresses; panic on bytes from the
//! socket; act while it cannot write its audit log (only `Ping` is answered then); or act on a
//! PCI function without holding its lock file.
//!
//! Start-up order matters: the socket-activation variables are read and removed and every
//! inherited descriptor but systemd's is closed before any thread exists, the socket is bound,
//! the audit log, the staging folder and the lock folder are opened, the sandbox is applied (so
//! every thread inherits it), and only then is the async runtime built (children are started
//! from its worker threads, whose end would kill them: see [`child::run_holding`]).

mod audit;
mod budget;
mod child;
mod config;
mod libvirt;
mod lockfile;
mod ops;
mod sandbox;
mod savefile;
mod server;
mod sysfs;

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixListener as StdListener;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use config::{Config, Parsed};

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: RawFd = 3;
/// Most passed descriptors marked close-on-exec (a socket unit passes one).
const MAX_PASSED_FDS: RawFd = 64;
/// The listening socket's backlog (`--listen`; the socket unit's `Backlog=` says the same).
const LISTEN_BACKLOG: i32 = 16;
/// The socket file's mode under `--listen` (the socket unit sets the same in production).
const SOCKET_MODE: u32 = 0o660;
/// How long, at exit, to let running operations finish (systemd's default stop timeout is
/// 90 s; an operation's own bounds are shorter than this).
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(80);
/// How long, at exit, to wait for sysfs writes still blocked in the kernel.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// The environment variable that sets the log level.
const LOG_ENV: &str = "BCD_HELPER_LOG";

/// Why the helper could not start serving. `Display` is the operator's sentence.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("bcd-helper: no socket to serve: give --listen PATH, or start it from bcd-helper.socket (LISTEN_PID/LISTEN_FDS are not set for this process)")]
    NotActivated,
    #[error("bcd-helper: socket activation passed fd {LISTEN_FDS_START}, but it is not a listening Unix stream socket: {0}")]
    BadActivatedFd(String),
    #[error("bcd-helper: cannot listen on {path}: {reason}")]
    Listen { path: String, reason: String },
    #[error("bcd-helper: cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// What systemd passed, read (and removed from the environment) first thing.
struct Activation {
    fds: Option<usize>,
}

/// Reads and removes `LISTEN_PID`/`LISTEN_FDS`/`LISTEN_FDNAMES`, so no child inherits them.
/// Must run before any thread exists: changing the environment is not thread safe.
fn take_activation() -> Activation {
    let pid = std::env::var("LISTEN_PID").ok();
    let fds = std::env::var("LISTEN_FDS").ok();
    for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(name);
    }
    let ours = pid
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|p| p == std::process::id());
    let fds = fds
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| ours && *n >= 1);
    if let Some(n) = fds {
        // systemd passes its fds inheritable; none of them may reach a child.
        let last = LISTEN_FDS_START.saturating_add(i32::try_from(n).unwrap_or(i32::MAX) - 1);
        for fd in LISTEN_FDS_START..=last.min(LISTEN_FDS_START + MAX_PASSED_FDS) {
            let _ = nix::fcntl::fcntl(
                fd,
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
            );
        }
    }
    Activation { fds }
}

/// Closes every descriptor above the standard three and systemd's: nothing the helper's
/// parent left open may reach the root children it starts.
fn close_inherited(activation: &Activation) {
    let keep = activation
        .fds
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0)
        .min(MAX_PASSED_FDS as u32);
    let first = LISTEN_FDS_START as u32 + keep;
    // SAFETY: no descriptor above `first` is owned by anything in this process yet (nothing
    // has been opened); close_range touches no memory.
    let rc = unsafe { libc::close_range(first, u32::MAX, 0) };
    if rc != 0 {
        // Kernels before 5.9: close them one by one, as far as the limit goes.
        // SAFETY: getrlimit writes one rlimit struct that lives across the call.
        let mut lim = libc::rlimit {
            rlim_cur: 1024,
            rlim_max: 1024,
        };
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
        let limit = lim.rlim_cur.min(1 << 20);
        for fd in first..u32::try_from(limit).unwrap_or(1024) {
            // SAFETY: as above.
            unsafe { libc::close(fd as i32) };
        }
    }
}

/// Takes fd 3 after checking it is a listening Unix stream socket, and marks it close-on-exec.
fn activated_listener() -> Result<StdListener, StartError> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    use nix::sys::socket::{
        getsockname, getsockopt, sockopt, AddressFamily, SockType, SockaddrLike, UnixAddr,
    };
    let bad = |why: &str| StartError::BadActivatedFd(why.to_owned());
    // SAFETY: fd 3 is open for the life of the process (systemd passed it); it is only
    // borrowed here for the checks, and owned below once they pass.
    let fd = unsafe { BorrowedFd::borrow_raw(LISTEN_FDS_START) };
    match getsockopt(&fd, sockopt::SockType) {
        Ok(SockType::Stream) => {}
        Ok(other) => return Err(bad(&format!("it is a {other:?} socket"))),
        Err(e) => return Err(bad(&format!("it is not a socket ({e})"))),
    }
    if !getsockopt(&fd, sockopt::AcceptConn).unwrap_or(false) {
        return Err(bad("it is not listening"));
    }
    let family = getsockname::<UnixAddr>(LISTEN_FDS_START)
        .ok()
        .and_then(|a| a.family());
    if family != Some(AddressFamily::Unix) {
        return Err(bad("it is not a Unix socket"));
    }
    fcntl(LISTEN_FDS_START, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map_err(|e| bad(&format!("cannot set close-on-exec ({e})")))?;
    // SAFETY: checked above to be a listening Unix stream socket that nothing else owns.
    Ok(unsafe { StdListener::from_raw_fd(LISTEN_FDS_START) })
}

/// Binds `path` with mode 0660, first removing a stale socket there (never another file).
fn bind(path: &Path) -> Result<StdListener, StartError> {
    let fail = |reason: String| StartError::Listen {
        path: path.display().to_string(),
        reason,
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            std::fs::remove_file(path)
                .map_err(|e| fail(format!("cannot remove the stale socket: {e}")))?;
        }
        Ok(_) => return Err(fail("something that is not a socket is there".to_owned())),
        Err(_) => {}
    }
    // Bind with a umask that already gives 0660, so there is no moment of a wider mode.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o117));
    let bound = StdListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = bound.map_err(|e| fail(e.to_string()))?;
    // A short backlog: a connection waits behind at most this many others (a refused flood's
    // included) before the accept loop sees it; the socket unit sets the same (Backlog=).
    // SAFETY: listen on a socket this function owns; it only changes the backlog.
    if unsafe { libc::listen(listener.as_raw_fd(), LISTEN_BACKLOG) } != 0 {
        return Err(fail(format!(
            "cannot set its backlog: {}",
            std::io::Error::last_os_error()
        )));
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
        .map_err(|e| fail(format!("cannot set its mode: {e}")))?;
    Ok(listener)
}

/// Removes the socket file at `path` only if it is still the one this helper bound.
fn remove_own_socket(path: &Path, bound: Option<(u64, u64)>) {
    use std::os::unix::fs::MetadataExt;
    let now = std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()));
    if now.is_some() && now == bound {
        let _ = std::fs::remove_file(path);
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env(LOG_ENV)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
}

fn sandbox_paths(c: &Config, sysfs: &sysfs::Sysfs) -> sandbox::SandboxPaths {
    let mut paths = sandbox::SandboxPaths {
        exec: vec![c.nvidia_smi.clone(), c.virsh.clone()],
        write_files: sandbox::sysfs_write_files(sysfs),
        read_write: vec![c.staging_dir.clone()],
        lock_dirs: vec![c.lock_dir.clone()],
        read: vec![c.save_dir.clone(), c.sysfs_root.clone()],
        devices: sandbox::nvidia_device_nodes(std::path::Path::new("/dev")),
    };
    if let Some(spec) = &c.nvidia_cdi_spec {
        // nvidia-ctk writes the spec beside itself and renames it into place, and reads what
        // it lists in the spec: the driver's files wherever the distribution put them.
        paths.exec.push(c.nvidia_ctk.clone());
        paths
            .read_write
            .extend(spec.parent().map(std::path::Path::to_path_buf));
        paths.read.extend(
            sandbox::NVIDIA_CTK_READS
                .iter()
                .map(std::path::PathBuf::from),
        );
        paths.devices.extend(
            [std::path::PathBuf::from(WSL_DEVICE)]
                .into_iter()
                .filter(|p| p.exists()),
        );
    }
    paths
}

/// The paravirtual GPU device of WSL 2: where it exists, NVIDIA's spec is generated for WSL.
const WSL_DEVICE: &str = "/dev/dxg";

fn main() -> ExitCode {
    // First, before any thread: the activation variables leave the environment, and what the
    // parent left open is closed.
    let activation = take_activation();
    close_inherited(&activation);
    let config = match config::parse(std::env::args().skip(1)) {
        Ok(Parsed::Run(c)) => c,
        Ok(Parsed::Help) => {
            print!("{}", config::USAGE);
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Version) => {
            println!("{}", config::VERSION_LINE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    init_logging();
    match start(&config, &activation) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

fn start(config: &Config, activation: &Activation) -> Result<(), StartError> {
    let (listener, idle_exit) = match (&config.listen, activation.fds) {
        (Some(path), _) => (bind(path)?, None),
        (None, Some(_)) => (activated_listener()?, config.idle_exit),
        (None, None) => return Err(StartError::NotActivated),
    };
    listener
        .set_nonblocking(true)
        .map_err(|e| StartError::BadActivatedFd(e.to_string()))?;
    // What was bound, so that exiting removes this socket and never another's.
    let socket_id = config
        .listen
        .as_deref()
        .and_then(|p| std::fs::symlink_metadata(p).ok())
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino())
        });
    // Opened before the sandbox, so Landlock need not allow anything in its folder.
    let audit = Arc::new(audit::Audit::open(
        config.audit_log.as_deref(),
        config.audit_max_bytes,
    ));
    let saves = savefile::SavePolicy {
        save_dir: config.save_dir.clone(),
        staging_dir: config.staging_dir.clone(),
        owners: config.save_owners.clone(),
    };
    if let Err(why) = saves.prepare_staging() {
        tracing::warn!("save images cannot be restored: {why}");
    }
    // Made and checked before the sandbox, which allows only opening files in it.
    let lock_files = lockfile::LockDir::open(&config.lock_dir);
    let no_device_locks = lock_files.unusable();
    let late_audit = audit.clone();
    let sysfs = sysfs::Sysfs::new(&config.sysfs_root).on_late_write(Arc::new(
        move |device: &bcd_protocol::PciAddress, sentence: String| {
            late_audit.write(&audit::Record {
                peer: &audit::Peer::default(),
                operation: "sysfs.late-write",
                arguments: &[("device", device.to_string())],
                verdict: audit::Verdict::Failed,
                message: Some(sentence),
                duration: Duration::ZERO,
            });
        },
    ));
    tracing::info!(
        "sysfs writes: at most {} reserved or in the kernel at once ({} per operation on a \
         function)",
        sysfs.write_cap(),
        sysfs::FUNCTION_SHARE
    );
    let (sandbox_words, ping_only) = if config.no_sandbox {
        tracing::warn!("--no-sandbox: running with every capability and no Landlock");
        ("none: --no-sandbox".to_owned(), None)
    } else {
        let report = sandbox::enforce(&sandbox_paths(config, &sysfs));
        tracing::info!(
            "sandbox: landlock {}, capabilities [{}]",
            report.landlock,
            report.capabilities.join(", ")
        );
        for warning in &report.warnings {
            tracing::warn!("sandbox: {warning}");
        }
        for program in [&config.nvidia_smi, &config.virsh, &config.nvidia_ctk] {
            if let Some(warning) = sandbox::script_warning(program) {
                tracing::warn!("sandbox: {warning}");
            }
        }
        let ping_only = sandbox::ping_only(&report, config.allow_unconfined);
        if let Some(why) = &ping_only {
            tracing::error!("{why}");
        }
        (
            format!(
                "landlock {}; capabilities [{}]",
                report.landlock,
                report.capabilities.join(", ")
            ),
            ping_only,
        )
    };
    let confined = !sandbox_words.starts_with("none") && !sandbox_words.contains("landlock none");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(8)
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;
    let restart_needed = Arc::new(AtomicBool::new(false));
    let spawn_restart = restart_needed.clone();
    let ops = ops::Ops {
        nvidia_smi: config.nvidia_smi.clone(),
        smi_timeout: config.nvidia_smi_timeout,
        unbind_timeout: config.unbind_timeout,
        sysfs,
        libvirt: libvirt::Libvirt {
            virsh: config.virsh.clone(),
            uri: config.libvirt_uri.clone(),
            timeout: config.virsh_timeout,
            saves,
            spawn_failure: Arc::new(move |program: &str, source: &std::io::Error| {
                ops::spawn_failure(confined, &spawn_restart, program, source)
            }),
        },
        locks: ops::DeviceLocks::new(lock_files),
        lock_wait: config.lock_wait,
        confined,
        restart_needed,
        nvidia_cdi: config.nvidia_cdi_spec.as_ref().map(|spec| ops::NvidiaCdi {
            ctk: config.nvidia_ctk.clone(),
            spec: spec.clone(),
            timeout: Duration::from_secs(config::DEFAULT_NVIDIA_CTK_TIMEOUT_S),
            wsl: std::path::Path::new(WSL_DEVICE).exists(),
            running: tokio::sync::Mutex::new(()),
        }),
        // What `Ping` says: how the helper is confined, or why it serves only `Ping`, then
        // why it runs nothing on a device.
        sandbox: [
            Some(ping_only.clone().unwrap_or(sandbox_words)),
            no_device_locks,
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; "),
    };
    let shared = Arc::new(server::Shared::new(
        ops,
        audit,
        server::Allow {
            uids: config.allow_uids.clone(),
            gids: config.allow_gids.clone(),
        },
        budget::Budget::new(config.max_connections, config.max_per_uid),
        config.frame_timeout,
        ping_only,
    ));
    let listener_fd = listener.as_raw_fd();
    runtime.block_on(async {
        let listener = tokio::net::UnixListener::from_std(listener)
            .map_err(|e| StartError::BadActivatedFd(e.to_string()))?;
        tracing::info!(
            "bcd-helper {} serving on fd {listener_fd} ({})",
            env!("CARGO_PKG_VERSION"),
            config
                .listen
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "socket activation".to_owned())
        );
        server::serve(listener, shared.clone(), idle_exit).await;
        shared.drain(SHUTDOWN_DRAIN).await;
        Ok::<(), StartError>(())
    })?;
    if let Some(path) = &config.listen {
        remove_own_socket(path, socket_id);
    }
    // A sysfs write still blocked in the kernel keeps its thread; do not wait on it forever.
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    Ok(())
}
