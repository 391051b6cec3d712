//! What queries deliver: event envelopes, raw or decoded into the event type.

use std::marker::PhantomData;
use std::sync::Arc;

use futures::stream::{BoxStream, StreamExt};
use serde::de::DeserializeOwned;

use super::{entity_type_of, slice_for_persistence_id, Offset, QueryError};
use crate::error::panic_message;
use crate::serialization::{from_json, SerializationError, SerializedEvent};
use crate::store::PersistentRepr;
use crate::tags::Tags;

/// One event as a query delivers it (as Akka's `EventEnvelope`): where it comes from, the
/// offset to resume after it, and the event itself: [`SerializedEvent`] in raw queries (for
/// tools that do not know the event types), or the decoded event type `E`.
#[derive(Debug, Clone, PartialEq)]
pub struct EventEnvelope<E = SerializedEvent> {
    /// The persistence id that persisted the event.
    ///
    /// Shared: the envelopes of one persistence id (a query by persistence id, a run of one id
    /// in a page) hold the same allocation, so a clone is O(1) and copies no text.
    pub persistence_id: Arc<str>,
    /// Its sequence number within the persistence id, from 1.
    pub seq_nr: u64,
    /// The offset just after this event: hand it back to the same query to resume with the
    /// next one.
    pub offset: Offset,
    /// When the event was written, milliseconds since the Unix epoch (the writer's clock; the
    /// offset's database timestamp is in microseconds).
    pub timestamp: i64,
    /// Its tags (see `EventSourced::tags`), shared among the envelopes of a page that carry
    /// the same ones (clone is O(1)).
    pub tags: Tags,
    /// The slice of the persistence id ([`slice_for_persistence_id`]).
    pub slice: u16,
    /// The entity type of the persistence id ([`entity_type_of`]).
    ///
    /// Shared as `persistence_id` is: one allocation per query by persistence id or by
    /// slices, one per run of envelopes of one entity type otherwise (clone is O(1)).
    pub entity_type: Arc<str>,
    /// The id of the incarnation that wrote the event (shared as `persistence_id` is, clone is
    /// O(1)).
    pub writer_uuid: Arc<str>,
    /// The event.
    pub event: E,
}

/// An envelope whose event is still serialized.
pub type RawEnvelope = EventEnvelope<SerializedEvent>;

/// A stream of raw envelopes, the result of every event query: pulled page by page, so a
/// consumer that stops pulling stops the reading. An error ends it.
pub type EnvelopeStream = BoxStream<'static, Result<RawEnvelope, QueryError>>;

/// A stream of decoded envelopes (see [`EnvelopeStreamExt`]).
pub type TypedEnvelopeStream<E> = BoxStream<'static, Result<EventEnvelope<E>, QueryError>>;

impl RawEnvelope {
    /// The envelope of a stored event, with `offset`. Its entity type is a new allocation;
    /// [`from_repr_with_entity_type`](Self::from_repr_with_entity_type) shares one.
    pub fn from_repr(repr: PersistentRepr, offset: Offset) -> Self {
        let entity_type = Arc::from(entity_type_of(&repr.persistence_id));
        Self::from_repr_with_entity_type(repr, offset, entity_type)
    }

    /// The envelope of a stored event, with `offset`, sharing `entity_type` when it is the
    /// entity type of the event's persistence id ([`entity_type_of`]; else the envelope gets
    /// its own): a query shares one `Arc` among its envelopes of one entity type.
    pub fn from_repr_with_entity_type(
        repr: PersistentRepr,
        offset: Offset,
        entity_type: Arc<str>,
    ) -> Self {
        let own = entity_type_of(&repr.persistence_id);
        let entity_type = if *entity_type == *own {
            entity_type
        } else {
            Arc::from(own)
        };
        let slice = slice_for_persistence_id(&repr.persistence_id);
        Self::from_repr_in_slice(repr, offset, slice, entity_type)
    }

    /// The envelope of a stored event whose persistence id's slice and entity type the caller
    /// knows (`slice_for_persistence_id`, `entity_type_of` of it: a run of one id's events
    /// finds them once).
    pub(crate) fn from_repr_in_slice(
        repr: PersistentRepr,
        offset: Offset,
        slice: u16,
        entity_type: Arc<str>,
    ) -> Self {
        debug_assert_eq!(slice, slice_for_persistence_id(&repr.persistence_id));
        debug_assert_eq!(&*entity_type, entity_type_of(&repr.persistence_id));
        EventEnvelope {
            slice,
            entity_type,
            persistence_id: repr.persistence_id,
            seq_nr: repr.seq_nr,
            offset,
            timestamp: repr.timestamp,
            tags: repr.tags,
            writer_uuid: repr.writer_uuid,
            event: SerializedEvent {
                payload: repr.payload,
                serializer_id: repr.serializer_id,
                manifest: repr.manifest,
            },
        }
    }

