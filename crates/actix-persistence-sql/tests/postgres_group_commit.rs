//! Group commit of the PostgreSQL journal: concurrent calls share transactions, a conflict
//! fails only its own atomic write, a failed COMMIT fails every write of its batch, and no
//! success is sent before the commit. Each test runs in a database of its own (skipped without
//! `DATABASE_URL`, except in CI).
#![cfg(feature = "postgres")]

mod common;

use std::future::Future;
use std::pin::Pin;

use actix_persistence_core::{
    AtomicWrite, AtomicWriteError, AtomicWriteResult, JournalError, JournalStore, MAX_SEQ_NR,
};
use actix_persistence_sql::{PostgresJournal, SqlStoreError};
use common::postgres::{with_database, TestDb, WriterBlock};
use common::{
    atomic, concurrent_write_seq_nr, event_with_payload, recover, replay_events, write_all_ok,
};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, Executor};

const MAX: u64 = MAX_SEQ_NR;

type Pending = Pin<Box<dyn Future<Output = Result<Vec<AtomicWriteResult>, JournalError>> + Send>>;

/// Starts a `write_messages` call and polls it once, so its writes are queued; the call is
/// still waiting for its transaction.
async fn queue(journal: &PostgresJournal, writes: Vec<AtomicWrite>) -> Pending {
    let journal = journal.clone();
    let mut call: Pending = Box::pin(async move { journal.write_messages(writes).await });
    assert!(
        futures::poll!(&mut call).is_pending(),
        "the call waits for its transaction"
    );
    call
}

/// Blocks the writer inside a transaction that stores `blocker` seq 2; returns the lock and
/// the blocked call.
async fn block_writer(db: &TestDb, journal: &PostgresJournal) -> (WriterBlock, Pending) {
    write_all_ok(journal, vec![atomic("blocker", 1..=1)]).await;
    let mut block = WriterBlock::lock(db, "blocker").await;
    let blocked = queue(journal, vec![atomic("blocker", 2..=2)]).await;
    block.wait_until_writer_waits().await;
    (block, blocked)
}

/// Counts the rows of `pid` at `seq_nr` as a connection outside the journal sees them.
async fn visible(conn: &mut sqlx::PgConnection, pid: &str, seq_nr: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM journal WHERE persistence_id = $1 AND seq_nr = $2")
        .bind(pid)
        .bind(seq_nr)
        .fetch_one(conn)
        .await
        .expect("count")
}

fn assert_all_ok(results: &[AtomicWriteResult]) {
    for (i, result) in results.iter().enumerate() {
        assert!(result.is_ok(), "atomic write {i}: {result:?}");
    }
}

