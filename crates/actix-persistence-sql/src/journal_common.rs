//! What the two SQL journals share: the [`Dialect`] trait naming what differs between the
//! databases, the checks of the options both journals have, the group-commit backend built on a
//! dialect ([`SqlBackend`]: one transaction per batch, a savepoint per atomic write) and the
//! reading side ([`JournalTables`]: paged replay, highest sequence number, delete).
//!
//! The statements of the reading side are the same for both databases: they use `$n`
//! placeholders, which SQLite reads as PostgreSQL does.

use std::borrow::Cow;
use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;

use actix_persistence_core::query::{
    entity_type_of, slice_for_persistence_id, wall_clock_micros, EventFilter, EventKey,
    EventsRequest, StoredEvent, NUMBER_OF_SLICES,
};
use actix_persistence_core::{
    AtomicWrite, FailedIds, FencingToken, JournalError, Ownership, PersistentRepr, ReplayBounds,
    ReplayStream, RunInterner, Tags, TagsInterner, WriteRejection,
};
use futures::future::BoxFuture;
use futures::stream;
use futures::TryStreamExt;
use sqlx::{
    Arguments, ColumnIndex, Connection, Database, Decode, Encode, Executor, FromRow, IntoArguments,
    Pool, Row, Transaction, Type,
};

/// How many connections of a journal's pools are checked out right now (not idle): a snapshot
/// for monitoring, and for checking that replays give their connections back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnectionsInUse {
    /// Connections of the reading side (replays, highest sequence numbers, snapshots on
    /// PostgreSQL) in use.
    pub reads: u32,
    /// Connections of the writing side (transactions of writes, deletes) in use.
    pub writes: u32,
}

/// Connections of `pool` checked out right now.
pub(crate) fn in_use<DB: Database>(pool: &Pool<DB>) -> u32 {
    let idle = u32::try_from(pool.num_idle()).unwrap_or(u32::MAX);
    pool.size().saturating_sub(idle)
}

use crate::error::SqlStoreError;
use crate::group_commit::{fail_all, settle, Backend, BatchOutcome, InsertTurn, WriteCounters};
use crate::home_runtime::HomeRuntime;
use crate::page_row::{self, PageArg, PageRow, RawPage};

/// What differs between the SQL databases, for the code both journals (and both snapshot
/// stores) share: how values are stored, how a batch's transaction begins, and how the events
/// of an atomic write are inserted.
pub(crate) trait Dialect: Send + Sync + 'static {
    /// The store's name in metrics (label `store`).
    const METRICS_LABEL: &'static str;
    /// The sqlx database.
    type Db: Database;
    /// The column type of serializer ids.
    type SerializerId: for<'q> Encode<'q, Self::Db>
        + for<'r> Decode<'r, Self::Db>
        + Type<Self::Db>
        + Display
        + Copy
        + Send;
    /// An atomic write that passed every check before storage, converted to the column types:
    /// what is left can only fail in the database.
    type Write: Send + Sync + 'static;
    /// What reads pages beside the pool, if anything ([`Dialect::read_page`]): SQLite's reader
    /// threads (`Option<ReaderThreads>`, [`sqlite_readers`](crate::sqlite_readers)); `()` for
    /// PostgreSQL.
    type PageReaders: Clone + Send + Sync + 'static;

    /// `i64::MAX` as a rejected write names it, e.g. "the highest PostgreSQL BIGINT".
    const HIGHEST_SEQ_NR: &'static str;
    /// Whether a batch of one atomic write also goes through [`insert_batch`](Self::insert_batch)
    /// first (SQLite: its `insert_atomic_write` is the slow path, which looks for taken
    /// sequence numbers before inserting).
    const BATCHES_SINGLE_WRITES: bool = false;
    /// Whether a column may hold a value of a type other than its declared one. SQLite keeps
    /// whatever a column is given (a REAL or TEXT in an INTEGER column, written by hand), and
    /// sqlx's unchecked decoding converts it (6.5 read as 6, `'json'` as 0): a replayed row's
    /// sequence number and serializer id are then checked ([`SqlStoreError::CorruptRow`]).
    /// PostgreSQL's columns hold their declared types only.
    const DYNAMIC_TYPES: bool = false;

    /// Checks what the database cannot store of a well-shaped atomic write whose highest
    /// sequence number (`highest_seq_nr`) fits, and converts it.
    fn prepare(write: AtomicWrite, highest_seq_nr: i64) -> Result<Self::Write, WriteRejection>;

    /// The atomic write `write` was prepared from.
    fn atomic_write(write: &Self::Write) -> &AtomicWrite;

    /// Begins the transaction of a batch on the writer connection.
    fn begin(
        conn: &mut <Self::Db as Database>::Connection,
    ) -> BoxFuture<'_, Result<Transaction<'_, Self::Db>, sqlx::Error>>;

    /// Checks the write's fencing token against its persistence id's owner epoch, then inserts
    /// the events of one atomic write and raises the id's highest sequence number, inside a
    /// transaction the caller opened and will commit or roll back.
    ///
    /// On error some of the events may already be inserted: the caller must roll back (the
    /// whole transaction, or the savepoint around this call when several atomic writes share
    /// one).
    ///
    /// # Errors
    /// [`JournalError::Fenced`] when the id's owner epoch is above the write's token;
    /// [`JournalError::ConcurrentWrite`] with the first sequence number that is already stored;
    /// [`JournalError::Storage`] for any other database error.
    fn insert_atomic_write<'c>(
        conn: &'c mut <Self::Db as Database>::Connection,
        write: &'c Self::Write,
    ) -> impl Future<Output = Result<(), JournalError>> + Send + 'c;

    /// Raises the owner epoch of each of `persistence_ids` by one (creating its row with epoch
    /// 1 when it has none) and returns the new epochs with the highest sequence numbers, in
    /// the order of `persistence_ids`, inside a transaction the caller opened and will commit.
    /// Distinct ids take one multi-row statement (a thousand recoveries at once cost one
    /// statement, not a thousand); an id asked for twice is raised twice, one statement each.
    ///
    /// # Errors
    /// [`JournalError::Storage`] for a database error.
    fn take_ownerships<'c>(
        conn: &'c mut <Self::Db as Database>::Connection,
        persistence_ids: &'c [String],
    ) -> impl Future<Output = Result<Vec<Ownership>, JournalError>> + Send + 'c;

    /// Inserts every event of a whole batch in one statement, when the dialect can. `None`
    /// when it cannot (then each atomic write goes in a savepoint of its own);
    /// `Some(Ok(true))` when every event was inserted (and highest sequence numbers raised);
    /// `Some(Ok(false))` when some event's sequence number was already stored: the caller must
    /// roll the transaction back and store the writes one savepoint at a time, so that only the
    /// conflicting writes fail.
    ///
    /// # Errors
    /// [`JournalError::Storage`] for a database error: the caller rolls back and stores the
    /// writes one savepoint at a time, so that only a write that fails on its own fails.
    fn insert_batch<'c>(
        conn: &'c mut <Self::Db as Database>::Connection,
        writes: &'c [Self::Write],
    ) -> impl Future<Output = Option<Result<bool, JournalError>>> + Send + 'c {
        let _ = (conn, writes);
        async { None }
    }

    /// A serializer id as stored.
    fn serializer_id_to_sql(id: u32) -> Self::SerializerId;

    /// A stored serializer id back, or `None` when it is no `u32` (the row was changed outside
    /// the store).
    fn serializer_id_from_sql(id: Self::SerializerId) -> Option<u32>;

    /// An event's tags back from their stored bytes (the `tags` column's value as the
    /// database sends it), or why they are corrupt.
    fn tags_from_stored(stored: &[u8]) -> Result<Tags, String>;

    /// Whether a text column can hold `text`: PostgreSQL text cannot hold NUL, SQLite stores
    /// any text. Nothing is stored under an id it cannot hold, so reads and deletes of such an
    /// id find nothing.
    fn stores_text(text: &str) -> bool;

    /// What follows `persistence_id` in queries by offset so that ids compare byte for byte,
    /// as [`EventKey`] does (PostgreSQL: `COLLATE "C"`).
    const BYTE_ORDER: &'static str = "";

    /// What follows `event_tag p` in the fast pass's look-up of an event's previous tagged
    /// event, to make the database read it through `event_tag_by_event` (persistence id,
    /// sequence number) rather than through the tag's whole range (SQLite picks the primary
    /// key's `tag = ?` and sorts every row of the tag per event otherwise).
    const TAG_BY_EVENT_HINT: &'static str = "";

    /// Whether a page's start is told by its timestamp rather than by one row comparison led by
    /// the filter's index column (see [`page_query_sql`]): a page from the start of a timestamp
    /// then compares no row with its position (only the range on the timestamp, which the
    /// index scan starts at), and a page right after an event seeks to it with
    /// `(db_timestamp, persistence_id, seq_nr) > ($t, $p, $s)`. SQLite evaluates a row
    /// comparison in full on every row the scan reads, so the first form spares the pages of
    /// the settled pass's windows that cost.
    const POSITION_BY_TIMESTAMP_FIRST: bool = false;

    /// What follows `FROM journal` in a page of a query by slices: the index it reads
    /// (SQLite: `INDEXED BY journal_by_entity_type`, which spares the planner weighing the
    /// journal's other indexes each time a page's statement is prepared, a sixth of the
    /// prepare).
    const SLICES_INDEX_HINT: &'static str = "";

    /// Reads a page (a replay's or a query's: `sql` with `args` bound to `$1`, `$2`, ...; see
    /// [`RawPage`]) in one piece, rather than row by row through sqlx (SQLite: a row costs a
    /// thread hand-off and a copy of each value; [`sqlite_page`](crate::sqlite_page)).
    /// `query_columns`: the statement also selects `persistence_id, db_timestamp`, and maybe
    /// `previous_timestamp, previous_seq_nr`. `limit`: the most rows the statement returns
    /// (its `LIMIT`), room for which the page takes at once. `build` turns the page into what
    /// the caller wants (its events) on the thread that read it, so that the caller (the
    /// actor's arbiter in a replay, a projection's handler in a query) gets finished events.
    ///
    /// `None` when the dialect does not (PostgreSQL streams a statement's rows on one
    /// connection already), or could not: the caller reads the page row by row, which reports
    /// what is wrong.
    fn read_page<'a, T: Send + 'static>(
        readers: &'a Pool<Self::Db>,
        page_readers: &'a Self::PageReaders,
        sql: &str,
        args: &[PageArg<&str>],
        query_columns: bool,
        limit: usize,
        build: impl FnOnce(&RawPage) -> T + Send + 'static,
    ) -> BoxFuture<'a, Option<T>> {
        let _ = (
            readers,
            page_readers,
            sql,
            args,
            query_columns,
            limit,
            build,
        );
        Box::pin(async { None })
    }

    /// The replay's page query with an empty list of tags in place of each event's
    /// (`JournalStore::replay_for_recovery`): [`REPLAY_SQL`] with its `tags` column replaced by
    /// the dialect's empty value (a test checks they agree).
    const REPLAY_WITHOUT_TAGS_SQL: &'static str;

    /// The statement reading the database clock now, microseconds since the Unix epoch, never
    /// below a stored database timestamp. It may use `$1`, bound to this process's wall clock.
    const CURRENT_TIMESTAMP: &'static str;
}

