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
