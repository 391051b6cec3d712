-- The journal's clock survives deletes (persistence queries, issue 8).
--
-- An event's `db_timestamp` is the process's wall clock, never below the highest one stored
-- (migration 0003), so that a query by slice or by tag that delivered an event never meets an
-- event with a lower timestamp later. Deleting the newest events (a snapshot policy that deletes
-- covered events, `delete_events_to`) took that floor away: after a wall-clock step back the
-- next events got timestamps below ones already delivered, which a live query past them never
-- reads. `journal_clock` keeps the highest timestamp of every deleted event; the inserts and the
-- queries' clock take the greater of both.
CREATE TABLE IF NOT EXISTS journal_clock (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    last_timestamp INTEGER NOT NULL
);
INSERT OR IGNORE INTO journal_clock (id, last_timestamp) VALUES (0, 0);
-- Only a deleted event newer than the clock writes it: most deletes write nothing.
CREATE TRIGGER IF NOT EXISTS journal_clock_on_delete AFTER DELETE ON journal
WHEN OLD.db_timestamp > (SELECT last_timestamp FROM journal_clock WHERE id = 0)
BEGIN
    UPDATE journal_clock SET last_timestamp = OLD.db_timestamp WHERE id = 0;
END;
