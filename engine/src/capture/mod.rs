//! The capture hook: what an agent runtime calls on every tool dispatch, and the drain side the
//! Ingress actor empties into the writer.
//!
//! A capture call ([`CaptureHandle`]) is synchronous and callable from any thread, an async task
//! included. It stamps the time (with the system clock, a read of the CPU's counter that the
//! drain turns into wall-clock time, `stamp.rs`; any other injected [`Clock`] is read as is) and
//! pushes one item into a bounded lock-free queue (crossbeam's `ArrayQueue`). It takes no lock,
//! does no I/O, makes no system call, formats no string, never wakes a parked thread (the drain
//! side polls on its own tick), never blocks and never panics (ARCHITECTURE.md section 4). Nor
//! does it allocate or share anything with the consumer beyond the queue: a start moves its
//! capability, application and session label into its queue item by value, and its token keeps
//! only the action's number. A call after a quiet millisecond pays for every cache line it
//! touches that the consumer wrote since, so the fewer the better (docs/benchmarks.md).
//!
//! What the hook leaves to the dequeue side, because it needs keys or costs microseconds:
//! - Action ids: each admitted start takes the channel's next action number (a relaxed
//!   increment on the line the call updates anyway) and its token hands it to the completion;
//!   the writer turns the number into the opaque `action_id` with [`action_id`] and a seed drawn
//!   once.
//! - The completion's context: the drain keeps a copy of each drained start's context (target
//!   and session) for its completion, the last [`OPEN_ACTIONS_RETAINED`] of them, and hands it
//!   over with the completion ([`CapturedItem::ActionCompleted`]).
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
//! - Identity: the drain keeps of a start's application only the fields that pass annal's write
//!   rules (`Application::into_writable`). The daemon and `Application::from_names` refuse such
//!   names outright; this covers a Rust caller that built its identity with the read rules, so a
//!   URL, path or window title never reaches the writer (which would refuse the whole batch) and
//!   the action is still recorded.
//! - Gate: [`CaptureControl::set_accepting`] (paused, disabled, not admitted, shutting down).
//!   While shut, starts and session events are neither queued nor counted as drops. A new
//!   channel starts shut: the engine opens it once it has admitted capture.
//! - Close: [`CaptureDrain::drain_final`] closes the channel and drains it; once it reports
//!   `settled`, nothing accepted is left in the queue and nothing can be accepted any more.
//!   After close every capture call is refused and not counted.
//!
//! The concurrent core (queue, counters, gate, close, action numbers) is `channel.rs` and the
//! drain side's one-pending-wake-up flag, with the [`StallWatch`] that heals a claim whose
//! message was lost, is `wakeup.rs` ([`DrainWakeup`]); both are model-checked by `loom-tests`.

mod channel;
mod stamp;
mod tick;
mod wakeup;

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use annal_schema::{ActionOutcome, Application, Capability, OpaqueId};

use crate::clock::Clock;
use crate::keys::material::{RAW_ID_LEN_BYTES, keyed_id_at, keyed_ids};
use crate::sync::Arc;

pub use channel::{Admission, Drained, FinalDrain};
use channel::{Channel, Start};
use stamp::{Stamp, Stamper};
pub use tick::TickSchedule;
pub use wakeup::{DrainWakeup, StallWatch};

/// Default capacity of the capture queue, in events (ARCHITECTURE.md section 4). At crossbeam's
/// ~60-90 ns per push a burst of 512 events takes a producer ~40 us, far longer than agents
/// take between actions; the drain side empties it every tick.
pub const CAPTURE_QUEUE_CAPACITY_EVENTS: usize = 512;

/// Largest capture queue a channel may be built with, in events. The queue allocates every slot
/// up front (112 bytes each), and a longer queue only delays the drop markers that tell a
/// stalled writer apart from a quiet agent.
pub const CAPTURE_QUEUE_MAX_CAPACITY_EVENTS: usize = 65_536;

