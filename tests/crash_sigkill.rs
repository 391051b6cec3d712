//! Crash harness: SIGKILL at seeded random moments, then check everything that was promised.
//!
//! Each test runs a child process (this test binary again, see [`child`]) in which 20 persistent
//! actors persist as fast as they can (`persist` and `persist_all`, tags, snapshots, optionally
//! deleting the events snapshots cover) while an exactly-once and an at-least-once projection
//! run. The child prints every acknowledged write; the parent SIGKILLs it at a moment drawn
//! from a seeded generator (soon after start, during recovery, mid-load, during a clean shutdown,
//! while projections save their offsets), then checks the store (see [`verify_store`]):
//!
//! - every acknowledged event is stored, once, at its sequence number, with its payload and tags;
//! - each id's stored sequence numbers are contiguous (from 1 unless events were deleted) and its
//!   highest never goes down;
//! - the next run's recovery equals the store (the same events, in order, from the same runs);
//! - the current queries by persistence id, by slices and by tag deliver the stored events
//!   exactly, each once, each id's in order;
//! - the exactly-once projection's effects equal its progress (never one applied twice or
//!   skipped), and run to completion they equal the store; the at-least-once projection skips
//!   nothing;
//! - with two processes on the same ids, at most one writer per id ever has its writes
//!   acknowledged at a time (fencing).
//!
//! Loops of one test share one store, so later loops recover what earlier kills left. On SQLite
//! (a file in a temporary directory) and PostgreSQL (a throwaway database per test, see
//! [`TestDatabase`]; skipped without `DATABASE_URL`).
//!
//! Environment: `CRASH_LOOPS` kills per test (default 1, what CI runs), `CRASH_SEED` the seed
//! of the kill moments and batch sizes (default 1). A soak:
//!
//! ```text
//! CRASH_LOOPS=30 CRASH_SEED=7 cargo test --test crash_sigkill -- --test-threads=1
//! ```
//!
//! A failure panics with `[<test> seed <seed> loop <loop> (<kill moment>)] <what was violated>`
//! and the command that repeats the same kill moments (`CRASH_SEED=<seed> CRASH_LOOPS=<loop+1>`).
//! The process timing itself is not reproducible, so a rare failure may need a few repeats.

mod child;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io::{BufRead, BufReader};
use std::num::NonZeroU64;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use actix_persistence::actix::{Actor, Addr, Context, Handler, Message, MessageResult};
use actix_persistence::projection::query::{EventEnvelope, QuerySettings};
use actix_persistence::projection::{
    Grouping, HandlerError, PostgresOffsetStore, Projection, ProjectionHandle, ProjectionId,
    ProjectionState, QuerySource, SaveOffset, SqliteOffsetStore, TransactionalGroupedHandler,
    TransactionalHandler,
};
use actix_persistence::query::{EnvelopeStream, Offset, ReadJournal};
use actix_persistence::{
    EventSourced, JournalStore, PersistReply, PersistResult, Persistence, PersistenceState,
    PersistentActor, PostgresJournal, PostgresJournalOptions, Settings, SnapshotPolicy,
    Snapshotting, SqliteJournal, SqliteJournalOptions, MAX_SEQ_NR,
};
use actix_persistence_sql::test_util::TestDatabase;
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};

child_entry_point!(run_child);

/// The entity type of every persistence id (the slice queries select it).
const ENTITY_TYPE: &str = "Crash";
/// The tag of every event.
const TAG_ALL: &str = "crash-all";
/// The second tag of every event whose sequence number is a multiple of 3.
const TAG_EVERY_THIRD: &str = "crash-every-3rd";
/// The exactly-once projection's effects: one row per handled event, in the journal's database.
const EFFECT_TABLE: &str = "crash_effects";
/// The child role (`child::ROLE`) of this harness.
const WRITER_ROLE: &str = "write-until-killed";
/// How long a child may run before the harness calls it hung.
const CHILD_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a store read after a crash may take before the harness calls it hung.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

fn persistence_id(actor: usize) -> String {
    format!("{ENTITY_TYPE}|a{actor}")
}

fn persistence_ids(workload: &Workload) -> Vec<String> {
    (0..workload.actors).map(persistence_id).collect()
}

fn tags_of(seq_nr: u64) -> Vec<String> {
    if seq_nr % 3 == 0 {
        vec![TAG_ALL.to_owned(), TAG_EVERY_THIRD.to_owned()]
    } else {
        vec![TAG_ALL.to_owned()]
    }
}

fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres")
}

fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite:{}", dir.path().join("journal.db").display())
}

// ---------------------------------------------------------------------------------------------
// What a child does

/// What a child process does. It travels to the child as `key=value,...` in `child::ARG`; the
/// database URL travels in `child::URL`.
#[derive(Debug, Clone)]
struct Workload {
    /// Persistent actors writing (`Crash|a0`, `Crash|a1`, ...).
    actors: usize,
    /// A snapshot every this many events (0: no snapshots).
    snapshot_every: u64,
    /// Snapshots delete the events they cover (keeping two snapshots).
    delete_events: bool,
    /// The child runs both projections and the parent checks them.
    projections: bool,
    /// The exactly-once projection is grouped (`grouped_exactly_once`).
    grouped: bool,
    /// The exactly-once projection's `max_concurrency`.
    max_concurrency: usize,
    /// The child stops writing after this many ms and shuts down cleanly (0: never).
    stop_writing_after_ms: u64,
    /// Seeds the child's batch sizes.
    seed: u64,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            actors: 20,
            snapshot_every: 50,
            delete_events: false,
            projections: true,
            grouped: false,
            max_concurrency: 1,
            stop_writing_after_ms: 0,
            seed: 0,
        }
    }
}

impl Workload {
    /// The child's argument: this workload and the number of the run (stored in its events).
    fn encode(&self, run: u32) -> String {
        format!(
            "run={run},actors={},snapshot_every={},delete_events={},projections={},grouped={},\
             max_concurrency={},stop_writing_after_ms={},seed={}",
            self.actors,
            self.snapshot_every,
            self.delete_events,
            self.projections,
            self.grouped,
            self.max_concurrency,
            self.stop_writing_after_ms,
            self.seed
        )
    }

    fn decode(arg: &str) -> (Workload, u32) {
        let fields: HashMap<&str, &str> = arg
            .split(',')
            .map(|pair| pair.split_once('=').expect("the argument is key=value,..."))
            .collect();
        let field = |key: &str| -> &str {
            fields
                .get(key)
                .unwrap_or_else(|| panic!("the argument lacks {key}: {arg}"))
        };
        let number = |key: &str| -> u64 {
            field(key)
                .parse()
                .unwrap_or_else(|_| panic!("{key} is not a number: {arg}"))
        };
        let workload = Workload {
            actors: number("actors") as usize,
            snapshot_every: number("snapshot_every"),
            delete_events: field("delete_events") == "true",
            projections: field("projections") == "true",
            grouped: field("grouped") == "true",
            max_concurrency: number("max_concurrency") as usize,
            stop_writing_after_ms: number("stop_writing_after_ms"),
            seed: number("seed"),
        };
        (workload, number("run") as u32)
    }
}

/// The event every actor persists: where it belongs (so a payload stored at the wrong place
/// shows) and which child run wrote it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Written {
    persistence_id: String,
    seq_nr: u64,
    run: u32,
}

/// A hash of (seq_nr, run). Recovery sums it over the events it applied; the parent sums it
/// over what the store held, so recovering another run's event at a sequence number shows.
fn fingerprint(seq_nr: u64, run: u32) -> u64 {
    let seq_part = seq_nr.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let run_part = (u64::from(run) + 1).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    (seq_part ^ run_part).rotate_left(17)
}

/// SplitMix64: a small seeded generator, the same sequence on every platform.
struct SeededRandom(u64);

impl SeededRandom {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (0 when `bound` is 0).
    fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            0
        } else {
            self.next_u64() % bound
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The child: persistent actors and projections, printing what was acknowledged

/// What an actor applied: the child prints it once recovered, the parent recomputes it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct AppliedState {
    last_seq_nr: u64,
    applied: u64,
    fingerprint_sum: u64,
    /// Events applied out of sequence or of another id (must stay 0).
    out_of_order: u64,
}

