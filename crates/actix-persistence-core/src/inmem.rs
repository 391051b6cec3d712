//! An in-memory journal store, for tests and benchmarks. Nothing survives the process.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use futures::stream;

use crate::error::JournalError;
use crate::query::{
    slice_for_persistence_id, wall_clock_micros, EventKey, EventsRequest, QueryStore, StoredEvent,
    WriteNotifications, WriteNotifier,
};
use crate::store::{
    AtomicWrite, AtomicWriteResult, FencingToken, JournalStore, Ownership, PersistentRepr,
    ReplayStream,
};

#[derive(Debug)]
struct Events {
    /// The persistence id, the same allocation as its key in [`Journal::ids`].
    id: Arc<str>,
    /// Per sequence number: the event and its timestamp (microseconds, see [`Journal::clock`]).
    stored: BTreeMap<u64, (PersistentRepr, i64)>,
    highest: u64,
    /// The owner epoch: raised by every `take_ownership`.
    owner: FencingToken,
    /// Highest sequence number deleted so far.
    deleted_to: u64,
}

impl Events {
    fn new(id: Arc<str>) -> Self {
        Events {
            id,
            stored: BTreeMap::new(),
            highest: 0,
            owner: FencingToken::UNOWNED,
            deleted_to: 0,
        }
    }
}

/// Adds empty events for `pid` to `ids` (the id's one allocation, shared by its index entries).
fn add_id<'a>(ids: &'a mut IdMap, pid: &str) -> &'a mut Events {
    ids.entry(Arc::from(pid))
        .or_insert_with_key(|id| Events::new(Arc::clone(id)))
}

/// A position in the query index: the order of [`EventKey`] (timestamp, then persistence id
/// bytes, then sequence number), with the id shared with the journal's map instead of copied
/// per event.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct TimeKey {
    timestamp: i64,
    /// `Ord` of `str` compares bytes, as [`EventKey`]'s does.
    persistence_id: Arc<str>,
    seq_nr: u64,
}

impl TimeKey {
    fn from_event_key(key: &EventKey) -> Self {
        TimeKey {
            timestamp: key.timestamp,
            persistence_id: Arc::from(key.persistence_id.as_str()),
            seq_nr: key.seq_nr,
        }
    }
}

/// Events per persistence id, hashed with foldhash: the store looks an id up on every write,
/// and SipHash (the std default, resistant to chosen keys) cost ~190 instructions per lookup
/// there; the ids of a test or benchmark process are not an attack surface.
type IdMap = HashMap<Arc<str>, Events, foldhash::fast::RandomState>;

#[derive(Debug, Default)]
struct Journal {
    /// Per persistence id (the key is shared with [`Journal::by_time`]'s entries).
    ids: IdMap,
    /// Every stored event in query order.
    by_time: BTreeSet<TimeKey>,
    /// The last timestamp given: timestamps never go down, so commit order is timestamp order.
    last_timestamp: i64,
}

impl Journal {
    /// The wall clock in microseconds, but never below the last timestamp given.
    fn clock(&mut self) -> i64 {
        self.last_timestamp = self.last_timestamp.max(wall_clock_micros());
        self.last_timestamp
    }
}

/// A [`JournalStore`] and [`QueryStore`] kept in memory. Cheap to clone: clones share the same
/// events.
///
/// Behaves as the SQL stores do: atomic writes are all or nothing, a sequence number that is
/// already stored fails with [`JournalError::ConcurrentWrite`], a write with a fencing token
/// older than the id's owner epoch fails with [`JournalError::Fenced`], writes over the
/// [limits](crate::limits) are rejected, and deletes keep the highest sequence number. Every
/// write is committed under one lock, with a timestamp that never goes down, and notifies the
/// live queries.
#[derive(Debug, Clone, Default)]
pub struct InMemoryJournal {
    inner: Arc<Mutex<Journal>>,
    notifier: WriteNotifier,
}

impl InMemoryJournal {
    /// An empty journal.
    pub fn new() -> Self {
        Self::default()
    }

    /// The notifier of this journal's live queries (clones of the journal share it). The
    /// journal notifies after each write; a test can also send a notification of its own, for
    /// instance with the look-back of a store whose transactions commit out of order
    /// ([`WriteNotifier::notify_committed`]).
    pub fn write_notifier(&self) -> &WriteNotifier {
        &self.notifier
    }

    fn lock(&self) -> MutexGuard<'_, Journal> {
        // A panic while holding this lock cannot leave the map half-updated (every update is
        // a check followed by infallible inserts), so a poisoned lock is still consistent.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Stores one atomic write all or nothing.
    fn write_atomic(&self, write: AtomicWrite) -> AtomicWriteResult {
        write.check()?;
        let mut journal = self.lock();
        let timestamp = journal.clock();
        let journal = &mut *journal;
        let events = match journal.ids.get_mut(write.persistence_id()) {
            Some(events) => events,
            None => add_id(&mut journal.ids, write.persistence_id()),
        };
        if write.fencing_token < events.owner {
            return Err(JournalError::Fenced {
                persistence_id: write.persistence_id().to_owned(),
                fencing_token: write.fencing_token.get(),
            }
            .into());
        }
        if let Some(taken) = write
            .events
            .iter()
            .find(|e| events.stored.contains_key(&e.seq_nr))
        {
            return Err(JournalError::ConcurrentWrite {
                persistence_id: taken.persistence_id.clone(),
                seq_nr: taken.seq_nr,
            }
            .into());
        }
        events.highest = events.highest.max(write.highest_seq_nr());
        for event in write.events {
            journal.by_time.insert(TimeKey {
                timestamp,
                persistence_id: Arc::clone(&events.id),
                seq_nr: event.seq_nr,
            });
            events.stored.insert(event.seq_nr, (event, timestamp));
        }
        Ok(())
    }
}

