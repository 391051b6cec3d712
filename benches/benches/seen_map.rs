//! The offset of a query by slice or by tag: one insert into `SeenMap` and one clone (the
//! envelope's offset) per delivered event, the clones kept while the consumer holds them.
use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::Arc;

use actix_persistence_core::query::{SeenEvent, SeenMap};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

/// Envelopes a consumer holds at once (a page).
const HELD: usize = 1_000;
/// Deliveries per iteration.
const DELIVERIES: u64 = 10_000;

fn deliveries(c: &mut Criterion) {
    let mut group = c.benchmark_group("seen_map insert + clone per delivery");
    group.throughput(Throughput::Elements(DELIVERIES));
    for ids in [10u64, 100, 500] {
        let names: Vec<Arc<str>> = (0..ids).map(|i| format!("Bench|{i}").into()).collect();
        group.bench_function(format!("{ids} ids"), |b| {
            b.iter_batched(
                || (SeenMap::new(), VecDeque::with_capacity(HELD)),
                |(mut seen, mut held)| {
                    for n in 0..DELIVERIES {
                        let id = &names[(n % ids) as usize];
                        seen.insert(
                            Arc::clone(id),
                            SeenEvent {
                                seq_nr: n,
                                timestamp: 1,
                            },
                        );
                        if held.len() == HELD {
                            held.pop_front();
                        }
                        held.push_back(black_box(seen.clone()));
                    }
                    held
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, deliveries);
criterion_main!(benches);
