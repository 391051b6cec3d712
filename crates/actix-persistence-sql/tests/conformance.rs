//! The shared conformance suites of `actix-persistence-testkit` against the SQL stores: every
//! journal case (J1-J27, F1-F5 and the model check) and every snapshot case (S1-S14), on SQLite and
//! on PostgreSQL (a throwaway database per case; skipped with a notice without DATABASE_URL,
//! failing in CI).

use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions, SqliteSnapshotStore};
use actix_persistence_testkit::WithGuard;
use tempfile::TempDir;

async fn sqlite_options() -> (SqliteJournalOptions, TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let url = format!("sqlite:{}", dir.path().join("journal.db").display());
    (SqliteJournalOptions::new(url), dir)
}

async fn sqlite_journal() -> WithGuard<SqliteJournal, TempDir> {
    let (options, dir) = sqlite_options().await;
    let journal = SqliteJournal::connect(&options).await.expect("connect");
    WithGuard::new(journal, dir)
}

async fn sqlite_snapshots() -> WithGuard<SqliteSnapshotStore, TempDir> {
    let (options, dir) = sqlite_options().await;
    let store = SqliteSnapshotStore::connect(&options)
        .await
        .expect("connect");
    WithGuard::new(store, dir)
}

mod sqlite_journal {
    actix_persistence_testkit::journal_conformance_tests!(super::sqlite_journal);
}

mod sqlite_snapshots {
    actix_persistence_testkit::snapshot_store_conformance_tests!(super::sqlite_snapshots);
}

/// Without `DATABASE_URL` the PostgreSQL suites are not compiled: one line says so.
#[cfg(all(feature = "test-util", not(has_database_url)))]
#[test]
#[ignore = "PostgreSQL tests skipped: set DATABASE_URL to run them"]
fn postgres_tests_skipped_without_database_url() {}

#[cfg(all(feature = "test-util", has_database_url))]
mod postgres {
    use actix_persistence_sql::test_util::TestDatabase;
    use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions, PostgresSnapshotStore};
    use actix_persistence_testkit::WithGuard;

    fn options(db: &TestDatabase) -> PostgresJournalOptions {
        PostgresJournalOptions {
            max_connections: 4,
            ..PostgresJournalOptions::new(db.url())
        }
    }

    pub async fn journal() -> Option<WithGuard<PostgresJournal, TestDatabase>> {
        let db = TestDatabase::create().await?;
        let journal = PostgresJournal::connect(&options(&db))
            .await
            .expect("connect");
        Some(WithGuard::new(journal, db))
    }

    pub async fn snapshots() -> Option<WithGuard<PostgresSnapshotStore, TestDatabase>> {
        let db = TestDatabase::create().await?;
        let store = PostgresSnapshotStore::connect(&options(&db))
            .await
            .expect("connect");
        Some(WithGuard::new(store, db))
    }

    mod journal {
        actix_persistence_testkit::journal_conformance_tests!(optional: super::journal);
    }

    mod snapshots {
        actix_persistence_testkit::snapshot_store_conformance_tests!(optional: super::snapshots);
    }
}
