//! An in-memory journal store, for tests and benchmarks. Nothing survives the process.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use futures::stream;

use crate::error::JournalError;
use crate::store::{AtomicWrite, AtomicWriteResult, JournalStore, PersistentRepr, ReplayStream};

#[derive(Debug, Default)]
struct Events {
    stored: BTreeMap<u64, PersistentRepr>,
    highest: u64,
}

/// A [`JournalStore`] kept in memory. Cheap to clone: clones share the same events.
///
/// Behaves as the SQL stores do: atomic writes are all or nothing, a sequence number that is
/// already stored fails with [`JournalError::ConcurrentWrite`], and deletes keep the highest
/// sequence number.
#[derive(Debug, Clone, Default)]
pub struct InMemoryJournal {
    inner: Arc<Mutex<HashMap<String, Events>>>,
}

impl InMemoryJournal {
    /// An empty journal.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Events>> {
        // A panic while holding this lock cannot leave the map half-updated (every update is
        // a check followed by infallible inserts), so a poisoned lock is still consistent.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Stores one atomic write all or nothing.
    fn write_atomic(&self, write: AtomicWrite) -> AtomicWriteResult {
        write.check_shape()?;
        let mut journal = self.lock();
        // Look up before inserting: the id is copied only on its first write.
        if let Some(events) = journal.get_mut(write.persistence_id()) {
            return events.store(write);
        }
        journal
            .entry(write.persistence_id().to_owned())
            .or_default()
            .store(write)
    }
}

impl Events {
    /// Stores the events of `write` unless one of its sequence numbers is taken.
    fn store(&mut self, write: AtomicWrite) -> AtomicWriteResult {
        if let Some(taken) = write
            .events
            .iter()
            .find(|e| self.stored.contains_key(&e.seq_nr))
        {
            return Err(JournalError::ConcurrentWrite {
                persistence_id: taken.persistence_id.clone(),
                seq_nr: taken.seq_nr,
            }
            .into());
        }
        self.highest = self.highest.max(write.highest_seq_nr());
        for event in write.events {
            self.stored.insert(event.seq_nr, event);
        }
        Ok(())
    }
}

#[async_trait]
impl JournalStore for InMemoryJournal {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        Ok(writes.into_iter().map(|w| self.write_atomic(w)).collect())
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        let journal = self.lock();
        let events: Vec<_> = match journal.get(pid) {
            Some(events) if from <= to => events
                .stored
                .range(from..=to)
                .take(usize::try_from(max).unwrap_or(usize::MAX))
                .map(|(_, e)| Ok(e.clone()))
                .collect(),
            _ => Vec::new(),
        };
        Box::pin(stream::iter(events))
    }

    async fn read_highest_sequence_nr(&self, pid: &str, _from: u64) -> Result<u64, JournalError> {
        Ok(self.lock().get(pid).map(|e| e.highest).unwrap_or(0))
    }

    async fn delete_messages_to(&self, pid: &str, to: u64) -> Result<(), JournalError> {
        if let Some(events) = self.lock().get_mut(pid) {
            events.stored = events.stored.split_off(&to.saturating_add(1));
            if to == u64::MAX {
                events.stored.clear();
            }
        }
        Ok(())
    }
}
