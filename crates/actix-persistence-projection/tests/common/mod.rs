//! Shared helpers of the projection tests: events in an in-memory journal, sources over it,
//! recording and gated handlers.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_persistence_core::query::{EventEnvelope, QuerySettings, ReadJournal};
use actix_persistence_core::{AtomicWrite, InMemoryJournal, JournalStore, PersistentRepr};
use actix_persistence_projection::{
    AfterRetries, GroupedHandler, Handler, HandlerError, HandlerRecovery, QuerySource,
    RestartBackoff,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

/// The event of the tests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deposited {
    pub amount: u64,
}

pub type Env = EventEnvelope<Deposited>;

/// Query settings for fast tests: short poll interval and late-commit window.
pub fn query_settings() -> QuerySettings {
    QuerySettings {
        refresh_interval: Duration::from_millis(20),
        late_commit_window: Duration::from_millis(50),
        page_size: 50,
        ..QuerySettings::default()
    }
}

pub fn read_journal(journal: &InMemoryJournal) -> ReadJournal {
    ReadJournal::new(journal.clone(), query_settings())
}

/// The persistence id `Account|<n>`.
pub fn pid(n: usize) -> String {
    format!("Account|{n}")
}

pub fn repr(pid: &str, seq_nr: u64, amount: u64) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload: serde_json::to_vec(&Deposited { amount }).expect("json"),
        serializer_id: actix_persistence_core::serialization::JSON_SERIALIZER_ID,
        manifest: String::new(),
        writer_uuid: "writer".into(),
        timestamp: 1_700_000_000_000 + seq_nr as i64,
        tags: vec!["account".to_owned()].into(),
    }
}

/// Writes events `from..=to` of `pid` (amount = seq_nr), one atomic write each.
pub async fn write_events(journal: &impl JournalStore, pid: &str, from: u64, to: u64) {
    for seq_nr in from..=to {
        let results = journal
            .write_messages(vec![
                AtomicWrite::new(vec![repr(pid, seq_nr, seq_nr)]).expect("shape")
            ])
            .await
            .expect("write");
        results[0].as_ref().expect("stored");
    }
}

/// Writes `per_id` events for each of `ids` persistence ids, interleaved.
pub async fn write_many(journal: &impl JournalStore, ids: usize, per_id: u64) {
    for seq_nr in 1..=per_id {
        for n in 0..ids {
            write_events(journal, &pid(n), seq_nr, seq_nr).await;
        }
    }
}

/// All slices of entity type `Account`, live.
pub fn live_source(journal: &InMemoryJournal) -> QuerySource<Deposited> {
    QuerySource::events_by_slices(read_journal(journal), "Account", 0, 1023)
}

/// All slices of entity type `Account`, ending at what is stored.
pub fn current_source(journal: &InMemoryJournal) -> QuerySource<Deposited> {
    live_source(journal).current()
}

/// Slices `min_slice..=max_slice` of entity type `Account`, ending at what is stored.
pub fn current_slices(
    journal: &InMemoryJournal,
    min_slice: u16,
    max_slice: u16,
) -> QuerySource<Deposited> {
    QuerySource::events_by_slices(read_journal(journal), "Account", min_slice, max_slice).current()
}

/// Fast restarts for tests.
pub fn quick_restarts() -> RestartBackoff {
    RestartBackoff {
        min: Duration::from_millis(5),
        max: Duration::from_millis(20),
        random_factor: 0.0,
        max_restarts: None,
    }
}

/// Retries without waiting, then `then`.
pub fn quick_recovery(retries: u32, then: AfterRetries) -> HandlerRecovery {
    HandlerRecovery {
        retries,
        min_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(2),
        then,
    }
}

/// Every (persistence id, seq_nr) handled, in the order handled.
#[derive(Clone, Default)]
pub struct Recorder {
    pub handled: Arc<Mutex<Vec<(String, u64)>>>,
}

