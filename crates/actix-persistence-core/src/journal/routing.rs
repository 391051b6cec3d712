use std::num::NonZeroUsize;

use super::Incarnation;

/// The write-reply-ordering group of a persistent actor incarnation: `incarnation mod groups`,
/// always in `0..groups`.
///
/// The one routing formula: the journal actor and the tests both call it. The group depends on
/// the incarnation, never on the persistence id, so an actor that is stopped and started again
/// may land in another group; replies stay ordered for each incarnation either way.
///
/// # Examples
/// ```
/// # use std::num::NonZeroUsize;
/// use actix_persistence_core::journal::{write_reply_ordering_group, Incarnation};
/// let groups = NonZeroUsize::new(4).unwrap();
/// assert_eq!(write_reply_ordering_group(Incarnation::from_raw(10), groups), 2);
/// assert_eq!(write_reply_ordering_group(Incarnation::from_raw(u64::MAX), groups), 3);
/// ```
pub fn write_reply_ordering_group(incarnation: Incarnation, groups: NonZeroUsize) -> usize {
    // usize -> u64 is lossless on every supported target, and the remainder is < groups.
    (incarnation.get() % groups.get() as u64) as usize
}
