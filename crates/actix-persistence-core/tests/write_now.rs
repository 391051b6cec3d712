//! The journal actor's synchronous store call (`JournalStore::write_messages_now`): a store
//! that answers at once gets the same treatment as one whose future does (panics, wrong result
//! counts, the circuit breaker, reply order), and a store that hands the writes back is called
//! through `write_messages` with them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::Addr;
use actix_persistence_core::journal::{
    CircuitBreakerConfig, Incarnation, JournalActor, JournalConfig, WriteMessages,
    WriteMessagesReply,
};
use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, InMemoryJournal, JournalError, JournalStore, PersistentRepr,
    ReplayStream, WriteBatch, WriteNow,
};
use async_trait::async_trait;
use tokio::sync::{oneshot, Notify};

/// What [`Scripted::write_messages_now`] does with a batch.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Now {
    /// Stores it in the in-memory journal.
    Store,
    /// Panics.
    Panic,
    /// Answers one result too many.
    ExtraResult,
    /// Fails the batch as a store failure.
    Fail,
    /// Hands the writes back: `write_messages` stores them, after `gate` is opened when the
    /// persistence id starts with `slow`.
    Later,
}

/// An in-memory journal whose synchronous call does what the test scripts, counting calls.
struct Scripted {
    journal: InMemoryJournal,
    now: Mutex<Now>,
    now_calls: AtomicUsize,
    async_calls: AtomicUsize,
    /// The persistence ids `write_messages` was called with, in call order.
    async_ids: Mutex<Vec<String>>,
    gate: Notify,
}

impl Scripted {
    fn new(now: Now) -> Arc<Self> {
        Arc::new(Scripted {
            journal: InMemoryJournal::new(),
            now: Mutex::new(now),
            now_calls: AtomicUsize::new(0),
            async_calls: AtomicUsize::new(0),
            async_ids: Mutex::new(Vec::new()),
            gate: Notify::new(),
        })
    }

    fn script(&self, now: Now) {
        *self.now.lock().expect("not poisoned") = now;
    }
}

#[async_trait]
impl JournalStore for Scripted {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        self.async_calls.fetch_add(1, Ordering::SeqCst);
        let id = writes
            .first()
            .map(|w| w.persistence_id().to_owned())
            .unwrap_or_default();
        self.async_ids
            .lock()
            .expect("not poisoned")
            .push(id.clone());
        if id.starts_with("slow") {
            self.gate.notified().await;
        }
        self.journal.write_messages(writes).await
    }

    fn write_messages_now(&self, writes: WriteBatch) -> WriteNow {
        self.now_calls.fetch_add(1, Ordering::SeqCst);
        let now = *self.now.lock().expect("not poisoned");
        match now {
            Now::Store => self.journal.write_messages_now(writes),
            Now::Panic => panic!("a bug in the store's synchronous write"),
            Now::ExtraResult => WriteNow::Done(Ok(vec![Ok(()); writes.len() + 1].into())),
            Now::Fail => WriteNow::Done(Err(JournalError::storage(
                "write",
                std::io::Error::other("disk gone"),
            ))),
            Now::Later => WriteNow::Later(writes),
        }
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        self.journal.replay_messages(pid, from, to, max)
    }

    async fn read_highest_sequence_nr(&self, pid: &str, from: u64) -> Result<u64, JournalError> {
        self.journal.read_highest_sequence_nr(pid, from).await
    }

    async fn delete_messages_to(
        &self,
        pid: &str,
        to: u64,
        token: actix_persistence_core::FencingToken,
    ) -> Result<(), JournalError> {
        self.journal.delete_messages_to(pid, to, token).await
    }
}

fn journal(
    store: &Arc<Scripted>,
    max_failures: u32,
    reset_timeout: Duration,
) -> Addr<JournalActor> {
    JournalActor::start_with(
        Arc::clone(store) as Arc<dyn JournalStore>,
        JournalConfig {
            circuit_breaker: CircuitBreakerConfig {
                max_failures,
                reset_timeout,
            },
            ..JournalConfig::default()
        },
    )
}

fn write(pid: &str, seq_nr: u64) -> AtomicWrite {
    AtomicWrite::new(vec![PersistentRepr {
        persistence_id: Arc::from(pid),
        seq_nr,
        payload: b"{}".to_vec(),
        serializer_id: 1,
        manifest: String::new(),
        writer_uuid: Arc::from("writer"),
        timestamp: 0,
        tags: Default::default(),
    }])
    .expect("a valid write")
}

