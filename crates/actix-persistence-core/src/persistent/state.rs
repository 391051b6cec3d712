use std::collections::VecDeque;
use std::fmt;

use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use actix::Addr;
use tokio::sync::oneshot;

use super::addr::{ActorFailure, FailureCell};
use super::driver::DriverState;
use super::in_flight::{InFlight, InFlightGuard};
use super::recovery::{Recovery, RecoveryPermits, RecoveryPlan};
use super::reply::Continuation;
use super::snapshots::SnapshotPolicy;
use super::{EventSourced, PersistError};
use crate::error::{
    validate_persistence_id, AtomicWriteError, InvalidPersistenceId, WriteRejection,
};
use crate::journal::{Incarnation, JournalActor, ReplySlot, WriteSender};
use crate::serialization::{SerializationError, SerializedEvent};
use crate::snapshot::SnapshotStore;
use crate::store::{AtomicWrite, FencingToken, PersistentRepr};

const DEFAULT_RECOVERY_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(10);

/// The events of one invocation: one is held inline (a `persist` allocates no vector).
pub(crate) type EventBuf<E> = smallvec::SmallVec<[E; 1]>;

/// One `persist`, `persist_all` or `defer` call waiting for its turn.
pub(crate) struct Invocation<A: EventSourced> {
    pub(crate) events: EventBuf<A::Event>,
    pub(crate) write: PendingWrite,
    pub(crate) then: Continuation<A>,
    /// Sequence number of the last event (meaningless without events).
    pub(crate) highest_seq_nr: u64,
}

/// Where an invocation's atomic write stands.
pub(crate) enum PendingWrite {
    /// A `defer`: nothing to store.
    None,
    /// Serialized, not sent yet.
    Ready(AtomicWrite),
    /// Sent to the journal; its result is the next unclaimed one of the batch.
    Sent,
    /// Refused before it was sent (an event could not be serialized).
    Rejected(WriteRejection),
}

/// The persistence machinery of one persistent actor incarnation: its persistence id, its
/// journal, its sequence numbers and the invocations waiting for write replies.
///
/// Every persistent actor holds one in a field (found by `#[derive(PersistentActor)]`).
/// Creating it creates a new [`Incarnation`]: build a fresh one for every actor you start.
pub struct PersistenceState<A: EventSourced> {
    /// Shared with every event this incarnation writes (a clone per event, no copy).
    persistence_id: Arc<str>,
    journal: Addr<JournalActor>,
    incarnation: Incarnation,
    /// Shared as the persistence id is.
    writer_uuid: Arc<str>,
    /// The token recovery got when it took ownership of the id; every write carries it.
    fencing_token: FencingToken,
    /// Highest sequence number recovered or stored and applied, or used up by a rejected
    /// write.
    last_seq_nr: u64,
    /// Highest sequence number recovered or stored and applied (a rejected write's numbers
    /// not counted): what the state covers of the journal, the sequence number of a snapshot.
    stored_seq_nr: u64,
    /// Highest sequence number handed out (ahead of `last_seq_nr` while writes are pending).
    assigned_seq_nr: u64,
    pub(crate) recovered: bool,
    /// Whether `start_recovery` ran (a hand-written `Actor::started` may forget it): only read
    /// to say so when a persist comes before recovery completed.
    pub(crate) recovery_started: bool,
    /// Recovery stopped before the highest stored event (bounded recovery): snapshots would
    /// drop the events the state misses, so none are taken.
    pub(crate) partially_recovered: bool,
    recovery: Recovery,
    recovery_timeout: Duration,
    permits: Option<RecoveryPermits>,
    pub(crate) snapshots: Option<Arc<dyn SnapshotStore>>,
    pub(crate) snapshot_policy: SnapshotPolicy,
    pub(crate) snapshot_timeout: Duration,
    /// Invocations in call order: first the `in_flight` ones (sent, or due without a write),
    /// waiting for their replies, then those of the command being handled, not yet sent. One
    /// queue, so that sending a batch moves no invocation.
    pub(crate) invocations: VecDeque<Invocation<A>>,
    /// How many of the first `invocations` are in flight.
    pub(crate) in_flight: usize,
    /// Whether the driver future is installed with `ctx.wait`.
    pub(crate) driver_running: bool,
    /// Where recovery and writes stand (see `driver::pump`).
    pub(crate) driver: DriverState,
    /// Where the journal puts the reply to the write in flight: one slot for every write of
    /// this incarnation (at most one is in flight), instead of a channel per write.
    pub(crate) reply_slot: Arc<ReplySlot>,
    /// The waker the reply slot holds (it keeps the last one it was given): when it is the
    /// polling task's, the driver does not poll the slot right after sending a batch.
    pub(crate) slot_waker: Option<Waker>,
    /// The journal's own write channel, handed over with the reply to the first write: later
    /// writes go through it instead of the journal actor's mailbox (no envelope and queue node
    /// allocated per write). `None` until then, and again if the channel closed (the journal
    /// stopped: a write sent then falls back to the mailbox, which drops it, so its reply slot
    /// reports the journal stopped).
    pub(crate) write_channel: Option<WriteSender>,
    /// Why the actor stopped, told to a watching supervisor when this state is dropped.
    pub(crate) stop_reason: StopReason,
    stop_watches: Vec<oneshot::Sender<StopReason>>,
    /// Why the actor stopped on a failure, for its [`super::PersistentAddr`]s.
    pub(crate) failure: FailureCell,
    /// Counts this actor's writes, snapshot saves and deletes for a graceful shutdown.
    work: Option<InFlight>,
}

