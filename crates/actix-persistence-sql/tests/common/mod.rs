//! Helpers shared by the SQL store tests: a database of its own per test on either backend
//! behind one trait ([`TestBackend`]), so that a test body written once runs on SQLite and on
//! PostgreSQL ([`backend_tests!`]); events with known payloads; replays collected into plain
//! values.
//!
//! PostgreSQL tests get a throwaway database from `actix_persistence_sql::test_util` (feature
//! `test-util`): without `DATABASE_URL` they print "skipped: DATABASE_URL not set" and pass,
//! except in CI (`CI` set), where they fail.
#![allow(dead_code)] // each test file uses a different subset

#[cfg(all(feature = "test-util", has_database_url))]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

use std::future::Future;
use std::ops::RangeInclusive;
use std::pin::Pin;
use std::time::Duration;

use actix_persistence_core::{
    AtomicWrite, AtomicWriteError, AtomicWriteResult, JournalError, JournalStore, PersistentRepr,
    SnapshotStore,
};
use actix_persistence_sql::{SqlStoreError, WriteStats};
use futures::TryStreamExt;
use sqlx::{Connection, Database, Executor, FromRow, IntoArguments};

/// An option both journals have, for [`TestBackend::options`].
#[derive(Debug, Clone, Copy)]
pub enum Setting {
    MaxConnections(u32),
    MaxBatchSize(u32),
    ReplayBatchSize(u32),
    /// How long a statement waits for a lock: SQLite's `busy_timeout`, PostgreSQL's
    /// `statement_timeout`.
    LockWait(Duration),
    /// How long an operation waits for a connection of a pool (PostgreSQL's
    /// `acquire_timeout`; SQLite's journal has no such option and ignores it).
    AcquireTimeout(Duration),
}

/// A database of one test, on one backend, and what the backend-generic tests need of it.
#[allow(async_fn_in_trait)]
pub trait TestBackend: Sized + Send + Sync + 'static {
    type Journal: actix_persistence_core::query::QueryStore + Clone;
    type Snapshots: SnapshotStore;
    type Options: Clone + Send + 'static;
    /// A pool of connections outside any journal, for looking at what is stored.
    type Outside: Clone + Send + Sync + 'static;
    /// A lock that holds the journal's writer (see [`hold_writer`](Self::hold_writer)).
    type Hold;

    /// What the failing commit of [`fail_commits_with_marker`](Self::fail_commits_with_marker)
    /// says.
    const COMMIT_REFUSAL: &'static str;

    /// The tables this backend's migrations create beyond those both create.
    const OWN_TABLES: &'static [&'static str];

    /// A fresh, empty database of its own; `None` when the backend cannot run here.
    async fn create() -> Option<Self>;

    /// The database's URL.
    fn url(&self) -> &str;

    /// Journal options for the database at `url`: the defaults (with a small pool) changed by
    /// `settings`.
    fn options_at(url: &str, settings: &[Setting]) -> Self::Options;

    /// Journal options for this database.
    fn options(&self, settings: &[Setting]) -> Self::Options {
        Self::options_at(self.url(), settings)
    }

    async fn connect(options: &Self::Options) -> Result<Self::Journal, SqlStoreError>;

    async fn connect_snapshots(options: &Self::Options) -> Result<Self::Snapshots, SqlStoreError>;

    /// A journal with the default options (but a small pool).
    async fn journal(&self) -> Self::Journal {
        self.journal_with(&[]).await
    }

    /// A journal with the options changed by `settings`.
    async fn journal_with(&self, settings: &[Setting]) -> Self::Journal {
        Self::connect(&self.options(settings))
            .await
            .expect("connect to the test database")
    }

    /// A snapshot store of its own on this database.
    async fn snapshots(&self) -> Self::Snapshots {
        Self::connect_snapshots(&self.options(&[]))
            .await
            .expect("connect to the test database")
    }

    fn stats(journal: &Self::Journal) -> WriteStats;

    /// Reader connections of the journal checked out right now.
    fn reads_in_use(journal: &Self::Journal) -> u32;

    fn snapshot_store_of(journal: &Self::Journal) -> Self::Snapshots;

    async fn close(journal: &Self::Journal);

    /// A URL of this backend that cannot be opened, and what the error says about why.
    fn unreachable(&self) -> (String, &'static str);

    /// Runs one statement (test setup such as a trigger) on a connection of its own.
    async fn execute(&self, sql: &str);

    /// The SQL literal of an event's `tags` column holding `tags` (a JSON array on SQLite, a
    /// `TEXT[]` on PostgreSQL); the tags are plain words.
    fn tags_literal(tags: &[&str]) -> String;

    /// The integers `sql` (valid on both databases) selects, on a connection of its own.
    async fn query_i64s(&self, sql: &str) -> Vec<i64>;

    /// The strings `sql` (valid on both databases) selects, on a connection of its own.
    async fn query_strings(&self, sql: &str) -> Vec<String>;

    /// The names of the tables, in order (none before a journal was first opened).
    async fn table_names(&self) -> Vec<String>;

    async fn outside(&self) -> Self::Outside;

    /// How many rows of `pid` at `seq_nr` another connection sees.
    fn count_stored<'a>(
        outside: &'a Self::Outside,
        pid: &'a str,
        seq_nr: i64,
    ) -> impl Future<Output = i64> + Send + 'a;

    /// Makes every COMMIT fail whose transaction inserted an event with a payload holding
    /// `COMMIT-BOMB`, with an error saying [`COMMIT_REFUSAL`](Self::COMMIT_REFUSAL).
    async fn fail_commits_with_marker(&self);

    /// Makes the database refuse to insert event `seq_nr` of `pid` with an error saying
    /// `injected fault at <seq_nr>`.
    async fn fail_insert_of(&self, pid: &str, seq_nr: u64);

    /// Writes `blocker` seq 1, then holds the journal's writer in the batch of a call writing
    /// `blocker` seq 2 until [`release`](Self::release); returns the hold and that call. The
    /// writer waits for a lock, so give the journal a long [`Setting::LockWait`].
    async fn hold_writer(&self, journal: &Self::Journal) -> (Self::Hold, Pending);

    /// Releases the writer held by [`hold_writer`](Self::hold_writer).
    async fn release(hold: Self::Hold);
}

