//! Where every subcommand's output goes: stdout for the answer, with a closed pipe
//! (`bcd hardware | head`) ending quietly, and one way to print JSON.

use std::io::Write;

/// Writes to stdout; a closed pipe ends quietly.
pub fn print(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// Prints `value` as pretty JSON with its `schema_version` ([`crate::document`]) and a newline.
/// Returns `false` (having said so on stderr, naming `what`) when it cannot be encoded; the
/// caller exits with [`FAILED`] then.
pub fn print_json<T: serde::Serialize + ?Sized>(value: &T, what: &str) -> bool {
    match serde_json::to_string_pretty(&crate::document::versioned(value)) {
        Ok(json) => {
            print(&format!("{json}\n"));
            true
        }
        Err(e) => {
            eprintln!("bcd: cannot encode {what}: {e}");
            false
        }
    }
}

/// Exit status 1: bcd did its job and found a problem (a GPU not healthy, a check failed).
pub const PROBLEM: u8 = 1;
/// Exit status 3: bcd could not do its job (nvidia-smi failed, a reset failed, the node or the
/// helper could not be reached or refused). Usage errors are clap's 2.
pub const FAILED: u8 = 3;

/// The error codes of the failures bcd finds itself (a refusal of the node service carries
/// the service's own code, see the API's table in docs/node-service.md).
pub mod code {
    /// nvidia-smi failed, timed out or is missing while the GPUs need it.
    pub const NVIDIA_SMI_FAILED: &str = "nvidia-smi-failed";
    /// No NVIDIA driver on this host (no `/proc/driver/nvidia`, no nvidia-smi).
    pub const NO_DRIVER: &str = "no-driver";
    /// Nothing answers on the node service's socket.
    pub const NODE_UNREACHABLE: &str = "node-unreachable";
    /// The node service answered something that is not its API.
    pub const NODE_ANSWERED_BADLY: &str = "node-answered-badly";
    /// The root helper did not answer or refused.
    pub const HELPER_FAILED: &str = "helper-failed";
    /// The answer could not be encoded or the process could not start its runtime.
    pub const INTERNAL: &str = "internal";
}

/// Says why bcd could not do its job and returns [`FAILED`]: with `--json` (`json`) the error
/// document `{"schema_version", "error": {"code", "message"}}` on stdout (a script reads one
/// JSON value whatever happened), otherwise `bcd: <message>` on stderr.
pub fn fail(json: bool, code: &str, message: &str) -> std::process::ExitCode {
    if json {
        let doc = crate::document::ErrorDocument::new(code, message);
        match serde_json::to_string_pretty(&doc) {
            Ok(text) => print(&format!("{text}\n")),
            Err(_) => eprintln!("bcd: {message}"),
        }
    } else {
        eprintln!("bcd: {message}");
    }
    std::process::ExitCode::from(FAILED)
}

/// [`fail`] for an error of the node service's client: its code is the service's own for a
/// refusal, `node-unreachable` or `node-answered-badly` otherwise.
pub fn fail_api(json: bool, e: &crate::node::client::ApiError) -> std::process::ExitCode {
    use crate::node::client::ApiError;
    let code = match e {
        ApiError::Connect { .. } => code::NODE_UNREACHABLE,
        ApiError::Refused { code, .. } => code.as_str(),
        ApiError::Bad { .. } => code::NODE_ANSWERED_BADLY,
    };
    fail(json, code, &e.to_string())
}

/// Asks a running `bcd node` (`method path` on `socket`, within `bound`) for what a command
/// would otherwise read itself. `None` when no node listens (the ordinary case, said nowhere)
/// or when it answers badly or late (said on stderr): the caller then reads the GPUs directly.
pub async fn ask_node<B: serde::Serialize, T: serde::de::DeserializeOwned>(
    socket: &std::path::Path,
    method: &str,
    path: &str,
    body: Option<&B>,
    bound: std::time::Duration,
) -> Option<T> {
    let asked = tokio::time::timeout(
        bound,
        crate::node::client::call_as::<B, T>(socket, method, path, body),
    )
    .await;
    match asked {
        Ok(Ok(answer)) => Some(answer),
        Ok(Err(crate::node::client::ApiError::Connect { .. })) => None,
        Ok(Err(e)) => {
            eprintln!("bcd: {e}; reading the GPUs directly");
            None
        }
        Err(_) => {
            eprintln!(
                "bcd: the bcd node service at {} did not answer within {}s; reading the GPUs directly",
                socket.display(),
                bound.as_secs()
            );
            None
        }
    }
}

/// How long a command waits on `nvidia-smi` before it says so.
pub const SAY_WAITING_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// The line a command shows while it waits: `waiting for nvidia-smi -q -x: 12 s of 30 s`.
pub fn waiting_line(
    query: &str,
    waited: std::time::Duration,
    bound: std::time::Duration,
) -> String {
    // An option's value is left out: `--query-gpu=uuid,...` shows as `--query-gpu`.
    let short: Vec<&str> = query
        .split(' ')
        .map(|a| match a.split_once('=') {
            Some((flag, _)) if a.starts_with("--") => flag,
            _ => a,
        })
        .collect();
    format!(
        "waiting for nvidia-smi {}: {} s of {} s",
        crate::smi::escape_control(&short.join(" ")),
        waited.as_secs(),
        bound.as_secs()
    )
}

/// Runs `work`; while it waits on an `nvidia-smi` query for more than [`SAY_WAITING_AFTER`],
/// says so on stderr, updating the line in place, and clears it at the end. Only on a terminal
/// and never with `--json`: a script reading stderr gets nothing of the kind.
pub async fn saying_what_it_waits_for<F: std::future::Future>(json: bool, work: F) -> F::Output {
    use std::io::IsTerminal;
    if json || !std::io::stderr().is_terminal() {
        return work.await;
    }
    let mut shown = false;
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
    tokio::pin!(work);
    let out = loop {
        tokio::select! {
            out = &mut work => break out,
            _ = tick.tick() => {
                if let Some((query, waited, bound)) = crate::smi::runner::oldest_waiting() {
                    if waited >= SAY_WAITING_AFTER {
                        eprint!("\r\x1b[K{}", waiting_line(&query, waited, bound));
                        shown = true;
                    }
                }
            }
        }
    };
    if shown {
        eprint!("\r\x1b[K");
    }
    out
}

/// How long a step runs before its progress line shows (a quick answer shows none).
pub const PROGRESS_AFTER: std::time::Duration = std::time::Duration::from_millis(300);

/// The line a long step shows while it runs: `| resetting GPU-…: 3.2 s`, the first character
/// turning with `frame`.
pub fn progress_line(what: &str, elapsed: std::time::Duration, frame: usize) -> String {
    const TURNS: [char; 4] = ['|', '/', '-', '\\'];
    format!(
        "{} {}: {:.1} s",
        TURNS[frame % TURNS.len()],
        crate::smi::escape_control(what),
        elapsed.as_secs_f64()
    )
}

/// Runs `work` (a step the node service and the helper carry out: a reset, a vfio-pci step, a
/// VM); while it runs longer than [`PROGRESS_AFTER`], says on stderr what it waits for and
/// for how long, in place, and clears the line before the result is printed. Only on a
/// terminal and never with `--json`: a script reading the output gets nothing of the kind.
pub async fn with_progress<F: std::future::Future>(json: bool, what: &str, work: F) -> F::Output {
    use std::io::IsTerminal;
    if json || !std::io::stderr().is_terminal() {
        return work.await;
    }
    let started = tokio::time::Instant::now();
    let mut shown = false;
    let mut frame = 0;
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
    tokio::pin!(work);
    let out = loop {
        tokio::select! {
            out = &mut work => break out,
            _ = tick.tick() => {
                let elapsed = started.elapsed();
                if elapsed >= PROGRESS_AFTER {
                    eprint!("\r\x1b[K{}", progress_line(what, elapsed, frame));
                    frame += 1;
                    shown = true;
                }
            }
        }
    };
    if shown {
        eprint!("\r\x1b[K");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_line_names_the_step_and_its_time_and_turns() {
        let line = progress_line(
            "resetting GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b",
            std::time::Duration::from_millis(3_240),
            0,
        );
        assert_eq!(
            line,
            "| resetting GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b: 3.2 s"
        );
        assert!(progress_line("x", std::time::Duration::ZERO, 1).starts_with('/'));
        assert!(!progress_line("a\x1b[2Jb", std::time::Duration::ZERO, 0).contains('\x1b'));
    }

    #[test]
    fn the_waiting_line_names_the_query_and_its_bound() {
        let line = waiting_line(
            "-q -x",
            std::time::Duration::from_millis(12_400),
            std::time::Duration::from_secs(30),
        );
        assert_eq!(line, "waiting for nvidia-smi -q -x: 12 s of 30 s");
        let line = waiting_line(
            "--query-gpu=uuid,memory.total --format=csv,noheader",
            std::time::Duration::from_secs(3),
            std::time::Duration::from_secs(30),
        );
        assert_eq!(
            line,
            "waiting for nvidia-smi --query-gpu --format: 3 s of 30 s"
        );
    }
}
