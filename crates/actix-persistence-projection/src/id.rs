//! The identity of one projection instance.

use std::fmt;

use actix_persistence_core::query::NUMBER_OF_SLICES;

/// Longest projection name, in bytes of UTF-8 (as Akka Projections' `VARCHAR(255)`; a
/// PostgreSQL index entry, at most about 2,700 bytes, holds the name and the key together).
pub const MAX_PROJECTION_NAME_BYTES: usize = 255;
/// Longest projection key, in bytes of UTF-8: room for [`ProjectionId::for_tag`]'s `"tag-"`
/// before the longest tag (255 bytes) or a persistence id.
pub const MAX_PROJECTION_KEY_BYTES: usize = 512;

/// How the key of an instance over a slice range begins.
const SLICES_PREFIX: &str = "slices-";

/// A slice number written as [`ProjectionId::for_slices`] writes it (decimal, no leading zero
/// or sign: the text `u16`'s `Display` gives), below [`NUMBER_OF_SLICES`].
fn canonical_slice(text: &str) -> Option<u16> {
    text.parse::<u16>()
        .ok()
        .filter(|slice| *slice < NUMBER_OF_SLICES && slice.to_string() == text)
}

/// What is wrong with the `part` (name or key) `text` of a projection id, if anything.
fn part_problem(part: &str, text: &str, max_bytes: usize) -> Option<String> {
    if text.is_empty() {
        Some(format!("its {part} is empty"))
    } else if text.len() > max_bytes {
        Some(format!(
            "its {part} is {} bytes long, above the limit of {max_bytes} bytes",
            text.len()
        ))
    } else if text.contains('\0') {
        Some(format!(
            "its {part} holds a NUL character, which PostgreSQL text cannot hold"
        ))
    } else {
        None
    }
}

/// One projection instance: the projection's name and the part of the source it consumes (as
/// Akka Projections' `ProjectionId`). The offset store keeps one row per id.
///
/// A projection split over slice ranges has one instance per range, all with the same name:
/// [`ProjectionId::for_slices`] gives keys such as `"slices-0-255"`, and
/// [`slice_ranges`](crate::slice_ranges) the ranges.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProjectionId {
    /// The projection's name, e.g. `"account-balance"`.
    pub name: String,
    /// The instance's key, e.g. `"slices-0-511"` or `"tag-account"`.
    pub key: String,
}

impl ProjectionId {
    /// An id from a name and a key.
    pub fn new(name: impl Into<String>, key: impl Into<String>) -> Self {
        ProjectionId {
            name: name.into(),
            key: key.into(),
        }
    }

    /// What is wrong with this id for an offset store, if anything: a name or key that is
    /// empty, longer than [`MAX_PROJECTION_NAME_BYTES`] / [`MAX_PROJECTION_KEY_BYTES`], or
    /// holding a NUL character (which PostgreSQL text cannot hold). Every store gives the
    /// same answer: a projection with such an id does not start
    /// ([`ProjectionError::InvalidId`](crate::ProjectionError::InvalidId)).
    pub fn problem(&self) -> Option<String> {
        part_problem("name", &self.name, MAX_PROJECTION_NAME_BYTES)
            .or_else(|| part_problem("key", &self.key, MAX_PROJECTION_KEY_BYTES))
    }

    /// The instance of `name` over slices `min_slice..=max_slice`: key `"slices-<min>-<max>"`.
    pub fn for_slices(name: impl Into<String>, min_slice: u16, max_slice: u16) -> Self {
        Self::new(name, format!("slices-{min_slice}-{max_slice}"))
    }

    /// The slice range of an instance made by [`for_slices`](Self::for_slices): its key is
    /// exactly `"slices-<min>-<max>"` in decimal without leading zeros or signs, with
    /// `min <= max <= 1023`. `None` for any other key, also for one that names the same range
    /// in another spelling (`"slices-00-511"`): two spellings of one range would be two
    /// instances with two stored offsets. A projection whose key starts with `"slices-"` but
    /// is not such a key does not start
    /// ([`ProjectionError::MalformedSliceKey`](crate::ProjectionError::MalformedSliceKey)).
    pub fn slice_range(&self) -> Option<(u16, u16)> {
        let (min, max) = self.key.strip_prefix(SLICES_PREFIX)?.split_once('-')?;
        let (min, max) = (canonical_slice(min)?, canonical_slice(max)?);
        (min <= max).then_some((min, max))
    }

    /// Whether the key claims a slice range (starts with `"slices-"`) without being one that
    /// [`slice_range`](Self::slice_range) reads.
    pub(crate) fn is_malformed_slice_key(&self) -> bool {
        self.key.starts_with(SLICES_PREFIX) && self.slice_range().is_none()
    }

    /// The instance of `name` over the events tagged `tag`: key `"tag-<tag>"`.
    pub fn for_tag(name: impl Into<String>, tag: &str) -> Self {
        Self::new(name, format!("tag-{tag}"))
    }
}

impl fmt::Display for ProjectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.name, self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::ProjectionId;

    #[test]
    fn the_slice_range_is_read_back_from_the_key() {
        assert_eq!(
            ProjectionId::for_slices("p", 256, 511).slice_range(),
            Some((256, 511))
        );
        assert_eq!(ProjectionId::for_tag("p", "slices-1-2").slice_range(), None);
        for key in [
            "slices-2-1",
            "slices-1",
            "slices-a-2",
            "slices-1-2-3",
            "slices--1-2",
            "slices-00-511",
            "slices-0-0511",
            "slices-+1-2",
            "slices-0-1024",
            "slices-0-65535",
            "slices- 1-2",
            "slices-1-2 ",
        ] {
            let id = ProjectionId::new("p", key);
            assert_eq!(id.slice_range(), None, "{key}");
            assert!(id.is_malformed_slice_key(), "{key}");
        }
        assert_eq!(
            ProjectionId::new("p", "slices-0-1023").slice_range(),
            Some((0, 1023))
        );
        assert_eq!(
            ProjectionId::new("p", "slices-10-10").slice_range(),
            Some((10, 10))
        );
        assert!(!ProjectionId::for_tag("p", "x").is_malformed_slice_key());
        assert!(!ProjectionId::for_slices("p", 0, 1023).is_malformed_slice_key());
    }
}
