-- The tag index (migration 0007) follows an event changed in place: the journal itself never
-- updates an event's tags, timestamp, persistence id or sequence number, but a row edited by
-- hand or by another tool (a tag renamed, an event re-tagged) was left indexed under its old
-- tags, so queries by tag missed its new ones and still found it under the old. Now, after
-- each UPDATE of `journal`, the index rows of every updated event whose tags, timestamp, id or
-- sequence number changed are replaced (one set-based statement each way, as on insert and
-- delete; an UPDATE that changes none of them, such as the slice fill on connect, changes
-- nothing). NULL elements are skipped, as on insert. The function runs with its schema's
-- search_path (as migration 0012 made the others). Rows edited before this
-- migration keep their index rows (re-indexing the whole journal at startup would cost a
-- large journal minutes): delete and re-insert such a row to index it again.
CREATE OR REPLACE FUNCTION journal_event_tag_update() RETURNS trigger AS $$
BEGIN
    DELETE FROM event_tag e
    USING (
        SELECT persistence_id, seq_nr, db_timestamp, tags FROM updated_from
        EXCEPT
        SELECT persistence_id, seq_nr, db_timestamp, tags FROM updated_to
    ) AS o
    WHERE e.persistence_id = o.persistence_id AND e.seq_nr = o.seq_nr;
    INSERT INTO event_tag (tag, db_timestamp, persistence_id, seq_nr)
    SELECT DISTINCT t.tag, n.db_timestamp, n.persistence_id, n.seq_nr
    FROM (
        SELECT persistence_id, seq_nr, db_timestamp, tags FROM updated_to
        EXCEPT
        SELECT persistence_id, seq_nr, db_timestamp, tags FROM updated_from
    ) AS n, unnest(n.tags) AS t(tag)
    WHERE t.tag IS NOT NULL
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DO $$
BEGIN
    EXECUTE format(
        'ALTER FUNCTION journal_event_tag_update() SET search_path = %I, pg_temp',
        current_schema()
    );
END
$$;

DROP TRIGGER IF EXISTS journal_event_tag_update ON journal;
CREATE TRIGGER journal_event_tag_update AFTER UPDATE ON journal
    REFERENCING OLD TABLE AS updated_from NEW TABLE AS updated_to
    FOR EACH STATEMENT EXECUTE FUNCTION journal_event_tag_update();
