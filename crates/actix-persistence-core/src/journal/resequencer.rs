use std::collections::BTreeMap;

use actix::{Actor, Context, Handler, Message};
use metrics::Histogram;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::WriteMessagesReply;

/// Releases the write replies of one write-reply-ordering group in the order the journal
/// received the writes. Owns the replies that arrived early; talks only to the waiting actors.
#[derive(Debug)]
pub struct Resequencer {
    next: u64,
    /// Replies that arrived before an earlier one of the group, with when they arrived.
    early: BTreeMap<u64, (Instant, Resequence)>,
    /// Reports how long each reply waited ([`crate::metrics::REPLY_ORDERING_WAIT`]).
    wait: Histogram,
}

impl Default for Resequencer {
    fn default() -> Self {
        Self::new()
    }
}

impl Resequencer {
    /// A resequencer expecting write number 0 first.
    pub fn new() -> Self {
        Self::for_group(0)
    }

    /// The resequencer of write-reply-ordering group `group`: its wait metric carries that
    /// label.
    pub fn for_group(group: usize) -> Self {
        Resequencer {
            next: 0,
            early: BTreeMap::new(),
            wait: metrics::histogram!(crate::metrics::REPLY_ORDERING_WAIT, "group" => group.to_string()),
        }
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
            self.early.insert(msg.seq, (Instant::now(), msg));
            return;
        }
        self.wait.record(0.0);
        deliver(msg);
        self.next += 1;
        while let Some((arrived, ready)) = self.early.remove(&self.next) {
            self.wait.record(arrived.elapsed().as_secs_f64());
            deliver(ready);
            self.next += 1;
        }
    }
}

fn deliver(msg: Resequence) {
    // The actor may have stopped meanwhile; then nobody waits for this reply.
    let _ = msg.reply_to.send(msg.reply);
}
