//! The journal conformance cases J1-J30 (J1-J27 of `conformance/journal.md`, J28-J30 this suite's own), the fencing cases F1-F5, and the model check.
//!
//! Every case drives the store through the real [`JournalActor`]: writes as
//! [`WriteMessages`] (checking the batch-level answer and one result per atomic write, routed
//! back on the writer's own reply channel), replays as [`ReplayMessages`] (checking the events,
//! byte-exact, and the highest sequence number), deletes as [`DeleteMessagesTo`].
//!
//! # Setup before every case
//! A fresh persistence id `p-<uuid>` and writer id; events 1..5 with payloads `"a-1"`..`"a-5"`
//! (JSON strings) written as one [`WriteMessages`] of four atomic writes: `[1]`, `[2]`, `[3]`,
//! `[4, 5]`. Meanwhile another writer writes one event of another id through the same journal.
//! The batch must succeed with four successes, in order, on the first writer's reply channel,
//! and one on the other's.
//!
//! Each case function panics (as an assertion does) with the case number and what differed.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use actix::{Actor, Addr};
use actix_persistence_core::journal::{
    DeleteMessagesTo, Incarnation, JournalActor, JournalConfig, ReadHighestSequenceNr,
    RecoveryReplay, ReplayMessages, TakeOwnership, WriteMessages, WriteMessagesReply,
};
use actix_persistence_core::persistent::{PersistError, PersistenceState};
use actix_persistence_core::serialization::JSON_SERIALIZER_ID;
use actix_persistence_core::{
    AtomicWrite, AtomicWriteError, FencingToken, JournalError, JournalStore, Ownership,
    PersistentRepr, WriteRejection, MAX_SEQ_NR,
};
use futures::future::LocalBoxFuture;
use futures::{FutureExt, StreamExt};
use tokio::sync::oneshot;

use super::journal_actor::{CaseEvent, Observe, Observed, PersistEach, Persister, REFUSAL};
use super::recording::RecordingStore;
use super::{fresh_pid, now_millis, within};

const MAX: u64 = MAX_SEQ_NR;

// ---------------------------------------------------------------------------------------------
// The harness: a journal actor over the store under test, writers, and replays as values.

/// A [`JournalActor`] over the store under test.
pub(crate) struct JournalUnderTest {
    pub(crate) store: Arc<dyn JournalStore>,
    pub(crate) actor: Addr<JournalActor>,
}

/// The outcome of one replay: the events, and the highest sequence number reported with them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replayed {
    pub(crate) events: Vec<PersistentRepr>,
    pub(crate) highest: u64,
}

impl JournalUnderTest {
    /// Starts a journal actor (default settings) over `store` in the current Actix system.
    pub(crate) fn start(store: Arc<dyn JournalStore>) -> Self {
        let actor = JournalActor::start_with(Arc::clone(&store), JournalConfig::default());
        JournalUnderTest { store, actor }
    }

    /// Sends one [`WriteMessages`] and returns where its reply will arrive, so that several
    /// can be in flight at once.
    pub(crate) fn send_write(
        &self,
        incarnation: Incarnation,
        writes: Vec<AtomicWrite>,
    ) -> oneshot::Receiver<WriteMessagesReply> {
        let (reply_to, reply) = oneshot::channel();
        self.actor.do_send(WriteMessages {
            writes: writes.into(),
            incarnation,
            reply_to: reply_to.into(),
        });
        reply
    }

    /// Writes one batch and waits for its reply.
    pub(crate) async fn write(
        &self,
        what: &str,
        incarnation: Incarnation,
        writes: Vec<AtomicWrite>,
    ) -> WriteMessagesReply {
        await_reply(what, self.send_write(incarnation, writes)).await
    }

    /// `replay(from, to, max)` through [`ReplayMessages`], collected.
    pub(crate) async fn replay(&self, pid: &str, from: u64, to: u64, max: u64) -> Replayed {
        self.replay_of(pid, from, to, max, false).await
    }

    /// `replay(from, to, max)` through [`RecoveryReplay`] (`JournalStore::replay_for_recovery`),
    /// collected.
    pub(crate) async fn recovery_replay(
        &self,
        pid: &str,
        from: u64,
        to: u64,
        max: u64,
    ) -> Replayed {
        self.replay_of(pid, from, to, max, true).await
    }

    async fn replay_of(
        &self,
        pid: &str,
        from: u64,
        to: u64,
        max: u64,
        for_recovery: bool,
    ) -> Replayed {
        let what = format!("replay({from}, {to}, {max}) of {pid:?} (for recovery: {for_recovery})");
        let message = ReplayMessages {
            persistence_id: pid.to_owned(),
            from_seq_nr: from,
            to_seq_nr: to,
            max,
        };
        let answer = if for_recovery {
            within(&what, self.actor.send(RecoveryReplay(message))).await
        } else {
            within(&what, self.actor.send(message)).await
        };
        let replay = match answer {
            Ok(Ok(replay)) => replay,
            Ok(Err(e)) => panic!("{what} failed: {e}"),
            Err(e) => panic!("{what}: the journal actor is gone: {e}"),
        };
        let highest = replay.highest_seq_nr;
        let items: Vec<_> = within(&what, replay.events.collect()).await;
        let events = items
            .into_iter()
            .map(|item| item.unwrap_or_else(|e| panic!("{what}: the event stream failed: {e}")))
            .collect();
        Replayed { events, highest }
    }

    /// The highest sequence number through [`ReadHighestSequenceNr`].
    pub(crate) async fn highest(&self, pid: &str, from_seq_nr: u64) -> u64 {
        let what = format!("read highest sequence number of {pid:?}");
        let request = self.actor.send(ReadHighestSequenceNr {
            persistence_id: pid.to_owned(),
            from_seq_nr,
        });
        match within(&what, request).await {
            Ok(Ok(highest)) => highest,
            Ok(Err(e)) => panic!("{what} failed: {e}"),
            Err(e) => panic!("{what}: the journal actor is gone: {e}"),
        }
    }

    /// Takes ownership of `pid` through [`TakeOwnership`], expecting success.
    pub(crate) async fn take_ownership(&self, pid: &str) -> Ownership {
        let what = format!("take ownership of {pid:?}");
        match within(&what, self.send_take_ownership(pid)).await {
            Ok(Ok(ownership)) => ownership,
            Ok(Err(e)) => panic!("{what} failed: {e}"),
            Err(e) => panic!("{what}: the journal actor is gone: {e}"),
        }
    }

    /// Sends [`TakeOwnership`] for `pid` without waiting.
    fn send_take_ownership(&self, pid: &str) -> actix::dev::Request<JournalActor, TakeOwnership> {
        self.actor.send(TakeOwnership {
            persistence_id: pid.to_owned(),
        })
    }

    /// Deletes up to `to` through [`DeleteMessagesTo`] without a token (the suite's writes
    /// take no ownership), expecting success.
    pub(crate) async fn delete(&self, pid: &str, to: u64) {
        let what = format!("delete up to {to} of {pid:?}");
        if let Err(e) = self
            .delete_with(&what, pid, to, FencingToken::UNOWNED)
            .await
        {
            panic!("{what} failed: {e}");
        }
    }

    /// Deletes up to `to` through [`DeleteMessagesTo`] carrying `token`; the journal's answer.
    pub(crate) async fn delete_with(
        &self,
        what: &str,
        pid: &str,
        to: u64,
        token: FencingToken,
    ) -> Result<(), JournalError> {
        let request = self.actor.send(DeleteMessagesTo {
            persistence_id: pid.to_owned(),
            to_seq_nr: to,
            fencing_token: token,
        });
        match within(what, request).await {
            Ok(answer) => answer,
            Err(e) => panic!("{what}: the journal actor is gone: {e}"),
        }
    }
}

