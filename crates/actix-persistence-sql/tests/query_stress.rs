//! The read side's contract under real concurrency, randomized but reproducible (seeded): while
//! several journals of one database (as several processes) write concurrently (group commit and
//! one transaction per write; pipelined writes of one id; transactions held open for random
//! times below the late-commit window, by a row lock on the id or by a raw transaction of
//! another connection; writes that roll back; deletes), live queries by slices, by tag and by
//! persistence id run, some of them stopping and resuming from their last envelope's offset.
//! At the end every consumer delivered exactly the stored events of its filter, each once, each
//! id's in sequence order, and nothing deleted before it (re)started; the current queries agree,
//! and a current query resumed from sampled offsets of a live one gives exactly the rest.
//!
//! The seed is printed; set `QUERY_STRESS_SEED` to run one again (`QUERY_STRESS_ROUNDS` runs
//! several seeds one after another).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_persistence_core::query::{
    entity_type_of, slice_for_persistence_id, slice_ranges, Offset, QuerySettings, QueryStore,
    ReadJournal,
};
use actix_persistence_core::{AtomicWrite, FencingToken, PersistentRepr, MAX_SEQ_NR};
use futures::{StreamExt, TryStreamExt};
use tokio::time::Instant;

/// The stress tests take the machine one at a time (each runs several journals, writers and
/// queries; run together they would mostly measure each other).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().await
}

/// SplitMix64: small, seeded, reproducible.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `range`.
    fn range(&mut self, range: RangeInclusive<u64>) -> u64 {
        let (low, high) = (*range.start(), *range.end());
        low + self.next() % (high - low + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn millis(&mut self, max: u64) -> Duration {
        Duration::from_millis(self.range(0..=max))
    }

    fn fork(&mut self) -> Rng {
        Rng(self.next())
    }
}

fn seeds(default: u64) -> Vec<u64> {
    let first = std::env::var("QUERY_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    let rounds = std::env::var("QUERY_STRESS_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1u64);
    (0..rounds).map(|i| first.wrapping_add(i)).collect()
}

const ENTITY: &str = "Stress";
const TAG: &str = "stress-tag";

fn event(pid: &str, seq_nr: u64, tagged: bool) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload: format!("{{\"n\":{seq_nr}}}").into_bytes(),
        serializer_id: 1,
        manifest: String::new(),
        writer_uuid: "w".into(),
        timestamp: 0,
        tags: if tagged {
            vec![TAG.to_owned()].into()
        } else {
            Default::default()
        },
    }
}

type Key = (String, u64);

/// What was stored (committed), and when events were deleted: the truth the queries are checked
/// against.
#[derive(Default)]
struct Truth {
    /// Every committed event, with whether it carries the tag.
    stored: BTreeMap<Key, bool>,
    /// Deleted events, with the instant their delete had returned.
    deleted: HashMap<Key, Instant>,
    /// The longest time a held transaction took from its insert to its commit.
    longest_hold: Duration,
}

type SharedTruth = Arc<Mutex<Truth>>;

fn record_stored(truth: &SharedTruth, events: &[PersistentRepr]) {
    let mut truth = truth.lock().unwrap();
    for e in events {
        let previous = truth
            .stored
            .insert((e.persistence_id.to_string(), e.seq_nr), !e.tags.is_empty());
        assert!(
            previous.is_none(),
            "stored twice: {} {}",
            e.persistence_id,
            e.seq_nr
        );
    }
}

fn record_hold(truth: &SharedTruth, took: Duration) {
    let mut truth = truth.lock().unwrap();
    truth.longest_hold = truth.longest_hold.max(took);
}

#[derive(Clone, Debug)]
enum Source {
    Slices(RangeInclusive<u16>),
    Tag,
    ById(String),
}

impl Source {
    fn selects(&self, pid: &str, tagged: bool) -> bool {
        match self {
            Source::Slices(range) => {
                entity_type_of(pid) == ENTITY && range.contains(&slice_for_persistence_id(pid))
            }
            Source::Tag => tagged,
            Source::ById(id) => id == pid,
        }
    }
}

#[derive(Clone, Debug)]
struct ConsumerSpec {
    name: String,
    source: Source,
    /// The journal whose queries (and write notifications) it uses.
    journal: usize,
    /// Stops after a random number of envelopes and resumes from the last one's offset.
    resumes: bool,
}

