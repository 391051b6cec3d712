//! Break-it scenarios for projections, replayed from bug reports against Akka Projections,
//! Eventuous subscriptions, Marten's async daemon and EventStoreDB subscriptions: handler
//! errors with every recovery strategy in every handler form and delivery, stop and reset
//! during retries and in-flight calls, offset store outages and failed commits, ordering
//! under `max_concurrency`. (Slice-range changes are covered elsewhere.)

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_persistence_core::InMemoryJournal;
use actix_persistence_projection::{
    AfterRetries, GroupedHandler, Grouping, Handler, HandlerError, HandlerRecovery,
    InMemoryOffsetStore, InMemoryTransaction, OffsetStore, OffsetStoreError, Projection,
    ProjectionId, ProjectionState, SaveOffset, SeenSeqNrs, StoredProgress,
    TransactionalGroupedHandler, TransactionalHandler, TransactionalOffsetStore,
};
use async_trait::async_trait;
use common::*;

type Offset = actix_persistence_core::query::Offset;
type Key = (String, u64);

fn key(envelope: &Env) -> Key {
    (envelope.persistence_id.to_string(), envelope.seq_nr)
}

// ---------------------------------------------------------------------------------------------
// A handler of every form that fails on one envelope a number of times.
// ---------------------------------------------------------------------------------------------

/// Fails every call whose envelopes hold `poison`, `failures` times (then succeeds). Records
/// every call, the effects of the calls (at-least-once: each envelope of a call in order up to
/// the failing one, as a handler writing one by one would; exactly-once: the envelopes of each
/// committed transaction), and checks that no two calls of one persistence id overlap.
#[derive(Clone)]
struct Flaky {
    poison: Key,
    failures: Arc<AtomicU32>,
    /// Calls whose envelopes held the poison.
    attempts: Arc<AtomicU32>,
    /// The envelopes of every call, in call order.
    calls: Arc<Mutex<Vec<Vec<Key>>>>,
    /// The effects: handled (at-least-once) or committed (exactly-once).
    effects: Recorder,
    /// Persistence ids with a call running, and whether two ever overlapped.
    running: Arc<Mutex<HashMap<String, usize>>>,
    overlapped: Arc<AtomicBool>,
}

impl Flaky {
    fn new(poison: Key, failures: u32) -> Self {
        Flaky {
            poison,
            failures: Arc::new(AtomicU32::new(failures)),
            attempts: Arc::default(),
            calls: Arc::default(),
            effects: Recorder::default(),
            running: Arc::default(),
            overlapped: Arc::default(),
        }
    }

    /// Notes the call; the guard notes its end, also when the call is dropped (a run that
    /// fails drops its at-least-once calls in flight).
    fn enter(&self, envelopes: &[Env]) -> Leave {
        self.calls
            .lock()
            .unwrap()
            .push(envelopes.iter().map(key).collect());
        let pids: Vec<String> = distinct_pids(envelopes)
            .into_iter()
            .map(|e| e.persistence_id.to_string())
            .collect();
        let mut running = self.running.lock().unwrap();
        for p in &pids {
            let n = running.entry(p.clone()).or_insert(0);
            *n += 1;
            if *n > 1 {
                self.overlapped.store(true, Ordering::SeqCst);
            }
        }
        Leave {
            running: Arc::clone(&self.running),
            pids,
        }
    }

    /// The index of the poison in `envelopes` when this call fails on it.
    async fn fails_at(&self, envelopes: &[Env]) -> Option<usize> {
        // A yield: other calls in flight interleave with this one.
        tokio::task::yield_now().await;
        let at = envelopes.iter().position(|e| key(e) == self.poison)?;
        self.attempts.fetch_add(1, Ordering::SeqCst);
        let failed = self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        failed.then_some(at)
    }

    fn error(&self) -> HandlerError {
        format!("{} {} cannot be handled yet", self.poison.0, self.poison.1).into()
    }

    async fn at_least_once(&self, envelopes: &[Env]) -> Result<(), HandlerError> {
        let leave = self.enter(envelopes);
        let failed = self.fails_at(envelopes).await;
        let upto = failed.unwrap_or(envelopes.len());
        for envelope in &envelopes[..upto] {
            self.effects.handled.lock().unwrap().push(key(envelope));
        }
        drop(leave);
        match failed {
            Some(_) => Err(self.error()),
            None => Ok(()),
        }
    }

    async fn exactly_once(
        &self,
        tx: &mut InMemoryTransaction,
        envelopes: &[Env],
    ) -> Result<(), HandlerError> {
        let leave = self.enter(envelopes);
        let failed = self.fails_at(envelopes).await;
        drop(leave);
        if failed.is_some() {
            return Err(self.error());
        }
        let effects = self.effects.handled.clone();
        let keys: Vec<Key> = envelopes.iter().map(key).collect();
        tx.on_commit(move || effects.lock().unwrap().extend(keys));
        Ok(())
    }
}

#[async_trait]
impl Handler<Env> for Flaky {
    async fn process(&self, envelope: &Env) -> Result<(), HandlerError> {
        self.at_least_once(std::slice::from_ref(envelope)).await
    }
}

#[async_trait]
impl GroupedHandler<Env> for Flaky {
    async fn process(&self, envelopes: &[Env]) -> Result<(), HandlerError> {
        self.at_least_once(envelopes).await
    }
}

#[async_trait]
impl TransactionalHandler<Env, InMemoryTransaction> for Flaky {
    async fn process(
        &self,
        tx: &mut InMemoryTransaction,
        envelope: &Env,
    ) -> Result<(), HandlerError> {
        self.exactly_once(tx, std::slice::from_ref(envelope)).await
    }
}

#[async_trait]
impl TransactionalGroupedHandler<Env, InMemoryTransaction> for Flaky {
    async fn process(
        &self,
        tx: &mut InMemoryTransaction,
        envelopes: &[Env],
    ) -> Result<(), HandlerError> {
        self.exactly_once(tx, envelopes).await
    }
}

/// Ends a call of [`Flaky`] when dropped.
struct Leave {
    running: Arc<Mutex<HashMap<String, usize>>>,
    pids: Vec<String>,
}

impl Drop for Leave {
    fn drop(&mut self) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        for p in &self.pids {
            if let Some(n) = running.get_mut(p) {
                *n -= 1;
            }
        }
    }
}

/// The first envelope of each persistence id in `envelopes`.
fn distinct_pids(envelopes: &[Env]) -> Vec<&Env> {
    let mut seen = std::collections::HashSet::new();
    envelopes
        .iter()
        .filter(|e| seen.insert(e.persistence_id.to_string()))
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// One envelope per call, one call at a time.
    Single,
    /// Groups of 3, one call at a time.
    Grouped,
    /// One envelope per call, up to 4 calls at once.
    Concurrent,
    /// Groups of 2, up to 3 calls at once.
    GroupedConcurrent,
}

impl Form {
    const ALL: [Form; 4] = [
        Form::Single,
        Form::Grouped,
        Form::Concurrent,
        Form::GroupedConcurrent,
    ];

    fn grouping(self) -> Option<Grouping> {
        let size = match self {
            Form::Single | Form::Concurrent => return None,
            Form::Grouped => 3,
            Form::GroupedConcurrent => 2,
        };
        Some(Grouping {
            size,
            within: Duration::MAX,
        })
    }

    fn concurrency(self) -> usize {
        match self {
            Form::Single | Form::Grouped => 1,
            Form::Concurrent => 4,
            Form::GroupedConcurrent => 3,
        }
    }
}

