//! Result rows: HdrHistogram summaries, the JSON row every scenario writes, medians over runs
//! and the text tables printed at the end of a run.

use std::path::Path;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Latencies are recorded in nanoseconds, 3 significant digits, up to this bound (longer
/// values are clamped to it).
const HIGHEST_NANOS: u64 = 120_000_000_000;

/// An HdrHistogram of latencies (3 significant digits, nanoseconds).
#[derive(Debug, Clone)]
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        Self::new()
    }
}

impl Latencies {
    /// An empty histogram.
    pub fn new() -> Self {
        Latencies(
            Histogram::new_with_bounds(1, HIGHEST_NANOS, 3)
                .expect("static histogram bounds are valid"),
        )
    }

    /// Records one latency.
    pub fn record(&mut self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.0.saturating_record(nanos.max(1));
    }

    /// How many were recorded.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The summary in milliseconds, `None` when empty.
    pub fn summary(&self) -> Option<Summary> {
        if self.0.is_empty() {
            return None;
        }
        let ms = |nanos: f64| nanos / 1e6;
        let at = |q: f64| ms(self.0.value_at_quantile(q) as f64);
        Some(Summary {
            count: self.0.len(),
            mean_ms: ms(self.0.mean()),
            stdev_ms: ms(self.0.stdev()),
            p50_ms: at(0.50),
            p90_ms: at(0.90),
            p99_ms: at(0.99),
            p999_ms: at(0.999),
            max_ms: ms(self.0.max() as f64),
        })
    }
}

/// A latency distribution in milliseconds (from an HdrHistogram, 3 significant digits).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// Number of values.
    pub count: u64,
    /// Mean.
    pub mean_ms: f64,
    /// Standard deviation.
    pub stdev_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest value.
    pub max_ms: f64,
}

/// One result row, as written to `--json`. `run` counts from 1; the row with `run` 0 and
/// `aggregate` "median" holds the median of each number over the runs of its configuration.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// `closed-loop`, `open-loop`, `postgres` or `group-commit`.
    pub scenario: String,
    /// Which store: `in-memory`, `in-memory-pathological`, `in-memory-delaying`,
    /// `postgres-group-commit`, `postgres-per-write`, `sqlite-group-commit`,
    /// `sqlite-per-write`, `pgbench-1-row`, `pgbench-100-rows`.
    pub store: String,
    /// `write-reply-ordering-groups` (0 where it does not apply, e.g. pgbench).
    pub groups: u32,
    /// Share of writes the store delayed (open loop), in percent.
    pub delay_pct: f64,
    /// The TCP fault between app and database, if any (`postgres`).
    pub fault: Option<String>,
    /// Run number from 1, or 0 for the median row.
    pub run: u32,
    /// `run` or `median`.
    pub aggregate: String,
    /// Persistent actors.
    pub actors: u64,
    /// Events persisted in the measured phase (one per ask).
    pub events: u64,
    /// Wall time of the measured phase.
    pub elapsed_s: f64,
    /// Events persisted per second in the measured phase.
    pub throughput_per_s: f64,
    /// Ask latency (from the scheduled send time in the open loop).
    pub ask: Option<Summary>,
    /// Ask latency from the actual send time (open loop): `ask` without the lateness of the
    /// clock thread and of the OS scheduler on a busy machine.
    #[serde(default)]
    pub ask_from_send: Option<Summary>,
    /// Persist latency (inside the store's `write_messages`) over the same writes.
    pub persist: Option<Summary>,
    /// Persist latency of the delayed writes alone.
    pub delayed: Option<Summary>,
    /// Ask latency of the asks whose own write was delayed.
    pub ask_delayed: Option<Summary>,
    /// Ask latency of the asks whose own write was not delayed: what other actors' slow
    /// writes cost them.
    pub ask_undelayed: Option<Summary>,
    /// Writes the store delayed among the measured ones (`postgres`: writes whose persist
    /// latency was at least the smallest injected delay).
    pub delayed_count: u64,
    /// CPU time (user + system) of the thread(s) running the configuration.
    pub cpu_s: Option<f64>,
    /// Largest number of connections to the run's database seen during the run.
    pub db_connections_max: Option<u64>,
    /// Mean number of connections to the run's database during the run.
    pub db_connections_mean: Option<f64>,
    /// Scenario-specific details (arrival period, warm-up, transactions, ...).
    pub detail: serde_json::Map<String, serde_json::Value>,
}

