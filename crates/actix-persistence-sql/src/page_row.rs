//! A journal row of a page read in one piece ([`sqlite_page`](crate::sqlite_page), SQLite),
//! as the code both SQL journals share decodes it into an event.

use std::ops::Range;

/// One event of a page, its values borrowed from the page, from which the event's own are
/// built (the caller shares one `Arc` per run of rows for the writer uuid and the persistence
/// id; see [`RawPage`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageRow<'a> {
    /// `seq_nr` as stored.
    pub seq_nr: i64,
    /// `writer_uuid`: the caller shares one `Arc` per run of rows of one writer.
    pub writer_uuid: &'a str,
    /// `write_timestamp`, ms since the Unix epoch.
    pub write_timestamp: i64,
    /// `serializer_id` as stored.
    pub serializer_id: i64,
    /// `manifest`.
    pub manifest: &'a str,
    /// `payload`: `None` for NULL, which the journal never writes (a corrupt row).
    pub payload: Option<&'a [u8]>,
    /// `tags`, stored as the text of a JSON array of strings ([`tags_from_json_text`] reads
    /// it; text that is not one is a row this crate never writes: the caller reads the page
    /// row by row, which names it).
    pub tags: &'a str,
    /// `persistence_id` (queries only).
    pub persistence_id: Option<&'a str>,
    /// `db_timestamp`, µs since the Unix epoch (queries only).
    pub db_timestamp: Option<i64>,
    /// `previous_timestamp`, µs (the fast pass only).
    pub previous_timestamp: Option<i64>,
    /// `previous_seq_nr` (the fast pass only).
    pub previous_seq_nr: Option<i64>,
}

/// An event's tags stored as a JSON array of strings (SQLite's `tags` column) back, or why
/// they are corrupt.
pub(crate) fn tags_from_json_text(tags: &str) -> Result<Vec<String>, String> {
    // Most events have no tags: no JSON parse for those.
    if tags == "[]" {
        return Ok(Vec::new());
    }
    if let Some(tags) = plain_string_array(tags) {
        return Ok(tags);
    }
    serde_json::from_str(tags).map_err(|e| format!("tags are not a JSON array of strings: {e}"))
}

/// The strings of a JSON array in serde_json's compact form (`["a","b"]`, as the journal
/// writes tags) whose strings need no unescaping (no `\`, no `"`, no control character), read
/// without a JSON parse; `None` for any other text, which serde_json reads (or rejects).
///
/// serde_json took ~775 instructions to read `["bench"]` (callgrind of a SQLite replay: 9 % of
/// its instructions, more than SQLite's own stepping through the row); this is one scan of the
/// text and the allocations.
fn plain_string_array(text: &str) -> Option<Vec<String>> {
    let inner = text.strip_prefix("[\"")?.strip_suffix("\"]")?;
    let bytes = inner.as_bytes();
    let mut tags = Vec::with_capacity(1);
    let (mut start, mut at) = (0, 0);
    while let Some(&byte) = bytes.get(at) {
        match byte {
            // Only as the separator `","`: its quotes are ASCII, so the slices below lie on
            // character boundaries.
            b'"' if bytes.get(at + 1..at + 3) == Some(b",\"") => {
                tags.push(inner[start..at].to_owned());
                at += 3;
                start = at;
            }
            b'"' | b'\\' | 0..=0x1f => return None,
            _ => at += 1,
        }
    }
    tags.push(inner[start..].to_owned());
    Some(tags)
}

/// A value bound to one of a page statement's `$N` placeholders: its text borrowed (`T` =
/// `&str`, as the caller has it) or owned (`String`, to take to another thread).
#[derive(Debug, Clone, Copy)]
pub(crate) enum PageArg<T> {
    /// An integer.
    Int(i64),
    /// A text.
    Text(T),
}

impl PageArg<&str> {
    /// The value with its text copied.
    #[cfg(feature = "sqlite")]
    pub(crate) fn to_owned_text(self) -> PageArg<String> {
        match self {
            PageArg::Int(value) => PageArg::Int(value),
            PageArg::Text(text) => PageArg::Text(text.to_owned()),
        }
    }
}

