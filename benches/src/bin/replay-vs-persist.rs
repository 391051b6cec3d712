//! Replays must not starve writes: persist latency of one actor that persists every 10 ms,
//! without replays and while 20 actors recover 5,000 events each with an `apply` that takes
//! 1 ms (issue 13). Reports persist p50/p99/max of both phases, their p99 ratio and how many
//! persists failed, on SQLite and PostgreSQL (`DATABASE_URL`; a throwaway database).
//!
//! `cargo run --release -p actix-persistence-bench --bin replay-vs-persist -- [options]`
//!
//! The recovering actors run on arbiters of their own (`--placement own`, as actors spread
//! over an application's workers) or on the persisting actor's arbiter (`--placement shared`);
//! `apply` sleeps (`--apply sleep`, I/O-like) or spins (`--apply spin`, CPU) for `--apply-us`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use actix_persistence_core::journal::{JournalActor, JournalConfig};
use actix_persistence_core::persistent::{
    start_recovery, EventSourced, PersistReply, PersistResult, PersistenceState, PersistentActor,
    RecoveryPermits,
};
use actix_persistence_core::serialization::JSON_SERIALIZER_ID;
use actix_persistence_core::{AtomicWrite, JournalStore, PersistentRepr};
use actix_persistence_sql::test_util::TestDatabase;
use actix_persistence_sql::{
    PostgresJournal, PostgresJournalOptions, SqliteJournal, SqliteJournalOptions,
};
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Store {
    Sqlite,
    Postgres,
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Placement {
    /// Each recovering actor on an arbiter (thread) of its own.
    Own,
    /// Every recovering actor on the persisting actor's arbiter.
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ApplyKind {
    Sleep,
    Spin,
}

#[derive(Debug, Parser)]
#[command(name = "replay-vs-persist")]
struct Cli {
    #[arg(long, value_enum, default_value_t = Store::Both)]
    store: Store,
    #[arg(long, value_enum, default_value_t = Placement::Own)]
    placement: Placement,
    /// Recovering actors.
    #[arg(long, default_value_t = 20)]
    replayers: usize,
    /// Events each recovering actor replays.
    #[arg(long, default_value_t = 5_000)]
    events: u64,
    /// Microseconds one `apply` of a replayed event takes.
    #[arg(long, default_value_t = 1_000)]
    apply_us: u64,
    #[arg(long, value_enum, default_value_t = ApplyKind::Sleep)]
    apply: ApplyKind,
    /// Milliseconds between two persists of the persisting actor.
    #[arg(long, default_value_t = 10)]
    period_ms: u64,
    /// Persists measured without replays.
    #[arg(long, default_value_t = 300)]
    baseline_persists: u32,
    /// Shared recovery permits (`journal.max-concurrent-recoveries`, default 50).
    #[arg(long, default_value_t = 50)]
    permits: usize,
    /// Events read per replay query (`journal.*.replay-batch-size`).
    #[arg(long, default_value_t = 1_000)]
    replay_batch_size: u32,
    /// Label of the build, printed in every row (e.g. a commit).
    #[arg(long, default_value = "")]
    build: String,
}

#[derive(Serialize, Deserialize)]
struct Added(u64);

struct Counter {
    persistence: PersistenceState<Self>,
    total: u64,
    apply_for: Duration,
    apply: ApplyKind,
}

impl Actor for Counter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        start_recovery(self, ctx);
    }
}

impl EventSourced for Counter {
    type Event = Added;

    fn apply(&mut self, event: &Added) {
        if !self.apply_for.is_zero() {
            match self.apply {
                ApplyKind::Sleep => std::thread::sleep(self.apply_for),
                ApplyKind::Spin => {
                    let until = Instant::now() + self.apply_for;
                    while Instant::now() < until {
                        std::hint::spin_loop();
                    }
                }
            }
        }
        self.total += event.0;
    }
}

impl PersistentActor for Counter {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }

    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct Add;

impl Handler<Add> for Counter {
    type Result = PersistReply<u64>;

    fn handle(&mut self, _: Add, ctx: &mut Context<Self>) -> Self::Result {
        self.persist(ctx, Added(1), |act, _, _| act.total)
    }
}

/// Answered once recovery completed: the total.
#[derive(Message)]
#[rtype(result = "u64")]
struct Total;

impl Handler<Total> for Counter {
    type Result = MessageResult<Total>;

    fn handle(&mut self, _: Total, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.total)
    }
}

fn counter(
    journal: Addr<JournalActor>,
    pid: &str,
    permits: Option<RecoveryPermits>,
    apply_for: Duration,
    apply: ApplyKind,
) -> Counter {
    let mut persistence = PersistenceState::new(journal, pid)
        .expect("valid id")
        .with_recovery_timeout(Duration::from_secs(600));
    if let Some(permits) = permits {
        persistence = persistence.with_recovery_permits(permits);
    }
    Counter {
        persistence,
        total: 0,
        apply_for,
        apply,
    }
}

async fn fill(store: &dyn JournalStore, pid: &str, events: u64) {
    let mut next = 1;
    while next <= events {
        let last = (next + 999).min(events);
        let reprs = (next..=last)
            .map(|seq_nr| PersistentRepr {
                persistence_id: pid.into(),
                seq_nr,
                payload: b"1".to_vec(),
                serializer_id: JSON_SERIALIZER_ID,
                manifest: String::new(),
                writer_uuid: "replay-vs-persist".into(),
                timestamp: 0,
                tags: Default::default(),
            })
            .collect();
        let write = AtomicWrite::new(reprs).expect("consecutive");
        let results = store.write_messages(vec![write]).await.expect("fill");
        assert!(results.iter().all(Result::is_ok), "fill");
        next = last + 1;
    }
}

