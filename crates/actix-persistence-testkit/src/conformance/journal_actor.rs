//! The small persistent actor of case J21: it persists events through the real persistent-actor
//! machinery, one of which refuses to be serialized.

use actix::{Actor, Context, Handler, Message, ResponseFuture};
use actix_persistence_core::persistent::{
    start_recovery, EventSourced, PersistResult, PersistenceState, PersistentActor,
};
use actix_persistence_core::{JournalError, WriteRejection};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An event of the J21 actor: stored as a JSON string, or one whose `Serialize` fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CaseEvent {
    /// Serializes as the JSON string it holds (the setup's payloads `"a-1"`.. read back as
    /// this).
    Named(String),
    /// Its `Serialize` impl returns an error.
    Unserializable(String),
}

/// What the `Serialize` impl of [`CaseEvent::Unserializable`] says.
pub(crate) const REFUSAL: &str = "this event refuses to be serialized (conformance case J21)";

impl Serialize for CaseEvent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            CaseEvent::Named(name) => serializer.serialize_str(name),
            CaseEvent::Unserializable(_) => Err(serde::ser::Error::custom(REFUSAL)),
        }
    }
}

impl<'de> Deserialize<'de> for CaseEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(CaseEvent::Named)
    }
}

/// A persistent actor that records what it applied and which of its writes were rejected or
/// failed; talks only to its journal.
pub(crate) struct Persister {
    pub(crate) persistence: PersistenceState<Self>,
    pub(crate) applied: Vec<CaseEvent>,
    pub(crate) rejected: Vec<WriteRejection>,
    pub(crate) failures: usize,
}

impl Actor for Persister {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        start_recovery(self, ctx);
    }
}

impl PersistentActor for Persister {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }

    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

impl EventSourced for Persister {
    type Event = CaseEvent;

    fn apply(&mut self, event: &CaseEvent) {
        self.applied.push(event.clone());
    }

    fn on_persist_rejected(&mut self, cause: &WriteRejection, _: &mut Context<Self>) {
        self.rejected.push(cause.clone());
    }

    fn on_persist_failure(&mut self, _: &JournalError, _: &mut Context<Self>) {
        self.failures += 1;
    }
}

/// Persist each event with its own `persist` (one atomic write each), all in one command.
/// Answers with each continuation's outcome: the event it ran with, or why it did not run.
#[derive(Message)]
#[rtype(result = "Vec<PersistResult<CaseEvent>>")]
pub(crate) struct PersistEach(pub(crate) Vec<CaseEvent>);

impl Handler<PersistEach> for Persister {
    type Result = ResponseFuture<Vec<PersistResult<CaseEvent>>>;

    fn handle(&mut self, msg: PersistEach, ctx: &mut Context<Self>) -> Self::Result {
        let replies: Vec<_> = msg
            .0
            .into_iter()
            .map(|event| self.persist(ctx, event, |_, stored, _| stored.clone()))
            .collect();
        Box::pin(async move {
            let mut outcomes = Vec::with_capacity(replies.len());
            for reply in replies {
                outcomes.push(reply.await);
            }
            outcomes
        })
    }
}

/// What the actor saw so far.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Observed {
    pub(crate) applied: Vec<CaseEvent>,
    pub(crate) rejected_seq_nrs: Vec<u64>,
    pub(crate) failures: usize,
    pub(crate) last_seq_nr: u64,
}

/// Report what the actor saw (answered after recovery and after earlier writes completed).
#[derive(Message)]
#[rtype(result = "Observed")]
pub(crate) struct Observe;

impl Handler<Observe> for Persister {
    type Result = actix::MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Context<Self>) -> Self::Result {
        actix::MessageResult(Observed {
            applied: self.applied.clone(),
            rejected_seq_nrs: self.rejected.iter().map(|r| r.seq_nr).collect(),
            failures: self.failures,
            last_seq_nr: self.last_seq_nr(),
        })
    }
}
