//! Scenarios from bug reports against other persistence libraries (Akka Persistence and its
//! plugins, cqrs-es, eventually-rs, Marten, EventStoreDB clients), on every store.

mod adversarial;

use actix_persistence::actix::{Context, Handler, MessageResult};
use actix_persistence::{
    EventSourced, Message, PersistReply, PersistResult, Persistence, PersistenceState,
    PersistentActor, Settings, Snapshotting,
};
use adversarial::*;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

// ---------------------------------------------------------------------------------------------
// A probe actor: records what it applied, persists from hooks and continuations.

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Ev(String);

struct Probe {
    persistence: PersistenceState<Self>,
    applied: Vec<(u64, String)>,
    /// Persisted from `on_recovery_completed` when set.
    on_recovered: Option<String>,
    log: mpsc::UnboundedSender<String>,
}

impl actix::Actor for Probe {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        actix_persistence::start_recovery(self, ctx);
    }
}

impl PersistentActor for Probe {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

impl EventSourced for Probe {
    type Event = Ev;
    fn apply(&mut self, event: &Ev) {
        let seq = self.last_seq_nr();
        self.applied.push((seq, event.0.clone()));
    }
    fn snapshotting() -> Option<Snapshotting<Self>> {
        Some(Snapshotting::json(
            |a: &Self| a.applied.clone(),
            |a: &mut Self, s: Vec<(u64, String)>| a.applied = s,
        ))
    }
    fn on_recovery_completed(&mut self, last: u64, ctx: &mut Context<Self>) {
        let _ = self.log.send(format!("recovered {last}"));
        if let Some(name) = self.on_recovered.take() {
            let reply = self.persist(ctx, Ev(name), |a: &mut Probe, _, _| {
                let _ = a.log.send(format!(
                    "persisted in on_recovery_completed {}",
                    a.last_seq_nr()
                ));
            });
            drop(reply);
        }
    }
    fn on_snapshot_saved(
        &mut self,
        m: &actix_persistence::snapshot::SnapshotMetadata,
        _: &mut Context<Self>,
    ) {
        let _ = self.log.send(format!("snapshot {}", m.seq_nr));
    }
    fn on_recovery_failure(
        &mut self,
        cause: &actix_persistence::RecoveryError,
        _: &mut Context<Self>,
    ) {
        let _ = self.log.send(format!("recovery failed {cause}"));
    }
}

/// (last_seq_nr, applied)
#[derive(Message)]
#[rtype(result = "(u64, Vec<(u64, String)>)")]
struct Read;
impl Handler<Read> for Probe {
    type Result = MessageResult<Read>;
    fn handle(&mut self, _: Read, _: &mut Context<Self>) -> Self::Result {
        MessageResult((self.last_seq_nr(), self.applied.clone()))
    }
}

/// Persists `outer`; its continuation persists `inner`.
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct Nested(String, String);
impl Handler<Nested> for Probe {
    type Result = PersistReply<u64>;
    fn handle(&mut self, msg: Nested, ctx: &mut Context<Self>) -> Self::Result {
        let inner = msg.1;
        self.persist(ctx, Ev(msg.0), move |a: &mut Probe, _, ctx| {
            let r = a.persist(ctx, Ev(inner), |_, _, _| ());
            drop(r);
            a.last_seq_nr()
        })
    }
}

/// persist(a), persist_all([]), persist(b): the continuations' order.
#[derive(Message)]
#[rtype(result = "PersistResult<Vec<String>>")]
struct EmptyBetween;
impl Handler<EmptyBetween> for Probe {
    type Result = PersistReply<Vec<String>>;
    fn handle(&mut self, _: EmptyBetween, ctx: &mut Context<Self>) -> Self::Result {
        let order = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let o = order.clone();
        drop(
            self.persist(ctx, Ev("a".into()), move |a: &mut Probe, _, _| {
                o.borrow_mut().push(format!("a@{}", a.last_seq_nr()))
            }),
        );
        let o = order.clone();
        drop(
            self.persist_all(ctx, Vec::new(), move |a: &mut Probe, evs: &[Ev], _| {
                o.borrow_mut()
                    .push(format!("empty@{} n={}", a.last_seq_nr(), evs.len()))
            }),
        );
        let o = order.clone();
        self.persist(ctx, Ev("b".into()), move |a: &mut Probe, _, _| {
            o.borrow_mut().push(format!("b@{}", a.last_seq_nr()));
            o.borrow().clone()
        })
    }
}

/// persist_all of no events alone: the continuation still runs (as Akka's).
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct EmptyAlone;
impl Handler<EmptyAlone> for Probe {
    type Result = PersistReply<u64>;
    fn handle(&mut self, _: EmptyAlone, ctx: &mut Context<Self>) -> Self::Result {
        self.persist_all(ctx, Vec::new(), |a: &mut Probe, _, _| a.last_seq_nr())
    }
}

/// persist(x), persist(y) in one command; the continuation of x saves a snapshot.
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct SnapInFirstOfTwo(String, String);
impl Handler<SnapInFirstOfTwo> for Probe {
    type Result = PersistReply<u64>;
    fn handle(&mut self, msg: SnapInFirstOfTwo, ctx: &mut Context<Self>) -> Self::Result {
        drop(self.persist(ctx, Ev(msg.0), |a: &mut Probe, _, ctx| a.save_snapshot(ctx)));
        self.persist(ctx, Ev(msg.1), |a: &mut Probe, _, _| a.last_seq_nr())
    }
}

struct ProbeHandle {
    addr: actix::Addr<Probe>,
    log: mpsc::UnboundedReceiver<String>,
}

impl ProbeHandle {
    async fn line(&mut self) -> String {
        within("a log line", self.log.recv())
            .await
            .expect("log sender dropped")
    }
    async fn read(&self) -> (u64, Vec<(u64, String)>) {
        within("Read", self.addr.send(Read)).await.expect("mailbox")
    }
}

fn start_probe(p: &Persistence, pid: &str, on_recovered: Option<&str>) -> ProbeHandle {
    use actix::Actor;
    let (tx, rx) = mpsc::unbounded_channel();
    let addr = Probe {
        persistence: p.state(pid).expect("valid id"),
        applied: Vec::new(),
        on_recovered: on_recovered.map(str::to_owned),
        log: tx,
    }
    .start();
    ProbeHandle { addr, log: rx }
}

fn names(v: &[(u64, String)]) -> Vec<(u64, &str)> {
    v.iter().map(|(s, n)| (*s, n.as_str())).collect()
}

// ---------------------------------------------------------------------------------------------

/// Akka: persisting in the `RecoveryCompleted` handler is allowed; the first command is
/// handled only after that event was stored and applied.
async fn a_persist_in_on_recovery_completed_is_applied_before_the_first_command(kind: Kind) {
    let b = Backend::new(kind).await;
    let p = b.open().await;
    let mut a = start_probe(&p, "Probe|rc", Some("boot-1"));
    let first = a.read().await;
    assert_eq!(a.line().await, "recovered 0");
    assert_eq!(
        first.0, 1,
        "{kind:?}: the first command sees the event of on_recovery_completed"
    );
    assert_eq!(names(&first.1), vec![(1, "boot-1")]);
    assert_eq!(a.line().await, "persisted in on_recovery_completed 1");
    drop(a);
    p.shutdown().await;
    let p = b.open().await;
    let mut a = start_probe(&p, "Probe|rc", Some("boot-2"));
    let got = a.read().await;
    assert_eq!(a.line().await, "recovered 1");
    assert_eq!(
        names(&got.1),
        vec![(1, "boot-1"), (2, "boot-2")],
        "{kind:?}"
    );
    p.shutdown().await;
}

/// Akka: a persist inside a persist handler; the next command waits for the nested one too.
async fn a_nested_persist_completes_before_the_next_command(kind: Kind) {
    let b = Backend::new(kind).await;
    let p = b.open().await;
    let mut a = start_probe(&p, "Probe|nested", None);
    let r = within("Nested", a.addr.send(Nested("o".into(), "i".into())))
        .await
        .expect("mailbox")
        .expect("stored");
    assert_eq!(a.line().await, "recovered 0");
    assert_eq!(r, 1);
    let got = a.read().await;
    assert_eq!(names(&got.1), vec![(1, "o"), (2, "i")], "{kind:?}");
    assert_eq!(got.0, 2);
    p.shutdown().await;
}

/// Akka's `persistAll(Nil)` still runs the handler (as a `defer`), in order with the others.
async fn persist_all_of_no_events_runs_its_continuation_in_order(kind: Kind) {
    let b = Backend::new(kind).await;
    let p = b.open().await;
    let mut a = start_probe(&p, "Probe|empty", None);
    let n = within("EmptyAlone", a.addr.send(EmptyAlone))
        .await
        .expect("mailbox")
        .expect("ran");
    assert_eq!(a.line().await, "recovered 0");
    assert_eq!(n, 0);
    let order = within("EmptyBetween", a.addr.send(EmptyBetween))
        .await
        .expect("mailbox")
        .expect("stored");
    assert_eq!(order, vec!["a@1", "empty@1 n=0", "b@2"], "{kind:?}");
    p.shutdown().await;
}

/// A snapshot saved by the continuation of the first of two writes of one command: it holds
/// the state after the first event, at its sequence number, so a restart replays the second.
async fn a_snapshot_from_the_first_continuation_of_a_batch_is_taken_at_its_event(kind: Kind) {
    let b = Backend::new(kind).await;
    let p = b.open().await;
    let mut a = start_probe(&p, "Probe|snapfirst", None);
    let r = within(
        "SnapInFirstOfTwo",
        a.addr.send(SnapInFirstOfTwo("x".into(), "y".into())),
    )
    .await
    .expect("mailbox")
    .expect("stored");
    assert_eq!(r, 2);
    assert_eq!(a.line().await, "recovered 0");
    assert_eq!(a.line().await, "snapshot 1", "{kind:?}");
    drop(a);
    p.shutdown().await;
    let p = b.open().await;
    let mut a = start_probe(&p, "Probe|snapfirst", None);
    let got = a.read().await;
    assert_eq!(a.line().await, "recovered 2");
    assert_eq!(names(&got.1), vec![(1, "x"), (2, "y")], "{kind:?}");
    p.shutdown().await;
}

/// Ids that differ only by case, by a trailing space or by Unicode normalization are different
/// ids on every store (MySQL-style collations, PostgreSQL CHAR columns and case-insensitive
/// LIKE matched them as one).
async fn ids_differing_by_case_or_trailing_space_are_different_ids(kind: Kind) {
    let b = Backend::new(kind).await;
    let p = b.open().await;
    let ids = [
        "Acct|x",
        "Acct|x ",
        "Acct|X",
        "Acct| x",
        "Acct|e\u{301}",
        "Acct|\u{e9}",
        "acct|x",
    ];
    for (i, id) in ids.iter().enumerate() {
        let mut a = start_acct(&p, id);
        assert_eq!(a.note().await, Note::Recovered(0), "{kind:?} {id:?}");
        for _ in 0..=i {
            a.add(&[i as i64]).await.expect("stored");
        }
    }
    for (i, id) in ids.iter().enumerate() {
        let mut a = start_acct(&p, id);
        assert_eq!(
            a.note().await,
            Note::Recovered(i as u64 + 1),
            "{kind:?} {id:?}"
        );
        assert_eq!(stored_seq_nrs(&p, id, 0, u64::MAX).await.len(), i + 1);
    }
    use futures::StreamExt;
    let q = p.query().expect("query");
    let all: Vec<String> = within(
        "ids",
        q.current_persistence_ids(None, u64::MAX)
            .map(|r| r.expect("id"))
            .collect::<Vec<_>>(),
    )
    .await;
    let mut want: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(all, want, "{kind:?}");
    p.shutdown().await;
}

on_every_store!(
    a_persist_in_on_recovery_completed_is_applied_before_the_first_command,
    a_nested_persist_completes_before_the_next_command,
    persist_all_of_no_events_runs_its_continuation_in_order,
    a_snapshot_from_the_first_continuation_of_a_batch_is_taken_at_its_event,
    ids_differing_by_case_or_trailing_space_are_different_ids,
);

// ---------------------------------------------------------------------------------------------
// Batch 2

use actix_persistence::query::Offset;
use futures::StreamExt;

async fn next_key(
    what: &str,
    s: &mut (impl futures::Stream<
        Item = Result<actix_persistence::query::RawEnvelope, actix_persistence::query::QueryError>,
    > + Unpin),
) -> (String, u64) {
    let e = within(what, s.next())
        .await
        .unwrap_or_else(|| panic!("{what}: stream ended"))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    (e.persistence_id.to_string(), e.seq_nr)
}

/// Live queries started on a journal that holds no event at all (no clock row, no tag row,
/// max(db_timestamp) NULL), then events arrive: each is delivered, in order.
async fn live_queries_started_on_an_empty_journal_deliver_what_arrives(kind: Kind) {
    let b = Backend::new(kind).await;
    let p = b.open().await;
    let q = p.query().expect("query");
    let mut by_tag = q.events_by_tag("t", Offset::NoOffset);
    let mut by_slices = q.events_by_slices("Acct", 0, 1023, Offset::NoOffset);
    let mut by_pid = q.events_by_persistence_id("Acct|e", 0, u64::MAX);
    let mut a = start_acct(&p, "Acct|e");
    assert_eq!(a.note().await, Note::Recovered(0));
    for i in 1..=3 {
        within("add", a.addr.send(Add(vec![i], vec!["t".into()])))
            .await
            .expect("mailbox")
            .expect("stored");
    }
    for i in 1..=3u64 {
        assert_eq!(
            next_key("by tag", &mut by_tag).await,
            ("Acct|e".into(), i),
            "{kind:?}"
        );
        assert_eq!(
            next_key("by slices", &mut by_slices).await,
            ("Acct|e".into(), i),
            "{kind:?}"
        );
        assert_eq!(
            next_key("by pid", &mut by_pid).await,
            ("Acct|e".into(), i),
            "{kind:?}"
        );
    }
    p.shutdown().await;
}

/// A snapshot taken before any event (at sequence number 0, as Akka allows) is loaded by the
/// next recovery, and the sequence goes on at 1.
async fn a_snapshot_at_seq_nr_0_is_recovered(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Acct|snap0";
    let p = b.open().await;
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    a.addr.do_send(Snap);
    assert_eq!(a.note().await, Note::SnapshotSaved(0), "{kind:?}");
    drop(a);
    p.shutdown().await;
    let p = b.open().await;
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0), "{kind:?}");
    assert_eq!(a.add(&[7]).await.expect("stored"), (1, 7));
    drop(a);
    p.shutdown().await;
    let p = b.open().await;
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(1), "{kind:?}");
    assert_eq!(a.get().await.1.applied, vec![(1, 7)]);
    p.shutdown().await;
}

