//! Counting the work a graceful shutdown waits for.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// Counts the persistence work under way: writes sent and not yet answered (until their
/// continuations ran), snapshot saves and deletes, event deletes. A graceful shutdown waits
/// for [`idle`](Self::idle) before closing the stores (the facade's `Persistence::shutdown`
/// does).
///
/// Share one between the journal actor ([`crate::journal::JournalActor::with_in_flight`])
/// and every persistent actor ([`super::PersistenceState::with_in_flight`]). Work started
/// because of other work (a snapshot after a write, the deletes after a snapshot) starts
/// before the work that caused it ends, so the count never drops to zero in between.
#[derive(Debug, Clone, Default)]
pub struct InFlight(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    count: AtomicUsize,
    idle: Notify,
}

/// One piece of work counted by an [`InFlight`]; it ends when dropped.
#[derive(Debug)]
#[must_use = "the work ends when the guard is dropped"]
pub struct InFlightGuard(Arc<Inner>);

impl InFlight {
    /// A counter with nothing under way.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one piece of work until the returned guard is dropped.
    pub fn enter(&self) -> InFlightGuard {
        self.0.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(Arc::clone(&self.0))
    }

    /// Pieces of work under way now.
    pub fn count(&self) -> usize {
        self.0.count.load(Ordering::SeqCst)
    }

    /// Resolves once no work is under way (at once when none is).
    pub async fn idle(&self) {
        loop {
            let notified = self.0.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_waits_for_every_guard() {
        let in_flight = InFlight::new();
        in_flight.idle().await;
        let first = in_flight.enter();
        let second = in_flight.enter();
        assert_eq!(in_flight.count(), 2);
        let waiter = {
            let in_flight = in_flight.clone();
            tokio::spawn(async move { in_flight.idle().await })
        };
        drop(first);
        tokio::task::yield_now().await;
        assert!(
            !waiter.is_finished(),
            "one piece of work is still under way"
        );
        drop(second);
        waiter.await.expect("idle once both ended");
        assert_eq!(in_flight.count(), 0);
    }
}
