//! The persistent actor's reply slot (one per incarnation, reused for every write): a journal
//! that goes away with a write in flight drops the reply unsent, and the actor learns it
//! (`JournalStopped`) instead of waiting forever; the replies of consecutive writes each reach
//! their own continuation.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix_persistence_core::journal::{JournalActor, JournalConfig};
use actix_persistence_core::persistent::{
    start_recovery, EventSourced, PersistError, PersistReply, PersistResult, PersistenceState,
    PersistentActor,
};
use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, FencingToken, InMemoryJournal, JournalError, JournalStore,
    ReplayStream,
};
use async_trait::async_trait;
use tokio::sync::Notify;

/// An in-memory journal whose writes never complete; tells when a write reached it.
struct Stuck {
    journal: InMemoryJournal,
    reached: Arc<Notify>,
}

#[async_trait]
impl JournalStore for Stuck {
    async fn write_messages(
        &self,
        _writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        self.reached.notify_one();
        futures::future::pending().await
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.journal.replay_messages(pid, from, to, max)
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

/// Persists one number per `Add`; answers with the sequence number it got.
struct Counter {
    persistence: PersistenceState<Self>,
    total: u64,
}

impl Actor for Counter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        start_recovery(self, ctx);
    }
}

impl EventSourced for Counter {
    type Event = u64;

    fn apply(&mut self, event: &u64) {
        self.total += event;
    }
}

impl PersistentActor for Counter {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }

    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

#[derive(Message)]
#[rtype(result = "PersistResult<(u64, u64)>")]
struct Add(u64);

impl Handler<Add> for Counter {
    type Result = PersistReply<(u64, u64)>;

    fn handle(&mut self, Add(n): Add, ctx: &mut Context<Self>) -> Self::Result {
        self.persist(ctx, n, |actor, _, _| (actor.last_seq_nr(), actor.total))
    }
}

fn counter(journal: Addr<JournalActor>, pid: &str) -> Addr<Counter> {
    Counter {
        persistence: PersistenceState::new(journal, pid).expect("a valid persistence id"),
        total: 0,
    }
    .start()
}

#[actix_rt::test]
async fn a_journal_gone_with_a_write_in_flight_fails_the_write_instead_of_hanging() {
    let reached = Arc::new(Notify::new());
    let store = Stuck {
        journal: InMemoryJournal::new(),
        reached: Arc::clone(&reached),
    };
    let journal_arbiter = Arbiter::new();
    let journal = JournalActor::start_on(
        &journal_arbiter.handle(),
        Arc::new(store),
        JournalConfig::default(),
    );
    let actor = counter(journal, "stuck-1");
    let reply = actor.send(Add(5));
    tokio::time::timeout(Duration::from_secs(10), reached.notified())
        .await
        .expect("the write reaches the store");
    // The write's future, holding the reply, is dropped with the journal's arbiter.
    journal_arbiter.stop();
    let outcome = tokio::time::timeout(Duration::from_secs(10), reply)
        .await
        .expect("the actor learns that no reply will come")
        .expect("the actor answers before it stops");
    assert!(
        matches!(
            outcome,
            Err(PersistError::Failed(JournalError::JournalStopped))
        ),
        "got {outcome:?}"
    );
}

#[actix_rt::test]
async fn consecutive_writes_each_get_their_own_reply() {
    let journal =
        JournalActor::start_with(Arc::new(InMemoryJournal::new()), JournalConfig::default());
    let actor = counter(journal, "slot-1");
    let mut total = 0;
    for (seq_nr, n) in (1..).zip([3u64, 1, 4, 1, 5, 9, 2, 6]) {
        total += n;
        let answer = actor.send(Add(n)).await.expect("mailbox").expect("stored");
        assert_eq!(answer, (seq_nr, total));
    }
    // Several commands queued at once: each batch's reply is taken before the next is sent.
    let replies: Vec<_> = (0..20u64).map(|n| actor.send(Add(n))).collect();
    for (i, reply) in replies.into_iter().enumerate() {
        total += i as u64;
        let answer = reply.await.expect("mailbox").expect("stored");
        assert_eq!(answer, (9 + i as u64, total));
    }
}
