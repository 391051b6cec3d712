//! `Persistence::query()`: the read side over the configured journal, with the `[query]`
//! settings.

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Handler, Message};
use actix_persistence::query::QuerySettings;
use actix_persistence::snapshot::InMemorySnapshotStore;
use actix_persistence::{
    EnvelopeStreamExt, EventSourced, InMemoryJournal, Offset, PersistReply, PersistResult,
    Persistence, PersistenceState, PersistentActor, QueryError, Settings,
};
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum AccountEvent {
    Deposited(u64),
}

#[derive(PersistentActor)]
struct Account {
    persistence: PersistenceState<Self>,
    balance: u64,
}

impl EventSourced for Account {
    type Event = AccountEvent;

    fn apply(&mut self, event: &AccountEvent) {
        let AccountEvent::Deposited(amount) = event;
        self.balance += amount;
    }

    fn tags(&self, _event: &AccountEvent) -> Vec<String> {
        vec!["money".to_owned()]
    }
}

#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct Deposit(u64);

impl Handler<Deposit> for Account {
    type Result = PersistReply<u64>;
    fn handle(&mut self, msg: Deposit, ctx: &mut Self::Context) -> Self::Result {
        self.persist(ctx, AccountEvent::Deposited(msg.0), |account, _, _| {
            account.balance
        })
    }
}

fn inmem(extra: &str) -> actix_persistence::config::SettingsLoader {
    Settings::loader().toml_str(
        "test",
        &format!("[journal]\nplugin = \"inmem\"\n[snapshot-store]\nplugin = \"inmem\"\n{extra}"),
    )
}

#[actix::test]
async fn events_persisted_by_actors_are_read_by_slice_and_by_tag() {
    let persistence = Persistence::start_from(inmem("")).await.expect("start");
    let account = Account {
        persistence: persistence.state("Account|7").expect("id"),
        balance: 0,
    }
    .start();
    for amount in [10, 20] {
        account
            .send(Deposit(amount))
            .await
            .expect("send")
            .expect("persist");
    }
    let query = persistence
        .query()
        .expect("the in-memory journal answers queries");
    let events: Vec<_> = query
        .current_events_by_slices("Account", 0, 1023, Offset::NoOffset)
        .decode_json::<AccountEvent>()
        .map_ok(|e| {
            (
                e.persistence_id.to_string(),
                e.seq_nr,
                e.event,
                e.tags.to_vec(),
            )
        })
        .try_collect()
        .await
        .expect("query");
    let tags = vec!["money".to_owned()];
    assert_eq!(
        events,
        vec![
            (
                "Account|7".to_owned(),
                1,
                AccountEvent::Deposited(10),
                tags.clone()
            ),
            ("Account|7".to_owned(), 2, AccountEvent::Deposited(20), tags),
        ]
    );
    // A live query by tag sees the next event as soon as it is persisted.
    let mut live = query
        .events_by_tag("money", Offset::NoOffset)
        .decode_json::<AccountEvent>();
    account
        .send(Deposit(5))
        .await
        .expect("send")
        .expect("persist");
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let envelope = tokio::time::timeout(Duration::from_secs(30), live.next())
            .await
            .expect("within 30 s")
            .expect("live")
            .expect("no error");
        seen.push(envelope.event);
    }
    assert_eq!(seen[2], AccountEvent::Deposited(5));
}

#[actix::test]
async fn query_settings_come_from_the_query_section() {
    let loader =
        inmem("[query]\nrefresh-interval = \"50ms\"\npage-size = \"64\"\nread-ahead-pages = 3\n");
    let persistence = Persistence::start_from(loader).await.expect("start");
    let query = persistence.query().expect("query");
    assert_eq!(
        query.settings(),
        &QuerySettings {
            refresh_interval: Duration::from_millis(50),
            late_commit_window: Duration::from_secs(2),
            page_size: 64,
            read_ahead_pages: 3,
        }
    );
}

#[actix::test]
async fn a_store_given_without_a_query_store_answers_no_queries() {
    let journal = InMemoryJournal::new();
    let persistence = Persistence::start_with_stores(
        Settings::reference(),
        Arc::new(journal.clone()),
        Arc::new(InMemorySnapshotStore::new()),
    )
    .expect("start persistence");
    assert!(matches!(persistence.query(), Err(QueryError::Unsupported)));
    let persistence = persistence.with_query_store(Arc::new(journal));
    assert!(persistence.query().is_ok());
}

/// `sqlite_journal()` is the journal `Persistence` opened: its writer pool writes the same
/// file the actors persist to (the events are there), and it is its one writer (a read
/// model's table written on it is seen by the journal's own queries). The in-memory journal
/// and stores of the caller have none.
#[actix::test]
async fn the_opened_sqlite_journal_is_the_one_the_actors_persist_to() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("journal.db").display());
    let loader = Settings::loader().toml_str(
        "test",
        &format!("[journal]\nplugin = \"sqlite\"\n[journal.sqlite]\nurl = \"{url}\"\n"),
    );
    let persistence = Persistence::start_from(loader).await.expect("start");
    let account = Account {
        persistence: persistence.state("Account|1").expect("id"),
        balance: 0,
    }
    .start();
    for amount in [3, 4] {
        account
            .send(Deposit(amount))
            .await
            .expect("send")
            .expect("persist");
    }
    let journal = persistence.sqlite_journal().expect("the sqlite journal");
    let (stored,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM journal WHERE persistence_id = 'Account|1'")
            .fetch_one(journal.writer_pool())
            .await
            .expect("count");
    assert_eq!(stored, 2);
    #[cfg(feature = "postgres")]
    assert!(persistence.postgres_journal().is_none());
    persistence.shutdown().await;
    assert!(
        journal.writer_pool().is_closed(),
        "shutdown closes the journal it opened, the one handed out"
    );

    let in_memory = Persistence::start_from(inmem("")).await.expect("start");
    assert!(in_memory.sqlite_journal().is_none());
}
