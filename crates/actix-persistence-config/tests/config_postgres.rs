//! The PostgreSQL settings (`[journal.postgres]`, `DATABASE_URL`), `journal.max-batch-size`
//! and `[snapshot-store]`. Every test passes its variables to the loader; none touches the
//! process environment.

mod common;

use std::time::Duration;

use actix_persistence_config::{
    env_var, ConfigError, ConfigProblem, ConfigSource, JournalPlugin, Settings,
    SnapshotStorePlugin, DATABASE_URL_ENV,
};
use common::{load_env, only_problem};

const URL_VAR: &str = "ACTIX_PERSISTENCE__JOURNAL__POSTGRES__URL";
const PLUGIN_VAR: &str = "ACTIX_PERSISTENCE__JOURNAL__PLUGIN";
const SNAPSHOT_PLUGIN_VAR: &str = "ACTIX_PERSISTENCE__SNAPSHOT_STORE__PLUGIN";

fn load(toml: &str, vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    Settings::loader()
        .toml_str("app", toml)
        .env_vars(vars.iter().copied())
        .load()
}

fn missing_url_problem(needed_by: &str) -> ConfigProblem {
    ConfigProblem {
        setting: "journal.postgres.url".to_owned(),
        value: "\"\"".to_owned(),
        rule: format!(
            "must name the PostgreSQL database when {needed_by}: set journal.postgres.url \
             (env ACTIX_PERSISTENCE__JOURNAL__POSTGRES__URL) or the environment variable \
             DATABASE_URL"
        ),
        source: ConfigSource::Reference,
    }
}

#[test]
fn new_keys_have_their_documented_env_vars() {
    assert_eq!(DATABASE_URL_ENV, "DATABASE_URL");
    for (key, var) in [
        (
            "journal.max-batch-size",
            "ACTIX_PERSISTENCE__JOURNAL__MAX_BATCH_SIZE",
        ),
        ("journal.postgres.url", URL_VAR),
        (
            "journal.postgres.max-connections",
            "ACTIX_PERSISTENCE__JOURNAL__POSTGRES__MAX_CONNECTIONS",
        ),
        (
            "journal.postgres.acquire-timeout",
            "ACTIX_PERSISTENCE__JOURNAL__POSTGRES__ACQUIRE_TIMEOUT",
        ),
        (
            "journal.postgres.statement-timeout",
            "ACTIX_PERSISTENCE__JOURNAL__POSTGRES__STATEMENT_TIMEOUT",
        ),
        ("snapshot-store.plugin", SNAPSHOT_PLUGIN_VAR),
    ] {
        assert_eq!(env_var(key).as_deref(), Some(var), "{key}");
    }
}

#[test]
fn postgres_plugin_with_a_url_in_a_file_layer_is_valid() {
    let settings = load(
        "[journal]\nplugin = \"postgres\"\n\
         [journal.postgres]\nurl = \"postgres://app@db/events\"\nmax-connections = 3\n\
         acquire-timeout = \"2s\"\nstatement-timeout = \"30s\"\n",
        &[],
    )
    .expect("valid");
    assert_eq!(settings.journal.plugin, JournalPlugin::Postgres);
    assert_eq!(settings.journal.postgres.url, "postgres://app@db/events");
    assert_eq!(settings.journal.postgres.max_connections.get(), 3);
    assert_eq!(
        settings.journal.postgres.acquire_timeout,
        Duration::from_secs(2)
    );
    assert_eq!(
        settings.journal.postgres.statement_timeout,
        Duration::from_secs(30)
    );
}

#[test]
fn empty_url_takes_database_url_from_the_loader_environment() {
    let settings = load_env(&[
        (PLUGIN_VAR, "postgres"),
        (DATABASE_URL_ENV, "postgres:///events?host=/run/pg"),
    ])
    .expect("valid");
    assert_eq!(settings.journal.plugin, JournalPlugin::Postgres);
    assert_eq!(
        settings.journal.postgres.url,
        "postgres:///events?host=/run/pg"
    );
}

#[test]
fn url_setting_wins_over_database_url() {
    let from_file = load(
        "[journal]\nplugin = \"postgres\"\n[journal.postgres]\nurl = \"postgres://file/db\"\n",
        &[(DATABASE_URL_ENV, "postgres://env/db")],
    )
    .expect("valid");
    assert_eq!(from_file.journal.postgres.url, "postgres://file/db");
    let from_var = load_env(&[
        (PLUGIN_VAR, "postgres"),
        (URL_VAR, "postgres://var/db"),
        (DATABASE_URL_ENV, "postgres://env/db"),
    ])
    .expect("valid");
    assert_eq!(from_var.journal.postgres.url, "postgres://var/db");
}

