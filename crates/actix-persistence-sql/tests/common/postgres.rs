//! PostgreSQL test databases: each test runs against a database of its own
//! ([`TestDatabase`]), created on the server `DATABASE_URL` names and dropped afterwards (also
//! when the test panics), so tests never share state and run in any order.

use actix_persistence_sql::test_util::{url_with_database, TestDatabase};
use actix_persistence_sql::{
    PostgresJournal, PostgresJournalOptions, PostgresSnapshotStore, SqlStoreError, WriteStats,
};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{Connection, Executor, PgConnection, Postgres};

use super::{atomic, queue, write_all_ok, Pending, Setting, TestBackend};

/// A database of one test.
pub struct PostgresDb {
    db: TestDatabase,
}

impl PostgresDb {
    /// A plain connection of the test's own, outside any journal.
    pub async fn connection(&self) -> PgConnection {
        PgConnection::connect(self.db.url())
            .await
            .expect("connect to the test database")
    }
}

impl TestBackend for PostgresDb {
    type Journal = PostgresJournal;
    type Snapshots = PostgresSnapshotStore;
    type Options = PostgresJournalOptions;
    type Outside = PgPool;
    type Hold = WriterBlock;

    const COMMIT_REFUSAL: &'static str = "commit refused";

    const OWN_TABLES: &'static [&'static str] = &[];

    async fn create() -> Option<Self> {
        Some(PostgresDb {
            db: TestDatabase::create().await?,
        })
    }

    fn url(&self) -> &str {
        self.db.url()
    }

    /// A small pool (4 connections), everything else default unless `settings` say otherwise.
    fn options_at(url: &str, settings: &[Setting]) -> PostgresJournalOptions {
        let mut options = PostgresJournalOptions {
            max_connections: 4,
            ..PostgresJournalOptions::new(url)
        };
        for setting in settings {
            match *setting {
                Setting::MaxConnections(n) => options.max_connections = n,
                Setting::MaxBatchSize(n) => options.max_batch_size = n,
                Setting::ReplayBatchSize(n) => options.replay_batch_size = n,
                Setting::LockWait(wait) => options.statement_timeout = wait,
                Setting::AcquireTimeout(wait) => options.acquire_timeout = wait,
            }
        }
        options
    }

    async fn connect(options: &PostgresJournalOptions) -> Result<PostgresJournal, SqlStoreError> {
        PostgresJournal::connect(options).await
    }

    async fn connect_snapshots(
        options: &PostgresJournalOptions,
    ) -> Result<PostgresSnapshotStore, SqlStoreError> {
        PostgresSnapshotStore::connect(options).await
    }

    fn stats(journal: &PostgresJournal) -> WriteStats {
        journal.stats()
    }

    fn reads_in_use(journal: &PostgresJournal) -> u32 {
        journal.connections_in_use().reads
    }

    fn snapshot_store_of(journal: &PostgresJournal) -> PostgresSnapshotStore {
        journal.snapshot_store()
    }

    async fn close(journal: &PostgresJournal) {
        journal.close().await;
    }

    fn unreachable(&self) -> (String, &'static str) {
        (
            url_with_database(self.db.url(), "ap_test_does_not_exist"),
            "does not exist",
        )
    }

    fn tags_literal(tags: &[&str]) -> String {
        format!(
            "ARRAY[{}]::text[]",
            tags.iter()
                .map(|t| format!("'{t}'"))
                .collect::<Vec<_>>()
                .join(",")
        )
    }

    async fn execute(&self, sql: &str) {
        super::execute::<Postgres>(self.db.url(), sql).await;
    }

    async fn query_i64s(&self, sql: &str) -> Vec<i64> {
        super::select::<Postgres, _>(self.db.url(), sql).await
    }

    async fn query_strings(&self, sql: &str) -> Vec<String> {
        super::select::<Postgres, _>(self.db.url(), sql).await
    }

    async fn table_names(&self) -> Vec<String> {
        self.query_strings(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_name NOT LIKE '\\_sqlx%' \
             AND table_name <> 'actix_persistence_migrations' \
             ORDER BY table_name",
        )
        .await
    }

    async fn outside(&self) -> PgPool {
        PgPoolOptions::new()
            .max_connections(4)
            .connect(self.db.url())
            .await
            .expect("connect to the test database")
    }

    async fn count_stored(outside: &PgPool, pid: &str, seq_nr: i64) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM journal WHERE persistence_id = $1 AND seq_nr = $2")
            .bind(pid)
            .bind(seq_nr)
            .fetch_one(outside)
            .await
            .expect("count")
    }

    /// A constraint trigger deferred to commit time raises the error.
    async fn fail_commits_with_marker(&self) {
        self.execute(
            "CREATE FUNCTION refuse_marked() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN \
                 IF position(convert_to('COMMIT-BOMB', 'UTF8') IN NEW.payload) > 0 THEN \
                     RAISE EXCEPTION 'commit refused: % holds the marker', NEW.persistence_id; \
                 END IF; \
                 RETURN NULL; \
             END $$",
        )
        .await;
        self.execute(
            "CREATE CONSTRAINT TRIGGER refuse_marked AFTER INSERT ON journal \
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_marked()",
        )
        .await;
    }

    async fn fail_insert_of(&self, pid: &str, seq_nr: u64) {
        self.execute(
            "CREATE FUNCTION inject_fault() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'injected fault at %', NEW.seq_nr; END $$",
        )
        .await;
        self.execute(&format!(
            "CREATE TRIGGER inject_fault BEFORE INSERT ON journal FOR EACH ROW \
             WHEN (NEW.persistence_id = '{pid}' AND NEW.seq_nr = {seq_nr}) \
             EXECUTE FUNCTION inject_fault()"
        ))
        .await;
    }

    /// A row lock on `journal_highest` of `blocker`: the writer waits inside its transaction,
    /// seq 2 inserted but not committed.
    async fn hold_writer(&self, journal: &PostgresJournal) -> (WriterBlock, Pending) {
        write_all_ok(journal, vec![atomic("blocker", 1..=1)]).await;
        let mut block = WriterBlock::lock(self, "blocker").await;
        let blocked = queue(journal, vec![atomic("blocker", 2..=2)]).await;
        block.wait_until_writer_waits().await;
        (block, blocked)
    }

    async fn release(hold: WriterBlock) {
        hold.release().await;
    }
}