/// Sends one write of `pid` in the write-reply-ordering group of incarnation 1.
async fn send(
    journal: &Addr<JournalActor>,
    pid: &str,
    seq_nr: u64,
) -> oneshot::Receiver<WriteMessagesReply> {
    let (reply_to, reply) = oneshot::channel();
    journal
        .send(WriteMessages {
            writes: vec![write(pid, seq_nr)].into(),
            incarnation: Incarnation::from_raw(1),
            reply_to: reply_to.into(),
        })
        .await
        .expect("the journal runs");
    reply
}

async fn reply(rx: oneshot::Receiver<WriteMessagesReply>) -> WriteMessagesReply {
    tokio::time::timeout(Duration::from_secs(5), rx)
        .await
        .expect("a reply within 5 s")
        .expect("every write is answered")
}

#[actix_rt::test]
async fn a_store_that_answers_at_once_is_never_called_through_its_future() {
    let store = Scripted::new(Now::Store);
    let journal = journal(&store, 10, Duration::from_secs(30));
    for seq_nr in 1..=3 {
        match reply(send(&journal, "now-a", seq_nr).await).await {
            WriteMessagesReply::Completed(results) => assert!(matches!(results[..], [Ok(())])),
            other => panic!("expected a stored write, got {other:?}"),
        }
    }
    // A write of a taken sequence number is refused at once, as by `write_messages`.
    match reply(send(&journal, "now-a", 2).await).await {
        WriteMessagesReply::Completed(results) => assert!(
            matches!(&results[..], [Err(e)] if e.to_string().contains("now-a")),
            "{results:?}"
        ),
        other => panic!("expected a refused write, got {other:?}"),
    }
    assert_eq!(store.now_calls.load(Ordering::SeqCst), 4);
    assert_eq!(store.async_calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        store
            .journal
            .read_highest_sequence_nr("now-a", 0)
            .await
            .ok(),
        Some(3)
    );
}

#[actix_rt::test]
async fn a_panic_or_a_wrong_result_count_at_once_fails_the_batch() {
    let store = Scripted::new(Now::Panic);
    let journal = journal(&store, 10, Duration::from_secs(30));
    match reply(send(&journal, "now-p", 1).await).await {
        WriteMessagesReply::Failed(cause) => {
            assert!(cause.to_string().contains("panicked"), "{cause}")
        }
        other => panic!("expected a failed batch, got {other:?}"),
    }
    store.script(Now::ExtraResult);
    match reply(send(&journal, "now-p", 1).await).await {
        WriteMessagesReply::Failed(JournalError::ResultCountMismatch { expected, actual }) => {
            assert_eq!((expected, actual), (1, 2))
        }
        other => panic!("expected a result count mismatch, got {other:?}"),
    }
    // The journal actor survived both: the next write is stored.
    store.script(Now::Store);
    match reply(send(&journal, "now-p", 1).await).await {
        WriteMessagesReply::Completed(results) => assert!(matches!(results[..], [Ok(())])),
        other => panic!("expected a stored write, got {other:?}"),
    }
}

#[actix_rt::test]
async fn failures_at_once_open_the_breaker_and_a_trial_handed_back_closes_it() {
    let store = Scripted::new(Now::Fail);
    let journal = journal(&store, 2, Duration::from_millis(200));
    for _ in 0..2 {
        assert!(matches!(
            reply(send(&journal, "now-b", 1).await).await,
            WriteMessagesReply::Failed(JournalError::Storage { .. })
        ));
    }
    // Open: the store is not called at all.
    assert!(matches!(
        reply(send(&journal, "now-b", 1).await).await,
        WriteMessagesReply::Failed(JournalError::CircuitOpen { .. })
    ));
    assert_eq!(store.now_calls.load(Ordering::SeqCst), 2);

    // After the reset timeout, the one trial call is handed back and goes through the store's
    // future under the same permit (a second permit would be refused while half-open).
    tokio::time::sleep(Duration::from_millis(300)).await;
    store.script(Now::Later);
    match reply(send(&journal, "now-b", 1).await).await {
        WriteMessagesReply::Completed(results) => assert!(matches!(results[..], [Ok(())])),
        other => panic!("expected the trial write stored, got {other:?}"),
    }
    assert_eq!(store.async_calls.load(Ordering::SeqCst), 1);
    // Closed again.
    store.script(Now::Store);
    match reply(send(&journal, "now-b", 2).await).await {
        WriteMessagesReply::Completed(results) => assert!(matches!(results[..], [Ok(())])),
        other => panic!("expected a stored write, got {other:?}"),
    }
}

