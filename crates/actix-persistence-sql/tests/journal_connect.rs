//! Opening a journal (and a snapshot store), on SQLite and on PostgreSQL: the schema it
//! creates, data surviving a reconnect, options refused before connecting, and connect errors
//! naming the URL.
#![cfg(any(feature = "sqlite", feature = "test-util"))]

mod common;

use actix_persistence_core::{JournalStore, MAX_SEQ_NR};
use actix_persistence_sql::SqlStoreError;
use common::{
    atomic, backend_tests, recover, write_all_ok, write_one_to_five, Setting, TestBackend,
};

const MAX: u64 = MAX_SEQ_NR;

backend_tests! {
    connect_creates_the_tables_with_a_global_ordering,
    data_survives_closing_and_reconnecting,
    invalid_options_are_refused_before_connecting,
    unreachable_database_is_a_connect_error_naming_the_url,
}

async fn connect_creates_the_tables_with_a_global_ordering<B: TestBackend>(db: B) {
    assert!(db.table_names().await.is_empty(), "a fresh database");
    let journal = db.journal().await;
    let mut tables = db.table_names().await;
    // SQLite keeps the journal's clock across deletes in a table of its own (migration 0010).
    for own in B::OWN_TABLES {
        let position = tables.iter().position(|t| t == own);
        assert!(position.is_some(), "{own} in {tables:?}");
        if let Some(position) = position {
            tables.remove(position);
        }
    }
    assert_eq!(
        tables,
        // The projection offset store's tables come with the same migrations (0005, 0008).
        vec![
            "event_tag",
            "journal",
            "journal_highest",
            "projection_offset",
            "projection_owner",
            "projection_seen",
            "snapshot"
        ]
    );
    // A global ordering column, increasing in write order.
    write_one_to_five(&journal, "p-1").await;
    let ordering = db
        .query_i64s("SELECT ordering FROM journal WHERE persistence_id = 'p-1' ORDER BY seq_nr")
        .await;
    assert_eq!(ordering.len(), 5);
    assert!(ordering.windows(2).all(|w| w[0] < w[1]), "{ordering:?}");
}

async fn data_survives_closing_and_reconnecting<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    write_one_to_five(&journal, "p-1").await;
    journal
        .delete_messages_to("p-1", 2, actix_persistence_core::FencingToken::UNOWNED)
        .await
        .unwrap();
    B::close(&journal).await;
    assert!(
        journal.read_highest_sequence_nr("p-1", 0).await.is_err(),
        "a closed journal fails instead of hanging"
    );

    // Connecting again runs the migrations again, which must find nothing to do.
    let again = db.journal().await;
    assert_eq!(
        recover(&again, "p-1", 1, MAX, MAX).await,
        (vec![3, 4, 5], 5)
    );
    write_all_ok(&again, vec![atomic("p-1", 6..=6)]).await;
    assert_eq!(
        recover(&again, "p-1", 1, MAX, MAX).await,
        (vec![3, 4, 5, 6], 6)
    );
}

async fn invalid_options_are_refused_before_connecting<B: TestBackend>(db: B) {
    // Above the ceiling, sqlx would take room for every connection when it builds the pool
    // (`u32::MAX` asked for hundreds of GB and aborted the process).
    let above = actix_persistence_sql::MAX_POOL_CONNECTIONS + 1;
    for (setting, option, refused) in [
        (Setting::MaxConnections(0), "max_connections", 0),
        (Setting::MaxConnections(above), "max_connections", above),
        (
            Setting::MaxConnections(u32::MAX),
            "max_connections",
            u32::MAX,
        ),
        (Setting::ReplayBatchSize(0), "replay_batch_size", 0),
        (Setting::MaxBatchSize(0), "max_batch_size", 0),
    ] {
        let options = db.options(&[setting]);
        match B::connect(&options).await {
            Err(SqlStoreError::InvalidOption {
                option: named,
                value,
                ..
            }) => assert_eq!((named, value), (option, refused.to_string())),
            Err(other) => panic!("{option}: expected an invalid option, got {other}"),
            Ok(_) => panic!("{option}: expected an invalid option, got a journal"),
        }
    }
    assert!(db.table_names().await.is_empty(), "nothing created");
}

async fn unreachable_database_is_a_connect_error_naming_the_url<B: TestBackend>(db: B) {
    let (url, cause) = db.unreachable();
    let options = B::options_at(&url, &[]);
    let journal = B::connect(&options).await.err();
    let snapshots = B::connect_snapshots(&options).await.err();
    for (store, error) in [("journal", journal), ("snapshot store", snapshots)] {
        match error {
            Some(error @ SqlStoreError::Connect { .. }) => {
                assert!(
                    matches!(&error, SqlStoreError::Connect { url: named, .. } if named == &url),
                    "{store}: {error:?}"
                );
                let message = error.to_string();
                assert!(message.contains(&url), "{store}: {message}");
                assert!(message.contains(cause), "{store}: {message}");
            }
            Some(other) => panic!("{store}: expected a connect error, got {other:?}"),
            None => panic!("{store}: expected a connect error, got a store"),
        }
    }
}
