use actix_persistence_derive::PersistentActor;

struct PersistenceState<A>(std::marker::PhantomData<A>);

/// The marker on the struct (as a container attribute) says nothing: refused, not ignored.
#[derive(PersistentActor)]
#[persistence]
struct Account {
    state: PersistenceState<Self>,
}

fn main() {}
