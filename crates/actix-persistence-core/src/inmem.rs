//! An in-memory journal store, for tests and benchmarks. Nothing survives the process.

mod chunks;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use futures::{stream, StreamExt};

use crate::error::{AtomicWriteError, JournalError};
use crate::query::{
    slice_for_persistence_id, wall_clock_micros, EventKey, EventsRequest, QueryStore, StoredEvent,
    WriteNotifications, WriteNotifier,
};
use crate::store::{
    AtomicWrite, AtomicWriteResult, CheckedBatch, FailedIds, FencingToken, JournalStore, Ownership,
    PersistentRepr, ReplayStream, WriteBatch, WriteNow, WriteResults, WriterKey,
};
use chunks::{Chunks, Place};

#[derive(Debug)]
struct Events {
    /// The persistence id, the same allocation as its key in [`Journal::ids`].
    id: Arc<str>,
    /// The stored events with their timestamps (microseconds, see [`Journal::clock`]),
    /// ascending by sequence number: a write appends (its numbers follow the stored ones), a
    /// delete drops a prefix. Cheaper than a `BTreeMap` per event (no node search and no node
    /// allocations on the append path), and kept in chunks, so that an append never copies
    /// the stored events as a growing `VecDeque` did. Each keeps the shared persistence id and
    /// writer uuid it was written with: replays and query pages hand out clones of those `Arc`s.
    stored: Chunks<(PersistentRepr, i64)>,
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
            stored: Chunks::default(),
            highest: 0,
            owner: FencingToken::UNOWNED,
            deleted_to: 0,
        }
    }

    /// The place of the first stored event numbered `seq_nr` or higher.
    fn position(&self, seq_nr: u64) -> Place {
        self.stored
            .partition_point(|(event, _)| event.seq_nr < seq_nr)
    }

    /// The event numbered `seq_nr` with its timestamp, if it is stored.
    fn get(&self, seq_nr: u64) -> Option<&(PersistentRepr, i64)> {
        match self.stored.back() {
            Some((last, _)) if last.seq_nr >= seq_nr => self
                .stored
                .get(self.position(seq_nr))
                .filter(|(event, _)| event.seq_nr == seq_nr),
            _ => None,
        }
    }

    /// Stores `event` (its sequence number is not stored yet): appended, or in its place when a
    /// higher number is stored already.
    fn insert(&mut self, event: PersistentRepr, timestamp: i64) {
        match self.stored.back() {
            Some((last, _)) if last.seq_nr > event.seq_nr => {
                let at = self.position(event.seq_nr);
                self.stored.insert(at, (event, timestamp));
            }
            _ => self.stored.push_back((event, timestamp)),
        }
    }

    /// The stored events numbered `from..=to`, ascending.
    fn range(&self, from: u64, to: u64) -> impl Iterator<Item = &(PersistentRepr, i64)> {
        self.stored
            .from(self.position(from))
            .take_while(move |(event, _)| event.seq_nr <= to)
    }

    /// The stored events numbered below `seq_nr`, ascending.
    fn before(&self, seq_nr: u64) -> impl DoubleEndedIterator<Item = &(PersistentRepr, i64)> {
        self.stored.before(self.position(seq_nr))
    }

    /// Deletes the stored events numbered up to `to`; returns how many there were.
    fn delete_to(&mut self, to: u64) -> usize {
        let end = self.stored.partition_point(|(event, _)| event.seq_nr <= to);
        self.stored.remove_before(end)
    }
}

/// Adds empty events for `pid` to `ids` (the id's one allocation, shared by its index entries).
fn add_id(ids: &mut IdMap, pid: Arc<str>) -> &mut Events {
    ids.entry(pid)
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
            persistence_id: Arc::clone(&key.persistence_id),
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
    /// Every stored event in query order, sorted. Timestamps never go down, so a write's keys
    /// sort after every earlier write's (an append, but among the keys of its own timestamp).
    /// Entries of deleted events stay until [`Journal::compact`] drops them: a reader skips an
    /// entry whose event is gone or was stored again at another timestamp ([`Journal::live`]).
    by_time: Vec<TimeKey>,
    /// How many entries of `by_time` have no stored event (at most: a deleted number stored
    /// again at the same timestamp makes its entry live again).
    stale: usize,
    /// The last timestamp given: timestamps never go down, so commit order is timestamp order.
    last_timestamp: i64,
}

