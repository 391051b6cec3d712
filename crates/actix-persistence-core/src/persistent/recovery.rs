//! Recovery options and the recovery part of the driver: newest matching snapshot, then the
//! events after it, streamed, then the recovery-completed hook.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use actix::Addr;
use futures::future::LocalBoxFuture;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{sleep_until, Instant, Sleep};
use tracing::Span;

use super::panics::catch_user;
use super::{PersistentActor, RecoveryError};
use crate::error::JournalError;
use crate::journal::{JournalActor, RecoveryReplay, ReplayMessages, TakeOwnership};
use crate::serialization::SerializationError;
use crate::snapshot::{SelectedSnapshot, SnapshotError, SnapshotSelectionCriteria, SnapshotStore};
use crate::store::{FencingToken, ReplayStream, MAX_SEQ_NR};

/// Replayed events applied in one poll at most before the driver yields to other tasks.
pub const REPLAY_EVENTS_PER_POLL: usize = 64;

/// Time spent applying replayed events in one poll at most (checked after each event) before
/// the driver yields: a slow `apply` neither holds other actors back nor delays a stop for
/// longer than about this.
const REPLAY_TIME_PER_POLL: Duration = Duration::from_millis(1);

/// What a persistent actor recovers when it starts (as Akka's `Recovery`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Which snapshot to start from; [`SnapshotSelectionCriteria::none`] replays all events.
    pub from_snapshot: SnapshotSelectionCriteria,
    /// Replay events up to this sequence number (inclusive).
    pub to_seq_nr: u64,
    /// Replay at most this many events.
    pub max_events: u64,
}

impl Recovery {
    /// From the newest snapshot, then every event after it (the default).
    pub const fn latest() -> Self {
        Recovery {
            from_snapshot: SnapshotSelectionCriteria::latest(),
            to_seq_nr: MAX_SEQ_NR,
            max_events: u64::MAX,
        }
    }

    /// No snapshot and no event: the actor starts empty but continues the sequence numbers
    /// (as Akka's `Recovery.none`).
    pub const fn none() -> Self {
        Recovery {
            from_snapshot: SnapshotSelectionCriteria::none(),
            to_seq_nr: 0,
            max_events: 0,
        }
    }
}

impl Default for Recovery {
    fn default() -> Self {
        Self::latest()
    }
}

/// Limits how many persistent actors recover at once; the others wait in arrival order.
/// Share one between all actors of a journal (the facade does, from
/// `journal.max-concurrent-recoveries`).
#[derive(Debug, Clone)]
pub struct RecoveryPermits(Arc<Semaphore>);

impl RecoveryPermits {
    /// At most `max` concurrent recoveries (at least 1; at most [`Semaphore::MAX_PERMITS`],
    /// `usize::MAX >> 3`, which no number of actors reaches: a larger `max`, such as
    /// `usize::MAX` for "no limit", is that).
    pub fn new(max: usize) -> Self {
        RecoveryPermits(Arc::new(Semaphore::new(
            max.clamp(1, Semaphore::MAX_PERMITS),
        )))
    }

    /// Recoveries that could start now.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }
}

/// Everything recovery needs, taken from the actor's state when it starts.
pub(crate) struct RecoveryPlan {
    pub(crate) persistence_id: String,
    pub(crate) journal: Addr<JournalActor>,
    pub(crate) snapshots: Option<Arc<dyn SnapshotStore>>,
    pub(crate) recovery: Recovery,
    pub(crate) permits: Option<RecoveryPermits>,
    pub(crate) timeout: Duration,
    /// The snapshot store's call timeout: bounds the snapshot load too (as every snapshot
    /// call), within the recovery timeout.
    pub(crate) snapshot_timeout: Duration,
}

/// What the asynchronous first part of recovery found.
struct Start {
    snapshot: Option<SelectedSnapshot>,
    fencing_token: FencingToken,
    highest_seq_nr: u64,
    deleted_to: Option<u64>,
    events: ReplayStream,
    permit: Option<OwnedSemaphorePermit>,
    /// When the recovery got its permit, for [`crate::metrics::RECOVERY_DURATION`].
    started: Instant,
}

