//! One sequence number rule for every kind of rejected write, as Akka's `onPersistRejected`
//! (`updateLastSequenceNr` before the hook): the events are not stored, the write keeps its
//! sequence numbers (`last_seq_nr` reads its highest one from `on_persist_rejected` on), the
//! next write continues after them, and they stay a gap that recovery passes over.
//! The kinds: an event that cannot be serialized and a write over the limits (both rejected
//! by the actor before sending), and a rejection by the store.

mod support;

use std::sync::Arc;
use std::time::Duration;

use actix_persistence::actix::Addr;
use actix_persistence::limits::MAX_PAYLOAD_BYTES;
use actix_persistence::{PersistError, PersistenceState, MAX_SEQ_NR};
use actix_persistence_testkit::Outcome;
use futures::TryStreamExt;
use support::*;

on_every_backend!(
    an_unserializable_event_keeps_its_sequence_number,
    a_write_over_the_limits_keeps_its_sequence_numbers,
    a_write_the_store_rejects_keeps_its_sequence_number,
    a_snapshot_after_a_rejected_write_stays_below_its_numbers,
);

/// The kind of rejection a test makes.
enum Kind {
    /// `Evt::Unserializable`, rejected by the actor before sending.
    Unserializable,
    /// A payload over `MAX_PAYLOAD_BYTES`, rejected by the actor before sending; `events`
    /// events in one `persist_all`.
    OverTheLimits { events: usize },
    /// A well-formed write the store answers with a rejection.
    StoreRejects,
}

