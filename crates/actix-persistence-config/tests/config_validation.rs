//! Rules checked on the merged configuration, whichever layer set which value.

mod common;

use std::time::Duration;

use actix_persistence_config::{ConfigProblem, ConfigSource, JournalPlugin, Settings};
use common::{load_env, load_inline, only_problem, write_file, GROUPS, GROUPS_VAR};

const LIMIT: &str = "journal.max-write-reply-ordering-groups";
const LIMIT_VAR: &str = "ACTIX_PERSISTENCE__JOURNAL__MAX_WRITE_REPLY_ORDERING_GROUPS";

fn inline() -> ConfigSource {
    ConfigSource::Inline("inline".to_owned())
}

#[test]
fn limit_below_groups_fails_when_limit_is_in_the_file_and_groups_in_env() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        &dir,
        "app.toml",
        "[journal]\nmax-write-reply-ordering-groups = 10\n",
    );
    let problem = only_problem(
        Settings::loader()
            .file(&path)
            .env_vars([(GROUPS_VAR, "12")])
            .load(),
    );
    assert_eq!(
        problem,
        ConfigProblem {
            setting: GROUPS.to_owned(),
            value: "\"12\"".to_owned(),
            rule: format!(
                "must be <= {LIMIT} (10 from file {}); raise the limit to use more groups",
                path.display()
            ),
            source: ConfigSource::Env(GROUPS_VAR.to_owned()),
        }
    );
}

#[test]
fn limit_below_groups_fails_when_groups_are_in_the_file_and_limit_in_env() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        &dir,
        "app.toml",
        "[journal]\nwrite-reply-ordering-groups = 12\n",
    );
    let problem = only_problem(
        Settings::loader()
            .file(&path)
            .env_vars([(LIMIT_VAR, "10")])
            .load(),
    );
    assert_eq!(
        problem,
        ConfigProblem {
            setting: GROUPS.to_owned(),
            value: "12".to_owned(),
            rule: format!(
                "must be <= {LIMIT} (10 from env {LIMIT_VAR}); raise the limit to use more groups"
            ),
            source: ConfigSource::File(path.clone()),
        }
    );
    assert_eq!(
        problem.to_string(),
        format!(
            "journal.write-reply-ordering-groups = 12 (from file {}): must be <= \
             journal.max-write-reply-ordering-groups (10 from env {LIMIT_VAR}); raise the limit \
             to use more groups",
            path.display()
        )
    );
}

#[test]
fn groups_equal_to_the_limit_are_accepted() {
    let settings = load_env(&[(GROUPS_VAR, "10"), (LIMIT_VAR, "10")]).expect("valid");
    assert_eq!(settings.journal.write_reply_ordering_groups.get(), 10);
    assert_eq!(settings.journal.max_write_reply_ordering_groups.get(), 10);
}

#[test]
fn raised_limit_allows_more_groups_than_the_default_limit() {
    let settings = load_env(&[(GROUPS_VAR, "10001"), (LIMIT_VAR, "20000")]).expect("valid");
    assert_eq!(settings.journal.write_reply_ordering_groups.get(), 10001);
}

#[test]
fn limit_0_fails_naming_the_limit_setting() {
    let problem = only_problem(load_env(&[(LIMIT_VAR, "0")]));
    assert_eq!(
        problem,
        ConfigProblem {
            setting: LIMIT.to_owned(),
            value: "\"0\"".to_owned(),
            rule: "must be an integer >= 1".to_owned(),
            source: ConfigSource::Env(LIMIT_VAR.to_owned()),
        }
    );
}

#[test]
fn limit_minus_1_fails_naming_the_limit_setting() {
    let problem = only_problem(load_inline(
        "inline",
        "[journal]\nmax-write-reply-ordering-groups = -1\n",
    ));
    assert_eq!(
        problem,
        ConfigProblem {
            setting: LIMIT.to_owned(),
            value: "-1".to_owned(),
            rule: "must be an integer >= 1".to_owned(),
            source: inline(),
        }
    );
}

#[test]
fn invalid_limit_is_one_problem_not_a_second_one_for_the_groups() {
    let problem = only_problem(load_env(&[(GROUPS_VAR, "4"), (LIMIT_VAR, "0")]));
    assert_eq!(problem.setting, LIMIT);
}

