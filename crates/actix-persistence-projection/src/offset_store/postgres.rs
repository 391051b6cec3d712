//! The PostgreSQL offset store.

use actix_persistence_sql::HomeRuntime;
use async_trait::async_trait;
use sqlx::postgres::PgPool;
use sqlx::{Postgres, Row, Transaction};

use super::{
    now_ms, progress_by_key, sql_seq_nr, OffsetStore, SeenSeqNrs, StoredProgress,
    TransactionalOffsetStore,
};
use crate::error::OffsetStoreError;
use crate::ProjectionId;

/// Offsets in the PostgreSQL database of the journal (tables `projection_offset` and
/// `projection_seen`, migration 0005 of `actix-persistence-sql`).
///
/// Exactly-once handlers receive a `sqlx::Transaction<'static, Postgres>` (read committed).
/// Give it the journal's pool ([`of_journal`](Self::of_journal) of
/// `persistence.postgres_journal()` in an app started with `Persistence`: its connections have
/// the journal's `schema` on their search path) or a pool of its own ([`connect`](Self::connect)).
/// Several processes may share the tables: each projection instance (name and key) has rows of
/// its own.
#[derive(Debug, Clone)]
pub struct PostgresOffsetStore {
    pool: PgPool,
    /// Where the store's work runs, so that the pool opens its connections there and gets
    /// them back there ([`HomeRuntime`]).
    home: HomeRuntime,
}

/// The store's statements, run on its home runtime.
#[derive(Debug, Clone)]
struct OffsetTables {
    pool: PgPool,
}

impl PostgresOffsetStore {
    /// A store over `pool`, whose database already has the schema (a journal connected to it).
    ///
    /// Its connections are acquired (and opened, when the pool opens one) on the Tokio runtime
    /// this is called on, whatever runtime the projection runs on ([`HomeRuntime`]): call it
    /// on the runtime the pool was made on (the Actix system's), or give the journal's with
    /// [`with_home_runtime`](Self::with_home_runtime).
    pub fn new(pool: PgPool) -> Self {
        PostgresOffsetStore {
            pool,
            home: HomeRuntime::current(),
        }
    }

    /// A store over the journal's pool, acquiring its connections on the journal's
    /// [`HomeRuntime`]: the way to keep a projection's offsets (and an exactly-once handler's
    /// read model) in the journal's database and schema.
    pub fn of_journal(journal: &actix_persistence_sql::PostgresJournal) -> Self {
        Self::new(journal.pool().clone()).with_home_runtime(journal.home_runtime().clone())
    }

    /// This store, acquiring its connections on `home`, e.g. the journal's
    /// ([`PostgresJournal::home_runtime`](actix_persistence_sql::PostgresJournal::home_runtime))
    /// for a store over the journal's pool.
    pub fn with_home_runtime(mut self, home: HomeRuntime) -> Self {
        self.home = home;
        self
    }

    /// Runs `work` over the store's statements to its end on the home runtime: a connection
    /// the pool opens for it belongs to that runtime's I/O driver, and goes back to the pool
    /// there, whatever happens to the caller (a projection's arbiter that stops mid-query
    /// dropped the connection where no runtime could take it back: sqlx panicked, and a second
    /// such drop aborted the process, `tests/adversarial_home_runtime.rs`).
    async fn at_home<T, W>(
        &self,
        id: &ProjectionId,
        work: impl FnOnce(OffsetTables) -> W,
    ) -> Result<T, OffsetStoreError>
    where
        W: std::future::Future<Output = Result<T, OffsetStoreError>> + Send + 'static,
        T: Send + 'static,
    {
        let tables = OffsetTables {
            pool: self.pool.clone(),
        };
        self.home
            .try_run(work(tables), |gone| db(id)(home_gone(gone)))
            .await
    }

