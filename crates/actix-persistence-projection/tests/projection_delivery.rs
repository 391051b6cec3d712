//! At-least-once and exactly-once delivery over the in-memory journal and offset store.

mod common;

use std::sync::{Arc, Mutex};

use actix_persistence_core::query::Offset;
use actix_persistence_core::InMemoryJournal;
use actix_persistence_projection::{
    HandlerError, InMemoryOffsetStore, InMemoryTransaction, OffsetStore, Projection, ProjectionId,
    ProjectionState, SaveOffset, TransactionalHandler,
};
use async_trait::async_trait;
use common::*;

fn id() -> ProjectionId {
    ProjectionId::for_slices("balances", 0, 1023)
}

#[tokio::test]
async fn every_event_is_handled_once_in_seq_order_per_persistence_id() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 5, 4).await;
    let recorder = Recorder::default();
    let handle = Projection::at_least_once(
        id(),
        current_source(&journal),
        InMemoryOffsetStore::new(),
        recorder.clone(),
    )
    .start();
    assert_eq!(handle.join().await, ProjectionState::Completed);

    assert_eq!(recorder.handled().len(), 20);
    assert!(recorder.counts().values().all(|&n| n == 1));
    for (_, seq_nrs) in recorder.by_pid() {
        assert_eq!(seq_nrs, vec![1, 2, 3, 4]);
    }
}

#[tokio::test]
async fn a_restart_resumes_after_the_stored_offset() {
    let journal = InMemoryJournal::new();
    let store = InMemoryOffsetStore::new();
    write_many(&journal, 3, 2).await;
    let first = Recorder::default();
    Projection::at_least_once(id(), current_source(&journal), store.clone(), first.clone())
        .start()
        .join()
        .await;
    assert_eq!(first.handled().len(), 6);

    write_events(&journal, &pid(0), 3, 4).await;
    let second = Recorder::default();
    Projection::at_least_once(
        id(),
        current_source(&journal),
        store.clone(),
        second.clone(),
    )
    .start()
    .join()
    .await;
    assert_eq!(second.handled(), vec![(pid(0), 3), (pid(0), 4)]);
}

#[tokio::test]
async fn at_least_once_after_a_crash_handles_unsaved_envelopes_again_and_skips_none() {
    let journal = InMemoryJournal::new();
    let store = InMemoryOffsetStore::new();
    write_many(&journal, 4, 5).await;
    let gated = Gated::default();
    let handle =
        Projection::at_least_once(id(), live_source(&journal), store.clone(), gated.clone())
            .with_save_offset(SaveOffset {
                after_envelopes: 5,
                after: std::time::Duration::from_secs(3600),
            })
            .start();
    // 7 envelopes handled: the offset was saved after the 5th only.
    gated.release(7);
    handle
        .wait_for(|p| p.handled >= 7)
        .await
        .expect("handled 7");
    handle.abort().await;
    let saved: Offset =
        serde_json::from_str(&store.read_offset(&id()).await.unwrap().unwrap()).unwrap();
    assert!(matches!(saved, Offset::Timestamp(_)));

    let again = Recorder::default();
    Projection::at_least_once(id(), current_source(&journal), store, again.clone())
        .start()
        .join()
        .await;
    // Envelopes 6 and 7 come again; none of the 20 is missing.
    assert_eq!(again.handled().len(), 15);
    let mut all = gated.finished.handled();
    all.extend(again.handled());
    let counts = {
        let mut c = std::collections::HashMap::new();
        for k in all {
            *c.entry(k).or_insert(0) += 1;
        }
        c
    };
    assert_eq!(counts.len(), 20);
    assert_eq!(counts.values().filter(|&&n| n == 2).count(), 2);
}

/// An in-memory read model: deposits per persistence id, and every handled (id, seq_nr).
#[derive(Clone, Default)]
struct Balances {
    handled: Arc<Mutex<Vec<(String, u64)>>>,
}

