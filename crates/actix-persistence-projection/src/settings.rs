//! How a projection runs: concurrency, groups, when offsets are saved, what happens on errors.

use std::time::Duration;

/// What a projection does when its handler fails (returns an error or panics) on an envelope or
/// group (as Akka Projections' `HandlerRecoveryStrategy`): retry `retries` times with
/// exponential backoff from `min_backoff` to `max_backoff`, then [`AfterRetries`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandlerRecovery {
    /// Retries after the first attempt (0: none).
    pub retries: u32,
    /// Delay before the first retry; doubled for each next one.
    pub min_backoff: Duration,
    /// Longest delay between retries.
    pub max_backoff: Duration,
    /// What happens when the retries are used up.
    pub then: AfterRetries,
}

/// The end of a handler's retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRetries {
    /// Log the error and go on without the envelope (or group): it counts as handled, and the
    /// offset moves past it. Never silent: each skip is logged at `error` and counted in
    /// [`Progress::skipped`](crate::Progress::skipped).
    Skip,
    /// Fail the projection: it stops handling, and restarts with [`RestartBackoff`] from its
    /// stored offset (the failed envelope is handled again).
    Fail,
}

impl Default for HandlerRecovery {
    /// 3 retries from 100 ms to 2 s, then fail (and restart from the stored offset).
    fn default() -> Self {
        HandlerRecovery {
            retries: 3,
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            then: AfterRetries::Fail,
        }
    }
}

impl HandlerRecovery {
    /// The delay before retry number `retry` (1-based).
    pub fn backoff(&self, retry: u32) -> Duration {
        exponential(self.min_backoff, self.max_backoff, retry.saturating_sub(1))
    }
}

/// Restarts of a failed projection (as Akka Projections' `restart-backoff`): the delay before
/// restart `n` is `min * 2^n`, at most `max`, plus up to `random_factor` of it at random.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RestartBackoff {
    /// Delay before the first restart.
    pub min: Duration,
    /// Longest delay.
    pub max: Duration,
    /// Extra random share of the delay, 0.0 to 1.0 (spreads restarts of many instances).
    pub random_factor: f64,
    /// Restarts before the projection gives up and stays failed; `None`: never gives up.
    pub max_restarts: Option<u32>,
}

impl Default for RestartBackoff {
    /// 1 s to 30 s, 20% random, never gives up.
    fn default() -> Self {
        RestartBackoff {
            min: Duration::from_secs(1),
            max: Duration::from_secs(30),
            random_factor: 0.2,
            max_restarts: None,
        }
    }
}

impl RestartBackoff {
    /// The delay before restart number `restart` (0-based), with `jitter` in `0.0..=1.0`.
    /// Saturates at `Duration::MAX` (a `min` of `Duration::MAX`: no restart in practice); a
    /// `random_factor` that is not a finite number adds nothing.
    pub fn delay(&self, restart: u32, jitter: f64) -> Duration {
        let base = exponential(self.min, self.max, restart);
        let share = self.random_factor * jitter;
        let share = if share.is_finite() {
            share.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let extra =
            Duration::try_from_secs_f64(base.as_secs_f64() * share).unwrap_or(Duration::MAX);
        base.saturating_add(extra)
    }
}

fn exponential(min: Duration, max: Duration, doublings: u32) -> Duration {
    min.saturating_mul(2u32.saturating_pow(doublings.min(31)))
        .min(max)
}

/// When an offset that is not saved in the handler's transaction is saved (at-least-once, and
/// exactly-once with `max_concurrency` above 1): after this many handled envelopes, or this
/// long after the first unsaved one, whichever comes first (as Akka's `saveOffsetAfterEnvelopes`
/// and `saveOffsetAfterDuration`). Also saved when the projection pauses, stops, or completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaveOffset {
    /// Handled envelopes between saves (at least 1). Also bounds what a crash repeats when
    /// saves are slow: no handler call starts while the handled envelopes are `8 ×
    /// after_envelopes` past the stored offset (see `docs/projections.md`).
    pub after_envelopes: usize,
    /// Longest time an handled envelope waits for its offset to be saved.
    pub after: Duration,
}

impl Default for SaveOffset {
    /// 100 envelopes or 500 ms.
    fn default() -> Self {
        SaveOffset {
            after_envelopes: 100,
            after: Duration::from_millis(500),
        }
    }
}

/// Groups for grouped handlers: up to `size` envelopes, or what arrived within `within` of the
/// first one (as Akka's `groupedWithin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grouping {
    /// Most envelopes per group (at least 1).
    pub size: usize,
    /// Longest wait for a group to fill, from its first envelope.
    pub within: Duration,
}

impl Default for Grouping {
    /// 100 envelopes or 100 ms.
    fn default() -> Self {
        Grouping {
            size: 100,
            within: Duration::from_millis(100),
        }
    }
}
