//! The sender of a command learns why a persistent actor is gone: a [`PersistentAddr`] answers
//! with [`CommandError::ActorStopped`] carrying the recovery or write failure, where a plain
//! Actix address says only "mailbox closed".

mod support;

use std::sync::Arc;
use std::time::Duration;

use actix_persistence::snapshot::{
    SelectedSnapshot, SerializedSnapshot, SnapshotError, SnapshotMetadata,
    SnapshotSelectionCriteria, SnapshotStore,
};
use actix_persistence::{
    ActorFailure, CommandError, JournalError, PersistError, PersistentActor, RecoveryError,
    SnapshotFailure,
};
use actix_persistence_testkit::persistence_state_in_group;
use async_trait::async_trait;
use support::*;

/// A snapshot store whose every load fails.
struct BrokenSnapshots;

#[derive(Debug, thiserror::Error)]
#[error("disk on fire")]
struct DiskOnFire;

#[async_trait]
impl SnapshotStore for BrokenSnapshots {
    async fn load(
        &self,
        _: &str,
        _: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        Err(SnapshotError::storage("load", DiskOnFire))
    }
    async fn save(&self, _: SnapshotMetadata, _: SerializedSnapshot) -> Result<(), SnapshotError> {
        Ok(())
    }
    async fn delete(&self, _: &SnapshotMetadata) -> Result<(), SnapshotError> {
        Ok(())
    }
    async fn delete_matching(
        &self,
        _: &str,
        _: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError> {
        Ok(())
    }
}

#[actix::test]
async fn a_command_to_an_actor_whose_recovery_failed_gets_the_recovery_error() {
    let h = Harness::new(1);
    let state = persistence_state_in_group(&h.journal, "broken", 0, h.groups)
        .expect("valid id")
        .with_snapshot_store(Arc::new(BrokenSnapshots), Duration::from_secs(5));
    let probe = h.probe(state).start_persistent();

    let error = probe
        .ask(Persist(vec![named("a")]))
        .await
        .expect_err("the actor never recovered");
    match &error {
        CommandError::ActorStopped {
            persistence_id,
            cause: Some(ActorFailure::Recovery(RecoveryError::Snapshot { reason, source, .. })),
        } => {
            assert_eq!(persistence_id, "broken");
            assert!(reason.contains("disk on fire"), "{reason}");
            // The store's own error, typed: a failed load, not an unreadable snapshot.
            match &**source {
                SnapshotFailure::Load(SnapshotError::Storage { operation, source }) => {
                    assert_eq!(*operation, "load");
                    assert_eq!(source.to_string(), "disk on fire");
                }
                other => panic!("expected the store's load failure, got {other:?}"),
            }
        }
        other => panic!("expected the recovery failure, got {other:?}"),
    }
    assert!(error.to_string().contains("disk on fire"), "{error}");
    // Every later command learns the same.
    assert!(matches!(
        probe.send(Inspect).await,
        Err(CommandError::ActorStopped {
            cause: Some(ActorFailure::Recovery(_)),
            ..
        })
    ));
    assert!(matches!(
        probe.failure(),
        Some(ActorFailure::Recovery(RecoveryError::Snapshot { .. }))
    ));
}

#[actix::test]
async fn commands_after_a_failed_write_get_the_write_failure() {
    let mut h = Harness::new(1);
    let state = persistence_state_in_group(&h.journal, "failing", 0, h.groups).expect("valid id");
    let probe = h.probe(state).start_persistent();
    let first = {
        let probe = probe.clone();
        actix::spawn(async move { probe.ask(Persist(vec![named("a")])).await })
    };
    let write = h.control.next_write_for("failing").await;
    let queued = {
        let probe = probe.clone();
        actix::spawn(async move { probe.ask(Persist(vec![named("b")])).await })
    };
    write.fail(JournalError::JournalStopped).wait().await;

    // The command whose write failed gets that failure as its own.
    assert!(matches!(
        first.await.expect("task"),
        Err(CommandError::Persist(PersistError::Failed(
            JournalError::JournalStopped
        )))
    ));
    // A command queued behind it, and any sent later, learn why the actor is gone.
    for outcome in [
        queued.await.expect("task"),
        probe.ask(Persist(vec![named("c")])).await,
    ] {
        match outcome {
            Err(CommandError::ActorStopped {
                cause: Some(ActorFailure::Persist(JournalError::JournalStopped)),
                ..
            }) => {}
            other => panic!("expected the write failure, got {other:?}"),
        }
    }
}

#[actix::test]
async fn a_normally_stopped_actor_is_reported_without_a_cause() {
    let mut h = Harness::new(1);
    let state = persistence_state_in_group(&h.journal, "quiet", 0, h.groups).expect("valid id");
    let probe = h.probe(state).start_persistent();
    h.seen_until(|s| matches!(s, Seen::Recovered { .. })).await;
    probe.send(Stop).await.expect("stops");
    h.seen_until(|s| matches!(s, Seen::Stopped { .. })).await;
    match probe.send(Inspect).await {
        Err(CommandError::ActorStopped {
            cause: None,
            persistence_id,
        }) => {
            assert_eq!(persistence_id, "quiet")
        }
        other => panic!("expected a normal stop, got {other:?}"),
    }
}
