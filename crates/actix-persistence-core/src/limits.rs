//! What every journal store can hold: the one place the limits on persistence ids, events and
//! tags are written down, and the checks that turn a write over them into a rejection before
//! it reaches a store.
//!
//! The limits are those all three stores (in memory, SQLite, PostgreSQL) can honour, so the
//! same input gets the same answer on each: PostgreSQL text cannot hold NUL, a PostgreSQL
//! B-tree index entry holds at most about 2,700 bytes (the persistence id is indexed), a
//! PostgreSQL bind message at most 1 GiB, and sequence numbers are stored as signed 64-bit
//! integers.
//!
//! | what | limit |
//! |---|---|
//! | persistence id | 1 to [`MAX_PERSISTENCE_ID_BYTES`] bytes of UTF-8, no NUL |
//! | sequence number | 1 to [`MAX_STORABLE_SEQ_NR`] (`i64::MAX`) |
//! | payload | at most [`MAX_PAYLOAD_BYTES`] bytes per event |
//! | manifest | at most [`MAX_MANIFEST_BYTES`] bytes, no NUL |
//! | writer id | at most [`MAX_WRITER_UUID_BYTES`] bytes, no NUL |
//! | tags | at most [`MAX_TAGS`] per event, each at most [`MAX_TAG_BYTES`] bytes, no NUL |
//! | events per atomic write | at most [`MAX_EVENTS_PER_ATOMIC_WRITE`] |
//! | snapshot | at most [`MAX_SNAPSHOT_BYTES`] bytes of payload (checked by every snapshot store when it saves) |
//!
//! Checked twice per persist, each check with its own job:
//! - a persistent actor checks its writes before sending them: the authoritative check of the
//!   persist path. A write over a limit is rejected there (`on_persist_rejected` runs, the
//!   write keeps its sequence numbers and the actor goes on) and never reaches the journal.
//!   Its persistence id is checked once, when its `PersistenceState` is made, and its writer id
//!   is a UUID it made, so per write it checks only what varies (`check_actor_write_limits`);
//! - every store checks each atomic write it is given ([`AtomicWrite::check`]) before storing
//!   anything: a defensive check for direct callers (a `WriteMessages` sent to the journal
//!   actor, a tool calling the store), which get the same rejection from every store. The
//!   journal conformance suite (case J27) holds third-party stores to it. The one exception:
//!   the writes a persistent actor sends through the journal's write channel (every write of
//!   an incarnation after its first) reach the store as a
//!   [`CheckedBatch`](crate::CheckedBatch) ([`JournalStore::write_checked_now`](crate::JournalStore::write_checked_now)),
//!   and a store may skip its check of those, which the first bullet already made; the
//!   in-memory journal does. Direct callers cannot make a `CheckedBatch`, so their writes are
//!   always checked.
//!
//! The journal actor between them does not check: a store's rejection is an answer of a
//! healthy store and never counts against the circuit breaker.

use crate::error::WriteRejection;
use crate::store::AtomicWrite;

/// Longest persistence id, in bytes of UTF-8 (an index entry every store can hold).
pub const MAX_PERSISTENCE_ID_BYTES: usize = 255;
/// Largest payload of one event, in bytes (10 MiB).
pub const MAX_PAYLOAD_BYTES: usize = 10 * 1024 * 1024;
/// Longest manifest, in bytes.
pub const MAX_MANIFEST_BYTES: usize = 255;
/// Longest writer id, in bytes.
pub const MAX_WRITER_UUID_BYTES: usize = 255;
/// Most tags on one event.
pub const MAX_TAGS: usize = 64;
/// Longest tag, in bytes.
pub const MAX_TAG_BYTES: usize = 255;
/// Largest payload of one snapshot, in bytes (512 MiB): within what a PostgreSQL `bytea` value
/// and bind message (1 GiB) and a SQLite value (1,000,000,000 bytes by default) hold, so every
/// built-in snapshot store refuses the same snapshots, the in-memory one included (a state
/// that large is better split into entities of its own).
pub const MAX_SNAPSHOT_BYTES: usize = 512 * 1024 * 1024;
/// Most events in one atomic write.
pub const MAX_EVENTS_PER_ATOMIC_WRITE: usize = 10_000;
/// Highest sequence number a store can hold (`i64::MAX`, the SQL stores' `BIGINT`/`INTEGER`).
pub const MAX_STORABLE_SEQ_NR: u64 = i64::MAX as u64;

