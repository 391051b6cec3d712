//! The settled pass's pages, read ahead in windows of database timestamps, so that a catch-up
//! over stored events keeps several database connections busy at once.
//!
//! A query's next page starts after the last event of the page before it, so one pass read
//! page by page waits for each page before it can ask for the next: on PostgreSQL one backend
//! worked at a time, and the catch-up ran at the speed of that backend (about 2 µs of server
//! CPU per event), well below a replay, whose pages are known ahead (windows of sequence
//! numbers). The settled pass reads a range whose every event is committed (`settled` to the
//! round's `bound`), so it can be cut by timestamp instead: once a page shows how dense the
//! events are, the rest of the range is planned as consecutive **windows** of database
//! timestamps, each sized to hold most of a page, and the windows are read concurrently (up
//! to `query.read-ahead-pages` reads in flight), each page by page, and delivered in order.
//!
//! - The windows partition the range: `(settled, e1)`, `[e1, e2)`, ..., `[ek, bound)`. Every
//!   event of the range lies in exactly one window, and the windows are delivered in
//!   timestamp order, so the query order ([`EventKey`]) is kept.
//! - A window holding more than a page is read on in pages (a *continuation* after the page's
//!   last event, read before the windows after it): nothing is read twice or skipped.
//! - Each read asks for one event more than a page ([`SettledReads::read_limit`]) and the
//!   extra event is not delivered: it only tells whether the window goes on. A window that
//!   holds exactly a page (a group commit's statement of a page's size, whose events share one
//!   timestamp) then needs no continuation, which would have found nothing after a round trip
//!   of its own.
//! - The width follows the density seen over the last eight reads (events, and the µs each
//!   covered), to hold 7/8 of a page. Reads that found nothing widen it: not after the first
//!   (a window that fell between two group commits), twice after the second, four times after
//!   each further one in a row (a quiet stretch of history is crossed in a few windows, not one
//!   empty read per page's worth of time). Timestamps come in clusters (a PostgreSQL statement gives all its rows one
//!   timestamp, so a group commit's events share it): the average over several reads spans
//!   several clusters and the gaps between them.
//! - A round's reads belong to its bound: a new round (a live query's next settled pass) or a
//!   position that moved elsewhere drops them, and dropping a read aborts it.
//! - Nothing is planned until a page comes back full: a live query's round over a few new
//!   events is one read, as before.

use std::collections::VecDeque;

use super::EventKey;

/// One page read of the settled pass: the events after `after` with a database timestamp
/// below `end` (exclusive), at most a page. `task` reads it ahead (aborted when dropped);
/// `None` until started (or when no runtime could start it: read when it is the next page).
pub(crate) struct PageRead<T> {
    /// The position after which the page starts (exclusive).
    pub(crate) after: EventKey,
    /// The end of the page's window, µs (exclusive).
    pub(crate) end: i64,
    /// The read in flight, if started.
    pub(crate) task: Option<T>,
}

/// What a page told of the range it was read from (see [`SettledReads::page_done`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageSummary {
    /// Events in the page (delivered: at most a page).
    pub(crate) len: usize,
    /// Whether the read found more events in its window than the page holds (it read
    /// [`SettledReads::read_limit`] events): the window goes on after the page's last event.
    pub(crate) more: bool,
    /// Timestamp of its first event (µs), when it has one.
    pub(crate) first_timestamp: Option<i64>,
    /// Timestamp of the event the read found after the page (µs), when it found one
    /// ([`more`](Self::more)): where the window goes on.
    pub(crate) next_timestamp: Option<i64>,
}

/// Where the rest of a window starts after a page that ended at `last` with more events after
/// it, the first of them at `next_timestamp`: at the start of that timestamp when it is a later
/// one (no event of the window lies between the two, so the rest of `last`'s timestamp was
/// read), right after `last` otherwise.
///
/// Timestamps come in clusters (a group commit gives all its events one timestamp), and a page
/// often ends with its cluster: the continuation then starts at the next cluster's first event,
/// which the database finds with one index seek, where a start after `last` made SQLite walk
/// `last`'s whole cluster again to reach the events after it (`POSITION_BY_TIMESTAMP_FIRST` in
/// `actix-persistence-sql`).
pub(crate) fn resume_after(last: &EventKey, next_timestamp: Option<i64>) -> EventKey {
    match next_timestamp {
        Some(next) if next > last.timestamp => EventKey::start_of(next),
        _ => last.clone(),
    }
}

