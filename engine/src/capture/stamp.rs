//! Time stamps for the capture hook: as cheap as the clock allows on the producer's side, turned
//! into wall-clock time on the drain's.
//!
//! Reading the system's real-time clock costs a vDSO call whose data page the kernel rewrites on
//! every timer tick: a capture call after a quiet millisecond pays a cache miss (and often a TLB
//! miss) for it, ~200-500 ns of the paced call (docs/benchmarks.md). When the injected clock IS
//! the system clock ([`Clock::is_system_clock`]), the hook instead reads a CPU counter (`quanta`:
//! the TSC on x86-64, calibrated once per process against the monotonic clock, or the
//! monotonic clock itself where there is no usable counter), which touches no shared memory. The
//! drain reads the wall clock and the counter once per drain call and dates each drained item
//! back from there by the counter's elapsed nanoseconds, so an item's time is the wall-clock time
//! of its capture call, within the counter's calibration error over the item's time in the queue
//! (microseconds at most for the milliseconds an item waits).
//!
//! Any other clock (a test's `ManualClock`) is read by the hook itself, exactly as before: its
//! readings pass through unchanged.

use std::time::Duration;

use crate::clock::Clock;

/// How a channel stamps its capture calls.
pub(super) enum Stamper {
    /// A CPU counter calibrated against the system clocks; the drain converts its readings.
    Counter(quanta::Clock),
    /// The injected clock, read by the hook; its readings are the items' times.
    Clock,
}

/// A stamp taken by a capture call: a raw counter reading ([`Stamper::Counter`]), or the
/// clock's wall-clock time in nanoseconds since the epoch ([`Stamper::Clock`]; saturating, in
/// the year 2554).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp(u64);

/// The drain's fix point for one drain call: the wall-clock time and the counter, read together.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reference {
    /// Wall-clock time since the epoch when the drain began (unused, 0, for
    /// [`Stamper::Clock`]).
    wall: Duration,
    /// The counter at the same moment (unused, 0, for [`Stamper::Clock`]).
    counter: u64,
}

impl Stamper {
    /// The stamper for `clock`: the counter when `clock` is the system clock. Calibrating the
    /// counter happens here, once per process (never in a capture call): ~0.9 ms on the 2-core
    /// machine, bounded by `quanta` at 200 ms; a later channel's stamper takes ~60 us.
    pub(super) fn for_clock(clock: &dyn Clock) -> Self {
        if clock.is_system_clock() {
            Self::Counter(quanta::Clock::new())
        } else {
            Self::Clock
        }
    }

    /// A stamp for now, on the capture path.
    #[inline(always)]
    pub(super) fn stamp(&self, clock: &dyn Clock) -> Stamp {
        Stamp(match self {
            Self::Counter(counter) => counter.raw(),
            Self::Clock => u64::try_from(clock.now_since_epoch().as_nanos()).unwrap_or(u64::MAX),
        })
    }

    /// The fix point for dating what one drain call takes out of the queue.
    pub(super) fn reference(&self, clock: &dyn Clock) -> Reference {
        match self {
            Self::Counter(counter) => {
                // The counter first: a stamp taken before this drain began is never later.
                let reading = counter.raw();
                Reference {
                    wall: clock.now_since_epoch(),
                    counter: reading,
                }
            }
            // The clock's stamps are their own times: nothing to read.
            Self::Clock => Reference {
                wall: Duration::ZERO,
                counter: 0,
            },
        }
    }

    /// The wall-clock time of `stamp`, taken before `reference`. A counter reading at or after
    /// the reference (counters of two cores a few cycles apart) dates to the reference itself.
    pub(super) fn wall_of(&self, stamp: Stamp, reference: Reference) -> Duration {
        match self {
            Self::Counter(counter) => {
                let age_ns = counter.delta_as_nanos(stamp.0, reference.counter);
                reference.wall.saturating_sub(Duration::from_nanos(age_ns))
            }
            Self::Clock => Duration::from_nanos(stamp.0),
        }
    }
}

impl std::fmt::Debug for Stamper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Counter(_) => "Stamper::Counter",
            Self::Clock => "Stamper::Clock",
        })
    }
}
