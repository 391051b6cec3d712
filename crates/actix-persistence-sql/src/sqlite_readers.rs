//! Pages read on threads of their own, each holding a SQLite connection of its own whose page
//! statements stay prepared from one page to the next (SQLite).
//!
//! A page read through a connection of sqlx's pool ([`sqlite_page`](crate::sqlite_page))
//! acquires the connection, takes it to a blocking thread, locks its handle through sqlx's
//! worker thread, prepares the page's statement, steps it, finalizes it, unlocks the handle and
//! gives the connection back: about ten thread wake-ups and a prepare (~300,000 instructions)
//! per page, whatever its rows (docs/benchmarks.md, "Session 10: what a page costs"). Statements
//! cannot stay prepared on sqlx's connections (its handle panics when closed with a statement
//! still open). Here a reader thread holds a connection of its own, keeps the statements it ran
//! (at most [`STATEMENTS_KEPT`], most recently used kept), and answers a page over a channel:
//! one wake-up of the thread, one of the caller.
//!
//! - Threads start as pages wait for them, up to the journal's
//!   [`max_connections`](crate::SqliteJournalOptions::max_connections), and each opens its
//!   connection at its first page (read-write as sqlx's, `query_only`, the journal's busy
//!   timeout). They end, closing their connections, when the journal is closed
//!   ([`ReaderThreads::close`], before the writer's final checkpoint) or dropped.
//! - Only a database file named by a plain path is read this way: a URL with options
//!   (`?mode=...`, `immutable`, `vfs`), a `file:` URI or an in-memory database is read through
//!   sqlx's pool, as before ([`ReaderThreads::for_database`]). So is every page after a reader
//!   connection failed to open (logged once).
//! - A page that could not be read here (a connection that does not open, a statement SQLite
//!   refuses, a row of another shape) gives `None`, and the caller reads it row by row through
//!   sqlx, which reports what is wrong, as for a page of sqlx's pool.
//! - Each page runs in a read transaction of its own (the statement is reset after its last
//!   row, or after an error), so it sees every transaction committed before it started.

use std::ffi::{c_int, CString};
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

use libsqlite3_sys as ffi;
use tokio::sync::oneshot;

use crate::page_row::{PageArg, RawPage};
use crate::sqlite_page::{read_statement_page, Statement};

/// Statements a reader's connection keeps prepared (a query's page statements differ by filter
/// and pass; a replay has one).
pub(crate) const STATEMENTS_KEPT: usize = 16;

/// What a reader thread runs: a page read on its connection, answering its caller.
type Job = Box<dyn FnOnce(&mut ReaderConnection) + Send>;

/// The reader threads of one SQLite database (see the module documentation). Cheap to clone:
/// clones share the threads.
#[derive(Clone)]
pub(crate) struct ReaderThreads {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ReaderThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReaderThreads")
            .field("database", &self.shared.target.filename)
            .field("threads", &lock(&self.shared.threads).len())
            .field("max_threads", &self.shared.max_threads)
            .finish()
    }
}

/// What the threads of one database share with their callers.
struct Shared {
    target: Arc<Target>,
    /// Sends pages to read to the threads; `None` once closed. Only this one sender exists, so
    /// the threads end once it is gone and the pages sent before are read.
    jobs: Mutex<Option<flume::Sender<Job>>>,
    /// Where each thread takes its next page from.
    queue: flume::Receiver<Job>,
    threads: Mutex<Vec<thread::JoinHandle<()>>>,
    /// Pages sent and not yet read: a thread more starts while they outnumber the threads.
    outstanding: Arc<AtomicUsize>,
    max_threads: usize,
    /// Held by [`ReaderThreads::close`] while it joins the threads, so that every caller of a
    /// close returns once they are gone (the journal and its snapshot store share them).
    closing: tokio::sync::Mutex<()>,
}

/// The database a reader connection opens.
struct Target {
    filename: CString,
    /// `sqlite3_busy_timeout`, ms.
    busy_timeout_ms: c_int,
    /// Set when a reader connection failed to open: pages go through sqlx's pool from then on.
    unavailable: AtomicBool,
}