/// Checks the batch sizes both journals take: `replay_batch_size` and `max_batch_size` must be
/// at least 1.
pub(crate) fn check_batch_sizes(
    replay_batch_size: u32,
    max_batch_size: u32,
) -> Result<(), SqlStoreError> {
    if replay_batch_size == 0 {
        return Err(SqlStoreError::InvalidOption {
            option: "replay_batch_size",
            value: replay_batch_size.to_string(),
            reason: "a replay must read at least one event per query",
        });
    }
    if max_batch_size == 0 {
        return Err(SqlStoreError::InvalidOption {
            option: "max_batch_size",
            value: max_batch_size.to_string(),
            reason: "a transaction must store at least one atomic write (1 turns group commit off)",
        });
    }
    Ok(())
}

/// Checks `max_connections`, which must be at least 1 (`reason` says what needs a connection)
/// and at most [`crate::MAX_POOL_CONNECTIONS`].
pub(crate) fn check_max_connections(
    max_connections: u32,
    reason: &'static str,
) -> Result<(), SqlStoreError> {
    let reason = match max_connections {
        0 => reason,
        n if n > crate::MAX_POOL_CONNECTIONS => {
            "a pool holds at most MAX_POOL_CONNECTIONS (10000) connections: sqlx takes room \
             for each when it builds the pool"
        }
        _ => return Ok(()),
    };
    Err(SqlStoreError::InvalidOption {
        option: "max_connections",
        value: max_connections.to_string(),
        reason,
    })
}

/// A sequence number bound in the API (u64) as the signed 64-bit column: above `i64::MAX` (no
/// stored sequence number is) it is as good as no bound.
pub(crate) fn clamp_seq_nr(seq_nr: u64) -> i64 {
    i64::try_from(seq_nr).unwrap_or(i64::MAX)
}

/// [`Dialect::take_ownership`] of both databases: one statement, which locks the row.
pub(crate) const TAKE_OWNERSHIP: &str = "\
    INSERT INTO journal_highest (persistence_id, highest_seq_nr, owner_epoch) VALUES ($1, 0, 1) \
    ON CONFLICT (persistence_id) DO UPDATE SET owner_epoch = journal_highest.owner_epoch + 1 \
    RETURNING highest_seq_nr, owner_epoch";

/// Turns the row [`TAKE_OWNERSHIP`] returned into an [`Ownership`].
pub(crate) fn ownership_from_row(
    persistence_id: &str,
    (highest, epoch): (i64, i64),
) -> Result<Ownership, JournalError> {
    let corrupt = |seq_nr, reason: &str| {
        JournalError::storage(
            "take ownership",
            SqlStoreError::CorruptRow {
                persistence_id: persistence_id.to_owned(),
                seq_nr,
                reason: reason.to_owned(),
            },
        )
    };
    Ok(Ownership {
        highest_seq_nr: u64::try_from(highest)
            .map_err(|_| corrupt(highest, "negative highest sequence number"))?,
        fencing_token: FencingToken(
            u64::try_from(epoch).map_err(|_| corrupt(highest, "negative owner epoch"))?,
        ),
    })
}

/// Whether no persistence id appears twice in `ids` (a multi-row ownership take can raise
/// each row only once).
pub(crate) fn all_distinct(ids: &[String]) -> bool {
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    ids.iter().all(|id| seen.insert(id.as_str()))
}

/// The ownerships of `ids`, in their order, from the rows (id, highest sequence number, owner
/// epoch) a multi-row ownership take returned in any order.
///
/// # Errors
/// [`JournalError::Storage`] when an id has no row, or a row is corrupt.
pub(crate) fn ownerships_in_order(
    ids: &[String],
    rows: Vec<(String, i64, i64)>,
) -> Result<Vec<Ownership>, JournalError> {
    let mut by_id: std::collections::HashMap<String, (i64, i64)> = rows
        .into_iter()
        .map(|(id, highest, epoch)| (id, (highest, epoch)))
        .collect();
    ids.iter()
        .map(|id| {
            let row = by_id.remove(id).ok_or_else(|| {
                JournalError::storage(
                    "take ownership",
                    SqlStoreError::CorruptRow {
                        persistence_id: id.clone(),
                        seq_nr: 0,
                        reason: "the ownership take returned no row for the id".to_owned(),
                    },
                )
            })?;
            ownership_from_row(id, row)
        })
        .collect()
}

/// A fencing token as the signed 64-bit column stores it.
pub(crate) fn token_to_sql(token: FencingToken) -> i64 {
    i64::try_from(token.get()).unwrap_or(i64::MAX)
}

/// The rejection of `write` for `reason`.
pub(crate) fn rejection(write: &AtomicWrite, reason: String) -> WriteRejection {
    WriteRejection {
        persistence_id: write.persistence_id().to_owned(),
        seq_nr: write.lowest_seq_nr(),
        reason,
    }
}

/// The SQL side of group commit for a dialect: each batch in one transaction on the writer
/// pool, each atomic write of it in a savepoint of its own.
pub(crate) struct SqlBackend<D: Dialect> {
    writer: Pool<D::Db>,
    /// Checked before each commit: `Err` fails the batch, which is rolled back (a SQLite
    /// journal's file deleted while open, [`DatabaseFile`](crate::sqlite_file)).
    before_commit: Option<BeforeCommit>,
}

/// A check a batch must pass before its commit.
pub(crate) type BeforeCommit = Box<dyn Fn() -> Result<(), JournalError> + Send + Sync>;

impl<D: Dialect> SqlBackend<D> {
    /// The backend writing through `writer` (a single connection on SQLite).
    pub(crate) fn new(writer: Pool<D::Db>) -> Self {
        SqlBackend {
            writer,
            before_commit: None,
        }
    }

    /// The same, running `check` before each commit.
    pub(crate) fn checking_before_commit(mut self, check: BeforeCommit) -> Self {
        self.before_commit = Some(check);
        self
    }
}

impl<D: Dialect> Backend for SqlBackend<D> {
    type Write = D::Write;

    /// Checks the shape of `write`, the [limits](actix_persistence_core::limits) and that its
    /// sequence numbers fit, then what the dialect checks, or says why it is rejected.
    fn prepare(write: AtomicWrite) -> Result<D::Write, WriteRejection> {
        write.check()?;
        let highest_seq_nr = i64::try_from(write.highest_seq_nr()).map_err(|_| {
            let reason = format!(
                "sequence number {} is above {}, {}",
                write.highest_seq_nr(),
                i64::MAX,
                D::HIGHEST_SEQ_NR
            );
            rejection(&write, reason)
        })?;
        D::prepare(write, highest_seq_nr)
    }

    fn atomic_write(write: &D::Write) -> &AtomicWrite {
        D::atomic_write(write)
    }

    async fn commit_batch(
        &self,
        writes: &[D::Write],
        owners: &[String],
        counters: &WriteCounters,
        turn: InsertTurn,
        failed: &FailedIds,
    ) -> BatchOutcome {
        let storage = |e| JournalError::storage("write", e);
        let fail = |error: JournalError| -> BatchOutcome {
            let owned = owners.iter().map(|_| Err(error.clone())).collect();
            (fail_all(writes, &error), owned)
        };
        let mut conn = match self.writer.acquire().await {
            Ok(conn) => conn,
            Err(e) => return fail(storage(e)),
        };
        // Events of this transaction may become visible behind later timestamps by up to its
        // duration: measured from before `BEGIN` (see `WriteNotifier::notify_committed`).
        let began = std::time::Instant::now();
        let mut tx = match D::begin(&mut conn).await {
            Ok(tx) => tx,
            Err(e) => return fail(storage(e)),
        };
        let size = writes.len() + owners.len();
        // Fast path: the whole batch in one statement. Rare conflicts fall back to savepoints.
        let mut outcomes = None;
        // A write of an id whose write failed in an earlier transaction of the same batch is
        // not attempted: only the savepoints' path leaves single writes out.
        let skips = !failed.is_empty()
            && writes
                .iter()
                .any(|w| failed.check(D::atomic_write(w)).is_err());
        if !skips && (writes.len() > 1 || (D::BATCHES_SINGLE_WRITES && !writes.is_empty())) {
            match D::insert_batch(&mut tx, writes).await {
                None => {}
                Some(Ok(true)) => outcomes = Some(vec![Ok(()); writes.len()]),
                // A conflict or an error in some write: find out which, one savepoint each.
                Some(failed_batch @ (Ok(false) | Err(_))) => {
                    if !rollback(tx, size).await {
                        // The transaction's state is unknown: fail the batch on this
                        // connection, which is closed (a retry goes to a new one).
                        discard(&mut conn);
                        return fail(match failed_batch {
                            Err(error) => error,
                            Ok(_) => JournalError::storage(
                                "write",
                                std::io::Error::other(
                                    "a conflict's transaction could not be rolled back; its \
                                     connection was closed",
                                ),
                            ),
                        });
                    }
                    tx = match D::begin(&mut conn).await {
                        Ok(tx) => tx,
                        Err(e) => return fail(storage(e)),
                    };
                }
            }
        }
        let outcomes = match outcomes {
            Some(outcomes) => outcomes,
            None => {
                match insert_in_savepoints::<D>(&mut tx, writes, !owners.is_empty(), failed).await {
                    Ok(outcomes) => outcomes,
                    Err(error) => {
                        if !rollback(tx, size).await {
                            discard(&mut conn);
                        }
                        return fail(error);
                    }
                }
            }
        };
        let owned = if owners.is_empty() {
            Vec::new()
        } else {
            match D::take_ownerships(&mut tx, owners).await {
                Ok(owned) => owned,
                Err(error) => {
                    if !rollback(tx, size).await {
                        discard(&mut conn);
                    }
                    return fail(error);
                }
            }
        };
        // Every statement ran: the next transaction may run its own while this one commits.
        drop(turn);
        let stored = outcomes.iter().filter(|o| o.is_ok()).count();
        if stored == 0 && owners.is_empty() {
            if !rollback(tx, size).await {
                discard(&mut conn);
            }
            return (settle(outcomes, None), Vec::new());
        }
        if let Some(Err(error)) = self.before_commit.as_ref().map(|check| check()) {
            if !rollback(tx, size).await {
                discard(&mut conn);
            }
            return fail(error);
        }
        match tx.commit().await {
            Ok(()) => {
                if stored > 0 {
                    counters.committed(stored);
                    counters.commit_took(began.elapsed());
                    record_batch_size::<D>(stored);
                }
                (settle(outcomes, None), owned.into_iter().map(Ok).collect())
            }
            // Nothing of the transaction is stored: PostgreSQL has ended it; SQLite's is rolled
            // back, by SQLite itself or when its connection is closed: a connection whose
            // commit failed is not given back to the pool (see `discard`).
            Err(e) => {
                discard(&mut conn);
                let error = storage(e);
                let owned = owners.iter().map(|_| Err(error.clone())).collect();
                (settle(outcomes, Some(error)), owned)
            }
        }
    }
}

/// Rolls back a batch of `atomic_writes` atomic writes, logging (not returning) a failure.
/// Returns whether the rollback succeeded: when it did not, the connection's transaction
/// state is unknown and the caller must not give the connection back to the pool (see
/// [`discard`]).
async fn rollback<DB: Database>(tx: Transaction<'_, DB>, atomic_writes: usize) -> bool {
    match tx.rollback().await {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(
                atomic_writes,
                %error,
                "rolling back a failed journal batch failed; closing its connection"
            );
            false
        }
    }
}

