//! Event-sourced, persistent actors for [Actix](https://docs.rs/actix), in the spirit of Akka
//! Persistence.
//!
//! A persistent actor's state is the fold of the events it persisted. On start it recovers:
//! the journal replays its events before it handles any command. Its handlers persist events
//! and reply once they are stored; commands that arrive meanwhile wait, so state never races
//! the journal.
//!
//! ```no_run
//! use actix_persistence::actix::{Actor, Handler, Message};
//! use actix_persistence::{
//!     EventSourced, Persistence, PersistenceState, PersistentActor, PersistReply, PersistResult,
//! };
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Added(i64);
//!
//! #[derive(PersistentActor)]
//! struct Counter {
//!     persistence: PersistenceState<Self>,
//!     total: i64,
//! }
//!
//! impl EventSourced for Counter {
//!     type Event = Added;
//!     fn apply(&mut self, event: &Added) {
//!         self.total += event.0;
//!     }
//! }
//!
//! #[derive(Message)]
//! #[rtype(result = "PersistResult<i64>")]
//! struct Add(i64);
//!
//! impl Handler<Add> for Counter {
//!     type Result = PersistReply<i64>;
//!     fn handle(&mut self, msg: Add, ctx: &mut Self::Context) -> Self::Result {
//!         // Runs once `Added` is stored and applied: the reply is the new total.
//!         self.persist(ctx, Added(msg.0), |counter, _, _| counter.total)
//!     }
//! }
//!
//! #[actix::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // reference.toml, then $ACTIX_PERSISTENCE_CONFIG, then ACTIX_PERSISTENCE__* env vars;
//!     // by default a SQLite file `actix-persistence.db` in the working directory.
//!     let persistence = Persistence::start().await?;
//!     let counter = Counter { persistence: persistence.state("counter-1")?, total: 0 }.start();
//!     let total = counter.send(Add(5)).await??;
//!     println!("total after recovery and one more event: {total}");
//!     Ok(())
//! }
//! ```
//!
//! # Crates
//! - `actix-persistence-core`: persistent actors, the journal protocol and actor, resequencers,
//!   store traits, the in-memory store;
//! - `actix-persistence-config`: settings from `reference.toml`, a file and env vars;
//! - `actix-persistence-sql`: the SQLite (feature `sqlite`) and PostgreSQL (feature
//!   `postgres`) journals and snapshot stores, both on by default;
//! - `actix-persistence-derive`: `#[derive(PersistentActor)]`;
//! - `actix-persistence-testkit`: a controlled store for deterministic tests.
#![warn(missing_docs)]

mod persistence;

pub use actix;
pub use persistence::{Persistence, StartError};

#[doc(inline)]
pub use actix_persistence_config as config;
#[doc(inline)]
pub use actix_persistence_config::{ConfigError, Settings};

#[doc(inline)]
pub use actix_persistence_core::journal::Unhealthy;
#[doc(inline)]
pub use actix_persistence_core::persistent::{
    start_recovery, ActorFailure, ActorReplyFuture, Backoff, BackoffSupervisor, CommandError,
    DeleteError, EventSourced, PersistError, PersistReply, PersistResult, PersistenceState,
    PersistentActor, PersistentAddr, Recovery, RecoveryError, RecoveryPermits, ReplyFuture,
    SnapshotPolicy, Snapshotting, StopReason, MAX_BUFFERED_COMMANDS,
};
#[doc(inline)]
pub use actix_persistence_core::{
    journal, metrics, persistent, serialization, snapshot, store, AtomicWrite, AtomicWriteError,
    InMemoryJournal, InvalidPersistenceId, JournalError, JournalStore, PersistentRepr,
    WriteRejection, MAX_SEQ_NR,
};
/// `#[derive(PersistentActor)]`: implements `actix::Actor` (recovering on start) and
/// [`PersistentActor`] for a struct with a `PersistenceState<Self>` field.
pub use actix_persistence_derive::PersistentActor;

/// `#[derive(Message)]` with `#[rtype(result = "T")]`: implements `actix::Message` through
/// this crate, so an application needs no `actix` dependency of its own for it.
pub use actix_persistence_derive::Message;

/// `#[actix_persistence::main]` on an `async fn main`: runs it in an Actix system (as
/// `#[actix::main]`), which [`Persistence::start`] needs.
pub use actix_persistence_derive::main;

// The README's examples compile as doctests of this crate.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[doc(inline)]
pub use actix_persistence_sql::WriteStats;
#[doc(inline)]
#[cfg(feature = "postgres")]
pub use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions, PostgresSnapshotStore};
#[doc(inline)]
#[cfg(feature = "sqlite")]
pub use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions, SqliteSnapshotStore};
