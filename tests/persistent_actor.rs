//! Persist, persist_all, defer, rejection and failure of a persistent actor (A1, A2, H2, H3 of
//! `conformance/persistent-actor.md`, as far as the foundation goes).

mod support;

use actix_persistence::actix::Actor;
use actix_persistence::{JournalError, JournalStore, PersistError, PersistentRepr, MAX_SEQ_NR};
use actix_persistence_testkit::Outcome;
use futures::StreamExt;
use support::*;

async fn stored(h: &Harness, pid: &str) -> Vec<PersistentRepr> {
    h.control
        .stored()
        .replay_messages(pid, 1, MAX_SEQ_NR, u64::MAX)
        .map(|e| e.expect("in-memory replay"))
        .collect()
        .await
}

fn payloads(events: &[PersistentRepr]) -> Vec<(u64, String)> {
    events
        .iter()
        .map(|e| (e.seq_nr, String::from_utf8_lossy(&e.payload).into_owned()))
        .collect()
}

async fn persist_all_is_one_atomic_write_with_one_completion_at_every_size(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let a = h.probe_in_group("a1-sizes", 0).await;
    let mut next_seq = 1;
    for k in [1usize, 2, 3, 10] {
        let events: Vec<_> = (0..k).map(|i| named(&format!("k{k}-{i}"))).collect();
        let reply = a.send(PersistAll(events.clone()));
        let write = h.control.next_write_for("a1-sizes").await;
        assert_eq!(
            write.writes().len(),
            1,
            "one atomic write for persist_all of {k}"
        );
        assert_eq!(write.writes()[0].events.len(), k);
        assert_eq!(write.writes()[0].lowest_seq_nr(), next_seq);
        write.complete();
        let last = reply.await.expect("mailbox").expect("stored");
        assert_eq!(
            last,
            next_seq + k as u64 - 1,
            "one completion, after the last event"
        );
        h.next_seen().await; // the command
        let handlers = h.next_seen_n(k).await;
        let expected: Vec<_> = (0..k)
            .map(|i| handler("a1-sizes", &format!("k{k}-{i}"), next_seq + i as u64))
            .collect();
        assert_eq!(handlers, expected);
        next_seq += k as u64;
    }
    assert_eq!(stored(&h, "a1-sizes").await.len(), 16);
}

