//! A small persistent actor whose user code can be told to panic or to stop its arbiter at a
//! chosen point, and which records what it saw (for recovery tests).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use actix_persistence::actix::{Actor, Context, Handler, Message};
use actix_persistence::snapshot::SnapshotMetadata;
use actix_persistence::{
    start_recovery, EventSourced, PersistReply, PersistResult, PersistenceState, PersistentActor,
    RecoveryError, Snapshotting,
};
use serde::{Deserialize, Serialize};

/// An event: add an amount; `Boom` panics when applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Entry {
    Add(i64),
    Boom,
}

/// What the test wants to happen, and what the actor saw. Shared with the test (and across
/// arbiters), so only atomics and mutexes.
#[derive(Default)]
pub struct Script {
    /// Panic in the restore half of `snapshotting`.
    pub panic_in_restore: bool,
    /// Panic in `on_recovery_completed`.
    pub panic_in_recovery_completed: bool,
    /// Panic in `on_snapshot_saved`.
    pub panic_in_snapshot_saved: bool,
    /// Panic in `deserialize_event` (during replay) on the event with this seq_nr (0: never).
    pub panic_in_deserialize_at: u64,
    /// Stop the actor's arbiter while applying the event with this seq_nr (0: never).
    pub stop_arbiter_at: AtomicU64,
    /// Events applied so far (live and replayed).
    pub applied: AtomicU64,
    /// Events applied when the arbiter stop was requested.
    pub applied_at_stop: AtomicU64,
    /// `last_seq_nr()` as `apply` saw it, per applied event.
    pub seq_nrs_in_apply: Mutex<Vec<u64>>,
    /// `last_seq_nr()` as the restore half of `snapshotting` saw it.
    pub seq_nr_in_restore: Mutex<Option<u64>>,
    /// The recovery failures reported to `on_recovery_failure`.
    pub recovery_failures: Mutex<Vec<RecoveryError>>,
    /// `on_recovery_completed` calls (last seq_nr).
    pub recovered: Mutex<Vec<u64>>,
    /// Sequence numbers of the snapshots saved; `snapshot_saved` is notified after each.
    pub snapshots_saved: Mutex<Vec<u64>>,
    pub snapshot_saved: tokio::sync::Notify,
    /// Called in every `apply`; its values are kept in `probed`.
    pub probe: Mutex<Option<Box<dyn Fn() -> u32 + Send>>>,
    pub probed: Mutex<Vec<u32>>,
}

impl Script {
    pub fn seq_nrs_in_apply(&self) -> Vec<u64> {
        self.seq_nrs_in_apply.lock().expect("lock").clone()
    }

    pub fn recovery_failures(&self) -> Vec<RecoveryError> {
        self.recovery_failures.lock().expect("lock").clone()
    }
}

pub struct Ledger {
    pub persistence: PersistenceState<Self>,
    pub script: Arc<Script>,
    pub total: i64,
}

impl Ledger {
    pub fn new(persistence: PersistenceState<Self>, script: Arc<Script>) -> Self {
        Ledger {
            persistence,
            script,
            total: 0,
        }
    }
}

impl Actor for Ledger {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        start_recovery(self, ctx);
    }
}

impl PersistentActor for Ledger {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

impl EventSourced for Ledger {
    type Event = Entry;

    fn apply(&mut self, event: &Entry) {
        let seq_nr = self.last_seq_nr();
        self.script
            .seq_nrs_in_apply
            .lock()
            .expect("lock")
            .push(seq_nr);
        let applied = self.script.applied.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(probe) = &*self.script.probe.lock().expect("lock") {
            self.script.probed.lock().expect("lock").push(probe());
        }
        if self.script.stop_arbiter_at.load(Ordering::SeqCst) == seq_nr {
            self.script.applied_at_stop.store(applied, Ordering::SeqCst);
            actix::Arbiter::current().stop();
        }
        match event {
            Entry::Add(amount) => self.total += amount,
            Entry::Boom => panic!("boom at {seq_nr}"),
        }
    }

    fn deserialize_event(
        &self,
        repr: &actix_persistence::PersistentRepr,
    ) -> Result<Entry, actix_persistence::serialization::SerializationError> {
        if repr.seq_nr == self.script.panic_in_deserialize_at {
            panic!("deserializer exploded at {}", repr.seq_nr);
        }
        actix_persistence::serialization::from_json(repr.seq_nr, repr.serializer_id, &repr.payload)
    }

