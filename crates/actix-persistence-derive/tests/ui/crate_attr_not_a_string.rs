use actix_persistence_derive::Message;

#[derive(Message)]
#[actix_persistence(crate = ap)]
#[rtype(result = "u8")]
struct Ask;

fn main() {}
