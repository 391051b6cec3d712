//! [`ReadJournal`]: the queries users call.

use std::sync::Arc;

use futures::future;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use tokio::time::Instant;

use super::engine::OffsetQuery;
use super::own_task::in_own_task;
use super::{
    EnvelopeStream, EventFilter, Offset, QueryError, QuerySettings, QueryStore, RawEnvelope,
    WriteNotifications, NUMBER_OF_SLICES,
};
use crate::store::MAX_SEQ_NR;

/// The read side of a journal (as Akka's `ReadJournal` with `EventsBySliceQuery`,
/// `EventsByTagQuery`, `EventsByPersistenceIdQuery` and `CurrentPersistenceIdsQuery`): queries
/// over the events of every persistent actor, without an actor runtime (a Tokio runtime drives
/// the streams).
///
/// Every query comes in two forms: `current_*` ends at the events stored when it started;
/// the live form keeps delivering new events, polling every
/// [`refresh_interval`](QuerySettings::refresh_interval) and, when the journal runs in the
/// same process, as soon as it commits. Both are [`futures::Stream`]s read page by page
/// ([`page_size`](QuerySettings::page_size) events per read): memory stays bounded, and a
/// consumer that stops pulling stops the reading.
///
/// # Guarantees (checked by the testkit's query conformance suite)
/// - A query never delivers the same (persistence id, sequence number) twice, also across a
///   resume from an envelope's offset.
/// - Events of one persistence id are delivered in sequence-number order.
/// - Deleted events are not delivered. An event deleted after the page holding it was read (a page
///   is read ahead while the previous one is delivered) is still delivered:
///   a query delivers what it read.
/// - Queries by slice and by tag deliver an event whose transaction commits late (after events
///   inserted after it were delivered) at most
///   [`late_commit_window`](QuerySettings::late_commit_window) plus one refresh interval
///   after it was inserted, provided its transaction committed within that window; a write
///   that rolled back holds nothing up.
///
/// Cheap to clone.
#[derive(Clone)]
pub struct ReadJournal {
    store: Arc<dyn QueryStore>,
    settings: QuerySettings,
}

