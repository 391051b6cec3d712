//! The future that runs a persistent actor's recovery and writes while its mailbox waits.

use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use actix::{ActorContext, ActorFuture, AsyncContext, Context};
use tracing::Span;

use super::addr::ActorFailure;
use super::in_flight::InFlightGuard;
use super::panics::catch_user;
use super::recovery::{poll_recovery, Recovered, Recovering};
use super::state::{Invocation, PendingWrite, StopReason};
use super::{PersistError, PersistentActor, RecoveryError};
use crate::error::{AtomicWriteError, JournalError};
use crate::journal::{SlotReply, WriteMessages, WriteMessagesReply};
use crate::store::{AtomicWriteResult, WriteBatch, WriteResults};

/// Queues an invocation of the command being handled, and installs the driver if it is not
/// running. The batch is sent when the driver is next polled: after the handler returned.
#[inline]
pub(crate) fn enqueue<A: PersistentActor>(
    act: &mut A,
    ctx: &mut Context<A>,
    invocation: Invocation<A>,
) {
    let state = act.persistence_mut();
    state.invocations.push_back(invocation);
    if !state.driver_running {
        state.driver_running = true;
        state.driver = DriverState::Idle;
        ctx.wait(Driver::<A>::new());
    }
}

pub(crate) fn start_recovery<A: PersistentActor>(act: &mut A, ctx: &mut Context<A>) {
    let state = act.persistence_mut();
    state.recovery_started = true;
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
    /// A batch is with the journal; its reply comes into the state's `reply_slot`.
    Awaiting {
        writes: usize,
        /// Only when tracing's DEBUG level is on (a span costs even when nothing listens).
        span: Option<Span>,
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
///
/// The state is moved on where it lies (`PersistenceState::driver`); only recovery is taken
/// out while it is polled (it needs the actor).
pub(crate) fn pump<A: PersistentActor>(
    act: &mut A,
    ctx: &mut Context<A>,
    task: &mut TaskContext<'_>,
) -> Poll<()> {
    if !act.persistence().driver_running {
        return Poll::Ready(());
    }
    loop {
        let state = act.persistence_mut();
        match &mut state.driver {
            DriverState::Recovering(_) => match recover(act, ctx, task) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(false) => return Poll::Ready(()),
                Poll::Ready(true) => {}
            },
            DriverState::Idle if ctx.state().stopping() => {
                // A continuation stopped the actor: nothing more is sent.
                stop_with(act, ctx, StopReason::Normal, Vec::new().into_iter());
                return Poll::Ready(());
            }
            DriverState::Idle => match send_batch(act) {
                None => {
                    act.persistence_mut().driver_running = false;
                    return Poll::Ready(());
                }
                Some(Sent::Nothing) => {
                    if !deliver(act, ctx, WriteResults::new()) {
                        return Poll::Ready(());
                    }
                }
                Some(Sent::Writes { writes, span }) => {
                    let state = act.persistence_mut();
                    state.driver = DriverState::Awaiting {
                        writes,
                        span,
                        work: state.enter_work(),
                    };
                    // The slot keeps the waker it was given: when it is this task's, the
                    // reply wakes the task and the slot need not be polled now.
                    if state
                        .slot_waker
                        .as_ref()
                        .is_some_and(|waker| waker.will_wake(task.waker()))
                    {
                        return Poll::Pending;
                    }
                }
            },
            DriverState::Awaiting { writes, span, work } => {
                let SlotReply { reply, channel } = match state.reply_slot.poll(task) {
                    Poll::Pending => {
                        // Registered in the slot: remember whose waker it holds.
                        if !state
                            .slot_waker
                            .as_ref()
                            .is_some_and(|waker| waker.will_wake(task.waker()))
                        {
                            state.slot_waker = Some(task.waker().clone());
                        }
                        return Poll::Pending;
                    }
                    Poll::Ready(reply) => reply,
                };
                let results = match reply {
                    Ok(reply) => reply.into_results(*writes),
                    Err(_) => WriteMessagesReply::Failed(JournalError::JournalStopped)
                        .into_results(*writes),
                };
                let span = span.take();
                let _entered = span.as_ref().map(Span::enter);
                let _work = work.take();
                state.driver = DriverState::Idle;
                if channel.is_some() {
                    state.write_channel = channel;
                }
                if !deliver(act, ctx, results) {
                    return Poll::Ready(());
                }
            }
        }
    }
}

/// Polls the recovery, taken out of the state meanwhile: `Ready(true)` once it completed (the
/// state is `Idle` again), `Ready(false)` when it failed and the actor stops.
fn recover<A: PersistentActor>(
    act: &mut A,
    ctx: &mut Context<A>,
    task: &mut TaskContext<'_>,
) -> Poll<bool> {
    let mut recovery = match std::mem::take(&mut act.persistence_mut().driver) {
        DriverState::Recovering(recovery) => recovery,
        other => {
            act.persistence_mut().driver = other;
            return Poll::Ready(true);
        }
    };
    match poll_recovery(&mut recovery, act, task) {
        Poll::Pending => {
            act.persistence_mut().driver = DriverState::Recovering(recovery);
            Poll::Pending
        }
        Poll::Ready(Ok(Recovered {
            last_seq_nr,
            bounded,
        })) => {
            let state = act.persistence_mut();
            state.partially_recovered = bounded;
            state.set_recovered_seq_nr(last_seq_nr);
            state.recovered = true;
            let completed = catch_user(|| act.on_recovery_completed(last_seq_nr, ctx));
            if let Err(reason) = completed {
                let cause = RecoveryError::Panicked {
                    persistence_id: act.persistence_id().to_owned(),
                    hook: "on_recovery_completed",
                    reason,
                };
                fail_recovery(act, ctx, &cause);
                return Poll::Ready(false);
            }
            Poll::Ready(true)
        }
        Poll::Ready(Err(cause)) => {
            fail_recovery(act, ctx, &cause);
            Poll::Ready(false)
        }
    }
}

enum Sent {
    /// Only defers or pre-rejected writes: nothing to wait for.
    Nothing,
    Writes {
        writes: usize,
        span: Option<Span>,
    },
}

/// Puts the command's invocations in flight (they stay where they are queued) and sends their
/// atomic writes as one batch. `None` when there was nothing queued.
fn send_batch<A: PersistentActor>(act: &mut A) -> Option<Sent> {
    let state = act.persistence_mut();
    let unsent = state.invocations.len() - state.in_flight;
    if unsent == 0 {
        return None;
    }
    let mut writes = WriteBatch::with_capacity(unsent);
    for invocation in state.invocations.range_mut(state.in_flight..) {
        if let PendingWrite::Ready(_) = invocation.write {
            if let PendingWrite::Ready(write) =
                std::mem::replace(&mut invocation.write, PendingWrite::Sent)
            {
                writes.push(write);
            }
        }
    }
    state.in_flight = state.invocations.len();
    if writes.is_empty() {
        return Some(Sent::Nothing);
    }
    // Spans cost a few hundred instructions per persist even when nothing listens.
    let span = tracing::level_enabled!(tracing::Level::DEBUG).then(|| {
        tracing::debug_span!(
            "persist",
            persistence_id = %state.persistence_id(),
            from_seq_nr = writes.first().map(|w| w.lowest_seq_nr()).unwrap_or(0),
            to_seq_nr = writes.last().map(|w| w.highest_seq_nr()).unwrap_or(0),
            atomic_writes = writes.len(),
        )
    });
    let count = writes.len();
    let msg = WriteMessages {
        writes,
        incarnation: state.incarnation(),
        reply_to: state.reply_slot.reply_to(),
    };
    // Through the journal's write channel once it handed one over; else (the first write, or
    // the channel closed because the journal stopped) through its mailbox. A write the
    // journal never handles is dropped, and its dropped `ReplyTo` reports `JournalStopped`.
    match &state.write_channel {
        Some(channel) => {
            if let Err(closed) = channel.send(msg) {
                state.write_channel = None;
                state.journal().do_send(closed);
            }
        }
        None => state.journal().do_send(msg),
    }
    Some(Sent::Writes {
        writes: count,
        span,
    })
}

/// Runs the in-flight invocations' continuations in order with their results (invocations
/// their continuations queue stay for the next batch). Returns false
/// when the actor is stopping (a write failed, or user code panicked).
fn deliver<A: PersistentActor>(act: &mut A, ctx: &mut Context<A>, results: WriteResults) -> bool {
    let mut results = results.into_iter();
    while let Some(invocation) = act.persistence_mut().pop_in_flight() {
        let Invocation {
            events,
            write,
            then,
            highest_seq_nr,
        } = invocation;
        let outcome: AtomicWriteResult = match write {
            PendingWrite::None => Ok(()),
            PendingWrite::Rejected(rejection) => Err(rejection.into()),
            PendingWrite::Sent | PendingWrite::Ready(_) => results
                .next()
                .unwrap_or(Err(AtomicWriteError::Failed(JournalError::JournalStopped))),
        };
        match outcome {
            Ok(()) => {
                if let Err(reason) = apply_stored(act, &events, highest_seq_nr) {
                    let _ = then.call(
                        None,
                        Err(PersistError::Panicked {
                            reason: reason.clone(),
                        }),
                    );
                    stop_with(act, ctx, StopReason::Panicked { reason }, results);
                    return false;
                }
                if let Err(reason) = then.call(Some((act, ctx)), Ok(&events)) {
                    stop_with(act, ctx, StopReason::Panicked { reason }, results);
                    return false;
                }
                // The snapshot policy's check, only when it takes snapshots every N events.
                if !events.is_empty() && act.persistence().snapshot_policy.every.is_some() {
                    let previous = highest_seq_nr - events.len() as u64;
                    let snapshot = catch_user(|| {
                        super::snapshots::after_stored(act, ctx, previous, highest_seq_nr)
                    });
                    if let Err(reason) = snapshot {
                        stop_with(act, ctx, StopReason::Panicked { reason }, results);
                        return false;
                    }
                }
            }
            Err(AtomicWriteError::Rejected(rejection)) => {
                // As Akka's `updateLastSequenceNr` before `onPersistRejected`: the rejected
                // write's numbers are used up, whichever kind of rejection it was (0, a no-op,
                // for a persist before recovery completed, which took none).
                act.persistence_mut().use_up_seq_nr(highest_seq_nr);
                let hook = catch_user(|| act.on_persist_rejected(&rejection, ctx));
                let _ = then.call(Some((act, ctx)), Err(PersistError::Rejected(rejection)));
                if let Err(reason) = hook {
                    stop_with(act, ctx, StopReason::Panicked { reason }, results);
                    return false;
                }
            }
            Err(AtomicWriteError::Failed(cause)) => {
                let fenced = matches!(cause, JournalError::Fenced { .. });
                let fenced_cause = fenced.then(|| cause.clone());
                act.persistence()
                    .record_failure(ActorFailure::Persist(cause.clone()));
                let hook = catch_user(|| act.on_persist_failure(&cause, ctx));
                let _ = then.call(None, Err(PersistError::Failed(cause)));
                let reason = match hook {
                    // Fenced whatever the hook did: a newer incarnation owns the id, and a
                    // supervisor restarting this one (as after a panic) would take it back.
                    Err(reason) if fenced => {
                        tracing::error!(panic = %reason, "on_persist_failure panicked after a fenced write; the actor stops as fenced");
                        StopReason::Fenced
                    }
                    Ok(()) if fenced => StopReason::Fenced,
                    Ok(()) => StopReason::PersistFailure,
                    Err(reason) => StopReason::Panicked { reason },
                };
                // The later writes of this batch were not attempted because of the fenced one
                // (`EarlierWriteFailed`): they carry the same stale token, so their callers are
                // told they were fenced too, and can retry against the owning node.
                let results = results.map(move |result| match (result, &fenced_cause) {
                    (
                        Err(AtomicWriteError::Failed(JournalError::EarlierWriteFailed { .. })),
                        Some(fenced),
                    ) => Err(AtomicWriteError::Failed(fenced.clone())),
                    (other, _) => other,
                });
                stop_with(act, ctx, reason, results);
                return false;
            }
        }
    }
    true
}

/// Applies the events of a stored atomic write in order, `last_seq_nr` reading each event's
/// own sequence number while it is applied. `Err` with the message when `apply` panicked.
fn apply_stored<A: PersistentActor>(
    act: &mut A,
    events: &[A::Event],
    highest_seq_nr: u64,
) -> Result<(), String> {
    if events.is_empty() {
        return Ok(());
    }
    let first = highest_seq_nr - (events.len() as u64 - 1);
    catch_user(|| {
        for (seq_nr, event) in (first..=highest_seq_nr).zip(events) {
            act.persistence_mut().confirm_seq_nr(seq_nr);
            act.apply(event);
        }
    })
}

/// Runs `on_recovery_failure` (a panic in it is logged) and stops the actor.
fn fail_recovery<A: PersistentActor>(act: &mut A, ctx: &mut Context<A>, cause: &RecoveryError) {
    act.persistence()
        .record_failure(ActorFailure::Recovery(cause.clone()));
    if let Err(reason) = catch_user(|| act.on_recovery_failure(cause, ctx)) {
        tracing::error!(%cause, panic = %reason, "on_recovery_failure panicked");
    }
    let state = act.persistence_mut();
    state.driver_running = false;
    state.stop_reason = StopReason::RecoveryFailure;
    // Unconditionally (Akka stops the actor on any recovery failure): `ctx.stop()` runs
    // `Actor::stopping`, whose `Running::Continue` would keep an actor that never recovered
    // handling commands. `Actor::stopped` still runs.
    ctx.terminate();
}

/// Answers every waiting continuation with what happened to its write and stops the actor:
/// the invocations still in flight take their results from `results` (stored events are
/// reported as [`PersistError::StoppedAfterStore`], never as `ActorStopped`); those not sent
/// get [`PersistError::ActorStopped`].
pub(crate) fn stop_with<A: PersistentActor>(
    act: &mut A,
    ctx: &mut Context<A>,
    reason: StopReason,
    mut results: impl Iterator<Item = AtomicWriteResult>,
) {
    let state = act.persistence_mut();
    if let StopReason::Panicked { reason } = &reason {
        state.record_failure(ActorFailure::Panicked {
            reason: reason.clone(),
        });
    }
    let failed = reason != StopReason::Normal;
    if failed {
        state.stop_reason = reason;
    }
    let waiting = state.take_invocations();
    state.driver_running = false;
    for invocation in waiting {
        let outcome = match invocation.write {
            PendingWrite::Sent => match results.next() {
                Some(Ok(())) => Ok(&invocation.events[..]),
                Some(Err(AtomicWriteError::Rejected(r))) => Err(PersistError::Rejected(r)),
                Some(Err(AtomicWriteError::Failed(e))) => Err(PersistError::Failed(e)),
                None => Err(PersistError::StoppedDuringWrite),
            },
            PendingWrite::Rejected(rejection) => Err(PersistError::Rejected(rejection)),
            PendingWrite::None | PendingWrite::Ready(_) => Err(PersistError::ActorStopped),
        };
        let _ = invocation.then.call(None, outcome);
    }
    if !failed {
        // The actor was asked to stop (`ctx.stop()` in a continuation): its `stopping` decides.
        ctx.stop();
    } else {
        // A failure stops it unconditionally, as Akka's `onPersistFailure`: the failed write's
        // events may or may not be stored, which the state cannot tell. `ctx.stop()` runs
        // `Actor::stopping`, and its `Running::Continue` kept the actor handling commands.
        // `Actor::stopped` still runs.
        ctx.terminate();
    }
}
