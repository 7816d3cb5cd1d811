//! The helper watch: the node pings `bcd-helper` through the [`Helper`](crate::helper_client::Helper)
//! seam, notes whether it answers, and settles the journal's open entries the way the start-up
//! does ([`Passthrough::reconcile`]) at the first ping answered after the helper was away (or
//! the first ping at all), and at any answered ping that finds an open entry no settling has
//! tried yet: an entry left open while the helper was down between two pings that both found
//! it answering (a socket-activated helper is back at the next connection) is settled at the
//! next one.
//!
//! Pings come every [`PING_WHILE_OPEN`] while an entry is open (a stranded GPU is given back
//! within seconds of the helper's return; a step that leaves an entry open wakes the watch at
//! once) and every [`PING_IDLE`] otherwise: longer than a socket-activated helper's idle exit
//! (30 s by default), so the watch does not keep an idle helper running.

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

    /// Pings the helper once and notes the answer. When it answers and an open journal entry
    /// has not been tried since the helper last came back (every entry, after a ping that
    /// failed or at the first ping; else one a step left open since), settles the open entries
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
        if before != HelperSeen::Answering {
            // Away, or never asked: at its return every open entry is tried again.
            self.set_tried(Vec::new());
        }
        if now != HelperSeen::Answering {
            return None;
        }
        let tried = self.tried.lock().map(|t| t.clone()).unwrap_or_default();
        if self.open_entries().iter().all(|e| tried.contains(e)) {
            return None;
        }
        let settled = match self.reconcile().await {
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
        };
        // What is open now was tried while the helper answered.
        self.set_tried(self.open_entries());
        settled
    }

    fn set_tried(&self, entries: Vec<super::journal::Entry>) {
        if let Ok(mut tried) = self.tried.lock() {
            *tried = entries;
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
            // A step that leaves an entry open ends an idle pause: its GPU may be on no
            // driver, and the helper may be back already.
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = self.opened.notified(), if pause == idle => {}
            }
        }
    }
}
