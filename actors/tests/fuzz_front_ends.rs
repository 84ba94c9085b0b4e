//! Fuzz targets for the front-ends' parsers of outside input: the daemon's frames and request
//! enum, and MCP tool calls (name and arguments). Seeded proptest runs, like the engine's
//! (`engine/tests/fuzz.rs`): no panic, a typed refusal, and a frame's declared length checked
//! before anything is allocated for it. A request that gives a key twice, at any depth, is
//! refused, and no refusal quotes a name or value the caller chose.
//!
//! A `harness = false` target: it prints `FIGURE fuzz.front_ends.cases N`. `ANNAL_FUZZ_CASES`
//! sets the cases per target.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use annal_actors::daemon::protocol::{
    DaemonErrorCode, FIELD_NAMES, FrameError, KNOWN_OPS, MAX_FRAME_BYTES, decode_request,
    read_frame,
};
use annal_actors::gate::ToolCall;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Cases per target in a CI run.
const FUZZ_CASES_PER_TARGET: u32 = 512;

/// Valid requests, mutated below.
const VALID_REQUESTS: [&str; 7] = [
    r#"{"op":"status"}"#,
    r#"{"op":"set_quota","bytes":1048576,"on_quota":"evict_oldest"}"#,
    r#"{"op":"grant","actor":"agent-a","operation":"query","expires_after_secs":60}"#,
    r#"{"op":"action_started","capability":"input.pointer.click","application":{"bundle_id":"org.example.Editor"},"session":"s"}"#,
    r#"{"op":"action_completed","action":1,"outcome":{"effect":"confirmed","route":"accessibility","evidence_kinds":["accessibility_readback"]}}"#,
    r#"{"op":"call_tool","actor":"agent-a","tool":"history_query","arguments":{"limit":5,"cursor":"ab"}}"#,
    r#"{"op":"query","arguments":{"since_sequence":1,"until_sequence":9}}"#,
];

/// Requests that give a key twice (refused, `invalid_request`), mutated with the valid ones.
const DUPLICATE_KEY_REQUESTS: [&str; 4] = [
    r#"{"op":"revoke","actor":"a","actor":"b"}"#,
    r#"{"op":"status","op":"stop"}"#,
    r#"{"op":"query","arguments":{"limit":1,"limit":200}}"#,
    r#"{"op":"action_started","capability":"c","application":{"bundle_id":"x","bundle_id":"y"}}"#,
];

/// The marker of every name and value the no-echo targets plant: never in a refusal.
const PLANTED: &str = "zq";

fn run<S: Strategy>(
    total: &mut u64,
    cases: u32,
    name: &str,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    if let Err(failure) = runner.run(&strategy, test) {
        panic!("fuzz target {name} failed: {failure}");
    }
    println!("fuzz: {name}: {cases} cases");
    *total += u64::from(cases);
}

