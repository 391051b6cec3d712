//! The handle of a running projection: pause, resume, stop, reset, progress and lag.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::error::{BoxError, OffsetStoreError, ProjectionError};
use crate::progress::{Lag, Progress, ProjectionState};
use crate::source::{Envelope, SourceProvider};
use crate::ProjectionId;

/// What the handle asks of the running projection.
pub(crate) enum Command {
    Pause,
    Resume,
    Stop,
    Reset(oneshot::Sender<Result<(), ResetError>>),
}

/// Why [`ProjectionHandle::reset`] did not reset the offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResetError {
    /// The projection's task has ended (stopped, completed or failed): reset its offset with
    /// [`OffsetStore::reset`](crate::OffsetStore::reset) and start it again.
    #[error("the projection is not running; reset its offset through the offset store and start it again")]
    NotRunning,
    /// The projection was waiting to restart after a failure; try again once it runs.
    #[error("the projection is restarting after a failure; reset it once it runs again")]
    Restarting,
    /// The offset store failed.
    #[error(transparent)]
    Store(#[from] OffsetStoreError),
}

type LagFn<O> = Arc<
    dyn Fn(Option<O>) -> futures::future::BoxFuture<'static, Result<crate::SourceLag, BoxError>>
        + Send
        + Sync,
>;

/// Controls a projection started with [`Projection::start`](crate::Projection::start) and reads
/// its progress. Dropping the handle stops the projection (as [`stop`](Self::stop) would,
/// without waiting).
pub struct ProjectionHandle<O> {
    id: ProjectionId,
    commands: mpsc::UnboundedSender<Command>,
    progress: watch::Receiver<Progress<O>>,
    lag: LagFn<O>,
    task: Option<JoinHandle<()>>,
}

impl<O> std::fmt::Debug for ProjectionHandle<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProjectionHandle")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl<O: Clone + Send + Sync + 'static> ProjectionHandle<O> {
    pub(crate) fn new<E: Envelope<Offset = O>>(
        id: ProjectionId,
        commands: mpsc::UnboundedSender<Command>,
        progress: watch::Receiver<Progress<O>>,
        source: Arc<dyn SourceProvider<Envelope = E>>,
        task: JoinHandle<()>,
    ) -> Self {
        let lag: LagFn<O> = Arc::new(move |offset: Option<O>| {
            let source = Arc::clone(&source);
            Box::pin(async move { source.lag(offset.as_ref()).await })
        });
        ProjectionHandle {
            id,
            commands,
            progress,
            lag,
            task: Some(task),
        }
    }

    /// The projection instance's id.
    pub fn id(&self) -> &ProjectionId {
        &self.id
    }

    /// Stops pulling new envelopes and starting handler calls; calls in flight finish (envelopes
    /// pulled before, waiting behind their ids' calls, wait for [`resume`](Self::resume)) and
    /// the handled offset is saved.
    /// The pause holds until [`resume`](Self::resume), also across the restarts after a
    /// failure (a pause asked while the projection waits to restart included).
    pub fn pause(&self) {
        let _ = self.commands.send(Command::Pause);
    }

    /// Pulls envelopes again after [`pause`](Self::pause).
    pub fn resume(&self) {
        let _ = self.commands.send(Command::Resume);
    }

    /// Stops the projection: no new envelope is pulled, those in flight finish, the handled
    /// offset is saved; returns once its task has ended, with its final state. A call in
    /// flight that fails meanwhile ends it too (`Stopped`, the error in
    /// [`Progress::last_error`]): it is not restarted.
    pub async fn stop(mut self) -> ProjectionState {
        let _ = self.commands.send(Command::Stop);
        self.join_task().await
    }

    /// Aborts the projection's task at once, as a crash would: handler calls in flight are
    /// dropped (an exactly-once transaction rolls back) and no offset is saved beyond what was
    /// saved already. For tests of crash recovery; use [`stop`](Self::stop) otherwise.
    pub async fn abort(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Waits until the projection ends by itself (its source completed, or it failed for
    /// good), and returns its final state.
    pub async fn join(mut self) -> ProjectionState {
        self.join_task().await
    }

    async fn join_task(&mut self) -> ProjectionState {
        if let Some(task) = self.task.take() {
            if let Err(error) = task.await {
                tracing::error!(projection = %self.id, %error, "projection task ended abnormally");
                return ProjectionState::Failed;
            }
        }
        self.progress.borrow().state
    }

    /// Resets the projection to rebuild what it feeds: lets the envelopes in flight finish,
    /// deletes its stored offset, then handles its source again from the beginning. Clear the
    /// read model first (or make the handler idempotent): every event is handled again.
    ///
    /// # Errors
    /// [`ResetError`] when the projection is not running or the offset store failed.
    pub async fn reset(&self) -> Result<(), ResetError> {
        let (ack, done) = oneshot::channel();
        self.commands
            .send(Command::Reset(ack))
            .map_err(|_| ResetError::NotRunning)?;
        done.await.map_err(|_| ResetError::NotRunning)?
    }

    /// The progress now (no database call).
    pub fn progress(&self) -> Progress<O> {
        self.progress.borrow().clone()
    }

    /// Waits until the progress satisfies `done` (e.g. `|p| p.handled >= 1000`), and returns
    /// it; `None` when the projection ended first without satisfying it.
    pub async fn wait_for(
        &self,
        mut done: impl FnMut(&Progress<O>) -> bool,
    ) -> Option<Progress<O>> {
        let mut progress = self.progress.clone();
        let result = progress
            .wait_for(|p| done(p) || p.state.is_terminal())
            .await
            .ok()
            .map(|p| p.clone());
        result.filter(|p| done(p))
    }

    /// How far the projection is behind the journal: events after its handled offset, and how
    /// long ago the oldest of them was written, in ms (asks the source, e.g. one query).
    ///
    /// # Errors
    /// [`ProjectionError::Source`] naming the projection when the source cannot be read. A
    /// typed error, so `?` converts it into `Box<dyn std::error::Error>` as well:
    ///
    /// ```no_run
    /// # use actix_persistence_projection::ProjectionHandle;
    /// # use actix_persistence_projection::query::Offset;
    /// async fn caught_up(
    ///     projection: &ProjectionHandle<Offset>,
    /// ) -> Result<bool, Box<dyn std::error::Error>> {
    ///     Ok(projection.lag().await?.events == 0)
    /// }
    /// ```
    pub async fn lag(&self) -> Result<Lag, ProjectionError> {
        let progress = self.progress();
        let source_lag = (self.lag)(progress.offset.clone())
            .await
            .map_err(|source| ProjectionError::Source {
                id: self.id.clone(),
                source,
            })?;
        let ms = match source_lag.oldest_timestamp_ms {
            Some(oldest) if source_lag.events > 0 => {
                u64::try_from(crate::offset_store::now_ms() - oldest).unwrap_or(0)
            }
            _ => 0,
        };
        Ok(Lag {
            events: source_lag.events,
            ms,
        })
    }
}

impl<O> Drop for ProjectionHandle<O> {
    fn drop(&mut self) {
        if self.task.is_some() {
            let _ = self.commands.send(Command::Stop);
        }
    }
}