/// The rows of a page as read: their text columns in one string, their payloads in one
/// buffer ([`RawPage::rows`] borrows them).
///
/// While the statement steps, each row's values are only copied into these two buffers (no
/// allocation per row); once it is done and the connection's handle unlocked, the page's events are
/// built from them on the same thread (`Dialect::read_page`'s `build`), so that the thread
/// that consumes them gets finished events. Built on the consumer's thread instead, a SQLite
/// replay's actor (which also deserializes and applies each event) did 5,187 instructions per
/// event against the reader's 3,445, and replayed more slowly; built here, 4,031 against
/// 4,636 (callgrind, docs/benchmarks.md, issue 8, session 11).
#[derive(Debug, Default, Clone)]
pub(crate) struct RawPage {
    pub(crate) text: String,
    pub(crate) payloads: Vec<u8>,
    pub(crate) rows: Vec<RawRow>,
}

/// The most bytes a reader thread's kept page buffers (rows, payloads and text together) take
/// between pages ([`RawPage::emptied`]): 4 MiB, room for pages of 1,000 events of up to ~3 KB.
const KEPT_BYTES: usize = 4 << 20;

/// One row of a [`RawPage`]; text columns are ranges of the page's text, the payload a range
/// of its payloads.
#[derive(Debug, Clone)]
pub(crate) struct RawRow {
    pub(crate) seq_nr: i64,
    pub(crate) writer_uuid: Range<usize>,
    pub(crate) write_timestamp: i64,
    pub(crate) serializer_id: i64,
    pub(crate) manifest: Range<usize>,
    pub(crate) payload: Option<Range<usize>>,
    pub(crate) tags: Range<usize>,
    pub(crate) persistence_id: Option<Range<usize>>,
    pub(crate) db_timestamp: Option<i64>,
    pub(crate) previous_timestamp: Option<i64>,
    pub(crate) previous_seq_nr: Option<i64>,
}

impl RawPage {
    /// Empties the page, keeping its buffers' room.
    pub(crate) fn clear(&mut self) {
        self.text.clear();
        self.payloads.clear();
        self.rows.clear();
    }

    /// The page emptied, its buffers kept for the next page a reader thread reads, unless
    /// together they take more than [`KEPT_BYTES`] (a page of large events does not pin its
    /// memory between pages: each reader thread keeps its buffers while the journal is open).
    ///
    /// A page of 1,000 events of ~100 bytes takes ~250 KB in its three buffers. Allocated anew
    /// for each page on a reader thread, and freed there after the page's events were built,
    /// glibc's allocator gave the memory back to the system and had it zeroed again for the
    /// next page (the catch-up ran 1.03-1.12x faster with glibc's trimming turned off, and as
    /// fast with the buffers kept; docs/benchmarks.md, "Session 25").
    pub(crate) fn emptied(mut self) -> RawPage {
        let bytes = self
            .rows
            .capacity()
            .saturating_mul(std::mem::size_of::<RawRow>())
            .saturating_add(self.payloads.capacity())
            .saturating_add(self.text.capacity());
        if bytes > KEPT_BYTES {
            return RawPage::default();
        }
        self.clear();
        self
    }

    /// The sequence number of the page's last row.
    pub(crate) fn last_seq_nr(&self) -> Option<i64> {
        self.rows.last().map(|row| row.seq_nr)
    }

