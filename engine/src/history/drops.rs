//! Drop accounting and sequence reservation for the history writer's appends.
//!
//! Every event the writer cannot make durable is reported dropped by the next drop marker
//! (`health{events_dropped, count}` before the next event), and every drop joins the lifetime
//! total once: when its marker is durable, or alone when no marker can be written. An
//! [`AppendPlan`] carries one batch through: the sequences it takes, the journal reservation
//! it needs first, and what it cost if it fails ([`BatchMarkers::lost`]).

use std::ops::RangeInclusive;

use annal_schema::{EventDraft, HealthCategory, Payload};

use super::{Effect, State};
use crate::health::SignalKind;
use crate::journal::JournalEvent;

/// How many sequences the writer reserves in the journal at a time. The reservation is made
/// durable before any history record uses one of its sequences, so after a crash the next
/// generation starts above it: sequences are never reused, at the cost of a gap of at most
/// this many numbers per crash, recorded as skipped (a clean stop releases what it did not
/// hand out, so a clean restart leaves none). Each reservation is
/// a durable journal append on the writer's path (~0.4 ms here): at 4,096 a 100,000-event
/// stream made 24 of them, one in every ~5 commits; at 65,536 it makes two.
pub const SEQUENCE_RESERVE_BLOCK: u64 = 65_536;

/// Most sequences the history writer hands out past what is certainly durable: its last
/// successful sync, its floor at open, or a range the journal holds as lost
/// ([`State::must_sync_first`]). Journaled with each reservation, so after a crash in another
/// boot the skip stops this far above that point instead of at the reservation's end
/// (`journal::Command::SkipAfterCrash`): a sixteenth of [`SEQUENCE_RESERVE_BLOCK`]. Far above
/// the largest batch (a flush takes at most the capture queue's 512 events, plus a drop
/// marker), so a batch fits after a sync; and above what the group commit appends between
/// two ticks at the append bench's rate (~1,700 events per 5 ms at 340,000 events/s), so the
/// bound adds no sync there.
pub const IN_FLIGHT_SEQUENCES_MAX: u64 = 4_096;

/// The drop markers of one history batch, by their place in it: what a failed append lost is
/// counted from them and the error's exact lost range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchMarkers(Vec<(u64, u64)>);

/// What a failed append cost, counted for the next drop marker and the lifetime total.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FailedAppend {
    /// Events to report dropped: every lost record of earlier batches (as a failed sync
    /// reports them) and every lost event of this one, plus the drops its lost markers carried.
    pub lost_events: u64,
    /// Drops reported by this batch's markers that are durable all the same (written to a chunk
    /// the failed append closed).
    pub durable_drops: u64,
}

impl BatchMarkers {
    /// Markers at these `(index in the batch, drops)`.
    pub fn new(markers: Vec<(u64, u64)>) -> Self {
        Self(markers)
    }

    /// The `(index, drops)` of every drop marker in `drafts`.
    pub fn of(drafts: &[EventDraft]) -> Self {
        Self(
            drafts
                .iter()
                .enumerate()
                .filter_map(|(index, d)| match d.payload {
                    Payload::Health {
                        category: HealthCategory::EventsDropped,
                        count,
                    } => Some((index as u64, count)),
                    _ => None,
                })
                .collect(),
        )
    }

    /// How many markers.
    pub fn count(&self) -> u64 {
        self.0.len() as u64
    }

    /// The drops they report.
    pub fn drops(&self) -> u64 {
        self.0.iter().map(|(_, drops)| drops).sum()
    }

    /// What a failed append of this batch (sequences `first..first + count`) cost, given the
    /// sequences the store reports `lost` (`None`: nothing).
    pub fn lost(&self, first: u64, count: u64, lost: Option<&RangeInclusive<u64>>) -> FailedAppend {
        let Some(lost) = lost else {
            return FailedAppend {
                lost_events: 0,
                durable_drops: self.drops(),
            };
        };
        let is_lost = |index: u64| lost.contains(&(first + index));
        let earlier = first
            .saturating_sub(*lost.start())
            .min(lost.clone().count() as u64);
        let lost_in_batch = (0..count).filter(|&index| is_lost(index)).count() as u64;
        let (mut lost_markers, mut lost_drops, mut durable_drops) = (0, 0, 0);
        for &(index, drops) in &self.0 {
            if is_lost(index) {
                lost_markers += 1;
                lost_drops += drops;
            } else {
                durable_drops += drops;
            }
        }
        FailedAppend {
            lost_events: earlier + lost_in_batch - lost_markers + lost_drops,
            durable_drops,
        }
    }
}

