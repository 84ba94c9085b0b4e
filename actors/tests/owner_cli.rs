//! The owner's filters, `annal search` and `annal owner-access` through the real binary, over
//! the daemon and with `--no-daemon`: what each filter returns, that a filtered-out event is
//! never printed, and that the owner's reads are audited whether or not they append the
//! contract's `access` event, while an agent's read always appends one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use support::Sandbox;

/// Captures three actions over the daemon's socket: a click in Firefox that failed (in the
/// session `work-1`), typing in a text editor that was confirmed, a scroll with no application
/// that was partial; then flushes.
fn captured(sandbox: &Sandbox) {
    sandbox.ok(&["enable"]);
    let mut raw = sandbox.connect_when_up();
    let session = raw.ask(json!({"op": "session_started", "session": "work-1"}));
    assert!(session.get("ok").is_some(), "{session}");
    for (capability, application, effect) in [
        ("ui.click", json!({"display_name": "Firefox"}), "failed"),
        (
            "ui.type_text",
            json!({"bundle_id": "org.gnome.TextEditor"}),
            "confirmed",
        ),
        ("ui.scroll", Value::Null, "partial"),
    ] {
        let mut start = json!({"op": "action_started", "capability": capability});
        if !application.is_null() {
            start["application"] = application;
        }
        if capability == "ui.click" {
            start["session"] = json!("work-1");
        }
        let started = raw.ask(start);
        let action = started["ok"]["action"].as_u64().unwrap();
        let completed = raw.ask(json!({
            "op": "action_completed",
            "action": action,
            "outcome": {"effect": effect, "route": "accessibility"},
        }));
        assert!(completed.get("ok").is_some(), "{completed}");
    }
    sandbox.ok(&["flush"]);
}

/// The events of a read's `--json` answer as (kind, capability, effect).
fn read(sandbox: &Sandbox, args: &[&str]) -> Vec<(String, String, String)> {
    let answer = sandbox.json(args);
    answer["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let text = |v: &Value| v.as_str().unwrap_or("-").to_owned();
            (
                text(&e["data"]["payload"]["kind"]),
                text(&e["data"]["capability"]),
                text(&e["data"]["payload"]["effect"]),
            )
        })
        .collect()
}

fn event(kind: &str, capability: &str, effect: &str) -> (String, String, String) {
    (kind.to_owned(), capability.to_owned(), effect.to_owned())
}

