//! Snapshots end to end, after bug reports filed against other persistence libraries (Akka
//! Persistence and its JDBC, in-memory, Cassandra and Mongo plugins, Akka.NET's SQL plugins,
//! Pekko's JDBC plugin, nact): through the persistent actor and the snapshot stores (in memory,
//! SQLite, PostgreSQL), across restarts of the "process" (a new `Persistence` over the same
//! database). Rows are edited behind the library's back with SQL, the snapshot table is taken
//! away while actors run, recoveries select snapshots by sequence number and by time, and the
//! snapshot store lives in another database than the journal.

mod adversarial;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use actix_persistence::actix::{Actor, Context, Handler, MessageResult};
use actix_persistence::snapshot::{
    InMemorySnapshotStore, SelectedSnapshot, SerializedSnapshot, SnapshotError, SnapshotMetadata,
    SnapshotSelectionCriteria, SnapshotStore,
};
use actix_persistence::{
    DeleteError, EventSourced, InMemoryJournal, Message, PersistReply, PersistResult, Persistence,
    PersistenceState, PersistentActor, Recovery, RecoveryError, Settings, SnapshotPolicy,
    Snapshotting, StopReason, WriteRejection,
};
use adversarial::{within, Backend, Kind};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sqlx::Connection;
use tokio::sync::mpsc;

// ---------------------------------------------------------------------------------------------
// The actor: a ledger whose snapshot is its whole state, with typed notes of every hook

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Entry {
    amount: i64,
    /// Padding, to make states (and so snapshots) as large as a test needs.
    pad: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
struct LedgerState {
    total: i64,
    /// (seq_nr, amount) of every event applied, in order; a snapshot restored shows as its
    /// own entries.
    applied: Vec<(u64, i64)>,
    pad: String,
}

#[derive(Debug, Clone)]
enum Note {
    Recovered(u64),
    RecoveryFailed(RecoveryError),
    SnapshotSaved(SnapshotMetadata),
    SnapshotFailed(SnapshotError),
    Deleted(u64),
    DeleteFailed(DeleteError),
    Rejected(WriteRejection),
}

struct Ledger {
    persistence: PersistenceState<Self>,
    state: LedgerState,
    notes: mpsc::UnboundedSender<Note>,
}

impl Actor for Ledger {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        actix_persistence::start_recovery(self, ctx);
    }
}

impl PersistentActor for Ledger {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

impl EventSourced for Ledger {
    type Event = Entry;
    fn apply(&mut self, event: &Entry) {
        let seq_nr = self.last_seq_nr();
        self.state.total += event.amount;
        self.state.applied.push((seq_nr, event.amount));
        self.state.pad.push_str(&event.pad);
    }
    fn snapshotting() -> Option<Snapshotting<Self>> {
        Some(Snapshotting::json(
            |l: &Self| l.state.clone(),
            |l: &mut Self, s: LedgerState| l.state = s,
        ))
    }
    fn on_snapshot_saved(&mut self, m: &SnapshotMetadata, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::SnapshotSaved(m.clone()));
    }
    fn on_snapshot_failure(&mut self, cause: &SnapshotError, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::SnapshotFailed(cause.clone()));
    }
    fn on_events_deleted(&mut self, to: u64, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::Deleted(to));
    }
    fn on_delete_failure(&mut self, cause: &DeleteError, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::DeleteFailed(cause.clone()));
    }
    fn on_recovery_completed(&mut self, last: u64, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::Recovered(last));
    }
    fn on_recovery_failure(&mut self, cause: &RecoveryError, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::RecoveryFailed(cause.clone()));
    }
    fn on_persist_rejected(&mut self, cause: &WriteRejection, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::Rejected(cause.clone()));
    }
}

/// Persists one event per amount; replies (last seq_nr, total).
#[derive(Message)]
#[rtype(result = "PersistResult<(u64, i64)>")]
struct Add(Vec<i64>);

impl Handler<Add> for Ledger {
    type Result = PersistReply<(u64, i64)>;
    fn handle(&mut self, msg: Add, ctx: &mut Context<Self>) -> Self::Result {
        let mut last = PersistReply::ready((self.last_seq_nr(), self.state.total));
        for amount in msg.0 {
            let entry = Entry {
                amount,
                pad: String::new(),
            };
            last = self.persist(ctx, entry, |l, _, _| (l.last_seq_nr(), l.state.total));
        }
        last
    }
}

/// Persists one event of amount 0 carrying `pad`.
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct AddPad(String);

impl Handler<AddPad> for Ledger {
    type Result = PersistReply<u64>;
    fn handle(&mut self, msg: AddPad, ctx: &mut Context<Self>) -> Self::Result {
        let entry = Entry {
            amount: 0,
            pad: msg.0,
        };
        self.persist(ctx, entry, |l, _, _| l.last_seq_nr())
    }
}

/// Persists `amount`, and asks for a snapshot in the same handler, while that write is in
/// flight.
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct AddThenSnap(i64);