/// A persistent actor that persists `Written` events and sums what it applied.
struct Counter {
    persistence: PersistenceState<Self>,
    run: u32,
    state: AppliedState,
}

impl Actor for Counter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        actix_persistence::start_recovery(self, ctx);
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

impl EventSourced for Counter {
    type Event = Written;

    fn apply(&mut self, event: &Written) {
        let in_sequence = event.seq_nr == self.state.last_seq_nr + 1
            && event.seq_nr == self.persistence.last_seq_nr()
            && event.persistence_id == self.persistence.persistence_id();
        if !in_sequence {
            self.state.out_of_order += 1;
        }
        self.state.last_seq_nr = event.seq_nr;
        self.state.applied += 1;
        self.state.fingerprint_sum = self
            .state
            .fingerprint_sum
            .wrapping_add(fingerprint(event.seq_nr, event.run));
    }

    fn tags(&self, event: &Written) -> Vec<String> {
        tags_of(event.seq_nr)
    }

    fn snapshotting() -> Option<Snapshotting<Self>> {
        Some(Snapshotting::json(
            |counter: &Counter| counter.state,
            |counter: &mut Counter, state: AppliedState| counter.state = state,
        ))
    }
}

/// Persist this many events (one with `persist`, more with `persist_all`); answers the first
/// and last sequence number written.
#[derive(Message)]
#[rtype(result = "PersistResult<(u64, u64)>")]
struct PersistEvents(u64);

impl Handler<PersistEvents> for Counter {
    type Result = PersistReply<(u64, u64)>;

    fn handle(&mut self, msg: PersistEvents, ctx: &mut Context<Self>) -> Self::Result {
        let first = self.last_seq_nr() + 1;
        let mut events: Vec<Written> = (first..first + msg.0)
            .map(|seq_nr| Written {
                persistence_id: self.persistence_id().to_owned(),
                seq_nr,
                run: self.run,
            })
            .collect();
        if events.len() == 1 {
            let event = events.pop().expect("one event");
            self.persist(ctx, event, |_, event, _| (event.seq_nr, event.seq_nr))
        } else {
            self.persist_all(ctx, events, |_, events, _| {
                (events[0].seq_nr, events[events.len() - 1].seq_nr)
            })
        }
    }
}

/// The applied state, with the persistence state's last sequence number (answered once
/// recovered: the mailbox opens only then).
#[derive(Message)]
#[rtype(result = "AppliedState")]
struct GetAppliedState;

impl Handler<GetAppliedState> for Counter {
    type Result = MessageResult<GetAppliedState>;

    fn handle(&mut self, _: GetAppliedState, _: &mut Context<Self>) -> Self::Result {
        MessageResult(AppliedState {
            last_seq_nr: self.last_seq_nr(),
            ..self.state
        })
    }
}

/// The exactly-once handler: one effect row per event, in the projection's transaction.
struct EffectRecorder;

const INSERT_EFFECT_SQLITE: &str =
    "INSERT INTO crash_effects (persistence_id, seq_nr, run) VALUES (?, ?, ?)";
const INSERT_EFFECT_POSTGRES: &str =
    "INSERT INTO crash_effects (persistence_id, seq_nr, run) VALUES ($1, $2, $3)";

/// Implements the one-at-a-time and grouped exactly-once handler for one database.
macro_rules! record_effects_in {
    ($database:ty, $insert:expr) => {
        #[async_trait::async_trait]
        impl TransactionalHandler<EventEnvelope<Written>, sqlx::Transaction<'static, $database>>
            for EffectRecorder
        {
            async fn process(
                &self,
                tx: &mut sqlx::Transaction<'static, $database>,
                envelope: &EventEnvelope<Written>,
            ) -> Result<(), HandlerError> {
                sqlx::query($insert)
                    .bind(&*envelope.persistence_id)
                    .bind(envelope.seq_nr as i64)
                    .bind(i64::from(envelope.event.run))
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            }
        }

        #[async_trait::async_trait]
        impl
            TransactionalGroupedHandler<
                EventEnvelope<Written>,
                sqlx::Transaction<'static, $database>,
            > for EffectRecorder
        {
            async fn process(
                &self,
                tx: &mut sqlx::Transaction<'static, $database>,
                envelopes: &[EventEnvelope<Written>],
            ) -> Result<(), HandlerError> {
                for envelope in envelopes {
                    TransactionalHandler::process(self, tx, envelope).await?;
                }
                Ok(())
            }
        }
    };
}

record_effects_in!(sqlx::Sqlite, INSERT_EFFECT_SQLITE);
record_effects_in!(sqlx::Postgres, INSERT_EFFECT_POSTGRES);

/// (persistence id, seq_nr) pairs the at-least-once projection handled.
type HandledEvents = Arc<Mutex<Vec<(String, u64)>>>;

/// The at-least-once handler: in a child it prints `HANDLED <pid> <seq_nr>`, in the parent's
/// final run it collects.
enum HandledRecorder {
    Print,
    Collect(HandledEvents),
}

#[async_trait::async_trait]
impl actix_persistence::projection::Handler<EventEnvelope<Written>> for HandledRecorder {
    async fn process(&self, envelope: &EventEnvelope<Written>) -> Result<(), HandlerError> {
        match self {
            HandledRecorder::Print => child::say(&format!(
                "HANDLED {} {}",
                envelope.persistence_id, envelope.seq_nr
            )),
            HandledRecorder::Collect(handled) => handled
                .lock()
                .expect("no recorder panicked")
                .push((envelope.persistence_id.to_string(), envelope.seq_nr)),
        }
        Ok(())
    }
}

/// The journal of either database, for what the harness does besides persisting: projections,
/// replays, queries and its own SQL.
enum SqlJournal {
    Sqlite(SqliteJournal),
    Postgres(PostgresJournal),
}

impl SqlJournal {
    async fn open(url: &str) -> SqlJournal {
        if is_postgres(url) {
            let options = PostgresJournalOptions::new(url);
            SqlJournal::Postgres(
                PostgresJournal::connect(&options)
                    .await
                    .expect("open PostgreSQL"),
            )
        } else {
            let options = SqliteJournalOptions::new(url);
            SqlJournal::Sqlite(SqliteJournal::connect(&options).await.expect("open SQLite"))
        }
    }

    fn store(&self) -> Arc<dyn JournalStore> {
        match self {
            SqlJournal::Sqlite(journal) => Arc::new(journal.clone()),
            SqlJournal::Postgres(journal) => Arc::new(journal.clone()),
        }
    }

    fn read_journal(&self, refresh_interval: Duration) -> ReadJournal {
        let settings = QuerySettings {
            refresh_interval,
            ..Default::default()
        };
        match self {
            SqlJournal::Sqlite(journal) => ReadJournal::new(journal.clone(), settings),
            SqlJournal::Postgres(journal) => ReadJournal::new(journal.clone(), settings),
        }
    }

