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

/// The persistence ids of a [`TimestampOffset`] with their last delivered event.
///
/// An ordered map that is persistent: a clone shares its entries and costs O(1) however many
/// it holds, and an insert into a shared map copies O(log n) small tree nodes, not the map (a
/// red-black tree of [`rpds`]); the ids are shared `Arc<str>`s, so an insert copies no string.
/// Every envelope of a query carries a clone, so this is the per-event cost of an offset: an
/// insert and a clone took about 225 ns with 10 entries and 670 ns with 500, against 470 ns and
/// 1,020 ns for `imbl::OrdMap` (whose nodes hold 64 entries, each copied per insert) and 5.8 µs
/// for a copied vector of 500 (docs/benchmarks.md, issue 8).
///
/// It serializes as a map of id to [`SeenEvent`], the JSON of a `BTreeMap`.
///
/// # Examples
/// ```
/// use actix_persistence_core::query::{SeenEvent, SeenMap};
///
/// let mut seen = SeenMap::new();
/// seen.insert("Account|42".into(), SeenEvent { seq_nr: 7, timestamp: 1_700_000_000_000_000 });
/// let earlier = seen.clone();
/// seen.insert("Account|43".into(), SeenEvent { seq_nr: 1, timestamp: 1_700_000_000_000_000 });
/// assert_eq!(earlier.len(), 1);
/// assert_eq!(seen.get("Account|42").map(|seen| seen.seq_nr), Some(7));
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SeenMap(rpds::RedBlackTreeMapSync<Arc<str>, SeenEvent>);

impl SeenMap {
    /// An empty map.
    pub fn new() -> Self {
        SeenMap(rpds::RedBlackTreeMap::new_sync())
    }

    /// The last delivered event of `persistence_id`, if it has one here.
    pub fn get(&self, persistence_id: &str) -> Option<&SeenEvent> {
        self.0.get(persistence_id)
    }

    /// Sets the last delivered event of `persistence_id`.
    pub fn insert(&mut self, persistence_id: Arc<str>, seen: SeenEvent) {
        self.0.insert_mut(persistence_id, seen);
    }

    /// Sets the last delivered event of `persistence_id`, reusing the entry's `Arc` when it has
    /// one already, else the event's (no allocation either way).
    pub(crate) fn update(&mut self, persistence_id: &Arc<str>, seen: SeenEvent) {
        let id = match self.0.get_key_value(&**persistence_id) {
            Some((id, _)) => Arc::clone(id),
            None => Arc::clone(persistence_id),
        };
        self.0.insert_mut(id, seen);
    }

    /// Forgets `persistence_id`; whether it was here.
    pub fn remove(&mut self, persistence_id: &str) -> bool {
        self.0.remove_mut(persistence_id)
    }

    /// The entries in persistence id order (bytewise).
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &SeenEvent)> {
        self.0.iter()
    }

    /// How many persistence ids it holds.
    pub fn len(&self) -> usize {
        self.0.size()
    }

    /// Whether it holds no persistence id.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for SeenMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Into<Arc<str>>> FromIterator<(K, SeenEvent)> for SeenMap {
    fn from_iter<I: IntoIterator<Item = (K, SeenEvent)>>(entries: I) -> Self {
        let mut map = SeenMap::new();
        for (persistence_id, seen) in entries {
            map.insert(persistence_id.into(), seen);
        }
        map
    }
}

impl Serialize for SeenMap {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for SeenMap {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let entries = std::collections::BTreeMap::<Arc<str>, SeenEvent>::deserialize(deserializer)?;
        Ok(entries.into_iter().collect())
    }
}

/// The offset of queries by slice and by tag: a database timestamp up to which every event
/// has been delivered, and the persistence ids whose events at or after it were delivered.
///
/// Its size grows with the number of persistence ids that stored an event within the
/// late-commit window (`query.late-commit-window`) before the last element: one entry each.
/// Every envelope carries one; they share their entries ([`SeenMap`]), so an envelope costs
/// about the same whether hundreds of ids wrote at one timestamp or one did (with a copied map,
/// a group-commit transaction of 500 ids made a catch-up 16x slower: docs/benchmarks.md).
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