impl Handler<AddThenSnap> for Ledger {
    type Result = PersistReply<u64>;
    fn handle(&mut self, msg: AddThenSnap, ctx: &mut Context<Self>) -> Self::Result {
        let entry = Entry {
            amount: msg.0,
            pad: String::new(),
        };
        let reply = self.persist(ctx, entry, |l, _, _| l.last_seq_nr());
        self.save_snapshot(ctx);
        reply
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Snap;
impl Handler<Snap> for Ledger {
    type Result = ();
    fn handle(&mut self, _: Snap, ctx: &mut Context<Self>) {
        self.save_snapshot(ctx);
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct DeleteTo(u64);
impl Handler<DeleteTo> for Ledger {
    type Result = ();
    fn handle(&mut self, msg: DeleteTo, ctx: &mut Context<Self>) {
        self.delete_events_to(ctx, msg.0);
    }
}

#[derive(Message)]
#[rtype(result = "(u64, LedgerState)")]
struct Get;
impl Handler<Get> for Ledger {
    type Result = MessageResult<Get>;
    fn handle(&mut self, _: Get, _: &mut Context<Self>) -> Self::Result {
        MessageResult((self.last_seq_nr(), self.state.clone()))
    }
}

struct Started {
    addr: actix::Addr<Ledger>,
    notes: mpsc::UnboundedReceiver<Note>,
    stopped: tokio::sync::oneshot::Receiver<StopReason>,
}

impl Started {
    async fn note(&mut self) -> Note {
        within("a note of the actor", self.notes.recv())
            .await
            .expect("the actor dropped its note sender")
    }

    /// The next note that `pick` accepts, skipping the others.
    async fn note_where<T>(&mut self, mut pick: impl FnMut(Note) -> Option<T>) -> T {
        loop {
            if let Some(found) = pick(self.note().await) {
                return found;
            }
        }
    }

    async fn recovered(&mut self) -> u64 {
        match self.note().await {
            Note::Recovered(last) => last,
            other => panic!("expected a completed recovery, got {other:?}"),
        }
    }

    async fn recovery_failed(&mut self) -> RecoveryError {
        match self.note().await {
            Note::RecoveryFailed(error) => error,
            other => panic!("expected a failed recovery, got {other:?}"),
        }
    }

    async fn snapshot_saved(&mut self) -> SnapshotMetadata {
        self.note_where(|n| match n {
            Note::SnapshotSaved(m) => Some(m),
            Note::SnapshotFailed(e) => panic!("expected a saved snapshot, got {e:?}"),
            _ => None,
        })
        .await
    }

    async fn snapshot_failed(&mut self) -> SnapshotError {
        self.note_where(|n| match n {
            Note::SnapshotFailed(e) => Some(e),
            Note::SnapshotSaved(m) => panic!("expected a failed snapshot, got one saved: {m:?}"),
            _ => None,
        })
        .await
    }

    async fn add(&self, amounts: &[i64]) -> (u64, i64) {
        within("Add", self.addr.send(Add(amounts.to_vec())))
            .await
            .expect("mailbox")
            .expect("stored")
    }

    async fn get(&self) -> (u64, LedgerState) {
        within("Get", self.addr.send(Get)).await.expect("mailbox")
    }
}

fn start(p: &Persistence, pid: &str) -> Started {
    start_with(p, pid, |s| s)
}

fn start_with(
    p: &Persistence,
    pid: &str,
    f: impl FnOnce(PersistenceState<Ledger>) -> PersistenceState<Ledger>,
) -> Started {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut state = f(p.state(pid).expect("valid id"));
    let stopped = state.watch_stop();
    let addr = Ledger {
        persistence: state,
        state: LedgerState::default(),
        notes: tx,
    }
    .start();
    Started {
        addr,
        notes: rx,
        stopped,
    }
}

/// The state after events of `amounts` at 1, 2, ...
fn from_events(amounts: &[i64]) -> LedgerState {
    LedgerState {
        total: amounts.iter().sum(),
        applied: (1..).zip(amounts.iter().copied()).collect(),
        pad: String::new(),
    }
}

/// A snapshot whose state tells it apart: total `1000 * seq_nr`, one entry `(seq_nr, 0)`.
fn marker(seq_nr: u64) -> SerializedSnapshot {
    SerializedSnapshot::json(&LedgerState {
        total: 1000 * seq_nr as i64,
        applied: vec![(seq_nr, 0)],
        pad: String::new(),
    })
    .expect("json")
}

async fn save(p: &Persistence, pid: &str, seq_nr: u64, timestamp: i64, s: SerializedSnapshot) {
    let metadata = SnapshotMetadata {
        persistence_id: pid.into(),
        seq_nr,
        timestamp,
    };
    within("save", p.snapshot_store().save(metadata, s))
        .await
        .expect("saved");
}

async fn load(
    p: &Persistence,
    pid: &str,
    criteria: SnapshotSelectionCriteria,
) -> Option<SelectedSnapshot> {
    within("load", p.snapshot_store().load(pid, criteria))
        .await
        .expect("load")
}

/// The sequence numbers of every snapshot of `pid`, newest first.
async fn snapshot_seq_nrs(p: &Persistence, pid: &str) -> Vec<u64> {
    let mut found = Vec::new();
    let mut criteria = SnapshotSelectionCriteria::latest();
    while let Some(s) = load(p, pid, criteria).await {
        found.push(s.metadata.seq_nr);
        if s.metadata.seq_nr == 0 {
            break;
        }
        criteria = SnapshotSelectionCriteria::up_to(s.metadata.seq_nr - 1);
    }
    found
}

/// Runs one SQL statement on the backend's database, behind the library's back.
async fn sql(b: &Backend, statement: &str) {
    match b.kind {
        Kind::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&b.sqlite_url())
                .await
                .expect("connect");
            sqlx::query(statement)
                .execute(&mut c)
                .await
                .expect("statement");
            c.close().await.expect("close");
        }
        Kind::Postgres => {
            let mut c = sqlx::PgConnection::connect(&b.pg_url())
                .await
                .expect("connect");
            sqlx::query(statement)
                .execute(&mut c)
                .await
                .expect("statement");
            c.close().await.expect("close");
        }
        Kind::InMemory => panic!("no SQL on the in-memory store"),
    }
}

// ---------------------------------------------------------------------------------------------
// A snapshot that no longer reads back

/// How a stored snapshot row is spoiled.
#[derive(Debug, Clone, Copy)]
enum Spoil {
    /// The payload is no JSON at all.
    Garbage,
    /// The payload is JSON of another type (the state type changed since it was saved).
    OtherType,
    /// The serializer id names a serializer nobody registered.
    UnknownSerializer,
    /// The serializer id is not a u32 (negative).
    NegativeSerializer,
}

/// Spoils the snapshot of `pid` at `seq_nr` in place: by SQL on the SQL stores, by saving over
/// it on the in-memory store.
async fn spoil(b: &Backend, p: &Persistence, pid: &str, seq_nr: u64, how: Spoil) {
    if b.kind == Kind::InMemory {
        let mut s = load(p, pid, SnapshotSelectionCriteria::up_to(seq_nr))
            .await
            .expect("a snapshot to spoil");
        match how {
            Spoil::Garbage => s.snapshot.payload = b"{not json".to_vec(),
            Spoil::OtherType => s.snapshot.payload = b"\"a string\"".to_vec(),
            Spoil::UnknownSerializer => s.snapshot.serializer_id = 77,
            // The in-memory store holds a u32: nothing negative to spoil it with.
            Spoil::NegativeSerializer => s.snapshot.serializer_id = u32::MAX,
        }
        save(p, pid, seq_nr, s.metadata.timestamp, s.snapshot).await;
        return;
    }
    let bytes = |hex: &str| match b.kind {
        Kind::Postgres => format!("decode('{hex}', 'hex')"),
        _ => format!("X'{hex}'"),
    };
    let set = match how {
        Spoil::Garbage => format!("payload = {}", bytes("7b6e6f74206a736f6e")),
        Spoil::OtherType => format!("payload = {}", bytes("226120737472696e6722")),
        Spoil::UnknownSerializer => "serializer_id = 77".to_owned(),
        Spoil::NegativeSerializer => "serializer_id = -5".to_owned(),
    };
    sql(
        b,
        &format!("UPDATE snapshot SET {set} WHERE persistence_id = '{pid}' AND seq_nr = {seq_nr}"),
    )
    .await;
}

/// A snapshot row that no longer reads back (edited by SQL, or of a state type that changed)
/// fails the recovery of the next "process" with `RecoveryError::Snapshot`, and the actor
/// stops without answering a command: never a state started empty or from fewer events (Akka
/// stops the actor on a failed snapshot load because events under it may be deleted,
/// akka/akka-core#21842 and #21848; the way out is recovering without snapshots,
/// akka/akka-core#30077, which replays the events while they are all there).
async fn a_spoiled_snapshot_row_fails_the_next_recovery_and_skipping_it_replays_the_events(
    kind: Kind,
) {
    let b = Backend::new(kind).await;
    let pid = "Ledger|spoiled";
    let p = b.open().await;
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 0);
    a.add(&[1, 2, 3]).await;
    a.addr.do_send(Snap);
    assert_eq!(a.snapshot_saved().await.seq_nr, 3);
    a.add(&[4]).await;
    drop(a);
    let good = load(&p, pid, SnapshotSelectionCriteria::latest())
        .await
        .expect("the snapshot at 3");
    within("shutdown", p.shutdown()).await;

    for how in [
        Spoil::Garbage,
        Spoil::OtherType,
        Spoil::UnknownSerializer,
        Spoil::NegativeSerializer,
    ] {
        let p = b.open().await;
        save(&p, pid, 3, good.metadata.timestamp, good.snapshot.clone()).await;
        spoil(&b, &p, pid, 3, how).await;
        within("shutdown", p.shutdown()).await;

        // A new process over the spoiled row.
        let p = b.open().await;
        let mut a = start(&p, pid);
        match a.recovery_failed().await {
            RecoveryError::Snapshot {
                persistence_id,
                reason,
                ..
            } => {
                assert_eq!(persistence_id, pid, "{how:?}");
                assert!(reason.contains("snapshot"), "{how:?}: {reason}");
            }
            other => panic!("{kind:?} {how:?}: expected RecoveryError::Snapshot, got {other:?}"),
        }
        assert_eq!(
            within("stop", &mut a.stopped).await.expect("stop reason"),
            StopReason::RecoveryFailure,
            "{how:?}"
        );
        assert!(
            a.addr.send(Get).await.is_err(),
            "{how:?}: a command was answered after the failed recovery"
        );

        // Skipping snapshots replays every event: all are still there.
        let mut a = start_with(&p, pid, |s| {
            s.with_recovery(Recovery {
                from_snapshot: SnapshotSelectionCriteria::none(),
                ..Recovery::latest()
            })
        });
        assert_eq!(a.recovered().await, 4, "{how:?}");
        assert_eq!(a.get().await, (4, from_events(&[1, 2, 3, 4])), "{how:?}");
        drop(a);
        within("shutdown", p.shutdown()).await;
    }
}

/// Once the events under a snapshot are deleted, no recovery that skips it may start from
/// what is left: skipping snapshots (`SnapshotSelectionCriteria::none`, the documented way
/// around a snapshot that does not read back, akka/akka-core#30077, whose docs warn it "should
/// typically not be used when events have been deleted", akka/akka-core#26274, and Akka.NET's
/// `snapshot-is-optional`, akkadotnet/akka.net#7444) fails with `MissingEvents` naming the
/// hole, as does a spoiled snapshot; `Recovery::none()` starts empty on purpose but continues
/// the sequence numbers and refuses to snapshot its partial state.
async fn recoveries_that_skip_a_snapshot_over_deleted_events_fail_with_missing_events(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Ledger|skip-deleted";
    let p = b.open().await;
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 0);
    a.add(&[1, 2, 3, 4]).await;
    a.addr.do_send(Snap);
    assert_eq!(a.snapshot_saved().await.seq_nr, 4);
    a.addr.do_send(DeleteTo(4));
    assert!(matches!(a.note().await, Note::Deleted(4)));
    a.add(&[5]).await;
    drop(a);
    within("shutdown", p.shutdown()).await;

