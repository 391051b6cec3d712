//! The SQLite journal store: [`SqliteJournal`] and its [`SqliteJournalOptions`].

use std::borrow::Cow;
use std::future::Future;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

use actix_persistence_core::query::{
    entity_type_of, slice_for_persistence_id, wall_clock_micros, EventsRequest, QueryStore,
    StoredEvent, WriteNotifications, WriteNotifier,
};
use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, FencingToken, JournalError, JournalStore, Ownership,
    PersistentRepr, ReplayBounds, ReplayStream, Tags, WriteRejection,
};
use async_trait::async_trait;
use futures::future::BoxFuture;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{Connection, Sqlite, Transaction};

use crate::error::{ConnectFailure, SqlStoreError};
use crate::group_commit::{WriteStats, Writer, DEFAULT_MAX_BATCH_SIZE};
use crate::home_runtime::CALLER;
use crate::journal_common::{
    all_distinct, check_batch_sizes, check_max_connections, clamp_seq_nr, in_use,
    ownership_from_row, ownerships_in_order, rejection, token_to_sql, ConnectionsInUse, Dialect,
    JournalTables, SqlBackend, TAKE_OWNERSHIP,
};
use crate::page_row::{self, PageArg, RawPage};
use crate::sqlite_file::DatabaseFile;
use crate::sqlite_page;
use crate::sqlite_readers::ReaderThreads;
use crate::sqlite_snapshot::SqliteSnapshotStore;
use crate::DEFAULT_REPLAY_BATCH_SIZE;

/// The highest timestamp the journal gave an event: the highest stored, or of a deleted event
/// (`journal_clock`, kept by a trigger on delete: migration 0010). An insert's timestamp and a
/// query's clock never go below it, so a wall clock that steps back (or deletes of the newest
/// events) never give an event a timestamp below one a query delivered.
macro_rules! clock_floor {
    () => {
        "max(COALESCE((SELECT max(db_timestamp) FROM journal), 0), \
             COALESCE((SELECT last_timestamp FROM journal_clock WHERE id = 0), 0))"
    };
}

/// How far the events of the id `$id` (an SQL expression) were deleted, 0 for an id without a
/// `journal_highest` row: an insert skips the events numbered up to it, as it skips numbers
/// already stored (a deleted number stays used, conformance J29), and the caller sees it in
/// the number of rows inserted. One lookup of the id's row per event, in the insert's own
/// statement: +4,465 instructions per event of the write path, ~2,900 of them in SQLite's
/// engine (a `BEFORE INSERT` trigger doing the same cost +5,530, most of it copying the new
/// row into the trigger's frame; docs/benchmarks.md, session 16).
macro_rules! deleted_to {
    ($id:literal) => {
        concat!(
            "COALESCE((SELECT h.deleted_to FROM journal_highest h WHERE h.persistence_id = ",
            $id,
            "), 0)"
        )
    };
}

/// The journal's columns an insert fills, in the order [`bind_event`] binds them (the wall
/// clock's parameter becomes `db_timestamp`).
macro_rules! journal_insert_columns {
    () => {
        "INSERT INTO journal \
             (persistence_id, seq_nr, writer_uuid, write_timestamp, serializer_id, manifest, \
              payload, tags, db_timestamp, slice, entity_type) "
    };
}

/// How a raise of `journal_highest` meets an existing row: never lowered, and only where the
/// id's owner epoch is not above the write's fencing token.
macro_rules! raise_highest_on_conflict {
    () => {
        " ON CONFLICT (persistence_id) \
         DO UPDATE SET highest_seq_nr = max(highest_seq_nr, excluded.highest_seq_nr) \
         WHERE owner_epoch <= excluded.owner_epoch"
    };
}

/// The schema migrations under `migrations/sqlite/`, embedded at compile time, run by
/// [`crate::migrate`] with bookkeeping of their own.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// Default of [`SqliteJournalOptions::url`].
pub const DEFAULT_SQLITE_URL: &str = "sqlite:actix-persistence.db";

/// How [`SqliteJournal::connect`] opens the database.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// # use actix_persistence_sql as actix_persistence; // the paths of the facade, `actix-persistence`
/// use actix_persistence::SqliteJournalOptions;
///
/// let options = SqliteJournalOptions {
///     url: "sqlite:/var/lib/my-app/journal.db".to_owned(),
///     busy_timeout: Duration::from_secs(10),
///     ..SqliteJournalOptions::default()
/// };
/// assert_eq!(options.max_connections, 4);
/// assert_eq!(options.max_batch_size, 512);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteJournalOptions {
    /// The database, as a sqlx SQLite URL: `sqlite:path/to/file.db` (relative to the working
    /// directory at [`connect`](SqliteJournal::connect), resolved once: a later `chdir` does not
    /// move it), `sqlite:///absolute/path.db`, optionally with `?mode=...` and other sqlx
    /// parameters. The file is created when missing; its directory must exist. A URL that
    /// names no file (`sqlite:`) is refused ([`SqlStoreError::InvalidOption`]): SQLite would
    /// give each connection a temporary database of its own.
    ///
    /// `sqlite::memory:` works too (for tests), but nothing then survives the process.
    ///
    /// Default: `"sqlite:actix-persistence.db"`.
    pub url: String,
    /// Size of the pool of reading connections (highest sequence numbers, the database clock),
    /// and how many reader threads, each with a connection of its own, read the pages of
    /// replays and queries (started as pages wait for them; a database file named by a plain
    /// path only: see `docs/architecture.md`). Writes always go through one separate
    /// connection: SQLite has a single writer at a time. Must be at least 1.
    ///
    /// Default: 4.
    pub max_connections: u32,
    /// How long a statement waits for a lock held by another connection (or another process)
    /// before it fails with `SQLITE_BUSY`.
    ///
    /// Default: 5 s.
    pub busy_timeout: Duration,
    /// How many events a replay reads per query. A replay holds at most three pages in memory
    /// (the one being applied and the next two, read ahead meanwhile), however many events it
    /// returns. Must be at least 1.
    ///
    /// Default: 1,000 ([`DEFAULT_REPLAY_BATCH_SIZE`]).
    pub replay_batch_size: u32,
    /// Group commit: at most this many atomic writes, from any number of concurrent
    /// [`write_messages`](JournalStore::write_messages) calls, share one transaction (see
    /// [`SqliteJournal`]). 1 turns group commit off: every atomic write is then its own
    /// transaction, run by the calling task. Must be at least 1.
    ///
    /// Default: 512 ([`DEFAULT_MAX_BATCH_SIZE`]).
    pub max_batch_size: u32,
}

impl SqliteJournalOptions {
    /// The default options with another database URL.
    pub fn new(url: impl Into<String>) -> Self {
        SqliteJournalOptions {
            url: url.into(),
            ..Self::default()
        }
    }
}

impl Default for SqliteJournalOptions {
    fn default() -> Self {
        SqliteJournalOptions {
            url: DEFAULT_SQLITE_URL.to_owned(),
            max_connections: 4,
            busy_timeout: Duration::from_secs(5),
            replay_batch_size: DEFAULT_REPLAY_BATCH_SIZE,
            max_batch_size: DEFAULT_MAX_BATCH_SIZE,
        }
    }
}

