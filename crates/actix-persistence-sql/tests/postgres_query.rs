//! The query contract on PostgreSQL with real concurrent transactions: a write whose
//! transaction commits after a later one was delivered is still delivered, once; a write that
//! rolls back holds nothing up. Each test in a database of its own (feature `test-util`;
//! skipped without `DATABASE_URL`).
#![cfg(feature = "test-util")]

#[path = "common/migrations.rs"]
mod migrations;

use std::time::Duration;

use actix_persistence_core::query::{
    entity_type_of, slice_for_persistence_id, EnvelopeStream, Offset, QuerySettings, ReadJournal,
};
use actix_persistence_core::{AtomicWrite, JournalStore, PersistentRepr};
use actix_persistence_sql::test_util::TestDatabase;
use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions};
use actix_persistence_testkit::{ControlledQueryStore, QueryControl};
use futures::{StreamExt, TryStreamExt};
use sqlx::{Connection, PgConnection};

const WINDOW: Duration = Duration::from_secs(3600);
const WITHIN: Duration = Duration::from_secs(30);

struct Setup {
    db: TestDatabase,
    journal: PostgresJournal,
    control: QueryControl,
    query: ReadJournal,
}

/// A journal without group commit (each atomic write its own transaction, run concurrently),
/// and queries over it with a one-hour late-commit window whose clock the test moves.
async fn setup() -> Option<Setup> {
    let db = TestDatabase::create().await?;
    let options = PostgresJournalOptions {
        max_connections: 6,
        max_batch_size: 1,
        ..PostgresJournalOptions::new(db.url())
    };
    let journal = PostgresJournal::connect(&options).await.expect("connect");
    let store = ControlledQueryStore::new(journal.clone());
    let control = store.control();
    let settings = QuerySettings {
        refresh_interval: Duration::from_millis(20),
        late_commit_window: WINDOW,
        page_size: 100,
        ..QuerySettings::default()
    };
    Some(Setup {
        db,
        journal,
        control,
        query: ReadJournal::new(store, settings),
    })
}

fn event(pid: &str, seq_nr: u64) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload: b"{}".to_vec(),
        serializer_id: 1,
        manifest: String::new(),
        writer_uuid: "w".into(),
        timestamp: 0,
        tags: vec![].into(),
    }
}

async fn write(journal: &PostgresJournal, pid: &str, seq_nr: u64) {
    let results = journal
        .write_messages(vec![
            AtomicWrite::new(vec![event(pid, seq_nr)]).expect("shape")
        ])
        .await
        .expect("write");
    assert!(
        results[0].is_ok(),
        "write of {pid} {seq_nr}: {:?}",
        results[0]
    );
}

async fn next(live: &mut EnvelopeStream) -> (String, u64) {
    let envelope = tokio::time::timeout(WITHIN, live.next())
        .await
        .expect("an element within 30 s")
        .expect("the live query goes on")
        .expect("no error");
    (envelope.persistence_id.to_string(), envelope.seq_nr)
}

