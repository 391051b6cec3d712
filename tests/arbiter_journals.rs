//! `Persistence::on_this_arbiter`: persistent actors on several arbiters, each arbiter with a
//! journal actor of its own over the one store. On every store, an id's events written through
//! one arbiter's journal are recovered through another's, and the store's owner epoch fences
//! the older incarnation across them, as across processes. At the edges: an arbiter stopped and
//! another started (its journal actor left out of `health`, the new one's recovering what the
//! old one stored), `shutdown` waiting for a write held in the store through an arbiter's
//! journal, `health` reporting the open circuit breaker of one arbiter's journal, and calls
//! outside any arbiter or on another Actix system's.

use std::sync::Arc;
use std::time::Duration;

use actix_persistence::actix::{Arbiter, Handler, System};
use actix_persistence::journal::CheckHealth;
use actix_persistence::snapshot::InMemorySnapshotStore;
use actix_persistence::{
    CommandError, EventSourced, JournalError, Message, PersistReply, PersistResult, Persistence,
    PersistenceState, PersistentActor, Settings, Unhealthy,
};
use actix_persistence_testkit::ControlledJournal;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

#[derive(Serialize, Deserialize)]
struct Added(i64);

#[derive(PersistentActor)]
struct Counter {
    persistence: PersistenceState<Self>,
    total: i64,
}

impl EventSourced for Counter {
    type Event = Added;
    fn apply(&mut self, event: &Added) {
        self.total += event.0;
    }
}

#[derive(Message)]
#[rtype(result = "PersistResult<i64>")]
struct Add(i64);

impl Handler<Add> for Counter {
    type Result = PersistReply<i64>;
    fn handle(&mut self, msg: Add, ctx: &mut Self::Context) -> Self::Result {
        self.persist(ctx, Added(msg.0), |counter, _, _| counter.total)
    }
}

async fn start_inmem() -> Persistence {
    let loader = Settings::loader().toml_str("test", "[journal]\nplugin = \"inmem\"\n");
    Persistence::start_from(loader).await.expect("starts")
}

/// A `Persistence` over a controlled store, whose circuit breakers open at the first failure.
fn start_controlled() -> (Persistence, actix_persistence_testkit::WriteController) {
    let settings = Settings::loader()
        .toml_str(
            "test",
            "[journal.circuit-breaker]\nmax-failures = 1\nreset-timeout = \"1h\"\n",
        )
        .load()
        .expect("settings");
    let (store, control) = ControlledJournal::new();
    let persistence = Persistence::start_with_stores(
        settings,
        Arc::new(store),
        Arc::new(InMemorySnapshotStore::new()),
    )
    .expect("starts");
    (persistence, control)
}

/// Runs `work` on `arbiter` and returns what it returns.
async fn on<T: Send + 'static, F>(arbiter: &Arbiter, work: impl FnOnce() -> F + Send + 'static) -> T
where
    F: std::future::Future<Output = T> + 'static,
{
    let (tx, rx) = oneshot::channel();
    assert!(arbiter.spawn_fn(move || {
        actix_rt::spawn(async move {
            let _ = tx.send(work().await);
        });
    }));
    rx.await.expect("the arbiter ran the work")
}

/// Starts a counter for `id` from `persistence` on the current arbiter and adds `amounts`;
/// returns the totals.
async fn add_all(persistence: Persistence, id: impl Into<String>, amounts: Vec<i64>) -> Vec<i64> {
    let counter = Counter {
        persistence: persistence.state(id).expect("valid id"),
        total: 0,
    }
    .start_persistent();
    let mut totals = Vec::new();
    for amount in amounts {
        totals.push(counter.ask(Add(amount)).await.expect("persisted"));
    }
    totals
}

#[actix_rt::test]
async fn each_arbiter_persists_through_a_journal_of_its_own_over_the_one_store_in_memory() {
    persists_through_journals_of_two_arbiters(start_inmem().await).await;
}