impl ReaderThreads {
    /// Reader threads for the database of `url` (a `sqlite:` URL, as the journal's options take
    /// it) at `filename` (as sqlx parsed it from `url`: `SqliteConnectOptions::get_filename`),
    /// at most `max_threads` (at least 1), whose connections wait `busy_timeout` for a lock.
    /// `None` when the database is not a file named by a plain path: options after `?` (which
    /// sqlx applies when it opens a connection), a `file:` URI, or an in-memory database
    /// (sqlx names it `file:sqlx-in-memory-N`): its pages are read through sqlx's pool.
    pub(crate) fn for_database(
        url: &str,
        filename: &Path,
        max_threads: u32,
        busy_timeout: Duration,
    ) -> Option<Self> {
        let plain_url = url.starts_with("sqlite:") && !url.contains('?');
        let filename = filename.to_str()?;
        if !plain_url
            || filename.is_empty()
            || filename == ":memory:"
            || filename.starts_with("file:")
            || filename.contains('?')
        {
            return None;
        }
        let filename = CString::new(filename).ok()?;
        let busy_timeout_ms = c_int::try_from(busy_timeout.as_millis()).unwrap_or(c_int::MAX);
        let (sender, queue) = flume::unbounded();
        Some(ReaderThreads {
            shared: Arc::new(Shared {
                target: Arc::new(Target {
                    filename,
                    busy_timeout_ms,
                    unavailable: AtomicBool::new(false),
                }),
                jobs: Mutex::new(Some(sender)),
                queue,
                threads: Mutex::new(Vec::new()),
                outstanding: Arc::new(AtomicUsize::new(0)),
                max_threads: usize::try_from(max_threads.max(1)).unwrap_or(usize::MAX),
                closing: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// Whether pages can be read here: no reader connection failed to open so far.
    pub(crate) fn available(&self) -> bool {
        !self.shared.target.unavailable.load(Ordering::Relaxed)
    }

    /// Reads the page of `sql` with `args` (as [`sqlite_page::read_page`]) on a reader thread,
    /// and runs `build` on it there. `None` when it could not (see the module documentation):
    /// the caller reads the page row by row through sqlx.
    ///
    /// [`sqlite_page::read_page`]: crate::sqlite_page::read_page
    pub(crate) fn read_page<T: Send + 'static>(
        &self,
        sql: String,
        args: Vec<PageArg<String>>,
        query_columns: bool,
        limit: usize,
        build: impl FnOnce(&RawPage) -> T + Send + 'static,
    ) -> impl Future<Output = Option<T>> + Send + 'static {
        let (reply, page) = oneshot::channel();
        self.submit(Box::new(move |connection: &mut ReaderConnection| {
            // A query dropped meanwhile (a read ahead it no longer needs) reads nothing.
            if reply.is_closed() {
                return;
            }
            let page = connection.read_page(&sql, &args, query_columns, limit);
            let built = page.as_ref().map(build);
            // The page's buffers serve the connection's next page.
            if let Some(page) = page {
                connection.keep_buffers(page);
            }
            let _ = reply.send(built);
        }));
        // A job dropped unread (closed, or no thread could start) answers nothing: `None`.
        async move { page.await.ok().flatten() }
    }

    /// Ends the threads once the pages sent before are read, closing their connections, and
    /// waits for them (every caller, also of a close running meanwhile). Pages asked for
    /// afterwards are read through sqlx's pool.
    pub(crate) async fn close(&self) {
        let _closing = self.shared.closing.lock().await;
        drop(lock(&self.shared.jobs).take());
        let threads = std::mem::take(&mut *lock(&self.shared.threads));
        if threads.is_empty() {
            return;
        }
        let joined = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        });
        if let Err(error) = joined.await {
            tracing::debug!(%error, "SQLite reader threads: not joined on close");
        }
    }

    /// Sends `job` to the threads, starting one more while the pages waiting outnumber them
    /// (threads that ended, which only a panic outside a page could do, are not counted). The
    /// job is dropped (its caller answered `None`) when the threads are closed, or when none
    /// runs and none can start.
    fn submit(&self, job: Job) {
        let shared = &*self.shared;
        let jobs = lock(&shared.jobs);
        let Some(sender) = jobs.as_ref() else {
            return;
        };
        let outstanding = shared.outstanding.fetch_add(1, Ordering::AcqRel) + 1;
        let mut threads = lock(&shared.threads);
        threads.retain(|thread| !thread.is_finished());
        if outstanding > threads.len() && threads.len() < shared.max_threads {
            match self.spawn_thread() {
                Ok(thread) => threads.push(thread),
                Err(error) => tracing::warn!(%error, "SQLite reader thread did not start"),
            }
        }
        if threads.is_empty() || sender.send(job).is_err() {
            shared.outstanding.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Starts a reader thread: it reads pages until the sender is gone.
    fn spawn_thread(&self) -> std::io::Result<thread::JoinHandle<()>> {
        let queue = self.shared.queue.clone();
        let target = Arc::clone(&self.shared.target);
        let outstanding = Arc::clone(&self.shared.outstanding);
        thread::Builder::new()
            .name("sqlite-page-reader".to_owned())
            .spawn(move || {
                let mut connection = ReaderConnection::new(target);
                while let Ok(job) = queue.recv() {
                    // Counted out however the job ends.
                    let _done = Done(&outstanding);
                    let ran = panic::catch_unwind(AssertUnwindSafe(|| job(&mut connection)));
                    if ran.is_err() {
                        // A page's `build` panicked (its caller gets `None`). Its statement was
                        // reset before `build` ran; the statements are finalized all the same,
                        // so that nothing a panic interrupted keeps a read transaction open.
                        connection.statements.clear();
                    }
                }
            })
    }

    /// Reader threads started (for tests).
    #[cfg(test)]
    fn threads(&self) -> usize {
        lock(&self.shared.threads).len()
    }

    /// What `f` gives on the connection of the thread that runs it (for tests).
    #[cfg(test)]
    async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut ReaderConnection) -> R + Send + 'static,
    ) -> Option<R> {
        let (reply, answer) = oneshot::channel();
        self.submit(Box::new(move |connection: &mut ReaderConnection| {
            let _ = reply.send(f(connection));
        }));
        answer.await.ok()
    }

    /// Statements prepared by the connection of the thread that runs this request (for tests,
    /// with one thread).
    #[cfg(test)]
    async fn prepared(&self) -> Option<usize> {
        self.run(|connection| connection.prepared).await
    }
}

/// Counts a page out of [`Shared::outstanding`] when dropped.
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Locks `mutex`, also after a panic of another holder (the data is a sender or a list of
/// threads, consistent at every step).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The connection of one reader thread, opened at its first page, with the statements it ran.
pub(crate) struct ReaderConnection {
    target: Arc<Target>,
    db: Option<NonNull<ffi::sqlite3>>,
    /// Prepared statements by SQL text, the most recently used last.
    statements: Vec<(Box<str>, Statement)>,
    /// The buffers of the last page read, emptied, for the next one (see
    /// [`RawPage::emptied`]).
    spare: RawPage,
    /// Statements prepared since the connection opened (for tests).
    #[cfg(test)]
    prepared: usize,
}

impl ReaderConnection {
    fn new(target: Arc<Target>) -> Self {
        ReaderConnection {
            target,
            db: None,
            statements: Vec::new(),
            spare: RawPage::default(),
            #[cfg(test)]
            prepared: 0,
        }
    }

    /// Reads a page of `sql` (see [`ReaderThreads::read_page`]); `None` when the connection
    /// does not open, SQLite refuses the statement or a row is of another shape.
    fn read_page(
        &mut self,
        sql: &str,
        args: &[PageArg<String>],
        query_columns: bool,
        limit: usize,
    ) -> Option<RawPage> {
        let buffers = std::mem::take(&mut self.spare);
        let stmt = self.statement(sql)?;
        // SAFETY: the connection is this thread's alone.
        unsafe { read_statement_page(stmt, args, query_columns, limit, buffers) }
    }

    /// Keeps `page`'s buffers, emptied, for the next page read here.
    fn keep_buffers(&mut self, page: RawPage) {
        self.spare = page.emptied();
    }

    /// The prepared statement of `sql`: the one kept, or prepared now (the least recently used
    /// one finalized when [`STATEMENTS_KEPT`] are kept).
    fn statement(&mut self, sql: &str) -> Option<&mut Statement> {
        if let Some(at) = self.statements.iter().position(|(kept, _)| **kept == *sql) {
            let kept = self.statements.remove(at);
            self.statements.push(kept);
        } else {
            let db = self.open()?;
            // SAFETY: the connection is open, this thread's alone, and closed only after its
            // statements are finalized (`Drop`).
            let stmt = unsafe { Statement::prepare(db, sql, true)? };
            #[cfg(test)]
            {
                self.prepared += 1;
            }
            if self.statements.len() >= STATEMENTS_KEPT {
                self.statements.remove(0);
            }
            self.statements.push((sql.into(), stmt));
        }
        self.statements.last_mut().map(|(_, stmt)| stmt)
    }

    /// The open connection, opened now if it is not.
    fn open(&mut self) -> Option<NonNull<ffi::sqlite3>> {
        if let Some(db) = self.db {
            return Some(db);
        }
        let mut db = ptr::null_mut();
        let flags = ffi::SQLITE_OPEN_READWRITE
            | ffi::SQLITE_OPEN_NOMUTEX
            | ffi::SQLITE_OPEN_PRIVATECACHE
            | ffi::SQLITE_OPEN_URI;
        // SAFETY: a valid C string and out-pointer; a handle SQLite returns is closed below
        // when the open failed, otherwise by `Drop`.
        unsafe {
            let rc =
                ffi::sqlite3_open_v2(self.target.filename.as_ptr(), &mut db, flags, ptr::null());
            let Some(db) = NonNull::new(db) else {
                self.target.unavailable.store(true, Ordering::Relaxed);
                return None;
            };
            let ready = rc == ffi::SQLITE_OK
                && ffi::sqlite3_busy_timeout(db.as_ptr(), self.target.busy_timeout_ms)
                    == ffi::SQLITE_OK
                && ffi::sqlite3_exec(
                    db.as_ptr(),
                    c"PRAGMA query_only = ON".as_ptr(),
                    None,
                    ptr::null_mut(),
                    ptr::null_mut(),
                ) == ffi::SQLITE_OK;
            if !ready {
                let code = ffi::sqlite3_extended_errcode(db.as_ptr());
                ffi::sqlite3_close(db.as_ptr());
                if !self.target.unavailable.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        database = ?self.target.filename,
                        code,
                        "SQLite reader thread: connection not opened; pages are read through \
                         sqlx's pool"
                    );
                }
                return None;
            }
            self.db = Some(db);
            Some(db)
        }
    }
}

