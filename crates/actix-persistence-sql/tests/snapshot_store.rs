//! The snapshot stores, on SQLite and on PostgreSQL, beyond the conformance cases S1-S14 (which
//! run in `conformance.rs`): ids that match exactly, lower bounds, deletes by timestamp 0, a
//! replaced serializer id and manifest, other ids left alone, sequence numbers at the edges of
//! the columns, and a store that shares a journal's database.
//!
//! Setup of most tests: snapshots `s-1`..`s-5` of [`PID`] at seq 11..15, with distinct,
//! increasing timestamps m1..m5.
#![cfg(any(feature = "sqlite", feature = "test-util"))]

mod common;

use actix_persistence_core::{
    JournalStore, SelectedSnapshot, SerializedSnapshot, SnapshotMetadata,
    SnapshotSelectionCriteria, SnapshotStore, MAX_SEQ_NR,
};
use common::{backend_tests, recover, write_one_to_five, TestBackend};

backend_tests! {
    load_matches_the_persistence_id_exactly,
    lower_bounds_and_a_timestamp_bound_alone_select_too,
    delete_with_timestamp_0_matches_any_and_a_wrong_one_none,
    saving_again_replaces_the_serializer_id_and_manifest,
    snapshots_of_other_ids_are_untouched,
    seq_nr_0_and_bounds_above_i64_max_work,
    snapshot_store_of_a_journal_shares_its_database,
    snapshot_store_of_a_journal_is_closed_with_it,
}

/// The persistence id the setup writes.
const PID: &str = "snapshot-p-1";

/// Timestamp of snapshot `s-i`: ms since the epoch, distinct and increasing.
fn timestamp(i: u64) -> i64 {
    1_712_000_000_000 + 1_000 * i as i64
}

/// Metadata m1..m5 of the setup.
fn metadata(i: u64) -> SnapshotMetadata {
    SnapshotMetadata {
        persistence_id: PID.to_owned(),
        seq_nr: 10 + i,
        timestamp: timestamp(i),
    }
}

/// A snapshot with this payload, serializer 1 and a manifest naming it.
fn snapshot(payload: &[u8]) -> SerializedSnapshot {
    SerializedSnapshot {
        payload: payload.to_vec(),
        serializer_id: 1,
        manifest: "State".to_owned(),
    }
}

/// Saves `s-1`..`s-5` at seq 11..15 and returns m1..m5 (index 0 is m1).
async fn setup(store: &impl SnapshotStore) -> Vec<SnapshotMetadata> {
    let mut saved = Vec::new();
    for i in 1..=5 {
        let m = metadata(i);
        store
            .save(m.clone(), snapshot(format!("s-{i}").as_bytes()))
            .await
            .expect("save");
        saved.push(m);
    }
    saved
}

fn criteria(max_seq_nr: u64, max_timestamp: i64) -> SnapshotSelectionCriteria {
    SnapshotSelectionCriteria {
        max_seq_nr,
        max_timestamp,
        ..SnapshotSelectionCriteria::latest()
    }
}

async fn load(
    store: &impl SnapshotStore,
    criteria: SnapshotSelectionCriteria,
) -> Option<SelectedSnapshot> {
    store.load(PID, criteria).await.expect("load")
}

/// Asserts that `loaded` is `s-i` with metadata m_i.
fn assert_is(loaded: Option<SelectedSnapshot>, i: u64) {
    let loaded = loaded.unwrap_or_else(|| panic!("expected s-{i}, got none"));
    assert_eq!(loaded.metadata, metadata(i));
    assert_eq!(loaded.snapshot, snapshot(format!("s-{i}").as_bytes()));
}

async fn load_matches_the_persistence_id_exactly<B: TestBackend>(db: B) {
    let store = db.snapshots().await;
    setup(&store).await;
    // Neither a prefix nor a case variant of a saved id matches.
    for other in ["snapshot-p-", "Snapshot-p-1", "snapshot-p-1 "] {
        let loaded = store
            .load(other, SnapshotSelectionCriteria::latest())
            .await
            .expect("load");
        assert_eq!(loaded, None, "{other:?}");
    }
}

async fn lower_bounds_and_a_timestamp_bound_alone_select_too<B: TestBackend>(db: B) {
    let store = db.snapshots().await;
    let m = setup(&store).await;
    assert_is(load(&store, criteria(u64::MAX, m[1].timestamp)).await, 2);
    let between = SnapshotSelectionCriteria {
        max_seq_nr: 14,
        max_timestamp: i64::MAX,
        min_seq_nr: 12,
        min_timestamp: m[1].timestamp,
    };
    assert_is(load(&store, between).await, 4);
    let above_all = SnapshotSelectionCriteria {
        min_seq_nr: 16,
        ..SnapshotSelectionCriteria::latest()
    };
    assert_eq!(load(&store, above_all).await, None);
    assert_eq!(load(&store, SnapshotSelectionCriteria::none()).await, None);
}

