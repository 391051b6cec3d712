use std::num::NonZeroUsize;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr, AsyncContext, Context, Handler, ResponseFuture};
use futures::FutureExt;
use metrics::Histogram;
use tracing::Instrument;

use super::breaker::{CallOutcome, CircuitBreaker, CircuitBreakerConfig, Generation};
use super::write_queue::{self, WeakWriteSender};
use super::{
    write_reply_ordering_group, CheckHealth, DeleteMessagesTo, ReadHighestSequenceNr,
    RecoveryReplay, Replay, ReplayMessages, ReplyOrder, Resequence, Resequencer, TakeOwnership,
    Unhealthy, WriteMessages, WriteMessagesReply, WriteSender,
};
use crate::clock;
use crate::error::{AtomicWriteError, JournalError};
use crate::persistent::{InFlight, InFlightGuard};
use crate::store::{
    answer_within, replay_catching_panics, AtomicWrite, CheckedBatch, JournalStore, NoAnswer,
    Ownership, StorePanicked, WriteBatch, WriteNow, WriteResults,
};

/// The most write-reply-ordering groups a [`JournalActor`] runs: each is a resequencer actor
/// started with the journal, so a count in the millions would take memory and time at startup
/// for groups no application can use (the configuration refuses more: its
/// `journal.max-write-reply-ordering-groups` is at most this).
pub const MAX_WRITE_REPLY_ORDERING_GROUPS: usize = 65_536;

/// Settings of a [`JournalActor`]. Validated values: a zero group count cannot be expressed.
#[derive(Debug, Clone)]
pub struct JournalConfig {
    /// Number of write-reply-ordering groups, one resequencer actor each (default 1). At most
    /// [`MAX_WRITE_REPLY_ORDERING_GROUPS`]: a journal actor given more runs that many (and logs
    /// a warning).
    pub write_reply_ordering_groups: NonZeroUsize,
    /// How long a store call may take before the journal fails it (default 10 s).
    pub call_timeout: Duration,
    /// When to stop calling a failing store for a while.
    pub circuit_breaker: CircuitBreakerConfig,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            write_reply_ordering_groups: NonZeroUsize::MIN,
            call_timeout: Duration::from_secs(10),
            circuit_breaker: CircuitBreakerConfig::default(),
        }
    }
}

/// Runs writes, replays and deletes against a [`JournalStore`]; owns one [`Resequencer`] per
/// write-reply-ordering group and talks to persistent actors.
///
/// Writes start as soon as they arrive, never waiting for an earlier one (as Akka's
/// `AsyncWriteJournal`); their replies leave through the writer's group in arrival order.
pub struct JournalActor {
    store: Arc<dyn JournalStore>,
    config: JournalConfig,
    breaker: Arc<CircuitBreaker>,
    groups: Vec<Group>,
    in_flight: Option<InFlight>,
    /// The label `store` of its metrics.
    store_name: &'static str,
    /// [`crate::metrics::PERSIST_LATENCY`] of this journal's store (registered on start).
    persist_latency: Histogram,
    /// The write channel persistent actors send their writes through after their first one
    /// (see [`WriteSender`]); weak, so that it closes with its last sender.
    write_channel: Option<WeakWriteSender>,
}

struct Group {
    resequencer: Addr<Resequencer>,
    order: ReplyOrder,
    next_seq: u64,
}

impl Group {
    /// Hands reply `seq` on: straight to its actor when it is next in the group's order and
    /// nothing waits in the resequencer, else to the resequencer (one actor hop less for the
    /// common in-order reply; the order is the same either way).
    #[inline]
    fn reply(order: &ReplyOrder, resequencer: &Addr<Resequencer>, msg: Resequence) {
        if order.may_deliver_now(msg.seq) {
            order.deliver_now(msg);
        } else {
            order.queue();
            resequencer.do_send(msg);
        }
    }
}

impl JournalActor {
    /// A journal actor over `store`. Its resequencers are created when it starts.
    pub fn new(store: Arc<dyn JournalStore>, mut config: JournalConfig) -> Self {
        config.write_reply_ordering_groups =
            groups_within_limit(config.write_reply_ordering_groups);
        JournalActor {
            store,
            breaker: Arc::new(CircuitBreaker::new(config.circuit_breaker)),
            config,
            groups: Vec::new(),
            in_flight: None,
            store_name: "custom",
            persist_latency: Histogram::noop(),
            write_channel: None,
        }
    }