    /// A transaction on a connection acquired on the home runtime (the transaction itself is
    /// the caller's: see [`begin`](TransactionalOffsetStore::begin)).
    async fn transaction(
        &self,
        id: &ProjectionId,
    ) -> Result<Transaction<'static, Postgres>, OffsetStoreError> {
        let pool = self.pool.clone();
        self.home
            .run(async move { pool.begin().await })
            .await
            .map_err(home_gone)
            .and_then(|begun| begun)
            .map_err(db(id))
    }

    /// Opens a pool of its own (at most `max_connections`) on the database at `url` and brings
    /// the schema up to date, in the connections' default search path (`public`, unless the
    /// URL sets one: `?options=-c%20search_path%3Dmy_schema`). For a journal in a schema of its
    /// own (`journal.postgres.schema`), use [`new`](Self::new) over the journal's pool instead.
    ///
    /// Every connection gets the journal's default `statement_timeout`
    /// ([`OFFSET_STATEMENT_TIMEOUT`], 10 s), so that a save or read waiting on a lock another
    /// session holds fails instead of waiting for ever (a projection's `stop` and `reset` wait
    /// for the save under way).
    ///
    /// # Errors
    /// [`OffsetStoreError::Open`] when the database cannot be reached or migrated, or
    /// `max_connections` is above [`actix_persistence_sql::MAX_POOL_CONNECTIONS`] (0 is taken
    /// as 1).
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, OffsetStoreError> {
        if max_connections > actix_persistence_sql::MAX_POOL_CONNECTIONS {
            return Err(OffsetStoreError::Open {
                source: actix_persistence_sql::SqlStoreError::InvalidOption {
                    option: "max_connections",
                    value: max_connections.to_string(),
                    reason: "a pool holds at most MAX_POOL_CONNECTIONS (10000) connections: \
                             sqlx takes room for each when it builds the pool",
                },
            });
        }
        let session = format!(
            "SET statement_timeout = {}",
            OFFSET_STATEMENT_TIMEOUT.as_millis()
        );
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .after_connect(move |conn, _| {
                let session = session.clone();
                Box::pin(async move {
                    sqlx::Executor::execute(conn, sqlx::raw_sql(&session)).await?;
                    Ok(())
                })
            })
            .connect(url)
            .await
            .map_err(|source| OffsetStoreError::Open {
                source: actix_persistence_sql::SqlStoreError::Connect {
                    url: "(the offset store's PostgreSQL URL)".to_owned(),
                    failure: actix_persistence_sql::ConnectFailure::of(&source),
                    source,
                },
            })?;
        actix_persistence_sql::migrate_postgres(&pool)
            .await
            .map_err(|source| OffsetStoreError::Open { source })?;
        Ok(Self::new(pool))
    }

    /// The pool, for the handler's own queries outside a transaction.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// The `statement_timeout` of the connections [`PostgresOffsetStore::connect`] opens: 10 s,
/// the journal's default (`journal.postgres.statement-timeout`).
pub const OFFSET_STATEMENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The home runtime could not run the acquire: the connection could not be had.
fn home_gone(gone: actix_persistence_sql::HomeRuntimeGone) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::other(gone))
}

fn db(id: &ProjectionId) -> impl FnOnce(sqlx::Error) -> OffsetStoreError + '_ {
    move |source| OffsetStoreError::Database {
        id: id.clone(),
        source,
    }
}

/// Saves the offset only while the given epoch owns the id (no row changed: fenced).
/// `FOR SHARE` holds the owner row until the transaction ends: a take of ownership waits for it,
/// and one that committed first makes the check fail (read committed re-reads the locked row).
const UPSERT_OFFSET: &str = "INSERT INTO projection_offset \
     (projection_name, projection_key, current_offset, last_updated) \
     SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM projection_owner \
     WHERE projection_name = $1 AND projection_key = $2 AND owner_epoch = $5 FOR SHARE) \
     ON CONFLICT (projection_name, projection_key) DO UPDATE SET \
     current_offset = excluded.current_offset, last_updated = excluded.last_updated";

