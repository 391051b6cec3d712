//! `#[derive(PersistentActor)]`, `#[derive(Message)]` and the facade's public API as a Rust user
//! meets them, replayed from bug reports against derive macros of other crates: generic
//! actors, hostile names in scope (a user `Result`, a local `std` module,
//! `#![no_implicit_prelude]`), nested modules, the `#[rtype]` forms actix's own derive takes,
//! and the traits a user expects of the main types and errors. The derived actor's runtime
//! behaviour is checked against the hand-written trait impls on every store: in memory, a
//! SQLite file and a PostgreSQL database of the test's own.
//!
//! The compile-fail half (attribute misuse) is in
//! `crates/actix-persistence-derive/tests/ui`.

mod adversarial;

use actix_persistence::actix::{Actor, Context, Handler, MessageResult};
use actix_persistence::snapshot::SnapshotMetadata;
use actix_persistence::{
    EventSourced, Message, PersistReply, PersistResult, Persistence, PersistenceState,
    PersistentActor, Snapshotting,
};
use adversarial::{close, within, Backend, Kind};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

// ---------------------------------------------------------------------------------------------
// Generic actors

/// A ledger generic over its entry type, bounds in a `where` clause and one inline: the derive
/// must carry both into its impls, as actix's `derive(Message)` and ractor's derives had to
/// (slawlor/ractor#399: "threaded split_for_impl through both derives so generated impl ...
/// preserve type parameters, lifetimes, and where-clauses").
#[derive(PersistentActor)]
pub(crate) struct Ledger<E: Clone, const MAX: usize>
where
    E: Serialize + DeserializeOwned + Unpin + 'static,
{
    persistence: PersistenceState<Self>,
    entries: Vec<E>,
}

impl<E: Clone, const MAX: usize> EventSourced for Ledger<E, MAX>
where
    E: Serialize + DeserializeOwned + Unpin + 'static,
{
    type Event = E;

    fn apply(&mut self, event: &E) {
        self.entries.push(event.clone());
    }
}

/// A generic command with a generic reply, derived through the facade.
#[derive(Message)]
#[rtype(result = "PersistResult<Vec<E>>")]
struct Append<E: 'static>(E);

impl<E: Clone, const MAX: usize> Handler<Append<E>> for Ledger<E, MAX>
where
    E: Serialize + DeserializeOwned + Unpin + 'static,
{
    type Result = PersistReply<Vec<E>>;

    fn handle(&mut self, msg: Append<E>, ctx: &mut Context<Self>) -> Self::Result {
        if self.entries.len() >= MAX {
            return PersistReply::ready(self.entries.clone());
        }
        self.persist(ctx, msg.0, |ledger, _, _| ledger.entries.clone())
    }
}

fn ledger<E, const MAX: usize>(p: &Persistence, pid: &str) -> Ledger<E, MAX>
where
    E: Clone + Serialize + DeserializeOwned + Unpin + 'static,
{
    Ledger {
        persistence: p.state(pid).expect("valid id"),
        entries: Vec::new(),
    }
}

/// Two instantiations of one generic derived actor persist and recover each its own events
/// (the const parameter caps them), in a new "process" over the same store.
async fn generic_actor_persists_and_recovers_per_instantiation(kind: Kind) {
    let backend = Backend::new(kind).await;
    let p = backend.open().await;
    let words = ledger::<String, 2>(&p, "ledger-words").start_persistent();
    let numbers = ledger::<u64, 8>(&p, "ledger-numbers").start_persistent();
    for word in ["a", "b", "c"] {
        within("append", words.ask(Append(word.to_owned())))
            .await
            .expect("stored");
    }
    within("append", numbers.ask(Append(7_u64)))
        .await
        .expect("stored");
    close(p, true).await;

    let p = backend.open().await;
    let words = ledger::<String, 2>(&p, "ledger-words").start_persistent();
    let numbers = ledger::<u64, 8>(&p, "ledger-numbers").start_persistent();
    // The third word was refused (MAX = 2): the replies after recovery show the two stored.
    assert_eq!(
        within("append", words.ask(Append("d".to_owned())))
            .await
            .expect("refused, not failed"),
        vec!["a".to_owned(), "b".to_owned()]
    );
    assert_eq!(
        within("append", numbers.ask(Append(9_u64)))
            .await
            .expect("stored"),
        vec![7, 9]
    );
    close(p, true).await;
}

