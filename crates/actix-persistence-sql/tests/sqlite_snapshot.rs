//! The SQLite snapshot store: cases S1-S12 of the snapshot store conformance, each on a
//! database file of its own, and sharing a database with the journal.
#![cfg(feature = "sqlite")]

mod common;

use actix_persistence_core::{
    JournalStore, SnapshotMetadata, SnapshotSelectionCriteria, SnapshotStore, MAX_SEQ_NR,
};
use actix_persistence_sql::{SqlStoreError, SqliteJournalOptions, SqliteSnapshotStore};
use common::snapshots;
use common::{recover, write_one_to_five, TestJournal};
use tempfile::TempDir;

/// A snapshot store on a database file of its own.
struct TestStore {
    store: SqliteSnapshotStore,
    _dir: TempDir,
}

async fn open() -> TestStore {
    let dir = tempfile::tempdir().expect("temporary directory");
    let url = format!("sqlite:{}", dir.path().join("snapshots.db").display());
    let store = SqliteSnapshotStore::connect(&SqliteJournalOptions::new(url))
        .await
        .expect("open a fresh database file");
    TestStore { store, _dir: dir }
}

macro_rules! cases {
    ($($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let db = open().await;
                snapshots::$case(&db.store).await;
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
    let db = TestJournal::open().await;
    let store = db.journal.snapshot_store();
    write_one_to_five(&db.journal, "p-1").await;
    snapshots::setup(&store).await;

    // The same file, opened again by a snapshot store of its own, sees the snapshots.
    let reopened = SqliteSnapshotStore::connect(&SqliteJournalOptions::new(db.url.clone()))
        .await
        .expect("open the journal's file");
    let loaded = reopened
        .load(snapshots::PID, SnapshotSelectionCriteria::latest())
        .await
        .expect("load")
        .expect("a snapshot");
    assert_eq!(loaded.metadata, snapshots::metadata(5));
    assert_eq!(
        recover(&db.journal, "p-1", 1, MAX_SEQ_NR, MAX_SEQ_NR).await,
        (vec![1, 2, 3, 4, 5], 5)
    );
    reopened.close().await;
}

#[tokio::test]
async fn snapshot_store_of_a_journal_is_closed_with_it() {
    let db = TestJournal::open().await;
    let store = db.journal.snapshot_store();
    db.journal.close().await;
    let error = store
        .save(
            SnapshotMetadata {
                persistence_id: "p".to_owned(),
                seq_nr: 1,
                timestamp: 1,
            },
            snapshots::snapshot(b"x"),
        )
        .await
        .expect_err("a closed store fails");
    assert!(error.to_string().contains("during save"), "{error}");
    assert!(db.journal.read_highest_sequence_nr("p", 0).await.is_err());
}

#[tokio::test]
async fn connect_to_a_missing_directory_names_the_url() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let url = format!("sqlite:{}", dir.path().join("no/such/dir/s.db").display());
    match SqliteSnapshotStore::connect(&SqliteJournalOptions::new(url.clone())).await {
        Err(SqlStoreError::Connect { url: named, .. }) => assert_eq!(named, url),
        other => panic!("expected a connect error, got {other:?}"),
    }
}
