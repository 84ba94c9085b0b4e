//! Every supervised child's failure, through the real actor tree against a real store: each of
//! the six children panics inside its handler, or stops without being asked, while capture
//! runs. The restart strategy (`annal_engine::supervision`, `rest_for_one` over declared
//! dependencies) must bring the tree back so that:
//! - every action the hook admitted before, during and after the restart is durable or counted
//!   dropped, never lost silently (and capture never closes for a restart);
//! - health shows the restart and returns to `ready`;
//! - a query after the restart answers everything durable;
//! - the restart is journaled (`child_restarted` for the failed child only: a dependent the
//!   supervisor stopped on purpose is started, not counted as restarted).
//!
//! And with no restart allowed, each child's give-up shows in `status` as that child's down
//! category, closes capture only when nothing could write what it admits, and counts what the
//! queue held.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod embedded;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use annal_actors::Engine;
use annal_actors::supervisor::InjectedFailure;
use annal_engine::capture::Admission;
use annal_engine::health::Child;
use annal_engine::journal::State;
use annal_engine::supervision::{self, RestartPolicy};
use annal_schema::{AccessOperation, Capability, Event, HealthCategory, Payload};
use embedded::TestStore;

/// Actions captured before, during and after each failure.
const ACTIONS_PER_PHASE: u64 = 10;

/// How long a restart (and the return to `ready`) may take before the test fails: generous,
/// since CI runs the suite under load.
const RESTART_DEADLINE_SECS: u64 = 30;

/// Newest events one owner query asks for (the contract's largest page).
const PAGE_EVENTS: u64 = 200;

/// An engine on `store` under `restart_policy`.
fn start(store: &TestStore, restart_policy: RestartPolicy) -> Engine {
    let mut config = store.config();
    config.restart_policy = restart_policy;
    store.start_with(config)
}

/// Counts what the hook took in (queued, or counted as dropped at the hook).
struct Capturer {
    capture: annal_engine::capture::CaptureHandle,
    offered: u64,
}

impl Capturer {
    /// Captures `n` action starts; every one must be admitted (capture never closes for a
    /// restart), unless `closed_is_fine`.
    fn capture(&mut self, n: u64, context: &str) {
        for _ in 0..n {
            let token = self.capture.action_started(click(), None, None);
            assert_ne!(
                token.admission(),
                Admission::NotAdmitted,
                "capture closed: {context}"
            );
            self.offered += 1;
        }
    }
}

fn click() -> Capability {
    Capability::new("input.pointer.click").unwrap()
}

fn starts(events: &[Event]) -> u64 {
    u64::try_from(
        events
            .iter()
            .filter(|e| matches!(e.data.payload, Payload::ActionStarted))
            .count(),
    )
    .unwrap()
}

