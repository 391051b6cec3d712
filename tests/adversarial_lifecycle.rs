//! Lifecycle, shutdown, supervision and resource limits of persistent actors and the journal,
//! replayed from bug reports of Akka Persistence (recovery permits leaked by actors that stop
//! or fail while recovering, `BackoffSupervisor` restart storms, the journal shut down under
//! in-flight writes), on the in-memory store, SQLite and PostgreSQL.
//!
//! Nothing is ordered by time: recoveries are held at their ownership take by a gate of the
//! test's own store wrapper, writes by the testkit's `ControlledJournal`; `within` only
//! detects hangs.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_persistence::actix::{Actor, Addr, Arbiter, Context, Handler};
use actix_persistence::journal::{CircuitBreakerConfig, JournalActor, JournalConfig};
use actix_persistence::snapshot::InMemorySnapshotStore;
use actix_persistence::{
    start_recovery, AtomicWrite, AtomicWriteResult, Backoff, BackoffSupervisor, EventSourced,
    InMemoryJournal, JournalError, JournalStore, Message, Ownership, PersistReply, PersistResult,
    Persistence, PersistenceState, PersistentActor, PersistentRepr, PostgresJournal,
    PostgresJournalOptions, RecoveryError, RecoveryPermits, ReplayStream, Settings, SqliteJournal,
    SqliteJournalOptions, StopReason,
};
use actix_persistence_sql::test_util::TestDatabase;
use actix_persistence_testkit::ControlledJournal;
use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot, Semaphore};

/// A hang detector only.
const HANG: Duration = Duration::from_secs(30);

async fn within<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(HANG, f)
        .await
        .unwrap_or_else(|_| panic!("hang: {what} did not finish within {HANG:?}"))
}

// ---------------------------------------------------------------------------------------------
// The stores

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    InMemory,
    Sqlite,
    Postgres,
}

macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[actix::test]
            async fn in_memory() {
                super::$name(super::Kind::InMemory).await
            }

            #[actix::test]
            async fn sqlite() {
                super::$name(super::Kind::Sqlite).await
            }

            #[actix::test]
            #[cfg_attr(
                not(has_database_url),
                ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
            )]
            async fn postgres() {
                super::$name(super::Kind::Postgres).await
            }
        }
    )*};
}

/// A store of `kind` and a way to count its connections in use (0 for the in-memory one).
struct Db {
    store: Arc<dyn JournalStore>,
    in_use: Box<dyn Fn() -> u32>,
    _dir: Option<tempfile::TempDir>,
    _pg: Option<TestDatabase>,
}

async fn open(kind: Kind) -> Db {
    match kind {
        Kind::InMemory => Db {
            store: Arc::new(InMemoryJournal::new()),
            in_use: Box::new(|| 0),
            _dir: None,
            _pg: None,
        },
        Kind::Sqlite => {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!("sqlite:{}", dir.path().join("journal.db").display());
            let journal = SqliteJournal::connect(&SqliteJournalOptions::new(url))
                .await
                .expect("open SQLite");
            let counted = journal.clone();
            Db {
                store: Arc::new(journal),
                in_use: Box::new(move || {
                    let c = counted.connections_in_use();
                    c.reads + c.writes
                }),
                _dir: Some(dir),
                _pg: None,
            }
        }
        Kind::Postgres => {
            let db = TestDatabase::create()
                .await
                .expect("DATABASE_URL names the PostgreSQL server of the tests");
            let journal = PostgresJournal::connect(&PostgresJournalOptions {
                max_connections: 4,
                ..PostgresJournalOptions::new(db.url())
            })
            .await
            .expect("connect to the test database");
            let counted = journal.clone();
            Db {
                store: Arc::new(journal),
                in_use: Box::new(move || {
                    let c = counted.connections_in_use();
                    c.reads + c.writes
                }),
                _dir: None,
                _pg: Some(db),
            }
        }
    }
}

/// Wraps a store: the ownership take of a recovery (its first store call) of a held id waits
/// until the test opens its gate, and that of a failing id fails. Every ownership take is
/// reported to the test.
struct Gated {
    inner: Arc<dyn JournalStore>,
    gates: Mutex<HashMap<String, Arc<Semaphore>>>,
    failing: Mutex<HashSet<String>>,
    takes: Mutex<HashMap<String, u64>>,
    arrivals: mpsc::UnboundedSender<String>,
}

