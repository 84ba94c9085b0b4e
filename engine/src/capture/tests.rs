//! The capture rules, one test each: accepted / dropped / not admitted, completion pairing,
//! exact drop markers, redacted `Debug`, close, capacity limits and action ids.

use std::sync::Arc;
use std::time::Duration;

use annal_schema::{
    ActionOutcome, Application, BundleId, Capability, DisplayName, Effect, EvidenceKinds, Route,
};

use super::*;
use crate::clock::ManualClock;

/// A raw session label that must never show up in any `Debug` output.
const SECRET_LABEL: &str = "s3cret-session-label-7f";

/// The wall-clock start of every test clock.
const START: Duration = Duration::from_secs(1_800_000_000);

fn channel(capacity: usize) -> (CaptureHandle, CaptureDrain, ManualClock) {
    let clock = ManualClock::new(START);
    let (handle, drain) = capture_channel(capacity, Arc::new(clock.clone())).unwrap();
    drain.control().set_accepting(true);
    (handle, drain, clock)
}

fn capability(name: &str) -> Capability {
    Capability::new(name).unwrap()
}

fn application() -> Option<Application> {
    Application::new(
        Some(BundleId::new("org.example.Editor").unwrap()),
        Some(DisplayName::new("Secret Editor Window").unwrap()),
    )
}

fn outcome() -> ActionOutcome {
    ActionOutcome {
        effect: Effect::Confirmed,
        route: Route::Accessibility,
        delivery: None,
        delivered_count: Some(1),
        evidence_kinds: EvidenceKinds::default(),
        escalation_kind: None,
    }
}

fn drain_all(drain: &mut CaptureDrain) -> Vec<Drained<Captured>> {
    let mut out = Vec::new();
    drain.drain(usize::MAX, &mut out);
    out
}

/// The drained entries in a short comparable form: `S<n>`/`C<n>` for an action's start or
/// completion, `SS`/`SE` for session events, `D<count>` for a marker.
fn shape(entries: &[Drained<Captured>]) -> Vec<String> {
    entries
        .iter()
        .map(|e| match e {
            Drained::Dropped { count } => format!("D{count}"),
            Drained::Captured(c) => match &c.item {
                CapturedItem::ActionStarted { action, .. } => format!("S{action}"),
                CapturedItem::ActionCompleted { action, .. } => format!("C{action}"),
                CapturedItem::SessionStarted { .. } => "SS".into(),
                CapturedItem::SessionEnded { .. } => "SE".into(),
            },
        })
        .collect()
}

#[test]
fn accepted_start_and_completion_carry_time_context_and_outcome() {
    let (handle, mut drain, clock) = channel(8);
    let session = handle.session_started(SECRET_LABEL);
    assert_eq!(session.started(), Admission::Accepted);
    clock.advance(Duration::from_millis(5));
    let token = handle.action_started(
        capability("input.pointer.click"),
        application(),
        Some(&session),
    );
    assert_eq!(token.admission(), Admission::Accepted);
    clock.advance(Duration::from_millis(7));
    handle.action_completed(token, outcome());
    handle.session_ended(session);

    let out = drain_all(&mut drain);
    assert_eq!(shape(&out), ["SS", "S0", "C0", "SE"]);
    let Drained::Captured(start) = &out[1] else {
        panic!()
    };
    let Drained::Captured(done) = &out[2] else {
        panic!()
    };
    assert_eq!(start.at, START + Duration::from_millis(5));
    assert_eq!(done.at, START + Duration::from_millis(12));
    let CapturedItem::ActionStarted {
        context: started, ..
    } = &start.item
    else {
        panic!()
    };
    let CapturedItem::ActionCompleted {
        context: completed,
        outcome: got,
        ..
    } = &done.item
    else {
        panic!()
    };
    assert_eq!(
        completed.as_ref(),
        Some(started),
        "the completion gets its start's context back from the drain"
    );
    let target = started.target();
    assert_eq!(target.capability.as_str(), "input.pointer.click");
    assert_eq!(target.application, application());
    assert_eq!(
        started.session().map(SessionLabel::as_str),
        Some(SECRET_LABEL)
    );
    assert_eq!(got, &outcome());
    let Drained::Captured(ended) = &out[3] else {
        panic!()
    };
    let CapturedItem::SessionEnded { session } = &ended.item else {
        panic!()
    };
    assert_eq!(session.as_str(), SECRET_LABEL);
    assert!(drain_all(&mut drain).is_empty());
}

