//! The policy gate end to end, through the real actor tree: denials return nothing and leave a
//! pre-execution and a completion record (read back by decrypting the journal) and no `access`
//! event; grants, manifests, revocation and the agents switch take effect on the next call;
//! paging cursors are single-use and bound to their actor; the gate fails closed when its
//! audit record cannot be made durable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod embedded;

use std::sync::Arc;
use std::time::Duration;

use annal_actors::gate::{PolicyChange, ToolAnswer};
use annal_actors::{Engine, EngineConfig};
use annal_engine::clock::{Clock, ManualClock};
use annal_engine::journal::{Journal, JournalEvent};
use annal_engine::keys::{HistoryKeys, JournalKeys, KeyProvider, RootKey};
use annal_engine::policy::manifest::Manifest;
use annal_engine::policy::views::AuditFilter;
use annal_engine::policy::{
    ActorId, AuditOutcome, CursorRefusal, DenyReason, GrantSource, GrantTerms, Operation,
    PolicyEvent, Principal, Refusal, Verdict,
};
use annal_engine::storage::{Access, FaultKind, FaultOp, FaultyStorage, Storage, SyncFailure};
use annal_engine::store::{History, StoreReader, open_store};
use annal_schema::{Capability, ErrorCode, Event, Payload};
use embedded::{ROOT, TestStore};
use serde_json::json;

/// 2026-12-01T00:00:00Z.
const START: Duration = Duration::from_secs(1_796_083_200);

/// The shared test store, and the manual clock the gate's engines run on.
struct Setup {
    store: TestStore,
    clock: ManualClock,
}

fn setup() -> Setup {
    Setup {
        store: TestStore::new(),
        clock: ManualClock::new(START),
    }
}

impl std::ops::Deref for Setup {
    type Target = TestStore;

    fn deref(&self) -> &TestStore {
        &self.store
    }
}

impl Setup {
    fn start_with(&self, config: EngineConfig, storage: Option<Arc<dyn Storage>>) -> Engine {
        Engine::start_with(
            config,
            Arc::clone(&self.provider) as Arc<dyn KeyProvider>,
            Arc::new(self.clock.clone()) as Arc<dyn Clock>,
            storage,
        )
        .unwrap()
    }

    /// An enabled engine with `count` captured actions, synced (no flush record).
    fn started(&self, count: usize) -> Engine {
        let engine = self.start_with(self.config(), None);
        engine.enable().unwrap();
        let capture = engine.capture();
        let session = capture.session_started("PLANTED-label-7f1c /home/user/notes.txt");
        for _ in 0..count {
            let _ = capture.action_started(
                Capability::new("input.pointer.click").unwrap(),
                None,
                Some(&session),
            );
        }
        engine.sync().unwrap();
        engine
    }

    /// An enabled engine over a [`FaultyStorage`] of a fresh store (kept to arm faults), with
    /// one captured action, synced.
    fn started_faulty(&self, config: EngineConfig) -> (Engine, FaultyStorage) {
        annal_engine::store::create_store(&self.layout).unwrap();
        let storage = FaultyStorage::new(open_store(&self.layout, Access::Write).unwrap());
        let engine = self.start_with(config, Some(Arc::new(storage.clone())));
        engine.enable().unwrap();
        let _ = engine.capture().action_started(
            Capability::new("input.pointer.click").unwrap(),
            None,
            None,
        );
        engine.sync().unwrap();
        (engine, storage)
    }

    fn history(&self) -> Vec<Event> {
        let storage: Arc<dyn Storage> = Arc::new(open_store(&self.layout, Access::Read).unwrap());
        let report = StoreReader::<History>::new(storage)
            .read(&HistoryKeys::from_root(RootKey::from_bytes(ROOT)))
            .unwrap();
        report.records().map(|r| r.event.clone()).collect()
    }

