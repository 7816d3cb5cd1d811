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
