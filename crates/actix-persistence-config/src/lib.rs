//! Settings of actix-persistence: `reference.toml`, a user file and environment variables,
//! validated once at startup.
//!
//! Every setting has a default in the annotated [`reference`](mod@crate::reference) file (the root `reference.toml`
//! of the repository, embedded here). A deployment overrides what it needs, later wins:
//!
//! 1. `reference.toml` (the defaults);
//! 2. a user TOML file: the path given to [`SettingsLoader::file`], then the file named by the
//!    environment variable `ACTIX_PERSISTENCE_CONFIG`;
//! 3. inline TOML given to [`SettingsLoader::toml_str`];
//! 4. environment variables `ACTIX_PERSISTENCE__<SECTION>__<KEY>`: segments split by a double
//!    underscore, dashes written as underscores, case-insensitive.
//!    `ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS=8` sets
//!    `journal.write-reply-ordering-groups`; [`env_var`] gives the variable of any key.
//!
//! One variable outside the scheme is read too: `DATABASE_URL` ([`DATABASE_URL_ENV`]), the
//! PostgreSQL URL used when `journal.postgres.url` is empty (the convention of sqlx and most
//! PostgreSQL tooling).
//!
//! Validation runs once, on the merged configuration, and reports **every** problem in one
//! [`ConfigError`]; each [`ConfigProblem`] names the setting, the value, the rule it breaks and
//! where the value came from (the env var name, the file path). Unknown keys are errors, with a
//! hint of the closest known key; they are never ignored.
//!
//! Values are read leniently in one documented way: a string that reads as the setting's type
//! is accepted (`"4"` in a file and `4` from the environment are the integer 4, exactly as `4`),
//! and whitespace around a number or a duration is trimmed (`" 4 "` is 4). Nothing else is
//! trimmed or guessed: `4.5`, `"four"` and `""` are not integers.
//!
//! # Examples
//!
//! At startup, load the settings from `reference.toml`, the file named by
//! `ACTIX_PERSISTENCE_CONFIG` and the process environment, and stop with every problem if the
//! configuration is invalid:
//!
//! ```no_run
//! use actix_persistence_config::Settings;
//!
//! let settings = match Settings::load() {
//!     Ok(settings) => settings,
//!     Err(err) => {
//!         eprintln!("invalid configuration:\n{err}");
//!         std::process::exit(2);
//!     }
//! };
//! println!("{} ordering groups", settings.journal.write_reply_ordering_groups);
//! ```
//!
//! Layers given in code, and problems as values:
//!
//! ```
//! use actix_persistence_config::{ConfigSource, Settings};
//!
//! let err = Settings::loader()
//!     .toml_str("app", "[journal]\nmax-write-reply-ordering-groups = 10")
//!     .env_vars([("ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS", "12")])
//!     .load()
//!     .unwrap_err();
//! let problem = &err.problems[0];
//! assert_eq!(problem.setting, "journal.write-reply-ordering-groups");
//! assert_eq!(problem.value, "\"12\"");
//! assert_eq!(
//!     problem.source,
//!     ConfigSource::Env("ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS".into()),
//! );
//! assert!(problem.rule.starts_with("must be <= journal.max-write-reply-ordering-groups (10 from app)"));
//! ```
#![warn(missing_docs)]

use std::fmt;
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

mod error;
mod keys;
mod loader;

pub use error::{ConfigError, ConfigProblem, ConfigSource};
pub use keys::{env_var, keys, CONFIG_FILE_ENV, DATABASE_URL_ENV, ENV_PREFIX};
pub use loader::SettingsLoader;

/// The most write-reply-ordering groups a journal runs: `journal.max-write-reply-ordering-groups`
/// (and so `journal.write-reply-ordering-groups`) is at most this. Each group is a resequencer
/// actor started with the journal, so millions of them would take gigabytes and seconds at
/// startup; a journal whose groups are held back by one slow write needs a few per slow write
/// in flight, not one per actor. The same limit as the core's
/// `journal::MAX_WRITE_REPLY_ORDERING_GROUPS`.
pub const MAX_WRITE_REPLY_ORDERING_GROUPS: usize = 65_536;

