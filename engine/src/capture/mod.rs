//! The capture hook: what an agent runtime calls on every tool dispatch, and the drain side the
//! Ingress actor empties into the writer.
//!
//! A capture call ([`CaptureHandle`]) is synchronous and callable from any thread, an async task
//! included. It stamps the time (with the system clock, a read of the CPU's counter that the
//! drain turns into wall-clock time, `stamp.rs`; any other injected [`Clock`] is read as is) and
//! pushes one item into a bounded lock-free queue (crossbeam's `ArrayQueue`). It takes no lock,
//! does no I/O, makes no system call, formats no string, never wakes a parked thread (the drain
//! side polls on its own tick), never blocks and never panics (ARCHITECTURE.md section 4). Nor
//! does it allocate: an admitted start's shared [`ActionContext`] is a slot of the channel's
//! pool ([`CONTEXT_POOL_RECENT_SLOTS`] + [`CONTEXT_POOL_SLOTS_PER_QUEUE_SLOT`] per queue slot,
//! at most [`CONTEXT_POOL_MAX_SPARE_SLOTS`] spare, allocated with the channel), which the consumer hands back through
//! [`CaptureControl::take_target`] once it holds the last reference. Only a start that finds
//! the pool empty (more actions open than the pool holds) allocates.
//!
//! What the hook leaves to the dequeue side, because it needs keys or costs microseconds:
//! - Action ids: the drain numbers each start it drains (a per-channel `u64` counter the single
//!   consumer owns, so the hook touches no counter) and gives the completion its start's number;
//!   the writer turns the number into the opaque `action_id` with [`action_id`] and a seed drawn
//!   once.
//! - Session ids: the hook keeps the raw label in memory only ([`SessionLabel`]); the writer
//!   derives the keyed session id from it at dequeue. A raw label is never written, logged or
//!   shown by `Debug`.
//!
//! Rules:
//! - Full queue: the event is dropped and counted with one atomic increment. The drain reports
//!   the count as a [`Drained::Dropped`] marker before the next item it drains (the writer makes
//!   it one `health{events_dropped}` event); the markers sum exactly to the drops.
//! - Pairing: an [`ActionToken`] remembers how its start went. A completion is queued iff its
//!   start was accepted (then even if the gate shut since); it is counted as dropped iff its
//!   start was dropped (no orphan completions); nothing happens if its start was not admitted.
//! - Gate: [`CaptureControl::set_accepting`] (paused, disabled, not admitted, shutting down).
//!   While shut, starts and session events are neither queued nor counted as drops. A new
//!   channel starts shut: the engine opens it once it has admitted capture.
//! - Close: [`CaptureDrain::drain_final`] closes the channel and drains it; once it reports
//!   `settled`, nothing accepted is left in the queue and nothing can be accepted any more.
//!   After close every capture call is refused and not counted.
//!
//! The concurrent core (queue, counters, gate, close) is `channel.rs`, the context slots' reuse
//! is `pool.rs`, and the drain side's one-pending-wake-up flag is `wakeup.rs` ([`DrainWakeup`]);
//! all three are model-checked by `loom-tests`.

mod channel;
mod pool;
mod stamp;
mod wakeup;

use std::fmt;
use std::time::Duration;

use annal_schema::{ActionOutcome, Application, Capability, OpaqueId};

use crate::clock::Clock;
use crate::keys::material::{RAW_ID_LEN_BYTES, keyed_id_at, keyed_ids};
use crate::sync::Arc;
use crate::sync::atomic::{AtomicU64, Ordering};

pub use channel::{Admission, Drained, FinalDrain};
use channel::{Channel, Start};
use pool::SlotPool;
use stamp::{Stamp, Stamper};
pub use wakeup::DrainWakeup;

/// Default capacity of the capture queue, in events (ARCHITECTURE.md section 4). At crossbeam's
/// ~60-90 ns per push a burst of 512 events takes a producer ~40 us, far longer than agents
/// take between actions; the drain side empties it every tick.
pub const CAPTURE_QUEUE_CAPACITY_EVENTS: usize = 512;

/// Largest capture queue a channel may be built with, in events. The queue allocates every slot
/// up front (about 100 bytes each), and a longer queue only delays the drop markers that tell a
/// stalled writer apart from a quiet agent.
pub const CAPTURE_QUEUE_MAX_CAPACITY_EVENTS: usize = 65_536;

