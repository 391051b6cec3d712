//! The embedded reference.toml: identical to the root file, valid, and in one-to-one
//! correspondence with the typed settings.

use std::collections::BTreeSet;
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use actix_persistence_config::{
    env_var, keys, CircuitBreakerSettings, JournalPlugin, JournalSettings, PostgresSettings,
    QuerySettings, Settings, SnapshotStorePlugin, SnapshotStoreSettings, SqliteSettings,
    REFERENCE_TOML,
};

fn root_reference() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../reference.toml");
    std::fs::read_to_string(path).expect("the root reference.toml exists")
}

/// Every leaf key of a TOML table, dotted.
fn leaf_keys(table: &toml::Table, prefix: &str, out: &mut BTreeSet<String>) {
    for (name, value) in table {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        match value {
            toml::Value::Table(inner) => leaf_keys(inner, &path, out),
            _ => {
                out.insert(path);
            }
        }
    }
}

fn reference_keys() -> BTreeSet<String> {
    let table: toml::Table = REFERENCE_TOML
        .parse()
        .expect("reference.toml is valid TOML");
    let mut out = BTreeSet::new();
    leaf_keys(&table, "", &mut out);
    out
}

/// For each key: a value different from its default, and the typed field it must reach.
type Check = fn(&Settings) -> bool;
const CHANGES: &[(&str, &str, Check)] = &[
    ("journal.plugin", "\"inmem\"", |s| {
        s.journal.plugin == JournalPlugin::InMemory
    }),
    ("journal.write-reply-ordering-groups", "7", |s| {
        s.journal.write_reply_ordering_groups.get() == 7
    }),
    ("journal.max-write-reply-ordering-groups", "77", |s| {
        s.journal.max_write_reply_ordering_groups.get() == 77
    }),
    ("journal.replay-batch-size", "123", |s| {
        s.journal.replay_batch_size.get() == 123
    }),
    ("journal.max-batch-size", "1", |s| {
        s.journal.max_batch_size.get() == 1
    }),
    ("journal.max-concurrent-recoveries", "7", |s| {
        s.journal.max_concurrent_recoveries.get() == 7
    }),
    ("journal.recovery-timeout", "\"45s\"", |s| {
        s.journal.recovery_timeout == Duration::from_secs(45)
    }),
    ("journal.circuit-breaker.max-failures", "3", |s| {
        s.journal.circuit_breaker.max_failures == 3
    }),
    ("journal.circuit-breaker.call-timeout", "\"1500ms\"", |s| {
        s.journal.circuit_breaker.call_timeout == Duration::from_millis(1500)
    }),
    ("journal.circuit-breaker.reset-timeout", "\"2m\"", |s| {
        s.journal.circuit_breaker.reset_timeout == Duration::from_secs(120)
    }),
    ("journal.sqlite.url", "\"sqlite::memory:\"", |s| {
        s.journal.sqlite.url == "sqlite::memory:"
    }),
    ("journal.sqlite.max-connections", "9", |s| {
        s.journal.sqlite.max_connections.get() == 9
    }),
    ("journal.sqlite.busy-timeout", "\"250ms\"", |s| {
        s.journal.sqlite.busy_timeout == Duration::from_millis(250)
    }),
    (
        "journal.postgres.url",
        "\"postgres://app@db/events\"",
        |s| s.journal.postgres.url == "postgres://app@db/events",
    ),
    ("journal.postgres.max-connections", "25", |s| {
        s.journal.postgres.max_connections.get() == 25
    }),
    ("journal.postgres.acquire-timeout", "\"750ms\"", |s| {
        s.journal.postgres.acquire_timeout == Duration::from_millis(750)
    }),
    ("journal.postgres.statement-timeout", "\"1m\"", |s| {
        s.journal.postgres.statement_timeout == Duration::from_secs(60)
    }),
    ("journal.postgres.schema", "\"events\"", |s| {
        s.journal.postgres.schema == "events"
    }),
    ("snapshot-store.plugin", "\"inmem\"", |s| {
        s.snapshot_store.plugin == SnapshotStorePlugin::InMemory
    }),
    ("snapshot-store.call-timeout", "\"3s\"", |s| {
        s.snapshot_store.call_timeout == Duration::from_secs(3)
    }),
    ("query.refresh-interval", "\"50ms\"", |s| {
        s.query.refresh_interval == Duration::from_millis(50)
    }),
    ("query.late-commit-window", "\"7s\"", |s| {
        s.query.late_commit_window == Duration::from_secs(7)
    }),
    ("query.page-size", "64", |s| s.query.page_size.get() == 64),
    ("query.read-ahead-pages", "5", |s| {
        s.query.read_ahead_pages.get() == 5
    }),
];

fn inline_toml(key: &str, value: &str) -> String {
    let (section, name) = key.rsplit_once('.').expect("every key is in a section");
    format!("[{section}]\n{name} = {value}\n")
}

#[test]
fn embedded_reference_is_byte_identical_to_the_root_reference_toml() {
    assert_eq!(REFERENCE_TOML, root_reference());
}

