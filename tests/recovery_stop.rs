//! Stopping a persistent actor while it recovers takes effect within one replay slice
//! ([`REPLAY_EVENTS_PER_POLL`] events at most, fewer when `apply` is slow), before any command
//! is handled; and a caller whose write was in flight when the actor went away is told the
//! truth about it, never `ActorStopped` for an event that may be stored. Asserted by counts,
//! never by time.

mod support;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use actix_persistence::actix::{Actor, Addr, Arbiter};
use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence::{
    AtomicWrite, InMemoryJournal, JournalStore, PersistError, PersistenceState, PersistentRepr,
    StopReason, REPLAY_EVENTS_PER_POLL,
};
use support::ledger::*;
use support::{Backend, Harness};
use tokio::sync::oneshot;

fn repr(pid: &str, seq_nr: u64) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload: serde_json::to_vec(&Entry::Add(1)).expect("json"),
        serializer_id: actix_persistence::serialization::JSON_SERIALIZER_ID,
        manifest: String::new(),
        writer_uuid: "test-writer".into(),
        timestamp: 1,
        tags: Default::default(),
    }
}

async fn journal_with(pid: &str, events: u64) -> InMemoryJournal {
    let journal = InMemoryJournal::new();
    write_events(&journal, pid, events).await;
    journal
}

/// Stores events 1..=events of `pid` in `store`, 500 to a write call.
async fn write_events(store: &dyn JournalStore, pid: &str, events: u64) {
    let seq_nrs: Vec<u64> = (1..=events).collect();
    for chunk in seq_nrs.chunks(500) {
        let writes = chunk
            .iter()
            .map(|&seq_nr| AtomicWrite::new(vec![repr(pid, seq_nr)]).expect("shape"))
            .collect();
        let results = store.write_messages(writes).await.expect("stored");
        assert!(results.iter().all(Result::is_ok));
    }
}

/// Starts a ledger on `arbiter`; returns its address and the receiver of its stop reason.
async fn start_on(
    arbiter: &Arbiter,
    journal: Addr<JournalActor>,
    pid: &'static str,
    script: &Arc<Script>,
) -> (Addr<Ledger>, oneshot::Receiver<StopReason>) {
    let (stopped_tx, stopped_rx) = oneshot::channel();
    let script = Arc::clone(script);
    let addr = Ledger::start_in_arbiter(&arbiter.handle(), move |_| {
        let mut state = PersistenceState::new(journal, pid).expect("valid id");
        let _ = stopped_tx.send(state.watch_stop());
        Ledger::new(state, script)
    });
    (addr, stopped_rx.await.expect("the actor was built"))
}

async fn a_stop_of_the_arbiter_during_recovery_takes_effect_within_one_replay_slice(
    backend: Backend,
) {
    let h = Harness::on(backend, 1).await;
    write_events(&**h.control.stored(), "stop-long", 5_000).await;
    let journal = h.journal.clone();
    let script = Arc::new(Script::default());
    script.stop_arbiter_at.store(100, Ordering::SeqCst);
    let arbiter = Arbiter::new();
    let (_ledger, stopped) = start_on(&arbiter, journal, "stop-long", &script).await;

    assert_eq!(stopped.await.expect("stop reason"), StopReason::Normal);
    let at_stop = script.applied_at_stop.load(Ordering::SeqCst);
    let applied = script.applied.load(Ordering::SeqCst);
    assert_eq!(
        at_stop, 100,
        "the stop was requested while applying event 100"
    );
    assert!(
        applied - at_stop <= REPLAY_EVENTS_PER_POLL as u64,
        "{} events were applied after the stop was requested (at most {REPLAY_EVENTS_PER_POLL})",
        applied - at_stop
    );
    assert!(script.recovered.lock().expect("lock").is_empty());
}

#[actix::test]
async fn a_command_queued_during_recovery_is_not_handled_after_a_stop_was_requested() {
    // 150 events: the stop, requested at event 140, falls into the last slice of the replay.
    let store = journal_with("stop-end", 150).await;
    let journal = JournalActor::start_with(Arc::new(store.clone()), JournalConfig::default());
    let script = Arc::new(Script::default());
    script.stop_arbiter_at.store(140, Ordering::SeqCst);
    let arbiter = Arbiter::new();
    let (ledger, stopped) = start_on(&arbiter, journal, "stop-end", &script).await;
    let command = ledger.send(Record(vec![Entry::Add(1)]));

    assert_eq!(stopped.await.expect("stop reason"), StopReason::Normal);
    assert!(
        command.await.is_err(),
        "the command was never handled: the actor stopped with it in its mailbox"
    );
    assert_eq!(
        store.read_highest_sequence_nr("stop-end", 0).await.ok(),
        Some(150),
        "nothing was stored after the stop was requested"
    );
    assert!(script.recovered.lock().expect("lock").is_empty());
}

#[actix::test]
async fn a_write_in_flight_when_the_actor_stops_is_reported_as_such_never_as_actor_stopped() {
    let mut h = Harness::new(1);
    let script = Arc::new(Script::default());
    let arbiter = Arbiter::new();
    let (ledger, stopped) = start_on(&arbiter, h.journal.clone(), "stop-write", &script).await;
    let reply = ledger.send(Record(vec![Entry::Add(7)]));
    let write = h.control.next_write_for("stop-write").await;

    arbiter.stop();
    assert_eq!(stopped.await.expect("stop reason"), StopReason::Normal);
    write.complete().wait().await;
    match reply.await.expect("the actor answered before it went away") {
        Err(PersistError::StoppedDuringWrite) => {}
        other => panic!("expected StoppedDuringWrite, got {other:?}"),
    }
    assert_eq!(
        h.control
            .stored()
            .read_highest_sequence_nr("stop-write", 0)
            .await
            .ok(),
        Some(1),
        "the event was stored after all: the caller was not told it was not"
    );
}

on_every_store!(a_stop_of_the_arbiter_during_recovery_takes_effect_within_one_replay_slice);
