//! Layering (reference, files, inline TOML, environment) and validation of the merged result.
//!
//! Each layer is checked on its own for shape (unknown keys, a section that is not a table) and
//! reduced to the known settings it sets; figment then merges the layers and remembers, for each
//! value, the layer it came from. The environment layer is built here rather than with
//! `figment::providers::Env`: that provider reads only the process environment and forgets the
//! exact variable name, and both matter (tests inject variables; problems name the variable).

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

use figment::value::{Dict, Map, Num, Value};
use figment::{Figment, Metadata, Profile, Provider};

use crate::error::{ConfigError, ConfigProblem, ConfigSource};
use crate::keys::{
    self, Kind, CONFIG_FILE_ENV, DATABASE_URL_ENV, GROUPS, MAX_GROUPS, POSTGRES_URL,
};
use crate::{
    CircuitBreakerSettings, JournalPlugin, JournalSettings, PostgresSettings, QuerySettings,
    Settings, SnapshotStorePlugin, SnapshotStoreSettings, SqliteSettings, REFERENCE_TOML,
    SAME_AS_JOURNAL,
};

/// Builds [`Settings`] from layers, later wins: `reference.toml`, user TOML files, inline TOML,
/// environment variables. Created by [`Settings::loader`].
///
/// Layer order, whatever the order of the builder calls:
/// 1. the embedded `reference.toml`;
/// 2. the files given to [`file`](Self::file), in call order;
/// 3. the file named by `ACTIX_PERSISTENCE_CONFIG`, if that variable is set in the environment
///    the loader uses;
/// 4. the inline layers given to [`toml_str`](Self::toml_str), in call order;
/// 5. the `ACTIX_PERSISTENCE__<SECTION>__<KEY>` environment variables.
///
/// `DATABASE_URL` of the same environment stands in for an empty `journal.postgres.url`.
///
/// By default the environment is the process environment; [`env_vars`](Self::env_vars)
/// replaces it with exactly the given variables (so tests never touch the process env).
///
/// # Examples
///
/// ```
/// # mod actix_persistence { // the facade's paths
/// #     pub mod config { pub use actix_persistence_config::*; }
/// #     pub use actix_persistence_config::Settings;
/// # }
/// use actix_persistence::config::JournalPlugin;
/// use actix_persistence::Settings;
///
/// let settings = Settings::loader()
///     .toml_str("defaults of my app", "[journal]\nwrite-reply-ordering-groups = 4")
///     .env_vars([("ACTIX_PERSISTENCE__JOURNAL__PLUGIN", "inmem")])
///     .load()?;
/// assert_eq!(settings.journal.write_reply_ordering_groups.get(), 4);
/// assert_eq!(settings.journal.plugin, JournalPlugin::InMemory);
/// # Ok::<(), actix_persistence_config::ConfigError>(())
/// ```
#[derive(Debug, Clone, Default)]
#[must_use = "a loader reads nothing until `.load()` is called"]
pub struct SettingsLoader {
    files: Vec<PathBuf>,
    inline: Vec<(String, String)>,
    env: Option<Vec<(String, String)>>,
}

impl SettingsLoader {
    /// Adds a user TOML file layer, above `reference.toml` and below inline layers and the
    /// environment. May be called more than once; later files win.
    ///
    /// The file must exist: a missing or unreadable file, or one that is not valid TOML, is a
    /// [`ConfigProblem`] naming the path (reported by [`load`](Self::load)).
    pub fn file(mut self, path: impl Into<PathBuf>) -> Self {
        self.files.push(path.into());
        self
    }

    /// Adds an inline TOML layer, above the files and below the environment. Problems in it
    /// name `name` as their source ([`ConfigSource::Inline`]). May be called more than once;
    /// later layers win.
    pub fn toml_str(mut self, name: &str, toml: &str) -> Self {
        self.inline.push((name.to_owned(), toml.to_owned()));
        self
    }

