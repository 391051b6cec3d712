//! The public query API (`ReadJournal`) replayed against bug reports of other persistence
//! libraries' queries (akka-persistence-r2dbc / -jdbc, Akka persistence-query, EventStoreDB
//! catch-up subscriptions, commanded/eventstore), at the store level on every store (in
//! memory, a SQLite file, a PostgreSQL database of its own): persistence ids paged after any
//! text, offsets resumed after their events were deleted or made by hand, live queries by
//! persistence id that start before their id exists or past its end, slices at the ends of the
//! range, and the connections and reader tasks of live queries that are dropped or run by the
//! hundred beside the journal's writes.
//!
//! Not repeated here (see `adversarial_read_side.rs`, `query_late_commits.rs`,
//! `postgres_query.rs` and the query conformance suite): late commits, tag case, deletes behind
//! a write, clock steps back, odd ids and tags, bounds of `events_by_persistence_id`.

mod adversarial;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use actix_persistence::query::{
    slice_for_persistence_id, EnvelopeStream, Offset, QueryError, QuerySettings, QueryStore,
    ReadJournal, SeenMap, TimestampOffset,
};
use actix_persistence::{
    AtomicWrite, FencingToken, InMemoryJournal, JournalStore, PersistentRepr, PostgresJournal,
    PostgresJournalOptions, SqliteJournal, SqliteJournalOptions,
};
use adversarial::{within, Backend, Kind};
use futures::StreamExt;

// ---------------------------------------------------------------------------------------------
// The stores

/// A fresh database of one kind, reached through its journal store directly (no actor): the
/// test writes and deletes events itself and looks at the journal's connection pools.
struct Db {
    kind: Kind,
    store: Arc<dyn QueryStore>,
    inmem: Option<InMemoryJournal>,
    sqlite: Option<SqliteJournal>,
    pg: Option<PostgresJournal>,
    /// The SQLite file or the PostgreSQL database (dropped with it).
    backend: Backend,
}

impl Db {
    async fn new(kind: Kind) -> Db {
        let backend = Backend::new(kind).await;
        let inmem = (kind == Kind::InMemory).then(InMemoryJournal::new);
        let (store, sqlite, pg): (Arc<dyn QueryStore>, _, _) = match &inmem {
            Some(journal) => (Arc::new(journal.clone()), None, None),
            None if kind == Kind::Sqlite => {
                let journal =
                    SqliteJournal::connect(&SqliteJournalOptions::new(backend.sqlite_url()))
                        .await
                        .expect("connect SQLite");
                (Arc::new(journal.clone()), Some(journal), None)
            }
            None => {
                let journal = connect_pg(&backend).await;
                (Arc::new(journal.clone()), None, Some(journal))
            }
        };
        Db {
            kind,
            store,
            inmem,
            sqlite,
            pg,
            backend,
        }
    }

    /// The same database opened again, as another process would (in memory: the same store).
    async fn other_process(&self) -> Arc<dyn QueryStore> {
        match (&self.inmem, self.kind) {
            (Some(journal), _) => Arc::new(journal.clone()),
            (None, Kind::Sqlite) => Arc::new(
                SqliteJournal::connect(&SqliteJournalOptions::new(self.backend.sqlite_url()))
                    .await
                    .expect("connect SQLite again"),
            ),
            (None, _) => Arc::new(connect_pg(&self.backend).await),
        }
    }

    fn query(&self, settings: QuerySettings) -> ReadJournal {
        ReadJournal::from_arc(Arc::clone(&self.store), settings)
    }

    /// Events `from..=to` of `pid`, one atomic write each, tagged `tags`.
    async fn write(&self, pid: &str, from: u64, to: u64, tags: &[&str]) {
        for seq_nr in from..=to {
            let write = AtomicWrite::new(vec![event(pid, seq_nr, tags)]).expect("a valid write");
            let results = within("write", self.store.write_messages(vec![write]))
                .await
                .unwrap_or_else(|e| panic!("{:?}: write {pid} {seq_nr}: {e}", self.kind));
            for result in results {
                result.unwrap_or_else(|e| panic!("{:?}: write {pid} {seq_nr}: {e}", self.kind));
            }
        }
    }

    async fn delete_to(&self, pid: &str, to: u64) {
        within(
            "delete",
            self.store
                .delete_messages_to(pid, to, FencingToken::UNOWNED),
        )
        .await
        .unwrap_or_else(|e| panic!("{:?}: delete {pid} to {to}: {e}", self.kind));
    }

    /// Connections of the journal's pools checked out now (reads, writes); `None` in memory.
    fn connections_in_use(&self) -> Option<(u32, u32)> {
        let in_use = match (&self.sqlite, &self.pg) {
            (Some(sqlite), _) => sqlite.connections_in_use(),
            (_, Some(pg)) => pg.connections_in_use(),
            _ => return None,
        };
        Some((in_use.reads, in_use.writes))
    }
}

/// A PostgreSQL journal of 6 connections (3 for reads) on the database of `backend`.
async fn connect_pg(backend: &Backend) -> PostgresJournal {
    PostgresJournal::connect(&PostgresJournalOptions {
        max_connections: 6,
        ..PostgresJournalOptions::new(backend.pg_url())
    })
    .await
    .expect("connect PostgreSQL")
}

/// Event `seq_nr` of `pid`: JSON `{"n":seq_nr}`, tagged `tags`.
fn event(pid: &str, seq_nr: u64, tags: &[&str]) -> PersistentRepr {
    PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload: format!("{{\"n\":{seq_nr}}}").into_bytes(),
        serializer_id: actix_persistence::serialization::JSON_SERIALIZER_ID,
        manifest: String::new(),
        writer_uuid: "adversarial-queries".into(),
        timestamp: 0,
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
    }
}

/// Pages of `page` envelopes, refreshed every 50 ms, the default late-commit window.
fn settings(page: u32) -> QuerySettings {
    QuerySettings {
        page_size: page,
        refresh_interval: Duration::from_millis(50),
        ..QuerySettings::default()
    }
}

type Key = (String, u64);

