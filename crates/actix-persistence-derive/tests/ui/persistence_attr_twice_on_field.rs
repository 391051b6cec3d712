use actix_persistence_derive::PersistentActor;

struct PersistenceState<A>(std::marker::PhantomData<A>);

#[derive(PersistentActor)]
struct Account {
    #[persistence]
    #[persistence]
    state: PersistenceState<Self>,
}

fn main() {}