/// A projection of `form` and delivery over `source`, handled by `handler`.
fn flaky_projection(
    id: ProjectionId,
    source: actix_persistence_projection::QuerySource<Deposited>,
    store: InMemoryOffsetStore,
    form: Form,
    exactly_once: bool,
    handler: Flaky,
) -> Projection<Env> {
    let projection = match (form.grouping(), exactly_once) {
        (None, false) => Projection::at_least_once(id, source, store, handler),
        (Some(g), false) => Projection::grouped_at_least_once(id, source, store, g, handler),
        (None, true) => Projection::exactly_once(id, source, store, handler),
        (Some(g), true) => Projection::grouped_exactly_once(id, source, store, g, handler),
    };
    projection
        .with_max_concurrency(form.concurrency())
        .with_restart_backoff(quick_restarts())
}

fn all_events(ids: usize, per_id: u64) -> Vec<Key> {
    let mut all: Vec<Key> = (0..ids)
        .flat_map(|n| (1..=per_id).map(move |s| (pid(n), s)))
        .collect();
    all.sort();
    all
}

fn counts(keys: &[Key]) -> HashMap<Key, usize> {
    let mut counts = HashMap::new();
    for k in keys {
        *counts.entry(k.clone()).or_insert(0) += 1;
    }
    counts
}

/// Per persistence id, its seq_nrs in the order of `keys`.
fn by_pid(keys: &[Key]) -> HashMap<String, Vec<u64>> {
    let mut by_pid: HashMap<String, Vec<u64>> = HashMap::new();
    for (p, s) in keys {
        by_pid.entry(p.clone()).or_default().push(*s);
    }
    by_pid
}

/// The calls that held the poison.
fn poison_calls(handler: &Flaky) -> Vec<Vec<Key>> {
    handler
        .calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.contains(&handler.poison))
        .cloned()
        .collect()
}

/// A projection that completed leaves an offset after which the source holds nothing: a new
/// instance over the same store handles nothing.
async fn resumes_with_nothing_left(
    journal: &InMemoryJournal,
    id: ProjectionId,
    store: InMemoryOffsetStore,
) {
    let again = Recorder::default();
    let state = Projection::at_least_once(id, current_source(journal), store, again.clone())
        .start()
        .join()
        .await;
    assert_eq!(state, ProjectionState::Completed);
    assert_eq!(again.handled(), vec![], "handled again after completion");
}

/// Akka Projections' `HandlerRecoveryStrategy` `skip` and `retryAndSkip(retries)` (akka/
/// akka-projection#17 / PR #95, PR #640 "Store offset for failed skipped envelope"), in every
/// handler form and both deliveries: the poison is attempted `1 + retries` times, the unit
/// that holds it (the envelope, or its whole group) is skipped and counted, every other
/// envelope takes effect exactly once, ids keep their order and never run twice at once,
/// and the stored offset passes the skipped unit (a restart handles nothing again).
#[tokio::test(start_paused = true)]
async fn skip_after_retries_in_every_form_and_delivery() {
    for exactly_once in [false, true] {
        for form in Form::ALL {
            for retries in [0, 2] {
                let case = format!("{form:?} exactly_once={exactly_once} retries={retries}");
                let journal = InMemoryJournal::new();
                write_many(&journal, 3, 3).await;
                let store = InMemoryOffsetStore::new();
                let id = ProjectionId::new("adv-skip", "all");
                let handler = Flaky::new((pid(1), 2), u32::MAX);
                let handle = flaky_projection(
                    id.clone(),
                    current_source(&journal),
                    store.clone(),
                    form,
                    exactly_once,
                    handler.clone(),
                )
                .with_handler_recovery(quick_recovery(retries, AfterRetries::Skip))
                .start();
                let progress = handle
                    .wait_for(|p| p.state.is_terminal())
                    .await
                    .expect("ends");
                assert_eq!(progress.state, ProjectionState::Completed, "{case}");
                assert_eq!(progress.restarts, 0, "{case}");
                let poison_calls = poison_calls(&handler);
                assert_eq!(poison_calls.len() as u32, retries + 1, "{case}: attempts");
                // Each attempt of the poison's unit has the same envelopes.
                assert!(
                    poison_calls.windows(2).all(|w| w[0] == w[1]),
                    "{case}: {poison_calls:?}"
                );
                let unit = poison_calls[0].clone();
                assert_eq!(progress.skipped, unit.len() as u64, "{case}: skipped");
                assert_eq!(progress.handled, 9, "{case}: handled");

                let effects = handler.effects.handled();
                let counts = counts(&effects);
                let poison_at = unit.iter().position(|k| *k == handler.poison).unwrap();
                for k in all_events(3, 3) {
                    let expected = if exactly_once {
                        // The skipped unit's transaction never committed.
                        usize::from(!unit.contains(&k))
                    } else if let Some(i) = unit.iter().position(|u| *u == k) {
                        // Written before the failure, on each attempt; never the poison or
                        // the envelopes after it in the group.
                        if i < poison_at {
                            retries as usize + 1
                        } else {
                            0
                        }
                    } else {
                        1
                    };
                    assert_eq!(
                        counts.get(&k).copied().unwrap_or(0),
                        expected,
                        "{case}: {k:?} in {effects:?}"
                    );
                }
                for (p, seq_nrs) in by_pid(&effects) {
                    let mut sorted = seq_nrs.clone();
                    sorted.sort();
                    if !(exactly_once) && unit.iter().any(|(u, _)| *u == p) {
                        continue; // repeated partial effects of the skipped group
                    }
                    assert_eq!(seq_nrs, sorted, "{case}: {p} out of order");
                }
                assert!(
                    !handler.overlapped.load(Ordering::SeqCst),
                    "{case}: overlap"
                );
                resumes_with_nothing_left(&journal, id, store).await;
            }
        }
    }
}