/// The recovery in progress.
pub(crate) struct Recovering {
    start: Option<LocalBoxFuture<'static, Result<Start, RecoveryError>>>,
    replay: Option<(u64, ReplayStream)>,
    /// The sequence number of the loaded snapshot (0 without one).
    snapshot_seq_nr: Option<u64>,
    /// How far the journal deleted events (`None`: the store does not say).
    deleted_to: Option<u64>,
    /// Whether the replay stream ended (it is not polled again).
    ended: bool,
    _permit: Option<OwnedSemaphorePermit>,
    /// Fires after `timeout` without progress; created on the first poll (inside the runtime).
    idle: Option<Pin<Box<Sleep>>>,
    timeout: Duration,
    replayed: u64,
    bounds: Recovery,
    pub(crate) span: Span,
    /// When it got its permit (see [`Start::started`]).
    started: Option<Instant>,
}

/// How recovery ended.
pub(crate) struct Recovered {
    /// The highest sequence number stored for the id.
    pub(crate) last_seq_nr: u64,
    /// Whether the recovery's bounds (`to_seq_nr`, `max_events`) left stored events out.
    pub(crate) bounded: bool,
}

impl Recovering {
    pub(crate) fn new(plan: RecoveryPlan) -> Self {
        let span = tracing::debug_span!(
            "recovery",
            persistence_id = %plan.persistence_id,
            snapshot_seq_nr = tracing::field::Empty,
            highest_seq_nr = tracing::field::Empty,
            replayed = tracing::field::Empty,
        );
        let timeout = plan.timeout;
        let bounds = plan.recovery;
        Recovering {
            bounds,
            start: Some(Box::pin(start(plan))),
            replay: None,
            snapshot_seq_nr: None,
            deleted_to: None,
            ended: false,
            _permit: None,
            idle: None,
            timeout,
            replayed: 0,
            span,
            started: None,
        }
    }

    fn made_progress(&mut self) {
        let deadline = crate::clock::far_future_saturating(self.timeout);
        match &mut self.idle {
            Some(idle) => idle.as_mut().reset(deadline),
            None => self.idle = Some(Box::pin(sleep_until(deadline))),
        }
    }

    fn timed_out(&mut self, task: &mut TaskContext<'_>) -> bool {
        let timeout = self.timeout;
        let idle = self.idle.get_or_insert_with(|| {
            Box::pin(sleep_until(crate::clock::far_future_saturating(timeout)))
        });
        idle.as_mut().poll(task).is_ready()
    }
}

/// Waits for a permit (not counted against the timeout), then takes ownership of the id, loads
/// the snapshot and opens the replay, each within the timeout.
///
/// Ownership comes first: until it is taken, the previous incarnation (in this process or
/// another) still owns the id, and may save a newer snapshot and delete the events up to it
/// (a snapshot policy with `delete_events` does), so a snapshot loaded before the takeover may
/// no longer be followed by the events after it (recovery then failed with
/// [`RecoveryError::MissingEvents`]). Once the takeover is stored, the previous incarnation's
/// writes and event deletes are fenced, and a delete it committed before is seen together with
/// the snapshot it saved before deleting.
async fn start(plan: RecoveryPlan) -> Result<Start, RecoveryError> {
    let permit = match &plan.permits {
        Some(permits) => {
            let waiting = metrics::gauge!(crate::metrics::RECOVERY_PERMITS_WAITING);
            waiting.increment(1.0);
            let permit = Arc::clone(&permits.0).acquire_owned().await.ok();
            waiting.decrement(1.0);
            permit
        }
        None => None,
    };
    let started = Instant::now();
    let pid = plan.persistence_id.clone();
    let timed_out = || RecoveryError::Timeout {
        persistence_id: pid.clone(),
        timeout: plan.timeout,
    };
    let fencing_token = take_ownership(&plan).await?;
    let snapshot = match (&plan.snapshots, plan.recovery.from_snapshot) {
        (Some(store), criteria) if criteria != SnapshotSelectionCriteria::none() => {
            let criteria = SnapshotSelectionCriteria {
                max_seq_nr: criteria.max_seq_nr.min(plan.recovery.to_seq_nr),
                ..criteria
            };
            let snapshot_failed = |source: SnapshotError| RecoveryError::Snapshot {
                persistence_id: plan.persistence_id.clone(),
                reason: source.to_string(),
                source: Box::new(source.into()),
            };
            // Within the snapshot store's call timeout (a load that times out fails recovery,
            // as `snapshot-store.call-timeout` says), and within the recovery's.
            let load = super::snapshots::with_timeout("load", plan.snapshot_timeout, || {
                store.load(&plan.persistence_id, criteria)
            });
            match tokio::time::timeout(plan.timeout, load).await {
                Err(_) => return Err(timed_out()),
                Ok(loaded) => loaded.map_err(snapshot_failed)?,
            }
        }
        _ => None,
    };
    // Saturating: a snapshot at `u64::MAX` (a store of another kind may hold one) is followed
    // by no event (none is stored above the limits).
    let from = snapshot
        .as_ref()
        .map_or(0, |s| s.metadata.seq_nr)
        .saturating_add(1);
    let request = plan.journal.send(RecoveryReplay(ReplayMessages {
        persistence_id: plan.persistence_id.clone(),
        from_seq_nr: from,
        to_seq_nr: plan.recovery.to_seq_nr,
        max: plan.recovery.max_events,
    }));
    let replay = tokio::time::timeout(plan.timeout, request)
        .await
        .map_err(|_| timed_out())?
        .unwrap_or(Err(JournalError::JournalStopped))
        .map_err(|source| RecoveryError::Journal {
            persistence_id: plan.persistence_id.clone(),
            source,
        })?;
    Ok(Start {
        snapshot,
        fencing_token,
        highest_seq_nr: replay.highest_seq_nr,
        deleted_to: replay.deleted_to,
        events: replay.events,
        permit,
        started,
    })
}