/// Waits for the reply of one [`WriteMessages`].
pub(crate) async fn await_reply(
    what: &str,
    reply: oneshot::Receiver<WriteMessagesReply>,
) -> WriteMessagesReply {
    match within(what, reply).await {
        Ok(reply) => reply,
        Err(_) => panic!("{what}: the journal dropped the reply channel without answering"),
    }
}

/// One writer: a persistence id, a writer id and an incarnation (as one persistent actor).
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    pub(crate) pid: String,
    pub(crate) writer_uuid: String,
    pub(crate) incarnation: Incarnation,
}

impl Writer {
    /// A new writer (a new incarnation with a new writer id) of `pid`.
    pub(crate) fn new(pid: impl Into<String>) -> Self {
        Writer {
            pid: pid.into(),
            writer_uuid: uuid::Uuid::new_v4().to_string(),
            incarnation: Incarnation::next(),
        }
    }

    /// Event `seq_nr` with `payload` as a JSON string.
    pub(crate) fn event(&self, seq_nr: u64, payload: &str) -> PersistentRepr {
        PersistentRepr {
            persistence_id: self.pid.as_str().into(),
            seq_nr,
            payload: json_string(payload),
            serializer_id: JSON_SERIALIZER_ID,
            manifest: String::new(),
            writer_uuid: self.writer_uuid.as_str().into(),
            timestamp: now_millis(),
            tags: Default::default(),
        }
    }

    /// Events `seq_nrs` with payloads `<prefix>-<seq_nr>`.
    pub(crate) fn events(
        &self,
        prefix: &str,
        seq_nrs: impl IntoIterator<Item = u64>,
    ) -> Vec<PersistentRepr> {
        seq_nrs
            .into_iter()
            .map(|seq_nr| self.event(seq_nr, &format!("{prefix}-{seq_nr}")))
            .collect()
    }
}

/// `value` serialized as a JSON string, as the persistent actor stores a `String` event.
pub(crate) fn json_string(value: &str) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|e| panic!("a string serializes as JSON: {e}"))
}

/// An atomic write of `events` (the suite builds only well-formed ones).
pub(crate) fn atomic(events: Vec<PersistentRepr>) -> AtomicWrite {
    AtomicWrite::new(events)
        .unwrap_or_else(|e| panic!("the suite built a malformed atomic write: {e}"))
}

/// How one atomic write ended.
#[derive(Debug)]
pub(crate) enum WriteOutcome {
    Stored,
    Rejected(WriteRejection),
    Failed(JournalError),
}

/// One outcome per atomic write of a reply to `writes` atomic writes; a batch-level failure is
/// a failure of each.
///
/// # Panics
/// When a completed reply holds a number of results other than `writes`.
pub(crate) fn outcomes(what: &str, reply: WriteMessagesReply, writes: usize) -> Vec<WriteOutcome> {
    match reply {
        WriteMessagesReply::Completed(results) => {
            assert_eq!(
                results.len(),
                writes,
                "{what}: exactly one result per atomic write (never one per event)"
            );
            results
                .into_iter()
                .map(|result| match result {
                    Ok(()) => WriteOutcome::Stored,
                    Err(AtomicWriteError::Rejected(r)) => WriteOutcome::Rejected(r),
                    Err(AtomicWriteError::Failed(e)) => WriteOutcome::Failed(e),
                })
                .collect()
        }
        WriteMessagesReply::Failed(e) => (0..writes)
            .map(|_| WriteOutcome::Failed(e.clone()))
            .collect(),
    }
}

/// Whether a reply is a batch-level success with one success per atomic write; `Err` says
/// what it was instead.
pub(crate) fn all_stored(
    what: &str,
    reply: WriteMessagesReply,
    writes: usize,
) -> Result<(), String> {
    match reply {
        WriteMessagesReply::Completed(results) => {
            if results.len() != writes {
                return Err(format!(
                    "{what}: {} results for {writes} atomic writes; there must be exactly one \
                     result per atomic write (never one per event)",
                    results.len()
                ));
            }
            match results
                .into_iter()
                .enumerate()
                .find_map(|(i, r)| r.err().map(|e| (i, e)))
            {
                Some((i, e)) => Err(format!("{what}: atomic write #{i} was not stored: {e}")),
                None => Ok(()),
            }
        }
        WriteMessagesReply::Failed(e) => Err(format!("{what}: the whole batch failed: {e}")),
    }
}

/// Checks a reply is a batch-level success with one success per atomic write.
pub(crate) fn expect_all_stored(what: &str, reply: WriteMessagesReply, writes: usize) {
    if let Err(message) = all_stored(what, reply, writes) {
        panic!("{message}");
    }
}

/// Checks the one atomic write of a reply failed: not stored, not rejected.
fn expect_failed(what: &str, reply: WriteMessagesReply) -> JournalError {
    match outcomes(what, reply, 1).pop() {
        Some(WriteOutcome::Failed(e)) => e,
        Some(WriteOutcome::Stored) => panic!("{what}: must fail, but the store reported success"),
        Some(WriteOutcome::Rejected(r)) => {
            panic!("{what}: must be a failure (the store could not store it), not a rejection: {r}")
        }
        None => unreachable!("outcomes() checked there is one result"),
    }
}

fn seq_nrs(events: &[PersistentRepr]) -> Vec<u64> {
    events.iter().map(|e| e.seq_nr).collect()
}

/// Checks a replay gave exactly `want` (byte-exact) and reported `highest`.
pub(crate) fn check_replay(what: &str, got: &Replayed, want: &[PersistentRepr], highest: u64) {
    assert_eq!(
        seq_nrs(&got.events),
        seq_nrs(want),
        "{what}: sequence numbers of the replayed events"
    );
    assert_eq!(
        got.events, want,
        "{what}: replayed events must be byte-exact copies of those written"
    );
    assert_eq!(
        got.highest, highest,
        "{what}: highest sequence number reported with the replay"
    );
}

/// The journal and the id every case starts from: events 1..5 stored.
pub(crate) struct Fixture {
    pub(crate) journal: JournalUnderTest,
    pub(crate) writer: Writer,
    /// Events 1..5 as written (index 0 holds seq 1).
    written: Vec<PersistentRepr>,
}

impl Fixture {
    pub(crate) fn pid(&self) -> &str {
        &self.writer.pid
    }

    /// The setup's events with these sequence numbers, as written.
    pub(crate) fn written(&self, seq_nrs: impl IntoIterator<Item = u64>) -> Vec<PersistentRepr> {
        seq_nrs
            .into_iter()
            .map(|s| self.written[(s - 1) as usize].clone())
            .collect()
    }

    /// `replay(from, to, max)` of the case's id.
    async fn replay(&self, from: u64, to: u64, max: u64) -> Replayed {
        self.journal.replay(self.pid(), from, to, max).await
    }

    /// `replay(from, to, max)` of the setup's id for a recovery ([`RecoveryReplay`]).
    async fn recovery_replay(&self, from: u64, to: u64, max: u64) -> Replayed {
        self.journal
            .recovery_replay(self.pid(), from, to, max)
            .await
    }

    /// Checks `replay(from, to, max)` gives the setup's events `want` and highest `highest`.
    async fn expect_replay(
        &self,
        case: &str,
        (from, to, max): (u64, u64, u64),
        want: impl IntoIterator<Item = u64>,
        highest: u64,
    ) {
        let got = self.replay(from, to, max).await;
        let what = format!("{case} replay({}, {}, {})", arg(from), arg(to), arg(max));
        check_replay(&what, &got, &self.written(want), highest);
    }
}

fn arg(n: u64) -> String {
    if n == MAX {
        "MAX".to_owned()
    } else {
        n.to_string()
    }
}

