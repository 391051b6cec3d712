//! SQL journal stores for [actix-persistence](actix_persistence_core), through
//! [sqlx](https://docs.rs/sqlx).
//!
//! A store implements [`JournalStore`](actix_persistence_core::JournalStore): the journal actor
//! hands it batches of atomic writes, replays from it when a persistent actor recovers, and
//! deletes through it. This crate needs no actor runtime; any Tokio runtime drives it.
//!
//! The embedded default is [`SqliteJournal`]: one database file, created on first use, in WAL
//! mode, its schema brought up to date by migrations embedded in the crate (the build never
//! needs a database).
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
//!     persistence_id: "account-42".to_owned(),
//!     seq_nr: 1,
//!     payload: br#"{"Deposited":100}"#.to_vec(),
//!     serializer_id: 1,
//!     manifest: "Deposited".to_owned(),
//!     writer_uuid: "6d1f...".to_owned(),
//!     timestamp: 1_700_000_000_000,
//!     tags: vec!["account".to_owned()],
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
//! - `sqlite` (default): [`SqliteJournal`], on a bundled SQLite.
#![warn(missing_docs)]

mod error;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use error::SqlStoreError;
#[cfg(feature = "sqlite")]
pub use sqlite::{
    SqliteJournal, SqliteJournalOptions, DEFAULT_REPLAY_BATCH_SIZE, DEFAULT_SQLITE_URL,
};
