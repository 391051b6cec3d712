//! One attempt at handling a unit of envelopes, for each delivery and handler form.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::oneshot;

use crate::error::{HandlerError, OffsetStoreError};
use crate::handler::{GroupedHandler, Handler, TransactionalGroupedHandler, TransactionalHandler};
use crate::offset_store::TransactionalOffsetStore;
use crate::source::Envelope;
use crate::ProjectionId;

/// What an exactly-once unit saves in its transaction: the offset (when the unit completes the
/// handled prefix) and the highest seq_nr per persistence id (with `max_concurrency` above 1).
#[derive(Debug, Default, Clone)]
pub(crate) struct Commit {
    /// The instance's owner epoch (fencing), checked in the transaction.
    pub(crate) epoch: u64,
    pub(crate) offset: Option<String>,
    pub(crate) seen: Vec<(String, u64)>,
}

/// Why one attempt failed.
pub(crate) enum AttemptError {
    /// The handler failed: retried, then skipped or failing the projection.
    Handler(HandlerError),
    /// The offset store failed: the projection restarts from its stored offset (or stops,
    /// when fenced).
    Store(OffsetStoreError),
    /// The transaction's task ended without a result (a panic outside the handler, the runtime
    /// shutting down): not retried, the projection restarts from its stored offset.
    Lost(String),
}

#[async_trait]
pub(crate) trait Processor<E: Envelope>: Send + Sync + 'static {
    /// Handles `envelopes` once; exactly-once: in one transaction that also saves `commit`.
    /// The envelopes are the unit's (lent for the attempt, there again for a retry).
    async fn attempt(&self, envelopes: &mut Vec<E>, commit: &Commit) -> Result<(), AttemptError>;

    /// After `envelopes` were skipped: exactly-once saves `commit` on its own, so a restart
    /// does not handle them again; at-least-once does nothing (the runner saves offsets).
    async fn record_skip(&self, commit: &Commit) -> Result<(), AttemptError>;

    /// Exactly-once (offsets are saved in transactions) or at-least-once.
    fn exactly_once(&self) -> bool;
}

/// At-least-once, one envelope per call.
pub(crate) struct Single<H>(pub(crate) H);

#[async_trait]
impl<E: Envelope, H: Handler<E>> Processor<E> for Single<H> {
    async fn attempt(&self, envelopes: &mut Vec<E>, _: &Commit) -> Result<(), AttemptError> {
        for envelope in envelopes.iter() {
            self.0
                .process(envelope)
                .await
                .map_err(AttemptError::Handler)?;
        }
        Ok(())
    }

    async fn record_skip(&self, _: &Commit) -> Result<(), AttemptError> {
        Ok(())
    }

    fn exactly_once(&self) -> bool {
        false
    }
}

/// At-least-once, a group per call.
pub(crate) struct Grouped<H>(pub(crate) H);

#[async_trait]
impl<E: Envelope, H: GroupedHandler<E>> Processor<E> for Grouped<H> {
    async fn attempt(&self, envelopes: &mut Vec<E>, _: &Commit) -> Result<(), AttemptError> {
        self.0
            .process(envelopes)
            .await
            .map_err(AttemptError::Handler)
    }

    async fn record_skip(&self, _: &Commit) -> Result<(), AttemptError> {
        Ok(())
    }

    fn exactly_once(&self) -> bool {
        false
    }
}

/// Exactly-once: begin, handle, save the offset, commit; each transaction in a task of its own
/// (see [`run_transaction`]).
pub(crate) struct Transactional<S, C> {
    inner: Arc<TxInner<S, C>>,
}

struct TxInner<S, C> {
    id: ProjectionId,
    store: Arc<S>,
    handler: C,
}

impl<S, C> Transactional<S, C> {
    pub(crate) fn new(id: ProjectionId, store: Arc<S>, handler: C) -> Self {
        Transactional {
            inner: Arc::new(TxInner { id, store, handler }),
        }
    }
}

/// A [`TransactionalHandler`] called once per envelope of the unit.
pub(crate) struct OneAtATime<H>(pub(crate) H);
/// A [`TransactionalGroupedHandler`] called once with the whole unit.
pub(crate) struct AsGroup<H>(pub(crate) H);

/// Both transactional handler forms, called with a unit's envelopes.
pub(crate) trait TxHandler<E, Tx>: Send + Sync + 'static {
    fn handle<'a>(
        &'a self,
        tx: &'a mut Tx,
        envelopes: &'a [E],
    ) -> BoxFuture<'a, Result<(), HandlerError>>;
}

impl<E: Envelope, Tx: Send, H: TransactionalHandler<E, Tx>> TxHandler<E, Tx> for OneAtATime<H> {
    fn handle<'a>(
        &'a self,
        tx: &'a mut Tx,
        envelopes: &'a [E],
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            for envelope in envelopes {
                self.0.process(&mut *tx, envelope).await?;
            }
            Ok(())
        })
    }
}

