use actix_persistence_derive::PersistentActor;

struct PersistenceState<A>(std::marker::PhantomData<A>);

type State = PersistenceState<Account>;

/// `#[persistence = ".."]` is no form of the marker.
#[derive(PersistentActor)]
struct Account {
    #[persistence = "id"]
    state: State,
}

fn main() {}
