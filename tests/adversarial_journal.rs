//! The write side through the facade, across restarts of the "process" (a new `Persistence`
//! over the same database, after a shutdown or after a crash that drops it): sequence numbers
//! after deletes, snapshot selection, two incarnations of one id in two processes, and SQLite
//! URL forms. On every store.

mod adversarial;

use std::collections::BTreeMap;

use actix_persistence::query::Offset;
use actix_persistence::snapshot::{
    SerializedSnapshot, SnapshotMetadata, SnapshotSelectionCriteria,
};
use actix_persistence::{
    JournalError, PersistError, Persistence, Recovery, RecoveryError, Settings, StopReason,
};
use adversarial::*;
use futures::StreamExt;

/// Deleting every event (`delete_events_to(u64::MAX)`) keeps the highest sequence number:
/// after a restart, graceful or a crash, the actor recovers an empty state at 5 and its next
/// event is 6, never 1 (Akka: a journal keeps the highest sequence number of deleted events,
/// so a persistent actor never reuses one).
async fn next_persist_after_deleting_every_event_continues_after_the_highest_seq_nr(kind: Kind) {
    let b = Backend::new(kind).await;
    for graceful in [true, false] {
        let pid = &format!("Acct|del-all-{graceful}");
        let p = b.open().await;
        let mut a = start_acct(&p, pid);
        assert_eq!(a.note().await, Note::Recovered(0));
        assert_eq!(a.add(&[1, 2, 3, 4, 5]).await.expect("stored"), (5, 15));
        a.addr.do_send(DeleteTo(u64::MAX));
        assert_eq!(a.note().await, Note::Deleted(u64::MAX));
        assert_eq!(
            stored_seq_nrs(&p, pid, 0, u64::MAX).await,
            Vec::<u64>::new()
        );
        drop(a);
        close(p, graceful).await;

        let p = b.open().await;
        let mut a = start_acct(&p, pid);
        assert_eq!(a.note().await, Note::Recovered(5), "graceful {graceful}");
        assert_eq!(a.get().await, (5, AcctState::default()));
        assert_eq!(a.add(&[10]).await.expect("stored"), (6, 10));
        assert_eq!(stored_seq_nrs(&p, pid, 0, u64::MAX).await, vec![6]);
        close(p, graceful).await;
    }
}

/// A snapshot at 5, then every event deleted: a restart recovers the snapshot's state at 5,
/// the next event is 6, and the restart after that recovers the snapshot and event 6.
async fn a_snapshot_before_deleting_every_event_recovers_the_state_and_the_sequence_goes_on(
    kind: Kind,
) {
    let b = Backend::new(kind).await;
    for graceful in [true, false] {
        let pid = &format!("Acct|del-all-snap-{graceful}");
        let p = b.open().await;
        let mut a = start_acct(&p, pid);
        assert_eq!(a.note().await, Note::Recovered(0));
        assert_eq!(a.add(&[1, 2, 3, 4, 5]).await.expect("stored"), (5, 15));
        a.addr.do_send(Snap);
        assert_eq!(a.note().await, Note::SnapshotSaved(5));
        a.addr.do_send(DeleteTo(u64::MAX));
        assert_eq!(a.note().await, Note::Deleted(u64::MAX));
        drop(a);
        close(p, graceful).await;

        let p = b.open().await;
        let mut a = start_acct(&p, pid);
        assert_eq!(a.note().await, Note::Recovered(5), "graceful {graceful}");
        assert_eq!(a.get().await.1.total, 15);
        assert_eq!(a.add(&[10]).await.expect("stored"), (6, 25));
        drop(a);
        close(p, graceful).await;

        let p = b.open().await;
        let mut a = start_acct(&p, pid);
        assert_eq!(a.note().await, Note::Recovered(6), "graceful {graceful}");
        assert_eq!(
            a.get().await,
            (
                6,
                AcctState {
                    total: 25,
                    applied: vec![(1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 10)],
                }
            )
        );
        assert_eq!(stored_seq_nrs(&p, pid, 0, u64::MAX).await, vec![6]);
        close(p, graceful).await;
    }
}