impl Recorder {
    pub fn handled(&self) -> Vec<(String, u64)> {
        self.handled.lock().expect("lock").clone()
    }

    /// How many times each (persistence id, seq_nr) was handled.
    pub fn counts(&self) -> HashMap<(String, u64), usize> {
        let mut counts = HashMap::new();
        for key in self.handled() {
            *counts.entry(key).or_insert(0) += 1;
        }
        counts
    }

    /// Per persistence id, the seq_nrs in the order handled.
    pub fn by_pid(&self) -> HashMap<String, Vec<u64>> {
        let mut by_pid: HashMap<String, Vec<u64>> = HashMap::new();
        for (pid, seq_nr) in self.handled() {
            by_pid.entry(pid).or_default().push(seq_nr);
        }
        by_pid
    }

    fn record(&self, envelope: &Env) {
        self.handled
            .lock()
            .expect("lock")
            .push((envelope.persistence_id.to_string(), envelope.seq_nr));
    }
}

#[async_trait]
impl Handler<Env> for Recorder {
    async fn process(&self, envelope: &Env) -> Result<(), HandlerError> {
        self.record(envelope);
        Ok(())
    }
}

/// Records the size of each group and its envelopes.
#[derive(Clone, Default)]
pub struct GroupRecorder {
    pub recorder: Recorder,
    pub sizes: Arc<Mutex<Vec<usize>>>,
}

#[async_trait]
impl GroupedHandler<Env> for GroupRecorder {
    async fn process(&self, envelopes: &[Env]) -> Result<(), HandlerError> {
        self.sizes.lock().expect("lock").push(envelopes.len());
        for envelope in envelopes {
            self.recorder.record(envelope);
        }
        Ok(())
    }
}

/// A handler whose calls wait for a permit the test hands out, and that records how many calls
/// run at once and which started.
#[derive(Clone)]
pub struct Gated {
    pub permits: Arc<Semaphore>,
    pub started: Recorder,
    pub finished: Recorder,
    pub running: Arc<Mutex<(usize, usize)>>,
    /// Envelopes that pass without a permit: (persistence id, seq_nr).
    pub free: Arc<Mutex<Vec<(String, u64)>>>,
}

impl Default for Gated {
    fn default() -> Self {
        Gated {
            permits: Arc::new(Semaphore::new(0)),
            started: Recorder::default(),
            finished: Recorder::default(),
            running: Arc::new(Mutex::new((0, 0))),
            free: Arc::default(),
        }
    }
}

impl Gated {
    /// Calls running now, and the most ever running at once.
    pub fn running(&self) -> (usize, usize) {
        *self.running.lock().expect("lock")
    }

    pub fn release(&self, n: usize) {
        self.permits.add_permits(n);
    }
}

#[async_trait]
impl Handler<Env> for Gated {
    async fn process(&self, envelope: &Env) -> Result<(), HandlerError> {
        self.started.record(envelope);
        {
            let mut running = self.running.lock().expect("lock");
            running.0 += 1;
            running.1 = running.1.max(running.0);
        }
        let key = (envelope.persistence_id.to_string(), envelope.seq_nr);
        let free = self.free.lock().expect("lock").contains(&key);
        if !free {
            self.permits.acquire().await.expect("open").forget();
        }
        self.running.lock().expect("lock").0 -= 1;
        self.finished.record(envelope);
        Ok(())
    }
}

/// Polls `condition` (yielding to the runtime) until it holds; panics after many rounds.
pub async fn eventually(mut condition: impl FnMut() -> bool) {
    for _ in 0..100_000 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("condition never held");
}

/// Lets the first `free` calls through, then each call waits for a permit the test hands out
/// (for handlers of any form: call [`pass`](Self::pass) inside them).
#[derive(Clone)]
pub struct CallGate {
    free: usize,
    calls: Arc<std::sync::atomic::AtomicUsize>,
    waiting: Arc<std::sync::atomic::AtomicUsize>,
    permits: Arc<Semaphore>,
}

