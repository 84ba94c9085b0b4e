//! `annal inspect`, run as the built binary against copies of the reference fixture.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::copy_tree;

const FIXTURE_KEY_HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const CHUNK_FILE: &str = "a9c33b304182577383e69c9e2b8e6862.cborseq";

fn fixture_dir() -> PathBuf {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures/cua-reference"
    ));
    assert!(
        dir.join("records.json").is_file(),
        "the reference fixture is missing: `../shared` must sit beside the repository ({})",
        dir.display()
    );
    dir
}

fn fixture_plaintexts() -> Vec<String> {
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture_dir().join("records.json")).unwrap())
            .unwrap();
    json["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["plaintext"].as_str().unwrap().to_owned())
        .collect()
}

/// Every path under `root` with its bytes (None for directories) and mode.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, (Option<Vec<u8>>, u32)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            let mode = meta.permissions().mode();
            if meta.is_dir() {
                stack.push(entry.path());
                out.insert(entry.path(), (None, mode));
            } else {
                out.insert(
                    entry.path(),
                    (Some(std::fs::read(entry.path()).unwrap()), mode),
                );
            }
        }
    }
    out
}

struct Setup {
    _dir: tempfile::TempDir,
    store: PathBuf,
    key_file: PathBuf,
}

fn setup(key_hex: &str, key_mode: u32) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    copy_tree(&fixture_dir().join("store"), &store);
    let key_file = dir.path().join("key.hex");
    std::fs::write(&key_file, format!("{key_hex}\n")).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(key_mode)).unwrap();
    Setup {
        _dir: dir,
        store,
        key_file,
    }
}

fn inspect(store: &Path, key_file: &Path, json: bool) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_annal"));
    cmd.arg("inspect")
        .arg(store)
        .arg("--key-hex-file")
        .arg(key_file);
    if json {
        cmd.arg("--json");
    }
    cmd.output().unwrap()
}

#[test]
fn json_output_embeds_the_sixteen_events_byte_for_byte() {
    let s = setup(FIXTURE_KEY_HEX, 0o600);
    let out = inspect(&s.store, &s.key_file, true);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    // Each event, as text inside the output, byte for byte.
    #[derive(serde::Deserialize)]
    struct Shape<'a> {
        #[serde(borrow)]
        events: Vec<&'a serde_json::value::RawValue>,
        chunks: Vec<serde_json::Value>,
    }
    let shape: Shape<'_> = serde_json::from_str(&stdout).unwrap();
    let expected = fixture_plaintexts();
    assert_eq!(shape.events.len(), 16);
    for (ours, theirs) in shape.events.iter().zip(&expected) {
        assert_eq!(ours.get(), theirs);
    }
    assert_eq!(
        shape.chunks,
        vec![serde_json::json!({
            "file": CHUNK_FILE, "verdict": "complete", "records": 16,
            "first_sequence": 1, "last_sequence": 16, "detail": null
        })]
    );
    // And the whole output, exactly.
    let whole = format!(
        "{{\"chunks\":[{{\"file\":\"{CHUNK_FILE}\",\"verdict\":\"complete\",\"records\":16,\
         \"first_sequence\":1,\"last_sequence\":16,\"detail\":null}}],\"events\":[{}]}}\n",
        expected.join(",")
    );
    assert_eq!(stdout, whole);
}

#[test]
fn inspect_reads_the_read_only_fixture_in_place() {
    let s = setup(FIXTURE_KEY_HEX, 0o600);
    let out = inspect(&fixture_dir().join("store"), &s.key_file, false);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.starts_with(&format!("chunk {CHUNK_FILE} complete records 16")));
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("event ")).count(),
        16
    );
}

#[test]
fn inspect_leaves_the_store_byte_identical() {
    let s = setup(FIXTURE_KEY_HEX, 0o600);
    // Without writer.lock, too: inspect must not create it.
    std::fs::remove_file(s.store.join("writer.lock")).unwrap();
    let before = snapshot(&s.store);
    for json in [false, true] {
        let out = inspect(&s.store, &s.key_file, json);
        assert_eq!(out.status.code(), Some(0));
    }
    assert_eq!(snapshot(&s.store), before);
}