/// Every element of a current query (an error fails the test).
async fn collect(what: &str, stream: EnvelopeStream) -> Vec<Key> {
    within(what, stream.collect::<Vec<_>>())
        .await
        .into_iter()
        .map(|item| {
            let e = item.unwrap_or_else(|e| panic!("{what}: {e}"));
            (e.persistence_id.to_string(), e.seq_nr)
        })
        .collect()
}

/// Every element of a current query with its offset.
async fn collect_with_offsets(what: &str, stream: EnvelopeStream) -> Vec<(Key, Offset)> {
    within(what, stream.collect::<Vec<_>>())
        .await
        .into_iter()
        .map(|item| {
            let e = item.unwrap_or_else(|e| panic!("{what}: {e}"));
            ((e.persistence_id.to_string(), e.seq_nr), e.offset)
        })
        .collect()
}

/// The next element of a live query (its end or an error fails the test).
async fn next(what: &str, stream: &mut EnvelopeStream) -> Key {
    let e = within(what, stream.next())
        .await
        .unwrap_or_else(|| panic!("{what}: the live query ended"))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    (e.persistence_id.to_string(), e.seq_nr)
}

/// `o` as an offset store keeps it: JSON text, read back.
fn stored(o: &Offset) -> Offset {
    let text = serde_json::to_string(o).expect("an offset serializes");
    serde_json::from_str(&text).expect("a stored offset reads back")
}

fn key(pid: &str, seq_nr: u64) -> Key {
    (pid.to_owned(), seq_nr)
}

// ---------------------------------------------------------------------------------------------
// current_persistence_ids

/// akka-persistence-r2dbc #81 / PR #105 (`currentPersistenceIds(afterId, limit)`, ids in the
/// database's order), akka-core #30794 (resuming persistence ids from where one left off):
/// ids that differ only by case, by Unicode normalization (NFC `é` and NFD `e` + U+0301), by a
/// trailing space or a separator, or whose UTF-8 and UTF-16 orders differ (U+E000, U+FFFD,
/// U+10000), listed after `after` values that are no stored id (between two ids, `""`, past
/// every id, holding a NUL as a text read back from elsewhere may), with limits 0 to
/// `u64::MAX` and pages of 2 and 1000: every store lists exactly the ids above `after` in byte
/// order, as the in-memory model does. pathosDev/actor-ts #707 (a journal's ids in a case- and
/// accent-insensitive collation merged ids other stores keep apart), Marten #5191 (string
/// stream keys across the read surface): each id reads back its own event only, another
/// spelling of it nothing.
async fn persistence_ids_after_any_text_come_in_byte_order(kind: Kind) {
    let db = Db::new(kind).await;
    let ids: Vec<&str> = vec![
        "Q|a",
        "Q|A",
        "Q|b",
        "Q|B",
        "Q|\u{e9}",
        "Q|e\u{301}",
        "Q|a ",
        "Q|a|",
        "Q|ab",
        "Q|\u{e000}",
        "Q|\u{fffd}",
        "Q|\u{10000}",
        "q|a",
        "Q",
        "Q|\u{c4}",
        "Q|z",
    ];
    for id in &ids {
        db.write(id, 1, 1, &[]).await;
    }
    // Each id reads back its own event only (no case folding or normalization), and one that
    // differs from it by case or normal form only reads nothing.
    let q = db.query(settings(2));
    for id in &ids {
        assert_eq!(
            collect(
                "by pid",
                q.current_events_by_persistence_id(id, 0, u64::MAX)
            )
            .await,
            vec![key(id, 1)],
            "{kind:?}: {id:?}"
        );
    }
    for unknown in ["q|A", "Q|E\u{301}", "Q|\u{c9}", "Q|a  ", "q"] {
        assert_eq!(
            collect(
                "by pid",
                q.current_events_by_persistence_id(unknown, 0, u64::MAX)
            )
            .await,
            vec![],
            "{kind:?}: {unknown:?}"
        );
    }
    let mut sorted: Vec<String> = ids.iter().map(|id| (*id).to_owned()).collect();
    sorted.sort(); // byte order
    let mut afters: Vec<Option<String>> = vec![
        None,
        Some(String::new()),
        Some("Q|".into()),
        Some("Q|aa".into()),
        Some("Q|a!".into()),
        Some("Q|\u{ffff}".into()),
        Some("\u{10ffff}".into()),
    ];
    afters.extend(sorted.iter().cloned().map(Some));
    for page in [2, 1000] {
        let q = db.query(settings(page));
        for after in &afters {
            for limit in [0u64, 1, 3, 1000, u64::MAX] {
                let want: Vec<String> = sorted
                    .iter()
                    .filter(|id| {
                        after
                            .as_ref()
                            .map_or(true, |a| id.as_bytes() > a.as_bytes())
                    })
                    .take(usize::try_from(limit).unwrap_or(usize::MAX))
                    .cloned()
                    .collect();
                let got: Vec<String> = within(
                    "ids",
                    q.current_persistence_ids(after.as_deref(), limit)
                        .collect::<Vec<_>>(),
                )
                .await
                .into_iter()
                .map(|r| r.unwrap_or_else(|e| panic!("{kind:?}: after {after:?}: {e}")))
                .collect();
                assert_eq!(
                    got, want,
                    "{kind:?}: page {page}, after {after:?}, limit {limit}"
                );
            }
        }
    }
}

