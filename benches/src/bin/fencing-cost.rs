//! The cost of taking ownership on recovery (fencing, issue 10): recovery of an empty
//! persistence id (one at a time), recovery of 1,000 ids at once, and group-commit throughput
//! (100 actors x 100 events, closed loop), on SQLite and on PostgreSQL (through DATABASE_URL;
//! a throwaway database per run). Each measure runs `runs` times (default 3) in a fresh
//! database; the median is printed as a markdown row, the runs after it.
//!
//! Uses only APIs that predate fencing, so the same file builds on the commit before it for a
//! side-by-side "before" run:
//! `cargo run --release -p actix-persistence-bench --bin fencing-cost -- [runs]`;
//! `fencing-cost sqlite-writes E` runs only the SQLite group commit (100 actors x E events)
//! once, for `valgrind --tool=callgrind`.

use std::time::{Duration, Instant};

use actix::prelude::*;
use actix_persistence_core::journal::{JournalActor, JournalConfig};
use actix_persistence_core::persistent::{
    start_recovery, EventSourced, PersistReply, PersistResult, PersistenceState, PersistentActor,
};
use actix_persistence_core::JournalStore;
use actix_persistence_sql::test_util::TestDatabase;
use actix_persistence_sql::{
    PostgresJournal, PostgresJournalOptions, SqliteJournal, SqliteJournalOptions,
};

const EMPTY_RECOVERIES: usize = 200;
const RECOVERIES_AT_ONCE: usize = 1_000;
const ACTORS: usize = 100;
const EVENTS_PER_ACTOR: u64 = 100;

/// A counter: every `Add` persists one event.
struct Counter {
    persistence: PersistenceState<Self>,
}

impl Actor for Counter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        start_recovery(self, ctx);
    }
}

impl EventSourced for Counter {
    type Event = u64;

    fn apply(&mut self, _: &u64) {}
}

impl PersistentActor for Counter {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }

    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

/// Answered once recovery completed.
#[derive(Message)]
#[rtype(result = "u64")]
struct Recovered;

impl Handler<Recovered> for Counter {
    type Result = u64;

    fn handle(&mut self, _: Recovered, _: &mut Context<Self>) -> u64 {
        self.last_seq_nr()
    }
}

/// Persist one event.
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct Add;

impl Handler<Add> for Counter {
    type Result = PersistReply<u64>;

    fn handle(&mut self, _: Add, ctx: &mut Context<Self>) -> Self::Result {
        let next = self.last_seq_nr() + 1;
        self.persist(ctx, next, |act, _, _| act.last_seq_nr())
    }
}

fn counter(journal: &Addr<JournalActor>, pid: String) -> Addr<Counter> {
    Counter {
        persistence: PersistenceState::new(journal.clone(), pid).expect("valid id"),
    }
    .start()
}

/// Mean milliseconds of one recovery of an id that never wrote, one after the other.
async fn empty_recovery_ms(journal: &Addr<JournalActor>, run: usize) -> f64 {
    let started = Instant::now();
    for i in 0..EMPTY_RECOVERIES {
        let actor = counter(journal, format!("empty-{run}-{i}"));
        assert_eq!(actor.send(Recovered).await.expect("recovered"), 0);
    }
    started.elapsed().as_secs_f64() * 1e3 / EMPTY_RECOVERIES as f64
}

/// Milliseconds until 1,000 actors started together have all recovered.
async fn recoveries_at_once_ms(journal: &Addr<JournalActor>, run: usize) -> f64 {
    let started = Instant::now();
    let actors: Vec<_> = (0..RECOVERIES_AT_ONCE)
        .map(|i| counter(journal, format!("at-once-{run}-{i}")))
        .collect();
    let recovered = futures::future::join_all(actors.iter().map(|a| a.send(Recovered))).await;
    assert!(recovered.into_iter().all(|r| r == Ok(0)));
    started.elapsed().as_secs_f64() * 1e3
}

/// Events per second of 100 actors persisting 100 events each, one after the other.
async fn group_commit_events_per_s(journal: &Addr<JournalActor>, run: usize) -> f64 {
    let actors: Vec<_> = (0..ACTORS)
        .map(|i| counter(journal, format!("writer-{run}-{i}")))
        .collect();
    for actor in &actors {
        actor.send(Recovered).await.expect("recovered");
    }
    let started = Instant::now();
    let writers = actors.iter().map(|actor| async move {
        for expected in 1..=EVENTS_PER_ACTOR {
            let seq_nr = actor.send(Add).await.expect("mailbox").expect("stored");
            assert_eq!(seq_nr, expected);
        }
    });
    futures::future::join_all(writers).await;
    (ACTORS as u64 * EVENTS_PER_ACTOR) as f64 / started.elapsed().as_secs_f64()
}

