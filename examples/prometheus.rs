//! The library's metrics in Prometheus's text format, and the readiness check.
//!
//! actix-persistence reports through the `metrics` facade crate (names and units in
//! `actix_persistence::metrics`); the application picks the exporter. Here
//! `metrics-exporter-prometheus` renders them as text after a few persists on an in-memory
//! journal; a service would serve `handle.render()` on `/metrics` and `Persistence::health()`
//! on its readiness endpoint.

use actix_persistence::actix::{Actor, Context, Handler};
use actix_persistence::{
    EventSourced, Message, PersistReply, PersistResult, Persistence, PersistenceState,
    PersistentActor, Settings,
};
use metrics_exporter_prometheus::PrometheusBuilder;
use serde::{Deserialize, Serialize};

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
    fn handle(&mut self, msg: Add, ctx: &mut Context<Self>) -> Self::Result {
        self.persist(ctx, Added(msg.0), |counter, _, _| counter.total)
    }
}

#[actix_persistence::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let handle = PrometheusBuilder::new().install_recorder()?;
    actix_persistence::metrics::describe();

    let settings = Settings::loader()
        .toml_str("example", "[journal]\nplugin = \"inmem\"\n")
        .load()?;
    let persistence = Persistence::start_with(settings).await?;
    let counter = Counter {
        persistence: persistence.state("counter-1")?,
        total: 0,
    }
    .start();
    for n in 1..=20 {
        counter.send(Add(n)).await??;
    }
    // What a readiness endpoint answers: breaker closed, store reachable, nothing written.
    match persistence.health().await {
        Ok(()) => println!("# readiness: ready"),
        Err(unhealthy) => println!("# readiness: not ready: {unhealthy}"),
    }
    persistence.shutdown().await;
    print!("{}", handle.render());
    Ok(())
}
