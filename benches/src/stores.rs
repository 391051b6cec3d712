//! Store wrappers of the benchmarks: the seed's pathological in-memory store, and a wrapper
//! that times every `write_messages` call (the "persist latency").

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, JournalError, JournalStore, ReplayBounds, ReplayStream,
};
use actix_persistence_testkit::FaultyJournal;
use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The seed's pathological store: the testkit's [`FaultyJournal`] over `inner`, every write
/// call held for `first * r` ms, `first` uniform in `0..=100` and `r` uniform in `0..=first`
/// (mean about 1.7 s, at most 10 s). `seed` fixes the sequence of delays (by call order).
///
/// The seed's Akka plugin skipped delays below the scheduler tick (10 ms) with a matching
/// probability; Tokio's timer has a 1 ms tick, so every non-zero delay is slept here.
pub fn pathological_store<S: JournalStore>(inner: S, seed: u64) -> FaultyJournal<S> {
    let (store, faults) = FaultyJournal::new(inner);
    let rng = Mutex::new(StdRng::seed_from_u64(seed));
    faults.delay_writes_with(move |_| {
        let mut rng = lock(&rng);
        let first: u64 = rng.gen_range(0..=100);
        Duration::from_millis(first * rng.gen_range(0..=first))
    });
    store
}

/// One timed write call: whose write it was and how long the store took.
#[derive(Debug, Clone)]
pub struct PersistSample {
    /// Persistence id of the call's first atomic write.
    pub persistence_id: String,
    /// Its first sequence number.
    pub from_seq_nr: u64,
    /// Time inside the wrapped store's `write_messages`.
    pub latency: Duration,
}

/// Times every `write_messages` call of the wrapped store (the seed's "persist latency":
/// time spent inside the store's write, excluding the journal actor and the resequencer).
pub struct TimedStore<S> {
    inner: S,
    samples: Mutex<Vec<PersistSample>>,
}

impl<S: JournalStore> TimedStore<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        TimedStore {
            inner,
            samples: Mutex::new(Vec::with_capacity(1 << 16)),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Takes the samples recorded so far.
    pub fn take_samples(&self) -> Vec<PersistSample> {
        std::mem::take(&mut *lock(&self.samples))
    }
}

#[async_trait]
impl<S: JournalStore> JournalStore for TimedStore<S> {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        let persistence_id = writes
            .first()
            .map(|w| w.persistence_id().to_owned())
            .unwrap_or_default();
        let from_seq_nr = writes.first().map(|w| w.lowest_seq_nr()).unwrap_or(0);
        let start = Instant::now();
        let result = self.inner.write_messages(writes).await;
        let latency = start.elapsed();
        lock(&self.samples).push(PersistSample {
            persistence_id,
            from_seq_nr,
            latency,
        });
        result
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.inner.replay_messages(pid, from, to, max)
    }

    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        self.inner.read_highest_sequence_nr(pid, from).await
    }

    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        fencing_token: actix_persistence_core::FencingToken,
    ) -> Result<(), JournalError> {
        self.inner.delete_messages_to(pid, to, fencing_token).await
    }
    async fn take_ownership(
        &self,
        pid: &str,
    ) -> Result<actix_persistence_core::Ownership, JournalError> {
        self.inner.take_ownership(pid).await
    }

    async fn read_deleted_to(&self, pid: &str) -> Result<Option<u64>, JournalError> {
        self.inner.read_deleted_to(pid).await
    }

    async fn read_replay_bounds(&self, pid: &str, from: u64) -> Result<ReplayBounds, JournalError> {
        self.inner.read_replay_bounds(pid, from).await
    }
}
