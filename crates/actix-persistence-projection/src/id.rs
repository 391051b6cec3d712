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