/// A [`JournalStore`] in a SQLite database file.
///
/// Holds one single-connection pool for writes and deletes (SQLite has one writer at a time, so
/// writes queue in the process instead of failing with `SQLITE_BUSY`) and a pool of
/// [`max_connections`](SqliteJournalOptions::max_connections) connections for reads, which in
/// WAL mode never block on the writer. Cheap to clone: clones share both pools, the writer task
/// and the [`stats`](Self::stats).
///
/// # Group commit
/// Atomic writes that arrive while a transaction is in flight, from any number of concurrent
/// [`write_messages`](JournalStore::write_messages) calls (many persistent actors), wait in a
/// queue; when the transaction ends, a writer task stores up to
/// [`max_batch_size`](SqliteJournalOptions::max_batch_size) of them in the next transaction.
/// Under load one commit (one `fsync`) then stores many atomic writes. Each atomic write of a
/// batch runs in a savepoint of its own, so a write that fails (its sequence number is already
/// stored, or the database refuses one of its rows) is rolled back alone and the others commit.
/// With `max_batch_size` 1 there is no writer task: each atomic write is its own transaction,
/// run by the calling task.
///
/// # Guarantees
/// - **Durability**: atomic writes are stored in transactions (`BEGIN IMMEDIATE` ... `COMMIT`)
///   with `synchronous = FULL`. An event is durable once its transaction has committed, that is
///   when [`write_messages`](JournalStore::write_messages) returns `Ok(())` for its atomic
///   write: no success is ever reported before the commit returned. It then survives a crash
///   of the process or of the machine, and every later replay sees it. A database file deleted
///   (or moved) while the journal has it open fails every later write before its commit: SQLite
///   would write to the deleted file, lost at the next start.
/// - **Atomicity**: all events of an atomic write are stored, or none. A failed commit fails
///   every atomic write of its batch ([`AtomicWriteError::Failed`]) and stores none of them.
/// - **Order**: the atomic writes of one call are stored in the order given, calls in the order
///   they were made, and the results come back in call order, one per atomic write.
/// - **No overwrite**: a sequence number that is stored for the persistence id makes its atomic
///   write fail with [`JournalError::ConcurrentWrite`]; the stored event is kept.
/// - **Single writer (fencing)**: [`take_ownership`](JournalStore::take_ownership) raises the
///   id's owner epoch; a write with an older fencing token fails with [`JournalError::Fenced`]
///   and stores nothing. The check and the write hold SQLite's write lock together, across
///   processes sharing the file.
/// - **Highest sequence number**: kept per persistence id in its own table, updated in the
///   write's transaction, never lowered, not even by deletes.
/// - **Persistence ids** are byte-exact: SQLite's default `BINARY` collation compares them byte
///   for byte, so ids that differ only by case are different ids.
///
/// Sequence numbers are stored as SQLite `INTEGER`s, so at most `i64::MAX`: a write above it is
/// rejected, and replay and delete bounds above it mean "no bound".
///
/// [`AtomicWriteError::Failed`]: actix_persistence_core::AtomicWriteError::Failed
#[derive(Debug, Clone)]
pub struct SqliteJournal {
    pools: SqlitePools,
    writer: Writer<SqlBackend<SqliteDialect>>,
    replay_batch_size: u32,
    /// Wakes the live queries of this process after each commit.
    notifier: WriteNotifier,
}

/// The pools of one SQLite database: one writer connection, several readers, and the reader
/// threads that read pages (replays, queries) on connections of their own.
#[derive(Debug, Clone)]
pub(crate) struct SqlitePools {
    pub(crate) writer: SqlitePool,
    pub(crate) readers: SqlitePool,
    /// `None` for a database that is not a plain file path (see
    /// [`ReaderThreads::for_database`]).
    pub(crate) page_readers: Option<ReaderThreads>,
    /// The database file, checked before each commit (`None`: not a file, e.g. `:memory:`).
    pub(crate) file: Option<DatabaseFile>,
}

/// The SQLite journal's group-commit backend: its writer connection, checking before each
/// commit that the database file is still at its path (when it is a file).
fn sqlite_backend(pools: &SqlitePools) -> SqlBackend<SqliteDialect> {
    let backend = SqlBackend::new(pools.writer.clone());
    match pools.file.clone() {
        Some(file) => backend.checking_before_commit(Box::new(move || file.check_present())),
        None => backend,
    }
}

impl SqlitePools {
    /// Opens (and creates when missing) the database, turns on WAL mode, sets the busy timeout
    /// and brings the schema (journal and snapshots) up to date.
    pub(crate) async fn open(options: &SqliteJournalOptions) -> Result<Self, SqlStoreError> {
        check_max_connections(
            options.max_connections,
            "the reader pool needs at least one connection",
        )?;
        let connect_error = |source| SqlStoreError::connect(options.url.clone(), source);
        // SQLite takes the busy timeout in ms as a C int, and sqlx panics (on its worker
        // thread, failing the connect as a "crashed background worker") above that: a longer
        // one (25 days and more, e.g. "30d" for "wait as long as it takes") waits the longest
        // SQLite can, as the page readers do.
        let busy_timeout = options
            .busy_timeout
            .min(Duration::from_millis(i32::MAX as u64));
        let base = sqlite_connect_options(&options.url)?
            .busy_timeout(busy_timeout)
            .synchronous(SqliteSynchronous::Full);

        // The one writer lives as long as the pool: it also keeps a `sqlite::memory:` database
        // alive. Switching to WAL is persistent, so only the writer needs to ask for it, and it
        // connects first.
        // No ping before each acquire (sqlx's default): a local file needs no liveness check,
        // and the ping costs a round trip to the connection's worker thread per write.
        let writer = open_sqlite_pool(
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .test_before_acquire(false)
                .idle_timeout(None)
                .max_lifetime(None),
            base.clone()
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal),
            busy_timeout,
        )
        .await
        .map_err(|source| match missing_directory(&base) {
            Some(directory) => SqlStoreError::Connect {
                url: options.url.clone(),
                failure: ConnectFailure::NoDirectory { directory },
                source,
            },
            None => connect_error(source),
        })?;
        migrate_sqlite(&writer).await?;
        // A reader's worker thread hands rows over through a channel of this many; sqlx's
        // default (50) made a replay's page of 500 wait for the actor about ten times, each a
        // thread hand-off (a third of a replay's time in a profile). A page never waits now.
        let row_buffer = usize::try_from(options.replay_batch_size)
            .unwrap_or(usize::MAX)
            .clamp(50, 100_000);
        let page_readers = ReaderThreads::for_database(
            &options.url,
            base.get_filename(),
            options.max_connections,
            options.busy_timeout,
        );
        let file = DatabaseFile::at(base.get_filename());
        let readers = SqlitePoolOptions::new()
            .max_connections(options.max_connections)
            .test_before_acquire(false)
            .connect_with(base.row_buffer_size(row_buffer))
            .await
            .map_err(connect_error)?;
        Ok(SqlitePools {
            writer,
            readers,
            page_readers,
            file,
        })
    }

    pub(crate) async fn close(&self) {
        // The writer last, after it moved every page of the WAL into the database file and
        // removed the `-wal` and `-shm` files (WAL mode is turned on again at the next open).
        // A reader connection returned just before the close is closed by a task of sqlx's
        // own, so the switch is retried briefly while the file is still locked. Best effort:
        // with another process still using the file, the WAL stays, as it must.
        if let Some(page_readers) = &self.page_readers {
            page_readers.close().await;
        }
        self.readers.close().await;
        for attempt in 1..=50 {
            match sqlx::query_scalar::<_, String>("PRAGMA journal_mode = DELETE")
                .fetch_one(&self.writer)
                .await
            {
                Ok(_) => break,
                Err(error) if attempt == 50 => {
                    tracing::debug!(%error, "SQLite journal: WAL not removed on close");
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            }
        }
        self.writer.close().await;
    }
}

