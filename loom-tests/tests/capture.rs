//! Models: the capture path's concurrent core (`engine/src/capture/channel.rs`).
//!
//! Producers capture into a tiny queue (1 or 2 slots, so it is full most of the time) while the
//! one consumer drains concurrently; the main thread drains what is left after every thread
//! joined. Under every interleaving loom explores (preemptions bounded by [`PREEMPTIONS`] to keep
//! the whole file around a minute):
//! - markers: every accepted item is drained exactly once, no dropped item ever is, the marker
//!   counts sum exactly to the drops, and before each item the markers already drained cover
//!   every drop its own producer made before pushing it;
//! - pairing: a completion is drained iff its start was accepted (and comes after it), it is
//!   counted as dropped iff its start was dropped or it found the queue full, a start that was
//!   not admitted leaves nothing, and a gate that shuts between start and completion does not
//!   orphan the start;
//! - close: once the final drain settles, nothing accepted is left in the queue, no drop is left
//!   uncounted, and every capture after that is refused.
//!
//! Two controls break one step each and must be caught: swapping the counter before the pop
//! (a drop reported after an item pushed after it), and checking quiescence after the drain
//! instead of before (an item stranded in a closed queue).
#![cfg(loom)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use annal_loom_tests::capture_channel::{Admission, Channel, Drained, Start};
use loom::sync::Arc;
use loom::thread;

/// Preemption bound of every model: enough for the interleavings the controls need (a
/// producer preempted between its failed push and its drop count, or inside a capture call),
/// small enough to keep the file fast.
const PREEMPTIONS: usize = 3;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(PREEMPTIONS);
    builder.check(f);
}

/// One queued item: which producer, and its index among that producer's captures.
type Item = (usize, usize);

/// Sum of all marker counts; panics on a zero marker (a marker always reports something).
fn marker_total<T>(out: &[Drained<T>]) -> u64 {
    out.iter()
        .map(|e| match e {
            Drained::Dropped { count } => {
                assert_ne!(*count, 0, "a marker of 0");
                *count
            }
            Drained::Captured(_) => 0,
        })
        .sum()
}

/// Checks the marker model's invariants on the full drained sequence `out`, given what each
/// producer's calls returned.
fn check_markers(out: &[Drained<Item>], outcomes: &[Vec<Admission>]) {
    let dropped: u64 = outcomes
        .iter()
        .flatten()
        .filter(|a| **a == Admission::Dropped)
        .count() as u64;
    assert_eq!(
        marker_total(out),
        dropped,
        "markers sum exactly to the drops"
    );
    let mut markers_so_far = 0u64;
    let mut seen = Vec::new();
    for entry in out {
        match entry {
            Drained::Dropped { count } => markers_so_far += count,
            Drained::Captured((producer, index)) => {
                assert_eq!(
                    outcomes[*producer][*index],
                    Admission::Accepted,
                    "only accepted items are drained"
                );
                let drops_before = outcomes[*producer][..*index]
                    .iter()
                    .filter(|a| **a == Admission::Dropped)
                    .count() as u64;
                assert!(
                    markers_so_far >= drops_before,
                    "a marker precedes the first item pushed after a drop"
                );
                seen.push((*producer, *index));
            }
        }
    }
    let accepted = outcomes
        .iter()
        .flatten()
        .filter(|a| **a == Admission::Accepted)
        .count();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), accepted, "every accepted item drained once");
}

/// Two producer threads, each offering `per_producer` items `(producer, index)`; each answers
/// its admissions in order.
fn spawn_producers(
    channel: &Arc<Channel<Item>>,
    per_producer: usize,
) -> Vec<thread::JoinHandle<Vec<Admission>>> {
    (0..2)
        .map(|producer| {
            let channel = channel.clone();
            thread::spawn(move || {
                (0..per_producer)
                    .map(|index| channel.offer(|| (producer, index)))
                    .collect()
            })
        })
        .collect()
}

/// Two producers capture `per_producer` items each into a queue of `capacity` while `drain`
/// empties it concurrently; returns the outcomes and the whole drained sequence.
fn race_markers(
    capacity: usize,
    per_producer: usize,
    drain: fn(&Channel<Item>, &mut Vec<Drained<Item>>),
) {
    model(move || {
        let channel = Arc::new(Channel::<Item>::new(capacity));
        channel.set_accepting(true);
        let producers = spawn_producers(&channel, per_producer);
        let consumer = {
            let channel = channel.clone();
            thread::spawn(move || {
                let mut out = Vec::new();
                drain(&channel, &mut out);
                drain(&channel, &mut out);
                out
            })
        };
        let outcomes: Vec<_> = producers.into_iter().map(|p| p.join().unwrap()).collect();
        let mut out = consumer.join().unwrap();
        drain(&channel, &mut out);
        check_markers(&out, &outcomes);
        assert_eq!(channel.pending_drops(), 0);
    });
}