/// The same with an `after` holding a NUL character (no store holds one in an id: the
/// persistence id limits refuse it), as a cursor read back from a corrupted or foreign place
/// can: every store lists the ids above it in byte order, as it does for any other text, and
/// as the queries by tag, by slices and by persistence id answer such a text (no event) rather
/// than fail.
async fn persistence_ids_after_a_text_holding_nul_come_in_byte_order(kind: Kind) {
    let db = Db::new(kind).await;
    for id in ["N|a", "N|a\u{1}", "N|ab", "N|b"] {
        db.write(id, 1, 1, &["t"]).await;
    }
    let q = db.query(settings(2));
    for (after, want) in [
        ("N|a\0", vec!["N|a\u{1}", "N|ab", "N|b"]),
        ("N|a\0zzz", vec!["N|a\u{1}", "N|ab", "N|b"]),
        ("\0", vec!["N|a", "N|a\u{1}", "N|ab", "N|b"]),
        ("N|b\0", vec![]),
    ] {
        let got: Vec<Result<String, QueryError>> = within(
            "ids",
            q.current_persistence_ids(Some(after), u64::MAX)
                .collect::<Vec<_>>(),
        )
        .await;
        let got: Vec<String> = got
            .into_iter()
            .map(|r| r.unwrap_or_else(|e| panic!("{kind:?}: after {after:?}: {e}")))
            .collect();
        assert_eq!(got, want, "{kind:?}: after {after:?}");
    }
    // The other queries answer a text holding NUL with no event.
    assert_eq!(
        collect("tag", q.current_events_by_tag("t\0", Offset::NoOffset)).await,
        vec![]
    );
    assert_eq!(
        collect(
            "slices",
            q.current_events_by_slices("N\0", 0, 1023, Offset::NoOffset)
        )
        .await,
        vec![]
    );
    assert_eq!(
        collect(
            "pid",
            q.current_events_by_persistence_id("N|a\0", 0, u64::MAX)
        )
        .await,
        vec![]
    );
}

// ---------------------------------------------------------------------------------------------
// Offsets

/// commanded/eventstore PR #238 (a catch-up subscription's checkpoint at the position of
/// events hard-deleted since), KurrentDB #2622 (reading a truncated stream gives nothing):
/// two ids write 5 events each, alternating, all tagged; a consumer stores (as JSON) the
/// offset of every envelope of a current query by slices and by tag; then A's events 1-4 and
/// B's 1-2 are deleted. Resumed from any stored offset, a current query delivers exactly the
/// events after it that are still stored; a live one then delivers A's next event, whose
/// previous ones are all gone. By persistence id, a sequence offset whose events were deleted
/// resumes at the next stored event.
async fn resuming_from_an_offset_whose_events_were_deleted_since(kind: Kind) {
    let db = Db::new(kind).await;
    let (a, b) = ("Del|a", "Del|b");
    for seq_nr in 1..=5 {
        db.write(a, seq_nr, seq_nr, &["del"]).await;
        db.write(b, seq_nr, seq_nr, &["del"]).await;
    }
    let q = db.query(settings(3));
    let by_slices = collect_with_offsets(
        "slices",
        q.current_events_by_slices("Del", 0, 1023, Offset::NoOffset),
    )
    .await;
    let by_tag =
        collect_with_offsets("tag", q.current_events_by_tag("del", Offset::NoOffset)).await;
    let write_order: Vec<Key> = (1..=5).flat_map(|s| [key(a, s), key(b, s)]).collect();
    assert_eq!(
        by_slices.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        write_order,
        "{kind:?}: by slices in write order"
    );
    assert_eq!(
        by_tag.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        write_order,
        "{kind:?}: by tag in write order"
    );
    let offsets: Vec<(Vec<(Key, Offset)>, bool)> = vec![(by_slices, true), (by_tag, false)];
    db.delete_to(a, 4).await;
    db.delete_to(b, 2).await;
    let kept = |k: &Key| (k.0 == a && k.1 > 4) || (k.0 == b && k.1 > 2);
    for (envelopes, slices) in &offsets {
        for (i, (at, offset)) in envelopes.iter().enumerate() {
            let offset = stored(offset);
            let resumed = if *slices {
                q.current_events_by_slices("Del", 0, 1023, offset)
            } else {
                q.current_events_by_tag("del", offset)
            };
            let want: Vec<Key> = envelopes[i + 1..]
                .iter()
                .map(|(k, _)| k.clone())
                .filter(kept)
                .collect();
            assert_eq!(
                collect("resumed", resumed).await,
                want,
                "{kind:?}: resumed after {at:?} (by slices: {slices})"
            );
        }
    }
    // Live from the offset of A's event 2 (deleted): B's stored events after it, then A's
    // next event although its previous ones are gone.
    for (envelopes, slices) in &offsets {
        let offset = stored(&envelopes[2].1); // after (a, 2)
        let mut live = if *slices {
            q.events_by_slices("Del", 0, 1023, offset)
        } else {
            q.events_by_tag("del", offset)
        };
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(next("live resumed", &mut live).await);
        }
        assert_eq!(
            got,
            vec![key(b, 3), key(b, 4), key(a, 5), key(b, 5)],
            "{kind:?}: live resumed (by slices: {slices})"
        );
    }
    db.write(a, 6, 6, &["del"]).await;
    for (envelopes, slices) in &offsets {
        let offset = stored(&envelopes[9].1); // after (b, 5): the last one
        let mut live = if *slices {
            q.events_by_slices("Del", 0, 1023, offset)
        } else {
            q.events_by_tag("del", offset)
        };
        assert_eq!(
            next("live after the last", &mut live).await,
            key(a, 6),
            "{kind:?}: by slices: {slices}"
        );
    }
    // By persistence id: from a sequence offset whose events were deleted.
    let from = |o: &Offset| match o {
        Offset::Sequence { seq_nr } => seq_nr + 1,
        other => panic!("a sequence offset, got {other:?}"),
    };
    let by_pid = q.current_events_by_persistence_id(a, 0, u64::MAX);
    let before: Vec<_> = within("pid", by_pid.collect::<Vec<_>>()).await;
    assert_eq!(before.len(), 2, "{kind:?}: A's 5 and 6 are stored");
    let resumed_from = from(&stored(&Offset::Sequence { seq_nr: 2 }));
    assert_eq!(
        collect(
            "pid resumed",
            q.current_events_by_persistence_id(a, resumed_from, u64::MAX)
        )
        .await,
        vec![key(a, 5), key(a, 6)],
        "{kind:?}"
    );
}

