//! The sequence number user code sees: inside `apply`, `last_seq_nr()` is the sequence number
//! of the event being applied (as Akka's `lastSequenceNr` in the event handler), live and
//! during replay alike, with `persist`, `persist_all` and a snapshot in between.

mod support;

use std::sync::Arc;
use std::time::Duration;

use actix_persistence::actix::Actor;
use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence::snapshot::{InMemorySnapshotStore, SnapshotStore};
use actix_persistence::{
    InMemoryJournal, JournalStore, PersistenceState, SqliteJournal, SqliteJournalOptions,
    StopReason,
};
use support::ledger::*;

struct Stores {
    journal: Arc<dyn JournalStore>,
    snapshots: Arc<dyn SnapshotStore>,
    _dir: Option<tempfile::TempDir>,
}

async fn stores(sqlite: bool) -> Stores {
    if !sqlite {
        return Stores {
            journal: Arc::new(InMemoryJournal::new()),
            snapshots: Arc::new(InMemorySnapshotStore::new()),
            _dir: None,
        };
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("journal.db").display());
    let journal = SqliteJournal::connect(&SqliteJournalOptions::new(url))
        .await
        .expect("open SQLite");
    Stores {
        snapshots: Arc::new(journal.snapshot_store()),
        journal: Arc::new(journal),
        _dir: Some(dir),
    }
}

/// Starts a ledger over `stores` (with its snapshot store when `snapshots`), reporting to a
/// fresh script.
fn start(
    stores: &Stores,
    pid: &str,
    snapshots: bool,
) -> (
    actix::Addr<Ledger>,
    Arc<Script>,
    tokio::sync::oneshot::Receiver<StopReason>,
) {
    let journal = JournalActor::start_with(Arc::clone(&stores.journal), JournalConfig::default());
    let mut state = PersistenceState::new(journal, pid).expect("valid id");
    if snapshots {
        state = state.with_snapshot_store(Arc::clone(&stores.snapshots), Duration::from_secs(5));
    }
    let stopped = state.watch_stop();
    let script = Arc::new(Script::default());
    (
        Ledger::new(state, Arc::clone(&script)).start(),
        script,
        stopped,
    )
}

async fn apply_sees_the_seq_nr_of_the_event_being_applied_live_and_in_replay(sqlite: bool) {
    let stores = stores(sqlite).await;
    let (ledger, live, stopped) = start(&stores, "seq", true);
    let total = |r: actix_persistence::PersistResult<i64>| r.expect("stored");
    assert_eq!(
        total(
            ledger
                .send(Record(vec![Entry::Add(1)]))
                .await
                .expect("mailbox")
        ),
        1
    );
    let all = RecordAll(vec![Entry::Add(2), Entry::Add(3), Entry::Add(4)]);
    assert_eq!(total(ledger.send(all).await.expect("mailbox")), 10);
    ledger.send(Snap).await.expect("mailbox");
    live.snapshot_saved.notified().await;
    assert_eq!(*live.snapshots_saved.lock().expect("lock"), vec![4]);
    let more = Record(vec![Entry::Add(5), Entry::Add(6)]);
    assert_eq!(total(ledger.send(more).await.expect("mailbox")), 21);
    let last = RecordAll(vec![Entry::Add(7), Entry::Add(8)]);
    assert_eq!(total(ledger.send(last).await.expect("mailbox")), 36);
    assert_eq!(live.seq_nrs_in_apply(), (1..=8).collect::<Vec<_>>(), "live");
    assert_eq!(ledger.send(Balance).await.expect("mailbox"), (36, 8));
    ledger.send(Halt).await.expect("mailbox");
    assert_eq!(stopped.await.expect("stopped"), StopReason::Normal);

    // Replay of every event: the same sequence numbers as live.
    let (ledger, replay, _) = start(&stores, "seq", false);
    assert_eq!(ledger.send(Balance).await.expect("mailbox"), (36, 8));
    assert_eq!(
        replay.seq_nrs_in_apply(),
        (1..=8).collect::<Vec<_>>(),
        "replay"
    );

    // From the snapshot at 4: restore sees 4, then 5..=8.
    let (ledger, from_snapshot, _) = start(&stores, "seq", true);
    assert_eq!(ledger.send(Balance).await.expect("mailbox"), (36, 8));
    assert_eq!(
        *from_snapshot.seq_nr_in_restore.lock().expect("lock"),
        Some(4)
    );
    assert_eq!(
        from_snapshot.seq_nrs_in_apply(),
        vec![5, 6, 7, 8],
        "after the snapshot"
    );
}

#[actix::test]
async fn apply_sees_the_seq_nr_of_the_event_being_applied_in_memory() {
    apply_sees_the_seq_nr_of_the_event_being_applied_live_and_in_replay(false).await
}

#[actix::test]
async fn apply_sees_the_seq_nr_of_the_event_being_applied_on_sqlite() {
    apply_sees_the_seq_nr_of_the_event_being_applied_live_and_in_replay(true).await
}
