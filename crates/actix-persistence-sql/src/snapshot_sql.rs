//! What both SQL snapshot stores share: selection criteria as column bounds, the statements,
//! and the operations on the `snapshot` table ([`SnapshotTable`]), generic over the
//! [`Dialect`].

use actix_persistence_core::{
    limits, SelectedSnapshot, SerializedSnapshot, SnapshotError, SnapshotMetadata,
    SnapshotSelectionCriteria,
};
use sqlx::query::Query;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Type};

use crate::error::SqlStoreError;
use crate::journal_common::Dialect;

/// [`SnapshotSelectionCriteria`] as bounds on the `BIGINT`/`INTEGER` columns: a sequence
/// number bound above `i64::MAX` (no stored sequence number is) is clamped to it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub(crate) max_seq_nr: i64,
    pub(crate) max_timestamp: i64,
    pub(crate) min_seq_nr: i64,
    pub(crate) min_timestamp: i64,
}

impl Bounds {
    /// The bounds of `criteria`, or `None` when no storable snapshot can match (its minimum
    /// sequence number is above `i64::MAX`).
    pub(crate) fn of(criteria: &SnapshotSelectionCriteria) -> Option<Bounds> {
        Some(Bounds {
            max_seq_nr: i64::try_from(criteria.max_seq_nr).unwrap_or(i64::MAX),
            max_timestamp: criteria.max_timestamp,
            min_seq_nr: i64::try_from(criteria.min_seq_nr).ok()?,
            min_timestamp: criteria.min_timestamp,
        })
    }
}

/// Which SQL statement a snapshot operation runs, for both databases: `$n` placeholders (SQLite
/// reads them as well as PostgreSQL does).
pub(crate) mod statements {
    /// `$1` persistence id, `$2`..`$5` the bounds; newest first.
    pub(crate) const LOAD: &str = "SELECT persistence_id, seq_nr, write_timestamp, serializer_id, \
                manifest, payload \
         FROM snapshot \
         WHERE persistence_id = $1 AND seq_nr <= $2 AND write_timestamp <= $3 \
           AND seq_nr >= $4 AND write_timestamp >= $5 \
         ORDER BY seq_nr DESC \
         LIMIT 1";

    /// `$1`..`$6`: persistence id, seq_nr, timestamp, serializer id, manifest, payload.
    pub(crate) const SAVE: &str = "INSERT INTO snapshot \
             (persistence_id, seq_nr, write_timestamp, serializer_id, manifest, payload) \
         VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (persistence_id, seq_nr) DO UPDATE SET \
             write_timestamp = excluded.write_timestamp, \
             serializer_id = excluded.serializer_id, \
             manifest = excluded.manifest, \
             payload = excluded.payload";

    /// `$1` persistence id, `$2` seq_nr, `$3` timestamp (0 matches any).
    pub(crate) const DELETE_ONE: &str = "DELETE FROM snapshot \
         WHERE persistence_id = $1 AND seq_nr = $2 AND ($3 = 0 OR write_timestamp = $3)";

    /// `$1` persistence id, `$2`..`$5` the bounds, `$6` the limit; newest first, no payload.
    pub(crate) const METADATA: &str = "SELECT persistence_id, seq_nr, write_timestamp \
         FROM snapshot \
         WHERE persistence_id = $1 AND seq_nr <= $2 AND write_timestamp <= $3 \
           AND seq_nr >= $4 AND write_timestamp >= $5 \
         ORDER BY seq_nr DESC \
         LIMIT $6";

    /// `$1` persistence id, `$2`..`$5` the bounds.
    pub(crate) const DELETE_MATCHING: &str = "DELETE FROM snapshot \
         WHERE persistence_id = $1 AND seq_nr <= $2 AND write_timestamp <= $3 \
           AND seq_nr >= $4 AND write_timestamp >= $5";
}

/// The snapshot table of one database: loads through `readers`, saves and deletes through
/// `writer` (on PostgreSQL both are the one pool). Each operation is one statement.
pub(crate) struct SnapshotTable<'a, D: Dialect> {
    pub(crate) readers: &'a Pool<D::Db>,
    pub(crate) writer: &'a Pool<D::Db>,
}

