//! Opening the database: creation, WAL, reopening, bad URLs and options, several journals on
//! one file.
#![cfg(feature = "sqlite")]

mod common;

use std::time::Duration;

use actix_persistence_core::{JournalStore, MAX_SEQ_NR};
use actix_persistence_sql::{SqlStoreError, SqliteJournal, SqliteJournalOptions};
use common::{atomic, recover, write_all_ok, write_one_to_five, TestJournal};
use sqlx::{Connection, Row};

const MAX: u64 = MAX_SEQ_NR;

#[test]
fn default_options_are_documented_values() {
    let options = SqliteJournalOptions::default();
    assert_eq!(options.url, "sqlite:actix-persistence.db");
    assert_eq!(options.max_connections, 4);
    assert_eq!(options.busy_timeout, Duration::from_secs(5));
    assert_eq!(options.replay_batch_size, 500);
    assert_eq!(SqliteJournalOptions::new("sqlite:x.db").url, "sqlite:x.db");
}

#[tokio::test]
async fn connect_creates_the_file_in_wal_mode_with_the_schema() {
    let db = TestJournal::open().await;
    let path = db.dir.path().join("journal.db");
    assert!(path.exists(), "database file created");

    let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    let tables: Vec<String> = sqlx::query(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'journal%' ORDER BY name",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .iter()
    .map(|row| row.get("name"))
    .collect();
    assert_eq!(tables, vec!["journal", "journal_highest"]);
    conn.close().await.unwrap();
}

#[tokio::test]
async fn data_survives_closing_and_reopening_the_file() {
    let db = TestJournal::open().await;
    write_one_to_five(&db.journal, "p-1").await;
    db.journal.delete_messages_to("p-1", 2).await.unwrap();
    db.journal.close().await;
    assert!(
        db.journal.read_highest_sequence_nr("p-1", 0).await.is_err(),
        "a closed journal fails instead of hanging"
    );

    // Reopening runs the migrations again, which must find nothing to do.
    let reopened = SqliteJournal::connect(&SqliteJournalOptions::new(db.url.clone()))
        .await
        .unwrap();
    assert_eq!(
        recover(&reopened, "p-1", 1, MAX, MAX).await,
        (vec![3, 4, 5], 5)
    );
    write_all_ok(&reopened, vec![atomic("p-1", 6..=6)]).await;
    assert_eq!(
        recover(&reopened, "p-1", 1, MAX, MAX).await,
        (vec![3, 4, 5, 6], 6)
    );
}

#[tokio::test]
async fn missing_directory_is_a_connect_error_naming_the_url() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite:{}",
        dir.path().join("no-such-dir").join("journal.db").display()
    );
    let error = SqliteJournal::connect(&SqliteJournalOptions::new(url.clone()))
        .await
        .expect_err("the directory does not exist");
    match &error {
        SqlStoreError::Connect { url: named, .. } => assert_eq!(named, &url),
        other => panic!("expected a connect error, got {other:?}"),
    }
    assert!(error.to_string().contains(&url), "{error}");
}

#[tokio::test]
async fn url_of_another_database_is_a_connect_error_naming_it() {
    let url = "postgres://localhost/journal";
    let error = SqliteJournal::connect(&SqliteJournalOptions::new(url))
        .await
        .expect_err("not a SQLite URL");
    assert!(
        matches!(&error, SqlStoreError::Connect { url: named, .. } if named == url),
        "{error:?}"
    );
    assert!(error.to_string().contains(url), "{error}");
}

#[tokio::test]
async fn zero_connections_or_batch_size_is_an_invalid_option() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("journal.db").display());
    let zero_connections = SqliteJournalOptions {
        max_connections: 0,
        ..SqliteJournalOptions::new(url.clone())
    };
    let error = SqliteJournal::connect(&zero_connections).await.unwrap_err();
    assert!(
        matches!(
            error,
            SqlStoreError::InvalidOption {
                option: "max_connections",
                ..
            }
        ),
        "{error:?}"
    );
    let zero_batch = SqliteJournalOptions {
        replay_batch_size: 0,
        ..SqliteJournalOptions::new(url)
    };
    let error = SqliteJournal::connect(&zero_batch).await.unwrap_err();
    assert!(
        matches!(
            error,
            SqlStoreError::InvalidOption {
                option: "replay_batch_size",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(!dir.path().join("journal.db").exists(), "nothing created");
}

#[tokio::test]
async fn in_memory_database_works_while_the_journal_lives() {
    let journal = SqliteJournal::connect(&SqliteJournalOptions::new("sqlite::memory:"))
        .await
        .unwrap();
    write_one_to_five(&journal, "p-1").await;
    journal.delete_messages_to("p-1", 1).await.unwrap();
    assert_eq!(
        recover(&journal, "p-1", 1, MAX, MAX).await,
        (vec![2, 3, 4, 5], 5)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_journals_on_one_file_write_concurrently_without_busy_errors() {
    let db = TestJournal::open().await;
    let other = SqliteJournal::connect(&SqliteJournalOptions::new(db.url.clone()))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for task in 0..20u64 {
        let journal = if task % 2 == 0 {
            db.journal.clone()
        } else {
            other.clone()
        };
        tasks.push(tokio::spawn(async move {
            let pid = format!("shared-{task}");
            let writes = (1..=10).map(|n| atomic(&pid, n..=n)).collect();
            journal.write_messages(writes).await
        }));
    }
    for task in tasks {
        let results = task.await.unwrap().unwrap();
        assert_eq!(results.len(), 10);
        for result in results {
            assert!(result.is_ok(), "{result:?}");
        }
    }
    for task in 0..20u64 {
        let pid = format!("shared-{task}");
        assert_eq!(
            recover(&other, &pid, 1, MAX, MAX).await,
            ((1..=10).collect(), 10)
        );
    }
}
