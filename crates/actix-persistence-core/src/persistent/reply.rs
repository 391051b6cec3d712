use std::cell::RefCell;
use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context as TaskContext, Poll, Waker};

use actix::dev::{MessageResponse, OneshotSender};
use actix::{Actor, ActorFuture, Context, Message};

use super::driver::pump;
use super::PersistentActor;

use crate::error::{JournalError, WriteRejection};

/// Why a `persist`, `persist_all` or `defer` continuation did not run.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PersistError {
    /// The journal rejected the write (e.g. the event could not be serialized). Nothing was
    /// stored; the actor goes on with its next command.
    #[error(transparent)]
    Rejected(#[from] WriteRejection),
    /// The journal failed the write; the events may or may not be stored. The actor stops.
    #[error(transparent)]
    Failed(#[from] JournalError),
    /// The actor stopped before this write was sent to the journal (an earlier write failed,
    /// user code panicked, or the actor was stopped): nothing of it was stored.
    #[error("the persistent actor stopped before this write was sent: nothing of it was stored")]
    ActorStopped,
    /// The actor stopped while this write was with the journal (its arbiter stopped, for
    /// example): the events may or may not be stored. The next incarnation recovers what was.
    #[error(
        "the persistent actor stopped while this write was in flight: its events may or may \
         not be stored; the next incarnation recovers what was stored"
    )]
    StoppedDuringWrite,
    /// The events were stored, but the actor stopped before it applied them and ran the
    /// continuation (an earlier write of the same batch failed, or user code panicked). The
    /// next incarnation recovers them.
    #[error(
        "the events were stored, but the persistent actor stopped before it applied them; \
         the next incarnation recovers them"
    )]
    StoppedAfterStore,
    /// The events were stored, but [`EventSourced::apply`](super::EventSourced::apply) or the
    /// continuation panicked with `reason`; the actor stopped (its stop reason is
    /// [`StopReason::Panicked`](super::StopReason::Panicked)).
    #[error("the events were stored, but user code panicked: {reason}; the actor stopped")]
    Panicked {
        /// The panic message.
        reason: String,
    },
}

/// The outcome of a continuation: what it returned once its events were stored, or why it
/// did not run.
pub type PersistResult<R> = Result<R, PersistError>;

/// Where a continuation's outcome goes: nowhere yet, a waiting Actix sender, or an awaiting
/// task. Lives on the actor's arbiter thread only.
enum Slot<R> {
    Empty,
    Done(PersistResult<R>),
    Forward(Box<dyn FnOnce(PersistResult<R>)>),
    Awaited(Waker),
    Taken,
}

type SharedSlot<R> = Rc<RefCell<Slot<R>>>;

/// The continuation's end of a [`PersistReply`]. Dropping it unsent answers
/// [`PersistError::ActorStopped`], so no reply waits forever.
pub(crate) struct ReplySender<R> {
    slot: Option<SharedSlot<R>>,
}

impl<R> ReplySender<R> {
    pub(crate) fn send(mut self, outcome: PersistResult<R>) {
        if let Some(slot) = self.slot.take() {
            fill(&slot, outcome);
        }
    }
}

impl<R> Drop for ReplySender<R> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            fill(&slot, Err(PersistError::ActorStopped));
        }
    }
}

fn fill<R>(slot: &SharedSlot<R>, outcome: PersistResult<R>) {
    let previous = std::mem::replace(&mut *slot.borrow_mut(), Slot::Taken);
    match previous {
        Slot::Forward(forward) => forward(outcome),
        Slot::Awaited(waker) => {
            *slot.borrow_mut() = Slot::Done(outcome);
            waker.wake();
        }
        Slot::Empty => *slot.borrow_mut() = Slot::Done(outcome),
        // Filled twice cannot happen: the sender is consumed by `send`.
        Slot::Done(first) => *slot.borrow_mut() = Slot::Done(first),
        Slot::Taken => {}
    }
}

/// The eventual result of a `persist`, `persist_all` or `defer` continuation.
///
/// Return it from an Actix handler whose message has `Result = Result<R, PersistError>`: the
/// sender then gets the continuation's value after the events are stored and applied. It can
/// also be awaited: inside the actor's own futures with [`PersistReply::into_actor_future`],
/// elsewhere on the actor's arbiter with `.await`; or ignored when nobody needs the answer:
/// the continuation runs either way.
pub struct PersistReply<R> {
    slot: SharedSlot<R>,
}

impl<R> std::fmt::Debug for PersistReply<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistReply").finish_non_exhaustive()
    }
}

impl<R> PersistReply<R> {
    /// A reply that is already there: for a command handled without persisting (e.g. one the
    /// actor refuses after validating it).
    pub fn ready(value: R) -> Self {
        PersistReply {
            slot: Rc::new(RefCell::new(Slot::Done(Ok(value)))),
        }
    }

