-- The event journal: one row per persisted event.
--
-- Portable PostgreSQL: no extensions, no advisory locks, nothing beyond what Postgres-compatible
-- distributed SQL engines accept.
--
-- `ordering` is a global, gap-tolerant, ever-increasing position over all persistence ids, for
-- later queries by tag and offset (values are taken when a row is inserted, so they are not
-- necessarily visible in commit order). Persistence ids are TEXT under the database's default
-- (deterministic) collation, whose equality is byte for byte: ids that differ only by case, or
-- only by Unicode normalization, are different ids.
CREATE TABLE IF NOT EXISTS journal (
    ordering        BIGSERIAL NOT NULL,
    persistence_id  TEXT      NOT NULL,
    seq_nr          BIGINT    NOT NULL CHECK (seq_nr >= 1),
    writer_uuid     TEXT      NOT NULL,
    -- milliseconds since the Unix epoch
    write_timestamp BIGINT    NOT NULL,
    -- the serializer's u32 id, stored as the INTEGER with the same 32 bits (ids above
    -- 2147483647 read as negative numbers in SQL)
    serializer_id   INTEGER   NOT NULL,
    manifest        TEXT      NOT NULL,
    payload         BYTEA     NOT NULL,
    tags            TEXT[]    NOT NULL,
    PRIMARY KEY (persistence_id, seq_nr)
);

CREATE UNIQUE INDEX IF NOT EXISTS journal_ordering_idx ON journal (ordering);

-- The highest sequence number ever stored per persistence id. Raised in the same transaction
-- as every write and never touched by deletes, so it survives them.
CREATE TABLE IF NOT EXISTS journal_highest (
    persistence_id TEXT   NOT NULL PRIMARY KEY,
    highest_seq_nr BIGINT NOT NULL
);