impl std::fmt::Debug for ReadJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadJournal")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ReadJournal {
    /// The queries over `store`.
    ///
    /// # Examples
    /// ```
    /// # use actix_persistence_core as actix_persistence; // the paths of the facade, `actix-persistence`
    /// use actix_persistence::query::{QuerySettings, ReadJournal};
    /// use actix_persistence::InMemoryJournal;
    ///
    /// let journal = InMemoryJournal::new();
    /// let query = ReadJournal::new(journal.clone(), QuerySettings::default());
    /// ```
    pub fn new(store: impl QueryStore, settings: QuerySettings) -> Self {
        Self::from_arc(Arc::new(store), settings)
    }

    /// The queries over a shared store.
    pub fn from_arc(store: Arc<dyn QueryStore>, settings: QuerySettings) -> Self {
        ReadJournal { store, settings }
    }

    /// The settings in force.
    pub fn settings(&self) -> &QuerySettings {
        &self.settings
    }

    /// The store queried.
    pub fn store(&self) -> &Arc<dyn QueryStore> {
        &self.store
    }

    /// The events of `persistence_id` with `from_seq_nr <= seq_nr <= to_seq_nr`, ascending,
    /// as stored when the query runs (each page is read when pulled); then the stream ends.
    /// Offsets are [`Offset::Sequence`].
    ///
    /// It reads the id's highest sequence number first and replays up to it (at most
    /// `to_seq_nr`): every event up to it has committed, so the events it delivers have no gap
    /// but the holes of deleted or rejected numbers. A replay read past it (pages of windows of
    /// sequence numbers) took a window whose events had not all committed for one with holes,
    /// and read the next window after they had: it went on past them.
    pub fn current_events_by_persistence_id(
        &self,
        persistence_id: &str,
        from_seq_nr: u64,
        to_seq_nr: u64,
    ) -> EnvelopeStream {
        let store = Arc::clone(&self.store);
        let persistence_id = persistence_id.to_owned();
        stream::once(async move {
            match read_highest_in_task(&store, &persistence_id, from_seq_nr).await {
                Ok(highest) => {
                    replay_envelopes(&store, &persistence_id, from_seq_nr, to_seq_nr.min(highest))
                }
                Err(error) => stream::iter([Err(QueryError::from(error))]).boxed(),
            }
        })
        .flatten()
        .boxed()
    }

    /// As [`current_events_by_persistence_id`](Self::current_events_by_persistence_id), then
    /// keeps delivering new events of `persistence_id` (`to_seq_nr` = `MAX_SEQ_NR`: never
    /// ends).
    ///
    /// Stored events are read page after page without waiting; once a page is not full, the
    /// query waits for the next refresh interval or a write notification before it reads again.
    ///
    /// It ends once every event up to `to_seq_nr` was delivered: when the id's highest sequence
    /// number has reached `to_seq_nr` and the events up to it were read. Numbers below it that
    /// hold no event (deleted, or never stored, as a rejected write leaves) are not waited for;
    /// an empty range (`to_seq_nr` 0, or `from_seq_nr` above it) ends at once.
    pub fn events_by_persistence_id(
        &self,
        persistence_id: &str,
        from_seq_nr: u64,
        to_seq_nr: u64,
    ) -> EnvelopeStream {
        struct State {
            query: ReadJournal,
            persistence_id: String,
            next: u64,
            to: u64,
            notifications: Option<WriteNotifications>,
            /// Whether the last page was not full: the next read waits for a round.
            wait: bool,
        }
        let state = State {
            query: self.clone(),
            persistence_id: persistence_id.to_owned(),
            next: from_seq_nr.max(1),
            to: to_seq_nr,
            notifications: self.store.write_notifications(),
            wait: false,
        };
        stream::unfold(Some(state), |state| async move {
            let mut state = state?;
            if state.next > state.to {
                return None;
            }
            if state.wait {
                let deadline =
                    crate::clock::far_future_saturating(state.query.settings.refresh_interval);
                wait_for_round(deadline, state.notifications.as_mut()).await;
            }
            // Read before the page: every event up to the highest sequence number is
            // committed then, so a page read afterwards up to it holds all of them there are
            // (read past it, a replay can take numbers not committed yet for holes and go on
            // past them; see `current_events_by_persistence_id`).
            let highest =
                read_highest_in_task(&state.query.store, &state.persistence_id, state.next).await;
            let highest = match highest {
                Ok(highest) => highest,
                Err(error) => {
                    return Some((stream::iter(vec![Err(QueryError::from(error))]), None));
                }
            };
            let page_size = state.query.settings.page_size.max(1) as usize;
            let page: Vec<_> = if highest < state.next {
                Vec::new()
            } else {
                let to = state.to.min(highest);
                replay_envelopes(&state.query.store, &state.persistence_id, state.next, to)
                    .take(page_size)
                    .collect()
                    .await
            };
            let mut failed = false;
            for item in &page {
                match item {
                    Ok(envelope) => state.next = envelope.seq_nr.saturating_add(1),
                    Err(_) => failed = true,
                }
            }
            let full = page.len() >= page_size;
            state.wait = !full;
            // Every event up to `to` is stored and was read: nothing more will come.
            let complete = !full && highest >= state.to;
            let next_state = if failed || complete {
                None
            } else {
                Some(state)
            };
            Some((stream::iter(page), next_state))
        })
        .flatten()
        .boxed()
    }

    /// The events of the persistence ids of `entity_type` whose slice is in
    /// `min_slice..=max_slice`, after `offset`, in database-timestamp order, up to the events
    /// stored when the query started; then the stream ends (as Akka's
    /// `currentEventsBySlices`).
    ///
    /// A slice is [`slice_for_persistence_id`](super::slice_for_persistence_id); the ranges of
    /// [`slice_ranges`](super::slice_ranges) split the persistence ids between queries with no
    /// overlap and no hole.
    ///
    /// # Errors
    /// The stream yields [`QueryError::InvalidSliceRange`] for a bad range and
    /// [`QueryError::InvalidOffset`] for an [`Offset::Sequence`], then ends.
    pub fn current_events_by_slices(
        &self,
        entity_type: &str,
        min_slice: u16,
        max_slice: u16,
        offset: Offset,
    ) -> EnvelopeStream {
        self.by_slices(entity_type, min_slice, max_slice, offset, false)
    }

    /// As [`current_events_by_slices`](Self::current_events_by_slices), then keeps delivering
    /// new events (as Akka's `eventsBySlices`); never ends unless it fails.
    pub fn events_by_slices(
        &self,
        entity_type: &str,
        min_slice: u16,
        max_slice: u16,
        offset: Offset,
    ) -> EnvelopeStream {
        self.by_slices(entity_type, min_slice, max_slice, offset, true)
    }

    /// The events tagged `tag`, after `offset`, in database-timestamp order, up to the events
    /// stored when the query started; then the stream ends (as Akka's `currentEventsByTag`).
    ///
    /// # Errors
    /// The stream yields [`QueryError::InvalidOffset`] for an [`Offset::Sequence`], then ends.
    pub fn current_events_by_tag(&self, tag: &str, offset: Offset) -> EnvelopeStream {
        OffsetQuery::start(
            Arc::clone(&self.store),
            EventFilter::Tag(tag.to_owned()),
            self.settings.clone(),
            offset,
            false,
            "current events by tag",
        )
    }

    /// As [`current_events_by_tag`](Self::current_events_by_tag), then keeps delivering new
    /// events (as Akka's `eventsByTag`); never ends unless it fails.
    pub fn events_by_tag(&self, tag: &str, offset: Offset) -> EnvelopeStream {
        OffsetQuery::start(
            Arc::clone(&self.store),
            EventFilter::Tag(tag.to_owned()),
            self.settings.clone(),
            offset,
            true,
            "events by tag",
        )
    }

    /// The persistence ids that stored events (also those whose events were all deleted), in
    /// ascending byte order, after `after` (exclusive) when given, at most `limit` of them,
    /// read [`page_size`](QuerySettings::page_size) at a time (as Akka r2dbc's
    /// `currentPersistenceIds(afterId, limit)`).
    pub fn current_persistence_ids(
        &self,
        after: Option<&str>,
        limit: u64,
    ) -> BoxStream<'static, Result<String, QueryError>> {
        let store = Arc::clone(&self.store);
        let page_size = self.settings.page_size.max(1);
        let start = (after.map(str::to_owned), limit, false);
        stream::unfold(start, move |(after, remaining, done)| {
            let store = Arc::clone(&store);
            async move {
                if done || remaining == 0 {
                    return None;
                }
                let limit = u32::try_from(remaining).unwrap_or(u32::MAX).min(page_size);
                // In a task of its own, as every read of a query (`in_own_task`).
                let read_after = after.clone();
                let page = in_own_task("read persistence ids", async move {
                    store
                        .read_persistence_ids(read_after.as_deref(), limit)
                        .await
                });
                match page.await {
                    Ok(mut ids) => {
                        // A store that answers more than asked is held to the limit.
                        ids.truncate(limit as usize);
                        let last_page = ids.len() < limit as usize;
                        let next_after = ids.last().cloned().or(after);
                        let remaining = remaining.saturating_sub(ids.len() as u64);
                        let items: Vec<Result<String, QueryError>> =
                            ids.into_iter().map(Ok).collect();
                        Some((stream::iter(items), (next_after, remaining, last_page)))
                    }
                    Err(error) => Some((
                        stream::iter(vec![Err(QueryError::from(error))]),
                        (None, 0, true),
                    )),
                }
            }
        })
        .flatten()
        .boxed()
    }

    fn by_slices(
        &self,
        entity_type: &str,
        min_slice: u16,
        max_slice: u16,
        offset: Offset,
        live: bool,
    ) -> EnvelopeStream {
        if min_slice > max_slice || max_slice >= NUMBER_OF_SLICES {
            let error = QueryError::InvalidSliceRange {
                min_slice,
                max_slice,
            };
            return stream::once(future::ready(Err(error))).boxed();
        }
        let filter = EventFilter::Slices {
            entity_type: entity_type.to_owned(),
            min_slice,
            max_slice,
        };
        let query = if live {
            "events by slices"
        } else {
            "current events by slices"
        };
        OffsetQuery::start(
            Arc::clone(&self.store),
            filter,
            self.settings.clone(),
            offset,
            live,
            query,
        )
    }
}

