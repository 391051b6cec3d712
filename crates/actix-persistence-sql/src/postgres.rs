//! The PostgreSQL journal store: [`PostgresJournal`] and its [`PostgresJournalOptions`].

use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::{AtomicI64, Ordering as AtomicOrdering};
use std::sync::Arc;
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
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection, Executor, Postgres, Transaction};

use crate::error::{ConnectFailure, SqlStoreError};
use crate::group_commit::{WriteStats, Writer, DEFAULT_MAX_BATCH_SIZE};
use crate::home_runtime::HomeRuntime;
use crate::journal_common::{
    all_distinct, check_batch_sizes, check_max_connections, clamp_seq_nr, in_use,
    ownership_from_row, ownerships_in_order, token_to_sql, ConnectionsInUse, Dialect,
    JournalTables, SqlBackend, TAKE_OWNERSHIP,
};
use crate::postgres_snapshot::PostgresSnapshotStore;
use crate::postgres_tags;
use crate::DEFAULT_REPLAY_BATCH_SIZE;

/// The schema migrations under `migrations/postgres/`, embedded at compile time, run by
/// [`crate::migrate`] with bookkeeping of their own (no advisory lock: Postgres-compatible
/// engines such as CockroachDB lack it).
static MIGRATOR: Migrator = sqlx::migrate!("migrations/postgres");

/// The statement's start on the database clock, microseconds since the Unix epoch: the query
/// clock ([`Dialect::CURRENT_TIMESTAMP`]). An insert's events take [`micros_after_owned!`]
/// instead (migration 0003's comment, which names this one, predates that).
macro_rules! statement_micros {
    () => {
        "(extract(epoch from statement_timestamp()) * 1000000)::bigint"
    };
}

/// The database clock, microseconds since the Unix epoch, read once every row of the
/// statement's `owned` CTE (the `journal_highest` rows of its persistence ids) is locked: the
/// database timestamp of the events a write inserts. `statement_timestamp()` was read before
/// a wait for those locks (a `delete_events_to` of the same id holds its row while it deletes):
/// an event stamped before such a wait, however long, commits after later-stamped events were
/// delivered, behind a live query's late-commit window, and was never delivered to it (nor
/// the events of other ids batched with it). Read after the locks, the time from stamp to
/// commit is the insert's own, which the window bounds. One value for the whole statement (an
/// uncorrelated subquery, evaluated once), as `statement_timestamp()` was.
macro_rules! micros_after_owned {
    () => {
        "(SELECT (extract(epoch from clock_timestamp()) * 1000000)::bigint           FROM (SELECT count(*) FROM owned) AS every_owned_row_locked)"
    };
}

/// Events per `INSERT` statement: an atomic write with more events takes several statements
/// (in the same savepoint), keeping each under PostgreSQL's 65535 bind parameters.
const ROWS_PER_STATEMENT: usize = 1000;

/// Bytes of event data one `INSERT` statement sends at most (see [`event_bytes`]); the events
/// beyond go in further statements of the same transaction (or savepoint), so that atomicity
/// is unchanged. PostgreSQL refuses a bind message, and an array value, of 1 GiB or more (and
/// closes the connection): events within the [limits](actix_persistence_core::limits) (each
/// payload up to 10 MiB, 10,000 events per atomic write, 512 atomic writes per batch) add up
/// to far more. One event is at most about 10 MiB + 17 KiB, so a statement stays well below.
const STATEMENT_BYTES: usize = 64 * 1024 * 1024;

/// What `event` adds to a statement's bind message, roughly: its payload and text fields (each
/// array element and parameter also takes a length word).
fn event_bytes(event: &PersistentRepr) -> usize {
    const WORD: usize = 4;
    let tags: usize = event.tags.iter().map(|tag| tag.len() + WORD).sum();
    event.payload.len()
        + event.manifest.len()
        + event.writer_uuid.len()
        + event.persistence_id.len()
        + tags
        + 12 * WORD
}

/// The event bytes ([`event_bytes`]) of the statement being built, against
/// [`STATEMENT_BYTES`].
#[derive(Debug, Default)]
struct StatementBytes(usize);

impl StatementBytes {
    /// Counts `event` in: `false` when the statement, holding events already, has no room for
    /// it; the count then starts anew with `event`, the first of the next statement.
    fn fits(&mut self, event: &PersistentRepr) -> bool {
        let size = event_bytes(event);
        if self.0 > 0 && self.0 + size > STATEMENT_BYTES {
            self.0 = size;
            return false;
        }
        self.0 += size;
        true
    }
}

/// `events` split into consecutive runs of at most [`ROWS_PER_STATEMENT`] events and at most
/// [`STATEMENT_BYTES`] bytes ([`event_bytes`]); a run holds at least one event.
fn statement_chunks(events: &[PersistentRepr]) -> impl Iterator<Item = &[PersistentRepr]> {
    let mut rest = events;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = StatementBytes::default();
        let end = rest
            .iter()
            .take(ROWS_PER_STATEMENT)
            .take_while(|event| bytes.fits(event))
            .count();
        let (chunk, after) = rest.split_at(end);
        rest = after;
        Some(chunk)
    })
}

/// How [`PostgresJournal::connect`] reaches the database.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// # use actix_persistence_sql as actix_persistence; // the paths of the facade, `actix-persistence`
/// use actix_persistence::PostgresJournalOptions;
///
/// let options = PostgresJournalOptions {
///     max_connections: 20,
///     statement_timeout: Duration::from_secs(30),
///     ..PostgresJournalOptions::new("postgres://app@db.internal/events")
/// };
/// assert_eq!(options.max_batch_size, 512);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresJournalOptions {
    /// The database, as a sqlx PostgreSQL URL:
    /// `postgres://user:password@host:5432/database?sslmode=require`, or a Unix socket as in
    /// `postgres:///database?host=/var/run/postgresql&user=app`. The database must exist; the
    /// embedded migrations create the tables. sqlx also reads the libpq variables (`PGHOST`,
    /// `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`, ...) for parts the URL leaves out.
    ///
    /// No default: [`connect`](PostgresJournal::connect) refuses an empty URL. (The
    /// `journal.postgres.url` setting falls back to the `DATABASE_URL` environment variable.)
    pub url: String,
    /// Connections the journal holds at most, split into two budgets so that replays and
    /// writes can never take each other's last connection: half of them (at least 1) for
    /// writes and deletes, the rest for replays, highest sequence numbers and a snapshot store
    /// made with [`PostgresJournal::snapshot_store`] (see [`connection_budgets`]). With 1,
    /// everything shares that connection. With group commit, writes use one connection per
    /// transaction in flight (at most 4). Must be at least 1.
    ///
    /// Default: 10 (5 for writes, 5 for reads).
    pub max_connections: u32,
    /// How long an operation waits for a free connection of the pool (or for a new one to
    /// connect) before it fails.
    ///
    /// Default: 5 s.
    pub acquire_timeout: Duration,
    /// The server-side `statement_timeout` of every connection: a statement running longer is
    /// cancelled by the server and its operation fails. Zero means no limit.
    ///
    /// Default: 10 s.
    pub statement_timeout: Duration,
    /// Group commit: at most this many atomic writes, from any number of concurrent
    /// [`write_messages`](JournalStore::write_messages) calls, share one transaction (see
    /// [`PostgresJournal`]). 1 turns group commit off: every atomic write is then its own
    /// transaction, run by the calling task on a connection of the pool. Must be at least 1.
    ///
    /// Default: 512 ([`DEFAULT_MAX_BATCH_SIZE`]).
    pub max_batch_size: u32,
    /// How many events a replay reads per query. A replay holds at most three pages in memory
    /// (the one being applied and the next two, read ahead meanwhile), however many events it
    /// returns. Must be at least 1.
    ///
    /// Default: 1,000 ([`DEFAULT_REPLAY_BATCH_SIZE`]).
    pub replay_batch_size: u32,
    /// The PostgreSQL schema that holds the journal's tables (and its migration records,
    /// [`MIGRATIONS_TABLE`](crate::MIGRATIONS_TABLE)): created when missing, and the
    /// `search_path` of every connection of the pool. Empty: the connection's default
    /// `search_path` (usually `public`).
    ///
    /// Default: empty.
    pub schema: String,
}

