//! A page of journal rows read as one JSON value and one blob (SQLite).
//!
//! sqlx runs each SQLite connection on a worker thread of its own and hands every row to the
//! reading task through a channel, copying each value (`sqlite3_value_dup`) into an `Arc` on
//! the way. A reader that takes rows faster than SQLite steps through them waits for each one:
//! a thread wake-up (an `eventfd` write and an `epoll_wait`) per event, plus one allocation per
//! column. A profile of a catch-up query showed a third of its time in those hand-offs and a
//! fifth in the copies (docs/benchmarks.md, issue 8).
//!
//! So the SQLite journal reads a page (a replay's or a query's) as one row of two values: a
//! JSON array built by SQLite's own `json_group_array`, one array per event, and the events'
//! payloads concatenated into one blob by `group_concat` in the same pass (so in the same
//! order), each event's array giving its payload's length. One hand-off and one copy per page.
//! A payload travels in the blob only when it is at most [`INLINE_PAYLOAD_BYTES`]: a page
//! stays within `page size x (that + the other columns)`, however large the payloads; a larger
//! payload is read on its own afterwards ([`Payloads::next`] is `None` for it). Payloads used
//! to travel as hex inside the JSON: twice their size, encoded by SQLite and decoded here, and
//! strings that grew by reallocation into fresh memory page after page (docs/benchmarks.md,
//! "Session 8").

use std::borrow::Cow;

use serde::Deserialize;

/// The largest payload a page carries in its blob (bytes); larger ones are read one by one.
pub(crate) const INLINE_PAYLOAD_BYTES: usize = 4096;

/// The SELECT of a JSON page over `inner`, a page query whose result has the columns `seq_nr`,
/// `writer_uuid`, `write_timestamp`, `serializer_id`, `manifest`, `payload` and `tags`, and
/// when `query_columns`, also `persistence_id`, `db_timestamp`, `previous_timestamp` and
/// `previous_seq_nr`. Its one row holds the JSON (column 0, text) and the inline payloads
/// (column 1, a blob; NULL when there is none) in the same order ([`Payloads`]). The
/// elements come in any order ([`parse`]'s caller sorts them, after taking the payloads).
pub(crate) fn page_sql(inner: &str, query_columns: bool) -> String {
    let extra = if query_columns {
        "page.persistence_id, page.db_timestamp, page.previous_timestamp, page.previous_seq_nr"
    } else {
        "NULL, NULL, NULL, NULL"
    };
    // Bytes, also of a payload some other program stored as text (`length` of a text counts
    // characters). The text columns are cast to text: JSON cannot hold a blob that another
    // program stored in one, which would fail the whole page instead of the row (read row by
    // row, a value that is not UTF-8 names its row).
    let length = "length(CAST(page.payload AS BLOB))";
    format!(
        "SELECT json_group_array(json_array(\
             page.seq_nr, CAST(page.writer_uuid AS TEXT), page.write_timestamp, \
             page.serializer_id, CAST(page.manifest AS TEXT), \
             CASE WHEN {length} <= {INLINE_PAYLOAD_BYTES} THEN {length} END, \
             CAST(page.tags AS TEXT), {extra})), \
             CAST(group_concat(CASE WHEN {length} <= {INLINE_PAYLOAD_BYTES} \
                                    THEN page.payload END, '') AS BLOB) \
         FROM ({inner}) AS page"
    )
}

/// One event of a JSON page, the columns in [`page_sql`]'s order.
#[derive(Debug, Deserialize)]
pub(crate) struct JsonRow<'a>(
    /// `seq_nr`.
    pub i64,
    /// `writer_uuid`, borrowed from the page's text (unless it holds escapes): the caller
    /// shares one `Arc` per run of rows of one writer.
    #[serde(borrow)]
    pub Cow<'a, str>,
    /// `write_timestamp`, ms.
    pub i64,
    /// `serializer_id`.
    pub i64,
    /// `manifest`.
    pub String,
    /// The length of `payload` in the page's blob (bytes), `None` when larger than
    /// [`INLINE_PAYLOAD_BYTES`] (not in the blob).
    pub Option<usize>,
    /// `tags` as stored: the text of a JSON array of strings, read by [`JsonRow::tags`]
    /// (borrowed from the page's text when it holds no escapes, as `[]`).
    #[serde(borrow)]
    pub Cow<'a, str>,
    /// `persistence_id` (queries only), borrowed as `writer_uuid` is.
    #[serde(borrow, deserialize_with = "optional_text")]
    pub Option<Cow<'a, str>>,
    /// `db_timestamp`, µs (queries only).
    pub Option<i64>,
    /// `previous_timestamp`, µs (the fast pass only).
    pub Option<i64>,
    /// `previous_seq_nr` (the fast pass only).
    pub Option<i64>,
);

