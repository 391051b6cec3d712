//! The `projection` scenario (issue 9), in the shape of seed 003: events already stored, one
//! projection catching up, events/s.
//!
//! Per store (SQLite, PostgreSQL), on a fresh database:
//! 1. `journal-write`: `ids` x `events / ids` events written by 64 concurrent writers through
//!    the journal's group commit (the journal's own write rate in the same run);
//! 2. `query-catch-up`: `current_events_by_slices` over all slices, decoded, counted (what a
//!    projection cannot beat);
//! 3. `no-op`: an at-least-once projection with a handler that does nothing (its overhead);
//! 4. `max-concurrency`: at-least-once, a handler that awaits 1 ms (simulated I/O), with
//!    `max_concurrency` 1..128 (seed 003's table);
//! 5. `grouped-exactly-once`: groups of 1..1000 envelopes, each written to a read-model table
//!    (one row per event, one multi-row INSERT per group) in the offset store's transaction.
//!
//! Every configuration runs `runs` times (median reported). The slow configurations measure
//! the first `min(events, per_slot x max_concurrency)` (or `per_group x group size`) envelopes
//! of the stored events: throughput is steady long before, and the sweep stays within minutes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_persistence_core::query::{
    EnvelopeStreamExt, EventEnvelope, Offset, QuerySettings, ReadJournal,
};
use actix_persistence_core::{AtomicWrite, JournalStore, PersistentRepr};
use actix_persistence_projection::{
    Grouping, Handler, HandlerError, PostgresOffsetStore, Projection, ProjectionId, QuerySource,
    SqliteOffsetStore, TransactionalGroupedHandler, TransactionalOffsetStore,
};
use actix_persistence_sql::{
    PostgresJournal, PostgresJournalOptions, SqliteJournal, SqliteJournalOptions,
};
use async_trait::async_trait;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use sqlx::{Postgres, QueryBuilder, Sqlite, Transaction};

use crate::pg::PgServer;
use crate::report::Row;
use crate::runner::{block_on_system, Progress};

/// Options of the `projection` scenario.
#[derive(Debug, Clone)]
pub struct ProjectionOptions {
    /// The PostgreSQL server (`None`: skip PostgreSQL).
    pub server: Option<PgServer>,
    /// Run SQLite too.
    pub sqlite: bool,
    /// Persistence ids.
    pub ids: usize,
    /// Events stored in all (spread evenly over the ids).
    pub events: u64,
    /// `max_concurrency` values.
    pub concurrency: Vec<usize>,
    /// Group sizes of the grouped exactly-once runs.
    pub groups: Vec<usize>,
    /// Runs per configuration.
    pub runs: u32,
    /// Envelopes measured per unit of `max_concurrency` (capped at `events`).
    pub per_slot: u64,
    /// Envelopes measured per envelope of group size (capped at `events`).
    pub per_group: u64,
    /// What the `max-concurrency` handler awaits per envelope.
    pub handler_delay: Duration,
}

/// The stored event.
#[derive(Debug, Serialize, Deserialize)]
struct BenchEvent {
    n: u64,
}

type Env = EventEnvelope<BenchEvent>;

const ENTITY_TYPE: &str = "Bench";
const WRITERS: usize = 64;

/// Query settings: a short late-commit window, waited out before measuring, so the catch-up
/// reads settled events as a projection behind the journal does.
fn query_settings() -> QuerySettings {
    QuerySettings {
        late_commit_window: Duration::from_millis(500),
        ..QuerySettings::default()
    }
}

