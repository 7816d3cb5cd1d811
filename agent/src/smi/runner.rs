//! Running `nvidia-smi`: each query bounded in time and in output, its whole process group
//! killed when the bound expires (a wedged GPU can hang `nvidia-smi` in the driver).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::sys::child;

/// The bound on one query.
pub(crate) const QUERY_TIMEOUT: Duration = Duration::from_secs(30);
/// The bound on a whole snapshot (all its queries).
pub(crate) const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(60);
/// Most bytes of standard output read from one query: far above an 8-GPU `-q -x` (~250 KB a
/// GPU at most), far below what could hurt the agent.
pub(crate) const MAX_OUTPUT: usize = 16 * 1024 * 1024;
/// Most bytes of standard error kept, for messages.
const MAX_STDERR: usize = 4096;

/// Why a query gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// No `nvidia-smi` to run: this host has no NVIDIA driver.
    #[error("nvml: nvidia-smi not found (no NVIDIA driver on this host)")]
    NoDriver,
    /// The query ran past its bound and was killed with its process group.
    #[error("nvidia-smi {query} did not answer within {}s and was killed", after.as_secs())]
    Timeout {
        /// The query's arguments.
        query: String,
        /// The bound.
        after: Duration,
    },
    /// The query exited with a non-zero status.
    #[error("nvidia-smi {query} failed (exit status {}): {message}", exit_code.map_or_else(|| "signal".to_owned(), |c| c.to_string()))]
    Failed {
        /// The query's arguments.
        query: String,
        /// The status; `None` when a signal ended it.
        exit_code: Option<i32>,
        /// What it printed (stderr, else stdout), trimmed.
        message: String,
    },
    /// A signal ended it (something outside killed it, or it crashed).
    #[error("nvidia-smi {query} was killed by signal {} ({signal}){}", signal_name(*.signal), if message.is_empty() { String::new() } else { format!(": {message}") })]
    Signaled {
        /// The query's arguments.
        query: String,
        /// The signal's number.
        signal: i32,
        /// What it printed before (stderr, else stdout), trimmed; often empty.
        message: String,
    },
    /// It printed more than [`MAX_OUTPUT`] bytes.
    #[error("nvidia-smi {query} printed more than {MAX_OUTPUT} bytes; its output was not read")]
    TooLong {
        /// The query's arguments.
        query: String,
    },
    /// It could not be started for another reason.
    #[error("could not run {program}: {message}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        message: String,
    },
}

/// A query's answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Standard output.
    pub stdout: Vec<u8>,
    /// How long the query took.
    pub elapsed: Duration,
}

/// Runs one `nvidia-smi`. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Runner {
    program: PathBuf,
    timeout: Duration,
}

impl Runner {
    /// A runner for `program` (a bare name is looked up on `PATH` at each run) with the
    /// standard per-query bound.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            timeout: QUERY_TIMEOUT,
        }
    }

    /// The same runner with another per-query bound.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The per-query bound.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs `nvidia-smi ARGS...`.
    ///
    /// # Errors
    /// [`RunError::NoDriver`] when there is no such program, [`RunError::Timeout`] past the
    /// bound (its process group has then been killed), [`RunError::Failed`] on a non-zero exit,
    /// [`RunError::TooLong`] past [`MAX_OUTPUT`].
    ///
    /// # Cancel safety
    /// Dropping the future kills the child (not its group); use the timeout for that.
    pub async fn run(&self, args: &[&str]) -> Result<Answer, RunError> {
        let query = args.join(" ");
        let program = resolve(&self.program).ok_or(RunError::NoDriver)?;
        let started = Instant::now();
        let _waiting = waiting::Waiting::start(&query, self.timeout);
        let bounds = child::Bounds {
            time: self.timeout,
            stdout: MAX_OUTPUT + 1,
            stderr: MAX_STDERR,
        };
        let ended = child::run(&program, args, bounds)
            .await
            .map_err(|e| spawn_error(&program, &e))?;
        let (status, stdout, stderr) = match ended {
            child::Ended::Exited {
                status,
                stdout,
                stderr,
            } => (status, stdout, stderr),
            child::Ended::TimedOut => {
                return Err(RunError::Timeout {
                    query,
                    after: self.timeout,
                })
            }
        };
        if stdout.len() > MAX_OUTPUT {
            return Err(RunError::TooLong { query });
        }
        if !status.success() {
            let text = if stderr.iter().any(|b| !b.is_ascii_whitespace()) {
                &stderr
            } else {
                &stdout
            };
            let message: String = crate::smi::escape_control(String::from_utf8_lossy(text).trim())
                .chars()
                .take(MAX_STDERR)
                .collect();
            if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&status) {
                return Err(RunError::Signaled {
                    query,
                    signal,
                    message,
                });
            }
            return Err(RunError::Failed {
                query,
                exit_code: status.code(),
                message,
            });
        }
        Ok(Answer {
            stdout,
            elapsed: started.elapsed(),
        })
    }
}