/// A snapshot at 3, events 4 and 5, the events up to 3 deleted: a restart recovers from the
/// snapshot and replays exactly 4 and 5, and the next event is 6.
async fn deleting_the_events_a_snapshot_covers_replays_only_the_rest_after_a_restart(kind: Kind) {
    let b = Backend::new(kind).await;
    for graceful in [true, false] {
        let pid = &format!("Acct|snap-partial-{graceful}");
        let p = b.open().await;
        let mut a = start_acct(&p, pid);
        assert_eq!(a.note().await, Note::Recovered(0));
        assert_eq!(a.add(&[1, 2, 3]).await.expect("stored"), (3, 6));
        a.addr.do_send(Snap);
        assert_eq!(a.note().await, Note::SnapshotSaved(3));
        assert_eq!(a.add(&[4, 5]).await.expect("stored"), (5, 15));
        a.addr.do_send(DeleteTo(3));
        assert_eq!(a.note().await, Note::Deleted(3));
        drop(a);
        close(p, graceful).await;

        let p = b.open().await;
        assert_eq!(stored_seq_nrs(&p, pid, 0, u64::MAX).await, vec![4, 5]);
        let mut a = start_acct(&p, pid);
        assert_eq!(a.note().await, Note::Recovered(5), "graceful {graceful}");
        assert_eq!(
            a.get().await,
            (
                5,
                AcctState {
                    total: 15,
                    applied: vec![(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)],
                }
            )
        );
        assert_eq!(a.add(&[6]).await.expect("stored"), (6, 21));
        close(p, graceful).await;
    }
}

/// A snapshot whose state is `marker` at `seq_nr`: 1000 x seq_nr, and the one entry
/// (seq_nr, 0), so a recovered state tells which snapshot it started from.
fn marker(seq_nr: u64) -> SerializedSnapshot {
    SerializedSnapshot::json(&AcctState {
        total: 1000 * seq_nr as i64,
        applied: vec![(seq_nr, 0)],
    })
    .expect("json")
}

async fn save_snapshot(p: &Persistence, pid: &str, seq_nr: u64, snapshot: SerializedSnapshot) {
    let metadata = SnapshotMetadata {
        persistence_id: pid.into(),
        seq_nr,
        timestamp: seq_nr as i64,
    };
    within(
        "save a snapshot",
        p.snapshot_store().save(metadata, snapshot),
    )
    .await
    .expect("snapshot saved");
}

/// Recovery starts from the newest snapshot the recovery allows and replays the events after
/// it: with snapshots at 2, 4 and 6 of events 1 to 7, the latest recovery starts at 6,
/// `up_to(5)` at 4, `to_seq_nr: 3` at 2 replaying 3 only, and `up_to(1)` replays everything;
/// each reports the highest sequence number, 7 (Akka: `SnapshotSelectionCriteria` picks the
/// youngest snapshot within it, `Recovery::toSequenceNr` bounds the snapshot and the replay).
async fn recovery_starts_from_the_newest_snapshot_the_recovery_allows(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Acct|several";
    let p = b.open().await;
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    assert_eq!(
        a.add(&[1, 2, 3, 4, 5, 6, 7]).await.expect("stored"),
        (7, 28)
    );
    drop(a);
    for seq_nr in [2, 4, 6] {
        save_snapshot(&p, pid, seq_nr, marker(seq_nr)).await;
    }
    let cases: [(Recovery, AcctState); 4] = [
        (
            Recovery::latest(),
            AcctState {
                total: 6007,
                applied: vec![(6, 0), (7, 7)],
            },
        ),
        (
            Recovery {
                from_snapshot: SnapshotSelectionCriteria::up_to(5),
                ..Recovery::latest()
            },
            AcctState {
                total: 4018,
                applied: vec![(4, 0), (5, 5), (6, 6), (7, 7)],
            },
        ),
        (
            Recovery {
                to_seq_nr: 3,
                ..Recovery::latest()
            },
            AcctState {
                total: 2003,
                applied: vec![(2, 0), (3, 3)],
            },
        ),
        (
            Recovery {
                from_snapshot: SnapshotSelectionCriteria::up_to(1),
                ..Recovery::latest()
            },
            AcctState {
                total: 28,
                applied: (1..=7).map(|n| (n, n as i64)).collect(),
            },
        ),
    ];
    for (recovery, state) in cases {
        let what = format!("{recovery:?}");
        let mut a = start_acct_with(&p, pid, |s| s.with_recovery(recovery));
        assert_eq!(a.note().await, Note::Recovered(7), "{what}");
        assert_eq!(a.get().await.1, state, "{what}");
    }
    within("shutdown", p.shutdown()).await;
}

