//! A store whose `write_messages` panics before it returns its future (a hand-written plugin
//! that does work up front, e.g. takes a connection, then boxes the rest): the panic is a
//! failed write like any other store panic, answered to the writer and counted by the circuit
//! breaker; it neither kills the journal actor nor leaves a half-open breaker shut.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use actix_persistence_core::journal::{
    CircuitBreakerConfig, Incarnation, JournalActor, JournalConfig, WriteMessages,
    WriteMessagesReply,
};
use actix_persistence_core::{
    AtomicWrite, AtomicWriteResult, InMemoryJournal, JournalError, JournalStore, PersistentRepr,
    ReplayStream,
};
use async_trait::async_trait;
use tokio::sync::oneshot;

/// Panics while it builds the future of `write_messages`, while `panic` is set.
struct PanicsBeforeItsFuture {
    journal: InMemoryJournal,
    panic: AtomicBool,
}

type WriteFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<AtomicWriteResult>, JournalError>> + Send + 'a>>;

#[async_trait]
impl JournalStore for PanicsBeforeItsFuture {
    fn write_messages<'life0, 'async_trait>(
        &'life0 self,
        writes: Vec<AtomicWrite>,
    ) -> WriteFuture<'async_trait>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        assert!(
            !self.panic.load(Ordering::SeqCst),
            "a bug in the store, before its future exists"
        );
        Box::pin(async move { self.journal.write_messages(writes).await })
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

async fn write_reply(journal: &Addr<JournalActor>, pid: &str, seq_nr: u64) -> WriteMessagesReply {
    let (reply_to, reply) = oneshot::channel();
    journal.do_send(WriteMessages {
        writes: vec![write(pid, seq_nr)].into(),
        incarnation: Incarnation::from_raw(1),
        reply_to: reply_to.into(),
    });
    reply
        .await
        .expect("every write is answered, even when the store panics")
}

#[actix_rt::test]
async fn a_store_panicking_before_its_write_future_exists_fails_the_write_and_trips_the_breaker() {
    tokio::time::pause();
    let store = Arc::new(PanicsBeforeItsFuture {
        journal: InMemoryJournal::new(),
        panic: AtomicBool::new(true),
    });
    let journal = JournalActor::start_with(
        Arc::clone(&store) as Arc<dyn JournalStore>,
        JournalConfig {
            circuit_breaker: CircuitBreakerConfig {
                max_failures: 1,
                reset_timeout: Duration::from_secs(1),
            },
            ..JournalConfig::default()
        },
    );
    match write_reply(&journal, "p", 1).await {
        WriteMessagesReply::Failed(JournalError::Storage { .. }) => {}
        other => panic!("expected a failed write, got {other:?}"),
    }
    // The panic counted: the breaker is open and answers at once.
    match write_reply(&journal, "p", 1).await {
        WriteMessagesReply::Failed(JournalError::CircuitOpen { .. }) => {}
        other => panic!("expected an open breaker, got {other:?}"),
    }
    // The trial call after the reset timeout panics as well: recorded, open again.
    tokio::time::advance(Duration::from_secs(2)).await;
    match write_reply(&journal, "p", 1).await {
        WriteMessagesReply::Failed(JournalError::Storage { .. }) => {}
        other => panic!("expected the trial to fail, got {other:?}"),
    }
    // The store is fixed: the next trial passes and closes the breaker.
    store.panic.store(false, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(2)).await;
    for seq_nr in 1..=2 {
        match write_reply(&journal, "p", seq_nr).await {
            WriteMessagesReply::Completed(results) => {
                assert!(matches!(results[..], [Ok(())]), "{results:?}")
            }
            other => panic!("expected a stored write, got {other:?}"),
        }
    }
}
