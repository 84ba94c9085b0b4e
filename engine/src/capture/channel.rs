//! The concurrent core of capture: a bounded queue, the pending-drops counter, the admission
//! gate and the close protocol, generic over the queued item.
//!
//! This file uses only `crate::sync` names and `core`/`std` items loom does not replace:
//! `loom-tests` includes it verbatim and model-checks it (`loom-tests/tests/capture.rs`). The
//! typed capture API (`super`) is a thin layer over it.
//!
//! # The state word
//!
//! One `AtomicU64` holds the admission gate and the close flag in its two low bits and, above
//! them, how many producers are inside a capture call (in flight). A producer enters with ONE
//! `fetch_add`, whose returned value tells it both whether it is admitted and (by the increment
//! itself) registers it with a closer; it leaves with one `fetch_sub`. So the gate check and the
//! close protocol cost one extra uncontended-in-the-common-case RMW over a plain flag load, and
//! no lock, syscall or wake.
//!
//! # Pair numbers
//!
//! [`Channel::begin`] gives each admitted start a number from a counter beside the state word,
//! on the same line (the call has that line already), with one relaxed `fetch_add`: atomicity
//! alone makes the numbers distinct, and nothing is ordered by them. A start dropped on a full
//! queue has taken its number too, so numbers are distinct, not dense.
//!
//! # Drop markers
//!
//! A producer that finds the queue full adds 1 to `pending_drops`. After popping each item the
//! (single) consumer loads the counter and, if nonzero, swaps it to 0 and emits
//! [`Drained::Dropped`] BEFORE that item. A drop that happens-before the push of an item is
//! therefore reported no later than that item: the pop synchronizes with the push, so the load
//! after it sees the drop (or a later value), unless an earlier swap already reported it. Only the
//! consumer swaps, so marker counts sum exactly to the drops, none lost or counted twice.
//! Swapping before the pop would break this (`loom-tests` has that control model).
//!
//! # Close
//!
//! [`Channel::close`] sets the closed bit; a producer whose entry `fetch_add` comes after it in
//! the word's modification order reads the bit and pushes nothing. [`Channel::drain_final`] first
//! loads the word and only then drains: if the load saw the closed bit with no producer in flight,
//! every producer that entered before the close has already left, its push or drop count
//! happens-before the load (release exit, acquire load; every write to the word is an RMW, so the
//! release sequences reach the load), and no later producer can push. The drain that follows then
//! empties the queue for good. Loading after the drain instead would let a producer push between
//! the two: a stranded item (the other control model).

use crate::sync::BoundedQueue;
use crate::sync::atomic::{AtomicU64, Ordering};

/// State bit: new work (starts, session events) is admitted.
const ACCEPTING: u64 = 1;
/// State bit: the channel is closed for good; nothing is admitted any more.
const CLOSED: u64 = 2;
/// One producer in flight, in the state word (the count sits above the two flag bits).
const IN_FLIGHT_ONE: u64 = 4;

/// How one capture call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Admission {
    /// The item is in the queue; the consumer will drain it.
    Accepted,
    /// The queue was full: the item is gone and counted in the pending drops.
    Dropped,
    /// The gate was shut (not accepting, or closed): nothing was queued and nothing counted.
    NotAdmitted,
}

/// How the first half of a pair (an action's start) ended, with what its second half needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start<C> {
    /// The start is queued; `C` is what the completion carries.
    Accepted(C),
    /// The start was dropped (full queue); its completion will be counted as dropped too.
    Dropped,
    /// The start was not admitted; its completion is not recorded or counted either.
    NotAdmitted,
}

impl<C> Start<C> {
    /// The admission of the start alone.
    pub fn admission(&self) -> Admission {
        match self {
            Self::Accepted(_) => Admission::Accepted,
            Self::Dropped => Admission::Dropped,
            Self::NotAdmitted => Admission::NotAdmitted,
        }
    }
}

/// One entry of the drain's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drained<T> {
    /// An accepted item, in queue order.
    Captured(T),
    /// `count` items were dropped on a full queue; emitted before the next item drained.
    Dropped {
        /// How many items were dropped since the previous marker (never 0).
        count: u64,
    },
}

impl<T> Drained<T> {
    /// How many events this entry stands for: one item, or the drops a marker reports.
    pub fn events(&self) -> u64 {
        match self {
            Self::Captured(_) => 1,
            Self::Dropped { count } => *count,
        }
    }
}

/// The outcome of one `Channel::drain_final` round (`CaptureDrain::drain_final`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinalDrain {
    /// How many entries (items and markers) this round appended.
    pub appended: usize,
    /// Nothing more can ever arrive and everything that did is drained: stop draining.
    pub settled: bool,
}

/// Which calls a gate lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// A start or a session event: needs accepting and not closed.
    NewWork,
    /// The completion of an admitted start: needs only not closed (a pause after a start must
    /// not orphan the start).
    FollowUp,
}

