//! A waker that counts its wake-ups, for the journal's unit tests of wake-ups (the reply slot,
//! the write channel).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};

/// Counts the wake-ups of the wakers made from it ([`counting_waker`]).
#[derive(Default)]
pub(super) struct Counting(AtomicUsize);

impl Counting {
    /// Wake-ups so far.
    pub(super) fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A waker and the counter of its wake-ups.
pub(super) fn counting_waker() -> (Arc<Counting>, Waker) {
    let wakes = Arc::new(Counting::default());
    let waker = Waker::from(Arc::clone(&wakes));
    (wakes, waker)
}