#[test]
fn action_numbers_are_distinct_and_increasing() {
    let (handle, mut drain, _clock) = channel(8);
    for _ in 0..3 {
        let _token = handle.action_started(capability("a"), None, None);
    }
    assert_eq!(shape(&drain_all(&mut drain)), ["S0", "S1", "S2"]);
}

#[test]
fn a_new_channel_admits_nothing_until_opened() {
    let clock = ManualClock::new(START);
    let (handle, mut drain) = capture_channel(4, Arc::new(clock)).unwrap();
    assert!(!drain.control().is_accepting());
    let token = handle.action_started(capability("a"), None, None);
    assert_eq!(token.admission(), Admission::NotAdmitted);
    assert_eq!(
        handle.session_started("x").started(),
        Admission::NotAdmitted
    );
    assert!(drain_all(&mut drain).is_empty());
    assert_eq!(drain.pending_drops(), 0);
    drain.control().set_accepting(true);
    let token = handle.action_started(capability("a"), None, None);
    assert_eq!(token.admission(), Admission::Accepted);
}

#[test]
fn a_full_queue_drops_and_counts_and_the_marker_comes_first() {
    let (handle, mut drain, _clock) = channel(2);
    let tokens: Vec<_> = (0..4)
        .map(|_| handle.action_started(capability("a"), None, None))
        .collect();
    let admissions: Vec<_> = tokens.iter().map(ActionToken::admission).collect();
    use Admission::{Accepted, Dropped};
    assert_eq!(admissions, [Accepted, Accepted, Dropped, Dropped]);
    assert_eq!(drain.pending_drops(), 2);
    assert_eq!(drain.control().pending_drops(), 2);
    assert_eq!(drain.control().queued_events(), 2);
    // The drops were pending when the first item was popped: one marker, before it.
    assert_eq!(shape(&drain_all(&mut drain)), ["D2", "S0", "S1"]);
    assert_eq!(drain.pending_drops(), 0);
    assert_eq!(drain.control().queued_events(), 0);
    drop(tokens);
}

#[test]
fn a_drop_before_a_push_is_reported_before_that_item() {
    let (handle, mut drain, _clock) = channel(1);
    let _a = handle.action_started(capability("a"), None, None);
    let b = handle.action_started(capability("a"), None, None);
    assert_eq!(b.admission(), Admission::Dropped);
    assert_eq!(shape(&drain_all(&mut drain)), ["D1", "S0"]);
    let _c = handle.action_started(capability("a"), None, None);
    let d = handle.action_started(capability("a"), None, None);
    assert_eq!(d.admission(), Admission::Dropped);
    // Drain one item only: its marker comes with it, the next item comes clean.
    let mut out = Vec::new();
    assert_eq!(drain.drain(1, &mut out), 2);
    // Every admitted start takes a number, a dropped one too (b took 1, d took 3).
    assert_eq!(shape(&out), ["D1", "S2"]);
    let _e = handle.action_started(capability("a"), None, None);
    assert_eq!(shape(&drain_all(&mut drain)), ["S4"]);
}

#[test]
fn pending_drops_on_an_empty_queue_come_as_a_marker_alone() {
    let (handle, mut drain, _clock) = channel(1);
    let accepted = handle.action_started(capability("a"), None, None);
    let dropped = handle.action_started(capability("a"), None, None);
    assert_eq!(shape(&drain_all(&mut drain)), ["D1", "S0"]);
    handle.action_completed(dropped, outcome());
    assert_eq!(drain.pending_drops(), 1);
    assert_eq!(shape(&drain_all(&mut drain)), ["D1"]);
    assert!(drain_all(&mut drain).is_empty(), "a marker is emitted once");
    handle.action_completed(accepted, outcome());
    assert_eq!(shape(&drain_all(&mut drain)), ["C0"]);
}

#[test]
fn drain_respects_max_and_zero_pops_nothing() {
    let (handle, mut drain, _clock) = channel(8);
    for _ in 0..5 {
        let _t = handle.action_started(capability("a"), None, None);
    }
    let mut out = Vec::new();
    assert_eq!(drain.drain(0, &mut out), 0);
    assert_eq!(drain.drain(2, &mut out), 2);
    assert_eq!(drain.drain(2, &mut out), 2);
    assert_eq!(drain.drain(2, &mut out), 1);
    assert_eq!(shape(&out), ["S0", "S1", "S2", "S3", "S4"]);
}

