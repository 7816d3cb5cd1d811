//! Running a fixed program as a bounded child: no shell, a cleared environment, its own
//! process group, a timeout after which the whole group is killed, bounded output, and a
//! life tied to the helper's: the child is sent `SIGKILL` when the helper dies (see
//! [`run_holding`]).
//!
//! A child also inherits the descriptors of its operation's device lock files (and no other
//! descriptor of the helper): see [`run_holding`] and [`crate::lockfile`].

use std::ffi::OsString;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Most bytes of standard output kept; the rest is read and dropped so the child never blocks.
pub const MAX_STDOUT: usize = 1024 * 1024;
/// Most bytes of standard error kept (its tail), for `Failed` answers.
pub const MAX_STDERR_TAIL: usize = 2048;
/// The only environment a child gets: a fixed `PATH` for the tools those programs run.
const CHILD_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// One program to run.
#[derive(Debug, Clone)]
pub struct Command {
    /// An absolute path, set by the helper's own flags.
    pub program: PathBuf,
    /// Arguments, each a separate word: nothing is ever given to a shell.
    pub args: Vec<OsString>,
    /// The bound on the whole run.
    pub timeout: Duration,
}

impl Command {
    /// A command with string arguments.
    pub fn new(program: impl Into<PathBuf>, args: &[&str], timeout: Duration) -> Self {
        Self {
            program: program.into(),
            args: args.iter().map(OsString::from).collect(),
            timeout,
        }
    }

    /// The command line as one string, for audit lines and messages.
    pub fn display(&self) -> String {
        let mut out = self.program.display().to_string();
        for a in &self.args {
            out.push(' ');
            out.push_str(&a.to_string_lossy());
        }
        out
    }
}

/// What a finished child left.
#[derive(Debug, Clone)]
pub struct Output {
    /// The exit status; `None` when a signal ended it.
    pub exit_code: Option<i32>,
    /// Standard output, at most [`MAX_STDOUT`] bytes.
    pub stdout: Vec<u8>,
    /// The last [`MAX_STDERR_TAIL`] bytes of standard error, lossily decoded and trimmed.
    pub stderr_tail: String,
    /// How long it ran.
    pub elapsed: Duration,
}

impl Output {
    /// Whether it exited with status 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0)
    }

    /// The best one-line explanation of a failure: the stderr tail, else stdout's, else the status.
    pub fn failure_message(&self) -> String {
        let from_stdout = String::from_utf8_lossy(&self.stdout);
        let text = if !self.stderr_tail.is_empty() {
            self.stderr_tail.as_str()
        } else {
            from_stdout.trim()
        };
        if text.is_empty() {
            match self.exit_code {
                Some(code) => format!("exited with status {code} and printed nothing"),
                None => "ended by a signal".to_owned(),
            }
        } else {
            tail_chars(text, MAX_STDERR_TAIL)
        }
    }
}

/// Why a child gave no output.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    /// It could not be started.
    #[error("could not run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// It ran past its bound; its process group was killed.
    #[error("{program} did not finish within {}s and was killed", after.as_secs())]
    Timeout {
        /// The program.
        program: String,
        /// The bound.
        after: Duration,
    },
}

/// Runs `cmd` to completion or to its timeout, holding no lock file; see [`run_holding`].
/// Only the tests need it: every child of the helper runs for an operation that holds locks.
///
/// # Errors
/// As [`run_holding`].
#[cfg(test)]
pub async fn run(cmd: &Command) -> Result<Output, ChildError> {
    run_holding(cmd, &[]).await
}