    fn snapshotting() -> Option<Snapshotting<Self>> {
        Some(Snapshotting::json(
            |ledger: &Self| ledger.total,
            |ledger, total| {
                *ledger.script.seq_nr_in_restore.lock().expect("lock") = Some(ledger.last_seq_nr());
                if ledger.script.panic_in_restore {
                    panic!("restore exploded");
                }
                ledger.total = total;
            },
        ))
    }

    fn on_snapshot_saved(&mut self, metadata: &SnapshotMetadata, _: &mut Context<Self>) {
        self.script
            .snapshots_saved
            .lock()
            .expect("lock")
            .push(metadata.seq_nr);
        self.script.snapshot_saved.notify_one();
        if self.script.panic_in_snapshot_saved {
            panic!("snapshot hook exploded");
        }
    }

    fn on_recovery_completed(&mut self, last_seq_nr: u64, _: &mut Context<Self>) {
        self.script
            .recovered
            .lock()
            .expect("lock")
            .push(last_seq_nr);
        if self.script.panic_in_recovery_completed {
            panic!("completion exploded");
        }
    }

    fn on_recovery_failure(&mut self, cause: &RecoveryError, _: &mut Context<Self>) {
        self.script
            .recovery_failures
            .lock()
            .expect("lock")
            .push(cause.clone());
    }
}

/// `persist` each entry; replies with the total after the last.
#[derive(Message)]
#[rtype(result = "PersistResult<i64>")]
pub struct Record(pub Vec<Entry>);

impl Handler<Record> for Ledger {
    type Result = PersistReply<i64>;

    fn handle(&mut self, msg: Record, ctx: &mut Context<Self>) -> Self::Result {
        let mut last = PersistReply::ready(self.total);
        for entry in msg.0 {
            last = self.persist(ctx, entry, |act, _, _| act.total);
        }
        last
    }
}

/// `persist_all` of the entries; replies with the total.
#[derive(Message)]
#[rtype(result = "PersistResult<i64>")]
pub struct RecordAll(pub Vec<Entry>);

impl Handler<RecordAll> for Ledger {
    type Result = PersistReply<i64>;

    fn handle(&mut self, msg: RecordAll, ctx: &mut Context<Self>) -> Self::Result {
        self.persist_all(ctx, msg.0, |act, _, _| act.total)
    }
}

/// `persist` the entry with a continuation that panics.
#[derive(Message)]
#[rtype(result = "PersistResult<i64>")]
pub struct RecordThenPanic(pub Entry);

impl Handler<RecordThenPanic> for Ledger {
    type Result = PersistReply<i64>;

    fn handle(&mut self, msg: RecordThenPanic, ctx: &mut Context<Self>) -> Self::Result {
        self.persist(ctx, msg.0, |_, _, _| -> i64 {
            panic!("continuation exploded")
        })
    }
}

/// Save a snapshot now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Snap;

impl Handler<Snap> for Ledger {
    type Result = ();

    fn handle(&mut self, _: Snap, ctx: &mut Context<Self>) {
        self.save_snapshot(ctx);
    }
}

/// The total and the last seq_nr.
#[derive(Message)]
#[rtype(result = "(i64, u64)")]
pub struct Balance;

impl Handler<Balance> for Ledger {
    type Result = actix::MessageResult<Balance>;

    fn handle(&mut self, _: Balance, _: &mut Context<Self>) -> Self::Result {
        actix::MessageResult((self.total, self.last_seq_nr()))
    }
}

/// Stop the actor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Halt;

impl Handler<Halt> for Ledger {
    type Result = ();

    fn handle(&mut self, _: Halt, ctx: &mut Context<Self>) {
        actix::ActorContext::stop(ctx);
    }
}

/// A command whose handler panics (user code the library does not run).
#[derive(Message)]
#[rtype(result = "PersistResult<i64>")]
pub struct PanicInHandler;

impl Handler<PanicInHandler> for Ledger {
    type Result = PersistReply<i64>;

    fn handle(&mut self, _: PanicInHandler, _: &mut Context<Self>) -> Self::Result {
        panic!("command handler exploded")
    }
}
