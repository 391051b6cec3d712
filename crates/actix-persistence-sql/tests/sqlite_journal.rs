//! What only the SQLite journal does: its defaults, the database file it creates in WAL mode,
//! in-memory databases, several journals on one file, URLs of other databases, and rows whose
//! tags are not the JSON it writes. What both journals do is tested once for both, in
//! `journal_*.rs`.
#![cfg(feature = "sqlite")]

mod common;

use std::time::Duration;

use actix_persistence_core::{JournalError, JournalStore, MAX_SEQ_NR};
use actix_persistence_sql::{SqlStoreError, SqliteJournal, SqliteJournalOptions};
use common::sqlite::SqliteDb;
use common::{
    atomic, event, event_with_payload, recover, write_all_ok, write_one_to_five, TestBackend,
};
use futures::StreamExt;

const MAX: u64 = MAX_SEQ_NR;

#[test]
fn default_options_are_documented_values() {
    let options = SqliteJournalOptions::default();
    assert_eq!(options.url, "sqlite:actix-persistence.db");
    assert_eq!(options.max_connections, 4);
    assert_eq!(options.busy_timeout, Duration::from_secs(5));
    assert_eq!(options.replay_batch_size, 1000);
    assert_eq!(options.max_batch_size, 512);
    assert_eq!(actix_persistence_sql::DEFAULT_MAX_BATCH_SIZE, 512);
    assert_eq!(SqliteJournalOptions::new("sqlite:x.db").url, "sqlite:x.db");
}

/// A busy timeout longer than SQLite holds (an int of ms, about 24.8 days; e.g. "30d", meant
/// as "wait as long as it takes", which the configuration accepts) is its longest. sqlx used
/// to panic on its worker thread, and the connect failed with a "crashed background worker".
#[tokio::test]
async fn a_busy_timeout_longer_than_sqlite_holds_is_its_longest() {
    common::run(|db: SqliteDb| async move {
        let options = SqliteJournalOptions {
            busy_timeout: Duration::from_secs(30 * 24 * 3600),
            ..SqliteJournalOptions::new(db.url())
        };
        let journal = SqliteJournal::connect(&options).await.expect("connect");
        write_one_to_five(&journal, "a").await;
        assert_eq!(recover(&journal, "a", 1, MAX, MAX).await.0, [1, 2, 3, 4, 5]);
        let timeouts: Vec<i64> = sqlx::query_scalar("PRAGMA busy_timeout")
            .fetch_all(journal.writer_pool())
            .await
            .unwrap();
        assert_eq!(timeouts, [i64::from(i32::MAX)]);
        journal.close().await;
    })
    .await;
}

#[tokio::test]
async fn connect_creates_the_file_in_wal_mode() {
    common::run(|db: SqliteDb| async move {
        let _journal = db.journal().await;
        assert!(
            db.dir().path().join("journal.db").exists(),
            "database file created"
        );
        assert_eq!(db.query_strings("PRAGMA journal_mode").await, vec!["wal"]);
    })
    .await;
}

#[tokio::test]
async fn close_after_replays_and_queries_leaves_no_wal_behind() {
    common::run(|db: SqliteDb| async move {
        let journal = db.journal().await;
        write_one_to_five(&journal, "a").await;
        // Replays read their pages on reader threads with connections of their own (several at
        // once: a replay reads ahead), as queries do.
        let replays =
            futures::future::join_all((0..4).map(|_| recover(&journal, "a", 1, MAX, MAX)));
        for (seq_nrs, _) in replays.await {
            assert_eq!(seq_nrs, [1, 2, 3, 4, 5]);
        }
        journal.close().await;
        // The close left WAL mode, which takes every connection to the file to be closed.
        let wal = db.dir().path().join("journal.db-wal");
        assert!(!wal.exists(), "{} left behind", wal.display());
        assert_eq!(
            db.query_strings("PRAGMA journal_mode").await,
            vec!["delete"]
        );
    })
    .await;
}

