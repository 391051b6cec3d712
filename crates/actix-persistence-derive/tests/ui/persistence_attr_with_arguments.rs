use actix_persistence_derive::PersistentActor;

/// A stand-in with the name the derive looks for: the derive fails before any type is checked.
struct PersistenceState<A>(std::marker::PhantomData<A>);

/// `#[persistence(..)]` takes nothing: an argument (a guess at an option, as serde's
/// `#[serde(skip)]`) must be refused at the attribute, not silently ignored.
#[derive(PersistentActor)]
struct Account {
    #[persistence(skip)]
    state: PersistenceState<Self>,
    balance: u64,
}

fn main() {}
