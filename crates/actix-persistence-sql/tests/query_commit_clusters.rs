//! Queries by slices and by tag over **clusters**: events that share one database timestamp
//! because one `write_messages` call (a group commit) stored them in one transaction. The
//! settled pass reads pages of `page` events plus one; a page that ends a cluster is continued
//! at the start of the next cluster's timestamp (`resume_after` in the core's
//! `query/settled_reads.rs`), one that ends inside a cluster right after its last event (on
//! SQLite a row-value comparison, `page_query_sql`).
//!
//! Each test writes clusters of sizes below, equal to, one above and several times the page
//! size (pages of 1, 2, 3, 5, 7), mixed with events of another entity type and partly tagged,
//! checks from the stored timestamps that each call's events share one timestamp (and that the
//! calls' timestamps increase), deletes events inside clusters, and then checks every query
//! against the list computed from what was written: current queries by slices (whole and half
//! slice ranges) and by tag with 1, 2 and 4 pages read ahead; a current query resumed from the
//! offset of every envelope delivered (after more deletes); live queries by slices and by tag
//! over the stored clusters and clusters written while they run. On SQLite the `dense` variants
//! put the journal's clock floor ahead of the wall clock, so that consecutive calls get
//! consecutive microseconds (clusters 1 µs apart). `store_pages_after_every_position` reads the
//! store's pages directly from every position (after each event, deleted ones too, and at the
//! start of each timestamp), with several limits and bounds.
//!
//! The current queries also run over a store that records their reads, and check how the
//! settled pass read (`check_reads`): no event twice in the delivered part of its pages, and a
//! page that starts right after an event only inside that event's timestamp. The delivered
//! events alone do not show a continuation planned at the wrong place: the engine drops a
//! planned read that does not start at its settled position and reads from there instead.
#![cfg(any(feature = "sqlite", feature = "test-util"))]

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_persistence_core::query::{
    entity_type_of, slice_for_persistence_id, wall_clock_micros, EnvelopeStream, EventFilter,
    EventKey, EventsRequest, Offset, QuerySettings, QueryStore, RawEnvelope, ReadJournal,
    StoredEvent, WriteNotifications,
};
use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, FencingToken, JournalError, JournalStore, PersistentRepr,
    ReplayStream,
};
use async_trait::async_trait;
use common::{backend_tests, TestBackend};
use futures::{StreamExt, TryStreamExt};

backend_tests! {
    pages_of_1,
    pages_of_2,
    pages_of_3,
    pages_of_5,
    pages_of_7,
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pages_of_3_on_two_threads,
    store_pages_after_every_position,
}

async fn pages_of_1<B: TestBackend>(db: B) {
    clusters(db, 1, Timing::Natural).await;
}

async fn pages_of_2<B: TestBackend>(db: B) {
    clusters(db, 2, Timing::Natural).await;
}

async fn pages_of_3<B: TestBackend>(db: B) {
    clusters(db, 3, Timing::Natural).await;
}

async fn pages_of_5<B: TestBackend>(db: B) {
    clusters(db, 5, Timing::Natural).await;
}

async fn pages_of_7<B: TestBackend>(db: B) {
    clusters(db, 7, Timing::Natural).await;
}

/// Clusters 1 µs apart: SQLite only (its clock floor can be put ahead of the wall clock).
#[cfg(feature = "sqlite")]
mod dense {
    use super::{clusters, common, Timing};
    use common::sqlite::SqliteDb;

    #[tokio::test]
    async fn dense_pages_of_1() {
        common::run(|db: SqliteDb| clusters(db, 1, Timing::Adjacent)).await;
    }

    #[tokio::test]
    async fn dense_pages_of_2() {
        common::run(|db: SqliteDb| clusters(db, 2, Timing::Adjacent)).await;
    }

    #[tokio::test]
    async fn dense_pages_of_5() {
        common::run(|db: SqliteDb| clusters(db, 5, Timing::Adjacent)).await;
    }

    #[tokio::test]
    async fn dense_pages_of_7() {
        common::run(|db: SqliteDb| clusters(db, 7, Timing::Adjacent)).await;
    }
}

