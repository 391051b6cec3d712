//! The PostgreSQL journal at store level: opening, the journal conformance cases J1-J26 that a
//! store can show on its own, rejections of what PostgreSQL cannot store, and paging. Each test
//! runs in a database of its own (skipped without `DATABASE_URL`, except in CI).
#![cfg(feature = "postgres")]

mod common;

use actix_persistence_core::{
    AtomicWrite, AtomicWriteError, JournalError, JournalStore, PersistentRepr, MAX_SEQ_NR,
};
use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions, SqlStoreError};
use common::postgres::{url_with_database, with_database, TestDb};
use common::{
    atomic, concurrent_write_seq_nr, event, event_with_payload, recover, replay_events,
    write_all_ok, write_one_to_five,
};
use sqlx::{Connection, Executor, Row};

const MAX: u64 = MAX_SEQ_NR;

/// The conformance setup: seq 1..5 of `p-1`.
async fn journal_with_one_to_five(db: &TestDb) -> PostgresJournal {
    let journal = db.journal().await;
    write_one_to_five(&journal, "p-1").await;
    journal
}

/// A replay case: after the setup (and a delete up to `deleted`, if any),
/// `replay(from, to, max)` gives `events` and highest 5.
macro_rules! replay_case {
    ($name:ident, deleted: $deleted:expr, replay($from:expr, $to:expr, $max:expr) => $events:expr) => {
        #[tokio::test]
        async fn $name() {
            with_database(|db| async move {
                let journal = journal_with_one_to_five(&db).await;
                let deleted: Option<u64> = $deleted;
                if let Some(to) = deleted {
                    journal.delete_messages_to("p-1", to).await.expect("delete");
                }
                let expected: Vec<u64> = $events;
                assert_eq!(
                    recover(&journal, "p-1", $from, $to, $max).await,
                    (expected, 5)
                );
                journal.close().await;
            })
            .await;
        }
    };
}

replay_case!(j1_replay_everything_gives_all_events_and_highest,
    deleted: None, replay(1, MAX, MAX) => vec![1, 2, 3, 4, 5]);
replay_case!(j2_replay_from_lower_bound,
    deleted: None, replay(3, MAX, MAX) => vec![3, 4, 5]);
replay_case!(j3_upper_bound_never_lowers_the_highest,
    deleted: None, replay(1, 3, MAX) => vec![1, 2, 3]);
replay_case!(j4_replay_at_most_max_events,
    deleted: None, replay(1, MAX, 3) => vec![1, 2, 3]);
replay_case!(j5_replay_between_bounds,
    deleted: None, replay(2, 3, MAX) => vec![2, 3]);
replay_case!(j6_max_limits_a_bounded_replay,
    deleted: None, replay(2, 5, 2) => vec![2, 3]);
replay_case!(j7_replay_a_single_event,
    deleted: None, replay(2, 2, MAX) => vec![2]);
replay_case!(j8_max_one_gives_the_first_event_in_bounds,
    deleted: None, replay(2, 4, 1) => vec![2]);
replay_case!(j9_max_zero_replays_nothing,
    deleted: None, replay(2, 4, 0) => vec![]);
replay_case!(j10_from_above_to_replays_nothing,
    deleted: None, replay(3, 2, MAX) => vec![]);
replay_case!(j13_delete_to_three_then_replay_gives_four_and_five,
    deleted: Some(3), replay(1, MAX, MAX) => vec![4, 5]);
replay_case!(j15_delete_to_max_deletes_everything_and_keeps_highest,
    deleted: Some(MAX), replay(1, MAX, MAX) => vec![]);
replay_case!(j16_replay_from_a_deleted_seq_nr,
    deleted: Some(3), replay(3, MAX, MAX) => vec![4, 5]);
replay_case!(j17_replay_inside_the_deleted_range,
    deleted: Some(3), replay(1, 2, MAX) => vec![]);
replay_case!(j18_replay_up_to_the_last_deleted,
    deleted: Some(3), replay(1, 3, MAX) => vec![]);
