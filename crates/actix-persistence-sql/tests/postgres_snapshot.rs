//! The PostgreSQL snapshot store: cases S1-S12 of the snapshot store conformance, each in a
//! database of its own (skipped without `DATABASE_URL`, except in CI).
#![cfg(feature = "postgres")]

mod common;

use actix_persistence_core::{
    SnapshotMetadata, SnapshotSelectionCriteria, SnapshotStore, MAX_SEQ_NR,
};
use actix_persistence_sql::PostgresSnapshotStore;
use common::postgres::with_database;
use common::snapshots;
use common::{recover, write_one_to_five};

macro_rules! cases {
    ($($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                with_database(|db| async move {
                    let store = PostgresSnapshotStore::connect(&db.options())
                        .await
                        .expect("connect");
                    snapshots::$case(&store).await;
                    store.close().await;
                })
                .await;
            }
        )*
    };
}

cases!(
    s1_load_of_an_id_without_snapshots_is_none,
    s2_load_with_max_timestamp_before_all_is_none,
    s3_load_with_max_seq_nr_before_all_is_none,
    s4_load_latest_gives_the_newest,
    s5_load_with_max_seq_nr_gives_the_newest_at_or_below,
    s6_load_with_max_seq_nr_and_max_timestamp,
    s7_delete_one_then_load_gives_the_one_before,
    s7_delete_with_timestamp_0_matches_any_and_a_wrong_one_none,
    s8_delete_matching_removes_every_match,
    s9_delete_matching_keeps_a_snapshot_outside_the_timestamp_bound,
    s10_saving_again_at_a_seq_nr_replaces_the_snapshot,
    s11_large_snapshots_round_trip_byte_exact,
    s12_unserializable_snapshot_is_an_error_and_saves_nothing,
    snapshots_of_other_ids_are_untouched,
    seq_nr_0_and_bounds_above_i64_max_work,
);

#[tokio::test]
async fn snapshot_store_of_a_journal_shares_its_database() {
    with_database(|db| async move {
        let journal = db.journal().await;
        let store = journal.snapshot_store();
        write_one_to_five(&journal, "p-1").await;
        snapshots::setup(&store).await;

        let own = PostgresSnapshotStore::connect(&db.options())
            .await
            .expect("connect");
        let loaded = own
            .load(snapshots::PID, SnapshotSelectionCriteria::latest())
            .await
            .expect("load")
            .expect("a snapshot");
        assert_eq!(loaded.metadata, snapshots::metadata(5));
        assert_eq!(
            recover(&journal, "p-1", 1, MAX_SEQ_NR, MAX_SEQ_NR).await,
            (vec![1, 2, 3, 4, 5], 5)
        );
        own.close().await;
        journal.close().await;
    })
    .await;
}

#[tokio::test]
async fn nul_in_persistence_id_or_manifest_is_an_error_and_stores_nothing() {
    with_database(|db| async move {
        let store = PostgresSnapshotStore::connect(&db.options())
            .await
            .expect("connect");
        let nul_id = SnapshotMetadata {
            persistence_id: "a\0b".to_owned(),
            seq_nr: 1,
            timestamp: 1,
        };
        let error = store
            .save(nul_id.clone(), snapshots::snapshot(b"x"))
            .await
            .expect_err("NUL in the id");
        assert!(error.to_string().contains("NUL"), "{error}");
        let mut nul_manifest = snapshots::snapshot(b"x");
        nul_manifest.manifest = "m\0".to_owned();
        let plain = SnapshotMetadata {
            persistence_id: "a".to_owned(),
            ..nul_id.clone()
        };
        let error = store
            .save(plain, nul_manifest)
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
