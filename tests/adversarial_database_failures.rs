//! The SQL stores and the persistent actor when the database itself fails: PostgreSQL backends
//! terminated (`pg_terminate_backend`) during a write, a group commit, a replay and a query; a
//! database that refuses connections at startup or while running; a database whose sessions
//! are read-only or carry a tiny `statement_timeout`; SQLite held locked by another
//! connection past `busy_timeout`, and SQLite on a full disk. Scenarios from bug reports
//! against akka-persistence-jdbc, Akka.NET's SQL plugins, sqlx and other database clients.
//!
//! What every test checks: the failure reaches the caller as a typed error (never a rejection,
//! never a success), nothing hangs (timeouts here only guard against a hang), and what a later
//! recovery sees: every acknowledged event, once, and the next persist at the next sequence
//! number.

mod adversarial;

use std::process::Command;

use actix::Actor as _;
use actix_persistence::query::Offset;
use actix_persistence::{JournalError, PersistError, Persistence, RecoveryError, StopReason};
use adversarial::*;
use futures::StreamExt;
use sqlx::{Connection, Executor, PgConnection};

// ---------------------------------------------------------------------------------------------
// PostgreSQL helpers

/// The server URL of the tests (`DATABASE_URL`), for statements about a test database
/// (`ALTER DATABASE`) from outside it.
fn server_url() -> String {
    std::env::var("DATABASE_URL").expect("DATABASE_URL")
}

fn db_name(b: &Backend) -> String {
    b.pg.as_ref()
        .expect("a PostgreSQL backend")
        .name()
        .to_owned()
}

async fn server_admin() -> PgConnection {
    PgConnection::connect(&server_url())
        .await
        .expect("connect to the server")
}

/// Terminates every session of the test database except `keep` (pids), and waits until they
/// are gone. Returns how many were terminated.
async fn terminate_backends(b: &Backend, keep: &[i32]) -> i64 {
    let mut admin = server_admin().await;
    let killed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = $1 AND pid <> ALL($2) AND backend_type = 'client backend') t",
    )
    .bind(db_name(b))
    .bind(keep)
    .fetch_one(&mut admin)
    .await
    .expect("terminate");
    // pg_terminate_backend only signals: wait until the sessions have ended.
    for _ in 0..1_000_000 {
        let left: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> ALL($2) \
             AND backend_type = 'client backend'",
        )
        .bind(db_name(b))
        .bind(keep)
        .fetch_one(&mut admin)
        .await
        .expect("activity");
        if left == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    killed
}

/// The same, synchronously (from inside `apply`, which cannot await): through `psql`.
fn terminate_backends_blocking(db: &str) {
    let out = Command::new("psql")
        .arg(server_url())
        .args(["-v", "ON_ERROR_STOP=1", "-qAtc"])
        .arg(format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = '{db}' AND backend_type = 'client backend'"
        ))
        .output()
        .expect("run psql");
    assert!(out.status.success(), "psql: {out:?}");
}

async fn pid_of(conn: &mut PgConnection) -> i32 {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(conn)
        .await
        .expect("pid")
}

/// Locks the journal against writes in an open transaction; returns the connection and its pid.
async fn lock_journal(b: &Backend, mode: &str) -> (PgConnection, i32) {
    let mut locker = PgConnection::connect(&b.pg_url()).await.expect("connect");
    let pid = pid_of(&mut locker).await;
    locker.execute("BEGIN").await.expect("begin");
    locker
        .execute(format!("LOCK TABLE journal IN {mode} MODE").as_str())
        .await
        .expect("lock");
    (locker, pid)
}

/// Waits until `n` sessions of the database wait for a lock (polling the server, no sleep).
async fn wait_for_lock_waiters(monitor: &mut PgConnection, n: i64) {
    for _ in 0..1_000_000 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a \
             ON a.pid = l.pid WHERE NOT l.granted AND a.datname = current_database()",
        )
        .fetch_one(&mut *monitor)
        .await
        .expect("read pg_locks");
        if waiting >= n {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("fewer than {n} sessions ever waited for the lock");
}

async fn alter_database(b: &Backend, clause: &str) {
    let mut admin = server_admin().await;
    admin
        .execute(format!("ALTER DATABASE {} {clause}", db_name(b)).as_str())
        .await
        .unwrap_or_else(|e| panic!("ALTER DATABASE {clause}: {e}"));
}

fn assert_storage_failure(what: &str, reply: PersistResult<(u64, i64)>) -> String {
    match reply {
        Err(PersistError::Failed(JournalError::Storage { source, .. })) => source.to_string(),
        other => panic!("{what}: expected a storage failure, got {other:?}"),
    }
}

async fn stop_reason(a: Started) -> StopReason {
    within("the actor stops", a.stopped)
        .await
        .expect("stop reason")
}

use actix_persistence::PersistResult;

// ---------------------------------------------------------------------------------------------
// A backend terminated during a write.