/// The setup of every case (see the [module docs](self)).
pub(crate) async fn setup(store: Arc<dyn JournalStore>) -> Fixture {
    let journal = JournalUnderTest::start(store);
    let writer = Writer::new(fresh_pid());
    let written = writer.events("a", 1..=5);
    let writes = vec![
        atomic(written[0..1].to_vec()),
        atomic(written[1..2].to_vec()),
        atomic(written[2..3].to_vec()),
        atomic(written[3..5].to_vec()),
    ];
    let other = Writer::new(fresh_pid());
    let ours = journal.send_write(writer.incarnation, writes);
    let theirs = journal.send_write(other.incarnation, vec![atomic(other.events("o", [1]))]);
    expect_all_stored(
        "setup: writing 1..5 as [1], [2], [3], [4, 5]",
        await_reply("setup write", ours).await,
        4,
    );
    expect_all_stored(
        "setup: another actor's write in the same journal",
        await_reply("setup: another actor's write", theirs).await,
        1,
    );
    Fixture {
        journal,
        writer,
        written,
    }
}

// ---------------------------------------------------------------------------------------------
// J1-J20: replay bounds, highest sequence numbers and deletes.

/// J1: replay(1, MAX, MAX) gives events 1..5, then highest 5.
pub async fn j01_replay_all(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.expect_replay("J1", (1, MAX, MAX), 1..=5, 5).await;
}

/// J2: replay(3, MAX, MAX) gives 3..5, highest 5.
pub async fn j02_replay_from_lower_bound(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.expect_replay("J2", (3, MAX, MAX), 3..=5, 5).await;
}

/// J3: replay(1, 3, MAX) gives 1..3, highest 5 (the bound never lowers the highest).
pub async fn j03_replay_to_upper_bound(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.expect_replay("J3", (1, 3, MAX), 1..=3, 5).await;
}

/// J4: replay(1, MAX, 3) gives 1..3, highest 5.
pub async fn j04_replay_with_max(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.expect_replay("J4", (1, MAX, 3), 1..=3, 5).await;
}

/// J5: replay(2, 3, MAX) gives 2..3, highest 5.
pub async fn j05_replay_between_bounds(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.expect_replay("J5", (2, 3, MAX), 2..=3, 5).await;
}

/// J6: replay(2, 5, 2) gives 2..3, highest 5.
pub async fn j06_replay_between_bounds_with_max(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.expect_replay("J6", (2, 5, 2), 2..=3, 5).await;
}

/// J7: replay(2, 2, MAX) gives 2, highest 5.
pub async fn j07_replay_single_event(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.expect_replay("J7", (2, 2, MAX), [2], 5).await;
}

/// J8: replay(2, 4, 1) gives 2, highest 5.
pub async fn j08_replay_max_one(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.expect_replay("J8", (2, 4, 1), [2], 5).await;
}

/// J9: replay(2, 4, 0) gives nothing, highest 5.
pub async fn j09_replay_max_zero(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.expect_replay("J9", (2, 4, 0), [], 5).await;
}

/// J10: replay(3, 2, MAX) (from above to) gives nothing, highest 5.
pub async fn j10_replay_empty_range(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.expect_replay("J10", (3, 2, MAX), [], 5).await;
}

/// J11: a replay of an id that never wrote gives nothing, highest 0.
pub async fn j11_replay_unknown_id(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    let never = fresh_pid();
    let got = f.journal.replay(&never, 1, MAX, MAX).await;
    check_replay("J11 replay of an id that never wrote", &got, &[], 0);
    assert_eq!(
        f.journal.highest(&never, 0).await,
        0,
        "J11: highest sequence number of an id that never wrote"
    );
}

/// J12: reading the highest sequence number without replaying gives 5 (whatever the hint up
/// to it), and delivers no event.
pub async fn j12_read_highest_without_replay(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    for hint in [0, 1, 3, 5] {
        assert_eq!(
            f.journal.highest(f.pid(), hint).await,
            5,
            "J12: highest sequence number read with hint {hint}"
        );
    }
}

/// J13: delete up to 3 succeeds; replay(1, MAX, MAX) gives 4, 5, highest 5.
pub async fn j13_delete_then_replay(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.journal.delete(f.pid(), 3).await;
    f.expect_replay("J13 after delete up to 3:", (1, MAX, MAX), 4..=5, 5)
        .await;
}

/// J14: replay 1..5, delete up to 3, replay again: 4, 5, highest 5 (a delete never resets the
/// highest).
pub async fn j14_delete_keeps_highest(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.expect_replay("J14 before the delete:", (1, MAX, MAX), 1..=5, 5)
        .await;
    f.journal.delete(f.pid(), 3).await;
    f.expect_replay("J14 after delete up to 3:", (1, MAX, MAX), 4..=5, 5)
        .await;
    assert_eq!(
        f.journal.highest(f.pid(), 0).await,
        5,
        "J14: highest sequence number after delete up to 3"
    );
}

/// J15: delete up to MAX; replay gives nothing, highest 5.
pub async fn j15_delete_all(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.journal.delete(f.pid(), MAX).await;
    f.expect_replay("J15 after delete up to MAX:", (1, MAX, MAX), [], 5)
        .await;
    assert_eq!(
        f.journal.highest(f.pid(), 0).await,
        5,
        "J15: highest sequence number after delete up to MAX"
    );
}

/// J16: delete up to 3; replay(3, MAX, MAX) gives 4, 5, highest 5.
pub async fn j16_delete_then_replay_from_deleted(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.journal.delete(f.pid(), 3).await;
    f.expect_replay("J16 after delete up to 3:", (3, MAX, MAX), 4..=5, 5)
        .await;
}

/// J17: delete up to 3; replay(1, 2, MAX) gives nothing, highest 5.
pub async fn j17_delete_then_replay_deleted_range(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.journal.delete(f.pid(), 3).await;
    f.expect_replay("J17 after delete up to 3:", (1, 2, MAX), [], 5)
        .await;
}

/// J18: delete up to 3; replay(1, 3, MAX) gives nothing, highest 5.
pub async fn j18_delete_then_replay_up_to_deleted(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.journal.delete(f.pid(), 3).await;
    f.expect_replay("J18 after delete up to 3:", (1, 3, MAX), [], 5)
        .await;
}

/// J19: delete up to 3; replay(4, MAX, MAX) gives 4, 5, highest 5.
pub async fn j19_delete_then_replay_after_deleted(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.journal.delete(f.pid(), 3).await;
    f.expect_replay("J19 after delete up to 3:", (4, MAX, MAX), 4..=5, 5)
        .await;
}

/// J20: delete up to 3; replay(1, 4, MAX) gives 4, highest 5.
pub async fn j20_delete_then_replay_across_deleted(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.journal.delete(f.pid(), 3).await;
    f.expect_replay("J20 after delete up to 3:", (1, 4, MAX), [4], 5)
        .await;
}

// ---------------------------------------------------------------------------------------------
// J21-J27: rejections, atomicity, second writers, ids and metadata.

