//! The read side through the facade and the projection runner, on every store: persistence
//! queries paged 1 to 3 envelopes at a time over events that share a database timestamp,
//! resumed from every offset, racing writers, over odd ids and tags; projections crashed by
//! dropping their whole runtime (a process kill, not `abort()`) inside a handler's transaction
//! and restarted in a new runtime over new pools on the same database.

mod adversarial;

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_persistence::projection::{
    Handler, HandlerError, InMemoryOffsetStore, InMemoryTransaction, PostgresOffsetStore,
    Projection, ProjectionId, ProjectionState, QuerySource, SaveOffset, SqliteOffsetStore,
    TransactionalHandler,
};
use actix_persistence::query::{
    slice_for_persistence_id, EventEnvelope, Offset, QuerySettings, ReadJournal,
};
use actix_persistence::{
    Persistence, PostgresJournal, PostgresJournalOptions, SqliteJournal, SqliteJournalOptions,
};
use adversarial::*;
use async_trait::async_trait;
use futures::{Stream, StreamExt};
use sqlx::{Postgres, Sqlite, Transaction};

// ---------------------------------------------------------------------------------------------
// Persistence queries

/// An envelope with its event serialized.
type Raw = EventEnvelope;

/// Every envelope of a current query.
async fn collect(
    what: &str,
    s: impl Stream<Item = Result<Raw, actix_persistence::QueryError>>,
) -> Vec<Raw> {
    within(what, s.map(|e| e.expect(what)).collect::<Vec<_>>()).await
}

/// (persistence id, seq_nr) of each envelope.
fn keys(v: &[Raw]) -> Vec<(String, u64)> {
    v.iter()
        .map(|e| (e.persistence_id.to_string(), e.seq_nr))
        .collect()
}

/// Asserts that no envelope came twice and each id's came in seq_nr order.
fn assert_once_in_order(what: &str, v: &[Raw]) {
    let mut seen = HashSet::new();
    let mut last: HashMap<String, u64> = HashMap::new();
    for e in v {
        let k = (e.persistence_id.to_string(), e.seq_nr);
        assert!(seen.insert(k.clone()), "{what}: {k:?} delivered twice");
        let prev = last.insert(k.0.clone(), k.1).unwrap_or(0);
        assert!(k.1 > prev, "{what}: {k:?} after seq_nr {prev}");
    }
}

/// `o` serialized and read back, as an offset store keeps it.
fn roundtrip(o: &Offset) -> Offset {
    serde_json::from_str(&serde_json::to_string(o).expect("ser")).expect("de")
}

/// A database of `kind` and a `Persistence` over it whose queries read pages of `page`
/// envelopes (as an environment variable string) and look back `window` for late commits.
async fn open_with_page(kind: Kind, page: &str, window: &str) -> (Backend, Persistence) {
    let b = Backend::new(kind)
        .await
        .with_env("ACTIX_PERSISTENCE__QUERY__PAGE_SIZE", page)
        .with_env("ACTIX_PERSISTENCE__QUERY__LATE_COMMIT_WINDOW", window)
        .with_env("ACTIX_PERSISTENCE__QUERY__REFRESH_INTERVAL", "50ms");
    let p = b.open().await;
    (b, p)
}

/// Three ids persisting 7, 5 and 1 events as one atomic write each (one statement: one
/// database timestamp), then one more each; for pages of 1, 2 and 3 (so pages split the
/// envelopes of one timestamp), with and without the late-commit window: a current query by
/// slices and by tag delivers every event once, each id in order, and a current or live query
/// resumed from any envelope's offset (serialized and read back) delivers exactly the rest.
async fn resuming_from_any_offset_delivers_exactly_the_rest_when_pages_split_one_timestamp(
    kind: Kind,
) {
    for (page, window) in [("1", "2s"), (" 2 ", "2s"), ("3", "1ms"), ("2", "1ms")] {
        resume_from_every_offset(kind, page, window).await;
    }
}

async fn resume_from_every_offset(kind: Kind, page: &str, window: &str) {
    let (_b, p) = open_with_page(kind, page, window).await;
    let tags = vec!["t".to_string()];
    let ids = ["Acct|a", "Acct|b", "Acct|c"];
    let mut actors = Vec::new();
    for id in ids {
        let mut a = start_acct(&p, id);
        assert_eq!(a.note().await, Note::Recovered(0));
        actors.push(a);
    }
    // Interleaved: a's 7 in one write, b's 5, c's 1, then singles.
    let r = |x: actix_persistence::PersistResult<(u64, i64)>| x.expect("stored");
    let (a, b, c) = (&actors[0], &actors[1], &actors[2]);
    let fa = a.addr.send(AddAll((1..=7).collect(), tags.clone()));
    let fb = b.addr.send(AddAll((1..=5).collect(), tags.clone()));
    let fc = c.addr.send(AddAll(vec![1], tags.clone()));
    let (ra, rb, rc) = within("writes", futures::future::join3(fa, fb, fc)).await;
    assert_eq!(r(ra.expect("mailbox")).0, 7);
    assert_eq!(r(rb.expect("mailbox")).0, 5);
    assert_eq!(r(rc.expect("mailbox")).0, 1);
    for act in &actors {
        within("add", act.addr.send(Add(vec![100], tags.clone())))
            .await
            .expect("mailbox")
            .expect("stored");
    }
    let total = 7 + 5 + 1 + 3;
    let q = p.query().expect("query");

    for by_tag in [false, true] {
        let what = format!("{kind:?} page {page} window {window} by_tag {by_tag}");
        let open = |q: &ReadJournal, o: Offset| {
            if by_tag {
                q.current_events_by_tag("t", o)
            } else {
                q.current_events_by_slices("Acct", 0, 1023, o)
            }
        };
        let all = collect(&what, open(&q, Offset::NoOffset)).await;
        assert_eq!(all.len(), total, "{what}: {:?}", keys(&all));
        assert_once_in_order(&what, &all);
        for i in 0..all.len() {
            let rest = collect(&what, open(&q, roundtrip(&all[i].offset))).await;
            assert_eq!(
                keys(&rest),
                keys(&all[i + 1..]),
                "{what}: resumed after element {i} ({:?})",
                keys(&all[i..=i])
            );
        }
        // Live, resumed from each offset: delivers exactly the rest (then we stop pulling).
        for i in [0, all.len() / 2, all.len() - 2] {
            let mut live = if by_tag {
                q.events_by_tag("t", roundtrip(&all[i].offset))
            } else {
                q.events_by_slices("Acct", 0, 1023, roundtrip(&all[i].offset))
            };
            let want = all.len() - i - 1;
            let mut got = Vec::new();
            while got.len() < want {
                got.push(
                    within(&what, live.next())
                        .await
                        .expect("live ended")
                        .expect("live"),
                );
            }
            assert_eq!(
                keys(&got),
                keys(&all[i + 1..]),
                "{what}: live resumed after {i}"
            );
        }
    }
    p.shutdown().await;
}

