//! The SQLite journal store: [`SqliteJournal`] and its [`SqliteJournalOptions`].

use std::str::FromStr;
use std::time::Duration;

use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, JournalError, JournalStore, PersistentRepr, ReplayStream,
    WriteRejection,
};
use async_trait::async_trait;
use futures::stream::{self, StreamExt};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{Connection, Row};

use crate::error::SqlStoreError;
use crate::group_commit::{
    fail_all, settle, Backend, WriteCounters, WriteStats, Writer, DEFAULT_MAX_BATCH_SIZE,
};
use crate::sqlite_snapshot::SqliteSnapshotStore;
use crate::DEFAULT_REPLAY_BATCH_SIZE;

/// The schema migrations under `migrations/sqlite/`, embedded at compile time.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// Default of [`SqliteJournalOptions::url`].
pub const DEFAULT_SQLITE_URL: &str = "sqlite:actix-persistence.db";

/// How [`SqliteJournal::connect`] opens the database.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use actix_persistence_sql::SqliteJournalOptions;
///
/// let options = SqliteJournalOptions {
///     url: "sqlite:/var/lib/my-app/journal.db".to_owned(),
///     busy_timeout: Duration::from_secs(10),
///     ..SqliteJournalOptions::default()
/// };
/// assert_eq!(options.max_connections, 4);
/// assert_eq!(options.max_batch_size, 64);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteJournalOptions {
    /// The database, as a sqlx SQLite URL: `sqlite:path/to/file.db` (relative to the working
    /// directory), `sqlite:///absolute/path.db`, optionally with `?mode=...` and other sqlx
    /// parameters. The file is created when missing; its directory must exist.
    ///
    /// `sqlite::memory:` works too (for tests), but nothing then survives the process.
    ///
    /// Default: `"sqlite:actix-persistence.db"`.
    pub url: String,
    /// Size of the pool of reading connections (replays and highest sequence numbers). Writes
    /// always go through one separate connection: SQLite has a single writer at a time. Must be
    /// at least 1.
    ///
    /// Default: 4.
    pub max_connections: u32,
    /// How long a statement waits for a lock held by another connection (or another process)
    /// before it fails with `SQLITE_BUSY`.
    ///
    /// Default: 5 s.
    pub busy_timeout: Duration,
    /// How many events a replay reads per query. A replay holds at most one page in memory,
    /// however many events it returns. Must be at least 1.
    ///
    /// Default: 500 ([`DEFAULT_REPLAY_BATCH_SIZE`]).
    pub replay_batch_size: u32,
    /// Group commit: at most this many atomic writes, from any number of concurrent
    /// [`write_messages`](JournalStore::write_messages) calls, share one transaction (see
    /// [`SqliteJournal`]). 1 turns group commit off: every atomic write is then its own
    /// transaction, run by the calling task. Must be at least 1.
    ///
    /// Default: 64 ([`DEFAULT_MAX_BATCH_SIZE`]).
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
///   of the process or of the machine, and every later replay sees it.
/// - **Atomicity**: all events of an atomic write are stored, or none. A failed commit fails
///   every atomic write of its batch ([`AtomicWriteError::Failed`]) and stores none of them.
/// - **Order**: the atomic writes of one call are stored in the order given, calls in the order
///   they were made, and the results come back in call order, one per atomic write.
/// - **No overwrite**: a sequence number that is stored for the persistence id makes its atomic
///   write fail with [`JournalError::ConcurrentWrite`]; the stored event is kept. (As in the
///   in-memory journal, a sequence number whose event was deleted can be written again.)
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
    writer: Writer<SqliteBackend>,
    replay_batch_size: u32,
}

/// The pools of one SQLite database: one writer connection, several readers.
#[derive(Debug, Clone)]
pub(crate) struct SqlitePools {
    pub(crate) writer: SqlitePool,
    pub(crate) readers: SqlitePool,
}

