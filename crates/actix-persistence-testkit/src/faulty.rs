//! A journal store wrapper whose faults a test switches on and off at runtime.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix_persistence_core::{
    AtomicWrite, AtomicWriteError, AtomicWriteResult, FailedIds, JournalError, JournalStore,
    ReplayStream,
};
use async_trait::async_trait;
use futures::{stream, StreamExt};

/// A fault the [`FaultyJournal`] injected; the source of the [`JournalError::Storage`] it
/// reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InjectedFault {
    /// Storing this event failed, so its atomic write failed and nothing of it was stored.
    #[error("injected fault: storing event {seq_nr} of {persistence_id:?} failed; nothing of its atomic write was stored")]
    EventWrite {
        /// Whose event.
        persistence_id: String,
        /// Which event.
        seq_nr: u64,
    },
    /// The commit of a batch failed: nothing of it was stored.
    #[error("injected fault: the commit of the batch failed; nothing of it was stored")]
    Commit,
    /// The store cannot be reached.
    #[error("injected fault: the store is unreachable")]
    Unreachable,
}

/// How a [`FaultHandle::return_wrong_result_count`] batch miscounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrongResultCount {
    /// One result fewer than atomic writes (the last one is dropped).
    OneMissing,
    /// One result more than atomic writes (an extra success is appended).
    OneExtra,
}

/// Which calls a [`FaultHandle::never_answer`]-style fault holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hang {
    Writes,
    Everything,
}

type DelayFn = Arc<dyn Fn(&[AtomicWrite]) -> Duration + Send + Sync>;

#[derive(Clone)]
enum WriteDelay {
    Fixed(Duration),
    PerCall(DelayFn),
}

#[derive(Default)]
struct Faults {
    delay: Option<WriteDelay>,
    /// Events still to pass before the failing one: 1 fails the next event.
    fail_event_in: Option<u64>,
    fail_next_commit: bool,
    hang: Option<Hang>,
    wrong_result_count: Option<WrongResultCount>,
    unreachable: bool,
}

#[derive(Default)]
struct Shared {
    faults: Mutex<Faults>,
    store_calls: AtomicU64,
    write_calls: AtomicU64,
    atomic_writes_seen: AtomicU64,
    events_seen: AtomicU64,
}

impl Shared {
    fn faults(&self) -> MutexGuard<'_, Faults> {
        // Every update is a plain field assignment: a poisoned lock is still consistent.
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A [`JournalStore`] that passes every call to `inner` unless a fault is switched on through
/// its [`FaultHandle`]: delayed writes, a failing event, a failing commit, calls that never
/// answer, a wrong number of results, or an unreachable store. It also counts the calls and
/// atomic writes it saw.
///
/// Faults are read when a call arrives: switching one on or off affects later calls, not one
/// already waiting.
///
/// # Examples
/// ```
/// use actix_persistence_core::InMemoryJournal;
/// use actix_persistence_testkit::FaultyJournal;
///
/// let (store, faults) = FaultyJournal::new(InMemoryJournal::new());
/// faults.fail_nth_event(2); // the atomic write holding the 2nd event from now fails
/// faults.unreachable(); // until `faults.reachable()`, every call fails
/// # drop(store);
/// ```
pub struct FaultyJournal<S> {
    inner: S,
    shared: Arc<Shared>,
}

/// Switches the faults of a [`FaultyJournal`] on and off, and reads its counters. Cheap to
/// clone; all clones control the same store.
#[derive(Clone)]
pub struct FaultHandle {
    shared: Arc<Shared>,
}

impl<S: JournalStore> FaultyJournal<S> {
    /// Wraps `inner`, with no fault on, and returns the handle that controls it.
    pub fn new(inner: S) -> (Self, FaultHandle) {
        let shared = Arc::new(Shared::default());
        let handle = FaultHandle {
            shared: Arc::clone(&shared),
        };
        (FaultyJournal { inner, shared }, handle)
    }