/// An optional string borrowed from the JSON text when it holds no escapes (serde borrows a
/// `Cow<str>` field, but not one inside an `Option`).
fn optional_text<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Cow<'de, str>>, D::Error> {
    #[derive(Deserialize)]
    struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(Option::<Text<'de>>::deserialize(deserializer)?.map(|text| text.0))
}

impl JsonRow<'_> {
    /// The event's tags: `None` when the stored text is not a JSON array of strings (a row
    /// this crate never writes: the caller reads the page row by row, which names it). Parsed
    /// here rather than by SQLite (`json()` in the page, after `json_valid`: two parses per
    /// event on the reader's thread).
    pub(crate) fn tags(&self) -> Option<Vec<String>> {
        tags_from_json_text(&self.6).ok()
    }
}

/// The inline payloads of a page ([`page_sql`]'s blob), taken in the rows' order.
#[derive(Debug)]
struct Payloads<'a> {
    rest: &'a [u8],
}

/// A page's blob does not hold the payloads its rows name (another shape of page).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotAPage;

impl<'a> Payloads<'a> {
    /// The payloads of `rows`, in `blob`. Checks that the lengths the rows give add up to the
    /// blob's: a page whose rows and blob disagree is not a page.
    ///
    /// # Errors
    /// [`NotAPage`] when they do not add up.
    fn new(rows: &[JsonRow<'_>], blob: Option<&'a [u8]>) -> Result<Self, NotAPage> {
        let rest = blob.unwrap_or_default();
        let named = rows
            .iter()
            .try_fold(0usize, |sum, row| sum.checked_add(row.5.unwrap_or(0)))
            .ok_or(NotAPage)?;
        if named != rest.len() {
            return Err(NotAPage);
        }
        Ok(Payloads { rest })
    }

    /// The payload of the next row (rows in the page's order): `None` when the page does not
    /// carry it (the row's length is `None`).
    ///
    /// # Errors
    /// [`NotAPage`] when the blob holds fewer bytes than the row names (rows taken out of
    /// order, or not those the blob was checked against).
    fn next(&mut self, row: &JsonRow<'_>) -> Result<Option<Vec<u8>>, NotAPage> {
        let Some(len) = row.5 else {
            return Ok(None);
        };
        if len > self.rest.len() {
            return Err(NotAPage);
        }
        let (payload, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(Some(payload.to_vec()))
    }
}

/// An event's tags stored as a JSON array of strings (SQLite's `tags` column) back, or why
/// they are corrupt.
#[cfg(feature = "sqlite")]
pub(crate) fn tags_from_json(tags: String) -> Result<Vec<String>, String> {
    tags_from_json_text(&tags)
}

/// [`tags_from_json`] of borrowed text.
fn tags_from_json_text(tags: &str) -> Result<Vec<String>, String> {
    // Most events have no tags: no JSON parse for those.
    if tags == "[]" {
        return Ok(Vec::new());
    }
    serde_json::from_str(tags).map_err(|e| format!("tags are not a JSON array of strings: {e}"))
}

/// An event of a page and its payload, when the page carries it ([`parse_with_payloads`]).
pub(crate) type RowWithPayload<'a> = (JsonRow<'a>, Option<Vec<u8>>);

/// The events of a page ([`page_sql`]'s row: `text`, the JSON, and `blob`, the inline
/// payloads), each with its payload when the page carries it (`None`: read it on its own), in
/// the page's order.
///
/// # Errors
/// [`NotAPage`] when the JSON is not such a page or the blob does not hold the payloads its
/// rows name.
pub(crate) fn parse_with_payloads<'a>(
    text: &'a str,
    blob: Option<&[u8]>,
) -> Result<Vec<RowWithPayload<'a>>, NotAPage> {
    let rows = parse(text).map_err(|_| NotAPage)?;
    let mut payloads = Payloads::new(&rows, blob)?;
    rows.into_iter()
        .map(|row| payloads.next(&row).map(|payload| (row, payload)))
        .collect()
}

