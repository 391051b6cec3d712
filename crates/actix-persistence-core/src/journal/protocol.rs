//! Messages between persistent actors and the journal actor (as Akka's `JournalProtocol`).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context as TaskContext, Poll, Waker};

use actix::Message;
use tokio::sync::oneshot;

use super::write_queue::WriteSender;
use crate::error::{AtomicWriteError, JournalError};
use crate::store::{AtomicWriteResult, Ownership, ReplayStream, WriteBatch, WriteResults};

/// The identity of one incarnation of a persistent actor: unique within the process, so two
/// incarnations of the same persistence id compare unequal. The journal routes write replies
/// by it (see [`super::write_reply_ordering_group`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Incarnation(u64);

static NEXT_INCARNATION: AtomicU64 = AtomicU64::new(1);

impl Incarnation {
    /// A fresh incarnation id, never handed out before in this process.
    pub fn next() -> Self {
        Incarnation(NEXT_INCARNATION.fetch_add(1, Ordering::Relaxed))
    }

    /// An incarnation with a chosen id (tests, or a caller that keeps its own ids unique).
    pub fn from_raw(id: u64) -> Self {
        Incarnation(id)
    }

    /// The id.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Debug for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Incarnation({})", self.0)
    }
}

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Store a batch of atomic writes of one actor incarnation; the answer goes to `reply_to`
/// through the incarnation's resequencer (as Akka's `WriteMessages`).
///
/// Every `WriteMessages` is answered exactly once, also when the store fails, panics, times
/// out or returns the wrong number of results. Replies to writes of the same
/// write-reply-ordering group are sent in the order the journal received the writes.
pub struct WriteMessages {
    /// The atomic writes, in order. May be empty (answered without reaching the store). One
    /// is held inline ([`WriteBatch`]): a lone `persist` sends no vector. Build it from a
    /// `Vec` with `.into()`.
    pub writes: WriteBatch,
    /// The writing incarnation: decides the write-reply-ordering group.
    pub incarnation: Incarnation,
    /// Where the reply goes: a `oneshot::Sender` (`.into()`), or a persistent actor's own
    /// reply slot.
    pub reply_to: ReplyTo,
}

impl Message for WriteMessages {
    type Result = ();
}

impl fmt::Debug for WriteMessages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteMessages")
            .field("writes", &self.writes.len())
            .field("incarnation", &self.incarnation)
            .finish()
    }
}

/// Where the reply to a [`WriteMessages`] goes: a one-shot channel, or the reply slot a
/// persistent actor incarnation keeps for all its writes.
///
/// Build one from a `tokio::sync::oneshot::Sender<WriteMessagesReply>` with `.into()`; its
/// receiver gets the reply, or a receive error when the reply was dropped unsent (the journal
/// stopped). A persistent actor has at most one [`WriteMessages`] in flight, so it reuses one
/// slot, allocated once per incarnation, instead of a channel per write: a `persist` allocates
/// no reply channel. Either way the reply is sent at most once, and dropping a `ReplyTo`
/// unsent tells the receiver so.
///
/// # Examples
/// ```
/// use actix_persistence_core::journal::{ReplyTo, WriteMessagesReply};
/// use tokio::sync::oneshot;
///
/// let (tx, mut rx) = oneshot::channel();
/// let reply_to = ReplyTo::from(tx);
/// assert!(reply_to.send(WriteMessagesReply::Completed(Default::default())).is_ok());
/// assert!(matches!(rx.try_recv(), Ok(WriteMessagesReply::Completed(results)) if results.is_empty()));
/// ```
pub struct ReplyTo(Sender);

enum Sender {
    Oneshot(oneshot::Sender<WriteMessagesReply>),
    /// `None` once sent (then dropping it closes nothing).
    Slot(Option<Arc<ReplySlot>>),
}

impl ReplyTo {
    /// Whether this is a persistent actor's reply slot that holds no write channel yet (the
    /// journal then offers one with [`ReplyTo::offer_channel`]).
    pub(crate) fn wants_channel(&self) -> bool {
        match &self.0 {
            Sender::Slot(Some(slot)) => !slot.lock().has_channel,
            _ => false,
        }
    }

