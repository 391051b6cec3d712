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

/// A raw sqlx connection to a fresh database with the journal's schema and settings.
pub struct Floor {
    conn: SqliteConnection,
    payload: Vec<u8>,
    seq_nr: i64,
}

impl Floor {
    /// Creates `floor.db` in `dir` with the journal's migrations and connects to it with the
    /// journal's durability settings.
    ///
    /// # Errors
    /// A database error.
    pub async fn open(dir: &std::path::Path) -> Result<Self, sqlx::Error> {
        let url = format!("sqlite:{}", dir.join("floor.db").display());
        let options = SqliteJournalOptions::new(url.clone());
        // The journal's own migrations make the schema; then the journal lets go of the file.
        let journal = SqliteJournal::connect(&options)
            .await
            .map_err(|e| sqlx::Error::Configuration(Box::new(e)))?;
        journal.close().await;
        let conn = SqliteConnection::connect_with(
            &SqliteConnectOptions::from_str(&url)?
                .busy_timeout(options.busy_timeout)
                .synchronous(SqliteSynchronous::Full)
                .journal_mode(SqliteJournalMode::Wal),
        )
        .await?;
        Ok(Floor {
            conn,
            payload: br#"{"Incremented":1}"#.to_vec(),
            seq_nr: 0,
        })
    }

    /// One transaction of `rows` rows (`BEGIN IMMEDIATE`, one execution of the prepared
    /// single-row insert per row, `COMMIT`); returns how long it took.
    ///
    /// # Errors
    /// A database error.
    pub async fn transaction(&mut self, rows: u64) -> Result<Duration, sqlx::Error> {
        let began = Instant::now();
        self.conn.execute("BEGIN IMMEDIATE").await?;
        for _ in 0..rows {
            self.seq_nr += 1;
            sqlx::query(INSERT_ROW)
                .bind("floor")
                .bind(self.seq_nr)
                .bind("6d1f0c2e-0000-4000-8000-000000000000")
                .bind(1_700_000_000_000i64)
                .bind(1i64)
                .bind("")
                .bind(&self.payload)
                .bind("[]")
                .execute(&mut self.conn)
                .await?;
        }
        self.conn.execute("COMMIT").await?;
        Ok(began.elapsed())
    }

    /// Closes the connection.
    ///
    /// # Errors
    /// A database error.
    pub async fn close(self) -> Result<(), sqlx::Error> {
        self.conn.close().await
    }
}

/// Inserts `rows` rows in transactions of `rows_per_transaction` into a fresh database file in
/// `dir`, through one connection (see [`Floor::transaction`]).
///
/// # Errors
/// A database error (the floor needs nothing but a writable temporary directory).
pub async fn insert_rows(
    dir: &std::path::Path,
    rows: u64,
    rows_per_transaction: u64,
) -> Result<FloorOutcome, sqlx::Error> {
    let mut floor = Floor::open(dir).await?;
    let mut transactions = Latencies::new();
    let start = Instant::now();
    let mut done = 0;
    while done < rows {
        let in_this = rows_per_transaction.min(rows - done);
        transactions.record(floor.transaction(in_this).await?);
        done += in_this;
    }
    let elapsed = start.elapsed();
    floor.close().await?;
    Ok(FloorOutcome {
        rows,
        elapsed,
        transactions,
    })
}
