//! A query's read in flight completes, and gives its database connection back, when the
//! consumer stops pulling in the middle of it: a `select!` that took another branch, or a
//! projection paused while its source was reading. Before, the read ran inside the stream's
//! own future and kept its connection until the consumer pulled again. The same for the
//! highest sequence number a bounded live query by persistence id reads before each page, and
//! for the pages of `current_persistence_ids`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_persistence_core::query::{
    EventsRequest, Offset, QuerySettings, QueryStore, ReadJournal, StoredEvent, WriteNotifications,
};
use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, FencingToken, InMemoryJournal, JournalError, JournalStore,
    PersistentRepr, ReplayStream,
};
use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::{watch, Notify};

/// The in-memory journal whose query pages wait for a gate, each holding a "connection" (a
/// count) from the moment it starts until it returns.
#[derive(Clone)]
struct GatedStore {
    journal: InMemoryJournal,
    gate: watch::Sender<bool>,
    /// Pages being read now: the connections they hold.
    checked_out: Arc<AtomicUsize>,
    /// Told when a page read reached the gate, and when one returned.
    arrived: Arc<Notify>,
    finished: Arc<Notify>,
}

impl GatedStore {
    fn new() -> Self {
        GatedStore {
            journal: InMemoryJournal::new(),
            gate: watch::channel(false).0,
            checked_out: Arc::new(AtomicUsize::new(0)),
            arrived: Arc::new(Notify::new()),
            finished: Arc::new(Notify::new()),
        }
    }
}

impl GatedStore {
    /// Runs `read` once the gate is open, holding a connection from now until it returned.
    async fn gated<T>(
        &self,
        read: impl std::future::Future<Output = Result<T, JournalError>>,
    ) -> Result<T, JournalError> {
        self.checked_out.fetch_add(1, Ordering::SeqCst);
        self.arrived.notify_one();
        let mut open = self.gate.subscribe();
        let opened = open.wait_for(|open| *open).await.map(|_| ());
        let result = match opened {
            Ok(()) => read.await,
            Err(error) => Err(JournalError::storage("wait for the gate", error)),
        };
        self.checked_out.fetch_sub(1, Ordering::SeqCst);
        self.finished.notify_one();
        result
    }
}

#[async_trait]
impl JournalStore for GatedStore {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        self.journal.write_messages(writes).await
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.journal.replay_messages(pid, from, to, max)
    }

    /// Gated as query pages are (a bounded live query by persistence id reads it per page).
    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        self.gated(self.journal.read_highest_sequence_nr(pid, from))
            .await
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
impl QueryStore for GatedStore {
    async fn current_timestamp(&self) -> Result<i64, JournalError> {
        self.journal.current_timestamp().await
    }

    async fn read_events(
        &self,
        request: EventsRequest<'_>,
    ) -> Result<Vec<StoredEvent>, JournalError> {
        self.gated(self.journal.read_events(request)).await
    }

    async fn read_persistence_ids(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>, JournalError> {
        self.gated(self.journal.read_persistence_ids(after, limit))
            .await
    }

    fn write_notifications(&self) -> Option<WriteNotifications> {
        self.journal.write_notifications()
    }
}

fn event(pid: &str, seq_nr: u64) -> AtomicWrite {
    AtomicWrite::new(vec![PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload: b"{}".to_vec(),
        serializer_id: 1,
        manifest: String::new(),
        writer_uuid: "w".into(),
        timestamp: 0,
        tags: vec!["gated".to_owned()].into(),
    }])
    .expect("one event")
}

