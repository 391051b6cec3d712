//! The metrics actix-persistence reports, through the [`metrics`](https://docs.rs/metrics)
//! facade crate: install any recorder (Prometheus, StatsD, ...) and they appear; without one
//! they cost next to nothing. Names and units:
//!
//! | name | kind | unit | labels | what |
//! |---|---|---|---|---|
//! | `actix_persistence_persist_latency_seconds` | histogram | seconds | `store` | one `WriteMessages` batch: from the journal starting the store write to the store's answer |
//! | `actix_persistence_reply_ordering_wait_seconds` | histogram | seconds | `group` | how long a finished write's reply waits in its write-reply-ordering group for earlier writes before it is released (0 when none is pending): high values say raise `journal.write-reply-ordering-groups` |
//! | `actix_persistence_group_commit_batch_size` | histogram | atomic writes | `store` | atomic writes one SQL transaction committed (group commit) |
//! | `actix_persistence_circuit_breaker_state` | gauge | 0 closed, 1 half-open, 2 open | | the journal's circuit breaker |
//! | `actix_persistence_recovery_duration_seconds` | histogram | seconds | | one recovery, from its start (after its permit) to its end, succeeded or failed |
//! | `actix_persistence_recovery_events_replayed` | histogram | events | | events one successful recovery replayed |
//! | `actix_persistence_recovery_permits_waiting` | gauge | recoveries | | persistent actors waiting for a recovery permit (`journal.max-concurrent-recoveries`) |
//!
//! Metric names are constants of this module, so dashboards and tests share them.

/// Histogram, seconds, label `store`: one `WriteMessages` batch, from the journal starting the
/// store write to the store's answer, on the system's monotonic clock (Tokio's paused test
/// clock does not apply).
pub const PERSIST_LATENCY: &str = "actix_persistence_persist_latency_seconds";
/// Histogram, seconds, label `group`: how long a finished write's reply waits in its
/// write-reply-ordering group before it is released.
pub const REPLY_ORDERING_WAIT: &str = "actix_persistence_reply_ordering_wait_seconds";
/// Histogram, atomic writes, label `store`: atomic writes one SQL transaction committed.
pub const GROUP_COMMIT_BATCH_SIZE: &str = "actix_persistence_group_commit_batch_size";
/// Gauge: the journal's circuit breaker, 0 closed, 1 half-open, 2 open.
pub const CIRCUIT_BREAKER_STATE: &str = "actix_persistence_circuit_breaker_state";
/// Histogram, seconds: one recovery, succeeded or failed.
pub const RECOVERY_DURATION: &str = "actix_persistence_recovery_duration_seconds";
/// Histogram, events: events one successful recovery replayed.
pub const RECOVERY_EVENTS_REPLAYED: &str = "actix_persistence_recovery_events_replayed";
/// Gauge, recoveries: persistent actors waiting for a recovery permit.
pub const RECOVERY_PERMITS_WAITING: &str = "actix_persistence_recovery_permits_waiting";

/// Describes every metric (unit and meaning) to the installed recorder; exporters such as
/// Prometheus show the descriptions as help text. Call it once after installing a recorder
/// (optional: the metrics are reported either way).
pub fn describe() {
    use metrics::{describe_gauge, describe_histogram, Unit};
    describe_histogram!(
        PERSIST_LATENCY,
        Unit::Seconds,
        "Store write of one WriteMessages batch, per journal store"
    );
    describe_histogram!(
        REPLY_ORDERING_WAIT,
        Unit::Seconds,
        "Time a finished write's reply waits for earlier writes of its write-reply-ordering group"
    );
    describe_histogram!(
        GROUP_COMMIT_BATCH_SIZE,
        Unit::Count,
        "Atomic writes committed by one SQL transaction"
    );
    describe_gauge!(
        CIRCUIT_BREAKER_STATE,
        "Journal circuit breaker: 0 closed, 1 half-open, 2 open"
    );
    describe_histogram!(
        RECOVERY_DURATION,
        Unit::Seconds,
        "Duration of one persistent actor's recovery"
    );
    describe_histogram!(
        RECOVERY_EVENTS_REPLAYED,
        Unit::Count,
        "Events replayed by one successful recovery"
    );
    describe_gauge!(
        RECOVERY_PERMITS_WAITING,
        Unit::Count,
        "Persistent actors waiting for a recovery permit"
    );
}
