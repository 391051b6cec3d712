//! Snapshots and deletes asked for before recovery completed (from `Actor::started`, right
//! after `start_recovery`): the state and the sequence numbers are not known yet, and the
//! incarnation holds no fencing token yet. Both are refused at once with an error saying so,
//! as a persist is; the actor recovers and goes on.

use std::sync::Arc;
use std::time::Duration;

use actix_persistence::actix::{Actor, Context, Handler, Message};
use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence::persistent::InFlight;
use actix_persistence::snapshot::{
    InMemorySnapshotStore, SnapshotError, SnapshotMetadata, SnapshotSelectionCriteria,
    SnapshotStore,
};
use actix_persistence::{
    start_recovery, AtomicWrite, DeleteError, EventSourced, InMemoryJournal, JournalStore,
    PersistenceState, PersistentActor, PersistentRepr, Snapshotting, MAX_SEQ_NR,
};
use futures::TryStreamExt;
use tokio::sync::mpsc;

struct Eager {
    persistence: PersistenceState<Self>,
    applied: Vec<String>,
    log: mpsc::UnboundedSender<String>,
}

impl Actor for Eager {
    type Context = Context<Self>;

    /// Asks for a delete of every event and a snapshot before recovery completed.
    fn started(&mut self, ctx: &mut Context<Self>) {
        start_recovery(self, ctx);
        self.delete_events_to(ctx, u64::MAX);
        self.save_snapshot(ctx);
    }
}

impl PersistentActor for Eager {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

impl EventSourced for Eager {
    type Event = String;

    fn apply(&mut self, event: &String) {
        self.applied.push(event.clone());
    }

    fn snapshotting() -> Option<Snapshotting<Self>> {
        Some(Snapshotting::json(
            |eager: &Self| eager.applied.clone(),
            |eager, applied| eager.applied = applied,
        ))
    }

    fn on_recovery_completed(&mut self, last_seq_nr: u64, _: &mut Context<Self>) {
        let _ = self.log.send(format!("recovered {last_seq_nr}"));
    }

    fn on_events_deleted(&mut self, to_seq_nr: u64, _: &mut Context<Self>) {
        let _ = self.log.send(format!("deleted to {to_seq_nr}"));
    }

    fn on_delete_failure(&mut self, cause: &DeleteError, _: &mut Context<Self>) {
        let kind = match cause {
            DeleteError::NotRecovered { .. } => "not recovered",
            DeleteError::Journal(_) => "journal",
            DeleteError::BeyondLastSeqNr { .. } => "beyond",
            _ => "other",
        };
        let _ = self.log.send(format!("delete failed ({kind}): {cause}"));
    }

    fn on_snapshot_saved(&mut self, metadata: &SnapshotMetadata, _: &mut Context<Self>) {
        let _ = self
            .log
            .send(format!("snapshot saved at {}", metadata.seq_nr));
    }

    fn on_snapshot_failure(&mut self, cause: &SnapshotError, _: &mut Context<Self>) {
        let _ = self.log.send(format!("snapshot failed: {cause}"));
    }
}

#[derive(Message)]
#[rtype(result = "Vec<String>")]
struct Applied;

impl Handler<Applied> for Eager {
    type Result = Vec<String>;

    fn handle(&mut self, _: Applied, _: &mut Context<Self>) -> Vec<String> {
        self.applied.clone()
    }
}

fn event(seq_nr: u64) -> PersistentRepr {
    PersistentRepr {
        persistence_id: "eager".into(),
        seq_nr,
        payload: serde_json::to_vec(&format!("e{seq_nr}")).expect("json"),
        serializer_id: actix_persistence::serialization::JSON_SERIALIZER_ID,
        manifest: String::new(),
        writer_uuid: "earlier-incarnation".into(),
        timestamp: 1,
        tags: Default::default(),
    }
}

async fn next(log: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(10), log.recv())
        .await
        .expect("the actor reported within 10 s")
        .expect("the actor is gone")
}

