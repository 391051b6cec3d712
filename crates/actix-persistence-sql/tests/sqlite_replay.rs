//! Replay bounds of the journal conformance cases J1-J12, paging, and sequence numbers at the
//! edge of SQLite's INTEGER range.
#![cfg(feature = "sqlite")]

mod common;

use actix_persistence_core::{AtomicWrite, InMemoryJournal, JournalStore, MAX_SEQ_NR};
use common::{atomic, event, recover, replay_events, write_all_ok, write_one_to_five, TestJournal};
use futures::{StreamExt, TryStreamExt};

const MAX: u64 = MAX_SEQ_NR;

/// Opens a fresh journal holding seq 1..5 of `p-1`.
async fn journal_with_one_to_five() -> TestJournal {
    let db = TestJournal::open().await;
    write_one_to_five(&db.journal, "p-1").await;
    db
}

#[tokio::test]
async fn j1_replay_everything_gives_all_events_and_highest() {
    let db = journal_with_one_to_five().await;
    assert_eq!(
        recover(&db.journal, "p-1", 1, MAX, MAX).await,
        (vec![1, 2, 3, 4, 5], 5)
    );
    // Byte-exact: the events come back exactly as written.
    let written: Vec<_> = (1..=5).map(|n| event("p-1", n)).collect();
    assert_eq!(
        replay_events(&db.journal, "p-1", 1, MAX, MAX).await,
        written
    );
}

#[tokio::test]
async fn j2_replay_from_lower_bound() {
    let db = journal_with_one_to_five().await;
    assert_eq!(
        recover(&db.journal, "p-1", 3, MAX, MAX).await,
        (vec![3, 4, 5], 5)
    );
}

#[tokio::test]
async fn j3_upper_bound_never_lowers_the_highest() {
    let db = journal_with_one_to_five().await;
    assert_eq!(
        recover(&db.journal, "p-1", 1, 3, MAX).await,
        (vec![1, 2, 3], 5)
    );
}

#[tokio::test]
async fn j4_replay_at_most_max_events() {
    let db = journal_with_one_to_five().await;
    assert_eq!(
        recover(&db.journal, "p-1", 1, MAX, 3).await,
        (vec![1, 2, 3], 5)
    );
}

#[tokio::test]
async fn j5_replay_between_bounds() {
    let db = journal_with_one_to_five().await;
    assert_eq!(
        recover(&db.journal, "p-1", 2, 3, MAX).await,
        (vec![2, 3], 5)
    );
}

#[tokio::test]
async fn j6_max_limits_a_bounded_replay() {
    let db = journal_with_one_to_five().await;
    assert_eq!(recover(&db.journal, "p-1", 2, 5, 2).await, (vec![2, 3], 5));
}

#[tokio::test]
async fn j7_replay_a_single_event() {
    let db = journal_with_one_to_five().await;
    assert_eq!(recover(&db.journal, "p-1", 2, 2, MAX).await, (vec![2], 5));
}

#[tokio::test]
async fn j8_max_one_gives_the_first_event_in_bounds() {
    let db = journal_with_one_to_five().await;
    assert_eq!(recover(&db.journal, "p-1", 2, 4, 1).await, (vec![2], 5));
}

#[tokio::test]
async fn j9_max_zero_replays_nothing() {
    let db = journal_with_one_to_five().await;
    assert_eq!(recover(&db.journal, "p-1", 2, 4, 0).await, (vec![], 5));
}

#[tokio::test]
async fn j10_from_above_to_replays_nothing() {
    let db = journal_with_one_to_five().await;
    assert_eq!(recover(&db.journal, "p-1", 3, 2, MAX).await, (vec![], 5));
}

#[tokio::test]
async fn j11_unknown_id_replays_nothing_and_highest_is_zero() {
    let db = journal_with_one_to_five().await;
    assert_eq!(
        recover(&db.journal, "never-wrote", 1, MAX, MAX).await,
        (vec![], 0)
    );
}

#[tokio::test]
async fn j12_highest_is_read_without_replaying() {
    let db = journal_with_one_to_five().await;
    assert_eq!(
        db.journal.read_highest_sequence_nr("p-1", 0).await.unwrap(),
        5
    );
    assert_eq!(
        db.journal.read_highest_sequence_nr("p-1", 3).await.unwrap(),
        5
    );
}

