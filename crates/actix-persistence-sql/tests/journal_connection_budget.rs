//! Replays and writes cannot take each other's last connection: however many replays are held
//! open mid-page, a write still gets a connection, and the other way round. On PostgreSQL the
//! journal splits `max_connections` into a write budget and a read budget
//! (`connection_budgets`); on SQLite the writer connection and the reader pool are separate.
#![cfg(any(feature = "sqlite", feature = "test-util"))]

mod common;

use std::time::Duration;

use actix_persistence_core::{JournalStore, MAX_SEQ_NR};
use common::{atomic, backend_tests, replay_events, write_all_ok, Setting, TestBackend};
use futures::{FutureExt, StreamExt};

const MAX: u64 = MAX_SEQ_NR;

/// A small pool, and a short wait for a connection: a write that cannot get one fails fast.
const SETTINGS: [Setting; 3] = [
    Setting::MaxConnections(2),
    Setting::ReplayBatchSize(2),
    Setting::AcquireTimeout(Duration::from_secs(2)),
];

backend_tests! {
    replays_held_open_never_take_the_connections_of_writes,
    writes_held_open_never_take_the_connections_of_replays,
}

async fn replays_held_open_never_take_the_connections_of_writes<B: TestBackend>(db: B) {
    let journal = db.journal_with(&SETTINGS).await;
    write_all_ok(&journal, vec![atomic("r", 1..=10)]).await;
    // More replays than connections, each polled once: its first page is being read (or, when
    // the reader answered within that one poll, already read and its connection given back:
    // either way the write below must get a connection of its own).
    let mut held: Vec<_> = (0..4)
        .map(|_| journal.replay_messages("r", 1, MAX, MAX))
        .collect();
    for replay in &mut held {
        if let Some(first) = replay.next().now_or_never() {
            assert!(matches!(first, Some(Ok(_))), "{first:?}");
        }
    }
    let results = journal
        .write_messages(vec![atomic("w", 1..=1)])
        .await
        .expect("a write gets a connection");
    assert!(results[0].is_ok(), "{results:?}");
    drop(held);
    assert_eq!(replay_events(&journal, "w", 1, MAX, MAX).await.len(), 1);
}

async fn writes_held_open_never_take_the_connections_of_replays<B: TestBackend>(db: B) {
    // Without group commit each write runs its own transaction on the caller's task.
    let mut settings = SETTINGS.to_vec();
    settings.push(Setting::MaxBatchSize(1));
    let journal = db.journal_with(&settings).await;
    write_all_ok(&journal, vec![atomic("r", 1..=10)]).await;
    let mut held: Vec<_> = (1..=4)
        .map(|i| journal.write_messages(vec![atomic(&format!("w{i}"), 1..=1)]))
        .collect();
    for write in &mut held {
        assert!(write.now_or_never().is_none(), "the write is in progress");
    }
    let replayed = replay_events(&journal, "r", 1, MAX, MAX).await;
    assert_eq!(replayed.len(), 10, "a replay gets a connection");
    drop(held);
}
