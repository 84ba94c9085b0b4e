//! The named negative corpus: events that break the v0 contract.
//!
//! Each case mutates a valid base event and states who must refuse it. Nearly every case must
//! be refused by BOTH our closed types and the published JSON Schema. A few are refused only by
//! us, because our types are deliberately stricter than the published schema (the schema cannot
//! tie `type` to the payload kind, and it puts no character-set limit on names); each of those
//! is listed with its reason. The test fails if either side's verdict ever differs from the one
//! stated here, so loosening any closed type (or the schema changing) is caught.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use annal_schema::Event;
use annal_schema::privacy::PROHIBITED_FIELD_NAMES;
use serde_json::{Value, json};

/// Who must refuse a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Our types and the JSON Schema both refuse it.
    BothRefuse,
    /// Only our types refuse it; the published schema accepts it. The reason says why we are
    /// stricter.
    AnnalStricter(&'static str),
}

const TYPE_PAYLOAD: Verdict = Verdict::AnnalStricter(
    "the JSON Schema's payload oneOf is independent of `type`; our payload implies the type",
);
const CHARSET: Verdict = Verdict::AnnalStricter(
    "names carry no control characters (privacy: no free-form text); the schema bounds only length",
);
const CAPABILITY_CHARSET: Verdict = Verdict::AnnalStricter(
    "capabilities are [a-z0-9._-] starting with a letter; the schema bounds only length",
);
const INTEGER_AS_FLOAT: Verdict = Verdict::AnnalStricter(
    "an integer field written with a fraction part (6.0) is a float; JSON Schema counts it as integer",
);
const UTC_ONLY: Verdict = Verdict::AnnalStricter(
    "event time is UTC with a `Z` suffix, as the reference writes; the schema allows any offset",
);

/// A valid action_completed event using every optional field.
fn base() -> Value {
    json!({
        "specversion": "1.0",
        "id": "45d6ca1e8ad900f3c985cf8ada86f530",
        "source": "urn:cua-driver:history:6dd3aa1eef99854a9a3d39ba1e2315f1",
        "type": "cua-driver.history.action_completed.v0",
        "subject": "action/c59b2bd6db1046865a0a1cb7d63ddffa",
        "time": "2026-11-30T22:14:03.769293727Z",
        "datacontenttype": "application/json",
        "dataschema": "urn:cua-driver:schema:history-event:v0",
        "data": {
            "session_id": "b11ddce8dbd1872c9250e3f67dad2d9d",
            "action_id": "c59b2bd6db1046865a0a1cb7d63ddffa",
            "sequence": 6,
            "platform": "linux",
            "process_model": "in_daemon",
            "capability": "input.keyboard.type",
            "caller_category": "cua_runtime",
            "application": {"bundle_id": "org.example.terminal", "display_name": "Terminal"},
            "payload": {
                "kind": "action_completed",
                "effect": "partial",
                "route": "global_input",
                "delivery": "foreground",
                "delivered_count": 3,
                "evidence_kinds": ["value_readback", "window_change"],
                "escalation_kind": "retry_with_foreground_delivery"
            }
        }
    })
}

/// A valid event of another type, with a replacement payload and type.
fn with_payload(event_type: &str, payload: Value) -> Value {
    let mut v = base();
    v["type"] = json!(event_type);
    v["data"]["payload"] = payload;
    v
}

fn set(path: &[&str], value: Value) -> Value {
    let mut v = base();
    let mut at = &mut v;
    for key in &path[..path.len() - 1] {
        at = &mut at[*key];
    }
    at[path[path.len() - 1]] = value;
    v
}

fn remove(path: &[&str]) -> Value {
    let mut v = base();
    let mut at = &mut v;
    for key in &path[..path.len() - 1] {
        at = &mut at[*key];
    }
    at.as_object_mut().unwrap().remove(path[path.len() - 1]);
    v
}

/// The four object levels of an event, as paths.
const LEVELS: [(&str, &[&str]); 4] = [
    ("envelope", &[]),
    ("data", &["data"]),
    ("payload", &["data", "payload"]),
    ("application", &["data", "application"]),
];

fn add_field(level: &[&str], name: &str, value: Value) -> Value {
    let mut v = base();
    let mut at = &mut v;
    for key in level {
        at = &mut at[*key];
    }
    at.as_object_mut().unwrap().insert(name.to_owned(), value);
    v
}

