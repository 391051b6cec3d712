//! What `#[derive(PersistentActor)]`, `#[derive(Message)]` and `#[actix_persistence::main]`
//! refuse, and the message they give: at the attribute a user wrote, never deep in generated
//! code, and never a misused attribute silently ignored. The cases use the derive crate alone,
//! so trybuild builds no more than it (see Cargo.toml).

#[test]
fn misuse_is_refused_at_the_attribute_with_a_helpful_message() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