/// Snapshots of ids that differ by case or a trailing space are each their own.
async fn snapshots_of_ids_differing_by_case_or_trailing_space_are_their_own(kind: Kind) {
    let b = Backend::new(kind).await;
    let p = b.open().await;
    let ids = ["Acct|s", "Acct|s ", "Acct|S"];
    for (i, id) in ids.iter().enumerate() {
        let mut a = start_acct(&p, id);
        assert_eq!(a.note().await, Note::Recovered(0));
        for _ in 0..=i {
            a.add(&[10 + i as i64]).await.expect("stored");
        }
        a.addr.do_send(Snap);
        assert_eq!(
            a.note().await,
            Note::SnapshotSaved(i as u64 + 1),
            "{kind:?} {id:?}"
        );
        a.addr.do_send(DeleteTo(u64::MAX));
        assert_eq!(a.note().await, Note::Deleted(u64::MAX));
    }
    for (i, id) in ids.iter().enumerate() {
        let mut a = start_acct(&p, id);
        assert_eq!(
            a.note().await,
            Note::Recovered(i as u64 + 1),
            "{kind:?} {id:?}"
        );
        assert_eq!(a.get().await.1.total, (10 + i as i64) * (i as i64 + 1));
    }
    p.shutdown().await;
}

/// Queries by persistence id at the limits of the sequence numbers: empty, no error.
async fn queries_by_persistence_id_at_the_seq_nr_limits_are_empty_not_errors(kind: Kind) {
    let b = Backend::new(kind).await;
    let p = b.open().await;
    let pid = "Acct|lim";
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    a.add(&[1, 2, 3]).await.expect("stored");
    for (from, to, want) in [
        (0u64, 0u64, vec![]),
        (0, u64::MAX, vec![1u64, 2, 3]),
        (3, u64::MAX, vec![3]),
        (u64::MAX, u64::MAX, vec![]),
        (i64::MAX as u64, u64::MAX, vec![]),
        (i64::MAX as u64 + 1, u64::MAX, vec![]),
        (0, i64::MAX as u64 + 1, vec![1, 2, 3]),
        (2, 1, vec![]),
    ] {
        assert_eq!(
            stored_seq_nrs(&p, pid, from, to).await,
            want,
            "{kind:?}: ({from}, {to})"
        );
    }
    p.shutdown().await;
}