struct Delivery {
    key: Key,
    /// Which stream of the consumer delivered it, and when that stream started.
    segment: usize,
    segment_start: Instant,
    offset: Offset,
}

#[derive(Default)]
struct Consumed {
    deliveries: Vec<Delivery>,
    errors: Vec<String>,
}

async fn consume(spec: ConsumerSpec, query: ReadJournal, mut rng: Rng, out: Arc<Mutex<Consumed>>) {
    let mut offset = Offset::NoOffset;
    let mut next_seq_nr = 1;
    for segment in 0.. {
        let segment_start = Instant::now();
        let mut stream = match &spec.source {
            Source::Slices(range) => {
                query.events_by_slices(ENTITY, *range.start(), *range.end(), offset.clone())
            }
            Source::Tag => query.events_by_tag(TAG, offset.clone()),
            Source::ById(id) => query.events_by_persistence_id(id, next_seq_nr, MAX_SEQ_NR),
        };
        let limit = if spec.resumes {
            rng.range(1..=60)
        } else {
            u64::MAX
        };
        let mut taken = 0;
        while taken < limit {
            match stream.next().await {
                Some(Ok(envelope)) => {
                    taken += 1;
                    next_seq_nr = envelope.seq_nr + 1;
                    offset = envelope.offset.clone();
                    out.lock().unwrap().deliveries.push(Delivery {
                        key: (envelope.persistence_id.to_string(), envelope.seq_nr),
                        segment,
                        segment_start,
                        offset: envelope.offset,
                    });
                }
                Some(Err(error)) => {
                    out.lock().unwrap().errors.push(error.to_string());
                    return;
                }
                None => {
                    out.lock()
                        .unwrap()
                        .errors
                        .push("a live query ended".to_owned());
                    return;
                }
            }
        }
        drop(stream);
        if rng.chance(50) {
            // Through JSON, as an offset store keeps it.
            let json = serde_json::to_string(&offset).expect("offset to JSON");
            offset = serde_json::from_str(&json).expect("offset from JSON");
        }
    }
}

struct Settings {
    window: Duration,
    refresh: Duration,
}

fn query_settings(settings: &Settings, rng: &mut Rng) -> QuerySettings {
    QuerySettings {
        refresh_interval: settings.refresh,
        late_commit_window: settings.window,
        page_size: u32::try_from(rng.range(5..=40)).unwrap(),
        read_ahead_pages: u32::try_from(rng.range(1..=3)).unwrap(),
    }
}

/// The consumers of a run: a live query over every slice, the four ranges of
/// `slice_ranges(4)` and the tag (those resuming), and by persistence id for a few ids.
fn consumers(journals: usize, by_id: &[String]) -> Vec<ConsumerSpec> {
    let mut specs = vec![
        ConsumerSpec {
            name: "all slices".into(),
            source: Source::Slices(0..=1023),
            journal: 0,
            resumes: false,
        },
        ConsumerSpec {
            name: "tag".into(),
            source: Source::Tag,
            journal: 1 % journals,
            resumes: false,
        },
        ConsumerSpec {
            name: "tag, resuming".into(),
            source: Source::Tag,
            journal: 0,
            resumes: true,
        },
    ];
    for (i, range) in slice_ranges(4).into_iter().enumerate() {
        specs.push(ConsumerSpec {
            name: format!("slices {range:?}, resuming"),
            source: Source::Slices(range),
            journal: i % journals,
            resumes: true,
        });
    }
    for (i, id) in by_id.iter().enumerate() {
        specs.push(ConsumerSpec {
            name: format!("by id {id}"),
            source: Source::ById(id.clone()),
            journal: i % journals,
            resumes: i % 2 == 0,
        });
    }
    specs
}

