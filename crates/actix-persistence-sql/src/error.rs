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
    /// and could not be created (for example its directory does not exist), or the database
    /// refused the connection.
    #[error("could not open the journal database at {url:?}: {source}; check the URL (SQLite: that its directory exists and is writable; PostgreSQL: that the server is reachable, the database exists and the user may log in)")]
    Connect {
        /// The URL as given in the options, with any password replaced by `***`.
        url: String,
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
    /// Rows written by an earlier release could not be brought up to date after the schema
    /// migrations (the slices of migration 0003); the store was not opened. Retry: the work
    /// done so far is kept.
    #[error("could not bring rows of an earlier release up to date: {source}")]
    Upgrade {
        /// The journal's error.
        #[source]
        source: Box<actix_persistence_core::JournalError>,
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
    /// A snapshot holds a value the database cannot store: a sequence number above `i64::MAX`,
    /// or (PostgreSQL) a NUL character in a text column. Nothing was stored.
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
