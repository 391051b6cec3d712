-- The tag index of queries by tag (issue 8): one row per (event, tag), as
-- akka-persistence-jdbc's `event_tag`, so that `events_by_tag` reads the events of one tag in
-- query order through an index instead of scanning the journal.
--
-- Filled by statement-level triggers on `journal` (one set-based INSERT per insert statement,
-- whatever the number of rows, in the writing transaction; events without tags cost nothing
-- but the trigger call) and emptied with the events (`delete_messages_to`), so every write
-- path (group commit's multi-row insert, one write per statement, other tools) keeps it exact.
-- The timestamp is the event's `db_timestamp`, which never changes once inserted.
-- NULL elements of `tags` (a row edited by hand; the journal never writes one) are skipped,
-- never an error, so neither this migration nor a later insert fails on them.
CREATE TABLE IF NOT EXISTS event_tag (
    tag            TEXT   NOT NULL,
    db_timestamp   BIGINT NOT NULL,
    persistence_id TEXT   NOT NULL,
    seq_nr         BIGINT NOT NULL
);
-- The query order: persistence ids in byte order (COLLATE "C"), as queries compare them.
CREATE UNIQUE INDEX IF NOT EXISTS event_tag_by_tag
    ON event_tag (tag, db_timestamp, persistence_id COLLATE "C", seq_nr);
-- Deletes, and the previous tagged event of an id (the fast pass's order check).
CREATE INDEX IF NOT EXISTS event_tag_by_event ON event_tag (persistence_id, seq_nr);

CREATE OR REPLACE FUNCTION journal_event_tag_insert() RETURNS trigger AS $$
BEGIN
    INSERT INTO event_tag (tag, db_timestamp, persistence_id, seq_nr)
    SELECT DISTINCT t.tag, i.db_timestamp, i.persistence_id, i.seq_nr
    FROM inserted_events i, unnest(i.tags) AS t(tag)
    WHERE t.tag IS NOT NULL
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION journal_event_tag_delete() RETURNS trigger AS $$
BEGIN
    DELETE FROM event_tag e
    USING deleted_events d
    WHERE cardinality(d.tags) > 0
      AND e.persistence_id = d.persistence_id AND e.seq_nr = d.seq_nr;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS journal_event_tag_insert ON journal;
CREATE TRIGGER journal_event_tag_insert AFTER INSERT ON journal
    REFERENCING NEW TABLE AS inserted_events
    FOR EACH STATEMENT EXECUTE FUNCTION journal_event_tag_insert();
DROP TRIGGER IF EXISTS journal_event_tag_delete ON journal;
CREATE TRIGGER journal_event_tag_delete AFTER DELETE ON journal
    REFERENCING OLD TABLE AS deleted_events
    FOR EACH STATEMENT EXECUTE FUNCTION journal_event_tag_delete();

-- Events stored before this migration.
INSERT INTO event_tag (tag, db_timestamp, persistence_id, seq_nr)
SELECT DISTINCT t.tag, j.db_timestamp, j.persistence_id, j.seq_nr
FROM journal j, unnest(j.tags) AS t(tag)
WHERE t.tag IS NOT NULL
ON CONFLICT DO NOTHING;
