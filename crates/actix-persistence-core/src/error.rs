//! Errors shared by stores, the journal actor and persistent actors.

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

/// A shareable, thread-safe source error (cheap to clone into every write of a failed batch).
pub type BoxError = Arc<dyn StdError + Send + Sync + 'static>;

/// A failure of the journal: the store could not complete an operation, or the journal could
/// not get an answer from it.
///
/// A failed write means the events *may or may not* be stored (as Akka's `WriteMessageFailure`);
/// a persistent actor that sees one stops, and its next incarnation recovers what is really
/// stored.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// Another writer already stored this sequence number for this persistence id. The write
    /// was refused and nothing was overwritten. Usually two live incarnations of one persistence
    /// id: make sure only one runs at a time (e.g. with cluster sharding).
    #[error(
        "persistence id {persistence_id:?} already holds sequence number {seq_nr}: \
         another writer stored it first"
    )]
    ConcurrentWrite {
        /// The persistence id written to.
        persistence_id: String,
        /// The sequence number that was already taken.
        seq_nr: u64,
    },
    /// A newer incarnation of this persistence id took ownership of it (its recovery raised
    /// the id's owner epoch above this writer's fencing token): the write or delete was
    /// refused, and nothing of it was stored or deleted. The incarnation is stale and must
    /// stop; the newer one (in this process or another one sharing the database) owns the id.
    /// Not a store failure.
    #[error(
        "persistence id {persistence_id:?} is owned by a newer incarnation (this writer's \
         fencing token {fencing_token} is older): nothing was stored or deleted; stop this \
         incarnation, route the id to one node at a time"
    )]
    Fenced {
        /// The persistence id written to.
        persistence_id: String,
        /// The stale writer's fencing token.
        fencing_token: u64,
    },
    /// The store failed (connection lost, disk full, constraint other than a concurrent write).
    #[error("journal store failed during {operation}: {source}")]
    Storage {
        /// What the store was doing, e.g. `"write"`, `"replay"`.
        operation: &'static str,
        /// The store's own error.
        #[source]
        source: BoxError,
    },
    /// The store gave no answer within the journal's call timeout.
    #[error("journal store did not answer {operation} within {} ms", timeout.as_millis())]
    Timeout {
        /// What the journal was waiting for.
        operation: &'static str,
        /// The call timeout that expired.
        timeout: Duration,
    },
    /// The store returned a number of results different from the number of atomic writes it
    /// was given. The journal fails the whole batch rather than guess which result is whose.
    #[error("journal store returned {actual} results for {expected} atomic writes")]
    ResultCountMismatch {
        /// Number of atomic writes in the batch.
        expected: usize,
        /// Number of results the store returned.
        actual: usize,
    },
    /// The journal's circuit breaker is open after repeated store failures: the call was not
    /// attempted. Retry after `retry_in`.
    #[error("journal circuit breaker is open after repeated failures; retry in {} ms", retry_in.as_millis())]
    CircuitOpen {
        /// Time until a trial call is allowed.
        retry_in: Duration,
    },
    /// The journal actor stopped (or its reply was lost) before the operation was answered.
    #[error("the journal actor stopped before it answered")]
    JournalStopped,
    /// An earlier atomic write of the same writer (persistence id, fencing token and writer
    /// id: one persistent actor incarnation) in the same batch failed, so this one was not attempted and nothing of it was stored: stored, its events would follow a
    /// hole (the failed write's sequence numbers) that recovery cannot tell from a rejected
    /// write's gap, and every later recovery would replay them without the earlier events. Not
    /// a store failure by itself (the earlier write's failure is what counts).
    #[error(
        "write of persistence id {persistence_id:?} at sequence number {seq_nr} not attempted: \
         an earlier write of that persistence id in the same batch failed"
    )]
    EarlierWriteFailed {
        /// The persistence id of the write that was not attempted.
        persistence_id: String,
        /// The sequence number of its first event.
        seq_nr: u64,
    },
}

impl JournalError {
    /// Whether this error is a failure of the store itself (unreachable, timed out, failed
    /// commit, broken answer), which the circuit breaker counts; `false` for a refusal of one
    /// write that leaves the store healthy ([`JournalError::ConcurrentWrite`],
    /// [`JournalError::Fenced`], [`JournalError::EarlierWriteFailed`]).
    pub fn is_store_failure(&self) -> bool {
        !matches!(
            self,
            JournalError::ConcurrentWrite { .. }
                | JournalError::Fenced { .. }
                | JournalError::EarlierWriteFailed { .. }
        )
    }

    /// Wraps a store's own error as [`JournalError::Storage`].
    pub fn storage<E>(operation: &'static str, source: E) -> Self
    where
        E: StdError + Send + Sync + 'static,
    {
        JournalError::Storage {
            operation,
            source: Arc::new(source),
        }
    }
}

/// Why an atomic write was rejected: it was never stored, and the journal is healthy (as Akka's
/// `WriteMessageRejected`). The persistent actor is told and goes on.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "write of persistence id {persistence_id:?} at sequence number {seq_nr} rejected: {reason}"
)]
pub struct WriteRejection {
    /// The persistence id of the rejected write.
    pub persistence_id: String,
    /// The sequence number of the event that could not be serialized (or whose
    /// `EventSourced::tags` panicked) when that is why the write was rejected; otherwise (over
    /// the limits, refused by the store) the sequence number of the first event of the rejected
    /// atomic write. Either way the whole atomic write was rejected.
    pub seq_nr: u64,
    /// What was wrong with it, e.g. "event could not be serialized: ...".
    pub reason: String,
}

