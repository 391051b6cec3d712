use actix_persistence_derive::PersistentActor;

/// A stand-in with the name the derive looks for: the derive fails before any type is checked.
struct PersistenceState<A>(std::marker::PhantomData<A>);

#[derive(PersistentActor)]
struct Account {
    a: PersistenceState<Self>,
    b: PersistenceState<Self>,
}

fn main() {}