/// One batch of history drafts on its way to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendPlan {
    /// The batch's first sequence, as the store will assign it (`u64::MAX`: none left, and the
    /// append refuses).
    first: u64,
    /// Its last.
    last: u64,
    /// How many drafts.
    count: u64,
    /// Its drop markers.
    markers: BatchMarkers,
    /// Of the drops its markers report, how many are in the lifetime total already (owed a
    /// marker: `State::unmarked_drops` of the journal).
    counted: u64,
    /// The journal's reservation must reach this sequence, durably, before the append.
    reserve_through: Option<u64>,
    /// The boot the reservation is made in.
    boot: Option<crate::boot::BootId>,
}

impl AppendPlan {
    /// The journal event that reserves the batch's sequences, when the batch passes the
    /// reservation: appended durably before the history write, so no sequence is ever reused.
    pub fn reservation(&self) -> Option<JournalEvent> {
        self.reserve_through
            .map(|high_water| JournalEvent::SequenceMarked {
                high_water,
                boot: self.boot,
                in_flight_max: Some(IN_FLIGHT_SEQUENCES_MAX),
            })
    }

    /// If nothing of this batch is appended: its events and the drops its markers reported
    /// (those owed a marker stay owed, not counted again).
    fn lost_if_unappended(&self) -> u64 {
        let drops = self.markers.drops();
        (self.count - self.markers.count()) + drops - self.counted.min(drops)
    }
}

impl State {
    /// The plan for appending `drafts` (none: nothing to append), whose first sequence the
    /// store will assign as `next_sequence` (`None`: none left), where `counted` of the drops
    /// their markers report are owed a marker and in the lifetime total already.
    pub fn plan_append(
        &self,
        drafts: &[EventDraft],
        counted: u64,
        next_sequence: Option<u64>,
    ) -> Option<AppendPlan> {
        let count = drafts.len() as u64;
        if count == 0 {
            return None;
        }
        let markers = BatchMarkers::of(drafts);
        let counted = counted.min(markers.drops());
        let first = next_sequence.unwrap_or(u64::MAX);
        let last = first.saturating_add(count - 1);
        let reserve_through =
            (last > self.reserved_through).then(|| last.saturating_add(SEQUENCE_RESERVE_BLOCK));
        Some(AppendPlan {
            first,
            last,
            count,
            markers,
            counted,
            reserve_through,
            boot: self.boot,
        })
    }

    /// Whether the writer must make what it appended durable before it appends `plan`: the
    /// batch would take a sequence more than [`IN_FLIGHT_SEQUENCES_MAX`] above `durable_base`
    /// (what is certainly durable or recorded lost). If it still would after the sync, the
    /// batch is not appended.
    pub fn must_sync_first(plan: &AppendPlan, durable_base: u64) -> bool {
        plan.last > durable_base.saturating_add(IN_FLIGHT_SEQUENCES_MAX)
    }

    /// The batch was not appended (no writer open, or its reservation failed): its events
    /// and new drops are reported by the next marker.
    pub fn not_appended(&mut self, plan: &AppendPlan) {
        self.count_lost(plan.lost_if_unappended());
    }

    /// The plan's reservation is durable in the journal.
    pub fn reserved(&mut self, plan: &AppendPlan) {
        if let Some(through) = plan.reserve_through {
            self.reserved_through = self.reserved_through.max(through);
        }
    }

    /// The batch is appended: its markers' drops join the lifetime total (or, owed ones,
    /// are signalled marked), and a failing store has recovered.
    pub fn appended(&mut self, plan: &AppendPlan) -> Vec<Effect> {
        let mut effects = self.drops_marked(plan.markers.drops(), plan.counted);
        effects.extend(self.storage_ok());
        effects
    }