impl PostgresJournalOptions {
    /// The default options with this database URL.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresJournalOptions {
            url: url.into(),
            ..Self::default()
        }
    }
}

impl Default for PostgresJournalOptions {
    /// The defaults, with an empty URL (which [`PostgresJournal::connect`] refuses).
    fn default() -> Self {
        PostgresJournalOptions {
            url: String::new(),
            max_connections: 10,
            acquire_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(10),
            max_batch_size: DEFAULT_MAX_BATCH_SIZE,
            replay_batch_size: DEFAULT_REPLAY_BATCH_SIZE,
            schema: String::new(),
        }
    }
}

/// How [`PostgresJournalOptions::max_connections`] is split: `(writes, reads)`, the writes
/// getting half (at least 1) and the reads the rest; `reads` is 0 for a single connection,
/// which then serves both.
///
/// # Examples
/// ```
/// use actix_persistence_sql::connection_budgets;
///
/// assert_eq!(connection_budgets(10), (5, 5));
/// assert_eq!(connection_budgets(3), (1, 2));
/// assert_eq!(connection_budgets(1), (1, 0));
/// ```
pub fn connection_budgets(max_connections: u32) -> (u32, u32) {
    let writes = (max_connections / 2).max(1);
    (writes, max_connections.saturating_sub(writes))
}

/// Opens the pools of a journal: the writer pool (which also brings the schema up to date) and
/// a separate reader pool, each with its budget of `max_connections`; one shared pool when
/// `max_connections` is 1.
async fn open_pools(options: &PostgresJournalOptions) -> Result<(PgPool, PgPool), SqlStoreError> {
    check_max_connections(
        options.max_connections,
        "the pool needs at least one connection",
    )?;
    let (writes, reads) = connection_budgets(options.max_connections);
    let writer = open_pool(&PostgresJournalOptions {
        max_connections: writes,
        ..options.clone()
    })
    .await?;
    if reads == 0 {
        return Ok((writer.clone(), writer));
    }
    let readers = connect_pool(
        &PostgresJournalOptions {
            max_connections: reads,
            ..options.clone()
        },
        Plans::Generic,
    )
    .await?;
    Ok((writer, readers))
}

/// Opens the pool and brings the schema (journal and snapshots) up to date.
pub(crate) async fn open_pool(options: &PostgresJournalOptions) -> Result<PgPool, SqlStoreError> {
    let pool = connect_pool(options, Plans::Chosen).await?;
    check_encoding(&pool, &options.url).await?;
    let schema = quoted_schema(&options.schema)?;
    migrate_postgres_in(&pool, schema.as_deref()).await?;
    Ok(pool)
}

/// Refuses a database whose encoding cannot hold any Unicode text
/// ([`SqlStoreError::DatabaseEncoding`]); `UTF8` and `SQL_ASCII` (bytes stored as given) can.
/// A failure to read the encoding is left to the migrations that follow, which report it.
async fn check_encoding(pool: &PgPool, url: &str) -> Result<(), SqlStoreError> {
    let encoding: Result<String, _> =
        sqlx::query_scalar("SELECT current_setting('server_encoding')")
            .fetch_one(pool)
            .await;
    match encoding {
        Ok(encoding) if encoding != "UTF8" && encoding != "SQL_ASCII" => {
            Err(SqlStoreError::DatabaseEncoding {
                url: redact_password(url),
                encoding,
            })
        }
        _ => Ok(()),
    }
}

/// Brings the schema of the PostgreSQL database behind `pool` up to date with the migrations
/// embedded in this crate (journal, snapshots, queries, fencing, projection offsets, deleted-to
/// marks), in the connections' `search_path`. [`PostgresJournal::connect`] runs it; other
/// users of the same database (a projection's offset store on a pool of its own) call it to
/// make sure the tables exist.
///
/// # Errors
/// [`SqlStoreError::Migrate`] when the schema cannot be brought up to date;
/// [`SqlStoreError::ForeignTable`] when no migration was applied yet and a table of one of the
/// journal's names exists in the schema.
pub async fn migrate_postgres(pool: &PgPool) -> Result<(), SqlStoreError> {
    migrate_postgres_in(pool, None).await
}

/// [`migrate_postgres`], first creating `schema` (already quoted) when one is given.
async fn migrate_postgres_in(pool: &PgPool, schema: Option<&str>) -> Result<(), SqlStoreError> {
    // Without an advisory lock, processes starting together may apply the same migration at
    // once (see `with_retries`).
    crate::migrate::with_retries(&MIGRATOR, || async {
        if let Some(schema) = schema {
            sqlx::raw_sql(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                .execute(pool)
                .await
                .map_err(|e| SqlStoreError::Migrate { source: e.into() })?;
        }
        crate::migrate::postgres::run(pool, &MIGRATOR).await
    })
    .await
}

/// How the connections of a pool plan their prepared statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plans {
    /// As PostgreSQL chooses (`plan_cache_mode = auto`): the writer pool's.
    Chosen,
    /// One generic plan per prepared statement (`plan_cache_mode = force_generic_plan`): the
    /// reader pool's. Left to PostgreSQL's choice, the pages of replays and queries were
    /// planned anew at every execution: the planner estimates one row for their row comparison
    /// (`(entity_type, db_timestamp, ...) > (...)`), so a custom plan always looks cheaper than
    /// the generic one, which is the same index scan (`EXPLAIN ANALYZE` of a page of 1,001
    /// events by slices: planning 0.22 ms of the page's 0.6 ms, 0.008 ms with the generic
    /// plan; docs/benchmarks.md "Session 15"). Every reader statement's generic plan scans the
    /// index its custom plans scan (checked for pages by slices, by slice range, by tag, with
    /// the previous event's timestamp, and the replay's pages). A server that refuses the
    /// setting (before PostgreSQL 12, or a compatible database) keeps its own choice.
    Generic,
}

/// Opens a pool of `options.max_connections` connections, each with the statement timeout
/// (and the schema as its `search_path`) and `plans`, after one direct connection that reports
/// what failed.
async fn connect_pool(
    options: &PostgresJournalOptions,
    plans: Plans,
) -> Result<PgPool, SqlStoreError> {
    if options.url.trim().is_empty() {
        return Err(SqlStoreError::InvalidOption {
            option: "url",
            value: format!("{:?}", options.url),
            reason: "name the PostgreSQL database, e.g. postgres://user@host/database",
        });
    }
    check_max_connections(
        options.max_connections,
        "the pool needs at least one connection",
    )?;
    let url = redact_password(&options.url);
    let connect_error = |source| SqlStoreError::connect(url.clone(), source);
    let connect_options = PgConnectOptions::from_str(&options.url).map_err(connect_error)?;
    let schema = quoted_schema(&options.schema)?;
    // One connection first: the pool would report any failure as "pool timed out".
    check_connection(&connect_options, options.acquire_timeout, &url).await?;
    // Notices of the migrations' IF NOT EXISTS statements ("relation ... already exists,
    // skipping") would reach the application's logs at info on every start: warnings only.
    // PostgreSQL's statement_timeout is an int of ms and refuses larger values (every
    // connection would fail): a longer timeout (25 days and more) is its largest.
    let mut session = format!(
        "SET statement_timeout = {}; SET client_min_messages TO warning",
        options.statement_timeout.as_millis().min(i32::MAX as u128)
    );
    if let Some(schema) = &schema {
        session.push_str(&format!("; SET search_path TO {schema}"));
    }
    let pool = PgPoolOptions::new()
        .max_connections(options.max_connections)
        // sqlx adds it to `Instant::now()` (a panic past the clock's end): a longer one is 30
        // years, as good as never.
        .acquire_timeout(options.acquire_timeout.min(LONGEST_ACQUIRE_TIMEOUT))
        .after_connect(move |conn, _| {
            let session = session.clone();
            Box::pin(async move {
                conn.execute(sqlx::raw_sql(&session)).await?;
                if plans == Plans::Generic {
                    force_generic_plans(conn).await?;
                }
                Ok(())
            })
        })
        .connect_with(connect_options)
        .await
        .map_err(connect_error)?;
    Ok(pool)
}