#[test]
fn several_problems_are_reported_together() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        &dir,
        "app.toml",
        "[journal]\nplugin = \"mysql\"\nreplay-batch-sise = 5\n\
         [journal.circuit-breaker]\ncall-timeout = \"0s\"\n",
    );
    let err = Settings::loader()
        .file(&path)
        .env_vars([
            (GROUPS_VAR, "four"),
            ("ACTIX_PERSISTENCE__JOURNAL__SQLITE__MAX_CONNECTIONS", "0"),
        ])
        .load()
        .expect_err("invalid");
    let found: Vec<(&str, &str, &ConfigSource)> = err
        .problems
        .iter()
        .map(|p| (p.setting.as_str(), p.value.as_str(), &p.source))
        .collect();
    let file = ConfigSource::File(path.clone());
    let groups_env = ConfigSource::Env(GROUPS_VAR.to_owned());
    let conn_env =
        ConfigSource::Env("ACTIX_PERSISTENCE__JOURNAL__SQLITE__MAX_CONNECTIONS".to_owned());
    assert_eq!(
        found,
        vec![
            ("journal.replay-batch-sise", "5", &file),
            ("journal.plugin", "\"mysql\"", &file),
            (GROUPS, "\"four\"", &groups_env),
            ("journal.circuit-breaker.call-timeout", "\"0s\"", &file),
            ("journal.sqlite.max-connections", "\"0\"", &conn_env),
        ]
    );
}

#[test]
fn error_display_lists_one_problem_per_line() {
    let err = load_env(&[
        (GROUPS_VAR, "0"),
        ("ACTIX_PERSISTENCE__JOURNAL__REPLAY_BATCH_SIZE", "x"),
    ])
    .expect_err("invalid");
    let text = err.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        vec![
            "journal.write-reply-ordering-groups = \"0\" (from env \
             ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS): must be an integer >= 1",
            "journal.replay-batch-size = \"x\" (from env \
             ACTIX_PERSISTENCE__JOURNAL__REPLAY_BATCH_SIZE): must be an integer >= 1",
        ]
    );
}

#[test]
fn replay_batch_size_0_fails() {
    let problem = only_problem(load_inline("inline", "[journal]\nreplay-batch-size = 0\n"));
    assert_eq!(problem.setting, "journal.replay-batch-size");
    assert_eq!(problem.value, "0");
    assert_eq!(problem.rule, "must be an integer >= 1");
    assert_eq!(problem.source, inline());
}

#[test]
fn max_failures_0_fails() {
    let problem = only_problem(load_inline(
        "inline",
        "[journal.circuit-breaker]\nmax-failures = 0\n",
    ));
    assert_eq!(problem.setting, "journal.circuit-breaker.max-failures");
    assert_eq!(problem.rule, "must be an integer >= 1");
}

#[test]
fn max_failures_above_u32_fails_with_the_upper_bound() {
    let problem = only_problem(load_inline(
        "inline",
        "[journal.circuit-breaker]\nmax-failures = 4294967296\n",
    ));
    assert_eq!(problem.setting, "journal.circuit-breaker.max-failures");
    assert_eq!(problem.value, "4294967296");
    assert_eq!(problem.rule, "must be an integer >= 1 and <= 4294967295");
}

#[test]
fn read_ahead_pages_outside_1_to_64_fails_with_the_bounds() {
    let problem = only_problem(load_env(&[(
        "ACTIX_PERSISTENCE__QUERY__READ_AHEAD_PAGES",
        "65",
    )]));
    assert_eq!(problem.setting, "query.read-ahead-pages");
    assert_eq!(problem.value, "\"65\"");
    assert_eq!(problem.rule, "must be an integer >= 1 and <= 64");
    let problem = only_problem(load_inline("inline", "[query]\nread-ahead-pages = 0\n"));
    assert_eq!(problem.setting, "query.read-ahead-pages");
    assert_eq!(problem.rule, "must be an integer >= 1");
}

#[test]
fn integer_too_large_for_any_type_fails_with_the_upper_bound() {
    let problem = only_problem(load_env(&[(
        "ACTIX_PERSISTENCE__JOURNAL__REPLAY_BATCH_SIZE",
        "999999999999999999999999999999999999999999999",
    )]));
    assert_eq!(problem.setting, "journal.replay-batch-size");
    assert_eq!(
        problem.rule,
        format!("must be an integer >= 1 and <= {}", usize::MAX)
    );
}

#[test]
fn max_connections_0_fails() {
    let problem = only_problem(load_inline(
        "inline",
        "[journal.sqlite]\nmax-connections = 0\n",
    ));
    assert_eq!(problem.setting, "journal.sqlite.max-connections");
    assert_eq!(problem.rule, "must be an integer >= 1");
}

