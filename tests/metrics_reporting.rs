//! The metrics of `actix_persistence::metrics`, seen by a recorder: the time a finished write
//! waits in its write-reply-ordering group, per group, the store's persist latency, group-commit
//! batch sizes, recovery duration, events replayed and permits waiting, and the breaker's
//! state. Time is paused where waits are measured, so they are exact.

mod support;

use std::time::Duration;

use actix_persistence::journal::{CircuitBreakerConfig, JournalActor, JournalConfig};
use actix_persistence::metrics::{
    CIRCUIT_BREAKER_STATE, GROUP_COMMIT_BATCH_SIZE, PERSIST_LATENCY, RECOVERY_DURATION,
    RECOVERY_EVENTS_REPLAYED, RECOVERY_PERMITS_WAITING, REPLY_ORDERING_WAIT,
};
use actix_persistence_testkit::ControlledJournal;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use support::*;

/// The values recorded so far for the histogram `name` with the label `key` = `value`.
fn histogram(snapshotter: &Snapshotter, name: &str, key: &str, value: &str) -> Vec<f64> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(composite, _, _, _)| {
            composite.kind() == MetricKind::Histogram
                && composite.key().name() == name
                && composite
                    .key()
                    .labels()
                    .any(|l| l.key() == key && l.value() == value)
        })
        .flat_map(|(_, _, _, recorded)| match recorded {
            DebugValue::Histogram(values) => values.into_iter().map(|v| v.into_inner()).collect(),
            _ => Vec::new(),
        })
        .collect()
}

#[actix::test]
async fn a_reply_held_behind_an_earlier_write_reports_its_wait_in_its_group() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    tokio::time::pause();

    let mut h = Harness::new(1);
    let a = h.probe_in_group("w-a", 0).await;
    let b = h.probe_in_group("w-b", 0).await;
    a.do_send(Persist(vec![named("a1")]));
    let write_a = h.control.next_write_for("w-a").await;
    b.do_send(Persist(vec![named("b1")]));
    let write_b = h.control.next_write_for("w-b").await;

    // B finishes first and waits in group 0 until A finishes 250 ms later.
    write_b.complete().wait().await;
    settle().await;
    tokio::time::advance(Duration::from_millis(250)).await;
    write_a.complete().wait().await;
    h.seen_until(|s| matches!(s, Seen::Handler { pid, .. } if pid == "w-b"))
        .await;

    let mut waits = histogram(&snapshotter, REPLY_ORDERING_WAIT, "group", "0");
    waits.sort_by(f64::total_cmp);
    assert_eq!(waits, vec![0.0, 0.25], "A released at once, B after 250 ms");
}

#[actix::test]
async fn every_store_write_reports_its_latency_under_the_store_label() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let persistence = actix_persistence::Persistence::start_from(
        actix_persistence::Settings::loader()
            .toml_str("test", "[journal]\nplugin = \"inmem\"\n")
            .env_vars([("PATH", "/bin")]),
    )
    .await
    .expect("start");
    let h = Harness::new(1);
    let probe =
        actix_persistence::actix::Actor::start(h.probe(persistence.state("lat-1").expect("id")));
    for n in 0..3 {
        let event = named(&format!("e{n}"));
        probe
            .send(Persist(vec![event]))
            .await
            .expect("mailbox")
            .expect("stored");
    }
    assert_eq!(
        histogram(&snapshotter, PERSIST_LATENCY, "store", "inmem").len(),
        3
    );
    assert!(
        persistence.health().await.is_ok(),
        "in memory is always ready"
    );
}

/// Every value recorded so far (one snapshot: the debugging recorder drains on each) for the
/// metric `name` of `kind`.
fn recorded(snapshot: &[(MetricKind, String, Vec<f64>)], kind: MetricKind, name: &str) -> Vec<f64> {
    snapshot
        .iter()
        .filter(|(k, n, _)| *k == kind && n == name)
        .flat_map(|(_, _, values)| values.iter().copied())
        .collect()
}

