//! User code that panics while the library runs it (during recovery, in `apply` of a stored
//! event, in a continuation) is a failure with the panic message as its reason: never a dead
//! task whose stop reads as normal.

mod support;

use std::sync::Arc;
use std::time::Duration;

use actix_persistence::actix::{Actor, Addr};
use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence::snapshot::{
    InMemorySnapshotStore, SerializedSnapshot, SnapshotMetadata, SnapshotStore,
};
use actix_persistence::{
    ActorFailure, AtomicWrite, Backoff, BackoffSupervisor, CommandError, InMemoryJournal,
    JournalStore, PersistError, PersistenceState, PersistentActor, PersistentRepr, RecoveryError,
    StopReason,
};
use support::ledger::*;
use tokio::sync::{mpsc, oneshot};

fn repr(pid: &str, seq_nr: u64, entry: &Entry) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload: serde_json::to_vec(entry).expect("json"),
        serializer_id: actix_persistence::serialization::JSON_SERIALIZER_ID,
        manifest: String::new(),
        writer_uuid: "test-writer".into(),
        timestamp: 1,
        tags: Default::default(),
    }
}

async fn seed(journal: &InMemoryJournal, pid: &str, entries: &[Entry]) {
    let writes = entries
        .iter()
        .enumerate()
        .map(|(i, e)| AtomicWrite::new(vec![repr(pid, i as u64 + 1, e)]).expect("shape"))
        .collect();
    let results = journal.write_messages(writes).await.expect("stored");
    assert!(results.iter().all(Result::is_ok));
}

struct Started {
    addr: Addr<Ledger>,
    stopped: oneshot::Receiver<StopReason>,
}

fn start(
    journal: &InMemoryJournal,
    pid: &str,
    script: &Arc<Script>,
    snapshots: Option<Arc<dyn SnapshotStore>>,
) -> Started {
    let journal = JournalActor::start_with(Arc::new(journal.clone()), JournalConfig::default());
    let mut state = PersistenceState::new(journal, pid).expect("valid id");
    if let Some(store) = snapshots {
        state = state.with_snapshot_store(store, Duration::from_secs(5));
    }
    let stopped = state.watch_stop();
    let addr = Ledger::new(state, Arc::clone(script)).start();
    Started { addr, stopped }
}

fn only_panic(failures: &[RecoveryError]) -> (&'static str, String) {
    match failures {
        [RecoveryError::Panicked { hook, reason, .. }] => (hook, reason.clone()),
        other => panic!("expected one RecoveryError::Panicked, got {other:?}"),
    }
}

#[actix::test]
async fn a_panic_in_apply_during_replay_fails_recovery_with_the_panic_message() {
    let journal = InMemoryJournal::new();
    seed(
        &journal,
        "p-apply",
        &[Entry::Add(1), Entry::Boom, Entry::Add(3)],
    )
    .await;
    let script = Arc::new(Script::default());
    let started = start(&journal, "p-apply", &script, None);
    assert_eq!(
        started.stopped.await.expect("stop reason"),
        StopReason::RecoveryFailure
    );
    assert_eq!(
        only_panic(&script.recovery_failures()),
        ("apply", "boom at 2".to_owned())
    );
    assert!(script.recovered.lock().expect("lock").is_empty());
    assert_eq!(
        script.seq_nrs_in_apply(),
        vec![1, 2],
        "nothing applied after the panic"
    );
}

#[actix::test]
async fn a_panic_in_the_event_deserializer_during_replay_fails_recovery_with_its_message() {
    let journal = InMemoryJournal::new();
    seed(
        &journal,
        "p-deserialize",
        &[Entry::Add(1), Entry::Add(2), Entry::Add(3)],
    )
    .await;
    let script = Arc::new(Script {
        panic_in_deserialize_at: 2,
        ..Script::default()
    });
    let started = start(&journal, "p-deserialize", &script, None);
    assert_eq!(
        started.stopped.await.expect("stop reason"),
        StopReason::RecoveryFailure
    );
    assert_eq!(
        only_panic(&script.recovery_failures()),
        ("deserialize_event", "deserializer exploded at 2".to_owned())
    );
    assert_eq!(
        script.seq_nrs_in_apply(),
        vec![1],
        "nothing applied from 2 on"
    );
    assert!(script.recovered.lock().expect("lock").is_empty());
}