/// Waits until a statement of the journal waits for a lock held by the test.
async fn until_a_write_waits_for_a_lock(admin: &mut PgConnection) {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut *admin)
        .await
        .expect("read pg_stat_activity");
        if waiting > 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the write never waited for the lock"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn a_transaction_committing_after_a_later_one_is_delivered_once() {
    let Some(Setup {
        db,
        journal,
        control,
        query,
    }) = setup().await
    else {
        return;
    };
    let (late, early) = ("Late|a", "Late|b");
    let mut live = query.events_by_slices("Late", 0, 1023, Offset::NoOffset);
    write(&journal, late, 1).await;
    assert_eq!(next(&mut live).await, (late.to_owned(), 1));

    // Transaction 1 inserts `late` 2 (its timestamp taken now), then waits for a row lock the
    // test holds, so it cannot commit.
    let mut admin = PgConnection::connect(db.url()).await.expect("connect");
    let mut lock = admin.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM journal_highest WHERE persistence_id = $1 FOR UPDATE")
        .bind(late)
        .execute(&mut *lock)
        .await
        .expect("lock");
    let late_write = tokio::spawn({
        let journal = journal.clone();
        async move { write(&journal, late, 2).await }
    });
    let mut observer = PgConnection::connect(db.url()).await.expect("connect");
    until_a_write_waits_for_a_lock(&mut observer).await;

    // Transaction 2 (a later timestamp) commits first and is delivered.
    write(&journal, early, 1).await;
    assert_eq!(next(&mut live).await, (early.to_owned(), 1));
    let offset_after_early = query
        .current_events_by_slices("Late", 0, 1023, Offset::NoOffset)
        .try_collect::<Vec<_>>()
        .await
        .expect("current query")
        .last()
        .expect("two events")
        .offset
        .clone();

    // Transaction 1 commits: its event (the lower timestamp) comes once the window passed.
    lock.commit().await.expect("release the lock");
    late_write.await.expect("the late write");
    control.advance_clock(WINDOW);
    assert_eq!(next(&mut live).await, (late.to_owned(), 2));
    write(&journal, early, 2).await;
    assert_eq!(
        next(&mut live).await,
        (early.to_owned(), 2),
        "nothing repeats"
    );

    // Resuming from the offset stored after `early` 1 delivers the late event and what
    // followed, never `early` 1 again.
    let mut resumed: Vec<(String, u64)> = query
        .current_events_by_slices("Late", 0, 1023, offset_after_early)
        .map_ok(|e| (e.persistence_id.to_string(), e.seq_nr))
        .try_collect()
        .await
        .expect("resumed query");
    resumed.sort();
    assert_eq!(resumed, vec![(late.to_owned(), 2), (early.to_owned(), 2)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn a_rolled_back_transaction_holds_no_query_up() {
    let Some(Setup {
        db,
        journal,
        control,
        query,
    }) = setup().await
    else {
        return;
    };
    let (rolled_back, other) = ("Gap|rolled-back", "Gap|other");
    let mut live = query.events_by_slices("Gap", 0, 1023, Offset::NoOffset);

    // A transaction inserts an event as the journal does (a lower timestamp), and stays open.
    let mut conn = PgConnection::connect(db.url()).await.expect("connect");
    let mut tx = conn.begin().await.expect("begin");
    sqlx::query(
        "INSERT INTO journal (persistence_id, seq_nr, writer_uuid, write_timestamp, \
             serializer_id, manifest, payload, tags, db_timestamp, slice, entity_type) \
         VALUES ($1, 1, 'w', 0, 1, '', '\\x7b7d', '{}', \
             (extract(epoch from statement_timestamp()) * 1000000)::bigint, $2, $3)",
    )
    .bind(rolled_back)
    .bind(i32::from(slice_for_persistence_id(rolled_back)))
    .bind(entity_type_of(rolled_back))
    .execute(&mut *tx)
    .await
    .expect("insert in the open transaction");

    // Later events are delivered while it is open: the gap holds nothing up.
    write(&journal, other, 1).await;
    assert_eq!(next(&mut live).await, (other.to_owned(), 1));
    tx.rollback().await.expect("roll back");
    write(&journal, other, 2).await;
    assert_eq!(next(&mut live).await, (other.to_owned(), 2));
    // After the window, the settled pass finds nothing more; the query goes on.
    control.advance_clock(WINDOW);
    write(&journal, other, 3).await;
    assert_eq!(next(&mut live).await, (other.to_owned(), 3));
    let all: Vec<(String, u64)> = query
        .current_events_by_slices("Gap", 0, 1023, Offset::NoOffset)
        .map_ok(|e| (e.persistence_id.to_string(), e.seq_nr))
        .try_collect()
        .await
        .expect("current query");
    let other = other.to_owned();
    assert_eq!(
        all,
        vec![(other.clone(), 1), (other.clone(), 2), (other, 3)]
    );
}

/// The planner statistics the page query runs with, of the journal: its size in pages when
/// they were taken, and the table's size in pages now.
async fn journal_pages(admin: &mut PgConnection) -> (i64, i64) {
    sqlx::query_as(
        "SELECT relpages::BIGINT, pg_relation_size(oid) / current_setting('block_size')::BIGINT \
         FROM pg_class WHERE oid = 'journal'::regclass",
    )
    .fetch_one(admin)
    .await
    .expect("journal pages")
}

/// A journal filled a moment ago (autovacuum off: it never comes by) is analyzed in the
/// background from the first query round, so that page queries read `journal_by_entity_type`
/// in order up to their limit instead of sorting every event of the range (docs/benchmarks.md,
/// issue 8); the catch-up delivers every event once, in each id's order, either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn a_query_analyzes_a_journal_filled_since_its_statistics() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    let journal = PostgresJournal::connect(&PostgresJournalOptions::new(db.url()))
        .await
        .expect("connect");
    let mut admin = PgConnection::connect(db.url()).await.expect("admin");
    sqlx::query("ALTER TABLE journal SET (autovacuum_enabled = false)")
        .execute(&mut admin)
        .await
        .expect("autovacuum off");
    let (ids, per_id) = (100u64, 200u64);
    for round in 0..per_id / 20 {
        let writes = (0..ids)
            .map(|id| {
                let pid = format!("Stats|{id}");
                let events = (round * 20 + 1..=round * 20 + 20)
                    .map(|seq_nr| event(&pid, seq_nr))
                    .collect();
                AtomicWrite::new(events).expect("shape")
            })
            .collect();
        let results = journal.write_messages(writes).await.expect("write");
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    }
    let (analyzed, now) = journal_pages(&mut admin).await;
    assert!(
        now >= 100 && analyzed * 10 < now,
        "statistics older than the rows: {analyzed} pages analyzed, {now} now"
    );
    let settings = QuerySettings {
        page_size: 1_000,
        ..QuerySettings::default()
    };
    let query = ReadJournal::new(journal.clone(), settings);
    let envelopes: Vec<(String, u64)> = query
        .current_events_by_slices("Stats", 0, 1023, Offset::NoOffset)
        .map_ok(|e| (e.persistence_id.to_string(), e.seq_nr))
        .try_collect()
        .await
        .expect("catch-up");
    assert_eq!(envelopes.len() as u64, ids * per_id);
    let mut last = std::collections::HashMap::new();
    for (pid, seq_nr) in &envelopes {
        let previous = last.insert(pid.clone(), *seq_nr).unwrap_or(0);
        assert_eq!(*seq_nr, previous + 1, "{pid} in order, once");
    }
    // The query started `ANALYZE` in the background; it ends within seconds.
    let mut pages = journal_pages(&mut admin).await;
    for _ in 0..200 {
        if pages.0 == pages.1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        pages = journal_pages(&mut admin).await;
    }
    let (analyzed, now) = pages;
    assert_eq!(analyzed, now, "the query analyzed the journal");
    drop(admin);
    journal.close().await;
}

/// A database brought up to migration 0006 holding a row whose tags hold a NULL element
/// (edited by hand): the new release opens it (0007's backfill skips the NULL instead of
/// failing on `event_tag.tag NOT NULL`) and indexes the tags that are there; the insert
/// trigger skips such an element of a row written afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn migration_0007_skips_null_tags() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    let mut admin = PgConnection::connect(db.url()).await.expect("admin");
    let migrator = migrations::migrator_up_to("postgres", 6).await;
    migrator.run(&mut admin).await.expect("migrate up to 0006");
    let insert = "INSERT INTO journal (persistence_id, seq_nr, writer_uuid, write_timestamp, \
                  serializer_id, manifest, payload, tags, db_timestamp, slice, entity_type) \
                  VALUES ($1, $2, 'w', 1, 1, '', '\\x7b7d', $3::TEXT[], $4, 0, 'Tagged')";
    for (pid, seq_nr, tags, timestamp) in [
        ("Tagged|a", 1i64, "{t}", 1_000i64),
        ("Tagged|bad", 1, "{t,NULL}", 2_000),
    ] {
        sqlx::query(insert)
            .bind(pid)
            .bind(seq_nr)
            .bind(tags)
            .bind(timestamp)
            .execute(&mut admin)
            .await
            .expect("a row at 0006");
    }
    let journal = PostgresJournal::connect(&PostgresJournalOptions::new(db.url()))
        .await
        .expect("a database with a NULL tag opens");
    sqlx::query(insert)
        .bind("Tagged|bad")
        .bind(2i64)
        .bind("{NULL,u}")
        .bind(3_000i64)
        .execute(&mut admin)
        .await
        .expect("the insert trigger skips NULL tags");
    let indexed: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT tag, persistence_id, seq_nr FROM event_tag ORDER BY 1, 2, 3")
            .fetch_all(&mut admin)
            .await
            .expect("event_tag");
    assert_eq!(
        indexed,
        vec![
            ("t".to_owned(), "Tagged|a".to_owned(), 1),
            ("t".to_owned(), "Tagged|bad".to_owned(), 1),
            ("u".to_owned(), "Tagged|bad".to_owned(), 2),
        ]
    );
    journal.close().await;
}

