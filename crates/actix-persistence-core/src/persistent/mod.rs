//! Persistent actors: an Actix actor whose state is the fold of its persisted events.
//!
//! A persistent actor implements [`EventSourced`] (its event type and how an event changes its
//! state) and [`PersistentActor`] (where its [`PersistenceState`] lives; derived with
//! `#[derive(PersistentActor)]` from the facade crate). When it starts, it recovers: the
//! journal replays its events through [`EventSourced::apply`] before any command is handled.
//! A command handler then calls [`PersistentActor::persist`], [`PersistentActor::persist_all`]
//! or [`PersistentActor::defer`] with a continuation.
//!
//! # Ordering and durability
//! - Commands that arrive while a write is in flight wait in the mailbox until every
//!   continuation of that write ran (the actor is in Actix's `ctx.wait`), then are handled in
//!   arrival order. State never races the journal.
//! - All `persist`/`persist_all`/`defer` calls of one command go to the journal as one batch,
//!   one atomic write per `persist`/`persist_all`; their continuations run in call order.
//! - When a continuation runs, its events are stored (the store acknowledged them) and were
//!   applied to the actor's state with [`EventSourced::apply`].
//! - A rejected write (an event that cannot be serialized, a write over the
//!   [limits](crate::limits), or one the store rejected) runs
//!   [`EventSourced::on_persist_rejected`]; the actor goes on. Its events are not stored, but
//!   it keeps its sequence numbers, as Akka's `onPersistRejected`: `last_seq_nr` moves to the
//!   rejected write's highest one, the next write continues after it, and the rejected numbers
//!   stay a gap in the journal (recovery knows it is no deleted event). A failed write runs
//!   [`EventSourced::on_persist_failure`] and the actor stops (as Akka's `onPersistFailure`):
//!   its next incarnation recovers what is really stored.
//!
//! # Commands queued behind a write
//! While a write is in flight, commands stay in the actor's Actix mailbox, in arrival order,
//! and are handled one by one afterwards (no recursion: thousands of queued commands use no
//! stack). The bound is Actix's mailbox capacity (16 by default, see
//! `Context::set_mailbox_capacity`): past it, `Addr::send` waits for room (backpressure to the
//! sender), `Addr::try_send` fails with `SendError::Full`, and `Addr::do_send` enqueues
//! regardless (unbounded). A [`BackoffSupervisor`] keeps at most [`MAX_BUFFERED_COMMANDS`]
//! while its child restarts and answers further ones with [`PersistError::ActorStopped`].
//!
//! # Restarts
//! Restart a persistent actor by starting a new one with a new [`PersistenceState`] (a new
//! incarnation), for example with [`BackoffSupervisor`]. Actix's own `Supervised` restart
//! reuses the actor value and is not supported: its pending writes would be lost.
//!
//! # Snapshots and recovery
//! With a snapshot store ([`PersistenceState::with_snapshot_store`]), recovery loads the newest
//! snapshot matching its [`Recovery`] criteria, restores it with the actor's
//! [`Snapshotting`] ([`EventSourced::snapshotting`]),
//! then replays only the events after it, streamed in batches. A snapshot that cannot be read,
//! or whose load does not answer within the snapshot store's call timeout, fails recovery
//! ([`RecoveryError::Snapshot`]) instead of replaying from the start, because the events it
//! covers may have been deleted. Events missing between the loaded snapshot (or
//! the start) and the first replayed event fail recovery ([`RecoveryError::MissingEvents`]).
//! Recovery fails with [`RecoveryError::Timeout`] after the recovery timeout without progress
//! (default 30 s), and waits for one of the shared [`RecoveryPermits`] first when configured.
//!
//! Recovery applies at most [`REPLAY_EVENTS_PER_POLL`] events (or 1 ms of them) before it
//! yields to the runtime, so a stop requested while recovering (the arbiter stopping) takes
//! effect after at most one such slice, before any command is handled.
//!
//! # User code that panics
//! A panic in user code the library runs is a failure with the panic message as its reason:
//! during recovery it fails recovery ([`RecoveryError::Panicked`]); in `apply` of a stored event,
//! a continuation or a hook it stops the actor ([`StopReason::Panicked`]) and the caller gets
//! [`PersistError::Panicked`]. A panic in [`EventSourced::tags`] or the serializer rejects only
//! its write. A panic that escapes a command handler (code the library does not run) also stops
//! the actor with [`StopReason::Panicked`] (seen when its state is dropped during the unwind).
//! A [`BackoffSupervisor`] restarts the actor in every case.