/// Akka Projections' `fail` and `retryAndFail(retries)`: the poison fails `1 + retries`
/// times, the projection fails (error reported, naming the envelope), restarts from its stored
/// offset and then gets through. Exactly-once: every envelope committed exactly once, in every
/// form. At-least-once, one call at a time: the failed run saved what it handled before the
/// poison's unit, so only that unit comes again (the envelopes of a group before the poison
/// take effect once per attempt); with calls at once, envelopes handled past the poison may
/// come again, at most once. Nothing skipped, ids in order, and the stored offset covers
/// everything at the end.
#[tokio::test(start_paused = true)]
async fn fail_after_retries_restarts_and_gets_through_in_every_form_and_delivery() {
    for exactly_once in [false, true] {
        for form in Form::ALL {
            for retries in [0, 2] {
                let case = format!("{form:?} exactly_once={exactly_once} retries={retries}");
                let journal = InMemoryJournal::new();
                write_many(&journal, 3, 3).await;
                let store = InMemoryOffsetStore::new();
                let id = ProjectionId::new("adv-fail", "all");
                let handler = Flaky::new((pid(1), 2), retries + 1);
                let handle = flaky_projection(
                    id.clone(),
                    current_source(&journal),
                    store.clone(),
                    form,
                    exactly_once,
                    handler.clone(),
                )
                .with_handler_recovery(quick_recovery(retries, AfterRetries::Fail))
                .start();
                let progress = handle
                    .wait_for(|p| p.state.is_terminal())
                    .await
                    .expect("ends");
                assert_eq!(progress.state, ProjectionState::Completed, "{case}");
                assert_eq!(progress.restarts, 1, "{case}");
                assert_eq!(progress.skipped, 0, "{case}");
                let error = progress.last_error.clone().expect("reported");
                assert!(
                    error.contains("Account|1")
                        && error.contains("seq_nr")
                        && error.contains("cannot be handled yet"),
                    "{case}: {error}"
                );
                let poison_calls = poison_calls(&handler);
                assert_eq!(poison_calls.len() as u32, retries + 2, "{case}: attempts");

                let effects = handler.effects.handled();
                let counts = counts(&effects);
                let failed_unit = poison_calls[0].clone();
                let poison_at = failed_unit
                    .iter()
                    .position(|k| *k == handler.poison)
                    .unwrap();
                for k in all_events(3, 3) {
                    let got = counts.get(&k).copied().unwrap_or(0);
                    if exactly_once {
                        assert_eq!(got, 1, "{case}: {k:?} in {effects:?}");
                    } else if form.concurrency() == 1 {
                        let expected = match failed_unit.iter().position(|u| *u == k) {
                            Some(i) if i < poison_at => retries as usize + 2,
                            _ => 1,
                        };
                        assert_eq!(got, expected, "{case}: {k:?} in {effects:?}");
                    } else {
                        let most = match failed_unit.iter().position(|u| *u == k) {
                            Some(i) if i < poison_at => retries as usize + 3,
                            _ => 2,
                        };
                        assert!(
                            got >= 1 && got <= most,
                            "{case}: {k:?} {got} times in {effects:?}"
                        );
                    }
                }
                if exactly_once || form.concurrency() == 1 {
                    // The envelopes of the poison's id after it never take effect before it.
                    let seq_nrs = by_pid(&effects).remove(&pid(1)).unwrap();
                    let first_3 = seq_nrs.iter().position(|&s| s == 3).unwrap();
                    let last_2 = seq_nrs.iter().rposition(|&s| s == 2).unwrap();
                    assert!(last_2 < first_3, "{case}: {seq_nrs:?}");
                }
                assert!(
                    !handler.overlapped.load(Ordering::SeqCst),
                    "{case}: overlap"
                );
                resumes_with_nothing_left(&journal, id, store).await;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Stop and reset while calls are retried or in flight.
// ---------------------------------------------------------------------------------------------

/// Retries from 1 s to 10 s, practically forever.
fn endless_retries(then: AfterRetries) -> HandlerRecovery {
    HandlerRecovery {
        retries: u32::MAX,
        min_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(10),
        then,
    }
}

/// akka/akka-projection#187 (PR #193 "abort retries when projection is stopped"): a stop
/// asked while the handler is being retried on an envelope must not wait for every retry
/// (with a long retry budget: for ever). The projection stops, reports the handler's error,
/// never skips the envelope (also with `Skip`), and stores no offset past it: the next run
/// handles it.
#[tokio::test(start_paused = true)]
async fn stop_during_retries_ends_the_retries_and_keeps_the_envelope() {
    for exactly_once in [false, true] {
        for form in [Form::Single, Form::Concurrent, Form::Grouped] {
            for then in [AfterRetries::Fail, AfterRetries::Skip] {
                let case = format!("{form:?} exactly_once={exactly_once} {then:?}");
                let journal = InMemoryJournal::new();
                write_many(&journal, 3, 3).await;
                let store = InMemoryOffsetStore::new();
                let id = ProjectionId::new("adv-stop-retries", "all");
                let handler = Flaky::new((pid(1), 2), u32::MAX);
                let handle = flaky_projection(
                    id.clone(),
                    current_source(&journal),
                    store.clone(),
                    form,
                    exactly_once,
                    handler.clone(),
                )
                .with_handler_recovery(endless_retries(then))
                .start();
                let attempts = Arc::clone(&handler.attempts);
                eventually(|| attempts.load(Ordering::SeqCst) >= 3).await;
                let stopped = tokio::time::timeout(Duration::from_secs(600), handle.stop()).await;
                assert_eq!(
                    stopped.ok(),
                    Some(ProjectionState::Stopped),
                    "{case}: stop waited for the retries ({} attempts)",
                    attempts.load(Ordering::SeqCst)
                );
                // Neither handled nor skipped: a new run handles the poison.
                let fixed = Flaky::new((pid(1), 2), 0);
                let state = flaky_projection(
                    id,
                    current_source(&journal),
                    store,
                    form,
                    exactly_once,
                    fixed.clone(),
                )
                .start()
                .join()
                .await;
                assert_eq!(state, ProjectionState::Completed, "{case}");
                assert_eq!(poison_calls(&fixed).len(), 1, "{case}: not skipped");
            }
        }
    }
}

/// A reset whose caller gave up waiting (a timeout around `reset()` while a call is in
/// flight), then a stop: the stop must end the projection (management operations racing each
/// other, the concern of akka/akka-projection#190 on `ProjectionManagement`; no report of this
/// exact race found, own scenario). The stop used to be taken by the run that was draining for
/// the reset and then lost: the reset restarted the projection, which handled everything again,
/// and `stop().await` never returned.
#[tokio::test(start_paused = true)]
async fn a_stop_after_an_abandoned_reset_stops_the_projection() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 2, 2).await;
    let handler = Gated::default();
    let handle = Projection::at_least_once(
        ProjectionId::new("adv-reset-stop", "all"),
        live_source(&journal),
        InMemoryOffsetStore::new(),
        handler.clone(),
    )
    .start();
    // The first call is in flight, held by the gate.
    eventually(|| handler.started.handled().len() == 1).await;
    {
        let reset = handle.reset();
        // The caller gives up on the reset (it waits for the call in flight).
        let gave_up = tokio::time::timeout(Duration::from_millis(10), reset).await;
        assert!(gave_up.is_err(), "the reset waits for the call in flight");
    }
    let stopping = tokio::spawn(handle.stop());
    tokio::task::yield_now().await;
    handler.release(100);
    let stopped = tokio::time::timeout(Duration::from_secs(600), stopping).await;
    assert_eq!(
        stopped.ok().map(Result::unwrap),
        Some(ProjectionState::Stopped),
        "stop never returned; handled {:?}",
        handler.finished.handled()
    );
    assert_eq!(
        handler.finished.handled().len(),
        1,
        "nothing handled after the stop"
    );
}

// ---------------------------------------------------------------------------------------------
// Offset store outages and failed commits.
// ---------------------------------------------------------------------------------------------

/// An in-memory offset store that can go down (every call fails as a lost database would) and
/// fail a number of commits (the database refuses them: nothing of the transaction is stored).
#[derive(Clone, Default)]
struct Outage {
    inner: InMemoryOffsetStore,
    down: Arc<AtomicBool>,
    failing_commits: Arc<AtomicU32>,
    /// Offsets saved by `save_offset` (not in transactions), in order.
    saved: Arc<Mutex<Vec<String>>>,
}

impl Outage {
    fn check(&self, id: &ProjectionId) -> Result<(), OffsetStoreError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(OffsetStoreError::Database {
                id: id.clone(),
                source: actix_persistence_projection::sqlx::Error::PoolTimedOut,
            });
        }
        Ok(())
    }

    fn check_name(&self, name: &str) -> Result<(), OffsetStoreError> {
        self.check(&ProjectionId::new(name, "?"))
    }
}

#[async_trait]
impl OffsetStore for Outage {
    async fn read_offset(&self, id: &ProjectionId) -> Result<Option<String>, OffsetStoreError> {
        self.check(id)?;
        self.inner.read_offset(id).await
    }

    async fn read_seen(&self, id: &ProjectionId) -> Result<SeenSeqNrs, OffsetStoreError> {
        self.check(id)?;
        self.inner.read_seen(id).await
    }

    async fn read_progress(&self, name: &str) -> Result<Vec<StoredProgress>, OffsetStoreError> {
        self.check_name(name)?;
        self.inner.read_progress(name).await
    }

