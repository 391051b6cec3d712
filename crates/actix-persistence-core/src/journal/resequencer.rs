use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;

use actix::{Actor, Context, Handler, Message};
use metrics::Histogram;
use tokio::time::Instant;

use super::{ReplyTo, WriteMessagesReply};

/// Releases the write replies of one write-reply-ordering group in the order the journal
/// received the writes. Owns the replies that arrived early; talks only to the waiting actors.
///
/// The journal actor hands a reply straight to its actor, without this hop, when the reply is
/// next in its group's order and none is queued here (`ReplyOrder`): the order is the same.
/// How long each reply waited for earlier ones is reported in
/// [`crate::metrics::REPLY_ORDERING_WAIT`] (0 for a reply delivered at once).
#[derive(Debug)]
pub struct Resequencer {
    order: ReplyOrder,
    /// Replies that arrived before an earlier one of the group, with when they arrived.
    early: BTreeMap<u64, (Instant, Resequence)>,
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
        Self::with_order(ReplyOrder::for_group(group))
    }

    /// A resequencer whose order the journal actor shares, to deliver in-order replies itself.
    pub(crate) fn with_order(order: ReplyOrder) -> Self {
        Resequencer {
            order,
            early: BTreeMap::new(),
        }
    }
}

/// Where one group's reply order stands, shared by the journal actor and the group's
/// resequencer (both live on the journal's arbiter): the number of the next reply to deliver,
/// and how many replies were sent to the resequencer and are not delivered yet.
#[derive(Debug, Clone)]
pub(crate) struct ReplyOrder {
    next: Rc<Cell<u64>>,
    queued: Rc<Cell<u64>>,
    /// How long each reply waited for earlier ones ([`crate::metrics::REPLY_ORDERING_WAIT`]).
    wait: Histogram,
}

impl ReplyOrder {
    /// The order of write-reply-ordering group `group`: its wait metric carries that label.
    pub(crate) fn for_group(group: usize) -> Self {
        ReplyOrder {
            next: Rc::default(),
            queued: Rc::default(),
            wait: metrics::histogram!(crate::metrics::REPLY_ORDERING_WAIT, "group" => group.to_string()),
        }
    }

    /// Whether reply `seq` may go to its actor right away: every earlier reply of the group is
    /// delivered and none waits in the resequencer (which then has nothing to release after
    /// it either).
    pub(crate) fn may_deliver_now(&self, seq: u64) -> bool {
        self.next.get() == seq && self.queued.get() == 0
    }

    /// Delivers reply `seq`, which [`may_deliver_now`](Self::may_deliver_now) allowed.
    pub(crate) fn deliver_now(&self, msg: Resequence) {
        self.wait.record(0.0);
        deliver(msg);
        self.next.set(self.next.get() + 1);
    }

    /// Counts a reply sent to the resequencer.
    pub(crate) fn queue(&self) {
        self.queued.set(self.queued.get() + 1);
    }

    fn delivered_by_resequencer(&self) {
        self.next.set(self.next.get() + 1);
        self.queued.set(self.queued.get().saturating_sub(1));
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
    pub reply_to: ReplyTo,
}

impl Message for Resequence {
    type Result = ();
}

impl Handler<Resequence> for Resequencer {
    type Result = ();

    fn handle(&mut self, msg: Resequence, _: &mut Context<Self>) {
        if msg.seq != self.order.next.get() {
            self.early.insert(msg.seq, (Instant::now(), msg));
            return;
        }
        self.order.wait.record(0.0);
        deliver(msg);
        self.order.delivered_by_resequencer();
        while let Some((arrived, ready)) = self.early.remove(&self.order.next.get()) {
            self.order.wait.record(arrived.elapsed().as_secs_f64());
            deliver(ready);
            self.order.delivered_by_resequencer();
        }
    }
}

fn deliver(msg: Resequence) {
    // The actor may have stopped meanwhile; then nobody waits for this reply.
    let _ = msg.reply_to.send(msg.reply);
}
