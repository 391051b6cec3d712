//! The journal store trait: what a storage plugin implements.
//!
//! Depends on no actor runtime and no database crate: a plugin implements [`JournalStore`] with
//! whatever async client it likes and hands it to the journal actor, which adds concurrency,
//! timeouts and reply ordering on top. Shaped after Akka's `AsyncWriteJournal` and
//! `AsyncRecovery`.

use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::error::{AtomicWriteError, JournalError, WriteRejection};
use crate::tags::Tags;

/// The highest possible sequence number, used as "no upper bound" in replays and deletes.
pub const MAX_SEQ_NR: u64 = u64::MAX;

/// One event as the journal stores it: the serialized payload and its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistentRepr {
    /// The persistence id of the actor that wrote it (byte-exact).
    ///
    /// Shared: the events of one actor, of one replay, or of a run of one id in a query page
    /// hold the same allocation, so a clone is O(1) (a reference count) and copies no text.
    /// Build one from a `&str` or a `String` with `.into()`.
    pub persistence_id: Arc<str>,
    /// Sequence number within the persistence id, starting at 1.
    pub seq_nr: u64,
    /// Serialized event.
    pub payload: Vec<u8>,
    /// Which serializer produced `payload` (see [`crate::serialization`]).
    pub serializer_id: u32,
    /// Serializer-specific type hint for the payload; may be empty.
    pub manifest: String,
    /// Unique id of the incarnation that wrote the event.
    ///
    /// Shared as [`persistence_id`](Self::persistence_id) is (clone is O(1)).
    pub writer_uuid: Arc<str>,
    /// Write time, milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// Tags for queries by tag, shared: the events of a page read back with the same tags
    /// hold one allocation ([`Tags`]; build one from a `Vec<String>` with `.into()`).
    pub tags: Tags,
}

/// Shares one `Arc<str>` among equal texts that come one after another: a store decoding a
/// page of events, whose rows are sorted by timestamp then persistence id, gives a run of rows
/// of one id (or of one writer) one allocation instead of one per row.
///
/// # Examples
/// ```
/// use std::sync::Arc;
/// use actix_persistence_core::store::RunInterner;
///
/// let mut ids = RunInterner::new();
/// let a = ids.intern("Account|1");
/// let b = ids.intern("Account|1");
/// assert!(Arc::ptr_eq(&a, &b));
/// assert!(!Arc::ptr_eq(&a, &ids.intern("Account|2")));
/// ```
#[derive(Debug, Clone, Default)]
pub struct RunInterner {
    last: Option<Arc<str>>,
}

impl RunInterner {
    /// An interner that holds nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `text` as a shared string: the previous call's `Arc` when it held the same text (a
    /// clone, O(1)), else a new one, kept for the next call.
    #[inline]
    pub fn intern(&mut self, text: &str) -> Arc<str> {
        match &self.last {
            Some(last) if **last == *text => Arc::clone(last),
            _ => {
                let shared: Arc<str> = Arc::from(text);
                self.last = Some(Arc::clone(&shared));
                shared
            }
        }
    }

    /// As [`Self::intern`], for text read as bytes (a database row's column): a run of the same
    /// bytes shares the previous `Arc` without checking the UTF-8 again (a writer uuid repeats
    /// in nearly every row of a replay).
    ///
    /// # Errors
    /// [`std::str::Utf8Error`] when `bytes` are not the previous text and not UTF-8.
    #[inline]
    pub fn intern_utf8(&mut self, bytes: &[u8]) -> Result<Arc<str>, std::str::Utf8Error> {
        match &self.last {
            Some(last) if last.as_bytes() == bytes => Ok(Arc::clone(last)),
            _ => Ok(self.intern(std::str::from_utf8(bytes)?)),
        }
    }
}

/// The fencing token of a writer of one persistence id: the owner epoch its incarnation got
/// when its recovery took ownership of the id ([`JournalStore::take_ownership`]).
///
/// Every recovery raises the id's epoch by one, so a later incarnation (in this process or
/// another one sharing the database) always holds a higher token. A store refuses a write whose
/// token is lower than the id's current epoch with [`JournalError::Fenced`], storing nothing:
/// only the newest incarnation can write. [`FencingToken::UNOWNED`] (0) is the token of a write
/// made without taking ownership (tools, tests): it is accepted only while nobody has taken
/// ownership of the id.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// The token of a writer that never took ownership: older than every owner.
    pub const UNOWNED: FencingToken = FencingToken(0);

    /// The epoch as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for FencingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What [`JournalStore::take_ownership`] answers: the new owner's token and the highest
