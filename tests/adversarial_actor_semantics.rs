//! The persistent actor's command / persist / recovery semantics against what Akka Persistence
//! (classic and typed) documents, in scenarios from bug reports against it and other
//! libraries. Writes go through the testkit's controlled journal (the test decides when each
//! completes) over every store: in memory, SQLite and PostgreSQL.
//!
//! The actor under test (`Book`) uses `#[derive(PersistentActor)]` as a user would; the
//! support module's `Probe` is the hand-written form.

mod support;

use std::sync::Arc;
use std::time::Duration;

use actix_persistence::actix::{ActorContext, Addr, Context, Handler, Message, MessageResult};
use actix_persistence::snapshot::{SnapshotError, SnapshotMetadata, SnapshotSelectionCriteria};
use actix_persistence::{
    DeleteError, EventSourced, JournalStore, PersistError, PersistReply, PersistResult,
    PersistenceState, PersistentActor, PersistentRepr, Recovery, RecoveryError, Snapshotting,
    StopReason, WriteRejection, MAX_SEQ_NR,
};
use actix_persistence_testkit::Outcome;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use support::{settle, Backend, Harness};
use tokio::sync::{mpsc, oneshot};

// ---------------------------------------------------------------------------------------------
// The actor: a book of named entries, with the derive.

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Entry(String);

/// What a `Book` reports, in the order it happens.
#[derive(Debug, Clone, PartialEq)]
enum Ev {
    Recovered {
        last: u64,
        applied: Vec<(u64, String)>,
    },
    RecoveryFailed(String),
    /// A command's handler started; `applied` entries were in the state then.
    Cmd {
        name: String,
        applied: usize,
    },
    /// A continuation ran for the entry `name`, `last` being `last_seq_nr()` there.
    Cont {
        name: String,
        last: u64,
    },
    Rejected {
        seq_nr: u64,
        last: u64,
    },
    Failed,
    SnapshotSaved(u64),
    SnapshotFailed(String),
    Deleted(u64),
    DeleteFailed(String),
}

#[derive(PersistentActor)]
struct Book {
    persistence: PersistenceState<Self>,
    /// (seq_nr read in `apply`, entry)
    applied: Vec<(u64, String)>,
    log: mpsc::UnboundedSender<Ev>,
    /// Persist this entry from `on_persist_rejected` (once).
    compensate: Option<String>,
}

impl Book {
    fn see(&self, ev: Ev) {
        let _ = self.log.send(ev);
    }

    fn cmd(&self, name: &str) {
        self.see(Ev::Cmd {
            name: name.to_owned(),
            applied: self.applied.len(),
        });
    }
}

/// A continuation that reports itself and answers the actor's last sequence number.
fn cont(act: &mut Book, entry: &Entry) -> u64 {
    let last = act.last_seq_nr();
    act.see(Ev::Cont {
        name: entry.0.clone(),
        last,
    });
    last
}

impl EventSourced for Book {
    type Event = Entry;

    fn apply(&mut self, event: &Entry) {
        let seq_nr = self.last_seq_nr();
        self.applied.push((seq_nr, event.0.clone()));
    }

    fn snapshotting() -> Option<Snapshotting<Self>> {
        Some(Snapshotting::json(
            |b: &Self| b.applied.clone(),
            |b: &mut Self, applied| b.applied = applied,
        ))
    }

    fn on_recovery_completed(&mut self, last: u64, _: &mut Context<Self>) {
        self.see(Ev::Recovered {
            last,
            applied: self.applied.clone(),
        });
    }

    fn on_recovery_failure(&mut self, cause: &RecoveryError, _: &mut Context<Self>) {
        self.see(Ev::RecoveryFailed(cause.to_string()));
    }

    fn on_persist_rejected(&mut self, cause: &WriteRejection, ctx: &mut Context<Self>) {
        self.see(Ev::Rejected {
            seq_nr: cause.seq_nr,
            last: self.last_seq_nr(),
        });
        if let Some(name) = self.compensate.take() {
            self.persist(ctx, Entry(name), |a, e, _| cont(a, e));
        }
    }

    fn on_persist_failure(&mut self, _: &actix_persistence::JournalError, _: &mut Context<Self>) {
        self.see(Ev::Failed);
    }

    fn on_snapshot_saved(&mut self, m: &SnapshotMetadata, _: &mut Context<Self>) {
        self.see(Ev::SnapshotSaved(m.seq_nr));
    }