impl<E: Envelope, Tx: Send, H: TransactionalGroupedHandler<E, Tx>> TxHandler<E, Tx> for AsGroup<H> {
    fn handle<'a>(
        &'a self,
        tx: &'a mut Tx,
        envelopes: &'a [E],
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        self.0.process(tx, envelopes)
    }
}

impl<S, C> Transactional<S, C> {
    /// Runs one transaction ([`run_transaction`]) in a task of its own and waits for it. When
    /// this future is dropped (the projection stopped, failed elsewhere or was aborted) the
    /// task is told so: it drops the handler's call and rolls the transaction back, waiting
    /// for the database, and the connection goes back to the pool with no transaction open.
    /// A begin, a save or a commit under way is never cut in the middle (with sqlx, a begin cut
    /// short can leave a pooled SQLite connection inside a transaction nobody ends).
    async fn in_task<E>(
        &self,
        envelopes: &mut Vec<E>,
        commit: &Commit,
        call_handler: bool,
    ) -> Result<(), AttemptError>
    where
        E: Envelope,
        S: TransactionalOffsetStore,
        C: TxHandler<E, S::Transaction>,
    {
        let (cancel_on_drop, cancelled) = oneshot::channel::<()>();
        let task = tokio::spawn(run_transaction(
            Arc::clone(&self.inner),
            std::mem::take(envelopes),
            commit.clone(),
            call_handler,
            cancelled,
        ));
        let joined = task.await;
        drop(cancel_on_drop);
        match joined {
            Ok((back, result)) => {
                *envelopes = back;
                result
            }
            Err(error) => Err(AttemptError::Lost(error.to_string())),
        }
    }
}

/// One exactly-once transaction: begin, the handler (when `call_handler`; a skip saves only),
/// save the offset and the seen sequence numbers with the fencing check, commit. A handler
/// error or panic, a failed save or a cancellation (`cancelled` resolves: the waiting future
/// was dropped) rolls the transaction back explicitly. Returns the envelopes for a retry.
async fn run_transaction<E, S, C>(
    inner: Arc<TxInner<S, C>>,
    envelopes: Vec<E>,
    commit: Commit,
    call_handler: bool,
    mut cancelled: oneshot::Receiver<()>,
) -> (Vec<E>, Result<(), AttemptError>)
where
    E: Envelope,
    S: TransactionalOffsetStore,
    C: TxHandler<E, S::Transaction>,
{
    let TxInner { id, store, handler } = &*inner;
    let mut tx = match store.begin(id).await {
        Ok(tx) => tx,
        Err(error) => return (envelopes, Err(AttemptError::Store(error))),
    };
    let handled = if call_handler {
        let handling = AssertUnwindSafe(handler.handle(&mut tx, &envelopes)).catch_unwind();
        tokio::select! {
            biased;
            _ = &mut cancelled => None,
            handled = handling => Some(handled),
        }
    } else {
        Some(Ok(Ok(())))
    };
    let result = match handled {
        Some(Ok(Ok(()))) if !is_cancelled(&mut cancelled) => {
            match store
                .save_in(
                    &mut tx,
                    id,
                    commit.epoch,
                    commit.offset.as_deref(),
                    &commit.seen,
                )
                .await
            {
                Ok(()) => {
                    let committed = store.commit(tx, id).await.map_err(AttemptError::Store);
                    return (envelopes, committed);
                }
                Err(error) => Err(AttemptError::Store(error)),
            }
        }
        Some(Ok(Err(error))) => Err(AttemptError::Handler(error)),
        Some(Err(panic)) => Err(AttemptError::Handler(
            format!("handler panicked: {}", panic_message(&*panic)).into(),
        )),
        _ => Err(AttemptError::Lost("cancelled".to_owned())),
    };
    if let Err(error) = store.rollback(tx, id).await {
        tracing::warn!(projection = %id, %error, "could not roll back a projection's transaction");
    }
    (envelopes, result)
}

/// Whether the future waiting for the transaction is gone.
fn is_cancelled(cancelled: &mut oneshot::Receiver<()>) -> bool {
    !matches!(
        cancelled.try_recv(),
        Err(oneshot::error::TryRecvError::Empty)
    )
}

pub(crate) use actix_persistence_core::error::panic_message;

#[async_trait]
impl<E, S, C> Processor<E> for Transactional<S, C>
where
    E: Envelope,
    S: TransactionalOffsetStore,
    C: TxHandler<E, S::Transaction>,
{
    async fn attempt(&self, envelopes: &mut Vec<E>, commit: &Commit) -> Result<(), AttemptError> {
        self.in_task(envelopes, commit, true).await
    }

    async fn record_skip(&self, commit: &Commit) -> Result<(), AttemptError> {
        self.in_task::<E>(&mut Vec::new(), commit, false).await
    }

    fn exactly_once(&self) -> bool {
        true
    }
}