/// The connect options of the SQLite database at `url` as the journal opens it (its pools,
/// and the projection offset store's): the database file named by an absolute path, resolved
/// once against the working directory of now, so that every connection (the writer, the
/// readers, one opened after a `chdir` by a long-running process) opens the same file. A
/// `file:` URI and an in-memory database are kept as they are.
///
/// # Errors
/// [`SqlStoreError::Connect`] when `url` does not parse; [`SqlStoreError::InvalidOption`]
/// (`url`) when it names no file (`sqlite:`): SQLite would give each connection a temporary
/// database of its own, and what the writer stored would never be read back.
pub fn sqlite_connect_options(url: &str) -> Result<SqliteConnectOptions, SqlStoreError> {
    let options = SqliteConnectOptions::from_str(url)
        .map_err(|source| SqlStoreError::connect(url.to_owned(), source))?;
    let filename = options.get_filename();
    if filename.as_os_str().is_empty() {
        return Err(SqlStoreError::InvalidOption {
            option: "url",
            value: url.to_owned(),
            reason: "it names no database file (SQLite would give each connection a temporary \
                     database of its own); name one, e.g. `sqlite:events.db`, or use \
                     `sqlite::memory:`",
        });
    }
    let named = filename.to_str().unwrap_or_default();
    if filename.is_absolute() || named == ":memory:" || named.starts_with("file:") {
        return Ok(options);
    }
    match std::path::absolute(filename) {
        Ok(absolute) => Ok(options.filename(absolute)),
        // No working directory to resolve it against: sqlx opens it as given.
        Err(_) => Ok(options),
    }
}

/// The directory of the database file of `options` when it does not exist (SQLite creates a
/// missing file, not its directory): what a failed open names.
fn missing_directory(options: &SqliteConnectOptions) -> Option<std::path::PathBuf> {
    let file = options.get_filename();
    let directory = file.parent().filter(|_| file.is_absolute())?;
    (!directory.exists()).then(|| directory.to_path_buf())
}

/// Opens `pool` on `options`, trying again while SQLite answers `SQLITE_BUSY`, for up to
/// `busy_timeout`, every 10 ms: processes opening a new database file together (replicas of a
/// deployment, an app and its projection process) each switch it to WAL, which takes the file's
/// exclusive lock, and SQLite answers one of two connections that both read the file and then
/// both ask for it `SQLITE_BUSY` at once, without waiting out the busy timeout (it cannot wait
/// for a lock the other one waits on too). The journal opens its writer with it; a projection's
/// offset store on a pool of its own too.
///
/// The pool hands out no connection whose transaction state sqlx and SQLite disagree on (see
/// [`settle_transaction_state`]).
///
/// # Errors
/// The last attempt's error.
pub async fn open_sqlite_pool(
    pool: SqlitePoolOptions,
    options: SqliteConnectOptions,
    busy_timeout: Duration,
) -> Result<SqlitePool, sqlx::Error> {
    let pool = pool.before_acquire(|conn, _| Box::pin(settle_transaction_state(conn)));
    let started = std::time::Instant::now();
    loop {
        match pool.clone().connect_with(options.clone()).await {
            Err(error) if is_busy(&error) && started.elapsed() < busy_timeout => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            opened => return opened,
        }
    }
}

/// Whether an idle connection of a pool may be handed out (`true`), after making sqlx's count
/// of its open transactions agree with SQLite's again, or must be closed (`false`).
///
/// SQLite ends a transaction by itself on `SQLITE_FULL`, I/O errors, `RAISE(ROLLBACK)` and
/// `INSERT OR ROLLBACK`. sqlx's SQLite worker (0.8) then still counts it as open, because its
/// `ROLLBACK` fails, and every later `BEGIN IMMEDIATE` on the connection fails with
/// `InvalidSavePointStatement`: one such statement, in a projection's transaction on the
/// journal's writer connection for example, failed every write and every transaction that
/// came after it until the process restarted. Such a connection is mended here: SQLite is put
/// back into a transaction (`BEGIN`) for sqlx's `ROLLBACK` to end, which brings sqlx's count
/// back to zero. It is closed when that does not work. A connection that sqlx counts in no
/// transaction (every connection, unless something failed) costs one atomic load.
async fn settle_transaction_state(conn: &mut sqlx::SqliteConnection) -> Result<bool, sqlx::Error> {
    use sqlx::{Executor, TransactionManager};
    type Manager = <Sqlite as sqlx::Database>::TransactionManager;
    if !conn.is_in_transaction() {
        return Ok(true);
    }
    // A transaction dropped just before the connection came back has its `ROLLBACK` queued on
    // the worker, which has not run it yet: a round trip runs it first.
    conn.ping().await?;
    if !conn.is_in_transaction() {
        return Ok(true);
    }
    tracing::warn!(
        "SQLite connection counted in a transaction SQLite had ended (a statement rolled it \
         back: a full disk, an I/O error, RAISE(ROLLBACK)); mending it"
    );
    let ended = {
        let mut handle = conn.lock_handle().await?;
        // SAFETY: the handle is an open connection, locked for this thread while in use.
        unsafe { libsqlite3_sys::sqlite3_get_autocommit(handle.as_raw_handle().as_ptr()) != 0 }
    };
    if ended {
        conn.execute("BEGIN").await?;
    }
    Manager::rollback(conn).await?;
    Ok(!conn.is_in_transaction())
}

/// Whether `error` is SQLite's `SQLITE_BUSY` (any of its extended codes: the primary code is
/// the low byte).
fn is_busy(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| code & 0xff == 5)
}

/// Brings the schema of the SQLite database behind `pool` up to date with the migrations
/// embedded in this crate (journal, snapshots, queries, projection offsets).
/// [`SqliteJournal::connect`] runs it; other users of the same database file (a projection's
/// offset store on a pool of its own) call it to make sure the tables exist.
///
/// # Errors
/// [`SqlStoreError::Migrate`] when the schema cannot be brought up to date;
/// [`SqlStoreError::ForeignTable`] when no migration was applied yet and a table of one of the
/// journal's names exists.
pub async fn migrate_sqlite(pool: &SqlitePool) -> Result<(), SqlStoreError> {
    // Processes opening a new database file together race to migrate it (see `with_retries`).
    crate::migrate::with_retries(&MIGRATOR, || crate::migrate::sqlite::run(pool, &MIGRATOR)).await
}