fn corpus() -> Vec<(String, Value, Verdict)> {
    use Verdict::BothRefuse;
    let mut cases: Vec<(String, Value, Verdict)> = Vec::new();
    let mut case = |name: &str, value: Value, verdict: Verdict| {
        cases.push((name.to_owned(), value, verdict));
    };

    // Unknown fields and every prohibited field name, at each level.
    for (level_name, level) in LEVELS {
        case(
            &format!("unknown_field_at_{level_name}"),
            add_field(level, "extra", json!(1)),
            BothRefuse,
        );
        for field in PROHIBITED_FIELD_NAMES {
            case(
                &format!("prohibited_{field}_at_{level_name}"),
                add_field(level, field, json!("planted-secret-value")),
                BothRefuse,
            );
        }
    }

    // Identifiers.
    case(
        "id_upper_case",
        set(&["id"], json!("45D6CA1E8AD900F3C985CF8ADA86F530")),
        BothRefuse,
    );
    case(
        "id_short",
        set(&["id"], json!("45d6ca1e8ad900f3c985cf8ada86f53")),
        BothRefuse,
    );
    case(
        "id_long",
        set(&["id"], json!("45d6ca1e8ad900f3c985cf8ada86f5300")),
        BothRefuse,
    );
    case(
        "id_not_hex",
        set(&["id"], json!("45d6ca1e8ad900f3c985cf8ada86f53g")),
        BothRefuse,
    );
    case(
        "id_control_char",
        set(&["id"], json!("45d6ca1e8ad900f3c985cf8ada86f5\n0")),
        BothRefuse,
    );
    case("id_number", set(&["id"], json!(12345)), BothRefuse);
    case(
        "session_id_upper_case",
        set(
            &["data", "session_id"],
            json!("B11DDCE8DBD1872C9250E3F67DAD2D9D"),
        ),
        BothRefuse,
    );
    case(
        "session_id_raw_label",
        set(&["data", "session_id"], json!("fixture-session-1")),
        BothRefuse,
    );
    case(
        "action_id_short",
        set(&["data", "action_id"], json!("c59b2bd6")),
        BothRefuse,
    );
    case(
        "source_upper_case",
        set(
            &["source"],
            json!("urn:cua-driver:history:6DD3AA1EEF99854A9A3D39BA1E2315F1"),
        ),
        BothRefuse,
    );
    case(
        "source_wrong_prefix",
        set(
            &["source"],
            json!("urn:other:history:6dd3aa1eef99854a9a3d39ba1e2315f1"),
        ),
        BothRefuse,
    );
    case(
        "source_short_stream",
        set(&["source"], json!("urn:cua-driver:history:6dd3aa1e")),
        BothRefuse,
    );

    // Constants and enumerations.
    case(
        "specversion_other",
        set(&["specversion"], json!("0.3")),
        BothRefuse,
    );
    case(
        "datacontenttype_other",
        set(&["datacontenttype"], json!("text/plain")),
        BothRefuse,
    );
    case(
        "dataschema_other",
        set(
            &["dataschema"],
            json!("urn:cua-driver:schema:history-event:v1"),
        ),
        BothRefuse,
    );
    case(
        "type_unknown",
        set(&["type"], json!("cua-driver.history.screenshot.v0")),
        BothRefuse,
    );
    case(
        "platform_unknown",
        set(&["data", "platform"], json!("android")),
        BothRefuse,
    );
    case(
        "process_model_other",
        set(&["data", "process_model"], json!("in_app")),
        BothRefuse,
    );
    case(
        "caller_category_other",
        set(&["data", "caller_category"], json!("user")),
        BothRefuse,
    );
    case(
        "payload_kind_unknown",
        set(&["data", "payload", "kind"], json!("keystroke")),
        BothRefuse,
    );
    case(
        "effect_unknown",
        set(&["data", "payload", "effect"], json!("maybe")),
        BothRefuse,
    );
    case(
        "route_unknown",
        set(&["data", "payload", "route"], json!("telepathy")),
        BothRefuse,
    );
    case(
        "delivery_unknown",
        set(&["data", "payload", "delivery"], json!("sideways")),
        BothRefuse,
    );
    case(
        "evidence_kind_unknown",
        set(
            &["data", "payload", "evidence_kinds"],
            json!(["screenshot"]),
        ),
        BothRefuse,
    );
    case(
        "escalation_kind_unknown",
        set(&["data", "payload", "escalation_kind"], json!("reboot")),
        BothRefuse,
    );
    case(
        "enum_value_upper_case",
        set(&["data", "payload", "effect"], json!("Confirmed")),
        BothRefuse,
    );
    case(
        "control_operation_unknown",
        with_payload(
            "cua-driver.history.control.v0",
            json!({"kind": "control", "operation": "export"}),
        ),
        BothRefuse,
    );
    case(
        "access_operation_unknown",
        with_payload(
            "cua-driver.history.access.v0",
            json!({"kind": "access", "operation": "remote", "returned_events": 1}),
        ),
        BothRefuse,
    );
    case(
        "session_phase_unknown",
        with_payload(
            "cua-driver.history.session_started.v0",
            json!({"kind": "session", "phase": "paused"}),
        ),
        BothRefuse,
    );
    case(
        "health_category_unknown",
        with_payload(
            "cua-driver.history.health.v0",
            json!({"kind": "health", "category": "on_fire", "count": 1}),
        ),
        BothRefuse,
    );

    // Fields of one payload kind on another.
    case(
        "action_started_with_effect",
        with_payload(
            "cua-driver.history.action_started.v0",
            json!({"kind": "action_started", "effect": "confirmed"}),
        ),
        BothRefuse,
    );
    case(
        "access_with_phase",
        with_payload(
            "cua-driver.history.access.v0",
            json!({"kind": "access", "operation": "agent_query", "returned_events": 1, "phase": "started"}),
        ),
        BothRefuse,
    );
    case(
        "control_with_access_operation",
        with_payload(
            "cua-driver.history.control.v0",
            json!({"kind": "control", "operation": "agent_query"}),
        ),
        BothRefuse,
    );

    // Type and payload kind that disagree.
    case(
        "type_control_payload_action_completed",
        set(&["type"], json!("cua-driver.history.control.v0")),
        TYPE_PAYLOAD,
    );
    case(
        "type_session_started_phase_ended",
        with_payload(
            "cua-driver.history.session_started.v0",
            json!({"kind": "session", "phase": "ended"}),
        ),
        TYPE_PAYLOAD,
    );
    case(
        "type_session_ended_phase_started",
        with_payload(
            "cua-driver.history.session_ended.v0",
            json!({"kind": "session", "phase": "started"}),
        ),
        TYPE_PAYLOAD,
    );
    case(
        "type_health_payload_access",
        with_payload(
            "cua-driver.history.health.v0",
            json!({"kind": "access", "operation": "local_cli", "returned_events": 0}),
        ),
        TYPE_PAYLOAD,
    );

    // Numbers.
    case(
        "sequence_zero",
        set(&["data", "sequence"], json!(0)),
        BothRefuse,
    );
    case(
        "sequence_negative",
        set(&["data", "sequence"], json!(-1)),
        BothRefuse,
    );
    case(
        "sequence_string",
        set(&["data", "sequence"], json!("6")),
        BothRefuse,
    );
    case(
        "sequence_fraction",
        set(&["data", "sequence"], json!(6.5)),
        BothRefuse,
    );
    case(
        "sequence_written_as_float",
        set(&["data", "sequence"], json!(6.0)),
        INTEGER_AS_FLOAT,
    );
    case(
        "delivered_count_over_u32",
        set(
            &["data", "payload", "delivered_count"],
            json!(4_294_967_296u64),
        ),
        BothRefuse,
    );
    case(
        "delivered_count_negative",
        set(&["data", "payload", "delivered_count"], json!(-1)),
        BothRefuse,
    );
    case(
        "returned_events_201",
        with_payload(
            "cua-driver.history.access.v0",
            json!({"kind": "access", "operation": "agent_query", "returned_events": 201}),
        ),
        BothRefuse,
    );
    case(
        "health_count_negative",
        with_payload(
            "cua-driver.history.health.v0",
            json!({"kind": "health", "category": "events_dropped", "count": -3}),
        ),
        BothRefuse,
    );

    // Lengths.
    case("subject_empty", set(&["subject"], json!("")), BothRefuse);
    case(
        "subject_161_chars",
        set(&["subject"], json!("s".repeat(161))),
        BothRefuse,
    );
    case(
        "capability_empty",
        set(&["data", "capability"], json!("")),
        BothRefuse,
    );
    case(
        "capability_129_chars",
        set(&["data", "capability"], json!("c".repeat(129))),
        BothRefuse,
    );
    case(
        "bundle_id_161_chars",
        set(
            &["data", "application", "bundle_id"],
            json!("b".repeat(161)),
        ),
        BothRefuse,
    );
    case(
        "display_name_121_chars",
        set(
            &["data", "application", "display_name"],
            json!("d".repeat(121)),
        ),
        BothRefuse,
    );
    case(
        "display_name_empty",
        set(&["data", "application", "display_name"], json!("")),
        BothRefuse,
    );

    // Characters our types refuse beyond the published schema.
    case(
        "subject_control_char",
        set(&["subject"], json!("action/\u{0}x")),
        CHARSET,
    );
    case(
        "display_name_control_char",
        set(
            &["data", "application", "display_name"],
            json!("Term\u{1b}[31minal"),
        ),
        CHARSET,
    );
    case(
        "bundle_id_whitespace",
        set(
            &["data", "application", "bundle_id"],
            json!("org.example terminal"),
        ),
        CHARSET,
    );
    case(
        "capability_control_char",
        set(&["data", "capability"], json!("input.\u{7}click")),
        CHARSET,
    );
    case(
        "capability_url",
        set(&["data", "capability"], json!("https://example.com/secret")),
        CAPABILITY_CHARSET,
    );

    // Arrays and objects.
    case(
        "evidence_kinds_17",
        set(
            &["data", "payload", "evidence_kinds"],
            json!(vec!["window_change"; 17]),
        ),
        BothRefuse,
    );
    case(
        "evidence_kinds_not_array",
        set(
            &["data", "payload", "evidence_kinds"],
            json!("window_change"),
        ),
        BothRefuse,
    );
    case(
        "application_empty",
        set(&["data", "application"], json!({})),
        BothRefuse,
    );
    case(
        "application_string",
        set(&["data", "application"], json!("Terminal")),
        BothRefuse,
    );
    case("data_not_object", set(&["data"], json!([])), BothRefuse);
    case(
        "event_not_object",
        json!(["not", "an", "event"]),
        BothRefuse,
    );

    // Nulls where a value is optional.
    case(
        "session_id_null",
        set(&["data", "session_id"], Value::Null),
        BothRefuse,
    );
    case(
        "application_null",
        set(&["data", "application"], Value::Null),
        BothRefuse,
    );
    case(
        "delivery_null",
        set(&["data", "payload", "delivery"], Value::Null),
        BothRefuse,
    );
    case(
        "escalation_kind_null",
        set(&["data", "payload", "escalation_kind"], Value::Null),
        BothRefuse,
    );

    // Missing required fields.
    for field in [
        "specversion",
        "id",
        "source",
        "type",
        "subject",
        "time",
        "datacontenttype",
        "dataschema",
        "data",
    ] {
        case(&format!("missing_{field}"), remove(&[field]), BothRefuse);
    }
    for field in [
        "sequence",
        "platform",
        "process_model",
        "caller_category",
        "payload",
    ] {
        case(
            &format!("missing_data_{field}"),
            remove(&["data", field]),
            BothRefuse,
        );
    }
    for field in ["kind", "effect", "route", "evidence_kinds"] {
        case(
            &format!("missing_payload_{field}"),
            remove(&["data", "payload", field]),
            BothRefuse,
        );
    }
    case(
        "control_missing_operation",
        with_payload("cua-driver.history.control.v0", json!({"kind": "control"})),
        BothRefuse,
    );
    case(
        "health_missing_count",
        with_payload(
            "cua-driver.history.health.v0",
            json!({"kind": "health", "category": "ready"}),
        ),
        BothRefuse,
    );

    // Time.
    case(
        "time_unparseable",
        set(&["time"], json!("yesterday afternoon")),
        BothRefuse,
    );
    case(
        "time_impossible_date",
        set(&["time"], json!("2026-02-30T10:00:00Z")),
        BothRefuse,
    );
    case(
        "time_no_offset",
        set(&["time"], json!("2026-11-30T22:14:03")),
        BothRefuse,
    );
    case(
        "time_number",
        set(&["time"], json!(1_796_076_843)),
        BothRefuse,
    );
    case(
        "time_with_offset",
        set(&["time"], json!("2026-11-30T23:14:03+01:00")),
        UTC_ONLY,
    );

    cases
}

