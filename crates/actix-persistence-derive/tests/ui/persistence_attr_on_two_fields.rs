use actix_persistence_derive::PersistentActor;

struct PersistenceState<A>(std::marker::PhantomData<A>);

type State = PersistenceState<Account>;

/// Both fields marked: the message must not ask to mark one, as they already are.
#[derive(PersistentActor)]
struct Account {
    #[persistence]
    a: State,
    #[persistence]
    b: State,
}

fn main() {}