    /// The append failed with `category` (`None`: `storage_unavailable`). `refused`: none of
    /// it reached the disk; otherwise the store reports `lost`. Every lost event is reported by
    /// the next marker; markers that reached a chunk the failed append closed (synced) are in
    /// the history, and their drops count as on success; owed drops whose marker was lost stay
    /// owed, not reported again.
    pub fn append_failed(
        &mut self,
        plan: &AppendPlan,
        refused: bool,
        lost: Option<RangeInclusive<u64>>,
        category: Option<HealthCategory>,
    ) -> Vec<Effect> {
        let lost = if refused {
            Some(plan.first..=plan.last)
        } else {
            lost
        };
        let outcome = plan.markers.lost(plan.first, plan.count, lost.as_ref());
        let counted_durable = plan.counted.min(outcome.durable_drops);
        let counted_lost = plan.counted - counted_durable;
        let mut effects = self.records_lost(lost, outcome.lost_events.saturating_sub(counted_lost));
        effects.extend(self.drops_marked(outcome.durable_drops, counted_durable));
        effects.push(self.storage_fault(category.unwrap_or(HealthCategory::StorageUnavailable)));
        effects
    }

    /// `marked` drops were written in history markers, `counted` of them already in the
    /// lifetime total: the rest join it, durable with the journal's next tick, and the
    /// counted ones are signalled marked.
    pub fn drops_marked(&mut self, marked: u64, counted: u64) -> Vec<Effect> {
        let mut effects = Vec::new();
        let new = marked.saturating_sub(counted);
        if new > 0 {
            effects.push(self.record_drop_total(new));
        }
        if counted > 0 {
            effects.push(Effect::Signal(SignalKind::DropsMarked { count: counted }));
        }
        effects
    }

    /// `count` more drops in the lifetime total, durable with the journal's next tick.
    pub fn record_drop_total(&mut self, count: u64) -> Effect {
        let recorded = JournalEvent::DropsRecorded { count };
        self.projection.apply(&recorded);
        Effect::Record(vec![recorded])
    }

    /// Every record in `lost` (a failed sync or closing sync) counted as dropped, one event
    /// each: [`State::records_lost`].
    pub fn records_lost_to(&mut self, lost: Option<RangeInclusive<u64>>) -> Vec<Effect> {
        let events = lost
            .as_ref()
            .map_or(0, |range| range.clone().count() as u64);
        self.records_lost(lost, events)
    }

    /// Records the store reports lost (`lost`; never durable): `events` more to report by the
    /// next drop marker, and the Query actor told to forget them, so no page returns an event
    /// the history reports dropped (it answered appended, unsynced events from its cache).
    /// The range is journaled too: a failed sync may have left those records on disk, and a
    /// later reader forgets them on the journal's word (`journal::State::lost`).
    pub fn records_lost(&mut self, lost: Option<RangeInclusive<u64>>, events: u64) -> Vec<Effect> {
        self.count_lost(events);
        let Some(lost) = lost else {
            return Vec::new();
        };
        let mut effects = Vec::new();
        let recorded = JournalEvent::RecordsLost {
            first_sequence: *lost.start(),
            last_sequence: *lost.end(),
        };
        if recorded.check_bounds().is_ok() {
            self.projection.apply(&recorded);
            effects.push(Effect::Record(vec![recorded]));
        }
        effects.push(Effect::ForgetLost(lost));
        effects
    }
}

/// Where drops no event followed go at a clean stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrailingDrops {
    /// None are waiting.
    None,
    /// Write a marker of this many alone (history enabled and open); its drops join the
    /// lifetime total with it. If no marker can be drafted, [`State::record_drop_total`].
    Mark(u64),
    /// History is disabled or not open: the drops are journaled without a marker (already
    /// applied), so the total stays exact across the restart.
    Record(Effect),
}

impl State {
    /// Drops no event followed, at a clean stop (their marker waits for the next event, and
    /// none is to come).
    pub fn trailing_drops(&mut self) -> TrailingDrops {
        let count = self.take_lost_unreported();
        if count == 0 {
            TrailingDrops::None
        } else if self.projection.enabled && self.open {
            TrailingDrops::Mark(count)
        } else {
            TrailingDrops::Record(self.record_drop_total(count))
        }
    }

    /// Drops an earlier life counted with no marker (what the supervisor took off the queue
    /// once it gave up on the writer: `journal::State::unmarked_drops`): the marker the history
    /// owes them, written alone as this writer opens, before any event it takes (appended with
    /// them as `counted`). Nothing while history is disabled; a marker that fails stays owed,
    /// for the next open.
    pub fn owed_drops(&self) -> Option<u64> {
        let owed = self.projection.unmarked_drops();
        (owed > 0 && self.projection.enabled).then_some(owed)
    }
}
