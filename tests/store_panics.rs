//! A store that panics (a bug in a hand-written plugin), in any call a persistent actor makes
//! and at any point of it: before its future or stream exists, while its future is polled, or
//! in the middle of a replay stream. Each panic is the failure of that call, with a typed
//! error naming the store (`the journal store panicked`, `the snapshot store panicked`) given
//! to the hook that handles it: `on_recovery_failure`, `on_delete_failure`,
//! `on_snapshot_failure`. It neither stops the actor as a panic of its own code would, nor the
//! journal actor, nor shows as "the journal stopped"; the next call of a fixed store works.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence::query::{
    EventsRequest, QuerySettings, QueryStore, ReadJournal, StoredEvent,
};
use actix_persistence::snapshot::{
    InMemorySnapshotStore, SelectedSnapshot, SerializedSnapshot, SnapshotError, SnapshotMetadata,
    SnapshotSelectionCriteria, SnapshotStore,
};
use actix_persistence::store::{AtomicWriteResult, Ownership, ReplayStream};
use actix_persistence::{AtomicWrite, FencingToken, InMemoryJournal, JournalError, JournalStore};
use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::StreamExt;
use support::*;

/// Where the store panics (a bit each), while the bit is set.
const REPLAY_BEFORE_STREAM: u32 = 1;
/// While the stream is polled (it exists).
const REPLAY_MID_STREAM: u32 = 1 << 1;
const HIGHEST_BEFORE_FUTURE: u32 = 1 << 2;
const OWNERSHIP_BEFORE_FUTURE: u32 = 1 << 3;
const DELETED_TO_IN_FUTURE: u32 = 1 << 4;
const DELETE_BEFORE_FUTURE: u32 = 1 << 5;
const LOAD_BEFORE_FUTURE: u32 = 1 << 6;
const LOAD_IN_FUTURE: u32 = 1 << 7;
const SAVE_BEFORE_FUTURE: u32 = 1 << 8;
const SAVE_IN_FUTURE: u32 = 1 << 9;

/// The in-memory stores, panicking where the shared bits say.
#[derive(Clone)]
struct Panicky {
    journal: InMemoryJournal,
    snapshots: InMemorySnapshotStore,
    panics: Arc<AtomicU32>,
}

impl Panicky {
    fn new() -> Self {
        Panicky {
            journal: InMemoryJournal::new(),
            snapshots: InMemorySnapshotStore::new(),
            panics: Arc::new(AtomicU32::new(0)),
        }
    }

    fn panics_at(&self, bits: u32) {
        self.panics.store(bits, Ordering::SeqCst);
    }

    fn check(&self, bit: u32, what: &str) {
        assert!(
            self.panics.load(Ordering::SeqCst) & bit == 0,
            "a bug in the store: {what}"
        );
    }
}

impl JournalStore for Panicky {
    fn write_messages<'a, 'b>(
        &'a self,
        writes: Vec<AtomicWrite>,
    ) -> BoxFuture<'b, Result<Vec<AtomicWriteResult>, JournalError>>
    where
        'a: 'b,
        Self: 'b,
    {
        self.journal.write_messages(writes)
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.check(REPLAY_BEFORE_STREAM, "replay, before its stream exists");
        let panics = Arc::clone(&self.panics);
        self.journal
            .replay_messages(pid, from, to, max)
            .map(move |event| {
                assert!(
                    panics.load(Ordering::SeqCst) & REPLAY_MID_STREAM == 0,
                    "a bug in the store: an event of the replay"
                );
                event
            })
            .boxed()
    }

    fn read_highest_sequence_nr<'a, 'b, 'c>(
        &'a self,
        pid: &'b str,
        from: u64,
    ) -> BoxFuture<'c, Result<u64, JournalError>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        self.check(HIGHEST_BEFORE_FUTURE, "highest sequence number");
        self.journal.read_highest_sequence_nr(pid, from)
    }

    fn delete_messages_to<'a, 'b, 'c>(
        &'a self,
        pid: &'b str,
        to: u64,
        token: FencingToken,
    ) -> BoxFuture<'c, Result<(), JournalError>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        self.check(DELETE_BEFORE_FUTURE, "delete");
        self.journal.delete_messages_to(pid, to, token)
    }

    fn take_ownership<'a, 'b, 'c>(
        &'a self,
        pid: &'b str,
    ) -> BoxFuture<'c, Result<Ownership, JournalError>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        self.check(OWNERSHIP_BEFORE_FUTURE, "take ownership");
        self.journal.take_ownership(pid)
    }

    fn read_deleted_to<'a, 'b, 'c>(
        &'a self,
        pid: &'b str,
    ) -> BoxFuture<'c, Result<Option<u64>, JournalError>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        Box::pin(async move {
            self.check(DELETED_TO_IN_FUTURE, "how far events were deleted");
            self.journal.read_deleted_to(pid).await
        })
    }
}