/// sequence number, read in the same atomic step that raised the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ownership {
    /// The fencing token the new incarnation writes with.
    pub fencing_token: FencingToken,
    /// The highest sequence number ever stored for the id (0 if none), deleted events
    /// included. Every write committed before ownership was taken is at or below it.
    pub highest_seq_nr: u64,
}

/// What [`JournalStore::read_replay_bounds`] answers: where a replay of an id ends and how far
/// its events were deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayBounds {
    /// The highest sequence number, as
    /// [`read_highest_sequence_nr`](JournalStore::read_highest_sequence_nr) answers it.
    pub highest_seq_nr: u64,
    /// How far events were deleted, as [`read_deleted_to`](JournalStore::read_deleted_to)
    /// answers it (`None`: the store does not keep it).
    pub deleted_to: Option<u64>,
}

/// Events that are stored all together or not at all (as Akka's `AtomicWrite`): one `persist`
/// gives an atomic write of one event, one `persist_all` an atomic write of all its events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AtomicWrite {
    /// Events of one persistence id with consecutive, ascending sequence numbers. Never empty.
    pub events: Vec<PersistentRepr>,
    /// The writer's fencing token ([`FencingToken::UNOWNED`] when it never took ownership).
    /// A store fails the write with [`JournalError::Fenced`] when the persistence id's owner
    /// epoch is higher.
    pub fencing_token: FencingToken,
}

impl AtomicWrite {
    /// Builds an atomic write without a fencing token ([`FencingToken::UNOWNED`]), checking its
    /// shape.
    ///
    /// # Errors
    /// A [`WriteRejection`] when `events` is empty, mixes persistence ids, or has sequence
    /// numbers that are not consecutive and ascending.
    pub fn new(events: Vec<PersistentRepr>) -> Result<Self, WriteRejection> {
        let write = AtomicWrite {
            events,
            fencing_token: FencingToken::UNOWNED,
        };
        write.check_shape()?;
        Ok(write)
    }

    /// The same write with the fencing token of an owner.
    pub fn with_fencing_token(mut self, fencing_token: FencingToken) -> Self {
        self.fencing_token = fencing_token;
        self
    }

    /// Checks the shape ([`check_shape`](Self::check_shape)) and the limits every store can
    /// hold ([`crate::limits`]): what a store calls before it stores anything.
    ///
    /// # Errors
    /// A [`WriteRejection`] naming the broken invariant, or the limit, the field and its size.
    pub fn check(&self) -> Result<(), WriteRejection> {
        self.check_shape()?;
        crate::limits::check_limits(self)
    }

    /// The persistence id all events belong to (empty if there are no events).
    pub fn persistence_id(&self) -> &str {
        self.events
            .first()
            .map(|e| &*e.persistence_id)
            .unwrap_or("")
    }

    /// Sequence number of the first event (0 if empty).
    pub fn lowest_seq_nr(&self) -> u64 {
        self.events.first().map(|e| e.seq_nr).unwrap_or(0)
    }

    /// Sequence number of the last event (0 if empty).
    pub fn highest_seq_nr(&self) -> u64 {
        self.events.last().map(|e| e.seq_nr).unwrap_or(0)
    }

    /// Checks the invariants stores rely on: non-empty, one persistence id, consecutive seq_nrs.
    ///
    /// # Errors
    /// A [`WriteRejection`] naming the broken invariant.
    pub fn check_shape(&self) -> Result<(), WriteRejection> {
        let reject = |reason: &str| WriteRejection {
            persistence_id: self.persistence_id().to_owned(),
            seq_nr: self.lowest_seq_nr(),
            reason: reason.to_owned(),
        };
        if self.events.is_empty() {
            return Err(reject("an atomic write must hold at least one event"));
        }
        let pid = self.persistence_id();
        let first = self.lowest_seq_nr();
        if first == 0 {
            return Err(reject("sequence numbers start at 1"));
        }
        for (i, event) in self.events.iter().enumerate() {
            if *event.persistence_id != *pid {
                return Err(reject(
                    "all events of an atomic write must share one persistence id",
                ));
            }
            if Some(event.seq_nr) != first.checked_add(i as u64) {
                return Err(reject(
                    "sequence numbers of an atomic write must be consecutive",
                ));
            }
        }
        Ok(())
    }
}