#[test]
fn a_completion_is_dropped_and_counted_iff_its_start_was_dropped() {
    let (handle, mut drain, _clock) = channel(1);
    let accepted = handle.action_started(capability("a"), None, None);
    let dropped = handle.action_started(capability("a"), None, None);
    assert_eq!(shape(&drain_all(&mut drain)), ["D1", "S0"]);
    // The queue is empty now, so a pushed completion would fit: it must not be pushed.
    handle.action_completed(dropped, outcome());
    handle.action_completed(accepted, outcome());
    assert_eq!(shape(&drain_all(&mut drain)), ["D1", "C0"]);
}

#[test]
fn a_completion_of_an_accepted_start_is_recorded_after_the_gate_shuts() {
    let (handle, mut drain, _clock) = channel(4);
    let token = handle.action_started(capability("a"), None, None);
    drain.control().set_accepting(false);
    let refused = handle.action_started(capability("a"), None, None);
    assert_eq!(refused.admission(), Admission::NotAdmitted);
    handle.action_completed(token, outcome());
    handle.action_completed(refused, outcome());
    assert_eq!(shape(&drain_all(&mut drain)), ["S0", "C0"]);
    assert_eq!(drain.pending_drops(), 0);
}

#[test]
fn a_completion_of_a_start_not_admitted_is_nothing_even_once_open() {
    let (handle, mut drain, _clock) = channel(4);
    drain.control().set_accepting(false);
    let token = handle.action_started(capability("a"), None, None);
    drain.control().set_accepting(true);
    handle.action_completed(token, outcome());
    assert!(drain_all(&mut drain).is_empty());
    assert_eq!(drain.pending_drops(), 0);
}

#[test]
fn a_completion_that_finds_the_queue_full_is_counted() {
    let (handle, mut drain, _clock) = channel(1);
    let token = handle.action_started(capability("a"), None, None);
    handle.action_completed(token, outcome());
    assert_eq!(drain.pending_drops(), 1);
    assert_eq!(shape(&drain_all(&mut drain)), ["D1", "S0"]);
}

#[test]
fn while_shut_nothing_is_admitted_or_counted() {
    let (handle, mut drain, _clock) = channel(1);
    let _fill = handle.action_started(capability("a"), None, None);
    drain.control().set_accepting(false);
    assert!(!drain.control().is_accepting());
    // The queue is full, but a shut gate refuses before the queue is tried: no drop counted.
    let token = handle.action_started(capability("a"), None, None);
    assert_eq!(token.admission(), Admission::NotAdmitted);
    let session = handle.session_started(SECRET_LABEL);
    assert_eq!(session.started(), Admission::NotAdmitted);
    handle.session_ended(session);
    assert_eq!(drain.pending_drops(), 0);
    assert_eq!(shape(&drain_all(&mut drain)), ["S0"]);
}

#[test]
fn session_events_are_dropped_and_counted_on_a_full_queue() {
    let (handle, mut drain, _clock) = channel(1);
    let first = handle.session_started("one");
    let second = handle.session_started("two");
    assert_eq!(first.started(), Admission::Accepted);
    assert_eq!(second.started(), Admission::Dropped);
    handle.session_ended(second);
    assert_eq!(drain.pending_drops(), 2);
    assert_eq!(shape(&drain_all(&mut drain)), ["D2", "SS"]);
    handle.session_ended(first);
    assert_eq!(shape(&drain_all(&mut drain)), ["SE"]);
}

#[test]
fn no_debug_output_shows_a_label_capability_or_application() {
    let (handle, mut drain, _clock) = channel(4);
    let session = handle.session_started(SECRET_LABEL);
    let token = handle.action_started(
        capability("input.secret.capability"),
        application(),
        Some(&session),
    );
    let token_debug = format!("{token:?}");
    assert!(token_debug.contains("Accepted"), "{token_debug}");
    for text in [token_debug, format!("{session:?}"), format!("{handle:?}")] {
        assert!(!text.contains(SECRET_LABEL), "{text}");
        assert!(!text.contains("secret"), "{text}");
        assert!(!text.contains("Secret Editor"), "{text}");
    }
    handle.action_completed(token, outcome());
    handle.session_ended(session);
    let drained = drain_all(&mut drain);
    assert_eq!(drained.len(), 4);
    let text = format!("{drained:?} {drain:?} {:?}", drain.control());
    assert!(!text.contains(SECRET_LABEL), "{text}");
    assert!(text.contains("SessionLabel(<redacted>)"), "{text}");
}

