//! Restarting a persistent actor after a journal failure, with exponential backoff.

use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::time::Duration;

use actix::dev::ToEnvelope;
use actix::fut::ActorFutureExt;
use actix::{
    Actor, ActorContext, Addr, AsyncContext, Context, Handler, Message, ResponseFuture, WrapFuture,
};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::state::StopReason;
use super::{PersistError, PersistResult, PersistentActor};

/// Commands kept while the child is down; more are answered [`PersistError::ActorStopped`].
pub const MAX_BUFFERED_COMMANDS: usize = 10_000;

/// Exponential backoff between restarts (as Akka's `BackoffSupervisor`): the n-th restart in a
/// row waits `min * 2^n`, capped at `max`, plus up to `random_factor` of that at random.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay before the first restart.
    pub min: Duration,
    /// Longest delay.
    pub max: Duration,
    /// Extra random share of the delay, 0.0 to 1.0 (spreads restarts of many actors).
    pub random_factor: f64,
    /// A child that ran this long without stopping resets the count of restarts.
    pub reset_after: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            min: Duration::from_millis(200),
            max: Duration::from_secs(10),
            random_factor: 0.2,
            reset_after: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// The delay before restart number `restarts` (0-based), with `jitter` in `0.0..=1.0`.
    pub fn delay(&self, restarts: u32, jitter: f64) -> Duration {
        let exponential = self
            .min
            .saturating_mul(2u32.saturating_pow(restarts.min(31)))
            .min(self.max);
        let share = |x: f64| {
            if x.is_finite() {
                x.clamp(0.0, 1.0)
            } else {
                0.0
            }
        };
        let extra = Duration::try_from_secs_f64(
            exponential.as_secs_f64() * share(self.random_factor) * share(jitter),
        )
        .unwrap_or(Duration::MAX);
        exponential.saturating_add(extra)
    }
}

type Forward<A> = Box<dyn FnOnce(&Addr<A>)>;

/// Runs a persistent actor built by a factory, and builds and starts a new incarnation after
/// the old one stopped on a failure (a failed persist or recovery, or a panic: in user code the
/// library runs, or one that escaped a command handler), after a backoff.
/// The new incarnation recovers from the store. A factory that panics is a failed start,
/// retried after the backoff in the same way. A normal stop stops the supervisor too, and so
/// does a fenced child ([`StopReason::Fenced`]): another incarnation owns the persistence id,
/// and restarting would fight it for the id.
///
/// Send commands to the supervisor: it forwards each command whose result is a
/// [`PersistResult`] to the current child, and keeps them (up to
/// [`MAX_BUFFERED_COMMANDS`], in order) while the child is down. A command the child received
/// but never answered because it stopped gets [`PersistError::ActorStopped`].
/// A query of the state goes through the supervisor the same way: give it the result
/// `PersistResult<T>` (`#[rtype(result = "PersistResult<u64>")]`) and answer it with
/// `PersistReply::ready(self.balance)`, which persists nothing. A message of another result
/// (`MessageResult<M>`) is refused at compile time, the compiler expecting its result to be
/// `Result<_, PersistError>`.
pub struct BackoffSupervisor<A: PersistentActor> {
    factory: Box<dyn FnMut() -> A>,
    backoff: Backoff,
    child: Option<Addr<A>>,
    child_started: Instant,
    restarts: u32,
    /// Restarts in a row after which the supervisor stops instead (`None`: no limit).
    max_restarts: Option<u32>,
    buffer: VecDeque<Forward<A>>,
    random: RandomState,
}

impl<A: PersistentActor> BackoffSupervisor<A> {
    /// A supervisor over actors made by `factory` (called for each incarnation).
    pub fn new(backoff: Backoff, factory: impl FnMut() -> A + 'static) -> Self {
        BackoffSupervisor {
            factory: Box::new(factory),
            backoff,
            child: None,
            child_started: Instant::now(),
            restarts: 0,
            max_restarts: None,
            buffer: VecDeque::new(),
            random: RandomState::new(),
        }
    }

