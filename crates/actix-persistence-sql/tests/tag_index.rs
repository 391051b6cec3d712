//! The tag index (`event_tag`) follows the journal's rows on SQLite and on PostgreSQL, also when
//! a row is changed in place by hand or by another tool (migrations: SQLite 0011, PostgreSQL
//! 0013): a query by tag finds an event under the tags its row holds now, never under tags it
//! no longer holds.
#![cfg(any(feature = "sqlite", feature = "test-util"))]

mod common;

use actix_persistence_core::query::{Offset, QuerySettings, ReadJournal};
use actix_persistence_core::{AtomicWrite, JournalStore, Tags, MAX_SEQ_NR};
use common::{backend_tests, event, write_all_ok, TestBackend};
use futures::TryStreamExt;

backend_tests! {
    an_event_retagged_in_place_is_found_under_its_new_tags_only,
    tags_differing_by_case_or_normalization_are_different_tags,
    a_run_of_equally_tagged_events_shares_one_tags,
}

/// Events 1 to `n` of `pid`, each tagged `tags`.
fn tagged(pid: &str, n: u64, tags: &[&str]) -> AtomicWrite {
    let events = (1..=n)
        .map(|seq_nr| {
            let mut event = event(pid, seq_nr);
            event.tags = tags.iter().map(|t| (*t).to_owned()).collect();
            event
        })
        .collect();
    AtomicWrite::new(events).expect("consecutive")
}

/// Sets the `tags` of the journal rows `condition` selects to `tags`, as another tool would.
async fn set_tags<B: TestBackend>(db: &B, condition: &str, tags: &[&str]) {
    let tags = B::tags_literal(tags);
    db.execute(&format!(
        "UPDATE journal SET tags = {tags} WHERE {condition}"
    ))
    .await;
}

/// The (persistence id, seq_nr) of every event `current_events_by_tag(tag)` delivers.
async fn by_tag<B: TestBackend>(journal: &B::Journal, tag: &str) -> Vec<(String, u64)> {
    ReadJournal::new(journal.clone(), QuerySettings::default())
        .current_events_by_tag(tag, Offset::NoOffset)
        .map_ok(|envelope| (envelope.persistence_id.to_string(), envelope.seq_nr))
        .try_collect()
        .await
        .expect("query by tag")
}

fn events(pid: &str, seq_nrs: &[u64]) -> Vec<(String, u64)> {
    seq_nrs.iter().map(|&n| (pid.to_owned(), n)).collect()
}

async fn an_event_retagged_in_place_is_found_under_its_new_tags_only<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    write_all_ok(&journal, vec![tagged("Acct|1", 4, &["old"])]).await;
    assert_eq!(
        by_tag::<B>(&journal, "old").await,
        events("Acct|1", &[1, 2, 3, 4])
    );

    // An update of other columns, or of the tags to what they were, changes nothing.
    db.execute("UPDATE journal SET manifest = 'Renamed' WHERE persistence_id = 'Acct|1'")
        .await;
    set_tags(&db, "persistence_id = 'Acct|1'", &["old"]).await;
    assert_eq!(
        by_tag::<B>(&journal, "old").await,
        events("Acct|1", &[1, 2, 3, 4])
    );

    // One event re-tagged, one stripped of its tags, in one statement each.
    set_tags(
        &db,
        "persistence_id = 'Acct|1' AND seq_nr = 2",
        &["new", "other"],
    )
    .await;
    set_tags(&db, "persistence_id = 'Acct|1' AND seq_nr = 3", &[]).await;
    assert_eq!(
        by_tag::<B>(&journal, "old").await,
        events("Acct|1", &[1, 4])
    );
    assert_eq!(by_tag::<B>(&journal, "new").await, events("Acct|1", &[2]));
    assert_eq!(by_tag::<B>(&journal, "other").await, events("Acct|1", &[2]));

    // Many rows in one statement (PostgreSQL's trigger runs once per statement).
    set_tags(&db, "persistence_id = 'Acct|1'", &["all"]).await;
    assert_eq!(
        by_tag::<B>(&journal, "all").await,
        events("Acct|1", &[1, 2, 3, 4])
    );
    for gone in ["old", "new", "other"] {
        assert_eq!(by_tag::<B>(&journal, gone).await, Vec::new(), "{gone}");
    }
}