/// Sets `plan_cache_mode = force_generic_plan` on `conn` ([`Plans::Generic`]). A server that
/// refuses it (one that does not know the setting, SQLSTATE 42704, as before PostgreSQL 12, or
/// a compatible database that does not take this value) keeps its own choice: the setting only
/// saves planning time, so it never fails a connection.
async fn force_generic_plans(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    match conn
        .execute(sqlx::raw_sql("SET plan_cache_mode = force_generic_plan"))
        .await
    {
        Ok(_) => Ok(()),
        Err(sqlx::Error::Database(error)) => {
            tracing::debug!("the server refused plan_cache_mode = force_generic_plan: {error}");
            Ok(())
        }
        Err(error) => Err(error),
    }
}

/// `schema` as a quoted identifier, `None` when empty.
fn quoted_schema(schema: &str) -> Result<Option<String>, SqlStoreError> {
    if schema.is_empty() {
        return Ok(None);
    }
    if schema.contains('\0') {
        return Err(SqlStoreError::InvalidOption {
            option: "schema",
            value: format!("{schema:?}"),
            reason: "a PostgreSQL identifier cannot hold a NUL character",
        });
    }
    Ok(Some(format!("\"{}\"", schema.replace('"', "\"\""))))
}

/// The longest `acquire_timeout` handed to sqlx (30 years): see [`connect_pool`].
const LONGEST_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// Connects once, to report what failed (refused, authentication, unknown database, no
/// answer) and where, instead of the pool's "timed out while waiting for an open connection".
async fn check_connection(
    options: &PgConnectOptions,
    timeout: Duration,
    url: &str,
) -> Result<(), SqlStoreError> {
    match tokio::time::timeout(timeout, PgConnection::connect_with(options)).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(source)) => Err(SqlStoreError::connect(url.to_owned(), source)),
        Err(_) => Err(SqlStoreError::Connect {
            url: url.to_owned(),
            failure: ConnectFailure::NoAnswer {
                timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            },
            source: sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no answer to the connection attempt",
            )),
        }),
    }
}

/// `url` with the password of its user info (`user:password@`) and any `password=` parameter
/// replaced by `***`, for error messages.
pub(crate) fn redact_password(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let authority_start = scheme_end + 3;
        let authority_end = out[authority_start..]
            .find(['/', '?'])
            .map_or(out.len(), |i| authority_start + i);
        if let Some(at) = out[authority_start..authority_end].rfind('@') {
            let user_info = &out[authority_start..authority_start + at];
            if let Some(colon) = user_info.find(':') {
                out.replace_range(authority_start + colon + 1..authority_start + at, "***");
            }
        }
    }
    if let Some(query_start) = out.find('?') {
        let (base, query) = out.split_at(query_start + 1);
        let query = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => pair.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("&");
        out = format!("{base}{query}");
    }
    out
}

/// A [`JournalStore`] in a PostgreSQL database (or a Postgres-compatible one: the SQL uses no
/// extension, no advisory lock and no `LISTEN`/`NOTIFY`).
///
/// Holds two pools, [`max_connections`](PostgresJournalOptions::max_connections) connections
/// together: one for writes and deletes, one for replays, highest sequence numbers and
/// snapshots ([`connection_budgets`]), so that any number of recovering actors cannot starve
/// writes of connections, nor writes starve replays. A replay holds two reader connections at
/// most, only while it reads pages (the next two pages are read ahead, each by a task of its
/// own, while the recovering actor applies the current one), and never waits for the actor to
/// give them back. Cheap to
/// clone: clones share the pools, the writer task and the [`stats`](Self::stats).
///
/// # Group commit
/// Atomic writes that arrive while a transaction is in flight, from any number of concurrent
/// [`write_messages`](JournalStore::write_messages) calls (many persistent actors), wait in a
/// queue; when the transaction ends, a writer task stores up to
/// [`max_batch_size`](PostgresJournalOptions::max_batch_size) of them in the next transaction,
/// so one commit (one WAL flush, one round trip) stores many atomic writes. Each atomic write of
/// a batch runs in a savepoint of its own: one that fails (its sequence number is already
/// stored by another writer, or the database refuses one of its rows) is rolled back alone and
/// the others commit. With `max_batch_size` 1 there is no writer task: each atomic write is its
/// own transaction, run by the calling task, and calls run concurrently on the pool.
///
/// # Guarantees
/// - **Durability**: an event is durable once its transaction has committed, that is when
///   [`write_messages`](JournalStore::write_messages) returns `Ok(())` for its atomic write (as
///   durable as the server's `synchronous_commit` makes a commit): no success is ever reported
///   before `COMMIT` returned, and every later replay sees the event.
/// - **Atomicity**: all events of an atomic write are stored, or none. A failed `COMMIT` fails
///   every atomic write of its batch ([`AtomicWriteError::Failed`]) and stores none of them.
/// - **Order**: the atomic writes of one call are stored in the order given, calls in the order
///   they were made, and the results come back in call order, one per atomic write.
/// - **No overwrite**: a sequence number that is stored for the persistence id makes its atomic
///   write fail with [`JournalError::ConcurrentWrite`] naming the first such sequence number;
///   the stored event is kept.
/// - **Single writer (fencing)**: [`take_ownership`](JournalStore::take_ownership) raises the
///   id's owner epoch in `journal_highest`; a write with an older fencing token fails with
///   [`JournalError::Fenced`] and stores nothing. Each write locks the id's `journal_highest`
///   row (the same statement that checks the epoch), so a write and an ownership take of the
///   same id, from any processes, are ordered by that row lock.
/// - **Highest sequence number**: kept per persistence id in the `journal_highest` table,
///   raised in the write's transaction, never lowered, not even by deletes.
/// - **Persistence ids** are byte-exact `TEXT`: ids that differ only by case (or by Unicode
///   normalization) are different ids. PostgreSQL text cannot hold NUL, so a write whose
///   persistence id, writer id, manifest or tags hold one is rejected.
///
/// Sequence numbers are stored as `BIGINT`s, so at most `i64::MAX`: a write above it is
/// rejected, and replay and delete bounds above it mean "no bound". Serializer ids are stored as
/// the `INTEGER` with the same 32 bits.
///
/// [`AtomicWriteError::Failed`]: actix_persistence_core::AtomicWriteError::Failed
#[derive(Debug, Clone)]
pub struct PostgresJournal {
    /// Writes and deletes.
    pool: PgPool,
    /// Replays, highest sequence numbers, snapshots (the same pool as `pool` with 1
    /// connection).
    readers: PgPool,
    writer: Writer<SqlBackend<PostgresDialect>>,
    replay_batch_size: u32,
    /// Wakes the live queries of this process after each commit.
    notifier: WriteNotifier,
    /// When queries last checked the planner statistics of the query tables (wall clock,
    /// microseconds since the Unix epoch; 0: never), see [`QUERY_STATISTICS_INTERVAL`].
    statistics_checked: Arc<AtomicI64>,
    /// The runtime `connect` ran on: reads, deletes and queries run there, so that the pools
    /// open every connection on it ([`HomeRuntime`]).
    home: HomeRuntime,
}