impl SqlitePools {
    /// Opens (and creates when missing) the database, turns on WAL mode, sets the busy timeout
    /// and brings the schema (journal and snapshots) up to date.
    pub(crate) async fn open(options: &SqliteJournalOptions) -> Result<Self, SqlStoreError> {
        if options.max_connections == 0 {
            return Err(SqlStoreError::InvalidOption {
                option: "max_connections",
                value: options.max_connections.to_string(),
                reason: "the reader pool needs at least one connection",
            });
        }
        let connect_error = |source| SqlStoreError::Connect {
            url: options.url.clone(),
            source,
        };
        let base = SqliteConnectOptions::from_str(&options.url)
            .map_err(connect_error)?
            .busy_timeout(options.busy_timeout)
            .synchronous(SqliteSynchronous::Full);

        // The one writer lives as long as the pool: it also keeps a `sqlite::memory:` database
        // alive. Switching to WAL is persistent, so only the writer needs to ask for it, and it
        // connects first.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(
                base.clone()
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal),
            )
            .await
            .map_err(connect_error)?;
        MIGRATOR
            .run(&writer)
            .await
            .map_err(|source| SqlStoreError::Migrate { source })?;
        let readers = SqlitePoolOptions::new()
            .max_connections(options.max_connections)
            .connect_with(base)
            .await
            .map_err(connect_error)?;
        Ok(SqlitePools { writer, readers })
    }

    pub(crate) async fn close(&self) {
        self.writer.close().await;
        self.readers.close().await;
    }
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
    /// use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions};
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
    /// - [`SqlStoreError::Migrate`] when the schema cannot be brought up to date.
    pub async fn connect(options: &SqliteJournalOptions) -> Result<Self, SqlStoreError> {
        if options.replay_batch_size == 0 {
            return Err(SqlStoreError::InvalidOption {
                option: "replay_batch_size",
                value: options.replay_batch_size.to_string(),
                reason: "a replay must read at least one event per query",
            });
        }
        if options.max_batch_size == 0 {
            return Err(SqlStoreError::InvalidOption {
                option: "max_batch_size",
                value: options.max_batch_size.to_string(),
                reason:
                    "a transaction must store at least one atomic write (1 turns group commit off)",
            });
        }
        let pools = SqlitePools::open(options).await?;
        let backend = SqliteBackend {
            writer: pools.writer.clone(),
        };
        Ok(SqliteJournal {
            writer: Writer::start(backend, options.max_batch_size),
            pools,
            replay_batch_size: options.replay_batch_size,
        })
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
    /// #     persistence_id: pid.to_owned(), seq_nr: 1, payload: b"{}".to_vec(), serializer_id: 1,
    /// #     manifest: String::new(), writer_uuid: "w".to_owned(), timestamp: 0, tags: vec![],
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

    /// A snapshot store in the same database, sharing this journal's pools (snapshots are
    /// written through the one writer connection, in turn with the journal's transactions).
    pub fn snapshot_store(&self) -> SqliteSnapshotStore {
        SqliteSnapshotStore::from_pools(self.pools.clone())
    }
}

/// The SQLite side of group commit.
#[derive(Debug)]
struct SqliteBackend {
    writer: SqlitePool,
}

/// An atomic write that passed every check before storage, its events converted to the column
/// types: what is left can only fail in the database.
struct PreparedWrite {
    write: AtomicWrite,
    highest_seq_nr: i64,
    /// Per event: its tags as a JSON array.
    tags: Vec<String>,
}

impl PreparedWrite {
    fn persistence_id(&self) -> &str {
        self.write.persistence_id()
    }
}

impl Backend for SqliteBackend {
    type Write = PreparedWrite;

    /// Checks the shape of `write` and converts its events, or says why it is rejected.
    fn prepare(write: AtomicWrite) -> Result<PreparedWrite, WriteRejection> {
        write.check_shape()?;
        let reject = |reason: String| WriteRejection {
            persistence_id: write.persistence_id().to_owned(),
            seq_nr: write.lowest_seq_nr(),
            reason,
        };
        let highest_seq_nr = i64::try_from(write.highest_seq_nr()).map_err(|_| {
            reject(format!(
                "sequence number {} is above {}, the highest SQLite can store",
                write.highest_seq_nr(),
                i64::MAX
            ))
        })?;
        let tags = write
            .events
            .iter()
            .map(|event| {
                serde_json::to_string(&event.tags)
                    .map_err(|e| reject(format!("tags could not be encoded as JSON: {e}")))
            })
            .collect::<Result<_, WriteRejection>>()?;
        Ok(PreparedWrite {
            write,
            highest_seq_nr,
            tags,
        })
    }

