//! The SQLite offset store, and exactly-once projections whose read model lives in the
//! journal's SQLite database, sourced from the SQLite journal's queries.

mod common;

use std::time::Duration;

use actix_persistence_core::query::ReadJournal;
use actix_persistence_projection::{
    AfterRetries, Grouping, HandlerError, OffsetStore, Projection, ProjectionId, ProjectionState,
    QuerySource, SaveOffset, SqliteOffsetStore, TransactionalGroupedHandler, TransactionalHandler,
    TransactionalOffsetStore,
};
use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions};
use async_trait::async_trait;
use common::*;
use sqlx::{Row, Sqlite, SqlitePool, Transaction};

struct Db {
    _dir: tempfile::TempDir,
    url: String,
    journal: SqliteJournal,
}

async fn open() -> Db {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("journal.db").display());
    let journal = SqliteJournal::connect(&SqliteJournalOptions::new(url.clone()))
        .await
        .unwrap();
    sqlx::query(
        "CREATE TABLE balance (persistence_id TEXT PRIMARY KEY, total INTEGER NOT NULL);
         CREATE TABLE handled (persistence_id TEXT NOT NULL, seq_nr INTEGER NOT NULL);",
    )
    .execute(journal.writer_pool())
    .await
    .unwrap();
    Db {
        _dir: dir,
        url,
        journal,
    }
}

impl Db {
    fn store(&self) -> SqliteOffsetStore {
        SqliteOffsetStore::new(self.journal.writer_pool().clone())
    }

    /// A current source over every slice of `entity_type`.
    fn entity_source(&self, entity_type: &str) -> QuerySource<Deposited> {
        QuerySource::events_by_slices(
            ReadJournal::new(self.journal.clone(), query_settings()),
            entity_type,
            0,
            1023,
        )
        .current()
    }

    /// A current source over slices `min..=max`.
    fn range_source(&self, min: u16, max: u16) -> QuerySource<Deposited> {
        QuerySource::events_by_slices(
            ReadJournal::new(self.journal.clone(), query_settings()),
            "Account",
            min,
            max,
        )
        .current()
    }

    fn source(&self, live: bool) -> QuerySource<Deposited> {
        let source = QuerySource::events_by_slices(
            ReadJournal::new(self.journal.clone(), query_settings()),
            "Account",
            0,
            1023,
        );
        if live {
            source
        } else {
            source.current()
        }
    }

    fn pool(&self) -> &SqlitePool {
        self.journal.writer_pool()
    }

    /// The stored owner epoch of [`id`], read on a connection of its own (the writer
    /// connection may be inside a projection's transaction).
    async fn owner_epoch(&self) -> i64 {
        let reader = SqlitePool::connect(&self.url).await.unwrap();
        let epoch = sqlx::query_scalar(
            "SELECT COALESCE(MAX(owner_epoch), 0) FROM projection_owner \
             WHERE projection_name = 'balance'",
        )
        .fetch_one(&reader)
        .await
        .unwrap();
        reader.close().await;
        epoch
    }

    /// Rows in `projection_seen`, by SQL.
    async fn seen_rows(&self) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM projection_seen")
            .fetch_one(self.pool())
            .await
            .unwrap()
    }

    /// Every row of `handled`: (persistence id, seq_nr).
    async fn handled(&self) -> Vec<(String, u64)> {
        let rows: Vec<(String, i64)> = sqlx::query_as("SELECT persistence_id, seq_nr FROM handled")
            .fetch_all(self.pool())
            .await
            .unwrap();
        rows.into_iter()
            .map(|(pid, seq_nr)| (pid, seq_nr as u64))
            .collect()
    }

    /// (rows in `handled`, distinct (id, seq_nr) among them, sum of balances).
    async fn read_model(&self) -> (i64, i64, i64) {
        let row = sqlx::query(
            "SELECT (SELECT COUNT(*) FROM handled),
                    (SELECT COUNT(*) FROM (SELECT DISTINCT persistence_id, seq_nr FROM handled)),
                    (SELECT COALESCE(SUM(total), 0) FROM balance)",
        )
        .fetch_one(self.pool())
        .await
        .unwrap();
        (row.get(0), row.get(1), row.get(2))
    }
}