/// The reads of one settled pass (see the module documentation), in delivery order.
pub(crate) struct SettledReads<T> {
    /// The pass's bound (exclusive): the reads are for this round only.
    bound: i64,
    /// Planned reads, the next page first.
    reads: VecDeque<PageRead<T>>,
    /// The start of the part of the range no read covers yet (µs); `bound` when all of it is
    /// planned.
    tail: i64,
    /// The width of the next window (µs), from the density seen; `None` before a full page.
    width: Option<i64>,
    /// The last reads' events and the µs each covered (at most [`DENSITY_READS`]).
    recent: VecDeque<(usize, i64)>,
    /// Reads in a row that found nothing.
    empty_reads: u32,
    /// Events per page.
    page_size: usize,
    /// Reads in flight at most (`query.read-ahead-pages`, >= 1).
    depth: usize,
}

impl<T> SettledReads<T> {
    /// No reads (a pass not started).
    pub(crate) fn new(page_size: usize, depth: usize) -> Self {
        SettledReads {
            bound: i64::MIN,
            reads: VecDeque::new(),
            tail: i64::MIN,
            width: None,
            recent: VecDeque::with_capacity(DENSITY_READS),
            empty_reads: 0,
            page_size: page_size.max(1),
            depth: depth.max(1),
        }
    }

    /// Events each read asks for: one more than a page. The extra one, when found, is not
    /// delivered ([`PageSummary::more`]).
    pub(crate) fn read_limit(&self) -> usize {
        self.page_size.saturating_add(1)
    }

    /// The read of the pass's next page, from `settled` up to `bound`: the one planned when it
    /// starts at `settled` in a pass with this `bound`; otherwise (a new round, or the first
    /// page) every planned read is dropped and the whole rest of the range is one read, not
    /// started.
    pub(crate) fn next_read(&mut self, settled: &EventKey, bound: i64) -> PageRead<T> {
        if self.bound == bound {
            if let Some(read) = self.reads.pop_front() {
                if read.after == *settled {
                    return read;
                }
            }
        }
        self.reads.clear();
        self.bound = bound;
        self.tail = bound;
        PageRead {
            after: settled.clone(),
            end: bound,
            task: None,
        }
    }

    /// Plans what follows `read`, whose page is `page` and ends at `last`: the window's
    /// continuation first when the read found more than the page, then new windows up to
    /// `depth` reads.
    /// Returns whether the pass is over (the page was not full and its window was the last).
    pub(crate) fn page_done(
        &mut self,
        read: &PageRead<T>,
        page: PageSummary,
        last: Option<&EventKey>,
    ) -> bool {
        self.learn_density(read, page, last);
        match (page.more, last) {
            (true, Some(last)) => {
                let after = resume_after(last, page.next_timestamp);
                // Nothing is planned behind this window: its continuation may stop short of
                // its end, and the rest is planned as windows.
                let mut end = read.end;
                if self.depth > 1 && self.reads.is_empty() && self.tail == read.end {
                    if let Some(width) = self.width {
                        end = end.min(after.timestamp.saturating_add(width));
                        self.tail = end;
                    }
                }
                self.reads.push_front(PageRead {
                    after,
                    end,
                    task: None,
                });
            }
            _ if read.end >= self.bound => {
                self.reads.clear();
                return true;
            }
            _ => {}
        }
        self.plan_windows();
        false
    }

    /// Whether a planned read is in flight.
    pub(crate) fn in_flight(&self) -> bool {
        self.reads.iter().any(|read| read.task.is_some())
    }

    /// The planned reads not started yet (to start them).
    pub(crate) fn unstarted(&mut self) -> impl Iterator<Item = &mut PageRead<T>> {
        self.reads.iter_mut().filter(|read| read.task.is_none())
    }

    /// Planned windows, each covering the next `width` µs of the rest, while fewer than
    /// `depth` reads are planned. When nothing is planned and the rest is not, one window is
    /// (the pass goes on).
    fn plan_windows(&mut self) {
        let Some(width) = self.width else {
            return;
        };
        while self.tail < self.bound && (self.reads.len() < self.depth || self.reads.is_empty()) {
            let end = self.tail.saturating_add(width).min(self.bound);
            self.reads.push_back(PageRead {
                after: EventKey::start_of(self.tail),
                end,
                task: None,
            });
            self.tail = end;
        }
    }

