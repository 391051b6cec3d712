//! User TOML files and inline TOML layers.

mod common;

use std::path::PathBuf;

use actix_persistence_config::{ConfigError, ConfigProblem, ConfigSource, Settings};
use common::{load_inline, no_env, only_problem, write_file, GROUPS};

fn load_file(path: &PathBuf) -> Result<Settings, ConfigError> {
    Settings::loader().file(path).env_vars(no_env()).load()
}

#[test]
fn quoted_number_in_a_file_is_the_same_as_a_bare_number() {
    let dir = tempfile::tempdir().expect("tempdir");
    let quoted = write_file(
        &dir,
        "q.toml",
        "[journal]\nwrite-reply-ordering-groups = \"4\"\n",
    );
    let bare = write_file(
        &dir,
        "b.toml",
        "[journal]\nwrite-reply-ordering-groups = 4\n",
    );
    let quoted = load_file(&quoted).expect("valid");
    assert_eq!(quoted.journal.write_reply_ordering_groups.get(), 4);
    assert_eq!(quoted, load_file(&bare).expect("valid"));
}

#[test]
fn whitespace_around_a_quoted_number_in_a_file_is_trimmed() {
    let settings = load_inline(
        "inline",
        "[journal]\nwrite-reply-ordering-groups = \" 4 \"\n",
    )
    .expect("valid");
    assert_eq!(settings.journal.write_reply_ordering_groups.get(), 4);
}

#[test]
fn file_value_overrides_the_reference() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        &dir,
        "app.toml",
        "[journal.sqlite]\nurl = \"sqlite:other.db\"\n",
    );
    let settings = load_file(&path).expect("valid");
    assert_eq!(settings.journal.sqlite.url, "sqlite:other.db");
    assert_eq!(
        settings.journal.sqlite.max_connections,
        Settings::reference().journal.sqlite.max_connections,
        "keys the file does not set keep their defaults"
    );
}

#[test]
fn value_problem_in_a_file_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        &dir,
        "app.toml",
        "[journal]\nwrite-reply-ordering-groups = 0\n",
    );
    let problem = only_problem(load_file(&path));
    assert_eq!(
        problem,
        ConfigProblem {
            setting: GROUPS.to_owned(),
            value: "0".to_owned(),
            rule: "must be an integer >= 1".to_owned(),
            source: ConfigSource::File(path.clone()),
        }
    );
    assert_eq!(
        problem.to_string(),
        format!(
            "journal.write-reply-ordering-groups = 0 (from file {}): must be an integer >= 1",
            path.display()
        )
    );
}

#[test]
fn float_in_a_file_fails_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        &dir,
        "app.toml",
        "[journal]\nwrite-reply-ordering-groups = 4.5\n",
    );
    let problem = only_problem(load_file(&path));
    assert_eq!(problem.setting, GROUPS);
    assert_eq!(problem.value, "4.5");
    assert_eq!(problem.rule, "must be an integer >= 1");
    assert_eq!(problem.source, ConfigSource::File(path));
}

#[test]
fn missing_user_file_fails_naming_the_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("missing.toml");
    let problem = only_problem(load_file(&path));
    assert_eq!(problem.setting, path.display().to_string());
    assert_eq!(problem.value, "");
    assert_eq!(problem.source, ConfigSource::File(path.clone()));
    assert!(
        problem.rule.starts_with("cannot be read: "),
        "{}",
        problem.rule
    );
    assert!(
        problem
            .to_string()
            .starts_with(&format!("file {}: cannot be read: ", path.display())),
        "{problem}"
    );
}

#[test]
fn invalid_toml_in_a_file_fails_naming_the_path_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(&dir, "app.toml", "[journal]\nplugin = \n");
    let problem = only_problem(load_file(&path));
    assert_eq!(problem.setting, path.display().to_string());
    assert_eq!(problem.source, ConfigSource::File(path));
    assert!(
        problem.rule.starts_with("is not valid TOML: "),
        "{}",
        problem.rule
    );
    assert!(
        problem.rule.contains("(line 2, column "),
        "{}",
        problem.rule
    );
    assert!(!problem.to_string().contains('\n'), "one line: {problem}");
}

#[test]
fn invalid_toml_in_an_inline_layer_fails_naming_the_layer() {
    let problem = only_problem(load_inline("overrides", "[journal"));
    assert_eq!(problem.setting, "overrides");
    assert_eq!(problem.source, ConfigSource::Inline("overrides".to_owned()));
    assert!(
        problem.rule.starts_with("is not valid TOML: "),
        "{}",
        problem.rule
    );
}