/// Context slots a channel keeps per slot of its queue. A context is held from its start's
/// capture until both the start and the completion are drafted, so the actions open at once are
/// at most the queue's starts plus the tokens an agent holds; one pool slot per queue slot covers
/// a full queue of starts, and the second the tokens of as many open actions again.
pub const CONTEXT_POOL_SLOTS_PER_QUEUE_SLOT: usize = 2;

/// Most spare context slots a channel keeps, whatever its queue's capacity: each slot is about
/// 128 bytes allocated with the channel, so a queue near [`CAPTURE_QUEUE_MAX_CAPACITY_EVENTS`]
/// would otherwise hold ~17 MiB of them. Past this many open actions a start allocates its
/// context, as it did before the pool. The default queue's 1,024 are well below it.
pub const CONTEXT_POOL_MAX_SPARE_SLOTS: usize = 8_192;

/// Context slots a channel hands out first and takes back first, beyond the per-queue-slot
/// ones: a steady trickle of actions cycles through these few, whose cache lines and page are
/// then likely still cached when the next call comes (`pool.rs`). 16 slots are 2 KiB.
pub const CONTEXT_POOL_RECENT_SLOTS: usize = 16;

/// Why a capture channel was not built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CaptureCapacityError {
    /// The capacity is 0 or above [`CAPTURE_QUEUE_MAX_CAPACITY_EVENTS`].
    #[error("capture queue capacity must be 1..={CAPTURE_QUEUE_MAX_CAPACITY_EVENTS} events")]
    OutOfRange,
}

/// Builds a capture channel of `capacity_events` slots stamping times from `clock`: the handle
/// agent runtimes call (clone it freely) and the one drain the Ingress actor owns. The channel
/// starts NOT accepting; open it with [`CaptureControl::set_accepting`].
///
/// `clock` is read on every admitted capture call, so it must not lock or make a system call
/// ([`crate::clock::SystemClock`] reads the vDSO clock; `ManualClock` locks and is for tests).
pub fn capture_channel(
    capacity_events: usize,
    clock: Arc<dyn Clock>,
) -> Result<(CaptureHandle, CaptureDrain), CaptureCapacityError> {
    if !(1..=CAPTURE_QUEUE_MAX_CAPACITY_EVENTS).contains(&capacity_events) {
        return Err(CaptureCapacityError::OutOfRange);
    }
    let stamper = Stamper::for_clock(&*clock);
    let shared = Arc::new(Shared {
        channel: Channel::new(capacity_events),
        contexts: SlotPool::new(
            CONTEXT_POOL_RECENT_SLOTS,
            context_pool_spare_slots(capacity_events),
            ContextSlot::default,
        ),
        clock,
        stamper,
    });
    Ok((
        CaptureHandle {
            shared: Arc::clone(&shared),
        },
        CaptureDrain {
            shared,
            next_action: 0,
            queued: Vec::new(),
        },
    ))
}

/// The spare context slots of a channel of `capacity_events` queue slots.
fn context_pool_spare_slots(capacity_events: usize) -> usize {
    capacity_events
        .saturating_mul(CONTEXT_POOL_SLOTS_PER_QUEUE_SLOT)
        .min(CONTEXT_POOL_MAX_SPARE_SLOTS)
}

const _: () = assert!(
    CAPTURE_QUEUE_CAPACITY_EVENTS * CONTEXT_POOL_SLOTS_PER_QUEUE_SLOT
        <= CONTEXT_POOL_MAX_SPARE_SLOTS
);

/// Action ids [`ActionIds`] reads from the seed's output stream at once, in actions: 16 BLAKE3
/// compressions per window, where a keyed hash per id cost one compression each.
pub const ACTION_ID_WINDOW_ACTIONS: usize = 64;

/// The opaque `action_id` of the action numbered `counter`, derived at dequeue: the raw id
/// numbered `counter` under `seed` ([`keyed_ids`]: the 16 bytes at offset `16 * counter` of the
/// BLAKE3 output stream keyed by `seed`), so ids never repeat within a channel. [`ActionIds`]
/// gives the same ids, reading them a window at a time.
///
/// `seed` must be drawn fresh (random) for each capture channel and used for nothing else: the
/// counter restarts at 0 with every channel, so a reused seed would repeat action ids.
pub fn action_id(seed: &[u8; 32], counter: u64) -> OpaqueId {
    let mut id = [0u8; RAW_ID_LEN_BYTES];
    keyed_ids(seed, counter, &mut id);
    OpaqueId::from_bytes(id)
}

