//! Backpressure of queries: a consumer that stops pulling stops the reading. A live query reads
//! at most one page ahead of what its consumer pulled (by slices and by tag), or none (by
//! persistence id), however long the consumer waits and however many events are written
//! meanwhile (virtual time: the refresh interval passes hundreds of times). A catch-up over
//! stored events reads at most `read_ahead_pages` pages ahead, that many at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_persistence_core::query::{
    EnvelopeStream, EventsRequest, Offset, QuerySettings, QueryStore, ReadJournal, StoredEvent,
    WriteNotifications,
};
use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, FencingToken, InMemoryJournal, JournalError, JournalStore,
    PersistentRepr, ReplayStream, MAX_SEQ_NR,
};
use async_trait::async_trait;
use futures::StreamExt;

/// The in-memory journal, counting the pages queries read.
#[derive(Clone, Default)]
struct CountingStore {
    journal: InMemoryJournal,
    pages: Arc<AtomicUsize>,
    replays: Arc<AtomicUsize>,
    /// Ids a page of persistence ids holds beyond the limit asked (a store breaking its
    /// contract).
    extra_ids: usize,
    /// Added to the database clock (µs): with an hour, every stored event is behind the
    /// late-commit window (read by the settled pass).
    clock_ahead: i64,
    /// Pages being read now, and the most read at once.
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
}

impl CountingStore {
    fn reads(&self) -> usize {
        self.pages.load(Ordering::SeqCst) + self.replays.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl JournalStore for CountingStore {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        self.journal.write_messages(writes).await
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.replays.fetch_add(1, Ordering::SeqCst);
        self.journal.replay_messages(pid, from, to, max)
    }

    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        self.journal.read_highest_sequence_nr(pid, from).await
    }

    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        fencing_token: FencingToken,
    ) -> Result<(), JournalError> {
        self.journal
            .delete_messages_to(pid, to, fencing_token)
            .await
    }
}

#[async_trait]
impl QueryStore for CountingStore {
    async fn current_timestamp(&self) -> Result<i64, JournalError> {
        Ok(self.journal.current_timestamp().await? + self.clock_ahead)
    }

    async fn read_events(
        &self,
        request: EventsRequest<'_>,
    ) -> Result<Vec<StoredEvent>, JournalError> {
        self.pages.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        // A page takes a while, as a database's would: reads started together overlap.
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        let page = self.journal.read_events(request).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        page
    }