/// Why a persistent actor stopped, as a supervisor sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// It stopped by itself or was stopped (not a persistence failure).
    Normal,
    /// A write failed (`on_persist_failure` ran).
    PersistFailure,
    /// Recovery failed (`on_recovery_failure` ran), also when user code panicked during
    /// recovery ([`RecoveryError::Panicked`](super::RecoveryError::Panicked)).
    RecoveryFailure,
    /// A write or a delete was fenced ([`crate::JournalError::Fenced`]): a newer incarnation of the
    /// persistence id owns it, here or in another process, also when its failure hook
    /// (`on_persist_failure`, `on_delete_failure`) panicked (the panic is logged). A
    /// [`super::BackoffSupervisor`] does not restart it (a restart would take the id back from
    /// its new owner).
    Fenced,
    /// User code the library ran after recovery panicked: [`EventSourced::apply`] of a stored
    /// event, a `persist`/`persist_all`/`defer` continuation, or a hook. The state may be
    /// half-updated, so the actor stopped; `reason` is the panic message. A panic that escaped
    /// the actor elsewhere (a command handler) also stops it with this reason, when the runtime
    /// drops its task; its message is then only in the log (Rust's panic hook prints it).
    /// A [`super::BackoffSupervisor`] restarts the actor, as after any failure.
    Panicked {
        /// The panic message.
        reason: String,
    },
}

/// The stop reason of an actor whose task unwound from a panic the library did not catch.
const UNCAUGHT_PANIC: &str = "the actor panicked outside the code the library guards (a command \
                              handler, for example); the panic message is in the log";

impl<A: EventSourced> Drop for PersistenceState<A> {
    fn drop(&mut self) {
        // Dropped while unwinding: a panic escaped a command handler (or another part of the
        // actor the library does not wrap) and the runtime drops the actor's task. That is a
        // failure, never a normal stop: a `BackoffSupervisor` restarts the actor.
        if std::thread::panicking() && self.stop_reason == StopReason::Normal {
            let reason = UNCAUGHT_PANIC.to_owned();
            self.record_failure(ActorFailure::Panicked {
                reason: reason.clone(),
            });
            self.stop_reason = StopReason::Panicked { reason };
        }
        self.answer_abandoned_invocations();
        // What the driver holds (a recovery's permit, a write's count of work in flight) is
        // given back before the stop is reported: whoever the report wakes (a supervisor
        // restarting the actor, a test) finds it free. As a field dropped after this, an actor
        // stopped while it recovered still held its permit when its watchers were told.
        drop(std::mem::take(&mut self.driver));
        for watch in self.stop_watches.drain(..) {
            let _ = watch.send(self.stop_reason.clone());
        }
    }
}

