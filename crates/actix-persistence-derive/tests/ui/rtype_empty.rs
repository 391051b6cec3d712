use actix_persistence_derive::Message;

#[derive(Message)]
#[rtype()]
struct Ask;

fn main() {}
