//! Catch-up speed over a journal filled once: `current_events_by_slices` over all 1024 slices,
//! several times, on a database that keeps its events between runs (for before/after pairs of
//! builds on the same rows, and for profiling the catch-up alone).
//!
//! `cargo run --release -p actix-persistence-bench --bin catch-up-speed -- fill|run <url> [events] [ids] [page] [rounds] [read-ahead,...] [latency-us]`
//! (`url`: `sqlite:<file>` or a PostgreSQL URL of an existing database; `fill` writes `events`
//! events in `ids` ids (defaults 1,000,000 and 10,000, see `query_fill`), `run` catches up
//! `rounds` times (default 3) with pages of `page` events (default 1,000) and prints events/s
//! and the CPU seconds of this process per catch-up; with a comma-separated list of
//! `query.read-ahead-pages` values (default: the default setting), each round catches up once
//! per value, alternating, for side-by-side figures). With `latency-us` (and a PostgreSQL URL
//! over TCP, `host:port` in it), the catch-up goes through a proxy that delays every chunk by
//! that many µs each way, as a database on another host would (`proxy::Fault::latency`). Run `VACUUM ANALYZE journal` on
//! PostgreSQL after the fill, as a long-lived table would be.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use actix_persistence_bench::proxy::{Fault, FaultProxy};
use actix_persistence_bench::query_fill::{catch_up_once, fill, CatchUp};
use actix_persistence_core::query::{QuerySettings, QueryStore};
use actix_persistence_sql::{
    PostgresJournal, PostgresJournalOptions, SqliteJournal, SqliteJournalOptions,
};

/// With the `mimalloc` feature this benchmark allocates through mimalloc (see `Cargo.toml`).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(url)) = (args.get(1).cloned(), args.get(2).cloned()) else {
        eprintln!(
            "usage: catch-up-speed fill|run <url> [events] [ids] [page] [rounds] [read-ahead,...] [latency-us]"
        );
        std::process::exit(2);
    };
    let number =
        |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let events = number(3, 1_000_000);
    let ids = number(4, 10_000).max(1);
    let page = u32::try_from(number(5, 1_000)).unwrap_or(u32::MAX).max(1);
    let rounds = number(6, 3);
    let read_ahead: Vec<u32> = match args.get(7) {
        Some(list) => list
            .split(',')
            .filter_map(|n| n.trim().parse().ok())
            .collect(),
        None => vec![QuerySettings::default().read_ahead_pages],
    };
    let latency = std::time::Duration::from_micros(number(8, 0));
    // A network hop: the URL's `host:port` replaced by a delaying proxy's (kept until the end).
    let (url, _proxy) = if latency.is_zero() || url.starts_with("sqlite:") {
        (url, None)
    } else {
        let Some((host_port, upstream)) = tcp_upstream(&url) else {
            eprintln!("a latency needs a PostgreSQL URL with host:port, such as postgres://postgres@127.0.0.1:5432/db");
            std::process::exit(2);
        };
        let proxy = FaultProxy::start(upstream, Fault::latency(latency)).expect("start the proxy");
        let url = url.replacen(&host_port, &proxy.addr().to_string(), 1);
        eprintln!("through a proxy adding {} µs each way", latency.as_micros());
        (url, Some(proxy))
    };
    // One thread, as an Actix arbiter.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let store: Arc<dyn QueryStore> = if url.starts_with("sqlite:") {
            Arc::new(
                SqliteJournal::connect(&SqliteJournalOptions::new(url.clone()))
                    .await
                    .expect("open SQLite"),
            )
        } else {
            Arc::new(
                PostgresJournal::connect(&PostgresJournalOptions::new(url.clone()))
                    .await
                    .expect("connect to PostgreSQL"),
            )
        };
        if mode == "fill" {
            let took = fill(&*store, events, ids).await;
            eprintln!("{events} events in {ids} ids written in {:.1} s", took.as_secs_f64());
            return;
        }
        for _ in 0..rounds {
            for &pages in &read_ahead {
                let CatchUp {
                    delivered,
                    seconds,
                    cpu,
                } = catch_up_once(&store, page, pages).await;
                println!(
                    "catch-up, page {page}, read-ahead {pages}: {delivered} events in {seconds:.2} s, {:.0} events/s, CPU {cpu:.2} s",
                    delivered as f64 / seconds
                );
            }
        }
    });
}

/// The `host:port` of a URL such as `postgres://user@host:port/db` and its address.
fn tcp_upstream(url: &str) -> Option<(String, SocketAddr)> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let host_port = authority.rsplit('@').next()?.to_owned();
    let address = host_port.to_socket_addrs().ok()?.next()?;
    Some((host_port, address))
}
