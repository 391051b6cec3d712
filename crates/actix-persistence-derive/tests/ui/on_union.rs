use actix_persistence_derive::PersistentActor;

#[derive(PersistentActor)]
union Account {
    balance: u64,
}

fn main() {}
