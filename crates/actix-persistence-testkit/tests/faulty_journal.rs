//! Each fault of the fault-injecting store wrapper, seen at the store and through the journal
//! actor.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use actix_persistence_core::journal::{
    Incarnation, JournalActor, JournalConfig, WriteMessages, WriteMessagesReply,
};
use actix_persistence_core::{
    AtomicWrite, AtomicWriteError, AtomicWriteResult, InMemoryJournal, JournalError, JournalStore,
    PersistentRepr, MAX_SEQ_NR,
};
use actix_persistence_testkit::{FaultHandle, FaultyJournal, InjectedFault, WrongResultCount};
use futures::StreamExt;
use tokio::sync::oneshot;

fn event(pid: &str, seq_nr: u64) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload: format!("\"{pid}-{seq_nr}\"").into_bytes(),
        serializer_id: 1,
        manifest: String::new(),
        writer_uuid: "writer".into(),
        timestamp: 1_700_000_000_000,
        tags: Default::default(),
    }
}

fn write(pid: &str, seq_nrs: RangeInclusive<u64>) -> AtomicWrite {
    AtomicWrite::new(seq_nrs.map(|s| event(pid, s)).collect()).expect("well-formed write")
}

async fn stored(store: &impl JournalStore, pid: &str) -> Vec<u64> {
    store
        .replay_messages(pid, 1, MAX_SEQ_NR, u64::MAX)
        .map(|e| e.expect("replay").seq_nr)
        .collect()
        .await
}

fn faulty() -> (Arc<FaultyJournal<InMemoryJournal>>, FaultHandle) {
    let (store, faults) = FaultyJournal::new(InMemoryJournal::new());
    (Arc::new(store), faults)
}

fn journal_over(
    store: Arc<FaultyJournal<InMemoryJournal>>,
    timeout: Duration,
) -> Addr<JournalActor> {
    JournalActor::start_with(
        store,
        JournalConfig {
            call_timeout: timeout,
            ..JournalConfig::default()
        },
    )
}

async fn send(journal: &Addr<JournalActor>, writes: Vec<AtomicWrite>) -> WriteMessagesReply {
    let (reply_to, reply) = oneshot::channel();
    journal.do_send(WriteMessages {
        writes: writes.into(),
        incarnation: Incarnation::next(),
        reply_to: reply_to.into(),
    });
    tokio::time::timeout(Duration::from_secs(10), reply)
        .await
        .expect("the journal answers")
        .expect("the journal keeps the reply channel")
}

fn injected(error: &JournalError) -> Option<&InjectedFault> {
    match error {
        JournalError::Storage { source, .. } => source.downcast_ref::<InjectedFault>(),
        _ => None,
    }
}

fn failed_with(result: &AtomicWriteResult) -> Option<&InjectedFault> {
    match result {
        Err(AtomicWriteError::Failed(e)) => injected(e),
        _ => None,
    }
}

#[actix::test]
async fn failing_the_nth_event_fails_its_atomic_write_and_the_later_ones_of_its_writer() {
    let (store, faults) = faulty();
    faults.fail_nth_event(3);
    let results = store
        .write_messages(vec![
            write("a", 1..=1),
            write("a", 2..=3),
            write("other", 1..=1),
            write("a", 4..=4),
        ])
        .await
        .expect("the batch is attempted");
    assert_eq!(results.len(), 4);
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert_eq!(
        failed_with(&results[1]),
        Some(&InjectedFault::EventWrite {
            persistence_id: "a".to_owned(),
            seq_nr: 3
        })
    );
    // Stored, [4] would follow the hole of [2, 3], and recovery would replay it without them.
    assert!(
        matches!(
            &results[3],
            Err(AtomicWriteError::Failed(JournalError::EarlierWriteFailed { persistence_id, seq_nr: 4 }))
                if persistence_id == "a"
        ),
        "{:?}",
        results[3]
    );
    assert_eq!(
        stored(&*store, "a").await,
        vec![1],
        "nothing of [2, 3] is stored, nor [4] after it"
    );
    assert_eq!(stored(&*store, "other").await, vec![1]);

    let again = store
        .write_messages(vec![write("a", 2..=3)])
        .await
        .expect("batch");
    assert!(again[0].is_ok(), "the fault fires once: {again:?}");
}

