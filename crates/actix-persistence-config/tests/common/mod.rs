//! Helpers shared by the configuration tests. Every loader here is given its variables
//! explicitly; none reads the process environment.

// Each test file is a crate of its own and uses only some of these.
#![allow(dead_code)]

use std::path::PathBuf;

use actix_persistence_config::{ConfigError, ConfigProblem, Settings};

pub const GROUPS: &str = "journal.write-reply-ordering-groups";
pub const GROUPS_VAR: &str = "ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS";

/// Writes `text` to the file `name` in `dir` and returns its path.
pub fn write_file(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write test file");
    path
}

/// No environment variables at all.
pub fn no_env() -> Vec<(String, String)> {
    Vec::new()
}

/// The reference with `vars` as the only environment variables.
pub fn load_env(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    Settings::loader().env_vars(vars.iter().copied()).load()
}

/// The reference with the inline layer `toml` called `name`, and no environment variables.
pub fn load_inline(name: &str, toml: &str) -> Result<Settings, ConfigError> {
    Settings::loader()
        .toml_str(name, toml)
        .env_vars(no_env())
        .load()
}

/// The one problem of a rejected configuration; fails if it was accepted or has several.
pub fn only_problem(result: Result<Settings, ConfigError>) -> ConfigProblem {
    let err = result.expect_err("the configuration must be rejected");
    assert_eq!(
        err.problems.len(),
        1,
        "expected exactly one problem, got:\n{err}"
    );
    err.problems[0].clone()
}
