//! Group commit: the atomic writes of many concurrent `write_messages` calls share one
//! transaction.
//!
//! A call checks and converts its atomic writes (rejections never reach the database), then
//! either stores them itself, one transaction per atomic write (`max_batch_size` 1), or queues
//! them as one request for the writer task. The writer task takes the oldest request, adds the
//! requests queued behind it while the batch stays within `max_batch_size` atomic writes, stores
//! the batch in one transaction (each atomic write in a savepoint of its own, see
//! [`SqlBackend`](crate::journal_common::SqlBackend)) and answers every request once the
//! transaction has committed or failed.
//!
//! Ownership takes of recoveries ([`Writer::take_ownership`]) queue in the same line and share
//! the same transactions: within one transaction the atomic writes are stored first, then the
//! owner epochs are raised, so a recovering incarnation sees every write of the batch. A
//! thousand actors recovering at once thus cost a few commits, not a thousand.
//!
//! A request is never split across transactions, except a single request holding more than
//! `max_batch_size` atomic writes, which is stored in consecutive transactions of
//! `max_batch_size`. Requests are served in the order they were queued, so the atomic writes of
//! one call, and the calls of one caller, are stored in order.
//!
//! **Insert turns.** Transactions overlap (while one commits, the next is written). A caller
//! may still issue writes of one persistence id without waiting for each other (pipelining):
//! they must be stored in sequence order, with non-decreasing database timestamps, since
//! queries by offset rely on that (`QueryStore`'s timestamp promise; query conformance case
//! Q15). So a transaction takes the [`InsertTurn`] of each persistence id it writes, in the
//! order the requests were queued, before its first statement, and gives them up after its
//! last statement, before its commit (without group commit: after its commit). A later
//! transaction's statement on the id then starts after the earlier one's, waits for its row
//! lock, commits after it and takes a later timestamp. Ids written by one transaction at a
//! time (every persistent actor has one write in flight) never wait. Without the turns two
//! PostgreSQL transactions could insert one id's events in the opposite order, and a live
//! query delivered the later event first or missed the earlier one.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use actix_persistence_core::{
    AtomicWrite, AtomicWriteError, AtomicWriteResult, FailedIds, JournalError, Ownership,
    WriteRejection,
};
use tokio::sync::{mpsc, oneshot, Mutex, OwnedMutexGuard};

use crate::error::SqlStoreError;
use crate::home_runtime::HomeRuntime;

/// Default of `max_batch_size` of both SQL journals, and of `journal.max-batch-size`.
///
/// 512 atomic writes per transaction: turns a thousand small concurrent writes into a couple of
/// commits (one flush each instead of one per write). On PostgreSQL the whole batch is one
/// statement; only a batch with a conflicting write is redone with a savepoint per write.
pub const DEFAULT_MAX_BATCH_SIZE: u32 = 512;

/// Counters of a SQL journal's writes since it was opened; every clone of the journal shares
/// them. Read them with `stats()` on the journal.
///
/// With group commit the atomic writes of many concurrent calls share one transaction, so
/// [`transactions`](Self::transactions) grows slower than
/// [`atomic_writes`](Self::atomic_writes); with `max_batch_size` 1 the two are equal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteStats {
    /// Transactions of `write_messages` that committed (a batch in which every atomic write
    /// failed is rolled back and not counted).
    pub transactions: u64,
    /// Atomic writes stored, that is committed.
    pub atomic_writes: u64,
    /// The most atomic writes one committed transaction stored.
    pub largest_batch: u64,
}

/// The live counters behind [`WriteStats`].
#[derive(Debug, Default)]
pub(crate) struct WriteCounters {
    transactions: AtomicU64,
    atomic_writes: AtomicU64,
    largest_batch: AtomicU64,
    /// The longest time (microseconds), from before its `BEGIN` to its commit, of the
    /// transactions committed since [`take_longest_commit`](Self::take_longest_commit).
    longest_commit: AtomicU64,
}

impl WriteCounters {
    /// Records a committed transaction that stored `atomic_writes` atomic writes.
    pub(crate) fn committed(&self, atomic_writes: usize) {
        let atomic_writes = atomic_writes as u64;
        self.transactions.fetch_add(1, Ordering::Relaxed);
        self.atomic_writes
            .fetch_add(atomic_writes, Ordering::Relaxed);
        self.largest_batch
            .fetch_max(atomic_writes, Ordering::Relaxed);
    }

    /// Records how long a committed transaction took, from before its `BEGIN` to its commit.
    pub(crate) fn commit_took(&self, took: std::time::Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.longest_commit.fetch_max(micros, Ordering::SeqCst);
    }

