//! A store wrapper that records every write batch and its answer, for cases that must see what
//! reached the store (J21: a write rejected before sending never does).

use std::sync::{Arc, Mutex, MutexGuard};

use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, JournalError, JournalStore, ReplayStream,
};
use async_trait::async_trait;

/// One `write_messages` call: the sequence numbers of each atomic write, and the answer.
#[derive(Debug, Clone)]
pub(crate) struct RecordedWrite {
    pub(crate) seq_nrs: Vec<Vec<u64>>,
    pub(crate) answer: Result<Vec<AtomicWriteResult>, JournalError>,
}

/// Passes every call to `inner`, recording write batches.
pub(crate) struct RecordingStore {
    inner: Arc<dyn JournalStore>,
    writes: Arc<Mutex<Vec<RecordedWrite>>>,
}

/// The test's view of a [`RecordingStore`]'s record.
#[derive(Clone)]
pub(crate) struct WriteLog(Arc<Mutex<Vec<RecordedWrite>>>);

impl RecordingStore {
    pub(crate) fn new(inner: Arc<dyn JournalStore>) -> (Self, WriteLog) {
        let writes = Arc::new(Mutex::new(Vec::new()));
        let log = WriteLog(Arc::clone(&writes));
        (RecordingStore { inner, writes }, log)
    }
}

impl WriteLog {
    fn lock(&self) -> MutexGuard<'_, Vec<RecordedWrite>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every batch recorded so far, in arrival order.
    pub(crate) fn writes(&self) -> Vec<RecordedWrite> {
        self.lock().clone()
    }
}

#[async_trait]
impl JournalStore for RecordingStore {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        let seq_nrs = writes
            .iter()
            .map(|w| w.events.iter().map(|e| e.seq_nr).collect())
            .collect();
        let answer = self.inner.write_messages(writes).await;
        self.writes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(RecordedWrite {
                seq_nrs,
                answer: answer.clone(),
            });
        answer
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
