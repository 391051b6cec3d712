// Built without a SQL store (`default-features = false`), the plumbing that opens one is unused.
#![cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(dead_code, unused_imports, unused_variables, clippy::ptr_arg)
)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use actix::{Actor, Addr};
use actix_persistence_config::{JournalPlugin, Settings, SettingsLoader, SnapshotStorePlugin};
use actix_persistence_core::journal::{
    CheckHealth, CircuitBreakerConfig, JournalActor, JournalConfig, Unhealthy,
};
use actix_persistence_core::persistent::{EventSourced, PersistenceState};
use actix_persistence_core::persistent::{InFlight, RecoveryPermits};
use actix_persistence_core::query::{QueryError, QuerySettings, QueryStore, ReadJournal};
use actix_persistence_core::snapshot::{InMemorySnapshotStore, SnapshotStore};
use actix_persistence_core::{InMemoryJournal, InvalidPersistenceId, JournalStore};
use actix_persistence_sql::SqlStoreError;
#[cfg(feature = "postgres")]
use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions, PostgresSnapshotStore};
#[cfg(feature = "sqlite")]
use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions, SqliteSnapshotStore};

use crate::ConfigError;

/// Why [`Persistence`] could not start. Returned before any persistent actor exists.
///
/// `Debug` writes the message (as `Display`), so a `main` that returns the error with `?`
/// prints what is wrong rather than nested structs; `{:#?}` writes the structure.
#[derive(thiserror::Error)]
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
    /// `Persistence` was started outside a running Actix system (under `#[tokio::main]`, say):
    /// its journal is an actor and needs one.
    #[error(
        "actix-persistence must be started inside a running Actix system: use #[actix::main] \
         (or actix_persistence::main, or actix::System::new().block_on(..)) instead of \
         #[tokio::main]"
    )]
    NoActixSystem,
    /// `journal.plugin` names a store this build was compiled without.
    #[error(
        "journal.plugin = {plugin:?} is not available: enable the crate feature {feature:?}, \
         or choose a store this build has (journal.plugin in your TOML, or \
         ACTIX_PERSISTENCE__JOURNAL__PLUGIN)"
    )]
    PluginNotCompiled {
        /// The `journal.plugin` setting.
        plugin: &'static str,
        /// The feature of `actix-persistence` that provides it.
        feature: &'static str,
    },
}

impl std::fmt::Debug for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !f.alternate() {
            return match self {
                // ConfigError's Debug is its message under a heading.
                StartError::Config(error) => write!(f, "{error:?}"),
                other => write!(f, "{other}"),
            };
        }
        match self {
            StartError::Config(error) => f.debug_tuple("Config").field(error).finish(),
            StartError::Store { plugin, source } => f
                .debug_struct("Store")
                .field("plugin", plugin)
                .field("source", source)
                .finish(),
            StartError::NoActixSystem => f.write_str("NoActixSystem"),
            StartError::PluginNotCompiled { plugin, feature } => f
                .debug_struct("PluginNotCompiled")
                .field("plugin", plugin)
                .field("feature", feature)
                .finish(),
        }
    }
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
    snapshots: Arc<dyn SnapshotStore>,
    permits: RecoveryPermits,
    in_flight: InFlight,
    query: Option<ReadJournal>,
    /// Close the pools of the stores this `Persistence` opened (none for stores of the caller).
    closers: Arc<[Closer]>,
    /// The SQL journal it opened, if any.
    opened: OpenedJournal,
    /// The journal actors [`on_this_arbiter`](Persistence::on_this_arbiter) started.
    arbiter_journals: Arc<ArbiterJournals>,
}

/// What [`Persistence::on_this_arbiter`] starts journal actors from, and the ones it started:
/// one per arbiter (thread), over the same store with the same settings.
struct ArbiterJournals {
    /// The thread of the arbiter the first journal actor runs on.
    home: std::thread::ThreadId,
    /// The first journal actor (on the `home` arbiter): every clone checks it in
    /// [`Persistence::health`], and gets it from [`Persistence::on_this_arbiter`] there, also a
    /// clone that another arbiter's call gave another journal actor.
    home_journal: Addr<JournalActor>,
    store: Arc<dyn JournalStore>,
    config: JournalConfig,
    store_name: &'static str,
    /// What the first journal actor and its persistent actors count their work in.
    home_in_flight: InFlight,
    started: std::sync::Mutex<Vec<ArbiterJournal>>,
}

