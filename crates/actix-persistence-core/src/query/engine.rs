//! The query by offset shared by every store: a settled pass and a fast pass over the stored
//! events in database-timestamp order, deduplicated by persistence id and sequence number.
//!
//! - The **settled pass** reads, from the settled position on, the events with a timestamp
//!   below `now - late_commit_window`: every transaction that inserted such an event has
//!   committed (the window's promise), so once read, nothing below the position can appear any
//!   more. It delivers what the fast pass has not.
//! - The **fast pass** reads, from its own position on, the events up to now, and delivers an
//!   event at once when the persistence id's previous event was delivered (or is deleted, or is
//!   behind the settled position). Otherwise that previous event commits late: the fast pass
//!   leaves both to the settled pass, which delivers them in order within the window.
//! - `seen` holds, per persistence id, the last event delivered at or after the settled
//!   position: an event at or below it is never delivered again. The offset of an envelope is
//!   the settled timestamp plus `seen`, so a resumed query skips exactly what was delivered.
//!
//! A live query runs a full round (both passes) every refresh interval, and a fast pass when
//! the store notifies a write. The fast pass of a full round starts an eighth of the window
//! behind its position, so an event that commits a little late comes within a refresh
//! interval; only one later than that waits for the settled pass.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::{self, Either};
use futures::stream::{self, StreamExt};
use tokio::time::Instant;

use super::own_task::in_own_task;
use super::settled_reads::{resume_after, PageSummary, SettledReads};
use super::{
    EnvelopeStream, EventFilter, EventKey, EventsRequest, Offset, QueryError, QuerySettings,
    QueryStore, RawEnvelope, SeenEvent, SeenMap, StoredEvent, TimestampOffset, WriteNotifications,
};
use crate::error::JournalError;
use crate::store::RunInterner;

/// Envelopes handed to the consumer at once; between two such chunks of a page, reads in
/// flight get to run (see [`OffsetQuery::next_batch`]).
const HANDOVER_CHUNK: usize = 100;

/// Where a query by offset is in its round.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Read the database clock, then the settled pass.
    Start,
    /// The settled pass, up to `bound` (exclusive); then the fast pass up to `fast_bound`.
    Settled { bound: i64, fast_bound: i64 },
    /// The fast pass up to `bound` (exclusive).
    Fast { bound: i64 },
    /// A live query between rounds.
    Wait,
    /// Ended (a current query read everything, or an error was delivered).
    Done,
}

/// The state of one query by slice or by tag.
pub(crate) struct OffsetQuery {
    store: Arc<dyn QueryStore>,
    filter: EventFilter,
    settings: QuerySettings,
    live: bool,
    /// The last position the settled pass covered: every event at or below it was delivered
    /// or is in `seen`.
    settled: EventKey,
    /// The last position the fast pass read.
    fast: EventKey,
    /// Each envelope's offset carries a clone of it (O(1), a shared log of inserts).
    seen: SeenMap,
    /// The entries of `seen` for look-ups (the same entries, plus forgotten ones until the
    /// next compaction: a look-up ignores those below `seen`'s floor).
    delivered: HashMap<Arc<str>, SeenEvent, foldhash::fast::RandomState>,
    /// The envelopes of the page being read, handed to the consumer as one batch.
    buffer: Vec<RawEnvelope>,
    phase: Phase,
    notifications: Option<WriteNotifications>,
    next_round: Instant,
    /// The next page of the fast pass, read while the consumer drains the buffer.
    prefetch: Option<Prefetch>,
    /// The settled pass's pages read ahead, in windows of timestamps (see [`SettledReads`]).
    settled_reads: SettledReads<ReadTask>,
    /// The entity type of the last envelope: envelopes of one entity type share it (a query
    /// by slices allocates it once).
    entity_types: RunInterner,
    /// The slice and entity type of the last envelope's persistence id.
    id_run: Option<IdRun>,
}

/// The slice and entity type of a persistence id, kept for the run of envelopes that share its
/// `Arc` (a store's page gives a run of rows of one id one `Arc`): the run hashes the id
/// ([`slice_for_persistence_id`](super::slice_for_persistence_id)) and finds its entity type
/// once, not once per event.
struct IdRun {
    id: Arc<str>,
    slice: u16,
    entity_type: Arc<str>,
}