mod addr;
mod driver;
mod in_flight;
mod panics;
mod recovery;
mod reply;
mod snapshots;
mod state;
mod supervisor;

use actix::{Actor, Context};
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use addr::{ActorFailure, CommandError, PersistentAddr};
pub use in_flight::{InFlight, InFlightGuard};
pub use recovery::{Recovery, RecoveryPermits, REPLAY_EVENTS_PER_POLL};
pub use reply::{ActorReplyFuture, PersistError, PersistReply, PersistResult, ReplyFuture};
pub use snapshots::{SnapshotPolicy, Snapshotting};
pub use state::{PersistenceState, StopReason};
pub use supervisor::{Backoff, BackoffSupervisor, MAX_BUFFERED_COMMANDS};

use crate::error::{JournalError, WriteRejection};
use crate::serialization::{
    from_json, to_json, SerializationError, SerializedEvent, JSON_SERIALIZER_ID,
};
use crate::snapshot::{SnapshotError, SnapshotMetadata};
use crate::store::PersistentRepr;
use reply::Continuation;
pub use snapshots::DeleteError;
use state::{EventBuf, Invocation, PendingWrite};

/// Why a recovery failed at its snapshot ([`RecoveryError::Snapshot`]).
#[derive(Debug, Clone, thiserror::Error)]
pub enum SnapshotFailure {
    /// The snapshot store failed to load it ([`SnapshotStore::load`](crate::snapshot::SnapshotStore::load)),
    /// or did not answer within `snapshot-store.call-timeout`.
    #[error(transparent)]
    Load(#[from] SnapshotError),
    /// It was loaded, but the actor's [`Snapshotting`] could not restore it (or the actor
    /// restores no snapshots: [`EventSourced::snapshotting`] returns `None`).
    #[error(transparent)]
    Restore(#[from] SerializationError),
}

/// Why recovery failed. The actor stops after [`EventSourced::on_recovery_failure`] ran.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RecoveryError {
    /// The journal could not replay.
    #[error("recovery of {persistence_id:?} failed: {source}")]
    Journal {
        /// Whose recovery.
        persistence_id: String,
        /// The journal's error.
        #[source]
        source: JournalError,
    },
    /// Recovery made no progress within its timeout (default 30 s): the snapshot store or the
    /// journal did not answer, or the replay stalled.
    #[error("recovery of {persistence_id:?} made no progress within {} ms", timeout.as_millis())]
    Timeout {
        /// Whose recovery.
        persistence_id: String,
        /// The recovery timeout.
        timeout: std::time::Duration,
    },
    /// The snapshot could not be loaded or restored. Recovery fails rather than replaying
    /// from the start, because events covered by the snapshot may have been deleted.
    #[error("recovery of {persistence_id:?} failed at its snapshot: {reason}")]
    Snapshot {
        /// Whose recovery.
        persistence_id: String,
        /// What went wrong (the text of `source`).
        reason: String,
        /// The typed cause: the snapshot store's error while loading (a storage failure or a
        /// timeout, which a later attempt may not meet), or the snapshot's restore (bytes
        /// this actor cannot read back, which every attempt meets).
        #[source]
        source: Box<SnapshotFailure>,
    },
    /// Events between the loaded snapshot (or the start) and the first replayed event are not
    /// in the journal: they were deleted while the snapshot that covered them is gone (or was
    /// skipped by the [`Recovery`] criteria). Replaying over the hole would build a state that
    /// silently lacks them, so recovery fails instead. Restore the snapshot that covers them,
    /// or recover with criteria that select a snapshot at or after `to`.
    #[error(
        "recovery of {persistence_id:?} failed: events {from} to {to} are missing between {} \
         and the first replayed event (deleted, and no snapshot covers them); restore the \
         snapshot that covers them instead of building a state without them",
        match snapshot_seq_nr { Some(seq_nr) => format!("the snapshot at {seq_nr}"), None => "the start".to_owned() }
    )]
    MissingEvents {
        /// Whose recovery.
        persistence_id: String,
        /// The sequence number of the loaded snapshot, `None` when recovery started without one.
        snapshot_seq_nr: Option<u64>,
        /// First missing sequence number.
        from: u64,
        /// Last missing sequence number.
        to: u64,
    },
    /// The journal replayed an event this recovery did not ask for: a sequence number not
    /// above the last one applied (repeated or out of order), one above the recovery's
    /// [`Recovery::to_seq_nr`] or past its [`Recovery::max_events`], or an event of another
    /// persistence id. That is a bug of the journal store (the journal conformance suite checks
    /// the order); applying the event would build a wrong state, so recovery fails instead (as
    /// Akka's replay filter in its `fail` mode).
    #[error(
        "recovery of {persistence_id:?} failed: the journal replayed {event_persistence_id:?} \
         seq_nr {seq_nr} after seq_nr {after} (expected the events of {persistence_id:?} in \
         ascending order, within the recovery's to_seq_nr and max_events): a bug of the journal \
         store"
    )]
    UnexpectedEvent {
        /// Whose recovery.
        persistence_id: String,
        /// The persistence id of the replayed event.
        event_persistence_id: String,
        /// Its sequence number.
        seq_nr: u64,
        /// The sequence number applied before it (the snapshot's, or 0 at the start).
        after: u64,
    },
    /// User code panicked while recovering: `hook` is `"EventSourced::snapshotting"`,
    /// `"Snapshotting::restore"`, `"deserialize_event"`, `"apply"` or
    /// `"on_recovery_completed"`. Handled exactly as an
    /// error return: [`EventSourced::on_recovery_failure`] runs, the actor stops with
    /// [`StopReason::RecoveryFailure`].
    #[error("recovery of {persistence_id:?} failed: {hook} panicked: {reason}")]
    Panicked {
        /// Whose recovery.
        persistence_id: String,
        /// Which user code panicked.
        hook: &'static str,
        /// The panic message.
        reason: String,
    },
    /// A stored event could not be turned back into the actor's event type. Recovery stops
    /// there: events are never skipped silently. The message says how to read it again (the
    /// usual cause is an event type changed after events of its old form were stored).
    #[error(
        "recovery of {persistence_id:?} failed: {source} (a stored event must stay readable as \
         the actor's Event type: keep its old variants and fields, rename them with \
         #[serde(alias = \"old\")], add new fields with #[serde(default)], or read old forms in \
         EventSourced::deserialize_event)"
    )]
    Deserialize {
        /// Whose recovery.
        persistence_id: String,
        /// What could not be read.
        #[source]
        source: SerializationError,
    },
}