/// Current queries by slices and by tag started again and again while four writers persist 60
/// events each: each query ends, delivers no event twice, each id in order from 1 without a
/// hole, and at least every event acknowledged before it started.
async fn a_current_query_racing_writers_delivers_what_was_acknowledged_before_it_once_in_order(
    kind: Kind,
) {
    let (_b, p) = open_with_page(kind, "3", "2s").await;
    let mut writers = Vec::new();
    for i in 0..4 {
        let mut a = start_acct(&p, &format!("Acct|w{i}"));
        assert_eq!(a.note().await, Note::Recovered(0));
        writers.push(a);
    }
    let acked: Rc<Vec<Cell<u64>>> = Rc::new((0..4).map(|_| Cell::new(0)).collect());
    let mut tasks = Vec::new();
    for (i, w) in writers.iter().enumerate() {
        let addr = w.addr.clone();
        let acked = Rc::clone(&acked);
        tasks.push(actix::spawn(async move {
            for n in 0..60 {
                let (seq, _) = addr
                    .send(Add(vec![n], vec!["w".into()]))
                    .await
                    .expect("mailbox")
                    .expect("stored");
                acked[i].set(seq);
            }
        }));
    }
    let q = p.query().expect("query");
    let mut rounds = 0;
    loop {
        // Let the writers make progress between rounds.
        tokio::task::yield_now().await;
        let before: Vec<u64> = acked.iter().map(Cell::get).collect();
        for by_tag in [false, true] {
            let what = format!("{kind:?} round {rounds} by_tag {by_tag}");
            let s = if by_tag {
                q.current_events_by_tag("w", Offset::NoOffset)
            } else {
                q.current_events_by_slices("Acct", 0, 1023, Offset::NoOffset)
            };
            let got = collect(&what, s).await;
            assert_once_in_order(&what, &got);
            let mut max: HashMap<String, u64> = HashMap::new();
            for e in &got {
                max.insert(e.persistence_id.to_string(), e.seq_nr);
            }
            for (i, b) in before.iter().enumerate() {
                let have = max.get(&format!("Acct|w{i}")).copied().unwrap_or(0);
                assert!(
                    have >= *b,
                    "{what}: w{i} acknowledged up to {b} before the query started, query delivered up to {have}"
                );
                // Ids in order, so delivering up to `have` means 1..=have.
                let n = got
                    .iter()
                    .filter(|e| *e.persistence_id == *format!("Acct|w{i}"))
                    .count();
                assert_eq!(n as u64, have, "{what}: w{i} has holes");
            }
        }
        rounds += 1;
        if acked.iter().all(|c| c.get() == 60) {
            break;
        }
    }
    for t in tasks {
        t.await.expect("writer");
    }
    p.shutdown().await;
}

/// A live query by slices and one by tag, opened before 25 writers persist 16 events each
/// concurrently (on PostgreSQL: group commits, several transactions at once): each delivers
/// every event once, each id in order, and then exactly the next event written.
async fn live_queries_over_concurrent_writers_deliver_every_event_once_in_order(kind: Kind) {
    let (_b, p) = open_with_page(kind, "3", "2s").await;
    let q = p.query().expect("query");
    let mut live_slices = q.events_by_slices("Acct", 0, 1023, Offset::NoOffset);
    let mut live_tag = q.events_by_tag("many", Offset::NoOffset);
    let mut writers = Vec::new();
    for i in 0..25 {
        let a = start_acct(&p, &format!("Acct|m{i}"));
        writers.push(a);
    }
    let mut tasks = Vec::new();
    for w in &writers {
        let addr = w.addr.clone();
        tasks.push(actix::spawn(async move {
            for n in 0..16 {
                addr.send(Add(vec![n], vec!["many".into(), format!("x{n}")]))
                    .await
                    .expect("mailbox")
                    .expect("stored");
            }
        }));
    }
    let want = 25 * 16;
    let mut got_s = Vec::new();
    let mut got_t = Vec::new();
    while got_s.len() < want {
        got_s.push(
            within("live slices", live_slices.next())
                .await
                .expect("ended")
                .expect("ok"),
        );
    }
    while got_t.len() < want {
        got_t.push(
            within("live tag", live_tag.next())
                .await
                .expect("ended")
                .expect("ok"),
        );
    }
    assert_once_in_order("live slices", &got_s);
    assert_once_in_order("live tag", &got_t);
    for t in tasks {
        t.await.expect("writer");
    }
    // Nothing more came: the next envelope of each is the next event written.
    let mut after = start_acct(&p, "Acct|after");
    assert_eq!(after.note().await, Note::Recovered(0));
    let next = after.addr.send(Add(vec![1], vec!["many".into()]));
    within("the next write", next)
        .await
        .expect("mailbox")
        .expect("stored");
    for (what, live) in [
        ("live slices", &mut live_slices),
        ("live tag", &mut live_tag),
    ] {
        let next = within(what, live.next())
            .await
            .expect("live ended")
            .expect("envelope");
        assert_eq!(
            (next.persistence_id.to_string(), next.seq_nr),
            ("Acct|after".to_owned(), 1),
            "{kind:?}: {what}"
        );
    }
    let current = collect(
        "current",
        q.current_events_by_slices("Acct", 0, 1023, Offset::NoOffset),
    )
    .await;
    assert_eq!(current.len(), want + 1);
    p.shutdown().await;
}

