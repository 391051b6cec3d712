//! Fencing over the in-memory offset store: of two instances of one projection id, the one
//! that started last owns it; the older one's writes are refused and it stops.

mod common;

use std::sync::{Arc, Mutex};

use actix_persistence_core::InMemoryJournal;
use actix_persistence_projection::{
    Handler, HandlerError, InMemoryOffsetStore, InMemoryTransaction, OffsetStore, Projection,
    ProjectionId, ProjectionState, SaveOffset, TransactionalHandler,
};
use async_trait::async_trait;
use common::*;

fn id() -> ProjectionId {
    ProjectionId::for_slices("balances", 0, 1023)
}

/// Commits every handled (id, seq_nr) with the transaction; calls wait at `gate` after staging.
#[derive(Clone, Default)]
struct Balances {
    handled: Arc<Mutex<Vec<(String, u64)>>>,
    gate: Option<CallGate>,
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
        if let Some(gate) = &self.gate {
            gate.pass().await;
        }
        Ok(())
    }
}

/// Records every call; calls wait at `gate` first.
#[derive(Clone)]
struct GatedRecorder {
    recorder: Recorder,
    gate: CallGate,
}

#[async_trait]
impl Handler<Env> for GatedRecorder {
    async fn process(&self, envelope: &Env) -> Result<(), HandlerError> {
        self.gate.pass().await;
        self.recorder.process(envelope).await
    }
}

#[tokio::test]
async fn the_in_memory_store_fences_older_owners() {
    offset_store_fences_older_owners(&InMemoryOffsetStore::new()).await;
}

#[tokio::test]
async fn the_in_memory_store_forgets_the_seen_rows_its_offset_covers() {
    offset_store_forgets_the_seen_rows_its_offset_covers(&InMemoryOffsetStore::new()).await;
}

#[tokio::test]
async fn a_transaction_whose_owner_was_taken_over_before_its_commit_stores_nothing() {
    use actix_persistence_projection::{OffsetStoreError, TransactionalOffsetStore};
    let store = InMemoryOffsetStore::new();
    let epoch = store.take_ownership(&id(), None).await.unwrap();
    let applied = Arc::new(Mutex::new(false));
    let mut tx = store.begin(&id()).await.unwrap();
    let flag = Arc::clone(&applied);
    tx.on_commit(move || *flag.lock().unwrap() = true);
    store
        .save_in(&mut tx, &id(), epoch, Some("1"), &[])
        .await
        .unwrap();
    store.take_ownership(&id(), None).await.unwrap();
    assert!(matches!(
        store.commit(tx, &id()).await,
        Err(OffsetStoreError::Fenced { .. })
    ));
    assert!(
        !*applied.lock().unwrap(),
        "the handler's effect was not applied"
    );
    assert_eq!(store.read_offset(&id()).await.unwrap(), None);
}

#[tokio::test]
async fn of_two_exactly_once_instances_the_older_is_fenced_and_commits_nothing_more() {
    let journal = InMemoryJournal::new();
    let store = InMemoryOffsetStore::new();
    write_many(&journal, 4, 5).await;
    let gate = CallGate::new(5);
    let older_handler = Balances {
        gate: Some(gate.clone()),
        ..Balances::default()
    };
    let older = Projection::exactly_once(
        id(),
        current_source(&journal),
        store.clone(),
        older_handler.clone(),
    )
    .start();
    // Five committed; the sixth waits inside its transaction.
    eventually(|| gate.waiting() == 1).await;
    assert_eq!(older_handler.handled.lock().unwrap().len(), 5);

    let newer_handler = Balances {
        handled: Arc::clone(&older_handler.handled),
        gate: None,
    };
    let newer =
        Projection::exactly_once(id(), current_source(&journal), store.clone(), newer_handler)
            .start();
    assert_eq!(newer.join().await, ProjectionState::Completed);
    gate.release(100);
    assert_eq!(older.join().await, ProjectionState::Fenced);

    let handled = older_handler.handled.lock().unwrap().clone();
    let distinct: std::collections::HashSet<_> = handled.iter().cloned().collect();
    assert_eq!(
        (handled.len(), distinct.len()),
        (20, 20),
        "each event committed once: the older instance's sixth transaction was refused"
    );
}

#[tokio::test]
async fn of_two_at_least_once_instances_the_older_cannot_move_the_offset_back() {
    let journal = InMemoryJournal::new();
    let store = InMemoryOffsetStore::new();
    write_many(&journal, 4, 5).await;
    let every_envelope = SaveOffset {
        after_envelopes: 1,
        after: std::time::Duration::from_secs(3600),
    };
    let gate = CallGate::new(3);
    let older_handler = GatedRecorder {
        recorder: Recorder::default(),
        gate: gate.clone(),
    };
    let older = Projection::at_least_once(
        id(),
        current_source(&journal),
        store.clone(),
        older_handler.clone(),
    )
    .with_save_offset(every_envelope)
    .start();
    eventually(|| gate.waiting() == 1).await;

    let newer_handler = Recorder::default();
    let newer = Projection::at_least_once(
        id(),
        current_source(&journal),
        store.clone(),
        newer_handler.clone(),
    )
    .with_save_offset(every_envelope)
    .start();
    assert_eq!(newer.join().await, ProjectionState::Completed);
    let final_offset = store.read_offset(&id()).await.unwrap();
    assert!(final_offset.is_some());

    gate.release(100);
    assert_eq!(older.join().await, ProjectionState::Fenced);
    // The older instance handled its fourth envelope (and maybe more while its save was on
    // its way), but its save was refused: the stored offset is still the newer instance's,
    // past every event.
    assert!(older_handler.recorder.handled().len() >= 4);
    assert_eq!(store.read_offset(&id()).await.unwrap(), final_offset);
    assert_eq!(newer_handler.handled().len(), 17);
}

