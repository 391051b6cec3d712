//! Environment variables: `ACTIX_PERSISTENCE__<SECTION>__<KEY>` and `ACTIX_PERSISTENCE_CONFIG`.
//! Every test passes its variables to the loader; none touches the process environment.

mod common;

use std::time::Duration;

use actix_persistence_config::{ConfigProblem, ConfigSource, Settings};
use common::{load_env, no_env, only_problem, write_file, GROUPS, GROUPS_VAR};

/// Loads `GROUPS_VAR=value` and asserts that its one problem is `rule`, naming the setting, the
/// value as `rendered` and the variable; returns that problem.
fn assert_groups_env_problem(value: &str, rendered: &str, rule: &str) -> ConfigProblem {
    let problem = only_problem(load_env(&[(GROUPS_VAR, value)]));
    assert_eq!(
        problem,
        ConfigProblem {
            setting: GROUPS.to_owned(),
            value: rendered.to_owned(),
            rule: rule.to_owned(),
            source: ConfigSource::Env(GROUPS_VAR.to_owned()),
        }
    );
    problem
}

#[test]
fn env_value_4_gives_4_exactly_as_integer_4_in_a_file() {
    let from_env = load_env(&[(GROUPS_VAR, "4")]).expect("valid");
    assert_eq!(from_env.journal.write_reply_ordering_groups.get(), 4);

    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        &dir,
        "app.toml",
        "[journal]\nwrite-reply-ordering-groups = 4\n",
    );
    let from_file = Settings::loader()
        .file(path)
        .env_vars(no_env())
        .load()
        .expect("valid");
    assert_eq!(from_env, from_file);
}

#[test]
fn env_value_0_fails_naming_setting_value_rule_and_variable() {
    let problem = assert_groups_env_problem("0", "\"0\"", "must be an integer >= 1");
    assert_eq!(
        problem.to_string(),
        "journal.write-reply-ordering-groups = \"0\" (from env \
         ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS): must be an integer >= 1"
    );
}

#[test]
fn env_value_minus_1_fails_naming_setting_value_rule_and_variable() {
    assert_groups_env_problem("-1", "\"-1\"", "must be an integer >= 1");
}

#[test]
fn env_value_10001_fails_above_the_default_limit_naming_both_settings() {
    assert_groups_env_problem(
        "10001",
        "\"10001\"",
        "must be <= journal.max-write-reply-ordering-groups (10000 from reference.toml); \
         raise the limit to use more groups",
    );
}

#[test]
fn env_value_four_fails_naming_setting_value_rule_and_variable() {
    assert_groups_env_problem("four", "\"four\"", "must be an integer >= 1");
}

#[test]
fn env_value_4_5_fails_naming_setting_value_rule_and_variable() {
    assert_groups_env_problem("4.5", "\"4.5\"", "must be an integer >= 1");
}

#[test]
fn env_value_empty_fails_naming_setting_value_rule_and_variable() {
    let problem = assert_groups_env_problem("", "\"\"", "must be an integer >= 1");
    assert_eq!(
        problem.to_string(),
        "journal.write-reply-ordering-groups = \"\" (from env \
         ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS): must be an integer >= 1"
    );
}

#[test]
fn whitespace_around_an_env_number_is_trimmed() {
    for value in [" 4 ", "4 ", " 4", "\t4\n"] {
        let settings = load_env(&[(GROUPS_VAR, value)]).expect("whitespace is trimmed");
        assert_eq!(
            settings.journal.write_reply_ordering_groups.get(),
            4,
            "{value:?}"
        );
    }
}

#[test]
fn whitespace_inside_an_env_number_is_rejected() {
    assert_groups_env_problem("4 0", "\"4 0\"", "must be an integer >= 1");
}

