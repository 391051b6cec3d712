//! The suites fail against stores that break the contract: each test wraps the in-memory store
//! in a deliberately broken wrapper and checks that the case guarding that rule fails, with a
//! message naming it.

use std::fmt::Debug;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use actix_persistence_core::{
    AtomicWrite, AtomicWriteError, AtomicWriteResult, FencingToken, InMemoryJournal,
    InMemorySnapshotStore, JournalError, JournalStore, Ownership, ReplayStream, SelectedSnapshot,
    SerializedSnapshot, SnapshotError, SnapshotMetadata, SnapshotSelectionCriteria, SnapshotStore,
    MAX_SEQ_NR,
};
use actix_persistence_testkit::conformance::{
    check_journal_against_model, journal, snapshot, ModelCheckConfig,
};
use async_trait::async_trait;
use futures::{FutureExt, StreamExt};

/// How a [`Mutant`] journal breaks the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mutation {
    /// Reports the highest *remaining* event as the highest sequence number.
    LowersHighestOnDelete,
    /// Stores each event of an atomic write on its own.
    NotAtomic,
    /// Returns one result per event instead of one per atomic write.
    OneResultPerEvent,
    /// Reports success when the sequence number was already taken.
    SwallowsConflicts,
    /// Compares persistence ids without regard to case.
    CaseInsensitiveIds,
    /// Ignores the `max` of a replay.
    IgnoresReplayMax,
    /// Loses the tags of every event.
    DropsTags,
    /// Keeps the default `take_ownership`: no owner epoch, no fencing.
    TakesNoOwnership,
    /// Takes ownership but stores writes whatever their fencing token.
    AcceptsStaleTokens,
    /// Fences writes but deletes whatever the delete's fencing token.
    DeletesWithStaleTokens,
    /// Answers a write over the limits with a storage failure instead of a rejection.
    FailsWritesOverTheLimits,
    /// Reads the replay's bounds with no deletes in them (one statement that forgot them).
    BoundsWithoutDeletes,
}

struct Mutant {
    inner: InMemoryJournal,
    mutation: Mutation,
}

impl Mutant {
    fn new(mutation: Mutation) -> Self {
        Mutant {
            inner: InMemoryJournal::new(),
            mutation,
        }
    }

    fn pid(&self, pid: &str) -> String {
        match self.mutation {
            Mutation::CaseInsensitiveIds => pid.to_lowercase(),
            _ => pid.to_owned(),
        }
    }
}

