//! A page of journal rows read as one JSON value (SQLite).
//!
//! sqlx runs each SQLite connection on a worker thread of its own and hands every row to the
//! reading task through a channel, copying each value (`sqlite3_value_dup`) into an `Arc` on
//! the way. A reader that takes rows faster than SQLite steps through them waits for each one:
//! a thread wake-up (an `eventfd` write and an `epoll_wait`) per event, plus one allocation per
//! column. A profile of a catch-up query showed a third of its time in those hand-offs and a
//! fifth in the copies (docs/benchmarks.md, issue 8).
//!
//! So the SQLite journal reads a page (a replay's or a query's) as one row holding one JSON
//! array, built by SQLite's own `json_group_array`, one array per event: one hand-off and one
//! copy per page. The payload, a blob, travels as hex, and only when it is at most
//! [`INLINE_PAYLOAD_BYTES`]: a page's JSON stays within `page size x (2 x that + the other
//! columns)`, however large the payloads; a larger payload is read on its own afterwards
//! ([`JsonRow::payload`] is `None` for it).

use std::borrow::Cow;

use serde::Deserialize;

/// The largest payload a JSON page carries (bytes, before hex); larger ones are read one by one.
pub(crate) const INLINE_PAYLOAD_BYTES: usize = 4096;

/// The SELECT of a JSON page over `inner`, a page query whose result has the columns `seq_nr`,
/// `writer_uuid`, `write_timestamp`, `serializer_id`, `manifest`, `payload` and `tags`, and
/// when `query_columns`, also `persistence_id`, `db_timestamp`, `previous_timestamp` and
/// `previous_seq_nr`. The elements come in any order ([`parse`]'s caller sorts them).
pub(crate) fn page_sql(inner: &str, query_columns: bool) -> String {
    let extra = if query_columns {
        "page.persistence_id, page.db_timestamp, page.previous_timestamp, page.previous_seq_nr"
    } else {
        "NULL, NULL, NULL, NULL"
    };
    format!(
        "SELECT json_group_array(json_array(\
             page.seq_nr, page.writer_uuid, page.write_timestamp, page.serializer_id, \
             page.manifest, \
             CASE WHEN length(page.payload) <= {INLINE_PAYLOAD_BYTES} THEN hex(page.payload) END, \
             CASE WHEN json_valid(page.tags) THEN json(page.tags) END, {extra})) \
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
    /// `payload` as hex, `None` when larger than [`INLINE_PAYLOAD_BYTES`].
    #[serde(borrow)]
    pub Option<&'a str>,
    /// `tags` (stored as a JSON array of strings; `None` when the stored text is not JSON).
    pub Option<Vec<String>>,
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
    /// The payload, when the page carries it (`Some(Err)`: not hex, a corrupt page).
    pub(crate) fn payload(&self) -> Option<Result<Vec<u8>, hex::FromHexError>> {
        self.5.map(|hex| {
            // `hex::decode` collects through an iterator; a sized buffer decodes faster.
            let mut payload = vec![0; hex.len() / 2];
            hex::decode_to_slice(hex, &mut payload).map(|()| payload)
        })
    }
}

/// An event's tags stored as a JSON array of strings (SQLite's `tags` column) back, or why
/// they are corrupt.
#[cfg(feature = "sqlite")]
pub(crate) fn tags_from_json(tags: String) -> Result<Vec<String>, String> {
    // Most events have no tags: no JSON parse for those.
    if tags == "[]" {
        return Ok(Vec::new());
    }
    serde_json::from_str(&tags).map_err(|e| format!("tags are not a JSON array of strings: {e}"))
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
        let text = r#"[[3,"w",17,1,"m","7B7D",["t"],"A|1",99,98,2],[4,"w",18,1,"",null,[],null,null,null,null]]"#;
        let rows = parse(text).expect("a page");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].0, 3);
        assert_eq!(rows[0].payload().expect("inline").expect("hex"), b"{}");
        assert_eq!(rows[0].6, Some(vec!["t".to_owned()]));
        assert_eq!(rows[0].7.as_deref(), Some("A|1"));
        assert_eq!(
            (rows[0].8, rows[0].9, rows[0].10),
            (Some(99), Some(98), Some(2))
        );
        assert!(rows[1].payload().is_none(), "a payload read on its own");
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
    fn escaped_text_reads_back() {
        let text = r#"[[3,"w\"x",17,1,"m","7B7D",[],"A|\"1",99,null,null]]"#;
        let rows = parse(text).expect("a page");
        assert_eq!(rows[0].1, r#"w"x"#);
        assert_eq!(rows[0].7.as_deref(), Some(r#"A|"1"#));
    }

    #[test]
    fn a_page_of_another_shape_is_an_error() {
        assert!(parse(r#"[[3,4]]"#).is_err());
        assert!(parse(r#"[["3","w",17,1,"m",null,[],null,null,null,null]]"#).is_err());
        assert!(parse(r#"[[3,"w",17,1,"m","7B7D",[7],null,null,null,null]]"#).is_err());
    }
}
