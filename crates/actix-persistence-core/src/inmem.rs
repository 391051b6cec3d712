//! An in-memory journal store, for tests and benchmarks. Nothing survives the process.

mod chunks;

use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
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
        .or_insert_with_key(|id| Box::new(Events::new(Arc::clone(id))))
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
    /// The position of a stored event.
    fn of(event: &StoredEvent) -> Self {
        TimeKey {
            timestamp: event.timestamp,
            persistence_id: Arc::clone(&event.repr.persistence_id),
            seq_nr: event.repr.seq_nr,
        }
    }

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
/// there; the ids of a test or benchmark process are not an attack surface. Each id's state is
/// boxed: inline in the table, neighbouring ids written from two threads shared cache lines
/// (a closed loop on two arbiters ran 1-5 % slower).
type IdMap = HashMap<Arc<str>, Box<Events>, foldhash::fast::RandomState>;

/// Stripes of the journal: a write locks only its id's stripe, so writers of different ids
/// (actors on several arbiters) share no lock and no written memory.
const STRIPES: usize = 64;

/// The ids whose hash falls in one stripe, with their events' query index, on cache lines of
/// their own (two cores writing neighbouring stripes do not share one).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Stripe(Mutex<StripeState>);

#[derive(Debug, Default)]
struct StripeState {
    ids: IdMap,
    index: TimeIndex,
}

/// Entries a stripe's query index makes room for at its first (128 KiB: at glibc's threshold
/// for a block of its own, which later grows in place by remapping; its pages are only taken
/// as they are written). Grown from nothing, the 64 indexes of a journal copied themselves
/// into fresh memory at every doubling: twice the page faults of one index, and a closed loop
/// on one arbiter 10-18 % slower (room for 1,024 entries: still 8-14 %).
const INDEX_FIRST_CAPACITY: usize = 4096;

/// A stripe's query index and clock.
#[derive(Debug, Default)]
struct TimeIndex {
    /// Every stored event of the stripe in query order, sorted. The stripe's timestamps never
    /// go down, so a write's keys sort after every earlier write's (an append, but among the
    /// keys of its own timestamp). Entries of deleted events stay until
    /// [`StripeState::compact`] drops them: a reader skips an entry whose event is gone.
    by_time: Vec<TimeKey>,
    /// How many entries of `by_time` have no stored event.
    stale: usize,
    /// The last timestamp the stripe gave.
    last_timestamp: i64,
}

impl TimeIndex {
    /// The wall clock in microseconds, but never below the stripe's last timestamp nor below
    /// `floor` (the store's clock as last read, [`Shared::clock`]).
    fn clock(&mut self, floor: i64) -> i64 {
        self.last_timestamp = self.last_timestamp.max(wall_clock_micros()).max(floor);
        self.last_timestamp
    }

    /// Adds `key` to the query index, in its place. No entry equals it: a stored or deleted
    /// sequence number is never written again (conformance J29).
    fn index(&mut self, key: TimeKey) {
        match self.by_time.last() {
            Some(last) if *last > key => {
                let at = self.position_from_end(&key);
                self.by_time.insert(at, key);
            }
            _ => {
                if self.by_time.capacity() == 0 {
                    self.by_time.reserve(INDEX_FIRST_CAPACITY);
                }
                self.by_time.push(key)
            }
        }
    }

    /// The place of `key` in the index (the first entry not below it). A new key's timestamp
    /// is the stripe's highest, so its place lies among the last entries: they are searched
    /// first (a binary search over the whole index missed the cache at every step).
    fn position_from_end(&self, key: &TimeKey) -> usize {
        const TAIL: usize = 32;
        let tail_start = self.by_time.len().saturating_sub(TAIL);
        match self.by_time.get(tail_start) {
            Some(first) if *first < *key => {
                tail_start + self.by_time[tail_start..].partition_point(|k| k < key)
            }
            _ => self.by_time.partition_point(|k| k < key),
        }
    }
}

impl StripeState {
    /// Drops the index entries of deleted events once they are half of the index (each
    /// entry is then dropped in amortized O(1)).
    fn compact(&mut self) {
        let StripeState { ids, index } = self;
        if index.stale == 0 || index.stale < index.by_time.len() / 2 {
            return;
        }
        index.by_time.retain(|key| stored_at(ids, key).is_some());
        index.stale = 0;
    }

