//! A derived persistent actor recovers on start and persists through its state field.

use std::sync::Arc;

use actix_persistence::actix::{Actor, ActorContext, Context, Handler, Message};
use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence::{
    EventSourced, InMemoryJournal, PersistReply, PersistResult, PersistenceState, PersistentActor,
};
use serde::{Deserialize, Serialize};

type State = PersistenceState<Tally>;

#[derive(Serialize, Deserialize)]
struct Counted(u32);

/// The state field is found through `#[persistence]` even behind a type alias.
#[derive(PersistentActor)]
struct Tally {
    total: u32,
    #[persistence]
    journaling: State,
}

impl EventSourced for Tally {
    type Event = Counted;

    fn apply(&mut self, event: &Counted) {
        self.total += event.0;
    }
}

#[derive(Message)]
#[rtype(result = "PersistResult<u32>")]
struct Count(u32);

impl Handler<Count> for Tally {
    type Result = PersistReply<u32>;

    fn handle(&mut self, msg: Count, ctx: &mut Context<Self>) -> Self::Result {
        self.persist(ctx, Counted(msg.0), |tally, _, _| tally.total)
    }
}

/// A tuple struct whose state field is found by its type.
#[derive(PersistentActor)]
struct Pair(u32, PersistenceState<Pair>);

impl EventSourced for Pair {
    type Event = Counted;

    fn apply(&mut self, event: &Counted) {
        self.0 += event.0;
    }
}

#[actix::test]
async fn derived_actor_recovers_its_events_in_a_new_incarnation() {
    let journal =
        JournalActor::start_with(Arc::new(InMemoryJournal::new()), JournalConfig::default());
    let tally = Tally {
        total: 0,
        journaling: PersistenceState::new(journal.clone(), "tally").expect("valid id"),
    }
    .start();
    assert_eq!(
        tally
            .send(Count(2))
            .await
            .expect("mailbox")
            .expect("stored"),
        2
    );
    assert_eq!(
        tally
            .send(Count(5))
            .await
            .expect("mailbox")
            .expect("stored"),
        7
    );

    let again = Tally {
        total: 0,
        journaling: PersistenceState::new(journal.clone(), "tally").expect("valid id"),
    }
    .start();
    // The first command is handled after recovery: 7 + 1.
    assert_eq!(
        again
            .send(Count(1))
            .await
            .expect("mailbox")
            .expect("stored"),
        8
    );

    let pair = Pair(0, PersistenceState::new(journal, "pair").expect("valid id"));
    assert_eq!(pair.persistence_id(), "pair");
    assert_eq!(pair.last_seq_nr(), 0);
}

/// What the derived actor's hooks saw, in order.
type Seen = Arc<std::sync::Mutex<Vec<String>>>;

/// A derived actor with both hooks: `started` runs after recovery was started (the state is
/// not recovered yet), `stopped` as `Actor::stopped`.
#[derive(PersistentActor)]
#[actix_persistence(started = "Self::on_started", stopped = "Hooked::on_stopped")]
struct Hooked {
    total: u32,
    seen: Seen,
    state: PersistenceState<Hooked>,
}

impl Hooked {
    fn on_started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(4);
        let recovered = self.persistence().is_recovered();
        self.note(format!("started, recovered: {recovered}"));
    }

    fn on_stopped(&mut self, _: &mut Context<Self>) {
        let total = self.total;
        self.note(format!("stopped at {total}"));
    }

    fn note(&self, what: String) {
        self.seen.lock().expect("not poisoned").push(what);
    }
}

impl EventSourced for Hooked {
    type Event = Counted;

    fn apply(&mut self, event: &Counted) {
        self.total += event.0;
    }

    fn on_recovery_completed(&mut self, last_seq_nr: u64, _: &mut Context<Self>) {
        let total = self.total;
        self.note(format!("recovered {last_seq_nr} events, total {total}"));
    }
}

impl Handler<Count> for Hooked {
    type Result = PersistReply<u32>;

    fn handle(&mut self, msg: Count, ctx: &mut Context<Self>) -> Self::Result {
        self.persist(ctx, Counted(msg.0), |hooked, _, _| hooked.total)
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Stop;

impl Handler<Stop> for Hooked {
    type Result = ();

    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

#[actix::test]
async fn derived_actor_runs_its_started_and_stopped_hooks_around_recovery() {
    let journal =
        JournalActor::start_with(Arc::new(InMemoryJournal::new()), JournalConfig::default());
    let start = |seen: &Seen| {
        Hooked {
            total: 0,
            seen: Arc::clone(seen),
            state: PersistenceState::new(journal.clone(), "hooked").expect("valid id"),
        }
        .start()
    };
    let seen = Seen::default();
    let first = start(&seen);
    assert_eq!(
        first
            .send(Count(3))
            .await
            .expect("mailbox")
            .expect("stored"),
        3
    );
    first.send(Stop).await.expect("mailbox");
    let seen_again = Seen::default();
    let again = start(&seen_again);
    assert_eq!(
        again
            .send(Count(4))
            .await
            .expect("mailbox")
            .expect("stored"),
        7
    );
    again.send(Stop).await.expect("mailbox");
    // `stopped` runs after the handler that stopped the actor returned: wait for it.
    for _ in 0..1000 {
        let len = |seen: &Seen| seen.lock().expect("not poisoned").len();
        if len(&seen) == 3 && len(&seen_again) == 3 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        *seen.lock().expect("not poisoned"),
        [
            "started, recovered: false",
            "recovered 0 events, total 0",
            "stopped at 3"
        ]
    );
    assert_eq!(
        *seen_again.lock().expect("not poisoned"),
        [
            "started, recovered: false",
            "recovered 1 events, total 3",
            "stopped at 7"
        ]
    );
}

/// `#[actix_persistence::test]` sits beside `#[actix_persistence::main]` at the facade's root
/// (it was only `actix_persistence::actix::test`): a test of an actor in a crate that depends on
/// the facade alone, in an Actix system.
#[actix_persistence::test]
async fn the_facade_root_test_attribute_runs_a_persistent_actor() {
    assert!(actix_persistence::actix::System::try_current().is_some());
    let journal =
        JournalActor::start_with(Arc::new(InMemoryJournal::new()), JournalConfig::default());
    let tally = Tally {
        total: 0,
        journaling: PersistenceState::new(journal, "tally-root-test").expect("valid id"),
    }
    .start();
    let total = tally
        .send(Count(3))
        .await
        .expect("mailbox")
        .expect("stored");
    assert_eq!(total, 3);
}