/// The largest connection pool of a SQL store: `journal.sqlite.max-connections` and
/// `journal.postgres.max-connections` are at most this. sqlx takes room for every connection
/// of a pool when it builds it (a pool of `u32::MAX` connections asked for hundreds of GB and
/// aborted the process); PostgreSQL itself serves at most 262,143 connections, and a default
/// server 100. The same limit as `actix_persistence_sql::MAX_POOL_CONNECTIONS`.
pub const MAX_POOL_CONNECTIONS: u32 = 10_000;

/// The most `query.read-ahead-pages` can be: each page read ahead is a task and a database
/// connection's work at once. The same limit as the core's
/// `query::QuerySettings::MAX_READ_AHEAD_PAGES`, which settings built in code are held to.
pub const MAX_READ_AHEAD_PAGES: u32 = 64;

/// The text of the repository's `reference.toml`, embedded at build time: every setting with
/// its default, meaning, rule and environment variable. Rendered in [`reference`](mod@crate::reference).
pub const REFERENCE_TOML: &str = include_str!("../../../reference.toml");

#[doc = concat!(
    "The annotated `reference.toml`: every setting, its default, meaning, rule and environment variable.\n\n",
    "This is the file [`Settings::reference`] reads (see also [`REFERENCE_TOML`](crate::REFERENCE_TOML)).\n\n",
    "```toml\n",
    include_str!("../../../reference.toml"),
    "```"
)]
pub mod reference {}

/// All settings of actix-persistence, validated.
///
/// Build it with [`Settings::load`] (process environment), [`Settings::loader`] (layers chosen
/// in code) or [`Settings::reference`] (the defaults). A `Settings` value always passed
/// validation when it came from one of these; fields are public so tests and embedders can
/// adjust a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `[journal]`: the event journal.
    pub journal: JournalSettings,
    /// `[snapshot-store]`: where snapshots are kept.
    pub snapshot_store: SnapshotStoreSettings,
    /// `[query]`: persistence queries.
    pub query: QuerySettings,
}

/// `[query]`: persistence queries (the read side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuerySettings {
    /// `query.refresh-interval`: how often a live query looks for new events, > 0. Default:
    /// 500 ms. Env: `ACTIX_PERSISTENCE__QUERY__REFRESH_INTERVAL`.
    pub refresh_interval: Duration,
    /// `query.late-commit-window`: how long a write's transaction may take from insert to
    /// commit and still be delivered by queries by slice and by tag that delivered later
    /// events, > 0. Default: 2 s. Env: `ACTIX_PERSISTENCE__QUERY__LATE_COMMIT_WINDOW`.
    pub late_commit_window: Duration,
    /// `query.page-size`: events read per database query. Default: 1000.
    /// Env: `ACTIX_PERSISTENCE__QUERY__PAGE_SIZE`.
    pub page_size: NonZeroU32,
    /// `query.read-ahead-pages`: pages a query by slices or by tag reads while its consumer
    /// takes the current one, each on a connection of its own, 1..=64. Default: 3.
    /// Env: `ACTIX_PERSISTENCE__QUERY__READ_AHEAD_PAGES`.
    pub read_ahead_pages: NonZeroU32,
}