    /// The longest time a transaction committed since the last call took, and starts over:
    /// the look-back of the write notification (see
    /// [`WriteNotifier::notify_committed`](actix_persistence_core::query::WriteNotifier::notify_committed)).
    #[cfg(feature = "postgres")]
    pub(crate) fn take_longest_commit(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.longest_commit.swap(0, Ordering::SeqCst))
    }

    pub(crate) fn snapshot(&self) -> WriteStats {
        WriteStats {
            transactions: self.transactions.load(Ordering::Relaxed),
            atomic_writes: self.atomic_writes.load(Ordering::Relaxed),
            largest_batch: self.largest_batch.load(Ordering::Relaxed),
        }
    }
}

/// The insert turns of the persistence ids one transaction writes (see the module
/// documentation): held from before its first statement until after its last one, given out
/// per id in the order the writes were queued. Dropping it gives them up.
#[derive(Default)]
pub(crate) struct InsertTurn {
    /// Where the turns come from (to forget ids nobody waits for); `None` for no turns.
    turns: Option<Arc<IdTurns>>,
    ids: Vec<String>,
    guards: Vec<OwnedMutexGuard<()>>,
}

impl InsertTurn {
    /// No turns (the caller holds them elsewhere, or needs none).
    pub(crate) fn none() -> Self {
        InsertTurn::default()
    }
}

impl Drop for InsertTurn {
    fn drop(&mut self) {
        self.guards.clear();
        if let Some(turns) = &self.turns {
            turns.forget_idle(&self.ids);
        }
    }
}

/// One turn (an async mutex) per persistence id that a transaction holds or waits for.
#[derive(Default)]
pub(crate) struct IdTurns {
    turns: std::sync::Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// Takes the turns of one transaction at a time, so that they go in the order asked.
    taking: Mutex<()>,
}

impl IdTurns {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Mutex<()>>>> {
        self.turns
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the turn of every id of `ids`, after the transactions that asked before.
    pub(crate) async fn take(self: &Arc<Self>, mut ids: Vec<String>) -> InsertTurn {
        ids.sort_unstable();
        ids.dedup();
        let _taking = self.taking.lock().await;
        let mutexes: Vec<Arc<Mutex<()>>> = {
            let mut map = self.map();
            ids.iter()
                .map(|id| Arc::clone(map.entry(id.clone()).or_default()))
                .collect()
        };
        let mut guards = Vec::with_capacity(mutexes.len());
        for mutex in mutexes {
            guards.push(mutex.lock_owned().await);
        }
        InsertTurn {
            turns: Some(Arc::clone(self)),
            ids,
            guards,
        }
    }

    /// Forgets the turns of `ids` that nobody holds or waits for.
    fn forget_idle(&self, ids: &[String]) {
        let mut map = self.map();
        for id in ids {
            if map.get(id).is_some_and(|turn| Arc::strong_count(turn) == 1) {
                map.remove(id);
            }
        }
    }
}

/// What a SQL journal must provide to be written through a [`Writer`].
pub(crate) trait Backend: Send + Sync + 'static {
    /// An atomic write checked and converted to the column types.
    type Write: Send + Sync + 'static;

    /// Checks an atomic write and converts it, or says why it is rejected.
    fn prepare(write: AtomicWrite) -> Result<Self::Write, WriteRejection>;

    /// The atomic write `write` was prepared from.
    fn atomic_write(write: &Self::Write) -> &AtomicWrite;

    /// Stores `writes`, then takes ownership of each of `owners`, in one transaction, and
    /// records it in `counters` if it commits: one result per write and one per owner, in
    /// order; a success only once the transaction has committed. `turn` is dropped after the
    /// last statement, before the commit (see [`InsertTurn`]). A write of an id in `failed`
    /// (its write failed in an earlier transaction of the same batch), or of an id whose write
    /// failed earlier in this one, is not attempted ([`JournalError::EarlierWriteFailed`]).
    fn commit_batch<'a>(
        &'a self,
        writes: &'a [Self::Write],
        owners: &'a [String],
        counters: &'a WriteCounters,
        turn: InsertTurn,
        failed: &'a FailedIds,
    ) -> impl Future<Output = BatchOutcome> + Send + 'a;
}

/// What one transaction of [`Backend::commit_batch`] answers: one result per atomic write and
/// one per ownership take, in order.
pub(crate) type BatchOutcome = (Vec<AtomicWriteResult>, Vec<OwnershipResult>);

/// The result of one ownership take.
pub(crate) type OwnershipResult = Result<Ownership, JournalError>;

