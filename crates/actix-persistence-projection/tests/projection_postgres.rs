//! The PostgreSQL offset store, and exactly-once projections whose read model lives in the
//! journal's PostgreSQL database, sourced from the PostgreSQL journal's queries.

mod common;

use std::time::Duration;

use actix_persistence_core::query::ReadJournal;
use actix_persistence_projection::{
    AfterRetries, Grouping, HandlerError, OffsetStore, OffsetStoreError, PostgresOffsetStore,
    Projection, ProjectionId, ProjectionState, QuerySource, SaveOffset,
    TransactionalGroupedHandler, TransactionalHandler, TransactionalOffsetStore,
};
use actix_persistence_sql::test_util::TestDatabase;
use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions};
use async_trait::async_trait;
use common::*;
use sqlx::{PgPool, Postgres, Row, Transaction};

struct Db {
    _database: TestDatabase,
    journal: PostgresJournal,
}

async fn open() -> Option<Db> {
    let database = TestDatabase::create().await?;
    let journal = PostgresJournal::connect(&PostgresJournalOptions::new(database.url()))
        .await
        .unwrap();
    sqlx::raw_sql(
        "CREATE TABLE balance (persistence_id TEXT PRIMARY KEY, total BIGINT NOT NULL);
         CREATE TABLE handled (persistence_id TEXT NOT NULL, seq_nr BIGINT NOT NULL);",
    )
    .execute(journal.pool())
    .await
    .unwrap();
    Some(Db {
        _database: database,
        journal,
    })
}

impl Db {
    fn store(&self) -> PostgresOffsetStore {
        PostgresOffsetStore::of_journal(&self.journal)
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

    fn pool(&self) -> &PgPool {
        self.journal.pool()
    }

    /// The stored owner epoch of [`id`].
    async fn owner_epoch(&self) -> i64 {
        sqlx::query_scalar(
            "SELECT COALESCE(MAX(owner_epoch), 0)::BIGINT FROM projection_owner \
             WHERE projection_name = 'balance'",
        )
        .fetch_one(self.pool())
        .await
        .unwrap()
    }

    /// After `abort` (a crash inside this process): waits until no transaction of the aborted
    /// projection is still open or committing, as after a real crash once the server has
    /// closed the dead process's connections (see docs/projections.md, "Restarts").
    async fn settle(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            // An aborted projection's transaction task rolls back by itself (the runner never
            // leaves a transaction open on a pooled connection); a COMMIT on its way is
            // waited for.
            let open: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND pid <> pg_backend_pid() AND xact_start IS NOT NULL",
            )
            .fetch_one(self.pool())
            .await
            .unwrap();
            if open == 0 {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{open} transactions stay open"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Rows in `projection_seen`, by SQL.
    async fn seen_rows(&self) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*)::BIGINT FROM projection_seen")
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
                    (SELECT COUNT(*) FROM (SELECT DISTINCT persistence_id, seq_nr FROM handled) AS d),
                    (SELECT COALESCE(SUM(total), 0)::BIGINT FROM balance)",
        )
        .fetch_one(self.pool())
        .await
        .unwrap();
        (row.get(0), row.get(1), row.get(2))
    }
}