/// One writer (actor) per id: atomic writes of 1-3 events, some pipelined (issued before the
/// previous is acknowledged), random pauses; an owner that deletes now and then.
async fn write_id(
    journal: Arc<dyn QueryStore>,
    pid: String,
    writes: u64,
    deletes: bool,
    mut rng: Rng,
    truth: SharedTruth,
) {
    let token = if deletes {
        journal
            .take_ownership(&pid)
            .await
            .expect("take ownership")
            .fencing_token
    } else {
        FencingToken::UNOWNED
    };
    let mut seq_nr = 0;
    let mut written = 0;
    while written < writes {
        tokio::time::sleep(rng.millis(6)).await;
        let pipelined = if rng.chance(20) { rng.range(2..=3) } else { 1 };
        let mut batch = Vec::new();
        for _ in 0..pipelined {
            // Now and then an atomic write larger than a query page (one timestamp).
            let size = if rng.chance(4) {
                rng.range(20..=60)
            } else {
                rng.range(1..=3)
            };
            let events: Vec<PersistentRepr> = (0..size)
                .map(|_| {
                    seq_nr += 1;
                    event(&pid, seq_nr, rng.chance(50))
                })
                .collect();
            batch.push(events);
        }
        written += pipelined;
        // Each atomic write its own call, all issued at once (queued in this order).
        let calls = batch.iter().map(|events| {
            let write = AtomicWrite::new(events.clone())
                .expect("shape")
                .with_fencing_token(token);
            journal.write_messages(vec![write])
        });
        let results = futures::future::join_all(calls).await;
        for (events, result) in batch.iter().zip(results) {
            let result = result.expect("write_messages");
            assert!(
                result[0].is_ok(),
                "write of {pid} {}: {:?}",
                events[0].seq_nr,
                result[0]
            );
            record_stored(&truth, events);
        }
        if deletes && rng.chance(12) {
            let to = rng.range(1..=seq_nr);
            journal
                .delete_messages_to(&pid, to, token)
                .await
                .expect("delete");
            let now = Instant::now();
            let mut truth = truth.lock().unwrap();
            let keys: Vec<Key> = truth
                .stored
                .range((pid.clone(), 0)..=(pid.clone(), to))
                .map(|(key, _)| key.clone())
                .collect();
            for key in keys {
                truth.deleted.entry(key).or_insert(now);
            }
        }
    }
}

/// Everything a run checks at the end, over what each consumer delivered.
fn check(
    seed: u64,
    window: Duration,
    specs: &[ConsumerSpec],
    consumed: &[Arc<Mutex<Consumed>>],
    truth: &Truth,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (spec, consumed) in specs.iter().zip(consumed) {
        let consumed = consumed.lock().unwrap();
        let name = &spec.name;
        for error in &consumed.errors {
            problems.push(format!("{name}: error {error}"));
        }
        let mut once = BTreeSet::new();
        let mut last: HashMap<&str, u64> = HashMap::new();
        for delivery in &consumed.deliveries {
            let (pid, seq_nr) = &delivery.key;
            if !once.insert(delivery.key.clone()) {
                problems.push(format!(
                    "{name}: {pid} {seq_nr} delivered twice (again in segment {})",
                    delivery.segment
                ));
            }
            if let Some(previous) = last.insert(pid, *seq_nr) {
                if previous >= *seq_nr {
                    problems.push(format!(
                        "{name}: {pid} {seq_nr} delivered after {previous} (segment {})",
                        delivery.segment
                    ));
                }
            }
            match truth.stored.get(&delivery.key) {
                None => problems.push(format!("{name}: {pid} {seq_nr} was never stored")),
                Some(tagged) if !spec.source.selects(pid, *tagged) => {
                    problems.push(format!("{name}: {pid} {seq_nr} is not of its filter"))
                }
                Some(_) => {}
            }
            if let Some(deleted) = truth.deleted.get(&delivery.key) {
                if *deleted < delivery.segment_start {
                    problems.push(format!(
                        "{name}: {pid} {seq_nr} delivered by a stream started after its delete"
                    ));
                }
            }
        }
        let missing: Vec<&Key> = truth
            .stored
            .iter()
            .filter(|((pid, _), tagged)| spec.source.selects(pid, **tagged))
            .map(|(key, _)| key)
            .filter(|key| !truth.deleted.contains_key(*key) && !once.contains(*key))
            .collect();
        if !missing.is_empty() && truth.longest_hold >= window {
            // Outside the contract (a machine too busy to commit within the window): said,
            // not failed.
            eprintln!(
                "seed {seed}: {name}: {} events missed after a transaction held {:?}, longer \
                 than the window {window:?}",
                missing.len(),
                truth.longest_hold
            );
        } else if !missing.is_empty() {
            problems.push(format!(
                "{name}: {} stored events never delivered, first {:?}",
                missing.len(),
                &missing[..missing.len().min(8)]
            ));
        }
    }
    if !problems.is_empty() {
        problems.insert(
            0,
            format!(
                "seed {seed} (QUERY_STRESS_SEED={seed}); longest held transaction {:?}",
                truth.longest_hold
            ),
        );
    }
    problems
}

