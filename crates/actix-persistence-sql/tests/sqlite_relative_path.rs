//! A SQLite journal opened by a relative path keeps reading and writing the file it opened
//! after the process changes its working directory (a daemon that `chdir`s after startup).
//! Alone in its test binary: the working directory is the whole process's.
#![cfg(feature = "sqlite")]

mod common;

use actix_persistence_core::{JournalStore, MAX_SEQ_NR};
use actix_persistence_sql::{SqliteJournal, SqliteJournalOptions};
use common::{recover, write_one_to_five};

#[tokio::test]
async fn a_relative_path_names_the_file_of_the_directory_it_was_opened_in() {
    let first = tempfile::tempdir().expect("a directory");
    let second = tempfile::tempdir().expect("another directory");
    std::env::set_current_dir(first.path()).expect("into the first directory");
    let journal = SqliteJournal::connect(&SqliteJournalOptions::new("sqlite:app.db"))
        .await
        .expect("a journal");
    write_one_to_five(&journal, "a").await;
    // Another process's database of the same name in the next working directory.
    std::env::set_current_dir(second.path()).expect("into the second directory");
    let other = SqliteJournal::connect(&SqliteJournalOptions::new("sqlite:app.db"))
        .await
        .expect("another journal");
    other.close().await;
    // Replays (on connections opened after the change) and the highest sequence number read
    // the file the journal opened.
    let replays = futures::future::join_all(
        (0..4).map(|_| recover(&journal, "a", 1, MAX_SEQ_NR, MAX_SEQ_NR)),
    );
    for (seq_nrs, highest) in replays.await {
        assert_eq!(seq_nrs, [1, 2, 3, 4, 5]);
        assert_eq!(highest, 5);
    }
    assert_eq!(
        journal
            .read_highest_sequence_nr("a", 0)
            .await
            .expect("highest"),
        5
    );
    journal.close().await;
    assert!(first.path().join("app.db").exists());
}
