use actix_persistence_derive::Message;

/// Two reply types: refused at the second, never the last silently winning.
#[derive(Message)]
#[rtype(result = "u8")]
#[rtype(result = "u16")]
struct Ask;

fn main() {}