#[actix::test]
async fn a_panic_in_restore_snapshot_fails_recovery_with_the_panic_message() {
    let journal = InMemoryJournal::new();
    seed(&journal, "p-restore", &[Entry::Add(1), Entry::Add(2)]).await;
    let snapshots: Arc<dyn SnapshotStore> = Arc::new(InMemorySnapshotStore::new());
    let metadata = SnapshotMetadata {
        persistence_id: "p-restore".into(),
        seq_nr: 1,
        timestamp: 1,
    };
    snapshots
        .save(metadata, SerializedSnapshot::json(&1i64).expect("json"))
        .await
        .expect("saved");
    let script = Arc::new(Script {
        panic_in_restore: true,
        ..Script::default()
    });
    let started = start(&journal, "p-restore", &script, Some(snapshots));
    assert_eq!(
        started.stopped.await.expect("stop reason"),
        StopReason::RecoveryFailure
    );
    assert_eq!(
        only_panic(&script.recovery_failures()),
        ("Snapshotting::restore", "restore exploded".to_owned())
    );
    assert!(script.seq_nrs_in_apply().is_empty());
}

#[actix::test]
async fn a_panic_in_on_recovery_completed_fails_recovery_with_the_panic_message() {
    let journal = InMemoryJournal::new();
    seed(&journal, "p-completed", &[Entry::Add(1)]).await;
    let script = Arc::new(Script {
        panic_in_recovery_completed: true,
        ..Script::default()
    });
    let started = start(&journal, "p-completed", &script, None);
    let reply = started.addr.send(Record(vec![Entry::Add(5)]));
    assert_eq!(
        started.stopped.await.expect("stop reason"),
        StopReason::RecoveryFailure
    );
    assert_eq!(
        only_panic(&script.recovery_failures()),
        ("on_recovery_completed", "completion exploded".to_owned())
    );
    assert!(
        reply.await.is_err(),
        "no command is handled after the failure"
    );
    assert_eq!(
        journal
            .read_highest_sequence_nr("p-completed", 0)
            .await
            .ok(),
        Some(1)
    );
}

#[actix::test]
async fn a_panic_in_apply_after_a_write_stops_the_actor_and_reports_what_was_stored() {
    let journal = InMemoryJournal::new();
    let script = Arc::new(Script::default());
    let started = start(&journal, "p-live", &script, None);
    let boom = started.addr.send(Record(vec![Entry::Boom]));
    match boom.await.expect("mailbox") {
        Err(PersistError::Panicked { reason }) => assert_eq!(reason, "boom at 1"),
        other => panic!("expected PersistError::Panicked, got {other:?}"),
    }
    assert_eq!(
        started.stopped.await.expect("stop reason"),
        StopReason::Panicked {
            reason: "boom at 1".into()
        }
    );
    assert_eq!(
        journal.read_highest_sequence_nr("p-live", 0).await.ok(),
        Some(1)
    );
}

#[actix::test]
async fn a_stored_write_after_a_panicking_one_in_the_same_batch_is_reported_stored() {
    let journal = InMemoryJournal::new();
    let script = Arc::new(Script::default());
    let started = start(&journal, "p-batch", &script, None);
    // One command, two atomic writes in one batch: Boom (its apply panics), then Add(5).
    let last = started
        .addr
        .send(Record(vec![Entry::Boom, Entry::Add(5)]))
        .await
        .expect("mailbox");
    assert!(
        matches!(last, Err(PersistError::StoppedAfterStore)),
        "the second write was stored: never ActorStopped for it, got {last:?}"
    );
    assert!(matches!(
        started.stopped.await.expect("stop reason"),
        StopReason::Panicked { .. }
    ));
    assert_eq!(
        journal.read_highest_sequence_nr("p-batch", 0).await.ok(),
        Some(2)
    );
}

#[actix::test]
async fn a_panicking_continuation_is_reported_and_stops_the_actor() {
    let journal = InMemoryJournal::new();
    let script = Arc::new(Script::default());
    let started = start(&journal, "p-then", &script, None);
    let answer = started
        .addr
        .send(RecordThenPanic(Entry::Add(2)))
        .await
        .expect("mailbox");
    match answer {
        Err(PersistError::Panicked { reason }) => assert_eq!(reason, "continuation exploded"),
        other => panic!("expected PersistError::Panicked, got {other:?}"),
    }
    assert_eq!(
        started.stopped.await.expect("stop reason"),
        StopReason::Panicked {
            reason: "continuation exploded".into()
        }
    );
    assert_eq!(
        script.seq_nrs_in_apply(),
        vec![1],
        "the event was applied first"
    );
}

