//! The journal actor's own write channel: persistent actors push their [`WriteMessages`], the
//! journal actor drains them as a message stream. A queue behind one lock, whose buffer is
//! reused: no allocation per message (Actix's mailbox boxes an envelope and a queue node per
//! message) and none per block of messages either, once the buffer has grown to the deepest
//! queue seen.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};

use super::WriteMessages;

/// Items the receiver hands out before it lets its actor handle other work (its mailbox, other
/// futures) and goes on at the next poll, as Tokio's cooperative budget does for its channels.
const BUDGET: usize = 128;

struct Shared {
    state: Mutex<State>,
    /// Live [`WriteSender`]s; the receiver ends once this is 0 and the queue is empty.
    senders: AtomicUsize,
}

#[derive(Default)]
struct State {
    queue: VecDeque<WriteMessages>,
    /// The receiver's task, registered when it found the queue empty.
    waker: Option<Waker>,
    /// Whether the receiver waits for a push (a push then wakes it).
    waiting: bool,
    /// The receiver is gone: pushes fail and give the write back.
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing that can panic runs under the lock: a poisoned lock is still consistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Wakes the receiver if it waits.
    fn wake_receiver(&self) {
        let waker = {
            let mut state = self.lock();
            if !state.waiting {
                return;
            }
            state.waiting = false;
            state.waker.clone()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// A new write channel: its sender and its receiver.
pub(crate) fn channel() -> (WriteSender, WriteReceiver) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        senders: AtomicUsize::new(1),
    });
    (
        WriteSender(Arc::clone(&shared)),
        WriteReceiver {
            shared,
            local: VecDeque::new(),
            handed_out: 0,
        },
    )
}

/// The sending half of a journal actor's write channel (see the module docs). A persistent
/// actor gets one with the reply to its first write and sends every later write through it
/// instead of the journal actor's mailbox; the journal numbers each write in its group when it
/// handles it, whichever way it came.
pub(crate) struct WriteSender(Arc<Shared>);

impl WriteSender {
    /// Queues `msg` for the journal actor, waking it if it waits.
    ///
    /// # Errors
    /// The write itself when the journal's end is gone (the journal actor stopped).
    pub(crate) fn send(&self, msg: WriteMessages) -> Result<(), WriteMessages> {
        let waker = {
            let mut state = self.0.lock();
            if state.closed {
                return Err(msg);
            }
            state.queue.push_back(msg);
            if !state.waiting {
                return Ok(());
            }
            state.waiting = false;
            state.waker.clone()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// A weak handle, which does not keep the channel open.
    pub(crate) fn downgrade(&self) -> WeakWriteSender {
        WeakWriteSender(Arc::downgrade(&self.0))
    }
}

impl Clone for WriteSender {
    fn clone(&self) -> Self {
        self.0.senders.fetch_add(1, Ordering::Relaxed);
        WriteSender(Arc::clone(&self.0))
    }
}

impl Drop for WriteSender {
    fn drop(&mut self) {
        if self.0.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last sender: the receiver ends once it drained the queue.
            self.0.wake_receiver();
        }
    }
}

impl std::fmt::Debug for WriteSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteSender")
    }
}

/// A sender that does not keep the channel open: the journal keeps one to hand out senders
/// while the channel is open.
pub(crate) struct WeakWriteSender(Weak<Shared>);

impl WeakWriteSender {
    /// A sender, while some sender is still alive (the channel is open); `None` once the last
    /// one is gone (the receiver ends then, or has ended).
    pub(crate) fn upgrade(&self) -> Option<WriteSender> {
        let shared = self.0.upgrade()?;
        shared
            .senders
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > 0).then_some(n + 1)
            })
            .ok()?;
        Some(WriteSender(shared))
    }
}

/// The receiving half, a stream of the queued writes in the order they were sent. It ends once
/// every sender is gone and the queue is drained. Dropping it (the journal actor's context
/// ends) closes the channel and drops the queued writes, whose dropped `ReplyTo`s tell their
/// actors that the journal stopped.
pub(crate) struct WriteReceiver {
    shared: Arc<Shared>,
    /// Writes taken from the shared queue in one go (the two buffers are swapped, so neither
    /// allocates once grown).
    local: VecDeque<WriteMessages>,
    /// Items handed out since the last `Pending` (see [`BUDGET`]).
    handed_out: usize,
}

impl futures::Stream for WriteReceiver {
    type Item = WriteMessages;

    fn poll_next(mut self: Pin<&mut Self>, task: &mut Context<'_>) -> Poll<Option<WriteMessages>> {
        let this = &mut *self;
        if let Some(msg) = this.local.pop_front() {
            this.handed_out += 1;
            return Poll::Ready(Some(msg));
        }
        if this.handed_out >= BUDGET {
            this.handed_out = 0;
            task.waker().wake_by_ref();
            return Poll::Pending;
        }
        let mut state = this.shared.lock();
        if state.queue.is_empty() {
            if this.shared.senders.load(Ordering::Acquire) == 0 {
                return Poll::Ready(None);
            }
            match &state.waker {
                Some(waker) if waker.will_wake(task.waker()) => {}
                _ => state.waker = Some(task.waker().clone()),
            }
            state.waiting = true;
            drop(state);
            this.handed_out = 0;
            return Poll::Pending;
        }
        std::mem::swap(&mut state.queue, &mut this.local);
        drop(state);
        this.handed_out += 1;
        Poll::Ready(this.local.pop_front())
    }
}

