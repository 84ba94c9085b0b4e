//! Injected time.
//!
//! The engine asks a [`Clock`] for time; it never calls `SystemTime::now` or `Instant::now`
//! itself, so retention, rotation, expiry and group commit are testable without sleeping. Two
//! readings, because they answer different questions: wall-clock time is what events carry and
//! what retention and chunk age compare against; monotonic time never jumps backwards and is what
//! intervals (sync deadlines, idle timeouts) are measured with.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of time, shareable across threads (actors and timers read the same clock).
pub trait Clock: Send + Sync {
    /// Wall-clock time since the Unix epoch. May jump (the owner sets the clock).
    fn now_since_epoch(&self) -> Duration;

    /// Monotonic time since an arbitrary fixed origin of this clock. Never decreases.
    fn monotonic(&self) -> Duration;

    /// Wall-clock time in whole milliseconds since the Unix epoch (what journal records and
    /// policy times carry), saturating.
    fn now_ms(&self) -> u64 {
        millis(self.now_since_epoch())
    }

    /// Whether this clock reads the operating system's clocks, so that a CPU counter calibrated
    /// against them may stand in for it where a clock read is too slow (the capture hook's
    /// stamps). `false` unless a clock says otherwise: an injected clock is always read itself.
    fn is_system_clock(&self) -> bool {
        false
    }
}

/// `duration` in whole milliseconds, saturating at `u64::MAX` (about 584 million years).
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The system clocks. A wall clock set before 1970 reads as the epoch.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

/// The origin of [`SystemClock::monotonic`]: the first reading in this process.
fn process_origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

impl Clock for SystemClock {
    fn now_since_epoch(&self) -> Duration {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
    }

    fn monotonic(&self) -> Duration {
        process_origin().elapsed()
    }

    fn is_system_clock(&self) -> bool {
        true
    }
}

/// The two readings of a [`ManualClock`].
#[derive(Debug, Clone, Copy)]
struct Readings {
    /// Wall-clock time since the epoch.
    wall: Duration,
    /// Monotonic time since the clock was made.
    monotonic: Duration,
}

/// A clock that only moves when told to, for tests and simulations.
#[derive(Debug, Clone)]
pub struct ManualClock {
    /// The current readings; shared so a test can move the clock it handed to the engine.
    now: std::sync::Arc<std::sync::Mutex<Readings>>,
}

impl ManualClock {
    /// A clock whose wall reading is `start` since the epoch and whose monotonic reading is 0.
    pub fn new(start: Duration) -> Self {
        Self {
            now: std::sync::Arc::new(std::sync::Mutex::new(Readings {
                wall: start,
                monotonic: Duration::ZERO,
            })),
        }
    }

    fn readings(&self) -> std::sync::MutexGuard<'_, Readings> {
        self.now
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Time passes: both readings move forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.readings();
        now.wall += by;
        now.monotonic += by;
    }

    /// The owner sets the wall clock to `wall` (forwards or backwards); monotonic time does not
    /// move.
    pub fn set_wall(&self, wall: Duration) {
        self.readings().wall = wall;
    }
}

impl Clock for ManualClock {
    fn now_since_epoch(&self) -> Duration {
        self.readings().wall
    }

    fn monotonic(&self) -> Duration {
        self.readings().monotonic
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(Duration::from_secs(100));
        let shared: std::sync::Arc<dyn Clock> = std::sync::Arc::new(clock.clone());
        clock.advance(Duration::from_secs(5));
        assert_eq!(shared.now_since_epoch(), Duration::from_secs(105));
        assert_eq!(shared.monotonic(), Duration::from_secs(5));
        clock.set_wall(Duration::from_secs(1));
        assert_eq!(shared.now_since_epoch(), Duration::from_secs(1));
        assert_eq!(
            shared.monotonic(),
            Duration::from_secs(5),
            "a wall jump is not time passing"
        );
    }

    #[test]
    fn system_monotonic_never_decreases() {
        let a = SystemClock.monotonic();
        let b = SystemClock.monotonic();
        assert!(b >= a);
    }
}
