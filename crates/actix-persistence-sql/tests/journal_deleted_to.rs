//! How far events were deleted (`read_deleted_to`), on SQLite and on PostgreSQL: what recovery
//! needs to tell deleted events from sequence numbers no write stored.
#![cfg(any(feature = "sqlite", feature = "test-util"))]

mod common;

use std::sync::Arc;

use actix_persistence_core::{InMemoryJournal, JournalStore, MAX_SEQ_NR};
use common::{atomic, backend_tests, write_all_ok, TestBackend};

backend_tests! {
    deleted_to_rises_with_deletes_and_never_passes_the_highest,
}

async fn deleted_to_rises_with_deletes_and_never_passes_the_highest<B: TestBackend>(db: B) {
    let journal: Arc<dyn JournalStore> = Arc::new(db.journal().await);
    let memory: Arc<dyn JournalStore> = Arc::new(InMemoryJournal::new());
    for store in [&journal, &memory] {
        assert_eq!(
            store.read_deleted_to("d").await.ok(),
            Some(Some(0)),
            "never wrote"
        );
        write_all_ok(store, vec![atomic("d", 1..=5), atomic("other", 1..=2)]).await;
        assert_eq!(store.read_deleted_to("d").await.ok(), Some(Some(0)));
        let steps = [(3, 3), (2, 3), (4, 4), (MAX_SEQ_NR, 5)];
        for (to, expected) in steps {
            store
                .delete_messages_to("d", to, actix_persistence_core::FencingToken::UNOWNED)
                .await
                .expect("deleted");
            assert_eq!(
                store.read_deleted_to("d").await.ok(),
                Some(Some(expected)),
                "after deleting up to {to}"
            );
        }
        assert_eq!(store.read_deleted_to("other").await.ok(), Some(Some(0)));
        assert_eq!(store.read_highest_sequence_nr("d", 0).await.ok(), Some(5));
    }
}
