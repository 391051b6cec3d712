//! A page of journal rows read through SQLite's own C interface, on a reader thread or a blocking
//! thread (SQLite).
//!
//! sqlx runs each SQLite connection on a worker thread of its own and hands every row to the
//! reading task through a channel, copying each value (`sqlite3_value_dup`) into an `Arc` on
//! the way: a thread wake-up per event, plus one allocation per column. A profile of a
//! catch-up query showed a third of its time in those hand-offs and a fifth in the copies
//! (docs/benchmarks.md, issue 8). Pages were then read as one JSON value built by SQLite (and
//! parsed here), which took most of SQLite's thread for building the JSON and growing its
//! buffers (docs/benchmarks.md, "Session 9").
//!
//! So a page is read here: on a reader thread's own connection, its statement kept prepared
//! ([`sqlite_readers`](crate::sqlite_readers)), or, for a database without reader threads (in
//! memory, or a URL with options), on a connection of the pool taken to a blocking thread
//! ([`tokio::task::spawn_blocking`]) whose handle is locked there from sqlx's worker
//! ([`LockedSqliteHandle`](sqlx::sqlite::LockedSqliteHandle)). The page's statement is
//! stepped through with `libsqlite3-sys`, each value copied once into the page: the text
//! columns into one string, each payload into its own buffer, whatever its size (the events of
//! the page hold their payloads in the end either way; reading the larger ones apart, as
//! sessions 9 and before did above 4 KiB, cost a query per event). A few
//! hand-offs per page, none per event; pages of several readers (read-ahead, a replay's next
//! page) are read on threads of their own, in parallel.
//!
//! Anything unexpected (a value of another type, text that is not UTF-8, an error from
//! SQLite) gives no page ([`read_page`] returns `None`): the caller reads the page through
//! sqlx, row by row, which names a corrupt row and reports the database's error as sqlx does.

use std::ffi::{c_int, CStr};
use std::marker::PhantomData;
use std::ops::Range;
use std::ptr::{self, NonNull};

use futures::future::BoxFuture;
use libsqlite3_sys as ffi;
use sqlx::sqlite::Sqlite;
use sqlx::Pool;

use crate::page_row::{PageArg, RawPage, RawRow};
use crate::sqlite_readers::ReaderThreads;

/// Reads the page of `sql` (a replay's or a query's page statement, whose columns are
/// `seq_nr, writer_uuid, write_timestamp, serializer_id, manifest, payload, tags`, and when
/// `query_columns`, then `persistence_id, db_timestamp` and optionally `previous_timestamp,
/// previous_seq_nr`) with `args` bound to `$1`, `$2`, ... on one of `threads` when given, else
/// on a connection of `readers`; room for `limit` rows (the statement's `LIMIT`) is taken at
/// once, not grown row by row. `build` turns the page into the caller's result on the thread
/// that read it, once the statement is reset (on a connection of the pool: once its handle is
/// unlocked; the connection goes back to the pool after it, a page of 1,000 events holding it
/// about a millisecond longer).
///
/// `None` when the page could not be read this way: a value of an unexpected type or text
/// that is not UTF-8 (a row this crate never writes), an error of SQLite or of the pool.
/// The caller reads it again through sqlx, which reports what is wrong.
pub(crate) fn read_page<'a, T: Send + 'static>(
    readers: &'a Pool<Sqlite>,
    threads: Option<&ReaderThreads>,
    sql: &str,
    args: &[PageArg<&str>],
    query_columns: bool,
    limit: usize,
    build: impl FnOnce(&RawPage) -> T + Send + 'static,
) -> BoxFuture<'a, Option<T>> {
    // Owned now: the statement runs on another thread.
    let sql = sql.to_owned();
    let args: Vec<PageArg<String>> = args.iter().map(|arg| arg.to_owned_text()).collect();
    if let Some(threads) = threads.filter(|threads| threads.available()) {
        return Box::pin(threads.read_page(sql, args, query_columns, limit, build));
    }
    Box::pin(read_owned_page(
        readers,
        sql,
        args,
        query_columns,
        limit,
        build,
    ))
}

