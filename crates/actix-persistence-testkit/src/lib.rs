//! Test helpers for actix-persistence.
//!
//! - [`ControlledJournal`]: a journal store whose writes complete only when the test says so,
//!   with the result the test chooses, so ordering tests need no sleeps.
//! - [`persistence_state_in_group`]: a persistence state whose incarnation lands in a chosen
//!   write-reply-ordering group, computed with the journal's own routing helper.
#![warn(missing_docs)]

mod controlled;
mod groups;

pub use controlled::{Answered, ControlledJournal, Outcome, PendingWrite, WriteController};
pub use groups::persistence_state_in_group;