#[test]
fn group_or_other_readable_key_file_is_refused() {
    for mode in [0o644, 0o640, 0o604, 0o660] {
        let s = setup(FIXTURE_KEY_HEX, mode);
        let out = inspect(&s.store, &s.key_file, true);
        assert_eq!(out.status.code(), Some(2), "mode {mode:o}");
        assert!(out.stdout.is_empty());
        assert!(String::from_utf8_lossy(&out.stderr).contains("must not be accessible"));
    }
    let s = setup(FIXTURE_KEY_HEX, 0o400);
    assert_eq!(inspect(&s.store, &s.key_file, true).status.code(), Some(0));
}

#[test]
fn upper_case_key_file_is_accepted() {
    let s = setup(&FIXTURE_KEY_HEX.to_uppercase(), 0o600);
    let out = inspect(&s.store, &s.key_file, true);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["events"].as_array().unwrap().len(), 16);
}

#[test]
fn non_hex_key_file_is_bad_input() {
    let s = setup(&format!("{}g", &FIXTURE_KEY_HEX[..63]), 0o600);
    let out = inspect(&s.store, &s.key_file, true);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("64 hex characters"));
}

#[test]
fn malformed_key_file_and_non_store_are_bad_input() {
    let s = setup("00112233", 0o600);
    assert_eq!(inspect(&s.store, &s.key_file, true).status.code(), Some(2));
    let s = setup(FIXTURE_KEY_HEX, 0o600);
    let not_a_store = s.store.join("chunks");
    assert_eq!(
        inspect(&not_a_store, &s.key_file, true).status.code(),
        Some(2)
    );
}

#[test]
fn a_damaged_final_record_of_the_newest_chunk_is_a_torn_tail_not_a_failure() {
    let s = setup(FIXTURE_KEY_HEX, 0o600);
    let chunk = s.store.join("chunks").join(CHUNK_FILE);
    let mut bytes = std::fs::read(&chunk).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01; // the final record's tag: nothing authenticates after it
    std::fs::write(&chunk, &bytes).unwrap();
    let out = inspect(&s.store, &s.key_file, true);
    assert_eq!(out.status.code(), Some(0));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["chunks"][0]["verdict"], "torn_tail");
    assert_eq!(value["chunks"][0]["records"], 15);
}

#[test]
fn corrupt_chunk_is_a_problem_found() {
    let s = setup(FIXTURE_KEY_HEX, 0o600);
    let chunk = s.store.join("chunks").join(CHUNK_FILE);
    let mut bytes = std::fs::read(&chunk).unwrap();
    // Inside the first record's ciphertext (header 97 bytes, record framing 25): records that
    // still authenticate after it make it tampering, not a torn tail.
    bytes[97 + 40] ^= 0x01;
    std::fs::write(&chunk, &bytes).unwrap();
    let out = inspect(&s.store, &s.key_file, true);
    assert_eq!(out.status.code(), Some(1));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["chunks"][0]["verdict"], "corrupt");
    assert_eq!(value["chunks"][0]["detail"], "authentication_failed");
    assert_eq!(value["chunks"][0]["records"], 0);
    assert_eq!(value["events"], serde_json::json!([]));
}

#[test]
fn torn_tail_is_not_a_problem() {
    let s = setup(FIXTURE_KEY_HEX, 0o600);
    let chunk = s.store.join("chunks").join(CHUNK_FILE);
    let bytes = std::fs::read(&chunk).unwrap();
    std::fs::write(&chunk, &bytes[..bytes.len() - 7]).unwrap();
    let out = inspect(&s.store, &s.key_file, true);
    assert_eq!(out.status.code(), Some(0));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["chunks"][0]["verdict"], "torn_tail");
    assert_eq!(value["chunks"][0]["records"], 15);
    assert_eq!(value["chunks"][0]["last_sequence"], 15);
    assert_eq!(value["events"].as_array().unwrap().len(), 15);
}

#[test]
fn wrong_key_is_reported() {
    let s = setup(&"ab".repeat(32), 0o600);
    let out = inspect(&s.store, &s.key_file, false);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("probably the wrong key"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("authentication_failed at record 0"));
}

fn query(s: &Setup, request: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_annal"))
        .arg("inspect")
        .arg(&s.store)
        .arg("--key-hex-file")
        .arg(&s.key_file)
        .arg("--json")
        .arg("--query")
        .arg(request)
        .args(extra)
        .output()
        .unwrap()
}