#[async_trait]
impl JournalStore for InMemoryJournal {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        let results: Vec<_> = writes.into_iter().map(|w| self.write_atomic(w)).collect();
        if results.iter().any(Result::is_ok) {
            self.notifier.notify();
        }
        Ok(results)
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        let journal = self.lock();
        let events: Vec<_> = match journal.ids.get(pid) {
            Some(events) if from <= to => events
                .stored
                .range(from..=to)
                .take(usize::try_from(max).unwrap_or(usize::MAX))
                .map(|(_, (e, _))| Ok(e.clone()))
                .collect(),
            _ => Vec::new(),
        };
        Box::pin(stream::iter(events))
    }

    async fn read_highest_sequence_nr(&self, pid: &str, _from: u64) -> Result<u64, JournalError> {
        Ok(self.lock().ids.get(pid).map(|e| e.highest).unwrap_or(0))
    }

    /// Checks the token against the id's owner epoch and deletes under one lock.
    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        fencing_token: FencingToken,
    ) -> Result<(), JournalError> {
        let mut journal = self.lock();
        let journal = &mut *journal;
        if let Some(events) = journal.ids.get_mut(pid) {
            if events.owner > fencing_token {
                return Err(JournalError::Fenced {
                    persistence_id: pid.to_owned(),
                    fencing_token: fencing_token.get(),
                });
            }
            let kept = if to == u64::MAX {
                BTreeMap::new()
            } else {
                events.stored.split_off(&(to + 1))
            };
            let deleted = std::mem::replace(&mut events.stored, kept);
            for (seq_nr, (_, timestamp)) in deleted {
                journal.by_time.remove(&TimeKey {
                    timestamp,
                    persistence_id: Arc::clone(&events.id),
                    seq_nr,
                });
            }
            events.deleted_to = events.deleted_to.max(to.min(events.highest));
        }
        Ok(())
    }

    /// Raises the id's owner epoch and reads its highest sequence number under one lock.
    async fn take_ownership(&self, pid: &str) -> Result<Ownership, JournalError> {
        let mut journal = self.lock();
        let events = match journal.ids.get_mut(pid) {
            Some(events) => events,
            None => add_id(&mut journal.ids, pid),
        };
        events.owner = FencingToken(events.owner.get().saturating_add(1));
        Ok(Ownership {
            fencing_token: events.owner,
            highest_seq_nr: events.highest,
        })
    }

    async fn read_deleted_to(&self, pid: &str) -> Result<Option<u64>, JournalError> {
        Ok(Some(
            self.lock().ids.get(pid).map(|e| e.deleted_to).unwrap_or(0),
        ))
    }
}

#[async_trait]
impl QueryStore for InMemoryJournal {
    async fn current_timestamp(&self) -> Result<i64, JournalError> {
        Ok(self.lock().clock())
    }

    async fn read_events(
        &self,
        request: EventsRequest<'_>,
    ) -> Result<Vec<StoredEvent>, JournalError> {
        let journal = self.lock();
        let mut page = Vec::new();
        let after = TimeKey::from_event_key(request.after);
        let range = (Bound::Excluded(&after), Bound::Unbounded);
        for key in journal.by_time.range::<TimeKey, _>(range) {
            if key.timestamp >= request.before_timestamp || page.len() >= request.limit as usize {
                break;
            }
            let Some(events) = journal.ids.get(&*key.persistence_id) else {
                continue;
            };
            let Some((repr, timestamp)) = events.stored.get(&key.seq_nr) else {
                continue;
            };
            let slice = slice_for_persistence_id(&repr.persistence_id);
            if !request.filter.matches(repr, slice) {
                continue;
            }
            let previous = if request.with_previous_timestamp {
                events
                    .stored
                    .range(..key.seq_nr)
                    .rev()
                    .find(|(_, (previous, _))| request.filter.matches(previous, slice))
                    .map(|(seq_nr, (_, timestamp))| (*seq_nr, *timestamp))
            } else {
                None
            };
            page.push(StoredEvent {
                timestamp: *timestamp,
                repr: repr.clone(),
                previous_timestamp: previous.map(|(_, timestamp)| timestamp),
                previous_seq_nr: previous.map(|(seq_nr, _)| seq_nr),
            });
        }
        Ok(page)
    }

    async fn read_persistence_ids(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>, JournalError> {
        let journal = self.lock();
        let mut ids: Vec<&Arc<str>> = journal
            .ids
            .iter()
            .filter(|(id, events)| {
                events.highest > 0 && after.map_or(true, |a| id.as_bytes() > a.as_bytes())
            })
            .map(|(id, _)| id)
            .collect();
        ids.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        Ok(ids
            .into_iter()
            .take(limit as usize)
            .map(|id| id.to_string())
            .collect())
    }

    fn write_notifications(&self) -> Option<WriteNotifications> {
        Some(self.notifier.subscribe())
    }
}
