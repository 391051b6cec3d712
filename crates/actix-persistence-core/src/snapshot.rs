//! Snapshot stores: the newest snapshot of an actor's state shortens its recovery.
//!
//! Shaped after Akka's `SnapshotStore`: save, load the newest snapshot matching selection
//! criteria, delete one, delete by criteria. Depends on no actor runtime and no database crate.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::BoxError;
use crate::serialization::{to_json, SerializationError, JSON_SERIALIZER_ID};

/// Which snapshot a snapshot was: whose, taken after which event, and when.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SnapshotMetadata {
    /// The persistence id of the actor whose state it is.
    pub persistence_id: String,
    /// The sequence number of the last event the state includes.
    pub seq_nr: u64,
    /// When it was taken, milliseconds since the Unix epoch.
    pub timestamp: i64,
}

/// A serialized snapshot and how to read it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SerializedSnapshot {
    /// The serialized state.
    pub payload: Vec<u8>,
    /// The serializer that produced `payload`.
    pub serializer_id: u32,
    /// Serializer-specific type hint; may be empty.
    pub manifest: String,
}

impl SerializedSnapshot {
    /// Serializes `state` with serde_json.
    ///
    /// # Errors
    /// [`SerializationError::SnapshotSerialize`] when serde_json fails or the `Serialize` impl
    /// panics.
    pub fn json<T: Serialize + ?Sized>(state: &T) -> Result<Self, SerializationError> {
        let payload = to_json(state).map_err(|e| match e {
            SerializationError::Serialize(reason) => SerializationError::SnapshotSerialize(reason),
            other => other,
        })?;
        Ok(SerializedSnapshot {
            payload,
            serializer_id: JSON_SERIALIZER_ID,
            manifest: String::new(),
        })
    }
}

impl SelectedSnapshot {
    /// Reads the state written by [`SerializedSnapshot::json`]: the typed mirror of it.
    ///
    /// # Examples
    /// ```
    /// # use actix_persistence_core as actix_persistence; // the paths of the facade, `actix-persistence`
    /// use actix_persistence::snapshot::{SelectedSnapshot, SerializedSnapshot, SnapshotMetadata};
    ///
    /// let snapshot = SelectedSnapshot {
    ///     metadata: SnapshotMetadata { persistence_id: "cart-1".into(), seq_nr: 7, timestamp: 0 },
    ///     snapshot: SerializedSnapshot::json(&vec!["apple", "pear"])?,
    /// };
    /// let items: Vec<String> = snapshot.json()?;
    /// assert_eq!(items, ["apple", "pear"]);
    /// assert!(snapshot.json::<u64>().unwrap_err().to_string().starts_with("snapshot at sequence number 7"));
    /// # Ok::<(), actix_persistence_core::serialization::SerializationError>(())
    /// ```
    ///
    /// # Errors
    /// [`SerializationError::SnapshotDeserialize`] naming the snapshot's sequence number when
    /// it was written by another serializer or does not decode to `T`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, SerializationError> {
        let seq_nr = self.metadata.seq_nr;
        if self.snapshot.serializer_id != JSON_SERIALIZER_ID {
            return Err(SerializationError::SnapshotDeserialize {
                seq_nr,
                reason: format!(
                    "written by serializer {}, expected serde_json ({JSON_SERIALIZER_ID})",
                    self.snapshot.serializer_id
                ),
            });
        }
        crate::serialization::decode_json(&self.snapshot.payload).map_err(|e| {
            SerializationError::SnapshotDeserialize {
                seq_nr,
                reason: e.to_string(),
            }
        })
    }
}

/// A loaded snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectedSnapshot {
    /// Whose and which.
    pub metadata: SnapshotMetadata,
    /// The state.
    pub snapshot: SerializedSnapshot,
}

/// Bounds a snapshot must meet to be selected: all four must hold (as Akka's
/// `SnapshotSelectionCriteria`). Timestamps in ms since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotSelectionCriteria {
    /// Highest sequence number allowed (inclusive).
    pub max_seq_nr: u64,
    /// Latest timestamp allowed (inclusive).
    pub max_timestamp: i64,
    /// Lowest sequence number allowed (inclusive).
    pub min_seq_nr: u64,
    /// Earliest timestamp allowed (inclusive).
    pub min_timestamp: i64,
}

impl SnapshotSelectionCriteria {
    /// Any snapshot: the newest one is selected.
    pub const fn latest() -> Self {
        SnapshotSelectionCriteria {
            max_seq_nr: u64::MAX,
            max_timestamp: i64::MAX,
            min_seq_nr: 0,
            min_timestamp: 0,
        }
    }

    /// No snapshot (recover from events only).
    pub const fn none() -> Self {
        SnapshotSelectionCriteria {
            max_seq_nr: 0,
            max_timestamp: 0,
            min_seq_nr: 0,
            min_timestamp: 0,
        }
    }

    /// Snapshots up to `max_seq_nr`.
    pub const fn up_to(max_seq_nr: u64) -> Self {
        SnapshotSelectionCriteria {
            max_seq_nr,
            ..Self::latest()
        }
    }

