//! Group commit, on SQLite and on PostgreSQL: concurrent calls share transactions, a conflict
//! fails only its own atomic write, a failed COMMIT fails every write of its batch, and no
//! success is sent before the commit: a success is visible to other connections when it
//! arrives.
#![cfg(any(feature = "sqlite", feature = "test-util"))]

mod common;

use std::ops::RangeInclusive;
use std::time::Duration;

use actix_persistence_core::{
    AtomicWrite, AtomicWriteError, JournalError, JournalStore, MAX_SEQ_NR,
};
use actix_persistence_sql::SqlStoreError;
use common::{
    assert_all_ok, assert_write_failed_with, atomic, backend_tests, concurrent_write_seq_nr,
    event_with_payload, queue, recover, replay_events, write_all_ok, Setting, TestBackend,
};

const MAX: u64 = MAX_SEQ_NR;

/// Long enough for the writer to wait for a lock a test holds.
const LOCK_WAIT: Setting = Setting::LockWait(Duration::from_secs(30));

/// Makes `calls` concurrent `write_messages` calls, each from a task of its own: call `i`
/// writes `seq_nrs` of `<prefix>-<i>` in one atomic write. Asserts that every one succeeded.
async fn write_concurrently<J: JournalStore + Clone>(
    journal: &J,
    calls: usize,
    prefix: &str,
    seq_nrs: RangeInclusive<u64>,
) {
    let tasks: Vec<_> = (0..calls)
        .map(|i| {
            let journal = journal.clone();
            let pid = format!("{prefix}-{i}");
            let seq_nrs = seq_nrs.clone();
            tokio::spawn(async move { journal.write_messages(vec![atomic(&pid, seq_nrs)]).await })
        })
        .collect();
    for task in tasks {
        let results = task.await.unwrap().unwrap();
        assert_eq!(results.len(), 1);
        assert_all_ok(&results);
    }
}

backend_tests! {
    two_hundred_concurrent_single_write_calls_share_few_transactions,
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    two_hundred_concurrent_calls_on_worker_threads_use_far_fewer_transactions,
    calls_queued_while_a_transaction_is_in_flight_share_the_next_one,
    conflict_in_a_batch_fails_only_that_write_and_the_others_commit,
    writes_of_one_id_in_one_batch_commit_together_and_raise_its_highest_once,
    failed_commit_fails_every_write_of_the_batch_and_stores_none,
    failed_commit_of_a_lone_write_fails_it,
    success_is_sent_only_after_the_commit,
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    every_success_is_visible_to_another_connection_when_it_arrives,
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    max_batch_size_one_commits_every_atomic_write_alone,
    call_with_more_writes_than_the_bound_is_stored_in_order_in_several_transactions,
    queued_call_dropped_before_the_writer_took_it_stores_nothing,
    writes_fail_with_a_clear_error_once_the_writer_task_is_gone,
    ownership_takes_queued_together_each_get_their_ids_epoch_and_highest,
}

async fn two_hundred_concurrent_single_write_calls_share_few_transactions<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    write_concurrently(&journal, 200, "actor", 1..=1).await;
    let stats = B::stats(&journal);
    assert_eq!(stats.atomic_writes, 200);
    eprintln!(
        "{} transactions for 200 single-write calls",
        stats.transactions
    );
    // All 200 are queued before a writer task runs: the first takes them all (the bound is
    // 512 by default).
    assert!(stats.transactions <= 10, "{stats:?}");
    assert_eq!(stats.largest_batch, 200);
    for i in [0, 63, 64, 199] {
        let pid = format!("actor-{i}");
        assert_eq!(recover(&journal, &pid, 1, MAX, MAX).await, (vec![1], 1));
    }
}

async fn two_hundred_concurrent_calls_on_worker_threads_use_far_fewer_transactions<
    B: TestBackend,
>(
    db: B,
) {
    let journal = db.journal().await;
    write_concurrently(&journal, 200, "actor", 1..=1).await;
    let stats = B::stats(&journal);
    assert_eq!(stats.atomic_writes, 200);
    eprintln!(
        "{} transactions for 200 single-write calls",
        stats.transactions
    );
    assert!(stats.transactions < 50, "{stats:?}");
    for i in 0..200 {
        let pid = format!("actor-{i}");
        assert_eq!(recover(&journal, &pid, 1, MAX, MAX).await, (vec![1], 1));
    }
}

