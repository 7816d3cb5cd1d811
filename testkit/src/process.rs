//! Children, waits and ports for tests that start processes: a child killed when the test
//! ends, bounded waits that fail naming what did not happen, a free loopback port, a Unix
//! socket's listening state read without connecting, and an append-only record file.

use std::io::Write as _;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// Kills a child when dropped, so a failing test leaves no process behind.
#[derive(Debug)]
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback address (`127.0.0.1:PORT`) nothing listens on now.
pub fn free_port() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().to_string()
}

/// Polls `ready` every 10 ms; fails the test naming `what` past `bound`.
pub fn wait_for(what: &str, bound: Duration, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(
            started.elapsed() < bound,
            "{what} did not happen within {bound:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for a Unix socket at `path` to be listening (its file appears a moment before the
/// `listen` call, and a stale file may be there from the start), read from `/proc/net/unix`
/// so that waiting opens no connection.
pub fn wait_listening(path: &Path, bound: Duration) {
    const ACCEPTING: &str = "00010000";
    let want = path.display().to_string();
    wait_for(&format!("{want} listening"), bound, || {
        let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
        table.lines().any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() >= 8 && cols[3] == ACCEPTING && cols[7] == want
        })
    });
}

/// Appends one line to a record file (created when missing).
pub fn append_line(path: &Path, line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

/// The record file's lines (none when it is missing).
pub fn recorded(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}
