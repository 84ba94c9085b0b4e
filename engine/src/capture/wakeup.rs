//! [`DrainWakeup`]: at most one "drain" message waits in the ingress's mailbox, and a lost one
//! is sent again.
//!
//! The ticker (which looks at the queue every tick) and the ingress itself (which asks for one
//! more drain when a batch left items behind) both send `Drain` messages. Under a producer that
//! never pauses, the ticker would otherwise queue one per tick behind a slow drain, and a flush
//! or close would wait behind all of them. A sender first claims the wake-up; the ingress
//! releases it when it takes the message, *before* it drains, so an item that arrives during the
//! drain is seen by the next claim: a wake-up is never lost while the flag says one is pending.
//!
//! **Self-healing.** If a claimed message were ever lost (a send that failed, a bug), the flag
//! would stay claimed and nothing would send another `Drain`: only flushes would move events.
//! So every message taken is counted, and each place that looks for work (the ticker at every
//! tick, the ingress at a flush and at a writer change) keeps a [`StallWatch`]: when it finds
//! work and the claim held, and at its previous look it had found the claim held with the same
//! count of messages taken, the claim has outlived a whole period with no message taken. It is
//! presumed lost, and the watcher sends one more `Drain`, once per such stall (the count must
//! move before that watcher sends another). A lost `Drain` therefore costs at most two ticks;
//! a message that was only slow (the ingress busy with a long flush) costs at most one extra
//! `Drain` per watcher, which drains like any other.
//!
//! Every write is a read-modify-write (a compare-exchange to claim, swaps and adds elsewhere):
//! loom 0.7 lets a plain store land between the read and the write of a racing swap
//! (tokio-rs/loom#254, #389), which read-modify-write atomicity forbids, so the model would
//! report lost wake-ups that cannot happen; with no plain store, it checks the code that ships.
//!
//! Uses only the `crate::sync` facade: `loom-tests` model-checks this file.

use crate::sync::Arc;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The right to have one `Drain` message in flight. Clones share it.
#[derive(Debug, Clone, Default)]
pub struct DrainWakeup {
    /// A `Drain` message is sent and not yet taken.
    pending: Arc<AtomicBool>,
    /// How many `Drain` messages the ingress has taken (wraps; only compared for equality).
    taken: Arc<AtomicU64>,
}

impl DrainWakeup {
    /// No message pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Claims the right to send one message: `true` when none is pending (the caller must then
    /// send it), `false` when one already is.
    pub fn try_claim(&self) -> bool {
        self.pending
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The message was taken: a later claim may send another. Call it before draining.
    pub fn release(&self) {
        self.taken.fetch_add(1, Ordering::AcqRel);
        self.pending.swap(false, Ordering::AcqRel);
    }

    /// How many messages have been taken so far (a read-modify-write that adds nothing, so loom
    /// orders it like the other accesses).
    fn taken(&self) -> u64 {
        self.taken.fetch_add(0, Ordering::AcqRel)
    }
}

/// One watcher's memory of its previous look at a held claim (see the module doc). Each place
/// that looks for work keeps its own; it is not shared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StallWatch {
    /// The count of messages taken when this watcher last found the claim held, and whether it
    /// already sent a healing message for that count. `None`: its last look claimed, or found
    /// no work.
    held_at: Option<(u64, bool)>,
}

impl StallWatch {
    /// A watcher that has not looked yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A look that found work waiting: `true` when the caller must send one `Drain`, because it
    /// claimed the wake-up, or because the claim has been held since this watcher's previous
    /// look with no message taken in between (presumed lost; at most once per such stall).
    pub fn claim_or_heal(&mut self, wakeup: &DrainWakeup) -> bool {
        if wakeup.try_claim() {
            self.held_at = None;
            return true;
        }
        let taken = wakeup.taken();
        match self.held_at {
            Some((seen, false)) if seen == taken => {
                self.held_at = Some((taken, true));
                true
            }
            Some((seen, true)) if seen == taken => false,
            _ => {
                self.held_at = Some((taken, false));
                false
            }
        }
    }

    /// A look that found no work: nothing is stuck, whatever the flag says.
    pub fn idle(&mut self) {
        self.held_at = None;
    }
}