#[actix_rt::test]
async fn each_arbiter_persists_through_a_journal_of_its_own_over_the_one_store_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let toml = format!(
        "[journal.sqlite]\nurl = \"sqlite:{}\"\n",
        dir.path().join("journal.db").display()
    );
    let loader = Settings::loader()
        .toml_str("test", &toml)
        .env_vars(Vec::<(String, String)>::new());
    persists_through_journals_of_two_arbiters(
        Persistence::start_from(loader).await.expect("starts"),
    )
    .await;
}

#[actix_rt::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn each_arbiter_persists_through_a_journal_of_its_own_over_the_one_store_postgres() {
    let Some(db) = actix_persistence_sql::test_util::TestDatabase::create().await else {
        return;
    };
    let toml = format!(
        "[journal]\nplugin = \"postgres\"\n[journal.postgres]\nurl = \"{}\"\n",
        db.url()
    );
    let loader = Settings::loader()
        .toml_str("test", &toml)
        .env_vars(Vec::<(String, String)>::new());
    persists_through_journals_of_two_arbiters(
        Persistence::start_from(loader).await.expect("starts"),
    )
    .await;
}

/// Two arbiters, each persisting through its own journal actor over `persistence`'s store: one
/// id's events written through one are recovered through the other, which fences the older
/// incarnation; the home arbiter recovers what both stored.
async fn persists_through_journals_of_two_arbiters(persistence: Persistence) {
    let (a, b) = (Arbiter::new(), Arbiter::new());

    // Arbiter A: a journal actor of its own (the same one on every call there), and an
    // incarnation of "Account|1" that persists 1..=10 through it.
    let p = persistence.clone();
    let (journal_a, same_again, old, total) = on(&a, move || async move {
        let local = p.on_this_arbiter();
        let journal = local.journal().clone();
        let same_again = p.on_this_arbiter().journal() == &journal;
        let counter = Counter {
            persistence: local.state("Account|1").expect("valid id"),
            total: 0,
        }
        .start_persistent();
        let mut total = 0;
        for amount in 1..=10 {
            total = counter.ask(Add(amount)).await.expect("persisted on A");
        }
        (journal, same_again, counter, total)
    })
    .await;
    assert_eq!(total, 55);
    assert!(same_again, "a second call on A gave another journal actor");
    assert!(
        &journal_a != persistence.journal(),
        "A used the home journal"
    );

    // Arbiter B: another journal actor; a new incarnation recovers A's events through it and
    // goes on.
    let p = persistence.clone();
    let (journal_b, recovered, after) = on(&b, move || async move {
        let local = p.on_this_arbiter();
        let counter = Counter {
            persistence: local.state("Account|1").expect("valid id"),
            total: 0,
        }
        .start_persistent();
        let recovered = counter.ask(Add(0)).await.expect("recovered on B");
        let after = counter.ask(Add(5)).await.expect("persisted on B");
        (local.journal().clone(), recovered, after)
    })
    .await;
    assert_eq!((recovered, after), (55, 60));
    assert!(journal_b != journal_a && &journal_b != persistence.journal());

    // The older incarnation on A is fenced by B's takeover: its write is refused and stores
    // nothing.
    let fenced = on(&a, move || async move { old.ask(Add(1000)).await }).await;
    assert!(
        fenced.is_err(),
        "the older incarnation wrote after B took over: {fenced:?}"
    );

    // On the home arbiter the method is a plain clone; every journal actor is healthy, and
    // a last incarnation there recovers exactly what A and B stored.
    assert!(persistence.on_this_arbiter().journal() == persistence.journal());
    persistence
        .health()
        .await
        .expect("every journal actor answers");
    let counter = Counter {
        persistence: persistence.state("Account|1").expect("valid id"),
        total: 0,
    }
    .start_persistent();
    assert_eq!(counter.ask(Add(0)).await.expect("recovered at home"), 60);

    persistence.shutdown().await;
    for arbiter in [a, b] {
        arbiter.stop();
        let _ = arbiter.join();
    }
}