/// [`action_id`] for a writer: reads [`ACTION_ID_WINDOW_ACTIONS`] ids at once from the first
/// counter past its window, so a run of starts costs a quarter compression each. A counter
/// below the window (a completion of an older action) is read alone, leaving the window where
/// it is.
pub struct ActionIds {
    /// The channel's seed.
    seed: [u8; 32],
    /// The counter of the window's first id; `None` before the first read.
    base: Option<u64>,
    /// The window's raw ids, 16 bytes each.
    window: Box<[u8; ACTION_ID_WINDOW_ACTIONS * RAW_ID_LEN_BYTES]>,
}

impl fmt::Debug for ActionIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the seed.
        f.debug_struct("ActionIds")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl ActionIds {
    /// The ids of the channel seeded with `seed`.
    pub fn new(seed: [u8; 32]) -> Self {
        Self {
            seed,
            base: None,
            window: Box::new([0; ACTION_ID_WINDOW_ACTIONS * RAW_ID_LEN_BYTES]),
        }
    }

    /// The id of the action numbered `counter`: always [`action_id`]`(seed, counter)`.
    pub fn id(&mut self, counter: u64) -> OpaqueId {
        let offset = match self.base {
            Some(base) if counter < base => return action_id(&self.seed, counter),
            Some(base) if counter - base < ACTION_ID_WINDOW_ACTIONS as u64 => counter - base,
            _ => {
                keyed_ids(&self.seed, counter, &mut self.window[..]);
                self.base = Some(counter);
                0
            }
        };
        OpaqueId::from_bytes(keyed_id_at(&self.window[..], offset as usize))
    }
}

/// What producers and the drain share.
struct Shared {
    /// The queue, counters, gate and close flag.
    channel: Channel<Queued>,
    /// Emptied action contexts, refilled by the next starts.
    contexts: SlotPool<ContextSlot>,
    /// The wall-clock time items are dated by.
    clock: Arc<dyn Clock>,
    /// How capture calls stamp their time and the drain dates them (`stamp.rs`).
    stamper: Stamper,
}

impl Shared {
    /// The stamp of a capture call now.
    fn stamp(&self) -> Stamp {
        self.stamper.stamp(&*self.clock)
    }
}

/// A capture as queued: its stamp (dated by the drain) and what was captured.
#[derive(Debug)]
struct Queued {
    /// When the capture call ran, as [`Stamper::stamp`] took it.
    stamp: Stamp,
    /// What was captured.
    item: CapturedItem,
}

/// A session's raw label, held in memory only so the writer can derive the keyed session id at
/// dequeue. Cheap to clone (one `Arc`). It is never written or logged: it has no `Display` or
/// `Serialize`, and its `Debug` shows no part of the label.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SessionLabel(Arc<str>);

impl SessionLabel {
    /// The raw label, for deriving the keyed session id. Never write or log it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SessionLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionLabel(<redacted>)")
    }
}

/// A driver session as the capture side knows it: its raw label, in memory only. Pass it to
/// [`CaptureHandle::action_started`] for the actions it holds and end it with
/// [`CaptureHandle::session_ended`]. `Debug` shows no part of the label.
#[must_use = "end the session with CaptureHandle::session_ended"]
pub struct CaptureSession {
    /// The raw label (never written; the writer derives the session id from it).
    label: SessionLabel,
    /// How the `session_started` event went.
    started: Admission,
}

impl CaptureSession {
    /// How the `session_started` event of this session went.
    pub fn started(&self) -> Admission {
        self.started
    }
}

impl fmt::Debug for CaptureSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureSession")
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}

/// What an action targeted: its capability and, when known, its application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionTarget {
    /// The Cua capability the action exercised.
    pub capability: Capability,
    /// The application the action targeted, when known.
    pub application: Option<Application>,
}

