//! Slices and entity types: how the persistence ids of a journal are split for queries by
//! slice (as Akka's `sliceForPersistenceId` and `sliceRanges`).

use std::ops::RangeInclusive;

/// The number of slices every persistence id is hashed into: slices are `0..=1023`.
pub const NUMBER_OF_SLICES: u16 = 1024;

/// The character that ends the entity type in a persistence id: `"Account|42"` is id `42` of
/// entity type `"Account"` (as Akka's `PersistenceId.DefaultSeparator`).
pub const ENTITY_TYPE_SEPARATOR: char = '|';

/// The slice of `persistence_id`, in `0..NUMBER_OF_SLICES`.
///
/// The hash is Java's `String.hashCode` (`h = 31 * h + unit` over the UTF-16 code units of the
/// id, wrapping at 32 bits), then `abs(h % 1024)`: the same slice Akka computes for the same
/// id, so a journal can be read by slice ranges from either side. It depends only on the id's
/// characters, never on the platform, the process or the version: it is part of the stored
/// format (the `slice` column) and will not change.
///
/// # Examples
/// ```
/// # use actix_persistence_core as actix_persistence; // the paths of the facade, `actix-persistence`
/// use actix_persistence::query::slice_for_persistence_id;
///
/// assert_eq!(slice_for_persistence_id("a"), 97);
/// assert!(slice_for_persistence_id("Account|42") < 1024);
/// ```
pub fn slice_for_persistence_id(persistence_id: &str) -> u16 {
    let hash = persistence_id.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    // `%` truncates towards zero as Java's does; the result is in -1023..=1023.
    let slice = (hash % i32::from(NUMBER_OF_SLICES)).unsigned_abs();
    // Below 1024, so it fits.
    u16::try_from(slice).unwrap_or(0)
}

/// The entity type of `persistence_id`: the part before the first
/// [`ENTITY_TYPE_SEPARATOR`] (`"Account"` for `"Account|42"`), or `""` when the id holds no
/// separator (all such ids form the entity type `""`).
///
/// # Examples
/// ```
/// # use actix_persistence_core as actix_persistence; // the paths of the facade, `actix-persistence`
/// use actix_persistence::query::entity_type_of;
///
/// assert_eq!(entity_type_of("Account|42"), "Account");
/// assert_eq!(entity_type_of("Account|42|x"), "Account");
/// assert_eq!(entity_type_of("counter-1"), "");
/// ```
pub fn entity_type_of(persistence_id: &str) -> &str {
    persistence_id
        .split_once(ENTITY_TYPE_SEPARATOR)
        .map_or("", |(entity_type, _)| entity_type)
}

/// Splits the slices `0..=1023` into `number_of_ranges` contiguous ranges of equal size (as
/// Akka's `sliceRanges`): each slice lies in exactly one range, so `number_of_ranges` queries
/// (or projection instances), one per range, together read every persistence id once.
///
/// `number_of_ranges` must divide 1024 (1, 2, 4, ..., 1024); any other value is rounded down
/// to the nearest power of two, and 0 is taken as 1.
///
/// # Examples
/// ```
/// # use actix_persistence_core as actix_persistence; // the paths of the facade, `actix-persistence`
/// use actix_persistence::query::slice_ranges;
///
/// assert_eq!(slice_ranges(4), vec![0..=255, 256..=511, 512..=767, 768..=1023]);
/// ```
pub fn slice_ranges(number_of_ranges: u16) -> Vec<RangeInclusive<u16>> {
    let ranges = number_of_ranges.clamp(1, NUMBER_OF_SLICES);
    // The largest power of two not above `ranges`.
    let ranges = 1u16 << (15 - ranges.leading_zeros());
    let size = NUMBER_OF_SLICES / ranges;
    (0..ranges).map(|i| i * size..=(i + 1) * size - 1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_match_java_string_hash_code() {
        // Expected values from an independent implementation of Java's String.hashCode
        // (UTF-16 units, 32-bit wrapping), then abs(hash % 1024).
        for (id, slice) in [
            ("Account|42", 717),
            ("Account|1", 514),
            ("Account|2", 515),
            ("counter-1", 160),
            ("Order|7", 745),
            // hashCode -952390917: negative, the remainder's absolute value
            ("\u{20AC}uro|1", 261),
            // a character outside the BMP hashes as its two UTF-16 units
            ("\u{1F600}", 355),
        ] {
            assert_eq!(slice_for_persistence_id(id), slice, "slice of {id:?}");
        }
    }

    #[test]
    fn slice_ranges_partition_all_slices() {
        for n in [1, 2, 4, 8, 64, 1024] {
            let ranges = slice_ranges(n);
            assert_eq!(ranges.len(), usize::from(n));
            let mut next = 0;
            for range in ranges {
                assert_eq!(*range.start(), next);
                next = range.end() + 1;
            }
            assert_eq!(next, NUMBER_OF_SLICES);
        }
        assert_eq!(slice_ranges(3).len(), 2);
        assert_eq!(slice_ranges(0), vec![0..=1023]);
    }
}