impl Row {
    /// A row of `scenario` on `store` with `groups` for run `run`.
    pub fn new(scenario: &str, store: &str, groups: usize, run: u32) -> Self {
        Row {
            scenario: scenario.to_owned(),
            store: store.to_owned(),
            groups: u32::try_from(groups).unwrap_or(u32::MAX),
            run,
            aggregate: "run".to_owned(),
            ..Row::default()
        }
    }

    /// Adds a scenario-specific detail.
    pub fn detail(&mut self, key: &str, value: impl Into<serde_json::Value>) {
        self.detail.insert(key.to_owned(), value.into());
    }

    /// The key rows of one configuration share (everything but the run).
    fn config_key(&self) -> (String, String, u32, String, String) {
        (
            self.scenario.clone(),
            self.store.clone(),
            self.groups,
            format!("{}", self.delay_pct),
            self.fault.clone().unwrap_or_default(),
        )
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

fn median_summary(all: &[Option<Summary>]) -> Option<Summary> {
    let present: Vec<Summary> = all.iter().flatten().copied().collect();
    if present.is_empty() {
        return None;
    }
    let m = |f: fn(&Summary) -> f64| median(present.iter().map(f).collect());
    Some(Summary {
        count: median(present.iter().map(|s| s.count as f64).collect()) as u64,
        mean_ms: m(|s| s.mean_ms),
        stdev_ms: m(|s| s.stdev_ms),
        p50_ms: m(|s| s.p50_ms),
        p90_ms: m(|s| s.p90_ms),
        p99_ms: m(|s| s.p99_ms),
        p999_ms: m(|s| s.p999_ms),
        max_ms: m(|s| s.max_ms),
    })
}

/// The median row of `runs` (rows of one configuration): each number is the median of that
/// number over the runs (so a median row's percentiles may come from different runs).
pub fn median_row(runs: &[Row]) -> Row {
    let first = runs.first().cloned().unwrap_or_default();
    let med = |f: fn(&Row) -> f64| median(runs.iter().map(f).collect());
    let opt_med = |f: fn(&Row) -> Option<f64>| {
        let values: Vec<f64> = runs.iter().filter_map(f).collect();
        (!values.is_empty()).then(|| median(values))
    };
    let sum =
        |f: fn(&Row) -> Option<Summary>| median_summary(&runs.iter().map(f).collect::<Vec<_>>());
    let mut detail = first.detail.clone();
    detail.insert("runs".to_owned(), runs.len().into());
    Row {
        run: 0,
        aggregate: "median".to_owned(),
        events: med(|r| r.events as f64) as u64,
        elapsed_s: med(|r| r.elapsed_s),
        throughput_per_s: med(|r| r.throughput_per_s),
        ask: sum(|r| r.ask),
        ask_from_send: sum(|r| r.ask_from_send),
        persist: sum(|r| r.persist),
        delayed: sum(|r| r.delayed),
        ask_delayed: sum(|r| r.ask_delayed),
        ask_undelayed: sum(|r| r.ask_undelayed),
        delayed_count: med(|r| r.delayed_count as f64) as u64,
        cpu_s: opt_med(|r| r.cpu_s),
        db_connections_max: opt_med(|r| r.db_connections_max.map(|c| c as f64)).map(|c| c as u64),
        db_connections_mean: opt_med(|r| r.db_connections_mean),
        detail,
        ..first
    }
}

/// Adds a median row after the runs of every configuration that ran more than once.
pub fn with_medians(rows: Vec<Row>) -> Vec<Row> {
    let mut keys: Vec<_> = Vec::new();
    for row in &rows {
        let key = row.config_key();
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let mut out = Vec::with_capacity(rows.len() + keys.len());
    for key in keys {
        let runs: Vec<Row> = rows
            .iter()
            .filter(|r| r.config_key() == key && r.aggregate == "run")
            .cloned()
            .collect();
        let several = runs.len() > 1;
        let median = several.then(|| median_row(&runs));
        out.extend(runs);
        out.extend(median);
    }
    out
}

/// Writes `rows` as a pretty JSON array.
///
/// # Errors
/// When the file cannot be written.
pub fn write_json(path: &Path, rows: &[Row]) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(rows).map_err(std::io::Error::other)?;
    std::fs::write(path, text)
}

/// Reads rows written by [`write_json`].
///
/// # Errors
/// When the file cannot be read or is not such a JSON array.
pub fn read_json(path: &Path) -> std::io::Result<Vec<Row>> {
    let text = std::fs::read_to_string(path)?;
    serde_json::from_str(&text).map_err(std::io::Error::other)
}

/// A latency in ms, short: `0.012`, `3.4`, `299`.
pub fn fmt_ms(ms: f64) -> String {
    if ms.is_nan() {
        "-".to_owned()
    } else if ms < 0.1 {
        format!("{ms:.3}")
    } else if ms < 10.0 {
        format!("{ms:.2}")
    } else if ms < 100.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.0}")
    }
}

