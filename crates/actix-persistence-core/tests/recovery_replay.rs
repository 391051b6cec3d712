//! A persistent actor recovers through `JournalStore::replay_for_recovery` (the journal actor's
//! `RecoveryReplay`), which a store may answer without the events' tags; `ReplayMessages`
//! still replays through `replay_messages`, tags included.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use actix::prelude::*;
use actix_persistence_core::journal::{
    JournalActor, JournalConfig, RecoveryReplay, ReplayMessages,
};
use actix_persistence_core::persistent::{
    start_recovery, EventSourced, PersistReply, PersistResult, PersistenceState, PersistentActor,
};
use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, FencingToken, InMemoryJournal, JournalError, JournalStore,
    PersistentRepr, ReplayStream,
};
use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};

/// An in-memory journal that counts its replays of each kind; its recovery replay leaves the
/// tags out, as the SQL stores' does.
#[derive(Default)]
struct Counting {
    journal: InMemoryJournal,
    replays: AtomicUsize,
    recovery_replays: AtomicUsize,
}

#[async_trait]
impl JournalStore for Counting {
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

    fn replay_for_recovery(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.recovery_replays.fetch_add(1, Ordering::SeqCst);
        Box::pin(
            self.journal
                .replay_messages(pid, from, to, max)
                .map_ok(|mut event| {
                    event.tags = Default::default();
                    event
                }),
        )
    }

    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        self.journal.read_highest_sequence_nr(pid, from).await
    }

    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        token: FencingToken,
    ) -> Result<(), JournalError> {
        self.journal.delete_messages_to(pid, to, token).await
    }
}

/// Sums what it persists; tags every event "sum".
struct Summer {
    persistence: PersistenceState<Self>,
    total: u64,
}

impl Actor for Summer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        start_recovery(self, ctx);
    }
}

impl EventSourced for Summer {
    type Event = u64;

    fn apply(&mut self, event: &u64) {
        self.total += event;
    }

    fn tags(&self, _: &u64) -> Vec<String> {
        vec!["sum".to_owned()]
    }
}

impl PersistentActor for Summer {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }

    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct Add(u64);

impl Handler<Add> for Summer {
    type Result = PersistReply<u64>;

    fn handle(&mut self, Add(n): Add, ctx: &mut Context<Self>) -> Self::Result {
        self.persist(ctx, n, |actor, _, _| actor.total)
    }
}

fn summer(journal: &Addr<JournalActor>) -> Addr<Summer> {
    Summer {
        persistence: PersistenceState::new(journal.clone(), "sum-1").expect("a valid id"),
        total: 0,
    }
    .start()
}

fn replay(from_seq_nr: u64) -> ReplayMessages {
    ReplayMessages {
        persistence_id: "sum-1".to_owned(),
        from_seq_nr,
        to_seq_nr: u64::MAX,
        max: u64::MAX,
    }
}

async fn events(replay: actix_persistence_core::journal::Replay) -> Vec<PersistentRepr> {
    replay
        .events
        .map(|event| event.expect("an event"))
        .collect()
        .await
}

#[actix_rt::test]
async fn recovery_replays_through_replay_for_recovery_and_queries_keep_their_tags() {
    let store = Arc::new(Counting::default());
    let journal = JournalActor::start_with(
        Arc::clone(&store) as Arc<dyn JournalStore>,
        JournalConfig::default(),
    );
    let first = summer(&journal);
    for n in [1, 2, 3] {
        first.send(Add(n)).await.expect("mailbox").expect("stored");
    }
    assert_eq!(
        store.recovery_replays.load(Ordering::SeqCst),
        1,
        "the first start"
    );
    assert_eq!(store.replays.load(Ordering::SeqCst), 0);

    // A second incarnation recovers the three events through the recovery replay.
    let second = summer(&journal);
    let total = second
        .send(Add(10))
        .await
        .expect("mailbox")
        .expect("stored");
    assert_eq!(total, 16);
    assert_eq!(store.recovery_replays.load(Ordering::SeqCst), 2);
    assert_eq!(store.replays.load(Ordering::SeqCst), 0);

    // `ReplayMessages` replays with the tags; `RecoveryReplay` as the store answers it.
    let tagged = events(
        journal
            .send(replay(1))
            .await
            .expect("mailbox")
            .expect("replay"),
    )
    .await;
    assert_eq!(tagged.len(), 4);
    assert!(tagged.iter().all(|e| e.tags == ["sum"]), "{tagged:?}");
    assert_eq!(store.replays.load(Ordering::SeqCst), 1);
    let untagged = events(
        journal
            .send(RecoveryReplay(replay(2)))
            .await
            .expect("mailbox")
            .expect("replay"),
    )
    .await;
    assert_eq!(
        untagged.iter().map(|e| e.seq_nr).collect::<Vec<_>>(),
        [2, 3, 4]
    );
    assert!(untagged.iter().all(|e| e.tags.is_empty()), "{untagged:?}");
    assert_eq!(store.recovery_replays.load(Ordering::SeqCst), 3);
}

/// A store that does not override `replay_for_recovery` recovers through `replay_messages`
/// (the default), tags and all.
#[actix_rt::test]
async fn the_default_recovery_replay_is_replay_messages() {
    let store = Arc::new(InMemoryJournal::new());
    let journal = JournalActor::start_with(
        Arc::clone(&store) as Arc<dyn JournalStore>,
        JournalConfig::default(),
    );
    let first = summer(&journal);
    first.send(Add(4)).await.expect("mailbox").expect("stored");
    let replayed: Vec<_> = store
        .replay_for_recovery("sum-1", 1, u64::MAX, u64::MAX)
        .try_collect()
        .await
        .expect("replay");
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[0].tags, ["sum"]);
    let second = summer(&journal);
    let total = second.send(Add(1)).await.expect("mailbox").expect("stored");
    assert_eq!(total, 5);
}