    /// Uses exactly these environment variables instead of the process environment, including
    /// `ACTIX_PERSISTENCE_CONFIG` (which then selects the user file) and `DATABASE_URL` (the
    /// PostgreSQL URL when `journal.postgres.url` is empty). May be called more than once: the
    /// variables add up; a name given twice keeps its last value.
    ///
    /// # Examples
    ///
    /// ```
    /// use actix_persistence_config::Settings;
    ///
    /// let settings = Settings::loader()
    ///     .env_vars([("ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS", " 8 ")])
    ///     .load()?;
    /// assert_eq!(settings.journal.write_reply_ordering_groups.get(), 8);
    /// # Ok::<(), actix_persistence_config::ConfigError>(())
    /// ```
    pub fn env_vars<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let env = self.env.get_or_insert_with(Vec::new);
        for (k, v) in vars {
            let (k, v) = (k.into(), v.into());
            match env.iter_mut().find(|(name, _)| *name == k) {
                Some(slot) => slot.1 = v,
                None => env.push((k, v)),
            }
        }
        self
    }

    /// Reads every layer, merges them and validates the result.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every problem found: unreadable or invalid files, unknown keys
    /// (with a hint of the closest known key), values that break their setting's rule (checked
    /// on the merged configuration, so `write-reply-ordering-groups` is compared with
    /// `max-write-reply-ordering-groups` whichever layers set them).
    pub fn load(self) -> Result<Settings, ConfigError> {
        let mut problems = Vec::new();
        let env = self.environment(&mut problems);

        let mut layers = vec![toml_layer(
            ConfigSource::Reference,
            REFERENCE_TOML,
            &mut problems,
        )];
        for path in &self.files {
            layers.push(file_layer(path.clone(), None, &mut problems));
        }
        if let Some((name, value)) = env.iter().find(|(name, _)| name == CONFIG_FILE_ENV) {
            if value.is_empty() {
                problems.push(ConfigProblem {
                    setting: CONFIG_FILE_ENV.to_owned(),
                    value: render_str(value),
                    rule: "must name a TOML file (unset it to use no file)".to_owned(),
                    source: ConfigSource::Env(name.clone()),
                });
            } else {
                let path = PathBuf::from(value);
                layers.push(file_layer(path, Some(value), &mut problems));
            }
        }
        for (name, text) in &self.inline {
            layers.push(toml_layer(
                ConfigSource::Inline(name.clone()),
                text,
                &mut problems,
            ));
        }
        problems.extend(stray_env_vars(&env));
        layers.extend(env_layers(&env, &mut problems));

        let mut figment = Figment::new();
        let mut sources = HashMap::new();
        for (i, layer) in layers.into_iter().flatten().enumerate() {
            // Metadata names are unique per layer, so a value's tag leads back to its source.
            let id = format!("{} (layer {i})", layer.source);
            sources.insert(id.clone(), layer.source.clone());
            figment = figment.merge(LayerProvider {
                id,
                dict: layer.dict,
            });
        }
        let database_url = env
            .iter()
            .find(|(name, _)| name == DATABASE_URL_ENV)
            .map(|(_, value)| value.clone())
            .filter(|value| !value.trim().is_empty());
        let merged = Merged {
            figment,
            sources,
            database_url,
        };
        let settings = merged.validate(&mut problems);
        match settings {
            Some(settings) if problems.is_empty() => Ok(settings),
            _ => Err(ConfigError { problems }),
        }
    }

    /// The environment to use, sorted by name when it is the process environment.
    fn environment(&self, problems: &mut Vec<ConfigProblem>) -> Vec<(String, String)> {
        if let Some(env) = &self.env {
            return env.clone();
        }
        let mut env = Vec::new();
        for (name, value) in std::env::vars_os() {
            let Some(name) = name.to_str() else { continue };
            // Every variable of our prefix (or a misspelling of it), so one that sets nothing
            // is reported.
            let relevant = name == DATABASE_URL_ENV || keys::looks_like_ours(name);
            if !relevant {
                continue;
            }
            match value.into_string() {
                Ok(value) => env.push((name.to_owned(), value)),
                Err(raw) => problems.push(ConfigProblem {
                    setting: name.to_owned(),
                    value: render_str(&raw.to_string_lossy()),
                    rule: "must be valid UTF-8".to_owned(),
                    source: ConfigSource::Env(name.to_owned()),
                }),
            }
        }
        env.sort();
        env
    }
}