/// Runs the scenario and returns its rows (runs and medians).
pub fn run(options: &ProjectionOptions, progress: &Progress) -> Vec<Row> {
    let mut rows = Vec::new();
    if options.sqlite {
        let options = options.clone();
        let bar = progress.bar("projection sqlite", 0);
        rows.extend(block_on_system(async move {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let url = format!("sqlite:{}", dir.path().join("projection.db").display());
            let journal = SqliteJournal::connect(&SqliteJournalOptions::new(url))
                .await
                .expect("the SQLite journal opens");
            let store = SqliteOffsetStore::new(journal.writer_pool().clone());
            let rows = run_on(
                "sqlite",
                Arc::new(journal.clone()),
                ReadJournal::new(journal.clone(), query_settings()),
                store,
                SqliteReadModel,
                &options,
            )
            .await;
            journal.close().await;
            rows
        }));
        bar.finish_and_clear();
    }
    if let Some(server) = options.server.clone() {
        let options = options.clone();
        let bar = progress.bar("projection postgres", 0);
        rows.extend(block_on_system(async move {
            let database = server.fresh_name("projection");
            server
                .create_database(&database)
                .await
                .expect("the benchmark database can be created");
            let journal = PostgresJournal::connect(&PostgresJournalOptions::new(
                server.socket_url(&database),
            ))
            .await
            .expect("the PostgreSQL journal connects");
            let store = PostgresOffsetStore::of_journal(&journal);
            let rows = run_on(
                "postgres",
                Arc::new(journal.clone()),
                ReadJournal::new(journal.clone(), query_settings()),
                store,
                PostgresReadModel,
                &options,
            )
            .await;
            journal.close().await;
            let _ = server.drop_database(&database).await;
            rows
        }));
        bar.finish_and_clear();
    }
    crate::report::with_medians(rows)
}

/// A read model in the store's database, written by a grouped exactly-once handler.
#[async_trait]
trait ReadModel<S: TransactionalOffsetStore>: Clone + Send + Sync + 'static {
    /// Creates (or empties) table `table`.
    async fn prepare(&self, store: &S, table: &str);
    /// A handler writing into `table`.
    fn handler(&self, table: &str) -> impl TransactionalGroupedHandler<Env, S::Transaction>;
}

async fn run_on<S, R>(
    db: &str,
    journal: Arc<dyn JournalStore>,
    query: ReadJournal,
    store: S,
    read_model: R,
    options: &ProjectionOptions,
) -> Vec<Row>
where
    S: TransactionalOffsetStore + Clone,
    R: ReadModel<S>,
{
    let mut rows = Vec::new();
    let per_id = (options.events / options.ids as u64).max(1);
    let total = per_id * options.ids as u64;

    let started = Instant::now();
    write_events(journal, options.ids, per_id).await;
    let mut row = Row::new("projection", &format!("{db}-journal-write"), WRITERS, 1);
    finish(&mut row, total, started.elapsed(), options.ids);
    row.detail("writers", WRITERS as u64);
    eprintln!(
        "{db}: journal wrote {total} events at {:.0}/s",
        row.throughput_per_s
    );
    rows.push(row);
    // Every event settles before the catch-up runs.
    tokio::time::sleep(query_settings().late_commit_window + Duration::from_millis(200)).await;

    for run in 1..=options.runs {
        let started = Instant::now();
        let count = query
            .current_events_by_slices(ENTITY_TYPE, 0, 1023, Offset::NoOffset)
            .decode_json::<BenchEvent>()
            .fold(0u64, |n, e| async move { n + u64::from(e.is_ok()) })
            .await;
        let mut row = Row::new("projection", &format!("{db}-query-catch-up"), 0, run);
        finish(&mut row, count, started.elapsed(), options.ids);
        eprintln!(
            "{db}: query catch-up {count} events at {:.0}/s",
            row.throughput_per_s
        );
        rows.push(row);
    }

    for run in 1..=options.runs {
        let id = ProjectionId::new(format!("noop-{run}"), "all");
        let projection =
            Projection::at_least_once(id, source(&query), store.clone(), Delay(Duration::ZERO));
        let elapsed = catch_up(projection, total).await;
        let mut row = Row::new("projection", &format!("{db}-no-op"), 1, run);
        finish(&mut row, total, elapsed, options.ids);
        eprintln!("{db}: no-op projection at {:.0}/s", row.throughput_per_s);
        rows.push(row);
    }

    for &concurrency in &options.concurrency {
        let measured = total.min(options.per_slot * concurrency as u64);
        for run in 1..=options.runs {
            let id = ProjectionId::new(format!("sweep-{concurrency}-{run}"), "all");
            let projection = Projection::at_least_once(
                id,
                source(&query),
                store.clone(),
                Delay(options.handler_delay),
            )
            .with_max_concurrency(concurrency);
            let elapsed = catch_up(projection, measured).await;
            let mut row = Row::new(
                "projection",
                &format!("{db}-max-concurrency"),
                concurrency,
                run,
            );
            finish(&mut row, measured, elapsed, options.ids);
            row.detail(
                "handler_delay_ms",
                options.handler_delay.as_secs_f64() * 1e3,
            );
            eprintln!(
                "{db}: max_concurrency {concurrency}: {:.0} events/s",
                row.throughput_per_s
            );
            rows.push(row);
        }
    }

    for &size in &options.groups {
        let measured = total.min(options.per_group * size as u64);
        for run in 1..=options.runs {
            let table = format!("read_model_{size}_{run}");
            read_model.prepare(&store, &table).await;
            let id = ProjectionId::new(format!("grouped-{size}-{run}"), "all");
            let grouping = Grouping {
                size,
                within: Duration::from_secs(1),
            };
            let projection = Projection::grouped_exactly_once(
                id,
                source(&query),
                store.clone(),
                grouping,
                read_model.handler(&table),
            );
            let elapsed = catch_up(projection, measured).await;
            let mut row = Row::new(
                "projection",
                &format!("{db}-grouped-exactly-once"),
                size,
                run,
            );
            finish(&mut row, measured, elapsed, options.ids);
            eprintln!(
                "{db}: grouped exactly-once, groups of {size}: {:.0} events/s",
                row.throughput_per_s
            );
            rows.push(row);
        }
    }
    rows
}

