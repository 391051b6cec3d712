//! A failing or panicking handler: retried with backoff, then skipped or failing the
//! projection, which restarts from its stored offset. Never a silent drop, never a hang.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_persistence_core::InMemoryJournal;
use actix_persistence_projection::offset_store::{SeenSeqNrs, StoredProgress};
use actix_persistence_projection::{
    AfterRetries, Handler, HandlerError, InMemoryOffsetStore, InMemoryTransaction, OffsetStore,
    OffsetStoreError, Projection, ProjectionId, ProjectionState, RestartBackoff, SaveOffset,
};
use async_trait::async_trait;
use common::*;

fn id() -> ProjectionId {
    ProjectionId::for_slices("errors", 0, 1023)
}

/// Fails (or panics) on one (persistence id, seq_nr) the first `failures` times.
#[derive(Clone)]
struct FailsOn {
    target: (String, u64),
    failures: u32,
    panic: bool,
    attempts: Arc<AtomicU32>,
    recorder: Recorder,
}

impl FailsOn {
    fn new(target: (String, u64), failures: u32, panic: bool) -> Self {
        FailsOn {
            target,
            failures,
            panic,
            attempts: Arc::default(),
            recorder: Recorder::default(),
        }
    }
}

#[async_trait]
impl Handler<Env> for FailsOn {
    async fn process(&self, envelope: &Env) -> Result<(), HandlerError> {
        if (envelope.persistence_id.to_string(), envelope.seq_nr) == self.target {
            let attempt = self.attempts.fetch_add(1, Ordering::SeqCst) + 1;
            if attempt <= self.failures {
                if self.panic {
                    panic!("handler panics on attempt {attempt}");
                }
                return Err(format!("read model unavailable (attempt {attempt})").into());
            }
        }
        self.recorder.process(envelope).await
    }
}

#[tokio::test]
async fn a_failing_handler_is_retried_until_it_succeeds() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 3, 3).await;
    let handler = FailsOn::new((pid(1), 2), 2, false);
    let handle = Projection::at_least_once(
        id(),
        current_source(&journal),
        InMemoryOffsetStore::new(),
        handler.clone(),
    )
    .with_handler_recovery(quick_recovery(2, AfterRetries::Fail))
    .start();
    assert_eq!(handle.join().await, ProjectionState::Completed);
    assert_eq!(handler.attempts.load(Ordering::SeqCst), 3);
    assert_eq!(handler.recorder.handled().len(), 9);
}

#[tokio::test]
async fn after_its_retries_a_failing_envelope_is_skipped_and_counted() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 3, 3).await;
    let handler = FailsOn::new((pid(1), 2), u32::MAX, false);
    let handle = Projection::at_least_once(
        id(),
        current_source(&journal),
        InMemoryOffsetStore::new(),
        handler.clone(),
    )
    .with_handler_recovery(quick_recovery(2, AfterRetries::Skip))
    .start();
    let progress = handle
        .wait_for(|p| p.state.is_terminal())
        .await
        .expect("ends");
    assert_eq!(progress.state, ProjectionState::Completed);
    assert_eq!(progress.skipped, 1);
    assert_eq!(progress.handled, 9);
    assert_eq!(handler.attempts.load(Ordering::SeqCst), 3);
    assert!(!handler.recorder.handled().contains(&(pid(1), 2)));
    assert_eq!(handler.recorder.handled().len(), 8);
    // Account|1's later event still comes after the skipped one.
    assert_eq!(handler.recorder.by_pid()[&pid(1)], vec![1, 3]);
}

#[tokio::test]
async fn after_its_retries_a_failing_envelope_fails_the_projection_which_restarts_from_its_offset()
{
    let journal = InMemoryJournal::new();
    write_many(&journal, 3, 3).await;
    // Fails 5 times: 1 attempt + 1 retry per run, so the third run gets through.
    let handler = FailsOn::new((pid(1), 2), 4, false);
    let handle = Projection::at_least_once(
        id(),
        current_source(&journal),
        InMemoryOffsetStore::new(),
        handler.clone(),
    )
    .with_handler_recovery(quick_recovery(1, AfterRetries::Fail))
    .with_restart_backoff(quick_restarts())
    .start();
    let progress = handle
        .wait_for(|p| p.state.is_terminal())
        .await
        .expect("ends");
    assert_eq!(progress.state, ProjectionState::Completed);
    assert_eq!(progress.restarts, 2);
    let error = progress.last_error.expect("the failure is reported");
    assert!(
        error.contains("Account|1") && error.contains("seq_nr 2"),
        "{error}"
    );
    // Every event handled; none skipped. Events before the failure may come again
    // (at-least-once), but the one that failed was handled exactly when it succeeded.
    let counts = handler.recorder.counts();
    assert_eq!(counts.len(), 9);
    assert_eq!(counts[&(pid(1), 2)], 1);
}