    let p = b.open().await;
    let skip = Recovery {
        from_snapshot: SnapshotSelectionCriteria::none(),
        ..Recovery::latest()
    };
    let mut a = start_with(&p, pid, |s| s.with_recovery(skip));
    match a.recovery_failed().await {
        RecoveryError::MissingEvents {
            snapshot_seq_nr,
            from,
            to,
            ..
        } => assert_eq!((snapshot_seq_nr, from, to), (None, 1, 4), "{kind:?}"),
        other => panic!("{kind:?}: expected MissingEvents, got {other:?}"),
    }

    // Recovery::none(): empty on purpose, the sequence goes on, no snapshot of it.
    let mut a = start_with(&p, pid, |s| s.with_recovery(Recovery::none()));
    assert_eq!(a.recovered().await, 5);
    assert_eq!(a.get().await, (5, LedgerState::default()));
    a.addr.do_send(Snap);
    assert!(
        matches!(
            a.snapshot_failed().await,
            SnapshotError::NotSupported { .. }
        ),
        "{kind:?}"
    );
    assert_eq!(a.add(&[6]).await, (6, 6));
    drop(a);
    assert_eq!(snapshot_seq_nrs(&p, pid).await, vec![4]);

    // The snapshot spoiled: the full recovery fails at it, never replays 5 and 6 alone.
    spoil(&b, &p, pid, 4, Spoil::Garbage).await;
    let mut a = start(&p, pid);
    assert!(
        matches!(a.recovery_failed().await, RecoveryError::Snapshot { .. }),
        "{kind:?}"
    );
    within("shutdown", p.shutdown()).await;
}

// ---------------------------------------------------------------------------------------------
// Selection by time and by sequence number

