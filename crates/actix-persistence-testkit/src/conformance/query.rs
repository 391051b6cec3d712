//! The query conformance cases Q1-Q23 (`docs/conformance.md`, "Query store"): what
//! [`ReadJournal`] must deliver over a [`QueryStore`].
//!
//! Every case wraps the store in a [`ControlledQueryStore`] (late commits and the late-commit
//! window without sleeps), writes events straight into the store, and reads them back through
//! a [`ReadJournal`] with a 20 ms refresh interval and a one-hour late-commit window (moved
//! past with [`QueryControl::advance_clock`] where a case needs the settled pass). Cases use
//! fresh persistence ids, entity types and tags, so a factory may hand out a shared store.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use actix_persistence_core::query::{
    slice_for_persistence_id, slice_ranges, EnvelopeStream, EnvelopeStreamExt, Offset, QueryError,
    QuerySettings, QueryStore, RawEnvelope, ReadJournal,
};
use actix_persistence_core::serialization::JSON_SERIALIZER_ID;
use actix_persistence_core::{AtomicWrite, JournalStore, PersistentRepr, MAX_SEQ_NR};
use futures::future::LocalBoxFuture;
use futures::{FutureExt, StreamExt};

use super::{within, Case};
use crate::{ControlledQueryStore, QueryControl};

/// The late-commit window of the cases: long enough that the settled pass never runs unless
/// a case moves the clock past it.
pub const CASE_WINDOW: Duration = Duration::from_secs(3600);

/// The store under test, wrapped, with its control and a read journal over it.
pub struct QueryUnderTest {
    /// The wrapped store (write through it).
    pub store: Arc<ControlledQueryStore<Arc<dyn QueryStore>>>,
    /// Its control.
    pub control: QueryControl,
    /// Queries over it.
    pub query: ReadJournal,
}

impl QueryUnderTest {
    /// Wraps `store`.
    pub fn new(store: Arc<dyn QueryStore>) -> Self {
        let store = Arc::new(ControlledQueryStore::new(store));
        let settings = QuerySettings {
            refresh_interval: Duration::from_millis(20),
            late_commit_window: CASE_WINDOW,
            page_size: 7,
            // More than one, so that every settled pass over more than a page reads windows of
            // timestamps concurrently (Q23 compares with one).
            read_ahead_pages: 3,
        };
        QueryUnderTest {
            control: store.control(),
            query: ReadJournal::from_arc(store.clone(), settings),
            store,
        }
    }

    /// Writes one atomic write of `events`, which must succeed.
    pub async fn write(&self, events: Vec<PersistentRepr>) {
        let what = format!(
            "write of {:?} {:?}",
            events[0].persistence_id,
            events.iter().map(|e| e.seq_nr).collect::<Vec<_>>()
        );
        let write = AtomicWrite::new(events).expect("a well-shaped atomic write");
        let results = within(&what, self.store.write_messages(vec![write]))
            .await
            .unwrap_or_else(|e| panic!("{what} failed: {e}"));
        if let Some(Err(e)) = results.first() {
            panic!("{what} failed: {e}");
        }
    }

    /// Writes events `from..=to` of `pid`, one atomic write each.
    pub async fn write_range(&self, pid: &str, from: u64, to: u64, tags: &[&str]) {
        for seq_nr in from..=to {
            self.write(vec![event(pid, seq_nr, tags)]).await;
        }
    }
}

/// Event `seq_nr` of `pid`: payload `{"n":seq_nr}` (JSON), tagged `tags`.
pub fn event(pid: &str, seq_nr: u64, tags: &[&str]) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload: format!("{{\"n\":{seq_nr}}}").into_bytes(),
        serializer_id: JSON_SERIALIZER_ID,
        manifest: String::new(),
        writer_uuid: "query-case".into(),
        timestamp: super::now_millis(),
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
    }
}

/// A fresh name: `prefix` and a uuid without dashes (safe in ids, entity types and tags).
fn fresh(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::new_v4().simple())
}

/// Every element of a current query, each within [`ANSWER_WITHIN`](super::ANSWER_WITHIN) of
/// the previous one (a bound on the whole query failed on a slow machine, where a thousand
/// elements in pages of 7 outlasted it without any page hanging).
async fn collect(what: &str, mut stream: EnvelopeStream) -> Vec<RawEnvelope> {
    let mut items = Vec::new();
    while let Some(item) = within(what, stream.next()).await {
        items.push(
            item.unwrap_or_else(|e| panic!("{what} failed after {} elements: {e}", items.len())),
        );
    }
    items
}

/// The next `n` elements of a live query.
async fn take(what: &str, stream: &mut EnvelopeStream, n: usize) -> Vec<RawEnvelope> {
    let mut taken = Vec::with_capacity(n);
    while taken.len() < n {
        match within(what, stream.next()).await {
            Some(Ok(envelope)) => taken.push(envelope),
            Some(Err(e)) => panic!("{what} failed after {} elements: {e}", taken.len()),
            None => panic!("{what} ended after {} elements, expected {n}", taken.len()),
        }
    }
    taken
}

/// The next `n` elements of a live query that runs while `written` is false (writers still
/// writing, in the same task): an element may wait for the settled pass, which runs only once
/// the writes are done, so no element is due before then. From then on each must come within
/// [`ANSWER_WITHIN`](super::ANSWER_WITHIN), as with [`take`]. (A fixed bound per element failed
/// on a slow disk, where 1,000 PostgreSQL commits took longer than it.)
async fn take_during(
    what: &str,
    stream: &mut EnvelopeStream,
    n: usize,
    written: &std::cell::Cell<bool>,
) -> Vec<RawEnvelope> {
    let mut taken = Vec::with_capacity(n);
    while taken.len() < n {
        // `next` is cancel-safe: the stream keeps its pending read when a timeout drops it.
        let item = loop {
            match tokio::time::timeout(super::ANSWER_WITHIN, stream.next()).await {
                Ok(item) => break item,
                Err(_) if !written.get() => continue,
                Err(_) => panic!(
                    "no answer to {what} within {:?} after the writes ended ({} of {n} \
                     elements): the store hangs",
                    super::ANSWER_WITHIN,
                    taken.len()
                ),
            }
        };
        match item {
            Some(Ok(envelope)) => taken.push(envelope),
            Some(Err(e)) => panic!("{what} failed after {} elements: {e}", taken.len()),
            None => panic!("{what} ended after {} elements, expected {n}", taken.len()),
        }
    }
    taken
}

/// `(persistence id, seq_nr)` of each envelope.
fn keys(envelopes: &[RawEnvelope]) -> Vec<(String, u64)> {
    envelopes
        .iter()
        .map(|e| (e.persistence_id.to_string(), e.seq_nr))
        .collect()
}

fn seq_nrs(envelopes: &[RawEnvelope]) -> Vec<u64> {
    envelopes.iter().map(|e| e.seq_nr).collect()
}

