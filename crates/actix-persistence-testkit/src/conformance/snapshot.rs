//! The snapshot store conformance cases S1-S14 (those of `conformance/snapshot-store.md`, then
//! this suite's own: S13's unstorable snapshots, S14's metadata listing).
//!
//! # Setup before every case
//! A fresh persistence id `p-<uuid>`; snapshots `"s-1"`..`"s-5"` (JSON strings) saved at
//! sequence numbers 11..15 with metadata m1..m5, whose timestamps are now + 10, + 20, ..,
//! + 50 ms (distinct and increasing, so "m4's timestamp - 1" lies between m3's and m4's).
//!
//! A load must return the newest snapshot matching all four bounds of the criteria, with its
//! metadata and bytes unchanged. Each case function panics with the case number and what
//! differed.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use actix_persistence_core::serialization::SerializationError;
use actix_persistence_core::{
    SelectedSnapshot, SerializedSnapshot, SnapshotMetadata, SnapshotSelectionCriteria,
    SnapshotStore,
};
use futures::future::LocalBoxFuture;
use futures::FutureExt;
use serde::{Serialize, Serializer};

use super::{fresh_pid, now_millis, within};

/// The four bounds with max seq and max timestamp set, the others at their defaults.
fn criteria(max_seq_nr: u64, max_timestamp: i64) -> SnapshotSelectionCriteria {
    SnapshotSelectionCriteria {
        max_seq_nr,
        max_timestamp,
        ..SnapshotSelectionCriteria::latest()
    }
}

/// A snapshot store with `s-1`..`s-5` saved for a fresh id.
struct Fixture {
    store: Arc<dyn SnapshotStore>,
    pid: String,
    /// `s-1`..`s-5` as saved (index 0 holds `s-1`).
    saved: Vec<SelectedSnapshot>,
}

fn json_snapshot(value: &str) -> SerializedSnapshot {
    SerializedSnapshot::json(value)
        .unwrap_or_else(|e| panic!("a string serializes as a JSON snapshot: {e}"))
}

async fn save(store: &dyn SnapshotStore, what: &str, snapshot: &SelectedSnapshot) {
    let call = store.save(snapshot.metadata.clone(), snapshot.snapshot.clone());
    if let Err(e) = within(what, call).await {
        panic!("{what} failed: {e}");
    }
}

async fn load(
    store: &dyn SnapshotStore,
    pid: &str,
    criteria: SnapshotSelectionCriteria,
) -> Option<SelectedSnapshot> {
    let what = format!("load of {pid:?} with {criteria:?}");
    match within(&what, store.load(pid, criteria)).await {
        Ok(found) => found,
        Err(e) => panic!("{what} failed: {e}"),
    }
}

/// A short description of a load's result (never the bytes of a large payload).
fn describe(snapshot: Option<&SelectedSnapshot>) -> String {
    match snapshot {
        None => "none".to_owned(),
        Some(s) => {
            let payload = &s.snapshot.payload;
            let shown = if payload.len() <= 64 {
                format!("{:?}", String::from_utf8_lossy(payload))
            } else {
                format!("{} bytes", payload.len())
            };
            format!(
                "{shown} at seq {} timestamp {} (serializer {}, manifest {:?})",
                s.metadata.seq_nr,
                s.metadata.timestamp,
                s.snapshot.serializer_id,
                s.snapshot.manifest
            )
        }
    }
}

fn expect_same(what: &str, got: Option<&SelectedSnapshot>, want: Option<&SelectedSnapshot>) {
    if got != want {
        panic!("{what}: got {}, expected {}", describe(got), describe(want));
    }
}

impl Fixture {
    async fn setup(store: Arc<dyn SnapshotStore>) -> Self {
        let pid = fresh_pid();
        let base = now_millis();
        let saved: Vec<_> = (1..=5u64)
            .map(|i| SelectedSnapshot {
                metadata: SnapshotMetadata {
                    persistence_id: pid.clone(),
                    seq_nr: 10 + i,
                    timestamp: base + 10 * i as i64,
                },
                snapshot: json_snapshot(&format!("s-{i}")),
            })
            .collect();
        for snapshot in &saved {
            save(&*store, "setup: save", snapshot).await;
        }
        Fixture { store, pid, saved }
    }

    /// Metadata m`i` (1-based).
    fn m(&self, i: usize) -> &SnapshotMetadata {
        &self.saved[i - 1].metadata
    }

