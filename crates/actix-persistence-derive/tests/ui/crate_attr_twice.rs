use actix_persistence_derive::MessageResponse;

#[derive(MessageResponse)]
#[actix_persistence(crate = "ap", crate = "other")]
struct Reply;

fn main() {}