fn production_drain(channel: &Channel<Item>, out: &mut Vec<Drained<Item>>) {
    channel.drain(usize::MAX, out);
}

#[test]
fn markers_account_for_every_drop_one_slot() {
    race_markers(1, 2, production_drain);
}

#[test]
fn markers_account_for_every_drop_two_slots() {
    race_markers(2, 2, production_drain);
}

/// A single producer making three captures into one slot: the shape where a drop sits between
/// two accepted items of the same producer.
#[test]
fn a_marker_precedes_the_next_item_of_the_dropping_producer() {
    model(|| {
        let channel = Arc::new(Channel::<Item>::new(1));
        channel.set_accepting(true);
        let producer = {
            let channel = channel.clone();
            thread::spawn(move || {
                (0..3)
                    .map(|index| channel.offer(|| (0, index)))
                    .collect::<Vec<_>>()
            })
        };
        let consumer = {
            let channel = channel.clone();
            thread::spawn(move || {
                let mut out = Vec::new();
                channel.drain(usize::MAX, &mut out);
                channel.drain(usize::MAX, &mut out);
                out
            })
        };
        let outcomes = vec![producer.join().unwrap()];
        let mut out = consumer.join().unwrap();
        channel.drain(usize::MAX, &mut out);
        check_markers(&out, &outcomes);
    });
}

/// Control: the counter swapped BEFORE the pop. loom must find the run where the consumer
/// takes the (still zero) counter, the producer counts a drop and pushes a new item, and the
/// consumer then pops that item with no marker before it.
#[test]
#[should_panic(expected = "a marker precedes the first item pushed after a drop")]
fn control_swapping_before_the_pop_reports_a_drop_late() {
    fn swap_then_pop(channel: &Channel<Item>, out: &mut Vec<Drained<Item>>) {
        loop {
            let drops = channel.take_drops();
            let item = channel.pop();
            if let Some(count) = drops {
                out.push(Drained::Dropped { count });
            }
            match item {
                Some(item) => out.push(Drained::Captured(item)),
                None => break,
            }
        }
    }
    model(|| {
        let channel = Arc::new(Channel::<Item>::new(1));
        channel.set_accepting(true);
        let producer = {
            let channel = channel.clone();
            thread::spawn(move || {
                (0..3)
                    .map(|index| channel.offer(|| (0, index)))
                    .collect::<Vec<_>>()
            })
        };
        let consumer = {
            let channel = channel.clone();
            thread::spawn(move || {
                let mut out = Vec::new();
                swap_then_pop(&channel, &mut out);
                swap_then_pop(&channel, &mut out);
                out
            })
        };
        let outcomes = vec![producer.join().unwrap()];
        let mut out = consumer.join().unwrap();
        swap_then_pop(&channel, &mut out);
        check_markers(&out, &outcomes);
    });
}

/// A queued half of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Half {
    /// Producer `n`'s start.
    Start(usize),
    /// Producer `n`'s completion.
    Done(usize),
}