/// The events of `source` still stored, each id's in order.
fn expected(truth: &Truth, source: &Source) -> BTreeSet<Key> {
    truth
        .stored
        .iter()
        .filter(|((pid, _), tagged)| source.selects(pid, **tagged))
        .map(|(key, _)| key.clone())
        .filter(|key| !truth.deleted.contains_key(key))
        .collect()
}

/// Whether `consumed` delivered every event of `expected`.
fn covers(consumed: &Consumed, expected: &BTreeSet<Key>) -> bool {
    let delivered: BTreeSet<&Key> = consumed.deliveries.iter().map(|d| &d.key).collect();
    expected.iter().all(|key| delivered.contains(key))
}

/// Current queries from the start and from sampled offsets of the live query over every slice.
async fn check_current(
    query: &ReadJournal,
    truth: &Truth,
    all_slices: &Consumed,
    within_window: bool,
    rng: &mut Rng,
) -> Vec<String> {
    let mut problems = Vec::new();
    for source in [Source::Slices(0..=1023), Source::Tag] {
        let stream = match &source {
            Source::Slices(_) => query.current_events_by_slices(ENTITY, 0, 1023, Offset::NoOffset),
            _ => query.current_events_by_tag(TAG, Offset::NoOffset),
        };
        let got: Vec<Key> = stream
            .map_ok(|e| (e.persistence_id.to_string(), e.seq_nr))
            .try_collect()
            .await
            .expect("current query");
        let set: BTreeSet<Key> = got.iter().cloned().collect();
        if set.len() != got.len() {
            problems.push(format!("current {source:?}: duplicates"));
        }
        let want = expected(truth, &source);
        if set != want {
            problems.push(format!(
                "current {source:?}: missing {:?}, extra {:?}",
                want.difference(&set).take(8).collect::<Vec<_>>(),
                set.difference(&want).take(8).collect::<Vec<_>>()
            ));
        }
    }
    // Resumed from the offset of delivery i: exactly what was not delivered up to i (and is
    // still stored).
    let deliveries = &all_slices.deliveries;
    if deliveries.is_empty() || !within_window {
        // (A live query that missed an event held past the window resumes without it.)
        return problems;
    }
    let want = expected(truth, &Source::Slices(0..=1023));
    for _ in 0..6 {
        let i = rng.range(0..=deliveries.len() as u64 - 1) as usize;
        let before: BTreeSet<&Key> = deliveries[..=i].iter().map(|d| &d.key).collect();
        let got: Vec<Key> = query
            .current_events_by_slices(ENTITY, 0, 1023, deliveries[i].offset.clone())
            .map_ok(|e| (e.persistence_id.to_string(), e.seq_nr))
            .try_collect()
            .await
            .expect("resumed current query");
        let got_set: BTreeSet<&Key> = got.iter().collect();
        let rest: BTreeSet<&Key> = want.iter().filter(|k| !before.contains(k)).collect();
        if got_set != rest || got_set.len() != got.len() {
            problems.push(format!(
                "current query resumed from delivery {i} of {}: missing {:?}, extra {:?}, {} \
                 duplicates",
                deliveries.len(),
                rest.difference(&got_set).take(8).collect::<Vec<_>>(),
                got_set.difference(&rest).take(8).collect::<Vec<_>>(),
                got.len() - got_set.len()
            ));
        }
    }
    problems
}

/// A writer outside the journals that keeps transactions open (a backend's own way).
type Outside = Box<
    dyn FnOnce(
            Rng,
            SharedTruth,
            Arc<std::sync::atomic::AtomicBool>,
        ) -> futures::future::BoxFuture<'static, ()>
        + Send,
>;

struct Run {
    seed: u64,
    journals: Vec<Arc<dyn QueryStore>>,
    settings: Settings,
    ids: usize,
    writes_per_id: u64,
    /// Writers beside the journals' (held transactions), run until the journals' writers end.
    outside: Vec<Outside>,
}

