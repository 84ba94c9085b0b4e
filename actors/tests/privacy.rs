//! The planted-value privacy suite: unique marker values go into every input surface (the
//! socket's capture and control requests, MCP tool arguments and cursors, manifests, the CLI's
//! query flags), then every byte annal wrote is read raw AND decrypted with the key (history,
//! journal, index files), together with every response it returned and the daemon's log:
//!
//! - a raw session label appears nowhere, raw or decrypted, and in no response;
//! - a value under a prohibited field (screenshots, typed text, paths, URLs, window titles, raw
//!   arguments, ...: `annal_schema::privacy::PROHIBITED_FIELD_NAMES`), a refused cursor and a
//!   manifest's text are refused or dropped and appear nowhere;
//! - a URL, a path, a query string or a window title planted through every identity field
//!   (`application.bundle_id`, `application.display_name`) is refused with `invalid_request` and
//!   appears nowhere;
//! - an allowed value (a capability, a bundle id, a display name) appears only decrypted and only
//!   in the event field the contract allows for it;
//! - no response carries a field outside the contract (plus the paging extension).
//!
//! A `harness = false` target: it prints `FIGURE privacy.planted_values N`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use annal_engine::entropy::OsEntropy;
use annal_engine::index::{IndexKey, parse_index_file_name, read_index_file};
use annal_engine::keys::{CredentialNaming, KeyCustody, KeyutilsProvider, Namespace};
use annal_engine::storage::{Access, Storage, StoreLayout};
use annal_engine::store::{History, StoreReader, open_store};
use annal_schema::privacy::PROHIBITED_FIELD_NAMES;
use serde_json::{Value, json};
use support::{Mcp, Raw, Sandbox, walk};