    async fn read_owners(&self, name: &str) -> Result<Vec<ProjectionId>, OffsetStoreError> {
        self.check_name(name)?;
        self.inner.read_owners(name).await
    }

    async fn take_ownership(
        &self,
        id: &ProjectionId,
        held: Option<u64>,
    ) -> Result<u64, OffsetStoreError> {
        self.check(id)?;
        self.inner.take_ownership(id, held).await
    }

    async fn save_offset(
        &self,
        id: &ProjectionId,
        epoch: u64,
        offset: &str,
        covered: &[(String, u64)],
    ) -> Result<(), OffsetStoreError> {
        self.check(id)?;
        self.inner.save_offset(id, epoch, offset, covered).await?;
        self.saved.lock().unwrap().push(offset.to_owned());
        Ok(())
    }

    async fn reset(&self, id: &ProjectionId) -> Result<(), OffsetStoreError> {
        self.check(id)?;
        self.inner.reset(id).await
    }
}

#[async_trait]
impl TransactionalOffsetStore for Outage {
    type Transaction = InMemoryTransaction;

    async fn begin(&self, id: &ProjectionId) -> Result<InMemoryTransaction, OffsetStoreError> {
        self.check(id)?;
        self.inner.begin(id).await
    }

    async fn save_in(
        &self,
        tx: &mut InMemoryTransaction,
        id: &ProjectionId,
        epoch: u64,
        offset: Option<&str>,
        seen: &[(String, u64)],
    ) -> Result<(), OffsetStoreError> {
        self.check(id)?;
        self.inner.save_in(tx, id, epoch, offset, seen).await
    }

    async fn commit(
        &self,
        tx: InMemoryTransaction,
        id: &ProjectionId,
    ) -> Result<(), OffsetStoreError> {
        self.check(id)?;
        let refused = self
            .failing_commits
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if refused {
            drop(tx);
            return Err(OffsetStoreError::Database {
                id: id.clone(),
                source: actix_persistence_projection::sqlx::Error::PoolTimedOut,
            });
        }
        self.inner.commit(tx, id).await
    }

    async fn rollback(
        &self,
        tx: InMemoryTransaction,
        id: &ProjectionId,
    ) -> Result<(), OffsetStoreError> {
        self.inner.rollback(tx, id).await
    }
}

/// Takes the store down when it handles `at` (after its own effect); records effects and
/// the offset of every envelope handled, as JSON.
#[derive(Clone)]
struct TakesDown {
    at: Key,
    store: Outage,
    fired: Arc<AtomicBool>,
    effects: Recorder,
    offsets: Arc<Mutex<HashMap<Key, String>>>,
}

impl TakesDown {
    fn new(at: Key, store: &Outage) -> Self {
        TakesDown {
            at,
            store: store.clone(),
            fired: Arc::default(),
            effects: Recorder::default(),
            offsets: Arc::default(),
        }
    }