/// [`read_page`] of owned SQL and values.
async fn read_owned_page<T: Send + 'static>(
    readers: &Pool<Sqlite>,
    sql: String,
    args: Vec<PageArg<String>>,
    query_columns: bool,
    limit: usize,
    build: impl FnOnce(&RawPage) -> T + Send + 'static,
) -> Option<T> {
    let mut conn = readers.acquire().await.ok()?;
    let (mut conn, page) = tokio::task::spawn_blocking(move || {
        // The handle is locked from sqlx's worker thread, which waits meanwhile.
        let page = futures::executor::block_on(conn.lock_handle())
            .ok()
            .and_then(|mut handle| {
                // SAFETY: the handle is locked for this thread until `handle` drops, and
                // `step_page` finalizes its statement before returning.
                unsafe { step_page(handle.as_raw_handle(), &sql, &args, query_columns, limit) }
            });
        (conn, page.as_ref().map(build))
    })
    .await
    .ok()?;
    conn.return_to_pool().await;
    page
}

/// Rows a page takes room for before its first row, at most (a larger `LIMIT` grows it).
const MAX_ROWS_RESERVED: usize = 10_000;

/// Bytes of payloads a page takes room for after its first row, at most (4 MiB; more grows
/// the buffer).
const MAX_PAYLOAD_BYTES_RESERVED: usize = 4 << 20;

/// A prepared statement, finalized on drop.
pub(crate) struct Statement(NonNull<ffi::sqlite3_stmt>);

impl Statement {
    /// Prepares `sql` on `db`; `persistent` when it is kept for many runs
    /// (`SQLITE_PREPARE_PERSISTENT`, a statement of [`sqlite_readers`](crate::sqlite_readers)).
    /// `None` when SQLite refuses it.
    ///
    /// # Safety
    /// `db` must be an open connection that no other thread uses meanwhile, and it must
    /// outlive the statement.
    pub(crate) unsafe fn prepare(
        db: NonNull<ffi::sqlite3>,
        sql: &str,
        persistent: bool,
    ) -> Option<Self> {
        let mut stmt = ptr::null_mut();
        let len = c_int::try_from(sql.len()).ok()?;
        let flags = if persistent {
            ffi::SQLITE_PREPARE_PERSISTENT
        } else {
            0
        };
        let rc = ffi::sqlite3_prepare_v3(
            db.as_ptr(),
            sql.as_ptr().cast(),
            len,
            flags,
            &mut stmt,
            ptr::null_mut(),
        );
        // A statement SQLite returned is finalized even when it also returned an error.
        let stmt = Statement(NonNull::new(stmt)?);
        (rc == ffi::SQLITE_OK).then_some(stmt)
    }

    /// Steps to the next row (`SQLITE_ROW`, `SQLITE_DONE` or an error code). Takes `&mut`:
    /// no value borrowed from the current row (through `&self`) outlives it.
    fn step(&mut self) -> c_int {
        // SAFETY: the statement is prepared and not finalized.
        unsafe { ffi::sqlite3_step(self.0.as_ptr()) }
    }

    /// Resets the statement to run again, ending the read transaction its run holds (a
    /// statement left mid-run would keep its connection on an old snapshot of the database
    /// and hold back the writer's checkpoints).
    fn reset(&mut self) {
        // SAFETY: the statement is prepared and not finalized. The result repeats the last
        // step's error, which that step reported.
        unsafe {
            ffi::sqlite3_reset(self.0.as_ptr());
        }
    }

    /// The raw statement, for the column functions.
    fn raw(&self) -> *mut ffi::sqlite3_stmt {
        self.0.as_ptr()
    }
}

impl Drop for Statement {
    fn drop(&mut self) {
        // SAFETY: the statement was prepared and is finalized once.
        unsafe {
            ffi::sqlite3_finalize(self.0.as_ptr());
        }
    }
}

/// Prepares `sql`, binds `args` and steps through its rows (see [`read_page`]).
///
/// # Safety
/// `db` must be an open connection that no other thread uses until this returns.
unsafe fn step_page(
    db: NonNull<ffi::sqlite3>,
    sql: &str,
    args: &[PageArg<String>],
    query_columns: bool,
    limit: usize,
) -> Option<RawPage> {
    let mut stmt = Statement::prepare(db, sql, false)?;
    read_statement_page(&mut stmt, args, query_columns, limit, RawPage::default())
}

/// Binds `args` to `stmt`, steps through its rows into a page (see [`read_page`]) and resets
/// it, ready for its next run.
///
/// # Safety
/// The statement's connection must not be used by another thread until this returns.
pub(crate) unsafe fn read_statement_page(
    stmt: &mut Statement,
    args: &[PageArg<String>],
    query_columns: bool,
    limit: usize,
    buffers: RawPage,
) -> Option<RawPage> {
    let page = step_rows(stmt, args, query_columns, limit, buffers);
    stmt.reset();
    page
}