/// akka.net#7299 (a persist that failed on a lost connection was reported as rejected and the
/// actor went on) and akka-persistence-mongo#218 (a timed-out write still queued, then a
/// restarted actor's write at the same sequence number): the journal's backend is terminated
/// while its transaction waits for a lock held by another session. The persist fails as a
/// storage failure (not a rejection), the actor stops, the event is not stored, and the next
/// incarnation, on the same journal (whose pool must replace its dead connections, sqlx#2763,
/// go-pg#1092), recovers what is stored and persists at the reused sequence number.
async fn a_backend_terminated_during_a_write_fails_it_and_the_next_incarnation_reuses_its_seq_nr() {
    let b = Backend::new(Kind::Postgres).await;
    let p = b.open().await;
    let pid = "kill-write";
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    assert_eq!(a.add(&[1]).await.expect("stored"), (1, 1));

    let mut monitor = PgConnection::connect(&b.pg_url()).await.expect("connect");
    let monitor_pid = pid_of(&mut monitor).await;
    let (mut locker, locker_pid) = lock_journal(&b, "EXCLUSIVE").await;
    let e2 = a.addr.send(Add(vec![2], vec![]));
    let c3 = a.addr.send(Add(vec![3], vec![]));
    wait_for_lock_waiters(&mut monitor, 1).await;
    assert!(terminate_backends(&b, &[locker_pid, monitor_pid]).await >= 1);
    let message = assert_storage_failure("e2", within("e2", e2).await.expect("mailbox"));
    assert!(
        message.contains("terminat") || message.contains("closed") || message.contains("EOF"),
        "{message}"
    );
    assert!(matches!(
        a.note().await,
        Note::PersistFailed(JournalError::Storage { .. })
    ));
    // The command queued behind the failed write is never handled as if e2 were stored.
    assert!(matches!(
        within("c3", c3).await,
        Ok(Err(PersistError::ActorStopped)) | Err(_)
    ));
    assert_eq!(stop_reason(a).await, StopReason::PersistFailure);
    locker.execute("COMMIT").await.expect("unlock");

    assert_eq!(stored_seq_nrs(&p, pid, 1, u64::MAX).await, vec![1]);
    let mut again = start_acct(&p, pid);
    assert_eq!(again.note().await, Note::Recovered(1));
    assert_eq!(again.add(&[4]).await.expect("stored"), (2, 5));
    assert_eq!(stored_seq_nrs(&p, pid, 1, u64::MAX).await, vec![1, 2]);
    assert_eq!(again.get().await.1.applied, vec![(1, 1), (2, 4)]);
}

/// akka-persistence-jdbc#9 ("No more data to read from socket" under load) with many writers:
/// 12 actors' writes wait in group-commit transactions behind a lock, and every backend of the
/// journal is terminated. Each persist either succeeded (and its event is stored, once) or
/// failed as a storage failure (and nothing of it is stored); each next incarnation recovers
/// exactly what is stored and persists at the next sequence number.
async fn backends_terminated_during_group_commits_lose_no_acknowledged_event() {
    // Each actor's failed write counts for the circuit breaker (as each `WriteMessages` does in
    // Akka): 12 of them would open it at the default 10, failing the recoveries below.
    let b = Backend::new(Kind::Postgres).await.with_env(
        "ACTIX_PERSISTENCE__JOURNAL__CIRCUIT_BREAKER__MAX_FAILURES",
        "100",
    );
    let p = b.open().await;
    let pids: Vec<String> = (0..12).map(|i| format!("kill-group-{i}")).collect();
    let mut actors = Vec::new();
    for pid in &pids {
        let mut a = start_acct(&p, pid);
        assert_eq!(a.note().await, Note::Recovered(0));
        assert_eq!(a.add(&[1]).await.expect("stored"), (1, 1));
        actors.push(a);
    }
    let mut monitor = PgConnection::connect(&b.pg_url()).await.expect("connect");
    let monitor_pid = pid_of(&mut monitor).await;
    let (mut locker, locker_pid) = lock_journal(&b, "EXCLUSIVE").await;
    let replies: Vec<_> = actors
        .iter()
        .map(|a| a.addr.send(Add(vec![10], vec![])))
        .collect();
    wait_for_lock_waiters(&mut monitor, 1).await;
    terminate_backends(&b, &[locker_pid, monitor_pid]).await;
    locker.execute("COMMIT").await.expect("unlock");

    let mut acked = Vec::new();
    for (pid, reply) in pids.iter().zip(replies) {
        match within("a persist", reply).await.expect("mailbox") {
            Ok((2, 11)) => acked.push(true),
            Err(PersistError::Failed(JournalError::Storage { .. })) => acked.push(false),
            other => panic!("{pid}: expected success at 2 or a storage failure, got {other:?}"),
        }
    }
    assert!(
        acked.iter().any(|ok| !ok),
        "the terminated transaction failed some write"
    );
    drop(actors);
    for (pid, acked) in pids.iter().zip(acked) {
        let stored = stored_seq_nrs(&p, pid, 1, u64::MAX).await;
        let expected = if acked { vec![1, 2] } else { vec![1] };
        assert_eq!(stored, expected, "{pid} (acknowledged: {acked})");
        let mut again = start_acct(&p, pid);
        let last = *expected.last().expect("one event");
        assert_eq!(again.note().await, Note::Recovered(last), "{pid}");
        assert_eq!(
            again.add(&[100]).await.expect("stored").0,
            last + 1,
            "{pid}"
        );
    }
}

