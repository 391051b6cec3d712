//! The in-memory store's events of one persistence id: a sorted sequence kept in chunks, so
//! that appending never moves what is stored.

use std::collections::VecDeque;

/// Elements per chunk once the first chunk has grown: 64 events of ~136 bytes, ~8.7 KiB.
const CHUNK: usize = 64;

/// Elements kept in order (the caller keeps them sorted by its key) in chunks, none empty.
///
/// A `VecDeque` copies every element it holds each time it grows: per appended event, about
/// one event's bytes copied (amortized), and a `realloc` of a growing block. Here the first
/// chunk grows as a `Vec` does up to [`CHUNK`] elements (an id with few events takes little
/// memory); every later chunk is allocated once at [`CHUNK`] elements, so appending moves no
/// stored element. Inserting in the middle (a write below the highest stored number, rare)
/// shifts the rest of one chunk, which may then grow past [`CHUNK`].
#[derive(Debug)]
pub(super) struct Chunks<T> {
    chunks: VecDeque<Vec<T>>,
}

/// A place in [`Chunks`]: the chunk and the index in it (`chunk == chunks.len()` at the end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Place {
    chunk: usize,
    index: usize,
}

impl<T> Default for Chunks<T> {
    fn default() -> Self {
        Chunks {
            chunks: VecDeque::new(),
        }
    }
}

impl<T> Chunks<T> {
    /// The last element.
    pub(super) fn back(&self) -> Option<&T> {
        self.chunks.back().and_then(|chunk| chunk.last())
    }

