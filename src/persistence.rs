use std::sync::Arc;

use actix::Addr;
use actix_persistence_config::{JournalPlugin, Settings, SettingsLoader};
use actix_persistence_core::journal::{CircuitBreakerConfig, JournalActor, JournalConfig};
use actix_persistence_core::persistent::{EventSourced, PersistenceState};
use actix_persistence_core::{InMemoryJournal, InvalidPersistenceId, JournalStore};

use crate::ConfigError;

/// Why [`Persistence`] could not start. Returned before any persistent actor exists.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The merged configuration is invalid; every problem is listed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The configured journal store could not be opened.
    #[error("could not open the {plugin} journal: {source}")]
    Store {
        /// The `journal.plugin` setting.
        plugin: &'static str,
        /// The store's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// `journal.plugin` names a store this build was compiled without.
    #[error("journal.plugin = {plugin:?} is not available: enable the crate feature {feature:?}")]
    PluginNotCompiled {
        /// The `journal.plugin` setting.
        plugin: &'static str,
        /// The feature of `actix-persistence` that provides it.
        feature: &'static str,
    },
}

/// The entry point: validated settings, an open store and a running journal actor (as Akka's
/// `Persistence` extension).
///
/// Start it inside a running Actix system, before any persistent actor; then give each
/// persistent actor a [`PersistenceState`] from [`Persistence::state`].
#[derive(Clone)]
pub struct Persistence {
    settings: Arc<Settings>,
    journal: Addr<JournalActor>,
}

impl std::fmt::Debug for Persistence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persistence")
            .field("plugin", &plugin_name(&self.settings.journal.plugin))
            .finish_non_exhaustive()
    }
}

impl Persistence {
    /// Loads the settings (`reference.toml`, then the file named by `ACTIX_PERSISTENCE_CONFIG`,
    /// then `ACTIX_PERSISTENCE__*` environment variables), validates them, opens the
    /// configured store and starts the journal actor.
    ///
    /// # Errors
    /// [`StartError::Config`] naming every bad setting, its value and where it came from;
    /// [`StartError::Store`] when the store cannot be opened.
    pub async fn start() -> Result<Self, StartError> {
        Self::start_from(Settings::loader()).await
    }

    /// As [`start`](Self::start), with layers chosen by the caller (a file given in code,
    /// inline TOML, or environment variables passed explicitly).
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub async fn start_from(loader: SettingsLoader) -> Result<Self, StartError> {
        Self::start_with(loader.load()?).await
    }

    /// As [`start`](Self::start), with settings loaded by the caller (see
    /// [`Settings::loader`]).
    ///
    /// # Errors
    /// [`StartError::Store`] when the store cannot be opened.
    pub async fn start_with(settings: Settings) -> Result<Self, StartError> {
        let store = open_store(&settings).await?;
        Ok(Self::start_with_store(settings, store))
    }

    /// Starts the journal actor over a store of the caller's (a third-party plugin, or the
    /// testkit's controlled store). `settings.journal.plugin` is ignored.
    pub fn start_with_store(settings: Settings, store: Arc<dyn JournalStore>) -> Self {
        let breaker = &settings.journal.circuit_breaker;
        let config = JournalConfig {
            write_reply_ordering_groups: settings.journal.write_reply_ordering_groups,
            call_timeout: breaker.call_timeout,
            circuit_breaker: CircuitBreakerConfig {
                max_failures: breaker.max_failures,
                reset_timeout: breaker.reset_timeout,
            },
        };
        let journal = JournalActor::start_with(store, config);
        Persistence {
            settings: Arc::new(settings),
            journal,
        }
    }

    /// The validated settings in force.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The journal actor.
    pub fn journal(&self) -> &Addr<JournalActor> {
        &self.journal
    }

    /// The persistence state of a new incarnation of `persistence_id`, for a persistent actor
    /// about to start.
    ///
    /// # Errors
    /// [`InvalidPersistenceId`] for an empty id or one holding NUL.
    pub fn state<A: EventSourced>(
        &self,
        persistence_id: impl Into<String>,
    ) -> Result<PersistenceState<A>, InvalidPersistenceId> {
        PersistenceState::new(self.journal.clone(), persistence_id)
    }
}

fn plugin_name(plugin: &JournalPlugin) -> &'static str {
    plugin.as_str()
}

async fn open_store(settings: &Settings) -> Result<Arc<dyn JournalStore>, StartError> {
    match settings.journal.plugin {
        JournalPlugin::InMemory => Ok(Arc::new(InMemoryJournal::new())),
        JournalPlugin::Sqlite => open_sqlite(settings).await,
        #[allow(unreachable_patterns)]
        _ => Err(StartError::PluginNotCompiled {
            plugin: plugin_name(&settings.journal.plugin),
            feature: plugin_name(&settings.journal.plugin),
        }),
    }
}

#[cfg(feature = "sqlite")]
async fn open_sqlite(settings: &Settings) -> Result<Arc<dyn JournalStore>, StartError> {
    use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions};
    let sqlite = &settings.journal.sqlite;
    let options = SqliteJournalOptions {
        url: sqlite.url.clone(),
        max_connections: sqlite.max_connections.get(),
        busy_timeout: sqlite.busy_timeout,
        replay_batch_size: u32::try_from(settings.journal.replay_batch_size.get())
            .unwrap_or(u32::MAX),
        ..SqliteJournalOptions::default()
    };
    let store = SqliteJournal::connect(&options)
        .await
        .map_err(|e| StartError::Store {
            plugin: "sqlite",
            source: Box::new(e),
        })?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "sqlite"))]
async fn open_sqlite(_: &Settings) -> Result<Arc<dyn JournalStore>, StartError> {
    Err(StartError::PluginNotCompiled {
        plugin: "sqlite",
        feature: "sqlite",
    })
}
