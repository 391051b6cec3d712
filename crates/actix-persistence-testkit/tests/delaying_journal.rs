//! The delaying store wrapper for benchmarks: which writes it delays, by how much, and that the
//! choice depends only on the seed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_persistence_core::{AtomicWrite, InMemoryJournal, JournalStore, PersistentRepr};
use actix_persistence_testkit::{DelayProfile, DelayedWrite, DelayingJournal};

fn write(pid: &str, seq_nr: u64) -> AtomicWrite {
    AtomicWrite::new(vec![PersistentRepr {
        persistence_id: pid.into(),
        seq_nr,
        payload: b"\"x\"".to_vec(),
        serializer_id: 1,
        manifest: String::new(),
        writer_uuid: "w".into(),
        timestamp: 0,
        tags: Default::default(),
    }])
    .expect("well-formed write")
}

fn profile(percent: f64, min_ms: u64, max_ms: u64, seed: u64) -> DelayProfile {
    DelayProfile::new(
        percent,
        Duration::from_millis(min_ms)..=Duration::from_millis(max_ms),
        seed,
    )
}

async fn run(store: &DelayingJournal<InMemoryJournal>, writes: u64) {
    for seq_nr in 1..=writes {
        let results = store
            .write_messages(vec![write("p", seq_nr)])
            .await
            .expect("write");
        assert!(results[0].is_ok());
    }
}

#[actix::test]
async fn the_same_seed_delays_the_same_writes_by_the_same_amounts() {
    let first = DelayingJournal::new(InMemoryJournal::new(), profile(30.0, 1, 3, 9));
    let second = DelayingJournal::new(InMemoryJournal::new(), profile(30.0, 1, 3, 9));
    run(&first, 60).await;
    run(&second, 60).await;
    let delayed = first.delayed_writes();
    assert_eq!(delayed, second.delayed_writes());
    assert!(
        (6..=32).contains(&delayed.len()),
        "about 30 % of 60 writes delayed, got {}",
        delayed.len()
    );
    for d in &delayed {
        assert!(
            (Duration::from_millis(1)..=Duration::from_millis(3)).contains(&d.delay),
            "{d:?}"
        );
    }
    assert_eq!(first.writes_seen(), 60);

    let other_seed = DelayingJournal::new(InMemoryJournal::new(), profile(30.0, 1, 3, 10));
    run(&other_seed, 60).await;
    assert_ne!(
        other_seed.delayed_writes(),
        delayed,
        "another seed, other writes"
    );
}

#[actix::test]
async fn a_delayed_write_is_held_for_its_delay_and_recorded() {
    let store = Arc::new(DelayingJournal::new(
        InMemoryJournal::new(),
        profile(100.0, 25, 25, 1),
    ));
    let as_store: Arc<dyn JournalStore> = store.clone();
    let started = Instant::now();
    as_store
        .write_messages(vec![write("q", 1), write("q", 2)])
        .await
        .expect("write");
    assert!(started.elapsed() >= Duration::from_millis(25));
    assert_eq!(
        store.delayed_writes(),
        vec![DelayedWrite {
            call: 0,
            delay: Duration::from_millis(25),
            persistence_id: "q".to_owned(),
            from_seq_nr: 1,
            to_seq_nr: 2,
            atomic_writes: 2,
        }]
    );
    assert_eq!(
        store
            .inner()
            .read_highest_sequence_nr("q", 0)
            .await
            .expect("read"),
        2,
        "the delayed write reached the store"
    );
}

#[actix::test]
async fn zero_percent_delays_nothing() {
    let store = DelayingJournal::new(InMemoryJournal::new(), profile(0.0, 100, 500, 3));
    let started = Instant::now();
    run(&store, 50).await;
    assert!(store.delayed_writes().is_empty());
    assert!(started.elapsed() < Duration::from_millis(100));
}

#[test]
#[should_panic(expected = "must be a percentage (0 to 100), not 101")]
fn a_share_above_100_percent_is_a_mistake() {
    DelayingJournal::new(InMemoryJournal::new(), profile(101.0, 1, 2, 0));
}

#[test]
#[should_panic(expected = "is above the longest")]
fn a_range_upside_down_is_a_mistake() {
    DelayingJournal::new(InMemoryJournal::new(), profile(1.0, 5, 2, 0));
}
