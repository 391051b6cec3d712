//! A projection: its definition (builder) and its runner.

use std::collections::hash_map::RandomState;
use std::collections::{HashSet, VecDeque};
use std::hash::BuildHasher;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

use actix_persistence_core::journal::far_future_saturating;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::error::{OffsetStoreError, ProjectionError};
use crate::handle::{Command, ProjectionHandle, ResetError};
use crate::handler::{GroupedHandler, Handler, TransactionalGroupedHandler, TransactionalHandler};
use crate::offset_store::{OffsetStore, SeenSeqNrs, TransactionalOffsetStore};
use crate::processor::{
    panic_message, AsGroup, AttemptError, Commit, Grouped, OneAtATime, Processor, Single,
    Transactional,
};
use crate::progress::{Progress, ProjectionState};
use crate::settings::{AfterRetries, Grouping, HandlerRecovery, RestartBackoff, SaveOffset};
use crate::source::{Coverage, Envelope, EnvelopeStream, HandledElsewhere, Resume, SourceProvider};
use crate::ProjectionId;

/// A projection instance: a source, a handler and an offset store under one [`ProjectionId`]
/// (as Akka Projections' `Projection`). Build it with one of the four constructors, adjust it
/// with the `with_*` methods, then [`start`](Self::start) it.
///
/// # Delivery
/// - **At-least-once** ([`at_least_once`](Self::at_least_once),
///   [`grouped_at_least_once`](Self::grouped_at_least_once)): the offset is saved after the
///   handler, per [`SaveOffset`]; after a crash the envelopes after the saved offset are handled
///   again, none is skipped.
/// - **Exactly-once** ([`exactly_once`](Self::exactly_once),
///   [`grouped_exactly_once`](Self::grouped_exactly_once)): the handler gets the offset store's
///   transaction; the offset (with `max_concurrency` 1) or the persistence id's handled
///   sequence number (above 1) is saved in that same transaction. A crash loses nothing and
///   repeats nothing.
///
/// # Ordering and concurrency
/// [`with_max_concurrency`](Self::with_max_concurrency) lets up to N calls run at once (seed
/// 003's `max_concurrency`); the envelopes of one persistence id are still handled one after
/// another in sequence-number order, and the saved offset never passes an envelope that was
/// not handled yet: a slow envelope holds the offset back, not the other envelopes.
pub struct Projection<E: Envelope> {
    id: ProjectionId,
    source: Arc<dyn SourceProvider<Envelope = E>>,
    store: Arc<dyn OffsetStore>,
    processor: Arc<dyn Processor<E>>,
    grouping: Option<Grouping>,
    max_concurrency: usize,
    save_offset: SaveOffset,
    recovery: HandlerRecovery,
    restart: RestartBackoff,
}

impl<E: Envelope> std::fmt::Debug for Projection<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projection")
            .field("id", &self.id)
            .field("exactly_once", &self.processor.exactly_once())
            .field("grouping", &self.grouping)
            .field("max_concurrency", &self.max_concurrency)
            .field("save_offset", &self.save_offset)
            .field("recovery", &self.recovery)
            .field("restart", &self.restart)
            .finish_non_exhaustive()
    }
}

impl<E: Envelope> Projection<E> {
    fn new(
        id: ProjectionId,
        source: Arc<dyn SourceProvider<Envelope = E>>,
        store: Arc<dyn OffsetStore>,
        processor: Arc<dyn Processor<E>>,
        grouping: Option<Grouping>,
    ) -> Self {
        Projection {
            id,
            source,
            store,
            processor,
            grouping,
            max_concurrency: 1,
            save_offset: SaveOffset::default(),
            recovery: HandlerRecovery::default(),
            restart: RestartBackoff::default(),
        }
    }

    /// At-least-once, one envelope per handler call.
    pub fn at_least_once<S, St, H>(id: ProjectionId, source: S, store: St, handler: H) -> Self
    where
        S: SourceProvider<Envelope = E>,
        St: OffsetStore,
        H: Handler<E>,
    {
        Self::new(
            id,
            Arc::new(source),
            Arc::new(store),
            Arc::new(Single(handler)),
            None,
        )
    }

    /// At-least-once, a group of envelopes per handler call ([`Grouping`]).
    pub fn grouped_at_least_once<S, St, H>(
        id: ProjectionId,
        source: S,
        store: St,
        grouping: Grouping,
        handler: H,
    ) -> Self
    where
        S: SourceProvider<Envelope = E>,
        St: OffsetStore,
        H: GroupedHandler<E>,
    {
        Self::new(
            id,
            Arc::new(source),
            Arc::new(store),
            Arc::new(Grouped(handler)),
            Some(checked(grouping)),
        )
    }

    /// Exactly-once, one envelope per handler call, in a transaction of `store`.
    pub fn exactly_once<S, St, H>(id: ProjectionId, source: S, store: St, handler: H) -> Self
    where
        S: SourceProvider<Envelope = E>,
        St: TransactionalOffsetStore,
        H: TransactionalHandler<E, St::Transaction>,
    {
        let store = Arc::new(store);
        let processor = Transactional::new(id.clone(), Arc::clone(&store), OneAtATime(handler));
        Self::new(id, Arc::new(source), store, Arc::new(processor), None)
    }

    /// Exactly-once, a group of envelopes per handler call, all in one transaction of `store`.
    pub fn grouped_exactly_once<S, St, H>(
        id: ProjectionId,
        source: S,
        store: St,
        grouping: Grouping,
        handler: H,
    ) -> Self
    where
        S: SourceProvider<Envelope = E>,
        St: TransactionalOffsetStore,
        H: TransactionalGroupedHandler<E, St::Transaction>,
    {
        let store = Arc::new(store);
        let processor = Transactional::new(id.clone(), Arc::clone(&store), AsGroup(handler));
        Self::new(
            id,
            Arc::new(source),
            store,
            Arc::new(processor),
            Some(checked(grouping)),
        )
    }

    /// Up to `max_concurrency` handler calls at once (default 1; 0 counts as 1). Envelopes (or
    /// groups) of one persistence id still run one after another, in order.
    pub fn with_max_concurrency(mut self, max_concurrency: usize) -> Self {
        self.max_concurrency = max_concurrency.max(1);
        self
    }

    /// When offsets are saved outside the handler's transaction (see [`SaveOffset`]).
    pub fn with_save_offset(mut self, save_offset: SaveOffset) -> Self {
        self.save_offset = SaveOffset {
            after_envelopes: save_offset.after_envelopes.max(1),
            ..save_offset
        };
        self
    }

    /// Retries of a failing handler and what follows them.
    pub fn with_handler_recovery(mut self, recovery: HandlerRecovery) -> Self {
        self.recovery = recovery;
        self
    }

    /// Restarts after a failure.
    pub fn with_restart_backoff(mut self, restart: RestartBackoff) -> Self {
        self.restart = restart;
        self
    }

    /// The projection instance's id.
    pub fn id(&self) -> &ProjectionId {
        &self.id
    }