    async fn load(&self, criteria: SnapshotSelectionCriteria) -> Option<SelectedSnapshot> {
        load(&*self.store, &self.pid, criteria).await
    }

    /// Checks a load with `criteria` gives `s-<want>` with its metadata (or none).
    async fn expect_load(
        &self,
        case: &str,
        criteria: SnapshotSelectionCriteria,
        want: Option<usize>,
    ) {
        let got = self.load(criteria).await;
        let want = want.map(|i| &self.saved[i - 1]);
        expect_same(
            &format!("{case} load with {criteria:?}"),
            got.as_ref(),
            want,
        );
    }

    async fn delete_matching(&self, case: &str, criteria: SnapshotSelectionCriteria) {
        let what = format!("{case} delete matching {criteria:?}");
        if let Err(e) = within(&what, self.store.delete_matching(&self.pid, criteria)).await {
            panic!("{what} failed: {e}");
        }
    }
}

/// S1: a load for an id with no snapshots finds none.
pub async fn s01_load_unknown_id(store: Arc<dyn SnapshotStore>) {
    let f = Fixture::setup(store).await;
    let got = load(&*f.store, &fresh_pid(), SnapshotSelectionCriteria::latest()).await;
    expect_same(
        "S1 load latest of an id with no snapshots",
        got.as_ref(),
        None,
    );
}

/// S2: a load with max timestamp 100 (ms since the epoch) finds none.
pub async fn s02_load_max_timestamp_too_early(store: Arc<dyn SnapshotStore>) {
    let f = Fixture::setup(store).await;
    f.expect_load("S2", criteria(u64::MAX, 100), None).await;
}

/// S3: a load with max seq 7 finds none.
pub async fn s03_load_max_seq_too_low(store: Arc<dyn SnapshotStore>) {
    let f = Fixture::setup(store).await;
    f.expect_load("S3", SnapshotSelectionCriteria::up_to(7), None)
        .await;
}

/// S4: a load of the latest gives `s-5` with m5.
pub async fn s04_load_latest(store: Arc<dyn SnapshotStore>) {
    let f = Fixture::setup(store).await;
    f.expect_load("S4", SnapshotSelectionCriteria::latest(), Some(5))
        .await;
}

/// S5: a load with max seq 13 gives `s-3`.
pub async fn s05_load_max_seq(store: Arc<dyn SnapshotStore>) {
    let f = Fixture::setup(store).await;
    f.expect_load("S5", SnapshotSelectionCriteria::up_to(13), Some(3))
        .await;
}

/// S6: a load with max seq 13 and m3's timestamp as max timestamp gives `s-3`.
pub async fn s06_load_max_seq_and_timestamp(store: Arc<dyn SnapshotStore>) {
    let f = Fixture::setup(store).await;
    let m3 = f.m(3).timestamp;
    f.expect_load("S6", criteria(13, m3), Some(3)).await;
}

/// S7: deleting the snapshot at seq 13 (m3) succeeds; a load with max seq 13 then gives `s-2`.
pub async fn s07_delete_one(store: Arc<dyn SnapshotStore>) {
    let f = Fixture::setup(store).await;
    let m3 = f.m(3).clone();
    if let Err(e) = within("S7 delete", f.store.delete(&m3)).await {
        panic!("S7: deleting the snapshot at seq 13 failed: {e}");
    }
    f.expect_load(
        "S7 after deleting m3:",
        SnapshotSelectionCriteria::up_to(13),
        Some(2),
    )
    .await;
    f.expect_load(
        "S7 after deleting m3:",
        SnapshotSelectionCriteria::latest(),
        Some(5),
    )
    .await;
}

/// S8: deleting what matches (max seq 13, m3's timestamp) succeeds; a load with the same
/// criteria then finds none, and one with (14, m4's timestamp) gives `s-4`.
pub async fn s08_delete_matching(store: Arc<dyn SnapshotStore>) {
    let f = Fixture::setup(store).await;
    let bounds = criteria(13, f.m(3).timestamp);
    f.delete_matching("S8", bounds).await;
    f.expect_load("S8 after the delete:", bounds, None).await;
    f.expect_load(
        "S8 after the delete:",
        criteria(14, f.m(4).timestamp),
        Some(4),
    )
    .await;
}