/// A journal actor [`ArbiterJournals`] started, with the count of its arbiter's work: a count
/// of its own, so that writes on two arbiters do not update one shared counter (an atomic
/// that would move between the cores twice per persist).
struct ArbiterJournal {
    thread: std::thread::ThreadId,
    journal: Addr<JournalActor>,
    in_flight: InFlight,
}

impl ArbiterJournals {
    fn started(&self) -> std::sync::MutexGuard<'_, Vec<ArbiterJournal>> {
        self.started
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The journal actor of the current thread's arbiter and the count of its work: the
    /// first journal on its own arbiter, elsewhere one started on first use (or again after
    /// its arbiter stopped it).
    fn current(&self) -> (Addr<JournalActor>, InFlight) {
        let thread = std::thread::current().id();
        if thread == self.home {
            return (self.home_journal.clone(), self.home_in_flight.clone());
        }
        let mut started = self.started();
        started.retain(|started| started.journal.connected());
        if let Some(local) = started.iter().find(|started| started.thread == thread) {
            return (local.journal.clone(), local.in_flight.clone());
        }
        let in_flight = InFlight::new();
        let journal = start_journal(&self.store, &self.config, self.store_name, &in_flight);
        started.push(ArbiterJournal {
            thread,
            journal: journal.clone(),
            in_flight: in_flight.clone(),
        });
        (journal, in_flight)
    }

    /// The journal actors [`Persistence::health`] checks for a clone writing through `own`,
    /// each once: `own` and the first one, which must answer (they serve this app's actors,
    /// stopped or not), then every one started since whose arbiter still runs, which may stop
    /// meanwhile (`false`: its arbiter, and the actors it served, are stopping).
    fn to_check(&self, own: &Addr<JournalActor>) -> Vec<(Addr<JournalActor>, bool)> {
        let mut journals = vec![(own.clone(), true)];
        if self.home_journal != *own {
            journals.push((self.home_journal.clone(), true));
        }
        journals.extend(
            self.started()
                .iter()
                .map(|started| &started.journal)
                .filter(|journal| journal.connected() && *journal != own)
                .map(|journal| (journal.clone(), false)),
        );
        journals
    }

    /// The work counts of the first journal and of every arbiter's.
    fn in_flight(&self) -> Vec<InFlight> {
        let started = self.started();
        std::iter::once(self.home_in_flight.clone())
            .chain(started.iter().map(|started| started.in_flight.clone()))
            .collect()
    }
}

/// Starts a journal actor over `store` on the current arbiter, counting its work in
/// `in_flight`: the first one of a [`Persistence`], and each arbiter's own.
fn start_journal(
    store: &Arc<dyn JournalStore>,
    config: &JournalConfig,
    store_name: &'static str,
    in_flight: &InFlight,
) -> Addr<JournalActor> {
    JournalActor::new(Arc::clone(store), config.clone())
        .with_in_flight(in_flight.clone())
        .with_store_name(store_name)
        .start()
}

/// The SQL journal store a [`Persistence`] opened from its settings (none for the in-memory
/// journal or stores of the caller).
#[derive(Clone, Default)]
struct OpenedJournal {
    #[cfg(feature = "sqlite")]
    sqlite: Option<SqliteJournal>,
    #[cfg(feature = "postgres")]
    postgres: Option<PostgresJournal>,
}

/// Closes one store's connection pool.
type Closer = Box<dyn Fn() -> Pin<Box<dyn Future<Output = ()>>> + Send + Sync>;

fn closer<S: Clone + Send + Sync + 'static, F>(store: &S, close: fn(S) -> F) -> Closer
where
    F: Future<Output = ()> + 'static,
{
    let store = store.clone();
    Box::new(move || Box::pin(close(store.clone())))
}