async fn run(run: Run) {
    let Run {
        seed,
        journals,
        settings,
        ids,
        writes_per_id,
        outside,
    } = run;
    eprintln!("query stress seed {seed} (QUERY_STRESS_SEED={seed})");
    let mut rng = Rng(seed);
    let truth = SharedTruth::default();
    let pids: Vec<String> = (0..ids).map(|i| format!("{ENTITY}|{i}")).collect();
    let by_id: Vec<String> = pids.iter().step_by(ids / 3).take(3).cloned().collect();
    let specs = consumers(journals.len(), &by_id);
    let queries: Vec<ReadJournal> = journals
        .iter()
        .map(|journal| {
            ReadJournal::from_arc(Arc::clone(journal), query_settings(&settings, &mut rng))
        })
        .collect();
    let mut consumed = Vec::new();
    let mut consumer_tasks = Vec::new();
    for spec in &specs {
        let out = Arc::new(Mutex::new(Consumed::default()));
        consumed.push(Arc::clone(&out));
        consumer_tasks.push(tokio::spawn(consume(
            spec.clone(),
            queries[spec.journal].clone(),
            rng.fork(),
            out,
        )));
    }
    let started = Instant::now();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let outside_tasks: Vec<_> = outside
        .into_iter()
        .map(|writer| tokio::spawn(writer(rng.fork(), Arc::clone(&truth), Arc::clone(&done))))
        .collect();
    let writers: Vec<_> = pids
        .iter()
        .enumerate()
        .map(|(i, pid)| {
            let journal = Arc::clone(&journals[i % journals.len()]);
            tokio::spawn(write_id(
                journal,
                pid.clone(),
                writes_per_id,
                i % 4 == 1,
                rng.fork(),
                Arc::clone(&truth),
            ))
        })
        .collect();
    for writer in writers {
        writer.await.expect("writer");
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    for writer in outside_tasks {
        writer.await.expect("outside writer");
    }
    let wrote = started.elapsed();
    // Every consumer gets its events (within the window and a few rounds; the wait ends as
    // soon as they are all in). The deadline only keeps a consumer that never gets one from
    // hanging the test: generous, so that a busy machine does not fail it.
    let deadline = Instant::now() + settings.window * 2 + Duration::from_secs(60);
    loop {
        let all = {
            let truth = truth.lock().unwrap();
            specs
                .iter()
                .zip(&consumed)
                .all(|(spec, c)| covers(&c.lock().unwrap(), &expected(&truth, &spec.source)))
        };
        if all || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Whatever would come twice comes by now (a settled pass over the last events).
    tokio::time::sleep(settings.window + settings.refresh * 4).await;
    for task in &consumer_tasks {
        task.abort();
    }
    let truth = std::mem::take(&mut *truth.lock().unwrap());
    let mut problems = check(seed, settings.window, &specs, &consumed, &truth);
    let deliveries: usize = consumed
        .iter()
        .map(|c| c.lock().unwrap().deliveries.len())
        .sum();
    let all_slices = std::mem::take(&mut *consumed[0].lock().unwrap());
    let within_window = truth.longest_hold < settings.window;
    problems.extend(check_current(&queries[0], &truth, &all_slices, within_window, &mut rng).await);
    eprintln!(
        "seed {seed}: {} events stored ({} deleted), {deliveries} deliveries to {} consumers, \
         writes took {wrote:?}, longest held transaction {:?}",
        truth.stored.len(),
        truth.deleted.len(),
        specs.len(),
        truth.longest_hold
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[cfg(feature = "test-util")]
mod postgres {
    use super::*;
    use actix_persistence_sql::test_util::TestDatabase;
    use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions};
    use sqlx::{Connection, PgConnection};
    use std::sync::atomic::{AtomicBool, Ordering};

    async fn journal(db: &TestDatabase, max_batch_size: u32) -> PostgresJournal {
        PostgresJournal::connect(&PostgresJournalOptions {
            max_connections: 6,
            max_batch_size,
            // Replays (and so queries by persistence id) read windows of a few sequence
            // numbers: an id's history spans many of them.
            replay_batch_size: 3,
            ..PostgresJournalOptions::new(db.url())
        })
        .await
        .expect("connect")
    }

    /// Holds the `journal_highest` row of a random journal-written id (`FOR UPDATE`) for a
    /// random time: the journal's insert of that id takes its timestamp, then waits for the
    /// lock, so its transaction (with group commit: every write of its batch) commits late.
    fn lock_holder(url: String, ids: usize, hold_max: Duration) -> Outside {
        Box::new(
            move |mut rng: Rng, truth: SharedTruth, done: Arc<AtomicBool>| {
                Box::pin(async move {
                    let mut conn = PgConnection::connect(&url).await.expect("connect");
                    while !done.load(Ordering::SeqCst) {
                        let pid = format!("{ENTITY}|{}", rng.range(0..=ids as u64 - 1));
                        let hold = rng.millis(hold_max.as_millis() as u64);
                        let started = Instant::now();
                        let mut tx = conn.begin().await.expect("begin");
                        sqlx::query(
                            "SELECT 1 FROM journal_highest WHERE persistence_id = $1 FOR UPDATE",
                        )
                        .bind(&pid)
                        .execute(&mut *tx)
                        .await
                        .expect("lock");
                        tokio::time::sleep(hold).await;
                        tx.commit().await.expect("commit");
                        record_hold(&truth, started.elapsed());
                        tokio::time::sleep(rng.millis(30)).await;
                    }
                })
            },
        )
    }

    /// Another process's writer of ids of its own (`Stress|raw-n`), one transaction at a time
    /// per id: inserts 1-2 events as the journal does, keeps the transaction open for a random
    /// time, then commits it (or rolls it back, and writes the numbers again).
    fn raw_writer(url: String, id: usize, hold_max: Duration) -> Outside {
        Box::new(
            move |mut rng: Rng, truth: SharedTruth, done: Arc<AtomicBool>| {
                Box::pin(async move {
                    let pid = format!("{ENTITY}|raw-{id}");
                    let mut conn = PgConnection::connect(&url).await.expect("connect");
                    let mut seq_nr = 0;
                    while !done.load(Ordering::SeqCst) {
                        let events: Vec<PersistentRepr> = (0..rng.range(1..=2))
                            .map(|i| event(&pid, seq_nr + 1 + i, rng.chance(50)))
                            .collect();
                        let hold = rng.millis(hold_max.as_millis() as u64);
                        let mut tx = conn.begin().await.expect("begin");
                        let started = Instant::now();
                        for e in &events {
                            sqlx::query(
                                "INSERT INTO journal (persistence_id, seq_nr, writer_uuid, \
                                 write_timestamp, serializer_id, manifest, payload, tags, \
                                 db_timestamp, slice, entity_type) \
                             VALUES ($1, $2, 'raw', 0, 1, '', $3, $4, \
                                 (extract(epoch from statement_timestamp()) * 1000000)::bigint, \
                                 $5, $6)",
                            )
                            .bind(&*e.persistence_id)
                            .bind(e.seq_nr as i64)
                            .bind(&e.payload)
                            .bind(e.tags.as_slice())
                            .bind(i32::from(slice_for_persistence_id(&pid)))
                            .bind(entity_type_of(&pid))
                            .execute(&mut *tx)
                            .await
                            .expect("insert");
                        }
                        tokio::time::sleep(hold).await;
                        if rng.chance(10) {
                            tx.rollback().await.expect("roll back");
                        } else {
                            tx.commit().await.expect("commit");
                            record_hold(&truth, started.elapsed());
                            record_stored(&truth, &events);
                            seq_nr += events.len() as u64;
                        }
                        tokio::time::sleep(rng.millis(10)).await;
                    }
                })
            },
        )
    }

    async fn stress(seed: u64, batch_sizes: &[u32], raw_writers: usize) {
        let Some(db) = TestDatabase::create().await else {
            return;
        };
        let window = Duration::from_millis(1000);
        let hold_max = window / 2;
        let mut journals = Vec::new();
        let mut closing = Vec::new();
        for size in batch_sizes {
            let journal = journal(&db, *size).await;
            closing.push(journal.clone());
            journals.push(Arc::new(journal) as Arc<dyn QueryStore>);
        }
        let ids = 30;
        let mut outside = vec![lock_holder(db.url().to_owned(), ids, hold_max)];
        for id in 0..raw_writers {
            // Up to 70% of the window: commits near its end are within the contract too.
            outside.push(raw_writer(db.url().to_owned(), id, window * 7 / 10));
        }
        run(Run {
            seed,
            journals,
            settings: Settings {
                window,
                refresh: Duration::from_millis(40),
            },
            ids,
            writes_per_id: 14,
            outside,
        })
        .await;
        for journal in closing {
            journal.close().await;
        }
    }

    /// Three journals on one database (two with group commit, one with a transaction per
    /// write), a lock holder delaying their commits, three raw writers holding transactions.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(has_database_url),
        ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
    )]
    async fn postgres_journals_and_held_transactions_deliver_every_event_once() {
        let _one = one_at_a_time().await;
        for seed in seeds(0x5EED_0001) {
            stress(seed, &[512, 1, 8], 3).await;
        }
    }

    /// One journal with group commit only (its transactions overlap), delayed by the lock
    /// holder, and raw writers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(has_database_url),
        ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
    )]
    async fn postgres_group_commit_under_held_locks_delivers_every_event_once() {
        let _one = one_at_a_time().await;
        for seed in seeds(0x5EED_0002) {
            stress(seed, &[512], 2).await;
        }
    }

    /// Two journals of one transaction per write each.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(has_database_url),
        ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
    )]
    async fn postgres_transactions_per_write_deliver_every_event_once() {
        let _one = one_at_a_time().await;
        for seed in seeds(0x5EED_0003) {
            stress(seed, &[1, 1], 2).await;
        }
    }
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions};
    use sqlx::{Connection, SqliteConnection};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Another process's writer of ids of its own on the file: takes the write lock, inserts
    /// 1-2 events as the journal does (the wall clock, never below the journal's floor), keeps
    /// the transaction open for a random time (every other writer of the file waits), commits
    /// or rolls back.
    fn raw_writer(url: String, id: usize, hold_max: Duration) -> Outside {
        Box::new(
            move |mut rng: Rng, truth: SharedTruth, done: Arc<AtomicBool>| {
                Box::pin(async move {
                    let pid = format!("{ENTITY}|raw-{id}");
                    let mut conn = SqliteConnection::connect(&url).await.expect("connect");
                    sqlx::query("PRAGMA busy_timeout = 5000")
                        .execute(&mut conn)
                        .await
                        .expect("busy timeout");
                    let mut seq_nr = 0;
                    while !done.load(Ordering::SeqCst) {
                        let events: Vec<PersistentRepr> = (0..rng.range(1..=2))
                            .map(|i| event(&pid, seq_nr + 1 + i, rng.chance(50)))
                            .collect();
                        let hold = rng.millis(hold_max.as_millis() as u64);
                        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.expect("begin");
                        let started = Instant::now();
                        for e in &events {
                            let tags = if e.tags.is_empty() {
                                "[]".to_owned()
                            } else {
                                format!("[\"{TAG}\"]")
                            };
                            sqlx::query(
                                "INSERT INTO journal (persistence_id, seq_nr, writer_uuid, \
                                 write_timestamp, serializer_id, manifest, payload, tags, \
                                 db_timestamp, slice, entity_type) \
                             VALUES ($1, $2, 'raw', 0, 1, '', $3, $4, \
                                 max($5, COALESCE((SELECT max(db_timestamp) FROM journal), 0), \
                                     COALESCE((SELECT last_timestamp FROM journal_clock \
                                               WHERE id = 0), 0)), \
                                 $6, $7)",
                            )
                            .bind(&*e.persistence_id)
                            .bind(e.seq_nr as i64)
                            .bind(&e.payload)
                            .bind(tags)
                            .bind(actix_persistence_core::query::wall_clock_micros())
                            .bind(i32::from(slice_for_persistence_id(&pid)))
                            .bind(entity_type_of(&pid))
                            .execute(&mut *tx)
                            .await
                            .expect("insert");
                        }
                        tokio::time::sleep(hold).await;
                        if rng.chance(10) {
                            tx.rollback().await.expect("roll back");
                        } else {
                            tx.commit().await.expect("commit");
                            record_hold(&truth, started.elapsed());
                            record_stored(&truth, &events);
                            seq_nr += events.len() as u64;
                        }
                        tokio::time::sleep(rng.millis(40)).await;
                    }
                })
            },
        )
    }

    /// Two journals on one file (two processes: one with group commit, one with a transaction
    /// per write), and a raw writer holding the write lock now and then.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_two_journals_on_one_file_deliver_every_event_once() {
        let _one = one_at_a_time().await;
        for seed in seeds(0x5EED_0101) {
            let dir = tempfile::tempdir().expect("temporary directory");
            let url = format!("sqlite:{}", dir.path().join("journal.db").display());
            let mut journals = Vec::new();
            let mut closing = Vec::new();
            for size in [512, 1] {
                let journal = SqliteJournal::connect(&SqliteJournalOptions {
                    max_batch_size: size,
                    replay_batch_size: 3,
                    ..SqliteJournalOptions::new(&url)
                })
                .await
                .expect("connect");
                closing.push(journal.clone());
                journals.push(Arc::new(journal) as Arc<dyn QueryStore>);
            }
            let window = Duration::from_millis(600);
            run(Run {
                seed,
                journals,
                settings: Settings {
                    window,
                    refresh: Duration::from_millis(40),
                },
                ids: 30,
                writes_per_id: 14,
                outside: vec![raw_writer(url.clone(), 0, window / 6)],
            })
            .await;
            for journal in closing {
                journal.close().await;
            }
        }
    }
}

