-- The tag index of queries by tag (issue 8): one row per (event, tag), as
-- akka-persistence-jdbc's `event_tag`, so that `events_by_tag` reads the events of one tag in
-- query order through the primary key instead of scanning the journal (and parsing every
-- row's JSON tags).
--
-- Filled by triggers on `journal` in the writing transaction (events without tags, '[]', cost
-- one comparison) and emptied with the events (`delete_messages_to`), so every write path
-- keeps it exact. The timestamp is the event's `db_timestamp`, which never changes once
-- inserted.
--
-- Tags that are not a JSON array (a row edited by hand or written by another tool; the
-- journal's own writes always store a JSON array of strings) are skipped, never an error:
-- such a row gets no index rows (queries by tag do not see it), and neither this migration
-- nor a later insert fails on it (a migration must never stop the store from opening).
-- Elements that are not strings are skipped too. `CASE` evaluates `json_type` only on valid
-- JSON (it raises an error on anything else; `AND` does not promise that order).
CREATE TABLE IF NOT EXISTS event_tag (
    tag            TEXT    NOT NULL,
    db_timestamp   INTEGER NOT NULL,
    persistence_id TEXT    NOT NULL,
    seq_nr         INTEGER NOT NULL,
    PRIMARY KEY (tag, db_timestamp, persistence_id, seq_nr)
) WITHOUT ROWID;
-- Deletes, and the previous tagged event of an id (the fast pass's order check).
CREATE INDEX IF NOT EXISTS event_tag_by_event ON event_tag (persistence_id, seq_nr);

CREATE TRIGGER IF NOT EXISTS journal_event_tag_insert AFTER INSERT ON journal
WHEN NEW.tags <> '[]'
 AND CASE WHEN json_valid(NEW.tags) THEN json_type(NEW.tags) = 'array' ELSE 0 END
BEGIN
    INSERT OR IGNORE INTO event_tag (tag, db_timestamp, persistence_id, seq_nr)
    SELECT t.value, NEW.db_timestamp, NEW.persistence_id, NEW.seq_nr
    FROM json_each(NEW.tags) AS t
    WHERE t.type = 'text';
END;

CREATE TRIGGER IF NOT EXISTS journal_event_tag_delete AFTER DELETE ON journal
WHEN OLD.tags <> '[]'
BEGIN
    DELETE FROM event_tag WHERE persistence_id = OLD.persistence_id AND seq_nr = OLD.seq_nr;
END;

-- Events stored before this migration (the valid JSON arrays among them; the subquery keeps
-- `json_each` off the others).
INSERT OR IGNORE INTO event_tag (tag, db_timestamp, persistence_id, seq_nr)
SELECT t.value, j.db_timestamp, j.persistence_id, j.seq_nr
FROM (
    SELECT db_timestamp, persistence_id, seq_nr, tags FROM journal
    WHERE tags <> '[]'
      AND CASE WHEN json_valid(tags) THEN json_type(tags) = 'array' ELSE 0 END
) AS j, json_each(j.tags) AS t
WHERE t.type = 'text';