impl std::fmt::Debug for Persistence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persistence")
            .field("plugin", &plugin_name(&self.settings.journal.plugin))
            .finish_non_exhaustive()
    }
}

/// What every `start*` checks before it opens or starts anything: a running Actix system, and
/// settings that keep their rules. Settings adjusted in code (the fields are public) may break
/// a rule the types cannot hold, such as a group count above its limit, which would start that
/// many actors.
fn check_can_start(settings: &Settings) -> Result<(), StartError> {
    if actix::System::try_current().is_none() {
        return Err(StartError::NoActixSystem);
    }
    Ok(settings.validate()?)
}

impl Persistence {
    /// Loads the settings (`reference.toml`, then the file named by `ACTIX_PERSISTENCE_CONFIG`,
    /// then `ACTIX_PERSISTENCE__*` environment variables), validates them, opens the
    /// configured store and starts the journal actor.
    ///
    /// # Errors
    /// [`StartError::Config`] naming every bad setting, its value and where it came from;
    /// [`StartError::NoActixSystem`] outside a running Actix system (`#[tokio::main]` instead
    /// of `#[actix::main]`); [`StartError::Store`] when the store cannot be opened.
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
    /// [`StartError::NoActixSystem`] outside a running Actix system (nothing is opened then);
    /// [`StartError::Config`] when settings adjusted in code break a rule
    /// ([`Settings::validate`]: more write-reply-ordering groups than their limit, say);
    /// [`StartError::Store`] when the store cannot be opened.
    pub async fn start_with(settings: Settings) -> Result<Self, StartError> {
        check_can_start(&settings)?;
        let stores = open_stores(&settings).await?;
        let store_name = settings.journal.plugin.as_str();
        let mut persistence = Self::launch(settings, stores.journal, stores.snapshots, store_name)
            .with_query_store(stores.query);
        persistence.closers = stores.closers.into();
        persistence.opened = stores.opened;
        Ok(persistence)
    }