fn source(query: &ReadJournal) -> QuerySource<BenchEvent> {
    QuerySource::events_by_slices(query.clone(), ENTITY_TYPE, 0, 1023).current()
}

fn finish(row: &mut Row, events: u64, elapsed: Duration, ids: usize) {
    row.events = events;
    row.actors = ids as u64;
    row.elapsed_s = elapsed.as_secs_f64();
    row.throughput_per_s = events as f64 / elapsed.as_secs_f64().max(1e-9);
}

/// Starts `projection`, waits until it handled `events` envelopes, stops it; the time taken.
async fn catch_up(projection: Projection<Env>, events: u64) -> Duration {
    let started = Instant::now();
    let handle = projection.start();
    let progress = handle
        .wait_for(|p| p.handled >= events)
        .await
        .expect("the projection handles the stored events");
    let elapsed = started.elapsed();
    assert!(progress.skipped == 0, "no envelope skipped");
    handle.stop().await;
    elapsed
}

/// Writes `per_id` events for each of `ids` ids from `WRITERS` concurrent writers, each
/// writing one atomic write at a time (the journal's group commit batches them).
async fn write_events(journal: Arc<dyn JournalStore>, ids: usize, per_id: u64) {
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let journal = Arc::clone(&journal);
            let mine: Vec<usize> = (0..ids).filter(|n| n % WRITERS == w).collect();
            tokio::spawn(async move {
                for seq_nr in 1..=per_id {
                    for &n in &mine {
                        let event = PersistentRepr {
                            persistence_id: format!("{ENTITY_TYPE}|{n}").into(),
                            seq_nr,
                            payload: serde_json::to_vec(&BenchEvent { n: seq_nr }).expect("json"),
                            serializer_id:
                                actix_persistence_core::serialization::JSON_SERIALIZER_ID,
                            manifest: String::new(),
                            writer_uuid: "bench".into(),
                            timestamp: 0,
                            tags: Default::default(),
                        };
                        let write = AtomicWrite::new(vec![event]).expect("one event");
                        let results = journal
                            .write_messages(vec![write])
                            .await
                            .expect("the journal stores");
                        assert!(results[0].is_ok(), "stored");
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.expect("writer task");
    }
}

/// At-least-once handler that awaits a delay (simulated I/O; zero: a no-op).
struct Delay(Duration);

#[async_trait]
impl Handler<Env> for Delay {
    async fn process(&self, _: &Env) -> Result<(), HandlerError> {
        if !self.0.is_zero() {
            tokio::time::sleep(self.0).await;
        }
        Ok(())
    }
}

#[derive(Clone)]
struct SqliteReadModel;

#[derive(Clone)]
struct SqliteRows(String);

#[async_trait]
impl TransactionalGroupedHandler<Env, Transaction<'static, Sqlite>> for SqliteRows {
    async fn process(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        envelopes: &[Env],
    ) -> Result<(), HandlerError> {
        let mut insert = QueryBuilder::new(format!(
            "INSERT INTO {} (persistence_id, seq_nr, amount) ",
            self.0
        ));
        insert.push_values(envelopes, |mut row, e| {
            row.push_bind(&*e.persistence_id)
                .push_bind(e.seq_nr as i64)
                .push_bind(e.event.n as i64);
        });
        insert.build().execute(&mut **tx).await?;
        Ok(())
    }
}

#[async_trait]
impl ReadModel<SqliteOffsetStore> for SqliteReadModel {
    async fn prepare(&self, store: &SqliteOffsetStore, table: &str) {
        sqlx::raw_sql(&format!(
            "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} \
             (persistence_id TEXT NOT NULL, seq_nr INTEGER NOT NULL, amount INTEGER NOT NULL, \
             PRIMARY KEY (persistence_id, seq_nr))"
        ))
        .execute(store.pool())
        .await
        .expect("read model table");
    }

    fn handler(
        &self,
        table: &str,
    ) -> impl TransactionalGroupedHandler<Env, Transaction<'static, Sqlite>> {
        SqliteRows(table.to_owned())
    }
}

#[derive(Clone)]
struct PostgresReadModel;

#[derive(Clone)]
struct PostgresRows(String);

#[async_trait]
impl TransactionalGroupedHandler<Env, Transaction<'static, Postgres>> for PostgresRows {
    async fn process(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        envelopes: &[Env],
    ) -> Result<(), HandlerError> {
        let mut insert = QueryBuilder::new(format!(
            "INSERT INTO {} (persistence_id, seq_nr, amount) ",
            self.0
        ));
        insert.push_values(envelopes, |mut row, e| {
            row.push_bind(&*e.persistence_id)
                .push_bind(e.seq_nr as i64)
                .push_bind(e.event.n as i64);
        });
        insert.build().execute(&mut **tx).await?;
        Ok(())
    }
}

