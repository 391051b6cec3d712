//! Test helpers for actix-persistence and its store plugins.
//!
//! - [`conformance`]: the suites every journal store (J1-J27 of `conformance/journal.md` and J28-J30 of its own, fencing F1-F5, plus
//!   a proptest model check) and every snapshot store (S1-S14) must pass. A plugin runs them
//!   with one macro call per store, [`journal_conformance_tests!`] and
//!   [`snapshot_store_conformance_tests!`], which expand into one `#[test]` per case.
//! - [`FaultyJournal`]: wraps a store and injects faults a test switches at runtime (delays,
//!   a failing event or commit, no answer, a wrong result count, an unreachable store).
//! - [`DelayingJournal`]: wraps a store and delays a seeded, random share of writes, for
//!   benchmarks.
//! - [`ControlledJournal`]: a journal store whose writes complete only when the test says so,
//!   with the result the test chooses, so ordering tests need no sleeps.
//! - [`ControlledQueryStore`]: a query store whose commit visibility and clock a test
//!   controls, for late commits without sleeps.
//! - [`persistence_state_in_group`]: a persistence state whose incarnation lands in a chosen
//!   write-reply-ordering group, computed with the journal's own routing helper.
//!
//! # Running the conformance suites against a store
//! ```
//! // tests/conformance.rs of a store plugin (with this crate as a dev-dependency)
//! mod journal {
//!     actix_persistence_testkit::journal_conformance_tests!(|| async {
//!         actix_persistence_core::InMemoryJournal::new() // your store here
//!     });
//! }
//!
//! mod snapshots {
//!     actix_persistence_testkit::snapshot_store_conformance_tests!(|| async {
//!         actix_persistence_core::InMemorySnapshotStore::new() // your store here
//!     });
//! }
//! # fn main() {}
//! ```
//! `cargo test` then lists `journal::j01_replay_all` .. `journal::journal_agrees_with_model`
//! and `snapshots::s01_load_unknown_id` .. `snapshots::s14_read_metadata_lists_the_newest`.
//! See `docs/conformance.md` for what each case checks.
#![warn(missing_docs)]

pub mod conformance;
mod controlled;
mod controlled_query;
mod delaying;
mod faulty;
mod groups;
mod guard;

pub use controlled::{Answered, ControlledJournal, Outcome, PendingWrite, WriteController};
pub use controlled_query::{ControlledQueryStore, QueryControl};
pub use delaying::{DelayProfile, DelayedWrite, DelayingJournal};
pub use faulty::{FaultHandle, FaultyJournal, InjectedFault, WrongResultCount};
pub use groups::persistence_state_in_group;
pub use guard::WithGuard;

/// The Actix version the conformance macros run their cases on.
pub use actix;
/// The proptest version of the model check ([`conformance::check_journal_against_model`]).
pub use proptest;
