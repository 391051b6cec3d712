//! Recovery (replay) safety of the persistent actor, after bug reports filed against other
//! persistence libraries (akka-persistence-jdbc / pekko-persistence-jdbc, Akka and Akka.NET
//! recovery, akka-persistence-cassandra's replay, EventStoreDB / KurrentDB stream reads): stored
//! rows edited or damaged behind the journal's back, a store failing in the middle of a replay,
//! commands sent while an actor recovers, replays at page boundaries, many actors recovering at
//! once and one id recovered twice. On every store (in memory, a SQLite file, a PostgreSQL
//! database of the test's own), across restarts of the "process" (a new `Persistence` over the
//! same database).
//!
//! The rule every test checks: recovery applies every stored event once, in sequence order, or
//! fails with a typed error naming the persistence id (and the sequence number where one is
//! at fault); it never panics, never skips an event silently, and the actor never answers a
//! command from a partial state.

mod adversarial;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use actix_persistence::actix::{Actor, Context, Handler, MessageResult};
use actix_persistence::serialization::{SerializationError, JSON_SERIALIZER_ID};
use actix_persistence::{
    ActorFailure, AtomicWrite, AtomicWriteResult, CommandError, EventSourced, FencingToken,
    JournalError, JournalStore, Message, Ownership, PersistError, PersistReply, PersistResult,
    Persistence, PersistenceState, PersistentActor, PersistentAddr, PersistentRepr, Recovery,
    RecoveryError, RecoveryPermits, ReplayStream, StopReason,
};
use adversarial::{start_acct, start_acct_with, within, Acct, AcctState, Add, Backend, Kind, Note};
use futures::{stream, StreamExt};
use serde::{Deserialize, Serialize};
use sqlx::Connection;
use tokio::sync::{mpsc, Semaphore};

/// The replay page of the SQL journals in these tests (`journal.replay-batch-size`); the
/// in-memory journal copies fixed pages of 1,000.
const SQL_PAGE: u64 = 4;
const INMEM_PAGE: u64 = 1_000;

fn page(kind: Kind) -> u64 {
    match kind {
        Kind::InMemory => INMEM_PAGE,
        Kind::Sqlite | Kind::Postgres => SQL_PAGE,
    }
}

/// A backend whose SQL replays read pages of [`SQL_PAGE`] events.
async fn backend(kind: Kind) -> Backend {
    Backend::new(kind).await.with_env(
        "ACTIX_PERSISTENCE__JOURNAL__REPLAY_BATCH_SIZE",
        &SQL_PAGE.to_string(),
    )
}

// ---------------------------------------------------------------------------------------------
// The stored form, written and damaged behind the journal's back

fn payload(amount: i64) -> Vec<u8> {
    serde_json::to_vec(&adversarial::Added {
        amount,
        tags: Default::default(),
    })
    .expect("json")
}

fn repr(pid: &str, seq_nr: u64, payload: Vec<u8>, serializer_id: u32) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload,
        serializer_id,
        manifest: String::new(),
        writer_uuid: "seeding-tool".into(),
        timestamp: 1,
        tags: Default::default(),
    }
}

/// The journal store under the journal actor of `p` (the same database).
fn store_of(b: &Backend, p: &Persistence) -> Arc<dyn JournalStore> {
    match b.kind {
        Kind::InMemory => Arc::new(b.inmem_journal().expect("an in-memory backend")),
        Kind::Sqlite => Arc::new(p.sqlite_journal().expect("a SQLite journal").clone()),
        Kind::Postgres => Arc::new(p.postgres_journal().expect("a PostgreSQL journal").clone()),
    }
}

/// Stores `events` (seq_nr, payload, serializer id) of `pid` straight into the store, one
/// atomic write each, as a tool (an import, a migration) would.
async fn seed(store: &dyn JournalStore, pid: &str, events: Vec<(u64, Vec<u8>, u32)>) {
    let writes = events
        .into_iter()
        .map(|(seq_nr, payload, serializer_id)| {
            AtomicWrite::new(vec![repr(pid, seq_nr, payload, serializer_id)]).expect("shape")
        })
        .collect();
    let results = within("seeding", store.write_messages(writes))
        .await
        .expect("seeded");
    assert!(results.iter().all(Result::is_ok), "seeded: {results:?}");
}

/// Events 1..=n of `pid`, amount = seq_nr.
async fn seed_counting(store: &dyn JournalStore, pid: &str, n: u64) {
    let events = (1..=n)
        .map(|s| (s, payload(s as i64), JSON_SERIALIZER_ID))
        .collect();
    seed(store, pid, events).await
}

/// Runs `statement` on the SQL database of `b` (no-op for the in-memory backend: the caller
/// damages that one through the store).
async fn sql(b: &Backend, statement: &str) {
    match b.kind {
        Kind::InMemory => unreachable!("no SQL on the in-memory backend"),
        Kind::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&b.sqlite_url())
                .await
                .expect("connect");
            sqlx::query(statement)
                .execute(&mut c)
                .await
                .expect(statement);
        }
        Kind::Postgres => {
            let mut c = sqlx::PgConnection::connect(&b.pg_url())
                .await
                .expect("connect");
            sqlx::query(statement)
                .execute(&mut c)
                .await
                .expect(statement);
        }
    }
}

fn expected(seq_nrs: impl IntoIterator<Item = u64>) -> Vec<(u64, i64)> {
    seq_nrs.into_iter().map(|s| (s, s as i64)).collect()
}

// ---------------------------------------------------------------------------------------------
// A store wrapper that holds, fails or repeats a recovery's replay at an event of the test's
// choosing (once: the next replay passes through)

/// What the next recovery replay does, by the 0-based index of the event in its stream.
#[derive(Debug, Default, Clone, Copy)]
struct Plan {
    /// Waits (having told the test) before this event until the test releases it.
    hold_at: Option<u64>,
    /// Yields a storage error instead of this event, and ends.
    fail_at: Option<u64>,
    /// Yields this event twice.
    repeat_at: Option<u64>,
}

struct Control {
    held: mpsc::UnboundedSender<()>,
    release: Semaphore,
}

/// The injected fault of [`Tamper`].
#[derive(Debug, thiserror::Error)]
#[error("injected: the connection was lost in the middle of the replay")]
struct LostConnection;

struct Tamper {
    inner: Arc<dyn JournalStore>,
    plan: Mutex<Plan>,
    control: Arc<Control>,
    /// Replays for recovery started.
    replays: AtomicU64,
}

impl Tamper {
    fn new(inner: Arc<dyn JournalStore>) -> (Arc<Tamper>, mpsc::UnboundedReceiver<()>) {
        let (held, rx) = mpsc::unbounded_channel();
        let tamper = Tamper {
            inner,
            plan: Mutex::new(Plan::default()),
            control: Arc::new(Control {
                held,
                release: Semaphore::new(0),
            }),
            replays: AtomicU64::new(0),
        };
        (Arc::new(tamper), rx)
    }

