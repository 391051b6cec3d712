use actix_persistence_derive::PersistentActor;

/// A stand-in with the name the derive looks for: the derive fails before any type is checked.
struct PersistenceState<A>(std::marker::PhantomData<A>);

struct Other;

/// A state field copied from another actor.
#[derive(PersistentActor)]
struct Account {
    persistence: PersistenceState<Other>,
    balance: u64,
}

fn main() {}