impl CallGate {
    pub fn new(free: usize) -> Self {
        CallGate {
            free,
            calls: Arc::default(),
            waiting: Arc::default(),
            permits: Arc::new(Semaphore::new(0)),
        }
    }

    pub async fn pass(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        if self.calls.fetch_add(1, SeqCst) >= self.free {
            self.waiting.fetch_add(1, SeqCst);
            self.permits.acquire().await.expect("open").forget();
            self.waiting.fetch_sub(1, SeqCst);
        }
    }

    /// Calls waiting for a permit now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn release(&self, n: usize) {
        self.permits.add_permits(n);
    }
}

/// The fencing contract of an offset store: once a newer instance took ownership of an id,
/// every write of the older epoch stores nothing and fails with `Fenced`.
pub async fn offset_store_fences_older_owners<S>(store: &S)
where
    S: actix_persistence_projection::TransactionalOffsetStore,
{
    use actix_persistence_projection::{OffsetStoreError, ProjectionId};
    fn is_fenced<T: std::fmt::Debug>(result: Result<T, OffsetStoreError>, held: u64) -> bool {
        matches!(result, Err(OffsetStoreError::Fenced { epoch, .. }) if epoch == held)
    }
    let id = ProjectionId::for_slices("fenced", 0, 1023);
    let old = store.take_ownership(&id, None).await.unwrap();
    store.save_offset(&id, old, "1", &[]).await.unwrap();
    let new = store.take_ownership(&id, None).await.unwrap();
    assert!(new > old, "a start raises the epoch");

    assert!(is_fenced(store.save_offset(&id, old, "2", &[]).await, old));
    let mut tx = store.begin(&id).await.unwrap();
    assert!(is_fenced(
        store.save_in(&mut tx, &id, old, Some("3"), &[]).await,
        old
    ));
    store.rollback(tx, &id).await.unwrap();
    let mut tx = store.begin(&id).await.unwrap();
    assert!(is_fenced(
        store
            .save_in(&mut tx, &id, old, None, &[("p".into(), 9)])
            .await,
        old
    ));
    store.rollback(tx, &id).await.unwrap();
    // The older instance restarting learns it was taken over.
    assert!(is_fenced(store.take_ownership(&id, Some(old)).await, old));
    assert_eq!(store.read_offset(&id).await.unwrap().as_deref(), Some("1"));
    assert!(store.read_seen(&id).await.unwrap().is_empty());

    // The owner writes; its own restart keeps ownership and fences its older epoch.
    store.save_offset(&id, new, "4", &[]).await.unwrap();
    let again = store.take_ownership(&id, Some(new)).await.unwrap();
    assert_eq!(again, new + 1);
    assert!(is_fenced(store.save_offset(&id, new, "5", &[]).await, new));
    let mut tx = store.begin(&id).await.unwrap();
    store
        .save_in(&mut tx, &id, again, Some("6"), &[("p".into(), 9)])
        .await
        .unwrap();
    store.commit(tx, &id).await.unwrap();
    assert_eq!(store.read_offset(&id).await.unwrap().as_deref(), Some("6"));
    assert_eq!(store.read_seen(&id).await.unwrap()["p"], 9);

    // A reset keeps the owner; another id is not fenced by this one.
    store.reset(&id).await.unwrap();
    store.save_offset(&id, again, "7", &[]).await.unwrap();
    let other = ProjectionId::for_slices("fenced", 0, 511);
    let first = store.take_ownership(&other, None).await.unwrap();
    assert_eq!(first, 1);
    store.save_offset(&other, first, "8", &[]).await.unwrap();
    assert_eq!(store.read_offset(&id).await.unwrap().as_deref(), Some("7"));
}