    /// Names the store in the metrics (label `store`, e.g. `"sqlite"`); `"custom"` unless set.
    pub fn with_store_name(mut self, store: &'static str) -> Self {
        self.store_name = store;
        self
    }

    /// Counts the store writes and deletes under way in `in_flight`, so a graceful shutdown
    /// can wait for them before closing the store.
    pub fn with_in_flight(mut self, in_flight: InFlight) -> Self {
        self.in_flight = Some(in_flight);
        self
    }

    fn enter_work(&self) -> Option<InFlightGuard> {
        self.in_flight.as_ref().map(InFlight::enter)
    }

    /// Starts a journal actor over `store` on the current arbiter.
    pub fn start_with(store: Arc<dyn JournalStore>, config: JournalConfig) -> Addr<Self> {
        Self::new(store, config).start()
    }

    /// Starts a journal actor over `store` on `arbiter`, with its resequencers beside it:
    /// for apps whose persistent actors run on several arbiters (one per core, as actix-web's
    /// workers), which then all share this journal. Replies of one write-reply-ordering group
    /// keep their order whatever arbiter their actors run on: it is decided on the journal's
    /// arbiter.
    ///
    /// # Examples
    /// ```
    /// # use std::sync::Arc;
    /// use actix::Arbiter;
    /// use actix_persistence_core::journal::{JournalActor, JournalConfig};
    /// use actix_persistence_core::InMemoryJournal;
    ///
    /// # actix::System::new().block_on(async {
    /// let journal_arbiter = Arbiter::new();
    /// let journal = JournalActor::start_on(
    ///     &journal_arbiter.handle(),
    ///     Arc::new(InMemoryJournal::new()),
    ///     JournalConfig::default(),
    /// );
    /// // Start persistent actors on other arbiters with `journal.clone()`.
    /// # drop(journal);
    /// # journal_arbiter.stop();
    /// # });
    /// ```
    pub fn start_on(
        arbiter: &actix::ArbiterHandle,
        store: Arc<dyn JournalStore>,
        config: JournalConfig,
    ) -> Addr<Self> {
        Self::start_in_arbiter(arbiter, move |_| Self::new(store, config))
    }

    fn call_timeout(&self) -> Duration {
        self.config.call_timeout
    }
}

/// `groups`, or [`MAX_WRITE_REPLY_ORDERING_GROUPS`] when it is more (with a warning): a
/// journal given a count the configuration would refuse (a `JournalConfig` built in code)
/// still starts, rather than failing to start its groups.
fn groups_within_limit(groups: NonZeroUsize) -> NonZeroUsize {
    if groups.get() <= MAX_WRITE_REPLY_ORDERING_GROUPS {
        return groups;
    }
    tracing::warn!(
        write_reply_ordering_groups = groups.get(),
        limit = MAX_WRITE_REPLY_ORDERING_GROUPS,
        "more write-reply-ordering groups than a journal runs: it runs the limit"
    );
    NonZeroUsize::new(MAX_WRITE_REPLY_ORDERING_GROUPS).unwrap_or(NonZeroUsize::MIN)
}

impl Actor for JournalActor {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Context<Self>) {
        self.persist_latency = persist_latency(self.store_name);
        let count = self.config.write_reply_ordering_groups.get();
        self.groups = (0..count)
            .map(|group| {
                let order = ReplyOrder::for_group(group);
                Group {
                    resequencer: Resequencer::with_order(order.clone()).start(),
                    order,
                    next_seq: 0,
                }
            })
            .collect();
        tracing::debug!(write_reply_ordering_groups = count, "journal started");
    }
}

impl Handler<WriteMessages> for JournalActor {
    type Result = ();

    /// A write through the mailbox: a persistent actor's first one (or a direct caller's).
    /// The reply to an actor's first write also hands it the write channel for the next ones.
    fn handle(&mut self, msg: WriteMessages, ctx: &mut Context<Self>) {
        if msg.reply_to.wants_channel() {
            msg.reply_to.offer_channel(self.write_sender(ctx));
        }
        self.write(msg, false);
    }
}

