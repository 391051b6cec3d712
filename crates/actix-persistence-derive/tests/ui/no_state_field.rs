use actix_persistence_derive::PersistentActor;

#[derive(PersistentActor)]
struct Account {
    balance: u64,
}

fn main() {}