    /// Every policy record of the journal, decrypted, with its stored JSON.
    fn policy_records(&self) -> Vec<(PolicyEvent, String)> {
        let storage: Arc<dyn Storage> = Arc::new(open_store(&self.layout, Access::Read).unwrap());
        let report = StoreReader::<Journal>::new(storage)
            .read(&JournalKeys::from_namespace_root(&RootKey::from_bytes(
                ROOT,
            )))
            .unwrap();
        report
            .records()
            .filter_map(|r| match &r.event.event {
                JournalEvent::Policy(event) => Some((
                    event.clone(),
                    String::from_utf8(r.event.to_json_vec()).unwrap(),
                )),
                _ => None,
            })
            .collect()
    }

    fn access_events(&self) -> Vec<u8> {
        self.history()
            .iter()
            .filter_map(|e| match &e.data.payload {
                Payload::Access {
                    returned_events, ..
                } => Some(returned_events.get()),
                _ => None,
            })
            .collect()
    }
}

fn agent(name: &str) -> Principal {
    Principal::Agent(ActorId::new(name).unwrap())
}

/// Grants both operations to `name`, under `terms`.
fn grant_both(engine: &Engine, name: &str, terms: GrantTerms) {
    for operation in Operation::ALL {
        engine
            .change_policy(PolicyChange::Grant {
                actor: ActorId::new(name).unwrap(),
                operation,
                terms,
            })
            .unwrap();
    }
}

fn grant(engine: &Engine, name: &str, operation: Operation) {
    engine
        .change_policy(PolicyChange::Grant {
            actor: ActorId::new(name).unwrap(),
            operation,
            terms: GrantTerms::DEFAULT,
        })
        .unwrap();
}

fn query(engine: &Engine, who: &Principal, args: serde_json::Value) -> Result<ToolAnswer, Refusal> {
    engine.call_tool(who, "history_query", &args)
}

fn events_of(answer: &ToolAnswer) -> (Vec<u64>, Option<String>) {
    match answer {
        ToolAnswer::Query { response, cursor } => (
            response
                .events
                .iter()
                .map(|e| e.data.sequence.get())
                .collect(),
            cursor.clone(),
        ),
        ToolAnswer::Status(_) => panic!("a status answer"),
    }
}

/// The audit pairs (verdict, outcome, returned) in journal order.
fn audit_pairs(records: &[(PolicyEvent, String)]) -> Vec<(Verdict, AuditOutcome, u16)> {
    let mut pairs = Vec::new();
    for (event, _) in records {
        if let PolicyEvent::AuditStarted { audit, verdict, .. } = event {
            let finished = records.iter().find_map(|(e, _)| match e {
                PolicyEvent::AuditFinished {
                    audit: a,
                    outcome,
                    returned_events,
                } if a == audit => Some((*outcome, *returned_events)),
                _ => None,
            });
            let (outcome, returned) = finished.expect("every pre-execution record is completed");
            pairs.push((*verdict, outcome, returned));
        }
    }
    pairs
}