/// Most installations' databases compare text by a language's rules (`en_US.UTF-8`, or an ICU
/// locale), not by bytes: `current_persistence_ids` still lists the ids in byte order, as the
/// other stores and its contract say, and pages on from `after` in that order. The case runs
/// with `journal_highest.persistence_id` in ICU's root collation (`und-x-icu`), as a database
/// created with an ICU locale gives it.
#[tokio::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn persistence_ids_come_in_byte_order_whatever_the_database_collation() {
    let Some(setup) = setup().await else { return };
    let mut admin = PgConnection::connect(setup.db.url())
        .await
        .expect("admin connection");
    sqlx::query(
        "ALTER TABLE journal_highest ALTER COLUMN persistence_id TYPE text \
         COLLATE \"und-x-icu\"",
    )
    .execute(&mut admin)
    .await
    .expect("an ICU collation (PostgreSQL built with ICU)");
    let ids = ["é|1", "e|2", "a|1", "A|1", "aB", "a_b", "B|1", "_|1"];
    for id in ids {
        write(&setup.journal, id, 1).await;
    }
    let mut in_byte_order: Vec<String> = ids.iter().map(|id| (*id).to_owned()).collect();
    in_byte_order.sort();
    let all: Vec<String> = setup
        .query
        .current_persistence_ids(None, u64::MAX)
        .try_collect()
        .await
        .expect("ids");
    assert_eq!(all, in_byte_order, "all ids, in byte order");
    // Page by page (two at a time) from each `after`.
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page: Vec<String> = setup
            .query
            .current_persistence_ids(after.as_deref(), 2)
            .try_collect()
            .await
            .expect("a page of ids");
        match page.last() {
            Some(last) => after = Some(last.clone()),
            None => break,
        }
        paged.extend(page);
    }
    assert_eq!(paged, in_byte_order, "paged from `after`, in byte order");
    setup.journal.close().await;
}

