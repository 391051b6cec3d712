//! Turning events into bytes and back: serde_json by default.

use std::panic::{catch_unwind, AssertUnwindSafe};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Serializer id of [`serde_json`], stored with every event it wrote.
pub const JSON_SERIALIZER_ID: u32 = 1;

/// An event in its stored form: bytes, the id of the serializer that wrote them, and a
/// serializer-specific manifest (type hint).
///
/// Produced by [`crate::persistent::EventSourced::serialize_event`]; serde_json
/// ([`JSON_SERIALIZER_ID`]) unless the actor plugs in another serializer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SerializedEvent {
    /// The serialized event.
    pub payload: Vec<u8>,
    /// Which serializer wrote `payload`; read back by the same one.
    pub serializer_id: u32,
    /// Type hint for the serializer; may be empty.
    pub manifest: String,
}

/// An event that could not be turned into bytes, or bytes that could not be turned back.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SerializationError {
    /// The serializer returned an error (or panicked) for this value.
    #[error("event could not be serialized: {0}")]
    Serialize(String),
    /// The stored bytes do not decode to the actor's event type.
    #[error("event at sequence number {seq_nr} could not be deserialized: {reason}")]
    Deserialize {
        /// Sequence number of the stored event.
        seq_nr: u64,
        /// The serializer's message.
        reason: String,
    },
    /// A snapshot could not be serialized.
    #[error("snapshot could not be serialized: {0}")]
    SnapshotSerialize(String),
    /// A stored snapshot could not be turned back into the actor's snapshot type.
    #[error("snapshot at sequence number {seq_nr} could not be read: {reason}")]
    SnapshotDeserialize {
        /// Sequence number of the snapshot.
        seq_nr: u64,
        /// What went wrong.
        reason: String,
    },
    /// The event was written by a serializer this actor does not know.
    #[error("event at sequence number {seq_nr} was written by serializer {serializer_id}, expected {expected}")]
    UnknownSerializer {
        /// Sequence number of the stored event.
        seq_nr: u64,
        /// The serializer id stored with the event.
        serializer_id: u32,
        /// The serializer id this actor reads.
        expected: u32,
    },
}

/// Serializes `event` with serde_json. A panicking `Serialize` impl is caught and reported as
/// an error, so one bad event type cannot take its actor down.
///
/// # Errors
/// [`SerializationError::Serialize`] when serde_json fails or the impl panics.
///
/// The bytes are written into a buffer the thread keeps, then copied into a `Vec` of exactly
/// their length: a small event costs one small allocation instead of serde_json's initial 128
/// bytes (cheaper to allocate and free, and an in-memory journal keeps less per event).
pub fn to_json<E: Serialize + ?Sized>(event: &E) -> Result<Vec<u8>, SerializationError> {
    let written = SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            let written = catch_unwind(AssertUnwindSafe(|| {
                serde_json::to_writer(&mut *buf, event).map(|()| buf.to_vec())
            }));
            if buf.capacity() > MAX_KEPT_SCRATCH_BYTES {
                // One large event must not pin its size for the thread's lifetime.
                *buf = Vec::new();
            }
            written
        }
        // Called again from inside an event's `Serialize`: the buffer is in use.
        Err(_) => catch_unwind(AssertUnwindSafe(|| serde_json::to_vec(event))),
    });
    match written {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => Err(SerializationError::Serialize(e.to_string())),
        Err(panic) => Err(SerializationError::Serialize(panic_message(&panic))),
    }
}

/// The largest serialization buffer [`to_json`] keeps for the thread's next event (64 KiB).
const MAX_KEPT_SCRATCH_BYTES: usize = 64 * 1024;

thread_local! {
    /// [`to_json`]'s buffer: reused by every event serialized on this thread.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Deserializes an event written by [`to_json`].
///
/// # Errors
/// [`SerializationError::UnknownSerializer`] when `serializer_id` is not
/// [`JSON_SERIALIZER_ID`]; [`SerializationError::Deserialize`] when the bytes do not decode.
pub fn from_json<E: DeserializeOwned>(
    seq_nr: u64,
    serializer_id: u32,
    bytes: &[u8],
) -> Result<E, SerializationError> {
    if serializer_id != JSON_SERIALIZER_ID {
        return Err(SerializationError::UnknownSerializer {
            seq_nr,
            serializer_id,
            expected: JSON_SERIALIZER_ID,
        });
    }
    serde_json::from_slice(bytes).map_err(|e| SerializationError::Deserialize {
        seq_nr,
        reason: e.to_string(),
    })
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        format!("serializer panicked: {s}")
    } else if let Some(s) = panic.downcast_ref::<String>() {
        format!("serializer panicked: {s}")
    } else {
        "serializer panicked".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use serde::ser::Error as _;
    use serde::{Serialize, Serializer};

    use super::{from_json, to_json, JSON_SERIALIZER_ID, SCRATCH};

    #[test]
    fn payload_is_exactly_as_long_as_the_json() {
        let bytes = to_json(&42u64).expect("serializes");
        assert_eq!(bytes, b"42");
        assert_eq!(bytes.capacity(), 2);
        let text = "x".repeat(300);
        let bytes = to_json(&text).expect("serializes");
        assert_eq!(bytes.len(), 302);
        assert_eq!(bytes.capacity(), 302);
        assert_eq!(
            from_json::<String>(1, JSON_SERIALIZER_ID, &bytes).expect("reads"),
            text
        );
    }

    /// Serializes as the JSON of `to_json(inner)` as a byte array: `to_json` inside `to_json`.
    struct Nested(u32);

    impl Serialize for Nested {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let inner = to_json(&self.0).map_err(S::Error::custom)?;
            serializer.serialize_str(std::str::from_utf8(&inner).map_err(S::Error::custom)?)
        }
    }

    #[test]
    fn an_event_that_serializes_with_to_json_inside_gets_both_right() {
        assert_eq!(to_json(&Nested(7)).expect("serializes"), br#""7""#);
        assert_eq!(to_json(&[Nested(1), Nested(23)]).expect("serializes"), br#"["1","23"]"#);
    }

    struct Panics;

    impl Serialize for Panics {
        fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            panic!("broken Serialize impl")
        }
    }

    struct Fails;

    impl Serialize for Fails {
        fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(S::Error::custom("no"))
        }
    }

    #[test]
    fn a_failed_or_panicking_event_leaves_no_bytes_behind() {
        let panicked = to_json(&Panics).expect_err("the panic is an error");
        assert!(panicked.to_string().contains("broken Serialize impl"));
        assert!(to_json(&Fails).is_err());
        // Whatever the failed events wrote is not part of the next payload.
        assert_eq!(to_json(&"ok").expect("serializes"), br#""ok""#);
    }

    #[test]
    fn a_large_event_does_not_keep_its_buffer() {
        let large = "y".repeat(super::MAX_KEPT_SCRATCH_BYTES * 2);
        assert_eq!(to_json(&large).expect("serializes").len(), large.len() + 2);
        assert!(SCRATCH.with(|s| s.borrow().capacity()) <= super::MAX_KEPT_SCRATCH_BYTES);
        let small = to_json(&1u8).expect("serializes");
        assert_eq!(small, b"1");
        assert!(SCRATCH.with(|s| s.borrow().capacity()) > 0);
    }
}
