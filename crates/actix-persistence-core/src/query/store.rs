//! What a journal store implements to answer queries ([`QueryStore`]); the query logic
//! itself (offsets, deduplication, late commits, live polling) is shared, in
//! [`ReadJournal`](super::ReadJournal).

use std::cmp::Ordering;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::JournalError;
use crate::store::{JournalStore, PersistentRepr};

/// Which events a query by offset reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventFilter {
    /// The events of the persistence ids of `entity_type` whose slice is in
    /// `min_slice..=max_slice`.
    Slices {
        /// The entity type ([`entity_type_of`](super::entity_type_of)).
        entity_type: String,
        /// The lowest slice, 0..=1023.
        min_slice: u16,
        /// The highest slice, `min_slice..=1023`.
        max_slice: u16,
    },
    /// The events carrying this tag.
    Tag(String),
}

impl EventFilter {
    /// Whether `event` (of persistence id slice `slice`) passes the filter.
    pub fn matches(&self, event: &PersistentRepr, slice: u16) -> bool {
        match self {
            EventFilter::Slices {
                entity_type,
                min_slice,
                max_slice,
            } => {
                (*min_slice..=*max_slice).contains(&slice)
                    && super::entity_type_of(&event.persistence_id) == entity_type
            }
            EventFilter::Tag(tag) => event.tags.iter().any(|t| t == tag),
        }
    }
}

/// The position of a stored event in the order queries by offset read: database timestamp,
/// then persistence id (byte order), then sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct EventKey {
    /// Database timestamp, microseconds since the Unix epoch.
    pub timestamp: i64,
    /// The persistence id, shared with the event's ([`PersistentRepr::persistence_id`]): a
    /// query moves its position once per event, a clone of the `Arc` (O(1), no copy).
    pub persistence_id: Arc<str>,
    /// The sequence number.
    pub seq_nr: u64,
}

impl EventKey {
    /// The position before every event with `timestamp` (and after every earlier one).
    pub fn start_of(timestamp: i64) -> Self {
        EventKey {
            timestamp,
            persistence_id: Arc::default(),
            seq_nr: 0,
        }
    }
}

impl PartialOrd for EventKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for EventKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.timestamp
            .cmp(&other.timestamp)
            .then_with(|| {
                self.persistence_id
                    .as_bytes()
                    .cmp(other.persistence_id.as_bytes())
            })
            .then_with(|| self.seq_nr.cmp(&other.seq_nr))
    }
}

/// One page of a query by offset, as the engine asks a [`QueryStore`] for it.
#[derive(Debug, Clone)]
pub struct EventsRequest<'a> {
    /// Which events.
    pub filter: &'a EventFilter,
    /// Only events after this position (exclusive).
    pub after: &'a EventKey,
    /// Only events with a database timestamp below this (exclusive), microseconds.
    pub before_timestamp: i64,
    /// At most this many events, the first ones in [`EventKey`] order.
    pub limit: u32,
    /// Whether to fill [`StoredEvent::previous_timestamp`] and
    /// [`StoredEvent::previous_seq_nr`].
    pub with_previous_timestamp: bool,
}

/// A stored event with its query position.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// Its database timestamp, microseconds since the Unix epoch.
    pub timestamp: i64,
    /// The event.
    pub repr: PersistentRepr,
    /// The database timestamp of the previous stored event of the same persistence id that
    /// matches the request's filter: the highest sequence number below this one (for a tag:
    /// among the events carrying the tag). `None` when there is none (the first, or the
    /// earlier ones are deleted). Only filled when the request asks for it.
    pub previous_timestamp: Option<i64>,
    /// The sequence number of that previous event (`None` as for `previous_timestamp`).
    pub previous_seq_nr: Option<u64>,
}

impl StoredEvent {
    /// Its position (sharing the event's persistence id: no copy).
    pub fn key(&self) -> EventKey {
        EventKey {
            timestamp: self.timestamp,
            persistence_id: Arc::clone(&self.repr.persistence_id),
            seq_nr: self.repr.seq_nr,
        }
    }
}

