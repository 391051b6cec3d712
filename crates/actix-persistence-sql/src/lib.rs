//! SQL journal and snapshot stores for [actix-persistence](actix_persistence_core), through
//! [sqlx](https://docs.rs/sqlx).
//!
//! A journal implements [`JournalStore`](actix_persistence_core::JournalStore): the journal
//! actor hands it batches of atomic writes, replays from it when a persistent actor recovers,
//! and deletes through it. A snapshot store implements
//! [`SnapshotStore`](actix_persistence_core::SnapshotStore). This crate needs no actor runtime;
//! any Tokio runtime drives it.
//!
//! - [`SqliteJournal`] and [`SqliteSnapshotStore`] (feature `sqlite`, the embedded default):
//!   one database file, created on first use, in WAL mode.
//! - [`PostgresJournal`] and [`PostgresSnapshotStore`] (feature `postgres`): a PostgreSQL
//!   server, or a Postgres-compatible one (the SQL needs no extension, no advisory lock, no
//!   `LISTEN`/`NOTIFY`).
//!
//! Both bring their schema up to date with migrations embedded in the crate when they connect;
//! the build never needs a database (queries are checked at run time, not by macros). Applied
//! migrations are recorded in a table of their own, [`MIGRATIONS_TABLE`], never in sqlx's
//! `_sqlx_migrations`, so an application's own `sqlx::migrate!()` shares the database with
//! the journal in either order. On PostgreSQL, `PostgresJournalOptions::schema` puts the
//! tables into a schema of their own.
//!
//! # Group commit
//! Both journals store the atomic writes that arrive while a transaction is in flight, from any
//! number of concurrent callers, together in the next transaction (at most `max_batch_size`,
//! default [`DEFAULT_MAX_BATCH_SIZE`]), each in a savepoint of its own: under load one commit
//! stores many writes, yet every atomic write still succeeds or fails on its own, and none is
//! reported successful before its transaction committed. `max_batch_size` 1 turns it off. The
//! journals' `stats()` ([`WriteStats`]) show how many transactions the writes took.
//!
//! # Example
//! ```
//! use actix_persistence_core::{AtomicWrite, JournalStore, PersistentRepr, MAX_SEQ_NR};
//! use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions};
//! use futures::TryStreamExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let url = format!("sqlite:{}", dir.path().join("journal.db").display());
//! // e.g. url = "sqlite:journal.db"
//! let journal = SqliteJournal::connect(&SqliteJournalOptions::new(url)).await?;
//!
//! let event = PersistentRepr {
//!     persistence_id: "account-42".into(),
//!     seq_nr: 1,
//!     payload: br#"{"Deposited":100}"#.to_vec(),
//!     serializer_id: 1,
//!     manifest: "Deposited".to_owned(),
//!     writer_uuid: "6d1f...".into(),
//!     timestamp: 1_700_000_000_000,
//!     tags: vec!["account".to_owned()].into(),
//! };
//! // One result per atomic write; `Ok(())` means committed, hence durable.
//! let results = journal.write_messages(vec![AtomicWrite::new(vec![event.clone()])?]).await?;
//! assert!(results[0].is_ok());
//!
//! let replayed: Vec<PersistentRepr> = journal
//!     .replay_messages("account-42", 1, MAX_SEQ_NR, MAX_SEQ_NR)
//!     .try_collect()
//!     .await?;
//! assert_eq!(replayed, vec![event]);
//! assert_eq!(journal.read_highest_sequence_nr("account-42", 0).await?, 1);
//! # Ok(())
//! # }
//! ```
//!
//! # Feature flags
//! - `sqlite` (default): [`SqliteJournal`] and [`SqliteSnapshotStore`], on a bundled SQLite.
//! - `postgres`: [`PostgresJournal`] and [`PostgresSnapshotStore`].
#![warn(missing_docs)]
// Without a database feature only the shared plumbing is compiled, and nothing uses it.
#![cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]

mod error;
mod group_commit;
mod home_runtime;
mod journal_common;
mod migrate;
mod page_row;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_snapshot;
#[cfg(feature = "postgres")]
mod postgres_tags;
mod snapshot_sql;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(feature = "sqlite")]
mod sqlite_file;
#[cfg(feature = "sqlite")]
mod sqlite_page;
#[cfg(feature = "sqlite")]
mod sqlite_readers;
#[cfg(feature = "sqlite")]
mod sqlite_snapshot;

#[cfg(test)]
mod test_events;
#[cfg(feature = "test-util")]
pub mod test_util;

pub use error::{ConnectFailure, SqlStoreError};
pub use group_commit::{WriteStats, DEFAULT_MAX_BATCH_SIZE};
pub use home_runtime::{HomeRuntime, HomeRuntimeGone};
pub use journal_common::ConnectionsInUse;
pub use migrate::MIGRATIONS_TABLE;
#[cfg(feature = "postgres")]
pub use postgres::{connection_budgets, migrate_postgres, PostgresJournal, PostgresJournalOptions};
#[cfg(feature = "postgres")]
pub use postgres_snapshot::PostgresSnapshotStore;
#[cfg(feature = "sqlite")]
pub use sqlite::{
    migrate_sqlite, open_sqlite_pool, sqlite_connect_options, SqliteJournal, SqliteJournalOptions,
    DEFAULT_SQLITE_URL,
};
#[cfg(feature = "sqlite")]
pub use sqlite_snapshot::SqliteSnapshotStore;

/// Default of the `replay_batch_size` option of both SQL journals: events read per query.
///
/// 1,000, as Akka's r2dbc plugin reads its queries (`buffer-size`): one actor replaying
/// 1,000,000 events with pages of 1,000 ran 1.25-1.6x the events/s of pages of 500 on both
/// stores (what every page costs, whatever its rows, is paid half as often), and 2,000 to 8,000
/// no faster (`docs/benchmarks.md`, "Session 10"). A replay holds at most three pages.
pub const DEFAULT_REPLAY_BATCH_SIZE: u32 = 1000;

/// The largest connection pool a SQL store opens (`max_connections` of
/// [`SqliteJournalOptions`] and [`PostgresJournalOptions`], and of the projections' offset
/// stores): sqlx takes room for every connection of a pool when it builds it, so a pool of
/// `u32::MAX` connections asked for hundreds of GB and aborted the process. A larger value
/// fails the store's `connect` with [`SqlStoreError::InvalidOption`]. (PostgreSQL itself serves
/// at most 262,143 connections, a default server 100.)
pub const MAX_POOL_CONNECTIONS: u32 = 10_000;
