//! Edge cases of the write side and recovery on every store: empty and maximal payloads, odd
//! persistence ids, the largest atomic write.

mod support;

use actix_persistence::actix::{Actor, Context, Handler, Message};
use actix_persistence::serialization::{SerializationError, SerializedEvent, JSON_SERIALIZER_ID};
use actix_persistence::{
    EventSourced, PersistReply, PersistResult, PersistenceState, PersistentActor, PersistentRepr,
    RecoveryError, MAX_SEQ_NR,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence::{
    AtomicWrite, AtomicWriteResult, FencingToken, JournalError, JournalStore, Ownership,
    PersistError, ReplayStream, StopReason,
};
use futures::TryStreamExt;
use support::{Backend, Harness};
use tokio::sync::mpsc;

/// Events stored as their bytes, verbatim (an empty event is an empty payload).
#[derive(PersistentActor)]
struct Raw {
    persistence: PersistenceState<Self>,
    applied: Vec<(u64, Vec<u8>)>,
    recovered: mpsc::UnboundedSender<Result<u64, String>>,
}

impl EventSourced for Raw {
    type Event = Vec<u8>;

    fn apply(&mut self, event: &Vec<u8>) {
        let seq_nr = self.last_seq_nr();
        self.applied.push((seq_nr, event.clone()));
    }

    fn serialize_event(&self, event: &Vec<u8>) -> Result<SerializedEvent, SerializationError> {
        Ok(SerializedEvent {
            payload: event.clone(),
            serializer_id: JSON_SERIALIZER_ID + 7,
            manifest: String::new(),
        })
    }

    fn deserialize_event(&self, repr: &PersistentRepr) -> Result<Vec<u8>, SerializationError> {
        Ok(repr.payload.clone())
    }

    fn tags(&self, event: &Vec<u8>) -> Vec<String> {
        if event.first() == Some(&b't') {
            vec!["t".to_owned()]
        } else {
            Vec::new()
        }
    }

    fn on_recovery_completed(&mut self, last_seq_nr: u64, _: &mut Context<Self>) {
        let _ = self.recovered.send(Ok(last_seq_nr));
    }

    fn on_recovery_failure(&mut self, cause: &RecoveryError, _: &mut Context<Self>) {
        let _ = self.recovered.send(Err(cause.to_string()));
    }
}

#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct PersistAllRaw(Vec<Vec<u8>>);

impl Handler<PersistAllRaw> for Raw {
    type Result = PersistReply<u64>;

    fn handle(&mut self, msg: PersistAllRaw, ctx: &mut Context<Self>) -> Self::Result {
        self.persist_all(ctx, msg.0, |act, _, _| act.last_seq_nr())
    }
}

#[derive(Message)]
#[rtype(result = "(u64, Vec<(u64, Vec<u8>)>)")]
struct Get;

impl Handler<Get> for Raw {
    type Result = actix_persistence::actix::MessageResult<Get>;

    fn handle(&mut self, _: Get, _: &mut Context<Self>) -> Self::Result {
        actix_persistence::actix::MessageResult((self.last_seq_nr(), self.applied.clone()))
    }
}

/// Starts a `Raw` actor of `pid` and waits for its recovery.
async fn start_raw(
    h: &Harness,
    pid: &str,
) -> (actix_persistence::actix::Addr<Raw>, Result<u64, String>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let addr = Raw {
        persistence: PersistenceState::new(h.journal.clone(), pid).expect("valid id"),
        applied: Vec::new(),
        recovered: tx,
    }
    .start();
    let recovered = tokio::time::timeout(std::time::Duration::from_secs(30), rx.recv())
        .await
        .expect("recovery answered")
        .expect("recovery reported");
    (addr, recovered)
}

/// Persists `events` with one `persist_all`, letting the controlled store store it.
async fn persist_raw(
    h: &mut Harness,
    addr: &actix_persistence::actix::Addr<Raw>,
    events: Vec<Vec<u8>>,
) -> PersistResult<u64> {
    let reply = addr.send(PersistAllRaw(events));
    h.control.next_write().await.complete();
    reply.await.expect("mailbox")
}

async fn stored_payloads(h: &Harness, pid: &str) -> Vec<(u64, Vec<u8>)> {
    h.control
        .stored()
        .replay_messages(pid, 1, MAX_SEQ_NR, MAX_SEQ_NR)
        .map_ok(|e| (e.seq_nr, e.payload.to_vec()))
        .try_collect()
        .await
        .expect("replay")
}

/// Empty payloads are stored and replayed as empty payloads, between non-empty ones.
async fn empty_payloads_round_trip(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let (a, recovered) = start_raw(&h, "empty").await;
    assert_eq!(recovered, Ok(0));
    let events = vec![
        Vec::new(),
        b"x".to_vec(),
        Vec::new(),
        b"t".to_vec(),
        Vec::new(),
    ];
    let stored = persist_raw(&mut h, &a, events.clone()).await;
    assert_eq!(stored.expect("stored"), 5);
    let one = persist_raw(&mut h, &a, vec![Vec::new()]).await;
    assert_eq!(one.expect("stored"), 6);
    let mut expected: Vec<(u64, Vec<u8>)> = (1..).zip(events).collect();
    expected.push((6, Vec::new()));
    assert_eq!(stored_payloads(&h, "empty").await, expected);
    drop(a);

    let (b, recovered) = start_raw(&h, "empty").await;
    assert_eq!(recovered, Ok(6));
    assert_eq!(b.send(Get).await.expect("mailbox"), (6, expected));
}

/// An event of exactly the payload limit is stored and replayed byte-exact.
async fn an_event_of_the_payload_limit_round_trips(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let (a, recovered) = start_raw(&h, "big").await;
    assert_eq!(recovered, Ok(0));
    let big: Vec<u8> = (0..actix_persistence::limits::MAX_PAYLOAD_BYTES)
        .map(|i| (i % 251) as u8)
        .collect();
    let stored = persist_raw(&mut h, &a, vec![big.clone(), b"after".to_vec()]).await;
    assert_eq!(stored.expect("stored"), 2);
    drop(a);
    let (b, recovered) = start_raw(&h, "big").await;
    assert_eq!(recovered, Ok(2));
    let (last, applied) = b.send(Get).await.expect("mailbox");
    assert_eq!(last, 2);
    assert_eq!(applied.len(), 2);
    assert!(applied[0].1 == big, "the big event came back byte-exact");
    assert_eq!(applied[1], (2, b"after".to_vec()));
}

/// Ids that differ only by whitespace, by Unicode normalization, or that are whitespace only
/// or of the maximal length in multi-byte characters: each recovers its own events.
async fn odd_persistence_ids_recover_only_their_own_events(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let long = "é".repeat(actix_persistence::limits::MAX_PERSISTENCE_ID_BYTES / 2);
    let ids = [
        " ".to_owned(),
        "  ".to_owned(),
        "\t".to_owned(),
        "a".to_owned(),
        "a ".to_owned(),
        " a".to_owned(),
        "\u{e9}".to_owned(),
        "e\u{301}".to_owned(),
        "A|1".to_owned(),
        "a|1".to_owned(),
        "|".to_owned(),
        "%".to_owned(),
        "_".to_owned(),
        long,
    ];
    for (i, id) in ids.iter().enumerate() {
        let (a, recovered) = start_raw(&h, id).await;
        assert_eq!(recovered, Ok(0), "{id:?}");
        let events: Vec<Vec<u8>> = (0..=i).map(|n| format!("{id}-{n}").into_bytes()).collect();
        let stored = persist_raw(&mut h, &a, events).await;
        assert_eq!(stored.expect("stored"), i as u64 + 1, "{id:?}");
    }
    for (i, id) in ids.iter().enumerate() {
        let (b, recovered) = start_raw(&h, id).await;
        assert_eq!(recovered, Ok(i as u64 + 1), "{id:?}");
        let (_, applied) = b.send(Get).await.expect("mailbox");
        let expected: Vec<(u64, Vec<u8>)> = (1..)
            .zip((0..=i).map(|n| format!("{id}-{n}").into_bytes()))
            .collect();
        assert_eq!(applied, expected, "{id:?}");
    }
}

/// The largest atomic write the limits allow (10,000 events, some tagged) is stored whole
/// and replayed in order.
async fn the_largest_atomic_write_is_stored_and_replayed(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let (a, recovered) = start_raw(&h, "wide").await;
    assert_eq!(recovered, Ok(0));
    let n = actix_persistence::limits::MAX_EVENTS_PER_ATOMIC_WRITE;
    let events: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            if i % 3 == 0 {
                format!("t{i}").into_bytes()
            } else {
                format!("e{i}").into_bytes()
            }
        })
        .collect();
    let stored = persist_raw(&mut h, &a, events.clone()).await;
    assert_eq!(stored.expect("stored"), n as u64);
    let again = persist_raw(&mut h, &a, events.clone()).await;
    assert_eq!(again.expect("stored"), 2 * n as u64);
    drop(a);
    let (b, recovered) = start_raw(&h, "wide").await;
    assert_eq!(recovered, Ok(2 * n as u64));
    let (_, applied) = b.send(Get).await.expect("mailbox");
    assert_eq!(applied.len(), 2 * n);
    for (i, (seq_nr, payload)) in applied.iter().enumerate() {
        assert_eq!(*seq_nr, i as u64 + 1);
        assert_eq!(payload, &events[i % n]);
    }
}