/// One snapshot of every metric, as (kind, name, values); a gauge has its one value.
fn take(snapshotter: &Snapshotter) -> Vec<(MetricKind, String, Vec<f64>)> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(composite, _, _, value)| {
            let values = match value {
                DebugValue::Histogram(values) => {
                    values.into_iter().map(|v| v.into_inner()).collect()
                }
                DebugValue::Gauge(value) => vec![value.into_inner()],
                DebugValue::Counter(value) => vec![value as f64],
            };
            (composite.kind(), composite.key().name().to_owned(), values)
        })
        .collect()
}

#[actix::test]
async fn sqlite_writes_and_a_recovery_report_batches_recovery_and_permits() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("events.db").display());
    let persistence = actix_persistence::Persistence::start_from(
        actix_persistence::Settings::loader()
            .toml_str("test", &format!("[journal.sqlite]\nurl = \"{url}\"\n"))
            .env_vars([("PATH", "/bin")]),
    )
    .await
    .expect("start");
    let h = Harness::new(1);
    let first =
        actix_persistence::actix::Actor::start(h.probe(persistence.state("rec-1").expect("id")));
    for n in 0..3 {
        first
            .send(Persist(vec![named(&format!("e{n}"))]))
            .await
            .expect("mailbox")
            .expect("stored");
    }
    first.send(Stop).await.expect("stopped");
    // A second incarnation replays the three events.
    let second =
        actix_persistence::actix::Actor::start(h.probe(persistence.state("rec-1").expect("id")));
    let (applied, _) = second.send(Inspect).await.expect("recovered");
    assert_eq!(applied.len(), 3);
    persistence.shutdown().await;

    let snapshot = take(&snapshotter);
    let batches = recorded(&snapshot, MetricKind::Histogram, GROUP_COMMIT_BATCH_SIZE);
    assert_eq!(
        batches.iter().sum::<f64>(),
        3.0,
        "three atomic writes committed: {batches:?}"
    );
    let mut replayed = recorded(&snapshot, MetricKind::Histogram, RECOVERY_EVENTS_REPLAYED);
    replayed.sort_by(f64::total_cmp);
    assert_eq!(replayed, vec![0.0, 3.0], "the first recovery found nothing");
    assert_eq!(
        recorded(&snapshot, MetricKind::Histogram, RECOVERY_DURATION).len(),
        2
    );
    assert_eq!(
        recorded(&snapshot, MetricKind::Gauge, RECOVERY_PERMITS_WAITING),
        vec![0.0],
        "both recoveries took a permit and none waits now"
    );
    assert_eq!(
        recorded(&snapshot, MetricKind::Gauge, CIRCUIT_BREAKER_STATE),
        vec![0.0],
        "a journal reports its closed breaker from the start"
    );
}

#[actix::test]
async fn the_breaker_state_gauge_follows_the_breaker() {
    tokio::time::pause();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let mut h = Harness::new(1);
    let (store, control) = ControlledJournal::new();
    h.journal = JournalActor::start_with(
        std::sync::Arc::new(store),
        JournalConfig {
            circuit_breaker: CircuitBreakerConfig {
                max_failures: 1,
                reset_timeout: Duration::from_secs(30),
            },
            ..JournalConfig::default()
        },
    );
    h.control = control;
    let breaker = |snapshotter: &Snapshotter| {
        recorded(&take(snapshotter), MetricKind::Gauge, CIRCUIT_BREAKER_STATE)
    };
    assert_eq!(breaker(&snapshotter), vec![0.0], "closed");

    let probe = h.probe_in_group("cb-1", 0).await;
    let reply = probe.send(Persist(vec![named("x")]));
    h.control
        .next_write_for("cb-1")
        .await
        .fail(actix_persistence::JournalError::JournalStopped);
    assert!(reply.await.expect("mailbox").is_err());
    assert_eq!(breaker(&snapshotter), vec![2.0], "open");

    tokio::time::advance(Duration::from_secs(31)).await;
    let retry = h.start_probe("cb-2", 0, |state| state);
    let reply = retry.send(Persist(vec![named("y")]));
    h.control
        .next_write_for("cb-2")
        .await
        .complete()
        .wait()
        .await;
    assert_eq!(reply.await.expect("mailbox").expect("stored"), 1);
    assert_eq!(
        breaker(&snapshotter),
        vec![0.0],
        "closed again after a successful call"
    );
}