/// S9: deleting what matches (max seq 14, m4's timestamp - 1) succeeds and leaves `s-4`
/// (it removes `s-1`..`s-3`, whose timestamps are below).
pub async fn s09_delete_matching_spares_later_timestamp(store: Arc<dyn SnapshotStore>) {
    let f = Fixture::setup(store).await;
    let m4 = f.m(4).timestamp;
    f.delete_matching("S9", criteria(14, m4 - 1)).await;
    f.expect_load("S9 after the delete:", criteria(14, m4), Some(4))
        .await;
    f.expect_load(
        "S9 after the delete (s-1..s-3 matched):",
        SnapshotSelectionCriteria::up_to(13),
        None,
    )
    .await;
}

/// S10: saving `s-5-modified` again at seq 15 (later timestamp) replaces `s-5`: a load of the
/// latest gives it, and the old `s-5` is gone.
pub async fn s10_save_again_replaces(store: Arc<dyn SnapshotStore>) {
    let f = Fixture::setup(store).await;
    let old_m5 = f.m(5).clone();
    let modified = SelectedSnapshot {
        metadata: SnapshotMetadata {
            timestamp: old_m5.timestamp + 5,
            ..old_m5.clone()
        },
        snapshot: json_snapshot("s-5-modified"),
    };
    save(&*f.store, "S10 save of s-5-modified at seq 15", &modified).await;
    let got = f.load(SnapshotSelectionCriteria::latest()).await;
    expect_same("S10 load latest", got.as_ref(), Some(&modified));
    f.expect_load(
        "S10 (the old s-5 was replaced, not kept):",
        criteria(u64::MAX, old_m5.timestamp),
        Some(4),
    )
    .await;
}

/// A payload of `len` bytes covering every byte value, in an order that a shifted, truncated
/// or re-encoded copy cannot match by chance.
fn pattern(len: usize) -> Vec<u8> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 56) as u8
        })
        .collect()
}

async fn round_trip(case: &str, store: &dyn SnapshotStore, len: usize) {
    let pid = fresh_pid();
    let saved = SelectedSnapshot {
        metadata: SnapshotMetadata {
            persistence_id: pid.clone(),
            seq_nr: 1,
            timestamp: now_millis(),
        },
        snapshot: SerializedSnapshot {
            payload: pattern(len),
            serializer_id: 77,
            manifest: "bytes".to_owned(),
        },
    };
    save(store, &format!("{case} save of {len} bytes"), &saved).await;
    let Some(got) = load(store, &pid, SnapshotSelectionCriteria::latest()).await else {
        panic!("{case}: the snapshot of {len} bytes was saved but none loads");
    };
    assert_eq!(
        got.metadata, saved.metadata,
        "{case}: metadata of the {len}-byte snapshot"
    );
    assert_eq!(
        (got.snapshot.serializer_id, &got.snapshot.manifest),
        (77, &saved.snapshot.manifest),
        "{case}: serializer id and manifest of the {len}-byte snapshot"
    );
    let (got, want) = (&got.snapshot.payload, &saved.snapshot.payload);
    assert_eq!(
        got.len(),
        want.len(),
        "{case}: length of the {len}-byte snapshot"
    );
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        panic!(
            "{case}: the {len}-byte snapshot differs first at byte {i}: got {}, saved {}",
            got[i], want[i]
        );
    }
}

/// Size of the large snapshot of S11: 50 MiB.
pub const LARGE_SNAPSHOT_BYTES: usize = 50 * 1024 * 1024;

/// S11: a 10,000-byte snapshot and one of 50 MiB round-trip byte-exact (with their metadata,
/// serializer id and manifest).
pub async fn s11_large_snapshots_round_trip(store: Arc<dyn SnapshotStore>) {
    let f = Fixture::setup(store).await;
    round_trip("S11", &*f.store, 10_000).await;
    round_trip("S11", &*f.store, LARGE_SNAPSHOT_BYTES).await;
}

/// A state whose `Serialize` impl fails.
struct Unserializable;

const REFUSAL: &str = "this state refuses to be serialized (conformance case S12)";

impl Serialize for Unserializable {
    fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom(REFUSAL))
    }
}

/// S12: serializing a state whose `Serialize` fails (`SerializedSnapshot::json`) gives the
/// saver a clear error; nothing is saved and the earlier snapshots are unchanged.
pub async fn s12_unserializable_snapshot_is_an_error(store: Arc<dyn SnapshotStore>) {
    let f = Fixture::setup(store).await;
    match SerializedSnapshot::json(&Unserializable) {
        Err(SerializationError::SnapshotSerialize(message)) => assert!(
            message.contains(REFUSAL),
            "S12: the error says why the state could not be serialized: {message:?}"
        ),
        Err(other) => panic!("S12: expected a serialization error, got {other}"),
        Ok(snapshot) => panic!(
            "S12: a state whose Serialize fails was serialized into {} bytes",
            snapshot.payload.len()
        ),
    }
    f.expect_load(
        "S12 after the failed snapshot:",
        SnapshotSelectionCriteria::latest(),
        Some(5),
    )
    .await;
    f.expect_load(
        "S12 after the failed snapshot:",
        SnapshotSelectionCriteria::up_to(13),
        Some(3),
    )
    .await;
}

