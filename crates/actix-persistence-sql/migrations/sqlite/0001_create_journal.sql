-- The event journal: one row per persisted event.
--
-- `ordering` is a global, gap-tolerant, ever-increasing position over all persistence ids
-- (AUTOINCREMENT never reuses a value, not even after deletes), for queries by tag and
-- projections. Persistence ids are TEXT compared with SQLite's default BINARY collation, so
-- they are byte-exact: ids that differ only by case are different ids.
CREATE TABLE IF NOT EXISTS journal (
    ordering        INTEGER PRIMARY KEY AUTOINCREMENT,
    persistence_id  TEXT    NOT NULL,
    seq_nr          INTEGER NOT NULL CHECK (seq_nr >= 1),
    writer_uuid     TEXT    NOT NULL,
    -- milliseconds since the Unix epoch
    write_timestamp INTEGER NOT NULL,
    serializer_id   INTEGER NOT NULL,
    manifest        TEXT    NOT NULL,
    payload         BLOB    NOT NULL,
    -- JSON array of strings
    tags            TEXT    NOT NULL,
    UNIQUE (persistence_id, seq_nr)
);

-- The highest sequence number ever stored per persistence id. Updated in the same transaction
-- as every write and never touched by deletes, so it survives them.
CREATE TABLE IF NOT EXISTS journal_highest (
    persistence_id TEXT    NOT NULL PRIMARY KEY,
    highest_seq_nr INTEGER NOT NULL
) WITHOUT ROWID;