/// akka-persistence-jdbc#9 / sqlx#2763 at the worst moment: the backend is terminated while
/// its `COMMIT` runs (a deferred constraint trigger waits at commit for an advisory lock the
/// test holds). The persist fails as a storage failure, nothing of it is stored (PostgreSQL
/// never committed it), the writes after it in the actor's mailbox are not handled as if it
/// were, and the next incarnation persists at the same sequence number, with no duplicate.
async fn a_backend_terminated_during_its_commit_fails_the_write_and_stores_nothing() {
    let b = Backend::new(Kind::Postgres).await;
    let p = b.open().await;
    let pid = "kill-commit";
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    assert_eq!(a.add(&[1]).await.expect("stored"), (1, 1));

    let mut monitor = PgConnection::connect(&b.pg_url()).await.expect("connect");
    let monitor_pid = pid_of(&mut monitor).await;
    monitor
        .execute(
            "CREATE FUNCTION wait_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NULL; END $$",
        )
        .await
        .expect("function");
    monitor
        .execute(
            "CREATE CONSTRAINT TRIGGER wait_at_commit AFTER INSERT ON journal \
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION wait_at_commit()",
        )
        .await
        .expect("trigger");
    monitor
        .execute("SELECT pg_advisory_lock(4242)")
        .await
        .expect("advisory lock");
    let e2 = a.addr.send(Add(vec![2], vec![]));
    let c3 = a.addr.send(Add(vec![3], vec![]));
    // The journal's COMMIT now waits for the advisory lock.
    wait_for_lock_waiters(&mut monitor, 1).await;
    assert!(terminate_backends(&b, &[monitor_pid]).await >= 1);
    monitor
        .execute("SELECT pg_advisory_unlock(4242)")
        .await
        .expect("unlock");
    monitor
        .execute("DROP TRIGGER wait_at_commit ON journal")
        .await
        .expect("drop trigger");

    assert_storage_failure("e2", within("e2", e2).await.expect("mailbox"));
    assert!(matches!(
        within("c3", c3).await,
        Ok(Err(PersistError::ActorStopped)) | Err(_)
    ));
    assert_eq!(stop_reason(a).await, StopReason::PersistFailure);
    assert_eq!(stored_seq_nrs(&p, pid, 1, u64::MAX).await, vec![1]);
    let mut again = start_acct(&p, pid);
    assert_eq!(again.note().await, Note::Recovered(1));
    assert_eq!(again.add(&[4]).await.expect("stored"), (2, 5));
    assert_eq!(stored_seq_nrs(&p, pid, 1, u64::MAX).await, vec![1, 2]);
}

/// A replay whose page query waits on a lock past the journal's `statement-timeout` (an
/// `ACCESS EXCLUSIVE` lock of a migration or a `VACUUM FULL` running by hand): recovery fails
/// with a typed journal error naming the cancellation, promptly (not after the recovery
/// timeout), and recovers everything once the lock is gone.
async fn a_replay_blocked_past_the_statement_timeout_fails_recovery_typed() {
    let b = Backend::new(Kind::Postgres).await.with_env(
        "ACTIX_PERSISTENCE__JOURNAL__POSTGRES__STATEMENT_TIMEOUT",
        "300ms",
    );
    let p = b.open().await;
    let pid = "blocked-replay";
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    a.add(&[1, 2, 3]).await.expect("stored");
    drop(a);
    let (mut locker, _) = lock_journal(&b, "ACCESS EXCLUSIVE").await;
    let mut r = start_acct(&p, pid);
    match r.note().await {
        Note::RecoveryFailed(RecoveryError::Journal { source, .. }) => {
            assert!(matches!(source, JournalError::Storage { .. }), "{source:?}");
            assert!(source.to_string().contains("statement timeout"), "{source}");
        }
        other => panic!("expected a failed recovery, got {other:?}"),
    }
    assert_eq!(stop_reason(r).await, StopReason::RecoveryFailure);
    locker.execute("ROLLBACK").await.expect("unlock");
    let mut again = start_acct(&p, pid);
    assert_eq!(again.note().await, Note::Recovered(3));
    assert_eq!(again.get().await.1.total, 6);
}

// ---------------------------------------------------------------------------------------------
// A backend terminated during a replay or a query.

