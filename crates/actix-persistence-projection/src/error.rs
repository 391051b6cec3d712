//! Errors of projections and offset stores.

use crate::ProjectionId;

/// Any error, boxed: what handlers and sources return.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a handler returns when it could not handle an envelope (any error converts with `?`).
/// The projection retries it, then applies its [`HandlerRecovery`](crate::HandlerRecovery).
pub type HandlerError = BoxError;

/// Why an offset store could not read or write a projection's offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OffsetStoreError {
    /// The database failed (connection lost, timeout, constraint, ...).
    #[error("offset store of projection {id}: the database failed: {source}; the projection restarts from its stored offset")]
    Database {
        /// The projection instance.
        id: ProjectionId,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The database could not be opened or its schema brought up to date.
    #[error("could not open the offset store: {source}")]
    Open {
        /// The SQL store's error.
        #[source]
        source: actix_persistence_sql::SqlStoreError,
    },
    /// A stored offset does not deserialize into the source's offset type (the projection's
    /// source changed, or the row was edited): reset the projection to rebuild it.
    #[error("stored offset {stored:?} of projection {id} does not fit the source's offset type: {source}; reset the projection to rebuild it")]
    CorruptOffset {
        /// The projection instance.
        id: ProjectionId,
        /// The stored JSON.
        stored: String,
        /// The deserializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// The task saving an offset ended without an answer (it panicked or its runtime shut
    /// down): whether the offset was stored is unknown, so the projection restarts from the
    /// stored one.
    #[error("the save of projection {id}'s offset ended without an answer: {reason}; the projection restarts from its stored offset")]
    SaveLost {
        /// The projection instance.
        id: ProjectionId,
        /// Why the task ended.
        reason: String,
    },
    /// An offset could not be serialized to JSON.
    #[error("offset of projection {id} cannot be stored as JSON: {source}")]
    Unserializable {
        /// The projection instance.
        id: ProjectionId,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// Another instance of the same projection id took ownership of it (a deploy overlap, or a
    /// process thought dead that is still running): this instance's write was refused and
    /// stored nothing (an exactly-once transaction was rolled back with the handler's
    /// writes). The instance stops; the one holding the newer epoch carries on.
    #[error("projection {id} was taken over by another instance (this instance holds owner epoch {epoch}, the store has a newer one): its write was refused and this instance stops")]
    Fenced {
        /// The projection instance.
        id: ProjectionId,
        /// The owner epoch this instance holds (see [`OffsetStore::take_ownership`](crate::OffsetStore::take_ownership)).
        epoch: u64,
    },
    /// A sequence number above `i64::MAX`, which SQL databases cannot store.
    #[error("sequence number {seq_nr} of persistence id {persistence_id:?} is above i64::MAX and cannot be stored")]
    SeqNrOutOfRange {
        /// The persistence id.
        persistence_id: String,
        /// The sequence number.
        seq_nr: u64,
    },
}

/// Why a projection run ended in failure (reported in its
/// [`Progress`](crate::Progress) and logged; the projection restarts with backoff).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectionError {
    /// The offset store failed.
    #[error(transparent)]
    OffsetStore(OffsetStoreError),
    /// Another instance of the same projection id took ownership of it (its offset store
    /// refused this instance's write with [`OffsetStoreError::Fenced`]): the instance stops
    /// for good, in [`ProjectionState::Fenced`](crate::ProjectionState::Fenced), without
    /// restarting (as a fenced persistent actor stops).
    #[error("projection {id} was taken over by another instance (this instance held owner epoch {epoch}); it stops and the newer instance carries on")]
    Fenced {
        /// The projection instance.
        id: ProjectionId,
        /// The owner epoch this instance held.
        epoch: u64,
    },
    /// The projection id names a slice range ([`ProjectionId::for_slices`]) other than the
    /// one its source reads ([`SourceProvider::slice_range`](crate::SourceProvider::slice_range)):
    /// the instance's stored offset, and those of the instances whose ranges overlap the id's,
    /// would be taken as covering slices the source never read, and their events before the
    /// offset skipped. The instance does not start (state
    /// [`ProjectionState::Failed`](crate::ProjectionState::Failed), no restart): give the id
    /// and the source the same range.
    #[error("projection {id} names slices {}-{} but its source reads slices {}-{}: give both the same range", id_range.0, id_range.1, source_range.0, source_range.1)]
    SliceRangeMismatch {
        /// The projection instance.
        id: ProjectionId,
        /// The id's slice range, inclusive.
        id_range: (u16, u16),
        /// The source's slice range, inclusive.
        source_range: (u16, u16),
    },
    /// The projection id cannot be stored by every offset store
    /// ([`ProjectionId::problem`]): a name or key that is empty, longer than its limit (name
    /// 255 bytes, key 512), or holding a NUL character. The instance does not start (state
    /// [`ProjectionState::Failed`](crate::ProjectionState::Failed), no restart).
    #[error("projection {id:?} cannot be stored: {reason}")]
    InvalidId {
        /// The projection instance.
        id: ProjectionId,
        /// What is wrong with it.
        reason: String,
    },
    /// The projection id's key starts with `"slices-"` but is not the key
    /// [`ProjectionId::for_slices`] makes (`"slices-<min>-<max>"`, decimal without leading
    /// zeros, `min <= max <= 1023`): run as an instance of no range, it would not take over
    /// or hand over the progress of the ranges it overlaps, and another spelling of the same
    /// range would keep an offset of its own. The instance does not start (state
    /// [`ProjectionState::Failed`](crate::ProjectionState::Failed), no restart).
    #[error("projection {id}: its key is not a slice range key \"slices-<min>-<max>\" (decimal, no leading zeros, min <= max <= 1023); make the id with ProjectionId::for_slices")]
    MalformedSliceKey {
        /// The projection instance.
        id: ProjectionId,
    },
    /// The source could not be opened or its stream failed.
    #[error("source of projection {id} failed: {source}")]
    Source {
        /// The projection instance.
        id: ProjectionId,
        /// The source's error.
        #[source]
        source: BoxError,
    },
    /// The handler failed on an envelope after every retry, and the recovery strategy ends in
    /// [`AfterRetries::Fail`](crate::AfterRetries::Fail).
    #[error("handler of projection {id} failed on persistence id {persistence_id:?} seq_nr {seq_nr} after {attempts} attempts: {message}")]
    Handler {
        /// The projection instance.
        id: ProjectionId,
        /// The persistence id of the (first) envelope that failed.
        persistence_id: String,
        /// Its sequence number.
        seq_nr: u64,
        /// Attempts made (1 + retries).
        attempts: u32,
        /// The handler's error, or the panic message.
        message: String,
    },
}

impl From<OffsetStoreError> for ProjectionError {
    fn from(error: OffsetStoreError) -> Self {
        match error {
            OffsetStoreError::Fenced { id, epoch } => ProjectionError::Fenced { id, epoch },
            other => ProjectionError::OffsetStore(other),
        }
    }
}
