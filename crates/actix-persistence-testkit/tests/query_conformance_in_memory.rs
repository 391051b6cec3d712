//! The query conformance suite against the in-memory store.

mod in_memory {
    actix_persistence_testkit::query_conformance_tests!(|| async {
        actix_persistence_core::InMemoryJournal::new()
    });
}
