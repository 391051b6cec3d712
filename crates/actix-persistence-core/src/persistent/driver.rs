//! The future that runs a persistent actor's recovery and writes while its mailbox waits.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use actix::{ActorContext, ActorFuture, AsyncContext, Context};
use tokio::sync::oneshot;
use tracing::Span;

use super::addr::ActorFailure;
use super::in_flight::InFlightGuard;
use super::recovery::{poll_recovery, Recovered, Recovering};
use super::state::{Invocation, PendingWrite, StopReason};
use super::{PersistError, PersistentActor};
use crate::error::{AtomicWriteError, JournalError};
use crate::journal::{WriteMessages, WriteMessagesReply};
use crate::store::AtomicWriteResult;

/// Queues an invocation of the command being handled, and installs the driver if it is not
/// running. The batch is sent when the driver is next polled: after the handler returned.
pub(crate) fn enqueue<A: PersistentActor>(
    act: &mut A,
    ctx: &mut Context<A>,
    invocation: Invocation<A>,
) {
    let state = act.persistence_mut();
    state.batch.push(invocation);
    if !state.driver_running {
        state.driver_running = true;
        state.driver = DriverState::Idle;
        ctx.wait(Driver::<A>::new());
    }
}

pub(crate) fn start_recovery<A: PersistentActor>(act: &mut A, ctx: &mut Context<A>) {
    let state = act.persistence_mut();
    state.driver_running = true;
    state.driver = DriverState::Recovering(Box::new(Recovering::new(state.recovery_plan())));
    ctx.wait(Driver::<A>::new());
}

/// Where the actor's recovery and writes stand; kept in its `PersistenceState`, so that any
/// future of the actor can move it on ([`pump`]).
#[derive(Default)]
pub(crate) enum DriverState {
    Recovering(Box<Recovering>),
    #[default]
    Idle,
    Awaiting {
        reply: oneshot::Receiver<WriteMessagesReply>,
        writes: usize,
        span: Span,
        /// Held until the continuations ran (and started what they start).
        work: Option<InFlightGuard>,
    },
}

/// Holds the actor's mailbox (via `ctx.wait`) while recovery or writes are outstanding, and
/// moves them on with [`pump`].
pub(crate) struct Driver<A> {
    _actor: PhantomData<fn() -> A>,
}

impl<A> Driver<A> {
    fn new() -> Self {
        Driver {
            _actor: PhantomData,
        }
    }
}

impl<A: PersistentActor> ActorFuture<A> for Driver<A> {
    type Output = ();

    fn poll(
        self: Pin<&mut Self>,
        act: &mut A,
        ctx: &mut Context<A>,
        task: &mut TaskContext<'_>,
    ) -> Poll<()> {
        pump(act, ctx, task)
    }
}

/// Moves the actor's recovery and writes on as far as they go: sends the queued batch, runs
/// continuations of the replies that arrived. `Ready` once nothing is outstanding. Any future
/// the actor waits on may call it (Actix polls only the newest `ctx.wait` future), so a
/// [`super::PersistReply`] awaited inside `ctx.wait` cannot starve the writes it waits for.
pub(crate) fn pump<A: PersistentActor>(
    act: &mut A,
    ctx: &mut Context<A>,
    task: &mut TaskContext<'_>,
) -> Poll<()> {
    if !act.persistence().driver_running {
        return Poll::Ready(());
    }
    let mut state = std::mem::take(&mut act.persistence_mut().driver);
    let progress = run(&mut state, act, ctx, task);
    if progress.is_pending() {
        act.persistence_mut().driver = state;
    }
    progress
}

fn run<A: PersistentActor>(
    state: &mut DriverState,
    act: &mut A,
    ctx: &mut Context<A>,
    task: &mut TaskContext<'_>,
) -> Poll<()> {
    {
        let this = state;
        loop {
            match &mut *this {
                DriverState::Recovering(recovery) => match poll_recovery(recovery, act, task) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(Recovered {
                        last_seq_nr,
                        bounded,
                    })) => {
                        let state = act.persistence_mut();
                        state.partially_recovered = bounded;
                        state.set_recovered_seq_nr(last_seq_nr);
                        state.recovered = true;
                        *this = DriverState::Idle;
                        act.on_recovery_completed(last_seq_nr, ctx);
                    }
                    Poll::Ready(Err(cause)) => {
                        act.persistence()
                            .record_failure(ActorFailure::Recovery(cause.clone()));
                        act.on_recovery_failure(&cause, ctx);
                        act.persistence_mut().driver_running = false;
                        act.persistence_mut().stop_reason = StopReason::RecoveryFailure;
                        ctx.stop();
                        return Poll::Ready(());
                    }
                },
                DriverState::Idle if ctx.state().stopping() => {
                    // A continuation stopped the actor: nothing more is sent.
                    stop_after_failure(act, ctx, StopReason::Normal);
                    return Poll::Ready(());
                }
                DriverState::Idle => match send_batch(act) {
                    None => {
                        act.persistence_mut().driver_running = false;
                        return Poll::Ready(());
                    }
                    Some(Sent::Nothing) => {
                        if !deliver(act, ctx, Vec::new()) {
                            return Poll::Ready(());
                        }
                    }
                    Some(Sent::Writes {
                        reply,
                        writes,
                        span,
                    }) => {
                        *this = DriverState::Awaiting {
                            reply,
                            writes,
                            span,
                            work: act.persistence().enter_work(),
                        }
                    }
                },
                DriverState::Awaiting {
                    reply,
                    writes,
                    span,
                    work,
                } => {
                    let results = match Pin::new(reply).poll(task) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(reply)) => reply.into_results(*writes),
                        Poll::Ready(Err(_)) => {
                            WriteMessagesReply::Failed(JournalError::JournalStopped)
                                .into_results(*writes)
                        }
                    };
                    let span = span.clone();
                    let _entered = span.enter();
                    let _work = work.take();
                    *this = DriverState::Idle;
                    if !deliver(act, ctx, results) {
                        return Poll::Ready(());
                    }
                }
            }
        }
    }
}