/// Runs `test` against a fresh database of backend `B`; returns at once when `B` cannot run
/// here. The database is dropped afterwards, also when the test panics.
pub async fn run<B, F, Fut>(test: F)
where
    B: TestBackend,
    F: FnOnce(B) -> Fut,
    Fut: Future<Output = ()>,
{
    if let Some(db) = B::create().await {
        test(db).await;
    }
}

/// Runs each named backend-generic test body (`async fn name<B: TestBackend>(db: B)`) once
/// on SQLite (module `sqlite`) and once on PostgreSQL (module `postgres`). A name may be
/// preceded by its `#[tokio::test(...)]` arguments.
#[allow(unused_macros)] // not every test file runs backend-generic tests
macro_rules! backend_tests {
    ($($(#[tokio::test $args:tt])? $name:ident),* $(,)?) => {
        #[cfg(feature = "sqlite")]
        mod sqlite {
            $($crate::common::backend_test!([$($args)?] $name, $crate::common::sqlite::SqliteDb);)*
        }

        #[cfg(all(feature = "test-util", has_database_url))]
        mod postgres {
            $($crate::common::backend_test!(
                [$($args)?] $name, $crate::common::postgres::PostgresDb
            );)*
        }

        /// Without `DATABASE_URL` the PostgreSQL half of this file is not compiled: one line
        /// says so instead of tests that pass without running.
        #[cfg(all(feature = "test-util", not(has_database_url)))]
        #[test]
        #[ignore = "PostgreSQL tests skipped: set DATABASE_URL to run them"]
        fn postgres_tests_skipped_without_database_url() {}
    };
}
#[allow(unused_imports)]
pub(crate) use backend_tests;

/// One test of [`backend_tests!`].
#[allow(unused_macros)]
macro_rules! backend_test {
    ([] $name:ident, $backend:ty) => {
        #[tokio::test]
        async fn $name() {
            $crate::common::run(super::$name::<$backend>).await;
        }
    };
    ([$args:tt] $name:ident, $backend:ty) => {
        #[tokio::test $args]
        async fn $name() {
            $crate::common::run(super::$name::<$backend>).await;
        }
    };
}
#[allow(unused_imports)]
pub(crate) use backend_test;

/// Runs one statement (test setup) on a connection of its own to `url`.
pub async fn execute<DB>(url: &str, sql: &str)
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let mut conn = DB::Connection::connect(url)
        .await
        .expect("connect to the test database");
    conn.execute(sql).await.expect("test setup statement");
    conn.close().await.expect("close");
}

/// The values `sql` selects (one column), on a connection of its own to `url`.
pub async fn select<DB, T>(url: &str, sql: &str) -> Vec<T>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    (T,): for<'r> FromRow<'r, DB::Row>,
    T: Send + Unpin,
{
    let mut conn = DB::Connection::connect(url)
        .await
        .expect("connect to the test database");
    let values = sqlx::query_scalar(sql)
        .fetch_all(&mut conn)
        .await
        .expect("test query");
    conn.close().await.expect("close");
    values
}

/// A `write_messages` call in progress.
pub type Pending =
    Pin<Box<dyn Future<Output = Result<Vec<AtomicWriteResult>, JournalError>> + Send>>;

/// Starts a `write_messages` call and polls it once, so its writes are queued; the call is
/// still waiting for its transaction. On the tests' single-threaded runtime the writer task
/// runs only when the test awaits, so calls queued one after the other share a transaction.
pub async fn queue<J: JournalStore + Clone>(journal: &J, writes: Vec<AtomicWrite>) -> Pending {
    let journal = journal.clone();
    let mut call: Pending = Box::pin(async move { journal.write_messages(writes).await });
    assert!(
        futures::poll!(&mut call).is_pending(),
        "the call waits for its transaction"
    );
    call
}

/// Event `seq_nr` of `pid`, with payload `a-<seq_nr>`.
pub fn event(pid: &str, seq_nr: u64) -> PersistentRepr {
    event_with_payload(pid, seq_nr, format!("a-{seq_nr}").as_bytes())
}

/// Event `seq_nr` of `pid` with the given payload.
pub fn event_with_payload(pid: &str, seq_nr: u64, payload: &[u8]) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload: payload.to_vec(),
        serializer_id: 1,
        manifest: "Event".to_owned(),
        writer_uuid: "writer-1".into(),
        timestamp: 1_700_000_000_000 + (seq_nr % 1_000_000) as i64,
        tags: Default::default(),
    }
}