/// Pulls `query`'s first envelope until its first page read is at the gate, then stops pulling
/// (the pull is dropped, as a `select!` drops the branch it did not take); opens the gate and
/// waits for the read to return without pulling again: it must, and give its connection back.
/// Then the consumer pulls again and gets the event, once.
async fn a_read_in_flight_finishes_without_the_consumer(query_kind: Kind) {
    let store = GatedStore::new();
    let written = store
        .write_messages(vec![event("Gated|1", 1)])
        .await
        .expect("write");
    assert!(written.iter().all(Result::is_ok), "{written:?}");
    let query = ReadJournal::new(store.clone(), QuerySettings::default());
    let mut stream = match query_kind {
        Kind::LiveBySlices => query.events_by_slices("Gated", 0, 1023, Offset::NoOffset),
        Kind::CurrentBySlices => query.current_events_by_slices("Gated", 0, 1023, Offset::NoOffset),
        Kind::LiveByTag => query.events_by_tag("gated", Offset::NoOffset),
        Kind::LiveByPersistenceId => query.events_by_persistence_id("Gated|1", 1, 5),
    };
    let live = !matches!(query_kind, Kind::CurrentBySlices);
    {
        let next = stream.next();
        tokio::select! {
            biased;
            () = store.arrived.notified() => {}
            _ = next => panic!("delivered before its page was read"),
        }
        // `next` is dropped here: the consumer stopped pulling in the middle of the read.
    }
    assert_eq!(
        store.checked_out.load(Ordering::SeqCst),
        1,
        "the read holds one"
    );
    store.gate.send_replace(true);
    tokio::time::timeout(Duration::from_secs(5), store.finished.notified())
        .await
        .expect("the read in flight returned without the consumer pulling again");
    assert_eq!(
        store.checked_out.load(Ordering::SeqCst),
        0,
        "its connection is back while nobody pulls"
    );
    let envelope = tokio::time::timeout(Duration::from_secs(60), stream.next())
        .await
        .expect("delivered")
        .expect("an envelope")
        .expect("no error");
    assert_eq!((&*envelope.persistence_id, envelope.seq_nr), ("Gated|1", 1));
    if !live {
        let rest: Vec<_> = stream.collect().await;
        assert!(rest.is_empty(), "delivered once: {rest:?}");
    }
}

/// The query a case runs.
#[derive(Clone, Copy)]
enum Kind {
    LiveBySlices,
    CurrentBySlices,
    LiveByTag,
    /// Bounded (`to_seq_nr` 5): it reads the highest sequence number before each page.
    LiveByPersistenceId,
}

#[tokio::test(start_paused = true)]
async fn a_live_query_by_slices_gives_its_connection_back_when_the_consumer_stops_pulling() {
    a_read_in_flight_finishes_without_the_consumer(Kind::LiveBySlices).await;
}

#[tokio::test(start_paused = true)]
async fn a_current_query_by_slices_gives_its_connection_back_when_the_consumer_stops_pulling() {
    a_read_in_flight_finishes_without_the_consumer(Kind::CurrentBySlices).await;
}

#[tokio::test(start_paused = true)]
async fn a_live_query_by_tag_gives_its_connection_back_when_the_consumer_stops_pulling() {
    a_read_in_flight_finishes_without_the_consumer(Kind::LiveByTag).await;
}

#[tokio::test(start_paused = true)]
async fn a_bounded_live_query_by_persistence_id_gives_its_connection_back_when_the_consumer_stops_pulling(
) {
    a_read_in_flight_finishes_without_the_consumer(Kind::LiveByPersistenceId).await;
}

#[tokio::test(start_paused = true)]
async fn current_persistence_ids_give_their_connection_back_when_the_consumer_stops_pulling() {
    let store = GatedStore::new();
    let written = store
        .write_messages(vec![event("Gated|1", 1), event("Gated|2", 1)])
        .await
        .expect("write");
    assert!(written.iter().all(Result::is_ok), "{written:?}");
    let query = ReadJournal::new(store.clone(), QuerySettings::default());
    let mut ids = query.current_persistence_ids(None, 10);
    {
        let next = ids.next();
        tokio::select! {
            biased;
            () = store.arrived.notified() => {}
            _ = next => panic!("an id before its page was read"),
        }
    }
    assert_eq!(store.checked_out.load(Ordering::SeqCst), 1);
    store.gate.send_replace(true);
    tokio::time::timeout(Duration::from_secs(5), store.finished.notified())
        .await
        .expect("the read in flight returned without the consumer pulling again");
    assert_eq!(store.checked_out.load(Ordering::SeqCst), 0);
    let ids: Vec<String> = ids.map(|id| id.expect("an id")).collect().await;
    assert_eq!(ids, vec!["Gated|1".to_owned(), "Gated|2".to_owned()]);
}