/// akka-persistence-jdbc's recovery over a connection lost mid-replay (a replay that ends
/// early must not be taken for the end of the journal): the journal's backends are terminated
/// from inside `apply` at several events of a 55-event replay read in pages of 10. Recovery
/// either completes with all 55 events or fails with a typed journal error; it never completes
/// with fewer.
async fn a_backend_terminated_during_a_replay_never_completes_a_partial_recovery() {
    let b = Backend::new(Kind::Postgres)
        .await
        .with_env("ACTIX_PERSISTENCE__JOURNAL__REPLAY_BATCH_SIZE", "10");
    let p = b.open().await;
    let pid = "kill-replay";
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    for chunk in (1..=55).collect::<Vec<i64>>().chunks(11) {
        a.add(chunk).await.expect("stored");
    }
    drop(a);
    let db = db_name(&b);
    for kill_at in [1_u64, 10, 11, 25, 50] {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut state = p.state(pid).expect("valid id");
        let stopped = state.watch_stop();
        let _r = Replayer {
            persistence: state,
            applied: Vec::new(),
            kill_at: Some((kill_at, db.clone())),
            report: tx,
        }
        .start();
        match within("recovery", rx.recv()).await.expect("a report") {
            Ok(applied) => assert_eq!(
                applied,
                (1..=55).collect::<Vec<_>>(),
                "kill at {kill_at}: a completed recovery applied every event"
            ),
            Err(RecoveryError::Journal { source, .. }) => {
                eprintln!("replay killed at {kill_at}: recovery failed: {source}");
                assert!(
                    matches!(source, JournalError::Storage { .. }),
                    "kill at {kill_at}: {source:?}"
                );
                assert_eq!(
                    within("stop", stopped).await.expect("stop reason"),
                    StopReason::RecoveryFailure
                );
            }
            Err(other) => panic!("kill at {kill_at}: {other:?}"),
        }
    }
    // And a recovery without a kill sees all of them.
    let mut r = start_acct(&p, pid);
    assert_eq!(r.note().await, Note::Recovered(55));
}

/// Recovers `Added` events, terminating every session of a database from `apply` at one
/// sequence number (`psql`, synchronously: the replay cannot go on meanwhile); reports the
/// sequence numbers it applied, or its recovery failure.
struct Replayer {
    persistence: actix_persistence::PersistenceState<Self>,
    applied: Vec<u64>,
    kill_at: Option<(u64, String)>,
    report: tokio::sync::mpsc::UnboundedSender<Result<Vec<u64>, RecoveryError>>,
}

impl actix::Actor for Replayer {
    type Context = actix::Context<Self>;
    fn started(&mut self, ctx: &mut Self::Context) {
        actix_persistence::start_recovery(self, ctx);
    }
}

impl actix_persistence::PersistentActor for Replayer {
    fn persistence(&self) -> &actix_persistence::PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut actix_persistence::PersistenceState<Self> {
        &mut self.persistence
    }
}

impl actix_persistence::EventSourced for Replayer {
    type Event = Added;
    fn apply(&mut self, _: &Added) {
        let seq_nr = self.persistence.last_seq_nr();
        self.applied.push(seq_nr);
        if matches!(&self.kill_at, Some((at, _)) if *at == seq_nr) {
            let (_, db) = self.kill_at.take().expect("armed");
            terminate_backends_blocking(&db);
        }
    }
    fn on_recovery_completed(&mut self, _: u64, _: &mut Self::Context) {
        let _ = self.report.send(Ok(std::mem::take(&mut self.applied)));
    }
    fn on_recovery_failure(&mut self, cause: &RecoveryError, _: &mut Self::Context) {
        let _ = self.report.send(Err(cause.clone()));
    }
}

