use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::far_future_saturating;
use crate::error::{BoxError, JournalError};

/// Settings of the journal's circuit breaker (as Akka's journal `circuit-breaker`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitBreakerConfig {
    /// Consecutive failed store calls that open the breaker (default 10).
    pub max_failures: u32,
    /// How long the breaker stays open before one trial call may pass (default 30 s).
    pub reset_timeout: Duration,
}

impl Default for CircuitBreakerConfig {
    fn default() -> Self {
        CircuitBreakerConfig {
            max_failures: 10,
            reset_timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Debug)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen,
}

/// Fails store calls fast while the store keeps failing: after `max_failures` consecutive
/// failures the breaker opens and every call fails at once with
/// [`JournalError::CircuitOpen`]; after `reset_timeout` one trial call passes, and its success
/// closes the breaker again. Rejections are not failures; calls that never reach the store
/// (defer-only batches) do not count. A failure that answered several calls at once (one
/// failed transaction of a SQL store's group commit, shared by the writes of many actors)
/// counts once, as Akka.NET's batching journal counts one failed chunk: one failed commit of a
/// busy journal must not open the breaker alone.
#[derive(Debug)]
pub(crate) struct CircuitBreaker {
    config: CircuitBreakerConfig,
    state: Mutex<(State, Generation)>,
    /// The cause of the last failure counted while closed: a failure with the same cause (the
    /// same shared error value) is one failure of the store, however many calls it answered.
    /// Held, not only compared by address, so that its address cannot be reused meanwhile.
    last_cause: Mutex<Option<BoxError>>,
    /// The generation while the breaker is closed with no failure counted, else
    /// [`NOT_CLEAN`]: set under the lock with every change of `state`, read without it. A
    /// call through a healthy breaker (the common case: every write) neither takes the lock to
    /// be let through nor to record its success, which would change nothing.
    clean: AtomicU64,
}

/// [`CircuitBreaker::clean`] while the breaker is not closed with no failure counted.
const NOT_CLEAN: u64 = u64::MAX;

/// Changes with every state transition: the outcome of a call let through in an earlier state
/// (a late success after the breaker opened, say) must not move the current state.
pub(crate) type Generation = u64;

impl CircuitBreaker {
    /// A closed breaker; reports its state at once, so a dashboard reads 0 (closed) before the
    /// first failure rather than nothing.
    pub(crate) fn new(config: CircuitBreakerConfig) -> Self {
        let state = State::Closed { failures: 0 };
        report(&state);
        CircuitBreaker {
            config,
            state: Mutex::new((state, 0)),
            last_cause: Mutex::new(None),
            clean: AtomicU64::new(0),
        }
    }

    /// Publishes whether `state` is closed with no failure counted (under the lock).
    fn publish(&self, state: &State, generation: Generation) {
        let clean = match state {
            State::Closed { failures: 0 } if generation != NOT_CLEAN => generation,
            _ => NOT_CLEAN,
        };
        self.clean.store(clean, Ordering::Release);
    }

    /// Whether a call may go to the store now.
    ///
    /// # Errors
    /// [`JournalError::CircuitOpen`] while open, or while a trial call is under way.
    pub(crate) fn permit(&self) -> Result<Generation, JournalError> {
        // Closed: what the locked path answers, without the lock.
        let clean = self.clean.load(Ordering::Acquire);
        if clean != NOT_CLEAN {
            return Ok(clean);
        }
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (state, generation) = &mut *guard;
        match *state {
            State::Closed { .. } => Ok(*generation),
            State::Open { until } if Instant::now() >= until => {
                *state = State::HalfOpen;
                *generation += 1;
                self.publish(state, *generation);
                report(state);
                Ok(*generation)
            }
            State::Open { until } => Err(JournalError::CircuitOpen {
                retry_in: until.saturating_duration_since(Instant::now()),
            }),
            State::HalfOpen => Err(JournalError::CircuitOpen {
                retry_in: Duration::ZERO,
            }),
        }
    }