impl<A: EventSourced> PersistenceState<A> {
    /// The persistence state of a new incarnation with `persistence_id`, writing to `journal`.
    ///
    /// # Errors
    /// [`InvalidPersistenceId`] when the id is empty or holds NUL.
    pub fn new(
        journal: Addr<JournalActor>,
        persistence_id: impl Into<String>,
    ) -> Result<Self, InvalidPersistenceId> {
        let persistence_id = persistence_id.into();
        validate_persistence_id(&persistence_id)?;
        Ok(PersistenceState {
            persistence_id: Arc::from(persistence_id),
            journal,
            incarnation: Incarnation::next(),
            writer_uuid: Arc::from(uuid::Uuid::new_v4().to_string()),
            fencing_token: FencingToken::UNOWNED,
            last_seq_nr: 0,
            stored_seq_nr: 0,
            assigned_seq_nr: 0,
            recovered: false,
            recovery_started: false,
            partially_recovered: false,
            recovery: Recovery::latest(),
            recovery_timeout: DEFAULT_RECOVERY_TIMEOUT,
            permits: None,
            snapshots: None,
            snapshot_policy: SnapshotPolicy::default(),
            snapshot_timeout: DEFAULT_SNAPSHOT_TIMEOUT,
            invocations: VecDeque::new(),
            in_flight: 0,
            driver_running: false,
            driver: DriverState::Idle,
            reply_slot: Arc::default(),
            slot_waker: None,
            write_channel: None,
            stop_reason: StopReason::Normal,
            stop_watches: Vec::new(),
            failure: FailureCell::default(),
            work: None,
        })
    }

    /// Recovers with `recovery` instead of [`Recovery::latest`].
    pub fn with_recovery(mut self, recovery: Recovery) -> Self {
        self.recovery = recovery;
        self
    }

    /// Fails recovery after `timeout` without progress (default 30 s).
    pub fn with_recovery_timeout(mut self, timeout: Duration) -> Self {
        self.recovery_timeout = timeout;
        self
    }

    /// Waits for one of `permits` before recovering.
    pub fn with_recovery_permits(mut self, permits: RecoveryPermits) -> Self {
        self.permits = Some(permits);
        self
    }

    /// Saves and loads snapshots in `store`; each call may take `timeout` (default 10 s).
    pub fn with_snapshot_store(mut self, store: Arc<dyn SnapshotStore>, timeout: Duration) -> Self {
        self.snapshots = Some(store);
        self.snapshot_timeout = timeout;
        self
    }

    /// Takes snapshots automatically by `policy` (needs a snapshot store).
    pub fn with_snapshot_policy(mut self, policy: SnapshotPolicy) -> Self {
        self.snapshot_policy = policy;
        self
    }

    /// Counts this actor's writes (until their continuations ran), snapshot saves and deletes
    /// in `in_flight`, so a graceful shutdown can wait for them (the facade's `Persistence`
    /// does this for every state it makes).
    pub fn with_in_flight(mut self, in_flight: InFlight) -> Self {
        self.work = Some(in_flight);
        self
    }

    /// Counts one piece of work, when a counter is configured.
    pub(crate) fn enter_work(&self) -> Option<InFlightGuard> {
        self.work.as_ref().map(InFlight::enter)
    }

    /// A receiver told why the actor stopped, once its state is dropped (used by
    /// [`super::BackoffSupervisor`]). Every watch is told: one of the application's, set in a
    /// supervisor's factory, is kept beside the supervisor's own.
    pub fn watch_stop(&mut self) -> oneshot::Receiver<StopReason> {
        let (tx, rx) = oneshot::channel();
        self.stop_watches.retain(|watch| !watch.is_closed());
        self.stop_watches.push(tx);
        rx
    }

    /// The persistence id.
    pub fn persistence_id(&self) -> &str {
        &self.persistence_id
    }

    /// This incarnation's id: it decides the actor's write-reply-ordering group.
    pub fn incarnation(&self) -> Incarnation {
        self.incarnation
    }

    /// The writer id stored with every event of this incarnation.
    pub fn writer_uuid(&self) -> &str {
        &self.writer_uuid
    }

    /// The fencing token this incarnation writes with: the owner epoch its recovery got when
    /// it took ownership of the persistence id ([`FencingToken::UNOWNED`] before recovery).
    pub fn fencing_token(&self) -> FencingToken {
        self.fencing_token
    }

    pub(crate) fn set_fencing_token(&mut self, token: FencingToken) {
        self.fencing_token = token;
    }

    /// The journal this actor writes to.
    pub fn journal(&self) -> &Addr<JournalActor> {
        &self.journal
    }

    /// The sequence number of the last event recovered, or stored and applied (0 before
    /// any). Events still being written are not counted.
    ///
    /// Inside [`EventSourced::apply`] it is the sequence number of the event being applied,
    /// live and during replay alike (as Akka's `lastSequenceNr` inside the event handler):
    /// `persist_all` of three events at 2..=4 applies them with 2, 3, 4. Inside
    /// the restore half of [`EventSourced::snapshotting`] it is the snapshot's sequence
    /// number; inside a
    /// continuation, the sequence number of the continuation's last event.
    pub fn last_seq_nr(&self) -> u64 {
        self.last_seq_nr
    }