#[test]
fn whitespace_around_an_env_duration_is_trimmed() {
    let settings = load_env(&[(
        "ACTIX_PERSISTENCE__JOURNAL__CIRCUIT_BREAKER__CALL_TIMEOUT",
        " 5s ",
    )])
    .expect("valid");
    assert_eq!(
        settings.journal.circuit_breaker.call_timeout,
        Duration::from_secs(5)
    );
}

#[test]
fn env_var_overrides_the_user_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        &dir,
        "app.toml",
        "[journal]\nwrite-reply-ordering-groups = 3\n",
    );
    let settings = Settings::loader()
        .file(path)
        .env_vars([(GROUPS_VAR, "8")])
        .load()
        .expect("valid");
    assert_eq!(settings.journal.write_reply_ordering_groups.get(), 8);
}

#[test]
fn env_var_overrides_an_inline_layer() {
    let settings = Settings::loader()
        .toml_str("inline", "[journal]\nwrite-reply-ordering-groups = 3\n")
        .env_vars([(GROUPS_VAR, "8")])
        .load()
        .expect("valid");
    assert_eq!(settings.journal.write_reply_ordering_groups.get(), 8);
}

#[test]
fn env_var_names_are_matched_case_insensitively() {
    let settings = load_env(&[(
        "actix_persistence__Journal__write_reply_ordering_groups",
        "6",
    )])
    .expect("valid");
    assert_eq!(settings.journal.write_reply_ordering_groups.get(), 6);
}

#[test]
fn env_var_problem_names_the_variable_as_spelt() {
    let name = "actix_persistence__journal__write_reply_ordering_groups";
    let problem = only_problem(load_env(&[(name, "0")]));
    assert_eq!(problem.setting, GROUPS);
    assert_eq!(problem.source, ConfigSource::Env(name.to_owned()));
}

#[test]
fn double_underscore_env_var_sets_circuit_breaker_call_timeout() {
    let settings = load_env(&[(
        "ACTIX_PERSISTENCE__JOURNAL__CIRCUIT_BREAKER__CALL_TIMEOUT",
        "5s",
    )])
    .expect("valid");
    assert_eq!(
        settings.journal.circuit_breaker.call_timeout,
        Duration::from_secs(5)
    );
    assert_eq!(
        settings.journal.circuit_breaker.reset_timeout,
        Duration::from_secs(30),
        "the sibling keeps its default"
    );
}

#[test]
fn env_var_sets_sqlite_url() {
    let settings =
        load_env(&[("ACTIX_PERSISTENCE__JOURNAL__SQLITE__URL", "sqlite::memory:")]).expect("valid");
    assert_eq!(settings.journal.sqlite.url, "sqlite::memory:");
}

#[test]
fn unknown_env_var_under_the_prefix_fails_with_a_hint_of_the_closest_key() {
    let name = "ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUP";
    let problem = only_problem(load_env(&[(name, "8")]));
    assert_eq!(
        problem,
        ConfigProblem {
            setting: "journal.write-reply-ordering-group".to_owned(),
            value: "\"8\"".to_owned(),
            rule: format!("is not a known setting; did you mean {GROUPS} ({GROUPS_VAR})?"),
            source: ConfigSource::Env(name.to_owned()),
        }
    );
}

#[test]
fn env_var_with_single_underscore_between_segments_is_unknown_with_a_hint() {
    let name = "ACTIX_PERSISTENCE__JOURNAL_SQLITE__URL";
    let problem = only_problem(load_env(&[(name, "sqlite:x.db")]));
    assert_eq!(problem.setting, "journal-sqlite.url");
    assert_eq!(problem.source, ConfigSource::Env(name.to_owned()));
    assert_eq!(
        problem.rule,
        "is not a known setting; did you mean journal.sqlite.url \
         (ACTIX_PERSISTENCE__JOURNAL__SQLITE__URL)?"
    );
}

