//! The SQLite offset store.

use async_trait::async_trait;
use sqlx::sqlite::SqlitePool;
use sqlx::{Row, Sqlite, Transaction};

use super::{now_ms, sql_seq_nr, OffsetStore, SeenSeqNrs, TransactionalOffsetStore};
use crate::error::OffsetStoreError;
use crate::ProjectionId;

/// Offsets in the SQLite database of the journal (tables `projection_offset` and
/// `projection_seen`, migration 0005 of `actix-persistence-sql`).
///
/// Exactly-once handlers receive a `sqlx::Transaction<'static, Sqlite>` begun with
/// `BEGIN IMMEDIATE` (it holds SQLite's write lock from the start, so it never fails half-way
/// because another writer committed first). Give it the journal's writer pool
/// ([`SqliteJournal::writer_pool`](actix_persistence_sql::SqliteJournal::writer_pool)) to take
/// turns with the journal on its one connection, or a pool of its own
/// ([`connect`](Self::connect)), which then waits for the file lock up to its busy timeout.
#[derive(Debug, Clone)]
pub struct SqliteOffsetStore {
    pool: SqlitePool,
}

impl SqliteOffsetStore {
    /// A store over `pool`, whose database already has the schema (a journal connected to it).
    pub fn new(pool: SqlitePool) -> Self {
        SqliteOffsetStore { pool }
    }

    /// Opens a pool of its own on the database at `url` (e.g. `sqlite:actix-persistence.db`,
    /// created when missing, WAL mode, busy timeout 5 s) and brings the schema up to date.
    ///
    /// # Errors
    /// [`OffsetStoreError::Open`] when the database cannot be opened or migrated.
    pub async fn connect(url: &str) -> Result<Self, OffsetStoreError> {
        use std::str::FromStr;
        let open = |source| OffsetStoreError::Open {
            source: actix_persistence_sql::SqlStoreError::Connect {
                url: url.to_owned(),
                failure: actix_persistence_sql::ConnectFailure::of(&source),
                source,
            },
        };
        let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)
            .map_err(open)?
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .busy_timeout(std::time::Duration::from_secs(5));
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(2)
            .connect_with(options)
            .await
            .map_err(open)?;
        actix_persistence_sql::migrate_sqlite(&pool)
            .await
            .map_err(|source| OffsetStoreError::Open { source })?;
        Ok(Self::new(pool))
    }

    /// The pool, for the handler's own queries outside a transaction (e.g. reading the read
    /// model).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

fn db(id: &ProjectionId) -> impl FnOnce(sqlx::Error) -> OffsetStoreError + '_ {
    move |source| OffsetStoreError::Database {
        id: id.clone(),
        source,
    }
}

const UPSERT_OFFSET: &str = "INSERT INTO projection_offset \
     (projection_name, projection_key, current_offset, last_updated) VALUES (?, ?, ?, ?) \
     ON CONFLICT (projection_name, projection_key) DO UPDATE SET \
     current_offset = excluded.current_offset, last_updated = excluded.last_updated";

const UPSERT_SEEN: &str = "INSERT INTO projection_seen \
     (projection_name, projection_key, persistence_id, seq_nr) VALUES (?, ?, ?, ?) \
     ON CONFLICT (projection_name, projection_key, persistence_id) DO UPDATE SET \
     seq_nr = MAX(projection_seen.seq_nr, excluded.seq_nr)";

#[async_trait]
impl OffsetStore for SqliteOffsetStore {
    async fn read_offset(&self, id: &ProjectionId) -> Result<Option<String>, OffsetStoreError> {
        sqlx::query(
            "SELECT current_offset FROM projection_offset \
             WHERE projection_name = ? AND projection_key = ?",
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
             WHERE projection_name = ? AND projection_key = ?",
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

    async fn save_offset(&self, id: &ProjectionId, offset: &str) -> Result<(), OffsetStoreError> {
        sqlx::query(UPSERT_OFFSET)
            .bind(&id.name)
            .bind(&id.key)
            .bind(offset)
            .bind(now_ms())
            .execute(&self.pool)
            .await
            .map_err(db(id))?;
        Ok(())
    }

    async fn reset(&self, id: &ProjectionId) -> Result<(), OffsetStoreError> {
        let mut tx = self.pool.begin().await.map_err(db(id))?;
        for table in ["projection_offset", "projection_seen"] {
            sqlx::query(&format!(
                "DELETE FROM {table} WHERE projection_name = ? AND projection_key = ?"
            ))
            .bind(&id.name)
            .bind(&id.key)
            .execute(&mut *tx)
            .await
            .map_err(db(id))?;
        }
        tx.commit().await.map_err(db(id))
    }
}

#[async_trait]
impl TransactionalOffsetStore for SqliteOffsetStore {
    type Transaction = Transaction<'static, Sqlite>;

    async fn begin(&self, id: &ProjectionId) -> Result<Self::Transaction, OffsetStoreError> {
        self.pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db(id))
    }

    async fn save_in(
        &self,
        tx: &mut Self::Transaction,
        id: &ProjectionId,
        offset: Option<&str>,
        seen: &[(String, u64)],
    ) -> Result<(), OffsetStoreError> {
        if let Some(offset) = offset {
            sqlx::query(UPSERT_OFFSET)
                .bind(&id.name)
                .bind(&id.key)
                .bind(offset)
                .bind(now_ms())
                .execute(&mut **tx)
                .await
                .map_err(db(id))?;
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
}