#[tokio::test]
async fn a_panicking_handler_is_retried_like_a_failing_one() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 2, 2).await;
    let handler = FailsOn::new((pid(0), 1), 1, true);
    let handle = Projection::at_least_once(
        id(),
        current_source(&journal),
        InMemoryOffsetStore::new(),
        handler.clone(),
    )
    .with_handler_recovery(quick_recovery(1, AfterRetries::Fail))
    .start();
    assert_eq!(handle.join().await, ProjectionState::Completed);
    assert_eq!(handler.attempts.load(Ordering::SeqCst), 2);
    assert_eq!(handler.recorder.handled().len(), 4);
}

#[tokio::test]
async fn a_projection_that_keeps_failing_gives_up_after_max_restarts() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 1, 1).await;
    let handler = FailsOn::new((pid(0), 1), u32::MAX, false);
    let handle = Projection::at_least_once(
        id(),
        current_source(&journal),
        InMemoryOffsetStore::new(),
        handler.clone(),
    )
    .with_handler_recovery(quick_recovery(0, AfterRetries::Fail))
    .with_restart_backoff(RestartBackoff {
        max_restarts: Some(2),
        ..quick_restarts()
    })
    .start();
    let progress = handle
        .wait_for(|p| p.state.is_terminal())
        .await
        .expect("ends");
    assert_eq!(progress.state, ProjectionState::Failed);
    assert_eq!(progress.restarts, 2);
    assert_eq!(handler.attempts.load(Ordering::SeqCst), 3);
}

/// A poison envelope (its handler always fails) at the front of a projection with
/// `max_concurrency` 4 over a live source: each run handles the envelopes behind it (at
/// least once: again after every restart), but the offset never passes it. Those handled
/// envelopes are no progress: the projection still gives up after `max_restarts` instead of
/// restarting forever (each run's handled envelopes used to reset the count of restarts).
#[tokio::test]
async fn a_poison_envelope_ahead_of_handled_ones_still_ends_after_max_restarts() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 4, 3).await;
    let handler = FailsOn::new((pid(0), 1), u32::MAX, false);
    let store = InMemoryOffsetStore::new();
    let handle =
        Projection::at_least_once(id(), live_source(&journal), store.clone(), handler.clone())
            .with_max_concurrency(4)
            .with_handler_recovery(quick_recovery(1, AfterRetries::Fail))
            .with_restart_backoff(RestartBackoff {
                max_restarts: Some(2),
                ..quick_restarts()
            })
            .start();
    let progress = handle
        .wait_for(|p| p.state.is_terminal() || p.restarts > 2)
        .await
        .expect("ends or restarts too often");
    assert_eq!(progress.state, ProjectionState::Failed);
    assert_eq!(progress.restarts, 2);
    // Three runs, two attempts each on the poison envelope; never skipped, never stored past.
    assert_eq!(handler.attempts.load(Ordering::SeqCst), 6);
    assert!(!handler.recorder.handled().contains(&(pid(0), 1)));
    assert!(
        handler.recorder.handled().len() >= 3 * 3,
        "the other ids ran each time"
    );
    use actix_persistence_projection::OffsetStore;
    assert_eq!(store.read_offset(&id()).await.unwrap(), None);
    let error = progress.last_error.expect("the failure is reported");
    assert!(
        error.contains("Account|0") && error.contains("seq_nr 1"),
        "{error}"
    );
}