/// The domain side of a persistent actor: its events and how they change its state.
///
/// The hooks have defaults that log through `tracing`.
// Named in the error of a `#[derive(PersistentActor)]` struct without this impl, instead of
// the bare trait bound (and the `Unpin` and `Actor` bounds it breaks in turn).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an event-sourced actor: `EventSourced` is not implemented for it",
    label = "needs `impl EventSourced for {Self}`",
    note = "a persistent actor (`#[derive(PersistentActor)]`, `PersistenceState<Self>`) needs \
            `impl EventSourced for {Self} {{ type Event = ...; fn apply(&mut self, event: &Self::Event) {{ ... }} }}`: \
            its events and how each one changes its state"
)]
pub trait EventSourced: Actor<Context = Context<Self>> {
    /// The events this actor persists; stored with serde_json.
    type Event: Serialize + DeserializeOwned + 'static;

    /// Applies one event to the state. Called for every replayed event during recovery, and
    /// for every stored event before its continuation runs. Must not fail: validate commands
    /// before persisting, not events after. [`PersistentActor::last_seq_nr`] reads the
    /// sequence number of the event being applied.
    ///
    /// # Panics
    /// A panic is caught: during recovery it fails recovery ([`RecoveryError::Panicked`]);
    /// after a write, the actor stops ([`StopReason::Panicked`]) and the write's caller gets
    /// [`PersistError::Panicked`].
    fn apply(&mut self, event: &Self::Event);

