//! Helpers shared by `adversarial_journal.rs` and `adversarial_read_side.rs`: one persistent
//! actor (`Acct`), and the three stores (in memory, a SQLite file, a PostgreSQL database of its
//! own) opened through the facade as a "process" that can be restarted (a new `Persistence`
//! over the same database).

// Each test file is a crate of its own and uses only some of these.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use actix_persistence::actix::{Context, Handler, MessageResult};
use actix_persistence::snapshot::{InMemorySnapshotStore, SnapshotMetadata};
use actix_persistence::{
    DeleteError, EventSourced, InMemoryJournal, JournalError, Message, PersistReply, PersistResult,
    Persistence, PersistenceState, PersistentActor, RecoveryError, Settings, Snapshotting,
    WriteRejection,
};
use actix_persistence_sql::test_util::TestDatabase;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// A hang detector only: nothing is ordered by time.
pub const HANG: Duration = Duration::from_secs(30);

/// `f`, failing the test if it has not finished within [`HANG`].
pub async fn within<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(HANG, f)
        .await
        .unwrap_or_else(|_| panic!("hang: {what} did not finish within {HANG:?}"))
}

/// The store a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    InMemory,
    Sqlite,
    /// A fresh PostgreSQL database of the test's own (needs `DATABASE_URL`).
    Postgres,
}

/// Runs each named `async fn(Kind)` test on every store, as `<name>::in_memory`,
/// `<name>::sqlite` and `<name>::postgres` (ignored without `DATABASE_URL` at build time).
#[macro_export]
macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[actix::test]
            async fn in_memory() {
                super::$name($crate::adversarial::Kind::InMemory).await
            }

            #[actix::test]
            async fn sqlite() {
                super::$name($crate::adversarial::Kind::Sqlite).await
            }

            #[actix::test]
            #[cfg_attr(
                not(has_database_url),
                ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
            )]
            async fn postgres() {
                super::$name($crate::adversarial::Kind::Postgres).await
            }
        }
    )*};
}

/// As [`on_every_store`], for `fn(Kind)` tests that run their own Actix systems (a "process"
/// crashes by dropping its system).
#[macro_export]
macro_rules! on_every_store_in_own_systems {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn in_memory() {
                super::$name($crate::adversarial::Kind::InMemory)
            }

            #[test]
            fn sqlite() {
                super::$name($crate::adversarial::Kind::Sqlite)
            }

            #[test]
            #[cfg_attr(
                not(has_database_url),
                ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
            )]
            fn postgres() {
                super::$name($crate::adversarial::Kind::Postgres)
            }
        }
    )*};
}

/// One database, opened as many times as the test restarts its "process".
pub struct Backend {
    pub kind: Kind,
    inmem: Option<(InMemoryJournal, InMemorySnapshotStore)>,
    pub dir: Option<tempfile::TempDir>,
    pub pg: Option<TestDatabase>,
    /// Extra `ACTIX_PERSISTENCE__*` variables of every open.
    pub env: Vec<(String, String)>,
}

impl Backend {
    /// A fresh database of `kind`.
    ///
    /// # Panics
    ///
    /// For PostgreSQL without `DATABASE_URL` (those tests are ignored then).
    pub async fn new(kind: Kind) -> Backend {
        let mut backend = Backend {
            kind,
            inmem: None,
            dir: None,
            pg: None,
            env: Vec::new(),
        };
        match kind {
            Kind::InMemory => {
                backend.inmem = Some((InMemoryJournal::new(), InMemorySnapshotStore::new()))
            }
            Kind::Sqlite => backend.dir = Some(tempfile::tempdir().expect("temp dir")),
            Kind::Postgres => {
                backend.pg = Some(
                    TestDatabase::create()
                        .await
                        .expect("DATABASE_URL names the PostgreSQL server of the tests"),
                )
            }
        }
        backend
    }

    pub fn with_env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// The in-memory journal of an in-memory backend (shared by every open), to seed or read
    /// it behind the journal actor's back.
    pub fn inmem_journal(&self) -> Option<InMemoryJournal> {
        self.inmem.as_ref().map(|(journal, _)| journal.clone())
    }

    pub fn sqlite_url(&self) -> String {
        let dir = self.dir.as_ref().expect("a SQLite backend");
        format!("sqlite:{}", dir.path().join("journal.db").display())
    }

    pub fn pg_url(&self) -> String {
        self.pg
            .as_ref()
            .expect("a PostgreSQL backend")
            .url()
            .to_owned()
    }

