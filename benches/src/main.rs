//! `persistence-bench`: the benchmark harness of actix-persistence.
//!
//! ```text
//! cargo run --release -p actix-persistence-bench -- <scenario> [options] [--json FILE] [--quick]
//! ```
//! Scenarios: `closed-loop`, `open-loop`, `postgres`, `group-commit`; `chart` draws an SVG
//! from a JSON file; `machine` prints the machine description. See `docs/benchmarks.md`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use actix_persistence_bench::closed_loop::{self, ClosedLoopOptions, JournalPlacement};
use actix_persistence_bench::group_commit::{self, GroupCommitOptions};
use actix_persistence_bench::open_loop::{self, Arrivals, OpenLoopOptions};
use actix_persistence_bench::pg::PgServer;
use actix_persistence_bench::postgres::{self, CommitMode, PostgresOptions};
use actix_persistence_bench::projection::{self, ProjectionOptions};
use actix_persistence_bench::projection_chart;
use actix_persistence_bench::proxy::Fault;
use actix_persistence_bench::report::{self, Row};
use actix_persistence_bench::runner::{block_on_system, Progress};
use actix_persistence_bench::{chart, sys};
use clap::{Args, Parser, Subcommand, ValueEnum};

/// With the `mimalloc` feature the harness allocates through mimalloc (see `Cargo.toml`).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "persistence-bench",
    about = "Benchmarks of actix-persistence (see docs/benchmarks.md)"
)]
struct Cli {
    /// Write every result row (runs and medians) to this JSON file.
    #[arg(long, global = true)]
    json: Option<PathBuf>,
    /// Small sizes: every scenario finishes in well under 60 s (smoke test). Explicit options
    /// still win.
    #[arg(long, global = true)]
    quick: bool,
    /// SCHED_FIFO priority of the latency-measuring threads of `open-loop` and `postgres`
    /// (the clock, each configuration's Actix thread, the fault proxy), so other work on the
    /// machine delays their wake-ups less; 0 leaves the normal scheduler. Needs root or
    /// CAP_SYS_NICE (silently off otherwise; the JSON rows say whether it was on).
    #[arg(long, global = true, default_value_t = 10)]
    rt_priority: i32,
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// N actors each persist M events as fast as they can; persists/s per group count.
    ClosedLoop(ClosedLoopArgs),
    /// Asks at a fixed rate to random actors; D% of writes delayed; latency percentiles.
    OpenLoop(OpenLoopArgs),
    /// The open loop on PostgreSQL behind a TCP latency fault, with CPU and connections.
    Postgres(PostgresArgs),
    /// Closed loop on PostgreSQL and SQLite: group commit vs one transaction per write,
    /// next to pgbench's insert rates.
    GroupCommit(GroupCommitArgs),
    /// Draws ask-latency percentiles per group count from a JSON file into an SVG.
    Chart(ChartArgs),
    /// Prints the markdown tables of a JSON file (as in docs/benchmarks.md).
    Table(TableArgs),
    /// A projection catching up on 100,000 stored events: events/s by `max_concurrency`
    /// (1 ms handler) and by group size (exactly-once read model), on SQLite and PostgreSQL.
    Projection(ProjectionArgs),
    /// Prints the machine description (nproc, lscpu, memory, rustc, date).
    Machine,
}

