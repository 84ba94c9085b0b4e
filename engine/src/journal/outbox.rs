//! [`Outbox`]: journal events between the projection and the disk.
//!
//! An event is applied to the projection at once and then travels: held (not appended yet,
//! because the journal is not open or an append failed), appended but not synced, durable. A
//! storage fault must never lose one silently, since the health after a restart is replayed
//! from them: what a failed append or sync reports lost (the store's exact `lost` range, which
//! leaves out what is durable all the same) goes back in front of the held events, in order, to
//! be appended again.
//!
//! That is at least once, not exactly once: after a failed `fsync` the kernel may still have
//! written some of those records, which a later open then finds beside their second copy. The
//! projection applies such a record twice; for the drop total and a child's restart history
//! that counts more, never less (drops over-reported, a give-up sooner), which is the side to
//! err on.

use std::ops::RangeInclusive;

use super::JournalEvent;

/// Most events held while the journal cannot take them: they are in the projection already
/// and journaled when it can. Past this the oldest held are given up (a journal that stays
/// unwritable that long shows as a storage fault in status).
pub const OUTBOX_HELD_MAX_EVENTS: usize = 256;

/// Journal events not yet durable.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Outbox {
    /// Not appended yet, oldest first.
    held: Vec<JournalEvent>,
    /// Appended since the last successful sync, with their sequences, oldest first.
    unsynced: Vec<(u64, JournalEvent)>,
}

impl Outbox {
    /// Holds `events` after those already held.
    pub fn hold(&mut self, events: impl IntoIterator<Item = JournalEvent>) {
        self.held.extend(events);
        self.cap();
    }

    /// The held events, oldest first: the next append's batch.
    pub fn held(&self) -> &[JournalEvent] {
        &self.held
    }

    /// Whether appended events wait for a sync.
    pub fn has_unsynced(&self) -> bool {
        !self.unsynced.is_empty()
    }

    /// The held events were appended with `sequences` (in batch order): they wait for a sync.
    pub fn appended(&mut self, sequences: impl IntoIterator<Item = u64>) {
        let batch = std::mem::take(&mut self.held);
        self.unsynced.extend(sequences.into_iter().zip(batch));
    }

    /// The append of the held events (sequences from `first` on) failed. `refused`: the store
    /// refused the batch before writing anything (a write rule, no sequence left): it stays
    /// held and the chunk, with what waits for its sync, is untouched. Otherwise the chunk was
    /// abandoned and `lost` is the store's range of sequences that are not durable: the
    /// batch's events in it stay held, those outside it (written to a chunk the append closed)
    /// are durable, and the earlier unsynced events in it go back in front of them.
    pub fn append_failed(&mut self, first: u64, refused: bool, lost: Option<&RangeInclusive<u64>>) {
        if refused {
            return;
        }
        let batch = std::mem::take(&mut self.held);
        self.held = (first..)
            .zip(batch)
            .filter(|(sequence, _)| is_lost(lost, *sequence))
            .map(|(_, event)| event)
            .collect();
        self.requeue(lost);
    }

    /// Takes `events` (one occurrence each, the newest) out of the held ones: the widening
    /// events of a commit that failed, never to be appended ([`super::Widenings`]). One that
    /// is not held (already durable) is left alone: its undo covers it.
    pub fn withdraw(&mut self, events: &[JournalEvent]) {
        for event in events {
            if let Some(at) = self.held.iter().rposition(|held| held == event) {
                self.held.remove(at);
            }
        }
    }

    /// The sync succeeded: everything appended is durable.
    pub fn synced(&mut self) {
        self.unsynced.clear();
    }

    /// The sync failed and the store reports `lost` not durable: those events go back in
    /// front of the held ones.
    pub fn sync_failed(&mut self, lost: Option<&RangeInclusive<u64>>) {
        self.requeue(lost);
    }

    /// Moves the unsynced events in `lost` back in front of the held ones and forgets the
    /// others (durable).
    fn requeue(&mut self, lost: Option<&RangeInclusive<u64>>) {
        let again: Vec<JournalEvent> = std::mem::take(&mut self.unsynced)
            .into_iter()
            .filter(|(sequence, _)| is_lost(lost, *sequence))
            .map(|(_, event)| event)
            .collect();
        if !again.is_empty() {
            self.held.splice(0..0, again);
            self.cap();
        }
    }

