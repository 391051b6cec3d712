//! The `group-commit` scenario (issue 3): the closed loop on PostgreSQL and SQLite with group
//! commit and with one transaction per atomic write, one after the other in one run, next to
//! pgbench's single-row and 100-row insert rates on the same server.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Actor;
use actix_persistence_core::JournalStore;
use actix_persistence_sql::{
    PostgresJournal, PostgresJournalOptions, SqliteJournal, SqliteJournalOptions,
};

use crate::actor::{wait_ready, BenchActor, Persist};
use crate::closed_loop::{run_on_store, ClosedLoopOutcome};
use crate::pg::PgServer;
use crate::postgres::CommitMode;
use crate::report::{Latencies, Row};
use crate::runner::{block_on_system, start_journal, Progress};
use crate::{sqlite_floor, sys};

/// Options of the `group-commit` scenario.
#[derive(Debug, Clone)]
pub struct GroupCommitOptions {
    /// The PostgreSQL server (`None`: skip PostgreSQL and pgbench).
    pub server: Option<PgServer>,
    /// Actors.
    pub actors: usize,
    /// Events per actor on PostgreSQL.
    pub events: u64,
    /// Events per actor on SQLite.
    pub sqlite_events: u64,
    /// Write-reply-ordering groups of the journal actor.
    pub groups: usize,
    /// Seconds per pgbench run.
    pub pgbench_seconds: u32,
    /// pgbench client counts.
    pub pgbench_clients: Vec<u32>,
    /// Run SQLite too.
    pub sqlite: bool,
    /// Runs of each SQLite configuration (the median is reported when above 1).
    pub sqlite_runs: u32,
    /// Sequential persists of the one-actor SQLite rows (and transactions of the raw 1-row
    /// floor).
    pub sequential_events: u64,
}

/// Runs the scenario and returns its rows.
pub fn run(options: &GroupCommitOptions, progress: &Progress) -> Vec<Row> {
    let mut rows = Vec::new();
    let modes = [CommitMode::GroupCommit, CommitMode::PerWrite];
    if let Some(server) = &options.server {
        for mode in modes {
            let bar = progress.bar(
                &mode.store_label("postgres"),
                options.actors as u64 * options.events,
            );
            let (server, actors, events, groups) = (
                server.clone(),
                options.actors,
                options.events,
                options.groups,
            );
            let task_bar = bar.clone();
            let row = block_on_system(async move {
                let database = server.fresh_name("group_commit");
                server
                    .create_database(&database)
                    .await
                    .expect("the benchmark database can be created");
                let journal_options = PostgresJournalOptions {
                    max_batch_size: mode.max_batch_size(),
                    ..PostgresJournalOptions::new(server.socket_url(&database))
                };
                let journal = PostgresJournal::connect(&journal_options)
                    .await
                    .expect("the PostgreSQL journal connects");
                let store: Arc<dyn JournalStore> = Arc::new(journal.clone());
                let outcome = run_on_store(
                    store,
                    groups,
                    actors,
                    events,
                    Duration::from_secs(30),
                    Some(&task_bar),
                )
                .await;
                let stats = journal.stats();
                journal.close().await;
                if let Err(error) = server.drop_database(&database).await {
                    eprintln!("could not drop {database}: {error}");
                }
                let mut row = row_of(&mode.store_label("postgres"), groups, actors, &outcome);
                row.detail("transactions", stats.transactions);
                row.detail("largest_batch", stats.largest_batch);
                row.detail("pool_max_connections", journal_options.max_connections);
                row.detail("max_batch_size", journal_options.max_batch_size);
                row
            });
            bar.finish();
            progress.println(line(&row));
            rows.push(row);
        }
        for &clients in &options.pgbench_clients {
            for rows_per_tx in [1u32, 100] {
                match pgbench(server, rows_per_tx, clients, options.pgbench_seconds) {
                    Ok(row) => {
                        progress.println(line(&row));
                        rows.push(row);
                    }
                    Err(error) => progress.println(format!("pgbench failed: {error}")),
                }
            }
        }
    }
    if options.sqlite {
        for run in 1..=options.sqlite_runs {
            for mode in modes {
                let row = sqlite_closed_loop(options, mode, run, progress);
                progress.println(line(&row));
                rows.push(row);
            }
            let total = options.actors as u64 * options.sqlite_events;
            let row = sqlite_floor("sqlite-raw-100-rows", total, 100, run);
            progress.println(line(&row));
            rows.push(row);
            for row in sqlite_sequential(options.sequential_events, run) {
                progress.println(line(&row));
                rows.push(row);
            }
        }
    }
    rows
}