    /// Hands the journal's write channel to the actor owning this reply slot, with the reply:
    /// its later writes go through the channel instead of the journal actor's mailbox.
    pub(crate) fn offer_channel(&self, channel: WriteSender) {
        if let Sender::Slot(Some(slot)) = &self.0 {
            let mut state = slot.lock();
            state.channel = Some(channel);
            state.has_channel = true;
        }
    }

    /// Sends `reply`; gives it back when nobody waits for it any more (the receiver, or the
    /// actor owning the slot, is gone).
    ///
    /// # Errors
    /// The reply itself, when it could not be delivered.
    pub fn send(mut self, reply: WriteMessagesReply) -> Result<(), WriteMessagesReply> {
        match &mut self.0 {
            Sender::Slot(slot) => match slot.take() {
                // Only this sender holds the slot: its actor is gone.
                Some(slot) if Arc::strong_count(&slot) == 1 => Err(reply),
                Some(slot) => {
                    slot.fill(Ok(reply));
                    Ok(())
                }
                None => Err(reply),
            },
            Sender::Oneshot(_) => match std::mem::replace(&mut self.0, Sender::Slot(None)) {
                Sender::Oneshot(tx) => tx.send(reply),
                Sender::Slot(_) => Err(reply),
            },
        }
    }
}

impl Drop for ReplyTo {
    fn drop(&mut self) {
        // Dropped unsent: the waiting actor learns that no reply will come (as a dropped
        // oneshot sender's receiver does).
        if let Sender::Slot(Some(slot)) = &mut self.0 {
            slot.fill(Err(ReplyDropped));
        }
    }
}

impl From<oneshot::Sender<WriteMessagesReply>> for ReplyTo {
    fn from(tx: oneshot::Sender<WriteMessagesReply>) -> Self {
        ReplyTo(Sender::Oneshot(tx))
    }
}

impl fmt::Debug for ReplyTo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Sender::Oneshot(_) => "ReplyTo::Oneshot",
            Sender::Slot(_) => "ReplyTo::Slot",
        })
    }
}

/// The reply to a [`WriteMessages`] was dropped without being sent (the journal stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplyDropped;

/// A persistent actor incarnation's reply slot: one [`WriteMessages`] reply at a time, reused
/// for every write (the actor sends its next batch only once it has taken the reply of the
/// previous one, so a slot never holds two). Shared with the journal's arbiter, hence the lock
/// (never contended for long: each side holds it to move one value).
#[derive(Debug, Default)]
pub(crate) struct ReplySlot {
    inner: Mutex<SlotState>,
}

#[derive(Debug, Default)]
struct SlotState {
    reply: Option<Result<WriteMessagesReply, ReplyDropped>>,
    waker: Option<Waker>,
    /// The journal's write channel, offered with a reply, until the actor takes it.
    channel: Option<WriteSender>,
    /// Whether a channel was ever offered (the journal offers one once per slot).
    has_channel: bool,
}

/// What a reply slot hands over: the reply (`Err` when its sender was dropped unsent), and
/// the journal's write channel when the journal offered one with it.
#[derive(Debug)]
pub(crate) struct SlotReply {
    pub(crate) reply: Result<WriteMessagesReply, ReplyDropped>,
    pub(crate) channel: Option<WriteSender>,
}

