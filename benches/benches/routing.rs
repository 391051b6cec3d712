//! The routing helper: the group of an incarnation.
use std::hint::black_box;
use std::num::NonZeroUsize;

use actix_persistence_core::journal::{write_reply_ordering_group, Incarnation};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn routing(c: &mut Criterion) {
    let mut group = c.benchmark_group("write_reply_ordering_group");
    group.throughput(Throughput::Elements(1024));
    for groups in [1usize, 16, 1000] {
        let groups = NonZeroUsize::new(groups).expect("non-zero");
        group.bench_function(format!("{groups} groups x 1024 incarnations"), |b| {
            b.iter(|| {
                let mut sum = 0usize;
                for id in 0..1024u64 {
                    sum += write_reply_ordering_group(
                        black_box(Incarnation::from_raw(id * 7919)),
                        groups,
                    );
                }
                sum
            })
        });
    }
    group.finish();
}

criterion_group!(benches, routing);
criterion_main!(benches);
