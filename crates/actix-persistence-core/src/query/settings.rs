//! Settings of queries (`query.*` in `reference.toml`).

use std::time::Duration;

/// How queries read (the `query` section of `reference.toml`).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// # use actix_persistence_core as actix_persistence; // the paths of the facade, `actix-persistence`
/// use actix_persistence::query::QuerySettings;
///
/// let settings = QuerySettings {
///     refresh_interval: Duration::from_millis(100),
///     ..QuerySettings::default()
/// };
/// assert_eq!(settings.page_size, 1000);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuerySettings {
    /// How often a live query looks for new events when no in-process notification woke it
    /// (`query.refresh-interval`). Default: 500 ms.
    pub refresh_interval: Duration,
    /// How long an event's transaction may take, from the moment the event was inserted to its
    /// commit, and still be delivered by a query that has already delivered later events
    /// (`query.late-commit-window`). Such an event is delivered at most this long (plus one
    /// refresh interval) after it was inserted. Events whose transaction takes longer may be
    /// missed by queries running meanwhile. Default: 2 s.
    pub late_commit_window: Duration,
    /// Events (or persistence ids) read per query (`query.page-size`). A stream holds at most
    /// `1 + read_ahead_pages` pages in memory: the one its consumer takes envelopes from and,
    /// by slice and by tag, the ones read meanwhile. Default: 1000.
    pub page_size: u32,
    /// Pages a query by slices or by tag reads while its consumer takes the current one
    /// (`query.read-ahead-pages`), each on a database connection of its own. With 1, the next
    /// page only. With more, a catch-up over stored events (older than the late-commit window)
    /// also reads the windows of database timestamps after the current page's, so that that
    /// many connections work at once (`docs/architecture.md`, "Queries"). A live query that has
    /// caught up reads one page per round, whatever this is. Values below 1 count as 1, values
    /// above [`MAX_READ_AHEAD_PAGES`](Self::MAX_READ_AHEAD_PAGES) (64, the configuration's
    /// limit) as that.
    /// Default: 3 (a catch-up over stored events ran 1.04-1.23x the events/s of 2 on SQLite
    /// and 1.01-1.18x on PostgreSQL, docs/benchmarks.md "Session 25").
    pub read_ahead_pages: u32,
}

impl QuerySettings {
    /// The most [`read_ahead_pages`](Self::read_ahead_pages) counts as (the limit of
    /// `query.read-ahead-pages`): each read planned ahead is a task and a database
    /// connection's work, and the settled pass plans that many at once (`u32::MAX` planned an
    /// hour of history in pages of 1 as billions of 1 µs windows before the first came back).
    pub const MAX_READ_AHEAD_PAGES: u32 = 64;

    /// [`read_ahead_pages`](Self::read_ahead_pages) as it counts: from 1 to
    /// [`MAX_READ_AHEAD_PAGES`](Self::MAX_READ_AHEAD_PAGES).
    pub(crate) fn read_ahead_pages_in_force(&self) -> u32 {
        self.read_ahead_pages.clamp(1, Self::MAX_READ_AHEAD_PAGES)
    }
}

impl Default for QuerySettings {
    fn default() -> Self {
        QuerySettings {
            refresh_interval: Duration::from_millis(500),
            late_commit_window: Duration::from_secs(2),
            page_size: 1000,
            read_ahead_pages: 3,
        }
    }
}