impl SqliteJournal {
    /// Opens (and creates when missing) the database, turns on WAL mode, sets the busy timeout,
    /// brings the schema up to date with the embedded migrations and, with
    /// [`max_batch_size`](SqliteJournalOptions::max_batch_size) above 1, starts the writer task
    /// on the current Tokio runtime (it ends when the last clone of the journal is dropped).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> Result<(), actix_persistence_sql::SqlStoreError> {
    /// # use actix_persistence_sql as actix_persistence; // the paths of the facade, `actix-persistence`
    /// use actix_persistence::{SqliteJournal, SqliteJournalOptions};
    ///
    /// let journal = SqliteJournal::connect(&SqliteJournalOptions::new("sqlite:journal.db")).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// - [`SqlStoreError::InvalidOption`] when `max_connections`, `replay_batch_size` or
    ///   `max_batch_size` is 0;
    /// - [`SqlStoreError::Connect`], naming the URL, when it does not parse or the database
    ///   cannot be opened or created (for example its directory does not exist);
    /// - [`SqlStoreError::Migrate`] when the schema cannot be brought up to date;
    /// - [`SqlStoreError::ForeignTable`] when the database holds a table of one of the
    ///   journal's names that the journal's migrations did not create.
    pub async fn connect(options: &SqliteJournalOptions) -> Result<Self, SqlStoreError> {
        check_batch_sizes(options.replay_batch_size, options.max_batch_size)?;
        let pools = SqlitePools::open(options).await?;
        let journal = SqliteJournal {
            // SQLite has one writer connection: one transaction at a time.
            writer: Writer::start(sqlite_backend(&pools), options.max_batch_size, 1),
            pools,
            replay_batch_size: options.replay_batch_size,
            notifier: WriteNotifier::new(),
        };
        journal
            .tables()
            .fill_missing_slices()
            .await
            .map_err(|e| SqlStoreError::Upgrade {
                source: Box::new(e),
            })?;
        Ok(journal)
    }

    /// Closes both pools, waiting for the connections in use to be returned. Every clone of
    /// this journal, and every snapshot store made by [`snapshot_store`](Self::snapshot_store),
    /// is closed with it; later operations fail with [`JournalError::Storage`].
    pub async fn close(&self) {
        self.pools.close().await;
    }

    /// Counters of the writes so far (shared by every clone): how many transactions committed
    /// and how many atomic writes they stored, which shows how well group commit batches.
    ///
    /// # Examples
    /// ```
    /// # use actix_persistence_core::{AtomicWrite, JournalStore, PersistentRepr};
    /// # use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let url = format!("sqlite:{}", dir.path().join("journal.db").display());
    /// let journal = SqliteJournal::connect(&SqliteJournalOptions::new(url)).await?;
    /// # let event = |pid: &str| PersistentRepr {
    /// #     persistence_id: pid.into(), seq_nr: 1, payload: b"{}".to_vec(), serializer_id: 1,
    /// #     manifest: String::new(), writer_uuid: "w".into(), timestamp: 0, tags: vec![].into(),
    /// # };
    /// // Three actors write at the same time: their writes share transactions.
    /// let (a, b, c) = futures::join!(
    ///     journal.write_messages(vec![AtomicWrite::new(vec![event("a")])?]),
    ///     journal.write_messages(vec![AtomicWrite::new(vec![event("b")])?]),
    ///     journal.write_messages(vec![AtomicWrite::new(vec![event("c")])?]),
    /// );
    /// assert!(a?[0].is_ok() && b?[0].is_ok() && c?[0].is_ok());
    /// let stats = journal.stats();
    /// assert_eq!(stats.atomic_writes, 3);
    /// assert!(stats.transactions <= 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn stats(&self) -> WriteStats {
        self.writer.stats()
    }

    /// The pool of the journal's one writer connection, for other writers in the same database
    /// (a projection's offset store and read model): their transactions then take turns with
    /// the journal's on that connection instead of waiting for SQLite's file lock.
    pub fn writer_pool(&self) -> &SqlitePool {
        &self.pools.writer
    }

    /// Connections checked out of the reader pool and of the writer connection right now.
    pub fn connections_in_use(&self) -> ConnectionsInUse {
        ConnectionsInUse {
            reads: in_use(&self.pools.readers),
            writes: in_use(&self.pools.writer),
        }
    }

    /// A snapshot store in the same database, sharing this journal's pools (snapshots are
    /// written through the one writer connection, in turn with the journal's transactions).
    pub fn snapshot_store(&self) -> SqliteSnapshotStore {
        SqliteSnapshotStore::from_pools(self.pools.clone())
    }

    /// The journal tables: read through the reader pool, deleted from through the writer.
    pub(crate) fn tables(&self) -> JournalTables<'_, SqliteDialect> {
        JournalTables {
            readers: &self.pools.readers,
            page_readers: &self.pools.page_readers,
            writer: &self.pools.writer,
            page_size: self.replay_batch_size,
            // Its connections live on threads of their own, not in a runtime's I/O driver.
            home: &CALLER,
        }
    }
}

/// What is particular to SQLite: `INTEGER` sequence numbers and serializer ids, tags as a JSON
/// array, transactions that take the write lock up front, and one insert per event.
#[derive(Debug)]
pub(crate) struct SqliteDialect;

/// An atomic write that passed every check before storage, its events converted to the column
/// types: what is left can only fail in the database.
pub(crate) struct PreparedWrite {
    write: AtomicWrite,
    highest_seq_nr: i64,
    /// Per event: its tags as a JSON array.
    tags: Vec<String>,
}

impl Dialect for SqliteDialect {
    const METRICS_LABEL: &'static str = "sqlite";
    const REPLAY_WITHOUT_TAGS_SQL: &'static str =
        "SELECT seq_nr, writer_uuid, write_timestamp, serializer_id, manifest, payload, \
                '[]' AS tags \
         FROM journal \
         WHERE persistence_id = $1 AND seq_nr >= $2 AND seq_nr <= $3 \
         ORDER BY seq_nr \
         LIMIT $4";
    type Db = Sqlite;
    type SerializerId = i64;
    type Write = PreparedWrite;
    type PageReaders = Option<ReaderThreads>;

    const HIGHEST_SEQ_NR: &'static str = "the highest SQLite can store";
    const BATCHES_SINGLE_WRITES: bool = true;
    const DYNAMIC_TYPES: bool = true;
    const TAG_BY_EVENT_HINT: &'static str = " INDEXED BY event_tag_by_event";
    const POSITION_BY_TIMESTAMP_FIRST: bool = true;
    const SLICES_INDEX_HINT: &'static str = " INDEXED BY journal_by_entity_type";

