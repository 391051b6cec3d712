//! In-process notification of writes, so live queries read new events without waiting for
//! the next poll (as Akka's `publish-events`).

use std::sync::atomic::{fence, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

/// Sends a notification to every live query of a store after each commit. Held by a store;
/// cheap to clone (clones notify the same queries).
#[derive(Debug, Clone)]
pub struct WriteNotifier {
    sender: watch::Sender<u64>,
    /// How many [`WriteNotifications`] exist: [`notify`](Self::notify) sends nothing while
    /// none does (one atomic load per commit instead of the channel's lock and wake-up).
    listeners: Arc<AtomicUsize>,
}

/// The receiving end a live query waits on: it wakes up after every notification sent since
/// it last looked (several notifications in between wake it once).
#[derive(Debug)]
pub struct WriteNotifications {
    receiver: watch::Receiver<u64>,
    listeners: Arc<AtomicUsize>,
}

impl WriteNotifier {
    /// A notifier no query listens to yet.
    pub fn new() -> Self {
        WriteNotifier {
            sender: watch::Sender::new(0),
            listeners: Arc::new(AtomicUsize::new(0)),
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
        fence(Ordering::SeqCst);
        if self.listeners.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.sender
            .send_modify(|count| *count = count.wrapping_add(1));
    }

    /// A receiver for a new live query. Read the store after subscribing, never before: a
    /// commit whose notification came before the subscription is not told to it.
    pub fn subscribe(&self) -> WriteNotifications {
        self.listeners.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        WriteNotifications {
            receiver: self.sender.subscribe(),
            listeners: Arc::clone(&self.listeners),
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
}
