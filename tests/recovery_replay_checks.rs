//! Recovery applies only the events it asked for: a journal store whose replay repeats an
//! event, delivers two out of order, delivers another persistence id's event, or goes past
//! the recovery's `to_seq_nr` (bugs of a store plugin) fails the recovery with
//! `RecoveryError::UnexpectedEvent` instead of building a wrong state (as Akka's replay filter
//! in its `fail` mode).

mod support;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence::store::{AtomicWriteResult, ReplayStream};
use actix_persistence::{AtomicWrite, FencingToken, InMemoryJournal, JournalError, JournalStore};
use actix_persistence::{Recovery, MAX_SEQ_NR};
use async_trait::async_trait;
use futures::StreamExt;
use support::*;

const HONEST: u8 = 0;
const REPEATS: u8 = 1;
const REORDERS: u8 = 2;
const FOREIGN_ID: u8 = 3;
const IGNORES_TO: u8 = 4;

/// The in-memory journal, its replays bent as `mode` says.
#[derive(Clone)]
struct BentReplay {
    inner: InMemoryJournal,
    mode: Arc<AtomicU8>,
}

#[async_trait]
impl JournalStore for BentReplay {
    async fn write_messages(
        &self,
        writes: Vec<AtomicWrite>,
    ) -> Result<Vec<AtomicWriteResult>, JournalError> {
        self.inner.write_messages(writes).await
    }

    fn replay_messages(&self, pid: &str, from: u64, to: u64, max: u64) -> ReplayStream {
        let mode = self.mode.load(Ordering::SeqCst);
        let to = if mode == IGNORES_TO { MAX_SEQ_NR } else { to };
        let events = self.inner.replay_messages(pid, from, to, max);
        match mode {
            REPEATS => events
                .flat_map(|event| {
                    let twice = match &event {
                        Ok(e) if e.seq_nr == 2 => vec![event.clone(), event],
                        _ => vec![event],
                    };
                    futures::stream::iter(twice)
                })
                .boxed(),
            REORDERS => {
                let all = futures::executor::block_on(events.collect::<Vec<_>>());
                let mut all = all;
                if all.len() >= 3 {
                    all.swap(1, 2);
                }
                futures::stream::iter(all).boxed()
            }
            FOREIGN_ID => events
                .map(|event| {
                    event.map(|mut e| {
                        if e.seq_nr == 2 {
                            e.persistence_id = Arc::from("someone-else");
                        }
                        e
                    })
                })
                .boxed(),
            _ => events,
        }
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

    async fn take_ownership(
        &self,
        pid: &str,
    ) -> Result<actix_persistence::store::Ownership, JournalError> {
        self.inner.take_ownership(pid).await
    }
}

/// What the recovery of `pid` over `store` ended with, under `recovery`.
async fn recover(h: &mut Harness, pid: &str, recovery: Recovery) -> Seen {
    let _actor = h.start_probe(pid, 0, move |s| s.with_recovery(recovery));
    h.seen_until(|s| matches!(s, Seen::Recovered { .. } | Seen::RecoveryFailed { .. }))
        .await
        .pop()
        .expect("recovery ended")
}

#[actix::test]
async fn recovery_fails_on_an_event_it_did_not_ask_for() {
    let store = BentReplay {
        inner: InMemoryJournal::new(),
        mode: Arc::new(AtomicU8::new(HONEST)),
    };
    let mut h = Harness::new(1);
    h.journal = JournalActor::start_with(
        Arc::new(store.clone()),
        JournalConfig {
            call_timeout: Duration::from_secs(30),
            ..JournalConfig::default()
        },
    );
    let writer = h.probe_in_group("bent", 0).await;
    for i in 1..=3 {
        writer
            .send(Persist(vec![named(&format!("e{i}"))]))
            .await
            .expect("mailbox")
            .expect("stored");
    }
    writer.send(Stop).await.expect("mailbox");
    h.seen_until(|s| matches!(s, Seen::Stopped { .. })).await;

    let up_to_2 = Recovery {
        to_seq_nr: 2,
        ..Recovery::latest()
    };
    for (mode, recovery, expected) in [
        (
            REPEATS,
            Recovery::latest(),
            "\"bent\" seq_nr 2 after seq_nr 2",
        ),
        (
            REORDERS,
            Recovery::latest(),
            "\"bent\" seq_nr 2 after seq_nr 3",
        ),
        (FOREIGN_ID, Recovery::latest(), "\"someone-else\" seq_nr 2"),
        (IGNORES_TO, up_to_2, "\"bent\" seq_nr 3 after seq_nr 2"),
    ] {
        store.mode.store(mode, Ordering::SeqCst);
        match recover(&mut h, "bent", recovery).await {
            Seen::RecoveryFailed { error, .. } => {
                assert!(
                    error.contains(expected) && error.contains("a bug of the journal store"),
                    "mode {mode}: {error}"
                )
            }
            other => panic!("mode {mode}: expected a failed recovery, got {other:?}"),
        }
    }
    // An honest replay of the same journal recovers every event, in order.
    store.mode.store(HONEST, Ordering::SeqCst);
    match recover(&mut h, "bent", Recovery::latest()).await {
        Seen::Recovered {
            last_seq_nr,
            replayed,
            ..
        } => {
            assert_eq!(last_seq_nr, 3);
            assert_eq!(replayed, vec![named("e1"), named("e2"), named("e3")]);
        }
        other => panic!("expected a recovery, got {other:?}"),
    }
}
