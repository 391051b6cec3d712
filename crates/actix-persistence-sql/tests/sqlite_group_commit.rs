//! Group commit of the SQLite journal: concurrent calls share transactions, a conflict fails
//! only its own atomic write, a failed COMMIT fails every write of its batch, and a success is
//! visible to other connections when it arrives.
#![cfg(feature = "sqlite")]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use actix_persistence_core::{
    AtomicWrite, AtomicWriteError, AtomicWriteResult, JournalError, JournalStore, MAX_SEQ_NR,
};
use actix_persistence_sql::{SqlStoreError, SqliteJournal, SqliteJournalOptions};
use common::{
    atomic, concurrent_write_seq_nr, event_with_payload, recover, replay_events, write_all_ok,
    TestJournal,
};
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::{Connection, Executor, SqliteConnection};

const MAX: u64 = MAX_SEQ_NR;

type Pending = Pin<Box<dyn Future<Output = Result<Vec<AtomicWriteResult>, JournalError>> + Send>>;

/// Starts a `write_messages` call and polls it once, so its writes are queued; the call is
/// still waiting for its transaction. On the tests' single-threaded runtime the writer task
/// runs only when the test awaits, so calls queued one after the other share a transaction.
async fn queue(journal: &SqliteJournal, writes: Vec<AtomicWrite>) -> Pending {
    let journal = journal.clone();
    let mut call: Pending = Box::pin(async move { journal.write_messages(writes).await });
    assert!(
        futures::poll!(&mut call).is_pending(),
        "the call waits for its transaction"
    );
    call
}

async fn visible(conn: &mut SqliteConnection, pid: &str, seq_nr: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM journal WHERE persistence_id = ?1 AND seq_nr = ?2")
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

#[test]
fn default_max_batch_size_is_64() {
    assert_eq!(SqliteJournalOptions::default().max_batch_size, 64);
    assert_eq!(actix_persistence_sql::DEFAULT_MAX_BATCH_SIZE, 64);
}

#[tokio::test]
async fn max_batch_size_0_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteJournalOptions {
        max_batch_size: 0,
        ..SqliteJournalOptions::new(format!("sqlite:{}", dir.path().join("j.db").display()))
    };
    match SqliteJournal::connect(&options).await {
        Err(SqlStoreError::InvalidOption { option, value, .. }) => {
            assert_eq!((option, value.as_str()), ("max_batch_size", "0"));
        }
        other => panic!("expected an invalid option, got {other:?}"),
    }
}

