//! The PostgreSQL snapshot store: [`PostgresSnapshotStore`].

use actix_persistence_core::{
    SelectedSnapshot, SerializedSnapshot, SnapshotError, SnapshotMetadata,
    SnapshotSelectionCriteria, SnapshotStore,
};
use async_trait::async_trait;
use sqlx::postgres::{PgPool, PgRow};
use sqlx::Row;

use crate::error::SqlStoreError;
use crate::postgres::{
    open_pool, serializer_id_from_sql, serializer_id_to_sql, PostgresJournalOptions,
};
use crate::snapshot_sql::{statements, Bounds};

/// A [`SnapshotStore`] in a PostgreSQL database: the `snapshot` table, next to the journal's.
///
/// Made by [`PostgresSnapshotStore::connect`], or by
/// [`PostgresJournal::snapshot_store`](crate::PostgresJournal::snapshot_store) to share a
/// journal's pool. Cheap to clone: clones share the pool.
///
/// # Guarantees
/// - **Durability**: a snapshot is durable once [`save`](SnapshotStore::save) returned `Ok`
///   (one upsert, its own transaction).
/// - **One per sequence number**: saving again at the same persistence id and sequence number
///   replaces the snapshot (payload, timestamp, serializer and manifest).
/// - **Load** returns the matching snapshot with the highest sequence number.
/// - Payloads up to PostgreSQL's `BYTEA` limit (1 GB) round-trip byte for byte; mind
///   `statement_timeout` for very large ones.
///
/// Sequence numbers are stored as `BIGINT`s and PostgreSQL text cannot hold NUL: saving above
/// `i64::MAX`, or with a NUL in the persistence id or the manifest, fails with
/// [`SqlStoreError::Unstorable`] (inside [`SnapshotError::Storage`]) and stores nothing;
/// criteria bounds above `i64::MAX` mean "no bound".
#[derive(Debug, Clone)]
pub struct PostgresSnapshotStore {
    pool: PgPool,
}

impl PostgresSnapshotStore {
    /// Connects as [`PostgresJournal::connect`] does, with the same options (only `url`,
    /// `max_connections`, `acquire_timeout` and `statement_timeout` matter here) and the same
    /// migrations, so journal and snapshots can live in one database.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> Result<(), actix_persistence_sql::SqlStoreError> {
    /// use actix_persistence_sql::{PostgresJournalOptions, PostgresSnapshotStore};
    ///
    /// let options = PostgresJournalOptions::new("postgres://app@db.internal/events");
    /// let snapshots = PostgresSnapshotStore::connect(&options).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`PostgresJournal::connect`]: [`SqlStoreError::InvalidOption`],
    /// [`SqlStoreError::Connect`] or [`SqlStoreError::Migrate`].
    ///
    /// [`PostgresJournal::connect`]: crate::PostgresJournal::connect
    pub async fn connect(options: &PostgresJournalOptions) -> Result<Self, SqlStoreError> {
        Ok(Self::from_pool(open_pool(options).await?))
    }

    pub(crate) fn from_pool(pool: PgPool) -> Self {
        PostgresSnapshotStore { pool }
    }

    /// Closes the pool, waiting for the connections in use to be returned. A pool shared with
    /// a journal is closed for the journal too.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Reads a snapshot row back.
fn decode_snapshot(row: &PgRow) -> Result<SelectedSnapshot, SnapshotError> {
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
    let serializer_id: i32 = row.try_get("serializer_id").map_err(column_error)?;
    Ok(SelectedSnapshot {
        metadata: SnapshotMetadata {
            seq_nr,
            timestamp: row.try_get("write_timestamp").map_err(column_error)?,
            persistence_id: persistence_id.clone(),
        },
        snapshot: SerializedSnapshot {
            payload: row.try_get("payload").map_err(column_error)?,
            serializer_id: serializer_id_from_sql(serializer_id),
            manifest: row.try_get("manifest").map_err(column_error)?,
        },
    })
}

#[async_trait]
impl SnapshotStore for PostgresSnapshotStore {
    /// One query, newest matching sequence number first.
    async fn load(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        let Some(bounds) = Bounds::of(&criteria) else {
            return Ok(None);
        };
        if pid.contains('\0') {
            return Ok(None);
        }
        let row = sqlx::query(statements::LOAD)
            .bind(pid)
            .bind(bounds.max_seq_nr)
            .bind(bounds.max_timestamp)
            .bind(bounds.min_seq_nr)
            .bind(bounds.min_timestamp)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| SnapshotError::storage("load", e))?;
        row.as_ref().map(decode_snapshot).transpose()
    }

    /// One upsert.
    ///
    /// # Errors
    /// [`SnapshotError::Storage`] when the database fails, or with [`SqlStoreError::Unstorable`]
    /// for a sequence number above `i64::MAX` or a NUL in the persistence id or the manifest.
    async fn save(
        &self,
        metadata: SnapshotMetadata,
        snapshot: SerializedSnapshot,
    ) -> Result<(), SnapshotError> {
        let unstorable = |reason: String| {
            SnapshotError::storage(
                "save",
                SqlStoreError::Unstorable {
                    persistence_id: metadata.persistence_id.clone(),
                    seq_nr: metadata.seq_nr,
                    reason,
                },
            )
        };
        let seq_nr = i64::try_from(metadata.seq_nr).map_err(|_| {
            unstorable(format!(
                "sequence numbers above {} do not fit a BIGINT",
                i64::MAX
            ))
        })?;
        if metadata.persistence_id.contains('\0') || snapshot.manifest.contains('\0') {
            return Err(unstorable(
                "the persistence id or the manifest holds a NUL character, which PostgreSQL \
                 text cannot store"
                    .to_owned(),
            ));
        }
        sqlx::query(statements::SAVE)
            .bind(&metadata.persistence_id)
            .bind(seq_nr)
            .bind(metadata.timestamp)
            .bind(serializer_id_to_sql(snapshot.serializer_id))
            .bind(&snapshot.manifest)
            .bind(&snapshot.payload)
            .execute(&self.pool)
            .await
            .map_err(|e| SnapshotError::storage("save", e))?;
        Ok(())
    }

    async fn delete(&self, metadata: &SnapshotMetadata) -> Result<(), SnapshotError> {
        let Ok(seq_nr) = i64::try_from(metadata.seq_nr) else {
            return Ok(());
        };
        if metadata.persistence_id.contains('\0') {
            return Ok(());
        }
        sqlx::query(statements::DELETE_ONE)
            .bind(&metadata.persistence_id)
            .bind(seq_nr)
            .bind(metadata.timestamp)
            .execute(&self.pool)
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
        if pid.contains('\0') {
            return Ok(());
        }
        sqlx::query(statements::DELETE_MATCHING)
            .bind(pid)
            .bind(bounds.max_seq_nr)
            .bind(bounds.max_timestamp)
            .bind(bounds.min_seq_nr)
            .bind(bounds.min_timestamp)
            .execute(&self.pool)
            .await
            .map_err(|e| SnapshotError::storage("delete", e))?;
        Ok(())
    }
}