    /// Through SQLite's C interface, on a reader thread with a connection of its own
    /// ([`sqlite_readers`](crate::sqlite_readers)), or for a database without reader threads
    /// on a blocking thread with a connection of the pool ([`sqlite_page`]).
    fn read_page<'a, T: Send + 'static>(
        readers: &'a SqlitePool,
        page_readers: &'a Option<ReaderThreads>,
        sql: &str,
        args: &[PageArg<&str>],
        query_columns: bool,
        limit: usize,
        build: impl FnOnce(&RawPage) -> T + Send + 'static,
    ) -> BoxFuture<'a, Option<T>> {
        sqlite_page::read_page(
            readers,
            page_readers.as_ref(),
            sql,
            args,
            query_columns,
            limit,
            build,
        )
    }

    /// Encodes the tags of each event as JSON.
    fn prepare(write: AtomicWrite, highest_seq_nr: i64) -> Result<PreparedWrite, WriteRejection> {
        let tags = write
            .events
            .iter()
            .map(|event| {
                serde_json::to_string(&event.tags).map_err(|e| {
                    rejection(&write, format!("tags could not be encoded as JSON: {e}"))
                })
            })
            .collect::<Result<_, WriteRejection>>()?;
        Ok(PreparedWrite {
            write,
            highest_seq_nr,
            tags,
        })
    }

    fn atomic_write(write: &PreparedWrite) -> &AtomicWrite {
        &write.write
    }

    /// `BEGIN IMMEDIATE` takes the write lock up front (waiting up to the busy timeout), so the
    /// transaction never has to upgrade a read lock, which SQLite may refuse with
    /// `SQLITE_BUSY`.
    fn begin(
        conn: &mut SqliteConnection,
    ) -> BoxFuture<'_, Result<Transaction<'_, Sqlite>, sqlx::Error>> {
        conn.begin_with("BEGIN IMMEDIATE")
    }

    fn insert_atomic_write<'c>(
        conn: &'c mut SqliteConnection,
        write: &'c PreparedWrite,
    ) -> impl Future<Output = Result<(), JournalError>> + Send + 'c {
        insert_atomic_write(conn, write)
    }

    fn insert_batch<'c>(
        conn: &'c mut SqliteConnection,
        writes: &'c [PreparedWrite],
    ) -> impl Future<Output = Option<Result<bool, JournalError>>> + Send + 'c {
        futures::FutureExt::map(insert_batch(conn, writes), Some)
    }

    fn take_ownerships<'c>(
        conn: &'c mut SqliteConnection,
        persistence_ids: &'c [String],
    ) -> impl Future<Output = Result<Vec<Ownership>, JournalError>> + Send + 'c {
        take_ownerships(conn, persistence_ids)
    }

    fn serializer_id_to_sql(id: u32) -> i64 {
        i64::from(id)
    }

    fn serializer_id_from_sql(id: i64) -> Option<u32> {
        u32::try_from(id).ok()
    }

    fn tags_from_stored(stored: &[u8]) -> Result<Tags, String> {
        let text = std::str::from_utf8(stored)
            .map_err(|e| format!("tags are not a JSON array of strings: {e}"))?;
        page_row::tags_from_json_text(text).map(Tags::from)
    }

    fn stores_text(_text: &str) -> bool {
        true
    }

    /// SQLite's clock is this process's wall clock (the journal takes its timestamps from it),
    /// never below a timestamp it gave (`clock_floor!`).
    const CURRENT_TIMESTAMP: &'static str = concat!("SELECT max($1, ", clock_floor!(), ")");
}

/// Events per multi-row `INSERT`: 11 parameters each, well within SQLite's 32,766 bind
/// parameters per statement. A batch with more events takes several statements.
const ROWS_PER_STATEMENT: usize = 1000;

/// Persistence ids per multi-row upsert of `journal_highest` (3 parameters each).
const IDS_PER_STATEMENT: usize = 4000;

/// The statement inserting `rows` events (11 anonymous `?` parameters per event, in column
/// order, see [`bind_event`]), events whose sequence number is taken skipped (`DO NOTHING`), which the caller sees
/// in the number of rows it inserted.
///
/// Anonymous parameters, not numbered ones (`?NNN`): sqlx looks up each parameter's name
/// while binding, which SQLite answers by a linear scan of the statement's named parameters,
/// so numbered parameters make binding a batch quadratic (half of the CPU of a 512-event batch
/// went there).
fn insert_events_statement(rows: usize) -> String {
    // `db_timestamp`: the wall clock, always above every timestamp the journal gave
    // (`clock_floor!` + 1: `QueryStore::committed_before` relies on it), read once per statement (in the row text, the floor's subqueries made parsing and
    // compiling a batch of 100 a quarter of the write path's instructions).
    const ROW: &str = "(?,?,?,?,?,?,?,?,?,?,?)";
    let mut sql = String::with_capacity(600 + rows * (ROW.len() + 1));
    sql.push_str(
        "WITH batch (persistence_id, seq_nr, writer_uuid, write_timestamp, serializer_id, \
                     manifest, payload, tags, wall_clock, slice, entity_type) AS (VALUES ",
    );
    for row in 0..rows {
        if row > 0 {
            sql.push(',');
        }
        sql.push_str(ROW);
    }
    sql.push_str(concat!(
        "), clock (floor) AS (SELECT ",
        clock_floor!(),
        ") ",
        journal_insert_columns!(),
        "SELECT persistence_id, seq_nr, writer_uuid, write_timestamp, serializer_id, manifest, \
                payload, tags, max(wall_clock, clock.floor + 1), slice, entity_type \
         FROM batch, clock WHERE batch.persistence_id IS NOT NULL AND batch.seq_nr > ",
        deleted_to!("batch.persistence_id"),
        " ON CONFLICT (persistence_id, seq_nr) DO NOTHING"
    ));
    sql
}

/// The statement raising the highest sequence number of `ids` persistence ids (3 anonymous
/// parameters each: id, sequence number, then the write's fencing token), never lowering it,
/// and only where the id's owner epoch is not above the token (issue 10's fencing check, under
/// the same row lock as the raise): a fenced id's row is left alone and counts no change.
fn raise_highest_statement(ids: usize) -> String {
    let mut sql = String::with_capacity(400 + ids * 8);
    sql.push_str(
        "INSERT INTO journal_highest (persistence_id, highest_seq_nr, owner_epoch) \
         SELECT column1, column2, column3 FROM (VALUES ",
    );
    for id in 0..ids {
        if id > 0 {
            sql.push(',');
        }
        sql.push_str("(?,?,?)");
    }
    // Rows with a NULL id pad the statement to a cached size (`padded_rows`). The WHERE also
    // keeps SQLite from reading ON CONFLICT as a join's constraint.
    sql.push_str(concat!(
        ") WHERE column1 IS NOT NULL",
        raise_highest_on_conflict!()
    ));
    sql
}

/// The rows of a multi-row statement for `rows` values, at most `full`: the next power of two,
/// so that a connection prepares a dozen sizes of each statement at most and keeps them in
/// sqlx's statement cache; the rows beyond the values are NULL and left out by the statement.
/// Preparing a statement of each batch's own size was 41 % of the SQLite write path's
/// instructions (docs/benchmarks.md, issue 12, session 5); a padded row costs its NULL
/// parameters.
fn padded_rows(rows: usize, full: usize) -> usize {
    rows.max(1).next_power_of_two().min(full)
}

/// The text of a padded statement (`padded_rows` sizes only: powers of two up to the cap,
/// then the cap), built once per process and size: sqlx looks its prepared statement up by
/// this text, so a batch neither builds nor allocates it again.
fn padded_statement(
    texts: &'static [OnceLock<String>; 13],
    rows: usize,
    build: fn(usize) -> String,
) -> Cow<'static, str> {
    // 1, 2, 4, .. 2048 and the caps (1,000 -> 1,024, 4,000 -> 4,096) have distinct exponents.
    let slot = rows.next_power_of_two().trailing_zeros() as usize;
    match texts.get(slot) {
        Some(text) => Cow::Borrowed(text.get_or_init(|| build(rows))),
        // Not a padded size (never, see `padded_rows`): built for this statement only.
        None => Cow::Owned(build(rows)),
    }
}

/// [`insert_events_statement`] of a padded size, built once.
fn insert_events_sql(rows: usize) -> Cow<'static, str> {
    static TEXTS: [OnceLock<String>; 13] = [const { OnceLock::new() }; 13];
    padded_statement(&TEXTS, rows, insert_events_statement)
}

/// [`raise_highest_statement`] of a padded size, built once.
fn raise_highest_sql(ids: usize) -> Cow<'static, str> {
    static TEXTS: [OnceLock<String>; 13] = [const { OnceLock::new() }; 13];
    padded_statement(&TEXTS, ids, raise_highest_statement)
}