/// A [`WriteMessages`] that came through the journal's write channel.
struct QueuedWrite(WriteMessages);

impl actix::Message for QueuedWrite {
    type Result = ();
}

impl Handler<QueuedWrite> for JournalActor {
    type Result = ();

    /// Only a persistent actor sends through the channel, with writes it checked against the
    /// limits before sending them (`PersistenceState`): the store gets them as a
    /// [`CheckedBatch`] and may skip its own check.
    fn handle(&mut self, msg: QueuedWrite, _: &mut Context<Self>) {
        self.write(msg.0, true);
    }
}

impl JournalActor {
    /// A sender into the journal's write channel, opening one (and draining it as a stream of
    /// this actor) when none is open. The journal keeps only a weak sender, so the channel
    /// closes, and its stream ends, when the last persistent actor holding one is gone: the
    /// journal actor then stops, as before, once its last address is dropped.
    fn write_sender(&mut self, ctx: &mut Context<Self>) -> WriteSender {
        if let Some(sender) = self
            .write_channel
            .as_ref()
            .and_then(WeakWriteSender::upgrade)
        {
            return sender;
        }
        let (sender, receiver) = write_queue::channel();
        // Every queued write is handled in one poll, in order (up to a budget).
        ctx.add_message_stream(futures::StreamExt::map(receiver, QueuedWrite));
        self.write_channel = Some(sender.downgrade());
        sender
    }

    /// Numbers a write in its group, starts it at once and hands its reply on. `checked`: its
    /// writes came from a persistent actor that checked them ([`CheckedBatch`]).
    fn write(&mut self, msg: WriteMessages, checked: bool) {
        let group_index =
            write_reply_ordering_group(msg.incarnation, self.config.write_reply_ordering_groups);
        let group = &mut self.groups[group_index];
        let seq = group.next_seq;
        group.next_seq += 1;
        // Spans cost a few hundred instructions per write even when nothing listens: only
        // when DEBUG is on.
        let span = tracing::level_enabled!(tracing::Level::DEBUG).then(|| {
            tracing::debug_span!(
                "journal_write",
                group = group_index,
                writes = msg.writes.len(),
                persistence_id = msg.writes.first().map(|w| w.persistence_id()).unwrap_or(""),
                from_seq_nr = msg.writes.first().map(|w| w.lowest_seq_nr()).unwrap_or(0),
                to_seq_nr = msg.writes.last().map(|w| w.highest_seq_nr()).unwrap_or(0),
            )
        });
        let reply_to = msg.reply_to;
        let work = self.enter_work();
        // The store call's latency, on the monotonic clock (`clock.rs`: no `Instant`
        // arithmetic per write).
        let started = clock::monotonic_nanos();
        // A store that answers at once (in memory), or a breaker that refuses the call, needs
        // no future: `write_messages_now`. Otherwise the store's future is polled once here,
        // and only a write still pending then runs concurrently in a task on the arbiter.
        let attempt = || match write_now(&*self.store, &self.breaker, msg.writes, checked) {
            Ok(reply) => Ok(reply),
            Err((writes, generation)) => {
                let mut write = Box::pin(write_batch(
                    Arc::clone(&self.store),
                    Arc::clone(&self.breaker),
                    generation,
                    writes,
                    self.call_timeout(),
                ));
                match (&mut write).now_or_never() {
                    Some(reply) => Ok(reply),
                    None => Err(write),
                }
            }
        };
        let first_poll = match &span {
            Some(span) => span.in_scope(attempt),
            None => attempt(),
        };
        let group = &self.groups[group_index];
        match first_poll {
            Ok(reply) => {
                let latency = clock::seconds_between(started, clock::monotonic_nanos());
                self.persist_latency.record(latency);
                Group::reply(
                    &group.order,
                    &group.resequencer,
                    Resequence {
                        seq,
                        reply,
                        reply_to,
                    },
                );
                drop(work);
            }
            Err(write) => {
                let (order, resequencer) = (group.order.clone(), group.resequencer.clone());
                let latency = self.persist_latency.clone();
                let write = async move {
                    let reply = write.await;
                    latency.record(clock::seconds_between(started, clock::monotonic_nanos()));
                    let msg = Resequence {
                        seq,
                        reply,
                        reply_to,
                    };
                    Group::reply(&order, &resequencer, msg);
                    drop(work);
                };
                match span {
                    Some(span) => actix::spawn(write.instrument(span)),
                    None => actix::spawn(write),
                };
            }
        }
    }
}