#[test]
fn env_var_naming_a_section_fails() {
    let name = "ACTIX_PERSISTENCE__JOURNAL__SQLITE";
    let problem = only_problem(load_env(&[(name, "x")]));
    assert_eq!(problem.setting, "journal.sqlite");
    assert_eq!(problem.source, ConfigSource::Env(name.to_owned()));
    assert!(
        problem
            .rule
            .starts_with("names the section [journal.sqlite], not a setting"),
        "{}",
        problem.rule
    );
}

#[test]
fn env_vars_without_the_prefix_are_ignored() {
    let settings = load_env(&[("PATH", "/usr/bin"), ("ACTIX_PERSISTENC", "1")])
        .expect("unrelated variables are not settings");
    assert_eq!(settings, Settings::reference());
}

#[test]
fn two_spellings_of_one_setting_fail_naming_both_variables() {
    let first = "ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS";
    let second = "actix_persistence__journal__write_reply_ordering_groups";
    let problem = only_problem(load_env(&[(first, "2"), (second, "3")]));
    assert_eq!(problem.setting, GROUPS);
    assert_eq!(problem.value, "\"3\"");
    assert_eq!(problem.source, ConfigSource::Env(second.to_owned()));
    assert_eq!(
        problem.rule,
        format!("is also set by env {first}; set it with one variable only")
    );
}

#[test]
fn a_variable_given_twice_keeps_its_last_value() {
    let settings = Settings::loader()
        .env_vars([(GROUPS_VAR, "0")])
        .env_vars([(GROUPS_VAR, "5")])
        .load()
        .expect("the last value wins");
    assert_eq!(settings.journal.write_reply_ordering_groups.get(), 5);
}

#[test]
fn config_file_variable_selects_the_user_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(&dir, "app.toml", "[journal]\nplugin = \"inmem\"\n");
    let path_str = path.to_str().expect("utf-8 temp path");
    let settings = load_env(&[("ACTIX_PERSISTENCE_CONFIG", path_str)]).expect("valid");
    assert_eq!(
        settings.journal.plugin,
        actix_persistence_config::JournalPlugin::InMemory
    );
}

#[test]
fn problems_in_the_file_selected_by_the_config_variable_name_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        &dir,
        "app.toml",
        "[journal]\nwrite-reply-ordering-groups = 0\n",
    );
    let path_str = path.to_str().expect("utf-8 temp path");
    let problem = only_problem(load_env(&[("ACTIX_PERSISTENCE_CONFIG", path_str)]));
    assert_eq!(problem.setting, GROUPS);
    assert_eq!(problem.value, "0");
    assert_eq!(problem.source, ConfigSource::File(path));
}

#[test]
fn config_file_variable_naming_a_missing_file_fails_naming_the_variable_and_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("missing.toml");
    let path_str = path.to_str().expect("utf-8 temp path");
    let problem = only_problem(load_env(&[("ACTIX_PERSISTENCE_CONFIG", path_str)]));
    assert_eq!(problem.setting, "ACTIX_PERSISTENCE_CONFIG");
    assert_eq!(problem.value, format!("{:?}", path_str));
    assert_eq!(
        problem.source,
        ConfigSource::Env("ACTIX_PERSISTENCE_CONFIG".to_owned())
    );
    assert!(
        problem
            .rule
            .starts_with("must name a readable TOML file: cannot read it: "),
        "{}",
        problem.rule
    );
}

#[test]
fn config_file_variable_set_empty_fails() {
    let problem = only_problem(load_env(&[("ACTIX_PERSISTENCE_CONFIG", "")]));
    assert_eq!(problem.setting, "ACTIX_PERSISTENCE_CONFIG");
    assert_eq!(problem.value, "\"\"");
    assert_eq!(
        problem.rule,
        "must name a TOML file (unset it to use no file)"
    );
}