    /// Whether `metadata` meets all four bounds.
    pub fn matches(&self, metadata: &SnapshotMetadata) -> bool {
        metadata.seq_nr <= self.max_seq_nr
            && metadata.timestamp <= self.max_timestamp
            && metadata.seq_nr >= self.min_seq_nr
            && metadata.timestamp >= self.min_timestamp
    }
}

impl Default for SnapshotSelectionCriteria {
    fn default() -> Self {
        Self::latest()
    }
}

/// A snapshot operation that did not succeed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The state could not be serialized; nothing was saved and earlier snapshots are intact.
    #[error("snapshot of {persistence_id:?} at sequence number {seq_nr} not saved: {source}")]
    Serialization {
        /// Whose snapshot.
        persistence_id: String,
        /// At which sequence number.
        seq_nr: u64,
        /// The serializer's error.
        #[source]
        source: SerializationError,
    },
    /// The actor has no snapshot store, or takes no snapshots (`EventSourced::snapshotting`
    /// returns `None`).
    #[error("{persistence_id:?} cannot save snapshots: {reason}")]
    NotSupported {
        /// Whose snapshot.
        persistence_id: String,
        /// What is missing.
        reason: &'static str,
    },
    /// The store did not answer within the call timeout.
    #[error("snapshot store did not answer {operation} within {} ms", timeout.as_millis())]
    Timeout {
        /// What was asked.
        operation: &'static str,
        /// The timeout that expired.
        timeout: std::time::Duration,
    },
    /// The call ended without an answer from the store (its task was dropped, e.g. while the
    /// actor system shut down).
    #[error("snapshot store call was interrupted before the store answered")]
    Interrupted,
    /// The store failed.
    #[error("snapshot store failed during {operation}: {source}")]
    Storage {
        /// What the store was doing: `"save"`, `"load"`, `"delete"`.
        operation: &'static str,
        /// The store's own error.
        #[source]
        source: BoxError,
    },
}

impl SnapshotError {
    /// Wraps a store's own error as [`SnapshotError::Storage`].
    pub fn storage<E>(operation: &'static str, source: E) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        SnapshotError::Storage {
            operation,
            source: Arc::new(source),
        }
    }
}

