//! Offsets: where a query by slice or by tag stands, stored by a consumer to resume exactly
//! after the last element it handled.

use std::sync::Arc;

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

/// The persistence ids of a [`TimestampOffset`] with their last delivered event: a persistent
/// ordered map ([`imbl::OrdMap`]), so that a clone shares its entries and costs O(1) however
/// many it holds, and the ids are shared `Arc<str>`s (look one up with a `&str`), so that an
/// insert into a shared map copies no string. Build one with `collect()` or [`SeenMap::new`] and
/// [`insert`](imbl::OrdMap::insert); it serializes as a map (the JSON of a `BTreeMap`).
pub type SeenMap = imbl::OrdMap<Arc<str>, SeenEvent>;

/// The offset of queries by slice and by tag: a database timestamp up to which every event
/// has been delivered, and the persistence ids whose events at or after it were delivered.
///
/// Its size grows with the number of persistence ids that stored an event within the
/// late-commit window (`query.late-commit-window`) before the last element: one entry each.
/// Every envelope carries one; they share their entries ([`SeenMap`]), so an envelope costs
/// the same whether hundreds of ids wrote at one timestamp or one did (with a copied map, a
/// group-commit transaction of 500 ids made a catch-up 16x slower: docs/benchmarks.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimestampOffset {
    /// Database timestamp, microseconds since the Unix epoch: every event with an earlier
    /// timestamp was delivered (or was not visible within the late-commit window).
    pub timestamp: i64,
    /// Per persistence id, the highest sequence number delivered whose timestamp is at or
    /// after [`timestamp`](Self::timestamp). Events of these ids up to that sequence number are
    /// not delivered again.
    pub seen: SeenMap,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON of an offset stored by a release whose `seen` was a `BTreeMap` reads back,
    /// and writes the same: a map of id to seen event.
    #[test]
    fn a_timestamp_offset_keeps_its_json_shape() {
        let stored = r#"{"type":"timestamp","timestamp":17,"seen":{"A|1":{"seq_nr":3,"timestamp":17},"B|2":{"seq_nr":9,"timestamp":18}}}"#;
        let offset: Offset = serde_json::from_str(stored).expect("reads");
        let Offset::Timestamp(timestamp) = &offset else {
            panic!("a timestamp offset: {offset:?}");
        };
        assert_eq!(timestamp.timestamp, 17);
        assert_eq!(
            timestamp.seen.get("B|2"),
            Some(&SeenEvent {
                seq_nr: 9,
                timestamp: 18
            })
        );
        assert_eq!(serde_json::to_string(&offset).expect("writes"), stored);
    }
}
