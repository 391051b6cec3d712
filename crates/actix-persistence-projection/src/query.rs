//! Sources over persistence queries: the events of a slice range or of a tag, from a
//! [`ReadJournal`] (in-memory, SQLite or PostgreSQL), as Akka Projections'
//! `EventSourcedProvider.eventsBySlices` and `eventsByTag`.

use std::sync::Arc;

use actix_persistence_core::query::{
    EventDecoder, EventFilter, EventKey, EventsRequest, JsonDecoder, TimestampOffset,
};
/// The query types a projection over a [`QuerySource`] meets, from
/// `actix_persistence_core::query`.
#[doc(no_inline)]
pub use actix_persistence_core::query::{EventEnvelope, Offset, QuerySettings, ReadJournal};
use async_trait::async_trait;
use futures::StreamExt;
use serde::de::DeserializeOwned;

use crate::error::BoxError;
use crate::source::{
    Coverage, Envelope, EnvelopeStream, HandledElsewhere, Resume, SourceLag, SourceProvider,
};
use crate::ProjectionId;

/// [`SourceProvider::lag`] of a [`QuerySource`] counts at most this many events behind (it
/// reads them): a larger lag shows as this number.
pub const LAG_COUNT_LIMIT: u32 = 10_000;

impl<Ev: Send + Sync + 'static> Envelope for EventEnvelope<Ev> {
    type Offset = Offset;

    fn persistence_id(&self) -> &str {
        &self.persistence_id
    }

    fn seq_nr(&self) -> u64 {
        self.seq_nr
    }

    fn offset(&self) -> Offset {
        self.offset.clone()
    }

    fn timestamp_ms(&self) -> i64 {
        self.timestamp
    }
}

/// What a [`QuerySource`] reads.
#[derive(Debug, Clone)]
enum Filter {
    Slices {
        entity_type: String,
        min_slice: u16,
        max_slice: u16,
    },
    Tag(String),
}

/// A projection's source over a persistence query: the events of the persistence ids of one
/// entity type whose slice lies in a range, or the events carrying a tag, decoded to `Ev`
/// (JSON by default). Live by default (keeps delivering new events);
/// [`current`](Self::current) makes it end at the events stored when it starts, and the
/// projection then completes.
///
/// Delivers every event after the offset once, each persistence id in seq_nr order, also when
/// events commit late (the query's contract, see `docs/architecture.md`, "Queries").
pub struct QuerySource<Ev> {
    journal: ReadJournal,
    filter: Filter,
    live: bool,
    decoder: Arc<dyn EventDecoder<Ev>>,
}

impl<Ev> std::fmt::Debug for QuerySource<Ev> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuerySource")
            .field("filter", &self.filter)
            .field("live", &self.live)
            .finish_non_exhaustive()
    }
}

impl<Ev: DeserializeOwned + Send + Sync + 'static> QuerySource<Ev> {
    /// The events of entity type `entity_type` (the part of the persistence id before `|`,
    /// empty for ids without it) in slices `min_slice..=max_slice`, decoded from JSON.
    pub fn events_by_slices(
        journal: ReadJournal,
        entity_type: impl Into<String>,
        min_slice: u16,
        max_slice: u16,
    ) -> Self {
        Self::with_decoder(
            journal,
            Filter::Slices {
                entity_type: entity_type.into(),
                min_slice,
                max_slice,
            },
            JsonDecoder::<Ev>::new(),
        )
    }

    /// The events tagged `tag`, decoded from JSON.
    pub fn events_by_tag(journal: ReadJournal, tag: impl Into<String>) -> Self {
        Self::with_decoder(journal, Filter::Tag(tag.into()), JsonDecoder::<Ev>::new())
    }
}