/// An event that does not decode into the projection's event type (a poison event in the
/// source): it is never skipped silently nor handed to the handler; the run fails with the
/// query's decode error naming the event, after saving the offset of the envelopes before
/// it, and the restarts (no progress) end after `max_restarts`, in `Failed`.
#[tokio::test]
async fn an_event_that_does_not_decode_fails_the_projection_and_is_never_skipped() {
    use actix_persistence_core::{AtomicWrite, JournalStore};
    let journal = InMemoryJournal::new();
    write_events(&journal, &pid(0), 1, 2).await;
    let mut poison = repr(&pid(0), 3, 3);
    poison.payload = br#"{"amount":"three"}"#.to_vec();
    journal
        .write_messages(vec![AtomicWrite::new(vec![poison]).unwrap()])
        .await
        .unwrap()[0]
        .as_ref()
        .expect("stored");
    write_events(&journal, &pid(0), 4, 4).await;
    let recorder = Recorder::default();
    let store = InMemoryOffsetStore::new();
    let handle =
        Projection::at_least_once(id(), live_source(&journal), store.clone(), recorder.clone())
            .with_restart_backoff(RestartBackoff {
                max_restarts: Some(2),
                ..quick_restarts()
            })
            .start();
    let progress = handle
        .wait_for(|p| p.state.is_terminal() || p.restarts > 2)
        .await
        .expect("ends or restarts too often");
    assert_eq!(progress.state, ProjectionState::Failed);
    assert_eq!(progress.restarts, 2);
    let error = progress.last_error.expect("the failure is reported");
    assert!(
        error.contains("Account|0") && error.contains('3') && error.contains("decode"),
        "{error}"
    );
    // 1 and 2 handled once (saved before the failure, so not again); 3 and 4 never.
    assert_eq!(recorder.handled(), vec![(pid(0), 1), (pid(0), 2)]);
    use actix_persistence_projection::OffsetStore;
    assert!(store.read_offset(&id()).await.unwrap().is_some());
}

/// A stored offset that does not parse is never taken for "no offset" (which would handle
/// the whole source again): the run fails with `CorruptOffset` naming the fix, and the
/// restarts end at `max_restarts`. A corrupt row of another key of the same name whose slices
/// do not overlap this instance's concerns only that instance: this one runs.
#[tokio::test]
async fn a_corrupt_stored_offset_fails_its_own_instance_only() {
    use actix_persistence_projection::OffsetStore;
    let journal = two_events_per_id_in_both_halves(2).await;
    let store = InMemoryOffsetStore::new();
    let half = ProjectionId::for_slices("errors", 512, 1023);
    let epoch = store.take_ownership(&half, None).await.unwrap();
    store
        .save_offset(&half, epoch, "not an offset", &[])
        .await
        .unwrap();

    let lower = ProjectionId::for_slices("errors", 0, 511);
    let recorder = Recorder::default();
    let source = current_slices(&journal, 0, 511);
    let state = Projection::at_least_once(lower, source, store.clone(), recorder.clone())
        .with_restart_backoff(RestartBackoff {
            max_restarts: Some(0),
            ..quick_restarts()
        })
        .start()
        .join()
        .await;
    assert_eq!(state, ProjectionState::Completed);
    assert_eq!(recorder.handled().len(), 4);

    let recorder = Recorder::default();
    let source = current_slices(&journal, 512, 1023);
    let handle = Projection::at_least_once(half, source, store, recorder.clone())
        .with_restart_backoff(RestartBackoff {
            max_restarts: Some(1),
            ..quick_restarts()
        })
        .start();
    let progress = handle
        .wait_for(|p| p.state.is_terminal() || p.restarts > 1)
        .await
        .expect("ends");
    assert_eq!(progress.state, ProjectionState::Failed);
    let error = progress.last_error.expect("reported");
    assert!(
        error.contains("not an offset") && error.contains("reset"),
        "{error}"
    );
    assert!(recorder.handled().is_empty());
}