/// `events_by_persistence_id` and its current form deliver exactly the events from `from` to
/// `to` (empty when `from > to` or past the highest), with `Offset::Sequence` offsets, skip
/// deleted events, and the live form ends at `to` or goes on with the next event written; the
/// queries by slices skip deleted events too.
async fn events_by_persistence_id_keeps_to_its_bounds_and_skips_deleted_events(kind: Kind) {
    let (_b, p) = open_with_page(kind, "2", "2s").await;
    let pid = "Acct|bounds";
    let mut a = start_acct(&p, pid);
    assert_eq!(a.note().await, Note::Recovered(0));
    a.add(&[1, 2, 3, 4, 5, 6, 7]).await.expect("stored");
    let q = p.query().expect("query");
    let seqs = |v: Vec<Raw>| v.iter().map(|e| e.seq_nr).collect::<Vec<_>>();
    let cur = |from, to| {
        collect(
            "current by pid",
            q.current_events_by_persistence_id(pid, from, to),
        )
    };
    assert_eq!(seqs(cur(0, u64::MAX).await), (1..=7).collect::<Vec<_>>());
    assert_eq!(seqs(cur(0, 0).await), Vec::<u64>::new());
    assert_eq!(seqs(cur(5, 3).await), Vec::<u64>::new());
    assert_eq!(seqs(cur(7, u64::MAX).await), vec![7]);
    assert_eq!(seqs(cur(8, u64::MAX).await), Vec::<u64>::new());
    assert_eq!(seqs(cur(u64::MAX, u64::MAX).await), Vec::<u64>::new());
    assert_eq!(
        seqs(cur(i64::MAX as u64, u64::MAX).await),
        Vec::<u64>::new()
    );
    assert_eq!(seqs(cur(3, 3).await), vec![3]);
    // Offsets are Sequence.
    let all = cur(1, u64::MAX).await;
    assert_eq!(all[2].offset, Offset::Sequence { seq_nr: 3 });
    // Live bounded: ends.
    let live = |from, to| collect("live by pid", q.events_by_persistence_id(pid, from, to));
    assert_eq!(seqs(live(0, 3).await), vec![1, 2, 3]);
    assert_eq!(seqs(live(5, 3).await), Vec::<u64>::new());
    assert_eq!(seqs(live(6, 7).await), vec![6, 7]);
    // Delete 2..=4 is not possible (delete is a prefix): delete to 4.
    a.addr.do_send(DeleteTo(4));
    assert_eq!(a.note().await, Note::Deleted(4));
    assert_eq!(seqs(cur(0, u64::MAX).await), vec![5, 6, 7]);
    assert_eq!(seqs(cur(2, 4).await), Vec::<u64>::new());
    assert_eq!(seqs(live(1, 5).await), vec![5]);
    assert_eq!(seqs(live(1, 4).await), Vec::<u64>::new());
    // Live from 0 to MAX: 5, 6, 7, then the next written.
    let mut open = q.events_by_persistence_id(pid, 0, u64::MAX);
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(next_seq_nr(&mut open).await);
    }
    a.add(&[8]).await.expect("stored");
    got.push(next_seq_nr(&mut open).await);
    assert_eq!(got, vec![5, 6, 7, 8]);
    // Slices / tags skip deleted ones too.
    let by_slices = collect(
        "slices",
        q.current_events_by_slices("Acct", 0, 1023, Offset::NoOffset),
    )
    .await;
    assert_eq!(seqs(by_slices), vec![5, 6, 7, 8]);
    p.shutdown().await;
}

/// The seq_nr of the next envelope of a live query.
async fn next_seq_nr(
    live: &mut (impl Stream<Item = Result<Raw, actix_persistence::QueryError>> + Unpin),
) -> u64 {
    within("live", live.next())
        .await
        .expect("live ended")
        .expect("envelope")
        .seq_nr
}