    async fn commit_batch(
        &self,
        writes: &[PreparedWrite],
        counters: &WriteCounters,
    ) -> Vec<AtomicWriteResult> {
        let storage = |e| JournalError::storage("write", e);
        let mut conn = match self.writer.acquire().await {
            Ok(conn) => conn,
            Err(e) => return fail_all(writes, &storage(e)),
        };
        // IMMEDIATE takes the write lock up front (waiting up to the busy timeout), so the
        // transaction never has to upgrade a read lock, which SQLite may refuse with
        // SQLITE_BUSY.
        let mut tx = match conn.begin_with("BEGIN IMMEDIATE").await {
            Ok(tx) => tx,
            Err(e) => return fail_all(writes, &storage(e)),
        };
        let outcomes = match insert_in_savepoints(&mut tx, writes).await {
            Ok(outcomes) => outcomes,
            Err(error) => {
                rollback(tx, writes).await;
                return fail_all(writes, &error);
            }
        };
        let stored = outcomes.iter().filter(|o| o.is_ok()).count();
        if stored == 0 {
            rollback(tx, writes).await;
            return settle(outcomes, None);
        }
        match tx.commit().await {
            Ok(()) => {
                counters.committed(stored);
                settle(outcomes, None)
            }
            // The failed transaction is rolled back when its connection goes back to the pool.
            Err(e) => settle(outcomes, Some(storage(e))),
        }
    }
}

/// Rolls back a batch's transaction, logging (not returning) a failure: the connection is
/// then closed by sqlx rather than reused.
async fn rollback(tx: sqlx::Transaction<'_, sqlx::Sqlite>, writes: &[PreparedWrite]) {
    if let Err(error) = tx.rollback().await {
        tracing::warn!(
            atomic_writes = writes.len(),
            %error,
            "rolling back a failed journal batch failed"
        );
    }
}

/// Inserts the atomic writes of a batch inside the open transaction, each in a savepoint of its
/// own (a batch of one needs none: the transaction is rolled back instead), so one that fails
/// is rolled back alone. Returns the outcome of each write.
///
/// # Errors
/// When a savepoint cannot be opened, released or rolled back: the transaction can then no
/// longer be trusted and the caller must roll it back whole.
async fn insert_in_savepoints(
    conn: &mut SqliteConnection,
    writes: &[PreparedWrite],
) -> Result<Vec<Result<(), JournalError>>, JournalError> {
    if let [single] = writes {
        return Ok(vec![insert_atomic_write(conn, single).await]);
    }
    let storage = |e| JournalError::storage("write", e);
    let mut outcomes = Vec::with_capacity(writes.len());
    for write in writes {
        let mut savepoint = conn.begin().await.map_err(storage)?;
        match insert_atomic_write(&mut savepoint, write).await {
            Ok(()) => {
                savepoint.commit().await.map_err(storage)?;
                outcomes.push(Ok(()));
            }
            Err(error) => {
                savepoint.rollback().await.map_err(storage)?;
                outcomes.push(Err(error));
            }
        }
    }
    Ok(outcomes)
}

