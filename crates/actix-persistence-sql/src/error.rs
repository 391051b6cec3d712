//! Errors of the SQL stores.

/// Why a SQL store could not be opened, or why a stored row could not be read back.
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
    #[error("could not open the journal database at {url:?}: {source}; check the URL and that its directory exists and is writable")]
    Connect {
        /// The URL as given in the options.
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
    /// A stored row holds a value this crate never writes (a negative sequence number, tags
    /// that are not a JSON array of strings, ...): the table was changed outside the journal.
    #[error("journal row of persistence id {persistence_id:?} at sequence number {seq_nr} is corrupt: {reason}")]
    CorruptRow {
        /// The persistence id of the row.
        persistence_id: String,
        /// The sequence number of the row, as stored.
        seq_nr: i64,
        /// What is wrong with it.
        reason: String,
    },
}
