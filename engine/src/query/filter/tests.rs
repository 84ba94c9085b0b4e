//! The owner's filters, table by table: what is refused, what the index decides, what the event
//! decides, who may carry one, and (proptest) that a filter only ever narrows a plan.

use std::time::Duration;

use annal_schema::tools::QueryRequest;
use annal_schema::{Effect, Event, EventType};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::keys::RootKey;
use crate::policy::{ActorId, Admission, Operation, PolicyState};
use crate::profile::ChunkId;
use crate::query::{Index, RetentionCutoff, plan_page, plan_page_filtered};
use crate::store::RecordLocation;

/// 2026-12-04T10:00:00Z in ms since the epoch.
const T0_MS: u64 = 1_796_378_400_000;

fn filter(parts: OwnerFilterParts) -> OwnerFilter {
    OwnerFilter::new(parts).unwrap()
}

fn text(value: &str) -> Option<String> {
    Some(value.to_owned())
}

/// An event of `kind` at `time_ms` with the given data fields (`capability`, `application`,
/// and the payload's `effect` for an `action_completed`).
fn event(kind: &str, time_ms: u64, extra: Value) -> Event {
    let time = annal_schema::EventTime::from_unix(Duration::from_millis(time_ms)).unwrap();
    let payload = match kind {
        "action_completed" => {
            let effect = extra.get("effect").cloned().unwrap_or(json!("confirmed"));
            json!({"kind": "action_completed", "effect": effect, "route": "accessibility", "evidence_kinds": []})
        }
        "action_started" => json!({"kind": "action_started"}),
        "session" => json!({"kind": "session", "phase": "started"}),
        _ => json!({"kind": "access", "operation": "local_cli", "returned_events": 1}),
    };
    let event_type = match kind {
        "action_completed" => "cua-driver.history.action_completed.v0",
        "action_started" => "cua-driver.history.action_started.v0",
        "session" => "cua-driver.history.session_started.v0",
        _ => "cua-driver.history.access.v0",
    };
    let mut data = json!({
        "sequence": 1, "platform": "linux", "process_model": "in_daemon",
        "caller_category": "cua_runtime", "payload": payload,
    });
    for field in ["capability", "application"] {
        if let Some(value) = extra.get(field) {
            data[field] = value.clone();
        }
    }
    Event::from_json_value(json!({
        "specversion": "1.0", "id": "2645d7d2275f3eca5f668ff450660365",
        "source": "urn:cua-driver:history:6dd3aa1eef99854a9a3d39ba1e2315f1",
        "type": event_type, "subject": "action/1", "time": time.as_str(),
        "datacontenttype": "application/json",
        "dataschema": "urn:cua-driver:schema:history-event:v0", "data": data,
    }))
    .unwrap()
}

fn entry(sequence: u64, time_ms: u64, event_type: EventType) -> IndexEntry {
    IndexEntry {
        sequence,
        time: Duration::from_millis(time_ms),
        session: None,
        event_type,
        location: RecordLocation {
            chunk_id: ChunkId([1; 16]),
            position: sequence,
            offset: sequence * 100,
            len: 90,
            sequence,
        },
    }
}

#[test]
fn refused_values_name_their_field_and_never_swap_or_clamp() {
    let long = "a".repeat(OWNER_FILTER_TEXT_MAX_LEN_CHARS + 1);
    let cases: [(OwnerFilterParts, InvalidOwnerFilter, &str); 7] = [
        (
            OwnerFilterParts {
                since_ms: Some(T0_MS + 1),
                until_ms: Some(T0_MS),
                ..Default::default()
            },
            InvalidOwnerFilter::Reversed,
            "until_ms",
        ),
        (
            OwnerFilterParts {
                application: text(""),
                ..Default::default()
            },
            InvalidOwnerFilter::Application,
            "app",
        ),
        (
            OwnerFilterParts {
                application: Some(long.clone()),
                ..Default::default()
            },
            InvalidOwnerFilter::Application,
            "app",
        ),
        (
            OwnerFilterParts {
                capability: text("ui\nclick"),
                ..Default::default()
            },
            InvalidOwnerFilter::Capability,
            "capability",
        ),
        (
            OwnerFilterParts {
                capability: text(""),
                ..Default::default()
            },
            InvalidOwnerFilter::Capability,
            "capability",
        ),
        (
            OwnerFilterParts {
                text: Some(long),
                ..Default::default()
            },
            InvalidOwnerFilter::Text,
            "text",
        ),
        (
            OwnerFilterParts {
                text: text("\u{7}"),
                ..Default::default()
            },
            InvalidOwnerFilter::Text,
            "text",
        ),
    ];
    for (parts, error, field) in cases {
        assert_eq!(OwnerFilter::new(parts.clone()), Err(error), "{parts:?}");
        assert_eq!(error.field(), field);
        assert!(
            error.to_string().contains(&format!("\"{field}\"")),
            "{error}"
        );
    }
    // Equal bounds are one instant, not a reversed range; the longest text is accepted.
    let instant = OwnerFilterParts {
        since_ms: Some(T0_MS),
        until_ms: Some(T0_MS),
        text: Some("a".repeat(OWNER_FILTER_TEXT_MAX_LEN_CHARS)),
        ..Default::default()
    };
    assert!(OwnerFilter::new(instant).is_ok());
    assert!(
        OwnerFilter::new(OwnerFilterParts::default())
            .unwrap()
            .is_empty()
    );
}