#[test]
fn file_of_config_variable_is_layered_above_the_file_given_in_code() {
    let dir = tempfile::tempdir().expect("tempdir");
    let code_file = write_file(
        &dir,
        "code.toml",
        "[journal]\nwrite-reply-ordering-groups = 2\nreplay-batch-size = 7\n",
    );
    let env_file = write_file(
        &dir,
        "env.toml",
        "[journal]\nwrite-reply-ordering-groups = 3\n",
    );
    let settings = Settings::loader()
        .file(code_file)
        .env_vars([(
            "ACTIX_PERSISTENCE_CONFIG",
            env_file.to_str().expect("utf-8"),
        )])
        .load()
        .expect("valid");
    assert_eq!(settings.journal.write_reply_ordering_groups.get(), 3);
    assert_eq!(settings.journal.replay_batch_size.get(), 7);
}

#[test]
fn bare_prefix_variable_fails_naming_the_variable() {
    let problem = only_problem(load_env(&[("ACTIX_PERSISTENCE__", "1")]));
    assert_eq!(problem.setting, "ACTIX_PERSISTENCE__");
    assert_eq!(problem.value, "\"1\"");
    assert_eq!(
        problem.rule,
        "is not a known setting; the known top-level keys are: journal, snapshot-store, query"
    );
}

#[test]
fn variable_with_single_underscores_is_reported_with_the_correct_name() {
    let problem = only_problem(load_env(&[(
        "ACTIX_PERSISTENCE_JOURNAL_WRITE_REPLY_ORDERING_GROUPS",
        "0",
    )]));
    assert_eq!(
        problem,
        ConfigProblem {
            setting: "ACTIX_PERSISTENCE_JOURNAL_WRITE_REPLY_ORDERING_GROUPS".to_owned(),
            value: "\"0\"".to_owned(),
            rule: format!("sets nothing; did you mean {GROUPS_VAR}?"),
            source: ConfigSource::Env(
                "ACTIX_PERSISTENCE_JOURNAL_WRITE_REPLY_ORDERING_GROUPS".to_owned()
            ),
        }
    );
}

#[test]
fn misspelt_variable_outside_the_scheme_is_reported_with_the_closest_name() {
    let problem = only_problem(load_env(&[("ACTIX_PERSISTENCE_JORNAL_PLUGIN", "inmem")]));
    assert_eq!(
        problem.rule,
        "sets nothing; did you mean ACTIX_PERSISTENCE__JOURNAL__PLUGIN?"
    );
    let problem = only_problem(load_env(&[(
        "ACTIX_PERSISTENCE_CONFIG_FILE",
        "/etc/app.toml",
    )]));
    assert_eq!(
        problem.rule,
        "sets nothing; did you mean ACTIX_PERSISTENCE_CONFIG?"
    );
}

#[test]
fn unrelated_variable_of_the_prefix_is_reported_without_a_guess() {
    let problem = only_problem(load_env(&[("ACTIX_PERSISTENCE_LOG", "debug")]));
    assert_eq!(problem.setting, "ACTIX_PERSISTENCE_LOG");
    assert!(
        problem
            .rule
            .starts_with("sets nothing: settings are ACTIX_PERSISTENCE__<SECTION>__<KEY>"),
        "{}",
        problem.rule
    );
}

#[test]
fn one_underscore_between_section_and_key_is_reported_with_the_correct_variable() {
    let name = "ACTIX_PERSISTENCE__JOURNAL_PLUGIN";
    let problem = only_problem(load_env(&[(name, "postgres")]));
    assert_eq!(problem.source, ConfigSource::Env(name.to_owned()));
    assert_eq!(
        problem.rule,
        "is not a known setting; did you mean journal.plugin \
         (ACTIX_PERSISTENCE__JOURNAL__PLUGIN)?"
    );
    let name = "ACTIX_PERSISTENCE__SNAPSHOT_STORE_PLUGIN";
    let problem = only_problem(load_env(&[(name, "postgres")]));
    assert_eq!(
        problem.rule,
        "is not a known setting; did you mean snapshot-store.plugin \
         (ACTIX_PERSISTENCE__SNAPSHOT_STORE__PLUGIN)?"
    );
}

