//! Split brain replayed against the fencing of one writer per persistence id: two nodes (two
//! journal actors over two store instances, as two processes would have: two SQLite
//! connections on one file, two PostgreSQL pools on one database, two journals over one
//! in-memory store) run incarnations of the same persistence id at once, as Akka Cluster
//! Sharding does during a network partition, a rebalance or a rolling deploy.
//!
//! The bug reports these scenarios come from: two incarnations writing one persistence id
//! corrupted the journal (akka/akka-core#28093, akka/akka-core#17955, akkadotnet/akka.net#5604,
//! akkadotnet/akka.net#3455), failed with duplicate keys (akka/akka-persistence-jdbc#213,
//! scullxbones/akka-persistence-mongo#218) or left duplicate sequence numbers that stalled
//! queries (akka/akka-persistence-cassandra#430); Marten's expected-version checks missed a
//! concurrent append (JasperFx/marten#3465, #1279). `tests/fencing_incarnations.rs` covers one
//! journal with the writes under the test's control; `tests/sql_fencing_processes.rs` and
//! `tests/crash_sigkill.rs` two processes taking turns; what is new here is concurrency
//! between the nodes' own connections, and what the actor is told.

mod support;

use std::sync::Arc;
use std::time::Duration;

use actix_persistence::actix::{Actor, ActorContext, Addr, Context, Handler, Message};
use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence::snapshot::{
    InMemorySnapshotStore, SnapshotError, SnapshotMetadata, SnapshotStore,
};
use actix_persistence::{
    start_recovery, ActorFailure, AtomicWrite, AtomicWriteResult, CommandError, DeleteError,
    EventSourced, FencingToken, InMemoryJournal, JournalError, JournalStore, Ownership,
    PersistError, PersistReply, PersistResult, PersistenceState, PersistentActor, RecoveryError,
    ReplayStream, SnapshotPolicy, Snapshotting, SqliteJournal, SqliteJournalOptions, StopReason,
    MAX_SEQ_NR,
};
use actix_persistence_testkit::{ControlledJournal, WriteController};
use async_trait::async_trait;
use futures::TryStreamExt;
use support::Backend;
use tokio::sync::{mpsc, oneshot};

// ---------------------------------------------------------------------------------------------
// A persistent actor of strings, and two nodes over one store.
// ---------------------------------------------------------------------------------------------

/// What a member reported.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Recovered {
        node: usize,
        last_seq_nr: u64,
        events: Vec<String>,
        token: FencingToken,
    },
    RecoveryFailed(String),
    SnapshotSaved(u64),
    SnapshotFailed(String),
    EventsDeleted(u64),
    DeleteFailed(String),
}

struct Member {
    persistence: PersistenceState<Self>,
    node: usize,
    events: Vec<String>,
    log: mpsc::UnboundedSender<Seen>,
}

impl Actor for Member {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        start_recovery(self, ctx);
    }
}

impl PersistentActor for Member {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

impl EventSourced for Member {
    type Event = String;

    fn apply(&mut self, event: &String) {
        self.events.push(event.clone());
    }

    fn snapshotting() -> Option<Snapshotting<Self>> {
        Some(Snapshotting::json(
            |m: &Self| m.events.clone(),
            |m, events| m.events = events,
        ))
    }

    fn on_recovery_completed(&mut self, last_seq_nr: u64, _: &mut Context<Self>) {
        let _ = self.log.send(Seen::Recovered {
            node: self.node,
            last_seq_nr,
            events: self.events.clone(),
            token: self.persistence.fencing_token(),
        });
    }

    fn on_recovery_failure(&mut self, cause: &RecoveryError, _: &mut Context<Self>) {
        let _ = self.log.send(Seen::RecoveryFailed(cause.to_string()));
    }

    fn on_snapshot_saved(&mut self, metadata: &SnapshotMetadata, _: &mut Context<Self>) {
        let _ = self.log.send(Seen::SnapshotSaved(metadata.seq_nr));
    }

    fn on_snapshot_failure(&mut self, cause: &SnapshotError, _: &mut Context<Self>) {
        let _ = self.log.send(Seen::SnapshotFailed(cause.to_string()));
    }

    fn on_events_deleted(&mut self, to_seq_nr: u64, _: &mut Context<Self>) {
        let _ = self.log.send(Seen::EventsDeleted(to_seq_nr));
    }

