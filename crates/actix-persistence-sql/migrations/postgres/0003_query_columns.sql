-- Queries by slice and by tag (persistence queries, issue 8).
--
-- `db_timestamp`: microseconds since the Unix epoch on the database clock, taken by the insert
-- statement (statement_timestamp(), before its transaction commits) and never below the
-- previous event of the same persistence id. Not in commit order across transactions: queries
-- by slice and by tag read in (db_timestamp, persistence_id, seq_nr) order and wait for late
-- commits within `query.late-commit-window` (docs/architecture.md, "Queries").
-- `slice`: the slice of the persistence id (Java String.hashCode mod 1024, computed by the
-- store), `entity_type`: the part of the id before '|' ('' without one).
ALTER TABLE journal ADD COLUMN IF NOT EXISTS db_timestamp BIGINT NOT NULL DEFAULT 0;
-- -1: not computed yet (a row written before this migration); the store fills it on connect.
ALTER TABLE journal ADD COLUMN IF NOT EXISTS slice INTEGER NOT NULL DEFAULT -1;
ALTER TABLE journal ADD COLUMN IF NOT EXISTS entity_type TEXT NOT NULL DEFAULT '';

-- Rows written before: their write time, never below an earlier event of the same id.
UPDATE journal SET db_timestamp = t.ts
FROM (
    SELECT persistence_id, seq_nr,
           max(write_timestamp) OVER (PARTITION BY persistence_id ORDER BY seq_nr) * 1000 AS ts
    FROM journal
) AS t
WHERE journal.persistence_id = t.persistence_id AND journal.seq_nr = t.seq_nr
  AND journal.db_timestamp = 0;

-- Persistence ids in byte order (COLLATE "C"), as the queries compare them.
CREATE INDEX IF NOT EXISTS journal_by_timestamp
    ON journal (db_timestamp, persistence_id COLLATE "C", seq_nr);
-- Finds the rows whose slice is still to be computed; empty once it is.
CREATE INDEX IF NOT EXISTS journal_without_slice ON journal (persistence_id) WHERE slice < 0;