    /// The manifest stored with `event` by the default serializer (a type hint for schema
    /// evolution); empty by default.
    fn manifest(&self, _event: &Self::Event) -> String {
        String::new()
    }

    /// Turns `event` into its stored form. serde_json by default; override it together with
    /// [`deserialize_event`](Self::deserialize_event) to plug in another serializer (give it
    /// its own serializer id). An error, or a panic, rejects only the atomic write holding the
    /// event: the actor goes on.
    ///
    /// # Errors
    /// [`SerializationError::Serialize`] when the event cannot be serialized.
    fn serialize_event(&self, event: &Self::Event) -> Result<SerializedEvent, SerializationError> {
        Ok(SerializedEvent {
            payload: to_json(event)?,
            serializer_id: JSON_SERIALIZER_ID,
            manifest: self.manifest(event),
        })
    }

    /// Turns a stored event back into `Self::Event` during recovery. serde_json by default.
    ///
    /// # Errors
    /// A [`SerializationError`] fails recovery (events are never skipped).
    fn deserialize_event(&self, repr: &PersistentRepr) -> Result<Self::Event, SerializationError> {
        from_json(repr.seq_nr, repr.serializer_id, &repr.payload)
    }

    /// Tags stored with `event`, for queries by tag; none by default. A panic rejects only the
    /// atomic write holding the event (as a serializer error): the actor goes on.
    fn tags(&self, _event: &Self::Event) -> Vec<String> {
        Vec::new()
    }

    /// How this actor takes snapshots and restores them, both halves in one value; `None`
    /// (the default) means it takes none. Used by [`PersistentActor::save_snapshot`], the
    /// snapshot policy and recovery (a snapshot that cannot be restored fails recovery,
    /// [`RecoveryError::Snapshot`]: events it covers may be deleted). Typically
    /// `Some(Snapshotting::json(|cart: &Self| cart.items.clone(), |cart, items| cart.items = items))`.
    fn snapshotting() -> Option<Snapshotting<Self>> {
        None
    }

    /// Runs after a snapshot was saved.
    fn on_snapshot_saved(&mut self, _metadata: &SnapshotMetadata, _ctx: &mut Context<Self>) {}

    /// Runs when a snapshot could not be saved; the actor goes on.
    fn on_snapshot_failure(&mut self, cause: &SnapshotError, _ctx: &mut Context<Self>) {
        tracing::warn!(error = %cause, "snapshot not saved");
    }

    /// Runs after events up to `to_seq_nr` were deleted.
    fn on_events_deleted(&mut self, _to_seq_nr: u64, _ctx: &mut Context<Self>) {}

    /// Runs when deleting events failed; the actor goes on.
    fn on_delete_failure(&mut self, cause: &DeleteError, _ctx: &mut Context<Self>) {
        tracing::warn!(error = %cause, "events not deleted");
    }