async fn calls_queued_while_a_transaction_is_in_flight_share_the_next_one<B: TestBackend>(db: B) {
    let journal = db.journal_with(&[LOCK_WAIT]).await;
    let (hold, blocked) = db.hold_writer(&journal).await;
    let before = B::stats(&journal);
    let mut calls = Vec::new();
    for i in 0..10 {
        calls.push(queue(&journal, vec![atomic(&format!("queued-{i}"), 1..=2)]).await);
    }
    B::release(hold).await;
    assert_all_ok(&blocked.await.unwrap());
    for call in calls {
        assert_all_ok(&call.await.unwrap());
    }
    let after = B::stats(&journal);
    // The held transaction, then one transaction for the ten queued calls.
    assert_eq!(after.transactions - before.transactions, 2);
    assert_eq!(after.atomic_writes - before.atomic_writes, 11);
    assert_eq!(after.largest_batch, 10);
    for i in 0..10 {
        let pid = format!("queued-{i}");
        assert_eq!(recover(&journal, &pid, 1, MAX, MAX).await, (vec![1, 2], 2));
    }
}

async fn conflict_in_a_batch_fails_only_that_write_and_the_others_commit<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    // Another writer (a second journal on the database) already stored p-1 seq 2.
    let zombie = db.journal().await;
    let first = event_with_payload("p-1", 2, b"first writer");
    write_all_ok(
        &zombie,
        vec![AtomicWrite::new(vec![first.clone()]).unwrap()],
    )
    .await;

    let a = queue(&journal, vec![atomic("a", 1..=2)]).await;
    let conflicting = queue(&journal, vec![atomic("p-1", 1..=3)]).await;
    let b = queue(&journal, vec![atomic("b", 1..=1), atomic("c", 1..=1)]).await;
    assert_all_ok(&a.await.unwrap());
    let results = conflicting.await.unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(concurrent_write_seq_nr(&results[0], "p-1"), 2);
    assert_all_ok(&b.await.unwrap());
    let stats = B::stats(&journal);
    assert_eq!(stats.transactions, 1, "one shared transaction");
    assert_eq!(stats.atomic_writes, 3);

    assert_eq!(recover(&journal, "a", 1, MAX, MAX).await, (vec![1, 2], 2));
    assert_eq!(recover(&journal, "b", 1, MAX, MAX).await, (vec![1], 1));
    assert_eq!(recover(&journal, "c", 1, MAX, MAX).await, (vec![1], 1));
    // The first writer's event is kept; seq 1 and 3 of the refused write are not stored.
    assert_eq!(
        replay_events(&journal, "p-1", 1, MAX, MAX).await,
        vec![first]
    );
    assert_eq!(journal.read_highest_sequence_nr("p-1", 0).await.unwrap(), 2);
}

async fn writes_of_one_id_in_one_batch_commit_together_and_raise_its_highest_once<
    B: TestBackend,
>(
    db: B,
) {
    let journal = db.journal().await;
    // One call with three atomic writes of "same" and one of "other": one batch, in which the
    // highest sequence number of "same" is raised by three rows of one statement.
    let results = journal
        .write_messages(vec![
            atomic("same", 1..=2),
            atomic("same", 3..=3),
            atomic("other", 1..=1),
            atomic("same", 4..=6),
        ])
        .await
        .unwrap();
    assert_eq!(results.len(), 4);
    assert_all_ok(&results);
    let stats = B::stats(&journal);
    assert_eq!(stats.transactions, 1, "one transaction for the whole call");
    assert_eq!(stats.atomic_writes, 4);
    assert_eq!(
        recover(&journal, "same", 1, MAX, MAX).await,
        ((1..=6).collect(), 6)
    );
    assert_eq!(recover(&journal, "other", 1, MAX, MAX).await, (vec![1], 1));
}

