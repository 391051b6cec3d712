//! Turning events into bytes and back: serde_json by default.

mod checked;

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
/// Only what serde_json reads back is written: a float that is NaN or infinite (serde_json
/// writes `null`, which reads back as no float, or as `None` in an `Option`) and arrays or
/// objects nested deeper than 127 (serde_json's reader stops at its recursion limit of 128)
/// are errors, so an event or snapshot written through here can always be read again: stored,
/// it would fail every later recovery of its actor.
///
/// # Errors
/// [`SerializationError::Serialize`] when serde_json fails, the value holds a non-finite float
/// or is nested too deep, or the impl panics.
pub fn to_json<E: Serialize + ?Sized>(event: &E) -> Result<Vec<u8>, SerializationError> {
    let write = || {
        let mut bytes = Vec::with_capacity(128);
        let mut serializer =
            serde_json::Serializer::with_formatter(&mut bytes, checked::DepthLimited::default());
        checked::Finite(event)
            .serialize(&mut serializer)
            .map(|()| bytes)
    };
    match catch_unwind(AssertUnwindSafe(write)) {
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
    format!(
        "serializer panicked: {}",
        crate::error::panic_message(&**panic)
    )
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

    /// `to_json` writes what `serde_json::to_vec` writes, byte for byte, for every value it
    /// accepts.
    #[test]
    fn to_json_writes_what_serde_json_writes() {
        use std::collections::BTreeMap;
        #[derive(serde::Serialize)]
        enum E {
            Unit,
            New(f32),
            Tuple(i8, Option<u128>),
            Struct {
                a: Vec<f64>,
                m: BTreeMap<u64, (bool, char)>,
            },
        }
        #[derive(serde::Serialize)]
        struct Wrapper<'a>(
            &'a str,
            #[serde(skip_serializing_if = "Option::is_none")] Option<u8>,
        );
        let values = vec![
            E::Unit,
            E::New(-1.5),
            E::Tuple(-3, None),
            E::Tuple(7, Some(u128::MAX)),
            E::Struct {
                a: vec![0.1, -0.0, 1e300, f64::MIN_POSITIVE],
                m: [(1, (true, 'é')), (u64::MAX, (false, '"'))].into(),
            },
        ];
        for value in &values {
            assert_eq!(to_json(value).unwrap(), serde_json::to_vec(value).unwrap());
        }
        let w = Wrapper("a\nb", None);
        assert_eq!(to_json(&w).unwrap(), serde_json::to_vec(&w).unwrap());
    }

    /// NaN and the infinities, which serde_json writes as `null`, are refused wherever they are.
    #[test]
    fn to_json_refuses_non_finite_floats() {
        let refused = |e: Result<Vec<u8>, SerializationError>| match e {
            Err(SerializationError::Serialize(reason)) => {
                assert!(reason.contains("not finite"), "{reason}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        };
        refused(to_json(&f64::NAN));
        refused(to_json(&Some(f64::INFINITY)));
        refused(to_json(&vec![(1, f32::NEG_INFINITY)]));
        let mut map = std::collections::BTreeMap::new();
        map.insert("k", [0.0, f64::NAN]);
        refused(to_json(&map));
        assert_eq!(to_json(&Option::<f64>::None).unwrap(), b"null");
    }

    /// Arrays and objects nested as deep as serde_json reads are written; one more is refused.
    #[test]
    fn to_json_refuses_what_is_nested_deeper_than_serde_json_reads() {
        let nested = |depth: usize| {
            (0..depth).fold(serde_json::Value::Null, |inner, _| {
                serde_json::Value::Array(vec![inner])
            })
        };
        let deepest = to_json(&nested(checked::MAX_JSON_DEPTH)).unwrap();
        assert!(decode_json::<serde_json::Value>(&deepest).is_ok());
        let too_deep = serde_json::to_vec(&nested(checked::MAX_JSON_DEPTH + 1)).unwrap();
        assert!(
            decode_json::<serde_json::Value>(&too_deep).is_err(),
            "the reader's limit"
        );
        match to_json(&nested(checked::MAX_JSON_DEPTH + 1)) {
            Err(SerializationError::Serialize(reason)) => {
                assert!(reason.contains("nested deeper than 127"), "{reason}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        // Siblings do not add up: the depth is the nesting, not the count.
        let wide = vec![nested(100); 50];
        assert_eq!(to_json(&wide).unwrap(), serde_json::to_vec(&wide).unwrap());
    }

    /// A `RawValue` (serde_json's `raw_value` feature, which a user's crate can turn on) is
    /// written as its text: its nesting counts from where it sits.
    #[test]
    fn to_json_counts_the_nesting_of_raw_values() {
        use serde_json::value::RawValue;
        let raw = |depth: usize| {
            let text = format!(r#"{}"[{{\"]"{}"#, "[".repeat(depth), "]".repeat(depth));
            RawValue::from_string(text).unwrap()
        };
        // Brackets inside strings (with an escaped quote) are text, not nesting.
        let fits = vec![raw(checked::MAX_JSON_DEPTH - 1)];
        let written = to_json(&fits).unwrap();
        assert_eq!(written, serde_json::to_vec(&fits).unwrap());
        assert!(decode_json::<serde_json::Value>(&written).is_ok());
        match to_json(&vec![raw(checked::MAX_JSON_DEPTH)]) {
            Err(SerializationError::Serialize(reason)) => {
                assert!(reason.contains("nested deeper than 127"), "{reason}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// Every finite f64 reads back as itself (serde_json's `float_roundtrip`).
    #[test]
    fn floats_read_back_exactly() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let f = f64::from_bits(x);
            if f.is_finite() {
                let back: f64 = decode_json(&to_json(&f).unwrap()).unwrap();
                assert_eq!(back.to_bits(), f.to_bits(), "{f:e}");
            }
        }
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
