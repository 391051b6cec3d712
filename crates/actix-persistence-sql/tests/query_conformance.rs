//! The query conformance suite (Q1-Q14) of `actix-persistence-testkit` against the SQL stores:
//! SQLite, and PostgreSQL (a throwaway database per case; compiled only with DATABASE_URL,
//! one ignored test without it).

use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions};
use actix_persistence_testkit::WithGuard;
use tempfile::TempDir;

async fn sqlite_journal() -> WithGuard<SqliteJournal, TempDir> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let url = format!("sqlite:{}", dir.path().join("journal.db").display());
    let journal = SqliteJournal::connect(&SqliteJournalOptions::new(url))
        .await
        .expect("connect");
    WithGuard::new(journal, dir)
}

mod sqlite {
    actix_persistence_testkit::query_conformance_tests!(super::sqlite_journal);
}

/// Without `DATABASE_URL` the PostgreSQL suite is not compiled: one line says so.
#[cfg(all(feature = "test-util", not(has_database_url)))]
#[test]
#[ignore = "PostgreSQL tests skipped: set DATABASE_URL to run them"]
fn postgres_tests_skipped_without_database_url() {}

#[cfg(all(feature = "test-util", has_database_url))]
mod postgres {
    use actix_persistence_sql::test_util::TestDatabase;
    use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions};
    use actix_persistence_testkit::WithGuard;

    pub async fn journal() -> Option<WithGuard<PostgresJournal, TestDatabase>> {
        let db = TestDatabase::create().await?;
        let options = PostgresJournalOptions {
            max_connections: 4,
            ..PostgresJournalOptions::new(db.url())
        };
        let journal = PostgresJournal::connect(&options).await.expect("connect");
        Some(WithGuard::new(journal, db))
    }

    mod journal {
        actix_persistence_testkit::query_conformance_tests!(optional: super::journal);
    }
}