impl ReplySlot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        // Nothing that can panic runs under the lock: a poisoned lock is still consistent.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A sender for the next write: the slot must be empty (the previous reply was taken).
    pub(crate) fn reply_to(self: &Arc<Self>) -> ReplyTo {
        debug_assert!(
            self.lock().reply.is_none(),
            "a write was sent before the previous reply was taken"
        );
        ReplyTo(Sender::Slot(Some(Arc::clone(self))))
    }

    /// Puts the reply (or that none will come) into the slot and wakes the waiting task. The
    /// waker stays registered for the next write's reply (the actor's task does not change),
    /// so the actor neither clones it again nor needs to poll the slot right after sending.
    fn fill(&self, reply: Result<WriteMessagesReply, ReplyDropped>) {
        let mut state = self.lock();
        state.reply = Some(reply);
        if let Some(waker) = &state.waker {
            waker.wake_by_ref();
        }
    }

    /// The reply once it is there (`Err` when its sender was dropped unsent); else registers
    /// the task to be woken when it arrives. The task stays registered after the reply (see
    /// [`fill`](Self::fill)): until a poll from another task replaces it, every later reply
    /// wakes it too.
    pub(crate) fn poll(&self, task: &TaskContext<'_>) -> Poll<SlotReply> {
        let mut state = self.lock();
        match state.reply.take() {
            Some(reply) => Poll::Ready(SlotReply {
                reply,
                channel: state.channel.take(),
            }),
            None => {
                match &state.waker {
                    Some(waker) if waker.will_wake(task.waker()) => {}
                    _ => state.waker = Some(task.waker().clone()),
                }
                Poll::Pending
            }
        }
    }

    /// The reply if it is there, without waiting.
    pub(crate) fn try_take(&self) -> Option<Result<WriteMessagesReply, ReplyDropped>> {
        self.lock().reply.take()
    }
}

/// The answer to [`WriteMessages`].
#[derive(Debug, Clone)]
pub enum WriteMessagesReply {
    /// The batch was attempted: one result per atomic write, in order (as Akka's
    /// `WriteMessagesSuccessful` followed by `WriteMessageSuccess`, `WriteMessageRejected` or
    /// `WriteMessageFailure` per write). The result of a batch of one write is held inline
    /// ([`WriteResults`]): no allocation per `persist`.
    Completed(WriteResults),
    /// The batch failed as a whole (as Akka's `WriteMessagesFailed`); every write may or may not
    /// be stored.
    Failed(JournalError),
}

impl WriteMessagesReply {
    /// One result per atomic write: a whole-batch failure becomes that failure for each write.
    /// `write_count` is the number of atomic writes that were sent; a mismatch fails them all.
    pub fn into_results(self, write_count: usize) -> WriteResults {
        match self {
            WriteMessagesReply::Completed(results) if results.len() == write_count => results,
            WriteMessagesReply::Completed(results) => fail_all(
                JournalError::ResultCountMismatch {
                    expected: write_count,
                    actual: results.len(),
                },
                write_count,
            ),
            WriteMessagesReply::Failed(cause) => fail_all(cause, write_count),
        }
    }
}

fn fail_all(cause: JournalError, count: usize) -> WriteResults {
    let failed: AtomicWriteResult = Err(AtomicWriteError::Failed(cause));
    smallvec::smallvec![failed; count]
}

/// Replay the events of a persistence id with `from_seq_nr <= seq_nr <= to_seq_nr`, at most
/// `max` of them (as Akka's `ReplayMessages`).
#[derive(Debug, Clone)]
pub struct ReplayMessages {
    /// Whose events.
    pub persistence_id: String,
    /// Lowest sequence number to replay (inclusive).
    pub from_seq_nr: u64,
    /// Highest sequence number to replay (inclusive); `u64::MAX` for no bound.
    pub to_seq_nr: u64,
    /// At most this many events; `u64::MAX` for no bound.
    pub max: u64,
}

impl Message for ReplayMessages {
    type Result = Result<Replay, JournalError>;
}

/// [`ReplayMessages`] for a persistent actor's recovery: the same answer, with the events read
/// through [`JournalStore::replay_for_recovery`] (their tags may be left empty: a recovering
/// actor never reads them).
///
/// [`JournalStore::replay_for_recovery`]: crate::store::JournalStore::replay_for_recovery
#[derive(Debug, Clone)]
pub struct RecoveryReplay(pub ReplayMessages);

impl Message for RecoveryReplay {
    type Result = Result<Replay, JournalError>;
}

/// The answer to [`ReplayMessages`] and [`RecoveryReplay`]: the highest sequence number the journal ever stored for
/// the id (never lowered by the replay's bounds or by deletes), and the events, streamed.
pub struct Replay {
    /// Highest sequence number ever stored for the persistence id (0 if none).
    pub highest_seq_nr: u64,
    /// How far the id's events were deleted ([`JournalStore::read_deleted_to`]), `None` when
    /// the store does not keep it.
    ///
    /// [`JournalStore::read_deleted_to`]: crate::store::JournalStore::read_deleted_to
    pub deleted_to: Option<u64>,
    /// The replayed events, ascending.
    pub events: ReplayStream,
}

