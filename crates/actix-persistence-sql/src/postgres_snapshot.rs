//! The PostgreSQL snapshot store: [`PostgresSnapshotStore`].

use actix_persistence_core::{
    SelectedSnapshot, SerializedSnapshot, SnapshotError, SnapshotMetadata,
    SnapshotSelectionCriteria, SnapshotStore,
};
use async_trait::async_trait;
use sqlx::postgres::PgPool;

use crate::error::SqlStoreError;
use crate::home_runtime::HomeRuntime;
use crate::postgres::{open_pool, PostgresDialect, PostgresJournalOptions};
use crate::snapshot_sql::SnapshotTable;

/// A [`SnapshotStore`] in a PostgreSQL database: the `snapshot` table, next to the journal's.
///
/// Made by [`PostgresSnapshotStore::connect`], or by
/// [`PostgresJournal::snapshot_store`](crate::PostgresJournal::snapshot_store) to share a
/// journal's pool. Cheap to clone: clones share the pool.
///
/// # Guarantees
/// - **Durability**: a snapshot is durable once [`save`](SnapshotStore::save) returned `Ok`
///   (one upsert, its own transaction).
/// - **One per sequence number**: saving again at the same persistence id and sequence number
///   replaces the snapshot (payload, timestamp, serializer and manifest).
/// - **Load** returns the matching snapshot with the highest sequence number.
/// - Payloads up to PostgreSQL's `BYTEA` limit (1 GB) round-trip byte for byte; mind
///   `statement_timeout` for very large ones.
///
/// Sequence numbers are stored as `BIGINT`s and PostgreSQL text cannot hold NUL: saving above
/// `i64::MAX`, or with a NUL in the persistence id or the manifest, fails with
/// [`SqlStoreError::Unstorable`] (inside [`SnapshotError::Storage`]) and stores nothing;
/// criteria bounds above `i64::MAX` mean "no bound".
#[derive(Debug, Clone)]
pub struct PostgresSnapshotStore {
    pool: PgPool,
    /// Where loads, saves and deletes run, so that the pool opens its connections there.
    home: HomeRuntime,
}

impl PostgresSnapshotStore {
    /// Connects as [`PostgresJournal::connect`] does, with the same options (only `url`,
    /// `max_connections`, `acquire_timeout` and `statement_timeout` matter here) and the same
    /// migrations, so journal and snapshots can live in one database.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> Result<(), actix_persistence_sql::SqlStoreError> {
    /// # use actix_persistence_sql as actix_persistence; // the paths of the facade, `actix-persistence`
    /// use actix_persistence::{PostgresJournalOptions, PostgresSnapshotStore};
    ///
    /// let options = PostgresJournalOptions::new("postgres://app@db.internal/events");
    /// let snapshots = PostgresSnapshotStore::connect(&options).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`PostgresJournal::connect`]: [`SqlStoreError::InvalidOption`],
    /// [`SqlStoreError::Connect`], [`SqlStoreError::Migrate`] or [`SqlStoreError::ForeignTable`].
    ///
    /// [`PostgresJournal::connect`]: crate::PostgresJournal::connect
    pub async fn connect(options: &PostgresJournalOptions) -> Result<Self, SqlStoreError> {
        Ok(Self::from_pool(
            open_pool(options).await?,
            HomeRuntime::current(),
        ))
    }

    pub(crate) fn from_pool(pool: PgPool, home: HomeRuntime) -> Self {
        PostgresSnapshotStore { pool, home }
    }

    /// Runs `work` over a clone of this store on its [`HomeRuntime`].
    async fn at_home<T, W>(
        &self,
        operation: &'static str,
        work: impl FnOnce(PostgresSnapshotStore) -> W,
    ) -> Result<T, SnapshotError>
    where
        W: std::future::Future<Output = Result<T, SnapshotError>> + Send + 'static,
        T: Send + 'static,
    {
        self.home
            .try_run(work(self.clone()), |gone| {
                SnapshotError::storage(operation, gone)
            })
            .await
    }

    /// Closes the pool, waiting for the connections in use to be returned. A pool shared with
    /// a journal is closed for the journal too.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The snapshot table, through the pool.
    fn table(&self) -> SnapshotTable<'_, PostgresDialect> {
        SnapshotTable {
            readers: &self.pool,
            writer: &self.pool,
        }
    }
}

#[async_trait]
impl SnapshotStore for PostgresSnapshotStore {
    /// One query, newest matching sequence number first.
    async fn load(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        let pid = pid.to_owned();
        self.at_home("load", |store| async move {
            store.table().load(&pid, criteria).await
        })
        .await
    }

    /// One upsert.
    ///
    /// # Errors
    /// [`SnapshotError::Storage`] when the database fails, or with [`SqlStoreError::Unstorable`]
    /// for a sequence number above `i64::MAX` or a NUL in the persistence id or the manifest.
    async fn save(
        &self,
        metadata: SnapshotMetadata,
        snapshot: SerializedSnapshot,
    ) -> Result<(), SnapshotError> {
        self.at_home("save", |store| async move {
            store.table().save(metadata, snapshot).await
        })
        .await
    }

    async fn delete(&self, metadata: &SnapshotMetadata) -> Result<(), SnapshotError> {
        let metadata = metadata.clone();
        self.at_home("delete", |store| async move {
            store.table().delete(&metadata).await
        })
        .await
    }

    async fn delete_matching(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError> {
        let pid = pid.to_owned();
        self.at_home("delete", |store| async move {
            store.table().delete_matching(&pid, criteria).await
        })
        .await
    }

    /// One query that reads no payload.
    async fn read_metadata(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
        limit: u32,
    ) -> Result<Vec<SnapshotMetadata>, SnapshotError> {
        let pid = pid.to_owned();
        self.at_home("read metadata", |store| async move {
            store.table().read_metadata(&pid, criteria, limit).await
        })
        .await
    }
}
