//! Replays and deletes at store level, on SQLite and on PostgreSQL: paging, a replay that
//! outlives its journal handle, deletes of one persistence id, writes after a full delete.
//! (The replay bounds and deletes of the journal conformance, J1-J20, run in
//! `conformance.rs`.)
#![cfg(any(feature = "sqlite", feature = "test-util"))]

mod common;

use actix_persistence_core::{AtomicWrite, InMemoryJournal, JournalStore, MAX_SEQ_NR};
use common::{
    atomic, backend_tests, recover, replay_events, write_all_ok, write_one_to_five, TestBackend,
};
use futures::{StreamExt, TryStreamExt};
use std::sync::Arc;

const MAX: u64 = MAX_SEQ_NR;

backend_tests! {
    replay_of_2000_events_crosses_page_boundaries,
    paged_replay_agrees_with_the_in_memory_journal,
    replay_stream_outlives_the_journal_handle,
    replay_reads_exactly_two_pages_ahead,
    delete_touches_only_its_own_persistence_id,
    writes_after_a_full_delete_continue_the_sequence,
    replays_and_query_pages_share_ids_and_writers,
    a_recovery_replay_is_the_replay_without_its_tags,
}

async fn replay_of_2000_events_crosses_page_boundaries<B: TestBackend>(db: B) {
    // Pages of 500 (the boundaries below are the pages'), whatever the default.
    let journal = db
        .journal_with(&[common::Setting::ReplayBatchSize(500)])
        .await;
    let writes = (0..20)
        .map(|i| atomic("big", i * 100 + 1..=i * 100 + 100))
        .collect();
    write_all_ok(&journal, writes).await;

    let all: Vec<u64> = replay_events(&journal, "big", 1, MAX, MAX)
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
        let (got, highest) = recover(&journal, "big", from, to, max).await;
        assert_eq!(got, expected, "replay({from}, {to}, {max})");
        assert_eq!(highest, 2000);
    }
}

async fn paged_replay_agrees_with_the_in_memory_journal<B: TestBackend>(db: B) {
    // A page size of 3 puts page boundaries everywhere in a journal of 20 events with holes.
    let journal = db
        .journal_with(&[common::Setting::ReplayBatchSize(3)])
        .await;
    let model = InMemoryJournal::new();
    let writes: Vec<AtomicWrite> = vec![
        atomic("m", 1..=4),
        atomic("m", 5..=5),
        atomic("m", 6..=13),
        atomic("m", 14..=20),
        atomic("other", 1..=20),
    ];
    write_all_ok(&journal, writes.clone()).await;
    model.write_messages(writes).await.unwrap();
    for store in [&journal as &dyn JournalStore, &model] {
        store
            .delete_messages_to("m", 2, actix_persistence_core::FencingToken::UNOWNED)
            .await
            .unwrap();
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
                let got = replay_events(&journal, "m", from, to, max).await;
                assert_eq!(got, expected, "replay({from}, {to}, {max})");
            }
        }
    }

    // Gaps of every width next to page boundaries: the reads ahead start on the windows that
    // follow a page, and must give way where a window is empty (windows widen) or a widened
    // window's page ends inside it.
    let gappy: Vec<AtomicWrite> = vec![
        atomic("g", 1..=7),
        atomic("g", 9..=9),
        atomic("g", 13..=15),
        atomic("g", 40..=44),
        atomic("g", 46..=47),
        atomic("g", 200..=210),
    ];
    write_all_ok(&journal, gappy.clone()).await;
    model.write_messages(gappy).await.unwrap();
    for from in [1, 2, 7, 8, 9, 10, 14, 16, 39, 45, 48, 199, 211] {
        for to in [9, 15, 44, 47, 205, 210, MAX] {
            for max in [5, 100, MAX] {
                let expected: Vec<_> = model
                    .replay_messages("g", from, to, max)
                    .try_collect()
                    .await
                    .unwrap();
                let got = replay_events(&journal, "g", from, to, max).await;
                assert_eq!(got, expected, "replay of g({from}, {to}, {max})");
            }
        }
    }
}

