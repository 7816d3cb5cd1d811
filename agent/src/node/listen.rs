//! Accepting connections without spinning and without bound: the API socket and the metrics
//! listener both accept through [`serve`].
//!
//! - **A cap per listener.** At most `cap` connections are served at once; the next accept
//!   waits for one to finish, and the connections beyond wait in the kernel's backlog, where
//!   they cost the service no file descriptor and no memory.
//! - **Back-off on exhaustion.** When the process (`EMFILE`) or the system (`ENFILE`) has no
//!   file descriptor left, or the kernel no memory for a socket (`ENOBUFS`, `ENOMEM`), the
//!   pending connection stays in the backlog and the listener stays readable: retrying at once
//!   would spin a core. The loop waits [`BACKOFF_FIRST`], doubling to [`BACKOFF_LAST`], and
//!   logs once when such an episode starts and once when it ends.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

/// The first wait after an accept failed for want of file descriptors.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(10);
/// The longest wait between two accepts while descriptors stay short.
pub const BACKOFF_LAST: Duration = Duration::from_secs(1);
/// How long accepting must work again, without a refusal, before an episode counts as over
/// (and is logged as over): a descriptor freed for a moment under a flood is not the end of it.
pub const EPISODE_QUIET: Duration = Duration::from_secs(5);

/// What one listener has been through, shared with `status`.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// `true` while accepts fail for want of file descriptors.
    pub starved: AtomicBool,
    /// Episodes of descriptor exhaustion so far.
    pub episodes: AtomicU64,
    /// Accepts that failed for want of descriptors.
    pub refused: AtomicU64,
}

/// Whether an accept error means "no resources now" (retrying at once would spin).
pub fn is_exhaustion(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Accepts with `accept` for ever, at most `cap` connections at once, each handled by the
/// future `handle` makes (spawned; it holds one of the `cap` places until it ends).
///
/// `what` names the listener in the log (`the API socket /run/bcd/bcd.sock`).
///
/// # Cancel safety
/// Dropping the future stops accepting; connections being handled run on.
pub async fn serve<S, A, AF, H, HF>(
    what: String,
    cap: usize,
    stats: Arc<ListenerStats>,
    mut accept: A,
    mut handle: H,
) where
    A: FnMut() -> AF,
    AF: Future<Output = io::Result<S>>,
    H: FnMut(S) -> Option<HF>,
    HF: Future<Output = ()> + Send + 'static,
{
    let places = Arc::new(Semaphore::new(cap));
    let mut backoff = BACKOFF_FIRST;
    let mut starved_since: Option<Instant> = None;
    let mut last_refused = Instant::now();
    loop {
        // Never closed: the semaphore lives in this loop.
        let Ok(place) = places.clone().acquire_owned().await else {
            return;
        };
        match accept().await {
            Ok(stream) => {
                // An episode ends only once accepting has worked for a while: a descriptor
                // freed for a moment under a flood is not the end of it.
                if let Some(since) =
                    starved_since.filter(|_| last_refused.elapsed() >= EPISODE_QUIET)
                {
                    starved_since = None;
                    stats.starved.store(false, Ordering::Relaxed);
                    tracing::warn!(
                        "{what}: accepting connections again after {:.1}s without file descriptors",
                        since.elapsed().as_secs_f64()
                    );
                }
                backoff = BACKOFF_FIRST;
                if let Some(work) = handle(stream) {
                    tokio::spawn(async move {
                        work.await;
                        drop(place);
                    });
                }
            }
            Err(e) if is_exhaustion(&e) => {
                drop(place);
                stats.refused.fetch_add(1, Ordering::Relaxed);
                last_refused = Instant::now();
                if starved_since.is_none() {
                    starved_since = Some(Instant::now());
                    stats.starved.store(true, Ordering::Relaxed);
                    stats.episodes.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(
                        "{what}: cannot accept a connection ({e}); waiting up to {}s between tries until descriptors are free (is LimitNOFILE= too low, or is something leaking them?)",
                        BACKOFF_LAST.as_secs()
                    );
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_LAST);
            }
            // A peer that gave up before its accept (ECONNABORTED) and the like: the next
            // connection is unaffected.
            Err(e) => {
                drop(place);
                tracing::debug!("{what}: accept failed: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    // An accept that failed with EMFILE was retried at once, for ever: 91k accept4 calls in
    // 3 s. Exhaustion now waits, doubling, and counts one episode.
    #[tokio::test(start_paused = true)]
    async fn an_exhausted_accept_backs_off_instead_of_spinning() {
        let calls = Arc::new(Mutex::new(0u32));
        let stats = Arc::new(ListenerStats::default());
        let counted = calls.clone();
        let task = tokio::spawn(serve(
            "test".to_owned(),
            4,
            stats.clone(),
            move || {
                *counted.lock().unwrap() += 1;
                async { Err::<(), _>(io::Error::from_raw_os_error(libc::EMFILE)) }
            },
            |()| Some(async {}),
        ));
        tokio::time::sleep(Duration::from_secs(10)).await;
        task.abort();
        let calls = *calls.lock().unwrap();
        // 10 ms, 20, 40, ... then once a second: about 17 tries in 10 s, not millions.
        assert!((5..40).contains(&calls), "{calls} accepts in 10 s");
        assert_eq!(stats.episodes.load(Ordering::Relaxed), 1);
        assert!(stats.starved.load(Ordering::Relaxed));
    }

    // Every accepted connection was served at once, however many: at most `cap` now.
    #[tokio::test(start_paused = true)]
    async fn no_more_than_the_cap_are_served_at_once() {
        let active = Arc::new(Mutex::new((0u32, 0u32)));
        let seen = active.clone();
        let task = tokio::spawn(serve(
            "test".to_owned(),
            3,
            Arc::new(ListenerStats::default()),
            || async { Ok(()) },
            move |()| {
                let seen = seen.clone();
                Some(async move {
                    {
                        let mut a = seen.lock().unwrap();
                        a.0 += 1;
                        a.1 = a.1.max(a.0);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    seen.lock().unwrap().0 -= 1;
                })
            },
        ));
        tokio::time::sleep(Duration::from_secs(2)).await;
        task.abort();
        assert_eq!(active.lock().unwrap().1, 3);
    }
}