#[test]
fn base_event_is_accepted_by_both() {
    let schema = common::event_schema();
    assert!(schema.is_valid(&base()));
    assert!(Event::from_json_value(base()).is_ok());
}

#[test]
fn every_negative_case_gets_its_stated_verdict_from_both_sides() {
    let schema = common::event_schema();
    let mut failures = Vec::new();
    let cases = corpus();
    assert!(cases.len() > 150, "the corpus shrank to {}", cases.len());
    for (name, value, verdict) in &cases {
        let ours_refuses = Event::from_json_value(value.clone()).is_err();
        let schema_refuses = !schema.is_valid(value);
        let expected_schema_refuses = matches!(verdict, Verdict::BothRefuse);
        if !ours_refuses {
            failures.push(format!("{name}: our types ACCEPTED it"));
        }
        if schema_refuses != expected_schema_refuses {
            failures.push(format!(
                "{name}: JSON Schema refuses={schema_refuses}, expected {verdict:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "disagreements:\n{}",
        failures.join("\n")
    );
}

#[test]
fn case_names_are_unique() {
    let mut names: Vec<String> = corpus().into_iter().map(|(n, _, _)| n).collect();
    let before = names.len();
    names.sort();
    names.dedup();
    assert_eq!(before, names.len());
}

#[test]
fn refusal_messages_never_echo_the_refused_value() {
    for (name, value, _) in corpus() {
        if let Err(error) = Event::from_json_value(value) {
            let shown = format!("{error} {error:?}");
            assert!(!shown.contains("planted-secret-value"), "{name}: {shown}");
        }
    }
}