/// Recovery honours every bound of its snapshot criteria, by time too, at the bounds
/// themselves: with snapshots at 3 (timestamp 1000) and 6 (timestamp 2000) over events 1 to
/// 7, `max_timestamp` 1999 starts at 3 and 2000 at 6, `min_timestamp` 2001 at none; once the
/// events up to 6 are deleted, a criteria that selects 3 fails with the hole 4 to 6
/// (akka/akka-persistence-inmemory#30: max timestamp ignored; apache/pekko-persistence-jdbc#591:
/// min bounds ignored by load and delete).
async fn recovery_selects_snapshots_by_time_at_the_bounds_and_never_over_a_hole(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Ledger|by-time";
    let p = b.open().await;
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 0);
    let amounts = [1, 2, 3, 4, 5, 6, 7];
    a.add(&amounts).await;
    save(&p, pid, 3, 1000, marker(3)).await;
    save(&p, pid, 6, 2000, marker(6)).await;

    let by_time = |max_timestamp: i64, min_timestamp: i64| Recovery {
        from_snapshot: SnapshotSelectionCriteria {
            max_timestamp,
            min_timestamp,
            ..SnapshotSelectionCriteria::latest()
        },
        ..Recovery::latest()
    };
    let after = |seq_nr: u64| LedgerState {
        total: 1000 * seq_nr as i64 + amounts[seq_nr as usize..].iter().sum::<i64>(),
        applied: std::iter::once((seq_nr, 0))
            .chain((seq_nr + 1..=7).map(|n| (n, n as i64)))
            .collect(),
        pad: String::new(),
    };
    let cases = [
        (by_time(1999, 0), after(3)),
        (by_time(2000, 0), after(6)),
        (by_time(i64::MAX, 1000), after(6)),
        (by_time(1000, 1000), after(3)),
        (by_time(i64::MAX, 2001), from_events(&amounts)),
        (by_time(999, 0), from_events(&amounts)),
    ];
    for (recovery, state) in cases {
        let what = format!("{kind:?} {:?}", recovery.from_snapshot);
        let mut r = start_with(&p, pid, |s| s.with_recovery(recovery));
        assert_eq!(r.recovered().await, 7, "{what}");
        assert_eq!(r.get().await.1, state, "{what}");
    }

    // The last recovery owns the id now (the first actor is fenced): delete through it.
    drop(a);
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 7);
    a.addr.do_send(DeleteTo(6));
    let deleted = a.note().await;
    assert!(matches!(deleted, Note::Deleted(6)), "{kind:?}: {deleted:?}");
    drop(a);
    within("shutdown", p.shutdown()).await;
    let p = b.open().await;
    let mut r = start_with(&p, pid, |s| s.with_recovery(by_time(1999, 0)));
    match r.recovery_failed().await {
        RecoveryError::MissingEvents {
            snapshot_seq_nr,
            from,
            to,
            ..
        } => assert_eq!((snapshot_seq_nr, from, to), (Some(3), 4, 6), "{kind:?}"),
        other => panic!("{kind:?}: expected MissingEvents, got {other:?}"),
    }
    let mut r = start(&p, pid);
    assert_eq!(r.recovered().await, 7);
    assert_eq!(r.get().await.1, after(6));
    within("shutdown", p.shutdown()).await;
}

/// Deleting snapshots by criteria deletes exactly those inside every bound, inclusive, and
/// deleting one by a stale timestamp deletes nothing: of snapshots at 1 to 6 (timestamp 100
/// per sequence number), (seq 2..=4, timestamp 200..=300) deletes 2 and 3 only, a bound one
/// below the first snapshot deletes nothing (akka/akka-core#18112: timestamps ignored by a
/// criteria delete; apache/pekko-persistence-jdbc#591; akka/akka-core#15955).
async fn deleting_snapshots_by_criteria_never_deletes_more_than_asked(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Ledger|delete-bounds";
    let other = "Ledger|delete-bounds-other";
    let p = b.open().await;
    for seq_nr in 1..=6 {
        save(&p, pid, seq_nr, 100 * seq_nr as i64, marker(seq_nr)).await;
        save(&p, other, seq_nr, 100 * seq_nr as i64, marker(seq_nr)).await;
    }
    let store = p.snapshot_store();
    let delete = |criteria: SnapshotSelectionCriteria| async move {
        within("delete_matching", store.delete_matching(pid, criteria))
            .await
            .expect("deleted");
    };
    delete(SnapshotSelectionCriteria {
        max_seq_nr: 4,
        min_seq_nr: 2,
        max_timestamp: 300,
        min_timestamp: 200,
    })
    .await;
    assert_eq!(
        snapshot_seq_nrs(&p, pid).await,
        vec![6, 5, 4, 1],
        "{kind:?}"
    );
    delete(SnapshotSelectionCriteria::up_to(0)).await;
    delete(SnapshotSelectionCriteria {
        max_timestamp: 99,
        ..SnapshotSelectionCriteria::latest()
    })
    .await;
    delete(SnapshotSelectionCriteria {
        min_seq_nr: 7,
        ..SnapshotSelectionCriteria::latest()
    })
    .await;
    delete(SnapshotSelectionCriteria {
        min_timestamp: 601,
        ..SnapshotSelectionCriteria::latest()
    })
    .await;
    assert_eq!(
        snapshot_seq_nrs(&p, pid).await,
        vec![6, 5, 4, 1],
        "{kind:?}"
    );
    let stale = SnapshotMetadata {
        persistence_id: pid.into(),
        seq_nr: 5,
        timestamp: 499,
    };
    within("delete", store.delete(&stale))
        .await
        .expect("deleted");
    assert_eq!(
        snapshot_seq_nrs(&p, pid).await,
        vec![6, 5, 4, 1],
        "{kind:?}"
    );
    within(
        "delete",
        store.delete(&SnapshotMetadata {
            timestamp: 500,
            ..stale
        }),
    )
    .await
    .expect("deleted");
    assert_eq!(snapshot_seq_nrs(&p, pid).await, vec![6, 4, 1], "{kind:?}");
    assert_eq!(
        snapshot_seq_nrs(&p, other).await,
        vec![6, 5, 4, 3, 2, 1],
        "{kind:?}: another id's snapshots were touched"
    );
    within("shutdown", p.shutdown()).await;
}

// ---------------------------------------------------------------------------------------------
// Saving at one sequence number twice, and many times at once

