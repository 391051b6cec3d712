//! Benchmarks of actix-persistence, run by the `persistence-bench` binary (see
//! `docs/benchmarks.md` for the scenarios, the commands and the measured numbers).
//!
//! - [`closed_loop`]: N actors persist M events each as fast as they can, on the healthy
//!   in-memory store and on the seed's pathological one.
//! - [`open_loop`]: asks at a fixed rate to random actors, a share of writes delayed; ask and
//!   persist latency over the same writes in HdrHistograms.
//! - [`postgres`]: the open loop on PostgreSQL behind a TCP latency fault ([`proxy`]).
//! - [`group_commit`]: group commit against one transaction per write, next to pgbench.
//! - [`chart`]: an SVG of ask-latency percentiles per group count.
//! - [`projection`]: a projection catching up on stored events, by `max_concurrency` and
//!   group size, with [`projection_chart`] (issue 9, seed 003's shape).
//! - [`query_fill`]: the journal the query benchmarks read.
//! - [`bench_event`]: the event the recovery and catch-up benchmarks store.
#![warn(missing_docs)]

pub mod actor;
pub mod bench_event;
pub mod chart;
pub mod closed_loop;
pub mod group_commit;
pub mod open_loop;
pub mod pg;
pub mod postgres;
pub mod projection;
pub mod projection_chart;
pub mod proxy;
pub mod query_fill;
pub mod report;
pub mod runner;
pub mod sqlite_floor;
pub mod stores;
pub mod sys;