/// `[journal]`: the event journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalSettings {
    /// `journal.plugin`: which store holds the events. Default: [`JournalPlugin::Sqlite`].
    /// Env: `ACTIX_PERSISTENCE__JOURNAL__PLUGIN`.
    pub plugin: JournalPlugin,
    /// `journal.write-reply-ordering-groups`: number of write-reply ordering groups. Default: 1.
    /// Env: `ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS`.
    ///
    /// Ordering guarantee: within a group, replies to persistent actors are delivered in the
    /// order the writes arrived, so one slow write delays the replies of every later write of
    /// the same group (head-of-line blocking); writes of different groups never wait for each
    /// other. An actor is assigned to a group by its incarnation id, not its persistence id, so a
    /// restarted actor may land in another group. More groups mean less head-of-line blocking
    /// but also less accidental backpressure towards an overloaded database. 1 is one global
    /// order. Always `<=` [`max_write_reply_ordering_groups`](Self::max_write_reply_ordering_groups).
    pub write_reply_ordering_groups: NonZeroUsize,
    /// `journal.max-write-reply-ordering-groups`: upper limit for
    /// [`write_reply_ordering_groups`](Self::write_reply_ordering_groups); each group is an actor
    /// created at startup. Never raised silently. At most [`MAX_WRITE_REPLY_ORDERING_GROUPS`]
    /// (65,536). Default: 10000.
    /// Env: `ACTIX_PERSISTENCE__JOURNAL__MAX_WRITE_REPLY_ORDERING_GROUPS`.
    pub max_write_reply_ordering_groups: NonZeroUsize,
    /// `journal.replay-batch-size`: events fetched per round trip during recovery. Default: 1000.
    /// Env: `ACTIX_PERSISTENCE__JOURNAL__REPLAY_BATCH_SIZE`.
    pub replay_batch_size: NonZeroUsize,
    /// `journal.max-batch-size`: group commit of the SQL journals; at most this many atomic
    /// writes, from any number of concurrent writers, share one transaction. 1 turns group
    /// commit off (one transaction per atomic write). Default: 512.
    /// Env: `ACTIX_PERSISTENCE__JOURNAL__MAX_BATCH_SIZE`.
    pub max_batch_size: NonZeroU32,
    /// `journal.max-concurrent-recoveries`: persistent actors that may recover at once; the
    /// others wait in arrival order. Default: 50.
    /// Env: `ACTIX_PERSISTENCE__JOURNAL__MAX_CONCURRENT_RECOVERIES`.
    pub max_concurrent_recoveries: NonZeroUsize,
    /// `journal.recovery-timeout`: a recovery that makes no progress for this long fails and
    /// its actor stops. Default: 30 s. Env: `ACTIX_PERSISTENCE__JOURNAL__RECOVERY_TIMEOUT`.
    pub recovery_timeout: Duration,
    /// `[journal.circuit-breaker]`: the circuit breaker in front of the journal.
    pub circuit_breaker: CircuitBreakerSettings,
    /// `[journal.sqlite]`: the SQLite journal plugin.
    pub sqlite: SqliteSettings,
    /// `[journal.postgres]`: the PostgreSQL journal plugin.
    pub postgres: PostgresSettings,
}

/// `journal.plugin`: which store holds the events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JournalPlugin {
    /// `"sqlite"`: the embedded default; one database file, no server. See [`SqliteSettings`].
    Sqlite,
    /// `"postgres"`: a PostgreSQL server (or a Postgres-compatible one). See
    /// [`PostgresSettings`].
    Postgres,
    /// `"inmem"`: in memory, for tests; nothing survives the process.
    InMemory,
}

impl JournalPlugin {
    /// Every plugin, in the order the rule lists them.
    pub const ALL: &'static [JournalPlugin] = &[
        JournalPlugin::Sqlite,
        JournalPlugin::Postgres,
        JournalPlugin::InMemory,
    ];

    /// The name used in configuration: `"sqlite"`, `"postgres"`, `"inmem"`.
    ///
    /// # Examples
    ///
    /// ```
    /// use actix_persistence_config::JournalPlugin;
    ///
    /// assert_eq!(JournalPlugin::InMemory.as_str(), "inmem");
    /// assert_eq!(JournalPlugin::from_name("sqlite"), Some(JournalPlugin::Sqlite));
    /// assert_eq!(JournalPlugin::from_name("SQLite"), None);
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            JournalPlugin::Sqlite => "sqlite",
            JournalPlugin::Postgres => "postgres",
            JournalPlugin::InMemory => "inmem",
        }
    }

    /// The plugin with this configuration name (exact, case-sensitive), if any.
    pub fn from_name(name: &str) -> Option<JournalPlugin> {
        Self::ALL.iter().copied().find(|p| p.as_str() == name)
    }
}

