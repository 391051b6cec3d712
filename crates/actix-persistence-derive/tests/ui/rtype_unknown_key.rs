use actix_persistence_derive::Message;

#[derive(Message)]
#[rtype(reply = "u8")]
struct Ask;

fn main() {}