/// One slot of a channel's context pool.
#[derive(Debug, Default)]
struct ContextSlot {
    /// The action's number, set by the drain when it drains the start and read back when it
    /// drains the completion (always later: the queue is FIFO and the start is queued before its
    /// token exists). Only the single consumer touches it; atomic because the slot is shared.
    action: AtomicU64,
    /// The action's target; `None` only while the slot is free in the pool.
    target: Option<ActionTarget>,
    /// The session of the slot's action. A freed slot keeps it, so that the next action of the
    /// same session (the usual case) finds it there and does not touch the label's reference
    /// count, a cache line the consumer last wrote. The label stays in memory only, as always.
    session: Option<SessionLabel>,
}

impl ContextSlot {
    /// Fills a free slot for a new action.
    fn refill(&mut self, (target, session): (ActionTarget, Option<&SessionLabel>)) {
        self.target = Some(target);
        let same = match (&self.session, session) {
            (Some(kept), Some(new)) => Arc::ptr_eq(&kept.0, &new.0),
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.session = session.cloned();
        }
    }

    /// A new slot for an action (the pool had none free).
    fn fresh(action: (ActionTarget, Option<&SessionLabel>)) -> Self {
        let mut slot = Self::default();
        slot.refill(action);
        slot
    }
}

/// The action number is bookkeeping of the drain, not part of what was captured.
impl PartialEq for ContextSlot {
    fn eq(&self, other: &Self) -> bool {
        self.target == other.target && self.session == other.session
    }
}

impl Eq for ContextSlot {}

/// What an action's start and completion both carry (its target and session), in one slot of
/// the channel's pool shared by the two, so neither the start nor the completion copies or
/// allocates it. The consumer takes the target out with [`CaptureControl::take_target`], which
/// also returns the slot to the pool once no one else holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionContext(Arc<ContextSlot>);

impl ActionContext {
    /// The action's target; `None` never happens for a context a capture call made (only a free
    /// pool slot is empty, and no `ActionContext` refers to one).
    pub fn target(&self) -> Option<&ActionTarget> {
        self.0.target.as_ref()
    }

    /// The session the action belongs to, when any (raw label; derive the id at dequeue).
    pub fn session(&self) -> Option<&SessionLabel> {
        self.0.session.as_ref()
    }
}

/// The receipt of [`CaptureHandle::action_started`]; hand it to
/// [`CaptureHandle::action_completed`]. It records whether the start was accepted, dropped or
/// not admitted, which decides what the completion does. `Debug` shows only that, no
/// capability, application or label (the action's number is given later, by the drain).
#[must_use = "complete the action with CaptureHandle::action_completed"]
pub struct ActionToken {
    /// How the start went, with the context when it was accepted.
    start: Start<ActionContext>,
}

impl ActionToken {
    /// How the start went.
    pub fn admission(&self) -> Admission {
        self.start.admission()
    }
}

impl fmt::Debug for ActionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActionToken")
            .field("admission", &self.start.admission())
            .finish_non_exhaustive()
    }
}

/// One drained capture: when it happened and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// Wall-clock time of the capture call, since the Unix epoch (the event's `time`): the
    /// injected clock's reading, or with the system clock the drain's reading dated back by the
    /// CPU counter's elapsed time since the call.
    pub at: Duration,
    /// What was captured.
    pub item: CapturedItem,
}

/// What a capture call recorded, before the writer gives it ids and a sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapturedItem {
    /// An action began.
    ActionStarted {
        /// The action number (see [`action_id`]), given by the drain in drain order.
        action: u64,
        /// Target and session of the action.
        context: ActionContext,
    },
    /// An accepted action completed.
    ActionCompleted {
        /// The action number of its start.
        action: u64,
        /// The start's target and session (the same slot).
        context: ActionContext,
        /// The validated outcome.
        outcome: ActionOutcome,
    },
    /// A driver session began.
    SessionStarted {
        /// The raw label (derive the session id at dequeue).
        session: SessionLabel,
    },
    /// A driver session ended.
    SessionEnded {
        /// The raw label (derive the session id at dequeue).
        session: SessionLabel,
    },
}

/// The capture hook agent runtimes call. Cheap to clone; every clone feeds the same queue.
#[derive(Clone)]
pub struct CaptureHandle {
    /// The channel, clock and context pool.
    shared: Arc<Shared>,
}

impl fmt::Debug for CaptureHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureHandle")
            .field("accepting", &self.shared.channel.is_accepting())
            .finish_non_exhaustive()
    }
}