impl fmt::Display for JournalPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[journal.circuit-breaker]`: after `max_failures` consecutive failed or timed-out journal
/// calls the breaker opens and fails calls at once for `reset_timeout`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CircuitBreakerSettings {
    /// `journal.circuit-breaker.max-failures`: consecutive failures that open the breaker, >= 1.
    /// Default: 10. Env: `ACTIX_PERSISTENCE__JOURNAL__CIRCUIT_BREAKER__MAX_FAILURES`.
    pub max_failures: u32,
    /// `journal.circuit-breaker.call-timeout`: time a journal call may take before it counts as
    /// failed, > 0. Default: 10 s. Env: `ACTIX_PERSISTENCE__JOURNAL__CIRCUIT_BREAKER__CALL_TIMEOUT`.
    pub call_timeout: Duration,
    /// `journal.circuit-breaker.reset-timeout`: time the breaker stays open, > 0. Default: 30 s.
    /// Env: `ACTIX_PERSISTENCE__JOURNAL__CIRCUIT_BREAKER__RESET_TIMEOUT`.
    pub reset_timeout: Duration,
}

/// `[journal.sqlite]`: the SQLite journal plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteSettings {
    /// `journal.sqlite.url`: the database, non-empty. Default: `sqlite:actix-persistence.db`, a
    /// file in the working directory, created when missing.
    /// Env: `ACTIX_PERSISTENCE__JOURNAL__SQLITE__URL`.
    pub url: String,
    /// `journal.sqlite.max-connections`: size of the connection pool, at most
    /// [`MAX_POOL_CONNECTIONS`]. Default: 4.
    /// Env: `ACTIX_PERSISTENCE__JOURNAL__SQLITE__MAX_CONNECTIONS`.
    pub max_connections: NonZeroU32,
    /// `journal.sqlite.busy-timeout`: how long a connection waits for a lock, > 0. Default: 5 s.
    /// Env: `ACTIX_PERSISTENCE__JOURNAL__SQLITE__BUSY_TIMEOUT`.
    pub busy_timeout: Duration,
}

/// `[journal.postgres]`: the PostgreSQL journal plugin (and the `"postgres"` snapshot store).
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresSettings {
    /// The PostgreSQL URL to connect to: `journal.postgres.url`, or when that is empty the
    /// environment variable `DATABASE_URL`. Empty only when both are, which validation allows
    /// only while no plugin is `"postgres"`. May hold a password: `Debug` hides it.
    /// Default: empty. Env: `ACTIX_PERSISTENCE__JOURNAL__POSTGRES__URL`, then `DATABASE_URL`.
    pub url: String,
    /// `journal.postgres.max-connections`: size of the connection pool, at most
    /// [`MAX_POOL_CONNECTIONS`]. Default: 10.
    /// Env: `ACTIX_PERSISTENCE__JOURNAL__POSTGRES__MAX_CONNECTIONS`.
    pub max_connections: NonZeroU32,
    /// `journal.postgres.acquire-timeout`: how long an operation waits for a connection of the
    /// pool, > 0. Default: 5 s. Env: `ACTIX_PERSISTENCE__JOURNAL__POSTGRES__ACQUIRE_TIMEOUT`.
    pub acquire_timeout: Duration,
    /// `journal.postgres.statement-timeout`: the server cancels a statement running longer,
    /// > 0. Default: 10 s. Env: `ACTIX_PERSISTENCE__JOURNAL__POSTGRES__STATEMENT_TIMEOUT`.
    pub statement_timeout: Duration,
    /// `journal.postgres.schema`: the PostgreSQL schema of the tables, created when missing and
    /// set as every connection's `search_path`; empty for the connection's default. Default:
    /// empty. Env: `ACTIX_PERSISTENCE__JOURNAL__POSTGRES__SCHEMA`.
    pub schema: String,
}

impl fmt::Debug for PostgresSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresSettings")
            .field("url", &redact_password(&self.url))
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field("schema", &self.schema)
            .finish()
    }
}

/// `url` with the password of its user info (`user:password@`) replaced by `***`.
fn redact_password(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let start = scheme_end + 3;
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| start + i);
    match url[start..end].rfind('@') {
        Some(at) => match url[start..start + at].find(':') {
            Some(colon) => format!("{}***{}", &url[..start + colon + 1], &url[start + at..]),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// The value of `snapshot-store.plugin` that keeps snapshots in the store of `journal.plugin`
/// (the default).
pub const SAME_AS_JOURNAL: &str = "same-as-journal";

/// `[snapshot-store]`: where snapshots are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotStoreSettings {
    /// `snapshot-store.plugin`: which store keeps snapshots, resolved: the default
    /// `"same-as-journal"` ([`SAME_AS_JOURNAL`]) is the store of `journal.plugin`. It connects
    /// with the settings of the matching journal section: `"sqlite"` with `[journal.sqlite]`
    /// (the same database file as the SQLite journal), `"postgres"` with `[journal.postgres]`.
    /// A `"postgres"` journal with a `"sqlite"` or `"inmem"` snapshot store fails validation
    /// (a snapshot that lets events be deleted from the shared journal must be shared too).
    /// Env: `ACTIX_PERSISTENCE__SNAPSHOT_STORE__PLUGIN`.
    pub plugin: SnapshotStorePlugin,
    /// `snapshot-store.call-timeout`: how long a snapshot save, load or delete may take before
    /// it fails. Default: 10 s. Env: `ACTIX_PERSISTENCE__SNAPSHOT_STORE__CALL_TIMEOUT`.
    pub call_timeout: Duration,
}

/// `snapshot-store.plugin`: which store keeps snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SnapshotStorePlugin {
    /// `"sqlite"`: the `snapshot` table of the database `journal.sqlite.url` names.
    Sqlite,
    /// `"postgres"`: the `snapshot` table of the database `journal.postgres.url` (or
    /// `DATABASE_URL`) names, with the pool settings of `[journal.postgres]`.
    Postgres,
    /// `"inmem"`: in memory, for tests; nothing survives the process.
    InMemory,
}

impl SnapshotStorePlugin {
    /// Every plugin, in the order the rule lists them.
    pub const ALL: &'static [SnapshotStorePlugin] = &[
        SnapshotStorePlugin::Sqlite,
        SnapshotStorePlugin::Postgres,
        SnapshotStorePlugin::InMemory,
    ];

    /// The name used in configuration: `"sqlite"`, `"postgres"`, `"inmem"`.
    ///
    /// # Examples
    ///
    /// ```
    /// use actix_persistence_config::SnapshotStorePlugin;
    ///
    /// assert_eq!(SnapshotStorePlugin::Postgres.as_str(), "postgres");
    /// assert_eq!(SnapshotStorePlugin::from_name("inmem"), Some(SnapshotStorePlugin::InMemory));
    /// assert_eq!(SnapshotStorePlugin::from_name("Postgres"), None);
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotStorePlugin::Sqlite => "sqlite",
            SnapshotStorePlugin::Postgres => "postgres",
            SnapshotStorePlugin::InMemory => "inmem",
        }
    }

    /// The plugin with this configuration name (exact, case-sensitive), if any.
    pub fn from_name(name: &str) -> Option<SnapshotStorePlugin> {
        Self::ALL.iter().copied().find(|p| p.as_str() == name)
    }

    /// The snapshot store of the same kind as `journal`: what `"same-as-journal"` means.
    pub fn same_as(journal: JournalPlugin) -> SnapshotStorePlugin {
        match journal {
            JournalPlugin::Sqlite => SnapshotStorePlugin::Sqlite,
            JournalPlugin::Postgres => SnapshotStorePlugin::Postgres,
            JournalPlugin::InMemory => SnapshotStorePlugin::InMemory,
        }
    }

    /// Whether the store lives in one process only (a local SQLite file, memory), as opposed
    /// to a server every process shares.
    pub fn is_process_local(self) -> bool {
        !matches!(self, SnapshotStorePlugin::Postgres)
    }
}