/// What the index decides: the time bounds (inclusive) and an outcome's event type; nothing
/// else rules an entry out before its record is read.
#[test]
fn the_index_decides_time_and_an_outcomes_type() {
    let bounded = filter(OwnerFilterParts {
        since_ms: Some(T0_MS),
        until_ms: Some(T0_MS + 1_000),
        ..Default::default()
    });
    let outcome = filter(OwnerFilterParts {
        outcome: Some(Effect::Failed),
        ..Default::default()
    });
    let by_app = filter(OwnerFilterParts {
        application: text("Firefox"),
        ..Default::default()
    });
    let cases: [(&OwnerFilter, IndexEntry, bool); 9] = [
        (
            &bounded,
            entry(1, T0_MS - 1, EventType::ActionStarted),
            false,
        ),
        (&bounded, entry(2, T0_MS, EventType::ActionStarted), true),
        (&bounded, entry(3, T0_MS + 1_000, EventType::Access), true),
        (
            &bounded,
            entry(4, T0_MS + 1_001, EventType::ActionStarted),
            false,
        ),
        (&outcome, entry(5, T0_MS, EventType::ActionCompleted), true),
        (&outcome, entry(6, T0_MS, EventType::ActionStarted), false),
        (&outcome, entry(7, T0_MS, EventType::Health), false),
        (&by_app, entry(8, T0_MS, EventType::SessionStarted), true),
        (&OwnerFilter::NONE, entry(9, 0, EventType::Control), true),
    ];
    for (filter, entry, admitted) in cases {
        assert_eq!(
            filter.admits_entry(&entry),
            admitted,
            "{filter:?} {entry:?}"
        );
    }
    assert!(!bounded.needs_event(), "time bounds are the index's alone");
    assert!(outcome.needs_event() && by_app.needs_event());
}

/// What the event decides, case by case: identity fields ignoring case (equal for `app` and
/// `capability`, a substring for `text`), an outcome by its effect, and no match for an event
/// without the field.
#[test]
fn the_event_decides_identity_outcome_and_text() {
    let firefox = json!({"bundle_id": "org.mozilla.Firefox", "display_name": "Firefox"});
    let clicked = event(
        "action_completed",
        T0_MS,
        json!({"capability": "ui.click", "application": firefox, "effect": "failed"}),
    );
    let started = event(
        "action_started",
        T0_MS,
        json!({"capability": "ui.type_text", "application": {"display_name": "Text Editor"}}),
    );
    let bare = event("session", T0_MS, json!({}));
    let parts = |f: fn(&mut OwnerFilterParts)| {
        let mut parts = OwnerFilterParts::default();
        f(&mut parts);
        filter(parts)
    };
    let rows: [(&str, OwnerFilter, [bool; 3]); 13] = [
        (
            "app by display name",
            parts(|p| p.application = text("firefox")),
            [true, false, false],
        ),
        (
            "app by bundle id",
            parts(|p| p.application = text("ORG.MOZILLA.FIREFOX")),
            [true, false, false],
        ),
        (
            "app is whole, not a part",
            parts(|p| p.application = text("fire")),
            [false, false, false],
        ),
        (
            "capability",
            parts(|p| p.capability = text("UI.Click")),
            [true, false, false],
        ),
        (
            "capability is whole",
            parts(|p| p.capability = text("ui")),
            [false, false, false],
        ),
        (
            "outcome failed",
            parts(|p| p.outcome = Some(Effect::Failed)),
            [true, false, false],
        ),
        (
            "outcome confirmed",
            parts(|p| p.outcome = Some(Effect::Confirmed)),
            [false, false, false],
        ),
        (
            "text in a capability",
            parts(|p| p.text = text("TYPE_")),
            [false, true, false],
        ),
        (
            "text in a bundle id",
            parts(|p| p.text = text("mozilla")),
            [true, false, false],
        ),
        (
            "text in a display name",
            parts(|p| p.text = text("editor")),
            [false, true, false],
        ),
        (
            "text in both",
            parts(|p| p.text = text("ui.")),
            [true, true, false],
        ),
        (
            "text nowhere",
            parts(|p| p.text = text("terminal")),
            [false, false, false],
        ),
        (
            "every part at once",
            parts(|p| {
                p.application = text("Firefox");
                p.capability = text("ui.click");
                p.outcome = Some(Effect::Failed);
                p.text = text("click");
                p.since_ms = Some(T0_MS);
                p.until_ms = Some(T0_MS);
            }),
            [true, false, false],
        ),
    ];
    for (name, filter, expected) in rows {
        let got = [&clicked, &started, &bare].map(|e| filter.admits_event(e));
        assert_eq!(got, expected, "{name}");
    }
    // The event's own time is checked again (exact, whatever an index said).
    let later = filter(OwnerFilterParts {
        since_ms: Some(T0_MS + 1),
        application: text("firefox"),
        ..Default::default()
    });
    assert!(!later.admits_event(&clicked));
}

