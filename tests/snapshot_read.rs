//! Snapshots are read back with the actor's `Snapshotting`: a stored snapshot that does not
//! decode fails recovery with an error that names the snapshot, not an event.

mod support;

use std::time::Duration;

use actix_persistence::snapshot::{SerializedSnapshot, SnapshotMetadata};
use support::*;

#[actix::test]
async fn a_snapshot_of_the_wrong_shape_fails_recovery_naming_the_snapshot() {
    let mut h = Harness::new(1);
    let metadata = SnapshotMetadata {
        persistence_id: "cart-9".to_owned(),
        seq_nr: 3,
        timestamp: 0,
    };
    // The probe's snapshot is a list of events; this one is a number.
    let snapshot = SerializedSnapshot::json(&42).expect("serialize");
    h.snapshots.save(metadata, snapshot).await.expect("save");

    h.start_probe("cart-9", 0, |state| {
        state.with_snapshot_store(h.snapshots.clone(), Duration::from_secs(5))
    });
    match h.next_seen().await {
        Seen::RecoveryFailed { pid, error } => {
            assert_eq!(pid, "cart-9");
            assert!(
                error.contains("snapshot at sequence number 3 could not be read"),
                "{error}"
            );
            assert!(!error.contains("event at"), "{error}");
        }
        other => panic!("expected a recovery failure, saw {other:?}"),
    }
}