    fn note(&self, envelope: &Env) {
        self.offsets.lock().unwrap().insert(
            key(envelope),
            serde_json::to_string(&envelope.offset).unwrap(),
        );
        // Once: the restart after the outage handles it again (at-least-once).
        if key(envelope) == self.at && !self.fired.swap(true, Ordering::SeqCst) {
            self.store.down.store(true, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl Handler<Env> for TakesDown {
    async fn process(&self, envelope: &Env) -> Result<(), HandlerError> {
        tokio::task::yield_now().await;
        self.effects.handled.lock().unwrap().push(key(envelope));
        self.note(envelope);
        Ok(())
    }
}

#[async_trait]
impl TransactionalHandler<Env, InMemoryTransaction> for TakesDown {
    async fn process(
        &self,
        tx: &mut InMemoryTransaction,
        envelope: &Env,
    ) -> Result<(), HandlerError> {
        tokio::task::yield_now().await;
        let effects = self.effects.handled.clone();
        let k = key(envelope);
        tx.on_commit(move || effects.lock().unwrap().push(k));
        self.note(envelope);
        Ok(())
    }
}

/// A lost database under a running projection (the offset store unavailable: Akka
/// Projections' restart-backoff case; checkpoint stores failing under Eventuous subscriptions,
/// cf. Eventuous/eventuous#165; no specific report of this exact sequence): the offset store goes down in the
/// middle of the run, the projection fails, keeps restarting with its backoff while it is
/// down (reporting the database's error, handling nothing more under exactly-once), and once
/// it is back resumes from the stored offset: exactly-once commits every envelope once;
/// at-least-once handles every envelope, and the ones the stored offset covered at the outage
/// exactly once. The stored offset never passes what was handled.
#[tokio::test(start_paused = true)]
async fn an_offset_store_outage_restarts_until_it_is_back_and_skips_nothing() {
    for (exactly_once, concurrency) in [(false, 1), (false, 4), (true, 1), (true, 4)] {
        let case = format!("exactly_once={exactly_once} max_concurrency={concurrency}");
        let journal = InMemoryJournal::new();
        write_many(&journal, 2, 10).await;
        let store = Outage::default();
        let id = ProjectionId::new("adv-outage", "all");
        let handler = TakesDown::new((pid(1), 5), &store);
        let projection = if exactly_once {
            Projection::exactly_once(
                id.clone(),
                current_source(&journal),
                store.clone(),
                handler.clone(),
            )
        } else {
            Projection::at_least_once(
                id.clone(),
                current_source(&journal),
                store.clone(),
                handler.clone(),
            )
        };
        let handle = projection
            .with_max_concurrency(concurrency)
            .with_save_offset(SaveOffset {
                after_envelopes: 1,
                after: Duration::from_millis(1),
            })
            .with_restart_backoff(quick_restarts())
            .start();
        let down = handle
            .wait_for(|p| p.restarts >= 5)
            .await
            .expect("keeps restarting while the store is down");
        assert_eq!(down.state, ProjectionState::Restarting, "{case}");
        let error = down.last_error.clone().unwrap();
        assert!(error.contains("database failed"), "{case}: {error}");
        let handled_while_down = handler.effects.handled();
        // The stored offset at the outage (read past the outage switch).
        let stored = store.inner.read_offset(&id).await.unwrap();
        store.down.store(false, Ordering::SeqCst);
        let done = handle
            .wait_for(|p| p.state.is_terminal())
            .await
            .expect("ends");
        assert_eq!(done.state, ProjectionState::Completed, "{case}");
        assert_eq!(done.skipped, 0, "{case}");

        let effects = handler.effects.handled();
        let counts = counts(&effects);
        let all = all_events(2, 10);
        assert_eq!(counts.len(), 20, "{case}: {effects:?}");
        let offsets = handler.offsets.lock().unwrap().clone();
        let covered_at_outage: Vec<&Key> = match &stored {
            // The envelopes of the stored offset's id up to it (one id per timestamp here).
            Some(json) => {
                let (at, _) = offsets
                    .iter()
                    .find(|(_, o)| *o == json)
                    .expect("a handled offset");
                all.iter()
                    .filter(|k| {
                        effects.iter().position(|e| e == *k) <= effects.iter().position(|e| e == at)
                    })
                    .collect()
            }
            None => Vec::new(),
        };
        if exactly_once {
            assert!(counts.values().all(|&n| n == 1), "{case}: {effects:?}");
            // Nothing committed while the store was down past what committed before it.
            assert_eq!(
                &effects[..handled_while_down.len()],
                &handled_while_down[..],
                "{case}"
            );
            assert!(
                !handled_while_down.contains(&(pid(1), 6)),
                "{case}: {handled_while_down:?}"
            );
        } else {
            for k in covered_at_outage {
                assert_eq!(
                    counts[k], 1,
                    "{case}: {k:?} covered by the stored offset handled again"
                );
            }
        }
        // The final stored offset is the last envelope's: nothing left.
        resumes_with_nothing_left(&journal, id, store.inner.clone()).await;
    }
}

/// An exactly-once transaction whose commit fails (the database refuses it: a serialization
/// failure, a lost connection at COMMIT; the exactly-once offset-in-transaction design of
/// akka-projection-jdbc/-r2dbc, own scenario): nothing of it is stored, the
/// projection does not take the envelopes as handled (the stored offset stays before them),
/// and after the restart they are committed once. In every exactly-once form.
#[tokio::test(start_paused = true)]
async fn a_failed_commit_is_never_taken_as_handled() {
    for form in Form::ALL {
        for failing in [1, 3] {
            let case = format!("{form:?} failing commits={failing}");
            let journal = InMemoryJournal::new();
            write_many(&journal, 3, 4).await;
            let store = Outage::default();
            store.failing_commits.store(failing, Ordering::SeqCst);
            let id = ProjectionId::new("adv-commit", "all");
            let handler = Flaky::new((pid(9), 9), 0);
            let projection = match form.grouping() {
                None => Projection::exactly_once(
                    id.clone(),
                    current_source(&journal),
                    store.clone(),
                    handler.clone(),
                ),
                Some(g) => Projection::grouped_exactly_once(
                    id.clone(),
                    current_source(&journal),
                    store.clone(),
                    g,
                    handler.clone(),
                ),
            };
            let progress = projection
                .with_max_concurrency(form.concurrency())
                .with_save_offset(SaveOffset {
                    after_envelopes: 2,
                    after: Duration::from_millis(1),
                })
                .with_restart_backoff(quick_restarts())
                .start();
            let done = progress
                .wait_for(|p| p.state.is_terminal())
                .await
                .expect("ends");
            assert_eq!(done.state, ProjectionState::Completed, "{case}");
            assert_eq!(done.skipped, 0, "{case}");
            assert!(done.restarts >= 1, "{case}");
            let effects = handler.effects.handled();
            let mut sorted = effects.clone();
            sorted.sort();
            assert_eq!(sorted, all_events(3, 4), "{case}: each committed once");
            for (p, seq_nrs) in by_pid(&effects) {
                assert!(
                    seq_nrs.windows(2).all(|w| w[0] < w[1]),
                    "{case}: {p} {seq_nrs:?}"
                );
            }
            resumes_with_nothing_left(&journal, id, store.inner.clone()).await;
        }
    }
}

/// The handler fails on the last envelope before an offset save is due (akka-projection
/// at-least-once `saveOffsetAfterEnvelopes`, and akka-projection PR #908, where a group's
/// offsets were stored incompletely): the
/// failed run saves the envelopes before it, never the failed one; the restart handles exactly
/// the failed envelope and the rest, once each.
#[tokio::test(start_paused = true)]
async fn a_failure_on_the_envelope_that_completes_a_save_batch_stores_only_what_was_handled() {
    let journal = InMemoryJournal::new();
    write_events(&journal, &pid(0), 1, 9).await;
    let store = Outage::default();
    let id = ProjectionId::new("adv-batch", "all");
    // Saves after every 3 envelopes (or an hour): the 6th completes the second batch.
    let handler = Flaky::new((pid(0), 6), 1);
    let handle = Projection::at_least_once(
        id.clone(),
        current_source(&journal),
        store.clone(),
        handler.clone(),
    )
    .with_save_offset(SaveOffset {
        after_envelopes: 3,
        after: Duration::from_secs(3600),
    })
    .with_handler_recovery(quick_recovery(0, AfterRetries::Fail))
    .with_restart_backoff(quick_restarts())
    .start();
    let done = handle
        .wait_for(|p| p.state.is_terminal())
        .await
        .expect("ends");
    assert_eq!(done.state, ProjectionState::Completed);
    assert_eq!(done.restarts, 1);
    // Each envelope took effect once: the failed run's save covered 1-5.
    let effects = handler.effects.handled();
    let expected: Vec<Key> = (1..=9).map(|s| (pid(0), s)).collect();
    assert_eq!(effects, expected);
    // Saved: 3, then 5 (the failed run, at its failure), then 8 and 9 of the restart.
    let saved = store.saved.lock().unwrap().clone();
    let seq_nrs_of = |json: &str| -> u64 {
        let offset: Offset = serde_json::from_str(json).unwrap();
        let Offset::Timestamp(t) = offset else {
            panic!("{json}")
        };
        t.seen.get(&pid(0)).expect("seen").seq_nr
    };
    let saved: Vec<u64> = saved.iter().map(|s| seq_nrs_of(s)).collect();
    assert_eq!(saved, vec![3, 5, 8, 9]);
}

/// A projection over an empty journal (Marten's async daemon on an empty event store,
/// EventStoreDB catch-up subscription from `$all` start with no events: the first event must
/// not be missed when it arrives after the subscription went live): it waits, handles the
/// first event when it is written, and its lag is zero before and after.
#[tokio::test(start_paused = true)]
async fn a_projection_over_an_empty_journal_handles_the_first_event() {
    for exactly_once in [false, true] {
        let journal = InMemoryJournal::new();
        let store = InMemoryOffsetStore::new();
        let handler = Flaky::new((pid(9), 9), 0);
        let id = ProjectionId::new("adv-empty", "all");
        let handle = flaky_projection(
            id.clone(),
            live_source(&journal),
            store.clone(),
            Form::Single,
            exactly_once,
            handler.clone(),
        )
        .start();
        handle
            .wait_for(|p| p.state == ProjectionState::Running)
            .await
            .expect("runs");
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(handle.lag().await.unwrap().events, 0);
        assert_eq!(handler.effects.handled(), vec![]);
        write_events(&journal, &pid(0), 1, 1).await;
        handle
            .wait_for(|p| p.handled == 1)
            .await
            .expect("the first event");
        assert_eq!(handle.stop().await, ProjectionState::Stopped);
        assert_eq!(handler.effects.handled(), vec![(pid(0), 1)]);
        assert!(
            store.read_offset(&id).await.unwrap().is_some(),
            "offset saved at stop"
        );
        resumes_with_nothing_left(&journal, id, store).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The same on SQLite and PostgreSQL: the handler's writes in the offset store's transaction.
// ---------------------------------------------------------------------------------------------

mod sql {
    use super::*;
    use actix_persistence_core::query::ReadJournal;
    use actix_persistence_core::JournalStore;
    use actix_persistence_projection::sqlx::{self, Postgres, Sqlite, Transaction};
    use actix_persistence_projection::{PostgresOffsetStore, QuerySource, SqliteOffsetStore};
    use actix_persistence_sql::{
        PostgresJournal, PostgresJournalOptions, SqliteJournal, SqliteJournalOptions,
    };

    /// Writes each envelope of a call into `handled`, then fails when the call holds the
    /// poison and failures are left (after writing: the rollback must undo them).
    #[derive(Clone)]
    pub struct SqlFlaky {
        poison: Key,
        failures: Arc<AtomicU32>,
        calls: Arc<Mutex<Vec<Vec<Key>>>>,
    }

    impl SqlFlaky {
        pub fn new(poison: Key, failures: u32) -> Self {
            SqlFlaky {
                poison,
                failures: Arc::new(AtomicU32::new(failures)),
                calls: Arc::default(),
            }
        }

        fn poison_calls(&self) -> Vec<Vec<Key>> {
            let calls = self.calls.lock().unwrap();
            calls
                .iter()
                .filter(|c| c.contains(&self.poison))
                .cloned()
                .collect()
        }

        fn after_writing(&self, envelopes: &[Env]) -> Result<(), HandlerError> {
            self.calls
                .lock()
                .unwrap()
                .push(envelopes.iter().map(key).collect());
            if envelopes.iter().any(|e| key(e) == self.poison)
                && self
                    .failures
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
            {
                return Err(
                    format!("{} {} cannot be handled yet", self.poison.0, self.poison.1).into(),
                );
            }
            Ok(())
        }
    }

    #[async_trait]
    impl TransactionalGroupedHandler<Env, Transaction<'static, Sqlite>> for SqlFlaky {
        async fn process(
            &self,
            tx: &mut Transaction<'static, Sqlite>,
            envelopes: &[Env],
        ) -> Result<(), HandlerError> {
            for e in envelopes {
                sqlx::query("INSERT INTO handled (persistence_id, seq_nr) VALUES (?, ?)")
                    .bind(&*e.persistence_id)
                    .bind(e.seq_nr as i64)
                    .execute(&mut **tx)
                    .await?;
            }
            self.after_writing(envelopes)
        }
    }

    #[async_trait]
    impl TransactionalHandler<Env, Transaction<'static, Sqlite>> for SqlFlaky {
        async fn process(
            &self,
            tx: &mut Transaction<'static, Sqlite>,
            envelope: &Env,
        ) -> Result<(), HandlerError> {
            TransactionalGroupedHandler::process(self, tx, std::slice::from_ref(envelope)).await
        }
    }

    #[async_trait]
    impl TransactionalGroupedHandler<Env, Transaction<'static, Postgres>> for SqlFlaky {
        async fn process(
            &self,
            tx: &mut Transaction<'static, Postgres>,
            envelopes: &[Env],
        ) -> Result<(), HandlerError> {
            for e in envelopes {
                sqlx::query("INSERT INTO handled (persistence_id, seq_nr) VALUES ($1, $2)")
                    .bind(&*e.persistence_id)
                    .bind(e.seq_nr as i64)
                    .execute(&mut **tx)
                    .await?;
            }
            self.after_writing(envelopes)
        }
    }

    #[async_trait]
    impl TransactionalHandler<Env, Transaction<'static, Postgres>> for SqlFlaky {
        async fn process(
            &self,
            tx: &mut Transaction<'static, Postgres>,
            envelope: &Env,
        ) -> Result<(), HandlerError> {
            TransactionalGroupedHandler::process(self, tx, std::slice::from_ref(envelope)).await
        }
    }

    fn projection<S>(
        id: ProjectionId,
        source: QuerySource<Deposited>,
        store: S,
        form: Form,
        handler: SqlFlaky,
    ) -> Projection<Env>
    where
        S: TransactionalOffsetStore,
        SqlFlaky: TransactionalHandler<Env, S::Transaction>
            + TransactionalGroupedHandler<Env, S::Transaction>,
    {
        let projection = match form.grouping() {
            None => Projection::exactly_once(id, source, store, handler),
            Some(g) => Projection::grouped_exactly_once(id, source, store, g, handler),
        };
        projection
            .with_max_concurrency(form.concurrency())
            .with_save_offset(SaveOffset {
                after_envelopes: 2,
                after: Duration::from_millis(5),
            })
            .with_restart_backoff(quick_restarts())
    }

    /// Skip and fail after retries, and a stop during retries, in every exactly-once form on
    /// a SQL offset store (see the in-memory tests above): the handler's rows of a failed or
    /// skipped call roll back, every other envelope's row is there once, no seen row is left,
    /// and a new instance has nothing left to handle.
    pub async fn recovery_cases<J, S, F, G>(
        journal: &J,
        source: impl Fn(&str) -> QuerySource<Deposited>,
        store: S,
        rows: impl Fn(String) -> F,
        open_transactions: impl Fn() -> G,
    ) where
        J: JournalStore,
        S: TransactionalOffsetStore + Clone,
        SqlFlaky: TransactionalHandler<Env, S::Transaction>
            + TransactionalGroupedHandler<Env, S::Transaction>,
        F: std::future::Future<Output = Vec<Key>>,
        G: std::future::Future<Output = i64>,
    {
        let mut round = 0;
        for form in Form::ALL {
            for (then, stop) in [
                (AfterRetries::Skip, false),
                (AfterRetries::Fail, false),
                (AfterRetries::Fail, true),
            ] {
                round += 1;
                let case = format!("{form:?} {then:?} stop={stop}");
                let entity_type = format!("Case{round}");
                let ids: Vec<String> = (0..3).map(|n| format!("{entity_type}|{n}")).collect();
                for seq_nr in 1..=3 {
                    for id in &ids {
                        write_events(journal, id, seq_nr, seq_nr).await;
                    }
                }
                let mut all: Vec<Key> = ids
                    .iter()
                    .flat_map(|id| (1..=3).map(move |s| (id.clone(), s)))
                    .collect();
                all.sort();
                let id = ProjectionId::new("adv-sql", format!("case-{round}"));
                let poison = (ids[1].clone(), 2);
                let failures = match (then, stop) {
                    (AfterRetries::Fail, false) => 2, // 1 + 1 retry, then the restart passes
                    _ => u32::MAX,
                };
                let handler = SqlFlaky::new(poison.clone(), failures);
                let recovery = if stop {
                    endless_retries(then)
                } else {
                    quick_recovery(1, then)
                };
                let handle = projection(
                    id.clone(),
                    source(&entity_type),
                    store.clone(),
                    form,
                    handler.clone(),
                )
                .with_handler_recovery(recovery)
                .start();
                if stop {
                    let calls = handler.clone();
                    eventually(|| calls.poison_calls().len() >= 2).await;
                    let stopped =
                        tokio::time::timeout(Duration::from_secs(60), handle.stop()).await;
                    assert_eq!(stopped.ok(), Some(ProjectionState::Stopped), "{case}");
                    assert_eq!(
                        open_transactions().await,
                        0,
                        "{case}: a transaction left open"
                    );
                    let got = rows(entity_type.clone()).await;
                    assert!(!got.contains(&poison), "{case}: {got:?}");
                    // The next run handles the poison (never skipped by the stop).
                    let fixed = SqlFlaky::new(poison.clone(), 0);
                    let state = projection(
                        id.clone(),
                        source(&entity_type),
                        store.clone(),
                        form,
                        fixed.clone(),
                    )
                    .start()
                    .join()
                    .await;
                    assert_eq!(state, ProjectionState::Completed, "{case}");
                    assert_eq!(fixed.poison_calls().len(), 1, "{case}");
                    let mut got = rows(entity_type.clone()).await;
                    got.sort();
                    assert_eq!(got, all, "{case}: each row once");
                } else {
                    let done = handle
                        .wait_for(|p| p.state.is_terminal())
                        .await
                        .expect("ends");
                    assert_eq!(done.state, ProjectionState::Completed, "{case}");
                    let unit = handler.poison_calls()[0].clone();
                    let mut got = rows(entity_type.clone()).await;
                    got.sort();
                    let expected: Vec<Key> = match then {
                        AfterRetries::Skip => {
                            assert_eq!(done.skipped, unit.len() as u64, "{case}");
                            all.iter().filter(|k| !unit.contains(k)).cloned().collect()
                        }
                        AfterRetries::Fail => {
                            assert_eq!(done.restarts, 1, "{case}");
                            all.clone()
                        }
                    };
                    assert_eq!(got, expected, "{case}");
                }
                assert_eq!(
                    store.read_seen(&id).await.unwrap(),
                    SeenSeqNrs::new(),
                    "{case}: seen rows left"
                );
                // A new instance over the same store has nothing left.
                let again = SqlFlaky::new(poison, 0);
                let state =
                    projection(id, source(&entity_type), store.clone(), form, again.clone())
                        .start()
                        .join()
                        .await;
                assert_eq!(state, ProjectionState::Completed, "{case}");
                assert!(
                    again.calls.lock().unwrap().is_empty(),
                    "{case}: handled again"
                );
            }
        }
    }

    pub async fn sqlite() -> (tempfile::TempDir, SqliteJournal, String) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("journal.db").display());
        let journal = SqliteJournal::connect(&SqliteJournalOptions::new(url.clone()))
            .await
            .unwrap();
        sqlx::query("CREATE TABLE handled (persistence_id TEXT NOT NULL, seq_nr INTEGER NOT NULL)")
            .execute(journal.writer_pool())
            .await
            .unwrap();
        (dir, journal, url)
    }