    /// Sizes the next windows from the density of events the last reads showed (the events
    /// and µs each covered, over the last [`DENSITY_READS`]): to hold 7/8 of a page each. Reads
    /// that found nothing widen it further ([`empty_read_growth`]), so that a quiet stretch of
    /// history is crossed in a few reads.
    fn learn_density(&mut self, read: &PageRead<T>, page: PageSummary, last: Option<&EventKey>) {
        let full = page.more;
        // Where the read's range starts: the first read of a pass starts wherever the offset
        // was (perhaps the start of time), so its page's first event stands for it.
        let start = if read.after.timestamp > i64::MIN / 2 {
            Some(read.after.timestamp)
        } else {
            page.first_timestamp
        };
        let covered_to = match (full, last) {
            (true, Some(last)) => Some(last.timestamp),
            (true, None) => None,
            // The whole window was read.
            (false, _) if self.width.is_some() || read.end < self.bound => Some(read.end),
            (false, _) => None,
        };
        let (Some(start), Some(to)) = (start, covered_to) else {
            return;
        };
        if self.recent.len() == DENSITY_READS {
            self.recent.pop_front();
        }
        self.recent
            .push_back((page.len, to.saturating_sub(start).max(0)));
        let (events, span) = self
            .recent
            .iter()
            .fold((0usize, 0i64), |(e, s), (events, span)| {
                (e + events, s.saturating_add(*span))
            });
        let target = self.page_size as f64 * 7.0 / 8.0;
        let mut width = if events == 0 {
            span.max(1) as f64
        } else {
            span.max(1) as f64 * target / events as f64
        };
        if page.len == 0 {
            self.empty_reads = self.empty_reads.saturating_add(1);
            if let Some(previous) = self.width {
                width = width.max(previous as f64 * empty_read_growth(self.empty_reads));
            }
        } else {
            self.empty_reads = 0;
        }
        // Windows of at least 1 µs; at most about 35 years (no overflow adding it).
        self.width = Some((width as i64).clamp(1, 1 << 50));
    }
}

/// How much wider the next window is after `in_a_row` reads that found nothing (at least 1):
/// as wide after the first, twice after the second, four times after each further one.
///
/// A quiet stretch of history is crossed in a few reads (the width grows 4x per read from the
/// third on), but a lone empty read, a window that fell between two group commits (whose
/// events share one timestamp per statement), does not widen the next windows: quadrupled,
/// they held several commits each, and each commit after a window's first page was a
/// continuation read that could only start once the page before it was in (measured on a
/// history of 1,000 commits of 1,000 events: about half of all reads, docs/benchmarks.md,
/// "Session 9").
fn empty_read_growth(in_a_row: u32) -> f64 {
    match in_a_row {
        0 | 1 => 1.0,
        2 => 2.0,
        _ => 4.0,
    }
}