    fn next_replay(&self, plan: Plan) {
        *self.plan.lock().expect("plan") = plan;
    }

    fn release(&self) {
        self.control.release.add_permits(1);
    }
}

#[async_trait::async_trait]
impl JournalStore for Tamper {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        self.inner.write_messages(writes).await
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.inner.replay_messages(pid, from, to, max)
    }

    fn replay_for_recovery(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.replays.fetch_add(1, Ordering::SeqCst);
        let plan = std::mem::take(&mut *self.plan.lock().expect("plan"));
        let inner = self.inner.replay_for_recovery(pid, from, to, max);
        let control = Arc::clone(&self.control);
        // (stream, index of the next event, an event to yield again, ended)
        type St = (ReplayStream, u64, Option<PersistentRepr>, bool);
        let start: St = (inner, 0, None, false);
        Box::pin(stream::unfold(
            start,
            move |(mut inner, i, again, ended)| {
                let control = Arc::clone(&control);
                async move {
                    if ended {
                        return None;
                    }
                    if let Some(event) = again {
                        return Some((Ok(event), (inner, i, None, false)));
                    }
                    if plan.hold_at == Some(i) {
                        let _ = control.held.send(());
                        control.release.acquire().await.expect("open").forget();
                    }
                    if plan.fail_at == Some(i) {
                        let error = JournalError::storage("replay", LostConnection);
                        return Some((Err(error), (inner, i + 1, None, true)));
                    }
                    let next = inner.next().await?;
                    let again = match (&next, plan.repeat_at == Some(i)) {
                        (Ok(event), true) => Some(event.clone()),
                        _ => None,
                    };
                    Some((next, (inner, i + 1, again, false)))
                }
            },
        ))
    }

    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        self.inner.read_highest_sequence_nr(pid, from).await
    }

    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        token: FencingToken,
    ) -> Result<(), JournalError> {
        self.inner.delete_messages_to(pid, to, token).await
    }

    async fn take_ownership(&self, pid: &str) -> Result<Ownership, JournalError> {
        self.inner.take_ownership(pid).await
    }

    async fn read_deleted_to(&self, pid: &str) -> Result<Option<u64>, JournalError> {
        self.inner.read_deleted_to(pid).await
    }
}

/// A "process" over the database of `b` whose journal store is `tamper` (over the store of
/// `base`, which must stay open).
fn open_over(b: &Backend, base: &Persistence, tamper: &Arc<Tamper>) -> Persistence {
    Persistence::start_with_stores(
        b.settings(),
        Arc::clone(tamper) as Arc<dyn JournalStore>,
        Arc::clone(base.snapshot_store()),
    )
    .expect("start persistence")
}

// ---------------------------------------------------------------------------------------------
// Starting an `Acct` behind a `PersistentAddr` (typed errors for the callers)

struct Typed {
    addr: PersistentAddr<Acct>,
    notes: mpsc::UnboundedReceiver<Note>,
    stopped: tokio::sync::oneshot::Receiver<StopReason>,
}

fn start_typed(p: &Persistence, pid: &str) -> Typed {
    let (tx, notes) = mpsc::unbounded_channel();
    let mut state = p.state(pid).expect("valid id");
    let stopped = state.watch_stop();
    let addr = Acct {
        persistence: state,
        state: AcctState::default(),
        notes: tx,
    }
    .start_persistent();
    Typed {
        addr,
        notes,
        stopped,
    }
}

/// The recovery failure the actor reported (it never reported a completed recovery first).
async fn recovery_failure(notes: &mut mpsc::UnboundedReceiver<Note>) -> RecoveryError {
    match within("a recovery note", notes.recv()).await {
        Some(Note::RecoveryFailed(error)) => error,
        other => panic!("expected a failed recovery, got {other:?}"),
    }
}

/// Asserts that `error` is a deserialization failure of `pid` at `seq_nr`.
fn assert_deserialize_at(error: &RecoveryError, pid: &str, seq_nr: u64) {
    match error {
        RecoveryError::Deserialize {
            persistence_id,
            source:
                SerializationError::Deserialize { seq_nr: at, .. }
                | SerializationError::UnknownSerializer { seq_nr: at, .. },
        } if persistence_id == pid && *at == seq_nr => {}
        other => panic!("expected a deserialization failure of {pid} at {seq_nr}, got {other:?}"),
    }
    let text = error.to_string();
    assert!(text.contains(pid), "the error names the id: {text}");
    assert!(
        text.contains(&seq_nr.to_string()),
        "the error names {seq_nr}: {text}"
    );
}

// =============================================================================================
// Damaged rows

/// Rows deleted by hand in the middle of an id's history (a whole replay page, one row at a
/// page's end, a run across three pages, the last two rows): the replay passes over every gap
/// and applies every later event once, in order; the sequence goes on after the highest
/// number ever stored. apache/pekko-persistence-jdbc#516 (the batched replay stopped at the
/// first mid-stream gap and silently dropped every later event); kurrent-io/KurrentDB#2631 (a
/// read that came back empty before the end of a truncated stream ended it). A gap itself is
/// no error here: a rejected write leaves one by design (docs/architecture.md, "Rejected
/// writes"). In memory, where no row can be deleted, the events are stored with those gaps.
async fn replay_passes_over_rows_deleted_in_the_middle_and_applies_every_later_event(kind: Kind) {
    let b = backend(kind).await;
    let pid = "Gappy|1";
    let p = b.open().await;
    let store = store_of(&b, &p);
    let deleted: Vec<u64> = [5, 6, 7, 8, 12]
        .into_iter()
        .chain(14..=25)
        .chain([29, 30])
        .collect();
    let kept: Vec<u64> = (1..=30).filter(|s| !deleted.contains(s)).collect();
    match kind {
        Kind::InMemory => {
            let events = kept
                .iter()
                .map(|&s| (s, payload(s as i64), JSON_SERIALIZER_ID))
                .collect();
            seed(&*store, pid, events).await;
            // The highest number ever stored, as in SQL (the rows deleted there were stored).
            seed(&*store, pid, vec![(30, payload(30), JSON_SERIALIZER_ID)]).await;
            store
                .delete_messages_to(pid, 0, FencingToken::UNOWNED)
                .await
                .expect("no-op");
        }
        Kind::Sqlite | Kind::Postgres => {
            seed_counting(&*store, pid, 30).await;
            let list = deleted
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",");
            sql(
                &b,
                &format!(
                    "DELETE FROM journal WHERE persistence_id = '{pid}' AND seq_nr IN ({list})"
                ),
            )
            .await;
        }
    }
    let mut acct = start_acct(&p, pid);
    let last = acct.note().await;
    let (applied_last, state) = acct.get().await;
    let mut want = expected(kept.iter().copied());
    if kind == Kind::InMemory {
        want.push((30, 30));
    }
    assert_eq!(
        state.applied, want,
        "every event after each gap, once, in order"
    );
    assert_eq!(last, Note::Recovered(30));
    assert_eq!(applied_last, 30);
    assert_eq!(acct.add(&[100]).await.expect("persisted").0, 31);
    drop(acct);
    within("shutdown", p.shutdown()).await;

    let p = b.open().await;
    let mut acct = start_acct(&p, pid);
    assert_eq!(acct.note().await, Note::Recovered(31));
    let (_, state) = acct.get().await;
    want.push((31, 100));
    assert_eq!(state.applied, want);
    within("shutdown", p.shutdown()).await;
}

