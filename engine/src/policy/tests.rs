//! The decision table, the manifest table and the cursor refusals.

use annal_schema::tools::QueryRequest;
use serde_json::json;

use super::cursor::{CURSOR_LEN_CHARS, CURSOR_TTL_SECS, CursorBook, CursorKey};
use super::manifest::{Manifest, ManifestError, parse_duration_secs};
use super::*;
use crate::entropy::SeededEntropy;
use crate::keys::RootKey;

const T0: u64 = 1_000_000;
const HOUR_MS: u64 = 3_600_000;

fn actor(name: &str) -> ActorId {
    ActorId::new(name).unwrap()
}

fn agent(name: &str) -> Principal {
    Principal::Agent(actor(name))
}

const ADMITTED: Admission = Admission {
    admitted: true,
    unrestricted: false,
};

/// A policy after `events`.
fn policy(events: &[PolicyEvent]) -> PolicyState {
    let mut state = PolicyState::default();
    for event in events {
        state.apply(event);
    }
    state
}

/// A one-hour grant, idle 10 minutes, issued at T0.
fn granted(name: &str, operation: Operation, source: GrantSource) -> PolicyEvent {
    PolicyState::grant_event(&actor(name), operation, source, GrantTerms::DEFAULT, T0)
}

fn used(name: &str, operation: Operation, at_ms: u64, audit: u64) -> PolicyEvent {
    PolicyEvent::AuditStarted {
        audit,
        at_ms,
        principal: agent(name),
        operation,
        verdict: Verdict::Allowed,
    }
}

#[derive(Debug, Clone, Copy)]
enum GrantState {
    None,
    Live,
    Expired,
    IdleTimedOut,
    KeptAliveByUse,
    Revoked,
    RevokedThenGrantedAgain,
    OtherOperationOnly,
}