/// The envelopes of one page, for the consumer.
struct Batch {
    envelopes: Vec<RawEnvelope>,
    /// Whether reads ahead were in flight when the page was handed over: then the page goes
    /// to the consumer [`HANDOVER_CHUNK`] envelopes at a time (see [`HandOver`]).
    in_chunks: bool,
}

/// Hands the pages of a query to its consumer envelope by envelope. Between two chunks of a
/// page handed [`in chunks`](Batch::in_chunks), the task yields, so that the reads in flight
/// get the thread: on a single-threaded runtime (an Actix arbiter) a consumer that takes
/// envelopes without waiting never yields, and a read's next step (a connection's ping
/// answered, its query sent, its rows decoded) waited for the next page's await: the reads
/// ahead ran one after another instead of at once. The page's own vector is handed over, not
/// a new vector per chunk (its allocation and the copy of 100 envelopes: 53-56 instructions
/// per envelope of a catch-up, callgrind, docs/benchmarks.md "Session 15").
struct HandOver<S> {
    pages: S,
    page: std::vec::IntoIter<RawEnvelope>,
    in_chunks: bool,
    /// Envelopes left before the next yield of a page in chunks.
    until_yield: usize,
    /// The yield under way.
    yielding: Option<future::BoxFuture<'static, ()>>,
}

impl<S> HandOver<S> {
    fn new(pages: S) -> Self {
        HandOver {
            pages,
            page: Vec::new().into_iter(),
            in_chunks: false,
            until_yield: HANDOVER_CHUNK,
            yielding: None,
        }
    }
}

impl<S> futures::Stream for HandOver<S>
where
    S: futures::Stream<Item = Result<Batch, QueryError>> + Unpin,
{
    type Item = Result<RawEnvelope, QueryError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        let this = &mut *self;
        loop {
            if let Some(yielding) = &mut this.yielding {
                futures::ready!(yielding.as_mut().poll(cx));
                this.yielding = None;
            }
            if this.page.len() > 0 {
                if this.until_yield == 0 {
                    this.until_yield = HANDOVER_CHUNK;
                    if this.in_chunks {
                        // As `tokio::task::yield_now`, which lets the runtime poll its I/O
                        // before the task runs again (a wake-up of its own would not).
                        this.yielding = Some(Box::pin(tokio::task::yield_now()));
                        continue;
                    }
                }
                this.until_yield -= 1;
                return Poll::Ready(this.page.next().map(Ok));
            }
            match futures::ready!(this.pages.poll_next_unpin(cx)) {
                None => return Poll::Ready(None),
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                Some(Ok(batch)) => {
                    this.page = batch.envelopes.into_iter();
                    this.in_chunks = batch.in_chunks;
                    this.until_yield = HANDOVER_CHUNK;
                }
            }
        }
    }
}

/// A page read ahead by the fast pass: the request it answers (position, bound) and the task
/// reading it.
struct Prefetch {
    after: EventKey,
    bound: i64,
    task: ReadTask,
}

/// A page read by a task of its own, aborted when dropped (a query dropped, or a position that
/// moved elsewhere).
///
/// Every read of a query runs in such a task, also the one the query waits for at once: a
/// read under way then completes, and gives its database connection back to the pool, when
/// the consumer stops pulling in the middle of it (a `select!` that took another branch, a
/// projection paused meanwhile). Read inside the stream's own future, it stayed checked out
/// until the consumer pulled again, however long that took; a few consumers that paused so
/// held every reader connection of the journal, and every query, replay and recovery on it
/// waited.
struct ReadTask(tokio::task::JoinHandle<Result<Vec<StoredEvent>, JournalError>>);

impl ReadTask {
    /// Starts reading the page of `filter` after `after` below `bound` on the current runtime;
    /// `None` outside one (the page is then read when it is needed).
    fn start(
        store: &Arc<dyn QueryStore>,
        filter: &EventFilter,
        limit: u32,
        after: EventKey,
        bound: i64,
        fast: bool,
    ) -> Option<Self> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let store = Arc::clone(store);
        let filter = filter.clone();
        Some(ReadTask(runtime.spawn(async move {
            store
                .read_events(EventsRequest {
                    filter: &filter,
                    after: &after,
                    before_timestamp: bound,
                    limit,
                    with_previous_timestamp: fast,
                })
                .await
        })))
    }

    /// The page.
    async fn page(mut self) -> Result<Vec<StoredEvent>, QueryError> {
        match (&mut self.0).await {
            Ok(page) => Ok(page?),
            Err(error) => Err(JournalError::storage("read a query page", error).into()),
        }
    }
}