/// S13: what no built-in store can hold is refused by every store alike, so the same snapshot
/// gets the same answer in tests (in memory) and in production (PostgreSQL text cannot hold a
/// NUL; the SQL columns hold sequence numbers up to `i64::MAX`; no store holds more than
/// `MAX_SNAPSHOT_BYTES` of payload alike): a manifest holding a NUL, a sequence number above
/// `i64::MAX` and a payload one byte over the limit fail the save with an error; nothing is
/// saved, and `s-5` still loads as before.
pub async fn s13_unstorable_snapshot_is_refused(store: Arc<dyn SnapshotStore>) {
    let f = Fixture::setup(store).await;
    let mut nul = json_snapshot("s-nul");
    nul.manifest = "state\0v2".to_owned();
    // Zeroed memory the store refuses without reading: its pages are never touched.
    let oversized = SerializedSnapshot {
        payload: vec![0; actix_persistence_core::limits::MAX_SNAPSHOT_BYTES + 1],
        ..json_snapshot("s-large")
    };
    let unstorable = [
        ("a manifest holding a NUL", 16, nul),
        (
            "a sequence number above i64::MAX",
            i64::MAX as u64 + 1,
            json_snapshot("s-high"),
        ),
        ("a payload over MAX_SNAPSHOT_BYTES", 17, oversized),
    ];
    for (what, seq_nr, snapshot) in unstorable {
        let metadata = SnapshotMetadata {
            persistence_id: f.pid.clone(),
            seq_nr,
            timestamp: now_millis() + 60,
        };
        let saved = within("S13 save", f.store.save(metadata, snapshot)).await;
        assert!(
            saved.is_err(),
            "S13: a snapshot with {what} must be refused, as PostgreSQL refuses it"
        );
    }
    f.expect_load(
        "S13 after the refused saves:",
        SnapshotSelectionCriteria::latest(),
        Some(5),
    )
    .await;
}

/// S14: [`SnapshotStore::read_metadata`] lists the newest matching snapshots' metadata, newest
/// first, at most `limit` of them, and agrees with [`SnapshotStore::load`]: all five with a
/// large limit; the newest two with a limit of 2; `s-3` and `s-2` under max seq 13; none for a
/// limit of 0, an unknown id or a timestamp bound before every snapshot; after the snapshot at
/// seq 14 is deleted, the list skips it.
pub async fn s14_read_metadata_lists_the_newest(store: Arc<dyn SnapshotStore>) {
    let f = Fixture::setup(store).await;
    let read = |pid: String, criteria: SnapshotSelectionCriteria, limit: u32| {
        let store = Arc::clone(&f.store);
        async move {
            let what = format!("S14 read_metadata of {pid:?} with {criteria:?}, limit {limit}");
            match within(&what, store.read_metadata(&pid, criteria, limit)).await {
                Ok(found) => found,
                Err(e) => panic!("{what} failed: {e}"),
            }
        }
    };
    let metadata = |indexes: &[usize]| -> Vec<SnapshotMetadata> {
        indexes
            .iter()
            .map(|i| f.saved[*i - 1].metadata.clone())
            .collect()
    };
    let latest = SnapshotSelectionCriteria::latest();
    let cases = [
        (
            "every snapshot, limit 10",
            latest,
            10,
            metadata(&[5, 4, 3, 2, 1]),
        ),
        ("the newest two", latest, 2, metadata(&[5, 4])),
        (
            "max seq 13, limit 2",
            criteria(13, i64::MAX),
            2,
            metadata(&[3, 2]),
        ),
        ("limit 0", latest, 0, Vec::new()),
        ("max timestamp 100", criteria(u64::MAX, 100), 10, Vec::new()),
    ];
    for (what, criteria, limit, expected) in cases {
        let found = read(f.pid.clone(), criteria, limit).await;
        assert_eq!(found, expected, "S14 {what}: the metadata listed");
    }
    // As `load` sees them: the first listed is what `load` returns.
    let newest = load(&*f.store, &f.pid, latest).await.map(|s| s.metadata);
    let listed = read(f.pid.clone(), latest, 1).await;
    assert_eq!(
        listed.first().cloned(),
        newest,
        "S14: the newest listed is the one load returns"
    );
    let unknown = read(fresh_pid(), latest, 10).await;
    assert!(
        unknown.is_empty(),
        "S14: an unknown id lists nothing, got {unknown:?}"
    );
    let at_14 = f.saved[3].metadata.clone();
    if let Err(e) = within("S14 delete", f.store.delete(&at_14)).await {
        panic!("S14 delete of the snapshot at 14 failed: {e}");
    }
    let found = read(f.pid.clone(), latest, 3).await;
    assert_eq!(
        found,
        metadata(&[5, 3, 2]),
        "S14 after deleting the snapshot at 14"
    );
}

