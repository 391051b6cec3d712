//! `Persistence::shutdown` waits for the writes, snapshot saves and deletes under way, then
//! closes the pools: a SQLite database is left complete and without its `-wal` file.

mod support;

use std::path::Path;

use actix_persistence::actix::Actor;
use actix_persistence::{Persistence, Settings, SnapshotPolicy, Unhealthy};
use sqlx::{Connection, SqliteConnection};
use support::*;

async fn start_on(file: &Path) -> Persistence {
    let loader = Settings::loader()
        .toml_str(
            "test",
            &format!("[journal.sqlite]\nurl = \"sqlite:{}\"\n", file.display()),
        )
        .env_vars([("PATH", "/bin")]);
    Persistence::start_from(loader).await.expect("start")
}

async fn count(file: &Path, sql: &str) -> i64 {
    let mut conn = SqliteConnection::connect(&format!("sqlite:{}", file.display()))
        .await
        .expect("open the database again");
    let n = sqlx::query_scalar(sql)
        .fetch_one(&mut conn)
        .await
        .expect(sql);
    conn.close().await.expect("close");
    n
}

#[actix::test]
async fn shutdown_waits_for_the_background_snapshot_and_deletes_then_closes_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("events.db");
    let persistence = start_on(&file).await;
    let h = Harness::new(1);
    // Keeping one snapshot, the events up to it are deleted after it is saved.
    let policy = SnapshotPolicy::every(2).keep(1).delete_events(true);
    let probe = h
        .probe(
            persistence
                .state("cart-1")
                .expect("id")
                .with_snapshot_policy(policy),
        )
        .start();

    // The second event crosses the snapshot interval: a snapshot save, then the deletion of
    // the events it covers, start in the background after the reply.
    let stored = probe.send(Persist(vec![named("a"), named("b")])).await;
    assert_eq!(stored.expect("mailbox").expect("stored"), 2);
    persistence.shutdown().await;
    assert_eq!(persistence.work_in_flight(), 0);

    let wal = dir.path().join("events.db-wal");
    assert!(!wal.exists(), "the pools were closed: no WAL file is left");
    assert!(
        !dir.path().join("events.db-shm").exists(),
        "nor its -shm file"
    );
    assert_eq!(
        count(
            &file,
            "SELECT COUNT(*) FROM snapshot WHERE persistence_id = 'cart-1'"
        )
        .await,
        1,
        "the background snapshot save finished before the pools closed"
    );
    assert_eq!(
        count(
            &file,
            "SELECT COUNT(*) FROM journal WHERE persistence_id = 'cart-1'"
        )
        .await,
        0,
        "the deletion of the covered events finished before the pools closed"
    );
}

#[actix::test]
async fn shutdown_with_nothing_under_way_returns_and_later_writes_fail() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("events.db");
    let persistence = start_on(&file).await;
    let h = Harness::new(1);
    let probe = h.probe(persistence.state("cart-2").expect("id")).start();
    let stored = probe.send(Persist(vec![named("a")])).await;
    assert_eq!(stored.expect("mailbox").expect("stored"), 1);
    assert!(persistence.health().await.is_ok(), "ready while open");
    persistence.shutdown().await;
    assert!(!dir.path().join("events.db-wal").exists());
    assert!(!dir.path().join("events.db-shm").exists());
    assert!(
        matches!(
            persistence.health().await,
            Err(Unhealthy::StoreUnreachable(_))
        ),
        "a closed store is not ready"
    );
    assert!(
        probe
            .send(Persist(vec![named("b")]))
            .await
            .expect("mailbox")
            .is_err(),
        "the journal is closed"
    );
}