#[async_trait]
impl QueryStore for Panicky {
    async fn current_timestamp(&self) -> Result<i64, JournalError> {
        self.journal.current_timestamp().await
    }

    async fn read_events(
        &self,
        request: EventsRequest<'_>,
    ) -> Result<Vec<StoredEvent>, JournalError> {
        self.journal.read_events(request).await
    }

    async fn read_persistence_ids(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>, JournalError> {
        self.journal.read_persistence_ids(after, limit).await
    }
}

#[async_trait]
impl SnapshotStore for Panicky {
    async fn load(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        self.check(LOAD_IN_FUTURE, "snapshot load");
        self.snapshots.load(pid, criteria).await
    }

    async fn save(
        &self,
        metadata: SnapshotMetadata,
        snapshot: SerializedSnapshot,
    ) -> Result<(), SnapshotError> {
        self.check(SAVE_IN_FUTURE, "snapshot save");
        self.snapshots.save(metadata, snapshot).await
    }

    async fn delete(&self, metadata: &SnapshotMetadata) -> Result<(), SnapshotError> {
        self.snapshots.delete(metadata).await
    }

    async fn delete_matching(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError> {
        self.snapshots.delete_matching(pid, criteria).await
    }
}

/// A snapshot store whose calls panic before their futures exist (its own type: the
/// `async_trait` methods of [`Panicky`] cannot).
#[derive(Clone)]
struct PanickyBeforeFutures(Panicky);

impl SnapshotStore for PanickyBeforeFutures {
    fn load<'a, 'b, 'c>(
        &'a self,
        pid: &'b str,
        criteria: SnapshotSelectionCriteria,
    ) -> BoxFuture<'c, Result<Option<SelectedSnapshot>, SnapshotError>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        self.0
            .check(LOAD_BEFORE_FUTURE, "snapshot load, before its future");
        self.0.load(pid, criteria)
    }

    fn save<'a, 'b>(
        &'a self,
        metadata: SnapshotMetadata,
        snapshot: SerializedSnapshot,
    ) -> BoxFuture<'b, Result<(), SnapshotError>>
    where
        'a: 'b,
        Self: 'b,
    {
        self.0
            .check(SAVE_BEFORE_FUTURE, "snapshot save, before its future");
        self.0.save(metadata, snapshot)
    }

    fn delete<'a, 'b, 'c>(
        &'a self,
        metadata: &'b SnapshotMetadata,
    ) -> BoxFuture<'c, Result<(), SnapshotError>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        self.0.delete(metadata)
    }

    fn delete_matching<'a, 'b, 'c>(
        &'a self,
        pid: &'b str,
        criteria: SnapshotSelectionCriteria,
    ) -> BoxFuture<'c, Result<(), SnapshotError>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        self.0.delete_matching(pid, criteria)
    }
}

/// A harness whose journal and snapshot store are `store`'s.
fn harness(store: &Panicky) -> Harness {
    let mut h = Harness::new(1);
    h.journal = JournalActor::start_with(
        Arc::new(store.clone()),
        JournalConfig {
            call_timeout: Duration::from_secs(30),
            ..JournalConfig::default()
        },
    );
    h.snapshots = Arc::new(PanickyBeforeFutures(store.clone()));
    h
}

/// Starts `pid` with the harness's snapshot store and returns what its recovery ended with.
async fn recover(h: &mut Harness, pid: &str) -> (actix::Addr<Probe>, Seen) {
    let snapshots = Arc::clone(&h.snapshots);
    let addr = h.start_probe(pid, 0, move |s| {
        s.with_snapshot_store(snapshots, Duration::from_secs(30))
    });
    let seen = h
        .seen_until(|s| matches!(s, Seen::Recovered { .. } | Seen::RecoveryFailed { .. }))
        .await
        .pop()
        .expect("recovery ended");
    (addr, seen)
}

/// Two events stored for `pid`, and a snapshot at 1.
async fn history(store: &Panicky, pid: &str) {
    let mut h = harness(store);
    let (writer, seen) = recover(&mut h, pid).await;
    assert!(matches!(seen, Seen::Recovered { .. }), "{seen:?}");
    writer
        .send(Persist(vec![named("a")]))
        .await
        .expect("mailbox")
        .expect("stored");
    writer.send(SaveSnapshot).await.expect("mailbox");
    match h
        .seen_until(|s| matches!(s, Seen::SnapshotSaved { .. } | Seen::SnapshotFailed { .. }))
        .await
        .pop()
    {
        Some(Seen::SnapshotSaved { seq_nr: 1, .. }) => {}
        other => panic!("expected the snapshot at 1, got {other:?}"),
    }
    writer
        .send(Persist(vec![named("b")]))
        .await
        .expect("mailbox")
        .expect("stored");
    writer.send(Stop).await.expect("mailbox");
}

