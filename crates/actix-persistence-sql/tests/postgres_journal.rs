//! What only the PostgreSQL journal does: rejecting text PostgreSQL cannot store, serializer
//! ids as the `INTEGER` with the same bits, migrations run by several processes at once, the
//! server-side statement timeout, and passwords kept out of errors. A test that needs a server
//! runs in a database of its own (feature `test-util`; skipped without `DATABASE_URL`, except in
//! CI). What both journals do is tested once for both, in `journal_*.rs`.
#![cfg(feature = "postgres")]

mod common;

use std::time::Duration;

use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions, SqlStoreError};

#[tokio::test]
async fn empty_url_is_refused_before_connecting() {
    let options = PostgresJournalOptions::new("");
    match PostgresJournal::connect(&options).await {
        Err(SqlStoreError::InvalidOption { option, .. }) => assert_eq!(option, "url"),
        other => panic!("expected an invalid option, got {other:?}"),
    }
}

#[tokio::test]
async fn password_in_the_url_never_shows_in_a_connect_error() {
    let options = PostgresJournalOptions {
        acquire_timeout: Duration::from_secs(2),
        ..PostgresJournalOptions::new("postgres://app:hunter2@127.0.0.1:1/events")
    };
    match PostgresJournal::connect(&options).await {
        Err(error @ SqlStoreError::Connect { .. }) => {
            let message = error.to_string();
            assert!(!message.contains("hunter2"), "{message}");
            assert!(
                message.contains("postgres://app:***@127.0.0.1:1/events"),
                "{message}"
            );
        }
        other => panic!("expected a connect error, got {other:?}"),
    }
}

#[test]
fn default_options_are_documented_values() {
    let options = PostgresJournalOptions::default();
    assert_eq!(options.url, "");
    assert_eq!(options.max_connections, 10);
    assert_eq!(options.acquire_timeout, Duration::from_secs(5));
    assert_eq!(options.statement_timeout, Duration::from_secs(10));
    assert_eq!(options.max_batch_size, 512);
    assert_eq!(options.replay_batch_size, 500);
    assert_eq!(
        PostgresJournalOptions::new("postgres://h/d").url,
        "postgres://h/d"
    );
}

/// The tests that need a server: each in a database of its own.
#[cfg(feature = "test-util")]
mod on_a_server {
    use std::time::Duration;

    use actix_persistence_core::{AtomicWrite, AtomicWriteError, JournalStore, MAX_SEQ_NR};
    use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions};

    use crate::common::postgres::PostgresDb;
    use crate::common::{
        self, assert_write_failed_with, atomic, event, recover, write_all_ok, TestBackend,
    };

    const MAX: u64 = MAX_SEQ_NR;

    #[tokio::test]
    async fn text_holding_nul_is_rejected_not_failed() {
        common::run(|db: PostgresDb| async move {
            let journal = db.journal().await;
            let mut nul_writer = event("p-1", 2);
            nul_writer.writer_uuid = "w\0".to_owned();
            let mut nul_manifest = event("p-1", 3);
            nul_manifest.manifest = "\0".to_owned();
            let mut nul_tag = event("p-1", 4);
            nul_tag.tags = vec!["ok".to_owned(), "t\0".to_owned()];
            let results = journal
                .write_messages(vec![
                    atomic("a\0b", 1..=1),
                    atomic("p-1", 1..=1),
                    AtomicWrite::new(vec![nul_writer]).unwrap(),
                    AtomicWrite::new(vec![nul_manifest]).unwrap(),
                    AtomicWrite::new(vec![nul_tag]).unwrap(),
                ])
                .await
                .unwrap();
            assert_eq!(results.len(), 5);
            match &results[0] {
                Err(AtomicWriteError::Rejected(rejection)) => {
                    assert_eq!(rejection.persistence_id, "a\0b");
                    assert!(rejection.reason.contains("NUL"), "{}", rejection.reason);
                }
                other => panic!("expected a rejection, got {other:?}"),
            }
            assert!(results[1].is_ok(), "{:?}", results[1]);
            for (result, field) in results[2..].iter().zip(["writer id", "manifest", "tag"]) {
                match result {
                    Err(AtomicWriteError::Rejected(rejection)) => {
                        assert!(rejection.reason.contains(field), "{}", rejection.reason);
                    }
                    other => panic!("expected a rejection of the {field}, got {other:?}"),
                }
            }
            assert_eq!(recover(&journal, "p-1", 1, MAX, MAX).await, (vec![1], 1));
            // An id holding NUL has nothing stored, and asking is no error.
            assert_eq!(recover(&journal, "a\0b", 1, MAX, MAX).await, (vec![], 0));
            journal.delete_messages_to("a\0b", MAX).await.unwrap();
        })
        .await;
    }

    #[tokio::test]
    async fn serializer_ids_are_stored_as_the_integer_with_the_same_bits() {
        common::run(|db: PostgresDb| async move {
            let journal = db.journal().await;
            let events = [u32::MAX, 0, 7]
                .into_iter()
                .zip(1..)
                .map(|(serializer_id, seq_nr)| {
                    let mut event = event("ids", seq_nr);
                    event.serializer_id = serializer_id;
                    event
                })
                .collect();
            write_all_ok(&journal, vec![AtomicWrite::new(events).unwrap()]).await;
            let ids = db
                .query_i64s(
                    "SELECT serializer_id::bigint FROM journal \
                     WHERE persistence_id = 'ids' ORDER BY seq_nr",
                )
                .await;
            assert_eq!(ids, vec![-1, 0, 7]);
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn journals_connecting_at_once_to_a_fresh_database_all_migrate_it() {
        common::run(|db: PostgresDb| async move {
            let options = db.options(&[]);
            let connects = (0..4).map(|_| PostgresJournal::connect(&options));
            let journals = futures::future::join_all(connects).await;
            for (i, journal) in journals.iter().enumerate() {
                let journal = journal
                    .as_ref()
                    .unwrap_or_else(|e| panic!("journal {i}: {e}"));
                let pid = format!("p-{i}");
                write_all_ok(journal, vec![atomic(&pid, 1..=1)]).await;
            }
            let journal = journals[0].as_ref().unwrap();
            for i in 0..4 {
                assert_eq!(
                    recover(journal, &format!("p-{i}"), 1, MAX, MAX).await,
                    (vec![1], 1)
                );
            }
        })
        .await;
    }

    #[tokio::test]
    async fn statement_timeout_cancels_a_slow_write_which_then_fails_alone() {
        common::run(|db: PostgresDb| async move {
            let options = PostgresJournalOptions {
                statement_timeout: Duration::from_millis(500),
                ..db.options(&[])
            };
            let journal = PostgresJournal::connect(&options).await.expect("connect");
            db.execute(
                "CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN PERFORM pg_sleep(30); RETURN NEW; END $$",
            )
            .await;
            db.execute(
                "CREATE TRIGGER slow_insert BEFORE INSERT ON journal FOR EACH ROW \
                 WHEN (NEW.persistence_id = 'slow') EXECUTE FUNCTION slow_insert()",
            )
            .await;
            let results = journal
                .write_messages(vec![atomic("slow", 1..=1), atomic("fast", 1..=1)])
                .await
                .unwrap();
            assert_write_failed_with(&results[0], "statement timeout");
            assert!(results[1].is_ok(), "{:?}", results[1]);
            assert_eq!(recover(&journal, "slow", 1, MAX, MAX).await, (vec![], 0));
            assert_eq!(recover(&journal, "fast", 1, MAX, MAX).await, (vec![1], 1));
            journal.close().await;
        })
        .await;
    }
}