/// Checks that `persistence_id` is within the limits; returns what is wrong otherwise.
pub(crate) fn persistence_id_problem(persistence_id: &str) -> Option<String> {
    if persistence_id.is_empty() {
        Some("the persistence id is empty".to_owned())
    } else if persistence_id.len() > MAX_PERSISTENCE_ID_BYTES {
        Some(format!(
            "the persistence id is {} bytes long, above the limit of {MAX_PERSISTENCE_ID_BYTES} bytes",
            persistence_id.len()
        ))
    } else if holds_nul(persistence_id) {
        Some("the persistence id holds a NUL character, which no store can hold".to_owned())
    } else {
        None
    }
}

/// Checks every event of `write` against the limits (not its shape: see
/// [`AtomicWrite::check_shape`]).
///
/// # Errors
/// A [`WriteRejection`] naming the first limit a field is over, the field, its value's size and
/// the limit.
pub fn check_limits(write: &AtomicWrite) -> Result<(), WriteRejection> {
    check(write, false)
}

/// [`check_limits`] for a write a persistent actor built: its persistence id was checked when
/// its state was made (`PersistenceState::new` refuses an id over the limits) and its writer
/// id is a UUID it made itself (36 bytes, no NUL), so only what varies per write is checked
/// (events per write, sequence numbers, payloads, manifests, tags). The same answer as
/// [`check_limits`] for such a write; about half its cost on the persist path.
#[cfg(feature = "actor")]
pub(crate) fn check_actor_write_limits(write: &AtomicWrite) -> Result<(), WriteRejection> {
    debug_assert!(persistence_id_problem(write.persistence_id()).is_none());
    debug_assert!(write
        .events
        .iter()
        .all(|e| e.writer_uuid.len() <= MAX_WRITER_UUID_BYTES && !holds_nul(&e.writer_uuid)));
    check(write, true)
}

/// The checks of [`check_limits`], without those of the persistence id and the writer ids when
/// `ids_known_valid`.
#[inline(always)]
fn check(write: &AtomicWrite, ids_known_valid: bool) -> Result<(), WriteRejection> {
    let reject = |reason: String| WriteRejection {
        persistence_id: write.persistence_id().to_owned(),
        seq_nr: write.lowest_seq_nr(),
        reason,
    };
    if write.events.len() > MAX_EVENTS_PER_ATOMIC_WRITE {
        return Err(reject(format!(
            "the atomic write holds {} events, above the limit of {MAX_EVENTS_PER_ATOMIC_WRITE}",
            write.events.len()
        )));
    }
    if !ids_known_valid {
        if let Some(problem) = persistence_id_problem(write.persistence_id()) {
            return Err(reject(problem));
        }
    }
    if write.highest_seq_nr() > MAX_STORABLE_SEQ_NR {
        return Err(reject(format!(
            "sequence number {} is above the limit of {MAX_STORABLE_SEQ_NR} (i64::MAX)",
            write.highest_seq_nr()
        )));
    }
    for event in &write.events {
        let seq_nr = event.seq_nr;
        if event.payload.len() > MAX_PAYLOAD_BYTES {
            return Err(reject(format!(
                "the payload of the event at sequence number {seq_nr} is {} bytes, above the \
                 limit of {MAX_PAYLOAD_BYTES} bytes",
                event.payload.len()
            )));
        }
        text_problem("manifest", &event.manifest, MAX_MANIFEST_BYTES, seq_nr)
            .map_or(Ok(()), |p| Err(reject(p)))?;
        if !ids_known_valid {
            text_problem(
                "writer id",
                &event.writer_uuid,
                MAX_WRITER_UUID_BYTES,
                seq_nr,
            )
            .map_or(Ok(()), |p| Err(reject(p)))?;
        }
        if event.tags.len() > MAX_TAGS {
            return Err(reject(format!(
                "the event at sequence number {seq_nr} has {} tags, above the limit of {MAX_TAGS}",
                event.tags.len()
            )));
        }
        for tag in &event.tags {
            text_problem("tag", tag, MAX_TAG_BYTES, seq_nr).map_or(Ok(()), |p| Err(reject(p)))?;
        }
    }
    Ok(())
}

