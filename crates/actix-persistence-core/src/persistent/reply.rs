use std::cell::{Cell, RefCell};
use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context as TaskContext, Poll, Waker};

use actix::dev::{MessageResponse, OneshotSender};
use actix::{Actor, ActorFuture, Context, Message};

use super::driver::pump;
use super::panics::catch_user;
use super::{EventSourced, PersistentActor};

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
    /// The Actix sender of the message whose handler returned the reply.
    Forward(OneshotSender<PersistResult<R>>),
    Awaited(Waker),
    Taken,
}

/// What holds a reply's slot: a bare cell (a ready reply), or a [`Pending`] continuation.
trait HoldsSlot<R> {
    fn slot(&self) -> &RefCell<Slot<R>>;
}

impl<R> HoldsSlot<R> for RefCell<Slot<R>> {
    fn slot(&self) -> &RefCell<Slot<R>> {
        self
    }
}

type SharedSlot<R> = Rc<dyn HoldsSlot<R>>;

/// A `persist`'s continuation and the slot of its reply, in one allocation: the
/// [`Continuation`] runs it, the [`PersistReply`] reads the slot.
struct Pending<R, F> {
    slot: RefCell<Slot<R>>,
    /// Taken when the continuation runs or is abandoned.
    then: Cell<Option<F>>,
}

impl<R, F> HoldsSlot<R> for Pending<R, F> {
    fn slot(&self) -> &RefCell<Slot<R>> {
        &self.slot
    }
}

/// The type-erased side of a [`Pending`] the driver calls.
trait RunContinuation<A: EventSourced> {
    fn run(
        &self,
        actor: Option<(&mut A, &mut Context<A>)>,
        outcome: Result<&[A::Event], PersistError>,
    ) -> Result<(), String>;

    /// Answers [`PersistError::ActorStopped`] unless the continuation ran.
    fn abandon(&self);
}

impl<A, R, F> RunContinuation<A> for Pending<R, F>
where
    A: EventSourced,
    F: FnOnce(&mut A, &[A::Event], &mut Context<A>) -> R,
{
    fn run(
        &self,
        actor: Option<(&mut A, &mut Context<A>)>,
        outcome: Result<&[A::Event], PersistError>,
    ) -> Result<(), String> {
        let Some(then) = self.then.take() else {
            return Ok(());
        };
        match (actor, outcome) {
            (Some((act, ctx)), Ok(events)) => match catch_user(|| then(act, events, ctx)) {
                Ok(value) => {
                    fill(&self.slot, Ok(value));
                    Ok(())
                }
                Err(reason) => {
                    fill(
                        &self.slot,
                        Err(PersistError::Panicked {
                            reason: reason.clone(),
                        }),
                    );
                    Err(reason)
                }
            },
            (None, Ok(_)) => {
                drop(then);
                fill(&self.slot, Err(PersistError::StoppedAfterStore));
                Ok(())
            }
            (_, Err(cause)) => {
                drop(then);
                fill(&self.slot, Err(cause));
                Ok(())
            }
        }
    }

    fn abandon(&self) {
        if let Some(then) = self.then.take() {
            drop(then);
            fill(&self.slot, Err(PersistError::ActorStopped));
        }
    }
}

/// A continuation: runs once with the stored events, or with why they were not stored.
///
/// With the actor (`Some`) and stored events it runs the user's continuation, catching a panic:
/// `Err` carries the panic message, and the driver stops the actor. Without the actor (`None`:
/// the actor is stopping or gone) it only answers the caller: stored events become
/// [`PersistError::StoppedAfterStore`]. Dropping it without running it answers
/// [`PersistError::ActorStopped`], so no reply waits forever.
pub(crate) struct Continuation<A: EventSourced> {
    pending: Option<Rc<dyn RunContinuation<A>>>,
}

impl<A: EventSourced> Continuation<A> {
    /// `then` as a continuation, and the reply it fills (one allocation for both).
    pub(crate) fn new<R, F>(then: F) -> (Self, PersistReply<R>)
    where
        R: 'static,
        F: FnOnce(&mut A, &[A::Event], &mut Context<A>) -> R + 'static,
    {
        let pending = Rc::new(Pending {
            slot: RefCell::new(Slot::Empty),
            then: Cell::new(Some(then)),
        });
        let slot: SharedSlot<R> = Rc::clone(&pending) as SharedSlot<R>;
        let continuation = Continuation {
            pending: Some(pending),
        };
        (continuation, PersistReply { slot })
    }

    /// Runs the continuation (see the type's docs).
    pub(crate) fn call(
        mut self,
        actor: Option<(&mut A, &mut Context<A>)>,
        outcome: Result<&[A::Event], PersistError>,
    ) -> Result<(), String> {
        match self.pending.take() {
            Some(pending) => pending.run(actor, outcome),
            None => Ok(()),
        }
    }
}

impl<A: EventSourced> Drop for Continuation<A> {
    fn drop(&mut self) {
        if let Some(pending) = self.pending.take() {
            pending.abandon();
        }
    }
}

fn fill<R>(slot: &RefCell<Slot<R>>, outcome: PersistResult<R>) {
    let previous = std::mem::replace(&mut *slot.borrow_mut(), Slot::Taken);
    match previous {
        Slot::Forward(sender) => {
            // The asker may be gone; nobody waits for the outcome then.
            let _ = sender.send(outcome);
        }
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

impl<R: 'static> PersistReply<R> {
    /// A reply that is already there: for a command handled without persisting (e.g. one the
    /// actor refuses after validating it).
    pub fn ready(value: R) -> Self {
        PersistReply {
            slot: Rc::new(RefCell::new(Slot::Done(Ok(value)))),
        }
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
    let mut slot = slot.slot().borrow_mut();
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
    let mut slot = slot.slot().borrow_mut();
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
        let mut slot = self.slot.slot().borrow_mut();
        if let Slot::Done(_) = &*slot {
            if let Slot::Done(outcome) = std::mem::replace(&mut *slot, Slot::Taken) {
                let _ = tx.send(outcome);
            }
        } else {
            // The continuation answers the sender directly when it runs.
            *slot = Slot::Forward(tx);
        }
    }
}
