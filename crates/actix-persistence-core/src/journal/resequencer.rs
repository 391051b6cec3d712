use std::collections::BTreeMap;

use actix::{Actor, Context, Handler, Message};
use tokio::sync::oneshot;

use super::WriteMessagesReply;

/// Releases the write replies of one write-reply-ordering group in the order the journal
/// received the writes. Owns the replies that arrived early; talks only to the waiting actors.
#[derive(Debug, Default)]
pub struct Resequencer {
    next: u64,
    early: BTreeMap<u64, Resequence>,
}

impl Resequencer {
    /// A resequencer expecting write number 0 first.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Actor for Resequencer {
    type Context = Context<Self>;
}

/// A finished write's reply, numbered in its group's arrival order.
#[derive(Debug)]
pub struct Resequence {
    /// Position of the write in its group (0, 1, 2, ...).
    pub seq: u64,
    /// The reply.
    pub reply: WriteMessagesReply,
    /// Where it goes.
    pub reply_to: oneshot::Sender<WriteMessagesReply>,
}

impl Message for Resequence {
    type Result = ();
}

impl Handler<Resequence> for Resequencer {
    type Result = ();

    fn handle(&mut self, msg: Resequence, _: &mut Context<Self>) {
        if msg.seq != self.next {
            self.early.insert(msg.seq, msg);
            return;
        }
        deliver(msg);
        self.next += 1;
        while let Some(ready) = self.early.remove(&self.next) {
            deliver(ready);
            self.next += 1;
        }
    }
}

fn deliver(msg: Resequence) {
    // The actor may have stopped meanwhile; then nobody waits for this reply.
    let _ = msg.reply_to.send(msg.reply);
}
