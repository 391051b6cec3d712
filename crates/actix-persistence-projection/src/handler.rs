//! Handler forms: what a projection calls with its envelopes (as Akka Projections' `Handler`,
//! grouped handlers and R2DBC/JDBC session handlers).
//!
//! | form | delivery | called with |
//! |------|----------|-------------|
//! | [`Handler`] | at-least-once | one envelope |
//! | [`GroupedHandler`] | at-least-once | a group of envelopes |
//! | [`TransactionalHandler`] | exactly-once | the offset store's transaction and one envelope |
//! | [`TransactionalGroupedHandler`] | exactly-once | the transaction and a group |
//!
//! Handlers take `&self`: with `max_concurrency` above 1 several calls run at once (never two
//! for the same persistence id). A handler may `send` to actors (`Addr::send` futures are
//! `Send`) and await the reply. A call that returns an error, or panics, is retried with
//! backoff and then skipped or fails the projection ([`HandlerRecovery`](crate::HandlerRecovery)).
//! After a retry the same envelopes come again; an exactly-once retry gets a fresh transaction
//! (the failed one was rolled back).

use async_trait::async_trait;

use crate::error::HandlerError;
use crate::source::Envelope;

/// Handles one envelope at a time (at-least-once: after a crash an envelope may be handled
/// again, never skipped).
#[async_trait]
pub trait Handler<E: Envelope>: Send + Sync + 'static {
    /// Handles `envelope`.
    ///
    /// # Errors
    /// Any error: the projection retries, then applies its recovery strategy.
    async fn process(&self, envelope: &E) -> Result<(), HandlerError>;
}

/// Handles a group of envelopes in one call: up to `group_size` envelopes, or what arrived
/// within `group_within` (at-least-once).
#[async_trait]
pub trait GroupedHandler<E: Envelope>: Send + Sync + 'static {
    /// Handles `envelopes` (never empty, in source order).
    ///
    /// # Errors
    /// Any error: the whole group is retried, then the recovery strategy applies to it.
    async fn process(&self, envelopes: &[E]) -> Result<(), HandlerError>;
}

/// Handles one envelope inside the offset store's transaction (exactly-once: the handler's
/// writes and the offset commit together, so a read model and its offset never disagree).
#[async_trait]
pub trait TransactionalHandler<E: Envelope, Tx: Send>: Send + Sync + 'static {
    /// Handles `envelope`, writing through `tx`. Do not commit `tx`: the projection commits it
    /// after saving the offset in it.
    ///
    /// # Errors
    /// Any error: the transaction is rolled back, and the projection retries with a new one.
    async fn process(&self, tx: &mut Tx, envelope: &E) -> Result<(), HandlerError>;
}

/// Handles a group of envelopes inside one transaction of the offset store (exactly-once).
#[async_trait]
pub trait TransactionalGroupedHandler<E: Envelope, Tx: Send>: Send + Sync + 'static {
    /// Handles `envelopes` (never empty, in source order), writing through `tx`. Do not commit.
    ///
    /// # Errors
    /// Any error: the transaction is rolled back, and the group is retried with a new one.
    async fn process(&self, tx: &mut Tx, envelopes: &[E]) -> Result<(), HandlerError>;
}