/// The decision table: every mode x operation x grant state x admission x the agents switch.
/// The expected verdict is written out row by row from docs/policy.md's order of checks.
#[test]
fn the_decision_table() {
    let states = [
        GrantState::None,
        GrantState::Live,
        GrantState::Expired,
        GrantState::IdleTimedOut,
        GrantState::KeptAliveByUse,
        GrantState::Revoked,
        GrantState::RevokedThenGrantedAgain,
        GrantState::OtherOperationOnly,
    ];
    let mut rows = 0;
    for source in [GrantSource::Owner, GrantSource::Manifest] {
        for unrestricted in [false, true] {
            for operation in Operation::ALL {
                for grant_state in states {
                    for admitted in [true, false] {
                        for agents_enabled in [true, false] {
                            let other = match operation {
                                Operation::Status => Operation::Query,
                                Operation::Query => Operation::Status,
                            };
                            let mut events = Vec::new();
                            let mut now = T0 + 60_000;
                            match grant_state {
                                GrantState::None => {}
                                GrantState::Live => events.push(granted("a", operation, source)),
                                GrantState::Expired => {
                                    events.push(granted("a", operation, source));
                                    now = T0 + HOUR_MS;
                                }
                                GrantState::IdleTimedOut => {
                                    events.push(granted("a", operation, source));
                                    now = T0 + 600_000;
                                }
                                GrantState::KeptAliveByUse => {
                                    events.push(granted("a", operation, source));
                                    events.push(used("a", operation, T0 + 500_000, 1));
                                    now = T0 + 1_000_000;
                                }
                                GrantState::Revoked => {
                                    events.push(granted("a", operation, source));
                                    events.push(PolicyEvent::ActorRevoked { actor: actor("a") });
                                }
                                GrantState::RevokedThenGrantedAgain => {
                                    events.push(granted("a", operation, source));
                                    events.push(PolicyEvent::ActorRevoked { actor: actor("a") });
                                    events.push(granted("a", operation, source));
                                }
                                GrantState::OtherOperationOnly => {
                                    events.push(granted("a", other, source));
                                }
                            }
                            if !agents_enabled {
                                events.push(PolicyEvent::AgentsSwitched { enabled: false });
                            }
                            let state = policy(&events);
                            let admission = Admission {
                                admitted,
                                unrestricted,
                            };
                            let want = if !admitted {
                                Some(DenyReason::NotAdmitted)
                            } else if !agents_enabled {
                                Some(DenyReason::AgentsDisabled)
                            } else if unrestricted {
                                None
                            } else {
                                match grant_state {
                                    GrantState::None | GrantState::OtherOperationOnly => {
                                        Some(DenyReason::NotGranted)
                                    }
                                    GrantState::Live
                                    | GrantState::KeptAliveByUse
                                    | GrantState::RevokedThenGrantedAgain => None,
                                    GrantState::Expired => Some(DenyReason::Expired),
                                    GrantState::IdleTimedOut => Some(DenyReason::IdleTimeout),
                                    GrantState::Revoked => Some(DenyReason::Revoked),
                                }
                            };
                            let got = state
                                .decide(&agent("a"), operation, admission, now, 9)
                                .map(|grant| (grant.operation(), grant.audit()))
                                .err();
                            assert_eq!(
                                got, want,
                                "{source:?} unrestricted={unrestricted} {operation:?} \
                                 {grant_state:?} admitted={admitted} agents={agents_enabled}"
                            );
                            // Another actor never benefits from a's grant.
                            if !unrestricted && admitted && agents_enabled {
                                assert_eq!(
                                    state.deny_reason(&agent("b"), operation, admission, now),
                                    Some(DenyReason::NotGranted)
                                );
                            }
                            // The owner reads their own history whatever the agents' policy.
                            assert!(
                                state
                                    .decide(&Principal::Owner, operation, admission, now, 9)
                                    .is_ok()
                            );
                            rows += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(rows, 2 * 2 * 2 * 8 * 2 * 2);
}

#[test]
fn nothing_is_allowed_by_default() {
    let state = PolicyState::default();
    for operation in Operation::ALL {
        assert_eq!(
            state.deny_reason(&agent("a"), operation, ADMITTED, T0),
            Some(DenyReason::NotGranted)
        );
    }
    assert!(state.tools_for(&agent("a"), ADMITTED, T0).is_empty());
}

#[test]
fn a_status_grant_does_not_grant_query_and_tools_lists_only_what_is_allowed() {
    let state = policy(&[granted("a", Operation::Status, GrantSource::Owner)]);
    assert_eq!(
        state.tools_for(&agent("a"), ADMITTED, T0 + 1),
        vec![Operation::Status]
    );
    assert_eq!(
        state.deny_reason(&agent("a"), Operation::Query, ADMITTED, T0 + 1),
        Some(DenyReason::NotGranted)
    );
    let not_admitted = Admission {
        admitted: false,
        unrestricted: false,
    };
    assert!(
        state
            .tools_for(&agent("a"), not_admitted, T0 + 1)
            .is_empty()
    );
    let disabled = policy(&[
        granted("a", Operation::Status, GrantSource::Owner),
        PolicyEvent::AgentsSwitched { enabled: false },
    ]);
    assert!(disabled.tools_for(&agent("a"), ADMITTED, T0 + 1).is_empty());
    let again = policy(&[
        granted("a", Operation::Status, GrantSource::Owner),
        PolicyEvent::AgentsSwitched { enabled: false },
        PolicyEvent::AgentsSwitched { enabled: true },
    ]);
    assert_eq!(
        again.tools_for(&agent("a"), ADMITTED, T0 + 1),
        vec![Operation::Status]
    );
}

#[test]
fn revocation_is_targeted() {
    let state = policy(&[
        granted("a", Operation::Query, GrantSource::Owner),
        granted("b", Operation::Query, GrantSource::Owner),
        PolicyEvent::ActorRevoked { actor: actor("a") },
    ]);
    assert_eq!(
        state.deny_reason(&agent("a"), Operation::Query, ADMITTED, T0 + 1),
        Some(DenyReason::Revoked)
    );
    assert_eq!(
        state.deny_reason(&agent("b"), Operation::Query, ADMITTED, T0 + 1),
        None
    );
}

#[test]
fn a_denied_or_owner_call_does_not_keep_a_grant_alive_and_audit_ids_advance() {
    let mut state = policy(&[granted("a", Operation::Query, GrantSource::Owner)]);
    state.apply(&PolicyEvent::AuditStarted {
        audit: 4,
        at_ms: T0 + 500_000,
        principal: agent("a"),
        operation: Operation::Query,
        verdict: Verdict::Denied(DenyReason::NotGranted),
    });
    state.apply(&PolicyEvent::AuditStarted {
        audit: 5,
        at_ms: T0 + 500_000,
        principal: agent("a"),
        operation: Operation::Status,
        verdict: Verdict::Allowed,
    });
    assert_eq!(
        state.deny_reason(&agent("a"), Operation::Query, ADMITTED, T0 + 600_000),
        Some(DenyReason::IdleTimeout)
    );
    assert_eq!(state.next_audit(), 6);
}

#[test]
fn grant_terms_are_bounded() {
    assert!(GrantTerms::new(60, 60).is_ok());
    assert_eq!(GrantTerms::new(0, 1), Err(InvalidTerms::ExpiresAfter));
    assert_eq!(
        GrantTerms::new(GRANT_LIFETIME_MAX_SECS + 1, 1),
        Err(InvalidTerms::ExpiresAfter)
    );
    assert_eq!(GrantTerms::new(60, 0), Err(InvalidTerms::IdleTimeout));
    assert_eq!(GrantTerms::new(60, 61), Err(InvalidTerms::IdleTimeout));
}

#[test]
fn actor_ids_are_bounded_and_the_owner_cannot_be_impersonated() {
    for good in ["a", "agent-1", "Claude.Desktop_2", &"x".repeat(64)] {
        assert!(ActorId::new(good).is_ok(), "{good}");
    }
    for bad in [
        "",
        "-a",
        ".a",
        "@owner",
        "a b",
        "a/b",
        "https://x",
        "é",
        &"x".repeat(65),
    ] {
        assert_eq!(ActorId::new(bad), Err(InvalidActorId), "{bad}");
    }
    assert_eq!(Principal::parse("@owner"), Ok(Principal::Owner));
    assert_eq!(Principal::parse("a"), Ok(agent("a")));
}

#[test]
fn every_code_reads_back_as_itself() {
    for reason in DenyReason::ALL {
        assert_eq!(
            Verdict::from_code(reason.code()),
            Some(Verdict::Denied(reason))
        );
        assert_eq!(
            Refusal::from_code(reason.code()),
            Some(Refusal::Denied(reason))
        );
    }
    for refusal in CursorRefusal::ALL {
        assert_eq!(
            Refusal::from_code(refusal.code()),
            Some(Refusal::Cursor(refusal))
        );
    }
    for code in annal_schema::ErrorCode::ALL {
        assert_eq!(
            AuditOutcome::from_code(code.as_str()),
            Some(AuditOutcome::Refused(Refusal::Contract(code)))
        );
    }
    assert_eq!(
        AuditOutcome::from_code("completed"),
        Some(AuditOutcome::Completed)
    );
    assert_eq!(Verdict::from_code("nope"), None);
    assert_eq!(
        serde_json::to_value(Refusal::Denied(DenyReason::Revoked)).unwrap(),
        json!({"code": "revoked"})
    );
}

// ---- The manifest table. ----

const SEED_MANIFEST: &str = super::manifest::CONTRACT_EXAMPLE_MANIFEST;

#[test]
fn the_contracts_example_manifest_grants_both_operations() {
    let manifest = Manifest::parse(SEED_MANIFEST).unwrap();
    assert_eq!(
        manifest.operations(),
        &[Operation::Status, Operation::Query]
    );
    assert_eq!(manifest.terms(), GrantTerms::new(3_600, 600).unwrap());
    let json = r#"{"version":3,"expires_after":"1h","idle_timeout":"10m",
        "resources":{"computer_history":{"operations":["query"]}},
        "allow":{"tools":["history_query"]}}"#;
    assert_eq!(
        Manifest::parse(json).unwrap().operations(),
        &[Operation::Query]
    );
}

#[test]
fn the_tool_and_the_operation_must_both_be_named() {
    let tool_only = SEED_MANIFEST.replace("      - query\n", "");
    assert_eq!(
        Manifest::parse(&tool_only).unwrap().operations(),
        &[Operation::Status]
    );
    let operation_only = SEED_MANIFEST.replace("    - history_status\n", "");
    assert_eq!(
        Manifest::parse(&operation_only).unwrap().operations(),
        &[Operation::Query]
    );
    let neither = SEED_MANIFEST
        .replace("      - status\n      - query\n", "      []\n")
        .replace("operations:\n      []", "operations: []");
    assert_eq!(Manifest::parse(&neither).unwrap().operations(), &[]);
}

/// One refusal per row: the edit, and the field the message must name.
#[test]
fn the_manifest_refusal_table() {
    let rows: Vec<(&str, String, &str)> = vec![
        (
            "unknown top-level field",
            format!("{SEED_MANIFEST}extra: 1\n"),
            "an unknown field",
        ),
        (
            "unknown nested field",
            SEED_MANIFEST.replace("  computer_history:", "  computer_history:\n    paths: [x]"),
            "resources.computer_history: an unknown field",
        ),
        (
            "unknown allow field",
            SEED_MANIFEST.replace("allow:\n", "allow:\n  hosts: [x]\n"),
            "allow: an unknown field",
        ),
        (
            "another version",
            SEED_MANIFEST.replace("version: 3", "version: 2"),
            "version",
        ),
        (
            "version as text",
            SEED_MANIFEST.replace("version: 3", "version: three"),
            "version",
        ),
        (
            "missing version",
            SEED_MANIFEST.replace("version: 3\n", ""),
            "version",
        ),
        (
            "missing allow",
            SEED_MANIFEST[..SEED_MANIFEST.find("allow:").unwrap()].to_owned(),
            "allow",
        ),
        (
            "repeated operation",
            SEED_MANIFEST.replace("      - query\n", "      - query\n      - query\n"),
            "resources.computer_history.operations",
        ),
        (
            "unknown operation",
            SEED_MANIFEST.replace("      - query\n", "      - delete\n"),
            "resources.computer_history.operations",
        ),
        (
            "repeated tool",
            SEED_MANIFEST.replace(
                "    - history_query\n",
                "    - history_query\n    - history_query\n",
            ),
            "allow.tools",
        ),
        (
            "unknown tool",
            SEED_MANIFEST.replace("    - history_query\n", "    - shell_exec\n"),
            "allow.tools",
        ),
        (
            "duration without a unit",
            SEED_MANIFEST.replace("expires_after: 1h", "expires_after: 3600"),
            "expires_after",
        ),
        (
            "duration in words",
            SEED_MANIFEST.replace("expires_after: 1h", "expires_after: 1 hour"),
            "expires_after",
        ),
        (
            "zero duration",
            SEED_MANIFEST.replace("idle_timeout: 10m", "idle_timeout: 0s"),
            "idle_timeout",
        ),
        (
            "idle longer than the lifetime",
            SEED_MANIFEST.replace("idle_timeout: 10m", "idle_timeout: 2h"),
            "idle_timeout",
        ),
        (
            "lifetime beyond the maximum",
            SEED_MANIFEST.replace("expires_after: 1h", "expires_after: 31d"),
            "expires_after",
        ),
        ("not a mapping", "- version: 3\n".to_owned(), ""),
    ];
    for (name, text, field) in rows {
        let error = Manifest::parse(&text).expect_err(name);
        let message = error.to_string();
        assert!(message.contains(field), "{name}: {message}");
        for planted in [
            "extra",
            "paths",
            "hosts",
            "three",
            "delete",
            "shell_exec",
            "hour",
        ] {
            assert!(!message.contains(planted), "{name}: {message}");
        }
    }
    let huge = format!("{SEED_MANIFEST}#{}\n", "x".repeat(20_000));
    assert_eq!(Manifest::parse(&huge), Err(ManifestError::TooLarge));
}

#[test]
fn a_refused_manifest_never_echoes_a_value() {
    let planted = "PLANTED-a8f3/home/user/secret.txt";
    for text in [
        SEED_MANIFEST.replace("version: 3", &format!("version: \"{planted}\"")),
        SEED_MANIFEST.replace(
            "expires_after: 1h",
            &format!("expires_after: \"{planted}\""),
        ),
        SEED_MANIFEST.replace("      - query\n", &format!("      - \"{planted}\"\n")),
        SEED_MANIFEST.replace("    - history_query\n", &format!("    - \"{planted}\"\n")),
        SEED_MANIFEST.replace(
            "allow:\n  tools:",
            &format!("allow:\n  tools: \"{planted}\"\n  x:"),
        ),
    ] {
        let message = Manifest::parse(&text).unwrap_err().to_string();
        assert!(!message.contains("PLANTED"), "{message}");
    }
}

/// Manifest errors name a field of the closed schema, or say "an unknown field": a key the caller
/// wrote is never quoted, at any level, in YAML or JSON, whatever it looks like.
#[test]
fn a_refused_manifest_never_echoes_a_field_name() {
    let planted = "PLANTED_a8f3";
    let rows: Vec<(String, &str)> = vec![
        (format!("{SEED_MANIFEST}{planted}: 1\n"), ""),
        (
            SEED_MANIFEST.replace("resources:\n", &format!("resources:\n  {planted}: 1\n")),
            "resources",
        ),
        (
            SEED_MANIFEST.replace(
                "  computer_history:\n",
                &format!("  computer_history:\n    {planted}: [x]\n"),
            ),
            "resources.computer_history",
        ),
        (
            SEED_MANIFEST.replace("allow:\n", &format!("allow:\n  {planted}: [x]\n")),
            "allow",
        ),
        (
            format!("\"/home/alice/{planted}.txt\": 1\n{SEED_MANIFEST}"),
            "",
        ),
        (
            format!("\"https://evil.example/?{planted}=1\": 1\n{SEED_MANIFEST}"),
            "",
        ),
        (
            format!(
                r#"{{"version":3,"expires_after":"1h","idle_timeout":"10m","{planted}":1,
                "resources":{{"computer_history":{{"operations":["query"]}}}},
                "allow":{{"tools":["history_query"]}}}}"#
            ),
            "",
        ),
        // A key that is not text at all.
        (format!("? [{planted}, b]\n: 1\n{SEED_MANIFEST}"), ""),
        (format!("{SEED_MANIFEST}7: {planted}\n"), ""),
    ];
    for (text, path) in rows {
        let message = Manifest::parse(&text).unwrap_err().to_string();
        assert!(!message.contains("PLANTED"), "{message}");
        assert!(!message.contains("alice"), "{message}");
        assert!(!message.contains("evil"), "{message}");
        assert!(message.contains("an unknown field"), "{message}");
        if !path.is_empty() {
            assert!(message.contains(&format!("{path}: ")), "{message}");
        }
    }
}

proptest::proptest! {
    /// Whatever key or value a caller plants at any level, the refusal never quotes it.
    #[test]
    fn no_planted_key_or_value_is_ever_quoted(
        key in "zq[A-Za-z0-9_/:.?=~-]{1,24}",
        value in "zq[A-Za-z0-9_/:.?=~ -]{0,24}",
        level in 0usize..5,
        as_value in proptest::bool::ANY,
    ) {
        let entry = format!("{key}: \"{value}\"");
        let text = match (level, as_value) {
            (0, false) => format!("{entry}\n{SEED_MANIFEST}"),
            (1, false) => SEED_MANIFEST.replace("resources:\n", &format!("resources:\n  {entry}\n")),
            (2, false) => SEED_MANIFEST.replace(
                "  computer_history:\n",
                &format!("  computer_history:\n    {entry}\n"),
            ),
            (3, false) => SEED_MANIFEST.replace("allow:\n", &format!("allow:\n  {entry}\n")),
            (0, true) => SEED_MANIFEST.replace("version: 3", &format!("version: \"{value}\"")),
            (1, true) => SEED_MANIFEST.replace("expires_after: 1h", &format!("expires_after: \"{value}\"")),
            (2, true) => SEED_MANIFEST.replace("      - query\n", &format!("      - \"{value}\"\n")),
            (3, true) => SEED_MANIFEST.replace("    - history_query\n", &format!("    - \"{value}\"\n")),
            _ => format!("{SEED_MANIFEST}{entry}\n{key}: 1\n"),
        };
        let message = Manifest::parse(&text).unwrap_err().to_string();
        proptest::prop_assert!(!message.contains("zq"), "{}", message);
    }
}

/// A key written twice is refused (never last-one-wins), at every level and in JSON too, and the
/// message names the field from the closed schema.
#[test]
fn duplicate_keys_in_a_manifest_are_refused() {
    let rows: Vec<(&str, String, &str)> = vec![
        (
            "version twice",
            format!("version: 3\n{SEED_MANIFEST}"),
            "version",
        ),
        (
            "a duration twice, the later looser",
            SEED_MANIFEST.replace(
                "expires_after: 1h\n",
                "expires_after: 1h\nexpires_after: 30d\n",
            ),
            "expires_after",
        ),
        (
            "allow twice",
            format!("{SEED_MANIFEST}allow:\n  tools:\n    - history_query\n"),
            "allow",
        ),
        (
            "tools twice",
            SEED_MANIFEST.replace("allow:\n", "allow:\n  tools: []\n"),
            "allow.tools",
        ),
        (
            "operations twice",
            SEED_MANIFEST.replace(
                "  computer_history:\n",
                "  computer_history:\n    operations: [status]\n",
            ),
            "resources.computer_history.operations",
        ),
        (
            "computer_history twice",
            SEED_MANIFEST.replace(
                "resources:\n",
                "resources:\n  computer_history:\n    operations: []\n",
            ),
            "resources.computer_history",
        ),
        (
            "JSON, a key twice",
            r#"{"version":3,"expires_after":"1h","idle_timeout":"10m","idle_timeout":"1h",
                "resources":{"computer_history":{"operations":["query"]}},
                "allow":{"tools":["history_query"]}}"#
                .to_owned(),
            "idle_timeout",
        ),
    ];
    for (name, text, field) in rows {
        let error = Manifest::parse(&text).expect_err(name);
        let message = error.to_string();
        assert!(message.contains(field), "{name}: {message}");
        assert!(message.contains("repeated"), "{name}: {message}");
    }
}

#[test]
fn durations_parse_exactly() {
    assert_eq!(parse_duration_secs("90s"), Some(90));
    assert_eq!(parse_duration_secs("10m"), Some(600));
    assert_eq!(parse_duration_secs("1h"), Some(3_600));
    assert_eq!(parse_duration_secs("2d"), Some(172_800));
    for bad in [
        "",
        "h",
        "1",
        "1.5h",
        "-1h",
        "1H",
        "1 h",
        "1hh",
        "99999999999999d",
        "１h",
    ] {
        assert_eq!(parse_duration_secs(bad), None, "{bad}");
    }
}

// ---- Cursors. ----

fn book(generation: u8) -> CursorBook {
    CursorBook::new(
        std::sync::Arc::new(CursorKey::new(&RootKey::from_bytes([5; 32]).cursor_key())),
        [generation; 16],
    )
}

fn query(value: serde_json::Value) -> QueryRequest {
    QueryRequest::parse(&value).unwrap()
}

#[test]
fn a_cursor_redeems_once_for_its_actor_and_filters() {
    let mut book = book(1);
    let mut entropy = SeededEntropy::new(1);
    let request = query(json!({"limit": 10, "session_id": "s1"}));
    let cursor = book
        .issue(&agent("a"), &request, 4_242, T0, &mut entropy)
        .unwrap();
    assert_eq!(cursor.len(), CURSOR_LEN_CHARS);
    // Reveals nothing: the bound is not in clear, and the same claims seal differently.
    assert!(!cursor.contains(&format!("{:x}", 4_242)));
    let again = book
        .issue(&agent("a"), &request, 4_242, T0, &mut entropy)
        .unwrap();
    assert_ne!(cursor, again);

    // Refusals do not use the cursor up.
    assert_eq!(
        book.redeem(&cursor, &agent("b"), &request, T0 + 1),
        Err(CursorRefusal::ForeignActor)
    );
    assert_eq!(
        book.redeem(&cursor, &Principal::Owner, &request, T0 + 1),
        Err(CursorRefusal::ForeignActor)
    );
    assert_eq!(
        book.redeem(&cursor, &agent("a"), &query(json!({"limit": 10})), T0 + 1),
        Err(CursorRefusal::FilterMismatch)
    );
    assert_eq!(
        book.redeem(
            &cursor,
            &agent("a"),
            &query(json!({"limit": 11, "session_id": "s1"})),
            T0 + 1
        ),
        Err(CursorRefusal::FilterMismatch)
    );
    assert_eq!(
        book.redeem(&cursor, &agent("a"), &request, T0 + 1),
        Ok(4_242)
    );
    assert_eq!(
        book.redeem(&cursor, &agent("a"), &request, T0 + 2),
        Err(CursorRefusal::Replayed)
    );
    assert_eq!(
        book.redeem(&again, &agent("a"), &request, T0 + 2),
        Ok(4_242)
    );
}

#[test]
fn a_cursor_expires_after_its_ttl() {
    let mut book = book(1);
    let mut entropy = SeededEntropy::new(2);
    let request = query(json!({}));
    let cursor = book
        .issue(&agent("a"), &request, 10, T0, &mut entropy)
        .unwrap();
    let late = book
        .issue(&agent("a"), &request, 10, T0, &mut entropy)
        .unwrap();
    let ttl_ms = CURSOR_TTL_SECS * 1_000;
    assert_eq!(
        book.redeem(&late, &agent("a"), &request, T0 + ttl_ms),
        Err(CursorRefusal::Expired)
    );
    assert_eq!(
        book.redeem(&cursor, &agent("a"), &request, T0 + ttl_ms - 1),
        Ok(10)
    );
}

/// The named negative vectors: each malformed or foreign cursor and its fixed code.
#[test]
fn the_cursor_refusal_vectors() {
    let mut issuing = book(1);
    let mut entropy = SeededEntropy::new(3);
    let request = query(json!({}));
    let cursor = issuing
        .issue(&agent("a"), &request, 10, T0, &mut entropy)
        .unwrap();
    let flip = |at: usize| {
        let mut bytes = cursor.clone().into_bytes();
        bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
        String::from_utf8(bytes).unwrap()
    };
    let other_key = {
        let mut other = CursorBook::new(
            std::sync::Arc::new(CursorKey::new(&RootKey::from_bytes([6; 32]).cursor_key())),
            [1; 16],
        );
        other
            .issue(&agent("a"), &request, 10, T0, &mut SeededEntropy::new(3))
            .unwrap()
    };
    let vectors: Vec<(&str, String, CursorRefusal)> = vec![
        ("empty", String::new(), CursorRefusal::Invalid),
        (
            "short",
            cursor[..CURSOR_LEN_CHARS - 2].to_owned(),
            CursorRefusal::Invalid,
        ),
        ("long", format!("{cursor}00"), CursorRefusal::Invalid),
        (
            "upper-case hex",
            cursor.to_uppercase(),
            CursorRefusal::Invalid,
        ),
        (
            "not hex",
            "z".repeat(CURSOR_LEN_CHARS),
            CursorRefusal::Invalid,
        ),
        ("nonce tampered", flip(3), CursorRefusal::Invalid),
        ("claims tampered", flip(100), CursorRefusal::Invalid),
        (
            "tag tampered",
            flip(CURSOR_LEN_CHARS - 1),
            CursorRefusal::Invalid,
        ),
        ("another store's key", other_key, CursorRefusal::Invalid),
        ("a path", "/etc/passwd".to_owned(), CursorRefusal::Invalid),
    ];
    for (name, text, want) in vectors {
        assert_eq!(
            issuing.redeem(&text, &agent("a"), &request, T0 + 1),
            Err(want),
            "{name}"
        );
    }
    // Another run of the engine (same key, new generation): stale.
    let mut next_run = CursorBook::new(
        std::sync::Arc::new(CursorKey::new(&RootKey::from_bytes([5; 32]).cursor_key())),
        [2; 16],
    );
    assert_eq!(
        next_run.redeem(&cursor, &agent("a"), &request, T0 + 1),
        Err(CursorRefusal::Stale)
    );
    // None of the above used it up.
    assert_eq!(
        issuing.redeem(&cursor, &agent("a"), &request, T0 + 1),
        Ok(10)
    );
}

#[test]
fn outstanding_cursors_are_bounded() {
    let mut book = book(1);
    let mut entropy = SeededEntropy::new(4);
    let request = query(json!({}));
    let first = book
        .issue(&agent("a"), &request, 10, T0, &mut entropy)
        .unwrap();
    for _ in 0..cursor::CURSORS_OUTSTANDING_MAX {
        book.issue(&agent("a"), &request, 10, T0, &mut entropy)
            .unwrap();
    }
    assert_eq!(book.outstanding(), cursor::CURSORS_OUTSTANDING_MAX);
    // The oldest was forgotten: refused, never honoured twice.
    assert_eq!(
        book.redeem(&first, &agent("a"), &request, T0 + 1),
        Err(CursorRefusal::Replayed)
    );
}

#[test]
fn a_revocation_sticks_against_a_manifest_presented_again() {
    let manifest = Manifest::parse(SEED_MANIFEST).unwrap();
    // Given an actor approved by manifest, when it is presented again, then it is approved
    // again (a later `annal mcp` start of a live actor).
    let approved = policy(&[granted("a", Operation::Query, GrantSource::Manifest)]);
    let again = approved.manifest_approval(&actor("a"), &manifest, false, T0 + 1);
    assert_eq!(again.len(), 2);
    assert!(again.iter().all(|event| matches!(
        event,
        PolicyEvent::GrantIssued {
            source: GrantSource::Manifest,
            ..
        }
    )));
    // Given the owner revoked it, when the same manifest is presented again, then nothing is
    // granted and its calls stay revoked.
    let revoked = policy(&[
        granted("a", Operation::Query, GrantSource::Manifest),
        PolicyEvent::ActorRevoked { actor: actor("a") },
    ]);
    assert!(
        revoked
            .manifest_approval(&actor("a"), &manifest, false, T0 + 1)
            .is_empty()
    );
    assert!(revoked.is_revoked(&actor("a")));
    // When the owner approves it again explicitly, then the grants say so, and they lift the
    // revocation.
    let reapproval = revoked.manifest_approval(&actor("a"), &manifest, true, T0 + 1);
    assert_eq!(reapproval.len(), 2);
    assert!(reapproval.iter().all(|event| matches!(
        event,
        PolicyEvent::GrantIssued {
            source: GrantSource::ManifestReapproved,
            ..
        }
    )));
    let mut lifted = revoked.clone();
    for event in &reapproval {
        lifted.apply(event);
    }
    assert!(!lifted.is_revoked(&actor("a")));
    assert_eq!(
        lifted.deny_reason(&agent("a"), Operation::Query, ADMITTED, T0 + 2),
        None
    );
    // An owner's grant lifts a revocation too (unchanged).
    let mut granted_again = revoked;
    granted_again.apply(&granted("a", Operation::Status, GrantSource::Owner));
    assert!(!granted_again.is_revoked(&actor("a")));
}

/// The exact `history_query` input schema MCP clients are shown (derived by schemars from
/// `PagedQueryArguments`): the contract's arguments and the paging `cursor`, closed.
#[test]
fn the_paged_query_input_schema_is_exactly_what_clients_were_shown() {
    assert_eq!(
        query_input_schema(),
        json!({
            "type": "object",
            "properties": {
                "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
                "session_id": {"type": "string", "minLength": 1, "maxLength": 128},
                "since_sequence": {"type": "integer", "minimum": 1},
                "until_sequence": {"type": "integer", "minimum": 1},
                "cursor": {
                    "type": "string",
                    "maxLength": 512,
                    "description": "The `cursor` of the previous page's result, to read the \
                        next page (single use, valid 60 s, only with the same filters)."
                }
            },
            "additionalProperties": false
        })
    );
}

/// The owner's access-event setting, given the journaled switches: the owner's own reads
/// (`local_cli`) append the contract's `access` event by default and not once switched off;
/// an agent's read appends one whatever the setting, as does a read on an agent's behalf.
#[test]
fn the_owners_access_events_are_the_owners_setting_and_agents_always_append() {
    use annal_schema::AccessOperation::{AgentQuery, LocalCli};
    let off = PolicyEvent::OwnerAccessSwitched { enabled: false };
    let on = PolicyEvent::OwnerAccessSwitched { enabled: true };
    let switched_off: &[PolicyEvent] = std::slice::from_ref(&off);
    let back_on: &[PolicyEvent] = &[off.clone(), on.clone()];
    let rows: [(
        &str,
        &[PolicyEvent],
        Principal,
        annal_schema::AccessOperation,
        bool,
    ); 9] = [
        ("default, owner", &[], Principal::Owner, LocalCli, true),
        ("default, agent", &[], agent("a"), AgentQuery, true),
        (
            "default, owner for an agent",
            &[],
            Principal::Owner,
            AgentQuery,
            true,
        ),
        (
            "off, owner",
            switched_off,
            Principal::Owner,
            LocalCli,
            false,
        ),
        ("off, agent", switched_off, agent("a"), AgentQuery, true),
        (
            "off, owner for an agent",
            switched_off,
            Principal::Owner,
            AgentQuery,
            true,
        ),
        (
            "off, an agent spelled local_cli",
            switched_off,
            agent("a"),
            LocalCli,
            true,
        ),
        ("back on, owner", back_on, Principal::Owner, LocalCli, true),
        ("back on, agent", back_on, agent("a"), AgentQuery, true),
    ];
    for (name, given, principal, access, appends) in rows {
        let policy = policy(given);
        assert_eq!(policy.appends_access(&principal, access), appends, "{name}");
        assert_eq!(
            policy.owner_access_events(),
            policy.appends_access(&Principal::Owner, LocalCli),
            "{name}"
        );
    }
    // Switching them back on captures more again: a failed commit withdraws it (undo: off);
    // switching off, or on when already on, is no widening.
    assert_eq!(
        policy(switched_off).undo_widening(&on),
        Some(vec![off.clone()])
    );
    assert_eq!(policy(&[]).undo_widening(&on), None);
    assert_eq!(policy(&[]).undo_widening(&off), None);
    // The setting decides nothing else: the owner is never denied, agents need grants.
    let off_policy = policy(switched_off);
    assert!(
        off_policy
            .decide(&Principal::Owner, Operation::Query, ADMITTED, T0, 1)
            .is_ok()
    );
    assert_eq!(
        off_policy.deny_reason(&agent("a"), Operation::Query, ADMITTED, T0),
        Some(DenyReason::NotGranted)
    );
}