async fn pages_of_3_on_two_threads<B: TestBackend>(db: B) {
    clusters(db, 3, Timing::Natural).await;
}

/// How far apart the calls' timestamps are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timing {
    /// As the store gives them (the wall clock).
    Natural,
    /// 1 µs apart: the journal's clock floor is put ahead of the wall clock, so that every
    /// call takes the floor plus one (SQLite only: its `journal_clock`, as after a wall clock
    /// step back).
    Adjacent,
}

fn is_sqlite<B: TestBackend>() -> bool {
    B::OWN_TABLES.contains(&"journal_clock")
}

/// Puts the SQLite journal's clock floor a minute ahead of the wall clock; false on PostgreSQL.
async fn clock_ahead<B: TestBackend>(db: &B) -> bool {
    if !is_sqlite::<B>() {
        return false;
    }
    let ahead = wall_clock_micros() + 60_000_000;
    db.execute(&format!(
        "UPDATE journal_clock SET last_timestamp = {ahead} WHERE id = 0"
    ))
    .await;
    true
}

/// SplitMix64: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

/// Pieces of persistence id names whose byte order differs from other orders: upper case
/// before lower case, a prefix of another name, a space, accented letters, and a character
/// outside the BMP after one inside it (UTF-16 orders them the other way).
const FRAGMENTS: &[&str] = &[
    "a", "Z", "ab", "ab1", "é", "～", "😀", "b-", "a b", "zz", "A", "_",
];

type Key = (String, u64);

/// One written event.
#[derive(Debug, Clone)]
struct Written {
    pid: Arc<str>,
    seq: u64,
    /// The `write_messages` call that stored it (calls are numbered in order).
    call: usize,
    tagged: bool,
}

impl Written {
    fn key(&self) -> Key {
        (self.pid.to_string(), self.seq)
    }
}

/// What a test wrote and deleted: the truth queries are checked against.
struct Data {
    entity: String,
    noise_entity: String,
    tag: String,
    ids: Vec<Arc<str>>,
    noise_ids: Vec<Arc<str>>,
    highest: HashMap<Arc<str>, u64>,
    events: Vec<Written>,
    deleted: HashSet<Key>,
    calls: usize,
    rng: Rng,
}

impl Data {
    /// Persistence ids of entity type `entity`, enough for a cluster of `largest` events of
    /// one event each.
    fn new(entity: &str, largest: usize, seed: u64) -> Self {
        let names = |entity: &str, n: usize| -> Vec<Arc<str>> {
            (0..n)
                .map(|i| {
                    let fragment = FRAGMENTS[i % FRAGMENTS.len()];
                    Arc::from(format!("{entity}|{fragment}{}", i / FRAGMENTS.len()))
                })
                .collect()
        };
        Data {
            entity: entity.to_owned(),
            noise_entity: format!("Noise{entity}"),
            tag: format!("tag-{entity}"),
            ids: names(entity, largest + 3),
            noise_ids: names(&format!("Noise{entity}"), 6),
            highest: HashMap::new(),
            events: Vec::new(),
            deleted: HashSet::new(),
            calls: 0,
            rng: Rng(seed),
        }
    }

    fn write(&mut self, pid: &Arc<str>, n: u64, tagged: &mut dyn FnMut() -> bool) -> AtomicWrite {
        let from = self.highest.get(pid).copied().unwrap_or(0) + 1;
        let call = self.calls;
        let events = (from..from + n)
            .map(|seq| {
                let tagged = tagged();
                self.events.push(Written {
                    pid: Arc::clone(pid),
                    seq,
                    call,
                    tagged,
                });
                PersistentRepr {
                    persistence_id: Arc::clone(pid),
                    seq_nr: seq,
                    payload: format!("{{\"n\":{seq}}}").into_bytes(),
                    serializer_id: 1,
                    manifest: String::new(),
                    writer_uuid: "w".into(),
                    timestamp: 0,
                    tags: if tagged {
                        vec![self.tag.clone()].into()
                    } else {
                        Default::default()
                    },
                }
            })
            .collect();
        self.highest.insert(Arc::clone(pid), from + n - 1);
        AtomicWrite::new(events).expect("consecutive events")
    }

