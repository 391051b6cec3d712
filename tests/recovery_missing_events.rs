//! A snapshot that does not fit the events fails recovery, naming the persistence id and the
//! missing range, instead of building a state that silently lacks the deleted events.

mod support;

use std::sync::Arc;
use std::time::Duration;

use actix_persistence::snapshot::{
    SerializedSnapshot, SnapshotMetadata, SnapshotSelectionCriteria, SnapshotStore,
};
use actix_persistence::{AtomicWrite, JournalStore, PersistentRepr, Recovery};
use support::*;

fn event_repr(pid: &str, seq_nr: u64) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload: serde_json::to_vec(&named(&format!("e{seq_nr}"))).expect("json"),
        serializer_id: actix_persistence::serialization::JSON_SERIALIZER_ID,
        manifest: String::new(),
        writer_uuid: "test-writer".into(),
        timestamp: 1,
        tags: Default::default(),
    }
}

/// Stores events 1..=n of `pid`, then deletes those up to `deleted_to`.
async fn events(h: &Harness, pid: &str, n: u64, deleted_to: u64) {
    let store = h.control.stored();
    let writes = (1..=n)
        .map(|seq_nr| AtomicWrite::new(vec![event_repr(pid, seq_nr)]).expect("shape"))
        .collect();
    let results = store.write_messages(writes).await.expect("stored");
    assert!(results.iter().all(Result::is_ok));
    store
        .delete_messages_to(pid, deleted_to, actix_persistence::FencingToken::UNOWNED)
        .await
        .expect("deleted");
}

async fn snapshot(h: &Harness, pid: &str, seq_nr: u64) {
    let metadata = SnapshotMetadata {
        persistence_id: pid.to_owned(),
        seq_nr,
        timestamp: 1_000,
    };
    let state: Vec<Evt> = (1..=seq_nr).map(|i| named(&format!("e{i}"))).collect();
    let snapshot = SerializedSnapshot::json(&state).expect("json");
    h.snapshots.save(metadata, snapshot).await.expect("saved");
}

fn with_snapshots(
    h: &Harness,
) -> impl FnOnce(actix_persistence::PersistenceState<Probe>) -> actix_persistence::PersistenceState<Probe>
{
    let store = Arc::clone(&h.snapshots);
    move |state| state.with_snapshot_store(store, Duration::from_secs(5))
}

async fn expect_missing(h: &mut Harness, pid: &str, range: &str) {
    match h.next_seen().await {
        Seen::RecoveryFailed { pid: p, error } => {
            assert_eq!(p, pid);
            assert!(
                error.contains(pid),
                "the error names the persistence id: {error}"
            );
            assert!(error.contains(range), "the error names {range}: {error}");
        }
        other => panic!("expected {pid}'s recovery to fail, saw {other:?}"),
    }
    assert_eq!(h.next_seen().await, Seen::Stopped { pid: pid.into() });
}

async fn recovery_fails_when_events_after_the_loaded_snapshot_were_deleted(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    // Events up to 8 were deleted for a snapshot at 8 that is gone; the one at 4 is left.
    events(&h, "hole", 10, 8).await;
    snapshot(&h, "hole", 4).await;
    let _a = h.start_probe("hole", 0, with_snapshots(&h));
    expect_missing(
        &mut h,
        "hole",
        "events 5 to 8 are missing between the snapshot at 4",
    )
    .await;
}

async fn recovery_fails_when_no_event_follows_a_snapshot_older_than_the_deleted_ones(
    backend: Backend,
) {
    let mut h = Harness::on(backend, 1).await;
    events(&h, "hole-end", 6, 6).await;
    snapshot(&h, "hole-end", 3).await;
    let _a = h.start_probe("hole-end", 0, with_snapshots(&h));
    expect_missing(&mut h, "hole-end", "events 4 to 6 are missing").await;
}

async fn recovery_without_a_snapshot_fails_when_the_first_events_were_deleted(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    events(&h, "hole-start", 5, 3).await;
    let _a = h.start_probe("hole-start", 0, |s| s);
    expect_missing(
        &mut h,
        "hole-start",
        "events 1 to 3 are missing between the start",
    )
    .await;
}

