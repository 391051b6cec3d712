//! Persistent actors on a real PostgreSQL: A3 (a failed group commit fails every write in it),
//! Q1 (two live incarnations of one persistence id) and H1 (the database stops answering).
//! Each test gets a database of its own; without DATABASE_URL (at build time) they show as
//! ignored, and `.ci/run` refuses to run without it.

mod support;

use std::sync::Arc;
use std::time::Duration;

use actix_persistence::actix::Actor;
use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence::{
    JournalError, JournalStore, PersistError, PersistenceState, PostgresJournal,
    PostgresJournalOptions, MAX_SEQ_NR,
};
use actix_persistence_sql::test_util::TestDatabase;
use actix_persistence_testkit::FaultyJournal;
use futures::StreamExt;
use sqlx::{Connection, Executor, PgConnection};
use support::*;
use tokio::sync::mpsc;

async fn journal(db: &TestDatabase) -> PostgresJournal {
    PostgresJournal::connect(&PostgresJournalOptions {
        max_connections: 4,
        ..PostgresJournalOptions::new(db.url())
    })
    .await
    .expect("connect to the test database")
}

fn journal_actor(
    store: Arc<dyn JournalStore>,
    call_timeout: Duration,
) -> actix::Addr<JournalActor> {
    JournalActor::start_with(
        store,
        JournalConfig {
            call_timeout,
            ..JournalConfig::default()
        },
    )
}

fn probe(
    journal: &actix::Addr<JournalActor>,
    pid: &str,
    log: &mpsc::UnboundedSender<Seen>,
) -> actix::Addr<Probe> {
    Probe {
        persistence: PersistenceState::new(journal.clone(), pid).expect("valid id"),
        applied: Vec::new(),
        log: log.clone(),
    }
    .start()
}

async fn stored_seq_nrs(store: &impl JournalStore, pid: &str) -> Vec<u64> {
    store
        .replay_messages(pid, 1, MAX_SEQ_NR, u64::MAX)
        .map(|e| e.expect("replay").seq_nr)
        .collect()
        .await
}

async fn next(log: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(Duration::from_secs(20), log.recv())
        .await
        .expect("a probe reports within 20 s")
        .expect("probes alive")
}

async fn until_recovered(log: &mut mpsc::UnboundedReceiver<Seen>, pid: &str) -> Seen {
    loop {
        let seen = next(log).await;
        if matches!(&seen, Seen::Recovered { pid: p, .. } if p == pid) {
            return seen;
        }
    }
}

/// Waits until some session of the database waits for a lock (polling the server, no sleep).
async fn wait_for_lock_waiter(monitor: &mut PgConnection) {
    for _ in 0..1_000_000 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE NOT l.granted AND a.datname = current_database()",
        )
        .fetch_one(&mut *monitor)
        .await
        .expect("read pg_locks");
        if waiting > 0 {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("no session ever waited for the lock");
}

/// Locks the journal's tables against writes from another session, in an open transaction.
async fn lock_journal(db: &TestDatabase) -> PgConnection {
    let mut locker = PgConnection::connect(db.url()).await.expect("connect");
    locker.execute("BEGIN").await.expect("begin");
    locker
        .execute("LOCK TABLE journal IN EXCLUSIVE MODE")
        .await
        .expect("lock");
    locker
}

#[actix::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn a_failed_group_commit_fails_every_write_in_it_and_stores_none() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    let store = journal(&db).await;
    let mut admin = PgConnection::connect(db.url()).await.expect("connect");
    admin
        .execute(
            "CREATE FUNCTION poison_check() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN IF position('poison' in convert_from(NEW.payload, 'UTF8')) > 0 THEN \
             RAISE EXCEPTION 'poisoned commit'; END IF; RETURN NULL; END $$",
        )
        .await
        .expect("function");
    admin
        .execute(
            "CREATE CONSTRAINT TRIGGER poison_at_commit AFTER INSERT ON journal \
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION poison_check()",
        )
        .await
        .expect("trigger");
    let (faulty, counters) = FaultyJournal::new(store.clone());
    let journal = journal_actor(Arc::new(faulty), Duration::from_secs(20));
    let (log_tx, mut log) = mpsc::unbounded_channel();
    let pids = ["a3-blocker", "a3-x", "a3-y", "a3-poison"];
    let actors: Vec<_> = pids
        .iter()
        .map(|pid| probe(&journal, pid, &log_tx))
        .collect();
    let mut recovered = std::collections::HashSet::new();
    while recovered.len() < pids.len() {
        if let Seen::Recovered { pid, .. } = next(&mut log).await {
            recovered.insert(pid);
        }
    }

    // The blocker's transaction waits on a lock; the other three writes queue behind it and
    // go into the next transaction together.
    let mut locker = lock_journal(&db).await;
    let blocker = actors[0].send(Persist(vec![named("b1")]));
    wait_for_lock_waiter(&mut admin).await;
    let x = actors[1].send(Persist(vec![named("x1")]));
    let y = actors[2].send(Persist(vec![named("y1")]));
    let poison = actors[3].send(Persist(vec![named("poison")]));
    while counters.write_calls() < 4 {
        tokio::task::yield_now().await;
    }
    locker.execute("COMMIT").await.expect("unlock");

    blocker
        .await
        .expect("mailbox")
        .expect("the blocker commits");
    // A success is sent only after the commit: another connection sees the row already.
    let visible: i64 =
        sqlx::query_scalar("SELECT count(*) FROM journal WHERE persistence_id = 'a3-blocker'")
            .fetch_one(&mut admin)
            .await
            .expect("count");
    assert_eq!(visible, 1);
    for (pid, reply) in [("a3-x", x), ("a3-y", y), ("a3-poison", poison)] {
        match reply.await.expect("mailbox") {
            Err(PersistError::Failed(_)) => {}
            other => panic!("{pid}: expected a failure, got {other:?}"),
        }
        assert_eq!(
            stored_seq_nrs(&store, pid).await,
            Vec::<u64>::new(),
            "{pid}"
        );
        assert_eq!(
            store
                .read_highest_sequence_nr(pid, 0)
                .await
                .expect("highest"),
            0
        );
    }
    // x and y failed although only the poison event trips the trigger: they were in its
    // transaction. Only the blocker's transaction committed.
    let stats = store.stats();
    assert_eq!((stats.transactions, stats.atomic_writes), (1, 1));
}