/// An arbiter whose journal actor stored events is stopped: `health` leaves its journal out
/// (it does not answer any more), a new arbiter gets a journal actor of its own, and an
/// incarnation there recovers what the stopped arbiter's stored.
#[actix_rt::test]
async fn a_stopped_arbiters_journal_is_left_out_and_a_new_arbiter_gets_its_own() {
    let persistence = start_inmem().await;
    let first = Arbiter::new();
    let p = persistence.clone();
    let (journal, totals) = on(&first, move || async move {
        let local = p.on_this_arbiter();
        let journal = local.journal().clone();
        (journal, add_all(local, "Moved|1", vec![1, 2, 3]).await)
    })
    .await;
    assert_eq!(totals, vec![1, 3, 6]);
    first.stop();
    first.join().expect("the arbiter's thread ends");
    assert!(
        !journal.connected(),
        "the stopped arbiter's journal still runs"
    );
    persistence
        .health()
        .await
        .expect("healthy: the stopped arbiter's journal is not asked");

    let second = Arbiter::new();
    let p = persistence.clone();
    let (other, totals) = on(&second, move || async move {
        let local = p.on_this_arbiter();
        let other = local.journal().clone();
        (other, add_all(local, "Moved|1", vec![0, 4]).await)
    })
    .await;
    assert_eq!(
        totals,
        vec![6, 10],
        "recovered the stopped arbiter's events"
    );
    assert!(other != journal && &other != persistence.journal());
    persistence.health().await.expect("healthy");
    persistence.shutdown().await;
    second.stop();
    second.join().expect("the arbiter's thread ends");
}

/// `shutdown` waits for a write held by the store that an arbiter's own journal actor sent,
/// and returns once the store answered it.
#[actix_rt::test]
async fn shutdown_waits_for_a_write_held_through_an_arbiters_journal() {
    let (persistence, mut control) = start_controlled();
    let worker = Arbiter::new();
    let p = persistence.clone();
    let (sent, reply) = oneshot::channel();
    let (journal_tx, journal_rx) = oneshot::channel();
    assert!(worker.spawn_fn(move || {
        let local = p.on_this_arbiter();
        let _ = journal_tx.send(local.journal().clone());
        actix_rt::spawn(async move {
            let _ = sent.send(add_all(local, "Held|1", vec![7]).await);
        });
    }));
    let journal = journal_rx.await.expect("the arbiter ran the work");
    assert!(&journal != persistence.journal());

    let held = control.next_write_for("Held|1").await;
    // Counted twice: the persist by its actor, the store call by the arbiter's journal.
    assert_eq!(persistence.work_in_flight(), 2, "the held write is counted");
    let mut shutdown = Box::pin(persistence.shutdown());
    assert!(
        futures::poll!(shutdown.as_mut()).is_pending(),
        "shut down while a write was held"
    );
    held.complete().wait().await;
    tokio::time::timeout(Duration::from_secs(10), shutdown)
        .await
        .expect("shut down once the write was answered");
    assert_eq!(persistence.work_in_flight(), 0);
    assert_eq!(reply.await.expect("the counter answered"), vec![7]);
    worker.stop();
    worker.join().expect("the arbiter's thread ends");
}