/// The three measures of one run against `store`.
async fn one_run(store: impl JournalStore, run: usize) -> [f64; 3] {
    let journal = JournalActor::start_with(
        std::sync::Arc::new(store),
        JournalConfig {
            call_timeout: Duration::from_secs(60),
            ..JournalConfig::default()
        },
    );
    [
        empty_recovery_ms(&journal, run).await,
        recoveries_at_once_ms(&journal, run).await,
        group_commit_events_per_s(&journal, run).await,
    ]
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn report(store: &str, runs: Vec<[f64; 3]>) {
    let names = [
        ("recovery of an empty id", "ms"),
        ("recovery of 1,000 ids at once", "ms"),
        ("group commit, 100 actors x 100 events", "events/s"),
    ];
    for (i, (name, unit)) in names.iter().enumerate() {
        let values: Vec<f64> = runs.iter().map(|r| r[i]).collect();
        let each: Vec<String> = values.iter().map(|v| format!("{v:.2}")).collect();
        println!(
            "| {store} | {name} | {:.2} {unit} | {} |",
            median(values.clone()),
            each.join(", ")
        );
    }
}

/// `sqlite-writes E`: only the SQLite group-commit measure, 100 actors x `E` events, once,
/// for an instruction count under `valgrind --tool=callgrind` (the difference of two totals
/// over the difference of their events is the cost per event; start-up and recovery cancel).
fn sqlite_writes(events_per_actor: u64) {
    System::new().block_on(async move {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite:{}", dir.path().join("journal.db").display());
        let store = SqliteJournal::connect(&SqliteJournalOptions::new(url))
            .await
            .expect("open SQLite");
        let counters = store.clone();
        let journal = JournalActor::start_with(
            std::sync::Arc::new(store),
            JournalConfig {
                call_timeout: Duration::from_secs(600),
                ..JournalConfig::default()
            },
        );
        let actors: Vec<_> = (0..ACTORS)
            .map(|i| counter(&journal, format!("writer-{i}")))
            .collect();
        for actor in &actors {
            actor.send(Recovered).await.expect("recovered");
        }
        let started = Instant::now();
        let writers = actors.iter().map(|actor| async move {
            for expected in 1..=events_per_actor {
                let seq_nr = actor.send(Add).await.expect("mailbox").expect("stored");
                assert_eq!(seq_nr, expected);
            }
        });
        futures::future::join_all(writers).await;
        let stats = counters.stats();
        println!(
            "sqlite-writes: {} events in {:.2} s; {} transactions stored {} atomic writes \
             (largest batch {})",
            ACTORS as u64 * events_per_actor,
            started.elapsed().as_secs_f64(),
            stats.transactions,
            stats.atomic_writes,
            stats.largest_batch
        );
    });
}

fn main() {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    if first.as_deref() == Some("sqlite-writes") {
        let events = args
            .next()
            .map(|n| n.parse().expect("events per actor: a number"))
            .unwrap_or(EVENTS_PER_ACTOR);
        sqlite_writes(events);
        return;
    }
    let runs: usize = first
        .map(|n| n.parse().expect("runs: a number"))
        .unwrap_or(3);
    System::new().block_on(async move {
        println!("| store | measure | median | runs |");
        println!("|---|---|---|---|");
        let mut sqlite = Vec::new();
        for run in 0..runs {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!("sqlite:{}", dir.path().join("journal.db").display());
            let store = SqliteJournal::connect(&SqliteJournalOptions::new(url))
                .await
                .expect("open SQLite");
            sqlite.push(one_run(store, run).await);
        }
        report("SQLite", sqlite);
        let mut postgres = Vec::new();
        for run in 0..runs {
            let Some(db) = TestDatabase::create().await else {
                return;
            };
            let store = PostgresJournal::connect(&PostgresJournalOptions::new(db.url()))
                .await
                .expect("open PostgreSQL");
            postgres.push(one_run(store.clone(), run).await);
            store.close().await;
        }
        report("PostgreSQL", postgres);
    });
}
