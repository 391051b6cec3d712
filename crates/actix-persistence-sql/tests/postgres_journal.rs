//! What only the PostgreSQL journal does: rejecting text PostgreSQL cannot store, serializer
//! ids as the `INTEGER` with the same bits, migrations run by several processes at once, the
//! server-side statement timeout, and passwords kept out of errors. A test that needs a server
//! runs in a database of its own (feature `test-util`; skipped without `DATABASE_URL`, except in
//! CI). What both journals do is tested once for both, in `journal_*.rs`.
#![cfg(feature = "postgres")]

mod common;

use std::time::Duration;

use actix_persistence_sql::{
    ConnectFailure, PostgresJournal, PostgresJournalOptions, SqlStoreError,
};

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
    assert_eq!(options.replay_batch_size, 1000);
    assert_eq!(
        PostgresJournalOptions::new("postgres://h/d").url,
        "postgres://h/d"
    );
}

/// The tests that need a server: each in a database of its own.
#[cfg(all(feature = "test-util", has_database_url))]
mod on_a_server {
    use std::time::Duration;

    use actix_persistence_core::{AtomicWrite, AtomicWriteError, JournalStore, MAX_SEQ_NR};
    use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions, SqlStoreError};

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
            nul_writer.writer_uuid = "w\0".into();
            let mut nul_manifest = event("p-1", 3);
            nul_manifest.manifest = "\0".to_owned();
            let mut nul_tag = event("p-1", 4);
            nul_tag.tags = vec!["ok".to_owned(), "t\0".to_owned()].into();
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
            journal
                .delete_messages_to("a\0b", MAX, actix_persistence_core::FencingToken::UNOWNED)
                .await
                .unwrap();
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
    async fn connections_report_warnings_only_so_migrations_log_no_notices() {
        common::run(|db: PostgresDb| async move {
            let journal = PostgresJournal::connect(&db.options(&[]))
                .await
                .expect("connect");
            let level: String = sqlx::query_scalar("SHOW client_min_messages")
                .fetch_one(journal.pool())
                .await
                .expect("show");
            assert_eq!(level, "warning");
            journal.close().await;
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
    /// A statement timeout longer than PostgreSQL's `statement_timeout` holds (an int of ms,
    /// about 24.8 days; e.g. "30d", meant as "no practical limit", which the configuration
    /// accepts) is its longest. Every connection used to fail with "outside the valid range",
    /// so the journal could not start.
    #[tokio::test]
    async fn a_statement_timeout_longer_than_postgres_holds_is_its_longest() {
        common::run(|db: PostgresDb| async move {
            let options = PostgresJournalOptions {
                statement_timeout: Duration::from_secs(30 * 24 * 3600),
                ..db.options(&[])
            };
            let journal = PostgresJournal::connect(&options).await.expect("connect");
            write_all_ok(&journal, vec![atomic("long", 1..=2)]).await;
            assert_eq!(
                recover(&journal, "long", 1, MAX, MAX).await,
                (vec![1, 2], 2)
            );
            let timeouts: Vec<String> = sqlx::query_scalar("SHOW statement_timeout")
                .fetch_all(journal.pool())
                .await
                .unwrap();
            assert_eq!(timeouts, ["2147483647ms"]);
            journal.close().await;
        })
        .await;
    }

    /// An event whose tags (`TEXT[]`, read from their binary form) are not a list of strings
    /// (a NULL element, two dimensions, another element type: rows this crate never writes)
    /// ends a replay and a query with `CorruptRow` naming the persistence id and the sequence
    /// number, as a corrupt row on SQLite does, not with a bare column error.
    #[tokio::test]
    async fn unreadable_tags_are_a_corrupt_row_named_by_id_and_seq_nr() {
        use actix_persistence_core::query::{
            entity_type_of, Offset, QueryError, QuerySettings, ReadJournal,
        };
        use actix_persistence_core::JournalError;
        use futures::StreamExt;

        common::run(|db: PostgresDb| async move {
            let journal = std::sync::Arc::new(db.journal().await);
            for (n, tags) in ["ARRAY[NULL]::text[]", "'{{a,b},{c,d}}'::text[]"]
                .into_iter()
                .enumerate()
            {
                let pid = format!("Tags{n}|1");
                write_all_ok(&*journal, vec![atomic(&pid, 1..=3)]).await;
                db.execute(&format!(
                    "UPDATE journal SET tags = {tags} WHERE persistence_id = '{pid}' AND seq_nr = 2"
                ))
                .await;
                let replayed: Vec<_> = journal.replay_messages(&pid, 1, MAX, MAX).collect().await;
                assert_eq!(replayed.len(), 2, "event 1, then the error: {replayed:?}");
                assert_eq!(replayed[0].as_ref().map(|e| e.seq_nr).ok(), Some(1));
                let query = ReadJournal::from_arc(journal.clone(), QuerySettings::default());
                let queried: Vec<_> = query
                    .current_events_by_slices(entity_type_of(&pid), 0, 1023, Offset::NoOffset)
                    .collect()
                    .await;
                let Some(Err(replay_error)) = replayed.get(1) else {
                    panic!("replay: expected the corrupt row's error, got {replayed:?}")
                };
                let Some(Err(QueryError::Journal(query_error))) = queried.last() else {
                    panic!("query: expected the corrupt row's error, got {queried:?}")
                };
                for (path, error) in [("replay", replay_error), ("query", query_error)] {
                    let JournalError::Storage { source, .. } = error else {
                        panic!("{path}: expected a storage error, got {error:?}");
                    };
                    match source.downcast_ref::<SqlStoreError>() {
                        Some(SqlStoreError::CorruptRow {
                            persistence_id,
                            seq_nr,
                            reason,
                        }) => {
                            assert_eq!((persistence_id.as_str(), *seq_nr), (pid.as_str(), 2));
                            assert!(reason.contains("tags"), "{path}: {reason}");
                        }
                        other => panic!("{path}: expected CorruptRow, got {other:?} ({source})"),
                    }
                }
            }
        })
        .await;
    }

    /// A tag or an entity type holding NUL, which PostgreSQL cannot store (and no write
    /// stored), selects no event: the query ends empty, as on SQLite, instead of failing with
    /// PostgreSQL's encoding error.
    #[tokio::test]
    async fn a_query_for_text_holding_nul_finds_nothing() {
        use actix_persistence_core::query::{Offset, QuerySettings, ReadJournal};
        use futures::StreamExt;

        common::run(|db: PostgresDb| async move {
            let journal = std::sync::Arc::new(db.journal().await);
            write_all_ok(&*journal, vec![atomic("Nul|1", 1..=2)]).await;
            let query = ReadJournal::from_arc(journal, QuerySettings::default());
            let by_tag: Vec<_> = query
                .current_events_by_tag("a\0b", Offset::NoOffset)
                .collect()
                .await;
            assert!(by_tag.is_empty(), "{by_tag:?}");
            let by_slices: Vec<_> = query
                .current_events_by_slices("Nul\0", 0, 1023, Offset::NoOffset)
                .collect()
                .await;
            assert!(by_slices.is_empty(), "{by_slices:?}");
        })
        .await;
    }

    /// A replay whose consumer stopped pulling in the middle of its first page's query (a
    /// `select!` that took another branch) gives its reader connection back once the query
    /// is done, without another pull: the page is read by a task of its own, as the pages after
    /// it are. Read inside the stream's own future, it kept the connection (here the readers'
    /// only one) until the next pull, and every other read of the journal waited for it.
    #[tokio::test]
    async fn a_replay_left_in_its_first_query_gives_its_connection_back() {
        common::run(|db: PostgresDb| async move {
            use futures::StreamExt;
            use sqlx::{Executor, Row};

            // One writer connection and one reader connection.
            let options = PostgresJournalOptions {
                max_connections: 2,
                ..PostgresJournalOptions::new(db.url())
            };
            let journal = PostgresJournal::connect(&options).await.unwrap();
            write_all_ok(&journal, vec![atomic("r-1", 1..=3)]).await;
            // Another session holds the journal: the replay's query waits for its lock.
            let mut locker = db.connection().await;
            locker.execute("BEGIN").await.unwrap();
            locker
                .execute("LOCK TABLE journal IN ACCESS EXCLUSIVE MODE")
                .await
                .unwrap();
            let mut watcher = db.connection().await;
            let mut replay = journal.replay_messages("r-1", 1, MAX, MAX);
            {
                // Pulled until the query waits for the lock; then the pull is dropped.
                let waiting = async {
                    loop {
                        let row = sqlx::query(
                            "SELECT count(*) FROM pg_stat_activity \
                             WHERE wait_event_type = 'Lock' AND query LIKE '%FROM journal%'",
                        )
                        .fetch_one(&mut watcher)
                        .await
                        .unwrap();
                        if row.get::<i64, _>(0) > 0 {
                            return;
                        }
                        tokio::task::yield_now().await;
                    }
                };
                tokio::select! {
                    () = waiting => {}
                    next = replay.next() => panic!("read under the lock: {next:?}"),
                }
            }
            locker.execute("COMMIT").await.unwrap();
            // Nobody pulls the replay: the reader connection must come back by itself.
            let highest = tokio::time::timeout(
                Duration::from_secs(20),
                journal.read_highest_sequence_nr("r-1", 0),
            )
            .await
            .expect("the readers' connection came back without another pull")
            .unwrap();
            assert_eq!(highest, 3);
            let replayed: Vec<u64> = replay.map(|e| e.unwrap().seq_nr).collect().await;
            assert_eq!(replayed, vec![1, 2, 3]);
        })
        .await;
    }

    /// Reads asked from another Tokio runtime (an Actix arbiter's) leave no connection tied to
    /// it in the pools: while that runtime sits idle (an arbiter busy in a handler does not
    /// poll its I/O driver) and after it shut down, the replays, highest sequence numbers,
    /// snapshot loads and queries that follow on the journal's own runtime all succeed. A
    /// connection the pool opened there belonged to that runtime's I/O driver: drawn from the
    /// shared pool, it waited for that driver (here until the pool's acquire timeout) or,
    /// once the runtime was gone, failed; the journal now runs that work on the runtime it was
    /// connected on (`HomeRuntime`).
    #[tokio::test]
    async fn reads_from_another_runtime_leave_no_connection_tied_to_it() {
        use actix_persistence_core::query::{Offset, QuerySettings, ReadJournal};
        use actix_persistence_core::{SnapshotSelectionCriteria, SnapshotStore};
        use futures::StreamExt;

        common::run(|db: PostgresDb| async move {
            // Three writer connections and three reader connections.
            let options = PostgresJournalOptions {
                max_connections: 6,
                replay_batch_size: 2,
                ..PostgresJournalOptions::new(db.url())
            };
            let journal = PostgresJournal::connect(&options).await.unwrap();
            write_all_ok(&journal, vec![atomic("Home|1", 1..=7)]).await;
            let snapshots = journal.snapshot_store();
            let query = ReadJournal::from_arc(
                std::sync::Arc::new(journal.clone()),
                QuerySettings::default(),
            );
            let read_everything = {
                let (journal, snapshots, query) =
                    (journal.clone(), snapshots.clone(), query.clone());
                move || {
                    let (journal, snapshots, query) =
                        (journal.clone(), snapshots.clone(), query.clone());
                    async move {
                        let replay = journal
                            .replay_messages("Home|1", 1, MAX, MAX)
                            .map(|e| e.map(|e| e.seq_nr))
                            .collect::<Vec<_>>();
                        let by_slices = query
                            .current_events_by_slices("Home", 0, 1023, Offset::NoOffset)
                            .map(|e| e.map(|e| e.seq_nr))
                            .collect::<Vec<_>>();
                        let (replay, highest, snapshot, deleted_to, by_slices) = futures::join!(
                            replay,
                            journal.read_highest_sequence_nr("Home|1", 0),
                            snapshots.load("Home|1", SnapshotSelectionCriteria::latest()),
                            journal.read_deleted_to("Home|1"),
                            by_slices,
                        );
                        let replay: Result<Vec<u64>, _> = replay.into_iter().collect();
                        let by_slices: Result<Vec<u64>, _> = by_slices.into_iter().collect();
                        (
                            replay.map_err(|e| e.to_string()),
                            highest.map_err(|e| e.to_string()),
                            snapshot.map(|s| s.is_some()).map_err(|e| e.to_string()),
                            deleted_to.map_err(|e| e.to_string()),
                            by_slices.map_err(|e| e.to_string()),
                        )
                    }
                }
            };
            let all: Vec<u64> = (1..=7).collect();
            let expected = (Ok(all.clone()), Ok(7), Ok(false), Ok(Some(0)), Ok(all));
            // The journal's work runs here meanwhile (it is the journal's home runtime).
            let (elsewhere, other) =
                actix_persistence_sql::test_util::run_on_another_runtime(read_everything()).await;
            assert_eq!(elsewhere, expected);
            let within = |reads| async move {
                tokio::time::timeout(Duration::from_secs(10), reads)
                    .await
                    .expect("no read waits on the other runtime's I/O driver")
            };
            for round in 0..3 {
                assert_eq!(
                    within(read_everything()).await,
                    expected,
                    "idle, round {round}"
                );
            }
            other.shut_down().await;
            for round in 0..3 {
                assert_eq!(
                    within(read_everything()).await,
                    expected,
                    "gone, round {round}"
                );
            }
        })
        .await;
    }

    /// As above for writes and ownership takes without group commit (`max_batch_size` 1, where
    /// each call runs its own transactions): the writer connection the pool opens for calls
    /// from another runtime is not tied to it, and the writes that follow on the journal's own
    /// runtime, while that runtime idles and after it shut down, are stored at once.
    #[tokio::test]
    async fn writes_without_group_commit_from_another_runtime_leave_no_connection_tied_to_it() {
        common::run(|db: PostgresDb| async move {
            // One writer connection and one reader connection; no group commit.
            let options = PostgresJournalOptions {
                max_connections: 2,
                max_batch_size: 1,
                ..PostgresJournalOptions::new(db.url())
            };
            let journal = PostgresJournal::connect(&options).await.unwrap();
            // The connections `connect` opened end (as after a server restart), so that the
            // pools open new ones for the calls below.
            sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
            )
            .execute(&mut db.connection().await)
            .await
            .unwrap();
            let write_three = {
                let journal = journal.clone();
                move |round: u64| {
                    let journal = journal.clone();
                    async move {
                        let writes = (0..3).map(|i| {
                            let journal = journal.clone();
                            async move {
                                let pid = format!("Home|{i}");
                                let written = journal
                                    .write_messages(vec![atomic(&pid, round..=round)])
                                    .await
                                    .map(|results| results.into_iter().all(|r| r.is_ok()));
                                let owned = journal.take_ownership(&format!("Owned|{i}")).await;
                                (written.map_err(|e| e.to_string()), owned.is_ok())
                            }
                        });
                        futures::future::join_all(writes).await
                    }
                }
            };
            let expected = vec![(Ok(true), true); 3];
            let (elsewhere, other) =
                actix_persistence_sql::test_util::run_on_another_runtime(write_three(1)).await;
            assert_eq!(elsewhere, expected);
            let within = |writes| async move {
                tokio::time::timeout(Duration::from_secs(10), writes)
                    .await
                    .expect("no write waits on the other runtime's I/O driver")
            };
            for round in 2..5 {
                assert_eq!(
                    within(write_three(round)).await,
                    expected,
                    "idle, round {round}"
                );
            }
            other.shut_down().await;
            for round in 5..8 {
                assert_eq!(
                    within(write_three(round)).await,
                    expected,
                    "gone, round {round}"
                );
            }
            for i in 0..3 {
                let highest = journal
                    .read_highest_sequence_nr(&format!("Home|{i}"), 0)
                    .await
                    .unwrap();
                assert_eq!(highest, 7, "Home|{i}");
            }
        })
        .await;
    }
}

#[tokio::test]
async fn refused_connection_says_connection_refused_and_where() {
    let options = PostgresJournalOptions {
        acquire_timeout: Duration::from_secs(2),
        ..PostgresJournalOptions::new("postgres://app:hunter2@127.0.0.1:1/events")
    };
    match PostgresJournal::connect(&options).await {
        Err(error @ SqlStoreError::Connect { .. }) => {
            let SqlStoreError::Connect { failure, url, .. } = &error else {
                unreachable!()
            };
            assert_eq!(*failure, ConnectFailure::Refused);
            assert_eq!(url, "postgres://app:***@127.0.0.1:1/events");
            let message = error.to_string();
            assert!(message.contains("connection refused"), "{message}");
            assert!(!message.contains("pool timed out"), "{message}");
        }
        other => panic!("expected a connect error, got {other:?}"),
    }
}

#[cfg(all(feature = "test-util", has_database_url))]
mod connect_failures_on_a_server {
    use actix_persistence_sql::test_util::{url_with_database, TestDatabase};
    use actix_persistence_sql::{
        ConnectFailure, PostgresJournal, PostgresJournalOptions, SqlStoreError,
    };

    async fn failure_of(url: String) -> (ConnectFailure, String) {
        match PostgresJournal::connect(&PostgresJournalOptions::new(url)).await {
            Err(error @ SqlStoreError::Connect { .. }) => {
                let message = error.to_string();
                let SqlStoreError::Connect { failure, .. } = error else {
                    unreachable!()
                };
                (failure, message)
            }
            other => panic!("expected a connect error, got {other:?}"),
        }
    }

    /// A database whose encoding cannot hold any Unicode text is refused at connect, naming
    /// the encoding, before anything is created in it (a write of a character it lacks would
    /// fail, and stop its actor, long after startup).
    #[tokio::test]
    async fn a_database_not_in_utf8_is_refused_at_connect() {
        let Some(admin_url) = actix_persistence_sql::test_util::database_url() else {
            return;
        };
        let name = format!("ap_latin1_{}", std::process::id());
        let admin = sqlx::PgPool::connect(&admin_url).await.unwrap();
        sqlx::query(&format!(
            "CREATE DATABASE {name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' \
             TEMPLATE template0"
        ))
        .execute(&admin)
        .await
        .unwrap();
        let url = url_with_database(&admin_url, &name);
        let result = PostgresJournal::connect(&PostgresJournalOptions::new(url.clone())).await;
        if let Ok(journal) = &result {
            journal.close().await;
        }
        let tables: i64 = {
            let pool = sqlx::PgPool::connect(&url).await.unwrap();
            let count = sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            pool.close().await;
            count
        };
        sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
            .execute(&admin)
            .await
            .unwrap();
        admin.close().await;
        match result {
            Err(error @ SqlStoreError::DatabaseEncoding { .. }) => {
                let message = error.to_string();
                let SqlStoreError::DatabaseEncoding { encoding, .. } = error else {
                    unreachable!()
                };
                assert_eq!(encoding, "LATIN1");
                assert!(message.contains("ENCODING 'UTF8'"), "{message}");
            }
            Err(other) => panic!("expected DatabaseEncoding, got {other}"),
            Ok(_) => panic!("a LATIN1 database was accepted"),
        }
        assert_eq!(tables, 0, "nothing is created in a refused database");
    }

    #[tokio::test]
    async fn unknown_database_says_the_database_does_not_exist() {
        let Some(db) = TestDatabase::create().await else {
            return;
        };
        let (failure, message) =
            failure_of(url_with_database(db.url(), "ap_test_no_such_database")).await;
        assert_eq!(failure, ConnectFailure::UnknownDatabase);
        assert!(message.contains("the database does not exist"), "{message}");
        assert!(message.contains("ap_test_no_such_database"), "{message}");
    }

    #[tokio::test]
    async fn unknown_user_says_authentication_failed() {
        let Some(db) = TestDatabase::create().await else {
            return;
        };
        let url = db
            .url()
            .replace("user=postgres", "user=ap_no_such_role")
            .replace("://postgres@", "://ap_no_such_role@");
        assert_ne!(url, db.url(), "the test URL names its user");
        let (failure, message) = failure_of(url).await;
        assert_eq!(failure, ConnectFailure::Authentication);
        assert!(message.contains("authentication failed"), "{message}");
    }

    /// The tag index of a journal in a schema of its own is kept by its triggers whoever
    /// writes the journal: an insert into `"Tagged Schema".journal` from a session whose
    /// search_path is the default (another tool, `psql`) indexes the event's tags in that
    /// schema's `event_tag`, not in the default schema's (migration 0012), and a delete takes
    /// them out there; the journal's queries by tag see exactly that.
    #[tokio::test]
    async fn tag_triggers_keep_to_their_schema_whoever_writes() {
        use actix_persistence_core::query::{Offset, QuerySettings, ReadJournal};
        use actix_persistence_core::{AtomicWrite, JournalStore, PersistentRepr};
        use futures::StreamExt;

        let Some(db) = TestDatabase::create().await else {
            return;
        };
        let in_schema = PostgresJournalOptions {
            schema: "Tagged Schema".to_owned(),
            ..PostgresJournalOptions::new(db.url())
        };
        // Both schemas hold a journal and its `event_tag`.
        let default = PostgresJournal::connect(&PostgresJournalOptions::new(db.url()))
            .await
            .expect("connect");
        let journal =
            std::sync::Arc::new(PostgresJournal::connect(&in_schema).await.expect("connect"));
        let event = PersistentRepr {
            persistence_id: "T|1".into(),
            seq_nr: 1,
            payload: b"{}".to_vec(),
            serializer_id: 1,
            manifest: String::new(),
            writer_uuid: "w".into(),
            timestamp: 0,
            tags: vec!["x".to_owned()].into(),
        };
        let results = journal
            .write_messages(vec![AtomicWrite::new(vec![event]).expect("shape")])
            .await
            .expect("write");
        assert!(results.iter().all(Result::is_ok), "{results:?}");

        let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
        sqlx::query(
            r#"INSERT INTO "Tagged Schema".journal (persistence_id, seq_nr, writer_uuid,
                   write_timestamp, serializer_id, manifest, payload, tags, db_timestamp, slice,
                   entity_type)
               SELECT persistence_id, 2, writer_uuid, write_timestamp, serializer_id, manifest,
                   payload, '{y}', db_timestamp + 1, slice, entity_type
               FROM "Tagged Schema".journal WHERE persistence_id = 'T|1' AND seq_nr = 1"#,
        )
        .execute(&pool)
        .await
        .expect("another tool's insert");
        let count = |table: &'static str| {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, i64>(&format!("SELECT COUNT(*) FROM {table}"))
                    .fetch_one(&pool)
                    .await
                    .unwrap()
            }
        };
        assert_eq!(count(r#""Tagged Schema".event_tag"#).await, 2);
        assert_eq!(count("public.event_tag").await, 0);
        let query = ReadJournal::from_arc(journal.clone(), QuerySettings::default());
        let seq_nrs = |tag: &'static str| {
            let query = &query;
            async move {
                query
                    .current_events_by_tag(tag, Offset::NoOffset)
                    .map(|e| e.expect("envelope").seq_nr)
                    .collect::<Vec<_>>()
                    .await
            }
        };
        assert_eq!(seq_nrs("y").await, vec![2]);
        assert_eq!(seq_nrs("x").await, vec![1]);

        sqlx::query(r#"DELETE FROM "Tagged Schema".journal WHERE seq_nr = 2"#)
            .execute(&pool)
            .await
            .expect("another tool's delete");
        assert_eq!(count(r#""Tagged Schema".event_tag"#).await, 1);
        assert_eq!(seq_nrs("y").await, Vec::<u64>::new());
        pool.close().await;
        default.close().await;
        journal.close().await;
    }

    #[tokio::test]
    async fn journal_tables_live_in_the_configured_schema() {
        let Some(db) = TestDatabase::create().await else {
            return;
        };
        let options = PostgresJournalOptions {
            schema: "Events Of App".to_owned(),
            ..PostgresJournalOptions::new(db.url())
        };
        let journal = PostgresJournal::connect(&options).await.expect("connect");
        journal.close().await;
        let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = 'Events Of App' ORDER BY table_name",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        assert!(tables.contains(&"journal".to_owned()), "{tables:?}");
        assert!(tables.contains(&"snapshot".to_owned()), "{tables:?}");
        assert!(
            tables.contains(&"actix_persistence_migrations".to_owned()),
            "{tables:?}"
        );
        let in_public: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(in_public, 0);
        // Connecting again finds every migration applied.
        let again = PostgresJournal::connect(&options).await.expect("reconnect");
        again.close().await;
        pool.close().await;
    }
}

/// Without `DATABASE_URL` the tests that need a server are not compiled: one line says so.
#[cfg(all(feature = "test-util", not(has_database_url)))]
#[test]
#[ignore = "PostgreSQL tests skipped: set DATABASE_URL to run them"]
fn postgres_tests_skipped_without_database_url() {}
