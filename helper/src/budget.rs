//! The connection budget: who gets one of the helper's connection slots, before any byte of a
//! connection is read.
//!
//! Modelled on OpenSSH's `MaxStartups`/`PerSourcePenalties`: a connection costs a slot only
//! once its peer's credentials are allowed (refused peers are answered and closed by the accept
//! loop itself, holding nothing); each uid may hold at most [`Budget::per_uid`] slots; and when
//! an allowed peer needs a slot that is not free, the oldest connection that is idle between
//! requests or has not finished a frame gives way. A connection running an operation never
//! gives way, so nothing is stopped halfway.
//!
//! This module must never decide by pid, never read from a socket, and never let a connection
//! that was told to give way start an operation.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// The slots and who holds them.
#[derive(Debug)]
pub struct Budget {
    max: usize,
    per_uid: usize,
    inner: Mutex<Inner>,
    /// Signalled whenever a slot is freed or becomes one that could give way.
    changed: Notify,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    /// By age: ids grow, so the first entry is the oldest connection.
    slots: BTreeMap<u64, Holder>,
}

#[derive(Debug)]
struct Holder {
    uid: u32,
    /// Idle between requests, or still inside the handshake or a frame.
    yieldable: bool,
    /// Told to give way.
    evict: Arc<Notify>,
}

/// A refusal, with the sentence for the peer's `Busy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Full(pub String);

impl Budget {
    /// `max` slots in all, at most `per_uid` of them for one uid (root included).
    pub fn new(max: usize, per_uid: usize) -> Self {
        Self {
            max: max.max(1),
            per_uid: per_uid.clamp(1, max.max(1)),
            inner: Mutex::default(),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a newly accepted allowed peer could get a slot now (a free one, or one that
    /// would give way). The accept loop waits for this before accepting, so that excess
    /// connections wait in the kernel's backlog rather than as open descriptors.
    pub fn could_admit(&self) -> bool {
        let inner = self.lock();
        inner.slots.len() < self.max || inner.slots.values().any(|h| h.yieldable)
    }

    /// Waits until [`Budget::could_admit`] may have changed.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// A slot for a peer of `uid`, making room by telling the oldest yieldable connection (of
    /// this uid when it is at its cap, of anyone when all slots are taken) to give way.
    ///
    /// # Errors
    /// [`Full`] when no slot is free and every holder is running an operation.
    pub fn admit(self: &Arc<Self>, uid: u32) -> Result<Slot, Full> {
        let mut inner = self.lock();
        let of_uid = inner.slots.values().filter(|h| h.uid == uid).count();
        if of_uid >= self.per_uid {
            if !evict_oldest(&mut inner, |h| h.uid == uid) {
                return Err(Full(format!(
                    "uid {uid} already has {of_uid} connections open, all running operations \
                     (at most {} per user)",
                    self.per_uid
                )));
            }
        } else if inner.slots.len() >= self.max && !evict_oldest(&mut inner, |_| true) {
            return Err(Full(format!(
                "all {} connections are running operations",
                self.max
            )));
        }
        let id = inner.next;
        inner.next += 1;
        let evict = Arc::new(Notify::new());
        inner.slots.insert(
            id,
            Holder {
                uid,
                yieldable: true,
                evict: evict.clone(),
            },
        );
        Ok(Slot {
            budget: self.clone(),
            id,
            evict,
        })
    }

    /// Slots held now.
    pub fn held(&self) -> usize {
        self.lock().slots.len()
    }
}

/// Removes the oldest yieldable holder that `which` selects and tells it to go.
fn evict_oldest(inner: &mut Inner, which: impl Fn(&Holder) -> bool) -> bool {
    let Some(id) = inner
        .slots
        .iter()
        .find(|(_, h)| h.yieldable && which(h))
        .map(|(id, _)| *id)
    else {
        return false;
    };
    if let Some(h) = inner.slots.remove(&id) {
        // notify_one keeps a permit, so a holder not waiting right now still sees it.
        h.evict.notify_one();
    }
    true
}

/// One held slot; dropping it frees the slot.
#[derive(Debug)]
pub struct Slot {
    budget: Arc<Budget>,
    id: u64,
    evict: Arc<Notify>,
}

impl Slot {
    /// Marks the connection as running an operation, so it will not be told to give way.
    /// `false` when it was already told to: it must then close without starting anything.
    pub fn begin_work(&self) -> bool {
        let mut inner = self.budget.lock();
        match inner.slots.get_mut(&self.id) {
            Some(h) => {
                h.yieldable = false;
                true
            }
            None => false,
        }
    }

    /// Marks the connection as idle again (its answer was sent).
    pub fn end_work(&self) {
        let mut inner = self.budget.lock();
        if let Some(h) = inner.slots.get_mut(&self.id) {
            h.yieldable = true;
        }
        drop(inner);
        self.budget.changed.notify_waiters();
    }

    /// Resolves when the connection has been told to give way.
    pub async fn evicted(&self) {
        self.evict.notified().await;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.budget.lock().slots.remove(&self.id);
        self.budget.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_oldest_idle_connection_gives_way_and_a_working_one_never_does() {
        let b = Arc::new(Budget::new(2, 2));
        let first = b.admit(1000).unwrap();
        let second = b.admit(1000).unwrap();
        assert!(second.begin_work());
        // A third peer: the oldest idle holder (first) is told to go.
        let third = b.admit(0).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(1), first.evicted())
            .await
            .expect("the oldest idle connection was told to give way");
        assert!(
            !first.begin_work(),
            "an evicted connection must not start work"
        );
        assert!(third.begin_work());
        // Both holders run operations: nobody gives way.
        let err = b.admit(0).unwrap_err();
        assert!(err.0.contains("running operations"), "{}", err.0);
        assert!(!b.could_admit());
        second.end_work();
        assert!(b.could_admit());
        drop(first);
        assert_eq!(b.held(), 2);
    }

    #[test]
    fn one_uid_makes_room_only_among_its_own_connections() {
        let b = Arc::new(Budget::new(4, 2));
        let root = b.admit(0).unwrap();
        let _a = b.admit(1000).unwrap();
        let _b = b.admit(1000).unwrap();
        // uid 1000 is at its cap: its own oldest gives way, root's idle one does not.
        let _c = b.admit(1000).unwrap();
        assert!(root.begin_work(), "root's connection was not evicted");
        assert_eq!(b.held(), 3);
    }
}
