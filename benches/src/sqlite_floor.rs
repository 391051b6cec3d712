//! The raw SQLite floor of the `group-commit` scenario: plain sqlx, no journal, no actors,
//! inserting journal rows into a database with the journal's schema (made by the journal's
//! own migrations) and its durability settings (WAL, `synchronous = FULL`, the same busy
//! timeout), `rows_per_transaction` rows per transaction.

use std::str::FromStr;
use std::time::{Duration, Instant};

use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};
use sqlx::{Connection, Executor};

use crate::report::Latencies;

/// The single-row insert of the floor: the journal table's columns, one prepared statement
/// (sqlx caches it on the connection) executed once per row.
const INSERT_ROW: &str = "INSERT INTO journal \
     (persistence_id, seq_nr, writer_uuid, write_timestamp, serializer_id, manifest, payload, \
      tags) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// What one floor run did.
#[derive(Debug, Clone)]
pub struct FloorOutcome {
    /// Rows inserted.
    pub rows: u64,
    /// Wall time of all transactions.
    pub elapsed: Duration,
    /// Latency of each transaction (`BEGIN IMMEDIATE` to `COMMIT` returned).
    pub transactions: Latencies,
}

/// Inserts `rows` rows in transactions of `rows_per_transaction` into a fresh database file in
/// `dir`, through one connection: a loop over one reused prepared statement per row,
/// `BEGIN IMMEDIATE ... COMMIT` around each group of rows.
///
/// # Errors
/// A database error (the floor needs nothing but a writable temporary directory).
pub async fn insert_rows(
    dir: &std::path::Path,
    rows: u64,
    rows_per_transaction: u64,
) -> Result<FloorOutcome, sqlx::Error> {
    let url = format!("sqlite:{}", dir.join("floor.db").display());
    let options = SqliteJournalOptions::new(url.clone());
    // The journal's own migrations make the schema; then the journal lets go of the file.
    let journal = SqliteJournal::connect(&options)
        .await
        .map_err(|e| sqlx::Error::Configuration(Box::new(e)))?;
    journal.close().await;
    let mut conn = SqliteConnection::connect_with(
        &SqliteConnectOptions::from_str(&url)?
            .busy_timeout(options.busy_timeout)
            .synchronous(SqliteSynchronous::Full)
            .journal_mode(SqliteJournalMode::Wal),
    )
    .await?;
    let payload = br#"{"Incremented":1}"#.to_vec();
    let writer_uuid = "6d1f0c2e-0000-4000-8000-000000000000";
    let mut transactions = Latencies::new();
    let start = Instant::now();
    let mut seq_nr = 0i64;
    while (seq_nr as u64) < rows {
        let in_this = rows_per_transaction.min(rows - seq_nr as u64);
        let began = Instant::now();
        conn.execute("BEGIN IMMEDIATE").await?;
        for _ in 0..in_this {
            seq_nr += 1;
            sqlx::query(INSERT_ROW)
                .bind("floor")
                .bind(seq_nr)
                .bind(writer_uuid)
                .bind(1_700_000_000_000i64)
                .bind(1i64)
                .bind("")
                .bind(&payload)
                .bind("[]")
                .execute(&mut conn)
                .await?;
        }
        conn.execute("COMMIT").await?;
        transactions.record(began.elapsed());
    }
    let elapsed = start.elapsed();
    conn.close().await?;
    Ok(FloorOutcome {
        rows,
        elapsed,
        transactions,
    })
}
