//! Writes at store level, on SQLite and on PostgreSQL: one result per atomic write, rejections
//! before storage, all-or-nothing atomic writes, second writers, byte-exact persistence ids,
//! metadata round trips and concurrent callers. (The journal conformance cases J21-J26 run
//! through the journal actor in `conformance.rs`.)
#![cfg(any(feature = "sqlite", feature = "test-util"))]

mod common;

use actix_persistence_core::{
    AtomicWrite, AtomicWriteError, JournalError, JournalStore, PersistentRepr, MAX_SEQ_NR,
};
use common::{
    assert_write_failed_with, atomic, backend_tests, concurrent_write_seq_nr, event,
    event_with_payload, recover, replay_events, write_all_ok, write_one_to_five, TestBackend,
};

const MAX: u64 = MAX_SEQ_NR;

backend_tests! {
    empty_batch_gives_no_results,
    rejected_write_is_not_stored_and_its_neighbours_are,
    malformed_writes_are_rejected_not_failed,
    seq_nr_above_i64_max_is_rejected_and_bounds_above_it_mean_no_bound,
    conflict_on_second_event_stores_none_and_names_the_taken_seq_nr,
    storage_fault_on_second_event_stores_none_and_fails_only_that_write,
    second_journal_writing_a_taken_seq_nr_fails_and_the_first_event_is_kept,
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    concurrent_writers_of_the_same_seq_nr_store_exactly_one,
    persistence_ids_are_byte_exact,
    metadata_survives_write_and_replay,
    results_come_back_in_batch_order_across_persistence_ids,
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    twenty_concurrent_write_calls_all_succeed,
    atomic_write_of_thousands_of_events_is_stored_whole_or_not_at_all,
    events_at_the_payload_limit_over_one_gib_in_all_are_stored,
    a_write_after_a_failed_one_of_its_id_in_the_batch_is_not_stored,
}

async fn empty_batch_gives_no_results<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    assert!(journal.write_messages(Vec::new()).await.unwrap().is_empty());
}

async fn rejected_write_is_not_stored_and_its_neighbours_are<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    write_one_to_five(&journal, "p-1").await;
    // Seq 7 cannot be stored: its atomic write mixes persistence ids (built without the
    // checking constructor, as a buggy caller could).
    let bad = AtomicWrite {
        events: vec![event("p-1", 7), event("p-2", 8)],
        fencing_token: Default::default(),
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
}

async fn malformed_writes_are_rejected_not_failed<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    let malformed = vec![
        AtomicWrite {
            events: vec![],
            fencing_token: Default::default(),
        },
        AtomicWrite {
            events: vec![event("p-1", 0)],
            fencing_token: Default::default(),
        },
        AtomicWrite {
            events: vec![event("p-1", 1), event("p-1", 3)],
            fencing_token: Default::default(),
        },
        AtomicWrite {
            events: vec![event("p-1", 2), event("p-1", 1)],
            fencing_token: Default::default(),
        },
    ];
    let results = journal.write_messages(malformed).await.unwrap();
    assert_eq!(results.len(), 4);
    for result in &results {
        assert!(
            matches!(result, Err(AtomicWriteError::Rejected(_))),
            "expected a rejection, got {result:?}"
        );
    }
    assert_eq!(recover(&journal, "p-1", 0, MAX, MAX).await, (vec![], 0));
}

async fn seq_nr_above_i64_max_is_rejected_and_bounds_above_it_mean_no_bound<B: TestBackend>(db: B) {
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
    // The highest storable sequence number round-trips.
    assert!(results[2].is_ok(), "{:?}", results[2]);
    assert_eq!(
        recover(&journal, "big", 1, MAX, MAX).await,
        (vec![top - 1, top], top)
    );
    assert_eq!(
        recover(&journal, "big", top, top, 1).await,
        (vec![top], top)
    );
    // Bounds above i64::MAX: `from` matches nothing, `to` means "no bound".
    assert_eq!(
        recover(&journal, "big", top + 1, MAX, MAX).await,
        (vec![], top)
    );
    assert_eq!(
        recover(&journal, "big", top - 1, top + 5, MAX).await,
        (vec![top - 1, top], top)
    );
    journal
        .delete_messages_to("big", MAX, actix_persistence_core::FencingToken::UNOWNED)
        .await
        .unwrap();
    assert_eq!(recover(&journal, "big", 0, MAX, MAX).await, (vec![], top));
}

async fn conflict_on_second_event_stores_none_and_names_the_taken_seq_nr<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    write_all_ok(&journal, vec![atomic("p-1", 2..=2)]).await;
    let results = journal
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
    assert_eq!(recover(&journal, "p-1", 1, MAX, MAX).await, (vec![2], 2));
    assert_eq!(recover(&journal, "p-2", 1, MAX, MAX).await, (vec![1], 1));
}

