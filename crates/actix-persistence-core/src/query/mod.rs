//! Persistence queries: the read side of the journal (as Akka's persistence query and its
//! r2dbc plugin), store-level, with no actor runtime.
//!
//! - [`ReadJournal`]: the queries, each in a current form (ends at the events stored when it
//!   started) and a live form (keeps delivering), all [`futures::Stream`]s of
//!   [`EventEnvelope`]s read page by page:
//!   [`events_by_persistence_id`](ReadJournal::events_by_persistence_id),
//!   [`events_by_slices`](ReadJournal::events_by_slices),
//!   [`events_by_tag`](ReadJournal::events_by_tag),
//!   [`current_persistence_ids`](ReadJournal::current_persistence_ids).
//! - [`Offset`]: stored by a consumer (serde) to resume exactly after the last element.
//! - Slices ([`slice_for_persistence_id`], [`slice_ranges`]) and entity types
//!   ([`entity_type_of`]): how the persistence ids are split between consumers.
//! - [`QueryStore`]: what a journal store implements so that [`ReadJournal`] can query it
//!   (the in-memory, SQLite and PostgreSQL stores do).
//!
//! # Example
//! ```
//! # mod actix_persistence { // the facade's paths
//! #     pub use actix_persistence_core::*;
//! #     pub use ::futures;
//! # }
//! // `actix_persistence::futures` is the futures crate: its `StreamExt` and `TryStreamExt`
//! // read the streams.
//! use actix_persistence::futures::TryStreamExt;
//! use actix_persistence::query::{EnvelopeStreamExt, Offset, QuerySettings, ReadJournal};
//! use actix_persistence::{AtomicWrite, InMemoryJournal, JournalStore, PersistentRepr};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let journal = InMemoryJournal::new();
//! let event = PersistentRepr {
//!     persistence_id: "Account|42".into(),
//!     seq_nr: 1,
//!     payload: br#"{"Deposited":100}"#.to_vec(),
//!     serializer_id: 1,
//!     manifest: String::new(),
//!     writer_uuid: "w".into(),
//!     timestamp: 0,
//!     tags: vec![].into(),
//! };
//! journal.write_messages(vec![AtomicWrite::new(vec![event])?]).await?;
//!
//! #[derive(serde::Deserialize, Debug, PartialEq)]
//! enum AccountEvent { Deposited(u64) }
//!
//! let query = ReadJournal::new(journal, QuerySettings::default());
//! let envelopes: Vec<_> = query
//!     .current_events_by_slices("Account", 0, 1023, Offset::NoOffset)
//!     .decode_json::<AccountEvent>()
//!     .try_collect()
//!     .await?;
//! assert_eq!(envelopes[0].event, AccountEvent::Deposited(100));
//!
//! // Resuming from the last offset delivers nothing more.
//! let rest: Vec<_> = query
//!     .current_events_by_slices("Account", 0, 1023, envelopes[0].offset.clone())
//!     .try_collect()
//!     .await?;
//! assert!(rest.is_empty());
//! # Ok(())
//! # }
//! ```
//!
//! How the queries avoid missing late commits without a global sequence in commit order is in
//! `docs/architecture.md` ("Queries").

mod engine;
mod envelope;
mod error;
mod notify;
mod offset;
mod own_task;
mod read_journal;
mod settings;
mod settled_reads;
mod slice;
mod store;

pub use envelope::{
    EnvelopeStream, EnvelopeStreamExt, EventDecoder, EventEnvelope, JsonDecoder, RawEnvelope,
    TypedEnvelopeStream,
};
pub use error::QueryError;
pub use notify::{WriteNotifications, WriteNotifier};
pub use offset::{Offset, SeenEvent, SeenMap, TimestampOffset};
pub use read_journal::ReadJournal;
pub use settings::QuerySettings;
pub use slice::{
    entity_type_of, slice_for_persistence_id, slice_ranges, ENTITY_TYPE_SEPARATOR, NUMBER_OF_SLICES,
};
pub use store::{wall_clock_micros, EventFilter, EventKey, EventsRequest, QueryStore, StoredEvent};