impl CaptureHandle {
    /// Records that an action began. Returns the token its completion needs.
    pub fn action_started(
        &self,
        capability: Capability,
        application: Option<Application>,
        session: Option<&CaptureSession>,
    ) -> ActionToken {
        let shared = &*self.shared;
        let start = shared.channel.begin(|| {
            let target = ActionTarget {
                capability,
                application,
            };
            let context = ActionContext(shared.contexts.acquire(
                (target, session.map(|s| &s.label)),
                ContextSlot::refill,
                ContextSlot::fresh,
            ));
            let item = Queued {
                stamp: shared.stamp(),
                item: CapturedItem::ActionStarted {
                    // Numbered by the drain.
                    action: 0,
                    context: context.clone(),
                },
            };
            (item, context)
        });
        ActionToken { start }
    }

    /// Records an action's outcome, paired with its start through `token` (module doc, "Rules").
    pub fn action_completed(&self, token: ActionToken, outcome: ActionOutcome) {
        let shared = &*self.shared;
        let _ = shared.channel.complete(token.start, |context| Queued {
            stamp: shared.stamp(),
            item: CapturedItem::ActionCompleted {
                // The start's number, given by the drain.
                action: 0,
                context,
                outcome,
            },
        });
    }

    /// Records that a driver session began, and returns the session. The label is copied into
    /// memory once and is never hashed, written or logged here.
    pub fn session_started(&self, label: &str) -> CaptureSession {
        let label = SessionLabel(Arc::from(label));
        let shared = &*self.shared;
        let started = shared.channel.offer(|| Queued {
            stamp: shared.stamp(),
            item: CapturedItem::SessionStarted {
                session: label.clone(),
            },
        });
        CaptureSession { label, started }
    }

    /// Records that a driver session ended. Gated like a start (not paired: it is recorded
    /// whenever the gate is open, whatever happened to `session_started`).
    pub fn session_ended(&self, session: CaptureSession) {
        let shared = &*self.shared;
        let _ = shared.channel.offer(|| Queued {
            stamp: shared.stamp(),
            item: CapturedItem::SessionEnded {
                session: session.label,
            },
        });
    }
}

/// The engine's switch for the admission gate and its status readings. Cheap to clone; get one
/// from [`CaptureDrain::control`]. Agent runtimes only get a [`CaptureHandle`], which cannot
/// open the gate.
#[derive(Clone)]
pub struct CaptureControl {
    /// The channel the gate belongs to.
    shared: Arc<Shared>,
}

impl fmt::Debug for CaptureControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureControl")
            .field("accepting", &self.is_accepting())
            .field("pending_drops", &self.pending_drops())
            .finish_non_exhaustive()
    }
}

impl CaptureControl {
    /// Opens (`true`) or shuts the gate for starts and session events; completions of accepted
    /// starts still pass. No effect once the channel is closed.
    pub fn set_accepting(&self, accepting: bool) {
        self.shared.channel.set_accepting(accepting);
    }

    /// Whether starts and session events are admitted now.
    pub fn is_accepting(&self) -> bool {
        self.shared.channel.is_accepting()
    }

    /// Whether the channel is closed for good.
    pub fn is_closed(&self) -> bool {
        self.shared.channel.is_closed()
    }

    /// Drops not yet reported by a drained marker, for status.
    pub fn pending_drops(&self) -> u64 {
        self.shared.channel.pending_drops()
    }

    /// How many events wait in the queue now, for status (queue depth).
    pub fn queued_events(&self) -> usize {
        self.shared.channel.queued()
    }

    /// The target of a drained action's `context`, for its draft: moved out when this was the
    /// context's last holder (a completion, or a start whose token is gone), and the slot goes
    /// back to the pool; copied when another holder is left (a start whose completion is yet to
    /// come). `None` only for a context no capture call made.
    pub fn take_target(&self, context: ActionContext) -> Option<ActionTarget> {
        self.shared.contexts.release(
            context.0,
            |slot| slot.target.take(),
            |slot| slot.target.clone(),
        )
    }

    /// How many context slots are free in the pool now (for tests and diagnostics).
    pub fn free_context_slots(&self) -> usize {
        self.shared.contexts.free_slots()
    }
}