/// An atomic write of more event data than PostgreSQL takes in one statement (7 events of the
/// payload limit, 70 MiB): all stored, in order, byte-exact; the next write goes on after it.
async fn an_atomic_write_above_64_mib_is_stored_whole(backend: Backend) {
    let mut h = Harness::on(backend, 1).await;
    let (a, recovered) = start_raw(&h, "huge").await;
    assert_eq!(recovered, Ok(0));
    let max = actix_persistence::limits::MAX_PAYLOAD_BYTES;
    let events: Vec<Vec<u8>> = (0..7u8).map(|i| vec![b'a' + i; max]).collect();
    let stored = persist_raw(&mut h, &a, events.clone()).await;
    assert_eq!(stored.expect("stored"), 7);
    let next = persist_raw(&mut h, &a, vec![b"next".to_vec()]).await;
    assert_eq!(next.expect("stored"), 8);
    drop(a);
    let (b, recovered) = start_raw(&h, "huge").await;
    assert_eq!(recovered, Ok(8));
    let (_, applied) = b.send(Get).await.expect("mailbox");
    assert_eq!(applied.len(), 8);
    for (i, event) in events.iter().enumerate() {
        assert_eq!(applied[i].0, i as u64 + 1);
        assert!(
            &applied[i].1 == event,
            "event {} came back byte-exact",
            i + 1
        );
    }
    assert_eq!(applied[7], (8, b"next".to_vec()));
}