/// [`read_statement_page`] before the reset.
unsafe fn step_rows(
    stmt: &mut Statement,
    args: &[PageArg<String>],
    query_columns: bool,
    limit: usize,
    mut page: RawPage,
) -> Option<RawPage> {
    bind_args(stmt, args)?;
    let columns = ffi::sqlite3_column_count(stmt.raw());
    if columns < if query_columns { 9 } else { 7 } {
        return None;
    }
    page.clear();
    let mut shared = SharedText::default();
    loop {
        match stmt.step() {
            ffi::SQLITE_ROW => {
                let row = read_row(stmt, &mut page, &mut shared, query_columns, columns)?;
                if page.rows.is_empty() {
                    reserve_page(&mut page, &row, limit);
                }
                page.rows.push(row);
            }
            ffi::SQLITE_DONE => return Some(page),
            _ => return None,
        }
    }
}

/// Takes room in the page for `limit` rows (at most [`MAX_ROWS_RESERVED`]) and for `limit`
/// payloads the size of the first row's (at most [`MAX_PAYLOAD_BYTES_RESERVED`]), rather than
/// growing its buffers (and copying them) as the rows come. Called at the first row: an empty
/// page (a live query's poll that finds nothing) takes no room.
fn reserve_page(page: &mut RawPage, first: &RawRow, limit: usize) {
    page.rows.reserve(limit.min(MAX_ROWS_RESERVED));
    let first_len = first.payload.as_ref().map_or(0, ExactSizeIterator::len);
    let bytes = first_len
        .saturating_mul(limit)
        .min(MAX_PAYLOAD_BYTES_RESERVED);
    page.payloads
        .reserve(bytes.saturating_sub(page.payloads.len()));
}

/// Binds `args` to the statement's `$N` placeholders (SQLite numbers each distinct name once).
unsafe fn bind_args(stmt: &Statement, args: &[PageArg<String>]) -> Option<()> {
    let stmt = stmt.raw();
    for index in 1..=ffi::sqlite3_bind_parameter_count(stmt) {
        let name = ffi::sqlite3_bind_parameter_name(stmt, index);
        if name.is_null() {
            return None;
        }
        let name = CStr::from_ptr(name).to_str().ok()?;
        let number: usize = name.strip_prefix(['$', '?'])?.parse().ok()?;
        let rc = match args.get(number.checked_sub(1)?)? {
            PageArg::Int(value) => ffi::sqlite3_bind_int64(stmt, index, *value),
            // Copied by SQLite (as sqlx binds text): an empty `String`'s pointer is dangling.
            PageArg::Text(text) => ffi::sqlite3_bind_text(
                stmt,
                index,
                text.as_ptr().cast(),
                c_int::try_from(text.len()).ok()?,
                ffi::SQLITE_TRANSIENT(),
            ),
        };
        if rc != ffi::SQLITE_OK {
            return None;
        }
    }
    Some(())
}

/// The text of the previous row's writer uuid, tags and persistence id: a run of rows of one
/// writer (of the same tags, of one id) shares it in the page's text, copied and checked once.
#[derive(Default)]
struct SharedText {
    writer_uuid: Option<Range<usize>>,
    tags: Option<Range<usize>>,
    persistence_id: Option<Range<usize>>,
}

/// The current row of `stmt`, its text columns appended to the page's text (the writer uuid,
/// the tags and the persistence id only when they differ from the previous row's, `shared`),
/// its payload to the page's payloads.
unsafe fn read_row(
    stmt: &Statement,
    page: &mut RawPage,
    shared: &mut SharedText,
    query_columns: bool,
    columns: c_int,
) -> Option<RawRow> {
    let text = &mut page.text;
    // NULL (never written by the journal) is left to the caller, which names the row.
    let payload = Value::of(stmt, 5)?;
    let payload = match payload.kind() {
        ffi::SQLITE_NULL => None,
        _ => {
            let start = page.payloads.len();
            page.payloads.extend_from_slice(payload.bytes()?);
            Some(start..page.payloads.len())
        }
    };
    Some(RawRow {
        seq_nr: integer(stmt, 0)?,
        writer_uuid: append_shared_text(stmt, 1, text, &mut shared.writer_uuid)?,
        write_timestamp: integer(stmt, 2)?,
        serializer_id: integer(stmt, 3)?,
        manifest: append_text(stmt, 4, text)?,
        payload,
        // Read as JSON when the page's events are built.
        tags: append_shared_text(stmt, 6, text, &mut shared.tags)?,
        persistence_id: if query_columns {
            Some(append_shared_text(
                stmt,
                7,
                text,
                &mut shared.persistence_id,
            )?)
        } else {
            None
        },
        db_timestamp: if query_columns {
            Some(integer(stmt, 8)?)
        } else {
            None
        },
        previous_timestamp: optional_integer(stmt, 9, columns)?,
        previous_seq_nr: optional_integer(stmt, 10, columns)?,
    })
}

