use actix_persistence_derive::Message;

/// actix's old two-parameter form `#[rtype(User, Error)]` (actix/actix-web#99).
#[derive(Message)]
#[rtype(u8, String)]
struct Ask;

fn main() {}
