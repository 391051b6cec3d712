//! The journal's migrations share a database with an application's own sqlx migrations, in
//! either order, because the journal keeps its own migration records
//! (`actix_persistence_migrations`) and leaves `_sqlx_migrations` to the application. The
//! application's migrations here even reuse the journal's version numbers (1 and 2).
#![cfg(any(feature = "sqlite", feature = "test-util"))]

mod common;

use std::path::Path;

use actix_persistence_core::JournalStore;
use actix_persistence_sql::{SqlStoreError, MIGRATIONS_TABLE};
use common::{atomic, backend_tests, write_all_ok, TestBackend};
use sqlx::migrate::{MigrateError, Migrator};

backend_tests! {
    journal_starts_where_the_application_ran_its_own_sqlx_migrations_first,
    application_migrations_run_after_the_journal_created_its_tables,
    journal_adopts_its_records_from_sqlx_migrations_of_an_earlier_version,
    journal_refuses_a_database_where_a_table_of_its_names_is_the_applications,
}

/// The application's own migrations: versions 1 and 2, as `sqlx migrate add` would number them.
async fn app_migrator(dir: &Path) -> Migrator {
    std::fs::write(
        dir.join("0001_create_customers.sql"),
        "CREATE TABLE customers (id BIGINT PRIMARY KEY, name TEXT NOT NULL);",
    )
    .expect("write migration");
    std::fs::write(
        dir.join("0002_create_orders.sql"),
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer BIGINT NOT NULL);",
    )
    .expect("write migration");
    Migrator::new(dir)
        .await
        .expect("the application's migrations")
}

/// Runs a migrator the way an application does, on a pool of the test database.
trait RunMigrator: TestBackend {
    async fn run(&self, migrator: &Migrator) -> Result<(), MigrateError>;
    /// The directory of the journal's own migrations, as an earlier version ran them.
    const JOURNAL_MIGRATIONS: &'static str;
}

#[cfg(feature = "sqlite")]
impl RunMigrator for common::sqlite::SqliteDb {
    async fn run(&self, migrator: &Migrator) -> Result<(), MigrateError> {
        let pool = sqlx::SqlitePool::connect(&format!("{}?mode=rwc", self.url()))
            .await
            .expect("connect");
        let result = migrator.run(&pool).await;
        pool.close().await;
        result
    }
    const JOURNAL_MIGRATIONS: &'static str = "migrations/sqlite";
}

#[cfg(all(feature = "test-util", has_database_url))]
impl RunMigrator for common::postgres::PostgresDb {
    async fn run(&self, migrator: &Migrator) -> Result<(), MigrateError> {
        let pool = sqlx::PgPool::connect(self.url()).await.expect("connect");
        let result = migrator.run(&pool).await;
        pool.close().await;
        result
    }
    const JOURNAL_MIGRATIONS: &'static str = "migrations/postgres";
}

async fn sqlx_versions<B: TestBackend>(db: &B) -> Vec<i64> {
    db.query_i64s("SELECT version FROM _sqlx_migrations ORDER BY version")
        .await
}

async fn journal_versions<B: TestBackend>(db: &B) -> Vec<i64> {
    db.query_i64s(&format!(
        "SELECT version FROM {MIGRATIONS_TABLE} ORDER BY version"
    ))
    .await
}

async fn journal_works<B: TestBackend>(db: &B) {
    let journal = db.journal().await;
    let highest = journal.read_highest_sequence_nr("p-1", 0).await.unwrap();
    write_all_ok(&journal, vec![atomic("p-1", highest + 1..=highest + 2)]).await;
    assert_eq!(
        journal.read_highest_sequence_nr("p-1", 0).await.unwrap(),
        highest + 2
    );
    B::close(&journal).await;
}

async fn journal_starts_where_the_application_ran_its_own_sqlx_migrations_first<B: RunMigrator>(
    db: B,
) {
    let dir = tempfile::tempdir().unwrap();
    let app = app_migrator(dir.path()).await;
    db.run(&app).await.expect("the application migrates first");

    journal_works(&db).await;
    // The application starts again: its records are untouched, so nothing clashes.
    db.run(&app).await.expect("the application migrates again");
    assert_eq!(sqlx_versions(&db).await, vec![1, 2]);
    assert!(!journal_versions(&db).await.is_empty());
    // And the journal starts again too.
    journal_works(&db).await;
}

async fn application_migrations_run_after_the_journal_created_its_tables<B: RunMigrator>(db: B) {
    journal_works(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let app = app_migrator(dir.path()).await;
    db.run(&app)
        .await
        .expect("the application migrates after the journal");
    assert_eq!(sqlx_versions(&db).await, vec![1, 2]);
    assert_eq!(
        db.query_i64s("SELECT COUNT(*) FROM customers").await,
        vec![0]
    );
    journal_works(&db).await;
}

async fn journal_adopts_its_records_from_sqlx_migrations_of_an_earlier_version<B: RunMigrator>(
    db: B,
) {
    // An earlier version ran the journal's migrations with sqlx's own bookkeeping.
    let earlier = Migrator::new(Path::new(B::JOURNAL_MIGRATIONS))
        .await
        .expect("the journal's migrations");
    db.run(&earlier)
        .await
        .expect("the earlier version migrates");
    let ours: Vec<i64> = earlier.iter().map(|m| m.version).collect();
    assert_eq!(sqlx_versions(&db).await, ours);

    journal_works(&db).await;
    assert_eq!(journal_versions(&db).await, ours);
    assert_eq!(sqlx_versions(&db).await, Vec::<i64>::new());

    // Now the application's own migrations, with the same version numbers, run.
    let dir = tempfile::tempdir().unwrap();
    db.run(&app_migrator(dir.path()).await)
        .await
        .expect("the application migrates after the adoption");
    journal_works(&db).await;
}

async fn journal_refuses_a_database_where_a_table_of_its_names_is_the_applications<
    B: RunMigrator,
>(
    db: B,
) {
    // The application keeps snapshots of its own, in a table named as the journal's (and as
    // Akka's JDBC plugin names its snapshot table).
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("0001_create_snapshot.sql"),
        "CREATE TABLE snapshot (id BIGINT PRIMARY KEY, body TEXT NOT NULL);",
    )
    .unwrap();
    db.run(&Migrator::new(dir.path()).await.unwrap())
        .await
        .expect("the application migrates first");

    let refused = B::connect(&B::options_at(db.url(), &[])).await;
    match refused {
        Err(SqlStoreError::ForeignTable { table }) => assert_eq!(table, "snapshot"),
        Err(other) => panic!("expected ForeignTable, got {other}"),
        Ok(_) => panic!("the journal must not take the application's table for its own"),
    }
    // Nothing of the journal's was created, and the application's table is as it was.
    assert_eq!(journal_versions(&db).await, Vec::<i64>::new());
    assert_eq!(
        db.query_i64s("SELECT COUNT(*) FROM snapshot").await,
        vec![0]
    );
    let refused = B::connect(&B::options_at(db.url(), &[])).await;
    assert!(
        matches!(refused, Err(SqlStoreError::ForeignTable { .. })),
        "refused again on the next start"
    );
}
