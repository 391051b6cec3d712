//! Restarting persistent actors does not grow the process's memory: 10,000 incarnations of
//! persistent actors are started, recover, persist, and stop; resident memory after the first
//! 2,000 and after all 10,000 is printed and compared (the mission's "no memory retention
//! across restarts"). Not a timing test: it measures bytes, not seconds.

mod support;

use actix_persistence::actix::Actor;
use support::*;

/// Resident set size in bytes, from /proc (Linux); `None` elsewhere.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[actix::test]
async fn ten_thousand_restarts_do_not_grow_resident_memory() {
    let journal_actor = actix_persistence::journal::JournalActor::start_with(
        std::sync::Arc::new(actix_persistence::InMemoryJournal::new()),
        actix_persistence::journal::JournalConfig {
            write_reply_ordering_groups: std::num::NonZeroUsize::new(4).expect("4"),
            ..Default::default()
        },
    );
    let (log_tx, mut log) = tokio::sync::mpsc::unbounded_channel();
    let start = |pid: String| {
        Probe {
            persistence: actix_persistence::PersistenceState::new(journal_actor.clone(), pid)
                .expect("valid id"),
            applied: Vec::new(),
            log: log_tx.clone(),
        }
        .start()
    };
    // 100 persistence ids with 10 events each; after that the journal does not grow.
    for id in 0..100 {
        let probe = start(format!("restart-{id}"));
        let events = (0..10).map(|i| named(&format!("e{i}"))).collect();
        probe
            .send(Persist(events))
            .await
            .expect("mailbox")
            .expect("stored");
        probe.send(Stop).await.expect("mailbox");
    }
    let mut after_warm_up = None;
    for restart in 0..10_000u64 {
        let probe = start(format!("restart-{}", restart % 100));
        // Handled after recovery: the incarnation replayed its 10 events.
        let (applied, last_seq_nr) = probe.send(Inspect).await.expect("mailbox");
        assert_eq!((applied.len(), last_seq_nr), (10, 10));
        probe
            .send(Note(restart))
            .await
            .expect("mailbox")
            .expect("deferred");
        probe.send(Stop).await.expect("mailbox");
        while log.try_recv().is_ok() {}
        if restart == 1_999 {
            after_warm_up = resident_bytes();
        }
    }
    let (Some(warm), Some(end)) = (after_warm_up, resident_bytes()) else {
        eprintln!("skipped the memory comparison: /proc/self/statm is not available");
        return;
    };
    let growth = end as i64 - warm as i64;
    println!(
        "restart_memory: resident {:.1} MiB after 2,000 restarts, {:.1} MiB after 10,000 ({:+.1} MiB)",
        warm as f64 / 1048576.0,
        end as f64 / 1048576.0,
        growth as f64 / 1048576.0
    );
    // 8,000 more incarnations, each recovering 10 events: none may keep what it used. The
    // bound leaves room for allocator noise only (64 bytes per restart).
    assert!(
        growth < 512 * 1024,
        "resident memory grew by {growth} bytes"
    );
}