/// How often (at most) a query round checks that the planner statistics of `journal` and
/// `event_tag` are fresh, microseconds.
const QUERY_STATISTICS_INTERVAL: i64 = 10_000_000;

/// A query table is analyzed by the queries when it grew since its last `ANALYZE` by at least
/// this many pages (of 8 kB by default: about 5,000 events of 150 bytes)...
const STALE_STATISTICS_PAGES: i64 = 100;
/// ... and by at least this fraction of its size then (1/10: as autovacuum's default
/// `autovacuum_analyze_scale_factor`, which the queries only anticipate).
const STALE_STATISTICS_DIVISOR: i64 = 10;

/// The tables read by queries by slice and by tag, whose statistics are kept fresh.
const QUERY_TABLES: [&str; 2] = ["journal", "event_tag"];

impl PostgresJournal {
    /// Connects the pool (at least one connection, to report a wrong URL at once), sets each
    /// connection's `statement_timeout`, brings the schema up to date with the embedded
    /// migrations and, with [`max_batch_size`](PostgresJournalOptions::max_batch_size) above
    /// 1, starts the writer task on the current Tokio runtime (it ends when the last clone of
    /// the journal is dropped).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> Result<(), actix_persistence_sql::SqlStoreError> {
    /// # use actix_persistence_sql as actix_persistence; // the paths of the facade, `actix-persistence`
    /// use actix_persistence::{PostgresJournal, PostgresJournalOptions};
    ///
    /// let url = std::env::var("DATABASE_URL").unwrap_or_default();
    /// let journal = PostgresJournal::connect(&PostgresJournalOptions::new(url)).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// - [`SqlStoreError::InvalidOption`] when `url` is empty or `max_connections`,
    ///   `replay_batch_size` or `max_batch_size` is 0;
    /// - [`SqlStoreError::Connect`], naming the URL (password hidden), when it does not parse
    ///   or the server refuses or cannot be reached within `acquire_timeout`;
    /// - [`SqlStoreError::Migrate`] when the schema cannot be brought up to date;
    /// - [`SqlStoreError::ForeignTable`] when the schema holds a table of one of the
    ///   journal's names that the journal's migrations did not create;
    /// - [`SqlStoreError::DatabaseEncoding`] when the database's encoding is neither `UTF8`
    ///   nor `SQL_ASCII`.
    pub async fn connect(options: &PostgresJournalOptions) -> Result<Self, SqlStoreError> {
        check_batch_sizes(options.replay_batch_size, options.max_batch_size)?;
        let (pool, readers) = open_pools(options).await?;
        let home = HomeRuntime::current();
        let journal = PostgresJournal {
            readers,
            writer: Writer::start(
                SqlBackend::new(pool.clone()),
                options.max_batch_size,
                concurrent_transactions(options.max_connections),
            )
            .on_home(home.clone()),
            pool,
            replay_batch_size: options.replay_batch_size,
            notifier: WriteNotifier::new(),
            statistics_checked: Arc::new(AtomicI64::new(0)),
            home,
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

    /// Closes the pool, waiting for the connections in use to be returned. Every clone of this
    /// journal, and every snapshot store made by [`snapshot_store`](Self::snapshot_store), is
    /// closed with it; later operations fail with [`JournalError::Storage`].
    pub async fn close(&self) {
        self.pool.close().await;
        self.readers.close().await;
    }

    /// The journal's writer pool, for other stores in the same database (a projection's
    /// offset store and read model).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Connections checked out of the reader and the writer pools right now.
    pub fn connections_in_use(&self) -> ConnectionsInUse {
        ConnectionsInUse {
            reads: in_use(&self.readers),
            writes: in_use(&self.pool),
        }
    }

    /// Counters of the writes so far (shared by every clone): how many transactions committed
    /// and how many atomic writes they stored, which shows how well group commit batches.
    pub fn stats(&self) -> WriteStats {
        self.writer.stats()
    }

    /// A snapshot store in the same database, sharing this journal's reader pool (snapshots
    /// are read while recovering; they never take a connection of the writes' budget).
    pub fn snapshot_store(&self) -> PostgresSnapshotStore {
        PostgresSnapshotStore::from_pool(self.readers.clone(), self.home.clone())
    }

    /// The runtime this journal runs its database work on ([`HomeRuntime`]): the one
    /// [`connect`](Self::connect) ran on.
    pub fn home_runtime(&self) -> &HomeRuntime {
        &self.home
    }

    /// Runs `work` over a clone of this journal on its [`HomeRuntime`].
    async fn at_home<T, W>(
        &self,
        operation: &'static str,
        work: impl FnOnce(PostgresJournal) -> W,
    ) -> Result<T, JournalError>
    where
        W: Future<Output = Result<T, JournalError>> + Send + 'static,
        T: Send + 'static,
    {
        self.home
            .try_run(work(self.clone()), |gone| {
                JournalError::storage(operation, gone)
            })
            .await
    }

    /// Starts `ANALYZE` of the query tables whose planner statistics are stale (the table grew
    /// by [`STALE_STATISTICS_PAGES`] and a tenth since they were taken), at most once per
    /// [`QUERY_STATISTICS_INTERVAL`] for all clones of this journal, in a task of its own: the
    /// query round that starts it goes on at once (an inline `ANALYZE` of a journal of a
    /// million events held a live query's round up for ~250 ms, and its deliveries with it).
    /// Outside a Tokio runtime nothing is started.
    ///
    /// Why: without statistics (a table filled a moment ago, before autovacuum analyzes it)
    /// the planner misjudges how many rows a page query's range holds and bitmap-scans and
    /// sorts every one of them instead of reading `journal_by_entity_type` in order up to the
    /// page's `LIMIT`: 200-300 ms instead of 0.3-0.5 ms per page of 1,000 events in 1,000,000
    /// (measured with `EXPLAIN ANALYZE`, docs/benchmarks.md, issue 8). Failures (no privilege
    /// to analyze, statistics views hidden) are logged and ignored: the queries stay correct,
    /// only slower. The task runs on the journal's [`HomeRuntime`].
    fn refresh_query_statistics(&self) {
        let now = wall_clock_micros();
        let last = self.statistics_checked.load(AtomicOrdering::Relaxed);
        if now.saturating_sub(last) < QUERY_STATISTICS_INTERVAL
            || self
                .statistics_checked
                .compare_exchange(last, now, AtomicOrdering::Relaxed, AtomicOrdering::Relaxed)
                .is_err()
        {
            return;
        }
        let (readers, pool) = (self.readers.clone(), self.pool.clone());
        // Outside any runtime (the home's is always one) nothing is started.
        let _started = self.home.spawn(Box::pin(async move {
            for table in QUERY_TABLES {
                if let Err(error) = analyze_if_stale(&readers, &pool, table).await {
                    tracing::warn!(table, %error, "could not refresh the planner statistics");
                }
            }
        }));
    }

    /// The journal tables, read through the reader pool and deleted from through the writer.
    fn tables(&self) -> JournalTables<'_, PostgresDialect> {
        JournalTables {
            readers: &self.readers,
            page_readers: &(),
            writer: &self.pool,
            page_size: self.replay_batch_size,
            home: &self.home,
        }
    }
}

/// `PostgresJournal::refresh_query_statistics` of one table: compares the table's size in
/// pages now (`pg_relation_size`, exact at once) with the size the planner's statistics were
/// taken at (`pg_class.relpages`), so that a table filled a moment ago is analyzed at its
/// first query rather than when autovacuum comes by (`pg_stat_user_tables` counts lag
/// behind the writes by up to seconds). `ANALYZE` runs on the writer pool.
async fn analyze_if_stale(
    readers: &PgPool,
    pool: &PgPool,
    table: &'static str,
) -> Result<(), sqlx::Error> {
    let pages: Option<(i64, i64)> = sqlx::query_as(
        "SELECT c.relpages::BIGINT, \
                pg_relation_size(c.oid) / current_setting('block_size')::BIGINT \
         FROM pg_class c WHERE c.oid = to_regclass($1)",
    )
    .bind(table)
    .fetch_optional(readers)
    .await?;
    let Some((analyzed, now)) = pages else {
        return Ok(());
    };
    let grown = now.saturating_sub(analyzed);
    if grown >= STALE_STATISTICS_PAGES && grown.saturating_mul(STALE_STATISTICS_DIVISOR) >= analyzed
    {
        tracing::debug!(table, analyzed, now, "analyzing a query table");
        // `table` is one of QUERY_TABLES, never user input.
        sqlx::query(&format!("ANALYZE {table}"))
            .execute(pool)
            .await?;
    }
    Ok(())
}

/// What is particular to PostgreSQL: `BIGINT` sequence numbers, serializer ids as the
/// `INTEGER` with the same bits, tags as `TEXT[]`, text that cannot hold NUL, and multi-row
/// inserts.
#[derive(Debug)]
pub(crate) struct PostgresDialect;

/// An atomic write that passed every check before storage: what is left can only fail in the
/// database.
pub(crate) struct PreparedWrite {
    write: AtomicWrite,
    highest_seq_nr: i64,
}

/// Group-commit transactions in flight at once: while one commits (waits for its flush), the
/// next batch is already being written. The writes' budget (half the connections), 1 to 4.
fn concurrent_transactions(max_connections: u32) -> usize {
    usize::try_from(max_connections / 2)
        .unwrap_or(1)
        .clamp(1, 4)
}

impl Dialect for PostgresDialect {
    const METRICS_LABEL: &'static str = "postgres";
    const REPLAY_WITHOUT_TAGS_SQL: &'static str =
        "SELECT seq_nr, writer_uuid, write_timestamp, serializer_id, manifest, payload, \
                '{}'::text[] AS tags \
         FROM journal \
         WHERE persistence_id = $1 AND seq_nr >= $2 AND seq_nr <= $3 \
         ORDER BY seq_nr \
         LIMIT $4";
    type Db = Postgres;
    type SerializerId = i32;
    type Write = PreparedWrite;
    type PageReaders = ();