/// J21: a persistent actor persists 6, an unserializable 7 and 8 with three `persist` calls in
/// one command: 6 succeeds, 7 is rejected, 8 succeeds, all in one batch that succeeds (7 never
/// reaches the store); the actor goes on; 7 is not stored and the highest is 8.
pub async fn j21_unserializable_event_is_rejected(store: Arc<dyn JournalStore>) {
    let (recording, log) = RecordingStore::new(store);
    let f = setup(Arc::new(recording)).await;
    let batches_before = log.writes().len();

    let state = |f: &Fixture| {
        PersistenceState::new(f.journal.actor.clone(), f.pid())
            .unwrap_or_else(|e| panic!("J21: the suite's persistence id is valid: {e}"))
    };
    let persister = Persister {
        persistence: state(&f),
        applied: Vec::new(),
        rejected: Vec::new(),
        failures: 0,
    }
    .start();
    let named = |s: &str| CaseEvent::Named(s.to_owned());
    let command = PersistEach(vec![
        named("a-6"),
        CaseEvent::Unserializable("a-7".to_owned()),
        named("a-8"),
    ]);
    let outcomes = within("J21 persist of 6, 7, 8", persister.send(command))
        .await
        .unwrap_or_else(|e| panic!("J21: the persistent actor stopped: {e}"));

    assert_eq!(outcomes.len(), 3, "J21: one outcome per persist");
    match &outcomes[0] {
        Ok(event) => assert_eq!(event, &named("a-6"), "J21: event 6's handler"),
        Err(e) => panic!("J21: event 6 must be stored, got {e}"),
    }
    match &outcomes[1] {
        Err(PersistError::Rejected(rejection)) => {
            assert_eq!(rejection.seq_nr, 7, "J21: the rejection names event 7");
            assert!(
                rejection.reason.contains(REFUSAL),
                "J21: the rejection says why: {:?}",
                rejection.reason
            );
        }
        Err(e) => panic!("J21: event 7 must be rejected, not {e}"),
        Ok(_) => panic!("J21: event 7 cannot be serialized, yet its handler ran"),
    }
    match &outcomes[2] {
        Ok(event) => assert_eq!(event, &named("a-8"), "J21: event 8's handler"),
        Err(e) => panic!("J21: event 8 must be stored, got {e}"),
    }

    let batches = log.writes();
    let batches = &batches[batches_before..];
    assert_eq!(
        batches.len(),
        1,
        "J21: the command's writes reach the store as one batch"
    );
    assert_eq!(
        batches[0].seq_nrs,
        vec![vec![6], vec![8]],
        "J21: the store sees the atomic writes of 6 and 8 only (7 is rejected before it)"
    );
    match &batches[0].answer {
        Ok(results) => {
            assert_eq!(results.len(), 2, "J21: the store's results for [6], [8]");
            assert!(
                results.iter().all(|r| r.is_ok()),
                "J21: the store stores 6 and 8: {results:?}"
            );
        }
        Err(e) => panic!("J21: the batch holding 6 and 8 must succeed, got {e}"),
    }

    let mut expected_applied: Vec<_> = (1..=6).map(|n| named(&format!("a-{n}"))).collect();
    expected_applied.push(named("a-8"));
    let observed = within("J21 observing the actor", persister.send(Observe))
        .await
        .unwrap_or_else(|e| panic!("J21: the actor must go on after a rejection: {e}"));
    assert_eq!(
        observed,
        Observed {
            applied: expected_applied.clone(),
            rejected_seq_nrs: vec![7],
            failures: 0,
            last_seq_nr: 8,
        },
        "J21: what the actor applied (recovered 1..5, then 6 and 8) and was told"
    );

    let got = f.replay(1, MAX, MAX).await;
    assert_eq!(
        seq_nrs(&got.events),
        vec![1, 2, 3, 4, 5, 6, 8],
        "J21: stored events (7 is not stored)"
    );
    assert_eq!(got.highest, 8, "J21: highest sequence number");
    assert_eq!(got.events[5].payload, json_string("a-6"), "J21: event 6");
    assert_eq!(got.events[6].payload, json_string("a-8"), "J21: event 8");
    check_replay("J21 replay(7, 7, MAX)", &f.replay(7, 7, MAX).await, &[], 8);

    let next = Persister {
        persistence: state(&f),
        applied: Vec::new(),
        rejected: Vec::new(),
        failures: 0,
    }
    .start();
    let recovered = within("J21 observing a new incarnation", next.send(Observe))
        .await
        .unwrap_or_else(|e| panic!("J21: a new incarnation must recover: {e}"));
    assert_eq!(
        (recovered.applied, recovered.last_seq_nr),
        (expected_applied, 8),
        "J21: a new incarnation recovers 1..6 and 8, last sequence number 8"
    );
}

/// J22: atomic writes of 1, 2, 3 and 10 events in one batch get exactly one result each (never
/// one per event), through the journal and from the store itself, and all their events are
/// stored.
pub async fn j22_one_result_per_atomic_write(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    let sizes = [1u64, 2, 3, 10];
    let batch = |writer: &Writer, first: u64| {
        let mut next = first;
        sizes
            .iter()
            .map(|&k| {
                let write = atomic(writer.events("k", next..next + k));
                next += k;
                write
            })
            .collect::<Vec<_>>()
    };

    let writes = batch(&f.writer, 6);
    let written: Vec<_> = writes.iter().flat_map(|w| w.events.clone()).collect();
    let reply = f
        .journal
        .write(
            "J22 write of [6], [7, 8], [9..11], [12..21]",
            f.writer.incarnation,
            writes,
        )
        .await;
    expect_all_stored("J22 atomic writes of 1, 2, 3 and 10 events", reply, 4);
    let mut want = f.written(1..=5);
    want.extend(written);
    check_replay(
        "J22 replay(1, MAX, MAX)",
        &f.replay(1, MAX, MAX).await,
        &want,
        21,
    );

    let other = Writer::new(fresh_pid());
    let writes = batch(&other, 1);
    let written: Vec<_> = writes.iter().flat_map(|w| w.events.clone()).collect();
    let results = within(
        "J22 write at the store",
        f.journal.store.write_messages(writes),
    )
    .await
    .unwrap_or_else(|e| panic!("J22: the store failed the batch: {e}"));
    assert_eq!(
        results.len(),
        4,
        "J22: the store returns exactly one result per atomic write (never one per event)"
    );
    for (i, result) in results.iter().enumerate() {
        if let Err(e) = result {
            panic!("J22: the store did not store atomic write #{i}: {e}");
        }
    }
    let got = f.journal.replay(&other.pid, 1, MAX, MAX).await;
    check_replay("J22 replay of the store-level write", &got, &written, 16);
}

/// J23: an atomic write whose storage fails on its 2nd event (the store already holds that
/// sequence number) stores none of its events, is a failure and not a rejection, and leaves
/// the highest unchanged; the store then accepts the free sequence numbers.
pub async fn j23_failed_atomic_write_stores_nothing(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    let intruder = Writer::new(f.pid());
    let seven = intruder.event(7, "z-7");
    let reply = f
        .journal
        .write(
            "J23 write of 7",
            intruder.incarnation,
            vec![atomic(vec![seven.clone()])],
        )
        .await;
    expect_all_stored("J23: a write of 7 alone", reply, 1);

    let failing = f.writer.events("a", 6..=8);
    let reply = f
        .journal
        .write(
            "J23 write of [6, 7, 8]",
            f.writer.incarnation,
            vec![atomic(failing.clone())],
        )
        .await;
    expect_failed("J23 atomic write [6, 7, 8] whose 2nd event is taken", reply);

    let mut want = f.written(1..=5);
    want.push(seven.clone());
    check_replay(
        "J23 after the failed write: none of its events stored, highest unchanged",
        &f.replay(1, MAX, MAX).await,
        &want,
        7,
    );

    for event in [failing[0].clone(), failing[2].clone()] {
        let seq_nr = event.seq_nr;
        let reply = f
            .journal
            .write(
                "J23 write after the fault",
                f.writer.incarnation,
                vec![atomic(vec![event])],
            )
            .await;
        expect_all_stored(
            &format!("J23: {seq_nr} is free after the failure"),
            reply,
            1,
        );
    }
    let want = [
        f.written(1..=5),
        vec![failing[0].clone(), seven, failing[2].clone()],
    ]
    .concat();
    check_replay("J23 at the end", &f.replay(1, MAX, MAX).await, &want, 8);
}

