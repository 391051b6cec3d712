use actix_persistence::PersistentActor;

#[derive(PersistentActor)]
enum Account {
    Open,
}

fn main() {}
