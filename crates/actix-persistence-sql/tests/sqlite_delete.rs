//! Deletes, cases J13-J20 of the journal conformance: deleted events never replay, and the
//! highest sequence number is never lowered.
#![cfg(feature = "sqlite")]

mod common;

use actix_persistence_core::{JournalStore, MAX_SEQ_NR};
use common::{atomic, recover, write_all_ok, write_one_to_five, TestJournal};

const MAX: u64 = MAX_SEQ_NR;

/// A fresh journal holding seq 1..5 of `p-1`, with 1..3 deleted.
async fn journal_with_one_to_three_deleted() -> TestJournal {
    let db = TestJournal::open().await;
    write_one_to_five(&db.journal, "p-1").await;
    db.journal.delete_messages_to("p-1", 3).await.unwrap();
    db
}

#[tokio::test]
async fn j13_delete_to_three_then_replay_gives_four_and_five() {
    let db = journal_with_one_to_three_deleted().await;
    assert_eq!(
        recover(&db.journal, "p-1", 1, MAX, MAX).await,
        (vec![4, 5], 5)
    );
}

#[tokio::test]
async fn j14_delete_between_replays_never_resets_highest() {
    let db = TestJournal::open().await;
    write_one_to_five(&db.journal, "p-1").await;
    assert_eq!(
        recover(&db.journal, "p-1", 1, MAX, MAX).await,
        (vec![1, 2, 3, 4, 5], 5)
    );
    db.journal.delete_messages_to("p-1", 3).await.unwrap();
    assert_eq!(
        recover(&db.journal, "p-1", 1, MAX, MAX).await,
        (vec![4, 5], 5)
    );
}

#[tokio::test]
async fn j15_delete_to_max_deletes_everything_and_keeps_highest() {
    let db = TestJournal::open().await;
    write_one_to_five(&db.journal, "p-1").await;
    db.journal.delete_messages_to("p-1", MAX).await.unwrap();
    assert_eq!(recover(&db.journal, "p-1", 1, MAX, MAX).await, (vec![], 5));
    assert_eq!(
        db.journal.read_highest_sequence_nr("p-1", 0).await.unwrap(),
        5
    );
}

#[tokio::test]
async fn j16_replay_from_a_deleted_seq_nr() {
    let db = journal_with_one_to_three_deleted().await;
    assert_eq!(
        recover(&db.journal, "p-1", 3, MAX, MAX).await,
        (vec![4, 5], 5)
    );
}

#[tokio::test]
async fn j17_replay_inside_the_deleted_range() {
    let db = journal_with_one_to_three_deleted().await;
    assert_eq!(recover(&db.journal, "p-1", 1, 2, MAX).await, (vec![], 5));
}

#[tokio::test]
async fn j18_replay_up_to_the_last_deleted() {
    let db = journal_with_one_to_three_deleted().await;
    assert_eq!(recover(&db.journal, "p-1", 1, 3, MAX).await, (vec![], 5));
}

#[tokio::test]
async fn j19_replay_from_the_first_kept() {
    let db = journal_with_one_to_three_deleted().await;
    assert_eq!(
        recover(&db.journal, "p-1", 4, MAX, MAX).await,
        (vec![4, 5], 5)
    );
}

#[tokio::test]
async fn j20_replay_across_the_delete_boundary() {
    let db = journal_with_one_to_three_deleted().await;
    assert_eq!(recover(&db.journal, "p-1", 1, 4, MAX).await, (vec![4], 5));
}

#[tokio::test]
async fn delete_touches_only_its_own_persistence_id() {
    let db = TestJournal::open().await;
    write_one_to_five(&db.journal, "p-1").await;
    write_one_to_five(&db.journal, "p-10").await;
    write_one_to_five(&db.journal, "P-1").await;
    db.journal.delete_messages_to("p-1", MAX).await.unwrap();
    assert_eq!(recover(&db.journal, "p-1", 1, MAX, MAX).await, (vec![], 5));
    assert_eq!(
        recover(&db.journal, "p-10", 1, MAX, MAX).await,
        (vec![1, 2, 3, 4, 5], 5)
    );
    assert_eq!(
        recover(&db.journal, "P-1", 1, MAX, MAX).await,
        (vec![1, 2, 3, 4, 5], 5)
    );
}

#[tokio::test]
async fn delete_of_unknown_id_or_to_zero_is_a_no_op() {
    let db = TestJournal::open().await;
    write_one_to_five(&db.journal, "p-1").await;
    db.journal
        .delete_messages_to("never-wrote", MAX)
        .await
        .unwrap();
    db.journal.delete_messages_to("p-1", 0).await.unwrap();
    assert_eq!(
        recover(&db.journal, "p-1", 1, MAX, MAX).await,
        (vec![1, 2, 3, 4, 5], 5)
    );
    assert_eq!(
        recover(&db.journal, "never-wrote", 1, MAX, MAX).await,
        (vec![], 0)
    );
}

#[tokio::test]
async fn writes_after_a_full_delete_continue_the_sequence() {
    let db = TestJournal::open().await;
    write_one_to_five(&db.journal, "p-1").await;
    db.journal.delete_messages_to("p-1", MAX).await.unwrap();
    write_all_ok(&db.journal, vec![atomic("p-1", 6..=7)]).await;
    assert_eq!(
        recover(&db.journal, "p-1", 1, MAX, MAX).await,
        (vec![6, 7], 7)
    );
}
