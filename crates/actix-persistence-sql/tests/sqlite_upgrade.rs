//! A database written by release 0.1.0 (before the query columns of migration 0003) opens
//! with this release and answers queries over its existing events. The fixture
//! `tests/fixtures/release-0.1.0.db` was written by the 0.1.0 `SqliteJournal`: ids
//! `counter-1`, `Account|1`, `Account|2` and `Order|7` with events 1..5 each (payload
//! `{"Added":n}`, odd events tagged `odd`), then `Order|7` deleted up to 2.

#[path = "common/migrations.rs"]
mod migrations;

use actix_persistence_core::query::{
    slice_for_persistence_id, EnvelopeStream, Offset, QuerySettings, ReadJournal,
};
use actix_persistence_core::{AtomicWrite, JournalStore, PersistentRepr, MAX_SEQ_NR};
use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions};
use futures::TryStreamExt;

/// A copy of the fixture (opening it migrates it), and the journal on it.
async fn open_copy_of_fixture() -> (SqliteJournal, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("release-0.1.0.db");
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/release-0.1.0.db"
    );
    std::fs::copy(fixture, &path).expect("copy the fixture");
    let url = format!("sqlite:{}", path.display());
    let journal = SqliteJournal::connect(&SqliteJournalOptions::new(url))
        .await
        .expect("a 0.1.0 database opens");
    (journal, dir)
}

async fn keys(stream: EnvelopeStream) -> Vec<(String, u64)> {
    stream
        .map_ok(|e| (e.persistence_id.to_string(), e.seq_nr))
        .try_collect()
        .await
        .expect("query")
}

fn query(journal: &SqliteJournal) -> ReadJournal {
    ReadJournal::new(journal.clone(), QuerySettings::default())
}

