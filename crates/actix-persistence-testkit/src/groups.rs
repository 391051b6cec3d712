use std::num::NonZeroUsize;

use actix::Addr;
use actix_persistence_core::journal::{write_reply_ordering_group, JournalActor};
use actix_persistence_core::persistent::{EventSourced, PersistenceState};
use actix_persistence_core::InvalidPersistenceId;

/// A fresh [`PersistenceState`] for `persistence_id` whose incarnation routes to `group` of
/// `groups`, found with the journal's own [`write_reply_ordering_group`] (never by chance).
///
/// # Errors
/// [`InvalidPersistenceId`] for an invalid id.
///
/// # Panics
/// If `group >= groups` (a mistake in the test).
pub fn persistence_state_in_group<A: EventSourced>(
    journal: &Addr<JournalActor>,
    persistence_id: &str,
    group: usize,
    groups: NonZeroUsize,
) -> Result<PersistenceState<A>, InvalidPersistenceId> {
    assert!(group < groups.get(), "group {group} does not exist among {groups} groups");
    loop {
        let state = PersistenceState::new(journal.clone(), persistence_id)?;
        if write_reply_ordering_group(state.incarnation(), groups) == group {
            return Ok(state);
        }
    }
}