/// Waits until `n` statements of the database wait for a lock.
async fn until_writes_wait_for_locks(admin: &mut PgConnection, n: i64) {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut *admin)
        .await
        .expect("read pg_stat_activity");
        if waiting >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{n} statements never waited for a lock ({waiting} do)"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Collects what `live` delivers within `within`.
async fn drain(live: &mut EnvelopeStream, within: Duration) -> Vec<(String, u64)> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    while let Ok(Some(envelope)) = tokio::time::timeout_at(deadline, live.next()).await {
        let envelope = envelope.expect("no error");
        got.push((envelope.persistence_id.to_string(), envelope.seq_nr));
    }
    got
}

/// (Adversarial, after akka-persistence-jdbc's eventsByTag gaps.) By tag, with real
/// transactions: a tagged write whose transaction started first (lower timestamp) commits after
/// a later one's event was delivered; the live query delivers it once within the window, and a
/// live query resumed from the offset stored after the early event delivers it once too, then
/// what follows, never the early event again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn by_tag_a_late_commit_is_delivered_once_also_to_a_query_resumed_mid_way() {
    let Some(Setup {
        db,
        journal,
        control,
        query,
    }) = setup().await
    else {
        return;
    };
    let tagged = |pid: &str, seq_nr: u64| {
        let mut e = event(pid, seq_nr);
        e.tags = vec!["T".to_owned(), "other".to_owned()].into();
        AtomicWrite::new(vec![e]).expect("shape")
    };
    let write_tagged = |pid: &'static str, seq_nr: u64| {
        let journal = journal.clone();
        let w = tagged(pid, seq_nr);
        async move {
            let r = journal.write_messages(vec![w]).await.expect("write");
            assert!(r[0].is_ok(), "{r:?}");
        }
    };
    let (late, early) = ("Tg|a", "Tg|b");
    let mut live = query.events_by_tag("T", Offset::NoOffset);
    write_tagged(late, 1).await;
    assert_eq!(next(&mut live).await, (late.to_owned(), 1));

    let mut admin = PgConnection::connect(db.url()).await.expect("connect");
    let mut lock = admin.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM journal_highest WHERE persistence_id = $1 FOR UPDATE")
        .bind(late)
        .execute(&mut *lock)
        .await
        .expect("lock");
    let late_write = tokio::spawn(write_tagged(late, 2));
    let mut observer = PgConnection::connect(db.url()).await.expect("connect");
    until_a_write_waits_for_a_lock(&mut observer).await;

    write_tagged(early, 1).await;
    let envelope = tokio::time::timeout(WITHIN, live.next())
        .await
        .expect("in time")
        .expect("goes on")
        .expect("no error");
    assert_eq!(
        (envelope.persistence_id.to_string(), envelope.seq_nr),
        (early.to_owned(), 1)
    );
    let stored: Offset =
        serde_json::from_str(&serde_json::to_string(&envelope.offset).expect("ser")).expect("de");

    lock.commit().await.expect("release the lock");
    late_write.await.expect("the late write");
    control.advance_clock(WINDOW);
    assert_eq!(next(&mut live).await, (late.to_owned(), 2));
    let mut resumed = query.events_by_tag("T", stored);
    assert_eq!(next(&mut resumed).await, (late.to_owned(), 2));
    // Through the controlled store: stamped on its moved clock.
    let r = query
        .store()
        .write_messages(vec![tagged(early, 2)])
        .await
        .expect("write");
    assert!(r[0].is_ok(), "{r:?}");
    assert_eq!(
        next(&mut live).await,
        (early.to_owned(), 2),
        "nothing repeats"
    );
    assert_eq!(
        next(&mut resumed).await,
        (early.to_owned(), 2),
        "nothing repeats after resuming"
    );
}