#[tokio::test]
async fn a_release_0_1_0_database_answers_queries_by_slice() {
    let (journal, _dir) = open_copy_of_fixture().await;
    let accounts =
        keys(query(&journal).current_events_by_slices("Account", 0, 1023, Offset::NoOffset)).await;
    let mut expected: Vec<(String, u64)> = (1..=5)
        .flat_map(|n| [("Account|1".to_owned(), n), ("Account|2".to_owned(), n)])
        .collect();
    // Written in rounds: `Account|1` n, then `Account|2` n.
    assert_eq!(accounts, expected);
    // The slices of the old rows were computed on open: a range holding only `Account|1`.
    let slice = slice_for_persistence_id("Account|1");
    let only_one =
        keys(query(&journal).current_events_by_slices("Account", slice, slice, Offset::NoOffset))
            .await;
    expected.retain(|(id, _)| id == "Account|1");
    assert_eq!(only_one, expected);
    // Ids without a separator are the entity type "".
    let counters =
        keys(query(&journal).current_events_by_slices("", 0, 1023, Offset::NoOffset)).await;
    assert_eq!(
        counters,
        (1..=5)
            .map(|n| ("counter-1".to_owned(), n))
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_release_0_1_0_database_answers_queries_by_tag_and_id_without_deleted_events() {
    let (journal, _dir) = open_copy_of_fixture().await;
    let odd = keys(query(&journal).current_events_by_tag("odd", Offset::NoOffset)).await;
    assert_eq!(
        odd.len(),
        4 * 3 - 1,
        "events 1, 3, 5 of four ids, minus the deleted Order|7 1"
    );
    assert!(!odd.contains(&("Order|7".to_owned(), 1)));
    let order =
        keys(query(&journal).current_events_by_persistence_id("Order|7", 1, MAX_SEQ_NR)).await;
    assert_eq!(
        order,
        (3..=5)
            .map(|n| ("Order|7".to_owned(), n))
            .collect::<Vec<_>>()
    );
    let ids: Vec<String> = query(&journal)
        .current_persistence_ids(None, 10)
        .try_collect()
        .await
        .expect("ids");
    assert_eq!(ids, vec!["Account|1", "Account|2", "Order|7", "counter-1"]);
}

#[tokio::test]
async fn new_events_in_a_release_0_1_0_database_follow_the_old_ones() {
    let (journal, _dir) = open_copy_of_fixture().await;
    let event = PersistentRepr {
        persistence_id: "Account|1".into(),
        seq_nr: 6,
        payload: br#"{"Added":6}"#.to_vec(),
        serializer_id: 1,
        manifest: String::new(),
        writer_uuid: "new".into(),
        timestamp: 0,
        tags: vec![].into(),
    };
    let results = journal
        .write_messages(vec![AtomicWrite::new(vec![event]).expect("shape")])
        .await
        .expect("write");
    assert!(results[0].is_ok());
    let accounts =
        keys(query(&journal).current_events_by_slices("Account", 0, 1023, Offset::NoOffset)).await;
    assert_eq!(accounts.len(), 11);
    assert_eq!(accounts.last(), Some(&("Account|1".to_owned(), 6)));
}

/// A database brought up to migration 0006 (the schema before the tag index) holding a row
/// whose tags are not valid JSON (edited by hand), beside good tagged rows: the new release
/// opens it (migration 0007's backfill skips the bad row instead of failing), indexes the good
/// rows, and the insert trigger skips a bad row written afterwards instead of failing it.
#[tokio::test]
async fn migration_0007_skips_rows_whose_tags_are_not_json() {
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("at-0006.db");
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::new()
                .filename(&path)
                .create_if_missing(true),
        )
        .await
        .expect("create the database");
    let migrator = migrations::migrator_up_to("sqlite", 6).await;
    migrator.run(&pool).await.expect("migrate up to 0006");
    let insert = "INSERT INTO journal (persistence_id, seq_nr, writer_uuid, write_timestamp, \
                  serializer_id, manifest, payload, tags, db_timestamp, slice, entity_type) \
                  VALUES (?, ?, 'w', 1, 1, '', x'7b7d', ?, ?, 0, 'Tagged')";
    for (pid, seq_nr, tags, timestamp) in [
        ("Tagged|a", 1, r#"["t"]"#, 1_000),
        ("Tagged|bad", 1, r#"["t", oops"#, 2_000),
        ("Tagged|a", 2, r#"["t","u"]"#, 3_000),
    ] {
        sqlx::query(insert)
            .bind(pid)
            .bind(seq_nr)
            .bind(tags)
            .bind(timestamp)
            .execute(&pool)
            .await
            .expect("a row at 0006");
    }
    pool.close().await;

    let url = format!("sqlite:{}", path.display());
    let journal = SqliteJournal::connect(&SqliteJournalOptions::new(url.clone()))
        .await
        .expect("a database with a bad-tags row opens");
    let tagged = keys(query(&journal).current_events_by_tag("t", Offset::NoOffset)).await;
    assert_eq!(
        tagged,
        vec![("Tagged|a".to_owned(), 1), ("Tagged|a".to_owned(), 2)]
    );
    let u = keys(query(&journal).current_events_by_tag("u", Offset::NoOffset)).await;
    assert_eq!(u, vec![("Tagged|a".to_owned(), 2)]);

    // A bad row inserted after the migration is stored, without index rows.
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .expect("reopen");
    sqlx::query(insert)
        .bind("Tagged|bad")
        .bind(2)
        .bind("not json")
        .bind(4_000)
        .execute(&pool)
        .await
        .expect("the insert trigger skips bad tags");
    let indexed: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT tag, persistence_id, seq_nr FROM event_tag ORDER BY 1, 2, 3")
            .fetch_all(&pool)
            .await
            .expect("event_tag");
    assert_eq!(
        indexed,
        vec![
            ("t".to_owned(), "Tagged|a".to_owned(), 1),
            ("t".to_owned(), "Tagged|a".to_owned(), 2),
            ("u".to_owned(), "Tagged|a".to_owned(), 2),
        ]
    );
}