impl Journal {
    /// The wall clock in microseconds, but never below the last timestamp given.
    fn clock(&mut self) -> i64 {
        self.last_timestamp = self.last_timestamp.max(wall_clock_micros());
        self.last_timestamp
    }

    /// Adds `key` to the query index, in its place.
    fn index(&mut self, key: TimeKey) {
        match self.by_time.last() {
            Some(last) if *last >= key => {
                let at = self.by_time.partition_point(|k| *k < key);
                if self.by_time.get(at) == Some(&key) {
                    // The entry of a deleted event stored again at the same timestamp.
                    self.stale = self.stale.saturating_sub(1);
                } else {
                    self.by_time.insert(at, key);
                }
            }
            _ => self.by_time.push(key),
        }
    }

    /// Whether the index entry `key` names a stored event (with that timestamp).
    fn live(ids: &IdMap, key: &TimeKey) -> bool {
        ids.get(&*key.persistence_id)
            .and_then(|events| events.get(key.seq_nr))
            .is_some_and(|(_, timestamp)| *timestamp == key.timestamp)
    }

    /// Drops the index entries of deleted events once they are half of the index (each
    /// entry is then dropped in amortized O(1)).
    fn compact(&mut self) {
        if self.stale == 0 || self.stale < self.by_time.len() / 2 {
            return;
        }
        let ids = &self.ids;
        self.by_time.retain(|key| Journal::live(ids, key));
        self.stale = 0;
    }
}

