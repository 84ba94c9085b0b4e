//! `annal mcp` as a real subprocess over stdio (JSON-RPC: initialize, tools/list, tools/call),
//! through the store's daemon started on demand, in a bare environment (HOME, XDG_STATE_HOME
//! and XDG_RUNTIME_DIR only; no D-Bus, so the key is in the kernel keyring).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Mcp, Raw, Sandbox};

/// A bounded-mode manifest with these terms, for both tools.
fn manifest(sandbox: &Sandbox, expires_after: &str, idle_timeout: &str) -> String {
    let text = format!(
        "version: 3\nexpires_after: {expires_after}\nidle_timeout: {idle_timeout}\n\
         resources:\n  computer_history:\n    operations:\n      - status\n      - query\n\
         allow:\n  tools:\n    - history_status\n    - history_query\n"
    );
    let path = sandbox.path(&format!("manifest-{expires_after}-{idle_timeout}.yaml"));
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// `count` actions (two events each) captured through the daemon socket, then flushed.
fn capture(sandbox: &Sandbox, count: usize) {
    let mut raw = Raw::connect(&sandbox.socket());
    assert!(
        raw.ask(json!({"op": "session_started", "session": "raw label e2e"}))["ok"].is_object()
    );
    for _ in 0..count {
        raw.action(json!({
            "capability": "input.pointer.click",
            "application": {"bundle_id": "org.example.Editor"},
            "session": "raw label e2e"
        }));
    }
    assert!(raw.ask(json!({"op": "flush"}))["ok"].is_object());
}

#[test]
fn tools_are_listed_per_actor_with_closed_schemas() {
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    let manifest = manifest(&sandbox, "1h", "10m");
    let mut a = Mcp::start(&sandbox, "agent-a", &["--manifest", &manifest]);
    let tools = a.tools();
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names, ["history_query", "history_status"]);
    for tool in &tools {
        let schema = &tool["inputSchema"];
        assert_eq!(schema["type"], "object", "{tool}");
        assert_eq!(schema["additionalProperties"], false, "{tool}");
        let description = tool["description"].as_str().unwrap();
        assert!(
            description.contains("without"),
            "consultation policy: {description}"
        );
    }
    let query = tools.iter().find(|t| t["name"] == "history_query").unwrap();
    let mut fields: Vec<&String> = query["inputSchema"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "cursor",
            "limit",
            "session_id",
            "since_sequence",
            "until_sequence"
        ]
    );
    let description = query["description"].as_str().unwrap();
    for phrase in [
        "resum",
        "metadata",
        "not a transcript",
        "enters your context",
        "unknown",
    ] {
        assert!(description.contains(phrase), "{phrase}: {description}");
    }
    // The status answer has the contract's one shape.
    let status = a.answered("history_status", json!({}));
    let mut keys: Vec<&String> = status.as_object().unwrap().keys().collect();
    keys.sort_unstable();
    assert_eq!(keys.len(), 11, "{status}");
    assert_eq!(status["enabled"], true);

    // A second actor with no grant is listed nothing and refused.
    let mut b = Mcp::start(&sandbox, "agent-b", &[]);
    assert!(b.tools().is_empty());
    assert_eq!(b.refused("history_status", json!({})), "not_granted");
    assert_eq!(b.refused("history_query", json!({})), "not_granted");
    // A tool that does not exist: refused, and audited as a refusal that names no tool.
    assert_eq!(a.refused("history_delete", json!({})), "unknown_tool");
    let audit = sandbox.json(&["audit", "--actor", "agent-a", "--denied"]);
    let entries = audit["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{audit}");
    assert_eq!(entries[0]["outcome"], "unknown_tool");
    assert_eq!(entries[0]["operation"], Value::Null);
    assert!(!audit.to_string().contains("history_delete"), "{audit}");
}

