//! Offsets: where a query by slice or by tag stands, stored by a consumer to resume exactly
//! after the last element it handled.

use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

/// A position in a query's results. Every [`EventEnvelope`](super::EventEnvelope) carries the
/// offset just after itself: store it (it is serde-serializable, e.g. as JSON) and hand it back
/// to the same query to resume with the next element, never repeating or skipping one.
///
/// # Examples
/// ```
/// # use actix_persistence_core as actix_persistence; // the paths of the facade, `actix-persistence`
/// use actix_persistence::query::Offset;
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

/// One entry of a [`SeenMap`]: a persistence id and its last delivered event.
type SeenEntry = (Arc<str>, SeenEvent);

/// The persistence ids of a [`TimestampOffset`] with their last delivered event.
///
/// A map whose clone costs O(1) however many entries it holds, so that every envelope of a
/// query can carry its own offset. It is a view of a shared, append-only log of inserts (a
/// [`boxcar::Vec`]): a clone shares the log and remembers how many of its entries it sees, and
/// an insert into the clone that sees the whole log appends one entry (an insert into any other
/// clone copies the entries it sees into a log of its own first, so clones never see each
/// other's inserts). Entries whose timestamp is below the map's floor
/// ([`forget_below`](Self::forget_below)) are not part of it: forgetting costs O(1), and the log is
/// compacted when forgotten or replaced entries make up most of it.
///
/// Reading it ([`get`](Self::get), [`iter`](Self::iter), [`len`](Self::len), comparing,
/// serializing) sorts its entries once per clone (O(n log n), then O(log n) per look-up): that
/// is what a consumer does with the offset it stores, once per batch, while a query inserts and
/// clones once per envelope. Per envelope this took about 40 ns with 10 or with 500 ids, against
/// 225 ns and 670 ns for the persistent red-black tree of `rpds` it replaces
/// (docs/benchmarks.md, issue 8).
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
pub struct SeenMap {
    /// Every insert, in order; shared by the clones.
    log: Arc<boxcar::Vec<SeenEntry>>,
    /// How many entries of `log` this map sees.
    len: usize,
    /// Entries with a lower timestamp are forgotten.
    floor: i64,
    /// The entries this map sees, by persistence id (the last insert of each, at or above
    /// `floor`), sorted on the first read.
    sorted: OnceLock<Box<[SeenEntry]>>,
}

impl SeenMap {
    /// An empty map.
    pub fn new() -> Self {
        SeenMap::from_log(Arc::new(boxcar::Vec::new()), 0, i64::MIN)
    }

    fn from_log(log: Arc<boxcar::Vec<SeenEntry>>, len: usize, floor: i64) -> Self {
        SeenMap {
            log,
            len,
            floor,
            sorted: OnceLock::new(),
        }
    }

    /// The entries this map sees, sorted by persistence id.
    fn sorted(&self) -> &[SeenEntry] {
        self.sorted.get_or_init(|| {
            let mut entries: Vec<SeenEntry> = self.live_entries().into_iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            entries.into_boxed_slice()
        })
    }

    /// The last delivered event of `persistence_id`, if it has one here.
    pub fn get(&self, persistence_id: &str) -> Option<&SeenEvent> {
        let sorted = self.sorted();
        sorted
            .binary_search_by(|(id, _)| (**id).cmp(persistence_id))
            .ok()
            .map(|i| &sorted[i].1)
    }

    /// Sets the last delivered event of `persistence_id`. O(1) on the map a query keeps
    /// inserting into; on an older clone, O(n) (it copies what it sees first).
    pub fn insert(&mut self, persistence_id: Arc<str>, seen: SeenEvent) {
        self.sorted = OnceLock::new();
        let index = self.log.push((Arc::clone(&persistence_id), seen));
        if index == self.len {
            self.len += 1;
            return;
        }
        // Another clone appended since this one: copy what this one sees, then insert.
        let log = self.live_entries();
        log.push((persistence_id, seen));
        self.len = log.count();
        self.log = Arc::new(log);
    }

