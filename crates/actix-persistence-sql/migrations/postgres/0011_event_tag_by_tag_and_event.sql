-- The fast pass of a live query by tag looks up, for each event it reads, the id's previous
-- event carrying the tag (`tag = $1 AND persistence_id = $id AND seq_nr < $seq ORDER BY seq_nr
-- DESC LIMIT 1`). `event_tag_by_tag` leads with the tag and then the timestamp, so it cannot
-- serve that look-up, and a planner whose statistics predate a tag (written since the last
-- ANALYZE, too few rows to trigger another) took the tag for rare and read its whole range per
-- event: 11 s for one page of 1,001 events over a tag of 22,000, past the statement timeout.
-- `event_tag_by_event` (persistence_id, seq_nr) needs the tag as a filter, and its plan then
-- read every earlier event of the id. This index answers the look-up with one backward probe,
-- whatever the statistics say (the timestamp included, so that it reads no table row).
-- On a large table, building it takes a while and blocks writes meanwhile; build it ahead with
-- `CREATE INDEX CONCURRENTLY` under this name to avoid that (this statement then does nothing).
CREATE INDEX IF NOT EXISTS event_tag_by_tag_and_event
    ON event_tag (tag, persistence_id, seq_nr) INCLUDE (db_timestamp);