#[test]
fn unknown_key_in_a_file_fails_with_a_hint_of_the_closest_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        &dir,
        "app.toml",
        "[journal]\nwrite-reply-ordering-group = 8\n",
    );
    let problem = only_problem(load_file(&path));
    assert_eq!(
        problem,
        ConfigProblem {
            setting: "journal.write-reply-ordering-group".to_owned(),
            value: "8".to_owned(),
            rule: "is not a known setting; did you mean journal.write-reply-ordering-groups?"
                .to_owned(),
            source: ConfigSource::File(path),
        }
    );
}

#[test]
fn unknown_key_in_an_inline_layer_fails_naming_the_layer() {
    let problem = only_problem(load_inline("overrides", "[journal]\nplugn = \"inmem\"\n"));
    assert_eq!(problem.setting, "journal.plugn");
    assert_eq!(problem.value, "\"inmem\"");
    assert_eq!(
        problem.rule,
        "is not a known setting; did you mean journal.plugin?"
    );
    assert_eq!(problem.source, ConfigSource::Inline("overrides".to_owned()));
}

#[test]
fn key_in_the_wrong_section_hints_the_right_section() {
    let problem = only_problem(load_inline("inline", "[journal]\nbusy-timeout = \"1s\"\n"));
    assert_eq!(problem.setting, "journal.busy-timeout");
    assert_eq!(
        problem.rule,
        "is not a known setting; did you mean journal.sqlite.busy-timeout?"
    );
}

#[test]
fn misspelt_section_is_hinted() {
    let problem = only_problem(load_inline("inline", "[jornal]\nplugin = \"inmem\"\n"));
    assert_eq!(problem.setting, "jornal");
    assert_eq!(
        problem.rule,
        "is not a known setting; did you mean journal?"
    );
}

#[test]
fn unknown_key_without_a_close_match_lists_the_known_keys_of_its_section() {
    let problem = only_problem(load_inline("inline", "[journal.sqlite]\nzzzzzzzzzz = 1\n"));
    assert_eq!(problem.setting, "journal.sqlite.zzzzzzzzzz");
    assert_eq!(
        problem.rule,
        "is not a known setting; the known keys of [journal.sqlite] are: url, max-connections, \
         busy-timeout"
    );
}

#[test]
fn section_of_the_wrong_type_is_a_problem_not_a_panic() {
    let problem = only_problem(load_inline("inline", "journal = 3\n"));
    assert_eq!(
        problem,
        ConfigProblem {
            setting: "journal".to_owned(),
            value: "3".to_owned(),
            rule: "must be a table of settings ([journal]), not an integer".to_owned(),
            source: ConfigSource::Inline("inline".to_owned()),
        }
    );
}

#[test]
fn nested_section_of_the_wrong_type_is_a_problem() {
    let problem = only_problem(load_inline(
        "inline",
        "[journal]\nsqlite = \"sqlite:x.db\"\n",
    ));
    assert_eq!(problem.setting, "journal.sqlite");
    assert_eq!(problem.value, "\"sqlite:x.db\"");
    assert_eq!(
        problem.rule,
        "must be a table of settings ([journal.sqlite]), not a string"
    );
}

#[test]
fn setting_given_a_table_is_a_problem() {
    let problem = only_problem(load_inline(
        "inline",
        "[journal.write-reply-ordering-groups]\nn = 1\n",
    ));
    assert_eq!(problem.setting, GROUPS);
    assert_eq!(problem.rule, "must be an integer >= 1");
}

#[test]
fn inline_layer_overrides_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(&dir, "app.toml", "[journal]\nreplay-batch-size = 10\n");
    let settings = Settings::loader()
        .toml_str("inline", "[journal]\nreplay-batch-size = 20\n")
        .file(path)
        .env_vars(no_env())
        .load()
        .expect("valid");
    assert_eq!(settings.journal.replay_batch_size.get(), 20);
}

#[test]
fn later_file_overrides_earlier_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = write_file(&dir, "a.toml", "[journal]\nreplay-batch-size = 10\n");
    let second = write_file(&dir, "b.toml", "[journal]\nreplay-batch-size = 20\n");
    let settings = Settings::loader()
        .file(first)
        .file(second)
        .env_vars(no_env())
        .load()
        .expect("valid");
    assert_eq!(settings.journal.replay_batch_size.get(), 20);
}

#[test]
fn value_source_is_the_layer_that_set_it_last() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = write_file(&dir, "a.toml", "[journal]\nreplay-batch-size = 0\n");
    let second = write_file(&dir, "b.toml", "[journal]\nreplay-batch-size = -5\n");
    let problem = only_problem(
        Settings::loader()
            .file(&first)
            .file(&second)
            .env_vars(no_env())
            .load(),
    );
    assert_eq!(problem.setting, "journal.replay-batch-size");
    assert_eq!(problem.value, "-5");
    assert_eq!(problem.source, ConfigSource::File(second));
}