/// Payloads damaged behind the journal's back in the middle of the second replay page (not
/// JSON, JSON of another event type, a field of the wrong type, empty, a serializer id the
/// reader does not know): recovery fails naming the persistence id and the sequence number,
/// every command sent meanwhile gets the recovery error (none hangs, none is answered from the
/// five events applied before it), and the next process fails the same way (never skips the
/// event). akka/akka-persistence-jdbc#95 ("any deserialization errors will silently stop
/// eventSource"); SaaStacked/saastack#56 (an aggregate load that ignored the event store's
/// error); Elders/Cronus#58 (a replay that crashed the store on a bad event).
async fn damaged_payloads_fail_recovery_naming_the_id_and_seq_nr(kind: Kind) {
    let b = backend(kind).await;
    let damages: [(&str, Vec<u8>, u32); 5] = [
        (
            "Damaged|not-json",
            b"{\"amount\": 6,".to_vec(),
            JSON_SERIALIZER_ID,
        ),
        (
            "Damaged|other-type",
            br#"{"name":"x","at":6}"#.to_vec(),
            JSON_SERIALIZER_ID,
        ),
        (
            "Damaged|wrong-field",
            br#"{"amount":"six","tags":[]}"#.to_vec(),
            JSON_SERIALIZER_ID,
        ),
        ("Damaged|empty", Vec::new(), JSON_SERIALIZER_ID),
        ("Damaged|serializer", payload(6), 77),
    ];
    let p = b.open().await;
    let store = store_of(&b, &p);
    for (pid, bad, serializer_id) in &damages {
        let events = (1..=10)
            .map(|s| match s {
                6 => (s, bad.clone(), *serializer_id),
                _ => (s, payload(s as i64), JSON_SERIALIZER_ID),
            })
            .collect();
        seed(&*store, pid, events).await;
    }
    for restart in 0..2 {
        for (pid, _, _) in &damages {
            let mut typed = start_typed(&p, pid);
            // Commands sent before the recovery ended.
            let asks: Vec<_> = (0..5)
                .map(|i| {
                    let addr = typed.addr.clone();
                    async move { addr.ask(Add(vec![i], vec![])).await }
                })
                .collect();
            let answers = within("commands", futures::future::join_all(asks)).await;
            let error = recovery_failure(&mut typed.notes).await;
            assert_deserialize_at(&error, pid, 6);
            for answer in answers {
                match answer {
                    Err(CommandError::ActorStopped {
                        persistence_id,
                        cause: Some(ActorFailure::Recovery(cause)),
                    }) if persistence_id == *pid => assert_deserialize_at(&cause, pid, 6),
                    other => panic!(
                        "restart {restart}, {pid}: expected the recovery error, got {other:?}"
                    ),
                }
            }
            let reason = within("stop", &mut typed.stopped).await.expect("reason");
            assert!(matches!(reason, StopReason::RecoveryFailure), "{reason:?}");
        }
    }
    within("shutdown", p.shutdown()).await;
}

/// Columns edited in SQL to values the journal never writes (SQLite keeps whatever a column is
/// given: a manifest or writer id that is not UTF-8, a serializer id that is text or negative,
/// a sequence number that is not an integer; PostgreSQL: a serializer id out of the u32 range,
/// an empty payload): recovery fails with a typed error naming the persistence id and the
/// row's sequence number, never a panic, never a completed recovery. (SQLite's rows that are
/// not read as a page are decoded by sqlx without a type check: a sequence number of 6.5 was
/// read as 6 and recovered, a serializer id of `'json'` read as serializer 0, and a manifest
/// that is not UTF-8 failed without naming its row.) akka/akka-persistence-cassandra#372 (a
/// replay stage that dropped rows it did not expect instead of surfacing them);
/// apache/pekko-persistence-jdbc#516.
async fn columns_edited_in_sql_fail_recovery_typed(kind: Kind) {
    let b = backend(kind).await;
    let edits: Vec<(&str, &str)> = match kind {
        Kind::InMemory => unreachable!("SQL only"),
        Kind::Sqlite => vec![
            ("Edited|manifest", "manifest = X'FF80'"),
            ("Edited|writer", "writer_uuid = X'C3'"),
            ("Edited|serializer-text", "serializer_id = 'json'"),
            ("Edited|serializer-negative", "serializer_id = -1"),
            ("Edited|serializer-huge", "serializer_id = 4294967296"),
            ("Edited|seq-real", "seq_nr = 6.5"),
            ("Edited|payload-int", "payload = 6"),
        ],
        Kind::Postgres => vec![
            ("Edited|serializer-negative", "serializer_id = -7"),
            ("Edited|payload-empty", "payload = ''::bytea"),
            ("Edited|payload-zero", "payload = '\\x00'::bytea"),
        ],
    };
    let p = b.open().await;
    let store = store_of(&b, &p);
    for (pid, set) in &edits {
        seed_counting(&*store, pid, 10).await;
        sql(
            &b,
            &format!("UPDATE journal SET {set} WHERE persistence_id = '{pid}' AND seq_nr = 6"),
        )
        .await;
    }
    for (pid, set) in &edits {
        let mut typed = start_typed(&p, pid);
        match within("recovery", typed.notes.recv()).await {
            Some(Note::RecoveryFailed(error)) => {
                let text = error.to_string();
                assert!(text.contains(pid), "{set}: the error names the id: {text}");
                assert!(
                    text.contains("sequence number 6"),
                    "{set}: the error names the row: {text}"
                );
            }
            Some(Note::Recovered(last)) => {
                let (_, state) = within("get", typed.addr.send(adversarial::Get))
                    .await
                    .expect("get");
                panic!(
                    "{set}: recovery completed at {last} with {:?}",
                    state.applied
                );
            }
            other => panic!("{set}: {other:?}"),
        }
    }
    within("shutdown", p.shutdown()).await;
}