#[async_trait]
impl ReadModel<PostgresOffsetStore> for PostgresReadModel {
    async fn prepare(&self, store: &PostgresOffsetStore, table: &str) {
        sqlx::raw_sql(&format!(
            "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} \
             (persistence_id TEXT NOT NULL, seq_nr BIGINT NOT NULL, amount BIGINT NOT NULL, \
             PRIMARY KEY (persistence_id, seq_nr))"
        ))
        .execute(store.pool())
        .await
        .expect("read model table");
    }

    fn handler(
        &self,
        table: &str,
    ) -> impl TransactionalGroupedHandler<Env, Transaction<'static, Postgres>> {
        PostgresRows(table.to_owned())
    }
}

/// The markdown tables of the scenario's rows (medians where configurations ran several
/// times): one row per store and configuration, with the ratio to the first configuration.
pub fn table(rows: &[Row]) -> String {
    let chosen: Vec<&Row> = rows
        .iter()
        .filter(|r| r.scenario == "projection")
        .filter(|r| {
            r.aggregate == "median"
                || !rows
                    .iter()
                    .any(|m| m.aggregate == "median" && m.store == r.store && m.groups == r.groups)
        })
        .collect();
    let mut out = String::from(
        "| store | form | N | events | seconds | events/s | x first N |\n|---|---|---|---|---|---|---|\n",
    );
    for row in &chosen {
        let (db, form) = row.store.split_once('-').unwrap_or((&row.store, ""));
        let first = chosen
            .iter()
            .find(|r| r.store == row.store)
            .map_or(row.throughput_per_s, |r| r.throughput_per_s);
        out.push_str(&format!(
            "| {db} | {form} | {} | {} | {:.2} | {:.0} | {:.1} |\n",
            row.groups,
            row.events,
            row.elapsed_s,
            row.throughput_per_s,
            row.throughput_per_s / first.max(1e-9),
        ));
    }
    out
}