/// Runs one batch against the store through the circuit breaker, at once
/// ([`JournalStore::write_messages_now`], or [`JournalStore::write_checked_now`] when
/// `checked`), and turns every way it can end into a reply. The [limits](crate::limits) are
/// not checked here: a persistent actor checked its writes before sending them (the
/// authoritative check of the persist path), and every store checks the writes of direct
/// callers (a [`JournalStore`] rejects a write over them, which the conformance suite holds
/// every store to), so a rejection never counts against the breaker.
///
/// An empty batch is answered at once, without the store or the breaker: it says nothing of
/// the store's health, and while the breaker is half-open it would take the one trial call and
/// close the breaker untried.
///
/// `Err` when the store cannot answer at once: its writes back, with the breaker's permit for
/// [`write_batch`] (taken once per batch, so a half-open breaker's one trial call is this one).
fn write_now(
    store: &dyn JournalStore,
    breaker: &CircuitBreaker,
    writes: WriteBatch,
    checked: bool,
) -> Result<WriteMessagesReply, (WriteBatch, Generation)> {
    if writes.is_empty() {
        return Ok(WriteMessagesReply::Completed(WriteResults::new()));
    }
    let generation = match breaker.permit() {
        Ok(generation) => generation,
        Err(open) => return Ok(WriteMessagesReply::Failed(open)),
    };
    let expected = writes.len();
    let call = || {
        if checked {
            store.write_checked_now(CheckedBatch::new_checked(writes))
        } else {
            store.write_messages_now(writes)
        }
    };
    let reply = match std::panic::catch_unwind(AssertUnwindSafe(call)) {
        Ok(WriteNow::Later(writes)) => return Err((writes, generation)),
        Ok(WriteNow::Done(outcome)) => store_reply(Ok(outcome), expected),
        Err(_panic) => store_reply(Err(()), expected),
    };
    breaker.record(generation, breaker_outcome(&reply));
    Ok(reply)
}

/// Runs one batch against the store's future ([`JournalStore::write_messages`]), with the
/// call timeout, under the breaker's permit `generation` (see [`write_now`]).
async fn write_batch(
    store: Arc<dyn JournalStore>,
    breaker: Arc<CircuitBreaker>,
    generation: Generation,
    writes: WriteBatch,
    timeout: Duration,
) -> WriteMessagesReply {
    let reply = call_store(&*store, writes.into_vec(), timeout).await;
    breaker.record(generation, breaker_outcome(&reply));
    reply
}

/// What a batch's outcome tells the circuit breaker: only failures of the store itself count
/// against it. A batch that failed as a whole is a store failure. A completed batch is healthy
/// when any of its writes was stored (the store works; the others failed for what they hold),
/// or when none failed as a store failure (rejections, concurrent writers and fenced writers
/// are answers of a healthy store).
fn breaker_outcome(reply: &WriteMessagesReply) -> CallOutcome<'_> {
    match reply {
        WriteMessagesReply::Failed(error) => CallOutcome::failed(error),
        WriteMessagesReply::Completed(results) => {
            if results.iter().any(Result::is_ok) {
                return CallOutcome::Healthy;
            }
            results
                .iter()
                .find_map(|result| match result {
                    Err(AtomicWriteError::Failed(e)) if e.is_store_failure() => {
                        Some(CallOutcome::failed(e))
                    }
                    _ => None,
                })
                .unwrap_or(CallOutcome::Healthy)
        }
    }
}

