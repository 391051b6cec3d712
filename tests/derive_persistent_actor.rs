//! A derived persistent actor recovers on start and persists through its state field.

use std::sync::Arc;

use actix_persistence::actix::{Actor, Context, Handler, Message};
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