    /// Shuts down gracefully: waits for every write, snapshot save and delete under way (also
    /// those started in the background by a snapshot policy), then closes the connection
    /// pools of the stores it opened. Call it after the last command was answered, before the
    /// process exits: a process that exits right after its last reply otherwise loses the
    /// snapshot saves and deletes still running, and a SQLite database is left with its
    /// `-wal` and `-shm` files.
    ///
    /// Waiting is bounded: every store call ends within its call timeout
    /// (`journal.circuit-breaker.call-timeout`, `snapshot-store.call-timeout`). Persistent
    /// actors may still run afterwards, but every write or read of theirs then fails. Stores
    /// given to [`start_with_stores`](Self::start_with_stores) are waited for, not closed.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> Result<(), actix_persistence::StartError> {
    /// let persistence = actix_persistence::Persistence::start().await?;
    /// // ... run the persistent actors ...
    /// persistence.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shutdown(&self) {
        // Until every count is zero in one pass (work on one arbiter may start work on
        // another only before the last command was answered, but checking costs nothing).
        loop {
            let counts = self.arbiter_journals.in_flight();
            for in_flight in &counts {
                in_flight.idle().await;
            }
            if counts.iter().all(|in_flight| in_flight.count() == 0) {
                break;
            }
        }
        for close in self.closers.iter() {
            close().await;
        }
        tracing::debug!("actix-persistence shut down");
    }

    /// Work under way now, what [`shutdown`](Self::shutdown) waits for: 0 exactly when no
    /// write, snapshot save or delete is under way. A count of holds, not of writes: a persist
    /// holds one at its persistent actor from its send until its reply is handled, and one
    /// more at the journal while a store call runs it (the journal's hold also covers writes
    /// sent to the journal actor directly), so one persist in flight reads 1 or 2.
    pub fn work_in_flight(&self) -> usize {
        self.arbiter_journals
            .in_flight()
            .iter()
            .map(InFlight::count)
            .sum()
    }

    /// Starts the journal actor over stores of the caller's (a third-party plugin, or the
    /// testkit's controlled store). The plugin settings are ignored; the others apply, checked
    /// as [`start_with`](Self::start_with) checks them.
    ///
    /// # Errors
    /// [`StartError::NoActixSystem`] outside a running Actix system; [`StartError::Config`]
    /// when settings adjusted in code break a rule ([`Settings::validate`]: e.g. more
    /// write-reply-ordering groups than `max-write-reply-ordering-groups`), before any actor
    /// starts.
    pub fn start_with_stores(
        settings: Settings,
        store: Arc<dyn JournalStore>,
        snapshots: Arc<dyn SnapshotStore>,
    ) -> Result<Self, StartError> {
        check_can_start(&settings)?;
        Ok(Self::launch(settings, store, snapshots, "custom"))
    }

    /// Whether the journal is ready to serve, for a readiness endpoint: its circuit breaker is
    /// closed and its store answers a read within `journal.circuit-breaker.call-timeout`.
    /// Nothing is written into the journal, and a failed check does not count against a closed
    /// breaker. Once an open breaker's reset timeout has passed, the check's read is the
    /// breaker's trial call (Akka's half-open state): a success closes the breaker, so a
    /// readiness probe that keeps traffic away while the journal is not ready cannot keep it
    /// open.
    ///
    /// # Errors
    /// [`Unhealthy::CircuitOpen`] while the breaker is open after repeated store failures;
    /// [`Unhealthy::StoreUnreachable`] when the store fails or does not answer the read.
    pub async fn health(&self) -> Result<(), Unhealthy> {
        // Every journal actor, whichever this clone writes through (a clone from
        // `on_this_arbiter` holds its arbiter's).
        for (journal, must_answer) in self.arbiter_journals.to_check(&self.journal) {
            match journal.send(CheckHealth).await {
                Ok(health) => health?,
                // Another arbiter's journal that stopped since it was listed: that arbiter
                // is stopping (an actix-web worker being replaced, say), with the actors it
                // served; no reason to report the app unready.
                Err(_) if !must_answer => {}
                Err(_) => {
                    return Err(Unhealthy::StoreUnreachable(
                        actix_persistence_core::JournalError::JournalStopped,
                    ))
                }
            }
        }
        Ok(())
    }

    /// This `Persistence` with a journal actor of the current arbiter's own, for apps that run
    /// persistent actors on several arbiters (one per core, as actix-web's workers): call it
    /// on each arbiter and make the actors' [`state`](Self::state) from what it returns. A
    /// persist then stays on its actor's thread instead of crossing to the journal's arbiter
    /// and back (the closed loop of `docs/benchmarks.md` on 2 arbiters: 1.4-1.6M persists/s
    /// against 0.9M on one; a shared journal on its own arbiter ran no faster than one).
    ///
    /// Each arbiter's journal actor (started on the first call there, and again if its arbiter
    /// was stopped and started anew) writes to the same store with the same settings: its own
    /// write-reply-ordering groups and circuit breaker, so the reply order of a group holds
    /// among the actors of one arbiter. Writes of one persistence id from two arbiters are
    /// kept apart by the store as those of two processes are (the owner epoch: the newest
    /// incarnation writes, an older one is fenced). [`health`](Self::health) checks every
    /// running journal actor (one of another arbiter that stops while asked is left out: its
    /// arbiter is stopping) and [`shutdown`](Self::shutdown) waits for their work (each arbiter
    /// counts its own, so persists on two arbiters share no counter). On the arbiter that
    /// started the `Persistence` it gives that arbiter's journal actor, the first one (also to
    /// a clone another arbiter's call gave its own); outside any arbiter it is a plain clone.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(persistence: actix_persistence::Persistence) {
    /// let workers: Vec<actix_persistence::actix::Arbiter> =
    ///     (0..2).map(|_| actix_persistence::actix::Arbiter::new()).collect();
    /// for worker in &workers {
    ///     let persistence = persistence.clone();
    ///     worker.spawn(async move {
    ///         let local = persistence.on_this_arbiter();
    ///         // Start this arbiter's persistent actors with `local.state(id)`.
    ///         # drop(local);
    ///     });
    /// }
    /// # }
    /// ```
    pub fn on_this_arbiter(&self) -> Self {
        let mut local = self.clone();
        if actix::Arbiter::try_current().is_some() {
            let (journal, in_flight) = self.arbiter_journals.current();
            local.journal = journal;
            local.in_flight = in_flight;
        }
        local
    }

    fn launch(
        settings: Settings,
        store: Arc<dyn JournalStore>,
        snapshots: Arc<dyn SnapshotStore>,
        store_name: &'static str,
    ) -> Self {
        let breaker = &settings.journal.circuit_breaker;
        let config = JournalConfig {
            write_reply_ordering_groups: settings.journal.write_reply_ordering_groups,
            call_timeout: breaker.call_timeout,
            circuit_breaker: CircuitBreakerConfig {
                max_failures: breaker.max_failures,
                reset_timeout: breaker.reset_timeout,
            },
        };
        let in_flight = InFlight::new();
        let journal = start_journal(&store, &config, store_name, &in_flight);
        let arbiter_journals = Arc::new(ArbiterJournals {
            home: std::thread::current().id(),
            home_journal: journal.clone(),
            store,
            config,
            store_name,
            home_in_flight: in_flight.clone(),
            started: std::sync::Mutex::default(),
        });
        let permits = RecoveryPermits::new(settings.journal.max_concurrent_recoveries.get());
        Persistence {
            settings: Arc::new(settings),
            journal,
            snapshots,
            permits,
            in_flight,
            query: None,
            closers: Arc::new([]),
            opened: OpenedJournal::default(),
            arbiter_journals,
        }
    }

    /// Answers [`query`](Self::query) from `store` (usually the journal store given to
    /// [`start_with_stores`](Self::start_with_stores)), with the `[query]` settings.
    pub fn with_query_store(mut self, store: Arc<dyn QueryStore>) -> Self {
        let settings = query_settings(&self.settings);
        self.query = Some(ReadJournal::from_arc(store, settings));
        self
    }

    /// The persistence queries over the journal (events by persistence id, by slices, by tag;
    /// persistence ids), configured by the `[query]` settings (as Akka's
    /// `PersistenceQuery(system).readJournalFor`).
    ///
    /// # Errors
    /// [`QueryError::Unsupported`] when the journal store was given with
    /// [`start_with_stores`](Self::start_with_stores) and no query store was added with
    /// [`with_query_store`](Self::with_query_store). The built-in stores always answer.
    pub fn query(&self) -> Result<ReadJournal, QueryError> {
        self.query.clone().ok_or(QueryError::Unsupported)
    }

    /// The validated settings in force.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The journal actor that [`state`](Self::state) gives the persistent actors: the one
    /// started with this `Persistence`, or the arbiter's own one of a `Persistence` returned by
    /// [`on_this_arbiter`](Self::on_this_arbiter).
    pub fn journal(&self) -> &Addr<JournalActor> {
        &self.journal
    }

    /// The snapshot store.
    pub fn snapshot_store(&self) -> &Arc<dyn SnapshotStore> {
        &self.snapshots
    }

    /// The SQLite journal store this `Persistence` opened (`journal.plugin = "sqlite"`), for a
    /// read side on the same database file: an exactly-once projection's offset store on its
    /// [`writer_pool`](SqliteJournal::writer_pool), so that the file keeps one writer (a second
    /// `SqliteJournal` on the file would be a second writer, waiting on the first for its
    /// locks), and the read model's tables in the same transactions. `None` for another
    /// plugin, or stores given to [`start_with_stores`](Self::start_with_stores).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// use actix_persistence::projection::SqliteOffsetStore;
    ///
    /// let persistence = actix_persistence::Persistence::start().await?;
    /// if let Some(journal) = persistence.sqlite_journal() {
    ///     let offsets = SqliteOffsetStore::new(journal.writer_pool().clone());
    ///     # let _ = offsets;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "sqlite")]
    pub fn sqlite_journal(&self) -> Option<&SqliteJournal> {
        self.opened.sqlite.as_ref()
    }

    /// The PostgreSQL journal store this `Persistence` opened (`journal.plugin = "postgres"`),
    /// for a read side on the same database: its [`pool`](PostgresJournal::pool) (with the
    /// configured schema on its search path) for an exactly-once projection's offset store and
    /// the read model's tables. `None` for another plugin, or stores given to
    /// [`start_with_stores`](Self::start_with_stores).
    #[cfg(feature = "postgres")]
    pub fn postgres_journal(&self) -> Option<&PostgresJournal> {
        self.opened.postgres.as_ref()
    }

    /// The persistence state of a new incarnation of `persistence_id`, for a persistent actor
    /// about to start: the journal, the snapshot store, the shared recovery permits
    /// (`journal.max-concurrent-recoveries`) and the recovery timeout
    /// (`journal.recovery-timeout`). Adjust it further with the `PersistenceState::with_*`
    /// methods.
    ///
    /// Name ids `"<EntityType>|<id>"` (`"Account|42"`, as Akka's `PersistenceId`) to read them
    /// by entity type: queries and projections by slices select the part before the first `|`
    /// (an id without `|` has the entity type `""`). Either part may be empty: `"Account|"` is
    /// an id of entity type `"Account"` (its entity id empty), `"|42"` one of entity type `""`,
    /// read with the ids that have no `|`; ids are compared byte for byte.
    ///
    /// # Errors
    /// [`InvalidPersistenceId`] for an empty id, one holding NUL, or one longer than
    /// [`limits::MAX_PERSISTENCE_ID_BYTES`](crate::limits::MAX_PERSISTENCE_ID_BYTES).
    pub fn state<A: EventSourced>(
        &self,
        persistence_id: impl Into<String>,
    ) -> Result<PersistenceState<A>, InvalidPersistenceId> {
        let state = PersistenceState::new(self.journal.clone(), persistence_id)?
            .with_snapshot_store(
                Arc::clone(&self.snapshots),
                self.settings.snapshot_store.call_timeout,
            )
            .with_recovery_permits(self.permits.clone())
            .with_recovery_timeout(self.settings.journal.recovery_timeout)
            .with_in_flight(self.in_flight.clone());
        Ok(state)
    }
}