/// One layer reduced to the known settings it sets.
struct Layer {
    source: ConfigSource,
    dict: Dict,
}

/// A figment provider for one layer, tagged with a unique metadata name.
struct LayerProvider {
    id: String,
    dict: Dict,
}

impl Provider for LayerProvider {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.id.clone())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}

fn file_layer(
    path: PathBuf,
    from_env: Option<&str>,
    problems: &mut Vec<ConfigProblem>,
) -> Option<Layer> {
    match std::fs::read_to_string(&path) {
        Ok(text) => toml_layer(ConfigSource::File(path), &text, problems),
        Err(err) => {
            problems.push(match from_env {
                Some(value) => ConfigProblem {
                    setting: CONFIG_FILE_ENV.to_owned(),
                    value: render_str(value),
                    rule: format!("must name a readable TOML file: cannot read it: {err}"),
                    source: ConfigSource::Env(CONFIG_FILE_ENV.to_owned()),
                },
                None => ConfigProblem {
                    setting: path.display().to_string(),
                    value: String::new(),
                    rule: format!("cannot be read: {err}"),
                    source: ConfigSource::File(path),
                },
            });
            None
        }
    }
}

fn layer_setting(source: &ConfigSource) -> String {
    match source {
        ConfigSource::Reference => "reference.toml".to_owned(),
        ConfigSource::File(path) => path.display().to_string(),
        ConfigSource::Inline(name) | ConfigSource::Env(name) => name.clone(),
    }
}

fn toml_layer(
    source: ConfigSource,
    text: &str,
    problems: &mut Vec<ConfigProblem>,
) -> Option<Layer> {
    let table = match text.parse::<toml::Table>() {
        Ok(table) => table,
        Err(err) => {
            problems.push(ConfigProblem {
                setting: layer_setting(&source),
                value: String::new(),
                rule: format!("is not valid TOML: {}", describe_toml_error(&err, text)),
                source,
            });
            return None;
        }
    };
    let mut dict = Dict::new();
    collect_table(&table, "", &source, &mut dict, problems);
    Some(Layer { source, dict })
}

fn describe_toml_error(err: &toml::de::Error, text: &str) -> String {
    let message = err.message().trim().replace('\n', "; ");
    match err.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("{message} (line {line}, column {column})")
        }
        None => message,
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Walks one TOML table of a layer: known settings go into `out`, anything else is a problem.
fn collect_table(
    table: &toml::Table,
    prefix: &str,
    source: &ConfigSource,
    out: &mut Dict,
    problems: &mut Vec<ConfigProblem>,
) {
    for (name, value) in table {
        let path = join(prefix, name);
        let problem = |rule: String| ConfigProblem {
            setting: path.clone(),
            value: value.to_string(),
            rule,
            source: source.clone(),
        };
        if keys::is_section(&path) {
            match value {
                toml::Value::Table(inner) => {
                    let mut dict = Dict::new();
                    collect_table(inner, &path, source, &mut dict, problems);
                    out.insert(name.clone(), Value::from(dict));
                }
                other => problems.push(problem(format!(
                    "must be a table of settings ([{path}]), not {}",
                    describe_type(other)
                ))),
            }
        } else if let Some(key) = keys::key(&path) {
            match to_figment(value) {
                Some(v) => {
                    out.insert(name.clone(), v);
                }
                None => problems.push(problem(key.kind.rule())),
            }
        } else {
            problems.push(problem(keys::unknown_rule(&path, false)));
        }
    }
}