/// Binds `events` to an insert statement of `rows` rows (`rows >= events.len()`), then the
/// NULL rows that pad it.
fn bind_events<'q>(
    mut query: SqliteQuery<'q>,
    events: &'q [(&'q PersistentRepr, &'q str)],
    rows: usize,
) -> SqliteQuery<'q> {
    let now_micros = wall_clock_micros();
    for (event, tags) in events {
        query = bind_event(query, event, tags, now_micros);
    }
    for _ in events.len()..rows {
        query = bind_padding_row(query);
    }
    query
}

/// Binds `highest` to a `journal_highest` raise of `ids` rows (`ids >= highest.len()`), then
/// the NULL rows that pad it.
fn bind_highest<'q>(
    mut query: SqliteQuery<'q>,
    highest: &'q [(&'q str, i64, i64)],
    ids: usize,
) -> SqliteQuery<'q> {
    for (persistence_id, seq_nr, token) in highest {
        query = query.bind(*persistence_id).bind(*seq_nr).bind(*token);
    }
    for _ in highest.len()..ids {
        query = query.bind(None::<&str>).bind(None::<i64>).bind(None::<i64>);
    }
    query
}

/// Inserts `events` (each with its tags as JSON) in as few statements as SQLite's parameter
/// limit allows; returns how many rows were inserted (fewer than `events` when a sequence
/// number was taken).
async fn insert_events(
    conn: &mut SqliteConnection,
    events: &[(&PersistentRepr, &str)],
) -> Result<u64, sqlx::Error> {
    let mut inserted = 0;
    for chunk in events.chunks(ROWS_PER_STATEMENT) {
        // One of a few statement sizes, each prepared once per connection and cached: the
        // rows beyond the chunk's are NULL and left out by the statement.
        let rows = padded_rows(chunk.len(), ROWS_PER_STATEMENT);
        let sql = insert_events_sql(rows);
        let query = bind_events(sqlx::query(&sql), chunk, rows);
        inserted += query.execute(&mut *conn).await?.rows_affected();
    }
    Ok(inserted)
}

/// Binds a row of [`insert_events_statement`] that inserts nothing (its persistence id is
/// NULL).
fn bind_padding_row(query: SqliteQuery<'_>) -> SqliteQuery<'_> {
    let mut query = query;
    for _ in 0..11 {
        query = query.bind(None::<i64>);
    }
    query
}

/// Raises the highest sequence number of each persistence id in `highest` (id, highest
/// sequence number of the write, its fencing token; ids may repeat) in as few statements as
/// the parameter limit allows; returns how many rows were raised (fewer than `highest` when a
/// write was fenced).
async fn raise_highest(
    conn: &mut SqliteConnection,
    highest: &[(&str, i64, i64)],
) -> Result<u64, sqlx::Error> {
    let mut raised = 0;
    for chunk in highest.chunks(IDS_PER_STATEMENT) {
        let rows = padded_rows(chunk.len(), IDS_PER_STATEMENT);
        let sql = raise_highest_sql(rows);
        let query = bind_highest(sqlx::query(&sql), chunk, rows);
        raised += query.execute(&mut *conn).await?.rows_affected();
    }
    Ok(raised)
}

/// The `journal_highest` rows of `writes`: id, highest sequence number, fencing token.
fn highest_of(writes: &[PreparedWrite]) -> Vec<(&str, i64, i64)> {
    writes
        .iter()
        .map(|w| {
            (
                w.write.persistence_id(),
                w.highest_seq_nr,
                token_to_sql(w.write.fencing_token),
            )
        })
        .collect()
}

/// The events of `writes` with their tags, in order.
fn events_of(writes: &[PreparedWrite]) -> Vec<(&PersistentRepr, &str)> {
    let count = writes.iter().map(|w| w.write.events.len()).sum();
    let mut events = Vec::with_capacity(count);
    for write in writes {
        events.extend(
            write
                .write
                .events
                .iter()
                .zip(write.tags.iter().map(String::as_str)),
        );
    }
    events
}

/// [`Dialect::take_ownerships`] for SQLite: distinct ids in one multi-row upsert per
/// [`IDS_PER_STATEMENT`] ids, which returns each id's row; otherwise one statement per id.
async fn take_ownerships(
    conn: &mut SqliteConnection,
    persistence_ids: &[String],
) -> Result<Vec<Ownership>, JournalError> {
    if persistence_ids.len() == 1 || !all_distinct(persistence_ids) {
        let mut owned = Vec::with_capacity(persistence_ids.len());
        for persistence_id in persistence_ids {
            owned.push(take_ownership(conn, persistence_id).await?);
        }
        return Ok(owned);
    }
    let mut owned = Vec::with_capacity(persistence_ids.len());
    for chunk in persistence_ids.chunks(IDS_PER_STATEMENT) {
        let mut sql = String::with_capacity(200 + chunk.len() * 10);
        sql.push_str(
            "INSERT INTO journal_highest (persistence_id, highest_seq_nr, owner_epoch) VALUES ",
        );
        for i in 0..chunk.len() {
            if i > 0 {
                sql.push(',');
            }
            sql.push_str("(?,0,1)");
        }
        sql.push_str(
            " ON CONFLICT (persistence_id) \
             DO UPDATE SET owner_epoch = journal_highest.owner_epoch + 1 \
             RETURNING persistence_id, highest_seq_nr, owner_epoch",
        );
        // Of varying size: prepared for this execution only (the ownership takes of a batch of
        // recoveries, rarer than writes).
        let mut query = sqlx::query_as::<_, (String, i64, i64)>(&sql).persistent(false);
        for persistence_id in chunk {
            query = query.bind(persistence_id.as_str());
        }
        let rows = query
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| JournalError::storage("take ownership", e))?;
        owned.extend(ownerships_in_order(chunk, rows)?);
    }
    Ok(owned)
}

async fn take_ownership(
    conn: &mut SqliteConnection,
    persistence_id: &str,
) -> Result<Ownership, JournalError> {
    let row: (i64, i64) = sqlx::query_as(TAKE_OWNERSHIP)
        .bind(persistence_id)
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| JournalError::storage("take ownership", e))?;
    ownership_from_row(persistence_id, row)
}