/// A second snapshot at the same sequence number replaces the first on every store (an
/// upsert, never a duplicate-key failure), also when twenty saves at one sequence number run
/// at once; a delete naming the first one's timestamp leaves the second; the next process
/// recovers the second (akkadotnet/Akka.Persistence.Sql#432: rapid saves at one seq_nr race;
/// scullxbones/akka-persistence-mongo#108 and akka/akka-persistence-jdbc#25: duplicate key
/// errors on a second save).
async fn a_second_snapshot_at_one_seq_nr_replaces_the_first_also_when_saved_at_once(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Ledger|upsert";
    let p = b.open().await;
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 0);
    a.add(&[1, 2, 3]).await;
    save(&p, pid, 3, 1, marker(3)).await;
    for _ in 0..20 {
        a.addr.do_send(Snap);
    }
    for _ in 0..20 {
        assert_eq!(a.snapshot_saved().await.seq_nr, 3, "{kind:?}");
    }
    drop(a);
    assert_eq!(snapshot_seq_nrs(&p, pid).await, vec![3]);
    let first = SnapshotMetadata {
        persistence_id: pid.into(),
        seq_nr: 3,
        timestamp: 1,
    };
    within("delete", p.snapshot_store().delete(&first))
        .await
        .expect("deleted");
    let kept = load(&p, pid, SnapshotSelectionCriteria::latest())
        .await
        .expect("the second snapshot at 3");
    assert!(kept.metadata.timestamp > 1, "{kind:?}: {:?}", kept.metadata);
    within("shutdown", p.shutdown()).await;

    let p = b.open().await;
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 3);
    assert_eq!(a.get().await.1, from_events(&[1, 2, 3]), "{kind:?}");
    assert_eq!(a.add(&[4]).await, (4, 10));
    within("shutdown", p.shutdown()).await;
}

// ---------------------------------------------------------------------------------------------
// Snapshots while a persist is in flight

/// A snapshot asked for in the handler that persists, while that write is in flight, holds
/// the state after the handler: without the unacknowledged event, at the sequence number before
/// it. The next process replays the event after the snapshot (nactio/nact#47: a snapshot one
/// state behind; akka/akka-core#32462: the snapshot predicate saw the state before the
/// event).
async fn a_snapshot_asked_for_with_a_write_in_flight_holds_the_state_without_it(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Ledger|in-flight";
    let p = b.open().await;
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 0);
    a.add(&[1, 2]).await;
    let reply = within("AddThenSnap", a.addr.send(AddThenSnap(5)))
        .await
        .expect("mailbox")
        .expect("stored");
    assert_eq!(reply, 3);
    assert_eq!(a.snapshot_saved().await.seq_nr, 2, "{kind:?}");
    let saved = load(&p, pid, SnapshotSelectionCriteria::latest())
        .await
        .expect("the snapshot");
    assert_eq!(saved.metadata.seq_nr, 2);
    assert_eq!(
        saved.json::<LedgerState>().expect("json"),
        from_events(&[1, 2]),
        "{kind:?}: the snapshot holds an event it does not count"
    );
    drop(a);
    within("shutdown", p.shutdown()).await;

    let p = b.open().await;
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 3);
    assert_eq!(a.get().await.1, from_events(&[1, 2, 5]), "{kind:?}");
    within("shutdown", p.shutdown()).await;
}

// ---------------------------------------------------------------------------------------------
// Retention

/// Keep-N retention across restarts: a snapshot every 2 events keeping 2 deletes the events
/// only up to the older kept snapshot, in every process; the last process recovers the state
/// of all events and continues the sequence; with the newest snapshot gone it falls back to
/// the older one (akka/akka-core#26584: incorrect snapshot deletion algorithm;
/// akka/akka-core#27636).
async fn keep_n_retention_across_restarts_deletes_only_up_to_the_oldest_kept(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Ledger|keep";
    let policy = SnapshotPolicy::every(2).keep(2).delete_events(true);
    let mut next = 1i64;
    for process in 0..3 {
        let p = b.open().await;
        let mut a = start_with(&p, pid, |s| s.with_snapshot_policy(policy));
        assert_eq!(a.recovered().await, (next - 1) as u64, "process {process}");
        for _ in 0..3 {
            let (seq_nr, _) = a.add(&[next]).await;
            assert_eq!(seq_nr, next as u64);
            if seq_nr % 2 == 0 {
                assert_eq!(a.snapshot_saved().await.seq_nr, seq_nr, "{kind:?}");
                if seq_nr >= 4 {
                    let deleted = a
                        .note_where(|n| match n {
                            Note::Deleted(to) => Some(to),
                            Note::DeleteFailed(e) => panic!("{e:?}"),
                            Note::SnapshotFailed(e) => panic!("{e:?}"),
                            _ => None,
                        })
                        .await;
                    assert_eq!(
                        deleted,
                        seq_nr - 2,
                        "{kind:?}: deleted beyond the oldest kept"
                    );
                }
            }
            next += 1;
        }
        drop(a);
        within("shutdown", p.shutdown()).await;
    }
    // 9 events: snapshots at 2, 4, 6, 8; kept 8 and 6; events after 6 stored.
    let p = b.open().await;
    assert_eq!(snapshot_seq_nrs(&p, pid).await, vec![8, 6], "{kind:?}");
    assert_eq!(
        adversarial::stored_seq_nrs(&p, pid, 0, u64::MAX).await,
        vec![7, 8, 9],
        "{kind:?}"
    );
    let all: Vec<i64> = (1..=9).collect();
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 9);
    assert_eq!(a.get().await.1, from_events(&all), "{kind:?}");
    assert_eq!(a.add(&[10]).await.0, 10);
    drop(a);

    let newest = SnapshotMetadata {
        persistence_id: pid.into(),
        seq_nr: 8,
        timestamp: 0,
    };
    within("delete", p.snapshot_store().delete(&newest))
        .await
        .expect("deleted");
    within("shutdown", p.shutdown()).await;
    let p = b.open().await;
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 10);
    let all: Vec<i64> = (1..=10).collect();
    assert_eq!(a.get().await.1, from_events(&all), "{kind:?}");
    within("shutdown", p.shutdown()).await;
}

// ---------------------------------------------------------------------------------------------
// Large snapshots

/// A snapshot larger than any one event may be (12 MiB of state, above the 10 MiB payload
/// limit of events) is saved, survives a restart byte for byte and is the only source of the
/// state once the events under it are deleted (akka/akka-persistence-cassandra#710: the
/// maximum snapshot size undocumented; akka/akka-persistence-jdbc#215: large snapshots all
/// loaded at once).
async fn a_snapshot_larger_than_the_event_payload_limit_round_trips_across_a_restart(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Ledger|large";
    let half = 6 * 1024 * 1024;
    let p = b.open().await;
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 0);
    for c in ['x', 'y'] {
        within("AddPad", a.addr.send(AddPad(c.to_string().repeat(half))))
            .await
            .expect("mailbox")
            .expect("stored");
    }
    a.addr.do_send(Snap);
    assert_eq!(a.snapshot_saved().await.seq_nr, 2, "{kind:?}");
    a.addr.do_send(DeleteTo(2));
    assert!(matches!(a.note().await, Note::Deleted(2)));
    drop(a);
    within("shutdown", p.shutdown()).await;

    let p = b.open().await;
    let size = load(&p, pid, SnapshotSelectionCriteria::latest())
        .await
        .expect("the snapshot")
        .snapshot
        .payload
        .len();
    assert!(
        size > actix_persistence::limits::MAX_PAYLOAD_BYTES,
        "{size}"
    );
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 2);
    let (_, state) = a.get().await;
    assert_eq!(state.pad.len(), 2 * half);
    assert!(state.pad.starts_with('x') && state.pad.ends_with('y'));
    assert_eq!(state.pad.matches('x').count(), half);
    assert_eq!(state.applied, vec![(1, 0), (2, 0)]);
    within("shutdown", p.shutdown()).await;
}