#[actix::test]
async fn the_nth_event_is_counted_across_batches_from_when_it_is_set() {
    let (store, faults) = faulty();
    store
        .write_messages(vec![write("b", 1..=2)])
        .await
        .expect("before the fault");
    faults.fail_nth_event(2);
    let first = store
        .write_messages(vec![write("b", 3..=3)])
        .await
        .expect("batch");
    assert!(first[0].is_ok(), "event 1 after setting passes");
    let second = store
        .write_messages(vec![write("b", 4..=6)])
        .await
        .expect("batch");
    assert_eq!(
        failed_with(&second[0]),
        Some(&InjectedFault::EventWrite {
            persistence_id: "b".to_owned(),
            seq_nr: 4
        })
    );
    assert_eq!(stored(&*store, "b").await, vec![1, 2, 3]);
}

#[actix::test]
async fn a_failed_commit_stores_nothing_and_fails_every_write_of_the_batch() {
    let (store, faults) = faulty();
    let journal = journal_over(store.clone(), Duration::from_secs(5));
    faults.fail_next_commit();
    let reply = send(&journal, vec![write("c", 1..=1), write("c", 2..=3)]).await;
    let results = match reply {
        WriteMessagesReply::Failed(e) => {
            assert_eq!(injected(&e), Some(&InjectedFault::Commit), "{e}");
            WriteMessagesReply::Failed(e).into_results(2)
        }
        other => panic!("the batch must fail as a whole, got {other:?}"),
    };
    assert!(results
        .iter()
        .all(|r| failed_with(r) == Some(&InjectedFault::Commit)));
    assert_eq!(stored(&*store, "c").await, Vec::<u64>::new());

    let reply = send(&journal, vec![write("c", 1..=1)]).await;
    assert!(
        matches!(reply, WriteMessagesReply::Completed(ref r) if r.len() == 1 && r[0].is_ok()),
        "the fault fires once: {reply:?}"
    );
}

#[actix::test]
async fn writes_that_never_answer_time_out_in_the_journal_while_reads_go_on() {
    let (store, faults) = faulty();
    let journal = journal_over(store.clone(), Duration::from_millis(100));
    faults.never_answer_writes();
    match send(&journal, vec![write("d", 1..=1)]).await {
        WriteMessagesReply::Failed(JournalError::Timeout { operation, timeout }) => {
            assert_eq!((operation, timeout), ("write", Duration::from_millis(100)));
        }
        other => panic!("expected the journal's timeout, got {other:?}"),
    }
    assert_eq!(
        store.read_highest_sequence_nr("d", 0).await.expect("read"),
        0
    );

    faults.answer_again();
    let reply = send(&journal, vec![write("d", 1..=1)]).await;
    assert!(
        matches!(reply, WriteMessagesReply::Completed(ref r) if r[0].is_ok()),
        "{reply:?}"
    );
}

#[actix::test]
async fn never_answer_holds_every_kind_of_call() {
    let (store, faults) = faulty();
    faults.never_answer();
    let wait = Duration::from_millis(30);
    assert!(
        tokio::time::timeout(wait, store.write_messages(vec![write("e", 1..=1)]))
            .await
            .is_err()
    );
    assert!(
        tokio::time::timeout(wait, store.read_highest_sequence_nr("e", 0))
            .await
            .is_err()
    );
    assert!(tokio::time::timeout(
        wait,
        store.delete_messages_to("e", 1, actix_persistence_core::FencingToken::UNOWNED)
    )
    .await
    .is_err());
    let mut replay = store.replay_messages("e", 1, MAX_SEQ_NR, u64::MAX);
    assert!(tokio::time::timeout(wait, replay.next()).await.is_err());
    assert_eq!(faults.store_calls(), 4);
}

#[actix::test]
async fn a_wrong_result_count_fails_the_batch_in_the_journal() {
    let (store, faults) = faulty();
    let journal = journal_over(store.clone(), Duration::from_secs(5));
    faults.return_wrong_result_count(WrongResultCount::OneMissing);
    match send(&journal, vec![write("f", 1..=1), write("f", 2..=2)]).await {
        WriteMessagesReply::Failed(JournalError::ResultCountMismatch { expected, actual }) => {
            assert_eq!((expected, actual), (2, 1));
        }
        other => panic!("expected a result count mismatch, got {other:?}"),
    }
    assert_eq!(
        stored(&*store, "f").await,
        vec![1, 2],
        "the store did store them"
    );

    faults.return_wrong_result_count(WrongResultCount::OneExtra);
    let results = store
        .write_messages(vec![write("f", 3..=3), write("f", 4..=4)])
        .await
        .expect("batch");
    assert_eq!(results.len(), 3);
    let results = store
        .write_messages(vec![write("f", 5..=5)])
        .await
        .expect("batch");
    assert_eq!(results.len(), 1, "the fault fires once");
}