    /// The entries this map sees (the last insert of each id, at or above the floor), in a new
    /// log, in no particular order.
    fn live_entries(&self) -> boxcar::Vec<SeenEntry> {
        // The last insert of each id wins: read in insert order.
        let mut last = std::collections::HashMap::with_capacity(self.len);
        for (id, seen) in (0..self.len).filter_map(|i| self.log.get(i)) {
            last.insert(id, *seen);
        }
        last.into_iter()
            .filter(|(_, seen)| seen.timestamp >= self.floor)
            .map(|(id, seen)| (Arc::clone(id), seen))
            .collect()
    }

    /// Forgets `persistence_id`; whether it was here. O(n).
    pub fn remove(&mut self, persistence_id: &str) -> bool {
        if self.get(persistence_id).is_none() {
            return false;
        }
        let log: boxcar::Vec<_> = self
            .live_entries()
            .into_iter()
            .filter(|(id, _)| **id != *persistence_id)
            .collect();
        self.len = log.count();
        self.log = Arc::new(log);
        self.sorted = OnceLock::new();
        true
    }

    /// Forgets every entry with a timestamp below `floor`, in O(1).
    pub fn forget_below(&mut self, floor: i64) {
        if floor > self.floor {
            self.floor = floor;
            self.sorted = OnceLock::new();
        }
    }

    /// The floor: entries with a lower timestamp are forgotten (`i64::MIN`: none).
    pub(crate) fn floor(&self) -> i64 {
        self.floor
    }

    /// Starts a new log holding only `live`, the entries this map sees (the caller keeps them
    /// beside it: the query's own look-up map), when the log holds more than
    /// `2 * live.len() + 64` entries, so that forgotten and replaced entries cost amortized O(1)
    /// per insert. Whether it did. Built from the caller's entries, a compaction costs O(live),
    /// not O(log): rebuilding from the log (a hash map of the last insert of each id) cost a
    /// catch-up 370 instructions per event where one id's events come in runs (many inserts,
    /// few live entries; callgrind, docs/benchmarks.md).
    pub(crate) fn compact_from<'a, I>(&mut self, live: I) -> bool
    where
        I: ExactSizeIterator<Item = (&'a Arc<str>, &'a SeenEvent)>,
    {
        if self.len <= live.len().saturating_mul(2).saturating_add(64) {
            return false;
        }
        let log: boxcar::Vec<SeenEntry> = live.map(|(id, seen)| (Arc::clone(id), *seen)).collect();
        debug_assert!(
            {
                let mut rebuilt: Vec<_> = log.iter().map(|(_, entry)| entry.clone()).collect();
                rebuilt.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                rebuilt.as_slice() == self.sorted()
            },
            "compact_from: the entries given are not the ones this map sees"
        );
        self.len = log.count();
        self.log = Arc::new(log);
        true
    }

    /// How many entries the log holds that this map sees, forgotten and replaced ones included.
    pub(crate) fn log_len(&self) -> usize {
        self.len
    }

    /// The entries in persistence id order (bytewise).
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &SeenEvent)> {
        self.sorted().iter().map(|(id, seen)| (id, seen))
    }

    /// How many persistence ids it holds.
    pub fn len(&self) -> usize {
        self.sorted().len()
    }

    /// Whether it holds no persistence id.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for SeenMap {
    fn default() -> Self {
        SeenMap::new()
    }
}

impl Clone for SeenMap {
    /// O(1): the clone shares the log (its sorted entries are built again when it is read).
    fn clone(&self) -> Self {
        SeenMap::from_log(Arc::clone(&self.log), self.len, self.floor)
    }
}

impl PartialEq for SeenMap {
    fn eq(&self, other: &Self) -> bool {
        self.sorted() == other.sorted()
    }
}