async fn failed_commit_fails_every_write_of_the_batch_and_stores_none<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    db.fail_commits_with_marker().await;
    let a = queue(&journal, vec![atomic("a", 1..=2)]).await;
    let marked =
        AtomicWrite::new(vec![event_with_payload("marked", 1, b"x COMMIT-BOMB x")]).unwrap();
    let bomb = queue(&journal, vec![atomic("b", 1..=1), marked]).await;
    let c = queue(&journal, vec![atomic("c", 1..=1)]).await;
    let a = a.await.unwrap();
    let bomb = bomb.await.unwrap();
    let c = c.await.unwrap();
    assert_eq!((a.len(), bomb.len(), c.len()), (1, 2, 1));
    for result in a.iter().chain(&bomb).chain(&c) {
        assert_write_failed_with(result, B::COMMIT_REFUSAL);
    }
    assert_eq!(B::stats(&journal).transactions, 0);
    // Nothing of the batch is stored, seen from the journal and from outside.
    for pid in ["a", "b", "c", "marked"] {
        assert_eq!(
            recover(&journal, pid, 1, MAX, MAX).await,
            (vec![], 0),
            "{pid}"
        );
    }
    assert_eq!(db.query_i64s("SELECT count(*) FROM journal").await, vec![0]);

    // The writer goes on: the same writes without the marker commit.
    let results = journal
        .write_messages(vec![
            atomic("a", 1..=2),
            atomic("b", 1..=1),
            atomic("c", 1..=1),
        ])
        .await
        .unwrap();
    assert_all_ok(&results);
    assert_eq!(B::stats(&journal).transactions, 1);
}

async fn failed_commit_of_a_lone_write_fails_it<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    db.fail_commits_with_marker().await;
    let marked = AtomicWrite::new(vec![event_with_payload("marked", 1, b"COMMIT-BOMB")]).unwrap();
    let results = journal.write_messages(vec![marked]).await.unwrap();
    assert_eq!(results.len(), 1);
    assert_write_failed_with(&results[0], B::COMMIT_REFUSAL);
    assert_eq!(recover(&journal, "marked", 1, MAX, MAX).await, (vec![], 0));
    assert_eq!(B::stats(&journal).transactions, 0);
    write_all_ok(&journal, vec![atomic("after", 1..=1)]).await;
}

async fn success_is_sent_only_after_the_commit<B: TestBackend>(db: B) {
    let journal = db.journal_with(&[LOCK_WAIT]).await;
    let outside = db.outside().await;
    let (hold, mut blocked) = db.hold_writer(&journal).await;
    // The writer waits: no answer yet, and nothing of the write is visible.
    assert!(futures::poll!(&mut blocked).is_pending());
    assert_eq!(B::count_stored(&outside, "blocker", 2).await, 0);
    B::release(hold).await;
    assert_all_ok(&blocked.await.unwrap());
    assert_eq!(B::count_stored(&outside, "blocker", 2).await, 1);
}

async fn every_success_is_visible_to_another_connection_when_it_arrives<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    let outside = db.outside().await;
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let journal = journal.clone();
            let outside = outside.clone();
            tokio::spawn(async move {
                let pid = format!("seen-{i}");
                let results = journal
                    .write_messages(vec![atomic(&pid, 1..=2)])
                    .await
                    .unwrap();
                assert_all_ok(&results);
                (
                    B::count_stored(&outside, &pid, 1).await,
                    B::count_stored(&outside, &pid, 2).await,
                )
            })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        assert_eq!(task.await.unwrap(), (1, 1), "seen-{i}");
    }
}

async fn max_batch_size_one_commits_every_atomic_write_alone<B: TestBackend>(db: B) {
    let journal = db.journal_with(&[Setting::MaxBatchSize(1)]).await;
    write_concurrently(&journal, 20, "alone", 1..=2).await;
    let results = journal
        .write_messages(vec![
            atomic("x", 1..=1),
            atomic("x", 2..=2),
            atomic("x", 1..=1),
        ])
        .await
        .unwrap();
    assert!(results[0].is_ok() && results[1].is_ok());
    assert_eq!(concurrent_write_seq_nr(&results[2], "x"), 1);
    let stats = B::stats(&journal);
    assert_eq!(stats.transactions, 22);
    assert_eq!(stats.atomic_writes, 22);
    assert_eq!(stats.largest_batch, 1);
    assert_eq!(recover(&journal, "x", 1, MAX, MAX).await, (vec![1, 2], 2));
}

async fn call_with_more_writes_than_the_bound_is_stored_in_order_in_several_transactions<
    B: TestBackend,
