//! A live query told of a write reads again from as far behind as the notification's look-back
//! (`WriteNotifier::notify_committed`), so an event whose transaction committed after a later
//! event was already delivered comes with that notification, not at the next full round (the
//! PostgreSQL journal's concurrent group-commit transactions do this: docs/benchmarks.md,
//! issue 8). The full rounds are an hour apart here, so only the notified pass can deliver it.

use std::sync::Arc;
use std::time::Duration;

use actix_persistence::query::{EnvelopeStream, QuerySettings, ReadJournal};
use actix_persistence::{AtomicWrite, InMemoryJournal, JournalStore, Offset, PersistentRepr};
use actix_persistence_testkit::ControlledQueryStore;
use futures::StreamExt;

fn event(pid: &str) -> AtomicWrite {
    AtomicWrite::new(vec![PersistentRepr {
        persistence_id: pid.into(),
        seq_nr: 1,
        payload: b"{}".to_vec(),
        serializer_id: actix_persistence::serialization::JSON_SERIALIZER_ID,
        manifest: String::new(),
        writer_uuid: "late".into(),
        timestamp: 0,
        tags: Default::default(),
    }])
    .expect("one event")
}

/// Writes `pid`'s event 1 (the journal notifies its queries, without a look-back).
async fn write(store: &ControlledQueryStore<InMemoryJournal>, pid: &str) {
    let results = store.write_messages(vec![event(pid)]).await.expect("write");
    assert!(results[0].is_ok(), "{results:?}");
}

/// The next envelope's persistence id; fails instead of waiting for a full round.
async fn next_id(live: &mut EnvelopeStream) -> String {
    let next = tokio::time::timeout(Duration::from_secs(10), live.next())
        .await
        .expect("delivered by the notified pass (full rounds are an hour apart)");
    next.expect("live")
        .expect("no error")
        .persistence_id
        .to_string()
}

#[tokio::test]
async fn a_late_commit_comes_with_the_notification_that_looks_back_over_it() {
    let journal = InMemoryJournal::new();
    let store = ControlledQueryStore::new(journal.clone());
    let control = store.control();
    let settings = QuerySettings {
        refresh_interval: Duration::from_secs(3600),
        late_commit_window: Duration::from_secs(3600),
        ..QuerySettings::default()
    };
    let query = ReadJournal::from_arc(Arc::new(store.clone()), settings);
    let mut live = query.events_by_slices("Late", 0, 1023, Offset::NoOffset);
    // `Late|a` is inserted first (lower timestamp) and commits after `Late|b`.
    control.hold_commits_of("Late|a");
    write(&store, "Late|a").await;
    write(&store, "Late|b").await;
    assert_eq!(next_id(&mut live).await, "Late|b");

    control.commit("Late|a");
    // Its transaction took (at most) a minute: the query reads again from that far back.
    journal
        .write_notifier()
        .notify_committed(Duration::from_secs(60));
    assert_eq!(next_id(&mut live).await, "Late|a");

    // What was delivered is not delivered again: the next event is the next write's.
    write(&store, "Late|c").await;
    journal
        .write_notifier()
        .notify_committed(Duration::from_secs(60));
    assert_eq!(next_id(&mut live).await, "Late|c");
}
