//! [`HomeRuntime`]: the Tokio runtime a pool's connections are opened on.

use std::future::Future;

use futures::future::BoxFuture;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// The Tokio runtime a store runs its database work on, so that every connection of its pool
/// is opened there.
///
/// Why: a PostgreSQL connection's socket belongs to the I/O driver of the runtime that opened
/// it. An Actix app runs actors on several arbiters, each a runtime of its own; a connection
/// that a pool opened for an actor on one of them (a recovery's replay page, a snapshot load,
/// a query) would outlive that arbiter in the shared pool, and once the arbiter stopped it
/// fails whoever draws it next ("A Tokio 1.x context was found, but it is being shutdown")
/// or leaves that caller waiting. The stores of this crate therefore run such work as a task
/// on the runtime they were opened on (normally the Actix system's), whatever runtime the
/// caller is on; a caller that goes away mid-query only drops its wait, and the connection
/// goes back to the pool when the task ends.
///
/// The home runtime must live as long as the store: open stores on the system's runtime
/// (`Persistence::open` in `main`), not on an arbiter that stops before them. Work asked of a
/// store whose home runtime has shut down fails with a storage error whose source is
/// [`HomeRuntimeGone`].
///
/// The home runtime must also be free to run that work: a thread that blocks it (a
/// synchronous wait for a store call inside a handler on the system's arbiter) holds up every
/// store call, from every arbiter, until it returns.
///
/// Each call from another runtime costs one task spawn; calls on the home runtime itself run
/// in place.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), actix_persistence_sql::HomeRuntimeGone> {
/// use actix_persistence_sql::HomeRuntime;
///
/// // Where a store is opened: its database work will run on this runtime.
/// let home = HomeRuntime::current();
/// let answer = home.run(async { 6 * 7 }).await?;
/// assert_eq!(answer, 42);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct HomeRuntime {
    /// `None`: the caller's runtime (or the caller's own polling outside any).
    handle: Option<Handle>,
}

/// [`HomeRuntime::caller`], for stores that borrow it.
pub(crate) static CALLER: HomeRuntime = HomeRuntime { handle: None };

impl HomeRuntime {
    /// The runtime of the caller, when it runs in one (a store's `connect`); otherwise
    /// [`caller`](Self::caller)'s behaviour.
    pub fn current() -> Self {
        HomeRuntime {
            handle: Handle::try_current().ok(),
        }
    }

    /// No home of its own: work runs on whatever runtime asks for it (the SQLite stores, whose
    /// connections live on threads of their own, not in a runtime's I/O driver).
    pub fn caller() -> Self {
        HomeRuntime { handle: None }
    }

    /// Runs `work` to its end as a task on the home runtime and returns its output. Dropping
    /// the returned future does not cancel the task: the work ends on the home runtime, and
    /// the connection it holds goes back to the pool there. Called on the home runtime itself
    /// (or for [`caller`](Self::caller)), it awaits `work` in place: no task, and dropping the
    /// future drops the work, as with any future.
    ///
    /// # Errors
    /// [`HomeRuntimeGone`] when the home runtime has shut down (or the task panicked, with
    /// the panic's message).
    pub async fn run<T, F>(&self, work: F) -> Result<T, HomeRuntimeGone>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        match &self.handle {
            Some(home) if !is_current(home) => {
                home.spawn(work).await.map_err(HomeRuntimeGone::from)
            }
            _ => Ok(work.await),
        }
    }

    /// As [`run`](Self::run), for work that answers a `Result`: a home runtime that could not
    /// run it answers `gone(`[`HomeRuntimeGone`]`)`, the store's own error.
    ///
    /// # Errors
    /// The work's error, or `gone`'s.
    pub async fn try_run<T, E, F>(
        &self,
        work: F,
        gone: impl FnOnce(HomeRuntimeGone) -> E,
    ) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        self.run(work).await.map_err(gone)?
    }

    /// Starts `work` as a task on the home runtime (for [`caller`](Self::caller): on the
    /// caller's runtime); `None` when there is no runtime to start it on (the caller then
    /// polls `work` itself).
    pub(crate) fn spawn<T: Send + 'static>(
        &self,
        work: BoxFuture<'static, T>,
    ) -> Result<JoinHandle<T>, BoxFuture<'static, T>> {
        match &self.handle {
            Some(home) => Ok(home.spawn(work)),
            None => match Handle::try_current() {
                Ok(runtime) => Ok(runtime.spawn(work)),
                Err(_) => Err(work),
            },
        }
    }
}

/// Whether the caller runs on `home` (its work needs no task of its own there: a task spawn
/// and a wake-up per call cost an exactly-once projection ~17 % of its groups per second on
/// PostgreSQL, `docs/benchmarks.md` "Session 23").
fn is_current(home: &Handle) -> bool {
    Handle::try_current().is_ok_and(|current| current.id() == home.id())
}

/// A store's work could not run on its [`HomeRuntime`]: the runtime has shut down, or the
/// task panicked.
#[derive(Debug, thiserror::Error)]
#[error("the runtime the store was opened on could not run its work: {reason}")]
pub struct HomeRuntimeGone {
    /// What the task's end says (cancelled at shutdown, or the panic).
    pub reason: String,
}

impl From<tokio::task::JoinError> for HomeRuntimeGone {
    fn from(error: tokio::task::JoinError) -> Self {
        HomeRuntimeGone {
            reason: error.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_runs_on_the_home_runtime_whatever_runtime_asks() {
        let home = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("home")
            .build()
            .expect("a runtime");
        let store = home.block_on(async { HomeRuntime::current() });
        let caller = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let ran_on = caller
            .block_on(store.run(async { std::thread::current().name().map(str::to_owned) }))
            .expect("home runs");
        assert_eq!(ran_on.as_deref(), Some("home"));
        drop(home);
        let gone = caller.block_on(store.run(async { 1 }));
        assert!(gone.is_err(), "{gone:?}");
    }

    #[test]
    fn work_asked_on_the_home_runtime_runs_in_place() {
        let home = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let store = home.block_on(async { HomeRuntime::current() });
        // `block_on`'s own future is no task: in place, the work sees no task id.
        let in_place = home
            .block_on(store.run(async { tokio::task::try_id() }))
            .expect("runs");
        assert_eq!(in_place, None, "run in place on the home runtime");
        let caller = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let from_elsewhere =
            std::thread::spawn(move || caller.block_on(store.run(async { tokio::task::try_id() })));
        // The home runtime runs the spawned task while this thread drives it.
        let spawned = home
            .block_on(async {
                loop {
                    if from_elsewhere.is_finished() {
                        break from_elsewhere.join();
                    }
                    tokio::task::yield_now().await;
                }
            })
            .expect("the caller's thread")
            .expect("runs");
        assert!(spawned.is_some(), "a task of its own on the home runtime");
    }

    #[test]
    fn caller_runs_work_in_place() {
        let caller = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let here = std::thread::current().id();
        let ran_on = caller
            .block_on(HomeRuntime::caller().run(async { std::thread::current().id() }))
            .expect("runs");
        assert_eq!(ran_on, here);
    }
}
