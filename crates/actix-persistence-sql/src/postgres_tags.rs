//! An event's tags (`TEXT[]`) read straight from PostgreSQL's binary array format.
//!
//! sqlx's `Vec<String>` decodes an array element by element through a `PgValueRef` of its own
//! each, with the element's type info built and compared: 725 instructions per replayed event
//! with one tag, a tenth of a PostgreSQL replay's client work, and 808 per event of a
//! catch-up (callgrind, docs/benchmarks.md, issue 8, session 13). The format is a header and
//! length-prefixed elements; reading it is a few comparisons and the strings' allocations.
//! The journal reads the column's value as bytes and decodes it here once per run of rows
//! stored with the same tags (`TagsInterner`). Only the binary format is read: every read of
//! the journal is a prepared statement, whose results sqlx asks for in binary (a text-format
//! value would be a corrupt row's error, not tags misread).

/// `pg_type.oid` of `text`: the element type of the journal's `tags` column.
const TEXT_OID: u32 = 25;

/// `pg_type.oid`s of the other types whose binary form is their text, which sqlx's `String`
/// reads too: `varchar`, `name`, `bpchar` (`char(n)`, its padding kept) and `unknown`. A column
/// an operator altered to an array of one of them still reads back.
const TEXT_LIKE_OIDS: [u32; 5] = [TEXT_OID, 1043, 19, 1042, 705];

/// Why a binary `TEXT[]` value is not an event's tags.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum TagsError {
    /// The value ends before its header or an element says it does.
    #[error("the tags array is truncated")]
    Truncated,
    /// Bytes follow the last element.
    #[error("the tags array has {0} bytes after its last element")]
    TrailingBytes(usize),
    /// More than one dimension.
    #[error("the tags array has {0} dimensions, not 1")]
    Dimensions(i32),
    /// Elements of a type other than `text` (or one read as text), or a value that is not
    /// an array at all (its first bytes read as a header).
    #[error("not an array of text (element type oid {0}); the column must be TEXT[]")]
    ElementType(u32),
    /// A NULL element (the journal never stores one), or a negative element length.
    #[error("the tags array holds a NULL")]
    Null,
    /// An element that is not UTF-8.
    #[error("a tag is not UTF-8: {0}")]
    NotUtf8(#[from] std::str::Utf8Error),
}

/// The tags of a `TEXT[]` in PostgreSQL's binary format (`array_send`): the number of
/// dimensions, a has-NULLs flag, the element type's oid, per dimension its length and lower
/// bound, then each element as a 4-byte length (-1: NULL) and its bytes; all big-endian.
pub(crate) fn from_binary(bytes: &[u8]) -> Result<Vec<String>, TagsError> {
    let mut rest = bytes;
    let dimensions = i32::from_be_bytes(take_word(&mut rest)?);
    let _has_nulls = take_word(&mut rest)?;
    let element_type = u32::from_be_bytes(take_word(&mut rest)?);
    if !TEXT_LIKE_OIDS.contains(&element_type) {
        return Err(TagsError::ElementType(element_type));
    }
    let len = match dimensions {
        0 => 0,
        1 => {
            let len = i32::from_be_bytes(take_word(&mut rest)?);
            let _lower_bound = take_word(&mut rest)?;
            usize::try_from(len).map_err(|_| TagsError::Truncated)?
        }
        n => return Err(TagsError::Dimensions(n)),
    };
    // Each element takes 4 bytes at least: a length beyond the value is truncated, not a
    // reason to reserve room for it.
    let mut tags = Vec::with_capacity(len.min(rest.len() / 4));
    for _ in 0..len {
        // -1 (NULL) and any other negative length fail the conversion.
        let element_len = usize::try_from(i32::from_be_bytes(take_word(&mut rest)?))
            .map_err(|_| TagsError::Null)?;
        if element_len > rest.len() {
            return Err(TagsError::Truncated);
        }
        let (element, tail) = rest.split_at(element_len);
        tags.push(std::str::from_utf8(element)?.to_owned());
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(TagsError::TrailingBytes(rest.len()));
    }
    Ok(tags)
}

/// The next 4 bytes of `rest` (a big-endian integer of the format), taken off it.
fn take_word(rest: &mut &[u8]) -> Result<[u8; 4], TagsError> {
    let (head, tail) = rest.split_first_chunk::<4>().ok_or(TagsError::Truncated)?;
    *rest = tail;
    Ok(*head)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tags` as PostgreSQL's `array_send` writes a one-dimensional `TEXT[]` (lower bound 1).
    fn binary(tags: &[&str]) -> Vec<u8> {
        let mut bytes = Vec::new();
        if tags.is_empty() {
            bytes.extend(0i32.to_be_bytes());
            bytes.extend(0i32.to_be_bytes());
            bytes.extend(TEXT_OID.to_be_bytes());
            return bytes;
        }
        bytes.extend(1i32.to_be_bytes());
        bytes.extend(0i32.to_be_bytes());
        bytes.extend(TEXT_OID.to_be_bytes());
        bytes.extend(i32::try_from(tags.len()).expect("len").to_be_bytes());
        bytes.extend(1i32.to_be_bytes());
        for tag in tags {
            bytes.extend(i32::try_from(tag.len()).expect("len").to_be_bytes());
            bytes.extend(tag.as_bytes());
        }
        bytes
    }

    #[test]
    fn tags_read_back_as_written() {
        for tags in [
            vec![],
            vec![""],
            vec!["bench"],
            vec!["a", "", "b,c", "\"q\"", "é日本", "{NULL}"],
        ] {
            assert_eq!(
                from_binary(&binary(&tags)),
                Ok(tags.iter().map(|t| t.to_string()).collect())
            );
        }
    }

    #[test]
    fn malformed_arrays_are_errors_not_panics() {
        let good = binary(&["ab", "cd"]);
        for cut in 0..good.len() {
            assert!(from_binary(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(from_binary(&trailing), Err(TagsError::TrailingBytes(1)));
        let mut varchar_array = good.clone();
        varchar_array[8..12].copy_from_slice(&1043u32.to_be_bytes());
        assert_eq!(
            from_binary(&varchar_array),
            Ok(vec!["ab".to_owned(), "cd".to_owned()])
        );
        let mut int_array = good.clone();
        int_array[8..12].copy_from_slice(&23u32.to_be_bytes());
        assert_eq!(from_binary(&int_array), Err(TagsError::ElementType(23)));
        let mut two_dimensions = good.clone();
        two_dimensions[0..4].copy_from_slice(&2i32.to_be_bytes());
        assert_eq!(from_binary(&two_dimensions), Err(TagsError::Dimensions(2)));
        let mut null = binary(&["ab"]);
        null[20..24].copy_from_slice(&(-1i32).to_be_bytes());
        null.truncate(24);
        assert_eq!(from_binary(&null), Err(TagsError::Null));
        let mut not_utf8 = binary(&["ab"]);
        not_utf8[24] = 0xff;
        assert!(matches!(from_binary(&not_utf8), Err(TagsError::NotUtf8(_))));
        let mut huge = binary(&["ab"]);
        huge[12..16].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(from_binary(&huge), Err(TagsError::Truncated));
    }
}