/// The outcome of one atomic write: stored, rejected (not stored, go on) or failed.
pub type AtomicWriteResult = Result<(), AtomicWriteError>;

/// The writers whose atomic write failed earlier in a batch: a store keeps one while it stores
/// a batch in order, so that no later write of such a writer is stored (see
/// [`JournalStore::write_messages`]). A writer is a persistence id with a fencing token and a
/// writer id (one persistent actor incarnation); a write of the same id by another writer (a
/// newer owner's next to a fenced stale one's, an independent caller racing for the same
/// sequence number) goes on. Allocates nothing until a write fails.
///
/// # Examples
/// ```
/// use actix_persistence_core::{AtomicWrite, AtomicWriteError, FailedIds, JournalError, PersistentRepr};
///
/// let write = |seq_nr| {
///     let event = PersistentRepr {
///         persistence_id: "p".into(),
///         seq_nr,
///         payload: b"{}".to_vec(),
///         serializer_id: 1,
///         manifest: String::new(),
///         writer_uuid: "w".into(),
///         timestamp: 0,
///         tags: Default::default(),
///     };
///     AtomicWrite::new(vec![event]).unwrap()
/// };
/// let mut failed = FailedIds::default();
/// assert!(failed.check(&write(1)).is_ok());
/// let taken = JournalError::ConcurrentWrite { persistence_id: "p".into(), seq_nr: 1 };
/// failed.note(&write(1), &Err(AtomicWriteError::Failed(taken)));
/// assert!(matches!(
///     failed.check(&write(2)),
///     Err(AtomicWriteError::Failed(JournalError::EarlierWriteFailed { seq_nr: 2, .. }))
/// ));
/// ```
#[derive(Debug, Default, Clone)]
pub struct FailedIds(Vec<WriterKey>);

/// Who wrote an atomic write: its persistence id, writer id and fencing token (the ids shared
/// with its first event, not copied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WriterKey {
    persistence_id: Arc<str>,
    writer_uuid: Arc<str>,
    fencing_token: FencingToken,
}

impl WriterKey {
    /// The writer of `write` (`None` for a write without events).
    pub(crate) fn of(write: &AtomicWrite) -> Option<Self> {
        write.events.first().map(|first| WriterKey {
            persistence_id: Arc::clone(&first.persistence_id),
            writer_uuid: Arc::clone(&first.writer_uuid),
            fencing_token: write.fencing_token,
        })
    }

    fn wrote(&self, write: &AtomicWrite) -> bool {
        write.fencing_token == self.fencing_token
            && write.events.first().is_some_and(|first| {
                first.persistence_id == self.persistence_id && first.writer_uuid == self.writer_uuid
            })
    }
}

impl FailedIds {
    /// `Ok` when `write` may be attempted; else the [`JournalError::EarlierWriteFailed`] it
    /// fails with, unattempted.
    ///
    /// # Errors
    /// [`JournalError::EarlierWriteFailed`] when an earlier write of its writer failed.
    #[inline]
    pub fn check(&self, write: &AtomicWrite) -> AtomicWriteResult {
        match self.earlier_failure(write) {
            None => Ok(()),
            Some(error) => Err(AtomicWriteError::Failed(error)),
        }
    }

    /// The [`JournalError::EarlierWriteFailed`] `write` fails with, unattempted, when an
    /// earlier write of its writer failed; `None` when it may be attempted.
    #[inline]
    pub fn earlier_failure(&self, write: &AtomicWrite) -> Option<JournalError> {
        if self.0.is_empty() || !self.0.iter().any(|key| key.wrote(write)) {
            return None;
        }
        Some(JournalError::EarlierWriteFailed {
            persistence_id: write.persistence_id().to_owned(),
            seq_nr: write.lowest_seq_nr(),
        })
    }

    /// Notes the result of an attempted write: a failure (not a rejection) keeps the later
    /// writes of its writer from being attempted.
    #[inline]
    pub fn note(&mut self, write: &AtomicWrite, result: &AtomicWriteResult) {
        if let Err(AtomicWriteError::Failed(_)) = result {
            self.record(write);
        }
    }

    /// Records that `write` failed.
    pub fn record(&mut self, write: &AtomicWrite) {
        if let Some(key) = WriterKey::of(write) {
            self.record_writer(key);
        }
    }