#[test]
fn each_denied_call_returns_nothing_and_leaves_a_pre_execution_and_a_completion_record() {
    // (case, how to provoke it, the fixed reason)
    type Provoke = fn(&Setup, &Engine);
    let cases: [(&str, Provoke, DenyReason); 5] = [
        ("no grant", |_, _| {}, DenyReason::NotGranted),
        (
            "expired",
            |s, e| {
                // Expiry is checked before idleness: past both, the reason is `expired`.
                grant_both(e, "a", GrantTerms::new(120, 120).unwrap());
                s.clock.advance(Duration::from_secs(121));
            },
            DenyReason::Expired,
        ),
        (
            "idle timeout",
            |s, e| {
                grant_both(e, "a", GrantTerms::DEFAULT);
                s.clock.advance(Duration::from_secs(601));
            },
            DenyReason::IdleTimeout,
        ),
        (
            "revoked",
            |_, e| {
                grant_both(e, "a", GrantTerms::DEFAULT);
                e.change_policy(PolicyChange::Revoke {
                    actor: ActorId::new("a").unwrap(),
                })
                .unwrap();
            },
            DenyReason::Revoked,
        ),
        (
            "agents disabled",
            |_, e| {
                grant_both(e, "a", GrantTerms::DEFAULT);
                e.change_policy(PolicyChange::SwitchAgents { enabled: false })
                    .unwrap();
            },
            DenyReason::AgentsDisabled,
        ),
    ];
    for (name, provoke, reason) in cases {
        let s = setup();
        let engine = s.started(5);
        provoke(&s, &engine);
        let accesses_before = s.access_events().len();
        let answer = query(
            &engine,
            &agent("a"),
            json!({"session_id": "PLANTED-label-7f1c /home/user/notes.txt"}),
        );
        assert_eq!(answer.err(), Some(Refusal::Denied(reason)), "{name}");
        let status = engine.call_tool(&agent("a"), "history_status", &json!({}));
        assert_eq!(
            status.err(),
            Some(Refusal::Denied(reason)),
            "{name}: status too"
        );
        assert!(
            engine.tools_for(&agent("a")).is_empty(),
            "{name}: nothing listed"
        );
        engine.shutdown();

        let records = s.policy_records();
        let pairs = audit_pairs(&records);
        let denied = pairs
            .iter()
            .filter(|(verdict, _, _)| *verdict == Verdict::Denied(reason))
            .count();
        assert!(denied >= 2, "{name}: {pairs:?}");
        let (verdict, outcome, returned) = pairs[pairs.len() - 2];
        assert_eq!(verdict, Verdict::Denied(reason), "{name}");
        assert_eq!(
            outcome,
            AuditOutcome::Refused(Refusal::Denied(reason)),
            "{name}"
        );
        assert_eq!(returned, 0);
        // Nothing was read for the denied calls: no access event after them.
        assert_eq!(s.access_events().len(), accesses_before, "{name}");
        // The audit never holds an argument, filter value or label.
        for (_, text) in &records {
            assert!(!text.contains("PLANTED"), "{name}: {text}");
            assert!(!text.contains("notes.txt"), "{name}: {text}");
        }
    }
}

#[test]
fn not_admitted_denies_every_agent_but_not_the_owner() {
    let s = setup();
    let engine = s.started(3);
    engine.shutdown();
    let mut config = s.config();
    config.admitted = false;
    let engine = s.start_with(config, None);
    grant(&engine, "a", Operation::Query);
    assert_eq!(
        query(&engine, &agent("a"), json!({})).err(),
        Some(Refusal::Denied(DenyReason::NotAdmitted))
    );
    assert!(engine.tools_for(&agent("a")).is_empty());
    let owner = query(&engine, &Principal::Owner, json!({})).unwrap();
    assert_eq!(
        events_of(&owner).0.len(),
        1 + 1 + 3,
        "the enable, the session start and three actions"
    );
    engine.shutdown();
    let pairs = audit_pairs(&s.policy_records());
    assert!(pairs.contains(&(
        Verdict::Denied(DenyReason::NotAdmitted),
        AuditOutcome::Refused(Refusal::Denied(DenyReason::NotAdmitted)),
        0
    )));
    assert!(pairs.contains(&(Verdict::Allowed, AuditOutcome::Completed, 5)));
}