/// One queued call: a `write_messages` or a `take_ownership`.
enum Request<W> {
    Write {
        writes: Vec<W>,
        /// The persistence id of each write.
        ids: Vec<String>,
        reply: oneshot::Sender<Vec<AtomicWriteResult>>,
    },
    Own {
        persistence_id: String,
        reply: oneshot::Sender<OwnershipResult>,
    },
}

impl<W> Request<W> {
    /// Atomic writes (or 1 for an ownership take) the request adds to a batch.
    fn size(&self) -> usize {
        match self {
            Request::Write { writes, .. } => writes.len(),
            Request::Own { .. } => 1,
        }
    }

    /// Whether its caller gave up.
    fn abandoned(&self) -> bool {
        match self {
            Request::Write { reply, .. } => reply.is_closed(),
            Request::Own { reply, .. } => reply.is_closed(),
        }
    }
}

/// The write path of a SQL journal: group commit through a writer task, or one transaction per
/// atomic write in the caller's task. Cheap to clone: clones share the queue and the counters.
pub(crate) struct Writer<B: Backend> {
    backend: Arc<B>,
    /// `None`: no group commit.
    queue: Option<mpsc::UnboundedSender<Request<B::Write>>>,
    counters: Arc<WriteCounters>,
    /// The insert turns (see the module documentation), shared with the writer tasks.
    turns: Arc<IdTurns>,
    /// Where the transactions of a call run without group commit ([`HomeRuntime`]; the
    /// caller's task by default).
    home: HomeRuntime,
}

impl<B: Backend> Clone for Writer<B> {
    fn clone(&self) -> Self {
        Writer {
            backend: Arc::clone(&self.backend),
            queue: self.queue.clone(),
            counters: Arc::clone(&self.counters),
            turns: Arc::clone(&self.turns),
            home: self.home.clone(),
        }
    }
}

impl<B: Backend> fmt::Debug for Writer<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer")
            .field("group_commit", &self.queue.is_some())
            .field("stats", &self.counters.snapshot())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Writer<B> {
    /// Starts the write path. With `max_batch_size` above 1 this spawns the writer task on the
    /// current Tokio runtime; it ends when the last clone of the writer is dropped.
    ///
    /// # Panics
    /// When `max_batch_size` is above 1 and no Tokio runtime is running (the journals' async
    /// `connect` always runs inside one).
    pub(crate) fn start(backend: B, max_batch_size: u32, writers: usize) -> Self {
        let backend = Arc::new(backend);
        let counters = Arc::new(WriteCounters::default());
        let turns = Arc::new(IdTurns::default());
        let queue = (max_batch_size > 1).then(|| {
            let (queue, requests) = mpsc::unbounded_channel();
            let requests = Arc::new(Mutex::new(requests));
            let max_batch_size = usize::try_from(max_batch_size).unwrap_or(usize::MAX);
            for _ in 0..writers.max(1) {
                tokio::spawn(run_writer(
                    Arc::clone(&backend),
                    Arc::clone(&requests),
                    max_batch_size,
                    Arc::clone(&counters),
                    Arc::clone(&turns),
                ));
            }
            queue
        });
        Writer {
            backend,
            queue,
            counters,
            turns,
            home: HomeRuntime::caller(),
        }
    }

    /// Without group commit, runs each call's transactions as a task on `home` once the call's
    /// turn came (the turn is taken in the caller's task, in the order the calls were first
    /// polled, and held by the task until its last commit), so that the connections the pool
    /// opens for them belong to `home`. With group commit the writer tasks run on the runtime
    /// `start` ran on.
    pub(crate) fn on_home(mut self, home: HomeRuntime) -> Self {
        self.home = home;
        self
    }

    /// The counters so far.
    pub(crate) fn stats(&self) -> WriteStats {
        self.counters.snapshot()
    }

    /// See [`WriteCounters::take_longest_commit`].
    #[cfg(feature = "postgres")]
    pub(crate) fn take_longest_commit(&self) -> std::time::Duration {
        self.counters.take_longest_commit()
    }

    /// Stores a batch of atomic writes: one result per atomic write, in order.
    ///
    /// The writes are queued (or, without group commit, the first transaction begins) when the
    /// returned future is first polled. Dropping it afterwards does not withdraw queued writes
    /// that the writer task has already taken into a transaction; they may still be stored.
    pub(crate) async fn write(&self, writes: Vec<AtomicWrite>) -> Vec<AtomicWriteResult> {
        let mut rejected: Vec<Option<AtomicWriteResult>> = Vec::with_capacity(writes.len());
        let mut prepared = Vec::with_capacity(writes.len());
        let mut ids = Vec::with_capacity(writes.len());
        for write in writes {
            let id = write.persistence_id().to_owned();
            match B::prepare(write) {
                Ok(write) => {
                    rejected.push(None);
                    prepared.push(write);
                    ids.push(id);
                }
                Err(rejection) => rejected.push(Some(Err(rejection.into()))),
            }
        }
        let stored = if prepared.is_empty() {
            Vec::new()
        } else {
            match &self.queue {
                None => {
                    // The ids' turns, in the order the calls were first polled, kept until
                    // the last transaction of this call has committed.
                    let turn = self.turns.take(ids).await;
                    let count = prepared.len();
                    let (backend, counters) =
                        (Arc::clone(&self.backend), Arc::clone(&self.counters));
                    let commit_each = async move {
                        let _turn = turn;
                        let mut stored = Vec::with_capacity(prepared.len());
                        // A later write of an id whose write failed is not attempted.
                        let mut failed = FailedIds::default();
                        for write in &prepared {
                            let one = std::slice::from_ref(write);
                            let (results, _) = backend
                                .commit_batch(one, &[], &counters, InsertTurn::none(), &failed)
                                .await;
                            note_failures::<B>(&mut failed, one, &results);
                            stored.extend(results);
                        }
                        stored
                    };
                    match self.home.run(commit_each).await {
                        Ok(stored) => stored,
                        Err(gone) => {
                            let error = JournalError::storage("write", gone);
                            (0..count).map(|_| Err(error.clone().into())).collect()
                        }
                    }
                }
                Some(queue) => {
                    let count = prepared.len();
                    let (reply, answer) = oneshot::channel();
                    let request = Request::Write {
                        writes: prepared,
                        ids,
                        reply,
                    };
                    match queue.send(request) {
                        Ok(()) => answer.await.unwrap_or_else(|_| writer_stopped(count)),
                        Err(_) => writer_stopped(count),
                    }
                }
            }
        };
        let mut stored = stored.into_iter();
        rejected
            .into_iter()
            .map(|result| {
                result
                    .unwrap_or_else(|| stored.next().unwrap_or_else(|| Err(stopped_error().into())))
            })
            .collect()
    }
}