#[async_trait]
impl JournalStore for Mutant {
    async fn write_messages(
        &self,
        mut writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        for event in writes.iter_mut().flat_map(|w| w.events.iter_mut()) {
            event.persistence_id = self.pid(&event.persistence_id).into();
            if self.mutation == Mutation::DropsTags {
                event.tags = Default::default();
            }
        }
        if self.mutation == Mutation::AcceptsStaleTokens {
            for write in &mut writes {
                write.fencing_token = FencingToken(u64::MAX);
            }
        }
        match self.mutation {
            Mutation::NotAtomic => {
                let mut results = Vec::new();
                for write in writes {
                    let singles = write
                        .events
                        .into_iter()
                        .map(|e| AtomicWrite {
                            events: vec![e],
                            fencing_token: write.fencing_token,
                        })
                        .collect();
                    let outcome = self.inner.write_messages(singles).await?;
                    results.push(outcome.into_iter().find(|r| r.is_err()).unwrap_or(Ok(())));
                }
                Ok(results)
            }
            Mutation::OneResultPerEvent => {
                let events: usize = writes.iter().map(|w| w.events.len()).sum();
                self.inner.write_messages(writes).await?;
                Ok(vec![Ok(()); events])
            }
            Mutation::FailsWritesOverTheLimits => Ok(self
                .inner
                .write_messages(writes)
                .await?
                .into_iter()
                .map(|r| match r {
                    Err(AtomicWriteError::Rejected(_)) => Err(AtomicWriteError::Failed(
                        JournalError::storage("write", std::io::Error::other("value too long")),
                    )),
                    other => other,
                })
                .collect()),
            Mutation::SwallowsConflicts => Ok(self
                .inner
                .write_messages(writes)
                .await?
                .into_iter()
                .map(|r| match r {
                    Err(AtomicWriteError::Failed(JournalError::ConcurrentWrite { .. })) => Ok(()),
                    other => other,
                })
                .collect()),
            _ => self.inner.write_messages(writes).await,
        }
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        let max = match self.mutation {
            Mutation::IgnoresReplayMax => u64::MAX,
            _ => max,
        };
        self.inner.replay_messages(&self.pid(pid), from, to, max)
    }

    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        let pid = self.pid(pid);
        if self.mutation == Mutation::LowersHighestOnDelete {
            let remaining: Vec<_> = self
                .inner
                .replay_messages(&pid, 0, MAX_SEQ_NR, u64::MAX)
                .collect()
                .await;
            return match remaining.last() {
                Some(Ok(event)) => Ok(event.seq_nr),
                Some(Err(e)) => Err(e.clone()),
                None => Ok(0),
            };
        }
        self.inner.read_highest_sequence_nr(&pid, from).await
    }

    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        fencing_token: actix_persistence_core::FencingToken,
    ) -> Result<(), JournalError> {
        let fencing_token = match self.mutation {
            Mutation::DeletesWithStaleTokens => FencingToken(u64::MAX),
            _ => fencing_token,
        };
        self.inner
            .delete_messages_to(&self.pid(pid), to, fencing_token)
            .await
    }

    async fn take_ownership(&self, pid: &str) -> Result<Ownership, JournalError> {
        let pid = self.pid(pid);
        if self.mutation == Mutation::TakesNoOwnership {
            // What the trait's default does.
            return Ok(Ownership {
                fencing_token: FencingToken::UNOWNED,
                highest_seq_nr: self.inner.read_highest_sequence_nr(&pid, 0).await?,
            });
        }
        self.inner.take_ownership(&pid).await
    }

    async fn read_deleted_to(&self, pid: &str) -> Result<Option<u64>, JournalError> {
        self.inner.read_deleted_to(&self.pid(pid)).await
    }

    async fn read_replay_bounds(
        &self,
        pid: &str,
        from: u64,
    ) -> Result<actix_persistence_core::ReplayBounds, JournalError> {
        let deleted_to = match self.mutation {
            Mutation::BoundsWithoutDeletes => Some(0),
            _ => self.read_deleted_to(pid).await?,
        };
        Ok(actix_persistence_core::ReplayBounds {
            highest_seq_nr: self.read_highest_sequence_nr(pid, from).await?,
            deleted_to,
        })
    }
}

/// Runs journal case `name` against a store broken by `mutation`; returns its failure message.
async fn journal_failure(name: &str, mutation: Mutation) -> String {
    let case = journal::case(name).unwrap_or_else(|| panic!("no case {name}"));
    let store: Arc<dyn JournalStore> = Arc::new(Mutant::new(mutation));
    failure_message(name, mutation, case.run(store)).await
}

/// Awaits `run`, the case `name` against a store broken by `mutation`, and returns the message
/// it fails with; panics if it passes.
async fn failure_message(
    name: &str,
    mutation: impl Debug,
    run: impl Future<Output = ()>,
) -> String {
    let Err(panic) = AssertUnwindSafe(run).catch_unwind().await else {
        panic!("{name} passed against a store that breaks the contract: {mutation:?}");
    };
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

fn assert_mentions(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(
            message.contains(part),
            "the failure should mention {part:?}: {message}"
        );
    }
}

fn seeded(seed: u64) -> ModelCheckConfig {
    ModelCheckConfig {
        seed: Some(seed),
        ..ModelCheckConfig::default()
    }
}

#[actix::test]
async fn suite_catches_a_store_that_lowers_highest_on_delete() {
    let message = journal_failure("j15_delete_all", Mutation::LowersHighestOnDelete).await;
    assert_mentions(
        &message,
        &["J15", "highest sequence number", "left: 0", "right: 5"],
    );

    let mismatch =
        check_journal_against_model(Mutant::new(Mutation::LowersHighestOnDelete), &seeded(1))
            .await
            .expect_err(
                "the model check must notice a highest sequence number lowered by a delete",
            );
    assert_mentions(
        &mismatch.message,
        &["highest sequence number", "the model says"],
    );
    assert!(
        mismatch.ops.len() <= 3,
        "shrinking finds a small case (a write and a delete): {mismatch}"
    );
}

#[actix::test]
async fn suite_catches_a_store_whose_atomic_writes_are_not_atomic() {
    let message = journal_failure(
        "j23_failed_atomic_write_stores_nothing",
        Mutation::NotAtomic,
    )
    .await;
    assert_mentions(&message, &["J23", "none of its events stored"]);
}