/// A column of the current row as SQLite holds it (`sqlite3_column_value`), read through the
/// `sqlite3_value_*` functions: one look-up per column, where each `sqlite3_column_*` call looks
/// the column up again and enters and leaves the connection's mutex (a row's 17 such calls
/// were ~900 instructions of a catch-up's ~6,200 per event on the reading thread).
///
/// SQLite calls this value "unprotected": the `sqlite3_value_*` functions on it are not safe
/// while another thread uses the connection. None does: a reader thread's connection is its
/// own ([`sqlite_readers`](crate::sqlite_readers)), and a blocking thread holds a pool
/// connection's handle locked while it steps (`read_owned_page`). Its bytes are borrowed until
/// the statement steps on (`'s`, a borrow of the statement), and until the value is read in
/// another form: on a UTF-16 database, [`Value::text_bytes`] converts the text in place and
/// frees what an earlier [`Value::bytes`] of the same value pointed at (each value here is
/// read in one form, or compared and then copied, before the next is read).
#[derive(Clone, Copy)]
struct Value<'s> {
    raw: NonNull<ffi::sqlite3_value>,
    row: PhantomData<&'s Statement>,
}

impl<'s> Value<'s> {
    /// Column `column` of the current row (SQLite answers a column out of range with a NULL
    /// value; `None` only for a null pointer, which it does not return).
    unsafe fn of(stmt: &'s Statement, column: c_int) -> Option<Self> {
        let raw = NonNull::new(ffi::sqlite3_column_value(stmt.raw(), column))?;
        Some(Value {
            raw,
            row: PhantomData,
        })
    }

    /// `SQLITE_INTEGER`, `SQLITE_FLOAT`, `SQLITE_TEXT`, `SQLITE_BLOB` or `SQLITE_NULL`.
    unsafe fn kind(self) -> c_int {
        ffi::sqlite3_value_type(self.raw.as_ptr())
    }

    /// The value of an integer; `None` for any other type.
    unsafe fn integer(self) -> Option<i64> {
        (self.kind() == ffi::SQLITE_INTEGER).then(|| ffi::sqlite3_value_int64(self.raw.as_ptr()))
    }

    /// The bytes of a value that is not NULL, as stored (a text's encoding unconverted):
    /// `sqlite3_value_blob` first, then `sqlite3_value_bytes`, as SQLite's documentation asks.
    /// `None` for a null pointer with a length; when SQLite fails to allocate, the bytes are
    /// empty and the statement's next call fails (the page is then read row by row).
    unsafe fn bytes(self) -> Option<&'s [u8]> {
        let data = ffi::sqlite3_value_blob(self.raw.as_ptr());
        self.slice(data.cast())
    }

    /// The UTF-8 bytes of a text (or a blob's bytes, unconverted): `sqlite3_value_text`
    /// (which converts a UTF-16 database's text), then `sqlite3_value_bytes`. As
    /// [`Value::bytes`] when SQLite fails to allocate.
    unsafe fn text_bytes(self) -> Option<&'s [u8]> {
        let data = ffi::sqlite3_value_text(self.raw.as_ptr());
        self.slice(data.cast())
    }

    /// A text (also one stored as a blob), as UTF-8; `None` for NULL, a number or bytes that
    /// are not UTF-8.
    unsafe fn text(self) -> Option<&'s str> {
        match self.kind() {
            ffi::SQLITE_TEXT | ffi::SQLITE_BLOB => std::str::from_utf8(self.text_bytes()?).ok(),
            _ => None,
        }
    }

    /// The `sqlite3_value_bytes` bytes at `data`, the value just read.
    unsafe fn slice(self, data: *const u8) -> Option<&'s [u8]> {
        let len = usize::try_from(ffi::sqlite3_value_bytes(self.raw.as_ptr())).ok()?;
        if len == 0 {
            return Some(&[]);
        }
        if data.is_null() {
            return None;
        }
        Some(std::slice::from_raw_parts(data, len))
    }
}