    pub fn settings(&self) -> Settings {
        let mut env: Vec<(String, String)> = match self.kind {
            Kind::InMemory => vec![("ACTIX_PERSISTENCE__JOURNAL__PLUGIN".into(), "inmem".into())],
            Kind::Sqlite => vec![
                ("ACTIX_PERSISTENCE__JOURNAL__PLUGIN".into(), "sqlite".into()),
                (
                    "ACTIX_PERSISTENCE__JOURNAL__SQLITE__URL".into(),
                    self.sqlite_url(),
                ),
            ],
            Kind::Postgres => vec![
                (
                    "ACTIX_PERSISTENCE__JOURNAL__PLUGIN".into(),
                    "postgres".into(),
                ),
                (
                    "ACTIX_PERSISTENCE__JOURNAL__POSTGRES__URL".into(),
                    self.pg_url(),
                ),
                (
                    "ACTIX_PERSISTENCE__JOURNAL__POSTGRES__MAX_CONNECTIONS".into(),
                    "6".into(),
                ),
            ],
        };
        env.extend(self.env.iter().cloned());
        Settings::loader()
            .env_vars(env)
            .load()
            .expect("valid settings")
    }

    /// A new "process" over the same database.
    pub async fn open(&self) -> Persistence {
        match &self.inmem {
            Some((journal, snapshots)) => Persistence::start_with_stores(
                self.settings(),
                Arc::new(journal.clone()),
                Arc::new(snapshots.clone()),
            )
            .expect("start persistence")
            .with_query_store(Arc::new(journal.clone())),
            None => Persistence::start_with(self.settings())
                .await
                .expect("start persistence"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The actor

/// The event: an amount, with the tags it is stored under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Added {
    pub amount: i64,
    pub tags: Vec<String>,
}

/// The state, and its snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct AcctState {
    pub total: i64,
    /// (seq_nr, amount) of every event applied, in order.
    pub applied: Vec<(u64, i64)>,
}

/// What an `Acct` reports through its hooks, in order.
#[derive(Debug, Clone)]
pub enum Note {
    Recovered(u64),
    RecoveryFailed(RecoveryError),
    SnapshotSaved(u64),
    SnapshotFailed(String),
    Deleted(u64),
    DeleteFailed(String),
    Rejected(String),
    PersistFailed(JournalError),
}

// The errors carried are not `PartialEq`: notes compare by their debug form.
impl PartialEq for Note {
    fn eq(&self, other: &Note) -> bool {
        format!("{self:?}") == format!("{other:?}")
    }
}

/// An account that sums amounts; it reports every hook as a [`Note`].
pub struct Acct {
    pub persistence: PersistenceState<Self>,
    pub state: AcctState,
    pub notes: mpsc::UnboundedSender<Note>,
}

impl actix::Actor for Acct {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        // Room for every command a test pipelines: past Actix's default capacity (16) a
        // `send` holds its message back until the mailbox drains, so a command sent later
        // could reach the actor before it.
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        actix_persistence::start_recovery(self, ctx);
    }
}

/// The most commands a test sends an `Acct` ahead of its replies.
const MAILBOX_CAPACITY: usize = 256;

impl PersistentActor for Acct {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

impl EventSourced for Acct {
    type Event = Added;
    fn apply(&mut self, event: &Added) {
        let seq = self.last_seq_nr();
        self.state.total += event.amount;
        self.state.applied.push((seq, event.amount));
    }
    fn tags(&self, event: &Added) -> Vec<String> {
        event.tags.clone()
    }
    fn snapshotting() -> Option<Snapshotting<Self>> {
        Some(Snapshotting::json(
            |a: &Self| a.state.clone(),
            |a: &mut Self, s: AcctState| a.state = s,
        ))
    }
    fn on_snapshot_saved(&mut self, m: &SnapshotMetadata, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::SnapshotSaved(m.seq_nr));
    }
    fn on_snapshot_failure(
        &mut self,
        cause: &actix_persistence::snapshot::SnapshotError,
        _: &mut Context<Self>,
    ) {
        let _ = self.notes.send(Note::SnapshotFailed(cause.to_string()));
    }
    fn on_events_deleted(&mut self, to: u64, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::Deleted(to));
    }
    fn on_delete_failure(&mut self, cause: &DeleteError, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::DeleteFailed(cause.to_string()));
    }
    fn on_recovery_completed(&mut self, last: u64, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::Recovered(last));
    }
    fn on_recovery_failure(&mut self, cause: &RecoveryError, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::RecoveryFailed(cause.clone()));
    }
    fn on_persist_rejected(&mut self, cause: &WriteRejection, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::Rejected(cause.to_string()));
    }
    fn on_persist_failure(&mut self, cause: &JournalError, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::PersistFailed(cause.clone()));
    }
}

/// Persist one event per amount (one atomic write each); replies (last seq_nr, total).
#[derive(Message)]
#[rtype(result = "PersistResult<(u64, i64)>")]
pub struct Add(pub Vec<i64>, pub Vec<String>);