    fn on_snapshot_failure(&mut self, cause: &SnapshotError, _: &mut Context<Self>) {
        self.see(Ev::SnapshotFailed(cause.to_string()));
    }

    fn on_events_deleted(&mut self, to: u64, _: &mut Context<Self>) {
        self.see(Ev::Deleted(to));
    }

    fn on_delete_failure(&mut self, cause: &DeleteError, _: &mut Context<Self>) {
        self.see(Ev::DeleteFailed(cause.to_string()));
    }
}

/// One `persist` per entry; answers the last continuation's sequence number.
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct Put(Vec<&'static str>);

impl Handler<Put> for Book {
    type Result = PersistReply<u64>;
    fn handle(&mut self, msg: Put, ctx: &mut Context<Self>) -> Self::Result {
        self.cmd(&msg.0.join("+"));
        let mut last = PersistReply::ready(0);
        for name in msg.0 {
            last = self.persist(ctx, Entry(name.to_owned()), |a, e, _| cont(a, e));
        }
        last
    }
}

/// One `persist_all` of the entries.
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct PutAll(Vec<&'static str>);

impl Handler<PutAll> for Book {
    type Result = PersistReply<u64>;
    fn handle(&mut self, msg: PutAll, ctx: &mut Context<Self>) -> Self::Result {
        self.cmd(&msg.0.join("+"));
        let events = msg.0.iter().map(|n| Entry((*n).to_owned())).collect();
        self.persist_all(ctx, events, |a, events, _| {
            let last = a.last_seq_nr();
            for e in events {
                a.see(Ev::Cont {
                    name: e.0.clone(),
                    last,
                });
            }
            last
        })
    }
}

/// `persist(entry)`, then `save_snapshot` in the same handler.
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct PutThenSnapshot(&'static str);

impl Handler<PutThenSnapshot> for Book {
    type Result = PersistReply<u64>;
    fn handle(&mut self, msg: PutThenSnapshot, ctx: &mut Context<Self>) -> Self::Result {
        self.cmd(msg.0);
        let reply = self.persist(ctx, Entry(msg.0.to_owned()), |a, e, _| cont(a, e));
        self.save_snapshot(ctx);
        reply
    }
}

/// `persist(entry)`, then `ctx.stop()` in the same handler.
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct PutThenStop(&'static str);

impl Handler<PutThenStop> for Book {
    type Result = PersistReply<u64>;
    fn handle(&mut self, msg: PutThenStop, ctx: &mut Context<Self>) -> Self::Result {
        self.cmd(msg.0);
        let reply = self.persist(ctx, Entry(msg.0.to_owned()), |a, e, _| cont(a, e));
        ctx.stop();
        reply
    }
}

/// `persist(first)` whose continuation stops the actor, then `persist(second)`, in one
/// command (as Akka Typed's `Effect.persist(e).thenStop()`). Answers the second's reply, or
/// the first's when there is no second.
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct PutStopInContinuation(&'static str, Option<&'static str>);

impl Handler<PutStopInContinuation> for Book {
    type Result = PersistReply<u64>;
    fn handle(&mut self, msg: PutStopInContinuation, ctx: &mut Context<Self>) -> Self::Result {
        self.cmd(msg.0);
        let first = self.persist(ctx, Entry(msg.0.to_owned()), |a, e, ctx| {
            let last = cont(a, e);
            ctx.stop();
            last
        });
        match msg.1 {
            Some(name) => self.persist(ctx, Entry(name.to_owned()), |a, e, _| cont(a, e)),
            None => first,
        }
    }
}

/// A command that persists nothing: it only reports that it was handled.
#[derive(Message)]
#[rtype(result = "()")]
struct Mark(&'static str);

impl Handler<Mark> for Book {
    type Result = ();
    fn handle(&mut self, msg: Mark, _: &mut Context<Self>) {
        self.cmd(msg.0);
    }
}

/// Delete the events up to a sequence number.
#[derive(Message)]
#[rtype(result = "()")]
struct DeleteTo(u64);

impl Handler<DeleteTo> for Book {
    type Result = ();
    fn handle(&mut self, msg: DeleteTo, ctx: &mut Context<Self>) {
        self.delete_events_to(ctx, msg.0);
    }
}

/// Save a snapshot now.
#[derive(Message)]
#[rtype(result = "()")]
struct Snap;

impl Handler<Snap> for Book {
    type Result = ();
    fn handle(&mut self, _: Snap, ctx: &mut Context<Self>) {
        self.save_snapshot(ctx);
    }
}

/// (last_seq_nr, applied)
#[derive(Message)]
#[rtype(result = "(u64, Vec<(u64, String)>)")]
struct Get;

impl Handler<Get> for Book {
    type Result = MessageResult<Get>;
    fn handle(&mut self, _: Get, _: &mut Context<Self>) -> Self::Result {
        MessageResult((self.last_seq_nr(), self.applied.clone()))
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// A started `Book`: its address, what it reports, and why it stopped.
struct Running {
    addr: Addr<Book>,
    log: mpsc::UnboundedReceiver<Ev>,
    stopped: oneshot::Receiver<StopReason>,
}

impl Running {
    async fn next(&mut self) -> Ev {
        tokio::time::timeout(Duration::from_secs(10), self.log.recv())
            .await
            .expect("the book reported nothing within 10 s (hang)")
            .expect("the book dropped its log")
    }

    async fn next_n(&mut self, n: usize) -> Vec<Ev> {
        let mut evs = Vec::new();
        for _ in 0..n {
            evs.push(self.next().await);
        }
        evs
    }

    fn so_far(&mut self) -> Vec<Ev> {
        let mut evs = Vec::new();
        while let Ok(ev) = self.log.try_recv() {
            evs.push(ev);
        }
        evs
    }

    async fn stop_reason(self) -> StopReason {
        tokio::time::timeout(Duration::from_secs(10), self.stopped)
            .await
            .expect("the book did not stop within 10 s")
            .expect("stop reason")
    }
}

/// Starts a `Book` of `pid` over the harness's journal and snapshot store, with `recovery`.
fn start_book(h: &Harness, pid: &str, recovery: Recovery, compensate: Option<&str>) -> Running {
    use actix_persistence::actix::Actor;
    let (tx, log) = mpsc::unbounded_channel();
    let mut persistence = PersistenceState::new(h.journal.clone(), pid)
        .expect("valid id")
        .with_snapshot_store(Arc::clone(&h.snapshots), Duration::from_secs(10))
        .with_recovery(recovery);
    let stopped = persistence.watch_stop();
    let addr = Book {
        persistence,
        applied: Vec::new(),
        log: tx,
        compensate: compensate.map(str::to_owned),
    }
    .start();
    Running { addr, log, stopped }
}

/// Starts a `Book` with the default recovery and checks what it recovered.
async fn recovered_book(h: &Harness, pid: &str, last: u64, applied: &[(u64, &str)]) -> Running {
    let mut book = start_book(h, pid, Recovery::latest(), None);
    assert_eq!(
        book.next().await,
        Ev::Recovered {
            last,
            applied: owned(applied)
        },
        "{pid}: recovery"
    );
    book
}

fn owned(v: &[(u64, &str)]) -> Vec<(u64, String)> {
    v.iter().map(|(s, n)| (*s, (*n).to_owned())).collect()
}

fn cont_ev(name: &str, last: u64) -> Ev {
    Ev::Cont {
        name: name.to_owned(),
        last,
    }
}

fn cmd_ev(name: &str, applied: usize) -> Ev {
    Ev::Cmd {
        name: name.to_owned(),
        applied,
    }
}

/// (seq_nr, entry) of every event stored for `pid`, read from the store under the journal.
async fn stored(h: &Harness, pid: &str) -> Vec<(u64, String)> {
    h.control
        .stored()
        .replay_messages(pid, 1, MAX_SEQ_NR, u64::MAX)
        .map(|e| {
            let e: PersistentRepr = e.expect("replay");
            let entry: Entry = serde_json::from_slice(&e.payload).expect("an entry");
            (e.seq_nr, entry.0)
        })
        .collect()
        .await
}

/// Persists `names` through `book` (one `persist` each, one batch), storing the batch.
async fn put(h: &mut Harness, book: &Running, pid: &str, names: Vec<&'static str>) -> u64 {
    let reply = book.addr.send(Put(names));
    h.control.next_write_for(pid).await.complete();
    reply.await.expect("mailbox").expect("stored")
}

// ---------------------------------------------------------------------------------------------
// Scenarios

/// Akka's persistence docs warn against `context.stop(self)` right after `persist` (the write
/// may or may not happen; Akka Typed issue akka/akka-core#27295: `Effect.stop().thenRun` ran
/// before the actor was stopped). Here the stop comes first: the write is never sent, its
/// caller is told `ActorStopped` ("nothing of it was stored"), no continuation runs, and the
/// next incarnation recovers nothing and persists at 1. The answer must match the store.
async fn persist_then_stop_in_one_handler_stores_nothing_and_says_so(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let pid = "stop-in-handler";
    let mut book = recovered_book(&h, pid, 0, &[]).await;
    let reply = book.addr.send(PutThenStop("a")).await.expect("mailbox");
    assert!(
        matches!(reply, Err(PersistError::ActorStopped)),
        "the write was never sent: ActorStopped, got {reply:?}"
    );
    assert_eq!(book.so_far(), vec![cmd_ev("a", 0)], "no continuation ran");
    settle().await;
    assert!(!h.control.has_waiting_write(), "nothing reached the store");
    assert_eq!(book.stop_reason().await, StopReason::Normal);
    assert_eq!(stored(&h, pid).await, vec![]);

    let book = recovered_book(&h, pid, 0, &[]).await;
    assert_eq!(put(&mut h, &book, pid, vec!["b"]).await, 1);
    assert_eq!(stored(&h, pid).await, owned(&[(1, "b")]));
}

/// Akka Typed `Effect.persist(e).thenStop()`, and pathosDev/actor-ts#518 (a stopped actor's
/// stashed commands are dropped silently): commands that arrived while the write was in flight
/// are not handled once the continuation stopped the actor (their senders get an error, none
/// of them persists anything); the event is stored and the next incarnation goes on after it.
async fn a_stop_in_a_continuation_drops_the_commands_queued_behind_the_write(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let pid = "stop-in-continuation";
    let mut book = recovered_book(&h, pid, 0, &[]).await;
    let first = book.addr.send(PutStopInContinuation("a", None));
    let write = h.control.next_write_for(pid).await;
    // Queued while `a` is in flight.
    let queued_put = book.addr.send(Put(vec!["b"]));
    let queued_mark = book.addr.send(Mark("m"));
    settle().await;
    assert_eq!(book.so_far(), vec![cmd_ev("a", 0)], "the queue waits");
    write.complete();
    assert_eq!(first.await.expect("mailbox").expect("a stored"), 1);
    assert!(
        queued_put.await.is_err(),
        "a command queued behind the write is not handled after the stop"
    );
    assert!(queued_mark.await.is_err());
    settle().await;
    assert!(!h.control.has_waiting_write(), "nothing more was written");
    assert_eq!(book.so_far(), vec![cont_ev("a", 1)]);
    assert_eq!(book.stop_reason().await, StopReason::Normal);

    let book = recovered_book(&h, pid, 1, &[(1, "a")]).await;
    assert_eq!(put(&mut h, &book, pid, vec!["c"]).await, 2);
}

/// The same stop from the continuation of the first of two writes of one command: the second
/// write was in the same batch and is stored; its caller must be told what happened to it (its
/// continuation ran: the value, never an error that says "not stored"), and a restart recovers
/// both.
async fn a_stop_in_the_first_continuation_of_a_batch_still_answers_the_second(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let pid = "stop-first-of-two";
    let mut book = recovered_book(&h, pid, 0, &[]).await;
    let replies = book.addr.send(PutStopInContinuation("a", Some("b")));
    let write = h.control.next_write_for(pid).await;
    assert_eq!(write.writes().len(), 2, "two atomic writes in one batch");
    write.complete();
    let b = replies.await.expect("mailbox");
    assert!(
        matches!(b, Ok(2) | Err(PersistError::StoppedAfterStore)),
        "b is stored: its caller gets its value or StoppedAfterStore, got {b:?}"
    );
    assert_eq!(book.next().await, cmd_ev("a", 0));
    assert_eq!(book.next().await, cont_ev("a", 1), "a's continuation ran");
    assert_eq!(book.stop_reason().await, StopReason::Normal);
    assert_eq!(stored(&h, pid).await, owned(&[(1, "a"), (2, "b")]));
    recovered_book(&h, pid, 2, &[(1, "a"), (2, "b")]).await;
}

/// akka/akka-core#17585 ("Investigate safety of persists mixed with saveSnapshot"): a snapshot
/// asked for in the handler right after `persist` holds the state before the event, at the
/// sequence number before it (the event is not stored yet); its hook runs after the event's
/// continuation; a restart loads it and replays the event.
async fn a_snapshot_asked_for_after_persist_in_one_handler_holds_the_state_before_it(
    backend: Backend,
) {
    let mut h = Harness::on(backend, 1).await;
    let pid = "persist-then-snapshot";
    let mut book = recovered_book(&h, pid, 0, &[]).await;
    assert_eq!(put(&mut h, &book, pid, vec!["a"]).await, 1);
    assert_eq!(book.next_n(2).await, vec![cmd_ev("a", 0), cont_ev("a", 1)]);

    let reply = book.addr.send(PutThenSnapshot("b"));
    let write = h.control.next_write_for(pid).await;
    write.complete();
    assert_eq!(reply.await.expect("mailbox").expect("stored"), 2);
    assert_eq!(
        book.next_n(3).await,
        vec![cmd_ev("b", 1), cont_ev("b", 2), Ev::SnapshotSaved(1)]
    );
    let snapshot = h
        .snapshots
        .load(pid, SnapshotSelectionCriteria::latest())
        .await
        .expect("load")
        .expect("a snapshot");
    assert_eq!(snapshot.metadata.seq_nr, 1);
    let state: Vec<(u64, String)> = snapshot.json().expect("the state");
    assert_eq!(state, owned(&[(1, "a")]));

    // Events up to the snapshot deleted: the restart needs the snapshot and event 2.
    book.addr.do_send(DeleteTo(1));
    assert_eq!(book.next().await, Ev::Deleted(1));
    let book = recovered_book(&h, pid, 2, &[(1, "a"), (2, "b")]).await;
    assert_eq!(put(&mut h, &book, pid, vec!["c"]).await, 3);
}

/// Akka's `onPersistRejected` (the actor goes on) with commands stashed behind the write: the
/// rejection hook runs first (`last_seq_nr` already at the rejected write's highest number), a
/// persist the hook makes is stored before any queued command is handled, and the queued
/// commands are then handled in arrival order, the next one's event after every number the
/// rejected write used. A restart recovers only what was stored.
async fn commands_queued_behind_a_rejected_persist_all_run_after_its_hook_in_order(
    backend: Backend,
) {
    let mut h = Harness::on(backend, 1).await;
    let pid = "rejected-then-queued";
    let mut book = start_book(&h, pid, Recovery::latest(), Some("compensated"));
    assert_eq!(
        book.next().await,
        Ev::Recovered {
            last: 0,
            applied: vec![]
        }
    );
    let rejected = book.addr.send(PutAll(vec!["a", "b"]));
    let write = h.control.next_write_for(pid).await;
    let queued_put = book.addr.send(Put(vec!["c"]));
    let queued_mark = book.addr.send(Mark("m"));
    settle().await;
    write.complete_with(vec![Outcome::Reject("refused by the store".into())]);
    let reply = rejected.await.expect("mailbox");
    assert!(
        matches!(reply, Err(PersistError::Rejected(_))),
        "rejected: {reply:?}"
    );
    // The hook's own persist is the next write, before the queued command's.
    let compensation = h.control.next_write_for(pid).await;
    assert_eq!(compensation.writes().len(), 1);
    assert_eq!(compensation.writes()[0].lowest_seq_nr(), 3);
    compensation.complete();
    let c = h.control.next_write_for(pid).await;
    assert_eq!(c.writes()[0].lowest_seq_nr(), 4);
    c.complete();
    assert_eq!(queued_put.await.expect("mailbox").expect("stored"), 4);
    queued_mark.await.expect("mailbox");
    assert_eq!(
        book.next_n(6).await,
        vec![
            cmd_ev("a+b", 0),
            Ev::Rejected { seq_nr: 1, last: 2 },
            cont_ev("compensated", 3),
            cmd_ev("c", 1),
            cont_ev("c", 4),
            cmd_ev("m", 2),
        ]
    );
    drop(book);
    recovered_book(&h, pid, 4, &[(3, "compensated"), (4, "c")]).await;
}

/// Akka PR akka/akka-core#28002 / #27496 ("use max seqNr in RecoverySuccess") and
/// pathosDev/actor-ts#628 (recovery seeded the sequence from the replayed events only): after a
/// recovery bounded by `to_seq_nr`, by `max_events`, or `Recovery::none()`, the next event
/// takes the number after the highest stored one, never one of the events not replayed, and a
/// full recovery afterwards replays every event once, in order.
async fn a_persist_after_a_bounded_recovery_goes_after_the_highest_stored_event(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let pid = "bounded-then-persist";
    let book = recovered_book(&h, pid, 0, &[]).await;
    assert_eq!(
        put(&mut h, &book, pid, vec!["1", "2", "3", "4", "5"]).await,
        5
    );
    drop(book);
    type Case = (Recovery, &'static [(u64, &'static str)], &'static str);
    let bounds: [Case; 3] = [
        (
            Recovery {
                to_seq_nr: 3,
                ..Recovery::latest()
            },
            &[(1, "1"), (2, "2"), (3, "3")],
            "6",
        ),
        (
            Recovery {
                max_events: 2,
                ..Recovery::latest()
            },
            &[(1, "1"), (2, "2")],
            "7",
        ),
        (Recovery::none(), &[], "8"),
    ];
    let mut highest = 5;
    for (recovery, replayed, next) in bounds {
        let mut book = start_book(&h, pid, recovery, None);
        assert_eq!(
            book.next().await,
            Ev::Recovered {
                last: highest,
                applied: owned(replayed)
            },
            "{recovery:?}"
        );
        let reply = book.addr.send(Put(vec![next]));
        let write = h.control.next_write_for(pid).await;
        assert_eq!(
            write.writes()[0].lowest_seq_nr(),
            highest + 1,
            "{recovery:?}: the next event goes after the highest stored one"
        );
        write.complete();
        highest += 1;
        assert_eq!(reply.await.expect("mailbox").expect("stored"), highest);
        // The state misses events: no snapshot of it may be taken.
        book.addr.do_send(Snap);
        let evs = book.next_n(3).await;
        assert!(
            matches!(&evs[2], Ev::SnapshotFailed(_)),
            "{recovery:?}: a snapshot of a partial state is refused, got {evs:?}"
        );
    }
    let all: Vec<(u64, &str)> = vec![
        (1, "1"),
        (2, "2"),
        (3, "3"),
        (4, "4"),
        (5, "5"),
        (6, "6"),
        (7, "7"),
        (8, "8"),
    ];
    assert_eq!(stored(&h, pid).await, owned(&all));
    recovered_book(&h, pid, 8, &all).await;
}

/// Persistence ids at the length limit in 4-byte characters (Akka.NET and JDBC plugins cut or
/// mangled long Unicode ids in their snapshot tables): a snapshot, a delete of the events it
/// covers, more events, and a restart from the snapshot, on every store.
async fn a_255_byte_unicode_id_snapshots_deletes_and_recovers(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let pid = format!("Ledger|{}", "🦀".repeat(62));
    assert_eq!(pid.len(), 255);
    let pid: &'static str = Box::leak(pid.into_boxed_str());
    let mut book = recovered_book(&h, pid, 0, &[]).await;
    assert_eq!(put(&mut h, &book, pid, vec!["a", "b", "c"]).await, 3);
    book.next_n(4).await;
    book.addr.do_send(Snap);
    assert_eq!(book.next().await, Ev::SnapshotSaved(3));
    book.addr.do_send(DeleteTo(3));
    assert_eq!(book.next().await, Ev::Deleted(3));
    assert_eq!(put(&mut h, &book, pid, vec!["d"]).await, 4);
    drop(book);
    assert_eq!(stored(&h, pid).await, owned(&[(4, "d")]));
    let book = recovered_book(&h, pid, 4, &[(1, "a"), (2, "b"), (3, "c"), (4, "d")]).await;
    assert_eq!(put(&mut h, &book, pid, vec!["e"]).await, 5);
}

on_every_store!(
    persist_then_stop_in_one_handler_stores_nothing_and_says_so,
    a_stop_in_a_continuation_drops_the_commands_queued_behind_the_write,
    a_stop_in_the_first_continuation_of_a_batch_still_answers_the_second,
    a_snapshot_asked_for_after_persist_in_one_handler_holds_the_state_before_it,
    commands_queued_behind_a_rejected_persist_all_run_after_its_hook_in_order,
    a_persist_after_a_bounded_recovery_goes_after_the_highest_stored_event,
    a_255_byte_unicode_id_snapshots_deletes_and_recovers,
);

// ---------------------------------------------------------------------------------------------
// Sequence numbers at the top of their range.

/// A snapshot store that answers every load with one snapshot of an empty book at `seq_nr` (as
/// a third-party store, or one imported from another system, may hold) and keeps no saves.
struct SnapshotAt(u64);

#[async_trait::async_trait]
impl actix_persistence::snapshot::SnapshotStore for SnapshotAt {
    async fn load(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<actix_persistence::snapshot::SelectedSnapshot>, SnapshotError> {
        let metadata = SnapshotMetadata {
            persistence_id: pid.to_owned(),
            seq_nr: self.0,
            timestamp: 1,
        };
        Ok(criteria.matches(&metadata).then(|| {
            let empty: Vec<(u64, String)> = Vec::new();
            actix_persistence::snapshot::SelectedSnapshot {
                metadata,
                snapshot: actix_persistence::snapshot::SerializedSnapshot::json(&empty)
                    .expect("json"),
            }
        }))
    }
    async fn save(
        &self,
        _: SnapshotMetadata,
        _: actix_persistence::snapshot::SerializedSnapshot,
    ) -> Result<(), SnapshotError> {
        Ok(())
    }
    async fn delete(&self, _: &SnapshotMetadata) -> Result<(), SnapshotError> {
        Ok(())
    }
    async fn delete_matching(
        &self,
        _: &str,
        _: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError> {
        Ok(())
    }
}

/// Akka issue akka/akka-core#28002 (the next event after a snapshot above every stored event
/// takes the snapshot's number + 1) at the top of the range: a snapshot at `i64::MAX` (the
/// highest number every store holds) or above it, as a store of another kind may hold. The
/// actor recovers at the snapshot's number and every persist is then rejected as over the
/// limits (the actor goes on and keeps answering; the rejected writes use up their numbers, as
/// far as `u64` has them), never an arithmetic overflow that kills the
/// actor (debug builds) or wraps the next number around to 0 and 1 (release builds), which
/// stored an event below the snapshot, hidden from every recovery.
async fn a_snapshot_at_the_top_of_the_range_rejects_persists_instead_of_overflowing(
    backend: Backend,
) {
    let mut h = Harness::on(backend, 1).await;
    for (i, seq_nr) in [i64::MAX as u64, i64::MAX as u64 + 1, u64::MAX - 1, u64::MAX]
        .into_iter()
        .enumerate()
    {
        use actix_persistence::actix::Actor;
        let pid = format!("top-{i}");
        let (tx, log) = mpsc::unbounded_channel();
        let mut persistence = PersistenceState::new(h.journal.clone(), pid.as_str())
            .expect("valid id")
            .with_snapshot_store(Arc::new(SnapshotAt(seq_nr)), Duration::from_secs(10));
        let stopped = persistence.watch_stop();
        let addr = Book {
            persistence,
            applied: Vec::new(),
            log: tx,
            compensate: None,
        }
        .start();
        let mut book = Running { addr, log, stopped };
        assert_eq!(
            book.next().await,
            Ev::Recovered {
                last: seq_nr,
                applied: vec![]
            },
            "snapshot at {seq_nr}"
        );
        for names in [vec!["a"], vec!["b", "c"]] {
            let reply = book.addr.send(PutAll(names)).await.expect("mailbox");
            assert!(
                matches!(&reply, Err(PersistError::Rejected(r)) if r.reason.contains("limit")),
                "snapshot at {seq_nr}: a persist above the limit is rejected, got {reply:?}"
            );
        }
        // Rejected writes keep their numbers (as Akka's `onPersistRejected`), as far as
        // there are numbers to take.
        assert_eq!(
            book.addr.send(Get).await.expect("the actor goes on"),
            (seq_nr.saturating_add(3), vec![]),
            "snapshot at {seq_nr}"
        );
        assert!(!h.control.has_waiting_write(), "nothing reached the store");
        assert_eq!(stored(&h, &pid).await, vec![]);
        drop(book.addr);
        assert_eq!(book.stopped.await.expect("stop reason"), StopReason::Normal);
    }
}

/// What one store answers when a snapshot above `i64::MAX` is saved, whatever the store:
/// "every store answers alike" (the SQL stores refuse it, their column being a BIGINT).
async fn a_snapshot_above_i64_max_is_refused_by_every_store(backend: Backend) {
    let h = Harness::on(backend, 1).await;
    let metadata = SnapshotMetadata {
        persistence_id: "too-high".to_owned(),
        seq_nr: i64::MAX as u64 + 1,
        timestamp: 1,
    };
    let saved = h
        .snapshots
        .save(
            metadata,
            actix_persistence::snapshot::SerializedSnapshot::json(&0u8).expect("json"),
        )
        .await;
    assert!(saved.is_err(), "refused, got {saved:?}");
    let loaded = h
        .snapshots
        .load("too-high", SnapshotSelectionCriteria::latest())
        .await
        .expect("load");
    assert_eq!(loaded, None, "nothing stored");
}

on_every_store!(
    a_snapshot_at_the_top_of_the_range_rejects_persists_instead_of_overflowing,
    a_snapshot_above_i64_max_is_refused_by_every_store,
);

// ---------------------------------------------------------------------------------------------
// The hand-written form: an actor whose `stopping` asks to keep running.

/// A hand-written persistent actor (no derive) whose `Actor::stopping` keeps it running, as an
/// application that drains work before it stops might write it.
struct Stubborn {
    persistence: PersistenceState<Self>,
    applied: Vec<String>,
}

impl actix_persistence::actix::Actor for Stubborn {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        actix_persistence::start_recovery(self, ctx);
    }
    fn stopping(&mut self, _: &mut Context<Self>) -> actix_persistence::actix::Running {
        actix_persistence::actix::Running::Continue
    }
}

impl PersistentActor for Stubborn {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

impl EventSourced for Stubborn {
    type Event = Entry;
    fn apply(&mut self, event: &Entry) {
        self.applied.push(event.0.clone());
    }
}

impl Handler<Put> for Stubborn {
    type Result = PersistReply<u64>;
    fn handle(&mut self, msg: Put, ctx: &mut Context<Self>) -> Self::Result {
        let mut last = PersistReply::ready(0);
        for name in msg.0 {
            last = self.persist(ctx, Entry(name.to_owned()), |a, _, _| a.last_seq_nr());
        }
        last
    }
}

/// Akka: "any failure during persist will unconditionally stop the actor"
/// (akka/akka-core#16524, PR #17634), since the failed write's events may or may not be
/// stored and the state cannot tell. A hand-written actor whose `Actor::stopping` returns
/// `Running::Continue` (Actix lets `stopping` cancel a stop) must still stop after
/// `on_persist_failure`: no later command is handled, nothing more is written, and a
/// supervisor watching it learns why.
async fn a_failed_write_stops_an_actor_whose_stopping_asks_to_continue(backend: Backend) {
    use actix_persistence::actix::Actor;
    let mut h = Harness::on(backend, 1).await;
    let pid = "stubborn";
    let mut persistence = PersistenceState::new(h.journal.clone(), pid).expect("valid id");
    let stopped = persistence.watch_stop();
    let addr = Stubborn {
        persistence,
        applied: Vec::new(),
    }
    .start();
    let reply = addr.send(Put(vec!["a"]));
    h.control
        .next_write_for(pid)
        .await
        .fail(actix_persistence::JournalError::storage(
            "write",
            std::io::Error::other("the disk is gone"),
        ));
    let reply = reply.await.expect("mailbox");
    assert!(
        matches!(reply, Err(PersistError::Failed(_))),
        "the write failed: {reply:?}"
    );
    let reason = tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .map(|r| r.expect("stop reason"));
    assert_eq!(
        reason.ok(),
        Some(StopReason::PersistFailure),
        "the actor stops after a failed write, whatever its `stopping` says"
    );
    let later = addr.send(Put(vec!["b"])).await;
    assert!(later.is_err(), "no command is handled after: {later:?}");
    settle().await;
    assert!(!h.control.has_waiting_write(), "nothing more is written");
}

/// The same for a failed recovery (Akka stops the actor on any recovery failure,
/// akka/akka-core#18850; apache/pekko#3234: a recovery-completed failure that did not stop the
/// actor looped): here the snapshot cannot be restored (the actor takes no snapshots), and the
/// actor must stop without handling a command.
async fn a_failed_recovery_stops_an_actor_whose_stopping_asks_to_continue(backend: Backend) {
    use actix_persistence::actix::Actor;
    let h = Harness::on(backend, 1).await;
    let mut persistence = PersistenceState::new(h.journal.clone(), "stubborn-recovery")
        .expect("valid id")
        .with_snapshot_store(Arc::new(SnapshotAt(5)), Duration::from_secs(10));
    let stopped = persistence.watch_stop();
    let addr = Stubborn {
        persistence,
        applied: Vec::new(),
    }
    .start();
    let reason = tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .map(|r| r.expect("stop reason"));
    assert_eq!(reason.ok(), Some(StopReason::RecoveryFailure));
    let later = addr.send(Put(vec!["b"])).await;
    assert!(later.is_err(), "no command is handled: {later:?}");
}

on_every_store!(
    a_failed_write_stops_an_actor_whose_stopping_asks_to_continue,
    a_failed_recovery_stops_an_actor_whose_stopping_asks_to_continue,
);