#[tokio::test]
async fn a_url_that_names_no_file_is_an_invalid_option_naming_it() {
    // SQLite would give each connection a temporary database of its own: the writer's events
    // would be acknowledged and never read back.
    for url in ["sqlite:", "sqlite://"] {
        let error = SqliteJournal::connect(&SqliteJournalOptions::new(url))
            .await
            .expect_err("no database file");
        assert!(
            matches!(&error, SqlStoreError::InvalidOption { option: "url", value, .. } if value == url),
            "{error:?}"
        );
        assert!(
            error.to_string().contains("names no database file"),
            "{error}"
        );
    }
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
async fn in_memory_database_works_while_the_journal_lives() {
    let journal = SqliteJournal::connect(&SqliteJournalOptions::new("sqlite::memory:"))
        .await
        .unwrap();
    write_one_to_five(&journal, "p-1").await;
    journal
        .delete_messages_to("p-1", 1, actix_persistence_core::FencingToken::UNOWNED)
        .await
        .unwrap();
    assert_eq!(
        recover(&journal, "p-1", 1, MAX, MAX).await,
        (vec![2, 3, 4, 5], 5)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_journals_on_one_file_write_concurrently_without_busy_errors() {
    common::run(|db: SqliteDb| async move {
        let one = db.journal().await;
        let other = db.journal().await;
        let mut tasks = Vec::new();
        for task in 0..20u64 {
            let journal = if task % 2 == 0 {
                one.clone()
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
    })
    .await;
}

/// (Adversarial, two processes on one file.) Two journals on one file (each with its own
/// connections and clock readings, as two processes), 20 writers interleaving: the database
/// timestamps never go down in insert order (`ordering`, taken under the write lock), so a
/// query that delivered an event never meets a lower timestamp committed after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_journals_on_one_file_stamp_in_commit_order() {
    common::run(|db: SqliteDb| async move {
        let one = db.journal().await;
        let other = db.journal().await;
        let mut tasks = Vec::new();
        for task in 0..20u64 {
            let journal = if task % 2 == 0 {
                one.clone()
            } else {
                other.clone()
            };
            tasks.push(tokio::spawn(async move {
                let pid = format!("stamp-{task}");
                for n in 1..=10 {
                    let results = journal.write_messages(vec![atomic(&pid, n..=n)]).await;
                    assert!(results.unwrap()[0].is_ok());
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let inversions = db
            .query_i64s(
                "SELECT count(*) FROM journal a JOIN journal b \
                 ON b.ordering > a.ordering AND b.db_timestamp < a.db_timestamp",
            )
            .await;
        assert_eq!(inversions, [0]);
    })
    .await;
}

/// Pages are read in one piece (sqlite_page.rs); a page holding a row that does not fit it
/// is read again row by row, so the query ends with an error naming the row. (A query's page
/// fails as a whole: the good events of the same page are not delivered before the error.)
#[tokio::test]
async fn corrupt_row_ends_a_query_by_slices_with_a_storage_error() {
    use actix_persistence_core::query::{
        entity_type_of, slice_for_persistence_id, Offset, QuerySettings, ReadJournal,
    };
    common::run(|db: SqliteDb| async move {
        let journal = std::sync::Arc::new(db.journal().await);
        let pid = "Corrupt|1";
        write_all_ok(&*journal, vec![atomic(pid, 1..=2)]).await;
        // Event 3, stored after 1 and 2 with tags that are not JSON (this crate never writes
        // such a row; see the replay's test below).
        db.execute(&format!(
            "INSERT INTO journal (persistence_id, seq_nr, writer_uuid, write_timestamp, \
             serializer_id, manifest, payload, tags, db_timestamp, slice, entity_type) \
             SELECT '{pid}', 3, 'w', 0, 1, '', x'00', '[]', max(db_timestamp) + 1, {}, '{}' \
             FROM journal",
            slice_for_persistence_id(pid),
            entity_type_of(pid)
        ))
        .await;
        db.execute(&format!(
            "UPDATE journal SET tags = 'oops' WHERE persistence_id = '{pid}' AND seq_nr = 3"
        ))
        .await;
        let query = ReadJournal::from_arc(journal, QuerySettings::default());
        let results: Vec<_> = query
            .current_events_by_slices(entity_type_of(pid), 0, 1023, Offset::NoOffset)
            .collect()
            .await;
        let seq_nrs: Vec<u64> = results
            .iter()
            .filter_map(|r| r.as_ref().ok().map(|e| e.seq_nr))
            .collect();
        assert_eq!(seq_nrs, Vec::<u64>::new(), "the page fails as a whole");
        assert_eq!(results.len(), 1, "one error, then the end");
        match results.last() {
            Some(Err(error)) => {
                let message = error.to_string();
                assert!(
                    message.contains("Corrupt|1") && message.contains("3"),
                    "the error names the row: {message}"
                );
                assert!(
                    message.contains("during query") && !message.contains("replay"),
                    "the error names the query, not a replay: {message}"
                );
            }
            other => panic!("expected the query to end with an error, got {other:?}"),
        }
    })
    .await;
}

/// A page read in one piece (sqlite_page.rs) carries its payloads, whatever their size:
/// payloads of every byte value and of sizes around 4 KiB (the limit of pages until session
/// 10) and well above it, and one that another program
/// stored as text (its length in characters is not its length in bytes), come back byte for
/// byte by replay and by query, in order.
#[tokio::test]
async fn payloads_come_back_byte_for_byte_from_a_page() {
    use actix_persistence_core::query::{
        entity_type_of, slice_for_persistence_id, Offset, QuerySettings, ReadJournal,
    };
    common::run(|db: SqliteDb| async move {
        let journal = std::sync::Arc::new(db.journal().await);
        let pid = "Blob|1";
        let sizes = [0usize, 1, 256, 4095, 4096, 4097, 3, 300_000, 2];
        let mut written: Vec<Vec<u8>> = sizes
            .iter()
            .zip(1u64..)
            .map(|(&size, seq_nr)| {
                (0..size)
                    .map(|i| ((i + seq_nr as usize * 11) % 256) as u8)
                    .collect()
            })
            .collect();
        let events = written
            .iter()
            .zip(1u64..)
            .map(|(payload, seq_nr)| event_with_payload(pid, seq_nr, payload))
            .collect();
        write_all_ok(
            &*journal,
            vec![actix_persistence_core::AtomicWrite::new(events).expect("consecutive")],
        )
        .await;
        // Event 10, stored as TEXT of two-byte characters by another program.
        let text = "\u{e9}t\u{e9}";
        db.execute(&format!(
            "INSERT INTO journal (persistence_id, seq_nr, writer_uuid, write_timestamp, \
             serializer_id, manifest, payload, tags, db_timestamp, slice, entity_type) \
             SELECT '{pid}', 10, 'w', 0, 1, '', '{text}', '[]', max(db_timestamp) + 1, {}, '{}' \
             FROM journal",
            slice_for_persistence_id(pid),
            entity_type_of(pid)
        ))
        .await;
        written.push(text.as_bytes().to_vec());

        let replayed: Vec<Vec<u8>> = journal
            .replay_messages(pid, 1, MAX, MAX)
            .map(|event| event.expect("replayed").payload)
            .collect()
            .await;
        assert_eq!(replayed, written, "by replay");
        let query = ReadJournal::from_arc(journal, QuerySettings::default());
        let queried: Vec<Vec<u8>> = query
            .current_events_by_slices(entity_type_of(pid), 0, 1023, Offset::NoOffset)
            .map(|envelope| envelope.expect("queried").event.payload)
            .collect()
            .await;
        assert_eq!(queried, written, "by query");
    })
    .await;
}

/// Text columns that another program stored as blobs (of UTF-8 text) are read as the text they
/// hold, by replay and by query: a page's JSON cannot hold a blob, and the page used to fail as a
/// whole with SQLite's "JSON cannot hold BLOB values", the good events with it.
#[tokio::test]
async fn text_stored_as_a_blob_reads_back() {
    use actix_persistence_core::query::{
        entity_type_of, slice_for_persistence_id, Offset, QuerySettings, ReadJournal,
    };
    common::run(|db: SqliteDb| async move {
        let journal = std::sync::Arc::new(db.journal().await);
        let pid = "Blobtext|1";
        write_all_ok(&*journal, vec![atomic(pid, 1..=1)]).await;
        // Inserted with text tags (the tag index's insert trigger reads them), then changed.
        db.execute(&format!(
            "INSERT INTO journal (persistence_id, seq_nr, writer_uuid, write_timestamp, \
             serializer_id, manifest, payload, tags, db_timestamp, slice, entity_type) \
             SELECT '{pid}', 2, 'w', 0, 1, '', x'02', '[]', max(db_timestamp) + 1, {}, '{}' \
             FROM journal",
            slice_for_persistence_id(pid),
            entity_type_of(pid)
        ))
        .await;
        db.execute(&format!(
            "UPDATE journal SET tags = CAST('[\"t\"]' AS BLOB), \
             manifest = CAST('M' AS BLOB), writer_uuid = CAST('w2' AS BLOB) \
             WHERE persistence_id = '{pid}' AND seq_nr = 2"
        ))
        .await;
        let replayed: Vec<(u64, Vec<String>, String, String)> = journal
            .replay_messages(pid, 1, MAX, MAX)
            .map(|e| {
                let e = e.expect("replayed");
                (
                    e.seq_nr,
                    e.tags.to_vec(),
                    e.manifest,
                    e.writer_uuid.to_string(),
                )
            })
            .collect()
            .await;
        let want = vec![
            (1, Vec::new(), "Event".to_owned(), "writer-1".to_owned()),
            (2, vec!["t".to_owned()], "M".to_owned(), "w2".to_owned()),
        ];
        assert_eq!(replayed, want, "by replay");
        let query = ReadJournal::from_arc(journal, QuerySettings::default());
        let queried: Vec<_> = query
            .current_events_by_slices(entity_type_of(pid), 0, 1023, Offset::NoOffset)
            .map(|e| {
                let e = e.expect("queried");
                (
                    e.seq_nr,
                    e.tags.to_vec(),
                    e.event.manifest,
                    e.writer_uuid.to_string(),
                )
            })
            .collect()
            .await;
        assert_eq!(queried, want, "by query");
    })
    .await;
}

#[tokio::test]
async fn corrupt_row_ends_the_replay_with_a_storage_error() {
    common::run(|db: SqliteDb| async move {
        let journal = db.journal().await;
        write_all_ok(&journal, vec![atomic("p-1", 1..=1)]).await;
        // A row this crate never writes: tags that are not a JSON array. (Inserted with no
        // tags, then corrupted: the tag index's insert trigger refuses malformed JSON.)
        db.execute(
            "INSERT INTO journal (persistence_id, seq_nr, writer_uuid, write_timestamp, \
             serializer_id, manifest, payload, tags) \
             VALUES ('p-1', 2, 'w', 0, 1, '', x'00', '[]')",
        )
        .await;
        db.execute("UPDATE journal SET tags = 'oops' WHERE persistence_id = 'p-1' AND seq_nr = 2")
            .await;

        let results: Vec<_> = journal.replay_messages("p-1", 1, MAX, MAX).collect().await;
        assert_eq!(
            results.len(),
            2,
            "the good event, then the error, then the end"
        );
        assert_eq!(results[0].as_ref().unwrap(), &event("p-1", 1));
        match &results[1] {
            Err(JournalError::Storage { operation, source }) => {
                assert_eq!(*operation, "replay");
                let message = source.to_string();
                assert!(
                    message.contains("\"p-1\"") && message.contains("2"),
                    "{message}"
                );
            }
            other => panic!("expected a storage error, got {other:?}"),
        }
    })
    .await;
}

/// The journal's clock never goes back, also when the newest events are deleted: an event
/// stored when the wall clock was an hour ahead (then stepped back), deleted, is followed by
/// events with later timestamps, so a query resumed from the deleted event's offset delivers
/// them (before migration 0010 their timestamps came from the wall clock again, an hour below
/// the offset, and the resumed query never delivered them).
#[tokio::test]
async fn timestamps_never_go_below_a_deleted_event() {
    use actix_persistence_core::query::{Offset, QuerySettings, QueryStore, ReadJournal};
    common::run(|db: SqliteDb| async move {
        let journal = std::sync::Arc::new(db.journal().await);
        write_all_ok(&*journal, vec![atomic("Clock|1", 1..=1)]).await;
        let ahead = db
            .query_i64s("SELECT db_timestamp + 3600000000 FROM journal")
            .await[0];
        db.execute(&format!("UPDATE journal SET db_timestamp = {ahead}"))
            .await;
        let query = ReadJournal::from_arc(journal.clone(), QuerySettings::default());
        let delivered: Vec<_> = query
            .current_events_by_slices("Clock", 0, 1023, Offset::NoOffset)
            .map(|e| e.expect("an envelope"))
            .collect()
            .await;
        assert_eq!(delivered.len(), 1);
        let offset = delivered[0].offset.clone();

        journal
            .delete_messages_to("Clock|1", 1, actix_persistence_core::FencingToken::UNOWNED)
            .await
            .expect("delete");
        assert!(
            journal.current_timestamp().await.expect("clock") >= ahead,
            "the query clock keeps the deleted event's timestamp"
        );
        write_all_ok(&*journal, vec![atomic("Clock|2", 1..=2)]).await;
        // A lone event takes the one-row statements.
        write_all_ok(&*journal, vec![atomic("Clock|3", 1..=1)]).await;
        let stored = db.query_i64s("SELECT db_timestamp FROM journal").await;
        assert!(
            stored.iter().all(|ts| *ts >= ahead),
            "{stored:?} below {ahead}"
        );
        let resumed: Vec<(String, u64)> = query
            .current_events_by_slices("Clock", 0, 1023, offset)
            .map(|e| e.expect("an envelope"))
            .map(|e| (e.persistence_id.to_string(), e.seq_nr))
            .collect()
            .await;
        assert_eq!(
            resumed,
            [
                ("Clock|2".to_owned(), 1),
                ("Clock|2".to_owned(), 2),
                ("Clock|3".to_owned(), 1)
            ]
        );
    })
    .await;
}

/// (Adversarial, after akka-persistence-r2dbc's "seen" map growth when many events share a
/// timestamp.) After the wall clock stepped back (an event was stored while it was an hour
/// ahead), every later SQLite event was stamped with the journal's clock floor, one and the
/// same timestamp, until the wall clock caught up an hour later. A live query's settled pass
/// never reached that timestamp meanwhile, so its `seen` (and every offset it handed out,
/// which a projection stores) kept an entry for every id written since the step, not "one entry per
/// id written within the window" (docs/architecture.md), and each round's fast pass backtracks
/// to re-read every event stored since. The case: window 100 ms; 40 ids write, the query runs
/// for 10 windows, one more id writes: that envelope's offset should hold the few ids written
/// within the window, not all 41. (With the clock as it is, without the event an hour ahead,
/// it holds 1.)
///
/// Now the journal stamps above its floor (floor + 1 µs while the wall clock is behind) and
/// tells queries that everything up to the floor is committed (`committed_before`): the
/// settled pass follows the stamps, and `seen` keeps only the ids of the latest timestamps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_step_back_keeps_seen_to_the_ids_of_the_window() {
    use actix_persistence_core::query::{Offset, QuerySettings, ReadJournal};
    common::run(|db: SqliteDb| async move {
        let journal = std::sync::Arc::new(db.journal().await);
        write_all_ok(&*journal, vec![atomic("Other|ahead", 1..=1)]).await;
        let ahead = db
            .query_i64s("SELECT db_timestamp + 3600000000 FROM journal")
            .await[0];
        db.execute(&format!("UPDATE journal SET db_timestamp = {ahead}"))
            .await;
        let settings = QuerySettings {
            refresh_interval: Duration::from_millis(20),
            late_commit_window: Duration::from_millis(100),
            page_size: 100,
            ..QuerySettings::default()
        };
        let query = ReadJournal::from_arc(journal.clone(), settings);
        let mut live = query.events_by_slices("Step", 0, 1023, Offset::NoOffset);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let consumer = tokio::spawn(async move {
            while let Some(envelope) = live.next().await {
                if tx.send(envelope.expect("an envelope")).is_err() {
                    return;
                }
            }
        });
        for i in 0..40 {
            write_all_ok(&*journal, vec![atomic(&format!("Step|{i}"), 1..=1)]).await;
        }
        for _ in 0..40 {
            tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .expect("in time")
                .expect("an envelope");
        }
        // Ten windows pass (the query runs its rounds meanwhile).
        tokio::time::sleep(Duration::from_millis(1000)).await;
        write_all_ok(&*journal, vec![atomic("Step|last", 1..=1)]).await;
        let last = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("in time")
            .expect("an envelope");
        assert_eq!(&*last.persistence_id, "Step|last");
        let Offset::Timestamp(offset) = &last.offset else {
            panic!("a timestamp offset");
        };
        let stored = db
            .query_i64s("SELECT DISTINCT db_timestamp FROM journal")
            .await;
        assert!(
            offset.seen.len() <= 5,
            "the offset of the last envelope holds {} seen ids (JSON {} bytes); \
             the journal's timestamps: {stored:?}",
            offset.seen.len(),
            serde_json::to_string(&last.offset).expect("json").len()
        );
        consumer.abort();
    })
    .await;
}

/// Processes starting together on a database file that does not exist yet (a deployment's
/// replicas, an app and its migration job) all open it: each brings the schema up to date, or
/// finds it so. Before, the migrations had no retry on SQLite (PostgreSQL's had): a journal
/// that lost the race failed to open ("UNIQUE constraint failed:
/// actix_persistence_migrations.version", "duplicate column name: owner_epoch"), in about
/// half of the starts of two processes. Journals of one process stand in for the processes
/// here: each has its own connections, so their migrations run at once, as two processes'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journals_opening_a_new_file_at_once_all_migrate_it() {
    for round in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("new.db").display());
        let options = SqliteJournalOptions::new(&url);
        let journals =
            futures::future::join_all((0..4).map(|_| SqliteJournal::connect(&options))).await;
        for (i, journal) in journals.iter().enumerate() {
            let journal = journal
                .as_ref()
                .unwrap_or_else(|e| panic!("round {round}, journal {i}: {e}"));
            write_all_ok(journal, vec![atomic(&format!("p-{i}"), 1..=1)]).await;
        }
        let journal = journals[0].as_ref().unwrap();
        for i in 0..4 {
            assert_eq!(
                recover(journal, &format!("p-{i}"), 1, MAX, MAX).await,
                (vec![1], 1),
                "round {round}"
            );
        }
    }
}

/// A database file in a directory that does not exist (SQLite creates the file, not its
/// directory): the error names the directory, as an absolute path, also for a relative URL.
#[tokio::test]
async fn a_missing_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir");
    let absolute = format!("sqlite:{}", missing.join("journal.db").display());
    match SqliteJournal::connect(&SqliteJournalOptions::new(&absolute)).await {
        Err(error @ SqlStoreError::Connect { .. }) => {
            assert!(
                matches!(
                    &error,
                    SqlStoreError::Connect {
                        failure: actix_persistence_sql::ConnectFailure::NoDirectory { directory },
                        ..
                    } if *directory == missing
                ),
                "{error:?}"
            );
            let message = error.to_string();
            assert!(
                message.contains(&format!(
                    "the directory {} does not exist",
                    missing.display()
                )),
                "{message}"
            );
        }
        Err(other) => panic!("expected a connect error, got {other}"),
        Ok(_) => panic!("expected a connect error, got a journal"),
    }
    assert!(!missing.exists(), "nothing created");
    // Relative to the working directory: named as the absolute path it resolves to.
    let relative = "sqlite:no-such-dir-of-this-test/journal.db";
    match SqliteJournal::connect(&SqliteJournalOptions::new(relative)).await {
        Err(SqlStoreError::Connect {
            failure: actix_persistence_sql::ConnectFailure::NoDirectory { directory },
            ..
        }) => assert_eq!(
            directory,
            std::env::current_dir()
                .unwrap()
                .join("no-such-dir-of-this-test")
        ),
        Err(other) => panic!("expected a missing directory, got {other}"),
        Ok(_) => panic!("expected a connect error, got a journal"),
    }
}

/// The database file deleted while the journal has it open (an operator's `rm`, a cleanup job,
/// a container's volume swapped): SQLite goes on writing to the deleted file, so a write
/// acknowledged then would be gone at the next start, which makes a new, empty database at the
/// path. The journal checks the file before each commit: such a write fails with a storage
/// error naming the file, and nothing is acknowledged.
#[tokio::test]
async fn a_write_after_the_database_file_was_deleted_fails_instead_of_being_lost() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let journal = SqliteJournal::connect(&SqliteJournalOptions::new(format!(
        "sqlite:{}",
        path.display()
    )))
    .await
    .expect("connect");
    write_all_ok(&journal, vec![atomic("deleted-1", 1..=1)]).await;
    for suffix in ["", "-wal", "-shm"] {
        let file = dir.path().join(format!("journal.db{suffix}"));
        if file.exists() {
            std::fs::remove_file(file).unwrap();
        }
    }
    for batch in [
        vec![atomic("deleted-1", 2..=2)],
        vec![atomic("deleted-2", 1..=1), atomic("deleted-3", 1..=2)],
    ] {
        let count = batch.len();
        let results = journal.write_messages(batch).await.expect("answered");
        assert_eq!(results.len(), count);
        for result in results {
            match result {
                Err(actix_persistence_core::AtomicWriteError::Failed(
                    error @ JournalError::Storage { .. },
                )) => {
                    let message = error.to_string();
                    assert!(
                        message.contains("was deleted or moved")
                            && message.contains(&path.display().to_string()),
                        "{message}"
                    );
                }
                other => panic!("expected a storage failure, got {other:?}"),
            }
        }
    }
    assert!(!path.exists(), "the journal did not make a new file");
}