/// [`OffsetStore::hand_over`]'s seen numbers: `from`'s ($1 name, $2 key) merged into
/// key $3's, each kept at the higher of the two, when `from` has an offset and $3's offset
/// is still $4 (NULL: it has none). Run before [`HAND_OVER_OFFSET`], which changes it.
const HAND_OVER_SEEN: &str = "INSERT INTO projection_seen \
     (projection_name, projection_key, persistence_id, seq_nr) \
     SELECT projection_name, $3, persistence_id, seq_nr FROM projection_seen \
     WHERE projection_name = $1 AND projection_key = $2 \
     AND EXISTS (SELECT 1 FROM projection_offset \
                 WHERE projection_name = $1 AND projection_key = $2) \
     AND (($4::text IS NULL AND NOT EXISTS (SELECT 1 FROM projection_offset \
                     WHERE projection_name = $1 AND projection_key = $3)) \
          OR EXISTS (SELECT 1 FROM projection_offset \
                     WHERE projection_name = $1 AND projection_key = $3 \
                     AND current_offset = $4)) \
     ON CONFLICT (projection_name, projection_key, persistence_id) DO UPDATE SET \
     seq_nr = GREATEST(projection_seen.seq_nr, excluded.seq_nr)";

/// [`OffsetStore::hand_over`]'s offset: `from`'s copied to key $3 when it has none and
/// $4 is NULL.
const HAND_OVER_OFFSET: &str = "INSERT INTO projection_offset \
     (projection_name, projection_key, current_offset, last_updated) \
     SELECT projection_name, $3, current_offset, last_updated FROM projection_offset \
     WHERE projection_name = $1 AND projection_key = $2 AND $4::text IS NULL \
     ON CONFLICT (projection_name, projection_key) DO NOTHING";

/// [`OffsetStore::hand_over`]'s offset over one of key $3's own: `from`'s replaces it
/// while it is still $4.
const HAND_OVER_OVER_OFFSET: &str = "UPDATE projection_offset SET \
     current_offset = f.current_offset, last_updated = f.last_updated \
     FROM (SELECT current_offset, last_updated FROM projection_offset \
           WHERE projection_name = $1 AND projection_key = $2) AS f \
     WHERE projection_offset.projection_name = $1 \
       AND projection_offset.projection_key = $3 \
       AND projection_offset.current_offset = $4";

/// The owner epoch of an id, locked until the transaction ends (see [`UPSERT_OFFSET`]).
const OWNER_EPOCH: &str = "SELECT owner_epoch FROM projection_owner \
     WHERE projection_name = $1 AND projection_key = $2 FOR SHARE";

/// Takes ownership whoever held it: raises the epoch (1 for a new id).
const TAKE_OWNERSHIP: &str = "INSERT INTO projection_owner \
     (projection_name, projection_key, owner_epoch) VALUES ($1, $2, 1) \
     ON CONFLICT (projection_name, projection_key) DO UPDATE SET \
     owner_epoch = projection_owner.owner_epoch + 1 RETURNING owner_epoch";

/// Takes ownership again only if the given epoch still holds it (no row back: fenced).
const RETAKE_OWNERSHIP: &str = "UPDATE projection_owner SET owner_epoch = owner_epoch + 1 \
     WHERE projection_name = $1 AND projection_key = $2 AND owner_epoch = $3 \
     RETURNING owner_epoch";

fn fenced(id: &ProjectionId, epoch: u64) -> OffsetStoreError {
    OffsetStoreError::Fenced {
        id: id.clone(),
        epoch,
    }
}

/// An epoch as SQL's BIGINT (epochs start at 1 and grow by 1: never near the limit).
fn sql_epoch(epoch: u64) -> i64 {
    i64::try_from(epoch).unwrap_or(i64::MAX)
}

const UPSERT_SEEN: &str = "INSERT INTO projection_seen \
     (projection_name, projection_key, persistence_id, seq_nr) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (projection_name, projection_key, persistence_id) DO UPDATE SET \
     seq_nr = GREATEST(projection_seen.seq_nr, excluded.seq_nr)";

