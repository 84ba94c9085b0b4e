//! The host's preflight through the real engine: status, then a bounded query only when the
//! actor may query and history is usable, each audited as the tool call it stands for, and one
//! consultation verdict. Every absence, refusal and failure is `continue_without_history` with
//! its fixed reason, never an error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod embedded;

use annal_actors::Engine;
use annal_actors::gate::PolicyChange;
use annal_actors::preflight::PreflightRequest;
use annal_engine::consultation::{Caveat, Consultation, WithoutHistory};
use annal_engine::journal::JournalEvent;
use annal_engine::policy::{ActorId, GrantTerms, Operation, PolicyEvent, Principal};
use annal_schema::Capability;
use embedded::TestStore;

/// Events the preflight asks for.
const LIMIT: u8 = 5;

/// A store and an engine on it.
struct Setup {
    store: TestStore,
    engine: Engine,
}

fn setup() -> Setup {
    let store = TestStore::new();
    let engine = store.start();
    Setup { store, engine }
}

impl Setup {
    /// Every history event on disk.
    fn history(&self) -> Vec<annal_schema::Event> {
        self.store.events()
    }

    /// The operations of the audit records that began a call of `actor`, in order.
    fn audited(&self, actor: &str) -> Vec<Operation> {
        self.store
            .journal()
            .into_iter()
            .filter_map(|event| match event {
                JournalEvent::Policy(PolicyEvent::AuditStarted {
                    principal: Principal::Agent(who),
                    operation,
                    ..
                }) if who.as_str() == actor => Some(operation),
                _ => None,
            })
            .collect()
    }

    fn capture(&self, actions: usize) {
        let capture = self.engine.capture();
        for _ in 0..actions {
            let _ =
                capture.action_started(Capability::new("input.pointer.click").unwrap(), None, None);
        }
        self.engine.flush().unwrap();
    }

    fn grant(&self, actor: &str, operations: &[Operation]) {
        for operation in operations {
            self.engine
                .change_policy(PolicyChange::Grant {
                    actor: ActorId::new(actor).unwrap(),
                    operation: *operation,
                    terms: GrantTerms::DEFAULT,
                })
                .unwrap();
        }
    }

    fn preflight(&self, actor: &str) -> annal_actors::preflight::Preflight {
        let principal = Principal::Agent(ActorId::new(actor).unwrap());
        let request = PreflightRequest::new(LIMIT, None).unwrap();
        self.engine.preflight(&principal, &request)
    }
}

#[test]
fn a_granted_actor_gets_the_newest_slice_and_both_calls_are_audited() {
    let s = setup();
    s.engine.enable().unwrap();
    s.capture(12);
    s.grant("host", &[Operation::Status, Operation::Query]);
    let preflight = s.preflight("host");
    assert_eq!(preflight.consultation, Consultation::Use);
    assert!(
        preflight
            .status
            .as_ref()
            .is_some_and(|status| status.enabled)
    );
    assert_eq!(preflight.events.len(), usize::from(LIMIT));
    assert!(preflight.gaps.is_empty());
    s.engine.flush().unwrap();
    // The slice is the newest LIMIT events at the time of the read, oldest first (what
    // history_query returns for the same limit); the access event the read appended comes
    // after it.
    let returned: Vec<u64> = preflight
        .events
        .iter()
        .map(|e| e.data.sequence.get())
        .collect();
    let newest = *returned.iter().max().unwrap();
    let on_disk: Vec<u64> = s
        .history()
        .iter()
        .map(|e| e.data.sequence.get())
        .filter(|q| *q <= newest)
        .collect();
    assert_eq!(returned, on_disk[on_disk.len() - usize::from(LIMIT)..]);
    s.engine.flush().unwrap();
    assert_eq!(s.audited("host"), [Operation::Status, Operation::Query]);
}

#[test]
fn without_a_query_grant_no_query_is_made() {
    let s = setup();
    s.engine.enable().unwrap();
    s.capture(3);
    s.grant("host", &[Operation::Status]);
    let preflight = s.preflight("host");
    assert_eq!(
        preflight.consultation,
        Consultation::ContinueWithoutHistory(WithoutHistory::QueryNotGranted)
    );
    assert!(preflight.events.is_empty());
    s.engine.flush().unwrap();
    assert_eq!(s.audited("host"), [Operation::Status]);
}

#[test]
fn a_revoked_or_unknown_actor_continues_without_history() {
    let s = setup();
    s.engine.enable().unwrap();
    s.capture(3);
    s.grant("host", &[Operation::Status, Operation::Query]);
    s.engine
        .change_policy(PolicyChange::Revoke {
            actor: ActorId::new("host").unwrap(),
        })
        .unwrap();
    for actor in ["host", "stranger"] {
        let preflight = s.preflight(actor);
        assert_eq!(
            preflight.consultation,
            Consultation::ContinueWithoutHistory(WithoutHistory::StatusDenied),
            "{actor}"
        );
        assert!(preflight.events.is_empty() && preflight.status.is_none());
    }
    s.engine.flush().unwrap();
    // The denied status call is audited; no query was attempted.
    assert_eq!(s.audited("host"), [Operation::Status]);
}

#[test]
fn disabled_and_paused_history_are_said_so() {
    let s = setup();
    // Never enabled (so nothing can be granted yet): nothing to read, no query is made.
    assert_eq!(
        s.preflight("host").consultation,
        Consultation::ContinueWithoutHistory(WithoutHistory::Disabled)
    );
    s.engine.enable().unwrap();
    s.grant("host", &[Operation::Status, Operation::Query]);
    s.capture(3);
    s.engine.pause().unwrap();
    let paused = s.preflight("host");
    assert_eq!(
        paused.consultation,
        Consultation::UseWithCaveats(vec![Caveat::Paused])
    );
    assert!(!paused.events.is_empty());
    s.engine.resume().unwrap();
    s.engine.disable().unwrap();
    assert_eq!(
        s.preflight("host").consultation,
        Consultation::ContinueWithoutHistory(WithoutHistory::Disabled)
    );
    s.engine.flush().unwrap();
    // Status each time; a query only while history was usable (the paused one).
    assert_eq!(
        s.audited("host"),
        [
            Operation::Status,
            Operation::Status,
            Operation::Query,
            Operation::Status
        ]
    );
}