async fn replay_stream_outlives_the_journal_handle<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    write_one_to_five(&journal, "p-1").await;
    let stream = journal.replay_messages("p-1", 1, MAX, MAX);
    let reader = journal.clone();
    drop(journal);
    let seq_nrs: Vec<u64> = stream.map(|e| e.unwrap().seq_nr).collect().await;
    assert_eq!(seq_nrs, vec![1, 2, 3, 4, 5]);
    B::close(&reader).await;
}

/// The second page is read with the first, by a task of its own, and the third from the moment
/// the first is handed out (while the consumer works through it), and nothing further: events
/// deleted after those reads are still replayed from pages 2 and 3, and missing from the fourth
/// on. Without reading ahead, page 2 would be read only when asked for (the deleted events
/// missing from it as well); with one page ahead, page 3 would miss them; with three, page 4
/// would still hold them.
async fn replay_reads_exactly_two_pages_ahead<B: TestBackend>(db: B) {
    let journal = db
        .journal_with(&[common::Setting::ReplayBatchSize(10)])
        .await;
    write_all_ok(&journal, vec![atomic("ahead", 1..=100)]).await;
    let mut events = journal.replay_messages("ahead", 1, MAX, MAX);
    let first = events.next().await.expect("an event").expect("read");
    assert_eq!(first.seq_nr, 1);

    // Each read-ahead task takes a reader connection for its query and gives it back once its
    // rows arrived; the consumer does not poll the replay meanwhile. Waits until no reader
    // connection was in use for many looks in a row after one was seen taken (a task waiting
    // for the pool is woken when a connection comes back, within a look or two); a query fast
    // enough to run between two looks is not seen, so after a bound the test goes on: what
    // proves the read-ahead is the result below (pages 2 and 3 hold the events the delete
    // removes only if they were read before it).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut taken = false;
    let mut idle_looks = 0;
    loop {
        tokio::task::yield_now().await;
        match B::reads_in_use(&journal) {
            0 if taken => idle_looks += 1,
            0 => {}
            _ => {
                taken = true;
                idle_looks = 0;
            }
        }
        if idle_looks >= 100 || (!taken && std::time::Instant::now() >= deadline) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline + std::time::Duration::from_secs(20),
            "the read-ahead never gave its connections back"
        );
    }
    journal
        .delete_messages_to("ahead", 40, actix_persistence_core::FencingToken::UNOWNED)
        .await
        .unwrap();

    let rest: Vec<u64> = events.map(|e| e.unwrap().seq_nr).collect().await;
    let expected: Vec<u64> = (2..=30).chain(41..=100).collect();
    assert_eq!(rest, expected);
    B::close(&journal).await;
}

async fn delete_touches_only_its_own_persistence_id<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    write_one_to_five(&journal, "p-1").await;
    write_one_to_five(&journal, "p-10").await;
    write_one_to_five(&journal, "P-1").await;
    // Deletes of an unknown id, or up to 0, change nothing.
    journal
        .delete_messages_to("p-1", 0, actix_persistence_core::FencingToken::UNOWNED)
        .await
        .unwrap();
    journal
        .delete_messages_to(
            "never-wrote",
            MAX,
            actix_persistence_core::FencingToken::UNOWNED,
        )
        .await
        .unwrap();
    assert_eq!(
        recover(&journal, "p-1", 1, MAX, MAX).await,
        (vec![1, 2, 3, 4, 5], 5)
    );
    assert_eq!(
        recover(&journal, "never-wrote", 1, MAX, MAX).await,
        (vec![], 0)
    );

    journal
        .delete_messages_to("p-1", 4, actix_persistence_core::FencingToken::UNOWNED)
        .await
        .unwrap();
    assert_eq!(recover(&journal, "p-1", 1, MAX, MAX).await, (vec![5], 5));
    for pid in ["p-10", "P-1"] {
        assert_eq!(
            recover(&journal, pid, 1, MAX, MAX).await,
            (vec![1, 2, 3, 4, 5], 5),
            "{pid}"
        );
    }
}

async fn writes_after_a_full_delete_continue_the_sequence<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    write_one_to_five(&journal, "p-1").await;
    journal
        .delete_messages_to("p-1", MAX, actix_persistence_core::FencingToken::UNOWNED)
        .await
        .unwrap();
    assert_eq!(recover(&journal, "p-1", 1, MAX, MAX).await, (vec![], 5));
    write_all_ok(&journal, vec![atomic("p-1", 6..=7)]).await;
    assert_eq!(recover(&journal, "p-1", 1, MAX, MAX).await, (vec![6, 7], 7));
}