    /// Records the outcome of a call `permit` let through in `generation`; outcomes of calls
    /// from an earlier state are ignored.
    pub(crate) fn record(&self, generation: Generation, outcome: CallOutcome<'_>) {
        let succeeded = matches!(outcome, CallOutcome::Healthy);
        // A success in the current generation of a breaker closed with no failure counted
        // leaves it so: nothing to change, no lock to take.
        if succeeded && self.clean.load(Ordering::Acquire) == generation {
            return;
        }
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (state, current) = &mut *guard;
        if generation != *current {
            return;
        }
        let counts = match (&*state, outcome) {
            (State::Closed { .. }, CallOutcome::Failed { cause }) => self.count_cause(cause),
            (_, CallOutcome::Healthy) => {
                self.forget_cause();
                true
            }
            (_, CallOutcome::Failed { .. }) => true,
        };
        if !counts {
            return;
        }
        let next = match (&*state, succeeded) {
            (State::Closed { .. }, true) => State::Closed { failures: 0 },
            (State::Closed { failures }, false) if failures + 1 < self.config.max_failures => {
                State::Closed {
                    failures: failures + 1,
                }
            }
            (_, true) => State::Closed { failures: 0 },
            (_, false) => {
                tracing::warn!(
                    reset_timeout_ms = self.config.reset_timeout.as_millis() as u64,
                    "journal circuit breaker opened"
                );
                State::Open {
                    until: far_future_saturating(self.config.reset_timeout),
                }
            }
        };
        let transition = !matches!(
            (&*state, &next),
            (State::Closed { .. }, State::Closed { .. })
        );
        *state = next;
        if transition {
            *current += 1;
        }
        self.publish(state, *current);
        if transition {
            report(state);
        }
    }

    /// Remembers `cause` as the last failure counted; `false` when it is the one counted last
    /// (another call answered by the same failure), which is not counted again.
    fn count_cause(&self, cause: Option<&BoxError>) -> bool {
        let mut last = self.last_cause.lock().unwrap_or_else(|p| p.into_inner());
        match (cause, &*last) {
            (Some(cause), Some(counted)) if Arc::ptr_eq(cause, counted) => false,
            _ => {
                *last = cause.cloned();
                true
            }
        }
    }

