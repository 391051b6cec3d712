-- `current_persistence_ids` lists the ids in byte order (as the in-memory and SQLite stores,
-- and the query offsets, compare them), whatever the database's collation: most databases
-- order text by a language's rules (`en_US.UTF-8`, ICU locales), in which the primary key of
-- `journal_highest` cannot serve `ORDER BY persistence_id COLLATE "C"`. Only ids that stored
-- events are listed (`highest_seq_nr > 0`; a row of 0 records an ownership only).
CREATE INDEX IF NOT EXISTS journal_highest_by_id_bytes
    ON journal_highest (persistence_id COLLATE "C")
    WHERE highest_seq_nr > 0;