#[test]
fn close_refuses_everything_after_and_counts_nothing() {
    let (handle, mut drain, _clock) = channel(2);
    let before = handle.action_started(capability("a"), None, None);
    let dropped_before = {
        let _fill = handle.action_started(capability("a"), None, None);
        handle.action_started(capability("a"), None, None)
    };
    assert_eq!(dropped_before.admission(), Admission::Dropped);
    drain.close();
    assert!(drain.control().is_closed());
    drain.control().set_accepting(true);
    assert!(
        !drain.control().is_accepting(),
        "the gate cannot reopen a closed channel"
    );
    let after = handle.action_started(capability("a"), None, None);
    assert_eq!(after.admission(), Admission::NotAdmitted);
    assert_eq!(
        handle.session_started("x").started(),
        Admission::NotAdmitted
    );
    // Completions after close are refused too, whatever their start did, and not counted.
    handle.action_completed(before, outcome());
    handle.action_completed(dropped_before, outcome());
    assert_eq!(
        drain.pending_drops(),
        1,
        "only the drop from before the close"
    );
    let mut out = Vec::new();
    let round = drain.drain_final(usize::MAX, &mut out);
    assert!(round.settled);
    assert_eq!(round.appended, 3);
    assert_eq!(shape(&out), ["D1", "S0", "S1"]);
    assert_eq!(drain.pending_drops(), 0);
    let again = drain.drain_final(usize::MAX, &mut out);
    assert_eq!(
        again,
        FinalDrain {
            appended: 0,
            settled: true
        }
    );
}

#[test]
fn drain_final_is_not_settled_until_the_queue_is_drained() {
    let (handle, mut drain, _clock) = channel(4);
    for _ in 0..3 {
        let _t = handle.action_started(capability("a"), None, None);
    }
    let mut out = Vec::new();
    let first = drain.drain_final(2, &mut out);
    assert_eq!(
        first,
        FinalDrain {
            appended: 2,
            settled: false
        }
    );
    let second = drain.drain_final(2, &mut out);
    assert_eq!(
        second,
        FinalDrain {
            appended: 1,
            settled: true
        }
    );
    assert_eq!(shape(&out), ["S0", "S1", "S2"]);
}

#[test]
fn discard_counts_every_queued_item_and_pending_drop_and_leaves_nothing_to_drain() {
    let (handle, mut drain, _clock) = channel(2);
    let kept = handle.action_started(capability("a"), None, None);
    let _second = handle.action_started(capability("b"), None, None);
    // Full: this start and its completion are counted as dropped.
    let dropped = handle.action_started(capability("c"), None, None);
    assert_eq!(dropped.admission(), Admission::Dropped);
    handle.action_completed(dropped, outcome());
    assert_eq!(drain.discard(usize::MAX), 2 + 2);
    assert_eq!(drain.pending_drops(), 0);
    assert!(drain_all(&mut drain).is_empty());
    // The completion of a discarded start still reaches the queue (its start was accepted),
    // so the next discard counts it and releases its start's context (the second start's is
    // kept until its completion comes).
    assert_eq!(drain.open.kept_starts(), 2);
    handle.action_completed(kept, outcome());
    assert_eq!(drain.discard(usize::MAX), 1);
    assert_eq!(drain.open.kept_starts(), 1);
    assert_eq!(drain.discard(usize::MAX), 0);
}

#[test]
fn discard_final_closes_and_settles_counting_what_it_took() {
    let (handle, mut drain, _clock) = channel(4);
    for _ in 0..3 {
        let _t = handle.action_started(capability("a"), None, None);
    }
    let (lost, round) = drain.discard_final(2);
    assert_eq!((lost, round.settled), (2, false));
    let (lost, round) = drain.discard_final(2);
    assert_eq!((lost, round.settled), (1, true));
    // Closed: nothing is admitted or counted any more.
    let late = handle.action_started(capability("a"), None, None);
    assert_eq!(late.admission(), Admission::NotAdmitted);
    assert_eq!(drain.discard_final(2).0, 0);
    assert_eq!(drain.pending_drops(), 0);
}