    /// Appends `value`.
    pub(super) fn push_back(&mut self, value: T) {
        match self.chunks.back_mut() {
            Some(last) if last.len() < CHUNK => last.push(value),
            Some(_) => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(value);
                self.chunks.push_back(chunk);
            }
            None => self.chunks.push_back(vec![value]),
        }
    }

    /// The place of the first element for which `pred` is false (the end if none is), where
    /// `pred` holds for a prefix of the elements and not after it, as
    /// [`slice::partition_point`].
    pub(super) fn partition_point(&self, mut pred: impl FnMut(&T) -> bool) -> Place {
        // Every element of the chunks before `chunk` satisfies `pred` (their last ones do).
        let chunk = self
            .chunks
            .partition_point(|chunk| chunk.last().is_some_and(&mut pred));
        let index = self
            .chunks
            .get(chunk)
            .map_or(0, |elements| elements.partition_point(&mut pred));
        Place { chunk, index }
    }

    /// The element at `place`, if there is one.
    pub(super) fn get(&self, place: Place) -> Option<&T> {
        self.chunks.get(place.chunk)?.get(place.index)
    }

    /// Inserts `value` at `place`, before the element there.
    pub(super) fn insert(&mut self, place: Place, value: T) {
        match self.chunks.get_mut(place.chunk) {
            Some(chunk) => chunk.insert(place.index, value),
            None => self.push_back(value),
        }
    }

    /// The elements from `place` on.
    pub(super) fn from(&self, place: Place) -> impl Iterator<Item = &T> {
        self.chunks
            .range(place.chunk.min(self.chunks.len())..)
            .enumerate()
            .flat_map(move |(i, chunk)| {
                let skip = if i == 0 { place.index } else { 0 };
                chunk.get(skip..).unwrap_or_default()
            })
    }

    /// The elements before `place`.
    pub(super) fn before(&self, place: Place) -> impl DoubleEndedIterator<Item = &T> {
        let whole = place.chunk.min(self.chunks.len());
        let part = self
            .chunks
            .get(place.chunk)
            .and_then(|chunk| chunk.get(..place.index))
            .unwrap_or_default();
        self.chunks
            .range(..whole)
            .flat_map(|chunk| chunk.iter())
            .chain(part)
    }

    /// Removes the elements before `place`; returns how many there were.
    pub(super) fn remove_before(&mut self, place: Place) -> usize {
        let whole = place.chunk.min(self.chunks.len());
        let mut removed: usize = self.chunks.drain(..whole).map(|chunk| chunk.len()).sum();
        if let Some(first) = self.chunks.front_mut() {
            let index = place.index.min(first.len());
            first.drain(..index);
            removed += index;
            if first.is_empty() {
                self.chunks.pop_front();
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(n: u64) -> Chunks<u64> {
        let mut chunks = Chunks::default();
        for value in 1..=n {
            chunks.push_back(value * 10);
        }
        chunks
    }

    fn place_of(chunks: &Chunks<u64>, value: u64) -> Place {
        chunks.partition_point(|v| *v < value)
    }

    #[test]
    fn appending_keeps_every_stored_element_where_it_is() {
        let mut chunks = filled(CHUNK as u64);
        let first = chunks.get(place_of(&chunks, 10)).map(|v| v as *const u64);
        for value in CHUNK as u64 + 1..=4 * CHUNK as u64 {
            chunks.push_back(value * 10);
        }
        assert_eq!(
            chunks.get(place_of(&chunks, 10)).map(|v| v as *const u64),
            first,
            "the first element was not moved by the appends after its chunk filled"
        );
        assert_eq!(chunks.chunks.len(), 4);
        assert!(chunks.chunks.iter().all(|chunk| chunk.len() == CHUNK));
    }

    #[test]
    fn finds_iterates_and_inserts_across_chunks() {
        let n = 3 * CHUNK as u64 + 5;
        let mut chunks = filled(n);
        assert_eq!(chunks.back(), Some(&(n * 10)));
        for value in [10, 640, 650, 1280, n * 10] {
            assert_eq!(chunks.get(place_of(&chunks, value)), Some(&value));
        }
        assert_eq!(chunks.get(place_of(&chunks, 645)), Some(&650));
        assert_eq!(chunks.get(place_of(&chunks, n * 10 + 1)), None);
        let from: Vec<u64> = chunks
            .from(place_of(&chunks, 630))
            .take(3)
            .copied()
            .collect();
        assert_eq!(from, [630, 640, 650]);
        assert_eq!(chunks.from(place_of(&chunks, 10)).count() as u64, n);
        let before: Vec<u64> = chunks
            .before(place_of(&chunks, 660))
            .rev()
            .take(3)
            .copied()
            .collect();
        assert_eq!(before, [650, 640, 630]);
        assert_eq!(chunks.before(place_of(&chunks, u64::MAX)).count() as u64, n);
        // In the middle of a chunk, and past the end.
        chunks.insert(place_of(&chunks, 645), 645);
        chunks.push_back(n * 10 + 10);
        let all: Vec<u64> = chunks.from(place_of(&chunks, 0)).copied().collect();
        let mut expected: Vec<u64> = (1..=n + 1).map(|v| v * 10).collect();
        expected.insert(64, 645);
        assert_eq!(all, expected);
    }

    #[test]
    fn removing_a_prefix_drops_whole_chunks_and_part_of_the_next() {
        let mut chunks = filled(3 * CHUNK as u64);
        let removed = chunks.remove_before(place_of(&chunks, (CHUNK as u64 + 3) * 10));
        assert_eq!(removed, CHUNK + 2);
        assert_eq!(
            chunks.from(place_of(&chunks, 0)).next(),
            Some(&((CHUNK as u64 + 3) * 10))
        );
        assert_eq!(chunks.from(place_of(&chunks, 0)).count(), 2 * CHUNK - 2);
        // Everything: no empty chunk is left behind.
        let removed = chunks.remove_before(place_of(&chunks, u64::MAX));
        assert_eq!(removed, 2 * CHUNK - 2);
        assert!(chunks.chunks.is_empty());
        assert_eq!(chunks.back(), None);
        chunks.push_back(7);
        assert_eq!(chunks.back(), Some(&7));
    }
}