/// The bounded seen rows of an offset store: an offset save forgets, in its own transaction,
/// the seen rows it covers (seq_nr at most the covered one), keeps the rows of envelopes
/// handled past it, and a fenced save forgets nothing.
pub async fn offset_store_forgets_the_seen_rows_its_offset_covers<S>(store: &S)
where
    S: actix_persistence_projection::TransactionalOffsetStore,
{
    use actix_persistence_projection::{OffsetStoreError, ProjectionId};
    let id = ProjectionId::for_slices("forget", 0, 1023);
    let epoch = store.take_ownership(&id, None).await.unwrap();
    let mut tx = store.begin(&id).await.unwrap();
    let seen = [
        ("p".to_owned(), 5),
        ("q".to_owned(), 2),
        ("r".to_owned(), 7),
        ("s".to_owned(), 1),
    ];
    store
        .save_in(&mut tx, &id, epoch, None, &seen)
        .await
        .unwrap();
    store.commit(tx, &id).await.unwrap();
    // Another projection's rows are not touched.
    let other = ProjectionId::for_slices("forget", 0, 511);
    let other_epoch = store.take_ownership(&other, None).await.unwrap();
    let mut tx = store.begin(&other).await.unwrap();
    store
        .save_in(&mut tx, &other, other_epoch, None, &[("p".to_owned(), 1)])
        .await
        .unwrap();
    store.commit(tx, &other).await.unwrap();

    // p and q covered (q below its covered seq_nr), r handled past the offset (7 > 6), s not
    // in this save, t never seen.
    let covered = [
        ("p".to_owned(), 5),
        ("q".to_owned(), 3),
        ("r".to_owned(), 6),
        ("t".to_owned(), 4),
    ];
    store.save_offset(&id, epoch, "1", &covered).await.unwrap();
    let mut left: Vec<(String, u64)> = store.read_seen(&id).await.unwrap().into_iter().collect();
    left.sort();
    assert_eq!(left, vec![("r".to_owned(), 7), ("s".to_owned(), 1)]);
    assert_eq!(store.read_offset(&id).await.unwrap().as_deref(), Some("1"));
    assert_eq!(store.read_seen(&other).await.unwrap()["p"], 1);

    // A fenced save stores nothing and forgets nothing.
    let newer = store.take_ownership(&id, None).await.unwrap();
    let fenced = store
        .save_offset(&id, epoch, "2", &[("r".to_owned(), 9), ("s".to_owned(), 1)])
        .await;
    assert!(matches!(fenced, Err(OffsetStoreError::Fenced { .. })));
    assert_eq!(store.read_seen(&id).await.unwrap().len(), 2);
    assert_eq!(store.read_offset(&id).await.unwrap().as_deref(), Some("1"));

    // The owner's next save covers the rest.
    store
        .save_offset(&id, newer, "3", &[("r".to_owned(), 8), ("s".to_owned(), 1)])
        .await
        .unwrap();
    assert!(store.read_seen(&id).await.unwrap().is_empty());
}

/// `per_range` persistence ids `Account|<n>` in each of the `ranges` slice ranges of
/// `slice_ranges(ranges)`, range by range.
pub fn ids_in_every_range(ranges: u16, per_range: usize) -> Vec<String> {
    use actix_persistence_projection::{slice_for_persistence_id, slice_ranges};
    slice_ranges(ranges)
        .into_iter()
        .flat_map(|range| {
            (0..)
                .map(|k| format!("Account|{}", k * 7919))
                .filter(move |id| range.contains(&slice_for_persistence_id(id)))
                .take(per_range)
        })
        .collect()
}

/// Fails every call on one (persistence id, seq_nr): a handler that cannot handle it yet.
#[derive(Clone, Default)]
pub struct Poison(pub Option<(String, u64)>);

impl Poison {
    /// An error when `envelope` is the poisoned one.
    pub fn check(&self, envelope: &Env) -> Result<(), HandlerError> {
        match &self.0 {
            Some((pid, seq_nr))
                if **pid == *envelope.persistence_id && *seq_nr == envelope.seq_nr =>
            {
                Err(format!("{pid} {seq_nr} cannot be handled yet").into())
            }
            _ => Ok(()),
        }
    }
}