    /// Records that a write of the writer `key` failed.
    pub(crate) fn record_writer(&mut self, key: WriterKey) {
        if !self.0.contains(&key) {
            self.0.push(key);
        }
    }

    /// Whether no write failed so far.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The results of a batch of atomic writes: one per write, in the order of the writes.
///
/// One result is held inline, so the results of a batch of one atomic write (what a lone
/// `persist` sends) need no allocation; a longer batch keeps them on the heap as a `Vec` does.
/// It dereferences to a slice; build one from a `Vec` with `.into()` (no copy of a heap
/// buffer) or by collecting an iterator.
pub type WriteResults = smallvec::SmallVec<[AtomicWriteResult; 1]>;

/// The atomic writes of one batch, in order ([`JournalStore::write_messages_now`],
/// [`crate::journal::WriteMessages`]).
///
/// One write is held inline, so the batch of a command that persists once (what a lone
/// `persist` sends) needs no allocation; a longer batch keeps its writes on the heap as a
/// `Vec` does. It dereferences to a slice; build one from a `Vec` with `.into()` (no copy of a
/// heap buffer), with `smallvec::smallvec![..]` or by collecting an iterator, and turn it into
/// a `Vec` with `into_vec()` (no copy of a heap buffer).
pub type WriteBatch = smallvec::SmallVec<[AtomicWrite; 1]>;

/// A [`WriteBatch`] known to pass [`AtomicWrite::check`] (shape and limits), for
/// [`JournalStore::write_checked_now`].
///
/// Only this crate makes one: the batches of its persistent actors, which check every write
/// they build before sending it (the [limits](crate::limits)' authoritative check) and send
/// them through the journal's write channel. A store may therefore skip its own check of these
/// writes; it gets no other way to tell them from a direct caller's. Read the writes with
/// [`writes`](Self::writes) or take them back with [`into_batch`](Self::into_batch); a
/// `CheckedBatch` cannot be changed.
#[derive(Debug)]
pub struct CheckedBatch(WriteBatch);

impl CheckedBatch {
    /// Wraps writes the caller has checked (or built so that they hold by construction, and
    /// then checked against the limits): the journal actor's writes.
    #[cfg(feature = "actor")]
    pub(crate) fn new_checked(writes: WriteBatch) -> Self {
        debug_assert!(writes.iter().all(|w| w.check().is_ok()));
        CheckedBatch(writes)
    }

    /// The atomic writes, in order.
    pub fn writes(&self) -> &[AtomicWrite] {
        &self.0
    }