/// akka-persistence-r2dbc PR #127 (a `TimestampOffset` kept by an offset store of another
/// plugin, read back through another serializer): offsets are read back from the text an
/// offset store keeps, so a text that is empty, of another shape (Akka's ISO timestamps, a
/// map of sequence numbers), of a variant name spelled otherwise, missing `seen`, or with a
/// negative or fractional number is an error of the JSON reader (the offset store's typed
/// error), never a default offset that would replay everything or skip ahead; the three
/// shapes the queries produce read back to themselves.
#[test]
fn offsets_read_back_from_text_exactly_or_not_at_all() {
    for text in [
        "",
        "null",
        "{}",
        "[]",
        r#""no_offset""#,
        r#"{"type":"NoOffset"}"#,
        r#"{"type":"timestamp","timestamp":17}"#,
        r#"{"type":"timestamp","timestamp":"2021-10-18T13:34:08.434982Z","seen":{}}"#,
        r#"{"type":"timestamp","timestamp":17,"seen":{"A|1":3}}"#,
        r#"{"type":"timestamp","timestamp":17.5,"seen":{}}"#,
        r#"{"type":"timestamp","timestamp":17,"seen":{"A|1":{"seq_nr":-1,"timestamp":17}}}"#,
        r#"{"type":"sequence","seq_nr":-3}"#,
        r#"{"type":"sequence"}"#,
        r#"{"type":"sequence","seq_nr":18446744073709551616}"#,
        r#"{"type":"timestamp","timestamp":9223372036854775808,"seen":{}}"#,
    ] {
        let read = serde_json::from_str::<Offset>(text);
        assert!(read.is_err(), "{text:?} read as {read:?}");
    }
    let mut seen = SeenMap::new();
    seen.insert(
        "A|\u{e9}\"\\".into(),
        actix_persistence::query::SeenEvent {
            seq_nr: u64::MAX,
            timestamp: i64::MIN,
        },
    );
    for offset in [
        Offset::NoOffset,
        Offset::Sequence { seq_nr: u64::MAX },
        Offset::Timestamp(TimestampOffset {
            timestamp: i64::MAX,
            seen,
        }),
    ] {
        assert_eq!(stored(&offset), offset);
    }
}

/// akka-persistence-r2dbc #36 ("Unexpected offset": an offset before or after what the query
/// expected): timestamp offsets made by hand at the ends of time (as a consumer that stores a
/// timestamp of its own, or a corrupt one) are handled as timestamps: from `i64::MIN`, -1 or
/// 0 every event comes, from `i64::MAX` none and no error, on current queries by slices and by
/// tag; a sequence offset read back from text is refused by both with `InvalidOffset`.
async fn hand_made_offsets_at_the_ends_of_time(kind: Kind) {
    let db = Db::new(kind).await;
    db.write("End|1", 1, 3, &["end"]).await;
    let q = db.query(settings(2));
    let all = vec![key("End|1", 1), key("End|1", 2), key("End|1", 3)];
    let at = |timestamp: i64| {
        Offset::Timestamp(TimestampOffset {
            timestamp,
            seen: SeenMap::new(),
        })
    };
    for (timestamp, want) in [
        (i64::MIN, all.clone()),
        (-1, all.clone()),
        (0, all.clone()),
        (i64::MAX, vec![]),
    ] {
        let offset = stored(&at(timestamp));
        assert_eq!(
            collect(
                "slices",
                q.current_events_by_slices("End", 0, 1023, offset.clone())
            )
            .await,
            want,
            "{kind:?}: by slices from {timestamp}"
        );
        assert_eq!(
            collect("tag", q.current_events_by_tag("end", offset)).await,
            want,
            "{kind:?}: by tag from {timestamp}"
        );
    }
    let sequence: Offset =
        serde_json::from_str(r#"{"type":"sequence","seq_nr":2}"#).expect("a sequence offset");
    for live in [false, true] {
        let streams = if live {
            [
                q.events_by_tag("end", sequence.clone()),
                q.events_by_slices("End", 0, 1023, sequence.clone()),
            ]
        } else {
            [
                q.current_events_by_tag("end", sequence.clone()),
                q.current_events_by_slices("End", 0, 1023, sequence.clone()),
            ]
        };
        for stream in streams {
            let items = within("sequence offset", stream.collect::<Vec<_>>()).await;
            assert!(
                matches!(
                    items.as_slice(),
                    [Err(QueryError::InvalidOffset {
                        offset: "a sequence offset",
                        ..
                    })]
                ),
                "{kind:?}: live {live}: {items:?}"
            );
        }
    }
}

/// The database timestamp of an envelope: its own entry in its offset's `seen` (an envelope's
/// offset always holds the event it follows).
fn db_timestamp(pid: &str, seq_nr: u64, offset: &Offset) -> i64 {
    let Offset::Timestamp(offset) = offset else {
        panic!("a timestamp offset, got {offset:?}");
    };
    let seen = offset
        .seen
        .get(pid)
        .unwrap_or_else(|| panic!("{pid} in its own offset {offset:?}"));
    assert_eq!(seen.seq_nr, seq_nr, "{pid}'s own entry in its offset");
    seen.timestamp
}

/// docmost PR #1446 and ldbc_snb #157 (rows paged by a text column in the database's locale
/// order, not byte order, land in the wrong place), akka-persistence-r2dbc #211 (a query by
/// slices ended early with events of one timestamp split over pages): 10 ids that differ
/// only by case, accents (NFC and NFD), `_` or a second letter write 2 events each in one
/// batch (PostgreSQL: one statement, one database timestamp), on PostgreSQL with the id, tag
/// and entity type columns in ICU's root collation (as a database created with an ICU locale
/// has them), where `a < A < b` and `_` sorts before letters. Read by slices and by tag in
/// pages of 1, 2 and 3, every event comes once in (timestamp, id bytes, seq_nr) order, and
/// resumed from any envelope's stored offset exactly the rest comes.
async fn pages_split_inside_one_timestamp_in_byte_order_whatever_the_collation(kind: Kind) {
    let db = Db::new(kind).await;
    if kind == Kind::Postgres {
        use sqlx::Connection;
        let mut admin = sqlx::PgConnection::connect(&db.backend.pg_url())
            .await
            .expect("admin connection");
        for (table, column) in [
            ("journal", "persistence_id"),
            ("journal", "entity_type"),
            ("event_tag", "persistence_id"),
            ("event_tag", "tag"),
            ("journal_highest", "persistence_id"),
        ] {
            sqlx::query(&format!(
                "ALTER TABLE {table} ALTER COLUMN {column} TYPE text COLLATE \"und-x-icu\""
            ))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("{table}.{column} in ICU's root collation: {e}"));
        }
        admin.close().await.expect("close");
    }
    let ids: Vec<String> = [
        "a", "A", "b", "B", "_", "\u{e9}", "e\u{301}", "e", "aB", "a_b",
    ]
    .iter()
    .map(|s| format!("Coll|{s}"))
    .collect();
    let writes: Vec<AtomicWrite> = ids
        .iter()
        .map(|id| {
            AtomicWrite::new(vec![event(id, 1, &["coll"]), event(id, 2, &["coll"])])
                .expect("a valid write")
        })
        .collect();
    for result in within("one batch", db.store.write_messages(writes))
        .await
        .expect("the batch")
    {
        result.expect("each write");
    }
    for page in [1, 2, 3] {
        let q = db.query(settings(page));
        for slices in [true, false] {
            let query = |offset| {
                if slices {
                    q.current_events_by_slices("Coll", 0, 1023, offset)
                } else {
                    q.current_events_by_tag("coll", offset)
                }
            };
            let all = collect_with_offsets("all", query(Offset::NoOffset)).await;
            let positions: Vec<(i64, Vec<u8>, u64)> = all
                .iter()
                .map(|((id, seq_nr), offset)| {
                    (
                        db_timestamp(id, *seq_nr, offset),
                        id.as_bytes().to_vec(),
                        *seq_nr,
                    )
                })
                .collect();
            let mut sorted = positions.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(
                positions, sorted,
                "{kind:?}: page {page}, by slices {slices}: once each, in (timestamp, id bytes, \
                 seq_nr) order"
            );
            assert_eq!(all.len(), 20, "{kind:?}: page {page}, by slices {slices}");
            for (i, (at, offset)) in all.iter().enumerate() {
                let rest: Vec<Key> = all[i + 1..].iter().map(|(k, _)| k.clone()).collect();
                assert_eq!(
                    collect("resumed", query(stored(offset))).await,
                    rest,
                    "{kind:?}: page {page}, by slices {slices}: resumed after {at:?}"
                );
            }
        }
    }
}