/// Ids and tags with '|', non-ASCII characters, quotes, backslashes, SQL wildcards (`%`, `_`),
/// spaces, empty tags, 255 bytes, and 64 tags on one event: queries by slices select exactly
/// the ids of the entity type (the text before the first '|') and slice, by tag exactly the
/// events carrying the tag, tags come back as written and in order, persistence ids are paged
/// in byte order after any id with any limit, and each id recovers its event.
async fn odd_ids_and_tags_are_selected_and_paged_exactly(kind: Kind) {
    let (_b, p) = open_with_page(kind, "2", "2s").await;
    let long = format!("Acct|{}", "é".repeat(125)); // 5 + 250 = 255 bytes
    assert_eq!(long.len(), 255);
    let ids: Vec<String> = vec![
        "Acct||x".into(),
        "Acct|a|b".into(),
        "Acct|日本🦀".into(),
        "Acct|'q\"\\".into(),
        "Acct|%_".into(),
        "Acct| ".into(),
        long.clone(),
        "|Acct".into(),
        "Acct".into(),
        "Acctx|1".into(),
    ];
    let odd_tags: Vec<String> = vec![
        "".into(),
        " ".into(),
        "ü'\"\\".into(),
        "a,b".into(),
        "%".into(),
        "_".into(),
        "[\"x\"]".into(),
        "t".into(),
        "tt".into(),
        "x".repeat(255),
    ];
    let mut many: Vec<String> = (0..54).map(|i| format!("m{i}")).collect();
    many.extend(odd_tags.iter().cloned());
    assert_eq!(many.len(), 64);
    for (i, id) in ids.iter().enumerate() {
        let mut a = start_acct(&p, id);
        assert_eq!(a.note().await, Note::Recovered(0), "{id}");
        let tags = if i % 2 == 0 {
            many.clone()
        } else {
            vec![odd_tags[i].clone()]
        };
        within("add", a.addr.send(Add(vec![i as i64], tags)))
            .await
            .expect("mailbox")
            .expect("stored");
    }
    let q = p.query().expect("query");
    // By slices of entity type Acct: exactly the ids whose entity type is "Acct".
    let acct: Vec<&String> = ids
        .iter()
        .filter(|id| actix_persistence::query::entity_type_of(id) == "Acct")
        .collect();
    let got = collect(
        "slices",
        q.current_events_by_slices("Acct", 0, 1023, Offset::NoOffset),
    )
    .await;
    let mut got_ids: Vec<String> = got.iter().map(|e| e.persistence_id.to_string()).collect();
    got_ids.sort();
    let mut want: Vec<String> = acct.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(got_ids, want, "{kind:?}");
    for e in &got {
        assert_eq!(e.slice, slice_for_persistence_id(&e.persistence_id));
    }
    // Single slice of the long id.
    let s = slice_for_persistence_id(&long);
    let one = collect(
        "one slice",
        q.current_events_by_slices("Acct", s, s, Offset::NoOffset),
    )
    .await;
    let mut in_slice: Vec<String> = one.iter().map(|e| e.persistence_id.to_string()).collect();
    in_slice.sort();
    let mut want: Vec<String> = acct
        .iter()
        .filter(|id| slice_for_persistence_id(id) == s)
        .map(|id| id.to_string())
        .collect();
    want.sort();
    assert_eq!(in_slice, want, "{kind:?}: the ids of the long id's slice");
    // Each tag selects exactly the events carrying it.
    for tag in many.iter().chain(odd_tags.iter()) {
        let want: Vec<String> = ids
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                if i % 2 == 0 {
                    many.contains(tag)
                } else {
                    odd_tags[*i] == *tag
                }
            })
            .map(|(_, id)| id.clone())
            .collect();
        let got = collect("tag", q.current_events_by_tag(tag, Offset::NoOffset)).await;
        let mut got: Vec<String> = got.iter().map(|e| e.persistence_id.to_string()).collect();
        let mut want = want;
        got.sort();
        want.sort();
        assert_eq!(got, want, "{kind:?}: tag {tag:?}");
    }
    // The tags come back as written, in order.
    let first = collect(
        "by pid",
        q.current_events_by_persistence_id(&ids[0], 0, u64::MAX),
    )
    .await;
    assert_eq!(first[0].tags, many);
    // Persistence ids: byte order, paged 2 at a time, with limits and after.
    let mut sorted: Vec<String> = ids.clone();
    sorted.sort();
    let all: Vec<String> = within(
        "ids",
        q.current_persistence_ids(None, u64::MAX)
            .map(|r| r.expect("id"))
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(all, sorted, "{kind:?}");
    for k in 0..sorted.len() {
        for limit in [0u64, 1, 2, 3, 100] {
            let got: Vec<String> = within(
                "ids after",
                q.current_persistence_ids(Some(&sorted[k]), limit)
                    .map(|r| r.expect("id"))
                    .collect::<Vec<_>>(),
            )
            .await;
            let want: Vec<String> = sorted[k + 1..]
                .iter()
                .take(limit as usize)
                .cloned()
                .collect();
            assert_eq!(got, want, "{kind:?}: after {:?} limit {limit}", sorted[k]);
        }
    }
    // Replays of each odd id through a restarted actor.
    for (i, id) in ids.iter().enumerate() {
        let mut a = start_acct(&p, id);
        assert_eq!(a.note().await, Note::Recovered(1), "{id}");
        assert_eq!(a.get().await.1.applied, vec![(1, i as i64)]);
    }
    p.shutdown().await;
}

on_every_store!(
    resuming_from_any_offset_delivers_exactly_the_rest_when_pages_split_one_timestamp,
    a_current_query_racing_writers_delivers_what_was_acknowledged_before_it_once_in_order,
    live_queries_over_concurrent_writers_deliver_every_event_once_in_order,
    events_by_persistence_id_keeps_to_its_bounds_and_skips_deleted_events,
    odd_ids_and_tags_are_selected_and_paged_exactly,
);

// ---------------------------------------------------------------------------------------------
// Projections

type Env = EventEnvelope<Added>;

const IDS: usize = 4;
const PER_ID: usize = 10;
const TOTAL: usize = IDS * PER_ID;

/// Pages of 3 envelopes, so pages split the events of one id.
fn qs() -> QuerySettings {
    QuerySettings {
        page_size: 3,
        refresh_interval: Duration::from_millis(50),
        ..QuerySettings::default()
    }
}

/// Writes IDS x PER_ID events through persistent actors (amount = seq_nr), in a system of its
/// own, and shuts down.
fn write_events(b: &Backend, first_seq: i64) {
    actix::System::new().block_on(async {
        let p = b.open().await;
        for i in 0..IDS {
            let mut a = start_acct(&p, &format!("Acct|{i}"));
            let Note::Recovered(_) = a.note().await else {
                panic!("recovery")
            };
            for n in 0..PER_ID as i64 {
                a.add(&[first_seq + n]).await.expect("stored");
            }
        }
        p.shutdown().await;
    });
}

/// Blocks (forever) the `block_at`-th call (1-based), after its writes, and notifies.
#[derive(Clone)]
struct Gate {
    calls: Arc<AtomicUsize>,
    block_at: usize,
    reached: Arc<tokio::sync::Notify>,
}