/// An integer column's value; `None` for any other type.
unsafe fn integer(stmt: &Statement, column: c_int) -> Option<i64> {
    Value::of(stmt, column)?.integer()
}

/// A column that may be absent or NULL: `Some(None)` then, `Some(Some(value))` for an integer,
/// `None` for any other type.
unsafe fn optional_integer(stmt: &Statement, column: c_int, columns: c_int) -> Option<Option<i64>> {
    if column >= columns {
        return Some(None);
    }
    let value = Value::of(stmt, column)?;
    if value.kind() == ffi::SQLITE_NULL {
        return Some(None);
    }
    value.integer().map(Some)
}

/// Appends a text column (also one stored as a blob) to `text`, returning its range; `None`
/// for NULL, a number or bytes that are not UTF-8.
unsafe fn append_text(stmt: &Statement, column: c_int, text: &mut String) -> Option<Range<usize>> {
    append_value_text(Value::of(stmt, column)?, text)
}

/// [`append_text`] of a column's value.
unsafe fn append_value_text(value: Value<'_>, text: &mut String) -> Option<Range<usize>> {
    let value = value.text()?;
    let start = text.len();
    text.push_str(value);
    Some(start..text.len())
}

/// As [`append_text`], but the range of `previous` when the column holds the same text (then
/// nothing is appended); `previous` becomes the column's range.
unsafe fn append_shared_text(
    stmt: &Statement,
    column: c_int,
    text: &mut String,
    previous: &mut Option<Range<usize>>,
) -> Option<Range<usize>> {
    let value = Value::of(stmt, column)?;
    if let Some(range) = previous.clone() {
        if value.kind() == ffi::SQLITE_TEXT
            && value.text_bytes()? == text.as_bytes().get(range.clone())?
        {
            return Some(range);
        }
    }
    let range = append_value_text(value, text)?;
    *previous = Some(range.clone());
    Some(range)
}

/// A page statement over [`fill_page_table`]'s table, `$1` the id, `$2` the first sequence
/// number, `$3` the limit (tests).
#[cfg(test)]
pub(crate) const PAGE_QUERY: &str =
    "SELECT seq_nr, writer_uuid, write_timestamp, serializer_id, manifest, \
            payload, tags, persistence_id, db_timestamp \
     FROM journal WHERE persistence_id = $1 AND seq_nr >= $2 \
     ORDER BY seq_nr LIMIT $3";

/// Creates a `journal` table of a page's columns in `pool`'s database and inserts `rows`, each
/// the SQL values of a row (tests).
#[cfg(test)]
pub(crate) async fn fill_page_table(pool: &Pool<Sqlite>, rows: &[&str]) {
    sqlx::query(
        "CREATE TABLE journal (persistence_id, seq_nr, writer_uuid, write_timestamp, \
                               serializer_id, manifest, payload, tags, db_timestamp)",
    )
    .execute(pool)
    .await
    .expect("the table");
    for row in rows {
        sqlx::query(&format!("INSERT INTO journal VALUES ({row})"))
            .execute(pool)
            .await
            .expect("a row");
    }
}

#[cfg(test)]
mod tests {
    use crate::page_row::RawPage as Page;
    /// The page as read (a copy: the reader keeps its buffers).
    fn identity(page: &Page) -> Page {
        page.clone()
    }

    use sqlx::sqlite::SqlitePoolOptions;

    use super::*;
    use crate::page_row::PageRow;

    /// A pool over a database of its own (in memory, one connection) holding a `journal`
    /// table of the page's columns, with `rows` inserted as given (SQL values).
    async fn pool_with(rows: &[&str]) -> Pool<Sqlite> {
        pool_encoded(rows, "UTF-8").await
    }

    /// [`pool_with`] on a database whose text is stored in `encoding`.
    async fn pool_encoded(rows: &[&str], encoding: &str) -> Pool<Sqlite> {
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .expect("an in-memory database");
        sqlx::query(&format!("PRAGMA encoding = '{encoding}'"))
            .execute(&pool)
            .await
            .expect("the encoding");
        fill_page_table(&pool, rows).await;
        pool
    }

    const QUERY: &str = PAGE_QUERY;

    fn args(from: i64) -> [PageArg<&'static str>; 3] {
        [PageArg::Text("A|1"), PageArg::Int(from), PageArg::Int(10)]
    }