#[test]
fn boolean_for_an_integer_setting_fails() {
    let problem = only_problem(load_inline(
        "inline",
        "[journal]\nreplay-batch-size = true\n",
    ));
    assert_eq!(problem.value, "true");
    assert_eq!(problem.rule, "must be an integer >= 1");
}

#[test]
fn humantime_durations_are_parsed() {
    let settings = load_inline(
        "inline",
        "[journal.circuit-breaker]\ncall-timeout = \"500ms\"\nreset-timeout = \"1m 30s\"\n\
         [journal.sqlite]\nbusy-timeout = \"2h\"\n",
    )
    .expect("valid");
    assert_eq!(
        settings.journal.circuit_breaker.call_timeout,
        Duration::from_millis(500)
    );
    assert_eq!(
        settings.journal.circuit_breaker.reset_timeout,
        Duration::from_secs(90)
    );
    assert_eq!(
        settings.journal.sqlite.busy_timeout,
        Duration::from_secs(7200)
    );
}

#[test]
fn zero_duration_fails() {
    let problem = only_problem(load_inline(
        "inline",
        "[journal.sqlite]\nbusy-timeout = \"0s\"\n",
    ));
    assert_eq!(
        problem,
        ConfigProblem {
            setting: "journal.sqlite.busy-timeout".to_owned(),
            value: "\"0s\"".to_owned(),
            rule: "must be a duration > 0".to_owned(),
            source: inline(),
        }
    );
}

#[test]
fn unparseable_duration_fails_with_the_parser_message() {
    let problem = only_problem(load_env(&[(
        "ACTIX_PERSISTENCE__JOURNAL__CIRCUIT_BREAKER__RESET_TIMEOUT",
        "10 parsecs",
    )]));
    assert_eq!(problem.setting, "journal.circuit-breaker.reset-timeout");
    assert_eq!(problem.value, "\"10 parsecs\"");
    assert!(
        problem.rule.starts_with(
            "must be a duration > 0, written as a string such as \"10s\" or \"500ms\" ("
        ),
        "{}",
        problem.rule
    );
}

#[test]
fn duration_written_as_a_bare_number_fails() {
    let problem = only_problem(load_inline(
        "inline",
        "[journal.circuit-breaker]\ncall-timeout = 10\n",
    ));
    assert_eq!(problem.setting, "journal.circuit-breaker.call-timeout");
    assert_eq!(problem.value, "10");
    assert_eq!(
        problem.rule,
        "must be a duration > 0, written as a string such as \"10s\" or \"500ms\""
    );
}

#[test]
fn plugin_outside_the_list_fails_listing_the_allowed_values() {
    let problem = only_problem(load_env(&[("ACTIX_PERSISTENCE__JOURNAL__PLUGIN", "mysql")]));
    assert_eq!(
        problem,
        ConfigProblem {
            setting: "journal.plugin".to_owned(),
            value: "\"mysql\"".to_owned(),
            rule: "must be one of \"sqlite\", \"postgres\", \"inmem\"".to_owned(),
            source: ConfigSource::Env("ACTIX_PERSISTENCE__JOURNAL__PLUGIN".to_owned()),
        }
    );
}

#[test]
fn plugin_name_is_not_trimmed() {
    let problem = only_problem(load_env(&[(
        "ACTIX_PERSISTENCE__JOURNAL__PLUGIN",
        " sqlite ",
    )]));
    assert_eq!(problem.setting, "journal.plugin");
    assert_eq!(problem.value, "\" sqlite \"");
}

#[test]
fn inmem_plugin_is_parsed() {
    let settings = load_env(&[("ACTIX_PERSISTENCE__JOURNAL__PLUGIN", "inmem")]).expect("valid");
    assert_eq!(settings.journal.plugin, JournalPlugin::InMemory);
}

#[test]
fn empty_url_fails() {
    let problem = only_problem(load_env(&[("ACTIX_PERSISTENCE__JOURNAL__SQLITE__URL", "")]));
    assert_eq!(
        problem,
        ConfigProblem {
            setting: "journal.sqlite.url".to_owned(),
            value: "\"\"".to_owned(),
            rule: "must be a non-empty string".to_owned(),
            source: ConfigSource::Env("ACTIX_PERSISTENCE__JOURNAL__SQLITE__URL".to_owned()),
        }
    );
}