/// Inserts the events of one atomic write and raises its persistence id's highest sequence
/// number, inside a transaction the caller opened and will commit or roll back.
///
/// On error some of the events may already be inserted: the caller must roll back (the whole
/// transaction, or the savepoint around this call when several atomic writes share one).
///
/// # Errors
/// [`JournalError::ConcurrentWrite`] with the first sequence number that is already stored;
/// [`JournalError::Storage`] for any other database error.
async fn insert_atomic_write(
    conn: &mut SqliteConnection,
    write: &PreparedWrite,
) -> Result<(), JournalError> {
    let persistence_id = write.persistence_id();
    for (event, tags) in write.write.events.iter().zip(&write.tags) {
        let inserted = sqlx::query(
            "INSERT INTO journal \
                 (persistence_id, seq_nr, writer_uuid, write_timestamp, serializer_id, \
                  manifest, payload, tags) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
             ON CONFLICT (persistence_id, seq_nr) DO NOTHING",
        )
        .bind(persistence_id)
        // Consecutive and at most `highest_seq_nr`, which fits.
        .bind(clamp_seq_nr(event.seq_nr))
        .bind(&event.writer_uuid)
        .bind(event.timestamp)
        .bind(i64::from(event.serializer_id))
        .bind(&event.manifest)
        .bind(&event.payload)
        .bind(tags)
        .execute(&mut *conn)
        .await;
        let concurrent_write = || JournalError::ConcurrentWrite {
            persistence_id: persistence_id.to_owned(),
            seq_nr: event.seq_nr,
        };
        match inserted {
            Ok(done) if done.rows_affected() == 0 => return Err(concurrent_write()),
            Ok(_) => {}
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                return Err(concurrent_write())
            }
            Err(e) => return Err(JournalError::storage("write", e)),
        }
    }
    sqlx::query(
        "INSERT INTO journal_highest (persistence_id, highest_seq_nr) VALUES (?1, ?2) \
         ON CONFLICT (persistence_id) \
         DO UPDATE SET highest_seq_nr = max(highest_seq_nr, excluded.highest_seq_nr)",
    )
    .bind(persistence_id)
    .bind(write.highest_seq_nr)
    .execute(&mut *conn)
    .await
    .map_err(|e| JournalError::storage("write", e))?;
    Ok(())
}

/// Where a replay stands: the next page starts at `next_from`.
struct ReplayCursor {
    readers: SqlitePool,
    persistence_id: String,
    next_from: i64,
    to: i64,
    remaining: u64,
    page_size: u32,
}

/// The events of one page (a failed page ends with its error), and the cursor for the next
/// page if there may be one.
type Page = (
    Vec<Result<PersistentRepr, JournalError>>,
    Option<ReplayCursor>,
);

impl ReplayCursor {
    async fn next_page(mut self) -> Page {
        let limit = self.remaining.min(u64::from(self.page_size));
        let rows = sqlx::query(
            "SELECT persistence_id, seq_nr, writer_uuid, write_timestamp, serializer_id, \
                    manifest, payload, tags \
             FROM journal \
             WHERE persistence_id = ?1 AND seq_nr >= ?2 AND seq_nr <= ?3 \
             ORDER BY seq_nr \
             LIMIT ?4",
        )
        .bind(&self.persistence_id)
        .bind(self.next_from)
        .bind(self.to)
        // At most `page_size`, a u32.
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.readers)
        .await;
        let rows = match rows {
            Ok(rows) => rows,
            Err(e) => return (vec![Err(JournalError::storage("replay", e))], None),
        };
        let mut events = Vec::with_capacity(rows.len());
        let mut last_seq_nr = None;
        for row in &rows {
            match decode_event(row) {
                Ok((seq_nr, event)) => {
                    last_seq_nr = Some(seq_nr);
                    events.push(Ok(event));
                }
                Err(error) => {
                    events.push(Err(error));
                    return (events, None);
                }
            }
        }
        let full_page = rows.len() as u64 == limit;
        self.remaining -= rows.len() as u64;
        let next = match last_seq_nr {
            Some(last) if full_page && self.remaining > 0 && last < self.to => {
                self.next_from = last + 1;
                Some(self)
            }
            _ => None,
        };
        (events, next)
    }
}