/// Forgets the seen rows the saved offset covers: each persistence id's row whose seq_nr is at
/// most the covered one (re-checked on the newest row version after a concurrent commit, read
/// committed: a row a handler's transaction raised past it stays). Rows locked by a handler's
/// transaction in flight are skipped, not waited for: such a transaction is about to raise the
/// row past the offset (a later save forgets it), and a save that never waits for a handler's
/// row lock cannot deadlock with one (the handler's transaction waits for the save instead).
const FORGET_SEEN: &str = "DELETE FROM projection_seen \
     WHERE projection_name = $1 AND projection_key = $2 AND persistence_id IN (\
     SELECT s.persistence_id FROM projection_seen s \
     JOIN UNNEST($3::text[], $4::bigint[]) AS c(persistence_id, seq_nr) \
     ON s.persistence_id = c.persistence_id \
     WHERE s.projection_name = $1 AND s.projection_key = $2 AND s.seq_nr <= c.seq_nr \
     FOR UPDATE OF s SKIP LOCKED)";

#[async_trait]
impl OffsetStore for PostgresOffsetStore {
    async fn read_offset(&self, id: &ProjectionId) -> Result<Option<String>, OffsetStoreError> {
        let id = id.clone();
        self.at_home(&id.clone(), |tables| async move {
            tables.read_offset(&id).await
        })
        .await
    }

    async fn read_seen(&self, id: &ProjectionId) -> Result<SeenSeqNrs, OffsetStoreError> {
        let id = id.clone();
        self.at_home(
            &id.clone(),
            |tables| async move { tables.read_seen(&id).await },
        )
        .await
    }

    async fn read_progress(&self, name: &str) -> Result<Vec<StoredProgress>, OffsetStoreError> {
        let name = name.to_owned();
        self.at_home(&ProjectionId::new(&name, "*"), |tables| async move {
            tables.read_progress(&name).await
        })
        .await
    }

    async fn read_owners(&self, name: &str) -> Result<Vec<ProjectionId>, OffsetStoreError> {
        let name = name.to_owned();
        self.at_home(&ProjectionId::new(&name, "*"), |tables| async move {
            tables.read_owners(&name).await
        })
        .await
    }

    async fn take_ownership(
        &self,
        id: &ProjectionId,
        held: Option<u64>,
    ) -> Result<u64, OffsetStoreError> {
        let id = id.clone();
        self.at_home(&id.clone(), |tables| async move {
            tables.take_ownership(&id, held).await
        })
        .await
    }

    async fn save_offset(
        &self,
        id: &ProjectionId,
        epoch: u64,
        offset: &str,
        covered: &[(String, u64)],
    ) -> Result<(), OffsetStoreError> {
        let (id, offset, covered) = (id.clone(), offset.to_owned(), covered.to_vec());
        self.at_home(&id.clone(), |tables| async move {
            tables.save_offset(&id, epoch, &offset, &covered).await
        })
        .await
    }

    async fn reset(&self, id: &ProjectionId) -> Result<(), OffsetStoreError> {
        let id = id.clone();
        self.at_home(&id.clone(), |tables| async move { tables.reset(&id).await })
            .await
    }

    async fn hand_over(
        &self,
        from: &ProjectionId,
        to: &ProjectionId,
        to_offset: Option<&str>,
    ) -> Result<(), OffsetStoreError> {
        let (from, to, to_offset) = (from.clone(), to.clone(), to_offset.map(str::to_owned));
        self.at_home(&to.clone(), |tables| async move {
            tables.hand_over(&from, &to, to_offset.as_deref()).await
        })
        .await
    }
}

#[async_trait]
impl OffsetStore for OffsetTables {
    async fn read_offset(&self, id: &ProjectionId) -> Result<Option<String>, OffsetStoreError> {
        sqlx::query(
            "SELECT current_offset FROM projection_offset \
             WHERE projection_name = $1 AND projection_key = $2",
        )
        .bind(&id.name)
        .bind(&id.key)
        .fetch_optional(&self.pool)
        .await
        .map_err(db(id))?
        .map(|row| row.try_get::<String, _>(0))
        .transpose()
        .map_err(db(id))
    }