    /// Runs once after recovery replayed every event, before the first command.
    /// `last_seq_nr` is the highest sequence number stored for this persistence id.
    fn on_recovery_completed(&mut self, _last_seq_nr: u64, _ctx: &mut Context<Self>) {}

    /// Runs when recovery fails; the actor stops right after.
    fn on_recovery_failure(&mut self, cause: &RecoveryError, _ctx: &mut Context<Self>) {
        tracing::error!(error = %cause, "recovery failed; stopping the persistent actor");
    }

    /// Runs when a write was rejected (nothing was stored): before it was sent (an event that
    /// cannot be serialized, a write over the [limits](crate::limits)) or by the store; the
    /// actor goes on. The write keeps its sequence numbers (as Akka's `onPersistRejected`):
    /// here `last_seq_nr` already reads the rejected write's highest sequence number.
    fn on_persist_rejected(&mut self, cause: &WriteRejection, _ctx: &mut Context<Self>) {
        tracing::warn!(error = %cause, "persist rejected");
    }

    /// Runs when a write failed (the events may or may not be stored); the actor stops right
    /// after, and every continuation still waiting gets [`PersistError::ActorStopped`]. The
    /// stop is unconditional (as Akka's): `Actor::stopping` is not asked (its
    /// `Running::Continue` cannot keep the actor), `Actor::stopped` runs. So is the stop after
    /// a failed recovery, a fenced write or delete, and a panic the library caught.
    fn on_persist_failure(&mut self, cause: &JournalError, _ctx: &mut Context<Self>) {
        tracing::error!(error = %cause, "persist failed; stopping the persistent actor");
    }
}

/// A persistent actor: an [`EventSourced`] actor that holds a [`PersistenceState`].
///
/// Implement the two accessors (or `#[derive(PersistentActor)]`, which also implements
/// `Actor` with recovery on start); the other methods are provided.
///
/// Implementing `Actor` yourself (for a mailbox capacity of your own, or `started` and
/// `stopped` hooks)? Call [`start_recovery`] first thing in `started`: without it the actor
/// never recovers, and every persist is refused with a [`WriteRejection`] that says so.
///
/// ```
/// # mod actix_persistence { // the facade's paths
/// #     pub use actix_persistence_core::{*, persistent::*};
/// #     pub use ::actix;
/// # }
/// use actix_persistence::actix::{Actor, Context};
/// use actix_persistence::{start_recovery, EventSourced, PersistenceState, PersistentActor};
///
/// struct Counter {
///     persistence: PersistenceState<Self>,
///     total: u64,
/// }
///
/// impl Actor for Counter {
///     type Context = Context<Self>;
///
///     fn started(&mut self, ctx: &mut Context<Self>) {
///         ctx.set_mailbox_capacity(64);
///         start_recovery(self, ctx);
///     }
/// }
///
/// impl PersistentActor for Counter {
///     fn persistence(&self) -> &PersistenceState<Self> {
///         &self.persistence
///     }
///     fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
///         &mut self.persistence
///     }
/// }
///
/// impl EventSourced for Counter {
///     type Event = u64;
///
///     fn apply(&mut self, event: &u64) {
///         self.total += event;
///     }
/// }
/// ```
pub trait PersistentActor: EventSourced {
    /// The actor's persistence state.
    fn persistence(&self) -> &PersistenceState<Self>;

    /// The actor's persistence state, mutably.
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self>;

    /// The persistence id.
    fn persistence_id(&self) -> &str {
        self.persistence().persistence_id()
    }

    /// Starts the actor (it recovers first) and returns a [`PersistentAddr`]: an address
    /// whose senders learn why the actor is gone ([`CommandError::ActorStopped`] carrying
    /// the [`RecoveryError`] or the failed write's [`JournalError`]) instead of Actix's bare
    /// "mailbox closed".
    fn start_persistent(self) -> PersistentAddr<Self> {
        PersistentAddr::start(self)
    }

    /// The highest sequence number recovered or assigned so far.
    fn last_seq_nr(&self) -> u64 {
        self.persistence().last_seq_nr()
    }