    /// Starts the projection as a task on the current Tokio runtime (inside an Actix system:
    /// the Actix runtime), and returns the handle that pauses, resumes, stops and resets it and
    /// reads its progress.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn start(self) -> ProjectionHandle<E::Offset> {
        let (commands, receiver) = mpsc::unbounded_channel();
        let (progress, watcher) = watch::channel(Progress::default());
        let id = self.id.clone();
        let source = Arc::clone(&self.source);
        let task = tokio::spawn(self.run(receiver, progress));
        ProjectionHandle::new(id, commands, watcher, source, task)
    }

    /// Checks that every offset store can hold the id ([`ProjectionError::InvalidId`]), that
    /// an id naming a slice range and a source split by slices name the same range
    /// ([`ProjectionError::SliceRangeMismatch`]), and that a key claiming a range is one
    /// ([`ProjectionError::MalformedSliceKey`]).
    fn check_id(&self) -> Result<(), ProjectionError> {
        if let Some(reason) = self.id.problem() {
            return Err(ProjectionError::InvalidId {
                id: self.id.clone(),
                reason,
            });
        }
        if self.id.is_malformed_slice_key() {
            return Err(ProjectionError::MalformedSliceKey {
                id: self.id.clone(),
            });
        }
        match (self.id.slice_range(), self.source.slice_range()) {
            (Some(id_range), Some(source_range)) if id_range != source_range => {
                Err(ProjectionError::SliceRangeMismatch {
                    id: self.id.clone(),
                    id_range,
                    source_range,
                })
            }
            _ => Ok(()),
        }
    }

    /// Runs until stopped, completed or failed for good, restarting after failures.
    async fn run(
        self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        progress: watch::Sender<Progress<E::Offset>>,
    ) {
        let random = std::collections::hash_map::RandomState::new();
        let mut restarts_in_a_row = 0u32;
        // The owner epoch this instance holds: taken when it starts (fencing older instances),
        // taken again on each restart only while still held (fencing this instance's own
        // transactions of the failed run that may still be on their way).
        let mut epoch: Option<u64> = None;
        // Paused by the handle: holds across the restarts after failures (and a reset) until
        // resumed, as each run starts paused when the one before ended paused.
        let mut paused = false;
        if let Err(error) = self.check_id() {
            tracing::error!(projection = %self.id, %error, "projection not started");
            progress.send_modify(|p| {
                p.last_error = Some(error.to_string());
                p.state = ProjectionState::Failed;
            });
            return;
        }
        loop {
            progress.send_modify(|p| p.state = ProjectionState::Starting);
            // Whether the run stored an offset past the one it started from: only that counts
            // as progress between failures. Envelopes handled behind an envelope that keeps
            // failing (`max_concurrency` above 1, or a live source) do not move the offset,
            // and the restart handles them again: counting them would reset the count of
            // restarts on every run, and `max_restarts` would never end the loop.
            let (end, made_progress, asked) = match self.store.take_ownership(&self.id, epoch).await
            {
                Ok(taken) => {
                    epoch = Some(taken);
                    // A failed run's save of what it handled waits at most as long as the
                    // restart after it does (its backoff without the random share).
                    let failure_save_limit = self.restart.delay(restarts_in_a_row, 0.0);
                    Run::new(&self, &progress, taken, paused, failure_save_limit)
                        .execute(&mut commands, &mut paused)
                        .await
                }
                Err(error) => (Err(error.into()), false, Asked::Nothing),
            };
            match end {
                Ok(RunEnd::Stopped) => {
                    progress.send_modify(|p| p.state = ProjectionState::Stopped);
                    return;
                }
                Ok(RunEnd::Completed) => {
                    progress.send_modify(|p| p.state = ProjectionState::Completed);
                    return;
                }
                Ok(RunEnd::Reset { acks, then_stop }) => {
                    // Each reset asked while the run drained is done and answered (one after
                    // another, with nothing handled in between: the later ones find nothing
                    // more to delete). A second reset used to drop the first one's answer,
                    // which then reported `NotRunning` of a running projection.
                    for ack in acks {
                        // Only the owner resets: taking ownership again checks it still is.
                        let result = match self.store.take_ownership(&self.id, epoch).await {
                            Ok(taken) => {
                                epoch = Some(taken);
                                self.reset_stored().await.map_err(ResetError::Store)
                            }
                            Err(error) => Err(ResetError::Store(error)),
                        };
                        if result.is_ok() {
                            progress.send_modify(|p| {
                                p.offset = None;
                                p.last_handled_timestamp_ms = None;
                            });
                        }
                        let _ = ack.send(result);
                    }
                    restarts_in_a_row = 0;
                    if then_stop {
                        // A stop asked while the run drained for the reset: the reset is done,
                        // and the projection stops instead of handling its source again.
                        progress.send_modify(|p| p.state = ProjectionState::Stopped);
                        return;
                    }
                }
                Err(error @ ProjectionError::Fenced { .. }) => {
                    tracing::error!(projection = %self.id, %error, "projection fenced; this instance stops");
                    progress.send_modify(|p| {
                        p.last_error = Some(error.to_string());
                        p.state = ProjectionState::Fenced;
                    });
                    return;
                }
                Err(error) => {
                    if made_progress {
                        restarts_in_a_row = 0;
                    }
                    match asked {
                        // The run took the stop and then failed (a call in flight failed): the
                        // projection stops, as asked, instead of restarting with the stop lost
                        // (and `stop().await` waiting for a task that never ends).
                        Asked::Stop => {
                            tracing::error!(projection = %self.id, %error, "projection failed while stopping; stopped");
                            progress.send_modify(|p| {
                                p.last_error = Some(error.to_string());
                                p.state = ProjectionState::Stopped;
                            });
                            return;
                        }
                        Asked::Reset(acks) => {
                            for ack in acks {
                                let _ = ack.send(Err(ResetError::Restarting));
                            }
                        }
                        Asked::Nothing => {}
                    }
                    tracing::error!(projection = %self.id, %error, "projection failed; restarting from its stored offset");
                    let give_up = self
                        .restart
                        .max_restarts
                        .is_some_and(|max| restarts_in_a_row >= max);
                    progress.send_modify(|p| {
                        p.last_error = Some(error.to_string());
                        p.state = if give_up {
                            ProjectionState::Failed
                        } else {
                            ProjectionState::Restarting
                        };
                    });
                    if give_up {
                        return;
                    }
                    // Per restart (an unkeyed hasher of one `RandomState` gives one value).
                    let jitter = random.hash_one(restarts_in_a_row) as f64 / u64::MAX as f64;
                    let delay = self.restart.delay(restarts_in_a_row, jitter);
                    restarts_in_a_row += 1;
                    progress.send_modify(|p| p.restarts += 1);
                    if wait_or_stop(delay, &mut commands, &mut paused).await {
                        progress.send_modify(|p| p.state = ProjectionState::Stopped);
                        return;
                    }
                }
            }
        }
    }

    /// Deletes what this instance stored, and what instances over other slice ranges of the
    /// same name stored for its slices: a run after it resumes from none of them
    /// ([`SourceProvider::resume`]), from the beginning of its source.
    ///
    /// An old key whose range also covers slices outside this one first hands its progress
    /// over to the pieces of its range outside this one ([`OffsetStore::hand_over`]): the
    /// instances over those slices (after a change of ranges, `slices-512-1023` beside this
    /// `slices-0-511`, both once `slices-0-1023`) still resume from it, instead of handling
    /// their slices again from the beginning. A piece that has an offset of its own keeps the
    /// further of the two ([`SourceProvider::compare_offsets`]): after ranges 2, then 1, then
    /// 2, the upper half's own offset is older than the whole range's, and handing nothing
    /// over had it handle again what the whole range handled.
    async fn reset_stored(&self) -> Result<(), OffsetStoreError> {
        self.store.reset(&self.id).await?;
        let Some(range) = self.id.slice_range() else {
            return Ok(());
        };
        for progress in self.store.read_progress(&self.id.name).await? {
            let Some(other) = progress.id.slice_range() else {
                continue;
            };
            if progress.id == self.id || !ranges_overlap(other, range) {
                continue;
            }
            for (min, max) in outside(other, range) {
                let piece = ProjectionId::for_slices(self.id.name.clone(), min, max);
                let own = self.store.read_offset(&piece).await?;
                if self.further_than(progress.offset.as_deref(), own.as_deref()) {
                    self.store
                        .hand_over(&progress.id, &piece, own.as_deref())
                        .await?;
                }
            }
            self.store.reset(&progress.id).await?;
        }
        Ok(())
    }

    /// Whether the stored offset `from` (of an old key over a wider range) is further on than
    /// `own` (a piece of that range's own offset; `None`: it has none), as the source compares
    /// them ([`SourceProvider::compare_offsets`]): both covered every slice of the piece, so
    /// the piece resumes from the further one. An offset that does not read back as the
    /// source's offset type is never further (the piece keeps its own).
    fn further_than(&self, from: Option<&str>, own: Option<&str>) -> bool {
        let (Some(from), Some(own)) = (from, own) else {
            return own.is_none();
        };
        let read = |json: &str| serde_json::from_str::<E::Offset>(json).ok();
        match (read(from), read(own)) {
            (Some(from), Some(own)) => {
                self.source.compare_offsets(&from, &own) == Some(std::cmp::Ordering::Greater)
            }
            _ => false,
        }
    }
}

