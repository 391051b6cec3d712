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

/// The schema migrations under `migrations/sqlite/`, embedded at compile time.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// Default of [`SqliteJournalOptions::url`].
pub const DEFAULT_SQLITE_URL: &str = "sqlite:actix-persistence.db";

/// Default of [`SqliteJournalOptions::replay_batch_size`].
pub const DEFAULT_REPLAY_BATCH_SIZE: u32 = 500;

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
        }
    }
}

/// A [`JournalStore`] in a SQLite database file.
///
/// Holds one single-connection pool for writes and deletes (SQLite has one writer at a time, so
/// writes queue in the process instead of failing with `SQLITE_BUSY`) and a pool of
/// [`max_connections`](SqliteJournalOptions::max_connections) connections for reads, which in
/// WAL mode never block on the writer. Cheap to clone: clones share both pools.
///
/// # Guarantees
/// - **Durability**: each atomic write is stored in its own transaction (`BEGIN IMMEDIATE` ...
///   `COMMIT`) with `synchronous = FULL`. An event is durable once its transaction has
///   committed, that is when [`write_messages`](JournalStore::write_messages) returns `Ok(())`
///   for its atomic write; it then survives a crash of the process or of the machine, and every
///   later replay sees it.
/// - **Atomicity**: all events of an atomic write are stored, or none.
/// - **Order**: the atomic writes of one call are stored in the order given, and the results
///   come back in that order, one per atomic write.
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
#[derive(Debug, Clone)]
pub struct SqliteJournal {
    writer: SqlitePool,
    readers: SqlitePool,
    replay_batch_size: u32,
}