on_every_store!(
    a_spoiled_snapshot_row_fails_the_next_recovery_and_skipping_it_replays_the_events,
    recoveries_that_skip_a_snapshot_over_deleted_events_fail_with_missing_events,
    recovery_selects_snapshots_by_time_at_the_bounds_and_never_over_a_hole,
    deleting_snapshots_by_criteria_never_deletes_more_than_asked,
    a_second_snapshot_at_one_seq_nr_replaces_the_first_also_when_saved_at_once,
    a_snapshot_asked_for_with_a_write_in_flight_holds_the_state_without_it,
    keep_n_retention_across_restarts_deletes_only_up_to_the_oldest_kept,
    a_snapshot_larger_than_the_event_payload_limit_round_trips_across_a_restart,
);

// ---------------------------------------------------------------------------------------------
// The snapshot store down, or hanging, while actors run

/// The in-memory snapshot store behind a switch: down, every call fails; hanging, every call
/// waits forever.
struct Switch {
    inner: InMemorySnapshotStore,
    down: Arc<AtomicBool>,
    hang: Arc<AtomicBool>,
}

#[derive(Debug, thiserror::Error)]
#[error("injected: the snapshot store is down")]
struct StoreDown;

impl Switch {
    async fn check(&self, operation: &'static str) -> Result<(), SnapshotError> {
        if self.hang.load(Ordering::SeqCst) {
            futures::future::pending::<()>().await;
        }
        if self.down.load(Ordering::SeqCst) {
            return Err(SnapshotError::storage(operation, StoreDown));
        }
        Ok(())
    }
}

#[async_trait]
impl SnapshotStore for Switch {
    async fn load(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        self.check("load").await?;
        self.inner.load(pid, criteria).await
    }

    async fn save(
        &self,
        metadata: SnapshotMetadata,
        snapshot: SerializedSnapshot,
    ) -> Result<(), SnapshotError> {
        self.check("save").await?;
        self.inner.save(metadata, snapshot).await
    }

    async fn delete(&self, metadata: &SnapshotMetadata) -> Result<(), SnapshotError> {
        self.check("delete").await?;
        self.inner.delete(metadata).await
    }

    async fn delete_matching(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError> {
        self.check("delete").await?;
        self.inner.delete_matching(pid, criteria).await
    }
}

/// A database whose snapshot store can be taken down while actors run: the SQL stores lose
/// their snapshot table (renamed away), the in-memory one is switched off.
struct Site {
    b: Backend,
    mem: Option<(InMemoryJournal, InMemorySnapshotStore)>,
    down: Arc<AtomicBool>,
    hang: Arc<AtomicBool>,
}

impl Site {
    async fn new(kind: Kind) -> Site {
        Site::on(Backend::new(kind).await)
    }

    fn on(b: Backend) -> Site {
        let mem = (b.kind == Kind::InMemory)
            .then(|| (InMemoryJournal::new(), InMemorySnapshotStore::new()));
        Site {
            b,
            mem,
            down: Arc::default(),
            hang: Arc::default(),
        }
    }

    async fn open(&self) -> Persistence {
        match &self.mem {
            Some((journal, snapshots)) => {
                let switch = Switch {
                    inner: snapshots.clone(),
                    down: Arc::clone(&self.down),
                    hang: Arc::clone(&self.hang),
                };
                Persistence::start_with_stores(
                    self.b.settings(),
                    Arc::new(journal.clone()),
                    Arc::new(switch),
                )
                .expect("start persistence")
                .with_query_store(Arc::new(journal.clone()))
            }
            None => self.b.open().await,
        }
    }

    async fn take_down(&self) {
        match self.b.kind {
            Kind::InMemory => self.down.store(true, Ordering::SeqCst),
            _ => sql(&self.b, "ALTER TABLE snapshot RENAME TO snapshot_away").await,
        }
    }

