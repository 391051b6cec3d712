//! Failure handling: the circuit breaker, recovery permits and timeout, the backoff
//! supervisor, a panicking serializer, and commands queued behind a slow write (H2, H3 of
//! `conformance/persistent-actor.md` and the failure rules of the recovery issue).
//! Time is paused where a timeout is involved, so nothing here depends on the clock.

mod support;

use std::sync::Arc;
use std::time::Duration;

use actix_persistence::actix::Actor;
use actix_persistence::journal::{
    CheckHealth, CircuitBreakerConfig, JournalActor, JournalConfig, Unhealthy,
};
use actix_persistence::snapshot::{
    SelectedSnapshot, SerializedSnapshot, SnapshotError, SnapshotMetadata,
    SnapshotSelectionCriteria, SnapshotStore,
};
use actix_persistence::{
    Backoff, BackoffSupervisor, JournalError, PersistError, PersistenceState, RecoveryPermits,
};
use actix_persistence_testkit::ControlledJournal;
use async_trait::async_trait;
use support::*;
use tokio::sync::Notify;

/// A snapshot store whose `load` waits until the test opens the gate.
#[derive(Clone, Default)]
struct GatedSnapshots {
    gate: Arc<Notify>,
}

#[async_trait]
impl SnapshotStore for GatedSnapshots {
    async fn load(
        &self,
        _: &str,
        _: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        self.gate.notified().await;
        Ok(None)
    }
    async fn save(&self, _: SnapshotMetadata, _: SerializedSnapshot) -> Result<(), SnapshotError> {
        Ok(())
    }
    async fn delete(&self, _: &SnapshotMetadata) -> Result<(), SnapshotError> {
        Ok(())
    }
    async fn delete_matching(
        &self,
        _: &str,
        _: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError> {
        Ok(())
    }
}

fn harness_with_breaker(max_failures: u32, reset_timeout: Duration) -> Harness {
    let mut h = Harness::new(1);
    let (store, control) = ControlledJournal::new();
    h.journal = JournalActor::start_with(
        Arc::new(store),
        JournalConfig {
            circuit_breaker: CircuitBreakerConfig {
                max_failures,
                reset_timeout,
            },
            ..JournalConfig::default()
        },
    );
    h.control = control;
    h
}

#[actix::test]
async fn the_circuit_breaker_opens_after_repeated_failures_and_closes_after_a_trial() {
    tokio::time::pause();
    let mut h = harness_with_breaker(2, Duration::from_secs(30));
    let failing = [
        h.probe_in_group("cb-0", 0).await,
        h.probe_in_group("cb-1", 0).await,
    ];
    let open = h.probe_in_group("cb-open", 0).await;
    for (i, a) in failing.iter().enumerate() {
        let reply = a.send(Persist(vec![named("x")]));
        h.control
            .next_write_for(&format!("cb-{i}"))
            .await
            .fail(JournalError::JournalStopped);
        assert!(matches!(
            reply.await.expect("mailbox"),
            Err(PersistError::Failed(_))
        ));
    }

    // Open: the write fails at once and never reaches the store.
    let answer = open.send(Persist(vec![named("x")])).await.expect("mailbox");
    assert!(
        matches!(
            answer,
            Err(PersistError::Failed(JournalError::CircuitOpen { .. }))
        ),
        "{answer:?}"
    );
    assert!(!h.control.has_waiting_write());
    h.seen_until(|s| matches!(s, Seen::Stopped { pid } if pid == "cb-open"))
        .await;

    // After the reset timeout one trial call passes (the next recovery); its success closes
    // the breaker for the writes after it.
    tokio::time::advance(Duration::from_secs(31)).await;
    h.seen_so_far();
    let b = h.probe_in_group("cb-trial", 0).await;
    let reply = b.send(Persist(vec![named("t1")]));
    h.control.next_write_for("cb-trial").await.complete();
    assert_eq!(reply.await.expect("mailbox").expect("stored"), 1);
    let reply = b.send(Persist(vec![named("t2")]));
    h.control.next_write_for("cb-trial").await.complete();
    assert_eq!(reply.await.expect("mailbox").expect("stored"), 2);
}

/// A SQL store's group commit answers the writes of many actors with one transaction: when it
/// fails, every writer gets a clone of one error. That is one failure of the store, as
/// Akka.NET's batching journal counts one failed chunk (akkadotnet/akka.net#4951): ten actors
/// in one failed commit must not open a breaker of ten on their own.
#[actix::test]
async fn one_failed_commit_shared_by_many_writers_counts_once_against_the_breaker() {
    tokio::time::pause();
    let mut h = harness_with_breaker(2, Duration::from_secs(30));
    let mut writers = Vec::new();
    for i in 0..5 {
        writers.push(h.probe_in_group(&format!("gc-{i}"), 0).await);
    }
    // Started (recovered) first: a successful recovery is a success of the store, which would
    // clear the count of failures.
    let next = h.probe_in_group("gc-next", 0).await;
    let open = h.probe_in_group("gc-open", 0).await;
    let replies: Vec<_> = writers
        .iter()
        .map(|a| a.send(Persist(vec![named("x")])))
        .collect();
    let mut pending = Vec::new();
    for i in 0..5 {
        pending.push(h.control.next_write_for(&format!("gc-{i}")).await);
    }
    let commit_failed = JournalError::storage("write", std::io::Error::other("commit failed"));
    for write in pending {
        write.fail(commit_failed.clone());
    }
    for reply in replies {
        assert!(matches!(
            reply.await.expect("mailbox"),
            Err(PersistError::Failed(JournalError::Storage { .. }))
        ));
    }

    // One failure of two: the next write still reaches the store.

    let reply = next.send(Persist(vec![named("y")]));
    h.control
        .next_write_for("gc-next")
        .await
        .fail(JournalError::storage(
            "write",
            std::io::Error::other("a failure of its own"),
        ));
    assert!(matches!(
        reply.await.expect("mailbox"),
        Err(PersistError::Failed(JournalError::Storage { .. }))
    ));

    // A second failure with a cause of its own is counted: now the breaker is open.

    let answer = open.send(Persist(vec![named("z")])).await.expect("mailbox");
    assert!(
        matches!(
            answer,
            Err(PersistError::Failed(JournalError::CircuitOpen { .. }))
        ),
        "{answer:?}"
    );
}

#[actix::test]
async fn defer_only_commands_never_count_as_failures_for_the_circuit_breaker() {
    tokio::time::pause();
    let mut h = harness_with_breaker(1, Duration::from_secs(30));
    let a = h.probe_in_group("cb-defer", 0).await;
    for i in 0..50 {
        a.send(Note(i)).await.expect("mailbox").expect("deferred");
    }
    let reply = a.send(Persist(vec![named("e1")]));
    h.control.next_write_for("cb-defer").await.complete();
    assert_eq!(reply.await.expect("mailbox").expect("stored"), 1);
}

async fn a_panicking_serializer_rejects_only_that_write_and_the_actor_goes_on(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let a = h.probe_in_group("h2-panic", 0).await;
    let answer = a
        .send(Persist(vec![Evt::Panicking("boom".into())]))
        .await
        .expect("mailbox");
    match answer {
        Err(PersistError::Rejected(rejection)) => {
            assert!(rejection.reason.contains("panicked"), "{rejection}")
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    let reply = a.send(Persist(vec![named("after")]));
    let write = h.control.next_write_for("h2-panic").await;
    assert_eq!(write.writes()[0].lowest_seq_nr(), 2);
    write.complete();
    reply.await.expect("mailbox").expect("stored");
}

async fn panicking_tags_reject_only_that_write_and_the_actor_goes_on(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let a = h.probe_in_group("h2-tags", 0).await;
    let answer = a
        .send(PersistAll(vec![
            named("ok"),
            Evt::PanickingTags("boom".into()),
        ]))
        .await
        .expect("the actor answers: the panic did not escape its handler");
    match answer {
        Err(PersistError::Rejected(rejection)) => {
            assert!(
                rejection
                    .reason
                    .contains("tags panicked: these tags explode"),
                "{rejection}"
            );
            assert_eq!(rejection.seq_nr, 2, "the event whose tags panicked");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    let reply = a.send(Persist(vec![named("after")]));
    let write = h.control.next_write_for("h2-tags").await;
    assert_eq!(
        write.writes()[0].lowest_seq_nr(),
        3,
        "the rejected write kept 1 and 2"
    );
    write.complete();
    reply.await.expect("mailbox").expect("stored");
}

#[actix::test]
async fn recovery_without_progress_fails_after_the_recovery_timeout() {
    tokio::time::pause();
    let mut h = Harness::new(1);
    let gated: Arc<dyn SnapshotStore> = Arc::new(GatedSnapshots::default());
    let _a = h.start_probe("stuck", 0, |s| {
        s.with_snapshot_store(gated, Duration::from_secs(5))
            .with_recovery_timeout(Duration::from_secs(3))
    });
    match h.next_seen().await {
        Seen::RecoveryFailed { pid, error } => {
            assert_eq!(pid, "stuck");
            assert!(error.contains("no progress within 3000 ms"), "{error}");
        }
        other => panic!("expected a recovery timeout, saw {other:?}"),
    }
    assert_eq!(
        h.next_seen().await,
        Seen::Stopped {
            pid: "stuck".into()
        }
    );
}

/// A snapshot load that does not answer within the snapshot store's call timeout fails the
/// recovery then (`snapshot-store.call-timeout`: "a load that times out fails recovery"),
/// naming the load. It used to wait for the recovery timeout instead (an hour here).
#[actix::test]
async fn a_snapshot_load_fails_recovery_after_the_snapshot_call_timeout() {
    tokio::time::pause();
    let mut h = Harness::new(1);
    let gated: Arc<dyn SnapshotStore> = Arc::new(GatedSnapshots::default());
    let started = tokio::time::Instant::now();
    let _a = h.start_probe("slow-snapshot", 0, |s| {
        s.with_snapshot_store(gated, Duration::from_secs(2))
            .with_recovery_timeout(Duration::from_secs(3600))
    });
    match h.next_seen().await {
        Seen::RecoveryFailed { pid, error } => {
            assert_eq!(pid, "slow-snapshot");
            assert!(
                error.contains("failed at its snapshot")
                    && error.contains("did not answer load within 2000 ms"),
                "{error}"
            );
        }
        other => panic!("expected a failed snapshot load, saw {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(3600));
}

async fn recovery_permits_let_one_actor_recover_at_a_time_in_order(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let permits = RecoveryPermits::new(1);
    let gated = GatedSnapshots::default();
    let gate = Arc::clone(&gated.gate);
    let store: Arc<dyn SnapshotStore> = Arc::new(gated);
    let (p1, s1) = (permits.clone(), Arc::clone(&store));
    let _first = h.start_probe("permit-1", 0, move |s| {
        s.with_recovery_permits(p1)
            .with_snapshot_store(s1, Duration::from_secs(30))
    });
    let p2 = permits.clone();
    let _second = h.start_probe("permit-2", 0, move |s| s.with_recovery_permits(p2));
    settle().await;
    assert_eq!(permits.available(), 0);
    assert_eq!(
        h.seen_so_far(),
        vec![],
        "the second recovery waits for the permit"
    );

    gate.notify_one();
    let order: Vec<_> = h
        .next_seen_n(2)
        .await
        .into_iter()
        .map(|s| match s {
            Seen::Recovered { pid, .. } => pid,
            other => panic!("expected recoveries, saw {other:?}"),
        })
        .collect();
    assert_eq!(order, vec!["permit-1", "permit-2"]);
    settle().await;
    assert_eq!(
        permits.available(),
        1,
        "permits are released after recovery"
    );
}

async fn five_thousand_commands_queued_behind_a_slow_write_are_handled_in_order(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let a = h.probe_in_group("queued", 0).await;
    a.do_send(Persist(vec![named("slow")]));
    let slow = h.control.next_write_for("queued").await;
    for n in 0..5_000 {
        a.do_send(Note(n));
    }
    settle().await;
    assert_eq!(h.seen_so_far(), vec![command("queued", 0)]);

    slow.complete();
    assert_eq!(h.next_seen().await, handler("queued", "slow", 1));
    let noted: Vec<u64> = h
        .next_seen_n(5_000)
        .await
        .into_iter()
        .map(|s| match s {
            Seen::Noted { n, .. } => n,
            other => panic!("expected notes, saw {other:?}"),
        })
        .collect();
    assert_eq!(noted, (0..5_000).collect::<Vec<_>>());
}

async fn the_backoff_supervisor_restarts_a_failed_actor_which_recovers_and_continues(
    backend: Backend,
) {
    let mut h = Harness::on(backend, 1).await;
    let supervisor = supervised(&mut h, "supervised", Duration::from_millis(1)).await;

    let first = supervisor.send(Persist(vec![named("e1")]));
    h.control.next_write_for("supervised").await.complete();
    assert_eq!(first.await.expect("mailbox").expect("stored"), 1);

    let failing = supervisor.send(Persist(vec![named("e2")]));
    h.control
        .next_write_for("supervised")
        .await
        .fail(JournalError::JournalStopped);
    assert!(matches!(
        failing.await.expect("mailbox"),
        Err(PersistError::Failed(_))
    ));

    // Sent while the child is down or restarting: kept, then handled by the new incarnation.
    let after = supervisor.send(Persist(vec![named("e3")]));
    let seen = h.seen_until(|s| matches!(s, Seen::Recovered { .. })).await;
    let n = seen.len();
    assert!(n >= 3, "{seen:?}");
    assert_eq!(
        seen[n - 3],
        Seen::Failed {
            pid: "supervised".into()
        }
    );
    assert_eq!(
        seen[n - 2],
        Seen::Stopped {
            pid: "supervised".into()
        }
    );
    assert_eq!(
        seen[n - 1],
        Seen::Recovered {
            pid: "supervised".into(),
            last_seq_nr: 1,
            replayed: vec![named("e1")],
        }
    );
    let write = h.control.next_write_for("supervised").await;
    assert_eq!(
        write.writes()[0].lowest_seq_nr(),
        2,
        "recovered from the store"
    );
    write.complete();
    assert_eq!(after.await.expect("mailbox").expect("stored"), 2);
}

/// Restarts after `delay` every time (no growth, no random share).
fn fixed_backoff(delay: Duration) -> Backoff {
    Backoff {
        min: delay,
        max: delay,
        random_factor: 0.0,
        reset_after: Duration::from_secs(600),
    }
}

/// A backoff supervisor over probes of `pid` restarting after `delay`, once its first child
/// recovered empty.
async fn supervised(
    h: &mut Harness,
    pid: &'static str,
    delay: Duration,
) -> actix::Addr<BackoffSupervisor<Probe>> {
    let journal = h.journal.clone();
    let log = h.log_tx.clone();
    let backoff = fixed_backoff(delay);
    let supervisor = BackoffSupervisor::new(backoff, move || Probe {
        persistence: PersistenceState::new(journal.clone(), pid).expect("valid id"),
        applied: Vec::new(),
        log: log.clone(),
    })
    .start();
    assert!(matches!(
        h.next_seen().await,
        Seen::Recovered { last_seq_nr: 0, .. }
    ));
    supervisor
}

#[actix::test]
async fn a_panicking_factory_is_a_failed_start_retried_after_the_backoff() {
    let mut h = Harness::new(1);
    let journal = h.journal.clone();
    let log = h.log_tx.clone();
    let backoff = fixed_backoff(Duration::from_millis(1));
    // The factory panics on its first two calls (a configuration read that fails at first).
    let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let supervisor = BackoffSupervisor::new(backoff, move || {
        let call = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        assert!(call >= 2, "the factory's bug, call {call}");
        Probe {
            persistence: PersistenceState::new(journal.clone(), "factory").expect("valid id"),
            applied: Vec::new(),
            log: log.clone(),
        }
    })
    .start();
    // Sent while no child could be made yet: kept, then handled by the third one.
    let first = supervisor.send(Persist(vec![named("e1")]));
    assert!(matches!(
        h.next_seen().await,
        Seen::Recovered { last_seq_nr: 0, .. }
    ));
    h.control.next_write_for("factory").await.complete();
    assert_eq!(
        first.await.expect("the supervisor lives").expect("stored"),
        1
    );
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[actix::test]
async fn a_stop_watch_set_in_the_factory_is_told_beside_the_supervisor() {
    let mut h = Harness::new(1);
    let journal = h.journal.clone();
    let log = h.log_tx.clone();
    let backoff = fixed_backoff(Duration::from_millis(1));
    let (watches, mut watched) = tokio::sync::mpsc::unbounded_channel();
    let supervisor = BackoffSupervisor::new(backoff, move || {
        let mut persistence = PersistenceState::new(journal.clone(), "watched").expect("valid id");
        // The application's own watch of each incarnation.
        let _ = watches.send(persistence.watch_stop());
        Probe {
            persistence,
            applied: Vec::new(),
            log: log.clone(),
        }
    })
    .start();
    assert!(matches!(h.next_seen().await, Seen::Recovered { .. }));
    let failing = supervisor.send(Persist(vec![named("e1")]));
    h.control
        .next_write_for("watched")
        .await
        .fail(JournalError::JournalStopped);
    assert!(matches!(
        failing.await.expect("mailbox"),
        Err(PersistError::Failed(_))
    ));
    let first = watched.recv().await.expect("the first incarnation's watch");
    assert!(
        matches!(
            first.await,
            Ok(actix_persistence::StopReason::PersistFailure)
        ),
        "the application's watch is told why, not dropped"
    );
    // And the supervisor was told too: it started the next incarnation.
    assert!(matches!(
        h.seen_until(|s| matches!(s, Seen::Recovered { .. }))
            .await
            .pop(),
        Some(Seen::Recovered { .. })
    ));
    assert!(watched.recv().await.is_some(), "a second incarnation");
}

#[test]
fn backoff_doubles_from_min_up_to_max_plus_the_random_share() {
    let backoff = Backoff {
        min: Duration::from_millis(100),
        max: Duration::from_secs(1),
        random_factor: 0.5,
        reset_after: Duration::from_secs(60),
    };
    assert_eq!(backoff.delay(0, 0.0), Duration::from_millis(100));
    assert_eq!(backoff.delay(1, 0.0), Duration::from_millis(200));
    assert_eq!(backoff.delay(3, 0.0), Duration::from_millis(800));
    assert_eq!(backoff.delay(4, 0.0), Duration::from_secs(1));
    assert_eq!(backoff.delay(40, 0.0), Duration::from_secs(1));
    assert_eq!(backoff.delay(1, 1.0), Duration::from_millis(300));
}

#[actix::test]
async fn an_unreachable_store_fails_the_write_within_the_call_timeout_and_a_restart_recovers() {
    tokio::time::pause();
    let mut h = Harness::new(1);
    let inner = actix_persistence::InMemoryJournal::new();
    let (faulty, faults) = actix_persistence_testkit::FaultyJournal::new(inner.clone());
    h.journal = JournalActor::start_with(
        Arc::new(faulty),
        JournalConfig {
            call_timeout: Duration::from_secs(10),
            ..JournalConfig::default()
        },
    );
    let supervisor = supervised(&mut h, "h1", Duration::from_secs(1)).await;
    let stored = supervisor.send(Persist(vec![named("e0")]));
    assert_eq!(stored.await.expect("mailbox").expect("stored"), 1);

    // The database stops answering; e1 and two more commands arrive.
    faults.never_answer();
    let started = tokio::time::Instant::now();
    let e1 = supervisor.send(Persist(vec![named("e1")]));
    let c2 = supervisor.send(Persist(vec![named("c2")]));
    let c3 = supervisor.send(Persist(vec![named("c3")]));
    match e1.await.expect("mailbox") {
        Err(PersistError::Failed(JournalError::Timeout { timeout, .. })) => {
            assert_eq!(timeout, Duration::from_secs(10))
        }
        other => panic!("expected a timeout failure, got {other:?}"),
    }
    assert!(
        started.elapsed() <= Duration::from_secs(11),
        "within the call timeout"
    );
    for queued in [c2, c3] {
        assert!(matches!(
            queued.await.expect("mailbox"),
            Err(PersistError::ActorStopped)
        ));
    }
    let before_restart = h.seen_until(|s| matches!(s, Seen::Stopped { .. })).await;
    assert!(
        !before_restart
            .iter()
            .any(|s| matches!(s, Seen::Command { applied, .. } if *applied > 1)),
        "no command was handled as if e1 were stored: {before_restart:?}"
    );

    // The database is back; the new incarnation recovers what is really stored.
    faults.answer_again();
    let recovered = h.seen_until(|s| matches!(s, Seen::Recovered { .. })).await;
    assert_eq!(
        recovered.last(),
        Some(&Seen::Recovered {
            pid: "h1".into(),
            last_seq_nr: 1,
            replayed: vec![named("e0")],
        })
    );
    let next = supervisor.send(Persist(vec![named("e2")]));
    assert_eq!(next.await.expect("mailbox").expect("stored"), 2);
    let seqs: Vec<u64> = futures::StreamExt::collect::<Vec<_>>(
        actix_persistence::JournalStore::replay_messages(&inner, "h1", 1, u64::MAX, u64::MAX),
    )
    .await
    .into_iter()
    .map(|e| e.expect("replay").seq_nr)
    .collect();
    assert_eq!(seqs, vec![1, 2]);
}

on_every_backend!(
    a_panicking_serializer_rejects_only_that_write_and_the_actor_goes_on,
    panicking_tags_reject_only_that_write_and_the_actor_goes_on,
    recovery_permits_let_one_actor_recover_at_a_time_in_order,
    five_thousand_commands_queued_behind_a_slow_write_are_handled_in_order,
    the_backoff_supervisor_restarts_a_failed_actor_which_recovers_and_continues,
);

/// A store whose replay delivers each event after a delay, and whose delete panics.
#[derive(Clone)]
struct SlowReplayPanickyDelete {
    inner: actix_persistence::InMemoryJournal,
    per_event: Duration,
}

#[async_trait]
impl actix_persistence::JournalStore for SlowReplayPanickyDelete {
    async fn write_messages(
        &self,
        writes: Vec<actix_persistence::AtomicWrite>,
    ) -> Result<Vec<actix_persistence::store::AtomicWriteResult>, JournalError> {
        self.inner.write_messages(writes).await
    }

    fn replay_messages(
        &self,
        pid: &str,
        from: u64,
        to: u64,
        max: u64,
    ) -> actix_persistence::store::ReplayStream {
        use futures::StreamExt;
        let delay = self.per_event;
        self.inner
            .replay_messages(pid, from, to, max)
            .then(move |e| async move {
                tokio::time::sleep(delay).await;
                e
            })
            .boxed()
    }

    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        self.inner.read_highest_sequence_nr(pid, from).await
    }

    async fn delete_messages_to(
        &self,
        _: &str,
        _: u64,
        _: actix_persistence::FencingToken,
    ) -> Result<(), JournalError> {
        panic!("a bug in the store's delete")
    }
}

#[actix::test]
async fn a_replay_that_keeps_making_progress_is_not_timed_out() {
    tokio::time::pause();
    let mut h = Harness::new(1);
    let inner = actix_persistence::InMemoryJournal::new();
    let store = SlowReplayPanickyDelete {
        inner: inner.clone(),
        per_event: Duration::from_millis(400),
    };
    h.journal = JournalActor::start_with(Arc::new(store), JournalConfig::default());
    let writer = h.probe_in_group("steady", 0).await;
    for i in 1..=5 {
        writer
            .send(Persist(vec![named(&format!("e{i}"))]))
            .await
            .expect("mailbox")
            .expect("stored");
    }
    writer.send(Stop).await.expect("mailbox");
    h.seen_so_far();
    // 5 events 400 ms apart never stall for 1 s: recovery goes on.
    let _reader = h.start_probe("steady", 0, |s| {
        s.with_recovery_timeout(Duration::from_secs(1))
    });
    match h
        .seen_until(|s| matches!(s, Seen::Recovered { .. } | Seen::RecoveryFailed { .. }))
        .await
        .pop()
    {
        Some(Seen::Recovered { last_seq_nr, .. }) => assert_eq!(last_seq_nr, 5),
        other => panic!("a steady replay must not time out: {other:?}"),
    }
}

#[actix::test]
async fn a_panicking_trial_call_does_not_leave_the_circuit_breaker_shut() {
    tokio::time::pause();
    let mut h = Harness::new(1);
    let store = SlowReplayPanickyDelete {
        inner: actix_persistence::InMemoryJournal::new(),
        per_event: Duration::ZERO,
    };
    h.journal = JournalActor::start_with(
        Arc::new(store),
        JournalConfig {
            circuit_breaker: CircuitBreakerConfig {
                max_failures: 1,
                reset_timeout: Duration::from_secs(1),
            },
            ..JournalConfig::default()
        },
    );
    let delete = |pid: &str| actix_persistence::journal::DeleteMessagesTo {
        persistence_id: pid.to_owned(),
        to_seq_nr: 1,
        fencing_token: actix_persistence::FencingToken::UNOWNED,
    };
    // The panic is a failure: the breaker opens.
    let first = h.journal.send(delete("x")).await.expect("mailbox");
    assert!(
        matches!(first, Err(JournalError::Storage { .. })),
        "{first:?}"
    );
    // After the reset timeout the trial call panics too: recorded, the breaker opens again.
    tokio::time::advance(Duration::from_secs(2)).await;
    let trial = h.journal.send(delete("x")).await.expect("mailbox");
    assert!(
        matches!(trial, Err(JournalError::Storage { .. })),
        "{trial:?}"
    );
    // And after the next reset timeout a healthy call passes and closes it.
    tokio::time::advance(Duration::from_secs(2)).await;
    let highest = h
        .journal
        .send(actix_persistence::journal::ReadHighestSequenceNr {
            persistence_id: "x".into(),
            from_seq_nr: 0,
        })
        .await
        .expect("mailbox");
    assert_eq!(highest.expect("the breaker let the call through"), 0);
}

#[test]
fn backoff_delay_never_panics_on_nan_or_huge_durations() {
    let nan = Backoff {
        random_factor: f64::NAN,
        ..Backoff::default()
    };
    assert_eq!(nan.delay(0, 0.5), Backoff::default().min);
    let huge = Backoff {
        min: Duration::MAX,
        max: Duration::MAX,
        random_factor: 1.0,
        reset_after: Duration::from_secs(60),
    };
    assert_eq!(huge.delay(3, 1.0), Duration::MAX);
}

#[actix::test]
async fn a_replay_that_stalls_fails_recovery_after_the_timeout() {
    tokio::time::pause();
    let mut h = Harness::new(1);
    let inner = actix_persistence::InMemoryJournal::new();
    let store = SlowReplayPanickyDelete {
        inner: inner.clone(),
        per_event: Duration::from_secs(10),
    };
    h.journal = JournalActor::start_with(Arc::new(store), JournalConfig::default());
    let writer = h.probe_in_group("stalled", 0).await;
    writer
        .send(Persist(vec![named("e1")]))
        .await
        .expect("mailbox")
        .expect("stored");
    writer.send(Stop).await.expect("mailbox");
    h.seen_so_far();
    // The first event takes 10 s to arrive: no progress for the 1 s timeout.
    let _reader = h.start_probe("stalled", 0, |s| {
        s.with_recovery_timeout(Duration::from_secs(1))
    });
    match h
        .seen_until(|s| matches!(s, Seen::Recovered { .. } | Seen::RecoveryFailed { .. }))
        .await
        .pop()
    {
        Some(Seen::RecoveryFailed { error, .. }) => {
            assert!(error.contains("no progress within 1000 ms"), "{error}")
        }
        other => panic!("a stalled replay must time out: {other:?}"),
    }
}

/// After the reset timeout, with no traffic (a readiness probe that answered "not ready"
/// kept it away), the health check's own read is the breaker's trial: the store answers, the
/// breaker closes, the journal is ready and writes go through. Before, the check answered
/// `CircuitOpen { retry_in: 0 }` for as long as no other call came: forever, behind a probe.
#[actix::test]
async fn after_the_reset_timeout_the_health_check_is_the_trial_that_closes_the_breaker() {
    tokio::time::pause();
    let mut h = harness_with_breaker(1, Duration::from_secs(30));
    let failing = h.probe_in_group("hc-1", 0).await;
    let reply = failing.send(Persist(vec![named("x")]));
    h.control
        .next_write_for("hc-1")
        .await
        .fail(JournalError::JournalStopped);
    assert!(reply.await.expect("mailbox").is_err());
    assert!(matches!(
        h.journal.send(CheckHealth).await.expect("mailbox"),
        Err(Unhealthy::CircuitOpen { .. })
    ));
    tokio::time::advance(Duration::from_secs(31)).await;
    let checked = h.journal.send(CheckHealth).await.expect("mailbox");
    assert!(
        checked.is_ok(),
        "the check's read closed the breaker: {checked:?}"
    );
    assert!(
        !h.control.has_waiting_write(),
        "the health check writes nothing"
    );
    // Closed: a call through the breaker passes, and the journal stays ready.
    let highest = h
        .journal
        .send(actix_persistence::journal::ReadHighestSequenceNr {
            persistence_id: "hc-1".into(),
            from_seq_nr: 0,
        })
        .await
        .expect("mailbox");
    assert_eq!(highest.expect("the breaker is closed"), 0);
    assert!(h.journal.send(CheckHealth).await.expect("mailbox").is_ok());
}

#[actix::test]
async fn the_health_check_reports_an_open_breaker_and_a_closed_one_as_ready() {
    tokio::time::pause();
    let mut h = harness_with_breaker(1, Duration::from_secs(30));
    assert!(
        h.journal.send(CheckHealth).await.expect("mailbox").is_ok(),
        "a fresh journal is ready"
    );
    let failing = h.probe_in_group("hc-0", 0).await;
    let reply = failing.send(Persist(vec![named("x")]));
    h.control
        .next_write_for("hc-0")
        .await
        .fail(JournalError::JournalStopped);
    assert!(reply.await.expect("mailbox").is_err());

    match h.journal.send(CheckHealth).await.expect("mailbox") {
        Err(Unhealthy::CircuitOpen { retry_in }) => {
            assert_eq!(retry_in, Duration::from_secs(30))
        }
        other => panic!("expected an open breaker, got {other:?}"),
    }
    assert!(
        !h.control.has_waiting_write(),
        "the health check writes nothing"
    );
}