#[test]
fn sqlite_url_that_names_no_file_fails() {
    // SQLite would give each connection a temporary database: acknowledged events lost.
    for url in ["sqlite:", "sqlite://", " sqlite:?mode=rwc"] {
        assert_sqlite_url_fails(
            url,
            "must name a database file, e.g. \"sqlite:actix-persistence.db\", or be \
             \"sqlite::memory:\"",
        );
    }
    for url in [
        "sqlite:x.db",
        "sqlite://x.db",
        "sqlite::memory:",
        "sqlite:/a/b.db?mode=rwc",
    ] {
        let settings =
            load_env(&[("ACTIX_PERSISTENCE__JOURNAL__SQLITE__URL", url)]).expect("a database file");
        assert_eq!(settings.journal.sqlite.url, url);
    }
}

#[test]
fn url_that_is_not_a_string_fails() {
    let problem = only_problem(load_inline("inline", "[journal.sqlite]\nurl = 5\n"));
    assert_eq!(problem.setting, "journal.sqlite.url");
    assert_eq!(problem.value, "5");
    assert_eq!(problem.rule, "must be a non-empty string");
}

#[test]
fn odd_inputs_never_panic_and_always_give_settings_or_problems() {
    let values = [
        "",
        " ",
        "\0",
        "\n",
        "-",
        "+",
        "+4",
        "0x10",
        "1e3",
        "NaN",
        "inf",
        "-0",
        "4_000",
        "18446744073709551616",
        "-170141183460469231731687303715884105729",
        "ü",
        "🦀",
        "\"",
        "'",
        "[",
        "{",
        "=",
        "10s 5",
        "1y",
        "9999999999999999999h",
    ];
    for key in actix_persistence_config::keys() {
        let var = actix_persistence_config::env_var(key).expect("known key");
        for value in values {
            let result = load_env(&[(var.as_str(), value)]);
            if let Err(err) = result {
                assert!(!err.problems.is_empty());
                for p in &err.problems {
                    assert_eq!(p.setting, key, "{var}={value:?}: {p}");
                    assert_eq!(p.source, ConfigSource::Env(var.clone()));
                }
            }
        }
    }
    let documents = [
        "journal = []",
        "[[journal]]\nplugin = \"inmem\"",
        "journal = { sqlite = 1 }",
        "[journal]\nsqlite = []",
        "[journal.sqlite.url]\nx = 1",
        "[journal]\nplugin = 1979-05-27T07:32:00Z",
        "[journal]\nplugin = [\"sqlite\"]",
        "[journal]\nwrite-reply-ordering-groups = [1, { a = 2 }]",
        "a.b.c.d.e = 1",
        "\u{feff}[journal]",
        "[journal]\nreplay-batch-size = inf",
        "[journal]\nreplay-batch-size = nan",
        "[journal]\nreplay-batch-size = 9223372036854775807",
    ];
    for doc in documents {
        let _ = load_inline("inline", doc);
    }
}

#[test]
fn sqlite_url_of_another_database_fails() {
    // SQLite took "postgres://..." for a file name: "unable to open database file" at startup.
    for (url, scheme) in [
        ("postgres://postgres@localhost/app", "postgres://"),
        (
            "postgresql:///app?host=/var/run/postgresql",
            "postgresql://",
        ),
        (" mysql://root@localhost/app", "mysql://"),
    ] {
        assert_sqlite_url_fails(
            url,
            &format!(
                "must be a SQLite URL such as \"sqlite:actix-persistence.db\" (it starts \
                 with {scheme:?}, another database's; a PostgreSQL URL goes in \
                 journal.postgres.url)"
            ),
        );
    }
    // Paths and SQLite's own forms are file names.
    for url in ["app.db", "data/app.db", "sqlite:///tmp/a.db"] {
        let settings = load_env(&[("ACTIX_PERSISTENCE__JOURNAL__SQLITE__URL", url)])
            .expect("a SQLite database");
        assert_eq!(settings.journal.sqlite.url, url);
    }
}

/// `journal.sqlite.url = url` from its environment variable fails startup with `rule` alone.
fn assert_sqlite_url_fails(url: &str, rule: &str) {
    let problem = only_problem(load_env(&[(
        "ACTIX_PERSISTENCE__JOURNAL__SQLITE__URL",
        url,
    )]));
    assert_eq!(
        problem,
        ConfigProblem {
            setting: "journal.sqlite.url".to_owned(),
            value: format!("{url:?}"),
            rule: rule.to_owned(),
            source: ConfigSource::Env("ACTIX_PERSISTENCE__JOURNAL__SQLITE__URL".to_owned()),
        }
    );
}