impl Drop for WriteReceiver {
    fn drop(&mut self) {
        let queued = {
            let mut state = self.shared.lock();
            state.closed = true;
            state.waker = None;
            std::mem::take(&mut state.queue)
        };
        // Outside the lock: dropping a write fills its actor's reply slot.
        drop(queued);
    }
}

#[cfg(test)]
mod tests {
    use std::task::{Context, Poll};

    use futures::Stream;

    use super::{channel, WriteReceiver, BUDGET};
    use crate::journal::counting_waker::counting_waker;
    use crate::journal::{Incarnation, WriteMessages, WriteMessagesReply};

    fn write(
        id: u64,
    ) -> (
        WriteMessages,
        tokio::sync::oneshot::Receiver<WriteMessagesReply>,
    ) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let msg = WriteMessages {
            writes: Default::default(),
            incarnation: Incarnation::from_raw(id),
            reply_to: tx.into(),
        };
        (msg, rx)
    }

    fn poll(receiver: &mut WriteReceiver, task: &mut Context<'_>) -> Poll<Option<u64>> {
        std::pin::Pin::new(receiver)
            .poll_next(task)
            .map(|msg| msg.map(|m| m.incarnation.get()))
    }

    #[test]
    fn writes_come_out_in_order_and_a_push_wakes_a_waiting_receiver() {
        let (wakes, waker) = counting_waker();
        let mut task = Context::from_waker(&waker);
        let (sender, mut receiver) = channel();
        assert_eq!(poll(&mut receiver, &mut task), Poll::Pending);
        let mut replies = Vec::new();
        for id in 1..=3 {
            let (msg, reply) = write(id);
            assert!(sender.send(msg).is_ok());
            replies.push(reply);
        }
        assert_eq!(wakes.count(), 1, "one wake-up for the first push");
        for id in 1..=3 {
            assert_eq!(poll(&mut receiver, &mut task), Poll::Ready(Some(id)));
        }
        assert_eq!(poll(&mut receiver, &mut task), Poll::Pending);
        // A sender on another thread.
        let other = sender.clone();
        std::thread::spawn(move || {
            let (msg, _reply) = write(4);
            assert!(other.send(msg).is_ok());
        })
        .join()
        .expect("the sending thread");
        assert_eq!(wakes.count(), 2);
        assert_eq!(poll(&mut receiver, &mut task), Poll::Ready(Some(4)));
    }

    #[test]
    fn the_receiver_yields_after_its_budget() {
        let (wakes, waker) = counting_waker();
        let mut task = Context::from_waker(&waker);
        let (sender, mut receiver) = channel();
        let count = BUDGET as u64 + 10;
        for id in 0..count {
            assert!(sender.send(write(id).0).is_ok());
        }
        for id in 0..BUDGET as u64 {
            assert_eq!(poll(&mut receiver, &mut task), Poll::Ready(Some(id)));
        }
        // The first swap took every queued write; the budget counts handed-out writes only
        // once that buffer is empty, so the rest of it still comes out.
        for id in BUDGET as u64..count {
            assert_eq!(poll(&mut receiver, &mut task), Poll::Ready(Some(id)));
        }
        assert!(sender.send(write(count).0).is_ok());
        assert_eq!(
            poll(&mut receiver, &mut task),
            Poll::Pending,
            "budget used up"
        );
        assert_eq!(wakes.count(), 1, "it asks to be polled again");
        assert_eq!(poll(&mut receiver, &mut task), Poll::Ready(Some(count)));
    }

    #[test]
    fn the_receiver_ends_when_every_sender_is_gone_and_the_queue_is_drained() {
        let (wakes, waker) = counting_waker();
        let mut task = Context::from_waker(&waker);
        let (sender, mut receiver) = channel();
        let weak = sender.downgrade();
        let second = weak.upgrade().expect("open while a sender lives");
        assert!(sender.send(write(1).0).is_ok());
        drop(sender);
        assert_eq!(poll(&mut receiver, &mut task), Poll::Ready(Some(1)));
        assert_eq!(poll(&mut receiver, &mut task), Poll::Pending);
        drop(second);
        assert_eq!(wakes.count(), 1, "the last sender wakes it");
        assert_eq!(poll(&mut receiver, &mut task), Poll::Ready(None));
        assert!(weak.upgrade().is_none(), "never reopened");
    }

    #[test]
    fn a_dropped_receiver_drops_the_queued_writes_and_refuses_new_ones() {
        let (sender, receiver) = channel();
        let (msg, mut queued_reply) = write(1);
        assert!(sender.send(msg).is_ok());
        drop(receiver);
        assert!(
            queued_reply.try_recv().is_err(),
            "the queued write's reply was dropped unsent"
        );
        let (msg, _reply) = write(2);
        match sender.send(msg) {
            Err(back) => assert_eq!(back.incarnation.get(), 2),
            Ok(()) => panic!("a closed channel takes no write"),
        }
    }
}
