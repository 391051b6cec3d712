//! Adversarial write-reply ordering: the resequencer groups and persistent actors on several
//! arbiters, replaying bug reports filed against Akka Persistence, Akka.NET and their journal
//! plugins. Writes complete only when a test says so (the testkit's `ControlledJournal` over
//! each store: in memory, a SQLite file, a PostgreSQL database of the test's own); timeouts
//! only detect hangs.
//!
//! What `journal_ordering*.rs` and `ordering_under_latency.rs` cover (O1-O5) is not repeated.

mod support;

use std::any::Any;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use actix_persistence::actix::{
    Actor, Addr, Arbiter, ArbiterHandle, AsyncContext, Context, Handler, Message,
};
use actix_persistence::config::Settings;
use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence::snapshot::InMemorySnapshotStore;
use actix_persistence::store::{Ownership, ReplayStream};
use actix_persistence::{
    start_recovery, AtomicWrite, EventSourced, FencingToken, InMemoryJournal, JournalError,
    JournalStore, PersistError, PersistReply, PersistResult, Persistence, PersistenceState,
    PersistentActor, SqliteJournal, SqliteJournalOptions,
};
use actix_persistence_testkit::{
    persistence_state_in_group, ControlledJournal, Outcome, WriteController,
};
use async_trait::async_trait;
use futures::StreamExt;
use support::*;
use tokio::sync::mpsc;

/// A hang detector only: nothing is ordered by time.
const HANG: Duration = Duration::from_secs(30);

/// `f`, failing the test if it has not finished within [`HANG`].
async fn within<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(HANG, f)
        .await
        .unwrap_or_else(|_| panic!("hang: {what} did not finish within {HANG:?}"))
}

fn n(groups: usize) -> NonZeroUsize {
    NonZeroUsize::new(groups).expect("a test uses at least one group")
}

/// The store under the controlled journal for `backend`, and what keeps its database alive.
async fn open_store(backend: Backend) -> (Arc<dyn JournalStore>, Option<Box<dyn Any>>) {
    match backend {
        Backend::InMemory => (Arc::new(InMemoryJournal::new()), None),
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!("sqlite:{}", dir.path().join("journal.db").display());
            let journal = SqliteJournal::connect(&SqliteJournalOptions::new(url))
                .await
                .expect("open SQLite");
            (Arc::new(journal), Some(Box::new(dir)))
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
            (Arc::new(journal), Some(Box::new(db)))
        }
    }
}

fn config(groups: usize) -> JournalConfig {
    JournalConfig {
        write_reply_ordering_groups: n(groups),
        call_timeout: HANG,
        ..JournalConfig::default()
    }
}

/// A journal over a controlled store, the probes' log, and the arbiters the test started
/// (stopped when the rig is dropped).
struct Rig {
    journal: Addr<JournalActor>,
    control: WriteController,
    /// What really holds the events (under the controlled journal).
    stored: Arc<dyn JournalStore>,
    log_tx: mpsc::UnboundedSender<Seen>,
    log: mpsc::UnboundedReceiver<Seen>,
    /// What probes reported while the test waited for a recovery, in order.
    early: std::collections::VecDeque<Seen>,
    arbiters: Vec<Arbiter>,
    _keep: Option<Box<dyn Any>>,
}

impl Rig {
    /// A journal with `groups` groups on the test's arbiter.
    async fn new(backend: Backend, groups: usize) -> Rig {
        Self::start(backend, |store| {
            JournalActor::start_with(store, config(groups))
        })
        .await
    }

    /// A journal started by `start` over the controlled store.
    async fn start(
        backend: Backend,
        start: impl FnOnce(Arc<dyn JournalStore>) -> Addr<JournalActor>,
    ) -> Rig {
        Self::wrapping(backend, |controlled| Arc::new(controlled), start).await
    }

    /// A journal started by `start` over the store `wrap` makes of the controlled store.
    async fn wrapping(
        backend: Backend,
        wrap: impl FnOnce(ControlledJournal) -> Arc<dyn JournalStore>,
        start: impl FnOnce(Arc<dyn JournalStore>) -> Addr<JournalActor>,
    ) -> Rig {
        let (store, keep) = open_store(backend).await;
        let (controlled, control) = ControlledJournal::over(Arc::clone(&store));
        let journal = start(wrap(controlled));
        let (log_tx, log) = mpsc::unbounded_channel();
        Rig {
            journal,
            control,
            stored: store,
            log_tx,
            log,
            early: Default::default(),
            arbiters: Vec::new(),
            _keep: keep,
        }
    }

    /// A new arbiter (thread) for actors; its index.
    fn arbiter(&mut self) -> usize {
        self.arbiters.push(Arbiter::new());
        self.arbiters.len() - 1
    }

    /// Starts a probe of `pid` whose incarnation is `residue` modulo `modulus` (its group is
    /// that residue modulo the journal's group count), on arbiter `on` (`None`: the test's),
    /// and waits until it recovered.
    async fn probe(
        &mut self,
        pid: &str,
        residue: usize,
        modulus: usize,
        on: Option<usize>,
    ) -> Addr<Probe> {
        let (journal, id, log) = (self.journal.clone(), pid.to_owned(), self.log_tx.clone());
        // A persistence state is made on its actor's arbiter (it is not `Send`).
        let probe = move |_: &mut Context<Probe>| Probe {
            persistence: persistence_state_in_group(&journal, &id, residue, n(modulus))
                .expect("valid persistence id"),
            applied: Vec::new(),
            log,
        };
        let addr = match on {
            None => Probe::create(probe),
            Some(i) => Probe::start_in_arbiter(&self.arbiters[i].handle(), probe),
        };
        loop {
            match self.receive().await {
                Seen::Recovered { pid: p, .. } if p == pid => return addr,
                // Another probe's report: kept, in order, for `next`.
                other => self.early.push_back(other),
            }
        }
    }

    async fn receive(&mut self) -> Seen {
        within("the next thing a probe saw", self.log.recv())
            .await
            .expect("every probe is gone")
    }

    async fn next(&mut self) -> Seen {
        match self.early.pop_front() {
            Some(seen) => seen,
            None => self.receive().await,
        }
    }

    async fn next_n(&mut self, count: usize) -> Vec<Seen> {
        let mut seen = Vec::with_capacity(count);
        for _ in 0..count {
            seen.push(self.next().await);
        }
        seen
    }

    fn so_far(&mut self) -> Vec<Seen> {
        let mut seen: Vec<Seen> = self.early.drain(..).collect();
        while let Ok(s) = self.log.try_recv() {
            seen.push(s);
        }
        seen
    }

    /// Lets everything ready on the test's arbiter and on the rig's arbiters run first.
    async fn settle(&self) {
        settle().await;
        for arbiter in &self.arbiters {
            settle_on(&arbiter.handle()).await;
        }
        settle().await;
    }

    /// The sequence numbers stored for `pid`.
    async fn stored_seq_nrs(&self, pid: &str) -> Vec<u64> {
        within(
            "a replay of the stored events",
            self.stored
                .replay_messages(pid, 1, u64::MAX, u64::MAX)
                .map(|e| e.expect("replay").seq_nr)
                .collect::<Vec<_>>(),
        )
        .await
    }