/// A current query by persistence id read in pages of 3, with every backend terminated after
/// its first envelope: it delivers every event once and in order, or a prefix of them and then
/// an error; never a shorter stream that ends as if complete (EventStoreDB clients' reads that
/// ended silently on a dropped connection).
async fn a_backend_terminated_during_a_current_query_never_ends_it_early() {
    let b = Backend::new(Kind::Postgres)
        .await
        .with_env("ACTIX_PERSISTENCE__QUERY__PAGE_SIZE", "3");
    let p = b.open().await;
    let pid = "kill-query";
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    a.add(&(1..=20).collect::<Vec<_>>()).await.expect("stored");
    let query = p.query().expect("query");
    for kill_after in [1_usize, 3, 4, 19] {
        let mut stream = query.current_events_by_persistence_id(pid, 1, u64::MAX);
        let mut seen: Vec<u64> = Vec::new();
        let mut failed = None;
        while let Some(item) = within("the query's next envelope", stream.next()).await {
            match item {
                Ok(envelope) => seen.push(envelope.seq_nr),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
            if seen.len() == kill_after {
                terminate_backends(&b, &[]).await;
            }
        }
        let expected: Vec<u64> = (1..=20).collect();
        match failed {
            None => assert_eq!(seen, expected, "kill after {kill_after}"),
            Some(error) => {
                eprintln!(
                    "current query killed after {kill_after}: {} then {error}",
                    seen.len()
                );
                assert_eq!(
                    seen,
                    expected[..seen.len()],
                    "kill after {kill_after}: {error}"
                );
                assert!(
                    within("after the error", stream.next()).await.is_none(),
                    "nothing after the error"
                );
            }
        }
    }
}

/// Live queries (by persistence id and by slices) with every backend terminated between two
/// writes: each delivers the later events, once and in order (it reads again over new
/// connections), or ends with an error; never a missed or repeated event (Akka Projections'
/// r2dbc source over a failed-over database).
async fn a_backend_terminated_during_live_queries_misses_and_repeats_nothing() {
    let b = Backend::new(Kind::Postgres)
        .await
        .with_env("ACTIX_PERSISTENCE__QUERY__REFRESH_INTERVAL", "20ms");
    let p = b.open().await;
    let pid = "Acct|kill-live";
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    a.add(&[1, 2, 3]).await.expect("stored");
    let query = p.query().expect("query");
    let by_pid = query.events_by_persistence_id(pid, 1, u64::MAX);
    let by_slices = query.events_by_slices("Acct", 0, 1023, Offset::NoOffset);
    let mut by_pid = by_pid.map(|e| e.map(|e| e.seq_nr).map_err(|e| e.to_string()));
    let mut by_slices = by_slices.map(|e| e.map(|e| e.seq_nr).map_err(|e| e.to_string()));
    for stream in [
        &mut by_pid as &mut (dyn futures::Stream<Item = _> + Unpin),
        &mut by_slices,
    ] {
        for expected in 1..=3 {
            assert_eq!(
                within("live envelope", stream.next()).await,
                Some(Ok(expected))
            );
        }
    }
    terminate_backends(&b, &[]).await;
    // The writer's connections were terminated too: the pool replaces them.
    a.add(&[4, 5, 6]).await.expect("stored after the kill");
    for (name, stream) in [
        (
            "by persistence id",
            &mut by_pid as &mut (dyn futures::Stream<Item = _> + Unpin),
        ),
        ("by slices", &mut by_slices),
    ] {
        let mut rest = Vec::new();
        while rest.len() < 3 {
            match within("live envelope after the kill", stream.next()).await {
                Some(Ok(seq_nr)) => rest.push(seq_nr),
                Some(Err(error)) => {
                    // Ended with an error: what came before it is still exact.
                    assert_eq!(
                        rest,
                        (4..4 + rest.len() as u64).collect::<Vec<_>>(),
                        "{name}: {error}"
                    );
                    eprintln!("{name}: ended with an error after the kill: {error}");
                    break;
                }
                None => panic!("{name}: the live query ended without an error after {rest:?}"),
            }
        }
        if rest.len() == 3 {
            assert_eq!(rest, vec![4, 5, 6], "{name}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A database that refuses connections, at startup and while running.

/// akka-persistence-jdbc#41 / Akka.NET: a database not accepting connections (maintenance,
/// `ALLOW_CONNECTIONS false`) at startup fails `Persistence::start` with a connect error that
/// names the URL (not a pool timeout); once it accepts connections again, startup succeeds and
/// the journal works.
async fn a_database_refusing_connections_at_startup_fails_start_and_then_starts() {
    let b = Backend::new(Kind::Postgres).await;
    // Create the schema first, then close.
    close(b.open().await, true).await;
    alter_database(&b, "ALLOW_CONNECTIONS false").await;
    let refused = within("start", Persistence::start_with(b.settings())).await;
    let error = match refused {
        Err(error) => error,
        Ok(_) => panic!("started on a database that refuses connections"),
    };
    let message = error.to_string();
    let failure = match &error {
        actix_persistence::StartError::Store { source, .. } => source
            .downcast_ref::<actix_persistence_sql::SqlStoreError>()
            .and_then(|e| match e {
                actix_persistence_sql::SqlStoreError::Connect { failure, .. } => {
                    Some(failure.clone())
                }
                _ => None,
            }),
        _ => None,
    };
    // The server is up and the database exists: not "check the URL".
    assert_eq!(
        failure,
        Some(actix_persistence_sql::ConnectFailure::Unavailable),
        "{message}"
    );
    assert!(message.contains(&db_name(&b)), "{message}");
    assert!(
        message.contains("not currently accepting connections"),
        "the server's reason is in the message: {message}"
    );
    alter_database(&b, "ALLOW_CONNECTIONS true").await;
    let p = b.open().await;
    let mut a = start_acct(&p, "after-refusal");
    assert_eq!(a.note().await, Note::Recovered(0));
    assert_eq!(a.add(&[7]).await.expect("stored"), (1, 7));
}

/// sqlx#2763, go-pg#1092, denodrivers/postgres#355 (a pool bricked by a server that closed its
/// connections): while running, the database stops accepting connections and every session
/// is terminated. A persist fails as a storage failure or a timeout, promptly and typed; once
/// the database accepts connections again, the same `Persistence` (no restart) recovers a new
/// incarnation and persists the next event.
async fn a_database_going_away_while_running_fails_writes_and_the_same_pool_recovers() {
    let b = Backend::new(Kind::Postgres)
        .await
        .with_env(
            "ACTIX_PERSISTENCE__JOURNAL__POSTGRES__ACQUIRE_TIMEOUT",
            "1s",
        )
        .with_env(
            "ACTIX_PERSISTENCE__JOURNAL__CIRCUIT_BREAKER__CALL_TIMEOUT",
            "5s",
        );
    let p = b.open().await;
    let pid = "going-away";
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    assert_eq!(a.add(&[1]).await.expect("stored"), (1, 1));

    alter_database(&b, "ALLOW_CONNECTIONS false").await;
    terminate_backends(&b, &[]).await;
    match within("persist while down", a.add(&[2])).await {
        Err(PersistError::Failed(JournalError::Storage { .. }))
        | Err(PersistError::Failed(JournalError::Timeout { .. })) => {}
        other => panic!("expected a storage failure or a timeout, got {other:?}"),
    }
    assert_eq!(stop_reason(a).await, StopReason::PersistFailure);
    // Recovery while down fails typed too.
    let mut down = start_acct(&p, pid);
    assert!(
        matches!(
            down.note().await,
            Note::RecoveryFailed(RecoveryError::Journal { .. })
        ),
        "recovery while the database is down"
    );

    alter_database(&b, "ALLOW_CONNECTIONS true").await;
    let mut again = start_acct(&p, pid);
    assert_eq!(again.note().await, Note::Recovered(1));
    assert_eq!(again.add(&[3]).await.expect("stored"), (2, 4));
    assert_eq!(stored_seq_nrs(&p, pid, 1, u64::MAX).await, vec![1, 2]);
}

// ---------------------------------------------------------------------------------------------
// Session defaults set on the database.

/// TermHub#404, bitnami/charts#23219, cloudnative-pg#1254 ("cannot execute INSERT in a
/// read-only transaction" after a failover or a setting): a database whose sessions are
/// read-only by default. A persist fails with a storage failure naming the cause (never
/// acknowledged, never hanging), a recovery (which takes ownership of the id, a write) fails
/// typed, and once the setting is gone everything goes on at the right sequence number.
async fn a_read_only_database_fails_persists_and_recoveries_clearly() {
    let b = Backend::new(Kind::Postgres).await;
    let p = b.open().await;
    let pid = "read-only";
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    assert_eq!(a.add(&[1]).await.expect("stored"), (1, 1));

    alter_database(&b, "SET default_transaction_read_only = on").await;
    // New sessions pick the default up: end the pool's current ones.
    terminate_backends(&b, &[]).await;
    let message = assert_storage_failure("persist", within("persist", a.add(&[2])).await);
    assert!(message.contains("read-only"), "{message}");
    assert_eq!(stop_reason(a).await, StopReason::PersistFailure);
    let mut r = start_acct(&p, pid);
    match r.note().await {
        Note::RecoveryFailed(RecoveryError::Journal { source, .. }) => {
            assert!(source.to_string().contains("read-only"), "{source}")
        }
        other => panic!("expected a failed recovery, got {other:?}"),
    }
    // A new process on the read-only database: it starts (nothing to migrate) or fails
    // naming the cause; it never hangs.
    match within("start read-only", Persistence::start_with(b.settings())).await {
        Ok(p2) => {
            let mut r2 = start_acct(&p2, pid);
            assert!(matches!(r2.note().await, Note::RecoveryFailed(_)));
            close(p2, true).await;
        }
        Err(error) => assert!(error.to_string().contains("read-only"), "{error}"),
    }

    alter_database(&b, "RESET default_transaction_read_only").await;
    terminate_backends(&b, &[]).await;
    let mut again = start_acct(&p, pid);
    assert_eq!(again.note().await, Note::Recovered(1));
    assert_eq!(again.add(&[3]).await.expect("stored"), (2, 4));
    assert_eq!(stored_seq_nrs(&p, pid, 1, u64::MAX).await, vec![1, 2]);
}

/// A `statement_timeout` of 1 ms set on the database (an operator's default for ad-hoc
/// sessions): the journal sets its own `journal.postgres.statement-timeout` on every
/// connection, so it starts, persists, recovers and queries as usual.
async fn a_tiny_statement_timeout_on_the_database_is_overridden_by_the_journals_own() {
    let b = Backend::new(Kind::Postgres).await;
    alter_database(&b, "SET statement_timeout = '1ms'").await;
    alter_database(&b, "SET lock_timeout = '1ms'").await;
    let p = within("start", b.open()).await;
    let pid = "tiny-timeout";
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    a.add(&(1..=50).collect::<Vec<_>>()).await.expect("stored");
    let mut r = start_acct(&p, pid);
    // The first incarnation is fenced by the second: only recovery is looked at.
    assert_eq!(r.note().await, Note::Recovered(50));
    assert_eq!(stored_seq_nrs(&p, pid, 1, u64::MAX).await.len(), 50);
}

// ---------------------------------------------------------------------------------------------
// SQLite

/// SQLite "database is locked" (better-sqlite3#836, codeigniter4#6930): another connection
/// holds the write lock longer than `busy-timeout`. A persist fails as a storage failure once
/// the busy timeout passed (not a hang, not a rejection), a recovery (which writes its
/// ownership) fails typed, and once the lock is released the next incarnation recovers what
/// is stored and persists at the next sequence number.
async fn sqlite_locked_past_busy_timeout_fails_writes_typed_and_recovers_after() {
    let b = Backend::new(Kind::Sqlite)
        .await
        .with_env("ACTIX_PERSISTENCE__JOURNAL__SQLITE__BUSY_TIMEOUT", "200ms");
    let p = b.open().await;
    let pid = "sqlite-locked";
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    assert_eq!(a.add(&[1]).await.expect("stored"), (1, 1));

    let mut locker = sqlx::SqliteConnection::connect(&b.sqlite_url())
        .await
        .expect("open");
    locker.execute("BEGIN EXCLUSIVE").await.expect("lock");
    let message = assert_storage_failure("persist", within("persist", a.add(&[2])).await);
    assert!(message.contains("locked"), "{message}");
    assert_eq!(stop_reason(a).await, StopReason::PersistFailure);
    let mut r = start_acct(&p, pid);
    match r.note().await {
        Note::RecoveryFailed(RecoveryError::Journal { source, .. }) => {
            assert!(matches!(source, JournalError::Storage { .. }), "{source:?}")
        }
        other => panic!("expected a failed recovery, got {other:?}"),
    }
    // Another id's write fails the same way, and poisons nothing.
    let mut other = start_acct(&p, "sqlite-other");
    assert!(matches!(other.note().await, Note::RecoveryFailed(_)));
    locker.execute("COMMIT").await.expect("unlock");
    locker.close().await.expect("close");

    let mut again = start_acct(&p, pid);
    assert_eq!(again.note().await, Note::Recovered(1));
    assert_eq!(again.add(&[3]).await.expect("stored"), (2, 4));
    assert_eq!(stored_seq_nrs(&p, pid, 1, u64::MAX).await, vec![1, 2]);
}

/// A write the database refuses by rolling back its whole transaction (a trigger's
/// `RAISE(ROLLBACK)`; SQLite does the same by itself on `SQLITE_FULL` and I/O errors) must fail
/// that persist typed and not poison the journal for other actors (Akka.NET#7299: a persist
/// failure on a database error; sqlx's SQLite worker keeps counting such a transaction as open,
/// so every later `BEGIN` on that connection failed with `InvalidSavePointStatement`: every
/// later write and recovery of every actor failed until the process restarted). The same with
/// `RAISE(ABORT)` (the statement alone is rolled back) and with a delete.
async fn sqlite_a_transaction_the_database_rolls_back_poisons_no_other_write() {
    for raise in ["ROLLBACK", "ABORT"] {
        let b = Backend::new(Kind::Sqlite).await;
        let p = b.open().await;
        let mut healthy = start_acct(&p, "healthy");
        assert_eq!(healthy.note().await, Note::Recovered(0));
        assert_eq!(healthy.add(&[1]).await.expect("stored"), (1, 1));
        let mut poisoned = start_acct(&p, "poisoned");
        assert_eq!(poisoned.note().await, Note::Recovered(0));
        let mut admin = sqlx::SqliteConnection::connect(&b.sqlite_url())
            .await
            .expect("open");
        admin
            .execute(
                format!(
                    "CREATE TRIGGER refuse_poisoned BEFORE INSERT ON journal \
                     WHEN NEW.persistence_id = 'poisoned' \
                     BEGIN SELECT RAISE({raise}, 'refused by the database'); END"
                )
                .as_str(),
            )
            .await
            .expect("trigger");
        admin
            .execute(
                format!(
                    "CREATE TRIGGER refuse_delete BEFORE DELETE ON journal \
                     WHEN OLD.persistence_id = 'healthy' AND OLD.seq_nr = 1 \
                     BEGIN SELECT RAISE({raise}, 'delete refused by the database'); END"
                )
                .as_str(),
            )
            .await
            .expect("trigger");
        admin.close().await.expect("close");

        let message = assert_storage_failure(raise, within("persist", poisoned.add(&[9])).await);
        assert!(
            message.contains("refused by the database"),
            "{raise}: {message}"
        );
        assert_eq!(stop_reason(poisoned).await, StopReason::PersistFailure);
        // Another actor's write, and a new actor's recovery (a write of its ownership), go on.
        assert_eq!(
            healthy
                .add(&[2])
                .await
                .expect("the journal is not poisoned"),
            (2, 3),
            "{raise}"
        );
        healthy.addr.send(DeleteTo(1)).await.expect("mailbox");
        match healthy.note().await {
            Note::DeleteFailed(m) => assert!(m.contains("delete refused"), "{raise}: {m}"),
            other => panic!("{raise}: expected a failed delete, got {other:?}"),
        }
        assert_eq!(
            healthy.add(&[3]).await.expect("stored after the delete"),
            (3, 6)
        );
        let mut other = start_acct(&p, "another");
        assert_eq!(other.note().await, Note::Recovered(0), "{raise}");
        assert_eq!(other.add(&[5]).await.expect("stored"), (1, 5), "{raise}");
        assert_eq!(
            stored_seq_nrs(&p, "poisoned", 1, u64::MAX).await,
            Vec::<u64>::new()
        );
        assert_eq!(
            stored_seq_nrs(&p, "healthy", 1, u64::MAX).await,
            vec![1, 2, 3]
        );
        close(p, true).await;
    }
}

/// A full disk under SQLite (SQLITE_FULL; Akka.NET's SQLite journal, cqrs-es over a full
/// volume): the journal's file on a tmpfs of 512 KiB, filled up. Some persist fails as a
/// storage failure; every acknowledged event is stored; once space is freed, the same
/// `Persistence` recovers a new incarnation at the last acknowledged event and persists the
/// next one. Needs root (mount); skipped otherwise.
async fn sqlite_on_a_full_disk_fails_writes_typed_and_loses_no_acknowledged_event() {
    let mount = tempfile::tempdir().expect("mount point");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=512k", "tmpfs"])
        .arg(mount.path())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs (needs root)");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mount.path().to_owned());
    let url = format!("sqlite:{}", mount.path().join("journal.db").display());
    let settings = actix_persistence::Settings::loader()
        .env_vars(vec![
            (
                "ACTIX_PERSISTENCE__JOURNAL__PLUGIN".to_owned(),
                "sqlite".to_owned(),
            ),
            ("ACTIX_PERSISTENCE__JOURNAL__SQLITE__URL".to_owned(), url),
        ])
        .load()
        .expect("settings");
    let p = Persistence::start_with(settings).await.expect("start");
    let pid = "full-disk";
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    // Fill what is left of the file system.
    let filler = mount.path().join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).expect("filler");
        let block = vec![0xA5_u8; 4096];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }
    let mut acknowledged = 0_u64;
    let failure = loop {
        match within("persist", a.add(&[1; 8])).await {
            Ok((last, _)) => acknowledged = last,
            Err(error) => break error,
        }
        assert!(acknowledged < 100_000, "the disk never filled");
    };
    match failure {
        PersistError::Failed(JournalError::Storage { source, .. }) => {
            assert!(source.to_string().contains("full"), "{source}")
        }
        other => panic!("expected a storage failure, got {other:?}"),
    }
    assert_eq!(stop_reason(a).await, StopReason::PersistFailure);
    std::fs::remove_file(&filler).expect("free the space");

    let mut again = start_acct(&p, pid);
    assert_eq!(again.note().await, Note::Recovered(acknowledged));
    assert_eq!(
        again.add(&[2]).await.expect("stored after freeing space").0,
        acknowledged + 1
    );
    assert_eq!(
        stored_seq_nrs(&p, pid, 1, u64::MAX).await,
        (1..=acknowledged + 1).collect::<Vec<_>>()
    );
    close(p, true).await;
}

// ---------------------------------------------------------------------------------------------

macro_rules! postgres_tests {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[actix::test]
            #[cfg_attr(
                not(has_database_url),
                ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
            )]
            async fn postgres() {
                super::$name().await
            }
        }
    )*};
}

