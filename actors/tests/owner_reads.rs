//! The owner's reads through the real actor tree: the owner's filters narrow a read and never
//! ride with an agent's (an agent's `history_query` with a filter argument is refused as
//! before); the owner's setting decides whether their reads append the contract's `access`
//! event, while every read stays audited and agents' reads always append theirs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod embedded;

use annal_actors::Engine;
use annal_actors::gate::{PolicyChange, ToolAnswer};
use annal_engine::policy::views::AuditFilter;
use annal_engine::policy::{
    ActorId, AuditOutcome, GrantTerms, Operation, Principal, Refusal, Verdict,
};
use annal_engine::query::{OwnerFilter, OwnerFilterParts};
use annal_schema::tools::QueryRequest;
use annal_schema::{
    AccessOperation, ActionOutcome, Application, Capability, Effect, ErrorCode, Payload, Route,
};
use embedded::TestStore;
use serde_json::json;

fn agent(name: &str) -> Principal {
    Principal::Agent(ActorId::new(name).unwrap())
}

/// An enabled engine with three actions: a click in Firefox that failed, a typing in a text
/// editor that was confirmed, and a click with no application; synced.
fn started(store: &TestStore) -> Engine {
    let engine = store.start();
    engine.enable().unwrap();
    let capture = engine.capture();
    let firefox = Application::from_names(None, Some("Firefox".into())).unwrap();
    let editor = Application::from_names(Some("org.gnome.TextEditor".into()), None).unwrap();
    for (capability, app, effect) in [
        ("ui.click", Some(firefox), Effect::Failed),
        ("ui.type_text", Some(editor), Effect::Confirmed),
        ("ui.click", None, Effect::Confirmed),
    ] {
        let token = capture.action_started(Capability::new(capability).unwrap(), app, None);
        capture.action_completed(token, ActionOutcome::new(effect, Route::Accessibility));
    }
    engine.sync().unwrap();
    engine
}

fn request(value: serde_json::Value) -> QueryRequest {
    QueryRequest::parse(&value).unwrap()
}

fn owner_read(engine: &Engine, filter: OwnerFilterParts) -> Vec<u64> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let read = engine.owner_query_async(
        request(json!({"limit": 200})),
        OwnerFilter::new(filter).unwrap(),
        AccessOperation::LocalCli,
    );
    runtime
        .block_on(read)
        .unwrap()
        .events
        .iter()
        .map(|e| e.data.sequence.get())
        .collect()
}

/// The `access` events on disk: (who, how many returned).
fn accesses(store: &TestStore) -> Vec<(AccessOperation, u8)> {
    store
        .events()
        .iter()
        .filter_map(|e| match &e.data.payload {
            Payload::Access {
                operation,
                returned_events,
            } => Some((*operation, returned_events.get())),
            _ => None,
        })
        .collect()
}

/// The owner's completed reads in the audit journal (the engine's audit view, which reads the
/// journal once what was recorded is appended): the returned count of each.
fn owner_audits(engine: &Engine) -> Vec<u16> {
    engine
        .audit(AuditFilter::default())
        .unwrap()
        .iter()
        .filter(|e| {
            e.principal == Principal::Owner
                && e.verdict == Some(Verdict::Allowed)
                && e.outcome == Some(AuditOutcome::Completed)
        })
        .map(|e| e.returned_events)
        .collect()
}