/// (Adversarial, after akka-persistence-r2dbc's "events missed when the db timestamp is taken
/// long before the commit" and Marten's high-water-mark gaps.) `delete_events_to` of an id holds
/// the id's `journal_highest` row for as long as its `DELETE` runs (a large delete takes
/// seconds); a write of the same id started meanwhile waits for that row. It took its database
/// timestamp when its statement started (`statement_timestamp()`), before the wait, so its
/// event committed long after later-stamped events were delivered, behind the live query's
/// late-commit window, and was never delivered (nor the events of other ids batched with it
/// under group commit): the window bounds the time from inserting events to committing them,
/// and the time went to a wait before the insert. Now the write reads the clock once it holds
/// the rows (postgres.rs `micros_after_owned!`).
///
/// On the real clock, with a window of 300 ms: the delete of x's events runs 1.5 s (held by a
/// row lock of the test), y writes and is delivered meanwhile, then x 2 commits right after the
/// delete (with group commit, in one statement with z 1), then y writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn a_write_waiting_behind_a_long_delete_of_its_id_is_delivered() {
    write_behind_a_long_delete(false).await;
}

/// As [`a_write_waiting_behind_a_long_delete_of_its_id_is_delivered`], with group commit: the
/// write of x 2 shares its statement with a write of another id, z 1, which has nothing to do
/// with the delete and was never delivered either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn with_group_commit_other_ids_batched_with_a_write_behind_a_long_delete_are_delivered() {
    write_behind_a_long_delete(true).await;
}