    async fn read_persistence_ids(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>, JournalError> {
        let mut ids = self.journal.read_persistence_ids(after, limit).await?;
        let last = ids.last().cloned().unwrap_or_default();
        ids.extend((0..self.extra_ids).map(|i| format!("{last}~{i}")));
        Ok(ids)
    }

    fn write_notifications(&self) -> Option<WriteNotifications> {
        self.journal.write_notifications()
    }
}

const PAGE: u32 = 7;

fn event(seq_nr: u64) -> AtomicWrite {
    AtomicWrite::new(vec![PersistentRepr {
        persistence_id: "Slow|1".into(),
        seq_nr,
        payload: b"{}".to_vec(),
        serializer_id: 1,
        manifest: String::new(),
        writer_uuid: "w".into(),
        timestamp: 0,
        tags: vec!["slow".to_owned()].into(),
    }])
    .expect("a well-shaped write")
}

async fn write(store: &CountingStore, from: u64, to: u64) {
    for seq_nr in from..=to {
        let results = store
            .write_messages(vec![event(seq_nr)])
            .await
            .expect("write");
        assert!(results.iter().all(Result::is_ok), "write {seq_nr}");
    }
}

/// Pulls one element, then leaves the query alone for a long (virtual) while during which
/// 50 more events are written: it reads nothing more than `ahead` reads; pulling again reads
/// on.
async fn stops_reading_when_the_consumer_stops(
    query: impl FnOnce(&ReadJournal) -> EnvelopeStream,
    ahead: usize,
) {
    let store = CountingStore::default();
    write(&store, 1, 50).await;
    let settings = QuerySettings {
        refresh_interval: Duration::from_millis(20),
        page_size: PAGE,
        ..QuerySettings::default()
    };
    let journal = ReadJournal::new(store.clone(), settings);
    let mut live = query(&journal);
    let first = live.next().await.expect("an element").expect("no error");
    assert_eq!(first.seq_nr, 1);
    // The consumer stops pulling: the refresh interval passes 500 times, writes notify.
    write(&store, 51, 100).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle = store.reads();
    assert!(
        idle <= ahead,
        "{idle} reads while the consumer took one element and waited (at most {ahead})"
    );
    // Pulling again reads on, every event once and in order.
    let rest: Vec<u64> = live
        .take(99)
        .map(|e| e.expect("no error").seq_nr)
        .collect()
        .await;
    assert_eq!(rest, (2..=100).collect::<Vec<_>>());
    assert!(store.reads() > idle, "reads go on when pulled");
}

#[tokio::test(start_paused = true)]
async fn a_live_query_by_slices_reads_at_most_one_page_ahead_of_its_consumer() {
    stops_reading_when_the_consumer_stops(
        |query| query.events_by_slices("Slow", 0, 1023, Offset::NoOffset),
        // The settled pass's (empty) page, the fast pass's first page and the one read ahead.
        3,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_live_query_by_tag_reads_at_most_one_page_ahead_of_its_consumer() {
    stops_reading_when_the_consumer_stops(|query| query.events_by_tag("slow", Offset::NoOffset), 3)
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_live_query_by_persistence_id_reads_nothing_ahead_of_its_consumer() {
    stops_reading_when_the_consumer_stops(
        |query| query.events_by_persistence_id("Slow|1", 1, MAX_SEQ_NR),
        // The page the first element came from.
        1,
    )
    .await;
}

/// A catch-up over stored events (all behind the late-commit window) reads windows of
/// timestamps at once: exactly `read_ahead_pages` pages in flight while its consumer takes the
/// first page, none beyond them while the consumer waits, and every event once, in order.
#[tokio::test(start_paused = true)]
async fn a_catch_up_reads_read_ahead_pages_at_once_and_no_more() {
    for read_ahead_pages in [1, 2, 4] {
        let store = CountingStore {
            clock_ahead: 3_600_000_000,
            ..CountingStore::default()
        };
        write(&store, 1, 100).await;
        let settings = QuerySettings {
            page_size: PAGE,
            read_ahead_pages,
            ..QuerySettings::default()
        };
        let journal = ReadJournal::new(store.clone(), settings);
        let mut catch_up = journal.current_events_by_slices("Slow", 0, 1023, Offset::NoOffset);
        let first = catch_up
            .next()
            .await
            .expect("an element")
            .expect("no error");
        assert_eq!(first.seq_nr, 1);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            store.reads(),
            1 + read_ahead_pages as usize,
            "the first page and {read_ahead_pages} read ahead while the consumer waits"
        );
        let rest: Vec<u64> = catch_up
            .map(|e| e.expect("no error").seq_nr)
            .collect()
            .await;
        assert_eq!(rest, (2..=100).collect::<Vec<_>>());
        assert_eq!(
            store.most_in_flight.load(Ordering::SeqCst),
            read_ahead_pages as usize,
            "pages read at once"
        );
    }
}

/// A store that answers a page of persistence ids with more than the limit asked: the query
/// still delivers at most its own limit, and pages on from the last id it kept.
#[tokio::test]
async fn current_persistence_ids_holds_a_store_to_the_limit() {
    let store = CountingStore {
        extra_ids: 3,
        ..CountingStore::default()
    };
    for id in 0..10 {
        let write = AtomicWrite::new(vec![PersistentRepr {
            persistence_id: format!("Id|{id}").into(),
            seq_nr: 1,
            payload: b"{}".to_vec(),
            serializer_id: 1,
            manifest: String::new(),
            writer_uuid: "w".into(),
            timestamp: 0,
            tags: Default::default(),
        }])
        .expect("one event");
        let results = store.write_messages(vec![write]).await.expect("write");
        assert!(results.iter().all(Result::is_ok));
    }
    let settings = QuerySettings {
        page_size: 4,
        ..QuerySettings::default()
    };
    let query = ReadJournal::from_arc(Arc::new(store), settings);
    let ids: Vec<String> = query
        .current_persistence_ids(None, 6)
        .map(|id| id.expect("an id"))
        .collect()
        .await;
    assert_eq!(ids, ["Id|0", "Id|1", "Id|2", "Id|3", "Id|4", "Id|5"]);
}