impl fmt::Debug for Replay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replay")
            .field("highest_seq_nr", &self.highest_seq_nr)
            .field("deleted_to", &self.deleted_to)
            .finish_non_exhaustive()
    }
}

/// Read the highest sequence number ever stored for a persistence id, without replaying.
#[derive(Debug, Clone)]
pub struct ReadHighestSequenceNr {
    /// Whose events.
    pub persistence_id: String,
    /// Hint: the caller knows nothing below this was written after its last look.
    pub from_seq_nr: u64,
}

impl Message for ReadHighestSequenceNr {
    type Result = Result<u64, JournalError>;
}

/// Delete the events of a persistence id up to and including `to_seq_nr`; the highest
/// sequence number is kept (as Akka's `DeleteMessagesTo`). Fenced as writes are: fails with
/// [`JournalError::Fenced`], deleting nothing, when the id's owner epoch is above
/// `fencing_token` (see [`JournalStore::delete_messages_to`](crate::JournalStore::delete_messages_to)).
#[derive(Debug, Clone)]
pub struct DeleteMessagesTo {
    /// Whose events.
    pub persistence_id: String,
    /// Delete events with `seq_nr <= to_seq_nr`; `u64::MAX` deletes all.
    pub to_seq_nr: u64,
    /// The deleting incarnation's token (`PersistenceState::fencing_token`), or
    /// [`FencingToken::UNOWNED`](crate::FencingToken::UNOWNED) for a caller that never took
    /// ownership of the id.
    pub fencing_token: crate::FencingToken,
}

impl Message for DeleteMessagesTo {
    type Result = Result<(), JournalError>;
}

/// Is the journal ready to serve: its circuit breaker closed and its store answering a read?
/// Never writes into the journal. For a readiness endpoint (the facade's
/// `Persistence::health`). Once an open breaker's reset timeout has passed, the check's read
/// is the breaker's trial call (its success closes the breaker): a readiness probe that keeps
/// traffic away while the breaker is open does not keep it open.
#[derive(Debug, Clone, Copy)]
pub struct CheckHealth;

impl Message for CheckHealth {
    type Result = Result<(), Unhealthy>;
}

/// Why the journal is not ready.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unhealthy {
    /// The circuit breaker is open after repeated store failures.
    #[error("journal circuit breaker is open; next trial in {} ms", retry_in.as_millis())]
    CircuitOpen {
        /// Time until the breaker lets a trial call through.
        retry_in: std::time::Duration,
    },
    /// The store did not answer a read.
    #[error("journal store does not answer: {0}")]
    StoreUnreachable(JournalError),
}

/// Take ownership of a persistence id for a new incarnation before replaying it: the store
/// raises the id's owner epoch and reads its highest sequence number in one atomic step
/// ([`crate::JournalStore::take_ownership`]). Writes of older incarnations fail with
/// [`JournalError::Fenced`] from then on.
#[derive(Debug, Clone)]
pub struct TakeOwnership {
    /// The persistence id the new incarnation owns.
    pub persistence_id: String,
}

impl Message for TakeOwnership {
    type Result = Result<Ownership, JournalError>;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use futures::FutureExt;

    use super::{ReplyDropped, ReplySlot, SlotReply, WriteMessagesReply};
    use crate::error::JournalError;
    use crate::journal::counting_waker::counting_waker;

    fn stored(n: usize) -> WriteMessagesReply {
        WriteMessagesReply::Completed(vec![Ok(()); n].into())
    }

    #[test]
    fn a_slot_hands_each_reply_over_once_and_wakes_the_waiting_task() {
        let slot = Arc::new(ReplySlot::default());
        let (wakes, waker) = counting_waker();
        let task = Context::from_waker(&waker);
        for writes in 1..=3 {
            let reply_to = slot.reply_to();
            assert!(slot.poll(&task).is_pending());
            assert!(reply_to.send(stored(writes)).is_ok());
            assert_eq!(wakes.count(), writes);
            match slot.poll(&task) {
                Poll::Ready(SlotReply {
                    reply: Ok(WriteMessagesReply::Completed(results)),
                    channel: None,
                }) => {
                    assert_eq!(results.len(), writes)
                }
                other => panic!("expected the reply of {writes} writes, got {other:?}"),
            }
            assert!(slot.poll(&task).is_pending(), "taken once");
        }
    }

