//! [`DrainWakeup`]: at most one "drain" message waits in the ingress's mailbox.
//!
//! The ticker (which looks at the queue every tick) and the ingress itself (which asks for one
//! more drain when a batch left items behind) both send `Drain` messages. Under a producer that
//! never pauses, the ticker would otherwise queue one per tick behind a slow drain, and a flush
//! or close would wait behind all of them. A sender first claims the wake-up; the ingress
//! releases it when it takes the message, *before* it drains, so an item that arrives during the
//! drain is seen by the next claim: a wake-up is never lost while the flag says one is pending.
//!
//! Uses only the `crate::sync` facade: `loom-tests` model-checks this file.

use crate::sync::Arc;
use crate::sync::atomic::{AtomicBool, Ordering};

/// The right to have one `Drain` message in flight. Clones share it.
#[derive(Debug, Clone, Default)]
pub struct DrainWakeup {
    /// A `Drain` message is sent and not yet taken.
    pending: Arc<AtomicBool>,
}

impl DrainWakeup {
    /// No message pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Claims the right to send one message: `true` when none is pending (the caller must then
    /// send it), `false` when one already is.
    pub fn try_claim(&self) -> bool {
        !self.pending.swap(true, Ordering::AcqRel)
    }

    /// The message was taken: a later claim may send another. Call it before draining.
    ///
    /// A swap, not a plain store. A release store would be as correct under C11, but loom 0.7
    /// lets a plain store land between the read and the write of a racing swap (a ticker's
    /// claim that found the flag still set; tokio-rs/loom#254, #389), which read-modify-write
    /// atomicity forbids, and so reports a lost wake-up that cannot happen. With the swap the
    /// model checks the code that ships.
    pub fn release(&self) {
        self.pending.swap(false, Ordering::AcqRel);
    }
}
