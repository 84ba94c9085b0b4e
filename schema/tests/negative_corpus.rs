//! The named read corpus: events mutated from a valid base, each with the verdict it must get.
//!
//! Every case states two things: its read verdict (does deserialization accept it?) and, when
//! it is read, whether it passes annal's write rules (`Event::check_write_rules`). The read
//! verdict must agree with the published JSON Schema except in the few places annal is
//! deliberately stricter, each named by a [`Stricter`] reason and documented in
//! `docs/event-contract.md`. The test fails if our types, the JSON Schema or the write rules
//! ever give a case a different verdict, and `flipping_any_verdict_fails_the_check` proves the
//! check itself can fail: every other verdict for every case is reported as a disagreement.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use annal_schema::privacy::PROHIBITED_FIELD_NAMES;
use annal_schema::{Event, WriteRuleViolation};
use serde_json::{Value, json};

/// Why annal refuses on read something the published schema accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stricter {
    /// The type/payload agreement check.
    TypePayload,
    /// The reference's rule for application names.
    ReferenceName,
    /// A time before the Unix epoch.
    PreEpoch,
    /// An integer beyond `u64`.
    BeyondU64,
}

impl Stricter {
    /// The documented reason, kept here so the corpus reads as the list of exceptions.
    const fn reason(self) -> &'static str {
        match self {
            Self::TypePayload => {
                "the schema's payload oneOf is independent of `type`; our payload implies the \
                 type, and the reference never writes a mismatched pair"
            }
            Self::ReferenceName => {
                "the reference trims application names and keeps them on one line; the schema \
                 bounds only their length"
            }
            Self::PreEpoch => {
                "since_epoch is unsigned, and no history event predates the Unix epoch"
            }
            Self::BeyondU64 => {
                "the schema sets no maximum on sequence and count; annal counts in u64"
            }
        }
    }
}

/// What a case must get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Read: our types and the JSON Schema both refuse it (so it is never written either).
    Refused,
    /// Read: our types refuse it although the JSON Schema accepts it, for the stated reason.
    RefusedByAnnalOnly(Stricter),
    /// Read: both accept it, and it passes annal's write rules.
    Accepted,
    /// Read: both accept it, but it breaks annal's write rule on this field.
    AcceptedBreaksWriteRule(WriteRuleViolation),
}

use Verdict::{Accepted, AcceptedBreaksWriteRule as Breaks, Refused, RefusedByAnnalOnly};

const TYPE_PAYLOAD: Verdict = RefusedByAnnalOnly(Stricter::TypePayload);
const REFERENCE_NAME: Verdict = RefusedByAnnalOnly(Stricter::ReferenceName);
const PRE_EPOCH: Verdict = RefusedByAnnalOnly(Stricter::PreEpoch);
const BEYOND_U64: Verdict = RefusedByAnnalOnly(Stricter::BeyondU64);

/// What our types and the schema actually did with a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Observed {
    /// `None` when our types refused it; otherwise the write-rule check's result.
    ours: Option<Result<(), WriteRuleViolation>>,
    schema_accepts: bool,
}

fn observe(schema: &jsonschema::Validator, value: &Value) -> Observed {
    Observed {
        ours: Event::from_json_value(value.clone())
            .ok()
            .map(|event| event.check_write_rules()),
        schema_accepts: schema.is_valid(value),
    }
}

/// How `observed` differs from `verdict`; empty when they agree.
fn disagreements(verdict: Verdict, observed: Observed) -> Vec<String> {
    let (want_ours, want_schema_accepts) = match verdict {
        Refused => (None, false),
        RefusedByAnnalOnly(_) => (None, true),
        Accepted => (Some(Ok(())), true),
        Breaks(field) => (Some(Err(field)), true),
    };
    let mut out = Vec::new();
    if observed.ours != want_ours {
        out.push(format!("ours: got {:?}, want {want_ours:?}", observed.ours));
    }
    if observed.schema_accepts != want_schema_accepts {
        out.push(format!(
            "JSON Schema accepts: got {}, want {want_schema_accepts}",
            observed.schema_accepts
        ));
    }
    out
}

/// Every verdict a case could state, one per observable outcome.
fn every_verdict() -> Vec<Verdict> {
    let mut all = vec![Refused, TYPE_PAYLOAD, Accepted];
    for field in [
        WriteRuleViolation::Subject,
        WriteRuleViolation::Time,
        WriteRuleViolation::Capability,
        WriteRuleViolation::BundleId,
        WriteRuleViolation::DisplayName,
    ] {
        all.push(Breaks(field));
    }
    all
}

