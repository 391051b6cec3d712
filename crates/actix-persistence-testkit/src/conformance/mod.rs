//! Conformance suites every journal store and snapshot store must pass.
//!
//! The cases are those of `conformance/journal.md` (J1-J27, with J28-J30 of this suite, the fencing cases F1-F5, plus a model check with generated
//! inputs) and `conformance/snapshot-store.md` (S1-S12; S13-S14 this suite's own), with their exact expected values.
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
//! `s14_read_metadata_lists_the_newest`), each running in an Actix system of its own with
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
pub mod query;
mod recording;
pub mod snapshot;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::LocalBoxFuture;
use futures::FutureExt;

pub use journal::{run_journal_suite, JournalCase};
pub use model::{check_journal_against_model, ModelCheckConfig, ModelMismatch};
pub use query::QueryCase;
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

use actix_persistence_core::error::panic_message;

/// Formats `(name, message)` failures of a suite run into one report.
fn failure_report(suite: &str, total: usize, failures: &[(&str, String)]) -> String {
    let mut report = format!(
        "{} of {total} {suite} conformance cases failed:\n",
        failures.len()
    );
    for (name, message) in failures {
        report.push_str(&format!("\n--- {name}\n{message}\n"));
    }
    report
}

/// A case of one of the suites ([`JournalCase`], [`SnapshotCase`]), as the runners below
/// that both suites share see it.
pub(crate) trait Case: Sized + 'static {
    /// The store the case runs against (`dyn JournalStore` or `dyn SnapshotStore`).
    type Store: ?Sized;
    /// How messages name the suite: `"journal"` or `"snapshot store"`.
    const SUITE: &'static str;
    /// Every case of the suite, in order.
    fn all() -> &'static [Self];
    /// The case's name, e.g. `j01_replay_all`.
    fn name(&self) -> &'static str;
    /// Runs the case against `store`.
    fn run(&self, store: Arc<Self::Store>) -> LocalBoxFuture<'static, ()>;
}

/// Runs the case `name` in a new Actix system against the store `factory` gives: `None`
/// skips the case, printing a notice.
///
/// # Panics
/// When no case is called `name`, or the case fails.
pub(crate) fn run_named_case<C, F, Fut>(name: &str, factory: F)
where
    C: Case,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Option<Arc<C::Store>>>,
{
    let Some(case) = C::all().iter().find(|case| case.name() == name) else {
        panic!("no {} conformance case is called {name:?}", C::SUITE);
    };
    run_in_system(async move {
        match factory().await {
            Some(store) => case.run(store).await,
            None => eprintln!(
                "skipped {} conformance case {name}: the factory gave no store",
                C::SUITE
            ),
        }
    });
}

/// Runs every case of the suite, each against a store fresh from `factory`, and reports all
/// failures at once.
///
/// # Panics
/// When any case fails: the message lists every failed case with what differed.
pub(crate) async fn run_every_case<C, F, Fut>(factory: F)
where
    C: Case,
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<C::Store>>,
{
    let mut failures = Vec::new();
    for case in C::all() {
        let store = factory().await;
        if let Err(panic) = AssertUnwindSafe(case.run(store)).catch_unwind().await {
            failures.push((case.name(), panic_message(&*panic)));
        }
    }
    if !failures.is_empty() {
        panic!("{}", failure_report(C::SUITE, C::all().len(), &failures));
    }
}
