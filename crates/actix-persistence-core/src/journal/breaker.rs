use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::JournalError;

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
/// (defer-only batches) do not count.
#[derive(Debug)]
pub(crate) struct CircuitBreaker {
    config: CircuitBreakerConfig,
    state: Mutex<State>,
}

impl CircuitBreaker {
    pub(crate) fn new(config: CircuitBreakerConfig) -> Self {
        CircuitBreaker {
            config,
            state: Mutex::new(State::Closed { failures: 0 }),
        }
    }

    /// Whether a call may go to the store now.
    ///
    /// # Errors
    /// [`JournalError::CircuitOpen`] while open, or while a trial call is under way.
    pub(crate) fn permit(&self) -> Result<(), JournalError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match *state {
            State::Closed { .. } => Ok(()),
            State::Open { until } if Instant::now() >= until => {
                *state = State::HalfOpen;
                Ok(())
            }
            State::Open { until } => Err(JournalError::CircuitOpen {
                retry_in: until.saturating_duration_since(Instant::now()),
            }),
            State::HalfOpen => Err(JournalError::CircuitOpen {
                retry_in: Duration::ZERO,
            }),
        }
    }

    pub(crate) fn record(&self, succeeded: bool) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *state = match (&*state, succeeded) {
            (_, true) => State::Closed { failures: 0 },
            (State::Closed { failures }, false) if failures + 1 < self.config.max_failures => {
                State::Closed {
                    failures: failures + 1,
                }
            }
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
    }
}

/// `now + after`, or a moment about 30 years away when that overflows the clock.
pub(crate) fn far_future_saturating(after: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(after)
        .or_else(|| now.checked_add(Duration::from_secs(30 * 365 * 24 * 3600)))
        .unwrap_or(now)
}
