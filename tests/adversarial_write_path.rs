//! The write path under failure and snapshots, in scenarios from bug reports
//! against other persistence libraries (Akka Persistence, akka-persistence-jdbc/r2dbc,
//! Akka.NET, cqrs-es).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_persistence::actix::{Actor, Addr};
use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence::snapshot::{
    InMemorySnapshotStore, SelectedSnapshot, SerializedSnapshot, SnapshotError, SnapshotMetadata,
    SnapshotSelectionCriteria, SnapshotStore,
};
use actix_persistence::{
    AtomicWrite, AtomicWriteResult, FencingToken, InMemoryJournal, JournalError, JournalStore,
    Ownership, PersistError, PersistenceState, ReplayStream, SnapshotPolicy,
};
use support::*;
use tokio::sync::{mpsc, oneshot};

/// A store whose armed write runs in a task of its own that waits for the test's gate: the
/// journal's call timeout drops the write's future, but the write itself goes on and lands in
/// the in-memory journal when the test opens the gate (as a SQL write taken into a
/// transaction, or a request already on the wire). What it answered is sent to `landed`.
struct LateStore {
    inner: Arc<InMemoryJournal>,
    armed: Mutex<Option<oneshot::Receiver<()>>>,
    landed: mpsc::UnboundedSender<Result<Vec<AtomicWriteResult>, JournalError>>,
}

#[async_trait::async_trait]
impl JournalStore for LateStore {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        let gate = self.armed.lock().unwrap().take();
        let Some(gate) = gate else {
            return self.inner.write_messages(writes).await;
        };
        let inner = Arc::clone(&self.inner);
        let landed = self.landed.clone();
        let task = actix::spawn(async move {
            let _ = gate.await;
            let result = inner.write_messages(writes).await;
            let _ = landed.send(result.clone());
            result
        });
        task.await
            .unwrap_or_else(|_| Err(JournalError::JournalStopped))
    }
    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.inner.replay_messages(pid, from, to, max)
    }
    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        self.inner.read_highest_sequence_nr(pid, from).await
    }
    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        token: FencingToken,
    ) -> Result<(), JournalError> {
        self.inner.delete_messages_to(pid, to, token).await
    }
    async fn take_ownership(&self, pid: &str) -> Result<Ownership, JournalError> {
        self.inner.take_ownership(pid).await
    }
    async fn read_deleted_to(&self, pid: &str) -> Result<Option<u64>, JournalError> {
        self.inner.read_deleted_to(pid).await
    }
}

/// Akka Persistence's circuit-breaker call-timeout where the write still completes later (and
/// Akka.NET's duplicate sequence numbers after a failed write): the actor's write times out,
/// it stops; the next incarnation recovers without it and stores its own event at the same
/// number; the old write then lands. It must not be stored (fenced or refused), the sequence
/// numbers must never be reused, and a later incarnation recovers exactly what its
/// predecessors were told was stored.
#[actix::test]
async fn a_write_that_lands_after_its_timeout_and_a_takeover_is_never_stored() {
    let inner = Arc::new(InMemoryJournal::new());
    let (landed_tx, mut landed) = mpsc::unbounded_channel();
    let store = Arc::new(LateStore {
        inner: Arc::clone(&inner),
        armed: Mutex::new(None),
        landed: landed_tx,
    });
    let journal = JournalActor::start_with(
        store.clone(),
        JournalConfig {
            call_timeout: Duration::from_millis(100),
            ..JournalConfig::default()
        },
    );
    let (log_tx, mut log) = mpsc::unbounded_channel();
    let start = |pid: &str| {
        let mut state = PersistenceState::new(journal.clone(), pid).expect("valid id");
        let stopped = state.watch_stop();
        let addr = Probe {
            persistence: state,
            applied: Vec::new(),
            log: log_tx.clone(),
        }
        .start();
        (addr, stopped)
    };
    async fn recovered(log: &mut mpsc::UnboundedReceiver<Seen>) -> (u64, Vec<Evt>) {
        loop {
            match tokio::time::timeout(Duration::from_secs(10), log.recv())
                .await
                .expect("no hang")
                .expect("log")
            {
                Seen::Recovered {
                    last_seq_nr,
                    replayed,
                    ..
                } => return (last_seq_nr, replayed),
                Seen::RecoveryFailed { error, .. } => panic!("recovery failed: {error}"),
                _ => {}
            }
        }
    }

    let (a, stopped) = start("late");
    assert_eq!(recovered(&mut log).await, (0, vec![]));
    let one = a.send(Persist(vec![named("one")])).await.expect("mailbox");
    assert_eq!(one.expect("stored"), 1);

    let (open, gate) = oneshot::channel();
    *store.armed.lock().unwrap() = Some(gate);
    match a.send(Persist(vec![named("lost")])).await.expect("mailbox") {
        Err(PersistError::Failed(JournalError::Timeout { .. })) => {}
        other => panic!("expected the write to time out, got {other:?}"),
    }
    stopped.await.expect("stop reason");

    let (b, _b_stopped) = start("late");
    assert_eq!(recovered(&mut log).await, (1, vec![named("one")]));
    let two = b.send(Persist(vec![named("two")])).await.expect("mailbox");
    assert_eq!(two.expect("stored"), 2);

    // The old incarnation's write lands now.
    let _ = open.send(());
    let late = tokio::time::timeout(Duration::from_secs(10), landed.recv())
        .await
        .expect("the late write lands")
        .expect("landed");
    assert!(
        late.as_ref().map_or(true, |r| r.iter().all(Result::is_err)),
        "the stale write must not be stored: {late:?}"
    );
    let three = b
        .send(Persist(vec![named("three")]))
        .await
        .expect("mailbox");
    assert_eq!(three.expect("stored"), 3);
    b.send(Stop).await.expect("mailbox");

    let (_c, _) = start("late");
    assert_eq!(
        recovered(&mut log).await,
        (3, vec![named("one"), named("two"), named("three")])
    );
}

