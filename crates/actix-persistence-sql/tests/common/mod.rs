//! Helpers shared by the SQL store tests: an isolated database (a SQLite file, or a PostgreSQL
//! database of its own) per test, events with known payloads, replays collected into plain
//! values, and the snapshot store cases.
#![allow(dead_code)] // each test file uses a different subset

#[cfg(feature = "postgres")]
pub mod postgres;
pub mod snapshots;

use std::ops::RangeInclusive;

use actix_persistence_core::{
    AtomicWrite, AtomicWriteError, AtomicWriteResult, JournalError, JournalStore, PersistentRepr,
};
#[cfg(feature = "sqlite")]
use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions};
use futures::TryStreamExt;
#[cfg(feature = "sqlite")]
use tempfile::TempDir;

/// A journal on a database file of its own, removed with the temporary directory on drop.
#[cfg(feature = "sqlite")]
pub struct TestJournal {
    pub journal: SqliteJournal,
    pub url: String,
    // Dropped last: the file must outlive the pools.
    pub dir: TempDir,
}

#[cfg(feature = "sqlite")]
impl TestJournal {
    /// A fresh journal with the default options.
    pub async fn open() -> Self {
        Self::open_with(|_| {}).await
    }

    /// A fresh journal with options changed by `change`.
    pub async fn open_with(change: impl FnOnce(&mut SqliteJournalOptions)) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let url = format!("sqlite:{}", dir.path().join("journal.db").display());
        let mut options = SqliteJournalOptions::new(url.clone());
        change(&mut options);
        let journal = SqliteJournal::connect(&options)
            .await
            .expect("connect to a fresh database file");
        TestJournal { journal, url, dir }
    }
}

/// Event `seq_nr` of `pid`, with payload `a-<seq_nr>`.
pub fn event(pid: &str, seq_nr: u64) -> PersistentRepr {
    event_with_payload(pid, seq_nr, format!("a-{seq_nr}").as_bytes())
}

/// Event `seq_nr` of `pid` with the given payload.
pub fn event_with_payload(pid: &str, seq_nr: u64, payload: &[u8]) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.to_owned(),
        seq_nr,
        payload: payload.to_vec(),
        serializer_id: 1,
        manifest: "Event".to_owned(),
        writer_uuid: "writer-1".to_owned(),
        timestamp: 1_700_000_000_000 + (seq_nr % 1_000_000) as i64,
        tags: Vec::new(),
    }
}

/// One atomic write of the events `seq_nrs` of `pid`.
pub fn atomic(pid: &str, seq_nrs: RangeInclusive<u64>) -> AtomicWrite {
    AtomicWrite::new(seq_nrs.map(|n| event(pid, n)).collect()).expect("well-shaped write")
}

/// Writes a batch and asserts that every atomic write of it succeeded.
pub async fn write_all_ok(journal: &impl JournalStore, writes: Vec<AtomicWrite>) {
    let count = writes.len();
    let results = journal
        .write_messages(writes)
        .await
        .expect("batch succeeds");
    assert_eq!(results.len(), count, "one result per atomic write");
    for (i, result) in results.iter().enumerate() {
        assert!(result.is_ok(), "atomic write {i} failed: {result:?}");
    }
}

/// The conformance setup: seq 1..5 of `pid` written as atomic writes 1, 2, 3 and [4, 5].
pub async fn write_one_to_five(journal: &impl JournalStore, pid: &str) {
    write_all_ok(
        journal,
        vec![
            atomic(pid, 1..=1),
            atomic(pid, 2..=2),
            atomic(pid, 3..=3),
            atomic(pid, 4..=5),
        ],
    )
    .await;
}

/// Replays and collects the events.
pub async fn replay_events(
    journal: &impl JournalStore,
    pid: &str,
    from: u64,
    to: u64,
    max: u64,
) -> Vec<PersistentRepr> {
    journal
        .replay_messages(pid, from, to, max)
        .try_collect()
        .await
        .expect("replay succeeds")
}

/// What a recovery sees: the replayed sequence numbers, then the highest sequence number.
pub async fn recover(
    journal: &impl JournalStore,
    pid: &str,
    from: u64,
    to: u64,
    max: u64,
) -> (Vec<u64>, u64) {
    let events = replay_events(journal, pid, from, to, max).await;
    for event in &events {
        assert_eq!(event.persistence_id, pid);
        assert_eq!(event.payload, format!("a-{}", event.seq_nr).into_bytes());
    }
    let highest = journal
        .read_highest_sequence_nr(pid, from)
        .await
        .expect("highest sequence number");
    (events.iter().map(|e| e.seq_nr).collect(), highest)
}

/// The sequence number of a `ConcurrentWrite` failure, or a panic naming what it was instead.
pub fn concurrent_write_seq_nr(result: &AtomicWriteResult, pid: &str) -> u64 {
    match result {
        Err(AtomicWriteError::Failed(JournalError::ConcurrentWrite {
            persistence_id,
            seq_nr,
        })) => {
            assert_eq!(persistence_id, pid);
            *seq_nr
        }
        other => panic!("expected a ConcurrentWrite failure, got {other:?}"),
    }
}