/// J24: a write of sequence number 5, already held, by a second writer (through a second
/// journal over the same store) fails, never overwrites; and when two writers race for 6,
/// exactly one wins and its event is the one stored.
pub async fn j24_second_writer_fails(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    let second = JournalUnderTest::start(Arc::clone(&f.journal.store));
    let b = Writer::new(f.pid());

    let reply = second
        .write(
            "J24 second writer's 5",
            b.incarnation,
            vec![atomic(b.events("b", [5]))],
        )
        .await;
    expect_failed("J24 a second writer's write of 5, already stored", reply);
    check_replay(
        "J24 the first event 5 is kept",
        &f.replay(1, MAX, MAX).await,
        &f.written(1..=5),
        5,
    );

    let a6 = f.writer.event(6, "a-6");
    let b6 = b.event(6, "b-6");
    let from_a = f
        .journal
        .send_write(f.writer.incarnation, vec![atomic(vec![a6.clone()])]);
    let from_b = second.send_write(b.incarnation, vec![atomic(vec![b6.clone()])]);
    let a = outcomes(
        "J24 race: first writer",
        await_reply("J24 race", from_a).await,
        1,
    );
    let b = outcomes(
        "J24 race: second writer",
        await_reply("J24 race", from_b).await,
        1,
    );
    let winner = match (&a[0], &b[0]) {
        (WriteOutcome::Stored, WriteOutcome::Failed(_)) => a6,
        (WriteOutcome::Failed(_), WriteOutcome::Stored) => b6,
        other => panic!(
            "J24: two writers of 6: exactly one must succeed and the other fail \
             (not be rejected), got {other:?}"
        ),
    };
    check_replay(
        "J24 after the race for 6",
        &f.replay(6, MAX, MAX).await,
        &[winner],
        6,
    );
}

/// J28: within one batch, once an atomic write of an id failed (here: its sequence number 6 is
/// taken by another writer), no later write of that id is stored: each fails with
/// [`JournalError::EarlierWriteFailed`] (stored, its events would follow a hole that no
/// recovery can see); the write of another id between them is stored.
pub async fn j28_no_write_of_an_id_after_its_failed_one(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    let intruder = Writer::new(f.pid());
    let six = intruder.event(6, "z-6");
    let reply = f
        .journal
        .write(
            "J28 write of 6",
            intruder.incarnation,
            vec![atomic(vec![six.clone()])],
        )
        .await;
    expect_all_stored("J28: a write of 6 alone", reply, 1);

    let other = Writer::new(fresh_pid());
    let other_events = other.events("o", [1]);
    let reply = f
        .journal
        .write(
            "J28 batch [6] [other 1] [7, 8] [9]",
            f.writer.incarnation,
            vec![
                atomic(f.writer.events("a", [6])),
                atomic(other_events.clone()),
                atomic(f.writer.events("a", 7..=8)),
                atomic(f.writer.events("a", [9])),
            ],
        )
        .await;
    let got = outcomes("J28 batch", reply, 4);
    assert!(
        matches!(&got[0], WriteOutcome::Failed(_)),
        "J28: the write of 6, already stored, must fail, got {:?}",
        got[0]
    );
    assert!(
        matches!(&got[1], WriteOutcome::Stored),
        "J28: the write of another id in the batch must be stored, got {:?}",
        got[1]
    );
    for (i, first) in [(2, 7), (3, 9)] {
        match &got[i] {
            WriteOutcome::Failed(JournalError::EarlierWriteFailed {
                persistence_id,
                seq_nr,
            }) if *persistence_id == f.pid() && *seq_nr == first => {}
            other => panic!(
                "J28: the write of {first}.. after the failed write of its id must fail with \
                 EarlierWriteFailed (not be stored after a hole), got {other:?}"
            ),
        }
    }
    check_replay(
        "J28: nothing of the id stored after its failed write",
        &f.replay(1, MAX, MAX).await,
        &[f.written(1..=5), vec![six]].concat(),
        6,
    );
    check_replay(
        "J28: the other id's write",
        &f.journal.replay(&other.pid, 1, MAX, MAX).await,
        &other_events,
        1,
    );
}

/// J30: [`JournalStore::read_replay_bounds`], which every replay reads first, answers what
/// `read_highest_sequence_nr` and `read_deleted_to` answer: before a delete, after a delete
/// up to 3 and for an id that never wrote. A store that reads both in one round trip must not
/// read something else.
pub async fn j30_replay_bounds_agree_with_their_reads(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    let unknown = format!("{}-never-wrote", f.pid());
    let check = |stage: &'static str| {
        let (store, pid, unknown) = (
            Arc::clone(&f.journal.store),
            f.pid().to_owned(),
            unknown.clone(),
        );
        async move {
            for id in [pid.as_str(), unknown.as_str()] {
                let what = format!("J30 {stage}: bounds of {id:?}");
                let bounds = within(&what, store.read_replay_bounds(id, 0))
                    .await
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let highest = within(&what, store.read_highest_sequence_nr(id, 0))
                    .await
                    .unwrap_or_else(|e| panic!("{what}: highest: {e}"));
                let deleted_to = within(&what, store.read_deleted_to(id))
                    .await
                    .unwrap_or_else(|e| panic!("{what}: deleted to: {e}"));
                assert_eq!(
                    (bounds.highest_seq_nr, bounds.deleted_to),
                    (highest, deleted_to),
                    "{what}: read_replay_bounds must answer (read_highest_sequence_nr, \
                     read_deleted_to)"
                );
            }
        }
    };
    check("before a delete").await;
    f.journal.delete(f.pid(), 3).await;
    check("after a delete up to 3").await;
    let bounds = within("J30 bounds", f.journal.store.read_replay_bounds(f.pid(), 0))
        .await
        .unwrap_or_else(|e| panic!("J30 bounds: {e}"));
    assert_eq!(
        bounds.highest_seq_nr, 5,
        "J30: the highest stays 5 after the delete"
    );
    if let Some(deleted_to) = bounds.deleted_to {
        assert_eq!(deleted_to, 3, "J30: deleted up to 3");
    }
}

/// J29: a sequence number once deleted stays used: after a delete up to 3, a write of 2..3,
/// a lone write of 1 and a write of 3 in a batch fail with [`JournalError::ConcurrentWrite`]
/// and store nothing, while the write of another id in the batch and the next number (6) are
/// stored. Stored, the event would sit below events already delivered to a query and replayed,
/// never seen by a query resumed past them, and lost again to the next recovery from a snapshot.
pub async fn j29_a_deleted_sequence_number_is_not_written_again(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    f.journal.delete(f.pid(), 3).await;
    // Two events, then a lone one (the one-row write path of the SQL stores).
    for (what, seq_nrs) in [("2..3", 2..=3), ("lone 1", 1..=1)] {
        let what = format!("J29 write of {what} after delete up to 3");
        let write = atomic(f.writer.events("again", seq_nrs.clone()));
        let reply = f
            .journal
            .write(&what, f.writer.incarnation, vec![write])
            .await;
        expect_concurrent_write(&what, &outcomes(&what, reply, 1)[0], *seq_nrs.start());
    }

    let other = Writer::new(fresh_pid());
    let other_events = other.events("o", [1]);
    let batch = vec![
        atomic(f.writer.events("again", [3])),
        atomic(other_events.clone()),
    ];
    let reply = f
        .journal
        .write("J29 batch [3] [other 1]", f.writer.incarnation, batch)
        .await;
    let got = outcomes("J29 batch", reply, 2);
    expect_concurrent_write("J29 write of 3 in a batch", &got[0], 3);
    assert!(
        matches!(&got[1], WriteOutcome::Stored),
        "J29: the write of another id in the batch must be stored, got {:?}",
        got[1]
    );
    let six = f.writer.events("a", [6]);
    let reply = f
        .journal
        .write(
            "J29 write of 6",
            f.writer.incarnation,
            vec![atomic(six.clone())],
        )
        .await;
    expect_all_stored("J29: the next number after the highest", reply, 1);
    check_replay(
        "J29: nothing stored at the deleted numbers",
        &f.replay(1, MAX, MAX).await,
        &[f.written(4..=5), six].concat(),
        6,
    );
    check_replay(
        "J29: the other id's write",
        &f.journal.replay(&other.pid, 1, MAX, MAX).await,
        &other_events,
        1,
    );
}