/// Action numbers the drain keeps a start's context (target and session) for, for its
/// completion: a start's context is kept until the start numbered this many later is drained.
/// An agent completes an action long before it has started 4,096 others (an agent runtime runs
/// a handful at once); a completion whose start is older than that is still recorded, with its
/// action id and outcome, but without the start's capability, application and session
/// ([`CapturedItem::ActionCompleted`]). A slot is 16 bytes, so at most 64 KiB, plus the
/// distinct contexts kept.
pub const OPEN_ACTIONS_RETAINED: usize = 4_096;

/// Distinct contexts the drain remembers as recently kept, so that the next start with an
/// equal context shares that copy instead of making one (a comparison of a few short strings
/// instead of up to three allocations per start).
pub const OPEN_ACTIONS_SHARED_CONTEXTS: usize = 8;

const _: () = assert!(OPEN_ACTIONS_SHARED_CONTEXTS >= 1 && OPEN_ACTIONS_RETAINED >= 1);

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
        clock,
        stamper,
    });
    Ok((
        CaptureHandle {
            shared: Arc::clone(&shared),
        },
        CaptureDrain {
            shared,
            queued: Vec::new(),
            open: OpenActions::default(),
        },
    ))
}

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
    /// The queue, counters, gate, close flag and action numbers.
    channel: Channel<Queued>,
    /// The wall-clock time items are dated by.
    clock: Arc<dyn Clock>,
    /// How capture calls stamp their time and the drain dates them (`stamp.rs`).
    stamper: Stamper,
}

impl Shared {
    /// The stamp of a capture call now.
    #[inline(always)]
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
    item: QueuedItem,
}

/// What a capture call queues: a [`CapturedItem`] before the drain gives a completion its
/// start's context. A type of its own because the completion's variant, which carries no
/// context here, sets the size of every queue slot: 96 bytes against `CapturedItem`'s 136, one
/// cache line fewer for most slots.
#[derive(Debug)]
enum QueuedItem {
    /// An action began.
    Started {
        /// The action's number.
        action: u64,
        /// Its target and session, moved in from the call's arguments.
        context: ActionContext,
    },
    /// An accepted action completed.
    Completed {
        /// The start's number.
        action: u64,
        /// The validated outcome.
        outcome: ActionOutcome,
    },
    /// A driver session began.
    SessionStarted {
        /// The raw label.
        session: SessionLabel,
    },
    /// A driver session ended.
    SessionEnded {
        /// The raw label.
        session: SessionLabel,
    },
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

/// What an action's start carries and its completion gets back from the drain: its target and
/// session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionContext {
    /// The action's target.
    target: ActionTarget,
    /// The session the action belongs to, when any (raw label; derive the id at dequeue).
    session: Option<SessionLabel>,
}

impl ActionContext {
    /// The action's target.
    pub fn target(&self) -> &ActionTarget {
        &self.target
    }

    /// The session the action belongs to, when any (raw label; derive the id at dequeue).
    pub fn session(&self) -> Option<&SessionLabel> {
        self.session.as_ref()
    }

    /// The target and session, moved out (for a draft).
    pub fn into_parts(self) -> (ActionTarget, Option<SessionLabel>) {
        (self.target, self.session)
    }
}