/// Storage for snapshots. Implementations must be safe to call concurrently.
#[async_trait]
pub trait SnapshotStore: Send + Sync + 'static {
    /// The newest snapshot of `persistence_id` (highest seq_nr, then latest timestamp) that
    /// matches `criteria`, if any.
    ///
    /// # Errors
    /// [`SnapshotError::Storage`] when the store cannot be read.
    async fn load(
        &self,
        persistence_id: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError>;

    /// Saves a snapshot; one already saved for the same persistence id and seq_nr is replaced.
    ///
    /// # Errors
    /// [`SnapshotError::Storage`] when the store cannot be written, or (every built-in store
    /// alike, so the same snapshot gets the same answer in tests and in production) when the
    /// sequence number is above `i64::MAX`, the persistence id or the manifest holds a NUL
    /// character, or the payload is over
    /// [`MAX_SNAPSHOT_BYTES`](crate::limits::MAX_SNAPSHOT_BYTES); nothing is stored then.
    async fn save(
        &self,
        metadata: SnapshotMetadata,
        snapshot: SerializedSnapshot,
    ) -> Result<(), SnapshotError>;

    /// Deletes the snapshot of `metadata.persistence_id` at `metadata.seq_nr` (a timestamp of 0
    /// matches any; otherwise it must match too). Deleting a missing snapshot succeeds.
    ///
    /// # Errors
    /// [`SnapshotError::Storage`] when the store cannot be written.
    async fn delete(&self, metadata: &SnapshotMetadata) -> Result<(), SnapshotError>;

    /// Deletes every snapshot of `persistence_id` matching `criteria`.
    ///
    /// # Errors
    /// [`SnapshotError::Storage`] when the store cannot be written.
    async fn delete_matching(
        &self,
        persistence_id: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError>;

    /// The metadata of the newest snapshots of `persistence_id` that match `criteria`, at most
    /// `limit` of them, newest (highest seq_nr) first, without their payloads: what a
    /// [`SnapshotPolicy`](crate::persistent::SnapshotPolicy) that keeps the newest K snapshots
    /// reads after each save to find the oldest one it keeps.
    ///
    /// The default loads the snapshots one at a time with [`load`](Self::load), each with its
    /// payload, narrowing `criteria` below the one found; the built-in stores read the
    /// metadata alone, in one statement. Stores that can should override it (conformance case
    /// S14 checks that it agrees with `load`).
    ///
    /// # Errors
    /// [`SnapshotError::Storage`] when the store cannot be read.
    async fn read_metadata(
        &self,
        persistence_id: &str,
        criteria: SnapshotSelectionCriteria,
        limit: u32,
    ) -> Result<Vec<SnapshotMetadata>, SnapshotError> {
        let mut found = Vec::new();
        let mut criteria = criteria;
        while found.len() < limit as usize {
            let Some(snapshot) = self.load(persistence_id, criteria).await? else {
                break;
            };
            let seq_nr = snapshot.metadata.seq_nr;
            found.push(snapshot.metadata);
            if seq_nr == 0 || seq_nr <= criteria.min_seq_nr {
                break;
            }
            criteria = SnapshotSelectionCriteria {
                max_seq_nr: seq_nr - 1,
                ..criteria
            };
        }
        Ok(found)
    }
}

#[async_trait]
impl<S: SnapshotStore + ?Sized> SnapshotStore for Arc<S> {
    async fn load(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        (**self).load(pid, criteria).await
    }

    async fn save(
        &self,
        metadata: SnapshotMetadata,
        snapshot: SerializedSnapshot,
    ) -> Result<(), SnapshotError> {
        (**self).save(metadata, snapshot).await
    }

    async fn delete(&self, metadata: &SnapshotMetadata) -> Result<(), SnapshotError> {
        (**self).delete(metadata).await
    }

    async fn delete_matching(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError> {
        (**self).delete_matching(pid, criteria).await
    }

    async fn read_metadata(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
        limit: u32,
    ) -> Result<Vec<SnapshotMetadata>, SnapshotError> {
        (**self).read_metadata(pid, criteria, limit).await
    }
}

/// A [`SnapshotStore`] kept in memory, for tests. Clones share the same snapshots.
#[derive(Debug, Clone, Default)]
pub struct InMemorySnapshotStore {
    inner: Arc<Mutex<HashMap<String, BTreeMap<u64, SelectedSnapshot>>>>,
}

impl InMemorySnapshotStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, BTreeMap<u64, SelectedSnapshot>>> {
        // Every update is a single insert or retain: a poisoned map is still consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl SnapshotStore for InMemorySnapshotStore {
    async fn load(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<Option<SelectedSnapshot>, SnapshotError> {
        Ok(self.lock().get(pid).and_then(|snapshots| {
            snapshots
                .values()
                .rev()
                .find(|s| criteria.matches(&s.metadata))
                .cloned()
        }))
    }

    /// As the SQL stores, whose columns hold no more: a sequence number above
    /// [`MAX_STORABLE_SEQ_NR`](crate::limits::MAX_STORABLE_SEQ_NR) (`i64::MAX`), a NUL
    /// character in the persistence id or the manifest (PostgreSQL text cannot hold one), or a
    /// payload over [`MAX_SNAPSHOT_BYTES`](crate::limits::MAX_SNAPSHOT_BYTES) is refused and
    /// nothing changes.
    async fn save(
        &self,
        metadata: SnapshotMetadata,
        snapshot: SerializedSnapshot,
    ) -> Result<(), SnapshotError> {
        if let Some(reason) = crate::limits::snapshot_problem(&metadata, &snapshot) {
            return Err(SnapshotError::storage(
                "save",
                Unstorable {
                    persistence_id: metadata.persistence_id,
                    seq_nr: metadata.seq_nr,
                    reason,
                },
            ));
        }
        self.lock()
            .entry(metadata.persistence_id.clone())
            .or_default()
            .insert(metadata.seq_nr, SelectedSnapshot { metadata, snapshot });
        Ok(())
    }

    async fn delete(&self, metadata: &SnapshotMetadata) -> Result<(), SnapshotError> {
        if let Some(snapshots) = self.lock().get_mut(&metadata.persistence_id) {
            let matches = snapshots.get(&metadata.seq_nr).is_some_and(|s| {
                metadata.timestamp == 0 || s.metadata.timestamp == metadata.timestamp
            });
            if matches {
                snapshots.remove(&metadata.seq_nr);
            }
        }
        Ok(())
    }

    async fn delete_matching(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
    ) -> Result<(), SnapshotError> {
        if let Some(snapshots) = self.lock().get_mut(pid) {
            snapshots.retain(|_, s| !criteria.matches(&s.metadata));
        }
        Ok(())
    }

    async fn read_metadata(
        &self,
        pid: &str,
        criteria: SnapshotSelectionCriteria,
        limit: u32,
    ) -> Result<Vec<SnapshotMetadata>, SnapshotError> {
        Ok(self
            .lock()
            .get(pid)
            .map(|snapshots| {
                snapshots
                    .values()
                    .rev()
                    .filter(|s| criteria.matches(&s.metadata))
                    .take(limit as usize)
                    .map(|s| s.metadata.clone())
                    .collect()
            })
            .unwrap_or_default())
    }
}

/// A snapshot that no store holds ([`limits::snapshot_problem`](crate::limits::snapshot_problem)
/// tells why), which every store refuses alike.
#[derive(Debug, thiserror::Error)]
#[error(
    "the snapshot of {persistence_id:?} at sequence number {seq_nr} cannot be stored: {reason}"
)]
struct Unstorable {
    persistence_id: String,
    seq_nr: u64,
    reason: String,
}