impl<B: Backend> Writer<B> {
    /// Takes ownership of `persistence_id` (raises its owner epoch, reads its highest sequence
    /// number) in a transaction shared with the writes and ownership takes queued with it, or
    /// in a transaction of its own without group commit.
    pub(crate) async fn take_ownership(&self, persistence_id: &str) -> OwnershipResult {
        let owners = [persistence_id.to_owned()];
        match &self.queue {
            None => {
                let (backend, counters) = (Arc::clone(&self.backend), Arc::clone(&self.counters));
                let take = async move {
                    let (_, mut owned) = backend
                        .commit_batch(
                            &[],
                            &owners,
                            &counters,
                            InsertTurn::none(),
                            &FailedIds::default(),
                        )
                        .await;
                    owned.pop().unwrap_or_else(|| Err(stopped_error()))
                };
                self.home
                    .run(take)
                    .await
                    .unwrap_or_else(|gone| Err(JournalError::storage("take ownership", gone)))
            }
            Some(queue) => {
                let [persistence_id] = owners;
                let (reply, answer) = oneshot::channel();
                let request = Request::Own {
                    persistence_id,
                    reply,
                };
                match queue.send(request) {
                    Ok(()) => answer.await.unwrap_or_else(|_| Err(stopped_error())),
                    Err(_) => Err(stopped_error()),
                }
            }
        }
    }
}

fn stopped_error() -> JournalError {
    JournalError::storage("write", SqlStoreError::WriterStopped)
}

fn writer_stopped(count: usize) -> Vec<AtomicWriteResult> {
    (0..count)
        .map(|_| Err(AtomicWriteError::Failed(stopped_error())))
        .collect()
}