/// The journal's highest-sequence-number bookkeeping damaged by hand (a restore of the events
/// table alone, an import that never wrote it, a negative value): recovery still applies every
/// stored event once and the next persist goes after the highest stored event (a
/// `ConcurrentWrite` on it would stop the actor on every restart), or recovery fails typed;
/// a gap in the events never ends the replay early. akka/akka-persistence-jdbc#99 and
/// akkadotnet/Akka.Persistence.Redis#12 (a wrong highest sequence number read at recovery);
/// apache/pekko-persistence-jdbc#516.
async fn a_damaged_highest_seq_nr_never_hides_stored_events(kind: Kind) {
    let b = backend(kind).await;
    let p = b.open().await;
    let store = store_of(&b, &p);
    let cases = [
        (
            "Highest|gone",
            "DELETE FROM journal_highest WHERE persistence_id = '{pid}'",
        ),
        (
            "Highest|low",
            "UPDATE journal_highest SET highest_seq_nr = 4 WHERE persistence_id = '{pid}'",
        ),
        (
            "Highest|negative",
            "UPDATE journal_highest SET highest_seq_nr = -1 WHERE persistence_id = '{pid}'",
        ),
    ];
    for (pid, damage) in cases {
        seed_counting(&*store, pid, 16).await;
        // A gap (rows 5..=8, one replay page) and the bookkeeping damaged.
        sql(
            &b,
            &format!(
                "DELETE FROM journal WHERE persistence_id = '{pid}' AND seq_nr BETWEEN 5 AND 8"
            ),
        )
        .await;
        sql(&b, &damage.replace("{pid}", pid)).await;
    }
    within("shutdown", p.shutdown()).await;

    let p = b.open().await;
    for (pid, damage) in cases {
        let mut acct = start_acct(&p, pid);
        match acct.note().await {
            Note::Recovered(last) => {
                let (_, state) = acct.get().await;
                assert_eq!(
                    state.applied,
                    expected((1..=4).chain(9..=16)),
                    "{damage}: every stored event, once, in order"
                );
                assert_eq!(last, 16, "{damage}");
                // A query by persistence id reads up to the same number.
                let queried = adversarial::stored_seq_nrs(&p, pid, 0, u64::MAX).await;
                assert_eq!(
                    queried,
                    (1..=4).chain(9..=16).collect::<Vec<_>>(),
                    "{damage}"
                );
                let next = acct.add(&[1]).await;
                assert_eq!(next.expect("persisted").0, 17, "{damage}");
            }
            Note::RecoveryFailed(error) => {
                assert!(error.to_string().contains(pid), "{damage}: {error}");
            }
            other => panic!("{damage}: {other:?}"),
        }
    }
    within("shutdown", p.shutdown()).await;
}

/// The ownership and deletion bookkeeping edited by hand (an owner epoch of -5, -1 or the
/// largest BIGINT, a negative deletion mark): recovery either fails typed, naming the id, or
/// recovers every event; and when two incarnations recover, the older one is still fenced (its
/// write refused, nothing stored) and the newer one's write is stored. akka/akka-core#18850,
/// akkadotnet/akka.net#1403 (two live incarnations of one id).
async fn damaged_ownership_bookkeeping_never_lets_two_incarnations_write(kind: Kind) {
    let b = backend(kind).await;
    let p = b.open().await;
    let store = store_of(&b, &p);
    let cases = [
        ("Epoch|minus-five", "owner_epoch = -5"),
        ("Epoch|minus-one", "owner_epoch = -1"),
        ("Epoch|max", "owner_epoch = 9223372036854775807"),
        ("Deleted|negative", "deleted_to = -3"),
    ];
    for (pid, set) in cases {
        seed_counting(&*store, pid, 4).await;
        sql(
            &b,
            &format!("UPDATE journal_highest SET {set} WHERE persistence_id = '{pid}'"),
        )
        .await;
    }
    within("shutdown", p.shutdown()).await;

    let p = b.open().await;
    for (pid, set) in cases {
        let mut older = start_typed(&p, pid);
        match within("recovery", older.notes.recv()).await {
            Some(Note::Recovered(4)) => {}
            Some(Note::RecoveryFailed(error)) => {
                assert!(error.to_string().contains(pid), "{set}: {error}");
                continue;
            }
            other => panic!("{set}: {other:?}"),
        }
        let mut newer = start_acct(&p, pid);
        match newer.note().await {
            Note::Recovered(4) => {}
            Note::RecoveryFailed(error) => {
                assert!(error.to_string().contains(pid), "{set}: {error}");
                continue;
            }
            other => panic!("{set}: {other:?}"),
        }
        let stale = within("the older write", older.addr.ask(Add(vec![-1], vec![]))).await;
        assert!(
            matches!(
                &stale,
                Err(CommandError::Persist(PersistError::Failed(
                    JournalError::Fenced { .. }
                )))
            ),
            "{set}: the older incarnation is fenced, got {stale:?}"
        );
        assert_eq!(newer.add(&[5]).await.expect("{set}: stored").0, 5, "{set}");
        let stored = adversarial::stored_seq_nrs(&p, pid, 0, u64::MAX).await;
        assert_eq!(stored, vec![1, 2, 3, 4, 5], "{set}");
    }
    within("shutdown", p.shutdown()).await;
}

// =============================================================================================
// The store failing in the middle of a replay

