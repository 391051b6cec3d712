//! The journal actor, its protocol, and the resequencer actors that order its replies.
//!
//! One persist's path: the persistent actor sends [`WriteMessages`] to the [`JournalActor`],
//! which picks the write-reply-ordering group from the actor's [`Incarnation`]
//! ([`write_reply_ordering_group`]), numbers the write within that group, and starts the store
//! write at once (writes run concurrently). When the store answers, the reply goes to the
//! group's [`Resequencer`], which releases replies strictly in the order the writes arrived in
//! that group. A slow write therefore holds back only the later replies of its own group (as
//! Akka's `AsyncWriteJournal` with `write-reply-ordering-groups`).

mod actor;
mod breaker;
#[cfg(test)]
mod counting_waker;
mod protocol;
mod resequencer;
mod routing;
mod write_queue;

pub use crate::clock::far_future_saturating;
pub use actor::{JournalActor, JournalConfig, MAX_WRITE_REPLY_ORDERING_GROUPS};
pub use breaker::CircuitBreakerConfig;
pub use protocol::{
    CheckHealth, DeleteMessagesTo, Incarnation, ReadHighestSequenceNr, RecoveryReplay, Replay,
    ReplayMessages, ReplyTo, TakeOwnership, Unhealthy, WriteMessages, WriteMessagesReply,
};
pub(crate) use protocol::{ReplySlot, SlotReply};
pub(crate) use resequencer::ReplyOrder;
pub use resequencer::{Resequence, Resequencer};
pub use routing::write_reply_ordering_group;
pub(crate) use write_queue::WriteSender;
