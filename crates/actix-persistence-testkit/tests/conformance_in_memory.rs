//! The journal and snapshot store conformance suites against the in-memory stores, run the way
//! a store plugin runs them: through the macros, from outside the testkit.

use std::sync::Arc;

use actix_persistence_core::{InMemoryJournal, InMemorySnapshotStore, JournalStore};
use actix_persistence_testkit::conformance::{
    journal, run_journal_suite, run_snapshot_store_suite, snapshot,
};
use actix_persistence_testkit::WithGuard;

mod in_memory_journal {
    actix_persistence_testkit::journal_conformance_tests!(|| async {
        actix_persistence_core::InMemoryJournal::new()
    });
}

mod in_memory_snapshot_store {
    actix_persistence_testkit::snapshot_store_conformance_tests!(|| async {
        actix_persistence_core::InMemorySnapshotStore::new()
    });
}

/// A factory that is an `async fn` returning a boxed store, with an attribute on every test.
mod boxed_journal_from_async_fn {
    use std::sync::Arc;

    use actix_persistence_core::{InMemoryJournal, JournalStore};

    async fn open() -> Arc<dyn JournalStore> {
        Arc::new(InMemoryJournal::new())
    }

    actix_persistence_testkit::journal_conformance_tests!(
        #[cfg_attr(miri, ignore)]
        open
    );
}

/// The `optional:` form with a factory that has a store.
mod optional_snapshot_store_present {
    actix_persistence_testkit::snapshot_store_conformance_tests!(optional: || async {
        Some(actix_persistence_core::InMemorySnapshotStore::new())
    });
}

/// The `optional:` form with a factory that has none: every case is skipped and passes.
mod optional_journal_absent {
    actix_persistence_testkit::journal_conformance_tests!(optional: || async {
        None::<actix_persistence_core::InMemoryJournal>
    });
}

#[actix::test]
async fn the_whole_journal_suite_passes_on_one_store_shared_by_every_case() {
    let shared = InMemoryJournal::new();
    run_journal_suite(|| {
        let store = shared.clone();
        async move { store }
    })
    .await;
}

#[actix::test]
async fn the_whole_snapshot_suite_passes_with_a_guarded_store() {
    run_snapshot_store_suite(|| async { WithGuard::new(InMemorySnapshotStore::new(), ()) }).await;
}

#[test]
fn the_case_tables_hold_every_numbered_case_once_in_order() {
    let journal_names: Vec<_> = journal::CASES.iter().map(|c| c.name).collect();
    assert_eq!(journal_names.len(), 36, "J1-J30, F1-F5 and the model check");
    for (i, name) in journal_names.iter().take(30).enumerate() {
        assert!(
            name.starts_with(&format!("j{:02}_", i + 1)),
            "case #{i} is {name}"
        );
    }
    for (i, name) in journal_names[30..35].iter().enumerate() {
        assert!(
            name.starts_with(&format!("f{:02}_", i + 1)),
            "fencing case #{i} is {name}"
        );
    }
    assert_eq!(journal_names[35], "journal_agrees_with_model");

    let snapshot_names: Vec<_> = snapshot::CASES.iter().map(|c| c.name).collect();
    assert_eq!(snapshot_names.len(), 14, "S1-S14");
    for (i, name) in snapshot_names.iter().enumerate() {
        assert!(
            name.starts_with(&format!("s{:02}_", i + 1)),
            "case #{i} is {name}"
        );
    }
    assert!(journal::case("j99_nothing").is_none());
    assert!(snapshot::case("s04_load_latest").is_some());
}

#[test]
#[should_panic(expected = "no journal conformance case is called \"j99_nothing\"")]
fn running_an_unknown_case_fails_loudly() {
    journal::run_case("j99_nothing", || async {
        Arc::new(InMemoryJournal::new()) as Arc<dyn JournalStore>
    });
}