/// The parts of slice range `range` outside `removed` (none, one or two ranges), both
/// inclusive.
fn outside(
    (min, max): (u16, u16),
    (removed_min, removed_max): (u16, u16),
) -> impl Iterator<Item = (u16, u16)> {
    let below = (min < removed_min).then(|| (min, max.min(removed_min - 1)));
    let above = (max > removed_max).then(|| (min.max(removed_max + 1), max));
    below.into_iter().chain(above)
}

/// Whether `id` is an instance over a slice range that shares a slice with `range`.
fn overlaps(id: &ProjectionId, range: (u16, u16)) -> bool {
    id.slice_range()
        .is_some_and(|other| ranges_overlap(other, range))
}

/// Whether two inclusive slice ranges share a slice.
fn ranges_overlap((min, max): (u16, u16), (other_min, other_max): (u16, u16)) -> bool {
    min <= other_max && max >= other_min
}

fn checked(grouping: Grouping) -> Grouping {
    Grouping {
        size: grouping.size.max(1),
        ..grouping
    }
}

/// Waits `delay`; `true` when a stop came meanwhile. A pause or resume meanwhile is noted in
/// `paused`: the restarted run starts paused or not accordingly.
async fn wait_or_stop(
    delay: std::time::Duration,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    paused: &mut bool,
) -> bool {
    let sleep = tokio::time::sleep(delay);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            _ = &mut sleep => return false,
            command = commands.recv() => match command {
                None | Some(Command::Stop) => return true,
                Some(Command::Reset(ack)) => {
                    let _ = ack.send(Err(ResetError::Restarting));
                }
                Some(Command::Pause) => *paused = true,
                Some(Command::Resume) => *paused = false,
            },
        }
    }
}

/// At-least-once: how many times `after_envelopes` the handled envelopes may run ahead of the
/// stored offset before handler calls wait for a save (see [`Run::waits_for_save`]).
const UNSAVED_LIMIT_FACTOR: u64 = 8;

/// Envelopes handled between two publications of the progress, at most.
const PUBLISH_AFTER: u64 = 256;
/// Longest delay of a publication of the progress.
const PUBLISH_WITHIN: std::time::Duration = std::time::Duration::from_millis(1);

/// Progress of a run not yet published.
#[derive(Default)]
struct Unpublished {
    handled: u64,
    skipped: u64,
    /// The handled prefix moved (its offset is cloned once per publication, not per envelope).
    offset_moved: bool,
}

/// A save of the offset under way: the window index it saves through.
type Saving = BoxFuture<'static, Result<Option<u64>, OffsetStoreError>>;

/// What the handle asked of a run that had not ended yet when it ended.
enum Asked {
    Nothing,
    Stop,
    Reset(Vec<oneshot::Sender<Result<(), ResetError>>>),
}

/// How one run ended without failing.
enum RunEnd {
    Stopped,
    Completed,
    /// Drained for a reset; `then_stop` when a stop was asked too (after the reset).
    Reset {
        acks: Vec<oneshot::Sender<Result<(), ResetError>>>,
        then_stop: bool,
    },
}

/// One envelope of the window: handled yet, and the envelope once handled (it is the unit's
/// while its handler runs). Its offset is read only when it ends the handled prefix at a save
/// or a publication: an offset by timestamp holds a map of the ids seen at its timestamp
/// (dozens of entries on PostgreSQL, whose group commit gives many events one timestamp), so
/// cloning it per envelope was the projection's largest cost there.
struct Slot<E> {
    done: bool,
    envelope: Option<E>,
}

/// Envelopes (or a group) handled by one handler call.
struct Unit<E> {
    idxs: Vec<u64>,
    envelopes: Vec<E>,
}

/// What a unit's future reports, with the unit's envelopes back (empty when a transaction's
/// task was lost, which fails the run).
struct Outcome<E> {
    idxs: Vec<u64>,
    envelopes: Vec<E>,
    result: Result<Handled, ProjectionError>,
}

enum Handled {
    /// Handled; exactly-once: committed, with the offset when `offset_saved`.
    Done { offset_saved: bool },
    /// Skipped after its retries.
    Skipped { offset_saved: bool },
}

/// What woke the run loop.
enum Event<E> {
    Command(Option<Command>),
    Finished(Outcome<E>),
    Envelope(Option<Result<E, crate::error::BoxError>>),
    /// The earliest of the group, save and publication deadlines passed.
    Due,
    /// The offset save under way ended.
    Saved(Result<Option<u64>, OffsetStoreError>),
}