/// An id naming one slice range over a source reading another (the source's range changed,
/// the id kept): the instance's stored offset would be taken as covering slices it never
/// read, and their events before it skipped. The projection does not start, says why, and
/// handles nothing; with matching ranges it handles every event of its range.
#[tokio::test]
async fn an_id_and_a_source_over_different_slice_ranges_do_not_start() {
    // Two ids in each half of the slices, two events each.
    let journal = two_events_per_id_in_both_halves(2).await;
    let store = InMemoryOffsetStore::new();
    let half = ProjectionId::for_slices("errors", 0, 511);
    let recorder = Recorder::default();
    let whole = current_slices(&journal, 0, 1023);
    let handle =
        Projection::at_least_once(half.clone(), whole, store.clone(), recorder.clone()).start();
    let progress = handle
        .wait_for(|p| p.state.is_terminal())
        .await
        .expect("ends");
    assert_eq!(progress.state, ProjectionState::Failed);
    assert_eq!(progress.restarts, 0);
    let error = progress.last_error.expect("reported");
    assert!(
        error.contains("slices 0-511") && error.contains("slices 0-1023"),
        "{error}"
    );
    assert!(recorder.handled().is_empty());
    use actix_persistence_projection::OffsetStore;
    assert!(store.read_progress("errors").await.unwrap().is_empty());

    let matching = current_slices(&journal, 0, 511);
    let state = Projection::at_least_once(half, matching, store, recorder.clone())
        .start()
        .join()
        .await;
    assert_eq!(state, ProjectionState::Completed);
    assert_eq!(recorder.handled().len(), 4);
}

#[tokio::test]
async fn a_key_that_spells_a_slice_range_another_way_does_not_start() {
    let journal = two_events_per_id_in_both_halves(1).await;
    let store = InMemoryOffsetStore::new();
    let recorder = Recorder::default();
    // "slices-00-511" names the range of "slices-0-511" with an offset row of its own.
    let spelled = ProjectionId::new("errors", "slices-00-511");
    let source = current_slices(&journal, 0, 511);
    let progress = Projection::at_least_once(spelled, source, store.clone(), recorder.clone())
        .start()
        .wait_for(|p| p.state.is_terminal())
        .await
        .expect("ends");
    assert_eq!(progress.state, ProjectionState::Failed);
    assert_eq!(progress.restarts, 0);
    let error = progress.last_error.expect("reported");
    assert!(error.contains("not a slice range key"), "{error}");
    assert!(recorder.handled().is_empty());
    use actix_persistence_projection::OffsetStore;
    assert!(store.read_progress("errors").await.unwrap().is_empty());
}

/// An id that not every offset store can hold fails at start on every store alike: before,
/// a NUL in the name worked on SQLite and in memory but failed on PostgreSQL with a database
/// error at the first offset save, after its handler had run.
#[tokio::test]
async fn an_id_no_offset_store_can_hold_does_not_start() {
    let long = "k".repeat(actix_persistence_projection::MAX_PROJECTION_KEY_BYTES + 1);
    let bad = [
        (ProjectionId::new("err\0ors", "all"), "name holds a NUL"),
        (ProjectionId::new("errors", "a\0"), "key holds a NUL"),
        (ProjectionId::new("", "all"), "name is empty"),
        (ProjectionId::new("errors", ""), "key is empty"),
        (
            ProjectionId::new("errors", long.as_str()),
            "key is 513 bytes long",
        ),
    ];
    for (id, why) in bad {
        let journal = two_events_per_id_in_both_halves(1).await;
        let store = InMemoryOffsetStore::new();
        let recorder = Recorder::default();
        let source = current_slices(&journal, 0, 1023);
        let progress =
            Projection::at_least_once(id.clone(), source, store.clone(), recorder.clone())
                .start()
                .wait_for(|p| p.state.is_terminal())
                .await
                .expect("ends");
        assert_eq!(progress.state, ProjectionState::Failed, "{id:?}");
        assert_eq!(progress.restarts, 0);
        let error = progress.last_error.expect("reported");
        assert!(
            error.contains("cannot be stored") && error.contains(why),
            "{id:?}: {error}"
        );
        assert!(recorder.handled().is_empty(), "{id:?}: nothing handled");
        assert!(store.read_progress(&id.name).await.unwrap().is_empty());
    }
    let longest = ProjectionId::new(
        "n".repeat(actix_persistence_projection::MAX_PROJECTION_NAME_BYTES),
        "k".repeat(actix_persistence_projection::MAX_PROJECTION_KEY_BYTES),
    );
    assert_eq!(longest.problem(), None, "the limits themselves are allowed");
    let longest_tag = ProjectionId::for_tag("errors", &"t".repeat(255));
    assert_eq!(longest_tag.problem(), None, "every tag has a projection id");
}

