//! The journal's own schema migrations, with bookkeeping of their own.
//!
//! sqlx's migrator records applied migrations in `_sqlx_migrations`, the table an application's
//! own `sqlx::migrate!()` uses as well: each then finds versions it does not know and refuses
//! to run ("migration 1 was previously applied but is missing"). So the journal records its
//! migrations in [`MIGRATIONS_TABLE`] instead and never reads or writes `_sqlx_migrations`,
//! except once to adopt its own rows from a database created by an earlier version of this
//! crate (rows whose version and checksum match one of its migrations are moved over).
//!
//! Each migration runs in a transaction together with its bookkeeping row, so a migration is
//! applied completely or not at all; one whose checksum differs from the applied one fails
//! with [`MigrateError::VersionMismatch`], and an applied version this build does not know
//! (a database migrated by a newer version) with [`MigrateError::VersionMissing`].
//!
//! The migrations create their tables `IF NOT EXISTS`, so a table of the application's with
//! one of their names (`snapshot`, `event_tag`, `journal`, as Akka's JDBC plugin names some of
//! its own) would be taken for the journal's and altered. Before the first migration, a
//! database holding any such table is refused with [`SqlStoreError::ForeignTable`] instead.

use sqlx::migrate::{MigrateError, Migration, Migrator};

use crate::SqlStoreError;

/// The table the journal records its applied migrations in.
pub const MIGRATIONS_TABLE: &str = "actix_persistence_migrations";

