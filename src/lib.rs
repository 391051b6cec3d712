//! Event-sourced, persistent actors for [Actix](https://docs.rs/actix), in the spirit of Akka
//! Persistence.
//!
//! A persistent actor's state is the fold of the events it persisted. On start it recovers:
//! the journal replays its events before it handles any command. Its handlers persist events
//! and reply once they are stored; commands that arrive meanwhile wait, so state never races
//! the journal.
//!
//! Dependencies: `actix-persistence` and `serde` (with `derive`). The derives and `main` come
//! through this crate, so no `actix` dependency of your own is needed.
//!
//! ```no_run
//! use actix_persistence::actix::Handler;
//! use actix_persistence::{
//!     EventSourced, Message, Persistence, PersistenceState, PersistentActor, PersistReply,
//!     PersistResult,
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
//! #[actix_persistence::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // reference.toml, then $ACTIX_PERSISTENCE_CONFIG, then ACTIX_PERSISTENCE__* env vars;
//!     // by default a SQLite file `actix-persistence.db` in the working directory.
//!     let persistence = Persistence::start().await?;
//!     let counter = Counter { persistence: persistence.state("counter-1")?, total: 0 }
//!         .start_persistent();
//!     let total = counter.ask(Add(5)).await?;
//!     println!("total after recovery and one more event: {total}");
//!     persistence.shutdown().await;
//!     Ok(())
//! }
//! ```
//!
//! # Ordering, durability and backpressure
//! The rules a caller relies on (when an event is durable, in which order continuations and
//! replies run, what happens to commands queued behind a write, how the mailbox bounds them)
//! are in the [`persistent`] module docs; how the journal orders replies per
//! write-reply-ordering group is in [`journal`].
//!
//! # Snapshots and retention
//! An actor opts into snapshots with [`EventSourced::snapshotting`], both halves at once:
//! `Some(Snapshotting::json(|a: &Self| a.state.clone(), |a, state| a.state = state))`. It then
//! takes one on [`PersistentActor::save_snapshot`], or every N events with a
//! [`SnapshotPolicy`] (`SnapshotPolicy::every(100).keep(2).delete_events(true)` keeps the two
//! newest and deletes the events they cover) set with
//! [`PersistenceState::with_snapshot_policy`]. Recovery loads the newest snapshot, then
//! replays only the events after it. [`SelectedSnapshot::json`](snapshot::SelectedSnapshot::json)
//! reads a stored snapshot back. Snapshots live in the store of `journal.plugin` unless
//! `snapshot-store.plugin` says otherwise; a shared PostgreSQL journal with a process-local
//! snapshot store is refused at startup.
//!
//! # Queries
//! [`Persistence::query`] reads the journal back ([`ReadJournal`]): the events of a
//! persistence id, of an entity type's slices or of a tag ([`EventSourced::tags`]), each
//! current or live, as streams of [`EventEnvelope`]s (decoded with
//! [`EnvelopeStreamExt::decode_json`]). Read them with the re-exported [`futures`]'
//! `StreamExt` (see its example); a [`projection`] runs one with a stored offset.
//!
//! # When an actor fails
//! A failed recovery or write stops the actor. Start it with
//! [`PersistentActor::start_persistent`]: its [`PersistentAddr`] answers commands to a stopped
//! actor with [`CommandError::ActorStopped`] carrying the [`ActorFailure`] (the
//! [`RecoveryError`] or the failed write's [`JournalError`]). A [`BackoffSupervisor`] restarts
//! it after an exponential [`Backoff`] instead, buffering up to [`MAX_BUFFERED_COMMANDS`]
//! commands meanwhile.
//!
//! # Logging
//! The library logs through [`tracing`](https://docs.rs/tracing): recovery failures and
//! failed writes as errors, rejected writes, failed snapshots and an opening circuit breaker as
//! warnings, every recovery and write as debug spans. Nothing is printed without a subscriber:
//! install one, e.g. `tracing_subscriber::fmt::init()` (crate `tracing-subscriber`: info and
//! above; with its feature `env-filter` it follows `RUST_LOG`, such as
//! `RUST_LOG=actix_persistence=debug`), or
//! `tracing_subscriber::fmt().with_env_filter("actix_persistence=info").init()` (feature
//! `env-filter`).
//!
//! # Metrics and readiness
//! Metrics go through the [`metrics`](https://docs.rs/metrics) facade: install any recorder
//! (`examples/prometheus.rs` uses `metrics-exporter-prometheus`). Every name, unit and label
//! is listed in [`metrics`](mod@metrics). [`Persistence::health`] is a readiness check: breaker
//! closed and store answering a read, nothing written.
//!
//! # Shutdown
//! [`Persistence::shutdown`] waits for the writes, snapshot saves and deletes under way, then
//! closes the connection pools (a SQLite file is left without its `-wal` file). Call it before
//! the process exits.
//!
//! # Testing with the testkit
//! The `actix-persistence-testkit` crate (a dev-dependency) has `ControlledJournal`, a journal
//! store whose writes complete only when the test says so (in any order, or failed or
//! rejected), so ordering tests need no sleeps; `FaultyJournal` and `DelayingJournal` inject
//! failures and latency; and the conformance suites a third-party store plugin runs
//! (`docs/conformance.md`). Give a persistent actor a store of the testkit's with
//! [`Persistence::start_with_stores`].
//!
//! # Configuration
//! Every setting, its default and its environment variable is in [`config::reference`].
//! Environment variables that start with `ACTIX_PERSISTENCE` (or a misspelling of it, such as
//! `ACTIX_PERSISTANCE`) but set nothing (one underscore instead of two, a typo) fail startup
//! naming the closest correct variable.
//!
//! # Crates
//! - `actix-persistence-core`: persistent actors, the journal protocol and actor, resequencers,
//!   store traits, the in-memory store, persistence queries ([`query`], reached through
//!   [`Persistence::query`]);
//! - `actix-persistence-config`: settings from `reference.toml`, a file and env vars;
//! - `actix-persistence-sql`: the SQLite (feature `sqlite`) and PostgreSQL (feature
//!   `postgres`) journals and snapshot stores, both on by default;
//! - `actix-persistence-derive`: `#[derive(PersistentActor)]`, `#[derive(Message)]`,
//!   `#[actix_persistence::main]` and `#[actix_persistence::test]` (an async test in an Actix
//!   system);
//! - `actix-persistence-projection`: projections ([`projection`]): a query applied to a read
//!   model or another service, with a stored offset, exactly-once or at-least-once;
//! - `actix-persistence-testkit`: a controlled store for deterministic tests.
#![warn(missing_docs)]

