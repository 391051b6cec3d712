//! An event's tags, shared: the events of a query page that carry the same tags hold one
//! allocation.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// The tags of one event (see `EventSourced::tags`), in the order the actor gave them: an
/// immutable list of strings whose clone is O(1) (a reference count; no tags, no allocation).
///
/// Events are read back in pages, and the events of a page mostly carry the same tags: a store
/// decoding a page shares one `Tags` among a run of rows with equal tags ([`TagsInterner`]), so
/// an event's tags cost no allocation of their own. A `Vec<String>` per event cost two
/// allocations (on the reading thread, freed on the consumer's) and a parse: a catch-up that
/// read no tags at all ran 1.1-1.3x faster on SQLite (docs/benchmarks.md, "Session 25").
///
/// It reads as a `&[String]` (`Deref`): `tags.iter()`, `tags.len()`, `tags.is_empty()`,
/// `tags.contains(..)`, `tags[0]`, and compares with a `Vec<String>`, a slice or an array of
/// anything a `String` compares with.
///
/// # Examples
/// ```
/// use actix_persistence_core::Tags;
///
/// let tags = Tags::from(vec!["account".to_owned(), "eur".to_owned()]);
/// assert_eq!(tags.len(), 2);
/// assert!(tags.iter().any(|tag| tag == "eur"));
/// assert_eq!(tags, ["account", "eur"]);
///
/// let shared = tags.clone(); // no copy of the strings
/// assert!(Tags::ptr_eq(&tags, &shared));
/// assert!(Tags::default().is_empty());
/// ```
#[derive(Clone, Default)]
pub struct Tags(
    /// `None` for no tags: never `Some` of an empty slice (every constructor goes through
    /// `From<Vec<String>>`). Equality, order and hash compare the slices all the same.
    Option<Arc<[String]>>,
);

impl Tags {
    /// No tags (no allocation).
    pub const fn new() -> Self {
        Tags(None)
    }