/// Only the owner's read may carry a filter; an agent's read carries none.
#[test]
fn only_the_owners_grant_may_carry_a_filter() {
    let anyone = Admission {
        admitted: true,
        unrestricted: true,
    };
    let policy = PolicyState::default();
    let owner = policy
        .decide(&Principal::Owner, Operation::Query, anyone, 0, 1)
        .unwrap();
    let agent = Principal::Agent(ActorId::new("agent-a").unwrap());
    let agent = policy
        .decide(&agent, Operation::Query, anyone, 0, 2)
        .unwrap();
    let some = filter(OwnerFilterParts {
        text: text("x"),
        ..Default::default()
    });
    assert!(some.permitted(&owner));
    assert!(
        !some.permitted(&agent),
        "an agent's read never carries a filter"
    );
    assert!(OwnerFilter::NONE.permitted(&agent));
}

fn request(value: Value) -> QueryRequest {
    QueryRequest::parse(&value).unwrap()
}

proptest! {
    /// A time filter (what the index decides alone) only narrows: every planned entry passes
    /// it and the unfiltered plan's rules, and the plan is exactly the newest `limit` of the
    /// unfiltered full answer that pass it.
    #[test]
    fn a_filter_only_narrows_the_plan(
        times in proptest::collection::vec(0u64..10_000, 0..60),
        kinds in proptest::collection::vec(proptest::sample::select(EventType::ALL.to_vec()), 60),
        since in proptest::option::of(0u64..10_000),
        span in proptest::option::of(0u64..10_000),
        outcome in any::<bool>(),
        limit in 1u8..=20,
        until_sequence in proptest::option::of(1u64..70),
    ) {
        let entries: Vec<IndexEntry> = times
            .iter()
            .enumerate()
            .map(|(i, t)| entry(i as u64 + 1, *t, kinds[i]))
            .collect();
        let index = Index::from_entries(entries.clone());
        let key = RootKey::from_bytes([3; 32]).session_id_key();
        let until = since.zip(span).map(|(s, d)| s + d);
        let filter = filter(OwnerFilterParts {
            since_ms: since,
            until_ms: until,
            outcome: outcome.then_some(Effect::Confirmed),
            ..Default::default()
        });
        let mut base = json!({"limit": limit});
        if let Some(u) = until_sequence {
            base["until_sequence"] = json!(u);
        }
        let cutoff = RetentionCutoff::new(Duration::from_millis(9_000), 0);
        let narrowed = plan_page_filtered(&request(base.clone()), &filter, &index, &key, cutoff, None);
        let mut all = base.clone();
        all["limit"] = json!(200);
        let everything = plan_page(&request(all), &index, &key, cutoff, None);
        let passing: Vec<u64> = everything
            .locations
            .iter()
            .filter(|l| filter.admits_entry(&entries[(l.sequence - 1) as usize]))
            .map(|l| l.sequence)
            .collect();
        let expected = &passing[passing.len().saturating_sub(usize::from(limit))..];
        let got: Vec<u64> = narrowed.locations.iter().map(|l| l.sequence).collect();
        prop_assert_eq!(&got[..], expected);
        prop_assert_eq!(narrowed.has_more, passing.len() > usize::from(limit));
    }
}
