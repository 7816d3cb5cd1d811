//! When the node service collects the inventory: every 10 minutes (ECC counters, row
//! remapping and MIG state change without an event bcd sees), about 2 s after an XID (a burst
//! is read once), after a host change, and on request. Never two collections at once.

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

/// The periodic interval.
pub const INVENTORY_INTERVAL: Duration = Duration::from_secs(600);
/// How long after the first XID of a burst the collection runs.
pub const XID_DEBOUNCE: Duration = Duration::from_secs(2);

/// Why a collection is wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// An XID was read: the GPU's counters move with it. Debounced.
    Xid,
    /// Something on the host changed (a bind, a release, a reset, a VM started).
    HostChange,
    /// An operator or client asked (`inventory.refresh`).
    Refresh,
}

/// Asks the scheduler for collections. Cheap to clone; requests never block.
#[derive(Debug, Clone)]
pub struct SchedulerHandle {
    tx: mpsc::UnboundedSender<Trigger>,
}

impl SchedulerHandle {
    /// Asks for a collection. A request after the scheduler stopped is dropped.
    pub fn request(&self, trigger: Trigger) {
        let _ = self.tx.send(trigger);
    }
}

/// The scheduler's loop; run it with [`Scheduler::run`].
#[derive(Debug)]
pub struct Scheduler {
    rx: mpsc::UnboundedReceiver<Trigger>,
    interval: Duration,
    debounce: Duration,
}

impl Scheduler {
    /// A scheduler with the standard interval and debounce.
    pub fn new() -> (SchedulerHandle, Scheduler) {
        Self::with_timing(INVENTORY_INTERVAL, XID_DEBOUNCE)
    }

    /// A scheduler with other timing (tests, configuration).
    pub fn with_timing(interval: Duration, debounce: Duration) -> (SchedulerHandle, Scheduler) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            SchedulerHandle { tx },
            Scheduler {
                rx,
                interval,
                debounce,
            },
        )
    }

    /// Collects at once, then whenever the rules say, until every handle is dropped.
    /// `collect` runs inside this loop, so two collections never overlap; requests that
    /// arrive meanwhile are coalesced into one collection a debounce after it ends.
    pub async fn run<F, Fut>(mut self, mut collect: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = ()>,
    {
        let mut due = Instant::now();
        loop {
            if due <= Instant::now() {
                collect().await;
                // Whatever arrived during the collection is served once, a little later.
                let mut pending = false;
                while self.rx.try_recv().is_ok() {
                    pending = true;
                }
                due = Instant::now()
                    + if pending {
                        self.debounce
                    } else {
                        self.interval
                    };
                continue;
            }
            tokio::select! {
                trigger = self.rx.recv() => {
                    let Some(trigger) = trigger else { return };
                    let wanted = match trigger {
                        Trigger::Xid => Instant::now() + self.debounce,
                        Trigger::HostChange | Trigger::Refresh => Instant::now(),
                    };
                    // An earlier deadline wins: a burst keeps its first XID's deadline.
                    due = due.min(wanted);
                }
                () = tokio::time::sleep_until(due) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn counting() -> (Arc<AtomicUsize>, impl FnMut() -> std::future::Ready<()>) {
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        (count, move || {
            c.fetch_add(1, Ordering::SeqCst);
            std::future::ready(())
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_xids_gives_one_collection_two_seconds_later() {
        let (handle, scheduler) = Scheduler::new();
        let (count, collect) = counting();
        tokio::spawn(scheduler.run(collect));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            count.load(Ordering::SeqCst),
            1,
            "the first collection runs at start"
        );
        for _ in 0..1000 {
            handle.request(Trigger::Xid);
        }
        tokio::time::sleep(Duration::from_millis(1900)).await;
        assert_eq!(count.load(Ordering::SeqCst), 1, "not before the debounce");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            count.load(Ordering::SeqCst),
            2,
            "one collection for the whole burst"
        );
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(count.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn collections_run_every_ten_minutes() {
        let (_handle, scheduler) = Scheduler::new();
        let (count, collect) = counting();
        tokio::spawn(scheduler.run(collect));
        tokio::time::sleep(Duration::from_secs(600 * 3 + 1)).await;
        assert_eq!(count.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refresh_during_a_collection_does_not_start_a_second_at_once() {
        let (handle, scheduler) = Scheduler::new();
        let running = Arc::new(AtomicUsize::new(0));
        let max_running = Arc::new(AtomicUsize::new(0));
        let count = Arc::new(AtomicUsize::new(0));
        let (r, m, c) = (running.clone(), max_running.clone(), count.clone());
        tokio::spawn(scheduler.run(move || {
            let (r, m, c) = (r.clone(), m.clone(), c.clone());
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(5)).await;
                c.fetch_add(1, Ordering::SeqCst);
                r.fetch_sub(1, Ordering::SeqCst);
            }
        }));
        tokio::time::sleep(Duration::from_secs(1)).await;
        handle.request(Trigger::Refresh);
        handle.request(Trigger::Refresh);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            count.load(Ordering::SeqCst),
            1,
            "the refresh waits for the running collection"
        );
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            count.load(Ordering::SeqCst),
            2,
            "both refreshes are served by one collection"
        );
        assert_eq!(max_running.load(Ordering::SeqCst), 1, "never two at once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_change_collects_at_once() {
        let (handle, scheduler) = Scheduler::new();
        let (count, collect) = counting();
        tokio::spawn(scheduler.run(collect));
        tokio::time::sleep(Duration::from_secs(30)).await;
        handle.request(Trigger::HostChange);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(count.load(Ordering::SeqCst), 2);
    }
}
