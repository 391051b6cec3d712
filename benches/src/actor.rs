//! The persistent actor every scenario drives: one `Persist` command persists one event and
//! answers with the event's sequence number (as the seed's `TestPersistentActor`).

use actix::prelude::*;
use actix_persistence_core::journal::JournalActor;
use actix_persistence_core::persistent::{
    start_recovery, EventSourced, PersistReply, PersistResult, PersistenceState, PersistentActor,
};
use serde::{Deserialize, Serialize};

/// The one event: a counter increment.
#[derive(Debug, Serialize, Deserialize)]
pub struct Incremented(pub u64);

/// A persistent counter; owns its persistence state and talks only to its journal.
pub struct BenchActor {
    persistence: PersistenceState<Self>,
    total: u64,
}

impl BenchActor {
    /// A counter with `persistence_id`, writing to `journal` (a fresh incarnation).
    ///
    /// # Panics
    /// If `persistence_id` is empty or holds NUL (the benchmarks build them, never a user).
    pub fn new(journal: Addr<JournalActor>, persistence_id: String) -> Self {
        let persistence = PersistenceState::new(journal, persistence_id)
            .expect("benchmark persistence ids are never empty and hold no NUL");
        BenchActor {
            persistence,
            total: 0,
        }
    }

    /// Starts `count` counters named `{prefix}-{i}` on the current arbiter.
    pub fn start_many(
        journal: &Addr<JournalActor>,
        prefix: &str,
        count: usize,
    ) -> Vec<Addr<BenchActor>> {
        (0..count)
            .map(|i| BenchActor::new(journal.clone(), format!("{prefix}-{i}")).start())
            .collect()
    }
}

impl Actor for BenchActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Large mailboxes: the open loop may queue several asks behind one slow write.
        ctx.set_mailbox_capacity(usize::MAX);
        start_recovery(self, ctx);
    }
}

impl EventSourced for BenchActor {
    type Event = Incremented;

    fn apply(&mut self, event: &Incremented) {
        self.total += event.0;
    }
}

impl PersistentActor for BenchActor {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }

    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

/// Persist one event; the answer is its sequence number, once it is stored.
#[derive(Debug, Message)]
#[rtype(result = "PersistResult<u64>")]
pub struct Persist;

impl Handler<Persist> for BenchActor {
    type Result = PersistReply<u64>;

    fn handle(&mut self, _: Persist, ctx: &mut Context<Self>) -> Self::Result {
        self.persist(ctx, Incremented(1), |actor, _, _| actor.last_seq_nr())
    }
}

/// Answered once recovery is over (commands wait in the mailbox until then): the highest
/// sequence number recovered.
#[derive(Debug, Message)]
#[rtype(result = "u64")]
pub struct Ready;

impl Handler<Ready> for BenchActor {
    type Result = u64;

    fn handle(&mut self, _: Ready, _: &mut Context<Self>) -> u64 {
        self.last_seq_nr()
    }
}

/// Waits until every actor has recovered.
///
/// # Errors
/// When an actor stopped before it answered (its recovery failed).
pub async fn wait_ready(actors: &[Addr<BenchActor>]) -> Result<(), MailboxError> {
    for chunk in actors.chunks(256) {
        let answers = futures::future::join_all(chunk.iter().map(|a| a.send(Ready))).await;
        for answer in answers {
            answer?;
        }
    }
    Ok(())
}
