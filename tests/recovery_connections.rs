//! A recovering actor never keeps a pooled connection checked out for its `apply`: a replay
//! reads a page, gives the connection back, and only then hands the page's events to the actor.
//! The next two pages are read ahead, each by a task of its own, while the actor applies the
//! current one, so two connections may be in use by those queries meanwhile, never more, and
//! none once the last page was read. Checked from inside `apply` on SQLite and PostgreSQL, with pages of 10 events.

mod support;

use std::sync::Arc;

use actix_persistence::actix::Actor;
use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence::{
    AtomicWrite, JournalStore, PersistenceState, PersistentRepr, PostgresJournal,
    PostgresJournalOptions, SqliteJournal, SqliteJournalOptions,
};
use actix_persistence_sql::test_util::TestDatabase;
use support::ledger::*;

const EVENTS: u64 = 55;

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

/// The reads ahead may hold two connections while a page is applied; the last page (events 51
/// to 55, read while 41 to 50 were applied, and not full: nothing follows it) is applied with
/// every connection back in the pool.
fn assert_at_most_the_read_ahead(probed: &[u32]) {
    assert_eq!(probed.len(), EVENTS as usize);
    assert!(
        probed.iter().all(|&in_use| in_use <= 2),
        "more than the reads ahead's two connections in use: {probed:?}"
    );
    assert_eq!(
        &probed[50..],
        &[0; 5],
        "in use after the last page: {probed:?}"
    );
}

/// Stores `EVENTS` events, recovers a ledger from `journal`, and returns what
/// `reads_in_use` said in each `apply`.
async fn reads_in_use_during_apply<J: JournalStore + Clone>(
    journal: J,
    reads_in_use: impl Fn(&J) -> u32 + Send + 'static,
) -> Vec<u32> {
    let writes = (1..=EVENTS)
        .map(|seq_nr| AtomicWrite::new(vec![repr("conn", seq_nr)]).expect("shape"))
        .collect();
    let results = journal.write_messages(writes).await.expect("stored");
    assert!(results.iter().all(Result::is_ok));

    let script = Arc::new(Script::default());
    let observed = journal.clone();
    *script.probe.lock().expect("lock") = Some(Box::new(move || reads_in_use(&observed)));
    let actor = JournalActor::start_with(Arc::new(journal), JournalConfig::default());
    let state = PersistenceState::new(actor, "conn").expect("valid id");
    let ledger = Ledger::new(state, Arc::clone(&script)).start();
    assert_eq!(
        ledger.send(Balance).await.expect("recovered"),
        (EVENTS as i64, EVENTS)
    );
    let probed = script.probed.lock().expect("lock").clone();
    probed
}

#[actix::test]
async fn no_reader_connection_is_checked_out_while_apply_runs_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("journal.db").display());
    let journal = SqliteJournal::connect(&SqliteJournalOptions {
        replay_batch_size: 10,
        ..SqliteJournalOptions::new(url)
    })
    .await
    .expect("open SQLite");
    let probed = reads_in_use_during_apply(journal, |j| j.connections_in_use().reads).await;
    assert_at_most_the_read_ahead(&probed);
}

#[actix::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn no_reader_connection_is_checked_out_while_apply_runs_on_postgres() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    let journal = PostgresJournal::connect(&PostgresJournalOptions {
        max_connections: 4,
        replay_batch_size: 10,
        ..PostgresJournalOptions::new(db.url())
    })
    .await
    .expect("connect to the test database");
    let probed = reads_in_use_during_apply(journal, |j| j.connections_in_use().reads).await;
    assert_at_most_the_read_ahead(&probed);
}