>(
    db: B,
) {
    let journal = db.journal_with(&[Setting::MaxBatchSize(4)]).await;
    let writes: Vec<_> = (1..=10).map(|n| atomic("long", n..=n)).collect();
    let results = journal.write_messages(writes).await.unwrap();
    assert_eq!(results.len(), 10);
    assert_all_ok(&results);
    let stats = B::stats(&journal);
    assert_eq!(stats.transactions, 3, "4 + 4 + 2");
    assert_eq!(stats.largest_batch, 4);
    assert_eq!(
        recover(&journal, "long", 1, MAX, MAX).await,
        ((1..=10).collect(), 10)
    );
    // Stored in call order: the global ordering follows the sequence numbers.
    let by_ordering = db
        .query_i64s("SELECT seq_nr FROM journal WHERE persistence_id = 'long' ORDER BY ordering")
        .await;
    assert_eq!(by_ordering, (1..=10).collect::<Vec<i64>>());
}

async fn queued_call_dropped_before_the_writer_took_it_stores_nothing<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    let kept = queue(&journal, vec![atomic("kept", 1..=1)]).await;
    let dropped = queue(&journal, vec![atomic("dropped", 1..=1)]).await;
    drop(dropped);
    assert_all_ok(&kept.await.unwrap());
    assert_eq!(recover(&journal, "dropped", 1, MAX, MAX).await, (vec![], 0));
    assert_eq!(B::stats(&journal).atomic_writes, 1);
}

async fn writes_fail_with_a_clear_error_once_the_writer_task_is_gone<B: TestBackend>(db: B) {
    let options = db.options(&[]);
    // The journal's writer task lives on a runtime that then shuts down.
    let journal = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(B::connect(&options)).unwrap()
    })
    .join()
    .unwrap();
    let results = journal
        .write_messages(vec![atomic("orphan", 1..=1), atomic("orphan", 2..=2)])
        .await
        .unwrap();
    assert_eq!(results.len(), 2);
    for result in &results {
        match result {
            Err(AtomicWriteError::Failed(JournalError::Storage { source, .. })) => {
                assert!(
                    matches!(
                        source.downcast_ref::<SqlStoreError>(),
                        Some(SqlStoreError::WriterStopped)
                    ),
                    "{source}"
                );
                assert!(
                    source.to_string().contains("writer task has stopped"),
                    "{source}"
                );
            }
            other => panic!("expected the stopped writer, got {other:?}"),
        }
    }
}

/// Ownership takes queued together (a thousand recoveries at once) share a transaction with
/// one multi-row statement for distinct ids: each take must still get its own id's new epoch
/// and highest sequence number, whatever order the database returns the rows in. A batch
/// asking for one id twice raises it twice (two tokens).
async fn ownership_takes_queued_together_each_get_their_ids_epoch_and_highest<B: TestBackend>(
    db: B,
) {
    let journal = db.journal().await;
    // Ids with 1..=i events (id 0 never wrote), and a first takeover of every odd one.
    for i in 1..40u64 {
        write_all_ok(&journal, vec![atomic(&format!("own-{i}"), 1..=i)]).await;
    }
    for i in (1..40u64).step_by(2) {
        journal.take_ownership(&format!("own-{i}")).await.unwrap();
    }
    // Distinct ids, queued together: one multi-row take.
    let ids: Vec<String> = (0..40).rev().map(|i| format!("own-{i}")).collect();
    let owned = futures::future::join_all(ids.iter().map(|id| journal.take_ownership(id))).await;
    for (id, ownership) in ids.iter().zip(owned) {
        let ownership = ownership.unwrap();
        let i: u64 = id["own-".len()..].parse().unwrap();
        assert_eq!(ownership.highest_seq_nr, i, "highest of {id}");
        let expected = if i % 2 == 1 { 2 } else { 1 };
        assert_eq!(ownership.fencing_token.get(), expected, "token of {id}");
    }
    // One id twice in a batch: raised twice.
    let ids = ["own-7", "own-8", "own-7"];
    let owned = futures::future::join_all(ids.iter().map(|id| journal.take_ownership(id))).await;
    let tokens: Vec<u64> = owned
        .into_iter()
        .map(|o| o.unwrap().fencing_token.get())
        .collect();
    assert_eq!(tokens[1], 2, "own-8 once more");
    let mut seven = vec![tokens[0], tokens[2]];
    seven.sort_unstable();
    assert_eq!(
        seven,
        vec![3, 4],
        "own-7 taken twice in the batch: raised twice"
    );
}
