//! [`ControlledQueryStore`]: a query store whose clock and commit visibility a test controls.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix_persistence_core::query::{
    EventKey, EventsRequest, QueryStore, StoredEvent, WriteNotifications,
};
use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, JournalError, JournalStore, Ownership, ReplayStream,
};
use async_trait::async_trait;

/// What a test controls of a [`ControlledQueryStore`]; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct QueryControl {
    shift_micros: Arc<AtomicI64>,
    pending: Arc<Mutex<HashSet<String>>>,
    /// The clock shift (microseconds, above 0) in force when each event written through the
    /// store was written; events not in it were written at shift 0 or around the store.
    written_at_shift: Arc<Mutex<HashMap<(String, u64), i64>>>,
}

impl QueryControl {
    /// Moves the store's clock forward by `by`, so that time passes for the queries without
    /// waiting: they read a clock `by` later, and events written through the store from now on
    /// get timestamps `by` later too (events written before keep theirs, as do events written
    /// around the wrapper). Advance while no write through the store is in flight, so that
    /// the timestamps keep the order of the writes.
    pub fn advance_clock(&self, by: Duration) {
        let micros = i64::try_from(by.as_micros()).unwrap_or(i64::MAX);
        self.shift_micros.fetch_add(micros, Ordering::SeqCst);
    }

    fn shift(&self) -> i64 {
        self.shift_micros.load(Ordering::SeqCst)
    }

    fn written_at_shift(&self) -> MutexGuard<'_, HashMap<(String, u64), i64>> {
        self.written_at_shift
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
/// offset ([`QueryControl::hold_commits_of`], [`QueryControl::commit`]) and moves the store's
/// clock ([`QueryControl::advance_clock`]: the clock queries read and the timestamps of the
/// events written afterwards): late commits and late-commit windows without sleeps or real
/// concurrent transactions. Everything else passes through.
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
    /// Writes through, remembering the clock shift of each event for the queries.
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        let shift = self.control.shift();
        if shift != 0 {
            let mut shifts = self.control.written_at_shift();
            for event in writes.iter().flat_map(|write| write.events.iter()) {
                shifts.insert((event.persistence_id.to_string(), event.seq_nr), shift);
            }
        }
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

    async fn take_ownership(&self, pid: &str) -> Result<Ownership, JournalError> {
        self.store.take_ownership(pid).await
    }

    async fn read_deleted_to(&self, pid: &str) -> Result<Option<u64>, JournalError> {
        self.store.read_deleted_to(pid).await
    }
}

#[async_trait]
impl<S: QueryStore> QueryStore for ControlledQueryStore<S> {
    async fn current_timestamp(&self) -> Result<i64, JournalError> {
        let now = self.store.current_timestamp().await?;
        Ok(now.saturating_add(self.control.shift()))
    }

    /// The store's pages without the held events, with the timestamps moved by the clock
    /// shift each event was written at, reading on until the page is full or the store has no
    /// more, so a held event never ends a pass early.
    async fn read_events(
        &self,
        request: EventsRequest<'_>,
    ) -> Result<Vec<StoredEvent>, JournalError> {
        let limit = request.limit as usize;
        // A stored timestamp is at most the largest shift below the one the query sees.
        let largest_shift = self.control.shift();
        let mut after: EventKey = if largest_shift == 0 {
            request.after.clone()
        } else {
            EventKey::start_of(request.after.timestamp.saturating_sub(largest_shift))
        };
        let mut page = Vec::new();
        loop {
            let inner = EventsRequest {
                after: &after,
                ..request.clone()
            };
            let read = self.store.read_events(inner).await?;
            let exhausted = read.len() < limit;
            if let Some(last) = read.last() {
                after = last.key();
            }
            {
                let shifts = self.control.written_at_shift();
                let shift_of = |pid: &str, seq_nr: u64| {
                    shifts.get(&(pid.to_owned(), seq_nr)).copied().unwrap_or(0)
                };
                for mut event in read {
                    let pid = &*event.repr.persistence_id;
                    if self.control.is_pending(pid) {
                        continue;
                    }
                    event.timestamp = event
                        .timestamp
                        .saturating_add(shift_of(pid, event.repr.seq_nr));
                    if let (Some(timestamp), Some(seq_nr)) =
                        (event.previous_timestamp, event.previous_seq_nr)
                    {
                        event.previous_timestamp =
                            Some(timestamp.saturating_add(shift_of(pid, seq_nr)));
                    }
                    if event.key() > *request.after && event.timestamp < request.before_timestamp {
                        page.push(event);
                    }
                }
            }
            if exhausted || page.len() >= limit {
                page.sort_by_key(StoredEvent::key);
                page.truncate(limit);
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
