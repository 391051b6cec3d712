//! Writes: one result per atomic write, all-or-nothing atomic writes (J21-J24), byte-exact
//! persistence ids (J25), metadata round trips (J26) and concurrent callers.
#![cfg(feature = "sqlite")]

mod common;

use std::sync::Arc;

use actix_persistence_core::{
    AtomicWrite, AtomicWriteError, JournalError, JournalStore, PersistentRepr, MAX_SEQ_NR,
};
use common::{
    atomic, concurrent_write_seq_nr, event, event_with_payload, recover, replay_events,
    write_all_ok, write_one_to_five, TestJournal,
};
use sqlx::Connection;

const MAX: u64 = MAX_SEQ_NR;

#[tokio::test]
async fn empty_batch_gives_no_results() {
    let db = TestJournal::open().await;
    assert!(db
        .journal
        .write_messages(Vec::new())
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn j21_rejected_write_is_not_stored_and_its_neighbours_are() {
    let db = TestJournal::open().await;
    write_one_to_five(&db.journal, "p-1").await;
    // Seq 7 cannot be stored: its atomic write mixes persistence ids (built without the
    // checking constructor, as a buggy caller could).
    let bad = AtomicWrite {
        events: vec![event("p-1", 7), event("p-2", 8)],
    };
    let results = db
        .journal
        .write_messages(vec![atomic("p-1", 6..=6), bad, atomic("p-1", 8..=8)])
        .await
        .unwrap();
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok());
    match &results[1] {
        Err(AtomicWriteError::Rejected(rejection)) => {
            assert_eq!(rejection.persistence_id, "p-1");
            assert_eq!(rejection.seq_nr, 7);
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(results[2].is_ok());
    assert_eq!(
        recover(&db.journal, "p-1", 1, MAX, MAX).await,
        (vec![1, 2, 3, 4, 5, 6, 8], 8)
    );
    assert_eq!(recover(&db.journal, "p-2", 1, MAX, MAX).await, (vec![], 0));
}

#[tokio::test]
async fn malformed_writes_are_rejected_not_failed() {
    let db = TestJournal::open().await;
    let malformed = vec![
        AtomicWrite { events: vec![] },
        AtomicWrite {
            events: vec![event("p-1", 0)],
        },
        AtomicWrite {
            events: vec![event("p-1", 1), event("p-1", 3)],
        },
        AtomicWrite {
            events: vec![event("p-1", 2), event("p-1", 1)],
        },
    ];
    let results = db.journal.write_messages(malformed).await.unwrap();
    assert_eq!(results.len(), 4);
    for result in &results {
        assert!(
            matches!(result, Err(AtomicWriteError::Rejected(_))),
            "expected a rejection, got {result:?}"
        );
    }
    assert_eq!(recover(&db.journal, "p-1", 0, MAX, MAX).await, (vec![], 0));
}

#[tokio::test]
async fn seq_nr_above_i64_max_is_rejected_not_wrapped() {
    let db = TestJournal::open().await;
    let top = i64::MAX as u64;
    let results = db
        .journal
        .write_messages(vec![
            atomic("big", top..=top + 1),
            atomic("big", MAX..=MAX),
            atomic("big", 1..=1),
        ])
        .await
        .unwrap();
    assert_eq!(results.len(), 3);
    match &results[0] {
        Err(AtomicWriteError::Rejected(rejection)) => {
            assert_eq!(rejection.persistence_id, "big");
            assert_eq!(rejection.seq_nr, top);
            assert!(rejection.reason.contains("above"), "{}", rejection.reason);
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(matches!(results[1], Err(AtomicWriteError::Rejected(_))));
    assert!(results[2].is_ok());
    assert_eq!(recover(&db.journal, "big", 0, MAX, MAX).await, (vec![1], 1));
}

#[tokio::test]
async fn j22_atomic_write_of_k_events_is_one_result_and_all_or_nothing() {
    let db = TestJournal::open().await;
    for k in [1u64, 2, 3, 10] {
        // Stored whole: one result for k events.
        let pid = format!("stored-{k}");
        let results = db
            .journal
            .write_messages(vec![atomic(&pid, 1..=k)])
            .await
            .unwrap();
        assert_eq!(results.len(), 1, "k = {k}");
        assert!(results[0].is_ok(), "k = {k}: {:?}", results[0]);
        assert_eq!(
            recover(&db.journal, &pid, 1, MAX, MAX).await,
            ((1..=k).collect(), k),
            "k = {k}"
        );

        // Not stored at all: its last event is taken, so none of the k is written.
        let pid = format!("refused-{k}");
        let taken = event_with_payload(&pid, k, b"taken");
        write_all_ok(
            &db.journal,
            vec![AtomicWrite::new(vec![taken.clone()]).unwrap()],
        )
        .await;
        let results = db
            .journal
            .write_messages(vec![atomic(&pid, 1..=k)])
            .await
            .unwrap();
        assert_eq!(results.len(), 1, "k = {k}");
        assert_eq!(concurrent_write_seq_nr(&results[0], &pid), k);
        assert_eq!(
            replay_events(&db.journal, &pid, 1, MAX, MAX).await,
            vec![taken]
        );
        assert_eq!(
            db.journal.read_highest_sequence_nr(&pid, 0).await.unwrap(),
            k
        );
    }
}

#[tokio::test]
async fn j23_conflict_on_second_event_stores_none_and_fails() {
    let db = TestJournal::open().await;
    write_all_ok(&db.journal, vec![atomic("p-1", 2..=2)]).await;
    let results = db
        .journal
        .write_messages(vec![atomic("p-1", 1..=3), atomic("p-2", 1..=1)])
        .await
        .unwrap();
    assert_eq!(results.len(), 2);
    // A failure, not a rejection, naming the first conflicting seq_nr.
    assert_eq!(concurrent_write_seq_nr(&results[0], "p-1"), 2);
    assert!(
        results[1].is_ok(),
        "other writes of the batch are unaffected"
    );
    assert_eq!(recover(&db.journal, "p-1", 1, MAX, MAX).await, (vec![2], 2));
    assert_eq!(recover(&db.journal, "p-2", 1, MAX, MAX).await, (vec![1], 1));
}

#[tokio::test]
async fn j23_storage_fault_on_second_event_stores_none_and_fails() {
    let db = TestJournal::open().await;
    write_one_to_five(&db.journal, "p-1").await;
    // Inject a fault: the database aborts the insert of the second event of p-1's next write.
    let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
    sqlx::query(
        "CREATE TRIGGER inject_fault BEFORE INSERT ON journal \
         WHEN NEW.persistence_id = 'p-1' AND NEW.seq_nr = 7 \
         BEGIN SELECT RAISE(ABORT, 'injected fault'); END",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let results = db
        .journal
        .write_messages(vec![atomic("p-1", 6..=8), atomic("p-2", 1..=2)])
        .await
        .unwrap();
    assert_eq!(results.len(), 2);
    match &results[0] {
        Err(AtomicWriteError::Failed(JournalError::Storage { operation, source })) => {
            assert_eq!(*operation, "write");
            assert!(source.to_string().contains("injected fault"), "{source}");
        }
        other => panic!("expected a storage failure, got {other:?}"),
    }
    assert!(
        results[1].is_ok(),
        "other writes of the batch are unaffected"
    );
    assert_eq!(
        recover(&db.journal, "p-1", 1, MAX, MAX).await,
        (vec![1, 2, 3, 4, 5], 5)
    );
    assert_eq!(
        recover(&db.journal, "p-2", 1, MAX, MAX).await,
        (vec![1, 2], 2)
    );
}

#[tokio::test]
async fn j24_second_writer_of_a_seq_nr_fails_and_first_event_is_kept() {
    let db = TestJournal::open().await;
    write_one_to_five(&db.journal, "p-1").await;
    let mut first = event_with_payload("p-1", 6, b"first writer");
    first.writer_uuid = "writer-a".to_owned();
    let mut second = event_with_payload("p-1", 6, b"second writer");
    second.writer_uuid = "writer-b".to_owned();

    write_all_ok(
        &db.journal,
        vec![AtomicWrite::new(vec![first.clone()]).unwrap()],
    )
    .await;
    let results = db
        .journal
        .write_messages(vec![AtomicWrite::new(vec![second]).unwrap()])
        .await
        .unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(concurrent_write_seq_nr(&results[0], "p-1"), 6);
    assert_eq!(
        replay_events(&db.journal, "p-1", 6, 6, MAX).await,
        vec![first]
    );
    assert_eq!(
        db.journal.read_highest_sequence_nr("p-1", 0).await.unwrap(),
        6
    );
}

#[tokio::test]
async fn j25_persistence_ids_are_byte_exact() {
    let db = TestJournal::open().await;
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
        "it's",
        "say \"hi\"",
        "a%",
        "a_",
        " a ",
        "ünïcödé-日本-🦀",
        "u\u{0308}nicode", // decomposed: differs in bytes from the precomposed form
        "\u{fc}nicode",
    ];
    // Each id gets its own number of events, with payloads naming the id.
    for (i, pid) in ids.iter().enumerate() {
        let count = i as u64 + 1;
        let events = (1..=count)
            .map(|n| event_with_payload(pid, n, format!("{pid}:{n}").as_bytes()))
            .collect();
        write_all_ok(&db.journal, vec![AtomicWrite::new(events).unwrap()]).await;
    }
    for (i, pid) in ids.iter().enumerate() {
        let count = i as u64 + 1;
        let replayed = replay_events(&db.journal, pid, 1, MAX, MAX).await;
        let expected: Vec<PersistentRepr> = (1..=count)
            .map(|n| event_with_payload(pid, n, format!("{pid}:{n}").as_bytes()))
            .collect();
        assert_eq!(replayed, expected, "persistence id {pid:?}");
        assert_eq!(
            db.journal.read_highest_sequence_nr(pid, 0).await.unwrap(),
            count,
            "persistence id {pid:?}"
        );
    }
    db.journal.delete_messages_to("a", MAX).await.unwrap();
    assert!(replay_events(&db.journal, "a", 1, MAX, MAX)
        .await
        .is_empty());
    assert_eq!(replay_events(&db.journal, "A", 1, MAX, MAX).await.len(), 2);
    assert_eq!(
        replay_events(&db.journal, "a%", 1, MAX, MAX).await.len(),
        12
    );
}

#[tokio::test]
async fn j26_metadata_survives_write_and_replay() {
    let db = TestJournal::open().await;
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
    write_all_ok(&db.journal, vec![AtomicWrite::new(events.clone()).unwrap()]).await;
    assert_eq!(
        replay_events(&db.journal, "meta", 1, MAX, MAX).await,
        events
    );
}

#[tokio::test]
async fn results_come_back_in_batch_order_across_persistence_ids() {
    let db = TestJournal::open().await;
    write_all_ok(&db.journal, vec![atomic("b", 1..=1)]).await;
    let results = db
        .journal
        .write_messages(vec![
            atomic("a", 1..=2),
            AtomicWrite { events: vec![] },
            atomic("b", 1..=2),
            atomic("c", 1..=1),
            atomic("a", 3..=3),
        ])
        .await
        .unwrap();
    assert_eq!(results.len(), 5);
    assert!(results[0].is_ok());
    assert!(matches!(results[1], Err(AtomicWriteError::Rejected(_))));
    assert_eq!(concurrent_write_seq_nr(&results[2], "b"), 1);
    assert!(results[3].is_ok());
    assert!(results[4].is_ok());
    assert_eq!(
        recover(&db.journal, "a", 1, MAX, MAX).await,
        (vec![1, 2, 3], 3)
    );
    assert_eq!(recover(&db.journal, "b", 1, MAX, MAX).await, (vec![1], 1));
    assert_eq!(recover(&db.journal, "c", 1, MAX, MAX).await, (vec![1], 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_write_calls_all_succeed() {
    let db = TestJournal::open().await;
    let journal = Arc::new(db.journal.clone());
    let mut tasks = Vec::new();
    for task in 0..20u64 {
        let journal = Arc::clone(&journal);
        tasks.push(tokio::spawn(async move {
            let pid = format!("concurrent-{task}");
            // Each call: several atomic writes, then a replay racing the other writers.
            let writes = vec![
                atomic(&pid, 1..=3),
                atomic(&pid, 4..=4),
                atomic(&pid, 5..=10),
            ];
            let results = journal.write_messages(writes).await?;
            let replayed = replay_events(&journal, &pid, 1, MAX, MAX).await;
            Ok::<_, JournalError>((pid, results, replayed.len()))
        }));
    }
    for task in tasks {
        let (pid, results, replayed) = task.await.unwrap().unwrap();
        assert_eq!(results.len(), 3, "{pid}");
        for result in &results {
            assert!(result.is_ok(), "{pid}: {result:?}");
        }
        assert_eq!(
            replayed, 10,
            "{pid}: a committed write is visible to a later replay"
        );
    }
    for task in 0..20u64 {
        let pid = format!("concurrent-{task}");
        assert_eq!(
            recover(&db.journal, &pid, 1, MAX, MAX).await,
            ((1..=10).collect(), 10)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_of_the_same_seq_nr_store_exactly_one() {
    let db = TestJournal::open().await;
    let mut tasks = Vec::new();
    for writer in 0..10u8 {
        let journal = db.journal.clone();
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
    let stored = replay_events(&db.journal, "contested", 1, MAX, MAX).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].payload, vec![winners[0]]);
}