/// The state of one run, from reading the stored offset to its end.
struct Run<'p, E: Envelope> {
    projection: &'p Projection<E>,
    progress: &'p watch::Sender<Progress<E::Offset>>,
    /// The owner epoch of this instance, carried by every offset write (fencing).
    epoch: u64,
    /// The projection's id, shared with the units' futures.
    shared_id: Arc<ProjectionId>,
    /// Persistence ids are tracked (to keep each id in order) only when several units run at
    /// once.
    track_pids: bool,
    /// Hashes persistence ids for `busy` (see there).
    pid_hasher: RandomState,
    /// Envelopes pulled and not yet part of the handled prefix, from index `base`.
    window: VecDeque<Slot<E>>,
    base: u64,
    next_idx: u64,
    /// Index through which every envelope is handled, and through which the offset is saved.
    handled_through: Option<u64>,
    saved_through: Option<u64>,
    /// The stored offset the run started from: the handled prefix's offset until an envelope
    /// of this run ends it.
    stored_offset: Option<E::Offset>,
    /// The last envelope of the handled prefix (its offset and timestamp are the prefix's),
    /// once this run handled one.
    handled_last: Option<E>,
    unsaved: usize,
    save_due: Option<Instant>,
    /// The offset save under way (at most one, in the background of the handler calls), and
    /// whether another is due once it ended.
    saving: Option<Saving>,
    save_again: bool,
    /// Progress not yet published to the handle: published every `PUBLISH_AFTER` envelopes or
    /// 1 ms after the first, so watchers are not woken once per envelope.
    unpublished: Unpublished,
    publish_due: Option<Instant>,
    /// One timer for the earliest deadline (group, save, publication), reset only when that
    /// deadline changes.
    timer: Pin<Box<tokio::time::Sleep>>,
    timer_at: Option<Instant>,
    /// Units waiting for their turn (a persistence id in flight, or no free slot).
    waiting: VecDeque<Unit<E>>,
    /// The persistence ids in flight, by hash (`pid_hasher`): no `String` per envelope. Two ids
    /// with one hash only wait for each other (never run at once), so order holds either way.
    busy: HashSet<u64>,
    in_flight: FuturesUnordered<BoxFuture<'static, Outcome<E>>>,
    group: Unit<E>,
    group_due: Option<Instant>,
    seen: SeenSeqNrs,
    /// Skips the envelopes that instances over other slice ranges handled (after a change of
    /// the ranges), until no later envelope can be one of them.
    handled_elsewhere: Option<HandledElsewhere<E>>,
    /// Exactly-once with several calls at once: the seen rows are forgotten as the saved offset
    /// covers them.
    forget_seen: bool,
    /// Per persistence id, the highest seq_nr in the handled prefix since the last save
    /// started: the seen rows that save covers (see [`OffsetStore::save_offset`]).
    covered: SeenSeqNrs,
    paused: bool,
    /// A stop was asked (not only a reset): the projection ends after this run.
    stop_asked: bool,
    /// Whether the run is stopping (a stop or a reset; see [`Run::stopping`]), watched by the
    /// units retrying a failed call: they give up their retries instead of holding the stop
    /// back for all of them.
    stop_signal: watch::Sender<bool>,
    /// The resets asked (each answered).
    reset: Vec<oneshot::Sender<Result<(), ResetError>>>,
    /// How long a failed run waits for the save of what it handled (see
    /// [`Run::save_handled_after_failure`]).
    failure_save_limit: std::time::Duration,
}

impl<'p, E: Envelope> Run<'p, E> {
    fn new(
        projection: &'p Projection<E>,
        progress: &'p watch::Sender<Progress<E::Offset>>,
        epoch: u64,
        paused: bool,
        failure_save_limit: std::time::Duration,
    ) -> Self {
        Run {
            projection,
            progress,
            epoch,
            shared_id: Arc::new(projection.id.clone()),
            track_pids: projection.max_concurrency > 1,
            pid_hasher: RandomState::new(),
            window: VecDeque::new(),
            base: 0,
            next_idx: 0,
            handled_through: None,
            saved_through: None,
            stored_offset: None,
            handled_last: None,
            unsaved: 0,
            save_due: None,
            saving: None,
            save_again: false,
            unpublished: Unpublished::default(),
            publish_due: None,
            timer: Box::pin(tokio::time::sleep_until(Instant::now())),
            timer_at: None,
            waiting: VecDeque::new(),
            busy: HashSet::new(),
            in_flight: FuturesUnordered::new(),
            group: Unit::empty(),
            group_due: None,
            seen: SeenSeqNrs::new(),
            handled_elsewhere: None,
            forget_seen: projection.processor.exactly_once() && projection.max_concurrency > 1,
            covered: SeenSeqNrs::new(),
            paused,
            stop_asked: false,
            stop_signal: watch::channel(false).0,
            reset: Vec::new(),
            failure_save_limit,
        }
    }

    fn id(&self) -> &ProjectionId {
        &self.projection.id
    }

    fn exactly_once(&self) -> bool {
        self.projection.processor.exactly_once()
    }

    /// Exactly-once with one call at a time: each transaction saves the offset.
    fn offset_in_transaction(&self) -> bool {
        self.exactly_once() && self.projection.max_concurrency == 1
    }

    /// Most envelopes pulled and not yet handled: bounds memory and how far ahead of the
    /// slowest envelope the projection reads.
    fn window_limit(&self) -> usize {
        let unit = self.projection.grouping.map_or(1, |g| g.size);
        2 * self.projection.max_concurrency * unit
    }

    /// Runs until the run ends; with whether it stored an offset past the one it started from,
    /// and the stop or reset it took and had not done yet (it failed first). Leaves in `paused`
    /// whether it ended paused (the next run starts so).
    async fn execute(
        mut self,
        commands: &mut mpsc::UnboundedReceiver<Command>,
        paused: &mut bool,
    ) -> (Result<RunEnd, ProjectionError>, bool, Asked) {
        let end = self.run_loop(commands).await;
        self.publish();
        *paused = self.paused;
        let resets = std::mem::take(&mut self.reset);
        let asked = if self.stop_asked {
            // The run failed before the resets asked too, and the projection stops.
            for ack in resets {
                let _ = ack.send(Err(ResetError::NotRunning));
            }
            Asked::Stop
        } else if !resets.is_empty() {
            Asked::Reset(resets)
        } else if self.stopping() {
            Asked::Stop
        } else {
            Asked::Nothing
        };
        (end, self.saved_through.is_some(), asked)
    }