/// A store whose writes after the first `answered` are stored, but whose answer never comes:
/// the reply is lost to the journal's call timeout.
struct StoredThenSilent {
    inner: Arc<dyn JournalStore>,
    answered: AtomicUsize,
}

#[async_trait::async_trait]
impl JournalStore for StoredThenSilent {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        let stored = self.inner.write_messages(writes).await;
        if self.answered.fetch_sub(1, Ordering::SeqCst) == 0 {
            std::future::pending::<()>().await;
        }
        stored
    }
    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.inner.replay_messages(pid, from, to, max)
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

/// A persist whose reply is lost to the call timeout although the store stored it: the actor
/// stops (the write failed, its events may or may not be stored); the next incarnation
/// recovers the stored event and goes on after it, and so does the one after that.
async fn a_stored_write_whose_reply_timed_out_is_recovered_and_the_sequence_goes_on(
    backend: Backend,
) {
    let h = Harness::on(backend, 1).await;
    let store = Arc::new(StoredThenSilent {
        inner: Arc::clone(h.control.stored()),
        answered: AtomicUsize::new(1),
    });
    let journal = JournalActor::start_with(
        store,
        JournalConfig {
            call_timeout: Duration::from_millis(200),
            ..JournalConfig::default()
        },
    );
    let start = |pid: &str| {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut state = PersistenceState::new(journal.clone(), pid).expect("valid id");
        let stopped = state.watch_stop();
        let addr = Raw {
            persistence: state,
            applied: Vec::new(),
            recovered: tx,
        }
        .start();
        (addr, rx, stopped)
    };
    let (a, mut recovered, stopped) = start("lost");
    assert_eq!(recovered.recv().await, Some(Ok(0)));
    let first = a.send(PersistAllRaw(vec![b"one".to_vec()])).await;
    assert_eq!(first.expect("mailbox").expect("answered"), 1);
    let lost = a.send(PersistAllRaw(vec![b"two".to_vec()])).await;
    match lost.expect("mailbox") {
        Err(PersistError::Failed(JournalError::Timeout { .. })) => {}
        other => panic!("expected the write to time out, got {other:?}"),
    }
    assert_eq!(stopped.await, Ok(StopReason::PersistFailure));

    for (round, last) in [(1, 3), (2, 4)] {
        let (b, mut recovered, _) = start("lost");
        assert_eq!(recovered.recv().await, Some(Ok(last - 1)), "round {round}");
        let next = b
            .send(PersistAllRaw(vec![format!("r{round}").into_bytes()]))
            .await;
        assert_eq!(
            next.expect("mailbox").expect("stored"),
            last,
            "round {round}"
        );
        let (seq_nr, applied) = b.send(Get).await.expect("mailbox");
        assert_eq!(seq_nr, last);
        let mut expected = vec![
            (1, b"one".to_vec()),
            (2, b"two".to_vec()),
            (3, b"r1".to_vec()),
        ];
        expected.truncate(last as usize - 1);
        expected.push((last, format!("r{round}").into_bytes()));
        assert_eq!(applied, expected, "round {round}");
    }
}

on_every_store!(
    a_stored_write_whose_reply_timed_out_is_recovered_and_the_sequence_goes_on,
    an_atomic_write_above_64_mib_is_stored_whole,
    empty_payloads_round_trip,
    an_event_of_the_payload_limit_round_trips,
    odd_persistence_ids_recover_only_their_own_events,
    the_largest_atomic_write_is_stored_and_replayed,
);
