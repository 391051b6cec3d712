-- A sequence number up to an id's deleted-to mark stays used (conformance J29): an insert of
-- such a row is skipped, as an insert of a stored number is (`ON CONFLICT DO NOTHING`), and
-- the journal reports the write as a `ConcurrentWrite`. Stored, the event would sit below
-- events that queries already delivered past and recoveries already replayed.
--
-- A trigger, not a clause of each insert statement, so that every write path (a batch, a lone
-- event, the savepoints' slow path) and a row inserted by another tool keep the rule. An id
-- without a `journal_highest` row has deleted nothing (the comparison with NULL is not true).
CREATE TRIGGER IF NOT EXISTS journal_deleted_seq_nr_insert BEFORE INSERT ON journal
WHEN NEW.seq_nr <= (SELECT deleted_to FROM journal_highest
                    WHERE persistence_id = NEW.persistence_id)
BEGIN
    SELECT RAISE(IGNORE);
END;