/// (Adversarial, after akka-persistence-jdbc's case-insensitive tag matching on MySQL and
/// Cassandra's tag normalization.) Tags that differ only by case, by Unicode normalization
/// (precomposed "é" against "e" + combining acute), or by a trailing space are different
/// tags: each query by tag delivers exactly its own events, once each, and
/// an event carrying "T" and "t" is delivered once by each.
async fn tags_differing_by_case_or_normalization_are_different_tags<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    let precomposed = "caf\u{e9}";
    let decomposed = "cafe\u{301}";
    let writes = vec![
        tagged("Case|1", 1, &["Tag"]),
        tagged("Case|2", 1, &["tag"]),
        tagged("Case|3", 1, &["TAG", "tag"]),
        tagged("Case|4", 1, &[precomposed]),
        tagged("Case|5", 1, &[decomposed]),
        tagged("Case|6", 1, &["tag "]),
    ];
    write_all_ok(&journal, writes).await;
    let cases = vec![
        ("Tag", vec!["Case|1"]),
        ("tag", vec!["Case|2", "Case|3"]),
        ("TAG", vec!["Case|3"]),
        (precomposed, vec!["Case|4"]),
        (decomposed, vec!["Case|5"]),
        ("tag ", vec!["Case|6"]),
    ];
    for (tag, ids) in cases {
        let mut got = by_tag::<B>(&journal, tag).await;
        got.sort();
        let want: Vec<(String, u64)> = ids.iter().map(|id| ((*id).to_owned(), 1)).collect();
        assert_eq!(got, want, "events tagged {tag:?}");
    }
}

/// Events `from..=to` of `pid`, each tagged `tags`.
fn tagged_range(pid: &str, from: u64, to: u64, tags: &[&str]) -> AtomicWrite {
    let events = (from..=to)
        .map(|seq_nr| {
            let mut event = event(pid, seq_nr);
            event.tags = Tags::from(tags);
            event
        })
        .collect();
    AtomicWrite::new(events).expect("consecutive")
}

/// Whether each event's tags share the allocation of the event before it exactly where the
/// two are equal (a page's run of equal tags is decoded once, `TagsInterner`).
fn shared_with_previous(tags: &[Tags]) -> Vec<bool> {
    tags.windows(2)
        .map(|pair| Tags::ptr_eq(&pair[0], &pair[1]))
        .collect()
}

/// A page's events read back with the tags of their own rows, runs of equal tags sharing one
/// `Tags` (no allocation per event), by a query and by a replay; a change of tags between two
/// rows, and back, starts a new one.
async fn a_run_of_equally_tagged_events_shares_one_tags<B: TestBackend>(db: B) {
    let journal = db.journal().await;
    // One write per line: the rows come back in this order (by timestamp).
    let writes = vec![
        tagged_range("Run|a", 1, 3, &["x", "y"]),
        tagged_range("Run|b", 1, 1, &["z"]),
        tagged_range("Run|a", 4, 5, &["x", "y"]),
        tagged_range("Run|c", 1, 2, &[]),
        tagged_range("Run|a", 6, 6, &["x"]),
    ];
    for write in writes {
        write_all_ok(&journal, vec![write]).await;
    }
    let envelopes: Vec<_> = ReadJournal::new(journal.clone(), QuerySettings::default())
        .current_events_by_slices("Run", 0, 1023, Offset::NoOffset)
        .try_collect()
        .await
        .expect("query by slices");
    let got: Vec<(String, u64, Vec<String>)> = envelopes
        .iter()
        .map(|e| (e.persistence_id.to_string(), e.seq_nr, e.tags.to_vec()))
        .collect();
    let want: Vec<(String, u64, Vec<String>)> = [
        ("Run|a", 1, &["x", "y"][..]),
        ("Run|a", 2, &["x", "y"]),
        ("Run|a", 3, &["x", "y"]),
        ("Run|b", 1, &["z"]),
        ("Run|a", 4, &["x", "y"]),
        ("Run|a", 5, &["x", "y"]),
        ("Run|c", 1, &[]),
        ("Run|c", 2, &[]),
        ("Run|a", 6, &["x"]),
    ]
    .iter()
    .map(|(id, n, tags)| {
        (
            (*id).to_owned(),
            *n,
            tags.iter().map(|t| (*t).to_owned()).collect(),
        )
    })
    .collect();
    assert_eq!(got, want);
    let tags: Vec<Tags> = envelopes.iter().map(|e| e.tags.clone()).collect();
    assert_eq!(
        shared_with_previous(&tags),
        [true, true, false, false, true, false, true, false],
        "runs of equal tags share one allocation"
    );
    // A replay of one id: its rows' tags, runs shared.
    let replayed: Vec<Tags> = journal
        .replay_messages("Run|a", 1, MAX_SEQ_NR, MAX_SEQ_NR)
        .map_ok(|event| event.tags)
        .try_collect()
        .await
        .expect("replay");
    assert_eq!(replayed.len(), 6);
    assert_eq!(replayed[5], ["x"]);
    assert_eq!(replayed[0], ["x", "y"]);
    assert_eq!(
        shared_with_previous(&replayed),
        [true, true, true, true, false],
        "a replay's runs of equal tags share one allocation"
    );
}