    /// Forgets the last failure counted (a success ended the run of failures).
    fn forget_cause(&self) {
        *self.last_cause.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// How long the breaker stays open; `None` unless it is open (half-open counts as open:
    /// a trial call is under way).
    pub(crate) fn open_for(&self) -> Option<Duration> {
        let guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match guard.0 {
            State::Closed { .. } => None,
            State::Open { until } => Some(until.saturating_duration_since(Instant::now())),
            State::HalfOpen => Some(Duration::ZERO),
        }
    }
}

/// What a store call's outcome tells the breaker.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CallOutcome<'a> {
    /// The store answered: a success, or a refusal of a healthy store.
    Healthy,
    /// The store failed; `cause` is the failure's shared error value when it has one
    /// ([`JournalError::Storage`]'s source), by which one failure answering several calls is
    /// counted once.
    Failed { cause: Option<&'a BoxError> },
}

impl<'a> CallOutcome<'a> {
    /// A failure with `error` as its cause.
    pub(crate) fn failed(error: &'a JournalError) -> Self {
        let cause = match error {
            JournalError::Storage { source, .. } => Some(source),
            _ => None,
        };
        CallOutcome::Failed { cause }
    }
}

/// Sets [`crate::metrics::CIRCUIT_BREAKER_STATE`]: 0 closed, 1 half-open, 2 open.
fn report(state: &State) {
    let value = match state {
        State::Closed { .. } => 0.0,
        State::HalfOpen => 1.0,
        State::Open { .. } => 2.0,
    };
    metrics::gauge!(crate::metrics::CIRCUIT_BREAKER_STATE).set(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failure with no shared cause: every one counts.
    const FAILED: CallOutcome<'static> = CallOutcome::Failed { cause: None };

    fn breaker(max_failures: u32) -> CircuitBreaker {
        CircuitBreaker::new(CircuitBreakerConfig {
            max_failures,
            reset_timeout: Duration::from_secs(30),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_max_failures_and_admits_one_trial_after_the_reset_timeout() {
        let b = breaker(2);
        let g = b.permit().expect("closed");
        b.record(g, FAILED);
        assert!(b.permit().is_ok(), "one failure of two keeps it closed");
        b.record(g, FAILED);
        assert!(matches!(b.permit(), Err(JournalError::CircuitOpen { .. })));

        tokio::time::advance(Duration::from_secs(31)).await;
        let trial = b.permit().expect("one trial after the reset timeout");
        assert!(b.permit().is_err(), "only one trial at a time");
        b.record(trial, CallOutcome::Healthy);
        assert!(b.permit().is_ok(), "a successful trial closes it");
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_outcome_from_an_earlier_state_is_ignored() {
        let b = breaker(1);
        let early = b.permit().expect("closed");
        let failing = b.permit().expect("closed");
        b.record(failing, FAILED);
        assert!(b.permit().is_err(), "open");
        // A call let through while closed succeeds late: the breaker stays open.
        b.record(early, CallOutcome::Healthy);
        assert!(
            b.permit().is_err(),
            "a late success must not close an open breaker"
        );

        tokio::time::advance(Duration::from_secs(31)).await;
        let trial = b.permit().expect("trial");
        b.record(early, FAILED);
        assert!(
            b.permit().is_err(),
            "still half-open with the trial running"
        );
        b.record(trial, CallOutcome::Healthy);
        assert!(b.permit().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_after_a_failure_resets_the_count_of_consecutive_failures() {
        let b = breaker(2);
        let g = b.permit().expect("closed");
        b.record(g, FAILED);
        // Not the lock-free path: one failure is counted, and this success clears it.
        b.record(g, CallOutcome::Healthy);
        b.record(g, FAILED);
        assert!(
            b.permit().is_ok(),
            "one failure since the last success keeps it closed"
        );
        b.record(g, FAILED);
        assert!(matches!(b.permit(), Err(JournalError::CircuitOpen { .. })));
        // Open: a success of the earlier generation neither closes it nor is taken for clean.
        b.record(g, CallOutcome::Healthy);
        assert!(b.permit().is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn one_failure_answering_several_calls_counts_once() {
        let b = breaker(2);
        let g = b.permit().expect("closed");
        let commit_failed: BoxError = Arc::new(std::io::Error::other("commit failed"));
        let error = JournalError::Storage {
            operation: "write",
            source: Arc::clone(&commit_failed),
        };
        // One failed transaction of a group commit answers ten writers with clones of its error.
        for _ in 0..10 {
            b.record(g, CallOutcome::failed(&error.clone()));
        }
        assert!(
            b.permit().is_ok(),
            "one failed transaction is one failure of two"
        );
        let next = JournalError::storage("write", std::io::Error::other("commit failed again"));
        b.record(g, CallOutcome::failed(&next));
        assert!(
            matches!(b.permit(), Err(JournalError::CircuitOpen { .. })),
            "a second failure with a cause of its own is counted"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failures_without_a_shared_cause_count_one_each() {
        let b = breaker(3);
        let g = b.permit().expect("closed");
        let timeout = JournalError::Timeout {
            operation: "write",
            timeout: Duration::from_secs(1),
        };
        for _ in 0..2 {
            b.record(g, CallOutcome::failed(&timeout));
        }
        assert!(b.permit().is_ok());
        b.record(g, CallOutcome::failed(&timeout));
        assert!(b.permit().is_err(), "three timeouts are three failures");
    }
}
