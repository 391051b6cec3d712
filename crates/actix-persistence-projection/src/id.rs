//! The identity of one projection instance.

use std::fmt;

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

    /// The instance of `name` over slices `min_slice..=max_slice`: key `"slices-<min>-<max>"`.
    pub fn for_slices(name: impl Into<String>, min_slice: u16, max_slice: u16) -> Self {
        Self::new(name, format!("slices-{min_slice}-{max_slice}"))
    }

    /// The slice range of an instance made by [`for_slices`](Self::for_slices) (its key is
    /// `"slices-<min>-<max>"`, `min <= max`); `None` for any other key.
    pub fn slice_range(&self) -> Option<(u16, u16)> {
        let (min, max) = self.key.strip_prefix("slices-")?.split_once('-')?;
        let (min, max) = (min.parse::<u16>().ok()?, max.parse::<u16>().ok()?);
        (min <= max).then_some((min, max))
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
        ] {
            assert_eq!(ProjectionId::new("p", key).slice_range(), None, "{key}");
        }
    }
}