/// [`Dialect::insert_atomic_write`] for SQLite, the slow path after a batch met a taken
/// sequence number or a fenced write: first the fencing check, raising the highest sequence
/// number only if the id's owner epoch is not above the write's token (no row back:
/// [`JournalError::Fenced`]); then a look for a sequence number of the write that is already
/// stored or deleted (then [`JournalError::ConcurrentWrite`] naming the lowest one; the caller rolls back,
/// which undoes the raise), else its events in one multi-row statement. The writer connection
/// holds SQLite's write lock for the whole transaction, so nothing can be stored between the
/// look and the insert.
async fn insert_atomic_write(
    conn: &mut SqliteConnection,
    write: &PreparedWrite,
) -> Result<(), JournalError> {
    let storage = |e| JournalError::storage("write", e);
    let persistence_id = write.write.persistence_id();
    let owned: Option<i64> = sqlx::query_scalar(
        "INSERT INTO journal_highest (persistence_id, highest_seq_nr, owner_epoch) \
         VALUES (?1, ?2, ?3) \
         ON CONFLICT (persistence_id) \
         DO UPDATE SET highest_seq_nr = max(highest_seq_nr, excluded.highest_seq_nr) \
         WHERE owner_epoch <= excluded.owner_epoch \
         RETURNING deleted_to",
    )
    .bind(persistence_id)
    .bind(write.highest_seq_nr)
    .bind(token_to_sql(write.write.fencing_token))
    .fetch_optional(&mut *conn)
    .await
    .map_err(storage)?;
    let Some(deleted_to) = owned else {
        return Err(JournalError::Fenced {
            persistence_id: persistence_id.to_owned(),
            fencing_token: write.write.fencing_token.get(),
        });
    };
    // A deleted number stays used (J29; the insert would skip it, `deleted_to!`).
    if clamp_seq_nr(write.write.lowest_seq_nr()) <= deleted_to {
        return Err(JournalError::ConcurrentWrite {
            persistence_id: persistence_id.to_owned(),
            seq_nr: write.write.lowest_seq_nr(),
        });
    }
    let taken: Option<i64> = sqlx::query_scalar(
        "SELECT min(seq_nr) FROM journal \
         WHERE persistence_id = ?1 AND seq_nr >= ?2 AND seq_nr <= ?3",
    )
    .bind(persistence_id)
    .bind(clamp_seq_nr(write.write.lowest_seq_nr()))
    .bind(write.highest_seq_nr)
    .fetch_one(&mut *conn)
    .await
    .map_err(storage)?;
    if let Some(taken) = taken {
        return Err(JournalError::ConcurrentWrite {
            persistence_id: persistence_id.to_owned(),
            seq_nr: u64::try_from(taken).unwrap_or(0),
        });
    }
    let events = events_of(std::slice::from_ref(write));
    let inserted = insert_events(conn, &events).await.map_err(storage)?;
    if inserted < events.len() as u64 {
        // Cannot happen under the write lock; never report success for a partial write.
        return Err(JournalError::ConcurrentWrite {
            persistence_id: persistence_id.to_owned(),
            seq_nr: write.write.lowest_seq_nr(),
        });
    }
    Ok(())
}

/// [`Dialect::insert_batch`] for SQLite: every event of the batch in one multi-row `INSERT`
/// (chunks of [`ROWS_PER_STATEMENT`]), then the highest sequence number of every persistence
/// id in one multi-row upsert, each padded to a cached statement size (`padded_rows`); both in
/// one query for a batch of at most [`ONE_QUERY_BATCH`] events. `Ok(false)` when some event's sequence
/// number was taken or some write was fenced (its id's owner epoch is above its token, so
/// its row was not raised): the caller rolls back and takes the slow path, a savepoint per
/// atomic write, where the fenced or conflicting write fails alone.
async fn insert_batch(
    conn: &mut SqliteConnection,
    writes: &[PreparedWrite],
) -> Result<bool, JournalError> {
    let storage = |e| JournalError::storage("write", e);
    let events = events_of(writes);
    let highest = highest_of(writes);
    if events.len() <= ONE_QUERY_BATCH {
        return insert_small_batch(conn, &events, &highest)
            .await
            .map_err(storage);
    }
    // Two statements of cached sizes (two hand-offs to the connection's worker thread): one
    // statement of the batch's own size, prepared for each batch, cost far more.
    let inserted = insert_events(conn, &events).await.map_err(storage)?;
    if inserted < events.len() as u64 {
        return Ok(false);
    }
    // One change per upserted id (an upsert that updates counts too): fewer means an id's row
    // was not raised because the write was fenced.
    let raised = raise_highest(conn, &highest).await.map_err(storage)?;
    Ok(raised == highest.len() as u64)
}

/// Batches of at most this many events send their insert and their upsert as one query (one
/// hand-off to the connection's worker thread, as a lone event of one actor's sequential
/// persists): the 15 pairs of padded sizes are small enough to keep in the statement cache.
const ONE_QUERY_BATCH: usize = 16;

/// A batch of at most [`ONE_QUERY_BATCH`] events: both statements, padded to cached sizes, in
/// one query. Whether every event was inserted and every id raised (see [`insert_batch`]).
async fn insert_small_batch(
    conn: &mut SqliteConnection,
    events: &[(&PersistentRepr, &str)],
    highest: &[(&str, i64, i64)],
) -> Result<bool, sqlx::Error> {
    let rows = padded_rows(events.len(), ROWS_PER_STATEMENT);
    let ids = padded_rows(highest.len(), IDS_PER_STATEMENT);
    let sql = if rows == 1 && ids == 1 {
        Cow::Borrowed(LONE_WRITE_SQL)
    } else {
        small_batch_sql(rows, ids)
    };
    let query = bind_events(sqlx::query(&sql), events, rows);
    let query = bind_highest(query, highest, ids);
    // One change per inserted event and one per upserted id (an upsert that updates counts
    // too): fewer means an event was skipped as taken or an id's row was not raised because
    // the write was fenced.
    let changes = query.execute(&mut *conn).await?.rows_affected();
    Ok(changes == (events.len() + highest.len()) as u64)
}

/// Both statements of a batch of at most [`ONE_QUERY_BATCH`] events (`rows` and `ids` padded,
/// at most 16 each), as one query text, built once per pair of sizes.
fn small_batch_sql(rows: usize, ids: usize) -> Cow<'static, str> {
    static TEXTS: [[OnceLock<String>; 5]; 5] = [const { [const { OnceLock::new() }; 5] }; 5];
    let both = || {
        format!(
            "{};{}",
            insert_events_statement(rows),
            raise_highest_statement(ids)
        )
    };
    let slot = |n: usize| n.next_power_of_two().trailing_zeros() as usize;
    match TEXTS.get(slot(rows)).and_then(|texts| texts.get(slot(ids))) {
        Some(text) => Cow::Borrowed(text.get_or_init(both)),
        None => Cow::Owned(both()),
    }
}

/// The lone event of a lone write (one actor persisting one event at a time): plain one-row
/// statements, cheaper to run than the padded forms' `WITH` tables and `SELECT` (same
/// parameters, same changes; one actor's sequential persist p99 was 1.37x the raw floor's with
/// the padded form, docs/benchmarks.md).
///
/// Numbered parameters (the id and the sequence number are read twice, by the row and by the
/// deleted-number check of [`deleted_to!`]), 14 in all: sqlx's name lookup per parameter stays
/// cheap at this size. Both statements number theirs, since sqlx counts only anonymous
/// parameters from one statement to the next.
const LONE_WRITE_SQL: &str = concat!(
    journal_insert_columns!(),
    "SELECT ?1,?2,?3,?4,?5,?6,?7,?8,max(?9,",
    clock_floor!(),
    " + 1),?10,?11 WHERE ?2 > ",
    deleted_to!("?1"),
    " ON CONFLICT (persistence_id, seq_nr) DO NOTHING; \
     INSERT INTO journal_highest (persistence_id, highest_seq_nr, owner_epoch) \
     VALUES (?12,?13,?14)",
    raise_highest_on_conflict!()
);

type SqliteQuery<'q> = sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>>;

/// Binds the 11 parameters of one event, in the order of [`insert_events_statement`]: its 8
/// columns, then the wall clock in microseconds (`now_micros`, the floor of its
/// `db_timestamp`), its slice and its entity type.
fn bind_event<'q>(
    query: SqliteQuery<'q>,
    event: &'q PersistentRepr,
    tags: &'q str,
    now_micros: i64,
) -> SqliteQuery<'q> {
    let persistence_id = &*event.persistence_id;
    query
        .bind(&*event.persistence_id)
        // Checked to fit when the write was prepared.
        .bind(clamp_seq_nr(event.seq_nr))
        .bind(&*event.writer_uuid)
        .bind(event.timestamp)
        .bind(SqliteDialect::serializer_id_to_sql(event.serializer_id))
        .bind(event.manifest.as_str())
        .bind(event.payload.as_slice())
        .bind(tags)
        .bind(now_micros)
        .bind(i64::from(slice_for_persistence_id(persistence_id)))
        .bind(entity_type_of(persistence_id))
}