enum Sent {
    /// Only defers or pre-rejected writes: nothing to wait for.
    Nothing,
    Writes {
        reply: oneshot::Receiver<WriteMessagesReply>,
        writes: usize,
        span: Span,
    },
}

/// Moves the command's invocations in flight and sends their atomic writes as one batch.
/// `None` when there was nothing queued.
fn send_batch<A: PersistentActor>(act: &mut A) -> Option<Sent> {
    let state = act.persistence_mut();
    if state.batch.is_empty() {
        return None;
    }
    let mut writes = Vec::new();
    for mut invocation in state.batch.drain(..) {
        invocation.write = match std::mem::replace(&mut invocation.write, PendingWrite::None) {
            PendingWrite::Ready(write) => {
                writes.push(write);
                PendingWrite::Sent
            }
            other => other,
        };
        state.in_flight.push_back(invocation);
    }
    if writes.is_empty() {
        return Some(Sent::Nothing);
    }
    let span = tracing::debug_span!(
        "persist",
        persistence_id = %state.persistence_id(),
        from_seq_nr = writes.first().map(|w| w.lowest_seq_nr()).unwrap_or(0),
        to_seq_nr = writes.last().map(|w| w.highest_seq_nr()).unwrap_or(0),
        atomic_writes = writes.len(),
    );
    let (reply_to, reply) = oneshot::channel();
    let count = writes.len();
    state.journal().do_send(WriteMessages {
        writes,
        incarnation: state.incarnation(),
        reply_to,
    });
    Some(Sent::Writes {
        reply,
        writes: count,
        span,
    })
}

/// Runs the in-flight invocations' continuations in order with their results. Returns false
/// when a write failed and the actor is stopping.
fn deliver<A: PersistentActor>(
    act: &mut A,
    ctx: &mut Context<A>,
    results: Vec<AtomicWriteResult>,
) -> bool {
    let mut results = results.into_iter();
    while let Some(invocation) = act.persistence_mut().in_flight.pop_front() {
        let Invocation {
            events,
            write,
            then,
            highest_seq_nr,
        } = invocation;
        let stored_seq_nr = (!events.is_empty()).then_some(highest_seq_nr);
        let outcome: AtomicWriteResult = match write {
            PendingWrite::None => Ok(()),
            PendingWrite::Rejected(rejection) => Err(rejection.into()),
            PendingWrite::Sent | PendingWrite::Ready(_) => results
                .next()
                .unwrap_or(Err(AtomicWriteError::Failed(JournalError::JournalStopped))),
        };
        match outcome {
            Ok(()) => {
                for event in &events {
                    act.apply(event);
                }
                if let Some(seq_nr) = stored_seq_nr {
                    act.persistence_mut().confirm_seq_nr(seq_nr);
                }
                then(act, Ok(&events), ctx);
                if let Some(seq_nr) = stored_seq_nr {
                    let previous = seq_nr - events.len() as u64;
                    super::snapshots::after_stored(act, ctx, previous, seq_nr);
                }
            }
            Err(AtomicWriteError::Rejected(rejection)) => {
                act.on_persist_rejected(&rejection, ctx);
                then(act, Err(PersistError::Rejected(rejection)), ctx);
            }
            Err(AtomicWriteError::Failed(cause)) => {
                act.persistence()
                    .record_failure(ActorFailure::Persist(cause.clone()));
                act.on_persist_failure(&cause, ctx);
                then(act, Err(PersistError::Failed(cause)), ctx);
                stop_after_failure(act, ctx, StopReason::PersistFailure);
                return false;
            }
        }
    }
    true
}

/// Answers every waiting continuation with `ActorStopped` and stops the actor.
fn stop_after_failure<A: PersistentActor>(act: &mut A, ctx: &mut Context<A>, reason: StopReason) {
    let state = act.persistence_mut();
    if reason != StopReason::Normal {
        state.stop_reason = reason;
    }
    let waiting: Vec<_> = state
        .in_flight
        .drain(..)
        .chain(state.batch.drain(..))
        .collect();
    state.driver_running = false;
    for invocation in waiting {
        (invocation.then)(act, Err(PersistError::ActorStopped), ctx);
    }
    ctx.stop();
}
