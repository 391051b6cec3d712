//! The in-memory store's stripes (each id's events under one of 64 locks, each stripe with its
//! own query index and clock) seen through its public API, with writers on several OS threads:
//! the store's clock reading is a floor (every event below it is visible to later reads, none
//! is written below it afterwards), live queries by slices and by tag deliver every event
//! exactly once and each id's events in order (also across a resume from a stored offset),
//! and `current_persistence_ids` pages through the ids of every stripe.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use actix_persistence_core::query::{
    EnvelopeStream, EventFilter, EventKey, EventsRequest, Offset, QuerySettings, QueryStore,
    ReadJournal, StoredEvent,
};
use actix_persistence_core::{AtomicWrite, InMemoryJournal, JournalStore, PersistentRepr};
use futures::{StreamExt, TryStreamExt};

/// How long a test waits for a delivery before it fails (a guard against a hang, not a way to
/// order events).
const PATIENCE: Duration = Duration::from_secs(20);

fn repr(pid: &str, seq_nr: u64, tags: Vec<String>) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload: b"{}".to_vec(),
        serializer_id: 1,
        manifest: String::new(),
        writer_uuid: "w".into(),
        timestamp: 0,
        tags: tags.into(),
    }
}

/// The tags of `seq_nr`: every third event carries "third".
fn tags_of(seq_nr: u64) -> Vec<String> {
    if seq_nr % 3 == 0 {
        vec!["third".to_owned()]
    } else {
        Vec::new()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

/// Four writer threads ([`spawn_writer`]) of 16 ids `Live|<thread>-<i>` each, `events` per
/// id: the ids of each thread, and the threads.
fn spawn_live_writers(
    journal: &InMemoryJournal,
    events: u64,
) -> (Vec<Vec<String>>, Vec<thread::JoinHandle<()>>) {
    let ids: Vec<Vec<String>> = (0..4)
        .map(|t| (0..16).map(|i| format!("Live|{t}-{i}")).collect())
        .collect();
    let writers = ids
        .iter()
        .map(|ids| spawn_writer(journal.clone(), ids.clone(), events))
        .collect();
    (ids, writers)
}

/// Writes `events` events of each of `ids` from a thread of its own, in atomic writes of 1 to
/// 3 events (one timestamp each), the ids taking turns. Returns the thread.
fn spawn_writer(journal: InMemoryJournal, ids: Vec<String>, events: u64) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let runtime = runtime();
        let mut next: HashMap<&str, u64> = ids.iter().map(|id| (id.as_str(), 1)).collect();
        let mut round = 0u64;
        while next.values().any(|n| *n <= events) {
            round += 1;
            for id in &ids {
                let from = next[id.as_str()];
                if from > events {
                    continue;
                }
                let to = (from + round % 3).min(events);
                let write =
                    AtomicWrite::new((from..=to).map(|n| repr(id, n, tags_of(n))).collect())
                        .expect("shape");
                let results = runtime
                    .block_on(journal.write_messages(vec![write]))
                    .expect("write");
                assert!(results[0].is_ok(), "{id} {from}..={to}: {results:?}");
                next.insert(id, to + 1);
            }
        }
    })
}

/// Every page of `filter` after `after` below `bound`, `limit` events per page.
async fn all_below(
    journal: &InMemoryJournal,
    filter: &EventFilter,
    mut after: EventKey,
    bound: i64,
    limit: u32,
) -> Vec<StoredEvent> {
    let mut all = Vec::new();
    loop {
        let page = journal
            .read_events(EventsRequest {
                filter,
                after: &after,
                before_timestamp: bound,
                limit,
                with_previous_timestamp: false,
            })
            .await
            .expect("page");
        assert!(page.len() <= limit as usize, "a page over its limit");
        let Some(last) = page.last() else {
            return all;
        };
        after = last.key();
        all.extend(page);
    }
}

fn keys(events: &[StoredEvent]) -> Vec<(i64, String, u64)> {
    events
        .iter()
        .map(|e| {
            (
                e.timestamp,
                e.repr.persistence_id.to_string(),
                e.repr.seq_nr,
            )
        })
        .collect()
}