    /// The page's rows in the statement's order, borrowed from it.
    pub(crate) fn rows(&self) -> impl ExactSizeIterator<Item = PageRow<'_>> {
        let (text, payloads) = (self.text.as_str(), self.payloads.as_slice());
        self.rows.iter().map(move |row| PageRow {
            seq_nr: row.seq_nr,
            writer_uuid: &text[row.writer_uuid.clone()],
            write_timestamp: row.write_timestamp,
            serializer_id: row.serializer_id,
            manifest: &text[row.manifest.clone()],
            payload: row.payload.clone().map(|range| &payloads[range]),
            tags: &text[row.tags.clone()],
            persistence_id: row.persistence_id.clone().map(|range| &text[range]),
            db_timestamp: row.db_timestamp,
            previous_timestamp: row.previous_timestamp,
            previous_seq_nr: row.previous_seq_nr,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emptied_page_keeps_its_room_unless_it_grew_large() {
        let mut page = RawPage::default();
        page.text.push_str("A|1");
        page.payloads.extend_from_slice(&[1, 2, 3]);
        page.rows.reserve(1_000);
        let room = page.rows.capacity();
        let kept = page.emptied();
        assert_eq!(
            (kept.text.len(), kept.payloads.len(), kept.rows.len()),
            (0, 0, 0)
        );
        assert_eq!(kept.rows.capacity(), room);
        // A page of large events does not pin its memory: the buffers count together.
        let mut large = RawPage::default();
        large.payloads.reserve(KEPT_BYTES + 1);
        assert_eq!(large.emptied().payloads.capacity(), 0);
        let mut many = RawPage::default();
        many.rows
            .reserve(KEPT_BYTES / std::mem::size_of::<RawRow>() + 1);
        assert_eq!(many.emptied().rows.capacity(), 0);
        let mut both = RawPage::default();
        both.payloads.reserve(KEPT_BYTES / 2 + 1);
        both.text.reserve(KEPT_BYTES / 2 + 1);
        let both = both.emptied();
        assert_eq!((both.payloads.capacity(), both.text.capacity()), (0, 0));
    }

    #[test]
    fn tags_read_back_from_their_json_text() {
        assert_eq!(tags_from_json_text("[]"), Ok(Vec::new()));
        assert_eq!(
            tags_from_json_text(r#"["t","a\"b"]"#),
            Ok(vec!["t".to_owned(), r#"a"b"#.to_owned()])
        );
        // Text that is not a JSON array of strings: an error (the row is read row by row).
        for tags in [
            "oops",
            "[7]",
            "{}",
            "",
            r#"["]"#,
            r#"["a""#,
            r#"["a""b"]"#,
            r#"["a",]"#,
        ] {
            assert!(tags_from_json_text(tags).is_err(), "{tags}");
        }
    }

    #[test]
    fn plain_arrays_read_as_serde_json_reads_them() {
        let cases = [
            r#"[""]"#,
            r#"["bench"]"#,
            r#"["a","","b"]"#,
            "[\"é\",\"日本\",\"\u{7f}\"]",
            r#"[ "a"]"#,
            r#"["a", "b"]"#,
            r#"["a\u0041"]"#,
            r#"["a","b"]x"#,
            "[\"tab\there\"]",
            r#"["a""b"]"#,
        ];
        for text in cases {
            let expected: Option<Vec<String>> = serde_json::from_str(text).ok();
            if let Some(tags) = plain_string_array(text) {
                assert_eq!(Some(tags), expected, "{text}");
            }
            assert_eq!(tags_from_json_text(text).ok(), expected, "{text}");
        }
        // The journal's own tags (serde_json's compact form) take the plain path.
        let written = serde_json::to_string(&["x", "y z", "ü"]).expect("JSON");
        assert_eq!(
            plain_string_array(&written),
            Some(vec!["x".to_owned(), "y z".to_owned(), "ü".to_owned()])
        );
    }

    proptest::proptest! {
        /// Any tags the journal writes read back as they were, plain or escaped.
        #[test]
        fn written_tags_read_back(tags in proptest::collection::vec(".{0,12}", 0..5)) {
            let text = serde_json::to_string(&tags).expect("JSON");
            proptest::prop_assert_eq!(tags_from_json_text(&text), Ok(tags));
        }

        /// Whatever the text, the plain path agrees with serde_json where it answers.
        #[test]
        fn the_plain_path_agrees_with_serde_json(
            text in r#"\[("[a-z"\\, \t]{0,6}",?){0,3}\]?"#
        ) {
            if let Some(tags) = plain_string_array(&text) {
                let parsed: Result<Vec<String>, _> = serde_json::from_str(&text);
                proptest::prop_assert_eq!(Some(tags), parsed.ok(), "{}", text);
            }
        }
    }
}