/// Checks an atomic write failed with [`JournalError::ConcurrentWrite`] at `seq_nr`.
fn expect_concurrent_write(what: &str, got: &WriteOutcome, seq_nr: u64) {
    assert!(
        matches!(got, WriteOutcome::Failed(JournalError::ConcurrentWrite { seq_nr: at, .. }) if *at == seq_nr),
        "{what}: must fail with ConcurrentWrite at {seq_nr} (a deleted number stays used), got {got:?}"
    );
}

/// The persistence ids of J25, all prefixed with `run`.
fn tricky_ids(run: &str) -> Vec<String> {
    [
        "-a",
        "-A",
        "-a-b",
        "-a-b-1",
        "/a/b",
        "\\a\\b",
        "'a'",
        "\"a\"",
        "-ünïcødé-日本-🦀",
        "-a%",
        "-a_",
        "-a ",
    ]
    .iter()
    .map(|suffix| format!("{run}{suffix}"))
    .collect()
}

/// J25: ids that differ only by case or by a suffix (`a`, `a-b`, `a-b-1`), or hold `/`, `\`,
/// quotes or non-ASCII (and, beyond the list, SQL `LIKE` wildcards `%`, `_` and a trailing
/// space) each replay only their own events, byte-exact, with their own highest.
pub async fn j25_persistence_ids_are_byte_exact(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    let run = format!("r-{}", uuid::Uuid::new_v4());
    let ids = tricky_ids(&run);
    let mut expected = Vec::new();
    let mut replies = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let writer = Writer::new(id.clone());
        let count = i as u64 % 3 + 1;
        let events: Vec<_> = (1..=count)
            .map(|seq_nr| writer.event(seq_nr, &format!("{id}#{seq_nr}")))
            .collect();
        let writes = events.iter().map(|e| atomic(vec![e.clone()])).collect();
        replies.push((id, f.journal.send_write(writer.incarnation, writes), count));
        expected.push((id, events));
    }
    for (id, reply, count) in replies {
        let reply = await_reply("J25 write", reply).await;
        expect_all_stored(&format!("J25 write of {id:?}"), reply, count as usize);
    }
    for (id, events) in expected {
        let highest = events.len() as u64;
        let got = f.journal.replay(id, 1, MAX, MAX).await;
        check_replay(&format!("J25 replay of {id:?}"), &got, &events, highest);
        assert_eq!(
            f.journal.highest(id, 0).await,
            highest,
            "J25: highest sequence number of {id:?}"
        );
    }
    check_replay(
        "J25 the setup's id is untouched",
        &f.replay(1, MAX, MAX).await,
        &f.written(1..=5),
        5,
    );
}

