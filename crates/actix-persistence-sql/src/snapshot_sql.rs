//! What both SQL snapshot stores share: selection criteria as column bounds.

use actix_persistence_core::SnapshotSelectionCriteria;

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

    /// `$1` persistence id, `$2`..`$5` the bounds.
    pub(crate) const DELETE_MATCHING: &str = "DELETE FROM snapshot \
         WHERE persistence_id = $1 AND seq_nr <= $2 AND write_timestamp <= $3 \
           AND seq_nr >= $4 AND write_timestamp >= $5";
}
