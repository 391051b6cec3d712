//! In-process notification of writes, so live queries read new events without waiting for
//! the next poll (as Akka's `publish-events`).

use tokio::sync::watch;

/// Sends a notification to every live query of a store after each commit. Held by a store;
/// cheap to clone (clones notify the same queries).
#[derive(Debug, Clone)]
pub struct WriteNotifier {
    sender: watch::Sender<u64>,
}

/// The receiving end a live query waits on: it wakes up after every notification sent since
/// it last looked (several notifications in between wake it once).
#[derive(Debug, Clone)]
pub struct WriteNotifications {
    receiver: watch::Receiver<u64>,
}

impl WriteNotifier {
    /// A notifier no query listens to yet.
    pub fn new() -> Self {
        WriteNotifier {
            sender: watch::Sender::new(0),
        }
    }

    /// Tells every live query that events were committed. Costs a counter increment when no
    /// query listens.
    pub fn notify(&self) {
        self.sender
            .send_modify(|count| *count = count.wrapping_add(1));
    }

    /// A receiver for a new live query.
    pub fn subscribe(&self) -> WriteNotifications {
        WriteNotifications {
            receiver: self.sender.subscribe(),
        }
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