/// J26: metadata (writer id, timestamp in ms, tags, serializer id, manifest) and binary
/// payloads survive write and replay unchanged.
pub async fn j26_metadata_round_trip(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    let writer_uuid = format!("writer-{}-ünï", uuid::Uuid::new_v4());
    let event =
        |seq_nr, payload: Vec<u8>, serializer_id, manifest: &str, timestamp, tags: &[&str]| {
            PersistentRepr {
                persistence_id: f.pid().into(),
                seq_nr,
                payload,
                serializer_id,
                manifest: manifest.to_owned(),
                writer_uuid: writer_uuid.as_str().into(),
                timestamp,
                tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            }
        };
    let written = vec![
        event(
            6,
            vec![0, 159, 146, 150, 255, 0, 10, 13, 92, 34, 39],
            4242,
            "com.example.Évent/v2",
            1_234_567_890_123,
            &["blue", "tag with space", "ünï", "with,comma", "quote\"d"],
        ),
        event(
            7,
            br#"{"k":1}"#.to_vec(),
            u32::MAX,
            "",
            now_millis(),
            &["blue"],
        ),
        event(8, json_string("a-8"), JSON_SERIALIZER_ID, "m", 1, &[]),
    ];
    let writes = vec![
        atomic(written[0..2].to_vec()),
        atomic(written[2..].to_vec()),
    ];
    let reply = f
        .journal
        .write("J26 write of [6, 7], [8]", f.writer.incarnation, writes)
        .await;
    expect_all_stored("J26 write of events with metadata", reply, 2);

    let got = f.replay(6, MAX, MAX).await;
    assert_eq!(seq_nrs(&got.events), vec![6, 7, 8], "J26: replayed events");
    for (got, want) in got.events.iter().zip(&written) {
        let n = want.seq_nr;
        assert_eq!(got.writer_uuid, want.writer_uuid, "J26: writer id of {n}");
        assert_eq!(got.timestamp, want.timestamp, "J26: timestamp of {n}");
        assert_eq!(got.tags, want.tags, "J26: tags of {n} (in order)");
        assert_eq!(
            got.serializer_id, want.serializer_id,
            "J26: serializer id of {n}"
        );
        assert_eq!(got.manifest, want.manifest, "J26: manifest of {n}");
        assert_eq!(got.payload, want.payload, "J26: payload bytes of {n}");
        assert_eq!(got, want, "J26: event {n} as a whole");
    }
    assert_eq!(got.highest, 8, "J26: highest sequence number");

    // A recovery's replay: the same events, each with its tags or none (a store may skip
    // reading them: a recovering actor never does).
    let recovered = f.recovery_replay(6, MAX, MAX).await;
    assert_eq!(
        recovered.highest, 8,
        "J26: highest sequence number (recovery)"
    );
    assert_eq!(
        recovered.events.len(),
        written.len(),
        "J26: recovery replay"
    );
    for (got, want) in recovered.events.iter().zip(&written) {
        let n = want.seq_nr;
        assert!(
            got.tags == want.tags || got.tags.is_empty(),
            "J26: tags of {n} in a recovery replay: {:?}",
            got.tags
        );
        let mut got = got.clone();
        got.tags.clone_from(&want.tags);
        assert_eq!(
            &got, want,
            "J26: event {n} of a recovery replay, tags aside"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// F1-F5: one writer per persistence id, enforced by the store (fencing), for writes and deletes.

/// An atomic write of `events` carrying `token`.
fn fenced_write(events: Vec<PersistentRepr>, token: FencingToken) -> AtomicWrite {
    atomic(events).with_fencing_token(token)
}

/// Checks the one atomic write of a reply failed with [`JournalError::Fenced`] for `pid`.
fn expect_fenced(what: &str, reply: WriteMessagesReply, pid: &str) {
    match expect_failed(what, reply) {
        JournalError::Fenced { persistence_id, .. } => assert_eq!(
            persistence_id, pid,
            "{what}: the fenced error must name the persistence id written to"
        ),
        other => panic!(
            "{what}: a write with a fencing token older than the owner epoch must fail with \
             JournalError::Fenced (whatever its sequence numbers), got: {other}"
        ),
    }
}

/// F1: taking ownership raises the owner epoch every time (the new token is above every
/// earlier one, and above [`FencingToken::UNOWNED`]) and reads the highest sequence number (5
/// after the setup, 0 for an id that never wrote); it never lowers the highest.
pub async fn f01_ownership_raises_the_epoch(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    let first = f.journal.take_ownership(f.pid()).await;
    assert!(
        first.fencing_token > FencingToken::UNOWNED,
        "F1: ownership must give a token above UNOWNED (0), got {} (a store that does not \
         override JournalStore::take_ownership does not fence)",
        first.fencing_token
    );
    assert_eq!(
        first.highest_seq_nr, 5,
        "F1: highest sequence number with ownership"
    );
    let second = f.journal.take_ownership(f.pid()).await;
    assert!(
        second.fencing_token > first.fencing_token,
        "F1: every ownership take raises the epoch: {} then {}",
        first.fencing_token,
        second.fencing_token
    );
    assert_eq!(second.highest_seq_nr, 5, "F1: the highest is unchanged");
    let fresh = f.journal.take_ownership(&fresh_pid()).await;
    assert_eq!(
        fresh.highest_seq_nr, 0,
        "F1: an id that never wrote has highest 0"
    );
    assert!(
        fresh.fencing_token > FencingToken::UNOWNED,
        "F1: token of a fresh id"
    );
    f.expect_replay("F1 after ownership", (1, MAX, MAX), 1..=5, 5)
        .await;
}

/// F2: after B took ownership over A, A's writes fail with [`JournalError::Fenced`] and store
/// nothing, whether their sequence number is free (6, 100) or taken (5); so does a write
/// without a token; B's write of 6 then succeeds.
pub async fn f02_older_token_is_fenced_and_stores_nothing(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    let a = f.journal.take_ownership(f.pid()).await.fencing_token;
    let b = f.journal.take_ownership(f.pid()).await.fencing_token;
    let stale = Writer::new(f.pid());
    for (seq_nr, what) in [
        (6, "F2 stale owner's write of 6 (free)"),
        (100, "F2 stale owner's write of 100 (free, with a gap)"),
        (5, "F2 stale owner's write of 5 (taken)"),
    ] {
        let write = fenced_write(stale.events("stale", [seq_nr]), a);
        let reply = f.journal.write(what, stale.incarnation, vec![write]).await;
        expect_fenced(what, reply, f.pid());
    }
    let unowned = atomic(stale.events("unowned", [6]));
    let reply = f
        .journal
        .write("F2 write without a token", stale.incarnation, vec![unowned])
        .await;
    expect_fenced("F2 a write without a token to an owned id", reply, f.pid());
    f.expect_replay("F2 nothing of the fenced writes", (1, MAX, MAX), 1..=5, 5)
        .await;

    let owner = Writer::new(f.pid());
    let six = owner.events("b", [6]);
    let reply = f
        .journal
        .write(
            "F2 owner's 6",
            owner.incarnation,
            vec![fenced_write(six.clone(), b)],
        )
        .await;
    expect_all_stored("F2 the owner's write of 6", reply, 1);
    check_replay("F2 the owner's 6", &f.replay(6, MAX, MAX).await, &six, 6);
}

/// F3: a write of the old owner committed before the new owner took over is at or below the
/// new owner's highest sequence number and replayed by it; the new owner continues after it,
/// and the old owner is fenced from then on. A write racing with the takeover ends either way,
/// never in between: stored and seen by the new owner, or fenced and not stored.
pub async fn f03_write_before_takeover_is_replayed(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    let old = Writer::new(f.pid());
    let a = f.journal.take_ownership(f.pid()).await.fencing_token;
    let six = old.events("old", [6]);
    let reply = f
        .journal
        .write(
            "F3 old owner's 6",
            old.incarnation,
            vec![fenced_write(six.clone(), a)],
        )
        .await;
    expect_all_stored("F3 the old owner's 6 before the takeover", reply, 1);

    let b = f.journal.take_ownership(f.pid()).await;
    assert_eq!(
        b.highest_seq_nr, 6,
        "F3: the new owner's highest includes the old 6"
    );
    check_replay(
        "F3 the new owner replays 6",
        &f.replay(6, MAX, MAX).await,
        &six,
        6,
    );
    let new = Writer::new(f.pid());
    let seven = new.events("new", [7]);
    let reply = f
        .journal
        .write(
            "F3 new owner's 7",
            new.incarnation,
            vec![fenced_write(seven.clone(), b.fencing_token)],
        )
        .await;
    expect_all_stored("F3 the new owner's first write after the old 6", reply, 1);
    let reply = f
        .journal
        .write(
            "F3 old owner's 8",
            old.incarnation,
            vec![fenced_write(old.events("old", [8]), a)],
        )
        .await;
    expect_fenced("F3 the old owner after the takeover", reply, f.pid());

    // The race: the current owner's 8 and a third takeover sent together.
    let c_writer = Writer::new(f.pid());
    let eight = c_writer.events("racing", [8]);
    let racing = f.journal.send_write(
        c_writer.incarnation,
        vec![fenced_write(eight.clone(), b.fencing_token)],
    );
    let takeover = f.journal.send_take_ownership(f.pid());
    let raced = outcomes("F3 race", await_reply("F3 racing write", racing).await, 1);
    let c = match within("F3 racing takeover", takeover).await {
        Ok(Ok(ownership)) => ownership,
        other => panic!("F3 racing takeover failed: {other:?}"),
    };
    let replayed = f.replay(8, MAX, MAX).await;
    match &raced[0] {
        WriteOutcome::Stored => {
            assert_eq!(
                c.highest_seq_nr, 8,
                "F3 race: a stored 8 is seen by the takeover"
            );
            check_replay("F3 race: stored 8", &replayed, &eight, 8);
        }
        WriteOutcome::Failed(JournalError::Fenced { .. }) => {
            assert_eq!(c.highest_seq_nr, 7, "F3 race: a fenced 8 is not counted");
            check_replay("F3 race: fenced 8", &replayed, &[], 7);
        }
        other => panic!("F3 race: the racing write must be stored or fenced, got {other:?}"),
    }
}

/// F4: in one batch, a stale owner's write fails alone with [`JournalError::Fenced`] while
/// the current owner's write of the same id and a write of another id are stored.
pub async fn f04_fenced_write_fails_alone_in_a_batch(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    let a = f.journal.take_ownership(f.pid()).await.fencing_token;
    let b = f.journal.take_ownership(f.pid()).await.fencing_token;
    let stale = Writer::new(f.pid());
    let owner = Writer::new(f.pid());
    let other = Writer::new(fresh_pid());
    let six = owner.events("b", [6]);
    let theirs = other.events("o", [1, 2]);
    let writes = vec![
        fenced_write(stale.events("stale", [6]), a),
        fenced_write(six.clone(), b),
        atomic(theirs.clone()),
    ];
    let reply = f
        .journal
        .write("F4 mixed batch", owner.incarnation, writes)
        .await;
    let got = outcomes("F4 mixed batch", reply, 3);
    assert!(
        matches!(&got[0], WriteOutcome::Failed(JournalError::Fenced { .. })),
        "F4: the stale owner's write must be fenced, got {:?}",
        got[0]
    );
    assert!(
        matches!(got[1], WriteOutcome::Stored),
        "F4: the owner's write in the same batch must be stored, got {:?}",
        got[1]
    );
    assert!(
        matches!(got[2], WriteOutcome::Stored),
        "F4: another id's write in the same batch must be stored, got {:?}",
        got[2]
    );
    check_replay("F4 the owner's 6", &f.replay(6, MAX, MAX).await, &six, 6);
    let other_replay = f.journal.replay(&other.pid, 1, MAX, MAX).await;
    check_replay("F4 the other id", &other_replay, &theirs, 2);
}

/// F5: after B took ownership over A, A's delete fails with [`JournalError::Fenced`] and
/// deletes nothing (replay and highest unchanged, no deleted-to mark); so does a delete
/// without a token; B's delete then deletes.
pub async fn f05_older_token_deletes_nothing(store: Arc<dyn JournalStore>) {
    let f = setup(store).await;
    let a = f.journal.take_ownership(f.pid()).await.fencing_token;
    let b = f.journal.take_ownership(f.pid()).await.fencing_token;
    for (token, to, what) in [
        (a, 3, "F5 stale owner's delete up to 3"),
        (a, MAX, "F5 stale owner's delete of all"),
        (FencingToken::UNOWNED, 3, "F5 delete without a token"),
    ] {
        match f.journal.delete_with(what, f.pid(), to, token).await {
            Err(JournalError::Fenced { persistence_id, .. }) => assert_eq!(
                persistence_id,
                f.pid(),
                "{what}: the fenced error must name the persistence id"
            ),
            other => panic!(
                "{what}: a delete with a fencing token older than the owner epoch must fail \
                 with JournalError::Fenced and delete nothing, got {other:?}"
            ),
        }
    }
    f.expect_replay("F5 nothing deleted", (1, MAX, MAX), 1..=5, 5)
        .await;
    if let Ok(Some(deleted_to)) = f.journal.store.read_deleted_to(f.pid()).await {
        assert_eq!(deleted_to, 0, "F5: no deleted-to mark after fenced deletes");
    }
    if let Err(e) = f
        .journal
        .delete_with("F5 owner's delete up to 3", f.pid(), 3, b)
        .await
    {
        panic!("F5: the owner's delete up to 3 failed: {e}");
    }
    f.expect_replay("F5 after the owner's delete", (1, MAX, MAX), 4..=5, 5)
        .await;
}

/// J27: writes over the [limits](actix_persistence_core::limits) sent straight to the
/// journal (past a persistent actor's check) are rejected by the store, each alone, storing
/// nothing, while the well-formed write between them is stored; the store stays healthy.
pub async fn j27_store_rejects_writes_over_the_limits(store: Arc<dyn JournalStore>) {
    use actix_persistence_core::limits::{MAX_MANIFEST_BYTES, MAX_PAYLOAD_BYTES, MAX_TAGS};
    let f = setup(store).await;
    let writer = Writer::new(f.pid());
    let over = |seq_nr: u64, change: &dyn Fn(&mut PersistentRepr)| {
        let mut events = writer.events("over", [seq_nr]);
        change(&mut events[0]);
        atomic(events)
    };
    let six = writer.events("fine", [6]);
    let writes = vec![
        over(6, &|e| e.payload = vec![b'x'; MAX_PAYLOAD_BYTES + 1]),
        over(6, &|e| e.manifest = "m".repeat(MAX_MANIFEST_BYTES + 1)),
        atomic(six.clone()),
        over(7, &|e| e.tags = vec!["t".to_owned(); MAX_TAGS + 1].into()),
        over(7, &|e| e.writer_uuid = "w\0".into()),
    ];
    let reply = f
        .journal
        .write(
            "J27 batch with writes over the limits",
            writer.incarnation,
            writes,
        )
        .await;
    let got = outcomes("J27", reply, 5);
    for i in [0, 1, 3, 4] {
        assert!(
            matches!(&got[i], WriteOutcome::Rejected(_)),
            "J27: write #{i} is over a limit and must be rejected (not stored, not failed: \
             call AtomicWrite::check in write_messages), got {:?}",
            got[i]
        );
    }
    assert!(
        matches!(got[2], WriteOutcome::Stored),
        "J27: the well-formed write between them must be stored, got {:?}",
        got[2]
    );
    f.expect_replay("J27 the setup's events", (1, 5, MAX), 1..=5, 6)
        .await;
    check_replay(
        "J27 only the well-formed 6 (nothing of 7)",
        &f.replay(6, MAX, MAX).await,
        &six,
        6,
    );
}

/// The model check as a case: [`super::check_journal_against_model`] with
/// [`super::ModelCheckConfig::from_env`], panicking on a mismatch.
pub async fn journal_agrees_with_model(store: Arc<dyn JournalStore>) {
    let config = super::ModelCheckConfig::from_env();
    if let Err(mismatch) = super::check_journal_against_model(store, &config).await {
        panic!("{mismatch}");
    }
}

// ---------------------------------------------------------------------------------------------
// The case table and the runners.

type RunCase = fn(Arc<dyn JournalStore>) -> LocalBoxFuture<'static, ()>;

/// One journal conformance case: its name (the test name the macro gives it), the rule it
/// checks, and how to run it.
#[derive(Clone, Copy)]
pub struct JournalCase {
    /// The case's name, e.g. `j01_replay_all`.
    pub name: &'static str,
    /// The rule it checks, in one line.
    pub rule: &'static str,
    run: RunCase,
}

impl JournalCase {
    /// Runs the case against `store` (which must live in the current Actix system).
    ///
    /// # Panics
    /// When the store does not behave as the case requires (the message says how), or when
    /// not called inside an Actix system.
    pub async fn run(&self, store: Arc<dyn JournalStore>) {
        (self.run)(store).await;
    }
}

impl fmt::Debug for JournalCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JournalCase")
            .field("name", &self.name)
            .field("rule", &self.rule)
            .finish_non_exhaustive()
    }
}

impl super::Case for JournalCase {
    type Store = dyn JournalStore;
    const SUITE: &'static str = "journal";

    fn all() -> &'static [Self] {
        CASES
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn run(&self, store: Arc<dyn JournalStore>) -> LocalBoxFuture<'static, ()> {
        (self.run)(store)
    }
}