/// A producer's registration as in flight; leaving (drop) publishes its push or drop count.
struct InFlight<'a> {
    /// The state word the registration was made in.
    state: &'a AtomicU64,
}

impl Drop for InFlight<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.state.fetch_sub(IN_FLIGHT_ONE, Ordering::Release);
    }
}

/// Keeps its value on cache lines of its own (128 bytes: x86 prefetches lines in pairs), so
/// words only producers write (the state word, the pair counter) and a word the consumer reads
/// after every pop (the drop counter) do not bounce one line between cores.
#[derive(Debug)]
#[repr(align(128))]
pub struct OwnLine<T>(pub T);

/// What every admitted start updates, on one line: the state word and the pair counter.
#[derive(Debug)]
struct StateLine {
    /// Flag bits (`ACCEPTING`, `CLOSED`) and the in-flight producer count.
    word: AtomicU64,
    /// The number the next admitted start gets ([`Channel::begin`]).
    next_pair: AtomicU64,
}

/// The bounded queue with its counters, gate and close flag. Producers share it by reference;
/// exactly one consumer calls the `pop`/`take_drops`/`drain*` side.
#[derive(Debug)]
pub struct Channel<T> {
    /// The accepted items, oldest first.
    queue: BoundedQueue<T>,
    /// Flag bits (`ACCEPTING`, `CLOSED`) and the in-flight producer count, and beside them the
    /// pair counter.
    state: OwnLine<StateLine>,
    /// Items dropped on a full queue and not yet reported by a marker.
    pending_drops: OwnLine<AtomicU64>,
}

impl<T> Channel<T> {
    /// A channel of `capacity_events` slots (at least 1), not accepting yet.
    pub fn new(capacity_events: usize) -> Self {
        Self {
            queue: BoundedQueue::new(capacity_events.max(1)),
            state: OwnLine(StateLine {
                word: AtomicU64::new(0),
                next_pair: AtomicU64::new(0),
            }),
            pending_drops: OwnLine(AtomicU64::new(0)),
        }
    }

    /// How many items the queue holds at most.
    pub fn capacity(&self) -> usize {
        self.queue.capacity()
    }

    /// How many items are queued now (a status reading; may be stale at once).
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Opens or shuts the gate for new work. Has no effect once closed.
    ///
    /// The writer calls this after every batch, nearly always with no change: a plain load
    /// first, so an unchanged gate is not written, and the state word (which every capture
    /// call updates) stays in the producers' caches instead of moving to the writer's core.
    pub fn set_accepting(&self, accepting: bool) {
        if (self.state.0.word.load(Ordering::Acquire) & ACCEPTING != 0) == accepting {
            return;
        }
        if accepting {
            self.state.0.word.fetch_or(ACCEPTING, Ordering::AcqRel);
        } else {
            self.state.0.word.fetch_and(!ACCEPTING, Ordering::AcqRel);
        }
    }

    /// Whether new work is admitted now (accepting and not closed).
    pub fn is_accepting(&self) -> bool {
        let state = self.state.0.word.load(Ordering::Acquire);
        state & ACCEPTING != 0 && state & CLOSED == 0
    }

