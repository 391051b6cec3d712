//! SQLite test databases: a file of its own per test, in a temporary directory removed on
//! drop.

use actix_persistence_sql::{
    SqlStoreError, SqliteJournal, SqliteJournalOptions, SqliteSnapshotStore, WriteStats,
};
use sqlx::sqlite::{SqlitePool, SqlitePoolOptions};
use sqlx::{Connection, Executor, Sqlite, SqliteConnection};
use tempfile::TempDir;

use super::{atomic, queue, write_all_ok, Pending, Setting, TestBackend};

/// A database file of one test (created when a journal first opens it).
pub struct SqliteDb {
    url: String,
    dir: TempDir,
}

impl SqliteDb {
    /// The directory holding the database file.
    pub fn dir(&self) -> &TempDir {
        &self.dir
    }

    async fn connection(&self) -> SqliteConnection {
        SqliteConnection::connect(&self.url)
            .await
            .expect("connect to the test database")
    }
}

/// Holds the write lock (`BEGIN IMMEDIATE`) from another connection: the writer waits at the
/// start of its transaction.
pub struct WriteLock(SqliteConnection);

impl TestBackend for SqliteDb {
    type Journal = SqliteJournal;
    type Snapshots = SqliteSnapshotStore;
    type Options = SqliteJournalOptions;
    type Outside = SqlitePool;
    type Hold = WriteLock;

    const COMMIT_REFUSAL: &'static str = "FOREIGN KEY";

    /// The journal's clock across deletes (migration 0010).
    const OWN_TABLES: &'static [&'static str] = &["journal_clock"];

    async fn create() -> Option<Self> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let url = format!("sqlite:{}", dir.path().join("journal.db").display());
        Some(SqliteDb { url, dir })
    }

    fn url(&self) -> &str {
        &self.url
    }

    fn options_at(url: &str, settings: &[Setting]) -> SqliteJournalOptions {
        let mut options = SqliteJournalOptions::new(url);
        for setting in settings {
            match *setting {
                Setting::MaxConnections(n) => options.max_connections = n,
                Setting::MaxBatchSize(n) => options.max_batch_size = n,
                Setting::ReplayBatchSize(n) => options.replay_batch_size = n,
                Setting::LockWait(wait) => options.busy_timeout = wait,
                Setting::AcquireTimeout(_) => {}
            }
        }
        options
    }

    async fn connect(options: &SqliteJournalOptions) -> Result<SqliteJournal, SqlStoreError> {
        SqliteJournal::connect(options).await
    }

    async fn connect_snapshots(
        options: &SqliteJournalOptions,
    ) -> Result<SqliteSnapshotStore, SqlStoreError> {
        SqliteSnapshotStore::connect(options).await
    }

    fn stats(journal: &SqliteJournal) -> WriteStats {
        journal.stats()
    }

    fn reads_in_use(journal: &SqliteJournal) -> u32 {
        journal.connections_in_use().reads
    }

    fn snapshot_store_of(journal: &SqliteJournal) -> SqliteSnapshotStore {
        journal.snapshot_store()
    }

    async fn close(journal: &SqliteJournal) {
        journal.close().await;
    }

    fn unreachable(&self) -> (String, &'static str) {
        let path = self.dir.path().join("no-such-dir").join("journal.db");
        (
            format!("sqlite:{}", path.display()),
            "unable to open database file",
        )
    }

    fn tags_literal(tags: &[&str]) -> String {
        format!(
            "'[{}]'",
            tags.iter()
                .map(|t| format!("\"{t}\""))
                .collect::<Vec<_>>()
                .join(",")
        )
    }

    async fn execute(&self, sql: &str) {
        super::execute::<Sqlite>(&self.url, sql).await;
    }

    async fn query_i64s(&self, sql: &str) -> Vec<i64> {
        super::select::<Sqlite, _>(&self.url, sql).await
    }

    async fn query_strings(&self, sql: &str) -> Vec<String> {
        super::select::<Sqlite, _>(&self.url, sql).await
    }

    async fn table_names(&self) -> Vec<String> {
        if !self.dir.path().join("journal.db").exists() {
            return Vec::new();
        }
        self.query_strings(
            "SELECT name FROM sqlite_master WHERE type = 'table' \
             AND name NOT LIKE 'sqlite%' AND name NOT LIKE '\\_sqlx%' ESCAPE '\\' \
             AND name <> 'actix_persistence_migrations' \
             ORDER BY name",
        )
        .await
    }

    async fn outside(&self) -> SqlitePool {
        SqlitePoolOptions::new()
            .max_connections(4)
            .connect(&self.url)
            .await
            .expect("connect to the test database")
    }

    async fn count_stored(outside: &SqlitePool, pid: &str, seq_nr: i64) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM journal WHERE persistence_id = ?1 AND seq_nr = ?2")
            .bind(pid)
            .bind(seq_nr)
            .fetch_one(outside)
            .await
            .expect("count")
    }

    /// The trigger inserts a row whose foreign key, deferred to commit time, has no parent.
    async fn fail_commits_with_marker(&self) {
        self.execute("CREATE TABLE commit_guard_parent (id INTEGER PRIMARY KEY)")
            .await;
        self.execute(
            "CREATE TABLE commit_guard (parent INTEGER \
             REFERENCES commit_guard_parent (id) DEFERRABLE INITIALLY DEFERRED)",
        )
        .await;
        self.execute(
            "CREATE TRIGGER refuse_marked AFTER INSERT ON journal \
             WHEN instr(NEW.payload, CAST('COMMIT-BOMB' AS BLOB)) > 0 \
             BEGIN INSERT INTO commit_guard (parent) VALUES (-1); END",
        )
        .await;
    }

    async fn fail_insert_of(&self, pid: &str, seq_nr: u64) {
        self.execute(&format!(
            "CREATE TRIGGER inject_fault BEFORE INSERT ON journal \
             WHEN NEW.persistence_id = '{pid}' AND NEW.seq_nr = {seq_nr} \
             BEGIN SELECT RAISE(ABORT, 'injected fault at {seq_nr}'); END"
        ))
        .await;
    }

    /// Another connection holds the write lock, so the writer's transaction cannot begin: the
    /// writer has taken the call into a batch and waits (up to the busy timeout) at its
    /// `BEGIN IMMEDIATE`.
    async fn hold_writer(&self, journal: &SqliteJournal) -> (WriteLock, Pending) {
        write_all_ok(journal, vec![atomic("blocker", 1..=1)]).await;
        let mut lock = self.connection().await;
        lock.execute("BEGIN IMMEDIATE")
            .await
            .expect("take the write lock");
        let mut blocked = queue(journal, vec![atomic("blocker", 2..=2)]).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
            assert!(futures::poll!(&mut blocked).is_pending());
        }
        (WriteLock(lock), blocked)
    }

    async fn release(hold: WriteLock) {
        let WriteLock(mut lock) = hold;
        lock.execute("COMMIT")
            .await
            .expect("release the write lock");
        lock.close().await.expect("close");
    }
}
