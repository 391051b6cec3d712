//! `max_concurrency`: up to N handler calls at once, each persistence id in seq_nr order, and
//! an offset that never passes an envelope not handled yet.

mod common;

use std::time::Duration;

use actix_persistence_core::query::Offset;
use actix_persistence_core::InMemoryJournal;
use actix_persistence_projection::{
    InMemoryOffsetStore, OffsetStore, Projection, ProjectionId, SaveOffset,
};
use common::*;

fn id() -> ProjectionId {
    ProjectionId::for_slices("concurrent", 0, 1023)
}

fn save_every_envelope() -> SaveOffset {
    SaveOffset {
        after_envelopes: 1,
        after: Duration::from_millis(1),
    }
}

#[tokio::test]
async fn max_concurrency_runs_up_to_n_handler_calls_at_once() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 10, 1).await;
    let gated = Gated::default();
    let handle = Projection::at_least_once(
        id(),
        current_source(&journal),
        InMemoryOffsetStore::new(),
        gated.clone(),
    )
    .with_max_concurrency(4)
    .start();
    eventually(|| gated.started.handled().len() == 4).await;
    assert_eq!(gated.running(), (4, 4));
    gated.release(10);
    handle.join().await;
    assert_eq!(gated.finished.handled().len(), 10);
    assert_eq!(gated.running().1, 4, "never more than 4 at once");
}

#[tokio::test]
async fn without_max_concurrency_one_call_runs_at_a_time() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 10, 1).await;
    let gated = Gated::default();
    let handle = Projection::at_least_once(
        id(),
        current_source(&journal),
        InMemoryOffsetStore::new(),
        gated.clone(),
    )
    .start();
    gated.release(10);
    handle.join().await;
    assert_eq!(gated.running().1, 1);
}

#[tokio::test]
async fn envelopes_of_one_persistence_id_run_one_after_another_in_seq_order() {
    let journal = InMemoryJournal::new();
    // One id with 6 events, two others with one each.
    write_events(&journal, &pid(0), 1, 6).await;
    write_events(&journal, &pid(1), 1, 1).await;
    write_events(&journal, &pid(2), 1, 1).await;
    let gated = Gated::default();
    let handle = Projection::at_least_once(
        id(),
        current_source(&journal),
        InMemoryOffsetStore::new(),
        gated.clone(),
    )
    .with_max_concurrency(8)
    .start();
    // Three calls start (one per id), never a second of Account|0 while its first waits.
    eventually(|| gated.started.handled().len() == 3).await;
    let started = gated.started.handled();
    assert_eq!(started.iter().filter(|(p, _)| *p == pid(0)).count(), 1);
    assert_eq!(gated.running().0, 3);
    gated.release(8);
    handle.join().await;
    assert_eq!(gated.started.by_pid()[&pid(0)], vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(gated.running().1, 3);
}

#[tokio::test]
async fn a_slow_envelope_holds_the_offset_but_not_the_other_envelopes() {
    let journal = InMemoryJournal::new();
    // The first envelope in the stream is Account|0's; every other id's pass freely.
    write_events(&journal, &pid(0), 1, 1).await;
    for n in 1..=5 {
        write_events(&journal, &pid(n), 1, 1).await;
    }
    let gated = Gated::default();
    {
        let mut free = gated.free.lock().unwrap();
        for n in 1..=5 {
            free.push((pid(n), 1));
        }
    }
    let store = InMemoryOffsetStore::new();
    let handle =
        Projection::at_least_once(id(), live_source(&journal), store.clone(), gated.clone())
            .with_max_concurrency(4)
            .with_save_offset(save_every_envelope())
            .start();
    // The other five are handled while Account|0 waits...
    eventually(|| gated.finished.handled().len() == 5).await;
    // ...and no offset past Account|0 was saved, nor reported.
    assert_eq!(store.read_offset(&id()).await.unwrap(), None);
    assert_eq!(handle.progress().offset, None);

    gated.release(1);
    let progress = handle
        .wait_for(|p| p.handled == 6)
        .await
        .expect("all handled");
    let Some(offset @ Offset::Timestamp(_)) = progress.offset else {
        panic!("a timestamp offset after the last envelope");
    };
    handle.stop().await;
    let saved: Offset =
        serde_json::from_str(&store.read_offset(&id()).await.unwrap().unwrap()).unwrap();
    assert_eq!(saved, offset);
    // Resuming from it delivers nothing more.
    let rest = Recorder::default();
    Projection::at_least_once(id(), current_source(&journal), store, rest.clone())
        .start()
        .join()
        .await;
    assert_eq!(rest.handled(), vec![]);
}