    #[tokio::test]
    async fn a_page_reads_back_every_column_in_order() {
        let big = "x".repeat(300_000);
        let pool = pool_with(&[
            "'A|1', 2, 'w', 17, 3, 'm', X'00FF41', '[\"t\"]', 99",
            "'A|1', 1, 'w', 16, 3, '', X'', '[]', 98",
            // A payload stored as text comes back as its bytes, a large one as well.
            "'A|1', 3, 'w2', 18, 3, 'é', 'é', '[]', 100",
            &format!("'A|1', 4, 'w2', 19, 3, '', '{big}', '[]', 101"),
            "'B|1', 1, 'w', 16, 3, '', X'01', '[]', 98",
        ])
        .await;
        let page = read_page(&pool, None, QUERY, &args(0), true, 10, identity)
            .await
            .expect("a page");
        let rows: Vec<PageRow<'_>> = page.rows().collect();
        let seq_nrs: Vec<i64> = rows.iter().map(|row| row.seq_nr).collect();
        assert_eq!(seq_nrs, [1, 2, 3, 4]);
        assert_eq!(
            rows[1],
            PageRow {
                seq_nr: 2,
                writer_uuid: "w",
                write_timestamp: 17,
                serializer_id: 3,
                manifest: "m",
                payload: Some(&[0x00, 0xff, 0x41][..]),
                tags: r#"["t"]"#,
                persistence_id: Some("A|1"),
                db_timestamp: Some(99),
                previous_timestamp: None,
                previous_seq_nr: None,
            }
        );
        assert_eq!(rows[0].payload, Some(&[][..]), "an empty payload");
        assert_eq!(rows[2].payload, Some("é".as_bytes()));
        assert_eq!(rows[2].manifest, "é");
        assert_eq!(rows[3].payload, Some(big.as_bytes()), "carried in the page");
        let writers: Vec<&str> = rows.iter().map(|row| row.writer_uuid).collect();
        assert_eq!(
            writers,
            ["w", "w", "w2", "w2"],
            "runs of one writer share their text"
        );
        let tags: Vec<&str> = rows.iter().map(|row| row.tags).collect();
        assert_eq!(tags, ["[]", r#"["t"]"#, "[]", "[]"]);
        drop(rows);
        let page = read_page(&pool, None, QUERY, &args(4), true, 10, identity)
            .await
            .expect("a page");
        assert_eq!(page.rows().len(), 1, "bound to $2");
    }

    #[tokio::test]
    async fn text_of_a_utf16_database_reads_back_as_utf8() {
        let pool = pool_encoded(
            &[
                "'A|1', 1, 'w', 16, 3, 'é', X'01', '[\"t\"]', 98",
                "'A|1', 2, 'w', 17, 3, 'm', 'é', '[]', 99",
            ],
            "UTF-16le",
        )
        .await;
        let page = read_page(&pool, None, QUERY, &args(0), true, 10, identity)
            .await
            .expect("a page");
        let rows: Vec<PageRow<'_>> = page.rows().collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].manifest, "é");
        assert_eq!(rows[0].writer_uuid, "w");
        assert_eq!(rows[1].writer_uuid, "w", "shared with the row before");
        assert_eq!(rows[0].persistence_id, Some("A|1"));
        assert_eq!(rows[0].tags, r#"["t"]"#);
    }

    #[tokio::test]
    async fn a_row_of_another_shape_gives_no_page() {
        for row in [
            // A sequence number stored as text, a NULL manifest, a writer that is not UTF-8.
            "'A|1', 'one', 'w', 17, 3, 'm', X'00', '[]', 99",
            "'A|1', 1, 'w', 17, 3, NULL, X'00', '[]', 99",
            "'A|1', 1, X'FF', 17, 3, 'm', X'00', '[]', 99",
            "'A|1', 1, 'w', 17, 3, 'm', X'00', '[]', 'late'",
        ] {
            let pool = pool_with(&[row]).await;
            assert!(
                read_page(&pool, None, QUERY, &args(0), true, 10, identity)
                    .await
                    .is_none(),
                "{row}"
            );
        }
    }

    #[tokio::test]
    async fn a_statement_that_fails_gives_no_page() {
        let pool = pool_with(&[]).await;
        for sql in ["SELECT nonsense FROM nowhere", "SELECT 1, 2, 3"] {
            assert!(read_page(&pool, None, sql, &args(0), false, 10, identity)
                .await
                .is_none());
        }
        // A placeholder without a value.
        assert!(read_page(&pool, None, QUERY, &[], true, 10, identity)
            .await
            .is_none());
    }
}