/// Verdicts that differ only in their documented reason are the same observable outcome.
fn same_outcome(a: Verdict, b: Verdict) -> bool {
    match (a, b) {
        (RefusedByAnnalOnly(_), RefusedByAnnalOnly(_)) => true,
        _ => a == b,
    }
}

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
    let mut cases: Vec<(String, Value, Verdict)> = Vec::new();
    let mut case = |name: &str, value: Value, verdict: Verdict| {
        cases.push((name.to_owned(), value, verdict));
    };

    // Unknown fields and every prohibited field name, at each level.
    for (level_name, level) in LEVELS {
        case(
            &format!("unknown_field_at_{level_name}"),
            add_field(level, "extra", json!(1)),
            Refused,
        );
        for field in PROHIBITED_FIELD_NAMES {
            case(
                &format!("prohibited_{field}_at_{level_name}"),
                add_field(level, field, json!("planted-secret-value")),
                Refused,
            );
        }
    }

    // Identifiers.
    case(
        "id_upper_case",
        set(&["id"], json!("45D6CA1E8AD900F3C985CF8ADA86F530")),
        Refused,
    );
    case(
        "id_short",
        set(&["id"], json!("45d6ca1e8ad900f3c985cf8ada86f53")),
        Refused,
    );
    case(
        "id_long",
        set(&["id"], json!("45d6ca1e8ad900f3c985cf8ada86f5300")),
        Refused,
    );
    case(
        "id_not_hex",
        set(&["id"], json!("45d6ca1e8ad900f3c985cf8ada86f53g")),
        Refused,
    );
    case(
        "id_control_char",
        set(&["id"], json!("45d6ca1e8ad900f3c985cf8ada86f5\n0")),
        Refused,
    );
    case("id_number", set(&["id"], json!(12345)), Refused);
    case(
        "session_id_upper_case",
        set(
            &["data", "session_id"],
            json!("B11DDCE8DBD1872C9250E3F67DAD2D9D"),
        ),
        Refused,
    );
    case(
        "session_id_raw_label",
        set(&["data", "session_id"], json!("fixture-session-1")),
        Refused,
    );
    case(
        "action_id_short",
        set(&["data", "action_id"], json!("c59b2bd6")),
        Refused,
    );
    case(
        "source_upper_case",
        set(
            &["source"],
            json!("urn:cua-driver:history:6DD3AA1EEF99854A9A3D39BA1E2315F1"),
        ),
        Refused,
    );
    case(
        "source_wrong_prefix",
        set(
            &["source"],
            json!("urn:other:history:6dd3aa1eef99854a9a3d39ba1e2315f1"),
        ),
        Refused,
    );
    case(
        "source_short_stream",
        set(&["source"], json!("urn:cua-driver:history:6dd3aa1e")),
        Refused,
    );

    // Constants and enumerations.
    case(
        "specversion_other",
        set(&["specversion"], json!("0.3")),
        Refused,
    );
    case(
        "datacontenttype_other",
        set(&["datacontenttype"], json!("text/plain")),
        Refused,
    );
    case(
        "dataschema_other",
        set(
            &["dataschema"],
            json!("urn:cua-driver:schema:history-event:v1"),
        ),
        Refused,
    );
    case(
        "type_unknown",
        set(&["type"], json!("cua-driver.history.screenshot.v0")),
        Refused,
    );
    case(
        "platform_unknown",
        set(&["data", "platform"], json!("android")),
        Refused,
    );
    case(
        "process_model_other",
        set(&["data", "process_model"], json!("in_app")),
        Refused,
    );
    case(
        "caller_category_other",
        set(&["data", "caller_category"], json!("user")),
        Refused,
    );
    case(
        "payload_kind_unknown",
        set(&["data", "payload", "kind"], json!("keystroke")),
        Refused,
    );
    case(
        "effect_unknown",
        set(&["data", "payload", "effect"], json!("maybe")),
        Refused,
    );
    case(
        "route_unknown",
        set(&["data", "payload", "route"], json!("telepathy")),
        Refused,
    );
    case(
        "delivery_unknown",
        set(&["data", "payload", "delivery"], json!("sideways")),
        Refused,
    );
    case(
        "evidence_kind_unknown",
        set(
            &["data", "payload", "evidence_kinds"],
            json!(["screenshot"]),
        ),
        Refused,
    );
    case(
        "escalation_kind_unknown",
        set(&["data", "payload", "escalation_kind"], json!("reboot")),
        Refused,
    );
    case(
        "enum_value_upper_case",
        set(&["data", "payload", "effect"], json!("Confirmed")),
        Refused,
    );
    case(
        "control_operation_unknown",
        with_payload(
            "cua-driver.history.control.v0",
            json!({"kind": "control", "operation": "export"}),
        ),
        Refused,
    );
    case(
        "access_operation_unknown",
        with_payload(
            "cua-driver.history.access.v0",
            json!({"kind": "access", "operation": "remote", "returned_events": 1}),
        ),
        Refused,
    );
    case(
        "session_phase_unknown",
        with_payload(
            "cua-driver.history.session_started.v0",
            json!({"kind": "session", "phase": "paused"}),
        ),
        Refused,
    );
    case(
        "health_category_unknown",
        with_payload(
            "cua-driver.history.health.v0",
            json!({"kind": "health", "category": "on_fire", "count": 1}),
        ),
        Refused,
    );

    // Fields of one payload kind on another.
    case(
        "action_started_with_effect",
        with_payload(
            "cua-driver.history.action_started.v0",
            json!({"kind": "action_started", "effect": "confirmed"}),
        ),
        Refused,
    );
    case(
        "access_with_phase",
        with_payload(
            "cua-driver.history.access.v0",
            json!({"kind": "access", "operation": "agent_query", "returned_events": 1, "phase": "started"}),
        ),
        Refused,
    );
    case(
        "access_with_control_operation",
        with_payload(
            "cua-driver.history.access.v0",
            json!({"kind": "access", "operation": "delete", "returned_events": 1}),
        ),
        Refused,
    );
    case(
        "control_operation_number",
        with_payload(
            "cua-driver.history.control.v0",
            json!({"kind": "control", "operation": 1}),
        ),
        Refused,
    );
    case(
        "control_with_access_operation",
        with_payload(
            "cua-driver.history.control.v0",
            json!({"kind": "control", "operation": "agent_query"}),
        ),
        Refused,
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
        Refused,
    );
    case(
        "sequence_negative",
        set(&["data", "sequence"], json!(-1)),
        Refused,
    );
    case(
        "sequence_string",
        set(&["data", "sequence"], json!("6")),
        Refused,
    );
    case(
        "sequence_fraction",
        set(&["data", "sequence"], json!(6.5)),
        Refused,
    );
    case(
        "sequence_written_as_float",
        set(&["data", "sequence"], json!(6.0)),
        Accepted,
    );
    case(
        "sequence_one_written_as_float",
        set(&["data", "sequence"], json!(1.0)),
        Accepted,
    );
    case(
        "sequence_one_and_a_half",
        set(&["data", "sequence"], json!(1.5)),
        Refused,
    );
    case(
        "sequence_zero_written_as_float",
        set(&["data", "sequence"], json!(0.0)),
        Refused,
    );
    case(
        "sequence_u64_max",
        set(&["data", "sequence"], json!(u64::MAX)),
        Accepted,
    );
    case(
        "sequence_largest_float_below_2_pow_64",
        set(&["data", "sequence"], json!(18_446_744_073_709_549_568.0)),
        Accepted,
    );
    case(
        "sequence_2_pow_64_as_float",
        set(&["data", "sequence"], json!(18_446_744_073_709_551_616.0)),
        BEYOND_U64,
    );
    case(
        "sequence_above_u64",
        set(
            &["data", "sequence"],
            serde_json::from_str("100000000000000000000").unwrap(),
        ),
        BEYOND_U64,
    );
    case(
        "delivered_count_written_as_float",
        set(&["data", "payload", "delivered_count"], json!(3.0)),
        Accepted,
    );
    case(
        "delivered_count_fraction",
        set(&["data", "payload", "delivered_count"], json!(3.25)),
        Refused,
    );
    case(
        "delivered_count_u32_max_as_float",
        set(
            &["data", "payload", "delivered_count"],
            json!(4_294_967_295.0),
        ),
        Accepted,
    );
    case(
        "delivered_count_over_u32_as_float",
        set(
            &["data", "payload", "delivered_count"],
            json!(4_294_967_296.0),
        ),
        Refused,
    );
    case(
        "returned_events_written_as_float",
        with_payload(
            "cua-driver.history.access.v0",
            json!({"kind": "access", "operation": "agent_query", "returned_events": 200.0}),
        ),
        Accepted,
    );
    case(
        "returned_events_fraction",
        with_payload(
            "cua-driver.history.access.v0",
            json!({"kind": "access", "operation": "agent_query", "returned_events": 2.5}),
        ),
        Refused,
    );
    case(
        "returned_events_201_as_float",
        with_payload(
            "cua-driver.history.access.v0",
            json!({"kind": "access", "operation": "agent_query", "returned_events": 201.0}),
        ),
        Refused,
    );
    case(
        "health_count_written_as_float",
        with_payload(
            "cua-driver.history.health.v0",
            json!({"kind": "health", "category": "events_dropped", "count": 12.0}),
        ),
        Accepted,
    );
    case(
        "health_count_exponent",
        with_payload(
            "cua-driver.history.health.v0",
            json!({"kind": "health", "category": "events_dropped", "count": 1.2e1}),
        ),
        Accepted,
    );
    case(
        "health_count_negative_zero",
        with_payload(
            "cua-driver.history.health.v0",
            json!({"kind": "health", "category": "events_dropped", "count": -0.0}),
        ),
        Accepted,
    );
    case(
        "health_count_fraction",
        with_payload(
            "cua-driver.history.health.v0",
            json!({"kind": "health", "category": "events_dropped", "count": 0.5}),
        ),
        Refused,
    );
    case(
        "health_count_negative_float",
        with_payload(
            "cua-driver.history.health.v0",
            json!({"kind": "health", "category": "events_dropped", "count": -1.0}),
        ),
        Refused,
    );
    case(
        "health_count_above_u64",
        with_payload(
            "cua-driver.history.health.v0",
            json!({"kind": "health", "category": "events_dropped", "count": 1e20}),
        ),
        BEYOND_U64,
    );
    case(
        "delivered_count_over_u32",
        set(
            &["data", "payload", "delivered_count"],
            json!(4_294_967_296u64),
        ),
        Refused,
    );
    case(
        "delivered_count_negative",
        set(&["data", "payload", "delivered_count"], json!(-1)),
        Refused,
    );
    case(
        "returned_events_201",
        with_payload(
            "cua-driver.history.access.v0",
            json!({"kind": "access", "operation": "agent_query", "returned_events": 201}),
        ),
        Refused,
    );
    case(
        "health_count_negative",
        with_payload(
            "cua-driver.history.health.v0",
            json!({"kind": "health", "category": "events_dropped", "count": -3}),
        ),
        Refused,
    );

    // Lengths.
    case("subject_empty", set(&["subject"], json!("")), Refused);
    case(
        "subject_161_chars",
        set(&["subject"], json!("s".repeat(161))),
        Refused,
    );
    case(
        "capability_empty",
        set(&["data", "capability"], json!("")),
        Refused,
    );
    case(
        "capability_129_chars",
        set(&["data", "capability"], json!("c".repeat(129))),
        Refused,
    );
    case(
        "bundle_id_161_chars",
        set(
            &["data", "application", "bundle_id"],
            json!("b".repeat(161)),
        ),
        Refused,
    );
    case(
        "display_name_121_chars",
        set(
            &["data", "application", "display_name"],
            json!("d".repeat(121)),
        ),
        Refused,
    );
    case(
        "display_name_empty",
        set(&["data", "application", "display_name"], json!("")),
        Refused,
    );

    // Characters: read as the schema allows, but outside annal's write rules.
    case(
        "subject_control_char",
        set(&["subject"], json!("action/\u{0}x")),
        Breaks(WriteRuleViolation::Subject),
    );
    case(
        "display_name_control_char",
        set(
            &["data", "application", "display_name"],
            json!("Term\u{1b}[31minal"),
        ),
        Breaks(WriteRuleViolation::DisplayName),
    );
    case(
        "display_name_inner_tab",
        set(
            &["data", "application", "display_name"],
            json!("Text\tEditor"),
        ),
        Breaks(WriteRuleViolation::DisplayName),
    );
    case(
        "bundle_id_whitespace",
        set(
            &["data", "application", "bundle_id"],
            json!("org.example terminal"),
        ),
        Breaks(WriteRuleViolation::BundleId),
    );
    case(
        "capability_control_char",
        set(&["data", "capability"], json!("input.\u{7}click")),
        Breaks(WriteRuleViolation::Capability),
    );
    case(
        "capability_url",
        set(&["data", "capability"], json!("https://example.com/secret")),
        Breaks(WriteRuleViolation::Capability),
    );

    // Reference-shaped records: what the reference writes on Linux and Windows.
    case(
        "bundle_id_linux_process_name",
        set(&["data", "application", "bundle_id"], json!("Web Content")),
        Breaks(WriteRuleViolation::BundleId),
    );
    case(
        "bundle_id_windows_executable",
        set(
            &["data", "application", "bundle_id"],
            json!("Code - Insiders.exe"),
        ),
        Breaks(WriteRuleViolation::BundleId),
    );
    case(
        "capability_upper_case",
        set(&["data", "capability"], json!("Input.keyboard.type")),
        Breaks(WriteRuleViolation::Capability),
    );
    case(
        "capability_space",
        set(&["data", "capability"], json!("input keyboard type")),
        Breaks(WriteRuleViolation::Capability),
    );
    case(
        "capability_starts_with_digit",
        set(&["data", "capability"], json!("2fa.prompt")),
        Breaks(WriteRuleViolation::Capability),
    );
    case(
        "display_name_non_ascii",
        set(
            &["data", "application", "display_name"],
            json!("Éditeur de texte"),
        ),
        Accepted,
    );
    case(
        "bundle_id_160_chars",
        set(
            &["data", "application", "bundle_id"],
            json!("b".repeat(160)),
        ),
        Accepted,
    );
    case(
        "bundle_id_160_chars_with_spaces",
        set(
            &["data", "application", "bundle_id"],
            json!("b c".repeat(53) + "d"),
        ),
        Breaks(WriteRuleViolation::BundleId),
    );
    case(
        "display_name_120_chars",
        set(
            &["data", "application", "display_name"],
            json!("é".repeat(120)),
        ),
        Accepted,
    );
    case(
        "capability_128_chars",
        set(&["data", "capability"], json!("c".repeat(128))),
        Accepted,
    );
    case(
        "capability_128_chars_upper_case",
        set(&["data", "capability"], json!("C".repeat(128))),
        Breaks(WriteRuleViolation::Capability),
    );

    // Identity fields holding what seed 000 forbids (URLs, file paths, query strings, window
    // titles): read, as the reference may have written them, but never written by annal
    // (docs/event-contract.md, "Identity fields"). Each planted through both fields.
    for (shape, value) in [
        ("url", "https://evil.example/inbox?tok=1"),
        ("custom_scheme_url", "vscode://file/notes"),
        ("url_in_text", "Open https://evil.example"),
        ("absolute_path", "/home/alice/secret.txt"),
        ("absolute_path_in_text", "Editing /home/alice/secret.txt"),
        ("home_path", "~/secret.txt"),
        ("relative_path", "Documents/salaries.xlsx"),
        ("windows_drive_backslash", "C:\\Users\\alice\\secret.txt"),
        ("windows_drive_slash", "C:/Users/alice/secret.txt"),
        ("unc_path", "\\\\server\\share\\secret.txt"),
        ("query_string", "inbox?tok=1"),
        ("query_string_in_text", "Search results?q=salary"),
        ("window_title_hyphen", "Invoice - Inbox - Gmail"),
        ("window_title_two_parts", "secret.txt - Notepad"),
        ("window_title_en_dash", "Quarterly plan \u{2013} Docs"),
        (
            "window_title_em_dash",
            "Quarterly plan \u{2014} Mozilla Firefox",
        ),
        ("window_title_bar", "Inbox (3) | Mail"),
        ("window_title_middle_dot", "general \u{b7} Chat"),
        ("window_title_bullet", "Inbox \u{2022} Mail"),
        // The line for real names with a separator (documented): a display name is the
        // application's name alone, so one that reads like a title is not written.
        ("windows_executable_with_separator", "Code - Insiders.exe"),
        ("name_with_separator", "Code - Insiders"),
    ] {
        case(
            &format!("display_name_{shape}"),
            set(&["data", "application", "display_name"], json!(value)),
            Breaks(WriteRuleViolation::DisplayName),
        );
        case(
            &format!("bundle_id_{shape}"),
            set(&["data", "application", "bundle_id"], json!(value)),
            Breaks(WriteRuleViolation::BundleId),
        );
    }
    // Real application names the identity rules must keep accepting.
    for (shape, bundle_id) in [
        ("reverse_dns", "com.microsoft.VSCodeInsiders"),
        (
            "windows_aumid",
            "Microsoft.WindowsTerminal_8wekyb3d8bbwe!App",
        ),
        ("windows_executable", "Code-Insiders.exe"),
        ("linux_desktop_id", "org.gnome.Nautilus.desktop"),
        ("snap_desktop_id", "firefox_firefox.desktop"),
        ("question_mark", "com.example.What?"),
        ("colon", "com.example:helper"),
    ] {
        case(
            &format!("bundle_id_real_{shape}"),
            set(&["data", "application", "bundle_id"], json!(bundle_id)),
            Accepted,
        );
    }
    for (shape, name) in [
        ("two_words", "Visual Studio Code"),
        ("inner_hyphen", "Wi-Fi Settings"),
        ("plus_signs", "Notepad++"),
        ("parenthesis", "Microsoft Teams (work or school)"),
        ("question", "Who Wants to Be a Millionaire?"),
        ("ampersand_equals", "Q&A = Answers"),
        ("trailing_hyphen", "Tools -"),
        ("leading_hyphen", "- Tools"),
        ("colon", "Zoom: Meetings"),
        ("tilde", "~Tilde Player"),
        ("non_ascii", "Éditeur de texte"),
        ("cjk", "メモ帳"),
    ] {
        case(
            &format!("display_name_real_{shape}"),
            set(&["data", "application", "display_name"], json!(name)),
            Accepted,
        );
    }

    // Application names the reference itself would never write: padded or multi-line.
    for (field, good) in [
        ("bundle_id", "org.example.terminal"),
        ("display_name", "Terminal"),
    ] {
        let path = ["data", "application", field];
        case(
            &format!("{field}_leading_space"),
            set(&path, json!(format!(" {good}"))),
            REFERENCE_NAME,
        );
        case(
            &format!("{field}_trailing_space"),
            set(&path, json!(format!("{good} "))),
            REFERENCE_NAME,
        );
        case(
            &format!("{field}_trailing_tab"),
            set(&path, json!(format!("{good}\t"))),
            REFERENCE_NAME,
        );
        case(
            &format!("{field}_leading_no_break_space"),
            set(&path, json!(format!("\u{a0}{good}"))),
            REFERENCE_NAME,
        );
        case(
            &format!("{field}_line_feed"),
            set(&path, json!(format!("{good}\nsecond line"))),
            REFERENCE_NAME,
        );
        case(
            &format!("{field}_carriage_return"),
            set(&path, json!(format!("{good}\rsecond line"))),
            REFERENCE_NAME,
        );
        case(
            &format!("{field}_only_space"),
            set(&path, json!(" ")),
            REFERENCE_NAME,
        );
    }
    case(
        "bundle_id_161_chars_trimmed",
        set(
            &["data", "application", "bundle_id"],
            json!("Web Content ".repeat(13) + "Web C"),
        ),
        Refused,
    );

    // Arrays and objects.
    case(
        "evidence_kinds_17",
        set(
            &["data", "payload", "evidence_kinds"],
            json!(vec!["window_change"; 17]),
        ),
        Refused,
    );
    case(
        "evidence_kinds_not_array",
        set(
            &["data", "payload", "evidence_kinds"],
            json!("window_change"),
        ),
        Refused,
    );
    case(
        "application_empty",
        set(&["data", "application"], json!({})),
        Refused,
    );
    case(
        "application_string",
        set(&["data", "application"], json!("Terminal")),
        Refused,
    );
    case("data_not_object", set(&["data"], json!([])), Refused);
    case("event_not_object", json!(["not", "an", "event"]), Refused);

    // Nulls where a value is optional.
    case(
        "session_id_null",
        set(&["data", "session_id"], Value::Null),
        Refused,
    );
    case(
        "application_null",
        set(&["data", "application"], Value::Null),
        Refused,
    );
    case(
        "delivery_null",
        set(&["data", "payload", "delivery"], Value::Null),
        Refused,
    );
    case(
        "escalation_kind_null",
        set(&["data", "payload", "escalation_kind"], Value::Null),
        Refused,
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
        case(&format!("missing_{field}"), remove(&[field]), Refused);
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
            Refused,
        );
    }
    for field in ["kind", "effect", "route", "evidence_kinds"] {
        case(
            &format!("missing_payload_{field}"),
            remove(&["data", "payload", field]),
            Refused,
        );
    }
    case(
        "control_missing_operation",
        with_payload("cua-driver.history.control.v0", json!({"kind": "control"})),
        Refused,
    );
    case(
        "health_missing_count",
        with_payload(
            "cua-driver.history.health.v0",
            json!({"kind": "health", "category": "ready"}),
        ),
        Refused,
    );

    // Time.
    case(
        "time_unparseable",
        set(&["time"], json!("yesterday afternoon")),
        Refused,
    );
    case(
        "time_impossible_date",
        set(&["time"], json!("2026-02-30T10:00:00Z")),
        Refused,
    );
    case(
        "time_no_offset",
        set(&["time"], json!("2026-11-30T22:14:03")),
        Refused,
    );
    case("time_number", set(&["time"], json!(1_796_076_843)), Refused);
    // Any RFC 3339 date-time is read; annal writes only `YYYY-MM-DDTHH:MM:SS[.f]Z`.
    for (name, text) in [
        ("time_with_offset", "2026-11-30T23:14:03+01:00"),
        ("time_plus_two_hours", "2026-12-01T00:14:03.769293727+02:00"),
        (
            "time_minus_five_thirty",
            "2026-11-30T16:44:03.769293727-05:30",
        ),
        ("time_minus_zero", "2026-11-30T22:14:03-00:00"),
        ("time_lower_case_z", "2026-11-30T22:14:03.769293727z"),
        ("time_lower_case_t", "2026-11-30t22:14:03.769293727Z"),
        (
            "time_ten_fraction_digits",
            "2026-11-30T22:14:03.7692937271Z",
        ),
        ("time_leap_second", "2026-12-31T23:59:60Z"),
        ("time_leap_second_with_offset", "2027-01-01T00:59:60+01:00"),
        ("time_year_2501", "2501-01-01T00:00:00Z"),
        ("time_year_9999", "9999-12-31T23:59:59Z"),
        (
            "time_before_1970_with_offset_after",
            "1969-12-31T23:30:00-01:00",
        ),
    ] {
        case(
            name,
            set(&["time"], json!(text)),
            Breaks(WriteRuleViolation::Time),
        );
    }
    for (name, text) in [
        ("time_whole_second", "2026-11-30T22:14:03Z"),
        ("time_trailing_zero_fraction", "2026-11-30T22:14:03.500Z"),
        ("time_epoch", "1970-01-01T00:00:00Z"),
        ("time_year_2500", "2500-12-31T23:59:59.999999999Z"),
    ] {
        case(name, set(&["time"], json!(text)), Accepted);
    }
    for (name, text) in [
        ("time_space_separator", "2026-11-30 22:14:03Z"),
        ("time_empty_fraction", "2026-11-30T22:14:03.Z"),
        ("time_offset_without_colon", "2026-11-30T22:14:03+0100"),
        ("time_offset_hour_24", "2026-11-30T22:14:03+24:00"),
        ("time_offset_minute_60", "2026-11-30T22:14:03+01:60"),
        ("time_z_and_offset", "2026-11-30T22:14:03Z+01:00"),
        ("time_hour_24", "2026-11-30T24:00:00Z"),
        ("time_second_61", "2026-11-30T22:14:61Z"),
        ("time_leap_second_mid_day", "2026-11-30T22:14:60Z"),
        (
            "time_leap_second_local_end_of_day",
            "2026-12-31T23:59:60+01:00",
        ),
        ("time_two_digit_year", "26-11-30T22:14:03Z"),
        ("time_trailing_space", "2026-11-30T22:14:03Z "),
    ] {
        case(name, set(&["time"], json!(text)), Refused);
    }
    for (name, text) in [
        ("time_before_1970", "1969-12-31T23:59:59Z"),
        ("time_before_1970_by_offset", "1970-01-01T00:30:00+01:00"),
        ("time_year_0000", "0000-01-01T00:00:00Z"),
    ] {
        case(name, set(&["time"], json!(text)), PRE_EPOCH);
    }

    cases
}