#[actix::test]
async fn a_store_panicking_in_any_call_of_recovery_fails_the_recovery_with_a_store_error() {
    let cases = [
        (REPLAY_BEFORE_STREAM, "the journal store panicked"),
        (REPLAY_MID_STREAM, "the journal store panicked"),
        (HIGHEST_BEFORE_FUTURE, "the journal store panicked"),
        (OWNERSHIP_BEFORE_FUTURE, "the journal store panicked"),
        (DELETED_TO_IN_FUTURE, "the journal store panicked"),
        (LOAD_BEFORE_FUTURE, "the snapshot store panicked"),
        (LOAD_IN_FUTURE, "the snapshot store panicked"),
    ];
    for (bit, expected) in cases {
        let store = Panicky::new();
        let pid = format!("p{bit}");
        history(&store, &pid).await;
        let mut h = harness(&store);
        store.panics_at(bit);
        let (_failed, seen) = recover(&mut h, &pid).await;
        match seen {
            Seen::RecoveryFailed { error, .. } => {
                assert!(error.contains(expected), "bit {bit}: {error}")
            }
            other => panic!("bit {bit}: expected a failed recovery, got {other:?}"),
        }
        // The journal actor lives on: once the store is fixed the next incarnation recovers
        // the snapshot at 1 and the event after it.
        store.panics_at(0);
        let (_recovered, seen) = recover(&mut h, &pid).await;
        match seen {
            Seen::Recovered {
                last_seq_nr,
                replayed,
                ..
            } => {
                assert_eq!(last_seq_nr, 2, "bit {bit}");
                assert_eq!(replayed, vec![named("a"), named("b")], "bit {bit}");
            }
            other => panic!("bit {bit}: expected a recovery, got {other:?}"),
        }
    }
}

#[actix::test]
async fn a_store_panicking_in_a_delete_or_a_snapshot_save_fails_that_call_and_the_actor_goes_on() {
    let cases = [
        (DELETE_BEFORE_FUTURE, "the journal store panicked"),
        (SAVE_BEFORE_FUTURE, "the snapshot store panicked"),
        (SAVE_IN_FUTURE, "the snapshot store panicked"),
    ];
    for (bit, expected) in cases {
        let store = Panicky::new();
        let pid = format!("p{bit}");
        history(&store, &pid).await;
        let mut h = harness(&store);
        let (actor, seen) = recover(&mut h, &pid).await;
        assert!(matches!(seen, Seen::Recovered { .. }), "{seen:?}");
        store.panics_at(bit);
        if bit == DELETE_BEFORE_FUTURE {
            actor.send(DeleteEventsTo(1)).await.expect("mailbox");
        } else {
            actor.send(SaveSnapshot).await.expect("mailbox");
        }
        match h
            .seen_until(|s| matches!(s, Seen::DeleteFailed { .. } | Seen::SnapshotFailed { .. }))
            .await
            .pop()
        {
            Some(Seen::DeleteFailed { error, .. } | Seen::SnapshotFailed { error, .. }) => {
                assert!(error.contains(expected), "bit {bit}: {error}")
            }
            other => panic!("bit {bit}: expected a failed call, got {other:?}"),
        }
        // The actor goes on: it persists after the failed call.
        store.panics_at(0);
        let seq_nr = actor
            .send(Persist(vec![named("c")]))
            .await
            .expect("the actor is alive")
            .expect("stored");
        assert_eq!(seq_nr, 3, "bit {bit}");
    }
}

#[actix::test]
async fn a_store_panicking_in_a_query_by_persistence_id_ends_the_query_with_a_store_error() {
    for bit in [REPLAY_BEFORE_STREAM, REPLAY_MID_STREAM] {
        let store = Panicky::new();
        let pid = format!("p{bit}");
        history(&store, &pid).await;
        let query = ReadJournal::new(store.clone(), QuerySettings::default());
        store.panics_at(bit);
        let items: Vec<_> = query
            .current_events_by_persistence_id(&pid, 1, u64::MAX)
            .collect()
            .await;
        match &items[..] {
            [Err(error)] => assert!(
                error.to_string().contains("the journal store panicked"),
                "bit {bit}: {error}"
            ),
            other => panic!("bit {bit}: expected one error, got {other:?}"),
        }
        // Fixed, the store answers the same query.
        store.panics_at(0);
        let seq_nrs: Vec<u64> = query
            .current_events_by_persistence_id(&pid, 1, u64::MAX)
            .map(|item| item.expect("an envelope").seq_nr)
            .collect()
            .await;
        assert_eq!(seq_nrs, vec![1, 2], "bit {bit}");
    }
}