on_every_store!(generic_actor_persists_and_recovers_per_instantiation);

// ---------------------------------------------------------------------------------------------
// Hostile names in scope

/// Every prelude name the derives' output could lean on is shadowed by a user item, and the
/// crates `std`, `core`, `actix` and `actix_persistence` by local modules: the output must name
/// everything by absolute paths (JeffBelgum/derive-try-from-primitive#5, sigp/lighthouse#620,
/// geldata/gel-rust#293: a user `type Result<T>` broke derives that wrote `Result<..>`).
#[allow(dead_code, non_camel_case_types, clippy::upper_case_acronyms)]
mod hostile {
    use ::actix_persistence::actix::{Context, Handler};
    use ::actix_persistence::{
        EventSourced, Message, PersistReply, PersistResult, PersistenceState, PersistentActor,
    };

    pub type Result<T> = ::std::result::Result<T, Error>;
    pub struct Error;
    pub struct Option;
    pub struct Some;
    pub struct None;
    pub struct Ok;
    pub struct Err;
    pub struct Box;
    pub struct Vec;
    pub struct String;
    pub struct Self_;
    pub trait Send {}
    pub trait Sync {}
    pub trait Sized {}
    pub trait Unpin {}
    pub trait Clone {}
    pub trait Default {}
    pub trait Drop {}
    pub trait From {}
    pub trait Into {}
    pub trait Fn {}
    pub trait FnOnce {}
    pub trait FnMut {}
    pub trait Iterator {}
    pub trait Actor {}
    pub type Context_ = ();
    pub mod std {}
    pub mod core {}
    pub mod actix {}
    pub mod actix_persistence {}
    pub mod alloc {}

    #[derive(::serde::Serialize, ::serde::Deserialize)]
    pub struct Deposited(pub u64);

    /// Two derived actors in one module (no helper items of the derive may clash).
    #[derive(PersistentActor)]
    pub struct Vault {
        pub persistence: PersistenceState<Self>,
        pub total: u64,
    }

    #[derive(PersistentActor)]
    pub struct Safe(pub PersistenceState<Safe>, pub u64);

    /// A state field with a raw identifier, and fields named as the output's locals.
    #[derive(PersistentActor)]
    pub struct Raw {
        pub r#type: PersistenceState<Self>,
        pub ctx: u8,
        pub state: u8,
    }

    impl EventSourced for Raw {
        type Event = Deposited;
        fn apply(&mut self, _: &Deposited) {}
    }

    impl EventSourced for Vault {
        type Event = Deposited;
        fn apply(&mut self, event: &Deposited) {
            self.total += event.0;
        }
    }

    impl EventSourced for Safe {
        type Event = Deposited;
        fn apply(&mut self, event: &Deposited) {
            self.1 += event.0;
        }
    }

    #[derive(Message)]
    #[rtype(result = "PersistResult<u64>")]
    pub struct Deposit(pub u64);

    impl Handler<Deposit> for Vault {
        type Result = PersistReply<u64>;
        fn handle(&mut self, msg: Deposit, ctx: &mut Context<Self>) -> Self::Result {
            self.persist(ctx, Deposited(msg.0), |vault, _, _| vault.total)
        }
    }

    impl Handler<Deposit> for Safe {
        type Result = PersistReply<u64>;
        fn handle(&mut self, msg: Deposit, ctx: &mut Context<Self>) -> Self::Result {
            self.persist(ctx, Deposited(msg.0), |safe, _, _| safe.1)
        }
    }

    /// A message with no `#[rtype]` replies `()`, whatever `()`-like names are in scope.
    #[derive(Message)]
    pub struct Ping;

    impl Handler<Ping> for Vault {
        type Result = ();
        fn handle(&mut self, _: Ping, _: &mut Context<Self>) {}
    }

    /// A reply type of the user's, derived with the `MessageResponse` of
    /// `actix_persistence::actix`: actix's own derive writes a bare `Option` (and `::actix`
    /// paths), so among these names it does not compile; the facade's does.
    #[derive(::actix_persistence::actix::MessageResponse)]
    pub struct Balance(pub u64);

    #[derive(Message)]
    #[rtype(result = Balance)]
    pub struct GetBalance;

    impl Handler<GetBalance> for Vault {
        type Result = Balance;
        fn handle(&mut self, _: GetBalance, _: &mut Context<Self>) -> Balance {
            Balance(self.total)
        }
    }
}

