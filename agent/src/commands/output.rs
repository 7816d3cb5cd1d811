//! Where every subcommand's output goes: stdout for the answer, with a closed pipe
//! (`bcd hardware | head`) ending quietly, and one way to print JSON.

use std::io::Write;

/// Writes to stdout; a closed pipe ends quietly.
pub fn print(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// Prints `value` as pretty JSON and a newline. Returns `false` (having said so on stderr,
/// naming `what`) when it cannot be encoded; the caller exits with status 1 then.
pub fn print_json<T: serde::Serialize + ?Sized>(value: &T, what: &str) -> bool {
    match serde_json::to_string_pretty(value) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
