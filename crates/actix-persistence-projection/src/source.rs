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

/// What the progress of other instances says of one envelope (see [`Resume`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// An instance of the projection over other slice ranges handled it: skip it.
    Handled,
    /// Not handled yet.
    New,
    /// Not handled yet, and neither is any envelope after it: the check can stop.
    NoneAfter,
}

/// Tells, per envelope, whether another instance of the projection handled it already.
pub type HandledElsewhere<E> = Box<dyn FnMut(&E) -> Coverage + Send>;

/// Where an instance resumes (see [`SourceProvider::resume`]).
pub struct Resume<E: Envelope> {
    /// The offset to open the source after (`None`: from the beginning).
    pub offset: Option<E::Offset>,
    /// Skips the envelopes after `offset` that other instances handled (their slices were
    /// ahead of `offset`); `None` when there are none.
    pub handled_elsewhere: Option<HandledElsewhere<E>>,
    /// The other instances whose progress this resume takes over: their seen sequence numbers
    /// (exactly-once) are honoured too.
    pub inherited: Vec<crate::ProjectionId>,
}

impl<E: Envelope> Resume<E> {
    /// Resumes after `offset`, taking over nothing of other instances.
    pub fn after(offset: Option<E::Offset>) -> Self {
        Resume {
            offset,
            handled_elsewhere: None,
            inherited: Vec::new(),
        }
    }
}

impl<E: Envelope> std::fmt::Debug for Resume<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resume")
            .field("offset", &self.offset)
            .field("handled_elsewhere", &self.handled_elsewhere.is_some())
            .field("inherited", &self.inherited)
            .finish()
    }
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

    /// Where an instance resumes, from its own stored offset (`own`) and those of the other
    /// instances of the same projection name over slice ranges that overlap its own
    /// (`others`, with their ids; an offset is `None` when the instance stored only seen
    /// sequence numbers; always empty for an instance whose key is not a slice range). A projection split over slice
    /// ranges ([`ProjectionId::for_slices`](crate::ProjectionId::for_slices)) whose ranges
    /// changed (4 instances, then 2, then 8) has no offset of its own yet, or an older one:
    /// the instances of the earlier ranges handled its slices up to their offsets, and a
    /// resume from `own` alone would handle those envelopes again (twice, under
    /// exactly-once).
    ///
    /// The default resumes after `own` and ignores `others` (a source that is not split by
    /// slices); [`QuerySource`](crate::QuerySource) by slices takes over, per slice, the most
    /// advanced progress of every instance whose range holds it.
    fn resume(
        &self,
        own: Option<<Self::Envelope as Envelope>::Offset>,
        others: Vec<(
            crate::ProjectionId,
            Option<<Self::Envelope as Envelope>::Offset>,
        )>,
    ) -> Resume<Self::Envelope> {
        let _ = others;
        Resume::after(own)
    }

    /// Which of two stored offsets is further on, for two instances that both covered every
    /// slice this comparison concerns: `Greater` when `a` is. `None` when the source cannot
    /// tell (the default).
    ///
    /// A [`reset`](crate::ProjectionHandle::reset) of one slice range hands an old, wider
    /// range's progress over to the pieces of it outside the reset range; a piece with an
    /// offset of its own keeps the further of the two (ranges 2, then 1, then 2: the upper
    /// half's own offset is older than the whole range's). With `None` the piece keeps its
    /// own, and may handle again what the wider range handled after it.
    fn compare_offsets(
        &self,
        a: &<Self::Envelope as Envelope>::Offset,
        b: &<Self::Envelope as Envelope>::Offset,
    ) -> Option<std::cmp::Ordering> {
        let _ = (a, b);
        None
    }

    /// The slice range this source reads (`(min_slice, max_slice)`, inclusive), `None` for a
    /// source not split by slices (the default). A projection whose id names a slice range
    /// ([`ProjectionId::for_slices`](crate::ProjectionId::for_slices)) refuses to start with a
    /// source over another range ([`ProjectionError::SliceRangeMismatch`](crate::ProjectionError::SliceRangeMismatch)):
    /// its stored offset would be taken as covering slices it never read.
    fn slice_range(&self) -> Option<(u16, u16)> {
        None
    }

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
