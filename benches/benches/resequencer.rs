//! One resequencer's reply throughput: N replies released in order, arriving in order or in
//! reverse (every reply waits for the last to arrive, then all go out at once).
use std::time::{Duration, Instant};

use actix::Actor;
use actix_persistence_core::journal::{Resequence, Resequencer, WriteMessagesReply};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tokio::sync::oneshot;

const REPLIES: u64 = 10_000;

async fn release(reverse: bool) -> Duration {
    let resequencer = Resequencer::new().start();
    let mut waiting = Vec::with_capacity(REPLIES as usize);
    let mut messages = Vec::with_capacity(REPLIES as usize);
    for seq in 0..REPLIES {
        let (reply_to, answer) = oneshot::channel();
        waiting.push(answer);
        messages.push(Resequence {
            seq,
            reply: WriteMessagesReply::Completed(vec![Ok(())].into()),
            reply_to: reply_to.into(),
        });
    }
    if reverse {
        messages.reverse();
    }
    let start = Instant::now();
    for message in messages {
        resequencer.do_send(message);
    }
    for answer in waiting {
        answer.await.expect("every reply is released");
    }
    start.elapsed()
}

fn resequencer(c: &mut Criterion) {
    let system = actix::System::new();
    let mut group = c.benchmark_group("resequencer");
    group.throughput(Throughput::Elements(REPLIES));
    for (name, reverse) in [("in order", false), ("reversed", true)] {
        group.bench_with_input(
            BenchmarkId::new("release 10k replies", name),
            &reverse,
            |b, &reverse| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += system.block_on(release(reverse));
                    }
                    total
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, resequencer);
criterion_main!(benches);
