use actix_persistence_derive::Message;

#[derive(Message)]
#[rtype(result = 5)]
struct Ask;

fn main() {}