/// A `BackoffSupervisor` (1 ms backoff, no jitter) of ledgers `pid` on `journal`, and the
/// numbers of the incarnations it builds (1, 2, ...) as they are built.
fn supervise(
    journal: &InMemoryJournal,
    pid: &'static str,
    script: &Arc<Script>,
) -> (
    actix::Addr<BackoffSupervisor<Ledger>>,
    mpsc::UnboundedReceiver<usize>,
) {
    let journal_actor =
        JournalActor::start_with(Arc::new(journal.clone()), JournalConfig::default());
    let (incarnations, started) = mpsc::unbounded_channel();
    let factory = {
        let script = Arc::clone(script);
        let mut built = 0;
        move || {
            built += 1;
            let _ = incarnations.send(built);
            let state = PersistenceState::new(journal_actor.clone(), pid).expect("valid id");
            Ledger::new(state, Arc::clone(&script))
        }
    };
    let backoff = Backoff {
        min: Duration::from_millis(1),
        max: Duration::from_millis(1),
        random_factor: 0.0,
        reset_after: Duration::from_secs(60),
    };
    (BackoffSupervisor::new(backoff, factory).start(), started)
}

#[actix::test]
async fn backoff_supervisor_restarts_after_a_panic_during_recovery() {
    let journal = InMemoryJournal::new();
    seed(&journal, "p-supervised", &[Entry::Boom]).await;
    let script = Arc::new(Script::default());
    let (_supervisor, mut started) = supervise(&journal, "p-supervised", &script);
    for expected in 1..=3 {
        let n = tokio::time::timeout(Duration::from_secs(10), started.recv())
            .await
            .expect("the supervisor starts a new incarnation after each failed recovery");
        assert_eq!(n, Some(expected));
    }
    let failures = script.recovery_failures();
    assert!(failures.len() >= 2, "{failures:?}");
    assert!(failures
        .iter()
        .all(|f| matches!(f, RecoveryError::Panicked { hook: "apply", .. })));
}

#[actix::test]
async fn a_panic_in_a_snapshot_hook_stops_the_actor_with_the_panic_as_reason() {
    let journal = InMemoryJournal::new();
    let script = Arc::new(Script {
        panic_in_snapshot_saved: true,
        ..Script::default()
    });
    let snapshots: Arc<dyn SnapshotStore> = Arc::new(InMemorySnapshotStore::new());
    let started = start(&journal, "p-snapshot", &script, Some(snapshots));
    started
        .addr
        .send(Record(vec![Entry::Add(1)]))
        .await
        .expect("mailbox")
        .expect("stored");
    started.addr.send(Snap).await.expect("mailbox");
    assert_eq!(
        started.stopped.await.expect("stop reason"),
        StopReason::Panicked {
            reason: "snapshot hook exploded".into()
        }
    );
}

#[actix::test]
async fn a_panic_in_a_command_handler_is_a_failure_never_a_normal_stop() {
    let journal = InMemoryJournal::new();
    let script = Arc::new(Script::default());
    let journal_actor =
        JournalActor::start_with(Arc::new(journal.clone()), JournalConfig::default());
    let mut state = PersistenceState::new(journal_actor, "p-handler").expect("valid id");
    let stopped = state.watch_stop();
    let ledger = Ledger::new(state, Arc::clone(&script)).start_persistent();
    assert_eq!(
        ledger
            .ask(Record(vec![Entry::Add(2)]))
            .await
            .expect("stored"),
        2
    );

    assert!(ledger.send(PanicInHandler).await.is_err(), "no answer");
    match stopped.await.expect("stop reason") {
        StopReason::Panicked { reason } => {
            assert!(reason.contains("command handler"), "{reason}")
        }
        other => panic!("expected StopReason::Panicked, got {other:?}"),
    }
    match ledger.ask(Record(vec![Entry::Add(1)])).await {
        Err(CommandError::ActorStopped {
            cause: Some(ActorFailure::Panicked { .. }),
            ..
        }) => {}
        other => panic!("expected ActorStopped with the panic as cause, got {other:?}"),
    }
}

#[actix::test]
async fn backoff_supervisor_restarts_after_a_panic_in_a_command_handler() {
    let journal = InMemoryJournal::new();
    let script = Arc::new(Script::default());
    let (supervisor, mut started) = supervise(&journal, "p-handler-sup", &script);
    let first = tokio::time::timeout(Duration::from_secs(10), started.recv()).await;
    assert_eq!(first.expect("first incarnation"), Some(1));
    let total = supervisor.send(Record(vec![Entry::Add(5)])).await;
    assert_eq!(total.expect("mailbox").expect("stored"), 5);

    let _ = supervisor.send(PanicInHandler).await;
    let second = tokio::time::timeout(Duration::from_secs(10), started.recv())
        .await
        .expect("the supervisor restarts the child whose handler panicked");
    assert_eq!(second, Some(2));
    let total = supervisor.send(Record(vec![Entry::Add(1)])).await;
    assert_eq!(
        total
            .expect("the supervisor is still running")
            .expect("stored"),
        6,
        "the new incarnation recovered the stored event"
    );
}
