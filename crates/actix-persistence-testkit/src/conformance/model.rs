//! The journal model check: generated interleavings of writes, deletes and replays over three
//! persistence ids, run through the journal actor, compared with a simple model (per id: the
//! stored events, and the highest sequence number ever written).
//!
//! Generation and shrinking use proptest's [`TestRunner`] and [`ValueTree`]s, driven by hand
//! so each case can be awaited inside the Actix system the suite already runs in. Every run
//! of a case (including each shrinking step) uses three fresh persistence ids, so the store
//! need not be emptied between runs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use actix_persistence_core::{JournalStore, PersistentRepr, MAX_SEQ_NR};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use super::fresh_pid;
use super::journal::{all_stored, atomic, JournalUnderTest, Writer};

/// Number of persistence ids each generated case works on.
pub const MODEL_IDS: usize = 3;

/// How much the model check generates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCheckConfig {
    /// Generated cases (sequences of operations). Default 32.
    pub cases: u32,
    /// At most this many operations per case. Default 40.
    pub max_ops: usize,
    /// Seed of the generator; `None` picks a random one (reported on failure). Default `None`.
    pub seed: Option<u64>,
    /// At most this many runs spent shrinking a failing case. Default 256.
    pub max_shrink_iters: u32,
}

/// Env var overriding [`ModelCheckConfig::cases`] in [`ModelCheckConfig::from_env`].
pub const CASES_ENV: &str = "ACTIX_PERSISTENCE_MODEL_CASES";
/// Env var setting [`ModelCheckConfig::seed`] in [`ModelCheckConfig::from_env`].
pub const SEED_ENV: &str = "ACTIX_PERSISTENCE_MODEL_SEED";

impl Default for ModelCheckConfig {
    fn default() -> Self {
        ModelCheckConfig {
            cases: 32,
            max_ops: 40,
            seed: None,
            max_shrink_iters: 256,
        }
    }
}

impl ModelCheckConfig {
    /// The defaults, with `cases` from `ACTIX_PERSISTENCE_MODEL_CASES` and `seed` from
    /// `ACTIX_PERSISTENCE_MODEL_SEED` when set (to replay a reported failure, or to run more
    /// cases in a nightly job).
    ///
    /// # Panics
    /// When one of them is set but is not an unsigned integer (a mistake in the test setup).
    pub fn from_env() -> Self {
        let read = |name: &str| -> Option<u64> {
            let value = std::env::var(name).ok()?;
            match value.trim().parse() {
                Ok(n) => Some(n),
                Err(_) => panic!("{name}={value:?} is not an unsigned integer"),
            }
        };
        let mut config = Self::default();
        if let Some(cases) = read(CASES_ENV) {
            config.cases = u32::try_from(cases)
                .unwrap_or_else(|_| panic!("{CASES_ENV}={cases} is above {}", u32::MAX));
        }
        config.seed = read(SEED_ENV);
        config
    }
}

/// A sequence number argument, resolved against the model when the operation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqArg {
    /// This number.
    Abs(u64),
    /// The id's highest sequence number plus this (never below 0).
    NearHighest(i64),
    /// `u64::MAX`.
    Max,
}

/// One generated operation on id `id` (0, 1 or 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// One `WriteMessages` of atomic writes of these sizes, at highest + 1 onwards.
    Write {
        /// Which id.
        id: usize,
        /// Events per atomic write.
        sizes: Vec<u64>,
    },
    /// Delete up to `to`.
    Delete {
        /// Which id.
        id: usize,
        /// Up to which sequence number.
        to: SeqArg,
    },
    /// `replay(from, to, max)`.
    Replay {
        /// Which id.
        id: usize,
        /// Lower bound.
        from: SeqArg,
        /// Upper bound.
        to: SeqArg,
        /// At most this many events.
        max: u64,
    },
    /// Read the highest sequence number.
    ReadHighest {
        /// Which id.
        id: usize,
    },
}