#[actix::test]
async fn suite_catches_a_store_that_answers_once_per_event() {
    let message = journal_failure(
        "j22_one_result_per_atomic_write",
        Mutation::OneResultPerEvent,
    )
    .await;
    assert_mentions(&message, &["returned 5 results for 4 atomic writes"]);
}

#[actix::test]
async fn suite_catches_a_store_that_overwrites_silently() {
    let message = journal_failure("j24_second_writer_fails", Mutation::SwallowsConflicts).await;
    assert_mentions(
        &message,
        &["J24", "must fail, but the store reported success"],
    );
}

#[actix::test]
async fn suite_catches_a_store_that_ignores_the_case_of_ids() {
    let message = journal_failure(
        "j25_persistence_ids_are_byte_exact",
        Mutation::CaseInsensitiveIds,
    )
    .await;
    assert_mentions(&message, &["J25"]);
}

#[actix::test]
async fn suite_catches_a_store_that_ignores_the_replay_max() {
    let message = journal_failure("j04_replay_with_max", Mutation::IgnoresReplayMax).await;
    assert_mentions(&message, &["J4 replay(1, MAX, 3)", "sequence numbers"]);

    let mismatch = check_journal_against_model(Mutant::new(Mutation::IgnoresReplayMax), &seeded(2))
        .await
        .expect_err("the model check must notice a replay returning more than max");
    assert_mentions(&mismatch.message, &["the model says"]);
}

#[actix::test]
async fn suite_catches_a_store_that_loses_tags() {
    let message = journal_failure("j26_metadata_round_trip", Mutation::DropsTags).await;
    assert_mentions(&message, &["J26: tags of 6"]);
}

#[actix::test]
async fn suite_catches_a_store_that_takes_no_ownership() {
    let message =
        journal_failure("f01_ownership_raises_the_epoch", Mutation::TakesNoOwnership).await;
    assert_mentions(&message, &["F1", "token above UNOWNED"]);
}

#[actix::test]
async fn suite_catches_a_store_that_accepts_stale_fencing_tokens() {
    let message = journal_failure(
        "f02_older_token_is_fenced_and_stores_nothing",
        Mutation::AcceptsStaleTokens,
    )
    .await;
    assert_mentions(
        &message,
        &["F2", "must fail, but the store reported success"],
    );
}

#[actix::test]
async fn suite_catches_a_store_that_deletes_with_stale_fencing_tokens() {
    let message = journal_failure(
        "f05_older_token_deletes_nothing",
        Mutation::DeletesWithStaleTokens,
    )
    .await;
    assert_mentions(&message, &["F5", "must fail with JournalError::Fenced"]);
}

#[actix::test]
async fn suite_catches_a_store_that_fails_writes_over_the_limits_instead_of_rejecting() {
    let message = journal_failure(
        "j27_store_rejects_writes_over_the_limits",
        Mutation::FailsWritesOverTheLimits,
    )
    .await;
    assert_mentions(&message, &["J27", "must be rejected"]);
}

#[actix::test]
async fn j30_catches_replay_bounds_that_forget_the_deletes() {
    let message = journal_failure(
        "j30_replay_bounds_agree_with_their_reads",
        Mutation::BoundsWithoutDeletes,
    )
    .await;
    assert_mentions(&message, &["J30", "after a delete up to 3"]);
}

#[actix::test]
async fn every_other_journal_case_passes_against_the_unbroken_store() {
    for case in journal::CASES {
        let store: Arc<dyn JournalStore> = Arc::new(InMemoryJournal::new());
        case.run(store).await;
    }
}

/// How a [`SnapshotMutant`] breaks the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SnapshotMutation {
    /// Loads ignore the max timestamp bound.
    IgnoresMaxTimestamp,
    /// Saving at a sequence number that already has a snapshot keeps the old one.
    KeepsFirstSnapshot,
    /// Truncates payloads above 1 MiB.
    TruncatesLargePayloads,
    /// Lists snapshots' metadata oldest first.
    ListsOldestFirst,
}

struct SnapshotMutant {
    inner: InMemorySnapshotStore,
    mutation: SnapshotMutation,
}

#[async_trait]
impl SnapshotStore for SnapshotMutant {
    async fn load(
        &self,
        pid: &str,
        mut criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        if self.mutation == SnapshotMutation::IgnoresMaxTimestamp {
            criteria.max_timestamp = i64::MAX;
        }
        self.inner.load(pid, criteria).await
    }