    async fn run_loop(
        &mut self,
        commands: &mut mpsc::UnboundedReceiver<Command>,
    ) -> Result<RunEnd, ProjectionError> {
        let projection = self.projection;
        let (resume, seen) = read_resume(projection).await?;
        if self.exactly_once() {
            self.seen = seen;
        }
        self.handled_elsewhere = resume.handled_elsewhere;
        let stored = resume.offset;
        self.stored_offset = stored.clone();
        let state = if self.paused {
            ProjectionState::Paused
        } else {
            ProjectionState::Running
        };
        self.progress.send_modify(|p| {
            p.offset = stored.clone();
            p.state = state;
        });
        let mut stream: EnvelopeStream<E> =
            projection
                .source
                .source(stored)
                .await
                .map_err(|source| ProjectionError::Source {
                    id: projection.id.clone(),
                    source,
                })?;
        let mut stream_done = false;
        loop {
            self.start_runnable();
            if self.stopping() && self.in_flight.is_empty() {
                self.save_handled().await?;
                let acks = std::mem::take(&mut self.reset);
                return Ok(if acks.is_empty() {
                    RunEnd::Stopped
                } else {
                    RunEnd::Reset {
                        acks,
                        then_stop: self.stop_asked,
                    }
                });
            }
            if stream_done
                && self.group.envelopes.is_empty()
                && self.waiting.is_empty()
                && self.in_flight.is_empty()
            {
                self.save_handled().await?;
                return Ok(RunEnd::Completed);
            }
            let can_pull = !self.paused
                && !self.stopping()
                && !stream_done
                && self.window.len() < self.window_limit();
            let next_due = [self.group_due, self.save_due, self.publish_due]
                .into_iter()
                .flatten()
                .min();
            if next_due != self.timer_at {
                if let Some(at) = next_due {
                    self.timer.as_mut().reset(at);
                }
                self.timer_at = next_due;
            }
            let timer_set = self.timer_at.is_some();
            let saving = self.saving.is_some();
            let event = tokio::select! {
                biased;
                command = commands.recv() => Event::Command(command),
                Some(outcome) = self.in_flight.next(), if !self.in_flight.is_empty() => {
                    Event::Finished(outcome)
                }
                saved = poll_saving(&mut self.saving), if saving => Event::Saved(saved),
                () = &mut self.timer, if timer_set => Event::Due,
                next = stream.next(), if can_pull => Event::Envelope(next),
            };
            match event {
                Event::Command(command) => self.command(command).await?,
                Event::Finished(outcome) => {
                    if let Err(error) = self.finished(outcome) {
                        self.save_handled_after_failure(&error).await;
                        return Err(error);
                    }
                }
                Event::Saved(saved) => self.saved(saved)?,
                Event::Due => self.due()?,
                Event::Envelope(Some(Ok(envelope))) => self.accept(envelope)?,
                Event::Envelope(Some(Err(source))) => {
                    let error = ProjectionError::Source {
                        id: self.id().clone(),
                        source,
                    };
                    self.save_handled_after_failure(&error).await;
                    return Err(error);
                }
                Event::Envelope(None) => {
                    stream_done = true;
                    self.close_group();
                }
            }
        }
    }

    async fn command(&mut self, command: Option<Command>) -> Result<(), ProjectionError> {
        match command {
            Some(Command::Pause) => {
                self.publish();
                self.paused = true;
                self.progress
                    .send_modify(|p| p.state = ProjectionState::Paused);
                // What was handled so far is saved while paused.
                self.save_due = Some(Instant::now());
            }
            Some(Command::Resume) => {
                self.paused = false;
                self.progress
                    .send_modify(|p| p.state = ProjectionState::Running);
            }
            // A reset asked after a stop: the projection is stopping, it does not reset.
            Some(Command::Reset(ack)) if self.stop_asked => {
                let _ = ack.send(Err(ResetError::NotRunning));
            }
            Some(Command::Reset(ack)) => {
                self.begin_stopping();
                self.reset.push(ack);
            }
            // A dropped handle stops the projection as `stop` does. A stop asked while the run
            // drains for a reset is kept: the projection stops after the reset (it used to be
            // taken by the draining run and lost, the reset restarted the projection, and
            // `stop().await` never returned).
            Some(Command::Stop) | None => {
                self.begin_stopping();
                self.stop_asked = true;
            }
        }
        Ok(())
    }

    /// No envelope is pulled or call started any more; the units retrying a failed call give
    /// up (akka-projection aborts the retries of a stopped projection the same way).
    fn begin_stopping(&mut self) {
        self.stop_signal.send_replace(true);
    }

    /// No envelope is pulled or call started any more (a stop or a reset was asked).
    fn stopping(&self) -> bool {
        *self.stop_signal.borrow()
    }

    /// Takes a pulled envelope into the window, and into a group or a unit of its own.
    fn accept(&mut self, envelope: E) -> Result<(), ProjectionError> {
        let idx = self.next_idx;
        self.next_idx += 1;
        let handled_elsewhere = match self.handled_elsewhere.as_mut().map(|f| f(&envelope)) {
            Some(Coverage::Handled) => true,
            Some(Coverage::NoneAfter) => {
                self.handled_elsewhere = None;
                false
            }
            Some(Coverage::New) | None => false,
        };
        let already_handled = handled_elsewhere
            || !self.seen.is_empty()
                && self
                    .seen
                    .get(envelope.persistence_id())
                    .is_some_and(|&seen| seen >= envelope.seq_nr());
        if already_handled {
            // Handled and committed before a restart (exactly-once, several at a time), or by
            // an instance over other slice ranges (`SourceProvider::resume`).
            self.window.push_back(Slot {
                done: true,
                envelope: Some(envelope),
            });
            self.advance();
            return self.save_when_due();
        }
        self.window.push_back(Slot {
            done: false,
            envelope: None,
        });
        match self.projection.grouping {
            None => self.waiting.push_back(Unit {
                idxs: vec![idx],
                envelopes: vec![envelope],
            }),
            Some(grouping) => {
                if self.group.envelopes.is_empty() {
                    self.group_due = Some(far_future_saturating(grouping.within));
                }
                self.group.push(idx, envelope);
                if self.group.envelopes.len() >= grouping.size {
                    self.close_group();
                }
            }
        }
        Ok(())
    }

    fn close_group(&mut self) {
        self.group_due = None;
        if !self.group.envelopes.is_empty() {
            let group = std::mem::replace(&mut self.group, Unit::empty());
            self.waiting.push_back(group);
        }
    }

    /// At-least-once: whether the handled prefix reached `UNSAVED_LIMIT_FACTOR (8) ×
    /// after_envelopes` envelopes past the stored offset, so that no handler call starts
    /// until a save completes.
    ///
    /// After a crash the envelopes handled past the stored offset are handled again: at most
    /// `8 × after_envelopes` in the prefix, however slow the saves are, plus the calls that ran
    /// ahead of the prefix (at most the window, `2 × max_concurrency` units). As Akka's
    /// at-least-once, whose `groupedWithin(afterEnvelopes)` in front of a `mapAsync(1)` save
    /// holds the handler back while a save is pending (at about `2 × afterEnvelopes`); further
    /// here, so that a fast handler does not wait for each save (the save after the one under
    /// way covers everything handled meanwhile): at 4x a no-op handler ran at 0.55-0.65x of
    /// its rate without the limit on PostgreSQL (a save there takes about as long as handling
    /// 400-700 envelopes), at 8x at 0.8-1.0x (docs/benchmarks.md, session 13). Exactly-once
    /// never waits: a repeat there is skipped, not handled again.
    fn waits_for_save(&self) -> bool {
        if self.exactly_once() {
            return false;
        }
        let handled = self.handled_through.map_or(0, |idx| idx + 1);
        let stored = self.saved_through.map_or(0, |idx| idx + 1);
        let after_envelopes = self.projection.save_offset.after_envelopes as u64;
        handled.saturating_sub(stored) >= after_envelopes.saturating_mul(UNSAVED_LIMIT_FACTOR)
    }