    pub fn sqlite_source(journal: &SqliteJournal, entity_type: &str) -> QuerySource<Deposited> {
        QuerySource::events_by_slices(
            ReadJournal::new(journal.clone(), query_settings()),
            entity_type,
            0,
            1023,
        )
        .current()
    }

    pub fn sqlite_store(journal: &SqliteJournal) -> SqliteOffsetStore {
        SqliteOffsetStore::new(journal.writer_pool().clone())
    }

    pub async fn postgres() -> Option<(
        actix_persistence_sql::test_util::TestDatabase,
        PostgresJournal,
    )> {
        let database = actix_persistence_sql::test_util::TestDatabase::create().await?;
        let journal = PostgresJournal::connect(&PostgresJournalOptions::new(database.url()))
            .await
            .unwrap();
        sqlx::raw_sql(
            "CREATE TABLE handled (persistence_id TEXT NOT NULL, seq_nr BIGINT NOT NULL)",
        )
        .execute(journal.pool())
        .await
        .unwrap();
        Some((database, journal))
    }

    pub fn postgres_source(journal: &PostgresJournal, entity_type: &str) -> QuerySource<Deposited> {
        QuerySource::events_by_slices(
            ReadJournal::new(journal.clone(), query_settings()),
            entity_type,
            0,
            1023,
        )
        .current()
    }

