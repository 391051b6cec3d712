PREPARE p(text,int,int,bigint,text,bigint,bigint,bigint) AS SELECT journal.seq_nr, journal.writer_uuid, journal.write_timestamp, journal.serializer_id, journal.manifest, journal.payload, journal.tags, journal.persistence_id, journal.db_timestamp FROM journal WHERE $2 <= 0 AND $3 >= 1023 AND (journal.entity_type, journal.db_timestamp, journal.persistence_id COLLATE "C", journal.seq_nr) > ($1, $4, $5, $6) AND journal.entity_type = $1 AND journal.db_timestamp >= $4 AND journal.db_timestamp < $7 ORDER BY journal.entity_type, journal.db_timestamp, journal.persistence_id COLLATE "C", journal.seq_nr LIMIT $8;
\o /dev/null
EXECUTE p('Bench',0,1023,-9223372036854775808,'',0,1796395377077585,1001);
EXECUTE p('Bench',0,1023,-9223372036854775808,'',0,1796395377077585,1001);
EXECUTE p('Bench',0,1023,-9223372036854775808,'',0,1796395377077585,1001);
EXECUTE p('Bench',0,1023,-9223372036854775808,'',0,1796395377077585,1001);
EXECUTE p('Bench',0,1023,-9223372036854775808,'',0,1796395377077585,1001);
EXECUTE p('Bench',0,1023,-9223372036854775808,'',0,1796395377077585,1001);
\o
EXPLAIN ANALYZE EXECUTE p('Bench',0,1023,-9223372036854775808,'',0,1796395377077585,1001);
SELECT generic_plans, custom_plans FROM pg_prepared_statements;