on_every_store!(
    live_queries_started_on_an_empty_journal_deliver_what_arrives,
    a_snapshot_at_seq_nr_0_is_recovered,
    snapshots_of_ids_differing_by_case_or_trailing_space_are_their_own,
    queries_by_persistence_id_at_the_seq_nr_limits_are_empty_not_errors,
);

// ---------------------------------------------------------------------------------------------
// Batch 3: settings at their extremes

/// Every duration setting at a value humantime accepts but `Instant::now() + d` overflows
/// (HOCON users write "365d" or larger for "never"): startup, a persist, a recovery, a
/// snapshot and a live query work; no panic on an Instant overflow anywhere. Found: on
/// PostgreSQL `journal.postgres.acquire-timeout` is handed to sqlx unclamped, whose
/// `PoolOptions::connect_with` computes `Instant::now() + acquire_timeout` and panics
/// ("overflow when adding duration to instant") inside `Persistence::start_with`.
async fn huge_durations_start_and_run(kind: Kind) {
    let huge = "400000000000y";
    assert!(humantime_ok(huge));
    let mut b = Backend::new(kind).await;
    for key in [
        "ACTIX_PERSISTENCE__JOURNAL__RECOVERY_TIMEOUT",
        "ACTIX_PERSISTENCE__JOURNAL__CIRCUIT_BREAKER__CALL_TIMEOUT",
        "ACTIX_PERSISTENCE__JOURNAL__CIRCUIT_BREAKER__RESET_TIMEOUT",
        "ACTIX_PERSISTENCE__JOURNAL__SQLITE__BUSY_TIMEOUT",
        "ACTIX_PERSISTENCE__JOURNAL__POSTGRES__ACQUIRE_TIMEOUT",
        "ACTIX_PERSISTENCE__JOURNAL__POSTGRES__STATEMENT_TIMEOUT",
        "ACTIX_PERSISTENCE__SNAPSHOT_STORE__CALL_TIMEOUT",
        "ACTIX_PERSISTENCE__QUERY__LATE_COMMIT_WINDOW",
    ] {
        b = b.with_env(key, huge);
    }
    let p = b.open().await;
    let mut a = start_acct(&p, "Acct|huge");
    assert_eq!(a.note().await, Note::Recovered(0), "{kind:?}");
    within("add", a.addr.send(Add(vec![1, 2], vec!["t".into()])))
        .await
        .expect("mailbox")
        .expect("stored");
    a.addr.do_send(Snap);
    assert_eq!(a.note().await, Note::SnapshotSaved(2), "{kind:?}");
    let q = p.query().expect("query");
    let mut live = q.events_by_tag("t", Offset::NoOffset);
    assert_eq!(next_key("live", &mut live).await, ("Acct|huge".into(), 1));
    drop(a);
    let mut a = start_acct(&p, "Acct|huge");
    assert_eq!(a.note().await, Note::Recovered(2), "{kind:?}");
    p.shutdown().await;
}

