//! A probe persistent actor that reports everything it sees, for ordering tests.
#![allow(dead_code)]

pub mod ledger;

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use actix_persistence::actix::{Actor, ActorContext, Addr, Context, Handler, Message};
use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence::snapshot::{
    InMemorySnapshotStore, SnapshotError, SnapshotMetadata, SnapshotStore,
};
use actix_persistence::{
    start_recovery, DeleteError, EventSourced, JournalError, PersistReply, PersistResult,
    PersistenceState, PersistentActor, RecoveryError, Snapshotting, WriteRejection,
};
use actix_persistence::{InMemoryJournal, JournalStore, SqliteJournal, SqliteJournalOptions};
use actix_persistence_testkit::{persistence_state_in_group, ControlledJournal, WriteController};
use serde::{Deserialize, Serialize, Serializer};
use tokio::sync::mpsc;

/// An event: a name, or one whose serialization fails.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Evt {
    Named(String),
    #[serde(serialize_with = "refuse")]
    Unserializable(String),
    #[serde(serialize_with = "explode")]
    Panicking(String),
    /// Serializes, but `EventSourced::tags` panics on it.
    PanickingTags(String),
}

fn explode<S: Serializer>(_: &String, _: S) -> Result<S::Ok, S::Error> {
    panic!("this event's serializer panics")
}

fn refuse<S: Serializer>(_: &String, _: S) -> Result<S::Ok, S::Error> {
    Err(serde::ser::Error::custom(
        "this event refuses to be serialized",
    ))
}

pub fn named(s: &str) -> Evt {
    Evt::Named(s.to_owned())
}

/// What a probe saw, in the order it saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    Recovered {
        pid: String,
        last_seq_nr: u64,
        replayed: Vec<Evt>,
    },
    /// A command arrived; `applied` is how many events its state held then.
    Command {
        pid: String,
        applied: usize,
    },
    Handler {
        pid: String,
        event: Evt,
        seq_nr: u64,
    },
    Deferred {
        pid: String,
        tag: String,
    },
    Rejected {
        pid: String,
        seq_nr: u64,
    },
    Failed {
        pid: String,
    },
    Stopped {
        pid: String,
    },
    RecoveryFailed {
        pid: String,
        error: String,
    },
    SnapshotSaved {
        pid: String,
        seq_nr: u64,
    },
    SnapshotFailed {
        pid: String,
        error: String,
    },
    EventsDeleted {
        pid: String,
        to_seq_nr: u64,
    },
    DeleteFailed {
        pid: String,
        error: String,
    },
    /// A command that only noted its number (no persist).
    Noted {
        pid: String,
        n: u64,
    },
}

pub struct Probe {
    pub persistence: PersistenceState<Self>,
    pub applied: Vec<Evt>,
    pub log: mpsc::UnboundedSender<Seen>,
}

impl Probe {
    fn pid(&self) -> String {
        self.persistence_id().to_owned()
    }

    fn see(&self, seen: Seen) {
        let _ = self.log.send(seen);
    }
}

impl Actor for Probe {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        start_recovery(self, ctx);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.see(Seen::Stopped { pid: self.pid() });
    }
}

impl PersistentActor for Probe {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

impl EventSourced for Probe {
    type Event = Evt;

    fn apply(&mut self, event: &Evt) {
        self.applied.push(event.clone());
    }

    fn tags(&self, event: &Evt) -> Vec<String> {
        match event {
            Evt::PanickingTags(_) => panic!("these tags explode"),
            _ => Vec::new(),
        }
    }

    fn on_recovery_completed(&mut self, last_seq_nr: u64, _: &mut Context<Self>) {
        self.see(Seen::Recovered {
            pid: self.pid(),
            last_seq_nr,
            replayed: self.applied.clone(),
        });
    }

    fn on_recovery_failure(&mut self, cause: &RecoveryError, _: &mut Context<Self>) {
        self.see(Seen::RecoveryFailed {
            pid: self.pid(),
            error: cause.to_string(),
        });
    }

    fn snapshotting() -> Option<Snapshotting<Self>> {
        Some(Snapshotting::json(
            |probe: &Self| probe.applied.clone(),
            |probe, applied| probe.applied = applied,
        ))
    }

    fn on_snapshot_saved(&mut self, metadata: &SnapshotMetadata, _: &mut Context<Self>) {
        self.see(Seen::SnapshotSaved {
            pid: self.pid(),
            seq_nr: metadata.seq_nr,
        });
    }

