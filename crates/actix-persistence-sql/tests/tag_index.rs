//! The tag index (`event_tag`) follows the journal's rows on SQLite and on PostgreSQL, also when
//! a row is changed in place by hand or by another tool (migrations: SQLite 0011, PostgreSQL
//! 0013): a query by tag finds an event under the tags its row holds now, never under tags it
//! no longer holds.
#![cfg(any(feature = "sqlite", feature = "test-util"))]

mod common;

use actix_persistence_core::query::{Offset, QuerySettings, ReadJournal};
use actix_persistence_core::AtomicWrite;
use common::{backend_tests, event, write_all_ok, TestBackend};
use futures::TryStreamExt;

backend_tests! {
    an_event_retagged_in_place_is_found_under_its_new_tags_only,
    tags_differing_by_case_or_normalization_are_different_tags,
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
