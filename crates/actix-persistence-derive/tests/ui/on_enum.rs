use actix_persistence_derive::PersistentActor;

#[derive(PersistentActor)]
enum Account {
    Open,
}

fn main() {}