    async fn execute(&self, sql: &str) {
        let done = match self {
            SqlJournal::Sqlite(journal) => sqlx::query(sql)
                .execute(journal.writer_pool())
                .await
                .map(drop),
            SqlJournal::Postgres(journal) => {
                sqlx::query(sql).execute(journal.pool()).await.map(drop)
            }
        };
        done.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn create_effect_table(&self) {
        let sql = match self {
            SqlJournal::Sqlite(_) => {
                "CREATE TABLE IF NOT EXISTS crash_effects (id INTEGER PRIMARY KEY AUTOINCREMENT, \
                 persistence_id TEXT NOT NULL, seq_nr INTEGER NOT NULL, run INTEGER NOT NULL)"
            }
            SqlJournal::Postgres(_) => {
                "CREATE TABLE IF NOT EXISTS crash_effects (id BIGSERIAL PRIMARY KEY, \
                 persistence_id TEXT NOT NULL, seq_nr BIGINT NOT NULL, run BIGINT NOT NULL)"
            }
        };
        self.execute(sql).await;
    }

    /// The exactly-once effects in the order they were committed: (pid, seq_nr, run).
    async fn effects(&self) -> Vec<(String, i64, i64)> {
        let sql = format!("SELECT persistence_id, seq_nr, run FROM {EFFECT_TABLE} ORDER BY id");
        let effects = match self {
            SqlJournal::Sqlite(journal) => {
                sqlx::query_as(&sql).fetch_all(journal.writer_pool()).await
            }
            SqlJournal::Postgres(journal) => sqlx::query_as(&sql).fetch_all(journal.pool()).await,
        };
        effects.expect("read the exactly-once effects")
    }

    async fn close(&self) {
        match self {
            SqlJournal::Sqlite(journal) => journal.close().await,
            SqlJournal::Postgres(journal) => journal.close().await,
        }
    }
}

/// The two projections of a workload.
struct Projections {
    /// By slices (every id), exactly-once into `crash_effects`.
    exactly_once: ProjectionHandle<Offset>,
    /// By tag `crash-all`, at-least-once, saving its offset every 37 envelopes or 100 ms.
    at_least_once: ProjectionHandle<Offset>,
}

/// Starts the two projections: live (`to_completion` false) or over the current events only.
fn start_projections(
    workload: &Workload,
    journal: &SqlJournal,
    to_completion: bool,
    handled: HandledRecorder,
) -> Projections {
    let read_journal = journal.read_journal(Duration::from_millis(50));
    let by_slices = QuerySource::<Written>::events_by_slices(
        read_journal.clone(),
        ENTITY_TYPE.to_owned(),
        0,
        1023,
    );
    let by_tag = QuerySource::<Written>::events_by_tag(read_journal, TAG_ALL.to_owned());
    let (by_slices, by_tag) = if to_completion {
        (by_slices.current(), by_tag.current())
    } else {
        (by_slices, by_tag)
    };
    let exactly_once_id = ProjectionId::for_slices("crash-exactly-once", 0, 1023);
    let at_least_once_id = ProjectionId::for_tag("crash-at-least-once", TAG_ALL);
    let grouping = Grouping {
        size: 20,
        within: Duration::from_millis(20),
    };
    let save_offset = SaveOffset {
        after_envelopes: 37,
        after: Duration::from_millis(100),
    };
    macro_rules! start_with {
        ($offset_store:expr) => {{
            let exactly_once = if workload.grouped {
                Projection::grouped_exactly_once(
                    exactly_once_id,
                    by_slices,
                    $offset_store,
                    grouping,
                    EffectRecorder,
                )
            } else {
                Projection::exactly_once(exactly_once_id, by_slices, $offset_store, EffectRecorder)
            };
            let at_least_once =
                Projection::at_least_once(at_least_once_id, by_tag, $offset_store, handled)
                    .with_save_offset(save_offset);
            Projections {
                exactly_once: exactly_once
                    .with_max_concurrency(workload.max_concurrency)
                    .start(),
                at_least_once: at_least_once.start(),
            }
        }};
    }
    match journal {
        SqlJournal::Sqlite(journal) => {
            start_with!(SqliteOffsetStore::new(journal.writer_pool().clone()))
        }
        SqlJournal::Postgres(journal) => {
            start_with!(PostgresOffsetStore::of_journal(journal))
        }
    }
}

/// The child: starts the actors (and projections), writes from every actor until killed or
/// until `stop_writing_after_ms`, then shuts down cleanly. Prints, one line each:
/// `STARTED`, `RECOVERED <pid> <last_seq_nr> <applied> <fingerprint_sum> <out_of_order>`,
/// `ACK <pid> <first> <last>`, `HANDLED <pid> <seq_nr>`, `ERROR <pid> <error>`,
/// `STOPPING_PROJECTIONS`, `SHUTTING_DOWN`, `SHUT_DOWN`.
fn run_child(role: &str, url: &str, arg: &str) {
    assert_eq!(role, WRITER_ROLE, "unknown child role");
    let (workload, run) = Workload::decode(arg);
    actix_persistence::actix::System::new().block_on(async move {
        let settings = Settings::loader()
            .toml_str("crash", &journal_settings_toml(url))
            .load()
            .expect("valid settings");
        let persistence = Persistence::start_with(settings)
            .await
            .expect("persistence starts");
        child::say("STARTED");
        let projections = if workload.projections {
            let journal = SqlJournal::open(url).await;
            journal.create_effect_table().await;
            let started = start_projections(&workload, &journal, false, HandledRecorder::Print);
            Some((journal, started))
        } else {
            None
        };
        let stop_writing = Arc::new(AtomicBool::new(false));
        let mut random = SeededRandom(workload.seed ^ (u64::from(run) << 32));
        let writers: Vec<_> = (0..workload.actors)
            .map(|actor| {
                let counter = start_counter(&persistence, &workload, actor, run);
                let random = SeededRandom(random.next_u64());
                write_until_stopped(counter, persistence_id(actor), random, stop_writing.clone())
            })
            .collect();
        if workload.stop_writing_after_ms > 0 {
            let after = Duration::from_millis(workload.stop_writing_after_ms);
            actix::spawn(async move {
                tokio::time::sleep(after).await;
                stop_writing.store(true, Ordering::Relaxed);
            });
        }
        futures::future::join_all(writers).await;
        // Reached only with `stop_writing_after_ms`: a clean shutdown.
        if let Some((journal, projections)) = projections {
            child::say("STOPPING_PROJECTIONS");
            projections.exactly_once.stop().await;
            projections.at_least_once.stop().await;
            journal.close().await;
        }
        child::say("SHUTTING_DOWN");
        persistence.shutdown().await;
        child::say("SHUT_DOWN");
    });
}

fn journal_settings_toml(url: &str) -> String {
    let plugin = if is_postgres(url) {
        "postgres"
    } else {
        "sqlite"
    };
    format!("[journal]\nplugin = \"{plugin}\"\n[journal.{plugin}]\nurl = \"{url}\"\n")
}

fn start_counter(
    persistence: &Persistence,
    workload: &Workload,
    actor: usize,
    run: u32,
) -> Addr<Counter> {
    let mut state = persistence
        .state(persistence_id(actor))
        .expect("a valid persistence id");
    if let Some(every) = NonZeroU64::new(workload.snapshot_every) {
        let mut policy = SnapshotPolicy::every(every.get());
        if workload.delete_events {
            policy = policy.keep(2).delete_events(true);
        }
        state = state.with_snapshot_policy(policy);
    }
    Counter {
        persistence: state,
        run,
        state: AppliedState::default(),
    }
    .start()
}

/// Prints the recovered state, then persists batches of 1 (two thirds) or 2..=5 events, printing
/// each acknowledgement, until `stop` is set or a write fails.
async fn write_until_stopped(
    counter: Addr<Counter>,
    pid: String,
    mut random: SeededRandom,
    stop: Arc<AtomicBool>,
) {
    match counter.send(GetAppliedState).await {
        Ok(state) => child::say(&format!(
            "RECOVERED {pid} {} {} {} {}",
            state.last_seq_nr, state.applied, state.fingerprint_sum, state.out_of_order
        )),
        Err(e) => return child::say(&format!("ERROR {pid} recovery {e:?}")),
    }
    while !stop.load(Ordering::Relaxed) {
        let batch = if random.below(3) == 0 {
            2 + random.below(4)
        } else {
            1
        };
        match counter.send(PersistEvents(batch)).await {
            Ok(Ok((first, last))) => child::say(&format!("ACK {pid} {first} {last}")),
            Ok(Err(e)) => return child::say(&format!("ERROR {pid} {e:?}")),
            Err(e) => return child::say(&format!("ERROR {pid} mailbox {e:?}")),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The parent: running and killing children

/// Everything a child printed, parsed.
#[derive(Default, Debug)]
struct ChildOutput {
    started: bool,
    /// Per id: the state its actor recovered to.
    recovered: BTreeMap<String, AppliedState>,
    /// Per id: the acknowledged writes (first, last seq_nr), in the order acknowledged.
    acknowledged: BTreeMap<String, Vec<(u64, u64)>>,
    /// What the at-least-once projection handled.
    handled: Vec<(String, u64)>,
    /// `<pid> <error>` of every failed recovery or write.
    errors: Vec<String>,
    stopping_projections: bool,
    shutting_down: bool,
    shut_down: bool,
}

impl ChildOutput {
    fn record(&mut self, line: &str) {
        let numbers = |text: &str| -> Vec<u64> {
            text.split(' ')
                .map(|n| n.parse().unwrap_or_else(|_| panic!("a number in {line:?}")))
                .collect()
        };
        if let Some(error) = child::after(line, "ERROR ") {
            self.errors.push(error.to_owned());
        } else if let Some(fields) = child::after(line, "RECOVERED ") {
            let (pid, rest) = fields.split_once(' ').expect("RECOVERED <pid> <numbers>");
            let [last_seq_nr, applied, fingerprint_sum, out_of_order] = numbers(rest)[..] else {
                panic!("four numbers in {line:?}");
            };
            let state = AppliedState {
                last_seq_nr,
                applied,
                fingerprint_sum,
                out_of_order,
            };
            self.recovered.insert(pid.to_owned(), state);
        } else if let Some(fields) = child::after(line, "ACK ") {
            let (pid, rest) = fields.split_once(' ').expect("ACK <pid> <first> <last>");
            let [first, last] = numbers(rest)[..] else {
                panic!("two numbers in {line:?}");
            };
            let writes = self.acknowledged.entry(pid.to_owned()).or_default();
            writes.push((first, last));
        } else if let Some(fields) = child::after(line, "HANDLED ") {
            let (pid, seq_nr) = fields.split_once(' ').expect("HANDLED <pid> <seq_nr>");
            let seq_nr = seq_nr.parse().expect("a sequence number");
            self.handled.push((pid.to_owned(), seq_nr));
        } else if line.contains("STARTED") {
            self.started = true;
        } else if line.contains("STOPPING_PROJECTIONS") {
            self.stopping_projections = true;
        } else if line.contains("SHUTTING_DOWN") {
            self.shutting_down = true;
        } else if line.contains("SHUT_DOWN") {
            self.shut_down = true;
        }
    }

    fn acknowledged_writes(&self) -> usize {
        self.acknowledged.values().map(Vec::len).sum()
    }

    fn is_fenced(&self, pid: &str) -> bool {
        self.errors
            .iter()
            .any(|e| e.starts_with(&format!("{pid} ")))
    }

    fn highest_acknowledged(&self, pid: &str) -> Option<u64> {
        self.acknowledged.get(pid)?.last().map(|&(_, last)| last)
    }

    fn recovered_to(&self, pid: &str) -> Option<u64> {
        self.recovered.get(pid).map(|state| state.last_seq_nr)
    }

    fn summary(&self) -> String {
        format!(
            "started {}, {} recovered, {} writes acknowledged, {} handled at least once, \
             errors {}, shut down {}",
            self.started,
            self.recovered.len(),
            self.acknowledged_writes(),
            self.handled.len(),
            self.errors.len(),
            self.shut_down
        )
    }
}

/// When the parent SIGKILLs a child.
#[derive(Debug, Clone, Copy)]
enum KillPoint {
    /// This many ms after it was started.
    SinceStart(u64),
    /// This many ms after its first actor recovered (others are still recovering).
    SinceFirstRecovery(u64),
    /// This many ms after it began its clean shutdown.
    IntoShutdown(u64),
    /// This many ms after its projections began to stop (saving their offsets).
    IntoProjectionStop(u64),
    /// At once when this many writes were acknowledged.
    OnAcknowledgedWrites(usize),
}

impl KillPoint {
    /// How long after now to kill, once what the child printed so far shows this point's event.
    fn delay_once_reached(self, output: &ChildOutput) -> Option<Duration> {
        let reached = match self {
            KillPoint::SinceStart(_) => true,
            KillPoint::SinceFirstRecovery(_) => !output.recovered.is_empty(),
            KillPoint::IntoShutdown(_) => output.shutting_down,
            KillPoint::IntoProjectionStop(_) => output.stopping_projections,
            KillPoint::OnAcknowledgedWrites(writes) => output.acknowledged_writes() >= writes,
        };
        let ms = match self {
            KillPoint::SinceStart(ms)
            | KillPoint::SinceFirstRecovery(ms)
            | KillPoint::IntoShutdown(ms)
            | KillPoint::IntoProjectionStop(ms) => ms,
            KillPoint::OnAcknowledgedWrites(_) => 0,
        };
        reached.then_some(Duration::from_millis(ms))
    }
}

impl fmt::Display for KillPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KillPoint::SinceStart(ms) => write!(f, "kill {ms} ms after start"),
            KillPoint::SinceFirstRecovery(ms) => write!(f, "kill {ms} ms after first recovery"),
            KillPoint::IntoShutdown(ms) => write!(f, "kill {ms} ms into shutdown"),
            KillPoint::IntoProjectionStop(ms) => {
                write!(f, "kill {ms} ms into the projections' stop")
            }
            KillPoint::OnAcknowledgedWrites(n) => {
                write!(f, "kill after {n} acknowledged writes")
            }
        }
    }
}

/// Starts a child running `workload` as run `run`; its stdout lines arrive on the receiver.
fn spawn_writer(url: &str, workload: &Workload, run: u32) -> (Child, mpsc::Receiver<String>) {
    let mut process = child::spawn(WRITER_ROLE, url, &workload.encode(run));
    let stdout = process.stdout.take().expect("piped stdout");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    (process, received)
}

/// Runs a child and SIGKILLs it at `kill` (unless it ended first, which only a clean shutdown
/// may); returns what it printed and whether it was killed.
fn run_until_killed(
    url: &str,
    workload: &Workload,
    run: u32,
    kill: KillPoint,
) -> Result<(ChildOutput, bool), String> {
    let (mut process, lines) = spawn_writer(url, workload, run);
    let started = Instant::now();
    let give_up = started + CHILD_TIMEOUT;
    let mut output = ChildOutput::default();
    let mut kill_at = kill
        .delay_once_reached(&output)
        .map(|delay| started + delay);
    let mut killed = false;
    loop {
        let wait = kill_at.unwrap_or(give_up).min(give_up);
        match lines.recv_timeout(wait.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                output.record(&line);
                if kill_at.is_none() {
                    kill_at = kill
                        .delay_once_reached(&output)
                        .map(|delay| Instant::now() + delay);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                process.kill().expect("SIGKILL the child");
                if Instant::now() >= give_up {
                    let _ = process.wait();
                    return Err(format!(
                        "the child hung for {CHILD_TIMEOUT:?} ({})",
                        output.summary()
                    ));
                }
                killed = true;
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    // Lines already in the pipe were printed before the kill: they count too.
    for line in lines.iter() {
        output.record(&line);
    }
    let status = process.wait().expect("the child ends");
    if !killed && !status.success() {
        return Err(format!("the child failed: {status} ({})", output.summary()));
    }
    Ok((output, killed))
}

/// When the second of two writers on the same ids starts, and when each is killed.
#[derive(Debug, Clone, Copy)]
struct TwoWriterTiming {
    second_starts_after_ms: u64,
    first_killed_after_ms: u64,
    second_killed_after_ms: u64,
}

impl fmt::Display for TwoWriterTiming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "B starts {} ms after A, A killed {} ms later, B {} ms after that",
            self.second_starts_after_ms, self.first_killed_after_ms, self.second_killed_after_ms
        )
    }
}

/// Runs writer A (run `runs.0`), then B (run `runs.1`) on the same ids, and kills both.
fn run_two_writers(
    url: &str,
    workload: &Workload,
    runs: (u32, u32),
    timing: TwoWriterTiming,
) -> (ChildOutput, ChildOutput) {
    let collect = |lines: mpsc::Receiver<String>| {
        std::thread::spawn(move || {
            let mut output = ChildOutput::default();
            lines.iter().for_each(|line| output.record(&line));
            output
        })
    };
    let (mut first, first_lines) = spawn_writer(url, workload, runs.0);
    let first_output = collect(first_lines);
    std::thread::sleep(Duration::from_millis(timing.second_starts_after_ms));
    let (mut second, second_lines) = spawn_writer(url, workload, runs.1);
    let second_output = collect(second_lines);
    std::thread::sleep(Duration::from_millis(timing.first_killed_after_ms));
    first.kill().expect("SIGKILL writer A");
    std::thread::sleep(Duration::from_millis(timing.second_killed_after_ms));
    second.kill().expect("SIGKILL writer B");
    first.wait().expect("writer A ends");
    second.wait().expect("writer B ends");
    (
        first_output.join().expect("A's output"),
        second_output.join().expect("B's output"),
    )
}

// ---------------------------------------------------------------------------------------------
// Verification

/// `Err` names the rule a store, recovery, query or projection broke.
type Verdict = Result<(), String>;

macro_rules! violated {
    ($($message:tt)*) => {
        return Err(format!($($message)*))
    };
}

/// What the parent learned across the loops of one test.
#[derive(Default)]
struct History {
    /// Per id: which run wrote each sequence number (from the store and from acknowledgements).
    written_by: BTreeMap<String, BTreeMap<u64, u32>>,
    /// Per id: the highest stored sequence number at the last check.
    highest: BTreeMap<String, u64>,
    /// Every (pid, seq_nr) the at-least-once projection handled.
    handled_at_least_once: BTreeSet<(String, u64)>,
}

impl History {
    fn highest(&self, pid: &str) -> u64 {
        self.highest.get(pid).copied().unwrap_or(0)
    }