    pub(crate) fn channel() -> (ReplySender<R>, Self) {
        let slot = Rc::new(RefCell::new(Slot::Empty));
        let sender = ReplySender {
            slot: Some(Rc::clone(&slot)),
        };
        (sender, PersistReply { slot })
    }
}

impl<R> PersistReply<R> {
    /// The reply as a future of the actor, for use inside a handler's `ResponseActFuture`,
    /// `AtomicResponse` or `ctx.wait`. While polled it also moves the actor's writes on, so it
    /// completes even when it is the newest future the actor waits for (Actix then polls no
    /// other).
    pub fn into_actor_future<A: PersistentActor>(self) -> ActorReplyFuture<A, R> {
        ActorReplyFuture {
            slot: self.slot,
            _actor: PhantomData,
        }
    }
}

/// The future of a [`PersistReply`] inside its actor: resolves when the continuation ran, or
/// with [`PersistError::ActorStopped`] when the actor stopped first.
pub struct ActorReplyFuture<A, R> {
    slot: SharedSlot<R>,
    _actor: PhantomData<fn() -> A>,
}

impl<A, R> std::fmt::Debug for ActorReplyFuture<A, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActorReplyFuture").finish_non_exhaustive()
    }
}

impl<A: PersistentActor, R> ActorFuture<A> for ActorReplyFuture<A, R> {
    type Output = PersistResult<R>;

    fn poll(
        self: Pin<&mut Self>,
        act: &mut A,
        ctx: &mut Context<A>,
        task: &mut TaskContext<'_>,
    ) -> Poll<Self::Output> {
        if let Some(outcome) = take_done(&self.slot) {
            return Poll::Ready(outcome);
        }
        // The writes this reply waits for may need this very poll to move on.
        let _ = pump(act, ctx, task);
        poll_slot(&self.slot, task)
    }
}

impl<R> IntoFuture for PersistReply<R> {
    type Output = PersistResult<R>;
    type IntoFuture = ReplyFuture<R>;

    /// For awaiting from outside the actor's own futures: a `ResponseFuture`, a spawned task.
    /// Inside a future the actor waits on (`ctx.wait`, `AtomicResponse`), use
    /// [`PersistReply::into_actor_future`]: this plain future cannot move the writes on.
    fn into_future(self) -> ReplyFuture<R> {
        ReplyFuture { slot: self.slot }
    }
}

/// The future of a [`PersistReply`] awaited outside the actor's own futures.
pub struct ReplyFuture<R> {
    slot: SharedSlot<R>,
}

impl<R> std::fmt::Debug for ReplyFuture<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyFuture").finish_non_exhaustive()
    }
}

impl<R> Future for ReplyFuture<R> {
    type Output = PersistResult<R>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        poll_slot(&self.slot, cx)
    }
}

/// The outcome if it is there, else registers the task to be woken when it is.
fn poll_slot<R>(slot: &SharedSlot<R>, task: &TaskContext<'_>) -> Poll<PersistResult<R>> {
    let mut slot = slot.borrow_mut();
    match std::mem::replace(&mut *slot, Slot::Taken) {
        Slot::Done(outcome) => Poll::Ready(outcome),
        Slot::Empty | Slot::Awaited(_) => {
            *slot = Slot::Awaited(task.waker().clone());
            Poll::Pending
        }
        Slot::Forward(forward) => {
            // Already handed to an Actix sender: this future will not see it.
            *slot = Slot::Forward(forward);
            Poll::Ready(Err(PersistError::ActorStopped))
        }
        Slot::Taken => Poll::Ready(Err(PersistError::ActorStopped)),
    }
}

fn take_done<R>(slot: &SharedSlot<R>) -> Option<PersistResult<R>> {
    let mut slot = slot.borrow_mut();
    match std::mem::replace(&mut *slot, Slot::Taken) {
        Slot::Done(outcome) => Some(outcome),
        other => {
            *slot = other;
            None
        }
    }
}

impl<A, M, R> MessageResponse<A, M> for PersistReply<R>
where
    A: Actor,
    M: Message<Result = PersistResult<R>>,
    R: 'static,
{
    fn handle(self, _: &mut A::Context, tx: Option<OneshotSender<M::Result>>) {
        let Some(tx) = tx else { return };
        let mut slot = self.slot.borrow_mut();
        match std::mem::replace(&mut *slot, Slot::Taken) {
            Slot::Done(outcome) => {
                let _ = tx.send(outcome);
            }
            _ => {
                // The continuation answers the sender directly when it runs.
                *slot = Slot::Forward(Box::new(move |outcome| {
                    let _ = tx.send(outcome);
                }));
            }
        }
    }
}