#[tokio::test]
async fn two_hundred_concurrent_single_write_calls_share_few_transactions() {
    with_database(|db| async move {
        let journal = db.journal().await;
        let before = journal.stats();
        let tasks: Vec<_> = (0..200)
            .map(|i| {
                let journal = journal.clone();
                tokio::spawn(async move {
                    let pid = format!("actor-{i}");
                    journal.write_messages(vec![atomic(&pid, 1..=1)]).await
                })
            })
            .collect();
        for task in tasks {
            let results = task.await.unwrap().unwrap();
            assert_eq!(results.len(), 1);
            assert_all_ok(&results);
        }
        let after = journal.stats();
        assert_eq!(after.atomic_writes - before.atomic_writes, 200);
        let transactions = after.transactions - before.transactions;
        eprintln!("{transactions} transactions for 200 single-write calls");
        // All 200 are queued before the writer runs: 64 + 64 + 64 + 8.
        assert!(
            transactions <= 10,
            "{transactions} transactions for 200 writes"
        );
        assert_eq!(after.largest_batch, 64);
        for i in [0, 63, 64, 199] {
            let pid = format!("actor-{i}");
            assert_eq!(recover(&journal, &pid, 1, MAX, MAX).await, (vec![1], 1));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_calls_on_worker_threads_use_far_fewer_transactions() {
    with_database(|db| async move {
        let journal = db.journal().await;
        let before = journal.stats();
        let tasks: Vec<_> = (0..200)
            .map(|i| {
                let journal = journal.clone();
                tokio::spawn(async move {
                    let pid = format!("actor-{i}");
                    let results = journal.write_messages(vec![atomic(&pid, 1..=1)]).await;
                    (pid, results)
                })
            })
            .collect();
        for task in tasks {
            let (pid, results) = task.await.unwrap();
            assert_all_ok(&results.unwrap());
            assert_eq!(recover(&journal, &pid, 1, MAX, MAX).await, (vec![1], 1));
        }
        let after = journal.stats();
        assert_eq!(after.atomic_writes - before.atomic_writes, 200);
        let transactions = after.transactions - before.transactions;
        eprintln!("{transactions} transactions for 200 single-write calls");
        assert!(
            transactions < 50,
            "{transactions} transactions for 200 writes"
        );
    })
    .await;
}

#[tokio::test]
async fn calls_queued_while_a_transaction_is_in_flight_share_the_next_one() {
    with_database(|db| async move {
        let journal = db.journal().await;
        let (block, blocked) = block_writer(&db, &journal).await;
        let before = journal.stats();
        let mut calls = Vec::new();
        for i in 0..10 {
            calls.push(queue(&journal, vec![atomic(&format!("queued-{i}"), 1..=1)]).await);
        }
        block.release().await;
        assert_all_ok(&blocked.await.unwrap());
        for call in calls {
            assert_all_ok(&call.await.unwrap());
        }
        let after = journal.stats();
        // The blocked transaction, then one transaction for the ten queued calls.
        assert_eq!(after.transactions - before.transactions, 2);
        assert_eq!(after.atomic_writes - before.atomic_writes, 11);
        assert_eq!(after.largest_batch, 10);
        for i in 0..10 {
            let pid = format!("queued-{i}");
            assert_eq!(recover(&journal, &pid, 1, MAX, MAX).await, (vec![1], 1));
        }
    })
    .await;
}

#[tokio::test]
async fn conflict_in_a_batch_fails_only_that_write_and_the_others_commit() {
    with_database(|db| async move {
        let journal = db.journal().await;
        // Another writer (a second journal) already stored p-1 seq 1.
        let zombie = db.journal().await;
        let first = event_with_payload("p-1", 1, b"first writer");
        write_all_ok(
            &zombie,
            vec![AtomicWrite::new(vec![first.clone()]).unwrap()],
        )
        .await;

        let (block, blocked) = block_writer(&db, &journal).await;
        let before = journal.stats();
        let a = queue(&journal, vec![atomic("a", 1..=2)]).await;
        let conflicting = queue(&journal, vec![atomic("p-1", 1..=3)]).await;
        let b = queue(&journal, vec![atomic("b", 1..=1), atomic("c", 1..=1)]).await;
        block.release().await;
        assert_all_ok(&blocked.await.unwrap());

        assert_all_ok(&a.await.unwrap());
        let results = conflicting.await.unwrap();
        assert_eq!(results.len(), 1);
        assert_eq!(concurrent_write_seq_nr(&results[0], "p-1"), 1);
        assert_all_ok(&b.await.unwrap());
        let after = journal.stats();
        assert_eq!(
            after.transactions - before.transactions,
            2,
            "one shared transaction"
        );
        assert_eq!(after.atomic_writes - before.atomic_writes, 1 + 3);

        assert_eq!(recover(&journal, "a", 1, MAX, MAX).await, (vec![1, 2], 2));
        assert_eq!(recover(&journal, "b", 1, MAX, MAX).await, (vec![1], 1));
        assert_eq!(recover(&journal, "c", 1, MAX, MAX).await, (vec![1], 1));
        // The first writer's event is kept, and nothing of the refused write is stored.
        assert_eq!(
            replay_events(&journal, "p-1", 1, MAX, MAX).await,
            vec![first]
        );
        assert_eq!(journal.read_highest_sequence_nr("p-1", 0).await.unwrap(), 1);
    })
    .await;
}

/// Makes every COMMIT fail whose transaction inserted an event with a payload holding
/// `COMMIT-BOMB`: a constraint trigger deferred to commit time.
async fn fail_commits_with_marker(db: &TestDb) {
    let mut conn = db.connect().await;
    conn.execute(
        "CREATE FUNCTION refuse_marked() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN \
             IF position(convert_to('COMMIT-BOMB', 'UTF8') IN NEW.payload) > 0 THEN \
                 RAISE EXCEPTION 'commit refused: % holds the marker', NEW.persistence_id; \
             END IF; \
             RETURN NULL; \
         END $$",
    )
    .await
    .unwrap();
    conn.execute(
        "CREATE CONSTRAINT TRIGGER refuse_marked AFTER INSERT ON journal \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_marked()",
    )
    .await
    .unwrap();
    conn.close().await.unwrap();
}

fn assert_commit_refused(result: &AtomicWriteResult) {
    match result {
        Err(AtomicWriteError::Failed(JournalError::Storage { operation, source })) => {
            assert_eq!(*operation, "write");
            assert!(source.to_string().contains("commit refused"), "{source}");
        }
        other => panic!("expected the failed commit, got {other:?}"),
    }
}

#[tokio::test]
async fn failed_commit_fails_every_write_of_the_batch_and_stores_none() {
    with_database(|db| async move {
        let journal = db.journal().await;
        fail_commits_with_marker(&db).await;
        let (block, blocked) = block_writer(&db, &journal).await;
        let before = journal.stats();
        let a = queue(&journal, vec![atomic("a", 1..=2)]).await;
        let marked =
            AtomicWrite::new(vec![event_with_payload("marked", 1, b"x COMMIT-BOMB x")]).unwrap();
        let bomb = queue(&journal, vec![atomic("b", 1..=1), marked]).await;
        let c = queue(&journal, vec![atomic("c", 1..=1)]).await;
        block.release().await;
        assert_all_ok(&blocked.await.unwrap());

        let a = a.await.unwrap();
        let bomb = bomb.await.unwrap();
        let c = c.await.unwrap();
        assert_eq!((a.len(), bomb.len(), c.len()), (1, 2, 1));
        for result in a.iter().chain(&bomb).chain(&c) {
            assert_commit_refused(result);
        }
        let after = journal.stats();
        assert_eq!(
            after.transactions - before.transactions,
            1,
            "only the blocked one"
        );
        assert_eq!(after.atomic_writes - before.atomic_writes, 1);
        // Nothing of the batch is stored, seen from the journal and from outside.
        for pid in ["a", "b", "c", "marked"] {
            assert_eq!(
                recover(&journal, pid, 1, MAX, MAX).await,
                (vec![], 0),
                "{pid}"
            );
        }
        let mut conn = db.connect().await;
        let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM journal")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(stored, 2, "only blocker 1 and 2");
        conn.close().await.unwrap();

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
    })
    .await;
}

#[tokio::test]
async fn failed_commit_of_a_lone_write_fails_it() {
    with_database(|db| async move {
        let journal = db.journal().await;
        fail_commits_with_marker(&db).await;
        let marked =
            AtomicWrite::new(vec![event_with_payload("marked", 1, b"COMMIT-BOMB")]).unwrap();
        let results = journal.write_messages(vec![marked]).await.unwrap();
        assert_eq!(results.len(), 1);
        assert_commit_refused(&results[0]);
        assert_eq!(recover(&journal, "marked", 1, MAX, MAX).await, (vec![], 0));
        assert_eq!(journal.stats().transactions, 0);
    })
    .await;
}

#[tokio::test]
async fn success_is_sent_only_after_the_commit() {
    with_database(|db| async move {
        let journal = db.journal().await;
        let mut outside = db.connect().await;
        let (block, mut blocked) = block_writer(&db, &journal).await;
        // The writer has inserted blocker 2 and waits: no answer yet, and nothing visible.
        assert!(futures::poll!(&mut blocked).is_pending());
        assert_eq!(visible(&mut outside, "blocker", 2).await, 0);
        block.release().await;
        assert_all_ok(&blocked.await.unwrap());
        assert_eq!(visible(&mut outside, "blocker", 2).await, 1);
        outside.close().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_success_is_visible_to_another_connection_when_it_arrives() {
    with_database(|db| async move {
        let journal = db.journal().await;
        let outside = PgPoolOptions::new()
            .max_connections(4)
            .connect(&db.url)
            .await
            .unwrap();
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
                    let mut conn = outside.acquire().await.unwrap();
                    (
                        visible(&mut conn, &pid, 1).await,
                        visible(&mut conn, &pid, 2).await,
                    )
                })
            })
            .collect();
        for (i, task) in tasks.into_iter().enumerate() {
            assert_eq!(task.await.unwrap(), (1, 1), "seen-{i}");
        }
        outside.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_batch_size_one_commits_every_atomic_write_alone() {
    with_database(|db| async move {
        let journal = db.journal_with(|o| o.max_batch_size = 1).await;
        let tasks: Vec<_> = (0..20)
            .map(|i| {
                let journal = journal.clone();
                tokio::spawn(async move {
                    let pid = format!("alone-{i}");
                    journal.write_messages(vec![atomic(&pid, 1..=2)]).await
                })
            })
            .collect();
        for task in tasks {
            assert_all_ok(&task.await.unwrap().unwrap());
        }
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
        let stats = journal.stats();
        assert_eq!(stats.transactions, 22);
        assert_eq!(stats.atomic_writes, 22);
        assert_eq!(stats.largest_batch, 1);
        assert_eq!(recover(&journal, "x", 1, MAX, MAX).await, (vec![1, 2], 2));
    })
    .await;
}

#[tokio::test]
async fn call_with_more_writes_than_the_bound_is_stored_in_order_in_several_transactions() {
    with_database(|db| async move {
        let journal = db.journal_with(|o| o.max_batch_size = 4).await;
        let writes: Vec<_> = (1..=10).map(|n| atomic("long", n..=n)).collect();
        let results = journal.write_messages(writes).await.unwrap();
        assert_eq!(results.len(), 10);
        assert_all_ok(&results);
        let stats = journal.stats();
        assert_eq!(stats.transactions, 3, "4 + 4 + 2");
        assert_eq!(stats.largest_batch, 4);
        assert_eq!(
            recover(&journal, "long", 1, MAX, MAX).await,
            ((1..=10).collect(), 10)
        );
        // Stored in call order: the global ordering follows the sequence numbers.
        let mut conn = db.connect().await;
        let by_ordering: Vec<i64> = sqlx::query_scalar(
            "SELECT seq_nr FROM journal WHERE persistence_id = 'long' ORDER BY ordering",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        assert_eq!(by_ordering, (1..=10).collect::<Vec<i64>>());
        conn.close().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn writes_fail_with_a_clear_error_once_the_writer_task_is_gone() {
    with_database(|db| async move {
        let options = db.options();
        // The journal's writer task lives on a runtime that then shuts down.
        let journal = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime
                .block_on(PostgresJournal::connect(&options))
                .unwrap()
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
                    let stopped = source.downcast_ref::<SqlStoreError>();
                    assert!(
                        matches!(stopped, Some(SqlStoreError::WriterStopped)),
                        "{source}"
                    );
                }
                other => panic!("expected the stopped writer, got {other:?}"),
            }
        }
    })
    .await;
}