/// `#![no_implicit_prelude]`: nothing of std's prelude is in scope at all (serde-rs/serde has
/// a `no_implicit_prelude` module in its test suite for the same reason).
mod no_prelude {
    #![no_implicit_prelude]

    use ::actix_persistence::actix::{Context, Handler};
    use ::actix_persistence::{
        EventSourced, Message, PersistReply, PersistResult, PersistenceState, PersistentActor,
    };

    #[derive(::serde::Serialize, ::serde::Deserialize)]
    pub struct Noted(pub u32);

    #[derive(PersistentActor)]
    pub struct Bare {
        #[persistence]
        pub persistence: PersistenceState<Bare>,
        pub count: u32,
    }

    impl EventSourced for Bare {
        type Event = Noted;
        fn apply(&mut self, event: &Noted) {
            self.count += event.0;
        }
    }

    #[derive(Message)]
    #[rtype(result = "PersistResult<u32>")]
    pub struct Note(pub u32);

    impl Handler<Note> for Bare {
        type Result = PersistReply<u32>;
        fn handle(&mut self, msg: Note, ctx: &mut Context<Self>) -> Self::Result {
            self.persist(ctx, Noted(msg.0), |bare, _, _| bare.count)
        }
    }

    /// `#[actix_persistence::main]` on a function of a module without a prelude.
    #[::actix_persistence::main]
    pub async fn run_in_a_system() -> u32 {
        41 + 1
    }
}

/// Actors derived among hostile names and without a prelude persist and recover as any other.
async fn derived_actors_among_hostile_names_persist_and_recover(kind: Kind) {
    let backend = Backend::new(kind).await;
    let p = backend.open().await;
    let vault = hostile::Vault {
        persistence: p.state("vault").expect("valid id"),
        total: 0,
    }
    .start_persistent();
    let safe = hostile::Safe(p.state("safe").expect("valid id"), 0).start_persistent();
    let bare = no_prelude::Bare {
        persistence: p.state("bare").expect("valid id"),
        count: 0,
    }
    .start_persistent();
    within("deposit", vault.ask(hostile::Deposit(5)))
        .await
        .expect("stored");
    within("deposit", safe.ask(hostile::Deposit(3)))
        .await
        .expect("stored");
    within("note", bare.ask(no_prelude::Note(2)))
        .await
        .expect("stored");
    let raw = hostile::Raw {
        r#type: p.state("raw").expect("valid id"),
        ctx: 0,
        state: 0,
    };
    assert_eq!(raw.persistence_id(), "raw");
    within("ping", vault.send(hostile::Ping))
        .await
        .expect("handled");
    assert_eq!(
        within("balance", vault.send(hostile::GetBalance))
            .await
            .expect("handled")
            .0,
        5
    );
    close(p, true).await;

    let p = backend.open().await;
    let vault = hostile::Vault {
        persistence: p.state("vault").expect("valid id"),
        total: 0,
    }
    .start_persistent();
    let safe = hostile::Safe(p.state("safe").expect("valid id"), 0).start_persistent();
    let bare = no_prelude::Bare {
        persistence: p.state("bare").expect("valid id"),
        count: 0,
    }
    .start_persistent();
    assert_eq!(
        within("deposit", vault.ask(hostile::Deposit(1)))
            .await
            .expect("stored"),
        6
    );
    assert_eq!(
        within("deposit", safe.ask(hostile::Deposit(1)))
            .await
            .expect("stored"),
        4
    );
    assert_eq!(
        within("note", bare.ask(no_prelude::Note(1)))
            .await
            .expect("stored"),
        3
    );
    close(p, true).await;
}

on_every_store!(derived_actors_among_hostile_names_persist_and_recover);

/// `#[actix_persistence::actix::test]` runs an async test in an Actix system, as
/// `#[actix::test]` does, with paths through the facade.
#[actix_persistence::actix::test]
async fn actix_test_attribute_of_the_facade_runs_in_a_system() {
    assert!(actix_persistence::actix::System::try_current().is_some());
    let backend = Backend::new(Kind::InMemory).await;
    let p = backend.open().await;
    let vault = hostile::Vault {
        persistence: p.state("vault-in-test").expect("valid id"),
        total: 0,
    }
    .start_persistent();
    assert_eq!(
        within("deposit", vault.ask(hostile::Deposit(2)))
            .await
            .expect("stored"),
        2
    );
    close(p, true).await;
}