#[test]
fn postgres_journal_without_url_or_database_url_fails_naming_both() {
    let problem = only_problem(load_env(&[
        (PLUGIN_VAR, "postgres"),
        (SNAPSHOT_PLUGIN_VAR, "postgres"),
    ]));
    assert_eq!(
        problem,
        missing_url_problem("journal.plugin is \"postgres\" (and the snapshot store uses it)")
    );
    assert_eq!(
        problem.to_string(),
        "journal.postgres.url = \"\" (from reference.toml): must name the PostgreSQL database \
         when journal.plugin is \"postgres\" (and the snapshot store uses it): set journal.postgres.url \
         (env ACTIX_PERSISTENCE__JOURNAL__POSTGRES__URL) or the environment variable DATABASE_URL"
    );
}

#[test]
fn blank_url_and_blank_database_url_count_as_unset() {
    let problem = only_problem(load_env(&[
        (PLUGIN_VAR, "postgres"),
        (URL_VAR, "  "),
        (DATABASE_URL_ENV, ""),
    ]));
    assert_eq!(problem.setting, "journal.postgres.url");
    assert_eq!(problem.value, "\"  \"");
    assert_eq!(problem.source, ConfigSource::Env(URL_VAR.to_owned()));
}

#[test]
fn postgres_snapshot_store_without_url_fails_naming_both() {
    let problem = only_problem(load_env(&[(SNAPSHOT_PLUGIN_VAR, "postgres")]));
    assert_eq!(
        problem,
        missing_url_problem("snapshot-store.plugin is \"postgres\"")
    );
    let problem = only_problem(load_env(&[
        (PLUGIN_VAR, "postgres"),
        (SNAPSHOT_PLUGIN_VAR, "postgres"),
    ]));
    assert_eq!(
        problem,
        missing_url_problem("journal.plugin is \"postgres\" (and the snapshot store uses it)")
    );
}

#[test]
fn without_a_postgres_plugin_no_url_is_needed() {
    let settings = load_env(&[(PLUGIN_VAR, "inmem")]).expect("valid");
    assert_eq!(settings.journal.postgres.url, "");
    // DATABASE_URL is still resolved, for whoever opens a PostgreSQL store by hand.
    let settings = load_env(&[(DATABASE_URL_ENV, "postgres://env/db")]).expect("valid");
    assert_eq!(settings.journal.plugin, JournalPlugin::Sqlite);
    assert_eq!(settings.journal.postgres.url, "postgres://env/db");
}

#[test]
fn reference_never_reads_database_url() {
    // Whatever the process environment holds (CI exports DATABASE_URL), the defaults do not
    // depend on it.
    assert_eq!(Settings::reference().journal.postgres.url, "");
}

#[test]
fn url_that_is_not_a_string_fails() {
    let problem = only_problem(load("[journal.postgres]\nurl = 5432\n", &[]));
    assert_eq!(problem.setting, "journal.postgres.url");
    assert_eq!(problem.value, "5432");
    assert_eq!(problem.rule, "must be a string");
    assert_eq!(problem.source, ConfigSource::Inline("app".to_owned()));
}

#[test]
fn postgres_counts_and_durations_follow_their_rules() {
    let err = load_env(&[
        ("ACTIX_PERSISTENCE__JOURNAL__POSTGRES__MAX_CONNECTIONS", "0"),
        (
            "ACTIX_PERSISTENCE__JOURNAL__POSTGRES__ACQUIRE_TIMEOUT",
            "0s",
        ),
        (
            "ACTIX_PERSISTENCE__JOURNAL__POSTGRES__STATEMENT_TIMEOUT",
            "soon",
        ),
    ])
    .expect_err("invalid");
    let found: Vec<(&str, &str)> = err
        .problems
        .iter()
        .map(|p| (p.setting.as_str(), p.value.as_str()))
        .collect();
    assert_eq!(
        found,
        vec![
            ("journal.postgres.max-connections", "\"0\""),
            ("journal.postgres.acquire-timeout", "\"0s\""),
            ("journal.postgres.statement-timeout", "\"soon\""),
        ]
    );
    assert_eq!(err.problems[0].rule, "must be an integer >= 1");
    assert_eq!(err.problems[1].rule, "must be a duration > 0");
}

#[test]
fn max_batch_size_defaults_to_512_and_1_turns_group_commit_off() {
    assert_eq!(Settings::reference().journal.max_batch_size.get(), 512);
    let settings = load_env(&[("ACTIX_PERSISTENCE__JOURNAL__MAX_BATCH_SIZE", "1")]).expect("valid");
    assert_eq!(settings.journal.max_batch_size.get(), 1);
    let problem = only_problem(load_env(&[(
        "ACTIX_PERSISTENCE__JOURNAL__MAX_BATCH_SIZE",
        "0",
    )]));
    assert_eq!(
        problem,
        ConfigProblem {
            setting: "journal.max-batch-size".to_owned(),
            value: "\"0\"".to_owned(),
            rule: "must be an integer >= 1".to_owned(),
            source: ConfigSource::Env("ACTIX_PERSISTENCE__JOURNAL__MAX_BATCH_SIZE".to_owned()),
        }
    );
    let problem = only_problem(load("[journal]\nmax-batch-size = 4294967296\n", &[]));
    assert_eq!(problem.rule, "must be an integer >= 1 and <= 4294967295");
}

