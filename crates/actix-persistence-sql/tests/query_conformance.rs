//! The query conformance suite (Q1-Q14) of `actix-persistence-testkit` against the SQL stores:
//! SQLite, and PostgreSQL (a throwaway database per case; skipped with a notice without
//! DATABASE_URL).

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

#[cfg(feature = "test-util")]
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