fn main() {
    if !annal_engine::test_support::suite_selected("fuzz_front_ends") {
        return;
    }
    let cases =
        annal_engine::test_support::env_parsed("ANNAL_FUZZ_CASES").unwrap_or(FUZZ_CASES_PER_TARGET);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut total = 0;

    run(
        &mut total,
        cases,
        "daemon_frame.arbitrary_stream",
        prop::collection::vec(any::<u8>(), 0..64),
        |bytes| {
            let mut reader: &[u8] = &bytes;
            let read = runtime.block_on(read_frame(&mut reader));
            if bytes.len() >= 4 {
                let declared =
                    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
                if declared == 0 || declared > MAX_FRAME_BYTES {
                    // Refused from the header alone: nothing was allocated for the body.
                    let too_large = matches!(read, Err(FrameError::TooLarge { .. }));
                    prop_assert!(too_large);
                } else if declared > bytes.len() - 4 {
                    prop_assert!(read.is_err());
                } else {
                    prop_assert_eq!(read.unwrap(), bytes[4..4 + declared].to_vec());
                }
            } else {
                prop_assert!(read.is_err());
            }
            Ok(())
        },
    );
    run(
        &mut total,
        cases,
        "daemon_request.mutated_valid",
        (
            0..VALID_REQUESTS.len() + DUPLICATE_KEY_REQUESTS.len(),
            prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..4),
        ),
        |(which, edits)| {
            let seed = VALID_REQUESTS
                .iter()
                .chain(DUPLICATE_KEY_REQUESTS.iter())
                .nth(which)
                .unwrap();
            let mut bytes = seed.as_bytes().to_vec();
            for (at, byte, kind) in edits {
                let at = at % bytes.len().max(1);
                match kind {
                    0 if !bytes.is_empty() => bytes[at] = byte,
                    1 => bytes.insert(at, byte),
                    _ if !bytes.is_empty() => {
                        bytes.remove(at);
                    }
                    _ => {}
                }
            }
            if let Err(error) = decode_request(&bytes) {
                prop_assert!(matches!(
                    error.code,
                    DaemonErrorCode::MalformedFrame
                        | DaemonErrorCode::UnknownRequest
                        | DaemonErrorCode::InvalidRequest
                ));
            }
            Ok(())
        },
    );
    run(
        &mut total,
        cases,
        "daemon_request.arbitrary_object",
        (
            prop_oneof![
                Just(None),
                (0..KNOWN_OPS.len()).prop_map(Some),
                ".{0,12}".prop_map(|_| None)
            ],
            prop::collection::btree_map("[a-z_]{1,12}", ".{0,16}", 0..5),
        ),
        |(op, fields)| {
            let mut object: serde_json::Map<String, serde_json::Value> = fields
                .into_iter()
                .map(|(k, v)| (k, serde_json::Value::String(v)))
                .collect();
            if let Some(op) = op {
                object.insert("op".into(), KNOWN_OPS[op].into());
            }
            let body = serde_json::to_vec(&object).unwrap();
            if let Ok(request) = decode_request(&body) {
                // Accepted: it names a known op, and re-encodes to a request of that op.
                let value = serde_json::to_value(&request).unwrap();
                prop_assert!(KNOWN_OPS.iter().any(|op| value["op"] == *op));
                prop_assert_eq!(&value["op"], &object["op"]);
            }
            Ok(())
        },
    );
    run(
        &mut total,
        cases,
        "daemon_request.duplicate_key",
        (
            0..VALID_REQUESTS.len(),
            any::<usize>(),
            prop_oneof![
                (0..FIELD_NAMES.len()).prop_map(|i| FIELD_NAMES[i].to_owned()),
                "[a-z_]{1,10}".prop_map(|name| format!("{PLANTED}{name}")),
            ],
        ),
        |(which, at, key)| {
            // The same key twice, at the start of one of the seed's objects (the seeds hold no
            // brace inside a string).
            let seed = VALID_REQUESTS[which];
            let starts: Vec<usize> = seed.match_indices('{').map(|(i, _)| i + 1).collect();
            let at = starts[at % starts.len()];
            let body = format!(r#"{}"{key}":1,"{key}":2,{}"#, &seed[..at], &seed[at..]);
            match decode_request(body.as_bytes()) {
                Ok(request) => {
                    return Err(TestCaseError::fail(format!(
                        "{body} accepted as {request:?}"
                    )));
                }
                Err(error) => {
                    prop_assert_eq!(error.code, DaemonErrorCode::InvalidRequest, "{}", body);
                    prop_assert!(error.message.contains("twice"), "{}", error.message);
                    prop_assert!(!error.message.contains(PLANTED), "{}", error.message);
                }
            }
            Ok(())
        },
    );
    run(
        &mut total,
        cases,
        "daemon_request.no_echo",
        (
            0..KNOWN_OPS.len(),
            prop::collection::btree_map(
                "[a-z_]{1,10}".prop_map(|name| format!("{PLANTED}{name}")),
                prop_oneof![
                    ".{0,16}".prop_map(|v| serde_json::Value::from(format!("{PLANTED}{v}"))),
                    any::<i64>().prop_map(serde_json::Value::from),
                ],
                0..4,
            ),
            prop::collection::btree_map(
                (0..FIELD_NAMES.len()).prop_map(|i| FIELD_NAMES[i].to_owned()),
                ".{0,16}".prop_map(|v| serde_json::Value::from(format!("{PLANTED}{v}"))),
                0..4,
            ),
        ),
        |(op, planted, known)| {
            let mut object: serde_json::Map<String, serde_json::Value> =
                known.into_iter().chain(planted).collect();
            object.insert("op".into(), KNOWN_OPS[op].into());
            let body = serde_json::to_vec(&object).unwrap();
            if let Err(error) = decode_request(&body) {
                prop_assert!(!error.message.contains(PLANTED), "{}", error.message);
            }
            Ok(())
        },
    );
    run(
        &mut total,
        cases,
        "mcp_tool_call.arbitrary",
        (
            prop_oneof![
                Just("history_status".to_owned()),
                Just("history_query".to_owned()),
                ".{0,20}"
            ],
            prop::collection::btree_map(
                prop_oneof![
                    Just("limit".to_owned()),
                    Just("session_id".to_owned()),
                    Just("since_sequence".to_owned()),
                    Just("until_sequence".to_owned()),
                    Just("cursor".to_owned()),
                    "[a-z_]{1,10}"
                ],
                prop_oneof![
                    any::<i64>().prop_map(serde_json::Value::from),
                    any::<u64>().prop_map(serde_json::Value::from),
                    ".{0,600}".prop_map(serde_json::Value::from),
                    Just(serde_json::Value::Null),
                ],
                0..5,
            ),
        ),
        |(tool, arguments)| {
            let arguments = serde_json::Value::Object(arguments.into_iter().collect());
            let call = ToolCall::parse(&tool, &arguments);
            match call.operation() {
                Some(operation) => prop_assert_eq!(operation.tool(), tool.as_str()),
                None => prop_assert!(matches!(call, ToolCall::Unknown)),
            }
            Ok(())
        },
    );
    println!("FIGURE fuzz.front_ends.cases {total} cases");
}