#[test]
fn capacity_is_bounded() {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(START));
    assert_eq!(
        capture_channel(0, clock.clone()).err(),
        Some(CaptureCapacityError::OutOfRange)
    );
    assert_eq!(
        capture_channel(CAPTURE_QUEUE_MAX_CAPACITY_EVENTS + 1, clock.clone()).err(),
        Some(CaptureCapacityError::OutOfRange)
    );
    let (_, drain) = capture_channel(CAPTURE_QUEUE_CAPACITY_EVENTS, clock.clone()).unwrap();
    assert_eq!(drain.capacity_events(), 512);
    let (_, drain) = capture_channel(CAPTURE_QUEUE_MAX_CAPACITY_EVENTS, clock).unwrap();
    assert_eq!(drain.capacity_events(), CAPTURE_QUEUE_MAX_CAPACITY_EVENTS);
}

#[test]
fn the_default_capacity_holds_exactly_that_many_events() {
    let (handle, mut drain, _clock) = channel(CAPTURE_QUEUE_CAPACITY_EVENTS);
    for _ in 0..CAPTURE_QUEUE_CAPACITY_EVENTS {
        let t = handle.action_started(capability("a"), None, None);
        assert_eq!(t.admission(), Admission::Accepted);
    }
    let over = handle.action_started(capability("a"), None, None);
    assert_eq!(over.admission(), Admission::Dropped);
    assert_eq!(
        drain_all(&mut drain).len(),
        CAPTURE_QUEUE_CAPACITY_EVENTS + 1
    );
}

#[test]
fn action_ids_are_16_byte_slices_of_the_seeds_blake3_stream() {
    let seed = [7u8; 32];
    let id = action_id(&seed, 42);
    // Independently: bytes 16 * 42 .. 16 * 43 of the keyed BLAKE3 output stream.
    let mut stream = [0u8; 16 * 43];
    blake3::Hasher::new_keyed(&seed)
        .finalize_xof()
        .fill(&mut stream);
    assert_eq!(id.to_bytes()[..], stream[16 * 42..]);
    assert_eq!(action_id(&seed, 42), id, "deterministic");
    assert_ne!(action_id(&seed, 43), id);
    assert_ne!(action_id(&[8u8; 32], 42), id, "keyed by the seed");
    let many: std::collections::HashSet<_> = (0..10_000).map(|n| action_id(&seed, n)).collect();
    assert_eq!(many.len(), 10_000);
}

/// The windowed reader gives exactly `action_id` whatever order the counters come in: runs of
/// starts, completions of older actions (below the window), jumps past it, the window's edges.
#[test]
fn windowed_action_ids_equal_the_reference_in_any_order() {
    let seed = [9u8; 32];
    let mut ids = ActionIds::new(seed);
    let window = ACTION_ID_WINDOW_ACTIONS as u64;
    let mut counters: Vec<u64> = (0..3 * window).collect();
    counters.extend([
        5,
        window - 1,
        window,
        0,
        10 * window + 3,
        10 * window + 2,
        2 * window,
    ]);
    counters.extend((0..500u64).map(|n| (n * 7_919) % 1_000));
    counters.push(u64::MAX / 32);
    for counter in counters {
        assert_eq!(
            ids.id(counter),
            action_id(&seed, counter),
            "counter {counter}"
        );
    }
}