async fn storage_fault_on_second_event_stores_none_and_fails_only_that_write<B: TestBackend>(
    db: B,
) {
    let journal = db.journal().await;
    write_one_to_five(&journal, "p-1").await;
    // Inject a fault: the database refuses the second event of p-1's next write.
    db.fail_insert_of("p-1", 7).await;

    let results = journal
        .write_messages(vec![atomic("p-1", 6..=8), atomic("p-2", 1..=2)])
        .await
        .unwrap();
    assert_eq!(results.len(), 2);
    assert_write_failed_with(&results[0], "injected fault at 7");
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
    assert_write_failed_with(&results[0], "injected fault at 7");
    assert_eq!(journal.read_highest_sequence_nr("p-1", 0).await.unwrap(), 5);
}

async fn second_journal_writing_a_taken_seq_nr_fails_and_the_first_event_is_kept<B: TestBackend>(
    db: B,
) {
    let journal = db.journal().await;
    write_one_to_five(&journal, "p-1").await;
    // The second writer is another journal (another process, as far as the database knows).
    let other = db.journal().await;
    let mut first = event_with_payload("p-1", 6, b"first writer");
    first.writer_uuid = "writer-a".into();
    let mut second = event_with_payload("p-1", 6, b"second writer");
    second.writer_uuid = "writer-b".into();

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
}

async fn concurrent_writers_of_the_same_seq_nr_store_exactly_one<B: TestBackend>(db: B) {
    // Two journals: writers of one share its batches, the others race from another pool.
    let journals = [db.journal().await, db.journal().await];
    let mut tasks = Vec::new();
    for writer in 0..10u8 {
        let journal = journals[usize::from(writer) % 2].clone();
        tasks.push(tokio::spawn(async move {
            let mut event = event_with_payload("contested", 1, &[writer]);
            event.writer_uuid = format!("writer-{writer}").into();
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
}

async fn persistence_ids_are_byte_exact<B: TestBackend>(db: B) {
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
    // Each id gets its own number of events, with payloads naming the id.
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
    journal
        .delete_messages_to("a", MAX, actix_persistence_core::FencingToken::UNOWNED)
        .await
        .unwrap();
    assert!(replay_events(&journal, "a", 1, MAX, MAX).await.is_empty());
    assert_eq!(replay_events(&journal, "A", 1, MAX, MAX).await.len(), 2);
    assert_eq!(replay_events(&journal, "a%", 1, MAX, MAX).await.len(), 14);
    // The stored ids are exactly the ones written, byte for byte.
    let mut stored = db
        .query_strings("SELECT persistence_id FROM journal_highest")
        .await;
    let mut written: Vec<String> = ids.iter().map(|id| (*id).to_owned()).collect();
    stored.sort();
    written.sort();
    assert_eq!(stored, written);
}

async fn metadata_survives_write_and_replay<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    let all_bytes: Vec<u8> = (0..=255).collect();
    let events = vec![
        PersistentRepr {
            persistence_id: "meta".into(),
            seq_nr: 1,
            payload: all_bytes,
            serializer_id: u32::MAX,
            manifest: "com.example.Deposited/v2 ü".to_owned(),
            writer_uuid: "3f2b8c1e-9d4a-4b7f-a1c2-5e6f7a8b9c0d".into(),
            timestamp: 1_712_345_678_901,
            tags: vec![
                "account".to_owned(),
                "with,comma".to_owned(),
                "with \"quotes\" and \\".to_owned(),
                "{braces}".to_owned(),
                "NULL".to_owned(),
                "日本".to_owned(),
                String::new(),
            ]
            .into(),
        },
        PersistentRepr {
            persistence_id: "meta".into(),
            seq_nr: 2,
            payload: Vec::new(),
            serializer_id: 0,
            manifest: String::new(),
            writer_uuid: "".into(),
            timestamp: -1,
            tags: Default::default(),
        },
        PersistentRepr {
            persistence_id: "meta".into(),
            seq_nr: 3,
            payload: b"\0nul\0".to_vec(),
            serializer_id: 7,
            manifest: "m".to_owned(),
            writer_uuid: "w".into(),
            timestamp: i64::MAX,
            tags: vec!["only".to_owned()].into(),
        },
    ];
    write_all_ok(&journal, vec![AtomicWrite::new(events.clone()).unwrap()]).await;
    assert_eq!(replay_events(&journal, "meta", 1, MAX, MAX).await, events);
}

async fn results_come_back_in_batch_order_across_persistence_ids<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    write_all_ok(&journal, vec![atomic("b", 1..=1)]).await;
    let results = journal
        .write_messages(vec![
            atomic("a", 1..=2),
            AtomicWrite {
                events: vec![],
                fencing_token: Default::default(),
            },
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
        recover(&journal, "a", 1, MAX, MAX).await,
        (vec![1, 2, 3], 3)
    );
    assert_eq!(recover(&journal, "b", 1, MAX, MAX).await, (vec![1], 1));
    assert_eq!(recover(&journal, "c", 1, MAX, MAX).await, (vec![1], 1));
}

async fn twenty_concurrent_write_calls_all_succeed<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    let mut tasks = Vec::new();
    for task in 0..20u64 {
        let journal = journal.clone();
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
            recover(&journal, &pid, 1, MAX, MAX).await,
            ((1..=10).collect(), 10)
        );
    }
}

async fn atomic_write_of_thousands_of_events_is_stored_whole_or_not_at_all<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    // 2500 events in one atomic write (on PostgreSQL: three INSERT statements).
    let results = journal
        .write_messages(vec![atomic("big", 1..=2500)])
        .await
        .unwrap();
    assert!(results[0].is_ok(), "{:?}", results[0]);
    let (replayed, highest) = recover(&journal, "big", 1, MAX, MAX).await;
    assert_eq!(replayed, (1..=2500).collect::<Vec<_>>());
    assert_eq!(highest, 2500);

    // Taken near the end (on PostgreSQL: in the last statement's range): the events before it
    // are rolled back too.
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
}

