//! The PostgreSQL offset store.

use async_trait::async_trait;
use sqlx::postgres::PgPool;
use sqlx::{Postgres, Row, Transaction};

use super::{now_ms, sql_seq_nr, OffsetStore, SeenSeqNrs, TransactionalOffsetStore};
use crate::error::OffsetStoreError;
use crate::ProjectionId;

/// Offsets in the PostgreSQL database of the journal (tables `projection_offset` and
/// `projection_seen`, migration 0005 of `actix-persistence-sql`).
///
/// Exactly-once handlers receive a `sqlx::Transaction<'static, Postgres>` (read committed).
/// Give it the journal's pool ([`PostgresJournal::pool`](actix_persistence_sql::PostgresJournal::pool))
/// or a pool of its own ([`connect`](Self::connect)). Several processes may share the tables:
/// each projection instance (name and key) has rows of its own.
#[derive(Debug, Clone)]
pub struct PostgresOffsetStore {
    pool: PgPool,
}

impl PostgresOffsetStore {
    /// A store over `pool`, whose database already has the schema (a journal connected to it).
    pub fn new(pool: PgPool) -> Self {
        PostgresOffsetStore { pool }
    }

    /// Opens a pool of its own (at most `max_connections`) on the database at `url` and brings
    /// the schema up to date.
    ///
    /// # Errors
    /// [`OffsetStoreError::Open`] when the database cannot be reached or migrated.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, OffsetStoreError> {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(max_connections.max(1))
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

fn db(id: &ProjectionId) -> impl FnOnce(sqlx::Error) -> OffsetStoreError + '_ {
    move |source| OffsetStoreError::Database {
        id: id.clone(),
        source,
    }
}

const UPSERT_OFFSET: &str = "INSERT INTO projection_offset \
     (projection_name, projection_key, current_offset, last_updated) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (projection_name, projection_key) DO UPDATE SET \
     current_offset = excluded.current_offset, last_updated = excluded.last_updated";

const UPSERT_SEEN: &str = "INSERT INTO projection_seen \
     (projection_name, projection_key, persistence_id, seq_nr) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (projection_name, projection_key, persistence_id) DO UPDATE SET \
     seq_nr = GREATEST(projection_seen.seq_nr, excluded.seq_nr)";

#[async_trait]
impl OffsetStore for PostgresOffsetStore {
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
}

#[async_trait]
impl TransactionalOffsetStore for PostgresOffsetStore {
    type Transaction = Transaction<'static, Postgres>;

    async fn begin(&self, id: &ProjectionId) -> Result<Self::Transaction, OffsetStoreError> {
        self.pool.begin().await.map_err(db(id))
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