#[derive(Debug)]
struct InjectedError;
impl std::fmt::Display for InjectedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("injected ownership failure")
    }
}
impl std::error::Error for InjectedError {}

impl Gated {
    fn new(inner: Arc<dyn JournalStore>) -> (Arc<Gated>, mpsc::UnboundedReceiver<String>) {
        let (arrivals, rx) = mpsc::unbounded_channel();
        let gated = Gated {
            inner,
            gates: Mutex::default(),
            failing: Mutex::default(),
            takes: Mutex::default(),
            arrivals,
        };
        (Arc::new(gated), rx)
    }

    fn hold(&self, pid: &str) {
        self.gates
            .lock()
            .unwrap()
            .insert(pid.to_owned(), Arc::new(Semaphore::new(0)));
    }

    fn release(&self, pid: &str) {
        if let Some(gate) = self.gates.lock().unwrap().remove(pid) {
            gate.add_permits(Semaphore::MAX_PERMITS >> 4);
        }
    }

    fn fail(&self, pid: &str, failing: bool) {
        let mut set = self.failing.lock().unwrap();
        if failing {
            set.insert(pid.to_owned());
        } else {
            set.remove(pid);
        }
    }

    fn takes(&self, pid: &str) -> u64 {
        self.takes.lock().unwrap().get(pid).copied().unwrap_or(0)
    }
}

#[async_trait]
impl JournalStore for Gated {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        self.inner.write_messages(writes).await
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.inner.replay_messages(pid, from, to, max)
    }

    fn replay_for_recovery(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.inner.replay_for_recovery(pid, from, to, max)
    }

    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        self.inner.read_highest_sequence_nr(pid, from).await
    }

    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        token: actix_persistence::FencingToken,
    ) -> Result<(), JournalError> {
        self.inner.delete_messages_to(pid, to, token).await
    }

    async fn take_ownership(&self, pid: &str) -> Result<Ownership, JournalError> {
        *self
            .takes
            .lock()
            .unwrap()
            .entry(pid.to_owned())
            .or_default() += 1;
        let _ = self.arrivals.send(pid.to_owned());
        if self.failing.lock().unwrap().contains(pid) {
            return Err(JournalError::storage("take ownership", InjectedError));
        }
        let gate = self.gates.lock().unwrap().get(pid).cloned();
        if let Some(gate) = gate {
            let _ = gate.acquire().await;
        }
        self.inner.take_ownership(pid).await
    }

    async fn read_deleted_to(&self, pid: &str) -> Result<Option<u64>, JournalError> {
        self.inner.read_deleted_to(pid).await
    }
}

/// Waits until no connection of `db` is in use (one given back is returned to its pool by a
/// task of sqlx's own, just after the reply); a connection kept forever is a hang.
async fn no_connection_in_use(db: &Db, kind: Kind) {
    within(
        &format!("{kind:?}: every connection back in its pool"),
        async {
            while (db.in_use)() != 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        },
    )
    .await
}

/// A journal whose breaker never opens in these tests (restart storms fail many calls).
fn no_breaker() -> JournalConfig {
    JournalConfig {
        circuit_breaker: CircuitBreakerConfig {
            max_failures: u32::MAX,
            reset_timeout: Duration::from_secs(1),
        },
        ..JournalConfig::default()
    }
}