#[test]
fn base_event_is_accepted_by_both_and_passes_the_write_rules() {
    let schema = common::event_schema();
    assert_eq!(
        disagreements(Accepted, observe(&schema, &base())),
        Vec::<String>::new()
    );
}

#[test]
fn every_case_gets_its_stated_verdict() {
    let schema = common::event_schema();
    let mut failures = Vec::new();
    let cases = corpus();
    assert!(cases.len() > 200, "the corpus shrank to {}", cases.len());
    for (name, value, verdict) in &cases {
        for problem in disagreements(*verdict, observe(&schema, value)) {
            let why = match verdict {
                RefusedByAnnalOnly(stricter) => format!(" because {}", stricter.reason()),
                _ => String::new(),
            };
            failures.push(format!("{name} ({verdict:?}{why}): {problem}"));
        }
    }
    assert!(
        failures.is_empty(),
        "disagreements:\n{}",
        failures.join("\n")
    );
}

/// The check above could silently pass if it compared nothing: here every case, given any
/// verdict other than its own, must be reported.
#[test]
fn flipping_any_verdict_fails_the_check() {
    let schema = common::event_schema();
    for (name, value, verdict) in corpus() {
        let observed = observe(&schema, &value);
        for other in every_verdict() {
            if same_outcome(other, verdict) {
                continue;
            }
            assert!(
                !disagreements(other, observed).is_empty(),
                "{name}: stating {other:?} instead of {verdict:?} would not fail"
            );
        }
    }
}