    /// The (seq_nr, event) pairs stored for `pid`.
    async fn stored(&self, pid: &str) -> Vec<(u64, Evt)> {
        within(
            "a replay of the stored events",
            self.stored
                .replay_messages(pid, 1, u64::MAX, u64::MAX)
                .map(|e| {
                    let e = e.expect("replay");
                    let event: Evt = serde_json::from_slice(&e.payload).expect("an Evt");
                    (e.seq_nr, event)
                })
                .collect::<Vec<_>>(),
        )
        .await
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        for arbiter in &self.arbiters {
            arbiter.stop();
        }
    }
}

/// Round trips through a fresh actor on `arbiter`, queued behind every task already woken
/// there (an arbiter runs its tasks in the order they were woken).
async fn settle_on(arbiter: &ArbiterHandle) {
    struct Echo;
    impl Actor for Echo {
        type Context = Context<Self>;
    }
    struct Ping;
    impl Message for Ping {
        type Result = ();
    }
    impl Handler<Ping> for Echo {
        type Result = ();
        fn handle(&mut self, _: Ping, _: &mut Context<Self>) {}
    }
    let echo = Echo::start_in_arbiter(arbiter, |_| Echo);
    for _ in 0..3 {
        let _ = echo.send(Ping).await;
    }
}

fn stopped(pid: &str) -> Seen {
    Seen::Stopped {
        pid: pid.to_owned(),
    }
}

