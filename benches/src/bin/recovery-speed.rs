//! Recovery speed: events replayed per second by one persistent actor whose journal holds N
//! events (default 1,000,000), on SQLite and on PostgreSQL, without a snapshot and with one
//! 1,000 events before the end. The events are the catch-up benchmark's
//! ([`bench_event`]: about 100 bytes of JSON, tagged), decoded into the actor's event type.
//!
//! `cargo run --release -p actix-persistence-bench --bin recovery-speed -- [events] [sqlite|postgres|both] [replay-batch-size] [rounds] [payload-bytes]`
//! (PostgreSQL through DATABASE_URL; a throwaway database is created and dropped; `rounds`
//! recoveries of the full history per store, default 1, on PostgreSQL after `ANALYZE`;
//! `payload-bytes`: each event's JSON padded to about that many bytes, default 0: unpadded). Each
//! store prints `<store>: ... written` on stderr before its replay starts (for profiling
//! the replay alone, e.g. `perf record -p` from that moment).

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use actix_persistence_bench::bench_event::{self, Deposited};
use actix_persistence_core::journal::{JournalActor, JournalConfig};
use actix_persistence_core::persistent::{
    start_recovery, EventSourced, PersistenceState, PersistentActor, Snapshotting,
};
use actix_persistence_core::snapshot::{SerializedSnapshot, SnapshotMetadata, SnapshotStore};
use actix_persistence_core::{AtomicWrite, JournalStore};
use actix_persistence_sql::test_util::TestDatabase;
use actix_persistence_sql::{
    PostgresJournal, PostgresJournalOptions, SqliteJournal, SqliteJournalOptions,
};

const PID: &str = "recovery-speed";
const SNAPSHOT_BEFORE_END: u64 = 1_000;
const EVENTS_PER_WRITE: u64 = 1_000;

/// A counter that snapshots its total.
struct Counter {
    persistence: PersistenceState<Self>,
    total: u64,
    replayed: u64,
}

impl Actor for Counter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        start_recovery(self, ctx);
    }
}

impl EventSourced for Counter {
    type Event = Deposited;

    fn apply(&mut self, event: &Deposited) {
        self.total += event.amount;
        self.replayed += 1;
    }

    fn snapshotting() -> Option<Snapshotting<Self>> {
        Some(Snapshotting::json(
            |counter: &Self| counter.total,
            |counter, total| counter.total = total,
        ))
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

/// Answered once recovery completed: (total, events replayed, last seq_nr).
#[derive(Message)]
#[rtype(result = "(u64, u64, u64)")]
struct Recovered;

impl Handler<Recovered> for Counter {
    type Result = MessageResult<Recovered>;

    fn handle(&mut self, _: Recovered, _: &mut Context<Self>) -> Self::Result {
        MessageResult((self.total, self.replayed, self.last_seq_nr()))
    }
}

/// Fills the journal with `events` deposits of 1 ([`bench_event`]: about 100 bytes of JSON,
/// tagged, as the catch-up benchmark's; padded to about `payload_bytes` when larger),
/// `EVENTS_PER_WRITE` per atomic write.
async fn fill(store: &dyn JournalStore, events: u64, payload_bytes: usize) -> Duration {
    let started = Instant::now();
    let mut next = 1;
    while next <= events {
        let last = (next + EVENTS_PER_WRITE - 1).min(events);
        let reprs = (next..=last)
            .map(|seq_nr| bench_event::repr_padded(PID, seq_nr, "recovery-speed", payload_bytes))
            .collect();
        let write = AtomicWrite::new(reprs).expect("consecutive events");
        let results = store
            .write_messages(vec![write])
            .await
            .expect("fill the journal");
        assert!(results.iter().all(Result::is_ok), "fill the journal");
        next = last + 1;
    }
    started.elapsed()
}

/// CPU time of this process so far (every thread: the actor's and SQLite's workers), seconds.
fn process_cpu_seconds() -> f64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to fill.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) } != 0 {
        return f64::NAN;
    }
    now.tv_sec as f64 + now.tv_nsec as f64 / 1e9
}

/// Recovers a fresh incarnation and returns (seconds, events replayed, CPU seconds of this
/// process meanwhile).
async fn recover(
    store: Arc<dyn JournalStore>,
    snapshots: Arc<dyn SnapshotStore>,
    events: u64,
) -> (f64, u64, f64) {
    let journal = JournalActor::start_with(store, JournalConfig::default());
    let persistence = PersistenceState::new(journal, PID)
        .expect("valid id")
        .with_snapshot_store(snapshots, Duration::from_secs(60))
        .with_recovery_timeout(Duration::from_secs(120));
    let cpu = process_cpu_seconds();
    let started = Instant::now();
    let counter = Counter {
        persistence,
        total: 0,
        replayed: 0,
    }
    .start();
    let (total, replayed, last) = counter.send(Recovered).await.expect("recovered");
    let seconds = started.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds() - cpu;
    assert_eq!(
        (total, last),
        (events, events),
        "the recovered state is complete"
    );
    (seconds, replayed, cpu)
}

