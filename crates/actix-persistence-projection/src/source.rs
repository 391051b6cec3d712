//! What a projection consumes: a resumable stream of envelopes (as Akka Projections'
//! `SourceProvider`).
//!
//! A [`SourceProvider`] opens the stream after an offset and tells how far the journal is ahead
//! of an offset. The query adapters of this crate (see [`crate::query`]) implement it over the
//! persistence queries by slices and by tag; tests and integrations may implement it over
//! anything that delivers [`Envelope`]s with offsets that resume exactly after them.

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::BoxError;

/// One element a projection handles: an event of a persistence id at a sequence number, with
/// the offset that resumes the source exactly after it.
pub trait Envelope: Send + Sync + 'static {
    /// The source's offset type. Stored by the offset store as JSON (serde), handed back to
    /// [`SourceProvider::source`] unchanged.
    type Offset: Clone + Send + Sync + Serialize + DeserializeOwned + std::fmt::Debug + 'static;

    /// The persistence id whose event this is. Envelopes of one persistence id are handled one
    /// after another, in sequence-number order.
    fn persistence_id(&self) -> &str;

    /// The event's sequence number within its persistence id (from 1).
    fn seq_nr(&self) -> u64;

    /// The offset that resumes the source right after this envelope.
    fn offset(&self) -> Self::Offset;

    /// When the event was written, milliseconds since the Unix epoch (for the lag in ms).
    fn timestamp_ms(&self) -> i64;
}

/// A stream of envelopes, or the error that ended it.
pub type EnvelopeStream<E> = BoxStream<'static, Result<E, BoxError>>;

/// How far the journal is ahead of an offset (see [`SourceProvider::lag`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SourceLag {
    /// Events in the source after the offset, not yet handled.
    pub events: u64,
    /// Write timestamp of the oldest of those events (the next one to handle), milliseconds
    /// since the Unix epoch; `None` when there is none.
    pub oldest_timestamp_ms: Option<i64>,
}

/// Opens a projection's source (as Akka Projections' `SourceProvider`).
///
/// Contract a projection relies on: a stream opened after an offset delivers every envelope
/// after it (none skipped, none repeated), the envelopes of one persistence id in
/// sequence-number order; a live stream may stay open and deliver new events as they are
/// written.
#[async_trait]
pub trait SourceProvider: Send + Sync + 'static {
    /// The envelopes this source delivers.
    type Envelope: Envelope;

    /// Opens the stream after `offset` (`None`: from the beginning).
    ///
    /// # Errors
    /// When the stream cannot be opened; the projection then restarts with backoff.
    async fn source(
        &self,
        offset: Option<<Self::Envelope as Envelope>::Offset>,
    ) -> Result<EnvelopeStream<Self::Envelope>, BoxError>;

    /// How many events the source holds after `offset`, and the write timestamp of the oldest
    /// of them: the projection's lag behind the journal.
    ///
    /// # Errors
    /// When the source cannot be read.
    async fn lag(
        &self,
        offset: Option<&<Self::Envelope as Envelope>::Offset>,
    ) -> Result<SourceLag, BoxError>;
}