/// The connection lost on page 3 of 5 (event 10 of 20, replay pages of 4), while commands wait
/// for the recovery: recovery fails with the journal's error naming the persistence id, every
/// waiting caller gets it (none hangs, none is answered from the nine events applied), the
/// recovery permit is given back (one permit in all: the next recovery would wait forever),
/// and the next incarnation replays every event exactly once, in order.
/// akka/akka-persistence-jdbc#9 (connection reset in the middle of a replay);
/// akkadotnet/akka.net#1403 and akka/akka-core#18850 (events replayed twice after a restart
/// during recovery); akka/akka-core#24439 (the permit not returned when recovery failed).
async fn a_replay_failing_on_page_3_of_5_fails_every_waiting_caller_and_a_restart_replays_once(
    kind: Kind,
) {
    let b = backend(kind)
        .await
        .with_env("ACTIX_PERSISTENCE__JOURNAL__MAX_CONCURRENT_RECOVERIES", "1");
    let pid = "Flaky|1";
    let base = b.open().await;
    let store = store_of(&b, &base);
    let n = 5 * page(kind);
    seed_counting(&*store, pid, n).await;
    let (tamper, mut held) = Tamper::new(store);
    let p = open_over(&b, &base, &tamper);
    let at = 2 * page(kind) + 1;
    tamper.next_replay(Plan {
        hold_at: Some(at),
        fail_at: Some(at),
        repeat_at: None,
    });
    let mut typed = start_typed(&p, pid);
    within("the replay reaches page 3", held.recv()).await;
    let asks: Vec<_> = (0..10)
        .map(|i| {
            let addr = typed.addr.clone();
            tokio::spawn(async move { addr.ask(Add(vec![i], vec![])).await })
        })
        .collect();
    // Let every command reach the mailbox before the replay goes on.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    tamper.release();
    let error = recovery_failure(&mut typed.notes).await;
    let is_injected = |e: &RecoveryError| matches!(e, RecoveryError::Journal { persistence_id, source: JournalError::Storage { operation: "replay", .. } } if persistence_id == pid);
    assert!(is_injected(&error), "{error:?}");
    assert!(error.to_string().contains(pid), "{error}");
    for ask in asks {
        match within("a waiting command", ask).await.expect("task") {
            Err(CommandError::ActorStopped {
                cause: Some(ActorFailure::Recovery(cause)),
                ..
            }) => assert!(is_injected(&cause), "{cause:?}"),
            other => panic!("expected the recovery error, got {other:?}"),
        }
    }

    // The same process, after the fault: every event once, in order; the permit came back.
    let mut acct = start_acct(&p, pid);
    assert_eq!(acct.note().await, Note::Recovered(n));
    assert_eq!(acct.get().await.1.applied, expected(1..=n));
    assert_eq!(acct.add(&[7]).await.expect("persisted").0, n + 1);
    drop(acct);
    within("shutdown", p.shutdown()).await;
    within("shutdown", base.shutdown()).await;

    // And a new process.
    let p = b.open().await;
    let mut acct = start_acct(&p, pid);
    assert_eq!(acct.note().await, Note::Recovered(n + 1));
    let mut want = expected(1..=n);
    want.push((n + 1, 7));
    assert_eq!(acct.get().await.1.applied, want);
    within("shutdown", p.shutdown()).await;
}

/// A replay that stalls on page 2 and never resumes (a read blocked by a lock, a network
/// partition that drops packets without a reset): after the recovery timeout without progress
/// recovery fails with `Timeout` naming the persistence id, the waiting callers get it, the
/// one recovery permit is back, and the next actor of the id recovers every event once.
/// ironfish/akka-persistence-mongo#106 and akka/akka-persistence-jdbc#99 (`RecoveryTimedOut`,
/// "Last known sequence number"), akka/akka-core#28658 (an actor stuck in recovery forever).
async fn a_replay_stalled_past_the_recovery_timeout_fails_typed_and_frees_its_permit(kind: Kind) {
    let b = backend(kind)
        .await
        .with_env("ACTIX_PERSISTENCE__JOURNAL__MAX_CONCURRENT_RECOVERIES", "1")
        .with_env("ACTIX_PERSISTENCE__JOURNAL__RECOVERY_TIMEOUT", "2s");
    let pid = "Stalled|1";
    let base = b.open().await;
    let store = store_of(&b, &base);
    let n = 3 * page(kind);
    seed_counting(&*store, pid, n).await;
    let (tamper, mut held) = Tamper::new(store);
    let p = open_over(&b, &base, &tamper);
    tamper.next_replay(Plan {
        hold_at: Some(page(kind) + 1),
        ..Plan::default()
    });
    let mut typed = start_typed(&p, pid);
    within("the replay stalls", held.recv()).await;
    let ask = {
        let addr = typed.addr.clone();
        tokio::spawn(async move { addr.ask(Add(vec![1], vec![])).await })
    };
    let is_timeout = |e: &RecoveryError| matches!(e, RecoveryError::Timeout { persistence_id, .. } if persistence_id == pid);
    let error = recovery_failure(&mut typed.notes).await;
    assert!(is_timeout(&error), "{error:?}");
    match within("the waiting command", ask).await.expect("task") {
        Err(CommandError::ActorStopped {
            cause: Some(ActorFailure::Recovery(cause)),
            ..
        }) => assert!(is_timeout(&cause), "{cause:?}"),
        other => panic!("expected the timeout, got {other:?}"),
    }
    // Never released: the next replay is a new one, and the one permit is free.
    let mut acct = start_acct(&p, pid);
    assert_eq!(acct.note().await, Note::Recovered(n));
    assert_eq!(acct.get().await.1.applied, expected(1..=n));
    drop(acct);
    within("shutdown", p.shutdown()).await;
    within("shutdown", base.shutdown()).await;
}

/// A store that delivers one event twice in the middle of a replay (a retried page read that
/// overlaps the previous one): recovery fails with `UnexpectedEvent` naming the id and the
/// sequence number, never applying it twice. akka/akka-persistence-cassandra#372 and #373
/// (duplicate sequence numbers delivered, or dropped before the replay filter saw them);
/// evolution-gaming/kafka-journal#40.
async fn an_event_delivered_twice_fails_recovery_instead_of_applying_it_twice(kind: Kind) {
    let b = backend(kind).await;
    let pid = "Twice|1";
    let base = b.open().await;
    let store = store_of(&b, &base);
    let n = 2 * page(kind) + 1;
    seed_counting(&*store, pid, n).await;
    let (tamper, _held) = Tamper::new(store);
    let p = open_over(&b, &base, &tamper);
    // The last event of the first page.
    let at = page(kind) - 1;
    tamper.next_replay(Plan {
        repeat_at: Some(at),
        ..Plan::default()
    });
    let mut acct = start_acct(&p, pid);
    match acct.note().await {
        Note::RecoveryFailed(RecoveryError::UnexpectedEvent {
            persistence_id,
            seq_nr,
            after,
            ..
        }) => {
            assert_eq!(persistence_id, pid);
            assert_eq!((seq_nr, after), (at + 1, at + 1));
        }
        other => panic!("expected UnexpectedEvent, got {other:?}"),
    }
    within("shutdown", p.shutdown()).await;
    within("shutdown", base.shutdown()).await;
}

// =============================================================================================
// Commands during recovery