impl Drop for ReadTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl OffsetQuery {
    /// A query of `filter` from `offset`; `live` keeps it running.
    ///
    /// # Errors
    /// [`QueryError::InvalidOffset`] for a sequence offset.
    pub(crate) fn start(
        store: Arc<dyn QueryStore>,
        filter: EventFilter,
        settings: QuerySettings,
        offset: Offset,
        live: bool,
        query: &'static str,
    ) -> EnvelopeStream {
        let (settled, seen) = match offset {
            Offset::NoOffset => (EventKey::start_of(i64::MIN), SeenMap::new()),
            Offset::Timestamp(TimestampOffset { timestamp, seen }) => {
                (EventKey::start_of(timestamp), seen)
            }
            other @ Offset::Sequence { .. } => {
                let error = QueryError::InvalidOffset {
                    query,
                    offset: other.kind(),
                };
                return stream::once(future::ready(Err(error))).boxed();
            }
        };
        let notifications = if live {
            store.write_notifications()
        } else {
            None
        };
        let delivered = seen
            .iter()
            .map(|(id, seen)| (Arc::clone(id), *seen))
            .collect();
        let settled_reads = SettledReads::new(
            settings.page_size.max(1) as usize,
            settings.read_ahead_pages_in_force() as usize,
        );
        let state = OffsetQuery {
            store,
            filter,
            settings,
            live,
            fast: settled.clone(),
            settled,
            seen,
            delivered,
            buffer: Vec::new(),
            phase: Phase::Start,
            notifications,
            next_round: Instant::now(),
            prefetch: None,
            settled_reads,
            entity_types: RunInterner::new(),
            id_run: None,
        };
        // A page at a time through `unfold` (moving the state in and out of a future per
        // element cost more than the rest of a delivery), handed over envelope by envelope.
        HandOver::new(
            stream::unfold(state, |mut state| async move {
                let batch = state.next_batch().await?;
                if batch.is_err() {
                    state.phase = Phase::Done;
                }
                Some((batch, state))
            })
            .boxed(),
        )
        .boxed()
    }

    /// The next envelopes (those of one page that were not delivered before), reading pages
    /// (and waiting, when live) as needed.
    async fn next_batch(&mut self) -> Option<Result<Batch, QueryError>> {
        loop {
            if !self.buffer.is_empty() {
                // In chunks only while reads are in flight: otherwise nothing needs the thread.
                let in_chunks = self.buffer.len() > HANDOVER_CHUNK && self.reading_ahead();
                return Some(Ok(Batch {
                    envelopes: std::mem::take(&mut self.buffer),
                    in_chunks,
                }));
            }
            let step = match self.phase {
                Phase::Done => return None,
                Phase::Start => self.start_round().await,
                Phase::Settled { bound, fast_bound } => self.settled_page(bound, fast_bound).await,
                Phase::Fast { bound } => self.fast_page(bound).await,
                Phase::Wait => {
                    self.wait().await;
                    Ok(())
                }
            };
            if let Err(error) = step {
                return Some(Err(error));
            }
        }
    }

    /// Whether a page is being read ahead (by either pass).
    fn reading_ahead(&self) -> bool {
        self.prefetch.is_some() || self.settled_reads.in_flight()
    }

    /// Reads the database clock and starts the settled pass.
    async fn start_round(&mut self) -> Result<(), QueryError> {
        let (now, committed) = self.database_clock().await?;
        let window =
            i64::try_from(self.settings.late_commit_window.as_micros()).unwrap_or(i64::MAX);
        // The fast pass of a full round starts an eighth of the window behind where it stopped:
        // events that committed a little late (concurrent transactions) come within one refresh
        // interval instead of a whole window; what it delivered already is in `seen`.
        let backtrack = EventKey::start_of(self.fast.timestamp.saturating_sub(window / 8));
        if backtrack < self.fast {
            self.fast = backtrack;
        }
        // Saturating: a refresh interval too long for the clock means "never by time".
        self.next_round = crate::clock::far_future_saturating(self.settings.refresh_interval);
        self.phase = Phase::Settled {
            // A store that commits in timestamp order tells where nothing more will commit.
            bound: committed.map_or(now.saturating_sub(window), |committed| {
                committed.max(now.saturating_sub(window))
            }),
            // Up to now, inclusive: a current query ends at the events stored when it started.
            fast_bound: now.saturating_add(1),
        };
        Ok(())
    }