    fn on_snapshot_failure(&mut self, cause: &SnapshotError, _: &mut Context<Self>) {
        self.see(Seen::SnapshotFailed {
            pid: self.pid(),
            error: cause.to_string(),
        });
    }

    fn on_events_deleted(&mut self, to_seq_nr: u64, _: &mut Context<Self>) {
        self.see(Seen::EventsDeleted {
            pid: self.pid(),
            to_seq_nr,
        });
    }

    fn on_delete_failure(&mut self, cause: &DeleteError, _: &mut Context<Self>) {
        self.see(Seen::DeleteFailed {
            pid: self.pid(),
            error: cause.to_string(),
        });
    }

    fn on_persist_rejected(&mut self, cause: &WriteRejection, _: &mut Context<Self>) {
        self.see(Seen::Rejected {
            pid: self.pid(),
            seq_nr: cause.seq_nr,
        });
    }

    fn on_persist_failure(&mut self, _: &JournalError, _: &mut Context<Self>) {
        self.see(Seen::Failed { pid: self.pid() });
    }
}

/// One `persist` per event, in order. Replies with the last continuation's seq_nr.
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
pub struct Persist(pub Vec<Evt>);

/// One `persist_all` of all events.
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
pub struct PersistAll(pub Vec<Evt>);

/// `persist` of each event, then `defer` with a tag.
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
pub struct PersistThenDefer(pub Vec<Evt>, pub String);

/// Stop the actor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stop;

/// Save a snapshot now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SaveSnapshot;

/// Delete events up to a sequence number.
#[derive(Message)]
#[rtype(result = "()")]
pub struct DeleteEventsTo(pub u64);

/// Note a number without persisting (through `defer`, so it keeps its place behind writes).
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
pub struct Note(pub u64);

/// The events the actor applied and its last sequence number.
#[derive(Message)]
#[rtype(result = "(Vec<Evt>, u64)")]
pub struct Inspect;

impl Handler<SaveSnapshot> for Probe {
    type Result = ();

    fn handle(&mut self, _: SaveSnapshot, ctx: &mut Context<Self>) {
        self.save_snapshot(ctx);
    }
}

impl Handler<DeleteEventsTo> for Probe {
    type Result = ();

    fn handle(&mut self, msg: DeleteEventsTo, ctx: &mut Context<Self>) {
        self.delete_events_to(ctx, msg.0);
    }
}

impl Handler<Note> for Probe {
    type Result = PersistReply<u64>;

    fn handle(&mut self, msg: Note, ctx: &mut Context<Self>) -> Self::Result {
        let n = msg.0;
        self.defer(ctx, move |act, _| {
            act.see(Seen::Noted { pid: act.pid(), n });
            n
        })
    }
}

impl Handler<Inspect> for Probe {
    type Result = actix::MessageResult<Inspect>;

    fn handle(&mut self, _: Inspect, _: &mut Context<Self>) -> Self::Result {
        actix::MessageResult((self.applied.clone(), self.last_seq_nr()))
    }
}

/// Reports the continuation of an event stored at `seq_nr`.
fn log_handler(act: &mut Probe, event: &Evt, seq_nr: u64) -> u64 {
    act.see(Seen::Handler {
        pid: act.pid(),
        event: event.clone(),
        seq_nr,
    });
    seq_nr
}

/// Reports the continuation of `persist`: the event's sequence number is the actor's last.
fn log_persisted(act: &mut Probe, event: &Evt) -> u64 {
    let seq_nr = act.last_seq_nr();
    log_handler(act, event, seq_nr)
}

impl Probe {
    fn command_seen(&self) {
        self.see(Seen::Command {
            pid: self.pid(),
            applied: self.applied.len(),
        });
    }
}

impl Handler<Persist> for Probe {
    type Result = PersistReply<u64>;

    fn handle(&mut self, msg: Persist, ctx: &mut Context<Self>) -> Self::Result {
        self.command_seen();
        let mut last = PersistReply::ready(0);
        for event in msg.0 {
            last = self.persist(ctx, event, |act, event, _| log_persisted(act, event));
        }
        last
    }
}

impl Handler<PersistAll> for Probe {
    type Result = PersistReply<u64>;

