//! The journal the query benchmarks read: `events` events in `ids` persistence ids of entity
//! type "Bench" (`Bench|0`, `Bench|1`, ...), every event the benchmarks' own
//! ([`bench_event`](crate::bench_event): about 100 bytes of JSON, tagged `bench`, as
//! `recovery-speed`'s), written through group commit (`query-speed`, `catch-up-speed`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_persistence_core::query::{Offset, QuerySettings, QueryStore, ReadJournal};
use futures::StreamExt;

use actix_persistence_core::{AtomicWrite, JournalStore, PersistentRepr};

/// Events per atomic write of [`fill`].
pub const EVENTS_PER_WRITE: u64 = 100;
/// Atomic writes per `write_messages` call of [`fill`].
pub const WRITES_PER_CALL: usize = 10;

/// Event `seq_nr` of `pid` ([`bench_event::repr`](crate::bench_event::repr), written by
/// `query-speed`).
pub fn repr(pid: &str, seq_nr: u64) -> PersistentRepr {
    crate::bench_event::repr(pid, seq_nr, "query-speed")
}

/// Writes `events` events spread over `ids` ids of entity type "Bench", in rounds (every id
/// gets its next [`EVENTS_PER_WRITE`] events per round), [`WRITES_PER_CALL`] atomic writes per
/// call; returns how long it took.
///
/// # Panics
/// When a write fails (a benchmark has nothing to measure then).
pub async fn fill(store: &dyn JournalStore, events: u64, ids: u64) -> Duration {
    let started = Instant::now();
    let per_id = events / ids;
    let mut next_seq = 1;
    while next_seq <= per_id {
        let last = (next_seq + EVENTS_PER_WRITE - 1).min(per_id);
        let writes: Vec<AtomicWrite> = (0..ids)
            .map(|id| {
                let pid = format!("Bench|{id}");
                AtomicWrite::new((next_seq..=last).map(|s| repr(&pid, s)).collect())
                    .expect("consecutive")
            })
            .collect();
        for chunk in writes.chunks(WRITES_PER_CALL) {
            let results = store.write_messages(chunk.to_vec()).await.expect("fill");
            assert!(results.iter().all(Result::is_ok), "fill");
        }
        next_seq = last + 1;
    }
    started.elapsed()
}

/// What one catch-up measured: events delivered, wall-clock seconds, CPU seconds of this
/// process (every thread).
#[derive(Debug, Clone, Copy)]
pub struct CatchUp {
    /// Envelopes delivered.
    pub delivered: u64,
    /// Wall-clock seconds from the query's start to its end.
    pub seconds: f64,
    /// CPU seconds of this process meanwhile.
    pub cpu: f64,
}

/// One `current_events_by_slices("Bench", 0, 1023, NoOffset)` over `store` with pages of
/// `page_size` events and `read_ahead_pages` reads in flight (`query.read-ahead-pages`), every
/// envelope counted.
///
/// # Panics
/// When the query fails.
pub async fn catch_up_once(
    store: &Arc<dyn QueryStore>,
    page_size: u32,
    read_ahead_pages: u32,
) -> CatchUp {
    let settings = QuerySettings {
        page_size,
        read_ahead_pages,
        ..QuerySettings::default()
    };
    let query = ReadJournal::from_arc(Arc::clone(store), settings);
    let cpu = crate::sys::process_cpu().as_secs_f64();
    let started = Instant::now();
    let delivered = query
        .current_events_by_slices("Bench", 0, 1023, Offset::NoOffset)
        .fold(0u64, |n, item| async move {
            item.expect("catch-up query");
            n + 1
        })
        .await;
    CatchUp {
        delivered,
        seconds: started.elapsed().as_secs_f64(),
        cpu: crate::sys::process_cpu().as_secs_f64() - cpu,
    }
}