fn humantime_ok(s: &str) -> bool {
    actix_persistence::Settings::loader()
        .toml_str(
            "t",
            &format!("[journal]\nplugin = \"inmem\"\nrecovery-timeout = \"{s}\"\n"),
        )
        .load()
        .is_ok()
}

/// The refresh interval at its extreme: a live query still delivers what is stored.
async fn a_huge_refresh_interval_still_catches_up(kind: Kind) {
    let b = Backend::new(kind).await.with_env(
        "ACTIX_PERSISTENCE__QUERY__REFRESH_INTERVAL",
        "400000000000y",
    );
    let p = b.open().await;
    let mut a = start_acct(&p, "Acct|refresh");
    assert_eq!(a.note().await, Note::Recovered(0));
    a.add(&[1]).await.expect("stored");
    let q = p.query().expect("query");
    let mut live = q.events_by_slices("Acct", 0, 1023, Offset::NoOffset);
    assert_eq!(
        next_key("live", &mut live).await,
        ("Acct|refresh".into(), 1),
        "{kind:?}"
    );
    p.shutdown().await;
}

on_every_store!(
    huge_durations_start_and_run,
    a_huge_refresh_interval_still_catches_up
);

/// Every count setting at the largest value validation accepts (but the group count and the
/// connection counts, see the tests below and `adversarial_max_connections.rs`): startup, persists, a replay
/// over several events, snapshots, queries (current and live) all work, no overflow panic or
/// allocation of the configured size.
async fn counts_at_their_maximum_start_and_run(kind: Kind) {
    let usize_max = usize::MAX.to_string();
    let u32_max = u32::MAX.to_string();
    let b = Backend::new(kind)
        .await
        .with_env("ACTIX_PERSISTENCE__JOURNAL__REPLAY_BATCH_SIZE", &usize_max)
        .with_env("ACTIX_PERSISTENCE__JOURNAL__MAX_BATCH_SIZE", &u32_max)
        .with_env(
            "ACTIX_PERSISTENCE__JOURNAL__MAX_CONCURRENT_RECOVERIES",
            &usize_max,
        )
        .with_env(
            "ACTIX_PERSISTENCE__JOURNAL__CIRCUIT_BREAKER__MAX_FAILURES",
            &u32_max,
        )
        .with_env("ACTIX_PERSISTENCE__QUERY__PAGE_SIZE", &u32_max);
    let p = b.open().await;
    let mut a = start_acct(&p, "Acct|max");
    assert_eq!(a.note().await, Note::Recovered(0), "{kind:?}");
    within("add", a.addr.send(Add(vec![1, 2, 3], vec!["t".into()])))
        .await
        .expect("mailbox")
        .expect("stored");
    drop(a);
    let mut a = start_acct(&p, "Acct|max");
    assert_eq!(a.note().await, Note::Recovered(3), "{kind:?}");
    assert_eq!(a.get().await.1.total, 6);
    assert_eq!(
        stored_seq_nrs(&p, "Acct|max", 0, u64::MAX).await,
        vec![1, 2, 3]
    );
    let q = p.query().expect("query");
    let cur: Vec<u64> = within(
        "by tag",
        q.current_events_by_tag("t", Offset::NoOffset)
            .map(|e| e.expect("envelope").seq_nr)
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(cur, vec![1, 2, 3], "{kind:?}");
    let mut live = q.events_by_slices("Acct", 0, 1023, Offset::NoOffset);
    assert_eq!(next_key("live", &mut live).await, ("Acct|max".into(), 1));
    p.shutdown().await;
}

on_every_store!(counts_at_their_maximum_start_and_run);

/// `write-reply-ordering-groups` at its ceiling, with its limit raised to it: a working
/// journal. Before the ceiling, validation accepted `usize::MAX` for both, and the journal
/// actor, starting one resequencer per group, panicked ("capacity overflow") while
/// `Persistence::start_with` returned `Ok`; every recovery then failed with `JournalStopped`.
#[actix::test]
async fn the_group_ceiling_gives_a_working_journal() {
    let ceiling = actix_persistence::config::MAX_WRITE_REPLY_ORDERING_GROUPS.to_string();
    let b = Backend::new(Kind::InMemory)
        .await
        .with_env(
            "ACTIX_PERSISTENCE__JOURNAL__MAX_WRITE_REPLY_ORDERING_GROUPS",
            &ceiling,
        )
        .with_env(
            "ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS",
            &ceiling,
        );
    let p = b.open().await;
    assert_eq!(
        p.settings().journal.write_reply_ordering_groups.get(),
        65_536
    );
    let mut a = start_acct(&p, "Acct|groups");
    assert_eq!(a.note().await, Note::Recovered(0));
    assert_eq!(a.add(&[1]).await.expect("stored"), (1, 1));
    p.shutdown().await;
}

/// One group above the ceiling, or a pool above its ceiling, fails startup with an error that
/// names the setting, the value and where it came from (before, `usize::MAX` groups started a
/// dead journal, and `u32::MAX` connections aborted the process: sqlx takes room for every
/// connection of a pool when it builds it).
#[actix::test]
async fn counts_above_their_ceiling_fail_startup_naming_the_setting() {
    for (var, setting, value) in [
        (
            "ACTIX_PERSISTENCE__JOURNAL__MAX_WRITE_REPLY_ORDERING_GROUPS",
            "journal.max-write-reply-ordering-groups",
            "65537",
        ),
        (
            "ACTIX_PERSISTENCE__JOURNAL__SQLITE__MAX_CONNECTIONS",
            "journal.sqlite.max-connections",
            "10001",
        ),
        (
            "ACTIX_PERSISTENCE__JOURNAL__POSTGRES__MAX_CONNECTIONS",
            "journal.postgres.max-connections",
            "4294967295",
        ),
    ] {
        let err = match Settings::loader().env_vars([(var, value)]).load() {
            Err(err) => err,
            Ok(_) => panic!("{setting} = {value} was accepted"),
        };
        assert_eq!(err.problems.len(), 1, "{err}");
        let problem = &err.problems[0];
        assert_eq!(problem.setting, setting, "{err}");
        // As the text the environment gave (a string).
        assert_eq!(problem.value, format!("{value:?}"), "{err}");
        assert_eq!(
            problem.source,
            actix_persistence::config::ConfigSource::Env(var.to_owned()),
            "{err}"
        );
        assert!(err.to_string().contains(setting), "{err}");
    }
}

/// After `shutdown`, an actor still running gets an error for its next persist (its write
/// fails), never a hang; a new actor's recovery fails, never hangs; a live query ends or
/// errors, never hangs.
async fn after_shutdown_writes_recoveries_and_queries_fail_instead_of_hanging(kind: Kind) {
    let b = Backend::new(kind).await;
    let p = b.open().await;
    let mut a = start_acct(&p, "Acct|shut");
    assert_eq!(a.note().await, Note::Recovered(0));
    a.add(&[1]).await.expect("stored");
    let q = p.query().expect("query");
    let mut live = q.events_by_slices("Acct", 0, 1023, Offset::NoOffset);
    assert_eq!(next_key("live", &mut live).await, ("Acct|shut".into(), 1));
    within("shutdown", p.shutdown()).await;
    let after = a.add(&[2]).await;
    if kind != Kind::InMemory {
        assert!(after.is_err(), "{kind:?}: {after:?}");
    }
    let mut c = start_acct(&p, "Acct|shut2");
    let note = c.note().await;
    if kind != Kind::InMemory {
        assert!(
            matches!(note, Note::RecoveryFailed(_)),
            "{kind:?}: {note:?}"
        );
    }
    if kind != Kind::InMemory {
        let _ = within("live after shutdown", live.next()).await;
    }
}

on_every_store!(after_shutdown_writes_recoveries_and_queries_fail_instead_of_hanging);

/// `#[derive(PersistentActor)]` on a generic actor with a where clause (derive crates often
/// drop the generics or the where clause).
mod generic_derive {
    use actix_persistence::{EventSourced, PersistenceState, PersistentActor};
    use std::marker::PhantomData;

    #[derive(PersistentActor)]
    pub struct Gen<T>
    where
        T: Unpin + 'static,
    {
        persistence: PersistenceState<Self>,
        pub n: u64,
        _t: PhantomData<T>,
    }

    impl<T: Unpin + 'static> EventSourced for Gen<T> {
        type Event = u64;
        fn apply(&mut self, e: &u64) {
            self.n += e;
        }
    }

    #[actix::test]
    async fn a_generic_actor_recovers() {
        let p = actix_persistence::Persistence::start_from(
            actix_persistence::Settings::loader().toml_str("t", "[journal]\nplugin = \"inmem\"\n"),
        )
        .await
        .expect("start");
        let addr = Gen::<String> {
            persistence: p.state("Gen|1").expect("id"),
            n: 0,
            _t: PhantomData,
        }
        .start_persistent();
        drop(addr);
    }
}