impl Handler<Add> for Acct {
    type Result = PersistReply<(u64, i64)>;
    fn handle(&mut self, msg: Add, ctx: &mut Context<Self>) -> Self::Result {
        let mut last = PersistReply::ready((self.last_seq_nr(), self.state.total));
        for amount in msg.0 {
            last = self.persist(
                ctx,
                Added {
                    amount,
                    tags: msg.1.clone(),
                },
                |a, _, _| (a.last_seq_nr(), a.state.total),
            );
        }
        last
    }
}

/// Persist all amounts as one atomic write (one database statement: one timestamp).
#[derive(Message)]
#[rtype(result = "PersistResult<(u64, i64)>")]
pub struct AddAll(pub Vec<i64>, pub Vec<String>);

impl Handler<AddAll> for Acct {
    type Result = PersistReply<(u64, i64)>;
    fn handle(&mut self, msg: AddAll, ctx: &mut Context<Self>) -> Self::Result {
        let tags = msg.1;
        let events = msg
            .0
            .into_iter()
            .map(|amount| Added {
                amount,
                tags: tags.clone(),
            })
            .collect();
        self.persist_all(ctx, events, |a, _, _| (a.last_seq_nr(), a.state.total))
    }
}

/// Save a snapshot of the state now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Snap;
impl Handler<Snap> for Acct {
    type Result = ();
    fn handle(&mut self, _: Snap, ctx: &mut Context<Self>) {
        self.save_snapshot(ctx);
    }
}

/// Delete the events up to a sequence number.
#[derive(Message)]
#[rtype(result = "()")]
pub struct DeleteTo(pub u64);
impl Handler<DeleteTo> for Acct {
    type Result = ();
    fn handle(&mut self, msg: DeleteTo, ctx: &mut Context<Self>) {
        self.delete_events_to(ctx, msg.0);
    }
}

/// (last_seq_nr, state)
#[derive(Message)]
#[rtype(result = "(u64, AcctState)")]
pub struct Get;
impl Handler<Get> for Acct {
    type Result = MessageResult<Get>;
    fn handle(&mut self, _: Get, _: &mut Context<Self>) -> Self::Result {
        MessageResult((self.last_seq_nr(), self.state.clone()))
    }
}

/// A started `Acct`: its address, its notes and its stop reason.
pub struct Started {
    pub addr: actix::Addr<Acct>,
    pub notes: mpsc::UnboundedReceiver<Note>,
    pub stopped: tokio::sync::oneshot::Receiver<actix_persistence::StopReason>,
}

impl Started {
    pub async fn note(&mut self) -> Note {
        within("a note of the actor", self.notes.recv())
            .await
            .expect("the actor dropped its note sender")
    }

    pub async fn add(&self, amounts: &[i64]) -> PersistResult<(u64, i64)> {
        within("Add", self.addr.send(Add(amounts.to_vec(), vec![])))
            .await
            .expect("mailbox")
    }

    pub async fn get(&self) -> (u64, AcctState) {
        within("Get", self.addr.send(Get)).await.expect("mailbox")
    }
}

/// Starts an `Acct` of `pid` (it recovers at once).
pub fn start_acct(p: &Persistence, pid: &str) -> Started {
    start_acct_with(p, pid, |s| s)
}

/// Starts an `Acct` of `pid` with its persistence state changed by `f`.
pub fn start_acct_with(
    p: &Persistence,
    pid: &str,
    f: impl FnOnce(PersistenceState<Acct>) -> PersistenceState<Acct>,
) -> Started {
    use actix::Actor;
    let (tx, rx) = mpsc::unbounded_channel();
    let mut state = f(p.state(pid).expect("valid id"));
    let stopped = state.watch_stop();
    let addr = Acct {
        persistence: state,
        state: AcctState::default(),
        notes: tx,
    }
    .start();
    Started {
        addr,
        notes: rx,
        stopped,
    }
}

/// Shuts `p` down (`graceful`), or drops it without a shutdown, as a crash of its process
/// leaves the database.
pub async fn close(p: Persistence, graceful: bool) {
    if graceful {
        within("shutdown", p.shutdown()).await;
    } else {
        drop(p);
    }
}

/// The sequence numbers stored for `pid` from `from` to `to`, read by a query.
pub async fn stored_seq_nrs(p: &Persistence, pid: &str, from: u64, to: u64) -> Vec<u64> {
    use futures::StreamExt;
    let query = p.query().expect("a query store");
    within(
        "current_events_by_persistence_id",
        query
            .current_events_by_persistence_id(pid, from, to)
            .map(|e| e.expect("envelope").seq_nr)
            .collect::<Vec<_>>(),
    )
    .await
}