#[test]
fn one_grant_lists_one_tool_and_bad_arguments_get_their_codes() {
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    sandbox.ok(&["grant", "agent-q", "query", "--expires-after", "1h"]);
    let mut q = Mcp::start(&sandbox, "agent-q", &[]);
    assert_eq!(q.tool_names(), ["history_query"]);
    assert_eq!(q.refused("history_status", json!({})), "not_granted");
    assert_eq!(
        q.refused("history_query", json!({"limit": 5, "bogus": 1})),
        "invalid_history_query"
    );
    assert_eq!(
        q.refused("history_query", json!({"limit": 500})),
        "invalid_history_query"
    );
    assert_eq!(
        q.refused(
            "history_query",
            json!({"since_sequence": 9, "until_sequence": 3})
        ),
        "invalid_history_query_range"
    );
    let answer = q.answered("history_query", json!({"limit": 5}));
    assert_eq!(answer["metadata_only"], true);
    assert_eq!(answer["model_context_disclosure"], true);
}

#[test]
fn revocation_and_the_agents_switch_reach_a_running_server_on_its_next_call() {
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    let manifest = manifest(&sandbox, "1h", "10m");
    let mut a = Mcp::start(&sandbox, "agent-a", &["--manifest", &manifest]);
    let mut c = Mcp::start(&sandbox, "agent-c", &["--manifest", &manifest]);
    assert_eq!(a.answered("history_status", json!({}))["enabled"], true);
    assert_eq!(c.tool_names().len(), 2);

    // From another shell: revoke A. Its very next call is refused, its list is empty.
    sandbox.ok(&["revoke", "agent-a"]);
    assert_eq!(a.refused("history_status", json!({})), "revoked");
    assert!(a.tools().is_empty());
    // C is untouched.
    assert_eq!(c.answered("history_status", json!({}))["enabled"], true);

    // The global switch: every agent refused, none listed; then back.
    sandbox.ok(&["agents", "disable"]);
    assert_eq!(c.refused("history_query", json!({})), "agents_disabled");
    assert!(c.tools().is_empty());
    sandbox.ok(&["agents", "enable"]);
    assert_eq!(c.tool_names().len(), 2);
    assert_eq!(c.answered("history_status", json!({}))["enabled"], true);
}

#[test]
fn an_expired_manifest_and_an_idle_grant_are_refused() {
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    let short = manifest(&sandbox, "4s", "4s");
    let idle = manifest(&sandbox, "1h", "4s");
    let mut expiring = Mcp::start(&sandbox, "agent-e", &["--manifest", &short]);
    let mut idling = Mcp::start(&sandbox, "agent-i", &["--manifest", &idle]);
    assert_eq!(
        expiring.answered("history_status", json!({}))["enabled"],
        true
    );
    assert_eq!(
        idling.answered("history_status", json!({}))["enabled"],
        true
    );
    std::thread::sleep(Duration::from_millis(4_500));
    assert_eq!(expiring.refused("history_status", json!({})), "expired");
    assert!(expiring.tools().is_empty());
    assert_eq!(idling.refused("history_status", json!({})), "idle_timeout");
}