impl Gate {
    fn new(block_at: usize) -> Self {
        Gate {
            calls: Arc::new(AtomicUsize::new(0)),
            block_at,
            reached: Arc::new(tokio::sync::Notify::new()),
        }
    }
    async fn pass(&self) {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.block_at {
            self.reached.notify_one();
            futures::future::pending::<()>().await;
        }
    }
}

/// An exactly-once handler writing each envelope to the SQLite read model `handled` in the
/// offset's transaction.
struct SqliteRm(Option<Gate>);
#[async_trait]
impl TransactionalHandler<Env, Transaction<'static, Sqlite>> for SqliteRm {
    async fn process(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        e: &Env,
    ) -> Result<(), HandlerError> {
        sqlx::query("INSERT INTO handled (pid, seq_nr, amount) VALUES (?, ?, ?)")
            .bind(&*e.persistence_id)
            .bind(e.seq_nr as i64)
            .bind(e.event.amount)
            .execute(&mut **tx)
            .await?;
        if let Some(g) = &self.0 {
            g.pass().await;
        }
        Ok(())
    }
}

/// As [`SqliteRm`], on PostgreSQL.
struct PgRm(Option<Gate>);
#[async_trait]
impl TransactionalHandler<Env, Transaction<'static, Postgres>> for PgRm {
    async fn process(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        e: &Env,
    ) -> Result<(), HandlerError> {
        sqlx::query("INSERT INTO handled (pid, seq_nr, amount) VALUES ($1, $2, $3)")
            .bind(&*e.persistence_id)
            .bind(e.seq_nr as i64)
            .bind(e.event.amount)
            .execute(&mut **tx)
            .await?;
        if let Some(g) = &self.0 {
            g.pass().await;
        }
        Ok(())
    }
}

/// The (persistence id, seq_nr) a handler saw, in order.
type Seen = Arc<Mutex<Vec<(String, u64)>>>;

/// As [`SqliteRm`], in memory: the envelope is recorded when its transaction commits.
struct MemRm(Option<Gate>, Seen);
#[async_trait]
impl TransactionalHandler<Env, InMemoryTransaction> for MemRm {
    async fn process(&self, tx: &mut InMemoryTransaction, e: &Env) -> Result<(), HandlerError> {
        let seen = Arc::clone(&self.1);
        let key = (e.persistence_id.to_string(), e.seq_nr);
        tx.on_commit(move || seen.lock().expect("no test thread panicked").push(key));
        if let Some(g) = &self.0 {
            g.pass().await;
        }
        Ok(())
    }
}

/// At-least-once: records every call.
struct Counting(Option<Gate>, Seen);
#[async_trait]
impl Handler<Env> for Counting {
    async fn process(&self, e: &Env) -> Result<(), HandlerError> {
        if let Some(g) = &self.0 {
            g.pass().await;
        }
        // Recorded once the call returns: a call cut by the crash is not "handled".
        self.1
            .lock()
            .expect("no test thread panicked")
            .push((e.persistence_id.to_string(), e.seq_nr));
        Ok(())
    }
}

/// A journal and an offset store over the SQLite database of `b`, with the read model table.
async fn sqlite_parts(b: &Backend) -> (SqliteJournal, SqliteOffsetStore) {
    let j = SqliteJournal::connect(&SqliteJournalOptions::new(b.sqlite_url()))
        .await
        .expect("journal");
    let s = SqliteOffsetStore::connect(&b.sqlite_url())
        .await
        .expect("offset store");
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS handled (pid TEXT NOT NULL, seq_nr INTEGER NOT NULL, amount INTEGER NOT NULL)",
    )
    .execute(s.pool())
    .await
    .expect("table");
    (j, s)
}

/// As [`sqlite_parts`], on PostgreSQL.
async fn pg_parts(b: &Backend) -> (PostgresJournal, PostgresOffsetStore) {
    let j = PostgresJournal::connect(&PostgresJournalOptions {
        max_connections: 4,
        ..PostgresJournalOptions::new(b.pg_url())
    })
    .await
    .expect("journal");
    let s = PostgresOffsetStore::connect(&b.pg_url(), 4)
        .await
        .expect("offset store");
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS handled (pid TEXT NOT NULL, seq_nr BIGINT NOT NULL, amount BIGINT NOT NULL)",
    )
    .execute(s.pool())
    .await
    .expect("table");
    (j, s)
}

/// The projection `name` over every slice.
fn pid_id(name: &str) -> ProjectionId {
    ProjectionId::for_slices(name, 0, 1023)
}

/// Events of entity type `Acct` by slices, live or current.
fn source(q: ReadJournal, live: bool) -> QuerySource<Added> {
    let s = QuerySource::<Added>::events_by_slices(q, "Acct", 0, 1023);
    if live {
        s
    } else {
        s.current()
    }
}

/// Rows of `handled`: (count, distinct (pid, seq_nr)).
async fn sqlite_counts(b: &Backend) -> (i64, i64) {
    let (_j, s) = sqlite_parts(b).await;
    sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM handled), (SELECT COUNT(*) FROM (SELECT DISTINCT pid, seq_nr FROM handled))",
    )
    .fetch_one(s.pool())
    .await
    .expect("count")
}

async fn pg_counts(b: &Backend) -> (i64, i64) {
    let (_j, s) = pg_parts(b).await;
    sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM handled), (SELECT COUNT(*) FROM (SELECT DISTINCT pid, seq_nr FROM handled) d)",
    )
    .fetch_one(s.pool())
    .await
    .expect("count")
}

