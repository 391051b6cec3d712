//! A query's reads run in tasks of their own.

use std::future::Future;

use crate::error::JournalError;

/// Runs `read` in a task of its own on the current Tokio runtime (inline outside one), aborted
/// when the returned future is dropped before it ended (the query was dropped).
///
/// A read under way then completes, and gives its database connection back to the pool, also
/// when the consumer stops pulling in the middle of it (a `select!` that took another branch,
/// a projection paused meanwhile). Read inside the stream's own future, it kept the connection
/// until the consumer pulled again, however long that took: a few consumers that paused so held
/// every reader connection of the journal, and every query, replay and recovery on it waited.
///
/// # Errors
/// `read`'s error; [`JournalError::Storage`] (operation `what`) when its task panicked.
pub(crate) async fn in_own_task<T, F>(what: &'static str, read: F) -> Result<T, JournalError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, JournalError>> + Send + 'static,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return read.await;
    };
    let task = runtime.spawn(read);
    let _abort_on_drop = AbortOnDrop(task.abort_handle());
    match task.await {
        Ok(result) => result,
        Err(error) => Err(JournalError::storage(what, error)),
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
