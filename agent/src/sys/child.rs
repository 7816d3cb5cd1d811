//! Running a child program with bounds: in a process group of its own, killed with that
//! whole group when its time is up or when it has answered (nothing it started may outlive
//! it), killed too when the agent dies, and with its output read only up to a limit.
//!
//! `nvidia-smi`'s runner ([`crate::smi::runner`]) and doctor's `systemctl`
//! ([`crate::sys::systemd`]) both run their children here, and word the outcome
//! themselves.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};

/// How often a spawn that finds its program busy (`ETXTBSY`) is tried again.
const TEXT_BUSY_TRIES: u32 = 5;
/// The pause between those tries.
const TEXT_BUSY_PAUSE: Duration = Duration::from_millis(10);

/// How a bounded child ended.
#[derive(Debug)]
pub enum Ended {
    /// It exited (or a signal ended it) within the bound.
    Exited {
        /// Its status.
        status: ExitStatus,
        /// Standard output, up to the limit asked plus nothing more.
        stdout: Vec<u8>,
        /// Standard error, up to its limit.
        stderr: Vec<u8>,
    },
    /// It ran past the bound and was killed with its group.
    TimedOut,
}

/// The bounds on one run.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// How long the child may run.
    pub time: Duration,
    /// Most bytes of standard output kept (the rest is drained, so the child never blocks).
    pub stdout: usize,
    /// Most bytes of standard error kept.
    pub stderr: usize,
}

/// Starts `program ARGS...` with piped output in a process group of its own (so a bound can
/// kill everything it started), killed if dropped; returns the child and its group.
///
/// The child is also killed when the agent dies (`PR_SET_PDEATHSIG` with `SIGKILL`, set in
/// the child before it runs the program): a node killed with SIGKILL runs no drop and no
/// bound, and a child hung in the driver would otherwise run on for ever. The kernel sends
/// the signal when the thread that started the child ends, so children are started from the
/// runtime's worker threads (which live as long as the runtime), never from a blocking-pool
/// thread.
///
/// # Errors
/// The spawn's own error (`NotFound` when there is no such program).
pub fn spawn_in_group(
    program: &Path,
    args: &[&str],
) -> std::io::Result<(tokio::process::Child, Option<Pid>)> {
    let parent = i32::try_from(std::process::id()).unwrap_or(0);
    let mut command = tokio::process::Command::new(program);
    // SAFETY: between fork and exec the closure calls only prctl and getppid, which are
    // async-signal-safe, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The agent died before the prctl: nothing would send the signal now.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // A program still open for writing somewhere (an upgrade writing it, or a descriptor a
    // process forked at that moment still holds) refuses exec with ETXTBSY for a moment.
    let mut tries = 0;
    let child = loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < TEXT_BUSY_TRIES => {
                tries += 1;
                std::thread::sleep(TEXT_BUSY_PAUSE);
            }
            other => break other?,
        }
    };
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    Ok((child, group))
}

/// Runs `program ARGS...` within `bounds` (see [`spawn_in_group`]), then kills its process
/// group whatever happened.
///
/// # Errors
/// The spawn's error, or waiting's.
///
/// # Cancel safety
/// Dropping the future kills the child (not its group); use the time bound for that.
pub async fn run(program: &Path, args: &[&str], bounds: Bounds) -> std::io::Result<Ended> {
    let (mut child, group) = spawn_in_group(program, args)?;
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let finished = tokio::time::timeout(bounds.time, async {
        tokio::join!(
            read_limited(stdout, bounds.stdout),
            read_limited(stderr, bounds.stderr),
            child.wait()
        )
    })
    .await;
    // Whatever happened, nothing the child started may outlive it.
    if let Some(group) = group {
        let _ = killpg(group, Signal::SIGKILL);
    }
    let Ok((stdout, stderr, status)) = finished else {
        let _ = child.kill().await;
        return Ok(Ended::TimedOut);
    };
    Ok(Ended::Exited {
        status: status?,
        stdout,
        stderr,
    })
}

/// Reads `pipe` to its end, keeping at most `limit` bytes.
async fn read_limited<R: AsyncRead + Unpin>(pipe: Option<R>, limit: usize) -> Vec<u8> {
    let Some(mut pipe) = pipe else {
        return Vec::new();
    };
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            // Past the limit the rest is drained, so the child never blocks on a full pipe.
            Ok(n) if kept.len() < limit => {
                kept.extend_from_slice(&buf[..n.min(limit - kept.len())])
            }
            Ok(_) => {}
        }
    }
}