impl Eq for SeenMap {}

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
    /// Database timestamp, microseconds since the Unix epoch (not milliseconds, unlike an
    /// [`EventEnvelope`](super::EventEnvelope)'s `timestamp`, the writer's clock): every event
    /// with an earlier timestamp was delivered (or was not visible within the late-commit window).
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
    /// Its database timestamp, microseconds since the Unix epoch (not milliseconds, unlike an
    /// [`EventEnvelope`](super::EventEnvelope)'s `timestamp`).
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

    fn seen(seq_nr: u64, timestamp: i64) -> SeenEvent {
        SeenEvent { seq_nr, timestamp }
    }

    fn entries(map: &SeenMap) -> Vec<(String, u64)> {
        map.iter()
            .map(|(id, seen)| (id.to_string(), seen.seq_nr))
            .collect()
    }

    /// A clone keeps what it saw: inserts into the original (which appends to the shared log)
    /// and into the clone (which copies first) never show in the other.
    #[test]
    fn clones_never_see_each_others_inserts() {
        let mut tip = SeenMap::new();
        tip.insert("B|1".into(), seen(1, 10));
        tip.insert("A|1".into(), seen(4, 10));
        let mut older = tip.clone();
        tip.insert("C|1".into(), seen(2, 11));
        tip.insert("A|1".into(), seen(5, 11));
        older.insert("D|1".into(), seen(9, 12));
        assert_eq!(
            entries(&tip),
            [("A|1".into(), 5), ("B|1".into(), 1), ("C|1".into(), 2)]
        );
        assert_eq!(
            entries(&older),
            [("A|1".into(), 4), ("B|1".into(), 1), ("D|1".into(), 9)]
        );
        // Both at the tip of their own log again.
        tip.insert("E|1".into(), seen(1, 12));
        older.insert("E|1".into(), seen(3, 12));
        assert_eq!(tip.get("E|1"), Some(&seen(1, 12)));
        assert_eq!(older.get("E|1"), Some(&seen(3, 12)));
        assert_eq!((tip.len(), older.len()), (4, 4));
    }

    /// Two clones of one map inserting from two threads at once: each sees its own inserts only.
    #[test]
    fn clones_inserting_on_two_threads_stay_apart() {
        let mut base = SeenMap::new();
        base.insert("A|0".into(), seen(1, 0));
        let (mut left, mut right) = (base.clone(), base.clone());
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for i in 0..1_000 {
                    left.insert(format!("L|{i}").into(), seen(i, 1));
                }
            });
            scope.spawn(|| {
                for i in 0..1_000 {
                    right.insert(format!("R|{i}").into(), seen(i, 1));
                }
            });
        });
        assert_eq!((left.len(), right.len(), base.len()), (1_001, 1_001, 1));
        assert!(left.iter().all(|(id, _)| !id.starts_with('R')));
        assert!(right.iter().all(|(id, _)| !id.starts_with('L')));
    }

    /// Forgetting hides the older entries at once; compaction keeps the live ones only.
    #[test]
    fn forgotten_entries_are_gone_and_compaction_keeps_the_rest() {
        let mut map = SeenMap::new();
        for i in 0..100 {
            map.insert(format!("A|{i}").into(), seen(1, i));
        }
        let before = map.clone();
        map.forget_below(90);
        assert_eq!(map.len(), 10);
        assert_eq!(map.get("A|89"), None);
        assert_eq!(map.get("A|90"), Some(&seen(1, 90)));
        assert_eq!(before.len(), 100, "a clone made before keeps its entries");
        // A replaced entry's newer insert wins, also across a forget.
        map.insert("A|95".into(), seen(2, 95));
        let live: Vec<(Arc<str>, SeenEvent)> = map
            .iter()
            .map(|(id, seen)| (Arc::clone(id), *seen))
            .collect();
        assert!(map.compact_from(live.iter().map(|(id, seen)| (id, seen))));
        assert_eq!(map.log_len(), 10);
        assert_eq!(map.get("A|95"), Some(&seen(2, 95)));
        assert_eq!(map, before_forget_of(&before, 90, ("A|95", seen(2, 95))));
        assert!(
            !map.compact_from(live.iter().map(|(id, seen)| (id, seen))),
            "not sparse any more"
        );
        assert!(map.remove("A|90"));
        assert!(!map.remove("A|90"));
        assert_eq!(map.len(), 9);
    }

    fn before_forget_of(map: &SeenMap, floor: i64, insert: (&str, SeenEvent)) -> SeenMap {
        let mut expected: SeenMap = map
            .iter()
            .filter(|(_, seen)| seen.timestamp >= floor)
            .map(|(id, seen)| (Arc::clone(id), *seen))
            .collect();
        expected.insert(insert.0.into(), insert.1);
        expected
    }
}