/// Each filter through `list`, `query` and `search`, over the daemon and then in-process
/// (`--no-daemon`), with the same answers; a filtered-out event never shows, in JSON or text.
#[test]
fn the_owners_filters_and_search_with_and_without_a_daemon() {
    let sandbox = Sandbox::new();
    captured(&sandbox);
    for prefix in [&[][..], &["--no-daemon"][..]] {
        if !prefix.is_empty() {
            sandbox.ok(&["stop"]);
        }
        let with = |args: &[&'static str]| [prefix, args].concat();
        assert_eq!(
            read(&sandbox, &with(&["list", "200", "--app", "FIREFOX"])),
            [
                event("action_started", "ui.click", "-"),
                event("action_completed", "ui.click", "failed"),
            ]
        );
        // --session takes the raw label (or the opaque id), as the contract's session_id.
        assert_eq!(
            read(
                &sandbox,
                &with(&["list", "--session", "work-1", "--app", "firefox"])
            ),
            [
                event("action_started", "ui.click", "-"),
                event("action_completed", "ui.click", "failed"),
            ]
        );
        assert!(
            read(
                &sandbox,
                &with(&["list", "--session", "work-1", "--capability", "ui.scroll"])
            )
            .is_empty()
        );
        assert_eq!(
            read(&sandbox, &with(&["list", "--outcome", "partial"])),
            [event("action_completed", "ui.scroll", "partial")]
        );
        assert_eq!(
            read(
                &sandbox,
                &with(&["query", "--capability", "ui.type_text", "--limit", "1"])
            ),
            [event("action_completed", "ui.type_text", "confirmed")],
            "the newest matching one"
        );
        assert_eq!(
            read(&sandbox, &with(&["search", "texteditor"])),
            [
                event("action_started", "ui.type_text", "-"),
                event("action_completed", "ui.type_text", "confirmed"),
            ]
        );
        assert_eq!(
            read(&sandbox, &with(&["search", "ui.", "--outcome", "failed"])),
            [event("action_completed", "ui.click", "failed")]
        );
        // Time bounds: everything is from the last hour, nothing from before it; a local
        // date (its midnight), a local time and an RFC 3339 time are read as well.
        let recent = read(&sandbox, &with(&["list", "200", "--since", "1h"]));
        assert!(recent.len() >= 7, "{recent:?}");
        assert!(read(&sandbox, &with(&["list", "--until", "1h"])).is_empty());
        let since_2000 = read(&sandbox, &with(&["list", "200", "--since", "2000-01-01"]));
        assert_eq!(
            since_2000[..recent.len()],
            recent[..],
            "and the last read's access"
        );
        assert!(read(&sandbox, &with(&["list", "--until", "2000-01-01 10:00"])).is_empty());
        assert!(
            read(
                &sandbox,
                &with(&["list", "--until", "2000-01-01T00:00:00Z"])
            )
            .is_empty()
        );
        // The text form shows only what matched.
        let text = sandbox.ok(&with(&["search", "firefox"]));
        assert!(text.contains("[Firefox]"), "{text}");
        assert!(
            !text.contains("ui.type_text") && !text.contains("ui.scroll"),
            "{text}"
        );
        let none = sandbox.ok(&with(&["list", "--app", "terminal"]));
        assert_eq!(none, "no events match.\n");
    }
}

/// `annal owner-access off`: the owner's reads append no `access` event but each is still in
/// `annal audit`; an agent's read appends its `access` event; `status --json` shows the
/// setting; `on` (here in-process, `--no-daemon`) brings the owner's access events back.
#[test]
fn the_owners_access_setting_with_and_without_a_daemon() {
    let sandbox = Sandbox::new();
    captured(&sandbox);
    let owner_audits = || {
        let audit = sandbox.json(&["audit"]);
        audit["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["actor"] == "owner")
            .count()
    };
    // The access events on disk and indexed: a flush first, so the last read's own access
    // event (appended by the writer after that read answered) is counted.
    let accesses = |operation: &str| {
        sandbox.ok(&["flush"]);
        sandbox.access_events(operation)
    };
    assert_eq!(sandbox.json(&["status"])["owner_access_events"], true);
    // On (the default): each counting read appends one access event of the owner's.
    let first = accesses("local_cli");
    assert_eq!(accesses("local_cli"), first + 1);

    let switched = sandbox.json(&["owner-access", "off"]);
    assert_eq!(switched["changed"], true);
    assert_eq!(sandbox.json(&["status"])["owner_access_events"], false);
    let text = sandbox.ok(&["status"]);
    assert!(text.contains("owner-access on"), "{text}");
    let audits = owner_audits();
    let off = accesses("local_cli");
    sandbox.ok(&["list", "5"]);
    sandbox.ok(&["search", "ui"]);
    assert_eq!(accesses("local_cli"), off, "no access event");
    assert_eq!(
        owner_audits(),
        audits + 4,
        "every read is still audited (the two counting reads too)"
    );

    // An agent's read appends its access event whatever the owner's setting.
    sandbox.ok(&["grant", "agent-a", "query"]);
    let mut raw = sandbox.connect_when_up();
    let answer = raw.ask(json!({
        "op": "call_tool", "actor": "agent-a", "tool": "history_query",
        "arguments": {"limit": 2},
    }));
    assert!(answer["ok"]["answer"]["events"].is_array(), "{answer}");
    drop(raw);
    assert_eq!(accesses("agent_query"), 1);
    // An agent may not pass the owner's filters.
    let mut raw = sandbox.connect_when_up();
    let refused = raw.ask(json!({
        "op": "call_tool", "actor": "agent-a", "tool": "history_query",
        "arguments": {"app": "Firefox"},
    }));
    assert_eq!(
        refused["ok"]["refusal"]["code"], "invalid_history_query",
        "{refused}"
    );
    drop(raw);

    // In-process: the setting is the store's, journaled.
    sandbox.ok(&["stop"]);
    let status = sandbox.json(&["--no-daemon", "status"]);
    assert_eq!(status["owner_access_events"], false, "{status}");
    let before = sandbox.json(&["--no-daemon", "query", "--limit", "200"]);
    let on = sandbox.json(&["--no-daemon", "owner-access", "on"]);
    assert_eq!(on["changed"], true);
    sandbox.ok(&["--no-daemon", "list", "5"]);
    let after = sandbox.json(&["--no-daemon", "query", "--limit", "200"]);
    let local_cli = |answer: &Value| {
        answer["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["data"]["payload"]["operation"] == "local_cli")
            .count()
    };
    assert_eq!(
        local_cli(&after),
        local_cli(&before) + 1,
        "the list's, once on"
    );
}
