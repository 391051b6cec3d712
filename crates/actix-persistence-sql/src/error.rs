//! Errors of the SQL stores.

/// Why a SQL store could not be opened, or why a stored row could not be read back or a value
/// could not be stored.
///
/// Errors of individual journal operations reach callers as
/// [`JournalError`](actix_persistence_core::JournalError); this type is their source when the
/// store itself is at fault (for example [`SqlStoreError::CorruptRow`] inside
/// `JournalError::Storage`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqlStoreError {
    /// The database at `url` could not be opened: the URL does not parse, the file is missing
    /// and could not be created (for example its directory does not exist), or the server
    /// refused or did not answer; `failure` says which.
    #[error("could not open the journal database at {url}: {failure} ({source})")]
    Connect {
        /// The URL as given in the options, with any password replaced by `***`.
        url: String,
        /// What failed, with what to check.
        failure: ConnectFailure,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The embedded schema migrations failed, for example because the database was created by
    /// a newer version of this crate or its schema was changed by hand.
    #[error("could not migrate the journal schema: {source}")]
    Migrate {
        /// The migrator's error.
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    /// The database holds a table with the name of one of the journal's tables, yet no
    /// migration of the journal was ever applied to it: the table is the application's (or
    /// another library's, such as Akka's `snapshot` and `event_tag`), and the journal's
    /// migrations would take it for their own. Nothing was changed. Give the journal a database
    /// of its own, or on PostgreSQL a schema of its own (`PostgresJournalOptions::schema`, the
    /// setting `journal.postgres.schema`).
    #[error(
        "the journal's database already holds a table named {table:?} that actix-persistence did \
         not create (it has no record in {}): give the journal a database of its own, or on \
         PostgreSQL a schema of its own (journal.postgres.schema)",
        crate::MIGRATIONS_TABLE
    )]
    ForeignTable {
        /// The table's name.
        table: String,
    },
    /// Rows written by an earlier release could not be brought up to date after the schema
    /// migrations (the slices of migration 0003); the store was not opened. Retry: the work
    /// done so far is kept.
    #[error("could not bring rows of an earlier release up to date: {source}")]
    Upgrade {
        /// The journal's error.
        #[source]
        source: Box<actix_persistence_core::JournalError>,
    },
    /// The PostgreSQL database's encoding cannot hold every text the journal stores
    /// (persistence ids, manifests, tags, writer ids are any Unicode): a write of a character
    /// it has no equivalent for would fail, and stop its actor, long after startup. Nothing was
    /// changed. Create the journal's database with `ENCODING 'UTF8'` (`SQL_ASCII`, which stores
    /// the bytes as given, is accepted too).
    #[error(
        "the journal's database at {url} has encoding {encoding}, which cannot hold every \
         character of persistence ids, manifests and tags: create it with ENCODING 'UTF8'"
    )]
    DatabaseEncoding {
        /// The database URL, password hidden.
        url: String,
        /// The database's encoding (`server_encoding`), e.g. `LATIN1`.
        encoding: String,
    },
    /// An option holds a value the store cannot work with.
    #[error("journal store option `{option}` = {value} is invalid: {reason}")]
    InvalidOption {
        /// The option's field name.
        option: &'static str,
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A stored row (of the journal or the snapshot table) holds a value this crate never
    /// writes (a negative sequence number, tags that are not a JSON array of strings, ...): the
    /// table was changed outside the store.
    #[error("stored row of persistence id {persistence_id:?} at sequence number {seq_nr} is corrupt: {reason}")]
    CorruptRow {
        /// The persistence id of the row.
        persistence_id: String,
        /// The sequence number of the row, as stored.
        seq_nr: i64,
        /// What is wrong with it.
        reason: String,
    },
    /// The task reading a replay's next page ahead (see `replay_messages` of the SQL journals)
    /// ended without its page: it panicked, or the runtime it ran on shut down. The replay
    /// ends with this error; recovery fails and can be retried.
    #[error("the replay's read-ahead of its next page did not finish: {reason}")]
    ReplayTask {
        /// Why the task ended (Tokio's join error).
        reason: String,
    },
    /// A snapshot holds a value the database cannot store: a sequence number above `i64::MAX`,
    /// or a NUL character in its persistence id or manifest (refused by every store alike,
    /// as PostgreSQL text cannot hold it). Nothing was stored.
    #[error("snapshot of persistence id {persistence_id:?} at sequence number {seq_nr} cannot be stored: {reason}")]
    Unstorable {
        /// The persistence id of the snapshot.
        persistence_id: String,
        /// Its sequence number.
        seq_nr: u64,
        /// What the database cannot store.
        reason: String,
    },
    /// The journal's writer task is gone, so no write can be stored: the Tokio runtime that
    /// opened the journal has shut down (or the task panicked). Open the journal again from a
    /// running runtime.
    #[error("the journal's writer task has stopped (its Tokio runtime shut down or it panicked); open the journal again")]
    WriterStopped,
}

