//! The persistent actor's reply slot (one per incarnation, reused for every write): a journal
//! that goes away with a write in flight drops the reply unsent, and the actor learns it
//! (`JournalStopped`) instead of waiting forever; the replies of consecutive writes each reach
//! their own continuation. Writes after the first go through the journal's write channel
//! instead of its mailbox: the same holds for them, and the channel does not keep the journal
//! alive once its actors and addresses are gone. The store gets the channel's writes as
//! checked (`JournalStore::write_checked_now`) and still checks those of direct callers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix_persistence_core::journal::{JournalActor, JournalConfig};
use actix_persistence_core::persistent::{
    start_recovery, EventSourced, PersistError, PersistReply, PersistResult, PersistenceState,
    PersistentActor,
};
use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, CheckedBatch, FencingToken, InMemoryJournal, JournalError,
    JournalStore, ReplayStream, WriteBatch, WriteNow,
};
use async_trait::async_trait;
use tokio::sync::Notify;

/// An in-memory journal that stores its first `passes` writes and never completes the others;
/// tells when a write that will not complete reached it. Tells `dropped` when it is dropped
/// (with the journal actor holding it).
struct Stuck {
    journal: InMemoryJournal,
    reached: Arc<Notify>,
    passes: AtomicUsize,
    dropped: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Stuck {
    fn new(passes: usize, reached: &Arc<Notify>) -> Self {
        Stuck {
            journal: InMemoryJournal::new(),
            reached: Arc::clone(reached),
            passes: AtomicUsize::new(passes),
            dropped: None,
        }
    }
}

impl Drop for Stuck {
    fn drop(&mut self) {
        if let Some(dropped) = self.dropped.take() {
            let _ = dropped.send(());
        }
    }
}

#[async_trait]
impl JournalStore for Stuck {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        let pass = self
            .passes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if pass {
            return self.journal.write_messages(writes).await;
        }
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

/// A counter whose journal, on an arbiter of its own, completes the first `completed` writes
/// and never the next one: once that write reached the store, the journal's arbiter stops, and
/// the pending persist must fail with `JournalStopped` instead of hanging.
async fn journal_gone_with_a_write_in_flight(completed: usize, pid: &str) {
    let reached = Arc::new(Notify::new());
    let journal_arbiter = Arbiter::new();
    let journal = JournalActor::start_on(
        &journal_arbiter.handle(),
        Arc::new(Stuck::new(completed, &reached)),
        JournalConfig::default(),
    );
    let actor = counter(journal, pid);
    let mut total = 0;
    for seq_nr in 1..=completed as u64 {
        total += 5;
        let answer = actor.send(Add(5)).await.expect("mailbox").expect("stored");
        assert_eq!(answer, (seq_nr, total));
    }
    let reply = actor.send(Add(7));
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
async fn a_journal_gone_with_a_write_in_flight_fails_the_write_instead_of_hanging() {
    // An incarnation's first write goes through the journal's mailbox.
    journal_gone_with_a_write_in_flight(0, "stuck-1").await;
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

#[actix_rt::test]
async fn a_journal_gone_with_a_write_from_its_channel_in_flight_fails_the_write() {
    // The first write goes through the journal's mailbox and its reply brings the channel; the
    // second goes through the channel, and never completes.
    journal_gone_with_a_write_in_flight(1, "stuck-2").await;
}

#[actix_rt::test]
async fn a_write_sent_after_the_journal_stopped_fails_instead_of_hanging() {
    let reached = Arc::new(Notify::new());
    let journal_arbiter = Arbiter::new();
    let journal = JournalActor::start_on(
        &journal_arbiter.handle(),
        Arc::new(Stuck::new(usize::MAX, &reached)),
        JournalConfig::default(),
    );
    let actor = counter(journal, "stopped-1");
    for (seq_nr, n) in (1..).zip([2u64, 3]) {
        let answer = actor.send(Add(n)).await.expect("mailbox").expect("stored");
        assert_eq!(answer.0, seq_nr);
    }
    // The actor holds the journal's channel; the journal's arbiter is gone, its end with it.
    journal_arbiter.stop();
    assert!(
        journal_arbiter.join().is_ok(),
        "the journal's arbiter stops"
    );
    let outcome = tokio::time::timeout(Duration::from_secs(10), actor.send(Add(4)))
        .await
        .expect("the write fails instead of waiting for a journal that is gone")
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
async fn the_write_channel_does_not_keep_the_journal_alive() {
    let reached = Arc::new(Notify::new());
    let (dropped, journal_gone) = tokio::sync::oneshot::channel();
    let mut store = Stuck::new(usize::MAX, &reached);
    store.dropped = Some(dropped);
    let journal = JournalActor::start_with(Arc::new(store), JournalConfig::default());
    let actor = counter(journal, "alive-1");
    for (seq_nr, n) in (1..).zip([1u64, 2, 3]) {
        let answer = actor.send(Add(n)).await.expect("mailbox").expect("stored");
        assert_eq!(answer, (seq_nr, (1..=n).sum::<u64>()));
    }
    // The actor stops once its last address is gone, and with it the last sender of the
    // journal's channel and the last address of the journal: the journal stops and drops
    // its store.
    drop(actor);
    tokio::time::timeout(Duration::from_secs(10), journal_gone)
        .await
        .expect("the journal stops once its actors and addresses are gone")
        .expect("the store tells when it is dropped");
}

/// An in-memory journal counting which synchronous call the journal actor made for each batch.
#[derive(Default)]
struct Calls {
    journal: InMemoryJournal,
    unchecked: AtomicUsize,
    checked: AtomicUsize,
}

#[async_trait]
impl JournalStore for Calls {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        self.journal.write_messages(writes).await
    }

    fn write_messages_now(&self, writes: WriteBatch) -> WriteNow {
        self.unchecked.fetch_add(1, Ordering::SeqCst);
        self.journal.write_messages_now(writes)
    }

    fn write_checked_now(&self, writes: CheckedBatch) -> WriteNow {
        self.checked.fetch_add(1, Ordering::SeqCst);
        self.journal.write_checked_now(writes)
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

#[actix_rt::test]
async fn writes_from_the_channel_reach_the_store_as_checked_and_the_first_does_not() {
    let store = Arc::new(Calls::default());
    let journal = JournalActor::start_with(
        Arc::clone(&store) as Arc<dyn JournalStore>,
        JournalConfig::default(),
    );
    let actor = counter(journal, "checked-1");
    for (seq_nr, n) in (1..).zip([2u64, 7, 1, 8]) {
        let (got, _) = actor.send(Add(n)).await.expect("mailbox").expect("stored");
        assert_eq!(got, seq_nr);
    }
    // The first write went through the mailbox (unchecked for the store), the next three
    // through the write channel, as checked batches.
    assert_eq!(store.unchecked.load(Ordering::SeqCst), 1);
    assert_eq!(store.checked.load(Ordering::SeqCst), 3);
    let stored: Vec<u64> = futures::StreamExt::collect::<Vec<_>>(store.journal.replay_messages(
        "checked-1",
        1,
        u64::MAX,
        u64::MAX,
    ))
    .await
    .into_iter()
    .map(|e| e.expect("replayed").seq_nr)
    .collect();
    assert_eq!(stored, vec![1, 2, 3, 4]);
}

#[test]
fn the_in_memory_store_still_rejects_a_direct_write_over_the_limits() {
    let store = InMemoryJournal::new();
    let over = AtomicWrite::new(vec![actix_persistence_core::PersistentRepr {
        persistence_id: Arc::from("direct-1"),
        seq_nr: 1,
        payload: vec![1, 2, 3],
        serializer_id: 1,
        manifest: "with\0nul".to_owned(),
        writer_uuid: Arc::from("writer-1"),
        timestamp: 1,
        tags: Default::default(),
    }])
    .expect("a well-shaped write");
    match store.write_messages_now(WriteBatch::from_buf([over])) {
        WriteNow::Done(Ok(results)) => {
            assert_eq!(results.len(), 1);
            let rejection = results[0].as_ref().expect_err("rejected");
            assert!(
                rejection.to_string().contains("NUL"),
                "unexpected: {rejection}"
            );
        }
        other => panic!("expected a result at once, got {other:?}"),
    }
}
