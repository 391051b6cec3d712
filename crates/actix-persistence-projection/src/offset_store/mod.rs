//! Offset stores: where a projection keeps the offset it resumes from (as Akka Projections'
//! offset store).
//!
//! - [`InMemoryOffsetStore`]: in the process, for tests (lost with the process);
//! - [`SqliteOffsetStore`] (feature `sqlite`) and [`PostgresOffsetStore`] (feature `postgres`):
//!   the tables `projection_offset` and `projection_seen` in the journal's database, created by
//!   the SQL crate's migration `0005_create_projection_offset.sql`.
//!
//! Each row is keyed by a [`ProjectionId`] (projection name and key). The offset is the
//! source's offset as JSON. Exactly-once projections that handle several envelopes at once also
//! keep, per persistence id, the highest sequence number handled (`projection_seen`), written in
//! the handler's transaction: the stored offset may then lag behind handled envelopes, and a
//! restart skips exactly those.

use std::collections::HashMap;

use async_trait::async_trait;

use crate::error::OffsetStoreError;
use crate::ProjectionId;

mod inmem;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use inmem::{InMemoryOffsetStore, InMemoryTransaction};
#[cfg(feature = "postgres")]
pub use postgres::PostgresOffsetStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteOffsetStore;

/// The highest sequence number handled per persistence id (see the module docs).
pub type SeenSeqNrs = HashMap<String, u64>;

/// Reads and saves projection offsets. Offsets are JSON text (the projection serializes the
/// source's offset type with serde).
#[async_trait]
pub trait OffsetStore: Send + Sync + 'static {
    /// The stored offset of `id`, `None` when it never saved one (or was reset).
    ///
    /// # Errors
    /// [`OffsetStoreError`] when the store cannot be read.
    async fn read_offset(&self, id: &ProjectionId) -> Result<Option<String>, OffsetStoreError>;

    /// The highest sequence number handled per persistence id, as saved by
    /// [`TransactionalOffsetStore::save_in`] (empty for at-least-once projections).
    ///
    /// # Errors
    /// [`OffsetStoreError`] when the store cannot be read.
    async fn read_seen(&self, id: &ProjectionId) -> Result<SeenSeqNrs, OffsetStoreError>;

    /// Saves `offset` as the offset of `id`, replacing the previous one.
    ///
    /// # Errors
    /// [`OffsetStoreError`] when the store cannot be written.
    async fn save_offset(&self, id: &ProjectionId, offset: &str) -> Result<(), OffsetStoreError>;

    /// Deletes everything stored for `id` (offset and seen sequence numbers): the projection
    /// starts again from the beginning of its source, to rebuild a read model.
    ///
    /// # Errors
    /// [`OffsetStoreError`] when the store cannot be written.
    async fn reset(&self, id: &ProjectionId) -> Result<(), OffsetStoreError>;
}

/// An offset store whose writes can join the handler's transaction: what exactly-once delivery
/// needs (as Akka Projections' `exactlyOnce` with a JDBC or R2DBC session).
///
/// The projection begins a transaction, hands it to the handler, saves the offset (and the
/// seen sequence numbers) in it with [`save_in`](Self::save_in) and commits: the handler's
/// writes and the offset are stored together or not at all.
#[async_trait]
pub trait TransactionalOffsetStore: OffsetStore {
    /// The transaction handed to the handler, e.g. `sqlx::Transaction<'static, Postgres>`.
    type Transaction: Send + 'static;

    /// Begins a transaction.
    ///
    /// # Errors
    /// [`OffsetStoreError`] when no transaction can be started.
    async fn begin(&self, id: &ProjectionId) -> Result<Self::Transaction, OffsetStoreError>;

    /// Within `tx`: saves `offset` (when given) as the offset of `id`, and raises the seen
    /// sequence number of each `(persistence id, seq_nr)` in `seen` (never lowers it).
    ///
    /// # Errors
    /// [`OffsetStoreError`] when the writes fail (the transaction is then rolled back).
    async fn save_in(
        &self,
        tx: &mut Self::Transaction,
        id: &ProjectionId,
        offset: Option<&str>,
        seen: &[(String, u64)],
    ) -> Result<(), OffsetStoreError>;

    /// Commits `tx`.
    ///
    /// # Errors
    /// [`OffsetStoreError`] when the commit fails: nothing of the transaction is stored.
    async fn commit(
        &self,
        tx: Self::Transaction,
        id: &ProjectionId,
    ) -> Result<(), OffsetStoreError>;
}

/// Milliseconds since the Unix epoch, for `last_updated`.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A sequence number as SQL's BIGINT.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn sql_seq_nr(persistence_id: &str, seq_nr: u64) -> Result<i64, OffsetStoreError> {
    i64::try_from(seq_nr).map_err(|_| OffsetStoreError::SeqNrOutOfRange {
        persistence_id: persistence_id.to_owned(),
        seq_nr,
    })
}
