use actix_persistence::PersistentActor;

#[derive(PersistentActor)]
struct Account {
    balance: u64,
}

fn main() {}