#[test]
fn the_corpus_covers_every_verdict() {
    let cases = corpus();
    for verdict in every_verdict() {
        assert!(
            cases.iter().any(|(_, _, v)| same_outcome(*v, verdict)),
            "no case states {verdict:?}"
        );
    }
    for stricter in [
        Stricter::TypePayload,
        Stricter::ReferenceName,
        Stricter::PreEpoch,
        Stricter::BeyondU64,
    ] {
        assert!(
            cases
                .iter()
                .any(|(_, _, v)| *v == RefusedByAnnalOnly(stricter)),
            "no case for {stricter:?}"
        );
    }
}

/// What annal reads it can write back: an accepted case re-serializes to JSON the schema accepts
/// and that reads back to the same event (a `6.0` comes back as `6`).
#[test]
fn every_accepted_case_re_serializes_to_a_schema_valid_event() {
    let schema = common::event_schema();
    for (name, value, verdict) in corpus() {
        if !matches!(verdict, Accepted | Breaks(_)) {
            continue;
        }
        let event = Event::from_json_value(value).unwrap();
        let bytes = event.to_json_vec();
        let again: Value = serde_json::from_slice(&bytes).unwrap();
        assert!(schema.is_valid(&again), "{name}");
        assert_eq!(Event::from_json_slice(&bytes).unwrap(), event, "{name}");
    }
}

