//! The closed loop: N actors each persist M events as fast as they can (ask, await the reply,
//! ask again), as the seed's first benchmark.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use actix_persistence_core::journal::JournalActor;
use actix_persistence_core::{InMemoryJournal, JournalStore};
use indicatif::ProgressBar;
use tokio::sync::oneshot;

use crate::actor::{wait_ready, BenchActor, Persist};
use crate::report::Row;
use crate::runner::{block_on_system, run_jobs, start_journal, Progress};
use crate::stores::pathological_store;
use crate::sys;

/// What one closed loop did.
#[derive(Debug, Clone, Copy)]
pub struct ClosedLoopOutcome {
    /// Events persisted (successful asks).
    pub events: u64,
    /// Asks that failed.
    pub failed: u64,
    /// Wall time from the first ask to the last reply.
    pub elapsed: Duration,
    /// CPU time of the calling thread meanwhile.
    pub cpu: Duration,
}

impl ClosedLoopOutcome {
    /// Events per second.
    pub fn throughput(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64()
    }
}

/// Drives `actors` (recovered) through `events` persists each, every actor with one ask in
/// flight at a time. `progress` (if any) advances by one per persisted event.
pub async fn drive(
    actors: &[Addr<BenchActor>],
    events: u64,
    progress: Option<&ProgressBar>,
) -> ClosedLoopOutcome {
    let cpu_start = sys::thread_cpu();
    let start = Instant::now();
    let loops = actors.iter().map(|actor| async move {
        let (mut ok, mut failed) = (0u64, 0u64);
        for _ in 0..events {
            match actor.send(Persist).await {
                Ok(Ok(_)) => ok += 1,
                _ => failed += 1,
            }
            if let Some(bar) = progress {
                bar.inc(1);
            }
        }
        (ok, failed)
    });
    let results = futures::future::join_all(loops).await;
    let elapsed = start.elapsed();
    let (events, failed) = results
        .iter()
        .fold((0, 0), |(o, f), (ok, failed)| (o + ok, f + failed));
    ClosedLoopOutcome {
        events,
        failed,
        elapsed,
        cpu: sys::thread_cpu().saturating_sub(cpu_start),
    }
}

/// Starts `actors` actors on a journal over `store` with `groups` groups, waits for their
/// recovery and runs the closed loop.
pub async fn run_on_store(
    store: Arc<dyn JournalStore>,
    groups: usize,
    actors: usize,
    events: u64,
    call_timeout: Duration,
    progress: Option<&ProgressBar>,
) -> ClosedLoopOutcome {
    let journal = start_journal(store, groups, call_timeout);
    let addrs = BenchActor::start_many(&journal, "closed", actors);
    wait_ready(&addrs).await.expect("benchmark actors recover");
    drive(&addrs, events, progress).await
}

/// Where the journal actors of a closed loop on several arbiters run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum JournalPlacement {
    /// One journal actor, with its resequencers, on an arbiter of its own, shared by the actors
    /// of every arbiter: each persist crosses to its thread and back.
    Shared,
    /// A journal actor on each actors' arbiter, all over the one store: a persist stays on its
    /// thread (the store's locks are the only thing the arbiters share).
    PerArbiter,
}

/// The closed loop with the actors spread over `arbiters` Actix arbiters (threads), each
/// driving its own share of the actors, their journal placed as `placement` says: how an
/// Actix app with one arbiter per core persists. CPU is the whole process's.
pub async fn run_on_arbiters(
    store: Arc<dyn JournalStore>,
    groups: usize,
    actors: usize,
    events: u64,
    (arbiters, placement): (usize, JournalPlacement),
    call_timeout: Duration,
) -> ClosedLoopOutcome {
    // The shared journal's arbiter (idle when each arbiter has a journal of its own).
    let journal_arbiter = actix::Arbiter::new();
    let config = crate::runner::journal_config(groups, call_timeout);
    let journal = JournalActor::start_on(&journal_arbiter.handle(), store.clone(), config.clone());
    let arbiters: Vec<actix::Arbiter> = (0..arbiters.max(1))
        .map(|_| actix::Arbiter::new())
        .collect();
    let share = actors.div_ceil(arbiters.len());
    let mut ready = Vec::new();
    let mut go = Vec::new();
    let mut done = Vec::new();
    for (index, arbiter) in arbiters.iter().enumerate() {
        let (ready_tx, ready_rx) = oneshot::channel::<()>();
        let (go_tx, go_rx) = oneshot::channel::<()>();
        let (done_tx, done_rx) = oneshot::channel::<(u64, u64)>();
        let journal = journal.clone();
        let count = share.min(actors.saturating_sub(index * share));
        let (store, config) = (store.clone(), config.clone());
        arbiter.spawn(async move {
            let journal = match placement {
                JournalPlacement::Shared => journal,
                JournalPlacement::PerArbiter => JournalActor::start_with(store, config),
            };
            let addrs = BenchActor::start_many(&journal, &format!("closed-{index}"), count);
            wait_ready(&addrs).await.expect("benchmark actors recover");
            let _ = ready_tx.send(());
            if go_rx.await.is_err() {
                return;
            }
            let outcome = drive(&addrs, events, None).await;
            let _ = done_tx.send((outcome.events, outcome.failed));
        });
        ready.push(ready_rx);
        go.push(go_tx);
        done.push(done_rx);
    }
    for ready in ready {
        ready.await.expect("an actor arbiter started its actors");
    }
    let cpu_start = sys::process_cpu();
    let start = Instant::now();
    for go in go {
        let _ = go.send(());
    }
    let (mut ok, mut failed) = (0, 0);
    for done in done {
        let (o, f) = done
            .await
            .expect("an actor arbiter finished its closed loop");
        ok += o;
        failed += f;
    }
    let elapsed = start.elapsed();
    let cpu = sys::process_cpu().saturating_sub(cpu_start);
    for arbiter in arbiters.into_iter().chain([journal_arbiter]) {
        arbiter.stop();
        let _ = arbiter.join();
    }
    ClosedLoopOutcome {
        events: ok,
        failed,
        elapsed,
        cpu,
    }
}

