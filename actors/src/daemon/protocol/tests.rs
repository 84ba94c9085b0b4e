//! The protocol's unit tests: requests, refusals, replies and frames.

use super::frame::check_frame_len;
use super::*;
use tokio_util::bytes::{Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

#[test]
fn every_known_op_is_a_request_and_requests_name_known_ops() {
    // Each listed op deserializes as a request (missing fields aside), never as an unknown
    // variant: the list names no op the enum lacks.
    for op in KNOWN_OPS {
        if let Err(error) = serde_json::from_value::<Request>(serde_json::json!({"op": op})) {
            assert!(
                !error.to_string().contains("unknown variant"),
                "{op}: {error}"
            );
        }
    }
    // And what a request serializes to is listed.
    for request in [
        Request::Hello {},
        Request::Status {},
        Request::Stop {},
        Request::Revoke { actor: "a".into() },
        Request::SetRetention { days: 30 },
        Request::SetQuota {
            bytes: 1 << 20,
            on_quota: annal_engine::journal::OnQuota::EvictOldest,
        },
    ] {
        let value = serde_json::to_value(&request).unwrap_or_default();
        assert!(KNOWN_OPS.iter().any(|op| value["op"] == *op), "{value}");
        assert_eq!(value["op"], request.op(), "{value}");
    }
}

#[test]
fn a_requests_op_is_the_op_it_was_read_from() {
    let mut read = 0;
    for op in KNOWN_OPS {
        let samples = [
            serde_json::json!({"op": op}),
            serde_json::json!({"op": op, "arguments": {}}),
            serde_json::json!({"op": op, "actor": "a"}),
            serde_json::json!({"op": op, "enabled": true}),
            serde_json::json!({"op": op, "session": "s"}),
        ];
        if let Some(request) = samples
            .into_iter()
            .find_map(|sample| serde_json::from_value::<Request>(sample).ok())
        {
            assert_eq!(request.op(), op);
            read += 1;
        }
    }
    // The ops whose required fields these samples give (the rest need more).
    assert!(read >= 19, "only {read} ops were read from a sample");
}

#[test]
fn unknown_ops_and_fields_are_refused_with_their_codes() {
    let cases: [(&[u8], DaemonErrorCode); 7] = [
        (b"not json", DaemonErrorCode::MalformedFrame),
        (b"[1,2]", DaemonErrorCode::MalformedFrame),
        (br#"{"op":"format_disk"}"#, DaemonErrorCode::UnknownRequest),
        (br#"{"actor":"a"}"#, DaemonErrorCode::UnknownRequest),
        (br#"{"op":"status","extra":1}"#, DaemonErrorCode::InvalidRequest),
        (
            br#"{"op":"revoke","actor":"a","secret":"planted-value"}"#,
            DaemonErrorCode::InvalidRequest,
        ),
        (
            br#"{"op":"grant","actor":"a","operation":"query","expires_after_secs":"planted-value"}"#,
            DaemonErrorCode::InvalidRequest,
        ),
    ];
    for (body, code) in cases {
        match decode_request(body) {
            Err(error) => {
                assert_eq!(error.code, code, "{}", String::from_utf8_lossy(body));
                assert!(
                    !error.message.contains("planted-value"),
                    "{}",
                    error.message
                );
            }
            Ok(request) => panic!("accepted {request:?}"),
        }
    }
    assert_eq!(
        decode_request(br#"{"op":"status"}"#).ok(),
        Some(Request::Status {})
    );
}

#[test]
fn a_key_given_twice_is_refused_at_every_depth() {
    let cases: [(&str, &str); 7] = [
        (
            r#"{"op":"revoke","actor":"a","actor":"b"}"#,
            "the field \"actor\"",
        ),
        (r#"{"op":"status","op":"status"}"#, "the field \"op\""),
        (r#"{"op":"status","op":"stop"}"#, "the field \"op\""),
        (
            r#"{"op":"query","arguments":{"limit":1,"limit":200}}"#,
            "the field \"limit\"",
        ),
        (
            r#"{"op":"action_started","capability":"c","application":{"bundle_id":"x","bundle_id":"y"}}"#,
            "the field \"bundle_id\"",
        ),
        (
            r#"{"op":"call_tool","actor":"a","tool":"history_query","arguments":{"planted-key":1,"planted-key":2}}"#,
            "an unknown field",
        ),
        (
            r#"{"op":"query","arguments":{"limit":[{"planted-key":{},"planted-key":[]}]}}"#,
            "an unknown field",
        ),
    ];
    for (body, named) in cases {
        match decode_request(body.as_bytes()) {
            Err(error) => {
                assert_eq!(error.code, DaemonErrorCode::InvalidRequest, "{body}");
                assert!(error.message.contains("twice"), "{}", error.message);
                assert!(error.message.contains(named), "{body}: {}", error.message);
                assert!(!error.message.contains("planted"), "{}", error.message);
            }
            Ok(request) => panic!("{body} was accepted as {request:?}"),
        }
    }
    // The same key in two different objects is no duplicate.
    let request = decode_request(
        br#"{"op":"call_tool","actor":"a","tool":"history_query","arguments":{"actor":"b","tool":"c"}}"#,
    );
    assert!(request.is_ok(), "{request:?}");
}

#[test]
fn no_error_quotes_a_name_or_value_the_caller_chose() {
    let bodies: [&[u8]; 6] = [
        br#"{"op":"status","planted-field-name":1}"#,
        br#"{"op":"revoke","actor":"a","planted`, expected `actor":1}"#,
        br#"{"op":"grant","actor":"a","operation":"query","planted":"planted-value"}"#,
        br#"{"op":"set_quota","bytes":1048576,"on_quota":"planted-variant"}"#,
        br#"{"op":"action_completed","action":1,"outcome":{"effect":"planted","route":"accessibility"}}"#,
        br#"{"op":"planted-op"}"#,
    ];
    for body in bodies {
        let error = decode_request(body).err();
        let message = error.map(|e| e.message).unwrap_or_default();
        assert!(!message.is_empty(), "{}", String::from_utf8_lossy(body));
        assert!(!message.contains("planted"), "{message}");
    }
    let error = decode_request(br#"{"op":"status","planted-field-name":1}"#).err();
    assert!(
        error.is_some_and(|e| e.message.contains("an unknown field")),
        "an unknown field is called that"
    );
    let error = decode_request(br#"{"op":"revoke"}"#).err();
    assert!(
        error.is_some_and(|e| e.message.contains("the field \"actor\" is missing")),
        "a missing field is named from the schema"
    );
}

/// One request of every kind that has fields, each field given.
fn sample_requests() -> Vec<Request> {
    let application = WireApplication {
        bundle_id: Some("b".into()),
        display_name: Some("d".into()),
    };
    let outcome = WireOutcome {
        effect: Effect::Confirmed,
        route: Route::Accessibility,
        delivery: Some(Delivery::Background),
        delivered_count: Some(1),
        evidence_kinds: Vec::new(),
        escalation_kind: Some(EscalationKind::RefreshPageState),
    };
    vec![
        Request::Grant {
            actor: "a".into(),
            operation: "query".into(),
            expires_after_secs: Some(1),
            idle_timeout_secs: Some(1),
        },
        Request::SetQuota {
            bytes: 1,
            on_quota: annal_engine::journal::OnQuota::EvictOldest,
        },
        Request::SetRetention { days: 1 },
        Request::CallTool {
            actor: "a".into(),
            tool: "t".into(),
            arguments: serde_json::Map::new(),
        },
        Request::ApproveManifest {
            actor: "a".into(),
            manifest: "m".into(),
            reapprove: true,
        },
        Request::Preflight {
            actor: "a".into(),
            limit: Some(5),
            session_id: Some("s".into()),
        },
        Request::Grants,
        Request::Audit {
            actor: Some("a".into()),
            since_ms: Some(1),
            denied: true,
        },
        Request::AuditSummary { since_ms: Some(1) },
        Request::SwitchAgents { enabled: true },
        Request::SetOwnerAccess { enabled: false },
        Request::Query {
            arguments: serde_json::Map::from_iter([("limit".to_owned(), 5.into())]),
            since_ms: Some(1),
            until_ms: Some(2),
            app: Some("a".into()),
            capability: Some("c".into()),
            outcome: Some(Effect::Failed),
            text: Some("t".into()),
        },
        Request::ActionStarted {
            capability: "c".into(),
            application: Some(application),
            session: Some("s".into()),
        },
        Request::ActionCompleted { action: 1, outcome },
        Request::SessionEnded {
            session: "s".into(),
        },
    ]
}

#[test]
fn every_field_of_the_schema_is_a_known_field_name() {
    let requests = sample_requests();
    fn keys(value: &serde_json::Value, out: &mut Vec<String>) {
        if let Some(object) = value.as_object() {
            for (key, inner) in object {
                out.push(key.clone());
                keys(inner, out);
            }
        }
    }
    for request in requests {
        let mut names = Vec::new();
        keys(
            &serde_json::to_value(&request).unwrap_or_default(),
            &mut names,
        );
        assert!(!names.is_empty());
        for name in names {
            assert!(FIELD_NAMES.contains(&name.as_str()), "{name} is not listed");
        }
    }
    for name in ["limit", "session_id", "since_sequence", "until_sequence"] {
        assert!(FIELD_NAMES.contains(&name));
    }
}

/// Every `invalid_request` names its field: each field of every kind of request, given a
/// value of the wrong type, or left out when it is required, is refused with a message that
/// names that field by its schema name (and quotes nothing the caller sent). Before
/// `wrong_field`, a wrong type said only "a field has the wrong type".
#[test]
fn every_invalid_request_names_its_field() {
    let mut checked = 0;
    for request in sample_requests() {
        let value = serde_json::to_value(&request).unwrap_or_default();
        let Some(object) = value.as_object() else {
            panic!("{request:?} is not an object");
        };
        for field in object.keys().filter(|k| *k != "op") {
            let mut wrong = object.clone();
            wrong.insert(field.clone(), serde_json::json!([["planted-value"]]));
            let body = serde_json::to_vec(&wrong).unwrap_or_default();
            let error = decode_request(&body).expect_err(field);
            assert_eq!(error.code, DaemonErrorCode::InvalidRequest, "{field}");
            assert!(
                error.message.contains(&format!("\"{field}\"")),
                "{field}: {}",
                error.message
            );
            assert!(
                !error.message.contains("planted-value"),
                "{}",
                error.message
            );
            // Left out: decodes (an optional field) or names it as missing.
            let mut without = object.clone();
            without.remove(field);
            let body = serde_json::to_vec(&without).unwrap_or_default();
            if let Err(error) = decode_request(&body) {
                assert_eq!(
                    error.message,
                    format!(
                        "invalid \"{}\" request: the field \"{field}\" is missing",
                        object["op"].as_str().unwrap_or_default()
                    )
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} fields checked");
}

/// The tool reply's wire shape is the one `docs/protocol.md` gives, every refusal code
/// reads back as itself, and nothing else reads as a reply.
#[test]
fn tool_replies_keep_their_wire_shape_and_refuse_anything_else() {
    use annal_engine::policy::{CursorRefusal, DenyReason, Refusal};
    let answer = ToolReply::Answer(serde_json::json!({"events": [], "health": "ready"}));
    assert_eq!(
        answer.to_value(),
        serde_json::json!({"answer": {"events": [], "health": "ready"}})
    );
    assert_eq!(ToolReply::from_value(answer.to_value()), Some(answer));
    let refusals = DenyReason::ALL
        .into_iter()
        .map(Refusal::Denied)
        .chain(CursorRefusal::ALL.into_iter().map(Refusal::Cursor))
        .chain(
            annal_schema::ErrorCode::ALL
                .into_iter()
                .map(Refusal::Contract),
        );
    for refusal in refusals {
        let reply = ToolReply::Refusal(refusal);
        assert_eq!(
            reply.to_value(),
            serde_json::json!({"refusal": {"code": refusal.code()}})
        );
        assert_eq!(ToolReply::from_value(reply.to_value()), Some(reply));
    }
    for not_a_reply in [
        serde_json::json!({}),
        serde_json::json!({"answer": {}, "refusal": {"code": "revoked"}}),
        serde_json::json!({"refusal": {"code": "made_up"}}),
        serde_json::json!({"refusal": {"code": "revoked", "why": "x"}}),
        serde_json::json!({"refusal": "revoked"}),
        serde_json::json!({"status": {}}),
    ] {
        assert_eq!(
            ToolReply::from_value(not_a_reply.clone()),
            None,
            "{not_a_reply}"
        );
    }
}

#[test]
fn frame_lengths_outside_the_bound_are_refused() {
    assert!(check_frame_len(0).is_err());
    assert!(check_frame_len(MAX_FRAME_BYTES + 1).is_err());
    assert_eq!(check_frame_len(MAX_FRAME_BYTES).ok(), Some(MAX_FRAME_BYTES));
}

/// The codec splits frames that arrive together, refuses length 0 and lengths above the bound
/// from the header alone, and holds no more than what arrived of a declared body.
#[test]
fn the_codec_splits_frames_and_never_reserves_a_declared_body() {
    let mut codec = FrameCodec::new();
    let mut wire = BytesMut::new();
    for body in [&b"{\"op\":\"hello\"}"[..], b"{\"op\":\"status\"}"] {
        codec
            .encode(Bytes::copy_from_slice(body), &mut wire)
            .unwrap();
    }
    assert_eq!(&wire[..4], &14u32.to_be_bytes());
    assert_eq!(
        &codec.decode(&mut wire).unwrap().unwrap()[..],
        b"{\"op\":\"hello\"}"
    );
    assert_eq!(
        &codec.decode(&mut wire).unwrap().unwrap()[..],
        b"{\"op\":\"status\"}"
    );
    assert!(codec.decode(&mut wire).unwrap().is_none());

    for declared in [0, MAX_FRAME_BYTES as u32 + 1, u32::MAX] {
        let mut wire = BytesMut::from(&declared.to_be_bytes()[..]);
        let refused = codec.decode(&mut wire);
        assert!(
            matches!(refused, Err(FrameError::TooLarge { declared_bytes }) if declared_bytes == declared as usize),
            "{declared}: {refused:?}"
        );
    }
    for body in [Bytes::new(), Bytes::from(vec![b' '; MAX_FRAME_BYTES + 1])] {
        assert!(matches!(
            codec.encode(body, &mut BytesMut::new()),
            Err(FrameError::TooLarge { .. })
        ));
    }

    // A whole-bound declaration and one byte: the buffer keeps its own size.
    let mut wire = BytesMut::with_capacity(16);
    wire.extend_from_slice(&(MAX_FRAME_BYTES as u32).to_be_bytes());
    wire.extend_from_slice(b"{");
    assert!(codec.decode(&mut wire).unwrap().is_none());
    assert!(wire.capacity() < 1024, "{} bytes reserved", wire.capacity());
    // The stream ends there: a partial body is an error, a partial header a close.
    assert!(matches!(
        codec.decode_eof(&mut wire),
        Err(FrameError::Io(_))
    ));
    let mut header_only = BytesMut::from(&[0u8, 0][..]);
    assert!(codec.decode_eof(&mut header_only).unwrap().is_none());
}

/// The owner's filters are optional fields of `query`: an unfiltered request has the wire
/// shape it had before them (an older daemon reads it), the old shape still decodes, and a
/// filter of the wrong type or an unknown outcome is refused naming its field, never its value.
#[test]
fn the_owners_filters_are_optional_fields_of_query() {
    let arguments = serde_json::Map::from_iter([("limit".to_owned(), 3.into())]);
    let request = Request::query(arguments);
    assert_eq!(
        serde_json::to_value(&request).unwrap_or_default(),
        serde_json::json!({"op": "query", "arguments": {"limit": 3}})
    );
    assert_eq!(
        decode_request(br#"{"op":"query","arguments":{"limit":3}}"#).ok(),
        Some(request)
    );
    let filtered = decode_request(
        br#"{"op":"query","since_ms":1,"until_ms":2,"app":"a","capability":"c","outcome":"failed","text":"t"}"#,
    );
    assert!(
        matches!(
            filtered,
            Ok(Request::Query {
                outcome: Some(Effect::Failed),
                ..
            })
        ),
        "{filtered:?}"
    );
    for (body, field) in [
        (
            br#"{"op":"query","outcome":"planted-value"}"#.as_slice(),
            "outcome",
        ),
        (br#"{"op":"query","since_ms":"planted-value"}"#, "since_ms"),
        (br#"{"op":"query","until_ms":-1}"#, "until_ms"),
        (br#"{"op":"query","app":["planted-value"]}"#, "app"),
        (br#"{"op":"query","text":{"planted-value":1}}"#, "text"),
    ] {
        let error = decode_request(body).err();
        let message = error.map(|e| e.message).unwrap_or_default();
        assert!(message.contains(&format!("\"{field}\"")), "{message}");
        assert!(!message.contains("planted"), "{message}");
    }
}