impl Drop for ReaderConnection {
    fn drop(&mut self) {
        // Statements first: `sqlite3_close` refuses a connection with statements open.
        self.statements.clear();
        if let Some(db) = self.db.take() {
            // SAFETY: open, every statement finalized, used by no other thread.
            unsafe {
                ffi::sqlite3_close(db.as_ptr());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::page_row::RawPage as Page;
    /// The page as read (a copy: the reader keeps its buffers).
    fn identity(page: &Page) -> Page {
        page.clone()
    }

    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
    use sqlx::{Pool, Sqlite};

    use super::*;
    use crate::page_row::PageRow;
    use crate::sqlite_page;

    const QUERY: &str = sqlite_page::PAGE_QUERY;

    /// A database file in `dir` in WAL mode (as the journal's) with a `journal` table of the
    /// page's columns and `rows` inserted, its pool (one connection, the writer) and reader
    /// threads (at most `threads`).
    async fn database(
        dir: &tempfile::TempDir,
        rows: &[&str],
        threads: u32,
    ) -> (Pool<Sqlite>, ReaderThreads) {
        let path = dir.path().join("journal.db");
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(
                SqliteConnectOptions::new()
                    .filename(&path)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal),
            )
            .await
            .expect("a database file");
        sqlite_page::fill_page_table(&pool, rows).await;
        let url = format!("sqlite:{}", path.display());
        let threads = ReaderThreads::for_database(&url, &path, threads, Duration::from_secs(5))
            .expect("a plain path has reader threads");
        (pool, threads)
    }

    async fn insert(pool: &Pool<Sqlite>, row: &str) {
        sqlx::query(&format!("INSERT INTO journal VALUES ({row})"))
            .execute(pool)
            .await
            .expect("a row");
    }

    fn args(id: &'static str, from: i64) -> [PageArg<&'static str>; 3] {
        [PageArg::Text(id), PageArg::Int(from), PageArg::Int(10)]
    }

    /// [`ReaderThreads::read_page`] of a query page of `sql` with `args`, at most 10 rows.
    fn read<T: Send + 'static>(
        threads: &ReaderThreads,
        sql: &str,
        args: &[PageArg<&str>],
        build: impl FnOnce(&RawPage) -> T + Send + 'static,
    ) -> impl Future<Output = Option<T>> + Send + 'static {
        let args = args.iter().map(|arg| arg.to_owned_text()).collect();
        threads.read_page(sql.to_owned(), args, true, 10, build)
    }