#[test]
fn pages_come_with_single_use_cursors_and_reads_leave_access_records() {
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    capture(&sandbox, 6);
    let manifest = manifest(&sandbox, "1h", "10m");
    let mut a = Mcp::start(&sandbox, "agent-a", &["--manifest", &manifest]);

    let first = a.answered("history_query", json!({"limit": 5}));
    assert_eq!(first["events"].as_array().unwrap().len(), 5);
    assert_eq!(first["has_more"], true);
    let cursor = first["cursor"].as_str().unwrap().to_owned();
    let second = a.answered("history_query", json!({"limit": 5, "cursor": cursor}));
    let sequences = |page: &Value| -> Vec<u64> {
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["data"]["sequence"].as_u64().unwrap())
            .collect()
    };
    let (newer, older) = (sequences(&first), sequences(&second));
    assert_eq!(older.len(), 5);
    assert!(
        older.iter().max() < newer.iter().min(),
        "{older:?} {newer:?}"
    );
    // Replayed, foreign-filtered and made-up cursors are refused.
    assert_eq!(
        a.refused("history_query", json!({"limit": 5, "cursor": cursor})),
        "cursor_replayed"
    );
    let third = second["cursor"].as_str().unwrap().to_owned();
    assert_eq!(
        a.refused("history_query", json!({"limit": 4, "cursor": third})),
        "cursor_filter_mismatch"
    );
    assert_eq!(
        a.refused("history_query", json!({"cursor": "00".repeat(152)})),
        "cursor_invalid"
    );
    // No raw label left the daemon.
    assert!(!first.to_string().contains("raw label e2e"));

    // One access record per non-empty agent read, none for an empty one.
    let before = sandbox.access_events("agent_query");
    assert_eq!(before, 2, "the two pages");
    let empty = a.answered("history_query", json!({"since_sequence": 1_000_000}));
    assert!(empty["events"].as_array().unwrap().is_empty());
    assert_eq!(sandbox.access_events("agent_query"), before);
    a.answered("history_query", json!({"limit": 1}));
    assert_eq!(sandbox.access_events("agent_query"), before + 1);
}

#[test]
fn with_history_disabled_nothing_is_captured_and_reads_still_work() {
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    sandbox.ok(&["disable"]);
    let status = sandbox.json(&["status"]);
    assert_eq!(status["status"]["enabled"], false);
    assert_eq!(status["key_store"], "keyutils");
    // The kernel keyring's caveat: said by doctor (and by enable), not by every status.
    let text = sandbox.ok(&["status"]);
    assert!(!text.contains("do not survive a reboot"), "{text}");
    let doctor = sandbox.run(&["doctor"]);
    let doctor = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.contains("do not survive a reboot"), "{doctor}");
}

/// Issue 27, finding 1: a `history_query` argument too large for one socket frame once wedged
/// the bridge (the client wrote nothing and waited for a reply forever, holding the link).
/// Now it is refused at once, the bridge keeps answering, and it exits when stdin closes.
#[test]
fn an_oversized_argument_is_refused_at_once_and_the_bridge_stays_usable() {
    /// Above the socket's 512 KiB frame once wrapped in a `call_tool` request.
    const OVERSIZED_ARGUMENT_BYTES: usize = 530_000;
    /// Longest the bridge may take to exit once its stdin closed (rmcp's drain is 5 s).
    const EXIT_DEADLINE_SECS: u64 = 20;
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    let manifest = manifest(&sandbox, "1h", "10m");
    let mut a = Mcp::start(&sandbox, "agent-a", &["--manifest", &manifest]);
    let huge = "x".repeat(OVERSIZED_ARGUMENT_BYTES);
    assert_eq!(
        a.refused("history_query", json!({"session_id": huge})),
        "invalid_history_query"
    );
    // The bridge is not wedged: the list and a normal call still answer.
    assert_eq!(a.tools().len(), 2);
    assert_eq!(a.answered("history_status", json!({}))["enabled"], true);
    let answer = a.answered("history_query", json!({"limit": 5}));
    assert_eq!(answer["metadata_only"], true);
    // Only the normal read left an access record; the refused one never reached the store.
    assert!(!answer["events"].as_array().unwrap().is_empty());
    assert_eq!(sandbox.access_events("agent_query"), 1);
    // The end of stdin ends the server, in bounded time.
    let status = a.close_input(Duration::from_secs(EXIT_DEADLINE_SECS));
    assert!(
        status.is_some(),
        "annal mcp still ran {EXIT_DEADLINE_SECS} s after its stdin closed"
    );
}