#[test]
fn a_status_grant_does_not_grant_query_and_tools_follow_the_policy_on_the_next_call() {
    let s = setup();
    let engine = s.started(2);
    assert!(engine.tools_for(&agent("a")).is_empty(), "deny by default");
    grant(&engine, "a", Operation::Status);
    assert_eq!(engine.tools_for(&agent("a")), vec![Operation::Status]);
    let status = engine
        .call_tool(&agent("a"), "history_status", &json!({}))
        .unwrap();
    assert!(matches!(status, ToolAnswer::Status(ref s) if s.enabled));
    assert_eq!(
        query(&engine, &agent("a"), json!({})).err(),
        Some(Refusal::Denied(DenyReason::NotGranted))
    );
    grant(&engine, "a", Operation::Query);
    assert_eq!(
        engine.tools_for(&agent("a")),
        vec![Operation::Status, Operation::Query]
    );
    assert!(
        engine.tools_for(&agent("b")).is_empty(),
        "grants are per actor"
    );
    engine
        .change_policy(PolicyChange::SwitchAgents { enabled: false })
        .unwrap();
    assert!(engine.tools_for(&agent("a")).is_empty());
    engine
        .change_policy(PolicyChange::SwitchAgents { enabled: true })
        .unwrap();
    assert_eq!(engine.tools_for(&agent("a")).len(), 2);
    engine
        .change_policy(PolicyChange::Revoke {
            actor: ActorId::new("a").unwrap(),
        })
        .unwrap();
    assert!(engine.tools_for(&agent("a")).is_empty());
    engine.shutdown();

    // Grants and revocations are journaled and survive a restart.
    let engine = s.start_with(s.config(), None);
    assert_eq!(
        query(&engine, &agent("a"), json!({})).err(),
        Some(Refusal::Denied(DenyReason::Revoked))
    );
    engine.shutdown();
}

#[test]
fn an_approved_manifest_grants_exactly_what_it_names_in_both_lists() {
    let s = setup();
    let engine = s.started(2);
    let manifest = Manifest::parse(
        "version: 3\nexpires_after: 1h\nidle_timeout: 10m\n\
         resources:\n  computer_history:\n    operations: [status, query]\n\
         allow:\n  tools: [history_status]\n",
    )
    .unwrap();
    engine
        .change_policy(PolicyChange::ApproveManifest {
            actor: ActorId::new("m").unwrap(),
            manifest: manifest.clone(),
            reapprove: false,
        })
        .unwrap();
    assert_eq!(engine.tools_for(&agent("m")), vec![Operation::Status]);
    // A revocation sticks: the same manifest presented again (as every `annal mcp --manifest`
    // start does) grants nothing, and calls are refused as revoked.
    engine
        .change_policy(PolicyChange::Revoke {
            actor: ActorId::new("m").unwrap(),
        })
        .unwrap();
    engine
        .change_policy(PolicyChange::ApproveManifest {
            actor: ActorId::new("m").unwrap(),
            manifest: manifest.clone(),
            reapprove: false,
        })
        .unwrap();
    assert!(engine.tools_for(&agent("m")).is_empty());
    assert!(matches!(
        engine.call_tool(&agent("m"), "history_status", &json!({})),
        Err(Refusal::Denied(DenyReason::Revoked))
    ));
    // Only the owner's explicit re-approval lifts it, and the journal says so.
    engine
        .change_policy(PolicyChange::ApproveManifest {
            actor: ActorId::new("m").unwrap(),
            manifest,
            reapprove: true,
        })
        .unwrap();
    assert_eq!(engine.tools_for(&agent("m")), vec![Operation::Status]);
    assert_eq!(
        query(&engine, &agent("m"), json!({})).err(),
        Some(Refusal::Denied(DenyReason::NotGranted))
    );
    s.clock.advance(Duration::from_secs(3_601));
    assert_eq!(
        engine
            .call_tool(&agent("m"), "history_status", &json!({}))
            .err(),
        Some(Refusal::Denied(DenyReason::Expired))
    );
    engine.shutdown();
    assert!(s.policy_records().iter().any(|(event, _)| matches!(
        event,
        PolicyEvent::GrantIssued {
            source: GrantSource::ManifestReapproved,
            ..
        }
    )));
}