/// Options of the `closed-loop` scenario.
#[derive(Debug, Clone)]
pub struct ClosedLoopOptions {
    /// Persistent actors.
    pub actors: usize,
    /// Events per actor on the healthy store.
    pub events: u64,
    /// Events per actor on the pathological store.
    pub pathological_events: u64,
    /// Actors on the pathological store.
    pub pathological_actors: usize,
    /// Group counts.
    pub groups: Vec<usize>,
    /// Runs per group count on the healthy store.
    pub runs: u32,
    /// Which stores: healthy and/or pathological.
    pub healthy: bool,
    /// Run the pathological sweep.
    pub pathological: bool,
    /// Run the pathological group counts at the same time (one thread each).
    pub parallel: bool,
    /// Seed of the pathological delays.
    pub seed: u64,
    /// Arbiters the healthy store's actors run on (see [`run_on_arbiters`]). 1: everything on
    /// one thread.
    pub arbiters: usize,
    /// Where the journal actors run when `arbiters` is above 1.
    pub placement: JournalPlacement,
}

/// Runs the `closed-loop` scenario and returns its rows.
pub fn run(options: &ClosedLoopOptions, progress: &Progress) -> Vec<Row> {
    let mut rows = Vec::new();
    if options.healthy {
        // CPU-bound: one configuration at a time, runs interleaved over the group counts.
        let bar = progress.bar(
            "closed-loop in-memory",
            options.runs as u64 * options.groups.len() as u64,
        );
        for run in 1..=options.runs {
            for &groups in &options.groups {
                let (actors, events, arbiters) = (options.actors, options.events, options.arbiters);
                let placement = options.placement;
                let outcome = block_on_system(async move {
                    let store = Arc::new(InMemoryJournal::new());
                    let timeout = Duration::from_secs(10);
                    if arbiters > 1 {
                        let on = (arbiters, placement);
                        run_on_arbiters(store, groups, actors, events, on, timeout).await
                    } else {
                        run_on_store(store, groups, actors, events, timeout, None).await
                    }
                });
                let mut row = Row::new("closed-loop", "in-memory", groups, run);
                fill(&mut row, actors, &outcome);
                row.detail("arbiters", arbiters);
                if arbiters > 1 {
                    row.detail("journal", format!("{placement:?}"));
                }
                bar.inc(1);
                rows.push(row);
            }
        }
        bar.finish();
    }
    if options.pathological {
        // Bound by the store's sleeps, not the CPU: every group count runs at the same time,
        // in a system of its own, so the sweep takes as long as its slowest row.
        let jobs = options
            .groups
            .iter()
            .map(|&groups| {
                let (actors, events) = (options.pathological_actors, options.pathological_events);
                let seed = options.seed;
                let bar = progress.bar(
                    &format!("pathological, {groups} groups"),
                    actors as u64 * events,
                );
                let job = move || {
                    let task_bar = bar.clone();
                    let outcome = block_on_system(async move {
                        let store = pathological_store(InMemoryJournal::new(), seed);
                        // The seed's call-timeout of 11 s: a write is held up to 10 s.
                        run_on_store(
                            Arc::new(store),
                            groups,
                            actors,
                            events,
                            Duration::from_secs(11),
                            Some(&task_bar),
                        )
                        .await
                    });
                    bar.finish();
                    let mut row = Row::new("closed-loop", "in-memory-pathological", groups, 1);
                    fill(&mut row, actors, &outcome);
                    row
                };
                (
                    format!("pathological-{groups}"),
                    Box::new(job) as Box<dyn FnOnce() -> Row + Send>,
                )
            })
            .collect();
        rows.extend(run_jobs(jobs, options.parallel));
    }
    rows
}

fn fill(row: &mut Row, actors: usize, outcome: &ClosedLoopOutcome) {
    row.actors = actors as u64;
    row.events = outcome.events;
    row.elapsed_s = outcome.elapsed.as_secs_f64();
    row.throughput_per_s = outcome.throughput();
    row.cpu_s = Some(outcome.cpu.as_secs_f64());
    row.detail("failed_asks", outcome.failed);
}
