-- Snapshots: at most one per persistence id and sequence number (a second save replaces it).
CREATE TABLE IF NOT EXISTS snapshot (
    persistence_id  TEXT    NOT NULL,
    seq_nr          BIGINT  NOT NULL CHECK (seq_nr >= 0),
    -- milliseconds since the Unix epoch
    write_timestamp BIGINT  NOT NULL,
    -- the serializer's u32 id, as in the journal
    serializer_id   INTEGER NOT NULL,
    manifest        TEXT    NOT NULL,
    payload         BYTEA   NOT NULL,
    PRIMARY KEY (persistence_id, seq_nr)
);