replay_case!(j19_replay_from_the_first_kept,
    deleted: Some(3), replay(4, MAX, MAX) => vec![4, 5]);
replay_case!(j20_replay_across_the_delete_boundary,
    deleted: Some(3), replay(1, 4, MAX) => vec![4]);

#[tokio::test]
async fn j11_unknown_id_replays_nothing_and_highest_is_zero() {
    with_database(|db| async move {
        let journal = journal_with_one_to_five(&db).await;
        for pid in ["p-2", "p", "p-1-", "P-1"] {
            assert_eq!(
                recover(&journal, pid, 1, MAX, MAX).await,
                (vec![], 0),
                "{pid}"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn j12_highest_is_read_without_replaying() {
    with_database(|db| async move {
        let journal = journal_with_one_to_five(&db).await;
        assert_eq!(journal.read_highest_sequence_nr("p-1", 0).await.unwrap(), 5);
        assert_eq!(journal.read_highest_sequence_nr("p-1", 4).await.unwrap(), 5);
    })
    .await;
}

#[tokio::test]
async fn j14_delete_between_replays_never_resets_highest() {
    with_database(|db| async move {
        let journal = journal_with_one_to_five(&db).await;
        assert_eq!(
            recover(&journal, "p-1", 1, MAX, MAX).await,
            (vec![1, 2, 3, 4, 5], 5)
        );
        journal.delete_messages_to("p-1", 3).await.unwrap();
        assert_eq!(recover(&journal, "p-1", 1, MAX, MAX).await, (vec![4, 5], 5));
        journal.delete_messages_to("p-1", MAX).await.unwrap();
        assert_eq!(recover(&journal, "p-1", 1, MAX, MAX).await, (vec![], 5));
        // Writing goes on after the highest, and the highest follows.
        write_all_ok(&journal, vec![atomic("p-1", 6..=6)]).await;
        assert_eq!(recover(&journal, "p-1", 1, MAX, MAX).await, (vec![6], 6));
    })
    .await;
}

#[tokio::test]
async fn delete_touches_only_its_own_persistence_id() {
    with_database(|db| async move {
        let journal = journal_with_one_to_five(&db).await;
        write_one_to_five(&journal, "p-10").await;
        write_one_to_five(&journal, "P-1").await;
        journal.delete_messages_to("p-1", 4).await.unwrap();
        journal.delete_messages_to("unknown", MAX).await.unwrap();
        assert_eq!(recover(&journal, "p-1", 1, MAX, MAX).await, (vec![5], 5));
        for pid in ["p-10", "P-1"] {
            assert_eq!(
                recover(&journal, pid, 1, MAX, MAX).await,
                (vec![1, 2, 3, 4, 5], 5),
                "{pid}"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn j21_rejected_write_is_not_stored_and_its_neighbours_are() {
    with_database(|db| async move {
        let journal = journal_with_one_to_five(&db).await;
        // Seq 7 cannot be stored: its atomic write mixes persistence ids.
        let bad = AtomicWrite {
            events: vec![event("p-1", 7), event("p-2", 8)],
        };
        let results = journal
            .write_messages(vec![atomic("p-1", 6..=6), bad, atomic("p-1", 8..=8)])
            .await
            .unwrap();
        assert_eq!(results.len(), 3);
        assert!(results[0].is_ok(), "{:?}", results[0]);
        match &results[1] {
            Err(AtomicWriteError::Rejected(rejection)) => {
                assert_eq!(rejection.persistence_id, "p-1");
                assert_eq!(rejection.seq_nr, 7);
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
        assert!(results[2].is_ok(), "{:?}", results[2]);
        assert_eq!(
            recover(&journal, "p-1", 1, MAX, MAX).await,
            (vec![1, 2, 3, 4, 5, 6, 8], 8)
        );
        assert_eq!(recover(&journal, "p-2", 1, MAX, MAX).await, (vec![], 0));
    })
    .await;
}

#[tokio::test]
async fn j22_atomic_write_of_k_events_is_one_result_and_all_or_nothing() {
    with_database(|db| async move {
        let journal = db.journal().await;
        for k in [1u64, 2, 3, 10] {
            let pid = format!("stored-{k}");
            let results = journal
                .write_messages(vec![atomic(&pid, 1..=k)])
                .await
                .unwrap();
            assert_eq!(results.len(), 1, "k = {k}");
            assert!(results[0].is_ok(), "k = {k}: {:?}", results[0]);
            assert_eq!(
                recover(&journal, &pid, 1, MAX, MAX).await,
                ((1..=k).collect(), k),
                "k = {k}"
            );

            // Not stored at all: its last event is taken, so none of the k is written.
            let pid = format!("refused-{k}");
            let taken = event_with_payload(&pid, k, b"taken");
            write_all_ok(
                &journal,
                vec![AtomicWrite::new(vec![taken.clone()]).unwrap()],
            )
            .await;
            let results = journal
                .write_messages(vec![atomic(&pid, 1..=k)])
                .await
                .unwrap();
            assert_eq!(results.len(), 1, "k = {k}");
            assert_eq!(concurrent_write_seq_nr(&results[0], &pid), k);
            assert_eq!(
                replay_events(&journal, &pid, 1, MAX, MAX).await,
                vec![taken]
            );
            assert_eq!(journal.read_highest_sequence_nr(&pid, 0).await.unwrap(), k);
        }
    })
    .await;
}

#[tokio::test]
async fn atomic_write_larger_than_one_statement_is_stored_whole_or_not_at_all() {
    with_database(|db| async move {
        let journal = db.journal().await;
        // 2500 events take three INSERT statements, all in one atomic write.
        let results = journal
            .write_messages(vec![atomic("big", 1..=2500)])
            .await
            .unwrap();
        assert!(results[0].is_ok(), "{:?}", results[0]);
        let (replayed, highest) = recover(&journal, "big", 1, MAX, MAX).await;
        assert_eq!(replayed, (1..=2500).collect::<Vec<_>>());
        assert_eq!(highest, 2500);

        // Taken in the last statement's range: the rows of the first two are rolled back too.
        write_all_ok(&journal, vec![atomic("big-2", 2400..=2400)]).await;
        let results = journal
            .write_messages(vec![atomic("big-2", 1..=2500), atomic("small", 1..=1)])
            .await
            .unwrap();
        assert_eq!(concurrent_write_seq_nr(&results[0], "big-2"), 2400);
        assert!(results[1].is_ok(), "{:?}", results[1]);
        assert_eq!(
            recover(&journal, "big-2", 1, MAX, MAX).await,
            (vec![2400], 2400)
        );
    })
    .await;
}

#[tokio::test]
async fn j23_storage_fault_on_second_event_stores_none_and_fails() {
    with_database(|db| async move {
        let journal = journal_with_one_to_five(&db).await;
        // Inject a fault: the database refuses the second event of p-1's next write.
        let mut conn = db.connect().await;
        conn.execute(
            "CREATE FUNCTION inject_fault() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'injected fault at %', NEW.seq_nr; END $$",
        )
        .await
        .unwrap();
        conn.execute(
            "CREATE TRIGGER inject_fault BEFORE INSERT ON journal FOR EACH ROW \
             WHEN (NEW.persistence_id = 'p-1' AND NEW.seq_nr = 7) \
             EXECUTE FUNCTION inject_fault()",
        )
        .await
        .unwrap();
        conn.close().await.unwrap();

        let results = journal
            .write_messages(vec![atomic("p-1", 6..=8), atomic("p-2", 1..=2)])
            .await
            .unwrap();
        assert_eq!(results.len(), 2);
        match &results[0] {
            Err(AtomicWriteError::Failed(JournalError::Storage { operation, source })) => {
                assert_eq!(*operation, "write");
                assert!(
                    source.to_string().contains("injected fault at 7"),
                    "{source}"
                );
            }
            other => panic!("expected a storage failure, got {other:?}"),
        }
        assert!(
            results[1].is_ok(),
            "other writes of the batch are unaffected"
        );
        assert_eq!(
            recover(&journal, "p-1", 1, MAX, MAX).await,
            (vec![1, 2, 3, 4, 5], 5)
        );
        assert_eq!(recover(&journal, "p-2", 1, MAX, MAX).await, (vec![1, 2], 2));

        // Alone in its transaction (no savepoint), the same fault fails it just as well.
        let results = journal
            .write_messages(vec![atomic("p-1", 6..=7)])
            .await
            .unwrap();
        assert!(
            matches!(
                &results[0],
                Err(AtomicWriteError::Failed(JournalError::Storage { .. }))
            ),
            "{:?}",
            results[0]
        );
        assert_eq!(journal.read_highest_sequence_nr("p-1", 0).await.unwrap(), 5);
    })
    .await;
}

#[tokio::test]
async fn j24_second_writer_of_a_seq_nr_fails_and_first_event_is_kept() {
    with_database(|db| async move {
        let journal = journal_with_one_to_five(&db).await;
        // The second writer is another journal (another process, as far as the database knows).
        let other = db.journal().await;
        let mut first = event_with_payload("p-1", 6, b"first writer");
        first.writer_uuid = "writer-a".to_owned();
        let mut second = event_with_payload("p-1", 6, b"second writer");
        second.writer_uuid = "writer-b".to_owned();

        write_all_ok(
            &journal,
            vec![AtomicWrite::new(vec![first.clone()]).unwrap()],
        )
        .await;
        let results = other
            .write_messages(vec![AtomicWrite::new(vec![second]).unwrap()])
            .await
            .unwrap();
        assert_eq!(results.len(), 1);
        assert_eq!(concurrent_write_seq_nr(&results[0], "p-1"), 6);
        assert_eq!(replay_events(&journal, "p-1", 6, 6, MAX).await, vec![first]);
        assert_eq!(journal.read_highest_sequence_nr("p-1", 0).await.unwrap(), 6);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn j24_concurrent_writers_of_the_same_seq_nr_store_exactly_one() {
    with_database(|db| async move {
        let journals = [db.journal().await, db.journal().await];
        let mut tasks = Vec::new();
        for writer in 0..10u8 {
            let journal = journals[usize::from(writer) % 2].clone();
            tasks.push(tokio::spawn(async move {
                let mut event = event_with_payload("contested", 1, &[writer]);
                event.writer_uuid = format!("writer-{writer}");
                let results = journal
                    .write_messages(vec![AtomicWrite::new(vec![event]).unwrap()])
                    .await
                    .unwrap();
                (writer, results.into_iter().next().unwrap())
            }));
        }
        let mut winners = Vec::new();
        for task in tasks {
            let (writer, result) = task.await.unwrap();
            match result {
                Ok(()) => winners.push(writer),
                failed => assert_eq!(concurrent_write_seq_nr(&failed, "contested"), 1),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one writer wins: {winners:?}");
        let stored = replay_events(&journals[0], "contested", 1, MAX, MAX).await;
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].payload, vec![winners[0]]);
    })
    .await;
}

#[tokio::test]
async fn j25_persistence_ids_are_byte_exact() {
    with_database(|db| async move {
        let journal = db.journal().await;
        let ids = [
            "a",
            "A",
            "a-b",
            "a-b-1",
            "Account",
            "account",
            "ACCOUNT",
            "a/b",
            "a\\b",
            "a\\\\b",
            "it's",
            "it''s",
            "say \"hi\"",
            "a%",
            "a_",
            "a*",
            " a ",
            "a;DROP TABLE journal;--",
            "$1",
            "{a,b}",
            "ünïcödé-日本-🦀",
            "u\u{0308}nicode", // decomposed: differs in bytes from the precomposed form
            "\u{fc}nicode",
        ];
        for (i, pid) in ids.iter().enumerate() {
            let count = i as u64 + 1;
            let events = (1..=count)
                .map(|n| event_with_payload(pid, n, format!("{pid}:{n}").as_bytes()))
                .collect();
            write_all_ok(&journal, vec![AtomicWrite::new(events).unwrap()]).await;
        }
        for (i, pid) in ids.iter().enumerate() {
            let count = i as u64 + 1;
            let expected: Vec<PersistentRepr> = (1..=count)
                .map(|n| event_with_payload(pid, n, format!("{pid}:{n}").as_bytes()))
                .collect();
            assert_eq!(
                replay_events(&journal, pid, 1, MAX, MAX).await,
                expected,
                "persistence id {pid:?}"
            );
            assert_eq!(
                journal.read_highest_sequence_nr(pid, 0).await.unwrap(),
                count,
                "persistence id {pid:?}"
            );
        }
        journal.delete_messages_to("a", MAX).await.unwrap();
        assert!(replay_events(&journal, "a", 1, MAX, MAX).await.is_empty());
        assert_eq!(replay_events(&journal, "A", 1, MAX, MAX).await.len(), 2);
        assert_eq!(replay_events(&journal, "a%", 1, MAX, MAX).await.len(), 14);
        // The stored ids are exactly the ones written, byte for byte.
        let mut conn = db.connect().await;
        let stored: Vec<Vec<u8>> = sqlx::query(
            "SELECT DISTINCT convert_to(persistence_id, 'UTF8') AS id FROM journal_highest",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .iter()
        .map(|row| row.get("id"))
        .collect();
        let mut stored: Vec<String> = stored
            .into_iter()
            .map(|id| String::from_utf8(id).unwrap())
            .collect();
        let mut written: Vec<String> = ids.iter().map(|id| (*id).to_owned()).collect();
        stored.sort();
        written.sort();
        assert_eq!(stored, written);
        conn.close().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn j26_metadata_survives_write_and_replay() {
    with_database(|db| async move {
        let journal = db.journal().await;
        let all_bytes: Vec<u8> = (0..=255).collect();
        let events = vec![
            PersistentRepr {
                persistence_id: "meta".to_owned(),
                seq_nr: 1,
                payload: all_bytes,
                serializer_id: u32::MAX,
                manifest: "com.example.Deposited/v2 ü".to_owned(),
                writer_uuid: "3f2b8c1e-9d4a-4b7f-a1c2-5e6f7a8b9c0d".to_owned(),
                timestamp: 1_712_345_678_901,
                tags: vec![
                    "account".to_owned(),
                    "with,comma".to_owned(),
                    "with \"quotes\" and \\".to_owned(),
                    "{braces}".to_owned(),
                    "NULL".to_owned(),
                    "日本".to_owned(),
                    String::new(),
                ],
            },
            PersistentRepr {
                persistence_id: "meta".to_owned(),
                seq_nr: 2,
                payload: Vec::new(),
                serializer_id: 0,
                manifest: String::new(),
                writer_uuid: String::new(),
                timestamp: -1,
                tags: Vec::new(),
            },
            PersistentRepr {
                persistence_id: "meta".to_owned(),
                seq_nr: 3,
                payload: b"\0nul\0".to_vec(),
                serializer_id: 7,
                manifest: "m".to_owned(),
                writer_uuid: "w".to_owned(),
                timestamp: i64::MAX,
                tags: vec!["only".to_owned()],
            },
        ];
        write_all_ok(&journal, vec![AtomicWrite::new(events.clone()).unwrap()]).await;
        assert_eq!(replay_events(&journal, "meta", 1, MAX, MAX).await, events);
        // Serializer ids read in SQL as the INTEGER with the same bits.
        let mut conn = db.connect().await;
        let ids: Vec<i32> = sqlx::query_scalar(
            "SELECT serializer_id FROM journal WHERE persistence_id = 'meta' ORDER BY seq_nr",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        assert_eq!(ids, vec![-1, 0, 7]);
        conn.close().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn text_holding_nul_is_rejected_not_failed() {
    with_database(|db| async move {
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
        for (result, field) in results[2..].iter().zip(["writer id", "manifest", "a tag"]) {
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
async fn seq_nr_above_i64_max_is_rejected_and_bounds_above_it_mean_no_bound() {
    with_database(|db| async move {
        let journal = db.journal().await;
        let top = i64::MAX as u64;
        let results = journal
            .write_messages(vec![
                atomic("big", top..=top + 1),
                atomic("big", MAX..=MAX),
                atomic("big", top - 1..=top),
            ])
            .await
            .unwrap();
        match &results[0] {
            Err(AtomicWriteError::Rejected(rejection)) => {
                assert_eq!(rejection.seq_nr, top);
                assert!(rejection.reason.contains("above"), "{}", rejection.reason);
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
        assert!(matches!(results[1], Err(AtomicWriteError::Rejected(_))));
        assert!(results[2].is_ok(), "{:?}", results[2]);
        assert_eq!(
            recover(&journal, "big", top - 1, MAX, MAX).await,
            (vec![top - 1, top], top)
        );
        assert_eq!(
            recover(&journal, "big", top + 1, MAX, MAX).await,
            (vec![], top)
        );
        journal.delete_messages_to("big", MAX).await.unwrap();
        assert_eq!(recover(&journal, "big", 0, MAX, MAX).await, (vec![], top));
    })
    .await;
}

#[tokio::test]
async fn replay_pages_through_many_events_in_order() {
    with_database(|db| async move {
        let journal = db.journal_with(|o| o.replay_batch_size = 7).await;
        write_all_ok(&journal, (1..=50).map(|n| atomic("paged", n..=n)).collect()).await;
        journal.delete_messages_to("paged", 10).await.unwrap();
        let (all, highest) = recover(&journal, "paged", 1, MAX, MAX).await;
        assert_eq!(all, (11..=50).collect::<Vec<_>>());
        assert_eq!(highest, 50);
        // max and to cut inside a page and at a page boundary.
        for (from, to, max, expected) in [
            (12, 40, 14, (12..=25).collect::<Vec<_>>()),
            (11, 17, MAX, (11..=17).collect()),
            (11, MAX, 21, (11..=31).collect()),
        ] {
            assert_eq!(
                recover(&journal, "paged", from, to, max).await,
                (expected, 50),
                "replay({from}, {to}, {max})"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn replay_stream_outlives_the_journal_handle() {
    with_database(|db| async move {
        let journal = journal_with_one_to_five(&db).await;
        let stream = journal.replay_messages("p-1", 1, MAX, MAX);
        let reader = journal.clone();
        drop(journal);
        let events: Vec<PersistentRepr> = futures::TryStreamExt::try_collect(stream).await.unwrap();
        assert_eq!(events.len(), 5);
        reader.close().await;
    })
    .await;
}

#[tokio::test]
async fn connect_creates_the_tables_and_reconnecting_keeps_the_data() {
    with_database(|db| async move {
        let journal = journal_with_one_to_five(&db).await;
        let mut conn = db.connect().await;
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_name NOT LIKE '\\_sqlx%' \
             ORDER BY table_name",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        assert_eq!(tables, vec!["journal", "journal_highest", "snapshot"]);
        // A global ordering column, increasing in write order.
        let ordering: Vec<i64> = sqlx::query_scalar(
            "SELECT ordering FROM journal WHERE persistence_id = 'p-1' ORDER BY seq_nr",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        assert_eq!(ordering.len(), 5);
        assert!(ordering.windows(2).all(|w| w[0] < w[1]), "{ordering:?}");
        conn.close().await.unwrap();

        journal.close().await;
        assert!(
            journal.read_highest_sequence_nr("p-1", 0).await.is_err(),
            "a closed journal fails instead of hanging"
        );
        // Connecting again (migrations already applied) sees the same events.
        let again = db.journal().await;
        assert_eq!(
            recover(&again, "p-1", 1, MAX, MAX).await,
            (vec![1, 2, 3, 4, 5], 5)
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journals_connecting_at_once_to_a_fresh_database_all_migrate_it() {
    with_database(|db| async move {
        let options = db.options();
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
    with_database(|db| async move {
        let journal = db
            .journal_with(|o| o.statement_timeout = std::time::Duration::from_millis(500))
            .await;
        let mut conn = db.connect().await;
        conn.execute(
            "CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN PERFORM pg_sleep(30); RETURN NEW; END $$",
        )
        .await
        .unwrap();
        conn.execute(
            "CREATE TRIGGER slow_insert BEFORE INSERT ON journal FOR EACH ROW \
             WHEN (NEW.persistence_id = 'slow') EXECUTE FUNCTION slow_insert()",
        )
        .await
        .unwrap();
        conn.close().await.unwrap();
        let results = journal
            .write_messages(vec![atomic("slow", 1..=1), atomic("fast", 1..=1)])
            .await
            .unwrap();
        match &results[0] {
            Err(AtomicWriteError::Failed(JournalError::Storage { source, .. })) => {
                assert!(source.to_string().contains("statement timeout"), "{source}");
            }
            other => panic!("expected a statement timeout, got {other:?}"),
        }
        assert!(results[1].is_ok(), "{:?}", results[1]);
        assert_eq!(recover(&journal, "slow", 1, MAX, MAX).await, (vec![], 0));
        assert_eq!(recover(&journal, "fast", 1, MAX, MAX).await, (vec![1], 1));
        journal.close().await;
    })
    .await;
}

#[tokio::test]
async fn invalid_options_are_refused_before_connecting() {
    for (change, option) in [
        (
            (|o: &mut PostgresJournalOptions| o.url = String::new()) as fn(&mut _),
            "url",
        ),
        (|o| o.max_connections = 0, "max_connections"),
        (|o| o.replay_batch_size = 0, "replay_batch_size"),
        (|o| o.max_batch_size = 0, "max_batch_size"),
    ] {
        let mut options = PostgresJournalOptions::new("postgres://nobody@127.0.0.1:1/none");
        change(&mut options);
        match PostgresJournal::connect(&options).await {
            Err(SqlStoreError::InvalidOption { option: named, .. }) => assert_eq!(named, option),
            other => panic!("{option}: expected an invalid option, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn missing_database_is_a_connect_error_naming_the_url_without_password() {
    let Some(server) = common::postgres::database_url() else {
        return;
    };
    let missing = url_with_database(&server, "ap_test_does_not_exist");
    let options = PostgresJournalOptions {
        max_connections: 1,
        acquire_timeout: std::time::Duration::from_secs(5),
        ..PostgresJournalOptions::new(missing.clone())
    };
    match PostgresJournal::connect(&options).await {
        Err(error @ SqlStoreError::Connect { .. }) => {
            assert!(error.to_string().contains(&missing), "{error}");
            assert!(error.to_string().contains("does not exist"), "{error}");
        }
        other => panic!("expected a connect error, got {other:?}"),
    }
    // A password in the URL never shows in the error.
    let with_password = PostgresJournalOptions {
        url: "postgres://app:hunter2@127.0.0.1:1/events".to_owned(),
        acquire_timeout: std::time::Duration::from_secs(2),
        ..options
    };
    match PostgresJournal::connect(&with_password).await {
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
    assert_eq!(options.acquire_timeout, std::time::Duration::from_secs(5));
    assert_eq!(
        options.statement_timeout,
        std::time::Duration::from_secs(10)
    );
    assert_eq!(options.max_batch_size, 64);
    assert_eq!(options.replay_batch_size, 500);
    assert_eq!(
        PostgresJournalOptions::new("postgres://h/d").url,
        "postgres://h/d"
    );
}