fn plugin_name(plugin: &JournalPlugin) -> &'static str {
    plugin.as_str()
}

fn store_error(plugin: &'static str) -> impl FnOnce(SqlStoreError) -> StartError {
    move |e| StartError::Store {
        plugin,
        source: Box::new(e),
    }
}

/// The journal store and the snapshot store `settings` choose; a SQL snapshot store on the
/// journal's own database shares its connections.
async fn open_stores(settings: &Settings) -> Result<Stores, StartError> {
    let journal = settings.journal.plugin;
    let snapshots = settings.snapshot_store.plugin;
    match (journal, snapshots) {
        (JournalPlugin::InMemory, SnapshotStorePlugin::InMemory) => Ok(Stores::in_memory()),
        #[cfg(feature = "sqlite")]
        (JournalPlugin::Sqlite, SnapshotStorePlugin::Sqlite) => {
            let store = SqliteJournal::connect(&sqlite_options(settings))
                .await
                .map_err(store_error("sqlite"))?;
            let close = closer(&store, |s: SqliteJournal| async move { s.close().await });
            let snapshots = store.snapshot_store();
            let mut stores = Stores::new(store.clone(), snapshots).closing(close);
            stores.opened.sqlite = Some(store);
            Ok(stores)
        }
        #[cfg(feature = "postgres")]
        (JournalPlugin::Postgres, SnapshotStorePlugin::Postgres) => {
            let store = PostgresJournal::connect(&postgres_options(settings))
                .await
                .map_err(store_error("postgres"))?;
            let close = closer(&store, |s: PostgresJournal| async move { s.close().await });
            let snapshots = store.snapshot_store();
            let mut stores = Stores::new(store.clone(), snapshots).closing(close);
            stores.opened.postgres = Some(store);
            Ok(stores)
        }
        _ => {
            let mut closers = Vec::new();
            let mut opened = OpenedJournal::default();
            let (journal, query) = open_journal(settings, &mut closers, &mut opened).await?;
            let snapshots = open_snapshot_store(settings, &mut closers).await?;
            Ok(Stores {
                journal,
                query,
                snapshots,
                closers,
                opened,
            })
        }
    }
}

