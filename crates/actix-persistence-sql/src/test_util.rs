//! Throwaway PostgreSQL databases for tests (feature `test-util`): each test gets a database of
//! its own on the server `DATABASE_URL` names, dropped when the handle is dropped, so tests
//! never share state and run in any order (the idea of `#[sqlx::test]`).
//!
//! Without `DATABASE_URL`, [`TestDatabase::create`] prints `skipped: DATABASE_URL not set` and
//! returns `None`, except when `CI` is set: then it panics, because CI must run these tests.

use sqlx::{Connection, Executor, PgConnection};

/// `DATABASE_URL`, or `None` (after printing the notice) when it is not set outside CI.
///
/// # Panics
/// When `CI` is set and `DATABASE_URL` is not.
pub fn database_url() -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => panic!(
            "DATABASE_URL is not set but CI is: the PostgreSQL tests must run in CI \
             (export DATABASE_URL=postgres:///actix_persistence_test?host=/var/run/postgresql&user=postgres)"
        ),
        _ => {
            eprintln!("skipped: DATABASE_URL not set");
            None
        }
    }
}

/// `url` pointing at the database `name` on the same server (path replaced, any `dbname`
/// parameter dropped).
pub fn url_with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let mut out = format!("{}/{name}", &base[..path_start]);
    let params: Vec<&str> = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|pair| !pair.starts_with("dbname="))
        .collect();
    if !params.is_empty() {
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

/// A database of one test, `ap_test_<uuid>`, dropped (with its connections) on drop.
#[derive(Debug)]
pub struct TestDatabase {
    name: String,
    url: String,
    server: String,
}

impl TestDatabase {
    /// Creates a fresh, empty database; `None` when `DATABASE_URL` is unset (outside CI).
    ///
    /// # Panics
    /// When the server cannot be reached or the database cannot be created (a test setup
    /// failure), or when `CI` is set without `DATABASE_URL`.
    pub async fn create() -> Option<Self> {
        let server = database_url()?;
        let name = format!("ap_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&server)
            .await
            .unwrap_or_else(|e| panic!("connect to DATABASE_URL: {e}"));
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap_or_else(|e| panic!("create the test database {name}: {e}"));
        let _ = admin.close().await;
        Some(TestDatabase {
            url: url_with_database(&server, &name),
            name,
            server,
        })
    }

    /// A URL reaching the database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // Drop runs inside a test's async runtime: drop the database from a thread of its own.
        let server = self.server.clone();
        let statement = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async move {
                let mut admin = PgConnection::connect(&server)
                    .await
                    .map_err(|e| e.to_string())?;
                admin
                    .execute(statement.as_str())
                    .await
                    .map_err(|e| e.to_string())?;
                admin.close().await.map_err(|e| e.to_string())
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!(
                "warning: could not drop test database {}: {dropped:?}",
                self.name
            );
        }
    }
}

#[cfg(feature = "sqlite")]
/// The SQL of one page of a query by `filter` as the SQLite journal runs it (see
/// `EventsRequest` for its parameters), for tests that look at its query plan: a page that
/// starts right after an event when `after_an_event`, at the start of a timestamp otherwise.
pub fn sqlite_page_query_sql(
    filter: &actix_persistence_core::query::EventFilter,
    with_previous_timestamp: bool,
    after_an_event: bool,
) -> String {
    use crate::journal_common::PageStart;
    crate::journal_common::page_query_sql::<crate::sqlite::SqliteDialect>(
        filter,
        with_previous_timestamp,
        if after_an_event {
            PageStart::AfterEvent
        } else {
            PageStart::StartOfTimestamp
        },
    )
}

/// A Tokio runtime on a thread of its own that ran a test's work and now sits idle: its I/O
/// driver is not polled (as an Actix arbiter's, busy in a handler) until
/// [`shut_down`](Self::shut_down) drops it. Made by [`run_on_another_runtime`].
#[derive(Debug)]
pub struct IdleRuntime {
    release: std::sync::mpsc::Sender<()>,
    thread: tokio::task::JoinHandle<()>,
}

impl IdleRuntime {
    /// Drops the runtime (and its I/O driver) and waits until it is gone.
    ///
    /// # Panics
    /// When the runtime's thread panicked.
    pub async fn shut_down(self) {
        let _ = self.release.send(());
        self.thread.await.expect("the other runtime's thread ends");
    }
}

/// Runs `work` to its end on a current-thread Tokio runtime of its own (on a blocking thread,
/// so that the caller's runtime goes on running meanwhile), then leaves that runtime idle: the
/// way to check that a store keeps no connection tied to a runtime other than its own.
///
/// # Panics
/// When the runtime cannot be built or `work` panics.
pub async fn run_on_another_runtime<T, W>(work: W) -> (T, IdleRuntime)
where
    W: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let (done, result) = tokio::sync::oneshot::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let thread = tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let _ = done.send(runtime.block_on(work));
        let _ = released.recv();
        // The runtime shuts down here, and its I/O driver with it.
    });
    let result = result.await.expect("the work ran to its end");
    (result, IdleRuntime { release, thread })
}