    async fn read_seen(&self, id: &ProjectionId) -> Result<SeenSeqNrs, OffsetStoreError> {
        let rows = sqlx::query(
            "SELECT persistence_id, seq_nr FROM projection_seen \
             WHERE projection_name = $1 AND projection_key = $2",
        )
        .bind(&id.name)
        .bind(&id.key)
        .fetch_all(&self.pool)
        .await
        .map_err(db(id))?;
        rows.into_iter()
            .map(|row| {
                let pid: String = row.try_get(0)?;
                let seq_nr: i64 = row.try_get(1)?;
                Ok((pid, u64::try_from(seq_nr).unwrap_or(0)))
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(db(id))
    }

    async fn read_progress(&self, name: &str) -> Result<Vec<StoredProgress>, OffsetStoreError> {
        // The errors name the projection by its name alone (no key).
        let all = ProjectionId::new(name, "*");
        let offsets: Vec<(String, String)> = sqlx::query_as(
            "SELECT projection_key, current_offset FROM projection_offset \
             WHERE projection_name = $1",
        )
        .bind(name)
        .fetch_all(&self.pool)
        .await
        .map_err(db(&all))?;
        let seen: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT projection_key, persistence_id, seq_nr FROM projection_seen \
             WHERE projection_name = $1",
        )
        .bind(name)
        .fetch_all(&self.pool)
        .await
        .map_err(db(&all))?;
        Ok(progress_by_key(name, offsets, seen))
    }

    async fn read_owners(&self, name: &str) -> Result<Vec<ProjectionId>, OffsetStoreError> {
        let all = ProjectionId::new(name, "*");
        let keys: Vec<String> = sqlx::query_scalar(
            "SELECT projection_key FROM projection_owner WHERE projection_name = $1",
        )
        .bind(name)
        .fetch_all(&self.pool)
        .await
        .map_err(db(&all))?;
        Ok(keys
            .into_iter()
            .map(|key| ProjectionId::new(name, key))
            .collect())
    }

    async fn take_ownership(
        &self,
        id: &ProjectionId,
        held: Option<u64>,
    ) -> Result<u64, OffsetStoreError> {
        let query = match held {
            None => sqlx::query_scalar::<_, i64>(TAKE_OWNERSHIP)
                .bind(&id.name)
                .bind(&id.key),
            Some(epoch) => sqlx::query_scalar::<_, i64>(RETAKE_OWNERSHIP)
                .bind(&id.name)
                .bind(&id.key)
                .bind(sql_epoch(epoch)),
        };
        match query.fetch_optional(&self.pool).await.map_err(db(id))? {
            Some(epoch) => Ok(u64::try_from(epoch).unwrap_or(0)),
            None => Err(fenced(id, held.unwrap_or(0))),
        }
    }

    async fn save_offset(
        &self,
        id: &ProjectionId,
        epoch: u64,
        offset: &str,
        covered: &[(String, u64)],
    ) -> Result<(), OffsetStoreError> {
        let upsert = sqlx::query(UPSERT_OFFSET)
            .bind(&id.name)
            .bind(&id.key)
            .bind(offset)
            .bind(now_ms())
            .bind(sql_epoch(epoch));
        if covered.is_empty() {
            let saved = upsert.execute(&self.pool).await.map_err(db(id))?;
            if saved.rows_affected() == 0 {
                return Err(fenced(id, epoch));
            }
            return Ok(());
        }
        let mut pids = Vec::with_capacity(covered.len());
        let mut seq_nrs = Vec::with_capacity(covered.len());
        for (pid, seq_nr) in covered {
            seq_nrs.push(sql_seq_nr(pid, *seq_nr)?);
            pids.push(pid.as_str());
        }
        // The offset and the deletes in one transaction: both or neither are stored.
        let mut tx = self.pool.begin().await.map_err(db(id))?;
        let saved = upsert.execute(&mut *tx).await.map_err(db(id))?;
        if saved.rows_affected() == 0 {
            tx.rollback().await.map_err(db(id))?;
            return Err(fenced(id, epoch));
        }
        sqlx::query(FORGET_SEEN)
            .bind(&id.name)
            .bind(&id.key)
            .bind(&pids)
            .bind(&seq_nrs)
            .execute(&mut *tx)
            .await
            .map_err(db(id))?;
        tx.commit().await.map_err(db(id))
    }

    async fn reset(&self, id: &ProjectionId) -> Result<(), OffsetStoreError> {
        let mut tx = self.pool.begin().await.map_err(db(id))?;
        for table in ["projection_offset", "projection_seen"] {
            sqlx::query(&format!(
                "DELETE FROM {table} WHERE projection_name = $1 AND projection_key = $2"
            ))
            .bind(&id.name)
            .bind(&id.key)
            .execute(&mut *tx)
            .await
            .map_err(db(id))?;
        }
        tx.commit().await.map_err(db(id))
    }

    async fn hand_over(
        &self,
        from: &ProjectionId,
        to: &ProjectionId,
        to_offset: Option<&str>,
    ) -> Result<(), OffsetStoreError> {
        let mut tx = self.pool.begin().await.map_err(db(to))?;
        // The seen numbers first, while `to`'s offset is still `to_offset` and `from` has one;
        // then the offset.
        for statement in [HAND_OVER_SEEN, HAND_OVER_OFFSET, HAND_OVER_OVER_OFFSET] {
            sqlx::query(statement)
                .bind(&from.name)
                .bind(&from.key)
                .bind(&to.key)
                .bind(to_offset)
                .execute(&mut *tx)
                .await
                .map_err(db(to))?;
        }
        tx.commit().await.map_err(db(to))
    }
}

#[async_trait]
impl TransactionalOffsetStore for PostgresOffsetStore {
    type Transaction = Transaction<'static, Postgres>;