/// The one consumer of a capture channel (the Ingress actor). Not `Clone`: the drop-marker
/// protocol needs a single consumer.
pub struct CaptureDrain {
    /// The channel and clock.
    shared: Arc<Shared>,
    /// The number the next drained start gets.
    next_action: u64,
    /// What one drain call takes out of the queue, before it is dated and numbered (kept
    /// between calls for its allocation).
    queued: Vec<Drained<Queued>>,
}

impl fmt::Debug for CaptureDrain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureDrain")
            .field("capacity_events", &self.capacity_events())
            .field("closed", &self.shared.channel.is_closed())
            .finish_non_exhaustive()
    }
}

impl CaptureDrain {
    /// Appends up to `max` captured items to `out`, oldest first, each preceded by a
    /// [`Drained::Dropped`] marker when drops were pending as it was popped; if the queue runs
    /// empty with drops pending, the marker comes alone. Each item is dated and each action
    /// numbered on the way (the next number for a start, its start's for a completion). Returns
    /// how many entries (items and markers) it appended. Never blocks.
    pub fn drain(&mut self, max: usize, out: &mut Vec<Drained<Captured>>) -> usize {
        self.take_from_channel(out, |channel, queued| channel.drain(max, queued))
    }

    /// Runs one of the channel's drains (`take`) into the scratch buffer, then dates, numbers
    /// and moves what it took into `out` ([`CaptureDrain::finish`]).
    fn take_from_channel<R>(
        &mut self,
        out: &mut Vec<Drained<Captured>>,
        take: impl FnOnce(&Channel<Queued>, &mut Vec<Drained<Queued>>) -> R,
    ) -> R {
        let mut queued = std::mem::take(&mut self.queued);
        let result = take(&self.shared.channel, &mut queued);
        self.finish(&mut queued, out);
        self.queued = queued;
        result
    }

    /// Moves what a drain call took from `queued` to `out`, each item dated (module `stamp`)
    /// and each action numbered: the next number for a start, its start's for a completion.
    fn finish(&mut self, queued: &mut Vec<Drained<Queued>>, out: &mut Vec<Drained<Captured>>) {
        let shared = &*self.shared;
        let reference = shared.stamper.reference(&*shared.clock);
        out.reserve(queued.len());
        for entry in queued.drain(..) {
            let Queued { stamp, mut item } = match entry {
                Drained::Captured(queued) => queued,
                Drained::Dropped { count } => {
                    out.push(Drained::Dropped { count });
                    continue;
                }
            };
            match &mut item {
                CapturedItem::ActionStarted { action, context } => {
                    *action = self.next_action;
                    context.0.action.store(self.next_action, Ordering::Relaxed);
                    self.next_action = self.next_action.wrapping_add(1);
                }
                CapturedItem::ActionCompleted {
                    action, context, ..
                } => *action = context.0.action.load(Ordering::Relaxed),
                CapturedItem::SessionStarted { .. } | CapturedItem::SessionEnded { .. } => {}
            }
            out.push(Drained::Captured(Captured {
                at: shared.stamper.wall_of(stamp, reference),
                item,
            }));
        }
    }

    /// Drops not yet reported by a drained marker, for status.
    pub fn pending_drops(&self) -> u64 {
        self.shared.channel.pending_drops()
    }

    /// Closes the channel for good: every later capture call is refused and not counted. Follow
    /// it with [`CaptureDrain::drain_final`] until settled.
    pub fn close(&mut self) {
        self.shared.channel.close();
    }

    /// One round of the shutdown drain: closes the channel (if not yet) and drains up to `max`
    /// items like [`CaptureDrain::drain`]. Repeat, under the shutdown deadline, until `settled`:
    /// then nothing accepted is left in the queue and nothing can be accepted any more. It is
    /// unsettled only while a producer is inside a capture call (a few hundred nanoseconds,
    /// longer if that thread is preempted).
    pub fn drain_final(&mut self, max: usize, out: &mut Vec<Drained<Captured>>) -> FinalDrain {
        self.take_from_channel(out, |channel, queued| channel.drain_final(max, queued))
    }

    /// The gate switch and status readings, for the engine.
    pub fn control(&self) -> CaptureControl {
        CaptureControl {
            shared: Arc::clone(&self.shared),
        }
    }

    /// How many events the queue holds at most.
    pub fn capacity_events(&self) -> usize {
        self.shared.channel.capacity()
    }
}

#[cfg(test)]
mod tests;
