-- Queries by slices read one entity type in (db_timestamp, persistence_id, seq_nr) order. With
-- only `journal_by_timestamp`, such a query walked the events of every other entity type in
-- that order and dropped them: a live query of a new entity type on a journal holding a million
-- events of another one scanned them all on its first round (tens of milliseconds to seconds,
-- held up live delivery), and a catch-up read every other type's rows. This index leads with the
-- entity type, so the query reads its own events only, already in query order. (Akka's r2dbc
-- plugin indexes `(slice, entity_type, db_timestamp, seq_nr)` for the same reason.)
-- On a large journal, building it takes a while and blocks writes meanwhile; build it ahead with
-- `CREATE INDEX CONCURRENTLY` under this name to avoid that (this statement then does nothing).
CREATE INDEX IF NOT EXISTS journal_by_entity_type
    ON journal (entity_type, db_timestamp, persistence_id COLLATE "C", seq_nr);
