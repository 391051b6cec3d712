//! PostgreSQL test databases: each test runs against a database of its own, created on the
//! server `DATABASE_URL` names and dropped afterwards (also when the test panics), so tests
//! never share state and run in any order.
//!
//! Without `DATABASE_URL` a test prints "skipped: DATABASE_URL not set" and passes, except in
//! CI (`CI` set), where it fails: CI must run them.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions};
use futures::FutureExt;
use sqlx::{Connection, Executor, PgConnection};

/// A database of one test.
pub struct TestDb {
    /// Its name, `ap_test_<uuid>`.
    pub name: String,
    /// A URL reaching it.
    pub url: String,
}

impl TestDb {
    /// Journal options for this database: a small pool, everything else default.
    pub fn options(&self) -> PostgresJournalOptions {
        PostgresJournalOptions {
            max_connections: 4,
            ..PostgresJournalOptions::new(self.url.clone())
        }
    }

    /// A journal with the default options (but a small pool).
    pub async fn journal(&self) -> PostgresJournal {
        self.journal_with(|_| {}).await
    }

    /// A journal with options changed by `change`.
    pub async fn journal_with(
        &self,
        change: impl FnOnce(&mut PostgresJournalOptions),
    ) -> PostgresJournal {
        let mut options = self.options();
        change(&mut options);
        PostgresJournal::connect(&options)
            .await
            .expect("connect to the test database")
    }

    /// A plain connection of the test's own, outside any journal.
    pub async fn connect(&self) -> PgConnection {
        PgConnection::connect(&self.url)
            .await
            .expect("connect to the test database")
    }
}

/// `DATABASE_URL`, or `None` (after printing the notice) when it is not set outside CI.
///
/// # Panics
/// When `CI` is set and `DATABASE_URL` is not.
pub fn database_url() -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => panic!(
            "DATABASE_URL is not set but CI is: the PostgreSQL tests must run in CI \
             (export DATABASE_URL=postgres:///actix_persistence_test?host=/var/run/postgresql&user=postgres)"
        ),
        _ => {
            eprintln!("skipped: DATABASE_URL not set");
            None
        }
    }
}

/// `url` pointing at the database `name` on the same server (path replaced, any `dbname`
/// parameter dropped).
pub fn url_with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let mut out = format!("{}/{name}", &base[..path_start]);
    let params: Vec<&str> = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|pair| !pair.starts_with("dbname="))
        .collect();
    if !params.is_empty() {
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

/// Runs `test` against a fresh database of its own and drops the database afterwards, also
/// when the test panics (the panic then goes on). Returns at once, after the notice, when
/// `DATABASE_URL` is not set (outside CI).
pub async fn with_database<F, Fut>(test: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(server) = database_url() else {
        return;
    };
    let name = format!("ap_test_{}", uuid::Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(&server)
        .await
        .expect("connect to DATABASE_URL");
    admin
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .expect("create the test database");
    let db = TestDb {
        url: url_with_database(&server, &name),
        name: name.clone(),
    };
    let outcome = AssertUnwindSafe(test(db)).catch_unwind().await;
    // FORCE: connections of pools the test dropped may still be closing.
    admin
        .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
        .await
        .expect("drop the test database");
    admin.close().await.expect("close the admin connection");
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
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
    pub async fn lock(db: &TestDb, pid: &str) -> WriterBlock {
        let mut conn = db.connect().await;
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
            monitor: db.connect().await,
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