/// Closes `conn` instead of giving it back to the pool once it is dropped. For a connection
/// whose transaction failed to commit or to roll back: the database may have ended the
/// transaction by itself (SQLite rolls a transaction back on `SQLITE_FULL`, on an I/O error,
/// or on a trigger's `RAISE(ROLLBACK)`), while the driver still counts it as open (sqlx's
/// SQLite worker keeps its transaction depth at 1 when the `ROLLBACK` fails), so every later
/// `BEGIN` on that connection would fail (`InvalidSavePointStatement`) and the journal's single
/// SQLite writer connection would fail every write for good.
fn discard<DB: Database>(conn: &mut sqlx::pool::PoolConnection<DB>) {
    conn.close_on_drop();
}

/// Inserts the atomic writes of a batch inside the open transaction, each in a savepoint of its
/// own (a batch of one needs none unless `shared` says other work commits with it: the
/// transaction is rolled back instead), so one that fails is rolled back alone. A write of an
/// id whose write failed before (in `failed`, or earlier here) is not attempted: it fails with
/// [`JournalError::EarlierWriteFailed`] (stored, it would follow a hole recovery cannot see).
/// Returns the outcome of each write.
///
/// # Errors
/// When a savepoint cannot be opened, released or rolled back: the transaction can then no
/// longer be trusted and the caller must roll it back whole.
async fn insert_in_savepoints<D: Dialect>(
    conn: &mut <D::Db as Database>::Connection,
    writes: &[D::Write],
    shared: bool,
    failed: &FailedIds,
) -> Result<Vec<Result<(), JournalError>>, JournalError> {
    let skipped =
        |failed: &FailedIds, write: &D::Write| failed.earlier_failure(D::atomic_write(write));
    if let ([single], false) = (writes, shared) {
        if let Some(error) = skipped(failed, single) {
            return Ok(vec![Err(error)]);
        }
        return Ok(vec![D::insert_atomic_write(conn, single).await]);
    }
    let storage = |e| JournalError::storage("write", e);
    let mut failed = failed.clone();
    let mut outcomes = Vec::with_capacity(writes.len());
    for write in writes {
        if let Some(error) = skipped(&failed, write) {
            outcomes.push(Err(error));
            continue;
        }
        let mut savepoint = conn.begin().await.map_err(storage)?;
        match D::insert_atomic_write(&mut savepoint, write).await {
            Ok(()) => {
                savepoint.commit().await.map_err(storage)?;
                outcomes.push(Ok(()));
            }
            Err(error) => {
                savepoint.rollback().await.map_err(storage)?;
                failed.record(D::atomic_write(write));
                outcomes.push(Err(error));
            }
        }
    }
    Ok(outcomes)
}

/// The journal tables of one database as the reading side of a journal uses them: replays and
/// highest sequence numbers through `readers`, deletes through `writer` (on PostgreSQL both are
/// the one pool).
pub(crate) struct JournalTables<'a, D: Dialect> {
    pub(crate) readers: &'a Pool<D::Db>,
    /// Reads pages beside `readers` ([`Dialect::read_page`]).
    pub(crate) page_readers: &'a D::PageReaders,
    pub(crate) writer: &'a Pool<D::Db>,
    /// How many events a replay reads per query.
    pub(crate) page_size: u32,
    /// Where a replay's page reads run ([`HomeRuntime`]).
    pub(crate) home: &'a HomeRuntime,
}

/// The columns of the replay query, in its `SELECT` order (not the persistence id: the
/// replay knows it, and one column less is one value less to copy per event).
#[derive(Clone, Copy)]
enum ReplayColumn {
    SeqNr = 0,
    WriterUuid = 1,
    WriteTimestamp = 2,
    SerializerId = 3,
    Manifest = 4,
    Payload = 5,
    Tags = 6,
}

/// The query of `pid`'s (`$1`) highest sequence number: `journal_highest`'s, or the highest
/// stored event's when that is above it (see `JournalTables::read_highest_on`). A macro, so
/// that `read_replay_bounds` can put it in its statement with `concat!`.
macro_rules! highest_seq_nr_sql {
    () => {
        "SELECT max(highest) FROM ( \
             SELECT highest_seq_nr AS highest FROM journal_highest \
             WHERE persistence_id = $1 \
             UNION ALL \
             SELECT max(seq_nr) FROM journal WHERE persistence_id = $1) AS stored"
    };
}