/// Settings at their ends (a page of 0 or `u32::MAX` events, no or an endless late-commit
/// window, 0 or `u32::MAX` pages read ahead), as a configuration typo or a test of one's own
/// gives them (akka-persistence-r2dbc #210/#211: a page size and a timestamp bound computed
/// from each other): every current query still delivers exactly the stored events, and live
/// queries by slices and by tag the next one written, on every store, without overflowing.
async fn settings_at_their_ends_still_deliver_exactly_the_events(kind: Kind) {
    let db = Db::new(kind).await;
    for id in ["Set|0", "Set|1", "Set|2"] {
        db.write(id, 1, 4, &["set"]).await;
    }
    let all: HashSet<Key> = ["Set|0", "Set|1", "Set|2"]
        .iter()
        .flat_map(|id| (1..=4).map(move |seq_nr| key(id, seq_nr)))
        .collect();
    let mut round = 0;
    for page_size in [0, 1, u32::MAX] {
        for late_commit_window in [Duration::ZERO, Duration::from_secs(2), Duration::MAX] {
            for read_ahead_pages in [0, 64, u32::MAX] {
                let what = format!(
                    "{kind:?}: page {page_size}, window {late_commit_window:?}, read ahead \
                     {read_ahead_pages}"
                );
                let q = db.query(QuerySettings {
                    page_size,
                    late_commit_window,
                    read_ahead_pages,
                    refresh_interval: Duration::from_millis(50),
                });
                for (name, stream) in [
                    (
                        "slices",
                        q.current_events_by_slices("Set", 0, 1023, Offset::NoOffset),
                    ),
                    ("tag", q.current_events_by_tag("set", Offset::NoOffset)),
                ] {
                    let got = collect(&what, stream).await;
                    assert_eq!(got.len(), all.len(), "{what}: {name}: {got:?}");
                    assert_eq!(
                        got.into_iter().collect::<HashSet<_>>(),
                        all,
                        "{what}: {name}"
                    );
                }
                assert_eq!(
                    collect(
                        &what,
                        q.current_events_by_persistence_id("Set|1", 0, u64::MAX)
                    )
                    .await,
                    (1..=4).map(|s| key("Set|1", s)).collect::<Vec<_>>(),
                    "{what}"
                );
                let ids: Vec<String> = within(
                    "ids",
                    q.current_persistence_ids(None, u64::MAX)
                        .map(|r| r.expect("an id"))
                        .collect::<Vec<_>>(),
                )
                .await;
                let ids: Vec<&String> = ids.iter().filter(|id| id.starts_with("Set|")).collect();
                assert_eq!(ids, ["Set|0", "Set|1", "Set|2"], "{what}");
                // Live, by slices and by tag: the next event written.
                round += 1;
                let (entity_type, tag) = (format!("Lv{round}"), format!("lv{round}"));
                let id = format!("{entity_type}|1");
                let mut by_slices = q.events_by_slices(&entity_type, 0, 1023, Offset::NoOffset);
                let mut by_tag = q.events_by_tag(&tag, Offset::NoOffset);
                db.write(&id, 1, 1, &[&tag]).await;
                assert_eq!(next(&what, &mut by_slices).await, key(&id, 1), "{what}");
                assert_eq!(next(&what, &mut by_tag).await, key(&id, 1), "{what}");
            }
        }
    }
}