#[actix::test]
async fn a_delete_and_a_snapshot_before_recovery_completed_are_refused_and_the_actor_goes_on() {
    let store = InMemoryJournal::new();
    // An earlier incarnation owned the id and wrote 1..3.
    let earlier = store.take_ownership("eager").await.expect("ownership");
    let mut write = AtomicWrite::new((1..=3).map(event).collect()).expect("well-formed");
    write.fencing_token = earlier.fencing_token;
    let results = store.write_messages(vec![write]).await.expect("write");
    assert!(results.iter().all(Result::is_ok), "{results:?}");

    let journal = JournalActor::start_with(Arc::new(store.clone()), JournalConfig::default());
    let snapshots = Arc::new(InMemorySnapshotStore::new());
    let in_flight = InFlight::new();
    let (log_tx, mut log) = mpsc::unbounded_channel();
    let persistence = PersistenceState::new(journal, "eager")
        .expect("valid id")
        .with_snapshot_store(snapshots.clone(), Duration::from_secs(5))
        .with_in_flight(in_flight.clone());
    let actor = Eager {
        persistence,
        applied: Vec::new(),
        log: log_tx,
    }
    .start_persistent();

    // Both refused at once, before the recovery completed, each saying why.
    let delete = next(&mut log).await;
    assert!(
        delete.starts_with("delete failed (not recovered)") && delete.contains("recover"),
        "{delete}"
    );
    let snapshot = next(&mut log).await;
    assert!(
        snapshot.starts_with("snapshot failed") && snapshot.contains("recovery has not completed"),
        "{snapshot}"
    );
    assert_eq!(next(&mut log).await, "recovered 3");

    // The actor goes on, with every event; nothing was deleted, no snapshot was saved.
    let applied = actor.send(Applied).await.expect("the actor is running");
    assert_eq!(applied, ["e1", "e2", "e3"]);
    in_flight.idle().await;
    let stored: Vec<u64> = store
        .replay_messages("eager", 1, MAX_SEQ_NR, u64::MAX)
        .map_ok(|e| e.seq_nr)
        .try_collect()
        .await
        .expect("replay");
    assert_eq!(stored, [1, 2, 3]);
    let snapshot = snapshots
        .load("eager", SnapshotSelectionCriteria::latest())
        .await
        .expect("load");
    assert_eq!(snapshot, None);
    assert!(log.try_recv().is_err(), "nothing else happened");
}

/// A hand-written `Actor` that forgets `start_recovery`.
struct Forgetful {
    persistence: PersistenceState<Self>,
}

impl Actor for Forgetful {
    type Context = Context<Self>;
}

impl PersistentActor for Forgetful {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

impl EventSourced for Forgetful {
    type Event = String;

    fn apply(&mut self, _: &String) {}
}

#[derive(Message)]
#[rtype(result = "actix_persistence::PersistResult<()>")]
struct Store;

impl Handler<Store> for Forgetful {
    type Result = actix_persistence::PersistReply<()>;

    fn handle(&mut self, _: Store, ctx: &mut Context<Self>) -> Self::Result {
        self.persist(ctx, "e".to_owned(), |_, _, _| ())
    }
}

/// A persist of an actor that never started its recovery is refused with an error that says
/// so and how to start it (it said "persist from a command handler", which it was doing).
#[actix::test]
async fn a_persist_of_an_actor_that_never_started_recovery_says_how_to_start_it() {
    let journal =
        JournalActor::start_with(Arc::new(InMemoryJournal::new()), JournalConfig::default());
    let actor = Forgetful {
        persistence: PersistenceState::new(journal, "forgetful").expect("valid id"),
    }
    .start();
    match actor.send(Store).await.expect("the actor is running") {
        Err(actix_persistence::PersistError::Rejected(rejection)) => {
            assert!(
                rejection.reason.contains("never started its recovery")
                    && rejection.reason.contains("start_recovery(self, ctx)"),
                "{}",
                rejection.reason
            );
        }
        other => panic!("expected the persist refused, got {other:?}"),
    }
}