/// Polls `ready` until it holds, failing the test after [`RESTART_DEADLINE_SECS`].
fn eventually(what: &str, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(
            started.elapsed() < Duration::from_secs(RESTART_DEADLINE_SECS),
            "{what} did not happen within {RESTART_DEADLINE_SECS} s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The whole check for one child and one kind of failure (module doc).
fn a_failure_is_restarted_and_nothing_is_lost(child: Child, failure: InjectedFailure) {
    let s = TestStore::new();
    let engine = start(&s, RestartPolicy::default());
    engine.enable().unwrap();
    let mut capturer = Capturer {
        capture: engine.capture(),
        offered: 0,
    };
    capturer.capture(ACTIONS_PER_PHASE, "before the failure");
    engine.flush().unwrap();

    engine.inject_failure(child, failure);
    capturer.capture(ACTIONS_PER_PHASE, "while the child restarts");
    eventually("the restart", || engine.restarts(child).unwrap() >= 1);
    eventually("health back to ready", || {
        engine
            .flush()
            .is_ok_and(|status| status.health == HealthCategory::Ready)
    });

    capturer.capture(ACTIONS_PER_PHASE, "after the restart");
    let status = engine.flush().unwrap();
    assert_eq!(status.health, HealthCategory::Ready);
    assert!(status.enabled);
    let on_disk = s.events();
    assert_eq!(
        starts(&on_disk) + status.dropped_events,
        capturer.offered,
        "{child:?} {failure:?}: every admitted action is durable or counted dropped"
    );

    // A query after the restart answers everything durable.
    let request = annal_schema::tools::QueryRequest::parse(&serde_json::json!({
        "limit": PAGE_EVENTS
    }))
    .unwrap();
    let answer = engine.query(request, AccessOperation::LocalCli).unwrap();
    assert!(u64::try_from(on_disk.len()).unwrap() < PAGE_EVENTS);
    let answered: BTreeSet<u64> = answer
        .events
        .iter()
        .map(|e| e.data.sequence.get())
        .collect();
    let durable: BTreeSet<u64> = on_disk.iter().map(|e| e.data.sequence.get()).collect();
    assert_eq!(
        answered, durable,
        "{child:?} {failure:?}: the query after the restart"
    );

    assert_eq!(engine.restarts(child).unwrap(), 1);
    engine.shutdown();
    let journal = State::replay(&s.journal());
    for other in Child::ALL {
        let expected = usize::from(other == child);
        assert_eq!(
            journal.restart_history(other).len(),
            expected,
            "{child:?} {failure:?}: journaled restarts of {other:?}"
        );
    }
}

macro_rules! restart_cases {
    ($($name:ident: $child:ident, $failure:ident;)*) => {$(
        #[test]
        fn $name() {
            a_failure_is_restarted_and_nothing_is_lost(Child::$child, InjectedFailure::$failure);
        }
    )*};
}

restart_cases! {
    key_custody_panics: KeyCustody, Panic;
    key_custody_stops: KeyCustody, Stop;
    journal_panics: AuditJournal, Panic;
    journal_stops: AuditJournal, Stop;
    query_panics: Query, Panic;
    query_stops: Query, Stop;
    gate_panics: PolicyGate, Panic;
    gate_stops: PolicyGate, Stop;
    writer_panics: Writer, Panic;
    writer_stops: Writer, Stop;
    ingress_panics: Ingress, Panic;
    ingress_stops: Ingress, Stop;
}

/// With no restart allowed, `child`'s first failure gives up on it: status shows its down
/// category; capture goes on (and is durable) where a writer still runs and drains, and
/// otherwise closes with what the queue held counted as dropped.
fn a_give_up_says_which_part_and_loses_nothing_silently(child: Child) {
    let s = TestStore::new();
    let never = RestartPolicy {
        max_restarts: 0,
        window: Duration::from_secs(30),
    };
    let engine = start(&s, never);
    engine.enable().unwrap();
    let mut capturer = Capturer {
        capture: engine.capture(),
        offered: 0,
    };
    capturer.capture(ACTIONS_PER_PHASE, "before the failure");
    engine.flush().unwrap();

    engine.inject_failure(child, InjectedFailure::Panic);
    // Status shows the most severe of the parts that go down with it (the journal takes the
    // writer with it: `writer_stopped` outranks its own `storage_unavailable`).
    let went_down = supervision::plan(child, &[], 0, &never, &[]).down;
    assert!(went_down.contains(&child));
    let down = went_down
        .iter()
        .map(|c| c.down_category())
        .min_by_key(|category| annal_engine::health::rank(*category))
        .unwrap();
    eventually("the give-up in status", || {
        engine.status().is_ok_and(|status| status.health == down)
    });
    // Only the Query and the Gate can be down while history is still written.
    let still_writing = matches!(child, Child::Query | Child::PolicyGate);
    let token = capturer.capture.action_started(click(), None, None);
    if still_writing {
        assert_ne!(token.admission(), Admission::NotAdmitted);
        capturer.offered += 1;
        capturer.capture(ACTIONS_PER_PHASE - 1, "with a writer still running");
        let status = engine.flush().unwrap();
        assert_eq!(status.health, down, "{child:?}: status names the part down");
        assert_eq!(
            starts(&s.events()) + status.dropped_events,
            capturer.offered,
            "{child:?}: capture after the give-up is durable"
        );
    } else {
        assert_eq!(
            token.admission(),
            Admission::NotAdmitted,
            "{child:?}: nothing can write what capture would admit"
        );
        let status = engine.status().unwrap();
        assert_eq!(status.health, down, "{child:?}: status names the part down");
        assert_eq!(
            starts(&s.events()) + status.dropped_events,
            capturer.offered,
            "{child:?}: what was admitted is durable or counted dropped"
        );
    }
    engine.shutdown();
}

macro_rules! give_up_cases {
    ($($name:ident: $child:ident;)*) => {$(
        #[test]
        fn $name() {
            a_give_up_says_which_part_and_loses_nothing_silently(Child::$child);
        }
    )*};
}

give_up_cases! {
    key_custody_given_up: KeyCustody;
    journal_given_up: AuditJournal;
    query_given_up: Query;
    gate_given_up: PolicyGate;
    writer_given_up: Writer;
    ingress_given_up: Ingress;
}