/// Rescaling: an exactly-once projection split over 4 slice ranges, then 2, then 8, then 4
/// again (the 4 keys' offsets are older than the 2 and 8 that followed), with events written
/// between the phases. In the first phase one range crashes with an envelope it cannot
/// handle while 4 calls run at once: its offset stays before it, and the envelopes after it
/// that were committed are known by their seen rows only. Every instance resumes each of its
/// slices from the most advanced progress stored for it: every event is handled exactly once.
///
/// `source(min, max)` is a current source over the slices; `handler(poison)` the store's
/// exactly-once handler; `handled()` every (persistence id, seq_nr) committed so far.
pub async fn a_rescaled_projection_resumes_every_slice_from_its_own_progress<J, S, H, F>(
    journal: &J,
    source: impl Fn(u16, u16) -> QuerySource<Deposited>,
    store: S,
    handler: impl Fn(Poison) -> H,
    handled: impl Fn() -> F,
) where
    J: JournalStore,
    S: actix_persistence_projection::TransactionalOffsetStore + Clone,
    H: actix_persistence_projection::TransactionalHandler<Env, S::Transaction>,
    F: std::future::Future<Output = Vec<(String, u64)>>,
{
    use actix_persistence_projection::{
        slice_for_persistence_id, slice_ranges, Projection, ProjectionId, ProjectionState,
        SaveOffset,
    };
    let ids = ids_in_every_range(4, 8);
    let run = |min: u16, max: u16, concurrency: usize, poison: Poison| {
        Projection::exactly_once(
            ProjectionId::for_slices("rescaled", min, max),
            source(min, max),
            store.clone(),
            handler(poison),
        )
        .with_max_concurrency(concurrency)
        .with_save_offset(SaveOffset {
            after_envelopes: 1,
            after: Duration::from_millis(1),
        })
        .with_handler_recovery(quick_recovery(u32::MAX, AfterRetries::Fail))
        .start()
    };
    let mut written = 0;
    let mut write = |to: u64| {
        let from = written + 1;
        written = to;
        let ids = &ids;
        async move {
            for seq_nr in from..=to {
                for id in ids {
                    write_events(journal, id, seq_nr, seq_nr).await;
                }
            }
        }
    };

    // 4 ranges: the first three handle everything; the last one crashes stuck at its second
    // id's first event, after committing envelopes behind it.
    write(2).await;
    let ranges = slice_ranges(4);
    for range in &ranges[..3] {
        let state = run(*range.start(), *range.end(), 1, Poison::default())
            .join()
            .await;
        assert_eq!(state, ProjectionState::Completed);
    }
    let last = &ranges[3];
    let in_last: Vec<&String> = ids
        .iter()
        .filter(|id| last.contains(&slice_for_persistence_id(id)))
        .collect();
    let stuck = run(
        *last.start(),
        *last.end(),
        4,
        Poison(Some((in_last[1].to_string(), 1))),
    );
    stuck
        .wait_for(|p| p.handled >= 4)
        .await
        .expect("handles the first envelope and some behind the stuck one");
    stuck.abort().await;

    // 2 ranges, then 8, then the 4 again: events written before each phase.
    let phases: [(u64, u16, usize); 3] = [(4, 2, 2), (6, 8, 1), (8, 4, 3)];
    for (to, instances, concurrency) in phases {
        write(to).await;
        for range in slice_ranges(instances) {
            let state = run(*range.start(), *range.end(), concurrency, Poison::default())
                .join()
                .await;
            assert_eq!(
                state,
                ProjectionState::Completed,
                "{range:?} of {instances}"
            );
        }
    }

    let mut got = handled().await;
    got.sort();
    let mut expected: Vec<(String, u64)> = ids
        .iter()
        .flat_map(|id| (1..=8).map(move |seq_nr| (id.clone(), seq_nr)))
        .collect();
    expected.sort();
    let twice: Vec<_> = got
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0].clone())
        .collect();
    assert!(
        twice.is_empty(),
        "{} handled twice, first {:?}",
        twice.len(),
        &twice[..twice.len().min(4)]
    );
    assert_eq!(got, expected);
}