fn row_of(store: &str, groups: usize, actors: usize, outcome: &ClosedLoopOutcome) -> Row {
    let mut row = Row::new("group-commit", store, groups, 1);
    row.detail("load_avg_1m", sys::load_average().unwrap_or(f64::NAN));
    row.actors = actors as u64;
    row.events = outcome.events;
    row.elapsed_s = outcome.elapsed.as_secs_f64();
    row.throughput_per_s = outcome.throughput();
    row.cpu_s = Some(outcome.cpu.as_secs_f64());
    row.detail("failed_asks", outcome.failed);
    row
}

/// The closed loop on a fresh SQLite journal in `mode`.
fn sqlite_closed_loop(
    options: &GroupCommitOptions,
    mode: CommitMode,
    run: u32,
    progress: &Progress,
) -> Row {
    let bar = progress.bar(
        &mode.store_label("sqlite"),
        options.actors as u64 * options.sqlite_events,
    );
    let (actors, events, groups) = (options.actors, options.sqlite_events, options.groups);
    let task_bar = bar.clone();
    let row = block_on_system(async move {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite:{}", dir.path().join("journal.db").display());
        let journal_options = SqliteJournalOptions {
            max_batch_size: mode.max_batch_size(),
            ..SqliteJournalOptions::new(url)
        };
        let journal = SqliteJournal::connect(&journal_options)
            .await
            .expect("the SQLite journal opens");
        let store: Arc<dyn JournalStore> = Arc::new(journal.clone());
        let process_cpu = sys::process_cpu();
        let outcome = run_on_store(
            store,
            groups,
            actors,
            events,
            Duration::from_secs(30),
            Some(&task_bar),
        )
        .await;
        let process_cpu = sys::process_cpu().saturating_sub(process_cpu);
        let stats = journal.stats();
        journal.close().await;
        let mut row = row_of(&mode.store_label("sqlite"), groups, actors, &outcome);
        row.run = run;
        row.detail("transactions", stats.transactions);
        row.detail("largest_batch", stats.largest_batch);
        row.detail("max_batch_size", journal_options.max_batch_size);
        row.detail("process_cpu_s", process_cpu.as_secs_f64());
        row
    });
    bar.finish();
    row
}

/// The raw sqlx floor: `rows` rows, `per_tx` per transaction (see [`sqlite_floor`]).
///
/// [`sqlite_floor`]: crate::sqlite_floor
fn sqlite_floor(label: &str, rows: u64, per_tx: u64, run: u32) -> Row {
    let outcome = block_on_system(async move {
        let dir = tempfile::tempdir().expect("a temporary directory");
        sqlite_floor::insert_rows(dir.path(), rows, per_tx)
            .await
            .expect("the raw SQLite floor runs")
    });
    let mut row = Row::new("group-commit", label, 0, run);
    row.actors = 1;
    row.events = outcome.rows;
    row.elapsed_s = outcome.elapsed.as_secs_f64();
    row.throughput_per_s = outcome.rows as f64 / row.elapsed_s;
    row.persist = outcome.transactions.summary();
    row.ask = row.persist;
    row.detail("rows_per_transaction", per_tx);
    row.detail("load_avg_1m", sys::load_average().unwrap_or(f64::NAN));
    row
}

