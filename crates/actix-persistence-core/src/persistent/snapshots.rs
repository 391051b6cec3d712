//! Snapshots and deletes from inside a persistent actor.

use std::num::NonZeroU64;
use std::time::Duration;

use actix::fut::ActorFutureExt;
use actix::{AsyncContext, Context, WrapFuture};

use super::addr::ActorFailure;
use super::in_flight::InFlightGuard;
use super::panics::catch_user;
use super::state::{now_millis, StopReason};
use super::PersistentActor;
use crate::error::JournalError;
use crate::journal::DeleteMessagesTo;
use crate::store::NoAnswer;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::serialization::SerializationError;
use crate::snapshot::{
    SelectedSnapshot, SerializedSnapshot, SnapshotError, SnapshotMetadata,
    SnapshotSelectionCriteria, SnapshotStore,
};

/// When a persistent actor takes snapshots by itself, and what it keeps (as Akka Typed's
/// `RetentionCriteria.snapshotEvery`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotPolicy {
    /// Take a snapshot each time the sequence number crosses a multiple of this; `None` (the
    /// default) takes none automatically.
    pub every: Option<NonZeroU64>,
    /// Keep this many newest snapshots (by count, whatever their sequence numbers), delete
    /// older ones; 0 keeps all (and then no events are deleted). Applied after every snapshot
    /// saved, also those `save_snapshot` asks for (with `every` `None` as well).
    pub keep: u32,
    /// After a snapshot was saved and `keep` snapshots exist, delete the events up to the
    /// oldest kept snapshot (never further: recovery may fall back to any kept snapshot and
    /// needs every event after it). Needs `keep` of at least 1.
    pub delete_events: bool,
}

impl SnapshotPolicy {
    /// A snapshot every `events` events, keeping the 2 newest, events kept (as Akka's
    /// `RetentionCriteria.snapshotEvery(numberOfEvents, 2)`). `every(0)` takes no snapshot
    /// automatically, as the default policy.
    ///
    /// # Examples
    /// ```
    /// # use actix_persistence_core as actix_persistence; // the paths of the facade, `actix-persistence`
    /// use actix_persistence::persistent::SnapshotPolicy;
    ///
    /// // A snapshot every 100 events; keep the 2 newest and delete the events they cover.
    /// let policy = SnapshotPolicy::every(100).keep(2).delete_events(true);
    /// assert_eq!(policy.every.map(|n| n.get()), Some(100));
    /// assert_eq!(SnapshotPolicy::every(0).every, None);
    /// ```
    pub fn every(events: u64) -> Self {
        SnapshotPolicy {
            every: NonZeroU64::new(events),
            keep: 2,
            delete_events: false,
        }
    }

    /// Keeps the `snapshots` newest snapshots, counted (0 keeps all). Retention looks them up
    /// with `snapshots` loads after each save.
    pub fn keep(self, snapshots: u32) -> Self {
        SnapshotPolicy {
            keep: snapshots,
            ..self
        }
    }

    /// Deletes the events covered by the oldest kept snapshot after each new snapshot (see
    /// [`SnapshotPolicy::delete_events`](Self#structfield.delete_events)).
    pub fn delete_events(self, delete: bool) -> Self {
        SnapshotPolicy {
            delete_events: delete,
            ..self
        }
    }
}

/// How a persistent actor takes snapshots and restores them: both halves at once, so an
/// actor cannot take snapshots it could not restore. Returned by
/// [`EventSourced::snapshotting`](super::EventSourced::snapshotting).
///
/// # Examples
/// ```
/// # use actix_persistence_core as actix_persistence; // the paths of the facade, `actix-persistence`
/// use actix_persistence::persistent::Snapshotting;
/// # struct Cart { items: Vec<String> }
///
/// // The cart's snapshot is its item list, stored with serde_json.
/// let snapshotting: Snapshotting<Cart> = Snapshotting::json(
///     |cart: &Cart| cart.items.clone(),
///     |cart: &mut Cart, items: Vec<String>| cart.items = items,
/// );
/// # let _ = snapshotting;
/// ```
pub struct Snapshotting<A> {
    take: Box<TakeFn<A>>,
    restore: Box<RestoreFn<A>>,
}

type TakeFn<A> = dyn Fn(&A) -> Result<SerializedSnapshot, SerializationError>;
type RestoreFn<A> = dyn Fn(&mut A, &SelectedSnapshot) -> Result<(), SerializationError>;