async fn persist_then_persist_all_in_one_command_is_one_batch_with_consecutive_seq(
    backend: Backend,
) {
    let mut h = Harness::on(backend, 1).await;
    let a = h.probe_in_group("a1-mixed", 0).await;
    let reply = a.send(PersistThenAll(named("x"), vec![named("y"), named("z")]));
    let write = h.control.next_write_for("a1-mixed").await;
    assert_eq!(
        write.writes().len(),
        2,
        "one batch: persist(x) and persist_all([y, z])"
    );
    let shapes: Vec<_> = write
        .writes()
        .iter()
        .map(|w| (w.lowest_seq_nr(), w.events.len()))
        .collect();
    assert_eq!(shapes, vec![(1, 1), (2, 2)]);
    write.complete();
    assert_eq!(
        reply.await.expect("mailbox").expect("stored"),
        3,
        "one completion, last"
    );
    assert!(
        !h.control.has_waiting_write(),
        "exactly one batch for one command"
    );
    assert_eq!(
        h.next_seen_n(4).await,
        vec![
            command("a1-mixed", 0),
            handler("a1-mixed", "x", 1),
            handler("a1-mixed", "y", 2),
            handler("a1-mixed", "z", 3),
        ]
    );
    assert_eq!(
        payloads(&stored(&h, "a1-mixed").await),
        vec![
            (1, r#"{"Named":"x"}"#.to_owned()),
            (2, r#"{"Named":"y"}"#.to_owned()),
            (3, r#"{"Named":"z"}"#.to_owned()),
        ]
    );
}

async fn a_store_returning_the_wrong_number_of_results_fails_the_batch_explicitly(
    backend: Backend,
) {
    let mut h = Harness::on(backend, 1).await;
    let a = h.probe_in_group("a1-count", 0).await;
    let reply = a.send(Persist(vec![named("x"), named("y")]));
    let write = h.control.next_write_for("a1-count").await;
    write.reply_raw(Ok(vec![Ok(())])); // one result for two atomic writes
    let answer = reply.await.expect("mailbox");
    assert!(
        matches!(
            answer,
            Err(PersistError::Failed(JournalError::ResultCountMismatch {
                expected: 2,
                actual: 1
            }))
        ),
        "the last continuation is told its own write failed: {answer:?}"
    );
    let seen = h.next_seen_n(3).await;
    assert_eq!(
        seen,
        vec![
            command("a1-count", 0),
            Seen::Failed {
                pid: "a1-count".into()
            },
            Seen::Stopped {
                pid: "a1-count".into()
            },
        ]
    );
}

async fn a_failing_write_in_persist_all_stores_nothing_and_the_next_incarnation_goes_on(
    backend: Backend,
) {
    let mut h = Harness::on(backend, 1).await;
    let a = h.probe_in_group("a2", 0).await;
    let first = a.send(Persist(vec![named("e1"), named("e2"), named("e3")]));
    h.control.next_write_for("a2").await.complete();
    first.await.expect("mailbox").expect("stored");

    let failing = a.send(PersistAll(vec![named("e4"), named("e5"), named("e6")]));
    let write = h.control.next_write_for("a2").await;
    write.complete_with(vec![Outcome::Fail(JournalError::JournalStopped)]);
    assert!(matches!(
        failing.await.expect("mailbox"),
        Err(PersistError::Failed(JournalError::JournalStopped))
    ));
    let seen = h.seen_so_far();
    assert!(
        !seen
            .iter()
            .any(|s| matches!(s, Seen::Handler { event, .. } if *event == named("e4"))),
        "no handler runs for a failed atomic write: {seen:?}"
    );
    assert!(seen.contains(&Seen::Failed { pid: "a2".into() }));
    assert_eq!(stored(&h, "a2").await.len(), 3);

    // A new incarnation recovers 1..3 and continues at 4.
    h.seen_so_far();
    let b = h.probe_in_group("a2", 0).await;
    let reply = b.send(Persist(vec![named("e4")]));
    let write = h.control.next_write_for("a2").await;
    assert_eq!(write.writes()[0].lowest_seq_nr(), 4);
    write.complete();
    assert_eq!(reply.await.expect("mailbox").expect("stored"), 4);
}

async fn recovery_replays_stored_events_in_order_and_reports_the_highest_seq_nr(backend: Backend) {
    let mut h = Harness::on(backend, 2).await;
    let a = h.probe_in_group("recover", 0).await;
    let reply = a.send(Persist(vec![named("r1"), named("r2")]));
    h.control.next_write_for("recover").await.complete();
    reply.await.expect("mailbox").expect("stored");
    a.send(Stop).await.expect("mailbox");
    h.seen_so_far();

    let persistence =
        actix_persistence::PersistenceState::new(h.journal.clone(), "recover").expect("valid id");
    Probe {
        persistence,
        applied: Vec::new(),
        log: h.log_tx.clone(),
    }
    .start();
    assert_eq!(
        h.next_seen().await,
        Seen::Recovered {
            pid: "recover".into(),
            last_seq_nr: 2,
            replayed: vec![named("r1"), named("r2")],
        }
    );
}

async fn an_unserializable_event_is_rejected_and_the_actor_goes_on(backend: Backend) {
    let mut h = Harness::on(backend, 2).await;
    let a = h.probe_in_group("h2-a", 0).await;
    let b = h.probe_in_group("h2-b", 1).await;

    let bad = a.send(Persist(vec![Evt::Unserializable("x".into())]));
    let answer = bad.await.expect("mailbox");
    match answer {
        Err(PersistError::Rejected(rejection)) => {
            assert_eq!(rejection.persistence_id, "h2-a");
            assert_eq!(rejection.seq_nr, 1);
            assert!(
                rejection.reason.contains("refuses to be serialized"),
                "{rejection}"
            );
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(
        !h.control.has_waiting_write(),
        "a rejected write never reaches the store"
    );

    // The actor goes on; so does another actor.
    let good = a.send(Persist(vec![named("a-ok")]));
    let other = b.send(Persist(vec![named("b-ok")]));
    h.control.next_write_for("h2-a").await.complete();
    h.control.next_write_for("h2-b").await.complete();
    assert_eq!(good.await.expect("mailbox").expect("stored"), 2);
    other.await.expect("mailbox").expect("stored");
    let seen = h.seen_so_far();
    assert!(seen.contains(&Seen::Rejected {
        pid: "h2-a".into(),
        seq_nr: 1
    }));
    assert!(seen.contains(&handler("h2-a", "a-ok", 2)));
    let stored_a = stored(&h, "h2-a").await;
    assert_eq!(stored_a.len(), 1);
    assert_eq!(stored_a[0].seq_nr, 2, "the rejected seq_nr stays a gap");

    // The next recovery completes with the right highest seq.
    a.send(Stop).await.expect("mailbox");
    h.seen_so_far();
    let again = h.probe_in_group("h2-a", 1).await;
    let (applied, last_seq_nr) = again.send(Inspect).await.expect("mailbox");
    assert_eq!((applied, last_seq_nr), (vec![named("a-ok")], 2));
}

async fn a_rejection_in_the_middle_of_a_batch_leaves_the_other_writes_alone(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let a = h.probe_in_group("j21", 0).await;
    let reply = a.send(Persist(vec![named("s6"), named("s7"), named("s8")]));
    let write = h.control.next_write_for("j21").await;
    write.complete_with(vec![
        Outcome::Store,
        Outcome::Reject("not today".into()),
        Outcome::Store,
    ]);
    assert_eq!(reply.await.expect("mailbox").expect("s8 stored"), 3);
    let seen = h.next_seen_n(4).await;
    assert_eq!(
        seen,
        vec![
            command("j21", 0),
            handler("j21", "s6", 1),
            Seen::Rejected {
                pid: "j21".into(),
                seq_nr: 2
            },
            // s8 is stored at seq 3: the rejected seq 2 stays a gap
            handler("j21", "s8", 3),
        ]
    );
    let seqs: Vec<_> = stored(&h, "j21").await.iter().map(|e| e.seq_nr).collect();
    assert_eq!(seqs, vec![1, 3]);
}

async fn defer_only_commands_never_reach_the_store_and_run_in_order(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let a = h.probe_in_group("h3", 0).await;
    let mut replies = Vec::new();
    for i in 0..25 {
        replies.push(a.send(PersistThenDefer(Vec::new(), format!("d{i}"))));
    }
    for reply in replies {
        reply.await.expect("mailbox").expect("deferred");
    }
    assert!(
        !h.control.has_waiting_write(),
        "defer-only batches never reach the store"
    );
    let seen: Vec<_> = h
        .seen_so_far()
        .into_iter()
        .filter_map(|s| match s {
            Seen::Deferred { tag, .. } => Some(tag),
            _ => None,
        })
        .collect();
    let expected: Vec<_> = (0..25).map(|i| format!("d{i}")).collect();
    assert_eq!(seen, expected);

    let reply = a.send(PersistThenDefer(vec![named("e1")], "after".into()));
    h.control.next_write_for("h3").await.complete();
    reply.await.expect("mailbox").expect("stored");
    assert_eq!(
        h.seen_so_far(),
        vec![
            command("h3", 0),
            handler("h3", "e1", 1),
            Seen::Deferred {
                pid: "h3".into(),
                tag: "after".into()
            }
        ]
    );
}

async fn a_failed_write_answers_every_waiting_continuation(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let a = h.probe_in_group("fail-all", 0).await;
    let reply = a.send(PersistThenDefer(vec![named("x")], "never".into()));
    let write = h.control.next_write_for("fail-all").await;
    write.fail(JournalError::JournalStopped);
    assert!(matches!(
        reply.await.expect("mailbox"),
        Err(PersistError::ActorStopped)
    ));
    let seen = h.next_seen_n(3).await;
    assert_eq!(
        seen[1],
        Seen::Failed {
            pid: "fail-all".into()
        }
    );
    assert!(!seen.iter().any(|s| matches!(s, Seen::Deferred { .. })));
}

on_every_backend!(
    persist_all_is_one_atomic_write_with_one_completion_at_every_size,
    persist_then_persist_all_in_one_command_is_one_batch_with_consecutive_seq,
    a_store_returning_the_wrong_number_of_results_fails_the_batch_explicitly,
    a_failing_write_in_persist_all_stores_nothing_and_the_next_incarnation_goes_on,
    recovery_replays_stored_events_in_order_and_reports_the_highest_seq_nr,
    an_unserializable_event_is_rejected_and_the_actor_goes_on,
    a_rejection_in_the_middle_of_a_batch_leaves_the_other_writes_alone,
    defer_only_commands_never_reach_the_store_and_run_in_order,
    a_failed_write_answers_every_waiting_continuation,
);

/// Persists, then waits for its own reply inside the handler's `AtomicResponse` (Actix's
/// `ctx.wait`): the newest waiting future, the only one Actix polls.
#[derive(actix::Message)]
#[rtype(result = "actix_persistence::PersistResult<u64>")]
struct PersistAtomically(Evt);

impl actix::Handler<PersistAtomically> for Probe {
    type Result = actix::AtomicResponse<Self, actix_persistence::PersistResult<u64>>;

    fn handle(&mut self, msg: PersistAtomically, ctx: &mut actix::Context<Self>) -> Self::Result {
        use actix::fut::ActorFutureExt;
        use actix_persistence::PersistentActor;
        let reply = self.persist(ctx, msg.0, |act, _, _| act.last_seq_nr());
        actix::AtomicResponse::new(Box::pin(
            reply
                .into_actor_future()
                .map(|answer, _, _| answer.map(|seq_nr| seq_nr * 10)),
        ))
    }
}

async fn a_reply_awaited_inside_ctx_wait_completes(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let a = h.probe_in_group("atomic", 0).await;
    let answer = a.send(PersistAtomically(named("x")));
    h.control.next_write_for("atomic").await.complete();
    assert_eq!(answer.await.expect("mailbox").expect("stored"), 10);
    // The actor is not stuck: the next command is handled.
    let next = a.send(Persist(vec![named("y")]));
    h.control.next_write_for("atomic").await.complete();
    assert_eq!(next.await.expect("mailbox").expect("stored"), 2);
}

on_every_backend!(a_reply_awaited_inside_ctx_wait_completes);
