//! The SQLite snapshot store: [`SqliteSnapshotStore`].

use actix_persistence_core::{
    SelectedSnapshot, SerializedSnapshot, SnapshotError, SnapshotMetadata,
    SnapshotSelectionCriteria, SnapshotStore,
};
use async_trait::async_trait;
use sqlx::sqlite::SqliteRow;
use sqlx::Row;

use crate::error::SqlStoreError;
use crate::snapshot_sql::{statements, Bounds};
use crate::sqlite::{SqliteJournalOptions, SqlitePools};

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
/// mean "no bound".
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
    /// use actix_persistence_sql::{SqliteJournalOptions, SqliteSnapshotStore};
    ///
    /// let snapshots =
    ///     SqliteSnapshotStore::connect(&SqliteJournalOptions::new("sqlite:journal.db")).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`SqliteJournal::connect`]: [`SqlStoreError::InvalidOption`],
    /// [`SqlStoreError::Connect`] or [`SqlStoreError::Migrate`].
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
}

/// Reads a snapshot row back.
fn decode_snapshot(row: &SqliteRow) -> Result<SelectedSnapshot, SnapshotError> {
    let column_error = |e| SnapshotError::storage("load", e);
    let persistence_id: String = row.try_get("persistence_id").map_err(column_error)?;
    let stored_seq_nr: i64 = row.try_get("seq_nr").map_err(column_error)?;
    let corrupt = |reason: String| {
        SnapshotError::storage(
            "load",
            SqlStoreError::CorruptRow {
                persistence_id: persistence_id.clone(),
                seq_nr: stored_seq_nr,
                reason,
            },
        )
    };
    let seq_nr = u64::try_from(stored_seq_nr)
        .map_err(|_| corrupt("negative snapshot sequence number".to_owned()))?;
    let serializer_id: i64 = row.try_get("serializer_id").map_err(column_error)?;
    let serializer_id = u32::try_from(serializer_id).map_err(|_| {
        corrupt(format!(
            "snapshot serializer id {serializer_id} is not a u32"
        ))
    })?;
    Ok(SelectedSnapshot {
        metadata: SnapshotMetadata {
            seq_nr,
            timestamp: row.try_get("write_timestamp").map_err(column_error)?,
            persistence_id: persistence_id.clone(),
        },
        snapshot: SerializedSnapshot {
            payload: row.try_get("payload").map_err(column_error)?,
            serializer_id,
            manifest: row.try_get("manifest").map_err(column_error)?,
        },
    })
}

#[async_trait]
impl SnapshotStore for SqliteSnapshotStore {
    /// One query on the reader pool, newest matching sequence number first.
    async fn load(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        let Some(bounds) = Bounds::of(&criteria) else {
            return Ok(None);
        };
        let row = sqlx::query(statements::LOAD)
            .bind(pid)
            .bind(bounds.max_seq_nr)
            .bind(bounds.max_timestamp)
            .bind(bounds.min_seq_nr)
            .bind(bounds.min_timestamp)
            .fetch_optional(&self.pools.readers)
            .await
            .map_err(|e| SnapshotError::storage("load", e))?;
        row.as_ref().map(decode_snapshot).transpose()
    }

    /// One upsert on the writer connection.
    ///
    /// # Errors
    /// [`SnapshotError::Storage`] when the database fails, or with [`SqlStoreError::Unstorable`]
    /// for a sequence number above `i64::MAX`.
    async fn save(
        &self,
        metadata: SnapshotMetadata,
        snapshot: SerializedSnapshot,
    ) -> Result<(), SnapshotError> {
        let seq_nr = i64::try_from(metadata.seq_nr).map_err(|_| {
            SnapshotError::storage(
                "save",
                SqlStoreError::Unstorable {
                    persistence_id: metadata.persistence_id.clone(),
                    seq_nr: metadata.seq_nr,
                    reason: format!("sequence numbers above {} do not fit SQLite", i64::MAX),
                },
            )
        })?;
        sqlx::query(statements::SAVE)
            .bind(&metadata.persistence_id)
            .bind(seq_nr)
            .bind(metadata.timestamp)
            .bind(i64::from(snapshot.serializer_id))
            .bind(&snapshot.manifest)
            .bind(&snapshot.payload)
            .execute(&self.pools.writer)
            .await
            .map_err(|e| SnapshotError::storage("save", e))?;
        Ok(())
    }

    async fn delete(&self, metadata: &SnapshotMetadata) -> Result<(), SnapshotError> {
        let Ok(seq_nr) = i64::try_from(metadata.seq_nr) else {
            return Ok(());
        };
        sqlx::query(statements::DELETE_ONE)
            .bind(&metadata.persistence_id)
            .bind(seq_nr)
            .bind(metadata.timestamp)
            .execute(&self.pools.writer)
            .await
            .map_err(|e| SnapshotError::storage("delete", e))?;
        Ok(())
    }

    async fn delete_matching(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError> {
        let Some(bounds) = Bounds::of(&criteria) else {
            return Ok(());
        };
        sqlx::query(statements::DELETE_MATCHING)
            .bind(pid)
            .bind(bounds.max_seq_nr)
            .bind(bounds.max_timestamp)
            .bind(bounds.min_seq_nr)
            .bind(bounds.min_timestamp)
            .execute(&self.pools.writer)
            .await
            .map_err(|e| SnapshotError::storage("delete", e))?;
        Ok(())
    }
}
