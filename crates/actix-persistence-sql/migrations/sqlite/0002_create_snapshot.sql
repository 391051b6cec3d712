-- Snapshots: at most one per persistence id and sequence number (a second save replaces it).
--
-- A plain rowid table (not WITHOUT ROWID): snapshots can be large, and SQLite keeps large rows
-- best in a rowid table with overflow pages.
CREATE TABLE IF NOT EXISTS snapshot (
    persistence_id  TEXT    NOT NULL,
    seq_nr          INTEGER NOT NULL CHECK (seq_nr >= 0),
    -- milliseconds since the Unix epoch
    write_timestamp INTEGER NOT NULL,
    serializer_id   INTEGER NOT NULL,
    manifest        TEXT    NOT NULL,
    payload         BLOB    NOT NULL,
    PRIMARY KEY (persistence_id, seq_nr)
);
