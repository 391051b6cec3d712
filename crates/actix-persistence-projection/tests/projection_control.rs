//! Running a projection: pause, resume, stop, reset, progress and lag; as an actor.

mod common;

use std::time::Duration;

use actix_persistence_core::InMemoryJournal;
use actix_persistence_projection::{
    GetProgress, InMemoryOffsetStore, OffsetStore, PauseProjection, Projection, ProjectionActor,
    ProjectionId, ProjectionState, ResumeProjection,
};
use common::*;

fn id() -> ProjectionId {
    ProjectionId::for_slices("control", 0, 1023)
}

#[tokio::test(start_paused = true)]
async fn a_paused_projection_handles_nothing_until_resumed() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 2, 1).await;
    let recorder = Recorder::default();
    let handle = Projection::at_least_once(
        id(),
        live_source(&journal),
        InMemoryOffsetStore::new(),
        recorder.clone(),
    )
    .start();
    handle
        .wait_for(|p| p.handled == 2)
        .await
        .expect("first two");
    handle.pause();
    handle
        .wait_for(|p| p.state == ProjectionState::Paused)
        .await
        .expect("paused");
    write_second_events(&journal).await;
    // An hour of (paused) time: many refresh intervals pass, nothing is pulled.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(recorder.handled().len(), 2);
    assert_eq!(handle.lag().await.unwrap().events, 2);

    handle.resume();
    handle.wait_for(|p| p.handled == 4).await.expect("the rest");
    assert_eq!(handle.lag().await.unwrap().events, 0);
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_pause_holds_back_pulled_envelopes_that_wait_for_their_id() {
    // One id, three events, up to 4 calls at once: the first runs (held by the gate), the
    // other two are pulled and wait behind it (one id's envelopes go in seq_nr order).
    let journal = InMemoryJournal::new();
    write_events(&journal, &pid(0), 1, 3).await;
    let handler = Gated::default();
    let handle = Projection::at_least_once(
        id(),
        live_source(&journal),
        InMemoryOffsetStore::new(),
        handler.clone(),
    )
    .with_max_concurrency(4)
    .start();
    eventually(|| handler.started.handled().len() == 1).await;
    handle.pause();
    handle
        .wait_for(|p| p.state == ProjectionState::Paused)
        .await
        .expect("paused");
    // The call in flight finishes; the waiting ones must not start while paused.
    handler.release(3);
    eventually(|| !handler.finished.handled().is_empty()).await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(
        handler.started.handled().len(),
        1,
        "no handler call starts after the pause took effect"
    );
    handle.resume();
    handle.wait_for(|p| p.handled == 3).await.expect("the rest");
    assert_eq!(handler.finished.handled().len(), 3);
    handle.stop().await;
}

#[tokio::test]
async fn stop_saves_the_offset_of_every_handled_envelope() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 3, 1).await;
    let store = InMemoryOffsetStore::new();
    let handle = Projection::at_least_once(
        id(),
        live_source(&journal),
        store.clone(),
        Recorder::default(),
    )
    .start();
    let progress = handle.wait_for(|p| p.handled == 3).await.expect("handled");
    assert_eq!(handle.stop().await, ProjectionState::Stopped);
    let saved = store.read_offset(&id()).await.unwrap().expect("saved");
    assert_eq!(
        saved,
        serde_json::to_string(&progress.offset.unwrap()).unwrap()
    );
}

#[tokio::test]
async fn reset_handles_the_source_again_from_the_beginning() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 3, 2).await;
    let recorder = Recorder::default();
    let store = InMemoryOffsetStore::new();
    let handle =
        Projection::at_least_once(id(), live_source(&journal), store.clone(), recorder.clone())
            .start();
    handle.wait_for(|p| p.handled == 6).await.expect("handled");
    handle.reset().await.expect("reset");
    handle
        .wait_for(|p| p.handled == 12)
        .await
        .expect("handled again");
    assert!(recorder.counts().values().all(|&n| n == 2));
    handle.stop().await;
}