    fn handle(&mut self, msg: PersistAll, ctx: &mut Context<Self>) -> Self::Result {
        self.command_seen();
        self.persist_all(ctx, msg.0, persist_all_continuation)
    }
}

/// Reports each event of a `persist_all`: the last one is at the actor's last seq_nr.
fn persist_all_continuation(act: &mut Probe, events: &[Evt], _: &mut Context<Probe>) -> u64 {
    let last = act.last_seq_nr();
    let first = last + 1 - events.len() as u64;
    for (seq_nr, event) in (first..).zip(events) {
        log_handler(act, event, seq_nr);
    }
    last
}

/// `persist(x)` then `persist_all(rest)` in one command (A1).
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
pub struct PersistThenAll(pub Evt, pub Vec<Evt>);

impl Handler<PersistThenAll> for Probe {
    type Result = PersistReply<u64>;

    fn handle(&mut self, msg: PersistThenAll, ctx: &mut Context<Self>) -> Self::Result {
        self.command_seen();
        self.persist(ctx, msg.0, |act, event, _| log_persisted(act, event));
        self.persist_all(ctx, msg.1, persist_all_continuation)
    }
}

impl Handler<PersistThenDefer> for Probe {
    type Result = PersistReply<u64>;

    fn handle(&mut self, msg: PersistThenDefer, ctx: &mut Context<Self>) -> Self::Result {
        self.command_seen();
        for event in msg.0 {
            self.persist(ctx, event, |act, event, _| log_persisted(act, event));
        }
        let tag = msg.1;
        self.defer(ctx, move |act, _| {
            act.see(Seen::Deferred {
                pid: act.pid(),
                tag,
            });
            act.applied.len() as u64
        })
    }
}

impl Handler<Stop> for Probe {
    type Result = ();

    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// The stores a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    InMemory,
    Sqlite,
    /// A fresh PostgreSQL database of the test's own (needs `DATABASE_URL`).
    Postgres,
}

/// Runs each named `async fn(Backend)` test on every backend, as `<name>::in_memory` and
/// `<name>::sqlite`.
#[macro_export]
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[actix::test]
            async fn in_memory() {
                super::$name(super::Backend::InMemory).await
            }

            #[actix::test]
            async fn sqlite() {
                super::$name(super::Backend::Sqlite).await
            }
        }
    )*};
}

/// As [`on_every_backend`], and also on PostgreSQL as `<name>::postgres` (ignored without
/// `DATABASE_URL` at build time).
#[macro_export]
macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[actix::test]
            async fn in_memory() {
                super::$name(super::Backend::InMemory).await
            }

            #[actix::test]
            async fn sqlite() {
                super::$name(super::Backend::Sqlite).await
            }

            #[actix::test]
            #[cfg_attr(
                not(has_database_url),
                ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
            )]
            async fn postgres() {
                super::$name(super::Backend::Postgres).await
            }
        }
    )*};
}

/// A journal over a controlled store, and what tests need around it.
pub struct Harness {
    pub journal: Addr<JournalActor>,
    pub control: WriteController,
    pub snapshots: Arc<dyn SnapshotStore>,
    pub groups: NonZeroUsize,
    pub log_tx: mpsc::UnboundedSender<Seen>,
    pub log: mpsc::UnboundedReceiver<Seen>,
    /// Keeps a SQLite file or a PostgreSQL test database alive as long as the harness.
    _keep: Option<Box<dyn std::any::Any>>,
}

impl Harness {
    /// A harness over in-memory stores.
    pub fn new(groups: usize) -> Self {
        Self::over(
            groups,
            InMemoryJournal::new(),
            Arc::new(InMemorySnapshotStore::new()),
            None,
        )
    }