/// A writer task: takes the queued requests (up to `max_batch_size` atomic writes) and stores
/// them in one transaction, until every sender is gone. Several writer tasks share one queue:
/// while one commits, the next takes what arrived meanwhile. Requests of one actor never run
/// concurrently (it has one write outstanding at a time), so batches never race each other
/// for a sequence number.
async fn run_writer<B: Backend>(
    backend: Arc<B>,
    requests: Arc<Mutex<mpsc::UnboundedReceiver<Request<B::Write>>>>,
    max_batch_size: usize,
    counters: Arc<WriteCounters>,
    turns: Arc<IdTurns>,
) {
    let mut carried = None;
    loop {
        let (batch, turn) = {
            let mut requests = requests.lock().await;
            let first = match carried.take() {
                Some(request) => request,
                None => match requests.recv().await {
                    Some(request) => request,
                    None => return,
                },
            };
            let mut size = first.size();
            let mut batch = vec![first];
            while size < max_batch_size {
                match requests.try_recv() {
                    Ok(request) if size + request.size() <= max_batch_size => {
                        size += request.size();
                        batch.push(request);
                    }
                    Ok(request) => {
                        carried = Some(request);
                        break;
                    }
                    Err(_) => break,
                }
            }
            // Taken before the next writer task can take its batch: turns go in queue order.
            let ids = batch
                .iter()
                .flat_map(|request| match request {
                    Request::Write { ids, .. } => ids.clone(),
                    Request::Own { .. } => Vec::new(),
                })
                .collect();
            let turn = turns.take(ids).await;
            (batch, turn)
        };
        // A caller that gave up (its future was dropped) gets nothing written.
        let batch: Vec<_> = batch.into_iter().filter(|r| !r.abandoned()).collect();
        if !batch.is_empty() {
            store_batch(&*backend, batch, max_batch_size, &counters, turn).await;
        }
    }
}

/// Stores the writes of the batched requests and takes the ownerships they ask for (in
/// consecutive transactions of at most `max_batch_size` writes, which only a lone oversized
/// request needs; the ownership takes go with the last) and answers each request.
async fn store_batch<B: Backend>(
    backend: &B,
    batch: Vec<Request<B::Write>>,
    max_batch_size: usize,
    counters: &WriteCounters,
    turn: InsertTurn,
) {
    let mut writes = Vec::new();
    let mut owners = Vec::new();
    let mut write_replies = Vec::with_capacity(batch.len());
    let mut own_replies = Vec::new();
    for request in batch {
        match request {
            Request::Write {
                writes: these,
                reply,
                ..
            } => {
                write_replies.push((reply, these.len()));
                writes.extend(these);
            }
            Request::Own {
                persistence_id,
                reply,
            } => {
                owners.push(persistence_id);
                own_replies.push(reply);
            }
        }
    }
    let mut results = Vec::with_capacity(writes.len());
    let mut owned = Vec::new();
    let chunks: Vec<&[B::Write]> = if writes.is_empty() {
        vec![&[]]
    } else {
        writes.chunks(max_batch_size).collect()
    };
    let last = chunks.len() - 1;
    // Kept across the commits of all but the last transaction (a lone oversized request).
    let mut turn = Some(turn);
    // Ids whose write failed in an earlier transaction: their later writes are not attempted.
    let mut failed = FailedIds::default();
    for (i, chunk) in chunks.into_iter().enumerate() {
        let chunk_owners: &[String] = if i == last { &owners } else { &[] };
        let this_turn = if i == last {
            turn.take().unwrap_or_default()
        } else {
            InsertTurn::none()
        };
        let (stored, taken) = backend
            .commit_batch(chunk, chunk_owners, counters, this_turn, &failed)
            .await;
        if i != last {
            note_failures::<B>(&mut failed, chunk, &stored);
        }
        results.extend(stored);
        owned.extend(taken);
    }
    let mut results = results.into_iter();
    for (reply, count) in write_replies {
        // A caller that is gone no longer needs its answer.
        let _ = reply.send(results.by_ref().take(count).collect());
    }
    for (reply, result) in own_replies.into_iter().zip(owned) {
        let _ = reply.send(result);
    }
}

/// Records in `failed` the ids of `writes` whose result is a failure.
fn note_failures<B: Backend>(
    failed: &mut FailedIds,
    writes: &[B::Write],
    results: &[AtomicWriteResult],
) {
    for (write, result) in writes.iter().zip(results) {
        failed.note(B::atomic_write(write), result);
    }
}

/// Fails every write of a batch with the same error.
pub(crate) fn fail_all<W>(writes: &[W], error: &JournalError) -> Vec<AtomicWriteResult> {
    writes
        .iter()
        .map(|_| Err(AtomicWriteError::Failed(error.clone())))
        .collect()
}

/// The results of a batch whose transaction ended: the outcome of each write if it
/// committed, and `commit_error` in place of every success if it did not.
pub(crate) fn settle(
    outcomes: Vec<Result<(), JournalError>>,
    commit_error: Option<JournalError>,
) -> Vec<AtomicWriteResult> {
    outcomes
        .into_iter()
        .map(|outcome| match (outcome, &commit_error) {
            (Ok(()), None) => Ok(()),
            (Ok(()), Some(error)) => Err(AtomicWriteError::Failed(error.clone())),
            (Err(error), _) => Err(AtomicWriteError::Failed(error)),
        })
        .collect()
}
