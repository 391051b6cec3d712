use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use actix_persistence_core::{
    AtomicWrite, AtomicWriteError, AtomicWriteResult, FailedIds, InMemoryJournal, JournalError,
    JournalStore, ReplayStream, WriteRejection,
};
use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};

/// How long [`WriteController::next_write`] waits before it fails the test (a guard against a
/// hanging test, not a way to order events).
const WAIT_FOR_WRITE: Duration = Duration::from_secs(10);

/// A [`JournalStore`] whose writes wait until the test completes them through its
/// [`WriteController`]. Replays, highest sequence numbers, deletes and ownership takes
/// (`take_ownership`, so a recovery takes over at once while a held write waits) go straight to
/// the wrapped store (in memory by default), where completed writes are stored *before* they are
/// acknowledged.
#[derive(Clone)]
pub struct ControlledJournal {
    inner: Arc<dyn JournalStore>,
    writes: mpsc::UnboundedSender<PendingWrite>,
}

/// The test's side of a [`ControlledJournal`]: receives the writes as they arrive.
pub struct WriteController {
    inner: Arc<dyn JournalStore>,
    arrived: mpsc::UnboundedReceiver<PendingWrite>,
    held: VecDeque<PendingWrite>,
}

/// The result the test chooses for one atomic write.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Store it in the in-memory journal and pass that journal's result through.
    Store,
    /// Reject it with this reason; nothing is stored.
    Reject(String),
    /// Fail it with this error; nothing is stored.
    Fail(JournalError),
}

enum Decision {
    Outcomes(Vec<Outcome>),
    Raw(Result<Vec<AtomicWriteResult>, JournalError>),
}

struct Decided {
    decision: Decision,
    answered: oneshot::Sender<()>,
}

/// A batch the journal handed to the store, waiting for the test's decision. Dropping it
/// without a decision fails the batch (nothing waits forever).
#[derive(Debug)]
pub struct PendingWrite {
    writes: Vec<AtomicWrite>,
    decide: oneshot::Sender<Decided>,
}

/// Tells when the store handed the test's result back to the journal actor's write task.
///
/// On Actix's single-threaded arbiter, that task forwards the reply to its resequencer in the
/// same poll, so after [`Answered::wait`] the reply is queued there: whatever the resequencer
/// does with it next is decided by ordering, not by timing. Ignore it when that does not
/// matter.
#[derive(Debug)]
pub struct Answered(oneshot::Receiver<()>);

impl Answered {
    /// Waits until the store answered the journal.
    pub async fn wait(self) {
        let _ = self.0.await;
    }
}

impl std::fmt::Debug for Decided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Decision")
    }
}

impl std::fmt::Debug for ControlledJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlledJournal").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for WriteController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteController")
            .field("held", &self.held.len())
            .finish_non_exhaustive()
    }
}

impl ControlledJournal {
    /// A controlled journal over an empty in-memory journal, and its controller.
    pub fn new() -> (Self, WriteController) {
        Self::over(InMemoryJournal::new())
    }

    /// A controlled journal over `inner` (any store: in-memory, SQLite, PostgreSQL), and its
    /// controller.
    pub fn over(inner: impl JournalStore) -> (Self, WriteController) {
        let inner: Arc<dyn JournalStore> = Arc::new(inner);
        let (tx, rx) = mpsc::unbounded_channel();
        let store = ControlledJournal {
            inner: Arc::clone(&inner),
            writes: tx,
        };
        let controller = WriteController {
            inner,
            arrived: rx,
            held: VecDeque::new(),
        };
        (store, controller)
    }

    async fn apply(&self, writes: Vec<AtomicWrite>, decision: Decision) -> WriteBatchResult {
        match decision {
            Decision::Raw(result) => result,
            Decision::Outcomes(outcomes) => {
                // As every store: no write of a writer after its failed one in the batch
                // (conformance J28), whatever the script chose for it.
                let mut failed = FailedIds::default();
                let mut results = Vec::with_capacity(writes.len());
                for (write, outcome) in writes.into_iter().zip(outcomes) {
                    if let Err(earlier) = failed.check(&write) {
                        results.push(Err(earlier));
                        continue;
                    }
                    let key = write.clone();
                    let result = self.apply_one(write, outcome).await?;
                    failed.note(&key, &result);
                    results.push(result);
                }
                Ok(results)
            }
        }
    }

