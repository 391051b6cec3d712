//! One writer per persistence id across OS processes on one SQL database: a second process
//! whose actor recovers the same id takes ownership of it, and the first process's actor is
//! fenced at its next write, in both orders (takeover before any write of the first process,
//! and after a write of it, which the second process then replays and continues after). On
//! SQLite (one file shared by both processes) and on PostgreSQL.

mod child;

use std::io::{BufRead, BufReader};

use actix_persistence::actix::Actor;
use actix_persistence::{JournalError, PersistError, StopReason};
use actix_persistence_sql::test_util::TestDatabase;
use child::{Append, Appender, LastSeqNr};

child_entry_point!(run_child);

/// The child: recovers `pid`, persists one event, prints `STORED <seq_nr>`, exits.
fn run_child(role: &str, url: &str, pid: &str) {
    assert_eq!(role, "take-over", "unknown child role");
    actix_persistence::actix::System::new().block_on(async {
        let journal = child::journal(url).await;
        let actor = Appender::start(&journal, pid, "child");
        let seq_nr = actor
            .send(Append)
            .await
            .expect("mailbox")
            .expect("the child's write is stored");
        child::say(&format!("STORED {seq_nr}"));
    });
}

/// Runs a child process that takes `pid` over and persists once; returns its sequence number.
async fn take_over_in_another_process(url: &str, pid: &str) -> u64 {
    let (url, pid) = (url.to_owned(), pid.to_owned());
    tokio::task::spawn_blocking(move || {
        let mut process = child::spawn("take-over", &url, &pid);
        let stdout = process.stdout.take().expect("piped stdout");
        // Read to the end: the child must never find its stdout closed.
        let lines: Vec<String> = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect();
        let stored = lines
            .iter()
            .find_map(|line| child::after(line, "STORED ").map(str::to_owned));
        let status = process.wait().expect("the child ends");
        assert!(status.success(), "the child process failed: {status}");
        stored
            .expect("the child printed what it stored")
            .parse()
            .expect("a sequence number")
    })
    .await
    .expect("the child's thread")
}

async fn takeover_by_another_process_fences_this_one(url: &str) {
    let store = child::open(url).await;
    let journal = child::journal(url).await;

    // Takeover before this process wrote: the child's event is seq 1, ours is fenced.
    let mut ours = Appender::new(&journal, "takeover-first", "parent");
    let stopped = ours.persistence.watch_stop();
    let ours = ours.start();
    assert_eq!(ours.send(LastSeqNr).await.expect("recovered"), 0);
    assert_eq!(take_over_in_another_process(url, "takeover-first").await, 1);
    match ours.send(Append).await.expect("mailbox") {
        Err(PersistError::Failed(JournalError::Fenced { persistence_id, .. })) => {
            assert_eq!(persistence_id, "takeover-first")
        }
        other => panic!("expected this process's write to be fenced, got {other:?}"),
    }
    assert_eq!(stopped.await, Ok(StopReason::Fenced));
    assert_eq!(
        child::stored(&*store, "takeover-first").await,
        vec![(1, "child:takeover-first:1".to_owned())]
    );

    // Takeover after this process wrote seq 1: the child replays it and stores 2.
    let mut ours = Appender::new(&journal, "write-first", "parent");
    let stopped = ours.persistence.watch_stop();
    let ours = ours.start();
    assert_eq!(
        ours.send(Append).await.expect("mailbox").expect("stored"),
        1
    );
    assert_eq!(take_over_in_another_process(url, "write-first").await, 2);
    match ours.send(Append).await.expect("mailbox") {
        Err(PersistError::Failed(JournalError::Fenced { .. })) => {}
        other => panic!("expected this process's second write to be fenced, got {other:?}"),
    }
    assert_eq!(stopped.await, Ok(StopReason::Fenced));
    assert_eq!(
        child::stored(&*store, "write-first").await,
        vec![
            (1, "parent:write-first:1".to_owned()),
            (2, "child:write-first:2".to_owned()),
        ]
    );
}

#[actix::test]
async fn sqlite_a_takeover_by_another_process_fences_this_one_in_both_orders() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("journal.db").display());
    takeover_by_another_process_fences_this_one(&url).await;
}

#[actix::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn postgres_a_takeover_by_another_process_fences_this_one_in_both_orders() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    takeover_by_another_process_fences_this_one(db.url()).await;
}
