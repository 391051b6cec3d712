//! In-process notification of writes, so live queries read new events without waiting for
//! the next poll (as Akka's `publish-events`).

use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::watch;

/// Entries of dropped listeners a notifier's look-back registry may hold beyond twice its live
/// listeners before it forgets them (see `WriteNotifier::register_lookback`).
const REGISTRY_SLACK: usize = 16;

/// Sends a notification to every live query of a store after each commit. Held by a store;
/// cheap to clone (clones notify the same queries).
#[derive(Debug, Clone)]
pub struct WriteNotifier {
    sender: watch::Sender<u64>,
    /// How many [`WriteNotifications`] exist: [`notify`](Self::notify) sends nothing while
    /// none does (one atomic load per commit instead of the channel's lock and wake-up).
    listeners: Arc<AtomicUsize>,
    /// The look-back of each listener (see [`notify_committed`](Self::notify_committed)).
    lookbacks: Arc<Mutex<Vec<Weak<AtomicU64>>>>,
}

/// The receiving end a live query waits on: it wakes up after every notification sent since
/// it last looked (several notifications in between wake it once).
#[derive(Debug)]
pub struct WriteNotifications {
    receiver: watch::Receiver<u64>,
    listeners: Arc<AtomicUsize>,
    /// The longest look-back (microseconds) of the commits notified since it was last taken.
    lookback: Arc<AtomicU64>,
    lookbacks: Arc<Mutex<Vec<Weak<AtomicU64>>>>,
}

impl WriteNotifier {
    /// A notifier no query listens to yet.
    pub fn new() -> Self {
        WriteNotifier {
            sender: watch::Sender::new(0),
            listeners: Arc::new(AtomicUsize::new(0)),
            lookbacks: Arc::default(),
        }
    }

    /// Tells every live query that events were committed; call it after the commit. Costs one
    /// atomic load when no query listens.
    ///
    /// Skipping the send then loses nothing: a receiver subscribed later starts from the
    /// version current at its subscription (a send before it never wakes it), and its first
    /// read after subscribing sees this commit. The `SeqCst` fences here and in
    /// [`subscribe`](Self::subscribe) order the two: either this load sees the new listener
    /// (and sends), or the listener's reads after subscribing see the commit.
    pub fn notify(&self) {
        self.notify_committed(Duration::ZERO);
    }

    /// [`notify`](Self::notify) from a store whose concurrent transactions can commit out of
    /// timestamp order: `lookback` is the longest time, from its first statement to its
    /// commit, that one of the transactions committed since the last notification took (0
    /// when none can commit behind another). An event such a transaction stored has a
    /// database timestamp at most `lookback` below any event that was visible before it
    /// committed, so a live query told of it reads again from that far behind the newest event
    /// it read, and delivers a late commit at once instead of at its next full round.
    pub fn notify_committed(&self, lookback: Duration) {
        fence(Ordering::SeqCst);
        if self.listeners.load(Ordering::SeqCst) == 0 {
            return;
        }
        let micros = u64::try_from(lookback.as_micros()).unwrap_or(u64::MAX);
        if micros > 0 {
            let mut lookbacks = self
                .lookbacks
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            lookbacks.retain(|listener| match listener.upgrade() {
                Some(listener) => {
                    listener.fetch_max(micros, Ordering::SeqCst);
                    true
                }
                None => false,
            });
        }
        self.sender
            .send_modify(|count| *count = count.wrapping_add(1));
    }

    /// A new listener's look-back, registered with this notifier (`listeners`: how many
    /// listeners exist, this one included).
    ///
    /// The look-backs of dropped listeners are forgotten here once they make up most of the
    /// registry (amortized O(1) per listener), not only by a notification with a look-back:
    /// a store that never sends one (SQLite, in memory) kept one entry per live query ever
    /// opened, so a process opening a live query per request grew without bound.
    fn register_lookback(
        lookbacks: &Arc<Mutex<Vec<Weak<AtomicU64>>>>,
        listeners: &AtomicUsize,
    ) -> Arc<AtomicU64> {
        let lookback = Arc::new(AtomicU64::new(0));
        let mut registered = lookbacks.lock().unwrap_or_else(PoisonError::into_inner);
        let live = listeners.load(Ordering::SeqCst);
        if registered.len() >= live.saturating_mul(2).saturating_add(REGISTRY_SLACK) {
            registered.retain(|listener| listener.strong_count() > 0);
        }
        registered.push(Arc::downgrade(&lookback));
        lookback
    }