fn sequence_envelope(repr: crate::store::PersistentRepr, entity_type: Arc<str>) -> RawEnvelope {
    let seq_nr = repr.seq_nr;
    RawEnvelope::from_repr_with_entity_type(repr, Offset::Sequence { seq_nr }, entity_type)
}

/// The stored events of `persistence_id` from `from_seq_nr` to `to_seq_nr` as envelopes;
/// `to_seq_nr` at most the highest sequence number read before (see
/// [`ReadJournal::current_events_by_persistence_id`]).
fn replay_envelopes(
    store: &Arc<dyn QueryStore>,
    persistence_id: &str,
    from_seq_nr: u64,
    to_seq_nr: u64,
) -> EnvelopeStream {
    // One entity type for the whole query, shared by its envelopes.
    let entity_type: Arc<str> = Arc::from(super::entity_type_of(persistence_id));
    // A store that panics ends the stream with an error, as in a recovery's replay.
    let replay = || store.replay_messages(persistence_id, from_seq_nr, to_seq_nr, MAX_SEQ_NR);
    match crate::store::replay_catching_panics(replay) {
        Ok(events) => events
            .map_ok(move |repr| sequence_envelope(repr, Arc::clone(&entity_type)))
            .map_err(QueryError::from)
            .boxed(),
        Err(error) => stream::iter([Err(QueryError::from(error))]).boxed(),
    }
}

/// The highest sequence number of `persistence_id` (from `from`), read in a task of its own
/// ([`in_own_task`]): a read under way completes and gives its database connection back also
/// when the consumer stops pulling in the middle of it.
async fn read_highest_in_task(
    store: &Arc<dyn QueryStore>,
    persistence_id: &str,
    from: u64,
) -> Result<u64, crate::error::JournalError> {
    let store = Arc::clone(store);
    let persistence_id = persistence_id.to_owned();
    in_own_task("read the highest sequence number", async move {
        store.read_highest_sequence_nr(&persistence_id, from).await
    })
    .await
}

/// Waits until `deadline`, or a write notification when there are any.
pub(crate) async fn wait_for_round(
    deadline: Instant,
    notifications: Option<&mut WriteNotifications>,
) {
    let round = tokio::time::sleep_until(deadline);
    match notifications {
        None => round.await,
        Some(notifications) => {
            let notified = notifications.notified();
            futures::pin_mut!(round, notified);
            future::select(round, notified).await;
        }
    }
}