/// Makes one rejected write of `kind` as the first write of `pid`, then checks the rule:
/// the rejection names sequence number 1, `last_seq_nr` reads the rejected write's highest,
/// the next write takes the number after it, and a new incarnation recovers that one alone.
async fn rejected_write_keeps_its_sequence_numbers(backend: Backend, pid: &str, kind: Kind) {
    let mut h = Harness::on(backend, 1).await;
    let actor: Addr<Probe> = h.probe_in_group(pid, 0).await;
    let (reply, rejected_highest) = match kind {
        Kind::Unserializable => (
            actor.send(PersistAll(vec![Evt::Unserializable("x".into())])),
            1,
        ),
        Kind::OverTheLimits { events } => {
            let mut batch = vec![named(&"x".repeat(MAX_PAYLOAD_BYTES))];
            batch.extend((1..events).map(|i| named(&format!("small-{i}"))));
            (actor.send(PersistAll(batch)), events as u64)
        }
        Kind::StoreRejects => {
            let reply = actor.send(PersistAll(vec![named("refused")]));
            h.control
                .next_write_for(pid)
                .await
                .complete_with(vec![Outcome::Reject("not today".into())]);
            (reply, 1)
        }
    };
    match reply.await.expect("mailbox") {
        Err(PersistError::Rejected(rejection)) => assert_eq!(rejection.seq_nr, 1),
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(
        h.seen_so_far().contains(&Seen::Rejected {
            pid: pid.to_owned(),
            seq_nr: 1
        }),
        "on_persist_rejected ran"
    );
    let (applied, last_seq_nr) = actor.send(Inspect).await.expect("mailbox");
    assert!(applied.is_empty(), "nothing was applied: {applied:?}");
    assert_eq!(
        last_seq_nr, rejected_highest,
        "last_seq_nr reads the rejected write's highest sequence number"
    );

    let next = actor.send(Persist(vec![named("after")]));
    let write = h.control.next_write_for(pid).await;
    assert_eq!(
        write.writes()[0].lowest_seq_nr(),
        rejected_highest + 1,
        "the next write continues after the rejected numbers (never reuses them)"
    );
    write.complete();
    assert_eq!(
        next.await.expect("mailbox").expect("stored"),
        rejected_highest + 1
    );
    let stored: Vec<u64> = h
        .control
        .stored()
        .replay_messages(pid, 1, MAX_SEQ_NR, MAX_SEQ_NR)
        .map_ok(|e| e.seq_nr)
        .try_collect()
        .await
        .expect("replay");
    assert_eq!(
        stored,
        vec![rejected_highest + 1],
        "the rejected numbers are a gap"
    );

    actor.send(Stop).await.expect("mailbox");
    h.seen_so_far();
    let again = h.probe_in_group(pid, 0).await;
    let (applied, last_seq_nr) = again.send(Inspect).await.expect("mailbox");
    assert_eq!(
        (applied, last_seq_nr),
        (vec![named("after")], rejected_highest + 1),
        "a new incarnation recovers past the gap"
    );
}

async fn an_unserializable_event_keeps_its_sequence_number(backend: Backend) {
    rejected_write_keeps_its_sequence_numbers(backend, "r-serialize", Kind::Unserializable).await;
}

async fn a_write_over_the_limits_keeps_its_sequence_numbers(backend: Backend) {
    rejected_write_keeps_its_sequence_numbers(
        backend,
        "r-limits",
        Kind::OverTheLimits { events: 3 },
    )
    .await;
}

async fn a_write_the_store_rejects_keeps_its_sequence_number(backend: Backend) {
    rejected_write_keeps_its_sequence_numbers(backend, "r-store", Kind::StoreRejects).await;
}

/// A snapshot saved after a rejected write is at the last stored event, not at the numbers
/// the rejection used up. An incarnation already replaced by a newer one, and not fenced yet
/// (it has not written since), may use up a number at which the newer one stores an event: a
/// snapshot at that number would hide the newer one's event from every later recovery.
async fn a_snapshot_after_a_rejected_write_stays_below_its_numbers(backend: Backend) {
    let pid = "r-snapshot";
    let mut h = Harness::on(backend, 1).await;
    let snapshots = Arc::clone(&h.snapshots);
    let with_snapshots = || {
        let store = Arc::clone(&snapshots);
        move |state: PersistenceState<Probe>| {
            state.with_snapshot_store(store, Duration::from_secs(5))
        }
    };
    let old: Addr<Probe> = h.probe_with(pid, 0, with_snapshots()).await;
    let kept = old.send(Persist(vec![named("kept")]));
    h.control.next_write_for(pid).await.complete();
    assert_eq!(kept.await.expect("mailbox").expect("stored"), 1);

    // A newer incarnation recovers (and owns the id); the old one does not know yet.
    h.seen_so_far();
    let newer: Addr<Probe> = h.probe_with(pid, 0, with_snapshots()).await;
    // The old one's next write is rejected before it is sent: number 2 used up.
    match old
        .send(PersistAll(vec![named(&"x".repeat(MAX_PAYLOAD_BYTES))]))
        .await
        .expect("mailbox")
    {
        Err(PersistError::Rejected(rejection)) => assert_eq!(rejection.seq_nr, 2),
        other => panic!("expected a rejection, got {other:?}"),
    }
    // The newer one stores its event at 2.
    let stored = newer.send(Persist(vec![named("newer")]));
    h.control.next_write_for(pid).await.complete();
    assert_eq!(stored.await.expect("mailbox").expect("stored"), 2);
    // The old one saves a snapshot of its state (without the newer event).
    old.send(SaveSnapshot).await.expect("mailbox");
    let seen = h
        .seen_until(|s| matches!(s, Seen::SnapshotSaved { .. } | Seen::SnapshotFailed { .. }))
        .await;
    assert!(
        seen.contains(&Seen::SnapshotSaved {
            pid: pid.to_owned(),
            seq_nr: 1
        }),
        "the snapshot is at the last stored event: {seen:?}"
    );
    old.send(Stop).await.expect("mailbox");
    newer.send(Stop).await.expect("mailbox");
    h.seen_so_far();

    // A later incarnation recovers both events.
    let later = h.probe_with(pid, 0, with_snapshots()).await;
    let (applied, last_seq_nr) = later.send(Inspect).await.expect("mailbox");
    assert_eq!(
        (applied, last_seq_nr),
        (vec![named("kept"), named("newer")], 2)
    );
}
