-- Queries by slice and by tag (persistence queries, issue 8).
--
-- `db_timestamp`: microseconds since the Unix epoch, taken when the row is inserted (inside the
-- write transaction, never below the highest already stored, so SQLite's single writer gives
-- timestamps in commit order). Queries by slice and by tag read in
-- (db_timestamp, persistence_id, seq_nr) order and store it as their offset.
-- `slice`: the slice of the persistence id (Java String.hashCode mod 1024, computed by the
-- store), `entity_type`: the part of the id before '|' ('' without one).
ALTER TABLE journal ADD COLUMN db_timestamp INTEGER NOT NULL DEFAULT 0;
-- -1: not computed yet (a row written before this migration); the store fills it on connect.
ALTER TABLE journal ADD COLUMN slice INTEGER NOT NULL DEFAULT -1;
ALTER TABLE journal ADD COLUMN entity_type TEXT NOT NULL DEFAULT '';

-- Rows written before: their write time, never below an earlier event of the same id.
UPDATE journal SET db_timestamp = t.ts
FROM (
    SELECT ordering,
           max(write_timestamp) OVER (PARTITION BY persistence_id ORDER BY seq_nr) * 1000 AS ts
    FROM journal
) AS t
WHERE journal.ordering = t.ordering;

CREATE INDEX IF NOT EXISTS journal_by_timestamp ON journal (db_timestamp, persistence_id, seq_nr);
-- Finds the rows whose slice is still to be computed; empty once it is.
CREATE INDEX IF NOT EXISTS journal_without_slice ON journal (persistence_id) WHERE slice < 0;