fn response(out: &Output) -> serde_json::Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn sequences(value: &serde_json::Value) -> Vec<u64> {
    value["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["data"]["sequence"].as_u64().unwrap())
        .collect()
}

#[test]
fn a_query_over_the_fixture_returns_what_the_reference_returned() {
    let s = setup(FIXTURE_KEY_HEX, 0o600);
    let ours = response(&query(&s, r#"{"limit":200}"#, &[]));
    let records: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture_dir().join("records.json")).unwrap())
            .unwrap();
    let theirs = &records["reference_reader"]["query_limit200"]["events"];
    assert_eq!(
        &ours["events"], theirs,
        "the same events, in the same order"
    );
    assert_eq!(ours["metadata_only"], true);
    assert_eq!(ours["model_context_disclosure"], true);
    assert_eq!(
        ours.as_object().unwrap().len(),
        3,
        "exactly the contract's fields"
    );
}

#[test]
fn query_filters_keep_the_newest_ascending() {
    let s = setup(FIXTURE_KEY_HEX, 0o600);
    assert_eq!(
        sequences(&response(&query(&s, r#"{"limit":3}"#, &[]))),
        [14, 15, 16]
    );
    assert_eq!(
        sequences(&response(&query(&s, "{}", &[]))).len(),
        16,
        "default limit 50"
    );
    assert_eq!(
        sequences(&response(&query(
            &s,
            r#"{"since_sequence":4,"until_sequence":9,"limit":2}"#,
            &[]
        ))),
        [8, 9]
    );
    // The session by its raw label and by its opaque id: the same events.
    let by_label = response(&query(&s, r#"{"session_id":"fixture-session-1"}"#, &[]));
    let by_id = response(&query(
        &s,
        r#"{"session_id":"b11ddce8dbd1872c9250e3f67dad2d9d"}"#,
        &[],
    ));
    assert!(!sequences(&by_label).is_empty());
    assert_eq!(by_label, by_id);
    for event in by_label["events"].as_array().unwrap() {
        assert_eq!(
            event["data"]["session_id"],
            "b11ddce8dbd1872c9250e3f67dad2d9d"
        );
    }
    assert!(
        sequences(&response(&query(
            &s,
            r#"{"session_id":"another label"}"#,
            &[]
        )))
        .is_empty()
    );
    // Retention is exact by event time: the fixture is from 2026-11-30.
    assert!(
        sequences(&response(&query(&s, "{}", &["--retention-days", "0"]))).is_empty(),
        "a zero-day window hides everything older than now"
    );
    assert_eq!(
        sequences(&response(&query(&s, "{}", &["--retention-days", "36500"]))).len(),
        16
    );
}

#[test]
fn bad_queries_are_refused_with_the_contract_codes_and_write_nothing() {
    let s = setup(FIXTURE_KEY_HEX, 0o600);
    let before = snapshot(&s.store);
    for (request, code) in [
        (r#"{"limit":0}"#, "invalid_history_query"),
        (r#"{"limit":201}"#, "invalid_history_query"),
        (r#"{"unknown":1}"#, "invalid_history_query"),
        ("not json", "invalid_history_query"),
        (
            r#"{"since_sequence":9,"until_sequence":3}"#,
            "invalid_history_query_range",
        ),
    ] {
        let out = query(&s, request, &[]);
        assert_eq!(out.status.code(), Some(2), "{request}");
        let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(value, serde_json::json!({ "code": code }), "{request}");
    }
    // Queries never append an access record or create a file.
    let _ = query(&s, r#"{"limit":5}"#, &[]);
    assert_eq!(snapshot(&s.store), before);
}

#[test]
fn a_query_over_a_damaged_store_fails_closed() {
    let s = setup(FIXTURE_KEY_HEX, 0o600);
    let chunk = s.store.join("chunks").join(CHUNK_FILE);
    let mut bytes = std::fs::read(&chunk).unwrap();
    bytes[97 + 40] ^= 0x01;
    std::fs::write(&chunk, &bytes).unwrap();
    let out = query(&s, "{}", &[]);
    assert_eq!(out.status.code(), Some(1));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        value,
        serde_json::json!({"code": "history_storage_corrupt"})
    );
}