    const HIGHEST_SEQ_NR: &'static str = "the highest PostgreSQL BIGINT";

    /// Converts the write: nothing is left to reject. NUL characters, which PostgreSQL text
    /// cannot store, were refused by [`AtomicWrite::check`] (the limits) just before, in
    /// every text field of every event.
    fn prepare(write: AtomicWrite, highest_seq_nr: i64) -> Result<PreparedWrite, WriteRejection> {
        Ok(PreparedWrite {
            write,
            highest_seq_nr,
        })
    }

    fn atomic_write(write: &PreparedWrite) -> &AtomicWrite {
        &write.write
    }

    fn begin(
        conn: &mut PgConnection,
    ) -> BoxFuture<'_, Result<Transaction<'_, Postgres>, sqlx::Error>> {
        conn.begin()
    }

    fn insert_atomic_write<'c>(
        conn: &'c mut PgConnection,
        write: &'c PreparedWrite,
    ) -> impl Future<Output = Result<(), JournalError>> + Send + 'c {
        insert_atomic_write(conn, write)
    }

    fn take_ownerships<'c>(
        conn: &'c mut PgConnection,
        persistence_ids: &'c [String],
    ) -> impl Future<Output = Result<Vec<Ownership>, JournalError>> + Send + 'c {
        take_ownerships(conn, persistence_ids)
    }

    fn insert_batch<'c>(
        conn: &'c mut PgConnection,
        writes: &'c [PreparedWrite],
    ) -> impl Future<Output = Option<Result<bool, JournalError>>> + Send + 'c {
        futures::FutureExt::map(insert_batch(conn, writes), Some)
    }

    fn serializer_id_to_sql(id: u32) -> i32 {
        serializer_id_to_sql(id)
    }

    fn serializer_id_from_sql(id: i32) -> Option<u32> {
        Some(serializer_id_from_sql(id))
    }

    fn tags_from_stored(stored: &[u8]) -> Result<Tags, String> {
        postgres_tags::from_binary(stored)
            .map(Tags::from)
            .map_err(|e| e.to_string())
    }

    fn stores_text(text: &str) -> bool {
        !actix_persistence_core::limits::holds_nul(text)
    }

    const BYTE_ORDER: &'static str = " COLLATE \"C\"";

    /// The database's clock (`$1`, the process's clock, is not used but typed).
    const CURRENT_TIMESTAMP: &'static str = concat!(
        "SELECT GREATEST(",
        statement_micros!(),
        " + 0 * $1::bigint, COALESCE((SELECT max(db_timestamp) FROM journal), 0))"
    );
}

/// The statement of [`insert_batch`] (see there).
const BATCH_INSERT: &str = concat!(
    "\
    WITH batch AS (\
        SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::bigint[], \
                             $5::integer[], $6::text[], $7::bytea[], $8::text[], \
                             $9::integer[], $10::text[], $11::bigint[]) \
        AS b(persistence_id, seq_nr, writer_uuid, write_timestamp, serializer_id, manifest, \
             payload, tags, slice, entity_type, fencing_token)\
    ), owned AS (\
        INSERT INTO journal_highest (persistence_id, highest_seq_nr, owner_epoch) \
        SELECT persistence_id, max(seq_nr), max(fencing_token) FROM batch \
        GROUP BY persistence_id ORDER BY persistence_id \
        ON CONFLICT (persistence_id) DO UPDATE SET highest_seq_nr = \
            GREATEST(journal_highest.highest_seq_nr, EXCLUDED.highest_seq_nr) \
        WHERE journal_highest.owner_epoch <= EXCLUDED.owner_epoch \
        RETURNING persistence_id, deleted_to\
    ), inserted AS (\
        INSERT INTO journal (persistence_id, seq_nr, writer_uuid, write_timestamp, \
                             serializer_id, manifest, payload, tags, slice, entity_type, \
                             db_timestamp) \
        SELECT persistence_id, seq_nr, writer_uuid, write_timestamp, serializer_id, manifest, \
               payload, ARRAY(SELECT json_array_elements_text(tags::json)), slice, \
               entity_type, GREATEST(",
    micros_after_owned!(),
    ", COALESCE((\
                   SELECT p.db_timestamp FROM journal p \
                   WHERE p.persistence_id = batch.persistence_id \
                     AND p.seq_nr < batch.seq_nr \
                   ORDER BY p.seq_nr DESC LIMIT 1), 0)) \
        FROM batch JOIN owned USING (persistence_id) WHERE batch.seq_nr > owned.deleted_to \
        ORDER BY persistence_id, seq_nr \
        ON CONFLICT (persistence_id, seq_nr) DO NOTHING RETURNING 1\
    ) \
    SELECT count(*) FROM inserted"
);