/// The highest sequence number of `pid` from the maximum read (`None`: nothing stored, 0).
///
/// # Errors
/// [`JournalError::Storage`] with [`SqlStoreError::CorruptRow`] when it is negative.
fn highest_from(pid: &str, highest: Option<i64>) -> Result<u64, JournalError> {
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

/// The error of a stored event that does not read back (a row this crate never writes).
fn corrupt_row(
    operation: &'static str,
    persistence_id: String,
    seq_nr: i64,
    reason: String,
) -> JournalError {
    JournalError::storage(
        operation,
        SqlStoreError::CorruptRow {
            persistence_id,
            seq_nr,
            reason,
        },
    )
}

/// What a column's decoding error says, without sqlx's "error occurred while decoding column
/// N" around it (the caller names the row and the column).
fn decode_cause(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::ColumnDecode { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

/// The replay's page query: the columns in [`ReplayColumn`] order.
const REPLAY_SQL: &str = "SELECT seq_nr, writer_uuid, write_timestamp, serializer_id, \
                                 manifest, payload, tags \
                          FROM journal \
                          WHERE persistence_id = $1 AND seq_nr >= $2 AND seq_nr <= $3 \
                          ORDER BY seq_nr \
                          LIMIT $4";

/// The events of one replay page as read.
struct ReplayRows {
    /// In sequence order; a row that did not decode ends them with its error.
    events: Vec<Result<PersistentRepr, JournalError>>,
    /// Rows the query returned (an event deleted between a page and the read of its payload
    /// is counted, and left out of `events`).
    rows: u64,
    /// The highest sequence number among them, as stored.
    last_seq_nr: Option<i64>,
}

/// Why a row of a page read in one piece ([`Dialect::read_page`]) gives no event.
enum PageRowError {
    /// The page is not of the expected shape: read it row by row.
    NotAPage,
    /// The row is corrupt, or reading its payload failed.
    Journal(JournalError),
}

/// What the rows of one query page share as they are decoded: rows come sorted by timestamp,
/// then persistence id, so a run of rows of one id (or one writer) shares one `Arc`, the id read
/// borrowed from the row, and a run of rows stored with the same tags one `Tags`.
#[derive(Default)]
struct PageDecoder {
    ids: RunInterner,
    runs: RunColumns,
}

/// What a run of rows shares as they are decoded: a writer's `Arc` (a run of one writer's
/// rows) and the tags (a run of rows stored with the same tags: one decoding, one allocation).
#[derive(Default)]
pub(crate) struct RunColumns {
    writer_uuids: RunInterner,
    tags: TagsInterner,
}

/// Where a replay stands: the next page starts at `next_from`.
struct ReplayCursor<D: Dialect> {
    readers: Pool<D::Db>,
    page_readers: D::PageReaders,
    /// Shared by every event of the replay (one allocation for the whole replay).
    persistence_id: Arc<str>,
    /// The page query: [`REPLAY_SQL`], or without the tags ([`Dialect::REPLAY_WITHOUT_TAGS_SQL`]).
    sql: &'static str,
    /// The writer uuid and the tags of the last event read row by row: a run of events of one
    /// incarnation (of the same tags) shares one (pages read in one piece and pages read ahead
    /// have their own).
    runs: RunColumns,
    next_from: i64,
    to: i64,
    remaining: u64,
    page_size: u32,
    /// Sequence numbers the next query covers. Each query is bounded to a window, so a planner
    /// without statistics (a table filled a moment ago) never sorts the whole rest of the
    /// journal for one page; windows that hold no event (deleted ranges) double.
    window: i64,
    /// Whether `to` is at most the id's highest sequence number: read when a window first
    /// comes back empty (see [`JournalTables::read_page`]).
    to_within_highest: bool,
}

/// The events of one page (a failed page ends with its error), and the query of the next page
/// if there may be one (not started: a future does nothing until polled), with the window of
/// sequence numbers it reads.
struct Page {
    events: Vec<Result<PersistentRepr, JournalError>>,
    next: Option<(Window, BoxFuture<'static, Page>)>,
}

impl Page {
    fn failed(error: JournalError) -> Self {
        Page {
            events: vec![Err(error)],
            next: None,
        }
    }
}

/// The sequence numbers one replay query covers: `from` to `from + size - 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    from: i64,
    size: i64,
}

impl Window {
    /// The window right after this one, of `size` sequence numbers.
    fn following(self, size: i64) -> Window {
        Window {
            from: self.from.saturating_add(self.size),
            size,
        }
    }
}

/// Pages a replay reads ahead of the one being handed out (each on a reader connection of its
/// own while its query runs).
const PAGES_AHEAD: usize = 2;

/// A replay that reads up to [`PAGES_AHEAD`] pages ahead, each query a task of its own on the
/// runtime: the database (PostgreSQL's server, SQLite's worker threads) reads the next pages
/// while the actor applies the current one, and the next-but-one while the next one's rows are
/// decoded, so the database never waits for the actor nor the actor for a round trip.
///
/// Pages are windows of sequence numbers ([`ReplayCursor::window`]), and a page of a window of
/// page size is always the whole window; so the page after it is the following window, known
/// before the page's rows arrive. Reads after the next one are started on that assumption
/// (only where no `max` can cut the replay short, and not while windows widen over deleted
/// ranges); when a page ends elsewhere, the reads started after it are dropped (a dropped
/// task finishes its query and gives its connection back) and the page it names is read.
/// At most `1 + PAGES_AHEAD` pages are held, whatever the length of the history.
///
/// A read-ahead task gives its reader connection back as soon as its rows arrived, without
/// waiting for the actor: it runs whenever the actor's task yields (a recovering actor yields
/// after at most 64 events or 1 ms of `apply`), so a connection is never checked out for longer
/// than its query and one such slice of user code. The first page is read by such a task
/// too: a consumer that stops pulling in the middle of its query (a `select!` that took
/// another branch) does not keep the connection. Outside a Tokio runtime the next page is
/// read inline, when the stream is polled, and nothing is read ahead.
struct ReadAhead {
    /// The page being handed out.
    current: std::vec::IntoIter<Result<PersistentRepr, JournalError>>,
    /// The reads of the next pages, in order: the first is the next page's; each one after it
    /// reads the window following the one before it.
    ahead: std::collections::VecDeque<Ahead>,
    /// Starts the read of a window ahead; `None` when the replay is not read ahead beyond the
    /// next page (a `max` that may end it inside the history).
    speculation: Option<Speculation>,
    /// Where the page reads run.
    home: HomeRuntime,
}

/// A page's read, started.
struct Ahead {
    window: Window,
    reading: Reading,
}

/// How a replay starts reads ahead: windows of `page_size` up to `to`.
struct Speculation {
    page_size: i64,
    to: i64,
    read: Box<dyn Fn(Window) -> BoxFuture<'static, Page> + Send>,
}

impl ReadAhead {
    /// Starts reads of the windows that follow the last one started, up to [`PAGES_AHEAD`],
    /// while windows have page size (a widened window's page may end inside it).
    fn read_ahead(&mut self) {
        let Some(speculation) = &self.speculation else {
            return;
        };
        while self.ahead.len() < PAGES_AHEAD {
            let Some(last) = self.ahead.back() else {
                return;
            };
            let window = last.window.following(speculation.page_size);
            if last.window.size != speculation.page_size || window.from > speculation.to {
                return;
            }
            let Ok(task) = self.home.spawn((speculation.read)(window)) else {
                return;
            };
            self.ahead.push_back(Ahead {
                window,
                reading: Reading::Task(task),
            });
        }
    }

    /// Takes `page` as the current one; keeps the read started on the page after it when it
    /// is the one the page names, else drops the reads ahead and starts that one.
    fn hand_out(&mut self, page: Page) {
        self.current = page.events.into_iter();
        match page.next {
            Some((window, _)) if self.ahead.front().is_some_and(|a| a.window == window) => {}
            Some((window, read)) => {
                self.ahead.clear();
                self.ahead.push_back(Ahead {
                    window,
                    reading: Reading::start(&self.home, read),
                });
            }
            None => {
                self.ahead.clear();
                self.speculation = None;
            }
        }
        self.read_ahead();
    }
}

/// The query of a page, running.
enum Reading {
    /// A task of its own, on the store's [`HomeRuntime`] (or the runtime the replay is polled
    /// on).
    Task(tokio::task::JoinHandle<Page>),
    /// Polled by the stream itself (no runtime to spawn on).
    Inline(BoxFuture<'static, Page>),
}

impl Reading {
    fn start(home: &HomeRuntime, page: BoxFuture<'static, Page>) -> Self {
        match home.spawn(page) {
            Ok(task) => Reading::Task(task),
            Err(page) => Reading::Inline(page),
        }
    }

    fn poll_page(&mut self, task: &mut std::task::Context<'_>) -> std::task::Poll<Page> {
        match self {
            Reading::Inline(page) => page.as_mut().poll(task),
            Reading::Task(handle) => std::pin::Pin::new(handle).poll(task).map(|joined| {
                joined.unwrap_or_else(|e| {
                    Page::failed(JournalError::storage(
                        "replay",
                        SqlStoreError::ReplayTask {
                            reason: e.to_string(),
                        },
                    ))
                })
            }),
        }
    }
}

impl futures::Stream for ReadAhead {
    type Item = Result<PersistentRepr, JournalError>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        task: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        let this = self.get_mut();
        loop {
            if let Some(event) = this.current.next() {
                return Poll::Ready(Some(event));
            }
            // The first poll: the reads after the first page start with its query.
            this.read_ahead();
            let Some(next) = this.ahead.front_mut() else {
                return Poll::Ready(None);
            };
            let page = std::task::ready!(next.reading.poll_page(task));
            this.ahead.pop_front();
            this.hand_out(page);
        }
    }
}

impl<D: Dialect> JournalTables<'_, D>
where
    for<'q> <D::Db as Database>::Arguments<'q>: IntoArguments<'q, D::Db>,
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'q> &'q str:
        Encode<'q, D::Db> + Decode<'q, D::Db> + Type<D::Db> + ColumnIndex<<D::Db as Database>::Row>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
    for<'q> i64: Encode<'q, D::Db> + Decode<'q, D::Db> + Type<D::Db>,
    for<'r> String: Decode<'r, D::Db> + Type<D::Db>,
    for<'r> Vec<u8>: Decode<'r, D::Db> + Type<D::Db>,
    for<'r> &'r [u8]: Decode<'r, D::Db>,
    for<'r> (i64,): FromRow<'r, <D::Db as Database>::Row>,
    for<'r> (String,): FromRow<'r, <D::Db as Database>::Row>,
    for<'r> (Option<i64>,): FromRow<'r, <D::Db as Database>::Row>,
    for<'r> (Option<i64>, Option<i64>): FromRow<'r, <D::Db as Database>::Row>,
    for<'r> Option<i64>: Decode<'r, D::Db>,
{
    /// The events of `pid` from `from` to `to`, at most `max`, page by page (`page_size` per
    /// query on the readers), so memory stays bounded however long the replay.
    ///
    /// `with_tags`: each event's tags are read; without, they are left empty
    /// (`JournalStore::replay_for_recovery`: the database neither reads nor sends them).
    pub(crate) fn replay(
        &self,
        pid: &str,
        from: u64,
        to: u64,
        max: u64,
        with_tags: bool,
    ) -> ReplayStream {
        let sql = if with_tags {
            REPLAY_SQL
        } else {
            D::REPLAY_WITHOUT_TAGS_SQL
        };
        let to = clamp_seq_nr(to);
        let Ok(from) = i64::try_from(from) else {
            return Box::pin(stream::empty());
        };
        if max == 0 || from > to || !D::stores_text(pid) {
            return Box::pin(stream::empty());
        }
        let page_size = i64::from(self.page_size);
        let cursor = ReplayCursor::<D> {
            readers: self.readers.clone(),
            page_readers: self.page_readers.clone(),
            persistence_id: Arc::from(pid),
            sql,
            runs: RunColumns::default(),
            next_from: from,
            to,
            remaining: max,
            page_size: self.page_size,
            window: page_size,
            to_within_highest: false,
        };
        // Read ahead beyond the next page only when `max` cannot end the replay before `to`:
        // then every page's query is its window's, whatever the pages before it held.
        let span = u64::try_from(to - from).map_or(u64::MAX, |span| span.saturating_add(1));
        let speculation = (max >= span).then(|| {
            let readers = self.readers.clone();
            let page_readers = self.page_readers.clone();
            let persistence_id = Arc::clone(&cursor.persistence_id);
            let page_size_u32 = self.page_size;
            Speculation {
                page_size,
                to,
                read: Box::new(move |window: Window| {
                    Self::next_page(ReplayCursor::<D> {
                        readers: readers.clone(),
                        page_readers: page_readers.clone(),
                        persistence_id: Arc::clone(&persistence_id),
                        sql,
                        runs: RunColumns::default(),
                        next_from: window.from,
                        to,
                        remaining: max,
                        page_size: page_size_u32,
                        window: window.size,
                        to_within_highest: false,
                    })
                }),
            }
        });
        let first = Window {
            from,
            size: page_size,
        };
        Box::pin(ReadAhead {
            current: Vec::new().into_iter(),
            ahead: std::collections::VecDeque::from([Ahead {
                window: first,
                // A task of its own, as the pages after it: a consumer that stops pulling
                // in the middle of the query does not keep its connection checked out.
                reading: Reading::start(self.home, Self::next_page(cursor)),
            }]),
            speculation,
            home: self.home.clone(),
        })
    }

    /// Reads the next page on a connection of the readers, and gives the connection back to
    /// the pool before the page is done: the connection is checked out for the query alone,
    /// never while the caller (a recovering actor's `apply`) works through a page it holds.
    fn next_page(cursor: ReplayCursor<D>) -> BoxFuture<'static, Page> {
        Box::pin(JournalTables::<'static, D>::read_page(cursor))
    }

    /// [`next_page`](Self::next_page)'s query.
    async fn read_page(mut cursor: ReplayCursor<D>) -> Page {
        let limit = cursor.remaining.min(u64::from(cursor.page_size));
        let upper = cursor
            .next_from
            .saturating_add(cursor.window - 1)
            .min(cursor.to);
        let read = match Self::read_replay_rows(&mut cursor, upper, limit).await {
            Ok(read) => read,
            Err(e) => return Page::failed(e),
        };
        let ReplayRows {
            events,
            rows: read,
            last_seq_nr,
        } = read;
        if events.last().is_some_and(Result::is_err) {
            return Page { events, next: None };
        }
        let full_page = read == limit;
        cursor.remaining -= read;
        let page_window = i64::from(cursor.page_size);
        let next_from = match last_seq_nr {
            // A full page: more may follow right after its last event.
            Some(last) if full_page => last.checked_add(1).map(|from| (from, page_window)),
            // The window is exhausted: go on after it, wider when it held nothing.
            _ if upper < cursor.to => {
                let window = if read == 0 {
                    cursor.window.saturating_mul(2)
                } else {
                    page_window
                };
                Some((upper + 1, window))
            }
            _ => None,
        };
        // A window that held nothing may lie past the id's last event (a live query by
        // persistence id reads from its next sequence number up to `MAX_SEQ_NR` on every
        // round): no event is stored above the highest sequence number, so the replay ends
        // there instead of doubling its windows up to `i64::MAX` (about 50 empty queries per
        // call). Read once per replay, only when a window came back empty.
        let next_from = match next_from {
            Some((from, window)) if read == 0 && !cursor.to_within_highest => {
                match Self::read_highest_on(&cursor.readers, &cursor.persistence_id).await {
                    Ok(highest) => {
                        cursor.to = cursor.to.min(i64::try_from(highest).unwrap_or(i64::MAX));
                        cursor.to_within_highest = true;
                        Some((from, window))
                    }
                    Err(error) => return Page::failed(error),
                }
            }
            other => other,
        };
        let next = match next_from {
            Some((from, window)) if cursor.remaining > 0 && from <= cursor.to => {
                cursor.next_from = from;
                cursor.window = window;
                Some((Window { from, size: window }, Self::next_page(cursor)))
            }
            _ => None,
        };
        Page { events, next }
    }

    /// The rows of one replay page: `persistence_id`'s events from `cursor.next_from` to
    /// `upper`, at most `limit`, on a connection of the readers that goes back to the pool as
    /// soon as they arrived.
    ///
    /// # Errors
    /// [`JournalError::Storage`] when the query fails; a row that does not decode ends
    /// [`ReplayRows::events`] with its error.
    async fn read_replay_rows(
        cursor: &mut ReplayCursor<D>,
        upper: i64,
        limit: u64,
    ) -> Result<ReplayRows, JournalError> {
        let storage = |e| JournalError::storage("replay", e);
        // At most `page_size`, a u32.
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let pid = &*cursor.persistence_id;
        let args = [
            PageArg::Text(pid),
            PageArg::Int(cursor.next_from),
            PageArg::Int(upper),
            PageArg::Int(limit),
        ];
        // The events are built on the thread that read the page (see `RawPage`).
        let events_of_page = {
            let pid = Arc::clone(&cursor.persistence_id);
            move |page: &RawPage| JournalTables::<'static, D>::replay_rows_from_page(&pid, page)
        };
        let page_limit = usize::try_from(limit).unwrap_or(0);
        let page = D::read_page(
            &cursor.readers,
            &cursor.page_readers,
            cursor.sql,
            &args,
            false,
            page_limit,
            events_of_page,
        );
        if let Some(rows) = page.await.flatten() {
            return rows;
        }
        // Not read as a page, or not a page of well-shaped rows: read it row by row, which names
        // the corrupt row.
        let mut conn = cursor.readers.acquire().await.map_err(storage)?;
        let rows = sqlx::query::<D::Db>(cursor.sql)
            .bind(pid)
            .bind(cursor.next_from)
            .bind(upper)
            .bind(limit)
            .fetch_all(&mut *conn)
            .await;
        // Dropping a pooled connection only schedules its return on the runtime, which runs
        // when the caller's task next yields; sqlx's `return_to_pool` runs that same drop
        // handler (test the connection, release it) here, so it is available at once.
        conn.return_to_pool().await;
        let rows = rows.map_err(storage)?;
        let mut read = ReplayRows {
            events: Vec::with_capacity(rows.len()),
            rows: rows.len() as u64,
            last_seq_nr: None,
        };
        for row in &rows {
            let pid = Arc::clone(&cursor.persistence_id);
            match Self::decode_event("replay", pid, &mut cursor.runs, row) {
                Ok((seq_nr, event)) => {
                    read.last_seq_nr = Some(seq_nr);
                    read.events.push(Ok(event));
                }
                Err(error) => {
                    read.events.push(Err(error));
                    break;
                }
            }
        }
        Ok(read)
    }

    /// The events of a replay page read in one piece ([`Dialect::read_page`], in sequence
    /// order). `None` when a row is not of the expected shape: the caller reads the page row
    /// by row.
    fn replay_rows_from_page(
        pid: &Arc<str>,
        page: &RawPage,
    ) -> Option<Result<ReplayRows, JournalError>> {
        // A run of rows of one writer shares one `Arc`, a run of equal tags one `Tags`.
        let mut runs = RunColumns::default();
        let rows = page.rows();
        let mut read = ReplayRows {
            events: Vec::with_capacity(rows.len()),
            rows: rows.len() as u64,
            last_seq_nr: page.last_seq_nr(),
        };
        for row in rows {
            match Self::event_from_row("replay", pid, &mut runs, row) {
                Ok(event) => read.events.push(Ok(event)),
                Err(PageRowError::NotAPage) => return None,
                Err(PageRowError::Journal(error)) => {
                    read.events.push(Err(error));
                    break;
                }
            }
        }
        Some(Ok(read))
    }

    /// The event of a page's row (of `pid`, shared); a NULL payload, which the journal never
    /// writes, is a corrupt row. Its writer uuid comes from
    /// `writer_uuids` (shared with the previous row's when equal). Errors name `operation`
    /// (`"replay"`, `"query"`).
    fn event_from_row(
        operation: &'static str,
        pid: &Arc<str>,
        runs: &mut RunColumns,
        row: PageRow<'_>,
    ) -> Result<PersistentRepr, PageRowError> {
        let stored_seq_nr = row.seq_nr;
        let corrupt = |reason: String| {
            PageRowError::Journal(corrupt_row(
                operation,
                pid.to_string(),
                stored_seq_nr,
                reason,
            ))
        };
        let seq_nr = u64::try_from(stored_seq_nr)
            .map_err(|_| corrupt("negative sequence number".to_owned()))?;
        let serializer_id = u32::try_from(row.serializer_id)
            .map_err(|_| corrupt(format!("serializer id {} is not a u32", row.serializer_id)))?;
        let payload = row
            .payload
            .ok_or_else(|| corrupt("payload is NULL".to_owned()))?;
        // Text that is not JSON: read row by row, which names it. A run of rows with the same
        // text shares one `Tags` (one parse, no allocation per row).
        let Ok(tags) = runs.tags.intern_with(row.tags.as_bytes(), |_| {
            page_row::tags_from_json_text(row.tags).map(Tags::from)
        }) else {
            return Err(PageRowError::NotAPage);
        };
        Ok(PersistentRepr {
            persistence_id: Arc::clone(pid),
            seq_nr,
            payload: payload.to_vec(),
            serializer_id,
            manifest: row.manifest.to_owned(),
            writer_uuid: runs.writer_uuids.intern(row.writer_uuid),
            timestamp: row.write_timestamp,
            tags,
        })
    }

    /// Reads one journal row back into an event; also returns its sequence number as stored.
    ///
    /// Columns are read by their position in the replay query ([`ReplayColumn`]), not by
    /// name: a name lookup per column per event was about a quarter of a replay's CPU. Nor is
    /// each value's type compared with the column's first (`try_get_unchecked`, another
    /// fifth of PostgreSQL's replay): the query names the journal's own columns, whose types
    /// the migrations fix, and decoding still fails on a value of the wrong shape.
    ///
    /// `persistence_id` becomes the event's (shared: a replay has one for all its events, a
    /// query page one per run of rows of an id); the writer uuid is read borrowed from the row
    /// and shared through `writer_uuids` (a run of rows of one writer: one allocation). Errors
    /// name `operation` (`"replay"`, `"query"`).
    fn decode_event(
        operation: &'static str,
        persistence_id: Arc<str>,
        runs: &mut RunColumns,
        row: &<D::Db as Database>::Row,
    ) -> Result<(i64, PersistentRepr), JournalError> {
        let column_error = |e| JournalError::storage(operation, e);
        let get = |column: ReplayColumn| column as usize;
        let stored_seq_nr: i64 = row
            .try_get_unchecked(get(ReplayColumn::SeqNr))
            .map_err(column_error)?;
        let corrupt = |reason: String| {
            corrupt_row(operation, persistence_id.to_string(), stored_seq_nr, reason)
        };
        let seq_nr = u64::try_from(stored_seq_nr)
            .map_err(|_| corrupt("negative sequence number".to_owned()))?;
        let serializer_id: D::SerializerId = row
            .try_get_unchecked(get(ReplayColumn::SerializerId))
            .map_err(column_error)?;
        if D::DYNAMIC_TYPES {
            // Only rows that are not read as a page come here (SQLite): no cost per event.
            row.try_get::<i64, _>(get(ReplayColumn::SeqNr))
                .map_err(|e| corrupt(format!("sequence number: {}", decode_cause(&e))))?;
            row.try_get::<D::SerializerId, _>(get(ReplayColumn::SerializerId))
                .map_err(|e| corrupt(format!("serializer id: {}", decode_cause(&e))))?;
        }
        let serializer_id = D::serializer_id_from_sql(serializer_id)
            .ok_or_else(|| corrupt(format!("serializer id {serializer_id} is not a u32")))?;
        // A row whose tags do not read back is a corrupt row, named (as a page's on SQLite).
        // Read as bytes: a run of rows stored with the same tags shares one `Tags`, decoded once.
        let stored_tags = row
            .try_get_unchecked::<Option<&[u8]>, _>(get(ReplayColumn::Tags))
            .map_err(|e| corrupt(format!("tags are not readable: {}", decode_cause(&e))))?
            .ok_or_else(|| corrupt("tags are NULL".to_owned()))?;
        let tags = runs
            .tags
            .intern_with(stored_tags, D::tags_from_stored)
            .map_err(corrupt)?;
        // `Option`: sqlx decodes a NULL blob as empty bytes, which would pass for an event.
        let payload: Option<Vec<u8>> = row
            .try_get_unchecked(get(ReplayColumn::Payload))
            .map_err(column_error)?;
        let event = PersistentRepr {
            seq_nr,
            payload: payload.ok_or_else(|| corrupt("payload is NULL".to_owned()))?,
            serializer_id,
            manifest: row
                .try_get_unchecked(get(ReplayColumn::Manifest))
                .map_err(|e| corrupt(format!("manifest: {}", decode_cause(&e))))?,
            // Read as bytes: a run of one writer's rows shares its `Arc` without checking the
            // UTF-8 of each row again.
            writer_uuid: runs
                .writer_uuids
                .intern_utf8(
                    row.try_get_unchecked::<&[u8], _>(get(ReplayColumn::WriterUuid))
                        .map_err(column_error)?,
                )
                .map_err(|e| corrupt(format!("writer uuid is not UTF-8: {e}")))?,
            timestamp: row
                .try_get_unchecked(get(ReplayColumn::WriteTimestamp))
                .map_err(column_error)?,
            tags,
            persistence_id,
        };
        Ok((stored_seq_nr, event))
    }

    /// The database clock now ([`Dialect::CURRENT_TIMESTAMP`]).
    pub(crate) async fn current_timestamp(&self) -> Result<i64, JournalError> {
        sqlx::query_scalar::<D::Db, i64>(D::CURRENT_TIMESTAMP)
            .bind(wall_clock_micros())
            .fetch_one(self.readers)
            .await
            .map_err(|e| JournalError::storage("read the database clock", e))
    }

    /// One page of a query by offset (see `QueryStore::read_events`), one query: the page's
    /// rows through the filter's index, in query order (see [`page_query_sql`]).
    pub(crate) async fn read_events(
        &self,
        request: EventsRequest<'_>,
    ) -> Result<Vec<StoredEvent>, JournalError> {
        let storage = |e| JournalError::storage("query", e);
        // A tag or an entity type this database cannot store (PostgreSQL: a NUL) selects no
        // event: every stored one was checked when written. Not sent, as a replay of such an
        // id is not (PostgreSQL refuses the text outright; SQLite finds nothing).
        let (EventFilter::Slices {
            entity_type: text, ..
        }
        | EventFilter::Tag(text)) = request.filter;
        if !D::stores_text(text) {
            return Ok(Vec::new());
        }
        let sql = page_query_sql::<D>(
            request.filter,
            request.with_previous_timestamp,
            PageStart::of(request.after),
        );
        let values = page_values(&request);
        // The events are built on the thread that read the page (see `RawPage`).
        let page = D::read_page(
            self.readers,
            self.page_readers,
            &sql,
            &values,
            true,
            usize::try_from(request.limit).unwrap_or(usize::MAX),
            |page: &RawPage| JournalTables::<'static, D>::stored_events_from_page(page.rows()),
        );
        if let Some(events) = page.await.flatten() {
            return events;
        }
        // Not read as a page, or not a page of well-shaped rows: read it row by row, which names
        // the corrupt row.
        // Each row is decoded as it arrives, while the database still produces the rows after
        // it: decoding the page after its last row arrived left the database idle meanwhile
        // (the next page's query starts from this page's last event).
        let mut rows =
            sqlx::query_with::<D::Db, _>(&sql, page_arguments::<D>(values)?).fetch(self.readers);
        let mut decoder = PageDecoder::default();
        let mut events = Vec::with_capacity(request.limit.min(100_000) as usize);
        while let Some(row) = rows.try_next().await.map_err(storage)? {
            events.push(Self::stored_event(
                &mut decoder,
                &row,
                request.with_previous_timestamp,
            )?);
        }
        Ok(events)
    }

    /// The event of a query page's row (see [`PageDecoder`]).
    fn stored_event(
        decoder: &mut PageDecoder,
        row: &<D::Db as Database>::Row,
        with_previous: bool,
    ) -> Result<StoredEvent, JournalError> {
        let storage = |e| JournalError::storage("query", e);
        // The columns after the replay's: persistence_id, db_timestamp, and with `with_previous`
        // previous_timestamp, previous_seq_nr (by position: no name look-up per row).
        const PERSISTENCE_ID: usize = ReplayColumn::Tags as usize + 1;
        const DB_TIMESTAMP: usize = PERSISTENCE_ID + 1;
        // Unchecked, as the replay's columns (see `decode_event`): the journal's own columns;
        // the previous event's are the same columns, or NULL. The id is read as bytes: a run of
        // one id's rows shares its `Arc` without checking its UTF-8 again.
        let persistence_id = decoder
            .ids
            .intern_utf8(
                row.try_get_unchecked::<&[u8], _>(PERSISTENCE_ID)
                    .map_err(storage)?,
            )
            .map_err(|e| JournalError::storage("query", sqlx::Error::Decode(Box::new(e))))?;
        let (_, repr) = Self::decode_event("query", persistence_id, &mut decoder.runs, row)?;
        let (previous_timestamp, previous_seq_nr) = if with_previous {
            (
                row.try_get_unchecked(DB_TIMESTAMP + 1).map_err(storage)?,
                row.try_get_unchecked::<Option<i64>, _>(DB_TIMESTAMP + 2)
                    .map_err(storage)?
                    .and_then(|seq_nr| u64::try_from(seq_nr).ok()),
            )
        } else {
            (None, None)
        };
        Ok(StoredEvent {
            timestamp: row.try_get_unchecked(DB_TIMESTAMP).map_err(storage)?,
            previous_timestamp,
            previous_seq_nr,
            repr,
        })
    }

    /// The events of a query page read in one piece ([`Dialect::read_page`], in query order).
    /// `None` when a row is not of the expected shape: the caller reads the page row by row.
    fn stored_events_from_page<'a>(
        rows: impl ExactSizeIterator<Item = PageRow<'a>>,
    ) -> Option<Result<Vec<StoredEvent>, JournalError>> {
        // A run of rows of one id (or one writer) shares one `Arc`, of equal tags one `Tags`.
        let mut ids = RunInterner::new();
        let mut runs = RunColumns::default();
        let mut stored = Vec::with_capacity(rows.len());
        for row in rows {
            let (Some(persistence_id), Some(timestamp)) = (row.persistence_id, row.db_timestamp)
            else {
                return None;
            };
            let persistence_id = ids.intern(persistence_id);
            let (previous_timestamp, previous_seq_nr) =
                (row.previous_timestamp, row.previous_seq_nr);
            let repr = match Self::event_from_row("query", &persistence_id, &mut runs, row) {
                Ok(repr) => repr,
                Err(PageRowError::NotAPage) => return None,
                Err(PageRowError::Journal(error)) => return Some(Err(error)),
            };
            stored.push(StoredEvent {
                timestamp,
                previous_timestamp,
                previous_seq_nr: previous_seq_nr.and_then(|seq_nr| u64::try_from(seq_nr).ok()),
                repr,
            });
        }
        Some(Ok(stored))
    }

    /// Persistence ids that stored events, after `after`, at most `limit`, in byte order
    /// ([`Dialect::BYTE_ORDER`]: the database's own collation may order text by a language's
    /// rules; PostgreSQL reads them through `journal_highest_by_id_bytes`, migration 0010). An
    /// id whose row only records an ownership (an actor that recovered and never stored an
    /// event: highest sequence number 0) is not one of them.
    pub(crate) async fn read_persistence_ids(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>, JournalError> {
        let storage = |e| JournalError::storage("query persistence ids", e);
        let limit = i64::from(limit);
        let order = D::BYTE_ORDER;
        // An `after` this database cannot hold (PostgreSQL: a text holding NUL, which it
        // refuses outright, failing the query) is sent as its text up to the first NUL: no
        // stored id holds a NUL (every id was checked when written), so the ids above both
        // in byte order are the same ("a" < "a\0..." < "a\u{1}").
        let after = after.map(|after| match after.split_once('\0') {
            Some((before_nul, _)) if !D::stores_text(after) => before_nul,
            _ => after,
        });
        match after {
            None => {
                let sql = format!(
                    "SELECT persistence_id FROM journal_highest WHERE highest_seq_nr > 0 \
                     ORDER BY persistence_id{order} LIMIT $1"
                );
                sqlx::query_scalar::<D::Db, String>(&sql)
                    .bind(limit)
                    .fetch_all(self.readers)
                    .await
                    .map_err(storage)
            }
            Some(after) => {
                let sql = format!(
                    "SELECT persistence_id FROM journal_highest \
                     WHERE persistence_id{order} > $1 AND highest_seq_nr > 0 \
                     ORDER BY persistence_id{order} LIMIT $2"
                );
                sqlx::query_scalar::<D::Db, String>(&sql)
                    .bind(after)
                    .bind(limit)
                    .fetch_all(self.readers)
                    .await
                    .map_err(storage)
            }
        }
    }

    /// Computes the slice and the entity type of rows written before migration 0003 (their
    /// `slice` is -1), one persistence id at a time, through the writer. Returns how many
    /// persistence ids it updated.
    pub(crate) async fn fill_missing_slices(&self) -> Result<u64, JournalError> {
        let storage = |e| JournalError::storage("compute slices of old rows", e);
        let mut updated = 0;
        loop {
            let ids = sqlx::query_scalar::<D::Db, String>(
                "SELECT DISTINCT persistence_id FROM journal WHERE slice < 0 LIMIT 1000",
            )
            .fetch_all(self.writer)
            .await
            .map_err(storage)?;
            if ids.is_empty() {
                return Ok(updated);
            }
            for id in ids {
                sqlx::query::<D::Db>(
                    "UPDATE journal SET slice = $1, entity_type = $2 \
                     WHERE persistence_id = $3 AND slice < 0",
                )
                .bind(i64::from(slice_for_persistence_id(&id)))
                .bind(entity_type_of(&id))
                .bind(id.as_str())
                .execute(self.writer)
                .await
                .map_err(storage)?;
                updated += 1;
            }
        }
    }

    /// Reads the highest sequence number of `pid` (0 for an id that never wrote; see
    /// [`Self::read_highest_on`]).
    pub(crate) async fn read_highest(&self, pid: &str) -> Result<u64, JournalError> {
        Self::read_highest_on(self.readers, pid).await
    }

    /// Deletes the events of `pid` with `seq_nr <= to` (all of them for `u64::MAX`) and
    /// raises how far they were deleted (`journal_highest.deleted_to`, to the highest sequence
    /// number that held an event: numbers above it that no write stored, a rejected write's,
    /// are no deleted events) in one transaction on the writer; the highest sequence number is
    /// kept.
    ///
    /// Fenced: the transaction's first statement matches the id's row only where the id's
    /// owner epoch is not above `fencing_token`, taking the id's row lock (PostgreSQL) or
    /// the database write lock (SQLite) that ownership takes also need; when it matches no row
    /// the id either never wrote (nothing to delete) or has a newer owner
    /// ([`JournalError::Fenced`], nothing deleted).
    pub(crate) async fn delete_to(
        &self,
        pid: &str,
        to: u64,
        fencing_token: FencingToken,
    ) -> Result<(), JournalError> {
        if !D::stores_text(pid) {
            return Ok(());
        }
        let mut conn = self
            .writer
            .acquire()
            .await
            .map_err(|e| JournalError::storage("delete", e))?;
        let deleted = Self::delete_to_on(&mut conn, pid, to, fencing_token).await;
        if matches!(deleted, Err(JournalError::Storage { .. })) {
            // Its transaction may have been ended by the database while the driver counts it
            // as open (see `discard`): a new connection for the next operation.
            discard(&mut conn);
        }
        deleted
    }

    /// [`Self::delete_to`] in a transaction on `conn`.
    async fn delete_to_on(
        conn: &mut sqlx::pool::PoolConnection<D::Db>,
        pid: &str,
        to: u64,
        fencing_token: FencingToken,
    ) -> Result<(), JournalError> {
        let storage = |e| JournalError::storage("delete", e);
        let mut tx = conn.begin().await.map_err(storage)?;
        // Locks the id's row (a write of the id waits for it) unless a newer owner holds it.
        let owned = sqlx::query_scalar::<D::Db, i64>(
            "UPDATE journal_highest SET deleted_to = deleted_to \
             WHERE persistence_id = $1 AND owner_epoch <= $2 \
             RETURNING owner_epoch",
        )
        .bind(pid)
        .bind(token_to_sql(fencing_token))
        .fetch_optional(&mut *tx)
        .await
        .map_err(storage)?;
        if owned.is_none() {
            let epoch = sqlx::query_scalar::<D::Db, i64>(
                "SELECT owner_epoch FROM journal_highest WHERE persistence_id = $1",
            )
            .bind(pid)
            .fetch_optional(&mut *tx)
            .await
            .map_err(storage)?;
            // Ends the transaction (nothing was changed) before answering.
            tx.rollback().await.map_err(storage)?;
            return match epoch {
                // Never wrote: no events, nothing to delete.
                None => Ok(()),
                Some(_) => Err(JournalError::Fenced {
                    persistence_id: pid.to_owned(),
                    fencing_token: fencing_token.get(),
                }),
            };
        }
        // The mark is the highest number that held an event: a number above it up to `to` that
        // never did (a rejected write's) is no deleted event, and recovery must not take it for
        // one. Read under the row's lock, so no write of the id comes between.
        sqlx::query::<D::Db>(
            "UPDATE journal_highest SET deleted_to = ( \
                 SELECT max(seq_nr) FROM journal WHERE persistence_id = $1 AND seq_nr <= $2) \
             WHERE persistence_id = $1 AND deleted_to < ( \
                 SELECT max(seq_nr) FROM journal WHERE persistence_id = $1 AND seq_nr <= $2)",
        )
        .bind(pid)
        .bind(clamp_seq_nr(to))
        .execute(&mut *tx)
        .await
        .map_err(storage)?;
        sqlx::query::<D::Db>("DELETE FROM journal WHERE persistence_id = $1 AND seq_nr <= $2")
            .bind(pid)
            .bind(clamp_seq_nr(to))
            .execute(&mut *tx)
            .await
            .map_err(storage)?;
        tx.commit().await.map_err(storage)?;
        Ok(())
    }

    /// How far the events of `pid` were deleted (0 when never, or for an id that never wrote).
    pub(crate) async fn read_deleted_to(&self, pid: &str) -> Result<u64, JournalError> {
        if !D::stores_text(pid) {
            return Ok(0);
        }
        let deleted_to = Self::read_column_on(
            self.readers,
            "SELECT deleted_to FROM journal_highest WHERE persistence_id = $1",
            pid,
        )
        .await
        .map_err(|e| JournalError::storage("read how far events were deleted", e))?;
        Ok(deleted_to.map_or(0, |d| u64::try_from(d).unwrap_or(0)))
    }
    /// The highest sequence number of `pid` (as [`read_highest`](Self::read_highest)) and how
    /// far its events were deleted (as [`read_deleted_to`](Self::read_deleted_to)), in one
    /// statement: one round trip for what every replay reads first.
    ///
    /// # Errors
    /// As `read_highest` and `read_deleted_to`.
    pub(crate) async fn read_replay_bounds(&self, pid: &str) -> Result<ReplayBounds, JournalError> {
        if !D::stores_text(pid) {
            return Ok(ReplayBounds {
                highest_seq_nr: 0,
                deleted_to: Some(0),
            });
        }
        let failed = |e| JournalError::storage("read the replay's bounds", e);
        let mut conn = self.readers.acquire().await.map_err(failed)?;
        let row = sqlx::query_as::<D::Db, (Option<i64>, Option<i64>)>(concat!(
            "SELECT (",
            highest_seq_nr_sql!(),
            "), (SELECT deleted_to FROM journal_highest WHERE persistence_id = $1)"
        ))
        .bind(pid)
        .fetch_one(&mut *conn)
        .await;
        conn.return_to_pool().await;
        let (highest, deleted_to) = row.map_err(failed)?;
        Ok(ReplayBounds {
            highest_seq_nr: highest_from(pid, highest)?,
            deleted_to: Some(deleted_to.map_or(0, |d| u64::try_from(d).unwrap_or(0))),
        })
    }

    /// Reads the highest sequence number of `pid` on `readers` (0 for an id that never wrote):
    /// `journal_highest`'s, or the highest stored event's when that is above it.
    ///
    /// The journal keeps `journal_highest` in the transaction of every write, so the two agree
    /// unless the tables were changed by hand: the events table restored or imported without
    /// its row, or the row deleted or lowered. A replay (a recovery's, a query's) is capped at
    /// this number, so the row alone then hid every event above it: recovery completed on an
    /// empty or partial state and the actor answered commands from it
    /// (`tests/adversarial_recovery.rs`). The events' maximum is one probe of the primary key
    /// (`(persistence_id, seq_nr)`).
    ///
    /// # Errors
    /// [`JournalError::Storage`] when the read fails, or with [`SqlStoreError::CorruptRow`]
    /// when the number read is negative.
    async fn read_highest_on(readers: &Pool<D::Db>, pid: &str) -> Result<u64, JournalError> {
        if !D::stores_text(pid) {
            return Ok(0);
        }
        let highest = Self::read_column_on(readers, highest_seq_nr_sql!(), pid)
            .await
            .map_err(|e| JournalError::storage("read highest sequence number", e))?;
        highest_from(pid, highest)
    }

    /// The integer `sql` selects for `pid` (`$1`), if a row matched, read on a connection of
    /// `readers` that is back in the pool when this returns (see [`Self::next_page`]).
    async fn read_column_on(
        readers: &Pool<D::Db>,
        sql: &'static str,
        pid: &str,
    ) -> Result<Option<i64>, sqlx::Error> {
        let mut conn = readers.acquire().await?;
        // `Option`: an aggregate over no rows is one row holding NULL.
        let value = sqlx::query_scalar::<D::Db, Option<i64>>(sql)
            .bind(pid)
            .fetch_optional(&mut *conn)
            .await;
        conn.return_to_pool().await;
        value.map(Option::flatten)
    }
}

/// Reports one committed transaction's atomic writes
/// ([`GROUP_COMMIT_BATCH_SIZE`](actix_persistence_core::metrics::GROUP_COMMIT_BATCH_SIZE)).
fn record_batch_size<D: Dialect>(atomic_writes: usize) {
    metrics::histogram!(
        actix_persistence_core::metrics::GROUP_COMMIT_BATCH_SIZE,
        "store" => D::METRICS_LABEL
    )
    .record(atomic_writes as f64);
}

/// The values of [`page_query_sql`]'s placeholders for `request`, in order.
fn page_values<'q>(request: &EventsRequest<'q>) -> Vec<PageArg<&'q str>> {
    let mut values = match request.filter {
        EventFilter::Slices {
            entity_type,
            min_slice,
            max_slice,
        } => vec![
            PageArg::Text(entity_type.as_str()),
            PageArg::Int(i64::from(*min_slice)),
            PageArg::Int(i64::from(*max_slice)),
        ],
        EventFilter::Tag(tag) => vec![PageArg::Text(tag.as_str())],
    };
    values.extend([
        PageArg::Int(request.after.timestamp),
        PageArg::Text(&*request.after.persistence_id),
        PageArg::Int(clamp_seq_nr(request.after.seq_nr)),
        PageArg::Int(request.before_timestamp),
        PageArg::Int(i64::from(request.limit)),
    ]);
    values
}

/// `values` ([`page_values`]) as the database's arguments.
///
/// # Errors
/// [`JournalError::Storage`] when a value cannot be encoded.
fn page_arguments<'q, D: Dialect>(
    values: Vec<PageArg<&'q str>>,
) -> Result<<D::Db as Database>::Arguments<'q>, JournalError>
where
    &'q str: Encode<'q, D::Db> + Type<D::Db>,
    i64: Encode<'q, D::Db> + Type<D::Db>,
{
    let mut arguments = <D::Db as Database>::Arguments::default();
    for value in values {
        match value {
            PageArg::Int(value) => arguments.add(value),
            PageArg::Text(value) => arguments.add(value),
        }
        .map_err(|e| JournalError::storage("query", sqlx::Error::Encode(e)))?;
    }
    Ok(arguments)
}