async fn call_store(
    store: &dyn JournalStore,
    writes: Vec<AtomicWrite>,
    timeout: Duration,
) -> WriteMessagesReply {
    let expected = writes.len();
    // A store may panic before its future exists (a hand-written `write_messages` doing work
    // up front): the same failed write as a panic inside the future, not a panic of the
    // journal actor (whose handler polls this first) with the breaker's permit never recorded.
    let call = match std::panic::catch_unwind(AssertUnwindSafe(|| store.write_messages(writes))) {
        Ok(call) => call,
        Err(_panic) => return store_reply(Err(()), expected),
    };
    let mut call = AssertUnwindSafe(call).catch_unwind();
    // A store that answers on the first poll needs no timer.
    let outcome = match (&mut call).now_or_never() {
        Some(outcome) => outcome,
        None => match tokio::time::timeout(timeout, call).await {
            Ok(outcome) => outcome,
            Err(_) => {
                return WriteMessagesReply::Failed(JournalError::Timeout {
                    operation: "write",
                    timeout,
                })
            }
        },
    };
    // A `Vec` of one result moves inline, any other keeps its buffer: no allocation either way.
    let outcome = outcome.map(|results| results.map(WriteResults::from_vec));
    store_reply(outcome.map_err(drop), expected)
}

/// The reply to a batch of `expected` atomic writes whose store call returned `outcome`
/// (`Err(())`: the store panicked).
#[inline]
fn store_reply(
    outcome: Result<Result<WriteResults, JournalError>, ()>,
    expected: usize,
) -> WriteMessagesReply {
    match outcome {
        Err(()) => WriteMessagesReply::Failed(JournalError::storage("write", StorePanicked)),
        Ok(Err(cause)) => WriteMessagesReply::Failed(cause),
        Ok(Ok(results)) if results.len() != expected => {
            WriteMessagesReply::Failed(JournalError::ResultCountMismatch {
                expected,
                actual: results.len(),
            })
        }
        Ok(Ok(results)) => WriteMessagesReply::Completed(results),
    }
}

fn persist_latency(store: &'static str) -> Histogram {
    metrics::histogram!(crate::metrics::PERSIST_LATENCY, "store" => store)
}

impl Handler<CheckHealth> for JournalActor {
    type Result = ResponseFuture<Result<(), Unhealthy>>;

    fn handle(&mut self, _: CheckHealth, _: &mut Context<Self>) -> Self::Result {
        let store = Arc::clone(&self.store);
        let breaker = Arc::clone(&self.breaker);
        let timeout = self.call_timeout();
        Box::pin(async move {
            match breaker.open_for() {
                None => {}
                // Past its reset timeout the breaker waits for a trial call. With traffic kept
                // away because the check said "not ready" (a readiness probe), no call would
                // come and the breaker would stay open: the check's read is the trial, through
                // the breaker (a success closes it, a failure opens it again).
                Some(retry_in) if retry_in.is_zero() => {
                    let read = || store.read_highest_sequence_nr(HEALTH_CHECK_ID, 0);
                    return match with_timeout(&breaker, "health check", timeout, read).await {
                        Ok(_) => Ok(()),
                        Err(JournalError::CircuitOpen { retry_in }) => {
                            Err(Unhealthy::CircuitOpen { retry_in })
                        }
                        Err(cause) => Err(Unhealthy::StoreUnreachable(cause)),
                    };
                }
                Some(retry_in) => return Err(Unhealthy::CircuitOpen { retry_in }),
            }
            // A read, never a write; past the breaker, so a check never trips it.
            let read = || store.read_highest_sequence_nr(HEALTH_CHECK_ID, 0);
            let answer = answered("health check", timeout, answer_within(timeout, read).await);
            answer.map(|_| ()).map_err(Unhealthy::StoreUnreachable)
        })
    }
}

/// A store call's result, or the journal's error when the store gave none.
fn answered<T>(
    operation: &'static str,
    timeout: Duration,
    answer: Result<Result<T, JournalError>, NoAnswer>,
) -> Result<T, JournalError> {
    match answer {
        Ok(result) => result,
        Err(NoAnswer::TimedOut) => Err(JournalError::Timeout { operation, timeout }),
        Err(NoAnswer::Panicked) => Err(JournalError::storage(operation, StorePanicked)),
    }
}

/// The persistence id the health check reads the highest sequence number of (it need not
/// exist).
const HEALTH_CHECK_ID: &str = "actix-persistence-health-check";

