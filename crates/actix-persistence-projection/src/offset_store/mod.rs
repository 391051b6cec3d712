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
//! restart skips exactly those. A row is deleted by the offset save that covers its
//! persistence id's handled envelopes ([`OffsetStore::save_offset`]'s `covered`), so the table
//! holds rows only for ids with envelopes handled past the stored offset.
//!
//! # Fencing
//! Two instances of one projection id must not both write (a deploy overlap, a process thought
//! dead that still runs). Each instance takes ownership of its id when it starts
//! ([`OffsetStore::take_ownership`]): the store raises the id's owner epoch in one statement
//! (table `projection_owner`, migration 0008), as the journal raises a persistence id's epoch
//! on recovery. Every write of the instance carries its epoch: an exactly-once transaction
//! checks it under a lock held until its commit ([`TransactionalOffsetStore::save_in`]), an
//! at-least-once save in the same statement ([`OffsetStore::save_offset`]). A write with an
//! older epoch stores nothing and fails with [`OffsetStoreError::Fenced`]; the instance stops.
//! The newer instance reads the offset after its take, so it sees every commit of the older
//! one that got in before.

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
pub use postgres::{PostgresOffsetStore, OFFSET_STATEMENT_TIMEOUT};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteOffsetStore;

/// The highest sequence number handled per persistence id (see the module docs).
pub type SeenSeqNrs = HashMap<String, u64>;