/// One atomic write of the events `seq_nrs` of `pid`.
pub fn atomic(pid: &str, seq_nrs: RangeInclusive<u64>) -> AtomicWrite {
    AtomicWrite::new(seq_nrs.map(|n| event(pid, n)).collect()).expect("well-shaped write")
}

/// Asserts that every atomic write succeeded.
pub fn assert_all_ok(results: &[AtomicWriteResult]) {
    for (i, result) in results.iter().enumerate() {
        assert!(result.is_ok(), "atomic write {i} failed: {result:?}");
    }
}

/// Writes a batch and asserts that every atomic write of it succeeded.
pub async fn write_all_ok(journal: &impl JournalStore, writes: Vec<AtomicWrite>) {
    let count = writes.len();
    let results = journal
        .write_messages(writes)
        .await
        .expect("batch succeeds");
    assert_eq!(results.len(), count, "one result per atomic write");
    assert_all_ok(&results);
}

/// The conformance setup: seq 1..5 of `pid` written as atomic writes 1, 2, 3 and [4, 5].
pub async fn write_one_to_five(journal: &impl JournalStore, pid: &str) {
    write_all_ok(
        journal,
        vec![
            atomic(pid, 1..=1),
            atomic(pid, 2..=2),
            atomic(pid, 3..=3),
            atomic(pid, 4..=5),
        ],
    )
    .await;
}

/// Replays and collects the events.
pub async fn replay_events(
    journal: &impl JournalStore,
    pid: &str,
    from: u64,
    to: u64,
    max: u64,
) -> Vec<PersistentRepr> {
    journal
        .replay_messages(pid, from, to, max)
        .try_collect()
        .await
        .expect("replay succeeds")
}

/// What a recovery sees: the replayed sequence numbers, then the highest sequence number.
pub async fn recover(
    journal: &impl JournalStore,
    pid: &str,
    from: u64,
    to: u64,
    max: u64,
) -> (Vec<u64>, u64) {
    let events = replay_events(journal, pid, from, to, max).await;
    for event in &events {
        assert_eq!(&*event.persistence_id, pid);
        assert_eq!(event.payload, format!("a-{}", event.seq_nr).into_bytes());
    }
    let highest = journal
        .read_highest_sequence_nr(pid, from)
        .await
        .expect("highest sequence number");
    (events.iter().map(|e| e.seq_nr).collect(), highest)
}

/// The sequence number of a `ConcurrentWrite` failure, or a panic naming what it was instead.
pub fn concurrent_write_seq_nr(result: &AtomicWriteResult, pid: &str) -> u64 {
    match result {
        Err(AtomicWriteError::Failed(JournalError::ConcurrentWrite {
            persistence_id,
            seq_nr,
        })) => {
            assert_eq!(persistence_id, pid);
            *seq_nr
        }
        other => panic!("expected a ConcurrentWrite failure, got {other:?}"),
    }
}

/// Asserts that `result` is a storage failure of the write whose message holds `expected`.
pub fn assert_write_failed_with(result: &AtomicWriteResult, expected: &str) {
    match result {
        Err(AtomicWriteError::Failed(JournalError::Storage { operation, source })) => {
            assert_eq!(*operation, "write");
            assert!(source.to_string().contains(expected), "{source}");
        }
        other => panic!("expected a storage failure saying {expected:?}, got {other:?}"),
    }
}