/// A row lock that makes the journal's writer wait inside its transaction: the writer raises
/// `journal_highest` of `pid` in the statement that inserts the events, so a write of `pid`
/// blocks there, its events inserted but not committed, until [`release`](Self::release).
pub struct WriterBlock {
    conn: PgConnection,
    /// The backend holding the lock.
    locker_pid: i32,
    /// A connection outside the lock's transaction, to watch the server from (activity views
    /// read inside a transaction may be a snapshot of its start).
    monitor: PgConnection,
}

impl WriterBlock {
    /// Locks `journal_highest` of `pid`, which must have written before.
    pub async fn lock(db: &PostgresDb, pid: &str) -> WriterBlock {
        let mut conn = db.connection().await;
        conn.execute("BEGIN").await.expect("begin");
        let locked: Vec<i64> = sqlx::query_scalar(
            "SELECT highest_seq_nr FROM journal_highest WHERE persistence_id = $1 FOR UPDATE",
        )
        .bind(pid)
        .fetch_all(&mut conn)
        .await
        .expect("lock the row");
        assert_eq!(locked.len(), 1, "{pid} must have written before");
        let locker_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut conn)
            .await
            .expect("backend pid");
        WriterBlock {
            conn,
            locker_pid,
            monitor: db.connection().await,
        }
    }

    /// Waits until another session waits for this lock: the writer reached the blocked
    /// statement. Polls the server (no sleep); fails after many rounds.
    pub async fn wait_until_writer_waits(&mut self) {
        for _ in 0..100_000 {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_locks \
                 WHERE NOT granted AND $1 = ANY (pg_blocking_pids(pid))",
            )
            .bind(self.locker_pid)
            .fetch_one(&mut self.monitor)
            .await
            .expect("read pg_locks");
            if waiting > 0 {
                return;
            }
            tokio::task::yield_now().await;
        }
        let sessions: Vec<(Option<String>, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT state, wait_event_type, query FROM pg_stat_activity \
             WHERE datname = current_database()",
        )
        .fetch_all(&mut self.monitor)
        .await
        .expect("read pg_stat_activity");
        panic!("the journal's writer never waited for the row lock; sessions: {sessions:?}");
    }

    /// Releases the lock: the writer goes on.
    pub async fn release(mut self) {
        self.conn.execute("COMMIT").await.expect("commit");
        self.conn.close().await.expect("close");
        self.monitor.close().await.expect("close");
    }
}