/// Why one atomic write did not succeed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AtomicWriteError {
    /// The write was refused before it was stored (bad payload); the actor continues.
    #[error(transparent)]
    Rejected(#[from] WriteRejection),
    /// The store failed; the events may or may not be stored; the actor stops.
    #[error(transparent)]
    Failed(#[from] JournalError),
}

/// A persistence id that no journal can store.
///
/// `Display` and `Debug` show at most the first 64 characters of an id that
/// is too long (the message of a 100,000-byte id is one line, not 100,000 bytes); the field
/// holds the whole id.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPersistenceId {
    /// The empty string.
    #[error("a persistence id must not be empty")]
    Empty,
    /// It holds a NUL character, which PostgreSQL text cannot store.
    #[error("persistence id {0:?} holds a NUL character")]
    HoldsNul(String),
    /// It is longer than every store can index ([`crate::limits::MAX_PERSISTENCE_ID_BYTES`]).
    #[error(
        "persistence id {} is {bytes} bytes long, above the limit of {max} bytes",
        Shortened(persistence_id)
    )]
    TooLong {
        /// The id.
        persistence_id: String,
        /// Its length in bytes of UTF-8.
        bytes: usize,
        /// The limit.
        max: usize,
    },
}

/// How many characters of an over-long persistence id [`InvalidPersistenceId`] shows.
const SHOWN_ID_CHARS: usize = 64;

/// An id as `{:?}` writes it, cut after [`SHOWN_ID_CHARS`] characters (then `"..."` and how
/// many more characters there are).
struct Shortened<'a>(&'a str);

impl std::fmt::Display for Shortened<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.char_indices().nth(SHOWN_ID_CHARS) {
            None => write!(f, "{:?}", self.0),
            Some((cut, _)) => {
                let more = self.0[cut..].chars().count();
                write!(f, "{:?}... ({more} more characters)", &self.0[..cut])
            }
        }
    }
}

impl std::fmt::Debug for InvalidPersistenceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InvalidPersistenceId::Empty => f.write_str("Empty"),
            InvalidPersistenceId::HoldsNul(id) => f.debug_tuple("HoldsNul").field(id).finish(),
            InvalidPersistenceId::TooLong {
                persistence_id,
                bytes,
                max,
            } => f
                .debug_struct("TooLong")
                .field(
                    "persistence_id",
                    &format_args!("{}", Shortened(persistence_id)),
                )
                .field("bytes", bytes)
                .field("max", max)
                .finish(),
        }
    }
}

/// Checks that `persistence_id` can be stored byte-exact by every journal.
///
/// Any non-empty UTF-8 string of at most [`crate::limits::MAX_PERSISTENCE_ID_BYTES`] bytes
/// without NUL is valid, including `/`, `\`, quotes and non-ASCII; ids are compared byte for
/// byte (case matters).
///
/// # Errors
/// [`InvalidPersistenceId`] for the empty string, a string over the length limit or a string
/// holding `\0`.
pub fn validate_persistence_id(persistence_id: &str) -> Result<(), InvalidPersistenceId> {
    let max = crate::limits::MAX_PERSISTENCE_ID_BYTES;
    if persistence_id.is_empty() {
        Err(InvalidPersistenceId::Empty)
    } else if persistence_id.len() > max {
        Err(InvalidPersistenceId::TooLong {
            persistence_id: persistence_id.to_owned(),
            bytes: persistence_id.len(),
            max,
        })
    } else if persistence_id.contains('\0') {
        Err(InvalidPersistenceId::HoldsNul(persistence_id.to_owned()))
    } else {
        Ok(())
    }
}

/// The message of a caught panic: the `&str` or `String` that `panic!` gave, or a placeholder
/// for any other payload. The library reports user code (and store code) that panicked with it.
///
/// # Examples
/// ```
/// use actix_persistence_core::error::panic_message;
///
/// let payload = std::panic::catch_unwind(|| panic!("boom {}", 1)).unwrap_err();
/// assert_eq!(panic_message(&*payload), "boom 1");
/// ```
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "a panic with a payload that is not a string".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_over_long_persistence_id_is_shown_cut() {
        let id = "x".repeat(100_000);
        let err = validate_persistence_id(&id).unwrap_err();
        for shown in [err.to_string(), format!("{err:?}")] {
            assert!(shown.len() < 300, "{} bytes: {shown:.300}", shown.len());
            assert!(shown.contains(&"x".repeat(SHOWN_ID_CHARS)), "{shown}");
            assert!(shown.contains("99936 more characters"), "{shown}");
        }
        assert!(err
            .to_string()
            .ends_with("is 100000 bytes long, above the limit of 255 bytes"));
        // Not cut when short; multi-byte characters are cut at a character boundary.
        assert_eq!(Shortened("Account|1").to_string(), "\"Account|1\"");
        let accented = "é".repeat(200);
        assert!(Shortened(&accented)
            .to_string()
            .contains("136 more characters"));
        match err {
            InvalidPersistenceId::TooLong { persistence_id, .. } => assert_eq!(persistence_id, id),
            other => panic!("expected TooLong, got {other:?}"),
        }
    }
}