/// The journal store `settings` choose, also as the store its queries read; a SQL one is also
/// kept in `opened`.
async fn open_journal(
    settings: &Settings,
    closers: &mut Vec<Closer>,
    opened: &mut OpenedJournal,
) -> Result<JournalAndQuery, StartError> {
    match settings.journal.plugin {
        JournalPlugin::InMemory => Ok(shared(InMemoryJournal::new())),
        #[cfg(feature = "sqlite")]
        JournalPlugin::Sqlite => {
            let store = SqliteJournal::connect(&sqlite_options(settings))
                .await
                .map_err(store_error("sqlite"))?;
            closers.push(closer(
                &store,
                |s: SqliteJournal| async move { s.close().await },
            ));
            opened.sqlite = Some(store.clone());
            Ok(shared(store))
        }
        #[cfg(feature = "postgres")]
        JournalPlugin::Postgres => {
            let store = PostgresJournal::connect(&postgres_options(settings))
                .await
                .map_err(store_error("postgres"))?;
            closers.push(closer(&store, |s: PostgresJournal| async move {
                s.close().await
            }));
            opened.postgres = Some(store.clone());
            Ok(shared(store))
        }
        #[allow(unreachable_patterns)]
        other => Err(StartError::PluginNotCompiled {
            plugin: plugin_name(&other),
            feature: plugin_name(&other),
        }),
    }
}