/// The events of a JSON page (`text`: the page's one value).
///
/// # Errors
/// A value that is not such a page (e.g. a column of a corrupt row holding another type).
pub(crate) fn parse(text: &str) -> Result<Vec<JsonRow<'_>>, serde_json::Error> {
    serde_json::from_str(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_reads_back_every_column() {
        let text = r#"[[3,"w",17,1,"m",2,"[\"t\"]","A|1",99,98,2],[4,"w",18,1,"",null,"[]",null,null,null,null]]"#;
        let rows = parse(text).expect("a page");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].0, 3);
        let mut payloads = Payloads::new(&rows, Some(b"{}")).expect("lengths add up");
        assert_eq!(payloads.next(&rows[0]), Ok(Some(b"{}".to_vec())));
        assert_eq!(
            payloads.next(&rows[1]),
            Ok(None),
            "a payload read on its own"
        );
        assert_eq!(rows[0].tags(), Some(vec!["t".to_owned()]));
        assert_eq!(rows[1].tags(), Some(Vec::new()));
        assert!(matches!(rows[1].6, Cow::Borrowed("[]")), "no tags, no copy");
        assert_eq!(rows[0].7.as_deref(), Some("A|1"));
        assert_eq!(
            (rows[0].8, rows[0].9, rows[0].10),
            (Some(99), Some(98), Some(2))
        );
        assert!(
            matches!(rows[0].1, Cow::Borrowed("w")),
            "the writer is not copied"
        );
        assert!(
            matches!(rows[0].7, Some(Cow::Borrowed("A|1"))),
            "the persistence id is not copied"
        );
    }

    #[test]
    fn payloads_are_cut_from_the_blob_in_row_order() {
        // Binary bytes, an empty payload, one not carried, text of several bytes per char.
        let text = r#"[[1,"w",0,1,"",3,"[]",null,null,null,null],[2,"w",0,1,"",0,"[]",null,null,null,null],[3,"w",0,1,"",null,"[]",null,null,null,null],[4,"w",0,1,"",2,"[]",null,null,null,null]]"#;
        let rows = parse(text).expect("a page");
        let blob: &[u8] = &[0x00, 0xff, 0x41, 0xc3, 0xa9];
        let mut payloads = Payloads::new(&rows, Some(blob)).expect("lengths add up");
        let taken: Vec<Option<Vec<u8>>> = rows
            .iter()
            .map(|row| payloads.next(row).expect("in the blob"))
            .collect();
        assert_eq!(
            taken,
            vec![
                Some(vec![0x00, 0xff, 0x41]),
                Some(Vec::new()),
                None,
                Some("é".as_bytes().to_vec())
            ]
        );
    }

    #[test]
    fn a_blob_that_disagrees_with_the_rows_is_not_a_page() {
        let text = r#"[[1,"w",0,1,"",3,"[]",null,null,null,null]]"#;
        let rows = parse(text).expect("a page");
        assert_eq!(Payloads::new(&rows, Some(b"ab")).unwrap_err(), NotAPage);
        assert_eq!(Payloads::new(&rows, Some(b"abcd")).unwrap_err(), NotAPage);
        assert_eq!(Payloads::new(&rows, None).unwrap_err(), NotAPage);
        let none: Vec<JsonRow<'_>> = Vec::new();
        assert!(Payloads::new(&none, None).is_ok(), "an empty page");
    }

    #[test]
    fn escaped_text_reads_back() {
        let text = r#"[[3,"w\"x",17,1,"m",2,"[]","A|\"1",99,null,null]]"#;
        let rows = parse(text).expect("a page");
        assert_eq!(rows[0].1, r#"w"x"#);
        assert_eq!(rows[0].7.as_deref(), Some(r#"A|"1"#));
    }

    #[test]
    fn a_page_of_another_shape_is_an_error() {
        assert!(parse(r#"[[3,4]]"#).is_err());
        assert!(parse(r#"[["3","w",17,1,"m",null,"[]",null,null,null,null]]"#).is_err());
        assert!(parse(r#"[[3,"w",17,1,"m",2,[7],null,null,null,null]]"#).is_err());
        // Tags whose text is not a JSON array of strings: the row gives none (read row by row).
        for tags in [r#""oops""#, r#""[7]""#, r#""{}""#] {
            let text = format!(r#"[[3,"w",17,1,"m",2,{tags},null,null,null,null]]"#);
            let rows = parse(&text).expect("the page parses");
            assert_eq!(rows[0].tags(), None, "{tags}");
        }
        assert!(parse(r#"[[3,"w",17,1,"m","7B7D","[]",null,null,null,null]]"#).is_err());
    }
}