#[async_trait]
impl TransactionalHandler<Env, InMemoryTransaction> for Balances {
    async fn process(
        &self,
        tx: &mut InMemoryTransaction,
        envelope: &Env,
    ) -> Result<(), HandlerError> {
        let handled = Arc::clone(&self.handled);
        let key = (envelope.persistence_id.to_string(), envelope.seq_nr);
        tx.on_commit(move || handled.lock().expect("lock").push(key));
        Ok(())
    }
}

#[tokio::test]
async fn exactly_once_after_a_crash_handles_every_event_once() {
    let journal = InMemoryJournal::new();
    let store = InMemoryOffsetStore::new();
    write_many(&journal, 4, 5).await;
    let balances = Balances::default();
    let handle =
        Projection::exactly_once(id(), live_source(&journal), store.clone(), balances.clone())
            .start();
    handle
        .wait_for(|p| p.handled >= 9)
        .await
        .expect("handled 9");
    handle.abort().await;
    let committed = balances.handled.lock().unwrap().len();
    assert!(committed >= 9);

    Projection::exactly_once(id(), current_source(&journal), store, balances.clone())
        .start()
        .join()
        .await;
    let handled = balances.handled.lock().unwrap().clone();
    assert_eq!(
        handled.len(),
        20,
        "each of the 20 events committed exactly once"
    );
    let distinct: std::collections::HashSet<_> = handled.into_iter().collect();
    assert_eq!(distinct.len(), 20);
}

#[tokio::test]
async fn exactly_once_with_max_concurrency_after_a_crash_handles_every_event_once() {
    let journal = InMemoryJournal::new();
    let store = InMemoryOffsetStore::new();
    write_many(&journal, 8, 5).await;
    let balances = Balances::default();
    let handle =
        Projection::exactly_once(id(), live_source(&journal), store.clone(), balances.clone())
            .with_max_concurrency(8)
            .with_save_offset(SaveOffset {
                after_envelopes: 1000,
                after: std::time::Duration::from_secs(3600),
            })
            .start();
    handle
        .wait_for(|p| p.handled >= 17)
        .await
        .expect("handled 17");
    handle.abort().await;
    // The offset was never saved (1000 envelopes, an hour): the restart reads everything again
    // and skips what the seen sequence numbers say was committed.
    assert_eq!(store.read_offset(&id()).await.unwrap(), None);
    let rows = store.read_seen(&id()).await.unwrap().len();
    assert!(
        (1..=8).contains(&rows),
        "seen rows before the restart: {rows}"
    );

    Projection::exactly_once(
        id(),
        current_source(&journal),
        store.clone(),
        balances.clone(),
    )
    .with_max_concurrency(8)
    .start()
    .join()
    .await;
    let handled = balances.handled.lock().unwrap().clone();
    assert_eq!(handled.len(), 40);
    let distinct: std::collections::HashSet<_> = handled.into_iter().collect();
    assert_eq!(distinct.len(), 40);
    assert!(
        store.read_seen(&id()).await.unwrap().is_empty(),
        "the final offset covers every seen row"
    );
}