/// Takes ownership of the persistence id before the replay (within the recovery timeout), so
/// that every write of an older incarnation is either replayed or fenced.
async fn take_ownership(plan: &RecoveryPlan) -> Result<FencingToken, RecoveryError> {
    let request = plan.journal.send(TakeOwnership {
        persistence_id: plan.persistence_id.clone(),
    });
    let ownership = tokio::time::timeout(plan.timeout, request)
        .await
        .map_err(|_| RecoveryError::Timeout {
            persistence_id: plan.persistence_id.clone(),
            timeout: plan.timeout,
        })?
        .unwrap_or(Err(JournalError::JournalStopped))
        .map_err(|source| RecoveryError::Journal {
            persistence_id: plan.persistence_id.clone(),
            source,
        })?;
    Ok(ownership.fencing_token)
}

/// Drives recovery one step; yields the last sequence number when done, and reports its
/// duration and the events it replayed ([`crate::metrics`]).
///
/// Applies at most [`REPLAY_EVENTS_PER_POLL`] events, or [`REPLAY_TIME_PER_POLL`] of them,
/// per poll, then yields through the runtime's scheduler (so a stop of the actor's arbiter,
/// and every other task, gets its turn before the next events), also once between the last
/// event and completion: a stop requested while recovering takes effect before any command.
pub(crate) fn poll_recovery<A: PersistentActor>(
    recovery: &mut Recovering,
    act: &mut A,
    task: &mut TaskContext<'_>,
) -> Poll<Result<Recovered, RecoveryError>> {
    let polled = poll_recovery_steps(recovery, act, task);
    if let Poll::Ready(outcome) = &polled {
        if let Some(started) = recovery.started {
            metrics::histogram!(crate::metrics::RECOVERY_DURATION)
                .record(started.elapsed().as_secs_f64());
        }
        if outcome.is_ok() {
            metrics::histogram!(crate::metrics::RECOVERY_EVENTS_REPLAYED)
                .record(recovery.replayed as f64);
        }
    }
    polled
}

