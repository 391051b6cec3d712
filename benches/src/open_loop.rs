//! The open loop: asks arrive at a fixed rate, each to an actor chosen at random, whether or
//! not earlier asks were answered (as the seed's second benchmark). Latency counts from the
//! scheduled send time, so a stalled system cannot hide its stall (no coordinated omission).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use actix_persistence_core::InMemoryJournal;
use actix_persistence_testkit::{DelayProfile, DelayingJournal};
use indicatif::ProgressBar;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::actor::{wait_ready, BenchActor, Persist};
use crate::report::{Latencies, Row};
use crate::runner::{block_on_system, run_jobs, start_journal, Progress};
use crate::stores::{PersistSample, TimedStore};
use crate::sys;

/// The arrival process of an open loop.
#[derive(Debug, Clone, Copy)]
pub struct Arrivals {
    /// Persistent actors the asks are spread over.
    pub actors: usize,
    /// Time between two asks (all actors together).
    pub period: Duration,
    /// Asks sent first and not recorded.
    pub warmup: u64,
    /// Asks recorded.
    pub asks: u64,
    /// Seed of the actor choice.
    pub seed: u64,
}

/// One measured ask.
#[derive(Debug, Clone, Copy)]
pub struct AskSample {
    /// Which actor.
    pub actor: usize,
    /// The sequence number its event got (`None` if the ask failed).
    pub seq_nr: Option<u64>,
    /// From the scheduled send time to the reply.
    pub latency: Duration,
    /// From the actual send (the Actix side got the tick) to the reply: without the clock's
    /// and the scheduler's lateness.
    pub from_send: Duration,
}

/// What one open loop did.
#[derive(Debug)]
pub struct OpenLoopOutcome {
    /// The measured asks, in reply order.
    pub samples: Vec<AskSample>,
    /// From the scheduled time of the first measured ask to the last measured reply.
    pub elapsed: Duration,
    /// CPU time of the calling thread over the measured phase.
    pub cpu: Duration,
    /// How late asks were sent after their scheduled time (timer and scheduling lag).
    pub send_lag: Latencies,
}

/// A tick of the clock: ask number `index` to `actor`, scheduled at `at`.
struct Tick {
    index: u64,
    actor: usize,
    at: Instant,
}

/// The clock: a plain thread that sleeps until each scheduled time and hands the tick to the
/// Actix side. It never waits for replies, and a late Actix side still sees the scheduled
/// times. (A thread, not a Tokio timer: Tokio rounds sleeps up to whole milliseconds.)
fn start_clock(
    arrivals: Arrivals,
    ticks: tokio::sync::mpsc::UnboundedSender<Tick>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("open-loop-clock".to_owned())
        .spawn(move || {
            sys::set_realtime();
            let mut rng = StdRng::seed_from_u64(arrivals.seed);
            let start = Instant::now() + Duration::from_millis(20);
            for index in 0..arrivals.warmup + arrivals.asks {
                let at = start + arrivals.period.mul_f64(index as f64);
                let now = Instant::now();
                if at > now {
                    std::thread::sleep(at - now);
                }
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let actor = rng.gen_range(0..arrivals.actors);
                if ticks.send(Tick { index, actor, at }).is_err() {
                    return;
                }
            }
        })
        .expect("the clock thread starts")
}

