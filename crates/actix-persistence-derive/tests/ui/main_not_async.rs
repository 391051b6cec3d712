#[actix_persistence_derive::main]
fn main() {}