    /// Persists `event` as one atomic write; once it is stored, applies it and runs `then`.
    ///
    /// The returned [`PersistReply`] yields `then`'s value, or why it did not run.
    /// See the [module docs](crate::persistent) for ordering and failure handling.
    fn persist<R, F>(
        &mut self,
        ctx: &mut Context<Self>,
        event: Self::Event,
        then: F,
    ) -> PersistReply<R>
    where
        R: 'static,
        F: FnOnce(&mut Self, &Self::Event, &mut Context<Self>) -> R + 'static,
    {
        // One event is kept inline: no allocation for the common `persist`.
        let events: EventBuf<Self::Event> = smallvec::smallvec![event];
        persist_events(self, ctx, events, move |act, events, ctx| {
            then(act, &events[0], ctx)
        })
    }

    /// Persists `events` as one atomic write (all stored or none); once stored, applies them in
    /// order and runs `then` once with all of them. An empty `events` behaves as
    /// [`defer`](Self::defer).
    fn persist_all<R, F>(
        &mut self,
        ctx: &mut Context<Self>,
        events: Vec<Self::Event>,
        then: F,
    ) -> PersistReply<R>
    where
        R: 'static,
        F: FnOnce(&mut Self, &[Self::Event], &mut Context<Self>) -> R + 'static,
    {
        persist_events(self, ctx, EventBuf::from_vec(events), then)
    }

    /// Saves the actor's state ([`EventSourced::snapshotting`]) as the snapshot at the last
    /// stored event's sequence number ([`last_seq_nr`](Self::last_seq_nr), except after a
    /// rejected write: the numbers it used up are not in the state, and the snapshot stays
    /// below them) in the background; [`EventSourced::on_snapshot_saved`] or
    /// [`EventSourced::on_snapshot_failure`] runs when the store answered. Commands are not
    /// held back meanwhile. Before recovery completed (from `Actor::started`) nothing is saved:
    /// `on_snapshot_failure` runs at once with [`SnapshotError::NotSupported`].
    fn save_snapshot(&mut self, ctx: &mut Context<Self>) {
        snapshots::save_snapshot(self, ctx);
    }

    /// Deletes this actor's events up to and including `to_seq_nr` (at most
    /// [`last_seq_nr`](Self::last_seq_nr), or `u64::MAX` for all) in the background; the
    /// highest sequence number is kept, so new events continue the sequence.
    /// [`EventSourced::on_events_deleted`] or [`EventSourced::on_delete_failure`] runs when
    /// the journal answered.
    ///
    /// Deleted events no snapshot covers are a hole that fails recovery
    /// ([`RecoveryError::MissingEvents`]), with one exception: a journal whose every event was
    /// deleted, with no snapshot left, recovers empty (Akka's full cleanup). Once the actor
    /// persists after such a cleanup, the deleted events become a hole too: to reset an actor
    /// and go on, save a snapshot of its reset state after the delete (in
    /// [`EventSourced::on_events_deleted`]), so that recovery starts from it.
    ///
    /// The delete carries the actor's fencing token, as its writes do: after a newer
    /// incarnation took ownership of the id (here or in another process) it deletes nothing
    /// and fails with [`JournalError::Fenced`]; `on_delete_failure` runs, then the actor stops
    /// with [`StopReason::Fenced`] (a supervisor does not restart it). Before recovery
    /// completed (from `Actor::started`) nothing is sent: `on_delete_failure` runs at once
    /// with [`DeleteError::NotRecovered`].
    fn delete_events_to(&mut self, ctx: &mut Context<Self>, to_seq_nr: u64) {
        snapshots::delete_events_to(self, ctx, to_seq_nr);
    }