/// An exactly-once handler over the in-memory offset store: records each envelope when its
/// transaction commits; fails on the poisoned one.
#[derive(Clone, Default)]
pub struct CommittedRecorder {
    pub poison: Poison,
    pub committed: Recorder,
}

#[async_trait]
impl
    actix_persistence_projection::TransactionalHandler<
        Env,
        actix_persistence_projection::InMemoryTransaction,
    > for CommittedRecorder
{
    async fn process(
        &self,
        tx: &mut actix_persistence_projection::InMemoryTransaction,
        envelope: &Env,
    ) -> Result<(), HandlerError> {
        self.poison.check(envelope)?;
        let committed = self.committed.clone();
        let envelope = envelope.clone();
        tx.on_commit(move || committed.record(&envelope));
        Ok(())
    }
}

/// Resuming inside one timestamp: three ids with 20 events each, stored by one call (one
/// database timestamp on the stores here; more events than a query page), handled by an
/// exactly-once projection that crashes (stuck on one envelope, then aborted) at the cut
/// points around the first page's end and the ids' boundaries. Before the restart the events
/// of the ids handled completely are deleted, so the stored offset's seen entries point at
/// events (and a persistence id) that no longer exist. Each restart handles exactly the rest.
///
/// `source(entity_type)` is a current source over all slices of `entity_type`; `handler(poison)` the store's exactly-once
/// handler; `handled()` every (persistence id, seq_nr) committed so far.
pub async fn a_projection_resumes_inside_one_timestamp<J, S, H, F>(
    journal: &J,
    source: impl Fn(&str) -> QuerySource<Deposited>,
    store: S,
    handler: impl Fn(Poison) -> H,
    handled: impl Fn() -> F,
) where
    J: JournalStore,
    S: actix_persistence_projection::TransactionalOffsetStore + Clone,
    H: actix_persistence_projection::TransactionalHandler<Env, S::Transaction>,
    F: std::future::Future<Output = Vec<(String, u64)>>,
{
    use actix_persistence_projection::{Projection, ProjectionId, ProjectionState};
    let cuts = [1, 19, 20, 21, 49, 50, 51, 59];
    for (round, cut) in cuts.into_iter().enumerate() {
        // An entity type of its own per round: the source holds this round's events only.
        let entity_type = format!("Round{round}");
        let ids: Vec<String> = (0..3).map(|n| format!("{entity_type}|{n}")).collect();
        let writes = ids
            .iter()
            .map(|id| AtomicWrite::new((1..=20).map(|n| repr(id, n, n)).collect()).expect("shape"))
            .collect();
        let results = journal.write_messages(writes).await.expect("write");
        assert!(results.iter().all(Result::is_ok));
        let mine = |all: Vec<(String, u64)>| -> Vec<(String, u64)> {
            let mut mine: Vec<_> = all.into_iter().filter(|(id, _)| ids.contains(id)).collect();
            mine.sort();
            mine
        };
        let id = ProjectionId::new("one-timestamp", format!("round-{round}"));
        let stuck_at = (ids[cut / 20].clone(), (cut % 20) as u64 + 1);
        let stuck = Projection::exactly_once(
            id.clone(),
            source(&entity_type),
            store.clone(),
            handler(Poison(Some(stuck_at))),
        )
        .with_handler_recovery(quick_recovery(u32::MAX, AfterRetries::Fail))
        .start();
        stuck
            .wait_for(|p| p.handled >= cut as u64)
            .await
            .expect("handles up to the cut");
        stuck.abort().await;
        assert_eq!(
            mine(handled().await).len(),
            cut,
            "cut {cut}: before the crash"
        );
        for done in &ids[..cut / 20] {
            journal
                .delete_messages_to(done, 20, actix_persistence_core::FencingToken::UNOWNED)
                .await
                .expect("delete");
        }
        let state = Projection::exactly_once(
            id,
            source(&entity_type),
            store.clone(),
            handler(Poison::default()),
        )
        .start()
        .join()
        .await;
        assert_eq!(state, ProjectionState::Completed);
        let mut expected: Vec<(String, u64)> = ids
            .iter()
            .flat_map(|id| (1..=20).map(move |n| (id.clone(), n)))
            .collect();
        expected.sort();
        assert_eq!(mine(handled().await), expected, "cut {cut}");
    }
}

