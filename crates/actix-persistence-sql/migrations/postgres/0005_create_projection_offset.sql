-- Projection offsets (the actix-persistence-projection crate): where each projection instance
-- resumes after a restart or a crash.
--
-- One row per (projection name, projection key): the key names the part of the source an
-- instance consumes ("slices-0-511", "tag-account"). `current_offset` is the query's offset as
-- JSON text, handed back to the query unchanged to resume exactly after the last handled
-- envelope. Portable PostgreSQL, as the journal.
CREATE TABLE IF NOT EXISTS projection_offset (
    projection_name TEXT   NOT NULL,
    projection_key  TEXT   NOT NULL,
    current_offset  TEXT   NOT NULL,
    -- milliseconds since the Unix epoch
    last_updated    BIGINT NOT NULL,
    PRIMARY KEY (projection_name, projection_key)
);

-- The highest sequence number handled per persistence id, written in the handler's own
-- transaction by exactly-once projections that handle several envelopes at once
-- (`max_concurrency` above 1): their offset row may lag behind envelopes already handled, and
-- these rows let a restart skip exactly those.
CREATE TABLE IF NOT EXISTS projection_seen (
    projection_name TEXT   NOT NULL,
    projection_key  TEXT   NOT NULL,
    persistence_id  TEXT   NOT NULL,
    seq_nr          BIGINT NOT NULL,
    PRIMARY KEY (projection_name, projection_key, persistence_id)
);