/// Reads one journal row back into an event; also returns its sequence number as stored.
fn decode_event(row: &SqliteRow) -> Result<(i64, PersistentRepr), JournalError> {
    let column_error = |e| JournalError::storage("replay", e);
    let persistence_id: String = row.try_get("persistence_id").map_err(column_error)?;
    let stored_seq_nr: i64 = row.try_get("seq_nr").map_err(column_error)?;
    let corrupt = |reason: String| {
        JournalError::storage(
            "replay",
            SqlStoreError::CorruptRow {
                persistence_id: persistence_id.clone(),
                seq_nr: stored_seq_nr,
                reason,
            },
        )
    };
    let seq_nr =
        u64::try_from(stored_seq_nr).map_err(|_| corrupt("negative sequence number".to_owned()))?;
    let serializer_id: i64 = row.try_get("serializer_id").map_err(column_error)?;
    let serializer_id = u32::try_from(serializer_id)
        .map_err(|_| corrupt(format!("serializer id {serializer_id} is not a u32")))?;
    let tags: String = row.try_get("tags").map_err(column_error)?;
    let tags: Vec<String> = serde_json::from_str(&tags)
        .map_err(|e| corrupt(format!("tags are not a JSON array of strings: {e}")))?;
    let event = PersistentRepr {
        seq_nr,
        payload: row.try_get("payload").map_err(column_error)?,
        serializer_id,
        manifest: row.try_get("manifest").map_err(column_error)?,
        writer_uuid: row.try_get("writer_uuid").map_err(column_error)?,
        timestamp: row.try_get("write_timestamp").map_err(column_error)?,
        tags,
        persistence_id,
    };
    Ok((stored_seq_nr, event))
}

/// A sequence number bound in the API (u64) as a SQLite INTEGER: above `i64::MAX` (no stored
/// sequence number is) it is as good as no bound.
pub(crate) fn clamp_seq_nr(seq_nr: u64) -> i64 {
    i64::try_from(seq_nr).unwrap_or(i64::MAX)
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
    /// of its rows fails it with [`JournalError::Storage`]. The other writes of the batch are
    /// unaffected by either. When the transaction cannot begin or commit (or the writer
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
        Ok(self.writer.write(writes).await)
    }

    /// Streams the events page by page ([`SqliteJournalOptions::replay_batch_size`] per query,
    /// on the reader pool), so memory stays bounded however long the replay. Each page is read
    /// in its own snapshot: events committed while the replay runs may or may not be seen.
    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        let to = clamp_seq_nr(to);
        let Ok(from) = i64::try_from(from) else {
            return Box::pin(stream::empty());
        };
        if max == 0 || from > to {
            return Box::pin(stream::empty());
        }
        let cursor = ReplayCursor {
            readers: self.pools.readers.clone(),
            persistence_id: pid.to_owned(),
            next_from: from,
            to,
            remaining: max,
            page_size: self.replay_batch_size,
        };
        stream::unfold(Some(cursor), |cursor| async move {
            Some(cursor?.next_page().await)
        })
        .flat_map(stream::iter)
        .boxed()
    }

    /// Reads the highest sequence number from its own table (0 for an id that never wrote);
    /// `from` is not needed.
    async fn read_highest_sequence_nr(&self, pid: &str, _from: u64) -> Result<u64, JournalError> {
        let highest: Option<i64> = sqlx::query_scalar(
            "SELECT highest_seq_nr FROM journal_highest WHERE persistence_id = ?1",
        )
        .bind(pid)
        .fetch_optional(&self.pools.readers)
        .await
        .map_err(|e| JournalError::storage("read highest sequence number", e))?;
        match highest {
            None => Ok(0),
            Some(highest) => u64::try_from(highest).map_err(|_| {
                JournalError::storage(
                    "read highest sequence number",
                    SqlStoreError::CorruptRow {
                        persistence_id: pid.to_owned(),
                        seq_nr: highest,
                        reason: "negative highest sequence number".to_owned(),
                    },
                )
            }),
        }
    }

    /// Deletes the events with `seq_nr <= to` (all of them for `u64::MAX`) in one statement on
    /// the writer connection; the highest sequence number is kept.
    async fn delete_messages_to(&self, pid: &str, to: u64) -> Result<(), JournalError> {
        sqlx::query("DELETE FROM journal WHERE persistence_id = ?1 AND seq_nr <= ?2")
            .bind(pid)
            .bind(clamp_seq_nr(to))
            .execute(&self.pools.writer)
            .await
            .map_err(|e| JournalError::storage("delete", e))?;
        Ok(())
    }
}