    fn request<'a>(&'a self, after: &'a EventKey, bound: i64, fast: bool) -> EventsRequest<'a> {
        EventsRequest {
            filter: &self.filter,
            after,
            before_timestamp: bound,
            limit: self.settings.page_size.max(1),
            with_previous_timestamp: fast,
        }
    }

    /// One page of the fast pass from `after` up to `bound`: the page read ahead if it answers
    /// this request, else read now.
    async fn read_fast_page(
        &mut self,
        after: &EventKey,
        bound: i64,
    ) -> Result<Vec<StoredEvent>, QueryError> {
        if let Some(prefetch) = self.prefetch.take() {
            if prefetch.bound == bound && prefetch.after == *after {
                return prefetch.task.page().await;
            }
        }
        self.read_page(after, bound, self.settings.page_size.max(1), true)
            .await
    }

    /// One page read now, in a task of its own (see [`ReadTask`]); inline outside a runtime.
    async fn read_page(
        &self,
        after: &EventKey,
        bound: i64,
        limit: u32,
        fast: bool,
    ) -> Result<Vec<StoredEvent>, QueryError> {
        match ReadTask::start(&self.store, &self.filter, limit, after.clone(), bound, fast) {
            Some(task) => task.page().await,
            None => {
                let request = EventsRequest {
                    limit,
                    ..self.request(after, bound, fast)
                };
                Ok(self.store.read_events(request).await?)
            }
        }
    }

    /// The database clock and the store's [`QueryStore::committed_before`], read in a task of
    /// their own as pages are ([`ReadTask`], [`in_own_task`]): the reads complete and give
    /// their connection back also when the consumer stops pulling meanwhile.
    async fn database_clock(&self) -> Result<(i64, Option<i64>), QueryError> {
        let store = Arc::clone(&self.store);
        let now = in_own_task("read the database clock", async move {
            let now = store.current_timestamp().await?;
            Ok((now, store.committed_before().await?))
        });
        Ok(now.await?)
    }

    /// Starts reading the fast pass's page after `after` (when the page just read was full):
    /// the store works on it while this page is delivered and the consumer takes its
    /// envelopes. At most one page is read ahead.
    ///
    /// Yields once, so that the reading task sends its query before this page is delivered: a
    /// consumer that takes envelopes without waiting never yields to the runtime, and on a
    /// single-threaded runtime (an Actix arbiter) the query would otherwise be sent only when
    /// the next page is awaited, leaving the database idle while the page is delivered.
    async fn read_fast_ahead(&mut self, after: EventKey, bound: i64) {
        let limit = self.settings.page_size.max(1);
        let Some(task) =
            ReadTask::start(&self.store, &self.filter, limit, after.clone(), bound, true)
        else {
            return;
        };
        self.prefetch = Some(Prefetch { after, bound, task });
        tokio::task::yield_now().await;
    }

    /// Starts the settled pass's planned reads that are not in flight yet; yields once when
    /// it started one (as [`Self::read_fast_ahead`]).
    async fn start_settled_reads(&mut self) {
        let limit = self.settled_read_limit();
        let mut started = false;
        for read in self.settled_reads.unstarted() {
            read.task = ReadTask::start(
                &self.store,
                &self.filter,
                limit,
                read.after.clone(),
                read.end,
                false,
            );
            started |= read.task.is_some();
        }
        if started {
            tokio::task::yield_now().await;
        }
    }

    /// Events a read of the settled pass asks for ([`SettledReads::read_limit`]).
    fn settled_read_limit(&self) -> u32 {
        u32::try_from(self.settled_reads.read_limit()).unwrap_or(u32::MAX)
    }