    fn on_delete_failure(&mut self, cause: &DeleteError, _: &mut Context<Self>) {
        let _ = self.log.send(Seen::DeleteFailed(cause.to_string()));
    }
}

/// One `persist` per event; answers the last event's sequence number.
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct Append(Vec<String>);

impl Handler<Append> for Member {
    type Result = PersistReply<u64>;

    fn handle(&mut self, msg: Append, ctx: &mut Context<Self>) -> Self::Result {
        let mut last = PersistReply::ready(0);
        for event in msg.0 {
            last = self.persist(ctx, event, |m, _, _| m.last_seq_nr());
        }
        last
    }
}

/// One `persist_all` of every event; answers the last event's sequence number.
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct AppendAll(Vec<String>);

impl Handler<AppendAll> for Member {
    type Result = PersistReply<u64>;

    fn handle(&mut self, msg: AppendAll, ctx: &mut Context<Self>) -> Self::Result {
        self.persist_all(ctx, msg.0, |m, _, _| m.last_seq_nr())
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Snap;

impl Handler<Snap> for Member {
    type Result = ();

    fn handle(&mut self, _: Snap, ctx: &mut Context<Self>) {
        self.save_snapshot(ctx);
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct DeleteTo(u64);

impl Handler<DeleteTo> for Member {
    type Result = ();

    fn handle(&mut self, msg: DeleteTo, ctx: &mut Context<Self>) {
        self.delete_events_to(ctx, msg.0);
    }
}

/// The incarnation's fencing token.
#[derive(Message)]
#[rtype(result = "FencingToken")]
struct Token;

impl Handler<Token> for Member {
    type Result = actix_persistence::actix::MessageResult<Token>;

    fn handle(&mut self, _: Token, _: &mut Context<Self>) -> Self::Result {
        actix_persistence::actix::MessageResult(self.persistence.fencing_token())
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Halt;

impl Handler<Halt> for Member {
    type Result = ();

    fn handle(&mut self, _: Halt, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// One node: a journal actor over its own store instance, and its own snapshot store on the
/// same database.
struct Node {
    journal: Addr<JournalActor>,
    snapshots: Arc<dyn SnapshotStore>,
    control: Option<WriteController>,
}

/// Two nodes over one store, the log of their members, and a view of what is stored.
struct Cluster {
    nodes: Vec<Node>,
    stored: Arc<dyn JournalStore>,
    log_tx: mpsc::UnboundedSender<Seen>,
    log: mpsc::UnboundedReceiver<Seen>,
    _keep: Option<Box<dyn std::any::Any>>,
}

type Stores = (Arc<dyn JournalStore>, Arc<dyn SnapshotStore>);

impl Cluster {
    /// Two nodes on one fresh store of `backend`, their writes under the test's control when
    /// `controlled` (then completed with `control(node)`).
    async fn on(backend: Backend, controlled: bool) -> Self {
        Self::with_config(backend, controlled, JournalConfig::default()).await
    }

    async fn with_config(backend: Backend, controlled: bool, config: JournalConfig) -> Self {
        let (stores, keep): (Vec<Stores>, Option<Box<dyn std::any::Any>>) = match backend {
            Backend::InMemory => {
                let journal = InMemoryJournal::new();
                let snapshots: Arc<dyn SnapshotStore> = Arc::new(InMemorySnapshotStore::new());
                let stores = (0..2)
                    .map(|_| {
                        let store: Arc<dyn JournalStore> = Arc::new(journal.clone());
                        (store, Arc::clone(&snapshots))
                    })
                    .collect();
                (stores, None)
            }
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("sqlite:{}", dir.path().join("journal.db").display());
                let mut stores = Vec::new();
                for _ in 0..2 {
                    let journal = SqliteJournal::connect(&SqliteJournalOptions::new(url.as_str()))
                        .await
                        .expect("open SQLite");
                    let snapshots: Arc<dyn SnapshotStore> = Arc::new(journal.snapshot_store());
                    let store: Arc<dyn JournalStore> = Arc::new(journal);
                    stores.push((store, snapshots));
                }
                (stores, Some(Box::new(dir)))
            }
            Backend::Postgres => {
                let db = actix_persistence_sql::test_util::TestDatabase::create()
                    .await
                    .expect("DATABASE_URL names the PostgreSQL server of the tests");
                let mut stores = Vec::new();
                for _ in 0..2 {
                    let journal = actix_persistence::PostgresJournal::connect(
                        &actix_persistence::PostgresJournalOptions::new(db.url()),
                    )
                    .await
                    .expect("connect to the test database");
                    let snapshots: Arc<dyn SnapshotStore> = Arc::new(journal.snapshot_store());
                    let store: Arc<dyn JournalStore> = Arc::new(journal);
                    stores.push((store, snapshots));
                }
                (stores, Some(Box::new(db)))
            }
        };
        let stored = Arc::clone(&stores[0].0);
        let nodes = stores
            .into_iter()
            .map(|(store, snapshots)| {
                let (store, control): (Arc<dyn JournalStore>, _) = if controlled {
                    let (store, control) = ControlledJournal::over(store);
                    (Arc::new(store), Some(control))
                } else {
                    (store, None)
                };
                Node {
                    journal: JournalActor::start_with(store, config.clone()),
                    snapshots,
                    control,
                }
            })
            .collect();
        let (log_tx, log) = mpsc::unbounded_channel();
        Cluster {
            nodes,
            stored,
            log_tx,
            log,
            _keep: keep,
        }
    }

    /// The state of a member of `pid` on `node`, adjusted by `configure`.
    fn member(
        &self,
        node: usize,
        pid: &str,
        configure: impl FnOnce(PersistenceState<Member>) -> PersistenceState<Member>,
    ) -> Member {
        let state = PersistenceState::new(self.nodes[node].journal.clone(), pid)
            .expect("valid id")
            .with_snapshot_store(
                Arc::clone(&self.nodes[node].snapshots),
                Duration::from_secs(30),
            );
        Member {
            persistence: configure(state),
            node,
            events: Vec::new(),
            log: self.log_tx.clone(),
        }
    }

    /// Starts a member of `pid` on `node` (an incarnation of its own) without waiting for its
    /// recovery; returns it with the receiver of its stop reason.
    fn start(&self, node: usize, pid: &str) -> (Addr<Member>, oneshot::Receiver<StopReason>) {
        self.start_with(node, pid, |s| s)
    }

    fn start_with(
        &self,
        node: usize,
        pid: &str,
        configure: impl FnOnce(PersistenceState<Member>) -> PersistenceState<Member>,
    ) -> (Addr<Member>, oneshot::Receiver<StopReason>) {
        let mut member = self.member(node, pid, configure);
        let stopped = member.persistence.watch_stop();
        (member.start(), stopped)
    }

    /// The next thing a member reported (fails after 20 s instead of hanging).
    async fn next_seen(&mut self) -> Seen {
        match tokio::time::timeout(Duration::from_secs(20), self.log.recv()).await {
            Ok(Some(seen)) => seen,
            Ok(None) => panic!("every member is gone"),
            Err(_) => panic!("no member reported anything within 20 s"),
        }
    }

    /// The next recovery: (node, last sequence number, events, fencing token).
    async fn recovered(&mut self) -> (usize, u64, Vec<String>, FencingToken) {
        match self.next_seen().await {
            Seen::Recovered {
                node,
                last_seq_nr,
                events,
                token,
            } => (node, last_seq_nr, events, token),
            other => panic!("expected a recovery, saw {other:?}"),
        }
    }

    /// Starts a member and waits for its recovery.
    async fn started(
        &mut self,
        node: usize,
        pid: &str,
    ) -> (
        Addr<Member>,
        oneshot::Receiver<StopReason>,
        (u64, Vec<String>, FencingToken),
    ) {
        let (addr, stopped) = self.start(node, pid);
        let (n, last, events, token) = self.recovered().await;
        assert_eq!(n, node);
        (addr, stopped, (last, events, token))
    }

    fn control(&mut self, node: usize) -> &mut WriteController {
        self.nodes[node]
            .control
            .as_mut()
            .expect("a controlled cluster")
    }

    /// The stored events of `pid`: (seq_nr, payload).
    async fn stored(&self, pid: &str) -> Vec<(u64, String)> {
        self.stored
            .replay_messages(pid, 1, MAX_SEQ_NR, MAX_SEQ_NR)
            .map_ok(|e| {
                let payload: String = serde_json::from_slice(&e.payload).expect("a JSON string");
                (e.seq_nr, payload)
            })
            .try_collect()
            .await
            .expect("replay")
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn is_fenced(outcome: &PersistResult<u64>, pid: &str) -> bool {
    matches!(outcome, Err(PersistError::Failed(JournalError::Fenced { persistence_id, .. })) if persistence_id == pid)
}

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

on_every_store!(
    ping_pong_between_two_nodes_never_stores_a_seq_nr_twice_nor_loses_an_acknowledged_event,
    simultaneous_recoveries_on_two_nodes_leave_exactly_one_owner,
    a_takeover_racing_a_large_persist_all_sees_all_of_it_or_none,
    a_write_the_journal_gave_up_on_is_replayed_or_fenced_never_duplicated,
    a_stale_incarnations_snapshot_never_hides_the_owners_events,
    a_stale_delete_racing_a_takeover_deletes_everything_or_nothing,
    a_fenced_command_of_several_persists_tells_its_caller_fenced,
);

/// akka/akka-core#28093, akkadotnet/akka.net#5604: during a partition the id moves back and
/// forth between two nodes while the previous incarnation keeps writing. Every round a new
/// incarnation starts on the other node while the old one persists: each write of the old one
/// is stored before the takeover (and replayed by the new one) or fenced after it; the old
/// one is fenced at the latest at its first write after the takeover, and stops as fenced.
/// At the end the journal holds exactly the acknowledged events, at their acknowledged
/// numbers, 1..n without a gap, and no fenced one.
async fn ping_pong_between_two_nodes_never_stores_a_seq_nr_twice_nor_loses_an_acknowledged_event(
    backend: Backend,
) {
    const ROUNDS: usize = 12;
    let pid = "ping-pong";
    let mut c = Cluster::on(backend, false).await;
    let (mut current, mut current_stopped, recovered) = c.started(0, pid).await;
    assert_eq!(recovered.0, 0);
    let mut tokens = vec![recovered.2];
    let mut acked: Vec<(u64, String)> = Vec::new();
    let mut fenced: Vec<String> = Vec::new();
    for round in 0..ROUNDS {
        let node = (round + 1) % 2;
        // The new incarnation recovers on the other node while the old one writes.
        let (next, next_stopped) = c.start(node, pid);
        let old = current.clone();
        let old_writes = async move {
            let mut acked = Vec::new();
            for i in 0..4 {
                let payload = format!("r{round}-old-{i}");
                let outcome = old
                    .send(Append(vec![payload.clone()]))
                    .await
                    .expect("mailbox");
                match outcome {
                    Ok(seq_nr) => acked.push((seq_nr, payload)),
                    ref fenced if is_fenced(fenced, pid) => return (acked, Some(payload)),
                    other => panic!("round {round}: the old write failed otherwise: {other:?}"),
                }
            }
            (acked, None)
        };
        let ((old_acked, old_fenced), (n, last, events, token)) =
            futures::join!(old_writes, c.recovered());
        assert_eq!(n, node);
        acked.extend(old_acked);
        let mut fenced_yet = old_fenced.is_some();
        fenced.extend(old_fenced);
        // Whatever was acknowledged is replayed: a write acknowledged to the old incarnation
        // was stored before the takeover.
        assert_eq!(
            (last, events),
            (
                acked.last().map_or(0, |a| a.0),
                acked.iter().map(|a| a.1.clone()).collect::<Vec<_>>()
            ),
            "round {round}: the new incarnation replays exactly the acknowledged events"
        );
        assert!(
            tokens.iter().all(|t| *t < token),
            "round {round}: every takeover raises the token: {tokens:?} then {token}"
        );
        tokens.push(token);
        if !fenced_yet {
            let payload = format!("r{round}-old-late");
            let late = current
                .send(Append(vec![payload.clone()]))
                .await
                .expect("mailbox");
            assert!(is_fenced(&late, pid), "round {round}: {late:?}");
            fenced.push(payload);
            fenced_yet = true;
        }
        assert!(fenced_yet);
        assert_eq!(
            current_stopped.await,
            Ok(StopReason::Fenced),
            "round {round}"
        );
        // The new owner writes on.
        let payload = format!("r{round}-new");
        let seq_nr = next
            .send(Append(vec![payload.clone()]))
            .await
            .expect("mailbox")
            .expect("the owner's write is stored");
        assert_eq!(seq_nr, last + 1, "round {round}");
        acked.push((seq_nr, payload));
        current = next;
        current_stopped = next_stopped;
    }
    let stored = c.stored(pid).await;
    assert_eq!(
        stored, acked,
        "exactly the acknowledged events, at their numbers"
    );
    assert_eq!(
        stored.iter().map(|e| e.0).collect::<Vec<_>>(),
        (1..=stored.len() as u64).collect::<Vec<_>>(),
        "no number twice, no gap"
    );
    for payload in &fenced {
        assert!(
            !stored.iter().any(|e| &e.1 == payload),
            "the fenced {payload} was stored"
        );
    }
}

/// akkadotnet/akka.net#3455 (split brain resolver recreating a shard on two nodes), Marten's
/// JasperFx/marten#3465 (two fetch-for-writing of one stream, the later check lost): several
/// incarnations recover the same id at the same moment, on both nodes and several on one node
/// (their ownership takes then share the node's group-commit transactions). All replay the
/// same events, each gets a token of its own, and when they all write at once (the writes of
/// one node sharing batches) only the one with the highest token stores: every other write is
/// fenced, and a fenced incarnation's address then tells why it stopped.
async fn simultaneous_recoveries_on_two_nodes_leave_exactly_one_owner(backend: Backend) {
    const TWINS: usize = 6;
    let pid = "twin";
    let mut c = Cluster::on(backend, false).await;
    let (first, _first_stopped, _) = c.started(0, pid).await;
    assert_eq!(
        first
            .send(Append(strings(&["a1", "a2"])))
            .await
            .expect("mailbox")
            .expect("stored"),
        2
    );

    let mut twins = Vec::new();
    for twin in 0..TWINS {
        let mut member = c.member(twin % 2, pid, |s| s);
        let stopped = member.persistence.watch_stop();
        twins.push((member.start_persistent(), stopped));
    }
    for _ in 0..TWINS {
        let (node, last, events, _) = c.recovered().await;
        assert_eq!(
            (last, events),
            (2, strings(&["a1", "a2"])),
            "a twin on node {node}"
        );
    }
    let mut tokens = Vec::new();
    for (twin, _) in &twins {
        tokens.push(twin.send(Token).await.expect("mailbox"));
    }
    let mut distinct = tokens.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        TWINS,
        "no two takeovers share a token: {tokens:?}"
    );
    let owner = (0..TWINS).max_by_key(|i| tokens[*i]).expect("twins");

    // All write at once: the owner stores 3, every other twin is fenced.
    let outcomes = futures::future::join_all(
        twins
            .iter()
            .enumerate()
            .map(|(i, (twin, _))| twin.ask(Append(vec![format!("twin-{i}")]))),
    )
    .await;
    for (i, outcome) in outcomes.into_iter().enumerate() {
        if i == owner {
            assert_eq!(outcome.expect("the owner's write"), 3);
        } else {
            match outcome {
                Err(CommandError::Persist(PersistError::Failed(JournalError::Fenced {
                    ..
                }))) => {}
                other => panic!("expected twin {i}'s write to be fenced, got {other:?}"),
            }
        }
    }
    for (i, (twin, stopped)) in twins.into_iter().enumerate() {
        if i == owner {
            continue;
        }
        assert_eq!(stopped.await, Ok(StopReason::Fenced), "twin {i}");
        match twin.ask(Append(strings(&["after"]))).await {
            Err(CommandError::ActorStopped {
                cause: Some(ActorFailure::Persist(JournalError::Fenced { .. })),
                ..
            }) => {}
            other => panic!("a command after the stop is told the actor was fenced: {other:?}"),
        }
    }
    // The first incarnation is fenced too.
    let late = first
        .send(Append(strings(&["first-late"])))
        .await
        .expect("mailbox");
    assert!(is_fenced(&late, pid), "{late:?}");
    assert_eq!(
        c.stored(pid).await,
        vec![
            (1, "a1".to_owned()),
            (2, "a2".to_owned()),
            (3, format!("twin-{owner}"))
        ]
    );
}

/// akka/akka-core#19728 (atomic writes all or nothing) with a takeover in the middle: a
/// persist_all of more events than one SQL statement holds (several statements in one
/// transaction) races a recovery on the other node. The new incarnation sees all of it (the
/// write committed first, and was acknowledged) or none of it (the write was fenced and
/// stored nothing), never a part.
async fn a_takeover_racing_a_large_persist_all_sees_all_of_it_or_none(backend: Backend) {
    const EVENTS: usize = 2_500;
    let mut c = Cluster::on(backend, false).await;
    for attempt in 0..3 {
        let pid = format!("big-{attempt}");
        let (old, old_stopped, _) = c.started(0, &pid).await;
        let events: Vec<String> = (1..=EVENTS).map(|i| format!("e{i}")).collect();
        let write = old.send(AppendAll(events.clone()));
        // Starts the other node's incarnation once the write is sent.
        let (new, _new_stopped) = c.start(1, &pid);
        let (outcome, (_, last, replayed, _)) = futures::join!(write, c.recovered());
        match outcome.expect("mailbox") {
            Ok(last_seq_nr) => {
                assert_eq!(last_seq_nr, EVENTS as u64);
                assert_eq!(
                    (last, replayed.len()),
                    (EVENTS as u64, EVENTS),
                    "attempt {attempt}"
                );
                assert_eq!(replayed, events);
            }
            ref fenced if is_fenced(fenced, &pid) => {
                assert_eq!(old_stopped.await, Ok(StopReason::Fenced));
                assert_eq!((last, replayed), (0, Vec::new()), "attempt {attempt}");
                assert_eq!(c.stored(&pid).await, Vec::new(), "attempt {attempt}");
            }
            other => panic!("attempt {attempt}: {other:?}"),
        }
        let next = new
            .send(Append(strings(&["after"])))
            .await
            .expect("mailbox")
            .expect("the new owner writes");
        assert_eq!(next, last + 1);
        assert_eq!(c.stored(&pid).await.len() as u64, next);
    }
}

/// A store whose writes wait until the test releases them, then reach the wrapped store even
/// when the journal actor gave up on them meanwhile (its call timeout dropped the call): a
/// write still queued in the database's connection when its caller stopped waiting
/// (scullxbones/akka-persistence-mongo#218).
struct QueuedWrites {
    inner: Arc<dyn JournalStore>,
    arrived: mpsc::UnboundedSender<Queued>,
}

/// A write the store holds: release it, then read what the wrapped store answered.
struct Queued {
    release: oneshot::Sender<()>,
    outcome: oneshot::Receiver<Result<Vec<AtomicWriteResult>, JournalError>>,
}

impl Queued {
    async fn release(self) -> Result<Vec<AtomicWriteResult>, JournalError> {
        let _ = self.release.send(());
        self.outcome.await.expect("the queued write ran")
    }
}

#[async_trait]
impl JournalStore for QueuedWrites {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        let (release, released) = oneshot::channel();
        let (report, outcome) = oneshot::channel();
        let (answer, answered) = oneshot::channel();
        let inner = Arc::clone(&self.inner);
        // A task of its own: it runs on when the journal drops this call.
        actix::spawn(async move {
            if released.await.is_err() {
                return;
            }
            let result = inner.write_messages(writes).await;
            let _ = report.send(result.clone());
            let _ = answer.send(result);
        });
        let _ = self.arrived.send(Queued { release, outcome });
        answered
            .await
            .unwrap_or_else(|_| Err(JournalError::JournalStopped))
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.inner.replay_messages(pid, from, to, max)
    }

    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        self.inner.read_highest_sequence_nr(pid, from).await
    }

    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        fencing_token: FencingToken,
    ) -> Result<(), JournalError> {
        self.inner.delete_messages_to(pid, to, fencing_token).await
    }

    async fn take_ownership(&self, pid: &str) -> Result<Ownership, JournalError> {
        self.inner.take_ownership(pid).await
    }

    async fn read_deleted_to(&self, pid: &str) -> Result<Option<u64>, JournalError> {
        self.inner.read_deleted_to(pid).await
    }
}

/// scullxbones/akka-persistence-mongo#218: a persist times out while its write is still queued
/// in the database; the actor stops, is restarted, recovers without the queued write and
/// persisted the same sequence number again (duplicate key). Here the restarted incarnation
/// either replays the write (it was stored before the takeover: the caller was told it failed,
/// as Akka's `onPersistFailure` says it "may or may not" be stored) or the write is fenced when
/// it reaches the store after the takeover; a sequence number is never stored twice.
async fn a_write_the_journal_gave_up_on_is_replayed_or_fenced_never_duplicated(backend: Backend) {
    let config = JournalConfig {
        call_timeout: Duration::from_millis(200),
        ..JournalConfig::default()
    };
    let c = Cluster::with_config(backend, false, config.clone()).await;
    let (arrived_tx, mut arrived) = mpsc::unbounded_channel();
    let queued: Arc<dyn JournalStore> = Arc::new(QueuedWrites {
        inner: Arc::clone(&c.stored),
        arrived: arrived_tx,
    });
    let journal = JournalActor::start_with(queued, config);
    let mut c = c;
    c.nodes[0].journal = journal;

    for stored_before_restart in [true, false] {
        let pid = format!("queued-{stored_before_restart}");
        let (old, old_stopped, _) = c.started(0, &pid).await;
        let outcome = old.send(Append(strings(&["queued"])));
        let write = tokio::time::timeout(Duration::from_secs(10), arrived.recv())
            .await
            .expect("the write reached the store")
            .expect("a write");
        // The journal gives up on the write (its call timeout): the actor stops as after a
        // failed write.
        match outcome.await.expect("mailbox") {
            Err(PersistError::Failed(JournalError::Timeout { .. })) => {}
            other => panic!("expected the write to time out, got {other:?}"),
        }
        assert_eq!(old_stopped.await, Ok(StopReason::PersistFailure));

        let mut write = Some(write);
        if stored_before_restart {
            let results = write.take().unwrap().release().await.expect("the batch");
            assert!(matches!(results[..], [Ok(())]), "{results:?}");
        }
        // The restart, on the other node.
        let (new, _new_stopped, (last, events, _)) = c.started(1, &pid).await;
        if stored_before_restart {
            assert_eq!((last, events), (1, strings(&["queued"])));
        } else {
            assert_eq!((last, events), (0, Vec::new()));
            let results = write.take().unwrap().release().await.expect("the batch");
            match &results[..] {
                [Err(actix_persistence::AtomicWriteError::Failed(JournalError::Fenced {
                    ..
                }))] => {}
                other => panic!("the late write must be fenced: {other:?}"),
            }
        }
        let next = new
            .send(Append(strings(&["retried"])))
            .await
            .expect("mailbox")
            .expect("stored");
        assert_eq!(next, last + 1);
        let mut expected = Vec::new();
        if stored_before_restart {
            expected.push((1, "queued".to_owned()));
        }
        expected.push((next, "retried".to_owned()));
        assert_eq!(c.stored(&pid).await, expected);
    }
}

/// The brief's snapshot case, after akka/akka-core#28093's corrupted coordinator state: an
/// incarnation already replaced (not fenced yet: it has not written since) saves a snapshot.
/// It is at the last event it saw, below the new owner's events, so recovery still replays
/// those, and its retention's event delete (keep 1, delete events) is fenced. With the owner's
/// own newer snapshot (and its events deleted) recovery uses the owner's, whatever a stale
/// incarnation's retention does meanwhile.
async fn a_stale_incarnations_snapshot_never_hides_the_owners_events(backend: Backend) {
    let mut c = Cluster::on(backend, false).await;
    let pid = "snap";
    let retention = |s: PersistenceState<Member>| {
        s.with_snapshot_policy(SnapshotPolicy::every(0).keep(1).delete_events(true))
    };
    let (stale, stale_stopped) = c.start_with(0, pid, retention);
    c.recovered().await;
    assert_eq!(
        stale
            .send(Append(strings(&["1", "2"])))
            .await
            .expect("mailbox")
            .expect("stored"),
        2
    );
    let (owner, _owner_stopped, (last, _, _)) = c.started(1, pid).await;
    assert_eq!(last, 2);
    assert_eq!(
        owner
            .send(Append(strings(&["3", "4"])))
            .await
            .expect("mailbox")
            .expect("stored"),
        4
    );

    // The stale incarnation saves a snapshot of what it saw: at 2. Its retention's delete of
    // the events up to it is fenced.
    stale.do_send(Snap);
    assert_eq!(c.next_seen().await, Seen::SnapshotSaved(2));
    match c.next_seen().await {
        Seen::DeleteFailed(error) => assert!(error.contains("fenc"), "{error}"),
        other => panic!("expected the stale retention's delete to be fenced, saw {other:?}"),
    }
    assert_eq!(stale_stopped.await, Ok(StopReason::Fenced));
    let (probe, _, (last, events, _)) = c.started(0, pid).await;
    assert_eq!(
        (last, events),
        (4, strings(&["1", "2", "3", "4"])),
        "the owner's events after the stale snapshot are replayed"
    );
    assert_eq!(c.stored(pid).await.len(), 4, "nothing was deleted");

    // Another incarnation (with the same retention) recovers, and is replaced in turn by an
    // owner that persists, snapshots at 5 and deletes the events up to it.
    probe.send(Halt).await.expect("mailbox");
    let (stale, stale_stopped) = c.start_with(0, pid, retention);
    assert_eq!(c.recovered().await.1, 4);
    let (owner, _owner_stopped, (last, _, _)) = c.started(1, pid).await;
    assert_eq!(last, 4);
    assert_eq!(
        owner
            .send(Append(strings(&["5"])))
            .await
            .expect("mailbox")
            .expect("stored"),
        5
    );
    owner.do_send(Snap);
    assert_eq!(c.next_seen().await, Seen::SnapshotSaved(5));
    owner.do_send(DeleteTo(5));
    assert_eq!(c.next_seen().await, Seen::EventsDeleted(5));

    // The stale one snapshots (at 4); its retention meets the owner's snapshot at 5.
    stale.do_send(Snap);
    assert_eq!(c.next_seen().await, Seen::SnapshotSaved(4));
    let retention_outcome = c.next_seen().await;
    assert!(
        matches!(retention_outcome, Seen::DeleteFailed(_)),
        "the stale retention deletes no event: {retention_outcome:?}"
    );
    let late = stale
        .send(Append(strings(&["stale"])))
        .await
        .expect("mailbox");
    assert!(is_fenced(&late, pid), "{late:?}");
    assert_eq!(stale_stopped.await, Ok(StopReason::Fenced));
    let (_, _, (last, events, _)) = c.started(0, pid).await;
    assert_eq!(
        (last, events),
        (5, strings(&["1", "2", "3", "4", "5"])),
        "recovery uses the owner's snapshot"
    );
}

/// akka/akka-core#28093 with a delete: a stale incarnation's `delete_events_to` races a
/// recovery on the other node (a snapshot-and-delete retention running while the id moves).
/// Either the delete committed before the takeover (the new incarnation recovers the full
/// cleanup: no events, the sequence going on after 3) or it is fenced (nothing deleted, all
/// three replayed, the stale one stops as fenced); never a part.
async fn a_stale_delete_racing_a_takeover_deletes_everything_or_nothing(backend: Backend) {
    let mut c = Cluster::on(backend, false).await;
    for attempt in 0..3 {
        let pid = format!("delete-{attempt}");
        let (old, old_stopped, _) = c.started(0, &pid).await;
        assert_eq!(
            old.send(Append(strings(&["1", "2", "3"])))
                .await
                .expect("mailbox")
                .expect("stored"),
            3
        );
        old.do_send(DeleteTo(u64::MAX));
        let (new, _new_stopped) = c.start(1, &pid);
        let mut deleted = None;
        let mut recovered = None;
        while deleted.is_none() || recovered.is_none() {
            match c.next_seen().await {
                Seen::EventsDeleted(_) => deleted = Some(true),
                Seen::DeleteFailed(error) => {
                    assert!(error.contains("fenc"), "attempt {attempt}: {error}");
                    deleted = Some(false);
                }
                Seen::Recovered {
                    last_seq_nr,
                    events,
                    ..
                } => recovered = Some((last_seq_nr, events)),
                other => panic!("attempt {attempt}: {other:?}"),
            }
        }
        let (deleted, recovered) = (deleted.unwrap(), recovered.unwrap());
        if deleted {
            assert_eq!(recovered, (3, Vec::new()), "attempt {attempt}");
            assert_eq!(c.stored(&pid).await, Vec::new());
        } else {
            assert_eq!(old_stopped.await, Ok(StopReason::Fenced));
            assert_eq!(
                recovered,
                (3, strings(&["1", "2", "3"])),
                "attempt {attempt}"
            );
            assert_eq!(c.stored(&pid).await.len(), 3);
        }
        assert_eq!(
            new.send(Append(strings(&["4"])))
                .await
                .expect("mailbox")
                .expect("stored"),
            4
        );
    }
}

/// akka/akka-persistence-jdbc#213 and `docs/architecture.md` ("Several app nodes on one
/// database"): a node whose actor was fenced "gets `PersistError::Failed(JournalError::Fenced
/// { .. })`; retry it against the owning node". A command that persists two events (two
/// `persist` calls, one batch of two atomic writes) on a stale incarnation must tell its
/// caller the same, or the caller cannot tell a split brain from a broken store.
async fn a_fenced_command_of_several_persists_tells_its_caller_fenced(backend: Backend) {
    let mut c = Cluster::on(backend, true).await;
    let pid = "two-persists";
    let (stale, stale_stopped) = c.start(0, pid);
    c.recovered().await;
    let (_owner, _owner_stopped) = c.start(1, pid);
    c.recovered().await;
    let reply = stale.send(Append(strings(&["x", "y"])));
    let write = c.control(0).next_write_for(pid).await;
    assert_eq!(write.writes().len(), 2, "one batch of two atomic writes");
    write.complete();
    let reply = reply.await.expect("mailbox");
    assert_eq!(stale_stopped.await, Ok(StopReason::Fenced));
    assert!(
        is_fenced(&reply, pid),
        "the caller of a fenced command is told it was fenced: {reply:?}"
    );
    assert_eq!(c.stored(pid).await, Vec::new());
}