    /// The atomic writes, in order, as a [`WriteBatch`] (no copy of a heap buffer).
    pub fn into_batch(self) -> WriteBatch {
        self.0
    }
}

/// The answer of [`JournalStore::write_messages_now`]: the batch's outcome, or the writes
/// handed back when the store cannot answer without waiting.
#[derive(Debug)]
pub enum WriteNow {
    /// The store answered: exactly what [`JournalStore::write_messages`] would have returned
    /// for the same writes (one result per atomic write, in order, or a failure of the whole
    /// batch). [`WriteResults`] holds the result of a batch of one write inline: a store that
    /// collects its results into it allocates nothing for that batch.
    Done(Result<WriteResults, JournalError>),
    /// The store did not touch the writes and cannot answer at once: the caller passes them,
    /// unchanged, to [`JournalStore::write_messages`].
    Later(WriteBatch),
}

/// A stream of replayed events, in ascending sequence-number order.
pub type ReplayStream = BoxStream<'static, Result<PersistentRepr, JournalError>>;

/// The cause of a [`JournalError::Storage`] whose store panicked (a bug in a store plugin):
/// the call it panicked in fails with it, wherever the panic happened (see
/// `docs/architecture.md`, "Failures").
#[derive(Debug, thiserror::Error)]
#[error("the journal store panicked")]
pub(crate) struct StorePanicked;

/// How a store call made with [`answer_within`] ended without an answer of the store's.
#[cfg(feature = "actor")]
pub(crate) enum NoAnswer {
    /// The store panicked, while it created the call's future or while that ran.
    Panicked,
    /// The call did not end within its timeout.
    TimedOut,
}

/// Makes a store call (`call` creates its future) and awaits its answer within `timeout`; a
/// panic of the store, before its future exists (a hand-written method doing work up front) or
/// while it runs, is [`NoAnswer::Panicked`], not a panic of the caller. The journal actor's
/// calls, its health check and the snapshot calls go through it.
#[cfg(feature = "actor")]
pub(crate) async fn answer_within<T, F>(
    timeout: std::time::Duration,
    call: impl FnOnce() -> F,
) -> Result<T, NoAnswer>
where
    F: std::future::Future<Output = T>,
{
    use futures::FutureExt;
    use std::panic::AssertUnwindSafe;
    let call = std::panic::catch_unwind(AssertUnwindSafe(call)).map_err(|_| NoAnswer::Panicked)?;
    match tokio::time::timeout(timeout, AssertUnwindSafe(call).catch_unwind()).await {
        Err(_) => Err(NoAnswer::TimedOut),
        Ok(Err(_panic)) => Err(NoAnswer::Panicked),
        Ok(Ok(answer)) => Ok(answer),
    }
}

/// The replay stream `replay` creates, with a panic of the store caught both while it creates
/// the stream (the error, as `Err`) and while the stream is polled (an error item that ends
/// it): the reader (recovery, a query) gets a [`StorePanicked`] error instead of unwinding.
pub(crate) fn replay_catching_panics(
    replay: impl FnOnce() -> ReplayStream,
) -> Result<ReplayStream, JournalError> {
    use futures::StreamExt;
    use std::panic::AssertUnwindSafe;
    let events = std::panic::catch_unwind(AssertUnwindSafe(replay))
        .map_err(|_panic| JournalError::storage("replay", StorePanicked))?;
    Ok(AssertUnwindSafe(events)
        .catch_unwind()
        .map(|event| match event {
            Ok(event) => event,
            Err(_panic) => Err(JournalError::storage("replay", StorePanicked)),
        })
        .boxed())
}

/// Storage behind a journal. Implementations must be safe to call concurrently: the journal
/// actor starts a write without waiting for the previous one.
///
/// Guarantees a store must give (the testkit's conformance suite checks them):
/// - an atomic write is stored all or nothing;
/// - the highest sequence number of a persistence id never decreases, not even after a delete;
/// - a write of a sequence number that is already stored fails with
///   [`JournalError::ConcurrentWrite`] and never overwrites;
/// - single writer (fencing): [`take_ownership`](Self::take_ownership) raises the id's owner
///   epoch in the same atomic step that reads its highest sequence number, and a write whose
///   [`AtomicWrite::fencing_token`] is below the epoch fails with [`JournalError::Fenced`] and
///   stores nothing; a write committed before ownership was taken is at or below the highest
///   sequence number it returned;
/// - a write over the [limits](crate::limits) is rejected ([`AtomicWrite::check`]; the writes
///   of a [`CheckedBatch`] passed it already);
/// - once `write_messages` returned `Ok` for a write, the events are durable and visible to
///   every later replay;
/// - within a batch, once an atomic write of a persistence id failed (not a rejection), no
///   later write of that id by the same writer (fencing token and writer id) in the batch is
///   stored: each fails with [`JournalError::EarlierWriteFailed`] without being attempted
///   ([`FailedIds`] keeps track). Stored, it would follow a hole that recovery cannot see (as
///   Akka, where a failure fails the actor's whole batch). A rejected write leaves a gap by
///   design, and the writes of other ids (or other writers) are unaffected either way.
#[async_trait]
pub trait JournalStore: Send + Sync + 'static {
    /// Stores a batch of atomic writes, possibly of many persistence ids.
    ///
    /// Returns exactly one result per atomic write, in the order given. `Err` fails the whole
    /// batch (every write may or may not be stored).
    ///
    /// # Errors
    /// [`JournalError`] when the batch as a whole could not be attempted or committed.
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError>;

    /// Stores a batch at once, without a future, when the store can answer without waiting
    /// (an in-memory store); else hands the writes back untouched ([`WriteNow::Later`]).
    ///
    /// The journal actor calls this first for every batch and falls back to
    /// [`write_messages`](Self::write_messages) on [`WriteNow::Later`], so a store that answers
    /// at once costs no boxed future per batch. [`WriteNow::Done`] must hold exactly what
    /// `write_messages` would have returned for the same writes: every guarantee of this trait
    /// holds for both. The call runs on the journal actor's thread with no call timeout (as a
    /// `write_messages` future that completes on its first poll): it must never block or wait
    /// for I/O. A panic in it is caught and fails the batch, as one in `write_messages` does;
    /// the circuit breaker sees its outcome as that of any other write.
    ///
    /// The default, for stores that only implement `write_messages`: [`WriteNow::Later`]
    /// (never answers at once). A wrapper store that changes what writes do (injects faults,
    /// delays them) must not forward this to the store it wraps.
    fn write_messages_now(&self, writes: WriteBatch) -> WriteNow {
        WriteNow::Later(writes)
    }