impl<A> std::fmt::Debug for Snapshotting<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshotting").finish_non_exhaustive()
    }
}

impl<A: 'static> Snapshotting<A> {
    /// Snapshots as serde_json of the value `take` returns; `restore` gets that value back
    /// during recovery.
    pub fn json<S>(take: fn(&A) -> S, restore: fn(&mut A, S)) -> Self
    where
        S: Serialize + DeserializeOwned + 'static,
    {
        Snapshotting {
            take: Box::new(move |actor| SerializedSnapshot::json(&take(actor))),
            restore: Box::new(move |actor, snapshot| {
                restore(actor, snapshot.json::<S>()?);
                Ok(())
            }),
        }
    }

    /// Snapshots in a format of the caller's: `take` serializes the state, `restore` reads it
    /// back (an error fails recovery with [`super::RecoveryError::Snapshot`]).
    pub fn custom(
        take: impl Fn(&A) -> Result<SerializedSnapshot, SerializationError> + 'static,
        restore: impl Fn(&mut A, &SelectedSnapshot) -> Result<(), SerializationError> + 'static,
    ) -> Self {
        Snapshotting {
            take: Box::new(take),
            restore: Box::new(restore),
        }
    }

    pub(crate) fn take(&self, actor: &A) -> Result<SerializedSnapshot, SerializationError> {
        (self.take)(actor)
    }

    pub(crate) fn restore(
        &self,
        actor: &mut A,
        snapshot: &SelectedSnapshot,
    ) -> Result<(), SerializationError> {
        (self.restore)(actor, snapshot)
    }
}

/// Why deleting events did not happen. Non-exhaustive: later releases may add reasons.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DeleteError {
    /// Asked to delete beyond the last sequence number (only `u64::MAX`, "all", may).
    #[error(
        "cannot delete events of {persistence_id:?} up to {to_seq_nr}: \
         the last sequence number is {last_seq_nr}"
    )]
    BeyondLastSeqNr {
        /// Whose events.
        persistence_id: String,
        /// The requested bound.
        to_seq_nr: u64,
        /// The actor's last sequence number.
        last_seq_nr: u64,
    },
    /// The journal failed to delete.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// Asked before recovery completed (from `Actor::started`, say): the last sequence number
    /// is not known yet, and the incarnation does not own the persistence id yet (its fencing
    /// token would have made the journal answer [`JournalError::Fenced`]). Nothing was sent.
    #[error(
        "cannot delete events of {persistence_id:?} before its recovery completed: the last \
         sequence number is not known yet (delete from a command handler or \
         on_recovery_completed)"
    )]
    NotRecovered {
        /// Whose events.
        persistence_id: String,
    },
}

pub(crate) fn save_snapshot<A: PersistentActor>(act: &mut A, ctx: &mut Context<A>) {
    let persistence_id = act.persistence_id().to_owned();
    let not_supported = |reason| SnapshotError::NotSupported {
        persistence_id: persistence_id.clone(),
        reason,
    };
    let Some(store) = act.persistence().snapshots.clone() else {
        act.on_snapshot_failure(&not_supported("no snapshot store is configured"), ctx);
        return;
    };
    if !act.persistence().recovered {
        let reason = "recovery has not completed: the state and its sequence number are not \
                      known yet (save snapshots from a command handler or on_recovery_completed)";
        act.on_snapshot_failure(&not_supported(reason), ctx);
        return;
    }
    if act.persistence().partially_recovered {
        let reason = "recovery was bounded (to_seq_nr, max_events or Recovery::none), so the \
                      state misses stored events; a snapshot would drop them";
        act.on_snapshot_failure(&not_supported(reason), ctx);
        return;
    }
    // The last stored event's number, not a rejected write's used-up one: an incarnation
    // already replaced by a newer one (not fenced yet, it has not written since) may have used
    // up a number the newer one stored an event at, which a snapshot there would hide from
    // every recovery.
    let metadata = SnapshotMetadata {
        persistence_id: persistence_id.clone(),
        seq_nr: act.persistence().stored_seq_nr(),
        timestamp: now_millis(),
    };
    let Some(snapshotting) = A::snapshotting() else {
        let reason = "this actor takes no snapshots: EventSourced::snapshotting returns None";
        act.on_snapshot_failure(&not_supported(reason), ctx);
        return;
    };
    let snapshot = match snapshotting.take(act) {
        Ok(snapshot) => snapshot,
        Err(source) => {
            let error = SnapshotError::Serialization {
                persistence_id,
                seq_nr: metadata.seq_nr,
                source,
            };
            act.on_snapshot_failure(&error, ctx);
            return;
        }
    };
    let timeout = act.persistence().snapshot_timeout;
    let save = async move {
        let call = || store.save(metadata.clone(), snapshot);
        with_timeout("save", timeout, call).await.map(|()| metadata)
    };
    let work = act.persistence().enter_work();
    ctx.spawn(
        detached(save, act.persistence().enter_work())
            .into_actor(act)
            .map(move |saved, act, ctx| {
                match saved {
                    Ok(metadata) => {
                        if run_hook(act, ctx, |act, ctx| act.on_snapshot_saved(&metadata, ctx)) {
                            apply_retention(act, ctx, &metadata);
                        }
                    }
                    Err(error) => {
                        run_hook(act, ctx, |act, ctx| act.on_snapshot_failure(&error, ctx));
                    }
                }
                // Ends after the deletes it started began.
                drop(work);
            }),
    );
}