fn failed(pid: &str) -> Seen {
    Seen::Failed {
        pid: pid.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// A store call that panics or fails in one group

/// Passes every call to a controlled journal, and panics in the write of `panic_for` once the
/// test decided it (after the inner store acted on the decision): a plugin bug in the middle
/// of a held write.
struct PanicsAfterDecision {
    inner: ControlledJournal,
    panic_for: String,
}

#[async_trait]
impl JournalStore for PanicsAfterDecision {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<actix_persistence::store::AtomicWriteResult>, JournalError> {
        let doomed = writes.iter().any(|w| w.persistence_id() == self.panic_for);
        let result = self.inner.write_messages(writes).await;
        if doomed {
            panic!("the store plugin panics in this write");
        }
        result
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
        token: FencingToken,
    ) -> Result<(), JournalError> {
        self.inner.delete_messages_to(pid, to, token).await
    }
    async fn take_ownership(&self, pid: &str) -> Result<Ownership, JournalError> {
        self.inner.take_ownership(pid).await
    }
    async fn read_deleted_to(&self, pid: &str) -> Result<Option<u64>, JournalError> {
        self.inner.read_deleted_to(pid).await
    }
}

/// A store call that panics in group 0 while group 1 goes on: the panicking write fails alone
/// (its actor stops), the writes queued behind it in its group are released in their order,
/// and the group serves later writers.
///
/// akka/akka-persistence-cassandra#281: an exception thrown inside `asyncWriteMessages` left a
/// future that never completed, and every later call for the id hung behind it;
/// akkadotnet/Akka.Persistence.SqlServer#104: code paths of the batching journal that never
/// replied left persistent actors stuck forever.
async fn a_store_call_that_panics_in_one_group_fails_only_its_write_and_releases_the_group(
    backend: Backend,
) {
    let panicky = |inner| -> Arc<dyn JournalStore> {
        Arc::new(PanicsAfterDecision {
            inner,
            panic_for: "panic-a".into(),
        })
    };
    let mut rig = Rig::wrapping(backend, panicky, |store| {
        JournalActor::start_with(store, config(2))
    })
    .await;

    let a = rig.probe("panic-a", 0, 2, None).await;
    let b = rig.probe("panic-b", 0, 2, None).await;
    let c = rig.probe("panic-c", 1, 2, None).await;
    let a_reply = a.send(Persist(vec![named("a1")]));
    let write_a = rig.control.next_write_for("panic-a").await;
    let b_reply = b.send(Persist(vec![named("b1")]));
    let write_b = rig.control.next_write_for("panic-b").await;
    c.do_send(Persist(vec![named("c1")]));
    let write_c = rig.control.next_write_for("panic-c").await;
    assert_eq!(
        rig.next_n(3).await,
        vec![
            command("panic-a", 0),
            command("panic-b", 0),
            command("panic-c", 0)
        ]
    );

    // B is stored but waits behind A; C (group 1) does not.
    write_b.complete().wait().await;
    write_c.complete();
    assert_eq!(rig.next().await, handler("panic-c", "c1", 1));
    rig.settle().await;
    assert_eq!(rig.so_far(), vec![], "B waits for A's write");

    // A's store call panics: A fails and stops, then B's reply is released.
    write_a.complete();
    assert_eq!(
        rig.next_n(3).await,
        vec![
            failed("panic-a"),
            stopped("panic-a"),
            handler("panic-b", "b1", 1)
        ]
    );
    match within("A's reply", a_reply).await.expect("mailbox") {
        Err(PersistError::Failed(JournalError::Storage { .. })) => {}
        other => panic!("A's caller must learn the store failed, got {other:?}"),
    }
    assert_eq!(
        within("B's reply", b_reply)
            .await
            .expect("mailbox")
            .expect("stored"),
        1
    );

    // The group is not stalled: a later writer in group 0 is answered at once.
    let d = rig.probe("panic-d", 0, 2, None).await;
    let d_reply = d.send(Persist(vec![named("d1")]));
    rig.control.next_write_for("panic-d").await.complete();
    assert_eq!(
        within("D's reply", d_reply)
            .await
            .expect("mailbox")
            .expect("stored"),
        1
    );
    assert_eq!(rig.stored("panic-b").await, vec![(1, named("b1"))]);
}

/// A batch failing as a whole in group 0 (the store's error), with writes of two other actors
/// of the group behind it that the store completed first: each gets its own result, in
/// arrival order, after the failure; the failed actor stops, the others go on writing.
///
/// akka/akka-core#28541 (a failing journal call answered out of the resequencer's numbering,
/// patched in #28542: "Shield unsafe journal plugins from corner case"); akkadotnet/akka.net
/// #4556 (a `WriteMessagesFailed` that reset the actor's write state too early).
async fn a_failed_batch_keeps_the_order_of_the_writes_behind_it_in_its_group(backend: Backend) {
    let mut rig = Rig::new(backend, 3).await;
    let a = rig.probe("fail-a", 0, 3, None).await;
    let b = rig.probe("fail-b", 0, 3, None).await;
    let c = rig.probe("fail-c", 0, 3, None).await;
    let a_reply = a.send(Persist(vec![named("a1")]));
    let write_a = rig.control.next_write_for("fail-a").await;
    b.do_send(Persist(vec![named("b1")]));
    let write_b = rig.control.next_write_for("fail-b").await;
    c.do_send(PersistAll(vec![named("c1"), named("c2")]));
    let write_c = rig.control.next_write_for("fail-c").await;
    rig.next_n(3).await;

    // C, then B, are decided before A: both wait.
    write_c.complete().wait().await;
    write_b
        .complete_with(vec![Outcome::Reject("b1 refused".into())])
        .wait()
        .await;
    rig.settle().await;
    assert_eq!(rig.so_far(), vec![]);

    write_a.fail(JournalError::JournalStopped);
    assert_eq!(
        rig.next_n(5).await,
        vec![
            failed("fail-a"),
            stopped("fail-a"),
            Seen::Rejected {
                pid: "fail-b".into(),
                seq_nr: 1
            },
            handler("fail-c", "c1", 1),
            handler("fail-c", "c2", 2),
        ]
    );
    assert!(matches!(
        within("A's reply", a_reply).await.expect("mailbox"),
        Err(PersistError::Failed(JournalError::JournalStopped))
    ));

    // B and C go on, in the same group, answered at once now.
    let b_reply = b.send(Persist(vec![named("b2")]));
    let write_b = rig.control.next_write_for("fail-b").await;
    assert_eq!(
        write_b.writes()[0].lowest_seq_nr(),
        2,
        "the rejection used 1 up"
    );
    write_b.complete();
    assert_eq!(
        within("B's reply", b_reply)
            .await
            .expect("mailbox")
            .expect("stored"),
        2
    );
    assert_eq!(rig.stored("fail-a").await, vec![]);
    assert_eq!(rig.stored("fail-b").await, vec![(2, named("b2"))]);
    assert_eq!(
        rig.stored("fail-c").await,
        vec![(1, named("c1")), (2, named("c2"))]
    );
}

on_every_store!(
    a_store_call_that_panics_in_one_group_fails_only_its_write_and_releases_the_group,
    a_failed_batch_keeps_the_order_of_the_writes_behind_it_in_its_group,
);

// ---------------------------------------------------------------------------------------------
// Actors, arbiters and journals that stop while writes are in flight

/// An actor whose arbiter stops while its write is the oldest of its group: its caller is
/// told the write was in flight, the store still answers it, that reply goes nowhere, and the
/// writes behind it in the group are released; later writers are answered at once.
///
/// akka/akka-core#15457 (journal replies reaching an actor instance other than the one that
/// wrote, fixed by tagging writes with the instance); akkadotnet/akka.net#1631 (a
/// `WriteMessageSuccess` pushed to dead letters when its actor stopped).
async fn an_actor_whose_arbiter_stops_with_the_oldest_write_of_its_group_does_not_stall_it(
    backend: Backend,
) {
    let mut rig = Rig::new(backend, 2).await;
    let doomed = rig.arbiter();
    let a = rig.probe("gone-a", 0, 2, Some(doomed)).await;
    let b = rig.probe("gone-b", 0, 2, None).await;
    let a_reply = a.send(Persist(vec![named("a1")]));
    let write_a = rig.control.next_write_for("gone-a").await;
    assert_eq!(rig.next().await, command("gone-a", 0));
    let b_reply = b.send(Persist(vec![named("b1")]));
    let write_b = rig.control.next_write_for("gone-b").await;
    assert_eq!(rig.next().await, command("gone-b", 0));
    write_b.complete().wait().await;

    rig.arbiters[doomed].stop();
    assert!(
        matches!(
            within("A's reply", a_reply).await,
            Ok(Err(PersistError::StoppedDuringWrite))
        ),
        "A's caller learns its write was in flight"
    );
    rig.settle().await;
    assert_eq!(
        rig.so_far(),
        vec![stopped("gone-a")],
        "B still waits for A's write"
    );

    // The store answers A's write: nobody takes it, and B is released.
    write_a.complete();
    assert_eq!(
        within("B's reply", b_reply)
            .await
            .expect("mailbox")
            .expect("stored"),
        1
    );
    assert_eq!(rig.next().await, handler("gone-b", "b1", 1));
    let c = rig.probe("gone-c", 0, 2, None).await;
    let c_reply = c.send(Persist(vec![named("c1")]));
    rig.control.next_write_for("gone-c").await.complete();
    assert_eq!(
        within("C's reply", c_reply)
            .await
            .expect("mailbox")
            .expect("stored"),
        1
    );
    assert_eq!(
        rig.next_n(2).await,
        vec![command("gone-c", 0), handler("gone-c", "c1", 1)]
    );
    // A's event was stored although its actor was gone: the next incarnation recovers it.
    assert_eq!(rig.stored("gone-a").await, vec![(1, named("a1"))]);
    let again = rig.probe("gone-a", 1, 2, None).await;
    assert_eq!(
        within("inspect", again.send(Inspect))
            .await
            .expect("mailbox"),
        (vec![named("a1")], 1)
    );
}

/// A reply the store already finished, waiting in the resequencer behind an older write of
/// its group, whose actor is gone by the time it is released: it is dropped, and the group
/// goes on (the resequencer neither stalls nor panics on a dead reply target).
///
/// akkadotnet/akka.net#7480 and #7481 (the resequencer not tied to its journal, replies to
/// gone targets); akkadotnet/akka.net#1631 (replies to a stopped actor).
async fn a_finished_reply_held_for_an_actor_that_is_gone_is_dropped_and_the_group_goes_on(
    backend: Backend,
) {
    let mut rig = Rig::new(backend, 2).await;
    let doomed = rig.arbiter();
    let a = rig.probe("held-a", 1, 2, None).await;
    let b = rig.probe("held-b", 1, 2, Some(doomed)).await;
    let c = rig.probe("held-c", 1, 2, None).await;
    let a_reply = a.send(Persist(vec![named("a1")]));
    let write_a = rig.control.next_write_for("held-a").await;
    let b_reply = b.send(Persist(vec![named("b1")]));
    let write_b = rig.control.next_write_for("held-b").await;
    let c_reply = c.send(PersistAll(vec![named("c1"), named("c2")]));
    let write_c = rig.control.next_write_for("held-c").await;
    rig.next_n(3).await;

    // B's and C's replies are finished and held behind A's write; then B's actor goes.
    write_b.complete().wait().await;
    write_c.complete().wait().await;
    rig.arbiters[doomed].stop();
    assert!(matches!(
        within("B's reply", b_reply).await,
        Ok(Err(PersistError::StoppedDuringWrite))
    ));
    assert_eq!(rig.next().await, stopped("held-b"));

    write_a.complete();
    assert_eq!(
        rig.next_n(3).await,
        vec![
            handler("held-a", "a1", 1),
            handler("held-c", "c1", 1),
            handler("held-c", "c2", 2)
        ]
    );
    assert_eq!(
        within("A's reply", a_reply)
            .await
            .expect("mailbox")
            .expect("stored"),
        1
    );
    assert_eq!(
        within("C's reply", c_reply)
            .await
            .expect("mailbox")
            .expect("stored"),
        2
    );
    // The group's next writes are answered at once.
    let a_reply = a.send(Persist(vec![named("a2")]));
    rig.control.next_write_for("held-a").await.complete();
    assert_eq!(
        within("A's second reply", a_reply)
            .await
            .expect("mailbox")
            .expect("stored"),
        2
    );
    assert_eq!(rig.stored("held-b").await, vec![(1, named("b1"))]);
}

/// A journal on an arbiter of its own that stops with writes in flight in four groups: some
/// held at the store, some finished and held in their group's resequencer, some delivered.
/// Every caller gets a typed answer (its result, or the journal stopped), none hangs, and the
/// actors that lost their journal stop.
///
/// akkadotnet/Akka.Persistence.SqlServer#104 (actors stuck forever when the journal did not
/// reply); akkadotnet/akka.net#7480 (a resequencer outliving its journal).
async fn a_journal_stopped_with_writes_in_flight_in_every_group_answers_every_caller(
    backend: Backend,
) {
    let journal_arbiter = Arbiter::new();
    let handle = journal_arbiter.handle();
    let mut rig = Rig::start(backend, |store| {
        JournalActor::start_on(&handle, store, config(4))
    })
    .await;
    let mut probes = Vec::new();
    for group in 0..4 {
        for k in 0..2 {
            let pid = format!("js-{group}-{k}");
            let addr = rig.probe(&pid, group, 4, None).await;
            probes.push((pid, group, k, addr));
        }
    }
    let mut replies = Vec::new();
    let mut writes = Vec::new();
    for (pid, _, _, addr) in &probes {
        replies.push(addr.send(Persist(vec![named("e1")])));
        writes.push(rig.control.next_write_for(pid).await);
    }
    rig.next_n(8).await;
    // Group 0: both finished (delivered). Group 1: the second finished, held behind the
    // first. Groups 2 and 3: both still at the store.
    let mut writes = writes.into_iter();
    let (g0a, g0b, g1a, g1b) = (
        writes.next().expect("8 writes"),
        writes.next().expect("8 writes"),
        writes.next().expect("8 writes"),
        writes.next().expect("8 writes"),
    );
    let at_store: Vec<_> = writes.collect();
    g0a.complete().wait().await;
    g0b.complete().wait().await;
    g1b.complete().wait().await;
    let mut delivered = rig.next_n(2).await;
    delivered.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(
        delivered,
        vec![handler("js-0-0", "e1", 1), handler("js-0-1", "e1", 1)]
    );

    journal_arbiter.stop();
    for (reply, (pid, group, _, _)) in replies.into_iter().zip(&probes) {
        let answer = within(&format!("{pid}'s reply"), reply)
            .await
            .expect("mailbox");
        match (group, answer) {
            (0, Ok(1)) => {}
            (_, Err(PersistError::Failed(JournalError::JournalStopped))) if *group > 0 => {}
            (_, other) => panic!("{pid}: unexpected answer {other:?}"),
        }
    }
    // The six that lost their journal stopped; the two of group 0 are still there, and fail
    // their next write with a typed error instead of hanging.
    let mut gone: Vec<_> = rig.next_n(12).await;
    gone.retain(|s| matches!(s, Seen::Stopped { .. }));
    assert_eq!(gone.len(), 6, "{gone:?}");
    for (pid, group, _, addr) in &probes {
        if *group == 0 {
            let answer = within(
                "a write after the journal stopped",
                addr.send(Persist(vec![named("e2")])),
            )
            .await
            .expect("mailbox");
            assert!(
                matches!(
                    answer,
                    Err(PersistError::Failed(JournalError::JournalStopped))
                ),
                "{pid}: {answer:?}"
            );
        }
    }
    drop(at_store);
    drop(g1a);
    assert_eq!(rig.stored("js-1-1").await, vec![(1, named("e1"))]);
    assert_eq!(rig.stored("js-2-0").await, vec![]);
}

on_every_store!(
    an_actor_whose_arbiter_stops_with_the_oldest_write_of_its_group_does_not_stall_it,
    a_finished_reply_held_for_an_actor_that_is_gone_is_dropped_and_the_group_goes_on,
    a_journal_stopped_with_writes_in_flight_in_every_group_answers_every_caller,
);

// ---------------------------------------------------------------------------------------------
// The group count from the public configuration and startup API

const GROUPS_VAR: &str = "ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS";
const MAX_GROUPS_VAR: &str = "ACTIX_PERSISTENCE__JOURNAL__MAX_WRITE_REPLY_ORDERING_GROUPS";

/// A rig whose journal is the one `Persistence::start_with_stores` started from `settings`.
async fn rig_from_settings(backend: Backend, settings: Settings) -> Rig {
    Rig::start(backend, move |store| {
        let persistence =
            Persistence::start_with_stores(settings, store, Arc::new(InMemorySnapshotStore::new()))
                .expect("valid settings start");
        persistence.journal().clone()
    })
    .await
}

/// Shows how the journal routes incarnations: with a write of the incarnation at residue 0
/// (modulo `modulus`) held at the store, a finished write of each incarnation at a residue of
/// `apart` is answered at once (another group), and one of each residue of `together` only
/// after the held write (the same group).
async fn assert_routing(rig: &mut Rig, modulus: usize, apart: &[usize], together: &[usize]) {
    let a = rig.probe("route-held", 0, modulus, None).await;
    a.do_send(Persist(vec![named("held")]));
    let held = rig.control.next_write_for("route-held").await;
    assert_eq!(rig.next().await, command("route-held", 0));
    // Kept alive to the end: a probe whose address is dropped stops.
    let mut probes = vec![a];
    for residue in apart {
        let pid = format!("route-apart-{residue}");
        let p = rig.probe(&pid, *residue, modulus, None).await;
        p.do_send(Persist(vec![named("e")]));
        rig.control.next_write_for(&pid).await.complete();
        assert_eq!(
            rig.next_n(2).await,
            vec![command(&pid, 0), handler(&pid, "e", 1)],
            "incarnation {residue} (mod {modulus}) is in another group than 0"
        );
        probes.push(p);
    }
    let mut behind = Vec::new();
    for residue in together {
        let pid = format!("route-together-{residue}");
        let p = rig.probe(&pid, *residue, modulus, None).await;
        p.do_send(Persist(vec![named("e")]));
        rig.control
            .next_write_for(&pid)
            .await
            .complete()
            .wait()
            .await;
        assert_eq!(rig.next().await, command(&pid, 0));
        rig.settle().await;
        assert_eq!(
            rig.so_far(),
            vec![],
            "incarnation {residue} (mod {modulus}) shares group 0 with the held write"
        );
        behind.push(handler(&pid, "e", 1));
        probes.push(p);
    }
    held.complete();
    let mut expected = vec![handler("route-held", "held", 1)];
    expected.extend(behind);
    assert_eq!(rig.next_n(expected.len()).await, expected);
}

/// `"4"` from an environment variable starts a journal that really routes through four groups:
/// incarnations 0 and 2 (mod 8) are apart (not 1 or 2 groups), 0 and 4 together (not 8).
///
/// The review of akka/akka-core#32994 (sharded journal resequencers): a group count given as
/// a string by an environment override must mean that count.
async fn four_groups_from_an_environment_string_route_through_exactly_four_groups(
    backend: Backend,
) {
    let settings = Settings::loader()
        .env_vars([
            ("ACTIX_PERSISTENCE__JOURNAL__PLUGIN", "inmem"),
            (GROUPS_VAR, "4"),
        ])
        .load()
        .expect("\"4\" is 4");
    let mut rig = rig_from_settings(backend, settings).await;
    assert_routing(&mut rig, 8, &[2, 1, 3], &[4]).await;
}

/// Groups equal to their limit, from a TOML file (the count written as a string): three
/// groups, so incarnations 0, 1 and 2 (mod 6) are apart, 0 and 3 together (not 2 or 6 groups).
///
/// apache/pekko#2026 and #2027 (a journal ordering option read from the configuration file);
/// akka/akka-core#32994.
async fn groups_at_their_limit_from_a_toml_file_route_through_that_many_groups(backend: Backend) {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("persistence.toml");
    std::fs::write(
        &file,
        "[journal]\nplugin = \"inmem\"\nwrite-reply-ordering-groups = \"3\"\n\
         max-write-reply-ordering-groups = 3\n",
    )
    .expect("write the file");
    let settings = Settings::loader()
        .file(&file)
        .env_vars(Vec::<(String, String)>::new())
        .load()
        .expect("3 groups within their limit of 3");
    assert_eq!(settings.journal.write_reply_ordering_groups.get(), 3);
    let mut rig = rig_from_settings(backend, settings).await;
    assert_routing(&mut rig, 6, &[1, 2], &[3]).await;
}

/// The default of one group, through the startup API: every reply waits for the oldest write.
///
/// akka/akka-core#32994 and apache/pekko#2026: one global order is the compatible default.
async fn one_group_by_default_holds_every_reply_behind_the_oldest_write(backend: Backend) {
    let settings = Settings::loader()
        .env_vars([("ACTIX_PERSISTENCE__JOURNAL__PLUGIN", "inmem")])
        .load()
        .expect("the defaults");
    let mut rig = rig_from_settings(backend, settings).await;
    assert_routing(&mut rig, 3, &[], &[1, 2]).await;
}

on_every_store!(
    four_groups_from_an_environment_string_route_through_exactly_four_groups,
    groups_at_their_limit_from_a_toml_file_route_through_that_many_groups,
    one_group_by_default_holds_every_reply_behind_the_oldest_write,
);

/// The ceiling (65536 groups, its limit raised to match, from environment strings): the
/// journal's first and last groups are apart, and incarnations 65536 apart share a group.
///
/// akka/akka-core#32994 (a resequencer per group).
#[actix::test]
async fn the_ceiling_of_groups_keeps_the_first_and_the_last_group_apart() {
    let ceiling = actix_persistence::config::MAX_WRITE_REPLY_ORDERING_GROUPS;
    let value = ceiling.to_string();
    let settings = Settings::loader()
        .env_vars([
            ("ACTIX_PERSISTENCE__JOURNAL__PLUGIN", "inmem"),
            (GROUPS_VAR, value.as_str()),
            (MAX_GROUPS_VAR, value.as_str()),
        ])
        .load()
        .expect("the ceiling is allowed");
    let mut rig = rig_from_settings(Backend::InMemory, settings).await;
    assert_routing(&mut rig, 2 * ceiling, &[ceiling - 1, 1], &[ceiling]).await;
}

// ---------------------------------------------------------------------------------------------
// Incarnations, batches of many writes, and completion out of order

/// A persistence id re-incarnated (its first incarnation's arbiter stopped with a write held
/// in group 0) lands in group 1 and is not held behind group 0; its own replies come in its
/// write order, its sequence goes on from what was stored, and the old incarnation's write,
/// answered last, stores nothing and reaches nobody.
///
/// akka/akka-core#15457 (replies of a write in flight when the actor restarted matched up
/// with the new instance's handlers; fixed by an instance id on every write);
/// akkadotnet/akka.net#1403 (an incarnation getting what was sent for the previous one).
async fn a_reincarnated_id_lands_in_another_group_and_keeps_its_own_order(backend: Backend) {
    let mut rig = Rig::new(backend, 2).await;
    let old_home = rig.arbiter();
    let old = rig.probe("re", 0, 2, Some(old_home)).await;
    let reply = old.send(Persist(vec![named("e1")]));
    rig.control.next_write_for("re").await.complete();
    assert_eq!(
        within("e1", reply).await.expect("mailbox").expect("stored"),
        1
    );
    let old_reply = old.send(Persist(vec![named("old-e2")]));
    let old_write = rig.control.next_write_for("re").await;
    let w = rig.probe("re-w", 0, 2, None).await;
    let w_reply = w.send(Persist(vec![named("w1")]));
    let w_write = rig.control.next_write_for("re-w").await;
    rig.arbiters[old_home].stop();
    assert!(matches!(
        within("the old incarnation's reply", old_reply).await,
        Ok(Err(PersistError::StoppedDuringWrite))
    ));

    // The new incarnation, in group 1, recovers what was stored and writes on at once.
    rig.so_far();
    let new = rig.probe("re", 1, 2, None).await;
    let first = new.send(Persist(vec![named("n2")]));
    let write = rig.control.next_write_for("re").await;
    assert_eq!(write.writes()[0].lowest_seq_nr(), 2);
    write.complete();
    assert_eq!(
        within("n2", first).await.expect("mailbox").expect("stored"),
        2
    );
    // The old write is answered now, between the new incarnation's writes: fenced, stored
    // nowhere, delivered to nobody; W, behind it in group 0, is answered once its own write is.
    old_write.complete().wait().await;
    w_write.complete();
    assert_eq!(
        within("W's reply", w_reply)
            .await
            .expect("mailbox")
            .expect("stored"),
        1
    );
    let second = new.send(Persist(vec![named("n3"), named("n4")]));
    let write = rig.control.next_write_for("re").await;
    assert_eq!(write.writes().len(), 2);
    write.complete();
    assert_eq!(
        within("n3, n4", second)
            .await
            .expect("mailbox")
            .expect("stored"),
        4
    );
    let seen: Vec<_> = rig
        .so_far()
        .into_iter()
        .filter(|s| matches!(s, Seen::Handler { pid, .. } if pid == "re"))
        .collect();
    assert_eq!(
        seen,
        vec![
            handler("re", "n2", 2),
            handler("re", "n3", 3),
            handler("re", "n4", 4)
        ]
    );
    assert_eq!(
        rig.stored("re").await,
        vec![
            (1, named("e1")),
            (2, named("n2")),
            (3, named("n3")),
            (4, named("n4"))
        ]
    );
}

/// Many persists and a `persist_all` in one handler, in three groups, completed in the reverse
/// of their arrival, with rejections inside batches: each actor runs its continuations in its
/// call order, a rejected write keeps its place (and its sequence number) in that order, and a
/// batch finished early waits for the older batch of its group.
///
/// akkadotnet/akka.net#4762 (the continuation of a `PersistAll` of two or more events never
/// invoked); akka/akka-core#17818 (atomic writes for `persistAll`, and rejections);
/// akka/akka-core#17828 (the order of the handlers of several persists).
async fn many_persists_in_one_handler_complete_out_of_order_across_groups(backend: Backend) {
    let mut rig = Rig::new(backend, 3).await;
    let p = rig.probe("many-p", 0, 3, None).await;
    let q = rig.probe("many-q", 0, 3, None).await;
    let r = rig.probe("many-r", 1, 3, None).await;
    let s = rig.probe("many-s", 2, 3, None).await;
    let p_reply = p.send(Persist(vec![named("p1"), named("p2"), named("p3")]));
    let write_p = rig.control.next_write_for("many-p").await;
    let q_reply = q.send(PersistThenAll(named("q1"), vec![named("q2"), named("q3")]));
    let write_q = rig.control.next_write_for("many-q").await;
    let r_reply = r.send(PersistAll(vec![named("r1"), named("r2")]));
    let write_r = rig.control.next_write_for("many-r").await;
    let s_reply = s.send(Persist(vec![named("s1"), named("s2")]));
    let write_s = rig.control.next_write_for("many-s").await;
    assert_eq!(
        [&write_p, &write_q, &write_r, &write_s].map(|w| w.writes().len()),
        [3, 2, 1, 2],
        "one atomic write per persist, one for the persist_all"
    );
    rig.next_n(4).await;

    write_s.complete_with(vec![Outcome::Reject("s1 refused".into())]);
    assert_eq!(
        rig.next_n(2).await,
        vec![
            Seen::Rejected {
                pid: "many-s".into(),
                seq_nr: 1
            },
            handler("many-s", "s2", 2)
        ]
    );
    write_r.complete();
    assert_eq!(
        rig.next_n(2).await,
        vec![handler("many-r", "r1", 1), handler("many-r", "r2", 2)]
    );
    write_q.complete().wait().await;
    rig.settle().await;
    assert_eq!(
        rig.so_far(),
        vec![],
        "Q's batch waits for P's, older, in group 0"
    );
    write_p.complete_with(vec![Outcome::Store, Outcome::Reject("p2 refused".into())]);
    assert_eq!(
        rig.next_n(6).await,
        vec![
            handler("many-p", "p1", 1),
            Seen::Rejected {
                pid: "many-p".into(),
                seq_nr: 2
            },
            handler("many-p", "p3", 3),
            handler("many-q", "q1", 1),
            handler("many-q", "q2", 2),
            handler("many-q", "q3", 3),
        ]
    );
    let answers = [
        within("P", p_reply).await,
        within("Q", q_reply).await,
        within("R", r_reply).await,
        within("S", s_reply).await,
    ];
    let lasts: Vec<u64> = answers
        .into_iter()
        .map(|a| a.expect("mailbox").expect("its last write stored"))
        .collect();
    assert_eq!(lasts, vec![3, 3, 2, 2]);
    assert_eq!(
        rig.stored("many-p").await,
        vec![(1, named("p1")), (3, named("p3"))]
    );
    assert_eq!(
        rig.stored("many-q").await,
        vec![(1, named("q1")), (2, named("q2")), (3, named("q3"))]
    );
}

on_every_store!(
    a_reincarnated_id_lands_in_another_group_and_keeps_its_own_order,
    many_persists_in_one_handler_complete_out_of_order_across_groups,
);

/// Six actors on two arbiters (three groups) pipeline four commands of two persists each; the
/// store completes each round of their writes in a scrambled order (and rejects the second
/// write of every batch in one round). Every actor sees each of its results once, in its own
/// write order, each command after the previous one's continuations, and none is lost or
/// doubled.
///
/// akka/akka-core#28196 and #28197 (replies that arrived in another order than sent, when
/// delivered through a thread pool); akkadotnet/akka.net#1883 (a journal completing the
/// atomic writes of one call in any order).
async fn actors_on_two_arbiters_get_each_reply_once_in_their_own_write_order(backend: Backend) {
    const ACTORS: usize = 6;
    const COMMANDS: usize = 4;
    let mut rig = Rig::new(backend, 3).await;
    let arbiters = [rig.arbiter(), rig.arbiter()];
    let mut probes = Vec::new();
    for i in 0..ACTORS {
        let pid = format!("arb-{i}");
        let addr = rig.probe(&pid, i % 3, 3, Some(arbiters[i % 2])).await;
        probes.push((pid, addr));
    }
    let ev = |c: usize, k: usize| named(&format!("c{c}-{k}"));
    let mut replies = Vec::new();
    for (_, addr) in &probes {
        let sent: Vec<_> = (0..COMMANDS)
            .map(|c| addr.send(Persist(vec![ev(c, 0), ev(c, 1)])))
            .collect();
        replies.push(sent);
    }
    for round in 0..COMMANDS {
        let mut writes = Vec::new();
        for _ in 0..ACTORS {
            writes.push(rig.control.next_write().await);
        }
        assert!(
            !rig.control.has_waiting_write(),
            "an actor has one batch in flight at a time"
        );
        // A different scramble each round: reversed, rotated, interleaved.
        let order: Vec<usize> = (0..ACTORS)
            .map(|i| match round % 3 {
                0 => ACTORS - 1 - i,
                1 => (i + round) % ACTORS,
                _ => (i * 5 + 1) % ACTORS,
            })
            .collect();
        let mut slots: Vec<_> = writes.into_iter().map(Some).collect();
        for i in order {
            let write = slots[i].take().expect("each write completed once");
            assert_eq!(write.writes().len(), 2);
            if round == 1 {
                write.complete_with(vec![Outcome::Store, Outcome::Reject("no".into())]);
            } else {
                write.complete();
            }
        }
    }

    let mut per_actor: std::collections::HashMap<String, Vec<Seen>> = Default::default();
    for _ in 0..ACTORS * (COMMANDS + 2 * COMMANDS) {
        let seen = rig.next().await;
        let pid = match &seen {
            Seen::Command { pid, .. } | Seen::Handler { pid, .. } | Seen::Rejected { pid, .. } => {
                pid.clone()
            }
            other => panic!("unexpected {other:?}"),
        };
        per_actor.entry(pid).or_default().push(seen);
    }
    for (pid, _) in &probes {
        let mut expected = Vec::new();
        let mut applied = 0;
        let mut seq_nr = 0;
        for c in 0..COMMANDS {
            expected.push(command(pid, applied));
            for k in 0..2 {
                seq_nr += 1;
                if c == 1 && k == 1 {
                    expected.push(Seen::Rejected {
                        pid: pid.clone(),
                        seq_nr,
                    });
                } else {
                    expected.push(handler(pid, &format!("c{c}-{k}"), seq_nr));
                    applied += 1;
                }
            }
        }
        assert_eq!(per_actor[pid], expected, "{pid}");
        let stored: Vec<u64> = rig.stored(pid).await.into_iter().map(|(s, _)| s).collect();
        assert_eq!(stored, vec![1, 2, 3, 5, 6, 7, 8], "{pid}");
    }
    for (sent, (pid, _)) in replies.into_iter().zip(&probes) {
        let mut answers = Vec::new();
        for reply in sent {
            answers.push(match within("a reply", reply).await.expect("mailbox") {
                Ok(last) => Some(last),
                Err(PersistError::Rejected(_)) => None,
                Err(other) => panic!("{pid}: {other:?}"),
            });
        }
        assert_eq!(answers, vec![Some(2), None, Some(6), Some(8)], "{pid}");
    }
    rig.settle().await;
    assert_eq!(rig.so_far(), vec![], "no result is delivered twice");
}

on_every_store!(actors_on_two_arbiters_get_each_reply_once_in_their_own_write_order,);

// ---------------------------------------------------------------------------------------------
// Re-entrancy: commands an actor sends itself from its persist handler

/// Reports what it handles as text; its persist handler of "first" sends itself a command
/// ("again"), through its mailbox or through `ctx.notify`, and persists once more (nested).
struct Loopback {
    persistence: PersistenceState<Self>,
    applied: Vec<String>,
    log: mpsc::UnboundedSender<String>,
    notify: bool,
}

impl Actor for Loopback {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        start_recovery(self, ctx);
    }
}

impl PersistentActor for Loopback {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

impl EventSourced for Loopback {
    type Event = String;
    fn apply(&mut self, event: &String) {
        self.applied.push(event.clone());
    }
    fn on_recovery_completed(&mut self, _: u64, _: &mut Context<Self>) {
        let _ = self.log.send("recovered".into());
    }
}

#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct Cmd(&'static str);

impl Handler<Cmd> for Loopback {
    type Result = PersistReply<u64>;
    fn handle(&mut self, msg: Cmd, ctx: &mut Context<Self>) -> Self::Result {
        let _ = self
            .log
            .send(format!("{} sees {}", msg.0, self.applied.join(",")));
        self.persist(ctx, msg.0.to_owned(), |act, event, ctx| {
            let _ = act.log.send(format!("handled {event}"));
            if event == "first" {
                if act.notify {
                    ctx.notify(Cmd("again"));
                } else {
                    ctx.address().do_send(Cmd("again"));
                }
                act.persist(ctx, "nested".to_owned(), |act, event, _| {
                    let _ = act.log.send(format!("handled {event}"));
                });
            }
            act.last_seq_nr()
        })
    }
}

/// A command an actor sends itself from its persist handler, and a persist nested in that
/// handler, while two commands wait in its mailbox: the nested persist's handler runs before
/// the next command, the waiting commands run in their order, each after the previous one's
/// handler, and the self-sent one after them; no command is handled while a write is in
/// flight. `notify`: sent with `ctx.notify` instead of through the mailbox.
///
/// akka/akka-core#16528 (stashing and unstashing around persist callbacks), akka/akka-core
/// #17828 (nested persist calls), actix/actix#458 (`ctx.wait` not holding other events back)
/// and actix/actix#225 (where `notify` is handled relative to the mailbox).
async fn a_command_sent_to_itself_from_a_persist_handler_waits_its_turn(
    backend: Backend,
    notify: bool,
) {
    let mut rig = Rig::new(backend, 2).await;
    let (tx, mut log) = mpsc::unbounded_channel();
    let journal = rig.journal.clone();
    let actor = Loopback::create(move |_| Loopback {
        persistence: persistence_state_in_group(&journal, "loop", 1, n(2)).expect("valid id"),
        applied: Vec::new(),
        log: tx,
        notify,
    });
    assert_eq!(line(&mut log).await, "recovered");
    let first = actor.send(Cmd("first"));
    let second = actor.send(Cmd("second"));
    let third = actor.send(Cmd("third"));
    let write = rig.control.next_write_for("loop").await;
    assert_eq!(line(&mut log).await, "first sees ");
    write.complete();
    assert_eq!(line(&mut log).await, "handled first");
    // The nested persist is in flight: nothing else runs.
    let nested = rig.control.next_write_for("loop").await;
    assert_eq!(nested.writes()[0].lowest_seq_nr(), 2);
    rig.settle().await;
    assert!(
        log.try_recv().is_err(),
        "a command ran during the nested write"
    );
    assert!(!rig.control.has_waiting_write());
    nested.complete();
    // Every later write is stored as it comes.
    let mut lines = Vec::new();
    while lines.len() < 7 {
        tokio::select! {
            seen = line(&mut log) => lines.push(seen),
            write = rig.control.next_write() => {
                write.complete();
            }
        }
    }
    assert_eq!(
        lines,
        [
            "handled nested",
            "second sees first,nested",
            "handled second",
            "third sees first,nested,second",
            "handled third",
            "again sees first,nested,second,third",
            "handled again",
        ]
    );
    let answers = [
        within("first", first).await,
        within("second", second).await,
        within("third", third).await,
    ];
    let answers: Vec<u64> = answers
        .into_iter()
        .map(|a| a.expect("mailbox").expect("stored"))
        .collect();
    assert_eq!(answers, vec![1, 3, 4]);
    assert_eq!(rig.stored_seq_nrs("loop").await, vec![1, 2, 3, 4, 5]);
}

async fn a_command_mailed_to_itself_from_a_persist_handler_waits_its_turn(backend: Backend) {
    a_command_sent_to_itself_from_a_persist_handler_waits_its_turn(backend, false).await
}

/// As [`a_command_mailed_to_itself_from_a_persist_handler_waits_its_turn`], with the command
/// sent through `ctx.notify`. Fails on actix 0.13.5: when a mailbox command starts a persist
/// (`ctx.wait`), `ContextFut::poll` checks its own list of wait futures, where the new one is
/// not merged yet, instead of `ctx.waiting()`, and polls one context item (a `notify`ed
/// message, a stream's message, a spawned future) before the write is sent: "again" is
/// handled while "second"'s write is pending, on the state without "second" (docs/
/// architecture.md, "Known limits").
async fn a_command_notified_to_itself_from_a_persist_handler_waits_its_turn(backend: Backend) {
    a_command_sent_to_itself_from_a_persist_handler_waits_its_turn(backend, true).await
}

async fn line(log: &mut mpsc::UnboundedReceiver<String>) -> String {
    within("the actor's log", log.recv())
        .await
        .expect("the actor is gone")
}

on_every_store!(a_command_mailed_to_itself_from_a_persist_handler_waits_its_turn,);

/// Known limit (actix 0.13.5), see the test's doc.
#[actix::test]
#[ignore = "actix 0.13.5 polls one context item (ctx.notify) before a wait a mailbox command \
            started takes effect: docs/architecture.md, Known limits"]
async fn a_command_notified_to_itself_from_a_persist_handler_waits_its_turn_in_memory() {
    a_command_notified_to_itself_from_a_persist_handler_waits_its_turn(Backend::InMemory).await
}

// ---------------------------------------------------------------------------------------------
// A journal actor per arbiter

/// Journal actors of their own on two arbiters (`Persistence::on_this_arbiter`), a write held
/// at the store through each; one arbiter stops. Its actor's caller is told the write was in
/// flight, the other arbiter's actor is answered when its write is, the work counted for the
/// stopped arbiter is released, and `shutdown` returns instead of waiting forever for it.
///
/// akkadotnet/akka.net#7480 (journal helpers outliving their journal), akka/akka-core#28541
/// (a journal call left unanswered), akkadotnet/Akka.Persistence.SqlServer#104.
async fn an_arbiter_stopping_with_a_write_held_through_its_own_journal_leaves_the_other_going(
    backend: Backend,
) {
    let (store, _keep) = open_store(backend).await;
    let (controlled, mut control) = ControlledJournal::over(Arc::clone(&store));
    let settings = Settings::loader()
        .env_vars([
            ("ACTIX_PERSISTENCE__JOURNAL__PLUGIN", "inmem"),
            (GROUPS_VAR, "2"),
        ])
        .load()
        .expect("valid settings");
    let persistence = Persistence::start_with_stores(
        settings,
        Arc::new(controlled),
        Arc::new(InMemorySnapshotStore::new()),
    )
    .expect("start");
    let (log_tx, mut log) = mpsc::unbounded_channel();
    let (x, y) = (Arbiter::new(), Arbiter::new());
    let mut probes = Vec::new();
    for (arbiter, pid) in [(&x, "own-x"), (&y, "own-y")] {
        let (p, tx, id) = (persistence.clone(), log_tx.clone(), pid.to_owned());
        probes.push(Probe::start_in_arbiter(&arbiter.handle(), move |_| {
            let local = p.on_this_arbiter();
            Probe {
                persistence: local.state(id).expect("valid id"),
                applied: Vec::new(),
                log: tx,
            }
        }));
    }
    for _ in 0..2 {
        let seen = within("recovery", log.recv()).await.expect("a probe");
        assert!(matches!(seen, Seen::Recovered { .. }), "{seen:?}");
    }
    let x_reply = probes[0].send(Persist(vec![named("x1")]));
    let write_x = control.next_write_for("own-x").await;
    let y_reply = probes[1].send(Persist(vec![named("y1")]));
    let write_y = control.next_write_for("own-y").await;
    assert_eq!(persistence.work_in_flight(), 4, "each write counted twice");

    x.stop();
    assert!(matches!(
        within("X's reply", x_reply).await,
        Ok(Err(PersistError::StoppedDuringWrite))
    ));
    let joined = tokio::task::spawn_blocking(move || x.join());
    within("X's thread", joined)
        .await
        .expect("join")
        .expect("the arbiter's thread ends");
    assert_eq!(
        persistence.work_in_flight(),
        2,
        "the stopped arbiter's work is not counted any more"
    );
    let mut shutdown = Box::pin(persistence.shutdown());
    assert!(
        futures::poll!(shutdown.as_mut()).is_pending(),
        "Y's write is held"
    );
    write_y.complete();
    assert_eq!(
        within("Y's reply", y_reply)
            .await
            .expect("mailbox")
            .expect("stored"),
        1
    );
    within("shutdown", shutdown).await;
    assert_eq!(persistence.work_in_flight(), 0);
    drop(write_x);
    let stored: Vec<u64> = within(
        "replay",
        store
            .replay_messages("own-x", 1, u64::MAX, u64::MAX)
            .map(|e| e.expect("replay").seq_nr)
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(
        stored,
        Vec::<u64>::new(),
        "X's held write never reached the store"
    );
    y.stop();
}

on_every_store!(
    an_arbiter_stopping_with_a_write_held_through_its_own_journal_leaves_the_other_going,
);

/// A write the store never answers, oldest in its group: the journal's call timeout fails it
/// (its actor stops), which releases the writes behind it in their order, while the other
/// group never waited; the store's late answer stores nothing and reaches nobody. Time is
/// paused once the writes are at the store, so the timeout is exact, not raced.
///
/// akkadotnet/Akka.Persistence.SqlServer#104 (no timeout on a journal that never replies: the
/// actors stayed stuck); akka/akka-core#32994 (a slow write holding back every later reply).
#[actix::test]
async fn a_write_the_store_never_answers_times_out_and_releases_only_its_group() {
    let mut rig = Rig::start(Backend::InMemory, |store| {
        JournalActor::start_with(
            store,
            JournalConfig {
                call_timeout: Duration::from_secs(5),
                ..config(2)
            },
        )
    })
    .await;
    let a = rig.probe("to-a", 0, 2, None).await;
    let b = rig.probe("to-b", 0, 2, None).await;
    let c = rig.probe("to-c", 1, 2, None).await;
    let a_reply = a.send(Persist(vec![named("a1")]));
    let stuck = rig.control.next_write_for("to-a").await;
    let b_reply = b.send(PersistAll(vec![named("b1"), named("b2")]));
    rig.control
        .next_write_for("to-b")
        .await
        .complete()
        .wait()
        .await;
    let c_reply = c.send(Persist(vec![named("c1")]));
    rig.control.next_write_for("to-c").await.complete();
    assert_eq!(
        within("C's reply", c_reply)
            .await
            .expect("mailbox")
            .expect("stored"),
        1,
        "group 1 does not wait for the stuck write"
    );

    tokio::time::pause();
    match within("A's reply", a_reply).await.expect("mailbox") {
        Err(PersistError::Failed(JournalError::Timeout { .. })) => {}
        other => panic!("A's write must time out, got {other:?}"),
    }
    assert_eq!(
        within("B's reply", b_reply)
            .await
            .expect("mailbox")
            .expect("stored"),
        2
    );
    let seen: Vec<_> = rig
        .so_far()
        .into_iter()
        .filter(|s| !matches!(s, Seen::Command { .. }))
        .collect();
    assert_eq!(
        seen,
        vec![
            handler("to-c", "c1", 1),
            failed("to-a"),
            stopped("to-a"),
            handler("to-b", "b1", 1),
            handler("to-b", "b2", 2),
        ]
    );
    // The store answers at last: its call was dropped, nothing is stored.
    stuck.complete();
    rig.settle().await;
    assert_eq!(rig.stored("to-a").await, vec![]);
    assert_eq!(rig.so_far(), vec![]);
}

/// `Persistence` started on a worker arbiter that is later stopped (an actix-web worker being
/// replaced): the SQL store's writer task ran there and is gone. A journal of another
/// arbiter (`on_this_arbiter`) over that store answers a new incarnation's recovery with a
/// typed error at once: it neither hangs nor waits for a timeout.
///
/// akkadotnet/Akka.Persistence.SqlServer#104 (code paths of a journal that never replied);
/// akkadotnet/akka.net#7582 (a journal whose initialisation failed retried forever, unseen).
async fn a_store_whose_starting_arbiter_stopped_fails_recovery_with_a_typed_error(kind: Backend) {
    let (_keep, url_env) = match kind {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!("sqlite:{}", dir.path().join("journal.db").display());
            let env = vec![
                (
                    "ACTIX_PERSISTENCE__JOURNAL__PLUGIN".to_owned(),
                    "sqlite".to_owned(),
                ),
                ("ACTIX_PERSISTENCE__JOURNAL__SQLITE__URL".to_owned(), url),
            ];
            (Box::new(dir) as Box<dyn Any>, env)
        }
        Backend::Postgres => {
            let db = actix_persistence_sql::test_util::TestDatabase::create()
                .await
                .expect("DATABASE_URL names the PostgreSQL server of the tests");
            let env = vec![
                (
                    "ACTIX_PERSISTENCE__JOURNAL__PLUGIN".to_owned(),
                    "postgres".to_owned(),
                ),
                (
                    "ACTIX_PERSISTENCE__JOURNAL__POSTGRES__URL".to_owned(),
                    db.url().to_owned(),
                ),
            ];
            (Box::new(db) as Box<dyn Any>, env)
        }
        Backend::InMemory => unreachable!("the in-memory store has no writer task"),
    };
    let settings = Settings::loader()
        .env_vars(url_env)
        .load()
        .expect("valid settings");
    let worker = Arbiter::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    assert!(worker.spawn_fn(move || {
        actix_rt::spawn(async move {
            let _ = tx.send(Persistence::start_with(settings).await);
        });
    }));
    let persistence = within("start on the worker", rx)
        .await
        .expect("the worker ran")
        .expect("start");
    worker.stop();
    let joined = tokio::task::spawn_blocking(move || worker.join());
    within("the worker's thread", joined)
        .await
        .expect("join")
        .expect("the worker's thread ends");

    let local = persistence.on_this_arbiter();
    let (log_tx, mut log) = mpsc::unbounded_channel();
    let _probe = Probe {
        persistence: local.state("orphan").expect("valid id"),
        applied: Vec::new(),
        log: log_tx,
    }
    .start();
    match within("the recovery's outcome", log.recv()).await {
        Some(Seen::RecoveryFailed { pid, .. }) if pid == "orphan" => {}
        other => panic!("the recovery must fail with a typed error, got {other:?}"),
    }
}

/// The SQL stores only: the in-memory store has no writer task.
mod a_store_whose_starting_arbiter_stopped_fails_recovery_with_a_typed_error {
    #[actix::test]
    async fn sqlite() {
        super::a_store_whose_starting_arbiter_stopped_fails_recovery_with_a_typed_error(
            super::Backend::Sqlite,
        )
        .await
    }

    #[actix::test]
    #[cfg_attr(
        not(has_database_url),
        ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
    )]
    async fn postgres() {
        super::a_store_whose_starting_arbiter_stopped_fails_recovery_with_a_typed_error(
            super::Backend::Postgres,
        )
        .await
    }
}
