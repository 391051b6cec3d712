//! The controlled store answers as every store does: whatever a test scripts for a batch, no
//! write of a writer is stored after its failed one in the batch (conformance J28).

use std::ops::RangeInclusive;
use std::sync::Arc;

use actix_persistence_core::{
    AtomicWrite, AtomicWriteError, JournalError, JournalStore, PersistentRepr, MAX_SEQ_NR,
};
use actix_persistence_testkit::{ControlledJournal, Outcome};
use futures::StreamExt;

fn write(pid: &str, seq_nrs: RangeInclusive<u64>) -> AtomicWrite {
    let events = seq_nrs
        .map(|seq_nr| PersistentRepr {
            persistence_id: pid.into(),
            seq_nr,
            payload: b"{}".to_vec(),
            serializer_id: 1,
            manifest: String::new(),
            writer_uuid: "writer".into(),
            timestamp: 1_700_000_000_000,
            tags: Default::default(),
        })
        .collect();
    AtomicWrite::new(events).expect("well-formed write")
}

async fn stored(store: &impl JournalStore, pid: &str) -> Vec<u64> {
    store
        .replay_messages(pid, 1, MAX_SEQ_NR, u64::MAX)
        .map(|e| e.expect("replay").seq_nr)
        .collect()
        .await
}

#[tokio::test]
async fn a_scripted_failure_keeps_the_later_writes_of_its_writer_from_being_stored() {
    let (store, mut control) = ControlledJournal::new();
    let store = Arc::new(store);
    let writing = tokio::spawn({
        let store = Arc::clone(&store);
        async move {
            store
                .write_messages(vec![
                    write("p", 1..=1),
                    write("p", 2..=3),
                    write("q", 1..=1),
                ])
                .await
        }
    });
    // The script stores the second write of `p` after failing its first.
    let _answered = control.next_write().await.complete_with(vec![
        Outcome::Fail(JournalError::JournalStopped),
        Outcome::Store,
        Outcome::Store,
    ]);
    let results = writing
        .await
        .expect("the write task")
        .expect("the batch is answered");
    assert!(
        matches!(
            results[0],
            Err(AtomicWriteError::Failed(JournalError::JournalStopped))
        ),
        "{results:?}"
    );
    assert!(
        matches!(
            &results[1],
            Err(AtomicWriteError::Failed(JournalError::EarlierWriteFailed {
                seq_nr: 2,
                ..
            }))
        ),
        "{results:?}"
    );
    assert!(results[2].is_ok(), "{results:?}");
    assert_eq!(stored(&*store, "p").await, Vec::<u64>::new());
    assert_eq!(stored(&*store, "q").await, vec![1]);
}