/// The owner's filters narrow what a read returns, through the gate (audited like any read);
/// an agent's `history_query` with a filter's name among its arguments is refused
/// `invalid_history_query`, as any argument outside the contract is.
#[test]
fn the_owners_filters_narrow_and_an_agents_filter_argument_is_refused() {
    let store = TestStore::new();
    let engine = started(&store);
    let all = owner_read(&engine, OwnerFilterParts::default());
    assert_eq!(
        all.len(),
        7,
        "enable's control event and three actions, started and completed"
    );
    let firefox = owner_read(
        &engine,
        OwnerFilterParts {
            application: Some("FIREFOX".into()),
            ..Default::default()
        },
    );
    assert_eq!(firefox, [all[1], all[2]]);
    let failed = owner_read(
        &engine,
        OwnerFilterParts {
            outcome: Some(Effect::Failed),
            ..Default::default()
        },
    );
    assert_eq!(failed, [all[2]]);
    let typing = owner_read(
        &engine,
        OwnerFilterParts {
            text: Some("TEXTEDITOR".into()),
            ..Default::default()
        },
    );
    assert_eq!(typing, [all[3], all[4]]);
    assert_eq!(
        owner_audits(&engine),
        [7, 2, 1, 2],
        "each read audited with its count"
    );

    engine
        .change_policy(PolicyChange::Grant {
            actor: ActorId::new("a").unwrap(),
            operation: Operation::Query,
            terms: GrantTerms::DEFAULT,
        })
        .unwrap();
    for arguments in [
        json!({"app": "Firefox"}),
        json!({"capability": "ui.click"}),
        json!({"outcome": "failed"}),
        json!({"since_ms": 1}),
        json!({"until_ms": 1}),
        json!({"text": "fire"}),
        json!({"limit": 5, "app": "Firefox"}),
    ] {
        assert_eq!(
            engine
                .call_tool(&agent("a"), "history_query", &arguments)
                .err(),
            Some(Refusal::Contract(ErrorCode::InvalidHistoryQuery)),
            "{arguments}"
        );
    }
    // The same agent without a filter argument reads as before.
    let answer = engine
        .call_tool(&agent("a"), "history_query", &json!({"limit": 200}))
        .unwrap();
    assert!(matches!(answer, ToolAnswer::Query { .. }));
    engine.shutdown();
}

/// Given the owner's access events switched off, the owner's reads append no `access` event
/// but stay audited with their counts; an agent's read appends one all the same; switched
/// back on, the owner's reads append theirs again. The setting survives a restart.
#[test]
fn the_owners_access_events_follow_the_setting_and_agents_always_append() {
    let store = TestStore::new();
    let engine = started(&store);
    owner_read(&engine, OwnerFilterParts::default());
    engine.sync().unwrap();
    assert_eq!(
        accesses(&store),
        [(AccessOperation::LocalCli, 7)],
        "on by default"
    );

    engine
        .change_policy(PolicyChange::OwnerAccess { enabled: false })
        .unwrap();
    assert!(!engine.grants().unwrap().owner_access_events);
    let read = owner_read(&engine, OwnerFilterParts::default());
    assert_eq!(
        read.len(),
        8,
        "the first read's access event is history too"
    );
    engine.sync().unwrap();
    assert_eq!(
        accesses(&store).len(),
        1,
        "no access event for the owner's read"
    );
    assert_eq!(owner_audits(&engine), [7, 8], "still audited");

    engine
        .change_policy(PolicyChange::Grant {
            actor: ActorId::new("a").unwrap(),
            operation: Operation::Query,
            terms: GrantTerms::DEFAULT,
        })
        .unwrap();
    engine
        .call_tool(&agent("a"), "history_query", &json!({"limit": 2}))
        .unwrap();
    engine.sync().unwrap();
    assert_eq!(
        accesses(&store),
        [
            (AccessOperation::LocalCli, 7),
            (AccessOperation::AgentQuery, 2)
        ],
        "an agent's read appends its access event whatever the owner's setting"
    );
    engine.shutdown();

    // The setting is journaled: a restarted engine keeps it.
    let engine = store.start();
    assert!(!engine.grants().unwrap().owner_access_events);
    owner_read(&engine, OwnerFilterParts::default());
    engine.sync().unwrap();
    assert_eq!(accesses(&store).len(), 2);
    engine
        .change_policy(PolicyChange::OwnerAccess { enabled: true })
        .unwrap();
    owner_read(&engine, OwnerFilterParts::default());
    engine.sync().unwrap();
    let after = accesses(&store);
    assert_eq!(after.len(), 3);
    assert_eq!(after[2].0, AccessOperation::LocalCli);
    engine.shutdown();
}