/// Inserts every event of `writes` and raises each persistence id's highest sequence number in
/// one statement (its column values bound as arrays, whatever the number of events; one
/// statement per [`STATEMENT_BYTES`] of events when they add up to more), for
/// the ids whose owner epoch is not above their writes' fencing token (the rows of
/// `journal_highest` are locked first). Events of fenced ids, and events whose sequence number
/// is already stored or deleted (J29), are skipped: `Ok(false)` then tells the caller to roll back and find out
/// which write failed, one savepoint each. So does a batch holding writes of one id with
/// different tokens (a stale incarnation's next to its successor's), before any statement.
async fn insert_batch(
    conn: &mut PgConnection,
    writes: &[PreparedWrite],
) -> Result<bool, JournalError> {
    if mixes_tokens(writes) {
        return Ok(false);
    }
    let count = writes.iter().map(|w| w.write.events.len()).sum::<usize>();
    // One statement, unless the events add up to more than `STATEMENT_BYTES`: then one per
    // run of that size, in the same transaction (each raises the highest sequence numbers of
    // its own events' ids; a later run of an id raises it further).
    let mut inserted = 0;
    let mut columns = BatchColumns::with_capacity(count);
    let mut bytes = StatementBytes::default();
    let mut left = count;
    for write in writes {
        for event in &write.write.events {
            if !bytes.fits(event) {
                let full = std::mem::replace(&mut columns, BatchColumns::with_capacity(left));
                inserted += run_batch_insert(conn, full).await?;
            }
            columns.push(event, write.write.fencing_token);
            left -= 1;
        }
    }
    if !columns.is_empty() {
        inserted += run_batch_insert(conn, columns).await?;
    }
    Ok(usize::try_from(inserted).is_ok_and(|n| n == count))
}

/// Runs [`insert_batch`]'s statement over `columns`; returns how many events it inserted.
async fn run_batch_insert(
    conn: &mut PgConnection,
    columns: BatchColumns<'_>,
) -> Result<i64, JournalError> {
    sqlx::query_scalar(BATCH_INSERT)
        .bind(columns.persistence_ids)
        .bind(columns.seq_nrs)
        .bind(columns.writer_uuids)
        .bind(columns.timestamps)
        .bind(columns.serializer_ids)
        .bind(columns.manifests)
        .bind(columns.payloads)
        .bind(columns.tags)
        .bind(columns.slices)
        .bind(columns.entity_types)
        .bind(columns.fencing_tokens)
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| JournalError::storage("write", e))
}

/// [`Dialect::take_ownerships`] for PostgreSQL: distinct ids in one statement (the ids bound
/// as one array, their rows locked in id order, as the batch insert locks them), which returns
/// each id's row; otherwise [`take_ownership`] per id.
async fn take_ownerships(
    conn: &mut PgConnection,
    persistence_ids: &[String],
) -> Result<Vec<Ownership>, JournalError> {
    const TAKE_OWNERSHIPS: &str = "\
        INSERT INTO journal_highest (persistence_id, highest_seq_nr, owner_epoch) \
        SELECT id, 0, 1 FROM UNNEST($1::text[]) AS t(id) ORDER BY id \
        ON CONFLICT (persistence_id) \
        DO UPDATE SET owner_epoch = journal_highest.owner_epoch + 1 \
        RETURNING persistence_id, highest_seq_nr, owner_epoch";
    if persistence_ids.len() == 1 || !all_distinct(persistence_ids) {
        let mut owned = Vec::with_capacity(persistence_ids.len());
        for persistence_id in persistence_ids {
            owned.push(take_ownership(conn, persistence_id).await?);
        }
        return Ok(owned);
    }
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(TAKE_OWNERSHIPS)
        .bind(persistence_ids)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| JournalError::storage("take ownership", e))?;
    ownerships_in_order(persistence_ids, rows)
}

/// One id's ownership take for PostgreSQL: [`TAKE_OWNERSHIP`], which locks the id's row.
async fn take_ownership(
    conn: &mut PgConnection,
    persistence_id: &str,
) -> Result<Ownership, JournalError> {
    let row: (i64, i64) = sqlx::query_as(TAKE_OWNERSHIP)
        .bind(persistence_id)
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| JournalError::storage("take ownership", e))?;
    ownership_from_row(persistence_id, row)
}

/// Whether two writes of one persistence id in `writes` carry different fencing tokens.
fn mixes_tokens(writes: &[PreparedWrite]) -> bool {
    let mut tokens = std::collections::HashMap::with_capacity(writes.len());
    writes.iter().any(|w| {
        let token = w.write.fencing_token;
        *tokens.entry(w.write.persistence_id()).or_insert(token) != token
    })
}

/// The events of a batch, column by column, for [`insert_batch`].
struct BatchColumns<'a> {
    persistence_ids: Vec<&'a str>,
    seq_nrs: Vec<i64>,
    writer_uuids: Vec<&'a str>,
    timestamps: Vec<i64>,
    serializer_ids: Vec<i32>,
    manifests: Vec<&'a str>,
    payloads: Vec<&'a [u8]>,
    tags: Vec<String>,
    slices: Vec<i32>,
    entity_types: Vec<&'a str>,
    fencing_tokens: Vec<i64>,
}

impl<'a> BatchColumns<'a> {
    fn is_empty(&self) -> bool {
        self.seq_nrs.is_empty()
    }

    fn with_capacity(n: usize) -> Self {
        BatchColumns {
            persistence_ids: Vec::with_capacity(n),
            seq_nrs: Vec::with_capacity(n),
            writer_uuids: Vec::with_capacity(n),
            timestamps: Vec::with_capacity(n),
            serializer_ids: Vec::with_capacity(n),
            manifests: Vec::with_capacity(n),
            payloads: Vec::with_capacity(n),
            tags: Vec::with_capacity(n),
            slices: Vec::with_capacity(n),
            entity_types: Vec::with_capacity(n),
            fencing_tokens: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, event: &'a PersistentRepr, fencing_token: FencingToken) {
        self.fencing_tokens.push(token_to_sql(fencing_token));
        self.persistence_ids.push(&event.persistence_id);
        // Checked to fit when the write was prepared.
        self.seq_nrs.push(clamp_seq_nr(event.seq_nr));
        self.writer_uuids.push(&event.writer_uuid);
        self.timestamps.push(event.timestamp);
        self.serializer_ids
            .push(serializer_id_to_sql(event.serializer_id));
        self.manifests.push(&event.manifest);
        self.payloads.push(&event.payload);
        // A JSON array of strings cannot fail to serialize.
        self.tags
            .push(serde_json::to_string(&event.tags).unwrap_or_else(|_| "[]".to_owned()));
        self.slices
            .push(i32::from(slice_for_persistence_id(&event.persistence_id)));
        self.entity_types
            .push(entity_type_of(&event.persistence_id));
    }
}

/// The statement inserting `rows` events of one persistence id (`$1`) whose write carries the
/// fencing token `$3`: it first raises the id's highest sequence number to `$2` if the id's
/// owner epoch is not above the token (locking its `journal_highest` row), and inserts the
/// events only then. Returns the sequence numbers it inserted, or a single 0 when the write
/// was fenced. Events whose sequence number is already stored (`DO NOTHING`) or deleted (up to
/// the id's `deleted_to`, conformance J29) are skipped, which the caller detects.
fn insert_statement(rows: usize) -> String {
    // After the rows' parameters: the slice and the entity type of `$1`.
    let slice = 4 + rows * 7;
    let entity_type = slice + 1;
    let mut sql = format!(
        "WITH owned AS (\
             INSERT INTO journal_highest (persistence_id, highest_seq_nr, owner_epoch) \
             VALUES ($1, $2, $3) \
             ON CONFLICT (persistence_id) DO UPDATE SET highest_seq_nr = \
                 GREATEST(journal_highest.highest_seq_nr, EXCLUDED.highest_seq_nr) \
             WHERE journal_highest.owner_epoch <= EXCLUDED.owner_epoch \
             RETURNING deleted_to\
         ), query_timestamp AS (\
             SELECT GREATEST({}, COALESCE((\
                 SELECT p.db_timestamp FROM journal p \
                 WHERE p.persistence_id = $1 AND p.seq_nr < $4 \
                 ORDER BY p.seq_nr DESC LIMIT 1), 0)) AS db_timestamp\
         ), inserted AS (\
             INSERT INTO journal (persistence_id, seq_nr, writer_uuid, write_timestamp, \
                                  serializer_id, manifest, payload, tags, db_timestamp, slice, \
                                  entity_type) \
             SELECT $1, v.seq_nr, v.writer_uuid, v.write_timestamp, v.serializer_id, \
                    v.manifest, v.payload, v.tags, \
                    (SELECT db_timestamp FROM query_timestamp), ${slice}, ${entity_type} \
             FROM (VALUES ",
        micros_after_owned!()
    );
    for row in 0..rows {
        let p = 4 + row * 7;
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!(
            "(${}, ${}, ${}, ${}, ${}, ${}, ${})",
            p,
            p + 1,
            p + 2,
            p + 3,
            p + 4,
            p + 5,
            p + 6
        ));
    }
    sql.push_str(
        ") AS v(seq_nr, writer_uuid, write_timestamp, serializer_id, manifest, payload, tags) \
             WHERE v.seq_nr > (SELECT deleted_to FROM owned) \
             ON CONFLICT (persistence_id, seq_nr) DO NOTHING RETURNING seq_nr\
         ) \
         SELECT seq_nr FROM inserted \
         UNION ALL SELECT 0::bigint WHERE NOT EXISTS (SELECT 1 FROM owned)",
    );
    sql
}