/// Persist latencies (µs) and failures of one phase.
struct Phase {
    latency: Histogram<u64>,
    failed: u64,
    seconds: f64,
}

impl Phase {
    fn ms(&self, quantile: f64) -> f64 {
        self.latency.value_at_quantile(quantile) as f64 / 1000.0
    }
}

/// Persists every `period` until `done` resolves (or `count` persists when `done` is `None`),
/// each awaited on a task of its own (open loop).
async fn persist_loop(
    writer: &Addr<Counter>,
    period: Duration,
    count: Option<u32>,
    mut done: Option<tokio::task::JoinHandle<()>>,
) -> Phase {
    let started = Instant::now();
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut sent = 0u32;
    loop {
        ticker.tick().await;
        if let Some(count) = count {
            if sent == count {
                break;
            }
        }
        if let Some(handle) = &mut done {
            if handle.is_finished() {
                break;
            }
        }
        let request = writer.send(Add);
        let tx = tx.clone();
        let sent_at = Instant::now();
        actix::spawn(async move {
            let ok = matches!(request.await, Ok(Ok(_)));
            let _ = tx.send((sent_at.elapsed(), ok));
        });
        sent += 1;
    }
    drop(tx);
    let mut latency = Histogram::<u64>::new(3).expect("histogram");
    let mut failed = 0;
    while let Some((elapsed, ok)) = rx.recv().await {
        if ok {
            latency.record(elapsed.as_micros() as u64).expect("record");
        } else {
            failed += 1;
        }
    }
    Phase {
        latency,
        failed,
        seconds: started.elapsed().as_secs_f64(),
    }
}

async fn run(cli: &Cli, name: &str, store: Arc<dyn JournalStore>) {
    for i in 0..cli.replayers {
        fill(&*store, &format!("replayer-{i}"), cli.events).await;
    }
    let journal = JournalActor::start_with(Arc::clone(&store), JournalConfig::default());
    let period = Duration::from_millis(cli.period_ms);

    let writer = counter(journal.clone(), "writer", None, Duration::ZERO, cli.apply).start();
    writer.send(Total).await.expect("writer recovered");
    let baseline = persist_loop(&writer, period, Some(cli.baseline_persists), None).await;

    let permits = RecoveryPermits::new(cli.permits);
    let apply_for = Duration::from_micros(cli.apply_us);
    let mut arbiters = Vec::new();
    let mut replayers = Vec::new();
    for i in 0..cli.replayers {
        let pid = format!("replayer-{i}");
        let (journal, permits, apply) = (journal.clone(), permits.clone(), cli.apply);
        let make = move || counter(journal, &pid, Some(permits), apply_for, apply);
        let addr = match cli.placement {
            Placement::Shared => make().start(),
            Placement::Own => {
                let arbiter = Arbiter::new();
                let addr = Counter::start_in_arbiter(&arbiter.handle(), move |_| make());
                arbiters.push(arbiter);
                addr
            }
        };
        replayers.push(addr);
    }
    let events = cli.events;
    let replays_started = Instant::now();
    let all_recovered = actix::spawn(async move {
        for replayer in replayers {
            let total = replayer.send(Total).await.expect("replayer recovered");
            assert_eq!(total, events, "replayed every event");
        }
    });
    let loaded = persist_loop(&writer, period, None, Some(all_recovered)).await;
    let replay_seconds = replays_started.elapsed().as_secs_f64();
    for arbiter in arbiters {
        arbiter.stop();
    }
    println!(
        "| {} | {name} | {:?} | {} | {} x {} | {} µs {:?} | {} | {:.1} / {:.1} / {:.1} | {} | {:.1} / {:.1} / {:.1} | {} | {:.2} | {:.1} |",
        cli.build,
        cli.placement,
        cli.permits,
        cli.replayers,
        cli.events,
        cli.apply_us,
        cli.apply,
        baseline.latency.len(),
        baseline.ms(0.5),
        baseline.ms(0.99),
        baseline.ms(1.0),
        loaded.latency.len(),
        loaded.ms(0.5),
        loaded.ms(0.99),
        loaded.ms(1.0),
        loaded.failed + baseline.failed,
        loaded.ms(0.99) / baseline.ms(0.99),
        replay_seconds,
    );
    let _ = baseline.seconds;
    let _ = loaded.seconds;
}

fn main() {
    let cli = Cli::parse();
    println!(
        "| build | store | placement | permits | replays | apply | baseline persists | baseline p50 / p99 / max ms | persists during replays | p50 / p99 / max ms | failed persists | p99 ratio | replays took s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let system = System::new();
    system.block_on(async {
        if matches!(cli.store, Store::Sqlite | Store::Both) {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!("sqlite:{}", dir.path().join("journal.db").display());
            let journal = SqliteJournal::connect(&SqliteJournalOptions {
                replay_batch_size: cli.replay_batch_size,
                ..SqliteJournalOptions::new(url)
            })
            .await
            .expect("open SQLite");
            run(&cli, "SQLite", Arc::new(journal)).await;
        }
        if matches!(cli.store, Store::Postgres | Store::Both) {
            let Some(db) = TestDatabase::create().await else {
                eprintln!("PostgreSQL skipped: DATABASE_URL not set");
                return;
            };
            let journal = PostgresJournal::connect(&PostgresJournalOptions {
                replay_batch_size: cli.replay_batch_size,
                ..PostgresJournalOptions::new(db.url())
            })
            .await
            .expect("connect");
            run(&cli, "PostgreSQL", Arc::new(journal.clone())).await;
            journal.close().await;
        }
    });
}