/// Runs the open loop over `actors` (recovered): `arrivals.warmup` asks unrecorded, then
/// `arrivals.asks` recorded ones. `progress` advances per reply.
pub async fn drive(
    actors: &[Addr<BenchActor>],
    arrivals: Arrivals,
    progress: Option<&ProgressBar>,
) -> OpenLoopOutcome {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stop = Arc::new(AtomicBool::new(false));
    let clock = start_clock(arrivals, tx, Arc::clone(&stop));
    let samples = Rc::new(RefCell::new(Vec::with_capacity(arrivals.asks as usize)));
    let last_reply = Rc::new(RefCell::new(None::<Instant>));
    let mut send_lag = Latencies::new();
    let mut pending = Vec::with_capacity((arrivals.warmup + arrivals.asks) as usize);
    let mut measured_start = None;
    let mut cpu_start = sys::thread_cpu();
    while let Some(tick) = rx.recv().await {
        let measured = tick.index >= arrivals.warmup;
        if measured && measured_start.is_none() {
            measured_start = Some(tick.at);
            cpu_start = sys::thread_cpu();
        }
        let sent = Instant::now();
        if measured {
            send_lag.record(sent.saturating_duration_since(tick.at));
        }
        let request = actors[tick.actor].send(Persist);
        let samples = Rc::clone(&samples);
        let last_reply = Rc::clone(&last_reply);
        let bar = progress.cloned();
        pending.push(actix::spawn(async move {
            let answer = request.await;
            let done = Instant::now();
            if let Some(bar) = bar {
                bar.inc(1);
            }
            if measured {
                let seq_nr = match answer {
                    Ok(Ok(seq_nr)) => Some(seq_nr),
                    _ => None,
                };
                samples.borrow_mut().push(AskSample {
                    actor: tick.actor,
                    seq_nr,
                    latency: done.saturating_duration_since(tick.at),
                    from_send: done.saturating_duration_since(sent),
                });
                *last_reply.borrow_mut() = Some(done);
            }
        }));
    }
    stop.store(true, Ordering::Relaxed);
    let _ = clock.join();
    futures::future::join_all(pending).await;
    let cpu = sys::thread_cpu().saturating_sub(cpu_start);
    let end = last_reply.borrow().unwrap_or_else(Instant::now);
    let elapsed = measured_start
        .map(|start| end.saturating_duration_since(start))
        .unwrap_or_default();
    let samples = std::mem::take(&mut *samples.borrow_mut());
    OpenLoopOutcome {
        samples,
        elapsed,
        cpu,
        send_lag,
    }
}

/// The index of the actor in a persistence id `{prefix}-{index}`.
fn actor_index(persistence_id: &str) -> Option<usize> {
    persistence_id.rsplit('-').next()?.parse().ok()
}

/// Joins the measured asks with the persist latencies of their writes and fills the latency
/// fields of `row`: ask, persist, delayed (persist latency of delayed writes), ask latency of
/// delayed and of undelayed writes, and the number of delayed writes. `is_delayed` says
/// whether the write of (actor, first seq_nr) with that persist latency counts as delayed.
pub fn fill_latencies(
    row: &mut Row,
    outcome: &OpenLoopOutcome,
    persists: Vec<PersistSample>,
    is_delayed: impl Fn(usize, u64, Duration) -> bool,
) {
    let persist_of: HashMap<(usize, u64), Duration> = persists
        .into_iter()
        .filter_map(|p| Some(((actor_index(&p.persistence_id)?, p.from_seq_nr), p.latency)))
        .collect();
    let mut ask = Latencies::new();
    let mut from_send = Latencies::new();
    let mut persist = Latencies::new();
    let mut delayed = Latencies::new();
    let mut ask_delayed = Latencies::new();
    let mut ask_undelayed = Latencies::new();
    let (mut failed, mut unmatched) = (0u64, 0u64);
    for sample in &outcome.samples {
        ask.record(sample.latency);
        from_send.record(sample.from_send);
        let Some(seq_nr) = sample.seq_nr else {
            failed += 1;
            continue;
        };
        let Some(&persist_latency) = persist_of.get(&(sample.actor, seq_nr)) else {
            unmatched += 1;
            continue;
        };
        persist.record(persist_latency);
        if is_delayed(sample.actor, seq_nr, persist_latency) {
            delayed.record(persist_latency);
            ask_delayed.record(sample.latency);
        } else {
            ask_undelayed.record(sample.latency);
        }
    }
    row.events = ask.len();
    row.elapsed_s = outcome.elapsed.as_secs_f64();
    row.throughput_per_s = if outcome.elapsed.is_zero() {
        0.0
    } else {
        (ask.len() - failed) as f64 / outcome.elapsed.as_secs_f64()
    };
    row.ask = ask.summary();
    row.ask_from_send = from_send.summary();
    row.persist = persist.summary();
    row.delayed = delayed.summary();
    row.ask_delayed = ask_delayed.summary();
    row.ask_undelayed = ask_undelayed.summary();
    row.delayed_count = delayed.len();
    row.cpu_s = Some(outcome.cpu.as_secs_f64());
    row.detail("failed_asks", failed);
    row.detail("asks_without_persist_sample", unmatched);
    if let Some(lag) = outcome.send_lag.summary() {
        row.detail("send_lag_p99_ms", lag.p99_ms);
        row.detail("send_lag_max_ms", lag.max_ms);
    }
}

