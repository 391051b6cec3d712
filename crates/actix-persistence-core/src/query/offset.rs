//! Offsets: where a query by slice or by tag stands, stored by a consumer to resume exactly
//! after the last element it handled.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A position in a query's results. Every [`EventEnvelope`](super::EventEnvelope) carries the
/// offset just after itself: store it (it is serde-serializable, e.g. as JSON) and hand it back
/// to the same query to resume with the next element, never repeating or skipping one.
///
/// # Examples
/// ```
/// use actix_persistence_core::query::Offset;
///
/// let stored = serde_json::to_string(&Offset::NoOffset).unwrap();
/// assert_eq!(serde_json::from_str::<Offset>(&stored).unwrap(), Offset::NoOffset);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Offset {
    /// The beginning: every event.
    #[default]
    NoOffset,
    /// After this sequence number, in queries by persistence id.
    Sequence {
        /// The last sequence number delivered.
        seq_nr: u64,
    },
    /// After a database timestamp, in queries by slice and by tag (as Akka r2dbc's
    /// `TimestampOffset`).
    Timestamp(TimestampOffset),
}

/// The offset of queries by slice and by tag: a database timestamp up to which every event
/// has been delivered, and the persistence ids whose events at or after it were delivered.
///
/// Its size grows with the number of persistence ids that stored an event within the
/// late-commit window (`query.late-commit-window`) before the last element: one entry each.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimestampOffset {
    /// Database timestamp, microseconds since the Unix epoch: every event with an earlier
    /// timestamp was delivered (or was not visible within the late-commit window).
    pub timestamp: i64,
    /// Per persistence id, the highest sequence number delivered whose timestamp is at or
    /// after [`timestamp`](Self::timestamp). Events of these ids up to that sequence number are
    /// not delivered again.
    pub seen: BTreeMap<String, SeenEvent>,
}

/// The last event of one persistence id delivered at or after a [`TimestampOffset`]'s
/// timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenEvent {
    /// Its sequence number.
    pub seq_nr: u64,
    /// Its database timestamp, microseconds since the Unix epoch.
    pub timestamp: i64,
}

impl Offset {
    /// The offset of a [`TimestampOffset`].
    pub fn timestamp(offset: TimestampOffset) -> Self {
        Offset::Timestamp(offset)
    }

    /// A short name of the variant, for messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Offset::NoOffset => "no offset",
            Offset::Sequence { .. } => "a sequence offset",
            Offset::Timestamp(_) => "a timestamp offset",
        }
    }
}
