//! The journal's own migrations of one database, cut at a version: a database as an earlier
//! release left it, for upgrade tests. Included with `#[path]` by the tests that need it only.

use sqlx::migrate::Migrator;

/// The migrations under `migrations/<database>` (`"sqlite"` or `"postgres"`) up to and
/// including `version`.
pub async fn migrator_up_to(database: &str, version: i64) -> Migrator {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(database);
    let mut migrator = Migrator::new(dir).await.expect("read the migrations");
    migrator.migrations = migrator
        .migrations
        .iter()
        .filter(|m| m.version <= version)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    migrator
}