fn poll_recovery_steps<A: PersistentActor>(
    recovery: &mut Recovering,
    act: &mut A,
    task: &mut TaskContext<'_>,
) -> Poll<Result<Recovered, RecoveryError>> {
    let span = recovery.span.clone();
    let _entered = span.enter();
    if let Some(start) = &mut recovery.start {
        let found = match start.as_mut().poll(task) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(found) => found?,
        };
        recovery.start = None;
        recovery._permit = found.permit;
        recovery.started = Some(found.started);
        act.persistence_mut().set_fencing_token(found.fencing_token);
        recovery.deleted_to = found.deleted_to;
        let mut last = 0;
        if let Some(snapshot) = found.snapshot {
            last = snapshot.metadata.seq_nr;
            recovery.snapshot_seq_nr = Some(last);
            recovery.span.record("snapshot_seq_nr", last);
            act.persistence_mut().set_recovered_seq_nr(last);
            let snapshotting = catch_user(A::snapshotting)
                .map_err(|reason| panicked(act, "EventSourced::snapshotting", reason))?;
            let restored = match snapshotting {
                Some(snapshotting) => catch_user(|| snapshotting.restore(act, &snapshot))
                    .map_err(|reason| panicked(act, "Snapshotting::restore", reason))?,
                None => Err(SerializationError::SnapshotDeserialize {
                    seq_nr: last,
                    reason: "this actor restores no snapshots: EventSourced::snapshotting \
                             returns None; implement it, or (only when no events were deleted \
                             under the snapshot) recover from the events alone with \
                             PersistenceState::with_recovery(Recovery { from_snapshot: \
                             SnapshotSelectionCriteria::none(), ..Recovery::latest() })"
                        .to_owned(),
                }),
            };
            restored.map_err(|e| RecoveryError::Snapshot {
                persistence_id: act.persistence_id().to_owned(),
                reason: e.to_string(),
                source: Box::new(e.into()),
            })?;
        }
        recovery.span.record("highest_seq_nr", found.highest_seq_nr);
        act.persistence_mut().set_recovered_seq_nr(last);
        recovery.replay = Some((found.highest_seq_nr.max(last), found.events));
        recovery.made_progress();
    }
    let Some((highest, events)) = &mut recovery.replay else {
        return Poll::Ready(Err(RecoveryError::Journal {
            persistence_id: act.persistence_id().to_owned(),
            source: JournalError::JournalStopped,
        }));
    };
    let highest = *highest;
    if recovery.ended {
        return Poll::Ready(complete(recovery, act, highest));
    }
    let covered = (recovery.snapshot_seq_nr, recovery.deleted_to);
    let started = Instant::now();
    let mut applied = 0;
    loop {
        if applied == REPLAY_EVENTS_PER_POLL
            || (applied > 0 && started.elapsed() >= REPLAY_TIME_PER_POLL)
        {
            recovery.made_progress();
            yield_to_scheduler(task);
            return Poll::Pending;
        }
        match events.as_mut().poll_next(task) {
            Poll::Pending => {
                if applied > 0 {
                    recovery.made_progress();
                }
                if recovery.timed_out(task) {
                    return Poll::Ready(Err(RecoveryError::Timeout {
                        persistence_id: act.persistence_id().to_owned(),
                        timeout: recovery.timeout,
                    }));
                }
                return Poll::Pending;
            }
            Poll::Ready(Some(Ok(repr))) => {
                check_expected(&recovery.bounds, recovery.replayed, &repr, act)?;
                if recovery.replayed == 0 {
                    check_not_deleted(covered, repr.seq_nr.saturating_sub(1), act)?;
                }
                let event = catch_user(|| act.deserialize_event(&repr))
                    .map_err(|reason| panicked(act, "deserialize_event", reason))?
                    .map_err(|source| RecoveryError::Deserialize {
                        persistence_id: act.persistence_id().to_owned(),
                        source,
                    })?;
                act.persistence_mut().set_recovered_seq_nr(repr.seq_nr);
                catch_user(|| act.apply(&event))
                    .map_err(|reason| panicked(act, "apply", reason))?;
                recovery.replayed += 1;
                applied += 1;
            }
            Poll::Ready(Some(Err(source))) => {
                return Poll::Ready(Err(RecoveryError::Journal {
                    persistence_id: act.persistence_id().to_owned(),
                    source,
                }))
            }
            Poll::Ready(None) => {
                recovery.ended = true;
                if applied == 0 {
                    return Poll::Ready(complete(recovery, act, highest));
                }
                // User code ran in this poll: let a pending stop take effect first.
                recovery.made_progress();
                yield_to_scheduler(task);
                return Poll::Pending;
            }
        }
    }
}

/// Fails recovery on an event it did not ask for ([`RecoveryError::UnexpectedEvent`]): not
/// above the last applied sequence number, above the recovery's bounds, or of another id.
#[inline]
fn check_expected<A: PersistentActor>(
    bounds: &Recovery,
    replayed: u64,
    repr: &crate::store::PersistentRepr,
    act: &A,
) -> Result<(), RecoveryError> {
    if repr.seq_nr > act.last_seq_nr()
        && repr.seq_nr <= bounds.to_seq_nr
        && replayed < bounds.max_events
        && *repr.persistence_id == *act.persistence_id()
    {
        Ok(())
    } else {
        Err(unexpected_event(repr, act))
    }
}