#[test]
fn pages_are_disjoint_cursors_are_single_use_and_bound_to_their_actor() {
    let s = setup();
    let engine = s.started(24);
    grant(&engine, "a", Operation::Query);
    grant(&engine, "b", Operation::Query);
    let unpaged = events_of(&query(&engine, &Principal::Owner, json!({"limit": 200})).unwrap()).0;
    assert_eq!(
        unpaged.len(),
        1 + 1 + 24,
        "the enable, the session start, 24 actions"
    );
    // That read appended its `access` event; it is the newest event the pages will see.
    engine.sync().unwrap();
    let mut unpaged = unpaged;
    unpaged.push(unpaged.last().unwrap() + 1);

    let first = query(&engine, &agent("a"), json!({"limit": 10})).unwrap();
    let json_form = first.to_json();
    assert_eq!(json_form["has_more"], json!(true));
    let (page1, cursor1) = events_of(&first);
    let cursor1 = cursor1.expect("more remain");

    // Another actor, other filters, or a tampered cursor: refused, and nothing is read. The
    // first page's `access` event is durable before counting (it is appended after the
    // answer, and a flush after the refusals would otherwise count it among them).
    engine.sync().unwrap();
    let accesses = s.access_events().len();
    assert_eq!(
        query(
            &engine,
            &agent("b"),
            json!({"limit": 10, "cursor": cursor1})
        )
        .err(),
        Some(Refusal::Cursor(CursorRefusal::ForeignActor))
    );
    assert_eq!(
        query(&engine, &agent("a"), json!({"limit": 9, "cursor": cursor1})).err(),
        Some(Refusal::Cursor(CursorRefusal::FilterMismatch))
    );
    let mut tampered = cursor1.clone().into_bytes();
    tampered[10] = if tampered[10] == b'a' { b'b' } else { b'a' };
    assert_eq!(
        query(
            &engine,
            &agent("a"),
            json!({"limit": 10, "cursor": String::from_utf8(tampered).unwrap()})
        )
        .err(),
        Some(Refusal::Cursor(CursorRefusal::Invalid))
    );
    assert_eq!(
        query(&engine, &agent("a"), json!({"limit": 10, "cursor": 7})).err(),
        Some(Refusal::Contract(ErrorCode::InvalidHistoryQuery))
    );
    engine.sync().unwrap();
    assert_eq!(s.access_events().len(), accesses, "refusals read nothing");

    let second = query(
        &engine,
        &agent("a"),
        json!({"limit": 10, "cursor": cursor1}),
    )
    .unwrap();
    let (page2, cursor2) = events_of(&second);
    assert_eq!(
        query(
            &engine,
            &agent("a"),
            json!({"limit": 10, "cursor": cursor1})
        )
        .err(),
        Some(Refusal::Cursor(CursorRefusal::Replayed)),
        "single use"
    );
    let third = query(
        &engine,
        &agent("a"),
        json!({"limit": 10, "cursor": cursor2.expect("more remain")}),
    )
    .unwrap();
    let (page3, cursor3) = events_of(&third);
    assert_eq!(cursor3, None, "the last page");
    assert!(
        third.to_json().get("has_more").is_none(),
        "the contract's shape"
    );
    let mut together = page3.clone();
    together.extend(&page2);
    together.extend(&page1);
    assert_eq!(together, unpaged);

    // A cursor expires after its lifetime.
    let fresh = events_of(&query(&engine, &agent("a"), json!({"limit": 10})).unwrap())
        .1
        .unwrap();
    s.clock.advance(Duration::from_secs(61));
    assert_eq!(
        query(&engine, &agent("a"), json!({"limit": 10, "cursor": fresh})).err(),
        Some(Refusal::Cursor(CursorRefusal::Expired))
    );
    let remaining = events_of(&query(&engine, &agent("a"), json!({"limit": 10})).unwrap())
        .1
        .unwrap();
    // Revocation reaches a cursor already handed out.
    engine
        .change_policy(PolicyChange::Revoke {
            actor: ActorId::new("a").unwrap(),
        })
        .unwrap();
    assert_eq!(
        query(
            &engine,
            &agent("a"),
            json!({"limit": 10, "cursor": remaining})
        )
        .err(),
        Some(Refusal::Denied(DenyReason::Revoked))
    );
    // An empty read appends no access event.
    engine.sync().unwrap();
    let before_empty = s.access_events().len();
    let empty = query(&engine, &agent("b"), json!({"since_sequence": 100_000})).unwrap();
    assert!(events_of(&empty).0.is_empty());
    engine.sync().unwrap();
    assert_eq!(s.access_events().len(), before_empty);
    engine.shutdown();

    // One access event per non-empty read, none for the rest; none in any response.
    let accesses = s.access_events();
    assert_eq!(
        accesses.iter().filter(|n| **n == 10).count(),
        4,
        "{accesses:?}"
    );
    let pairs = audit_pairs(&s.policy_records());
    assert!(pairs.contains(&(
        Verdict::Allowed,
        AuditOutcome::Refused(Refusal::Cursor(CursorRefusal::Replayed)),
        0
    )));
    assert!(pairs.contains(&(Verdict::Allowed, AuditOutcome::Completed, 10)));
    // Each refused cursor left its pre-execution and its completion record.
    for refusal in [
        CursorRefusal::ForeignActor,
        CursorRefusal::FilterMismatch,
        CursorRefusal::Invalid,
        CursorRefusal::Expired,
    ] {
        assert!(
            pairs.contains(&(
                Verdict::Allowed,
                AuditOutcome::Refused(Refusal::Cursor(refusal)),
                0
            )),
            "{refusal:?}: {pairs:?}"
        );
    }
    assert!(pairs.contains(&(
        Verdict::Denied(DenyReason::Revoked),
        AuditOutcome::Refused(Refusal::Denied(DenyReason::Revoked)),
        0
    )));
}