/// One persistent actor on a fresh SQLite journal (default options: group commit), `events`
/// sequential persists (ask, await, ask again), side by side with the raw floor's one-row
/// transactions on another file of the same directory: blocks of 50 of each, alternating, so
/// that both see the same disk and the same load. Rows `sqlite-sequential` (ask latency) and
/// `sqlite-raw-1-row` (transaction latency).
fn sqlite_sequential(events: u64, run: u32) -> [Row; 2] {
    const BLOCK: u64 = 50;
    let (persists, floor_tx, elapsed) = block_on_system(async move {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite:{}", dir.path().join("journal.db").display());
        let journal = SqliteJournal::connect(&SqliteJournalOptions::new(url))
            .await
            .expect("the SQLite journal opens");
        let mut floor = sqlite_floor::Floor::open(dir.path())
            .await
            .expect("the raw SQLite floor opens");
        let journal_actor = start_journal(Arc::new(journal.clone()), 1, Duration::from_secs(30));
        let actor = BenchActor::new(journal_actor, "sequential".to_owned()).start();
        wait_ready(std::slice::from_ref(&actor))
            .await
            .expect("the benchmark actor recovers");
        let (mut persists, mut floor_tx) = (Latencies::new(), Latencies::new());
        let mut elapsed = [Duration::ZERO; 2];
        let mut done = 0;
        while done < events {
            let block = BLOCK.min(events - done);
            let start = Instant::now();
            for _ in 0..block {
                let asked = Instant::now();
                actor
                    .send(Persist)
                    .await
                    .expect("the actor answers")
                    .expect("the persist succeeds");
                persists.record(asked.elapsed());
            }
            elapsed[0] += start.elapsed();
            let start = Instant::now();
            for _ in 0..block {
                floor_tx.record(floor.transaction(1).await.expect("a floor transaction"));
            }
            elapsed[1] += start.elapsed();
            done += block;
        }
        journal.close().await;
        let _ = floor.close().await;
        (persists, floor_tx, elapsed)
    });
    let row = |store: &str, latencies: Latencies, elapsed: Duration| {
        let mut row = Row::new("group-commit", store, 1, run);
        row.actors = 1;
        row.events = latencies.len();
        row.elapsed_s = elapsed.as_secs_f64();
        row.throughput_per_s = row.events as f64 / row.elapsed_s;
        row.ask = latencies.summary();
        row.persist = row.ask;
        row.detail("load_avg_1m", sys::load_average().unwrap_or(f64::NAN));
        row.detail("interleaved_blocks_of", BLOCK);
        row
    };
    [
        row("sqlite-sequential", persists, elapsed[0]),
        row("sqlite-raw-1-row", floor_tx, elapsed[1]),
    ]
}

fn line(row: &Row) -> String {
    let latency = row
        .ask
        .map(|s| format!(", p50 {:.3} ms, p99 {:.3} ms", s.p50_ms, s.p99_ms))
        .unwrap_or_default();
    format!(
        "group-commit {} (R={}, {} actors, run {}): {} events in {:.2} s = {:.0} events/s{latency}",
        row.store, row.groups, row.actors, row.run, row.events, row.elapsed_s, row.throughput_per_s
    )
}

/// The scratch table pgbench inserts into: the journal table's columns and keys.
const SCRATCH_DDL: &str = "\
CREATE SEQUENCE scratch_seq;
CREATE TABLE scratch (
    ordering        BIGSERIAL NOT NULL,
    persistence_id  TEXT      NOT NULL,
    seq_nr          BIGINT    NOT NULL,
    writer_uuid     TEXT      NOT NULL,
    write_timestamp BIGINT    NOT NULL,
    serializer_id   INTEGER   NOT NULL,
    manifest        TEXT      NOT NULL,
    payload         BYTEA     NOT NULL,
    tags            TEXT[]    NOT NULL,
    PRIMARY KEY (persistence_id, seq_nr)
);
CREATE UNIQUE INDEX scratch_ordering_idx ON scratch (ordering);";