/// A [`JournalStore`] and [`QueryStore`] kept in memory. Cheap to clone: clones share the same
/// events.
///
/// Behaves as the SQL stores do: atomic writes are all or nothing, a sequence number that is
/// already stored or was deleted fails with [`JournalError::ConcurrentWrite`], a write with a fencing token
/// older than the id's owner epoch fails with [`JournalError::Fenced`], a later write of an id
/// whose write failed earlier in the batch is not attempted
/// ([`JournalError::EarlierWriteFailed`]), writes over the
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
        lock(&self.inner)
    }

    /// Stores a batch, each atomic write all or nothing; notifies live queries when any was
    /// stored. `checked`: every write already passed [`AtomicWrite::check`] (a
    /// [`CheckedBatch`]), so it is not checked again.
    fn write_batch(
        &self,
        writes: impl IntoIterator<Item = AtomicWrite>,
        checked: bool,
    ) -> WriteResults {
        let mut stored = false;
        // A write of an id whose earlier write in this batch failed is not attempted.
        let mut failed = FailedIds::default();
        let mut store = |write: AtomicWrite| {
            failed.check(&write)?;
            let writer = WriterKey::of(&write);
            let result = self.write_atomic(write, checked);
            if let (Err(AtomicWriteError::Failed(_)), Some(writer)) = (&result, writer) {
                failed.record_writer(writer);
            }
            stored |= result.is_ok();
            result
        };
        // The lone write of a `persist`: its result goes inline without `collect`'s loop.
        let mut writes = writes.into_iter();
        let results = match (writes.next(), writes.next()) {
            (None, _) => WriteResults::new(),
            (Some(write), None) => WriteResults::from_buf([store(write)]),
            (Some(first), Some(second)) => {
                let mut results = WriteResults::with_capacity(2 + writes.size_hint().0);
                for write in [first, second].into_iter().chain(writes) {
                    results.push(store(write));
                }
                results
            }
        };
        if stored {
            self.notifier.notify();
        }
        results
    }

    /// [`write_batch`](Self::write_batch) of a [`WriteBatch`]: its lone write (what a `persist`
    /// sends) is taken out without an iterator over the batch.
    fn write_batch_now(&self, mut writes: WriteBatch, checked: bool) -> WriteResults {
        if writes.len() == 1 {
            if let Some(write) = writes.pop() {
                let result = self.write_atomic(write, checked);
                if result.is_ok() {
                    self.notifier.notify();
                }
                return WriteResults::from_buf([result]);
            }
        }
        self.write_batch(writes, checked)
    }

    /// Stores one atomic write all or nothing, checking it first unless `checked`.
    fn write_atomic(&self, write: AtomicWrite, checked: bool) -> AtomicWriteResult {
        if !checked {
            write.check()?;
        }
        let mut journal = self.lock();
        let timestamp = journal.clock();
        let journal = &mut *journal;
        let events = match journal.ids.get_mut(write.persistence_id()) {
            Some(events) => events,
            // Checked (above, or before the `CheckedBatch` was made): there is a first event; its id becomes the map's.
            None => match write.events.first() {
                Some(first) => add_id(&mut journal.ids, Arc::clone(&first.persistence_id)),
                None => return Ok(()),
            },
        };
        if write.fencing_token < events.owner {
            return Err(JournalError::Fenced {
                persistence_id: write.persistence_id().to_owned(),
                fencing_token: write.fencing_token.get(),
            }
            .into());
        }
        // A deleted number stays used (conformance J29), as a stored one; the numbers are
        // consecutive and ascending (checked), so the lowest tells.
        let deleted = write.lowest_seq_nr() <= events.deleted_to;
        let taken = match write.events.first() {
            Some(first) if deleted => Some(first),
            _ => write.events.iter().find(|e| events.get(e.seq_nr).is_some()),
        };
        if let Some(taken) = taken {
            return Err(JournalError::ConcurrentWrite {
                persistence_id: taken.persistence_id.to_string(),
                seq_nr: taken.seq_nr,
            }
            .into());
        }
        // Consecutive and ascending (checked).
        let (lowest, highest) = (write.lowest_seq_nr(), write.highest_seq_nr());
        events.highest = events.highest.max(highest);
        let id = Arc::clone(&events.id);
        for event in write.events {
            events.insert(event, timestamp);
        }
        for seq_nr in lowest..highest {
            journal.index(TimeKey {
                timestamp,
                persistence_id: Arc::clone(&id),
                seq_nr,
            });
        }
        // The last key takes the id itself (one reference count less per write).
        journal.index(TimeKey {
            timestamp,
            persistence_id: id,
            seq_nr: highest,
        });
        Ok(())
    }
}

fn lock(journal: &Mutex<Journal>) -> MutexGuard<'_, Journal> {
    // A panic while holding this lock cannot leave the map half-updated (every update is a
    // check followed by infallible inserts), so a poisoned lock is still consistent.
    journal
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Events a replay of the in-memory journal copies per page (one lock each).
const REPLAY_PAGE_SIZE: usize = 1_000;

/// Where a replay of the in-memory journal stands: the next page starts at `next_from`.
struct PagedReplay {
    inner: Arc<Mutex<Journal>>,
    persistence_id: Arc<str>,
    next_from: u64,
    to: u64,
    /// Events the replay may still hand out (its `max`).
    remaining: u64,
}

impl PagedReplay {
    /// Copies the next page under the lock; `None` once the range or `max` is exhausted.
    async fn next_page(mut self) -> Option<(Vec<Result<PersistentRepr, JournalError>>, Self)> {
        if self.remaining == 0 || self.next_from > self.to {
            return None;
        }
        let limit = usize::try_from(self.remaining)
            .unwrap_or(usize::MAX)
            .min(REPLAY_PAGE_SIZE);
        let page: Vec<_> = {
            let journal = lock(&self.inner);
            let events = journal.ids.get(&*self.persistence_id)?;
            events
                .range(self.next_from, self.to)
                .take(limit)
                .map(|(e, _)| Ok(e.clone()))
                .collect()
        };
        let last = match page.last() {
            Some(Ok(last)) => last.seq_nr,
            _ => return None,
        };
        self.remaining -= page.len() as u64;
        match last.checked_add(1) {
            Some(next) if page.len() == limit => self.next_from = next,
            // A page shorter than asked for is the last, as one ending the sequence.
            _ => self.remaining = 0,
        }
        Some((page, self))
    }
}

