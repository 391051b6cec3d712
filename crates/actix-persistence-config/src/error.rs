//! What can be wrong with a configuration, and where the wrong value came from.

use std::fmt;
use std::path::PathBuf;

/// Startup failed because the configuration is invalid; lists **every** problem found.
///
/// Validation does not stop at the first problem: fix all of them in one go.
/// `Display` writes one problem per line, in a stable order (layer problems and unknown keys in
/// layer order, then invalid values in the order of `reference.toml`).
///
/// # Examples
///
/// ```
/// use actix_persistence_config::Settings;
///
/// let err = Settings::loader()
///     .toml_str("overrides", "[journal]\nreplay-batch-size = 0\nplugin = \"mysql\"")
///     .env_vars(Vec::<(String, String)>::new())
///     .load()
///     .unwrap_err();
/// assert_eq!(err.problems.len(), 2);
/// assert_eq!(err.to_string().lines().count(), 2);
/// ```
///
/// `Debug` writes the problems under a heading, one per line (so a `main` that returns the
/// error with `?` prints them readably); `{:#?}` writes the structure.
#[derive(thiserror::Error)]
#[error("{}", Lines(.problems))]
pub struct ConfigError {
    /// Every problem found, at least one.
    pub problems: Vec<ConfigProblem>,
}

impl fmt::Debug for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return f
                .debug_struct("ConfigError")
                .field("problems", &self.problems)
                .finish();
        }
        f.write_str("invalid actix-persistence configuration:")?;
        for problem in &self.problems {
            write!(f, "\n  {problem}")?;
        }
        Ok(())
    }
}

struct Lines<'a>(&'a [ConfigProblem]);

impl fmt::Display for Lines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

/// One thing wrong with the configuration: which setting, which value, which rule it breaks and
/// where the value came from.
///
/// `Display` reads like
/// `journal.write-reply-ordering-groups = "0" (from env ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS): must be an integer >= 1`.
/// A problem with a whole layer (a file that cannot be read, invalid TOML) has an empty
/// `value` and reads like `file /etc/app.toml: cannot be read: No such file or directory (os error 2)`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigProblem {
    /// The dotted, kebab-case setting (`journal.write-reply-ordering-groups`), also for unknown
    /// keys (`journal.write-reply-ordering-group`, derived from the env var name for env
    /// variables). For a problem with a whole layer: the file path, the inline layer's name or
    /// the env var (`ACTIX_PERSISTENCE_CONFIG`).
    pub setting: String,
    /// The offending value written as TOML: strings quoted (`"0"`, and every env value is a
    /// string), numbers bare (`12`). Empty for a problem with a whole layer.
    pub value: String,
    /// The rule the value breaks: `must be an integer >= 1`.
    pub rule: String,
    /// Where the value came from.
    pub source: ConfigSource,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}: {}", self.source, self.rule)
        } else {
            write!(
                f,
                "{} = {} (from {}): {}",
                self.setting, self.value, self.source, self.rule
            )
        }
    }
}

/// Where a value came from: which configuration layer.
///
/// `Display`: `reference.toml`, `file /etc/app.toml`, the inline layer's name as given, or
/// `env ACTIX_PERSISTENCE__JOURNAL__PLUGIN`.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigSource {
    /// The embedded `reference.toml` (the defaults).
    Reference,
    /// A user TOML file, by its path as given.
    File(PathBuf),
    /// An inline TOML layer, by the name given to [`SettingsLoader::toml_str`](crate::SettingsLoader::toml_str).
    Inline(String),
    /// An environment variable, by its name.
    Env(String),
}

impl fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigSource::Reference => f.write_str("reference.toml"),
            ConfigSource::File(path) => write!(f, "file {}", path.display()),
            ConfigSource::Inline(name) => f.write_str(name),
            ConfigSource::Env(name) => write!(f, "env {name}"),
        }
    }
}
