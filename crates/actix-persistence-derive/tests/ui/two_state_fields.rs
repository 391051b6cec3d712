use actix_persistence::{PersistenceState, PersistentActor};

#[derive(PersistentActor)]
struct Account {
    a: PersistenceState<Self>,
    b: PersistenceState<Self>,
}

fn main() {}
