//! Snapshot retention keeps the `keep` newest snapshots by count (a failed save does not cost
//! a kept snapshot) and deletes events only up to the oldest kept snapshot, so recovery can
//! fall back to any kept snapshot when a newer one is gone.

mod support;

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
    let policy = SnapshotPolicy::every(2).keep(2).delete_events(true);
    let configured = Arc::clone(&store);
    let a = h
        .probe_with("keep", 0, move |s| {
            s.with_snapshot_store(configured, Duration::from_secs(5))
                .with_snapshot_policy(policy)
        })
        .await;
    // Snapshots at 2, 4 and 8 are saved, the one at 6 fails; events are deleted after the
    // saves at 4 (up to 2, the oldest of the two kept) and at 8 (up to 4: the failed save at 6
    // cost no kept snapshot). Each save settles before the next write, so background saves
    // cannot finish out of order (they may on PostgreSQL's pool).
    let mut deleted = Vec::new();
    for i in 1..=8u64 {
        let reply = a.send(Persist(vec![named(&format!("e{i}"))]));
        h.control.next_write_for("keep").await.complete();
        reply.await.expect("mailbox").expect("stored");
        let expected_delete = match i {
            4 => Some(2),
            8 => Some(4),
            _ => None,
        };
        if i % 2 == 0 {
            let outcome = h
                .seen_until(|s| {
                    matches!(s, Seen::SnapshotSaved { .. } | Seen::SnapshotFailed { .. })
                })
                .await
                .pop();
            match outcome {
                Some(Seen::SnapshotSaved { seq_nr, .. }) => {
                    assert_eq!(seq_nr, i);
                    assert_ne!(i, 6, "the save at 6 fails");
                }
                Some(Seen::SnapshotFailed { .. }) => assert_eq!(i, 6, "only the save at 6 fails"),
                other => panic!("expected a snapshot outcome, saw {other:?}"),
            }
        }
        if let Some(to) = expected_delete {
            // A retention that started earlier may repeat a delete it saw as due (the save at 2
            // found two snapshots once the one at 4 was in): never beyond the oldest kept.
            let seen = h
                .seen_until(
                    |s| matches!(s, Seen::EventsDeleted { to_seq_nr, .. } if *to_seq_nr == to),
                )
                .await;
            for s in seen {
                if let Seen::EventsDeleted { to_seq_nr, .. } = s {
                    assert!(to_seq_nr <= to, "deleted up to {to_seq_nr}, beyond {to}");
                    deleted.push(to_seq_nr);
                }
            }
        }
    }
    deleted.dedup();
    assert_eq!(deleted, vec![2, 4]);
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

on_every_store!(keep_counts_snapshots_and_events_are_deleted_only_up_to_the_oldest_kept);

async fn retention_follows_snapshots_asked_for_without_automatic_ones(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let store = Arc::clone(&h.snapshots);
    // No automatic snapshots; keep the newest one and delete the events it covers.
    let policy = SnapshotPolicy::default().keep(1).delete_events(true);
    let configured = Arc::clone(&store);
    let a = h
        .probe_with("manual", 0, move |s| {
            s.with_snapshot_store(configured, Duration::from_secs(5))
                .with_snapshot_policy(policy)
        })
        .await;
    for i in 1..=4u64 {
        let reply = a.send(Persist(vec![named(&format!("e{i}"))]));
        h.control.next_write_for("manual").await.complete();
        reply.await.expect("mailbox").expect("stored");
        if i % 2 == 0 {
            a.send(SaveSnapshot).await.expect("mailbox");
            match h
                .seen_until(|s| {
                    matches!(s, Seen::SnapshotSaved { .. } | Seen::SnapshotFailed { .. })
                })
                .await
                .pop()
            {
                Some(Seen::SnapshotSaved { seq_nr, .. }) => assert_eq!(seq_nr, i),
                other => panic!("expected the snapshot at {i}, saw {other:?}"),
            }
            h.seen_until(|s| matches!(s, Seen::EventsDeleted { to_seq_nr, .. } if *to_seq_nr == i))
                .await;
        }
    }
    assert_eq!(snapshot_seq_nrs(&store, "manual").await, vec![4]);
    assert_eq!(stored_seq_nrs(&h, "manual").await, Vec::<u64>::new());
}