/// An empty batch is answered without the store and without the breaker: while half-open it
/// does not take the one trial call, which would close the breaker without the store tried.
#[actix_rt::test]
async fn an_empty_batch_never_takes_the_half_open_breakers_trial() {
    tokio::time::pause();
    let store = Scripted::new(Now::Fail);
    let journal = journal(&store, 2, Duration::from_secs(30));
    for _ in 0..2 {
        assert!(matches!(
            reply(send(&journal, "empty-b", 1).await).await,
            WriteMessagesReply::Failed(JournalError::Storage { .. })
        ));
    }
    tokio::time::advance(Duration::from_secs(31)).await;
    // Half-open. An empty batch from a direct caller: answered, the store not called.
    store.script(Now::Store);
    let (reply_to, empty) = oneshot::channel();
    journal
        .send(WriteMessages {
            writes: Vec::new().into(),
            incarnation: Incarnation::from_raw(1),
            reply_to: reply_to.into(),
        })
        .await
        .expect("the journal runs");
    match reply(empty).await {
        WriteMessagesReply::Completed(results) => assert!(results.is_empty()),
        other => panic!("expected an empty batch answered, got {other:?}"),
    }
    assert_eq!(store.now_calls.load(Ordering::SeqCst), 2);
    // The next write is still the trial: it fails, and the breaker opens again (had the empty
    // batch closed it, one failure of two would have left it closed).
    store.script(Now::Fail);
    assert!(matches!(
        reply(send(&journal, "empty-b", 1).await).await,
        WriteMessagesReply::Failed(JournalError::Storage { .. })
    ));
    assert!(matches!(
        reply(send(&journal, "empty-b", 1).await).await,
        WriteMessagesReply::Failed(JournalError::CircuitOpen { .. })
    ));
    assert_eq!(store.now_calls.load(Ordering::SeqCst), 3);
}

#[actix_rt::test]
async fn a_reply_at_once_waits_for_an_earlier_pending_write_of_its_group() {
    let store = Scripted::new(Now::Later);
    let journal = journal(&store, 10, Duration::from_secs(30));
    let slow = send(&journal, "slow-1", 1).await;
    store.script(Now::Store);
    let mut fast = send(&journal, "fast-1", 1).await;
    // Stored at once, but its reply is held behind the pending write of the same group.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        matches!(fast.try_recv(), Err(oneshot::error::TryRecvError::Empty)),
        "the later write's reply must wait for the earlier one"
    );
    assert_eq!(
        store
            .journal
            .read_highest_sequence_nr("fast-1", 0)
            .await
            .ok(),
        Some(1)
    );
    assert_eq!(
        *store.async_ids.lock().expect("not poisoned"),
        vec!["slow-1".to_owned()]
    );
    store.gate.notify_one();
    assert!(matches!(
        reply(slow).await,
        WriteMessagesReply::Completed(_)
    ));
    assert!(matches!(
        reply(fast).await,
        WriteMessagesReply::Completed(_)
    ));
}

/// A `JournalConfig` built in code with more groups than a journal runs (the configuration
/// refuses such a count; code can still build one): the journal runs
/// `MAX_WRITE_REPLY_ORDERING_GROUPS` groups and answers writes of incarnations routed all over
/// them. Before, it started one resequencer per group and panicked ("capacity overflow") for
/// `usize::MAX`, leaving every write unanswered.
#[actix_rt::test]
async fn a_group_count_above_the_limit_runs_the_limit() {
    use actix_persistence_core::journal::MAX_WRITE_REPLY_ORDERING_GROUPS;
    use std::num::NonZeroUsize;

    let store = Scripted::new(Now::Store);
    let journal = JournalActor::start_with(
        Arc::clone(&store) as Arc<dyn JournalStore>,
        JournalConfig {
            write_reply_ordering_groups: NonZeroUsize::MAX,
            ..JournalConfig::default()
        },
    );
    // Incarnations whose groups lie across the whole range of the limit's groups.
    for (n, raw) in [1, 7, 65_535, 65_536, 1 << 40, u64::MAX]
        .into_iter()
        .enumerate()
    {
        let (reply_to, rx) = oneshot::channel();
        journal
            .send(WriteMessages {
                writes: vec![write(&format!("g-{n}"), 1)].into(),
                incarnation: Incarnation::from_raw(raw),
                reply_to: reply_to.into(),
            })
            .await
            .expect("the journal runs");
        match reply(rx).await {
            WriteMessagesReply::Completed(results) => {
                assert!(matches!(results.as_slice(), [Ok(())]), "{raw}: {results:?}")
            }
            other => panic!("{raw}: expected the write stored, got {other:?}"),
        }
    }
    assert_eq!(store.now_calls.load(Ordering::SeqCst), 6);
    assert_eq!(MAX_WRITE_REPLY_ORDERING_GROUPS, 65_536);
}