    #[test]
    fn a_task_registered_once_is_woken_by_every_later_reply() {
        let slot = Arc::new(ReplySlot::default());
        let (wakes, waker) = counting_waker();
        let task = Context::from_waker(&waker);
        assert!(slot.poll(&task).is_pending());
        for writes in 1..=3 {
            // Sent without polling the slot first: the reply still wakes the task.
            let reply_to = slot.reply_to();
            assert!(reply_to.send(stored(writes)).is_ok());
            assert_eq!(wakes.count(), writes);
            assert!(matches!(
                slot.poll(&task),
                Poll::Ready(SlotReply { reply: Ok(_), .. })
            ));
        }
        // A reply dropped unsent wakes it as well.
        drop(slot.reply_to());
        assert_eq!(wakes.count(), 4);
    }

    #[test]
    fn a_reply_dropped_unsent_tells_the_waiting_task() {
        let slot = Arc::new(ReplySlot::default());
        let (wakes, waker) = counting_waker();
        let task = Context::from_waker(&waker);
        let reply_to = slot.reply_to();
        assert!(slot.poll(&task).is_pending());
        drop(reply_to);
        assert_eq!(wakes.count(), 1);
        assert!(matches!(
            slot.poll(&task),
            Poll::Ready(SlotReply {
                reply: Err(ReplyDropped),
                channel: None
            })
        ));
        // The next write's reply is not affected.
        let reply_to = slot.reply_to();
        assert!(reply_to
            .send(WriteMessagesReply::Failed(JournalError::JournalStopped))
            .is_ok());
        assert!(matches!(
            slot.try_take(),
            Some(Ok(WriteMessagesReply::Failed(JournalError::JournalStopped)))
        ));
    }

    #[test]
    fn the_write_channel_is_offered_once_and_handed_over_with_the_reply() {
        let slot = Arc::new(ReplySlot::default());
        let (_, waker) = counting_waker();
        let task = Context::from_waker(&waker);
        let (sender, mut receiver) = crate::journal::write_queue::channel();
        let reply_to = slot.reply_to();
        assert!(reply_to.wants_channel());
        reply_to.offer_channel(sender);
        assert!(reply_to.send(stored(1)).is_ok());
        let channel = match slot.poll(&task) {
            Poll::Ready(SlotReply {
                reply: Ok(WriteMessagesReply::Completed(results)),
                channel: Some(channel),
            }) if results.len() == 1 => channel,
            other => panic!("expected the reply with the channel, got {other:?}"),
        };
        // The channel reaches the journal's end.
        let write = super::WriteMessages {
            writes: Default::default(),
            incarnation: super::Incarnation::from_raw(7),
            reply_to: slot.reply_to(),
        };
        assert!(channel.send(write).is_ok());
        let received = futures::StreamExt::next(&mut receiver)
            .now_or_never()
            .flatten()
            .expect("the write arrived");
        assert_eq!(received.incarnation.get(), 7);
        // Offered once per slot: the next writes' replies bring none.
        assert!(!received.reply_to.wants_channel());
        assert!(received.reply_to.send(stored(1)).is_ok());
        assert!(matches!(
            slot.poll(&task),
            Poll::Ready(SlotReply {
                reply: Ok(_),
                channel: None
            })
        ));
        // A oneshot sender never wants one.
        let (tx, _rx) = tokio::sync::oneshot::channel();
        assert!(!super::ReplyTo::from(tx).wants_channel());
    }

    #[test]
    fn a_reply_to_a_gone_actor_comes_back() {
        let slot = Arc::new(ReplySlot::default());
        let reply_to = slot.reply_to();
        drop(slot);
        match reply_to.send(stored(1)) {
            Err(WriteMessagesReply::Completed(results)) => assert_eq!(results.len(), 1),
            other => panic!("expected the reply back, got {other:?}"),
        }
    }
}