    /// Up to `keys` index entries after `after` with a timestamp below `before`, the events
    /// among them that are stored and that `request` takes, and whether the stripe has no
    /// entry left in the range after them.
    fn events_after(
        &self,
        after: &TimeKey,
        before: i64,
        keys: usize,
        request: &EventsRequest<'_>,
    ) -> StripeEvents {
        let start = self.index.by_time.partition_point(|key| key <= after);
        let in_range = self.index.by_time[start..]
            .iter()
            .take_while(|key| key.timestamp < before);
        let mut events = VecDeque::new();
        let mut scanned = 0;
        let mut last = None;
        for key in in_range.take(keys) {
            scanned += 1;
            last = Some(key);
            events.extend(stored_event(&self.ids, key, request));
        }
        StripeEvents {
            events,
            last_scanned: last.cloned(),
            exhausted: scanned < keys,
        }
    }
}

/// What one look into a stripe's index found ([`StripeState::events_after`]).
struct StripeEvents {
    /// The events, in query order.
    events: VecDeque<StoredEvent>,
    /// The last entry looked at: the next look starts after it.
    last_scanned: Option<TimeKey>,
    /// Whether no entry of the range was left after it.
    exhausted: bool,
}

/// What the clones of one [`InMemoryJournal`] share.
#[derive(Debug)]
struct Shared {
    stripes: Box<[Stripe]>,
    /// The store's clock as last read by [`Shared::clock`]: no write takes a lower timestamp
    /// afterwards. Written only by clock reads (queries), read by every write.
    floor: Floor,
    /// Picks an id's stripe (fixed: the same id always lands in the same stripe).
    stripe_of: foldhash::fast::FixedState,
}

/// [`Shared::floor`], on a cache line of its own.
#[derive(Debug)]
#[repr(align(128))]
struct Floor(AtomicI64);

impl Default for Shared {
    fn default() -> Self {
        Shared {
            stripes: (0..STRIPES).map(|_| Stripe::default()).collect(),
            floor: Floor(AtomicI64::new(i64::MIN)),
            stripe_of: foldhash::fast::FixedState::default(),
        }
    }
}

impl Shared {
    /// Which stripe holds `pid`.
    fn stripe_at(&self, pid: &str) -> usize {
        use std::hash::BuildHasher;
        // `as usize` keeps the low bits, which a modulo of a power of two reads.
        self.stripe_of.hash_one(pid.as_bytes()) as usize % STRIPES
    }

