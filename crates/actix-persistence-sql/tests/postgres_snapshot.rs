//! What only the PostgreSQL snapshot store does: refusing text PostgreSQL cannot store. The
//! test runs in a database of its own (skipped without `DATABASE_URL`, except in CI). What
//! both snapshot stores do is tested once for both, in `snapshot_store.rs` and
//! `conformance.rs`.
#![cfg(all(feature = "test-util", has_database_url))]

mod common;

use actix_persistence_core::{
    SerializedSnapshot, SnapshotMetadata, SnapshotSelectionCriteria, SnapshotStore,
};
use common::postgres::PostgresDb;
use common::TestBackend;

#[tokio::test]
async fn nul_in_persistence_id_or_manifest_is_an_error_and_stores_nothing() {
    common::run(|db: PostgresDb| async move {
        let store = db.snapshots().await;
        let snapshot = |manifest: &str| SerializedSnapshot {
            payload: b"x".to_vec(),
            serializer_id: 1,
            manifest: manifest.to_owned(),
        };
        let nul_id = SnapshotMetadata {
            persistence_id: "a\0b".to_owned(),
            seq_nr: 1,
            timestamp: 1,
        };
        let error = store
            .save(nul_id.clone(), snapshot("State"))
            .await
            .expect_err("NUL in the id");
        assert!(error.to_string().contains("NUL"), "{error}");
        let plain = SnapshotMetadata {
            persistence_id: "a".to_owned(),
            ..nul_id.clone()
        };
        let error = store
            .save(plain, snapshot("m\0"))
            .await
            .expect_err("NUL in the manifest");
        assert!(error.to_string().contains("NUL"), "{error}");
        // Reading, deleting by such an id: nothing there, no error.
        for pid in ["a\0b", "a"] {
            let loaded = store
                .load(pid, SnapshotSelectionCriteria::latest())
                .await
                .expect("load");
            assert_eq!(loaded, None, "{pid:?}");
        }
        store.delete(&nul_id).await.expect("delete");
        store
            .delete_matching("a\0b", SnapshotSelectionCriteria::latest())
            .await
            .expect("delete matching");
        store.close().await;
    })
    .await;
}