    /// A receiver for a new live query. Read the store after subscribing, never before: a
    /// commit whose notification came before the subscription is not told to it.
    pub fn subscribe(&self) -> WriteNotifications {
        self.listeners.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        WriteNotifications {
            receiver: self.sender.subscribe(),
            listeners: Arc::clone(&self.listeners),
            lookback: Self::register_lookback(&self.lookbacks, &self.listeners),
            lookbacks: Arc::clone(&self.lookbacks),
        }
    }
}

impl Clone for WriteNotifications {
    fn clone(&self) -> Self {
        self.listeners.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        WriteNotifications {
            receiver: self.receiver.clone(),
            listeners: Arc::clone(&self.listeners),
            lookback: WriteNotifier::register_lookback(&self.lookbacks, &self.listeners),
            lookbacks: Arc::clone(&self.lookbacks),
        }
    }
}

impl Drop for WriteNotifications {
    fn drop(&mut self) {
        self.listeners.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Default for WriteNotifier {
    fn default() -> Self {
        Self::new()
    }
}

impl WriteNotifications {
    /// Waits for the next notification; never returns when the notifier is gone.
    pub async fn notified(&mut self) {
        if self.receiver.changed().await.is_err() {
            futures::future::pending::<()>().await;
        }
    }

    /// The longest look-back of the commits notified since the last call (zero when none
    /// had one), and starts over: see [`WriteNotifier::notify_committed`].
    pub fn take_lookback(&self) -> Duration {
        Duration::from_micros(self.lookback.swap(0, Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listeners(notifier: &WriteNotifier) -> usize {
        notifier.listeners.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn sends_only_while_a_query_listens_and_wakes_every_listener() {
        let notifier = WriteNotifier::new();
        notifier.notify();
        assert_eq!(listeners(&notifier), 0);
        assert_eq!(
            *notifier.sender.borrow(),
            0,
            "nobody listens: nothing is sent"
        );

        let mut first = notifier.subscribe();
        let mut second = first.clone();
        assert_eq!(listeners(&notifier), 2);
        notifier.notify();
        assert_eq!(*notifier.sender.borrow(), 1);
        first.notified().await;
        second.notified().await;

        drop(first);
        drop(second);
        assert_eq!(listeners(&notifier), 0);
        notifier.notify();
        assert_eq!(*notifier.sender.borrow(), 1, "the last listener is gone");

        let mut late = notifier.subscribe();
        notifier.notify();
        late.notified().await;
    }

    #[tokio::test]
    async fn each_listener_takes_the_longest_lookback_since_it_last_took_one() {
        let notifier = WriteNotifier::new();
        let mut first = notifier.subscribe();
        let second = first.clone();
        notifier.notify_committed(Duration::from_millis(3));
        notifier.notify_committed(Duration::from_millis(7));
        notifier.notify_committed(Duration::from_millis(5));
        notifier.notify();
        first.notified().await;
        assert_eq!(first.take_lookback(), Duration::from_millis(7));
        assert_eq!(first.take_lookback(), Duration::ZERO, "taken: starts over");
        assert_eq!(
            second.take_lookback(),
            Duration::from_millis(7),
            "each listener has its own"
        );
        drop(second);
        notifier.notify_committed(Duration::from_millis(2));
        assert_eq!(first.take_lookback(), Duration::from_millis(2));
        assert_eq!(
            notifier.lookbacks.lock().expect("lock").len(),
            1,
            "the dropped listener is forgotten"
        );
    }

    /// A store that never notifies with a look-back (SQLite, in memory) still forgets the
    /// look-backs of dropped listeners: a process that opens and drops live queries (one per
    /// request, say) keeps its notifier's memory bounded by the queries alive.
    #[tokio::test]
    async fn dropped_listeners_are_forgotten_without_lookbacks() {
        let notifier = WriteNotifier::new();
        let kept = notifier.subscribe();
        for _ in 0..10_000 {
            let listener = notifier.subscribe();
            let clone = listener.clone();
            notifier.notify();
            drop((listener, clone));
        }
        let registered = notifier.lookbacks.lock().expect("lock").len();
        // At most three listeners at once: a few dozen entries, not one per listener ever.
        assert!(
            registered <= 2 * 3 + REGISTRY_SLACK + 1,
            "{registered} look-backs registered for {} listeners",
            listeners(&notifier)
        );
        drop(kept);
    }
}