    async fn bring_back(&self) {
        match self.b.kind {
            Kind::InMemory => self.down.store(false, Ordering::SeqCst),
            _ => sql(&self.b, "ALTER TABLE snapshot_away RENAME TO snapshot").await,
        }
    }
}

/// The snapshot store down: a save fails with `SnapshotError::Storage` naming the save, the
/// actor goes on persisting (a snapshot is an optimisation), a snapshot policy's saves fail
/// the same way; a recovery meanwhile fails with `RecoveryError::Snapshot` (never a state
/// from the events alone: some may be deleted); with the store back, the next process recovers
/// every event after the last snapshot saved (akkadotnet/akka.net#3870: the snapshot store's
/// failures restarted the actor; pawelkaczor/akka-ddd#30: looping save failures;
/// akka/akka-core#24637: no way to learn a save failed).
async fn a_snapshot_store_down_fails_saves_typed_the_actor_goes_on_and_recovery_fails(kind: Kind) {
    let site = Site::new(kind).await;
    let pid = "Ledger|store-down";
    let p = site.open().await;
    let policy = SnapshotPolicy::every(2).keep(1).delete_events(true);
    let mut a = start_with(&p, pid, |s| s.with_snapshot_policy(policy));
    assert_eq!(a.recovered().await, 0);
    a.add(&[1]).await;
    a.add(&[2]).await;
    assert_eq!(a.snapshot_saved().await.seq_nr, 2);
    assert!(matches!(a.note().await, Note::Deleted(2)));

    site.take_down().await;
    a.add(&[3]).await;
    a.addr.do_send(Snap);
    match a.snapshot_failed().await {
        SnapshotError::Storage { operation, .. } => assert_eq!(operation, "save", "{kind:?}"),
        other => panic!("{kind:?}: expected a storage error, got {other:?}"),
    }
    // The policy's own save at 4 fails the same way; the events stay.
    a.add(&[4]).await;
    match a.snapshot_failed().await {
        SnapshotError::Storage { operation, .. } => assert_eq!(operation, "save", "{kind:?}"),
        other => panic!("{kind:?}: expected a storage error, got {other:?}"),
    }
    assert_eq!(a.add(&[5]).await, (5, 15));
    assert_eq!(a.get().await, (5, from_events(&[1, 2, 3, 4, 5])));
    drop(a);
    within("shutdown", p.shutdown()).await;

    let p = site.open().await;
    let mut a = start(&p, pid);
    match a.recovery_failed().await {
        RecoveryError::Snapshot { persistence_id, .. } => assert_eq!(persistence_id, pid),
        other => panic!("{kind:?}: expected RecoveryError::Snapshot, got {other:?}"),
    }
    assert_eq!(
        within("stop", &mut a.stopped).await.expect("stop reason"),
        StopReason::RecoveryFailure
    );
    within("shutdown", p.shutdown()).await;

    site.bring_back().await;
    let p = site.open().await;
    assert_eq!(snapshot_seq_nrs(&p, pid).await, vec![2]);
    assert_eq!(
        adversarial::stored_seq_nrs(&p, pid, 0, u64::MAX).await,
        vec![3, 4, 5]
    );
    let mut a = start_with(&p, pid, |s| s.with_snapshot_policy(policy));
    assert_eq!(a.recovered().await, 5);
    assert_eq!(a.get().await.1, from_events(&[1, 2, 3, 4, 5]), "{kind:?}");
    // Saves work again, and retention with them.
    a.add(&[6]).await;
    assert_eq!(a.snapshot_saved().await.seq_nr, 6);
    assert!(matches!(a.note().await, Note::Deleted(6)));
    within("shutdown", p.shutdown()).await;
}

on_every_store!(a_snapshot_store_down_fails_saves_typed_the_actor_goes_on_and_recovery_fails);

/// A snapshot store that does not answer (a PostgreSQL table locked by another session; an
/// in-memory store that hangs): the save fails with `SnapshotError::Timeout` after
/// `snapshot-store.call-timeout` while the actor goes on persisting, and a recovery meanwhile
/// fails instead of waiting forever (akkadotnet/akka.net#3665: "Recovery timed out, didn't get
/// snapshot", and the store never recovered once the database was back). Not on SQLite: its one
/// writer connection serves the journal and the snapshot store, so a database locked by
/// another connection holds both.
async fn a_hanging_snapshot_store_times_out_saves_and_recoveries(kind: Kind) {
    let b = Backend::new(kind)
        .await
        .with_env("ACTIX_PERSISTENCE__SNAPSHOT_STORE__CALL_TIMEOUT", "300ms");
    let site = Site::on(b);
    let pid = "Ledger|hanging";
    let p = site.open().await;
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 0);
    a.add(&[1]).await;

    // Hang the store: a lock held by another session, or the switch.
    let mut locker = None;
    match kind {
        Kind::Postgres => {
            let mut c = sqlx::PgConnection::connect(&site.b.pg_url())
                .await
                .expect("connect");
            sqlx::query("BEGIN").execute(&mut c).await.expect("begin");
            sqlx::query("LOCK TABLE snapshot IN ACCESS EXCLUSIVE MODE")
                .execute(&mut c)
                .await
                .expect("lock");
            locker = Some(c);
        }
        _ => site.hang.store(true, Ordering::SeqCst),
    }
    a.addr.do_send(Snap);
    match a.snapshot_failed().await {
        SnapshotError::Timeout { operation, .. } => assert_eq!(operation, "save", "{kind:?}"),
        other => panic!("{kind:?}: expected a timeout, got {other:?}"),
    }
    assert_eq!(a.add(&[2]).await, (2, 3));
    let mut r = start(&p, "Ledger|hanging-other");
    match r.recovery_failed().await {
        RecoveryError::Snapshot { reason, .. } => {
            assert!(reason.contains("did not answer"), "{kind:?}: {reason}")
        }
        RecoveryError::Timeout { .. } => {}
        other => panic!("{kind:?}: expected a failed recovery, got {other:?}"),
    }

    // Released: saves work again.
    match locker {
        Some(mut c) => {
            sqlx::query("COMMIT").execute(&mut c).await.expect("commit");
            c.close().await.expect("close");
        }
        None => site.hang.store(false, Ordering::SeqCst),
    }
    a.addr.do_send(Snap);
    assert_eq!(a.snapshot_saved().await.seq_nr, 2, "{kind:?}");
    drop(a);
    within("shutdown", p.shutdown()).await;
    let p = site.open().await;
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 2);
    assert_eq!(a.get().await.1, from_events(&[1, 2]));
    within("shutdown", p.shutdown()).await;
}

mod a_hanging_snapshot_store_times_out_saves_and_recoveries {
    #[actix::test]
    async fn in_memory() {
        super::a_hanging_snapshot_store_times_out_saves_and_recoveries(super::Kind::InMemory).await
    }

    #[actix::test]
    #[cfg_attr(
        not(has_database_url),
        ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
    )]
    async fn postgres() {
        super::a_hanging_snapshot_store_times_out_saves_and_recoveries(super::Kind::Postgres).await
    }
}

// ---------------------------------------------------------------------------------------------
// The snapshot store in another database than the journal

async fn count_sqlite(url: &str, statement: &str) -> i64 {
    let mut c = sqlx::SqliteConnection::connect(url).await.expect("connect");
    let n = sqlx::query_scalar(statement)
        .fetch_one(&mut c)
        .await
        .expect("count");
    c.close().await.expect("close");
    n
}

async fn count_pg(url: &str, statement: &str) -> i64 {
    let mut c = sqlx::PgConnection::connect(url).await.expect("connect");
    let n = sqlx::query_scalar(statement)
        .fetch_one(&mut c)
        .await
        .expect("count");
    c.close().await.expect("close");
    n
}