#[actix::test]
async fn an_unreachable_store_fails_every_call_until_it_is_reachable() {
    let (store, faults) = faulty();
    faults.unreachable();
    let unreachable = Some(&InjectedFault::Unreachable);
    let write_error = store
        .write_messages(vec![write("g", 1..=1)])
        .await
        .expect_err("write fails");
    assert_eq!(injected(&write_error), unreachable);
    let read_error = store
        .read_highest_sequence_nr("g", 0)
        .await
        .expect_err("read fails");
    assert_eq!(injected(&read_error), unreachable);
    let delete_error = store
        .delete_messages_to("g", 1, actix_persistence_core::FencingToken::UNOWNED)
        .await
        .expect_err("delete fails");
    assert_eq!(injected(&delete_error), unreachable);
    let replayed: Vec<_> = store
        .replay_messages("g", 1, MAX_SEQ_NR, u64::MAX)
        .collect()
        .await;
    assert_eq!(replayed.len(), 1);
    assert_eq!(
        injected(replayed[0].as_ref().expect_err("replay fails")),
        unreachable
    );

    faults.reachable();
    let results = store
        .write_messages(vec![write("g", 1..=1)])
        .await
        .expect("reachable");
    assert!(results[0].is_ok());
    assert_eq!(
        store.read_highest_sequence_nr("g", 0).await.expect("read"),
        1
    );
}

#[actix::test]
async fn writes_are_delayed_by_a_fixed_duration_or_by_a_function_of_the_write() {
    let (store, faults) = faulty();
    faults.delay_writes(Duration::from_millis(40));
    let started = Instant::now();
    store
        .write_messages(vec![write("h", 1..=1)])
        .await
        .expect("write");
    assert!(started.elapsed() >= Duration::from_millis(40));

    faults.delay_writes_with(|writes: &[AtomicWrite]| {
        if writes[0].persistence_id() == "slow" {
            Duration::from_millis(40)
        } else {
            Duration::ZERO
        }
    });
    let started = Instant::now();
    store
        .write_messages(vec![write("slow", 1..=1)])
        .await
        .expect("write");
    assert!(started.elapsed() >= Duration::from_millis(40));
    let started = Instant::now();
    store
        .write_messages(vec![write("fast", 1..=1)])
        .await
        .expect("write");
    assert!(started.elapsed() < Duration::from_millis(40));

    faults.no_delay();
    let started = Instant::now();
    store
        .write_messages(vec![write("slow", 2..=2)])
        .await
        .expect("write");
    assert!(started.elapsed() < Duration::from_millis(40));
}

#[actix::test]
async fn counters_count_calls_writes_atomic_writes_and_events() {
    let (store, faults) = faulty();
    store
        .write_messages(vec![write("i", 1..=2), write("i", 3..=3)])
        .await
        .expect("write");
    store
        .write_messages(vec![write("j", 1..=4)])
        .await
        .expect("write");
    store.read_highest_sequence_nr("i", 0).await.expect("read");
    let _ = store.replay_messages("i", 1, 2, 10);
    store
        .delete_messages_to("i", 1, actix_persistence_core::FencingToken::UNOWNED)
        .await
        .expect("delete");
    assert_eq!(faults.store_calls(), 5);
    assert_eq!(faults.write_calls(), 2);
    assert_eq!(faults.atomic_writes_seen(), 3);
    assert_eq!(faults.events_seen(), 7);

    faults.unreachable();
    faults.fail_next_commit();
    faults.clear();
    store
        .write_messages(vec![write("i", 4..=4)])
        .await
        .expect("no fault after clear");
    assert_eq!(faults.write_calls(), 3, "counters survive clear");
}

#[test]
#[should_panic(expected = "events are counted from 1")]
fn failing_the_zeroth_event_is_a_mistake() {
    let (_store, faults) = FaultyJournal::new(InMemoryJournal::new());
    faults.fail_nth_event(0);
}