/// A signal's name (`SIGKILL`), or `signal N` for a number Linux does not name.
fn signal_name(signal: i32) -> String {
    Signal::try_from(signal).map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_owned())
}

/// [`child::spawn_in_group`], its failure worded for `nvidia-smi`.
///
/// # Errors
/// [`RunError::NoDriver`] when there is no such program, [`RunError::Spawn`] otherwise.
pub(crate) fn spawn_in_group(
    program: &Path,
    args: &[&str],
) -> Result<(tokio::process::Child, Option<Pid>), RunError> {
    child::spawn_in_group(program, args).map_err(|e| spawn_error(program, &e))
}

fn spawn_error(program: &Path, e: &std::io::Error) -> RunError {
    match e.kind() {
        std::io::ErrorKind::NotFound => RunError::NoDriver,
        _ => RunError::Spawn {
            program: program.display().to_string(),
            message: e.to_string(),
        },
    }
}

/// The program to start: a path as given, or a bare name found on `PATH`.
fn resolve(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 || program.is_absolute() {
        return Some(program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join("nvidia-smi");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[tokio::test]
    async fn a_missing_binary_means_no_driver() {
        let err = Runner::new("/nonexistent/nvidia-smi")
            .run(&["-L"])
            .await
            .unwrap_err();
        assert_eq!(err, RunError::NoDriver);
        assert_eq!(
            err.to_string(),
            "nvml: nvidia-smi not found (no NVIDIA driver on this host)"
        );
        let err = Runner::new("bcd-no-such-nvidia-smi")
            .run(&["-L"])
            .await
            .unwrap_err();
        assert_eq!(err, RunError::NoDriver);
    }

    #[tokio::test]
    async fn a_failure_carries_its_status_and_words() {
        let dir = tempfile::tempdir().unwrap();
        let smi = script(dir.path(), "echo 'No devices were found' >&2; exit 6");
        let err = Runner::new(smi).run(&["mig", "-lgip"]).await.unwrap_err();
        assert_eq!(
            err,
            RunError::Failed {
                query: "mig -lgip".into(),
                exit_code: Some(6),
                message: "No devices were found".into()
            }
        );
    }

    // nvidia-smi's raw bytes, ESC included, reached status, the log and doctor's output
    // through a failure's message.
    #[tokio::test]
    async fn control_bytes_in_a_failure_are_escaped() {
        let dir = tempfile::tempdir().unwrap();
        let smi = script(
            dir.path(),
            "printf 'bad\\033[2J\\033]0;pwned\\007' >&2; exit 9",
        );
        let err = Runner::new(smi).run(&["-L"]).await.unwrap_err();
        let text = err.to_string();
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text:?}"
        );
        assert!(text.contains("bad\\x1b[2J\\x1b]0;pwned\\x07"), "{text}");
    }

    #[tokio::test]
    async fn a_hung_query_is_killed_with_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let smi = script(
            dir.path(),
            &format!("sleep 300 & echo $! > {}; wait", pid_file.display()),
        );
        let started = Instant::now();
        let err = Runner::new(smi)
            .with_timeout(Duration::from_millis(300))
            .run(&["-q", "-x"])
            .await
            .unwrap_err();
        assert!(matches!(err, RunError::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
        assert!(
            stat.is_empty() || stat.contains(") Z "),
            "the query's child survived: {stat}"
        );
    }

    // What broke: a signal-killed child read "failed (exit status signal):" and the hint
    // table, written for "signal: killed", never matched it.
    #[tokio::test]
    async fn a_sigkilled_child_names_its_signal_and_gets_the_wedged_hint() {
        let dir = tempfile::tempdir().unwrap();
        let smi = script(dir.path(), "kill -KILL $$");
        let err = Runner::new(smi).run(&["-q", "-x"]).await.unwrap_err();
        assert_eq!(
            err,
            RunError::Signaled {
                query: "-q -x".into(),
                signal: 9,
                message: String::new()
            }
        );
        assert_eq!(
            err.to_string(),
            "nvidia-smi -q -x was killed by signal SIGKILL (9)"
        );
        assert_eq!(
            crate::smi::hint::error_hint(&err.to_string()),
            Some("a GPU may be wedged (Xid 79 or 119): gpu.reset or a reboot recovers it")
        );
    }

    // Every way a child ends has its hint: a crash, a timeout, no binary, an output cap.
    #[tokio::test]
    async fn every_way_a_child_ends_has_a_hint() {
        let dir = tempfile::tempdir().unwrap();
        let smi = script(dir.path(), "kill -SEGV $$");
        let err = Runner::new(smi).run(&["-L"]).await.unwrap_err();
        assert!(err.to_string().contains("SIGSEGV (11)"), "{err}");
        assert!(
            crate::smi::hint::error_hint(&err.to_string())
                .unwrap()
                .starts_with("nvidia-smi crashed"),
            "{err}"
        );
        let timeout = RunError::Timeout {
            query: "-q -x".into(),
            after: QUERY_TIMEOUT,
        };
        assert!(crate::smi::hint::error_hint(&timeout.to_string())
            .unwrap()
            .contains("Xid 79 or 119"));
        assert!(
            crate::smi::hint::error_hint(&RunError::NoDriver.to_string())
                .unwrap()
                .contains("--nvidia-smi")
        );
        let long = RunError::TooLong {
            query: "-q -x".into(),
        };
        assert!(
            crate::smi::hint::error_hint(&long.to_string())
                .unwrap()
                .contains("not the nvidia-smi"),
            "{:?}",
            crate::smi::hint::error_hint(&long.to_string())
        );
    }

    #[tokio::test]
    async fn output_past_the_bound_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let smi = script(
            dir.path(),
            &format!("head -c {} /dev/zero", MAX_OUTPUT + 10),
        );
        let err = Runner::new(smi).run(&["-q", "-x"]).await.unwrap_err();
        assert!(matches!(err, RunError::TooLong { .. }), "{err}");
    }
}

