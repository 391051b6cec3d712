//! Write-reply ordering through the resequencer groups: O1, O2, O3 of
//! `conformance/persistent-actor.md`. Writes complete only when the test says so.

mod support;

use actix_persistence::JournalError;
use actix_persistence_testkit::Outcome;
use support::*;

async fn reply_in_another_group_is_delivered_while_an_earlier_write_is_outstanding(
    backend: Backend,
) {
    let mut h = Harness::on(backend, 2).await;
    let a = h.probe_in_group("o1-a", 0).await;
    let b = h.probe_in_group("o1-b", 1).await;

    a.do_send(Persist(vec![named("a1")]));
    let write_a = h.control.next_write_for("o1-a").await;
    b.do_send(Persist(vec![named("b1")]));
    let write_b = h.control.next_write_for("o1-b").await;
    assert_eq!(
        h.next_seen_n(2).await,
        vec![command("o1-a", 0), command("o1-b", 0)]
    );

    write_b.complete();
    // B's continuation runs although A's earlier write is still at the store.
    assert_eq!(h.next_seen().await, handler("o1-b", "b1", 1));
    settle().await;
    assert_eq!(
        h.seen_so_far(),
        vec![],
        "A's handler must wait for A's write"
    );

    write_a.complete();
    assert_eq!(h.next_seen().await, handler("o1-a", "a1", 1));
}

async fn reply_in_the_same_group_waits_for_the_earlier_write(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let a = h.probe_in_group("o2-a", 0).await;
    let b = h.probe_in_group("o2-b", 0).await;

    a.do_send(Persist(vec![named("a1")]));
    let write_a = h.control.next_write_for("o2-a").await;
    b.do_send(Persist(vec![named("b1")]));
    let write_b = h.control.next_write_for("o2-b").await;
    assert_eq!(
        h.next_seen_n(2).await,
        vec![command("o2-a", 0), command("o2-b", 0)]
    );

    // B's write is stored and its reply is with the resequencer, behind A's write.
    write_b.complete().wait().await;
    settle().await;
    assert_eq!(
        h.seen_so_far(),
        vec![],
        "B's handler must wait for A's earlier write"
    );

    write_a.complete();
    assert_eq!(
        h.next_seen_n(2).await,
        vec![handler("o2-a", "a1", 1), handler("o2-b", "b1", 1)]
    );
}

async fn persist_all_defer_and_failure_keep_their_own_order_in_three_groups(backend: Backend) {
    let mut h = Harness::on(backend, 3).await;
    let p = h.probe_in_group("o3-p", 0).await;
    let q = h.probe_in_group("o3-q", 0).await;
    let d = h.probe_in_group("o3-d", 1).await;
    let f = h.probe_in_group("o3-f", 2).await;

    p.do_send(PersistAll(vec![named("e1"), named("e2"), named("e3")]));
    let write_p = h.control.next_write_for("o3-p").await;
    q.do_send(Persist(vec![named("q1")]));
    let write_q = h.control.next_write_for("o3-q").await;
    d.do_send(PersistThenDefer(vec![named("d1")], "after-d1".into()));
    let write_d = h.control.next_write_for("o3-d").await;
    f.do_send(Persist(vec![named("f1")]));
    let write_f = h.control.next_write_for("o3-f").await;
    assert_eq!(write_p.writes().len(), 1, "persist_all is one atomic write");
    assert_eq!(write_p.writes()[0].events.len(), 3);
    assert_eq!(
        write_d.writes().len(),
        1,
        "the defer never reaches the store"
    );
    h.next_seen_n(4).await; // the four commands

    // F's failure is reported at once: nothing earlier is outstanding in group 2.
    write_f.complete_with(vec![Outcome::Fail(JournalError::JournalStopped)]);
    assert_eq!(
        h.next_seen_n(2).await,
        vec![
            Seen::Failed { pid: "o3-f".into() },
            Seen::Stopped { pid: "o3-f".into() }
        ]
    );

    // Q's write is done but Q is behind P in group 0.
    write_q.complete().wait().await;
    settle().await;
    assert_eq!(h.seen_so_far(), vec![]);

    // D's handler, then its defer, without waiting for group 0.
    write_d.complete();
    assert_eq!(
        h.next_seen_n(2).await,
        vec![
            handler("o3-d", "d1", 1),
            Seen::Deferred {
                pid: "o3-d".into(),
                tag: "after-d1".into()
            }
        ]
    );

    // P's three events in order, then Q, released by P.
    write_p.complete();
    assert_eq!(
        h.next_seen_n(4).await,
        vec![
            handler("o3-p", "e1", 1),
            handler("o3-p", "e2", 2),
            handler("o3-p", "e3", 3),
            handler("o3-q", "q1", 1),
        ]
    );
}

async fn commands_arriving_during_a_write_wait_until_its_handler_ran(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let a = h.probe_in_group("wait-a", 0).await;

    a.do_send(Persist(vec![named("a1")]));
    a.do_send(Persist(vec![named("a2")]));
    let first = h.control.next_write_for("wait-a").await;
    assert_eq!(h.next_seen().await, command("wait-a", 0));
    settle().await;
    assert!(
        !h.control.has_waiting_write(),
        "the second command must not be handled yet"
    );
    assert_eq!(h.seen_so_far(), vec![]);

    first.complete();
    // The second command sees the first event applied.
    assert_eq!(
        h.next_seen_n(2).await,
        vec![handler("wait-a", "a1", 1), command("wait-a", 1)]
    );
    let second = h.control.next_write_for("wait-a").await;
    assert_eq!(second.writes()[0].lowest_seq_nr(), 2);
    second.complete();
    assert_eq!(h.next_seen().await, handler("wait-a", "a2", 2));
}

on_every_backend!(
    reply_in_another_group_is_delivered_while_an_earlier_write_is_outstanding,
    reply_in_the_same_group_waits_for_the_earlier_write,
    persist_all_defer_and_failure_keep_their_own_order_in_three_groups,
    commands_arriving_during_a_write_wait_until_its_handler_ran,
);