/// A serializer id (u32) as the PostgreSQL `INTEGER` with the same bits.
fn serializer_id_to_sql(id: u32) -> i32 {
    i32::from_ne_bytes(id.to_ne_bytes())
}

/// The serializer id stored by [`serializer_id_to_sql`].
fn serializer_id_from_sql(id: i32) -> u32 {
    u32::from_ne_bytes(id.to_ne_bytes())
}

/// [`Dialect::insert_atomic_write`] for PostgreSQL: up to [`ROWS_PER_STATEMENT`] events and
/// [`STATEMENT_BYTES`] per statement, each statement also checking the fencing token and raising the highest sequence
/// number. A fenced write is reported as [`JournalError::Fenced`]; an event whose sequence
/// number is taken is skipped (`DO NOTHING`) and reported as [`JournalError::ConcurrentWrite`].
async fn insert_atomic_write(
    conn: &mut PgConnection,
    write: &PreparedWrite,
) -> Result<(), JournalError> {
    let persistence_id = write.write.persistence_id();
    for chunk in statement_chunks(&write.write.events) {
        let sql = insert_statement(chunk.len());
        let mut query = sqlx::query_scalar::<_, i64>(&sql)
            .bind(persistence_id)
            .bind(write.highest_seq_nr)
            .bind(token_to_sql(write.write.fencing_token));
        for event in chunk {
            query = query
                // Consecutive and at most `highest_seq_nr`, which fits.
                .bind(clamp_seq_nr(event.seq_nr))
                .bind(&*event.writer_uuid)
                .bind(event.timestamp)
                .bind(serializer_id_to_sql(event.serializer_id))
                .bind(&event.manifest)
                .bind(&event.payload)
                .bind(event.tags.as_slice());
        }
        let query = query
            .bind(i32::from(slice_for_persistence_id(persistence_id)))
            .bind(entity_type_of(persistence_id));
        let concurrent_write = |seq_nr| JournalError::ConcurrentWrite {
            persistence_id: persistence_id.to_owned(),
            seq_nr,
        };
        let inserted = match query.fetch_all(&mut *conn).await {
            Ok(inserted) => inserted,
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                return Err(concurrent_write(chunk[0].seq_nr))
            }
            Err(e) => return Err(JournalError::storage("write", e)),
        };
        if inserted.first() == Some(&0) {
            return Err(JournalError::Fenced {
                persistence_id: persistence_id.to_owned(),
                fencing_token: write.write.fencing_token.get(),
            });
        }
        if inserted.len() < chunk.len() {
            let taken = chunk
                .iter()
                .map(|event| event.seq_nr)
                .find(|seq_nr| !inserted.contains(&clamp_seq_nr(*seq_nr)))
                .unwrap_or(chunk[0].seq_nr);
            return Err(concurrent_write(taken));
        }
    }
    Ok(())
}

#[async_trait]
impl JournalStore for PostgresJournal {
    /// Stores the atomic writes, in order, through group commit (see [`PostgresJournal`]):
    /// they share transactions with the writes of other concurrent calls. A write is durable
    /// once this returns `Ok(())` for it; no result comes before its transaction has ended.
    ///
    /// Per atomic write: a bad shape, a sequence number above `i64::MAX` or a NUL character in
    /// a text field is rejected (not stored, nothing attempted); a sequence number already
    /// stored fails it with [`JournalError::ConcurrentWrite`] (the first such one); another
    /// database error on one of its rows fails it with [`JournalError::Storage`]. The later
    /// writes of the same writer (id, fencing token, writer id) in the batch are then not
    /// attempted ([`JournalError::EarlierWriteFailed`]: stored, they would follow a hole); the
    /// other writes of the batch are unaffected. When the transaction cannot begin or
    /// commit (or no connection can be had within `acquire_timeout`), every write of that
    /// transaction fails with [`JournalError::Storage`] and none of them is stored.
    ///
    /// Always returns `Ok`, with one result per atomic write.
    ///
    /// Cancel safety: the writes are queued when the future is first polled. Dropping it
    /// before the writer task took them stores none of them; afterwards they may still be
    /// stored. Without group commit (`max_batch_size` 1), called on the journal's
    /// [`HomeRuntime`] (where the journal actor normally runs), dropping it rolls back the
    /// atomic write in progress, and the writes after it are not attempted; called from another
    /// runtime, the call's transactions run as a task on the home runtime once the call's turn
    /// came, which dropping the future does not stop: every write of the call may be stored.
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        let results = self.writer.write(writes).await;
        if results.iter().any(Result::is_ok) {
            // Concurrent transactions can commit out of timestamp order: live queries look
            // back by the longest one's duration.
            self.notifier
                .notify_committed(self.writer.take_longest_commit());
        }
        Ok(results)
    }

    /// Streams the events page by page ([`PostgresJournalOptions::replay_batch_size`] per
    /// query, on the pool), so memory stays bounded however long the replay: when a page is
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

    /// Reads the highest sequence number from `journal_highest` (0 for an id that never
    /// wrote); `from` is not needed.
    async fn read_highest_sequence_nr(&self, pid: &str, _from: u64) -> Result<u64, JournalError> {
        let pid = pid.to_owned();
        self.at_home("read highest sequence number", |journal| async move {
            journal.tables().read_highest(&pid).await
        })
        .await
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
        let pid = pid.to_owned();
        self.at_home("delete", |journal| async move {
            journal.tables().delete_to(&pid, to, fencing_token).await
        })
        .await
    }

    /// Raises the id's owner epoch in `journal_highest` and reads its highest sequence number
    /// in one statement (locking the row), in a transaction shared with the writes and
    /// ownership takes queued with it (group commit; the writes first). Durable when it
    /// returns.
    async fn take_ownership(&self, pid: &str) -> Result<Ownership, JournalError> {
        self.writer.take_ownership(pid).await
    }

    /// Reads how far the events were deleted from `journal_highest` (0 when never).
    async fn read_deleted_to(&self, pid: &str) -> Result<Option<u64>, JournalError> {
        let pid = pid.to_owned();
        self.at_home("read deleted to", |journal| async move {
            journal.tables().read_deleted_to(&pid).await.map(Some)
        })
        .await
    }

    /// Both in one statement on the reader pool: one round trip for what a replay reads first.
    async fn read_replay_bounds(
        &self,
        pid: &str,
        _from: u64,
    ) -> Result<ReplayBounds, JournalError> {
        let pid = pid.to_owned();
        self.at_home("read the replay's bounds", |journal| async move {
            journal.tables().read_replay_bounds(&pid).await
        })
        .await
    }
}

