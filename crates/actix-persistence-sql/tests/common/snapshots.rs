//! The snapshot store conformance cases S1-S12, for any [`SnapshotStore`]; each SQL backend's
//! test file runs every case against a fresh store of its own.
//!
//! Setup before every case: snapshots `s-1`..`s-5` of a fresh persistence id at seq 11..15,
//! with distinct, increasing timestamps m1..m5.

use actix_persistence_core::{
    SelectedSnapshot, SerializedSnapshot, SnapshotMetadata, SnapshotSelectionCriteria,
    SnapshotStore,
};
use serde::{Serialize, Serializer};

/// The persistence id the setup writes.
pub const PID: &str = "snapshot-p-1";

/// Timestamp of snapshot `s-i`: ms since the epoch, distinct and increasing.
pub fn timestamp(i: u64) -> i64 {
    1_712_000_000_000 + 1_000 * i as i64
}

/// Metadata m1..m5 of the setup.
pub fn metadata(i: u64) -> SnapshotMetadata {
    SnapshotMetadata {
        persistence_id: PID.to_owned(),
        seq_nr: 10 + i,
        timestamp: timestamp(i),
    }
}

/// A snapshot with this payload, serializer 1 and a manifest naming it.
pub fn snapshot(payload: &[u8]) -> SerializedSnapshot {
    SerializedSnapshot {
        payload: payload.to_vec(),
        serializer_id: 1,
        manifest: "State".to_owned(),
    }
}

/// Saves `s-1`..`s-5` at seq 11..15 and returns m1..m5 (index 0 is m1).
pub async fn setup(store: &impl SnapshotStore) -> Vec<SnapshotMetadata> {
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

pub async fn s1_load_of_an_id_without_snapshots_is_none(store: &impl SnapshotStore) {
    setup(store).await;
    let loaded = store
        .load("snapshot-never-saved", SnapshotSelectionCriteria::latest())
        .await
        .expect("load");
    assert_eq!(loaded, None);
    // Nor does a prefix or a case variant of a saved id match.
    for other in ["snapshot-p-", "Snapshot-p-1", "snapshot-p-1 "] {
        let loaded = store
            .load(other, SnapshotSelectionCriteria::latest())
            .await
            .expect("load");
        assert_eq!(loaded, None, "{other:?}");
    }
}

pub async fn s2_load_with_max_timestamp_before_all_is_none(store: &impl SnapshotStore) {
    setup(store).await;
    assert_eq!(load(store, criteria(u64::MAX, 100)).await, None);
}

pub async fn s3_load_with_max_seq_nr_before_all_is_none(store: &impl SnapshotStore) {
    setup(store).await;
    assert_eq!(load(store, criteria(7, i64::MAX)).await, None);
    assert_eq!(load(store, SnapshotSelectionCriteria::none()).await, None);
}

pub async fn s4_load_latest_gives_the_newest(store: &impl SnapshotStore) {
    setup(store).await;
    assert_is(load(store, SnapshotSelectionCriteria::latest()).await, 5);
}

pub async fn s5_load_with_max_seq_nr_gives_the_newest_at_or_below(store: &impl SnapshotStore) {
    setup(store).await;
    assert_is(load(store, SnapshotSelectionCriteria::up_to(13)).await, 3);
}

pub async fn s6_load_with_max_seq_nr_and_max_timestamp(store: &impl SnapshotStore) {
    let m = setup(store).await;
    assert_is(load(store, criteria(13, m[2].timestamp)).await, 3);
    // The timestamp bound alone selects too.
    assert_is(load(store, criteria(u64::MAX, m[1].timestamp)).await, 2);
    // And the lower bounds.
    let between = SnapshotSelectionCriteria {
        max_seq_nr: 14,
        max_timestamp: i64::MAX,
        min_seq_nr: 12,
        min_timestamp: m[1].timestamp,
    };
    assert_is(load(store, between).await, 4);
    let above_all = SnapshotSelectionCriteria {
        min_seq_nr: 16,
        ..SnapshotSelectionCriteria::latest()
    };
    assert_eq!(load(store, above_all).await, None);
}

pub async fn s7_delete_one_then_load_gives_the_one_before(store: &impl SnapshotStore) {
    let m = setup(store).await;
    store.delete(&m[2]).await.expect("delete");
    assert_is(load(store, SnapshotSelectionCriteria::up_to(13)).await, 2);
    // The others are untouched.
    assert_is(load(store, SnapshotSelectionCriteria::latest()).await, 5);
}

pub async fn s7_delete_with_timestamp_0_matches_any_and_a_wrong_one_none(
    store: &impl SnapshotStore,
) {
    let m = setup(store).await;
    let wrong = SnapshotMetadata {
        timestamp: m[2].timestamp + 1,
        ..m[2].clone()
    };
    store.delete(&wrong).await.expect("delete");
    assert_is(load(store, SnapshotSelectionCriteria::up_to(13)).await, 3);
    let any = SnapshotMetadata {
        timestamp: 0,
        ..m[2].clone()
    };
    store.delete(&any).await.expect("delete");
    assert_is(load(store, SnapshotSelectionCriteria::up_to(13)).await, 2);
    // Deleting what is gone succeeds.
    store.delete(&any).await.expect("delete again");
}

pub async fn s8_delete_matching_removes_every_match(store: &impl SnapshotStore) {
    let m = setup(store).await;
    let c = criteria(13, m[2].timestamp);
    store
        .delete_matching(PID, c)
        .await
        .expect("delete matching");
    assert_eq!(load(store, c).await, None);
    assert_is(load(store, criteria(14, m[3].timestamp)).await, 4);
}

pub async fn s9_delete_matching_keeps_a_snapshot_outside_the_timestamp_bound(
    store: &impl SnapshotStore,
) {
    let m = setup(store).await;
    store
        .delete_matching(PID, criteria(14, m[3].timestamp - 1))
        .await
        .expect("delete matching");
    assert_is(load(store, criteria(14, m[3].timestamp)).await, 4);
    // s-1..s-3 are gone, s-5 is kept.
    assert_eq!(
        load(store, SnapshotSelectionCriteria::up_to(13)).await,
        None
    );
    assert_is(load(store, SnapshotSelectionCriteria::latest()).await, 5);
}

pub async fn s10_saving_again_at_a_seq_nr_replaces_the_snapshot(store: &impl SnapshotStore) {
    setup(store).await;
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
    let loaded = load(store, SnapshotSelectionCriteria::latest())
        .await
        .expect("a snapshot");
    assert_eq!(loaded.metadata, modified);
    assert_eq!(loaded.snapshot, payload);
    // Still one snapshot at seq 15: deleting it leaves s-4 as the newest.
    store.delete(&modified).await.expect("delete");
    assert_is(load(store, SnapshotSelectionCriteria::latest()).await, 4);
}

/// Bytes that are not a repetition of a short pattern, so a truncated or shifted copy shows.
fn varied_bytes(len: usize) -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

pub async fn s11_large_snapshots_round_trip_byte_exact(store: &impl SnapshotStore) {
    setup(store).await;
    for (seq_nr, len) in [(20, 10_000), (21, 50 * 1024 * 1024)] {
        let payload = varied_bytes(len);
        let m = SnapshotMetadata {
            persistence_id: PID.to_owned(),
            seq_nr,
            timestamp: timestamp(seq_nr),
        };
        store
            .save(m.clone(), snapshot(&payload))
            .await
            .unwrap_or_else(|e| panic!("save {len} bytes: {e}"));
        let loaded = load(store, SnapshotSelectionCriteria::up_to(seq_nr))
            .await
            .expect("a snapshot");
        assert_eq!(loaded.metadata, m);
        assert_eq!(loaded.snapshot.payload.len(), len);
        assert!(loaded.snapshot.payload == payload, "{len} bytes differ");
    }
}

/// A state whose serialization fails.
struct Unserializable;

impl Serialize for Unserializable {
    fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom(
            "this state refuses to be serialized",
        ))
    }
}