    /// One `write_messages` call storing `size` events of the entity type (atomic writes of
    /// one to three events of distinct ids), and zero to two events of another entity type.
    /// Every event of an even-numbered call carries the tag, about half of an odd one's.
    async fn write_cluster(&mut self, journal: &impl JournalStore, size: usize) {
        let call = self.calls;
        let all_tagged = call % 2 == 0;
        let mut order: Vec<usize> = (0..self.ids.len()).collect();
        self.rng.shuffle(&mut order);
        let mut writes = Vec::new();
        let mut left = size;
        for i in order {
            if left == 0 {
                break;
            }
            let n = if self.rng.chance(25) {
                2 + self.rng.below(2)
            } else {
                1
            }
            .min(left);
            left -= n;
            let pid = Arc::clone(&self.ids[i]);
            let mut rng = Rng(self.rng.next());
            writes.push(self.write(&pid, n as u64, &mut || all_tagged || rng.chance(50)));
        }
        assert_eq!(left, 0, "enough ids for a cluster of {size}");
        for _ in 0..self.rng.below(3) {
            let pid = Arc::clone(&self.noise_ids[self.rng.below(self.noise_ids.len())]);
            if writes.iter().any(|w| w.persistence_id() == &*pid) {
                continue;
            }
            let mut rng = Rng(self.rng.next());
            writes.push(self.write(&pid, 1, &mut || rng.chance(50)));
        }
        self.rng.shuffle(&mut writes);
        let count = writes.len();
        let results = journal
            .write_messages(writes)
            .await
            .expect("write a cluster");
        assert_eq!(results.len(), count);
        for result in &results {
            assert!(result.is_ok(), "atomic write failed: {result:?}");
        }
        self.calls += 1;
    }

    /// Deletes the events of about `percent` % of the ids up to a random one of their stored
    /// sequence numbers.
    async fn delete_some(&mut self, journal: &impl JournalStore, percent: u64) {
        let ids: Vec<Arc<str>> = self.ids.iter().chain(&self.noise_ids).cloned().collect();
        for pid in ids {
            let Some(&highest) = self.highest.get(&pid) else {
                continue;
            };
            if !self.rng.chance(percent) {
                continue;
            }
            let to = 1 + self.rng.below(highest as usize) as u64;
            journal
                .delete_messages_to(&pid, to, FencingToken::UNOWNED)
                .await
                .expect("delete");
            for seq in 1..=to {
                self.deleted.insert((pid.to_string(), seq));
            }
        }
    }

    /// Whether `filter` selects `event` (deleted or not).
    fn selects(&self, filter: &EventFilter, event: &Written) -> bool {
        match filter {
            EventFilter::Slices {
                entity_type,
                min_slice,
                max_slice,
            } => {
                entity_type_of(&event.pid) == entity_type
                    && (*min_slice..=*max_slice).contains(&slice_for_persistence_id(&event.pid))
            }
            EventFilter::Tag(tag) => event.tagged && *tag == self.tag,
        }
    }

    /// The stored events `filter` selects, in query order: by call (each call's events share
    /// one timestamp and the calls' timestamps increase, which `timestamps` checks), then by
    /// persistence id (bytes) and sequence number.
    fn expected_events(&self, filter: &EventFilter) -> Vec<&Written> {
        let mut events: Vec<&Written> = self
            .events
            .iter()
            .filter(|e| self.selects(filter, e) && !self.deleted.contains(&e.key()))
            .collect();
        events.sort_by(|a, b| {
            (a.call, a.pid.as_bytes(), a.seq).cmp(&(b.call, b.pid.as_bytes(), b.seq))
        });
        events
    }

    fn expected(&self, filter: &EventFilter) -> Vec<Key> {
        self.expected_events(filter)
            .into_iter()
            .map(Written::key)
            .collect()
    }

    fn slices(&self, min: u16, max: u16) -> EventFilter {
        EventFilter::Slices {
            entity_type: self.entity.clone(),
            min_slice: min,
            max_slice: max,
        }
    }

