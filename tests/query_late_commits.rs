//! A live query told of a write reads again from as far behind as the notification's look-back
//! (`WriteNotifier::notify_committed`), so an event whose transaction committed after a later
//! event was already delivered comes with that notification, not at the next full round (the
//! PostgreSQL journal's concurrent group-commit transactions do this: docs/benchmarks.md,
//! issue 8). The full rounds are an hour apart here, so only the notified pass can deliver it.

use std::sync::Arc;
use std::time::Duration;

use actix_persistence::query::{
    EnvelopeStream, EventsRequest, QuerySettings, QueryStore, ReadJournal, StoredEvent,
    WriteNotifications, WriteNotifier,
};
use actix_persistence::{
    AtomicWrite, AtomicWriteResult, FencingToken, InMemoryJournal, JournalError, JournalStore,
    Offset, PersistentRepr, ReplayStream,
};
use actix_persistence_testkit::{ControlledQueryStore, QueryControl};
use async_trait::async_trait;
use futures::StreamExt;

/// A controlled in-memory store whose write notifications the test sends, with the look-back
/// it chooses.
#[derive(Clone)]
struct NotifiedByTest {
    store: ControlledQueryStore<InMemoryJournal>,
    notifier: WriteNotifier,
}

#[async_trait]
impl JournalStore for NotifiedByTest {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        self.store.write_messages(writes).await
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.store.replay_messages(pid, from, to, max)
    }

    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        self.store.read_highest_sequence_nr(pid, from).await
    }

    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        fencing_token: FencingToken,
    ) -> Result<(), JournalError> {
        self.store.delete_messages_to(pid, to, fencing_token).await
    }
}

#[async_trait]
impl QueryStore for NotifiedByTest {
    async fn current_timestamp(&self) -> Result<i64, JournalError> {
        self.store.current_timestamp().await
    }

    async fn read_events(
        &self,
        request: EventsRequest<'_>,
    ) -> Result<Vec<StoredEvent>, JournalError> {
        self.store.read_events(request).await
    }

    async fn read_persistence_ids(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>, JournalError> {
        self.store.read_persistence_ids(after, limit).await
    }

    fn write_notifications(&self) -> Option<WriteNotifications> {
        Some(self.notifier.subscribe())
    }
}

fn event(pid: &str) -> AtomicWrite {
    AtomicWrite::new(vec![PersistentRepr {
        persistence_id: pid.to_owned(),
        seq_nr: 1,
        payload: b"{}".to_vec(),
        serializer_id: actix_persistence::serialization::JSON_SERIALIZER_ID,
        manifest: String::new(),
        writer_uuid: "late".to_owned(),
        timestamp: 0,
        tags: Vec::new(),
    }])
    .expect("one event")
}

/// Writes `pid`'s event 1 and waits until the store has it.
async fn write(store: &NotifiedByTest, pid: &str) {
    let results = store.write_messages(vec![event(pid)]).await.expect("write");
    assert!(results[0].is_ok(), "{results:?}");
}

/// The next envelope's persistence id; fails instead of waiting for a full round.
async fn next_id(live: &mut EnvelopeStream) -> String {
    let next = tokio::time::timeout(Duration::from_secs(10), live.next())
        .await
        .expect("delivered by the notified pass (full rounds are an hour apart)");
    next.expect("live").expect("no error").persistence_id
}

fn setup() -> (NotifiedByTest, QueryControl, ReadJournal) {
    let store = NotifiedByTest {
        store: ControlledQueryStore::new(InMemoryJournal::new()),
        notifier: WriteNotifier::new(),
    };
    let control = store.store.control();
    let settings = QuerySettings {
        refresh_interval: Duration::from_secs(3600),
        late_commit_window: Duration::from_secs(3600),
        ..QuerySettings::default()
    };
    let query = ReadJournal::from_arc(Arc::new(store.clone()), settings);
    (store, control, query)
}

#[tokio::test]
async fn a_late_commit_comes_with_the_notification_that_looks_back_over_it() {
    let (store, control, query) = setup();
    let mut live = query.events_by_slices("Late", 0, 1023, Offset::NoOffset);
    // `Late|a` is inserted first (lower timestamp) and commits after `Late|b`.
    control.hold_commits_of("Late|a");
    write(&store, "Late|a").await;
    write(&store, "Late|b").await;
    store.notifier.notify();
    assert_eq!(next_id(&mut live).await, "Late|b");

    control.commit("Late|a");
    // Its transaction took (at most) a minute: the query reads again from that far back.
    store.notifier.notify_committed(Duration::from_secs(60));
    assert_eq!(next_id(&mut live).await, "Late|a");

    // What was delivered is not delivered again: the next event is the next write's.
    write(&store, "Late|c").await;
    store.notifier.notify_committed(Duration::from_secs(60));
    assert_eq!(next_id(&mut live).await, "Late|c");
}
