//! Bad settings fail `Persistence` startup, before any journal or persistent actor exists.

use actix_persistence::config::ConfigSource;
use actix_persistence::{Persistence, Settings, StartError};

const GROUPS_VAR: &str = "ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS";

fn inmem_loader() -> actix_persistence::config::SettingsLoader {
    Settings::loader().toml_str("test", "[journal]\nplugin = \"inmem\"\n")
}

#[actix::test]
async fn zero_write_reply_ordering_groups_fails_startup_naming_setting_value_and_env_var() {
    let loader = inmem_loader().env_vars([(GROUPS_VAR, "0")]);
    let error = match Persistence::start_from(loader).await {
        Err(StartError::Config(error)) => error,
        Ok(_) => panic!("a journal with 0 groups must not start"),
        Err(other) => panic!("expected a config error, got {other}"),
    };
    assert_eq!(error.problems.len(), 1);
    let problem = &error.problems[0];
    assert_eq!(problem.setting, "journal.write-reply-ordering-groups");
    assert_eq!(problem.value, "\"0\"");
    assert_eq!(problem.source, ConfigSource::Env(GROUPS_VAR.to_owned()));
    let message = error.to_string();
    assert!(
        message.contains("journal.write-reply-ordering-groups"),
        "{message}"
    );
    assert!(message.contains(GROUPS_VAR), "{message}");
    assert!(message.contains(">= 1"), "{message}");
}

#[actix::test]
async fn groups_from_an_env_string_start_the_journal_with_that_many_groups() {
    let loader = inmem_loader().env_vars([(GROUPS_VAR, "4")]);
    let persistence = Persistence::start_from(loader).await.expect("\"4\" is 4");
    assert_eq!(
        persistence
            .settings()
            .journal
            .write_reply_ordering_groups
            .get(),
        4
    );
}

#[actix::test]
async fn groups_above_the_limit_fail_startup_naming_the_limit() {
    let loader = inmem_loader().env_vars([
        (GROUPS_VAR, "8"),
        (
            "ACTIX_PERSISTENCE__JOURNAL__MAX_WRITE_REPLY_ORDERING_GROUPS",
            "4",
        ),
    ]);
    let Err(StartError::Config(error)) = Persistence::start_from(loader).await else {
        panic!("8 groups above a limit of 4 must not start");
    };
    let message = error.to_string();
    assert!(
        message.contains("journal.max-write-reply-ordering-groups"),
        "{message}"
    );
    assert!(message.contains('8') && message.contains('4'), "{message}");
}

#[actix::test]
async fn an_unopenable_sqlite_file_fails_startup_with_a_store_error() {
    let loader = Settings::loader().toml_str(
        "test",
        "[journal]\nplugin = \"sqlite\"\n[journal.sqlite]\nurl = \"sqlite:/nonexistent-dir/x/journal.db\"\n",
    );
    match Persistence::start_from(loader).await {
        Err(StartError::Store { plugin, source }) => {
            assert_eq!(plugin, "sqlite");
            assert!(
                source.to_string().contains("/nonexistent-dir/x/journal.db"),
                "{source}"
            );
        }
        Ok(_) => panic!("a journal in a missing directory must not start"),
        Err(other) => panic!("expected a store error, got {other}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn start_outside_an_actix_system_is_an_error_saying_to_start_one() {
    let Err(error) = Persistence::start_from(inmem_loader().env_vars([("PATH", "/bin")])).await
    else {
        panic!("the journal actor cannot start without an Actix system");
    };
    assert!(
        matches!(error, StartError::NoActixSystem),
        "expected NoActixSystem, got {error}"
    );
    assert!(error.to_string().contains("#[actix::main]"), "{error}");
}

/// `journal.max-concurrent-recoveries` accepts any integer up to `usize::MAX` ("no limit"):
/// such a value starts the journal, and actors recover. Above tokio's semaphore limit
/// (`usize::MAX >> 3`) it used to panic in `Persistence::start`, after validation passed.
#[actix::test]
async fn the_largest_max_concurrent_recoveries_starts_and_recovers() {
    use actix_persistence::actix::Handler;
    use actix_persistence::{
        EventSourced, Message, PersistReply, PersistResult, PersistenceState, PersistentActor,
    };

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Added(i64);

    #[derive(PersistentActor)]
    struct Counter {
        persistence: PersistenceState<Self>,
        total: i64,
    }

    impl EventSourced for Counter {
        type Event = Added;
        fn apply(&mut self, event: &Added) {
            self.total += event.0;
        }
    }

    #[derive(Message)]
    #[rtype(result = "PersistResult<i64>")]
    struct Add(i64);

    impl Handler<Add> for Counter {
        type Result = PersistReply<i64>;
        fn handle(&mut self, msg: Add, ctx: &mut Self::Context) -> Self::Result {
            self.persist(ctx, Added(msg.0), |counter, _, _| counter.total)
        }
    }

    let unlimited = usize::MAX.to_string();
    let loader = inmem_loader().env_vars([(
        "ACTIX_PERSISTENCE__JOURNAL__MAX_CONCURRENT_RECOVERIES",
        unlimited.as_str(),
    )]);
    let persistence = Persistence::start_from(loader)
        .await
        .expect("a valid setting starts");
    let counter = Counter {
        persistence: persistence.state("counter-1").unwrap(),
        total: 0,
    }
    .start_persistent();
    assert_eq!(counter.ask(Add(2)).await.unwrap(), 2);
    assert_eq!(counter.ask(Add(3)).await.unwrap(), 5);
    persistence.shutdown().await;
}

#[actix::test]
async fn settings_adjusted_in_code_with_groups_above_the_limit_fail_startup() {
    // `Settings` fields are public for embedders to adjust a copy; the limit still holds
    // (without it, a typo of a group count in code creates millions of actors at startup).
    let mut settings = inmem_loader()
        .env_vars(Vec::<(String, String)>::new())
        .load()
        .expect("valid");
    settings.journal.max_write_reply_ordering_groups =
        std::num::NonZeroUsize::new(4).expect("not 0");
    settings.journal.write_reply_ordering_groups = std::num::NonZeroUsize::new(5).expect("not 0");
    // Stores of the caller's are checked alike.
    let given = Persistence::start_with_stores(
        settings.clone(),
        std::sync::Arc::new(actix_persistence::InMemoryJournal::new()),
        std::sync::Arc::new(actix_persistence::snapshot::InMemorySnapshotStore::new()),
    );
    match given {
        Err(StartError::Config(error)) => {
            assert_eq!(
                error.problems[0].setting,
                "journal.write-reply-ordering-groups"
            )
        }
        Ok(_) => panic!("5 groups above a limit of 4 must not start over given stores"),
        Err(other) => panic!("expected a config error, got {other}"),
    }
    let error = match Persistence::start_with(settings).await {
        Err(StartError::Config(error)) => error,
        Ok(_) => panic!("5 groups above a limit of 4 must not start"),
        Err(other) => panic!("expected a config error, got {other}"),
    };
    assert_eq!(error.problems.len(), 1, "{error}");
    let problem = &error.problems[0];
    assert_eq!(problem.setting, "journal.write-reply-ordering-groups");
    assert_eq!(problem.value, "5");
    assert!(
        problem
            .rule
            .contains("<= journal.max-write-reply-ordering-groups (4"),
        "{}",
        problem.rule
    );
}