/// Events within the limits (each payload at `MAX_PAYLOAD_BYTES`) whose payloads add up to more
/// than 1 GiB, PostgreSQL's limit on one bind message and on one array value: in one atomic
/// write, and as one batch of single-event writes of many persistence ids (what group commit
/// makes of many actors persisting at once). Each write is within the limits, so each is
/// stored; a store must split its statements, not fail the writes (which stopped every actor
/// of the batch, and again after each restart).
async fn events_at_the_payload_limit_over_one_gib_in_all_are_stored<B: TestBackend>(db: B) {
    use actix_persistence_core::limits::MAX_PAYLOAD_BYTES;
    // 103 x 10 MiB = 1.006 GiB: just over PostgreSQL's 1 GiB - 1 byte.
    const EVENTS: u64 = 103;
    let journal = db.journal().await;
    let payload = vec![b'x'; MAX_PAYLOAD_BYTES];
    let big = |pid: &str, seq_nr: u64| event_with_payload(pid, seq_nr, &payload);

    let one_write = AtomicWrite::new((1..=EVENTS).map(|n| big("huge", n)).collect()).unwrap();
    let results = journal.write_messages(vec![one_write]).await.unwrap();
    assert!(results[0].is_ok(), "{:?}", results[0]);

    let many_ids = (1..=EVENTS)
        .map(|n| AtomicWrite::new(vec![big(&format!("many-{n}"), 1)]).unwrap())
        .collect();
    let results = journal.write_messages(many_ids).await.unwrap();
    assert_eq!(results.len(), EVENTS as usize);
    common::assert_all_ok(&results);

    let stored = db
        .query_i64s(
            "SELECT count(*) FROM journal \
             WHERE persistence_id = 'huge' AND length(payload) = 10485760",
        )
        .await;
    assert_eq!(stored, [EVENTS as i64]);
    let stored = db
        .query_i64s(
            "SELECT count(*) FROM journal \
             WHERE persistence_id LIKE 'many-%' AND seq_nr = 1 AND length(payload) = 10485760",
        )
        .await;
    assert_eq!(stored, [EVENTS as i64]);
    assert_eq!(
        journal.read_highest_sequence_nr("huge", 1).await.unwrap(),
        EVENTS
    );
}

/// A failed atomic write (here the database refuses its event) is followed in the same batch
/// by a later write of the same persistence id: that one must not be stored either (it fails,
/// not attempted), or its events would follow a hole no recovery can see, and every recovery
/// would replay them without the failed ones (as Akka, where a failure fails the actor's whole
/// batch). Writes of other ids are unaffected. With group commit, without it, and with a call
/// larger than a transaction.
async fn a_write_after_a_failed_one_of_its_id_in_the_batch_is_not_stored<B: TestBackend>(db: B) {
    use common::Setting;
    let journal = db.journal().await;
    write_one_to_five(&journal, "p-1").await;
    db.fail_insert_of("p-1", 6).await;
    let not_attempted = |result: &actix_persistence_core::AtomicWriteResult, seq: u64| match result
    {
        Err(AtomicWriteError::Failed(JournalError::EarlierWriteFailed {
            persistence_id,
            seq_nr,
        })) => {
            assert_eq!(persistence_id, "p-1");
            assert_eq!(*seq_nr, seq);
        }
        other => panic!("expected write {seq}.. not to be attempted, got {other:?}"),
    };

    let unbatched = db.journal_with(&[Setting::MaxBatchSize(1)]).await;
    // Batches of 2: the call's 4 writes take two transactions, the failure in the first.
    let split = db.journal_with(&[Setting::MaxBatchSize(2)]).await;
    for (journal, other) in [(journal, "p-2"), (unbatched, "p-3"), (split, "p-4")] {
        let results = journal
            .write_messages(vec![
                atomic("p-1", 6..=6),
                atomic(other, 1..=1),
                atomic("p-1", 7..=8),
                atomic("p-1", 9..=9),
            ])
            .await
            .unwrap();
        assert_eq!(results.len(), 4);
        assert_write_failed_with(&results[0], "injected fault at 6");
        assert!(
            results[1].is_ok(),
            "other ids are unaffected: {:?}",
            results[1]
        );
        not_attempted(&results[2], 7);
        not_attempted(&results[3], 9);
        assert_eq!(
            recover(&journal, "p-1", 1, MAX, MAX).await,
            (vec![1, 2, 3, 4, 5], 5)
        );
        assert_eq!(recover(&journal, other, 1, MAX, MAX).await, (vec![1], 1));
    }
}
