//! One writer per persistence id, enforced by the store: a new incarnation's recovery takes
//! ownership of the id, and the older incarnation's writes are fenced, whichever order its
//! in-flight write and the takeover reach the store in. Driven through the testkit's
//! controlled journal over the in-memory and the SQLite store, so nothing depends on timing.

mod support;

use std::sync::Arc;
use std::time::Duration;

use actix_persistence::actix::{Actor, Addr};
use actix_persistence::snapshot::{
    SelectedSnapshot, SerializedSnapshot, SnapshotError, SnapshotMetadata,
    SnapshotSelectionCriteria, SnapshotStore,
};
use actix_persistence::{
    Backoff, BackoffSupervisor, FencingToken, JournalError, PersistError, PersistenceState,
    StopReason, MAX_SEQ_NR,
};
use async_trait::async_trait;
use futures::TryStreamExt;
use support::*;
use tokio::sync::{mpsc, oneshot, Notify};

on_every_backend!(
    a_write_in_flight_during_a_takeover_is_fenced_and_the_new_owner_persists,
    a_write_stored_before_a_takeover_is_replayed_and_the_new_owner_continues_after_it,
    a_fenced_actor_under_a_backoff_supervisor_is_not_restarted,
    a_stale_incarnations_delete_is_fenced_deletes_nothing_and_stops_it,
);

on_every_store!(a_recovery_owns_the_id_before_it_loads_its_snapshot);

/// Starts a probe of `pid` (group 0), waits until it recovered, and returns it with the
/// receiver of its stop reason.
async fn watched_probe(h: &mut Harness, pid: &str) -> (Addr<Probe>, oneshot::Receiver<StopReason>) {
    let mut stopped = None;
    let probe = h
        .probe_with(pid, 0, |mut state| {
            stopped = Some(state.watch_stop());
            state
        })
        .await;
    (probe, stopped.expect("the configure closure ran"))
}

/// Starts a new incarnation of `pid` (group 0) and returns it with how it recovered, skipping
/// what other probes reported meanwhile.
async fn new_incarnation(h: &mut Harness, pid: &str) -> (Addr<Probe>, (u64, Vec<Evt>)) {
    let probe = h.start_probe(pid, 0, |state| state);
    let seen = h.seen_until(|s| matches!(s, Seen::Recovered { .. })).await;
    match seen.last() {
        Some(Seen::Recovered {
            last_seq_nr,
            replayed,
            ..
        }) => (probe, (*last_seq_nr, replayed.clone())),
        other => panic!("expected {pid} to recover, saw {other:?}"),
    }
}

/// The events stored for `pid`, as (seq_nr, payload as text).
async fn stored(h: &Harness, pid: &str) -> Vec<(u64, String)> {
    h.control
        .stored()
        .replay_messages(pid, 1, MAX_SEQ_NR, MAX_SEQ_NR)
        .map_ok(|e| (e.seq_nr, String::from_utf8_lossy(&e.payload).into_owned()))
        .try_collect()
        .await
        .expect("replay")
}

fn expect_fenced(outcome: Result<u64, PersistError>, pid: &str) {
    match outcome {
        Err(PersistError::Failed(JournalError::Fenced { persistence_id, .. })) => {
            assert_eq!(persistence_id, pid)
        }
        other => panic!("expected the write to be fenced, got {other:?}"),
    }
}