    /// [`write_messages_now`](Self::write_messages_now) for a batch whose writes all passed
    /// [`AtomicWrite::check`] already: a persistent actor's writes, sent through the journal's
    /// write channel (every write after an incarnation's first). Same contract and same answer
    /// as `write_messages_now` for the same writes; a store may skip its own check of them (a
    /// check done a second time on the same data). [`WriteNow::Later`] hands back
    /// [`CheckedBatch::into_batch`].
    ///
    /// The default calls `write_messages_now` with the writes, so a store, or a wrapper store,
    /// that does not override this behaves exactly as without it. A wrapper store that
    /// forwards `write_messages_now` may forward this too.
    fn write_checked_now(&self, writes: CheckedBatch) -> WriteNow {
        self.write_messages_now(writes.into_batch())
    }

    /// Replays the stored events of `persistence_id` with `from <= seq_nr <= to`, at most `max`
    /// of them, ascending. The stream owns what it needs (`'static`) so it can outlive `&self`.
    ///
    /// Callers cap `to` at the id's highest sequence number read before
    /// ([`read_highest_sequence_nr`](Self::read_highest_sequence_nr)), as the journal actor,
    /// recovery and the queries by persistence id do: every event up to it has committed. A
    /// replay past it while the id is being written may read a window of numbers whose events
    /// are still committing as one with holes, and pass over them (as Akka's
    /// `asyncReplayMessages`, which is called up to the highest sequence number).
    fn replay_messages(
        &self,
        persistence_id: &str,
        from_seq_nr: u64,
        to_seq_nr: u64,
        max: u64,
    ) -> ReplayStream;

    /// The events a persistent actor recovers from: [`replay_messages`](Self::replay_messages)
    /// of the same arguments, with each event's `tags` possibly left empty. A recovering actor
    /// applies each event's payload and never reads its tags (as in Akka, whose replayed
    /// `PersistentRepr` carries none), so a store may skip reading them: the SQL stores do,
    /// which spares a PostgreSQL replay ~1,800 instructions per event (the array sent, decoded
    /// and allocated; docs/benchmarks.md, session 14). Everything else (sequence numbers,
    /// payloads, metadata, the bounds and `max`) is exactly `replay_messages`'s.
    ///
    /// The default calls `replay_messages`, so a store, or a wrapper store, that does not
    /// override this behaves exactly as without it. A wrapper that only forwards may forward
    /// this too.
    fn replay_for_recovery(
        &self,
        persistence_id: &str,
        from_seq_nr: u64,
        to_seq_nr: u64,
        max: u64,
    ) -> ReplayStream {
        self.replay_messages(persistence_id, from_seq_nr, to_seq_nr, max)
    }

    /// The highest sequence number ever stored for `persistence_id` (0 if none), deleted
    /// events included. `from_seq_nr` is a hint: the answer is at least the highest stored at
    /// or above it.
    ///
    /// # Errors
    /// [`JournalError`] when the store cannot be read.
    async fn read_highest_sequence_nr(
        &self,
        persistence_id: &str,
        from_seq_nr: u64,
    ) -> Result<u64, JournalError>;

    /// Deletes the events of `persistence_id` with `seq_nr <= to_seq_nr`. The highest sequence
    /// number is kept.
    ///
    /// Fenced as writes are: `fencing_token` is the deleting incarnation's token
    /// ([`FencingToken::UNOWNED`] for a caller that never took ownership). When the id's owner
    /// epoch is above it, nothing is deleted and the call fails with [`JournalError::Fenced`];
    /// the check and the delete are one atomic step (one transaction), so a stale incarnation
    /// can never delete events of the id's new owner.
    ///
    /// # Errors
    /// [`JournalError::Fenced`] for a token below the id's owner epoch; [`JournalError`] when
    /// the store cannot be written.
    async fn delete_messages_to(
        &self,
        persistence_id: &str,
        to_seq_nr: u64,
        fencing_token: FencingToken,
    ) -> Result<(), JournalError>;