/// An exactly-once projection (handling one envelope at a time, and four) crashed twice by
/// dropping its runtime while a handler call is inside its transaction (at call 7, then at
/// call 9 of the next run), then restarted: the read model holds every event exactly once
/// (Akka Projections: exactly-once commits the offset in the handler's transaction).
fn exactly_once_crashed_inside_its_transaction_handles_every_event_once_after_a_restart(
    kind: Kind,
) {
    for max_concurrency in [1, 4] {
        exactly_once_runtime_drop(kind, max_concurrency);
    }
}

fn exactly_once_runtime_drop(kind: Kind, max_concurrency: usize) {
    let b = actix::System::new().block_on(Backend::new(kind));
    write_events(&b, 1);
    let mem_store = InMemoryOffsetStore::new();
    let mem_seen: Seen = Arc::default();
    let mem_journal = ReadJournal::from_arc(
        actix::System::new().block_on(async {
            b.open()
                .await
                .query()
                .expect("a query store")
                .store()
                .clone()
        }),
        qs(),
    );
    for block_at in [7, 9] {
        let gate = Gate::new(block_at);
        let reached = Arc::clone(&gate.reached);
        let sys = actix::System::new();
        sys.block_on(async {
            let handle = match kind {
                Kind::Sqlite => {
                    let (j, s) = sqlite_parts(&b).await;
                    Projection::exactly_once(
                        pid_id("eo"),
                        source(ReadJournal::new(j, qs()), true),
                        s,
                        SqliteRm(Some(gate)),
                    )
                    .with_max_concurrency(max_concurrency)
                    .start()
                }
                Kind::Postgres => {
                    let (j, s) = pg_parts(&b).await;
                    Projection::exactly_once(
                        pid_id("eo"),
                        source(ReadJournal::new(j, qs()), true),
                        s,
                        PgRm(Some(gate)),
                    )
                    .with_max_concurrency(max_concurrency)
                    .start()
                }
                Kind::InMemory => Projection::exactly_once(
                    pid_id("eo"),
                    source(mem_journal.clone(), true),
                    mem_store.clone(),
                    MemRm(Some(gate), Arc::clone(&mem_seen)),
                )
                .with_max_concurrency(max_concurrency)
                .start(),
            };
            within("the gate", reached.notified()).await;
            // The handle and everything else is dropped with the runtime: a crash.
            std::mem::forget(handle);
        });
        drop(sys);
    }
    // Restart: completes, every event exactly once.
    let sys = actix::System::new();
    let state = sys.block_on(async {
        let h = match kind {
            Kind::Sqlite => {
                let (j, s) = sqlite_parts(&b).await;
                Projection::exactly_once(
                    pid_id("eo"),
                    source(ReadJournal::new(j, qs()), false),
                    s,
                    SqliteRm(None),
                )
                .with_max_concurrency(max_concurrency)
                .start()
            }
            Kind::Postgres => {
                let (j, s) = pg_parts(&b).await;
                Projection::exactly_once(
                    pid_id("eo"),
                    source(ReadJournal::new(j, qs()), false),
                    s,
                    PgRm(None),
                )
                .with_max_concurrency(max_concurrency)
                .start()
            }
            Kind::InMemory => Projection::exactly_once(
                pid_id("eo"),
                source(mem_journal.clone(), false),
                mem_store.clone(),
                MemRm(None, Arc::clone(&mem_seen)),
            )
            .with_max_concurrency(max_concurrency)
            .start(),
        };
        let progress = h.progress();
        let state = within("restart to complete", h.join()).await;
        (state, progress)
    });
    drop(sys);
    let (state, progress) = state;
    assert_eq!(
        state,
        ProjectionState::Completed,
        "{kind:?}: {:?}",
        progress.last_error
    );
    let counts = match kind {
        Kind::Sqlite => actix::System::new().block_on(sqlite_counts(&b)),
        Kind::Postgres => actix::System::new().block_on(pg_counts(&b)),
        Kind::InMemory => {
            let v = mem_seen.lock().expect("no test thread panicked").clone();
            let d: HashSet<_> = v.iter().cloned().collect();
            (v.len() as i64, d.len() as i64)
        }
    };
    assert_eq!(
        counts,
        (TOTAL as i64, TOTAL as i64),
        "{kind:?} max_concurrency {max_concurrency}: (rows, distinct) after two runtime drops"
    );
}

/// At-least-once with `SaveOffset { after_envelopes: 5, after: 1h }`, crashed (its runtime
/// dropped) while call 23 runs: the restart skips no envelope and repeats exactly the ones
/// handled since the stored offset, in the same order (where the offset stands depends on which
/// saves completed, and a save that follows one under way covers everything handled
/// meanwhile; the limit of docs/projections.md, 8 x after_envelopes = 40, is not reached).
fn at_least_once_after_a_crash_repeats_only_the_envelopes_handled_since_the_stored_offset(
    kind: Kind,
) {
    let b = actix::System::new().block_on(Backend::new(kind));
    write_events(&b, 1);
    let calls: Seen = Arc::default();
    let save = SaveOffset {
        after_envelopes: 5,
        after: Duration::from_secs(3600),
    };
    let mem_store = InMemoryOffsetStore::new();
    let mem_journal = ReadJournal::from_arc(
        actix::System::new().block_on(async {
            b.open()
                .await
                .query()
                .expect("a query store")
                .store()
                .clone()
        }),
        qs(),
    );
    let run = |gate: Option<Gate>, live: bool| {
        let calls = Arc::clone(&calls);
        let b = &b;
        let mem_store = mem_store.clone();
        let mem_journal = mem_journal.clone();
        async move {
            let handler = Counting(gate, calls);
            match kind {
                Kind::Sqlite => {
                    let (j, s) = sqlite_parts(b).await;
                    Projection::at_least_once(
                        pid_id("alo"),
                        source(ReadJournal::new(j, qs()), live),
                        s,
                        handler,
                    )
                    .with_save_offset(save)
                    .start()
                }
                Kind::Postgres => {
                    let (j, s) = pg_parts(b).await;
                    Projection::at_least_once(
                        pid_id("alo"),
                        source(ReadJournal::new(j, qs()), live),
                        s,
                        handler,
                    )
                    .with_save_offset(save)
                    .start()
                }
                Kind::InMemory => Projection::at_least_once(
                    pid_id("alo"),
                    source(mem_journal, live),
                    mem_store,
                    handler,
                )
                .with_save_offset(save)
                .start(),
            }
        }
    };
    let gate = Gate::new(23);
    let reached = Arc::clone(&gate.reached);
    let sys = actix::System::new();
    sys.block_on(async {
        let h = run(Some(gate), true).await;
        within("gate", reached.notified()).await;
        std::mem::forget(h);
    });
    drop(sys);
    let before = calls.lock().expect("no test thread panicked").len();
    assert_eq!(before, 22);
    let sys = actix::System::new();
    let state = sys.block_on(async {
        let h = run(None, false).await;
        within("restart", h.join()).await
    });
    drop(sys);
    assert_eq!(state, ProjectionState::Completed);
    let all = calls.lock().expect("no test thread panicked").clone();
    let distinct: HashSet<_> = all.iter().cloned().collect();
    assert_eq!(distinct.len(), TOTAL, "{kind:?}: none skipped");
    let repeated = all.len() - TOTAL;
    assert!(
        repeated <= 22,
        "{kind:?}: {repeated} repeated, not the envelopes handled after a save: {all:?}"
    );
    assert_eq!(
        all[22..22 + repeated],
        all[22 - repeated..22],
        "{kind:?}: the repeated envelopes are the suffix handled since the last save: {all:?}"
    );
}

