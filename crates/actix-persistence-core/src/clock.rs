//! Readings of the system's clocks for the write path: the same clocks as
//! [`std::time::SystemTime`] and [`std::time::Instant`], read without their conversions.
//!
//! On Linux each reading is one `clock_gettime` of the C library (the call `std` makes) turned
//! into an integer. `SystemTime::now().duration_since(UNIX_EPOCH)` and `Instant::elapsed` cost
//! ~230 instructions per `persist` more in their generic subtraction and `Duration` arithmetic
//! (four readings: the event's timestamp, the in-memory store's clock, and the two of the
//! journal's persist latency; docs/benchmarks.md, session 8). Elsewhere these are the `std`
//! readings.
// Without the `actor` feature only the stores' wall clock in microseconds is read.
#![cfg_attr(not(feature = "actor"), allow(dead_code))]

/// The wall clock (`CLOCK_REALTIME`, as [`std::time::SystemTime::now`]), in milliseconds since
/// the Unix epoch: 0 before 1970, `i64::MAX` past what `i64` holds.
#[inline]
pub(crate) fn realtime_millis() -> i64 {
    let (secs, nanos) = realtime();
    since_epoch(secs, nanos, 1_000, 1_000_000)
}

/// The wall clock in microseconds since the Unix epoch (as [`realtime_millis`]).
#[inline]
pub(crate) fn realtime_micros() -> i64 {
    let (secs, nanos) = realtime();
    since_epoch(secs, nanos, 1_000_000, 1_000)
}

/// A reading of the monotonic clock (`CLOCK_MONOTONIC`, as [`std::time::Instant::now`] on
/// Linux), in nanoseconds from an arbitrary start: only differences of two readings mean
/// anything ([`seconds_between`]).
#[inline]
pub(crate) fn monotonic_nanos() -> u64 {
    monotonic()
}

/// The seconds from the reading `earlier` to the reading `later` of [`monotonic_nanos`] (0 if
/// `later` is not after it).
#[inline]
pub(crate) fn seconds_between(earlier: u64, later: u64) -> f64 {
    later.saturating_sub(earlier) as f64 / 1e9
}

/// `secs.nanos` since the epoch in units of `1 / per_sec` seconds (`nanos_per_unit`
/// nanoseconds each), saturating as described on [`realtime_millis`].
#[inline]
fn since_epoch(secs: i64, nanos: u32, per_sec: i64, nanos_per_unit: u32) -> i64 {
    if secs < 0 {
        return 0;
    }
    secs.checked_mul(per_sec)
        .and_then(|units| units.checked_add(i64::from(nanos / nanos_per_unit)))
        .unwrap_or(i64::MAX)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
#[inline]
fn realtime() -> (i64, u32) {
    read(libc::CLOCK_REALTIME)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
#[inline]
fn monotonic() -> u64 {
    let (secs, nanos) = read(libc::CLOCK_MONOTONIC);
    u64::try_from(secs)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(nanos))
}

/// Seconds and nanoseconds of `clock` (the kernel keeps `0 <= tv_nsec < 10^9`; a failed read,
/// which these two clocks never give, reads as the epoch).
#[cfg(any(target_os = "linux", target_os = "android"))]
#[inline]
fn read(clock: libc::clockid_t) -> (i64, u32) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec` for the duration of the call, and
    // `clock_gettime` writes nothing else.
    let status = unsafe { libc::clock_gettime(clock, &mut ts) };
    if status != 0 {
        return (0, 0);
    }
    // `time_t` is 32 bits on some targets.
    #[allow(clippy::useless_conversion)]
    let secs = i64::from(ts.tv_sec);
    (
        secs,
        u32::try_from(ts.tv_nsec).unwrap_or(0).min(999_999_999),
    )
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn realtime() -> (i64, u32) {
    use std::time::{SystemTime, UNIX_EPOCH};
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            d.subsec_nanos(),
        ),
        Err(_) => (-1, 0),
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn monotonic() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The deadline `after` from now (`now + after`, on Tokio's clock), or a moment about 30 years
/// away when that overflows the clock: a timeout or interval of `Duration::MAX` (or a setting
/// such as `"300000000000y"`) means "never by time" instead of a panic of `Instant + Duration`.
pub fn far_future_saturating(after: std::time::Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(after)
        .or_else(|| now.checked_add(std::time::Duration::from_secs(30 * 365 * 24 * 3600)))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    #[test]
    fn the_wall_clock_reads_what_system_time_reads() {
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970");
        let (millis, micros) = (realtime_millis(), realtime_micros());
        let after = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970");
        let (lo_ms, hi_ms) = (before.as_millis() as i64, after.as_millis() as i64);
        assert!(
            (lo_ms..=hi_ms).contains(&millis),
            "{millis} not in {lo_ms}..={hi_ms}"
        );
        let (lo_us, hi_us) = (before.as_micros() as i64, after.as_micros() as i64);
        assert!(
            (lo_us..=hi_us).contains(&micros),
            "{micros} not in {lo_us}..={hi_us}"
        );
    }

    #[test]
    fn the_monotonic_clock_never_goes_back() {
        let first = monotonic_nanos();
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(2) {}
        let second = monotonic_nanos();
        assert!(second >= first + 2_000_000, "{first} then {second}");
        assert!(seconds_between(first, second) >= 0.002);
        assert_eq!(seconds_between(second, first), 0.0);
    }

    #[test]
    fn times_before_the_epoch_read_zero_and_overflow_saturates() {
        assert_eq!(since_epoch(-1, 999_999_999, 1_000, 1_000_000), 0);
        assert_eq!(since_epoch(1, 2_345_678, 1_000, 1_000_000), 1_002);
        assert_eq!(since_epoch(1, 2_345_678, 1_000_000, 1_000), 1_002_345);
        assert_eq!(since_epoch(i64::MAX / 10, 0, 1_000, 1_000_000), i64::MAX);
    }
}