/// What one instance of a projection stored (see [`OffsetStore::read_progress`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredProgress {
    /// The instance.
    pub id: ProjectionId,
    /// Its offset (JSON), `None` when it stored seen sequence numbers only.
    pub offset: Option<String>,
    /// Its seen sequence numbers (see [`OffsetStore::read_seen`]).
    pub seen: SeenSeqNrs,
}

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

    /// What every instance of the projection `name` stored (each key with an offset or seen
    /// sequence numbers, in no particular order): an instance over a slice range resumes from
    /// the progress of the instances that covered its slices before the ranges changed
    /// ([`SourceProvider::resume`](crate::SourceProvider::resume)).
    ///
    /// # Errors
    /// [`OffsetStoreError`] when the store cannot be read.
    async fn read_progress(&self, name: &str) -> Result<Vec<StoredProgress>, OffsetStoreError>;

    /// Every key of the projection `name` that an instance took ownership of
    /// ([`take_ownership`](Self::take_ownership)), in no particular order, whether it stored
    /// anything yet or not: an instance over a slice range fences the instances of the ranges
    /// that overlap its own, also one that has not committed anything yet (a deploy that
    /// changes the ranges while the old instances still run would otherwise have both handle
    /// the same events).
    ///
    /// # Errors
    /// [`OffsetStoreError`] when the store cannot be read.
    async fn read_owners(&self, name: &str) -> Result<Vec<ProjectionId>, OffsetStoreError>;

    /// Takes ownership of `id` for an instance and returns its owner epoch (from 1), which the
    /// instance passes to every write (see the module docs on fencing).
    ///
    /// `held` is `None` when an instance starts: the epoch is raised whoever held it, fencing
    /// every older instance. An instance restarting after a failure passes the epoch it holds:
    /// the epoch is raised only if it is still the stored one (which fences that instance's own
    /// transactions still in flight), else the instance was taken over.
    ///
    /// # Errors
    /// [`OffsetStoreError::Fenced`] when `held` is not the stored epoch;
    /// [`OffsetStoreError`] when the store cannot be written.
    async fn take_ownership(
        &self,
        id: &ProjectionId,
        held: Option<u64>,
    ) -> Result<u64, OffsetStoreError>;

    /// Saves `offset` as the offset of `id`, replacing the previous one, if `epoch` is still
    /// the owner epoch of `id` (in the same statement), and forgets, in the same transaction,
    /// the seen sequence numbers that `offset` now covers.
    ///
    /// `covered` holds, per persistence id, the highest sequence number among the envelopes
    /// at or before `offset` that were not covered by the previously saved offset (empty for
    /// at-least-once projections). The seen row of each such persistence id is deleted when
    /// its stored sequence number is at most the covered one: the source, resumed after
    /// `offset`, never delivers those envelopes again, so nothing needs to skip them. A row
    /// whose sequence number is higher (an envelope of that id handled after `offset`) stays.
    /// A store may leave a row it cannot delete without waiting (PostgreSQL skips rows that a
    /// handler's transaction in flight holds locked, which is about to raise them): a later
    /// save forgets it (see `docs/projections.md`, "Bounded seen rows").
    ///
    /// # Errors
    /// [`OffsetStoreError::Fenced`] (nothing saved, nothing forgotten) when another instance
    /// took ownership; [`OffsetStoreError::SeqNrOutOfRange`] when a covered sequence number
    /// does not fit SQL's BIGINT; [`OffsetStoreError`] when the store cannot be written
    /// (nothing saved).
    async fn save_offset(
        &self,
        id: &ProjectionId,
        epoch: u64,
        offset: &str,
        covered: &[(String, u64)],
    ) -> Result<(), OffsetStoreError>;

    /// Deletes everything stored for `id` (offset and seen sequence numbers, not its owner
    /// epoch). Not fenced (an operator's call); a running projection's
    /// [`reset`](crate::ProjectionHandle::reset) checks its ownership first, and also deletes
    /// what other keys of the same name stored for the slices of `id` (earlier slice ranges,
    /// after [`hand_over`](Self::hand_over) kept their progress for the slices outside `id`'s),
    /// so that the projection starts again from the beginning of its source, to rebuild a read
    /// model.
    ///
    /// # Errors
    /// [`OffsetStoreError`] when the store cannot be written.
    async fn reset(&self, id: &ProjectionId) -> Result<(), OffsetStoreError>;

    /// Hands the progress of `from` over to `to` (another key of the same name) when `to`'s
    /// stored offset is still `to_offset` (`None`: `to` has none): `from`'s offset replaces
    /// it, and `from`'s seen sequence numbers are merged into `to`'s (each kept at the higher
    /// of the two), in one transaction. Nothing changes when `to`'s offset is another one (its
    /// instance saved meanwhile) or `from` has none. Not fenced, and fences nobody: a running
    /// instance of `to` saves over it.
    ///
    /// A running projection's [`reset`](crate::ProjectionHandle::reset) uses it before it
    /// deletes an old slice range's key that also covers slices outside the reset range: the
    /// instances over those slices keep resuming from the old key's progress (the pieces of its
    /// range outside the reset one get it under their own keys: a piece without an offset of
    /// its own, or one whose own offset is behind the old key's, as the source compares them,
    /// [`SourceProvider::compare_offsets`](crate::SourceProvider::compare_offsets)). The default
    /// does nothing: with a store that keeps the default, such an instance handles its slices
    /// again from its own offset, or from the beginning, after the reset.
    ///
    /// # Errors
    /// [`OffsetStoreError`] when the store cannot be read or written (nothing changed).
    async fn hand_over(
        &self,
        from: &ProjectionId,
        to: &ProjectionId,
        to_offset: Option<&str>,
    ) -> Result<(), OffsetStoreError> {
        let _ = (from, to, to_offset);
        Ok(())
    }
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

    /// Within `tx`: checks that `epoch` is still the owner epoch of `id`, under a lock held
    /// until `tx` ends (an instance taking ownership meanwhile waits for the commit), then saves
    /// `offset` (when given) as the offset of `id`, and raises the seen sequence number of each
    /// `(persistence id, seq_nr)` in `seen` (never lowers it).
    ///
    /// # Errors
    /// [`OffsetStoreError::Fenced`] when another instance took ownership (the caller rolls
    /// `tx` back: the handler's writes are not stored); [`OffsetStoreError`] when the writes
    /// fail (the transaction is then rolled back).
    async fn save_in(
        &self,
        tx: &mut Self::Transaction,
        id: &ProjectionId,
        epoch: u64,
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

    /// Rolls `tx` back and waits until the database did, so its connection goes back to the
    /// pool with no transaction open. The projection calls it when a handler failed or its
    /// call was cancelled (the projection stopped or was aborted).
    ///
    /// # Errors
    /// [`OffsetStoreError`] when the rollback fails (the connection is then left to the pool's
    /// own checks).
    async fn rollback(
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

/// The rows of `projection_offset` (key, offset) and `projection_seen` (key, persistence id,
/// seq_nr) of the projection `name`, gathered per key.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn progress_by_key(
    name: &str,
    offsets: Vec<(String, String)>,
    seen: Vec<(String, String, i64)>,
) -> Vec<StoredProgress> {
    let mut by_key: std::collections::BTreeMap<String, StoredProgress> =
        std::collections::BTreeMap::new();
    fn entry<'a>(
        by_key: &'a mut std::collections::BTreeMap<String, StoredProgress>,
        name: &str,
        key: String,
    ) -> &'a mut StoredProgress {
        by_key.entry(key.clone()).or_insert_with(|| StoredProgress {
            id: ProjectionId::new(name, key),
            offset: None,
            seen: SeenSeqNrs::new(),
        })
    }
    for (key, offset) in offsets {
        entry(&mut by_key, name, key).offset = Some(offset);
    }
    for (key, pid, seq_nr) in seen {
        entry(&mut by_key, name, key)
            .seen
            .insert(pid, u64::try_from(seq_nr).unwrap_or(0));
    }
    by_key.into_values().collect()
}
