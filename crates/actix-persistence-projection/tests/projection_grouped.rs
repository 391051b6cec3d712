//! Grouped handlers: up to N envelopes per call, or what arrived within T.

mod common;

use std::time::Duration;

use actix_persistence_core::InMemoryJournal;
use actix_persistence_projection::{Grouping, InMemoryOffsetStore, Projection, ProjectionId};
use common::*;

fn id() -> ProjectionId {
    ProjectionId::for_tag("grouped", "account")
}

#[tokio::test]
async fn groups_hold_at_most_the_group_size() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 7, 5).await;
    let groups = GroupRecorder::default();
    let grouping = Grouping {
        size: 10,
        within: Duration::from_secs(3600),
    };
    Projection::grouped_at_least_once(
        id(),
        current_source(&journal),
        InMemoryOffsetStore::new(),
        grouping,
        groups.clone(),
    )
    .start()
    .join()
    .await;
    assert_eq!(*groups.sizes.lock().unwrap(), vec![10, 10, 10, 5]);
    assert_eq!(groups.recorder.handled().len(), 35);
    for (_, seq_nrs) in groups.recorder.by_pid() {
        assert_eq!(seq_nrs, vec![1, 2, 3, 4, 5]);
    }
}

#[tokio::test(start_paused = true)]
async fn a_group_that_does_not_fill_is_handled_after_group_within() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 3, 1).await;
    let groups = GroupRecorder::default();
    let grouping = Grouping {
        size: 100,
        within: Duration::from_millis(250),
    };
    let handle = Projection::grouped_at_least_once(
        id(),
        live_source(&journal),
        InMemoryOffsetStore::new(),
        grouping,
        groups.clone(),
    )
    .start();
    // The live source never ends: only `within` closes the group of three.
    handle
        .wait_for(|p| p.handled == 3)
        .await
        .expect("three handled");
    assert_eq!(*groups.sizes.lock().unwrap(), vec![3]);
    handle.stop().await;
}