/// A deploy overlap across a change of slice ranges: an exactly-once instance over all
/// slices still runs while the instances of the new ranges start. Each new instance takes
/// over the progress of the old range's key for its slices, and fences that key as a newer
/// instance of the same id would: the old instance's next commit is refused and it stops,
/// and every event is committed once.
#[tokio::test]
async fn an_instance_over_a_new_slice_range_fences_the_old_ranges_instance() {
    let journal = InMemoryJournal::new();
    let store = InMemoryOffsetStore::new();
    let ids = ids_in_every_range(2, 3);
    for n in 1..=4 {
        for id in &ids {
            write_events(&journal, id, n, n).await;
        }
    }
    let gate = CallGate::new(5);
    let handled = Arc::new(Mutex::new(Vec::new()));
    let old = Projection::exactly_once(
        id(),
        current_source(&journal),
        store.clone(),
        Balances {
            handled: Arc::clone(&handled),
            gate: Some(gate.clone()),
        },
    )
    .start();
    // 5 committed; the sixth waits inside its transaction.
    eventually(|| gate.waiting() == 1).await;

    for range in actix_persistence_projection::slice_ranges(2) {
        let (min, max) = (*range.start(), *range.end());
        let source = actix_persistence_projection::QuerySource::events_by_slices(
            read_journal(&journal),
            "Account",
            min,
            max,
        )
        .current();
        let new = Projection::exactly_once(
            ProjectionId::for_slices("balances", min, max),
            source,
            store.clone(),
            Balances {
                handled: Arc::clone(&handled),
                gate: None,
            },
        )
        .start();
        assert_eq!(new.join().await, ProjectionState::Completed);
    }
    gate.release(100);
    assert_eq!(old.join().await, ProjectionState::Fenced);
    let mut all = handled.lock().expect("lock").clone();
    all.sort();
    let before = all.len();
    all.dedup();
    assert_eq!((before, all.len()), (24, 24), "each event committed once");
}

#[tokio::test]
async fn offset_store_lists_the_progress_of_every_key() {
    common::offset_store_lists_the_progress_of_every_key(&InMemoryOffsetStore::new()).await;
}

/// A deploy overlap across a change of slice ranges before anything was stored: the old
/// instance over every slice is running (it took ownership of its key) but has committed
/// nothing yet (no event so far); the new instance over the lower half starts. Its start
/// takes ownership only of the overlapping keys that stored progress (`read_resume` lists
/// `read_progress`, which holds offsets and seen rows, not owner rows), so the old instance
/// is not fenced and both commit the next event of the lower half.
#[tokio::test]
async fn a_new_range_fences_an_overlapping_older_instance_that_stored_nothing_yet() {
    let journal = InMemoryJournal::new();
    let store = InMemoryOffsetStore::new();
    let whole_handler = Balances::default();
    let whole = Projection::exactly_once(
        ProjectionId::for_slices("overlap", 0, 1023),
        live_source(&journal),
        store.clone(),
        whole_handler.clone(),
    )
    .start();
    whole
        .wait_for(|p| p.state == ProjectionState::Running)
        .await
        .expect("whole running");
    let half_handler = Balances::default();
    let half = Projection::exactly_once(
        ProjectionId::for_slices("overlap", 0, 511),
        actix_persistence_projection::QuerySource::events_by_slices(
            read_journal(&journal),
            "Account",
            0,
            511,
        ),
        store.clone(),
        half_handler.clone(),
    )
    .start();
    half.wait_for(|p| p.state == ProjectionState::Running)
        .await
        .expect("half running");
    let lower = ids_in_every_range(2, 1).remove(0);
    write_events(&journal, &lower, 1, 1).await;
    half.wait_for(|p| p.handled == 1)
        .await
        .expect("half handled it");
    // The older instance either is fenced by its next commit or commits the event a second
    // time.
    let progress = whole
        .wait_for(|p| p.state == ProjectionState::Fenced || p.handled == 1)
        .await
        .expect("whole fenced or handled");
    let committed =
        whole_handler.handled.lock().unwrap().len() + half_handler.handled.lock().unwrap().len();
    half.stop().await;
    whole.stop().await;
    assert_eq!(
        (progress.state, committed),
        (ProjectionState::Fenced, 1),
        "the event of the lower half was committed by both instances"
    );
}