/// `snapshot-store.plugin = "postgres"` under a SQLite journal: snapshots go to PostgreSQL and
/// only there, events to the SQLite file and only there; the next process recovers from the
/// PostgreSQL snapshot with the events under it deleted from SQLite, and the sequence goes on
/// (akkadotnet/Akka.Persistence.MongoDB#43: the snapshots were not where the configuration
/// said). The reverse, a shared PostgreSQL journal under a process-local SQLite snapshot
/// store, is refused at startup naming both settings.
#[actix::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn a_snapshot_store_in_another_database_than_the_journal_holds_every_snapshot() {
    let pg = Backend::new(Kind::Postgres).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite_url = format!("sqlite:{}", dir.path().join("journal.db").display());
    let settings = |journal: &str, snapshots: &str| {
        Settings::loader()
            .env_vars([
                (
                    "ACTIX_PERSISTENCE__JOURNAL__PLUGIN".to_owned(),
                    journal.to_owned(),
                ),
                (
                    "ACTIX_PERSISTENCE__SNAPSHOT_STORE__PLUGIN".to_owned(),
                    snapshots.to_owned(),
                ),
                (
                    "ACTIX_PERSISTENCE__JOURNAL__SQLITE__URL".to_owned(),
                    sqlite_url.clone(),
                ),
                (
                    "ACTIX_PERSISTENCE__JOURNAL__POSTGRES__URL".to_owned(),
                    pg.pg_url(),
                ),
            ])
            .load()
    };
    let pid = "Ledger|elsewhere";
    let p = Persistence::start_with(settings("sqlite", "postgres").expect("valid settings"))
        .await
        .expect("start");
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 0);
    a.add(&[1, 2, 3]).await;
    a.addr.do_send(Snap);
    assert_eq!(a.snapshot_saved().await.seq_nr, 3);
    a.addr.do_send(DeleteTo(3));
    assert!(matches!(a.note().await, Note::Deleted(3)));
    a.add(&[4]).await;
    drop(a);
    within("shutdown", p.shutdown()).await;

    let in_pg = "SELECT COUNT(*) FROM snapshot";
    assert_eq!(count_pg(&pg.pg_url(), in_pg).await, 1);
    assert_eq!(count_sqlite(&sqlite_url, in_pg).await, 0);
    assert_eq!(
        count_sqlite(&sqlite_url, "SELECT COUNT(*) FROM journal").await,
        1
    );
    assert_eq!(
        count_pg(&pg.pg_url(), "SELECT COUNT(*) FROM journal").await,
        0
    );

    let p = Persistence::start_with(settings("sqlite", "postgres").expect("valid settings"))
        .await
        .expect("start");
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 4);
    assert_eq!(a.get().await.1, from_events(&[1, 2, 3, 4]));
    assert_eq!(a.add(&[5]).await, (5, 15));
    drop(a);
    within("shutdown", p.shutdown()).await;

    let refused = settings("postgres", "sqlite")
        .expect_err("a shared journal over a process-local snapshot store")
        .to_string();
    assert!(
        refused.contains("snapshot-store.plugin") && refused.contains("journal.plugin"),
        "{refused}"
    );
}

// ---------------------------------------------------------------------------------------------
// Deleting past a rejected write's sequence number

/// A write rejected at 3 (over the payload limit) uses its number up without storing it; a
/// snapshot then lands at 2 (the last stored event) and `delete_events_to` may name 3 (the
/// last number used). After a restart the state is the snapshot's and the sequence goes on
/// from the last stored event (3, never stored, may be used now), never below the snapshot,
/// and each later process replays the events written after the delete
/// (okumin/akka-persistence-sql-async#6 and akka/akka-core#18559: the highest sequence number
/// reset after deleting, so new events hid under the snapshot).
async fn deleting_up_to_a_rejected_number_after_a_snapshot_loses_no_later_event(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Ledger|rejected-top";
    let p = b.open().await;
    let mut a = start(&p, pid);
    assert_eq!(a.recovered().await, 0);
    a.add(&[1, 2]).await;
    let over = "z".repeat(actix_persistence::limits::MAX_PAYLOAD_BYTES + 1);
    let rejected = within("AddPad", a.addr.send(AddPad(over)))
        .await
        .expect("mailbox");
    assert!(
        rejected.is_err(),
        "{kind:?}: an event over the limit was stored"
    );
    match a.note().await {
        Note::Rejected(rejection) => {
            assert!(rejection.to_string().contains("payload"), "{rejection}")
        }
        other => panic!("{kind:?}: expected the rejection, got {other:?}"),
    }
    a.addr.do_send(Snap);
    assert_eq!(a.snapshot_saved().await.seq_nr, 2, "{kind:?}");
    a.addr.do_send(DeleteTo(3));
    let deleted = a.note().await;
    assert!(matches!(deleted, Note::Deleted(3)), "{kind:?}: {deleted:?}");
    drop(a);
    within("shutdown", p.shutdown()).await;

    for process in 0..2 {
        let p = b.open().await;
        let mut a = start(&p, pid);
        let last = a.recovered().await;
        assert!(last >= 2, "{kind:?} process {process}: recovered at {last}");
        let expected_total = 3 + 10 * process;
        assert_eq!(a.get().await.1.total, expected_total, "{kind:?}");
        let (seq_nr, total) = within("Add", a.addr.send(Add(vec![10])))
            .await
            .expect("mailbox")
            .unwrap_or_else(|e| panic!("{kind:?} process {process}: persist after {last}: {e}"));
        assert_eq!(seq_nr, last + 1, "{kind:?}");
        assert_eq!(total, expected_total + 10);
        drop(a);
        within("shutdown", p.shutdown()).await;
    }
}

on_every_store!(deleting_up_to_a_rejected_number_after_a_snapshot_loses_no_later_event);

// ---------------------------------------------------------------------------------------------
// What a snapshot store can hold

/// A snapshot whose manifest holds a NUL character (a custom `Snapshotting` writes it) gets
/// the same answer from every store: refused with `SnapshotError::Storage` naming the save,
/// nothing stored, an earlier snapshot at that sequence number intact. PostgreSQL text cannot
/// hold NUL, so a store that took it (in memory, SQLite) would pass every test and fail every
/// save in production (nano-step/nano-brain#181: text SQLite stored with NUL bytes, refused by
/// PostgreSQL; brianc/node-postgres#2080).
async fn a_snapshot_manifest_with_nul_is_refused_alike_by_every_store(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Ledger|nul-manifest";
    let p = b.open().await;
    save(&p, pid, 3, 1, marker(3)).await;
    let metadata = SnapshotMetadata {
        persistence_id: pid.into(),
        seq_nr: 3,
        timestamp: 2,
    };
    let snapshot = SerializedSnapshot {
        manifest: "ledger\0v2".to_owned(),
        ..marker(4)
    };
    match within("save", p.snapshot_store().save(metadata, snapshot)).await {
        Err(SnapshotError::Storage { operation, .. }) => assert_eq!(operation, "save", "{kind:?}"),
        other => panic!("{kind:?}: a NUL in the manifest must be refused, got {other:?}"),
    }
    let kept = load(&p, pid, SnapshotSelectionCriteria::latest())
        .await
        .expect("the earlier snapshot");
    assert_eq!(kept.metadata.timestamp, 1, "{kind:?}");
    assert_eq!(kept.snapshot, marker(3), "{kind:?}");
    within("shutdown", p.shutdown()).await;
}

on_every_store!(a_snapshot_manifest_with_nul_is_refused_alike_by_every_store);