/// The pgbench script inserting `rows` journal-like rows in one statement (one transaction).
pub fn pgbench_script(rows: u32) -> String {
    format!(
        "INSERT INTO scratch (persistence_id, seq_nr, writer_uuid, write_timestamp, \
         serializer_id, manifest, payload, tags) \
         SELECT 'pgbench-' || :client_id, nextval('scratch_seq'), \
         '6d1f0c2e-0000-4000-8000-000000000000', 1700000000000, 1, '', '\\x31'::bytea, '{{}}' \
         FROM generate_series(1, {rows});\n"
    )
}

/// Runs pgbench with [`pgbench_script`] of `rows_per_tx` rows, `clients` clients, for
/// `seconds`, in a scratch database over the Unix socket; the row's throughput is rows/s.
fn pgbench(server: &PgServer, rows_per_tx: u32, clients: u32, seconds: u32) -> Result<Row, String> {
    let database = server.fresh_name("pgbench");
    block_on_system(async {
        server.create_database(&database).await?;
        let mut conn =
            <sqlx::PgConnection as sqlx::Connection>::connect(&server.socket_url(&database))
                .await?;
        sqlx::raw_sql(SCRATCH_DDL).execute(&mut conn).await?;
        sqlx::Connection::close(conn).await
    })
    .map_err(|e| format!("scratch database: {e}"))?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let script = dir.path().join(format!("insert_{rows_per_tx}.sql"));
    std::fs::write(&script, pgbench_script(rows_per_tx)).map_err(|e| e.to_string())?;
    let threads = clients.clamp(1, 2);
    let output = Command::new("pgbench")
        .args(pgbench_args(
            server, &script, clients, threads, seconds, &database,
        ))
        .output()
        .map_err(|e| format!("pgbench could not run: {e}"));
    let _ = block_on_system(server.drop_database(&database));
    let output = output?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "pgbench exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let tps = parse_tps(&stdout).ok_or_else(|| format!("no tps in pgbench output:\n{stdout}"))?;
    let label = if rows_per_tx == 1 {
        "pgbench-1-row".to_owned()
    } else {
        format!("pgbench-{rows_per_tx}-rows")
    };
    let mut row = Row::new("group-commit", &label, 0, 1);
    row.actors = u64::from(clients);
    row.elapsed_s = f64::from(seconds);
    row.throughput_per_s = tps * f64::from(rows_per_tx);
    row.events = (row.throughput_per_s * f64::from(seconds)) as u64;
    row.detail("pgbench_tps", tps);
    row.detail("pgbench_clients", clients);
    row.detail("rows_per_transaction", rows_per_tx);
    row.detail(
        "command",
        format!(
            "pgbench {}",
            pgbench_args(
                server,
                Path::new(&format!("insert_{rows_per_tx}.sql")),
                clients,
                threads,
                seconds,
                "DB"
            )
            .join(" ")
        ),
    );
    row.detail("script", pgbench_script(rows_per_tx));
    Ok(row)
}

fn pgbench_args(
    server: &PgServer,
    script: &Path,
    clients: u32,
    threads: u32,
    seconds: u32,
    database: &str,
) -> Vec<String> {
    vec![
        "-n".to_owned(),
        "-f".to_owned(),
        script.display().to_string(),
        "-c".to_owned(),
        clients.to_string(),
        "-j".to_owned(),
        threads.to_string(),
        "-T".to_owned(),
        seconds.to_string(),
        "-h".to_owned(),
        server.socket_dir.clone(),
        "-U".to_owned(),
        server.user.clone(),
        database.to_owned(),
    ]
}

/// The `tps = N (without initial connection time)` figure of pgbench's report.
fn parse_tps(output: &str) -> Option<f64> {
    output
        .lines()
        .filter(|l| l.trim_start().starts_with("tps ="))
        .find(|l| l.contains("without initial connection time") || !l.contains("including"))
        .or_else(|| output.lines().find(|l| l.trim_start().starts_with("tps =")))
        .and_then(|l| l.split('=').nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tps_from_pgbench_15_output() {
        let out = "latency average = 1.062 ms\ninitial connection time = 3.163 ms\ntps = 941.493047 (without initial connection time)\n";
        assert_eq!(parse_tps(out), Some(941.493047));
    }
}