/// `store`, shared as the runners pass it to a case.
fn shared<S: JournalStore>(store: S) -> Arc<dyn JournalStore> {
    Arc::new(store)
}

crate::__journal_cases! {
    __case_table { JournalCase, "Every journal conformance case, in order: J1-J30, F1-F5, then the model check." }
}

/// The journal case called `name` (as listed in [`CASES`]).
pub fn case(name: &str) -> Option<&'static JournalCase> {
    CASES.iter().find(|case| case.name == name)
}

/// Runs the case `name` in a new Actix system against a store fresh from `factory`. The
/// expansion of [`journal_conformance_tests!`](crate::journal_conformance_tests) calls this.
///
/// # Panics
/// When no case is called `name`, or the case fails.
pub fn run_case<F, Fut, S>(name: &str, factory: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = S>,
    S: JournalStore,
{
    super::run_named_case::<JournalCase, _, _>(name, || factory().map(|store| Some(shared(store))));
}

/// Like [`run_case`], for a factory that may have no store to give (e.g. a database URL is
/// not set): `None` skips the case, printing a notice, and the test passes. The expansion of
/// the `optional:` form of the conformance macro calls this.
///
/// # Panics
/// When no case is called `name`, or the case fails.
pub fn run_case_if_available<F, Fut, S>(name: &str, factory: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Option<S>>,
    S: JournalStore,
{
    super::run_named_case::<JournalCase, _, _>(name, || factory().map(|store| store.map(shared)));
}

/// Runs every journal conformance case (J1-J30, F1-F5 and the model check), each against a store
/// fresh from `factory`, and reports all failures at once.
///
/// Call it inside an Actix system (e.g. from an `#[actix::test]`). To see each case as a test
/// of its own, use [`journal_conformance_tests!`](crate::journal_conformance_tests) instead.
///
/// # Examples
/// ```
/// use actix_persistence_core::InMemoryJournal;
/// use actix_persistence_testkit::conformance::{run_in_system, run_journal_suite};
///
/// run_in_system(run_journal_suite(|| async { InMemoryJournal::new() }));
/// ```
///
/// # Panics
/// When any case fails: the message lists every failed case with what differed.
pub async fn run_journal_suite<F, Fut, S>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
    S: JournalStore,
{
    super::run_every_case::<JournalCase, _, _>(|| factory().map(shared)).await;
}