async fn write_behind_a_long_delete(group_commit: bool) {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    let journal = PostgresJournal::connect(&PostgresJournalOptions::new(db.url()))
        .await
        .expect("connect");
    let settings = QuerySettings {
        refresh_interval: Duration::from_millis(50),
        late_commit_window: Duration::from_millis(300),
        ..QuerySettings::default()
    };
    let query = ReadJournal::new(journal.clone(), settings);
    let (x, y, z) = ("Real|x", "Real|y", "Real|z");
    let mut live = query.events_by_slices("Real", 0, 1023, Offset::NoOffset);
    write(&journal, x, 1).await;
    assert_eq!(next(&mut live).await, (x.to_owned(), 1));

    let mut admin = PgConnection::connect(db.url()).await.expect("connect");
    let mut slow = admin.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM journal WHERE persistence_id = $1 AND seq_nr = 1 FOR UPDATE")
        .bind(x)
        .execute(&mut *slow)
        .await
        .expect("lock x 1");
    let delete = tokio::spawn({
        let journal = journal.clone();
        async move {
            journal
                .delete_messages_to(x, 1, actix_persistence_core::FencingToken::UNOWNED)
                .await
        }
    });
    let mut observer = PgConnection::connect(db.url()).await.expect("connect");
    until_writes_wait_for_locks(&mut observer, 1).await;
    let late_write = tokio::spawn({
        let journal = journal.clone();
        async move {
            if group_commit {
                let results = journal
                    .write_messages(vec![
                        AtomicWrite::new(vec![event(x, 2)]).expect("shape"),
                        AtomicWrite::new(vec![event(z, 1)]).expect("shape"),
                    ])
                    .await
                    .expect("write");
                assert!(results.iter().all(Result::is_ok), "{results:?}");
            } else {
                write(&journal, x, 2).await
            }
        }
    });
    until_writes_wait_for_locks(&mut observer, 2).await;
    // y writes while x 2 waits, and the live query delivers it.
    write(&journal, y, 1).await;
    assert_eq!(next(&mut live).await, (y.to_owned(), 1));
    // The delete runs 1.5 s in all, five windows: the live query settles far past the moment
    // x 2's statement started.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    slow.commit().await.expect("release");
    delete.await.expect("join").expect("delete");
    late_write.await.expect("the late write");
    write(&journal, y, 2).await;
    let mut expected = vec![(x.to_owned(), 2), (y.to_owned(), 2)];
    if group_commit {
        expected.push((z.to_owned(), 1));
    }
    expected.sort();
    let mut got = drain(&mut live, Duration::from_secs(3)).await;
    got.sort();
    assert_eq!(got, expected, "what committed after y 1 was delivered");
    // x 2 was stamped once its statement held the row, after its wait: above y 1.
    let (x2, y1): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT db_timestamp FROM journal WHERE persistence_id = $1 AND seq_nr = 2), \
                (SELECT db_timestamp FROM journal WHERE persistence_id = $2 AND seq_nr = 1)",
    )
    .bind(x)
    .bind(y)
    .fetch_one(&mut observer)
    .await
    .expect("timestamps");
    assert!(x2 > y1, "x 2 stamped at {x2}, y 1 at {y1}");
}