async fn delete_with_timestamp_0_matches_any_and_a_wrong_one_none<B: TestBackend>(db: B) {
    let store = db.snapshots().await;
    let m = setup(&store).await;
    let wrong = SnapshotMetadata {
        timestamp: m[2].timestamp + 1,
        ..m[2].clone()
    };
    store.delete(&wrong).await.expect("delete");
    assert_is(load(&store, SnapshotSelectionCriteria::up_to(13)).await, 3);
    let any = SnapshotMetadata {
        timestamp: 0,
        ..m[2].clone()
    };
    store.delete(&any).await.expect("delete");
    assert_is(load(&store, SnapshotSelectionCriteria::up_to(13)).await, 2);
    // Deleting what is gone succeeds.
    store.delete(&any).await.expect("delete again");
}

async fn saving_again_replaces_the_serializer_id_and_manifest<B: TestBackend>(db: B) {
    let store = db.snapshots().await;
    setup(&store).await;
    let modified = SnapshotMetadata {
        timestamp: timestamp(6),
        ..metadata(5)
    };
    let payload = SerializedSnapshot {
        payload: b"s-5-modified".to_vec(),
        serializer_id: u32::MAX,
        manifest: "State/v2".to_owned(),
    };
    store
        .save(modified.clone(), payload.clone())
        .await
        .expect("save again");
    let loaded = load(&store, SnapshotSelectionCriteria::latest())
        .await
        .expect("a snapshot");
    assert_eq!(loaded.metadata, modified);
    assert_eq!(loaded.snapshot, payload);
    // Still one snapshot at seq 15: deleting it leaves s-4 as the newest.
    store.delete(&modified).await.expect("delete");
    assert_is(load(&store, SnapshotSelectionCriteria::latest()).await, 4);
}

async fn snapshots_of_other_ids_are_untouched<B: TestBackend>(db: B) {
    let store = db.snapshots().await;
    setup(&store).await;
    let other = SnapshotMetadata {
        persistence_id: "snapshot-p-1-other".to_owned(),
        seq_nr: 13,
        timestamp: timestamp(3),
    };
    store
        .save(other.clone(), snapshot(b"other"))
        .await
        .expect("save");
    store
        .delete_matching(PID, SnapshotSelectionCriteria::latest())
        .await
        .expect("delete matching");
    assert_eq!(
        load(&store, SnapshotSelectionCriteria::latest()).await,
        None
    );
    let kept = store
        .load(&other.persistence_id, SnapshotSelectionCriteria::latest())
        .await
        .expect("load")
        .expect("the other id's snapshot");
    assert_eq!(kept.metadata, other);
    assert_eq!(kept.snapshot.payload, b"other");
}

async fn seq_nr_0_and_bounds_above_i64_max_work<B: TestBackend>(db: B) {
    let store = db.snapshots().await;
    let zero = SnapshotMetadata {
        persistence_id: PID.to_owned(),
        seq_nr: 0,
        timestamp: timestamp(0),
    };
    store
        .save(zero.clone(), snapshot(b"s-0"))
        .await
        .expect("save");
    let loaded = load(&store, SnapshotSelectionCriteria::latest())
        .await
        .expect("a snapshot");
    assert_eq!(loaded.metadata, zero);
    let unreachable = SnapshotSelectionCriteria {
        min_seq_nr: u64::MAX,
        ..SnapshotSelectionCriteria::latest()
    };
    assert_eq!(load(&store, unreachable).await, None);
    store
        .delete_matching(PID, unreachable)
        .await
        .expect("delete matching nothing");
    assert!(load(&store, SnapshotSelectionCriteria::latest())
        .await
        .is_some());
    // A sequence number no database column holds cannot be saved, and nothing changes.
    let too_big = SnapshotMetadata {
        seq_nr: u64::MAX,
        ..zero.clone()
    };
    let error = store
        .save(too_big.clone(), snapshot(b"too big"))
        .await
        .expect_err("above i64::MAX");
    assert!(error.to_string().contains("cannot be stored"), "{error}");
    store.delete(&too_big).await.expect("delete of nothing");
    let loaded = load(&store, SnapshotSelectionCriteria::latest())
        .await
        .expect("a snapshot");
    assert_eq!(loaded.metadata, zero);
}

async fn snapshot_store_of_a_journal_shares_its_database<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    let store = B::snapshot_store_of(&journal);
    write_one_to_five(&journal, "p-1").await;
    setup(&store).await;

    // A snapshot store of its own on the same database sees the snapshots.
    let own = db.snapshots().await;
    let loaded = own
        .load(PID, SnapshotSelectionCriteria::latest())
        .await
        .expect("load")
        .expect("a snapshot");
    assert_eq!(loaded.metadata, metadata(5));
    assert_eq!(
        recover(&journal, "p-1", 1, MAX_SEQ_NR, MAX_SEQ_NR).await,
        (vec![1, 2, 3, 4, 5], 5)
    );
}

async fn snapshot_store_of_a_journal_is_closed_with_it<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    let store = B::snapshot_store_of(&journal);
    B::close(&journal).await;
    let error = store
        .save(
            SnapshotMetadata {
                persistence_id: "p".to_owned(),
                seq_nr: 1,
                timestamp: 1,
            },
            snapshot(b"x"),
        )
        .await
        .expect_err("a closed store fails");
    assert!(error.to_string().contains("during save"), "{error}");
    assert!(journal.read_highest_sequence_nr("p", 0).await.is_err());
}
