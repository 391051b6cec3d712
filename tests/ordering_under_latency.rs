//! O4 and O5 of `conformance/persistent-actor.md`: ordering with varying store latency, and a
//! restarted actor in another group. Time is paused: delays are virtual and exact.

mod support;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use actix_persistence::actix::Actor;
use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence::{InMemoryJournal, JournalStore, MAX_SEQ_NR};
use actix_persistence_testkit::{persistence_state_in_group, FaultyJournal};
use futures::StreamExt;
use support::*;

const SLOW: &str = "o4-slow";

/// 0-20 ms by persistence id, and 500 ms for the slow actor.
fn latency(pid: &str) -> Duration {
    if pid == SLOW {
        return Duration::from_millis(500);
    }
    let n: u64 = pid.bytes().map(u64::from).sum();
    Duration::from_millis(n % 21)
}

#[actix::test]
async fn sixteen_actors_in_four_groups_see_their_own_order_and_a_slow_one_delays_only_its_group() {
    tokio::time::pause();
    let groups = NonZeroUsize::new(4).expect("4");
    let inner = InMemoryJournal::new();
    let (faulty, faults) = FaultyJournal::new(inner.clone());
    faults.delay_writes_with(|writes| {
        latency(writes.first().map(|w| w.persistence_id()).unwrap_or(""))
    });
    let journal = JournalActor::start_with(
        Arc::new(faulty),
        JournalConfig {
            write_reply_ordering_groups: groups,
            call_timeout: Duration::from_secs(30),
            ..JournalConfig::default()
        },
    );
    let (log_tx, mut log) = tokio::sync::mpsc::unbounded_channel();
    let start = |pid: &str, group: usize| {
        Probe {
            persistence: persistence_state_in_group(&journal, pid, group, groups)
                .expect("valid id"),
            applied: Vec::new(),
            log: log_tx.clone(),
        }
        .start()
    };
    let mut actors = vec![(SLOW.to_owned(), 0, start(SLOW, 0))];
    for i in 0..15 {
        let pid = format!("o4-{i}");
        let group = (i + 1) % 4;
        actors.push((pid.clone(), group, start(&pid, group)));
    }
    let events = |pid: &str| {
        (1..=50)
            .map(|n| named(&format!("{pid}-{n}")))
            .collect::<Vec<_>>()
    };

    // The slow actor's write reaches the store first; then everyone else's.
    let slow_reply = actors[0].2.send(Persist(events(SLOW)));
    while faults.write_calls() == 0 {
        tokio::task::yield_now().await;
    }
    let replies: Vec<_> = actors[1..]
        .iter()
        .map(|(pid, _, addr)| addr.send(Persist(events(pid))))
        .collect();
    for reply in replies {
        assert_eq!(reply.await.expect("mailbox").expect("stored"), 50);
    }
    assert_eq!(slow_reply.await.expect("mailbox").expect("stored"), 50);

    // Per actor: handlers exactly 1..50 in order; the position of each handler in the log.
    let mut handlers: HashMap<String, Vec<u64>> = HashMap::new();
    let mut first_at = HashMap::new();
    let mut last_at = HashMap::new();
    let mut position = 0;
    while let Ok(seen) = log.try_recv() {
        if let Seen::Handler { pid, seq_nr, .. } = seen {
            first_at.entry(pid.clone()).or_insert(position);
            last_at.insert(pid.clone(), position);
            handlers.entry(pid).or_default().push(seq_nr);
            position += 1;
        }
    }
    for (pid, group, _) in &actors {
        assert_eq!(handlers[pid], (1..=50).collect::<Vec<_>>(), "{pid}");
        let stored: Vec<u64> = inner
            .replay_messages(pid, 1, MAX_SEQ_NR, u64::MAX)
            .map(|e| e.expect("replay").seq_nr)
            .collect()
            .await;
        assert_eq!(stored, (1..=50).collect::<Vec<_>>(), "{pid}");
        if pid == SLOW {
            continue;
        }
        if *group == 0 {
            assert!(
                first_at[pid] > last_at[SLOW],
                "{pid} shares the slow actor's group: it waits"
            );
        } else {
            assert!(
                last_at[pid] < first_at[SLOW],
                "{pid} is in group {group}: it does not wait"
            );
        }
    }
}

async fn a_restarted_actor_in_another_group_keeps_its_order_and_sequence(backend: Backend) {
    let mut h = Harness::on(backend, 2).await;
    let first = h.probe_in_group("o5", 0).await;
    let reply = first.send(Persist(vec![named("e1"), named("e2")]));
    h.control.next_write_for("o5").await.complete();
    reply.await.expect("mailbox").expect("stored");
    first.send(Stop).await.expect("mailbox");
    h.seen_so_far();

    // Outstanding writes in both groups.
    let y = h.probe_in_group("o5-y", 0).await;
    let x = h.probe_in_group("o5-x", 1).await;
    y.do_send(Persist(vec![named("y1")]));
    let write_y = h.control.next_write_for("o5-y").await;
    x.do_send(Persist(vec![named("x1")]));
    let write_x = h.control.next_write_for("o5-x").await;

    // The new incarnation lands in group 1.
    assert_eq!(
        h.seen_so_far(),
        vec![command("o5-y", 0), command("o5-x", 0)]
    );
    let again = h.probe_in_group("o5", 1).await;
    again.do_send(Persist(vec![named("e3")]));
    let write = h.control.next_write_for("o5").await;
    assert_eq!(
        write.writes()[0].lowest_seq_nr(),
        3,
        "the sequence continues"
    );
    write.complete().wait().await;
    settle().await;
    assert!(
        !h.seen_so_far().contains(&handler("o5", "e3", 3)),
        "held behind group 1's earlier write"
    );
    // Completing group 0's write does not release it; group 1's does.
    write_y.complete();
    assert_eq!(
        h.seen_until(|s| matches!(s, Seen::Handler { .. }))
            .await
            .last(),
        Some(&handler("o5-y", "y1", 1))
    );
    settle().await;
    assert!(!h
        .seen_so_far()
        .iter()
        .any(|s| matches!(s, Seen::Handler { pid, .. } if pid == "o5")));
    write_x.complete();
    let released = h
        .seen_until(|s| matches!(s, Seen::Handler { pid, .. } if pid == "o5"))
        .await;
    assert_eq!(released.first(), Some(&handler("o5-x", "x1", 1)));
    assert_eq!(released.last(), Some(&handler("o5", "e3", 3)));
}

on_every_backend!(a_restarted_actor_in_another_group_keeps_its_order_and_sequence,);