    fn filters(&self) -> Vec<EventFilter> {
        vec![
            self.slices(0, 1023),
            self.slices(0, 511),
            self.slices(512, 1023),
            EventFilter::Tag(self.tag.clone()),
        ]
    }
}

/// Every stored event of `filter` as the store reads it in one page.
async fn stored(journal: &impl QueryStore, filter: &EventFilter) -> Vec<StoredEvent> {
    journal
        .read_events(EventsRequest {
            filter,
            after: &EventKey::start_of(i64::MIN),
            before_timestamp: i64::MAX,
            limit: 1_000_000,
            with_previous_timestamp: false,
        })
        .await
        .expect("read every event")
}

/// The database timestamp of every written event, checked to make clusters: the events of one
/// call share one timestamp, and each call's is above the one before (1 µs above with
/// `Timing::Adjacent`). Call before deleting anything.
async fn timestamps(journal: &impl QueryStore, data: &Data, timing: Timing) -> HashMap<Key, i64> {
    let mut at = HashMap::new();
    for entity in [&data.entity, &data.noise_entity] {
        let filter = EventFilter::Slices {
            entity_type: entity.clone(),
            min_slice: 0,
            max_slice: 1023,
        };
        for event in stored(journal, &filter).await {
            at.insert(
                (event.repr.persistence_id.to_string(), event.repr.seq_nr),
                event.timestamp,
            );
        }
    }
    assert_eq!(at.len(), data.events.len(), "every written event is stored");
    let mut per_call: Vec<HashSet<i64>> = vec![HashSet::new(); data.calls];
    for event in &data.events {
        per_call[event.call].insert(at[&event.key()]);
    }
    let mut previous: Option<i64> = None;
    for (call, stamps) in per_call.iter().enumerate() {
        assert_eq!(
            stamps.len(),
            1,
            "the events of call {call} share one database timestamp: {stamps:?}"
        );
        let stamp = *stamps.iter().next().unwrap();
        if let Some(previous) = previous {
            assert!(
                stamp > previous,
                "call {call} is stamped after the one before"
            );
            if timing == Timing::Adjacent {
                assert_eq!(
                    stamp,
                    previous + 1,
                    "call {call} is 1 µs after the one before"
                );
            }
        }
        previous = Some(stamp);
    }
    // The store reads them in the order computed from the writes.
    let full = data.slices(0, 1023);
    let order: Vec<Key> = stored(journal, &full)
        .await
        .iter()
        .map(|e| (e.repr.persistence_id.to_string(), e.repr.seq_nr))
        .collect();
    check("the store's order", &order, &data.expected(&full));
    at
}

/// One page a query asked its store for, and what the store answered.
struct Read {
    after: EventKey,
    settled: bool,
    events: Vec<EventKey>,
}

/// A journal that records the pages queries read from it (each query gets a recorder of its
/// own, see [`recorded`]).
#[derive(Clone)]
struct Recorded<J> {
    journal: J,
    reads: Arc<Mutex<Vec<Read>>>,
}

#[async_trait]
impl<J: QueryStore> JournalStore for Recorded<J> {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        self.journal.write_messages(writes).await
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.journal.replay_messages(pid, from, to, max)
    }

    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        self.journal.read_highest_sequence_nr(pid, from).await
    }

    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        fencing_token: FencingToken,
    ) -> Result<(), JournalError> {
        self.journal
            .delete_messages_to(pid, to, fencing_token)
            .await
    }
}

#[async_trait]
impl<J: QueryStore> QueryStore for Recorded<J> {
    async fn current_timestamp(&self) -> Result<i64, JournalError> {
        self.journal.current_timestamp().await
    }

    async fn committed_before(&self) -> Result<Option<i64>, JournalError> {
        self.journal.committed_before().await
    }

    async fn read_events(
        &self,
        request: EventsRequest<'_>,
    ) -> Result<Vec<StoredEvent>, JournalError> {
        let after = request.after.clone();
        let settled = !request.with_previous_timestamp;
        let page = self.journal.read_events(request).await?;
        self.reads.lock().unwrap().push(Read {
            after,
            settled,
            events: page.iter().map(StoredEvent::key).collect(),
        });
        Ok(page)
    }