#[test]
fn a_call_whose_pre_execution_record_cannot_be_made_durable_does_not_run() {
    let s = setup();
    let (engine, storage) = s.started_faulty(s.config());
    grant(&engine, "a", Operation::Query);
    storage.fail_from_nth(FaultOp::Sync, 1, FaultKind::Eio);
    assert_eq!(
        query(&engine, &agent("a"), json!({})).err(),
        Some(Refusal::Contract(ErrorCode::HistoryStorageUnavailable)),
        "fail closed"
    );
    storage.clear_faults();
    engine.shutdown();
    drop(storage);
    assert!(
        s.access_events().is_empty(),
        "the read never ran, so nothing was recorded as read"
    );
}

/// The owner is told a grant (or switching agents back on) whose journal commit failed did
/// not happen, so no agent reads on it: not at once, not once the journal writes what it held,
/// not after a restart that finds the failed record on disk after all. A revocation whose
/// commit failed takes effect at once and is journaled once the journal can.
#[test]
fn a_grant_whose_commit_fails_is_never_in_effect_and_a_failed_revocation_is() {
    for failure in SyncFailure::ALL {
        let s = setup();
        let mut config = s.config();
        // The journal retries what it holds on its tick: make the tick quick.
        config.sync_interval = Duration::from_millis(20);
        let (engine, storage) = s.started_faulty(config.clone());
        // The journal's next sync fails, and it must be the change's commit: the history's group
        // commit (a read's access event) passes the fault by, and the completion records of the
        // reads before it (durable with the journal's next tick) are made durable first by a
        // commit of their own (a grant to an actor the test never uses).
        let fail_next_sync = |engine: &Engine, storage: &FaultyStorage| {
            grant(engine, "unused", Operation::Status);
            storage.fail_next_sync_in(annal_engine::storage::Area::Journal, failure)
        };
        let denied = |engine: &Engine, name: &str| {
            query(engine, &agent(name), json!({}))
                .err()
                .and_then(|refusal| match refusal {
                    Refusal::Denied(reason) => Some(reason),
                    _ => None,
                })
        };
        // "a" is granted and then revoked while the journal fails; "b" is granted while it fails.
        grant(&engine, "a", Operation::Query);
        assert!(query(&engine, &agent("a"), json!({})).is_ok());
        fail_next_sync(&engine, &storage);
        let revoked = engine.change_policy(PolicyChange::Revoke {
            actor: ActorId::new("a").unwrap(),
        });
        assert!(revoked.is_err(), "the journal's sync failed");
        assert_eq!(denied(&engine, "a"), Some(DenyReason::Revoked));
        fail_next_sync(&engine, &storage);
        let granted = engine.change_policy(PolicyChange::Grant {
            actor: ActorId::new("b").unwrap(),
            operation: Operation::Query,
            terms: GrantTerms::DEFAULT,
        });
        assert!(granted.is_err(), "the journal's sync failed");
        assert_eq!(storage.injected(), 2);
        assert_eq!(
            denied(&engine, "b"),
            Some(DenyReason::NotGranted),
            "read on a failed grant"
        );
        // Several ticks: the journal writes what it holds.
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(denied(&engine, "b"), Some(DenyReason::NotGranted));
        assert_eq!(denied(&engine, "a"), Some(DenyReason::Revoked));
        // The agents switch: switched off and on again, the second while the journal fails.
        engine
            .change_policy(PolicyChange::SwitchAgents { enabled: false })
            .unwrap();
        fail_next_sync(&engine, &storage);
        assert!(
            engine
                .change_policy(PolicyChange::SwitchAgents { enabled: true })
                .is_err()
        );
        grant(&engine, "c", Operation::Query);
        assert_eq!(denied(&engine, "c"), Some(DenyReason::AgentsDisabled));
        engine.shutdown();
        drop(storage);
        let engine = s.start_with(config, None);
        assert_eq!(
            denied(&engine, "c"),
            Some(DenyReason::AgentsDisabled),
            "after a restart"
        );
        engine
            .change_policy(PolicyChange::SwitchAgents { enabled: true })
            .unwrap();
        assert_eq!(
            denied(&engine, "a"),
            Some(DenyReason::Revoked),
            "after a restart"
        );
        assert_eq!(
            denied(&engine, "b"),
            Some(DenyReason::NotGranted),
            "after a restart"
        );
        assert!(query(&engine, &agent("c"), json!({})).is_ok());
        engine.shutdown();
    }
}