/// Waits until `pid`'s ownership take reached the store (skipping other arrivals).
async fn arrived(arrivals: &mut mpsc::UnboundedReceiver<String>, pid: &str) {
    within(&format!("{pid}'s recovery reaching the store"), async {
        while let Some(seen) = arrivals.recv().await {
            if seen == pid {
                return;
            }
        }
        panic!("the store was dropped");
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// The actor

/// What an actor's hooks saw.
#[derive(Debug, Clone, PartialEq)]
enum Note {
    Recovered(u64),
    RecoveryFailed(String),
}

struct Lc {
    persistence: PersistenceState<Self>,
    total: i64,
    notes: mpsc::UnboundedSender<Note>,
}

impl Actor for Lc {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        start_recovery(self, ctx);
    }
}

impl PersistentActor for Lc {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

impl EventSourced for Lc {
    type Event = i64;
    fn apply(&mut self, event: &i64) {
        if *event == i64::MIN {
            panic!("apply exploded at {}", self.last_seq_nr());
        }
        self.total += event;
    }
    fn on_recovery_completed(&mut self, last: u64, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::Recovered(last));
    }
    fn on_recovery_failure(&mut self, cause: &RecoveryError, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::RecoveryFailed(cause.to_string()));
    }
}

#[derive(Message)]
#[rtype(result = "PersistResult<(u64, i64)>")]
struct Add(i64);

impl Handler<Add> for Lc {
    type Result = PersistReply<(u64, i64)>;
    fn handle(&mut self, msg: Add, ctx: &mut Context<Self>) -> Self::Result {
        self.persist(ctx, msg.0, |a, _, _| (a.last_seq_nr(), a.total))
    }
}

#[derive(Message)]
#[rtype(result = "PersistResult<i64>")]
struct Total;

impl Handler<Total> for Lc {
    type Result = PersistReply<i64>;
    fn handle(&mut self, _: Total, _: &mut Context<Self>) -> Self::Result {
        PersistReply::ready(self.total)
    }
}

/// A started actor: its address, its notes, its stop reason.
struct Started {
    addr: Addr<Lc>,
    notes: mpsc::UnboundedReceiver<Note>,
    stopped: futures::future::LocalBoxFuture<'static, Option<StopReason>>,
}

fn stop_watch(
    rx: oneshot::Receiver<StopReason>,
) -> futures::future::LocalBoxFuture<'static, Option<StopReason>> {
    Box::pin(async move { rx.await.ok() })
}

impl Started {
    async fn note(&mut self) -> Note {
        within("a recovery note", self.notes.recv())
            .await
            .expect("the actor reports before it stops")
    }

    async fn stop_reason(self) -> StopReason {
        within("the stop", self.stopped)
            .await
            .expect("a stop reason")
    }
}

fn lc(state: PersistenceState<Lc>) -> (Lc, Started0) {
    let (notes_tx, notes) = mpsc::unbounded_channel();
    let mut state = state;
    let stopped = state.watch_stop();
    (
        Lc {
            persistence: state,
            total: 0,
            notes: notes_tx,
        },
        Started0 { notes, stopped },
    )
}

struct Started0 {
    notes: mpsc::UnboundedReceiver<Note>,
    stopped: oneshot::Receiver<StopReason>,
}

fn state(
    journal: &Addr<JournalActor>,
    pid: &str,
    permits: &RecoveryPermits,
) -> PersistenceState<Lc> {
    PersistenceState::new(journal.clone(), pid)
        .expect("valid id")
        .with_recovery_permits(permits.clone())
}

/// Starts an actor on the current arbiter.
fn start_here(journal: &Addr<JournalActor>, pid: &str, permits: &RecoveryPermits) -> Started {
    let (actor, s) = lc(state(journal, pid, permits));
    Started {
        addr: actor.start(),
        notes: s.notes,
        stopped: stop_watch(s.stopped),
    }
}

/// Starts an actor on an arbiter of its own (stopped by the test).
/// Starts the actor on an arbiter of its own and returns once it is built there (so that
/// stopping the arbiter stops an actor, not one that was never made).
async fn start_on_own_arbiter(
    journal: &Addr<JournalActor>,
    pid: &str,
    permits: &RecoveryPermits,
) -> (Arbiter, Started) {
    let arbiter = Arbiter::new();
    let (notes_tx, notes) = mpsc::unbounded_channel();
    let (stopped_tx, stopped) = oneshot::channel();
    let (journal, pid, permits) = (journal.clone(), pid.to_owned(), permits.clone());
    let addr = Lc::start_in_arbiter(&arbiter.handle(), move |_| {
        let mut persistence = state(&journal, &pid, &permits);
        let _ = stopped_tx.send(persistence.watch_stop());
        Lc {
            persistence,
            total: 0,
            notes: notes_tx,
        }
    });
    let stopped = stop_watch(within("the actor built", stopped).await.expect("built"));
    (
        arbiter,
        Started {
            addr,
            notes,
            stopped,
        },
    )
}

fn repr(pid: &str, seq_nr: u64, payload: Vec<u8>) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload,
        serializer_id: actix_persistence::serialization::JSON_SERIALIZER_ID,
        manifest: String::new(),
        writer_uuid: "seed".into(),
        timestamp: 1,
        tags: Default::default(),
    }
}