/// After the slice ranges changed, an instance resumes from the progress of the instances
/// over its slices before; its reset deletes that progress too, so it does handle its slices
/// again from the beginning (a rebuild), and leaves the progress of other slices alone: the
/// other range, not started yet, still resumes from the old range's progress.
#[tokio::test]
async fn reset_after_a_change_of_slice_ranges_handles_the_slices_again_from_the_beginning() {
    let journal = InMemoryJournal::new();
    let ids = ids_in_every_range(2, 4);
    for id in &ids {
        write_events(&journal, id, 1, 2).await;
    }
    let store = InMemoryOffsetStore::new();
    let whole = Recorder::default();
    let state =
        Projection::at_least_once(id(), current_source(&journal), store.clone(), whole.clone())
            .start()
            .join()
            .await;
    assert_eq!(state, ProjectionState::Completed);
    assert_eq!(whole.handled().len(), 16);

    let half = ProjectionId::for_slices("control", 0, 511);
    // The first 4 ids, 2 events each.
    let in_half = 8;
    let recorder = Recorder::default();
    let source = actix_persistence_projection::QuerySource::events_by_slices(
        read_journal(&journal),
        "Account",
        0,
        511,
    );
    let handle = Projection::at_least_once(half.clone(), source, store.clone(), recorder.clone())
        .with_save_offset(actix_persistence_projection::SaveOffset {
            after_envelopes: 1,
            after: Duration::from_millis(1),
        })
        .start();
    // Resumed from the whole range's offset: nothing to handle.
    handle
        .wait_for(|p| p.state == ProjectionState::Running && p.offset.is_some())
        .await
        .expect("running");
    assert!(recorder.handled().is_empty());
    handle.reset().await.expect("reset");
    // A new event, handled after every earlier one of the range (one call at a time).
    write_events(&journal, &ids[0], 3, 3).await;
    let marker = (ids[0].clone(), 3);
    eventually(|| recorder.handled().contains(&marker)).await;
    handle.stop().await;
    assert_eq!(recorder.handled().len(), in_half + 1);
    assert!(recorder.counts().values().all(|&n| n == 1));
    // The whole range's own progress was deleted with it; another key's progress would not be.
    assert_eq!(store.read_offset(&id()).await.unwrap(), None);
    assert!(store.read_offset(&half).await.unwrap().is_some());

    // The other half, started only now (it never saved an offset of its own), still resumes
    // from the whole range's progress, handed over to its key by the reset: it handles
    // nothing. It used to handle its 8 events again (the whole range's key was just deleted).
    let other_half = ProjectionId::for_slices("control", 512, 1023);
    let upper = Recorder::default();
    let state = Projection::at_least_once(
        other_half.clone(),
        current_slices(&journal, 512, 1023),
        store.clone(),
        upper.clone(),
    )
    .start()
    .join()
    .await;
    assert_eq!(state, ProjectionState::Completed);
    assert_eq!(upper.handled(), Vec::new());
    assert!(store.read_offset(&other_half).await.unwrap().is_some());
}

#[tokio::test]
async fn lag_counts_the_events_after_the_handled_offset() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 4, 1).await;
    let gated = Gated::default();
    let handle = Projection::at_least_once(
        id(),
        live_source(&journal),
        InMemoryOffsetStore::new(),
        gated.clone(),
    )
    .start();
    gated.release(1);
    handle
        .wait_for(|p| p.handled == 1)
        .await
        .expect("one handled");
    let lag = handle.lag().await.unwrap();
    assert_eq!(lag.events, 3);
    gated.release(3);
    handle
        .wait_for(|p| p.handled == 4)
        .await
        .expect("all handled");
    assert_eq!(handle.lag().await.unwrap().events, 0);
    assert_eq!(handle.lag().await.unwrap().ms, 0);
    handle.stop().await;
}