async fn apply(tx: &mut Transaction<'static, Sqlite>, envelope: &Env) -> Result<(), HandlerError> {
    sqlx::query("INSERT INTO handled (persistence_id, seq_nr) VALUES (?, ?)")
        .bind(&*envelope.persistence_id)
        .bind(envelope.seq_nr as i64)
        .execute(&mut **tx)
        .await?;
    sqlx::query(
        "INSERT INTO balance (persistence_id, total) VALUES (?, ?)
         ON CONFLICT (persistence_id) DO UPDATE SET total = total + excluded.total",
    )
    .bind(&*envelope.persistence_id)
    .bind(envelope.event.amount as i64)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Writes the read model; fails once, after writing, on (Account|1, 2) when `fail_once`.
#[derive(Clone, Default)]
struct ReadModel {
    fail_once: bool,
    failed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Calls wait here after writing, inside their transaction.
    gate: Option<CallGate>,
    /// Fails every call on this envelope, after writing.
    poison: Poison,
}

impl ReadModel {
    fn should_fail(&self, envelope: &Env) -> bool {
        self.fail_once
            && *envelope.persistence_id == *pid(1)
            && envelope.seq_nr == 2
            && !self.failed.swap(true, std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait]
impl TransactionalHandler<Env, Transaction<'static, Sqlite>> for ReadModel {
    async fn process(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        envelope: &Env,
    ) -> Result<(), HandlerError> {
        apply(tx, envelope).await?;
        if let Some(gate) = &self.gate {
            gate.pass().await;
        }
        if self.should_fail(envelope) {
            return Err("fails after writing: the transaction must roll back".into());
        }
        self.poison.check(envelope)?;
        Ok(())
    }
}

#[async_trait]
impl TransactionalGroupedHandler<Env, Transaction<'static, Sqlite>> for ReadModel {
    async fn process(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        envelopes: &[Env],
    ) -> Result<(), HandlerError> {
        for envelope in envelopes {
            apply(tx, envelope).await?;
        }
        if envelopes.iter().any(|e| self.should_fail(e)) {
            return Err("fails after writing the group: the transaction must roll back".into());
        }
        Ok(())
    }
}

/// Sum of amounts of `ids` ids with `per_id` events each (amount = seq_nr).
fn expected_total(ids: usize, per_id: u64) -> i64 {
    (ids as u64 * per_id * (per_id + 1) / 2) as i64
}

fn id() -> ProjectionId {
    ProjectionId::for_slices("balance", 0, 1023)
}

#[tokio::test]
async fn offsets_and_seen_seq_nrs_round_trip_and_reset() {
    let db = open().await;
    let store = db.store();
    assert_eq!(store.read_offset(&id()).await.unwrap(), None);
    let epoch = store.take_ownership(&id(), None).await.unwrap();
    assert_eq!(epoch, 1);
    store
        .save_offset(&id(), epoch, "{\"a\":1}", &[])
        .await
        .unwrap();
    store
        .save_offset(&id(), epoch, "{\"a\":2}", &[])
        .await
        .unwrap();
    assert_eq!(
        store.read_offset(&id()).await.unwrap().as_deref(),
        Some("{\"a\":2}")
    );
    let other = ProjectionId::for_slices("balance", 512, 1023);
    assert_eq!(store.read_offset(&other).await.unwrap(), None);

    let mut tx = store.begin(&id()).await.unwrap();
    store
        .save_in(
            &mut tx,
            &id(),
            epoch,
            None,
            &[("p".into(), 5), ("q".into(), 2)],
        )
        .await
        .unwrap();
    store.commit(tx, &id()).await.unwrap();
    let mut tx = store.begin(&id()).await.unwrap();
    store
        .save_in(&mut tx, &id(), epoch, Some("{\"a\":3}"), &[("p".into(), 3)])
        .await
        .unwrap();
    drop(tx); // rolled back
    let seen = store.read_seen(&id()).await.unwrap();
    assert_eq!(
        (seen["p"], seen["q"]),
        (5, 2),
        "never lowered, rollback kept nothing"
    );
    assert_eq!(
        store.read_offset(&id()).await.unwrap().as_deref(),
        Some("{\"a\":2}")
    );

    store.reset(&id()).await.unwrap();
    assert_eq!(store.read_offset(&id()).await.unwrap(), None);
    assert!(store.read_seen(&id()).await.unwrap().is_empty());
}

#[tokio::test]
async fn exactly_once_read_model_and_offset_agree_after_a_crash() {
    let db = open().await;
    write_many(&db.journal, 5, 6).await;
    let handle =
        Projection::exactly_once(id(), db.source(true), db.store(), ReadModel::default()).start();
    handle
        .wait_for(|p| p.handled >= 11)
        .await
        .expect("some handled");
    handle.abort().await;

    let state = Projection::exactly_once(id(), db.source(false), db.store(), ReadModel::default())
        .start()
        .join()
        .await;
    assert_eq!(state, ProjectionState::Completed);
    assert_eq!(db.read_model().await, (30, 30, expected_total(5, 6)));
}

#[tokio::test]
async fn a_failed_exactly_once_call_rolls_back_its_writes_before_the_retry() {
    let db = open().await;
    write_many(&db.journal, 3, 3).await;
    let handler = ReadModel {
        fail_once: true,
        ..ReadModel::default()
    };
    let handle = Projection::exactly_once(id(), db.source(false), db.store(), handler.clone())
        .with_handler_recovery(quick_recovery(1, AfterRetries::Fail))
        .start();
    assert_eq!(handle.join().await, ProjectionState::Completed);
    assert!(handler.failed.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(db.read_model().await, (9, 9, expected_total(3, 3)));
}

#[tokio::test]
async fn grouped_exactly_once_commits_each_group_with_its_offset() {
    let db = open().await;
    write_many(&db.journal, 4, 5).await;
    let handler = ReadModel {
        fail_once: true,
        ..ReadModel::default()
    };
    let grouping = Grouping {
        size: 6,
        within: Duration::from_millis(50),
    };
    let handle = Projection::grouped_exactly_once(
        id(),
        db.source(true),
        db.store(),
        grouping,
        handler.clone(),
    )
    .with_handler_recovery(quick_recovery(1, AfterRetries::Fail))
    .start();
    handle
        .wait_for(|p| p.handled >= 12)
        .await
        .expect("two groups");
    handle.abort().await;
    Projection::grouped_exactly_once(
        id(),
        db.source(false),
        db.store(),
        grouping,
        handler.clone(),
    )
    .start()
    .join()
    .await;
    assert!(handler.failed.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(db.read_model().await, (20, 20, expected_total(4, 5)));
}

#[tokio::test]
async fn exactly_once_with_max_concurrency_handles_every_event_once_across_a_crash() {
    let db = open().await;
    write_many(&db.journal, 8, 4).await;
    let never = SaveOffset {
        after_envelopes: 10_000,
        after: Duration::from_secs(3600),
    };
    let handle = Projection::exactly_once(id(), db.source(true), db.store(), ReadModel::default())
        .with_max_concurrency(8)
        .with_save_offset(never)
        .start();
    handle
        .wait_for(|p| p.handled >= 13)
        .await
        .expect("some handled");
    handle.abort().await;
    assert_eq!(db.store().read_offset(&id()).await.unwrap(), None);
    let rows = db.seen_rows().await;
    assert!(
        (1..=8).contains(&rows),
        "one seen row per id handled so far, not covered by any saved offset: {rows}"
    );

    Projection::exactly_once(id(), db.source(false), db.store(), ReadModel::default())
        .with_max_concurrency(8)
        .start()
        .join()
        .await;
    assert_eq!(db.read_model().await, (32, 32, expected_total(8, 4)));
    assert_eq!(
        db.seen_rows().await,
        0,
        "the final offset covers every seen row"
    );
}

#[tokio::test]
async fn forgotten_seen_rows_still_handle_every_event_once_across_a_crash() {
    let db = open().await;
    write_many(&db.journal, 8, 6).await;
    // Offsets saved (and seen rows forgotten) while calls run, then a crash mid-way.
    let every_3 = SaveOffset {
        after_envelopes: 3,
        after: Duration::from_secs(3600),
    };
    let handle = Projection::exactly_once(id(), db.source(true), db.store(), ReadModel::default())
        .with_max_concurrency(8)
        .with_save_offset(every_3)
        .start();
    handle
        .wait_for(|p| p.handled >= 25)
        .await
        .expect("some handled");
    handle.abort().await;

    Projection::exactly_once(id(), db.source(false), db.store(), ReadModel::default())
        .with_max_concurrency(8)
        .with_save_offset(every_3)
        .start()
        .join()
        .await;
    assert_eq!(db.read_model().await, (48, 48, expected_total(8, 6)));
    assert_eq!(db.seen_rows().await, 0);
}

#[tokio::test]
async fn seen_rows_are_forgotten_as_the_saved_offset_covers_them() {
    let db = open().await;
    write_many(&db.journal, 60, 3).await;
    let every_5 = SaveOffset {
        after_envelopes: 5,
        after: Duration::from_secs(3600),
    };
    let state = Projection::exactly_once(id(), db.source(false), db.store(), ReadModel::default())
        .with_max_concurrency(8)
        .with_save_offset(every_5)
        .start()
        .join()
        .await;
    assert_eq!(state, ProjectionState::Completed);
    assert_eq!(db.read_model().await, (180, 180, expected_total(60, 3)));
    assert_eq!(
        db.seen_rows().await,
        0,
        "60 ids handled, none left in flight"
    );
}

#[tokio::test]
async fn offset_store_forgets_the_seen_rows_its_offset_covers() {
    let db = open().await;
    common::offset_store_forgets_the_seen_rows_its_offset_covers(&db.store()).await;
}

#[tokio::test]
async fn offset_store_fences_older_owners() {
    let db = open().await;
    common::offset_store_fences_older_owners(&db.store()).await;
}

#[tokio::test]
async fn of_two_instances_the_older_is_fenced_and_its_writes_roll_back() {
    let db = open().await;
    write_many(&db.journal, 5, 6).await;
    let gate = CallGate::new(5);
    let older = Projection::exactly_once(
        id(),
        db.source(false),
        db.store(),
        ReadModel {
            gate: Some(gate.clone()),
            ..ReadModel::default()
        },
    )
    .start();
    // The older instance committed 5 envelopes and waits inside its 6th transaction, after
    // writing the read model.
    eventually(|| gate.waiting() == 1).await;
    let newer =
        Projection::exactly_once(id(), db.source(false), db.store(), ReadModel::default()).start();
    // The newer instance waits for SQLite's write lock (the older one's transaction holds
    // it): let the older one commit one transaction at a time until the newer took ownership.
    let mut rounds = 0;
    while db.owner_epoch().await < 2 {
        if gate.waiting() == 1 {
            gate.release(1);
        }
        rounds += 1;
        assert!(rounds < 20_000, "the newer instance never took ownership");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    gate.release(1000);

    let fenced = older
        .wait_for(|p| p.state == ProjectionState::Fenced)
        .await
        .expect("the older instance is fenced");
    assert!(
        fenced
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("taken over")),
        "{:?}",
        fenced.last_error
    );
    assert_eq!(older.join().await, ProjectionState::Fenced);
    assert_eq!(newer.join().await, ProjectionState::Completed);
    // Every event in the read model once: the older instance's write after the take-over was
    // rolled back with its offset.
    assert_eq!(db.read_model().await, (30, 30, expected_total(5, 6)));
}

#[tokio::test]
async fn a_rescaled_projection_resumes_every_slice_from_its_own_progress() {
    let db = open().await;
    common::a_rescaled_projection_resumes_every_slice_from_its_own_progress(
        &db.journal,
        |min, max| db.range_source(min, max),
        db.store(),
        |poison| ReadModel {
            poison,
            ..ReadModel::default()
        },
        || db.handled(),
    )
    .await;
}

#[tokio::test]
async fn a_projection_resumes_inside_one_timestamp() {
    let db = open().await;
    common::a_projection_resumes_inside_one_timestamp(
        &db.journal,
        |entity_type| db.entity_source(entity_type),
        db.store(),
        |poison| ReadModel {
            poison,
            ..ReadModel::default()
        },
        || db.handled(),
    )
    .await;
}

#[tokio::test]
async fn offset_store_lists_the_progress_of_every_key() {
    let db = open().await;
    common::offset_store_lists_the_progress_of_every_key(&db.store()).await;
}

#[tokio::test]
async fn an_offset_store_url_that_names_no_file_fails_to_open() {
    // SQLite would give each connection a temporary database: stored offsets lost.
    match SqliteOffsetStore::connect("sqlite:").await {
        Err(actix_persistence_projection::OffsetStoreError::Open {
            source: actix_persistence_sql::SqlStoreError::InvalidOption { option: "url", .. },
        }) => {}
        Err(other) => panic!("another error: {other:?}"),
        Ok(_) => panic!("an offset store without a database file"),
    }
}

#[tokio::test]
async fn an_old_key_hands_its_progress_over_only_to_a_key_without_an_offset() {
    let db = open().await;
    check_hand_over(&db.store(), "hand-over").await;
}

/// Writes the read model, but its first call on (Account|1, 2) also runs a statement that makes
/// SQLite end the transaction by itself (`INSERT OR ROLLBACK` on a conflict), as a full disk, an
/// I/O error or a trigger's `RAISE(ROLLBACK)` do.
#[derive(Clone, Default)]
struct RolledBackByTheDatabase {
    failed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait]
impl TransactionalHandler<Env, Transaction<'static, Sqlite>> for RolledBackByTheDatabase {
    async fn process(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        envelope: &Env,
    ) -> Result<(), HandlerError> {
        apply(tx, envelope).await?;
        if *envelope.persistence_id == *pid(1)
            && envelope.seq_nr == 2
            && !self.failed.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            // `balance` holds Account|1's row already: the conflict rolls the whole
            // transaction back, which sqlx's connection does not notice.
            sqlx::query("INSERT OR ROLLBACK INTO balance (persistence_id, total) VALUES (?, 0)")
                .bind(&*envelope.persistence_id)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }
}

/// After sqlx's SQLite worker (0.8) counts a transaction SQLite itself ended as still open, the
/// connection's next `BEGIN IMMEDIATE` fails ("invalid savepoint statement"): a connection in
/// that state must never be handed out again. Here it is the journal's one writer connection,
/// which the offset store shares: the retry of the call, the offset saves and the journal's own
/// writes all used to fail on it until the process restarted (akka.net#7299's "one failed
/// write poisons the journal", through a projection's transaction).
#[tokio::test]
async fn a_transaction_the_database_rolled_back_does_not_poison_the_shared_writer_connection() {
    let db = open().await;
    write_many(&db.journal, 3, 3).await;
    let handler = RolledBackByTheDatabase::default();
    let handle = Projection::exactly_once(id(), db.source(false), db.store(), handler.clone())
        .with_handler_recovery(quick_recovery(2, AfterRetries::Fail))
        .start();
    // A guard, not an order: without the fix the projection restarted for ever.
    let state = tokio::time::timeout(Duration::from_secs(30), handle.join())
        .await
        .expect("the projection completes");
    assert_eq!(state, ProjectionState::Completed);
    assert!(handler.failed.load(std::sync::atomic::Ordering::SeqCst));
    // Every event once, the rolled-back call's writes undone and done again by its retry.
    assert_eq!(db.read_model().await, (9, 9, expected_total(3, 3)));
    // The journal still writes on its (shared) writer connection.
    write_events(&db.journal, &pid(0), 4, 4).await;
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM journal")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(stored, 10);
}