/// The reduced case of the one above: `read_ahead_pages` far above the configuration's limit
/// of 64 (a `QuerySettings` built in code skips that check) and pages of 1. The settled pass's
/// first page comes back full (three events of one atomic write share a timestamp), so the
/// rest of its range, an hour of the store's clock, is planned as windows of the density seen
/// (1 µs), as many as may be read at once. Planned up to `read_ahead_pages`, that was billions
/// of windows, each a task, before any read came back: the query never ended. It delivers the
/// three events at once and ends, as with 64.
#[actix::test]
async fn a_read_ahead_above_the_configured_limit_plans_a_bounded_number_of_reads() {
    use actix_persistence_testkit::ControlledQueryStore;
    let store = ControlledQueryStore::new(InMemoryJournal::new());
    let control = store.control();
    let write = AtomicWrite::new((1..=3).map(|seq_nr| event("Far|1", seq_nr, &[])).collect())
        .expect("a valid write");
    for result in store.write_messages(vec![write]).await.expect("write") {
        result.expect("write");
    }
    control.advance_clock(Duration::from_secs(3600));
    for read_ahead_pages in [64, u32::MAX] {
        let q = ReadJournal::new(
            store.clone(),
            QuerySettings {
                page_size: 1,
                read_ahead_pages,
                ..QuerySettings::default()
            },
        );
        assert_eq!(
            collect(
                "an hour of history in pages of 1",
                q.current_events_by_slices("Far", 0, 1023, Offset::NoOffset)
            )
            .await,
            (1..=3).map(|s| key("Far|1", s)).collect::<Vec<_>>(),
            "read ahead {read_ahead_pages}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Live queries by persistence id

/// akka-core #28428 (a live query by persistence id on an id with no event must not complete),
/// KurrentDB #573 (a subscription from the start of a stream whose events were all deleted
/// delivers nothing appended later), YoEight/eventstore #62 (a subscription from a number
/// above the stream's last delivers the wrong events): a live `events_by_persistence_id` on an
/// id that does not exist yet delivers its events once written; on an id whose events were
/// all deleted, the events written next; from a number above the highest, exactly the events
/// from that number once written, and bounded, it ends at its bound.
async fn live_by_persistence_id_before_the_id_exists_and_past_its_end(kind: Kind) {
    let db = Db::new(kind).await;
    let q = db.query(settings(2));
    // Not there yet.
    let mut fresh = q.events_by_persistence_id("Live|new", 0, u64::MAX);
    let fresh_bounded = q.events_by_persistence_id("Live|new", 1, 2);
    db.write("Live|new", 1, 3, &[]).await;
    assert_eq!(
        vec![
            next("fresh", &mut fresh).await,
            next("fresh", &mut fresh).await,
            next("fresh", &mut fresh).await,
        ],
        vec![key("Live|new", 1), key("Live|new", 2), key("Live|new", 3)],
        "{kind:?}: a live query opened before its id existed"
    );
    assert_eq!(
        collect("fresh bounded", fresh_bounded).await,
        vec![key("Live|new", 1), key("Live|new", 2)],
        "{kind:?}: bounded, it ends at its bound"
    );
    // All deleted, then written again.
    db.write("Live|gone", 1, 3, &[]).await;
    db.delete_to("Live|gone", 3).await;
    let mut gone = q.events_by_persistence_id("Live|gone", 0, u64::MAX);
    db.write("Live|gone", 4, 5, &[]).await;
    assert_eq!(
        vec![next("gone", &mut gone).await, next("gone", &mut gone).await],
        vec![key("Live|gone", 4), key("Live|gone", 5)],
        "{kind:?}: after every event was deleted"
    );
    // From above the highest.
    db.write("Live|far", 1, 3, &[]).await;
    let mut far = q.events_by_persistence_id("Live|far", 6, u64::MAX);
    let far_bounded = q.events_by_persistence_id("Live|far", 6, 7);
    db.write("Live|far", 4, 8, &[]).await;
    assert_eq!(
        vec![
            next("far", &mut far).await,
            next("far", &mut far).await,
            next("far", &mut far).await,
        ],
        vec![key("Live|far", 6), key("Live|far", 7), key("Live|far", 8)],
        "{kind:?}: from 6 on an id whose highest was 3"
    );
    assert_eq!(
        collect("far bounded", far_bounded).await,
        vec![key("Live|far", 6), key("Live|far", 7)],
        "{kind:?}: from 6 to 7"
    );
    db.write("Live|far", 9, 9, &[]).await;
    assert_eq!(next("far", &mut far).await, key("Live|far", 9), "{kind:?}");
}

/// dnvriend/akka-persistence-inmemory #33 (`eventsByPersistenceId` returned deleted events),
/// akkadotnet/Akka.Persistence.EventStore #44 (a query over events deleted meanwhile ended with
/// an error): a live `events_by_persistence_id` in pages of 2 has delivered events 1 and 2 of 7 when
/// events up to 5 are deleted: it goes on with 6 and 7 (the page after its last was not read
/// yet), then the next event written; one that has delivered everything when the id's events
/// are all deleted delivers the next one written.
async fn live_by_persistence_id_while_events_are_deleted_under_it(kind: Kind) {
    let db = Db::new(kind).await;
    let q = db.query(settings(2));
    let pid = "Cut|1";
    db.write(pid, 1, 7, &[]).await;
    let mut live = q.events_by_persistence_id(pid, 0, u64::MAX);
    assert_eq!(
        vec![next("cut", &mut live).await, next("cut", &mut live).await],
        vec![key(pid, 1), key(pid, 2)]
    );
    db.delete_to(pid, 5).await;
    assert_eq!(
        vec![next("cut", &mut live).await, next("cut", &mut live).await],
        vec![key(pid, 6), key(pid, 7)],
        "{kind:?}: after the delete"
    );
    db.delete_to(pid, 7).await;
    db.write(pid, 8, 8, &[]).await;
    assert_eq!(next("cut", &mut live).await, key(pid, 8), "{kind:?}");
}

/// akkadotnet/akka.net #4518 (persistence-id queries only saw what passed through the local
/// journal actors, not what other nodes wrote), EventStoreDB catch-up subscriptions on one
/// node seeing appends made through another: live queries by slices, by tag and by
/// persistence id opened in one process deliver the events another process (the same
/// database opened again, which notifies only its own queries) writes, each once and in
/// order; `current_persistence_ids` lists its ids; a delete by the other process is seen by a
/// current query.
async fn live_queries_see_the_writes_of_another_process(kind: Kind) {
    let db = Db::new(kind).await;
    let writer = db.other_process().await;
    let q = db.query(settings(2));
    let mut by_slices = q.events_by_slices("Far", 0, 1023, Offset::NoOffset);
    let mut by_tag = q.events_by_tag("far", Offset::NoOffset);
    let mut by_pid = q.events_by_persistence_id("Far|1", 0, u64::MAX);
    let ids = ["Far|0", "Far|1", "Far|2"];
    for seq_nr in 1..=3 {
        for id in ids {
            let write = AtomicWrite::new(vec![event(id, seq_nr, &["far"])]).expect("a valid write");
            for result in within("write", writer.write_messages(vec![write]))
                .await
                .expect("write")
            {
                result.expect("write");
            }
        }
    }
    let written: Vec<Key> = (1..=3)
        .flat_map(|seq_nr| ids.iter().map(move |id| key(id, seq_nr)))
        .collect();
    for (what, live) in [("by slices", &mut by_slices), ("by tag", &mut by_tag)] {
        let mut got = Vec::new();
        for _ in 0..written.len() {
            got.push(next(what, live).await);
        }
        let mut per_id: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for (id, seq_nr) in &got {
            per_id.entry(id.clone()).or_default().push(*seq_nr);
        }
        assert!(
            per_id.values().all(|seqs| *seqs == vec![1, 2, 3]) && per_id.len() == 3,
            "{kind:?}: {what}: {got:?}"
        );
    }
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(next("by pid", &mut by_pid).await);
    }
    assert_eq!(
        got,
        vec![key("Far|1", 1), key("Far|1", 2), key("Far|1", 3)],
        "{kind:?}"
    );
    let listed: Vec<String> = within(
        "ids",
        q.current_persistence_ids(None, u64::MAX)
            .map(|r| r.expect("an id"))
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(listed, ids, "{kind:?}");
    within(
        "delete",
        writer.delete_messages_to("Far|0", 2, FencingToken::UNOWNED),
    )
    .await
    .expect("delete");
    assert_eq!(
        collect(
            "after the delete",
            q.current_events_by_persistence_id("Far|0", 0, u64::MAX)
        )
        .await,
        vec![key("Far|0", 3)],
        "{kind:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Slices

/// The first `n` ids `Edge|<i>` whose slice is `slice`.
fn ids_in_slice(slice: u16, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("Edge|{i}"))
        .filter(|id| slice_for_persistence_id(id) == slice)
        .take(n)
        .collect()
}

/// akka-persistence-r2dbc's slice ranges (0 and 1023 are both ends of the range a projection
/// instance reads, an off-by-one there loses an id for good): ids whose slice is 0, 1023 and
/// in between are selected exactly by single-slice queries at both ends, by `1..=1022` (none of
/// the ends) and by `0..=1023`; a range past 1023 or upside down is refused with
/// `InvalidSliceRange`, live or current; an entity type holding the separator (`Edge|1`)
/// selects nothing, not the ids `Edge|1|...` that start with it, and neither do other
/// spellings of a type (case, spaces, NFD of an NFC type).
async fn slices_at_both_ends_of_the_range(kind: Kind) {
    let db = Db::new(kind).await;
    let low = ids_in_slice(0, 2);
    let high = ids_in_slice(1023, 2);
    let mid = vec!["Edge|1|x".to_owned(), "Edge|1|".to_owned()];
    assert!(mid.iter().all(|id| {
        let s = slice_for_persistence_id(id);
        s != 0 && s != 1023
    }));
    for id in low.iter().chain(&high).chain(&mid) {
        db.write(id, 1, 2, &[]).await;
    }
    let q = db.query(settings(3));
    let ids_of = |keys: Vec<Key>| {
        let mut by_id: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for (id, seq_nr) in keys {
            by_id.entry(id).or_default().push(seq_nr);
        }
        by_id
    };
    let want = |ids: &[&Vec<String>]| -> BTreeMap<String, Vec<u64>> {
        ids.iter()
            .flat_map(|v| v.iter())
            .map(|id| (id.clone(), vec![1, 2]))
            .collect()
    };
    for (min, max, expected) in [
        (0, 0, want(&[&low])),
        (1023, 1023, want(&[&high])),
        (1, 1022, want(&[&mid])),
        (0, 1023, want(&[&low, &high, &mid])),
        (0, 1022, want(&[&low, &mid])),
        (1, 1023, want(&[&high, &mid])),
    ] {
        let got = collect(
            "slices",
            q.current_events_by_slices("Edge", min, max, Offset::NoOffset),
        )
        .await;
        assert_eq!(ids_of(got), expected, "{kind:?}: slices {min}..={max}");
    }
    assert_eq!(
        collect(
            "separator in the type",
            q.current_events_by_slices("Edge|1", 0, 1023, Offset::NoOffset)
        )
        .await,
        vec![],
        "{kind:?}: the entity type Edge|1"
    );
    // Entity types are byte-exact: another case, a space, the separator at its end, or another
    // normal form of an accented type select nothing.
    db.write("\u{c9}dge|1", 1, 1, &[]).await; // NFC
    for entity_type in ["edge", "EDGE", "Edge ", " Edge", "Edge|", "E\u{301}dge"] {
        assert_eq!(
            collect(
                "another spelling",
                q.current_events_by_slices(entity_type, 0, 1023, Offset::NoOffset)
            )
            .await,
            vec![],
            "{kind:?}: entity type {entity_type:?}"
        );
    }
    for (min, max) in [(0, 1024), (1024, 1024), (1023, 0), (u16::MAX, u16::MAX)] {
        for live in [false, true] {
            let stream = if live {
                q.events_by_slices("Edge", min, max, Offset::NoOffset)
            } else {
                q.current_events_by_slices("Edge", min, max, Offset::NoOffset)
            };
            let items = within("bad range", stream.collect::<Vec<_>>()).await;
            assert!(
                matches!(
                    items.as_slice(),
                    [Err(QueryError::InvalidSliceRange { min_slice, max_slice })]
                        if (*min_slice, *max_slice) == (min, max)
                ),
                "{kind:?}: {min}..={max} (live: {live}): {items:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Connections and reader tasks

/// Tasks alive on this runtime now.
fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Waits (a hang detector, not a timing assertion) until `done` holds, checking every 10 ms.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    within(what, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// jOOQ #15462 (a connection leaked when a reactive stream is cancelled), the
/// CJSCommonPlatform event store's "close streams to fix exhausting event-store connection
/// pools" (PR #516): 40 queries (live by slices, by tag, by persistence id; current by tag)
/// and 10 listings of
/// persistence ids over 600 events in pages of 50 are each pulled once (their first page
/// delivered, the next ones read ahead) and dropped mid-page, three times over: every reader
/// task ends and every connection goes back to the pool, and the journal then writes and a
/// new query reads every event.
async fn live_queries_dropped_mid_page_leak_no_task_and_no_connection(kind: Kind) {
    let db = Db::new(kind).await;
    for i in 0..6 {
        db.write(&format!("Drop|{i}"), 1, 100, &["drop"]).await;
    }
    let q = db.query(QuerySettings {
        page_size: 50,
        read_ahead_pages: 3,
        ..settings(50)
    });
    let baseline = alive_tasks();
    for round in 0..3 {
        let mut streams: Vec<EnvelopeStream> = Vec::new();
        for i in 0..40 {
            streams.push(match i % 4 {
                0 => q.events_by_slices("Drop", 0, 1023, Offset::NoOffset),
                1 => q.events_by_tag("drop", Offset::NoOffset),
                2 => q.events_by_persistence_id(&format!("Drop|{}", i % 6), 0, u64::MAX),
                _ => q.current_events_by_tag("drop", Offset::NoOffset),
            });
        }
        for stream in &mut streams {
            next("first envelope", stream).await;
        }
        let mut ids = Vec::new();
        for _ in 0..10 {
            let mut listing = q.current_persistence_ids(None, u64::MAX);
            within("an id", listing.next()).await;
            ids.push(listing);
        }
        drop(streams);
        drop(ids);
        until("reader tasks end", || alive_tasks() <= baseline).await;
        if db.connections_in_use().is_some() {
            until("connections back in the pool", || {
                db.connections_in_use() == Some((0, 0))
            })
            .await;
        }
        db.write("Drop|after", round + 1, round + 1, &["drop"])
            .await;
    }
    let everything = collect(
        "everything",
        q.current_events_by_slices("Drop", 0, 1023, Offset::NoOffset),
    )
    .await;
    assert_eq!(everything.len(), 603, "{kind:?}");
    assert_eq!(
        everything.iter().collect::<HashSet<_>>().len(),
        603,
        "{kind:?}: once each"
    );
}

/// Connection-pool exhaustion reports of read sides sharing a pool with the journal
/// (namely/chief-of-state #267, 70 connections for a few projections): 100 live queries (by
/// slices over four ranges, by tag, by persistence id) on a PostgreSQL journal of 6
/// connections (3 for reads) and a SQLite journal of 4 readers, while 10 ids write 20 events
/// each concurrently: every write completes, and every query delivers exactly its events, each
/// once, each id in order, without failing.
async fn a_hundred_live_queries_starve_neither_writes_nor_each_other(kind: Kind) {
    const IDS: usize = 10;
    const PER_ID: u64 = 20;
    let db = Arc::new(Db::new(kind).await);
    let q = db.query(QuerySettings {
        page_size: 10,
        ..QuerySettings::default()
    });
    let ids: Vec<String> = (0..IDS).map(|i| format!("Busy|{i}")).collect();
    let ranges = actix_persistence::query::slice_ranges(4);
    let mut consumers = Vec::new();
    for i in 0..100 {
        let (stream, expected): (EnvelopeStream, Vec<&String>) = match i % 3 {
            0 => {
                let range = ranges[i % 4].clone();
                let expected = ids
                    .iter()
                    .filter(|id| range.contains(&slice_for_persistence_id(id)))
                    .collect();
                (
                    q.events_by_slices("Busy", *range.start(), *range.end(), Offset::NoOffset),
                    expected,
                )
            }
            1 => (
                q.events_by_tag("busy", Offset::NoOffset),
                ids.iter().collect(),
            ),
            _ => {
                let id = &ids[i % IDS];
                (q.events_by_persistence_id(id, 0, u64::MAX), vec![id])
            }
        };
        let expected: HashSet<String> = expected.into_iter().cloned().collect();
        let count = expected.len() * PER_ID as usize;
        consumers.push(tokio::spawn(async move {
            let mut stream = stream;
            let mut last: BTreeMap<String, u64> = BTreeMap::new();
            for _ in 0..count {
                let item = tokio::time::timeout(Duration::from_secs(120), stream.next())
                    .await
                    .map_err(|_| format!("query {i}: hang"))?
                    .ok_or_else(|| format!("query {i}: ended"))?
                    .map_err(|e| format!("query {i}: failed: {e}"))?;
                let id = item.persistence_id.to_string();
                if !expected.contains(&id) {
                    return Err(format!("query {i}: an event of {id}"));
                }
                let previous = last.insert(id.clone(), item.seq_nr).unwrap_or(0);
                if item.seq_nr != previous + 1 {
                    return Err(format!("query {i}: {id} {} after {previous}", item.seq_nr));
                }
            }
            Ok::<usize, String>(i)
        }));
    }
    let writers = ids.iter().map(|id| {
        let db = Arc::clone(&db);
        let id = id.clone();
        async move { db.write(&id, 1, PER_ID, &["busy"]).await }
    });
    within("every write", futures::future::join_all(writers)).await;
    let mut failures = Vec::new();
    for consumer in consumers {
        match within("a consumer", consumer).await.expect("consumer task") {
            Ok(_) => {}
            Err(failure) => failures.push(failure),
        }
    }
    assert!(failures.is_empty(), "{kind:?}: {failures:#?}");
}

on_every_store!(
    persistence_ids_after_any_text_come_in_byte_order,
    persistence_ids_after_a_text_holding_nul_come_in_byte_order,
    resuming_from_an_offset_whose_events_were_deleted_since,
    hand_made_offsets_at_the_ends_of_time,
    pages_split_inside_one_timestamp_in_byte_order_whatever_the_collation,
    settings_at_their_ends_still_deliver_exactly_the_events,
    live_by_persistence_id_before_the_id_exists_and_past_its_end,
    live_by_persistence_id_while_events_are_deleted_under_it,
    live_queries_see_the_writes_of_another_process,
    slices_at_both_ends_of_the_range,
    live_queries_dropped_mid_page_leak_no_task_and_no_connection,
    a_hundred_live_queries_starve_neither_writes_nor_each_other,
);