#[actix_rt::test]
async fn a_projection_actor_pauses_resumes_and_reports_progress() {
    use actix::Actor;
    let journal = InMemoryJournal::new();
    write_many(&journal, 2, 1).await;
    let handle = Projection::at_least_once(
        id(),
        live_source(&journal),
        InMemoryOffsetStore::new(),
        Recorder::default(),
    )
    .start();
    handle.wait_for(|p| p.handled == 2).await.expect("handled");
    let actor = ProjectionActor::new(handle).start();
    actor.send(PauseProjection).await.unwrap();
    let paused = loop {
        let p = actor
            .send(GetProgress::new())
            .await
            .unwrap()
            .expect("running");
        if p.state == ProjectionState::Paused {
            break p;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(paused.handled, 2);
    actor.send(ResumeProjection).await.unwrap();
    write_second_events(&journal).await;
    loop {
        let p = actor
            .send(GetProgress::new())
            .await
            .unwrap()
            .expect("running");
        if p.handled == 4 {
            assert_eq!(p.state, ProjectionState::Running);
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Event 2 of Account|0 and Account|1.
async fn write_second_events(journal: &InMemoryJournal) {
    for n in 0..2 {
        write_events(journal, &pid(n), 2, 2).await;
    }
}

/// Passes its gate, then fails its first call and records the others.
#[derive(Clone)]
struct FailsFirst {
    gate: CallGate,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    recorder: Recorder,
}

impl FailsFirst {
    /// `free` calls pass the gate without a permit.
    fn new(free: usize) -> Self {
        FailsFirst {
            gate: CallGate::new(free),
            calls: Default::default(),
            recorder: Recorder::default(),
        }
    }
}

#[async_trait::async_trait]
impl actix_persistence_projection::Handler<Env> for FailsFirst {
    async fn process(
        &self,
        envelope: &Env,
    ) -> Result<(), actix_persistence_projection::HandlerError> {
        self.gate.pass().await;
        if self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            return Err("the read model is down".into());
        }
        actix_persistence_projection::Handler::process(&self.recorder, envelope).await
    }
}

/// Fails on the first envelope (no retries), restarts after 10 s.
fn failing_projection(
    journal: &InMemoryJournal,
    handler: FailsFirst,
) -> actix_persistence_projection::ProjectionHandle<actix_persistence_core::query::Offset> {
    Projection::at_least_once(
        id(),
        live_source(journal),
        InMemoryOffsetStore::new(),
        handler,
    )
    .with_handler_recovery(quick_recovery(
        0,
        actix_persistence_projection::AfterRetries::Fail,
    ))
    .with_restart_backoff(actix_persistence_projection::RestartBackoff {
        min: Duration::from_secs(10),
        max: Duration::from_secs(10),
        random_factor: 0.0,
        max_restarts: None,
    })
    .start()
}

/// A pause asked while the projection waits to restart after a failure holds after the
/// restart, until resumed. It used to be dropped: the restarted run pulled and handled.
#[tokio::test(start_paused = true)]
async fn a_pause_while_waiting_to_restart_holds_after_the_restart() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 2, 1).await;
    let handler = FailsFirst::new(usize::MAX);
    let handle = failing_projection(&journal, handler.clone());
    handle
        .wait_for(|p| p.state == ProjectionState::Restarting)
        .await
        .expect("restarting");
    handle.pause();
    assert_eq!(
        state_after_first_restart(&handle).await,
        ProjectionState::Paused
    );
    // An hour of (paused) time: nothing is pulled.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(handler.recorder.handled().is_empty());

    handle.resume();
    handle.wait_for(|p| p.handled == 2).await.expect("handled");
    assert_eq!(handler.recorder.handled().len(), 2);
    handle.stop().await;
}

/// A projection paused while its run fails (a call in flight fails after the pause) restarts
/// paused, until resumed. It used to restart running.
#[tokio::test(start_paused = true)]
async fn a_projection_paused_when_its_run_fails_restarts_paused() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 2, 1).await;
    let handler = FailsFirst::new(0);
    let handle = failing_projection(&journal, handler.clone());
    eventually(|| handler.gate.waiting() == 1).await;
    handle.pause();
    handle
        .wait_for(|p| p.state == ProjectionState::Paused)
        .await
        .expect("paused");
    // The call in flight fails: the run fails and restarts after its backoff.
    handler.gate.release(1);
    assert_eq!(
        state_after_first_restart(&handle).await,
        ProjectionState::Paused
    );
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(handler.gate.waiting(), 0, "no call started while paused");
    assert!(handler.recorder.handled().is_empty());

    handler.gate.release(2);
    handle.resume();
    handle.wait_for(|p| p.handled == 2).await.expect("handled");
    assert_eq!(handler.recorder.handled().len(), 2);
    handle.stop().await;
}

