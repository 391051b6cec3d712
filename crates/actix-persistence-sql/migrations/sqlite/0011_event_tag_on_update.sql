-- The tag index (migration 0007) follows an event changed in place: the journal itself never
-- updates an event's tags, timestamp, persistence id or sequence number, but a row edited by
-- hand or by another tool (a tag renamed, an event re-tagged) was left indexed under its old
-- tags, so queries by tag missed its new ones and still found it under the old. Now the row's
-- index rows are replaced whenever one of those columns changes; tags that are not a JSON
-- array of strings index nothing, as on insert, never an error.
CREATE TRIGGER IF NOT EXISTS journal_event_tag_update
AFTER UPDATE OF tags, db_timestamp, persistence_id, seq_nr ON journal
WHEN OLD.tags IS NOT NEW.tags
  OR OLD.db_timestamp IS NOT NEW.db_timestamp
  OR OLD.persistence_id IS NOT NEW.persistence_id
  OR OLD.seq_nr IS NOT NEW.seq_nr
BEGIN
    DELETE FROM event_tag WHERE persistence_id = OLD.persistence_id AND seq_nr = OLD.seq_nr;
    INSERT OR IGNORE INTO event_tag (tag, db_timestamp, persistence_id, seq_nr)
    SELECT t.value, NEW.db_timestamp, NEW.persistence_id, NEW.seq_nr
    FROM json_each(
        CASE WHEN json_valid(NEW.tags)
             THEN CASE WHEN json_type(NEW.tags) = 'array' THEN NEW.tags ELSE '[]' END
             ELSE '[]'
        END
    ) AS t
    WHERE t.type = 'text';
END;