    /// The next page of the settled pass (see [`SettledReads`]): the pages after it, and the
    /// windows of timestamps after its own, are read while it is delivered.
    async fn settled_page(&mut self, bound: i64, fast_bound: i64) -> Result<(), QueryError> {
        let mut read = self.settled_reads.next_read(&self.settled, bound);
        let mut page = match read.task.take() {
            Some(task) => task.page().await?,
            None => {
                self.read_page(&read.after, read.end, self.settled_read_limit(), false)
                    .await?
            }
        };
        // The event after a page only tells that the window goes on (see `read_limit`).
        let page_size = self.settings.page_size.max(1) as usize;
        let more = page.len() > page_size;
        let next_timestamp = page.get(page_size).map(|event| event.timestamp);
        page.truncate(page_size);
        let summary = PageSummary {
            len: page.len(),
            more,
            first_timestamp: page.first().map(|event| event.timestamp),
            next_timestamp,
        };
        let last_key = page.last().map(StoredEvent::key);
        let pass_over = self
            .settled_reads
            .page_done(&read, summary, last_key.as_ref());
        self.start_settled_reads().await;
        self.buffer.reserve(page.len());
        let last = page.len().saturating_sub(1);
        for (i, event) in page.into_iter().enumerate() {
            // Only the settled timestamp is read while the page is delivered (offsets, and
            // which `seen` entries to keep): the whole key is set once, at the page's last
            // event, which saves a persistence id copy per event.
            self.advance_settled_timestamp(event.timestamp);
            if i == last {
                self.settled = event.key();
            }
            if !self.is_delivered(&event) {
                self.deliver(event);
            }
        }
        if summary.more {
            // The window goes on where its continuation was planned: at the start of a later
            // timestamp when the page ended one (`resume_after`), which is then read in full.
            if let Some(last_key) = &last_key {
                let resume = resume_after(last_key, summary.next_timestamp);
                if resume > self.settled {
                    self.advance_settled(resume);
                }
            }
        } else {
            // Everything below the window's end is read (below `bound` when it was the last).
            let end = EventKey::start_of(read.end);
            if end > self.settled {
                self.advance_settled(end);
            }
            if pass_over {
                self.phase = Phase::Fast { bound: fast_bound };
            }
        }
        Ok(())
    }

    async fn fast_page(&mut self, bound: i64) -> Result<(), QueryError> {
        if self.fast < self.settled {
            self.fast = self.settled.clone();
        }
        let after = self.fast.clone();
        let page = self.read_fast_page(&after, bound).await?;
        let full = page.len() >= self.settings.page_size.max(1) as usize;
        if full {
            // The next page starts after this one's last event (where `fast` will be).
            if let Some(last) = page.last() {
                self.read_fast_ahead(last.key(), bound).await;
            }
        }
        self.buffer.reserve(page.len());
        for event in page {
            self.fast = event.key();
            if !self.is_delivered(&event) && self.predecessor_delivered(&event) {
                self.deliver(event);
            }
        }
        if !full {
            self.phase = if self.live { Phase::Wait } else { Phase::Done };
        }
        Ok(())
    }

    /// Waits for the next round (refresh interval) or a write notification (a fast pass,
    /// from as far back as the notified commits ask).
    async fn wait(&mut self) {
        let round = tokio::time::sleep_until(self.next_round);
        let lookback = match self.notifications.as_mut() {
            None => {
                round.await;
                None
            }
            Some(notifications) => {
                let woken_by_write = {
                    let notified = notifications.notified();
                    futures::pin_mut!(round, notified);
                    matches!(future::select(round, notified).await, Either::Right(_))
                };
                woken_by_write.then(|| notifications.take_lookback())
            }
        };
        self.phase = match lookback {
            Some(lookback) => {
                self.look_back(lookback);
                Phase::Fast { bound: i64::MAX }
            }
            None => Phase::Start,
        };
    }

    /// Moves the fast pass back by `lookback` (a notified commit's, see
    /// [`WriteNotifier::notify_committed`](super::WriteNotifier::notify_committed)), so that
    /// it reads the events that transaction stored behind the newest one read: what was
    /// delivered already is in `seen` and not delivered again.
    fn look_back(&mut self, lookback: std::time::Duration) {
        let micros = i64::try_from(lookback.as_micros()).unwrap_or(i64::MAX);
        if micros > 0 {
            let from = EventKey::start_of(self.fast.timestamp.saturating_sub(micros));
            if from < self.fast {
                self.fast = from;
            }
        }
    }