#[async_trait]
impl JournalStore for SqliteJournal {
    /// Stores the atomic writes, in order, through group commit (see [`SqliteJournal`]): they
    /// share transactions with the writes of other concurrent calls. A write is durable once
    /// this returns `Ok(())` for it; no result comes before its transaction has ended.
    ///
    /// Per atomic write: a bad shape or a sequence number above `i64::MAX` is rejected (not
    /// stored, nothing attempted); a sequence number already stored fails it with
    /// [`JournalError::ConcurrentWrite`] (the first such one); another database error on one
    /// of its rows fails it with [`JournalError::Storage`]. The later writes of the same writer
    /// (id, fencing token, writer id) in the batch are then not attempted
    /// ([`JournalError::EarlierWriteFailed`]: stored, they would follow a hole); the other
    /// writes of the batch are unaffected. When the transaction cannot begin or commit (or the writer
    /// connection cannot be had), every write of that transaction fails with
    /// [`JournalError::Storage`] and none of them is stored.
    ///
    /// Always returns `Ok`, with one result per atomic write.
    ///
    /// Cancel safety: the writes are queued when the future is first polled. Dropping it
    /// before the writer task took them stores none of them; afterwards they may still be
    /// stored. Without group commit (`max_batch_size` 1), dropping it rolls back the atomic
    /// write in progress; the writes before it stay committed, the ones after it are not
    /// attempted.
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        let results = self.writer.write(writes).await;
        if results.iter().any(Result::is_ok) {
            self.notifier.notify();
        }
        Ok(results)
    }

    /// Streams the events page by page ([`SqliteJournalOptions::replay_batch_size`] per query,
    /// on the reader pool), so memory stays bounded however long the replay: when a page is
    /// handed out, the next two are read ahead, each by a task of its own on the current Tokio
    /// runtime (three pages and two reader connections at most). Each page is read in its own
    /// snapshot: events committed while the replay runs may or may not be seen.
    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.tables().replay(pid, from, to, max, true)
    }

    /// As `replay_messages`, each event's tags left empty: the page query selects an empty
    /// list in their place, so the database neither reads nor sends them and no event
    /// allocates them.
    fn replay_for_recovery(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.tables().replay(pid, from, to, max, false)
    }

    /// Reads the highest sequence number from its own table (0 for an id that never wrote);
    /// `from` is not needed.
    async fn read_highest_sequence_nr(&self, pid: &str, _from: u64) -> Result<u64, JournalError> {
        self.tables().read_highest(pid).await
    }

    /// Deletes the events with `seq_nr <= to` (all of them for `u64::MAX`) in one transaction
    /// on the writer side, fenced: its first statement checks `fencing_token` against the id's
    /// owner epoch under the lock ownership takes need too, and a stale token deletes nothing
    /// ([`JournalError::Fenced`]). The highest sequence number is kept.
    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        fencing_token: FencingToken,
    ) -> Result<(), JournalError> {
        self.tables().delete_to(pid, to, fencing_token).await
    }

    /// Raises the id's owner epoch in `journal_highest` and reads its highest sequence number
    /// in one statement, in a transaction on the writer connection shared with the writes and
    /// ownership takes queued with it (group commit; the writes first). Durable when it returns.
    async fn take_ownership(&self, pid: &str) -> Result<Ownership, JournalError> {
        self.writer.take_ownership(pid).await
    }

    /// Reads how far the events were deleted from `journal_highest` (0 when never).
    async fn read_deleted_to(&self, pid: &str) -> Result<Option<u64>, JournalError> {
        self.tables().read_deleted_to(pid).await.map(Some)
    }

    /// Both in one statement on the reader pool: one round trip for what a replay reads first.
    async fn read_replay_bounds(
        &self,
        pid: &str,
        _from: u64,
    ) -> Result<ReplayBounds, JournalError> {
        self.tables().read_replay_bounds(pid).await
    }
}

/// Queries by slice read the journal table in (database timestamp, persistence id, sequence
/// number) order through the index `journal_by_entity_type` (entity type first, so a query
/// never walks other entity types' events; migration 0009), queries by tag the tag index
/// `event_tag_by_tag` joined to the journal; see
/// [`ReadJournal`](actix_persistence_core::query::ReadJournal).
/// [`QueryStore::committed_before`] of the SQLite journal: the floor plus one.
const COMMITTED_BEFORE: &str = concat!("SELECT ", clock_floor!(), " + 1");

#[async_trait]
impl QueryStore for SqliteJournal {
    async fn current_timestamp(&self) -> Result<i64, JournalError> {
        self.tables().current_timestamp().await
    }

    /// The journal's clock floor plus one: SQLite has one writer at a time, and each write
    /// takes its timestamp inside its transaction, above the floor (`max(wall clock, floor +
    /// 1)`), so every event at or below the floor is committed and none will come later.
    async fn committed_before(&self) -> Result<Option<i64>, JournalError> {
        sqlx::query_scalar::<_, i64>(COMMITTED_BEFORE)
            .fetch_one(&self.pools.readers)
            .await
            .map(Some)
            .map_err(|e| JournalError::storage("read the journal's clock floor", e))
    }

    async fn read_events(
        &self,
        request: EventsRequest<'_>,
    ) -> Result<Vec<StoredEvent>, JournalError> {
        self.tables().read_events(request).await
    }

    async fn read_persistence_ids(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>, JournalError> {
        self.tables().read_persistence_ids(after, limit).await
    }

    /// Commits of this journal (and its clones) in this process wake live queries at once.
    fn write_notifications(&self) -> Option<WriteNotifications> {
        Some(self.notifier.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every batch size maps to a padded size whose statement text, built once, has exactly
    /// that many rows (one text per size: two sizes never share a slot).
    #[test]
    fn padded_statements_have_the_rows_of_their_size() {
        for (full, sql, row) in [
            (
                ROWS_PER_STATEMENT,
                insert_events_sql as fn(usize) -> Cow<'static, str>,
                "(?,?,?,?,?,?,?,?,?,?,?)",
            ),
            (IDS_PER_STATEMENT, raise_highest_sql, "(?,?,?)"),
        ] {
            for n in 1..=full {
                let rows = padded_rows(n, full);
                assert!(rows >= n && rows <= full, "{n} -> {rows}");
                let text = sql(rows);
                assert!(matches!(text, Cow::Borrowed(_)), "size {rows} is cached");
                assert_eq!(text.matches(row).count(), rows, "size {rows}");
            }
        }
        for events in 1..=ONE_QUERY_BATCH {
            for ids in 1..=events {
                let (rows, ids) = (
                    padded_rows(events, ROWS_PER_STATEMENT),
                    padded_rows(ids, IDS_PER_STATEMENT),
                );
                let text = small_batch_sql(rows, ids);
                assert!(matches!(text, Cow::Borrowed(_)));
                assert_eq!(text.matches("(?,?,?,?,?,?,?,?,?,?,?)").count(), rows);
                assert_eq!(text.matches("(?,?,?)").count(), ids);
            }
        }
    }
}