#[test]
fn many_threads_below_capacity_drop_nothing() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 64;
    let (handle, mut drain, _clock) = channel(THREADS * PER_THREAD);
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let handle = handle.clone();
            std::thread::spawn(move || {
                (0..PER_THREAD)
                    .map(|_| {
                        handle
                            .action_started(capability("a"), None, None)
                            .admission()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for t in threads {
        assert!(t.join().unwrap().iter().all(|a| *a == Admission::Accepted));
    }
    let out = drain_all(&mut drain);
    assert_eq!(out.len(), THREADS * PER_THREAD);
    let mut actions: Vec<u64> = out
        .iter()
        .map(|e| match e {
            Drained::Captured(Captured {
                item: CapturedItem::ActionStarted { action, .. },
                ..
            }) => *action,
            other => panic!("{other:?}"),
        })
        .collect();
    actions.sort_unstable();
    actions.dedup();
    assert_eq!(
        actions.len(),
        THREADS * PER_THREAD,
        "every action number is distinct"
    );
}

#[test]
fn concurrent_drops_and_drains_account_for_every_event() {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 5_000;
    let (handle, mut drain, _clock) = channel(4);
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let handle = handle.clone();
            std::thread::spawn(move || {
                let mut dropped = 0u64;
                for _ in 0..PER_THREAD {
                    let t = handle.action_started(capability("a"), None, None);
                    dropped += u64::from(t.admission() == Admission::Dropped);
                }
                dropped
            })
        })
        .collect();
    let mut out = Vec::new();
    while !threads.iter().all(|t| t.is_finished()) {
        drain.drain(usize::MAX, &mut out);
        std::thread::yield_now();
    }
    let dropped: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    drain.drain(usize::MAX, &mut out);
    let markers: u64 = out
        .iter()
        .map(|e| match e {
            Drained::Dropped { count } => {
                assert_ne!(*count, 0);
                *count
            }
            Drained::Captured(_) => 0,
        })
        .sum();
    let items = out
        .iter()
        .filter(|e| matches!(e, Drained::Captured(_)))
        .count();
    assert_eq!(markers, dropped, "markers sum exactly to the drops");
    assert_eq!(items as u64 + dropped, (THREADS * PER_THREAD) as u64);
    assert_eq!(drain.pending_drops(), 0);
}

/// The context a drained completion carries.
fn completed_context(entry: Drained<Captured>) -> Option<ActionContext> {
    let Drained::Captured(Captured {
        item: CapturedItem::ActionCompleted { context, .. },
        ..
    }) = entry
    else {
        panic!("not a completion: {entry:?}")
    };
    context
}

#[test]
fn each_start_carries_only_its_own_target_and_session() {
    let (handle, mut drain, _clock) = channel(1);
    let first = handle.session_started("first-session");
    let second = handle.session_started("second-session");
    let _ = drain_all(&mut drain);
    let cases: [(&str, Option<Application>, Option<&CaptureSession>); 4] = [
        ("c.one", application(), Some(&first)),
        ("c.two", None, Some(&first)),
        ("c.three", None, None),
        ("c.four", application(), Some(&second)),
    ];
    for (name, app, session) in cases {
        let token = handle.action_started(capability(name), app.clone(), session);
        let Some(Drained::Captured(Captured {
            item: CapturedItem::ActionStarted { context, .. },
            ..
        })) = drain_all(&mut drain).pop()
        else {
            panic!("no start drained")
        };
        assert_eq!(
            context.session().map(SessionLabel::as_str),
            session.map(|s| s.label.as_str()),
            "{name}: the start's session"
        );
        assert_eq!(context.target().capability.as_str(), name);
        assert_eq!(
            context.target().application,
            app,
            "{name}: the start's application"
        );
        handle.action_completed(token, outcome());
        let done = completed_context(drain_all(&mut drain).pop().unwrap());
        assert_eq!(
            done,
            Some(context),
            "{name}: the completion gets the same context"
        );
    }
    handle.session_ended(first);
    handle.session_ended(second);
}

#[test]
fn a_completion_gets_its_starts_context_while_the_start_is_among_the_newest_retained() {
    let capacity = 4;
    let (handle, mut drain, _clock) = channel(capacity);
    let session = handle.session_started("long-session");
    // The oldest open action, then OPEN_ACTIONS_RETAINED - 1 later starts: it is still kept.
    let oldest = handle.action_started(capability("o.oldest"), application(), Some(&session));
    let _ = drain_all(&mut drain);
    for n in 1..OPEN_ACTIONS_RETAINED {
        drop(handle.action_started(capability(&format!("o.a{n}")), None, None));
        let _ = drain_all(&mut drain);
    }
    let second = handle.action_started(capability("o.second"), None, Some(&session));
    let _ = drain_all(&mut drain);
    // That start pushed the oldest out; the second is kept.
    let third = handle.action_started(capability("o.third"), None, None);
    let _ = drain_all(&mut drain);
    handle.action_completed(oldest, outcome());
    assert_eq!(
        completed_context(drain_all(&mut drain).pop().unwrap()),
        None,
        "a start older than the newest OPEN_ACTIONS_RETAINED is forgotten"
    );
    handle.action_completed(second, outcome());
    let kept = completed_context(drain_all(&mut drain).pop().unwrap()).unwrap();
    assert_eq!(kept.target().capability.as_str(), "o.second");
    assert_eq!(
        kept.session().map(SessionLabel::as_str),
        Some("long-session")
    );
    // A context is handed over once: nothing is kept for the same number again.
    assert!(drain.open.take(OPEN_ACTIONS_RETAINED as u64).is_none());
    handle.action_completed(third, outcome());
    assert!(completed_context(drain_all(&mut drain).pop().unwrap()).is_some());
    assert!(
        drain.open.kept_starts() <= OPEN_ACTIONS_RETAINED
            && drain.open.recent.len() <= OPEN_ACTIONS_SHARED_CONTEXTS,
        "the kept contexts are bounded"
    );
    handle.session_ended(session);
}

#[test]
fn completed_and_abandoned_actions_leave_at_most_the_bound_behind() {
    let (handle, mut drain, _clock) = channel(CAPTURE_QUEUE_CAPACITY_EVENTS);
    // Three times the bound of starts whose tokens are dropped (never completed).
    for n in 0..3 * OPEN_ACTIONS_RETAINED {
        drop(handle.action_started(capability(&format!("x.a{n}")), None, None));
        if n % 256 == 0 {
            let _ = drain_all(&mut drain);
        }
    }
    let _ = drain_all(&mut drain);
    assert_eq!(drain.open.kept_starts(), OPEN_ACTIONS_RETAINED);
    assert_eq!(drain.open.kept.len(), OPEN_ACTIONS_RETAINED);
    assert_eq!(drain.open.recent.len(), OPEN_ACTIONS_SHARED_CONTEXTS);
    // Completed ones are taken out at once.
    for _ in 0..10 {
        let token = handle.action_started(capability("x.done"), None, None);
        handle.action_completed(token, outcome());
    }
    let _ = drain_all(&mut drain);
    assert_eq!(drain.open.kept_starts(), OPEN_ACTIONS_RETAINED - 10);
}

#[test]
fn a_completion_drained_in_a_later_call_gets_its_starts_number() {
    let (handle, mut drain, _clock) = channel(8);
    let a = handle.action_started(capability("n.a"), None, None);
    let b = handle.action_started(capability("n.b"), None, None);
    assert_eq!(shape(&drain_all(&mut drain)), ["S0", "S1"]);
    let c = handle.action_started(capability("n.c"), None, None);
    handle.action_completed(b, outcome());
    handle.action_completed(a, outcome());
    assert_eq!(shape(&drain_all(&mut drain)), ["S2", "C1", "C0"]);
    handle.action_completed(c, outcome());
    let mut out = Vec::new();
    let round = drain.drain_final(usize::MAX, &mut out);
    assert!(round.settled);
    assert_eq!(shape(&out), ["C2"]);
}

/// The wall-clock time now, read straight from the system.
fn system_now() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
}

