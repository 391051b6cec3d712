//! Query speed: catch-up throughput of `current_events_by_slices` over all 1024 slices, and
//! live latency from a write's acknowledgement to a live query delivering it, on SQLite and on
//! PostgreSQL (through DATABASE_URL; a throwaway database is created and dropped).
//!
//! `cargo run --release -p actix-persistence-bench --bin query-speed -- [events] [ids] [live-seconds] [sqlite|postgres|both]`
//! (defaults 1,000,000 events in 10,000 ids; 10 s of live load at 1,000 events/s from 100 ids;
//! both stores).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_persistence_bench::query_fill::{self, fill, repr, CatchUp};
use actix_persistence_core::query::{
    EventFilter, EventKey, EventsRequest, Offset, QuerySettings, QueryStore, ReadJournal,
    StoredEvent, WriteNotifications,
};
use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, JournalError, JournalStore, ReplayStream,
};
use actix_persistence_sql::test_util::TestDatabase;
use actix_persistence_sql::{
    PostgresJournal, PostgresJournalOptions, SqliteJournal, SqliteJournalOptions,
};
use async_trait::async_trait;
use futures::StreamExt;
use hdrhistogram::Histogram;

const LIVE_IDS: u64 = 100;
const LIVE_RATE: u64 = 1_000;
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// A live query that delivers nothing for this long has missed an event.
const STALL: Duration = Duration::from_secs(20);

/// Fills the store, then catches up over it with pages of 1,000 and 5,000 and, on PostgreSQL
/// (`analyze`: its URL), once more with pages of 1,000 after `ANALYZE journal` (a table filled a
/// moment ago has no statistics yet: its first page query plans badly until the journal's
/// background `ANALYZE` ends; recovery-speed reports both states too).
async fn catch_up(
    name: &str,
    store: Arc<dyn QueryStore>,
    events: u64,
    ids: u64,
    analyze: Option<&str>,
) {
    let filled = fill(&*store, events, ids).await;
    eprintln!(
        "{name}: {events} events in {ids} ids written in {:.1} s",
        filled.as_secs_f64()
    );
    for page_size in [1_000, 5_000] {
        catch_up_once(name, "", &store, page_size, events / ids * ids).await;
    }
    if let Some(url) = analyze {
        use sqlx::{Connection, Executor};
        let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
        conn.execute("ANALYZE journal").await.expect("analyze");
        catch_up_once(name, " (after ANALYZE)", &store, 1_000, events / ids * ids).await;
    }
}

/// One `current_events_by_slices` over every slice with pages of `page_size`, which must
/// deliver `expected` events.
async fn catch_up_once(
    name: &str,
    label: &str,
    store: &Arc<dyn QueryStore>,
    page_size: u32,
    expected: u64,
) {
    let CatchUp {
        delivered,
        seconds,
        cpu,
    } = query_fill::catch_up_once(store, page_size, QuerySettings::default().read_ahead_pages)
        .await;
    assert_eq!(delivered, expected, "every event once");
    println!(
        "| {name}{label} | catch-up, page {page_size} | {delivered} | {seconds:.2} s | {:.0} events/s | CPU {cpu:.2} s |",
        delivered as f64 / seconds
    );
}

/// The stored events of `entity_type` whose database timestamp is below their id's previous
/// event's (the order a query by offset relies on), as (id, seq_nr, timestamp, previous).
async fn timestamps_out_of_order(
    store: &dyn QueryStore,
    entity_type: &str,
) -> Vec<(String, u64, i64, i64)> {
    let filter = EventFilter::Slices {
        entity_type: entity_type.to_owned(),
        min_slice: 0,
        max_slice: 1023,
    };
    let start = EventKey::start_of(i64::MIN);
    let events = store
        .read_events(EventsRequest {
            filter: &filter,
            after: &start,
            before_timestamp: i64::MAX,
            limit: u32::MAX,
            with_previous_timestamp: true,
        })
        .await
        .expect("read events");
    events
        .into_iter()
        .filter_map(|e| {
            let previous = e.previous_timestamp?;
            (previous > e.timestamp).then_some((
                e.repr.persistence_id.to_string(),
                e.repr.seq_nr,
                e.timestamp,
                previous,
            ))
        })
        .collect()
}