#[actix::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn two_live_incarnations_writing_seq_1_leave_one_row_and_a_persist_failure() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    // Two "processes": two journals with their own pools on one database.
    let store_1 = journal(&db).await;
    let store_2 = journal(&db).await;
    let journal_1 = journal_actor(Arc::new(store_1.clone()), Duration::from_secs(20));
    let journal_2 = journal_actor(Arc::new(store_2), Duration::from_secs(20));
    let (log_tx, mut log) = mpsc::unbounded_channel();
    let a = probe(&journal_1, "q1", &log_tx);
    until_recovered(&mut log, "q1").await;
    let b = probe(&journal_2, "q1", &log_tx);
    until_recovered(&mut log, "q1").await;

    let (from_a, from_b) = futures::join!(
        a.send(Persist(vec![named("from-a")])),
        b.send(Persist(vec![named("from-b")]))
    );
    // b recovered last, so it owns q1: a's write is fenced (a persist failure, never a
    // rejection or a silent success) whatever the order the two writes reach the database in.
    assert!(
        matches!(from_b.expect("mailbox"), Ok(1)),
        "the newer incarnation wins"
    );
    match from_a.expect("mailbox") {
        Err(PersistError::Failed(JournalError::Fenced { persistence_id, .. })) => {
            assert_eq!(persistence_id, "q1")
        }
        other => panic!("the older incarnation gets a persist failure (fenced): {other:?}"),
    }
    assert_eq!(stored_seq_nrs(&store_1, "q1").await, vec![1]);

    // A fresh incarnation recovers one event at seq 1 and continues at 2, no gap.
    let c = probe(&journal_1, "q1", &log_tx);
    match until_recovered(&mut log, "q1").await {
        Seen::Recovered {
            last_seq_nr,
            replayed,
            ..
        } => {
            assert_eq!(last_seq_nr, 1);
            assert_eq!(replayed.len(), 1);
        }
        _ => unreachable!(),
    }
    assert_eq!(
        c.send(Persist(vec![named("next")]))
            .await
            .expect("mailbox")
            .expect("stored"),
        2
    );
    assert_eq!(stored_seq_nrs(&store_1, "q1").await, vec![1, 2]);
}

#[actix::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn a_database_that_stops_answering_fails_the_write_and_a_new_incarnation_continues() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    let store = journal(&db).await;
    let journal = journal_actor(Arc::new(store.clone()), Duration::from_secs(1));
    let (log_tx, mut log) = mpsc::unbounded_channel();
    let a = probe(&journal, "h1-pg", &log_tx);
    until_recovered(&mut log, "h1-pg").await;
    assert_eq!(
        a.send(Persist(vec![named("e0")]))
            .await
            .expect("mailbox")
            .expect("stored"),
        1
    );

    let mut locker = lock_journal(&db).await;
    let e1 = a.send(Persist(vec![named("e1")]));
    let c2 = a.send(Persist(vec![named("c2")]));
    let c3 = a.send(Persist(vec![named("c3")]));
    match e1.await.expect("mailbox") {
        Err(PersistError::Failed(JournalError::Timeout { .. })) => {}
        other => panic!("expected the call timeout, got {other:?}"),
    }
    for queued in [c2, c3] {
        assert!(matches!(
            queued.await,
            Ok(Err(PersistError::ActorStopped)) | Err(_)
        ));
    }
    locker.execute("COMMIT").await.expect("unlock");
    // Let the abandoned write finish (committed or not) before recovering: wait until no other
    // session of the database has a transaction open (it was open, blocked on the lock).
    let mut monitor = PgConnection::connect(db.url()).await.expect("connect");
    for _ in 0..1_000_000 {
        let busy: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND xact_start IS NOT NULL AND pid <> pg_backend_pid()",
        )
        .fetch_one(&mut monitor)
        .await
        .expect("activity");
        if busy == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }

    let stored = stored_seq_nrs(&store, "h1-pg").await;
    assert!(
        stored == vec![1] || stored == vec![1, 2],
        "e1 may or may not be stored: {stored:?}"
    );
    let b = probe(&journal, "h1-pg", &log_tx);
    let recovered = until_recovered(&mut log, "h1-pg").await;
    let expected_last = *stored.last().expect("e0 at least");
    assert!(
        matches!(recovered, Seen::Recovered { last_seq_nr, .. } if last_seq_nr == expected_last)
    );
    let next = b
        .send(Persist(vec![named("after")]))
        .await
        .expect("mailbox")
        .expect("stored");
    assert_eq!(next, expected_last + 1);
}