    async fn save(
        &self,
        metadata: SnapshotMetadata,
        mut snapshot: SerializedSnapshot,
    ) -> Result<(), SnapshotError> {
        match self.mutation {
            SnapshotMutation::KeepsFirstSnapshot => {
                let at = SnapshotSelectionCriteria {
                    max_seq_nr: metadata.seq_nr,
                    min_seq_nr: metadata.seq_nr,
                    ..SnapshotSelectionCriteria::latest()
                };
                if self
                    .inner
                    .load(&metadata.persistence_id, at)
                    .await?
                    .is_some()
                {
                    return Ok(());
                }
            }
            SnapshotMutation::TruncatesLargePayloads => snapshot.payload.truncate(1 << 20),
            SnapshotMutation::IgnoresMaxTimestamp | SnapshotMutation::ListsOldestFirst => {}
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

    async fn read_metadata(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
        limit: u32,
    ) -> Result<Vec<SnapshotMetadata>, SnapshotError> {
        if self.mutation != SnapshotMutation::ListsOldestFirst {
            return self.inner.read_metadata(pid, criteria, limit).await;
        }
        let mut every = self.inner.read_metadata(pid, criteria, u32::MAX).await?;
        every.reverse();
        every.truncate(limit as usize);
        Ok(every)
    }
}

/// Runs snapshot case `name` against a store broken by `mutation`; returns its failure message.
async fn snapshot_failure(name: &str, mutation: SnapshotMutation) -> String {
    let case = snapshot::case(name).unwrap_or_else(|| panic!("no case {name}"));
    let store: Arc<dyn SnapshotStore> = Arc::new(SnapshotMutant {
        inner: InMemorySnapshotStore::new(),
        mutation,
    });
    failure_message(name, mutation, case.run(store)).await
}

#[actix::test]
async fn snapshot_suite_catches_a_store_that_ignores_the_max_timestamp() {
    let message = snapshot_failure(
        "s02_load_max_timestamp_too_early",
        SnapshotMutation::IgnoresMaxTimestamp,
    )
    .await;
    assert_mentions(&message, &["S2", "got \"\\\"s-5\\\"\"", "expected none"]);
}

#[actix::test]
async fn snapshot_suite_catches_a_store_that_does_not_replace_on_save() {
    let message = snapshot_failure(
        "s10_save_again_replaces",
        SnapshotMutation::KeepsFirstSnapshot,
    )
    .await;
    assert_mentions(&message, &["S10 load latest", "s-5"]);
}

#[actix::test]
async fn snapshot_suite_catches_a_store_that_truncates_large_snapshots() {
    let message = snapshot_failure(
        "s11_large_snapshots_round_trip",
        SnapshotMutation::TruncatesLargePayloads,
    )
    .await;
    assert_mentions(&message, &["S11: length of the 52428800-byte snapshot"]);
}

#[actix::test]
async fn snapshot_suite_catches_a_store_that_lists_metadata_oldest_first() {
    let message = snapshot_failure(
        "s14_read_metadata_lists_the_newest",
        SnapshotMutation::ListsOldestFirst,
    )
    .await;
    assert_mentions(
        &message,
        &["S14 every snapshot, limit 10", "the metadata listed"],
    );
}

/// A store that implements only the required methods: `read_metadata` is the trait's default,
/// which loads the snapshots one at a time.
struct LoadsOnly(InMemorySnapshotStore);

#[async_trait]
impl SnapshotStore for LoadsOnly {
    async fn load(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        self.0.load(pid, criteria).await
    }

    async fn save(
        &self,
        metadata: SnapshotMetadata,
        snapshot: SerializedSnapshot,
    ) -> Result<(), SnapshotError> {
        self.0.save(metadata, snapshot).await
    }

    async fn delete(&self, metadata: &SnapshotMetadata) -> Result<(), SnapshotError> {
        self.0.delete(metadata).await
    }

    async fn delete_matching(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError> {
        self.0.delete_matching(pid, criteria).await
    }
}

#[actix::test]
async fn the_default_read_metadata_passes_its_case() {
    let case = snapshot::case("s14_read_metadata_lists_the_newest").expect("case S14");
    case.run(Arc::new(LoadsOnly(InMemorySnapshotStore::new())))
        .await;
}
