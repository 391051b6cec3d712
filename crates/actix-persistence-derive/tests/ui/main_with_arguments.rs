#[actix_persistence_derive::main(system = "actix::System")]
async fn main() {}