/// How far a counter stamp may stray from the system clock in these tests: far more than the
/// calibration error over the test's milliseconds, far less than the waits the tests measure.
const STAMP_TOLERANCE: Duration = Duration::from_millis(5);

#[test]
fn with_the_system_clock_an_item_is_dated_when_it_was_captured_not_drained() {
    let (handle, mut drain) = capture_channel(8, Arc::new(crate::clock::SystemClock)).unwrap();
    assert!(matches!(handle.shared.stamper, Stamper::Counter(_)));
    drain.control().set_accepting(true);
    let before = system_now();
    drop(handle.action_started(capability("t.a"), None, None));
    let after = system_now();
    let wait = Duration::from_millis(60);
    std::thread::sleep(wait);
    let drained_at = system_now();
    let Some(Drained::Captured(captured)) = drain_all(&mut drain).pop() else {
        panic!("no start drained")
    };
    assert!(
        captured.at + STAMP_TOLERANCE >= before && captured.at <= after + STAMP_TOLERANCE,
        "captured at {:?}, the call ran in {before:?}..={after:?}",
        captured.at
    );
    assert!(
        captured.at + wait - STAMP_TOLERANCE <= drained_at,
        "dated {:?}, drained at {drained_at:?}: dated by the drain, not the call",
        captured.at
    );
}

#[test]
fn an_injected_clock_is_read_by_the_call_itself() {
    let (handle, mut drain, clock) = channel(4);
    assert!(matches!(handle.shared.stamper, Stamper::Clock));
    clock.advance(Duration::from_millis(7));
    drop(handle.action_started(capability("t.b"), None, None));
    clock.advance(Duration::from_secs(3));
    let Some(Drained::Captured(captured)) = drain_all(&mut drain).pop() else {
        panic!("no start drained")
    };
    assert_eq!(captured.at, START + Duration::from_millis(7));
}