async fn seed(store: &dyn JournalStore, pid: &str, payloads: &[&[u8]]) {
    let writes = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| AtomicWrite::new(vec![repr(pid, i as u64 + 1, p.to_vec())]).expect("shape"))
        .collect();
    let results = store.write_messages(writes).await.expect("stored");
    assert!(results.iter().all(Result::is_ok));
}

// ---------------------------------------------------------------------------------------------
// Recovery permits

/// akka/akka#21405, #23000-era reports on `RecoveryPermitter` ("max-concurrent-recoveries"):
/// a persistent actor stopped while it waits for a recovery permit, or while it holds one
/// (its recovery blocked in the store), must give the permit back, or the next actors wait
/// forever. With 2 permits: A and B hold them (held in the store), C and D wait; A's and C's
/// arbiters are stopped. D gets A's permit and recovers, B recovers once released, both
/// permits are free again, and 3 more actors recover.
async fn permits_come_back_from_actors_stopped_while_waiting_or_holding(kind: Kind) {
    let db = open(kind).await;
    let (gated, mut arrivals) = Gated::new(Arc::clone(&db.store));
    let journal = JournalActor::start_with(gated.clone(), JournalConfig::default());
    let permits = RecoveryPermits::new(2);
    gated.hold("Lc|a");
    gated.hold("Lc|b");
    let (arbiter_a, a) = start_on_own_arbiter(&journal, "Lc|a", &permits).await;
    arrived(&mut arrivals, "Lc|a").await;
    let (_arbiter_b, mut b) = start_on_own_arbiter(&journal, "Lc|b", &permits).await;
    arrived(&mut arrivals, "Lc|b").await;
    assert_eq!(permits.available(), 0, "A and B hold both permits");
    let (arbiter_c, c) = start_on_own_arbiter(&journal, "Lc|c", &permits).await;
    let (_arbiter_d, mut d) = start_on_own_arbiter(&journal, "Lc|d", &permits).await;

    arbiter_c.stop();
    assert_eq!(c.stop_reason().await, StopReason::Normal);
    assert_eq!(gated.takes("Lc|c"), 0, "C never got a permit");
    arbiter_a.stop();
    assert_eq!(a.stop_reason().await, StopReason::Normal);

    // A's permit goes to D (C, stopped, gave up its place in the queue). A command's answer
    // comes after the recovery ended (and dropped its permit).
    assert_eq!(d.note().await, Note::Recovered(0), "{kind:?}");
    assert_eq!(
        within("total", d.addr.send(Total))
            .await
            .expect("mailbox")
            .expect("ready"),
        0
    );
    assert_eq!(permits.available(), 1, "{kind:?}: D's permit is back");
    gated.release("Lc|b");
    assert_eq!(b.note().await, Note::Recovered(0), "{kind:?}");
    assert_eq!(
        within("total", b.addr.send(Total))
            .await
            .expect("mailbox")
            .expect("ready"),
        0
    );
    assert_eq!(permits.available(), 2, "{kind:?}: every permit is back");

    let mut more: Vec<Started> = (0..3)
        .map(|i| start_here(&journal, &format!("Lc|more-{i}"), &permits))
        .collect();
    for started in &mut more {
        assert_eq!(started.note().await, Note::Recovered(0), "{kind:?}");
        let total = within("total", started.addr.send(Total)).await;
        assert_eq!(total.expect("mailbox").expect("ready"), 0);
    }
    assert_eq!(permits.available(), 2, "{kind:?}");
    assert_eq!(
        within("a command to D", d.addr.send(Add(5)))
            .await
            .expect("mailbox")
            .expect("stored"),
        (1, 5)
    );
    no_connection_in_use(&db, kind).await;
}

