//! Bad input is rejected up front, with the same answer on every store, and never trips the
//! circuit breaker for other actors: the limits of `actix_persistence::limits`, checked before
//! a write reaches a database; `Persistence::state` refusing ids no store can write; the
//! breaker counting only failures of the store itself.

mod support;

use std::sync::Arc;
use std::time::Duration;

use actix_persistence::actix::Actor;
use actix_persistence::journal::{
    CircuitBreakerConfig, Incarnation, JournalActor, JournalConfig, WriteMessages,
    WriteMessagesReply,
};
use actix_persistence::limits::{MAX_PAYLOAD_BYTES, MAX_PERSISTENCE_ID_BYTES, MAX_TAGS};
use actix_persistence::{
    AtomicWrite, AtomicWriteError, InMemoryJournal, InvalidPersistenceId, JournalError,
    JournalStore, Persistence, PersistenceState, PersistentRepr, Settings, SqliteJournal,
    SqliteJournalOptions,
};
use actix_persistence_sql::test_util::TestDatabase;
use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions};
use actix_persistence_testkit::{ControlledJournal, Outcome};
use support::*;
use tokio::sync::{mpsc, oneshot};

/// An id of `bytes` ASCII letters and digits from a fixed pseudo-random sequence, which no
/// compression shrinks below PostgreSQL's index entry limit (about 2,700 bytes).
fn long_id(bytes: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..bytes)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ALPHABET[(state % ALPHABET.len() as u64) as usize] as char
        })
        .collect()
}

fn event(pid: &str, seq_nr: u64) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload: b"\"x\"".to_vec(),
        serializer_id: 1,
        manifest: String::new(),
        writer_uuid: "w".into(),
        timestamp: 0,
        tags: Default::default(),
    }
}

/// Writes over each limit, and the words their rejection must hold.
fn over_the_limits() -> Vec<(AtomicWrite, &'static str)> {
    let write = |e: PersistentRepr| AtomicWrite::new(vec![e]).expect("well-formed");
    vec![
        (write(event(&long_id(MAX_PERSISTENCE_ID_BYTES + 1), 1)), "256 bytes long, above the limit of 255 bytes"),
        (write(event("nul\0id", 1)), "NUL"),
        (
            write(PersistentRepr {
                payload: vec![b'x'; MAX_PAYLOAD_BYTES + 1],
                ..event("big", 1)
            }),
            "payload of the event at sequence number 1 is 10485761 bytes, above the limit of 10485760 bytes",
        ),
        (
            write(PersistentRepr {
                manifest: "m\0".to_owned(),
                ..event("manifest", 1)
            }),
            "manifest of the event at sequence number 1 holds a NUL character",
        ),
        (
            write(PersistentRepr {
                tags: vec!["t".to_owned(); MAX_TAGS + 1].into(),
                ..event("tags", 1)
            }),
            "has 65 tags, above the limit of 64",
        ),
        (
            write(PersistentRepr {
                tags: vec![long_id(256)].into(),
                ..event("tag", 1)
            }),
            "tag of the event at sequence number 1 is 256 bytes",
        ),
        (
            write(event("seq", i64::MAX as u64 + 1)),
            "above the limit of 9223372036854775807",
        ),
    ]
}

/// The rejection reasons `store` gives the writes of [`over_the_limits`], in order.
async fn reasons(store: &dyn JournalStore) -> Vec<String> {
    let (writes, _): (Vec<_>, Vec<_>) = over_the_limits().into_iter().unzip();
    let results = store
        .write_messages(writes)
        .await
        .expect("the batch is answered");
    results
        .into_iter()
        .map(|result| match result {
            Err(AtomicWriteError::Rejected(rejection)) => rejection.reason,
            other => panic!("expected a rejection, got {other:?}"),
        })
        .collect()
}

