//! The helper watch: the node pings `bcd-helper` through the [`Helper`](crate::helper_client::Helper)
//! seam, notes whether it answers, and settles the journal's open entries when it answers
//! again after it did not, the way the start-up does ([`Passthrough::reconcile`]).
//!
//! Pings come every [`PING_WHILE_OPEN`] while an entry is open (a stranded GPU is given back
//! within seconds of the helper's return) and every [`PING_IDLE`] otherwise: longer than a
//! socket-activated helper's idle exit (30 s by default), so the watch does not keep an idle
//! helper running.

use std::time::Duration;

use super::{Passthrough, ReconcileReport};

/// How often the watch pings while the journal holds an open entry.
pub(crate) const PING_WHILE_OPEN: Duration = Duration::from_secs(5);
/// How often it pings otherwise.
pub(crate) const PING_IDLE: Duration = Duration::from_secs(60);

/// What the watch last learned of the helper.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum HelperSeen {
    /// Not pinged yet.
    #[default]
    NotYet,
    /// It answered the last ping.
    Answering,
    /// The last ping got no answer: the connection's error, as the operator reads it.
    Failing(String),
}

impl Passthrough {
    /// What the last ping found.
    pub fn helper_seen(&self) -> HelperSeen {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Pings the helper once and notes the answer. When it answers and the one before did
    /// not (or there was none), and a journal entry is open, settles the open entries
    /// ([`Passthrough::reconcile`], after the step in flight, if any) and returns what that
    /// did; `None` when nothing was settled. An entry that still cannot be settled waits for
    /// the helper's next return (or the next start): a helper that answers is not asked again
    /// every few seconds about a function its kernel will not probe.
    pub(crate) async fn check_helper(&self) -> Option<ReconcileReport> {
        let now = match self.helper.ping().await {
            Ok(_) => HelperSeen::Answering,
            Err(e) => HelperSeen::Failing(e.to_string()),
        };
        let before = match self.seen.lock() {
            Ok(mut seen) => std::mem::replace(&mut *seen, now.clone()),
            Err(_) => HelperSeen::NotYet,
        };
        match (&before, &now) {
            (HelperSeen::Answering, HelperSeen::Failing(why))
            | (HelperSeen::NotYet, HelperSeen::Failing(why)) => {
                tracing::warn!("bcd-helper does not answer: {why}");
            }
            (HelperSeen::Failing(_), HelperSeen::Answering) => {
                tracing::info!("bcd-helper answers again");
            }
            _ => {}
        }
        if now != HelperSeen::Answering
            || before == HelperSeen::Answering
            || self.open_entries().is_empty()
        {
            return None;
        }
        match self.reconcile().await {
            Ok(report) => {
                for sentence in &report.sentences {
                    tracing::warn!("passthrough journal: {sentence}");
                }
                Some(report)
            }
            Err(e) => {
                tracing::error!("passthrough journal: {e}");
                None
            }
        }
    }

    /// Runs [`Passthrough::check_helper`] at once and then after every pause: `while_open`
    /// while an entry is open, `idle` otherwise. Never returns.
    ///
    /// # Cancel safety
    /// As a passthrough step's: a settling cut off by dropping this is itself settled later.
    pub async fn watch_helper(&self, while_open: Duration, idle: Duration) {
        loop {
            self.check_helper().await;
            let pause = if self.open_entries().is_empty() {
                idle
            } else {
                while_open
            };
            tokio::time::sleep(pause).await;
        }
    }
}