#[test]
fn a_completion_is_recorded_iff_its_start_was_accepted() {
    model(|| {
        let channel = Arc::new(Channel::<Half>::new(1));
        channel.set_accepting(true);
        let producers: Vec<_> = (0..2)
            .map(|n| {
                let channel = channel.clone();
                thread::spawn(move || {
                    let start = channel.begin(|pair| (Half::Start(n), pair));
                    let started = start.admission();
                    let pair = match &start {
                        Start::Accepted(pair) => Some(*pair),
                        Start::Dropped | Start::NotAdmitted => None,
                    };
                    let completed = channel.complete(start, |_pair| Half::Done(n));
                    (started, completed, pair)
                })
            })
            .collect();
        // The consumer drains, shuts the gate (a pause), and drains again.
        let consumer = {
            let channel = channel.clone();
            thread::spawn(move || {
                let mut out = Vec::new();
                channel.drain(usize::MAX, &mut out);
                channel.set_accepting(false);
                channel.drain(usize::MAX, &mut out);
                out
            })
        };
        let results: Vec<_> = producers.into_iter().map(|p| p.join().unwrap()).collect();
        let mut out = consumer.join().unwrap();
        channel.drain(usize::MAX, &mut out);

        let position = |half: Half| out.iter().position(|e| *e == Drained::Captured(half));
        let mut drops = 0u64;
        let pairs: Vec<u64> = results.iter().filter_map(|r| r.2).collect();
        assert!(
            pairs.len() < 2 || pairs[0] != pairs[1],
            "two accepted starts got the same number"
        );
        for (n, (started, completed, _)) in results.iter().enumerate() {
            match started {
                Admission::Accepted => {
                    assert!(position(Half::Start(n)).is_some(), "accepted start drained");
                    assert_ne!(
                        *completed,
                        Admission::NotAdmitted,
                        "a shut gate does not orphan an accepted start"
                    );
                }
                Admission::Dropped => {
                    assert_eq!(position(Half::Start(n)), None);
                    assert_eq!(
                        *completed,
                        Admission::Dropped,
                        "a dropped start's completion is counted as dropped"
                    );
                }
                Admission::NotAdmitted => {
                    assert_eq!(position(Half::Start(n)), None);
                    assert_eq!(*completed, Admission::NotAdmitted, "nothing, not counted");
                }
            }
            drops += u64::from(*started == Admission::Dropped);
            drops += u64::from(*completed == Admission::Dropped);
            match (position(Half::Start(n)), position(Half::Done(n))) {
                (Some(s), Some(d)) => {
                    assert!(s < d, "the completion comes after its start");
                    assert_eq!(*completed, Admission::Accepted);
                }
                (_, Some(_)) => panic!("an orphan completion"),
                (_, None) => assert_ne!(*completed, Admission::Accepted, "completion lost"),
            }
        }
        assert_eq!(
            marker_total(&out),
            drops,
            "markers sum exactly to the drops"
        );
    });
}

/// Producers capture while the consumer closes and runs the final drain until it settles.
fn race_close(
    capacity: usize,
    per_producer: usize,
    closer: fn(&Channel<Item>) -> Vec<Drained<Item>>,
) {
    model(move || {
        let channel = Arc::new(Channel::<Item>::new(capacity));
        channel.set_accepting(true);
        let producers = spawn_producers(&channel, per_producer);
        let consumer = {
            let channel = channel.clone();
            thread::spawn(move || closer(&channel))
        };
        let out = consumer.join().unwrap();
        // Anything a producer does after the final drain settled must be refused.
        let outcomes: Vec<_> = producers.into_iter().map(|p| p.join().unwrap()).collect();
        assert!(
            channel.pop().is_none(),
            "nothing accepted is left undrained after close"
        );
        assert_eq!(
            channel.pending_drops(),
            0,
            "no drop left uncounted after close"
        );
        check_markers(&out, &outcomes);
        assert_eq!(
            channel.offer(|| (9, 9)),
            Admission::NotAdmitted,
            "refused after close"
        );
        assert_eq!(channel.pending_drops(), 0, "and not counted");
    });
}

fn production_close(channel: &Channel<Item>) -> Vec<Drained<Item>> {
    let mut out = Vec::new();
    while !channel.drain_final(usize::MAX, &mut out).settled {
        thread::yield_now();
    }
    out
}

#[test]
fn close_leaves_nothing_stranded_one_slot() {
    race_close(1, 2, production_close);
}

#[test]
fn close_leaves_nothing_stranded_two_slots() {
    race_close(2, 1, production_close);
}

/// Control: quiescence checked AFTER the drain. loom must find the producer that entered
/// before the close and pushes after the drain saw the queue empty.
#[test]
#[should_panic(expected = "nothing accepted is left undrained after close")]
fn control_checking_quiescence_after_the_drain_strands_an_item() {
    fn drain_then_check(channel: &Channel<Item>) -> Vec<Drained<Item>> {
        let mut out = Vec::new();
        channel.close();
        loop {
            channel.drain(usize::MAX, &mut out);
            if channel.is_quiescent() {
                return out;
            }
            thread::yield_now();
        }
    }
    race_close(2, 1, drain_then_check);
}

/// `Start` is what the typed layer keeps in its token; its admission must match what `begin`
/// returned, or the pairing above would test the wrong thing.
#[test]
fn start_admission_matches_its_variant() {
    assert_eq!(Start::Accepted(()).admission(), Admission::Accepted);
    assert_eq!(Start::<()>::Dropped.admission(), Admission::Dropped);
    assert_eq!(Start::<()>::NotAdmitted.admission(), Admission::NotAdmitted);
}