/// `#[actix_persistence::main]` runs its body in an Actix system and returns its value, as
/// `#[actix::main]` does (actix-rt's macro had to accept non-`main` functions and return
/// types too).
#[test]
fn main_attribute_runs_a_function_in_a_system_and_returns_its_value() {
    assert_eq!(no_prelude::run_in_a_system(), 42);
}

// ---------------------------------------------------------------------------------------------
// Derived inside a `macro_rules!`

/// A user macro that declares actors: the derive sees the struct through the macro's
/// `$name:ident` and `$field:ident`, whose hygiene differs from the call site's
/// (serde-rs/serde#1305: a derive inside another crate's macro resolved paths wrongly).
macro_rules! declare_counter {
    ($name:ident, $field:ident, $event:ident) => {
        #[derive(Serialize, Deserialize)]
        struct $event(u64);

        #[derive(PersistentActor)]
        struct $name {
            $field: PersistenceState<Self>,
            count: u64,
        }

        impl EventSourced for $name {
            type Event = $event;
            fn apply(&mut self, event: &$event) {
                self.count += event.0;
            }
        }

        impl Handler<Bump> for $name {
            type Result = PersistReply<u64>;
            fn handle(&mut self, msg: Bump, ctx: &mut Context<Self>) -> Self::Result {
                self.persist(ctx, $event(msg.0), |a, _, _| a.count)
            }
        }
    };
}

#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
struct Bump(u64);

declare_counter!(MacroCounter, journal, MacroBumped);
declare_counter!(OtherMacroCounter, state, OtherMacroBumped);

/// Actors declared by a user macro persist and recover.
async fn actors_declared_by_a_user_macro_persist_and_recover(kind: Kind) {
    let backend = Backend::new(kind).await;
    for round in [1, 2] {
        let p = backend.open().await;
        let a = MacroCounter {
            journal: p.state("macro-a").expect("valid id"),
            count: 0,
        }
        .start_persistent();
        let b = OtherMacroCounter {
            state: p.state("macro-b").expect("valid id"),
            count: 0,
        }
        .start_persistent();
        assert_eq!(within("bump", a.ask(Bump(1))).await.expect("stored"), round);
        assert_eq!(
            within("bump", b.ask(Bump(10))).await.expect("stored"),
            10 * round
        );
        close(p, true).await;
    }
}

on_every_store!(actors_declared_by_a_user_macro_persist_and_recover);

// ---------------------------------------------------------------------------------------------
// The facade under another path

/// A crate of the user's that re-exports the facade (a company's actor toolkit), stood in for
/// by a module, or the facade renamed in Cargo.toml: `::actix_persistence` does not resolve
/// there, so the derives take the facade's path as serde takes `#[serde(crate = "..")]`
/// (serde-rs/serde#1331, serde-rs/serde#1938: "can't find crate for `serde`" after a rename).
/// The toolkit's `start_recovery` counts its calls, which shows the derive went through it.
pub mod toolkit {
    pub mod persistence {
        use std::sync::atomic::{AtomicUsize, Ordering};

        pub use ::actix_persistence::{actix, PersistenceState, PersistentActor};

        pub static RECOVERIES: AtomicUsize = AtomicUsize::new(0);

        pub fn start_recovery<A: PersistentActor>(actor: &mut A, ctx: &mut actix::Context<A>) {
            RECOVERIES.fetch_add(1, Ordering::SeqCst);
            ::actix_persistence::start_recovery(actor, ctx);
        }
    }
}

#[derive(PersistentActor)]
#[actix_persistence(crate = "crate::toolkit::persistence")]
struct Routed {
    persistence: PersistenceState<Self>,
    count: u64,
}

impl EventSourced for Routed {
    type Event = u64;
    fn apply(&mut self, event: &u64) {
        self.count += event;
    }
}

#[derive(Message)]
#[actix_persistence(crate = "crate::toolkit::persistence")]
#[rtype(result = "PersistResult<u64>")]
struct RoutedAdd(u64);

impl Handler<RoutedAdd> for Routed {
    type Result = PersistReply<u64>;
    fn handle(&mut self, msg: RoutedAdd, ctx: &mut Context<Self>) -> Self::Result {
        self.persist(ctx, msg.0, |a, _, _| a.count)
    }
}

#[derive(actix_persistence::MessageResponse)]
#[actix_persistence(crate = "crate::toolkit::persistence")]
struct RoutedCount(u64);