    fn written_by(&self, pid: &str, seq_nr: u64) -> Option<u32> {
        self.written_by.get(pid)?.get(&seq_nr).copied()
    }

    /// Every (pid, seq_nr) ever stored, deleted ones included.
    fn every_event(&self) -> BTreeSet<(String, u64)> {
        let ids = self.highest.iter();
        ids.flat_map(|(pid, &highest)| (1..=highest).map(move |seq_nr| (pid.clone(), seq_nr)))
            .collect()
    }
}

/// A stored event as replayed: its sequence number, payload and tags.
struct StoredEvent {
    seq_nr: u64,
    event: Written,
    tags: Vec<String>,
}

/// The stored events of `pid`, as a fresh recovery replays them.
async fn replay_stored(store: &dyn JournalStore, pid: &str) -> Result<Vec<StoredEvent>, String> {
    let replay = store
        .replay_messages(pid, 1, MAX_SEQ_NR, MAX_SEQ_NR)
        .map_ok(|repr| {
            let event = serde_json::from_slice(&repr.payload).expect("a Written payload");
            StoredEvent {
                seq_nr: repr.seq_nr,
                event,
                tags: repr.tags.to_vec(),
            }
        })
        .try_collect();
    match tokio::time::timeout(READ_TIMEOUT, replay).await {
        Err(_) => Err(format!("{pid}: the replay hung {READ_TIMEOUT:?}")),
        Ok(replayed) => replayed.map_err(|e| format!("{pid}: the replay failed: {e}")),
    }
}

/// Checks the store after a kill (or a clean exit) against what the runs in `outputs`
/// acknowledged, recovered and handled, and against what earlier checks found (`history`,
/// updated here). The rules, per id, then over all ids:
///
/// - [`check_stored_events`]: the journal's ordering and content;
/// - [`check_acknowledged`]: acknowledged means durable;
/// - [`check_recovered`]: recovery replays the store;
/// - [`check_query_delivers_exactly`]: the current queries deliver the store;
/// - [`check_exactly_once_effects`]: the exactly-once projection's effects.
async fn verify_store(
    url: &str,
    workload: &Workload,
    outputs: &[(u32, &ChildOutput)],
    history: &mut History,
) -> Verdict {
    if is_postgres(url) {
        wait_until_killed_connections_end(url).await?;
    }
    let journal = tokio::time::timeout(READ_TIMEOUT, SqlJournal::open(url))
        .await
        .map_err(|_| format!("opening the store after the kill hung {READ_TIMEOUT:?}"))?;
    let store = journal.store();
    let read_journal = journal.read_journal(Duration::from_millis(100));
    let mut all_stored = BTreeSet::new();
    let mut tagged_every_third = BTreeSet::new();
    for pid in persistence_ids(workload) {
        let stored = replay_stored(&*store, &pid).await?;
        let highest_before = history.highest(&pid);
        check_stored_events(&pid, &stored, workload, history)?;
        for &(run, output) in outputs {
            check_acknowledged(&pid, &stored, run, output, workload, history)?;
            let only_writer = outputs.len() == 1;
            check_recovered(&pid, run, output, only_writer, highest_before, history)?;
        }
        let highest = stored.last().map_or(0, |stored| stored.seq_nr);
        history.highest.insert(pid.clone(), highest);
        let by_id = read_journal.current_events_by_persistence_id(&pid, 0, MAX_SEQ_NR);
        let delivered = collect_query("current_events_by_persistence_id", by_id).await?;
        let delivered: Vec<u64> = delivered.into_iter().map(|(_, seq_nr)| seq_nr).collect();
        let expected: Vec<u64> = stored.iter().map(|stored| stored.seq_nr).collect();
        if delivered != expected {
            violated!(
                "{pid}: current_events_by_persistence_id {delivered:?} != stored {expected:?}"
            );
        }
        for stored in &stored {
            all_stored.insert((pid.clone(), stored.seq_nr));
            if stored.seq_nr % 3 == 0 {
                tagged_every_third.insert((pid.clone(), stored.seq_nr));
            }
        }
    }
    let queries = [
        (
            "current_events_by_slices",
            read_journal.current_events_by_slices(ENTITY_TYPE, 0, 1023, Offset::NoOffset),
            &all_stored,
        ),
        (
            "current_events_by_tag(crash-all)",
            read_journal.current_events_by_tag(TAG_ALL, Offset::NoOffset),
            &all_stored,
        ),
        (
            "current_events_by_tag(crash-every-3rd)",
            read_journal.current_events_by_tag(TAG_EVERY_THIRD, Offset::NoOffset),
            &tagged_every_third,
        ),
    ];
    for (query, stream, expected) in queries {
        let delivered = collect_query(query, stream).await?;
        check_query_delivers_exactly(query, &delivered, expected)?;
    }
    if workload.projections {
        for (_, output) in outputs {
            let handled = output.handled.iter().cloned();
            history.handled_at_least_once.extend(handled);
        }
        journal.create_effect_table().await;
        check_exactly_once_effects(&journal, None).await?;
    }
    journal.close().await;
    Ok(())
}

/// The journal's contract (Akka: a journal stores each id's events at gapless, increasing
/// sequence numbers; `docs/conformance.md`, "What the journal cases check"): the stored
/// sequence numbers are contiguous, from 1 unless snapshots deleted the events they cover, and
/// the highest never goes down (j14: a delete never lowers it); each event is stored where it
/// belongs, with its tags; a sequence number once stored by one run is never stored by another.
fn check_stored_events(
    pid: &str,
    stored: &[StoredEvent],
    workload: &Workload,
    history: &mut History,
) -> Verdict {
    let lowest = stored.first().map_or(1, |stored| stored.seq_nr);
    if lowest != 1 && !workload.delete_events {
        violated!("{pid}: the stored events start at {lowest}, not 1, and nothing was deleted");
    }
    let written_by = history.written_by.entry(pid.to_owned()).or_default();
    let mut previous = lowest - 1;
    for StoredEvent {
        seq_nr,
        event,
        tags,
    } in stored
    {
        if *seq_nr != previous + 1 {
            violated!("{pid}: the stored seq_nrs are not contiguous: {seq_nr} follows {previous}");
        }
        previous = *seq_nr;
        if event.seq_nr != *seq_nr || event.persistence_id != pid {
            violated!("{pid}: the event stored at {seq_nr} is {event:?}");
        }
        let mut sorted_tags = tags.clone();
        sorted_tags.sort();
        if sorted_tags != tags_of(*seq_nr) {
            violated!("{pid}: the event at {seq_nr} is stored with tags {tags:?}");
        }
        match written_by.insert(*seq_nr, event.run) {
            Some(run) if run != event.run => violated!(
                "{pid}: seq_nr {seq_nr} held run {run}'s event before, now run {}'s",
                event.run
            ),
            _ => {}
        }
    }
    let highest = stored.last().map_or(0, |stored| stored.seq_nr);
    let highest_before = history.highest(pid);
    if highest < highest_before {
        violated!("{pid}: the highest stored seq_nr went down from {highest_before} to {highest}");
    }
    Ok(())
}

/// Acknowledged means durable (`docs/architecture.md`, "One persist, step by step"; Akka calls
/// the persist handler only once the journal stored the event): every seq_nr acknowledged to
/// run `run` is stored holding that run's event, unless a snapshot deleted it (below the lowest
/// stored, and never stored by another run); acknowledgements come in sequence order.
fn check_acknowledged(
    pid: &str,
    stored: &[StoredEvent],
    run: u32,
    output: &ChildOutput,
    workload: &Workload,
    history: &mut History,
) -> Verdict {
    let stored_by: HashMap<u64, u32> = stored.iter().map(|s| (s.seq_nr, s.event.run)).collect();
    let lowest = stored.first().map_or(1, |stored| stored.seq_nr);
    let highest = stored.last().map_or(0, |stored| stored.seq_nr);
    let writes = output.acknowledged.get(pid).map_or(&[][..], Vec::as_slice);
    let mut previous_last = 0;
    for &(first, last) in writes {
        if first > last || first <= previous_last {
            violated!("{pid}: run {run}'s acknowledgements are out of order: {writes:?}");
        }
        previous_last = last;
        for seq_nr in first..=last {
            match stored_by.get(&seq_nr) {
                Some(&stored_run) if stored_run == run => {}
                Some(&stored_run) => violated!(
                    "{pid}: seq_nr {seq_nr} was acknowledged to run {run}, but run \
                     {stored_run}'s event is stored there"
                ),
                None => {
                    let earlier = history.written_by(pid, seq_nr);
                    let deleted = workload.delete_events
                        && seq_nr < lowest
                        && !matches!(earlier, Some(other) if other != run);
                    if !deleted {
                        violated!(
                            "{pid}: seq_nr {seq_nr} acknowledged to run {run} is not stored \
                             (stored: {lowest}..={highest})"
                        );
                    }
                    let written_by = history.written_by.entry(pid.to_owned()).or_default();
                    written_by.insert(seq_nr, run);
                }
            }
        }
    }
    Ok(())
}

/// Recovery replays the store (`docs/architecture.md`, "Recovery"; Akka replays every event
/// after the snapshot, in order): the actor applied each event once, in order, of its own id;
/// it recovered to the highest sequence number the previous kill left (when it was the only
/// writer); what it applied sums to the events the store holds up to there, so each is the
/// event of the run that wrote it; and its first write follows what it recovered.
fn check_recovered(
    pid: &str,
    run: u32,
    output: &ChildOutput,
    only_writer: bool,
    highest_before: u64,
    history: &History,
) -> Verdict {
    let writes = output.acknowledged.get(pid).map_or(&[][..], Vec::as_slice);
    let Some(recovered) = output.recovered.get(pid) else {
        if !writes.is_empty() {
            violated!("{pid}: run {run} had writes acknowledged but never recovered");
        }
        return Ok(());
    };
    let last = recovered.last_seq_nr;
    if recovered.out_of_order != 0 {
        let out_of_order = recovered.out_of_order;
        violated!("{pid}: run {run}'s recovery applied {out_of_order} events out of order");
    }
    let written_by = history.written_by.get(pid);
    let expected_sum = written_by
        .into_iter()
        .flat_map(|by| by.range(..=last))
        .fold(0u64, |sum, (&seq_nr, &writer)| {
            sum.wrapping_add(fingerprint(seq_nr, writer))
        });
    if recovered.applied != last || recovered.fingerprint_sum != expected_sum {
        violated!(
            "{pid}: run {run} recovered to {last} having applied {} events summing to {}; \
             the store's events 1..={last} sum to {expected_sum}",
            recovered.applied,
            recovered.fingerprint_sum
        );
    }
    if only_writer && last != highest_before {
        violated!(
            "{pid}: run {run} recovered to {last}, but the store held {highest_before} after \
             the previous kill"
        );
    }
    if let Some(&(first, _)) = writes.first() {
        if first != last + 1 {
            violated!("{pid}: run {run} recovered to {last} but its first write was {first}");
        }
    }
    Ok(())
}

/// Collects a current query's (pid, seq_nr) pairs, in delivery order.
async fn collect_query(query: &str, stream: EnvelopeStream) -> Result<Vec<(String, u64)>, String> {
    let pairs = stream
        .map_ok(|envelope| (envelope.persistence_id.to_string(), envelope.seq_nr))
        .try_collect::<Vec<_>>();
    match tokio::time::timeout(READ_TIMEOUT, pairs).await {
        Err(_) => Err(format!("{query} hung {READ_TIMEOUT:?}")),
        Ok(delivered) => delivered.map_err(|e| format!("{query} failed: {e}")),
    }
}

/// A current query delivers what is stored now (`docs/conformance.md`, "What the query cases
/// check"; Akka's `currentEventsByTag` and `currentEventsBySlices`): each stored event it
/// selects, once, and each id's in sequence order.
fn check_query_delivers_exactly(
    query: &str,
    delivered: &[(String, u64)],
    expected: &BTreeSet<(String, u64)>,
) -> Verdict {
    let mut seen = BTreeSet::new();
    let mut last_of: HashMap<&str, u64> = HashMap::new();
    for (pid, seq_nr) in delivered {
        if !seen.insert((pid.clone(), *seq_nr)) {
            violated!("{query}: ({pid}, {seq_nr}) delivered twice");
        }
        if let Some(previous) = last_of.insert(pid, *seq_nr) {
            if previous >= *seq_nr {
                violated!("{query}: {pid}'s {seq_nr} delivered after {previous}");
            }
        }
    }
    if &seen != expected {
        let missing: Vec<_> = expected.difference(&seen).take(10).collect();
        let extra: Vec<_> = seen.difference(expected).take(10).collect();
        violated!(
            "{query}: {} delivered, {} stored; missing {missing:?}, extra {extra:?}",
            seen.len(),
            expected.len()
        );
    }
    Ok(())
}

/// Exactly-once (`docs/projections.md`, "Delivery"; Akka Projections' `exactlyOnce`): the
/// effects and the offset commit together, so after any kill no effect is applied twice and
/// each id's effects are a prefix of its events, in order. Run to completion (`complete`), the
/// effects are every stored event.
async fn check_exactly_once_effects(
    journal: &SqlJournal,
    complete: Option<&BTreeSet<(String, u64)>>,
) -> Verdict {
    let mut applied = BTreeSet::new();
    let mut last_of: HashMap<String, i64> = HashMap::new();
    for (pid, seq_nr, _run) in journal.effects().await {
        if !applied.insert((pid.clone(), seq_nr as u64)) {
            violated!("exactly-once: the effect of ({pid}, {seq_nr}) was applied twice");
        }
        let previous = last_of.insert(pid.clone(), seq_nr).unwrap_or(0);
        if seq_nr != previous + 1 {
            violated!("exactly-once: {pid}'s effect of {seq_nr} follows that of {previous}");
        }
    }
    if let Some(every_event) = complete {
        if &applied != every_event {
            let missing: Vec<_> = every_event.difference(&applied).take(10).collect();
            violated!(
                "exactly-once, run to completion: {} effects for {} events; missing {missing:?}",
                applied.len(),
                every_event.len()
            );
        }
    }
    Ok(())
}

/// Runs both projections to completion in this process, then checks exactly-once (every
/// stored event's effect, once) and at-least-once (`docs/projections.md`, "Delivery": after a
/// crash envelopes may be handled again, but none is ever skipped: every event was handled, in
/// some run).
async fn check_projections_to_completion(
    url: &str,
    workload: &Workload,
    history: &mut History,
) -> Verdict {
    if is_postgres(url) {
        wait_until_killed_connections_end(url).await?;
    }
    let journal = SqlJournal::open(url).await;
    journal.create_effect_table().await;
    let handled = HandledEvents::default();
    let recorder = HandledRecorder::Collect(handled.clone());
    let projections = start_projections(workload, &journal, true, recorder);
    let runs = [
        ("exactly-once", projections.exactly_once),
        ("at-least-once", projections.at_least_once),
    ];
    for (name, projection) in runs {
        match tokio::time::timeout(CHILD_TIMEOUT, projection.join()).await {
            Err(_) => violated!("the {name} projection did not complete in {CHILD_TIMEOUT:?}"),
            Ok(ProjectionState::Completed) => {}
            Ok(state) => violated!("the {name} projection ended {state:?}"),
        }
    }
    let every_event = history.every_event();
    check_exactly_once_effects(&journal, Some(&every_event)).await?;
    let handled = std::mem::take(&mut *handled.lock().expect("no recorder panicked"));
    history.handled_at_least_once.extend(handled);
    let skipped: Vec<_> = every_event
        .difference(&history.handled_at_least_once)
        .take(10)
        .collect();
    if !skipped.is_empty() {
        violated!("at-least-once: the projection never handled {skipped:?}");
    }
    journal.close().await;
    Ok(())
}

/// One writer per id (`docs/architecture.md`, "One writer per persistence id (fencing)";
/// conformance F1-F5; Akka's single-writer principle): of two processes on the same ids, at
/// most one is fenced per id; a fenced process's acknowledged writes all precede the other's
/// recovery; and the two never had acknowledged writes interleave.
fn check_single_writer(pid: &str, a: &ChildOutput, b: &ChildOutput) -> Verdict {
    for (name, output) in [("A", a), ("B", b)] {
        let other_failures: Vec<_> = output
            .errors
            .iter()
            .filter(|e| !e.contains("Fenced"))
            .take(3)
            .collect();
        if !other_failures.is_empty() {
            violated!("writer {name} failed otherwise than fenced: {other_failures:?}");
        }
    }
    if a.is_fenced(pid) && b.is_fenced(pid) {
        violated!("{pid}: both writers were fenced");
    }
    for (name, fenced, other) in [("A", a, b), ("B", b, a)] {
        if !fenced.is_fenced(pid) {
            continue;
        }
        match (fenced.highest_acknowledged(pid), other.recovered_to(pid)) {
            (_, None) => violated!("{pid}: {name} was fenced, but the other never recovered it"),
            (Some(acknowledged), Some(recovered)) if acknowledged > recovered => violated!(
                "{pid}: {name} was fenced with writes acknowledged up to {acknowledged}, but \
                 the other writer recovered to {recovered}"
            ),
            _ => {}
        }
    }
    let acknowledged = (a.highest_acknowledged(pid), b.highest_acknowledged(pid));
    let recovered = (a.recovered_to(pid), b.recovered_to(pid));
    if let ((Some(a_high), Some(b_high)), (Some(a_rec), Some(b_rec))) = (acknowledged, recovered) {
        if a_high > b_rec && b_high > a_rec {
            violated!(
                "{pid}: acknowledged writes interleaved: A recovered to {a_rec}, acknowledged to \
                 {a_high}; B recovered to {b_rec}, acknowledged to {b_high}"
            );
        }
    }
    Ok(())
}

/// Waits until the killed children's PostgreSQL sessions are gone (the server notices a dead
/// client only when its socket closes), so checks never race a session still committing.
async fn wait_until_killed_connections_end(url: &str) -> Verdict {
    use sqlx::Connection;
    let mut connection = sqlx::PgConnection::connect(url)
        .await
        .map_err(|e| format!("connecting to check PostgreSQL sessions: {e}"))?;
    let started = Instant::now();
    loop {
        let sessions: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .fetch_one(&mut connection)
        .await
        .map_err(|e| format!("counting PostgreSQL sessions: {e}"))?;
        if sessions == 0 {
            break;
        }
        if started.elapsed() > Duration::from_secs(30) {
            violated!("{sessions} PostgreSQL sessions still open 30 s after the kill");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = connection.close().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Loops of kills

/// `CRASH_SEED` and `CRASH_LOOPS` of this test run, and the test's name, for every message.
struct Soak {
    test: &'static str,
    seed: u64,
    loops: u64,
}

impl Soak {
    fn from_env(test: &'static str) -> Soak {
        Soak {
            test,
            seed: env_u64("CRASH_SEED", 1),
            loops: env_u64("CRASH_LOOPS", 1),
        }
    }

    /// `[<test> seed <seed> loop <loop> (<what>)]`.
    fn context(&self, loop_nr: u64, what: &dyn fmt::Display) -> String {
        format!("[{} seed {} loop {loop_nr} ({what})]", self.test, self.seed)
    }

    /// Panics with the context, the violation and the command that repeats the kill moments.
    fn fail(&self, context: &str, loop_nr: u64, violation: &str) -> ! {
        panic!(
            "{context} {violation}\n  repeat: CRASH_SEED={} CRASH_LOOPS={} cargo test --test \
             crash_sigkill {} -- --exact",
            self.seed,
            loop_nr + 1,
            self.test
        )
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
        Err(_) => default,
    }
}

/// Which moments a test's kills are drawn from.
#[derive(Debug, Clone, Copy)]
enum KillMoments {
    /// In turn: soon after start (0..400 ms), during recovery (0..30 ms after the first actor
    /// recovered), and under load (300..1800 ms).
    Mixed,
    /// During the clean shutdown that follows `stop_writing_after_ms` (0..8 ms into it).
    DuringShutdown,
    /// While the projections stop and save their offsets (0..15 ms into it).
    DuringProjectionStop,
}

impl KillMoments {
    fn draw(self, random: &mut SeededRandom, loop_nr: u64) -> KillPoint {
        match self {
            KillMoments::Mixed => match loop_nr % 4 {
                0 => KillPoint::SinceStart(random.below(400)),
                1 => KillPoint::SinceFirstRecovery(random.below(30)),
                _ => KillPoint::SinceStart(300 + random.below(1500)),
            },
            KillMoments::DuringShutdown => KillPoint::IntoShutdown(random.below(8)),
            KillMoments::DuringProjectionStop => KillPoint::IntoProjectionStop(random.below(15)),
        }
    }
}

/// Runs `CRASH_LOOPS` children on one store, killing each at a moment drawn from `moments`,
/// and verifies the store after each; then runs the projections to completion.
async fn kill_and_verify(
    test: &'static str,
    url: &str,
    mut workload: Workload,
    moments: KillMoments,
) {
    let soak = Soak::from_env(test);
    let mut random = SeededRandom(soak.seed ^ 0x5151);
    workload.seed = soak.seed;
    let mut history = History::default();
    for loop_nr in 0..soak.loops {
        let run = loop_nr as u32;
        let kill = moments.draw(&mut random, loop_nr);
        let context = soak.context(loop_nr, &kill);
        let (url_owned, workload_owned) = (url.to_owned(), workload.clone());
        let ran = tokio::task::spawn_blocking(move || {
            run_until_killed(&url_owned, &workload_owned, run, kill)
        })
        .await
        .expect("the child's thread");
        let (output, _killed) = ran.unwrap_or_else(|e| soak.fail(&context, loop_nr, &e));
        if !output.errors.is_empty() {
            let errors = &output.errors[..output.errors.len().min(3)];
            soak.fail(
                &context,
                loop_nr,
                &format!("the child reported errors: {errors:?}"),
            );
        }
        eprintln!("{context} {}", output.summary());
        let verdict = verify_store(url, &workload, &[(run, &output)], &mut history).await;
        verdict.unwrap_or_else(|e| soak.fail(&context, loop_nr, &e));
    }
    if workload.projections {
        let last_loop = soak.loops.saturating_sub(1);
        let context = soak.context(last_loop, &"projections run to completion after the loops");
        let verdict = check_projections_to_completion(url, &workload, &mut history).await;
        verdict.unwrap_or_else(|e| soak.fail(&context, last_loop, &e));
    }
    let stored: u64 = history.highest.values().sum();
    eprintln!(
        "{test}: seed {}, {} loops, {stored} events stored: OK",
        soak.seed, soak.loops
    );
}

/// Runs `CRASH_LOOPS` times two children on the same ids (B taking them over from A) and kills
/// both at seeded moments; checks one writer per id, then the store.
async fn two_writers_kill_and_verify(test: &'static str, url: &str, mut workload: Workload) {
    let soak = Soak::from_env(test);
    let mut random = SeededRandom(soak.seed ^ 0xF3F3);
    workload.seed = soak.seed;
    let mut history = History::default();
    for loop_nr in 0..soak.loops {
        let runs = (2 * loop_nr as u32, 2 * loop_nr as u32 + 1);
        let timing = TwoWriterTiming {
            second_starts_after_ms: random.below(800),
            first_killed_after_ms: random.below(1200),
            second_killed_after_ms: random.below(600),
        };
        let context = soak.context(loop_nr, &timing);
        let (url_owned, workload_owned) = (url.to_owned(), workload.clone());
        let (a, b) = tokio::task::spawn_blocking(move || {
            run_two_writers(&url_owned, &workload_owned, runs, timing)
        })
        .await
        .expect("the children's thread");
        eprintln!("{context} A: {}; B: {}", a.summary(), b.summary());
        for pid in persistence_ids(&workload) {
            let verdict = check_single_writer(&pid, &a, &b);
            verdict.unwrap_or_else(|e| soak.fail(&context, loop_nr, &e));
        }
        let outputs = [(runs.0, &a), (runs.1, &b)];
        let verdict = verify_store(url, &workload, &outputs, &mut history).await;
        verdict.unwrap_or_else(|e| soak.fail(&context, loop_nr, &e));
    }
    eprintln!("{test}: seed {}, {} loops: OK", soak.seed, soak.loops);
}

// ---------------------------------------------------------------------------------------------
// Scenarios

/// Writing, recovering and projecting (one envelope per transaction), killed at mixed moments.
async fn kills_at_mixed_moments(test: &'static str, url: &str) {
    kill_and_verify(test, url, Workload::default(), KillMoments::Mixed).await;
}

/// The exactly-once projection grouped and 4 envelopes at a time; a snapshot every 7 events.
async fn kills_with_a_grouped_concurrent_projection(test: &'static str, url: &str) {
    let workload = Workload {
        grouped: true,
        max_concurrency: 4,
        snapshot_every: 7,
        ..Workload::default()
    };
    kill_and_verify(test, url, workload, KillMoments::Mixed).await;
}

/// Snapshots every 10 events delete the events they cover: acknowledged events may be gone
/// from the journal, but only below a snapshot, and recovery still equals the store.
async fn kills_while_snapshots_delete_events(test: &'static str, url: &str) {
    let workload = Workload {
        delete_events: true,
        projections: false,
        snapshot_every: 10,
        ..Workload::default()
    };
    kill_and_verify(test, url, workload, KillMoments::Mixed).await;
}

/// No snapshots: every recovery replays each id from 1.
async fn kills_with_recovery_from_events_only(test: &'static str, url: &str) {
    let workload = Workload {
        snapshot_every: 0,
        ..Workload::default()
    };
    kill_and_verify(test, url, workload, KillMoments::Mixed).await;
}

/// The child stops writing after 200..500 ms and shuts down cleanly; killed during that
/// shutdown.
async fn kills_during_shutdown(test: &'static str, url: &str) {
    let workload = Workload {
        stop_writing_after_ms: 200 + env_u64("CRASH_SEED", 1) % 300,
        ..Workload::default()
    };
    kill_and_verify(test, url, workload, KillMoments::DuringShutdown).await;
}

/// The child stops writing after 200..500 ms and stops its projections (saving offsets);
/// killed meanwhile. Grouping and concurrency vary with the seed.
async fn kills_during_projection_stop(test: &'static str, url: &str) {
    let seed = env_u64("CRASH_SEED", 1);
    let workload = Workload {
        stop_writing_after_ms: 200 + seed % 300,
        grouped: seed % 2 == 0,
        max_concurrency: 1 + (seed % 3) as usize,
        ..Workload::default()
    };
    kill_and_verify(test, url, workload, KillMoments::DuringProjectionStop).await;
}

/// Two processes write the same 4 ids, the second taking them over from the first.
async fn two_processes_on_the_same_ids(test: &'static str, url: &str) {
    let workload = Workload {
        actors: 4,
        projections: false,
        ..Workload::default()
    };
    two_writers_kill_and_verify(test, url, workload).await;
}

#[actix::test]
async fn sqlite_kills_at_mixed_moments() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    kills_at_mixed_moments("sqlite_kills_at_mixed_moments", &sqlite_url(&dir)).await;
}

#[actix::test]
async fn sqlite_kills_with_a_grouped_concurrent_projection() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let test = "sqlite_kills_with_a_grouped_concurrent_projection";
    kills_with_a_grouped_concurrent_projection(test, &sqlite_url(&dir)).await;
}

#[actix::test]
async fn sqlite_kills_while_snapshots_delete_events() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let test = "sqlite_kills_while_snapshots_delete_events";
    kills_while_snapshots_delete_events(test, &sqlite_url(&dir)).await;
}

#[actix::test]
async fn sqlite_kills_with_recovery_from_events_only() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let test = "sqlite_kills_with_recovery_from_events_only";
    kills_with_recovery_from_events_only(test, &sqlite_url(&dir)).await;
}

