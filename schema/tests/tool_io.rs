//! The tools' responses always have one shape.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use annal_schema::tools::*;
use annal_schema::{ErrorCode, Event, HealthCategory};
use serde_json::{Value, json};

fn status() -> StatusResponse {
    StatusResponse {
        supported: true,
        admitted: true,
        enabled: true,
        paused: false,
        encrypted: true,
        profile: STORAGE_PROFILE_ID.to_owned(),
        retention_days: DEFAULT_RETENTION_DAYS,
        quota_bytes: DEFAULT_QUOTA_BYTES,
        bytes_used: 48_291,
        dropped_events: 0,
        health: HealthCategory::Ready,
    }
}

#[test]
fn status_has_exactly_the_eleven_fields() {
    let value = serde_json::to_value(status()).unwrap();
    let mut keys: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "admitted",
            "bytes_used",
            "dropped_events",
            "enabled",
            "encrypted",
            "health",
            "paused",
            "profile",
            "quota_bytes",
            "retention_days",
            "supported"
        ]
    );
    assert_eq!(value["health"], json!("ready"));
    assert_eq!(value["quota_bytes"], json!(104_857_600));
    assert_eq!(value["retention_days"], json!(7));
    assert_eq!(
        value["profile"],
        json!("cua-history-profile-v1/cbor-sequence+cose-encrypt0+cloudevents-json")
    );
}

#[test]
fn status_with_an_extra_field_is_refused() {
    let mut value = serde_json::to_value(status()).unwrap();
    value["events"] = json!([]);
    assert!(serde_json::from_value::<StatusResponse>(value).is_err());
}

#[test]
fn query_response_always_discloses_metadata_only() {
    let empty = serde_json::to_value(QueryResponse { events: vec![] }).unwrap();
    assert_eq!(
        empty,
        json!({"events": [], "metadata_only": true, "model_context_disclosure": true})
    );
    let events: Vec<Event> = common::fixture_plaintexts()
        .iter()
        .map(|t| Event::from_json_slice(t.as_bytes()).unwrap())
        .collect();
    let full = serde_json::to_value(QueryResponse {
        events: events.clone(),
    })
    .unwrap();
    assert_eq!(full["events"].as_array().unwrap().len(), events.len());
    assert_eq!(full["metadata_only"], json!(true));
    assert_eq!(full["model_context_disclosure"], json!(true));
}

#[test]
fn tool_error_is_a_bare_code() {
    let value = serde_json::to_value(ToolError {
        code: ErrorCode::HistoryStorageCorrupt,
    })
    .unwrap();
    assert_eq!(value, json!({"code": "history_storage_corrupt"}));
    let all: Vec<Value> = ErrorCode::ALL.iter().map(|c| json!(c.as_str())).collect();
    for (code, wire) in ErrorCode::ALL.iter().zip(&all) {
        assert_eq!(&serde_json::to_value(code).unwrap(), wire);
    }
}

#[test]
fn health_wire_strings_round_trip() {
    for category in HealthCategory::ALL {
        let value = serde_json::to_value(category).unwrap();
        assert_eq!(value, json!(category.as_str()));
        assert_eq!(
            serde_json::from_value::<HealthCategory>(value).unwrap(),
            category
        );
    }
    assert!(serde_json::from_value::<HealthCategory>(json!("Ready")).is_err());
}

#[test]
fn names_and_capabilities() {
    assert_eq!(HISTORY_STATUS_TOOL, "history_status");
    assert_eq!(HISTORY_QUERY_TOOL, "history_query");
    assert_eq!(HISTORY_STATUS_CAPABILITY, "history.status");
    assert_eq!(HISTORY_QUERY_CAPABILITY, "history.query");
}