    /// Takes ownership of `persistence_id` for a new incarnation (every recovery calls it
    /// before it replays): raises the id's owner epoch by one and reads its highest sequence
    /// number, in one atomic step (one transaction) that is durable when this returns. From
    /// then on a write carrying an older [`FencingToken`] fails with [`JournalError::Fenced`].
    ///
    /// Ordering: a write of an older owner is either committed before this step (then its
    /// events are at or below the returned highest sequence number and the new owner replays
    /// them) or fenced after it; never stored after it.
    ///
    /// The default implementation, kept so that stores written before fencing existed still
    /// compile, reads the highest sequence number and returns [`FencingToken::UNOWNED`]: it
    /// does **not** fence, and the journal conformance suite's fencing cases (F1-F5) fail for
    /// such a store. Override it (see `docs/conformance.md`).
    ///
    /// # Errors
    /// [`JournalError`] when the store cannot be written.
    async fn take_ownership(&self, persistence_id: &str) -> Result<Ownership, JournalError> {
        Ok(Ownership {
            fencing_token: FencingToken::UNOWNED,
            highest_seq_nr: self.read_highest_sequence_nr(persistence_id, 0).await?,
        })
    }

    /// How far [`delete_messages_to`](Self::delete_messages_to) deleted the events of
    /// `persistence_id`: the highest sequence number deleted (at most the highest stored at
    /// the time, 0 when nothing was ever deleted), or `None` when the store does not keep it
    /// (the default).
    ///
    /// Recovery uses it to tell events deleted under a snapshot that is gone (a hole: recovery
    /// fails) from sequence numbers no write ever stored (a rejected write: nothing is
    /// missing). Without it, recovery cannot tell them apart and does not check.
    ///
    /// # Errors
    /// [`JournalError`] when the store cannot be read.
    async fn read_deleted_to(&self, persistence_id: &str) -> Result<Option<u64>, JournalError> {
        let _ = persistence_id;
        Ok(None)
    }

    /// The highest sequence number (from `from_seq_nr`, as
    /// [`read_highest_sequence_nr`](Self::read_highest_sequence_nr)) and how far events were
    /// deleted ([`read_deleted_to`](Self::read_deleted_to)) of `persistence_id`, which every
    /// replay (a recovery's, a query's by id) reads before its events. The default reads them
    /// one after the other; a store that can read both in one round trip overrides it (the
    /// SQL journals: one statement, one round trip fewer per recovery).
    ///
    /// # Errors
    /// [`JournalError`] when the store cannot be read.
    async fn read_replay_bounds(
        &self,
        persistence_id: &str,
        from_seq_nr: u64,
    ) -> Result<ReplayBounds, JournalError> {
        Ok(ReplayBounds {
            highest_seq_nr: self
                .read_highest_sequence_nr(persistence_id, from_seq_nr)
                .await?,
            deleted_to: self.read_deleted_to(persistence_id).await?,
        })
    }
}

#[async_trait]
impl<S: JournalStore + ?Sized> JournalStore for std::sync::Arc<S> {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        (**self).write_messages(writes).await
    }

    fn write_messages_now(&self, writes: WriteBatch) -> WriteNow {
        (**self).write_messages_now(writes)
    }

    fn write_checked_now(&self, writes: CheckedBatch) -> WriteNow {
        (**self).write_checked_now(writes)
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        (**self).replay_messages(pid, from, to, max)
    }

    fn replay_for_recovery(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        (**self).replay_for_recovery(pid, from, to, max)
    }

    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        (**self).read_highest_sequence_nr(pid, from).await
    }

    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        fencing_token: FencingToken,
    ) -> Result<(), JournalError> {
        (**self).delete_messages_to(pid, to, fencing_token).await
    }

    async fn take_ownership(&self, pid: &str) -> Result<Ownership, JournalError> {
        (**self).take_ownership(pid).await
    }

    async fn read_deleted_to(&self, pid: &str) -> Result<Option<u64>, JournalError> {
        (**self).read_deleted_to(pid).await
    }

    async fn read_replay_bounds(&self, pid: &str, from: u64) -> Result<ReplayBounds, JournalError> {
        (**self).read_replay_bounds(pid, from).await
    }
}
