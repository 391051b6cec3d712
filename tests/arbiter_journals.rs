//! `Persistence::on_this_arbiter`: persistent actors on several arbiters, each arbiter with a
//! journal actor of its own over the one store. An id's events written through one arbiter's
//! journal are recovered through another's, and the store's owner epoch fences the older
//! incarnation across them, as across processes.

use actix_persistence::actix::{Arbiter, Handler};
use actix_persistence::{
    EventSourced, Message, PersistReply, PersistResult, Persistence, PersistenceState,
    PersistentActor, Settings,
};
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

/// Runs `work` on `arbiter` and returns what it returns.
async fn on<T: Send + 'static, F>(arbiter: &Arbiter, work: impl FnOnce() -> F + Send + 'static) -> T
where
    F: std::future::Future<Output = T> + 'static,
{
    let (tx, rx) = oneshot::channel();
    // The work's future stays on the arbiter's thread (it need not be `Send`).
    assert!(arbiter.spawn_fn(move || {
        actix_rt::spawn(async move {
            let _ = tx.send(work().await);
        });
    }));
    rx.await.expect("the arbiter ran the work")
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