/// `OffsetStore::read_progress`: every key of one projection name with what it stored (an
/// offset, seen sequence numbers, or both), a key with seen rows only included, other names
/// and reset keys left out.
pub async fn offset_store_lists_the_progress_of_every_key<S>(store: &S)
where
    S: actix_persistence_projection::TransactionalOffsetStore,
{
    use actix_persistence_projection::{ProjectionId, StoredProgress};
    let a = ProjectionId::for_slices("listed", 0, 511);
    let b = ProjectionId::for_slices("listed", 512, 1023);
    let c = ProjectionId::for_slices("listed", 0, 255);
    let d = ProjectionId::for_slices("listed", 256, 511);
    let other = ProjectionId::for_slices("listed-not", 0, 1023);
    for id in [&a, &b, &c, &d, &other] {
        let epoch = store.take_ownership(id, None).await.unwrap();
        if id != &c {
            store
                .save_offset(id, epoch, &format!("\"{}\"", id.key), &[])
                .await
                .unwrap();
        }
        if id == &b || id == &c {
            let mut tx = store.begin(id).await.unwrap();
            store
                .save_in(
                    &mut tx,
                    id,
                    epoch,
                    None,
                    &[("p".to_owned(), 4), ("q".to_owned(), 1)],
                )
                .await
                .unwrap();
            store.commit(tx, id).await.unwrap();
        }
    }
    store.reset(&d).await.unwrap();
    let mut listed = store.read_progress("listed").await.unwrap();
    listed.sort_by(|x, y| x.id.cmp(&y.id));
    let seen: actix_persistence_projection::SeenSeqNrs = [("p".to_owned(), 4), ("q".to_owned(), 1)]
        .into_iter()
        .collect();
    let mut expected = vec![
        StoredProgress {
            id: a.clone(),
            offset: Some("\"slices-0-511\"".to_owned()),
            seen: Default::default(),
        },
        StoredProgress {
            id: c.clone(),
            offset: None,
            seen: seen.clone(),
        },
        StoredProgress {
            id: b.clone(),
            offset: Some("\"slices-512-1023\"".to_owned()),
            seen,
        },
    ];
    expected.sort_by(|x, y| x.id.cmp(&y.id));
    assert_eq!(listed, expected);
    assert!(store.read_progress("nothing").await.unwrap().is_empty());
    // Every key that took ownership, also one that stored nothing (`c` stored only seen
    // numbers, `d` was reset: an owner stays an owner).
    let mut owners = store.read_owners("listed").await.unwrap();
    owners.sort();
    let mut expected_owners = vec![a, b, c, d];
    expected_owners.sort();
    assert_eq!(owners, expected_owners);
    assert!(store.read_owners("nothing").await.unwrap().is_empty());
    let fresh = ProjectionId::for_slices("listed-owner-only", 0, 1023);
    store.take_ownership(&fresh, None).await.unwrap();
    assert_eq!(
        store.read_owners("listed-owner-only").await.unwrap(),
        vec![fresh.clone()]
    );
    assert!(store
        .read_progress("listed-owner-only")
        .await
        .unwrap()
        .is_empty());
}