#[tokio::test]
async fn replay_of_2000_events_crosses_page_boundaries() {
    let db = TestJournal::open().await; // default page size: 500
    let writes = (0..20)
        .map(|i| atomic("big", i * 100 + 1..=i * 100 + 100))
        .collect();
    write_all_ok(&db.journal, writes).await;

    let all: Vec<u64> = replay_events(&db.journal, "big", 1, MAX, MAX)
        .await
        .iter()
        .map(|e| e.seq_nr)
        .collect();
    assert_eq!(all, (1..=2000).collect::<Vec<_>>());

    let cases: [(u64, u64, u64); 7] = [
        (1, MAX, 1000),   // max is a whole number of pages
        (1, MAX, 501),    // one past a page
        (1, 500, MAX),    // to ends exactly on a page
        (499, 1501, MAX), // starts and ends mid-page
        (1500, MAX, MAX),
        (1, 2000, 2000),
        (2000, MAX, 10),
    ];
    for (from, to, max) in cases {
        let expected: Vec<u64> = (from..=to.min(2000)).take(max as usize).collect();
        let (got, highest) = recover(&db.journal, "big", from, to, max).await;
        assert_eq!(got, expected, "replay({from}, {to}, {max})");
        assert_eq!(highest, 2000);
    }
}

#[tokio::test]
async fn paged_replay_agrees_with_the_in_memory_journal() {
    // A page size of 3 puts page boundaries everywhere in a journal of 20 events with holes.
    let db = TestJournal::open_with(|o| o.replay_batch_size = 3).await;
    let model = InMemoryJournal::new();
    let writes: Vec<AtomicWrite> = vec![
        atomic("m", 1..=4),
        atomic("m", 5..=5),
        atomic("m", 6..=13),
        atomic("m", 14..=20),
        atomic("other", 1..=20),
    ];
    write_all_ok(&db.journal, writes.clone()).await;
    model.write_messages(writes).await.unwrap();
    for journal in [&db.journal as &dyn JournalStore, &model] {
        journal.delete_messages_to("m", 2).await.unwrap();
    }

    let bounds = [
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        9,
        12,
        13,
        19,
        20,
        21,
        1000,
        i64::MAX as u64,
        MAX,
    ];
    let maxes = [0, 1, 2, 3, 4, 6, 7, 17, 18, 100, MAX];
    for from in bounds {
        for to in bounds {
            for max in maxes {
                let expected: Vec<_> = model
                    .replay_messages("m", from, to, max)
                    .try_collect()
                    .await
                    .unwrap();
                let got = replay_events(&db.journal, "m", from, to, max).await;
                assert_eq!(got, expected, "replay({from}, {to}, {max})");
            }
        }
    }
}

#[tokio::test]
async fn replay_stream_outlives_the_journal_handle() {
    let db = journal_with_one_to_five().await;
    let stream = {
        let journal = db.journal.clone();
        journal.replay_messages("p-1", 1, MAX, MAX)
    };
    let seq_nrs: Vec<u64> = stream.map(|e| e.unwrap().seq_nr).collect().await;
    assert_eq!(seq_nrs, vec![1, 2, 3, 4, 5]);
}

#[tokio::test]
async fn highest_storable_sequence_number_round_trips() {
    let db = TestJournal::open().await;
    let top = i64::MAX as u64;
    write_all_ok(&db.journal, vec![atomic("edge", top - 1..=top)]).await;

    assert_eq!(
        recover(&db.journal, "edge", 1, MAX, MAX).await,
        (vec![top - 1, top], top)
    );
    assert_eq!(
        recover(&db.journal, "edge", top, top, 1).await,
        (vec![top], top)
    );
    // Bounds above i64::MAX: `from` matches nothing, `to` means "no bound".
    assert_eq!(
        recover(&db.journal, "edge", top + 1, MAX, MAX).await,
        (vec![], top)
    );
    assert_eq!(
        recover(&db.journal, "edge", top - 1, top + 5, MAX).await,
        (vec![top - 1, top], top)
    );
}

#[tokio::test]
async fn corrupt_row_ends_the_replay_with_a_storage_error() {
    use actix_persistence_core::JournalError;
    use sqlx::Connection;

    let db = TestJournal::open().await;
    write_all_ok(&db.journal, vec![atomic("p-1", 1..=1)]).await;
    // A row this crate never writes: tags that are not a JSON array.
    let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
    sqlx::query(
        "INSERT INTO journal (persistence_id, seq_nr, writer_uuid, write_timestamp, \
         serializer_id, manifest, payload, tags) VALUES ('p-1', 2, 'w', 0, 1, '', x'00', 'oops')",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let results: Vec<_> = db
        .journal
        .replay_messages("p-1", 1, MAX, MAX)
        .collect()
        .await;
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
}