/// Options of the `open-loop` scenario.
#[derive(Debug, Clone)]
pub struct OpenLoopOptions {
    /// Arrivals (the seed is varied per run).
    pub arrivals: Arrivals,
    /// Group counts.
    pub groups: Vec<usize>,
    /// Shares of delayed writes, in percent.
    pub delay_pcts: Vec<f64>,
    /// Shortest and longest delay.
    pub delay_range: (Duration, Duration),
    /// Runs per configuration.
    pub runs: u32,
    /// Run the group counts of one (delay, run) at the same time, one thread each.
    pub parallel: bool,
}

/// Runs the `open-loop` scenario (in-memory store with the testkit's `DelayingJournal`) and
/// returns its rows (runs, then medians).
pub fn run(options: &OpenLoopOptions, progress: &Progress) -> Vec<Row> {
    let mut rows = Vec::new();
    for run in 1..=options.runs {
        for &delay_pct in &options.delay_pcts {
            let arrivals = Arrivals {
                seed: options.arrivals.seed.wrapping_add(u64::from(run)),
                ..options.arrivals
            };
            let jobs = options
                .groups
                .iter()
                .map(|&groups| {
                    let bar = progress.bar(
                        &format!("run {run} D{delay_pct}% R{groups}"),
                        arrivals.warmup + arrivals.asks,
                    );
                    let range = options.delay_range;
                    let job = move || {
                        let row = block_on_system(one_config(
                            arrivals,
                            groups,
                            delay_pct,
                            range,
                            run,
                            bar.clone(),
                        ));
                        bar.finish_and_clear();
                        row
                    };
                    (
                        format!("open-{groups}"),
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
    crate::report::with_medians(rows)
}

/// A one-line summary of an open-loop row.
pub fn summary_line(row: &Row) -> String {
    let p = |s: Option<crate::report::Summary>, f: fn(&crate::report::Summary) -> f64| {
        s.map(|s| crate::report::fmt_ms(f(&s)))
            .unwrap_or_else(|| "-".to_owned())
    };
    format!(
        "{} {} R={} D={}% {} run {}: ask p50/p90/p99/p999 {}/{}/{}/{} ms, persist p99 {} ms, delayed {}, {:.1}/s",
        row.scenario,
        row.store,
        row.groups,
        row.delay_pct,
        row.fault.as_deref().unwrap_or(""),
        row.run,
        p(row.ask, |s| s.p50_ms),
        p(row.ask, |s| s.p90_ms),
        p(row.ask, |s| s.p99_ms),
        p(row.ask, |s| s.p999_ms),
        p(row.persist, |s| s.p99_ms),
        row.delayed_count,
        row.throughput_per_s,
    )
}

async fn one_config(
    arrivals: Arrivals,
    groups: usize,
    delay_pct: f64,
    (min, max): (Duration, Duration),
    run: u32,
    bar: ProgressBar,
) -> Row {
    // The same seed for every group count of a run: the same actors are asked in the same
    // order and the same write calls (by arrival number) are delayed by the same amounts.
    let realtime = sys::set_realtime();
    let profile = DelayProfile::new(delay_pct, min..=max, arrivals.seed);
    let store = Arc::new(TimedStore::new(DelayingJournal::new(
        InMemoryJournal::new(),
        profile,
    )));
    let journal = start_journal(store.clone(), groups, Duration::from_secs(10));
    let actors = BenchActor::start_many(&journal, "open", arrivals.actors);
    wait_ready(&actors).await.expect("benchmark actors recover");
    let load_before = sys::load_average();
    let outcome = drive(&actors, arrivals, Some(&bar)).await;
    let delayed: HashSet<(usize, u64)> = store
        .inner()
        .delayed_writes()
        .into_iter()
        .filter_map(|d| Some((actor_index(&d.persistence_id)?, d.from_seq_nr)))
        .collect();
    let mut row = Row::new("open-loop", "in-memory-delaying", groups, run);
    row.delay_pct = delay_pct;
    row.actors = arrivals.actors as u64;
    fill_latencies(&mut row, &outcome, store.take_samples(), |actor, seq, _| {
        delayed.contains(&(actor, seq))
    });
    row.detail("period_ms", arrivals.period.as_secs_f64() * 1e3);
    row.detail("warmup_asks", arrivals.warmup);
    row.detail("delay_min_ms", min.as_millis() as u64);
    row.detail("delay_max_ms", max.as_millis() as u64);
    row.detail("seed", arrivals.seed);
    row.detail("realtime", realtime);
    if let Some(load) = load_before {
        row.detail("load_avg_1m", load);
    }
    row
}