/// After a snapshot: keeps the `keep` newest snapshots (by count), deletes the older ones and,
/// with `delete_events`, the events up to the oldest kept snapshot, never further: recovery
/// may fall back to any kept snapshot, and needs every event after it (as Akka's retention).
fn apply_retention<A: PersistentActor>(
    act: &mut A,
    ctx: &mut Context<A>,
    saved: &SnapshotMetadata,
) {
    let policy = act.persistence().snapshot_policy;
    let Some(store) = act.persistence().snapshots.clone() else {
        return;
    };
    // After every saved snapshot, automatic or asked for with `save_snapshot` (as Akka's
    // retention follows every snapshot it saves), once `keep` is set.
    if policy.keep == 0 {
        return;
    }
    let pid = saved.persistence_id.clone();
    let timeout = act.persistence().snapshot_timeout;
    let retention = async move {
        let Some(oldest_kept) = oldest_kept(&*store, &pid, policy.keep, timeout).await? else {
            return Ok(None);
        };
        if oldest_kept > 0 {
            let older = SnapshotSelectionCriteria::up_to(oldest_kept - 1);
            with_timeout("delete", timeout, || store.delete_matching(&pid, older)).await?;
        }
        Ok(Some(oldest_kept))
    };
    let work = act.persistence().enter_work();
    ctx.spawn(
        detached(retention, act.persistence().enter_work())
            .into_actor(act)
            .map(move |kept, act, ctx| {
                match kept {
                    Ok(Some(oldest_kept)) if policy.delete_events && oldest_kept > 0 => {
                        delete_events_to(act, ctx, oldest_kept)
                    }
                    Ok(_) => {}
                    Err(error) => {
                        run_hook(act, ctx, |act, ctx| act.on_snapshot_failure(&error, ctx));
                    }
                }
                // Ends after the event delete it started began.
                drop(work);
            }),
    );
}

/// The sequence number of the `keep`-th newest snapshot of `pid` (its metadata read with
/// [`SnapshotStore::read_metadata`], without the snapshots' payloads); `None` while fewer than
/// `keep` exist.
async fn oldest_kept(
    store: &dyn SnapshotStore,
    pid: &str,
    keep: u32,
    timeout: Duration,
) -> Result<Option<u64>, SnapshotError> {
    let read = || store.read_metadata(pid, SnapshotSelectionCriteria::latest(), keep);
    let newest = with_timeout("read metadata", timeout, read).await?;
    Ok(if newest.len() == keep as usize {
        newest.last().map(|oldest_kept| oldest_kept.seq_nr)
    } else {
        None
    })
}

/// After a write stored events `previous + 1 ..= stored`: takes a snapshot when the policy's
/// interval was crossed.
pub(crate) fn after_stored<A: PersistentActor>(
    act: &mut A,
    ctx: &mut Context<A>,
    previous: u64,
    stored: u64,
) {
    if let Some(every) = act.persistence().snapshot_policy.every {
        if stored / every.get() > previous / every.get() {
            save_snapshot(act, ctx);
        }
    }
}