/// The same late write, landing after the takeover but before the new owner wrote anything:
/// the new owner's first write must take the next number and succeed.
#[actix::test]
async fn a_write_that_lands_between_a_takeover_and_the_new_owners_first_write_is_fenced() {
    let inner = Arc::new(InMemoryJournal::new());
    let (landed_tx, mut landed) = mpsc::unbounded_channel();
    let store = Arc::new(LateStore {
        inner: Arc::clone(&inner),
        armed: Mutex::new(None),
        landed: landed_tx,
    });
    let journal = JournalActor::start_with(
        store.clone(),
        JournalConfig {
            call_timeout: Duration::from_millis(100),
            ..JournalConfig::default()
        },
    );
    let (log_tx, mut log) = mpsc::unbounded_channel();
    let start = |pid: &str| {
        let state = PersistenceState::new(journal.clone(), pid).expect("valid id");
        Probe {
            persistence: state,
            applied: Vec::new(),
            log: log_tx.clone(),
        }
        .start()
    };
    async fn next(log: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
        tokio::time::timeout(Duration::from_secs(10), log.recv())
            .await
            .expect("no hang")
            .expect("log")
    }
    let a: Addr<Probe> = start("late2");
    assert!(matches!(
        next(&mut log).await,
        Seen::Recovered { last_seq_nr: 0, .. }
    ));
    let (open, gate) = oneshot::channel();
    *store.armed.lock().unwrap() = Some(gate);
    let lost = a.send(Persist(vec![named("lost")])).await.expect("mailbox");
    assert!(matches!(
        lost,
        Err(PersistError::Failed(JournalError::Timeout { .. }))
    ));
    let b: Addr<Probe> = start("late2");
    loop {
        if let Seen::Recovered { last_seq_nr, .. } = next(&mut log).await {
            assert_eq!(last_seq_nr, 0);
            break;
        }
    }
    let _ = open.send(());
    let late = landed.recv().await.expect("landed");
    assert!(
        late.as_ref().map_or(true, |r| r.iter().all(Result::is_err)),
        "the stale write must not be stored: {late:?}"
    );
    let first = b
        .send(Persist(vec![named("first")]))
        .await
        .expect("mailbox");
    assert_eq!(first.expect("stored"), 1);
}

/// Snapshot retention (keep 1, delete events) when a later snapshot save fails: the events
/// after the one kept snapshot stay, and a restart recovers everything.
struct FailingSaves {
    inner: InMemorySnapshotStore,
    fail_from_seq_nr: u64,
}

