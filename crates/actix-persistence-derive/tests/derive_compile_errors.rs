//! What `#[derive(PersistentActor)]` refuses, and the message it gives. The cases use the
//! derive crate alone, so trybuild builds no more than it (see Cargo.toml).

#[test]
fn derive_refuses_structs_without_exactly_one_persistence_state_of_self() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