#[test]
fn invalid_arguments_are_refused_with_the_contracts_codes_after_the_gate() {
    let s = setup();
    let engine = s.started(1);
    assert_eq!(
        query(&engine, &agent("a"), json!({"limit": 0})).err(),
        Some(Refusal::Denied(DenyReason::NotGranted)),
        "a caller without a grant learns nothing, not even that its arguments were bad"
    );
    grant(&engine, "a", Operation::Query);
    assert_eq!(
        query(&engine, &agent("a"), json!({"unknown": 1})).err(),
        Some(Refusal::Contract(ErrorCode::InvalidHistoryQuery))
    );
    assert_eq!(
        query(
            &engine,
            &agent("a"),
            json!({"since_sequence": 5, "until_sequence": 2})
        )
        .err(),
        Some(Refusal::Contract(ErrorCode::InvalidHistoryQueryRange))
    );
    assert_eq!(
        engine
            .call_tool(&agent("a"), "history_delete", &json!({}))
            .err(),
        Some(Refusal::Contract(ErrorCode::UnknownTool))
    );
    engine.shutdown();
}

/// A call naming a tool that is neither of the two is refused `unknown_tool` and audited as a
/// refusal: one durable record with the caller and the time, under the next audit id, and
/// never the name it called (caller text). It is refused whether or not the caller holds a
/// grant, and it shows in the owner's audit view and among the denials.
#[test]
fn an_unknown_tool_call_is_audited_as_a_refusal_without_its_name() {
    let s = setup();
    let engine = s.started(1);
    grant(&engine, "a", Operation::Query);
    query(&engine, &agent("a"), json!({"limit": 1})).unwrap();
    for who in [agent("a"), agent("stranger")] {
        assert_eq!(
            engine
                .call_tool(&who, "history_delete_everything", &json!({"x": 1}))
                .err(),
            Some(Refusal::Contract(ErrorCode::UnknownTool))
        );
    }
    let entries = engine.audit(AuditFilter::default()).unwrap();
    assert_eq!(entries.len(), 3, "{entries:?}");
    let unknown: Vec<_> = entries.iter().filter(|e| e.operation.is_none()).collect();
    assert_eq!(
        unknown.iter().map(|e| &e.principal).collect::<Vec<_>>(),
        [&agent("a"), &agent("stranger")]
    );
    for entry in &unknown {
        assert_eq!(entry.verdict, None, "no decision was made");
        assert_eq!(
            entry.outcome,
            Some(AuditOutcome::Refused(Refusal::Contract(
                ErrorCode::UnknownTool
            )))
        );
        assert_eq!(entry.returned_events, 0);
    }
    // Audit ids go on after them: the next call takes the one after the last.
    assert_eq!(
        entries.iter().map(|e| e.audit).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    // The owner's denials include them.
    let denied = engine
        .audit(AuditFilter {
            denied_only: true,
            ..AuditFilter::default()
        })
        .unwrap();
    assert_eq!(denied.len(), 2);
    engine.shutdown();
    // Durable, and the journal never holds the name that was called.
    let records = s.policy_records();
    let refused: Vec<_> = records
        .iter()
        .filter(|(e, _)| matches!(e, PolicyEvent::UnknownToolRefused { .. }))
        .collect();
    assert_eq!(refused.len(), 2);
    for (_, json) in &records {
        assert!(!json.contains("delete_everything"), "{json}");
    }
}

/// Calls of eight agents at once share the journal's syncs: each call's pre-execution record is
/// durable before its read runs (every call is answered, so every record was committed), and
/// the records of calls that arrive together are made durable by one `fdatasync`. With the
/// group-commit ticks pushed past the test, the only syncs are those commits: fewer syncs than
/// calls means they were shared. (Before the gate owned a call, every call waited in the
/// supervisor's mailbox for the one before it, and each paid a sync of its own.)
#[test]
fn concurrent_calls_share_the_journals_syncs() {
    /// Agents calling at once.
    const CALLERS: usize = 8;
    /// Calls each agent makes.
    const CALLS_EACH: usize = 25;
    let s = setup();
    let mut config = s.config();
    config.sync_interval = Duration::from_secs(600);
    let (engine, storage) = s.started_faulty(config);
    let capture = engine.capture();
    for _ in 0..10 {
        let _ = capture.action_started(Capability::new("input.pointer.click").unwrap(), None, None);
    }
    engine.flush().unwrap();
    let names: Vec<String> = (0..CALLERS).map(|n| format!("agent-{n}")).collect();
    for name in &names {
        grant(&engine, name, Operation::Query);
    }
    let engine = Arc::new(engine);
    let syncs_before = storage.count(FaultOp::Sync);
    let callers: Vec<_> = names
        .iter()
        .map(|name| {
            let engine = Arc::clone(&engine);
            let who = agent(name);
            std::thread::spawn(move || {
                for _ in 0..CALLS_EACH {
                    match query(&engine, &who, json!({ "limit": 5 })) {
                        Ok(ToolAnswer::Query { response, .. }) => {
                            assert_eq!(response.events.len(), 5);
                        }
                        other => panic!("a concurrent call was not answered: {other:?}"),
                    }
                }
            })
        })
        .collect();
    for caller in callers {
        caller.join().unwrap();
    }
    let syncs = storage.count(FaultOp::Sync) - syncs_before;
    let calls = u64::try_from(CALLERS * CALLS_EACH).unwrap();
    assert!(syncs > 0, "no call's record was made durable");
    assert!(
        syncs < calls,
        "{calls} concurrent calls took {syncs} syncs: none was shared"
    );
    println!(
        "FIGURE gate.concurrent_calls.syncs_per_call {:.2} syncs",
        syncs as f64 / calls as f64
    );
    Arc::try_unwrap(engine).unwrap().shutdown();
}