#[derive(Message)]
#[actix_persistence(crate = "crate::toolkit::persistence")]
#[rtype(result = RoutedCount)]
struct RoutedGet;

impl Handler<RoutedGet> for Routed {
    type Result = RoutedCount;
    fn handle(&mut self, _: RoutedGet, _: &mut Context<Self>) -> RoutedCount {
        RoutedCount(self.count)
    }
}

/// An actor derived with `#[actix_persistence(crate = "path")]` recovers through that path
/// and persists; `main(crate = "path")` runs in a system.
#[actix_persistence::main(crate = "crate::toolkit::persistence")]
async fn derive_through_a_re_exporting_crate() -> (usize, u64, u64) {
    use std::sync::atomic::Ordering;
    let backend = Backend::new(Kind::InMemory).await;
    let p = backend.open().await;
    let routed = Routed {
        persistence: p.state("routed").expect("valid id"),
        count: 0,
    }
    .start_persistent();
    let stored = within("add", routed.ask(RoutedAdd(4)))
        .await
        .expect("stored");
    let read = within("get", routed.send(RoutedGet))
        .await
        .expect("handled")
        .0;
    close(p, true).await;
    (
        toolkit::persistence::RECOVERIES.load(Ordering::SeqCst),
        stored,
        read,
    )
}

#[test]
fn derives_take_the_facade_path_of_a_re_exporting_crate() {
    assert_eq!(derive_through_a_re_exporting_crate(), (1, 4, 4));
}

// ---------------------------------------------------------------------------------------------
// Nested modules and visibility

pub(crate) mod outer {
    pub(crate) mod inner {
        use actix_persistence::{EventSourced, PersistenceState, PersistentActor};
        use serde::{Deserialize, Serialize};

        #[derive(Serialize, Deserialize)]
        pub(crate) struct Bumped;

        /// A `pub(crate)` actor with a `pub(super)` state field, derived two modules deep.
        #[derive(PersistentActor)]
        pub(crate) struct Counter {
            #[persistence]
            pub(super) journal_state: PersistenceState<Self>,
            pub(crate) bumps: u32,
        }

        impl EventSourced for Counter {
            type Event = Bumped;
            fn apply(&mut self, _: &Bumped) {
                self.bumps += 1;
            }
        }

        impl Counter {
            pub(crate) fn new(state: PersistenceState<Self>) -> Self {
                Counter {
                    journal_state: state,
                    bumps: 0,
                }
            }
        }
    }
}

/// The derived trait is usable from outside the module that derived it (the impls are not
/// hidden by the items' visibility).
async fn derived_actor_in_nested_module_is_usable_from_outside(kind: Kind) {
    let backend = Backend::new(kind).await;
    let p = backend.open().await;
    let counter = outer::inner::Counter::new(p.state("nested").expect("valid id"));
    assert_eq!(counter.persistence_id(), "nested");
    assert_eq!(counter.last_seq_nr(), 0);
    assert_eq!(counter.bumps, 0);
    close(p, true).await;
}

on_every_store!(derived_actor_in_nested_module_is_usable_from_outside);

// ---------------------------------------------------------------------------------------------
// Derived and hand-written: the same behaviour