fn seq_arg() -> impl Strategy<Value = SeqArg> {
    prop_oneof![
        4 => (0u64..=40).prop_map(SeqArg::Abs),
        3 => (-3i64..=3).prop_map(SeqArg::NearHighest),
        1 => Just(SeqArg::Max),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0..MODEL_IDS;
    prop_oneof![
        4 => (id.clone(), vec(1u64..=4, 1..=3)).prop_map(|(id, sizes)| Op::Write { id, sizes }),
        2 => (id.clone(), seq_arg()).prop_map(|(id, to)| Op::Delete { id, to }),
        3 => (id.clone(), seq_arg(), seq_arg(), prop_oneof![0u64..=6, Just(u64::MAX)])
            .prop_map(|(id, from, to, max)| Op::Replay { id, from, to, max }),
        1 => id.prop_map(|id| Op::ReadHighest { id }),
    ]
}

/// What the journal should hold for one id.
#[derive(Debug, Default)]
struct ModelId {
    events: BTreeMap<u64, PersistentRepr>,
    highest: u64,
    /// Events a delete removed. A delete removes the events stored when it runs: an event
    /// written later is live even below the delete's bound (writes go at highest + 1, so that
    /// happens only after a delete beyond the highest).
    deleted: BTreeSet<u64>,
}

impl ModelId {
    fn resolve(&self, arg: SeqArg) -> u64 {
        match arg {
            SeqArg::Abs(n) => n,
            SeqArg::Max => MAX_SEQ_NR,
            SeqArg::NearHighest(d) => self.highest.saturating_add_signed(d),
        }
    }
}

/// The model check found the journal disagreeing with the model.
#[derive(Debug, Clone)]
pub struct ModelMismatch {
    /// The seed that generated the failing case (set `ACTIX_PERSISTENCE_MODEL_SEED` to it to
    /// run the same cases again).
    pub seed: u64,
    /// The smallest failing sequence of operations found.
    pub ops: Vec<Op>,
    /// What differed, at which operation.
    pub message: String,
}

impl fmt::Display for ModelMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "the journal disagrees with the model (seed {}; rerun with {SEED_ENV}={}):",
            self.seed, self.seed
        )?;
        writeln!(f, "{}", self.message)?;
        writeln!(f, "smallest failing operations (ids 0..{MODEL_IDS}):")?;
        for (i, op) in self.ops.iter().enumerate() {
            writeln!(f, "  #{i}: {op:?}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ModelMismatch {}

/// Generates `config.cases` sequences of writes (single and multi-event atomic writes at
/// highest + 1), deletes (to any sequence number, including beyond the highest and `MAX`),
/// replays (any from, to and max) and reads of the highest sequence number over three ids;
/// runs each through a [`JournalActor`](actix_persistence_core::journal::JournalActor) over
/// `store`, and checks after every operation that the journal agrees with a simple model:
/// every write succeeds, a replay returns exactly the model's events (byte-exact; never one
/// twice, never out of order, never a deleted one) and the highest ever written.
///
/// Must run inside an Actix system. Each run uses fresh persistence ids.
///
/// # Panics
/// When the store answers an operation with an error or not at all (within
/// [`ANSWER_WITHIN`](super::ANSWER_WITHIN)): that is no disagreement to shrink.
///
/// # Errors
/// [`ModelMismatch`] with the seed, the smallest failing sequence found by shrinking, and
/// what differed.
pub async fn check_journal_against_model<S: JournalStore>(
    store: S,
    config: &ModelCheckConfig,
) -> Result<(), ModelMismatch> {
    let journal = JournalUnderTest::start(Arc::new(store));
    let seed = config.seed.unwrap_or_else(rand::random);
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: config.cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(seed)),
    );
    let strategy = vec(op(), 1..=config.max_ops.max(1));
    for _ in 0..config.cases {
        let mut tree = strategy
            .new_tree(&mut runner)
            .unwrap_or_else(|reason| panic!("generating operations failed: {reason}"));
        let Err(message) = run_ops(&journal, &tree.current()).await else {
            continue;
        };
        let mut smallest = (tree.current(), message);
        let mut iters = 0;
        if tree.simplify() {
            while iters < config.max_shrink_iters {
                iters += 1;
                let ops = tree.current();
                match run_ops(&journal, &ops).await {
                    Err(message) => {
                        smallest = (ops, message);
                        if !tree.simplify() {
                            break;
                        }
                    }
                    Ok(()) => {
                        if !tree.complicate() {
                            break;
                        }
                    }
                }
            }
        }
        return Err(ModelMismatch {
            seed,
            ops: smallest.0,
            message: smallest.1,
        });
    }
    Ok(())
}