#[test]
fn equal_contexts_share_one_kept_copy_and_a_reused_one_becomes_the_newest() {
    let (handle, mut drain, _clock) = channel(16);
    let kept = |drain: &CaptureDrain, action: u64| {
        drain.open.kept[OpenActions::slot(action)]
            .as_ref()
            .map(|(_, context)| Arc::clone(context))
            .unwrap()
    };
    // Numbers 0 and 1: the same target, one copy.
    drop(handle.action_started(capability("s.same"), application(), None));
    drop(handle.action_started(capability("s.same"), application(), None));
    // Number 2: another target; then number 3 matches the older one again.
    drop(handle.action_started(capability("s.other"), None, None));
    drop(handle.action_started(capability("s.same"), application(), None));
    let _ = drain_all(&mut drain);
    assert!(Arc::ptr_eq(&kept(&drain, 0), &kept(&drain, 1)));
    assert!(Arc::ptr_eq(&kept(&drain, 0), &kept(&drain, 3)));
    assert!(!Arc::ptr_eq(&kept(&drain, 0), &kept(&drain, 2)));
    assert_eq!(drain.open.recent.len(), 2);
    assert!(
        Arc::ptr_eq(&drain.open.recent[0], &kept(&drain, 3)),
        "the context matched last is the newest"
    );
}

/// An identity a Rust caller built with the read rules (`new_lenient`, or a deserialized
/// `Application`) reaches the drain with only the fields annal may write: a URL, a path or a
/// window title is never handed to the writer, and the action is still recorded.
#[test]
fn an_identity_outside_the_write_rules_is_drained_without_the_offending_fields() {
    let (handle, mut drain, _clock) = channel(8);
    let lenient = |bundle: Option<&str>, name: Option<&str>| {
        Application::new(
            bundle.map(|b| BundleId::new_lenient(b).unwrap()),
            name.map(|n| DisplayName::new_lenient(n).unwrap()),
        )
    };
    let cases = [
        (
            lenient(
                Some("https://evil.example/x?tok=1"),
                Some("Invoice - Inbox - Gmail"),
            ),
            None,
        ),
        (
            lenient(Some("org.example.Mail"), Some("/home/alice/secret.txt")),
            lenient(Some("org.example.Mail"), None),
        ),
        (
            lenient(Some("C:\\Users\\alice"), Some("Mail")),
            lenient(None, Some("Mail")),
        ),
        (application(), application()),
    ];
    for (given, kept) in cases {
        let token = handle.action_started(capability("input.pointer.click"), given, None);
        handle.action_completed(token, outcome());
        let drained = drain_all(&mut drain);
        assert_eq!(drained.len(), 2, "the action is still recorded");
        for entry in drained {
            let Drained::Captured(captured) = entry else {
                panic!("a drop marker");
            };
            let context = match captured.item {
                CapturedItem::ActionStarted { context, .. } => Some(context),
                CapturedItem::ActionCompleted { context, .. } => context,
                _ => None,
            };
            let context = context.expect("a context");
            assert_eq!(context.target().application, kept);
        }
    }
}

#[test]
fn a_claim_whose_drain_was_lost_is_healed_at_the_second_look_and_only_once() {
    let wakeup = DrainWakeup::new();
    let mut ticker = StallWatch::new();
    // A claim whose message is lost: claimed, never taken.
    assert!(wakeup.try_claim());
    // The first look finds it held: it may just be slow; nothing is sent.
    assert!(!ticker.claim_or_heal(&wakeup));
    // The second look, with no message taken in between: presumed lost, one more is sent.
    assert!(ticker.claim_or_heal(&wakeup));
    // Once per stall: later looks send nothing more until a message is taken.
    assert!(!ticker.claim_or_heal(&wakeup));
    assert!(!ticker.claim_or_heal(&wakeup));
    // The healing message is taken: the flag is free again and the next look claims.
    wakeup.release();
    assert!(ticker.claim_or_heal(&wakeup));
    assert!(!wakeup.try_claim());
}

#[test]
fn a_claim_that_moves_between_looks_is_never_healed() {
    let wakeup = DrainWakeup::new();
    let mut ticker = StallWatch::new();
    let mut ingress = StallWatch::new();
    assert!(ticker.claim_or_heal(&wakeup));
    for _ in 0..10 {
        // Found held, then taken and claimed again before the next look: a busy stream, not a
        // lost message.
        assert!(!ticker.claim_or_heal(&wakeup));
        assert!(!ingress.claim_or_heal(&wakeup));
        wakeup.release();
        assert!(wakeup.try_claim());
    }
    // A look that finds no work forgets what it saw: the next held claim is new to it.
    assert!(!ticker.claim_or_heal(&wakeup));
    ticker.idle();
    assert!(!ticker.claim_or_heal(&wakeup));
    assert!(ticker.claim_or_heal(&wakeup));
}