fn describe_type(value: &toml::Value) -> &'static str {
    match value {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date-time",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

/// A setting's value as figment holds it; `None` for what no setting accepts (tables,
/// date-times), so it is reported at once with the layer that set it.
fn to_figment(value: &toml::Value) -> Option<Value> {
    Some(match value {
        toml::Value::String(s) => Value::from(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => Value::from(*f),
        toml::Value::Boolean(b) => Value::from(*b),
        toml::Value::Array(items) => Value::from(
            items
                .iter()
                .map(|item| to_figment(item).unwrap_or_else(|| Value::from(item.to_string())))
                .collect::<Vec<_>>(),
        ),
        toml::Value::Datetime(_) | toml::Value::Table(_) => return None,
    })
}

/// Renders a figment value as TOML, for problems.
fn render(value: &Value) -> String {
    fn to_toml(value: &Value) -> toml::Value {
        match value {
            Value::String(_, s) => toml::Value::String(s.clone()),
            Value::Char(_, c) => toml::Value::String(c.to_string()),
            Value::Bool(_, b) => toml::Value::Boolean(*b),
            Value::Num(_, n) => match (integer(*n), n.to_f64()) {
                (Some(i), _) => match i64::try_from(i) {
                    Ok(i) => toml::Value::Integer(i),
                    Err(_) => toml::Value::String(i.to_string()),
                },
                (None, Some(f)) => toml::Value::Float(f),
                (None, None) => toml::Value::String(format!("{n:?}")),
            },
            Value::Empty(_, _) => toml::Value::String(String::new()),
            Value::Dict(_, d) => toml::Value::Table(
                d.iter()
                    .map(|(k, v)| (k.clone(), to_toml(v)))
                    .collect::<toml::Table>(),
            ),
            Value::Array(_, items) => toml::Value::Array(items.iter().map(to_toml).collect()),
        }
    }
    to_toml(value).to_string()
}

fn render_str(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn integer(n: Num) -> Option<i128> {
    n.to_i128()
        .or_else(|| n.to_u128().and_then(|u| i128::try_from(u).ok()))
}

/// Variables that start like ours (`ACTIX_PERSISTENCE...`, or a misspelling of it such as
/// `ACTIX_PERSISTANCE...`) yet follow neither
/// `ACTIX_PERSISTENCE__<SECTION>__<KEY>` nor name `ACTIX_PERSISTENCE_CONFIG`: they would set
/// nothing, so each is a problem naming the closest correct variable.
fn stray_env_vars(env: &[(String, String)]) -> Vec<ConfigProblem> {
    env.iter()
        .filter(|(name, _)| {
            keys::looks_like_ours(name)
                && name != CONFIG_FILE_ENV
                && keys::key_of_env_var(name).is_none()
        })
        .map(|(name, value)| ConfigProblem {
            setting: name.clone(),
            value: render_str(value),
            rule: match keys::closest_env_var(name) {
                Some(hint) => format!("sets nothing; did you mean {hint}?"),
                None => format!(
                    "sets nothing: settings are {}<SECTION>__<KEY> (double underscores between \
                     segments), the user file is {CONFIG_FILE_ENV}",
                    keys::ENV_PREFIX
                ),
            },
            source: ConfigSource::Env(name.clone()),
        })
        .collect()
}

/// Builds the environment layers: one per `ACTIX_PERSISTENCE__*` variable, so each value
/// remembers its variable.
fn env_layers(env: &[(String, String)], problems: &mut Vec<ConfigProblem>) -> Vec<Option<Layer>> {
    let mut layers = Vec::new();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in env {
        let Some(path) = keys::key_of_env_var(name) else {
            continue;
        };
        let source = ConfigSource::Env(name.clone());
        let problem = |rule: String| ConfigProblem {
            // `ACTIX_PERSISTENCE__` alone maps to no key at all: name the variable instead.
            setting: if path.is_empty() {
                name.clone()
            } else {
                path.clone()
            },
            value: render_str(value),
            rule,
            source: source.clone(),
        };
        if keys::key(&path).is_none() {
            let rule = if keys::is_section(&path) {
                format!(
                    "names the section [{path}], not a setting; set one of its settings, such as {}",
                    keys::keys()
                        .find(|k| k.starts_with(&format!("{path}.")))
                        .and_then(keys::env_var)
                        .unwrap_or_default()
                )
            } else {
                keys::unknown_env_rule(name, &path)
            };
            problems.push(problem(rule));
            continue;
        }
        if let Some(other) = seen.get(&path) {
            problems.push(problem(format!(
                "is also set by env {other}; set it with one variable only"
            )));
            continue;
        }
        seen.insert(path.clone(), name.clone());
        let dict = nest(&path, Value::from(value.clone()));
        layers.push(Some(Layer { source, dict }));
    }
    layers
}

/// Whether a SQLite URL names a database: something after the scheme (`sqlite:` or
/// `sqlite://`) and before its options (`?`). Other URLs pass (the journal reports them).
fn sqlite_url_names_a_database(url: &str) -> bool {
    let Some(rest) = url.trim().strip_prefix("sqlite:") else {
        return true;
    };
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    !rest.split('?').next().unwrap_or_default().is_empty()
}

/// The scheme of a URL of another database in `journal.sqlite.url` (`postgres://...`,
/// `mysql://...`): SQLite would take the whole text for a file name and fail to open it, far
/// from the setting. None for `sqlite://`, `file://`, and text without `://` (a path).
fn other_database_scheme(url: &str) -> Option<&str> {
    let (scheme, _) = url.trim().split_once("://")?;
    let is_scheme = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let ours = scheme.eq_ignore_ascii_case("sqlite") || scheme.eq_ignore_ascii_case("file");
    (is_scheme && !ours).then_some(scheme)
}

/// Whether `url` is a PostgreSQL URL: its scheme is `postgres` or `postgresql`. The driver
/// reads any other URL as well (`sqlite:app.db` connects to a PostgreSQL database named
/// `app.db`), and then fails far from the setting.
fn is_postgres_url(url: &str) -> bool {
    url.trim().split_once(':').is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql")
    })
}

fn postgres_url_rule(url: &str) -> String {
    let scheme = url
        .trim()
        .split_once(':')
        .map_or(String::new(), |(scheme, _)| {
            format!(" (it starts with {scheme:?})")
        });
    format!(
        "must be a PostgreSQL URL such as \"postgres://user:password@host:5432/database\" or \
         \"postgres:///database?host=/var/run/postgresql\"{scheme}, since a plugin is \
         \"postgres\""
    )
}

/// `journal.sqlite.url` and `v` as `{ journal = { sqlite = { url = v } } }`.
fn nest(path: &str, value: Value) -> Dict {
    let mut segments = path.rsplit('.');
    let mut dict = Dict::new();
    dict.insert(segments.next().unwrap_or(path).to_owned(), value);
    for segment in segments {
        let mut outer = Dict::new();
        outer.insert(segment.to_owned(), Value::from(dict));
        dict = outer;
    }
    dict
}

/// The merged configuration and the source of each of its values.
struct Merged {
    figment: Figment,
    sources: HashMap<String, ConfigSource>,
    /// `DATABASE_URL` of the environment, unless unset or blank.
    database_url: Option<String>,
}

/// A value of the merged configuration, with where it came from.
struct Found {
    value: Value,
    source: ConfigSource,
}

impl Found {
    fn problem(&self, setting: &str, rule: String) -> ConfigProblem {
        ConfigProblem {
            setting: setting.to_owned(),
            value: render(&self.value),
            rule,
            source: self.source.clone(),
        }
    }
}

impl Merged {
    fn find(&self, path: &str, problems: &mut Vec<ConfigProblem>) -> Option<Found> {
        let found = self.figment.find_value(path).ok().map(|value| {
            let source = self
                .figment
                .get_metadata(value.tag())
                .and_then(|m| self.sources.get(m.name.as_ref()))
                .cloned()
                .unwrap_or(ConfigSource::Reference);
            Found { value, source }
        });
        if found.is_none() {
            // Only possible if reference.toml lost a key; its tests guard against that.
            problems.push(ConfigProblem {
                setting: path.to_owned(),
                value: String::new(),
                rule: "is missing from every layer, reference.toml included".to_owned(),
                source: ConfigSource::Reference,
            });
        }
        found
    }

    fn count(&self, path: &str, problems: &mut Vec<ConfigProblem>) -> Option<(u128, Found)> {
        let found = self.find(path, problems)?;
        let max = match keys::key(path).map(|k| k.kind) {
            Some(Kind::Count { max }) => max,
            _ => u128::from(u32::MAX),
        };
        match parse_count(&found.value, max) {
            Ok(n) => Some((n, found)),
            Err(rule) => {
                problems.push(found.problem(path, rule));
                None
            }
        }
    }

    fn count_usize(&self, path: &str, problems: &mut Vec<ConfigProblem>) -> Option<NonZeroUsize> {
        self.count(path, problems)
            .and_then(|(n, _)| usize::try_from(n).ok())
            .and_then(NonZeroUsize::new)
    }

    fn count_u32(&self, path: &str, problems: &mut Vec<ConfigProblem>) -> Option<NonZeroU32> {
        self.count(path, problems)
            .and_then(|(n, _)| u32::try_from(n).ok())
            .and_then(NonZeroU32::new)
    }

    fn duration(&self, path: &str, problems: &mut Vec<ConfigProblem>) -> Option<Duration> {
        let found = self.find(path, problems)?;
        let parsed = match &found.value {
            Value::String(_, s) => match humantime::parse_duration(s.trim()) {
                Ok(d) if d.is_zero() => Err("must be a duration > 0".to_owned()),
                Ok(d) => Ok(d),
                Err(err) => Err(format!("{} ({err})", Kind::Duration.rule())),
            },
            _ => Err(Kind::Duration.rule()),
        };
        parsed
            .map_err(|rule| problems.push(found.problem(path, rule)))
            .ok()
    }

    fn string(&self, path: &str, problems: &mut Vec<ConfigProblem>) -> Option<String> {
        let found = self.find(path, problems)?;
        match &found.value {
            Value::String(_, s) if !s.trim().is_empty() => Some(s.clone()),
            _ => {
                problems.push(found.problem(path, Kind::NonEmptyString.rule()));
                None
            }
        }
    }

    /// `journal.sqlite.url`: a non-empty string that names a database file (or `:memory:`).
    /// `sqlite:` alone names none: SQLite would give each connection a temporary database of
    /// its own, and the events the writer stored would never be read back.
    fn sqlite_url(&self, problems: &mut Vec<ConfigProblem>) -> Option<String> {
        const PATH: &str = "journal.sqlite.url";
        let url = self.string(PATH, problems)?;
        let rule = match other_database_scheme(&url) {
            Some(scheme) => format!(
                "must be a SQLite URL such as \"sqlite:actix-persistence.db\" (it starts with \
                 {:?}, another database's; a PostgreSQL URL goes in journal.postgres.url)",
                format!("{scheme}://")
            ),
            None if sqlite_url_names_a_database(&url) => return Some(url),
            None => "must name a database file, e.g. \"sqlite:actix-persistence.db\", or be \
                     \"sqlite::memory:\""
                .to_owned(),
        };
        if let Some(found) = self.find(PATH, problems) {
            problems.push(found.problem(PATH, rule));
        }
        None
    }

    /// Any string, the empty one included, with where it came from.
    fn text(&self, path: &str, problems: &mut Vec<ConfigProblem>) -> Option<(String, Found)> {
        let found = self.find(path, problems)?;
        match &found.value {
            Value::String(_, s) => Some((s.clone(), found)),
            _ => {
                problems.push(found.problem(path, Kind::String.rule()));
                None
            }
        }
    }

    /// `snapshot-store.plugin`, resolved: `"same-as-journal"` is the store of `journal`.
    /// A shared journal with a process-local snapshot store is a problem naming both settings.
    fn snapshot_plugin(
        &self,
        path: &str,
        journal: Option<JournalPlugin>,
        problems: &mut Vec<ConfigProblem>,
    ) -> Option<SnapshotStorePlugin> {
        let found = self.find(path, problems)?;
        let plugin = match &found.value {
            Value::String(_, s) if s == SAME_AS_JOURNAL => {
                // An invalid journal.plugin is reported on its own.
                return journal.map(SnapshotStorePlugin::same_as);
            }
            Value::String(_, s) => SnapshotStorePlugin::from_name(s),
            _ => None,
        };
        let Some(plugin) = plugin else {
            problems.push(found.problem(path, Kind::SnapshotPlugin.rule()));
            return None;
        };
        if journal == Some(JournalPlugin::Postgres) && plugin.is_process_local() {
            let journal_source = self
                .find("journal.plugin", problems)
                .map_or(ConfigSource::Reference, |f| f.source);
            problems.push(found.problem(
                path,
                format!(
                    "is local to this process while journal.plugin = \"postgres\" (from \
                     {journal_source}) is shared: a snapshot policy that deletes covered events \
                     would delete them from PostgreSQL while their snapshot stays here, and \
                     every other process would recover without them; set {path} to \
                     \"postgres\" or \"{SAME_AS_JOURNAL}\" (env {})",
                    keys::env_var_unchecked(path)
                ),
            ));
            return None;
        }
        Some(plugin)
    }

    /// The PostgreSQL URL: `journal.postgres.url`, or `DATABASE_URL` when that is blank. Both
    /// blank is a problem only when a plugin in use is `"postgres"`.
    fn postgres_url(
        &self,
        journal: Option<JournalPlugin>,
        snapshots: Option<SnapshotStorePlugin>,
        problems: &mut Vec<ConfigProblem>,
    ) -> Option<String> {
        let (url, found) = self.text(POSTGRES_URL, problems)?;
        let in_use = journal == Some(JournalPlugin::Postgres)
            || snapshots == Some(SnapshotStorePlugin::Postgres);
        if !url.trim().is_empty() {
            if in_use && !is_postgres_url(&url) {
                problems.push(found.problem(POSTGRES_URL, postgres_url_rule(&url)));
                return None;
            }
            return Some(url);
        }
        if let Some(url) = &self.database_url {
            if in_use && !is_postgres_url(url) {
                problems.push(ConfigProblem {
                    setting: POSTGRES_URL.to_owned(),
                    value: render_str(url),
                    rule: postgres_url_rule(url),
                    source: ConfigSource::Env(DATABASE_URL_ENV.to_owned()),
                });
                return None;
            }
            return Some(url.clone());
        }
        let needed_by = match (
            journal == Some(JournalPlugin::Postgres),
            snapshots == Some(SnapshotStorePlugin::Postgres),
        ) {
            (false, false) => return Some(String::new()),
            (true, false) => "journal.plugin is \"postgres\"",
            (false, true) => "snapshot-store.plugin is \"postgres\"",
            (true, true) => "journal.plugin is \"postgres\" (and the snapshot store uses it)",
        };
        problems.push(found.problem(
            POSTGRES_URL,
            format!(
                "must name the PostgreSQL database when {needed_by}: set {POSTGRES_URL} \
                 (env {}) or the environment variable {DATABASE_URL_ENV}",
                keys::env_var_unchecked(POSTGRES_URL)
            ),
        ));
        None
    }

    fn plugin(&self, path: &str, problems: &mut Vec<ConfigProblem>) -> Option<JournalPlugin> {
        let found = self.find(path, problems)?;
        let plugin = match &found.value {
            Value::String(_, s) => JournalPlugin::from_name(s),
            _ => None,
        };
        if plugin.is_none() {
            problems.push(found.problem(path, Kind::Plugin.rule()));
        }
        plugin
    }

    /// Checks every setting, pushing one problem per invalid value; `Some` only if all are valid.
    fn validate(&self, problems: &mut Vec<ConfigProblem>) -> Option<Settings> {
        let plugin = self.plugin("journal.plugin", problems);
        let groups = self.count(GROUPS, problems);
        let limit = self.count(MAX_GROUPS, problems);
        let replay_batch_size = self.count_usize("journal.replay-batch-size", problems);
        let max_batch_size = self.count_u32("journal.max-batch-size", problems);
        let max_concurrent_recoveries =
            self.count_usize("journal.max-concurrent-recoveries", problems);
        let recovery_timeout = self.duration("journal.recovery-timeout", problems);
        let max_failures = self.count_u32("journal.circuit-breaker.max-failures", problems);
        let call_timeout = self.duration("journal.circuit-breaker.call-timeout", problems);
        let reset_timeout = self.duration("journal.circuit-breaker.reset-timeout", problems);
        let url = self.sqlite_url(problems);
        let max_connections = self.count_u32("journal.sqlite.max-connections", problems);
        let busy_timeout = self.duration("journal.sqlite.busy-timeout", problems);
        // Read first (the URL rule needs it), reported last, in the order of reference.toml.
        let mut snapshot_problems = Vec::new();
        let snapshot_plugin =
            self.snapshot_plugin("snapshot-store.plugin", plugin, &mut snapshot_problems);
        let postgres_url = self.postgres_url(plugin, snapshot_plugin, problems);
        let postgres_max_connections = self.count_u32("journal.postgres.max-connections", problems);
        let acquire_timeout = self.duration("journal.postgres.acquire-timeout", problems);
        let statement_timeout = self.duration("journal.postgres.statement-timeout", problems);
        let schema = self
            .text("journal.postgres.schema", problems)
            .map(|(schema, _)| schema);
        problems.extend(snapshot_problems);
        let snapshot_call_timeout = self.duration("snapshot-store.call-timeout", problems);
        let refresh_interval = self.duration("query.refresh-interval", problems);
        let late_commit_window = self.duration("query.late-commit-window", problems);
        let page_size = self.count_u32("query.page-size", problems);
        let read_ahead_pages = self.count_u32(keys::READ_AHEAD_PAGES, problems);

        // The limit rule, on merged values: only when both are valid integers on their own.
        let mut groups_ok = groups.is_some();
        if let (Some((g, g_found)), Some((l, l_found))) = (&groups, &limit) {
            if g > l {
                groups_ok = false;
                let rule = keys::groups_above_limit_rule(l, &l_found.source);
                problems.push(g_found.problem(GROUPS, rule));
            }
        }

        let to_usize = |c: Option<(u128, Found)>| {
            c.and_then(|(n, _)| usize::try_from(n).ok())
                .and_then(NonZeroUsize::new)
        };
        let write_reply_ordering_groups = if groups_ok { to_usize(groups) } else { None };
        let max_write_reply_ordering_groups = to_usize(limit);

        Some(Settings {
            journal: JournalSettings {
                plugin: plugin?,
                write_reply_ordering_groups: write_reply_ordering_groups?,
                max_write_reply_ordering_groups: max_write_reply_ordering_groups?,
                replay_batch_size: replay_batch_size?,
                max_batch_size: max_batch_size?,
                max_concurrent_recoveries: max_concurrent_recoveries?,
                recovery_timeout: recovery_timeout?,
                circuit_breaker: CircuitBreakerSettings {
                    max_failures: max_failures?.get(),
                    call_timeout: call_timeout?,
                    reset_timeout: reset_timeout?,
                },
                sqlite: SqliteSettings {
                    url: url?,
                    max_connections: max_connections?,
                    busy_timeout: busy_timeout?,
                },
                postgres: PostgresSettings {
                    url: postgres_url?,
                    max_connections: postgres_max_connections?,
                    acquire_timeout: acquire_timeout?,
                    statement_timeout: statement_timeout?,
                    schema: schema?,
                },
            },
            snapshot_store: SnapshotStoreSettings {
                plugin: snapshot_plugin?,
                call_timeout: snapshot_call_timeout?,
            },
            query: QuerySettings {
                refresh_interval: refresh_interval?,
                late_commit_window: late_commit_window?,
                page_size: page_size?,
                read_ahead_pages: read_ahead_pages?,
            },
        })
    }
}

/// Parses an integer setting: a TOML integer, or a string holding one (whitespace around it is
/// trimmed). Returns the rule broken on failure.
fn parse_count(value: &Value, max: u128) -> Result<u128, String> {
    let base = Kind::Count { max }.rule();
    let n: i128 = match value {
        Value::Num(_, n) => integer(*n).ok_or_else(|| base.clone())?,
        Value::String(_, s) => {
            let s = s.trim();
            match s.parse::<i128>() {
                Ok(n) => n,
                // Digits only, yet no i128: far too large.
                Err(_) if looks_like_big_integer(s) => return Err(too_large(max)),
                Err(_) => return Err(base),
            }
        }
        _ => return Err(base),
    };
    if n < 1 {
        return Err(base);
    }
    match u128::try_from(n) {
        Ok(n) if n <= max => Ok(n),
        _ => Err(too_large(max)),
    }
}

fn looks_like_big_integer(s: &str) -> bool {
    let digits = s.strip_prefix('+').unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

fn too_large(max: u128) -> String {
    keys::count_rule(max)
}