#[actix::test]
async fn every_store_rejects_input_over_the_limits_with_the_same_reason() {
    let expected: Vec<_> = over_the_limits()
        .into_iter()
        .map(|(_, words)| words)
        .collect();
    let in_memory = reasons(&InMemoryJournal::new()).await;
    for (reason, words) in in_memory.iter().zip(&expected) {
        assert!(reason.contains(words), "{reason:?} should say {words:?}");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("journal.db").display());
    let sqlite = SqliteJournal::connect(&SqliteJournalOptions::new(url))
        .await
        .expect("open SQLite");
    assert_eq!(
        reasons(&sqlite).await,
        in_memory,
        "SQLite answers as in memory"
    );
    if let Some(db) = TestDatabase::create().await {
        let postgres = PostgresJournal::connect(&PostgresJournalOptions::new(db.url()))
            .await
            .expect("open PostgreSQL");
        assert_eq!(
            reasons(&postgres).await,
            in_memory,
            "PostgreSQL answers as in memory"
        );
    }
}

#[actix::test]
async fn persistence_state_refuses_ids_no_store_can_write() {
    let settings = Settings::loader()
        .env_vars(Vec::<(String, String)>::new())
        .load()
        .expect("settings");
    let persistence = Persistence::start_with_stores(
        settings,
        Arc::new(InMemoryJournal::new()),
        Arc::new(actix_persistence::snapshot::InMemorySnapshotStore::new()),
    )
    .expect("start persistence");
    let longest = "é".repeat(MAX_PERSISTENCE_ID_BYTES / 2) + "a";
    assert_eq!(longest.len(), MAX_PERSISTENCE_ID_BYTES);
    assert!(persistence.state::<Probe>(longest.clone()).is_ok());
    match persistence.state::<Probe>(longest + "a") {
        Err(InvalidPersistenceId::TooLong { bytes, max, .. }) => {
            assert_eq!((bytes, max), (256, 255))
        }
        other => panic!("expected TooLong, got {other:?}"),
    }
    assert!(matches!(
        persistence.state::<Probe>("a\0b"),
        Err(InvalidPersistenceId::HoldsNul(_))
    ));
    assert!(matches!(
        persistence.state::<Probe>(""),
        Err(InvalidPersistenceId::Empty)
    ));
}

/// Ten concurrent writes that no store can hold (ids over the length limit, which PostgreSQL
/// cannot index) reach the journal with the default breaker (10 failures open it); then a
/// healthy actor's persist succeeds.
async fn ten_unwritable_writes_leave_the_breaker_closed(store: Arc<dyn JournalStore>) {
    let journal = JournalActor::start_with(
        store,
        JournalConfig {
            circuit_breaker: CircuitBreakerConfig {
                max_failures: 10,
                reset_timeout: Duration::from_secs(600),
            },
            ..JournalConfig::default()
        },
    );
    let replies: Vec<oneshot::Receiver<WriteMessagesReply>> = (0..10)
        .map(|_| {
            let (reply_to, reply) = oneshot::channel();
            let write = AtomicWrite::new(vec![event(&long_id(3_200), 1)]).expect("well-formed");
            journal.do_send(WriteMessages {
                writes: vec![write].into(),
                incarnation: Incarnation::next(),
                reply_to: reply_to.into(),
            });
            reply
        })
        .collect();
    for reply in futures::future::join_all(replies).await {
        match reply.expect("answered").into_results(1).pop() {
            Some(Err(AtomicWriteError::Rejected(rejection))) => {
                assert!(rejection.reason.contains("above the limit of 255 bytes"))
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
    }
    let (log_tx, mut log) = mpsc::unbounded_channel();
    let healthy = Probe {
        persistence: PersistenceState::new(journal, "healthy").expect("valid id"),
        applied: Vec::new(),
        log: log_tx,
    }
    .start();
    let stored = healthy
        .send(Persist(vec![named("fine")]))
        .await
        .expect("mailbox");
    assert!(
        matches!(stored, Ok(1)),
        "the healthy actor's persist: {stored:?}"
    );
    assert!(matches!(log.recv().await, Some(Seen::Recovered { .. })));
}

#[actix::test]
async fn ten_unwritable_writes_never_open_the_breaker_in_memory() {
    ten_unwritable_writes_leave_the_breaker_closed(Arc::new(InMemoryJournal::new())).await;
}

#[actix::test]
async fn ten_unwritable_writes_never_open_the_breaker_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("journal.db").display());
    let store = SqliteJournal::connect(&SqliteJournalOptions::new(url))
        .await
        .expect("open SQLite");
    ten_unwritable_writes_leave_the_breaker_closed(Arc::new(store)).await;
}