#[cold]
fn unexpected_event<A: PersistentActor>(
    repr: &crate::store::PersistentRepr,
    act: &A,
) -> RecoveryError {
    RecoveryError::UnexpectedEvent {
        persistence_id: act.persistence_id().to_owned(),
        event_persistence_id: repr.persistence_id.to_string(),
        seq_nr: repr.seq_nr,
        after: act.last_seq_nr(),
    }
}

/// The end of the replay: checks that no stored event is missing after the snapshot, and
/// says how recovery ended.
fn complete<A: PersistentActor>(
    recovery: &Recovering,
    act: &A,
    highest: u64,
) -> Result<Recovered, RecoveryError> {
    let applied_up_to = act.last_seq_nr();
    // Events up to the recovery's target were stored, yet none was replayed.
    if recovery.replayed == 0 && recovery.bounds.max_events > 0 && !full_cleanup(recovery, highest)
    {
        let covered = (recovery.snapshot_seq_nr, recovery.deleted_to);
        check_not_deleted(covered, highest.min(recovery.bounds.to_seq_nr), act)?;
    }
    let last = highest.max(applied_up_to);
    let bounded = applied_up_to < highest
        && (recovery.bounds.to_seq_nr < highest || recovery.replayed >= recovery.bounds.max_events);
    recovery.span.record("replayed", recovery.replayed);
    tracing::debug!(
        last_seq_nr = last,
        replayed = recovery.replayed,
        "recovery completed"
    );
    Ok(Recovered {
        last_seq_nr: last,
        bounded,
    })
}

/// Whether recovery found the journal fully cleaned up, and may start empty (Akka's full
/// cleanup: every event deleted with `delete_events_to(u64::MAX)` and every snapshot deleted):
/// no snapshot loaded although the criteria admitted any, every stored event deleted, and the
/// recovery asked for all of them. A recovery bounded below the highest sequence number, or
/// one whose criteria skipped snapshots, gets no such pass: the deleted events it needed are
/// missing, and a snapshot it skipped may have covered them.
fn full_cleanup(recovery: &Recovering, highest: u64) -> bool {
    let criteria = recovery.bounds.from_snapshot;
    let admits_any_snapshot = criteria.max_seq_nr >= highest
        && criteria.min_seq_nr == 0
        && criteria.min_timestamp <= 0
        && criteria.max_timestamp == i64::MAX;
    recovery.snapshot_seq_nr.is_none()
        && admits_any_snapshot
        && recovery.bounds.to_seq_nr >= highest
        && recovery
            .deleted_to
            .is_some_and(|deleted_to| deleted_to >= highest)
}

/// The events from the loaded snapshot (or the start) up to `before` were not replayed: fails
/// recovery when the journal deleted some of them, since no snapshot covers them then. Sequence
/// numbers never stored (a write the journal rejected) are no hole. A store that does not say
/// how far it deleted ([`JournalStore::read_deleted_to`](crate::store::JournalStore::read_deleted_to)
/// is `None`) cannot be checked.
fn check_not_deleted<A: PersistentActor>(
    (snapshot_seq_nr, deleted_to): (Option<u64>, Option<u64>),
    before: u64,
    act: &A,
) -> Result<(), RecoveryError> {
    let after = snapshot_seq_nr.unwrap_or(0);
    match deleted_to {
        Some(deleted_to) if before > after && deleted_to > after => {
            Err(RecoveryError::MissingEvents {
                persistence_id: act.persistence_id().to_owned(),
                snapshot_seq_nr,
                from: after + 1,
                to: deleted_to.min(before),
            })
        }
        _ => Ok(()),
    }
}

fn panicked<A: PersistentActor>(act: &A, hook: &'static str, reason: String) -> RecoveryError {
    RecoveryError::Panicked {
        persistence_id: act.persistence_id().to_owned(),
        hook,
        reason,
    }
}

/// Returns control to the runtime's scheduler, which polls this task again only after every
/// other ready task, the arbiter's own commands (a stop) and I/O had a turn: tokio defers the
/// wake-up of a yielding task (as `tokio::task::yield_now`) instead of running it again at once.
fn yield_to_scheduler(task: &mut TaskContext<'_>) {
    let mut yielded = std::pin::pin!(tokio::task::yield_now());
    if yielded.as_mut().poll(task).is_ready() {
        task.waker().wake_by_ref();
    }
}