    /// Decodes the event with `decoder`.
    ///
    /// # Errors
    /// [`QueryError::Decode`] naming the persistence id and sequence number when the decoder
    /// fails, or panics: a panic is caught and becomes that error (as a panicking
    /// `EventSourced::deserialize_event` fails recovery), so it ends a typed query with an
    /// error item and fails a projection's run (which restarts), instead of unwinding into
    /// the stream's consumer (a projection's task).
    pub fn decode<E, D: EventDecoder<E> + ?Sized>(
        self,
        decoder: &D,
    ) -> Result<EventEnvelope<E>, QueryError> {
        let seq_nr = self.seq_nr;
        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            decoder.decode(seq_nr, &self.event)
        }))
        .unwrap_or_else(|panic| {
            Err(SerializationError::Deserialize {
                seq_nr,
                reason: format!("the event decoder panicked: {}", panic_message(&*panic)),
            })
        });
        let event = decoded.map_err(|source| QueryError::Decode {
            persistence_id: self.persistence_id.to_string(),
            seq_nr,
            source,
        })?;
        Ok(EventEnvelope {
            persistence_id: self.persistence_id,
            seq_nr: self.seq_nr,
            offset: self.offset,
            timestamp: self.timestamp,
            tags: self.tags,
            slice: self.slice,
            entity_type: self.entity_type,
            writer_uuid: self.writer_uuid,
            event,
        })
    }
}

/// Turns a stored event back into the event type `E`. Use the serializer the persistent actor
/// wrote with: [`JsonDecoder`] for the default (serde_json), or a closure
/// `|seq_nr, event| ...` matching a custom `EventSourced::deserialize_event`.
pub trait EventDecoder<E>: Send + Sync + 'static {
    /// Decodes `event`, stored at `seq_nr`.
    ///
    /// # Errors
    /// The [`SerializationError`] of the serializer.
    fn decode(&self, seq_nr: u64, event: &SerializedEvent) -> Result<E, SerializationError>;
}

impl<E, F> EventDecoder<E> for F
where
    F: Fn(u64, &SerializedEvent) -> Result<E, SerializationError> + Send + Sync + 'static,
{
    fn decode(&self, seq_nr: u64, event: &SerializedEvent) -> Result<E, SerializationError> {
        self(seq_nr, event)
    }
}

/// Decodes events written by the default serializer (serde_json,
/// [`JSON_SERIALIZER_ID`](crate::serialization::JSON_SERIALIZER_ID)).
pub struct JsonDecoder<E>(PhantomData<fn() -> E>);

impl<E> JsonDecoder<E> {
    /// The decoder.
    pub fn new() -> Self {
        JsonDecoder(PhantomData)
    }
}

impl<E> Default for JsonDecoder<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: DeserializeOwned + 'static> EventDecoder<E> for JsonDecoder<E> {
    fn decode(&self, seq_nr: u64, event: &SerializedEvent) -> Result<E, SerializationError> {
        from_json(seq_nr, event.serializer_id, &event.payload)
    }
}

/// Decoding adapters for [`EnvelopeStream`]s.
///
/// # Examples
/// ```no_run
/// # use actix_persistence_core::query::{EnvelopeStreamExt, Offset, ReadJournal};
/// # use futures::TryStreamExt;
/// # async fn example(query: ReadJournal) -> Result<(), Box<dyn std::error::Error>> {
/// #[derive(serde::Deserialize)]
/// enum AccountEvent { Deposited(u64), Withdrawn(u64) }
///
/// let mut events = query
///     .current_events_by_slices("Account", 0, 1023, Offset::NoOffset)
///     .decode_json::<AccountEvent>();
/// while let Some(envelope) = events.try_next().await? {
///     // envelope.event: AccountEvent; store envelope.offset to resume later
/// }
/// # Ok(())
/// # }
/// ```
pub trait EnvelopeStreamExt {
    /// Decodes every event with serde_json (the default serializer).
    fn decode_json<E: DeserializeOwned + Send + 'static>(self) -> TypedEnvelopeStream<E>;

    /// Decodes every event with `decoder`; a failure ends the stream with
    /// [`QueryError::Decode`].
    fn decode_with<E: Send + 'static, D: EventDecoder<E>>(
        self,
        decoder: D,
    ) -> TypedEnvelopeStream<E>;
}

impl EnvelopeStreamExt for EnvelopeStream {
    fn decode_json<E: DeserializeOwned + Send + 'static>(self) -> TypedEnvelopeStream<E> {
        self.decode_with(JsonDecoder::<E>::new())
    }

    fn decode_with<E: Send + 'static, D: EventDecoder<E>>(
        self,
        decoder: D,
    ) -> TypedEnvelopeStream<E> {
        let mut failed = false;
        self.map(move |item| item.and_then(|envelope| envelope.decode(&decoder)))
            .take_while(move |item| {
                let go_on = !failed;
                failed = item.is_err();
                futures::future::ready(go_on)
            })
            .boxed()
    }
}