/// The JSON Schema sees only the parsed value, so a duplicate key is invisible to it; our
/// reader refuses it rather than pick one of the two values.
#[test]
fn duplicate_keys_are_refused() {
    let text = String::from_utf8(Event::from_json_value(base()).unwrap().to_json_vec()).unwrap();
    assert!(Event::from_json_slice(text.as_bytes()).is_ok());
    for (key, again) in [
        ("\"subject\":", "\"subject\":\"control\","),
        ("\"sequence\":", "\"sequence\":7,"),
        ("\"bundle_id\":", "\"bundle_id\":\"x\","),
        ("\"effect\":", "\"effect\":\"confirmed\","),
    ] {
        let doubled = text.replacen(key, &format!("{again}{key}"), 1);
        assert_ne!(doubled, text);
        assert!(Event::from_json_slice(doubled.as_bytes()).is_err(), "{key}");
    }
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
        match Event::from_json_value(value) {
            Err(error) => {
                let shown = format!("{error} {error:?}");
                assert!(!shown.contains("planted-secret-value"), "{name}: {shown}");
            }
            Ok(event) => {
                if let Err(violation) = event.check_write_rules() {
                    let shown = format!("{violation} {violation:?}");
                    for secret in [
                        "Web Content",
                        "Insiders",
                        "example",
                        "Term",
                        "Input",
                        "alice",
                        "Inbox",
                        "tok=",
                        "salar",
                    ] {
                        assert!(!shown.contains(secret), "{name}: {shown}");
                    }
                }
            }
        }
    }
}
