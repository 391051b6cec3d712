//! `snapshot-store.plugin` follows `journal.plugin` unless set, and a shared journal with a
//! process-local snapshot store is refused. Every test passes its variables to the loader.

mod common;

use actix_persistence_config::{
    ConfigSource, JournalPlugin, Settings, SnapshotStorePlugin, DATABASE_URL_ENV,
};
use common::{load_env, load_inline, only_problem};

const PLUGIN_VAR: &str = "ACTIX_PERSISTENCE__JOURNAL__PLUGIN";
const SNAPSHOT_PLUGIN_VAR: &str = "ACTIX_PERSISTENCE__SNAPSHOT_STORE__PLUGIN";
const PG_URL: (&str, &str) = (DATABASE_URL_ENV, "postgres://app@db/events");

#[test]
fn snapshot_store_follows_a_postgres_journal_when_not_set() {
    let settings = load_env(&[(PLUGIN_VAR, "postgres"), PG_URL]).expect("valid");
    assert_eq!(settings.journal.plugin, JournalPlugin::Postgres);
    assert_eq!(
        settings.snapshot_store.plugin,
        SnapshotStorePlugin::Postgres
    );
}

#[test]
fn snapshot_store_follows_every_journal_plugin_by_default() {
    for (journal, expected) in [
        ("sqlite", SnapshotStorePlugin::Sqlite),
        ("inmem", SnapshotStorePlugin::InMemory),
        ("postgres", SnapshotStorePlugin::Postgres),
    ] {
        let settings = load_env(&[(PLUGIN_VAR, journal), PG_URL]).expect("valid");
        assert_eq!(settings.snapshot_store.plugin, expected, "{journal}");
    }
    assert_eq!(
        Settings::reference().snapshot_store.plugin,
        SnapshotStorePlugin::Sqlite
    );
}

#[test]
fn explicit_snapshot_store_overrides_the_journal() {
    let settings = load_env(&[(SNAPSHOT_PLUGIN_VAR, "inmem")]).expect("valid");
    assert_eq!(settings.journal.plugin, JournalPlugin::Sqlite);
    assert_eq!(
        settings.snapshot_store.plugin,
        SnapshotStorePlugin::InMemory
    );
    let settings = load_env(&[
        (SNAPSHOT_PLUGIN_VAR, "same-as-journal"),
        (PLUGIN_VAR, "inmem"),
    ])
    .expect("valid");
    assert_eq!(
        settings.snapshot_store.plugin,
        SnapshotStorePlugin::InMemory
    );
}

#[test]
fn postgres_journal_with_a_sqlite_snapshot_store_is_refused_naming_both_settings() {
    let problem = only_problem(load_env(&[
        (PLUGIN_VAR, "postgres"),
        (SNAPSHOT_PLUGIN_VAR, "sqlite"),
        PG_URL,
    ]));
    assert_eq!(problem.setting, "snapshot-store.plugin");
    assert_eq!(problem.value, "\"sqlite\"");
    assert_eq!(
        problem.source,
        ConfigSource::Env(SNAPSHOT_PLUGIN_VAR.to_owned())
    );
    assert!(
        problem.rule.starts_with(&format!(
            "is local to this process while journal.plugin = \"postgres\" (from env {PLUGIN_VAR}) is shared"
        )),
        "{}",
        problem.rule
    );
    assert!(problem
        .rule
        .contains("set snapshot-store.plugin to \"postgres\""));
}

#[test]
fn postgres_journal_with_an_in_memory_snapshot_store_is_refused() {
    let problem = only_problem(load_inline(
        "app",
        "[journal]\nplugin = \"postgres\"\n[journal.postgres]\nurl = \"postgres://db/x\"\n\
         [snapshot-store]\nplugin = \"inmem\"\n",
    ));
    assert_eq!(problem.setting, "snapshot-store.plugin");
    assert!(problem
        .rule
        .contains("journal.plugin = \"postgres\" (from app)"));
}

#[test]
fn local_journal_with_a_shared_snapshot_store_is_accepted() {
    let settings = load_env(&[(SNAPSHOT_PLUGIN_VAR, "postgres"), PG_URL]).expect("valid");
    assert_eq!(settings.journal.plugin, JournalPlugin::Sqlite);
    assert_eq!(
        settings.snapshot_store.plugin,
        SnapshotStorePlugin::Postgres
    );
}