#[async_trait::async_trait]
impl SnapshotStore for FailingSaves {
    async fn load(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        self.inner.load(pid, criteria).await
    }
    async fn save(
        &self,
        metadata: SnapshotMetadata,
        snapshot: SerializedSnapshot,
    ) -> Result<(), SnapshotError> {
        if metadata.seq_nr >= self.fail_from_seq_nr {
            return Err(SnapshotError::Timeout {
                operation: "save",
                timeout: Duration::from_millis(1),
            });
        }
        self.inner.save(metadata, snapshot).await
    }
    async fn delete(&self, metadata: &SnapshotMetadata) -> Result<(), SnapshotError> {
        self.inner.delete(metadata).await
    }
    async fn delete_matching(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError> {
        self.inner.delete_matching(pid, criteria).await
    }
}

#[actix::test]
async fn retention_after_a_failed_snapshot_save_deletes_nothing_a_recovery_needs() {
    let mut h = Harness::new(1);
    let snapshots: Arc<dyn SnapshotStore> = Arc::new(FailingSaves {
        inner: InMemorySnapshotStore::new(),
        fail_from_seq_nr: 4,
    });
    let policy = SnapshotPolicy::every(2).keep(1).delete_events(true);
    let configure = |snapshots: Arc<dyn SnapshotStore>| {
        move |state: PersistenceState<Probe>| {
            state
                .with_snapshot_store(snapshots, Duration::from_secs(5))
                .with_snapshot_policy(policy)
        }
    };
    let a = h
        .probe_with("ret", 0, configure(Arc::clone(&snapshots)))
        .await;
    for (i, name) in ["e1", "e2", "e3", "e4", "e5"].iter().enumerate() {
        let reply = a.send(Persist(vec![named(name)]));
        h.control.next_write_for("ret").await.complete();
        assert_eq!(reply.await.expect("mailbox").expect("stored"), i as u64 + 1);
    }
    // Snapshot at 2 saved (events up to 2 deleted), at 4 failed.
    let seen = h
        .seen_until(|s| matches!(s, Seen::SnapshotFailed { .. }))
        .await;
    assert!(seen.contains(&Seen::SnapshotSaved {
        pid: "ret".into(),
        seq_nr: 2
    }));
    a.send(Stop).await.expect("mailbox");
    h.seen_so_far();
    let b = h.probe_with("ret", 0, configure(snapshots)).await;
    let (applied, last) = b.send(Inspect).await.expect("mailbox");
    assert_eq!(
        (applied, last),
        (["e1", "e2", "e3", "e4", "e5"].map(named).to_vec(), 5)
    );
}

on_every_store!(deleting_up_to_a_rejected_number_is_no_hole_for_recovery);

/// A rejected write leaves a gap (its number used up, nothing stored), which the docs promise
/// is "no hole". Deleting events up to that number, after a snapshot below it and with later
/// events stored, deletes no event the snapshot does not cover: recovery must not fail with
/// `MissingEvents` for a number that never held an event.
async fn deleting_up_to_a_rejected_number_is_no_hole_for_recovery(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let snapshots: Arc<dyn SnapshotStore> = Arc::clone(&h.snapshots);
    let configure = |snapshots: Arc<dyn SnapshotStore>| {
        move |state: PersistenceState<Probe>| {
            state.with_snapshot_store(snapshots, Duration::from_secs(5))
        }
    };
    let a = h
        .probe_with("gap", 0, configure(Arc::clone(&snapshots)))
        .await;
    let one = a.send(Persist(vec![named("e1")]));
    h.control.next_write_for("gap").await.complete();
    assert_eq!(one.await.expect("mailbox").expect("stored"), 1);
    a.send(SaveSnapshot).await.expect("mailbox");
    h.seen_until(|s| matches!(s, Seen::SnapshotSaved { seq_nr: 1, .. }))
        .await;
    // Number 2: rejected before sending (unserializable), used up, never stored.
    let rejected = a
        .send(Persist(vec![Evt::Unserializable("x".into())]))
        .await
        .expect("mailbox");
    assert!(matches!(rejected, Err(PersistError::Rejected(r)) if r.seq_nr == 2));
    let three = a.send(Persist(vec![named("e3")]));
    h.control.next_write_for("gap").await.complete();
    assert_eq!(three.await.expect("mailbox").expect("stored"), 3);
    // Delete up to the rejected number: event 1 (covered by the snapshot) goes, 2 never was.
    a.send(DeleteEventsTo(2)).await.expect("mailbox");
    h.seen_until(|s| matches!(s, Seen::EventsDeleted { .. } | Seen::DeleteFailed { .. }))
        .await;
    a.send(Stop).await.expect("mailbox");
    h.seen_so_far();

    let _b = h.start_probe("gap", 0, configure(snapshots));
    let seen = h
        .seen_until(|s| matches!(s, Seen::Recovered { .. } | Seen::RecoveryFailed { .. }))
        .await;
    assert_eq!(
        seen.last(),
        Some(&Seen::Recovered {
            pid: "gap".into(),
            last_seq_nr: 3,
            replayed: vec![named("e1"), named("e3")],
        }),
        "{seen:?}"
    );
}