fn triple(row: &Row, f: fn(&Summary) -> f64) -> String {
    let part = |s: Option<Summary>| s.map(|s| fmt_ms(f(&s))).unwrap_or_else(|| "NM".to_owned());
    format!(
        "{}/{}/{}",
        part(row.ask),
        part(row.persist),
        part(row.delayed)
    )
}

/// The markdown tables of `rows`: the seed's latency table for `open-loop` and `postgres`
/// rows (one per store and fault), a throughput table for the others.
pub fn markdown(rows: &[Row], medians_only: bool) -> String {
    let rows: Vec<Row> = rows
        .iter()
        .filter(|r| {
            !medians_only
                || r.aggregate == "median"
                || !rows
                    .iter()
                    .any(|m| m.aggregate == "median" && m.config_key() == r.config_key())
        })
        .cloned()
        .collect();
    let mut out = String::new();
    let mut sections: Vec<(String, String, Option<String>)> = Vec::new();
    for row in &rows {
        let key = (row.scenario.clone(), row.store.clone(), row.fault.clone());
        if !sections.contains(&key) {
            sections.push(key);
        }
    }
    let latency_scenarios = ["open-loop", "postgres"];
    let mut throughput_rows = Vec::new();
    for (scenario, store, fault) in sections {
        let part: Vec<Row> = rows
            .iter()
            .filter(|r| r.scenario == scenario && r.store == store && r.fault == fault)
            .cloned()
            .collect();
        if latency_scenarios.contains(&scenario.as_str()) {
            out.push_str(&format!(
                "\n{scenario}, {store}{}: ask / persist / delayed-persist latency (ms)\n\n",
                fault.map(|f| format!(", fault {f}")).unwrap_or_default()
            ));
            out.push_str(&latency_table(&part));
        } else {
            throughput_rows.extend(part);
        }
    }
    if !throughput_rows.is_empty() {
        out.push('\n');
        out.push_str(&throughput_table(&throughput_rows));
    }
    out
}

/// The seed's table: R, D%, then ask/persist/delayed-persist latency per statistic (ms), the
/// delayed count, the ask latency of undelayed writes (p99) and the throughput.
pub fn latency_table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| R | D% | run | mean | stdev | p50 | p90 | p99 | p999 | nr delayed | undelayed ask p99 | asks/s |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let run = if row.run == 0 {
            "median".to_owned()
        } else {
            row.run.to_string()
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} |\n",
            row.groups,
            row.delay_pct,
            run,
            triple(row, |s| s.mean_ms),
            triple(row, |s| s.stdev_ms),
            triple(row, |s| s.p50_ms),
            triple(row, |s| s.p90_ms),
            triple(row, |s| s.p99_ms),
            triple(row, |s| s.p999_ms),
            row.delayed_count,
            row.ask_undelayed
                .map(|s| fmt_ms(s.p99_ms))
                .unwrap_or_else(|| "-".to_owned()),
            row.throughput_per_s,
        ));
    }
    out
}

/// A throughput table: store, groups, events, seconds, events/s.
pub fn throughput_table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| store | groups | run | actors | events | seconds | events/s | CPU s |\n|---|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let run = if row.run == 0 {
            "median".to_owned()
        } else {
            row.run.to_string()
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.2} | {:.0} | {} |\n",
            row.store,
            row.groups,
            run,
            row.actors,
            row.events,
            row.elapsed_s,
            row.throughput_per_s,
            row.cpu_s
                .map(|c| format!("{c:.2}"))
                .unwrap_or_else(|| "-".to_owned()),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_three_runs_takes_the_middle_value() {
        let mut rows = Vec::new();
        for (run, throughput) in [(1, 10.0), (2, 30.0), (3, 20.0)] {
            let mut row = Row::new("open-loop", "in-memory", 4, run);
            row.throughput_per_s = throughput;
            rows.push(row);
        }
        let all = with_medians(rows);
        assert_eq!(all.len(), 4);
        assert_eq!(all[3].aggregate, "median");
        assert_eq!(all[3].throughput_per_s, 20.0);
    }

    #[test]
    fn summary_reports_milliseconds() {
        let mut h = Latencies::new();
        for ms in 1..=100 {
            h.record(Duration::from_millis(ms));
        }
        let s = h.summary().unwrap();
        assert!((s.p50_ms - 50.0).abs() < 0.1, "{s:?}");
        assert!((s.p99_ms - 99.0).abs() < 0.1, "{s:?}");
    }
}