#[tokio::test]
async fn exactly_once_with_max_concurrency_forgets_the_seen_rows_the_offset_covers() {
    let journal = InMemoryJournal::new();
    let store = InMemoryOffsetStore::new();
    write_many(&journal, 60, 3).await;
    let balances = Balances::default();
    let state = Projection::exactly_once(
        id(),
        current_source(&journal),
        store.clone(),
        balances.clone(),
    )
    .with_max_concurrency(8)
    .with_save_offset(SaveOffset {
        after_envelopes: 5,
        after: std::time::Duration::from_secs(3600),
    })
    .start()
    .join()
    .await;
    assert_eq!(state, ProjectionState::Completed);
    assert_eq!(balances.handled.lock().unwrap().len(), 180);
    assert!(store.read_seen(&id()).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_rescaled_projection_resumes_every_slice_from_its_own_progress() {
    let journal = InMemoryJournal::new();
    let committed = Recorder::default();
    common::a_rescaled_projection_resumes_every_slice_from_its_own_progress(
        &journal,
        |min, max| {
            actix_persistence_projection::QuerySource::events_by_slices(
                read_journal(&journal),
                "Account",
                min,
                max,
            )
            .current()
        },
        InMemoryOffsetStore::new(),
        |poison| CommittedRecorder {
            poison,
            committed: committed.clone(),
        },
        || async { committed.handled() },
    )
    .await;
}

#[tokio::test]
async fn a_projection_resumes_inside_one_timestamp() {
    let journal = InMemoryJournal::new();
    let committed = Recorder::default();
    common::a_projection_resumes_inside_one_timestamp(
        &journal,
        |entity_type| {
            actix_persistence_projection::QuerySource::events_by_slices(
                read_journal(&journal),
                entity_type,
                0,
                1023,
            )
            .current()
        },
        InMemoryOffsetStore::new(),
        |poison| CommittedRecorder {
            poison,
            committed: committed.clone(),
        },
        || async { committed.handled() },
    )
    .await;
}

/// An in-memory offset store whose saves wait for permits the test hands out (a slow
/// database), counting the saves that started.
#[derive(Clone)]
struct SlowSaves {
    inner: InMemoryOffsetStore,
    permits: Arc<tokio::sync::Semaphore>,
    started: Arc<std::sync::atomic::AtomicUsize>,
}

impl SlowSaves {
    fn new(inner: InMemoryOffsetStore) -> Self {
        SlowSaves {
            inner,
            permits: Arc::new(tokio::sync::Semaphore::new(0)),
            started: Arc::default(),
        }
    }

    fn started(&self) -> usize {
        self.started.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait]
impl OffsetStore for SlowSaves {
    async fn read_offset(
        &self,
        id: &ProjectionId,
    ) -> Result<Option<String>, actix_persistence_projection::OffsetStoreError> {
        self.inner.read_offset(id).await
    }

    async fn read_seen(
        &self,
        id: &ProjectionId,
    ) -> Result<
        actix_persistence_projection::SeenSeqNrs,
        actix_persistence_projection::OffsetStoreError,
    > {
        self.inner.read_seen(id).await
    }

    async fn read_progress(
        &self,
        name: &str,
    ) -> Result<
        Vec<actix_persistence_projection::StoredProgress>,
        actix_persistence_projection::OffsetStoreError,
    > {
        self.inner.read_progress(name).await
    }

    async fn read_owners(
        &self,
        name: &str,
    ) -> Result<Vec<ProjectionId>, actix_persistence_projection::OffsetStoreError> {
        self.inner.read_owners(name).await
    }

    async fn take_ownership(
        &self,
        id: &ProjectionId,
        held: Option<u64>,
    ) -> Result<u64, actix_persistence_projection::OffsetStoreError> {
        self.inner.take_ownership(id, held).await
    }

    async fn save_offset(
        &self,
        id: &ProjectionId,
        epoch: u64,
        offset: &str,
        covered: &[(String, u64)],
    ) -> Result<(), actix_persistence_projection::OffsetStoreError> {
        self.started
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.permits.acquire().await.expect("open").forget();
        self.inner.save_offset(id, epoch, offset, covered).await
    }

    async fn reset(
        &self,
        id: &ProjectionId,
    ) -> Result<(), actix_persistence_projection::OffsetStoreError> {
        self.inner.reset(id).await
    }
}

fn every_5th_envelope() -> SaveOffset {
    SaveOffset {
        after_envelopes: 5,
        after: std::time::Duration::from_secs(3600),
    }
}

/// At-least-once with slow offset saves: the handled envelopes go at most `8 x
/// after_envelopes` past the stored offset (the save under way covers the first 5; 35 more are
/// handled while it hangs), and on from there as each save completes. Without the limit it handled all 40 while the first save
/// hung, and a crash then handled all 40 again.
#[tokio::test]
async fn at_least_once_handles_at_most_eight_times_after_envelopes_past_the_stored_offset() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 4, 25).await;
    let store = SlowSaves::new(InMemoryOffsetStore::new());
    let recorder = Recorder::default();
    let handle = Projection::at_least_once(
        id(),
        current_source(&journal),
        store.clone(),
        recorder.clone(),
    )
    .with_save_offset(every_5th_envelope())
    .start();
    eventually(|| recorder.handled().len() >= 40).await;
    // The runner waits (nothing else to do) with the first save hanging.
    assert_eq!((recorder.handled().len(), store.started()), (40, 1));

    // The first save (through envelope 5) completes: the second (through 40) starts, and the
    // handler goes on to 45.
    store.permits.add_permits(1);
    eventually(|| recorder.handled().len() >= 45).await;
    assert_eq!((recorder.handled().len(), store.started()), (45, 2));

    store.permits.add_permits(1_000);
    assert_eq!(handle.join().await, ProjectionState::Completed);
    assert_eq!(recorder.counts().len(), 100);
    assert!(recorder.counts().values().all(|&n| n == 1));
}

/// A crash while the first save hangs repeats exactly the 40 envelopes handled past the stored
/// offset (none), and skips none.
#[tokio::test]
async fn at_least_once_crash_during_a_slow_save_repeats_at_most_eight_times_after_envelopes() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 4, 25).await;
    let offsets = InMemoryOffsetStore::new();
    let slow = SlowSaves::new(offsets.clone());
    let first = Recorder::default();
    let handle =
        Projection::at_least_once(id(), live_source(&journal), slow.clone(), first.clone())
            .with_save_offset(every_5th_envelope())
            .start();
    eventually(|| first.handled().len() >= 40 && slow.started() == 1).await;
    handle.abort().await;
    assert_eq!(first.handled().len(), 40);
    assert_eq!(offsets.read_offset(&id()).await.unwrap(), None);

    let again = Recorder::default();
    let state = Projection::at_least_once(id(), current_source(&journal), offsets, again.clone())
        .with_save_offset(every_5th_envelope())
        .start()
        .join()
        .await;
    assert_eq!(state, ProjectionState::Completed);
    assert_eq!(again.counts().len(), 100);
    let repeated = first
        .handled()
        .iter()
        .filter(|key| again.counts().contains_key(key))
        .count();
    assert_eq!(repeated, 40);
}