#[actix::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn ten_unwritable_writes_never_open_the_breaker_on_postgres() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    let store = PostgresJournal::connect(&PostgresJournalOptions::new(db.url()))
        .await
        .expect("open PostgreSQL");
    ten_unwritable_writes_leave_the_breaker_closed(Arc::new(store)).await;
}

#[actix::test]
async fn a_write_failing_next_to_a_stored_one_in_its_batch_does_not_count_against_the_store() {
    let (store, mut control) = ControlledJournal::new();
    let journal = JournalActor::start_with(
        Arc::new(store),
        JournalConfig {
            circuit_breaker: CircuitBreakerConfig {
                max_failures: 1,
                reset_timeout: Duration::from_secs(600),
            },
            ..JournalConfig::default()
        },
    );
    let (reply_to, reply) = oneshot::channel();
    journal.do_send(WriteMessages {
        writes: vec![
            AtomicWrite::new(vec![event("bad-row", 1)]).expect("well-formed"),
            AtomicWrite::new(vec![event("good-row", 1)]).expect("well-formed"),
        ]
        .into(),
        incarnation: Incarnation::next(),
        reply_to: reply_to.into(),
    });
    control.next_write().await.complete_with(vec![
        Outcome::Fail(JournalError::storage(
            "write",
            std::io::Error::other("the database refused this row"),
        )),
        Outcome::Store,
    ]);
    let results = reply.await.expect("answered").into_results(2);
    assert!(matches!(results[0], Err(AtomicWriteError::Failed(_))));
    assert!(results[1].is_ok());

    // With max-failures 1, a counted failure would have opened the breaker.
    let (reply_to, reply) = oneshot::channel();
    journal.do_send(WriteMessages {
        writes: vec![AtomicWrite::new(vec![event("next", 1)]).expect("well-formed")].into(),
        incarnation: Incarnation::next(),
        reply_to: reply_to.into(),
    });
    control.next_write().await.complete();
    let results = reply.await.expect("answered").into_results(1);
    assert!(
        results[0].is_ok(),
        "the store was let through: {:?}",
        results[0]
    );
}

#[actix::test]
async fn a_persist_over_a_limit_is_rejected_before_the_store_and_the_actor_goes_on() {
    let mut h = Harness::new(1);
    let actor = h.probe_in_group("big", 0).await;
    let too_big = "x".repeat(MAX_PAYLOAD_BYTES);
    match actor
        .send(Persist(vec![named(&too_big)]))
        .await
        .expect("mailbox")
    {
        Err(actix_persistence::PersistError::Rejected(rejection)) => {
            assert_eq!(rejection.seq_nr, 1);
            assert!(
                rejection
                    .reason
                    .contains("above the limit of 10485760 bytes"),
                "{}",
                rejection.reason
            );
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(
        !h.control.has_waiting_write(),
        "the write never reached the store"
    );
    let next = actor.send(Persist(vec![named("small")]));
    let write = h.control.next_write_for("big").await;
    assert_eq!(
        write.writes()[0].lowest_seq_nr(),
        2,
        "the rejected write keeps its sequence number (Akka's onPersistRejected rule)"
    );
    write.complete();
    assert_eq!(next.await.expect("mailbox").expect("stored"), 2);
    assert!(h.seen_so_far().contains(&Seen::Rejected {
        pid: "big".to_owned(),
        seq_nr: 1
    }));
}