/// A journal with `per_half` ids in each half of the slices (0-511, 512-1023), two events each.
async fn two_events_per_id_in_both_halves(per_half: usize) -> InMemoryJournal {
    let journal = InMemoryJournal::new();
    for pid in ids_in_every_range(2, per_half) {
        write_events(&journal, &pid, 1, 2).await;
    }
    journal
}

/// An in-memory offset store whose offset saves of the owner epoch `hold` wait until the test
/// releases them (a lock held in the database, a store that stopped answering).
#[derive(Clone)]
struct HeldSaves {
    inner: InMemoryOffsetStore,
    hold: Arc<std::sync::atomic::AtomicU64>,
    released: Arc<tokio::sync::Semaphore>,
    held: Arc<AtomicU32>,
}

#[async_trait]
impl OffsetStore for HeldSaves {
    async fn read_offset(&self, id: &ProjectionId) -> Result<Option<String>, OffsetStoreError> {
        self.inner.read_offset(id).await
    }

    async fn read_seen(&self, id: &ProjectionId) -> Result<SeenSeqNrs, OffsetStoreError> {
        self.inner.read_seen(id).await
    }

    async fn read_progress(&self, name: &str) -> Result<Vec<StoredProgress>, OffsetStoreError> {
        self.inner.read_progress(name).await
    }

    async fn read_owners(&self, name: &str) -> Result<Vec<ProjectionId>, OffsetStoreError> {
        self.inner.read_owners(name).await
    }

    async fn take_ownership(
        &self,
        id: &ProjectionId,
        held: Option<u64>,
    ) -> Result<u64, OffsetStoreError> {
        self.inner.take_ownership(id, held).await
    }

    async fn save_offset(
        &self,
        id: &ProjectionId,
        epoch: u64,
        offset: &str,
        covered: &[(String, u64)],
    ) -> Result<(), OffsetStoreError> {
        if self.hold.load(Ordering::SeqCst) == epoch {
            self.held.fetch_add(1, Ordering::SeqCst);
            self.released.acquire().await.expect("open").forget();
        }
        self.inner.save_offset(id, epoch, offset, covered).await
    }

    async fn reset(&self, id: &ProjectionId) -> Result<(), OffsetStoreError> {
        self.inner.reset(id).await
    }
}