    /// Starts waiting units in order while slots are free, skipping a unit whose persistence
    /// ids are in flight or belong to an earlier waiting unit (that keeps each id in order);
    /// none while paused or while the projection [waits for a save](Self::waits_for_save).
    fn start_runnable(&mut self) {
        let max = self.projection.max_concurrency;
        // Paused: calls in flight finish, none starts (also of units pulled before the pause,
        // waiting behind their ids' calls); resuming starts them.
        if self.stopping()
            || self.paused
            || self.waiting.is_empty()
            || self.in_flight.len() >= max
            || self.waits_for_save()
        {
            return;
        }
        // Which waiting units may start: decided over borrowed ids, then taken out.
        let free = max - self.in_flight.len();
        if !self.track_pids {
            // One unit at a time: the first waiting one.
            for _ in 0..free {
                let Some(unit) = self.waiting.pop_front() else {
                    break;
                };
                let future = self.unit_future(unit);
                self.in_flight.push(future);
            }
            return;
        }
        let mut runnable: Vec<usize> = Vec::new();
        {
            let mut blocked: HashSet<u64> = HashSet::new();
            for (i, unit) in self.waiting.iter().enumerate() {
                let keys = || {
                    unit.envelopes
                        .iter()
                        .map(|e| self.pid_hasher.hash_one(e.persistence_id()))
                };
                let clear = keys().all(|key| !self.busy.contains(&key) && !blocked.contains(&key));
                // Later units of the same ids wait for this one, started or not.
                blocked.extend(keys());
                if clear {
                    runnable.push(i);
                    if runnable.len() == free {
                        break;
                    }
                }
            }
        }
        for i in runnable.into_iter().rev() {
            if let Some(unit) = self.waiting.remove(i) {
                for envelope in &unit.envelopes {
                    self.busy
                        .insert(self.pid_hasher.hash_one(envelope.persistence_id()));
                }
                let future = self.unit_future(unit);
                self.in_flight.push(future);
            }
        }
    }

