//! A refresh interval longer than the clock can add (a setting such as `"300000000000y"`, which
//! the configuration accepts) means "never by time": live queries still deliver what is stored
//! and what the journal's write notifications announce, and never panic computing when their
//! next round is due (`Instant + Duration` overflowed there).

use std::time::Duration;

use actix_persistence_core::query::{EnvelopeStream, Offset, QuerySettings, ReadJournal};
use actix_persistence_core::{AtomicWrite, InMemoryJournal, JournalStore, PersistentRepr};
use futures::StreamExt;

const PID: &str = "Long|1";

async fn write(journal: &InMemoryJournal, seq_nr: u64) {
    let write = AtomicWrite::new(vec![PersistentRepr {
        persistence_id: PID.into(),
        seq_nr,
        payload: b"{}".to_vec(),
        serializer_id: 1,
        manifest: String::new(),
        writer_uuid: "w".into(),
        timestamp: 0,
        tags: Default::default(),
    }])
    .expect("a well-shaped write");
    let results = journal.write_messages(vec![write]).await.expect("write");
    assert!(results.iter().all(Result::is_ok), "write {seq_nr}");
}

fn read_journal(journal: &InMemoryJournal) -> ReadJournal {
    let settings = QuerySettings {
        refresh_interval: Duration::MAX,
        ..QuerySettings::default()
    };
    ReadJournal::new(journal.clone(), settings)
}

/// The sequence number of the next element (a notification of the write wakes the query).
async fn next_seq_nr(stream: &mut EnvelopeStream) -> u64 {
    let next = tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .expect("the write's notification wakes the query");
    next.expect("a live query does not end")
        .expect("an envelope")
        .seq_nr
}

#[tokio::test]
async fn a_live_query_by_persistence_id_with_the_longest_refresh_interval_goes_on() {
    let journal = InMemoryJournal::new();
    write(&journal, 1).await;
    let mut live = read_journal(&journal).events_by_persistence_id(PID, 1, u64::MAX);
    assert_eq!(next_seq_nr(&mut live).await, 1);
    write(&journal, 2).await;
    assert_eq!(next_seq_nr(&mut live).await, 2);
}

#[tokio::test]
async fn a_live_query_by_slices_with_the_longest_refresh_interval_goes_on() {
    let journal = InMemoryJournal::new();
    write(&journal, 1).await;
    let mut live = read_journal(&journal).events_by_slices("Long", 0, 1023, Offset::NoOffset);
    assert_eq!(next_seq_nr(&mut live).await, 1);
    write(&journal, 2).await;
    assert_eq!(next_seq_nr(&mut live).await, 2);
}
