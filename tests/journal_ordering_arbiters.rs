//! Write-reply ordering (O1, O2 of `conformance/persistent-actor.md`) with the persistent actors
//! on arbiters (threads) of their own and the journal actor with its resequencers on another,
//! as an Actix app with one arbiter per core runs them. Writes complete only when the test says
//! so.

mod support;

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use actix_persistence::actix::{Actor, Addr, Arbiter, ArbiterHandle, Context, Handler, Message};
use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence_testkit::{persistence_state_in_group, ControlledJournal, WriteController};
use support::*;
use tokio::sync::mpsc;

/// A controlled journal on an arbiter of its own, and two more arbiters for actors.
struct Threads {
    journal: Addr<JournalActor>,
    journal_arbiter: Arbiter,
    actor_arbiters: [Arbiter; 2],
    control: WriteController,
    groups: NonZeroUsize,
    log_tx: mpsc::UnboundedSender<Seen>,
    log: mpsc::UnboundedReceiver<Seen>,
}

impl Threads {
    fn new(groups: usize) -> Self {
        let groups = NonZeroUsize::new(groups).expect("a test uses at least one group");
        let (store, control) = ControlledJournal::new();
        let journal_arbiter = Arbiter::new();
        let journal = JournalActor::start_on(
            &journal_arbiter.handle(),
            Arc::new(store),
            JournalConfig {
                write_reply_ordering_groups: groups,
                call_timeout: Duration::from_secs(30),
                ..JournalConfig::default()
            },
        );
        let (log_tx, log) = mpsc::unbounded_channel();
        Threads {
            journal,
            journal_arbiter,
            actor_arbiters: [Arbiter::new(), Arbiter::new()],
            control,
            groups,
            log_tx,
            log,
        }
    }

    /// Starts a probe in `group` on actor arbiter `arbiter` (0 or 1).
    fn probe_on(&self, arbiter: usize, pid: &str, group: usize) -> Addr<Probe> {
        let (journal, pid, groups, log) = (
            self.journal.clone(),
            pid.to_owned(),
            self.groups,
            self.log_tx.clone(),
        );
        Probe::start_in_arbiter(&self.actor_arbiters[arbiter].handle(), move |_| Probe {
            persistence: persistence_state_in_group(&journal, &pid, group, groups)
                .expect("valid persistence id"),
            applied: Vec::new(),
            log,
        })
    }

    async fn next_seen(&mut self) -> Seen {
        match tokio::time::timeout(Duration::from_secs(10), self.log.recv()).await {
            Ok(Some(seen)) => seen,
            Ok(None) => panic!("every probe is gone"),
            Err(_) => panic!("no probe reported anything within 10 s"),
        }
    }

    /// The next `n` things probes saw, sorted: actors on different threads report in no
    /// fixed order between them.
    async fn next_seen_sorted(&mut self, n: usize) -> Vec<String> {
        let mut seen = Vec::with_capacity(n);
        for _ in 0..n {
            seen.push(format!("{:?}", self.next_seen().await));
        }
        seen.sort();
        seen
    }

    /// Lets what is ready on the journal's arbiter, then on the actors' arbiters, run first
    /// (see [`settle_on`]).
    async fn settle(&self) {
        settle_on(&self.journal_arbiter.handle()).await;
        for arbiter in &self.actor_arbiters {
            settle_on(&arbiter.handle()).await;
        }
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        self.journal_arbiter.stop();
        for arbiter in &self.actor_arbiters {
            arbiter.stop();
        }
    }
}

/// Round trips through a fresh actor on `arbiter`, queued behind every task already woken
/// there (an arbiter runs its tasks in the order they were woken).
async fn settle_on(arbiter: &ArbiterHandle) {
    struct Echo;
    impl Actor for Echo {
        type Context = Context<Self>;
    }
    struct Ping;
    impl Message for Ping {
        type Result = ();
    }
    impl Handler<Ping> for Echo {
        type Result = ();
        fn handle(&mut self, _: Ping, _: &mut Context<Self>) {}
    }
    let echo = Echo::start_in_arbiter(arbiter, |_| Echo);
    for _ in 0..3 {
        let _ = echo.send(Ping).await;
    }
}

fn recovered(pid: &str) -> String {
    format!(
        "{:?}",
        Seen::Recovered {
            pid: pid.to_owned(),
            last_seq_nr: 0,
            replayed: Vec::new(),
        }
    )
}

#[actix::test]
async fn reply_in_another_group_is_delivered_while_an_earlier_write_from_another_arbiter_is_outstanding(
) {
    let mut t = Threads::new(2);
    let a = t.probe_on(0, "oa1-a", 0);
    let b = t.probe_on(1, "oa1-b", 1);
    assert_eq!(
        t.next_seen_sorted(2).await,
        vec![recovered("oa1-a"), recovered("oa1-b")]
    );

    a.do_send(Persist(vec![named("a1")]));
    let write_a = t.control.next_write_for("oa1-a").await;
    assert_eq!(t.next_seen().await, command("oa1-a", 0));
    b.do_send(Persist(vec![named("b1")]));
    let write_b = t.control.next_write_for("oa1-b").await;
    assert_eq!(t.next_seen().await, command("oa1-b", 0));

    write_b.complete();
    // B's continuation runs on its thread although A's earlier write is still at the store.
    assert_eq!(t.next_seen().await, handler("oa1-b", "b1", 1));
    write_a.complete();
    assert_eq!(t.next_seen().await, handler("oa1-a", "a1", 1));
}

#[actix::test]
async fn reply_in_the_same_group_waits_for_an_earlier_write_from_another_arbiter() {
    let mut t = Threads::new(1);
    let a = t.probe_on(0, "oa2-a", 0);
    let b = t.probe_on(1, "oa2-b", 0);
    assert_eq!(
        t.next_seen_sorted(2).await,
        vec![recovered("oa2-a"), recovered("oa2-b")]
    );

    a.do_send(Persist(vec![named("a1")]));
    let write_a = t.control.next_write_for("oa2-a").await;
    assert_eq!(t.next_seen().await, command("oa2-a", 0));
    b.do_send(Persist(vec![named("b1")]));
    let write_b = t.control.next_write_for("oa2-b").await;
    assert_eq!(t.next_seen().await, command("oa2-b", 0));

    // B's write is stored and its reply is with the resequencer, behind A's write.
    write_b.complete().wait().await;
    t.settle().await;
    assert!(
        t.log.try_recv().is_err(),
        "B's handler must wait for A's earlier write"
    );

    write_a.complete();
    assert_eq!(
        t.next_seen_sorted(2).await,
        vec![
            format!("{:?}", handler("oa2-a", "a1", 1)),
            format!("{:?}", handler("oa2-b", "b1", 1))
        ]
    );
}