/// A read model handler that also records each call, in the order the calls start.
struct Ordered<Inner>(Inner, Seen);

#[async_trait]
impl TransactionalHandler<Env, Transaction<'static, Sqlite>> for Ordered<SqliteRm> {
    async fn process(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        e: &Env,
    ) -> Result<(), HandlerError> {
        self.1
            .lock()
            .expect("no test thread panicked")
            .push((e.persistence_id.to_string(), e.seq_nr));
        self.0.process(tx, e).await
    }
}
#[async_trait]
impl TransactionalHandler<Env, Transaction<'static, Postgres>> for Ordered<PgRm> {
    async fn process(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        e: &Env,
    ) -> Result<(), HandlerError> {
        self.1
            .lock()
            .expect("no test thread panicked")
            .push((e.persistence_id.to_string(), e.seq_nr));
        self.0.process(tx, e).await
    }
}

/// Two exactly-once projections of different names over the same slices, sharing one offset
/// store (the same tables) and handling four envelopes at a time, live while six actors write
/// concurrently: each handles every event once, each id in seq_nr order; the one left running
/// after the other stopped handles a later event, and restarts handle only what each had not
/// (Akka Projections: the offset is kept per projection name and key).
async fn two_projections_sharing_an_offset_store_each_handle_every_event_once_in_order(kind: Kind) {
    let b = Backend::new(kind).await;
    let p = b.open().await;
    let calls_a: Seen = Arc::default();
    let calls_b: Seen = Arc::default();
    let start = |name: &str, calls: &Seen, live: bool| {
        let calls = Arc::clone(calls);
        let name = name.to_owned();
        let b = &b;
        async move {
            match kind {
                Kind::Sqlite => {
                    let (j, s) = sqlite_parts(b).await;
                    Projection::exactly_once(
                        pid_id(&name),
                        source(ReadJournal::new(j, qs()), live),
                        s,
                        Ordered(SqliteRm(None), calls),
                    )
                    .with_max_concurrency(4)
                    .with_save_offset(SaveOffset {
                        after_envelopes: 3,
                        after: Duration::from_millis(20),
                    })
                    .start()
                }
                _ => {
                    let (j, s) = pg_parts(b).await;
                    Projection::exactly_once(
                        pid_id(&name),
                        source(ReadJournal::new(j, qs()), live),
                        s,
                        Ordered(PgRm(None), calls),
                    )
                    .with_max_concurrency(4)
                    .with_save_offset(SaveOffset {
                        after_envelopes: 3,
                        after: Duration::from_millis(20),
                    })
                    .start()
                }
            }
        }
    };
    let ha = start("proj-a", &calls_a, true).await;
    let hb = start("proj-b", &calls_b, true).await;
    let mut tasks = Vec::new();
    for i in 0..6 {
        let mut a = start_acct(&p, &format!("Acct|{i}"));
        assert_eq!(a.note().await, Note::Recovered(0));
        tasks.push(actix::spawn(async move {
            for n in 1..=12 {
                a.add(&[n]).await.expect("stored");
            }
        }));
    }
    for t in tasks {
        t.await.expect("a writer");
    }
    let want = 6 * 12;
    for (what, handle) in [("a", &ha), ("b", &hb)] {
        let progress = within(what, handle.wait_for(|p| p.handled >= want))
            .await
            .expect("the projection runs");
        assert_eq!(progress.handled, want, "{kind:?}: {what} handled");
    }
    assert_eq!(within("stop a", ha.stop()).await, ProjectionState::Stopped);
    // b keeps going after a stopped.
    let mut late = start_acct(&p, "Acct|late");
    assert_eq!(late.note().await, Note::Recovered(0));
    late.add(&[1]).await.expect("stored");
    let progress = within("b handles the late one", hb.wait_for(|p| p.handled > want))
        .await
        .expect("b runs");
    assert_eq!(progress.handled, want + 1, "{kind:?}: b handled");
    assert_eq!(within("stop b", hb.stop()).await, ProjectionState::Stopped);
    // Restarts (current): a handles only the late event, b nothing.
    let ha = start("proj-a", &calls_a, false).await;
    assert_eq!(within("a", ha.join()).await, ProjectionState::Completed);
    let hb = start("proj-b", &calls_b, false).await;
    assert_eq!(within("b", hb.join()).await, ProjectionState::Completed);
    for (name, calls) in [("a", &calls_a), ("b", &calls_b)] {
        let calls = calls.lock().expect("no test thread panicked").clone();
        let mut per: HashMap<String, Vec<u64>> = Default::default();
        for (pid, seq) in &calls {
            per.entry(pid.clone()).or_default().push(*seq);
        }
        assert_eq!(per.len(), 7, "{kind:?} {name}: ids");
        for (pid, seqs) in &per {
            let n = if pid == "Acct|late" { 1 } else { 12 };
            assert_eq!(
                seqs,
                &(1..=n).collect::<Vec<u64>>(),
                "{kind:?} {name}: calls of {pid} (each once, in order)"
            );
        }
    }
    let counts = match kind {
        Kind::Sqlite => sqlite_counts(&b).await,
        _ => pg_counts(&b).await,
    };
    assert_eq!(
        counts,
        (2 * (want as i64 + 1), want as i64 + 1),
        "{kind:?}: read model rows of both"
    );
    p.shutdown().await;
}