impl<Ev: Send + Sync + 'static> QuerySource<Ev> {
    fn with_decoder(journal: ReadJournal, filter: Filter, decoder: impl EventDecoder<Ev>) -> Self {
        QuerySource {
            journal,
            filter,
            live: true,
            decoder: Arc::new(decoder),
        }
    }

    /// Decodes events with `decoder` instead of JSON.
    pub fn decoded_with<Other: Send + Sync + 'static>(
        self,
        decoder: impl EventDecoder<Other>,
    ) -> QuerySource<Other> {
        QuerySource::with_decoder(self.journal, self.filter, decoder)
    }

    /// Ends at the events stored when the source is opened (a `current_*` query): the
    /// projection completes once it handled them (rebuilds, batch jobs, benchmarks).
    pub fn current(mut self) -> Self {
        self.live = false;
        self
    }

    fn event_filter(&self) -> EventFilter {
        match &self.filter {
            Filter::Slices {
                entity_type,
                min_slice,
                max_slice,
            } => EventFilter::Slices {
                entity_type: entity_type.clone(),
                min_slice: *min_slice,
                max_slice: *max_slice,
            },
            Filter::Tag(tag) => EventFilter::Tag(tag.clone()),
        }
    }
}

#[async_trait]
impl<Ev: Send + Sync + 'static> SourceProvider for QuerySource<Ev> {
    type Envelope = EventEnvelope<Ev>;

    async fn source(
        &self,
        offset: Option<Offset>,
    ) -> Result<EnvelopeStream<Self::Envelope>, BoxError> {
        let offset = offset.unwrap_or_default();
        let raw = match (&self.filter, self.live) {
            (
                Filter::Slices {
                    entity_type,
                    min_slice,
                    max_slice,
                },
                true,
            ) => self
                .journal
                .events_by_slices(entity_type, *min_slice, *max_slice, offset),
            (
                Filter::Slices {
                    entity_type,
                    min_slice,
                    max_slice,
                },
                false,
            ) => self
                .journal
                .current_events_by_slices(entity_type, *min_slice, *max_slice, offset),
            (Filter::Tag(tag), true) => self.journal.events_by_tag(tag, offset),
            (Filter::Tag(tag), false) => self.journal.current_events_by_tag(tag, offset),
        };
        let decoder = Arc::clone(&self.decoder);
        Ok(raw
            .map(move |item| {
                item.and_then(|envelope| envelope.decode(&*decoder))
                    .map_err(BoxError::from)
            })
            .boxed())
    }

    /// By slices: per slice of this source's range, the most advanced progress (the latest
    /// timestamp) of this instance and of every other whose key names a slice range holding
    /// that slice ([`ProjectionId::slice_range`]); the source opens after the least advanced
    /// of those (from the beginning when a slice has none), and skips each envelope that any
    /// of them covers: written before its timestamp, or at most its seen sequence number of
    /// the persistence id. By tag: after `own`.
    fn slice_range(&self) -> Option<(u16, u16)> {
        match self.filter {
            Filter::Slices {
                min_slice,
                max_slice,
                ..
            } => Some((min_slice, max_slice)),
            Filter::Tag(_) => None,
        }
    }

    /// Timestamp offsets by their timestamp, then (at one timestamp) by how many events of it
    /// they saw; sequence offsets by their sequence number; the beginning before either.
    fn compare_offsets(&self, a: &Offset, b: &Offset) -> Option<std::cmp::Ordering> {
        match (a, b) {
            (Offset::NoOffset, Offset::NoOffset) => Some(std::cmp::Ordering::Equal),
            (Offset::NoOffset, _) => Some(std::cmp::Ordering::Less),
            (_, Offset::NoOffset) => Some(std::cmp::Ordering::Greater),
            (Offset::Timestamp(a), Offset::Timestamp(b)) => {
                Some((a.timestamp, a.seen.len()).cmp(&(b.timestamp, b.seen.len())))
            }
            (Offset::Sequence { seq_nr: a }, Offset::Sequence { seq_nr: b }) => Some(a.cmp(b)),
            _ => None,
        }
    }

    fn resume(
        &self,
        own: Option<Offset>,
        others: Vec<(ProjectionId, Option<Offset>)>,
    ) -> Resume<Self::Envelope> {
        let Filter::Slices {
            min_slice,
            max_slice,
            ..
        } = self.filter
        else {
            return Resume::after(own);
        };
        let overlapping: Vec<(ProjectionId, (u16, u16), Option<Offset>)> = others
            .into_iter()
            .filter_map(|(id, offset)| {
                let (min, max) = id.slice_range()?;
                (min <= max_slice && max >= min_slice).then_some((id, (min, max), offset))
            })
            .collect();
        if overlapping.is_empty() {
            return Resume::after(own);
        }
        let inherited = overlapping.iter().map(|(id, ..)| id.clone()).collect();
        // The progress that covers slices, own first: (slice range, timestamp offset).
        let mut covering: Vec<((u16, u16), TimestampOffset)> = Vec::new();
        if let Some(Offset::Timestamp(offset)) = &own {
            covering.push(((min_slice, max_slice), offset.clone()));
        }
        for (_, range, offset) in overlapping {
            if let Some(Offset::Timestamp(offset)) = offset {
                covering.push((range, offset));
            }
        }
        // Per slice, the most advanced progress; the source opens after the least advanced
        // of those. A slice nobody covers is read from the beginning.
        let mut start: Option<usize> = None;
        for slice in min_slice..=max_slice {
            let best = covering
                .iter()
                .enumerate()
                .filter(|(_, ((min, max), _))| (*min..=*max).contains(&slice))
                .max_by_key(|(_, (_, offset))| offset.timestamp)
                .map(|(i, _)| i);
            let Some(best) = best else {
                start = None;
                break;
            };
            if start.map_or(true, |s| {
                covering[best].1.timestamp < covering[s].1.timestamp
            }) {
                start = Some(best);
            }
        }
        let offset = start.map(|i| Offset::Timestamp(covering[i].1.clone()));
        // No envelope after this timestamp is covered by any of them.
        let horizon = covering
            .iter()
            .flat_map(|(_, offset)| {
                std::iter::once(offset.timestamp)
                    .chain(offset.seen.iter().map(|(_, seen)| seen.timestamp))
            })
            .max()
            .unwrap_or(i64::MIN);
        let handled_elsewhere: HandledElsewhere<Self::Envelope> =
            Box::new(move |envelope: &Self::Envelope| {
                let Offset::Timestamp(after) = &envelope.offset else {
                    return Coverage::New;
                };
                // The query's settled timestamp never goes back, and every later envelope is
                // written at or after it.
                if after.timestamp > horizon {
                    return Coverage::NoneAfter;
                }
                let pid = &*envelope.persistence_id;
                // The envelope's own database timestamp (its entry in its offset's seen map,
                // which sorts that map: read only when the settled timestamp, a lower bound,
                // does not decide).
                let mut written = None;
                let handled = covering.iter().any(|((min, max), offset)| {
                    if !(*min..=*max).contains(&envelope.slice) {
                        return false;
                    }
                    if offset
                        .seen
                        .get(pid)
                        .is_some_and(|seen| seen.seq_nr >= envelope.seq_nr)
                    {
                        return true;
                    }
                    after.timestamp < offset.timestamp
                        && *written.get_or_insert_with(|| {
                            after.seen.get(pid).map_or(i64::MAX, |seen| seen.timestamp)
                        }) < offset.timestamp
                });
                if handled {
                    Coverage::Handled
                } else {
                    Coverage::New
                }
            });
        Resume {
            offset,
            handled_elsewhere: Some(handled_elsewhere),
            inherited,
        }
    }

    async fn lag(&self, offset: Option<&Offset>) -> Result<SourceLag, BoxError> {
        let (after, seen) = match offset {
            None | Some(Offset::NoOffset) => (EventKey::start_of(i64::MIN), Default::default()),
            Some(Offset::Timestamp(offset)) => {
                (EventKey::start_of(offset.timestamp), offset.seen.clone())
            }
            Some(other @ Offset::Sequence { .. }) => {
                return Err(format!("a query by slice or tag has no lag from {other:?}").into())
            }
        };
        let filter = self.event_filter();
        let events = self
            .journal
            .store()
            .read_events(EventsRequest {
                filter: &filter,
                after: &after,
                before_timestamp: i64::MAX,
                limit: LAG_COUNT_LIMIT,
                with_previous_timestamp: false,
            })
            .await?;
        let behind: Vec<_> = events
            .iter()
            .filter(|e| {
                seen.get(&e.repr.persistence_id)
                    .map_or(true, |s| s.seq_nr < e.repr.seq_nr)
            })
            .collect();
        Ok(SourceLag {
            events: behind.len() as u64,
            oldest_timestamp_ms: behind.iter().map(|e| e.repr.timestamp).min(),
        })
    }
}