    /// Begins the transaction on a connection acquired on the store's home runtime. The
    /// transaction is then the caller's: hold it in a Tokio task (`tokio::spawn`, as the
    /// projections do), not in a task local to an Actix arbiter (`actix::spawn`, an actor's
    /// future), since an arbiter that stops drops its local tasks outside any runtime, where
    /// sqlx cannot take the connection back (it panics, and two such drops abort the process).
    async fn begin(&self, id: &ProjectionId) -> Result<Self::Transaction, OffsetStoreError> {
        self.transaction(id).await
    }

    async fn save_in(
        &self,
        tx: &mut Self::Transaction,
        id: &ProjectionId,
        epoch: u64,
        offset: Option<&str>,
        seen: &[(String, u64)],
    ) -> Result<(), OffsetStoreError> {
        if let Some(offset) = offset {
            // The fencing check and the save in one statement.
            let saved = sqlx::query(UPSERT_OFFSET)
                .bind(&id.name)
                .bind(&id.key)
                .bind(offset)
                .bind(now_ms())
                .bind(sql_epoch(epoch))
                .execute(&mut **tx)
                .await
                .map_err(db(id))?;
            if saved.rows_affected() == 0 {
                return Err(fenced(id, epoch));
            }
        } else {
            let owner: Option<i64> = sqlx::query_scalar(OWNER_EPOCH)
                .bind(&id.name)
                .bind(&id.key)
                .fetch_optional(&mut **tx)
                .await
                .map_err(db(id))?;
            if owner != Some(sql_epoch(epoch)) {
                return Err(fenced(id, epoch));
            }
        }
        for (pid, seq_nr) in seen {
            sqlx::query(UPSERT_SEEN)
                .bind(&id.name)
                .bind(&id.key)
                .bind(pid)
                .bind(sql_seq_nr(pid, *seq_nr)?)
                .execute(&mut **tx)
                .await
                .map_err(db(id))?;
        }
        Ok(())
    }

    async fn commit(
        &self,
        tx: Self::Transaction,
        id: &ProjectionId,
    ) -> Result<(), OffsetStoreError> {
        tx.commit().await.map_err(db(id))
    }

    async fn rollback(
        &self,
        tx: Self::Transaction,
        id: &ProjectionId,
    ) -> Result<(), OffsetStoreError> {
        tx.rollback().await.map_err(db(id))
    }
}