/// Akka: a recovery that fails (journal error, an event that cannot be read, a panic in the
/// event handler, akka/akka#18850 and the RecoveryPermitter's `ReturnRecoveryPermit` on
/// failure) must return its permit. With 1 permit, five actors in a row fail their recovery
/// in different ways; then two good ones recover, one after the other, and the permit is free.
async fn permits_come_back_from_failed_and_panicking_recoveries(kind: Kind) {
    let db = open(kind).await;
    let (gated, _arrivals) = Gated::new(Arc::clone(&db.store));
    seed(&*db.store, "Lc|unreadable", &[b"1", b"{not json"]).await;
    seed(
        &*db.store,
        "Lc|panics",
        &[b"1", format!("{}", i64::MIN).as_bytes()],
    )
    .await;
    seed(&*db.store, "Lc|good", &[b"2", b"3"]).await;
    gated.fail("Lc|store-fails", true);
    let journal = JournalActor::start_with(gated.clone(), JournalConfig::default());
    let permits = RecoveryPermits::new(1);

    let mut failing: Vec<Started> = ["Lc|unreadable", "Lc|panics", "Lc|store-fails"]
        .iter()
        .chain(["Lc|unreadable", "Lc|panics"].iter())
        .map(|pid| start_here(&journal, pid, &permits))
        .collect();
    let mut good = start_here(&journal, "Lc|good", &permits);
    let mut fresh = start_here(&journal, "Lc|fresh", &permits);
    for started in &mut failing {
        let note = started.note().await;
        assert!(
            matches!(note, Note::RecoveryFailed(_)),
            "{kind:?}: {note:?}"
        );
    }
    for started in failing {
        assert_eq!(started.stop_reason().await, StopReason::RecoveryFailure);
    }
    assert_eq!(good.note().await, Note::Recovered(2), "{kind:?}");
    assert_eq!(fresh.note().await, Note::Recovered(0), "{kind:?}");
    let total = within("total", fresh.addr.send(Total)).await;
    assert_eq!(total.expect("mailbox").expect("ready"), 0);
    assert_eq!(
        within("total", good.addr.send(Total))
            .await
            .expect("mailbox")
            .expect("ready"),
        5
    );
    assert_eq!(permits.available(), 1, "{kind:?}: the permit is back");
    no_connection_in_use(&db, kind).await;
}

on_every_store!(
    permits_come_back_from_actors_stopped_while_waiting_or_holding,
    permits_come_back_from_failed_and_panicking_recoveries,
);

// ---------------------------------------------------------------------------------------------
// BackoffSupervisor

fn quick_backoff() -> Backoff {
    Backoff {
        min: Duration::from_millis(1),
        max: Duration::from_millis(4),
        random_factor: 0.0,
        reset_after: Duration::from_secs(3600),
    }
}

/// akka/akka#25012 / #22893-style restart storms: a `BackoffSupervisor` over an actor whose
/// recovery always fails restarts it again and again. Each restart must give its recovery
/// permit and its connections back: with 1 permit, other actors still recover meanwhile, and
/// once the store heals the supervised actor recovers, takes commands kept meanwhile, and the
/// permit and every connection are free.
async fn a_restart_storm_of_failing_recoveries_leaks_no_permit_nor_connection(kind: Kind) {
    let db = open(kind).await;
    let (gated, mut arrivals) = Gated::new(Arc::clone(&db.store));
    gated.fail("Lc|storm", true);
    let journal = JournalActor::start_with(gated.clone(), no_breaker());
    let permits = RecoveryPermits::new(1);
    let (j, p) = (journal.clone(), permits.clone());
    let supervisor =
        BackoffSupervisor::new(quick_backoff(), move || lc(state(&j, "Lc|storm", &p)).0).start();
    for _ in 0..25 {
        arrived(&mut arrivals, "Lc|storm").await;
    }
    // Meanwhile other actors recover through the one permit.
    for i in 0..5 {
        let mut other = start_here(&journal, &format!("Lc|other-{i}"), &permits);
        assert_eq!(other.note().await, Note::Recovered(0), "{kind:?}");
        let total = within("total", other.addr.send(Total)).await;
        assert_eq!(total.expect("mailbox").expect("ready"), 0);
    }
    // A command sent during the storm is kept, then handled by the incarnation that recovers.
    let kept = supervisor.send(Add(7));
    gated.fail("Lc|storm", false);
    let reply = within("the kept command", kept).await.expect("mailbox");
    assert_eq!(reply.expect("stored once the store healed"), (1, 7));
    assert!(gated.takes("Lc|storm") >= 26);
    assert_eq!(permits.available(), 1, "{kind:?}: the permit is back");
    no_connection_in_use(&db, kind).await;
}

on_every_store!(a_restart_storm_of_failing_recoveries_leaks_no_permit_nor_connection);

