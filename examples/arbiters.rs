//! Persistent actors on every core: one Actix arbiter (thread) per core, each with a journal
//! actor of its own over the one store (`Persistence::on_this_arbiter`), so that a persist never
//! leaves its actor's thread.
//!
//! Runs on the in-memory journal unless the environment says otherwise
//! (`ACTIX_PERSISTENCE__JOURNAL__PLUGIN=sqlite`, say). Prints the persists per second on each
//! arbiter and in all, then recovers one counter on the first arbiter, through the journal
//! another arbiter wrote it with.

use std::time::{Duration, Instant};

use actix_persistence::actix::{Arbiter, Handler};
use actix_persistence::{
    EventSourced, Message, PersistReply, PersistResult, Persistence, PersistenceState,
    PersistentActor, Settings,
};
use futures::future::join_all;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

const COUNTERS_PER_ARBITER: usize = 200;
const PERSISTS_PER_COUNTER: u64 = 500;

#[derive(Serialize, Deserialize)]
struct Added(u64);

#[derive(PersistentActor)]
struct Counter {
    persistence: PersistenceState<Self>,
    total: u64,
}

impl EventSourced for Counter {
    type Event = Added;
    fn apply(&mut self, event: &Added) {
        self.total += event.0;
    }
}

#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct Add(u64);

impl Handler<Add> for Counter {
    type Result = PersistReply<u64>;
    fn handle(&mut self, msg: Add, ctx: &mut Self::Context) -> Self::Result {
        self.persist(ctx, Added(msg.0), |counter, _, _| counter.total)
    }
}

/// What one arbiter's counters did: persists that succeeded, and how long they took.
struct Outcome {
    persisted: u64,
    elapsed: Duration,
}

/// Starts this arbiter's counters on its own journal actor and has each persist
/// [`PERSISTS_PER_COUNTER`] events, one ask after another.
async fn run_counters(persistence: Persistence, arbiter: usize) -> Outcome {
    let local = persistence.on_this_arbiter();
    let counters: Vec<_> = (0..COUNTERS_PER_ARBITER)
        .filter_map(|i| local.state(format!("Counter|{arbiter}-{i}")).ok())
        .map(|state| {
            Counter {
                persistence: state,
                total: 0,
            }
            .start_persistent()
        })
        .collect();
    let start = Instant::now();
    let persisted = join_all(counters.iter().map(|counter| async move {
        let mut persisted = 0;
        for _ in 0..PERSISTS_PER_COUNTER {
            match counter.ask(Add(1)).await {
                Ok(_) => persisted += 1,
                Err(error) => {
                    eprintln!("a counter failed: {error}");
                    break;
                }
            }
        }
        persisted
    }))
    .await
    .into_iter()
    .sum();
    Outcome {
        persisted,
        elapsed: start.elapsed(),
    }
}

#[actix_persistence::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let loader = Settings::loader().toml_str("arbiters example", "[journal]\nplugin = \"inmem\"\n");
    let persistence = Persistence::start_from(loader).await?;
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    let arbiters: Vec<Arbiter> = (0..cores).map(|_| Arbiter::new()).collect();

    let mut outcomes = Vec::new();
    for (index, arbiter) in arbiters.iter().enumerate() {
        let (done, outcome) = oneshot::channel();
        let persistence = persistence.clone();
        // The counters' futures stay on the arbiter's thread (they need not be `Send`).
        arbiter.spawn_fn(move || {
            actix_persistence::actix::spawn(async move {
                let _ = done.send(run_counters(persistence, index).await);
            });
        });
        outcomes.push(outcome);
    }
    let mut total = 0;
    let mut slowest = Duration::ZERO;
    for (index, outcome) in outcomes.into_iter().enumerate() {
        let outcome = outcome.await?;
        println!(
            "arbiter {index}: {} persists in {:.2} s ({:.0} persists/s)",
            outcome.persisted,
            outcome.elapsed.as_secs_f64(),
            outcome.persisted as f64 / outcome.elapsed.as_secs_f64()
        );
        total += outcome.persisted;
        slowest = slowest.max(outcome.elapsed);
    }
    println!(
        "all {cores} arbiters: {total} persists in {:.2} s ({:.0} persists/s)",
        slowest.as_secs_f64(),
        total as f64 / slowest.as_secs_f64()
    );

    // A counter written on arbiter 0's journal, recovered here through the first one.
    let counter = Counter {
        persistence: persistence.state("Counter|0-0")?,
        total: 0,
    }
    .start_persistent();
    println!("Counter|0-0 recovered at {}", counter.ask(Add(0)).await?);

    persistence.shutdown().await;
    for arbiter in arbiters {
        arbiter.stop();
        let _ = arbiter.join();
    }
    Ok(())
}