/// The ceilings the configuration enforces are the ones the crates that hold them apply.
#[test]
fn the_ceilings_agree_across_crates() {
    assert_eq!(
        actix_persistence::config::MAX_WRITE_REPLY_ORDERING_GROUPS,
        actix_persistence::journal::MAX_WRITE_REPLY_ORDERING_GROUPS
    );
    assert_eq!(
        actix_persistence::config::MAX_POOL_CONNECTIONS,
        actix_persistence_sql::MAX_POOL_CONNECTIONS
    );
    assert_eq!(
        actix_persistence::config::MAX_READ_AHEAD_PAGES,
        actix_persistence::query::QuerySettings::MAX_READ_AHEAD_PAGES
    );
}

/// Settings built in code above a ceiling are refused by `validate` (and so by
/// `Persistence::start_with`), naming the setting and the value.
#[test]
fn settings_built_in_code_above_a_ceiling_are_refused() {
    use std::num::{NonZeroU32, NonZeroUsize};
    let mut settings = Settings::reference();
    settings.journal.max_write_reply_ordering_groups = NonZeroUsize::MAX;
    settings.journal.sqlite.max_connections = NonZeroU32::MAX;
    settings.journal.postgres.max_connections = NonZeroU32::new(10_001).expect("not 0");
    let err = settings.validate().expect_err("above the ceilings");
    let named: Vec<(&str, &str)> = err
        .problems
        .iter()
        .map(|p| (p.setting.as_str(), p.value.as_str()))
        .collect();
    let usize_max = usize::MAX.to_string();
    let u32_max = u32::MAX.to_string();
    assert_eq!(
        named,
        vec![
            (
                "journal.max-write-reply-ordering-groups",
                usize_max.as_str()
            ),
            ("journal.sqlite.max-connections", u32_max.as_str()),
            ("journal.postgres.max-connections", "10001"),
        ]
    );
}