    /// Restarts in a row so far (reset after a stable period).
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    /// Stops instead of restarting once the child failed again after `max` restarts in a row
    /// (as Akka's `maxNrOfRetries`; the count resets after a child ran for
    /// [`Backoff::reset_after`]): a child whose recovery always fails is then not restarted
    /// forever. Commands kept, and sent later, get [`PersistError::ActorStopped`]. Without
    /// it, the supervisor restarts without limit.
    pub fn with_max_restarts(mut self, max: u32) -> Self {
        self.max_restarts = Some(max);
        self
    }

    fn start_child(&mut self, ctx: &mut Context<Self>) {
        // The factory is user code: a panic in it is a failed start, restarted after the
        // backoff as a child's panic is (commands sent meanwhile stay buffered), not the end of
        // the supervisor with every buffered command answered `ActorStopped`.
        let factory = &mut self.factory;
        let mut child = match super::panics::catch_user(factory) {
            Ok(child) => child,
            Err(reason) => {
                tracing::error!(%reason, "the persistent actor's factory panicked");
                self.child_started = Instant::now();
                self.child_stopped(StopReason::Panicked { reason }, ctx);
                return;
            }
        };
        let stopped = child.persistence_mut().watch_stop();
        let addr = child.start();
        self.child_started = Instant::now();
        while let Some(forward) = self.buffer.pop_front() {
            forward(&addr);
        }
        self.child = Some(addr);
        ctx.spawn(
            async move { stopped.await.unwrap_or(StopReason::Normal) }
                .into_actor(self)
                .map(|reason, supervisor, ctx| supervisor.child_stopped(reason, ctx)),
        );
    }

    fn child_stopped(&mut self, reason: StopReason, ctx: &mut Context<Self>) {
        self.child = None;
        if reason == StopReason::Normal {
            ctx.stop();
            return;
        }
        if reason == StopReason::Fenced {
            // A newer incarnation owns the id; restarting would take it back and fence that
            // one in turn. Stop: commands kept or sent later get `ActorStopped`.
            tracing::warn!(
                "persistent actor fenced by a newer incarnation of its persistence id; \
                 the supervisor stops instead of restarting it"
            );
            self.buffer.clear();
            ctx.stop();
            return;
        }
        if self.child_started.elapsed() >= self.backoff.reset_after {
            self.restarts = 0;
        }
        if self.max_restarts.is_some_and(|max| self.restarts >= max) {
            tracing::error!(
                ?reason,
                restarts = self.restarts,
                "persistent actor failed again after its last allowed restart; the \
                 supervisor stops"
            );
            self.buffer.clear();
            ctx.stop();
            return;
        }
        let jitter = (self.random.hash_one(self.restarts) % 1_000_000) as f64 / 1_000_000.0;
        let delay = self.backoff.delay(self.restarts, jitter);
        self.restarts = self.restarts.saturating_add(1);
        tracing::info!(
            ?reason,
            delay_ms = delay.as_millis() as u64,
            restarts = self.restarts,
            "restarting persistent actor"
        );
        ctx.run_later(delay, |supervisor, ctx| supervisor.start_child(ctx));
    }
}

impl<A: PersistentActor> Actor for BackoffSupervisor<A> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.start_child(ctx);
    }
}

impl<A, M, R> Handler<M> for BackoffSupervisor<A>
where
    A: PersistentActor + Handler<M>,
    A::Context: ToEnvelope<A, M>,
    M: Message<Result = PersistResult<R>> + Send + 'static,
    R: Send + 'static,
{
    type Result = ResponseFuture<PersistResult<R>>;

    fn handle(&mut self, msg: M, _: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        let forward: Forward<A> = Box::new(move |child: &Addr<A>| {
            // A fresh sender is never parked, so `send` queues now, in the order commands came.
            let request = child.clone().send(msg);
            actix::spawn(async move {
                let answer = request.await.unwrap_or(Err(PersistError::ActorStopped));
                let _ = tx.send(answer);
            });
        });
        match &self.child {
            Some(child) if child.connected() => forward(child),
            _ if self.buffer.len() < MAX_BUFFERED_COMMANDS => self.buffer.push_back(forward),
            _ => drop(forward),
        }
        Box::pin(async move { rx.await.unwrap_or(Err(PersistError::ActorStopped)) })
    }
}
