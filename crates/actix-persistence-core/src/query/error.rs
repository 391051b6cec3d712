//! The error of queries.

use crate::error::JournalError;
use crate::serialization::SerializationError;

/// Why a query failed. A stream that yields an error ends after it: resume from the offset of
/// the last element handled.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// The store could not be read (connection lost, timeout, a corrupt row).
    #[error("query could not read the journal: {0}")]
    Journal(#[from] JournalError),
    /// A stored event could not be decoded into the event type asked for. Check that the
    /// decoder matches the serializer the persistent actor wrote it with.
    #[error("event {seq_nr} of persistence id {persistence_id:?} could not be decoded: {source}")]
    Decode {
        /// The persistence id of the event.
        persistence_id: String,
        /// Its sequence number.
        seq_nr: u64,
        /// The serializer's error.
        #[source]
        source: SerializationError,
    },
    /// `min_slice` is above `max_slice`, or `max_slice` is 1024 or more.
    #[error(
        "slice range {min_slice}..={max_slice} is invalid: slices are 0..=1023 and the minimum \
         must not be above the maximum"
    )]
    InvalidSliceRange {
        /// The minimum slice given.
        min_slice: u16,
        /// The maximum slice given.
        max_slice: u16,
    },
    /// The offset handed to a query is not one this kind of query produces (e.g. a sequence
    /// offset to a query by slice). Resume a query with an offset of its own envelopes.
    #[error("a {query} query cannot resume from {offset}; pass an offset it produced or NoOffset")]
    InvalidOffset {
        /// The query, e.g. `"events by slices"`.
        query: &'static str,
        /// What was given, e.g. `"a sequence offset"`.
        offset: &'static str,
    },
    /// The configured journal store answers no queries (a third-party store started with
    /// `Persistence::start_with_stores` without a query store).
    #[error("the journal store does not support queries; give Persistence a QueryStore")]
    Unsupported,
}