/// The event and snapshot of both twins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
struct Tally {
    total: i64,
    /// (seq_nr, amount) of every event applied since the actor started: a snapshot restores
    /// `total` only, so this shows which events were replayed.
    #[serde(skip)]
    replayed: Vec<(u64, i64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Amount(i64);

/// What a twin reports through its hooks.
#[derive(Debug, Clone, PartialEq)]
enum Hook {
    Recovered(u64),
    SnapshotSaved(u64),
}

/// The domain side and commands, once per twin: only the `Actor` / `PersistentActor` impls
/// differ (derived or hand-written).
macro_rules! twin_domain {
    ($ty:ident) => {
        impl EventSourced for $ty {
            type Event = Amount;
            fn apply(&mut self, event: &Amount) {
                let seq = self.last_seq_nr();
                self.tally.total += event.0;
                self.tally.replayed.push((seq, event.0));
            }
            fn snapshotting() -> Option<Snapshotting<Self>> {
                Some(Snapshotting::json(
                    |a: &Self| a.tally.clone(),
                    |a: &mut Self, t: Tally| a.tally = t,
                ))
            }
            fn on_snapshot_saved(&mut self, m: &SnapshotMetadata, _: &mut Context<Self>) {
                let _ = self.hooks.send(Hook::SnapshotSaved(m.seq_nr));
            }
            fn on_recovery_completed(&mut self, last: u64, _: &mut Context<Self>) {
                let _ = self.hooks.send(Hook::Recovered(last));
            }
        }

        impl Handler<AddAmounts> for $ty {
            type Result = PersistReply<(u64, i64)>;
            fn handle(&mut self, msg: AddAmounts, ctx: &mut Context<Self>) -> Self::Result {
                let events = msg.0.into_iter().map(Amount).collect();
                self.persist_all(ctx, events, |a, _, _| (a.last_seq_nr(), a.tally.total))
            }
        }

        impl Handler<TakeSnapshot> for $ty {
            type Result = ();
            fn handle(&mut self, _: TakeSnapshot, ctx: &mut Context<Self>) {
                self.save_snapshot(ctx);
            }
        }

        impl Handler<Read> for $ty {
            type Result = MessageResult<Read>;
            fn handle(&mut self, _: Read, _: &mut Context<Self>) -> Self::Result {
                MessageResult((self.last_seq_nr(), self.tally.clone()))
            }
        }

        impl Twin for $ty {
            fn new(state: PersistenceState<Self>, hooks: mpsc::UnboundedSender<Hook>) -> Self {
                $ty {
                    persistence: state,
                    tally: Tally::default(),
                    hooks,
                }
            }
        }
    };
}

#[derive(Message)]
#[rtype(result = "PersistResult<(u64, i64)>")]
struct AddAmounts(Vec<i64>);

#[derive(Message)]
struct TakeSnapshot;

#[derive(Message)]
#[rtype(result = "(u64, Tally)")]
struct Read;

trait Twin:
    PersistentActor + Handler<AddAmounts> + Handler<TakeSnapshot> + Handler<Read> + Sized
{
    fn new(state: PersistenceState<Self>, hooks: mpsc::UnboundedSender<Hook>) -> Self;
}

#[derive(PersistentActor)]
struct Derived {
    persistence: PersistenceState<Self>,
    tally: Tally,
    hooks: mpsc::UnboundedSender<Hook>,
}
twin_domain!(Derived);

struct HandWritten {
    persistence: PersistenceState<Self>,
    tally: Tally,
    hooks: mpsc::UnboundedSender<Hook>,
}
twin_domain!(HandWritten);

impl Actor for HandWritten {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        actix_persistence::start_recovery(self, ctx);
    }
}

impl PersistentActor for HandWritten {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

/// What one twin shows through a script: persist, snapshot, persist, restart, recover.
#[derive(Debug, PartialEq)]
struct Observed {
    replies: Vec<(u64, i64)>,
    hooks: Vec<Hook>,
    after_restart: (u64, Tally),
    hooks_after_restart: Vec<Hook>,
}

async fn next_hook(hooks: &mut mpsc::UnboundedReceiver<Hook>) -> Hook {
    within("a hook of the actor", hooks.recv())
        .await
        .expect("the actor dropped its hook sender")
}

async fn run_script<A: Twin>(backend: &Backend, pid: &str) -> Observed {
    let p = backend.open().await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let addr = A::new(p.state(pid).expect("valid id"), tx).start_persistent();
    let mut replies = Vec::new();
    replies.push(
        within("persist", addr.ask(AddAmounts(vec![1, 2, 3])))
            .await
            .expect("stored"),
    );
    let mut hooks = vec![next_hook(&mut rx).await];
    within("snapshot", addr.send(TakeSnapshot))
        .await
        .expect("handled");
    hooks.push(next_hook(&mut rx).await);
    replies.push(
        within("persist", addr.ask(AddAmounts(vec![10])))
            .await
            .expect("stored"),
    );
    close(p, true).await;

    let p = backend.open().await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let addr = A::new(p.state(pid).expect("valid id"), tx).start_persistent();
    let after_restart = within("read", addr.send(Read)).await.expect("handled");
    let hooks_after_restart = vec![next_hook(&mut rx).await];
    close(p, true).await;
    Observed {
        replies,
        hooks,
        after_restart,
        hooks_after_restart,
    }
}

/// The derived actor behaves exactly as the hand-written impls: the same replies, hooks,
/// snapshot and recovery (from the snapshot, replaying only the event after it).
async fn derived_actor_behaves_as_hand_written_impls(kind: Kind) {
    let backend = Backend::new(kind).await;
    let derived = run_script::<Derived>(&backend, "twin-derived").await;
    let hand_written = run_script::<HandWritten>(&backend, "twin-hand-written").await;
    assert_eq!(derived, hand_written);
    assert_eq!(
        derived,
        Observed {
            replies: vec![(3, 6), (4, 16)],
            hooks: vec![Hook::Recovered(0), Hook::SnapshotSaved(3)],
            after_restart: (
                4,
                Tally {
                    total: 16,
                    replayed: vec![(4, 10)],
                }
            ),
            hooks_after_restart: vec![Hook::Recovered(4)],
        }
    );
}

on_every_store!(derived_actor_behaves_as_hand_written_impls);

// ---------------------------------------------------------------------------------------------
// `#[rtype]` as actix's own derive takes it

/// The facade's `derive(Message)` says it works "as actix's own derive": actix takes the reply
/// type unquoted too, `#[rtype(result = Type)]` (actix/actix#575, for language servers), and
/// as a string, `#[rtype("Type")]`. A user switching `use actix::Message` to the facade's
/// must not have to rewrite them.
mod rtype_forms {
    use actix_persistence::Message;

