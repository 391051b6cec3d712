//! Events for the crate's own unit tests.

use actix_persistence_core::PersistentRepr;

/// Event `seq_nr` of `pid` with payload `{}` and the tags `tags`.
pub(crate) fn event(pid: &str, seq_nr: u64, tags: &[&str]) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload: b"{}".to_vec(),
        serializer_id: 1,
        manifest: String::new(),
        writer_uuid: "w".into(),
        timestamp: 0,
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
    }
}