mod persistence;

/// [Actix](https://docs.rs/actix), re-exported: everything of `actix` is here, as
/// `actix_persistence::actix::Handler`, so no `actix` dependency of your own is needed.
///
/// The derives and attributes (`Message`, `MessageResponse`, `main`, `test`, also in
/// [`prelude`](actix::prelude)) are this crate's: they expand as actix's own do, with paths
/// through `actix_persistence`, where actix's expand to paths under `::actix` and fail in a
/// crate without that dependency.
pub mod actix {
    #[doc(no_inline)]
    pub use ::actix::*;
    pub use actix_persistence_derive::{main, test, Message, MessageResponse};

    /// Actix's prelude, with this crate's derives in place of actix's (see the module docs).
    pub mod prelude {
        #[doc(no_inline)]
        pub use ::actix::prelude::*;
        pub use actix_persistence_derive::{Message, MessageResponse};
    }
}
pub use persistence::{Persistence, StartError};

/// [futures](https://docs.rs/futures), re-exported: the queries of [`query`] are
/// [`futures::Stream`]s, read with `actix_persistence::futures::StreamExt` (`next`) or
/// `TryStreamExt` (`try_next`, `try_collect`), so no `futures` dependency of your own is needed.
///
/// ```no_run
/// use actix_persistence::futures::StreamExt;
/// use actix_persistence::query::Offset;
/// use actix_persistence::{EnvelopeStreamExt, Persistence};
///
/// # #[derive(serde::Deserialize, Debug)]
/// # struct AccountEvent;
/// # async fn example(persistence: &Persistence) -> Result<(), Box<dyn std::error::Error>> {
/// // Every event tagged "withdrawal", then each new one as it is stored.
/// let mut withdrawals = persistence
///     .query()?
///     .events_by_tag("withdrawal", Offset::NoOffset)
///     .decode_json::<AccountEvent>();
/// while let Some(envelope) = withdrawals.next().await {
///     let envelope = envelope?;
///     println!("{} #{}: {:?}", envelope.persistence_id, envelope.seq_nr, envelope.event);
/// }
/// # Ok(())
/// # }
/// ```
#[doc(no_inline)]
pub use futures;

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
    SnapshotFailure, SnapshotPolicy, Snapshotting, StopReason, MAX_BUFFERED_COMMANDS,
    REPLAY_EVENTS_PER_POLL,
};
#[doc(inline)]
pub use actix_persistence_core::query;
#[doc(inline)]
pub use actix_persistence_core::query::{
    EnvelopeStreamExt, EventEnvelope, Offset, QueryError, QueryStore, ReadJournal,
};
#[doc(inline)]
pub use actix_persistence_core::{
    journal, limits, metrics, persistent, serialization, snapshot, store, tags, AtomicWrite,
    AtomicWriteError, AtomicWriteResult, FencingToken, InMemoryJournal, InvalidPersistenceId,
    JournalError, JournalStore, Ownership, PersistentRepr, ReplayBounds, ReplayStream, Tags,
    WriteRejection, MAX_SEQ_NR,
};
// The derives and `main` carry their docs from the derive crate (a doc comment here would be
// shown after them, a second time).
// `test` beside `main`, as actix has them: a user who found `#[actix_persistence::main]` writes
// `#[actix_persistence::test]`.
pub use actix_persistence_derive::{main, test, Message, MessageResponse, PersistentActor};

// The README's examples compile as doctests of this crate.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

// So are docs/projections.md's (those marked `ignore` are fragments).
#[cfg(doctest)]
#[doc = include_str!("../docs/projections.md")]
pub struct ProjectionsDoctests;

#[doc(inline)]
pub use actix_persistence_projection as projection;
#[doc(inline)]
pub use actix_persistence_sql::{ConnectFailure, ConnectionsInUse, SqlStoreError, WriteStats};
#[doc(inline)]
#[cfg(feature = "postgres")]
pub use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions, PostgresSnapshotStore};
#[doc(inline)]
#[cfg(feature = "sqlite")]
pub use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions, SqliteSnapshotStore};