    async fn read_persistence_ids(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>, JournalError> {
        self.journal.read_persistence_ids(after, limit).await
    }

    fn write_notifications(&self) -> Option<WriteNotifications> {
        self.journal.write_notifications()
    }
}

/// A query journal over `journal` recording its reads, and the record.
fn recorded<J: QueryStore + Clone>(
    journal: &J,
    settings: QuerySettings,
) -> (ReadJournal, Arc<Mutex<Vec<Read>>>) {
    let reads = Arc::new(Mutex::new(Vec::new()));
    let store = Recorded {
        journal: journal.clone(),
        reads: Arc::clone(&reads),
    };
    (ReadJournal::new(store, settings), reads)
}

/// Checks how one current query's settled pass read its pages (the point of `resume_after`):
/// - no event is read twice in the pages' delivered part (their first `page` events): a
///   continuation starts where the page before it ended, never at the start of a timestamp
///   that page had read part of;
/// - a page starts right after an event only inside a timestamp (the page before it ended
///   inside a cluster): its first event has that event's timestamp. A page that ended its
///   cluster is continued at the start of the next one's timestamp.
fn check_reads(label: &str, reads: &Mutex<Vec<Read>>, page: usize) {
    let reads = reads.lock().unwrap();
    let mut read: HashSet<&EventKey> = HashSet::new();
    for (i, r) in reads.iter().enumerate().filter(|(_, r)| r.settled) {
        for key in r.events.iter().take(page) {
            assert!(
                read.insert(key),
                "{label}: settled read {i} (after {:?}) reads {key:?} again",
                r.after
            );
        }
        let after_an_event = !r.after.persistence_id.is_empty() || r.after.seq_nr != 0;
        if let (true, Some(first)) = (after_an_event, r.events.first()) {
            assert_eq!(
                first.timestamp, r.after.timestamp,
                "{label}: settled read {i} starts after {:?}, whose timestamp it does not \
                 go on with",
                r.after
            );
        }
    }
}

fn settings(page: usize, depth: u32, window: Duration) -> QuerySettings {
    QuerySettings {
        refresh_interval: Duration::from_millis(25),
        late_commit_window: window,
        page_size: page as u32,
        read_ahead_pages: depth,
    }
}

fn open(query: &ReadJournal, filter: &EventFilter, offset: Offset, live: bool) -> EnvelopeStream {
    match (filter, live) {
        (
            EventFilter::Slices {
                entity_type,
                min_slice,
                max_slice,
            },
            false,
        ) => query.current_events_by_slices(entity_type, *min_slice, *max_slice, offset),
        (
            EventFilter::Slices {
                entity_type,
                min_slice,
                max_slice,
            },
            true,
        ) => query.events_by_slices(entity_type, *min_slice, *max_slice, offset),
        (EventFilter::Tag(tag), false) => query.current_events_by_tag(tag, offset),
        (EventFilter::Tag(tag), true) => query.events_by_tag(tag, offset),
    }
}

async fn current(query: &ReadJournal, filter: &EventFilter, offset: Offset) -> Vec<RawEnvelope> {
    tokio::time::timeout(
        Duration::from_secs(60),
        open(query, filter, offset, false).try_collect(),
    )
    .await
    .expect("a current query ends")
    .expect("query")
}

/// The next `n` envelopes of a live query.
async fn take(stream: &mut EnvelopeStream, n: usize, into: &mut Vec<RawEnvelope>) {
    for _ in 0..n {
        let envelope = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .unwrap_or_else(|_| panic!("live query delivered {} envelopes", into.len()))
            .expect("a live query does not end")
            .expect("live query");
        into.push(envelope);
    }
}

fn keys(envelopes: &[RawEnvelope]) -> Vec<Key> {
    envelopes
        .iter()
        .map(|e| (e.persistence_id.to_string(), e.seq_nr))
        .collect()
}

fn describe(filter: &EventFilter) -> String {
    match filter {
        EventFilter::Slices {
            min_slice,
            max_slice,
            ..
        } => format!("slices {min_slice}-{max_slice}"),
        EventFilter::Tag(_) => "tag".to_owned(),
    }
}

/// Asserts that `got` is `expected`; otherwise says how they differ (missing, repeated,
/// unexpected events, an id's events out of sequence order, the first difference).
fn check(label: &str, got: &[Key], expected: &[Key]) {
    if got == expected {
        return;
    }
    let first = got
        .iter()
        .zip(expected)
        .position(|(g, e)| g != e)
        .unwrap_or(got.len().min(expected.len()));
    let mut counts: HashMap<&Key, usize> = HashMap::new();
    for key in got {
        *counts.entry(key).or_default() += 1;
    }
    let expected_set: HashSet<&Key> = expected.iter().collect();
    let repeated: Vec<&Key> = got.iter().filter(|k| counts[k] > 1).take(10).collect();
    let missing: Vec<&Key> = expected
        .iter()
        .filter(|k| !counts.contains_key(k))
        .take(10)
        .collect();
    let unexpected: Vec<&Key> = got
        .iter()
        .filter(|k| !expected_set.contains(k))
        .take(10)
        .collect();
    let mut last_seq: HashMap<&str, u64> = HashMap::new();
    let mut out_of_order = Vec::new();
    for (pid, seq) in got {
        if let Some(previous) = last_seq.insert(pid, *seq) {
            if previous >= *seq && out_of_order.len() < 10 {
                out_of_order.push((pid.clone(), previous, *seq));
            }
        }
    }
    let around = |list: &[Key]| -> Vec<Key> {
        list.iter()
            .skip(first.saturating_sub(2))
            .take(5)
            .cloned()
            .collect()
    };
    panic!(
        "{label}: got {} events, expected {}; first difference at {first}: got {:?}, \
         expected {:?}; missing {missing:?}; repeated {repeated:?}; unexpected {unexpected:?}; \
         out of sequence order (id, before, after) {out_of_order:?}",
        got.len(),
        expected.len(),
        around(got),
        around(expected),
    );
}

/// Sizes of the clusters of the entity type for pages of `page`: below, equal to, one above,
/// and several times a page (and several times plus one), in a seeded order.
fn cluster_sizes(page: usize, rng: &mut Rng) -> Vec<usize> {
    let mut sizes: Vec<usize> = [
        page - 1,
        page,
        page + 1,
        2 * page,
        3 * page + 1,
        page,
        1,
        page + 1,
        4 * page,
        page - 1,
        2 * page + 1,
        page,
        page + 1,
        3 * page,
    ]
    .into_iter()
    .filter(|&size| size > 0)
    .collect();
    rng.shuffle(&mut sizes);
    sizes
}

/// The whole scenario for pages of `page` (see the module documentation).
async fn clusters<B: TestBackend>(db: B, page: usize, timing: Timing) {
    let journal = db.journal().await;
    if timing == Timing::Adjacent {
        assert!(
            clock_ahead(&db).await,
            "adjacent timestamps are made on SQLite only"
        );
    }
    let entity = format!("C{page}");
    let mut data = Data::new(&entity, 4 * page, 1_000 + page as u64);
    let sizes = cluster_sizes(page, &mut data.rng);
    for &size in &sizes {
        data.write_cluster(&journal, size).await;
    }
    timestamps(&journal, &data, timing).await;
    data.delete_some(&journal, 20).await;
    assert!(!data.deleted.is_empty(), "some events are deleted");

    // Current queries, from the start.
    let mut runs = Vec::new();
    for depth in [1, 2, 4] {
        for filter in data.filters() {
            let (query, reads) = recorded(&journal, settings(page, depth, Duration::ZERO));
            let got = current(&query, &filter, Offset::NoOffset).await;
            let label = format!(
                "{timing:?} pages of {page}, {depth} read ahead, {} from the start",
                describe(&filter)
            );
            check(&label, &keys(&got), &data.expected(&filter));
            check_reads(&label, &reads, page);
            runs.push((depth, filter, got));
        }
    }
    // The fast pass over the same events (on PostgreSQL the default window leaves these fresh
    // events to it; SQLite settles them all the same).
    for filter in [data.slices(0, 1023), EventFilter::Tag(data.tag.clone())] {
        let (query, reads) = recorded(&journal, settings(page, 2, Duration::from_secs(2)));
        let got = current(&query, &filter, Offset::NoOffset).await;
        let label = format!(
            "{timing:?} pages of {page}, window 2 s, {}",
            describe(&filter)
        );
        check(&label, &keys(&got), &data.expected(&filter));
        check_reads(&label, &reads, page);
    }

    // Resumed from the offset of every envelope, after more deletes: exactly the rest.
    data.delete_some(&journal, 10).await;
    for (depth, filter, got) in &runs {
        let all = keys(got);
        for (i, envelope) in got.iter().enumerate() {
            let rest: Vec<Key> = all[i + 1..]
                .iter()
                .filter(|k| !data.deleted.contains(*k))
                .cloned()
                .collect();
            let (query, reads) = recorded(&journal, settings(page, *depth, Duration::ZERO));
            let resumed = current(&query, filter, envelope.offset.clone()).await;
            let label = format!(
                "{timing:?} pages of {page}, {depth} read ahead, {} resumed after envelope {i} \
                 ({:?} {})",
                describe(filter),
                envelope.persistence_id,
                envelope.seq_nr
            );
            check(&label, &keys(&resumed), &rest);
            check_reads(&label, &reads, page);
        }
    }

    // Live queries: the stored clusters (older than the late-commit window by now, so also the
    // settled pass's on PostgreSQL), then clusters written while they run.
    let live_filters = [
        (data.slices(0, 1023), [1, 2, 4][page % 3]),
        (
            EventFilter::Tag(data.tag.clone()),
            [1, 2, 4][(page + 1) % 3],
        ),
        (data.slices(0, 511), 2),
    ];
    // Short, so that the settled pass also goes over the new events (a live query of
    // PostgreSQL leaves the last `window` to the fast pass); long enough for a write's
    // transaction here.
    let window = Duration::from_millis(300);
    let mut lives = Vec::new();
    for (filter, depth) in &live_filters {
        let query = ReadJournal::new(journal.clone(), settings(page, *depth, window));
        let mut stream = open(&query, filter, Offset::NoOffset, true);
        let mut got = Vec::new();
        take(&mut stream, data.expected(filter).len(), &mut got).await;
        let label = format!(
            "{timing:?} pages of {page}, live, {depth} read ahead, {}, stored events",
            describe(filter)
        );
        check(&label, &keys(&got), &data.expected(filter));
        lives.push((stream, got));
    }
    for size in [page, page + 1, 3 * page + 1, 1, 2 * page, page + 1] {
        data.write_cluster(&journal, size).await;
    }
    for ((filter, depth), (stream, got)) in live_filters.iter().zip(&mut lives) {
        let expected = data.expected(filter);
        let more = expected.len() - got.len();
        take(stream, more, got).await;
        let label = format!(
            "{timing:?} pages of {page}, live, {depth} read ahead, {}, with new events",
            describe(filter)
        );
        check(&label, &keys(got), &expected);
    }
    // Nothing more, also once the settled pass has gone over the new events.
    let extras = futures::future::join_all(
        lives
            .iter_mut()
            .map(|(stream, _)| tokio::time::timeout(window * 2, stream.next())),
    )
    .await;
    for ((filter, _), extra) in live_filters.iter().zip(extras) {
        if let Ok(extra) = extra {
            let extra = extra.map(|e| e.map(|e| (e.persistence_id.to_string(), e.seq_nr)));
            panic!(
                "{timing:?} pages of {page}, live, {}: delivered more: {extra:?}",
                describe(filter)
            );
        }
    }
    // A current query resumed from each live envelope's offset: exactly the rest.
    for ((filter, depth), (_, got)) in live_filters.iter().zip(&lives) {
        let query = ReadJournal::new(journal.clone(), settings(page, *depth, Duration::ZERO));
        let all = keys(got);
        for (i, envelope) in got.iter().enumerate() {
            let resumed = current(&query, filter, envelope.offset.clone()).await;
            let label = format!(
                "{timing:?} pages of {page}, {}, resumed after live envelope {i}",
                describe(filter)
            );
            check(&label, &keys(&resumed), &all[i + 1..]);
        }
    }
}

/// The store's pages (`QueryStore::read_events`), from every position: after each stored
/// event, after each deleted one, at the start of each timestamp and just after it; with
/// several limits and bounds, with and without the previous event of each; for clusters with
/// the wall clock's timestamps and (SQLite) 1 µs apart.
async fn store_pages_after_every_position<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    for timing in [Timing::Natural, Timing::Adjacent] {
        if timing == Timing::Adjacent && !clock_ahead(&db).await {
            continue;
        }
        let page = 3;
        let entity = format!("S{timing:?}");
        let mut data = Data::new(&entity, 4 * page, 77);
        let sizes = cluster_sizes(page, &mut data.rng);
        for &size in &sizes {
            data.write_cluster(&journal, size).await;
        }
        let at = timestamps(&journal, &data, timing).await;
        data.delete_some(&journal, 25).await;
        let mut stamps: Vec<i64> = at.values().copied().collect();
        stamps.sort_unstable();
        stamps.dedup();
        let middle = stamps[stamps.len() / 2];
        let bounds = [i64::MAX, middle, middle + 1];
        let key_of = |k: &Key| EventKey {
            timestamp: at[k],
            persistence_id: Arc::from(k.0.as_str()),
            seq_nr: k.1,
        };
        for filter in data.filters() {
            let expected = data.expected_events(&filter);
            let keys: Vec<EventKey> = expected.iter().map(|e| key_of(&e.key())).collect();
            // The previous selected stored event of each one's id.
            let previous: Vec<Option<(u64, i64)>> = expected
                .iter()
                .map(|e| {
                    expected
                        .iter()
                        .filter(|p| p.pid == e.pid && p.seq < e.seq)
                        .map(|p| (p.seq, at[&p.key()]))
                        .max()
                })
                .collect();
            let mut positions = vec![EventKey::start_of(i64::MIN)];
            positions.extend(keys.iter().cloned());
            positions.extend(
                data.deleted
                    .iter()
                    .filter(|k| at.contains_key(*k))
                    .map(key_of),
            );
            for &stamp in &stamps {
                positions.push(EventKey::start_of(stamp));
                positions.push(EventKey::start_of(stamp + 1));
            }
            let mut round = 0usize;
            for after in &positions {
                for limit in [1u32, 2, 3, 5] {
                    round += 1;
                    let bound = bounds[round % bounds.len()];
                    let with_previous = round % 2 == 0;
                    let page = journal
                        .read_events(EventsRequest {
                            filter: &filter,
                            after,
                            before_timestamp: bound,
                            limit,
                            with_previous_timestamp: with_previous,
                        })
                        .await
                        .expect("read a page");
                    let want: Vec<usize> = (0..keys.len())
                        .filter(|&i| keys[i] > *after && keys[i].timestamp < bound)
                        .take(limit as usize)
                        .collect();
                    let label = format!(
                        "{timing:?}, {}, after {after:?}, before {bound}, limit {limit}",
                        describe(&filter)
                    );
                    let got: Vec<Key> = page
                        .iter()
                        .map(|e| (e.repr.persistence_id.to_string(), e.repr.seq_nr))
                        .collect();
                    let want_keys: Vec<Key> = want.iter().map(|&i| expected[i].key()).collect();
                    check(&label, &got, &want_keys);
                    for (event, &i) in page.iter().zip(&want) {
                        assert_eq!(event.timestamp, keys[i].timestamp, "{label}: timestamp");
                        if with_previous {
                            assert_eq!(
                                event.previous_seq_nr.zip(event.previous_timestamp),
                                previous[i],
                                "{label}: previous event of {:?}",
                                expected[i].key()
                            );
                        }
                    }
                }
            }
        }
    }
}