/// 32 seed bytes for ChaCha from a `u64` (splitmix64).
fn seed_bytes(seed: u64) -> [u8; 32] {
    let mut state = seed;
    let mut bytes = [0u8; 32];
    for chunk in bytes.chunks_mut(8) {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    bytes
}

/// Runs `ops` on three fresh ids; `Err` says where and how the journal left the model.
async fn run_ops(journal: &JournalUnderTest, ops: &[Op]) -> Result<(), String> {
    let writers: Vec<Writer> = (0..MODEL_IDS).map(|_| Writer::new(fresh_pid())).collect();
    let mut model: Vec<ModelId> = (0..MODEL_IDS).map(|_| ModelId::default()).collect();
    for (i, op) in ops.iter().enumerate() {
        let at = |pid: &str| format!("operation #{i} {op:?} on {pid:?}");
        match op {
            Op::Write { id, sizes } => {
                let (writer, m) = (&writers[*id], &mut model[*id]);
                let mut next = m.highest + 1;
                let mut writes = Vec::new();
                for &k in sizes {
                    let events: Vec<_> = (next..next + k)
                        .map(|seq_nr| model_event(writer, seq_nr))
                        .collect();
                    next += k;
                    writes.push(atomic(events));
                }
                let stored: Vec<_> = writes.iter().flat_map(|w| w.events.clone()).collect();
                let reply = journal
                    .write(&at(&writer.pid), writer.incarnation, writes)
                    .await;
                all_stored(&at(&writer.pid), reply, sizes.len())?;
                for event in stored {
                    m.highest = m.highest.max(event.seq_nr);
                    m.events.insert(event.seq_nr, event);
                }
            }
            Op::Delete { id, to } => {
                let (writer, m) = (&writers[*id], &mut model[*id]);
                let to = m.resolve(*to);
                journal.delete(&writer.pid, to).await;
                let removed: Vec<u64> = m.events.range(..=to).map(|(&s, _)| s).collect();
                for seq_nr in removed {
                    m.events.remove(&seq_nr);
                    m.deleted.insert(seq_nr);
                }
            }
            Op::Replay { id, from, to, max } => {
                let (writer, m) = (&writers[*id], &model[*id]);
                let (from, to) = (m.resolve(*from), m.resolve(*to));
                let got = journal.replay(&writer.pid, from, to, *max).await;
                let what = format!(
                    "{} resolved to replay({from}, {to}, {max})",
                    at(&writer.pid)
                );
                check_against_model(&what, m, &got.events, got.highest, from, to, *max)?;
            }
            Op::ReadHighest { id } => {
                let (writer, m) = (&writers[*id], &model[*id]);
                let highest = journal.highest(&writer.pid, 0).await;
                if highest != m.highest {
                    return Err(format!(
                        "{}: highest sequence number {highest}, the model says {}",
                        at(&writer.pid),
                        m.highest
                    ));
                }
            }
        }
    }
    for (writer, m) in writers.iter().zip(&model) {
        let got = journal.replay(&writer.pid, 0, MAX_SEQ_NR, u64::MAX).await;
        let what = format!("final full replay of {:?}", writer.pid);
        check_against_model(&what, m, &got.events, got.highest, 0, MAX_SEQ_NR, u64::MAX)?;
    }
    Ok(())
}

fn model_event(writer: &Writer, seq_nr: u64) -> PersistentRepr {
    let mut event = writer.event(seq_nr, &format!("{}:{seq_nr}", writer.pid));
    event.tags = vec![format!("t{}", seq_nr % 3)].into();
    event.timestamp = 1_700_000_000_000 + seq_nr as i64;
    event
}

fn check_against_model(
    what: &str,
    m: &ModelId,
    got: &[PersistentRepr],
    highest: u64,
    from: u64,
    to: u64,
    max: u64,
) -> Result<(), String> {
    let seq_nrs: Vec<u64> = got.iter().map(|e| e.seq_nr).collect();
    if let Some(pair) = seq_nrs.windows(2).find(|w| w[0] >= w[1]) {
        return Err(format!(
            "{what}: events out of order or twice ({} then {}): {seq_nrs:?}",
            pair[0], pair[1]
        ));
    }
    if let Some(deleted) = seq_nrs.iter().find(|s| m.deleted.contains(s)) {
        return Err(format!(
            "{what}: event {deleted} was deleted, yet replayed: {seq_nrs:?}"
        ));
    }
    let want: Vec<&PersistentRepr> = if from <= to {
        m.events
            .range(from..=to)
            .map(|(_, e)| e)
            .take(usize::try_from(max).unwrap_or(usize::MAX))
            .collect()
    } else {
        Vec::new()
    };
    let want_seq_nrs: Vec<u64> = want.iter().map(|e| e.seq_nr).collect();
    if seq_nrs != want_seq_nrs {
        return Err(format!(
            "{what}: replayed {seq_nrs:?}, the model says {want_seq_nrs:?}"
        ));
    }
    if let Some((g, w)) = got.iter().zip(&want).find(|(g, w)| g != *w) {
        return Err(format!(
            "{what}: event {} differs from the one written:\n  got  {g:?}\n  want {w:?}",
            w.seq_nr
        ));
    }
    if highest != m.highest {
        return Err(format!(
            "{what}: highest sequence number {highest}, the model says {}",
            m.highest
        ));
    }
    Ok(())
}
