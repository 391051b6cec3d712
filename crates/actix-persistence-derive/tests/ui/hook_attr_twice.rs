use actix_persistence_derive::PersistentActor;

struct PersistenceState<A>(std::marker::PhantomData<A>);

/// A hook named twice is refused, not silently the last one.
#[derive(PersistentActor)]
#[actix_persistence(started = "Self::a", started = "Self::b")]
struct Account {
    state: PersistenceState<Self>,
}

fn main() {}