/// Makes a store call (`call` creates its future) and awaits it with the journal's call
/// timeout, through the circuit breaker. A store that panics, while it creates the future or
/// while the future runs, fails the call with [`StorePanicked`].
async fn with_timeout<T, F>(
    breaker: &CircuitBreaker,
    operation: &'static str,
    timeout: Duration,
    call: impl FnOnce() -> F,
) -> Result<T, JournalError>
where
    F: std::future::Future<Output = Result<T, JournalError>>,
{
    let generation = breaker.permit()?;
    // A panicking store must still record its outcome, or a half-open breaker stays shut.
    let result = answered(operation, timeout, answer_within(timeout, call).await);
    // A refusal of a healthy store (a fenced delete) does not count against it.
    let outcome = match &result {
        Err(error) if error.is_store_failure() => CallOutcome::failed(error),
        _ => CallOutcome::Healthy,
    };
    breaker.record(generation, outcome);
    result
}

impl Handler<ReplayMessages> for JournalActor {
    type Result = ResponseFuture<Result<Replay, JournalError>>;

    fn handle(&mut self, msg: ReplayMessages, _: &mut Context<Self>) -> Self::Result {
        self.replay(msg, false)
    }
}

impl Handler<RecoveryReplay> for JournalActor {
    type Result = ResponseFuture<Result<Replay, JournalError>>;

    fn handle(&mut self, msg: RecoveryReplay, _: &mut Context<Self>) -> Self::Result {
        self.replay(msg.0, true)
    }
}

impl JournalActor {
    /// The highest sequence number, how far events were deleted, and the events of `msg`
    /// (through `JournalStore::replay_for_recovery` when `for_recovery`).
    fn replay(
        &self,
        msg: ReplayMessages,
        for_recovery: bool,
    ) -> ResponseFuture<Result<Replay, JournalError>> {
        let store = Arc::clone(&self.store);
        let breaker = Arc::clone(&self.breaker);
        let timeout = self.call_timeout();
        Box::pin(async move {
            let bounds = with_timeout(&breaker, "read the replay's bounds", timeout, || {
                store.read_replay_bounds(&msg.persistence_id, msg.from_seq_nr)
            })
            .await?;
            let (highest, deleted_to) = (bounds.highest_seq_nr, bounds.deleted_to);
            let to = msg.to_seq_nr.min(highest);
            let (pid, from, max) = (&msg.persistence_id, msg.from_seq_nr, msg.max);
            let replay = || {
                if for_recovery {
                    store.replay_for_recovery(pid, from, to, max)
                } else {
                    store.replay_messages(pid, from, to, max)
                }
            };
            let events = replay_catching_panics(replay)?;
            Ok(Replay {
                highest_seq_nr: highest,
                deleted_to,
                events,
            })
        })
    }
}

impl Handler<ReadHighestSequenceNr> for JournalActor {
    type Result = ResponseFuture<Result<u64, JournalError>>;

    fn handle(&mut self, msg: ReadHighestSequenceNr, _: &mut Context<Self>) -> Self::Result {
        let store = Arc::clone(&self.store);
        let breaker = Arc::clone(&self.breaker);
        let timeout = self.call_timeout();
        Box::pin(async move {
            let call = || store.read_highest_sequence_nr(&msg.persistence_id, msg.from_seq_nr);
            with_timeout(&breaker, "read highest sequence number", timeout, call).await
        })
    }
}

impl Handler<TakeOwnership> for JournalActor {
    type Result = ResponseFuture<Result<Ownership, JournalError>>;

    fn handle(&mut self, msg: TakeOwnership, _: &mut Context<Self>) -> Self::Result {
        let store = Arc::clone(&self.store);
        let breaker = Arc::clone(&self.breaker);
        let timeout = self.call_timeout();
        Box::pin(async move {
            let call = || store.take_ownership(&msg.persistence_id);
            with_timeout(&breaker, "take ownership", timeout, call).await
        })
    }
}

impl Handler<DeleteMessagesTo> for JournalActor {
    type Result = ResponseFuture<Result<(), JournalError>>;

    fn handle(&mut self, msg: DeleteMessagesTo, _: &mut Context<Self>) -> Self::Result {
        let store = Arc::clone(&self.store);
        let breaker = Arc::clone(&self.breaker);
        let timeout = self.call_timeout();
        let work = self.enter_work();
        Box::pin(async move {
            let call =
                || store.delete_messages_to(&msg.persistence_id, msg.to_seq_nr, msg.fencing_token);
            let deleted = with_timeout(&breaker, "delete", timeout, call).await;
            drop(work);
            deleted
        })
    }
}