/// The one-shot queries running now, for a command that tells its operator what it waits for
/// (see [`oldest_waiting`]). Registered by [`Runner::run`] for as long as the query runs.
pub(crate) mod waiting {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    static RUNNING: Mutex<Vec<(u64, String, Instant, Duration)>> = Mutex::new(Vec::new());
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    /// One running query; dropping it removes it.
    #[derive(Debug)]
    pub struct Waiting(u64);

    impl Waiting {
        /// Registers `query` (its bound `bound`) as running from now.
        pub fn start(query: &str, bound: Duration) -> Self {
            let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if let Ok(mut r) = RUNNING.lock() {
                r.push((id, query.to_owned(), Instant::now(), bound));
            }
            Self(id)
        }
    }

    impl Drop for Waiting {
        fn drop(&mut self) {
            if let Ok(mut r) = RUNNING.lock() {
                r.retain(|(id, ..)| *id != self.0);
            }
        }
    }

    /// The query that has run longest: its arguments, how long it has run, its bound.
    pub(crate) fn oldest() -> Option<(String, Duration, Duration)> {
        let r = RUNNING.lock().ok()?;
        r.iter()
            .min_by_key(|(_, _, started, _)| *started)
            .map(|(_, q, started, bound)| (q.clone(), started.elapsed(), *bound))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// The queries running now, in the order they started.
        fn running() -> Vec<String> {
            let r = RUNNING.lock().unwrap();
            let mut all: Vec<(Instant, String)> =
                r.iter().map(|(_, q, s, _)| (*s, q.clone())).collect();
            all.sort();
            all.into_iter().map(|(_, q)| q).collect()
        }

        #[test]
        fn running_queries_are_registered_in_start_order_until_they_end() {
            // Names no other test uses: the registry is the whole process's.
            let first = Waiting::start("-q -x --test-first", Duration::from_secs(30));
            std::thread::sleep(Duration::from_millis(5));
            let second = Waiting::start("-L --test-second", Duration::from_secs(30));
            let now = running();
            let at = |q: &str| now.iter().position(|r| r == q).unwrap();
            assert!(at("-q -x --test-first") < at("-L --test-second"), "{now:?}");
            drop(first);
            assert!(!running().iter().any(|r| r == "-q -x --test-first"));
            drop(second);
            assert!(!running().iter().any(|r| r == "-L --test-second"));
        }
    }
}

/// The query that has run longest, if any: see [`waiting`].
pub(crate) fn oldest_waiting() -> Option<(String, Duration, Duration)> {
    waiting::oldest()
}
