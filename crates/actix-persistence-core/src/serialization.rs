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
pub fn to_json<E: Serialize + ?Sized>(event: &E) -> Result<Vec<u8>, SerializationError> {
    match catch_unwind(AssertUnwindSafe(|| serde_json::to_vec(event))) {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => Err(SerializationError::Serialize(e.to_string())),
        Err(panic) => Err(SerializationError::Serialize(panic_message(&panic))),
    }
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
    decode_json(bytes).map_err(|e| SerializationError::Deserialize {
        seq_nr,
        reason: e.to_string(),
    })
}

/// serde_json's reading of `bytes`, their UTF-8 checked once as a whole rather than string by
/// string: `serde_json::from_slice` checks each string it reads on its own (~700 of the ~2,400
/// instructions of a 100-byte event, callgrind of a PostgreSQL replay), while one
/// `str::from_utf8` over ASCII-heavy JSON costs a few dozen, after which `from_str` reads the
/// strings as they are. Bytes that are not UTF-8 as a whole go to `from_slice`, so what is
/// accepted and what is rejected (and the error) stay serde_json's own.
pub(crate) fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(bytes),
    }
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
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Deposited {
        account: String,
        amount: u64,
    }

    /// `decode_json` gives what `serde_json::from_slice` gives, value or error message.
    fn agrees(bytes: &[u8]) -> Result<Deposited, String> {
        let ours = decode_json::<Deposited>(bytes).map_err(|e| e.to_string());
        let theirs = serde_json::from_slice::<Deposited>(bytes).map_err(|e| e.to_string());
        assert_eq!(ours, theirs, "for {bytes:?}");
        ours
    }

    #[test]
    fn decode_json_reads_and_rejects_as_serde_json_from_slice() {
        let read = agrees(br#"{"account":"k\u00e9 \"42\"","amount":7}"#);
        assert_eq!(
            read,
            Ok(Deposited {
                account: "k\u{e9} \"42\"".to_owned(),
                amount: 7
            })
        );
        assert_eq!(
            agrees("{\"account\":\"café\",\"amount\":1}".as_bytes()),
            Ok(Deposited {
                account: "café".to_owned(),
                amount: 1
            })
        );
        // Not UTF-8 in a string that is read, in one that is skipped, outside any string.
        assert!(agrees(b"{\"account\":\"a\xff\",\"amount\":1}").is_err());
        let skipped = agrees(b"{\"account\":\"a\",\"note\":\"\xff\",\"amount\":1}");
        assert_eq!(skipped.map(|d| d.amount), Ok(1));
        assert!(agrees(b"{\"account\":\"a\",\"amount\":1}\xff").is_err());
        assert!(agrees(br#"{"account":"a","amount":-1}"#).is_err());
        assert!(agrees(b"").is_err());
    }
}