async fn apply(
    tx: &mut Transaction<'static, Postgres>,
    envelope: &Env,
) -> Result<(), HandlerError> {
    sqlx::query("INSERT INTO handled (persistence_id, seq_nr) VALUES ($1, $2)")
        .bind(&*envelope.persistence_id)
        .bind(envelope.seq_nr as i64)
        .execute(&mut **tx)
        .await?;
    sqlx::query(
        "INSERT INTO balance (persistence_id, total) VALUES ($1, $2)
         ON CONFLICT (persistence_id) DO UPDATE SET total = balance.total + excluded.total",
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
impl TransactionalHandler<Env, Transaction<'static, Postgres>> for ReadModel {
    async fn process(
        &self,
        tx: &mut Transaction<'static, Postgres>,
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
impl TransactionalGroupedHandler<Env, Transaction<'static, Postgres>> for ReadModel {
    async fn process(
        &self,
        tx: &mut Transaction<'static, Postgres>,
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
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn offsets_and_seen_seq_nrs_round_trip_and_reset() {
    let Some(db) = open().await else { return };
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
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn exactly_once_read_model_and_offset_agree_after_a_crash() {
    let Some(db) = open().await else { return };
    write_many(&db.journal, 5, 6).await;
    let handle =
        Projection::exactly_once(id(), db.source(true), db.store(), ReadModel::default()).start();
    handle
        .wait_for(|p| p.handled >= 11)
        .await
        .expect("some handled");
    handle.abort().await;
    db.settle().await;

    let state = Projection::exactly_once(id(), db.source(false), db.store(), ReadModel::default())
        .start()
        .join()
        .await;
    assert_eq!(state, ProjectionState::Completed);
    assert_eq!(db.read_model().await, (30, 30, expected_total(5, 6)));
}

#[tokio::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn a_failed_exactly_once_call_rolls_back_its_writes_before_the_retry() {
    let Some(db) = open().await else { return };
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
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn grouped_exactly_once_commits_each_group_with_its_offset() {
    let Some(db) = open().await else { return };
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
    db.settle().await;
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
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn exactly_once_with_max_concurrency_handles_every_event_once_across_a_crash() {
    let Some(db) = open().await else { return };
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
    db.settle().await;
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
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn forgotten_seen_rows_still_handle_every_event_once_across_a_crash() {
    let Some(db) = open().await else { return };
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
    db.settle().await;

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
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn seen_rows_are_forgotten_as_the_saved_offset_covers_them() {
    let Some(db) = open().await else { return };
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
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn an_offset_save_skips_a_seen_row_a_handler_transaction_holds_and_never_waits_for_it() {
    let Some(db) = open().await else { return };
    let store = db.store();
    let epoch = store.take_ownership(&id(), None).await.unwrap();
    let mut tx = store.begin(&id()).await.unwrap();
    let seen = [("p".to_owned(), 5), ("q".to_owned(), 3)];
    store
        .save_in(&mut tx, &id(), epoch, None, &seen)
        .await
        .unwrap();
    store.commit(tx, &id()).await.unwrap();

    // A handler's transaction in flight raises p (envelope p 9, past the offset): its row is
    // locked until it commits.
    let mut handler = store.begin(&id()).await.unwrap();
    store
        .save_in(&mut handler, &id(), epoch, None, &[("p".to_owned(), 9)])
        .await
        .unwrap();
    // The save covering p 5 and q 3 does not wait for it: it forgets q and leaves p.
    tokio::time::timeout(
        Duration::from_secs(10),
        store.save_offset(&id(), epoch, "{\"a\":1}", &seen),
    )
    .await
    .expect("the save never waits for a handler's row lock")
    .unwrap();
    store.commit(handler, &id()).await.unwrap();
    let left: Vec<(String, u64)> = store.read_seen(&id()).await.unwrap().into_iter().collect();
    assert_eq!(left, vec![("p".to_owned(), 9)]);
    assert_eq!(db.seen_rows().await, 1);
}

#[tokio::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn offset_store_forgets_the_seen_rows_its_offset_covers() {
    let Some(db) = open().await else { return };
    common::offset_store_forgets_the_seen_rows_its_offset_covers(&db.store()).await;
}

#[tokio::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn offset_store_fences_older_owners() {
    let Some(db) = open().await else { return };
    common::offset_store_fences_older_owners(&db.store()).await;
}

#[tokio::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn of_two_instances_the_older_is_fenced_and_its_writes_roll_back() {
    let Some(db) = open().await else { return };
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
    // The newer instance takes ownership at once (the older one locks the owner row only
    // when it saves its offset).
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
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn a_rescaled_projection_resumes_every_slice_from_its_own_progress() {
    let Some(db) = open().await else { return };
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

/// The database's backends die under a running exactly-once projection (the server stays
/// up): `pg_terminate_backend` on every connection of the test database while a call waits
/// inside its transaction, after writing the read model. The projection reports the
/// database's failure (a typed offset-store error in `last_error`), restarts from its stored
/// offset on fresh connections, and completes with every event in the read model once.
#[tokio::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn killed_database_connections_fail_the_run_which_resumes_exactly_once() {
    use sqlx::Connection;
    let Some(db) = open().await else { return };
    write_many(&db.journal, 6, 5).await;
    let gate = CallGate::new(9);
    let handle = Projection::exactly_once(
        id(),
        db.source(false),
        db.store(),
        ReadModel {
            gate: Some(gate.clone()),
            ..ReadModel::default()
        },
    )
    .with_max_concurrency(3)
    .with_restart_backoff(quick_restarts())
    .start();
    eventually(|| gate.waiting() > 0).await;
    let mut admin = sqlx::PgConnection::connect(db._database.url())
        .await
        .unwrap();
    let killed: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()) AS t",
    )
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert!(killed >= 1, "the waiting transaction's connection at least");
    admin.close().await.unwrap();
    gate.release(10_000);

    let progress = handle
        .wait_for(|p| p.state.is_terminal())
        .await
        .expect("ends");
    assert_eq!(progress.state, ProjectionState::Completed);
    assert!(progress.restarts >= 1, "{progress:?}");
    let error = progress.last_error.expect("the failure is reported");
    assert!(error.contains("database"), "{error}");
    assert_eq!(db.read_model().await, (30, 30, expected_total(6, 5)));
}

#[tokio::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn a_projection_resumes_inside_one_timestamp() {
    let Some(db) = open().await else { return };
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
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn offset_store_lists_the_progress_of_every_key() {
    let Some(db) = open().await else { return };
    common::offset_store_lists_the_progress_of_every_key(&db.store()).await;
}

#[tokio::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn an_old_key_hands_its_progress_over_only_to_a_key_without_an_offset() {
    let Some(db) = open().await else { return };
    check_hand_over(&db.store(), "hand-over").await;
}

/// At-least-once: records each envelope, and fails the first call on Account|1's first event.
#[derive(Clone, Default)]
struct FailsOnce {
    failed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    recorder: Recorder,
}

#[async_trait]
impl actix_persistence_projection::Handler<Env> for FailsOnce {
    async fn process(&self, envelope: &Env) -> Result<(), HandlerError> {
        if *envelope.persistence_id == *pid(1)
            && envelope.seq_nr == 1
            && !self.failed.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return Err("read model unavailable".into());
        }
        self.recorder.process(envelope).await
    }
}

/// A handler fails while the offset save under way waits for a row lock another session
/// holds on the projection's offset (an operator's `SELECT ... FOR UPDATE` left open), on an
/// offset store with a pool of its own (`connect`: no statement timeout): the failure is
/// reported at once, while the lock is held, instead of the projection showing `Running` with
/// no error for as long as the lock stays; once the lock is gone it restarts and handles the
/// failed event.
#[tokio::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn a_failure_while_an_offset_save_waits_for_a_lock_is_reported_at_once() {
    let Some(db) = open().await else { return };
    write_events(&db.journal, &pid(0), 1, 2).await;
    let handler = FailsOnce::default();
    let store = PostgresOffsetStore::connect(db._database.url(), 4)
        .await
        .unwrap();
    let handle = Projection::at_least_once(id(), db.source(true), store.clone(), handler.clone())
        .with_save_offset(SaveOffset {
            after_envelopes: 1,
            after: Duration::from_millis(1),
        })
        .with_handler_recovery(quick_recovery(0, AfterRetries::Fail))
        .with_restart_backoff(quick_restarts())
        .start();
    // The offset row exists once the first events are saved.
    let mut saved = false;
    for _ in 0..10_000 {
        if handler.recorder.handled().len() == 2
            && store.read_offset(&id()).await.unwrap().is_some()
        {
            saved = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(saved, "the first events are handled and saved");
    let mut locker = db.pool().begin().await.unwrap();
    sqlx::query(
        "SELECT current_offset FROM projection_offset WHERE projection_name = 'balance' \
         FOR UPDATE",
    )
    .fetch_all(&mut *locker)
    .await
    .unwrap();
    // Account|0's third event is handled and its save waits for the lock; Account|1's first
    // fails the run.
    write_events(&db.journal, &pid(0), 3, 3).await;
    write_events(&db.journal, &pid(1), 1, 1).await;
    let reported = tokio::time::timeout(
        Duration::from_secs(10),
        handle.wait_for(|p| p.last_error.is_some()),
    )
    .await;
    let progress = handle.progress();
    assert!(
        matches!(reported, Ok(Some(_))),
        "the failure is not reported while the save waits for the lock: {progress:?}"
    );
    locker.rollback().await.unwrap();
    let restarted = tokio::time::timeout(
        Duration::from_secs(10),
        handle.wait_for(|p| p.restarts >= 1 && p.state == ProjectionState::Running),
    )
    .await;
    assert!(matches!(restarted, Ok(Some(_))), "{:?}", handle.progress());
    eventually(|| handler.recorder.counts().contains_key(&(pid(1), 1))).await;
    assert_eq!(handle.stop().await, ProjectionState::Stopped);
}

#[tokio::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn an_offset_store_of_its_own_waits_for_a_lock_no_longer_than_its_statement_timeout() {
    let Some(db) = open().await else { return };
    let store = PostgresOffsetStore::connect(db._database.url(), 2)
        .await
        .unwrap();
    // Every connection of its pool: a save waiting on a row lock another session holds (the
    // projection's `stop` and `reset` wait for it) fails after the timeout, never hangs.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut conn = store.pool().acquire().await.unwrap();
        let timeout: String = sqlx::query_scalar("SHOW statement_timeout")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(timeout, "10s");
        held.push(conn);
    }
    assert_eq!(
        actix_persistence_projection::OFFSET_STATEMENT_TIMEOUT,
        Duration::from_secs(10)
    );
}

/// An offset store's pool above `MAX_POOL_CONNECTIONS` is refused before anything connects
/// (sqlx would take room for every connection of the pool; `u32::MAX` aborted the process).
#[tokio::test]
async fn an_offset_store_pool_above_the_ceiling_is_refused() {
    for max_connections in [actix_persistence_sql::MAX_POOL_CONNECTIONS + 1, u32::MAX] {
        // Nothing listens there: the check comes before any connection.
        match PostgresOffsetStore::connect("postgres://127.0.0.1:1/none", max_connections).await {
            Err(OffsetStoreError::Open {
                source:
                    actix_persistence_sql::SqlStoreError::InvalidOption {
                        option: "max_connections",
                        value,
                        ..
                    },
            }) => assert_eq!(value, max_connections.to_string()),
            Err(other) => panic!("{max_connections}: expected an invalid option, got {other}"),
            Ok(_) => panic!("{max_connections}: expected an invalid option, got a store"),
        }
    }
}

/// The offset store's reads from another Tokio runtime (a projection on an Actix arbiter)
/// leave no connection tied to that runtime in the journal's pool: while that runtime sits
/// idle (its I/O driver not polled) and after it shut down, the reads on the journal's own
/// runtime answer. `of_journal` acquires the store's connections on the journal's
/// `HomeRuntime`; a connection opened on the other runtime waited there until the pool's
/// acquire timeout.
#[tokio::test]
async fn offset_reads_from_another_runtime_leave_no_connection_tied_to_it() {
    let Some(db) = open().await else { return };
    let store = db.store();
    let id = ProjectionId::new("tied", "0");
    let epoch = store.take_ownership(&id, None).await.unwrap();
    store.save_offset(&id, epoch, "\"7\"", &[]).await.unwrap();
    let read_all = {
        let store = store.clone();
        move || {
            let (store, id) = (store.clone(), ProjectionId::new("tied", "0"));
            async move {
                let (offset, seen, owners, progress, tx) = futures::join!(
                    store.read_offset(&id),
                    store.read_seen(&id),
                    store.read_owners("tied"),
                    store.read_progress("tied"),
                    store.begin(&id),
                );
                tx.unwrap().rollback().await.unwrap();
                (
                    offset.unwrap(),
                    seen.unwrap().len(),
                    owners.unwrap().len(),
                    progress.unwrap().len(),
                )
            }
        }
    };
    let expected = (Some("\"7\"".to_owned()), 0, 1, 1);
    let (elsewhere, other) =
        actix_persistence_sql::test_util::run_on_another_runtime(read_all()).await;
    assert_eq!(elsewhere, expected);
    let within = |reads| async move {
        tokio::time::timeout(Duration::from_secs(20), reads)
            .await
            .expect("no read waits on the other runtime's I/O driver")
    };
    for round in 0..3 {
        assert_eq!(within(read_all()).await, expected, "idle, round {round}");
    }
    other.shut_down().await;
    for round in 0..3 {
        assert_eq!(within(read_all()).await, expected, "gone, round {round}");
    }
}