/// An exactly-once projection by tag over 3 ids that wrote 7 tagged events as one atomic
/// write each (one timestamp each) and one untagged event, crashed (its runtime dropped) inside
/// its transaction at call 1, 6, 7 and 2 of four runs, then restarted: the read model holds
/// each of the 21 tagged events exactly once.
fn exactly_once_by_tag_crashed_at_any_call_handles_every_tagged_event_once(kind: Kind) {
    let b = actix::System::new().block_on(Backend::new(kind));
    actix::System::new().block_on(async {
        let p = b.open().await;
        for i in 0..3 {
            let mut a = start_acct(&p, &format!("Acct|tag{i}"));
            let Note::Recovered(_) = a.note().await else {
                panic!()
            };
            within(
                "add all",
                a.addr.send(AddAll(
                    (1..=7).collect(),
                    vec!["x".into(), "proj tag ü'\\".into(), "y".into()],
                )),
            )
            .await
            .expect("mailbox")
            .expect("stored");
            // An untagged one in between.
            a.add(&[100]).await.expect("stored");
        }
        p.shutdown().await;
    });
    let tag = "proj tag ü'\\";
    let total = 21i64;
    let id = ProjectionId::for_tag("by-tag", tag);
    let mem_store = InMemoryOffsetStore::new();
    let mem_seen: Seen = Arc::default();
    let mem_journal = ReadJournal::from_arc(
        actix::System::new().block_on(async {
            b.open()
                .await
                .query()
                .expect("a query store")
                .store()
                .clone()
        }),
        qs(),
    );
    let start = |gate: Option<Gate>, live: bool| {
        let b = &b;
        let id = id.clone();
        let mem_store = mem_store.clone();
        let mem_seen = Arc::clone(&mem_seen);
        let mem_journal = mem_journal.clone();
        async move {
            let src = |q: ReadJournal| {
                let s = QuerySource::<Added>::events_by_tag(q, tag);
                if live {
                    s
                } else {
                    s.current()
                }
            };
            match kind {
                Kind::Sqlite => {
                    let (j, s) = sqlite_parts(b).await;
                    Projection::exactly_once(id, src(ReadJournal::new(j, qs())), s, SqliteRm(gate))
                        .start()
                }
                Kind::Postgres => {
                    let (j, s) = pg_parts(b).await;
                    Projection::exactly_once(id, src(ReadJournal::new(j, qs())), s, PgRm(gate))
                        .start()
                }
                Kind::InMemory => {
                    Projection::exactly_once(id, src(mem_journal), mem_store, MemRm(gate, mem_seen))
                        .start()
                }
            }
        }
    };
    // Cut points counted in calls of each run (each run resumes after the previous commits).
    for k in [1usize, 6, 7, 2] {
        let gate = Gate::new(k);
        let reached = Arc::clone(&gate.reached);
        let sys = actix::System::new();
        sys.block_on(async {
            let h = start(Some(gate), true).await;
            within("gate", reached.notified()).await;
            std::mem::forget(h);
        });
        drop(sys);
    }
    let sys = actix::System::new();
    let state = sys.block_on(async { within("restart", start(None, false).await.join()).await });
    drop(sys);
    assert_eq!(state, ProjectionState::Completed, "{kind:?}");
    let counts = match kind {
        Kind::Sqlite => actix::System::new().block_on(sqlite_counts(&b)),
        Kind::Postgres => actix::System::new().block_on(pg_counts(&b)),
        Kind::InMemory => {
            let v = mem_seen.lock().expect("no test thread panicked").clone();
            let d: HashSet<_> = v.iter().cloned().collect();
            (v.len() as i64, d.len() as i64)
        }
    };
    assert_eq!(
        counts,
        (total, total),
        "{kind:?}: by tag, (rows, distinct) after 4 crashes"
    );
}

on_every_store_in_own_systems!(
    exactly_once_crashed_inside_its_transaction_handles_every_event_once_after_a_restart,
    at_least_once_after_a_crash_repeats_only_the_envelopes_handled_since_the_stored_offset,
    exactly_once_by_tag_crashed_at_any_call_handles_every_tagged_event_once,
);

/// On the SQL stores only: the read model both projections write is a SQL table.
mod two_projections_sharing_an_offset_store_each_handle_every_event_once_in_order {
    use super::*;

    #[actix::test]
    async fn sqlite() {
        two_projections_sharing_an_offset_store_each_handle_every_event_once_in_order(Kind::Sqlite)
            .await
    }

    #[actix::test]
    #[cfg_attr(
        not(has_database_url),
        ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
    )]
    async fn postgres() {
        two_projections_sharing_an_offset_store_each_handle_every_event_once_in_order(
            Kind::Postgres,
        )
        .await
    }
}