postgres_tests! {
    a_backend_terminated_during_its_commit_fails_the_write_and_stores_nothing,
    a_replay_blocked_past_the_statement_timeout_fails_recovery_typed,
    a_backend_terminated_during_a_write_fails_it_and_the_next_incarnation_reuses_its_seq_nr,
    backends_terminated_during_group_commits_lose_no_acknowledged_event,
    a_backend_terminated_during_a_replay_never_completes_a_partial_recovery,
    a_backend_terminated_during_a_current_query_never_ends_it_early,
    a_backend_terminated_during_live_queries_misses_and_repeats_nothing,
    a_database_refusing_connections_at_startup_fails_start_and_then_starts,
    a_database_going_away_while_running_fails_writes_and_the_same_pool_recovers,
    a_read_only_database_fails_persists_and_recoveries_clearly,
    a_tiny_statement_timeout_on_the_database_is_overridden_by_the_journals_own,
}

#[actix::test]
async fn sqlite_locked_past_busy_timeout() {
    sqlite_locked_past_busy_timeout_fails_writes_typed_and_recovers_after().await
}

#[actix::test]
async fn sqlite_rolled_back_by_the_database() {
    sqlite_a_transaction_the_database_rolls_back_poisons_no_other_write().await
}

#[actix::test]
async fn sqlite_full_disk() {
    sqlite_on_a_full_disk_fails_writes_typed_and_loses_no_acknowledged_event().await
}