impl fmt::Display for SnapshotStorePlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Settings {
    /// Loads the settings the way an application does at startup: `reference.toml`, then the
    /// file named by `ACTIX_PERSISTENCE_CONFIG` (if set), then the `ACTIX_PERSISTENCE__*`
    /// variables of the process environment (and `DATABASE_URL` for an empty
    /// `journal.postgres.url`).
    ///
    /// Same as `Settings::loader().load()`.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every problem: see [`SettingsLoader::load`].
    pub fn load() -> Result<Settings, ConfigError> {
        Self::loader().load()
    }

    /// A loader for choosing the layers in code: a user file, inline TOML, the environment.
    ///
    /// # Examples
    ///
    /// ```
    /// use actix_persistence_config::Settings;
    ///
    /// let settings = Settings::loader()
    ///     .toml_str("test", "[journal]\nplugin = \"inmem\"")
    ///     .env_vars(Vec::<(String, String)>::new())
    ///     .load()?;
    /// assert_eq!(settings.journal.plugin.as_str(), "inmem");
    /// # Ok::<(), actix_persistence_config::ConfigError>(())
    /// ```
    pub fn loader() -> SettingsLoader {
        SettingsLoader::default()
    }

    /// The defaults: `reference.toml` alone, without any file or environment variable (so
    /// `journal.postgres.url` is empty: `DATABASE_URL` is not read either).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use actix_persistence_config::{JournalPlugin, Settings};
    ///
    /// let defaults = Settings::reference();
    /// assert_eq!(defaults.journal.plugin, JournalPlugin::Sqlite);
    /// assert_eq!(defaults.journal.write_reply_ordering_groups.get(), 1);
    /// assert_eq!(defaults.journal.circuit_breaker.call_timeout, Duration::from_secs(10));
    /// ```
    ///
    /// # Panics
    ///
    /// Only if the embedded `reference.toml` were invalid, which the crate's tests rule out
    /// (`config_reference.rs`); nothing a user controls can make it panic.
    pub fn reference() -> Settings {
        match SettingsLoader::default()
            .env_vars(Vec::<(String, String)>::new())
            .load()
        {
            Ok(settings) => settings,
            Err(err) => panic!("the embedded reference.toml is invalid (a build defect):\n{err}"),
        }
    }
}