/// One id written an event at a time, as fast as the journal takes them, while a live query by
/// persistence id runs and current queries by persistence id are read again and again, over a
/// journal whose replays read windows of two sequence numbers: the live query delivers every
/// event once, in order, and each current query a prefix without gaps. (A replay read up to
/// `MAX_SEQ_NR` took a window that came back short for a hole and read the next window later,
/// after the missing events had committed: it went on past them, and the live query after it.)
async fn by_persistence_id_skips_nothing(journal: Arc<dyn QueryStore>) {
    let events = 300u64;
    let pid = format!("{ENTITY}|one");
    let settings = QuerySettings {
        refresh_interval: Duration::from_millis(10),
        late_commit_window: Duration::from_millis(500),
        page_size: 1000,
        read_ahead_pages: 1,
    };
    let query = ReadJournal::from_arc(Arc::clone(&journal), settings);
    let mut live = query.events_by_persistence_id(&pid, 1, MAX_SEQ_NR);
    let writer = tokio::spawn({
        let (journal, pid) = (Arc::clone(&journal), pid.clone());
        async move {
            for seq_nr in 1..=events {
                let write = AtomicWrite::new(vec![event(&pid, seq_nr, false)]).expect("shape");
                let result = journal.write_messages(vec![write]).await.expect("write");
                assert!(result[0].is_ok(), "{:?}", result[0]);
            }
        }
    });
    let current = tokio::spawn({
        let (query, pid) = (query.clone(), pid.clone());
        async move {
            let mut gaps = Vec::new();
            for _ in 0..60 {
                let got: Vec<u64> = query
                    .current_events_by_persistence_id(&pid, 1, MAX_SEQ_NR)
                    .map_ok(|e| e.seq_nr)
                    .try_collect()
                    .await
                    .expect("current query");
                if got.iter().enumerate().any(|(i, s)| *s != i as u64 + 1) {
                    gaps.push(got);
                }
                tokio::task::yield_now().await;
            }
            gaps
        }
    });
    let mut delivered = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while delivered.last() != Some(&events) {
        match tokio::time::timeout_at(deadline, live.next()).await {
            Ok(Some(Ok(envelope))) => delivered.push(envelope.seq_nr),
            Ok(other) => panic!("the live query ended: {other:?}"),
            Err(_) => break,
        }
    }
    writer.await.expect("writer");
    let gaps = current.await.expect("current queries");
    let expected: Vec<u64> = (1..=events).collect();
    let skipped: Vec<u64> = expected
        .iter()
        .copied()
        .filter(|s| !delivered.contains(s))
        .collect();
    assert!(
        delivered == expected,
        "the live query by persistence id skipped {skipped:?} ({} delivered)",
        delivered.len()
    );
    assert!(
        gaps.is_empty(),
        "{} current queries by persistence id had gaps, first {:?}",
        gaps.len(),
        gaps.first()
    );
}

#[cfg(feature = "test-util")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn postgres_query_by_persistence_id_skips_no_event_committed_between_its_windows() {
    use actix_persistence_sql::test_util::TestDatabase;
    use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions};
    let _one = one_at_a_time().await;
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    let journal = PostgresJournal::connect(&PostgresJournalOptions {
        max_connections: 6,
        max_batch_size: 1,
        replay_batch_size: 2,
        ..PostgresJournalOptions::new(db.url())
    })
    .await
    .expect("connect");
    by_persistence_id_skips_nothing(Arc::new(journal.clone())).await;
    journal.close().await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_query_by_persistence_id_skips_no_event_committed_between_its_windows() {
    use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions};
    let _one = one_at_a_time().await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let url = format!("sqlite:{}", dir.path().join("journal.db").display());
    let journal = SqliteJournal::connect(&SqliteJournalOptions {
        max_batch_size: 1,
        replay_batch_size: 2,
        ..SqliteJournalOptions::new(&url)
    })
    .await
    .expect("connect");
    by_persistence_id_skips_nothing(Arc::new(journal.clone())).await;
    journal.close().await;
}