    /// Runs `then` after every earlier `persist`/`persist_all` of this actor completed,
    /// without storing anything (as Akka's `defer`). Never reaches the store.
    fn defer<R, F>(&mut self, ctx: &mut Context<Self>, then: F) -> PersistReply<R>
    where
        R: 'static,
        F: FnOnce(&mut Self, &mut Context<Self>) -> R + 'static,
    {
        self.persist_all(ctx, Vec::new(), move |act, _, ctx| then(act, ctx))
    }
}

/// Persists `events` as one atomic write: [`PersistentActor::persist_all`] with the events in
/// an [`EventBuf`] (one event is held inline).
fn persist_events<A, R, F>(
    act: &mut A,
    ctx: &mut Context<A>,
    events: EventBuf<A::Event>,
    then: F,
) -> PersistReply<R>
where
    A: PersistentActor,
    R: 'static,
    F: FnOnce(&mut A, &[A::Event], &mut Context<A>) -> R + 'static,
{
    let (write, highest_seq_nr) = if events.is_empty() {
        (PendingWrite::None, 0)
    } else {
        match act.persistence().next_seq_nr() {
            Err(rejection) => (PendingWrite::Rejected(rejection), 0),
            Ok(first) => match first.checked_add(events.len() as u64 - 1) {
                // Not enough numbers left in `u64` for every event: rejected, none taken.
                None => (
                    PendingWrite::Rejected(act.persistence().no_seq_nr_left(first - 1)),
                    0,
                ),
                Some(highest) => {
                    let serialized = events.iter().map(|e| serialize_caught(act, e));
                    let write = act
                        .persistence()
                        .build_write(first, events.len(), serialized);
                    // Sent or rejected, the write keeps its sequence numbers (Akka's rule).
                    act.persistence_mut().take_seq_nrs(highest);
                    (write, highest)
                }
            },
        }
    };
    let (then, reply) = Continuation::new(then);
    driver::enqueue(
        act,
        ctx,
        Invocation {
            events,
            write,
            then,
            highest_seq_nr,
        },
    );
    reply
}

/// Runs the actor's serializer and its `tags`, turning a panic in either into an error that
/// rejects the write (the actor goes on, as for a serializer error).
#[inline]
fn serialize_caught<A: EventSourced>(
    actor: &A,
    event: &A::Event,
) -> (Result<SerializedEvent, SerializationError>, Vec<String>) {
    let serialized = panics::catch_user(|| actor.serialize_event(event)).unwrap_or_else(|reason| {
        Err(SerializationError::Serialize(format!(
            "the event serializer panicked: {reason}"
        )))
    });
    match panics::catch_user(|| actor.tags(event)) {
        Ok(tags) => (serialized, tags),
        Err(reason) => (
            Err(SerializationError::Serialize(format!(
                "EventSourced::tags panicked: {reason}"
            ))),
            Vec::new(),
        ),
    }
}

/// Starts recovery of `actor`: call it first thing in `Actor::started` (the derive does). The
/// actor handles no command until recovery completed.
pub fn start_recovery<A: PersistentActor>(actor: &mut A, ctx: &mut Context<A>) {
    driver::start_recovery(actor, ctx);
}

#[cfg(test)]
mod recovery_error_tests {
    use super::*;

    /// A new user who renamed an event variant sees which event and how to read it again.
    #[test]
    fn a_deserialize_failure_says_how_to_keep_old_events_readable() {
        let error = RecoveryError::Deserialize {
            persistence_id: "Account|alice".to_owned(),
            source: SerializationError::Deserialize {
                seq_nr: 16,
                reason: "unknown variant `Withdrawn`".to_owned(),
            },
        };
        let message = error.to_string();
        assert!(message.starts_with("recovery of \"Account|alice\" failed: event at sequence number 16 could not be deserialized: unknown variant `Withdrawn`"), "{message}");
        assert!(message.contains("#[serde(alias = \"old\")]"), "{message}");
        assert!(
            message.contains("EventSourced::deserialize_event"),
            "{message}"
        );
    }
}