async fn an_explicit_recovery_skipping_snapshots_over_deleted_events_fails(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    events(&h, "skip", 6, 4).await;
    snapshot(&h, "skip", 4).await;
    let skip_snapshots = Recovery {
        from_snapshot: SnapshotSelectionCriteria::none(),
        ..Recovery::latest()
    };
    let with = with_snapshots(&h);
    let _a = h.start_probe("skip", 0, move |s| with(s).with_recovery(skip_snapshots));
    expect_missing(&mut h, "skip", "events 1 to 4 are missing").await;

    // The same events from the snapshot that covers them recover in full.
    let _b = h.start_probe("skip", 0, with_snapshots(&h));
    assert_eq!(
        h.next_seen().await,
        Seen::Recovered {
            pid: "skip".into(),
            last_seq_nr: 6,
            replayed: (1..=6).map(|i| named(&format!("e{i}"))).collect(),
        }
    );
}

async fn a_recovery_skipping_snapshots_over_a_journal_deleted_to_its_end_fails(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    // Every event deleted under the snapshot at 6: nothing is left to replay.
    events(&h, "skip-all", 6, 6).await;
    snapshot(&h, "skip-all", 6).await;
    let skip_snapshots = Recovery {
        from_snapshot: SnapshotSelectionCriteria::none(),
        ..Recovery::latest()
    };
    let with = with_snapshots(&h);
    let _a = h.start_probe("skip-all", 0, move |s| {
        with(s).with_recovery(skip_snapshots)
    });
    expect_missing(
        &mut h,
        "skip-all",
        "events 1 to 6 are missing between the start",
    )
    .await;

    // The snapshot that covers them recovers them.
    let _b = h.start_probe("skip-all", 0, with_snapshots(&h));
    assert_eq!(
        h.next_seen().await,
        Seen::Recovered {
            pid: "skip-all".into(),
            last_seq_nr: 6,
            replayed: (1..=6).map(|i| named(&format!("e{i}"))).collect(),
        }
    );
}

async fn a_recovery_to_a_seq_nr_below_the_snapshot_over_deleted_events_fails(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    // Events up to 8 deleted under the snapshot at 8; recovering up to 5 needs events 1 to 5.
    events(&h, "to-below", 10, 8).await;
    snapshot(&h, "to-below", 8).await;
    let up_to_5 = Recovery {
        to_seq_nr: 5,
        ..Recovery::latest()
    };
    let with = with_snapshots(&h);
    let _a = h.start_probe("to-below", 0, move |s| with(s).with_recovery(up_to_5));
    expect_missing(
        &mut h,
        "to-below",
        "events 1 to 5 are missing between the start",
    )
    .await;

    // Up to 9 loads the snapshot at 8 and replays 9.
    let up_to_9 = Recovery {
        to_seq_nr: 9,
        ..Recovery::latest()
    };
    let with = with_snapshots(&h);
    let _b = h.start_probe("to-below", 0, move |s| with(s).with_recovery(up_to_9));
    assert_eq!(
        h.next_seen().await,
        Seen::Recovered {
            pid: "to-below".into(),
            last_seq_nr: 10,
            replayed: (1..=9).map(|i| named(&format!("e{i}"))).collect(),
        }
    );
}

async fn new_events_after_a_full_cleanup_need_a_snapshot_at_its_end(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    // Every event deleted (a full cleanup), then one more stored: 1 to 6 are now a hole.
    events(&h, "reset", 6, 6).await;
    let store = h.control.stored();
    let results = store
        .write_messages(vec![
            AtomicWrite::new(vec![event_repr("reset", 7)]).expect("shape")
        ])
        .await
        .expect("stored");
    assert!(results.iter().all(Result::is_ok));
    let _a = h.start_probe("reset", 0, with_snapshots(&h));
    expect_missing(
        &mut h,
        "reset",
        "events 1 to 6 are missing between the start",
    )
    .await;

    // A snapshot at the cleanup's end (what the documentation asks for) covers them.
    snapshot(&h, "reset", 6).await;
    let _b = h.start_probe("reset", 0, with_snapshots(&h));
    assert_eq!(
        h.next_seen().await,
        Seen::Recovered {
            pid: "reset".into(),
            last_seq_nr: 7,
            replayed: (1..=7).map(|i| named(&format!("e{i}"))).collect(),
        }
    );
}

on_every_store!(
    new_events_after_a_full_cleanup_need_a_snapshot_at_its_end,
    recovery_fails_when_events_after_the_loaded_snapshot_were_deleted,
    recovery_fails_when_no_event_follows_a_snapshot_older_than_the_deleted_ones,
    recovery_without_a_snapshot_fails_when_the_first_events_were_deleted,
    an_explicit_recovery_skipping_snapshots_over_deleted_events_fails,
    a_recovery_skipping_snapshots_over_a_journal_deleted_to_its_end_fails,
    a_recovery_to_a_seq_nr_below_the_snapshot_over_deleted_events_fails,
);