#[test]
fn reference_parses_into_the_documented_defaults() {
    let expected = Settings {
        journal: JournalSettings {
            plugin: JournalPlugin::Sqlite,
            write_reply_ordering_groups: NonZeroUsize::MIN,
            max_write_reply_ordering_groups: NonZeroUsize::new(10_000).expect("non-zero"),
            replay_batch_size: NonZeroUsize::new(1000).expect("non-zero"),
            circuit_breaker: CircuitBreakerSettings {
                max_failures: 10,
                call_timeout: Duration::from_secs(10),
                reset_timeout: Duration::from_secs(30),
            },
            max_batch_size: NonZeroU32::new(512).expect("non-zero"),
            max_concurrent_recoveries: NonZeroUsize::new(50).expect("non-zero"),
            recovery_timeout: Duration::from_secs(30),
            sqlite: SqliteSettings {
                url: "sqlite:actix-persistence.db".to_owned(),
                max_connections: NonZeroU32::new(4).expect("non-zero"),
                busy_timeout: Duration::from_secs(5),
            },
            postgres: PostgresSettings {
                url: String::new(),
                max_connections: NonZeroU32::new(10).expect("non-zero"),
                acquire_timeout: Duration::from_secs(5),
                statement_timeout: Duration::from_secs(10),
                schema: String::new(),
            },
        },
        snapshot_store: SnapshotStoreSettings {
            plugin: SnapshotStorePlugin::Sqlite,
            call_timeout: Duration::from_secs(10),
        },
        query: QuerySettings {
            refresh_interval: Duration::from_millis(500),
            late_commit_window: Duration::from_secs(2),
            page_size: NonZeroU32::new(1000).expect("non-zero"),
            read_ahead_pages: NonZeroU32::new(3).expect("non-zero"),
        },
    };
    assert_eq!(Settings::reference(), expected);
}

#[test]
fn default_is_the_reference() {
    assert_eq!(Settings::default(), Settings::reference());
}

#[test]
fn loader_without_layers_and_with_an_empty_environment_gives_the_reference() {
    let settings = Settings::loader()
        .env_vars(Vec::<(String, String)>::new())
        .load()
        .expect("the reference alone is valid");
    assert_eq!(settings, Settings::reference());
}

#[test]
fn every_reference_key_is_known_to_the_key_table() {
    let known: BTreeSet<String> = keys().map(str::to_owned).collect();
    for key in reference_keys() {
        assert!(
            known.contains(&key),
            "{key} is in reference.toml but has no typed setting"
        );
    }
}

#[test]
fn key_table_has_no_key_missing_from_the_reference() {
    let documented = reference_keys();
    for key in keys() {
        assert!(
            documented.contains(key),
            "{key} has a typed setting but is not in reference.toml"
        );
    }
}

#[test]
fn every_key_has_a_change_check_and_every_check_a_key() {
    let checked: BTreeSet<String> = CHANGES.iter().map(|(k, _, _)| (*k).to_owned()).collect();
    assert_eq!(checked, reference_keys());
    assert_eq!(CHANGES.len(), keys().len());
}

#[test]
fn changing_each_reference_value_through_an_inline_layer_changes_its_typed_field() {
    let defaults = Settings::reference();
    for (key, value, reached) in CHANGES {
        assert!(
            !reached(&defaults),
            "{key}: pick a value different from the default"
        );
        let settings = Settings::loader()
            .toml_str("change", &inline_toml(key, value))
            .env_vars(Vec::<(String, String)>::new())
            .load()
            .unwrap_or_else(|err| panic!("{key} = {value}: {err}"));
        assert!(
            reached(&settings),
            "{key} = {value} did not reach its typed field"
        );
    }
}

#[test]
fn changing_each_setting_through_its_env_var_changes_its_typed_field() {
    for (key, value, reached) in CHANGES {
        let var = env_var(key).expect("known key");
        let raw: String = match value.parse::<toml::Value>() {
            Ok(toml::Value::String(s)) => s,
            _ => value.trim_matches('"').to_owned(),
        };
        let settings = Settings::loader()
            .env_vars([(var.clone(), raw.clone())])
            .load()
            .unwrap_or_else(|err| panic!("{var}={raw}: {err}"));
        assert!(
            reached(&settings),
            "{var}={raw} did not reach its typed field"
        );
    }
}

#[test]
fn reference_documents_the_env_var_of_every_key() {
    for key in keys() {
        let var = env_var(key).expect("known key");
        assert!(
            REFERENCE_TOML.contains(&format!("# Env: {var}\n")),
            "reference.toml does not name {var} for {key}"
        );
    }
}

#[test]
fn reference_documents_the_default_and_rule_of_every_key() {
    let text = REFERENCE_TOML;
    for key in keys() {
        let name = key.rsplit('.').next().expect("non-empty key");
        let line_start = text
            .find(&format!("\n{name} = "))
            .unwrap_or_else(|| panic!("{key} has no line in reference.toml"));
        let comment = &text[..line_start];
        let comment = &comment[comment.rfind("\n\n").unwrap_or(0)..];
        assert!(
            comment.contains("Default: "),
            "{key}: no default in its comment"
        );
        assert!(comment.contains("Rule: "), "{key}: no rule in its comment");
    }
}