/// A snapshot that cannot be deserialized fails the recovery that selects it with
/// `RecoveryError::Snapshot` (never a state built from fewer events), and a recovery whose
/// criteria exclude it recovers from the events.
async fn a_corrupt_snapshot_fails_recovery_and_criteria_below_it_recover_from_the_events(
    kind: Kind,
) {
    let b = Backend::new(kind).await;
    let pid = "Acct|corrupt";
    let p = b.open().await;
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    assert_eq!(a.add(&[1, 2, 3]).await.expect("stored"), (3, 6));
    drop(a);
    let corrupt = SerializedSnapshot {
        payload: b"{not json".to_vec(),
        serializer_id: actix_persistence::serialization::JSON_SERIALIZER_ID,
        manifest: String::new(),
    };
    save_snapshot(&p, pid, 3, corrupt).await;

    let mut a = start_acct(&p, pid);
    match a.note().await {
        Note::RecoveryFailed(RecoveryError::Snapshot { .. }) => {}
        other => panic!("a corrupt snapshot must fail recovery, got {other:?}"),
    }
    assert_eq!(
        within("stop", &mut a.stopped).await.expect("stop reason"),
        StopReason::RecoveryFailure
    );

    let mut a = start_acct_with(&p, pid, |s| {
        s.with_recovery(Recovery {
            from_snapshot: SnapshotSelectionCriteria::up_to(2),
            ..Recovery::latest()
        })
    });
    assert_eq!(a.note().await, Note::Recovered(3));
    assert_eq!(
        a.get().await.1,
        AcctState {
            total: 6,
            applied: vec![(1, 1), (2, 2), (3, 3)],
        }
    );
    within("shutdown", p.shutdown()).await;
}

/// A snapshot at 10 over events 1 to 7: recovery starts from it at 10 and the next event is
/// 11, which the next recovery replays after the snapshot (Akka: the recovered `lastSequenceNr`
/// is the snapshot's when no event follows it).
async fn a_snapshot_above_the_highest_event_sets_the_next_seq_nr_after_it(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Acct|snap-above";
    let p = b.open().await;
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    assert_eq!(
        a.add(&[1, 2, 3, 4, 5, 6, 7]).await.expect("stored"),
        (7, 28)
    );
    drop(a);
    save_snapshot(&p, pid, 10, marker(10)).await;

    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(10));
    assert_eq!(a.add(&[1]).await.expect("stored"), (11, 10_001));
    drop(a);
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(11));
    assert_eq!(
        a.get().await.1,
        AcctState {
            total: 10_001,
            applied: vec![(10, 0), (11, 1)],
        }
    );
    assert_eq!(
        stored_seq_nrs(&p, pid, 0, u64::MAX).await,
        vec![1, 2, 3, 4, 5, 6, 7, 11]
    );
    within("shutdown", p.shutdown()).await;
}