impl Settings {
    /// The name [`validate`](Self::validate) gives as the source of a value: settings built or
    /// adjusted in code come from no configuration layer.
    pub const IN_CODE: &'static str = "settings given in code";

    /// Checks the rules that the field types cannot hold, for settings built or adjusted in
    /// code (the fields are public): `write_reply_ordering_groups <=
    /// max_write_reply_ordering_groups <=` [`MAX_WRITE_REPLY_ORDERING_GROUPS`], both pools'
    /// `max_connections <=` [`MAX_POOL_CONNECTIONS`] and `read_ahead_pages <=` [`MAX_READ_AHEAD_PAGES`]. Settings from a loader
    /// always pass; `Persistence` checks the settings it is given before it starts anything.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every broken rule, each with the source
    /// [`ConfigSource::Inline`]`(`[`Settings::IN_CODE`]`)`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use actix_persistence_config::Settings;
    ///
    /// let mut settings = Settings::reference();
    /// assert!(settings.validate().is_ok());
    /// settings.journal.write_reply_ordering_groups = NonZeroUsize::new(20_000).unwrap();
    /// let err = settings.validate().unwrap_err();
    /// assert_eq!(err.problems[0].setting, "journal.write-reply-ordering-groups");
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        let source = ConfigSource::Inline(Self::IN_CODE.to_owned());
        let mut problems = Vec::new();
        let (groups, limit) = (
            self.journal.write_reply_ordering_groups,
            self.journal.max_write_reply_ordering_groups,
        );
        if groups > limit {
            problems.push(ConfigProblem {
                setting: keys::GROUPS.to_owned(),
                value: groups.to_string(),
                rule: keys::groups_above_limit_rule(limit, &source),
                source: source.clone(),
            });
        }
        let mut above = |setting: &str, value: u128, max: u128| {
            if value > max {
                problems.push(ConfigProblem {
                    setting: setting.to_owned(),
                    value: value.to_string(),
                    rule: keys::count_rule(max),
                    source: source.clone(),
                });
            }
        };
        above(
            keys::MAX_GROUPS,
            limit.get() as u128,
            keys::MAX_GROUPS_CEILING,
        );
        above(
            "journal.sqlite.max-connections",
            u128::from(self.journal.sqlite.max_connections.get()),
            keys::MAX_CONNECTIONS_CEILING,
        );
        above(
            "journal.postgres.max-connections",
            u128::from(self.journal.postgres.max_connections.get()),
            keys::MAX_CONNECTIONS_CEILING,
        );
        above(
            keys::READ_AHEAD_PAGES,
            u128::from(self.query.read_ahead_pages.get()),
            keys::MAX_READ_AHEAD_PAGES,
        );
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { problems })
        }
    }
}

impl Default for Settings {
    /// The defaults, [`Settings::reference`].
    fn default() -> Self {
        Settings::reference()
    }
}