    /// Another handle on this store's faults.
    pub fn handle(&self) -> FaultHandle {
        FaultHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The wrapped store: what is really stored.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Counts a call, and tells whether it must hang or fail as unreachable.
    fn arrive(&self, is_write: bool) -> Result<(), Arrival> {
        self.shared.store_calls.fetch_add(1, Ordering::Relaxed);
        let faults = self.shared.faults();
        match faults.hang {
            Some(Hang::Everything) => return Err(Arrival::Hang),
            Some(Hang::Writes) if is_write => return Err(Arrival::Hang),
            _ => {}
        }
        if faults.unreachable {
            return Err(Arrival::Unreachable);
        }
        Ok(())
    }

    /// Writes `writes` except the one at `failing`, which fails with `fault`, and the later
    /// writes of its writer, which are not attempted ([`JournalError::EarlierWriteFailed`]), as
    /// every store does after a failed write ([`FailedIds`]).
    async fn write_all_but(
        &self,
        writes: Vec<AtomicWrite>,
        failing: usize,
        fault: InjectedFault,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        let count = writes.len();
        let mut failed = FailedIds::default();
        let mut answers: Vec<Option<AtomicWriteResult>> = Vec::with_capacity(count);
        let mut attempted = Vec::with_capacity(count);
        for (index, write) in writes.into_iter().enumerate() {
            if index == failing {
                failed.record(&write);
                let failure =
                    AtomicWriteError::Failed(JournalError::storage("write", fault.clone()));
                answers.push(Some(Err(failure)));
            } else if let Err(skipped) = failed.check(&write) {
                answers.push(Some(Err(skipped)));
            } else {
                answers.push(None);
                attempted.push(write);
            }
        }
        let expected = attempted.len();
        let stored = if attempted.is_empty() {
            Vec::new()
        } else {
            self.inner.write_messages(attempted).await?
        };
        let actual = stored.len();
        let mut stored = stored.into_iter();
        let mut results: Vec<AtomicWriteResult> = answers
            .into_iter()
            .map(|answer| {
                answer.unwrap_or_else(|| {
                    stored.next().unwrap_or_else(|| {
                        Err(AtomicWriteError::Failed(
                            JournalError::ResultCountMismatch { expected, actual },
                        ))
                    })
                })
            })
            .collect();
        // A wrapped store that answered too many results: pass them on (the journal actor
        // fails such a batch).
        results.extend(stored);
        Ok(results)
    }
}

enum Arrival {
    Hang,
    Unreachable,
}

impl Arrival {
    async fn answer<T>(self, operation: &'static str) -> Result<T, JournalError> {
        match self {
            Arrival::Hang => futures::future::pending().await,
            Arrival::Unreachable => {
                Err(JournalError::storage(operation, InjectedFault::Unreachable))
            }
        }
    }
}

/// What a write does, decided when it arrives.
struct WritePlan {
    delay: Option<Duration>,
    fail_commit: bool,
    failing_write: Option<(usize, InjectedFault)>,
    wrong_result_count: Option<WrongResultCount>,
}

impl Faults {
    fn plan_write(&mut self, writes: &[AtomicWrite]) -> WritePlan {
        let delay = self.delay.as_ref().map(|delay| match delay {
            WriteDelay::Fixed(d) => *d,
            WriteDelay::PerCall(f) => f(writes),
        });
        if std::mem::take(&mut self.fail_next_commit) {
            return WritePlan {
                delay,
                fail_commit: true,
                failing_write: None,
                wrong_result_count: None,
            };
        }
        let mut failing_write = None;
        if let Some(remaining) = self.fail_event_in {
            let mut passed = 0u64;
            'writes: for (index, write) in writes.iter().enumerate() {
                for event in &write.events {
                    passed += 1;
                    if passed == remaining {
                        let fault = InjectedFault::EventWrite {
                            persistence_id: event.persistence_id.to_string(),
                            seq_nr: event.seq_nr,
                        };
                        failing_write = Some((index, fault));
                        break 'writes;
                    }
                }
            }
            self.fail_event_in = match failing_write {
                Some(_) => None,
                None => Some(remaining - passed),
            };
        }
        WritePlan {
            delay,
            fail_commit: false,
            failing_write,
            wrong_result_count: self.wrong_result_count.take(),
        }
    }
}

#[async_trait]
impl<S: JournalStore> JournalStore for FaultyJournal<S> {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        let shared = &self.shared;
        shared.write_calls.fetch_add(1, Ordering::Relaxed);
        shared
            .atomic_writes_seen
            .fetch_add(writes.len() as u64, Ordering::Relaxed);
        let events: usize = writes.iter().map(|w| w.events.len()).sum();
        shared
            .events_seen
            .fetch_add(events as u64, Ordering::Relaxed);
        if let Err(arrival) = self.arrive(true) {
            return arrival.answer("write").await;
        }
        let plan = shared.faults().plan_write(&writes);
        if let Some(delay) = plan.delay {
            tokio::time::sleep(delay).await;
        }
        if plan.fail_commit {
            return Err(JournalError::storage("write", InjectedFault::Commit));
        }
        let mut results = match plan.failing_write {
            Some((index, fault)) => self.write_all_but(writes, index, fault).await?,
            None => self.inner.write_messages(writes).await?,
        };
        match plan.wrong_result_count {
            Some(WrongResultCount::OneMissing) => {
                results.pop();
            }
            Some(WrongResultCount::OneExtra) => results.push(Ok(())),
            None => {}
        }
        Ok(results)
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        match self.arrive(false) {
            Ok(()) => self.inner.replay_messages(pid, from, to, max),
            Err(Arrival::Hang) => stream::pending().boxed(),
            Err(Arrival::Unreachable) => stream::once(async {
                Err(JournalError::storage("replay", InjectedFault::Unreachable))
            })
            .boxed(),
        }
    }

    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        if let Err(arrival) = self.arrive(false) {
            return arrival.answer("read highest sequence number").await;
        }
        self.inner.read_highest_sequence_nr(pid, from).await
    }

    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        fencing_token: actix_persistence_core::FencingToken,
    ) -> Result<(), JournalError> {
        if let Err(arrival) = self.arrive(false) {
            return arrival.answer("delete").await;
        }
        self.inner.delete_messages_to(pid, to, fencing_token).await
    }

    async fn take_ownership(
        &self,
        pid: &str,
    ) -> Result<actix_persistence_core::Ownership, JournalError> {
        if let Err(arrival) = self.arrive(false) {
            return arrival.answer("take ownership").await;
        }
        self.inner.take_ownership(pid).await
    }

    async fn read_deleted_to(&self, pid: &str) -> Result<Option<u64>, JournalError> {
        self.inner.read_deleted_to(pid).await
    }
}

