//! The `postgres` scenario: the open loop against the PostgreSQL journal (default pool size),
//! through a TCP proxy on 127.0.0.1 that can delay a share of the traffic, with and without
//! the fault, for several group counts; each run in a database of its own.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions};
use indicatif::ProgressBar;

use crate::actor::{wait_ready, BenchActor};
use crate::open_loop::{drive, fill_latencies, summary_line, Arrivals};
use crate::pg::{Monitor, PgServer};
use crate::proxy::{Fault, FaultProxy};
use crate::report::Row;
use crate::runner::{block_on_system, run_jobs, start_journal, Progress};
use crate::stores::TimedStore;

/// How the journal commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitMode {
    /// The journal's default: group commit (max batch size 512, `DEFAULT_MAX_BATCH_SIZE`).
    GroupCommit,
    /// `max_batch_size` 1: every atomic write its own transaction, concurrent on the pool.
    PerWrite,
}

impl CommitMode {
    /// The store label.
    pub fn store_label(self, backend: &str) -> String {
        match self {
            CommitMode::GroupCommit => format!("{backend}-group-commit"),
            CommitMode::PerWrite => format!("{backend}-per-write"),
        }
    }

    /// The journal's `max_batch_size` for this mode.
    pub fn max_batch_size(self) -> u32 {
        match self {
            CommitMode::GroupCommit => actix_persistence_sql::DEFAULT_MAX_BATCH_SIZE,
            CommitMode::PerWrite => 1,
        }
    }
}

/// Options of the `postgres` scenario.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The server.
    pub server: PgServer,
    /// Arrivals (the seed is varied per run).
    pub arrivals: Arrivals,
    /// Group counts.
    pub groups: Vec<usize>,
    /// Commit modes.
    pub modes: Vec<CommitMode>,
    /// The fault's delays (its `percent` is taken from `fault_pcts`).
    pub fault: Fault,
    /// Percent of chunks delayed, one setting each (0: no fault).
    pub fault_pcts: Vec<f64>,
    /// Runs per configuration.
    pub runs: u32,
    /// Run the group counts of one (mode, fault, run) at the same time.
    pub parallel: bool,
}

/// Runs the `postgres` scenario and returns its rows (runs, then medians).
pub fn run(options: &PostgresOptions, progress: &Progress) -> Vec<Row> {
    let mut rows = Vec::new();
    for run in 1..=options.runs {
        for &mode in &options.modes {
            for &fault_pct in &options.fault_pcts {
                let faulty = fault_pct > 0.0;
                let arrivals = Arrivals {
                    seed: options.arrivals.seed.wrapping_add(u64::from(run)),
                    ..options.arrivals
                };
                let fault = if faulty {
                    Fault {
                        seed: arrivals.seed,
                        percent: fault_pct,
                        ..options.fault
                    }
                } else {
                    Fault::none()
                };
                let jobs = options
                    .groups
                    .iter()
                    .map(|&groups| {
                        let label = format!(
                            "run {run} {} {} R{groups}",
                            mode.store_label("pg"),
                            if faulty {
                                format!("fault {fault_pct}%")
                            } else {
                                "healthy".to_owned()
                            }
                        );
                        let bar = progress.bar(&label, arrivals.warmup + arrivals.asks);
                        let server = options.server.clone();
                        let job = move || {
                            let row = block_on_system(one_config(
                                server,
                                arrivals,
                                groups,
                                mode,
                                fault,
                                run,
                                bar.clone(),
                            ));
                            bar.finish_and_clear();
                            row
                        };
                        (
                            format!("pg-{groups}"),
                            Box::new(job) as Box<dyn FnOnce() -> Row + Send>,
                        )
                    })
                    .collect();
                let done = run_jobs(jobs, options.parallel);
                for row in &done {
                    progress.println(summary_line(row));
                }
                rows.extend(done);
            }
        }
    }
    crate::report::with_medians(rows)
}

async fn one_config(
    server: PgServer,
    arrivals: Arrivals,
    groups: usize,
    mode: CommitMode,
    fault: Fault,
    run: u32,
    bar: ProgressBar,
) -> Row {
    let realtime = crate::sys::set_realtime();
    let database = server.fresh_name(&format!("open_r{groups}"));
    server
        .create_database(&database)
        .await
        .expect("the benchmark database can be created");
    let proxy = FaultProxy::start(server.tcp, fault).expect("the fault proxy starts");
    let options = PostgresJournalOptions {
        max_batch_size: mode.max_batch_size(),
        ..PostgresJournalOptions::new(server.tcp_url(proxy.addr(), &database))
    };
    let pool_size = options.max_connections;
    let journal = PostgresJournal::connect(&options)
        .await
        .expect("the PostgreSQL journal connects");
    let store = Arc::new(TimedStore::new(journal.clone()));
    let journal_actor = start_journal(store.clone(), groups, Duration::from_secs(10));
    let actors = BenchActor::start_many(&journal_actor, "pg", arrivals.actors);
    wait_ready(&actors).await.expect("benchmark actors recover");
    let monitor = Monitor::start(&server, &database, Duration::from_millis(500))
        .await
        .expect("the monitor connects");
    let stats_before = journal.stats();
    let outcome = drive(&actors, arrivals, Some(&bar)).await;
    let seen = monitor.stop().await;
    let stats_after = journal.stats();

    let mut row = Row::new("postgres", &mode.store_label("postgres"), groups, run);
    row.actors = arrivals.actors as u64;
    row.delay_pct = 0.0;
    if fault.percent > 0.0 {
        row.fault = Some(format!(
            "tcp {}% of chunks +{}-{} ms",
            fault.percent,
            fault.min.as_millis(),
            fault.max.as_millis()
        ));
    }
    // No store-level marker here: a write counts as delayed when it took at least the
    // smallest injected delay.
    let slow = fault.min.max(Duration::from_millis(100));
    fill_latencies(&mut row, &outcome, store.take_samples(), |_, _, persist| {
        persist >= slow
    });
    row.db_connections_max = Some(seen.max_connections);
    row.db_connections_mean = Some(seen.mean_connections);
    row.detail("pool_max_connections", pool_size);
    row.detail("db_backend_cpu_s", seen.backend_cpu.as_secs_f64());
    row.detail("monitor_samples", seen.samples);
    row.detail(
        "transactions",
        stats_after.transactions - stats_before.transactions,
    );
    row.detail("largest_batch", stats_after.largest_batch);
    row.detail("period_ms", arrivals.period.as_secs_f64() * 1e3);
    row.detail("warmup_asks", arrivals.warmup);
    row.detail("seed", arrivals.seed);
    row.detail("realtime", realtime);

    drop(actors);
    journal.close().await;
    let proxy_stats = proxy.stop();
    row.detail("proxy_chunks", proxy_stats.chunks.load(Ordering::Relaxed));
    row.detail(
        "proxy_delayed_chunks",
        proxy_stats.delayed_chunks.load(Ordering::Relaxed),
    );
    row.detail(
        "proxy_cpu_s",
        proxy_stats.cpu_micros.load(Ordering::Relaxed) as f64 / 1e6,
    );
    if let Err(error) = server.drop_database(&database).await {
        eprintln!("could not drop {database}: {error}");
    }
    row
}
