//! What `bcd node` logs: one line at info when it serves (its default level; the one-shot
//! commands stay at warn), and every line a JSON object with `--log-format json`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::processes::{NodeSandbox, Reaped};

/// Starts `bcd node` on a sandbox of the demo host (no helper answers) with `extra` global
/// options, and returns the stderr lines up to and including the first that contains `until`.
fn node_lines(extra: &[&str], until: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let s = NodeSandbox::new(dir.path(), "hgx-h100");
    let mut child = Reaped(
        Command::new(env!("CARGO_BIN_EXE_bcd"))
            .arg("--host")
            .arg(&s.host)
            .arg("--data-dir")
            .arg(&s.data)
            .arg("--cdi-dir")
            .arg(&s.cdi)
            .arg("--helper-socket")
            .arg(&s.helper_sock)
            .arg("--api-socket")
            .arg(&s.api_sock)
            .args(extra)
            .args(["node", "--api-group", "root"])
            .env_remove("BCD_LOG")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr = child.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lines = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => {
                let done = line.contains(until);
                lines.push(line);
                if done {
                    return lines;
                }
            }
            Err(_) => break,
        }
    }
    panic!("no line with {until:?} within 30 s: {lines:#?}");
}

// What broke: bcd node logged at warn by default, so it said nothing when it started serving.
#[test]
fn the_node_says_in_one_info_line_what_it_serves() {
    let lines = node_lines(&[], "serving the API on");
    let serving = lines.last().unwrap();
    assert!(serving.contains(" INFO "), "{serving}");
    assert!(serving.contains("; 8 GPU(s); helper at "), "{serving}");
    assert!(
        serving.contains(concat!("bcd node ", env!("CARGO_PKG_VERSION"), ": ")),
        "{serving}"
    );
}

// What broke: logs were text only; a log shipper had to parse free text.
#[test]
fn log_format_json_writes_one_object_per_line() {
    let lines = node_lines(&["--log-format", "json"], "serving the API on");
    for line in &lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v["level"].is_string() && v["timestamp"].is_string(),
            "{line}"
        );
    }
    let last: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(last["level"], "INFO");
    assert!(last["fields"]["message"]
        .as_str()
        .unwrap()
        .contains("; 8 GPU(s)"));
}