/// Ten commands sent while the replay is held in the middle of its third page: they are handled
/// after recovery, in the order sent, against the whole recovered state (the first continues
/// at the highest stored number + 1 and the total of every event); a query sent among them
/// sees the recovered state, never a partial one. akka/akka-core#25717 and PR #26011
/// (commands stashed during recovery lost or reordered when unstashed);
/// akkadotnet/Akka.Persistence.PostgreSql#131 (recovery completed before the last replayed
/// event was delivered).
async fn commands_sent_during_recovery_run_after_it_in_order_against_the_recovered_state(
    kind: Kind,
) {
    let b = backend(kind).await;
    let pid = "Busy|1";
    let base = b.open().await;
    let store = store_of(&b, &base);
    let n = 3 * page(kind) + 2;
    seed_counting(&*store, pid, n).await;
    let total: i64 = (1..=n as i64).sum();
    let (tamper, mut held) = Tamper::new(store);
    let p = open_over(&b, &base, &tamper);
    tamper.next_replay(Plan {
        hold_at: Some(2 * page(kind) + 1),
        ..Plan::default()
    });
    let acct = start_acct(&p, pid);
    within("the replay reaches page 3", held.recv()).await;
    // `send` queues the message at once: the order of these calls is the mailbox's. The `Get`
    // in the middle answers (last, total) too.
    type Reply = std::pin::Pin<Box<dyn std::future::Future<Output = (u64, i64)>>>;
    let mut replies: Vec<Reply> = Vec::new();
    for i in 1..=10i64 {
        let add = acct.addr.send(Add(vec![i * 1_000], vec![]));
        replies.push(Box::pin(async move {
            add.await.expect("mailbox").expect("persisted")
        }));
        if i == 5 {
            let get = acct.addr.send(adversarial::Get);
            replies.push(Box::pin(async move {
                let (last, state) = get.await.expect("mailbox");
                (last, state.total)
            }));
        }
    }
    tamper.release();
    let answers = within("the commands", futures::future::join_all(replies)).await;
    let mut want = Vec::new();
    let mut running = total;
    for i in 1..=10i64 {
        running += i * 1_000;
        want.push((n + i as u64, running));
        if i == 5 {
            want.push((n + 5, running));
        }
    }
    assert_eq!(answers, want);
    within("shutdown", p.shutdown()).await;
    within("shutdown", base.shutdown()).await;
}

// =============================================================================================
// User code failing on a replayed event

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Deposited(i64);

/// An account whose `apply` panics on an amount of 13, which its command handler refuses: an
/// event from before that rule (stored by an older version, or imported) reaches `apply` only
/// in a replay.
struct Fragile {
    persistence: PersistenceState<Self>,
    total: i64,
    notes: mpsc::UnboundedSender<Result<u64, RecoveryError>>,
}

impl Actor for Fragile {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        actix_persistence::start_recovery(self, ctx);
    }
}

impl PersistentActor for Fragile {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

impl EventSourced for Fragile {
    type Event = Deposited;
    fn apply(&mut self, event: &Deposited) {
        assert_ne!(event.0, 13, "unlucky amount at {}", self.last_seq_nr());
        self.total += event.0;
    }
    fn on_recovery_completed(&mut self, last: u64, _: &mut Context<Self>) {
        let _ = self.notes.send(Ok(last));
    }
    fn on_recovery_failure(&mut self, cause: &RecoveryError, _: &mut Context<Self>) {
        let _ = self.notes.send(Err(cause.clone()));
    }
}

#[derive(Message)]
#[rtype(result = "PersistResult<i64>")]
struct Deposit(i64);

impl Handler<Deposit> for Fragile {
    type Result = PersistReply<i64>;
    fn handle(&mut self, msg: Deposit, ctx: &mut Context<Self>) -> Self::Result {
        if msg.0 == 13 {
            return PersistReply::ready(self.total);
        }
        self.persist(ctx, Deposited(msg.0), |a, _, _| a.total)
    }
}

#[derive(Message)]
#[rtype(result = "i64")]
struct Total;

impl Handler<Total> for Fragile {
    type Result = MessageResult<Total>;
    fn handle(&mut self, _: Total, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.total)
    }
}

fn start_fragile(
    p: &Persistence,
    pid: &str,
) -> (
    PersistentAddr<Fragile>,
    mpsc::UnboundedReceiver<Result<u64, RecoveryError>>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let addr = Fragile {
        persistence: p.state(pid).expect("valid id"),
        total: 0,
        notes: tx,
    }
    .start_persistent();
    (addr, rx)
}

/// `apply` panicking on a replayed event (the sixth, on the second page): recovery fails with
/// `Panicked` naming the id, `apply` and the panic message, on every restart (the event is
/// never skipped to let the actor start), and the recovery permit comes back (one permit in
/// all: an actor of another id recovers after each failure). akka/akka-core#24192 and PR #24340
/// (an exception in receiveRecover must stop the actor), PR #24439 and #24006 (its permit not
/// returned, or returned twice).
async fn an_apply_panicking_on_a_replayed_event_fails_recovery_and_returns_the_permit(kind: Kind) {
    let b = backend(kind)
        .await
        .with_env("ACTIX_PERSISTENCE__JOURNAL__MAX_CONCURRENT_RECOVERIES", "1");
    let pid = "Fragile|1";
    let p = b.open().await;
    let store = store_of(&b, &p);
    let amount = |s: u64| if s == 6 { 13 } else { s as i64 };
    let events = (1..=10)
        .map(|s| {
            let bytes = serde_json::to_vec(&Deposited(amount(s))).expect("json");
            (s, bytes, JSON_SERIALIZER_ID)
        })
        .collect();
    seed(&*store, pid, events).await;
    for round in 0..3 {
        let (fragile, mut notes) = start_fragile(&p, pid);
        match within("recovery", notes.recv()).await.expect("a note") {
            Err(RecoveryError::Panicked {
                persistence_id,
                hook,
                reason,
            }) => {
                assert_eq!(persistence_id, pid);
                assert_eq!(hook, "apply");
                assert!(reason.contains("unlucky amount at 6"), "{reason}");
            }
            other => panic!("round {round}: expected a panic in apply, got {other:?}"),
        }
        match within("a command", fragile.ask(Deposit(1))).await {
            Err(CommandError::ActorStopped {
                cause: Some(ActorFailure::Recovery(RecoveryError::Panicked { .. })),
                ..
            }) => {}
            other => panic!("round {round}: {other:?}"),
        }
        // The one permit is free again.
        let other = format!("Sturdy|{round}");
        let (sturdy, mut notes) = start_fragile(&p, &other);
        assert_eq!(
            within("recovery", notes.recv()).await.expect("note").ok(),
            Some(0)
        );
        assert_eq!(
            within("deposit", sturdy.ask(Deposit(5))).await.expect("ok"),
            5
        );
        let total = within("total", sturdy.send(Total)).await.expect("ok");
        assert_eq!(total, 5);
    }
    within("shutdown", p.shutdown()).await;
}

// =============================================================================================
// Page boundaries and bounds

