//! Quick closed-loop probe (to be replaced by the full harness).
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use actix_persistence_core::journal::{JournalActor, JournalConfig};
use actix_persistence_core::persistent::*;
use actix_persistence_core::InMemoryJournal;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Ev(u64);

struct Bench {
    p: PersistenceState<Self>,
    n: u64,
}
impl Actor for Bench {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        start_recovery(self, ctx);
    }
}
impl EventSourced for Bench {
    type Event = Ev;
    fn apply(&mut self, e: &Ev) {
        self.n += e.0;
    }
}
impl PersistentActor for Bench {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.p
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.p
    }
}
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct Go;
impl Handler<Go> for Bench {
    type Result = PersistReply<u64>;
    fn handle(&mut self, _: Go, ctx: &mut Context<Self>) -> Self::Result {
        self.persist(ctx, Ev(1), |a, _, _| a.n)
    }
}

#[actix::main]
async fn main() {
    let groups: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1);
    let journal = JournalActor::start_with(
        Arc::new(InMemoryJournal::new()),
        JournalConfig {
            write_reply_ordering_groups: std::num::NonZeroUsize::new(groups).unwrap(),
            ..Default::default()
        },
    );
    let actors: Vec<_> = (0..1000)
        .map(|i| Bench { p: PersistenceState::new(journal.clone(), format!("b-{i}")).unwrap(), n: 0 }.start())
        .collect();
    let start = Instant::now();
    let runs = actors.iter().map(|a| {
        let a = a.clone();
        async move {
            for _ in 0..100 {
                a.send(Go).await.unwrap().unwrap();
            }
        }
    });
    futures::future::join_all(runs).await;
    let el = start.elapsed();
    println!("groups {groups}: {} persists/s", (100_000.0 / el.as_secs_f64()) as u64);
}
