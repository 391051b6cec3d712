//! The metrics of `actix_persistence::metrics`, seen by a recorder: the time a finished write
//! waits in its write-reply-ordering group, per group, and the store's persist latency.
//! Time is paused, so the waits are exact.

mod support;

use std::time::Duration;

use actix_persistence::metrics::{PERSIST_LATENCY, REPLY_ORDERING_WAIT};
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
