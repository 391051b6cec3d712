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
/// If `group >= groups` (a mistake in the test), or if no incarnation routed to `group` within
/// `1000 * groups` tries (the routing helper does not spread incarnations over the groups).
pub fn persistence_state_in_group<A: EventSourced>(
    journal: &Addr<JournalActor>,
    persistence_id: &str,
    group: usize,
    groups: NonZeroUsize,
) -> Result<PersistenceState<A>, InvalidPersistenceId> {
    assert!(
        group < groups.get(),
        "group {group} does not exist among {groups} groups"
    );
    for _ in 0..groups.get().saturating_mul(1000) {
        let state = PersistenceState::new(journal.clone(), persistence_id)?;
        if write_reply_ordering_group(state.incarnation(), groups) == group {
            return Ok(state);
        }
    }
    panic!(
        "no incarnation routed to group {group} of {groups} in {} tries",
        groups.get() * 1000
    );
}
