//! A page of a query reads only the events it selects, in query order, through an index: by
//! slices through `journal_by_entity_type` (migration 0009), by tag through the primary key of `event_tag` (`event_tag_by_tag` on PostgreSQL).
//! Without the entity type index, a query by slices walked `journal_by_timestamp` through every
//! other entity type's events (a live query of a new entity type on a journal of a million
//! events of another type scanned them all on its first round: docs/benchmarks.md, issue 8).
//! A page that starts right after an event seeks to it in that index.
//! Checked with SQLite's `EXPLAIN QUERY PLAN` of the journal's own page SQL, on a journal
//! holding two entity types, before and after `ANALYZE`.
#![cfg(all(feature = "sqlite", feature = "test-util"))]

use actix_persistence_core::query::EventFilter;
use actix_persistence_core::{AtomicWrite, JournalStore, PersistentRepr};
use actix_persistence_sql::test_util::sqlite_page_query_sql;
use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions};
use sqlx::{Connection, Row, SqliteConnection};

fn event(pid: &str, seq_nr: u64, tags: &[&str]) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload: b"{}".to_vec(),
        serializer_id: actix_persistence_core::serialization::JSON_SERIALIZER_ID,
        manifest: String::new(),
        writer_uuid: "plan".into(),
        timestamp: 0,
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
    }
}

/// The `detail` lines of `EXPLAIN QUERY PLAN sql`.
async fn plan(conn: &mut SqliteConnection, sql: &str) -> Vec<String> {
    sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}"))
        .fetch_all(conn)
        .await
        .expect("explain")
        .iter()
        .map(|row| row.get::<String, _>("detail"))
        .collect()
}

/// The plan reads `table` through `index` and sorts nothing.
fn assert_reads_in_order(plan: &[String], table: &str, index: &str) {
    let using = format!("{table} USING");
    assert!(
        plan.iter()
            .any(|line| line.contains(&using) && line.contains(index)),
        "{table} not read through {index}: {plan:#?}"
    );
    assert!(
        !plan.iter().any(|line| line.contains("TEMP B-TREE")),
        "the page is sorted instead of read in index order: {plan:#?}"
    );
}

#[tokio::test]
async fn page_queries_read_their_own_events_in_index_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("plan.db").display());
    let journal = SqliteJournal::connect(&SqliteJournalOptions::new(url.clone()))
        .await
        .expect("open");
    // Two entity types, many more events of the one the queries do not ask for.
    let mut writes = Vec::new();
    for id in 0..50 {
        let events = (1..=20)
            .map(|seq_nr| event(&format!("Other|{id}"), seq_nr, &["other"]))
            .collect();
        writes.push(AtomicWrite::new(events).expect("shape"));
    }
    writes.push(AtomicWrite::new(vec![event("Cart|1", 1, &["cart"])]).expect("shape"));
    for result in journal.write_messages(writes).await.expect("stored") {
        result.expect("accepted");
    }

    let by_slices = EventFilter::Slices {
        entity_type: "Cart".to_owned(),
        min_slice: 0,
        max_slice: 1023,
    };
    let by_tag = EventFilter::Tag("cart".to_owned());
    let mut conn = SqliteConnection::connect(&url).await.expect("connect");
    for analyzed in [false, true] {
        if analyzed {
            sqlx::query("ANALYZE")
                .execute(&mut conn)
                .await
                .expect("analyze");
        }
        for (fast_pass, after_an_event) in [(false, false), (false, true), (true, true)] {
            let sql = sqlite_page_query_sql(&by_slices, fast_pass, after_an_event);
            let slices = plan(&mut conn, &sql).await;
            assert_reads_in_order(&slices, "journal", "journal_by_entity_type");
            let sql = sqlite_page_query_sql(&by_tag, fast_pass, after_an_event);
            let tag = plan(&mut conn, &sql).await;
            // SQLite keeps `event_tag` as a table without rowid, ordered by its primary key.
            assert_reads_in_order(&tag, "event_tag", "PRIMARY KEY");
            if after_an_event {
                // The scan starts at the position itself, not at the start of its timestamp
                // (whose events up to the position it would read and drop).
                for (query, plan) in [("by slices", &slices), ("by tag", &tag)] {
                    assert!(
                        plan.iter()
                            .any(|line| line
                                .contains("(db_timestamp,persistence_id,seq_nr)>(?,?,?)")),
                        "{query} does not seek to its position: {plan:#?}"
                    );
                }
            }
        }
    }
}