/// What keeps a snapshot from being stored, if anything: a sequence number above
/// [`MAX_STORABLE_SEQ_NR`] (`i64::MAX`), a NUL character in the persistence id or the manifest
/// (PostgreSQL text cannot hold one), or a payload over [`MAX_SNAPSHOT_BYTES`]. Every built-in
/// snapshot store refuses such a snapshot with this text when it saves, so the same snapshot
/// gets the same answer in tests (in memory) and in production.
pub fn snapshot_problem(
    metadata: &crate::snapshot::SnapshotMetadata,
    snapshot: &crate::snapshot::SerializedSnapshot,
) -> Option<String> {
    if metadata.seq_nr > MAX_STORABLE_SEQ_NR {
        Some(format!(
            "sequence numbers above {MAX_STORABLE_SEQ_NR} (i64::MAX) are over the limits"
        ))
    } else if holds_nul(&metadata.persistence_id) || holds_nul(&snapshot.manifest) {
        Some(
            "the persistence id or the manifest holds a NUL character, which PostgreSQL text \
             cannot store (refused by every store alike)"
                .to_owned(),
        )
    } else if snapshot.payload.len() > MAX_SNAPSHOT_BYTES {
        Some(format!(
            "the payload is {} bytes, above the limit of {MAX_SNAPSHOT_BYTES} bytes (refused by \
             every store alike)",
            snapshot.payload.len()
        ))
    } else {
        None
    }
}

/// Whether `text` holds a NUL character, which no store can hold (PostgreSQL `TEXT` cannot;
/// the limits refuse it everywhere). Every byte is looked at, without an early exit: these
/// fields are short (ids, manifests, tags of tens of bytes) and checked twice per persist, where
/// `str::contains`'s searcher cost more than the scan (`check_limits` 523 -> 392 instructions
/// per persist, callgrind, docs/benchmarks.md; a chunked variant measured 547, and an
/// eight-bytes-per-step SWAR scan 504, as it kept `text_problem` from being inlined).
pub fn holds_nul(text: &str) -> bool {
    text.bytes().fold(false, |nul, byte| nul | (byte == 0))
}

/// What is wrong with a text field of the event at `seq_nr`, if anything.
fn text_problem(field: &str, value: &str, max_bytes: usize, seq_nr: u64) -> Option<String> {
    if value.len() > max_bytes {
        Some(format!(
            "the {field} of the event at sequence number {seq_nr} is {} bytes, above the limit \
             of {max_bytes} bytes",
            value.len()
        ))
    } else if holds_nul(value) {
        Some(format!(
            "the {field} of the event at sequence number {seq_nr} holds a NUL character, which \
             no store can hold"
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::holds_nul;

    #[test]
    fn finds_a_nul_anywhere_and_nothing_else() {
        assert!(!holds_nul(""));
        assert!(!holds_nul("Account|42 é ✓"));
        let long = "x".repeat(100);
        for at in [0, 1, 31, 32, 33, 99] {
            let mut bytes = long.clone().into_bytes();
            bytes[at] = 0;
            let text = String::from_utf8(bytes).expect("utf-8");
            assert!(holds_nul(&text), "NUL at {at}");
        }
        assert!(holds_nul("\0"));
        // Bytes next to zero (0x01, 0x7f) and above 0x80; a NUL at every place of short texts.
        assert!(!holds_nul("\u{1}\u{7f}é€\u{1}\u{1}\u{1}\u{1}\u{80}ÿ\u{1}"));
        for len in 1..=17 {
            for at in 0..len {
                let mut bytes = vec![1u8; len];
                bytes[at] = 0;
                let text = String::from_utf8(bytes).expect("utf-8");
                assert!(holds_nul(&text), "NUL at {at} of {len}");
            }
        }
    }
}