/// A store whose live queries are never notified: they poll.
struct PollingOnly(Arc<dyn QueryStore>);

#[async_trait]
impl JournalStore for PollingOnly {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        self.0.write_messages(writes).await
    }
    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.0.replay_messages(pid, from, to, max)
    }
    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        self.0.read_highest_sequence_nr(pid, from).await
    }
    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        fencing_token: actix_persistence_core::FencingToken,
    ) -> Result<(), JournalError> {
        self.0.delete_messages_to(pid, to, fencing_token).await
    }
}

#[async_trait]
impl QueryStore for PollingOnly {
    async fn current_timestamp(&self) -> Result<i64, JournalError> {
        self.0.current_timestamp().await
    }
    async fn read_events(
        &self,
        request: EventsRequest<'_>,
    ) -> Result<Vec<StoredEvent>, JournalError> {
        self.0.read_events(request).await
    }
    async fn read_persistence_ids(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>, JournalError> {
        self.0.read_persistence_ids(after, limit).await
    }
    fn write_notifications(&self) -> Option<WriteNotifications> {
        None
    }
}

/// Writes `LIVE_RATE` events/s from `LIVE_IDS` ids (entity type `entity_type`) for `seconds`,
/// open loop, while a live query by slices runs; returns the histogram (µs) from each write's
/// acknowledgement to the query delivering it.
async fn live(
    store: Arc<dyn QueryStore>,
    query_store: Arc<dyn QueryStore>,
    entity_type: &str,
    seconds: u64,
) -> Histogram<u64> {
    let settings = QuerySettings {
        refresh_interval: POLL_INTERVAL,
        ..QuerySettings::default()
    };
    let query = ReadJournal::from_arc(query_store, settings);
    let acked: Arc<Mutex<HashMap<(String, u64), Instant>>> = Arc::default();
    let total = LIVE_RATE * seconds;
    let mut stream = query.events_by_slices(entity_type, 0, 1023, Offset::NoOffset);
    let reader = {
        let acked = Arc::clone(&acked);
        let check_store = Arc::clone(&store);
        let check_type = entity_type.to_owned();
        tokio::spawn(async move {
            let mut histogram = Histogram::<u64>::new(3).expect("histogram");
            let mut pending: HashMap<(String, u64), Instant> = HashMap::new();
            let mut received = 0;
            let mut delivered_keys: HashMap<(String, u64), u32> = HashMap::new();
            while received < total {
                let next = tokio::time::timeout(STALL, stream.next()).await;
                let Ok(next) = next else {
                    // Stalled: say what is missing instead of waiting forever.
                    let missing: Vec<_> = acked
                        .lock()
                        .expect("lock")
                        .keys()
                        .filter(|key| !delivered_keys.contains_key(*key))
                        .cloned()
                        .collect();
                    let repeated: Vec<_> = delivered_keys.iter().filter(|(_, n)| **n > 1).collect();
                    let unordered = timestamps_out_of_order(&*check_store, &check_type).await;
                    eprintln!(
                        "ids whose database timestamps are not in sequence order: {unordered:?}"
                    );
                    panic!(
                        "live query stalled after {received} of {total}: {} acknowledged events \
                         not delivered (e.g. {:?}), repeated {:?}",
                        missing.len(),
                        missing.iter().take(5).collect::<Vec<_>>(),
                        repeated.iter().take(5).collect::<Vec<_>>()
                    );
                };
                let envelope = next.expect("live").expect("no error");
                *delivered_keys
                    .entry((envelope.persistence_id.to_string(), envelope.seq_nr))
                    .or_default() += 1;
                let delivered = Instant::now();
                received += 1;
                let key = (envelope.persistence_id.to_string(), envelope.seq_nr);
                // Delivered before the writer saw its acknowledgement: latency 0.
                pending.insert(key, delivered);
                let mut acked = acked.lock().expect("lock");
                pending.retain(|key, delivered| match acked.remove(key) {
                    Some(ack) => {
                        let micros = delivered.saturating_duration_since(ack).as_micros();
                        histogram.record(micros as u64).expect("record");
                        false
                    }
                    None => true,
                });
            }
            // Acknowledgements that arrived after their delivery.
            for _ in 0..100 {
                if pending.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                let mut acked = acked.lock().expect("lock");
                pending.retain(|key, _| match acked.remove(key) {
                    Some(_) => {
                        histogram.record(0).expect("record");
                        false
                    }
                    None => true,
                });
            }
            histogram
        })
    };
    let mut ticks = tokio::time::interval(Duration::from_micros(1_000_000 / LIVE_RATE));
    let mut next_seq = vec![1u64; LIVE_IDS as usize];
    for i in 0..total {
        ticks.tick().await;
        let id = (i % LIVE_IDS) as usize;
        let pid = format!("{entity_type}|{id}");
        let seq_nr = next_seq[id];
        next_seq[id] += 1;
        let store = Arc::clone(&store);
        let acked = Arc::clone(&acked);
        tokio::spawn(async move {
            let write = AtomicWrite::new(vec![repr(&pid, seq_nr)]).expect("one event");
            let results = store.write_messages(vec![write]).await.expect("write");
            let ack = Instant::now();
            assert!(results[0].is_ok(), "write");
            acked.lock().expect("lock").insert((pid, seq_nr), ack);
        });
    }
    reader.await.expect("reader")
}

async fn live_rows(name: &str, store: Arc<dyn QueryStore>, seconds: u64) {
    let polling: Arc<dyn QueryStore> = Arc::new(PollingOnly(Arc::clone(&store)));
    for (mode, query_store, entity_type) in [
        ("polling every 100 ms", polling, "LivePoll"),
        ("in-process notification", Arc::clone(&store), "LiveNotify"),
    ] {
        let h = live(Arc::clone(&store), query_store, entity_type, seconds).await;
        println!(
            "| {name} | live, {mode} | {} | p50 {:.1} ms | p99 {:.1} ms | max {:.1} ms |",
            h.len(),
            h.value_at_quantile(0.5) as f64 / 1000.0,
            h.value_at_quantile(0.99) as f64 / 1000.0,
            h.max() as f64 / 1000.0,
        );
    }
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>().ok());
    let events = args.next().flatten().unwrap_or(1_000_000);
    let ids = args.next().flatten().unwrap_or(10_000).max(1);
    let live_seconds = args.next().flatten().unwrap_or(10).max(1);
    let stores = std::env::args().nth(4).unwrap_or_else(|| "both".to_owned());
    let (run_sqlite, run_postgres) = (stores != "postgres", stores != "sqlite");
    // One thread, as the actix system of the other benchmarks.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        println!("| store | measurement | events | time / p50 | events/s / p99 | max |");
        println!("|---|---|---|---|---|---|");
        if run_sqlite {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!("sqlite:{}", dir.path().join("journal.db").display());
            let sqlite: Arc<dyn QueryStore> = Arc::new(
                SqliteJournal::connect(&SqliteJournalOptions::new(url))
                    .await
                    .expect("open SQLite"),
            );
            catch_up("SQLite", Arc::clone(&sqlite), events, ids, None).await;
            live_rows("SQLite", sqlite, live_seconds).await;
        }
        if !run_postgres {
            return;
        }
        if let Some(db) = TestDatabase::create().await {
            let postgres: Arc<dyn QueryStore> = Arc::new(
                PostgresJournal::connect(&PostgresJournalOptions::new(db.url()))
                    .await
                    .expect("connect to PostgreSQL"),
            );
            catch_up(
                "PostgreSQL",
                Arc::clone(&postgres),
                events,
                ids,
                Some(db.url()),
            )
            .await;
            live_rows("PostgreSQL", postgres, live_seconds).await;
        }
    });
}