/// Where a page of a query starts, which picks the form of its position's condition (see
/// [`page_query_sql`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PageStart {
    /// At the start of a timestamp ([`EventKey::start_of`]): every event at or after it.
    StartOfTimestamp,
    /// Right after an event: the events after it in query order.
    AfterEvent,
}

impl PageStart {
    /// The start of a page that reads the events after `after`.
    pub(crate) fn of(after: &EventKey) -> Self {
        if after.persistence_id.is_empty() && after.seq_nr == 0 {
            PageStart::StartOfTimestamp
        } else {
            PageStart::AfterEvent
        }
    }
}

/// The SQL of one page of a query by slices or by tag (`EventsRequest`): parameters are the
/// filter's (entity type, min slice, max slice; or the tag), then the position after which to
/// read (timestamp, persistence id, sequence number), the timestamp bound (exclusive) and the
/// limit. `with_previous_timestamp` adds each event's previous (selected) event of its id, for
/// the fast pass's order check.
pub(crate) fn page_query_sql<D: Dialect>(
    filter: &EventFilter,
    with_previous_timestamp: bool,
    start: PageStart,
) -> String {
    // By slices: the journal through `journal_by_entity_type` (migration 0009), filtered by
    // slice. By tag: the tag's rows of `event_tag` (migration 0007) in query order through
    // `event_tag_by_tag`, each joined to its event.
    let (from, condition, position, lead, filter_params) = match filter {
        EventFilter::Slices {
            entity_type,
            min_slice,
            max_slice,
        } => (
            if D::SLICES_INDEX_HINT.is_empty() {
                Cow::Borrowed("journal")
            } else {
                Cow::Owned(format!("journal{}", D::SLICES_INDEX_HINT))
            },
            if *min_slice == 0 && *max_slice >= NUMBER_OF_SLICES - 1 && !entity_type.is_empty() {
                // Every slice (one process projecting a whole entity type): a condition on the
                // parameters alone, which the database evaluates once per statement, not once
                // per row as it would the slice of each. Not for the entity type "": rows an
                // older release wrote before migration 0003 (slice -1, entity type "" until
                // `connect` fills them in) must stay out of its queries.
                const _: () = assert!(NUMBER_OF_SLICES == 1024, "the text's last slice");
                "$2 <= 0 AND $3 >= 1023 AND "
            } else {
                "journal.slice >= $2 AND journal.slice <= $3 AND "
            },
            "journal",
            "journal.entity_type",
            3,
        ),
        EventFilter::Tag(_) => (
            Cow::Borrowed(
                "event_tag JOIN journal ON journal.persistence_id = event_tag.persistence_id \
                     AND journal.seq_nr = event_tag.seq_nr",
            ),
            "",
            "event_tag",
            "event_tag.tag",
            1,
        ),
    };
    let p = filter_params;
    let previous = if with_previous_timestamp {
        // The previous event of the same id that the filter selects.
        let hint = D::TAG_BY_EVENT_HINT;
        let previous = |column: &str| match filter {
            EventFilter::Slices { .. } => format!(
                "(SELECT p.{column} FROM journal p \
                      WHERE p.persistence_id = journal.persistence_id \
                        AND p.seq_nr < journal.seq_nr \
                      ORDER BY p.seq_nr DESC LIMIT 1)"
            ),
            EventFilter::Tag(_) => format!(
                "(SELECT p.{column} FROM event_tag p{hint} \
                      WHERE p.persistence_id = journal.persistence_id \
                        AND p.seq_nr < journal.seq_nr AND p.tag = $1 \
                      ORDER BY p.seq_nr DESC LIMIT 1)"
            ),
        };
        format!(
            ", {} AS previous_timestamp, {} AS previous_seq_nr",
            previous("db_timestamp"),
            previous("seq_nr")
        )
    } else {
        // Nothing to send (or decode) for the settled pass.
        String::new()
    };
    let order = D::BYTE_ORDER;
    // The position after which the page starts, then the bound and the limit.
    let (ts, pid, seq, bound, limit) = (p + 1, p + 2, p + 3, p + 4, p + 5);
    let after = if D::POSITION_BY_TIMESTAMP_FIRST && start == PageStart::AfterEvent {
        // Right after an event (a continuation inside its timestamp, or the fast pass): one
        // row comparison, which SQLite seeks to in the index. The timestamp-first form below
        // made the scan start at the position's timestamp and walk every event of it up to the
        // position, rows it then dropped: a group commit's events share one timestamp, so a
        // page continued inside a commit of several pages walked its earlier pages again (a
        // catch-up with pages of 250 over commits of 1,000 events: about 1,000,000 instructions
        // per page, docs/benchmarks.md "Session 24"). SQLite checks the comparison on each row
        // it reads after the seek too (~250 instructions per event), which only such pages pay.
        format!(
            "({position}.db_timestamp, {position}.persistence_id{order}, {position}.seq_nr) \
                > (${ts}, ${pid}, ${seq})"
        )
    } else if D::POSITION_BY_TIMESTAMP_FIRST {
        // `$pid = '' AND $seq = 0`: the position is the start of its timestamp
        // (`EventKey::start_of`, every window of the settled pass but its first), after which
        // every row at or past the timestamp comes (sequence numbers start at 1). It is
        // evaluated once per statement, and spares each row the comparisons of its timestamp,
        // id and sequence number with the position (two columns read and four comparisons per
        // row, ~250 instructions per event of a catch-up).
        format!(
            "((${pid} = '' AND ${seq} = 0) OR {position}.db_timestamp > ${ts} \
                OR ({position}.db_timestamp = ${ts} \
                    AND ({position}.persistence_id{order}, {position}.seq_nr) > (${pid}, ${seq})))"
        )
    } else {
        format!(
            "({lead}, {position}.db_timestamp, {position}.persistence_id{order}, \
              {position}.seq_nr) > ($1, ${ts}, ${pid}, ${seq})"
        )
    };
    // On PostgreSQL, the lower end is a row comparison led by the index's first column (the
    // entity type, or the tag: `$1`), which only the filter's own index can start its scan at
    // (SQLite: `POSITION_BY_TIMESTAMP_FIRST`); `lead = $1` and
    // the timestamp range beside it make the upper end stop the scan. Alone, `lead = $1` with a
    // position on the timestamp let PostgreSQL (a generic plan, whose estimate of
    // `entity_type = $1` is "all rows" when the statistics saw one type) read
    // `journal_by_timestamp` through every other entity type's rows (227 ms for an empty page
    // over a million of them), or start `journal_by_entity_type` at the type's first row (31 ms
    // per page). An upper end given as a row comparison `(lead, timestamp) < ($1, bound)` did
    // not stop the scan: PostgreSQL 15 ends a btree scan only on a row comparison's first
    // column, so a page whose window held fewer events than a page read on through every later
    // event of the type (79 ms for an empty window in a million events, where the settled
    // pass reads windows of timestamps ahead). This form reads the page's rows only (0.1 ms
    // for an empty window, 0.5-1 ms per page of 1,000; `EXPLAIN ANALYZE`, docs/benchmarks.md).
    format!(
        "SELECT journal.seq_nr, journal.writer_uuid, journal.write_timestamp, \
                    journal.serializer_id, journal.manifest, journal.payload, journal.tags, \
                    journal.persistence_id, journal.db_timestamp{previous} \
             FROM {from} \
             WHERE {condition}{after} \
               AND {lead} = $1 \
               AND {position}.db_timestamp >= ${ts} AND {position}.db_timestamp < ${bound} \
             ORDER BY {lead}, {position}.db_timestamp, {position}.persistence_id{order}, \
                      {position}.seq_nr \
             LIMIT ${limit}"
    )
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;
    use crate::sqlite::SqliteDialect;

    fn row(seq_nr: i64, payload: Option<&'static [u8]>) -> PageRow<'static> {
        PageRow {
            seq_nr,
            writer_uuid: "w",
            write_timestamp: 5,
            serializer_id: 1,
            manifest: "",
            payload,
            tags: r#"["t"]"#,
            persistence_id: None,
            db_timestamp: None,
            previous_timestamp: None,
            previous_seq_nr: None,
        }
    }

    /// The recovery replay's query is the replay's, its `tags` column replaced by the
    /// dialect's empty list (one text kept in three places: this keeps them together).
    #[test]
    fn the_replay_without_tags_is_the_replay_with_an_empty_list_for_its_tags() {
        let normalize = |sql: &str| sql.split_whitespace().collect::<Vec<_>>().join(" ");
        let expected = |empty: &str| {
            normalize(&REPLAY_SQL.replace("payload, tags", &format!("payload, {empty} AS tags")))
        };
        assert_eq!(
            normalize(SqliteDialect::REPLAY_WITHOUT_TAGS_SQL),
            expected("'[]'")
        );
        #[cfg(feature = "postgres")]
        assert_eq!(
            normalize(crate::postgres::PostgresDialect::REPLAY_WITHOUT_TAGS_SQL),
            expected("'{}'::text[]")
        );
    }

    #[test]
    fn a_page_row_without_its_payload_is_a_corrupt_row_named_by_id_and_seq_nr() {
        let pid: Arc<str> = Arc::from("Acc|1");
        let mut runs = RunColumns::default();
        let event_from_row = JournalTables::<'static, SqliteDialect>::event_from_row;
        match event_from_row("replay", &pid, &mut runs, row(7, None)) {
            Err(PageRowError::Journal(error)) => {
                let message = error.to_string();
                assert!(
                    message.contains("Acc|1") && message.contains('7'),
                    "{message}"
                );
                assert!(message.contains("payload is NULL"), "{message}");
            }
            Err(PageRowError::NotAPage) => panic!("a NULL payload must name its row"),
            Ok(event) => panic!("a NULL payload became an event: {event:?}"),
        }
        let event = event_from_row("replay", &pid, &mut runs, row(8, Some(&[1, 2])))
            .map_err(|_| "a well-shaped row")
            .expect("an event");
        assert_eq!((event.seq_nr, event.payload), (8, vec![1, 2]));
        assert_eq!(event.tags, ["t"]);
    }

    /// A query over every slice tests no slice per row (a condition on its parameters only),
    /// except for the entity type "", whose rows may include an older release's not yet filled
    /// in (slice -1); a range of slices tests each row's.
    #[test]
    fn a_query_over_every_slice_tests_no_row_s_slice_but_for_the_entity_type_without_one() {
        let sql = |entity_type: &str, max_slice: u16| {
            let filter = EventFilter::Slices {
                entity_type: entity_type.to_owned(),
                min_slice: 0,
                max_slice,
            };
            page_query_sql::<SqliteDialect>(&filter, false, PageStart::StartOfTimestamp)
        };
        let per_row = "journal.slice >= $2 AND journal.slice <= $3";
        assert!(sql("Account", 1023).contains("$2 <= 0 AND $3 >= 1023 AND"));
        assert!(!sql("Account", 1023).contains(per_row));
        assert!(sql("", 1023).contains(per_row));
        assert!(sql("Account", 511).contains(per_row));
    }

    /// A page that starts at the start of a timestamp (every window of the settled pass but its
    /// first) compares no row with its position: a condition on the parameters alone (SQLite);
    /// PostgreSQL starts its index scan at the position's row comparison.
    #[test]
    fn a_page_from_the_start_of_a_timestamp_compares_no_row_with_its_position() {
        let filter = EventFilter::Slices {
            entity_type: "Account".to_owned(),
            min_slice: 0,
            max_slice: 1023,
        };
        let sqlite = page_query_sql::<SqliteDialect>(&filter, false, PageStart::StartOfTimestamp);
        assert!(
            sqlite.contains("(($5 = '' AND $6 = 0) OR journal.db_timestamp > $4"),
            "{sqlite}"
        );
        let tag = page_query_sql::<SqliteDialect>(
            &EventFilter::Tag("t".to_owned()),
            false,
            PageStart::StartOfTimestamp,
        );
        assert!(
            tag.contains("(($3 = '' AND $4 = 0) OR event_tag.db_timestamp > $2"),
            "{tag}"
        );
    }

    /// Tags are read from their text when the page's events are built: text that is not a JSON
    /// array of strings makes the page be read row by row (which names the row), not an event.
    #[test]
    fn a_page_row_whose_tags_are_not_a_json_array_is_not_read_from_the_page() {
        let pid: Arc<str> = Arc::from("Acc|1");
        let mut runs = RunColumns::default();
        let event_from_row = JournalTables::<'static, SqliteDialect>::event_from_row;
        for tags in ["oops", "[7]", r#"["a","#] {
            let row = PageRow {
                tags,
                ..row(3, Some(&[1]))
            };
            assert!(
                matches!(
                    event_from_row("query", &pid, &mut runs, row),
                    Err(PageRowError::NotAPage)
                ),
                "{tags}"
            );
        }
        let row = PageRow {
            tags: r#"["a","b c"]"#,
            manifest: "M",
            ..row(4, Some(&[9]))
        };
        let event = event_from_row("query", &pid, &mut runs, row)
            .map_err(|_| "a well-shaped row")
            .expect("an event");
        assert_eq!(event.tags, ["a", "b c"]);
        assert_eq!(event.manifest, "M");
    }
    /// Follows a replay of `pid` from `from` to `to` page by page, as its stream does (without
    /// the reads ahead): the page queries it ran, and the sequence numbers it read.
    async fn replay_pages(
        journal: &crate::SqliteJournal,
        pid: &str,
        from: i64,
        to: i64,
    ) -> (usize, Vec<u64>) {
        let tables = journal.tables();
        let cursor = ReplayCursor::<SqliteDialect> {
            readers: tables.readers.clone(),
            page_readers: tables.page_readers.clone(),
            persistence_id: Arc::from(pid),
            sql: REPLAY_SQL,
            runs: RunColumns::default(),
            next_from: from,
            to,
            remaining: u64::MAX,
            page_size: tables.page_size,
            window: i64::from(tables.page_size),
            to_within_highest: false,
        };
        let mut page = JournalTables::<'static, SqliteDialect>::read_page(cursor).await;
        let (mut pages, mut seq_nrs) = (1, Vec::new());
        loop {
            for event in page.events {
                seq_nrs.push(event.expect("an event").seq_nr);
            }
            let Some((_, next)) = page.next else {
                return (pages, seq_nrs);
            };
            pages += 1;
            page = next.await;
        }
    }

    /// A replay up to `MAX_SEQ_NR` (what a live query by persistence id asks on every round)
    /// ends at the id's highest sequence number: it doubled its empty windows up to `i64::MAX`
    /// past the last event instead, about 60 queries per call with pages of 10. Windows over a
    /// deleted range still widen and find the events after it.
    #[tokio::test]
    async fn a_replay_past_the_last_event_ends_at_the_highest_sequence_number() {
        use actix_persistence_core::{AtomicWrite, FencingToken, JournalStore};
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite:{}", dir.path().join("tail.db").display());
        let journal = crate::SqliteJournal::connect(&crate::SqliteJournalOptions {
            replay_batch_size: 10,
            ..crate::SqliteJournalOptions::new(url)
        })
        .await
        .expect("open");
        let pid = "Acc|tail";
        let events = (1..=25)
            .map(|seq_nr| crate::test_events::event(pid, seq_nr, &[]))
            .collect();
        let written = journal
            .write_messages(vec![AtomicWrite::new(events).expect("one id")])
            .await
            .expect("write");
        assert!(written.iter().all(Result::is_ok), "{written:?}");

        let (pages, read) = replay_pages(&journal, pid, 26, i64::MAX).await;
        assert!(read.is_empty(), "{read:?}");
        assert_eq!(pages, 1, "queries past the last event");
        let (pages, read) = replay_pages(&journal, pid, 1, i64::MAX).await;
        assert_eq!(read, (1..=25).collect::<Vec<_>>());
        assert_eq!(pages, 4, "three pages and the empty window after them");
        let (pages, read) = replay_pages(&journal, "Acc|never", 1, i64::MAX).await;
        assert_eq!((pages, read.len()), (1, 0));

        journal
            .delete_messages_to(pid, 22, FencingToken::UNOWNED)
            .await
            .expect("delete");
        let (pages, read) = replay_pages(&journal, pid, 1, i64::MAX).await;
        assert_eq!(read, [23, 24, 25]);
        assert_eq!(
            pages, 2,
            "an empty window, then a wider one up to the highest"
        );
    }
}

#[cfg(all(test, feature = "test-util"))]
mod postgres_plan_tests {
    use super::*;
    use crate::postgres::PostgresDialect;
    use crate::test_util::TestDatabase;
    use crate::{PostgresJournal, PostgresJournalOptions};
    use actix_persistence_core::query::EventKey;
    use actix_persistence_core::{AtomicWrite, JournalStore};
    use sqlx::{Connection, PgConnection};

    async fn write(journal: &PostgresJournal, ids: std::ops::Range<u64>, per_id: u64, tag: &str) {
        let writes = ids
            .map(|id| {
                let pid = format!("Tagged|{id}");
                let events = (1..=per_id)
                    .map(|seq_nr| crate::test_events::event(&pid, seq_nr, &[tag]))
                    .collect();
                AtomicWrite::new(events).expect("shape")
            })
            .collect();
        let results = journal.write_messages(writes).await.expect("write");
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    }

    /// The fast pass's look-up of an event's previous tagged event is one probe of
    /// `event_tag_by_tag_and_event` (migration 0011) even when the planner's statistics predate
    /// the tag (autovacuum off, the tag's rows a few percent of the table: no statistics
    /// refresh is due). Before it, PostgreSQL read the tag's range in `event_tag_by_tag` for
    /// every event of a page, which took seconds per page on a tag of tens of thousands of
    /// events (and `event_tag_by_event` with the tag as a filter read every earlier event of
    /// the id).
    #[tokio::test]
    async fn a_fresh_tag_s_previous_event_is_one_index_probe() {
        let Some(db) = TestDatabase::create().await else {
            return;
        };
        let journal = PostgresJournal::connect(&PostgresJournalOptions::new(db.url()))
            .await
            .expect("connect");
        let mut admin = PgConnection::connect(db.url()).await.expect("admin");
        sqlx::query("ALTER TABLE event_tag SET (autovacuum_enabled = false)")
            .execute(&mut admin)
            .await
            .expect("autovacuum off");
        write(&journal, 0..200, 100, "old").await;
        sqlx::query("ANALYZE event_tag")
            .execute(&mut admin)
            .await
            .expect("analyze");
        write(&journal, 200..210, 100, "fresh").await;

        let filter = EventFilter::Tag("fresh".to_owned());
        let sql = page_query_sql::<PostgresDialect>(&filter, true, PageStart::AfterEvent);
        let after = EventKey::start_of(0);
        let request = EventsRequest {
            filter: &filter,
            after: &after,
            before_timestamp: i64::MAX,
            limit: 1_001,
            with_previous_timestamp: true,
        };
        let arguments =
            page_arguments::<PostgresDialect>(page_values(&request)).expect("arguments");
        let plan: Vec<String> = sqlx::query_scalar_with(&format!("EXPLAIN {sql}"), arguments)
            .fetch_all(&mut admin)
            .await
            .expect("explain");
        let plan = plan.join("\n");
        // Both look-ups (timestamp and seq_nr: `p`, `p_1`).
        assert_eq!(
            plan.matches(
                "Index Only Scan Backward using event_tag_by_tag_and_event on event_tag p"
            )
            .count(),
            2,
            "{plan}"
        );
        drop(admin);
        journal.close().await;
    }
}
