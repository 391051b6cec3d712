//! Scale-out: one projection split into two slice ranges, each instance in its own OS process,
//! over one PostgreSQL database. Killing a process (SIGKILL, mid-stream) and starting it again
//! leaves every event handled exactly once (exactly-once mode), none missed.
//!
//! The worker processes are this test binary itself, started with `--exact worker_process`
//! and the `PROJECTION_WORKER_*` environment variables.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use actix_persistence_core::query::{slice_for_persistence_id, ReadJournal, NUMBER_OF_SLICES};
use actix_persistence_core::{AtomicWrite, JournalStore};
use actix_persistence_projection::{
    slice_ranges, HandlerError, PostgresOffsetStore, Projection, ProjectionId, QuerySource,
    TransactionalHandler,
};
use actix_persistence_sql::test_util::TestDatabase;
use actix_persistence_sql::{PostgresJournal, PostgresJournalOptions};
use async_trait::async_trait;
use common::*;
use sqlx::{PgPool, Postgres, Transaction};

const URL: &str = "PROJECTION_WORKER_URL";
const RANGE: &str = "PROJECTION_WORKER_RANGE";
const IDS: usize = 24;

/// Records each handled event with the range that handled it (no key: duplicates would show).
struct Record {
    range: i32,
}

#[async_trait]
impl TransactionalHandler<Env, Transaction<'static, Postgres>> for Record {
    async fn process(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        envelope: &Env,
    ) -> Result<(), HandlerError> {
        sqlx::query("INSERT INTO handled (persistence_id, seq_nr, range) VALUES ($1, $2, $3)")
            .bind(&*envelope.persistence_id)
            .bind(envelope.seq_nr as i64)
            .bind(self.range)
            .execute(&mut **tx)
            .await?;
        // Simulated work, so that a kill lands in the middle of the stream.
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok(())
    }
}

/// The worker: runs its range's instance until killed (or for a minute at most).
#[test]
fn worker_process() {
    let (Ok(url), Ok(range)) = (std::env::var(URL), std::env::var(RANGE)) else {
        return; // not started as a worker
    };
    let range: usize = range.parse().expect("range index");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let journal = PostgresJournal::connect(&PostgresJournalOptions::new(url))
            .await
            .expect("journal");
        let slices = slice_ranges(2)[range].clone();
        let (min, max) = (*slices.start(), *slices.end());
        let source = QuerySource::<Deposited>::events_by_slices(
            ReadJournal::new(journal.clone(), query_settings()),
            "Account",
            min,
            max,
        );
        let handle = Projection::exactly_once(
            ProjectionId::for_slices("scale-out", min, max),
            source,
            PostgresOffsetStore::of_journal(&journal),
            Record {
                range: range as i32,
            },
        )
        .with_max_concurrency(4)
        .start();
        tokio::time::sleep(Duration::from_secs(60)).await;
        handle.stop().await;
    });
}

/// `IDS` persistence ids, half of them in each of the two slice ranges.
fn ids_in_both_ranges() -> Vec<String> {
    let ranges = slice_ranges(2);
    assert_eq!(ranges[1].end() + 1, NUMBER_OF_SLICES);
    let mut ids = Vec::new();
    for range in &ranges {
        ids.extend(
            (0..)
                .map(|k| format!("Account|{}", k * 7919))
                .filter(|id| range.contains(&slice_for_persistence_id(id)))
                .take(IDS / 2),
        );
    }
    ids
}

/// Events `seq_nrs` of every id, in one call (one atomic write per id).
async fn write_all(
    journal: &PostgresJournal,
    ids: &[String],
    seq_nrs: std::ops::RangeInclusive<u64>,
) {
    let writes = ids
        .iter()
        .map(|id| AtomicWrite::new(seq_nrs.clone().map(|n| repr(id, n, n)).collect()).unwrap())
        .collect();
    let results = journal.write_messages(writes).await.unwrap();
    assert!(results.iter().all(Result::is_ok));
}

/// A worker process, killed when dropped.
struct Worker(Child);

impl Worker {
    fn start(url: &str, range: usize) -> Worker {
        let child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "worker_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(URL, url)
            .env(RANGE, range.to_string())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the worker process");
        Worker(child)
    }

    fn kill(mut self) {
        self.0.kill().expect("kill");
        self.0.wait().expect("reap");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .expect("count")
}

/// Waits until `sql` counts at least `n` (the workers make progress on their own).
async fn wait_for_count(pool: &PgPool, sql: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(pool, sql).await < n {
        assert!(Instant::now() < deadline, "{sql} never reached {n}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

const ALL: &str = "SELECT COUNT(*) FROM handled";
const RANGE_0: &str = "SELECT COUNT(*) FROM handled WHERE range = 0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn two_processes_split_by_slices_handle_every_event_exactly_once_across_a_kill() {
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let journal = PostgresJournal::connect(&PostgresJournalOptions::new(database.url()))
        .await
        .unwrap();
    let pool = journal.pool().clone();
    sqlx::query("CREATE TABLE handled (persistence_id TEXT NOT NULL, seq_nr BIGINT NOT NULL, range INT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    let ids = ids_in_both_ranges();
    write_all(&journal, &ids, 1..=5).await;
    let in_range_0 = (IDS / 2) as i64;

    let first = Worker::start(database.url(), 0);
    let second = Worker::start(database.url(), 1);
    wait_for_count(&pool, ALL, 5 * IDS as i64).await;

    // More events; the first worker is killed while it handles them.
    // All at once, so the first worker is still busy with them when it is killed.
    let writes = ids
        .iter()
        .map(|id| {
            AtomicWrite::new((6..=10).map(|seq_nr| repr(id, seq_nr, seq_nr)).collect()).unwrap()
        })
        .collect();
    let results = journal.write_messages(writes).await.unwrap();
    assert!(results.iter().all(Result::is_ok));
    wait_for_count(&pool, RANGE_0, 5 * in_range_0 + 3).await;
    first.kill();
    let handled_before_restart = count(&pool, RANGE_0).await;
    assert!(
        handled_before_restart < 10 * in_range_0,
        "killed mid-stream"
    );

    let first = Worker::start(database.url(), 0);
    wait_for_count(&pool, ALL, 10 * IDS as i64).await;
    first.kill();
    second.kill();

    let total = count(&pool, ALL).await;
    let distinct = count(
        &pool,
        "SELECT COUNT(*) FROM (SELECT DISTINCT persistence_id, seq_nr FROM handled) AS d",
    )
    .await;
    assert_eq!(total, 10 * IDS as i64, "every event handled once");
    assert_eq!(distinct, 10 * IDS as i64, "none missed");
    let wrong_range = count(
        &pool,
        "SELECT COUNT(*) FROM (SELECT persistence_id FROM handled GROUP BY persistence_id HAVING COUNT(DISTINCT range) > 1) AS x",
    )
    .await;
    assert_eq!(wrong_range, 0, "each id handled by one range only");
}
