//! A journal store wrapper that delays a chosen share of writes, for benchmarks of tail
//! latency and of how a slow write holds back others.

use std::fmt;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, JournalError, JournalStore, ReplayStream,
};
use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Which writes a [`DelayingJournal`] delays, and by how much.
#[derive(Debug, Clone, PartialEq)]
pub struct DelayProfile {
    /// Share of write calls to delay, in percent (0.0 to 100.0).
    pub percent: f64,
    /// Shortest delay.
    pub min: Duration,
    /// Longest delay; delays are uniform in `min..=max`.
    pub max: Duration,
    /// Seed of the generator: the same seed delays the same write calls (by call number) by
    /// the same amounts.
    pub seed: u64,
}

impl DelayProfile {
    /// Delays `percent` % of writes by a duration uniform in `range`.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use actix_persistence_testkit::DelayProfile;
    ///
    /// // 1 % of writes, each by 100 to 500 ms.
    /// let profile =
    ///     DelayProfile::new(1.0, Duration::from_millis(100)..=Duration::from_millis(500), 42);
    /// assert_eq!(profile.max, Duration::from_millis(500));
    /// ```
    pub fn new(percent: f64, range: RangeInclusive<Duration>, seed: u64) -> Self {
        let (min, max) = range.into_inner();
        DelayProfile {
            percent,
            min,
            max,
            seed,
        }
    }
}

/// One write a [`DelayingJournal`] delayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayedWrite {
    /// Which write call, counting from 0 in arrival order.
    pub call: u64,
    /// How long it was held before reaching the wrapped store.
    pub delay: Duration,
    /// Persistence id of its first atomic write.
    pub persistence_id: String,
    /// First sequence number of the call.
    pub from_seq_nr: u64,
    /// Last sequence number of the call.
    pub to_seq_nr: u64,
    /// Number of atomic writes in the call.
    pub atomic_writes: usize,
}

/// A [`JournalStore`] that holds back a chosen percentage of write calls for a random time
/// (Tokio's timer, a seeded generator) before passing them to the wrapped store, and records
/// which ones it delayed. Replays, reads and deletes are never delayed.
///
/// Keep an `Arc` of it to read [`delayed_writes`](Self::delayed_writes) after the run: an
/// `Arc<DelayingJournal<S>>` is itself a store to hand to the journal actor.
///
/// # Examples
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use actix_persistence_core::{InMemoryJournal, JournalStore};
/// use actix_persistence_testkit::{DelayProfile, DelayingJournal};
///
/// let profile = DelayProfile::new(1.0, Duration::from_millis(100)..=Duration::from_millis(500), 7);
/// let store = Arc::new(DelayingJournal::new(InMemoryJournal::new(), profile));
/// let for_the_journal: Arc<dyn JournalStore> = store.clone();
/// // ... run the benchmark with `for_the_journal`, then:
/// assert!(store.delayed_writes().is_empty());
/// # drop(for_the_journal);
/// ```
pub struct DelayingJournal<S> {
    inner: S,
    profile: DelayProfile,
    rng: Mutex<StdRng>,
    calls: AtomicU64,
    delayed: Mutex<Vec<DelayedWrite>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update is a single push or draw: a poisoned lock is still consistent.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl<S: JournalStore> DelayingJournal<S> {
    /// Wraps `inner`, delaying writes as `profile` says.
    ///
    /// # Panics
    /// If `profile.percent` is not within 0.0..=100.0, or `profile.min > profile.max`.
    pub fn new(inner: S, profile: DelayProfile) -> Self {
        assert!(
            (0.0..=100.0).contains(&profile.percent),
            "the share of delayed writes must be a percentage (0 to 100), not {}",
            profile.percent
        );
        assert!(
            profile.min <= profile.max,
            "the shortest delay {:?} is above the longest {:?}",
            profile.min,
            profile.max
        );
        let rng = Mutex::new(StdRng::seed_from_u64(profile.seed));
        DelayingJournal {
            inner,
            profile,
            rng,
            calls: AtomicU64::new(0),
            delayed: Mutex::new(Vec::new()),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The profile it delays by.
    pub fn profile(&self) -> &DelayProfile {
        &self.profile
    }

    /// Every write call it delayed so far, in the order they were delayed.
    pub fn delayed_writes(&self) -> Vec<DelayedWrite> {
        lock(&self.delayed).clone()
    }

    /// Write calls it received so far.
    pub fn writes_seen(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Numbers the write call and draws whether (and how long) to delay it. Both happen under
    /// one lock, so call `n` always gets the `n`th draws of the seeded generator.
    fn draw(&self) -> (u64, Option<Duration>) {
        let mut rng = lock(&self.rng);
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        if !rng.gen_bool(self.profile.percent / 100.0) {
            return (call, None);
        }
        let min = u64::try_from(self.profile.min.as_nanos()).unwrap_or(u64::MAX);
        let max = u64::try_from(self.profile.max.as_nanos()).unwrap_or(u64::MAX);
        (call, Some(Duration::from_nanos(rng.gen_range(min..=max))))
    }
}

#[async_trait]
impl<S: JournalStore> JournalStore for DelayingJournal<S> {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        let (call, delay) = self.draw();
        if let Some(delay) = delay {
            lock(&self.delayed).push(DelayedWrite {
                call,
                delay,
                persistence_id: writes
                    .first()
                    .map(|w| w.persistence_id().to_owned())
                    .unwrap_or_default(),
                from_seq_nr: writes.first().map(|w| w.lowest_seq_nr()).unwrap_or(0),
                to_seq_nr: writes.last().map(|w| w.highest_seq_nr()).unwrap_or(0),
                atomic_writes: writes.len(),
            });
            tokio::time::sleep(delay).await;
        }
        self.inner.write_messages(writes).await
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
}

impl<S> fmt::Debug for DelayingJournal<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayingJournal")
            .field("profile", &self.profile)
            .field("writes_seen", &self.calls.load(Ordering::Relaxed))
            .field("delayed", &lock(&self.delayed).len())
            .finish_non_exhaustive()
    }
}
