use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use actix::dev::{MessageResponse, OneshotSender};
use actix::{Actor, Message};
use tokio::sync::oneshot;

use crate::error::{JournalError, WriteRejection};

/// Why a `persist`, `persist_all` or `defer` continuation did not run.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PersistError {
    /// The journal rejected the write (e.g. the event could not be serialized). Nothing was
    /// stored; the actor goes on with its next command.
    #[error(transparent)]
    Rejected(#[from] WriteRejection),
    /// The journal failed the write; the events may or may not be stored. The actor stops.
    #[error(transparent)]
    Failed(#[from] JournalError),
    /// An earlier write of this actor failed, so the actor stopped before this one completed.
    #[error("the persistent actor stopped after an earlier write failed")]
    ActorStopped,
}

/// The outcome of a continuation: what it returned once its events were stored, or why it
/// did not run.
pub type PersistResult<R> = Result<R, PersistError>;

/// The eventual result of a `persist`, `persist_all` or `defer` continuation.
///
/// Return it from an Actix handler whose message has `Result = Result<R, PersistError>`: the
/// sender then gets the continuation's value after the events are stored and applied. It can
/// also be awaited (it is `IntoFuture`), or ignored when nobody needs the answer: the
/// continuation runs either way.
#[derive(Debug)]
pub struct PersistReply<R> {
    rx: oneshot::Receiver<PersistResult<R>>,
}

impl<R> PersistReply<R> {
    /// A reply that is already there: for a command handled without persisting (e.g. one the
    /// actor refuses after validating it).
    pub fn ready(value: R) -> Self {
        let (tx, reply) = Self::channel();
        let _ = tx.send(Ok(value));
        reply
    }

    pub(crate) fn channel() -> (oneshot::Sender<PersistResult<R>>, Self) {
        let (tx, rx) = oneshot::channel();
        (tx, PersistReply { rx })
    }
}

impl<R> IntoFuture for PersistReply<R> {
    type Output = PersistResult<R>;
    type IntoFuture = ReplyFuture<R>;

    fn into_future(self) -> ReplyFuture<R> {
        ReplyFuture { rx: self.rx }
    }
}

/// The future of a [`PersistReply`]: resolves when the continuation ran, or with
/// [`PersistError::ActorStopped`] when the actor stopped first.
#[derive(Debug)]
pub struct ReplyFuture<R> {
    rx: oneshot::Receiver<PersistResult<R>>,
}

impl<R> Future for ReplyFuture<R> {
    type Output = PersistResult<R>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|answer| answer.unwrap_or(Err(PersistError::ActorStopped)))
    }
}

impl<A, M, R> MessageResponse<A, M> for PersistReply<R>
where
    A: Actor,
    M: Message<Result = PersistResult<R>>,
    R: 'static,
{
    fn handle(self, _: &mut A::Context, tx: Option<OneshotSender<M::Result>>) {
        if let Some(tx) = tx {
            // The actor's context is busy waiting for the write, so the answer is forwarded by
            // a task of its own.
            actix::spawn(async move {
                let _ = tx.send(self.await);
            });
        }
    }
}