/// Why a connection to the database failed, in the words of what to check.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectFailure {
    /// Nothing listens at the host and port (or Unix socket) of the URL.
    Refused,
    /// The host name does not resolve, or the host cannot be reached.
    HostUnreachable,
    /// The server refused the user: wrong password, unknown role, or `pg_hba.conf` rules.
    Authentication,
    /// The server runs, but the database the URL names does not exist.
    UnknownDatabase,
    /// No answer within the acquire timeout (a firewall dropping packets, an overloaded
    /// server).
    NoAnswer {
        /// The timeout that expired, in milliseconds.
        timeout_ms: u64,
    },
    /// The server runs and the database exists, but it takes no connection now: the database
    /// does not allow connections (`ALLOW_CONNECTIONS false`, maintenance), the server is
    /// starting up, shutting down or in recovery, or it has no connection slot left.
    Unavailable,
    /// The URL does not parse.
    InvalidUrl,
    /// TLS could not be negotiated.
    Tls,
    /// SQLite: the directory of the database file does not exist (SQLite creates the file,
    /// not its directory).
    NoDirectory {
        /// The directory, as an absolute path.
        directory: std::path::PathBuf,
    },
    /// Anything else (for SQLite: the file cannot be opened or created).
    Other,
}

impl std::fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectFailure::Refused => f.write_str(
                "connection refused: is the server running and listening at that host and port?",
            ),
            ConnectFailure::HostUnreachable => {
                f.write_str("host unreachable: check the host name and the network")
            }
            ConnectFailure::Authentication => f.write_str(
                "authentication failed: check the user and password (and the server's pg_hba.conf)",
            ),
            ConnectFailure::UnknownDatabase => {
                f.write_str("the database does not exist: create it, or fix its name in the URL")
            }
            ConnectFailure::NoAnswer { timeout_ms } => write!(
                f,
                "no answer within {timeout_ms} ms: check the host, port and firewall"
            ),
            ConnectFailure::Unavailable => f.write_str(
                "the server takes no connection to this database now (connections not allowed, \
                 starting up, shutting down, or no connection slot left): retry later, or check \
                 the database's settings and the server's max_connections",
            ),
            ConnectFailure::InvalidUrl => f.write_str("the URL does not parse"),
            ConnectFailure::Tls => {
                f.write_str("TLS negotiation failed: check sslmode and certificates")
            }
            ConnectFailure::NoDirectory { directory } => write!(
                f,
                "the directory {} does not exist: create it, or fix the path in the URL",
                directory.display()
            ),
            ConnectFailure::Other => {
                f.write_str("check the URL (SQLite: that its directory exists and is writable)")
            }
        }
    }
}

impl ConnectFailure {
    /// Classifies a driver error of a connection attempt.
    pub fn of(error: &sqlx::Error) -> Self {
        match error {
            sqlx::Error::Configuration(_) => ConnectFailure::InvalidUrl,
            sqlx::Error::Tls(_) => ConnectFailure::Tls,
            sqlx::Error::Io(io) => match io.kind() {
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound => {
                    ConnectFailure::Refused
                }
                std::io::ErrorKind::TimedOut => ConnectFailure::NoAnswer { timeout_ms: 0 },
                // Name resolution, no route to the host, network down.
                _ => ConnectFailure::HostUnreachable,
            },
            sqlx::Error::Database(db) => match db.code().as_deref() {
                // invalid_password, invalid_authorization_specification
                Some("28P01") | Some("28000") => ConnectFailure::Authentication,
                // invalid_catalog_name
                Some("3D000") => ConnectFailure::UnknownDatabase,
                // object_not_in_prerequisite_state (at connect: the database does not allow
                // connections), cannot_connect_now (starting up, shutting down, recovery),
                // too_many_connections
                Some("55000") | Some("57P03") | Some("53300") => ConnectFailure::Unavailable,
                _ => ConnectFailure::Other,
            },
            _ => ConnectFailure::Other,
        }
    }
}

impl SqlStoreError {
    /// A [`SqlStoreError::Connect`] for `url` (password already hidden), classified.
    pub(crate) fn connect(url: String, source: sqlx::Error) -> Self {
        SqlStoreError::Connect {
            url,
            failure: ConnectFailure::of(&source),
            source,
        }
    }
}
