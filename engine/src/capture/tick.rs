//! How often the drain side looks at the capture queue. The capture hook never wakes anyone (a
//! futex wake would cost the caller microseconds), so the drain side polls: every `active`
//! period while events flow; once the queue stayed empty for `idle_after`, every `idle` period,
//! doubling at each look that still finds nothing, up to `idle_max`; back to `active` at the
//! first look that finds work. An engine embedded in a long-running runtime that records a few
//! actions a minute then wakes about once every `idle_max`, and the first event after an idle
//! spell waits at most one (backed-off) period to be drained.

use std::time::Duration;

/// The drain side's polling schedule (module doc). Pure: the caller sleeps for
/// [`TickSchedule::period`] and reports each look with [`TickSchedule::looked`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickSchedule {
    /// The period while events flow.
    active: Duration,
    /// The first idle period.
    idle: Duration,
    /// The longest idle period.
    idle_max: Duration,
    /// How long the queue must stay empty before the idle periods start.
    idle_after: Duration,
    /// How long the queue has been found empty.
    quiet: Duration,
    /// The idle period now (doubles while the queue stays empty).
    idle_now: Duration,
}

impl TickSchedule {
    /// A schedule that starts active. `idle` is raised to `active` and `idle_max` to `idle`
    /// when given lower.
    pub fn new(active: Duration, idle: Duration, idle_max: Duration, idle_after: Duration) -> Self {
        let idle = idle.max(active);
        Self {
            active,
            idle,
            idle_max: idle_max.max(idle),
            idle_after,
            quiet: Duration::ZERO,
            idle_now: idle,
        }
    }

    /// How long to wait before the next look.
    pub fn period(&self) -> Duration {
        if self.quiet >= self.idle_after {
            self.idle_now
        } else {
            self.active
        }
    }

    /// The look after [`TickSchedule::period`] found work (`true`) or an empty queue.
    pub fn looked(&mut self, found_work: bool) {
        if found_work {
            self.quiet = Duration::ZERO;
            self.idle_now = self.idle;
            return;
        }
        let waited = self.period();
        if self.quiet >= self.idle_after {
            self.idle_now = self.idle_now.saturating_mul(2).min(self.idle_max);
        }
        self.quiet = self.quiet.saturating_add(waited);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn schedule() -> TickSchedule {
        TickSchedule::new(MS(2), MS(20), MS(1_000), MS(100))
    }

    /// The periods of `looks` looks that each found `found`.
    fn periods(schedule: &mut TickSchedule, looks: usize, found: bool) -> Vec<u64> {
        (0..looks)
            .map(|_| {
                let period = schedule.period();
                schedule.looked(found);
                u64::try_from(period.as_millis()).unwrap()
            })
            .collect()
    }

    #[test]
    fn while_events_flow_the_tick_stays_active() {
        let mut s = schedule();
        assert_eq!(periods(&mut s, 100, true), vec![2; 100]);
    }

    #[test]
    fn a_quiet_queue_backs_off_by_doubling_to_the_ceiling() {
        let mut s = schedule();
        // Given an empty queue: 50 active looks make the 100 ms quiet spell.
        let looks = periods(&mut s, 58, false);
        assert_eq!(&looks[..50], &[2; 50][..]);
        // Then the idle period doubles at each empty look, up to the ceiling, and stays there.
        assert_eq!(&looks[50..], &[20, 40, 80, 160, 320, 640, 1_000, 1_000][..]);
    }

    #[test]
    fn the_first_look_that_finds_work_is_active_again() {
        let mut s = schedule();
        periods(&mut s, 60, false);
        assert_eq!(s.period(), MS(1_000));
        s.looked(true);
        assert_eq!(s.period(), MS(2));
        // And a later quiet spell starts again from the first idle period.
        let looks = periods(&mut s, 52, false);
        assert_eq!(looks[50..], [20, 40]);
    }

    #[test]
    fn bounds_given_out_of_order_are_raised() {
        let s = TickSchedule::new(MS(10), MS(5), MS(1), MS(0));
        // idle raised to active, idle_max to idle; with no quiet spell needed, idle at once.
        assert_eq!(s.period(), MS(10));
    }
}
