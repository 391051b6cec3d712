//! Projections for actix-persistence: consume a persistence query and apply each event to
//! something else (a read-model table, a search index, another service), resuming from a
//! stored offset after a restart or a crash (as Akka Projections).
//!
//! A [`Projection`] has a [`ProjectionId`] (name and key), a source ([`SourceProvider`]: the
//! events of a slice range or a tag, see [`query`]), a handler and an [`OffsetStore`]:
//!
//! - delivery **exactly-once** ([`Projection::exactly_once`]): the handler receives the
//!   database transaction, and the offset is saved in that same transaction;
//! - or **at-least-once** ([`Projection::at_least_once`]): the offset is saved after the
//!   handler, every N envelopes or T ms ([`SaveOffset`]);
//! - handler forms: one envelope at a time ([`Handler`], [`TransactionalHandler`]), **grouped**
//!   ([`GroupedHandler`], [`TransactionalGroupedHandler`], [`Grouping`]), and
//!   **`max_concurrency`** ([`Projection::with_max_concurrency`]) with each persistence id
//!   still handled in seq_nr order;
//! - errors: retried with backoff, then skipped or failing the projection, which restarts from
//!   its stored offset ([`HandlerRecovery`], [`RestartBackoff`]);
//! - scale-out: one instance per slice range ([`slice_ranges`]), in as many processes as
//!   wanted, sharing the offset store;
//! - fencing: an instance takes ownership of its id when it starts
//!   ([`OffsetStore::take_ownership`]); an older instance of the same id can no longer commit
//!   and stops ([`ProjectionError::Fenced`], [`ProjectionState::Fenced`]);
//! - control: [`Projection::start`] runs it as a task on the Actix (Tokio) runtime and returns
//!   a [`ProjectionHandle`] (pause, resume, stop, reset, [`Progress`], [`Lag`]);
//!   [`ProjectionActor`] wraps the handle in an actor.
//!
//! See `docs/projections.md` for when to choose which delivery and how to split by slices.
//!
//! # Feature flags
//! - `sqlite` (default): [`SqliteOffsetStore`];
//! - `postgres` (default): [`PostgresOffsetStore`].
#![warn(missing_docs)]

mod actor;
mod error;
mod handle;
mod handler;
mod id;
pub mod offset_store;
mod processor;
mod progress;
mod projection;
pub mod query;
mod settings;
mod source;

#[doc(inline)]
pub use actix_persistence_core::query::{slice_for_persistence_id, slice_ranges, NUMBER_OF_SLICES};
pub use actor::{GetProgress, PauseProjection, ProjectionActor, ResumeProjection};
/// The attribute the handler traits are written with: `#[async_trait]` on an `impl` of
/// [`Handler`] and the others, without a dependency of your own on the `async-trait` crate.
pub use async_trait::async_trait;
pub use error::{BoxError, HandlerError, OffsetStoreError, ProjectionError};
pub use handle::{ProjectionHandle, ResetError};
pub use handler::{GroupedHandler, Handler, TransactionalGroupedHandler, TransactionalHandler};
pub use id::{ProjectionId, MAX_PROJECTION_KEY_BYTES, MAX_PROJECTION_NAME_BYTES};
#[cfg(feature = "sqlite")]
pub use offset_store::SqliteOffsetStore;
pub use offset_store::{
    InMemoryOffsetStore, InMemoryTransaction, OffsetStore, SeenSeqNrs, StoredProgress,
    TransactionalOffsetStore,
};
#[cfg(feature = "postgres")]
pub use offset_store::{PostgresOffsetStore, OFFSET_STATEMENT_TIMEOUT};
pub use progress::{Lag, Progress, ProjectionState};
pub use projection::Projection;
pub use query::QuerySource;
pub use settings::{AfterRetries, Grouping, HandlerRecovery, RestartBackoff, SaveOffset};
pub use source::{
    Coverage, Envelope, EnvelopeStream, HandledElsewhere, Resume, SourceLag, SourceProvider,
};
/// The sqlx this crate is built with: a transactional handler's transaction type
/// (`sqlx::Transaction<'static, Sqlite>` or `<Postgres>`) and its queries, without a
/// dependency of your own that has to match this crate's version.
pub use sqlx;