    /// Moves the settled timestamp up to `timestamp` (the rest of the key is set by the
    /// caller), forgetting seen events below it.
    fn advance_settled_timestamp(&mut self, timestamp: i64) {
        if timestamp > self.settled.timestamp {
            self.settled.timestamp = timestamp;
            self.forget_seen_below(timestamp);
        }
    }

    /// Forgets the seen events with a timestamp below `floor` (O(1): see [`Self::compact_seen`]).
    fn forget_seen_below(&mut self, floor: i64) {
        self.seen.forget_below(floor);
    }

    /// Drops the forgotten entries of `delivered` and `seen`'s log once they are most of it:
    /// amortized O(1) per delivered event.
    fn compact_seen(&mut self) {
        if self.seen.log_len() <= self.delivered.len().saturating_mul(2).saturating_add(64) {
            return;
        }
        let floor = self.seen.floor();
        self.delivered.retain(|_, seen| seen.timestamp >= floor);
        // `delivered` now holds exactly the entries `seen` sees: the new log is built from it.
        self.seen.compact_from(self.delivered.iter());
    }

    /// The last event of `persistence_id` this query delivered at or after the settled position.
    fn last_delivered(&self, persistence_id: &str) -> Option<SeenEvent> {
        self.delivered
            .get(persistence_id)
            .filter(|seen| seen.timestamp >= self.seen.floor())
            .copied()
    }

    /// Moves the settled position to `key`, forgetting seen events below its timestamp.
    fn advance_settled(&mut self, key: EventKey) {
        let new_timestamp = key.timestamp > self.settled.timestamp;
        self.settled = key;
        if new_timestamp {
            self.forget_seen_below(self.settled.timestamp);
        }
    }

    /// Whether this query delivered `event` already.
    fn is_delivered(&self, event: &StoredEvent) -> bool {
        self.last_delivered(&event.repr.persistence_id)
            .is_some_and(|seen| seen.seq_nr >= event.repr.seq_nr)
    }

    /// Whether the previous event of `event`'s persistence id that the query selects was
    /// delivered, or lies behind the settled position (so the fast pass may deliver `event`
    /// without breaking the persistence id's order). True when there is none (the first, or
    /// the earlier ones are deleted).
    fn predecessor_delivered(&self, event: &StoredEvent) -> bool {
        let (Some(seq_nr), Some(timestamp)) = (event.previous_seq_nr, event.previous_timestamp)
        else {
            return true;
        };
        if self
            .last_delivered(&event.repr.persistence_id)
            .is_some_and(|seen| seen.seq_nr >= seq_nr)
        {
            return true;
        }
        let previous = EventKey {
            timestamp,
            persistence_id: Arc::clone(&event.repr.persistence_id),
            seq_nr,
        };
        previous <= self.settled
    }

    fn deliver(&mut self, event: StoredEvent) {
        let seen = SeenEvent {
            seq_nr: event.repr.seq_nr,
            timestamp: event.timestamp,
        };
        // One look-up when the id has an entry (the event's `Arc` then goes to `seen`: no
        // allocation either way).
        let id = Arc::clone(&event.repr.persistence_id);
        match self.delivered.get_mut(&*id) {
            Some(entry) => *entry = seen,
            None => {
                self.delivered.insert(Arc::clone(&id), seen);
            }
        }
        self.seen.insert(id, seen);
        self.compact_seen();
        let offset = Offset::Timestamp(TimestampOffset {
            timestamp: self.settled.timestamp,
            seen: self.seen.clone(),
        });
        let (slice, entity_type) = self.slice_and_entity_type(&event.repr.persistence_id);
        self.buffer.push(RawEnvelope::from_repr_in_slice(
            event.repr,
            offset,
            slice,
            entity_type,
        ));
    }

    /// The slice and entity type of `id`: those of the run it continues (the same `Arc`), or
    /// found now and kept for the run it starts.
    fn slice_and_entity_type(&mut self, id: &Arc<str>) -> (u16, Arc<str>) {
        match &self.id_run {
            Some(run) if Arc::ptr_eq(&run.id, id) => (run.slice, Arc::clone(&run.entity_type)),
            _ => {
                let run = IdRun {
                    id: Arc::clone(id),
                    slice: super::slice_for_persistence_id(id),
                    entity_type: self.entity_types.intern(super::entity_type_of(id)),
                };
                let found = (run.slice, Arc::clone(&run.entity_type));
                self.id_run = Some(run);
                found
            }
        }
    }
}