#[actix::test]
async fn sqlite_kills_during_shutdown() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    kills_during_shutdown("sqlite_kills_during_shutdown", &sqlite_url(&dir)).await;
}

#[actix::test]
async fn sqlite_kills_during_projection_stop() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    kills_during_projection_stop("sqlite_kills_during_projection_stop", &sqlite_url(&dir)).await;
}

#[actix::test]
async fn sqlite_two_processes_on_the_same_ids() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    two_processes_on_the_same_ids("sqlite_two_processes_on_the_same_ids", &sqlite_url(&dir)).await;
}

#[actix::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn postgres_kills_at_mixed_moments() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    kills_at_mixed_moments("postgres_kills_at_mixed_moments", db.url()).await;
}

#[actix::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn postgres_kills_with_a_grouped_concurrent_projection() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    let test = "postgres_kills_with_a_grouped_concurrent_projection";
    kills_with_a_grouped_concurrent_projection(test, db.url()).await;
}

#[actix::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn postgres_kills_while_snapshots_delete_events() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    let test = "postgres_kills_while_snapshots_delete_events";
    kills_while_snapshots_delete_events(test, db.url()).await;
}

#[actix::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn postgres_kills_with_recovery_from_events_only() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    let test = "postgres_kills_with_recovery_from_events_only";
    kills_with_recovery_from_events_only(test, db.url()).await;
}