#[derive(Debug, Args)]
struct ProjectionArgs {
    #[command(flatten)]
    pg: PgArgs,
    /// Persistence ids [default: 1000; quick: 100].
    #[arg(long)]
    ids: Option<usize>,
    /// Events stored, spread over the ids [default: 100000; quick: 5000].
    #[arg(long)]
    events: Option<u64>,
    /// max_concurrency values [default: 1,2,4,...,128].
    #[arg(long, value_delimiter = ',')]
    concurrency: Option<Vec<usize>>,
    /// Group sizes of the grouped exactly-once runs [default: 1,10,100,1000].
    #[arg(long, value_delimiter = ',')]
    group_sizes: Option<Vec<usize>>,
    /// Runs per configuration (median reported) [default: 3; quick: 1].
    #[arg(long)]
    runs: Option<u32>,
    /// Envelopes measured per unit of max_concurrency [default: 2000; quick: 200].
    #[arg(long)]
    per_slot: Option<u64>,
    /// Envelopes measured per envelope of group size [default: 5000; quick: 200].
    #[arg(long)]
    per_group: Option<u64>,
    /// Skip SQLite.
    #[arg(long)]
    no_sqlite: bool,
    /// Skip PostgreSQL.
    #[arg(long)]
    no_postgres: bool,
    /// Also draw the chart into this SVG.
    #[arg(long)]
    chart: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct TableArgs {
    /// The JSON rows (written by `--json`).
    #[arg(long)]
    input: PathBuf,
    /// Only the median rows (where a configuration ran several times).
    #[arg(long)]
    medians: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ClosedStore {
    /// The healthy in-memory store.
    Healthy,
    /// The seed's pathological in-memory store.
    Pathological,
    /// Both.
    Both,
}

#[derive(Debug, Args)]
struct ClosedLoopArgs {
    /// Which store(s).
    #[arg(long, value_enum, default_value_t = ClosedStore::Both)]
    store: ClosedStore,
    /// Actors on the healthy store [default: 1000].
    #[arg(long)]
    actors: Option<usize>,
    /// Events per actor on the healthy store [default: 100].
    #[arg(long)]
    events: Option<u64>,
    /// Actors on the pathological store [default: 1000; quick: 100].
    #[arg(long)]
    pathological_actors: Option<usize>,
    /// Events per actor on the pathological store [default: 25 (the seed's 100 by flag, which
    /// takes about 15 minutes); quick: 2].
    #[arg(long)]
    pathological_events: Option<u64>,
    /// Group counts, comma-separated [default: 1,2,4,...,2048].
    #[arg(long, value_delimiter = ',')]
    groups: Option<Vec<usize>>,
    /// Runs per group count on the healthy store (the median is reported) [default: 3].
    #[arg(long)]
    runs: Option<u32>,
    /// Run the pathological group counts one after the other instead of at the same time.
    #[arg(long)]
    sequential: bool,
    /// Seed of the pathological delays.
    #[arg(long, default_value_t = 2048)]
    seed: u64,
    /// Arbiters (threads) the healthy store's actors run on, each driving its share.
    #[arg(long, default_value_t = 1)]
    arbiters: usize,
    /// With several arbiters: one journal actor on an arbiter of its own (`shared`), or one on
    /// each actors' arbiter over the same store (`per-arbiter`).
    #[arg(long, value_enum, default_value_t = JournalPlacement::Shared)]
    journal: JournalPlacement,
}

#[derive(Debug, Args)]
struct ArrivalArgs {
    /// Actors the asks are spread over.
    #[arg(long, default_value_t = 100)]
    actors: usize,
    /// Milliseconds between two asks (all actors together).
    #[arg(long, default_value_t = 10.0)]
    period_ms: f64,
    /// Asks before the measured ones, not recorded [open-loop default: 2000 (the seed's 20000
    /// by flag); quick: 200].
    #[arg(long)]
    warmup: Option<u64>,
    /// Measured asks [open-loop default: 10000 (the seed's 50000 by flag); quick: 1000].
    #[arg(long)]
    asks: Option<u64>,
    /// Runs per configuration (each and the median are reported) [default: 3; quick: 1].
    #[arg(long)]
    runs: Option<u32>,
    /// Run each configuration alone instead of all group counts of a (setting, run) at once.
    #[arg(long)]
    sequential: bool,
    /// Seed of the actor choice and of the delays (plus the run number).
    #[arg(long, default_value_t = 1000)]
    seed: u64,
}

impl ArrivalArgs {
    fn arrivals(&self, quick: bool, warmup: u64, asks: u64) -> Arrivals {
        Arrivals {
            actors: self.actors,
            period: Duration::from_secs_f64(self.period_ms / 1e3),
            warmup: self.warmup.unwrap_or(if quick { 200 } else { warmup }),
            asks: self.asks.unwrap_or(if quick { 1000 } else { asks }),
            seed: self.seed,
        }
    }

    fn runs(&self, quick: bool) -> u32 {
        self.runs.unwrap_or(if quick { 1 } else { 3 })
    }
}

#[derive(Debug, Args)]
struct OpenLoopArgs {
    #[command(flatten)]
    arrivals: ArrivalArgs,
    /// Percent of writes delayed, comma-separated [default: 0,1,2; quick: 0,1].
    #[arg(long, value_delimiter = ',')]
    delays: Option<Vec<f64>>,
    /// Shortest delay of a delayed write, ms.
    #[arg(long, default_value_t = 100)]
    delay_min_ms: u64,
    /// Longest delay of a delayed write, ms.
    #[arg(long, default_value_t = 500)]
    delay_max_ms: u64,
    /// Group counts, comma-separated [default: 1,2,4,8,16,32,64,128; quick: 1,16].
    #[arg(long, value_delimiter = ',')]
    groups: Option<Vec<usize>>,
}

#[derive(Debug, Args)]
struct PgArgs {
    /// Directory of the server's Unix socket.
    #[arg(long, default_value = "/var/run/postgresql")]
    pg_socket_dir: String,
    /// The server's TCP address (upstream of the fault proxy).
    #[arg(long, default_value = "127.0.0.1:5432")]
    pg_tcp: SocketAddr,
    /// A user that may create databases (no password).
    #[arg(long, default_value = "postgres")]
    pg_user: String,
}

impl PgArgs {
    fn server(&self) -> PgServer {
        PgServer {
            socket_dir: self.pg_socket_dir.clone(),
            tcp: self.pg_tcp,
            user: self.pg_user.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// The journal's default group commit.
    GroupCommit,
    /// One transaction per atomic write (max batch size 1).
    PerWrite,
}

#[derive(Debug, Args)]
struct PostgresArgs {
    #[command(flatten)]
    pg: PgArgs,
    #[command(flatten)]
    arrivals: ArrivalArgs,
    /// Group counts, comma-separated [default: 1,8,16; quick: 1,16].
    #[arg(long, value_delimiter = ',')]
    groups: Option<Vec<usize>>,
    /// Commit modes of the journal, comma-separated [default: per-write,group-commit; quick:
    /// per-write].
    #[arg(long, value_delimiter = ',', value_enum)]
    modes: Option<Vec<Mode>>,
    /// Percent of proxied chunks (either direction) delayed, comma-separated; 0 is the run
    /// without the fault. A write takes about 10 chunks, so 0.1 delays about 1 % of writes.
    /// [default: 0,0.1,1; quick: 0,1].
    #[arg(long, value_delimiter = ',')]
    fault_pcts: Option<Vec<f64>>,
    /// Shortest delay of a delayed chunk, ms.
    #[arg(long, default_value_t = 100)]
    fault_min_ms: u64,
    /// Longest delay of a delayed chunk, ms.
    #[arg(long, default_value_t = 500)]
    fault_max_ms: u64,
}

#[derive(Debug, Args)]
struct GroupCommitArgs {
    #[command(flatten)]
    pg: PgArgs,
    /// Actors [default: 1000; quick: 100].
    #[arg(long)]
    actors: Option<usize>,
    /// Events per actor on PostgreSQL [default: 100; quick: 20].
    #[arg(long)]
    events: Option<u64>,
    /// Events per actor on SQLite [default: 20; quick: 5].
    #[arg(long)]
    sqlite_events: Option<u64>,
    /// Write-reply-ordering groups of the journal actor.
    #[arg(long, default_value_t = 1)]
    groups: usize,
    /// Seconds per pgbench run [default: 10; quick: 2].
    #[arg(long)]
    pgbench_seconds: Option<u32>,
    /// pgbench client counts, comma-separated [default: 1,10; quick: 1].
    #[arg(long, value_delimiter = ',')]
    pgbench_clients: Option<Vec<u32>>,
    /// Skip SQLite.
    #[arg(long)]
    no_sqlite: bool,
    /// Runs of each SQLite configuration (group commit, per write, the raw floors, one
    /// actor's sequential persists), interleaved [default: 1].
    #[arg(long, default_value_t = 1)]
    sqlite_runs: u32,
    /// Sequential persists of one actor on SQLite, and transactions of the raw 1-row floor
    /// [default: 2000; quick: 300].
    #[arg(long)]
    sequential_events: Option<u64>,
    /// Skip PostgreSQL and pgbench.
    #[arg(long)]
    no_postgres: bool,
}

#[derive(Debug, Args)]
struct ChartArgs {
    /// The JSON rows (written by `--json`).
    #[arg(long)]
    input: PathBuf,
    /// The SVG to write.
    #[arg(long, default_value = "docs/img/open-loop-ask-latency.svg")]
    output: PathBuf,
    /// Which scenario's rows (`open-loop` or `postgres`).
    #[arg(long, default_value = "open-loop")]
    scenario: String,
}

fn main() {
    let cli = Cli::parse();
    let progress = Progress::new();
    let quick = cli.quick;
    sys::enable_realtime(cli.rt_priority);
    let rows: Vec<Row> = match &cli.scenario {
        Scenario::Machine => {
            print!("{}", sys::machine_description());
            return;
        }
        Scenario::Table(args) => {
            match report::read_json(&args.input) {
                Ok(rows) => print!("{}", report::markdown(&rows, args.medians)),
                Err(error) => {
                    eprintln!("could not read {}: {error}", args.input.display());
                    std::process::exit(1);
                }
            }
            return;
        }
        Scenario::Chart(args) => {
            let drawn = if args.scenario == "projection" {
                projection_chart::draw(&args.input, &args.output)
            } else {
                chart::draw(&args.input, &args.output, &args.scenario)
            };
            if let Err(error) = drawn {
                eprintln!("chart failed: {error}");
                std::process::exit(1);
            }
            println!("wrote {}", args.output.display());
            return;
        }
        Scenario::ClosedLoop(args) => {
            let all_groups: Vec<usize> = (0..12).map(|i| 1usize << i).collect();
            let options = ClosedLoopOptions {
                actors: args.actors.unwrap_or(1000),
                events: args.events.unwrap_or(100),
                pathological_actors: args.pathological_actors.unwrap_or(if quick {
                    100
                } else {
                    1000
                }),
                pathological_events: args
                    .pathological_events
                    .unwrap_or(if quick { 2 } else { 25 }),
                groups: args.groups.clone().unwrap_or(if quick {
                    vec![1, 16, 2048]
                } else {
                    all_groups
                }),
                runs: args.runs.unwrap_or(if quick { 1 } else { 3 }),
                healthy: args.store != ClosedStore::Pathological,
                pathological: args.store != ClosedStore::Healthy,
                parallel: !args.sequential,
                seed: args.seed,
                arbiters: args.arbiters.max(1),
                placement: args.journal,
            };
            progress.println(format!("closed-loop: {options:?}"));
            let rows = report::with_medians(closed_loop::run(&options, &progress));
            println!("{}", report::throughput_table(&rows));
            rows
        }
        Scenario::OpenLoop(args) => {
            let options = OpenLoopOptions {
                arrivals: args.arrivals.arrivals(quick, 2000, 10_000),
                groups: args.groups.clone().unwrap_or(if quick {
                    vec![1, 16]
                } else {
                    vec![1, 2, 4, 8, 16, 32, 64, 128]
                }),
                delay_pcts: args.delays.clone().unwrap_or(if quick {
                    vec![0.0, 1.0]
                } else {
                    vec![0.0, 1.0, 2.0]
                }),
                delay_range: (
                    Duration::from_millis(args.delay_min_ms),
                    Duration::from_millis(args.delay_max_ms),
                ),
                runs: args.arrivals.runs(quick),
                parallel: !args.arrivals.sequential,
            };
            progress.println(format!("open-loop: {options:?}"));
            let rows = open_loop::run(&options, &progress);
            println!("{}", report::latency_table(&rows));
            rows
        }
        Scenario::Postgres(args) => {
            let server = args.pg.server();
            require_postgres(&server);
            let modes = args.modes.clone().unwrap_or(if quick {
                vec![Mode::PerWrite]
            } else {
                vec![Mode::PerWrite, Mode::GroupCommit]
            });
            let options = PostgresOptions {
                server,
                arrivals: args.arrivals.arrivals(quick, 500, 5000),
                groups: args.groups.clone().unwrap_or(if quick {
                    vec![1, 16]
                } else {
                    vec![1, 8, 16]
                }),
                modes: modes
                    .into_iter()
                    .map(|m| match m {
                        Mode::GroupCommit => CommitMode::GroupCommit,
                        Mode::PerWrite => CommitMode::PerWrite,
                    })
                    .collect(),
                fault: Fault {
                    percent: 0.0,
                    min: Duration::from_millis(args.fault_min_ms),
                    max: Duration::from_millis(args.fault_max_ms),
                    seed: 0,
                    latency: Duration::ZERO,
                },
                fault_pcts: args.fault_pcts.clone().unwrap_or(if quick {
                    vec![0.0, 1.0]
                } else {
                    vec![0.0, 0.1, 1.0]
                }),
                runs: args.arrivals.runs(quick),
                parallel: !args.arrivals.sequential,
            };
            progress.println(format!("postgres: {options:?}"));
            let rows = postgres::run(&options, &progress);
            println!("{}", report::latency_table(&rows));
            rows
        }
        Scenario::Projection(args) => {
            let options = ProjectionOptions {
                server: (!args.no_postgres).then(|| args.pg.server()),
                sqlite: !args.no_sqlite,
                ids: args.ids.unwrap_or(if quick { 100 } else { 1000 }),
                events: args.events.unwrap_or(if quick { 5_000 } else { 100_000 }),
                concurrency: args
                    .concurrency
                    .clone()
                    .unwrap_or_else(|| (0..8).map(|i| 1usize << i).collect()),
                groups: args
                    .group_sizes
                    .clone()
                    .unwrap_or_else(|| vec![1, 10, 100, 1000]),
                runs: args.runs.unwrap_or(if quick { 1 } else { 3 }),
                per_slot: args.per_slot.unwrap_or(if quick { 200 } else { 2_000 }),
                per_group: args.per_group.unwrap_or(if quick { 200 } else { 5_000 }),
                handler_delay: Duration::from_millis(1),
            };
            let rows = projection::run(&options, &progress);
            print!("{}", projection::table(&rows));
            if let Some(out) = &args.chart {
                match projection_chart::draw_rows(&rows, out) {
                    Ok(()) => println!("wrote {}", out.display()),
                    Err(error) => eprintln!("chart failed: {error}"),
                }
            }
            rows
        }
        Scenario::GroupCommit(args) => {
            let server = (!args.no_postgres).then(|| args.pg.server());
            if let Some(server) = &server {
                require_postgres(server);
            }
            let options = GroupCommitOptions {
                server,
                actors: args.actors.unwrap_or(if quick { 100 } else { 1000 }),
                events: args.events.unwrap_or(if quick { 20 } else { 100 }),
                sqlite_events: args.sqlite_events.unwrap_or(if quick { 5 } else { 20 }),
                groups: args.groups,
                pgbench_seconds: args.pgbench_seconds.unwrap_or(if quick { 2 } else { 10 }),
                pgbench_clients: args.pgbench_clients.clone().unwrap_or(if quick {
                    vec![1]
                } else {
                    vec![1, 10]
                }),
                sqlite: !args.no_sqlite,
                sqlite_runs: args.sqlite_runs.max(1),
                sequential_events: args
                    .sequential_events
                    .unwrap_or(if quick { 300 } else { 2000 }),
            };
            progress.println(format!("group-commit: {options:?}"));
            let rows = report::with_medians(group_commit::run(&options, &progress));
            println!("{}", report::throughput_table(&rows));
            rows
        }
    };
    if let Some(path) = &cli.json {
        match report::write_json(path, &rows) {
            Ok(()) => eprintln!("wrote {} rows to {}", rows.len(), path.display()),
            Err(error) => {
                eprintln!("could not write {}: {error}", path.display());
                std::process::exit(1);
            }
        }
    }
}

fn require_postgres(server: &PgServer) {
    let probe = server.clone();
    if !block_on_system(async move { probe.reachable().await }) {
        eprintln!(
            "PostgreSQL is not reachable over {} as user {}: start it, or pass --pg-socket-dir and --pg-user",
            server.socket_dir, server.user
        );
        std::process::exit(2);
    }
}
