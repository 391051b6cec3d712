//! The SQLite snapshot store: [`SqliteSnapshotStore`].

use actix_persistence_core::{
    SelectedSnapshot, SerializedSnapshot, SnapshotError, SnapshotMetadata,
    SnapshotSelectionCriteria, SnapshotStore,
};
use async_trait::async_trait;

use crate::error::SqlStoreError;
use crate::snapshot_sql::SnapshotTable;
use crate::sqlite::{SqliteDialect, SqliteJournalOptions, SqlitePools};

/// A [`SnapshotStore`] in a SQLite database file: the `snapshot` table, next to the journal's.
///
/// Saves and deletes go through one writer connection (SQLite has one writer at a time), loads
/// through a pool of readers. Made by [`SqliteSnapshotStore::connect`], or by
/// [`SqliteJournal::snapshot_store`](crate::SqliteJournal::snapshot_store) to share a journal's
/// connections. Cheap to clone: clones share the pools.
///
/// # Guarantees
/// - **Durability**: a snapshot is durable once [`save`](SnapshotStore::save) returned `Ok`
///   (its own transaction, `synchronous = FULL`).
/// - **One per sequence number**: saving again at the same persistence id and sequence number
///   replaces the snapshot (payload, timestamp, serializer and manifest).
/// - **Load** returns the matching snapshot with the highest sequence number.
/// - Payloads of any size SQLite accepts (up to 1 GB by default) round-trip byte for byte.
///
/// Sequence numbers are stored as SQLite `INTEGER`s: saving above `i64::MAX` fails with
/// [`SqlStoreError::Unstorable`] (inside [`SnapshotError::Storage`]); criteria bounds above it
/// mean "no bound". A NUL in the persistence id or the manifest, which SQLite could store, is
/// refused the same way, as PostgreSQL and the in-memory store refuse it: a snapshot gets the
/// same answer from every store.
#[derive(Debug, Clone)]
pub struct SqliteSnapshotStore {
    pools: SqlitePools,
}

impl SqliteSnapshotStore {
    /// Opens (and creates when missing) the database as [`SqliteJournal::connect`] does, with
    /// the same options (only `url`, `max_connections` and `busy_timeout` matter here) and the
    /// same migrations, so journal and snapshots can live in one file.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> Result<(), actix_persistence_sql::SqlStoreError> {
    /// # use actix_persistence_sql as actix_persistence; // the paths of the facade, `actix-persistence`
    /// use actix_persistence::{SqliteJournalOptions, SqliteSnapshotStore};
    ///
    /// let snapshots =
    ///     SqliteSnapshotStore::connect(&SqliteJournalOptions::new("sqlite:journal.db")).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`SqliteJournal::connect`]: [`SqlStoreError::InvalidOption`],
    /// [`SqlStoreError::Connect`], [`SqlStoreError::Migrate`] or [`SqlStoreError::ForeignTable`].
    ///
    /// [`SqliteJournal::connect`]: crate::SqliteJournal::connect
    pub async fn connect(options: &SqliteJournalOptions) -> Result<Self, SqlStoreError> {
        Ok(Self::from_pools(SqlitePools::open(options).await?))
    }

    pub(crate) fn from_pools(pools: SqlitePools) -> Self {
        SqliteSnapshotStore { pools }
    }

    /// Closes the pools, waiting for the connections in use to be returned. Pools shared with a
    /// journal are closed for the journal too.
    pub async fn close(&self) {
        self.pools.close().await;
    }

    /// The snapshot table: loads through the reader pool, saves and deletes through the writer.
    fn table(&self) -> SnapshotTable<'_, SqliteDialect> {
        SnapshotTable {
            readers: &self.pools.readers,
            writer: &self.pools.writer,
        }
    }
}

#[async_trait]
impl SnapshotStore for SqliteSnapshotStore {
    /// One query on the reader pool, newest matching sequence number first.
    async fn load(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        self.table().load(pid, criteria).await
    }

    /// One upsert on the writer connection.
    ///
    /// # Errors
    /// [`SnapshotError::Storage`] when the database fails, or with [`SqlStoreError::Unstorable`]
    /// for a sequence number above `i64::MAX` or a NUL in the persistence id or the manifest.
    async fn save(
        &self,
        metadata: SnapshotMetadata,
        snapshot: SerializedSnapshot,
    ) -> Result<(), SnapshotError> {
        self.table().save(metadata, snapshot).await
    }

    async fn delete(&self, metadata: &SnapshotMetadata) -> Result<(), SnapshotError> {
        self.table().delete(metadata).await
    }

    async fn delete_matching(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError> {
        self.table().delete_matching(pid, criteria).await
    }

    /// One query on the reader pool that reads no payload.
    async fn read_metadata(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
        limit: u32,
    ) -> Result<Vec<SnapshotMetadata>, SnapshotError> {
        self.table().read_metadata(pid, criteria, limit).await
    }
}
