//! The core of actix-persistence: persistent actors, the journal protocol, the journal actor
//! with its resequencer actors, and the store traits plugins implement.
//!
//! Most users depend on the facade crate `actix-persistence`, which re-exports this crate.
//! Store plugins depend on it with `default-features = false`: the [`store`] traits then pull
//! in neither Actix nor a runtime.
//!
//! # Feature flags
//! - `actor` (default): [`journal`], [`persistent`] and the Actix machinery.
//!
//! The [`query`] module (persistence queries) needs no feature: it runs on any Tokio runtime.
#![warn(missing_docs)]

mod clock;
pub mod error;
pub mod inmem;
pub mod limits;
pub mod query;
pub mod serialization;
pub mod snapshot;
pub mod store;
pub mod tags;

#[cfg(feature = "actor")]
pub mod journal;
pub mod metrics;
#[cfg(feature = "actor")]
pub mod persistent;

pub use error::{
    validate_persistence_id, AtomicWriteError, BoxError, InvalidPersistenceId, JournalError,
    WriteRejection,
};
pub use inmem::InMemoryJournal;
pub use snapshot::{
    InMemorySnapshotStore, SelectedSnapshot, SerializedSnapshot, SnapshotError, SnapshotMetadata,
    SnapshotSelectionCriteria, SnapshotStore,
};
pub use store::{
    AtomicWrite, AtomicWriteResult, CheckedBatch, FailedIds, FencingToken, JournalStore, Ownership,
    PersistentRepr, ReplayBounds, ReplayStream, RunInterner, WriteBatch, WriteNow, WriteResults,
    MAX_SEQ_NR,
};
pub use tags::{Tags, TagsInterner};