#[actix::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn postgres_kills_during_shutdown() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    kills_during_shutdown("postgres_kills_during_shutdown", db.url()).await;
}

#[actix::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn postgres_kills_during_projection_stop() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    kills_during_projection_stop("postgres_kills_during_projection_stop", db.url()).await;
}

#[actix::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn postgres_two_processes_on_the_same_ids() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    two_processes_on_the_same_ids("postgres_two_processes_on_the_same_ids", db.url()).await;
}

/// The harness can fail: after a kill, one acknowledged event is deleted behind its back, and
/// the verifier must report that event.
#[actix::test]
async fn verifier_reports_an_acknowledged_event_deleted_after_the_kill() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = sqlite_url(&dir);
    let workload = Workload {
        projections: false,
        ..Workload::default()
    };
    let kill = KillPoint::OnAcknowledgedWrites(200);
    let (url_owned, workload_owned) = (url.clone(), workload.clone());
    let (output, _killed) =
        tokio::task::spawn_blocking(move || run_until_killed(&url_owned, &workload_owned, 0, kill))
            .await
            .expect("the child's thread")
            .expect("the child ran until killed");
    let (pid, writes) = output
        .acknowledged
        .iter()
        .max_by_key(|(_, writes)| writes.len())
        .expect("some write was acknowledged");
    let &(_, deleted) = writes.last().expect("the id's writes");
    let journal = SqlJournal::open(&url).await;
    let delete =
        format!("DELETE FROM journal WHERE persistence_id = '{pid}' AND seq_nr = {deleted}");
    journal.execute(&delete).await;
    journal.close().await;

    let verdict = verify_store(&url, &workload, &[(0, &output)], &mut History::default()).await;

    let violation =
        verdict.expect_err("the verifier accepted a store missing an acknowledged event");
    let names_the_event = violation.contains(&format!("seq_nr {deleted} acknowledged"))
        || violation.contains(&format!("follows {}", deleted - 1));
    assert!(
        violation.contains(pid.as_str()) && names_the_event,
        "the violation names {pid}'s deleted {deleted}: {violation}"
    );
}