type JournalAndQuery = (Arc<dyn JournalStore>, Arc<dyn QueryStore>);

fn shared<S: QueryStore>(store: S) -> JournalAndQuery {
    let store = Arc::new(store);
    (store.clone(), store)
}

async fn open_snapshot_store(
    settings: &Settings,
    closers: &mut Vec<Closer>,
) -> Result<Arc<dyn SnapshotStore>, StartError> {
    match settings.snapshot_store.plugin {
        SnapshotStorePlugin::InMemory => Ok(Arc::new(InMemorySnapshotStore::new())),
        #[cfg(feature = "sqlite")]
        SnapshotStorePlugin::Sqlite => {
            let store = SqliteSnapshotStore::connect(&sqlite_options(settings))
                .await
                .map_err(store_error("sqlite"))?;
            closers.push(closer(&store, |s: SqliteSnapshotStore| async move {
                s.close().await
            }));
            Ok(Arc::new(store))
        }
        #[cfg(feature = "postgres")]
        SnapshotStorePlugin::Postgres => {
            let store = PostgresSnapshotStore::connect(&postgres_options(settings))
                .await
                .map_err(store_error("postgres"))?;
            closers.push(closer(&store, |s: PostgresSnapshotStore| async move {
                s.close().await
            }));
            Ok(Arc::new(store))
        }
        #[allow(unreachable_patterns)]
        other => Err(StartError::PluginNotCompiled {
            plugin: other.as_str(),
            feature: other.as_str(),
        }),
    }
}

struct Stores {
    journal: Arc<dyn JournalStore>,
    query: Arc<dyn QueryStore>,
    snapshots: Arc<dyn SnapshotStore>,
    closers: Vec<Closer>,
    opened: OpenedJournal,
}

impl Stores {
    fn new(journal: impl QueryStore, snapshots: impl SnapshotStore) -> Self {
        let (journal, query) = shared(journal);
        Stores {
            journal,
            query,
            snapshots: Arc::new(snapshots),
            closers: Vec::new(),
            opened: OpenedJournal::default(),
        }
    }

    fn closing(mut self, close: Closer) -> Self {
        self.closers.push(close);
        self
    }

    fn in_memory() -> Self {
        Self::new(InMemoryJournal::new(), InMemorySnapshotStore::new())
    }
}

/// The `[query]` settings as the queries take them.
fn query_settings(settings: &Settings) -> QuerySettings {
    let query = &settings.query;
    QuerySettings {
        refresh_interval: query.refresh_interval,
        late_commit_window: query.late_commit_window,
        page_size: query.page_size.get(),
        read_ahead_pages: query.read_ahead_pages.get(),
    }
}

fn replay_batch_size(settings: &Settings) -> u32 {
    u32::try_from(settings.journal.replay_batch_size.get()).unwrap_or(u32::MAX)
}

