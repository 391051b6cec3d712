-- The tag index's trigger functions (migration 0007) name `event_tag` without a schema, so
-- PostgreSQL looked it up through the search_path of whoever inserted into or deleted from
-- `journal`: this crate's connections use the journal's schema (`journal.postgres.schema`), but
-- another tool's session inserting into `<schema>.journal` with the default search_path wrote
-- the index rows into another schema's `event_tag` (or failed where there was none), and that
-- journal's queries by tag then missed the event. Each function now runs with the search_path
-- of the schema it lives in (this migration runs in it), whoever calls it; `pg_temp` last, so
-- that no temporary table can stand in for `event_tag`.
DO $$
BEGIN
    EXECUTE format(
        'ALTER FUNCTION journal_event_tag_insert() SET search_path = %I, pg_temp',
        current_schema()
    );
    EXECUTE format(
        'ALTER FUNCTION journal_event_tag_delete() SET search_path = %I, pg_temp',
        current_schema()
    );
END
$$;