    async fn apply_one(
        &self,
        write: AtomicWrite,
        outcome: Outcome,
    ) -> Result<AtomicWriteResult, JournalError> {
        Ok(match outcome {
            Outcome::Store => {
                let mut stored = self.inner.write_messages(vec![write]).await?;
                stored.pop().unwrap_or(Err(AtomicWriteError::Failed(
                    JournalError::ResultCountMismatch {
                        expected: 1,
                        actual: 0,
                    },
                )))
            }
            Outcome::Reject(reason) => Err(AtomicWriteError::Rejected(WriteRejection {
                persistence_id: write.persistence_id().to_owned(),
                seq_nr: write.lowest_seq_nr(),
                reason,
            })),
            Outcome::Fail(cause) => Err(AtomicWriteError::Failed(cause)),
        })
    }
}

type WriteBatchResult = Result<Vec<AtomicWriteResult>, JournalError>;

#[async_trait]
impl JournalStore for ControlledJournal {
    async fn write_messages(&self, writes: Vec<AtomicWrite>) -> WriteBatchResult {
        let (decide, decision) = oneshot::channel();
        let pending = PendingWrite {
            writes: writes.clone(),
            decide,
        };
        if self.writes.send(pending).is_err() {
            return Err(JournalError::storage("write", ControllerGone));
        }
        match decision.await {
            Ok(Decided { decision, answered }) => {
                let result = self.apply(writes, decision).await;
                let _ = answered.send(());
                result
            }
            Err(_) => Err(JournalError::storage("write", ControllerGone)),
        }
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

/// The test dropped a pending write (or the controller) without deciding.
#[derive(Debug)]
struct ControllerGone;

impl std::fmt::Display for ControllerGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the test dropped this write without completing it")
    }
}

impl std::error::Error for ControllerGone {}

impl WriteController {
    /// The in-memory journal behind the controlled store: what is really stored.
    pub fn stored(&self) -> &Arc<dyn JournalStore> {
        &self.inner
    }

    /// The next write batch to arrive (in arrival order), whoever wrote it.
    ///
    /// # Panics
    /// When no write arrives within 10 s: the test is stuck, so it fails instead of hanging.
    pub async fn next_write(&mut self) -> PendingWrite {
        if let Some(held) = self.held.pop_front() {
            return held;
        }
        self.receive().await
    }

    /// The next write batch of `persistence_id`; batches of other ids that arrive first are
    /// kept for later calls.
    ///
    /// # Panics
    /// When no such write arrives within 10 s.
    pub async fn next_write_for(&mut self, persistence_id: &str) -> PendingWrite {
        if let Some(i) = self
            .held
            .iter()
            .position(|w| w.persistence_id() == persistence_id)
        {
            if let Some(found) = self.held.remove(i) {
                return found;
            }
        }
        loop {
            let write = self.receive().await;
            if write.persistence_id() == persistence_id {
                return write;
            }
            self.held.push_back(write);
        }
    }

    /// Whether a write batch arrived and was not taken yet (without waiting).
    pub fn has_waiting_write(&mut self) -> bool {
        while let Ok(write) = self.arrived.try_recv() {
            self.held.push_back(write);
        }
        !self.held.is_empty()
    }

    async fn receive(&mut self) -> PendingWrite {
        match tokio::time::timeout(WAIT_FOR_WRITE, self.arrived.recv()).await {
            Ok(Some(write)) => write,
            Ok(None) => panic!("the controlled journal was dropped"),
            Err(_) => panic!("no write reached the controlled journal within {WAIT_FOR_WRITE:?}"),
        }
    }
}

impl PendingWrite {
    /// The atomic writes of the batch, in order.
    pub fn writes(&self) -> &[AtomicWrite] {
        &self.writes
    }

    /// The persistence id of the batch's first write.
    pub fn persistence_id(&self) -> &str {
        self.writes
            .first()
            .map(|w| w.persistence_id())
            .unwrap_or("")
    }

    /// Stores every atomic write and acknowledges with the in-memory journal's results.
    pub fn complete(self) -> Answered {
        let outcomes = vec![Outcome::Store; self.writes.len()];
        self.complete_with(outcomes)
    }

    /// Completes each atomic write with the chosen outcome (one per write, in order; missing
    /// ones are stored).
    pub fn complete_with(self, mut outcomes: Vec<Outcome>) -> Answered {
        outcomes.resize(self.writes.len(), Outcome::Store);
        self.decide_with(Decision::Outcomes(outcomes))
    }

    /// Fails the whole batch with `cause`; nothing is stored.
    pub fn fail(self, cause: JournalError) -> Answered {
        self.decide_with(Decision::Raw(Err(cause)))
    }

    /// Answers with exactly `result`, storing nothing: e.g. a wrong number of results.
    pub fn reply_raw(self, result: Result<Vec<AtomicWriteResult>, JournalError>) -> Answered {
        self.decide_with(Decision::Raw(result))
    }

    fn decide_with(self, decision: Decision) -> Answered {
        let (answered, rx) = oneshot::channel();
        let _ = self.decide.send(Decided { decision, answered });
        Answered(rx)
    }
}