/// A grouped at-least-once projection whose groups are larger than `8 x after_envelopes`
/// still makes progress: the limit holds back the start of a group, never its size.
#[tokio::test]
async fn at_least_once_groups_larger_than_the_unsaved_limit_still_run() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 4, 10).await;
    let recorder = GroupRecorder::default();
    let handle = Projection::grouped_at_least_once(
        id(),
        current_source(&journal),
        InMemoryOffsetStore::new(),
        actix_persistence_projection::Grouping {
            size: 20,
            within: std::time::Duration::from_secs(3600),
        },
        recorder.clone(),
    )
    .with_save_offset(SaveOffset {
        after_envelopes: 2,
        after: std::time::Duration::from_secs(3600),
    })
    .start();
    assert_eq!(handle.join().await, ProjectionState::Completed);
    assert_eq!(*recorder.sizes.lock().unwrap(), vec![20, 20]);
    assert_eq!(recorder.recorder.counts().len(), 40);
}

/// At-least-once after a change of slice ranges: the envelopes that another range's instance
/// handled are skipped (`SourceProvider::resume`) and join the handled prefix without a handler
/// call. More than `8 x after_envelopes` of them after the last save used to stop the
/// projection for good (state `Running`, never completing): no save was started for them, so
/// the unsaved limit held back every later handler call, and nothing started the save it
/// waited for.
#[tokio::test]
async fn at_least_once_goes_on_after_many_envelopes_another_range_handled() {
    use actix_persistence_projection::{slice_for_persistence_id, QuerySource};
    let journal = InMemoryJournal::new();
    // Ids named so that their order is the order written, also at one timestamp.
    let named = |prefix: &str, lower_half: bool| {
        (0..)
            .map(|k| format!("Account|{prefix}{k}"))
            .find(|id| (slice_for_persistence_id(id) < 512) == lower_half)
            .expect("an id")
    };
    let (first, upper, last) = (named("a", true), named("b", false), named("c", true));
    write_events(&journal, &first, 1, 1).await;
    write_events(&journal, &upper, 1, 20).await;
    write_events(&journal, &last, 1, 1).await;
    let store = InMemoryOffsetStore::new();
    // The upper half's instance handled its 20 events; the lower half's never ran.
    let upper_half = ProjectionId::for_slices("balances", 512, 1023);
    let source = QuerySource::events_by_slices(read_journal(&journal), "Account", 512, 1023);
    let state = Projection::at_least_once(
        upper_half,
        source.current(),
        store.clone(),
        Recorder::default(),
    )
    .start()
    .join()
    .await;
    assert_eq!(state, ProjectionState::Completed);

    // One instance over every slice now: from the beginning (the lower half has no offset),
    // skipping the upper half's 20 events.
    let recorder = Recorder::default();
    let handle = Projection::at_least_once(
        id(),
        current_source(&journal),
        store.clone(),
        recorder.clone(),
    )
    .with_save_offset(SaveOffset {
        after_envelopes: 1,
        after: std::time::Duration::from_secs(3600),
    })
    .start();
    let state = tokio::time::timeout(std::time::Duration::from_secs(30), handle.join())
        .await
        .expect("the projection completes instead of waiting for a save nothing starts");
    assert_eq!(state, ProjectionState::Completed);
    assert_eq!(recorder.handled(), vec![(first, 1), (last, 1)]);
}