/// One arbiter's journal actor has an open circuit breaker (its write failed): `health`
/// answers `CircuitOpen`, from every clone, while the home journal itself is healthy and
/// still writes.
#[actix_rt::test]
async fn health_reports_the_open_breaker_of_one_arbiters_journal() {
    let (persistence, mut control) = start_controlled();
    let worker = Arbiter::new();
    let p = persistence.clone();
    let (sent, reply) = oneshot::channel();
    assert!(worker.spawn_fn(move || {
        let local = p.on_this_arbiter();
        actix_rt::spawn(async move {
            let counter = Counter {
                persistence: local.state("Broken|1").expect("valid id"),
                total: 0,
            }
            .start_persistent();
            let _ = sent.send(counter.ask(Add(1)).await);
        });
    }));
    control
        .next_write_for("Broken|1")
        .await
        .fail(JournalError::JournalStopped);
    let failed = reply.await.expect("the counter answered");
    assert!(
        matches!(failed, Err(CommandError::Persist(_))),
        "{failed:?}"
    );

    let home = persistence
        .journal()
        .send(CheckHealth)
        .await
        .expect("the home journal answers");
    assert!(
        home.is_ok(),
        "the home journal's breaker is closed: {home:?}"
    );
    let health = persistence.health().await;
    assert!(
        matches!(health, Err(Unhealthy::CircuitOpen { .. })),
        "{health:?}"
    );
    let p = persistence.clone();
    let from_worker = on(&worker, move || async move {
        p.on_this_arbiter().health().await
    })
    .await;
    assert!(
        matches!(from_worker, Err(Unhealthy::CircuitOpen { .. })),
        "{from_worker:?}"
    );

    // The home journal still writes.
    let p = persistence.clone();
    let home_write = actix_rt::spawn(add_all(p, "Fine|1", vec![2]));
    control.next_write_for("Fine|1").await.complete();
    assert_eq!(home_write.await.expect("the counter ran"), vec![2]);
    worker.stop();
    worker.join().expect("the arbiter's thread ends");
}

/// Outside any arbiter (a plain thread, a Tokio runtime's thread) the method is a plain
/// clone; on the arbiter of another Actix system it starts a journal actor there, which writes
/// to the one store and is left out of `health` once that system ended.
#[actix_rt::test]
async fn outside_an_arbiter_a_plain_clone_and_on_another_system_a_journal_of_its_own() {
    let persistence = start_inmem().await;
    let p = persistence.clone();
    let same = std::thread::spawn(move || p.on_this_arbiter().journal() == p.journal())
        .join()
        .expect("a plain thread");
    assert!(same, "a plain thread got a journal actor of its own");
    let p = persistence.clone();
    let same = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(async move { p.on_this_arbiter().journal() == p.journal() })
    })
    .join()
    .expect("a Tokio runtime's thread");
    assert!(
        same,
        "a Tokio runtime's thread got a journal actor of its own"
    );

    let p = persistence.clone();
    let (other, totals) = std::thread::spawn(move || {
        System::new().block_on(async move {
            let local = p.on_this_arbiter();
            let other = local.journal().clone();
            (other, add_all(local, "Elsewhere|1", vec![5, 6]).await)
        })
    })
    .join()
    .expect("another system's thread");
    assert_eq!(totals, vec![5, 11]);
    assert!(&other != persistence.journal());
    persistence
        .health()
        .await
        .expect("healthy: the ended system's journal is not asked");
    assert_eq!(
        add_all(persistence.clone(), "Elsewhere|1", vec![0]).await,
        vec![11],
        "the other system's journal wrote to the one store"
    );
}

/// The home journal actor has an open circuit breaker (a write of the home arbiter failed):
/// `health` of a clone an arbiter got from `on_this_arbiter` reports it too, since it checks
/// every journal actor, not only the arbiters' ones.
#[actix_rt::test]
async fn health_of_an_arbiters_clone_reports_the_home_journals_open_breaker() {
    let (persistence, mut control) = start_controlled();
    let p = persistence.clone();
    let home_write = actix_rt::spawn(async move {
        let counter = Counter {
            persistence: p.state("HomeBroken|1").expect("valid id"),
            total: 0,
        }
        .start_persistent();
        counter.ask(Add(1)).await
    });
    control
        .next_write_for("HomeBroken|1")
        .await
        .fail(JournalError::JournalStopped);
    let failed = home_write.await.expect("the counter ran");
    assert!(
        matches!(failed, Err(CommandError::Persist(_))),
        "{failed:?}"
    );
    assert!(matches!(
        persistence.health().await,
        Err(Unhealthy::CircuitOpen { .. })
    ));

    let worker = Arbiter::new();
    let p = persistence.clone();
    let (own, from_worker) = on(&worker, move || async move {
        let local = p.on_this_arbiter();
        let own = local
            .journal()
            .send(CheckHealth)
            .await
            .expect("the worker's journal answers");
        (own, local.health().await)
    })
    .await;
    assert!(own.is_ok(), "the worker's own journal is healthy: {own:?}");
    assert!(
        matches!(from_worker, Err(Unhealthy::CircuitOpen { .. })),
        "the home journal's open breaker was not checked: {from_worker:?}"
    );
    worker.stop();
    worker.join().expect("the arbiter's thread ends");
}