/// [`OffsetStore::hand_over`]'s contract on `store` (fresh keys of projection `name`): the
/// offset and the seen sequence numbers of a key go to a key whose offset is still the one
/// given (none, or its own: a seen number kept at the higher of the two), never over another
/// offset, and nothing goes from a key without one.
pub async fn check_hand_over<S>(store: &S, name: &str)
where
    S: actix_persistence_projection::TransactionalOffsetStore,
{
    use actix_persistence_projection::ProjectionId;
    let old = ProjectionId::for_slices(name, 0, 1023);
    let epoch = store.take_ownership(&old, None).await.unwrap();
    let mut tx = store.begin(&old).await.unwrap();
    let seen = [("Account|1".to_owned(), 7), ("Account|2".to_owned(), 3)];
    store
        .save_in(&mut tx, &old, epoch, Some("{\"old\":1}"), &seen)
        .await
        .unwrap();
    store.commit(tx, &old).await.unwrap();

    // A key with no offset gets the old key's progress; a seen number of its own that is
    // higher stays.
    let fresh = ProjectionId::for_slices(name, 512, 1023);
    let fresh_epoch = store.take_ownership(&fresh, None).await.unwrap();
    let mut tx = store.begin(&fresh).await.unwrap();
    store
        .save_in(
            &mut tx,
            &fresh,
            fresh_epoch,
            None,
            &[("Account|2".to_owned(), 9)],
        )
        .await
        .unwrap();
    store.commit(tx, &fresh).await.unwrap();
    store.hand_over(&old, &fresh, None).await.unwrap();
    assert_eq!(
        store.read_offset(&fresh).await.unwrap().as_deref(),
        Some("{\"old\":1}")
    );
    let got = store.read_seen(&fresh).await.unwrap();
    assert_eq!(got.get("Account|1"), Some(&7));
    assert_eq!(got.get("Account|2"), Some(&9));
    // Not fenced, and fencing nobody: the key's owner saves over it.
    store
        .save_offset(&fresh, fresh_epoch, "{\"own\":2}", &[])
        .await
        .unwrap();

    // A key with an offset of its own keeps it, and gets no seen numbers, unless that
    // offset is the one given.
    store.hand_over(&old, &fresh, None).await.unwrap();
    assert_eq!(
        store.read_offset(&fresh).await.unwrap().as_deref(),
        Some("{\"own\":2}")
    );
    let owned = ProjectionId::for_slices(name, 0, 511);
    let owned_epoch = store.take_ownership(&owned, None).await.unwrap();
    store
        .save_offset(&owned, owned_epoch, "{\"own\":3}", &[])
        .await
        .unwrap();
    store.hand_over(&old, &owned, None).await.unwrap();
    store
        .hand_over(&old, &owned, Some("{\"own\":2}"))
        .await
        .unwrap();
    assert_eq!(
        store.read_offset(&owned).await.unwrap().as_deref(),
        Some("{\"own\":3}")
    );
    assert!(store.read_seen(&owned).await.unwrap().is_empty());
    // Given as it is stored: the old key's offset replaces it, and its seen numbers come.
    store
        .hand_over(&old, &owned, Some("{\"own\":3}"))
        .await
        .unwrap();
    assert_eq!(
        store.read_offset(&owned).await.unwrap().as_deref(),
        Some("{\"old\":1}")
    );
    let got = store.read_seen(&owned).await.unwrap();
    assert_eq!(got.get("Account|1"), Some(&7));
    assert_eq!(got.get("Account|2"), Some(&3));

    // Nothing goes from a key without an offset.
    let empty = ProjectionId::for_slices(name, 0, 0);
    let target = ProjectionId::for_slices(name, 1, 1);
    store.hand_over(&empty, &target, None).await.unwrap();
    assert_eq!(store.read_offset(&target).await.unwrap(), None);
    assert!(store.read_seen(&target).await.unwrap().is_empty());
}