/// Panics unless no (persistence id, seq_nr) repeats and each id's seq_nrs ascend.
fn assert_distinct_and_ordered(case: &str, envelopes: &[RawEnvelope]) {
    let mut last: BTreeMap<&str, u64> = BTreeMap::new();
    for e in envelopes {
        if let Some(previous) = last.insert(&e.persistence_id, e.seq_nr) {
            assert!(
                e.seq_nr > previous,
                "{case}: {:?} delivered seq_nr {} after {previous} (repeat or out of order)",
                e.persistence_id,
                e.seq_nr
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The cases.

/// Q1: `current_events_by_persistence_id` honours its bounds and yields sequence offsets.
pub async fn q01_events_by_persistence_id_bounds(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let pid = fresh("Q1|");
    t.write_range(&pid, 1, 5, &[]).await;
    let read = |from, to| {
        let what = format!("Q1 current_events_by_persistence_id({from}, {to})");
        let stream = t.query.current_events_by_persistence_id(&pid, from, to);
        async move { seq_nrs(&collect(&what, stream).await) }
    };
    assert_eq!(
        read(1, MAX_SEQ_NR).await,
        vec![1, 2, 3, 4, 5],
        "Q1 (1, MAX)"
    );
    assert_eq!(read(2, 4).await, vec![2, 3, 4], "Q1 (2, 4)");
    assert_eq!(read(5, 5).await, vec![5], "Q1 (5, 5)");
    assert_eq!(read(4, 2).await, Vec::<u64>::new(), "Q1 (4, 2)");
    assert_eq!(read(6, MAX_SEQ_NR).await, Vec::<u64>::new(), "Q1 (6, MAX)");
    let all = collect("Q1", t.query.current_events_by_persistence_id(&pid, 1, 3)).await;
    assert_eq!(all[2].offset, Offset::Sequence { seq_nr: 3 }, "Q1 offset");
    assert_eq!(all[0].event.payload, b"{\"n\":1}".to_vec(), "Q1 payload");
    assert_eq!(all[0].slice, slice_for_persistence_id(&pid), "Q1 slice");
    assert_eq!(&*all[0].entity_type, "Q1", "Q1 entity type");
}

/// Q2: the slice ranges of `slice_ranges(4)` partition the ids of an entity type: every id in
/// exactly one range, in the range of its slice; other entity types are not delivered.
pub async fn q02_slice_ranges_partition_ids(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let entity_type = fresh("Q2");
    let ids: Vec<String> = (0..40).map(|i| format!("{entity_type}|{i}")).collect();
    for id in &ids {
        t.write_range(id, 1, 2, &[]).await;
    }
    t.write_range(&format!("{entity_type}x|0"), 1, 1, &[]).await;
    let mut delivered = Vec::new();
    for range in slice_ranges(4) {
        let what = format!("Q2 current_events_by_slices({range:?})");
        let stream = t.query.current_events_by_slices(
            &entity_type,
            *range.start(),
            *range.end(),
            Offset::NoOffset,
        );
        for e in collect(&what, stream).await {
            assert!(
                range.contains(&e.slice) && e.slice == slice_for_persistence_id(&e.persistence_id),
                "Q2: {:?} (slice {}) delivered by range {range:?}",
                e.persistence_id,
                e.slice
            );
            assert_eq!(*e.entity_type, *entity_type, "Q2 entity type");
            delivered.push((e.persistence_id.to_string(), e.seq_nr));
        }
    }
    delivered.sort();
    let mut expected: Vec<(String, u64)> = ids
        .iter()
        .flat_map(|id| [(id.clone(), 1), (id.clone(), 2)])
        .collect();
    expected.sort();
    assert_eq!(
        delivered, expected,
        "Q2: each event exactly once over the ranges"
    );
}

/// Q3: `current_events_by_tag` delivers exactly the tagged events, each id in order.
pub async fn q03_events_by_tag(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let tag = fresh("q3-");
    let (a, b) = (fresh("Q3|a"), fresh("Q3|b"));
    t.write_range(&a, 1, 2, &[&tag]).await;
    t.write_range(&b, 1, 1, &["other"]).await;
    t.write_range(&a, 3, 3, &["other"]).await;
    t.write_range(&b, 2, 3, &["other", &tag]).await;
    t.write_range(&a, 4, 4, &[&tag]).await;
    let envelopes = collect("Q3", t.query.current_events_by_tag(&tag, Offset::NoOffset)).await;
    assert_eq!(
        keys(&envelopes),
        vec![
            (a.clone(), 1),
            (a.clone(), 2),
            (b.clone(), 2),
            (b.clone(), 3),
            (a.clone(), 4)
        ],
        "Q3: tagged events in write order"
    );
    assert!(envelopes.iter().all(|e| e.tags.contains(&tag)), "Q3 tags");
}

/// Q4: resuming from the offset of any element delivers exactly the elements after it.
pub async fn q04_resume_from_offset_delivers_exactly_the_rest(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let entity_type = fresh("Q4");
    let ids: Vec<String> = (0..3).map(|i| format!("{entity_type}|{i}")).collect();
    for seq_nr in 1..=4 {
        for id in &ids {
            t.write_range(id, seq_nr, seq_nr, &[]).await;
        }
    }
    let all = collect(
        "Q4 all",
        t.query
            .current_events_by_slices(&entity_type, 0, 1023, Offset::NoOffset),
    )
    .await;
    assert_eq!(all.len(), 12, "Q4: 12 events");
    for (i, element) in all.iter().enumerate() {
        // The offset survives being stored as JSON.
        let stored = serde_json::to_string(&element.offset).expect("offset to JSON");
        let offset: Offset = serde_json::from_str(&stored).expect("offset from JSON");
        let rest = collect(
            "Q4 resumed",
            t.query
                .current_events_by_slices(&entity_type, 0, 1023, offset),
        )
        .await;
        assert_eq!(
            keys(&rest),
            keys(&all[i + 1..]),
            "Q4: resumed after element {i}"
        );
    }
}

/// Q5: a live query delivers events written after it started, and resumes without repeats.
pub async fn q05_live_query_delivers_new_events(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let entity_type = fresh("Q5");
    let pid = format!("{entity_type}|1");
    t.write_range(&pid, 1, 2, &[]).await;
    let mut live = t
        .query
        .events_by_slices(&entity_type, 0, 1023, Offset::NoOffset);
    let first = take("Q5 live", &mut live, 2).await;
    t.write_range(&pid, 3, 4, &[]).await;
    let next = take("Q5 live", &mut live, 2).await;
    assert_eq!(seq_nrs(&first), vec![1, 2], "Q5 before");
    assert_eq!(seq_nrs(&next), vec![3, 4], "Q5 after");
    let mut by_pid = t.query.events_by_persistence_id(&pid, 3, MAX_SEQ_NR);
    let replayed = take("Q5 by pid", &mut by_pid, 2).await;
    t.write_range(&pid, 5, 5, &[]).await;
    let new = take("Q5 by pid", &mut by_pid, 1).await;
    assert_eq!(seq_nrs(&replayed), vec![3, 4], "Q5 by pid");
    assert_eq!(seq_nrs(&new), vec![5], "Q5 by pid, live");
    // A live query resumed from the last offset delivers only what follows.
    let mut resumed = t
        .query
        .events_by_slices(&entity_type, 0, 1023, next[1].offset.clone());
    assert_eq!(
        seq_nrs(&take("Q5 resumed", &mut resumed, 1).await),
        vec![5],
        "Q5 resumed"
    );
}

/// Q6: an event that commits after a later event was delivered is still delivered, once,
/// when the late-commit window has passed; the offset of the earlier element resumes to it.
pub async fn q06_late_commit_is_delivered_once(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let entity_type = fresh("Q6");
    let (late, early) = (
        format!("{entity_type}|late"),
        format!("{entity_type}|early"),
    );
    let mut live = t
        .query
        .events_by_slices(&entity_type, 0, 1023, Offset::NoOffset);
    // `late` is inserted first (lower timestamp) but commits after `early`.
    t.control.hold_commits_of(&late);
    t.write_range(&late, 1, 1, &[]).await;
    t.write_range(&early, 1, 1, &[]).await;
    let first = take("Q6 live", &mut live, 1).await;
    assert_eq!(
        keys(&first),
        vec![(early.clone(), 1)],
        "Q6: the committed event first"
    );
    t.control.commit(&late);
    t.control.advance_clock(CASE_WINDOW);
    let second = take("Q6 live", &mut live, 1).await;
    assert_eq!(
        keys(&second),
        vec![(late.clone(), 1)],
        "Q6: the late commit"
    );
    t.write_range(&early, 2, 2, &[]).await;
    let third = take("Q6 live", &mut live, 1).await;
    assert_eq!(
        keys(&third),
        vec![(early.clone(), 2)],
        "Q6: no repeat after it"
    );
    // From the offset stored after `early`-1, a new query delivers the late event and the
    // rest, but not `early`-1 again.
    let resumed = collect(
        "Q6 resumed",
        t.query
            .current_events_by_slices(&entity_type, 0, 1023, first[0].offset.clone()),
    )
    .await;
    let mut resumed = keys(&resumed);
    resumed.sort();
    assert_eq!(resumed, vec![(early, 2), (late, 1)], "Q6 resumed");
}

/// Q7: a write that never commits (rolled back) holds nothing up: later events are delivered
/// at once, and the live query goes on after the window passed.
pub async fn q07_rolled_back_write_holds_nothing(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let entity_type = fresh("Q7");
    let (rolled_back, other) = (format!("{entity_type}|rb"), format!("{entity_type}|ok"));
    t.control.hold_commits_of(&rolled_back);
    t.write_range(&rolled_back, 1, 1, &[]).await;
    t.write_range(&other, 1, 1, &[]).await;
    let mut live = t
        .query
        .events_by_slices(&entity_type, 0, 1023, Offset::NoOffset);
    assert_eq!(
        keys(&take("Q7", &mut live, 1).await),
        vec![(other.clone(), 1)],
        "Q7 first"
    );
    t.control.advance_clock(CASE_WINDOW);
    t.write_range(&other, 2, 2, &[]).await;
    assert_eq!(
        keys(&take("Q7", &mut live, 1).await),
        vec![(other, 2)],
        "Q7 after the window"
    );
}

/// Q8: 50 persistence ids writing 20 tagged events each, concurrently, while a live query by
/// tag runs: exactly 1,000 distinct envelopes, each id's in order.
pub async fn q08_concurrent_writers_give_every_event_once(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let tag = fresh("q8-");
    let entity_type = fresh("Q8");
    let mut live = t.query.events_by_tag(&tag, Offset::NoOffset);
    let writers = (0..50).map(|i| {
        let pid = format!("{entity_type}|{i}");
        let t = &t;
        let tag = tag.as_str();
        async move { t.write_range(&pid, 1, 20, &[tag]).await }
    });
    // The live query reads while the writers write.
    let written = std::cell::Cell::new(false);
    let reader = take_during("Q8 live", &mut live, 1000, &written);
    let writing = futures::future::join_all(writers).then(|_| async {
        // Every write is acknowledged: let the settled pass run.
        t.control.advance_clock(CASE_WINDOW);
        written.set(true);
    });
    let (envelopes, ()) = futures::join!(reader, writing);
    assert_distinct_and_ordered("Q8", &envelopes);
    let distinct: HashSet<_> = keys(&envelopes).into_iter().collect();
    assert_eq!(distinct.len(), 1000, "Q8: 1,000 distinct envelopes");
    let current = collect(
        "Q8 current",
        t.query.current_events_by_tag(&tag, Offset::NoOffset),
    )
    .await;
    assert_distinct_and_ordered("Q8 current", &current);
    assert_eq!(
        current.len(),
        1000,
        "Q8: the current query gives the same 1,000"
    );
}

/// Q9: deleted events are not delivered; the queries go on after them.
pub async fn q09_deleted_events_are_not_delivered(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let entity_type = fresh("Q9");
    let pid = format!("{entity_type}|1");
    let tag = fresh("q9-");
    t.write_range(&pid, 1, 5, &[&tag]).await;
    within(
        "Q9 delete",
        t.store
            .delete_messages_to(&pid, 3, actix_persistence_core::FencingToken::UNOWNED),
    )
    .await
    .expect("Q9 delete");
    let by_slices = collect(
        "Q9 slices",
        t.query
            .current_events_by_slices(&entity_type, 0, 1023, Offset::NoOffset),
    )
    .await;
    let by_tag = collect(
        "Q9 tag",
        t.query.current_events_by_tag(&tag, Offset::NoOffset),
    )
    .await;
    let by_pid = collect(
        "Q9 pid",
        t.query
            .current_events_by_persistence_id(&pid, 1, MAX_SEQ_NR),
    )
    .await;
    assert_eq!(seq_nrs(&by_slices), vec![4, 5], "Q9 by slices");
    assert_eq!(seq_nrs(&by_tag), vec![4, 5], "Q9 by tag");
    assert_eq!(seq_nrs(&by_pid), vec![4, 5], "Q9 by persistence id");
    let mut live = t
        .query
        .events_by_slices(&entity_type, 0, 1023, Offset::NoOffset);
    assert_eq!(
        seq_nrs(&take("Q9 live", &mut live, 2).await),
        vec![4, 5],
        "Q9 live"
    );
    t.write_range(&pid, 6, 6, &[]).await;
    assert_eq!(
        seq_nrs(&take("Q9 live", &mut live, 1).await),
        vec![6],
        "Q9 live after"
    );
}

/// Q10: `current_persistence_ids` lists ids in ascending order, after `after`, at most
/// `limit`, across pages.
pub async fn q10_current_persistence_ids_are_paged(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let prefix = fresh("Q10|");
    let ids: Vec<String> = (0..10).map(|i| format!("{prefix}-{i}")).collect();
    for id in &ids {
        t.write_range(id, 1, 1, &[]).await;
    }
    // Ids of other cases may sort before and after: select ours.
    let all = list_ids(&t.query, &prefix, &format!("{prefix}-"), MAX_SEQ_NR).await;
    assert_eq!(all, ids, "Q10 all, ascending (page size 7)");
    let after_third = list_ids(&t.query, &prefix, &ids[2], 4).await;
    assert_eq!(
        after_third,
        ids[3..7].to_vec(),
        "Q10 after the third, limit 4"
    );
}

async fn list_ids(query: &ReadJournal, prefix: &str, after: &str, limit: u64) -> Vec<String> {
    let items: Vec<_> = within(
        "Q10",
        query.current_persistence_ids(Some(after), limit).collect(),
    )
    .await;
    items
        .into_iter()
        .map(|i| i.unwrap_or_else(|e| panic!("Q10 failed: {e}")))
        .filter(|id: &String| id.starts_with(prefix))
        .collect()
}

/// Q11: envelopes decode into the event type; a payload that does not decode is an error
/// naming the event.
pub async fn q11_envelopes_decode_into_the_event_type(store: Arc<dyn QueryStore>) {
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Counted {
        n: u64,
    }
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Other {
        missing: String,
    }
    let t = QueryUnderTest::new(store);
    let pid = fresh("Q11|");
    t.write_range(&pid, 1, 2, &[]).await;
    let typed: Vec<_> = within(
        "Q11",
        t.query
            .current_events_by_persistence_id(&pid, 1, MAX_SEQ_NR)
            .decode_json::<Counted>()
            .collect::<Vec<_>>(),
    )
    .await;
    let events: Vec<_> = typed
        .into_iter()
        .map(|e| e.expect("Q11 decodes").event)
        .collect();
    assert_eq!(
        events,
        vec![Counted { n: 1 }, Counted { n: 2 }],
        "Q11 typed"
    );
    let failed: Vec<_> = within(
        "Q11",
        t.query
            .current_events_by_persistence_id(&pid, 1, MAX_SEQ_NR)
            .decode_json::<Other>()
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(failed.len(), 1, "Q11: the stream ends at the first failure");
    match &failed[0] {
        Err(QueryError::Decode {
            persistence_id,
            seq_nr,
            ..
        }) => assert_eq!(
            (persistence_id.as_str(), *seq_nr),
            (pid.as_str(), 1),
            "Q11 error"
        ),
        other => panic!("Q11: expected a decode error, got {other:?}"),
    }
}

/// Q12: a bad slice range and an offset of another kind of query are errors.
pub async fn q12_bad_arguments_are_errors(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let bad_range: Vec<_> = within(
        "Q12",
        t.query
            .current_events_by_slices("Q12", 10, 9, Offset::NoOffset)
            .collect::<Vec<_>>(),
    )
    .await;
    assert!(
        matches!(
            bad_range.as_slice(),
            [Err(QueryError::InvalidSliceRange {
                min_slice: 10,
                max_slice: 9
            })]
        ),
        "Q12: range 10..=9 is an error, got {bad_range:?}"
    );
    let bad_offset: Vec<_> = within(
        "Q12",
        t.query
            .current_events_by_tag("q12", Offset::Sequence { seq_nr: 3 })
            .collect::<Vec<_>>(),
    )
    .await;
    assert!(
        matches!(
            bad_offset.as_slice(),
            [Err(QueryError::InvalidOffset { .. })]
        ),
        "Q12: a sequence offset to a tag query is an error, got {bad_offset:?}"
    );
    for live in [false, true] {
        let offset = Offset::Sequence { seq_nr: 3 };
        let stream = if live {
            t.query.events_by_slices("Q12", 0, 1023, offset)
        } else {
            t.query.current_events_by_slices("Q12", 0, 1023, offset)
        };
        let bad_offset: Vec<_> = within("Q12", stream.collect::<Vec<_>>()).await;
        assert!(
            matches!(
                bad_offset.as_slice(),
                [Err(QueryError::InvalidOffset { .. })]
            ),
            "Q12: a sequence offset to a query by slices (live: {live}) is an error and ends \
             it, got {bad_offset:?}"
        );
    }
}

/// Q13: when an id's event commits late and its next event is then written and seen first,
/// the query holds the next one back and delivers both in sequence order, each once.
pub async fn q13_late_commit_keeps_the_order_of_an_id(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let entity_type = fresh("Q13");
    let (id, other) = (format!("{entity_type}|id"), format!("{entity_type}|other"));
    t.write_range(&id, 1, 1, &[]).await;
    let mut live = t
        .query
        .events_by_slices(&entity_type, 0, 1023, Offset::NoOffset);
    assert_eq!(
        keys(&take("Q13", &mut live, 1).await),
        vec![(id.clone(), 1)],
        "Q13 first"
    );
    // `id` 2 is inserted but not yet committed while the query reads past it.
    t.control.hold_commits_of(&id);
    t.write_range(&id, 2, 2, &[]).await;
    t.write_range(&other, 1, 1, &[]).await;
    assert_eq!(
        keys(&take("Q13", &mut live, 1).await),
        vec![(other.clone(), 1)],
        "Q13 other"
    );
    // It commits; only then is `id` 3 written (one writer per id), and the query sees 3 with 2
    // behind its fast position.
    t.control.commit(&id);
    t.write_range(&id, 3, 3, &[]).await;
    t.write_range(&other, 2, 2, &[]).await;
    t.control.advance_clock(CASE_WINDOW);
    let rest = take("Q13", &mut live, 3).await;
    assert_distinct_and_ordered("Q13", &rest);
    let mut delivered = keys(&rest);
    delivered.sort();
    assert_eq!(
        delivered,
        vec![(id.clone(), 2), (id, 3), (other, 2)],
        "Q13: each once, `id` 2 before 3"
    );
}

/// Q14: an event that becomes visible far behind the live edge (further back than the fast
/// pass looks again each round) is delivered by the settled pass once the late-commit window
/// has passed, once, and the query goes on without repeats.
pub async fn q14_settled_pass_delivers_what_the_fast_pass_passed(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let entity_type = fresh("Q14");
    let (late, live_id) = (format!("{entity_type}|late"), format!("{entity_type}|live"));
    let mut live = t
        .query
        .events_by_slices(&entity_type, 0, 1023, Offset::NoOffset);
    t.write_range(&live_id, 1, 1, &[]).await;
    assert_eq!(
        keys(&take("Q14", &mut live, 1).await),
        vec![(live_id.clone(), 1)],
        "Q14 first"
    );
    // `late` 1 is inserted now and its transaction stays open.
    t.control.hold_commits_of(&late);
    t.write_range(&late, 1, 1, &[]).await;
    // A quarter of the window passes (more than the fast pass looks back), the query reads
    // past `late` 1 and delivers a later event.
    t.control.advance_clock(CASE_WINDOW / 4);
    t.write_range(&live_id, 2, 2, &[]).await;
    assert_eq!(
        keys(&take("Q14", &mut live, 1).await),
        vec![(live_id.clone(), 2)],
        "Q14 the later event"
    );
    // `late` 1 commits within the window: only the settled pass can find it, when the
    // window has passed.
    t.control.commit(&late);
    t.control.advance_clock(CASE_WINDOW);
    assert_eq!(
        keys(&take("Q14 settled", &mut live, 1).await),
        vec![(late.clone(), 1)],
        "Q14 the late event, from the settled pass"
    );
    t.write_range(&live_id, 3, 3, &[]).await;
    t.write_range(&late, 2, 2, &[]).await;
    let rest = take("Q14", &mut live, 2).await;
    let mut rest = keys(&rest);
    rest.sort();
    assert_eq!(
        rest,
        vec![(late.clone(), 2), (live_id.clone(), 3)],
        "Q14: the query goes on, nothing repeats"
    );
    let all = collect(
        "Q14 current",
        t.query
            .current_events_by_slices(&entity_type, 0, 1023, Offset::NoOffset),
    )
    .await;
    assert_distinct_and_ordered("Q14 current", &all);
    assert_eq!(all.len(), 5, "Q14: the current query gives all five once");
}

/// Q16: events of every payload size, with every byte value, a manifest, tags and a writer id
/// of several scripts, come back byte for byte, in order, by slices, by tag, by persistence id
/// and live, with pages holding large and small payloads together (a store that reads large
/// payloads apart from a page, as SQLite's did above 4 KiB until session 10, must put them back
/// in place).
pub async fn q16_payloads_of_every_size_come_back_byte_for_byte(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let entity_type = fresh("Q16");
    let pid = format!("{entity_type}|1");
    let tag = fresh("q16-");
    let mut live = t
        .query
        .events_by_slices(&entity_type, 0, 1023, Offset::NoOffset);
    let sizes = [0usize, 1, 255, 4095, 4096, 4097, 70_000, 3, 300_000, 2];
    let written: Vec<PersistentRepr> = sizes
        .iter()
        .zip(1u64..)
        .map(|(&size, seq_nr)| {
            let one: [&str; 1] = [&tag];
            let two: [&str; 2] = [&tag, "b"];
            let tags: &[&str] = if seq_nr % 2 == 0 { &one } else { &two };
            let mut e = event(&pid, seq_nr, tags);
            // Every byte value, shifted per event so that no two payloads are alike.
            e.payload = (0..size)
                .map(|i| ((i + seq_nr as usize * 7) % 256) as u8)
                .collect();
            e.serializer_id = 7;
            e.manifest = format!("m\u{e9}\u{1F600}-{seq_nr}");
            e.writer_uuid = "w-\u{3b1}\"'\\".into();
            e
        })
        .collect();
    // Two atomic writes: pages and transactions both hold large and small payloads.
    t.write(written[..5].to_vec()).await;
    t.write(written[5..].to_vec()).await;
    let same = |what: &str, got: &[RawEnvelope]| {
        assert_eq!(got.len(), written.len(), "{what}: every event");
        for (envelope, event) in got.iter().zip(&written) {
            let at = format!("{what}, event {}", event.seq_nr);
            assert_eq!(envelope.seq_nr, event.seq_nr, "{at}: in order");
            assert!(
                envelope.event.payload == event.payload,
                "{at}: payload of {} bytes came back as {} bytes, or other bytes",
                event.payload.len(),
                envelope.event.payload.len()
            );
            assert_eq!(envelope.event.manifest, event.manifest, "{at}: manifest");
            assert_eq!(envelope.event.serializer_id, 7, "{at}: serializer id");
            assert_eq!(envelope.writer_uuid, event.writer_uuid, "{at}: writer id");
            assert_eq!(envelope.timestamp, event.timestamp, "{at}: write timestamp");
            let mut tags = envelope.tags.to_vec();
            tags.sort();
            let mut want = event.tags.to_vec();
            want.sort();
            assert_eq!(tags, want, "{at}: tags");
        }
    };
    let by_slices = collect(
        "Q16 slices",
        t.query
            .current_events_by_slices(&entity_type, 0, 1023, Offset::NoOffset),
    )
    .await;
    same("Q16 by slices", &by_slices);
    let by_tag = collect(
        "Q16 tag",
        t.query.current_events_by_tag(&tag, Offset::NoOffset),
    )
    .await;
    same("Q16 by tag", &by_tag);
    let by_pid = collect(
        "Q16 pid",
        t.query
            .current_events_by_persistence_id(&pid, 0, MAX_SEQ_NR),
    )
    .await;
    same("Q16 by persistence id", &by_pid);
    let live = take("Q16 live", &mut live, written.len()).await;
    same("Q16 live", &live);
}

/// Q15: writes of one persistence id issued without waiting for each other (a caller that
/// pipelines them; 20 ids x 60 events, more than one group-commit batch) are stored in
/// sequence order: each event's database timestamp is at least its previous event's, and a
/// live query running meanwhile delivers every event once, each id's in order.
pub async fn q15_pipelined_writes_of_one_id_keep_their_order(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let entity_type = fresh("Q15");
    let ids: Vec<String> = (0..20).map(|i| format!("{entity_type}|{i}")).collect();
    let mut live = t
        .query
        .events_by_slices(&entity_type, 0, 1023, Offset::NoOffset);
    // Every write is issued before the first is acknowledged, each id's in sequence order.
    let t = &t;
    let writes: Vec<_> = (1..=60u64)
        .flat_map(|seq_nr| ids.iter().map(move |id| (id, seq_nr)))
        .map(|(id, seq_nr)| t.write(vec![event(id, seq_nr, &[])]))
        .collect();
    let written = std::cell::Cell::new(false);
    let reader = take_during("Q15 live", &mut live, 1200, &written);
    let writing = futures::future::join_all(writes).then(|_| async {
        // Every write is acknowledged: let the settled pass run.
        t.control.advance_clock(CASE_WINDOW);
        written.set(true);
    });
    let (envelopes, ()) = futures::join!(reader, writing);
    assert_distinct_and_ordered("Q15 live", &envelopes);
    let filter = actix_persistence_core::query::EventFilter::Slices {
        entity_type: entity_type.clone(),
        min_slice: 0,
        max_slice: 1023,
    };
    let start = actix_persistence_core::query::EventKey::start_of(i64::MIN);
    let stored = within(
        "Q15 read_events",
        t.store
            .read_events(actix_persistence_core::query::EventsRequest {
                filter: &filter,
                after: &start,
                before_timestamp: i64::MAX,
                limit: 10_000,
                with_previous_timestamp: true,
            }),
    )
    .await
    .unwrap_or_else(|e| panic!("Q15 read_events failed: {e}"));
    assert_eq!(stored.len(), 1200, "Q15: 1,200 stored events");
    for e in &stored {
        let seq_nr = e.repr.seq_nr;
        if seq_nr > 1 {
            assert_eq!(
                e.previous_seq_nr,
                Some(seq_nr - 1),
                "Q15: previous of {:?} {seq_nr}",
                e.repr.persistence_id
            );
            let previous = e.previous_timestamp.unwrap_or(i64::MAX);
            assert!(
                previous <= e.timestamp,
                "Q15: {:?} {seq_nr} has database timestamp {} below its previous event's {previous}",
                e.repr.persistence_id,
                e.timestamp
            );
        }
    }
}

/// Q17: a query by tag matches the tag exactly, byte for byte: the empty tag, quotes,
/// backslashes, non-ASCII, SQL `LIKE` wildcards, JSON-looking text and a tag that is a prefix
/// of others each select only their own events; an event carrying a tag twice is delivered
/// once (current and live) and comes back with its tags as written.
pub async fn q17_tags_are_matched_exactly(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let run = fresh("q17-");
    let pid = fresh("Q17|");
    let quote = format!("{run}\"'\\");
    let unicode = format!("{run}-\u{fc}n\u{ef}c\u{f8}d\u{e9}-\u{65e5}\u{672c}-\u{1F980}");
    let wildcard = format!("{run}%");
    let json = format!("{run}[\"x\",null]");
    let written: Vec<Vec<&str>> = vec![
        vec![&quote, &quote],
        vec![""],
        vec![&unicode, &run],
        vec![&wildcard],
        vec![&json, " "],
        vec![],
        vec![&quote, "", &unicode],
    ];
    for (seq_nr, tags) in (1u64..).zip(&written) {
        t.write(vec![event(&pid, seq_nr, tags)]).await;
    }
    // The empty tag and " " may also be carried by events of other runs on a shared store:
    // only this case's persistence id counts.
    let by_tag = |tag: String| {
        let what = format!("Q17 current_events_by_tag({tag:?})");
        let stream = t.query.current_events_by_tag(&tag, Offset::NoOffset);
        let pid = pid.clone();
        async move {
            let mine: Vec<RawEnvelope> = collect(&what, stream)
                .await
                .into_iter()
                .filter(|e| *e.persistence_id == *pid)
                .collect();
            mine
        }
    };
    for (tag, expected) in [
        (quote.clone(), vec![1, 7]),
        (String::new(), vec![2, 7]),
        (unicode.clone(), vec![3, 7]),
        (run.clone(), vec![3]),
        (wildcard.clone(), vec![4]),
        (format!("{run}_"), vec![]),
        (json.clone(), vec![5]),
        (" ".to_owned(), vec![5]),
        (format!("{quote} "), vec![]),
    ] {
        let got = by_tag(tag.clone()).await;
        assert_eq!(seq_nrs(&got), expected, "Q17: events tagged {tag:?}");
        for e in &got {
            let index = usize::try_from(e.seq_nr - 1).unwrap_or(usize::MAX);
            assert_eq!(
                e.tags, written[index],
                "Q17: tags of event {} as written",
                e.seq_nr
            );
        }
    }
    // Live: the event tagged twice comes once, and the next one follows it.
    let mut live = t.query.events_by_tag(&quote, Offset::NoOffset);
    assert_eq!(
        seq_nrs(&take("Q17 live", &mut live, 2).await),
        vec![1, 7],
        "Q17 live"
    );
    t.write(vec![event(&pid, 8, &[&quote, &quote])]).await;
    t.write(vec![event(&pid, 9, &[&quote])]).await;
    assert_eq!(
        seq_nrs(&take("Q17 live", &mut live, 2).await),
        vec![8, 9],
        "Q17 live: the event tagged twice once, then the next"
    );
}

/// Q18: persistence ids with the entity-type separator in odd places (`E|`, `E||x`, `E|a|b`,
/// `|E`, none), non-ASCII and 255 bytes long belong to the entity type before the first `|`
/// (`""` without one): a query by slices of that type delivers exactly their events, each
/// with its id's slice, also when the range is that one slice.
pub async fn q18_odd_persistence_ids_keep_their_entity_type(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let entity_type = fresh("Q18");
    let mut long = format!("{entity_type}|");
    // Two-byte characters up to the last few bytes, then one-byte ones up to the limit.
    while long.len() + 4 <= actix_persistence_core::limits::MAX_PERSISTENCE_ID_BYTES {
        long.push(if long.len() % 2 == 0 { 'x' } else { '\u{e9}' });
    }
    while long.len() < actix_persistence_core::limits::MAX_PERSISTENCE_ID_BYTES {
        long.push('y');
    }
    let typed = vec![
        format!("{entity_type}|"),
        format!("{entity_type}||x"),
        format!("{entity_type}|a|b"),
        format!("{entity_type}|\u{fc}n\u{ef}-\u{65e5}\u{672c}-\u{1F980}"),
        format!("{entity_type}|'\"\\%_ "),
        long,
    ];
    // Of entity type "": no separator, or one in front.
    let untyped = vec![format!("|{entity_type}"), entity_type.clone()];
    // Of another entity type that starts like this one.
    let other = format!("{entity_type}x|1");
    for (i, id) in typed.iter().chain(&untyped).chain([&other]).enumerate() {
        t.write_range(id, 1, 1 + (i as u64 % 2), &[]).await;
    }
    let expected = |ids: &[String]| {
        let mut keys: Vec<(String, u64)> = ids
            .iter()
            .enumerate()
            .flat_map(|(i, id)| (1..=1 + (i as u64 % 2)).map(move |seq_nr| (id.clone(), seq_nr)))
            .collect();
        keys.sort();
        keys
    };
    let by_slices = |entity_type: String, min: u16, max: u16| {
        let what = format!("Q18 current_events_by_slices({entity_type:?}, {min}, {max})");
        let stream = t
            .query
            .current_events_by_slices(&entity_type, min, max, Offset::NoOffset);
        async move { collect(&what, stream).await }
    };
    let got = by_slices(entity_type.clone(), 0, 1023).await;
    for e in &got {
        assert_eq!(
            *e.entity_type, *entity_type,
            "Q18: entity type of {:?}",
            e.persistence_id
        );
        assert_eq!(
            e.slice,
            slice_for_persistence_id(&e.persistence_id),
            "Q18: slice of {:?}",
            e.persistence_id
        );
    }
    assert_distinct_and_ordered("Q18", &got);
    let mut got = keys(&got);
    got.sort();
    assert_eq!(
        got,
        expected(&typed),
        "Q18: exactly the ids of the entity type"
    );
    for id in &typed {
        let slice = slice_for_persistence_id(id);
        let in_slice = by_slices(entity_type.clone(), slice, slice).await;
        assert!(
            in_slice.iter().any(|e| *e.persistence_id == **id),
            "Q18: {id:?} in a query of its slice {slice} alone"
        );
    }
    let mut untyped_got: Vec<(String, u64)> = keys(&by_slices(String::new(), 0, 1023).await)
        .into_iter()
        .filter(|(id, _)| id.contains(entity_type.as_str()))
        .collect();
    untyped_got.sort();
    let untyped_expected: Vec<(String, u64)> = {
        let mut keys: Vec<(String, u64)> = expected(&[typed.clone(), untyped.clone()].concat())
            .into_iter()
            .filter(|(id, _)| untyped.contains(id))
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(
        untyped_got, untyped_expected,
        "Q18: ids without a separator, or with one in front, are of entity type \"\""
    );
}

/// Q19: more than a page of events with one database timestamp (one atomic write of 20 events
/// and one of 10 in one call, pages of 7): resuming from the offset of any element, page
/// boundaries included, delivers exactly the rest, whether the fast pass delivered them or
/// the settled pass (after the late-commit window); a live query resumed at a page boundary
/// goes on without repeats.
pub async fn q19_resume_inside_one_timestamp_delivers_exactly_the_rest(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let entity_type = fresh("Q19");
    let tag = fresh("q19-");
    let (a, b) = (format!("{entity_type}|a"), format!("{entity_type}|b"));
    let batch = vec![
        AtomicWrite::new((1..=20).map(|n| event(&a, n, &[&tag])).collect())
            .expect("a well-shaped atomic write"),
        AtomicWrite::new((1..=10).map(|n| event(&b, n, &[&tag])).collect())
            .expect("a well-shaped atomic write"),
    ];
    let results = within("Q19 write", t.store.write_messages(batch))
        .await
        .unwrap_or_else(|e| panic!("Q19 write failed: {e}"));
    assert!(results.iter().all(Result::is_ok), "Q19 write: {results:?}");
    for settled in [false, true] {
        if settled {
            // Every event is now behind the window: the settled pass delivers them.
            t.control.advance_clock(CASE_WINDOW * 2);
        }
        let query = |by_tag: bool, offset: Offset| {
            if by_tag {
                t.query.current_events_by_tag(&tag, offset)
            } else {
                t.query
                    .current_events_by_slices(&entity_type, 0, 1023, offset)
            }
        };
        for by_tag in [false, true] {
            let what = format!("Q19 (by tag: {by_tag}, settled pass: {settled})");
            let all = collect(&what, query(by_tag, Offset::NoOffset)).await;
            assert_eq!(all.len(), 30, "{what}: 30 events");
            assert_distinct_and_ordered(&what, &all);
            for (i, element) in all.iter().enumerate() {
                let stored = serde_json::to_string(&element.offset).expect("offset to JSON");
                let offset: Offset = serde_json::from_str(&stored).expect("offset from JSON");
                let rest = collect(&what, query(by_tag, offset)).await;
                assert_eq!(
                    keys(&rest),
                    keys(&all[i + 1..]),
                    "{what}: resumed after element {i}"
                );
            }
        }
    }
    // Live, resumed at the boundaries of the first two pages.
    let all = collect(
        "Q19 live",
        t.query
            .current_events_by_slices(&entity_type, 0, 1023, Offset::NoOffset),
    )
    .await;
    for (round, i) in [6usize, 13].into_iter().enumerate() {
        let mut live = t
            .query
            .events_by_slices(&entity_type, 0, 1023, all[i].offset.clone());
        let rest = take("Q19 live resumed", &mut live, all.len() - i - 1 + round).await;
        let mut expected = keys(&all[i + 1..]);
        if round == 1 {
            expected.push((b.clone(), 11));
        }
        assert_eq!(keys(&rest), expected, "Q19 live resumed after element {i}");
        let seq_nr = 11 + round as u64;
        t.write_range(&b, seq_nr, seq_nr, &[&tag]).await;
        assert_eq!(
            keys(&take("Q19 live", &mut live, 1).await),
            vec![(b.clone(), seq_nr)],
            "Q19 live: the next event, no repeat"
        );
    }
}

/// Q20: the live `events_by_persistence_id` honours its bounds and ends once every event up to
/// `to_seq_nr` was delivered: at once for `to` 0 or `from` above `to`; when `to` is reached;
/// and when the id's highest sequence number passed `to` although `to` itself is not stored
/// (deleted, or a number no write stored, as a rejected write leaves). With `to` = MAX it
/// never ends.
pub async fn q20_live_events_by_persistence_id_ends_after_to(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let pid = fresh("Q20|");
    t.write_range(&pid, 1, 6, &[]).await;
    let live = |from, to| {
        let what = format!("Q20 events_by_persistence_id({from}, {to})");
        let stream = t.query.events_by_persistence_id(&pid, from, to);
        async move { seq_nrs(&collect(&what, stream).await) }
    };
    assert_eq!(live(0, 0).await, Vec::<u64>::new(), "Q20 (0, 0)");
    assert_eq!(live(4, 2).await, Vec::<u64>::new(), "Q20 (4, 2)");
    assert_eq!(live(0, 3).await, vec![1, 2, 3], "Q20 (0, 3)");
    within(
        "Q20 delete",
        t.store
            .delete_messages_to(&pid, 5, actix_persistence_core::FencingToken::UNOWNED),
    )
    .await
    .expect("Q20 delete");
    assert_eq!(
        live(1, 5).await,
        Vec::<u64>::new(),
        "Q20 (1, 5), all deleted"
    );
    assert_eq!(live(2, 6).await, vec![6], "Q20 (2, 6), 2..5 deleted");
    // 7 is never stored (a rejected write's number): the query ends once 8 is.
    let mut gap = t.query.events_by_persistence_id(&pid, 1, 7);
    assert_eq!(seq_nrs(&take("Q20 (1, 7)", &mut gap, 1).await), vec![6]);
    t.write_range(&pid, 8, 8, &[]).await;
    assert_eq!(
        seq_nrs(&collect("Q20 (1, 7)", gap).await),
        Vec::<u64>::new(),
        "Q20 (1, 7): ends after 6 once 8 is stored"
    );
    let mut open = t.query.events_by_persistence_id(&pid, 7, MAX_SEQ_NR);
    assert_eq!(seq_nrs(&take("Q20 (7, MAX)", &mut open, 1).await), vec![8]);
    t.write_range(&pid, 9, 9, &[]).await;
    assert_eq!(
        seq_nrs(&take("Q20 (7, MAX)", &mut open, 1).await),
        vec![9],
        "Q20 (7, MAX) goes on"
    );
}

/// Q21: a live query reads the events already stored page after page, without waiting for
/// the refresh interval between full pages (a one-hour interval here, and no write to notify
/// it): by persistence id, by slices and by tag.
pub async fn q21_live_queries_catch_up_without_waiting_for_a_refresh(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let query = ReadJournal::from_arc(
        t.store.clone(),
        QuerySettings {
            refresh_interval: Duration::from_secs(3600),
            ..t.query.settings().clone()
        },
    );
    let entity_type = fresh("Q21");
    let tag = fresh("q21-");
    let pid = format!("{entity_type}|1");
    // Four pages of 7 and a bit.
    t.write_range(&pid, 1, 30, &[&tag]).await;
    let expected: Vec<u64> = (1..=30).collect();
    let mut by_pid = query.events_by_persistence_id(&pid, 1, MAX_SEQ_NR);
    assert_eq!(
        seq_nrs(&take("Q21 by persistence id", &mut by_pid, 30).await),
        expected,
        "Q21 by persistence id"
    );
    let mut by_slices = query.events_by_slices(&entity_type, 0, 1023, Offset::NoOffset);
    assert_eq!(
        seq_nrs(&take("Q21 by slices", &mut by_slices, 30).await),
        expected,
        "Q21 by slices"
    );
    let mut by_tag = query.events_by_tag(&tag, Offset::NoOffset);
    assert_eq!(
        seq_nrs(&take("Q21 by tag", &mut by_tag, 30).await),
        expected,
        "Q21 by tag"
    );
}

/// Q22: `current_persistence_ids` lists the ids that stored events, also when all were deleted
/// since, and no id that only took ownership (an actor that recovered and never persisted);
/// after the last id it gives nothing, after an id not listed it goes on from there, and a
/// limit of 0 gives nothing.
pub async fn q22_persistence_ids_are_those_that_stored_events(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let prefix = fresh("Q22|");
    let (owned, deleted, written) = (
        format!("{prefix}-1"),
        format!("{prefix}-2"),
        format!("{prefix}-3"),
    );
    within("Q22 take ownership", t.store.take_ownership(&owned))
        .await
        .expect("Q22 take ownership");
    t.write_range(&deleted, 1, 2, &[]).await;
    within(
        "Q22 delete",
        t.store.delete_messages_to(
            &deleted,
            MAX_SEQ_NR,
            actix_persistence_core::FencingToken::UNOWNED,
        ),
    )
    .await
    .expect("Q22 delete");
    t.write_range(&written, 1, 1, &[]).await;
    let list = |after: String, limit: u64| {
        let stream = t.query.current_persistence_ids(Some(&after), limit);
        async move {
            let items: Vec<_> = within("Q22", stream.collect()).await;
            items
                .into_iter()
                .map(|i| i.unwrap_or_else(|e| panic!("Q22 failed: {e}")))
                .collect::<Vec<String>>()
        }
    };
    let mine = |ids: Vec<String>| -> Vec<String> {
        ids.into_iter()
            .filter(|id| id.starts_with(&prefix))
            .collect()
    };
    assert_eq!(
        mine(list(prefix.clone(), MAX_SEQ_NR).await),
        vec![deleted.clone(), written.clone()],
        "Q22: the ids that stored events, not the one that only took ownership"
    );
    let after_last = list(written.clone(), MAX_SEQ_NR).await;
    assert!(
        after_last
            .iter()
            .all(|id| id.as_bytes() > written.as_bytes()),
        "Q22: after the last id, only ids after it: {after_last:?}"
    );
    assert_eq!(mine(after_last), Vec::<String>::new(), "Q22 after the last");
    assert_eq!(
        list(owned.clone(), 1).await,
        vec![deleted.clone()],
        "Q22: after an id not listed, limit 1"
    );
    assert_eq!(
        list(prefix.clone(), 0).await,
        Vec::<String>::new(),
        "Q22 limit 0"
    );
}

/// Q23: a catch-up over stored events that reads ahead (`read_ahead_pages` > 1: windows of
/// database timestamps read at once) delivers exactly what one reading page after page does:
/// every stored event once, each id in order, deleted events left out; and resuming from any
/// envelope's offset delivers exactly the rest.
pub async fn q23_catch_up_reading_ahead_delivers_every_event_once(store: Arc<dyn QueryStore>) {
    let t = QueryUnderTest::new(store);
    let entity_type = fresh("Q23");
    let ids: Vec<String> = (0..6).map(|i| format!("{entity_type}|{i}")).collect();
    // 150 events in pages of 7, the ids interleaved.
    for seq_nr in 1..=25 {
        for id in &ids {
            t.write_range(id, seq_nr, seq_nr, &[]).await;
        }
    }
    within(
        "Q23 delete",
        t.store
            .delete_messages_to(&ids[2], 10, actix_persistence_core::FencingToken::UNOWNED),
    )
    .await
    .expect("Q23 delete");
    // Every event is behind the late-commit window: the settled pass reads them all.
    t.control.advance_clock(CASE_WINDOW);
    let catch_up = |read_ahead_pages: u32, offset: Offset| {
        let settings = QuerySettings {
            read_ahead_pages,
            ..t.query.settings().clone()
        };
        ReadJournal::from_arc(t.store.clone(), settings).current_events_by_slices(
            &entity_type,
            0,
            1023,
            offset,
        )
    };
    let one_by_one = collect("Q23 one page ahead", catch_up(1, Offset::NoOffset)).await;
    assert_eq!(one_by_one.len(), 140, "Q23: 150 events, 10 deleted");
    assert_distinct_and_ordered("Q23", &one_by_one);
    for id in &ids {
        let expected: Vec<u64> = if *id == ids[2] {
            (11..=25).collect()
        } else {
            (1..=25).collect()
        };
        let of_id: Vec<u64> = one_by_one
            .iter()
            .filter(|e| &*e.persistence_id == id.as_str())
            .map(|e| e.seq_nr)
            .collect();
        assert_eq!(of_id, expected, "Q23: the events of {id}");
    }
    for pages in [2, 3, 8] {
        let ahead = collect("Q23 reading ahead", catch_up(pages, Offset::NoOffset)).await;
        assert_eq!(
            keys(&ahead),
            keys(&one_by_one),
            "Q23: {pages} pages read ahead"
        );
    }
    for i in (0..one_by_one.len()).step_by(9) {
        let rest = collect("Q23 resumed", catch_up(3, one_by_one[i].offset.clone())).await;
        assert_eq!(
            keys(&rest),
            keys(&one_by_one[i + 1..]),
            "Q23: resumed after element {i}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The case table and runners.

type RunCase = fn(Arc<dyn QueryStore>) -> LocalBoxFuture<'static, ()>;

/// One query conformance case.
pub struct QueryCase {
    /// The case's name, e.g. `q01_events_by_persistence_id_bounds`.
    pub name: &'static str,
    /// The rule it checks, in one line.
    pub rule: &'static str,
    run: RunCase,
}

impl QueryCase {
    /// Runs the case against `store` (inside a Tokio runtime).
    ///
    /// # Panics
    /// When the store does not behave as the case requires.
    pub async fn run(&self, store: Arc<dyn QueryStore>) {
        (self.run)(store).await;
    }
}

impl fmt::Debug for QueryCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueryCase")
            .field("name", &self.name)
            .field("rule", &self.rule)
            .finish()
    }
}

crate::__query_cases! {
    __case_table { QueryCase, "Every query conformance case, in order: Q1-Q23." }
}

impl Case for QueryCase {
    type Store = dyn QueryStore;
    const SUITE: &'static str = "query";

    fn all() -> &'static [Self] {
        CASES
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn run(&self, store: Arc<dyn QueryStore>) -> LocalBoxFuture<'static, ()> {
        (self.run)(store)
    }
}

fn shared<S: QueryStore>(store: S) -> Arc<dyn QueryStore> {
    Arc::new(store)
}

/// Runs the case `name` in a new Actix system against a store fresh from `factory`. The
/// expansion of [`query_conformance_tests!`](crate::query_conformance_tests) calls this.
///
/// # Panics
/// When no case is called `name`, or the case fails.
pub fn run_case<F, Fut, S>(name: &str, factory: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = S>,
    S: QueryStore,
{
    super::run_named_case::<QueryCase, _, _>(name, || factory().map(|store| Some(shared(store))));
}

/// Like [`run_case`], for a factory that may have no store (`None` skips the case).
///
/// # Panics
/// When no case is called `name`, or the case fails.
pub fn run_case_if_available<F, Fut, S>(name: &str, factory: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Option<S>>,
    S: QueryStore,
{
    super::run_named_case::<QueryCase, _, _>(name, || factory().map(|store| store.map(shared)));
}
