//! The in-memory offset store, for tests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use super::{OffsetStore, SeenSeqNrs, StoredProgress, TransactionalOffsetStore};
use crate::error::OffsetStoreError;
use crate::ProjectionId;

#[derive(Debug, Default, Clone)]
struct Entry {
    offset: Option<String>,
    seen: SeenSeqNrs,
}

/// Offsets kept in the process, for tests: lost with the process, shared by clones.
///
/// Exactly-once works as with a database: the handler stages its effects on the
/// [`InMemoryTransaction`] with [`on_commit`](InMemoryTransaction::on_commit), and the commit
/// applies them and the offset together, under the store's lock; a transaction that is dropped
/// (the handler failed) applies nothing.
///
/// Ownership (fencing) works as in the SQL stores: the owner epochs live beside the offsets,
/// the commit checks the transaction's epoch under the same lock that applies it.
#[derive(Debug, Clone, Default)]
pub struct InMemoryOffsetStore {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<ProjectionId, Entry>,
    /// Owner epoch per projection id; kept by `reset`.
    owners: HashMap<ProjectionId, u64>,
}

impl Inner {
    fn check(&self, id: &ProjectionId, epoch: u64) -> Result<(), OffsetStoreError> {
        if self.owners.get(id) == Some(&epoch) {
            Ok(())
        } else {
            Err(OffsetStoreError::Fenced {
                id: id.clone(),
                epoch,
            })
        }
    }
}

impl InMemoryOffsetStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the maps consistent (every update is one
        // assignment), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A transaction of the [`InMemoryOffsetStore`]: the offset and the handler's effects, applied
/// together by the commit.
#[derive(Default)]
pub struct InMemoryTransaction {
    epoch: Option<u64>,
    offset: Option<String>,
    seen: Vec<(String, u64)>,
    effects: Vec<Box<dyn FnOnce() + Send>>,
}

impl std::fmt::Debug for InMemoryTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryTransaction")
            .field("epoch", &self.epoch)
            .field("offset", &self.offset)
            .field("seen", &self.seen)
            .field("effects", &self.effects.len())
            .finish()
    }
}

impl InMemoryTransaction {
    /// Stages `effect` (e.g. an update of an in-memory read model): it runs when the
    /// transaction commits, together with saving the offset, and never when it is dropped.
    pub fn on_commit(&mut self, effect: impl FnOnce() + Send + 'static) {
        self.effects.push(Box::new(effect));
    }
}

#[async_trait]
impl OffsetStore for InMemoryOffsetStore {
    async fn read_offset(&self, id: &ProjectionId) -> Result<Option<String>, OffsetStoreError> {
        Ok(self.inner().entries.get(id).and_then(|e| e.offset.clone()))
    }

    async fn read_seen(&self, id: &ProjectionId) -> Result<SeenSeqNrs, OffsetStoreError> {
        Ok(self
            .inner()
            .entries
            .get(id)
            .map(|e| e.seen.clone())
            .unwrap_or_default())
    }

    async fn read_progress(&self, name: &str) -> Result<Vec<StoredProgress>, OffsetStoreError> {
        Ok(self
            .inner()
            .entries
            .iter()
            .filter(|(id, entry)| {
                id.name == name && (entry.offset.is_some() || !entry.seen.is_empty())
            })
            .map(|(id, entry)| StoredProgress {
                id: id.clone(),
                offset: entry.offset.clone(),
                seen: entry.seen.clone(),
            })
            .collect())
    }

    async fn read_owners(&self, name: &str) -> Result<Vec<ProjectionId>, OffsetStoreError> {
        Ok(self
            .inner()
            .owners
            .keys()
            .filter(|id| id.name == name)
            .cloned()
            .collect())
    }

    async fn take_ownership(
        &self,
        id: &ProjectionId,
        held: Option<u64>,
    ) -> Result<u64, OffsetStoreError> {
        let mut inner = self.inner();
        if let Some(epoch) = held {
            inner.check(id, epoch)?;
        }
        let epoch = inner.owners.entry(id.clone()).or_insert(0);
        *epoch += 1;
        Ok(*epoch)
    }

    async fn save_offset(
        &self,
        id: &ProjectionId,
        epoch: u64,
        offset: &str,
        covered: &[(String, u64)],
    ) -> Result<(), OffsetStoreError> {
        let mut inner = self.inner();
        inner.check(id, epoch)?;
        let entry = inner.entries.entry(id.clone()).or_default();
        entry.offset = Some(offset.to_owned());
        for (pid, seq_nr) in covered {
            if entry.seen.get(pid).is_some_and(|seen| seen <= seq_nr) {
                entry.seen.remove(pid);
            }
        }
        Ok(())
    }

    async fn reset(&self, id: &ProjectionId) -> Result<(), OffsetStoreError> {
        self.inner().entries.remove(id);
        Ok(())
    }

    async fn hand_over(
        &self,
        from: &ProjectionId,
        to: &ProjectionId,
        to_offset: Option<&str>,
    ) -> Result<(), OffsetStoreError> {
        let mut inner = self.inner();
        let Some(Entry {
            offset: Some(offset),
            seen,
        }) = inner.entries.get(from).cloned()
        else {
            return Ok(());
        };
        let target = inner.entries.entry(to.clone()).or_default();
        if target.offset.as_deref() != to_offset {
            return Ok(());
        }
        target.offset = Some(offset);
        for (persistence_id, seq_nr) in seen {
            let slot = target.seen.entry(persistence_id).or_insert(0);
            *slot = (*slot).max(seq_nr);
        }
        Ok(())
    }
}

#[async_trait]
impl TransactionalOffsetStore for InMemoryOffsetStore {
    type Transaction = InMemoryTransaction;

    async fn begin(&self, _id: &ProjectionId) -> Result<InMemoryTransaction, OffsetStoreError> {
        Ok(InMemoryTransaction::default())
    }

    async fn save_in(
        &self,
        tx: &mut InMemoryTransaction,
        id: &ProjectionId,
        epoch: u64,
        offset: Option<&str>,
        seen: &[(String, u64)],
    ) -> Result<(), OffsetStoreError> {
        // Checked here for an early answer, and again by the commit under the lock that
        // applies the transaction.
        self.inner().check(id, epoch)?;
        tx.epoch = Some(epoch);
        if let Some(offset) = offset {
            tx.offset = Some(offset.to_owned());
        }
        tx.seen.extend_from_slice(seen);
        Ok(())
    }

    async fn commit(
        &self,
        tx: InMemoryTransaction,
        id: &ProjectionId,
    ) -> Result<(), OffsetStoreError> {
        let mut inner = self.inner();
        if let Some(epoch) = tx.epoch {
            inner.check(id, epoch)?;
        }
        for effect in tx.effects {
            effect();
        }
        let entry = inner.entries.entry(id.clone()).or_default();
        if let Some(offset) = tx.offset {
            entry.offset = Some(offset);
        }
        for (pid, seq_nr) in tx.seen {
            let slot = entry.seen.entry(pid).or_insert(0);
            *slot = (*slot).max(seq_nr);
        }
        Ok(())
    }

    async fn rollback(
        &self,
        tx: InMemoryTransaction,
        _id: &ProjectionId,
    ) -> Result<(), OffsetStoreError> {
        drop(tx);
        Ok(())
    }
}
