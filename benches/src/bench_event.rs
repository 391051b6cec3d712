//! The event the recovery and catch-up benchmarks store, so that their figures compare the
//! same events: a JSON object of about 100 bytes (the size issue 12's recovery target names),
//! tagged `bench` (a query by tag reads it too).

use serde::{Deserialize, Serialize};

use actix_persistence_core::serialization::JSON_SERIALIZER_ID;
use actix_persistence_core::PersistentRepr;

/// The tag of every [`repr`].
pub const TAG: &str = "bench";

/// A deposit into an account: [`payload`] serialized, 98-112 bytes of JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deposited {
    /// The account, the persistence id's own.
    pub account: String,
    /// Always 1: a replay's total is its event count.
    pub amount: u64,
    /// An ISO 4217 code.
    pub currency: String,
    /// A reference unique per event (the sequence number, zero-padded).
    pub reference: String,
}

impl Deposited {
    /// Event `seq_nr` of persistence id `pid`.
    pub fn new(pid: &str, seq_nr: u64) -> Self {
        Deposited {
            account: pid.to_owned(),
            amount: 1,
            currency: "EUR".to_owned(),
            reference: format!("deposit-{seq_nr:012}-{}", "booked-by-bench"),
        }
    }
}

/// The JSON of event `seq_nr` of `pid` ([`Deposited`]).
pub fn payload(pid: &str, seq_nr: u64) -> Vec<u8> {
    // A struct of strings and a number always serializes.
    serde_json::to_vec(&Deposited::new(pid, seq_nr)).unwrap_or_default()
}

/// Event `seq_nr` of `pid` as stored: [`payload`] with the JSON serializer, tagged [`TAG`],
/// written by `writer_uuid`.
pub fn repr(pid: &str, seq_nr: u64, writer_uuid: &str) -> PersistentRepr {
    repr_padded(pid, seq_nr, writer_uuid, 0)
}

/// As [`repr`], its [`Deposited::reference`] padded so that the JSON is about `payload_bytes`
/// long (bytes; unpadded when that is below [`payload`]'s length).
pub fn repr_padded(
    pid: &str,
    seq_nr: u64,
    writer_uuid: &str,
    payload_bytes: usize,
) -> PersistentRepr {
    let mut event = Deposited::new(pid, seq_nr);
    // A struct of strings and a number always serializes.
    let mut payload = serde_json::to_vec(&event).unwrap_or_default();
    if payload_bytes > payload.len() {
        let padding = "x".repeat(payload_bytes - payload.len());
        event.reference.push_str(&padding);
        payload = serde_json::to_vec(&event).unwrap_or_default();
    }
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload,
        serializer_id: JSON_SERIALIZER_ID,
        manifest: String::new(),
        writer_uuid: writer_uuid.into(),
        timestamp: 0,
        tags: vec![TAG.to_owned()].into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_about_100_bytes_of_json_and_reads_back() {
        for (pid, seq_nr) in [
            ("Bench|0", 1),
            ("Bench|9999", 100),
            ("recovery-speed", 1_000_000),
        ] {
            let bytes = payload(pid, seq_nr);
            assert!(
                (95..=115).contains(&bytes.len()),
                "{} bytes: {}",
                bytes.len(),
                String::from_utf8_lossy(&bytes)
            );
            let event: Deposited = serde_json::from_slice(&bytes).expect("JSON");
            assert_eq!(event, Deposited::new(pid, seq_nr));
        }
    }

    #[test]
    fn a_padded_event_is_as_long_as_asked_and_reads_back() {
        let unpadded = repr_padded("Bench|1", 7, "w", 0);
        assert_eq!(unpadded.payload, payload("Bench|1", 7));
        let padded = repr_padded("Bench|1", 7, "w", 8192);
        assert_eq!(padded.payload.len(), 8192);
        let event: Deposited = serde_json::from_slice(&padded.payload).expect("JSON");
        assert_eq!(event.account, "Bench|1");
        assert_eq!(event.amount, 1);
    }
}