#[cfg(feature = "sqlite")]
fn sqlite_options(settings: &Settings) -> SqliteJournalOptions {
    let sqlite = &settings.journal.sqlite;
    SqliteJournalOptions {
        url: sqlite.url.clone(),
        max_connections: sqlite.max_connections.get(),
        busy_timeout: sqlite.busy_timeout,
        replay_batch_size: replay_batch_size(settings),
        max_batch_size: settings.journal.max_batch_size.get(),
    }
}

#[cfg(feature = "postgres")]
fn postgres_options(settings: &Settings) -> PostgresJournalOptions {
    let postgres = &settings.journal.postgres;
    PostgresJournalOptions {
        // Already falls back to DATABASE_URL.
        url: postgres.url.clone(),
        max_connections: postgres.max_connections.get(),
        acquire_timeout: postgres.acquire_timeout,
        statement_timeout: postgres.statement_timeout,
        max_batch_size: settings.journal.max_batch_size.get(),
        replay_batch_size: replay_batch_size(settings),
        schema: postgres.schema.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `health` leaves out another arbiter's journal actor that stops while it is asked (its
    /// arbiter is stopping, with the actors it served: an actix-web worker being replaced),
    /// where it reported the app unready; the journals this clone's actors use must answer.
    #[actix_rt::test]
    async fn health_leaves_out_an_arbiters_journal_that_stops_while_asked() {
        use futures::StreamExt;

        let settings = Settings::loader()
            .env_vars(Vec::<(String, String)>::new())
            .load()
            .expect("settings");
        let persistence = Persistence::start_with_stores(
            settings,
            Arc::new(InMemoryJournal::new()),
            Arc::new(InMemorySnapshotStore::new()),
        )
        .expect("starts");
        // Another arbiter's journal actor, as `on_this_arbiter` lists it: its mailbox open
        // until the test drops it.
        let (sender, mut mailbox) = actix::dev::channel::channel::<JournalActor>(16);
        let elsewhere = std::thread::spawn(|| std::thread::current().id())
            .join()
            .expect("a thread");
        persistence.arbiter_journals.started().push(ArbiterJournal {
            thread: elsewhere,
            journal: Addr::new(sender),
            in_flight: InFlight::new(),
        });

        let check = {
            let persistence = persistence.clone();
            actix_rt::spawn(async move { persistence.health().await })
        };
        // The home journal answered; the other is asked, and its arbiter stops before it
        // answers (the request is dropped with its mailbox).
        let asked = mailbox
            .next()
            .await
            .expect("health asked the other journal");
        drop((asked, mailbox));
        let health = check.await.expect("the check ran");
        assert!(health.is_ok(), "{health:?}");
    }

    /// `fn main() -> Result<(), Box<dyn Error>>` prints `Error: {:?}`: the setting, the value
    /// and the source, readable, not `Config(ConfigError { problems: [ConfigProblem { .. }] })`.
    #[test]
    fn a_start_error_returned_from_main_prints_its_message() {
        let config = Settings::loader()
            .toml_str("app.toml", "[journal]\nplugin = \"postgress\"")
            .env_vars(Vec::<(String, String)>::new())
            .load()
            .unwrap_err();
        let error: Box<dyn std::error::Error> = Box::new(StartError::Config(config));
        let printed = format!("{error:?}");
        assert_eq!(
            printed,
            "invalid actix-persistence configuration:\n  journal.plugin = \"postgress\" (from \
             app.toml): must be one of \"sqlite\", \"postgres\", \"inmem\""
        );
        assert!(
            format!("{error:#?}").contains("ConfigProblem"),
            "{error:#?}"
        );

        let store: Box<dyn std::error::Error> = Box::new(StartError::Store {
            plugin: "sqlite",
            source: "unable to open database file".into(),
        });
        assert_eq!(
            format!("{store:?}"),
            "could not open the sqlite journal: unable to open database file"
        );
        assert_eq!(
            format!("{:?}", StartError::NoActixSystem),
            StartError::NoActixSystem.to_string()
        );
    }
}