/// akka/akka-core#24769 and PR #25435 (a maximum of restart attempts for the backoff
/// supervisor, Akka's `maxNrOfRetries`): with
/// `with_max_restarts(3)`, a child whose recovery always fails is started 4 times (the first
/// start and 3 restarts), then the supervisor stops, a kept command is answered
/// `ActorStopped`, and the permit is free.
#[actix::test]
async fn a_supervisor_with_max_restarts_stops_after_the_last_one() {
    let (gated, _arrivals) = Gated::new(Arc::new(InMemoryJournal::new()));
    gated.fail("Lc|bounded", true);
    let journal = JournalActor::start_with(gated.clone(), no_breaker());
    let permits = RecoveryPermits::new(1);
    let (j, p) = (journal.clone(), permits.clone());
    let supervisor =
        BackoffSupervisor::new(quick_backoff(), move || lc(state(&j, "Lc|bounded", &p)).0)
            .with_max_restarts(3)
            .start();
    let kept = supervisor.send(Add(1));
    let answer = within("the kept command", kept).await;
    assert!(
        matches!(
            answer,
            Ok(Err(actix_persistence::PersistError::ActorStopped))
        ),
        "{answer:?}"
    );
    within("the supervisor stopping", async {
        while supervisor.connected() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(
        gated.takes("Lc|bounded"),
        4,
        "the first start and 3 restarts"
    );
    assert_eq!(permits.available(), 1);
}

// ---------------------------------------------------------------------------------------------
// Shutdown

fn inmem_settings(extra: &[(&str, &str)]) -> Settings {
    let mut env = vec![("ACTIX_PERSISTENCE__JOURNAL__PLUGIN", "inmem")];
    env.extend_from_slice(extra);
    Settings::loader()
        .env_vars(env.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        .load()
        .expect("valid settings")
}

/// Akka `CoordinatedShutdown` losing in-flight events (akka/akka#28406, akka-persistence-jdbc
/// #171: the journal's pool closed before actors finished writing): `shutdown` called while
/// writes are held in the store returns only after they were answered, every acknowledged
/// event is stored, and a recovery held in the store (not counted as work) does not make it
/// hang.
#[actix::test]
async fn shutdown_waits_for_held_writes_and_does_not_wait_for_held_recoveries() {
    let (controlled, mut control) = ControlledJournal::new();
    let (gated, mut arrivals) = Gated::new(Arc::new(controlled));
    let p = Persistence::start_with_stores(
        inmem_settings(&[]),
        gated.clone(),
        Arc::new(InMemorySnapshotStore::new()),
    )
    .expect("start");
    let (actor, s) = lc(p.state("Lc|w1").expect("id"));
    let mut w1 = Started {
        addr: actor.start_persistent().addr().clone(),
        notes: s.notes,
        stopped: stop_watch(s.stopped),
    };
    assert_eq!(w1.note().await, Note::Recovered(0));
    let (actor, s) = lc(p.state("Lc|w2").expect("id"));
    let mut w2 = Started {
        addr: actor.start(),
        notes: s.notes,
        stopped: stop_watch(s.stopped),
    };
    assert_eq!(w2.note().await, Note::Recovered(0));
    gated.hold("Lc|held");
    let (actor, s) = lc(p.state("Lc|held").expect("id"));
    let mut held = Started {
        addr: actor.start(),
        notes: s.notes,
        stopped: stop_watch(s.stopped),
    };
    arrived(&mut arrivals, "Lc|held").await;

    let r1 = w1.addr.send(Add(1));
    let r2 = w2.addr.send(Add(2));
    let first = within("w1's write", control.next_write()).await;
    let second = within("w2's write", control.next_write()).await;
    assert!(p.work_in_flight() > 0);
    let done = Arc::new(AtomicU64::new(0));
    let (p2, d2) = (p.clone(), Arc::clone(&done));
    let shutdown = actix::spawn(async move {
        p2.shutdown().await;
        d2.store(1, Ordering::SeqCst);
    });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        done.load(Ordering::SeqCst),
        0,
        "shutdown waits for the writes"
    );
    first.complete().wait().await;
    second.complete().wait().await;
    assert_eq!(
        within("r1", r1).await.expect("mailbox").expect("stored"),
        (1, 1)
    );
    assert_eq!(
        within("r2", r2).await.expect("mailbox").expect("stored"),
        (1, 2)
    );
    within("shutdown", shutdown).await.expect("shutdown task");
    assert_eq!(p.work_in_flight(), 0);
    for pid in ["Lc|w1", "Lc|w2"] {
        assert_eq!(
            control.stored().read_highest_sequence_nr(pid, 0).await.ok(),
            Some(1),
            "{pid}: the acknowledged event is stored"
        );
    }
    // The held recovery goes on after the shutdown returned; a second shutdown returns too.
    gated.release("Lc|held");
    assert_eq!(held.note().await, Note::Recovered(0));
    within("a second shutdown", p.shutdown()).await;
}

/// A snapshot save and an event delete held in flight at `shutdown` on SQLite, through the
/// facade: shutdown returns after both, and the database holds them (akka-persistence-jdbc
/// #171). Then concurrent second shutdowns return, and later calls are typed errors.
#[actix::test]
async fn shutdown_twice_concurrently_on_sqlite_returns_and_later_calls_are_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("events.db").display());
    let settings = Settings::loader()
        .env_vars([
            (
                "ACTIX_PERSISTENCE__JOURNAL__PLUGIN".to_string(),
                "sqlite".to_string(),
            ),
            ("ACTIX_PERSISTENCE__JOURNAL__SQLITE__URL".to_string(), url),
        ])
        .load()
        .expect("settings");
    let p = Persistence::start_with(settings).await.expect("start");
    let (actor, s) = lc(p.state("Lc|s").expect("id"));
    let mut a = Started {
        addr: actor.start(),
        notes: s.notes,
        stopped: stop_watch(s.stopped),
    };
    assert_eq!(a.note().await, Note::Recovered(0));
    assert_eq!(
        a.addr.send(Add(3)).await.expect("mailbox").expect("stored"),
        (1, 3)
    );
    let (p1, p2) = (p.clone(), p.clone());
    within("two shutdowns at once", async {
        futures::join!(p1.shutdown(), p2.shutdown());
    })
    .await;
    let after = within("a write after shutdown", a.addr.send(Add(4)))
        .await
        .expect("mailbox");
    assert!(after.is_err(), "{after:?}");
    let (actor, s) = lc(p.state("Lc|late").expect("id"));
    let mut late = Started {
        addr: actor.start(),
        notes: s.notes,
        stopped: stop_watch(s.stopped),
    };
    let note = late.note().await;
    assert!(matches!(note, Note::RecoveryFailed(_)), "{note:?}");
    drop(late.addr);
}