#[async_trait]
impl JournalStore for InMemoryJournal {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        Ok(self.write_batch(writes, false).into_vec())
    }

    /// Always answers at once: an in-memory write never waits.
    fn write_messages_now(&self, writes: WriteBatch) -> WriteNow {
        WriteNow::Done(Ok(self.write_batch_now(writes, false)))
    }

    /// Always answers at once, without checking the writes a second time.
    fn write_checked_now(&self, writes: CheckedBatch) -> WriteNow {
        WriteNow::Done(Ok(self.write_batch_now(writes.into_batch(), true)))
    }

    /// Streams the events page by page (1,000 per page, each copied under the
    /// lock on its own), so that a replay holds one page of copies, not the history: events
    /// written while it runs may or may not be seen, as on the SQL stores.
    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        let replay = PagedReplay {
            inner: Arc::clone(&self.inner),
            persistence_id: Arc::from(pid),
            next_from: from,
            to,
            remaining: max,
        };
        Box::pin(stream::unfold(replay, PagedReplay::next_page).flat_map(stream::iter))
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
            journal.stale += events.delete_to(to);
            events.deleted_to = events.deleted_to.max(to.min(events.highest));
            journal.compact();
        }
        Ok(())
    }

    /// Raises the id's owner epoch and reads its highest sequence number under one lock.
    async fn take_ownership(&self, pid: &str) -> Result<Ownership, JournalError> {
        let mut journal = self.lock();
        let events = match journal.ids.get_mut(pid) {
            Some(events) => events,
            None => add_id(&mut journal.ids, Arc::from(pid)),
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
        let start = journal.by_time.partition_point(|key| *key <= after);
        for key in &journal.by_time[start..] {
            if key.timestamp >= request.before_timestamp || page.len() >= request.limit as usize {
                break;
            }
            let Some(events) = journal.ids.get(&*key.persistence_id) else {
                continue;
            };
            let Some((repr, timestamp)) = events.get(key.seq_nr) else {
                continue;
            };
            if *timestamp != key.timestamp {
                // A deleted event's entry; its number was stored again later.
                continue;
            }
            let slice = slice_for_persistence_id(&repr.persistence_id);
            if !request.filter.matches(repr, slice) {
                continue;
            }
            let previous = if request.with_previous_timestamp {
                events
                    .before(key.seq_nr)
                    .rev()
                    .find(|(previous, _)| request.filter.matches(previous, slice))
                    .map(|(previous, timestamp)| (previous.seq_nr, *timestamp))
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

#[cfg(test)]
mod tests {
    use futures::TryStreamExt;

    use super::*;
    use crate::query::{Offset, QuerySettings, ReadJournal};

    fn event(pid: &Arc<str>, writer: &Arc<str>, seq_nr: u64) -> PersistentRepr {
        PersistentRepr {
            persistence_id: Arc::clone(pid),
            seq_nr,
            payload: b"{}".to_vec(),
            serializer_id: 1,
            manifest: String::new(),
            writer_uuid: Arc::clone(writer),
            timestamp: 0,
            tags: Vec::new(),
        }
    }

    /// A replay copies one page at a time: after its first event was handed out, at most a
    /// page of copies exist (each holds a clone of the id's `Arc`), not the whole history; and
    /// the pages join without a gap or a repeat, whatever `from`, `to` and `max`.
    #[tokio::test]
    async fn a_replay_holds_one_page_of_copies() {
        let journal = InMemoryJournal::new();
        let writer: Arc<str> = Arc::from("writer");
        let pid: Arc<str> = Arc::from("Paged|a");
        let stored = 3 * REPLAY_PAGE_SIZE as u64 + 5;
        let writes = (1..=stored)
            .map(|seq_nr| AtomicWrite::new(vec![event(&pid, &writer, seq_nr)]).expect("shape"))
            .collect();
        let results = journal.write_messages(writes).await.expect("write");
        assert!(results.iter().all(Result::is_ok));

        let mut one = journal.replay_messages("Paged|a", 1, u64::MAX, 1);
        let first = one.next().await.expect("an event").expect("stored");
        let with_one_copy = Arc::strong_count(&first.persistence_id);
        drop((first, one));
        let mut all = journal.replay_messages("Paged|a", 1, u64::MAX, u64::MAX);
        let first = all.next().await.expect("an event").expect("stored");
        let copies = Arc::strong_count(&first.persistence_id) + 1 - with_one_copy;
        assert_eq!(copies, REPLAY_PAGE_SIZE, "copies held after one event");
        drop((first, all));

        for (from, to, max) in [
            (1, u64::MAX, u64::MAX),
            (7, stored - 3, u64::MAX),
            (1, u64::MAX, REPLAY_PAGE_SIZE as u64),
            (2, u64::MAX, 2 * REPLAY_PAGE_SIZE as u64 + 1),
            (stored, u64::MAX, u64::MAX),
            (stored + 1, u64::MAX, u64::MAX),
        ] {
            let seq_nrs: Vec<u64> = journal
                .replay_messages("Paged|a", from, to, max)
                .map_ok(|e| e.seq_nr)
                .try_collect()
                .await
                .expect("replay");
            let expected: Vec<u64> = (from..=to.min(stored))
                .take(usize::try_from(max).unwrap_or(usize::MAX))
                .collect();
            assert_eq!(seq_nrs, expected, "from {from} to {to} max {max}");
        }
    }
    /// The store keeps the `Arc`s it was given and hands them out; a query's envelopes of one
    /// entity type share one.
    #[tokio::test]
    async fn replays_and_queries_share_the_written_ids() {
        let journal = InMemoryJournal::new();
        let writer: Arc<str> = Arc::from("writer");
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("Shared|a"), Arc::from("Shared|b"));
        let writes = vec![
            AtomicWrite::new(vec![event(&a, &writer, 1), event(&a, &writer, 2)]).expect("shape"),
            AtomicWrite::new(vec![event(&b, &writer, 1)]).expect("shape"),
        ];
        let results = journal.write_messages(writes).await.expect("write");
        assert!(results.iter().all(Result::is_ok), "{results:?}");

        let replayed: Vec<_> = journal
            .replay_messages("Shared|a", 1, u64::MAX, u64::MAX)
            .try_collect()
            .await
            .expect("replay");
        assert_eq!(replayed.len(), 2);
        for event in &replayed {
            assert!(Arc::ptr_eq(&event.persistence_id, &a));
            assert!(Arc::ptr_eq(&event.writer_uuid, &writer));
        }

        let query = ReadJournal::new(journal.clone(), QuerySettings::default());
        let envelopes: Vec<_> = query
            .current_events_by_slices("Shared", 0, 1023, Offset::NoOffset)
            .try_collect()
            .await
            .expect("query");
        assert_eq!(envelopes.len(), 3);
        for envelope in &envelopes {
            assert_eq!(&*envelope.entity_type, "Shared");
            assert!(Arc::ptr_eq(
                &envelope.entity_type,
                &envelopes[0].entity_type
            ));
            assert!(Arc::ptr_eq(&envelope.writer_uuid, &writer));
            let pid = if *envelope.persistence_id == *a {
                &a
            } else {
                &b
            };
            assert!(Arc::ptr_eq(&envelope.persistence_id, pid));
        }
        let by_id: Vec<_> = query
            .current_events_by_persistence_id("Shared|a", 1, u64::MAX)
            .try_collect()
            .await
            .expect("query by id");
        assert_eq!(by_id.len(), 2);
        assert!(Arc::ptr_eq(&by_id[0].entity_type, &by_id[1].entity_type));
    }
}