type RunCase = fn(Arc<dyn SnapshotStore>) -> LocalBoxFuture<'static, ()>;

/// One snapshot store conformance case: its name (the test name the macro gives it), the rule
/// it checks, and how to run it.
#[derive(Clone, Copy)]
pub struct SnapshotCase {
    /// The case's name, e.g. `s04_load_latest`.
    pub name: &'static str,
    /// The rule it checks, in one line.
    pub rule: &'static str,
    run: RunCase,
}

impl SnapshotCase {
    /// Runs the case against `store`.
    ///
    /// # Panics
    /// When the store does not behave as the case requires (the message says how), or when
    /// not called inside a Tokio runtime.
    pub async fn run(&self, store: Arc<dyn SnapshotStore>) {
        (self.run)(store).await;
    }
}

impl fmt::Debug for SnapshotCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotCase")
            .field("name", &self.name)
            .field("rule", &self.rule)
            .finish_non_exhaustive()
    }
}

impl super::Case for SnapshotCase {
    type Store = dyn SnapshotStore;
    const SUITE: &'static str = "snapshot store";

    fn all() -> &'static [Self] {
        CASES
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn run(&self, store: Arc<dyn SnapshotStore>) -> LocalBoxFuture<'static, ()> {
        (self.run)(store)
    }
}

/// `store`, shared as the runners pass it to a case.
fn shared<S: SnapshotStore>(store: S) -> Arc<dyn SnapshotStore> {
    Arc::new(store)
}

crate::__snapshot_cases! {
    __case_table { SnapshotCase, "Every snapshot store conformance case, in order: S1-S14." }
}

/// The snapshot case called `name` (as listed in [`CASES`]).
pub fn case(name: &str) -> Option<&'static SnapshotCase> {
    CASES.iter().find(|case| case.name == name)
}

/// Runs the case `name` in a new Actix system against a store fresh from `factory`. The
/// expansion of [`snapshot_store_conformance_tests!`](crate::snapshot_store_conformance_tests)
/// calls this.
///
/// # Panics
/// When no case is called `name`, or the case fails.
pub fn run_case<F, Fut, S>(name: &str, factory: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = S>,
    S: SnapshotStore,
{
    super::run_named_case::<SnapshotCase, _, _>(name, || {
        factory().map(|store| Some(shared(store)))
    });
}

/// Like [`run_case`], for a factory that may have no store to give (e.g. a database URL is
/// not set): `None` skips the case, printing a notice, and the test passes. The expansion of
/// the `optional:` form of the conformance macro calls this.
///
/// # Panics
/// When no case is called `name`, or the case fails.
pub fn run_case_if_available<F, Fut, S>(name: &str, factory: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Option<S>>,
    S: SnapshotStore,
{
    super::run_named_case::<SnapshotCase, _, _>(name, || factory().map(|store| store.map(shared)));
}

/// Runs every snapshot store conformance case (S1-S14), each against a store fresh from
/// `factory`, and reports all failures at once.
///
/// # Examples
/// ```
/// use actix_persistence_core::InMemorySnapshotStore;
/// use actix_persistence_testkit::conformance::{run_in_system, run_snapshot_store_suite};
///
/// run_in_system(run_snapshot_store_suite(|| async { InMemorySnapshotStore::new() }));
/// ```
///
/// # Panics
/// When any case fails: the message lists every failed case with what differed.
pub async fn run_snapshot_store_suite<F, Fut, S>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
    S: SnapshotStore,
{
    super::run_every_case::<SnapshotCase, _, _>(|| factory().map(shared)).await;
}