pub(crate) fn delete_events_to<A: PersistentActor>(
    act: &mut A,
    ctx: &mut Context<A>,
    to_seq_nr: u64,
) {
    if !act.persistence().recovered {
        let error = DeleteError::NotRecovered {
            persistence_id: act.persistence_id().to_owned(),
        };
        act.on_delete_failure(&error, ctx);
        return;
    }
    let last_seq_nr = act.last_seq_nr();
    if to_seq_nr > last_seq_nr && to_seq_nr != u64::MAX {
        let error = DeleteError::BeyondLastSeqNr {
            persistence_id: act.persistence_id().to_owned(),
            to_seq_nr,
            last_seq_nr,
        };
        act.on_delete_failure(&error, ctx);
        return;
    }
    // "All" means all stored so far: never events persisted after this call.
    let bound = to_seq_nr.min(last_seq_nr);
    let request = act.persistence().journal().send(DeleteMessagesTo {
        persistence_id: act.persistence_id().to_owned(),
        to_seq_nr: bound,
        fencing_token: act.persistence().fencing_token(),
    });
    let work = act.persistence().enter_work();
    let delete = async move {
        let deleted = request.await.unwrap_or(Err(JournalError::JournalStopped));
        drop(work);
        deleted
    };
    ctx.spawn(
        delete
            .into_actor(act)
            .map(move |deleted, act, ctx| match deleted {
                Ok(()) => {
                    run_hook(act, ctx, |act, ctx| act.on_events_deleted(to_seq_nr, ctx));
                }
                Err(error) if matches!(error, JournalError::Fenced { .. }) => {
                    // A fenced delete shows that a newer incarnation owns the id: this one
                    // stops as after a fenced write (a supervisor does not restart it), also
                    // when the hook panics (a restart would take the id back).
                    act.persistence()
                        .record_failure(ActorFailure::Persist(error.clone()));
                    let error = DeleteError::Journal(error);
                    if let Err(reason) = catch_user(|| act.on_delete_failure(&error, ctx)) {
                        tracing::error!(panic = %reason, "on_delete_failure panicked after a fenced delete; the actor stops as fenced");
                    }
                    super::driver::stop_with(act, ctx, StopReason::Fenced, std::iter::empty());
                }
                Err(error) => {
                    let error = DeleteError::Journal(error);
                    run_hook(act, ctx, |act, ctx| act.on_delete_failure(&error, ctx));
                }
            }),
    );
}

/// Runs a hook that answers a background snapshot or delete call. A panic in it stops the
/// actor with [`StopReason::Panicked`] (as everywhere the library runs user code); returns
/// whether the hook returned normally.
fn run_hook<A: PersistentActor>(
    act: &mut A,
    ctx: &mut Context<A>,
    hook: impl FnOnce(&mut A, &mut Context<A>),
) -> bool {
    match catch_user(|| hook(act, ctx)) {
        Ok(()) => true,
        Err(reason) => {
            super::driver::stop_with(
                act,
                ctx,
                StopReason::Panicked { reason },
                std::iter::empty(),
            );
            false
        }
    }
}

/// Runs `call` as a task of its own, so the store call progresses even while the actor waits
/// for a write (`ctx.wait` holds back the actor's own futures): a store that serializes calls,
/// like SQLite's single writer, would otherwise wait for the write while the write waits for
/// it. The returned future only hands the outcome back to the actor.
///
/// `work` is held until the store answered, also when the actor stopped meanwhile.
fn detached<T: 'static>(
    call: impl std::future::Future<Output = Result<T, SnapshotError>> + 'static,
    work: Option<InFlightGuard>,
) -> impl std::future::Future<Output = Result<T, SnapshotError>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    actix::spawn(async move {
        let _ = tx.send(call.await);
        drop(work);
    });
    async move { rx.await.unwrap_or(Err(SnapshotError::Interrupted)) }
}

/// Makes a snapshot store call (`call` creates its future) and awaits it within `timeout`.
/// A store that panics, while it creates the future or while the future runs, fails the call
/// with [`SnapshotStorePanicked`] (not the actor, nor as an interrupted call).
pub(super) async fn with_timeout<T, F>(
    operation: &'static str,
    timeout: Duration,
    call: impl FnOnce() -> F,
) -> Result<T, SnapshotError>
where
    F: std::future::Future<Output = Result<T, SnapshotError>>,
{
    match crate::store::answer_within(timeout, call).await {
        Ok(result) => result,
        Err(NoAnswer::TimedOut) => Err(SnapshotError::Timeout { operation, timeout }),
        Err(NoAnswer::Panicked) => Err(SnapshotError::storage(operation, SnapshotStorePanicked)),
    }
}

/// The cause of a [`SnapshotError::Storage`] whose store panicked.
#[derive(Debug, thiserror::Error)]
#[error("the snapshot store panicked")]
struct SnapshotStorePanicked;