    pub fn postgres_store(journal: &PostgresJournal) -> PostgresOffsetStore {
        PostgresOffsetStore::of_journal(journal)
    }
}

/// `recovery_cases` on SQLite (the offset store on the journal's writer pool, the read model
/// in the same database): see the in-memory scenarios above (akka-projection#17, #187, PR
/// #640).
#[tokio::test]
async fn sqlite_skip_fail_and_stop_during_retries_in_every_exactly_once_form() {
    use actix_persistence_projection::sqlx;
    let (_dir, journal, _url) = sql::sqlite().await;
    let pool = journal.writer_pool().clone();
    let rows = |entity_type: String| {
        let pool = pool.clone();
        async move {
            let rows: Vec<(String, i64)> = sqlx::query_as(
                "SELECT persistence_id, seq_nr FROM handled WHERE persistence_id LIKE ?",
            )
            .bind(format!("{entity_type}|%"))
            .fetch_all(&pool)
            .await
            .unwrap();
            rows.into_iter()
                .map(|(p, s)| (p, s as u64))
                .collect::<Vec<Key>>()
        }
    };
    sql::recovery_cases(
        &journal,
        |entity_type| sql::sqlite_source(&journal, entity_type),
        sql::sqlite_store(&journal),
        rows,
        // SQLite's one writer: a transaction left open would block the next run's writes.
        || async { 0 },
    )
    .await;
}

/// `recovery_cases` on PostgreSQL: no transaction of a stopped projection stays open.
#[tokio::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn postgres_skip_fail_and_stop_during_retries_in_every_exactly_once_form() {
    use actix_persistence_projection::sqlx;
    let Some((_database, journal)) = sql::postgres().await else {
        return;
    };
    let pool = journal.pool().clone();
    let rows = |entity_type: String| {
        let pool = pool.clone();
        async move {
            let rows: Vec<(String, i64)> = sqlx::query_as(
                "SELECT persistence_id, seq_nr FROM handled WHERE persistence_id LIKE $1",
            )
            .bind(format!("{entity_type}|%"))
            .fetch_all(&pool)
            .await
            .unwrap();
            rows.into_iter()
                .map(|(p, s)| (p, s as u64))
                .collect::<Vec<Key>>()
        }
    };
    let open = || {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*)::BIGINT FROM pg_stat_activity WHERE datname = current_database() \
                 AND pid <> pg_backend_pid() AND xact_start IS NOT NULL",
            )
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    sql::recovery_cases(
        &journal,
        |entity_type| sql::postgres_source(&journal, entity_type),
        sql::postgres_store(&journal),
        rows,
        open,
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Offsets under out-of-order completion, and an idle tail.
// ---------------------------------------------------------------------------------------------

/// Completes each call after a delay derived from its persistence id (out of source order),
/// records effects as `Flaky` does (exactly-once: on commit).
#[derive(Clone, Default)]
struct Jittery {
    effects: Recorder,
}

impl Jittery {
    async fn wait(envelope: &Env) {
        let n: u64 = envelope.persistence_id.bytes().map(u64::from).sum();
        tokio::time::sleep(Duration::from_millis((n * 7919) % 50)).await;
    }
}

#[async_trait]
impl Handler<Env> for Jittery {
    async fn process(&self, envelope: &Env) -> Result<(), HandlerError> {
        Self::wait(envelope).await;
        self.effects.handled.lock().unwrap().push(key(envelope));
        Ok(())
    }
}

#[async_trait]
impl TransactionalHandler<Env, InMemoryTransaction> for Jittery {
    async fn process(
        &self,
        tx: &mut InMemoryTransaction,
        envelope: &Env,
    ) -> Result<(), HandlerError> {
        Self::wait(envelope).await;
        let effects = self.effects.handled.clone();
        let k = key(envelope);
        tx.on_commit(move || effects.lock().unwrap().push(k));
        Ok(())
    }
}

fn timestamp_of(json: &str) -> i64 {
    match serde_json::from_str::<Offset>(json).unwrap() {
        Offset::Timestamp(t) => t.timestamp,
        other => panic!("{other:?}"),
    }
}

/// Eventuous/eventuous#165 (a partitioned subscription with many partitions stops committing
/// its checkpoint: calls complete out of order and the commit handler stalls on a gap) and
/// Eventuous#559 (the stored checkpoint parks below the head on an idle tail): 200 persistence
/// ids with one event each, 16 calls at once completing out of source order, over a live
/// source that then goes idle. The saved offsets only move forward, and without a stop or a
/// new event the stored offset reaches the last envelope (after `SaveOffset::after`); every
/// event takes effect once, and no seen row is left (exactly-once).
#[tokio::test(start_paused = true)]
async fn out_of_order_completion_keeps_the_offset_moving_to_the_idle_head() {
    for exactly_once in [false, true] {
        let case = format!("exactly_once={exactly_once}");
        let journal = InMemoryJournal::new();
        write_many(&journal, 200, 1).await;
        let store = Outage::default();
        let id = ProjectionId::new("adv-jitter", "all");
        let handler = Jittery::default();
        let projection = if exactly_once {
            Projection::exactly_once(
                id.clone(),
                live_source(&journal),
                store.clone(),
                handler.clone(),
            )
        } else {
            Projection::at_least_once(
                id.clone(),
                live_source(&journal),
                store.clone(),
                handler.clone(),
            )
        };
        let handle = projection
            .with_max_concurrency(16)
            .with_save_offset(SaveOffset {
                after_envelopes: 10,
                after: Duration::from_millis(200),
            })
            .start();
        let done = handle
            .wait_for(|p| p.handled == 200)
            .await
            .expect("handles all");
        // Idle: no new event, no stop; the time-based save comes.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let head = serde_json::to_string(&handle.progress().offset.unwrap()).unwrap();
        assert_eq!(
            store.inner.read_offset(&id).await.unwrap().as_deref(),
            Some(&*head),
            "{case}: the stored offset parks below the idle head"
        );
        let saved = store.saved.lock().unwrap().clone();
        assert!(saved.len() >= 2, "{case}: {} saves", saved.len());
        let stamps: Vec<i64> = saved.iter().map(|s| timestamp_of(s)).collect();
        assert!(
            stamps.windows(2).all(|w| w[0] <= w[1]),
            "{case}: saved offsets move back: {stamps:?}"
        );
        let effects = handler.effects.handled();
        assert_eq!(effects.len(), 200, "{case}");
        assert!(counts(&effects).values().all(|&n| n == 1), "{case}");
        assert_eq!(
            store.inner.read_seen(&id).await.unwrap(),
            SeenSeqNrs::new(),
            "{case}"
        );
        assert_eq!(done.skipped, 0);
        assert_eq!(handle.stop().await, ProjectionState::Stopped);
        resumes_with_nothing_left(&journal, id, store.inner.clone()).await;
    }
}

/// Two resets asked at once (two operators, or a retried management call while the first
/// one still drains; akka-projection's `ProjectionManagement.clearOffset` may be called from
/// several nodes): the projection resets once, and both callers learn that it did.
#[tokio::test(start_paused = true)]
async fn two_resets_at_once_both_report_the_reset() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 1, 2).await;
    let handler = Gated::default();
    let handle = Projection::at_least_once(
        ProjectionId::new("adv-two-resets", "all"),
        live_source(&journal),
        InMemoryOffsetStore::new(),
        handler.clone(),
    )
    .start();
    eventually(|| handler.started.handled().len() == 1).await;
    let release = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        handler.release(100);
    };
    let (first, second, ()) = tokio::join!(handle.reset(), handle.reset(), release);
    assert!(first.is_ok(), "first reset: {first:?}");
    assert!(second.is_ok(), "second reset: {second:?}");
    handle
        .wait_for(|p| p.handled >= 3)
        .await
        .expect("handles again from the start");
    assert_eq!(handle.stop().await, ProjectionState::Stopped);
}