/// The receipt of [`CaptureHandle::action_started`]; hand it to
/// [`CaptureHandle::action_completed`]. It records whether the start was accepted, dropped or
/// not admitted, which decides what the completion does. `Debug` shows only that, no
/// capability, application, label or action number.
#[must_use = "complete the action with CaptureHandle::action_completed"]
pub struct ActionToken {
    /// How the start went, with the action's number when it was accepted.
    start: Start<u64>,
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
        /// The action number (see [`action_id`]), taken by the capture call.
        action: u64,
        /// Target and session of the action.
        context: ActionContext,
    },
    /// An accepted action completed.
    ActionCompleted {
        /// The action number of its start.
        action: u64,
        /// The start's target and session, kept by the drain since it drained the start;
        /// `None` when the start is older than the newest [`OPEN_ACTIONS_RETAINED`] drained.
        context: Option<ActionContext>,
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
    /// The channel and clock.
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
        let start = shared.channel.begin(|action| {
            let item = Queued {
                stamp: shared.stamp(),
                item: QueuedItem::Started {
                    action,
                    context: ActionContext {
                        target: ActionTarget {
                            capability,
                            application,
                        },
                        session: session.map(|s| s.label.clone()),
                    },
                },
            };
            (item, action)
        });
        ActionToken { start }
    }

    /// Records an action's outcome, paired with its start through `token` (module doc, "Rules").
    pub fn action_completed(&self, token: ActionToken, outcome: ActionOutcome) {
        let shared = &*self.shared;
        let _ = shared.channel.complete(token.start, |action| Queued {
            stamp: shared.stamp(),
            item: QueuedItem::Completed { action, outcome },
        });
    }

    /// Records that a driver session began, and returns the session. The label is copied into
    /// memory once and is never hashed, written or logged here.
    pub fn session_started(&self, label: &str) -> CaptureSession {
        let label = SessionLabel(Arc::from(label));
        let shared = &*self.shared;
        let started = shared.channel.offer(|| Queued {
            stamp: shared.stamp(),
            item: QueuedItem::SessionStarted {
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
            item: QueuedItem::SessionEnded {
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
}

/// The one consumer of a capture channel (the Ingress actor). Not `Clone`: the drop-marker
/// protocol needs a single consumer.
pub struct CaptureDrain {
    /// The channel and clock.
    shared: Arc<Shared>,
    /// What one drain call takes out of the queue, before it is dated (kept between calls for
    /// its allocation).
    queued: Vec<Drained<Queued>>,
    /// The contexts of the newest drained starts, for their completions.
    open: OpenActions,
}

/// What the drain keeps of the newest drained starts for their completions: each start's
/// context under its action number, in slot `number % OPEN_ACTIONS_RETAINED`, taken out by its
/// completion or replaced by the start [`OPEN_ACTIONS_RETAINED`] numbers later. Kept contexts
/// are shared: a start whose context equals one of the [`OPEN_ACTIONS_SHARED_CONTEXTS`] most
/// recently kept shares that copy, so a run of actions on the same target and session (what
/// agents do) copies nothing at all, and only a completion copies its context back out. Only
/// the one consumer touches it.
#[derive(Debug, Default)]
struct OpenActions {
    /// Slot `number % OPEN_ACTIONS_RETAINED`: the newest start drained into it, with its
    /// context; grown up to that many slots as numbers reach them.
    kept: Vec<Option<(u64, Arc<ActionContext>)>>,
    /// The most recently kept distinct contexts, newest first; at most
    /// [`OPEN_ACTIONS_SHARED_CONTEXTS`].
    recent: VecDeque<Arc<ActionContext>>,
}

impl OpenActions {
    /// Keeps `context` for the completion of `action`.
    fn keep(&mut self, action: u64, context: &ActionContext) {
        match self.recent.iter().position(|c| **c == *context) {
            // The usual case, the same context as the last start: nothing moves.
            Some(0) => {}
            Some(i) => {
                if let Some(newest_first) = self.recent.make_contiguous().get_mut(..=i) {
                    newest_first.rotate_right(1);
                }
            }
            None => {
                self.recent.truncate(OPEN_ACTIONS_SHARED_CONTEXTS - 1);
                self.recent.push_front(Arc::new(context.clone()));
            }
        }
        // Never empty here: the context was found, or just pushed.
        let Some(shared) = self.recent.front().cloned() else {
            return;
        };
        let slot = Self::slot(action);
        if self.kept.len() <= slot {
            self.kept.resize_with(slot + 1, || None);
        }
        if let Some(kept) = self.kept.get_mut(slot) {
            *kept = Some((action, shared));
        }
    }

    /// The context kept for `action`'s completion, taken out (`None` once replaced).
    fn take(&mut self, action: u64) -> Option<ActionContext> {
        let kept = self.kept.get_mut(Self::slot(action))?;
        match kept {
            Some((number, _)) if *number == action => kept
                .take()
                .map(|(_, context)| Arc::unwrap_or_clone(context)),
            // Replaced by a newer start, or already taken.
            _ => None,
        }
    }

    /// The slot of `action`.
    fn slot(action: u64) -> usize {
        // The remainder is below OPEN_ACTIONS_RETAINED, a usize.
        usize::try_from(action % OPEN_ACTIONS_RETAINED as u64).unwrap_or(0)
    }

    /// How many starts' contexts are kept now.
    #[cfg(test)]
    fn kept_starts(&self) -> usize {
        self.kept.iter().filter(|k| k.is_some()).count()
    }
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
    /// empty with drops pending, the marker comes alone. Each item is dated on the way, and each
    /// completion gets its start's context. Returns how many entries (items and markers) it
    /// appended. Never blocks.
    pub fn drain(&mut self, max: usize, out: &mut Vec<Drained<Captured>>) -> usize {
        self.take_from_channel(out, |channel, queued| channel.drain(max, queued))
    }

    /// Runs one of the channel's drains (`take`) into the scratch buffer, then dates, pairs and
    /// moves what it took into `out` ([`CaptureDrain::finish`]).
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

    /// Moves what a drain call took from `queued` to `out`, each item dated (module `stamp`):
    /// a start's context is kept (a copy) for its completion, and a completion gets it back.
    fn finish(&mut self, queued: &mut Vec<Drained<Queued>>, out: &mut Vec<Drained<Captured>>) {
        let shared = &*self.shared;
        let reference = shared.stamper.reference(&*shared.clock);
        out.reserve(queued.len());
        for entry in queued.drain(..) {
            let Queued { stamp, item } = match entry {
                Drained::Captured(queued) => queued,
                Drained::Dropped { count } => {
                    out.push(Drained::Dropped { count });
                    continue;
                }
            };
            let item = match item {
                QueuedItem::Started {
                    action,
                    mut context,
                } => {
                    // Off the hook's path: an identity built with the read rules keeps only
                    // what annal may write (the one rule is the schema's).
                    context.target.application = context
                        .target
                        .application
                        .take()
                        .and_then(Application::into_writable);
                    self.open.keep(action, &context);
                    CapturedItem::ActionStarted { action, context }
                }
                QueuedItem::Completed { action, outcome } => CapturedItem::ActionCompleted {
                    action,
                    context: self.open.take(action),
                    outcome,
                },
                QueuedItem::SessionStarted { session } => CapturedItem::SessionStarted { session },
                QueuedItem::SessionEnded { session } => CapturedItem::SessionEnded { session },
            };
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

    /// Once no writer will ever take what is queued (the supervisor gave up on it): takes up
    /// to `max` items off the queue, with the drops pending, and returns how many events that
    /// is, every one of them lost, for the caller to count as dropped. A completion's kept
    /// start context is released on the way. Never blocks.
    pub fn discard(&mut self, max: usize) -> u64 {
        let mut lost = Vec::new();
        self.drain(max, &mut lost);
        lost.iter().map(Drained::events).sum()
    }

    /// [`CaptureDrain::discard`] as one round of the shutdown drain ([`CaptureDrain::drain_final`]):
    /// closes the channel first; repeat until `settled`. Returns the events lost this round.
    pub fn discard_final(&mut self, max: usize) -> (u64, FinalDrain) {
        let mut lost = Vec::new();
        let round = self.drain_final(max, &mut lost);
        (lost.iter().map(Drained::events).sum(), round)
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