impl SqliteJournal {
    /// Opens (and creates when missing) the database, turns on WAL mode, sets the busy timeout
    /// and brings the schema up to date with the embedded migrations.
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
    /// - [`SqlStoreError::InvalidOption`] when `max_connections` or `replay_batch_size` is 0;
    /// - [`SqlStoreError::Connect`], naming the URL, when it does not parse or the database
    ///   cannot be opened or created (for example its directory does not exist);
    /// - [`SqlStoreError::Migrate`] when the schema cannot be brought up to date.
    pub async fn connect(options: &SqliteJournalOptions) -> Result<Self, SqlStoreError> {
        if options.max_connections == 0 {
            return Err(SqlStoreError::InvalidOption {
                option: "max_connections",
                value: options.max_connections.to_string(),
                reason: "the reader pool needs at least one connection",
            });
        }
        if options.replay_batch_size == 0 {
            return Err(SqlStoreError::InvalidOption {
                option: "replay_batch_size",
                value: options.replay_batch_size.to_string(),
                reason: "a replay must read at least one event per query",
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
        Ok(SqliteJournal {
            writer,
            readers,
            replay_batch_size: options.replay_batch_size,
        })
    }

    /// Closes both pools, waiting for the connections in use to be returned. Every clone of
    /// this journal is closed with it; later operations fail with [`JournalError::Storage`].
    pub async fn close(&self) {
        self.writer.close().await;
        self.readers.close().await;
    }

    /// Stores the atomic writes of a batch in order, each in its own transaction, on the one
    /// writer connection (taken once for the whole batch).
    async fn write_batch(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        let mut results = Vec::with_capacity(writes.len());
        let mut writer = None;
        for write in &writes {
            let prepared = match PreparedWrite::new(write) {
                Ok(prepared) => prepared,
                Err(rejection) => {
                    results.push(Err(rejection.into()));
                    continue;
                }
            };
            let conn = match writer.as_mut() {
                Some(conn) => conn,
                None => writer.insert(
                    self.writer
                        .acquire()
                        .await
                        .map_err(|e| JournalError::storage("write", e))?,
                ),
            };
            results.push(write_in_own_transaction(conn, &prepared).await);
        }
        Ok(results)
    }
}

/// One event, checked and converted to the column types.
struct EventRow<'a> {
    event: &'a PersistentRepr,
    seq_nr: i64,
    tags: String,
}

/// An atomic write that passed every check before storage: what is left can only fail in the
/// database.
struct PreparedWrite<'a> {
    persistence_id: &'a str,
    highest_seq_nr: i64,
    rows: Vec<EventRow<'a>>,
}

impl<'a> PreparedWrite<'a> {
    /// Checks the shape of `write` and converts its events, or says why it is rejected.
    fn new(write: &'a AtomicWrite) -> Result<Self, WriteRejection> {
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
        let rows = write
            .events
            .iter()
            .map(|event| {
                let tags = serde_json::to_string(&event.tags)
                    .map_err(|e| reject(format!("tags could not be encoded as JSON: {e}")))?;
                Ok(EventRow {
                    event,
                    // Consecutive and at most `highest_seq_nr`, which fits.
                    seq_nr: i64::try_from(event.seq_nr).unwrap_or(i64::MAX),
                    tags,
                })
            })
            .collect::<Result<_, WriteRejection>>()?;
        Ok(PreparedWrite {
            persistence_id: write.persistence_id(),
            highest_seq_nr,
            rows,
        })
    }
}

/// Stores one atomic write in a transaction of its own: committed whole, or rolled back.
async fn write_in_own_transaction(
    conn: &mut SqliteConnection,
    write: &PreparedWrite<'_>,
) -> AtomicWriteResult {
    // IMMEDIATE takes the write lock up front (waiting up to the busy timeout), so the
    // transaction never has to upgrade a read lock, which SQLite may refuse with SQLITE_BUSY.
    let mut tx = conn
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(|e| JournalError::storage("write", e))?;
    if let Err(error) = insert_atomic_write(&mut tx, write).await {
        if let Err(rollback) = tx.rollback().await {
            tracing::warn!(
                persistence_id = write.persistence_id,
                error = %rollback,
                "rolling back a failed atomic write failed"
            );
        }
        return Err(error.into());
    }
    tx.commit()
        .await
        .map_err(|e| JournalError::storage("write", e))?;
    Ok(())
}

/// Inserts the events of one atomic write and raises its persistence id's highest sequence
/// number, inside a transaction the caller opened and will commit or roll back.
///
/// On error some of the events may already be inserted: the caller must roll back (the whole
/// transaction, or a savepoint around this call when several atomic writes share one).
///
/// # Errors
/// [`JournalError::ConcurrentWrite`] with the first sequence number that is already stored;
/// [`JournalError::Storage`] for any other database error.
async fn insert_atomic_write(
    conn: &mut SqliteConnection,
    write: &PreparedWrite<'_>,
) -> Result<(), JournalError> {
    for row in &write.rows {
        let inserted = sqlx::query(
            "INSERT INTO journal \
                 (persistence_id, seq_nr, writer_uuid, write_timestamp, serializer_id, \
                  manifest, payload, tags) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
             ON CONFLICT (persistence_id, seq_nr) DO NOTHING",
        )
        .bind(write.persistence_id)
        .bind(row.seq_nr)
        .bind(&row.event.writer_uuid)
        .bind(row.event.timestamp)
        .bind(i64::from(row.event.serializer_id))
        .bind(&row.event.manifest)
        .bind(&row.event.payload)
        .bind(&row.tags)
        .execute(&mut *conn)
        .await;
        let concurrent_write = || JournalError::ConcurrentWrite {
            persistence_id: write.persistence_id.to_owned(),
            seq_nr: row.event.seq_nr,
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
    .bind(write.persistence_id)
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
fn clamp_seq_nr(seq_nr: u64) -> i64 {
    i64::try_from(seq_nr).unwrap_or(i64::MAX)
}

#[async_trait]
impl JournalStore for SqliteJournal {
    /// Stores each atomic write in its own transaction, in order, on the single writer
    /// connection. A write is durable once this returns `Ok(())` for it.
    ///
    /// Per atomic write: a bad shape or a sequence number above `i64::MAX` is rejected (not
    /// stored, nothing attempted); a sequence number already stored fails it with
    /// [`JournalError::ConcurrentWrite`] (the first such one); another database error fails it
    /// with [`JournalError::Storage`]. The other writes of the batch are unaffected.
    ///
    /// The whole batch fails only when the writer connection cannot be had.
    ///
    /// Cancel safety: dropping the returned future rolls back the atomic write in progress;
    /// the writes before it stay committed, the ones after it are not attempted.
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        self.write_batch(writes).await
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
            readers: self.readers.clone(),
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
        .fetch_optional(&self.readers)
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
            .execute(&self.writer)
            .await
            .map_err(|e| JournalError::storage("delete", e))?;
        Ok(())
    }
}