    /// The future that handles `unit` with retries, then skips it or fails.
    fn unit_future(&self, unit: Unit<E>) -> BoxFuture<'static, Outcome<E>> {
        let commit = match self.commit_for(&unit) {
            Ok(commit) => commit,
            // Not handled at all: a transaction without its offset would commit the
            // handler's writes alone, and the restart would handle the envelopes again.
            Err(error) => {
                let Unit { idxs, envelopes } = unit;
                return futures::future::ready(Outcome {
                    idxs,
                    envelopes,
                    result: Err(error),
                })
                .boxed();
            }
        };
        let processor = Arc::clone(&self.projection.processor);
        let recovery = self.projection.recovery;
        let id = Arc::clone(&self.shared_id);
        let offset_saved = commit.offset.is_some();
        let stopping = self.stop_signal.subscribe();
        async move {
            let Unit {
                idxs,
                mut envelopes,
            } = unit;
            let result = handle_with_retries(
                &*processor,
                &mut envelopes,
                &commit,
                recovery,
                &id,
                stopping,
            )
            .await
            .map(|skipped| {
                if skipped {
                    Handled::Skipped { offset_saved }
                } else {
                    Handled::Done { offset_saved }
                }
            });
            Outcome {
                idxs,
                envelopes,
                result,
            }
        }
        .boxed()
    }

    /// What an exactly-once unit saves in its transaction.
    ///
    /// # Errors
    /// [`OffsetStoreError::Unserializable`] when the offset the transaction must save cannot
    /// be stored as JSON: the unit is then not handled (its writes would commit without it).
    fn commit_for(&self, unit: &Unit<E>) -> Result<Commit, ProjectionError> {
        if !self.exactly_once() {
            return Ok(Commit::default());
        }
        let epoch = self.epoch;
        if self.offset_in_transaction() {
            // One unit at a time, in order: once it commits, everything before it is handled.
            let offset = unit
                .envelopes
                .last()
                .map(|e| serde_json::to_string(&e.offset()))
                .transpose()
                .map_err(|source| OffsetStoreError::Unserializable {
                    id: self.id().clone(),
                    source,
                })?;
            return Ok(Commit {
                epoch,
                offset,
                seen: Vec::new(),
            });
        }
        let mut seen: Vec<(String, u64)> = Vec::new();
        for envelope in &unit.envelopes {
            let pid = envelope.persistence_id();
            match seen.iter_mut().find(|(p, _)| p == pid) {
                Some((_, seq_nr)) => *seq_nr = (*seq_nr).max(envelope.seq_nr()),
                None => seen.push((pid.to_owned(), envelope.seq_nr())),
            }
        }
        Ok(Commit {
            epoch,
            offset: None,
            seen,
        })
    }

    fn finished(&mut self, outcome: Outcome<E>) -> Result<(), ProjectionError> {
        if self.track_pids {
            for envelope in &outcome.envelopes {
                self.busy
                    .remove(&self.pid_hasher.hash_one(envelope.persistence_id()));
            }
        }
        let (offset_saved, skipped) = match outcome.result {
            Ok(Handled::Done { offset_saved }) => (offset_saved, false),
            Ok(Handled::Skipped { offset_saved }) => (offset_saved, true),
            Err(error) => return Err(error),
        };
        if outcome.envelopes.len() != outcome.idxs.len() {
            // Never expected: the processors hand the envelopes back whenever they succeed.
            return Err(lost(
                self.id(),
                &outcome.envelopes,
                "the unit's envelopes did not come back from its handler".to_owned(),
            ));
        }
        let count = outcome.idxs.len() as u64;
        for (&idx, envelope) in outcome.idxs.iter().zip(outcome.envelopes) {
            if let Some(slot) = idx
                .checked_sub(self.base)
                .and_then(|i| self.window.get_mut(i as usize))
            {
                slot.done = true;
                slot.envelope = Some(envelope);
            }
        }
        if offset_saved {
            self.saved_through = self.saved_through.max(outcome.idxs.last().copied());
        }
        self.unpublished.handled += count;
        if skipped {
            self.unpublished.skipped += count;
        }
        self.advance();
        if self.unpublished.handled >= PUBLISH_AFTER {
            self.publish();
        } else if self.publish_due.is_none() {
            self.publish_due = Some(Instant::now() + PUBLISH_WITHIN);
        }
        self.save_when_due()
    }

    /// Starts a save once `after_envelopes` envelopes joined the handled prefix since the last
    /// one, or sets its deadline (`after`), unless each transaction saves the offset. Runs
    /// whenever the prefix moves: after a handler call, and after envelopes handled before (by
    /// another slice range's instance, or committed before a restart) that join it without one;
    /// without a save for those, an at-least-once run [waits for a save](Self::waits_for_save)
    /// that nothing starts.
    fn save_when_due(&mut self) -> Result<(), ProjectionError> {
        if !self.offset_in_transaction() {
            if self.unsaved >= self.projection.save_offset.after_envelopes {
                self.start_save()?;
            } else if self.unsaved > 0 && self.save_due.is_none() {
                self.save_due = Some(far_future_saturating(self.projection.save_offset.after));
            }
        }
        Ok(())
    }

    /// Moves the handled prefix over the handled envelopes at the front of the window.
    fn advance(&mut self) {
        let mut last = None;
        while self.window.front().is_some_and(|slot| slot.done) {
            if let Some(slot) = self.window.pop_front() {
                self.handled_through = Some(self.base);
                self.base += 1;
                self.unsaved += 1;
                if let Some(envelope) = slot.envelope {
                    if self.forget_seen {
                        // Its seen row is forgotten once the saved offset covers it.
                        let (pid, seq_nr) = (envelope.persistence_id(), envelope.seq_nr());
                        match self.covered.get_mut(pid) {
                            Some(covered) => *covered = (*covered).max(seq_nr),
                            None => {
                                self.covered.insert(pid.to_owned(), seq_nr);
                            }
                        }
                    }
                    last = Some(envelope);
                }
            }
        }
        if let Some(envelope) = last {
            self.handled_last = Some(envelope);
            self.unpublished.offset_moved = true;
            if self.publish_due.is_none() {
                self.publish_due = Some(Instant::now() + PUBLISH_WITHIN);
            }
        }
    }

    /// Hands the progress made since the last publication to the handle's watchers.
    fn publish(&mut self) {
        self.publish_due = None;
        let Unpublished {
            handled,
            skipped,
            offset_moved,
        } = std::mem::take(&mut self.unpublished);
        if handled == 0 && !offset_moved {
            return;
        }
        let moved = if offset_moved {
            self.handled_last
                .as_ref()
                .map(|e| (e.offset(), e.timestamp_ms()))
        } else {
            None
        };
        self.progress.send_modify(|p| {
            p.handled += handled;
            p.skipped += skipped;
            if let Some((offset, timestamp_ms)) = moved {
                p.offset = Some(offset);
                p.last_handled_timestamp_ms = Some(timestamp_ms);
            }
        });
    }

    /// Handles the deadlines that passed (the timer fired).
    fn due(&mut self) -> Result<(), ProjectionError> {
        // The timer is spent: the next deadline sets it again.
        self.timer_at = None;
        let now = Instant::now();
        if self.group_due.is_some_and(|at| at <= now) {
            self.close_group();
        }
        if self.publish_due.is_some_and(|at| at <= now) {
            self.publish();
        }
        if self.save_due.is_some_and(|at| at <= now) {
            self.start_save()?;
        }
        Ok(())
    }

    /// Starts saving the handled prefix's offset in the background, unless a transaction
    /// already saved it; while a save is under way, another follows once it ended. Saves
    /// never overlap, so they are stored in order.
    fn start_save(&mut self) -> Result<(), ProjectionError> {
        self.save_due = None;
        if self.saving.is_some() {
            self.save_again = true;
            return Ok(());
        }
        if self.handled_through <= self.saved_through {
            self.unsaved = 0;
            return Ok(());
        }
        let json = match (&self.handled_last, &self.stored_offset) {
            (Some(envelope), _) => serde_json::to_string(&envelope.offset()),
            (None, Some(stored)) => serde_json::to_string(stored),
            (None, None) => return Ok(()),
        }
        .map_err(|source| OffsetStoreError::Unserializable {
            id: self.id().clone(),
            source,
        })?;
        let store = Arc::clone(&self.projection.store);
        let id = Arc::clone(&self.shared_id);
        let epoch = self.epoch;
        let through = self.handled_through;
        // Forgotten with this save, or never if it fails: the run then fails, and the restart
        // from the older stored offset delivers these envelopes again (skipped as seen), so a
        // later save covers them once more.
        let covered: Vec<(String, u64)> = self.covered.drain().collect();
        self.unsaved = 0;
        // A task of its own: a projection stopped or aborted while the save runs never drops
        // it halfway through its transaction (a pooled connection left inside a transaction
        // blocks the next instance), as the exactly-once transactions run (`processor.rs`).
        let lost_id = ProjectionId::clone(&id);
        let task = tokio::spawn(async move {
            store.save_offset(&id, epoch, &json, &covered).await?;
            Ok(through)
        });
        self.saving = Some(
            async move {
                task.await.map_err(|error| OffsetStoreError::SaveLost {
                    id: lost_id,
                    reason: error.to_string(),
                })?
            }
            .boxed(),
        );
        Ok(())
    }

    /// A background save ended.
    fn saved(
        &mut self,
        saved: Result<Option<u64>, OffsetStoreError>,
    ) -> Result<(), ProjectionError> {
        self.saving = None;
        self.saved_through = self.saved_through.max(saved?);
        if std::mem::take(&mut self.save_again) {
            self.start_save()?;
        }
        Ok(())
    }

    /// Saves the handled prefix's offset unless a transaction already saved it, and waits
    /// until it is stored (after the save under way, if any).
    async fn save_handled(&mut self) -> Result<(), ProjectionError> {
        self.save_again = false;
        if let Some(saving) = self.saving.take() {
            self.saved_through = self.saved_through.max(saving.await?);
        }
        self.start_save()?;
        if let Some(saving) = self.saving.take() {
            self.saved_through = self.saved_through.max(saving.await?);
        }
        Ok(())
    }

    /// Before a failed run ends: reports `failure` in the progress at once, then saves what
    /// was handled, so the restart repeats less. Its own failure is only logged (the run fails
    /// anyway).
    ///
    /// The save (after the one under way, if any) is waited for at most `failure_save_limit`,
    /// the restart's backoff: a save that hangs (a lock held in the database, a store that
    /// does not answer) no longer holds the failure unreported and the restart off for good.
    /// A save given up on goes on in its own task; the restart takes ownership again, which
    /// fences it, so it can never store its older offset over the restarted run's.
    async fn save_handled_after_failure(&mut self, failure: &ProjectionError) {
        let message = failure.to_string();
        self.progress.send_modify(|p| p.last_error = Some(message));
        let limit = self.failure_save_limit;
        match tokio::time::timeout(limit, self.save_handled()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(projection = %self.projection.id, %error, "could not save the handled offset of a failing projection");
            }
            Err(_) => {
                tracing::warn!(projection = %self.projection.id, ?limit, "the offset save of a failing projection did not end within the restart backoff; restarting without it (the restart fences it)");
            }
        }
    }
}