/// Recoveries of 0, 1, page - 1, page, page + 1, 2 x page and 3 x page + 1 events (pages of
/// the store's replay), and of the longest history bounded by `to_seq_nr` and `max_events` at
/// and around page boundaries: each applies exactly the events it asked for, once, in order,
/// and the next persist goes after the highest stored event. akka/akka-persistence-jdbc (a
/// journal that needed at least one event to recover, "2.12 support" #87); urbit/vere#1012
/// (a partial replay rounded to its batch size); kurrent-io/KurrentDB#268 (a read in batches
/// smaller than the server's failing); commanded/eventstore#10 (a count that did not limit).
async fn recoveries_at_page_boundaries_apply_each_event_once_in_order(kind: Kind) {
    let b = backend(kind).await;
    let pg = page(kind);
    let sizes = [0, 1, pg - 1, pg, pg + 1, 2 * pg, 3 * pg + 1];
    let p = b.open().await;
    let store = store_of(&b, &p);
    for n in sizes {
        seed_counting(&*store, &format!("Pages|{n}"), n).await;
    }
    within("shutdown", p.shutdown()).await;

    let p = b.open().await;
    let longest = format!("Pages|{}", 3 * pg + 1);
    let bounded = [
        (pg - 1, u64::MAX),
        (pg, u64::MAX),
        (pg + 1, u64::MAX),
        (2 * pg, u64::MAX),
        (MAX, pg - 1),
        (MAX, pg),
        (MAX, pg + 1),
        (2 * pg + 1, pg + 1),
        (pg + 1, 2 * pg),
    ];
    const MAX: u64 = actix_persistence::MAX_SEQ_NR;
    for (to_seq_nr, max_events) in bounded {
        let recovery = Recovery {
            to_seq_nr,
            max_events,
            ..Recovery::latest()
        };
        let mut acct = start_acct_with(&p, &longest, |s| s.with_recovery(recovery));
        assert_eq!(
            acct.note().await,
            Note::Recovered(3 * pg + 1),
            "{recovery:?}"
        );
        let applied = acct.get().await.1.applied;
        let up_to = to_seq_nr.min(max_events).min(3 * pg + 1);
        assert_eq!(applied, expected(1..=up_to), "{recovery:?}");
    }
    for n in sizes {
        let pid = format!("Pages|{n}");
        let mut acct = start_acct(&p, &pid);
        assert_eq!(acct.note().await, Note::Recovered(n), "{pid}");
        let (last, state) = acct.get().await;
        assert_eq!(last, n, "{pid}");
        assert_eq!(state.applied, expected(1..=n), "{pid}");
        assert_eq!(state.total, (1..=n as i64).sum::<i64>(), "{pid}");
        assert_eq!(acct.add(&[0]).await.expect("persisted").0, n + 1, "{pid}");
    }
    within("shutdown", p.shutdown()).await;
}

// =============================================================================================
// Many recoveries at once

/// 300 actors started at once over 4 recovery permits, each with a history of its own (one
/// to three replay pages): every one recovers its own events exactly, none deadlocks, and
/// every permit is back at the end. akka/akka-core#22638 and PR #22641 (bounded concurrent recoveries),
/// akka/akka-core#28658 (actors left waiting for a permit forever), akkadotnet/akka.net#2655.
async fn hundreds_of_actors_recover_at_once_under_the_permit_limit(kind: Kind) {
    let b = backend(kind).await;
    let pg = page(kind).min(SQL_PAGE);
    let p = b.open().await;
    let store = store_of(&b, &p);
    let size = |i: u64| 1 + i % (3 * pg);
    let mut writes = Vec::new();
    for i in 0..300u64 {
        for s in 1..=size(i) {
            let repr = repr(
                &format!("Many|{i}"),
                s,
                payload(s as i64),
                JSON_SERIALIZER_ID,
            );
            writes.push(AtomicWrite::new(vec![repr]).expect("shape"));
        }
    }
    let results = within("seed", store.write_messages(writes))
        .await
        .expect("seeded");
    assert!(results.iter().all(Result::is_ok));
    let permits = RecoveryPermits::new(4);
    let mut started = Vec::new();
    for i in 0..300u64 {
        let permits = permits.clone();
        started.push((
            i,
            start_acct_with(&p, &format!("Many|{i}"), move |s| {
                s.with_recovery_permits(permits)
            }),
        ));
    }
    for (i, acct) in &mut started {
        let n = size(*i);
        match acct.note().await {
            Note::Recovered(last) => assert_eq!(last, n, "Many|{i}"),
            other => panic!("Many|{i}: {other:?}"),
        }
        assert_eq!(acct.get().await.1.applied, expected(1..=n), "Many|{i}");
    }
    assert_eq!(permits.available(), 4, "every permit is back");
    drop(started);
    within("shutdown", p.shutdown()).await;

    // A new process, the same 300 at once under the default limit (50 recoveries), more than
    // the PostgreSQL pool's 6 connections (two per replay reading ahead): they wait for
    // connections, none fails or hangs. akka/akka-persistence-jdbc#87 and #455 (mass
    // recoveries timing out on an exhausted pool).
    let p = b.open().await;
    let mut started: Vec<_> = (0..300u64)
        .map(|i| (i, start_acct(&p, &format!("Many|{i}"))))
        .collect();
    for (i, acct) in &mut started {
        assert_eq!(acct.note().await, Note::Recovered(size(*i)), "Many|{i}");
        assert_eq!(
            acct.get().await.1.applied,
            expected(1..=size(*i)),
            "Many|{i}"
        );
    }
    drop(started);
    within("shutdown", p.shutdown()).await;
}

