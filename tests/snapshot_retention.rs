//! Snapshot retention keeps the `keep` newest snapshots by count (a failed save does not cost
//! a kept snapshot) and deletes events only up to the oldest kept snapshot, so recovery can
//! fall back to any kept snapshot when a newer one is gone.

mod support;

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use actix_persistence::snapshot::{
    SelectedSnapshot, SerializedSnapshot, SnapshotError, SnapshotMetadata,
    SnapshotSelectionCriteria, SnapshotStore,
};
use actix_persistence::{JournalStore, SnapshotPolicy, MAX_SEQ_NR};
use async_trait::async_trait;
use futures::StreamExt;
use support::*;

/// A snapshot store whose save at one sequence number fails.
struct FailingSaveAt {
    inner: Arc<dyn SnapshotStore>,
    seq_nr: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("injected: the save at this sequence number fails")]
struct InjectedSaveFailure;

#[async_trait]
impl SnapshotStore for FailingSaveAt {
    async fn load(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        self.inner.load(pid, criteria).await
    }

    async fn save(
        &self,
        metadata: SnapshotMetadata,
        snapshot: SerializedSnapshot,
    ) -> Result<(), SnapshotError> {
        if metadata.seq_nr == self.seq_nr {
            return Err(SnapshotError::storage("save", InjectedSaveFailure));
        }
        self.inner.save(metadata, snapshot).await
    }

    async fn delete(&self, metadata: &SnapshotMetadata) -> Result<(), SnapshotError> {
        self.inner.delete(metadata).await
    }

    async fn delete_matching(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError> {
        self.inner.delete_matching(pid, criteria).await
    }
}

async fn snapshot_seq_nrs(store: &Arc<dyn SnapshotStore>, pid: &str) -> Vec<u64> {
    let mut found = Vec::new();
    let mut criteria = SnapshotSelectionCriteria::latest();
    while let Some(s) = store.load(pid, criteria).await.expect("load") {
        found.push(s.metadata.seq_nr);
        criteria = SnapshotSelectionCriteria::up_to(s.metadata.seq_nr - 1);
    }
    found
}

async fn stored_seq_nrs(h: &Harness, pid: &str) -> Vec<u64> {
    h.control
        .stored()
        .replay_messages(pid, 1, MAX_SEQ_NR, u64::MAX)
        .map(|e| e.expect("replay").seq_nr)
        .collect()
        .await
}

async fn keep_counts_snapshots_and_events_are_deleted_only_up_to_the_oldest_kept(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let store: Arc<dyn SnapshotStore> = Arc::new(FailingSaveAt {
        inner: Arc::clone(&h.snapshots),
        seq_nr: 6,
    });
    let policy = SnapshotPolicy::every(NonZeroU64::new(2).expect("2"))
        .keep(2)
        .delete_events(true);
    let configured = Arc::clone(&store);
    let a = h
        .probe_with("keep", 0, move |s| {
            s.with_snapshot_store(configured, Duration::from_secs(5))
                .with_snapshot_policy(policy)
        })
        .await;
    for i in 1..=8 {
        let reply = a.send(Persist(vec![named(&format!("e{i}"))]));
        h.control.next_write_for("keep").await.complete();
        reply.await.expect("mailbox").expect("stored");
    }
    // Snapshots at 2, 4 and 8 saved, the one at 6 failed; events deleted after the saves at 4
    // (up to 2) and at 8 (up to 4).
    let (mut saved, mut failed, mut deleted) = (Vec::new(), 0, Vec::new());
    while saved.len() < 3 || failed < 1 || deleted.len() < 2 {
        match h.next_seen().await {
            Seen::SnapshotSaved { seq_nr, .. } => saved.push(seq_nr),
            Seen::SnapshotFailed { .. } => failed += 1,
            Seen::EventsDeleted { to_seq_nr, .. } => deleted.push(to_seq_nr),
            _ => {}
        }
    }
    assert_eq!(saved, vec![2, 4, 8]);
    deleted.sort_unstable();
    assert_eq!(deleted, vec![2, 4], "never beyond the oldest kept snapshot");
    assert_eq!(
        snapshot_seq_nrs(&store, "keep").await,
        vec![8, 4],
        "two snapshots kept, counted, although the one at 6 is missing"
    );
    assert_eq!(stored_seq_nrs(&h, "keep").await, vec![5, 6, 7, 8]);
    a.send(Stop).await.expect("mailbox");
    h.seen_until(|s| matches!(s, Seen::Stopped { .. })).await;

    // The newest snapshot goes missing: recovery falls back to the one at 4 and has every
    // event after it.
    store
        .delete_matching(
            "keep",
            SnapshotSelectionCriteria {
                min_seq_nr: 8,
                ..SnapshotSelectionCriteria::latest()
            },
        )
        .await
        .expect("deleted");
    let configured = Arc::clone(&store);
    let _b = h.start_probe("keep", 0, move |s| {
        s.with_snapshot_store(configured, Duration::from_secs(5))
    });
    assert_eq!(
        h.next_seen().await,
        Seen::Recovered {
            pid: "keep".into(),
            last_seq_nr: 8,
            replayed: (1..=8).map(|i| named(&format!("e{i}"))).collect(),
        }
    );
}

on_every_backend!(keep_counts_snapshots_and_events_are_deleted_only_up_to_the_oldest_kept);
