//! Conformance suites every journal store and snapshot store must pass.
//!
//! The cases are those of `conformance/journal.md` (J1-J26 plus a model check with generated
//! inputs) and `conformance/snapshot-store.md` (S1-S12), with their exact expected values.
//! A store plugin runs them from its own tests with one macro call per store:
//!
//! ```
//! mod in_memory_journal {
//!     actix_persistence_testkit::journal_conformance_tests!(|| async {
//!         actix_persistence_core::InMemoryJournal::new()
//!     });
//! }
//!
//! mod in_memory_snapshots {
//!     actix_persistence_testkit::snapshot_store_conformance_tests!(|| async {
//!         actix_persistence_core::InMemorySnapshotStore::new()
//!     });
//! }
//! # fn main() {}
//! ```
//!
//! Each macro expands into one `#[test]` per case (`j01_replay_all`, ...,
//! `s12_unserializable_snapshot_is_an_error`), each running in an Actix system of its own with
//! a store fresh from the factory. Cases use fresh persistence ids (`p-<uuid>`), so a factory
//! may also hand out one shared store (or several handles on one database).
//!
//! Without the macros, [`run_journal_suite`] and [`run_snapshot_store_suite`] run every case
//! in turn and report all failures at once; [`journal::case`] and [`snapshot::case`] run one;
//! the case functions themselves ([`journal::j01_replay_all`], ...) take a store.

pub mod journal;
mod journal_actor;
mod macros;
pub mod model;
mod recording;
pub mod snapshot;

use std::any::Any;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use journal::{run_journal_suite, JournalCase};
pub use model::{check_journal_against_model, ModelCheckConfig, ModelMismatch};
pub use snapshot::{run_snapshot_store_suite, SnapshotCase};

/// How long a case waits for any one answer of the store or journal before it fails (a guard
/// against a hanging store, not a way to order events).
pub const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// Runs `future` to completion in a new Actix system (a single-threaded Tokio runtime with an
/// arbiter), as `#[actix::test]` does. The conformance macros run every case this way.
///
/// # Panics
/// When called from inside a running Tokio runtime or Actix system; or when `future` panics.
pub fn run_in_system<F: Future>(future: F) -> F::Output {
    actix::System::new().block_on(future)
}

/// Awaits `future`, failing the case if it takes longer than [`ANSWER_WITHIN`].
pub(crate) async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(ANSWER_WITHIN, future).await {
        Ok(value) => value,
        Err(_) => panic!("no answer to {what} within {ANSWER_WITHIN:?}: the store hangs"),
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A fresh persistence id, `p-<uuid>`.
pub(crate) fn fresh_pid() -> String {
    format!("p-{}", uuid::Uuid::new_v4())
}

/// The message of a caught panic.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "the case panicked with a non-string payload".to_owned()
    }
}

/// Formats `(name, message)` failures of a suite run into one report.
pub(crate) fn failure_report(suite: &str, total: usize, failures: &[(&str, String)]) -> String {
    let mut report = format!(
        "{} of {total} {suite} conformance cases failed:\n",
        failures.len()
    );
    for (name, message) in failures {
        report.push_str(&format!("\n--- {name}\n{message}\n"));
    }
    report
}