/// Where a run resumes: its own stored progress and, for an instance over a slice range,
/// that of the instances of its projection name over overlapping slice ranges (the ranges
/// changed), combined by the source ([`SourceProvider::resume`]); with the seen sequence
/// numbers of its own and of the instances whose progress it takes over (the highest per
/// persistence id). Other keys of the name (ranges apart from this one, tags, custom keys)
/// are not read further: a corrupt offset there concerns their instances, not this one.
async fn read_resume<E: Envelope>(
    projection: &Projection<E>,
) -> Result<(Resume<E>, SeenSeqNrs), ProjectionError> {
    let id = &projection.id;
    let mut stored = projection.store.read_progress(&id.name).await?;
    let range = id.slice_range();
    let related = |other: &ProjectionId| range.is_some_and(|range| overlaps(other, range));
    // This instance takes over the progress of the overlapping ranges, so it fences their
    // instances as a newer instance of its own id would (a deploy overlap across the change
    // would otherwise handle their slices twice), then reads again what they committed before.
    // Also the instances that took ownership and have not stored anything yet: their first
    // commit would be of slices this instance handles too.
    let mut overlapping: Vec<ProjectionId> = stored.iter().map(|p| p.id.clone()).collect();
    if range.is_some() {
        overlapping.extend(projection.store.read_owners(&id.name).await?);
    }
    overlapping.retain(|other| other != id && related(other));
    overlapping.sort();
    overlapping.dedup();
    if !overlapping.is_empty() {
        for other in &overlapping {
            projection.store.take_ownership(other, None).await?;
        }
        stored = projection.store.read_progress(&id.name).await?;
    }
    let mut own = (None, SeenSeqNrs::new());
    let mut others = Vec::new();
    let mut seen_of = std::collections::HashMap::new();
    for progress in stored {
        let mine = progress.id == *id;
        if !mine && !related(&progress.id) {
            continue;
        }
        let offset = match progress.offset {
            Some(json) => Some(serde_json::from_str::<E::Offset>(&json).map_err(|source| {
                OffsetStoreError::CorruptOffset {
                    id: progress.id.clone(),
                    stored: json,
                    source,
                }
            })?),
            None => None,
        };
        if mine {
            own = (offset, progress.seen);
        } else {
            seen_of.insert(progress.id.clone(), progress.seen);
            others.push((progress.id, offset));
        }
    }
    let (own_offset, mut seen) = own;
    let resume = projection.source.resume(own_offset, others);
    for inherited in &resume.inherited {
        for (pid, seq_nr) in seen_of.remove(inherited).unwrap_or_default() {
            let slot = seen.entry(pid).or_insert(0);
            *slot = (*slot).max(seq_nr);
        }
    }
    Ok((resume, seen))
}

impl<E> Unit<E> {
    fn empty() -> Self {
        Unit {
            idxs: Vec::new(),
            envelopes: Vec::new(),
        }
    }

    fn push(&mut self, idx: u64, envelope: E) {
        self.idxs.push(idx);
        self.envelopes.push(envelope);
    }
}

/// The save under way's result (pending forever when there is none; the loop polls it only
/// when there is one).
async fn poll_saving(saving: &mut Option<Saving>) -> Result<Option<u64>, OffsetStoreError> {
    match saving {
        Some(saving) => saving.await,
        None => futures::future::pending().await,
    }
}

/// Calls the handler, retrying with backoff; `Ok(true)` when the envelopes were skipped.
///
/// Once the run is stopping (`stopping` turns `true`: a stop or a reset), a failed call is
/// not retried any more (an attempt under way finishes) and fails the run with its error,
/// also under [`AfterRetries::Skip`]: the envelopes are neither handled nor skipped, and the
/// next run handles them (as akka-projection's stop aborts the retries, akka-projection#187).
/// Before, the stop waited for every retry (with a large `retries`, for ever).
async fn handle_with_retries<E: Envelope>(
    processor: &dyn Processor<E>,
    envelopes: &mut Vec<E>,
    commit: &Commit,
    recovery: HandlerRecovery,
    id: &ProjectionId,
    mut stopping: watch::Receiver<bool>,
) -> Result<bool, ProjectionError> {
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let attempt = AssertUnwindSafe(processor.attempt(envelopes, commit))
            .catch_unwind()
            .await;
        let message = match attempt {
            Ok(Ok(())) => return Ok(false),
            Ok(Err(AttemptError::Store(error))) => return Err(error.into()),
            Ok(Err(AttemptError::Lost(message))) => return Err(lost(id, envelopes, message)),
            Ok(Err(AttemptError::Handler(error))) => error.to_string(),
            Err(panic) => format!("handler panicked: {}", panic_message(&*panic)),
        };
        let first = envelopes.first();
        let persistence_id = first
            .map(|e| e.persistence_id().to_owned())
            .unwrap_or_default();
        let seq_nr = first.map_or(0, |e| e.seq_nr());
        if attempts <= recovery.retries && !*stopping.borrow() {
            tracing::warn!(projection = %id, persistence_id, seq_nr, attempts, error = %message, "handler failed; retrying");
            let stopped = tokio::select! {
                () = tokio::time::sleep(recovery.backoff(attempts)) => false,
                // An error: the run is gone, as good as stopping.
                _ = stopping.wait_for(|stopping| *stopping) => true,
            };
            if !stopped {
                continue;
            }
        }
        let stopped = *stopping.borrow();
        match recovery.then {
            AfterRetries::Skip if !stopped => {
                tracing::error!(projection = %id, persistence_id, seq_nr, envelopes = envelopes.len(), attempts, error = %message, "handler failed; skipping the envelopes");
                return match processor.record_skip(commit).await {
                    Ok(()) => Ok(true),
                    Err(AttemptError::Store(error)) => Err(error.into()),
                    Err(AttemptError::Handler(error)) => {
                        Err(lost(id, envelopes, error.to_string()))
                    }
                    Err(AttemptError::Lost(message)) => Err(lost(id, envelopes, message)),
                };
            }
            // Fail, or the projection stops (the envelopes are neither handled nor skipped).
            _ => {
                if stopped {
                    tracing::error!(projection = %id, persistence_id, seq_nr, attempts, error = %message, "handler failed while the projection stops; not retried");
                }
                return Err(ProjectionError::Handler {
                    id: id.clone(),
                    persistence_id,
                    seq_nr,
                    attempts,
                    message,
                });
            }
        }
    }
}

/// The error of a unit whose transaction's task ended without a result (not retried).
fn lost<E: Envelope>(id: &ProjectionId, envelopes: &[E], message: String) -> ProjectionError {
    let first = envelopes.first();
    ProjectionError::Handler {
        id: id.clone(),
        persistence_id: first
            .map(|e| e.persistence_id().to_owned())
            .unwrap_or_default(),
        seq_nr: first.map_or(0, |e| e.seq_nr()),
        attempts: 1,
        message: format!("the transaction's task ended without a result: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::outside;

    #[test]
    fn the_parts_of_a_range_outside_another_are_none_one_or_two() {
        let parts = |range, removed| outside(range, removed).collect::<Vec<_>>();
        assert_eq!(parts((0, 1023), (0, 511)), vec![(512, 1023)]);
        assert_eq!(parts((0, 1023), (512, 1023)), vec![(0, 511)]);
        assert_eq!(parts((0, 1023), (256, 511)), vec![(0, 255), (512, 1023)]);
        assert_eq!(parts((256, 511), (0, 1023)), vec![]);
        assert_eq!(parts((0, 511), (0, 511)), vec![]);
        assert_eq!(parts((0, 511), (256, 1023)), vec![(0, 255)]);
        assert_eq!(parts((5, 5), (0, 4)), vec![(5, 5)]);
    }
}