/// The events stored for `pid`: seq_nr -> amount.
async fn stored_amounts(p: &Persistence, pid: &str) -> BTreeMap<u64, i64> {
    let query = p.query().expect("a query store");
    within(
        "replay",
        query
            .current_events_by_persistence_id(pid, 0, u64::MAX)
            .map(|e| {
                let e = e.expect("envelope");
                let event: Added = serde_json::from_slice(&e.event.payload).expect("json");
                (e.seq_nr, event.amount)
            })
            .collect::<BTreeMap<_, _>>(),
    )
    .await
}

/// Incarnation A (process 1) has 30 writes pipelined when incarnation B of the same id
/// (process 2) recovers and writes 10: A's writes are acknowledged up to the takeover and
/// fenced from then on (the first failure is `Fenced`, no acknowledgement follows it, and A
/// stops with `StopReason::Fenced`); B recovered exactly A's acknowledged writes, and the
/// journal holds exactly A's then B's acknowledged writes, each at its sequence number
/// (Akka: one writer per persistence id; here the store fences the older one).
async fn pipelined_writes_of_a_taken_over_incarnation_are_fenced_and_every_acknowledged_one_kept(
    kind: Kind,
) {
    let b = Backend::new(kind).await;
    let pid = "Acct|fenced";
    let p1 = b.open().await;
    let p2 = b.open().await;
    let mut a = start_acct(&p1, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    for n in 0..10 {
        assert_eq!(a.add(&[1000 + n]).await.expect("stored").0, n as u64 + 1);
    }
    let in_flight: Vec<_> = (10..40)
        .map(|n| a.addr.send(Add(vec![1000 + n], vec![])))
        .collect();

    let mut b2 = start_acct(&p2, pid);
    let Note::Recovered(taken_at) = b2.note().await else {
        panic!("B must recover")
    };
    for n in 0..10 {
        assert_eq!(
            b2.add(&[2000 + n]).await.expect("B stored").0,
            taken_at + n as u64 + 1
        );
    }
    // Sent after B's writes were acknowledged: fenced, or refused by the stopped actor.
    let after_takeover = a.addr.send(Add(vec![1999], vec![]));

    let mut acknowledged = 10u64;
    let mut failed = false;
    for reply in in_flight.into_iter().chain([after_takeover]) {
        match within("A's pipelined write", reply).await {
            Ok(Ok((seq_nr, _))) => {
                assert!(!failed, "A acknowledged {seq_nr} after a failure");
                acknowledged += 1;
                assert_eq!(seq_nr, acknowledged);
            }
            Ok(Err(error)) => {
                assert!(
                    failed || matches!(error, PersistError::Failed(JournalError::Fenced { .. })),
                    "A's first failure must be Fenced: {error:?}"
                );
                failed = true;
            }
            Err(mailbox) => assert!(failed, "A stopped before a failure: {mailbox}"),
        }
    }
    assert!(failed, "the write after the takeover must fail");
    assert_eq!(
        within("A stops", &mut a.stopped)
            .await
            .expect("stop reason"),
        StopReason::Fenced
    );
    assert_eq!(
        taken_at, acknowledged,
        "B recovered A's acknowledged writes"
    );

    let expected: BTreeMap<u64, i64> = (1..=acknowledged)
        .map(|seq_nr| (seq_nr, 999 + seq_nr as i64))
        .chain((0..10).map(|n| (acknowledged + 1 + n, 2000 + n as i64)))
        .collect();
    assert_eq!(stored_amounts(&p2, pid).await, expected);
    let mut c = start_acct(&p1, pid);
    assert_eq!(c.note().await, Note::Recovered(acknowledged + 10));
    assert_eq!(c.get().await.1.total, expected.values().sum::<i64>());
    within("shutdown 1", p1.shutdown()).await;
    within("shutdown 2", p2.shutdown()).await;
}

on_every_store!(
    next_persist_after_deleting_every_event_continues_after_the_highest_seq_nr,
    a_snapshot_before_deleting_every_event_recovers_the_state_and_the_sequence_goes_on,
    deleting_the_events_a_snapshot_covers_replays_only_the_rest_after_a_restart,
    recovery_starts_from_the_newest_snapshot_the_recovery_allows,
    a_corrupt_snapshot_fails_recovery_and_criteria_below_it_recover_from_the_events,
    a_snapshot_above_the_highest_event_sets_the_next_seq_nr_after_it,
    pipelined_writes_of_a_taken_over_incarnation_are_fenced_and_every_acknowledged_one_kept,
);

/// Persists, snapshots and persists tagged events through the facade over the SQLite `url`,
/// then checks that a new incarnation's replay, the snapshot store and every query see them.
async fn every_connection_sees_what_was_written(url: &str) {
    let settings = Settings::loader()
        .env_vars([
            ("ACTIX_PERSISTENCE__JOURNAL__PLUGIN", "sqlite"),
            ("ACTIX_PERSISTENCE__JOURNAL__SQLITE__URL", url),
            ("ACTIX_PERSISTENCE__QUERY__PAGE_SIZE", "2"),
            ("ACTIX_PERSISTENCE__JOURNAL__REPLAY_BATCH_SIZE", "2"),
        ])
        .load()
        .expect("valid settings");
    let p = Persistence::start_with(settings).await.expect("start");
    let mut a = start_acct(&p, "Acct|url");
    assert_eq!(a.note().await, Note::Recovered(0));
    assert_eq!(a.add(&[1, 2, 3]).await.expect("stored"), (3, 6));
    a.addr.do_send(Snap);
    assert_eq!(a.note().await, Note::SnapshotSaved(3));
    let tagged = a.addr.send(Add(vec![4, 5, 6, 7, 8], vec!["t".into()]));
    assert_eq!(
        within("tagged", tagged)
            .await
            .expect("mailbox")
            .expect("stored"),
        (8, 36)
    );
    drop(a);

    let mut b = start_acct(&p, "Acct|url");
    assert_eq!(b.note().await, Note::Recovered(8), "{url}");
    assert_eq!(b.get().await.1.total, 36, "{url}");
    let q = p.query().expect("a query store");
    let by_slices = q.current_events_by_slices("Acct", 0, 1023, Offset::NoOffset);
    assert_eq!(within("by slices", by_slices.count()).await, 8, "{url}");
    let by_tag = q.current_events_by_tag("t", Offset::NoOffset);
    assert_eq!(within("by tag", by_tag.count()).await, 5, "{url}");
    let by_id = q.current_events_by_persistence_id("Acct|url", 0, u64::MAX);
    assert_eq!(within("by id", by_id.count()).await, 8, "{url}");
    assert_eq!(b.add(&[9]).await.expect("stored"), (9, 45));
    within("shutdown", p.shutdown()).await;
}

/// `sqlite::memory:` is one database shared by the writer, the replays, the snapshot store and
/// the queries (SQLite gives each connection its own in-memory database unless it is shared).
#[actix::test]
async fn a_sqlite_memory_url_is_one_database_for_every_connection() {
    every_connection_sees_what_was_written("sqlite::memory:").await;
}

/// An absolute path in any URL form (`sqlite:` with spaces and non-ASCII characters,
/// `sqlite://`, with parameters) names one file every connection opens.
#[actix::test]
async fn a_sqlite_url_in_any_form_names_one_file_for_every_connection() {
    let dir = tempfile::tempdir().expect("temp dir");
    let spaced = dir.path().join("a b é.db");
    every_connection_sees_what_was_written(&format!("sqlite:{}", spaced.display())).await;
    let slashes = dir.path().join("two.db");
    every_connection_sees_what_was_written(&format!("sqlite://{}", slashes.display())).await;
    let with_mode = dir.path().join("three.db");
    every_connection_sees_what_was_written(&format!("sqlite://{}?mode=rwc", with_mode.display()))
        .await;
}