/// The store's clock is a floor, with writers on four threads: the events below a reading
/// include every write that returned before it, are in exact query order, and are the same
/// when read again after many more writes (none was written below the reading later).
#[test]
fn a_clock_reading_bounds_a_stable_prefix_while_threads_write() {
    let journal = InMemoryJournal::new();
    let stop = Arc::new(AtomicBool::new(false));
    let completed = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let (journal, stop, completed) =
                (journal.clone(), Arc::clone(&stop), Arc::clone(&completed));
            thread::spawn(move || {
                let runtime = runtime();
                let ids: Vec<String> = (0..16).map(|i| format!("Floor|{t}-{i}")).collect();
                for seq_nr in 1..=120 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    for id in &ids {
                        let write =
                            AtomicWrite::new(vec![repr(id, seq_nr, Vec::new())]).expect("shape");
                        let results = runtime
                            .block_on(journal.write_messages(vec![write]))
                            .expect("write");
                        assert!(results[0].is_ok(), "{results:?}");
                        completed.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();

    let runtime = runtime();
    let filter = EventFilter::Slices {
        entity_type: "Floor".to_owned(),
        min_slice: 0,
        max_slice: 1023,
    };
    let mut readings = Vec::new();
    for _ in 0..20 {
        let written_before = completed.load(Ordering::SeqCst);
        let bound = runtime
            .block_on(journal.current_timestamp())
            .expect("clock");
        let below = runtime.block_on(all_below(
            &journal,
            &filter,
            EventKey::start_of(i64::MIN),
            bound,
            u32::MAX,
        ));
        assert!(
            below.len() as u64 >= written_before,
            "{} events below the reading, {written_before} writes had returned before it",
            below.len()
        );
        let sorted = keys(&below);
        assert!(
            sorted
                .windows(2)
                .all(|w| (w[0].0, w[0].1.as_bytes(), w[0].2) < (w[1].0, w[1].1.as_bytes(), w[1].2)),
            "a page out of query order"
        );
        assert!(below.iter().all(|e| e.timestamp < bound));
        readings.push((bound, sorted));
    }
    stop.store(true, Ordering::SeqCst);
    for writer in writers {
        writer.join().expect("writer");
    }
    // Read again (in pages of 7 or 100 this time): exactly the same events below each reading.
    for (i, (bound, before)) in readings.into_iter().enumerate() {
        let limit = if i % 10 == 0 { 7 } else { 1000 };
        let again = runtime.block_on(all_below(
            &journal,
            &filter,
            EventKey::start_of(i64::MIN),
            bound,
            limit,
        ));
        assert_eq!(
            keys(&again),
            before,
            "events appeared below a reading later"
        );
    }
}

/// Collects the live stream's envelopes into `delivered` until `done` says so, failing at a
/// repeated (id, seq_nr) or an id's numbers out of order. Returns the last envelope's offset.
async fn collect_until(
    live: &mut EnvelopeStream,
    delivered: &mut HashMap<String, Vec<u64>>,
    mut done: impl FnMut(&HashMap<String, Vec<u64>>, &Offset) -> bool,
) -> Offset {
    loop {
        let next = tokio::time::timeout(PATIENCE, live.next())
            .await
            .unwrap_or_else(|_| {
                let count: usize = delivered.values().map(Vec::len).sum();
                panic!("nothing delivered for {PATIENCE:?} ({count} so far)")
            })
            .expect("a live stream does not end")
            .expect("no error");
        let numbers = delivered
            .entry(next.persistence_id.to_string())
            .or_default();
        if let Some(last) = numbers.last() {
            assert!(
                *last < next.seq_nr,
                "{}: {} delivered after {last}",
                next.persistence_id,
                next.seq_nr
            );
        }
        numbers.push(next.seq_nr);
        if done(delivered, &next.offset) {
            return next.offset;
        }
    }
}

fn settled_timestamp(offset: &Offset) -> i64 {
    match offset {
        Offset::Timestamp(offset) => offset.timestamp,
        other => panic!("a timestamp offset, not {other:?}"),
    }
}

/// Writes events of `sentinel` (an id of its own, written only here) one at a time, collecting
/// each, until the query's settled position passed `end`: every event written
/// before `end` was then read by the settled pass, so a repeat of one would have come.
async fn settle_past(
    journal: &InMemoryJournal,
    live: &mut EnvelopeStream,
    delivered: &mut HashMap<String, Vec<u64>>,
    sentinel: &str,
    end: i64,
) {
    let mut seq_nr = delivered.get(sentinel).map_or(0, |n| n.len() as u64);
    loop {
        seq_nr += 1;
        let write = AtomicWrite::new(vec![repr(sentinel, seq_nr, tags_of(3))]).expect("shape");
        let results = journal.write_messages(vec![write]).await.expect("write");
        assert!(results[0].is_ok());
        let offset = collect_until(live, delivered, |d, _| {
            d.get(sentinel).map_or(0, Vec::len) as u64 == seq_nr
        })
        .await;
        if settled_timestamp(&offset) > end {
            return;
        }
    }
}

fn live_settings(page_size: u32) -> QuerySettings {
    QuerySettings {
        refresh_interval: Duration::from_millis(5),
        late_commit_window: Duration::from_millis(20),
        page_size,
        read_ahead_pages: 2,
    }
}

/// Live queries by slices and by tag started before four threads write 64 ids: every event
/// (every third one, by tag) is delivered exactly once and each id's in sequence order, also
/// once the settled pass went past the last of them.
#[tokio::test]
async fn live_queries_deliver_each_event_of_threaded_writers_once() {
    const EVENTS: u64 = 60;
    let journal = InMemoryJournal::new();
    let query = ReadJournal::new(journal.clone(), live_settings(13));
    let mut by_slices = query.events_by_slices("Live", 0, 1023, Offset::NoOffset);
    let mut by_tag = query.events_by_tag("third", Offset::NoOffset);
    let (ids, writers) = spawn_live_writers(&journal, EVENTS);

    let mut slices = HashMap::new();
    let mut tagged = HashMap::new();
    let all = |d: &HashMap<String, Vec<u64>>, per_id: usize| {
        d.len() == 64 && d.values().all(|n| n.len() == per_id)
    };
    collect_until(&mut by_slices, &mut slices, |d, _| all(d, EVENTS as usize)).await;
    collect_until(&mut by_tag, &mut tagged, |d, _| all(d, EVENTS as usize / 3)).await;
    for writer in writers {
        writer.join().expect("writer");
    }
    let end = journal.current_timestamp().await.expect("clock");
    settle_past(
        &journal,
        &mut by_slices,
        &mut slices,
        "Live|sentinel-1",
        end,
    )
    .await;
    settle_past(&journal, &mut by_tag, &mut tagged, "Live|sentinel-2", end).await;

    for id in ids.iter().flatten() {
        assert_eq!(
            slices[id],
            (1..=EVENTS).collect::<Vec<_>>(),
            "{id} by slices"
        );
        let thirds: Vec<u64> = (1..=EVENTS).filter(|n| n % 3 == 0).collect();
        assert_eq!(tagged[id], thirds, "{id} by tag");
    }
}

/// A live query stopped after some envelopes and resumed from the last one's offset, while
/// threads write, delivers the rest: together each event exactly once.
#[tokio::test]
async fn a_query_resumed_from_its_offset_while_threads_write_misses_and_repeats_nothing() {
    const EVENTS: u64 = 60;
    let journal = InMemoryJournal::new();
    let query = ReadJournal::new(journal.clone(), live_settings(9));
    let (ids, writers) = spawn_live_writers(&journal, EVENTS);

    let mut delivered = HashMap::new();
    let mut offset = Offset::NoOffset;
    // Stop and resume every 500 envelopes.
    let total = 64 * EVENTS as usize;
    let mut count = 0;
    while count < total {
        let mut live = query.events_by_slices("Live", 0, 1023, offset.clone());
        let stop_at = (count + 500).min(total);
        offset = collect_until(&mut live, &mut delivered, |_, _| {
            count += 1;
            count == stop_at
        })
        .await;
    }
    for writer in writers {
        writer.join().expect("writer");
    }
    let end = journal.current_timestamp().await.expect("clock");
    let mut live = query.events_by_slices("Live", 0, 1023, offset);
    settle_past(&journal, &mut live, &mut delivered, "Live|sentinel", end).await;
    for id in ids.iter().flatten() {
        assert_eq!(delivered[id], (1..=EVENTS).collect::<Vec<_>>(), "{id}");
    }
}

/// `current_persistence_ids` in pages of 3 (ids of every stripe, some sharing prefixes, one
/// of them empty after a delete, one only owned): every id that stored an event, once, in
/// byte order, after any `after`, at most `limit`.
#[tokio::test]
async fn persistence_ids_page_through_every_stripe_in_byte_order() {
    let journal = InMemoryJournal::new();
    let mut expected = BTreeSet::new();
    for i in 0..100 {
        for id in [
            format!("Ids|{i}"),
            format!("Ids|{i}a"),
            format!("Ids|{i}\u{e9}"),
        ] {
            let write = AtomicWrite::new(vec![repr(&id, 1, Vec::new())]).expect("shape");
            let results = journal.write_messages(vec![write]).await.expect("write");
            assert!(results[0].is_ok());
            expected.insert(id);
        }
    }
    journal
        .delete_messages_to("Ids|7", 1, actix_persistence_core::FencingToken::UNOWNED)
        .await
        .expect("delete");
    journal.take_ownership("Ids|owned").await.expect("owner");
    let expected: Vec<String> = expected.into_iter().collect();

    let query = ReadJournal::new(
        journal.clone(),
        QuerySettings {
            page_size: 3,
            ..QuerySettings::default()
        },
    );
    let ids: Vec<String> = query
        .current_persistence_ids(None, u64::MAX)
        .try_collect()
        .await
        .expect("ids");
    assert_eq!(ids, expected);
    for (after, limit) in [("Ids|5", 10), ("Ids|50a", 1), ("Ids|99\u{e9}", 5), ("", 7)] {
        let page: Vec<String> = query
            .current_persistence_ids(Some(after), limit)
            .try_collect()
            .await
            .expect("ids");
        let want: Vec<String> = expected
            .iter()
            .filter(|id| id.as_bytes() > after.as_bytes())
            .take(limit as usize)
            .cloned()
            .collect();
        assert_eq!(page, want, "after {after:?} limit {limit}");
    }
}

/// Deletes of some ids' older events race a live query while threads write (compacting the
/// stripes' indexes meanwhile): nothing is delivered twice, each id's events come in order,
/// and every event not deleted is delivered (a deleted one only if read before its delete).
#[tokio::test]
async fn deletes_racing_a_live_query_lose_no_live_event() {
    const EVENTS: u64 = 60;
    let journal = InMemoryJournal::new();
    let query = ReadJournal::new(journal.clone(), live_settings(11));
    let mut live = query.events_by_slices("Live", 0, 1023, Offset::NoOffset);
    let (ids, writers) = spawn_live_writers(&journal, EVENTS);
    // Deletes the first half of thread 0's ids' stored events, again and again.
    let deleter = {
        let (journal, ids) = (journal.clone(), ids[0].clone());
        thread::spawn(move || {
            let runtime = runtime();
            let mut deleted_to = HashMap::new();
            while deleted_to.len() < ids.len() || deleted_to.values().any(|to| *to < EVENTS / 2) {
                for id in &ids {
                    let highest = runtime
                        .block_on(journal.read_highest_sequence_nr(id, 0))
                        .expect("highest");
                    let to = (highest / 2).min(EVENTS / 2);
                    runtime
                        .block_on(journal.delete_messages_to(
                            id,
                            to,
                            actix_persistence_core::FencingToken::UNOWNED,
                        ))
                        .expect("delete");
                    deleted_to.insert(id.clone(), to);
                }
            }
        })
    };

    let mut delivered = HashMap::new();
    // Until every event above the deletes' reach came.
    collect_until(&mut live, &mut delivered, |d, _| {
        ids.iter().flatten().all(|id| {
            d.get(id.as_str()).is_some_and(|n: &Vec<u64>| {
                n.iter().filter(|n| **n > EVENTS / 2).count() == EVENTS as usize / 2
            })
        })
    })
    .await;
    for writer in writers {
        writer.join().expect("writer");
    }
    deleter.join().expect("deleter");
    let end = journal.current_timestamp().await.expect("clock");
    settle_past(&journal, &mut live, &mut delivered, "Live|sentinel", end).await;
    for (t, ids) in ids.iter().enumerate() {
        for id in ids {
            let numbers = &delivered[id];
            if t == 0 {
                let kept: Vec<u64> = numbers
                    .iter()
                    .copied()
                    .filter(|n| *n > EVENTS / 2)
                    .collect();
                assert_eq!(kept, (EVENTS / 2 + 1..=EVENTS).collect::<Vec<_>>(), "{id}");
            } else {
                assert_eq!(*numbers, (1..=EVENTS).collect::<Vec<_>>(), "{id}");
            }
        }
    }
    // What is left: exactly the events not deleted.
    let left: Vec<_> = query
        .current_events_by_slices("Live", 0, 1023, Offset::NoOffset)
        .try_collect()
        .await
        .expect("query");
    let writers_left = left
        .iter()
        .filter(|e| !e.persistence_id.starts_with("Live|sentinel"))
        .count();
    assert_eq!(writers_left as u64, 16 * EVENTS / 2 + 48 * EVENTS);
}
