use actix_persistence_derive::PersistentActor;

struct PersistenceState<A>(std::marker::PhantomData<A>);

/// serde's key is `crate`; a guess at another name is refused, not ignored.
#[derive(PersistentActor)]
#[actix_persistence(krate = "ap")]
struct Account {
    state: PersistenceState<Self>,
}

fn main() {}