/// How many of the last reads size the windows (see [`SettledReads::learn_density`]).
const DENSITY_READS: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn key(timestamp: i64, id: &str, seq_nr: u64) -> EventKey {
        EventKey {
            timestamp,
            persistence_id: Arc::from(id),
            seq_nr,
        }
    }

    /// What a catch-up read through the plan did.
    struct CatchUp {
        /// The delivered keys, in order.
        delivered: Vec<EventKey>,
        /// The largest number of reads planned at once.
        most: usize,
        /// Reads.
        queries: usize,
        /// Pages that came back with more in their window: each is followed by a continuation
        /// read, which can only start once that page is in (the reads that do not overlap).
        continuations: usize,
        /// Reads that started right after an event rather than at the start of a timestamp
        /// (on SQLite: a walk over that event's timestamp up to it).
        after_an_event: usize,
    }

    /// Events at the given timestamps, one id each, read through the plan by a reader that
    /// answers every read from them.
    fn catch_up(timestamps: &[i64], page: usize, depth: usize) -> CatchUp {
        let events = expected(timestamps);
        let bound = 1_000_000;
        let mut reads = SettledReads::<()>::new(page, depth);
        let mut settled = EventKey::start_of(i64::MIN);
        let mut delivered = Vec::new();
        let mut most = 0;
        let mut queries = 0;
        let mut continuations = 0;
        let mut after_an_event = 0;
        loop {
            let read = reads.next_read(&settled, bound);
            queries += 1;
            after_an_event += usize::from(read.after != EventKey::start_of(read.after.timestamp));
            // Every read after the first is one the plan made (and started): none is dropped
            // for a position it did not expect.
            assert!(
                queries == 1 || read.task.is_some(),
                "read {queries} after {:?} was not planned",
                read.after
            );
            let mut rows: Vec<EventKey> = events
                .iter()
                .filter(|e| **e > read.after && e.timestamp < read.end)
                .take(reads.read_limit())
                .cloned()
                .collect();
            let more = rows.len() > page;
            continuations += usize::from(more);
            let next_timestamp = rows.get(page).map(|e| e.timestamp);
            rows.truncate(page);
            let summary = PageSummary {
                len: rows.len(),
                more,
                first_timestamp: rows.first().map(|e| e.timestamp),
                next_timestamp,
            };
            let done = reads.page_done(&read, summary, rows.last());
            for r in reads.unstarted() {
                r.task = Some(());
            }
            most = most.max(reads.reads.len());
            if let Some(last) = rows.last() {
                settled = resume_after(last, next_timestamp);
            }
            delivered.extend(rows);
            if done {
                break;
            }
            if !summary.more {
                settled = EventKey::start_of(read.end).max(settled);
            }
            assert!(queries < 100_000, "the plan does not end");
        }
        CatchUp {
            delivered,
            most,
            queries,
            continuations,
            after_an_event,
        }
    }

    /// The keys of events at `timestamps` (one id each), in query order.
    fn expected(timestamps: &[i64]) -> Vec<EventKey> {
        let mut e: Vec<EventKey> = timestamps
            .iter()
            .enumerate()
            .map(|(i, t)| key(*t, &format!("id-{i:05}"), 1))
            .collect();
        e.sort();
        e
    }

    #[test]
    fn windows_deliver_every_event_once_in_order() {
        let shapes: Vec<Vec<i64>> = vec![
            (0..5_000).map(|i| i * 10).collect(),
            // Bursts far apart, a run sharing one timestamp, a quiet stretch.
            (0..1_000)
                .map(|i| i % 3)
                .chain((0..2_000).map(|i| 400_000 + i / 7))
                .chain(std::iter::repeat_n(500_000, 1_500))
                .chain((0..300).map(|i| 999_000 + i))
                .collect(),
            // Denser and denser.
            (0..3_000).map(|i| (i * i) / 10).collect(),
            vec![],
            vec![5],
        ];
        for timestamps in shapes {
            for (page, depth) in [(100, 1), (100, 2), (100, 3), (7, 2), (1, 2)] {
                let CatchUp {
                    delivered, most, ..
                } = catch_up(&timestamps, page, depth);
                assert_eq!(
                    delivered,
                    expected(&timestamps),
                    "page {page}, depth {depth}"
                );
                assert!(
                    most <= depth.max(1),
                    "{most} reads planned at once, depth {depth}"
                );
            }
        }
    }

    #[test]
    fn reads_ahead_only_with_more_than_one_page_in_flight() {
        let timestamps: Vec<i64> = (0..1_000).map(|i| i * 100).collect();
        // One read in flight: only the next page of the one range, as a query read before.
        let CatchUp { most, queries, .. } = catch_up(&timestamps, 100, 1);
        assert_eq!(most, 1);
        // Ten pages, the last one known to end its range (no empty read after it).
        assert_eq!(queries, 10);
        // Two: a continuation or window behind the page being delivered, and one more.
        let CatchUp { most, .. } = catch_up(&timestamps, 100, 2);
        assert_eq!(most, 2);
    }

    #[test]
    fn windows_hold_most_of_a_page() {
        // Events spread evenly over the whole range: after the first page, windows hold about
        // 7/8 of a page, so the catch-up takes about 8/7 as many reads as pages.
        let timestamps: Vec<i64> = (0..10_000).map(|i| i * 100).collect();
        let CatchUp { queries, .. } = catch_up(&timestamps, 1_000, 2);
        assert!((11..=14).contains(&queries), "{queries} reads for 10 pages");
    }

    #[test]
    fn a_quiet_stretch_takes_few_reads() {
        // A page of events at the start, then one event near the bound: the windows grow
        // fourfold per empty read from the third empty read in a row on.
        let mut timestamps: Vec<i64> = (0..100).collect();
        timestamps.push(999_999);
        let CatchUp {
            delivered, queries, ..
        } = catch_up(&timestamps, 100, 2);
        assert_eq!(delivered.len(), 101);
        assert!(queries <= 16, "{queries} reads");
    }

    #[test]
    fn clustered_timestamps_take_few_reads_more_than_pages() {
        // Group commits: 60 statements of 150 events each sharing one timestamp, 10 ms apart
        // (a page's first read sees a single timestamp: no width of its own).
        let timestamps: Vec<i64> = (0..60)
            .flat_map(|batch| std::iter::repeat_n(1_000 + batch * 10_000, 150))
            .collect();
        let CatchUp {
            delivered,
            queries,
            continuations,
            ..
        } = catch_up(&timestamps, 100, 2);
        assert_eq!(delivered, expected(&timestamps));
        // 90 pages' worth of events; a window holds whole statements only, so each statement
        // takes a page and its continuation (60), and windows between statements find nothing.
        assert!(queries <= 180, "{queries} reads for 90 pages");
        assert!(continuations <= 65, "{continuations} continuation reads");
    }

    #[test]
    fn a_window_of_exactly_a_page_needs_no_continuation() {
        // Statements of exactly a page each (a group commit of a page's size): a window that
        // holds one is known to end with its page, without a read that finds nothing after it.
        let timestamps: Vec<i64> = (0..50)
            .flat_map(|batch| std::iter::repeat_n(1_000 + batch * 10_000, 100))
            .collect();
        let CatchUp {
            delivered,
            queries,
            continuations,
            ..
        } = catch_up(&timestamps, 100, 2);
        assert_eq!(delivered, expected(&timestamps));
        // 77 reads when each such window's page was followed by an empty read; 13 of 66 were
        // continuations while an empty read quadrupled the next windows.
        assert!(queries <= 75, "{queries} reads for 50 pages");
        assert!(continuations <= 5, "{continuations} continuation reads");
    }

    #[test]
    fn a_lone_empty_read_does_not_make_windows_of_several_statements() {
        // Statements of exactly a page each at irregular intervals (1-4.7 ms here; 10-47 ms in
        // `catch-up-speed fill`'s group commits): a window that falls between two of them finds
        // nothing. Quadrupling the next windows after it made them hold several statements,
        // each after the first read by a continuation that cannot overlap: 47 % of all reads
        // (docs/benchmarks.md, "Session 9").
        let mut at = 1_000;
        let mut x: u64 = 7;
        let timestamps: Vec<i64> = (0..150)
            .flat_map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                at += 1_000 + ((x >> 33) % 3_700) as i64;
                std::iter::repeat_n(at, 100)
            })
            .collect();
        let CatchUp {
            delivered,
            queries,
            continuations,
            ..
        } = catch_up(&timestamps, 100, 2);
        assert_eq!(delivered, expected(&timestamps));
        assert!(
            continuations * 5 <= queries,
            "{continuations} continuation reads of {queries}"
        );
    }

    #[test]
    fn a_page_that_ends_its_timestamp_is_continued_at_the_next_one() {
        // Twenty group commits of a page each, every commit's events at one timestamp: each
        // page ends its commit, and the event read after it starts the next commit.
        let timestamps: Vec<i64> = (0..2_000).map(|i| 1_000 + (i / 100) * 1_000).collect();
        for depth in [1, 2, 4] {
            let CatchUp {
                delivered,
                continuations,
                after_an_event,
                ..
            } = catch_up(&timestamps, 100, depth);
            assert_eq!(delivered, expected(&timestamps), "depth {depth}");
            if depth == 1 {
                // One window, read on page after page.
                assert_eq!(continuations, 19);
            }
            // None of them walks the commit before it again.
            assert_eq!(after_an_event, 0, "depth {depth}");
        }
        // Commits of two and a half pages: a page that ends inside a commit is continued right
        // after its last event, as before.
        let timestamps: Vec<i64> = (0..2_500).map(|i| 1_000 + (i / 250) * 1_000).collect();
        let CatchUp {
            delivered,
            after_an_event,
            ..
        } = catch_up(&timestamps, 100, 1);
        assert_eq!(delivered, expected(&timestamps));
        assert!(after_an_event >= 10, "{after_an_event}");
    }

    #[test]
    fn a_new_bound_drops_the_planned_reads() {
        let mut reads = SettledReads::<()>::new(2, 2);
        let start = EventKey::start_of(i64::MIN);
        let read = reads.next_read(&start, 100);
        let done = reads.page_done(
            &read,
            PageSummary {
                len: 2,
                more: true,
                first_timestamp: Some(10),
                next_timestamp: Some(20),
            },
            Some(&key(20, "a", 1)),
        );
        assert!(!done);
        assert_eq!(reads.reads.len(), 2);
        // The next round's pass (another bound) starts over from the settled position.
        let read = reads.next_read(&key(20, "a", 1), 200);
        assert_eq!((read.after, read.end), (key(20, "a", 1), 200));
        assert!(reads.reads.is_empty());
    }
}