    /// A harness over the stores of `backend` (a fresh SQLite file for [`Backend::Sqlite`]).
    pub async fn on(backend: Backend, groups: usize) -> Self {
        match backend {
            Backend::InMemory => Self::new(groups),
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("sqlite:{}", dir.path().join("journal.db").display());
                let journal = SqliteJournal::connect(&SqliteJournalOptions::new(url))
                    .await
                    .expect("open SQLite");
                let snapshots = Arc::new(journal.snapshot_store());
                Self::over(groups, journal, snapshots, Some(Box::new(dir)))
            }
            Backend::Postgres => {
                let db = actix_persistence_sql::test_util::TestDatabase::create()
                    .await
                    .expect("DATABASE_URL names the PostgreSQL server of the tests");
                let journal = actix_persistence::PostgresJournal::connect(
                    &actix_persistence::PostgresJournalOptions::new(db.url()),
                )
                .await
                .expect("connect to the test database");
                let snapshots = Arc::new(journal.snapshot_store());
                Self::over(groups, journal, snapshots, Some(Box::new(db)))
            }
        }
    }

    fn over(
        groups: usize,
        store: impl JournalStore,
        snapshots: Arc<dyn SnapshotStore>,
        keep: Option<Box<dyn std::any::Any>>,
    ) -> Self {
        let groups = NonZeroUsize::new(groups).expect("a test uses at least one group");
        let (store, control) = ControlledJournal::over(store);
        let journal = JournalActor::start_with(
            Arc::new(store),
            JournalConfig {
                write_reply_ordering_groups: groups,
                call_timeout: Duration::from_secs(30),
                ..JournalConfig::default()
            },
        );
        let (log_tx, log) = mpsc::unbounded_channel();
        Harness {
            journal,
            control,
            snapshots,
            groups,
            log_tx,
            log,
            _keep: keep,
        }
    }

    /// Starts a probe whose incarnation routes to `group`, and waits until it recovered.
    pub async fn probe_in_group(&mut self, pid: &str, group: usize) -> Addr<Probe> {
        self.probe_with(pid, group, |state| state).await
    }

    /// Starts a probe whose state `configure` adjusted, and waits until it recovered.
    pub async fn probe_with(
        &mut self,
        pid: &str,
        group: usize,
        configure: impl FnOnce(PersistenceState<Probe>) -> PersistenceState<Probe>,
    ) -> Addr<Probe> {
        let addr = self.start_probe(pid, group, configure);
        match self.next_seen().await {
            Seen::Recovered { pid: p, .. } if p == pid => addr,
            other => panic!("expected {pid} to recover first, saw {other:?}"),
        }
    }

    /// Starts a probe without waiting for its recovery.
    pub fn start_probe(
        &self,
        pid: &str,
        group: usize,
        configure: impl FnOnce(PersistenceState<Probe>) -> PersistenceState<Probe>,
    ) -> Addr<Probe> {
        let persistence = persistence_state_in_group(&self.journal, pid, group, self.groups)
            .expect("valid persistence id");
        self.probe(configure(persistence)).start()
    }

    /// A probe value (not started) over `persistence`, reporting to this harness.
    pub fn probe(&self, persistence: PersistenceState<Probe>) -> Probe {
        Probe {
            persistence,
            applied: Vec::new(),
            log: self.log_tx.clone(),
        }
    }

    /// The next thing any probe saw (fails the test after 10 s instead of hanging).
    pub async fn next_seen(&mut self) -> Seen {
        match tokio::time::timeout(Duration::from_secs(10), self.log.recv()).await {
            Ok(Some(seen)) => seen,
            Ok(None) => panic!("every probe is gone"),
            Err(_) => panic!("no probe reported anything within 10 s"),
        }
    }

    /// The next `n` things probes saw.
    pub async fn next_seen_n(&mut self, n: usize) -> Vec<Seen> {
        let mut seen = Vec::with_capacity(n);
        for _ in 0..n {
            seen.push(self.next_seen().await);
        }
        seen
    }

    /// Everything probes saw up to and including the first that `until` accepts.
    pub async fn seen_until(&mut self, until: impl Fn(&Seen) -> bool) -> Vec<Seen> {
        let mut seen = Vec::new();
        loop {
            let next = self.next_seen().await;
            let done = until(&next);
            seen.push(next);
            if done {
                return seen;
            }
        }
    }

    /// Everything probes reported so far, without waiting.
    pub fn seen_so_far(&mut self) -> Vec<Seen> {
        let mut seen = Vec::new();
        while let Ok(s) = self.log.try_recv() {
            seen.push(s);
        }
        seen
    }
}

/// Lets every task that is ready run to its next await point, by a round trip through a fresh
/// actor's mailbox queued behind them (the arbiter runs tasks in the order they were woken).
pub async fn settle() {
    struct Echo;
    impl Actor for Echo {
        type Context = Context<Self>;
    }
    #[derive(Message)]
    #[rtype(result = "()")]
    struct Ping;
    impl Handler<Ping> for Echo {
        type Result = ();
        fn handle(&mut self, _: Ping, _: &mut Context<Self>) {}
    }
    let echo = Echo.start();
    for _ in 0..3 {
        let _ = echo.send(Ping).await;
    }
}

pub fn handler(pid: &str, event: &str, seq_nr: u64) -> Seen {
    Seen::Handler {
        pid: pid.to_owned(),
        event: named(event),
        seq_nr,
    }
}

pub fn command(pid: &str, applied: usize) -> Seen {
    Seen::Command {
        pid: pid.to_owned(),
        applied,
    }
}