/// Where a planted value may appear.
#[derive(Debug, Clone, PartialEq)]
enum Allowed {
    /// Nowhere at all.
    Nowhere,
    /// Only decrypted, only at this JSON path of an event (`data.capability`, ...).
    EventField(&'static str),
}

/// Every planted value and where it may appear.
#[derive(Default)]
struct Plants {
    values: Vec<(String, Allowed)>,
}

impl Plants {
    fn plant(&mut self, allowed: Allowed) -> String {
        let marker = format!("plant{:05}x", self.values.len());
        self.values.push((marker.clone(), allowed));
        marker
    }
}

fn main() {
    // Before any thread: this process reads the key from the kernel keyring, as annal does.
    let _ = annal_engine::keys::establish_session_keyring();
    if !annal_engine::test_support::suite_selected("privacy") {
        return;
    }
    match std::panic::catch_unwind(run) {
        Ok(planted) => {
            println!("privacy: {planted} planted values, none found where it must not be");
            println!("FIGURE privacy.planted_values {planted} values");
        }
        Err(_) => {
            eprintln!("privacy suite FAILED");
            std::process::exit(1);
        }
    }
}

/// A reply that must be a refusal (`error`), for a request that carried a planted value.
fn refused(reply: &Value) {
    assert!(reply["error"]["code"].is_string(), "accepted: {reply}");
}

fn run() -> usize {
    let sandbox = Sandbox::new();
    let mut plants = Plants::default();
    let mut responses: Vec<String> = Vec::new();
    responses.push(sandbox.ok(&["enable"]));
    let mut raw = Raw::connect(&sandbox.socket());
    let ask = |raw: &mut Raw, request: Value, responses: &mut Vec<String>| {
        let reply = raw.ask(request);
        responses.push(reply.to_string());
        reply
    };

    // 1. Capture with allowed values and raw labels.
    let label = plants.plant(Allowed::Nowhere);
    let reply = ask(
        &mut raw,
        json!({"op": "session_started", "session": label}),
        &mut responses,
    );
    assert_eq!(reply["ok"]["admission"], "accepted", "{reply}");
    for _ in 0..3 {
        let capability = format!(
            "input.{}",
            plants.plant(Allowed::EventField("data.capability"))
        );
        let bundle = plants.plant(Allowed::EventField("data.application.bundle_id"));
        let name = plants.plant(Allowed::EventField("data.application.display_name"));
        raw.action(json!({
            "capability": capability,
            "application": {"bundle_id": bundle, "display_name": name},
            "session": label,
        }));
    }
    // 2. Prohibited fields at every level of a capture request: refused, kept nowhere.
    for field in PROHIBITED_FIELD_NAMES {
        let mut top = json!({"op": "action_started", "capability": "input.pointer.click"});
        top[*field] = json!(plants.plant(Allowed::Nowhere));
        let reply = ask(&mut raw, top, &mut responses);
        assert!(reply["error"].is_object(), "top-level {field}: {reply}");
        let mut app = json!({"bundle_id": "org.example.Editor"});
        app[*field] = json!(plants.plant(Allowed::Nowhere));
        refused(&ask(
            &mut raw,
            json!({"op": "action_started", "capability": "input.pointer.click", "application": app}),
            &mut responses,
        ));
        let started = ask(
            &mut raw,
            json!({"op": "action_started", "capability": "input.pointer.click"}),
            &mut responses,
        );
        let mut outcome = json!({"effect": "confirmed", "route": "accessibility"});
        outcome[*field] = json!(plants.plant(Allowed::Nowhere));
        refused(&ask(
            &mut raw,
            json!({"op": "action_completed", "action": started["ok"]["action"], "outcome": outcome}),
            &mut responses,
        ));
    }
    // Prohibited-shaped values where the contract has a restricted identifier: refused.
    for shaped in [
        format!("/home/owner/{}.txt", plants.plant(Allowed::Nowhere)),
        format!("https://{}.example/inbox", plants.plant(Allowed::Nowhere)),
        format!("Inbox - {} - Mail", plants.plant(Allowed::Nowhere)),
        format!("hunter2 {}", plants.plant(Allowed::Nowhere)),
    ] {
        refused(&ask(
            &mut raw,
            json!({"op": "action_started", "capability": shaped}),
            &mut responses,
        ));
        refused(&ask(
            &mut raw,
            json!({"op": "revoke", "actor": shaped}),
            &mut responses,
        ));
    }
    // A URL, a path, a query string and a window title through every identity field, alone and
    // beside a valid other field: `invalid_request`, kept nowhere (docs/event-contract.md,
    // "Identity fields").
    let identity_shapes = [
        format!(
            "https://{}.example/inbox?tok=1",
            plants.plant(Allowed::Nowhere)
        ),
        format!("/home/owner/{}.txt", plants.plant(Allowed::Nowhere)),
        format!("~/{}.txt", plants.plant(Allowed::Nowhere)),
        format!("C:\\Users\\owner\\{}.txt", plants.plant(Allowed::Nowhere)),
        format!("\\\\server\\share\\{}", plants.plant(Allowed::Nowhere)),
        format!("{}?tok=1", plants.plant(Allowed::Nowhere)),
        format!("Invoice - {} - Gmail", plants.plant(Allowed::Nowhere)),
        format!("{}.txt \u{2014} Notepad", plants.plant(Allowed::Nowhere)),
    ];
    for shaped in identity_shapes {
        for application in [
            json!({"bundle_id": shaped}),
            json!({"display_name": shaped}),
            json!({"bundle_id": shaped, "display_name": "Editor"}),
            json!({"bundle_id": "org.example.Editor", "display_name": shaped}),
        ] {
            let reply = ask(
                &mut raw,
                json!({"op": "action_started", "capability": "input.pointer.click",
                       "application": application, "session": label}),
                &mut responses,
            );
            assert_eq!(reply["error"]["code"], "invalid_request", "{reply}");
        }
    }
    assert!(
        ask(
            &mut raw,
            json!({"op": "session_ended", "session": label}),
            &mut responses
        )["ok"]
            .is_object()
    );
    assert!(ask(&mut raw, json!({"op": "flush"}), &mut responses)["ok"].is_object());

    // 3. Manifests: a comment and an unknown field carry markers; neither is kept.
    let comment = plants.plant(Allowed::Nowhere);
    let manifest = format!(
        "# approved for {comment}\n{}",
        annal_engine::policy::manifest::CONTRACT_EXAMPLE_MANIFEST
    );
    let path = sandbox.path("manifest.yaml");
    std::fs::write(&path, manifest).unwrap();
    let unknown = plants.plant(Allowed::Nowhere);
    let reply = ask(
        &mut raw,
        json!({"op": "approve_manifest", "actor": "agent-x",
               "manifest": format!("window_title: {unknown}\n{}", annal_engine::policy::manifest::CONTRACT_EXAMPLE_MANIFEST)}),
        &mut responses,
    );
    refused(&reply);
    drop(raw);

    // 4. MCP: prohibited arguments, a planted cursor, a raw label as the session filter.
    let mut mcp = Mcp::start(&sandbox, "agent-p", &["--manifest", path.to_str().unwrap()]);
    for tool in mcp.tools() {
        responses.push(tool.to_string());
    }
    for field in PROHIBITED_FIELD_NAMES {
        let mut arguments = json!({"limit": 5});
        arguments[*field] = json!(plants.plant(Allowed::Nowhere));
        let result = mcp.call("history_query", arguments);
        responses.push(result.to_string());
        assert_eq!(
            result["structuredContent"]["code"], "invalid_history_query",
            "{result}"
        );
    }
    let cursor = plants.plant(Allowed::Nowhere);
    let result = mcp.call("history_query", json!({"cursor": cursor}));
    responses.push(result.to_string());
    assert_eq!(
        result["structuredContent"]["code"], "cursor_invalid",
        "{result}"
    );
    let by_label = mcp.answered("history_query", json!({"session_id": label, "limit": 200}));
    responses.push(by_label.to_string());
    let returned = by_label["events"].as_array().unwrap().len();
    assert_eq!(
        returned, 8,
        "a raw label finds its session: 2 session events, 3 actions"
    );
    for event in by_label["events"].as_array().unwrap() {
        let keys: Vec<&String> = event.as_object().unwrap().keys().collect();
        for key in keys {
            assert!(EVENT_FIELDS.contains(&key.as_str()), "{key} in {event}");
        }
    }
    let mut answer_keys: Vec<&String> = by_label.as_object().unwrap().keys().collect();
    answer_keys.sort_unstable();
    for key in answer_keys {
        assert!(
            [
                "events",
                "metadata_only",
                "model_context_disclosure",
                "has_more",
                "cursor"
            ]
            .contains(&key.as_str()),
            "{key}"
        );
    }
    let status = mcp.answered("history_status", json!({}));
    responses.push(status.to_string());
    assert_eq!(status.as_object().unwrap().len(), 11);
    drop(mcp);
    // 5. The CLI's own query flags.
    responses.push(sandbox.ok(&["query", "--session-id", &label, "--json"]));
    responses.push(sandbox.ok(&["list", "50", "--json"]));
    responses.push(sandbox.ok(&["status", "--json"]));
    sandbox.ok(&["stop"]);

    // Every byte written, raw: no marker of any kind (all is encrypted, or never written).
    let mut raw_files = 0;
    for file in walk(sandbox.root.path()) {
        if file.starts_with(sandbox.path("manifest.yaml")) {
            continue;
        }
        let bytes = std::fs::read(&file).unwrap();
        for (marker, _) in &plants.values {
            assert!(
                !contains(&bytes, marker.as_bytes()),
                "{marker} in plaintext in {}",
                file.display()
            );
        }
        raw_files += 1;
    }
    assert!(raw_files > 5, "the scan read the store ({raw_files} files)");

    // Decrypted with the key: history events, journal records, index files.
    let dir = sandbox.path("state").join("annal").join(&sandbox.namespace);
    let layout = StoreLayout::in_namespace_dir(&dir);
    let storage: Arc<dyn Storage> = Arc::new(open_store(&layout, Access::Read).unwrap());
    let provider = KeyutilsProvider::open(CredentialNaming::Annal, Box::new(OsEntropy)).unwrap();
    let namespace = Namespace::new(&sandbox.namespace).unwrap();
    let custody = KeyCustody::load(&provider, &namespace, &namespace.primary_reference()).unwrap();
    let history = StoreReader::<History>::new(Arc::clone(&storage))
        .read(&custody.history_keys())
        .unwrap();
    let mut decrypted_events = 0;
    for record in history.records() {
        let event = serde_json::to_value(&record.event).unwrap();
        check_event(&event, &plants);
        decrypted_events += 1;
    }
    assert!(decrypted_events >= 10, "{decrypted_events}");
    let journal = StoreReader::<annal_engine::journal::Journal>::new(Arc::clone(&storage))
        .read(&custody.journal_keys())
        .unwrap();
    let mut journal_records = 0;
    for record in journal.records() {
        let text = String::from_utf8_lossy(&record.event.to_json_vec()).into_owned();
        for (marker, _) in &plants.values {
            assert!(
                !text.contains(marker.as_str()),
                "{marker} in the journal: {text}"
            );
        }
        journal_records += 1;
    }
    assert!(journal_records > 0);
    let index_key = IndexKey::new(&custody.index_key());
    for entry in std::fs::read_dir(dir.join("engine").join("index"))
        .unwrap()
        .flatten()
    {
        let name = entry.file_name().into_string().unwrap();
        let Some(chunk) = parse_index_file_name(&name) else {
            continue;
        };
        let chunk_len = std::fs::metadata(
            dir.join("computer-history")
                .join("chunks")
                .join(annal_engine::store::chunk_file_name(chunk).as_str()),
        )
        .map(|m| m.len())
        .unwrap_or(0);
        if let Ok(index) = read_index_file(storage.as_ref(), &index_key, chunk, chunk_len) {
            let text = format!("{index:?}");
            for (marker, _) in &plants.values {
                assert!(!text.contains(marker.as_str()), "{marker} in index {name}");
            }
        }
    }

    // Every response: only allowed values, only in event fields.
    for response in &responses {
        for (marker, allowed) in &plants.values {
            if *allowed == Allowed::Nowhere {
                assert!(
                    !response.contains(marker.as_str()),
                    "{marker} returned: {response}"
                );
            }
        }
        if let Ok(value) = serde_json::from_str::<Value>(response) {
            for event in events_in(&value) {
                check_event(event, &plants);
            }
        }
    }
    plants.values.len()
}

/// The CloudEvents fields of a v0 event.
const EVENT_FIELDS: [&str; 10] = [
    "specversion",
    "id",
    "source",
    "type",
    "subject",
    "time",
    "datacontenttype",
    "dataschema",
    "data",
    "extensions",
];

/// Every event object inside a response (`events` arrays at any depth).
fn events_in(value: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                if key == "events"
                    && let Some(events) = inner.as_array()
                {
                    out.extend(events.iter());
                } else {
                    out.extend(events_in(inner));
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| out.extend(events_in(i))),
        _ => {}
    }
    out
}

/// A decrypted or returned event: each planted value only at its allowed path.
fn check_event(event: &Value, plants: &Plants) {
    let mut leaves = Vec::new();
    leaves_of(event, String::new(), &mut leaves);
    for (path, text) in leaves {
        for (marker, allowed) in &plants.values {
            if text.contains(marker.as_str()) {
                assert_eq!(
                    *allowed,
                    Allowed::EventField(leak_path(&path)),
                    "{marker} at {path}: {event}"
                );
            }
        }
    }
}

/// Interns a path for comparison with the `&'static str` of `Allowed`.
fn leak_path(path: &str) -> &'static str {
    for known in [
        "data.capability",
        "data.application.bundle_id",
        "data.application.display_name",
    ] {
        if known == path {
            return known;
        }
    }
    "elsewhere"
}

fn leaves_of(value: &Value, path: String, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let next = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                leaves_of(inner, next, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                leaves_of(item, path.clone(), out);
            }
        }
        Value::String(text) => out.push((path, text.clone())),
        _ => {}
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