/// Runs `migrate` (one pass of the migrations) again while it fails, at most
/// `migrations + 3` times in all: processes starting together on a new database apply the
/// same migration at once, and the losers fail when the winner commits (a duplicate record or
/// column, a lock or a snapshot that changed under them). Each such failure means another
/// process made progress (it created the bookkeeping table or applied a migration), so a bounded
/// number of passes always ends with every migration applied, or with a real error. A table
/// that is not the journal's ([`SqlStoreError::ForeignTable`]) stays so: no retry.
pub(crate) async fn with_retries<F, Fut>(
    migrator: &Migrator,
    mut migrate: F,
) -> Result<(), SqlStoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), SqlStoreError>>,
{
    let attempts = migrator.iter().count() + 3;
    let mut attempt = 1;
    loop {
        match migrate().await {
            Ok(()) => return Ok(()),
            Err(error @ SqlStoreError::ForeignTable { .. }) => return Err(error),
            Err(error) if attempt < attempts => {
                tracing::debug!(%error, attempt, "journal migration failed; running it again");
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Every table the migrations create: a database where none was applied yet must hold none of
/// them.
const OWN_TABLES: &[&str] = &[
    "journal",
    "journal_highest",
    "journal_clock",
    "snapshot",
    "event_tag",
    "projection_offset",
    "projection_seen",
    "projection_owner",
];

/// [`OWN_TABLES`] as an SQL list of string literals (constants, nothing bound).
fn own_tables_sql() -> String {
    OWN_TABLES
        .iter()
        .map(|t| format!("'{t}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why the migrations did not run: a table that is not the journal's, or the migrator's error.
enum Refusal {
    Foreign(String),
    Migrate(MigrateError),
}

impl From<MigrateError> for Refusal {
    fn from(error: MigrateError) -> Self {
        Refusal::Migrate(error)
    }
}

impl From<sqlx::Error> for Refusal {
    fn from(error: sqlx::Error) -> Self {
        Refusal::Migrate(error.into())
    }
}

impl From<Refusal> for SqlStoreError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Foreign(table) => SqlStoreError::ForeignTable { table },
            Refusal::Migrate(source) => SqlStoreError::Migrate { source },
        }
    }
}

/// The migrations to run, up migrations only, ascending.
fn up_migrations(migrator: &Migrator) -> Vec<&Migration> {
    let mut migrations: Vec<_> = migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .collect();
    migrations.sort_by_key(|m| m.version);
    migrations
}

/// Checks the applied migrations against the known ones.
fn check_applied(
    migrations: &[&Migration],
    applied: &[(i64, Vec<u8>)],
) -> Result<(), MigrateError> {
    for (version, checksum) in applied {
        match migrations.iter().find(|m| m.version == *version) {
            None => return Err(MigrateError::VersionMissing(*version)),
            Some(m) if m.checksum.as_ref() != checksum.as_slice() => {
                return Err(MigrateError::VersionMismatch(*version))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn millis_since(start: std::time::Instant) -> i64 {
    i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX)
}

/// Generates `run` for one database: the same steps, its own SQL types.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
macro_rules! runner {
    ($name:ident, $pool:ty, $blob:literal, $legacy_exists:literal, $tables_in_schema:literal) => {
        /// Brings the schema up to date with `migrator`'s migrations, recorded in
        /// [`MIGRATIONS_TABLE`].
        ///
        /// # Errors
        /// [`SqlStoreError::ForeignTable`] when no migration was applied yet and a table of
        /// one of the journal's names exists; [`SqlStoreError::Migrate`] otherwise.
        pub(crate) async fn $name(pool: &$pool, migrator: &Migrator) -> Result<(), SqlStoreError> {
            Ok(run_migrations(pool, migrator).await?)
        }

        async fn run_migrations(pool: &$pool, migrator: &Migrator) -> Result<(), Refusal> {
            let create = format!(
                "CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (\
                 version BIGINT PRIMARY KEY, \
                 description TEXT NOT NULL, \
                 checksum {} NOT NULL, \
                 execution_ms BIGINT NOT NULL)",
                $blob
            );
            sqlx::query(&create).execute(pool).await?;
            let migrations = up_migrations(migrator);
            let select = format!("SELECT version, checksum FROM {MIGRATIONS_TABLE}");
            let mut applied: Vec<(i64, Vec<u8>)> =
                sqlx::query_as(&select).fetch_all(pool).await?;
            if applied.is_empty() {
                adopt_legacy(pool, &migrations).await?;
                applied = sqlx::query_as(&select).fetch_all(pool).await?;
            }
            if applied.is_empty() {
                let find = format!($tables_in_schema, own_tables_sql());
                let foreign: Option<String> =
                    sqlx::query_scalar(&find).fetch_optional(pool).await?;
                if let Some(table) = foreign {
                    // Another process may have applied the first migration (its tables and
                    // its record, in one transaction) since `applied` was read.
                    applied = sqlx::query_as(&select).fetch_all(pool).await?;
                    if applied.is_empty() {
                        return Err(Refusal::Foreign(table));
                    }
                }
            }
            check_applied(&migrations, &applied)?;
            let insert = format!(
                "INSERT INTO {MIGRATIONS_TABLE} (version, description, checksum, execution_ms) \
                 VALUES ($1, $2, $3, $4)"
            );
            for migration in migrations {
                if applied.iter().any(|(v, _)| *v == migration.version) {
                    continue;
                }
                let start = std::time::Instant::now();
                let mut tx = pool.begin().await?;
                sqlx::raw_sql(&migration.sql)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| MigrateError::ExecuteMigration(e, migration.version))?;
                sqlx::query(&insert)
                    .bind(migration.version)
                    .bind(migration.description.as_ref())
                    .bind(migration.checksum.as_ref())
                    .bind(millis_since(start))
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                tracing::debug!(
                    version = migration.version,
                    description = %migration.description,
                    "journal migration applied"
                );
            }
            Ok(())
        }

        /// Moves this crate's rows out of `_sqlx_migrations` (a database set up by an earlier
        /// version): rows matching one of `migrations` by version and checksum.
        async fn adopt_legacy(
            pool: &$pool,
            migrations: &[&Migration],
        ) -> Result<(), MigrateError> {
            let exists: bool = sqlx::query_scalar($legacy_exists).fetch_one(pool).await?;
            if !exists {
                return Ok(());
            }
            let legacy: Vec<(i64, Vec<u8>)> =
                sqlx::query_as("SELECT version, checksum FROM _sqlx_migrations WHERE success")
                    .fetch_all(pool)
                    .await?;
            let ours: Vec<&&Migration> = migrations
                .iter()
                .filter(|m| {
                    legacy
                        .iter()
                        .any(|(v, c)| *v == m.version && c.as_slice() == m.checksum.as_ref())
                })
                .collect();
            if ours.is_empty() {
                return Ok(());
            }
            let insert = format!(
                "INSERT INTO {MIGRATIONS_TABLE} (version, description, checksum, execution_ms) \
                 VALUES ($1, $2, $3, 0)"
            );
            let mut tx = pool.begin().await?;
            for migration in ours {
                sqlx::query(&insert)
                    .bind(migration.version)
                    .bind(migration.description.as_ref())
                    .bind(migration.checksum.as_ref())
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("DELETE FROM _sqlx_migrations WHERE version = $1 AND checksum = $2")
                    .bind(migration.version)
                    .bind(migration.checksum.as_ref())
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            tracing::info!(
                table = MIGRATIONS_TABLE,
                "moved the journal's migration records out of _sqlx_migrations"
            );
            Ok(())
        }
    };
}

#[cfg(feature = "sqlite")]
pub(crate) mod sqlite {
    use super::*;
    runner!(
        run,
        sqlx::SqlitePool,
        "BLOB",
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations')",
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({}) ORDER BY name LIMIT 1"
    );
}

#[cfg(feature = "postgres")]
pub(crate) mod postgres {
    use super::*;
    runner!(
        run,
        sqlx::PgPool,
        "BYTEA",
        "SELECT to_regclass('_sqlx_migrations') IS NOT NULL",
        // Where CREATE TABLE IF NOT EXISTS of the migrations looks: the current schema.
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = current_schema() AND c.relname IN ({}) ORDER BY c.relname LIMIT 1"
    );
}