/// `Duration::MAX` as `SaveOffset::after` (offsets saved by count only) or as
/// `Grouping::within` (groups closed by size only) is a deadline never reached: the
/// projection runs. It used to panic in its task at the first envelope (an `Instant` overflow):
/// the handle showed `Running` while nothing ran, and `join` gave `Failed`.
#[tokio::test]
async fn a_duration_max_save_or_group_interval_means_never_by_time() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 3, 1).await;
    let store = InMemoryOffsetStore::new();
    let recorder = Recorder::default();
    let state = Projection::at_least_once(
        id(),
        current_source(&journal),
        store.clone(),
        recorder.clone(),
    )
    .with_save_offset(SaveOffset {
        after_envelopes: 100,
        after: std::time::Duration::MAX,
    })
    .start()
    .join()
    .await;
    assert_eq!(state, ProjectionState::Completed);
    assert_eq!(recorder.handled().len(), 3);
    assert!(store.read_offset(&id()).await.unwrap().is_some());

    let groups = GroupRecorder::default();
    let state = Projection::grouped_at_least_once(
        ProjectionId::for_slices("grouped", 0, 1023),
        current_source(&journal),
        InMemoryOffsetStore::new(),
        actix_persistence_projection::Grouping {
            size: 2,
            within: std::time::Duration::MAX,
        },
        groups.clone(),
    )
    .start()
    .join()
    .await;
    assert_eq!(state, ProjectionState::Completed);
    assert_eq!(*groups.sizes.lock().unwrap(), vec![2, 1]);

    // A restart backoff of `Duration::MAX` (no restart in practice) saturates, with its random
    // share too, instead of panicking in the task when the first failure computes it; a random
    // factor that is not a number adds nothing.
    let never = actix_persistence_projection::RestartBackoff {
        min: std::time::Duration::MAX,
        max: std::time::Duration::MAX,
        random_factor: 0.2,
        max_restarts: None,
    };
    assert_eq!(never.delay(3, 1.0), std::time::Duration::MAX);
    let not_a_number = actix_persistence_projection::RestartBackoff {
        random_factor: f64::NAN,
        ..Default::default()
    };
    assert_eq!(
        not_a_number.delay(0, 0.5),
        std::time::Duration::from_secs(1)
    );
}
