//! A persist round trip: ask a persistent actor, which persists one event through the journal
//! actor (and its resequencer) into the in-memory store, and answers.
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_persistence_bench::actor::{wait_ready, BenchActor, Persist};
use actix_persistence_bench::runner::start_journal;
use actix_persistence_core::InMemoryJournal;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn round_trip(c: &mut Criterion) {
    let system = actix::System::new();
    let mut group = c.benchmark_group("persist_round_trip");
    group.throughput(Throughput::Elements(1));
    for groups in [1usize, 16] {
        let actor = system.block_on(async move {
            let journal = start_journal(
                Arc::new(InMemoryJournal::new()),
                groups,
                Duration::from_secs(10),
            );
            let actors = BenchActor::start_many(&journal, "rt", 1);
            wait_ready(&actors).await.expect("recovers");
            actors.into_iter().next().expect("one actor")
        });
        group.bench_with_input(
            BenchmarkId::new("one actor, in-memory", groups),
            &groups,
            |b, _| {
                b.iter_custom(|iters| {
                    let actor = actor.clone();
                    system.block_on(async move {
                        let start = Instant::now();
                        for _ in 0..iters {
                            actor
                                .send(Persist)
                                .await
                                .expect("delivered")
                                .expect("persisted");
                        }
                        start.elapsed()
                    })
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, round_trip);
criterion_main!(benches);