    /// Gives up the oldest held events past [`OUTBOX_HELD_MAX_EVENTS`].
    fn cap(&mut self) {
        if self.held.len() > OUTBOX_HELD_MAX_EVENTS {
            let excess = self.held.len() - OUTBOX_HELD_MAX_EVENTS;
            self.held.drain(..excess);
        }
    }
}

/// Whether `sequence` is in the store's `lost` range (`None`: nothing was lost).
fn is_lost(lost: Option<&RangeInclusive<u64>>, sequence: u64) -> bool {
    lost.is_some_and(|range| range.contains(&sequence))
}

#[cfg(test)]
mod tests {
    use super::{OUTBOX_HELD_MAX_EVENTS, Outbox};
    use crate::journal::JournalEvent;

    fn marked(high_water: u64) -> JournalEvent {
        JournalEvent::SequenceMarked {
            high_water,
            boot: None,
            in_flight_max: None,
        }
    }

    fn held_marks(outbox: &Outbox) -> Vec<u64> {
        outbox
            .held()
            .iter()
            .map(|event| match event {
                JournalEvent::SequenceMarked { high_water, .. } => *high_water,
                _ => u64::MAX,
            })
            .collect()
    }

    /// Events 1..=n appended (sequences 1..=n) and not synced.
    fn appended(n: u64) -> Outbox {
        let mut outbox = Outbox::default();
        outbox.hold((1..=n).map(marked));
        outbox.appended(1..=n);
        outbox
    }

    #[test]
    fn a_synced_outbox_holds_nothing_and_a_later_failure_requeues_nothing() {
        let mut outbox = appended(3);
        assert!(outbox.held().is_empty());
        assert!(outbox.has_unsynced());
        outbox.synced();
        assert!(!outbox.has_unsynced());
        outbox.sync_failed(Some(&(1..=3)));
        assert!(outbox.held().is_empty());
    }

    #[test]
    fn a_failed_sync_puts_what_it_lost_back_in_front_in_order() {
        let mut outbox = appended(3);
        outbox.hold([marked(10)]);
        outbox.sync_failed(Some(&(2..=3)));
        assert_eq!(held_marks(&outbox), [2, 3, 10]);
        assert!(!outbox.has_unsynced());
    }

    #[test]
    fn a_failed_append_keeps_only_what_is_not_durable() {
        // 1..=3 appended unsynced; the batch 4..=6 fails after 1..=4 reached a closed chunk.
        let mut outbox = appended(3);
        outbox.hold([marked(4), marked(5), marked(6)]);
        outbox.append_failed(4, false, Some(&(5..=6)));
        assert_eq!(held_marks(&outbox), [5, 6]);
        assert!(!outbox.has_unsynced());
    }

    #[test]
    fn a_failed_append_whose_salvage_failed_requeues_the_earlier_events_first() {
        let mut outbox = appended(2);
        outbox.hold([marked(3)]);
        outbox.append_failed(3, false, Some(&(1..=3)));
        assert_eq!(held_marks(&outbox), [1, 2, 3]);
    }

    #[test]
    fn a_refused_batch_stays_held_whole() {
        let mut outbox = appended(2);
        outbox.hold([marked(3), marked(4)]);
        outbox.append_failed(3, true, None);
        assert_eq!(held_marks(&outbox), [3, 4]);
        assert!(
            outbox.has_unsynced(),
            "the earlier ones still wait for their sync"
        );
    }

    #[test]
    fn past_the_bound_the_oldest_held_are_given_up() {
        let mut outbox = Outbox::default();
        let over = OUTBOX_HELD_MAX_EVENTS as u64 + 5;
        outbox.hold((1..=over).map(marked));
        let marks = held_marks(&outbox);
        assert_eq!(marks.len(), OUTBOX_HELD_MAX_EVENTS);
        assert_eq!(marks.first(), Some(&6));
        assert_eq!(marks.last(), Some(&over));
    }
}