impl FaultHandle {
    fn faults(&self) -> MutexGuard<'_, Faults> {
        self.shared.faults()
    }

    /// Delays every write by `delay` before it reaches the wrapped store.
    pub fn delay_writes(&self, delay: Duration) {
        self.faults().delay = Some(WriteDelay::Fixed(delay));
    }

    /// Delays every write by what `delay` returns for its atomic writes (called once per
    /// write call, when it arrives), e.g. a delay varying with the persistence id.
    pub fn delay_writes_with<F>(&self, delay: F)
    where
        F: Fn(&[AtomicWrite]) -> Duration + Send + Sync + 'static,
    {
        self.faults().delay = Some(WriteDelay::PerCall(Arc::new(delay)));
    }

    /// Writes are no longer delayed.
    pub fn no_delay(&self) {
        self.faults().delay = None;
    }

    /// The atomic write holding the `n`th event written from now on (1 is the next one) fails
    /// with a storage error ([`InjectedFault::EventWrite`]); nothing of that atomic write is
    /// stored. The later atomic writes of its writer in the batch are not attempted
    /// ([`JournalError::EarlierWriteFailed`], as every store does); the other atomic writes of
    /// its batch are stored as usual. Once.
    ///
    /// # Panics
    /// If `n` is 0.
    pub fn fail_nth_event(&self, n: u64) {
        assert!(n > 0, "events are counted from 1");
        self.faults().fail_event_in = Some(n);
    }

    /// The next write batch fails as a whole ([`InjectedFault::Commit`]): nothing of it is
    /// stored and every write of it fails. Once.
    pub fn fail_next_commit(&self) {
        self.faults().fail_next_commit = true;
    }

    /// Every call from now on (writes, replays, reads, deletes) never answers: its future
    /// stays pending, also after [`answer_again`](Self::answer_again).
    pub fn never_answer(&self) {
        self.faults().hang = Some(Hang::Everything);
    }

    /// Every write from now on never answers; other calls go on.
    pub fn never_answer_writes(&self) {
        self.faults().hang = Some(Hang::Writes);
    }

    /// Calls arriving from now on are answered again (calls already held stay pending).
    pub fn answer_again(&self) {
        self.faults().hang = None;
    }

    /// The next write batch is stored, but answered with a wrong number of results. Once.
    pub fn return_wrong_result_count(&self, wrong: WrongResultCount) {
        self.faults().wrong_result_count = Some(wrong);
    }

    /// Every call fails with a storage error ([`InjectedFault::Unreachable`]) until
    /// [`reachable`](Self::reachable).
    pub fn unreachable(&self) {
        self.faults().unreachable = true;
    }

    /// The store can be reached again.
    pub fn reachable(&self) {
        self.faults().unreachable = false;
    }

    /// Switches every fault off (counters are kept).
    pub fn clear(&self) {
        *self.faults() = Faults::default();
    }

    /// Calls of any kind the store received (including failed and pending ones).
    pub fn store_calls(&self) -> u64 {
        self.shared.store_calls.load(Ordering::Relaxed)
    }

    /// `write_messages` calls the store received.
    pub fn write_calls(&self) -> u64 {
        self.shared.write_calls.load(Ordering::Relaxed)
    }

    /// Atomic writes the store received, over all write calls.
    pub fn atomic_writes_seen(&self) -> u64 {
        self.shared.atomic_writes_seen.load(Ordering::Relaxed)
    }

    /// Events the store received, over all write calls.
    pub fn events_seen(&self) -> u64 {
        self.shared.events_seen.load(Ordering::Relaxed)
    }
}

impl<S> fmt::Debug for FaultyJournal<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyJournal")
            .field(
                "store_calls",
                &self.shared.store_calls.load(Ordering::Relaxed),
            )
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for FaultHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultHandle")
            .field("store_calls", &self.store_calls())
            .field("write_calls", &self.write_calls())
            .field("atomic_writes_seen", &self.atomic_writes_seen())
            .finish_non_exhaustive()
    }
}