/// A replay shares one persistence id among all its events and one writer uuid among a run of
/// events of one writer, across its pages; a query page shares them per run of rows.
async fn replays_and_query_pages_share_ids_and_writers<B: TestBackend>(db: B) {
    use actix_persistence_core::query::{EventFilter, EventKey, EventsRequest, QueryStore};

    let journal = db
        .journal_with(&[common::Setting::ReplayBatchSize(3)])
        .await;
    write_all_ok(
        &journal,
        vec![atomic("Shared|a", 1..=4), atomic("Shared|b", 1..=3)],
    )
    .await;

    let replayed = replay_events(&journal, "Shared|a", 1, MAX, MAX).await;
    assert_eq!(replayed.len(), 4);
    for (i, event) in replayed.iter().enumerate() {
        assert_eq!(&*event.persistence_id, "Shared|a");
        assert_eq!(&*event.writer_uuid, "writer-1");
        assert!(Arc::ptr_eq(
            &event.persistence_id,
            &replayed[0].persistence_id
        ));
        // Pages are read concurrently (reads ahead), each with its own writer uuids.
        let page_start = &replayed[i / 3 * 3];
        assert!(
            Arc::ptr_eq(&event.writer_uuid, &page_start.writer_uuid),
            "one writer uuid across a replay page"
        );
    }

    let filter = EventFilter::Slices {
        entity_type: "Shared".to_owned(),
        min_slice: 0,
        max_slice: 1023,
    };
    let page = journal
        .read_events(EventsRequest {
            filter: &filter,
            after: &EventKey::start_of(i64::MIN),
            before_timestamp: i64::MAX,
            limit: 100,
            with_previous_timestamp: true,
        })
        .await
        .expect("a query page");
    assert_eq!(page.len(), 7);
    for pair in page.windows(2) {
        let (a, b) = (&pair[0].repr, &pair[1].repr);
        assert_eq!(
            Arc::ptr_eq(&a.persistence_id, &b.persistence_id),
            a.persistence_id == b.persistence_id,
            "a run of rows of one id shares one Arc: {:?}, {:?}",
            a.persistence_id,
            b.persistence_id
        );
        assert!(Arc::ptr_eq(&a.writer_uuid, &b.writer_uuid), "one writer");
    }
}

/// `replay_for_recovery` gives exactly `replay_messages`'s events (bounds, `max`, pages,
/// metadata, payloads) with every event's tags left empty: the page query selects none.
async fn a_recovery_replay_is_the_replay_without_its_tags<B: TestBackend>(db: B) {
    let journal = db
        .journal_with(&[common::Setting::ReplayBatchSize(3)])
        .await;
    let tagged = |seq_nr: u64, tags: &[&str]| {
        let mut event = common::event("r", seq_nr);
        event.tags = tags.iter().map(|t| (*t).to_owned()).collect();
        event
    };
    let writes = vec![
        AtomicWrite::new(vec![tagged(1, &["a"]), tagged(2, &[])]).unwrap(),
        AtomicWrite::new(vec![tagged(3, &["a", "b\"c"]), tagged(4, &["d"])]).unwrap(),
        AtomicWrite::new((5..=8).map(|n| tagged(n, &["e"])).collect()).unwrap(),
    ];
    write_all_ok(&journal, writes).await;
    for (from, to, max) in [(1, MAX, MAX), (2, 7, MAX), (1, MAX, 5), (8, MAX, MAX)] {
        let replayed: Vec<_> = journal
            .replay_messages("r", from, to, max)
            .try_collect()
            .await
            .expect("replay");
        let recovered: Vec<_> = journal
            .replay_for_recovery("r", from, to, max)
            .try_collect()
            .await
            .expect("recovery replay");
        assert!(
            replayed.iter().any(|e| !e.tags.is_empty()),
            "the replay keeps the tags ({from}, {to}, {max})"
        );
        let untagged: Vec<_> = replayed
            .into_iter()
            .map(|mut e| {
                e.tags = Default::default();
                e
            })
            .collect();
        assert_eq!(recovered, untagged, "({from}, {to}, {max})");
    }
}