/// A journal store that answers queries. The store keeps, with every event, a **database
/// timestamp**: microseconds since the Unix epoch on the database's clock, taken when the
/// event is inserted (before its transaction commits), never lower than the timestamp of the
/// same persistence id's previous event, and visible only once that previous event is, also
/// when a caller issues one id's writes without waiting for each other (query conformance
/// case Q15). The slice and the entity type of the persistence id
/// are stored with it, so a page of a slice range is one indexed read.
///
/// Implementations only read pages; [`ReadJournal`](super::ReadJournal) builds the current and
/// live queries, their offsets and their guarantees on top (see `docs/architecture.md`). The
/// query conformance suite (`query_conformance_tests!` in the testkit) checks an
/// implementation.
#[async_trait]
pub trait QueryStore: JournalStore {
    /// The database clock now, microseconds since the Unix epoch: the clock the stored
    /// database timestamps are taken from.
    ///
    /// # Errors
    /// [`JournalError`] when the store cannot be reached.
    async fn current_timestamp(&self) -> Result<i64, JournalError>;

    /// The stored (not deleted) events matching `request.filter`, with
    /// `key > request.after` and `timestamp < request.before_timestamp`, ascending by
    /// [`EventKey`], at most `request.limit`.
    ///
    /// # Errors
    /// [`JournalError`] when the store cannot be read or a row is corrupt.
    async fn read_events(
        &self,
        request: EventsRequest<'_>,
    ) -> Result<Vec<StoredEvent>, JournalError>;

    /// Persistence ids that stored at least one event (also when all were deleted since),
    /// ascending byte order, those after `after` (exclusive) only, at most `limit`.
    ///
    /// # Errors
    /// [`JournalError`] when the store cannot be read.
    async fn read_persistence_ids(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>, JournalError>;

    /// A timestamp below which every event is committed now and no event will be stored
    /// later (exclusive), for a store whose writes commit in timestamp order: one writer at a
    /// time, each taking a timestamp above every one given before (SQLite's journal). A query
    /// settles up to it without waiting out `late-commit-window` (as well as up to its clock
    /// minus the window): live queries see committed events at once, and a wall clock that
    /// stepped back (the store stamping above it) does not hold the settled position back
    /// while the stamps run ahead of it. `None` (the default): the window alone decides, as
    /// it must where concurrent transactions commit out of timestamp order (PostgreSQL).
    ///
    /// # Errors
    /// [`JournalError`] when the store cannot be reached.
    async fn committed_before(&self) -> Result<Option<i64>, JournalError> {
        Ok(None)
    }

    /// Notifications of writes by this process: a store that sends one after every commit
    /// (see [`WriteNotifier`](super::WriteNotifier)) lets live queries read at once instead of
    /// waiting for the next poll. `None` (the default): live queries poll only.
    fn write_notifications(&self) -> Option<super::WriteNotifications> {
        None
    }
}

#[async_trait]
impl<S: QueryStore + ?Sized> QueryStore for Arc<S> {
    async fn current_timestamp(&self) -> Result<i64, JournalError> {
        (**self).current_timestamp().await
    }

    async fn committed_before(&self) -> Result<Option<i64>, JournalError> {
        (**self).committed_before().await
    }

    async fn read_events(
        &self,
        request: EventsRequest<'_>,
    ) -> Result<Vec<StoredEvent>, JournalError> {
        (**self).read_events(request).await
    }

    async fn read_persistence_ids(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>, JournalError> {
        (**self).read_persistence_ids(after, limit).await
    }

    fn write_notifications(&self) -> Option<super::WriteNotifications> {
        (**self).write_notifications()
    }
}

/// The wall clock of this process, microseconds since the Unix epoch (0 before 1970): the
/// database clock of embedded stores (in memory, SQLite).
#[inline]
pub fn wall_clock_micros() -> i64 {
    crate::clock::realtime_micros()
}
