//! Shared helpers for annal-schema's integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

/// `../shared` beside the repository root. Tests never skip when it is missing: they fail and
/// say why.
pub fn shared_dir() -> PathBuf {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared"));
    assert!(
        dir.join("contracts").is_dir(),
        "../shared is missing: the interop fixture and contracts must sit beside the repository \
         root (expected {})",
        dir.display()
    );
    dir
}

/// The reference fixture's record plaintexts, in record order.
pub fn fixture_plaintexts() -> Vec<String> {
    let path = shared_dir().join("fixtures/cua-reference/records.json");
    let text = std::fs::read_to_string(&path).expect("read records.json");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("parse records.json");
    doc["records"]
        .as_array()
        .expect("records array")
        .iter()
        .map(|r| r["plaintext"].as_str().expect("plaintext").to_owned())
        .collect()
}

/// The published v0 event JSON Schema, compiled with format validation on.
pub fn event_schema() -> jsonschema::Validator {
    let path = shared_dir().join("contracts/history-event-v0.schema.json");
    let text = std::fs::read_to_string(&path).expect("read schema");
    let schema: serde_json::Value = serde_json::from_str(&text).expect("parse schema");
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema)
        .expect("compile schema")
}