    /// The locked stripe of `pid`.
    fn stripe(&self, pid: &str) -> MutexGuard<'_, StripeState> {
        lock(&self.stripes[self.stripe_at(pid)].0)
    }

    /// The store's clock now (µs): the wall clock, never below an earlier reading. No event
    /// with a lower timestamp is written after it returns, and every one is visible to a read
    /// that follows: a write takes its timestamp under its stripe's lock, never below the last
    /// reading ([`Shared::floor`], published before it returns), and a read locks the stripes
    /// it reads. A write that took a lower timestamp before the reading holds its stripe's
    /// lock until its events are in, so the read finds them; a write that locks the stripe
    /// after the read sees the reading, and takes a timestamp at least as high.
    fn clock(&self) -> i64 {
        let now = wall_clock_micros();
        self.floor.0.fetch_max(now, Ordering::AcqRel).max(now)
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
/// write is committed under its id's lock (one of 64 stripes, each with its own query index),
/// with a timestamp that never goes down in its stripe nor below a reading of the store's
/// clock (so every event below a reading is visible when the reading is), and notifies the
/// live queries.
#[derive(Debug, Clone, Default)]
pub struct InMemoryJournal {
    inner: Arc<Shared>,
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
        let mut stripe = self.inner.stripe(write.persistence_id());
        let StripeState { ids, index } = &mut *stripe;
        let events = match ids.get_mut(write.persistence_id()) {
            Some(events) => events,
            // Checked (above, or before the `CheckedBatch` was made): there is a first event; its id becomes the map's.
            None => match write.events.first() {
                Some(first) => add_id(ids, Arc::clone(&first.persistence_id)),
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
        let timestamp = index.clock(self.inner.floor.0.load(Ordering::Acquire));
        for seq_nr in lowest..=highest {
            index.index(TimeKey {
                timestamp,
                persistence_id: Arc::clone(&events.id),
                seq_nr,
            });
        }
        for event in write.events {
            events.insert(event, timestamp);
        }
        Ok(())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks cannot leave a map half-updated (every update is a
    // check followed by infallible inserts), so a poisoned lock is still consistent.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Events a replay of the in-memory journal copies per page (one lock each).
const REPLAY_PAGE_SIZE: usize = 1_000;

/// Where a replay of the in-memory journal stands: the next page starts at `next_from`.
struct PagedReplay {
    inner: Arc<Shared>,
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
            let stripe = self.inner.stripe(&self.persistence_id);
            let events = stripe.ids.get(&*self.persistence_id)?;
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
        Ok(self
            .inner
            .stripe(pid)
            .ids
            .get(pid)
            .map(|e| e.highest)
            .unwrap_or(0))
    }

    /// Checks the token against the id's owner epoch and deletes under one lock.
    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        fencing_token: FencingToken,
    ) -> Result<(), JournalError> {
        let mut stripe = self.inner.stripe(pid);
        let Some(events) = stripe.ids.get_mut(pid) else {
            return Ok(());
        };
        if events.owner > fencing_token {
            return Err(JournalError::Fenced {
                persistence_id: pid.to_owned(),
                fencing_token: fencing_token.get(),
            });
        }
        // The mark is the highest number that held an event: a number above it up to `to` that
        // never did (a rejected write's) is no deleted event, and recovery must not take it for
        // one (nor may a later read).
        let last_deleted = events
            .before(to.saturating_add(1))
            .next_back()
            .map_or(0, |(event, _)| event.seq_nr);
        let deleted = events.delete_to(to);
        events.deleted_to = events.deleted_to.max(last_deleted);
        stripe.index.stale += deleted;
        stripe.compact();
        Ok(())
    }

    /// Raises the id's owner epoch and reads its highest sequence number under one lock.
    async fn take_ownership(&self, pid: &str) -> Result<Ownership, JournalError> {
        let mut stripe = self.inner.stripe(pid);
        let ids = &mut stripe.ids;
        let events = match ids.get_mut(pid) {
            Some(events) => events,
            None => add_id(ids, Arc::from(pid)),
        };
        events.owner = FencingToken(events.owner.get().saturating_add(1));
        Ok(Ownership {
            fencing_token: events.owner,
            highest_seq_nr: events.highest,
        })
    }

    async fn read_deleted_to(&self, pid: &str) -> Result<Option<u64>, JournalError> {
        Ok(Some(
            self.inner
                .stripe(pid)
                .ids
                .get(pid)
                .map(|e| e.deleted_to)
                .unwrap_or(0),
        ))
    }
}

impl Shared {
    /// A page of `request`: the first events after its position in query order, from every
    /// stripe. Each stripe's index is sorted, so the page merges them: each stripe is looked
    /// into a few entries at a time (one lock each), and looked into again once those are
    /// delivered, so that no stripe is read much past the page.
    fn merged_page(&self, request: &EventsRequest<'_>) -> Vec<StoredEvent> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;

        let limit = request.limit as usize;
        // About twice a stripe's share of the page (31 entries for a page of 1,000), never
        // more than the page: a small page copies few events it does not deliver.
        let keys = (limit.saturating_mul(2) / STRIPES)
            .clamp(1, 1024)
            .min(limit.max(1));
        let after = TimeKey::from_event_key(request.after);
        let look = |stripe: usize, after: &TimeKey| -> StripeEvents {
            let state = lock(&self.stripes[stripe].0);
            // A look that found no event goes on until one, or the end of the range: the
            // merge needs each stripe's next event.
            let mut found = state.events_after(after, request.before_timestamp, keys, request);
            while found.events.is_empty() && !found.exhausted {
                let Some(last) = found.last_scanned.take() else {
                    break;
                };
                found = state.events_after(&last, request.before_timestamp, keys, request);
            }
            found
        };
        let mut cursors: Vec<StripeEvents> = (0..STRIPES).map(|s| look(s, &after)).collect();
        let mut heads: BinaryHeap<Reverse<(TimeKey, usize)>> = cursors
            .iter()
            .enumerate()
            .filter_map(|(s, c)| {
                c.events
                    .front()
                    .map(|event| Reverse((TimeKey::of(event), s)))
            })
            .collect();
        let mut page = Vec::with_capacity(limit.min(1024));
        while page.len() < limit {
            let Some(Reverse((_, s))) = heads.pop() else {
                break;
            };
            let cursor = &mut cursors[s];
            page.extend(cursor.events.pop_front());
            if cursor.events.is_empty() && !cursor.exhausted {
                if let Some(last) = cursor.last_scanned.take() {
                    *cursor = look(s, &last);
                }
            }
            if let Some(event) = cursor.events.front() {
                heads.push(Reverse((TimeKey::of(event), s)));
            }
        }
        page
    }
}

/// The events of the id the index entry `key` names, and the event it names, if that is
/// stored with the entry's timestamp (an entry of a deleted event stays until its stripe is
/// compacted).
fn stored_at<'a>(ids: &'a IdMap, key: &TimeKey) -> Option<(&'a Events, &'a PersistentRepr, i64)> {
    let events = ids.get(&*key.persistence_id)?;
    let (repr, timestamp) = events.get(key.seq_nr)?;
    (*timestamp == key.timestamp).then_some((&**events, repr, *timestamp))
}

/// The event the index entry `key` names, from its id's stripe `ids`, if it is stored (with
/// that timestamp) and `request`'s filter takes it.
fn stored_event(ids: &IdMap, key: &TimeKey, request: &EventsRequest<'_>) -> Option<StoredEvent> {
    let (events, repr, timestamp) = stored_at(ids, key)?;
    let slice = slice_for_persistence_id(&repr.persistence_id);
    if !request.filter.matches(repr, slice) {
        return None;
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
    Some(StoredEvent {
        timestamp,
        repr: repr.clone(),
        previous_timestamp: previous.map(|(_, timestamp)| timestamp),
        previous_seq_nr: previous.map(|(seq_nr, _)| seq_nr),
    })
}

#[async_trait]
impl QueryStore for InMemoryJournal {
    async fn current_timestamp(&self) -> Result<i64, JournalError> {
        Ok(self.inner.clock())
    }

    async fn read_events(
        &self,
        request: EventsRequest<'_>,
    ) -> Result<Vec<StoredEvent>, JournalError> {
        Ok(self.inner.merged_page(&request))
    }

    async fn read_persistence_ids(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>, JournalError> {
        let mut ids: Vec<Arc<str>> = Vec::new();
        for stripe in self.inner.stripes.iter() {
            let stripe = lock(&stripe.0);
            ids.extend(
                stripe
                    .ids
                    .iter()
                    .filter(|(id, events)| {
                        events.highest > 0 && after.map_or(true, |a| id.as_bytes() > a.as_bytes())
                    })
                    .map(|(id, _)| Arc::clone(id)),
            );
        }
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
    use crate::query::{Offset, QuerySettings, ReadJournal, StoredEvent};

    fn event(pid: &Arc<str>, writer: &Arc<str>, seq_nr: u64) -> PersistentRepr {
        PersistentRepr {
            persistence_id: Arc::clone(pid),
            seq_nr,
            payload: b"{}".to_vec(),
            serializer_id: 1,
            manifest: String::new(),
            writer_uuid: Arc::clone(writer),
            timestamp: 0,
            tags: Default::default(),
        }
    }

    /// Writers of many ids on several threads (their ids spread over the stripes, each write
    /// under its own stripe's lock) and a reader paging through the query index at the same
    /// time, each page bounded by the store's current timestamp, as a query's settled pass:
    /// the reader meets every event exactly once, in index order, and each id's events in
    /// sequence order. Deletes on another thread drop their events and compact the index
    /// meanwhile; what is left afterwards is exactly the events not deleted.
    #[test]
    fn concurrent_writers_and_a_paging_reader_see_every_event_once() {
        use std::collections::{BTreeSet, HashMap as StdMap};
        use std::thread;

        use crate::query::{EventFilter, EventKey};

        const THREADS: u64 = 4;
        const IDS_PER_THREAD: u64 = 25;
        const EVENTS: u64 = 200;
        let journal = InMemoryJournal::new();
        let writer: Arc<str> = Arc::from("writer");
        let filter = EventFilter::Slices {
            entity_type: "Stripe".to_owned(),
            min_slice: 0,
            max_slice: 1023,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");

        let writers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (journal, writer) = (journal.clone(), Arc::clone(&writer));
                thread::spawn(move || {
                    let ids: Vec<Arc<str>> = (0..IDS_PER_THREAD)
                        .map(|id| Arc::from(format!("Stripe|{thread}-{id}")))
                        .collect();
                    for seq_nr in 1..=EVENTS {
                        for pid in &ids {
                            let write =
                                AtomicWrite::new(vec![event(pid, &writer, seq_nr)]).expect("shape");
                            journal.write_atomic(write, false).expect("stored");
                        }
                    }
                })
            })
            .collect();
        // Deletes the first half of some ids' events while they are written.
        let deleter = {
            let journal = journal.clone();
            thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .expect("runtime");
                for round in 1..=EVENTS / 2 {
                    for id in 0..5 {
                        let pid = format!("Stripe|0-{id}");
                        // Deletes only what is stored (a delete above the highest number
                        // deletes up to it, and the later numbers are written after).
                        while runtime
                            .block_on(journal.read_highest_sequence_nr(&pid, 0))
                            .expect("highest")
                            < round
                        {
                            thread::yield_now();
                        }
                        runtime
                            .block_on(journal.delete_messages_to(
                                &pid,
                                round,
                                FencingToken::UNOWNED,
                            ))
                            .expect("delete");
                    }
                }
            })
        };

        let mut seen: Vec<(Arc<str>, u64)> = Vec::new();
        let mut after = EventKey::start_of(i64::MIN);
        let read_page = |after: &mut EventKey, seen: &mut Vec<(Arc<str>, u64)>| {
            let bound = runtime
                .block_on(journal.current_timestamp())
                .expect("clock");
            loop {
                let page = runtime
                    .block_on(journal.read_events(EventsRequest {
                        filter: &filter,
                        after,
                        before_timestamp: bound,
                        limit: 1000,
                        with_previous_timestamp: false,
                    }))
                    .expect("page");
                let Some(last) = page.last() else { break };
                *after = EventKey {
                    timestamp: last.timestamp,
                    persistence_id: Arc::clone(&last.repr.persistence_id),
                    seq_nr: last.repr.seq_nr,
                };
                seen.extend(
                    page.iter()
                        .map(|e| (Arc::clone(&e.repr.persistence_id), e.repr.seq_nr)),
                );
            }
        };
        while writers.iter().any(|w| !w.is_finished()) {
            read_page(&mut after, &mut seen);
        }
        for thread in writers {
            thread.join().expect("writer");
        }
        deleter.join().expect("deleter");
        read_page(&mut after, &mut seen);

        // Once each, and each id's numbers ascending.
        let distinct: BTreeSet<(String, u64)> =
            seen.iter().map(|(id, n)| (id.to_string(), *n)).collect();
        assert_eq!(distinct.len(), seen.len(), "an event was read twice");
        let mut last: StdMap<Arc<str>, u64> = StdMap::new();
        for (id, seq_nr) in &seen {
            let previous = last.insert(Arc::clone(id), *seq_nr).unwrap_or(0);
            assert!(previous < *seq_nr, "{id}: {seq_nr} after {previous}");
        }
        // Every event the deletes left was read; the deleted ones only if read before their
        // delete, so an id the deleter never touched was read whole.
        let total = THREADS * IDS_PER_THREAD * EVENTS;
        let untouched = seen
            .iter()
            .filter(|(id, _)| {
                !id.starts_with("Stripe|0-") || id[9..].parse::<u64>().map_or(true, |n| n >= 5)
            })
            .count() as u64;
        assert_eq!(untouched, total - 5 * EVENTS);
        for id in 0..5 {
            let pid = format!("Stripe|0-{id}");
            let kept = seen
                .iter()
                .filter(|(i, n)| **i == *pid && *n > EVENTS / 2)
                .count() as u64;
            assert_eq!(kept, EVENTS / 2, "{pid}'s events not deleted");
        }

        // A query from the start now finds exactly the events not deleted, and the index
        // was compacted down to them (at most as many entries again as live ones).
        let mut again = Vec::new();
        read_page(&mut EventKey::start_of(i64::MIN), &mut again);
        assert_eq!(again.len() as u64, total - 5 * EVENTS / 2);
        let entries: usize = journal
            .inner
            .stripes
            .iter()
            .map(|stripe| lock(&stripe.0).index.by_time.len())
            .sum();
        assert!(entries <= 2 * again.len(), "{entries} index entries");
    }

    /// Ids of one stripe only (the others empty), some events tagged and some deleted, the
    /// compaction run: pages of every limit (1 to `u32::MAX`), by tag and by slices, from
    /// every position (the start, an event's key, a key between two) give exactly the live
    /// events after it in (timestamp, id bytes, seq_nr) order, the same as a sort of them.
    #[tokio::test]
    async fn pages_of_one_dense_stripe_are_its_sorted_live_events_whatever_the_limit() {
        use crate::query::{EventFilter, EventKey};

        let journal = InMemoryJournal::new();
        let writer: Arc<str> = Arc::from("writer");
        let stripe = journal.inner.stripe_at("Dense|0");
        // Ids of that one stripe, with shared prefixes and non-ASCII bytes (byte order).
        let ids: Vec<Arc<str>> = (0..)
            .flat_map(|i| {
                [
                    format!("Dense|{i}"),
                    format!("Dense|{i}\u{e9}"),
                    format!("Dense|{i}a"),
                ]
            })
            .filter(|id| journal.inner.stripe_at(id) == stripe)
            .take(12)
            .map(Arc::from)
            .collect();
        for round in 0..40u64 {
            for (i, pid) in ids.iter().enumerate() {
                // Writes of one to three events (one timestamp each), every fifth tagged.
                let from = 1 + round * 3;
                let to = from + (round + i as u64) % 3;
                let events = (from..=to)
                    .map(|n| PersistentRepr {
                        tags: if n % 5 == 0 {
                            crate::Tags::from(["five"])
                        } else {
                            crate::Tags::new()
                        },
                        ..event(pid, &writer, n)
                    })
                    .collect();
                let write = AtomicWrite::new(events).expect("shape");
                journal.write_atomic(write, false).expect("stored");
                // Numbers skipped by this write stay unused (a hole, as a rejected write's).
            }
            if round % 7 == 6 {
                for pid in ids.iter().skip(2) {
                    journal
                        .delete_messages_to(pid, round * 3, FencingToken::UNOWNED)
                        .await
                        .expect("delete");
                }
            }
        }
        let other_stripes: usize = journal
            .inner
            .stripes
            .iter()
            .enumerate()
            .filter(|(s, _)| *s != stripe)
            .map(|(_, stripe)| lock(&stripe.0).index.by_time.len())
            .sum();
        assert_eq!(other_stripes, 0, "events outside the one stripe");

        // What the pages must give: the stored events, sorted by key.
        let mut live: Vec<(EventKey, bool)> = Vec::new();
        {
            let state = lock(&journal.inner.stripes[stripe].0);
            for events in state.ids.values() {
                for (repr, timestamp) in events.range(1, u64::MAX) {
                    let key = EventKey {
                        timestamp: *timestamp,
                        persistence_id: Arc::clone(&repr.persistence_id),
                        seq_nr: repr.seq_nr,
                    };
                    live.push((key, repr.tags.iter().any(|t| t == "five")));
                }
            }
        }
        live.sort();
        // The deletes compacted the index (not every written event has an entry) and left
        // entries of deleted events since (the pages skip them).
        let entries = lock(&journal.inner.stripes[stripe].0).index.by_time.len();
        let written: u64 = (0..40u64)
            .flat_map(|round| (0..12u64).map(move |i| 1 + (round + i) % 3))
            .sum();
        assert!(
            entries < written as usize,
            "{entries} entries, never compacted"
        );
        assert!(
            entries > live.len(),
            "{entries} entries, no deleted one left"
        );
        let filters = [
            EventFilter::Tag("five".to_owned()),
            EventFilter::Slices {
                entity_type: "Dense".to_owned(),
                min_slice: 0,
                max_slice: 1023,
            },
        ];
        for filter in &filters {
            let expected: Vec<EventKey> = live
                .iter()
                .filter(|(_, tagged)| *tagged || matches!(filter, EventFilter::Slices { .. }))
                .map(|(key, _)| key.clone())
                .collect();
            assert!(expected.len() > 20, "{filter:?}: {} events", expected.len());
            let starts = [
                EventKey::start_of(i64::MIN),
                expected[3].clone(),
                EventKey {
                    seq_nr: expected[7].seq_nr + 1000,
                    ..expected[7].clone()
                },
                EventKey::start_of(expected[expected.len() / 2].timestamp),
                expected[expected.len() - 1].clone(),
            ];
            for start in starts {
                for limit in [1, 2, 5, 16, 17, 64, 1000, u32::MAX] {
                    let mut after = start.clone();
                    let mut read = Vec::new();
                    loop {
                        let page = journal
                            .read_events(EventsRequest {
                                filter,
                                after: &after,
                                before_timestamp: i64::MAX,
                                limit,
                                with_previous_timestamp: true,
                            })
                            .await
                            .expect("page");
                        assert!(page.len() <= limit as usize);
                        let Some(last) = page.last() else { break };
                        after = last.key();
                        read.extend(page.iter().map(StoredEvent::key));
                    }
                    let want: Vec<EventKey> =
                        expected.iter().filter(|k| **k > start).cloned().collect();
                    assert_eq!(read, want, "{filter:?} after {start:?} limit {limit}");
                }
            }
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