#[test]
fn misspelt_prefix_is_reported_with_the_correct_variable() {
    for name in [
        "ACTIX_PERSISTANCE__JOURNAL__PLUGIN",
        "ACTIX_PERSISTNCE__JOURNAL__PLUGIN",
        "ACTIXPERSISTENCE__JOURNAL__PLUGIN",
        "ACTIX_PERSISTENCES__JOURNAL__PLUGIN",
        "actix_persistance_journal_plugin",
    ] {
        let problem = only_problem(load_env(&[(name, "postgres")]));
        assert_eq!(problem.setting, name);
        assert_eq!(problem.source, ConfigSource::Env(name.to_owned()));
        assert_eq!(
            problem.rule, "sets nothing; did you mean ACTIX_PERSISTENCE__JOURNAL__PLUGIN?",
            "{name}"
        );
    }
    let problem = only_problem(load_env(&[("ACTIX_PERSISTANCE_CONFIG", "/etc/app.toml")]));
    assert_eq!(
        problem.rule,
        "sets nothing; did you mean ACTIX_PERSISTENCE_CONFIG?"
    );
}

#[test]
fn variables_of_other_prefixes_are_not_taken_for_misspelt_ones() {
    let settings = load_env(&[
        ("ACTIX_WEB_WORKERS", "4"),
        ("ACTIONS_PERSISTENCE_DIR", "/tmp"),
        ("ACTIX_PERSIST", "1"),
        ("APP_PERSISTENCE__JOURNAL__PLUGIN", "postgres"),
    ])
    .expect("none of these is one of ours");
    assert_eq!(settings, Settings::reference());
}

/// An invalid value given through an environment variable is one problem naming the setting,
/// the value as given and the variable, whatever the setting's type (integer, bounded integer,
/// duration, plugin name, URL) and however the value is wrong (zero, negative, not a number,
/// overflowing, out of bounds, an unknown unit, padded where no padding is trimmed).
#[test]
fn an_invalid_env_value_of_any_setting_names_the_setting_the_value_and_the_variable() {
    let cases = [
        (
            "ACTIX_PERSISTENCE__QUERY__PAGE_SIZE",
            "0",
            "query.page-size",
        ),
        (
            "ACTIX_PERSISTENCE__QUERY__PAGE_SIZE",
            "-1",
            "query.page-size",
        ),
        (
            "ACTIX_PERSISTENCE__QUERY__PAGE_SIZE",
            "4x",
            "query.page-size",
        ),
        (
            "ACTIX_PERSISTENCE__QUERY__PAGE_SIZE",
            "99999999999999999999999",
            "query.page-size",
        ),
        (
            "ACTIX_PERSISTENCE__QUERY__READ_AHEAD_PAGES",
            "65",
            "query.read-ahead-pages",
        ),
        (
            "ACTIX_PERSISTENCE__QUERY__REFRESH_INTERVAL",
            "0s",
            "query.refresh-interval",
        ),
        (
            "ACTIX_PERSISTENCE__QUERY__LATE_COMMIT_WINDOW",
            "10 parsecs",
            "query.late-commit-window",
        ),
        (
            "ACTIX_PERSISTENCE__JOURNAL__PLUGIN",
            " sqlite ",
            "journal.plugin",
        ),
        (
            "ACTIX_PERSISTENCE__JOURNAL__MAX_BATCH_SIZE",
            "0",
            "journal.max-batch-size",
        ),
        (
            "ACTIX_PERSISTENCE__JOURNAL__RECOVERY_TIMEOUT",
            "-5s",
            "journal.recovery-timeout",
        ),
    ];
    for (var, value, setting) in cases {
        let problem = only_problem(load_env(&[(var, value)]));
        assert_eq!(
            (
                problem.setting.as_str(),
                problem.value.as_str(),
                &problem.source
            ),
            (
                setting,
                format!("{value:?}").as_str(),
                &ConfigSource::Env(var.to_owned())
            ),
            "{var}={value:?}: {}",
            problem.rule
        );
    }
}