#[test]
fn snapshot_store_plugin_is_parsed_and_checked() {
    assert_eq!(
        Settings::reference().snapshot_store.plugin,
        SnapshotStorePlugin::Sqlite
    );
    let settings = load("[snapshot-store]\nplugin = \"inmem\"\n", &[]).expect("valid");
    assert_eq!(
        settings.snapshot_store.plugin,
        SnapshotStorePlugin::InMemory
    );
    let settings = load_env(&[
        (SNAPSHOT_PLUGIN_VAR, "postgres"),
        (DATABASE_URL_ENV, "postgres://env/db"),
    ])
    .expect("valid");
    assert_eq!(
        settings.snapshot_store.plugin,
        SnapshotStorePlugin::Postgres
    );
    assert_eq!(settings.journal.plugin, JournalPlugin::Sqlite);
    let problem = only_problem(load_env(&[(SNAPSHOT_PLUGIN_VAR, "Postgres")]));
    assert_eq!(
        problem,
        ConfigProblem {
            setting: "snapshot-store.plugin".to_owned(),
            value: "\"Postgres\"".to_owned(),
            rule: "must be one of \"same-as-journal\", \"sqlite\", \"postgres\", \"inmem\""
                .to_owned(),
            source: ConfigSource::Env(SNAPSHOT_PLUGIN_VAR.to_owned()),
        }
    );
}

#[test]
fn problems_keep_the_order_of_the_reference() {
    let err = load_env(&[
        (SNAPSHOT_PLUGIN_VAR, "mysql"),
        (PLUGIN_VAR, "postgres"),
        (
            "ACTIX_PERSISTENCE__JOURNAL__POSTGRES__STATEMENT_TIMEOUT",
            "0s",
        ),
    ])
    .expect_err("invalid");
    let settings: Vec<&str> = err.problems.iter().map(|p| p.setting.as_str()).collect();
    assert_eq!(
        settings,
        vec![
            "journal.postgres.url",
            "journal.postgres.statement-timeout",
            "snapshot-store.plugin",
        ]
    );
}

#[test]
fn misspelt_postgres_key_is_hinted() {
    let problem = only_problem(load("[journal.postgres]\nmax-conections = 3\n", &[]));
    assert_eq!(problem.setting, "journal.postgres.max-conections");
    assert_eq!(
        problem.rule,
        "is not a known setting; did you mean journal.postgres.max-connections?"
    );
}

#[test]
fn debug_output_hides_the_password_of_the_url() {
    let settings = load_env(&[
        (PLUGIN_VAR, "postgres"),
        (DATABASE_URL_ENV, "postgres://app:hunter2@db/events"),
    ])
    .expect("valid");
    let debug = format!("{settings:?}");
    assert!(!debug.contains("hunter2"), "{debug}");
    assert!(debug.contains("postgres://app:***@db/events"), "{debug}");
    // The value itself is intact.
    assert_eq!(
        settings.journal.postgres.url,
        "postgres://app:hunter2@db/events"
    );
}

#[test]
fn a_url_that_is_not_postgres_fails_startup_when_a_plugin_is_postgres() {
    // The driver reads any URL: `sqlite:app.db` would connect to a PostgreSQL database named
    // "app.db" and fail with "database does not exist", far from the setting.
    let problem = only_problem(load_env(&[
        (PLUGIN_VAR, "postgres"),
        (DATABASE_URL_ENV, "sqlite:app.db"),
    ]));
    assert_eq!(problem.setting, "journal.postgres.url");
    assert_eq!(problem.value, "\"sqlite:app.db\"");
    assert_eq!(
        problem.source,
        ConfigSource::Env(DATABASE_URL_ENV.to_owned())
    );
    assert!(
        problem.rule.starts_with("must be a PostgreSQL URL"),
        "{problem}"
    );
    assert!(
        problem.rule.contains("(it starts with \"sqlite\")"),
        "{problem}"
    );

    let problem = only_problem(load(
        "[journal]\nplugin = \"postgres\"\n[journal.postgres]\nurl = \"localhost:5432/db\"\n",
        &[],
    ));
    assert_eq!(problem.source, ConfigSource::Inline("app".to_owned()));
    assert!(
        problem.rule.starts_with("must be a PostgreSQL URL"),
        "{problem}"
    );

    // Both spellings of the scheme, any case, are PostgreSQL URLs.
    for url in [
        "postgres://h/db",
        "postgresql://h/db",
        "POSTGRES:///db?host=/run/pg",
    ] {
        assert!(
            load_env(&[(PLUGIN_VAR, "postgres"), (URL_VAR, url)]).is_ok(),
            "{url}"
        );
    }
    // A DATABASE_URL of the application's own (SQLite) is not read while no plugin is
    // "postgres".
    assert!(load_env(&[(DATABASE_URL_ENV, "sqlite:app.db")]).is_ok());
}