impl<D: Dialect> SnapshotTable<'_, D>
where
    for<'q> <D::Db as Database>::Arguments<'q>: IntoArguments<'q, D::Db>,
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'q> &'q str: Encode<'q, D::Db> + Type<D::Db> + ColumnIndex<<D::Db as Database>::Row>,
    for<'q> &'q [u8]: Encode<'q, D::Db> + Type<D::Db>,
    for<'q> i64: Encode<'q, D::Db> + Decode<'q, D::Db> + Type<D::Db>,
    for<'r> String: Decode<'r, D::Db> + Type<D::Db>,
    for<'r> Vec<u8>: Decode<'r, D::Db> + Type<D::Db>,
{
    /// The matching snapshot with the highest sequence number, if any.
    pub(crate) async fn load(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        let Some(bounds) = Bounds::of(&criteria) else {
            return Ok(None);
        };
        if !D::stores_text(pid) {
            return Ok(None);
        }
        let row = Self::matching(statements::LOAD, pid, bounds)
            .fetch_optional(self.readers)
            .await
            .map_err(|e| SnapshotError::storage("load", e))?;
        row.as_ref().map(Self::decode).transpose()
    }

    /// The metadata of the newest `limit` matching snapshots, newest first: one query that
    /// reads no payload.
    pub(crate) async fn read_metadata(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
        limit: u32,
    ) -> Result<Vec<SnapshotMetadata>, SnapshotError> {
        let Some(bounds) = Bounds::of(&criteria) else {
            return Ok(Vec::new());
        };
        if !D::stores_text(pid) || limit == 0 {
            return Ok(Vec::new());
        }
        let rows = Self::matching(statements::METADATA, pid, bounds)
            .bind(i64::from(limit))
            .fetch_all(self.readers)
            .await
            .map_err(|e| SnapshotError::storage("read metadata", e))?;
        rows.iter()
            .map(|row| Self::decode_metadata(row, "read metadata"))
            .collect()
    }

    /// `sql` (a statement taking the persistence id and the bounds) bound to `pid` and
    /// `bounds`.
    fn matching<'q>(
        sql: &'q str,
        pid: &'q str,
        bounds: Bounds,
    ) -> Query<'q, D::Db, <D::Db as Database>::Arguments<'q>> {
        sqlx::query(sql)
            .bind(pid)
            .bind(bounds.max_seq_nr)
            .bind(bounds.max_timestamp)
            .bind(bounds.min_seq_nr)
            .bind(bounds.min_timestamp)
    }

    /// Reads a snapshot row's metadata back (`operation` names the call in errors).
    fn decode_metadata(
        row: &<D::Db as Database>::Row,
        operation: &'static str,
    ) -> Result<SnapshotMetadata, SnapshotError> {
        let column_error = |e| SnapshotError::storage(operation, e);
        let persistence_id: String = row.try_get("persistence_id").map_err(column_error)?;
        let stored_seq_nr: i64 = row.try_get("seq_nr").map_err(column_error)?;
        let Ok(seq_nr) = u64::try_from(stored_seq_nr) else {
            return Err(Self::corrupt(
                operation,
                persistence_id,
                stored_seq_nr,
                "negative snapshot sequence number".to_owned(),
            ));
        };
        Ok(SnapshotMetadata {
            persistence_id,
            seq_nr,
            timestamp: row.try_get("write_timestamp").map_err(column_error)?,
        })
    }

    /// A row `operation` read that this crate never writes.
    fn corrupt(
        operation: &'static str,
        persistence_id: String,
        seq_nr: i64,
        reason: String,
    ) -> SnapshotError {
        SnapshotError::storage(
            operation,
            SqlStoreError::CorruptRow {
                persistence_id,
                seq_nr,
                reason,
            },
        )
    }

    /// Reads a snapshot row back.
    fn decode(row: &<D::Db as Database>::Row) -> Result<SelectedSnapshot, SnapshotError> {
        let column_error = |e| SnapshotError::storage("load", e);
        let metadata = Self::decode_metadata(row, "load")?;
        let serializer_id: D::SerializerId = row.try_get("serializer_id").map_err(column_error)?;
        let Some(serializer_id) = D::serializer_id_from_sql(serializer_id) else {
            return Err(Self::corrupt(
                "load",
                metadata.persistence_id,
                // Within `i64::MAX`: read from the row.
                i64::try_from(metadata.seq_nr).unwrap_or(i64::MAX),
                format!("snapshot serializer id {serializer_id} is not a u32"),
            ));
        };
        Ok(SelectedSnapshot {
            metadata,
            snapshot: SerializedSnapshot {
                payload: row.try_get("payload").map_err(column_error)?,
                serializer_id,
                manifest: row.try_get("manifest").map_err(column_error)?,
            },
        })
    }

    /// Saves (or replaces) the snapshot with one upsert.
    ///
    /// # Errors
    /// [`SnapshotError::Storage`] when the database fails, or with [`SqlStoreError::Unstorable`]
    /// for a sequence number above `i64::MAX`, a NUL in the persistence id or the manifest (on
    /// SQLite too, which could store it: every store refuses it alike) or a payload over
    /// [`MAX_SNAPSHOT_BYTES`](limits::MAX_SNAPSHOT_BYTES).
    pub(crate) async fn save(
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
        // Refused on every database alike (SQLite would store a NUL, for one): a snapshot
        // gets the same answer from every store.
        if let Some(reason) = limits::snapshot_problem(&metadata, &snapshot) {
            return Err(unstorable(reason));
        }
        // Within `i64::MAX`: checked above.
        let seq_nr = i64::try_from(metadata.seq_nr).unwrap_or(i64::MAX);
        sqlx::query::<D::Db>(statements::SAVE)
            .bind(metadata.persistence_id.as_str())
            .bind(seq_nr)
            .bind(metadata.timestamp)
            .bind(D::serializer_id_to_sql(snapshot.serializer_id))
            .bind(snapshot.manifest.as_str())
            .bind(snapshot.payload.as_slice())
            .execute(self.writer)
            .await
            .map_err(|e| SnapshotError::storage("save", e))?;
        Ok(())
    }

    /// Deletes the snapshot `metadata` names (at any timestamp when its timestamp is 0).
    pub(crate) async fn delete(&self, metadata: &SnapshotMetadata) -> Result<(), SnapshotError> {
        let Ok(seq_nr) = i64::try_from(metadata.seq_nr) else {
            return Ok(());
        };
        if !D::stores_text(&metadata.persistence_id) {
            return Ok(());
        }
        sqlx::query::<D::Db>(statements::DELETE_ONE)
            .bind(metadata.persistence_id.as_str())
            .bind(seq_nr)
            .bind(metadata.timestamp)
            .execute(self.writer)
            .await
            .map_err(|e| SnapshotError::storage("delete", e))?;
        Ok(())
    }

    /// Deletes every snapshot of `pid` that `criteria` matches.
    pub(crate) async fn delete_matching(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError> {
        let Some(bounds) = Bounds::of(&criteria) else {
            return Ok(());
        };
        if !D::stores_text(pid) {
            return Ok(());
        }
        Self::matching(statements::DELETE_MATCHING, pid, bounds)
            .execute(self.writer)
            .await
            .map_err(|e| SnapshotError::storage("delete", e))?;
        Ok(())
    }
}