    /// Whether [`Channel::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.state.0.word.load(Ordering::Acquire) & CLOSED != 0
    }

    /// Closes the channel for good: every later capture call is refused and not counted.
    pub fn close(&self) {
        self.state.0.word.fetch_or(CLOSED, Ordering::AcqRel);
    }

    /// Whether the channel is closed with no producer inside a capture call: from then on
    /// nothing can be pushed or counted. Everything pushed or counted before is visible to the
    /// caller (the in-flight exits release, this load acquires).
    pub fn is_quiescent(&self) -> bool {
        let state = self.state.0.word.load(Ordering::Acquire);
        state & CLOSED != 0 && state < IN_FLIGHT_ONE
    }

    /// Registers the caller as in flight if `gate` lets it through; `None` (and nothing
    /// registered) otherwise.
    #[inline(always)]
    fn enter(&self, gate: Gate) -> Option<InFlight<'_>> {
        let before = self
            .state
            .0
            .word
            .fetch_add(IN_FLIGHT_ONE, Ordering::Acquire);
        let registration = InFlight {
            state: &self.state.0.word,
        };
        let open = before & CLOSED == 0 && (gate == Gate::FollowUp || before & ACCEPTING != 0);
        // Not open: `registration` drops here and the count goes back down.
        open.then_some(registration)
    }

    /// Pushes `item`, or counts it as dropped when the queue is full.
    #[inline(always)]
    fn push_or_count(&self, item: T) -> Admission {
        match self.queue.push(item) {
            Ok(()) => Admission::Accepted,
            Err(_refused) => {
                self.count_drop();
                Admission::Dropped
            }
        }
    }

    /// One more item dropped: one atomic increment, reported by the next marker.
    #[inline(always)]
    fn count_drop(&self) {
        self.pending_drops.0.fetch_add(1, Ordering::Release);
    }

    /// Captures one item of new work. `make` runs only when admitted, so a refused call builds
    /// (and allocates, and reads the clock for) nothing.
    #[inline(always)]
    pub fn offer(&self, make: impl FnOnce() -> T) -> Admission {
        match self.enter(Gate::NewWork) {
            Some(_in_flight) => self.push_or_count(make()),
            None => Admission::NotAdmitted,
        }
    }

    /// Captures the first half of a pair. `make` (run only when admitted) gets the pair's
    /// number, distinct from every other admitted start's on this channel (a relaxed increment
    /// on the state word's line, which the call holds anyway), and returns the item and what
    /// the second half will need; that part is kept only if the item was accepted.
    #[inline(always)]
    pub fn begin<C>(&self, make: impl FnOnce(u64) -> (T, C)) -> Start<C> {
        let Some(_in_flight) = self.enter(Gate::NewWork) else {
            return Start::NotAdmitted;
        };
        let pair = self.state.0.next_pair.fetch_add(1, Ordering::Relaxed);
        let (item, follow_up) = make(pair);
        match self.push_or_count(item) {
            Admission::Accepted => Start::Accepted(follow_up),
            Admission::Dropped | Admission::NotAdmitted => Start::Dropped,
        }
    }

    /// Captures the second half of a pair begun by [`Channel::begin`]: queued if the start was
    /// accepted (even if the gate has shut since), counted as dropped if the start was dropped
    /// (no orphan completion), nothing if the start was not admitted. After close: nothing.
    #[inline(always)]
    pub fn complete<C>(&self, start: Start<C>, make: impl FnOnce(C) -> T) -> Admission {
        if let Start::NotAdmitted = start {
            return Admission::NotAdmitted;
        }
        let Some(_in_flight) = self.enter(Gate::FollowUp) else {
            return Admission::NotAdmitted;
        };
        match start {
            Start::Accepted(follow_up) => self.push_or_count(make(follow_up)),
            Start::Dropped => {
                self.count_drop();
                Admission::Dropped
            }
            Start::NotAdmitted => Admission::NotAdmitted,
        }
    }

    /// Drops counted and not yet reported by a marker (a status reading; may be stale at once).
    pub fn pending_drops(&self) -> u64 {
        self.pending_drops.0.load(Ordering::Acquire)
    }

    /// Consumer only: the oldest queued item.
    pub fn pop(&self) -> Option<T> {
        self.queue.pop()
    }

    /// Consumer only: takes the pending drops (`None` when there are none). A plain load first,
    /// so the common case (no drops) costs no RMW.
    pub fn take_drops(&self) -> Option<u64> {
        if self.pending_drops.0.load(Ordering::Acquire) == 0 {
            return None;
        }
        let count = self.pending_drops.0.swap(0, Ordering::AcqRel);
        (count != 0).then_some(count)
    }

    /// Consumer only: pops up to `max` items into `out`, each preceded by a marker for the drops
    /// pending when it was popped, and a trailing marker when the queue ran empty with drops
    /// pending. Returns how many entries (items and markers) it appended.
    pub fn drain(&self, max: usize, out: &mut Vec<Drained<T>>) -> usize {
        self.drain_observing_empty(max, out).0
    }

    /// [`Channel::drain`], also telling whether a pop found the queue empty.
    fn drain_observing_empty(&self, max: usize, out: &mut Vec<Drained<T>>) -> (usize, bool) {
        let before = out.len();
        let mut popped = 0usize;
        let mut emptied = false;
        while popped < max {
            let Some(item) = self.pop() else {
                emptied = true;
                break;
            };
            if let Some(count) = self.take_drops() {
                out.push(Drained::Dropped { count });
            }
            out.push(Drained::Captured(item));
            popped += 1;
        }
        if emptied && let Some(count) = self.take_drops() {
            out.push(Drained::Dropped { count });
        }
        (out.len().saturating_sub(before), emptied)
    }

    /// Consumer only: one round of the shutdown drain. Closes the channel (idempotent), then
    /// drains up to `max` items. `settled` is true once no producer can add anything any more and
    /// this round left nothing behind; until then call it again (under a deadline: a producer
    /// preempted inside its call keeps the channel unsettled until it runs again).
    pub fn drain_final(&self, max: usize, out: &mut Vec<Drained<T>>) -> FinalDrain {
        self.close();
        // Checked BEFORE draining (module doc, "Close").
        let quiet = self.is_quiescent();
        let (appended, emptied) = self.drain_observing_empty(max, out);
        FinalDrain {
            appended,
            settled: quiet && emptied,
        }
    }
}
