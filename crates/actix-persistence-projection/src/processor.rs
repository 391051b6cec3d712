//! One attempt at handling a unit of envelopes, for each delivery and handler form.

use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::{HandlerError, OffsetStoreError};
use crate::handler::{GroupedHandler, Handler, TransactionalGroupedHandler, TransactionalHandler};
use crate::offset_store::TransactionalOffsetStore;
use crate::source::Envelope;
use crate::ProjectionId;

/// What an exactly-once unit saves in its transaction: the offset (when the unit completes the
/// handled prefix) and the highest seq_nr per persistence id (with `max_concurrency` above 1).
#[derive(Debug, Default, Clone)]
pub(crate) struct Commit {
    pub(crate) offset: Option<String>,
    pub(crate) seen: Vec<(String, u64)>,
}

/// Why one attempt failed.
pub(crate) enum AttemptError {
    /// The handler failed: retried, then skipped or failing the projection.
    Handler(HandlerError),
    /// The offset store failed: the projection restarts from its stored offset.
    Store(OffsetStoreError),
}

#[async_trait]
pub(crate) trait Processor<E: Envelope>: Send + Sync + 'static {
    /// Handles `envelopes` once; exactly-once: in one transaction that also saves `commit`.
    async fn attempt(&self, envelopes: &[E], commit: &Commit) -> Result<(), AttemptError>;

    /// After `envelopes` were skipped: exactly-once saves `commit` on its own, so a restart
    /// does not handle them again; at-least-once does nothing (the runner saves offsets).
    async fn record_skip(&self, commit: &Commit) -> Result<(), OffsetStoreError>;

    /// Exactly-once (offsets are saved in transactions) or at-least-once.
    fn exactly_once(&self) -> bool;
}

/// At-least-once, one envelope per call.
pub(crate) struct Single<H>(pub(crate) H);

#[async_trait]
impl<E: Envelope, H: Handler<E>> Processor<E> for Single<H> {
    async fn attempt(&self, envelopes: &[E], _: &Commit) -> Result<(), AttemptError> {
        for envelope in envelopes {
            self.0
                .process(envelope)
                .await
                .map_err(AttemptError::Handler)?;
        }
        Ok(())
    }

    async fn record_skip(&self, _: &Commit) -> Result<(), OffsetStoreError> {
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
    async fn attempt(&self, envelopes: &[E], _: &Commit) -> Result<(), AttemptError> {
        self.0
            .process(envelopes)
            .await
            .map_err(AttemptError::Handler)
    }

    async fn record_skip(&self, _: &Commit) -> Result<(), OffsetStoreError> {
        Ok(())
    }

    fn exactly_once(&self) -> bool {
        false
    }
}

/// Exactly-once: begin, handle, save the offset, commit.
pub(crate) struct Transactional<S, H, G> {
    pub(crate) id: ProjectionId,
    pub(crate) store: Arc<S>,
    pub(crate) handler: H,
    pub(crate) _grouped: PhantomData<fn() -> G>,
}

/// Marks [`Transactional`] over a [`TransactionalHandler`].
pub(crate) struct OneAtATime;
/// Marks [`Transactional`] over a [`TransactionalGroupedHandler`].
pub(crate) struct AsGroup;

impl<S: TransactionalOffsetStore, H, G> Transactional<S, H, G> {
    async fn save_and_commit(
        &self,
        mut tx: S::Transaction,
        commit: &Commit,
    ) -> Result<(), OffsetStoreError> {
        self.store
            .save_in(&mut tx, &self.id, commit.offset.as_deref(), &commit.seen)
            .await?;
        self.store.commit(tx, &self.id).await
    }
}

#[async_trait]
impl<E, S, H> Processor<E> for Transactional<S, H, OneAtATime>
where
    E: Envelope,
    S: TransactionalOffsetStore,
    H: TransactionalHandler<E, S::Transaction>,
{
    async fn attempt(&self, envelopes: &[E], commit: &Commit) -> Result<(), AttemptError> {
        let mut tx = self
            .store
            .begin(&self.id)
            .await
            .map_err(AttemptError::Store)?;
        for envelope in envelopes {
            self.handler
                .process(&mut tx, envelope)
                .await
                .map_err(AttemptError::Handler)?;
        }
        self.save_and_commit(tx, commit)
            .await
            .map_err(AttemptError::Store)
    }

    async fn record_skip(&self, commit: &Commit) -> Result<(), OffsetStoreError> {
        let tx = self.store.begin(&self.id).await?;
        self.save_and_commit(tx, commit).await
    }

    fn exactly_once(&self) -> bool {
        true
    }
}

#[async_trait]
impl<E, S, H> Processor<E> for Transactional<S, H, AsGroup>
where
    E: Envelope,
    S: TransactionalOffsetStore,
    H: TransactionalGroupedHandler<E, S::Transaction>,
{
    async fn attempt(&self, envelopes: &[E], commit: &Commit) -> Result<(), AttemptError> {
        let mut tx = self
            .store
            .begin(&self.id)
            .await
            .map_err(AttemptError::Store)?;
        self.handler
            .process(&mut tx, envelopes)
            .await
            .map_err(AttemptError::Handler)?;
        self.save_and_commit(tx, commit)
            .await
            .map_err(AttemptError::Store)
    }

    async fn record_skip(&self, commit: &Commit) -> Result<(), OffsetStoreError> {
        let tx = self.store.begin(&self.id).await?;
        self.save_and_commit(tx, commit).await
    }

    fn exactly_once(&self) -> bool {
        true
    }
}