/// Events deleted (`delete_events_to`, as after a snapshot) while a projection is behind them
/// (akka-persistence-r2dbc: a projection lagging behind a delete; EventStoreDB catch-up
/// subscriptions over a truncated stream; Marten's daemon over archived events): the events
/// still in the journal are each handled once, in order, the projection does not stall or fail
/// on the missing ones, and its stored offset ends at the head.
#[tokio::test(start_paused = true)]
async fn events_deleted_while_the_projection_is_behind_are_passed_over() {
    use actix_persistence_core::{FencingToken, JournalStore};
    for (exactly_once, form) in [
        (false, Form::Single),
        (true, Form::Single),
        (true, Form::Concurrent),
        (false, Form::Grouped),
    ] {
        let case = format!("{form:?} exactly_once={exactly_once}");
        let journal = InMemoryJournal::new();
        write_many(&journal, 3, 4).await;
        let store = InMemoryOffsetStore::new();
        let id = ProjectionId::new("adv-deleted", "all");
        // The first run is held at Account|0's second event (failing, retried) and stopped
        // there, behind.
        let handler = Flaky::new((pid(0), 2), u32::MAX);
        let first = flaky_projection(
            id.clone(),
            live_source(&journal),
            store.clone(),
            form,
            exactly_once,
            handler.clone(),
        )
        .with_handler_recovery(endless_retries(AfterRetries::Fail))
        .with_save_offset(SaveOffset {
            after_envelopes: 1,
            after: Duration::from_millis(1),
        })
        .start();
        let attempts = Arc::clone(&handler.attempts);
        eventually(|| attempts.load(Ordering::SeqCst) >= 2).await;
        assert_eq!(first.stop().await, ProjectionState::Stopped);
        let before_stop = handler.effects.handled();
        assert!(
            !before_stop.contains(&(pid(0), 2)),
            "{case}: {before_stop:?}"
        );
        let mut handler = handler;
        handler.failures = Arc::new(AtomicU32::new(0));
        // Account|1's events 1-3 are deleted; Account|2 all of them.
        journal
            .delete_messages_to(&pid(1), 3, FencingToken::UNOWNED)
            .await
            .unwrap();
        journal
            .delete_messages_to(&pid(2), 4, FencingToken::UNOWNED)
            .await
            .unwrap();
        let state = flaky_projection(
            id.clone(),
            current_source(&journal),
            store.clone(),
            form,
            exactly_once,
            handler.clone(),
        )
        .start()
        .join()
        .await;
        assert_eq!(state, ProjectionState::Completed, "{case}");
        let effects = handler.effects.handled();
        let after = &effects[before_stop.len()..];
        let mut expected: Vec<Key> = all_events(3, 4)
            .into_iter()
            .filter(|k| !before_stop.contains(k))
            .filter(|(p, s)| !(*p == pid(1) && *s <= 3) && *p != pid(2))
            .collect();
        expected.sort();
        let mut got = after.to_vec();
        got.sort();
        assert_eq!(got, expected, "{case}: handled after the delete");
        for (p, seq_nrs) in by_pid(&effects) {
            assert!(
                seq_nrs.windows(2).all(|w| w[0] < w[1]),
                "{case}: {p} {seq_nrs:?}"
            );
        }
        resumes_with_nothing_left(&journal, id, store).await;
    }
}

/// A reset asked while a call is retried (the same as akka-projection#187 for a stop): it
/// does not wait for every retry; the retries end, the run fails and restarts, and the reset
/// says so (`Restarting`) instead of hanging. The projection runs on and handles the envelope
/// once it can.
#[tokio::test(start_paused = true)]
async fn a_reset_during_retries_answers_instead_of_waiting_for_every_retry() {
    use actix_persistence_projection::ResetError;
    let journal = InMemoryJournal::new();
    write_many(&journal, 2, 2).await;
    let handler = Flaky::new((pid(1), 1), u32::MAX);
    let handle = flaky_projection(
        ProjectionId::new("adv-reset-retries", "all"),
        live_source(&journal),
        InMemoryOffsetStore::new(),
        Form::Single,
        false,
        handler.clone(),
    )
    .with_handler_recovery(endless_retries(AfterRetries::Fail))
    .start();
    let attempts = Arc::clone(&handler.attempts);
    eventually(|| attempts.load(Ordering::SeqCst) >= 2).await;
    let reset = tokio::time::timeout(Duration::from_secs(600), handle.reset()).await;
    assert!(
        matches!(reset, Ok(Err(ResetError::Restarting))),
        "{reset:?}"
    );
    handle
        .wait_for(|p| p.restarts == 1)
        .await
        .expect("restarts");
    handler.failures.store(0, Ordering::SeqCst);
    handle.wait_for(|p| p.handled >= 4).await.expect("the rest");
    assert_eq!(handle.stop().await, ProjectionState::Stopped);
    assert_eq!(counts(&handler.effects.handled())[&(pid(1), 1)], 1);
}