/// A handler fails while the offset save under way hangs: the failure is reported and the
/// projection restarts (after at most its restart backoff) instead of waiting for the save
/// forever, unreported and still `Running`. The save given up on, released later, is fenced
/// by the restart and does not move the stored offset back.
#[tokio::test]
async fn a_failure_while_an_offset_save_hangs_is_reported_and_restarts() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 2, 3).await;
    let store = HeldSaves {
        inner: InMemoryOffsetStore::new(),
        hold: Arc::default(),
        released: Arc::new(tokio::sync::Semaphore::new(0)),
        held: Arc::default(),
    };
    // The first run's saves hang (its owner epoch is 1), the restarted run's do not.
    store.hold.store(1, Ordering::SeqCst);
    // Fails once on Account|1's third event, the last of the six.
    let handler = FailsOn::new((pid(1), 3), 1, false);
    let handle =
        Projection::at_least_once(id(), live_source(&journal), store.clone(), handler.clone())
            .with_save_offset(SaveOffset {
                after_envelopes: 1,
                after: Duration::from_millis(1),
            })
            .with_handler_recovery(quick_recovery(0, AfterRetries::Fail))
            .with_restart_backoff(quick_restarts())
            .start();
    let restarted = tokio::time::timeout(
        Duration::from_secs(10),
        handle.wait_for(|p| p.restarts >= 1 && p.last_error.is_some()),
    )
    .await;
    let progress = handle.progress();
    assert!(
        matches!(restarted, Ok(Some(_))),
        "the failure is neither reported nor restarted while a save hangs: {progress:?}"
    );
    let error = progress.last_error.expect("reported");
    assert!(
        error.contains("Account|1") && error.contains("seq_nr 3"),
        "{error}"
    );
    // The restarted run handles the rest and saves its offset.
    eventually(|| handler.recorder.counts().get(&(pid(1), 3)) == Some(&1)).await;
    let stored = || async {
        store
            .inner
            .read_offset(&id())
            .await
            .expect("read")
            .expect("an offset")
    };
    let mut newest = None;
    for _ in 0..10_000 {
        let progress = handle.progress();
        if let Some(offset) = progress.offset {
            let json = serde_json::to_string(&offset).expect("json");
            if store.inner.read_offset(&id()).await.expect("read") == Some(json.clone()) {
                newest = Some(json);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let newest = newest.expect("the restarted run saves the offset of everything handled");
    // The saves of the failed run, released now, are fenced: the offset stays the newest.
    let held = store.held.load(Ordering::SeqCst) as usize;
    assert!(held >= 1, "a save was held");
    store.released.add_permits(held);
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        stored().await,
        newest,
        "an older save moved the offset back"
    );
    assert_eq!(handle.stop().await, ProjectionState::Stopped);
}

/// An envelope of a custom source whose offset cannot be stored as JSON (a map with
/// non-string keys).
struct Odd {
    seq_nr: u64,
}

type OddOffset = std::collections::HashMap<(u64, u64), u64>;

impl actix_persistence_projection::Envelope for Odd {
    type Offset = OddOffset;

    fn persistence_id(&self) -> &str {
        "Odd|1"
    }

    fn seq_nr(&self) -> u64 {
        self.seq_nr
    }

    fn offset(&self) -> OddOffset {
        OddOffset::from([((1, self.seq_nr), self.seq_nr)])
    }

    fn timestamp_ms(&self) -> i64 {
        0
    }
}

/// Three envelopes, then the end.
struct OddSource;

#[async_trait]
impl actix_persistence_projection::SourceProvider for OddSource {
    type Envelope = Odd;

    async fn source(
        &self,
        _offset: Option<OddOffset>,
    ) -> Result<
        actix_persistence_projection::EnvelopeStream<Odd>,
        actix_persistence_projection::BoxError,
    > {
        use futures::StreamExt;
        Ok(futures::stream::iter((1..=3).map(|seq_nr| Ok(Odd { seq_nr }))).boxed())
    }

    async fn lag(
        &self,
        _offset: Option<&OddOffset>,
    ) -> Result<actix_persistence_projection::SourceLag, actix_persistence_projection::BoxError>
    {
        Ok(actix_persistence_projection::SourceLag::default())
    }
}

/// Counts the envelopes whose transaction committed.
#[derive(Clone, Default)]
struct CommittedCount(Arc<AtomicU32>);

#[async_trait]
impl actix_persistence_projection::TransactionalHandler<Odd, InMemoryTransaction>
    for CommittedCount
{
    async fn process(&self, tx: &mut InMemoryTransaction, _: &Odd) -> Result<(), HandlerError> {
        let count = Arc::clone(&self.0);
        tx.on_commit(move || {
            count.fetch_add(1, Ordering::SeqCst);
        });
        Ok(())
    }
}

/// Exactly-once (one call at a time, the offset saved in the handler's transaction) over a
/// source whose offset cannot be stored as JSON: no handler transaction commits without its
/// offset. Before, the offset was left out of the transaction, which committed the handler's
/// writes alone; the save at the end then failed, and each restart committed every envelope
/// again (handled twice under exactly-once).
#[tokio::test]
async fn exactly_once_never_commits_a_handler_transaction_whose_offset_cannot_be_stored() {
    let handler = CommittedCount::default();
    let handle = Projection::exactly_once(
        ProjectionId::new("odd", "all"),
        OddSource,
        InMemoryOffsetStore::new(),
        handler.clone(),
    )
    .with_restart_backoff(RestartBackoff {
        max_restarts: Some(1),
        ..quick_restarts()
    })
    .start();
    let progress = handle
        .wait_for(|p| p.state.is_terminal())
        .await
        .expect("ends");
    assert_eq!(progress.state, ProjectionState::Failed);
    let error = progress.last_error.expect("reported");
    assert!(error.contains("cannot be stored as JSON"), "{error}");
    assert_eq!(
        handler.0.load(Ordering::SeqCst),
        0,
        "a transaction committed the handler's writes without its offset"
    );
}