on_every_store!(retention_follows_snapshots_asked_for_without_automatic_ones);

/// A snapshot store that counts the snapshots it loads (each with its payload) and the
/// metadata listings it answers.
struct CountingLoads {
    inner: Arc<dyn SnapshotStore>,
    loads: std::sync::atomic::AtomicUsize,
    listings: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl SnapshotStore for CountingLoads {
    async fn load(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        self.loads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.load(pid, criteria).await
    }

    async fn save(
        &self,
        metadata: SnapshotMetadata,
        snapshot: SerializedSnapshot,
    ) -> Result<(), SnapshotError> {
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

    async fn read_metadata(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
        limit: u32,
    ) -> Result<Vec<SnapshotMetadata>, SnapshotError> {
        self.listings
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.read_metadata(pid, criteria, limit).await
    }
}

/// Retention finds the snapshots it keeps from their metadata (`SnapshotStore::read_metadata`)
/// and loads none of them: it used to load the `keep` newest, payloads and all, after every
/// save.
async fn retention_reads_the_metadata_and_loads_no_snapshot(backend: Backend) {
    use std::sync::atomic::Ordering;
    let mut h = Harness::on(backend, 1).await;
    let store = Arc::new(CountingLoads {
        inner: Arc::clone(&h.snapshots),
        loads: Default::default(),
        listings: Default::default(),
    });
    let policy = SnapshotPolicy::every(2).keep(2).delete_events(true);
    let configured: Arc<dyn SnapshotStore> = store.clone();
    let a = h
        .probe_with("listed", 0, move |s| {
            s.with_snapshot_store(configured, Duration::from_secs(5))
                .with_snapshot_policy(policy)
        })
        .await;
    let mut loads_after_recovery = None;
    for i in 1..=6u64 {
        let reply = a.send(Persist(vec![named(&format!("e{i}"))]));
        h.control.next_write_for("listed").await.complete();
        reply.await.expect("mailbox").expect("stored");
        // Recovery loaded (at most) the newest snapshot before the first write.
        loads_after_recovery.get_or_insert(store.loads.load(Ordering::SeqCst));
        if i % 2 == 0 {
            match h
                .seen_until(|s| {
                    matches!(s, Seen::SnapshotSaved { .. } | Seen::SnapshotFailed { .. })
                })
                .await
                .pop()
            {
                Some(Seen::SnapshotSaved { seq_nr, .. }) => assert_eq!(seq_nr, i),
                other => panic!("expected the snapshot at {i}, saw {other:?}"),
            }
        }
        if i >= 4 && i % 2 == 0 {
            // The retention after the save at `i` deletes up to the older of the two kept.
            h.seen_until(
                |s| matches!(s, Seen::EventsDeleted { to_seq_nr, .. } if *to_seq_nr == i - 2),
            )
            .await;
        }
    }
    assert_eq!(
        store.loads.load(Ordering::SeqCst),
        loads_after_recovery.unwrap_or_default(),
        "retention loaded snapshots"
    );
    assert!(
        store.listings.load(Ordering::SeqCst) >= 2,
        "retention after the saves at 4 and 6 listed the metadata"
    );
    let kept: Arc<dyn SnapshotStore> = store.clone();
    assert_eq!(snapshot_seq_nrs(&kept, "listed").await, vec![6, 4]);
    assert_eq!(stored_seq_nrs(&h, "listed").await, vec![5, 6]);
}

on_every_store!(retention_reads_the_metadata_and_loads_no_snapshot);