async fn measure(
    name: &str,
    store: Arc<dyn JournalStore>,
    snapshots: Arc<dyn SnapshotStore>,
    events: u64,
    analyze: Option<&str>,
    rounds: u32,
    payload_bytes: usize,
) {
    let filled = fill(&*store, events, payload_bytes).await;
    eprintln!(
        "{name}: {events} events written in {:.1} s",
        filled.as_secs_f64()
    );
    let (seconds, replayed, cpu) =
        recover(Arc::clone(&store), Arc::clone(&snapshots), events).await;
    println!(
        "| {name} | {events} | none | {replayed} | {seconds:.2} | {:.0} | {cpu:.2} |",
        replayed as f64 / seconds
    );
    if let Some(url) = analyze {
        // A table filled a moment ago has no statistics yet; autovacuum would add them soon.
        use sqlx::{Connection, Executor};
        let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
        conn.execute("ANALYZE journal").await.expect("analyze");
    }
    let label = if analyze.is_some() {
        " (after ANALYZE)"
    } else {
        ""
    };
    let more = if analyze.is_some() {
        rounds
    } else {
        rounds - 1
    };
    for _ in 0..more {
        let (seconds, replayed, cpu) =
            recover(Arc::clone(&store), Arc::clone(&snapshots), events).await;
        println!(
            "| {name}{label} | {events} | none | {replayed} | {seconds:.2} | {:.0} | {cpu:.2} |",
            replayed as f64 / seconds
        );
    }
    let at = events - SNAPSHOT_BEFORE_END;
    let metadata = SnapshotMetadata {
        persistence_id: PID.to_owned(),
        seq_nr: at,
        timestamp: 1,
    };
    let snapshot = SerializedSnapshot::json(&at).expect("json");
    snapshots
        .save(metadata, snapshot)
        .await
        .expect("save the snapshot");
    let (seconds, replayed, cpu) = recover(store, snapshots, events).await;
    println!(
        "| {name} | {events} | at {at} | {replayed} | {seconds:.3} | {:.0} | {cpu:.3} |",
        replayed as f64 / seconds
    );
}

/// With the `mimalloc` feature this benchmark allocates through mimalloc (see `Cargo.toml`).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let events: u64 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000)
        .max(SNAPSHOT_BEFORE_END + 1);
    let stores = std::env::args().nth(2).unwrap_or_else(|| "both".to_owned());
    let page: Option<u32> = std::env::args()
        .nth(3)
        .and_then(|n| n.parse().ok())
        .filter(|&n| n > 0);
    let rounds: u32 = std::env::args()
        .nth(4)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
        .max(1);
    let payload_bytes: usize = std::env::args()
        .nth(5)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let (sqlite, postgres) = (stores != "postgres", stores != "sqlite");
    System::new().block_on(async move {
        println!(
            "| store | events stored | snapshot | events replayed | seconds | replayed events/s | CPU s (this process) |"
        );
        println!("|---|---|---|---|---|---|---|");
        let dir = tempfile::tempdir().expect("temp dir");
        if sqlite {
            let url = format!("sqlite:{}", dir.path().join("journal.db").display());
            let mut options = SqliteJournalOptions::new(url);
            if let Some(page) = page {
                options.replay_batch_size = page;
            }
            let sqlite = SqliteJournal::connect(&options)
                .await
                .expect("open SQLite");
            let snapshots = Arc::new(sqlite.snapshot_store());
            measure(
                "SQLite",
                Arc::new(sqlite),
                snapshots,
                events,
                None,
                rounds,
                payload_bytes,
            )
            .await;
        }
        let db = if postgres {
            TestDatabase::create().await
        } else {
            None
        };
        if let Some(db) = db {
            let mut options = PostgresJournalOptions::new(db.url());
            if let Some(page) = page {
                options.replay_batch_size = page;
            }
            let postgres = PostgresJournal::connect(&options)
                .await
                .expect("connect to PostgreSQL");
            let snapshots = Arc::new(postgres.snapshot_store());
            measure(
                "PostgreSQL",
                Arc::new(postgres),
                snapshots,
                events,
                Some(db.url()),
                rounds,
                payload_bytes,
            )
            .await;
        }
    });
}