pub async fn s12_unserializable_snapshot_is_an_error_and_saves_nothing(store: &impl SnapshotStore) {
    setup(store).await;
    let error = SerializedSnapshot::json(&Unserializable).expect_err("serialization fails");
    assert!(
        error
            .to_string()
            .contains("this state refuses to be serialized"),
        "{error}"
    );
    // The saver has nothing to save; what was saved is unchanged.
    assert_is(load(store, SnapshotSelectionCriteria::latest()).await, 5);
    for i in 1..=4 {
        assert_is(
            load(store, SnapshotSelectionCriteria::up_to(10 + i)).await,
            i,
        );
    }
}

pub async fn snapshots_of_other_ids_are_untouched(store: &impl SnapshotStore) {
    setup(store).await;
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
    assert_eq!(load(store, SnapshotSelectionCriteria::latest()).await, None);
    let kept = store
        .load(&other.persistence_id, SnapshotSelectionCriteria::latest())
        .await
        .expect("load")
        .expect("the other id's snapshot");
    assert_eq!(kept.metadata, other);
    assert_eq!(kept.snapshot.payload, b"other");
}

pub async fn seq_nr_0_and_bounds_above_i64_max_work(store: &impl SnapshotStore) {
    let zero = SnapshotMetadata {
        persistence_id: PID.to_owned(),
        seq_nr: 0,
        timestamp: timestamp(0),
    };
    store
        .save(zero.clone(), snapshot(b"s-0"))
        .await
        .expect("save");
    let loaded = load(store, SnapshotSelectionCriteria::latest())
        .await
        .expect("a snapshot");
    assert_eq!(loaded.metadata, zero);
    let unreachable = SnapshotSelectionCriteria {
        min_seq_nr: u64::MAX,
        ..SnapshotSelectionCriteria::latest()
    };
    assert_eq!(load(store, unreachable).await, None);
    store
        .delete_matching(PID, unreachable)
        .await
        .expect("delete matching nothing");
    assert!(load(store, SnapshotSelectionCriteria::latest())
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
    let loaded = load(store, SnapshotSelectionCriteria::latest())
        .await
        .expect("a snapshot");
    assert_eq!(loaded.metadata, zero);
}