#[tokio::test]
async fn two_hundred_concurrent_single_write_calls_share_few_transactions() {
    let db = TestJournal::open().await;
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let journal = db.journal.clone();
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
    let stats = db.journal.stats();
    assert_eq!(stats.atomic_writes, 200);
    eprintln!(
        "{} transactions for 200 single-write calls",
        stats.transactions
    );
    // All 200 are queued before the writer runs: 64 + 64 + 64 + 8.
    assert!(stats.transactions <= 10, "{stats:?}");
    assert_eq!(stats.largest_batch, 64);
    for i in [0, 63, 64, 199] {
        let pid = format!("actor-{i}");
        assert_eq!(recover(&db.journal, &pid, 1, MAX, MAX).await, (vec![1], 1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_calls_on_worker_threads_use_far_fewer_transactions() {
    let db = TestJournal::open().await;
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let journal = db.journal.clone();
            tokio::spawn(async move {
                let pid = format!("actor-{i}");
                journal.write_messages(vec![atomic(&pid, 1..=1)]).await
            })
        })
        .collect();
    for task in tasks {
        assert_all_ok(&task.await.unwrap().unwrap());
    }
    let stats = db.journal.stats();
    assert_eq!(stats.atomic_writes, 200);
    eprintln!(
        "{} transactions for 200 single-write calls",
        stats.transactions
    );
    assert!(stats.transactions < 50, "{stats:?}");
}

#[tokio::test]
async fn calls_queued_together_share_one_transaction() {
    let db = TestJournal::open().await;
    let mut calls = Vec::new();
    for i in 0..10 {
        calls.push(queue(&db.journal, vec![atomic(&format!("queued-{i}"), 1..=2)]).await);
    }
    for call in calls {
        assert_all_ok(&call.await.unwrap());
    }
    let stats = db.journal.stats();
    assert_eq!(stats.transactions, 1);
    assert_eq!(stats.atomic_writes, 10);
    for i in 0..10 {
        let pid = format!("queued-{i}");
        assert_eq!(
            recover(&db.journal, &pid, 1, MAX, MAX).await,
            (vec![1, 2], 2)
        );
    }
}

#[tokio::test]
async fn conflict_in_a_batch_fails_only_that_write_and_the_others_commit() {
    let db = TestJournal::open().await;
    // Another writer (a second journal on the file) already stored p-1 seq 2.
    let zombie = SqliteJournal::connect(&SqliteJournalOptions::new(db.url.clone()))
        .await
        .unwrap();
    let first = event_with_payload("p-1", 2, b"first writer");
    write_all_ok(
        &zombie,
        vec![AtomicWrite::new(vec![first.clone()]).unwrap()],
    )
    .await;

    let a = queue(&db.journal, vec![atomic("a", 1..=2)]).await;
    let conflicting = queue(&db.journal, vec![atomic("p-1", 1..=3)]).await;
    let b = queue(&db.journal, vec![atomic("b", 1..=1), atomic("c", 1..=1)]).await;
    assert_all_ok(&a.await.unwrap());
    let results = conflicting.await.unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(concurrent_write_seq_nr(&results[0], "p-1"), 2);
    assert_all_ok(&b.await.unwrap());
    let stats = db.journal.stats();
    assert_eq!(stats.transactions, 1, "one shared transaction");
    assert_eq!(stats.atomic_writes, 3);

    assert_eq!(
        recover(&db.journal, "a", 1, MAX, MAX).await,
        (vec![1, 2], 2)
    );
    assert_eq!(recover(&db.journal, "b", 1, MAX, MAX).await, (vec![1], 1));
    assert_eq!(recover(&db.journal, "c", 1, MAX, MAX).await, (vec![1], 1));
    // The first writer's event is kept; seq 1 and 3 of the refused write are not stored.
    assert_eq!(
        replay_events(&db.journal, "p-1", 1, MAX, MAX).await,
        vec![first]
    );
    assert_eq!(
        db.journal.read_highest_sequence_nr("p-1", 0).await.unwrap(),
        2
    );
}

/// Makes every COMMIT fail whose transaction inserted an event with a payload holding
/// `COMMIT-BOMB`: the trigger inserts a row whose foreign key, deferred to commit time, has no
/// parent.
async fn fail_commits_with_marker(db: &TestJournal) {
    let mut conn = SqliteConnection::connect(&db.url).await.unwrap();
    conn.execute("CREATE TABLE commit_guard_parent (id INTEGER PRIMARY KEY)")
        .await
        .unwrap();
    conn.execute(
        "CREATE TABLE commit_guard (parent INTEGER \
         REFERENCES commit_guard_parent (id) DEFERRABLE INITIALLY DEFERRED)",
    )
    .await
    .unwrap();
    conn.execute(
        "CREATE TRIGGER refuse_marked AFTER INSERT ON journal \
         WHEN instr(NEW.payload, CAST('COMMIT-BOMB' AS BLOB)) > 0 \
         BEGIN INSERT INTO commit_guard (parent) VALUES (-1); END",
    )
    .await
    .unwrap();
    conn.close().await.unwrap();
}

fn assert_commit_refused(result: &AtomicWriteResult) {
    match result {
        Err(AtomicWriteError::Failed(JournalError::Storage { operation, source })) => {
            assert_eq!(*operation, "write");
            assert!(source.to_string().contains("FOREIGN KEY"), "{source}");
        }
        other => panic!("expected the failed commit, got {other:?}"),
    }
}

#[tokio::test]
async fn failed_commit_fails_every_write_of_the_batch_and_stores_none() {
    let db = TestJournal::open().await;
    fail_commits_with_marker(&db).await;
    let a = queue(&db.journal, vec![atomic("a", 1..=2)]).await;
    let marked =
        AtomicWrite::new(vec![event_with_payload("marked", 1, b"x COMMIT-BOMB x")]).unwrap();
    let bomb = queue(&db.journal, vec![atomic("b", 1..=1), marked]).await;
    let c = queue(&db.journal, vec![atomic("c", 1..=1)]).await;
    let a = a.await.unwrap();
    let bomb = bomb.await.unwrap();
    let c = c.await.unwrap();
    assert_eq!((a.len(), bomb.len(), c.len()), (1, 2, 1));
    for result in a.iter().chain(&bomb).chain(&c) {
        assert_commit_refused(result);
    }
    assert_eq!(db.journal.stats().transactions, 0);
    for pid in ["a", "b", "c", "marked"] {
        assert_eq!(
            recover(&db.journal, pid, 1, MAX, MAX).await,
            (vec![], 0),
            "{pid}"
        );
    }
    let mut conn = SqliteConnection::connect(&db.url).await.unwrap();
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM journal")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(stored, 0);
    conn.close().await.unwrap();

    // The writer connection is usable again: the same writes without the marker commit.
    let results = db
        .journal
        .write_messages(vec![
            atomic("a", 1..=2),
            atomic("b", 1..=1),
            atomic("c", 1..=1),
        ])
        .await
        .unwrap();
    assert_all_ok(&results);
    assert_eq!(db.journal.stats().transactions, 1);
}

#[tokio::test]
async fn failed_commit_of_a_lone_write_fails_it() {
    let db = TestJournal::open().await;
    fail_commits_with_marker(&db).await;
    let marked = AtomicWrite::new(vec![event_with_payload("marked", 1, b"COMMIT-BOMB")]).unwrap();
    let results = db.journal.write_messages(vec![marked]).await.unwrap();
    assert_eq!(results.len(), 1);
    assert_commit_refused(&results[0]);
    assert_eq!(
        recover(&db.journal, "marked", 1, MAX, MAX).await,
        (vec![], 0)
    );
    write_all_ok(&db.journal, vec![atomic("after", 1..=1)]).await;
}

#[tokio::test]
async fn no_success_while_the_transaction_cannot_commit() {
    let db = TestJournal::open_with(|o| o.busy_timeout = Duration::from_secs(30)).await;
    let mut outside = SqliteConnection::connect(&db.url).await.unwrap();
    // Another connection holds the write lock: the writer's transaction cannot begin.
    outside.execute("BEGIN IMMEDIATE").await.unwrap();
    let mut call = queue(&db.journal, vec![atomic("waiting", 1..=1)]).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
        assert!(futures::poll!(&mut call).is_pending());
    }
    assert_eq!(visible(&mut outside, "waiting", 1).await, 0);
    outside.execute("COMMIT").await.unwrap();
    assert_all_ok(&call.await.unwrap());
    assert_eq!(visible(&mut outside, "waiting", 1).await, 1);
    outside.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_success_is_visible_to_another_connection_when_it_arrives() {
    let db = TestJournal::open().await;
    let outside = SqlitePoolOptions::new()
        .max_connections(4)
        .connect(&db.url)
        .await
        .unwrap();
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let journal = db.journal.clone();
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
}

#[tokio::test]
async fn max_batch_size_one_commits_every_atomic_write_alone() {
    let db = TestJournal::open_with(|o| o.max_batch_size = 1).await;
    let mut calls = Vec::new();
    for i in 0..5 {
        let journal = db.journal.clone();
        calls.push(tokio::spawn(async move {
            journal
                .write_messages(vec![atomic(&format!("alone-{i}"), 1..=2)])
                .await
        }));
    }
    for call in calls {
        assert_all_ok(&call.await.unwrap().unwrap());
    }
    let results = db
        .journal
        .write_messages(vec![
            atomic("x", 1..=1),
            atomic("x", 2..=2),
            atomic("x", 1..=1),
        ])
        .await
        .unwrap();
    assert!(results[0].is_ok() && results[1].is_ok());
    assert_eq!(concurrent_write_seq_nr(&results[2], "x"), 1);
    let stats = db.journal.stats();
    assert_eq!(stats.transactions, 7);
    assert_eq!(stats.atomic_writes, 7);
    assert_eq!(stats.largest_batch, 1);
    assert_eq!(
        recover(&db.journal, "x", 1, MAX, MAX).await,
        (vec![1, 2], 2)
    );
}

#[tokio::test]
async fn call_with_more_writes_than_the_bound_is_stored_in_order_in_several_transactions() {
    let db = TestJournal::open_with(|o| o.max_batch_size = 4).await;
    let writes: Vec<_> = (1..=10).map(|n| atomic("long", n..=n)).collect();
    let results = db.journal.write_messages(writes).await.unwrap();
    assert_eq!(results.len(), 10);
    assert_all_ok(&results);
    let stats = db.journal.stats();
    assert_eq!(stats.transactions, 3, "4 + 4 + 2");
    assert_eq!(stats.largest_batch, 4);
    let mut conn = SqliteConnection::connect(&db.url).await.unwrap();
    let by_ordering: Vec<i64> = sqlx::query_scalar(
        "SELECT seq_nr FROM journal WHERE persistence_id = 'long' ORDER BY ordering",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(by_ordering, (1..=10).collect::<Vec<i64>>());
    conn.close().await.unwrap();
}

#[tokio::test]
async fn queued_call_dropped_before_the_writer_took_it_stores_nothing() {
    let db = TestJournal::open().await;
    let kept = queue(&db.journal, vec![atomic("kept", 1..=1)]).await;
    let dropped = queue(&db.journal, vec![atomic("dropped", 1..=1)]).await;
    drop(dropped);
    assert_all_ok(&kept.await.unwrap());
    assert_eq!(
        recover(&db.journal, "dropped", 1, MAX, MAX).await,
        (vec![], 0)
    );
    assert_eq!(db.journal.stats().atomic_writes, 1);
}

#[tokio::test]
async fn writes_fail_with_a_clear_error_once_the_writer_task_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteJournalOptions::new(format!(
        "sqlite:{}",
        dir.path().join("journal.db").display()
    ));
    // The journal's writer task lives on a runtime that then shuts down.
    let journal = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(SqliteJournal::connect(&options)).unwrap()
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
