//! The rate limit of every line the kernel log makes bcd write: per kind and device, one line
//! for the first record of a [`LOG_WINDOW`], one summary line for the others when the window
//! ends. A storm of XIDs or SXids is a handful of lines, never one a record.

use std::time::Duration;

/// Per GPU, the first XID of this window is logged in full, the rest are counted and logged
/// as one line ("N more XIDs on GPU-...") when the window ends.
pub const LOG_WINDOW: Duration = Duration::from_secs(10);
/// What a kernel log line is about, for [`KmsgLogLimit`]: its kind in the plural ("XIDs",
/// "SXids", ...) and the device (a GPU's UUID, a switch's or an unknown bus's address).
pub type LogKey = (&'static str, String);

/// The limiter. Lines are the caller's, already escaped to one line
/// ([`crate::smi::escape_line`]).
#[derive(Debug, Default)]
pub struct KmsgLogLimit {
    windows: std::collections::BTreeMap<LogKey, LogWindow>,
}

#[derive(Debug)]
struct LogWindow {
    started: std::time::Instant,
    more: u64,
    latest: String,
}

impl KmsgLogLimit {
    /// A record of `key` described by `line`: returns the lines to log now (the summary of
    /// the window that ended, then `line` when it opens a window).
    pub fn record(&mut self, key: LogKey, line: String, now: std::time::Instant) -> Vec<String> {
        let mut out = self.ended(now, Some(&key));
        match self.windows.get_mut(&key) {
            Some(w) => {
                w.more += 1;
                w.latest = line;
            }
            None => {
                self.windows.insert(
                    key,
                    LogWindow {
                        started: now,
                        more: 0,
                        latest: String::new(),
                    },
                );
                out.push(line);
            }
        }
        out
    }

    /// The summaries of the windows that ended by `now` (all keys, or only `only`).
    pub fn ended(&mut self, now: std::time::Instant, only: Option<&LogKey>) -> Vec<String> {
        let mut out = Vec::new();
        self.windows.retain(|key, w| {
            let done = now.duration_since(w.started) >= LOG_WINDOW && only.is_none_or(|o| o == key);
            if done && w.more > 0 {
                out.push(format!(
                    "{} more {} on {} in the last {}s; the latest: {}",
                    w.more,
                    key.0,
                    key.1,
                    LOG_WINDOW.as_secs(),
                    w.latest
                ));
            }
            !done
        });
        out
    }

    /// When the next window ends, if one is open.
    pub fn next_end(&self) -> Option<std::time::Instant> {
        self.windows.values().map(|w| w.started + LOG_WINDOW).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bcd_protocol::GpuUuid;
    use std::time::Instant;

    // What broke: every XID of a storm logged its own WARN line.
    #[test]
    fn an_xid_storm_logs_one_line_then_a_count() {
        let mut log = KmsgLogLimit::default();
        let t0 = Instant::now();
        let gpu: GpuUuid = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b".parse().unwrap();
        let mut lines = Vec::new();
        for i in 0..1000u64 {
            lines.extend(log.record(
                ("XIDs", gpu.to_string()),
                format!("Xid 13 on GPU {gpu}: n={i}"),
                t0 + Duration::from_millis(i),
            ));
        }
        assert_eq!(lines, vec![format!("Xid 13 on GPU {gpu}: n=0")]);
        assert!(log.ended(t0 + Duration::from_secs(5), None).is_empty());
        assert_eq!(log.next_end(), Some(t0 + LOG_WINDOW));
        assert_eq!(
            log.ended(t0 + LOG_WINDOW, None),
            vec![format!(
                "999 more XIDs on {gpu} in the last 10s; the latest: Xid 13 on GPU {gpu}: n=999"
            )]
        );
        // The next XID after the window opens a new one and is logged in full.
        assert_eq!(
            log.record(
                ("XIDs", gpu.to_string()),
                "again".into(),
                t0 + LOG_WINDOW * 2
            )
            .len(),
            1
        );
    }
}