    /// `answer`'s output, or a failed test after 30 s (a hang).
    async fn answer<T>(answer: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(30), answer)
            .await
            .expect("an answer, not a hang")
    }

    /// The seq_nrs of a page of `id` from `from` read on the threads; `None` for no page.
    async fn seq_nrs(threads: &ReaderThreads, id: &'static str, from: i64) -> Option<Vec<i64>> {
        let page = read(threads, QUERY, &args(id, from), identity).await?;
        Some(page.rows().map(|row| row.seq_nr).collect())
    }

    const ROWS: [&str; 4] = [
        "'A|1', 2, 'w', 17, 3, 'm', X'00FF41', '[\"t\"]', 99",
        "'A|1', 1, 'w', 16, 3, '', X'', '[]', 98",
        "'A|1', 3, 'w2', 18, 3, 'é', 'é', '[]', 100",
        "'B|1', 1, 'w', 16, 3, '', X'01', '[]', 98",
    ];

    #[tokio::test]
    async fn a_page_read_on_a_reader_thread_is_the_page_sqlx_pool_reads() {
        let dir = tempfile::tempdir().expect("a directory");
        let (pool, threads) = database(&dir, &ROWS, 2).await;
        let on_thread = read(&threads, QUERY, &args("A|1", 0), identity)
            .await
            .expect("a page");
        let on_pool =
            sqlite_page::read_page(&pool, None, QUERY, &args("A|1", 0), true, 10, identity)
                .await
                .expect("a page");
        let rows: Vec<PageRow<'_>> = on_thread.rows().collect();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows, on_pool.rows().collect::<Vec<_>>());
        assert_eq!(rows[1].payload, Some(&[0x00, 0xff, 0x41][..]));
        assert_eq!(rows[2].manifest, "é");
    }

    #[tokio::test]
    async fn a_reader_keeps_its_page_buffers_for_the_next_page() {
        let dir = tempfile::tempdir().expect("a directory");
        let (_pool, threads) = database(&dir, &ROWS, 1).await;
        let first = read(&threads, QUERY, &args("A|1", 0), identity)
            .await
            .expect("a page");
        let first_rows: Vec<i64> = first.rows().map(|row| row.seq_nr).collect();
        // The buffers of the page read are kept, emptied, with their room (limit 10 rows).
        let spare = |connection: &mut ReaderConnection| {
            let spare = &connection.spare;
            (
                spare.rows.len(),
                spare.rows.capacity(),
                spare.payloads.len(),
                spare.text.len(),
            )
        };
        let (rows, room, payloads, text) = answer(threads.run(spare)).await.expect("kept");
        assert_eq!((rows, payloads, text), (0, 0, 0));
        assert!(room >= 10, "room for the statement's limit kept: {room}");
        let room_before = room;
        // The next page reads into them: no row or text of the page before shows through.
        let next = read(&threads, QUERY, &args("B|1", 0), identity)
            .await
            .expect("a page");
        let rows: Vec<PageRow<'_>> = next.rows().collect();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].seq_nr, rows[0].payload), (1, Some(&[0x01][..])));
        assert_eq!(rows[0].persistence_id, Some("B|1"));
        assert_eq!(first_rows, [1, 2, 3]);
        let (_, room, _, _) = answer(threads.run(spare)).await.expect("kept");
        assert_eq!(room, room_before, "the same buffers, not new ones");
    }

    #[tokio::test]
    async fn a_statement_stays_prepared_from_one_page_to_the_next() {
        let dir = tempfile::tempdir().expect("a directory");
        let (_pool, threads) = database(&dir, &ROWS, 1).await;
        assert_eq!(seq_nrs(&threads, "A|1", 0).await, Some(vec![1, 2, 3]));
        assert_eq!(seq_nrs(&threads, "A|1", 3).await, Some(vec![3]));
        assert_eq!(seq_nrs(&threads, "B|1", 0).await, Some(vec![1]));
        assert_eq!(threads.prepared().await, Some(1));
        // Another statement is prepared once too.
        let other = QUERY.replace("ORDER BY seq_nr", "ORDER BY seq_nr DESC");
        for _ in 0..2 {
            let page = read(&threads, &other, &args("A|1", 0), identity)
                .await
                .expect("a page");
            assert_eq!(
                page.rows().map(|row| row.seq_nr).collect::<Vec<_>>(),
                [3, 2, 1]
            );
        }
        assert_eq!(threads.prepared().await, Some(2));
        assert_eq!(threads.threads(), 1);
    }

    #[tokio::test]
    async fn a_page_that_failed_midway_leaves_no_read_transaction_behind() {
        let dir = tempfile::tempdir().expect("a directory");
        // The second row's seq_nr is text: the page stops there, no page.
        let (pool, threads) = database(
            &dir,
            &[ROWS[1], "'A|1', 'two', 'w', 17, 3, 'm', X'00', '[]', 99"],
            1,
        )
        .await;
        assert_eq!(seq_nrs(&threads, "A|1", 0).await, None);
        // The statement was reset: the writer checkpoints the whole WAL (a reader on an old
        // snapshot would keep frames in it: busy 1), and the next page sees the new row.
        sqlx::query("DELETE FROM journal WHERE seq_nr = 'two'")
            .execute(&pool)
            .await
            .expect("deleted");
        insert(&pool, ROWS[0]).await;
        let (busy,): (i64,) = sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)")
            .fetch_one(&pool)
            .await
            .expect("a checkpoint");
        assert_eq!(busy, 0);
        assert_eq!(seq_nrs(&threads, "A|1", 0).await, Some(vec![1, 2]));
    }

    #[tokio::test]
    async fn a_page_whose_build_panics_answers_none_and_the_thread_reads_on() {
        let dir = tempfile::tempdir().expect("a directory");
        let (_pool, threads) = database(&dir, &ROWS, 1).await;
        let reader = || threads.run(|_| thread::current().id());
        let before = answer(reader()).await;
        let panicked = read(&threads, QUERY, &args("A|1", 0), |_: &RawPage| -> usize {
            panic!("a build that fails")
        });
        assert_eq!(answer(panicked).await, None);
        // The same thread (and connection) reads on.
        assert_eq!(answer(reader()).await, before);
        assert_eq!(
            answer(seq_nrs(&threads, "A|1", 0)).await,
            Some(vec![1, 2, 3])
        );
        assert_eq!(threads.threads(), 1);
    }

    #[tokio::test]
    async fn a_page_sees_what_committed_after_the_page_before_on_the_same_statement() {
        let dir = tempfile::tempdir().expect("a directory");
        let (pool, threads) = database(&dir, &ROWS[1..2], 1).await;
        assert_eq!(seq_nrs(&threads, "A|1", 0).await, Some(vec![1]));
        insert(&pool, ROWS[0]).await;
        assert_eq!(seq_nrs(&threads, "A|1", 0).await, Some(vec![1, 2]));
        insert(&pool, ROWS[2]).await;
        assert_eq!(seq_nrs(&threads, "A|1", 0).await, Some(vec![1, 2, 3]));
        assert_eq!(threads.prepared().await, Some(1));
    }

    #[tokio::test]
    async fn the_least_recently_used_statement_is_finalized_past_the_most_kept() {
        let dir = tempfile::tempdir().expect("a directory");
        let (_pool, threads) = database(&dir, &ROWS, 1).await;
        let statement = |n: usize| format!("{QUERY} /* {n} */");
        for n in 0..=STATEMENTS_KEPT {
            let page = read(&threads, &statement(n), &args("A|1", 0), |page| {
                page.rows.len()
            })
            .await;
            assert_eq!(page, Some(3));
        }
        assert_eq!(threads.prepared().await, Some(STATEMENTS_KEPT + 1));
        // The last one is kept; the first was finalized to make room, and is prepared again.
        for n in [STATEMENTS_KEPT, 0] {
            let page = read(&threads, &statement(n), &args("A|1", 0), |page| {
                page.rows.len()
            })
            .await;
            assert_eq!(page, Some(3));
        }
        assert_eq!(threads.prepared().await, Some(STATEMENTS_KEPT + 2));
    }

    #[tokio::test]
    async fn a_connection_that_does_not_open_makes_the_threads_unavailable() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("missing.db");
        let url = format!("sqlite:{}", path.display());
        let threads = ReaderThreads::for_database(&url, &path, 1, Duration::ZERO)
            .expect("a plain path has reader threads");
        assert!(threads.available());
        assert_eq!(seq_nrs(&threads, "A|1", 0).await, None);
        assert!(!threads.available());
    }

    #[tokio::test]
    async fn threads_start_as_pages_wait_up_to_the_most_allowed() {
        let dir = tempfile::tempdir().expect("a directory");
        let (_pool, threads) = database(&dir, &ROWS, 2).await;
        assert_eq!(threads.threads(), 0);
        let pages: Vec<_> = (0..6)
            .map(|_| read(&threads, QUERY, &args("A|1", 0), |page| page.rows.len()))
            .collect();
        assert_eq!(threads.threads(), 2);
        for page in pages {
            assert_eq!(page.await, Some(3));
        }
    }

    #[tokio::test]
    async fn closed_threads_read_nothing_and_close_their_connections() {
        let dir = tempfile::tempdir().expect("a directory");
        let (pool, threads) = database(&dir, &ROWS, 2).await;
        assert_eq!(seq_nrs(&threads, "A|1", 0).await, Some(vec![1, 2, 3]));
        threads.close().await;
        assert_eq!(threads.threads(), 0);
        assert_eq!(seq_nrs(&threads, "A|1", 0).await, None);
        // No connection of the threads is left: WAL mode can be left (it needs the database
        // to itself).
        let (mode,): (String,) = sqlx::query_as("PRAGMA journal_mode = DELETE")
            .fetch_one(&pool)
            .await
            .expect("the journal mode");
        assert_eq!(mode, "delete");
    }

    #[tokio::test]
    async fn every_close_waits_for_the_pages_sent_before_it() {
        let dir = tempfile::tempdir().expect("a directory");
        let (_pool, threads) = database(&dir, &ROWS, 1).await;
        // The one thread is held by a job until released; a page waits behind it.
        let (release, released) = std::sync::mpsc::channel::<()>();
        let held = Arc::new(AtomicBool::new(false));
        let job_held = Arc::clone(&held);
        threads.submit(Box::new(move |_: &mut ReaderConnection| {
            let _ = released.recv();
            job_held.store(true, Ordering::SeqCst);
        }));
        let page = read(&threads, QUERY, &args("A|1", 0), |page| page.rows.len());
        let first = threads.close();
        let second = threads.close();
        futures::pin_mut!(first, second);
        assert!(futures::poll!(first.as_mut()).is_pending());
        assert!(
            futures::poll!(second.as_mut()).is_pending(),
            "a second close returned while a thread still ran"
        );
        release.send(()).expect("the job waits");
        futures::join!(first, async {
            second.await;
            assert!(
                held.load(Ordering::SeqCst),
                "a second close returned before the job ended"
            );
        });
        // The page sent before the close was read.
        assert_eq!(page.await, Some(3));
        assert_eq!(threads.threads(), 0);
    }

    #[test]
    fn only_a_plain_path_has_reader_threads() {
        let some = |url: &str| {
            let options: SqliteConnectOptions = url.parse().expect("a SQLite URL");
            ReaderThreads::for_database(url, options.get_filename(), 4, Duration::ZERO).is_some()
        };
        assert!(some("sqlite:x.db"));
        assert!(some("sqlite://x.db"));
        assert!(some("sqlite:/var/lib/app/x.db"));
        assert!(some("sqlite:/var/lib/my%20app/x.db"));
        assert!(!some("sqlite::memory:"));
        assert!(!some("sqlite:sqlite::memory:"));
        assert!(!some("sqlite:x.db?mode=ro"));
        assert!(!some("sqlite://x.db?immutable=true"));
        assert!(!some("sqlite:file:x.db"));
        assert!(!some("sqlite:file:x.db%3Fmode=memory%26cache=shared"));
        assert!(
            ReaderThreads::for_database("postgres://h/x", Path::new("x"), 4, Duration::ZERO)
                .is_none()
        );
    }
}