/// A clone an arbiter got from `on_this_arbiter`, handed back to the home arbiter: there
/// `on_this_arbiter` gives the home journal actor (the current arbiter's), not the other
/// arbiter's.
#[actix_rt::test]
async fn on_the_home_arbiter_a_clone_from_another_arbiter_gets_the_home_journal() {
    let persistence = start_inmem().await;
    let worker = Arbiter::new();
    let p = persistence.clone();
    let local = on(&worker, move || async move { p.on_this_arbiter() }).await;
    assert!(local.journal() != persistence.journal());
    let home = local.on_this_arbiter();
    assert!(
        home.journal() == persistence.journal(),
        "the home arbiter got another arbiter's journal actor"
    );
    // And on the worker again, its own.
    let again = on(&worker, move || async move { home.on_this_arbiter() }).await;
    assert!(again.journal() == local.journal());
    worker.stop();
    worker.join().expect("the arbiter's thread ends");
}

/// Counters on two arbiters, each persisting through its arbiter's own journal actor into the
/// one in-memory store, while a live query by slices reads: every event comes exactly once,
/// each id's in order.
#[actix_rt::test]
async fn a_live_query_reads_each_event_once_while_two_arbiters_journals_write() {
    use actix_persistence::Offset;
    use futures::StreamExt;

    const IDS: usize = 8;
    const EVENTS: i64 = 25;
    let loader = Settings::loader().toml_str(
        "test",
        "[journal]\nplugin = \"inmem\"\n[query]\nrefresh-interval = \"5ms\"\n\
         late-commit-window = \"20ms\"\npage-size = 7\n",
    );
    let persistence = Persistence::start_from(loader).await.expect("starts");
    let mut live = persistence
        .query()
        .expect("in-memory queries")
        .events_by_slices("Spread", 0, 1023, Offset::NoOffset);
    let workers = [Arbiter::new(), Arbiter::new()];
    let mut done = Vec::new();
    for (w, worker) in workers.iter().enumerate() {
        let p = persistence.clone();
        let (tx, rx) = oneshot::channel();
        assert!(worker.spawn_fn(move || {
            let local = p.on_this_arbiter();
            for i in 0..IDS {
                let id = format!("Spread|{w}-{i}");
                actix_rt::spawn(add_all(local.clone(), id, (1..=EVENTS).collect()));
            }
            let _ = tx.send(());
        }));
        done.push(rx);
    }

    let mut delivered: std::collections::HashMap<String, Vec<u64>> = Default::default();
    while delivered.len() < 2 * IDS || delivered.values().any(|n| n.len() < EVENTS as usize) {
        let next = tokio::time::timeout(Duration::from_secs(20), live.next())
            .await
            .expect("delivered")
            .expect("live")
            .expect("no error");
        let numbers = delivered
            .entry(next.persistence_id.to_string())
            .or_default();
        assert!(
            numbers.last().is_none_or(|last| *last < next.seq_nr),
            "{}: {} after {numbers:?}",
            next.persistence_id,
            next.seq_nr
        );
        numbers.push(next.seq_nr);
    }
    for (id, numbers) in &delivered {
        assert_eq!(*numbers, (1..=EVENTS as u64).collect::<Vec<_>>(), "{id}");
    }
    for rx in done {
        rx.await.expect("the arbiter ran the work");
    }
    for worker in workers {
        worker.stop();
        worker.join().expect("the arbiter's thread ends");
    }
}