    /// Whether `a` and `b` share one allocation (clones of one `Tags`; two empty ones do).
    pub fn ptr_eq(a: &Tags, b: &Tags) -> bool {
        match (&a.0, &b.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }

    /// The tags as a slice.
    pub fn as_slice(&self) -> &[String] {
        self.0.as_deref().unwrap_or(&[])
    }
}

impl PartialEq for Tags {
    fn eq(&self, other: &Tags) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Tags {}

impl std::hash::Hash for Tags {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl PartialOrd for Tags {
    fn partial_cmp(&self, other: &Tags) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Tags {
    fn cmp(&self, other: &Tags) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl Deref for Tags {
    type Target = [String];

    fn deref(&self) -> &[String] {
        self.as_slice()
    }
}

impl AsRef<[String]> for Tags {
    fn as_ref(&self) -> &[String] {
        self.as_slice()
    }
}

impl fmt::Debug for Tags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl From<Vec<String>> for Tags {
    fn from(tags: Vec<String>) -> Self {
        if tags.is_empty() {
            Tags(None)
        } else {
            Tags(Some(Arc::from(tags)))
        }
    }
}

impl From<&[String]> for Tags {
    fn from(tags: &[String]) -> Self {
        tags.to_vec().into()
    }
}

impl From<&[&str]> for Tags {
    fn from(tags: &[&str]) -> Self {
        tags.iter().map(|tag| (*tag).to_owned()).collect()
    }
}

impl<const N: usize> From<[&str; N]> for Tags {
    fn from(tags: [&str; N]) -> Self {
        tags.as_slice().into()
    }
}

impl From<Tags> for Vec<String> {
    fn from(tags: Tags) -> Self {
        tags.to_vec()
    }
}

impl<S: Into<String>> FromIterator<S> for Tags {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        iter.into_iter()
            .map(Into::into)
            .collect::<Vec<String>>()
            .into()
    }
}

impl<'a> IntoIterator for &'a Tags {
    type Item = &'a String;
    type IntoIter = std::slice::Iter<'a, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<S> PartialEq<Vec<S>> for Tags
where
    String: PartialEq<S>,
{
    fn eq(&self, other: &Vec<S>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl PartialEq<Tags> for Vec<String> {
    fn eq(&self, other: &Tags) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<S> PartialEq<[S]> for Tags
where
    String: PartialEq<S>,
{
    fn eq(&self, other: &[S]) -> bool {
        self.as_slice() == other
    }
}

impl<S> PartialEq<&[S]> for Tags
where
    String: PartialEq<S>,
{
    fn eq(&self, other: &&[S]) -> bool {
        self.as_slice() == *other
    }
}

impl<S, const N: usize> PartialEq<[S; N]> for Tags
where
    String: PartialEq<S>,
{
    fn eq(&self, other: &[S; N]) -> bool {
        self.as_slice() == other
    }
}

impl serde::Serialize for Tags {
    fn serialize<Z: serde::Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> serde::Deserialize<'de> for Tags {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<String>::deserialize(deserializer).map(Tags::from)
    }
}

/// Shares one [`Tags`] among a run of rows whose stored tags are the same bytes: a store
/// decoding a page keeps one interner for the page and hands each row's stored form (JSON
/// text, an array's binary form, ...) to [`intern_with`](Self::intern_with) with the decoder
/// for it, which runs only when the bytes differ from the previous row's.
///
/// # Examples
/// ```
/// use actix_persistence_core::{Tags, TagsInterner};
///
/// let mut tags = TagsInterner::new();
/// let decode = |text: &[u8]| -> Result<Tags, String> {
///     serde_json::from_slice::<Vec<String>>(text).map(Tags::from).map_err(|e| e.to_string())
/// };
/// let a = tags.intern_with(br#"["bench"]"#, decode).unwrap();
/// let b = tags.intern_with(br#"["bench"]"#, decode).unwrap();
/// assert!(Tags::ptr_eq(&a, &b));
/// assert_eq!(a, ["bench"]);
/// ```
#[derive(Debug, Clone, Default)]
pub struct TagsInterner {
    /// The previous row's stored bytes and the tags decoded from them.
    last: Option<(Vec<u8>, Tags)>,
}

impl TagsInterner {
    /// An interner that holds nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The tags stored as `stored`: a clone of the previous call's when `stored` is the same
    /// bytes, else `decode(stored)`, kept for the next call.
    ///
    /// # Errors
    /// What `decode` returns for bytes it cannot read (nothing is kept then).
    #[inline]
    pub fn intern_with<E>(
        &mut self,
        stored: &[u8],
        decode: impl FnOnce(&[u8]) -> Result<Tags, E>,
    ) -> Result<Tags, E> {
        if let Some((bytes, tags)) = &self.last {
            if bytes.as_slice() == stored {
                return Ok(tags.clone());
            }
        }
        let tags = decode(stored)?;
        match &mut self.last {
            Some((bytes, kept)) => {
                bytes.clear();
                bytes.extend_from_slice(stored);
                kept.clone_from(&tags);
            }
            None => self.last = Some((stored.to_vec(), tags.clone())),
        }
        Ok(tags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_tags_allocate_nothing_and_compare_equal() {
        assert_eq!(Tags::from(Vec::new()), Tags::new());
        assert!(Tags::from(Vec::new()).0.is_none());
        assert!(Tags::new().is_empty());
        assert_eq!(Tags::new(), Vec::<String>::new());
    }

    #[test]
    fn tags_keep_their_order_and_compare_with_lists() {
        let tags = Tags::from(vec!["b".to_owned(), "a".to_owned()]);
        assert_eq!(tags, ["b", "a"]);
        assert_ne!(tags, ["a", "b"]);
        assert_eq!(tags, vec!["b".to_owned(), "a".to_owned()]);
        assert_eq!(vec!["b".to_owned(), "a".to_owned()], tags);
        assert_eq!(Vec::<String>::from(tags.clone()), ["b", "a"]);
        assert_eq!(format!("{tags:?}"), r#"["b", "a"]"#);
        assert_eq!(tags, ["b", "a"].into_iter().collect::<Tags>());
    }

    #[test]
    fn equality_order_and_hash_are_the_slices() {
        use std::collections::hash_map::DefaultHasher;
        use std::hash::{Hash, Hasher};
        let hash = |tags: &Tags| {
            let mut hasher = DefaultHasher::new();
            tags.hash(&mut hasher);
            hasher.finish()
        };
        // An empty slice, were one ever held, is no tags.
        let empty_slice = Tags(Some(Arc::from(Vec::<String>::new())));
        assert_eq!(empty_slice, Tags::new());
        assert_eq!(hash(&empty_slice), hash(&Tags::new()));
        assert_eq!(empty_slice.cmp(&Tags::new()), std::cmp::Ordering::Equal);
        let a = Tags::from(["a"]);
        let b = Tags::from(["b"]);
        assert!(Tags::new() < a && a < b);
        assert_eq!(hash(&a), hash(&Tags::from(["a"])));
    }

    #[test]
    fn tags_serialize_as_a_list() {
        let tags = Tags::from(["x", "y z"]);
        let json = serde_json::to_string(&tags).expect("JSON");
        assert_eq!(json, r#"["x","y z"]"#);
        let back: Tags = serde_json::from_str(&json).expect("JSON");
        assert_eq!(back, tags);
    }

    #[test]
    fn a_run_of_equal_stored_tags_decodes_once() {
        let mut interner = TagsInterner::new();
        let mut decoded = 0;
        let mut decode = |stored: &[u8]| -> Result<Tags, String> {
            decoded += 1;
            let text = std::str::from_utf8(stored).map_err(|e| e.to_string())?;
            Ok(text.split(',').collect())
        };
        let a = interner.intern_with(b"x,y", &mut decode).expect("tags");
        let b = interner.intern_with(b"x,y", &mut decode).expect("tags");
        let c = interner.intern_with(b"z", &mut decode).expect("tags");
        let d = interner.intern_with(b"x,y", &mut decode).expect("tags");
        assert!(Tags::ptr_eq(&a, &b));
        assert!(!Tags::ptr_eq(&b, &d));
        assert_eq!(
            (&a, &c, &d),
            (
                &Tags::from(["x", "y"]),
                &Tags::from(["z"]),
                &Tags::from(["x", "y"])
            )
        );
        // Bytes that do not decode keep nothing: the tags before them are still shared.
        assert!(interner.intern_with(b"\xff", &mut decode).is_err());
        let e = interner.intern_with(b"x,y", &mut decode).expect("tags");
        assert!(Tags::ptr_eq(&d, &e));
        assert_eq!(decoded, 4);
    }
}