/// Issue 27, finding 6: a grant before the first `enable` said "the engine did not answer in
/// time" (exit 3); it says what to do, as bad usage, and grants nothing. (A narrowing before
/// enable, `revoke` or `agents disable`, is kept by the engine: not this case.)
#[test]
fn a_grant_before_enable_says_to_enable_first() {
    let sandbox = Sandbox::new();
    for args in [&["grant", "agent-a", "status"][..], &["agents", "enable"]] {
        let output = sandbox.run(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("history is not enabled: run `annal enable`"),
            "{args:?}: {stderr}"
        );
        assert!(output.stdout.is_empty(), "{args:?}");
    }
    sandbox.ok(&["enable"]);
    let mut a = Mcp::start(&sandbox, "agent-a", &[]);
    assert!(a.tools().is_empty(), "nothing was granted before enable");
    sandbox.ok(&["grant", "agent-a", "status"]);
    assert_eq!(a.tool_names(), ["history_status"]);
}

/// Issue 29's policy acceptance, end to end through the binary: a revocation sticks when the
/// agent's MCP server restarts with the same manifest (no tools, calls refused `revoked`) until
/// the owner re-approves explicitly; the owner sees the grants with their expiry, and the
/// denial the MCP client met in `annal audit --denied`; revoking an unknown actor exits 2.
#[test]
fn a_revocation_sticks_across_restarts_and_the_owner_sees_grants_and_denials() {
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    capture(&sandbox, 3);
    let manifest = manifest(&sandbox, "1h", "10m");
    {
        let mut a = Mcp::start(&sandbox, "agent-a", &["--manifest", &manifest]);
        assert_eq!(a.tool_names().len(), 2);
    }
    let grants = sandbox.json(&["grants"]);
    let listed = grants["grants"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{grants}");
    assert!(listed.iter().all(|g| g["actor"] == "agent-a"
        && g["source"] == "manifest"
        && g["live"] == true
        && g["expires_at_ms"].as_u64() > g["last_used_ms"].as_u64()));

    sandbox.ok(&["revoke", "agent-a"]);
    {
        let mut a = Mcp::start(&sandbox, "agent-a", &["--manifest", &manifest]);
        assert!(
            a.tools().is_empty(),
            "a revoked actor is listed no tools after a restart"
        );
        assert_eq!(a.refused("history_status", json!({})), "revoked");
    }
    let denied = sandbox.json(&["audit", "--denied"]);
    let entries = denied["entries"].as_array().unwrap();
    assert!(
        entries
            .iter()
            .any(|e| e["actor"] == "agent-a" && e["verdict"] == "revoked"),
        "{denied}"
    );
    assert!(
        entries.iter().all(|e| e["verdict"] != "allowed"),
        "{denied}"
    );

    {
        let mut a = Mcp::start(
            &sandbox,
            "agent-a",
            &["--manifest", &manifest, "--reapprove"],
        );
        assert_eq!(
            a.tool_names().len(),
            2,
            "the owner's re-approval restores access"
        );
    }
    let grants = sandbox.json(&["grants"]);
    assert!(
        grants["grants"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["source"] == "manifest_reapproved"),
        "{grants}"
    );
    let nobody = sandbox.run(&["revoke", "nobody"]);
    assert_eq!(nobody.status.code(), Some(2), "{nobody:?}");
}

/// `annal preflight` never fails the host: before any store exists it says to continue
/// without history (exit 0); with a grant and history it returns the newest slice; a revoked
/// actor continues without history (exit 0); only bad usage exits 2.
#[test]
fn preflight_never_fails_the_host() {
    let sandbox = Sandbox::new();
    let before = sandbox.run(&["preflight", "--actor", "host", "--json"]);
    assert_eq!(before.status.code(), Some(0), "{before:?}");
    let verdict: Value = serde_json::from_slice(&before.stdout).unwrap();
    assert_eq!(
        verdict["consultation"]["verdict"], "continue_without_history",
        "{verdict}"
    );
    assert!(verdict["consultation"]["reason"].is_string());
    let bad = sandbox.run(&["preflight", "--actor", "host", "--limit", "0"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");

    sandbox.ok(&["enable"]);
    capture(&sandbox, 3);
    let said = sandbox.ok(&["grant", "host", "status"]);
    assert!(
        said.contains(" until 20"),
        "grant prints its expiry: {said}"
    );
    let granted = sandbox.json(&["grant", "host", "query"]);
    assert!(
        granted["expires_at_ms"].as_u64() > granted["idle_deadline_ms"].as_u64(),
        "{granted}"
    );
    let usable = sandbox.json(&["preflight", "--actor", "host", "--limit", "2"]);
    assert_eq!(usable["consultation"]["verdict"], "use", "{usable}");
    assert_eq!(usable["events"].as_array().map(Vec::len), Some(2));
    sandbox.ok(&["revoke", "host"]);
    let revoked = sandbox.run(&["preflight", "--actor", "host", "--json"]);
    assert_eq!(revoked.status.code(), Some(0));
    let verdict: Value = serde_json::from_slice(&revoked.stdout).unwrap();
    assert_eq!(
        verdict["consultation"],
        json!({"verdict": "continue_without_history", "reason": "status_denied"})
    );
}

/// MCP conventions a host relies on: the server declares `listChanged`; each tool carries an
/// `outputSchema` that every successful result validates against (a status, a page with its
/// cursor, the last page), and annotations (read only, closed world, status idempotent); a
/// revocation and a grant made from another process reach a running server's client as
/// `notifications/tools/list_changed`, without any call from it.
#[test]
fn tools_carry_output_schemas_and_annotations_and_changes_are_announced() {
    /// Longest the test waits for the bridge's poll to notice a policy change, in seconds (a
    /// few of its intervals, generous under load).
    const NOTICE_DEADLINE_SECS: u64 = 30;
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    sandbox.ok(&["grant", "agent-a", "status", "--expires-after", "1h"]);
    sandbox.ok(&["grant", "agent-a", "query", "--expires-after", "1h"]);
    let mut raw = Raw::connect(&sandbox.socket());
    for _ in 0..7 {
        raw.action(json!({"capability": "window.focus"}));
    }
    drop(raw);
    let mut a = Mcp::start(&sandbox, "agent-a", &[]);
    assert_eq!(
        a.init["result"]["capabilities"]["tools"]["listChanged"], true,
        "{}",
        a.init
    );
    let tools = a.tools();
    let schema_of = |name: &str| {
        let tool = tools.iter().find(|t| t["name"] == name).unwrap();
        jsonschema::validator_for(&tool["outputSchema"]).unwrap()
    };
    for tool in &tools {
        let hints = &tool["annotations"];
        assert_eq!(hints["readOnlyHint"], true, "{tool}");
        assert_eq!(hints["openWorldHint"], false, "{tool}");
        let idempotent = tool["name"] == "history_status";
        assert_eq!(hints["idempotentHint"] == true, idempotent, "{tool}");
    }
    let status = a.answered("history_status", json!({}));
    assert!(schema_of("history_status").is_valid(&status), "{status}");
    let first = a.answered("history_query", json!({"limit": 3}));
    assert_eq!(first["has_more"], true, "{first}");
    assert!(schema_of("history_query").is_valid(&first), "{first}");
    let last = a.answered("history_query", json!({"limit": 200}));
    assert!(schema_of("history_query").is_valid(&last), "{last}");
    // The schema is not a blank check: a result with a field it does not name fails it.
    let mut forged = last.clone();
    forged["window_title"] = json!("Inbox - Mail");
    assert!(!schema_of("history_query").is_valid(&forged));

    // A revocation from the owner's shell: the client hears of it without asking.
    let deadline = Duration::from_secs(NOTICE_DEADLINE_SECS);
    sandbox.ok(&["revoke", "agent-a"]);
    assert!(
        a.wait_notification("notifications/tools/list_changed", deadline),
        "no list_changed after the revocation"
    );
    assert!(a.tools().is_empty());
    // A grant again: announced too.
    sandbox.ok(&["grant", "agent-a", "status", "--expires-after", "1h"]);
    assert!(
        a.wait_notification("notifications/tools/list_changed", deadline),
        "no list_changed after the grant"
    );
    assert_eq!(a.tool_names(), ["history_status"]);
}
