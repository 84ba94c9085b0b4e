//! Injected time.
//!
//! The engine asks a [`Clock`] for wall-clock time; it never calls `SystemTime::now` itself, so
//! retention, rotation and expiry are testable without sleeping.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time.
pub trait Clock {
    /// Time since the Unix epoch.
    fn now_since_epoch(&self) -> Duration;
}

/// The system wall clock. A clock set before 1970 reads as the epoch.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_since_epoch(&self) -> Duration {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
    }
}

/// A clock that only moves when told to, for tests.
#[derive(Debug, Clone)]
pub struct ManualClock {
    /// The current reading; shared so a test can advance the clock it handed to the engine.
    now: std::sync::Arc<std::sync::Mutex<Duration>>,
}

impl ManualClock {
    /// A clock reading `start` since the epoch.
    pub fn new(start: Duration) -> Self {
        Self {
            now: std::sync::Arc::new(std::sync::Mutex::new(start)),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self
            .now
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *now += by;
    }
}

impl Clock for ManualClock {
    fn now_since_epoch(&self) -> Duration {
        *self
            .now
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