// ---------------------------------------------------------------------------------------------
// Circuit breaker

/// Akka's journal circuit breaker (akka/akka#17961 "persistence circuit breaker stays open";
/// akka/akka#24297): failures open it, recoveries fail fast while it is open (and give their
/// permit back), and once the reset timeout passed the next recovery is the trial that closes
/// it: recoveries and persists resume.
#[actix::test]
async fn recoveries_fail_fast_while_the_breaker_is_open_and_resume_after_its_trial() {
    let (gated, _arrivals) = Gated::new(Arc::new(InMemoryJournal::new()));
    let journal = JournalActor::start_with(
        gated.clone(),
        JournalConfig {
            circuit_breaker: CircuitBreakerConfig {
                max_failures: 3,
                reset_timeout: Duration::from_millis(200),
            },
            ..JournalConfig::default()
        },
    );
    let permits = RecoveryPermits::new(1);
    for i in 0..3 {
        let pid = format!("Lc|down-{i}");
        gated.fail(&pid, true);
        let mut a = start_here(&journal, &pid, &permits);
        let note = a.note().await;
        assert!(
            matches!(&note, Note::RecoveryFailed(m) if m.contains("injected")),
            "{note:?}"
        );
    }
    // Open: a healthy id fails at once, without reaching the store.
    let mut fast = start_here(&journal, "Lc|fast", &permits);
    let note = fast.note().await;
    assert!(
        matches!(&note, Note::RecoveryFailed(m) if m.to_lowercase().contains("circuit")),
        "{note:?}"
    );
    assert_eq!(gated.takes("Lc|fast"), 0);
    assert_eq!(permits.available(), 1);
    // Past the reset timeout (the breaker reads Tokio's clock, moved here without waiting):
    // the next recovery is the trial.
    tokio::time::pause();
    tokio::time::advance(Duration::from_millis(400)).await;
    tokio::time::resume();
    let mut trial = start_here(&journal, "Lc|trial", &permits);
    assert_eq!(trial.note().await, Note::Recovered(0));
    assert_eq!(
        trial
            .addr
            .send(Add(9))
            .await
            .expect("mailbox")
            .expect("stored"),
        (1, 9)
    );
    let mut again = start_here(&journal, "Lc|fast", &permits);
    assert_eq!(again.note().await, Note::Recovered(0));
    assert_eq!(permits.available(), 1);
}
