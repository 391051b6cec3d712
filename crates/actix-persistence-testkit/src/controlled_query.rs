//! [`ControlledQueryStore`]: a query store whose clock and commit visibility a test controls.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix_persistence_core::query::{
    EventKey, EventsRequest, QueryStore, StoredEvent, WriteNotifications,
};
use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, JournalError, JournalStore, ReplayStream,
};
use async_trait::async_trait;

/// What a test controls of a [`ControlledQueryStore`]; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct QueryControl {
    shift_micros: Arc<AtomicI64>,
    pending: Arc<Mutex<HashSet<String>>>,
}

impl QueryControl {
    /// Moves the store's clock forward by `by` (for the queries only: the stored timestamps
    /// stay as written), so that the late-commit window of a query passes without waiting.
    /// Move it by the window, not more: a query's settled position would otherwise get ahead
    /// of the timestamps the store gives to new events.
    pub fn advance_clock(&self, by: Duration) {
        let micros = i64::try_from(by.as_micros()).unwrap_or(i64::MAX);
        self.shift_micros.fetch_add(micros, Ordering::SeqCst);
    }

    /// Hides the events of `persistence_id` from queries by offset, as if the transaction
    /// that wrote them had not committed yet (written events keep the timestamps they got).
    pub fn hold_commits_of(&self, persistence_id: &str) {
        self.pending().insert(persistence_id.to_owned());
    }

    /// Shows the events of `persistence_id` again: its transaction "commits".
    pub fn commit(&self, persistence_id: &str) {
        self.pending().remove(persistence_id);
    }

    fn pending(&self) -> MutexGuard<'_, HashSet<String>> {
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn is_pending(&self, persistence_id: &str) -> bool {
        self.pending().contains(persistence_id)
    }
}

/// Wraps a [`QueryStore`] so that a test decides when events become visible to queries by
/// offset ([`QueryControl::hold_commits_of`], [`QueryControl::commit`]) and moves the clock
/// queries read ([`QueryControl::advance_clock`]): late commits and late-commit windows
/// without sleeps or real concurrent transactions. Everything else passes through.
#[derive(Debug, Clone)]
pub struct ControlledQueryStore<S> {
    store: S,
    control: QueryControl,
}

impl<S: QueryStore> ControlledQueryStore<S> {
    /// Wraps `store`; nothing held, clock not moved.
    pub fn new(store: S) -> Self {
        ControlledQueryStore {
            store,
            control: QueryControl::default(),
        }
    }

    /// The handle the test controls the store with.
    pub fn control(&self) -> QueryControl {
        self.control.clone()
    }
}

#[async_trait]
impl<S: QueryStore> JournalStore for ControlledQueryStore<S> {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        self.store.write_messages(writes).await
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.store.replay_messages(pid, from, to, max)
    }

    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        self.store.read_highest_sequence_nr(pid, from).await
    }

    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        fencing_token: actix_persistence_core::FencingToken,
    ) -> Result<(), JournalError> {
        self.store.delete_messages_to(pid, to, fencing_token).await
    }

    async fn read_deleted_to(&self, pid: &str) -> Result<Option<u64>, JournalError> {
        self.store.read_deleted_to(pid).await
    }
}

#[async_trait]
impl<S: QueryStore> QueryStore for ControlledQueryStore<S> {
    async fn current_timestamp(&self) -> Result<i64, JournalError> {
        let now = self.store.current_timestamp().await?;
        Ok(now.saturating_add(self.control.shift_micros.load(Ordering::SeqCst)))
    }

    /// The store's pages without the held events, reading on until the page is full or the
    /// store has no more, so a held event never ends a pass early.
    async fn read_events(
        &self,
        request: EventsRequest<'_>,
    ) -> Result<Vec<StoredEvent>, JournalError> {
        let mut page = Vec::new();
        let mut after: EventKey = request.after.clone();
        loop {
            let inner = EventsRequest {
                after: &after,
                ..request.clone()
            };
            let read = self.store.read_events(inner).await?;
            let exhausted = read.len() < request.limit as usize;
            if let Some(last) = read.last() {
                after = last.key();
            }
            page.extend(
                read.into_iter()
                    .filter(|event| !self.control.is_pending(&event.repr.persistence_id)),
            );
            if exhausted || page.len() >= request.limit as usize {
                page.truncate(request.limit as usize);
                return Ok(page);
            }
        }
    }

    async fn read_persistence_ids(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>, JournalError> {
        self.store.read_persistence_ids(after, limit).await
    }

    fn write_notifications(&self) -> Option<WriteNotifications> {
        self.store.write_notifications()
    }
}