/// A stop asked while a handler call is in flight that then fails (the read model is down at
/// shutdown) stops the projection, with the error in its progress. The run used to fail and
/// restart with the stop lost: the projection ran on, and `stop().await` never returned.
#[tokio::test(start_paused = true)]
async fn a_stop_asked_before_a_call_in_flight_fails_stops_the_projection() {
    let journal = InMemoryJournal::new();
    write_many(&journal, 2, 1).await;
    let handler = FailsFirst::new(0);
    let handle = failing_projection(&journal, handler.clone());
    eventually(|| handler.gate.waiting() == 1).await;
    let stopping = tokio::spawn(handle.stop());
    // The stop is sent and taken while the call waits (one thread: the other tasks run while
    // this one yields); then the call fails.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    handler.gate.release(1);
    // An hour of (paused) time, far past the 10 s restart backoff.
    let state = tokio::time::timeout(Duration::from_secs(3600), stopping)
        .await
        .expect("stop returns")
        .expect("the task ends");
    assert_eq!(state, ProjectionState::Stopped);
    assert!(handler.recorder.handled().is_empty());
    assert_eq!(handler.gate.waiting(), 0, "no call after the stop");
}

/// The state a projection came back in after its first restart (paused or running).
async fn state_after_first_restart<O: Clone + Send + Sync + 'static>(
    handle: &actix_persistence_projection::ProjectionHandle<O>,
) -> ProjectionState {
    handle
        .wait_for(|p| {
            p.restarts == 1 && matches!(p.state, ProjectionState::Paused | ProjectionState::Running)
        })
        .await
        .expect("restarted")
        .state
}

#[tokio::test]
async fn an_old_key_hands_its_progress_over_only_to_a_key_without_an_offset() {
    check_hand_over(&InMemoryOffsetStore::new(), "hand-over").await;
}

/// Ranges 2 -> 1 -> 2 (exactly-once): the upper half saved an offset of its own before the
/// whole range ran, so its own offset is *older* than the whole range's. The lower half's
/// reset hands the whole range's progress over to `slices-512-1023` "unless it saved an offset
/// of its own", then deletes the whole range's key: the upper half is left with its own, older
/// offset and handles again the events the whole range committed (twice under exactly-once,
/// with no crash at all).
#[tokio::test]
async fn reset_of_one_half_keeps_the_other_half_from_handling_again_what_the_whole_range_committed()
{
    let journal = InMemoryJournal::new();
    let ids = ids_in_every_range(2, 2);
    for id in &ids {
        write_events(&journal, id, 1, 1).await;
    }
    let store = InMemoryOffsetStore::new();
    let lower = ProjectionId::for_slices("rescale-reset", 0, 511);
    let upper = ProjectionId::for_slices("rescale-reset", 512, 1023);
    let whole = ProjectionId::for_slices("rescale-reset", 0, 1023);
    let run = |id: ProjectionId, min: u16, max: u16, handler: CommittedRecorder| {
        Projection::exactly_once(
            id,
            current_slices(&journal, min, max),
            store.clone(),
            handler,
        )
        .start()
        .join()
    };
    // Phase 1: two ranges, each commits seq_nr 1 of its ids.
    let first = CommittedRecorder::default();
    assert_eq!(
        run(lower.clone(), 0, 511, first.clone()).await,
        ProjectionState::Completed
    );
    assert_eq!(
        run(upper.clone(), 512, 1023, first.clone()).await,
        ProjectionState::Completed
    );
    assert_eq!(first.committed.handled().len(), 4);
    // Phase 2: one range over every slice commits seq_nr 2 of every id.
    for id in &ids {
        write_events(&journal, id, 2, 2).await;
    }
    let second = CommittedRecorder::default();
    assert_eq!(
        run(whole.clone(), 0, 1023, second.clone()).await,
        ProjectionState::Completed
    );
    assert_eq!(second.committed.handled().len(), 4);
    // Phase 3: two ranges again; the lower one is reset (a rebuild of its slices).
    let rebuilt = CommittedRecorder::default();
    let source = actix_persistence_projection::QuerySource::events_by_slices(
        read_journal(&journal),
        "Account",
        0,
        511,
    );
    let handle =
        Projection::exactly_once(lower.clone(), source, store.clone(), rebuilt.clone()).start();
    handle
        .wait_for(|p| p.state == ProjectionState::Running)
        .await
        .expect("running");
    handle.reset().await.expect("reset");
    eventually(|| rebuilt.committed.handled().len() == 4).await;
    handle.stop().await;
    // The upper half: every event of its slices was committed once (seq_nr 1 by itself,
    // seq_nr 2 by the whole range); it must handle nothing.
    let third = CommittedRecorder::default();
    assert_eq!(
        run(upper.clone(), 512, 1023, third.clone()).await,
        ProjectionState::Completed
    );
    assert_eq!(
        third.committed.handled(),
        Vec::<(String, u64)>::new(),
        "the upper half handled again what the whole range committed"
    );
}