async fn a_write_in_flight_during_a_takeover_is_fenced_and_the_new_owner_persists(
    backend: Backend,
) {
    let mut h = Harness::on(backend, 1).await;
    let (old, old_stopped) = watched_probe(&mut h, "f1").await;
    let in_flight = old.send(Persist(vec![named("from-old")]));
    let old_write = h.control.next_write_for("f1").await;
    assert_eq!(old_write.writes()[0].lowest_seq_nr(), 1);

    // A new incarnation recovers while the old write is still on its way to the store.
    let (new, recovered) = new_incarnation(&mut h, "f1").await;
    assert_eq!(
        recovered,
        (0, Vec::new()),
        "the in-flight write is not stored yet"
    );
    old_write.complete().wait().await;
    expect_fenced(in_flight.await.expect("mailbox"), "f1");
    assert_eq!(old_stopped.await, Ok(StopReason::Fenced));
    assert_eq!(
        stored(&h, "f1").await,
        Vec::new(),
        "the fenced write stored nothing"
    );

    // The new owner's first persist takes seq 1.
    let first = new.send(Persist(vec![named("from-new")]));
    let write = h.control.next_write_for("f1").await;
    assert_eq!(write.writes()[0].lowest_seq_nr(), 1);
    assert!(write.writes()[0].fencing_token > FencingToken::UNOWNED);
    write.complete();
    assert_eq!(first.await.expect("mailbox").expect("stored"), 1);
    assert_eq!(
        stored(&h, "f1").await,
        vec![(1, r#"{"Named":"from-new"}"#.to_owned())]
    );
}

async fn a_write_stored_before_a_takeover_is_replayed_and_the_new_owner_continues_after_it(
    backend: Backend,
) {
    let mut h = Harness::on(backend, 1).await;
    let (old, old_stopped) = watched_probe(&mut h, "f2").await;
    let first = old.send(Persist(vec![named("from-old")]));
    h.control.next_write_for("f2").await.complete();
    assert_eq!(first.await.expect("mailbox").expect("stored"), 1);

    let (new, recovered) = new_incarnation(&mut h, "f2").await;
    assert_eq!(recovered, (1, vec![named("from-old")]));
    let next = new.send(Persist(vec![named("from-new")]));
    let write = h.control.next_write_for("f2").await;
    assert_eq!(
        write.writes()[0].lowest_seq_nr(),
        2,
        "continues after the old write"
    );
    write.complete();
    assert_eq!(next.await.expect("mailbox").expect("stored"), 2);

    // The old incarnation is fenced from now on, whatever sequence number it writes.
    let stale = old.send(Persist(vec![named("stale")]));
    let write = h.control.next_write_for("f2").await;
    assert_eq!(write.writes()[0].lowest_seq_nr(), 2);
    write.complete();
    expect_fenced(stale.await.expect("mailbox"), "f2");
    assert_eq!(old_stopped.await, Ok(StopReason::Fenced));
    assert_eq!(
        stored(&h, "f2").await,
        vec![
            (1, r#"{"Named":"from-old"}"#.to_owned()),
            (2, r#"{"Named":"from-new"}"#.to_owned()),
        ]
    );
}

async fn a_fenced_actor_under_a_backoff_supervisor_is_not_restarted(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let journal = h.journal.clone();
    let log = h.log_tx.clone();
    let backoff = Backoff {
        min: Duration::from_millis(1),
        max: Duration::from_millis(1),
        random_factor: 0.0,
        reset_after: Duration::from_secs(600),
    };
    let supervisor = BackoffSupervisor::new(backoff, move || Probe {
        persistence: PersistenceState::new(journal.clone(), "f3").expect("valid id"),
        applied: Vec::new(),
        log: log.clone(),
    })
    .start();
    assert!(matches!(h.next_seen().await, Seen::Recovered { .. }));

    // Another incarnation (another node, say) takes the id over.
    let (owner, _) = new_incarnation(&mut h, "f3").await;
    let fenced = supervisor.send(Persist(vec![named("supervised")]));
    h.control.next_write_for("f3").await.complete();
    expect_fenced(fenced.await.expect("mailbox"), "f3");

    // The supervisor stops instead of restarting a child that would take the id back: a
    // command sent now is never handled (a restarted child would write it).
    let after = tokio::time::timeout(
        Duration::from_secs(10),
        supervisor.send(Persist(vec![named("after")])),
    )
    .await
    .expect("a restarted child would hold this reply until its write completed");
    assert!(
        matches!(after, Err(_) | Ok(Err(PersistError::ActorStopped))),
        "{after:?}"
    );
    assert!(
        !h.control.has_waiting_write(),
        "no write from a restarted child"
    );
    assert!(
        !h.seen_so_far()
            .iter()
            .any(|s| matches!(s, Seen::Recovered { .. })),
        "no new incarnation recovered"
    );

    // The owner is undisturbed: its first persist takes seq 1.
    let first = owner.send(Persist(vec![named("owner")]));
    h.control.next_write_for("f3").await.complete();
    assert_eq!(first.await.expect("mailbox").expect("stored"), 1);
}

async fn a_stale_incarnations_delete_is_fenced_deletes_nothing_and_stops_it(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let (old, old_stopped) = watched_probe(&mut h, "f4").await;
    let first = old.send(PersistAll(vec![named("one"), named("two")]));
    h.control.next_write_for("f4").await.complete();
    first.await.expect("mailbox").expect("stored");

    let (new, recovered) = new_incarnation(&mut h, "f4").await;
    assert_eq!(recovered.0, 2);
    old.do_send(DeleteEventsTo(2));
    let seen = h
        .seen_until(|s| matches!(s, Seen::DeleteFailed { .. } | Seen::EventsDeleted { .. }))
        .await;
    match seen.last() {
        Some(Seen::DeleteFailed { pid, error }) => {
            assert_eq!(pid, "f4");
            assert!(
                error.contains("fenc"),
                "the failure says it was fenced: {error}"
            );
        }
        other => panic!("expected the stale delete to fail, saw {other:?}"),
    }
    assert_eq!(
        old_stopped.await,
        Ok(StopReason::Fenced),
        "the stale incarnation stops as after a fenced write"
    );
    assert_eq!(
        stored(&h, "f4").await,
        vec![
            (1, r#"{"Named":"one"}"#.to_owned()),
            (2, r#"{"Named":"two"}"#.to_owned()),
        ],
        "the stale delete deleted nothing"
    );

    // The owner deletes.
    new.do_send(DeleteEventsTo(1));
    let seen = h
        .seen_until(|s| matches!(s, Seen::DeleteFailed { .. } | Seen::EventsDeleted { .. }))
        .await;
    assert_eq!(
        seen.last(),
        Some(&Seen::EventsDeleted {
            pid: "f4".to_owned(),
            to_seq_nr: 1
        })
    );
    assert_eq!(
        stored(&h, "f4").await,
        vec![(2, r#"{"Named":"two"}"#.to_owned())]
    );
}

/// A snapshot store over another whose loads, once they read the snapshot, report it and wait
/// until the test opens the gate: the recovering actor holds what it loaded while the test lets
/// the previous incarnation go on.
struct HeldLoads {
    inner: Arc<dyn SnapshotStore>,
    loaded: mpsc::UnboundedSender<Option<u64>>,
    gate: Arc<Notify>,
}

#[async_trait]
impl SnapshotStore for HeldLoads {
    async fn load(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        let found = self.inner.load(pid, criteria).await;
        let seq_nr = found
            .as_ref()
            .ok()
            .and_then(|s| s.as_ref().map(|s| s.metadata.seq_nr));
        let _ = self.loaded.send(seq_nr);
        self.gate.notified().await;
        found
    }
    async fn save(&self, m: SnapshotMetadata, s: SerializedSnapshot) -> Result<(), SnapshotError> {
        self.inner.save(m, s).await
    }
    async fn delete(&self, m: &SnapshotMetadata) -> Result<(), SnapshotError> {
        self.inner.delete(m).await
    }
    async fn delete_matching(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError> {
        self.inner.delete_matching(pid, criteria).await
    }
}

/// A new incarnation takes ownership of the id before it loads its snapshot. Loaded first, the
/// snapshot could be outdated by the time of the takeover: the old owner, still owning the id,
/// persisted, saved a newer snapshot and deleted the events up to it (as a snapshot policy with
/// `delete_events` does), and the new incarnation, replaying after its older snapshot, found
/// them deleted and failed with `MissingEvents` (the old one was fenced by then, so the id had
/// no live owner at all).
async fn a_recovery_owns_the_id_before_it_loads_its_snapshot(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let snapshots = Arc::clone(&h.snapshots);
    let with_snapshots = |store: Arc<dyn SnapshotStore>| {
        move |state: PersistenceState<Probe>| {
            state.with_snapshot_store(store, Duration::from_secs(30))
        }
    };
    let old = h
        .probe_with("f5", 0, with_snapshots(Arc::clone(&snapshots)))
        .await;
    let first = old.send(Persist(vec![named("one"), named("two")]));
    h.control.next_write_for("f5").await.complete();
    assert_eq!(first.await.expect("mailbox").expect("stored"), 2);
    old.do_send(SaveSnapshot);
    let saved = h
        .seen_until(|s| matches!(s, Seen::SnapshotSaved { .. }))
        .await;
    assert_eq!(
        saved.last(),
        Some(&Seen::SnapshotSaved {
            pid: "f5".to_owned(),
            seq_nr: 2
        })
    );

    // A new incarnation starts; its snapshot load read the snapshot at 2 and is held.
    let (loaded_tx, mut loaded) = mpsc::unbounded_channel();
    let gate = Arc::new(Notify::new());
    let held: Arc<dyn SnapshotStore> = Arc::new(HeldLoads {
        inner: Arc::clone(&snapshots),
        loaded: loaded_tx,
        gate: Arc::clone(&gate),
    });
    let _new = h.start_probe("f5", 0, with_snapshots(held));
    assert_eq!(loaded.recv().await, Some(Some(2)));

    // Meanwhile the old incarnation persists; while it still owns the id, it also snapshots
    // and deletes the events the snapshot covers.
    let third = old.send(Persist(vec![named("three")]));
    h.control.next_write_for("f5").await.complete();
    let third = third.await.expect("mailbox");
    if third.is_ok() {
        old.do_send(SaveSnapshot);
        h.seen_until(|s| matches!(s, Seen::SnapshotSaved { .. } | Seen::SnapshotFailed { .. }))
            .await;
        old.do_send(DeleteEventsTo(3));
        h.seen_until(|s| matches!(s, Seen::EventsDeleted { .. } | Seen::DeleteFailed { .. }))
            .await;
    }

    gate.notify_one();
    let seen = h
        .seen_until(|s| matches!(s, Seen::Recovered { .. } | Seen::RecoveryFailed { .. }))
        .await;
    assert_eq!(
        seen.last(),
        Some(&Seen::Recovered {
            pid: "f5".to_owned(),
            last_seq_nr: 2,
            replayed: vec![named("one"), named("two")],
        }),
        "the new incarnation recovers what its snapshot holds"
    );
    // It owned the id before it loaded the snapshot: the old one's later write was fenced.
    expect_fenced(third, "f5");
    assert_eq!(
        stored(&h, "f5").await,
        vec![
            (1, r#"{"Named":"one"}"#.to_owned()),
            (2, r#"{"Named":"two"}"#.to_owned()),
        ]
    );
}

/// A persistent actor whose failure hooks panic (user code with a bug), to check that a fenced
/// write or delete still stops it as fenced.
struct PanickyHooks {
    persistence: PersistenceState<Self>,
    recovered: mpsc::UnboundedSender<u64>,
}

impl Actor for PanickyHooks {
    type Context = actix::Context<Self>;

    fn started(&mut self, ctx: &mut actix::Context<Self>) {
        actix_persistence::start_recovery(self, ctx);
    }
}

impl actix_persistence::PersistentActor for PanickyHooks {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

impl actix_persistence::EventSourced for PanickyHooks {
    type Event = Evt;

    fn apply(&mut self, _: &Evt) {}

    fn on_recovery_completed(&mut self, last_seq_nr: u64, _: &mut actix::Context<Self>) {
        let _ = self.recovered.send(last_seq_nr);
    }

    fn on_persist_failure(&mut self, _: &JournalError, _: &mut actix::Context<Self>) {
        panic!("on_persist_failure has a bug");
    }

    fn on_delete_failure(
        &mut self,
        _: &actix_persistence::DeleteError,
        _: &mut actix::Context<Self>,
    ) {
        panic!("on_delete_failure has a bug");
    }
}

#[derive(actix_persistence::Message)]
#[rtype(result = "actix_persistence::PersistResult<u64>")]
struct PersistOne(Evt);

impl actix::Handler<PersistOne> for PanickyHooks {
    type Result = actix_persistence::PersistReply<u64>;

    fn handle(&mut self, msg: PersistOne, ctx: &mut actix::Context<Self>) -> Self::Result {
        use actix_persistence::PersistentActor;
        self.persist(ctx, msg.0, |act, _, _| act.last_seq_nr())
    }
}

#[derive(actix_persistence::Message)]
#[rtype(result = "()")]
struct DeleteAll;

impl actix::Handler<DeleteAll> for PanickyHooks {
    type Result = ();

    fn handle(&mut self, _: DeleteAll, ctx: &mut actix::Context<Self>) {
        use actix_persistence::PersistentActor;
        self.delete_events_to(ctx, u64::MAX);
    }
}

/// A fenced write or delete stops the actor as fenced (a supervisor does not restart it) also
/// when its failure hook panics: the panic does not turn it into a failure a supervisor
/// restarts, which would take the id back from its new owner and fence that one in turn.
async fn a_fenced_actor_whose_failure_hook_panics_still_stops_as_fenced(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    for delete in [false, true] {
        let pid = &format!("f5-{delete}");
        let (tx, mut recovered) = mpsc::unbounded_channel();
        let mut state = PersistenceState::new(h.journal.clone(), pid.as_str()).expect("valid id");
        let stopped = state.watch_stop();
        let old = PanickyHooks {
            persistence: state,
            recovered: tx,
        }
        .start();
        assert_eq!(recovered.recv().await, Some(0));
        let first = old.send(PersistOne(named("one")));
        h.control.next_write_for(pid).await.complete();
        assert_eq!(first.await.expect("mailbox").expect("stored"), 1);

        // Another incarnation takes the id over; the old one's next write or delete is fenced.
        let (_new, recovered_new) = new_incarnation(&mut h, pid).await;
        assert_eq!(recovered_new.0, 1);
        if delete {
            old.do_send(DeleteAll);
        } else {
            let stale = old.send(PersistOne(named("stale")));
            h.control.next_write_for(pid).await.complete();
            match stale.await.expect("mailbox") {
                Err(PersistError::Failed(JournalError::Fenced { .. })) => {}
                other => panic!("expected a fenced write, got {other:?}"),
            }
        }
        assert_eq!(
            stopped.await,
            Ok(StopReason::Fenced),
            "delete {delete}: fenced, whatever the hook did"
        );
    }
}

on_every_backend!(a_fenced_actor_whose_failure_hook_panics_still_stops_as_fenced);