    /// Records why the actor stops, for its [`super::PersistentAddr`]s (the first cause wins).
    pub(crate) fn record_failure(&self, failure: ActorFailure) {
        let _ = self.failure.set(failure);
    }

    /// Answers every invocation still waiting when the actor is gone (its arbiter stopped, or
    /// it stopped with a write in flight) with what is known of its write: the journal's
    /// result if the reply already arrived, [`PersistError::StoppedDuringWrite`] if it did
    /// not, [`PersistError::ActorStopped`] if the write was never sent.
    fn answer_abandoned_invocations(&mut self) {
        if self.invocations.is_empty() {
            return;
        }
        let mut results = match std::mem::take(&mut self.driver) {
            DriverState::Awaiting { writes, .. } => self
                .reply_slot
                .try_take()
                .and_then(Result::ok)
                .map(|reply| reply.into_results(writes).into_iter()),
            _ => None,
        };
        for invocation in self.take_invocations() {
            let outcome = match invocation.write {
                PendingWrite::Sent => match results.as_mut().and_then(Iterator::next) {
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
    }

    /// The first in-flight invocation, taken out of the queue; `None` once every in-flight one
    /// was taken (those queued behind them are not).
    pub(crate) fn pop_in_flight(&mut self) -> Option<Invocation<A>> {
        if self.in_flight == 0 {
            return None;
        }
        self.in_flight -= 1;
        self.invocations.pop_front()
    }

    /// Every invocation, in flight or not, in call order; none is left.
    pub(crate) fn take_invocations(&mut self) -> VecDeque<Invocation<A>> {
        self.in_flight = 0;
        std::mem::take(&mut self.invocations)
    }

    pub(crate) fn set_recovered_seq_nr(&mut self, seq_nr: u64) {
        self.last_seq_nr = seq_nr;
        self.stored_seq_nr = seq_nr;
        self.assigned_seq_nr = seq_nr;
    }

    /// An event at `seq_nr` was stored and is being applied.
    pub(crate) fn confirm_seq_nr(&mut self, seq_nr: u64) {
        self.last_seq_nr = self.last_seq_nr.max(seq_nr);
        self.stored_seq_nr = self.stored_seq_nr.max(seq_nr);
    }

    /// A rejected write used up the numbers up to `seq_nr` (as Akka's `onPersistRejected`);
    /// nothing was stored.
    pub(crate) fn use_up_seq_nr(&mut self, seq_nr: u64) {
        self.last_seq_nr = self.last_seq_nr.max(seq_nr);
    }

    /// The highest sequence number recovered or stored (see `stored_seq_nr`).
    pub(crate) fn stored_seq_nr(&self) -> u64 {
        self.stored_seq_nr
    }

    pub(crate) fn recovery_plan(&self) -> RecoveryPlan {
        RecoveryPlan {
            persistence_id: self.persistence_id.to_string(),
            journal: self.journal.clone(),
            snapshots: self.snapshots.clone(),
            recovery: self.recovery,
            permits: self.permits.clone(),
            timeout: self.recovery_timeout,
            snapshot_timeout: self.snapshot_timeout,
        }
    }

    /// Whether recovery completed.
    pub fn is_recovered(&self) -> bool {
        self.recovered
    }

    /// Whether writes are in flight or queued (commands are then held back).
    pub fn has_pending_writes(&self) -> bool {
        !self.invocations.is_empty()
    }

    /// The first sequence number of the next write, or its rejection when recovery has not
    /// completed (sequence numbers are not known yet). Nothing is taken yet: see
    /// [`take_seq_nrs`](Self::take_seq_nrs); the write is built by
    /// [`build_write`](Self::build_write), where the first serialization error, or a field over
    /// the [limits](crate::limits), rejects the whole atomic write before it is sent.
    pub(crate) fn next_seq_nr(&self) -> Result<u64, WriteRejection> {
        if !self.recovered {
            let reason = if self.recovery_started {
                "persist before recovery completed: sequence numbers are not known yet \
                 (persist from a command handler or on_recovery_completed)"
            } else {
                "persist before recovery was started: this actor never started its recovery \
                 (call actix_persistence::start_recovery(self, ctx) first thing in \
                 Actor::started, or #[derive(PersistentActor)], whose Actor does)"
            };
            return Err(WriteRejection {
                persistence_id: self.persistence_id.to_string(),
                seq_nr: 0,
                reason: reason.to_owned(),
            });
        }
        // A recovered number at the top of `u64` (a snapshot a store of another kind held):
        // no number is left, and the write is rejected as over the limits (as one above
        // `i64::MAX` is) instead of overflowing.
        self.assigned_seq_nr
            .checked_add(1)
            .ok_or_else(|| self.no_seq_nr_left(self.assigned_seq_nr))
    }

    /// The rejection of a write that would need sequence numbers beyond `u64::MAX` (every one
    /// of them is above the [limits](crate::limits)); it takes no numbers.
    pub(crate) fn no_seq_nr_left(&self, after: u64) -> WriteRejection {
        WriteRejection {
            persistence_id: self.persistence_id.to_string(),
            seq_nr: after,
            reason: format!(
                "no sequence number is left after {after}: sequence numbers are above the \
                 limit of {} (i64::MAX)",
                crate::limits::MAX_STORABLE_SEQ_NR
            ),
        }
    }

    /// Takes the sequence numbers up to `highest` for a write, whether it is sent or rejected
    /// before it is sent (an unserializable event, a field over the [limits](crate::limits)):
    /// as Akka's `onPersistRejected`, a rejected write keeps its sequence numbers, which stay a
    /// gap (no write stores them; recovery tells such a gap from deleted events by the
    /// journal's deleted-to mark), and the next write continues after them. Every rejection
    /// kind, before sending or by the store, follows the same rule.
    pub(crate) fn take_seq_nrs(&mut self, highest: u64) {
        self.assigned_seq_nr = highest;
    }

    /// Builds the atomic write of serialized events (each with its tags) numbered from
    /// `first`; the first serialization error, or a field over the [limits](crate::limits),
    /// rejects the whole atomic write. This is the authoritative limits check of the persist
    /// path (the journal actor does not check again; the stores check for direct callers).
    /// Either way the write takes its sequence numbers (see
    /// [`take_seq_nrs`](Self::take_seq_nrs)).
    #[inline]
    pub(crate) fn build_write(
        &self,
        first: u64,
        count: usize,
        serialized: impl Iterator<Item = (Result<SerializedEvent, SerializationError>, Vec<String>)>,
    ) -> PendingWrite {
        let timestamp = now_millis();
        let mut reprs = Vec::with_capacity(count);
        // `..=u64::MAX`: a range without an end overflows computing the successor of an
        // event at `u64::MAX` (such a write is rejected by the limits below).
        for (seq_nr, (event, tags)) in (first..=u64::MAX).zip(serialized) {
            match event {
                Ok(event) => reprs.push(PersistentRepr {
                    persistence_id: Arc::clone(&self.persistence_id),
                    seq_nr,
                    payload: event.payload,
                    serializer_id: event.serializer_id,
                    manifest: event.manifest,
                    writer_uuid: Arc::clone(&self.writer_uuid),
                    timestamp,
                    tags: tags.into(),
                }),
                Err(e) => {
                    let rejection = WriteRejection {
                        persistence_id: self.persistence_id.to_string(),
                        seq_nr,
                        reason: e.to_string(),
                    };
                    return PendingWrite::Rejected(rejection);
                }
            }
        }
        let write = AtomicWrite {
            events: reprs,
            fencing_token: self.fencing_token,
        };
        // Its shape holds by construction (`AtomicWrite::check_shape`, not run again here):
        // `count` >= 1 events (`persist_events` sends no empty write), all of this state's
        // persistence id, numbered consecutively from `first` >= 1 (`next_seq_nr`).
        debug_assert!(write.check_shape().is_ok());
        match crate::limits::check_actor_write_limits(&write) {
            Ok(()) => PendingWrite::Ready(write),
            Err(rejection) => PendingWrite::Rejected(rejection),
        }
    }
}

impl<A: EventSourced> fmt::Debug for PersistenceState<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PersistenceState")
            .field("persistence_id", &self.persistence_id)
            .field("incarnation", &self.incarnation)
            .field("last_seq_nr", &self.last_seq_nr)
            .field("recovered", &self.recovered)
            .field("pending", &self.invocations.len())
            .finish()
    }
}

/// The wall clock in milliseconds since the Unix epoch (0 before 1970): an event's timestamp.
#[inline]
pub(crate) fn now_millis() -> i64 {
    crate::clock::realtime_millis()
}
