//! A store that keeps something alive as long as it lives: the temporary directory of a
//! SQLite file, or a handle that drops a test database.

use actix_persistence_core::query::{EventsRequest, QueryStore, StoredEvent, WriteNotifications};
use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, CheckedBatch, JournalError, JournalStore, ReplayBounds,
    ReplayStream, SelectedSnapshot, SerializedSnapshot, SnapshotError, SnapshotMetadata,
    SnapshotSelectionCriteria, SnapshotStore, WriteBatch, WriteNow,
};
use async_trait::async_trait;

/// A store together with a guard that is dropped after it: what a conformance factory returns
/// when its store needs something to outlive it (a [`JournalStore`] when `S` is one, a
/// [`SnapshotStore`] when `S` is one).
///
/// # Examples
/// ```
/// use actix_persistence_core::InMemoryJournal;
/// use actix_persistence_testkit::WithGuard;
///
/// struct DropsTheDatabase; // e.g. a temporary directory, or a schema to drop
///
/// mod with_guard {
///     actix_persistence_testkit::journal_conformance_tests!(|| async {
///         actix_persistence_testkit::WithGuard::new(
///             actix_persistence_core::InMemoryJournal::new(),
///             super::DropsTheDatabase,
///         )
///     });
/// }
/// # fn main() {}
/// ```
#[derive(Debug)]
pub struct WithGuard<S, G> {
    // Declared first: dropped before the guard.
    store: S,
    guard: G,
}

impl<S, G> WithGuard<S, G> {
    /// `store`, keeping `guard` alive until the store is dropped.
    pub fn new(store: S, guard: G) -> Self {
        WithGuard { store, guard }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The guard.
    pub fn guard(&self) -> &G {
        &self.guard
    }
}

#[async_trait]
impl<S: JournalStore, G: Send + Sync + 'static> JournalStore for WithGuard<S, G> {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        self.store.write_messages(writes).await
    }

    fn write_messages_now(&self, writes: WriteBatch) -> WriteNow {
        self.store.write_messages_now(writes)
    }

    fn write_checked_now(&self, writes: CheckedBatch) -> WriteNow {
        self.store.write_checked_now(writes)
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.store.replay_messages(pid, from, to, max)
    }

    fn replay_for_recovery(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.store.replay_for_recovery(pid, from, to, max)
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
    async fn take_ownership(
        &self,
        pid: &str,
    ) -> Result<actix_persistence_core::Ownership, JournalError> {
        self.store.take_ownership(pid).await
    }

    async fn read_deleted_to(&self, pid: &str) -> Result<Option<u64>, JournalError> {
        self.store.read_deleted_to(pid).await
    }

    async fn read_replay_bounds(&self, pid: &str, from: u64) -> Result<ReplayBounds, JournalError> {
        self.store.read_replay_bounds(pid, from).await
    }
}

#[async_trait]
impl<S: SnapshotStore, G: Send + Sync + 'static> SnapshotStore for WithGuard<S, G> {
    async fn load(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        self.store.load(pid, criteria).await
    }

    async fn save(
        &self,
        metadata: SnapshotMetadata,
        snapshot: SerializedSnapshot,
    ) -> Result<(), SnapshotError> {
        self.store.save(metadata, snapshot).await
    }

    async fn delete(&self, metadata: &SnapshotMetadata) -> Result<(), SnapshotError> {
        self.store.delete(metadata).await
    }

    async fn delete_matching(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError> {
        self.store.delete_matching(pid, criteria).await
    }

    async fn read_metadata(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
        limit: u32,
    ) -> Result<Vec<SnapshotMetadata>, SnapshotError> {
        self.store.read_metadata(pid, criteria, limit).await
    }
}

#[async_trait]
impl<S: QueryStore, G: Send + Sync + 'static> QueryStore for WithGuard<S, G> {
    async fn current_timestamp(&self) -> Result<i64, JournalError> {
        self.store.current_timestamp().await
    }

    async fn committed_before(&self) -> Result<Option<i64>, JournalError> {
        self.store.committed_before().await
    }

    async fn read_events(
        &self,
        request: EventsRequest<'_>,
    ) -> Result<Vec<StoredEvent>, JournalError> {
        self.store.read_events(request).await
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