/// Ten actors of one id, each stopped (its arbiter stopped) while its replay is held in the
/// middle of page 2 of 5, over 2 recovery permits and (PostgreSQL) a pool of 6 connections of
/// which a replay reads with two: every stop ends the actor as a normal stop, gives its permit
/// back and leaves no connection checked out, and the eleventh recovers every event once.
/// akka/akka-core#24439 (the permit not returned by an actor stopped while recovering),
/// akka/akka-core#28658; akkadotnet/akka.net#1403 (a restart during recovery replaying twice).
///
/// On PostgreSQL each stop used to leave a connection that the pool opened on the stopped
/// arbiter's runtime in the shared pool, which then failed the next caller that drew it ("A
/// Tokio 1.x context was found, but it is being shutdown", a snapshot load failing another
/// actor's recovery) or held its recovery until the recovery timeout (5 of 15 parallel runs
/// of this file): the stores now open their connections on their home runtime
/// (`HomeRuntime`), so no connection belongs to an arbiter.
async fn actors_stopped_in_the_middle_of_their_replay_give_back_permits_and_connections(
    kind: Kind,
) {
    let b = backend(kind).await;
    let pid = "Stopped|1";
    let base = b.open().await;
    let store = store_of(&b, &base);
    let n = 5 * page(kind);
    seed_counting(&*store, pid, n).await;
    let (tamper, mut held) = Tamper::new(store);
    let p = open_over(&b, &base, &tamper);
    let permits = RecoveryPermits::new(2);
    for round in 0..10 {
        tamper.next_replay(Plan {
            hold_at: Some(page(kind) + 1),
            ..Plan::default()
        });
        let arbiter = actix::Arbiter::new();
        let journal = p.journal().clone();
        let shared = permits.clone();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let (notes_tx, mut notes) = mpsc::unbounded_channel();
        let _addr = Acct::start_in_arbiter(&arbiter.handle(), move |_| {
            let mut state = PersistenceState::new(journal, pid)
                .expect("valid id")
                .with_recovery_permits(shared);
            let _ = stop_tx.send(state.watch_stop());
            Acct {
                persistence: state,
                state: AcctState::default(),
                notes: notes_tx,
            }
        });
        let stopped = within("the actor was built", stop_rx).await.expect("built");
        within("the replay is held", held.recv()).await;
        assert!(arbiter.stop(), "round {round}: the arbiter was running");
        let reason = within("the stop", stopped).await.expect("a stop reason");
        assert!(
            matches!(reason, StopReason::Normal),
            "round {round}: {reason:?}"
        );
        assert!(
            notes.try_recv().is_err(),
            "round {round}: no recovery completed or failed"
        );
        // The held replay is dropped with the actor, never resumed.
        assert_eq!(permits.available(), 2, "round {round}: the permit is back");
    }
    let mut acct = start_acct_with(&p, pid, |s| s.with_recovery_permits(permits.clone()));
    assert_eq!(acct.note().await, Note::Recovered(n));
    assert_eq!(acct.get().await.1.applied, expected(1..=n));
    assert_eq!(tamper.replays.load(Ordering::SeqCst), 11);
    drop(acct);
    within("shutdown", p.shutdown()).await;
    within("shutdown", base.shutdown()).await;
}

// =============================================================================================
// One id recovered twice

/// A second actor of the same id recovers while the first is still held in the middle of its
/// replay, and persists: the first then completes its (now stale) recovery, and its first
/// write is fenced (refused, nothing stored) instead of landing on a history it never saw; a
/// restart recovers exactly the second actor's history. akkadotnet/akka.net#1403 (two
/// incarnations replaying at once), akka/akka-core#18850; apache/pekko#3234.
async fn an_id_recovered_again_while_its_first_actor_still_recovers_fences_the_first(kind: Kind) {
    let b = backend(kind).await;
    let pid = "Twin|1";
    let base = b.open().await;
    let store = store_of(&b, &base);
    let n = 2 * page(kind) + 3;
    seed_counting(&*store, pid, n).await;
    let (tamper, mut held) = Tamper::new(store);
    let p = open_over(&b, &base, &tamper);
    tamper.next_replay(Plan {
        hold_at: Some(page(kind) + 1),
        ..Plan::default()
    });
    let mut first = start_typed(&p, pid);
    within("the first replay is held", held.recv()).await;

    let mut second = start_acct(&p, pid);
    assert_eq!(second.note().await, Note::Recovered(n));
    assert_eq!(second.add(&[1_000]).await.expect("persisted").0, n + 1);

    tamper.release();
    let answer = within(
        "the first actor's command",
        first.addr.ask(Add(vec![-5], vec![])),
    )
    .await;
    match answer {
        Err(CommandError::Persist(PersistError::Failed(JournalError::Fenced {
            persistence_id,
            ..
        })))
        | Err(CommandError::ActorStopped {
            cause: Some(ActorFailure::Persist(JournalError::Fenced { persistence_id, .. })),
            ..
        }) => assert_eq!(persistence_id, pid),
        other => panic!("expected the first actor's write to be fenced, got {other:?}"),
    }
    let mut notes = Vec::new();
    while let Ok(Some(note)) =
        tokio::time::timeout(std::time::Duration::ZERO, first.notes.recv()).await
    {
        notes.push(note);
    }
    let reason = within("the first actor stops", &mut first.stopped)
        .await
        .expect("reason");
    assert!(
        matches!(reason, StopReason::Fenced),
        "{reason:?} after {notes:?}"
    );
    drop(second);
    within("shutdown", p.shutdown()).await;
    within("shutdown", base.shutdown()).await;

    let p = b.open().await;
    let mut acct = start_acct(&p, pid);
    assert_eq!(acct.note().await, Note::Recovered(n + 1));
    let mut want = expected(1..=n);
    want.push((n + 1, 1_000));
    assert_eq!(acct.get().await.1.applied, want);
    within("shutdown", p.shutdown()).await;
}

on_every_store!(
    replay_passes_over_rows_deleted_in_the_middle_and_applies_every_later_event,
    damaged_payloads_fail_recovery_naming_the_id_and_seq_nr,
    a_replay_failing_on_page_3_of_5_fails_every_waiting_caller_and_a_restart_replays_once,
    a_replay_stalled_past_the_recovery_timeout_fails_typed_and_frees_its_permit,
    an_event_delivered_twice_fails_recovery_instead_of_applying_it_twice,
    commands_sent_during_recovery_run_after_it_in_order_against_the_recovered_state,
    an_apply_panicking_on_a_replayed_event_fails_recovery_and_returns_the_permit,
    recoveries_at_page_boundaries_apply_each_event_once_in_order,
    hundreds_of_actors_recover_at_once_under_the_permit_limit,
    an_id_recovered_again_while_its_first_actor_still_recovers_fences_the_first,
);

/// As `on_every_store!`, for damage done in SQL: SQLite and PostgreSQL only.
macro_rules! on_sql_stores {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[actix::test]
            async fn sqlite() {
                super::$name(super::Kind::Sqlite).await
            }

            #[actix::test]
            #[cfg_attr(
                not(has_database_url),
                ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
            )]
            async fn postgres() {
                super::$name(super::Kind::Postgres).await
            }
        }
    )*};
}

mod actors_stopped_in_the_middle_of_their_replay_give_back_permits_and_connections {
    #[actix::test]
    async fn in_memory() {
        super::actors_stopped_in_the_middle_of_their_replay_give_back_permits_and_connections(
            super::Kind::InMemory,
        )
        .await
    }

    #[actix::test]
    async fn sqlite() {
        super::actors_stopped_in_the_middle_of_their_replay_give_back_permits_and_connections(
            super::Kind::Sqlite,
        )
        .await
    }

    #[actix::test]
    #[cfg_attr(
        not(has_database_url),
        ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
    )]
    async fn postgres() {
        super::actors_stopped_in_the_middle_of_their_replay_give_back_permits_and_connections(
            super::Kind::Postgres,
        )
        .await
    }
}

on_sql_stores!(
    columns_edited_in_sql_fail_recovery_typed,
    a_damaged_highest_seq_nr_never_hides_stored_events,
    damaged_ownership_bookkeeping_never_lets_two_incarnations_write,
);