/// Queries by slice read the journal table in (database timestamp, persistence id, sequence
/// number) order through the index `journal_by_entity_type` (entity type first, so a query
/// never walks other entity types' events; migration 0009), queries by tag the tag index
/// `event_tag_by_tag` joined to the journal; see
/// [`ReadJournal`](actix_persistence_core::query::ReadJournal).
#[async_trait]
impl QueryStore for PostgresJournal {
    /// Also starts refreshing stale planner statistics of the query tables in the
    /// background (at most every 10 s; see `refresh_query_statistics`): every query round
    /// starts here.
    async fn current_timestamp(&self) -> Result<i64, JournalError> {
        self.refresh_query_statistics();
        self.at_home("read current timestamp", |journal| async move {
            journal.tables().current_timestamp().await
        })
        .await
    }

    async fn read_events(
        &self,
        request: EventsRequest<'_>,
    ) -> Result<Vec<StoredEvent>, JournalError> {
        let (filter, after) = (request.filter.clone(), request.after.clone());
        let (before_timestamp, limit, with_previous_timestamp) = (
            request.before_timestamp,
            request.limit,
            request.with_previous_timestamp,
        );
        self.at_home("query", |journal| async move {
            let request = EventsRequest {
                filter: &filter,
                after: &after,
                before_timestamp,
                limit,
                with_previous_timestamp,
            };
            journal.tables().read_events(request).await
        })
        .await
    }

    async fn read_persistence_ids(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>, JournalError> {
        let after = after.map(str::to_owned);
        self.at_home("query persistence ids", |journal| async move {
            journal
                .tables()
                .read_persistence_ids(after.as_deref(), limit)
                .await
        })
        .await
    }

    /// Commits of this journal (and its clones) in this process wake live queries at once.
    fn write_notifications(&self) -> Option<WriteNotifications> {
        Some(self.notifier.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_from_urls() {
        assert_eq!(
            redact_password("postgres://app:s3cr:et@db:5432/events?sslmode=require"),
            "postgres://app:***@db:5432/events?sslmode=require"
        );
        assert_eq!(
            redact_password("postgres:///events?host=/run/pg&user=app&password=hunter2"),
            "postgres:///events?host=/run/pg&user=app&password=***"
        );
        assert_eq!(
            redact_password("postgres://app@db/events"),
            "postgres://app@db/events"
        );
        assert_eq!(redact_password("not a url"), "not a url");
    }

    #[test]
    fn serializer_ids_round_trip_through_integer() {
        for id in [0, 1, 7, i32::MAX as u32, i32::MAX as u32 + 1, u32::MAX] {
            assert_eq!(serializer_id_from_sql(serializer_id_to_sql(id)), id);
        }
        assert_eq!(serializer_id_to_sql(u32::MAX), -1);
    }

    /// The reader pool plans each prepared statement once (`Plans::Generic`): after a replay
    /// of many pages and a query by slices of many pages on its one connection, PostgreSQL
    /// made no custom plan of them; the writer pool keeps PostgreSQL's choice.
    #[cfg(feature = "test-util")]
    #[tokio::test]
    async fn the_readers_plan_their_statements_once() {
        use actix_persistence_core::query::{Offset, QuerySettings, ReadJournal};
        use actix_persistence_core::{AtomicWrite, JournalStore};
        use futures::TryStreamExt;

        let Some(db) = crate::test_util::TestDatabase::create().await else {
            return;
        };
        let mut options = PostgresJournalOptions::new(db.url());
        options.max_connections = 2;
        options.replay_batch_size = 2;
        let journal = PostgresJournal::connect(&options).await.expect("connect");
        let events = (1..=20)
            .map(|seq_nr| crate::test_events::event("Plan|1", seq_nr, &["t"]))
            .collect();
        let write = AtomicWrite::new(events).expect("consecutive");
        let results = journal.write_messages(vec![write]).await.expect("write");
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        let replayed: Vec<_> = journal
            .replay_messages("Plan|1", 1, u64::MAX, u64::MAX)
            .try_collect()
            .await
            .expect("replay");
        assert_eq!(replayed.len(), 20);
        let settings = QuerySettings {
            page_size: 2,
            ..QuerySettings::default()
        };
        let queried: Vec<_> = ReadJournal::new(journal.clone(), settings)
            .current_events_by_slices("Plan", 0, 1023, Offset::NoOffset)
            .try_collect()
            .await
            .expect("query by slices");
        assert_eq!(queried.len(), 20);

        let plans = |pool: PgPool| async move {
            let mut conn = pool.acquire().await.expect("a connection");
            let mode: String = sqlx::query_scalar("SHOW plan_cache_mode")
                .fetch_one(&mut *conn)
                .await
                .expect("plan_cache_mode");
            let counts: Vec<(i64, i64)> = sqlx::query_as(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements \
                 WHERE statement LIKE '%FROM journal%'",
            )
            .fetch_all(&mut *conn)
            .await
            .expect("pg_prepared_statements");
            (mode, counts)
        };
        let (mode, counts) = plans(journal.readers.clone()).await;
        assert_eq!(mode, "force_generic_plan");
        assert!(
            counts.len() >= 2,
            "the replay's and the query's: {counts:?}"
        );
        assert!(counts.iter().all(|&(_, custom)| custom == 0), "{counts:?}");
        assert!(
            counts.iter().any(|&(generic, _)| generic >= 10),
            "{counts:?}"
        );
        let (mode, _) = plans(journal.pool.clone()).await;
        assert_eq!(mode, "auto");
    }

    #[test]
    fn statements_are_cut_by_rows_and_by_bytes() {
        let event = |bytes: usize| PersistentRepr {
            payload: vec![0; bytes],
            ..crate::test_events::event("p", 1, &[])
        };
        let runs = |events: &[PersistentRepr]| -> Vec<usize> {
            statement_chunks(events).map(<[_]>::len).collect()
        };
        let small: Vec<_> = (0..2500).map(|_| event(10)).collect();
        assert_eq!(runs(&small), [1000, 1000, 500]);
        // 30 MiB each: two fit under STATEMENT_BYTES (64 MiB), a third does not.
        let big: Vec<_> = (0..3).map(|_| event(30 << 20)).collect();
        assert_eq!(runs(&big), [2, 1]);
        // One event above the budget still makes a statement of its own.
        assert_eq!(runs(&[event(STATEMENT_BYTES + 1)]), [1]);
        assert!(runs(&[]).is_empty());
    }

    #[test]
    fn insert_statement_numbers_parameters_per_row() {
        let sql = insert_statement(2);
        assert!(sql.contains("($4, $5, $6, $7, $8, $9, $10), ($11, $12"));
        assert!(sql.contains("VALUES ($1, $2, $3)"));
        assert!(sql.contains("$18, $19 "));
    }
}