/// Runs `cmd` to completion or to its timeout; the child inherits `hold` (its operation's
/// lock files, open in the helper with close-on-exec: only this child gets them, never a
/// child of another operation started at the same moment), so each lock lives as long as the
/// last process that holds it, even past the helper's death.
///
/// The child is killed when the helper dies (`PR_SET_PDEATHSIG` with `SIGKILL`, set in the
/// child before it runs the program): a helper killed with SIGKILL runs no drop and no bound,
/// and outside systemd's control group nothing else would end its children. The kernel sends
/// that signal when the *thread* that started the child ends, so children are started only
/// from the runtime's worker threads, which live as long as the runtime (operations run in
/// tasks; the helper never calls `block_in_place` and never spawns from `spawn_blocking`).
/// Only the child itself gets the signal: what it started (its process group) is killed by
/// the helper when the child ends or times out, and, if the helper died first, keeps the lock
/// files it inherited until it ends.
///
/// # Errors
/// [`ChildError::Spawn`] when it cannot start, [`ChildError::Timeout`] when it runs too long;
/// then every process of its group has been sent `SIGKILL` and the child reaped.
pub async fn run_holding(cmd: &Command, hold: &[BorrowedFd<'_>]) -> Result<Output, ChildError> {
    let started = Instant::now();
    let parent = i32::try_from(std::process::id()).unwrap_or(0);
    let inherit: Vec<RawFd> = hold.iter().map(AsRawFd::as_raw_fd).collect();
    let mut command = tokio::process::Command::new(&cmd.program);
    // SAFETY: between fork and exec the closure calls only fcntl, prctl and getppid, which are
    // async-signal-safe, and allocates nothing (`inherit` was built before the fork).
    unsafe {
        command.pre_exec(move || {
            for fd in &inherit {
                // Only in the child: the helper's descriptor stays close-on-exec.
                if libc::fcntl(*fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The helper died before the prctl: nothing would send the signal now.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let mut child = command
        .args(&cmd.args)
        .env_clear()
        .env("PATH", CHILD_PATH)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ChildError::Spawn {
            program: cmd.program.display().to_string(),
            source,
        })?;
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let work = async {
        let (out, err, status) = tokio::join!(
            read_bounded(stdout, MAX_STDOUT, false),
            read_bounded(stderr, MAX_STDERR_TAIL, true),
            child.wait()
        );
        (out, err, status)
    };
    match tokio::time::timeout(cmd.timeout, work).await {
        Ok((stdout, stderr, status)) => {
            // The leader is gone; anything it left in its group goes too.
            if let Some(pgid) = pgid {
                let _ = killpg(pgid, Signal::SIGKILL);
            }
            let exit_code = status.ok().and_then(|s| s.code());
            Ok(Output {
                exit_code,
                stdout,
                stderr_tail: String::from_utf8_lossy(&stderr).trim().to_owned(),
                elapsed: started.elapsed(),
            })
        }
        Err(_) => {
            if let Some(pgid) = pgid {
                let _ = killpg(pgid, Signal::SIGKILL);
            }
            let _ = child.kill().await;
            Err(ChildError::Timeout {
                program: cmd.program.display().to_string(),
                after: cmd.timeout,
            })
        }
    }
}

/// Reads a pipe to its end, keeping the first (or, with `tail`, the last) `limit` bytes.
async fn read_bounded<R: AsyncRead + Unpin>(pipe: Option<R>, limit: usize, tail: bool) -> Vec<u8> {
    let Some(mut pipe) = pipe else {
        return Vec::new();
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > limit {
                    if tail {
                        let cut = kept.len() - limit;
                        kept.drain(..cut);
                    } else {
                        kept.truncate(limit);
                    }
                }
            }
        }
    }
    kept
}

fn tail_chars(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn output_and_status_come_back() {
        let out = run(&Command::new(
            "/bin/sh",
            &["-c", "echo hi; echo oops >&2; exit 3"],
            Duration::from_secs(5),
        ))
        .await
        .unwrap();
        assert_eq!(out.exit_code, Some(3));
        assert_eq!(out.stdout, b"hi\n");
        assert_eq!(out.stderr_tail, "oops");
        assert_eq!(out.failure_message(), "oops");
    }

    // The test once set a variable of its own with set_var, which every other test of this
    // binary then inherited; the variables this process already has are the check now.
    #[tokio::test]
    async fn the_environment_is_cleared() {
        let ours: Vec<String> = std::env::vars_os()
            .filter_map(|(name, _)| name.into_string().ok())
            .filter(|name| name != "PATH" && name != "LC_ALL")
            .collect();
        assert!(
            !ours.is_empty(),
            "cargo runs tests with variables of its own"
        );
        let out = run(&Command::new("/usr/bin/env", &[], Duration::from_secs(5)))
            .await
            .unwrap();
        let env = String::from_utf8(out.stdout).unwrap();
        let mut names: Vec<&str> = env
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(n, _)| n)
            .collect();
        names.sort_unstable();
        for name in &ours {
            assert!(
                !names.contains(&name.as_str()),
                "{name} reached the child: {env}"
            );
        }
        assert_eq!(names, ["LC_ALL", "PATH"], "{env}");
    }

    #[tokio::test]
    async fn a_hung_child_and_its_group_are_killed() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild.pid");
        let script = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
        let err = run(&Command::new(
            "/bin/sh",
            &["-c", &script],
            Duration::from_millis(500),
        ))
        .await
        .unwrap_err();
        assert!(matches!(err, ChildError::Timeout { .. }), "{err}");
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The grandchild must be gone (or a zombie about to be reaped by init).
        std::thread::sleep(Duration::from_millis(200));
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false);
        assert!(!alive, "grandchild {pid} survived the timeout");
    }

    #[tokio::test]
    async fn a_missing_program_is_a_spawn_error() {
        let err = run(&Command::new(
            "/nonexistent/nvidia-smi",
            &[],
            Duration::from_secs(1),
        ))
        .await
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/nvidia-smi"), "{err}");
    }
}