    pub struct Subtracted(pub u64);

    #[derive(Message)]
    #[rtype(result = Subtracted)]
    pub struct Difference;

    #[derive(Message)]
    #[rtype(result = std::vec::Vec<u8>)]
    pub struct Bytes;

    #[derive(Message)]
    #[rtype("u16")]
    pub struct Quoted;

    #[derive(Message)]
    #[rtype(u32)]
    pub struct Bare;

    #[derive(Message)]
    #[rtype(result = "(u8, String)")]
    pub struct Classic;

    /// Through `actix_persistence::actix` (as the quickstart imports it) `derive(Message)` is
    /// the facade's too: actix's own expands to `::actix` paths, which a crate depending only
    /// on the facade cannot resolve ("could not find `actix` in the list of imported crates"),
    /// and it does not take a generic type unquoted, as here.
    #[derive(actix_persistence::actix::Message)]
    #[rtype(result = std::vec::Vec<u8>)]
    pub struct ThroughActix;

    #[derive(actix_persistence::actix::prelude::Message)]
    #[rtype(result = std::vec::Vec<u16>)]
    pub struct ThroughPrelude;

    /// A generic enum with a `where` clause, its reply naming the parameter.
    #[derive(Message)]
    #[rtype(result = "Option<T>")]
    pub enum Lookup<T>
    where
        T: Clone + 'static,
    {
        Get(T),
        Missing,
    }
}

fn reply_type_of<M: actix_persistence::actix::Message<Result = R>, R>() {}

#[test]
fn message_derive_takes_every_rtype_form_actix_takes() {
    reply_type_of::<rtype_forms::Difference, rtype_forms::Subtracted>();
    reply_type_of::<rtype_forms::Bytes, Vec<u8>>();
    reply_type_of::<rtype_forms::Quoted, u16>();
    reply_type_of::<rtype_forms::Bare, u32>();
    reply_type_of::<rtype_forms::Classic, (u8, String)>();
    reply_type_of::<rtype_forms::ThroughActix, Vec<u8>>();
    reply_type_of::<rtype_forms::ThroughPrelude, Vec<u16>>();
    reply_type_of::<rtype_forms::Lookup<String>, Option<String>>();
    let _ = [rtype_forms::Lookup::Get(1_u8), rtype_forms::Lookup::Missing];
    let _ = rtype_forms::Subtracted(0).0;
}

// ---------------------------------------------------------------------------------------------
// The traits a user expects

fn is_error<E: std::error::Error + Send + Sync + 'static>() {}
fn is_send_sync<T: Send + Sync>() {}
fn is_clone_debug<T: Clone + std::fmt::Debug>() {}
fn is_debug<T: std::fmt::Debug>() {}

/// Every public error works with `?` into `Box<dyn Error + Send + Sync>` (and anyhow): an
/// error that is not `Send + Sync + 'static` cannot cross an `.await` in a spawned task or
/// become an `anyhow::Error` (tokio-rs/tokio#2434-style reports against other crates' errors).
#[test]
fn every_public_error_is_a_send_sync_static_std_error() {
    use actix_persistence::projection::{OffsetStoreError, ProjectionError, ResetError};
    use actix_persistence::serialization::SerializationError;
    use actix_persistence::snapshot::SnapshotError;
    is_error::<actix_persistence::StartError>();
    is_error::<actix_persistence::ConfigError>();
    is_error::<actix_persistence::JournalError>();
    is_error::<actix_persistence::WriteRejection>();
    is_error::<actix_persistence::AtomicWriteError>();
    is_error::<actix_persistence::InvalidPersistenceId>();
    is_error::<actix_persistence::RecoveryError>();
    is_error::<actix_persistence::PersistError>();
    is_error::<actix_persistence::CommandError>();
    is_error::<actix_persistence::ActorFailure>();
    is_error::<actix_persistence::DeleteError>();
    is_error::<actix_persistence::QueryError>();
    is_error::<actix_persistence::Unhealthy>();
    is_error::<SnapshotError>();
    is_error::<SerializationError>();
    is_error::<OffsetStoreError>();
    is_error::<ProjectionError>();
    is_error::<ResetError>();
    // The error of `SqliteJournal::connect` / `PostgresJournal::connect`, both re-exported by
    // the facade: a user must be able to name it without a dependency on the SQL crate.
    is_error::<actix_persistence::SqlStoreError>();
}

/// The handles a user clones into tasks and prints: `Persistence`, `PersistentAddr`,
/// `Settings`; the state a user's `#[derive(Debug)]` on the actor needs.
#[test]
fn main_types_are_send_sync_clone_and_debug_where_expected() {
    is_send_sync::<Persistence>();
    is_clone_debug::<Persistence>();
    is_send_sync::<actix_persistence::PersistentAddr<Derived>>();
    is_clone_debug::<actix_persistence::PersistentAddr<Derived>>();
    is_send_sync::<actix_persistence::Settings>();
    is_clone_debug::<actix_persistence::Settings>();
    is_debug::<PersistenceState<Derived>>();
    is_send_sync::<actix_persistence::EventEnvelope>();
    is_clone_debug::<actix_persistence::EventEnvelope>();
    is_send_sync::<actix_persistence::Offset>();
    is_clone_debug::<actix_persistence::Offset>();
    is_clone_debug::<actix_persistence::StopReason>();
    is_clone_debug::<actix_persistence::SnapshotPolicy>();
    is_clone_debug::<actix_persistence::Backoff>();
    is_clone_debug::<actix_persistence::Recovery>();
    is_send_sync::<actix_persistence::RecoveryPermits>();
    is_clone_debug::<actix_persistence::RecoveryPermits>();
    is_send_sync::<actix_persistence::ReadJournal>();
    is_clone_debug::<actix_persistence::ReadJournal>();
    is_send_sync::<actix_persistence::InMemoryJournal>();
    is_clone_debug::<actix_persistence::InMemoryJournal>();
    is_send_sync::<actix_persistence::SqliteJournal>();
    is_clone_debug::<actix_persistence::SqliteJournal>();
    is_send_sync::<actix_persistence::PostgresJournal>();
    is_clone_debug::<actix_persistence::PostgresJournal>();
    is_send_sync::<actix_persistence::projection::ProjectionId>();
    is_clone_debug::<actix_persistence::projection::ProjectionId>();
    is_send_sync::<actix_persistence::projection::ProjectionHandle<actix_persistence::Offset>>();
    // Not `Clone` by design: dropping the handle stops the projection (as a `JoinHandle`).
    is_debug::<actix_persistence::projection::ProjectionHandle<actix_persistence::Offset>>();
    is_clone_debug::<actix_persistence::snapshot::SnapshotMetadata>();
    is_clone_debug::<actix_persistence::PersistentRepr>();
    is_debug::<actix_persistence::PersistReply<u8>>();
}

/// A function of the user's returns the library's errors with `?` into one boxed error.
#[actix::test]
async fn library_errors_convert_with_question_mark_into_a_boxed_error() {
    async fn start_and_state(
    ) -> Result<PersistenceState<Derived>, Box<dyn std::error::Error + Send + Sync>> {
        let backend = Backend::new(Kind::InMemory).await;
        let p = backend.open().await;
        // An empty persistence id is refused: the error crosses `?`.
        let state = p.state::<Derived>("")?;
        Ok(state)
    }
    let error = start_and_state().await.expect_err("an empty id is refused");
    assert!(
        error
            .downcast_ref::<actix_persistence::InvalidPersistenceId>()
            .is_some(),
        "{error:?}"
    );
}
